"""Peak CUDA memory per phase of a real training step (developer tool, needs a GPU + torch +
transformers): the final arbiter for `tcalc memory`'s peak.

For each model × precision recipe × attention implementation: build the model on the GPU from
its config (random weights), an AdamW optimizer (torch's default implementation for CUDA
tensors, i.e. foreach), then run two training steps on random tokens with labels. For each
step it records torch.cuda.max_memory_allocated() within each phase (forward, backward,
optimizer step; the peak is reset at the start of each) and memory_allocated() after it.
Step 1 allocates the optimizer states; step 2 is the steady state.

Recipes: fp32 (fp32 weights, no autocast), amp_bf16 (fp32 weights under
torch.autocast(bfloat16), as the Hugging Face Trainer runs bf16=True), bf16 (weights cast to
bfloat16, pure 16-bit, AdamW states in bf16).

    python tools/measure_peak_cuda.py --out peak_cuda.json

--lora R: LoRA fine-tuning instead, with peft's defaults but the rank
(target_modules="all-linear", adapters kept fp32 over the base), recipes lora_bf16 (base
cast to bfloat16, no autocast) and lora_amp_bf16 (the same under torch.autocast(bfloat16), as
the Trainer runs bf16=True over a bf16 base), AdamW over the adapters only; models
llama-3.2-1b (B=2, T=2048) and llama-3.1-8b (its config.json's shape keys, B=1, T=2048).
tests/data/peak_lora_cuda_h100.json was written by

    python tools/measure_peak_cuda.py --lora 16 --out peak_lora_cuda_h100.json

--checkpointing: gradient checkpointing as the Hugging Face Trainer runs it
(model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False}),
which also turns use_cache off), on the base model before peft wraps it; with --lora, the
recipes above, with --lora-targets the adapted modules (q_proj,v_proj or all-linear);
without, full training in fp32, amp_bf16 and bf16, SDPA only.
tests/data/peak_checkpointing_cuda_h100.json was written by

    python tools/measure_peak_cuda.py --checkpointing --out full.json
    python tools/measure_peak_cuda.py --checkpointing --lora 16 --out lora_all.json
    python tools/measure_peak_cuda.py --checkpointing --lora 16 --lora-targets q_proj,v_proj \
        --out lora_qv.json

(their "runs" concatenated, each row saying its own settings); --quant bnb-nf4 with --lora
loads the base in bitsandbytes NF4 (QLoRA without prepare_model_for_kbit_training, so norms,
embeddings and the head stay bf16): tests/data/peak_qlora_cuda_h100.json was written by

    python tools/measure_peak_cuda.py --lora 16 --quant bnb-nf4 --out a.json
    python tools/measure_peak_cuda.py --lora 16 --quant bnb-nf4 --checkpointing \
        --models llama-3.1-8b --out b.json

and the base grid with
use_cache=False (transformers' default in training is the config's use_cache, True, whose
DynamicCache concatenates copies of K and V) into peak_no_cache_cuda_h100.json:

    python tools/measure_peak_cuda.py --no-use-cache --out peak_no_cache_cuda_h100.json

and LoRA over OPT-125M's shape (LayerNorm, separate projections) into
tests/data/peak_lora_opt_cuda_h100.json:

    python tools/measure_peak_cuda.py --lora 16 --models opt-125m --out lora_opt.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform

import torch

MIB = 1 << 20

# The grid: GPT-2 small at B=8, T=1024 and a Llama-3.2-1B-shaped model at B=2,
# T=2048 (meta-llama/Llama-3.2-1B config.json: its shape keys).
MODELS = {
    "gpt2": ({"model_type": "gpt2"}, 8, 1024),
    "llama-3.2-1b": ({"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
                      "intermediate_size": 8192, "num_hidden_layers": 16,
                      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                      "max_position_embeddings": 131072, "tie_word_embeddings": True,
                      "rms_norm_eps": 1e-5, "rope_theta": 500000.0}, 2, 2048),
}
# The op graph's newer layouts, as their published config.json files give them: Qwen/Qwen3-0.6B
# (per-head q_norm, k_norm; head_dim 128 over 1024 wide) and allenai/OLMo-2-0425-1B (norms over
# the width, post-sublayer norms, RoPE in fp32)
MODELS["qwen3-0.6b"] = ({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
                         "intermediate_size": 3072, "num_hidden_layers": 28,
                         "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                         "max_position_embeddings": 40960, "tie_word_embeddings": True,
                         "rms_norm_eps": 1e-6, "rope_theta": 1000000.0}, 2, 2048)
MODELS["olmo-2-1b"] = ({"model_type": "olmo2", "vocab_size": 100352, "hidden_size": 2048,
                        "intermediate_size": 8192, "num_hidden_layers": 16,
                        "num_attention_heads": 16, "num_key_value_heads": 16,
                        "max_position_embeddings": 4096, "tie_word_embeddings": False,
                        "rms_norm_eps": 1e-6, "rope_theta": 500000.0}, 2, 2048)
RECIPES = ("fp32", "amp_bf16", "bf16")
LORA_MODELS = {
    "llama-3.2-1b": MODELS["llama-3.2-1b"],
    "llama-3.1-8b": ({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
                      "intermediate_size": 14336, "num_hidden_layers": 32,
                      "num_attention_heads": 32, "num_key_value_heads": 8,
                      "max_position_embeddings": 131072, "tie_word_embeddings": False,
                      "rms_norm_eps": 1e-5, "rope_theta": 500000.0}, 1, 2048),
}
# OPT-125M's shape (facebook/opt-125m config.json): LayerNorm and separate Q, K, V
# projections, which autocast over a 16-bit base feeds with per-projection casts
LORA_MODELS["opt-125m"] = ({"model_type": "opt", "vocab_size": 50272, "hidden_size": 768,
                            "ffn_dim": 3072, "num_hidden_layers": 12,
                            "num_attention_heads": 12, "max_position_embeddings": 2048,
                            "word_embed_proj_dim": 768, "do_layer_norm_before": True}, 8, 1024)
# LoRA over the op graph's newer layouts, as their published config.json files give them:
# microsoft/Phi-3-mini-4k-instruct (fused qkv_proj and gate_up_proj, rotary concatenation) and
# Qwen/Qwen3-8B (per-head q_norm and k_norm)
LORA_MODELS["phi-3-mini"] = ({"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
                              "intermediate_size": 8192, "num_hidden_layers": 32,
                              "num_attention_heads": 32, "num_key_value_heads": 32,
                              "max_position_embeddings": 4096, "tie_word_embeddings": False,
                              "rms_norm_eps": 1e-5, "rope_theta": 10000.0}, 1, 2048)
LORA_MODELS["qwen3-8b"] = ({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
                            "intermediate_size": 12288, "num_hidden_layers": 36,
                            "num_attention_heads": 32, "num_key_value_heads": 8,
                            "head_dim": 128, "max_position_embeddings": 40960,
                            "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
                            "rope_theta": 1000000.0}, 1, 2048)
LORA_RECIPES = ("lora_bf16", "lora_amp_bf16")
ATTENTIONS = ("sdpa", "eager")


def _quantised(cfg, attention: str):  # type: ignore[no-untyped-def]
    """The model with its linear layers in bitsandbytes NF4 (bf16 compute), as
    from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True)) loads a
    checkpoint: random bf16 weights saved once, then loaded quantised (lm_head stays bf16)."""
    import tempfile

    import transformers

    key = cfg.to_json_string()
    if key not in _SAVED:  # one checkpoint per shape, reused by every recipe
        with torch.device("cuda"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        _SAVED[key] = tempfile.mkdtemp()
        model.save_pretrained(_SAVED[key])
        del model
        torch.cuda.empty_cache()
    return transformers.AutoModelForCausalLM.from_pretrained(
        _SAVED[key], attn_implementation=attention, dtype=torch.bfloat16, device_map="cuda",
        quantization_config=transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch.bfloat16))


_SAVED: dict[str, str] = {}


def measure(config: dict, batch: int, seq: int, recipe: str, attention: str,
            lora: int = 0, checkpointing: bool = False,
            targets: str = "all-linear", use_cache: bool | None = None,
            quant: str = "") -> dict:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(**config)
    if quant:
        model = _quantised(cfg, attention)
    else:
        with torch.device("cuda"):  # initialised on the GPU: an 8B model in seconds
            model = transformers.AutoModelForCausalLM.from_config(
                cfg, attn_implementation=attention)
    if recipe in ("bf16", "lora_bf16", "lora_amp_bf16") and not quant:
        model = model.to(torch.bfloat16)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(
            r=lora, target_modules=targets if targets == "all-linear" else targets.split(",")))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
    torch.cuda.synchronize()
    out: dict = {"params": params, "batch": batch, "seq_len": seq, "recipe": recipe,
                 "attention": attention, "dropout": getattr(cfg, "resid_pdrop", None),
                 "checkpointing": checkpointing, "lora_rank": lora,
                 "use_cache": use_cache, "quant": quant or None,
                 "bitsandbytes": __import__("bitsandbytes").__version__ if quant else None,
                 "lora_targets": targets if lora else None,
                 "after_setup_mib": torch.cuda.memory_allocated() / MIB, "steps": []}
    for _ in range(2):
        step = {}
        torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16,
                            enabled=recipe in ("amp_bf16", "lora_amp_bf16")):
            loss = model(input_ids=ids, labels=ids, use_cache=use_cache).loss
        torch.cuda.synchronize()
        step["forward_peak_mib"] = torch.cuda.max_memory_allocated() / MIB
        step["after_forward_mib"] = torch.cuda.memory_allocated() / MIB
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        step["backward_peak_mib"] = torch.cuda.max_memory_allocated() / MIB
        step["after_backward_mib"] = torch.cuda.memory_allocated() / MIB
        del loss
        torch.cuda.reset_peak_memory_stats()
        opt.step()
        torch.cuda.synchronize()
        step["optimizer_peak_mib"] = torch.cuda.max_memory_allocated() / MIB
        step["after_optimizer_mib"] = torch.cuda.memory_allocated() / MIB
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        step["after_zero_grad_mib"] = torch.cuda.memory_allocated() / MIB
        out["steps"].append(step)
    out["reserved_mib"] = torch.cuda.max_memory_reserved() / MIB
    del model, opt, ids
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank: fine-tuning runs instead")
    ap.add_argument("--lora-targets", default="all-linear")
    ap.add_argument("--checkpointing", action="store_true",
                    help="gradient checkpointing (non-reentrant, as the HF Trainer runs it)")
    ap.add_argument("--models", default="", help="a comma-separated subset of the models")
    ap.add_argument("--quant", default="", choices=("", "bnb-nf4"),
                    help="with --lora: QLoRA, the base loaded in bitsandbytes NF4")
    ap.add_argument("--no-use-cache", action="store_true",
                    help="use_cache=False in the forward (default: the model's own choice)")
    args = ap.parse_args()
    import transformers

    rows = []
    models, recipes = (LORA_MODELS, LORA_RECIPES) if args.lora else (MODELS, RECIPES)
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models.split(",")}
    attentions = ("sdpa",) if args.checkpointing or args.quant else ATTENTIONS
    for name, (config, batch, seq) in models.items():
        for recipe in recipes:
            for attention in attentions:
                try:
                    row = measure(config, batch, seq, recipe, attention, args.lora,
                                  args.checkpointing, args.lora_targets,
                                  False if args.no_use_cache else None, args.quant)
                except torch.cuda.OutOfMemoryError as e:
                    row = {"error": f"out of memory: {str(e)[:120]}"}
                    torch.cuda.empty_cache()
                row["model"] = name
                rows.append(row)
                print(json.dumps(row), flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__, "cuda": torch.version.cuda,
            "peft": __import__("peft").__version__ if args.lora else None,
            "python": platform.python_version(),
            "how": "tools/measure_peak_cuda.py: max_memory_allocated per phase, 2 steps"}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
