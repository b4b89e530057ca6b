"""The values each choice option accepts, declared once: the core validates against these
tuples and the CLI offers them. No imports, so the CLI can read it at start-up without
loading the core."""

PRECISIONS = ("fp32", "fp16", "bf16")
# how a framework trains (recipes.py): its precision, adapters' dtype and loss; amp is hf's
# old name. megatron and deepspeed keep a 16-bit model beside fp32 master weights
RECIPES = ("hf", "amp", "torchtune", "litgpt", "megatron", "deepspeed")
SIXTEEN_BIT_RECIPES = ("megatron", "deepspeed")
ADAPTER_DTYPES = ("fp32", "bf16", "fp16")  # LoRA adapters' dtype (memory)
# where the logits become fp32 for the loss: in transformers' loss function (loss), inside
# the model (model: torchtune's output(h).float()), or never (LitGPT's 16-bit cross-entropy)
LOGITS_FP32 = ("loss", "model", "never")
# the peak reported: torch.cuda.max_memory_allocated, max_memory_reserved, or nvidia-smi's
# per-process memory (reserved + the CUDA context)
METRICS = ("allocated", "reserved", "nvidia-smi")
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
TOPICS = ("params", "attention", "ffn", "embeddings", "memory", "flops", "step")  # tcalc explain
