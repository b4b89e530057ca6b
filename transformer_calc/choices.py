"""The values each choice option accepts, declared once: the core validates against these
tuples and the CLI offers them. No imports, so the CLI can read it at start-up without
loading the core."""

PRECISIONS = ("fp32", "fp16", "bf16")
RECIPES = ("amp", "megatron")  # how mixed precision runs: torch AMP, or Megatron-LM/DeepSpeed
OPTIMIZERS = ("adamw", "adam", "adamw8bit", "sgd", "sgd-momentum", "adafactor", "lion")
ATTENTIONS = ("eager", "sdpa", "flash")  # attention implementation (memory)
DEVICES = ("cuda", "cpu")
# SDPA's kernel (memory): auto = as torch 2.13 picks it for the device, dtype, dropout and heads
SDPA_KERNELS = ("auto", "flash", "efficient", "math", "cpu_flash")
# how MoE experts run (memory): auto = transformers 5.23's default for the class (grouped_mm
# where its experts take @use_experts_implementation, else its own per-expert loop)
EXPERTS_IMPLS = ("auto", "grouped_mm", "eager")
OPTIMIZER_IMPLS = ("foreach", "fused", "for-loop")  # torch optimizer implementation (memory)
RECOMPUTE = ("none", "selective", "full")
PATTERNS = ("dense", "local", "strided", "fixed", "longformer", "bigbird")  # attention (FLOPs)
TOPICS = ("params", "attention", "ffn", "embeddings", "memory", "flops")  # tcalc explain
