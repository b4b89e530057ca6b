"""Memory: model states, activations, KV cache and inference weights -> Breakdown (bytes).

Pure: no I/O. Every byte count is an exact integer; the formulas and their sources are in
the comments and in each item's formula.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from transformer_calc.breakdown import Breakdown, Item
from transformer_calc.choices import (
    ADAPTER_DTYPES,
    ATTENTIONS,
    DEVICES,
    EXPERTS_IMPLS,
    LOGITS_FP32,
    METRICS,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
    RECIPES,
    SDPA_KERNELS,
    SIXTEEN_BIT_RECIPES,
)
from transformer_calc.errors import TcalcError
from transformer_calc.flops import DENSE, pattern_keys
from transformer_calc.lora import Adapted, adapted_layers, lora_params
from transformer_calc.params import CATEGORIES, by_category, category, count_params, symbols
from transformer_calc.plan import (
    FFN,
    Attention,
    Mixer,
    group_of_layer,
    layers_before,
    local_symbols,
    plan_of,
)
from transformer_calc.quant import FORMATS, weight_format_bytes
from transformer_calc.spec import ModelSpec

if TYPE_CHECKING:
    from transformer_calc.costs.timeline import Step, Timeline

# Quantised weight formats: bits per weight, and one fp16 scale per group of weights
# (GPTQ/AWQ-style group quantisation; group 128 is their common default).
QUANT_BITS = {"int8": 8, "int4": 4}
SCALE_BYTES = 2


def kv_elements_per_token(spec: ModelSpec) -> int:
    """Cached elements per token of context, all layers, while the context fits every window
    (kv_cache_elements bounds sliding and chunked layers).

    Per attention layer (plan.Attention.kv_per_token): K and V of each K/V head, so MQA/GQA
    shrink it by n_heads / n_kv_heads; MLA keeps its latent. An encoder-decoder's
    cross-attention caches the encoder output's K/V per source token, counted here per token as
    well (equal source and target lengths). Encoder-only models are counted as if used causally.
    """
    return sum(n * a.kv_per_token() for n, a in _caching_attention(spec))


def kv_cache_elements(spec: ModelSpec, context: int, block: int = 0, tp: int = 1) -> int:
    """Cached elements for one sequence of ``context`` tokens: a sliding-window (or chunked)
    layer keeps at most its window, every other attention layer all of the context. ``block``:
    a paged cache's block of tokens (vLLM's block_size, 16 by default there): each layer's
    tokens are allocated in whole blocks. ``tp``: on one tensor-parallel rank
    (Attention.kv_per_token: K/V heads split, then replicated; MLA's latent whole)."""
    def paged(tokens: int) -> int:
        return -(-tokens // block) * block if block > 1 else tokens

    # (DeepSeek-V4's compressed layers keep more than tokens of K and V: Attention.v4_cache;
    # its one K=V head, like MLA's latent, is whole on every rank)
    return sum(n * (a.v4_cache(context) if a.o_groups else a.kv_per_token(tp)
                    * paged(context if a.cross else a.cached_tokens(context)))
               for n, a in _caching_attention(spec))


def recurrent_state_elements(spec: ModelSpec) -> tuple[int, int]:
    """(convolution state, recurrent state) values one sequence keeps in the recurrent
    layers, whatever the context (Mixer.state_per_sequence, summed over the layers)."""
    conv = ssm = 0
    for g in plan_of(spec).groups:
        m = g.block.mixer
        if m is not None:
            c, s = m.state_per_sequence()
            conv, ssm = conv + g.count * c, ssm + g.count * s
    return conv, ssm


def _caching_attention(spec: ModelSpec) -> list[tuple[int, Attention]]:
    """(layers, attention) of every attention sublayer that keeps a cache in generation: an
    encoder-decoder's decoder (self and cross), or every layer of a one-stack model."""
    enc_dec = spec.arch == "encoder-decoder"
    return [(g.count, a) for g in plan_of(spec).groups
            if not (enc_dec and g.name.startswith("encoder"))
            for a in (g.block.attn, g.block.cross) if a is not None]


def weight_bytes(params: int, dtype: str, group_size: int = 128) -> int:
    """Bytes of weights stored in ``dtype``; int8/int4 add one fp16 scale per group."""
    from transformer_calc.hardware import DTYPE_BYTES

    if dtype in QUANT_BITS:
        if group_size < 1:
            raise TcalcError(f"--group-size: expected an integer >= 1, got {group_size}")
        data = math.ceil(params * QUANT_BITS[dtype] / 8)
        return data + math.ceil(params / group_size) * SCALE_BYTES
    if dtype not in DTYPE_BYTES:
        raise TcalcError(f"--dtype: unknown dtype '{dtype}' (known: {', '.join(DTYPE_BYTES)})")
    return math.ceil(params * DTYPE_BYTES[dtype])


# -- model states --------------------------------------------------------------------------

# Optimizer state bytes per parameter (Hugging Face performance docs, "Anatomy of a model's
# memory": AdamW 8 = two fp32 moments, 8-bit AdamW 2, SGD with momentum 4). Lion keeps one
# momentum (Chen et al. 2023). Adafactor is computed from shapes (adafactor_state_bytes).
OPTIMIZER_BYTES = {"adamw": 8, "adam": 8, "adamw8bit": 2, "sgd": 0, "sgd-momentum": 4,
                   "lion": 4}
OPTIMIZER_SOURCE = {
    "adamw": "2 fp32 moments (HF performance docs: 8 bytes)",
    "adam": "2 fp32 moments (HF performance docs: 8 bytes)",
    "adamw8bit": "2 8-bit moments (bitsandbytes; HF performance docs: 2 bytes)",
    "sgd": "no state",
    "sgd-momentum": "1 fp32 momentum (HF performance docs: 4 bytes)",
    "lion": "1 fp32 momentum (Chen et al. 2023)",
    "adafactor": "factored second moment: rows + columns per matrix, fp32 (Shazeer & Stern "
                 "2018); no first moment (beta1 = None, the HF default)",
}


def adafactor_state_elements(params_breakdown) -> int:  # type: ignore[no-untyped-def]
    """Adafactor's second-moment statistics: for a tensor of shape (..., r, c) it keeps a row
    and a column vector per leading index (r + c values); vectors keep one value each."""
    total = 0
    for _, count, _, _, repeat, _, _, _, shape in params_breakdown.rows:
        if not count:
            continue
        dims: tuple[int, ...] = shape or (count,)  # a vector where none is given
        if len(dims) >= 2:
            lead = math.prod(dims[:-2])
            total += lead * (dims[-2] + dims[-1]) * repeat
        else:
            total += count * repeat
    return total


def fused_qkv_correction(spec: ModelSpec) -> int:
    """Adafactor factors the fused QKV matrix (E, (H + 2·Hkv)·dh) as one: E + 3 widths, not
    three separate (E + width) pairs. Returns the element difference per attention block."""
    if not spec.fused_qkv:
        return 0
    E = spec.d_model
    return -2 * E  # (E + qw + 2kvw) - [(qw + E) + 2·(kvw + E)]


# -- activations ---------------------------------------------------------------------------

# Tensors of size B·T·d_ff an activation function keeps for backward, besides its output
# (which the next matmul keeps). Measured with tools/measure_activations.py: HF's Python
# NewGELUActivation keeps x (for pow), x (for mul), 0.5·x and tanh(...): 4. A native GELU or
# SiLU keeps its input: 1. ReLU, sigmoid and tanh keep their output, which the next matmul
# keeps anyway: 0.
# relu2 (squared ReLU, Primer; HF ReLUSquaredActivation) keeps relu's output, which the square
# reads too: 1 (measured on Nemotron-H's MLP: tools/measure_mlp.py).
# gpt-oss's clamped SwiGLU (GptOssExperts._apply_gate) keeps its fused gate_up output (2 widths:
# the clamps read strided views of it), the clamped gate and its sigmoid, glu and up + 1: with
# the gated product's 2, 4 more (measured: the listing of tools/measure_activations_hf.py's
# gpt_oss variant, 6 · d_ff per routed token besides the down projection's input).
# xIELU's Python path (transformers' XIELUActivation._xielu_python): torch.where over
# α_p·x·x + β·x and (expm1(min(x, eps)) − x)·α_n + β·x keeps x, α_p·x, the expm1 result and
# expm1 − x, and where's 1-byte condition (x > 0; its own row)
ACT_SAVES = {"relu2": 1, "gelu_new": 4, "gelu": 1, "gelu_tanh": 1, "silu": 1, "swish": 1,
             "swiglu_oss": 4, "relu": 0, "xielu": 4,
             "sigmoid": 0, "tanh": 0, "identity": 0}
RESULT_SAVERS = {"relu", "sigmoid", "tanh", "identity"}


# Flash attention's largest head size in torch 2.13 (sdp_utils.cpp, check_head_dim_size_flash)
FLASH_MAX_HEAD = 256
KERNELS = {"eager": "transformers' eager attention (Python: matmul, softmax, matmul)",
           "flash": "a flash kernel: the output and a B·H·T log-sum-exp, no T² tensor",
           "efficient": "SDPA's memory-efficient kernel (fp32 on CUDA, K/V not repeated): "
                        "the output and a log-sum-exp",
           "math": "SDPA's math kernel: the probabilities, in fp32, as eager keeps them",
           "cpu_flash": "SDPA's CPU flash kernel (no dropout): q, k, v, the output and a "
                        "log-sum-exp"}


EXPERTS_NOTE = {
    "grouped_mm": "the routed slots sorted by expert, one grouped matmul per projection",
    "every_expert": "every token goes through every expert, scaled by the router's scores "
                    "(zero outside its top-k), as batched matmuls",
    "eager": "a loop over the experts, each indexing its tokens and index_add_-ing its "
             "scaled output back"}


# chunk_kimi_delta_attention's per-channel fp32 operands kept per padded token (see
# mixer_block), and KimiLinearRMSNormGated's per-channel fp32 tensors
RULE_KDA = 9
GATED_NORM_KDA = 4


def experts_impl(spec: ModelSpec, experts: str) -> str:
    """How transformers 5.23 runs a mixture of experts: --experts, or (auto) its default,
    get_correct_experts_implementation's grouped_mm for experts modules that take
    @use_experts_implementation (spec.experts_grouped), else eager. Eager is the class's own
    forward: a loop over the experts hit, or for Llama4TextMoe every expert run on every token
    ("every_expert", spec.experts_every_token)."""
    if experts not in EXPERTS_IMPLS:
        raise TcalcError(f"--experts: expected one of {', '.join(EXPERTS_IMPLS)}")
    if not spec.experts_grouped:
        if experts == "grouped_mm":
            raise TcalcError("--experts grouped_mm: this model's experts have no grouped_mm "
                             "path in transformers 5.23 (their class runs "
                             + ("every expert on every token" if spec.experts_every_token
                                else "its own loop over the experts") + "); use auto or eager")
        return "every_expert" if spec.experts_every_token else "eager"
    return "grouped_mm" if experts == "auto" else experts


def attention_kernel(spec: ModelSpec, attention: str, device: str, act_bytes: int,
                     dropout: bool, override: str = "auto") -> str:
    """Which kernel computes attention, as torch 2.13 picks it: "sdpa" on CUDA is
    flash for 16-bit heads up to FLASH_MAX_HEAD; in fp32 the memory-efficient kernel, unless
    the heads are grouped: transformers then passes enable_gqa, which only flash and math
    take, so fp32 GQA runs the math kernel (measured on an H100: Llama's fp32 SDPA peak equals
    its eager peak, docs/peak_cuda_h100.md). On the CPU, SDPA without dropout runs the CPU
    flash kernel, with dropout the math kernel."""
    if attention != "sdpa":
        return attention
    if override != "auto":  # --sdpa-kernel: what torch.nn.attention.sdpa_kernel would force
        if (override == "cpu_flash") != (device == "cpu") and override != "math":
            raise TcalcError(f"--sdpa-kernel {override}: not a kernel torch has on {device}")
        if override == "flash" and act_bytes == 4:
            raise TcalcError("--sdpa-kernel flash: takes fp16 or bf16 only (torch's flash "
                             "kernel)")
        if override == "efficient" and spec.n_heads and not spec.mla \
                and spec.kv_heads < spec.n_heads:
            raise TcalcError(f"--sdpa-kernel efficient: torch 2.13's memory-efficient kernel "
                             f"takes no grouped K/V heads ({spec.name}: {spec.kv_heads} for "
                             f"{spec.n_heads} query heads); flash (16-bit) or math")
        return override
    if spec.index_heads:
        # DSA: transformers folds the indexer's top-k into an explicit mask, which no flash
        # kernel takes: the CPU runs the math kernel (measured: tools/measure_activations_hf.py,
        # deepseek_v32-tiny, SDPA as eager within 0.1 %); CUDA the memory-efficient kernel,
        # the one that takes a mask (torch 2.13's sdp_utils; not measured on a GPU)
        return "math" if device == "cpu" else "efficient"
    if device == "cpu":
        # the CPU flash kernel takes one head width for Q, K and V (torch 2.13's
        # sdp_utils_cpp check_head_dim_size_cpp): MLA with d_v ≠ d_nope + d_rope runs the math
        # kernel (measured: MiniCPM3, SafeSoftmaxBackward0 in its graph)
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim if spec.mla else spec.head_dim
        widths_differ = spec.n_heads and (spec.v_head_dim or qk) != qk
        return "math" if dropout or widths_differ else "cpu_flash"
    if act_bytes != 4 and spec.head_dim <= FLASH_MAX_HEAD:
        return "flash"
    grouped = spec.n_heads and not spec.mla and spec.kv_heads < spec.n_heads
    return "math" if grouped else "efficient"


def activation_breakdown(spec: ModelSpec, batch: int, seq_len: int, *, act_bytes: int,
                         device: str = "cuda", attention: str = "eager", dropout: bool = True,
                         recompute: str = "none", amp: bool = False,
                         pattern=None,  # type: ignore[no-untyped-def]
                         sdpa_kernel: str = "auto", experts: str = "auto",
                         use_cache: bool = False, amp16: bool = False) -> Breakdown:
    """Bytes autograd keeps for backward, one item per saved tensor, per layer.

    Follows Korthikanti et al. 2022, Sec. 4.1 (34·s·b·h + 5·a·s²·b per layer, 16-bit), with the
    implementation details that change it as explicit inputs: the device (CUDA keeps 1-byte
    dropout masks, the CPU masks in the activation dtype and its LayerNorm statistics in the
    activation dtype), the attention implementation (eager and SDPA's math path keep the
    B·H·T² probabilities; flash/memory-efficient kernels keep only the output and a log-sum-exp),
    HF's attention keeping K and V (and Q, or the fused QKV output) as separate copies, and what
    the activation function keeps (ACT_SAVES). Symbols: B batch, T sequence, act activation
    bytes, mask dropout-mask bytes, stat norm-statistic bytes, keys per query.

    ``amp16``: torch autocast over a 16-bit model (LoRA's base under the Trainer's
    bf16=True): the residual stream stays 16-bit, but what autocast's fp32 list computes
    (layer_norm, softmax, pow, the loss) comes out in fp32, and the matmuls cast it back.

    ``use_cache``: the forward builds transformers' DynamicCache (its default in training
    without checkpointing), whose torch.cat makes K and V new tensors: where attention would
    otherwise read views of a fused QKV output, the copies are what it keeps.
    """
    spec.require_runnable()
    spec.require_training_memory()
    if attention not in ATTENTIONS:
        raise TcalcError(f"--attention: expected one of {', '.join(ATTENTIONS)}")
    if device not in DEVICES:
        raise TcalcError(f"--device: expected one of {', '.join(DEVICES)}")
    if batch < 1 or seq_len < 1:
        raise TcalcError("--batch-size and --seq-len: expected integers >= 1")
    experts = experts_impl(spec, experts)
    pattern = pattern or DENSE
    # the attention probabilities' own dropout (OPT, BART: 0 while the rest is 0.1)
    attn_dropout = dropout and spec.attention_dropout != 0.0
    # the residual and embedding dropouts, off where only the attention's is set
    # (GPT-NeoX-Japanese: attention_dropout 0.1, hidden_dropout 0.0)
    dropout = dropout and not (spec.dropout == 0 and (spec.attention_dropout or 0.0) > 0)
    kernel = attention_kernel(spec, attention, device, act_bytes, attn_dropout, sdpa_kernel)
    a, B, T = act_bytes, batch, seq_len
    E, V = spec.d_model, spec.vocab_size
    mask = 1 if device == "cuda" else a  # dropout mask: bool on CUDA, dtype-sized on the CPU
    stat = 4 if device == "cuda" else a  # LayerNorm mean / rstd (fp32 on CUDA)
    sb = B * T
    keys = pattern_keys(pattern, T)  # keys per query, as the FLOPs count them
    # flash, memory-efficient and the CPU's flash kernel keep the output and a log-sum-exp, no
    # T² tensor; eager and SDPA's math kernel keep the probabilities (attention_kernel)
    flash = kernel in ("flash", "efficient", "cpu_flash")
    # SDPA's math kernel upcasts 16-bit Q, K, V to fp32 and computes the probabilities (and
    # their dropout, masks in fp32 on the CPU) in fp32 (measured: tools/measure_activations.py)
    # (the CPU's; on CUDA a 16-bit model reaches it only with heads flash cannot take)
    upcast = kernel == "math" and device == "cpu"
    c, cmask = (4, 4) if upcast else (a, mask)
    c_sym, cmask_sym = ("4 (fp32 upcast)", "4 (fp32 upcast)") if upcast else ("act", "mask")
    # transformers' Llama-style eager attention: softmax(..., dtype=float32).to(dtype): a 16-bit
    # model keeps the fp32 probabilities (softmax's backward) and, without dropout, the 16-bit
    # copy the A·V matmul reads (with dropout, the dropout's output instead)
    # Under torch autocast (amp: fp32 weights, act_bytes 2) softmax is on autocast's fp32 list,
    # so every eager attention keeps fp32 probabilities and a 16-bit copy.
    # GPT-Neo, GPT-J, CodeGen: eager attention casts Q and K to fp32 (copies kept by the
    # score matmul) and softmaxes there, casting the probabilities back (measured)
    qk32 = kernel == "eager" and spec.attn_fp32 and a != 4
    soft32 = kernel == "eager" and (spec.softmax_fp32 or amp or amp16 or qk32) and a != 4
    # torch autocast: the residual stream and every norm stay fp32 (embeddings and
    # layer_norm run in fp32, a 16-bit sublayer output added to it is promoted); each linear
    # casts its input to 16-bit and keeps that cast, one per projection reading the same
    # tensor (autocast caches casts of weights only). Measured on an H100:
    # docs/peak_cuda_h100.md.
    r = 4 if amp else a
    # Rows are Item's fields in order: (name, count, formula, expr, repeat, stack, note,
    # active, shape); note "tp" marks what tensor parallelism splits (Korthikanti, Sec. 4.2.2)
    rows: list[tuple] = []  # type: ignore[type-arg]
    add = rows.append
    notes: list[str] = []
    if spec.n_experts:
        notes.append(f"experts run transformers' {experts} path"
                     + (" (this class's default)" if experts != "eager" else "") + ": "
                     + EXPERTS_NOTE[experts])
    if spec.mixer == "kda" and device == "cuda":
        notes.append("Kimi Delta Attention counted on transformers' torch path "
                     "(chunk_kimi_delta_attention), which CUDA runs too without fla's kernels; "
                     "fla's chunk_kda keeps far less and is not modelled")
    if spec.n_heads and attention == "sdpa":  # the execution profile, shown
        how = "forced by --sdpa-kernel" if sdpa_kernel != "auto" else "as torch picks it"
        notes.append(f"sdpa on {device} runs {kernel} ({how}): {KERNELS[kernel]}")
        if not spec.sdpa_path:
            # (the class's _supports_sdpa is false: attn_implementation="sdpa" raises)
            notes.append("transformers 5.23 has no SDPA path for this class (it runs eager "
                         "attention only): this is what an SDPA kernel would keep, in code of "
                         "your own; transformers itself keeps what --attention eager shows")
        if spec.encoder_local_block:
            notes.append("the encoder's local attention (LongT5) runs its own einsums, as "
                         "eager attention does, whatever --attention says")
    if 0 < spec.block_sparse_from <= T:
        notes.append(f"from {spec.block_sparse_from:,} tokens transformers runs BigBird's "
                     "block-sparse attention (block_size, num_random_blocks), which is not "
                     "modelled: its activations are estimated as full attention's, not "
                     "measured")
    if pattern.kind != "dense":
        # the keys per query are the FLOPs' (flops.pattern_keys)
        notes.append(f"attention pattern {pattern.describe()}: {keys:,} keys per query of "
                     f"{T:,}; " + (
                         "the kernel keeps no score tensor, so the pattern saves compute, not "
                         "memory (a block-sparse flash kernel keeps the output and log-sum-exp "
                         "as the dense one does)" if flash else
                         "the probabilities of those pairs only, as a block-sparse softmax "
                         "keeps them (DeepSpeed's sparse attention); HF's eager attention "
                         "would materialise all T² and mask them"))
    x = sb * E * a  # one B·T·d_model activation

    def matmul_input(name: str, stack: str, reps: int, readers: int, what: str) -> None:
        """The normed input of a sublayer, kept by the projections reading it: one tensor,
        or under autocast one 16-bit cast per projection."""
        if (amp or (amp16 and not rms)) and readers > 1:
            add((name, readers * x, f"{readers} · B·T·d_model · act ({what}: a 16-bit cast "
                 "per projection)", "", reps, stack, "", None, ()))
        else:
            add((name, x, f"B·T·d_model · act ({what})", "", reps, stack, "", None, ()))

    # a norm keeps its input and its statistics: RMSNorm 1/rms, LayerNorm mean and 1/std
    stats = (".rstd", sb * 4, "B·T · 4 (fp32)") if spec.norm.startswith("rmsnorm") else \
        (".stats", 2 * sb * stat, "2 · B·T · stat (mean, rstd)")

    rms = spec.norm.startswith("rmsnorm")

    def norm(name: str, stack: str, reps: int, width: int = E, wsym: str = "d_model",
             vectors: int = 1, vsym: str = "", tokens: int = 0, tsym: str = "B·T") -> None:
        """A norm over ``vectors`` vectors of ``width`` per token (QK-norm: one per head), of
        B·T tokens or ``tokens`` (LongT5's global tokens)."""
        sb_ = tokens or sb
        stats_ = stats if not tokens else (stats[0], stats[1] // sb * tokens,
                                           stats[2].replace("B·T", tsym))
        rsym = "4 (fp32 under autocast)" if amp else "act"
        if spec.norm_manual and not rms and not name.startswith("head."):
            # (DeBERTa v1's MLM head norms with nn.LayerNorm, its layers by hand)
            # CohereLayerNorm: in fp32 by hand, (x − mean) computed twice (for the variance
            # and the normalisation), 1/std, and the normalised tensor the weight multiplies
            # (measured on cohere: tools/measure_activations_hf.py); DebertaLayerNorm casts
            # that tensor back to the input's dtype before the weight's mul (measured on the
            # deberta variants, bf16)
            # (the normalised tensor is kept for the weight's gradient alone: a frozen base,
            # under LoRA, keeps it not)
            add((name + ".fp32_terms", 2 * sb_ * width * vectors * 4, f"2 · {tsym}·{vsym}"
                 f"{wsym} · 4 (x − mean twice; fp32)", "", reps, stack, "", None, ()))
            if spec.norm_manual_cast:
                add((name + ".normalized", sb_ * width * vectors * r, f"{tsym}·{vsym}{wsym} · "
                     f"{rsym} (cast back: the weight's mul keeps it)", "", reps, stack, "",
                     None, ()))
            else:
                add((name + ".normalized", sb_ * width * vectors * 4, f"{tsym}·{vsym}{wsym} · "
                     "4 (fp32: the weight's mul keeps it)", "", reps, stack, "", None, ()))
            add((name + ".rstd", sb_ * vectors * 4, f"{tsym}{'·' + vsym[:-1] if vsym else ''} · 4 "
                 "(fp32)", "", reps, stack, "", None, ()))
            return
        if spec.norm_int and not name.startswith("head."):
            # IntLayerNorm (I-BERT, quant_mode off): y = x − mean, kept by its square and by
            # the division, y / sqrt(eps + var) (the std kept too), and the normalised tensor
            # the weight multiplies (measured: the autograd graph of IBertForMaskedLM)
            add((name + ".terms", 2 * sb_ * width * vectors * a, f"2 · {tsym}·{vsym}{wsym} · act "
                 "(x − mean; the normalised tensor)", "", reps, stack, "", None, ()))
            add((name + ".std", sb_ * vectors * a, f"{tsym} · act (the std the division keeps)", "",
                 reps, stack, "", None, ()))
            return
        if not rms and spec.norm_fp32 and a != 4:
            # OlmoLayerNorm: F.layer_norm on an fp32 copy, its statistics in fp32 (measured)
            add((name + ".input_fp32", sb_ * width * vectors * 4, f"{tsym}·{vsym}{wsym} · 4 (the "
                 "fp32 copy)", "", reps, stack, "", None, ()))
            add((name + ".stats", 2 * sb_ * vectors * 4, f"2 · {tsym} · 4 (mean, rstd; fp32)", "",
                 reps, stack, "", None, ()))
            return
        if not rms:
            add((name + ".input", sb_ * width * vectors * r, f"{tsym}·{vsym}{wsym} · {rsym}", "",
                 reps, stack, "", None, ()))
            add((name + stats_[0], stats_[1] * vectors, stats_[2], "", reps, stack, "", None, ()))
            return
        # transformers' RMSNorm (LlamaRMSNorm): x.to(float32) is kept by pow and mul (a copy
        # in a 16-bit model, the input itself in fp32), rsqrt(mean(x²) + eps) by mul, and the
        # normalised tensor, cast back to the input dtype, by the weight's mul (affine only)
        n = sb_ * width * vectors
        add((name + ".input_fp32", n * 4, f"{tsym}·{vsym}{wsym} · 4 (the fp32 upcast)", "", reps,
             stack, "", None, ()))
        add((name + ".rstd", sb_ * vectors * 4, f"{tsym}{'·' + vsym[:-1] if vsym else ''} · 4 "
             "(fp32)", "", reps, stack, "", None, ()))
        if spec.norm_mean_square:
            # Gemma3nRMSNorm, Gemma4RMSNorm: torch.pow(mean_squared, -0.5) keeps the mean
            # square as well as its result; in a 16-bit model the weight's mul keeps the
            # weight's fp32 copy too (measured: tools/measure_activations_hf.py)
            add((name + ".mean_square", sb_ * vectors * 4, f"{tsym}"
                 f"{'·' + vsym[:-1] if vsym else ''} · 4 (the mean square torch.pow keeps)", "",
                 reps, stack, "", None, ()))
            if spec.norm == "rmsnorm" and a != 4 and not amp:
                add((name + ".weight_fp32", width * 4, f"{wsym} · 4 (the weight's fp32 copy)",
                     "", reps, stack, "", None, ()))
        if spec.norm_keeps_input and a != 4 and not amp:
            # T5LayerNorm: hidden_states * rsqrt(...) reads the 16-bit input itself (measured)
            add((name + ".input", n * a, f"{tsym}·{vsym}{wsym} · act (the input, which the "
                 "rsqrt's mul reads)", "", reps, stack, "", None, ()))
        if spec.norm == "rmsnorm":
            if spec.norm_fp32:  # GemmaRMSNorm: output · (1 + w) in fp32, cast back after
                add((name + ".normalized", n * 4, f"{tsym}·{vsym}{wsym} · 4 (fp32: the weight's "
                     "mul keeps it)", "", reps, stack, "", None, ()))
            else:
                add((name + ".normalized", n * r, f"{tsym}·{vsym}{wsym} · {rsym} (the weight's "
                     "mul keeps it)", "", reps, stack, "", None, ()))

    def hc_rows(N: int, p: str, stack: str, L: int, head: bool = False) -> None:
        """A manifold-constrained hyper-connection (DeepseekV4HyperConnection; measured on
        deepseek_v4 variants, tools/measure_activations_hf.py): the N streams (and, 16-bit,
        their fp32 copy) through a weightless norm (1/rms kept), the projection's input and,
        16-bit, its weight's fp32 copy; the projection's output the scales read, the pre and
        post sigmoids, the mix's softmax and every Sinkhorn division's input and sum
        (2 · iterations − 1 of them), the pre weights the collapse multiplies; then the
        layer's mix: post (cast), the final mix (cast) and the sublayer's output. The hyper
        head before the final norm (head): one projection of N weights, a sigmoid, no mix."""
        up = a != 4
        n_ = N * sb * E
        K = N if head else (2 + N) * N  # the projection's outputs
        iters = 2 * spec.hc_sinkhorn_iters - 1

        def row(name: str, n: int, formula: str) -> None:
            if n:
                add((p + name, n, formula, "", L, stack, "", None, ()))

        row("streams", n_ * (a + 4 * up), "hc_streams · B·T·d_model · " + (
            "(act + 4) (the streams, their fp32 copy)" if up else "4 (the streams)"))
        row("norm", sb * 4 + n_ * 4, "B·T · 4 + hc_streams · B·T·d_model · 4 (1/rms; the "
            "normed streams the projection reads)")
        row("weight_fp32", up * K * N * E * 4 + (4 if head and up else 0),
            f"{K} · hc_streams · d_model · 4 " + ("+ 4 (the projection's and the scale's fp32 "
                                                  "copies)" if head else
                                                  "(the projection's fp32 copy)"))
        row("weights", sb * K * 4 + (sb * N * 4 if head else 2 * sb * N * 4 + sb * N * 4),
            f"B·T · {K} · 4 + " + ("2 · B·T·hc_streams · 4 (its output, the sigmoid)" if head
                                   else "3 · B·T·hc_streams · 4 (its output, the two "
                                   "sigmoids, pre)"))
        if head:
            row("pre", sb * N * 4, "B·T·hc_streams · 4 (the collapse's weights)")
            return
        row("sinkhorn", (iters + 1) * sb * N * N * 4 + iters * sb * N * 4,
            f"{iters + 1} · B·T·hc_streams² · 4 + {iters} · B·T·hc_streams · 4 (the softmax "
            "and each division's input and sum)")
        row("mix", sb * N * a + sb * N * N * a + x, "B·T·hc_streams · act + B·T·hc_streams² · "
            "act + B·T·d_model · act (post and the final mix, cast; the sublayer's output)")

    def altup_rows(N: int, p: str, stack: str, L: int) -> None:
        """Gemma3nTextAltUp around one layer (transformers 5.23; measured on gemma3n_text
        variants, tools/measure_activations_hf.py). Predict: the layer's N input streams, kept
        by the per-token (d_model, N) × (N, N) matmul with the coefficients the router picks
        (its norm over the first stream, its scaled input, its tanh output in fp32, cast back
        for the coefficient projection); in fp32 the input norm then reads the first
        prediction as a view, which keeps all N alive. Correct: the router again over the
        layer's output, the innovation repeated over the N streams times the correction's
        coefficients (an F.linear on the clamped weight, which keeps its input), and the
        first stream's clone, which the output scale multiplies."""
        n_ = sb * E
        up = r != 4  # 16-bit: the norms' .float() are copies, the tanh outputs are cast back

        def row(name: str, n: int, formula: str) -> None:
            if n:
                add((p + name, n, formula, "", L, stack, "", None, ()))

        norm_rest = ("2 · B·T · 4" + (" + d_model · 4" if up else "") + " (1/rms, the mean "
                     "square" + (", the weight's fp32 copy)" if up else ")"))

        def router(side: str) -> None:
            """What each call of the router keeps (in predict and in correct)."""
            row(side + "_norm.normalized", n_ * 4, "B·T·d_model · 4 (what the weight's mul "
                "keeps)")
            row(side + "_router_input", n_ * r, "B·T·d_model · res (the scaled input the "
                "router reads)")
            row(side + "_modalities", sb * N * 4, "B·T·altup_inputs · 4 (the router's tanh "
                "output, fp32)")

        row("streams", N * n_ * r, "altup_inputs · B·T·d_model · res (the layer's input "
            "streams)")
        row("predict_norm", up * n_ * 4 + 2 * sb * 4 + up * E * 4,
            ("B·T·d_model · 4 (the first stream's fp32 copy) + " if up else "") + norm_rest)
        router("predict")
        row("predict_modality_cast", up * sb * N * r, "B·T·altup_inputs · res (cast back: the "
            "prediction coefficients' input)")
        row("prediction_coefs", sb * N * N * r, "B·T·altup_inputs² · res (each token's "
            "matrix)")
        row("predictions", (not up) * (N - 1) * n_ * 4, "(altup_inputs − 1) · B·T·d_model · 4 "
            "(the input norm reads the first prediction as a view of all)")
        row("correct_norm", n_ * 4 + 2 * sb * 4 + up * E * 4, "B·T·d_model · 4 (the layer's "
            "output" + (", an fp32 copy" if up else "") + ") + " + norm_rest)
        router("correct")
        row("correct_coef_input", up * sb * N * r, "B·T·altup_inputs · res (cast back: what "
            "F.linear with the clamped weight keeps for its gradient)")
        row("correction_coefs", (N * sb + N * N) * r, "(altup_inputs · B·T + altup_inputs²) · "
            "res (the coefficients the innovation is multiplied by; the clamped weight)")
        row("innovation", N * n_ * r, "altup_inputs · B·T·d_model · res (the innovation "
            "repeated over the streams)")
        row("scaled_output", n_ * r, "B·T·d_model · res (the first stream's clone the output "
            "scale multiplies)")

    def efficient_core(at: Attention, p: str, stack: str, L: int) -> None:
        """What Linformer, Performer and linear attention keep beside Q, K and V;
        Linformer's and Performer's as the reference implementations save them (measured
        with saved_tensors_hooks: tools/reference_efficient.py), linear attention's from its
        operations."""
        Hh, dq, Hkv = at.heads, at.d_head, at.kv_heads
        for part, heads in (("q", Hh), ("k", Hh), ("v", Hh)):
            add((p + part, sb * heads * dq * a, f"B·T·n_heads·d_head · act ({part})", "", L,
                 stack, "tp", None, ()))
        if at.mechanism == "linformer":
            k = at.proj_k
            add((p + "linformer_kv", 2 * B * k * Hkv * dq * a, "2 · B·linformer_k·n_kv_heads·"
                 "d_head · act (projected keys and values)", "", L, stack, "tp", None, ()))
            add((p + "softmax", B * Hh * T * k * a, "B·n_heads·T·linformer_k · act (over the "
                 "projected keys: linear in T)", "", L, stack, "tp", None, ()))
        elif at.mechanism == "performer":
            # performer-pytorch's softmax_kernel keeps three B·H·T·m tensors per feature map
            # (the projection, its exp, and the transposed copy its einsums read), the
            # context, the output the normaliser scales, and three B·H·T normaliser terms
            # (measured: tools/reference_efficient.py)
            m = at.features
            add((p + "favor_features", 6 * B * Hh * T * m * a, "6 · B·n_heads·T·m · act "
                 "(φ(Q), φ(K): three each)", "", L, stack, "tp", None, ()))
            add((p + "favor_context", B * Hh * m * dq * a, "B·n_heads·m·d_head · act "
                 "(φ(K)ᵀ·V)", "", L, stack, "tp", None, ()))
            add((p + "favor_out", sb * Hh * dq * a + 3 * B * Hh * T * a, "B·T·n_heads·(d_head "
                 "+ 3) · act (the output and the normaliser's terms)", "", L, stack, "tp",
                 None, ()))
        else:
            add((p + "linear_features", 2 * B * Hh * T * dq * a, "2 · B·n_heads·T·d_head · "
                 "act (φ(Q), φ(K))", "", L, stack, "tp", None, ()))
            add((p + "linear_context", B * Hh * dq * dq * a, "B·n_heads·d_head² · act "
                 "(φ(K)ᵀ·V)", "", L, stack, "tp", None, ()))

    # transformers builds an explicit (B, 1, T, T) mask for sliding layers once T reaches
    # the window (masking_utils._ignore_causal_mask_sdpa; its bidirectional twin with the half
    # window): SDPA then keeps it, and K/V go in repeated to n_heads (no enable_gqa with a
    # mask; measured on Gemma 4 and ModernBERT)
    reach = ((spec.sliding_window - 1) // 2 if spec.arch == "encoder"
             else spec.sliding_window)
    sliding_mask = attention == "sdpa" and flash and bool(spec.sliding_window) and reach <= T
    # ... and for chunked layers once T reaches the chunk (create_chunked_causal_mask; measured
    # on Llama 4)
    chunked_mask = attention == "sdpa" and flash and 0 < spec.attention_chunk <= T
    # ... and in every layer where the model always builds one (Falcon); with ALiBi the mask
    # is the float (B, heads, T, T) bias itself, one tensor every layer's call keeps
    layer_mask = attention == "sdpa" and flash and spec.explicit_mask \
        and spec.position != "alibi"

    def relative_rows(p: str, stack: str, L: int, at: Attention) -> None:
        """DeBERTa-v2/v3 (DisentangledSelfAttention, transformers 5.23), per layer: the
        scores' (B, 1, T, T) bool mask and, per disentangled term in use, what its
        score keeps. The table (2·att_span rows: rel_embeddings) after the layer's dropout
        is the input of the position projections; each term multiplies Q (c2p) or K (p2c)
        by the projected table repeated over the batch, and gathers the B·H·T·2·att_span
        product by a T·T int64 index. With no term the projections' outputs are unused and
        freed. (Measured, the autograd graph's saved tensors: deberta-v2-relative.json,
        deberta-v2-c2p-p2c.json.)"""
        add((p + "relative_mask", B * T * T, "B·T·T · 1 (bool)", "", L, stack, "", None, ()))
        terms = spec.rel_term_count
        if not terms:
            return
        R, Hh, dq = spec.rel_embeddings, at.heads, at.d_head
        add((p + "relative_table", R * E * a, "rel_embeddings·d_model · act (the positions "
             "projections' input)", "", L, stack, "", None, ()))
        if dropout:
            add((p + "relative_table_dropout_mask", R * E * mask, "rel_embeddings·d_model · "
                 "mask", "", L, stack, "", None, ()))
        # DeBERTa v1 (rel_span sequence) projects only the 2·att_span rows the sequence
        # meets, a slice of the dropped-out table (whose storage the projections keep whole)
        Rs, rsym = (spec.rel_rows(T), "rel_rows") if spec.rel_span == "sequence" else \
            (R, "rel_embeddings")
        add((p + "relative_tables", terms * B * Hh * Rs * dq * a,
             f"{terms} · B·n_heads·{rsym}·d_head · act (per term: the projected table "
             "repeated over the batch, which Q or K multiplies)", "", L, stack, "tp", None, ()))
        add((p + "relative_terms", terms * (B * Hh * T * Rs * a + T * T * 8),
             f"{terms} · (B·n_heads·T·{rsym} · act + T·T · 8) (per term: the scores it "
             "gathers from, the int64 index)", "", L, stack, "tp", None, ()))
        # v1's heads are 4-D (transpose_for_scores without .contiguous()): with B > 1 each
        # term's matmul folds (B, heads) by copying what it multiplies, Q for c2p, K for p2c;
        # with one sequence it reads the scores' Q and the fused output's K as they are
        # (measured: B = 1 and 2). v2's K is a tensor of its own that only p2c keeps.
        v1 = spec.rel_span == "sequence"
        if "p2c" in spec.rel_terms and not (v1 and B == 1):
            add((p + "relative_p2c_key", sb * Hh * dq * a, "B·T·n_heads·d_head · act (K, "
                 "which p2c multiplies)", "", L, stack, "tp", None, ()))
        if "c2p" in spec.rel_terms and v1 and B > 1:
            add((p + "relative_c2p_query", sb * Hh * dq * a, "B·T·n_heads·d_head · act (the "
                 "query's copy c2p multiplies)", "", L, stack, "tp", None, ()))

    def local_core(at: Attention, p: str, stack: str, L: int) -> None:
        """LongT5's local attention (LongT5LocalAttention, transformers 5.23), whatever the
        attention implementation (its own einsums): Q, K and V split into blocks of the
        sequence padded to whole blocks; K and V of three blocks concatenated per block, which
        the score and value products keep; the probabilities of each block's queries over
        those 3·block keys (softmax in fp32 whatever the dtype, cast back), their dropout.
        Transient-global attention (LongT5TransientGlobalAttention) sums each global block
        of tokens (an einsum with the one-hot block ids, which it keeps), norms the sums and
        appends their K and V to every block's keys. (Measured, the autograd graph's saved
        tensors: longt5-local.json, longt5-tglobal.json.)"""
        Hh, dq, b = at.heads, at.d_head, at.window
        Tq, keys_l, G = at.queries(T), at.keys(T), at.globals(T)
        ksym = "(3·local_block + global_tokens)" if at.global_block else "3·local_block"
        if at.global_block:
            add((p + "global_one_hot", B * G * T * a, "B·global_tokens·T · act (the one-hot "
                 "block ids the sum keeps)", "", L, stack, "", None, ()))
            norm(p + "global_input_norm", stack, L, tokens=B * G, tsym="B·global_tokens")
            add((p + "global_kv_input", B * G * E * a, "B·global_tokens·d_model · act (K/V "
                 "matmul input)", "", L, stack, "", None, ()))
        add((p + "q", B * Tq * Hh * dq * a, "B·T_blocks·n_heads·d_head · act (the padded "
             "queries)", "", L, stack, "tp", None, ()))
        add((p + "kv_blocks", 2 * B * (Tq // b) * keys_l * Hh * dq * a, "2 · B·(T_blocks / "
             f"local_block)·{ksym}·n_heads·d_head · act (K and V per block)", "", L, stack,
             "tp", None, ()))
        probs = B * Hh * Tq * keys_l
        sym = f"B·n_heads·T_blocks·{ksym}"
        if a != 4:  # softmax(scores.float()).type_as(scores)
            add((p + "softmax", probs * 4, f"{sym} · 4 (fp32 softmax output)", "", L, stack,
                 "tp", None, ()))
            if not attn_dropout:
                add((p + "softmax_cast", probs * a, f"{sym} · act (cast back: the A·V input)",
                     "", L, stack, "tp", None, ()))
        else:
            add((p + "softmax", probs * a, f"{sym} · act (softmax output)", "", L, stack, "tp",
                 None, ()))
        if attn_dropout:
            add((p + "dropout_mask", probs * mask, f"{sym} · mask", "", L, stack, "tp", None,
                 ()))
            add((p + "dropout_output", probs * a, f"{sym} · act (A·V input)", "", L, stack,
                 "tp", None, ()))

    def yoso_core(at: Attention, p: str, stack: str, L: int) -> None:
        """YOSO's expectation attention (YosoSelfAttention and YosoCumulation, transformers
        5.23): Q, K and V reshaped to (B·heads, T, d_head), copies; Q and K l2-normalised
        (each normalisation keeps its input, the norm and the clamped norm), then the
        cumulation keeps the normalised Q and K, V, the expectation matrix and the int32 mask;
        its output is normalised too. No softmax and no dropout on the scores. (Measured:
        yoso-tiny.json, saved_tensors_hooks.)"""
        Hh, dq = at.heads, at.d_head
        add((p + "qkv", 3 * sb * Hh * dq * a, "3 · B·T·n_heads·d_head · act (Q, K, V copies)",
             "", L, stack, "tp", None, ()))
        add((p + "qk_normalised", 2 * sb * Hh * dq * a, "2 · B·T·n_heads·d_head · act", "", L,
             stack, "tp", None, ()))
        add((p + "expectation", B * Hh * T * T * a, "B·n_heads·T·T · act ((1 − acos(q̂·k̂ᵀ)/π)"
             "^hash_code_len)", "", L, stack, "tp", None, ()))
        add((p + "output", sb * Hh * dq * a + 3 * 2 * B * Hh * T * a + B * Hh * T * 4,
             "B·T·n_heads·d_head · act + 3 · 2 · B·n_heads·T · act + B·n_heads·T · 4 (the "
             "output the last normalisation reads; three normalisations' norms; the int32 "
             "mask)", "", L, stack, "tp", None, ()))

    def v4_attention(at: Attention, p: str, stack: str, L: int) -> None:
        """DeepseekV4Attention, eager (transformers 5.23 has no other path for it; measured
        on deepseek_v4 variants, tools/measure_activations_hf.py): the normed input (read by
        q_a, kv and the compressor), q_a's norm and q_b's input, q_b's weightless per-head
        norm (an fp32 copy and 1/rms cast back in a 16-bit model), the K=V head's norm, the
        rotated query; K and V each repeated to every head over the window's keys and every
        compressed entry, the probabilities with the sink column (eager masks all of them)
        and each row's max index; the grouped output's two inputs; the compressor's kv (its
        projection's output; CSA's overlapping windows, a copy twice as long) and its softmax
        weights, and the norm over the entries. CSA's indexer leads to no gradient (its top-k
        indices only mask): autograd frees what it saved."""
        Hh, dh, rq, g, ro, m = at.heads, at.d_head, at.q_lora_rank, at.o_groups, at.o_rank, \
            at.compress
        up = a != 4
        keys = T + (T // m if m else 0)  # eager: the whole window, every entry

        def row(name: str, n: int, formula: str) -> None:
            if n:
                add((p + name, n, formula, "", L, stack, "tp", None, ()))

        # (readers under autocast: q_a and kv, and the compressor's kv and gate; the indexer's
        # casts lead to no gradient and are freed)
        matmul_input(p + "input", stack, L, 2 + 2 * bool(m), "q_a, kv and compressor input")
        norm(p + "q_a_norm", stack, L, rq, "q_lora_rank")
        row("q_b_input", sb * rq * a, "B·T·q_lora_rank · act")
        row("q_b_norm", (sb * Hh * dh + sb * Hh) * (a + 4 * up), "B·T·n_heads·(d_head + 1) · "
            + ("(act + 4) (the input and its fp32 copy, 1/rms in fp32 and cast back)" if up
               else "act (the input, 1/rms)"))
        norm(p + "kv_norm", stack, L, dh, "d_head")
        row("q", sb * Hh * dh * a, "B·T·n_heads·d_head · act (the rotated query)")
        if B == 1:
            # one sequence: repeat_kv's expand folds into the matmuls' batch as a stride-0
            # view, so K and V are the one K=V tensor itself (as Llama's one K/V head)
            row("kv", keys * dh * a, "B·(T + entries)·d_head · act (K and V: views of the one "
                "head)")
        else:
            row("kv", 2 * B * Hh * keys * dh * a, "2 · B·n_heads·(T + entries)·d_head · act "
                "(K and V: the one head repeated to every head)")
        row("probs", B * Hh * T * (keys + 1) * a, "B·n_heads·T·(T + entries + 1) · act (the "
            "probabilities and the sink column)")
        row("row_max_indices", B * Hh * T * 8, "B·n_heads·T · 8 (int64: each row's max)")
        row("o_a_input", sb * Hh * dh * a, "B·T·n_heads·d_head · act")
        row("o_b_input", sb * g * ro * a, "B·T·o_groups·o_lora_rank · act")
        if m:
            n_win = T // m
            w = 2 * dh if at.csa_heads else dh
            # HCA's kv is a view of its projection's output; CSA's two series are copied
            # into windows twice as long
            kv_n = B * n_win * 2 * m * dh if at.csa_heads else B * T * dh
            row("compressor_kv", kv_n * a, ("B·entries·2·compress_csa·d_head" if at.csa_heads
                                           else "B·T·d_head") + " · act (the windows' kv)")
            row("compressor_weights", B * n_win * (m * w // dh) * dh * (a + 4 * up),
                "B·entries·" + ("2·compress_csa" if at.csa_heads else "compress_hca")
                + "·d_head · " + ("(4 + act) (the fp32 softmax and its cast)" if up
                                  else "4 (softmax)"))
            if n_win:
                norm(p + "compressor_norm", stack, L, dh, "d_head", tokens=B * n_win,
                     tsym="B·entries")

    def attention_block(at: Attention, p: str, stack: str, L: int) -> None:
        if at.o_groups:
            v4_attention(at, p, stack, L)
            return
        cross = at.cross
        Hh, dq, dv = at.heads, at.d_head, at.d_v
        qw, kvw = Hh * dq, at.kv_heads * dq
        vw = at.kv_heads * dv
        # the value heads' width in formulas: MLA's and MiMo-V2-Flash's own d_v
        dvs = "d_v" if at.mla or dv != dq else "d_head"
        kq, kq_sym = (T, "T") if cross else (keys, "keys")
        # readers of the normed input: Q, K, V (fused: one; MLA: two; Gemma 4's K/V-shared
        # layers: Q alone, their keys are an earlier layer's; attention_k_eq_v: Q and K)
        readers = 1 if at.fused_qkv or at.kv_shared else 2 if at.mla or at.v_is_k else 3
        fused_kept = False  # the fused QKV output already counted (kept by Q/K norms)
        matmul_input(p + "input", stack, L, readers + (at.gate != "none"), "Q/K/V matmul input")
        if spec.qkv_clamp and at.fused_qkv and not cross:
            # DBRX: qkv_states.clamp(±clip_qkv) keeps the fused projection's output, its
            # input (Q, K and V are views of the clamp's result; measured)
            add((p + "qkv_clamp_input", sb * (qw + kvw + vw) * a, "B·T·(n_heads + "
                 "2·n_kv_heads)·d_head · act (the clamp's input: clip_qkv)", "", L, stack,
                 "tp", None, ()))
        if at.qk_norm == "l2":
            # Llama4TextL2Norm on the rotated Q and K: x.float() · rsqrt(mean(x²) + eps), no
            # weight: the mul keeps the fp32 input and 1/rms per head (measured)
            for part, heads, hsym in (("q_l2norm", Hh, "n_heads"),
                                      ("k_l2norm", at.kv_heads, "n_kv_heads")):
                add((p + part, sb * heads * (dq + 1) * 4, f"B·T·{hsym}·(d_head + 1) · 4 (fp32 "
                     "input, 1/rms)", "", L, stack, "", None, ()))
        elif at.qk_norm != "none" and not at.mla and at.fused_qkv and not rms \
                and not spec.norm_manual and not cross:
            # Persimmon: LayerNorms on Q and K, views of the fused projection's output, which
            # they keep alive whole (its V a view too); the statistics per head (measured)
            fused_kept = True
            add((p + "qkv_output", sb * (qw + kvw + vw) * a, "B·T·(n_heads + 2·n_kv_heads)·"
                 "d_head · act (fused output, kept by the Q/K norms reading views of it)", "", L,
                 stack, "tp", None, ()))
            for part, heads in (("q_norm", Hh), ("k_norm", at.kv_heads)):
                add((p + part + stats[0], stats[1] * heads, stats[2] + " per head", "", L,
                     stack, "", None, ()))
        elif at.qk_norm != "none" and not at.mla:
            # QK-norm: an RMSNorm over each head's query and key (or over the whole width);
            # a K/V-shared layer norms its query only
            parts = (("q_norm", Hh, "n_heads"), ("k_norm", at.kv_heads, "n_kv_heads"))
            for part, heads, hsym in parts[:1 if at.kv_shared else 2]:
                if at.qk_norm == "head" or spec.norm_manual:
                    # (Cohere's (heads, d_head) weight still norms each head apart)
                    norm(p + part, stack, L, dq, "d_head", heads, hsym + "·")
                else:
                    norm(p + part, stack, L, heads * dq, hsym + "·d_head")
            if spec.attn_gate_in_q and a == 4 and not amp and not cross:
                # Qwen3-Next: the query is a view of q_proj's output, which holds the gate too;
                # in fp32 the norm's .to(float32) is that view, so its pow keeps the whole
                # output (in 16-bit it keeps an fp32 copy of the query alone; measured)
                add((p + "q_proj_gate_half", sb * at.gate_width(at.gate) * 4, "B·T·n_heads·d_v "
                     "· 4 (the gate half of q_proj's output, kept with the query's view)", "",
                     L, stack, "tp", None, ()))
        if at.v_norm and not at.kv_shared:
            # Gemma 4's v_norm: an RMSNorm without weight over each value head keeps its fp32
            # input and 1/rms (no weight's mul)
            Hv = at.kv_heads
            add((p + "v_norm", sb * Hv * dq * 4 + sb * Hv * 4, "B·T·n_kv_heads·d_head · 4 + "
                 "B·T·n_kv_heads · 4 (fp32 input, 1/rms)", "", L, stack, "", None, ()))
            if spec.norm_mean_square:
                add((p + "v_norm.mean_square", sb * Hv * 4, "B·T·n_kv_heads · 4 (the mean "
                     "square torch.pow keeps)", "", L, stack, "", None, ()))
        if at.mla:
            # DeepSeek MLA (transformers DeepseekV3Attention), measured (the listing of the
            # deepseek_v3 variant): kv_a's output (the latent and the RoPE key, kept whole by
            # the norm and the rotation), the latent's norm (an fp32 copy in a 16-bit model,
            # 1/rms, the normalised tensor) and kv_b's input; the same for q_a when the query
            # is low-rank
            # In a 16-bit model the norm's pow keeps its fp32 copy instead, and kv_a's and
            # q_a's outputs are not kept (measured on deepseek_v32-tiny, bf16)
            # (the normalised latents are kept for the norms' weights' gradients alone, kv_b's
            # and q_b's inputs for theirs: a frozen base, under LoRA, keeps neither unless an
            # adapter reads them)
            rq, rkv, dr = at.q_lora_rank, at.kv_lora_rank, at.d_rope
            if a == 4:
                add((p + "kv_latent_norm", sb * ((rkv + dr) * 4 + 4), "B·T·((kv_lora_rank + "
                     "d_rope) · 4 + 4) (kv_a's output, kept whole by its norm; 1/rms)", "", L,
                     stack, "", None, ()))
            else:
                add((p + "kv_latent_norm", sb * (rkv * 4 + 4), "B·T·(kv_lora_rank · 4 + 4) "
                     "(the norm's fp32 copy of the latent; 1/rms)", "", L, stack, "", None, ()))
            add((p + "kv_latent.normalized", sb * rkv * a, "B·T·kv_lora_rank · act (the "
                 "normed latent the norm's weight multiplies)", "", L, stack, "", None, ()))
            add((p + "kv_b_input", sb * rkv * a, "B·T·kv_lora_rank · act (kv_b's input)", "", L,
                 stack, "", None, ()))
            if rq:
                add((p + "q_latent_norm", sb * (rq * 4 + 4), "B·T·(q_lora_rank · 4 + 4) (q_a's "
                     "output or its fp32 copy, kept by its norm; 1/rms)", "", L, stack, "", None,
                     ()))
                add((p + "q_latent.normalized", sb * rq * a, "B·T·q_lora_rank · act (the "
                     "normed latent the norm's weight multiplies)", "", L, stack, "", None, ()))
                add((p + "q_b_input", sb * rq * a, "B·T·q_lora_rank · act (q_b's input)", "",
                     L, stack, "", None, ()))
            vw = Hh * dv
            kvw = qw
        if spec.rel_embeddings and not cross and at.mechanism == "softmax":
            relative_rows(p, stack, L, at)
        if spec.relative_scope == "every" and not cross and (spec.position == "relative"
                                                             or spec.relative_bias):
            # UMT5: every self-attention owns its bias table, looked up through its own
            # T×T int64 bucket index, which the embedding keeps (measured)
            add((p + "relative_buckets", T * T * 8, "T·T · 8 (int64 bucket indices)", "", L,
                 stack, "", None, ()))
        core_start = len(rows)  # the attention core's rows (DiffLlama runs it twice)
        if at.conv:
            # Primer: each depthwise convolution keeps its input (the projection's output)
            add((p + "qkv_conv_input", sb * (qw + 2 * kvw) * a, "B·T·(n_heads + 2·n_kv_heads)·"
                 "d_head · act (the convolutions' inputs)", "", L, stack, "tp", None, ()))
        if at.kind == "local":
            local_core(at, p, stack, L)
        elif spec.yoso_expectation and not cross:
            yoso_core(at, p, stack, L)
        elif at.mechanism != "softmax" and not cross:
            efficient_core(at, p, stack, L)
        elif flash and spec.kv_broadcast and not cross:
            # Falcon's new layout: K and V broadcast to every head (copies), Q and K rotated
            # (with RoPE) after; the kernel keeps the three (measured)
            add((p + "qkv", sb * 3 * qw * a, "3 · B·T·n_heads·d_head · act (K and V broadcast "
                 "to every head)", "", L, stack, "tp", None, ()))
        elif flash and at.fused_qkv and not cross and spec.position == "rope":
            # the kernel keeps the rotated Q and K (new tensors) and V, a view of the fused
            # projection's output, which stays alive whole (GPT-NeoX, Falcon, Phi-3: measured)
            add((p + "qk_rotated", sb * (qw + kvw) * a, "B·T·(n_heads + n_kv_heads)·d_head · "
                 "act", "", L, stack, "tp", None, ()))
            if use_cache and not fused_kept:
                # the cache's copy of V is kept instead of the view, and the fused output dies
                add((p + "v_cache_copy", sb * vw * a, "B·T·n_kv_heads·d_head · act (V as the "
                     "cache concatenated it)", "", L, stack, "tp", None, ()))
            elif not fused_kept:
                add((p + "qkv_output", sb * (qw + kvw + vw) * a, "B·T·(n_heads + 2·n_kv_heads)·"
                     "d_head · act (fused output: V is a view)", "", L, stack, "tp", None, ()))
        elif flash and at.mla:  # V is a view of kv_b's output, kept whole (measured)
            vb = Hh * (dq - at.d_rope + dv)
            add((p + "qkv", sb * (qw + kvw + vb) * a, "B·T·n_heads·(2·(d_nope + d_rope) + "
                 "d_nope + d_v) · act", "", L, stack, "tp", None, ()))
        elif flash and 1 < at.kv_heads < Hh and (
                (sliding_mask and at.kind == "sliding") or dq > 256
                or (chunked_mask and at.kind == "chunked")):
            # transformers' use_gqa_in_sdpa: no enable_gqa with a mask or heads over 256 wide,
            # so repeat_kv copies K and V to every head (with one K/V head it is a view)
            add((p + "qkv", sb * 3 * qw * a, "3 · B·T·n_heads·d_head · act (K and V repeated "
                 "to every head: a masked call takes no grouped heads)", "", L, stack, "tp",
                 None, ()))
        elif flash:
            add((p + "qkv", sb * (qw + kvw + vw) * a,
                 "B·T·(n_heads + 2·n_kv_heads)·d_head · act" if dv == dq else
                 "B·T·((n_heads + n_kv_heads)·d_head + n_kv_heads·d_v) · act", "", L, stack,
                 "tp", None, ()))
            if use_cache and at.fused_qkv and not cross:
                # Q stays a view of the fused output, kept whole; K and V are the cache's
                # copies (measured on an H100, GPT-2 B8 T1024: +576 MiB with the cache)
                add((p + "kv_cache_copies", sb * (kvw + vw) * a, "B·T·2·n_kv_heads·d_head · "
                     "act (K and V as the cache concatenated them)", "", L, stack, "tp", None,
                     ()))
        if at.kind == "local" or (at.mechanism != "softmax" and not cross) \
                or spec.yoso_expectation:
            pass  # local_core, yoso_core or efficient_core above
        elif flash:
            add((p + "out", sb * Hh * dv * a, f"B·T·n_heads·{dvs} · act (kernel output)", "",
                 L, stack, "tp", None, ()))
            add((p + "logsumexp", B * Hh * T * 4, "B·n_heads·T · 4 (fp32)", "", L, stack, "tp",
                 None, ()))
            if (sliding_mask and at.kind == "sliding") or (chunked_mask and at.kind == "chunked") \
                    or (layer_mask and not cross):
                # the layer's explicit (B, 1, T, T) mask: transformers passes a bool mask, which
                # scaled_dot_product_attention converts to the query's dtype on every call
                # (convert_boolean_attn_mask), so each such layer keeps its own copy (measured:
                # Ministral, Gemma 3 and 4, Llama 4, tools/measure_activations_hf.py)
                add((p + "mask", B * T * T * a, "B·T·T · act (the layer's explicit mask, "
                     "converted from bool)", "", L, stack, "", None, ()))
        else:
            if attention == "eager" and at.fused_qkv and not cross and B == 1 and fused_kept:
                pass  # Q is a view of the fused output, counted with the Q/K norms above
            elif attention == "eager" and at.fused_qkv and not cross and B == 1 \
                    and not (at.rope and at.kv_heads < Hh):
                # HF eager: Q is a (B, H, T, d_head) view of the fused (B, T, 3·E) projection
                # output; matmul folds B and H into one batch dimension without a copy only
                # when B = 1, and then the whole fused output stays alive. For B > 1 Q is
                # copied and the fused output is freed (measured: tools/measure_activations).
                # With RoPE and grouped K/V heads nothing keeps it: Q is rotated into a tensor
                # of its own and repeat_kv copies V (measured: Phi-3, +3.8 % before; DBRX)
                add((p + "qkv_output", sb * (qw + 2 * kvw) * a,
                     "B·T·(n_heads + 2·n_kv_heads)·d_head · act (fused output, Q is a view)", "",
                     L, stack, "tp", None, ()))
            else:
                add((p + "q", sb * qw * (4 if qk32 else c), "B·T·n_heads·d_head · "
                     + ("4 (fp32 copy)" if qk32 else c_sym), "", L, stack, "tp",
                     None, ()))
            # K (transposed) and V are made contiguous for the batched matmuls; GQA/MQA heads
            # are repeated to n_heads first (HF repeat_kv)
            kv = "B·T·n_heads·d_head · " + c_sym + " (contiguous copy)"
            # MQA with one sequence: repeat_kv's expand of the one K/V head folds into the
            # matmuls' (B·heads) batch as a stride-0 view, so K and V are kept as the one head
            # they are (measured on Llama, Qwen3 and Hunyuan variants, eager)
            one_head = kernel == "eager" and B == 1 and at.kv_heads == 1 < Hh and not qk32 \
                and not at.mla and not at.fused_qkv and not cross
            # ... and with one sequence and no cache, GPT-2's K and V are views of the fused
            # output kept for Q (the matmuls fold B = 1 without copying); the cache's
            # torch.cat makes them copies (GPT-2's CPU grid was measured with the cache).
            # (Rotated models keep their copies either way: measured on NeoX and CodeGen; so
            # do Falcon's broadcast K and V and DeBERTa v1's encoder, which chunks its heads'
            # Q, K and V)
            kv_views = any(r[0] == p + "qkv_output" for r in rows[core_start:]) \
                and not use_cache and not qk32 and not at.rope and spec.arch == "decoder" \
                and not spec.kv_broadcast
            if kv_views:
                pass
            elif one_head:
                one = "B·T·d_head · act (one K/V head: repeat_kv's expand is a view)"
                add((p + "k", sb * dq * a, one, "", L, stack, "tp", None, ()))
                add((p + "v", sb * dv * a, one.replace("d_head", dvs), "", L, stack, "tp",
                     None, ()))
            else:
                add((p + "k", sb * qw * (4 if qk32 else c), kv.replace(c_sym, "4 (fp32 copy)")
                     if qk32 else kv, "", L, stack, "tp", None, ()))
            if one_head or kv_views:
                pass  # V counted with K above, or a view of the fused output
            elif at.mla and B == 1 and not (upcast and a != 4):
                # V is a view of kv_b's output, which stays whole: with one sequence the A·V
                # matmul takes the view as it is; with more, folding (B, heads) copies V alone
                # (measured on DeepSeek-V3 and MiniCPM3; a 16-bit model's math kernel copies V
                # alone to fp32)
                add((p + "v", sb * Hh * (dq - at.d_rope + dv) * c, "B·T·n_heads·(d_nope + d_v) "
                     "· " + c_sym + " (kv_b's output: V is a view)", "", L, stack, "tp", None,
                     ()))
            else:
                add((p + "v", sb * Hh * dv * c, kv.replace("d_head", dvs), "", L, stack, "tp",
                     None, ()))
            probs = B * Hh * T * kq
            if spec.scores_clamped and attention == "eager":
                # XGLM: torch.max(scores + mask, finfo.min) keeps its input (measured)
                add((p + "scores_clamp_input", probs * a, f"B·n_heads·T·{kq_sym} · act (the "
                     "masked scores, which the clamp's max keeps)", "", L, stack, "tp", None,
                     ()))
            if spec.softmax_row_max and not cross:
                # gpt-oss, MiMo-V2-Flash: scores - scores.max(dim=-1).values; max keeps the
                # int64 index of each row's maximum (measured: measure_activations_hf.py)
                add((p + "row_max_indices", B * Hh * T * 8, "B·n_heads·T · 8 (int64: where "
                     "each row's max is)", "", L, stack, "tp", None, ()))
            if at.sinks and spec.softmax_sink_column and not cross:
                # the sink logit joins the scores as one more column: the softmax keeps
                # keys + 1 probabilities per row, the A·V matmul reads a view without it
                probs = B * Hh * T * (kq + 1)
                kq_sym += " + 1"
                kq_sym = f"({kq_sym})"
            if at.sinks and spec.softmax_sink_lse and not cross:
                # GraniteSWA's sink as a post-attention scale, sigmoid(logsumexp(scores) −
                # sink): logsumexp keeps the scores and its result, the fp32 sigmoid its
                # output, and the scaled product the attention output (measured)
                add((p + "sink_scale", probs * c + B * Hh * T * (a + 4) + sb * Hh * dv * a,
                     f"B·n_heads·T·{kq_sym} · {c_sym} + B·n_heads·T · (act + 4) + "
                     "B·T·n_heads·d_head · act (the scores logsumexp keeps, its result, the "
                     "fp32 sigmoid, the output it scales)", "", L, stack, "tp", None, ()))
            if spec.attn_softcapping:
                # Gemma 2's eager attention: scores = cap · tanh(scores / cap); tanh keeps
                # its output, a tensor of the scores' size (T5Gemma's cross-attention too:
                # measured)
                add((p + "softcap_tanh", probs * c, f"B·n_heads·T·{kq_sym} · {c_sym} (the "
                     "attention soft-capping tanh's output)", "", L, stack, "tp", None, ()))
            if soft32:
                add((p + "softmax", probs * 4, f"B·n_heads·T·{kq_sym} · 4 (fp32 softmax "
                     "output)", "", L, stack, "tp", None, ()))
                if not attn_dropout:
                    add((p + "softmax_cast", probs * a, f"B·n_heads·T·{kq_sym} · act (cast "
                         "back: the A·V input)", "", L, stack, "tp", None, ()))
            else:
                add((p + "softmax", probs * c, f"B·n_heads·T·{kq_sym} · {c_sym} (softmax "
                     "output)", "", L, stack, "tp", None, ()))
            if attn_dropout:
                add((p + "dropout_mask", probs * cmask, f"B·n_heads·T·{kq_sym} · {cmask_sym}", "",
                     L, stack, "tp", None, ()))
                add((p + "dropout_output", probs * c,
                     f"B·n_heads·T·{kq_sym} · {c_sym} (A·V input)", "", L, stack, "tp", None, ()))
        if at.differential:
            # DiffLlamaAttention (transformers 5.23): two attention calls share Q and K, each
            # over half the V heads repeated to all; the outputs are concatenated (kept by
            # λ's mul), and a parameter-free RMSNorm keeps an fp32 copy and 1/rms per head
            # pair; o_proj reads its scaled output (measured: tools/measure_activations_hf.py)
            if flash:  # the kernel keeps Q and K once (the same tensors), a V copy and its
                # output and log-sum-exp per call
                add((p + "second_map", (sb * vw + sb * Hh * dv) * a + B * Hh * T * 4,
                     "B·T·(n_kv_heads + n_heads)·d_head · act + B·n_heads·T · 4 (the second "
                     "call's V, output and log-sum-exp)", "", L, stack, "tp", None, ()))
            else:  # eager and the math kernel copy Q, K and V per call: the core twice
                for r in rows[core_start:]:
                    add((r[0] + "_second_map", *r[1:]))
            add((p + "maps_concat", sb * 2 * Hh * dv * a, "B·T·2·n_heads·d_head · act (the two "
                 "outputs concatenated)", "", L, stack, "tp", None, ()))
            add((p + "head_pair_norm", sb * Hh * dv * 4 + sb * (Hh // 2) * 4,
                 "B·T·n_heads·d_head · 4 + B·T·n_heads/2 · 4 (fp32 input, 1/rms)", "", L,
                 stack, "tp", None, ()))
        if at.gate != "none":
            # sigmoid(x W_g) ⊙ out: the product keeps the gate's output and the attention
            # output it scales, and the output projection reads the product (o_input); the
            # gate's input is this block's input, kept above (measured on Beam and LFM3:
            # tools/measure_activations_hf.py)
            gw = at.gate_width(at.gate)
            add((p + "gate", sb * gw * a, "B·T·" + ("n_heads" if at.gate == "head" else
                                                    "n_heads·d_head") + " · act (sigmoid gate)",
                 "", L, stack, "tp", None, ()))
            add((p + "gated_output", sb * Hh * dv * a, f"B·T·n_heads·{dvs} · act (the "
                 "attention output the gate scales)", "", L, stack, "tp", None, ()))
        if at.sub_norm:
            # BitNet's attn_sub_norm over the attention output; o_proj reads its output
            norm(p + "sub_norm", stack, L, Hh * dv, "n_heads·d_head")
        # (a rotation that concatenates the rotated part with the rest makes Q contiguous
        # in (B, H, T, d) order: the output is copied back, as with MLA; measured on StableLM)
        if at.sub_norm or at.differential or at.kind == "local" or not (
                kernel in ("cpu_flash", "flash", "efficient") and at.mechanism == "softmax"
                and not at.mla and not (spec.rope_concat and at.rope)):
            # (the flash and memory-efficient kernels, CPU and CUDA alike, write their output
            # in (B, T, H, d) memory, so the output projection reads that very tensor: measured
            # on BART (CPU), GPT-2 and Llama-3.2-1B's shape on an H100 (256-288 MiB less);
            # MLA's query is concatenated in (B, H, T, d) order and is copied: measured)
            if at.kind == "local" and B == 1:
                # LongT5: the output sliced from the padded blocks is a view when B = 1, so
                # the projection keeps the whole padded tensor (measured); with B > 1 the
                # slice is copied
                add((p + "o_input", B * at.queries(T) * Hh * dv * a, f"B·T_blocks·n_heads·"
                     f"{dvs} · act (output projection input: a view of the padded blocks)",
                     "", L, stack, "tp", None, ()))
            else:
                add((p + "o_input", sb * Hh * dv * a, f"B·T·n_heads·{dvs} · act (output "
                     "projection input)", "", L, stack, "tp", None, ()))
        if dropout:
            add((p + "residual_dropout_mask", sb * E * mask, "B·T·d_model · mask", "", L, stack,
                 "", None, ()))

    def ffn_block(f: FFN, p: str, stack: str, L: int, shares_input: bool) -> None:
        readers = (2 if f.kind == "gated" else 1) + f.moe
        if not shares_input:
            matmul_input(p + "input", stack, L, readers, "FFN input")
        elif amp or (amp16 and not rms):  # a parallel block: the FFN's projections cast
            # the shared input again
            add((p + "input_casts", readers * x, f"{readers} · B·T·d_model · act (16-bit casts)",
                 "", L, stack, "", None, ()))
        if f.kind == "param_attention":
            hp, n_p, dk, dv = f.pattn
            add((p + "pattn.q", sb * hp * dk * a, "B·T·h_p·d_pk · act", "", L,
                 stack, "tp", None, ()))
            add((p + "pattn.softmax", B * hp * T * n_p * a, "B·h_p·T·n_p · act", "", L, stack,
                 "tp", None, ()))
            add((p + "pattn.o_input", sb * hp * dv * a, "B·T·h_p·d_pv · act", "", L,
                 stack, "tp", None, ()))
        else:
            act = f.activation
            gated = f.kind == "gated"
            saves = ACT_SAVES[act]
            amp_gelu = (amp or amp16) and act == "gelu_new"
            if gated:
                # act(gate) · up: the product keeps act(gate) and up, beside what the
                # activation keeps (the gate, for an input-keeping one; a result-keeping one
                # keeps act(gate) itself, which ACT_SAVES leaves at 0 because ungated it is
                # the down projection's input). Measured: T5 with gated-relu, one B·T·d_ff
                # tensor a layer more than counted before (-7.8 %)
                saves += 2
            # (name prefix, FFNs per token, their width, its symbol, why)
            paths = [("", f.experts, f.d_ff, f.ff_sym, "every expert") if f.moe and
                     experts == "every_expert" else
                     ("", f.experts_per_token, f.d_ff, f.ff_sym, "experts per token")]
            if f.shared:
                paths.append(("shared.", f.shared, f.d_shared, f.shared_sym, "shared experts"))
            if f.beside:  # Gemma 4: the dense FFN beside the experts
                paths.append(("dense.", 1, f.beside, "d_ff", "dense FFN"))
            for sub, k, width, sym, why in paths:
                route = f" · {k} ({why})" if k > 1 else ""
                if amp_gelu:
                    # HF NewGELUActivation under autocast: pow is on autocast's fp32 list, so
                    # x³'s input copy, tanh and 1 + tanh are fp32; 0.5·x stays 16-bit
                    extra = (saves - 1) * a if gated else 0
                    add((p + sub + "activation", k * sb * width * (14 + extra),
                         f"B·T·{sym} · 14{route} (gelu_new under autocast: 3 fp32 tensors "
                         "and 0.5·x)", "", L, stack, "tp", None, ()))
                elif saves and spec.ffn_act_fp32 and gated and a != 4:
                    # Beam: act(gate.float()) · up.float(): the activation's input, its output
                    # and up are fp32 copies
                    add((p + sub + "activation", k * saves * sb * width * 4,
                         f"{saves} · B·T·{sym} · 4{route} ({act}, gated, on fp32 copies)",
                         "", L, stack, "tp", None, ()))
                elif saves:
                    n = saves - (act == "xielu")  # (xIELU's fourth: its own row, below)
                    add((p + sub + "activation", k * n * sb * width * a,
                         f"{n} · B·T·{sym} · act{route} ({act}{', gated' if gated else ''})",
                         "", L, stack, "tp", None, ()))
                if act == "xielu":
                    add((p + sub + "activation_mask", k * sb * width, f"B·T·{sym} · 1{route} "
                         "(xIELU's x > 0, bool)", "", L, stack, "tp", None, ()))
                    # of its four, expm1 − x is kept for α_n's gradient alone: a frozen base,
                    # under LoRA, keeps three (measured: apertus-tiny.json, q_proj,v_proj)
                    add((p + sub + "activation.alpha_input", k * sb * width * a,
                         f"B·T·{sym} · act{route} (expm1 − x, for α_n's gradient)", "", L,
                         stack, "tp", None, ()))
                if dropout and (spec.t5_dropouts or spec.ffn_dropout):
                    # T5's FFN, GTE's: a dropout before the down projection
                    if not gated and act in RESULT_SAVERS:
                        # ReLU keeps its result, which is no longer wo's input: the
                        # dropout's output is (measured on UMT5: T5DenseActDense)
                        add((p + sub + "activation", k * sb * width * a,
                             f"B·T·{sym} · act{route} ({act}: its result)", "", L, stack,
                             "tp", None, ()))
                    add((p + sub + "inner_dropout_mask", k * sb * width * mask,
                         f"B·T·{sym} · mask{route}", "", L, stack, "tp", None, ()))
                if f.sub_norm:  # BitNet's ffn_sub_norm: the down projection reads its output
                    norm(p + sub + "sub_norm", stack, L, width, sym)
                if spec.swiglu_clamp and gated:
                    # DeepSeek-V4: gate.clamp(max=limit), up.clamp(±limit) keep their inputs,
                    # the projections' outputs (one gate_up output for the experts)
                    add((p + sub + "clamp_inputs", k * 2 * sb * width * a,
                         f"2 · B·T·{sym} · act{route} (the clamps' inputs)", "", L, stack,
                         "tp", None, ()))
                add((p + sub + "out_input", k * sb * width * a,
                     f"B·T·{sym} · act{route} (down projection input)", "", L, stack, "tp", None,
                     ()))
            if f.sparse:
                # Gemma3nTextMLP._gaussian_topk: relu(gate − (mean + z · std)) before the
                # activation; std keeps the gate's output and its result (the activation then
                # keeps the relu's output; measured on gemma3n_text variants)
                add((p + "sparse_gate", sb * f.d_ff * a + sb * a, f"B·T·{f.ff_sym} · act + B·T "
                     "· act (the gate's output, which the std keeps, and the std)", "", L,
                     stack, "tp", None, ()))
            if f.shared_gate:
                # Qwen2-MoE, Qwen3-Next, Qwen3.5-MoE: sigmoid(shared_expert_gate(x)) · the
                # shared experts' output; the product keeps both (measured: qwen3_5_moe_text-
                # attn.json, its full training -4.0 to -1.5 % without them)
                add((p + "shared_gate_product", sb * (E + 1) * a, "B·T·(d_model + 1) · act "
                     "(the shared experts' output and the sigmoid gate)", "", L, stack, "",
                     None, ()))
            if f.moe and spec.router_jitter:
                # DBRX's router jitter: hidden_states *= uniform noise, in place, in training;
                # the multiply keeps the noise (measured)
                add((p + "router_jitter", x, "B·T·d_model · act (the noise the in-place "
                     "multiply keeps: moe_jitter_eps)", "", L, stack, "", None, ()))
            if f.moe:
                # the router's outputs: LongCat-Flash's include its zero-computation experts
                Xr, xsym = (f.experts + f.zero, "(n_experts + zero_experts)") if f.zero \
                    else (f.experts, "n_experts")
                add((p + "router", sb * Xr * 4, f"B·T·{xsym} · 4 (router softmax)",
                     "", L, stack, "", None, ()))
                if spec.router_fp32 and a != 4 and not amp:
                    # DeepSeek-V3's router: F.linear(hidden_states.type(torch.float32),
                    # self.weight.type(torch.float32)) keeps both fp32 copies (measured)
                    # (the input's copy serves the weight's gradient alone: a frozen router,
                    # under LoRA, keeps the weight's only; measured)
                    add((p + "router_fp32_input", sb * E * 4, "B·T·d_model · 4 (the "
                         "router's fp32 input)", "", L, stack, "", None, ()))
                    add((p + "router_fp32_weight", Xr * E * 4, f"{xsym}·d_model · 4 (the "
                         "router's fp32 weight)", "", L, stack, "", None, ()))
                # transformers' expert loop: each expert indexes its tokens (a copy) and
                # scales its output by the routing weight (the mul keeps that output)
                k = f.top_k
                if experts == "every_expert":
                    # Llama4TextMoe: the tokens repeated once per expert and scaled by the
                    # router's scores (the mul keeps the copy and the scores column), the
                    # batched matmul keeps the scaled copy; topk keeps its indices (measured:
                    # tools/measure_activations_hf.py, llama4_text-chunked.json)
                    # (the scaled copy is the experts' matmul input, kept for their weights
                    # alone: a frozen base, under LoRA, keeps the rest; measured:
                    # llama4_text-chunked.json, q_proj,v_proj)
                    X = f.experts
                    add((p + "routed_input", X * x, "n_experts · B·T·d_model · act (the "
                         "tokens repeated per expert, scaled: the experts' input)", "", L,
                         stack, "", None, ()))
                    add((p + "routing_products", X * x + X * sb * a + k * sb * 8,
                         "n_experts · B·T·d_model · act + n_experts · B·T · act + top_k · "
                         "B·T · 8 (the tokens repeated per expert; the scores; the top-k "
                         "indices)", "", L, stack, "", None, ()))
                if f.beside and not f.shortcut:
                    # Gemma4TextDecoderLayer: norms after the dense FFN, before and after the
                    # experts; Gemma4TextRouter norms the residual without a weight (fp32
                    # input, 1/rms), scales it per channel (the mul keeps the normed input)
                    # and projects it (its input kept)
                    for name in ("dense.post_norm", "experts.pre_norm", "experts.post_norm"):
                        norm(p + name, stack, L)
                    add((p + "router_norm", sb * E * 4 + sb * 4, "B·T·d_model · 4 + B·T · 4 "
                         "(fp32 input, 1/rms)", "", L, stack, "", None, ()))
                    add((p + "router_input", 2 * x, "2 · B·T·d_model · act (the normed input "
                         "the scale multiplies, and the projection's input)", "", L, stack, "",
                         None, ()))
                if experts != "every_expert":
                    add((p + "routed_input", k * x, "top_k · B·T·d_model · act (each "
                         "expert's copy of its tokens)", "", L, stack, "", None, ()))
                    add((p + "expert_output", k * x, "top_k · B·T·d_model · act (scaled by "
                         "the routing weight)", "", L, stack, "", None, ()))
                if experts == "eager":
                    # the per-expert loop: index_add_ keeps the scaled output it adds back
                    # (IndexAddBackward0 saves its source); torch.where's (slot, token) int64
                    # pairs and each slot's fp32 routing weight (measured:
                    # tools/measure_activations_hf.py --experts eager)
                    add((p + "expert_scatter", k * x + k * sb * 20, "top_k · B·T·d_model · "
                         "act + top_k · B·T · 20 (index_add_'s source; int64 token pairs, "
                         "fp32 weight)", "", L, stack, "", None, ()))
                elif experts == "grouped_mm":
                    # transformers' grouped_mm_experts_forward: the slots sorted by expert
                    # (perm // top_k and perm gather them, inv_perm restores the order: int64
                    # each), each slot's fp32 routing weight, and the int32 offsets
                    # (measured: tools/measure_activations_hf.py --experts grouped_mm)
                    add((p + "expert_order", k * sb * 28 + f.experts * 4, "top_k · B·T · 28 "
                         "+ n_experts · 4 (int64 sort order, its gather index and inverse; "
                         "fp32 weight; int32 offsets)", "", L, stack, "", None, ()))
        if dropout:
            add((p + "residual_dropout_mask", sb * E * mask, "B·T·d_model · mask", "", L, stack,
                 "", None, ()))

    def mixer_block(m: Mixer, p: str, stack: str, L: int) -> None:
        """What transformers' torch path of a recurrent mixer saves for backward (the path
        the CPU runs; measured: tools/measure_activations_hf.py, tests/test_mixers.py). The
        scans compute in fp32 whatever the model's dtype; the CUDA kernels (mamba_ssm,
        causal-conv1d, fla) keep far less and are not modelled here."""
        def row(name: str, n: int, formula: str, note: str = "") -> None:
            add((p + name, n, formula, "", L, stack, note, None, ()))

        f = 4  # fp32
        up = a != 4  # a 16-bit model: the scans' .float() copies are new tensors
        K, C, Di, N, H = m.conv, m.conv_channels, m.inner, m.state, m.heads
        # (in parallel with attention, Falcon-H1 scales the mixer's input by its muP
        # multiplier first: a tensor of its own here too)
        row("input", x, "B·T·d_model · act (in_proj input)")
        if device == "cuda" and m.kind != "kda":
            cuda_kernels(m, row)
            return
        if m.kind == "short_conv":
            # Lfm2ShortConv.slow_forward: B·x is the conv input, C·conv(B·x) the output
            row("in_proj_output", 3 * x, "3 · B·T·d_model · act (B, C, x)")
            row("conv_input", x, "B·T·d_model · act (B ⊙ x)")
            row("conv_output", sb * E * a + B * E * (K - 1) * a,
                "B·(T + ssm_conv − 1)·d_model · act (padded)")
            row("out_proj_input", x, "B·T·d_model · act")
            return
        if m.kind == "lightning":
            # MiniMaxLightningAttention.forward: a Python loop over blocks of ssm_chunk tokens;
            # each block's matmuls keep their own copies of q, k, v and the decayed q, k (and
            # v once more), the block's masked scores and the state entering it
            Q = m.chunk
            c = -(-T // Q)
            dh = Di // H
            row("qkv_output", 3 * sb * Di * a, "B·T·3·ssm_inner · act (silu input)")
            row("block_copies", 6 * sb * Di * a, "6 · B·T·ssm_inner · act (q, k, v, decayed q, "
                "k and v again, per block)")
            row("block_scores", sb * H * Q * a, "B·T·ssm_heads·ssm_chunk · act",
                "quadratic within a block")
            row("block_states", (c - 1) * B * H * dh * dh * a,
                "(blocks − 1) · B·ssm_heads·d_head² · act (the state entering each block)")
            row("out_norm", sb * Di * f + sb * f,
                "B·T·ssm_inner · 4 + rstd (RMSNorm over the heads' output: its fp32 input)")
            # (kept for the norm's weight alone: a frozen base, under LoRA, keeps it not;
            # measured: minimax-mixer.json, all-linear)
            row("out_norm.normalized", sb * Di * a, "B·T·ssm_inner · act (the normalised "
                "tensor the weight multiplies)")
            row("gate", 2 * sb * Di * a, "2 · B·T·ssm_inner · act (sigmoid gate and normed output)")
            row("out_proj_input", sb * Di * a, "B·T·ssm_inner · act")
            return
        Tk = B * (T + K - 1)  # conv1d pads K − 1 on both sides and drops the tail
        if m.kind == "mamba":
            # MambaMixer.slow_forward and mamba_selective_scan's sequential loop
            R = m.dt_rank
            row("in_proj_output", sb * 2 * Di * a, "B·T·2·ssm_inner · act (x and z)")
            row("conv_output", Tk * Di * a, "B·(T + ssm_conv − 1)·ssm_inner · act")
            row("x", sb * Di * a, "B·T·ssm_inner · act (x_proj input)")
            row("x_proj_output", sb * (R + 2 * N) * a, "B·T·(dt_rank + 2·ssm_state) · act")
            row("dt", 2 * sb * Di * a + (sb * Di * f if up else 0),
                "2 · B·T·ssm_inner · act (softplus in and out)")
            row("discrete_A_B", 2 * sb * Di * N * f, "2 · B·T·ssm_inner·ssm_state · 4 "
                "(exp(Δ·A) and Δ·B, fp32)")
            row("x_fp32", sb * Di * f + (sb * N * f if up else 0),
                "B·T·ssm_inner · 4 (x for Δ·B·x, fp32)")
            row("states", (T + 1) * B * Di * N * f + (T * B * Di * N * a if up else 0),
                "(T + 1) · B·ssm_inner·ssm_state · 4 (one state per step: the loop)")
            row("gate", 2 * sb * Di * f + (sb * Di * a if up else 0),
                "2 · B·T·ssm_inner · 4 (y and silu(z))")
            row("out_proj_input", sb * Di * a, "B·T·ssm_inner · act")
            return
        Q = m.chunk
        c = -(-T // Q)  # chunks
        Tp = c * Q  # padded to whole chunks
        sp = B * Tp
        if m.kind == "mamba2":
            # Mamba2Mixer.torch_forward and mamba2_chunk_scan (the SSD algorithm in einsums);
            # B and C are repeated to every head
            G = m.groups
            row("in_proj_output", sb * (2 * Di + 2 * G * N + H) * a,
                "B·T·(2·ssm_inner + 2·ssm_groups·ssm_state + ssm_heads) · act")
            row("conv_output", Tk * C * a, "B·(T + ssm_conv − 1)·conv channels · act")
            row("dt", 2 * sb * H * a + sb * H * f * (2 if up else 1),
                "B·T·ssm_heads · (2 · act + 4)")
            row("x", sb * (Di * f if up else C * a), "B·T·ssm_inner · 4 (x in fp32)")
            row("D_residual", sp * Di * f, "B·T·ssm_inner · 4 (padded)")
            row("chunk_decay", B * H * Tp * Q * f + 3 * B * H * Tp * f
                + B * H * (c + 1) ** 2 * f, "B·ssm_heads·T·ssm_chunk · 4 (segment sums)")
            row("scores", 2 * sp * Q * H * f, "2 · B·T·ssm_chunk·ssm_heads · 4 (C·Bᵀ and "
                "masked)", "quadratic within a chunk")
            row("B_C_copies", 5 * sp * H * N * f, "5 · B·T·ssm_heads·ssm_state · 4")
            row("x_copies", 2 * sp * Di * f, "2 · B·T·ssm_inner · 4")
            row("chunk_states", B * (c + 1) * Di * N * f + B * c * Di * N * f,
                "(2·chunks + 1) · B·ssm_inner·ssm_state · 4")
            row("y_off", sp * Di * f, "B·T·ssm_inner · 4")
            if m.norm:
                row("gated_norm", sb * Di * f * (4 if up else 3) + sb * G * f,
                    "3 · B·T·ssm_inner · 4 (y, silu(z), their product), fp32")
                # (kept for the norm's weight alone: a frozen base, under LoRA, keeps it
                # not; measured: bamba-tiny.json, in_proj adapted)
                row("gated_norm.normalized", sb * Di * f, "B·T·ssm_inner · 4 (the "
                    "group-normed y the weight multiplies, fp32)")
            else:  # Falcon-H1 without mamba_rms_norm: y · silu(z), no norm (measured)
                row("gate", sb * Di * (f + a), "B·T·ssm_inner · (4 + act) (the fp32 y and "
                    "silu(z))")
            row("out_proj_input", sb * Di * a, "B·T·ssm_inner · act")
            return
        if m.kind == "kda":
            # KimiLinearDeltaAttention and chunk_kimi_delta_attention (transformers 5.23's
            # torch path), walked with autograd's saved tensors (tools/measure_activations_hf.py
            # --mixers: within 0.3 % in six cases, the whole model within 0.4 % in 16 of two
            # shapes; not to the byte). Its decay is per
            # channel, so the intra-chunk scores are formed elementwise: three
            # (chunk × chunk × d_head) fp32 tensors per head and chunk, and the solve runs row
            # by row (each row's product keeps its i × i and i clones)
            dh = Di // H
            row("in_proj_output", sb * C * a, "B·T·3·ssm_inner · act (q, k, v: the "
                "convolution's input)")
            row("conv_output", Tk * C * a, "B·(T + ssm_conv − 1)·3·ssm_inner · act")
            row("gate_inputs", 2 * sb * dh * a, "2 · B·T·d_head · act (f_b's and g_b's "
                "inputs)")
            row("forget_gate", 3 * sb * Di * f + sb * Di, "B·T·ssm_inner · (3 · 4 + 1) (the "
                "softplus's exp, log input and output in fp32; its bool mask)")
            row("rule_operands", RULE_KDA * sp * Di * f + 2 * sb * H * f,
                f"{RULE_KDA} · B·T_chunks·ssm_inner · 4 + 2 · B·T·ssm_heads · 4 (the fp32 "
                "q, k and v, their l2-norms and scalings, k·β, v·β, the solved values, the "
                "chunks' decay; 1/norm)")
            row("chunk_products", 3 * sp * H * Q * dh * f, "3 · B·T_chunks·ssm_heads·"
                "ssm_chunk·d_head · 4 (k·β ⊙ k and q ⊙ k per channel, and their decay)",
                "quadratic within a chunk")
            row("chunk_scores", 2 * sp * H * Q * f + 3 * Q * Q, "2 · B·T_chunks·ssm_heads·"
                "ssm_chunk · 4 + 3 · ssm_chunk² (the solved and the intra-chunk scores; "
                "bool masks)")
            row("solve", B * H * c * (Q - 1) * Q * (Q + 1) // 3 * f, "B·ssm_heads·chunks·"
                "(ssm_chunk − 1)·ssm_chunk·(ssm_chunk + 1) / 3 · 4 (the row-by-row solve's "
                "clones: Σ i² + i)")
            row("loop", B * H * c * dh * dh * f, "B·ssm_heads·chunks·d_head² · 4 (the state "
                "entering each chunk)")
            loop_terms = 2 if c == 1 else 4
            row("loop_operands", loop_terms * sp * Di * f, f"{loop_terms} · B·T_chunks·"
                "ssm_inner · 4 (each chunk's decayed q and k; with several chunks their "
                "products with the state entering it too: read off the walk, not line by line)")
            row("gated_norm", GATED_NORM_KDA * sb * Di * f + sb * H * f,
                f"{GATED_NORM_KDA} · B·T·ssm_inner · 4 + rstd (fp32 input, normalised, "
                "weighted, sigmoid(gate))")
            row("out_proj_input", sb * Di * a, "B·T·ssm_inner · act")
            return
        # gated_deltanet: Qwen3NextGatedDeltaNet and torch_chunk_gated_delta_rule; q and k
        # are repeated to every value head, and every tensor of the rule is fp32
        dk, dv = N, Di // H
        row("in_proj_output", sb * C * a, "B·T·conv channels · act (q, k, v)")
        row("conv_output", Tk * C * a, "B·(T + ssm_conv − 1)·conv channels · act")
        row("beta_g", sb * H * (a + 2 * f) + 2 * H * f, "B·T·ssm_heads · (act + 8) + "
            "2 · ssm_heads · 4 (sigmoid(b); softplus(a + dt_bias) twice; exp(A_log) twice)")
        # torch_chunk_gated_delta_rule (transformers 5.23), line by line (each tensor located
        # where autograd first keeps it: tools/measure_activations_hf.py with the rule's
        # frames; Qwen3.5, every shape tried equal to the byte): the fp32 q and k l2norm keeps
        # with their 1/norm; the padded β, v and k; per chunk the decay matrix, k·kᵀ, q·kᵀ,
        # the solve's matrix and the intra-chunk scores; exp(cumulative decay) twice; k·β,
        # the padded q, the solved k and v; the loop's states and corrections
        # The layout q and k reach the rule in decides what it keeps and copies. A 16-bit
        # model's .float() makes contiguous fp32 copies. In an fp32 model .to(float32) is a
        # no-op: with fewer key than value heads q and k are repeat_interleave's outputs
        # ((B, T, heads, d_k) order); with as many they are views of the convolution's output
        # (channel-major, T innermost), which the l2norm then keeps whole. Unpadded, that
        # order survives into the chunked tensors: the score matmuls copy their operands
        # when more than one (sequence, head, chunk) block must be folded, and in the first
        # order the loop's chunk slices of q and k too (measured: Qwen3.5, Qwen3-Next, OLMo
        # Hybrid; every shape tried equal to the byte)
        G = m.groups
        views = not up and G == H
        if views:
            row("qk_l2norm", sb * C * f + 2 * sb * H * f, "B·T·conv channels · 4 + 2 · "
                "B·T·ssm_heads · 4 (the convolution's output, of which q and k are views; "
                "their 1/norm)")
        else:
            row("qk_l2norm", 2 * sb * H * (dk + 1) * f, "2 · B·T·ssm_heads·(d_k + 1) · 4 (q, "
                "k and their 1/norm)")
        row("padded_inputs", sp * H * (1 + dv + dk) * f, "B·T_chunks·ssm_heads·(1 + d_v + d_k) "
            "· 4 (β, v, k padded to whole chunks)")
        row("chunk_scores", 5 * sp * H * Q * f + Q * Q, "5 · B·T_chunks·ssm_heads·ssm_chunk · 4 "
            "+ ssm_chunk² (decay, k·kᵀ, q·kᵀ, the solve's matrix, the intra-chunk scores; the "
            "bool mask)", "quadratic within a chunk")
        row("chunk_terms", sp * H * (2 + 3 * dk + dv) * f, "B·T_chunks·ssm_heads·(2 + 3·d_k + "
            "d_v) · 4 (exp of the cumulative decay twice; k·β, q, the solved k and v)")
        # an fp32 model whose length fills whole chunks (padding makes new contiguous
        # tensors): the score matmuls copy k·β, kᵀ (twice) and q
        copying = not up and Tp == T and (c > 1 or (B > 1 and not views))
        if copying:
            row("operand_copies", 4 * sp * H * dk * f, "4 · B·T·ssm_heads·d_k · 4 (fp32 "
                "model, whole chunks)")
        if c > 1:
            # the loop reads the decayed q and k (views: kept whole; with several sequences
            # in an fp32 model, copies of the c − 1 chunks that need them), and the chunks'
            # decay
            qk = 2 * (c - 1) * B * H * Q * dk if copying and B > 1 and not views \
                else 2 * sp * H * dk
            row("loop_inputs", (qk + sp * H + B * H * c) * f, "2 · B·T_chunks·ssm_heads·d_k "
                "· 4 (the decayed q and k; with B > 1 in fp32 the c − 1 chunks read) + "
                "exp(last − cumulative decay), the chunks' decay")
        row("loop", B * H * (c * dk * dv + Tp * dv) * f, "B·ssm_heads·(chunks·d_k·d_v + "
            "T_chunks·d_v) · 4 (the state entering each chunk, its correction v_new)")
        # the gated RMSNorm (Qwen3NextRMSNormGated): its fp32 input (in a 16-bit model a copy),
        # the normalised tensor, the weighted one, silu(z) and z in fp32; an fp32 model keeps
        # the rule's output copied back besides (measured, Qwen3-Next and Qwen3.5)
        row("gated_norm", sb * Di * f * (4 if up else 5) + sb * H * f,
            "4 · B·T·ssm_inner · 4 (fp32; 5 · in an fp32 model) + rstd")
        row("out_proj_input", sb * Di * a, "B·T·ssm_inner · act")

    def cuda_kernels(m: Mixer, row) -> None:  # type: ignore[no-untyped-def]
        """What the fused CUDA kernels' autograd functions save (read from their source; not
        measured on a GPU yet): they recompute the convolution and the scan's internals in
        backward."""
        C, Di, N, H = m.conv_channels, m.inner, m.state, m.heads
        note = "from the kernel's source, not measured on a GPU"
        if m.kind == "mamba2":
            # mamba_ssm ssd_combined.py, MambaSplitConv1dScanCombinedFn.save_for_backward:
            # zxbcdt, out_x and the gated norm's rstd (out_proj fused, input recomputed)
            G = m.groups
            row("in_proj_output", sb * (2 * Di + 2 * G * N + H) * a,
                "B·T·(2·ssm_inner + 2·ssm_groups·ssm_state + ssm_heads) · act (zxbcdt)", note)
            row("scan_output", sb * Di * a, "B·T·ssm_inner · act (out_x)", note)
            row("norm_rstd", sb * G * 4, "B·T·ssm_groups · 4", note)
        elif m.kind == "mamba":
            # mamba_ssm selective_scan_interface.py, MambaInnerFn (checkpoint_lvl 1: the conv
            # output and delta recomputed): xz, x_dbl, out, scan_intermediates (fp32, one
            # (A, B·x) pair per 2048-token chunk)
            R = m.dt_rank
            row("in_proj_output", sb * 2 * Di * a, "B·T·2·ssm_inner · act (xz)", note)
            row("x_proj_output", sb * (R + 2 * N) * a, "B·T·(dt_rank + 2·ssm_state) · act "
                "(x_dbl)", note)
            row("scan_output", sb * Di * a, "B·T·ssm_inner · act (out)", note)
            row("scan_intermediates", B * Di * -(-T // 2048) * 2 * N * 4,
                "B·ssm_inner·⌈T / 2048⌉·2·ssm_state · 4", note)
            row("out_proj_input", sb * Di * a, "B·T·ssm_inner · act", note)
        elif m.kind == "gated_deltanet":
            # causal_conv1d_fn keeps its input; fla's chunk_gated_delta_rule keeps q, k, v
            # (q and k repeated to the value heads by transformers), g, beta and its per-chunk
            # matrix A (B·T·heads·chunk, fp32); the gated norm keeps y, z and rstd
            dk, dv, Q = N, Di // H, m.chunk
            row("in_proj_output", sb * (C + Di + 2 * H) * a,
                "B·T·(conv channels + ssm_inner + 2·ssm_heads) · act (qkv, z, b, a)", note)
            row("qkv", sb * H * (2 * dk + dv) * a, "B·T·ssm_heads·(2·d_k + d_v) · act", note)
            row("g_beta_A", sb * H * (2 + Q) * 4, "B·T·ssm_heads·(2 + ssm_chunk) · 4", note)
            row("gated_norm", 2 * sb * Di * a + sb * H * 4, "2 · B·T·ssm_inner · act + rstd",
                note)
            row("out_proj_input", sb * Di * a, "B·T·ssm_inner · act", note)
        else:  # short_conv with causal_conv1d: no padded tail
            row("in_proj_output", 3 * x, "3 · B·T·d_model · act (B, C, x)", note)
            row("conv_input", x, "B·T·d_model · act (B ⊙ x)", note)
            row("conv_output", x, "B·T·d_model · act", note)
            row("out_proj_input", x, "B·T·d_model · act", note)

    # embeddings (an encoder-decoder looks up each stack's tokens: two index tensors, and two
    # dropout masks; measured on T5)
    n_stacks = 2 if spec.arch == "encoder-decoder" else 1
    add(("embed.token_ids", sb * 8, "B·T · 8 (int64 indices)", "", n_stacks, "", "", None, ()))
    if spec.position == "rope" and not spec.mla and spec.n_heads and n_stacks == 1:
        # the model's rotary embedding computes cos and sin once, (1, T, rotary dims) in the
        # residual stream's dtype, for position ids (1, T); every layer's q·cos and
        # rotate_half(q)·sin keep that one pair (measured: all 92 Llama-family fixture rows
        # were short by exactly it). (T5Gemma's two stacks are left as they were: its B = 1
        # rows are over by 0.4 % already, for a reason not found)
        # (kept in fp32 where the model computes RoPE in fp32: spec.rope_fp32)
        dr = int(spec.head_dim * spec.rotary_fraction) // 2 * 2
        rb = 4 if spec.rope_fp32 else r
        add(("rope.cos_sin", 2 * T * dr * rb, "2 · T·rotary_dims · " + (
            "4 (fp32" if spec.rope_fp32 else "act (") + "cos and sin, one pair for the model)",
             f"2 · {T} · {dr} · {rb}", 1, "", "", None, ()))
    if spec.side_concat:
        # RoCBERT: each side table keeps its (zero-filled) indices; the projection keeps the
        # concatenated vectors
        n_side = len(spec.side_tables)
        cin = E + sum(w for _, w in spec.side_tables)
        add(("embed.side_ids", n_side * sb * 8, f"{n_side} · B·T · 8 (int64 indices)", "", 1,
             "", "", None, ()))
        add(("embed.side_concat", sb * cin * a, "B·T·(d_model + side widths) · act (the "
             "projection's input)", "", 1, "", "", None, ()))
    if spec.position == "learned":
        add(("embed.position_ids", T * 8, "T · 8 (int64, shared by the batch)", "", 1, "", "",
             None, ()))
    if spec.embed_factorized:
        # ALBERT, ELECTRA, RemBERT: the embeddings (and their dropout) are d_embed wide; the
        # projection to d_model keeps its input
        Ve = spec.embed_dim
        if dropout:
            add(("embed.dropout_mask", sb * Ve * mask, "B·T·d_embed · mask", "", 1, "", "",
                 None, ()))
        add(("embed.project_input", sb * Ve * a, "B·T·d_embed · act (the projection's "
             "input)", "", 1, "", "", None, ()))
    elif dropout:
        add(("embed.dropout_mask", sb * E * mask, "B·T·d_model · mask", "", n_stacks, "", "",
             None, ()))
    if (spec.position == "relative" or spec.relative_bias) and spec.relative_scope == "first":
        # T5 (and MPNet): the relative-position bias is looked up once per stack through a
        # T×T int64 bucket index, which the embedding keeps
        if spec.encoder_local_block:
            # LongT5: the encoder's local attention looks its bias up for one block's
            # queries against three blocks' keys (LongT5LocalAttention.compute_bias)
            b = spec.encoder_local_block
            add(("embed.relative_buckets", T * T * 8, "T·T · 8 (int64 bucket indices, the "
                 "decoder's)", "", 1, "", "", None, ()))
            add(("embed.relative_buckets_local", b * 3 * b * 8, "local_block·3·local_block · "
                 "8 (int64 bucket indices, the encoder's)", "", 1, "", "", None, ()))
            if spec.encoder_global_block:  # the global tokens' (compute_side_bias)
                G = T // spec.encoder_global_block
                add(("embed.relative_buckets_global", B * T * G * 8, "B·T·global_tokens · 8 "
                     "(int64 bucket indices, the encoder's global tokens)", "", 1, "", "",
                     None, ()))
        else:
            add(("embed.relative_buckets", T * T * 8, "T·T · 8 (int64 bucket indices, per "
                 "stack)", "", n_stacks, "", "", None, ()))
    for st in plan_of(spec).stacks:
        for g in st.groups:
            blk = g.block
            for name in blk.norms:
                bare = name == "attn.norm" and g.name == st.bare_first  # ModernBERT
                if g.count - bare:
                    norm(f"{g.name}.{name}", g.name, g.count - bare)
            if blk.attn is not None:
                attention_block(blk.attn, f"{g.name}.attn.", g.name, g.count)
            if blk.mixer is not None:
                mixer_block(blk.mixer, f"{g.name}.mixer.", g.name, g.count)
            if blk.cross is not None:
                attention_block(blk.cross, f"{g.name}.cross.", g.name, g.count)
            if blk.ffn is not None:
                ffn_block(blk.ffn, f"{g.name}.ffn.", g.name, g.count,
                          shares_input=blk.ffn_reads_attn_input)
            if blk.ple:
                # Gemma4TextDecoderLayer's per-layer input: the gate keeps its input, the
                # activation its input and output (the product's factor), the projection its
                # input, then a norm over d_model (measured: tools/measure_activations_hf.py)
                P, q = blk.ple, g.name + ".ple."
                n_act = ACT_SAVES.get(spec.activation, 1) + 1
                add((q + "gate_input", x, "B·T·d_model · act", "", g.count, g.name, "", None,
                     ()))
                add((q + "activation", n_act * sb * P * a, f"{n_act} · B·T·per_layer_input · "
                     "act (the gate's activation and the product's factor)", "", g.count,
                     g.name, "", None, ()))
                add((q + "project_input", sb * P * a, "B·T·per_layer_input · act", "",
                     g.count, g.name, "", None, ()))
                norm(q + "norm", g.name, g.count)
            if blk.altup:
                altup_rows(blk.altup, g.name + ".altup.", g.name, g.count)
            if blk.hc:
                for sub in ("attn_hc", "ffn_hc"):
                    hc_rows(blk.hc, f"{g.name}.{sub}.", g.name, g.count)
            if blk.laurel:
                # Gemma3nTextLaurelBlock: linear_left reads the attention's input (counted
                # there), linear_right keeps its rank-wide input, then a norm
                add((g.name + ".laurel.right_input", sb * blk.laurel * a, "B·T·laurel_rank · "
                     "act", "", g.count, g.name, "", None, ()))
                norm(g.name + ".laurel.norm", g.name, g.count)
        if st.final_norm:
            norm(f"{st.name}.final_norm", "", 1)
            if dropout and spec.t5_dropouts:  # T5Stack: dropout after the final norm
                add((f"{st.name}.final_dropout_mask", sb * E * mask, "B·T·d_model · mask", "",
                     1, "", "", None, ()))
    if spec.arch == "encoder-decoder" and spec.n_decoder_layers:
        # the encoder's output, which every cross-attention's K and V projections read (one
        # tensor for all decoder layers; measured on T5)
        add(("decoder.cross.encoder_output", sb * E * a, "B·T·d_model · act (cross K/V "
             "input, shared by the layers)", "", 1, "", "", None, ()))
    if spec.per_layer_input:
        # Gemma4TextModel.project_per_layer_inputs: the projection keeps the scaled
        # embeddings, a norm over each layer's vector, and every layer's mul keeps the
        # combined per-layer inputs (one tensor of n_layers · per_layer_input per token)
        P, Lp = spec.per_layer_input, spec.n_layers
        add(("embed.project_per_layer_input", x, "B·T·d_model · act", "", 1, "", "", None,
             ()))
        norm("embed.per_layer_norm", "", 1, P, "per_layer_input", Lp, "n_layers·")
        add(("embed.per_layer_inputs", sb * Lp * P * a, "B·T·n_layers·per_layer_input · act",
             "", 1, "", "", None, ()))
    if spec.hc_streams:  # DeepseekV4HyperHead before the final norm
        hc_rows(spec.hc_streams, "head.hc.", "", 1, head=True)
    if spec.altup_inputs:
        # Gemma3nTextModel: each further stream is the embeddings projected, its root mean
        # square matched to the embeddings' (x · target / new: the projection's output and the
        # product kept, and each magnitude and its clamped mean); before the head the same for
        # each stream projected back, whose input is a view of the last layer's streams
        # (measured: tools/measure_activations_hf.py, gemma3n_text variants)
        n1, st_ = spec.altup_inputs - 1, sb * E * r
        match = n1 * (2 * st_ + 2 * sb * r) + 2 * sb * r
        add(("altup.input_streams", match + (0 if spec.per_layer_input else st_),
             "(altup_inputs − 1) · (2 · B·T·d_model + 2 · B·T) · res + 2 · B·T · res (each "
             "projection's output and rescaled product, their magnitudes; the target's)", "", 1,
             "", "", None, ()))
        add(("altup.output_streams", spec.altup_inputs * st_ + match, "altup_inputs · "
             "B·T·d_model · res + (altup_inputs − 1) · (2 · B·T·d_model + 2 · B·T) · res + 2 · "
             "B·T · res (the last layer's streams, then as at the input)", "", 1, "", "", None,
             ()))
    if spec.rel_embeddings_norm and spec.rel_terms != "none":
        # DebertaV2Encoder.get_rel_embedding: a LayerNorm over the table (a parameter: its
        # input is not an activation), once per forward; unused and freed with no term
        add(("embed.relative_table_norm.stats", 2 * spec.rel_embeddings * stat,
             "2 · rel_embeddings · stat (mean, rstd)", "", 1, "", "", None, ()))
    if spec.embedding_norm:
        if spec.embed_factorized:
            norm("embed.norm", "", 1, spec.embed_dim, "d_embed")
        else:
            norm("embed.norm", "", 1)
    if attention == "sdpa" and flash and spec.explicit_mask and spec.position == "alibi":
        # Falcon with ALiBi: the bias, masked, is the float mask every layer's SDPA call keeps
        # (one tensor; measured, falcon-alibi-new-1ln.json)
        add(("attn.alibi_mask", B * spec.n_heads * T * T * a, "B·n_heads·T·T · act (ALiBi's "
             "bias as the attention mask, shared by the layers)", "", 1, "", "tp", None, ()))
    if spec.lm_head or spec.mlm_head:
        hw = E if spec.mlm_head else spec.embed_dim
        add(("head.input", sb * hw * a, "B·T·d_model · act (the head's input)" if
             spec.mlm_head else "B·T·d_embed · act (LM head input)", "", 1, "", "", None, ()))
        if spec.mlm_head:
            # the prediction head (BertPredictionHeadTransform, ModernBertPredictionHead):
            # dense, activation, norm, then the decoder; head.input is the dense's input
            # (measured with saved_tensors_hooks on ModernBERT and its decoder)
            n_act = ACT_SAVES.get(spec.activation, 1)
            W = spec.head_width
            wsym = "d_model" if W == E else "mlm_width"
            xw = sb * W * a
            add(("head.mlm.activation", n_act * xw, f"{n_act} · B·T·{wsym} · act (the "
                 "head's activation keeps its input)" if n_act > 1 else f"B·T·{wsym} · act "
                 "(the head's activation keeps its input)", "", 1, "", "", None, ()))
            norm("head.mlm.norm", "", 1, W, wsym)
            add(("head.mlm.decoder_input", xw, f"B·T·{wsym} · act (the decoder's input)", "",
                 1, "", "", None, ()))
        if spec.logit_softcapping:
            # Gemma 2, Beam: logits = cap · tanh(logits / cap); tanh keeps its output
            cb = 4 if spec.softcap_fp32 else a
            add(("head.softcap_tanh", sb * V * cb, f"B·T·vocab_size · {'4' if cb == 4 else 'act'}"
                 " (the soft-capping tanh's output" + (", fp32)" if cb == 4 else ")"), "", 1,
                 "", "", None, ()))
        # transformers' loss_function upcasts the logits and keeps log_softmax in fp32, for
        # every position; BERT's, BART's and T5's nn.CrossEntropyLoss keeps it in the
        # activation dtype, except under autocast (log_softmax is on its fp32 list)
        if spec.loss_fp32 or amp or amp16 or a == 4:
            add(("loss.log_softmax", sb * V * 4, "B·T·vocab_size · 4 (fp32 log-softmax)", "",
                 1, "", "", None, ()))
        else:
            add(("loss.log_softmax", sb * V * a, "B·T·vocab_size · act (log-softmax, no "
                 "upcast)", "", 1, "", "", None, ()))
        add(("loss.targets", sb * 8, "B·T · 8 (int64 labels)", "", 1, "", "", None, ()))

    if any(g.block.mixer is not None for g in plan_of(spec).groups):
        notes.append("recurrent mixers: on the CPU, what transformers' torch path saves "
                     "(measured); on CUDA, what the fused kernels (mamba_ssm, causal-conv1d, "
                     "fla) save, read from their source and not yet measured on a GPU")
    out = Breakdown(spec.name, "bytes", tuple(rows), tuple(notes), {},
                    functools.partial(symbols, spec, B=B, T=T, act=a, mask=mask, stat=stat,
                                      keys=keys, **local_symbols(spec, T)))
    if recompute == "none":
        return out
    return apply_recompute(spec, out, recompute, sb * E * r, "B·T·d_model · act" if r == a
                           else "B·T·d_model · 4 (the fp32 residual stream)")


# the attention core Korthikanti et al. 2022 (Sec. 5) recompute selectively: the B·H·T² tensors
_SELECTIVE = (".attn.softmax", ".attn.dropout_mask", ".attn.dropout_output",
              ".cross.softmax", ".cross.dropout_mask", ".cross.dropout_output")


def apply_recompute(spec: ModelSpec, acts: Breakdown, recompute: str, layer_input: int,
                    layer_input_formula: str = "B·T·d_model · act") -> Breakdown:
    """What stays saved under activation recomputation, from the saved set without it (full
    training or LoRA's alike, so the two compose).

    full: torch.utils.checkpoint around each layer (non-reentrant, as the Hugging Face
    Trainer runs it): a layer's saved tensors are dropped and its inputs kept, but only in
    layers where autograd saves anything at all (a frozen layer below the first adapter
    records no graph, so nothing keeps its input); backward rebuilds one layer at a time, so
    one layer's saved set (the largest; rows cover a group's top layers, so its last layer
    holds them all) is the ``recomputed_layer`` row, live in backward only (training_phases).
    ``layer_input``: one B·T·d_model hidden state in the residual stream's dtype.
    selective: the attention core's T² tensors (Korthikanti et al. 2022, Sec. 5)."""
    if recompute == "selective":
        return Breakdown(acts.model, "bytes", tuple(r for r in acts.rows
                                                    if not r[0].endswith(_SELECTIVE)),
                         acts.notes + ("selective recomputation: the attention probabilities "
                                       "are recomputed",), {}, acts.symbols)
    if recompute != "full":
        raise TcalcError("--recompute: expected one of none, selective, full")
    kept = [r for r in acts.rows if not r[5]]  # outside the layers
    for st in plan_of(spec).stacks:
        per_layer: tuple[int, int] = (0, 0)
        largest: tuple | None = None  # type: ignore[type-arg]
        for g in st.groups:
            mine = [r for r in acts.rows if r[5] == g.name]
            saving = max([r[4] for r in mine] or [0])  # the layers that save anything
            if saving:
                kept.append((f"{g.name}.checkpoint_input", layer_input, layer_input_formula,
                             "", saving, g.name,
                             "kept per layer (full recomputation)", None, ()))
            if sum([r[1] for r in mine]) > sum(per_layer):
                # (what tensor parallelism splits, and the rest)
                per_layer = (sum([r[1] for r in mine if r[6] == "tp"]),
                             sum([r[1] for r in mine if r[6] != "tp"]))
                largest = max(mine, key=_one_tensor)
        for part, note in zip(per_layer, (RECOMPUTED_TP, RECOMPUTED), strict=True):
            if part:
                kept.append((f"{st.name}.recomputed_layer" + ("_split" if note ==
                             RECOMPUTED_TP else ""), part, "one layer's activations" + (
                             " that tensor parallelism splits" if note == RECOMPUTED_TP
                             else ""), f"{part:,}", 1, "", note, None, ()))
        if largest:
            # an op's backward holds its output's gradient and makes its input's beside the
            # saved tensors: twice the largest of them (the eager softmax's T² gradients;
            # measured on an H100, Llama-3.2-1B's shape in fp32: docs/peak_cuda_h100.md)
            one = _one_tensor(largest)
            kept.append((f"{st.name}.rebuild_gradients", 2 * one, "2 · the largest "
                         "tensor the rebuilt layer saves (its gradient, and its input's)",
                         f"2 · {one:,}", 1, "",
                         RECOMPUTED_TP if largest[6] == "tp" else RECOMPUTED, None, ()))
    return Breakdown(acts.model, "bytes", tuple(kept), acts.notes + (
        "full recomputation: each layer's input is kept; one layer is rebuilt at a time in "
        "backward",), {}, acts.symbols)


def _one_tensor(row: tuple) -> int:  # type: ignore[type-arg]
    """The bytes of one tensor of a row: a row of n same-sized tensors says so by its
    formula's leading "n · " (GELU's "4 · B·T·d_ff · act")."""
    head = row[2].split(" · ", 1)[0]
    return row[1] // int(head) if head.isdigit() and int(head) > 0 else row[1]


# the notes of the one layer full recomputation rebuilds: live in backward only (the part
# tensor parallelism splits, and the rest)
RECOMPUTED = "rebuilt during backward, one layer at a time"
RECOMPUTED_TP = "rebuilt during backward, one layer at a time (split by tensor parallelism)"


def megatron_activations(spec: ModelSpec, s: Settings, T: int) -> Breakdown:
    """Activations of Megatron-LM's own layers on the first pipeline stage, per GPU, as its
    theoretical formula has them (megatron/training/theoretical_memory_usage.py, after
    Korthikanti et al. 2022, Table 2): with sequence parallelism and selective recomputation
    s·b·h·(18 + 4·F/h) per layer over tp (compute_activation_memory); otherwise
    s·b·h·(10 + 24/tp) per layer (compute_activation_memory_without_sp) and 5 % on top for
    temporaries. Both add the embedding's input (8·s·b) and dropout (s·b·h) for pp in-flight
    micro-batches, and on a single stage the output layer: 4·s·b·h·(1 + V/h) (with SP) or
    2·(s·b·V/tp + s·b·h) (without). Fewer micro-batches than pp discount it."""
    sb, h, V, L = T * s.batch_size, spec.d_model, spec.vocab_size, spec.total_layers
    F = spec.d_ff
    sp = s.sequence_parallel and s.recompute == "selective"
    rows: list[tuple] = []  # type: ignore[type-arg]
    scale = 1.0  # applied to everything above the output layer, as the formula does
    if s.pp > 1 and s.micro_batches:
        scale = min(1.0, s.micro_batches / s.pp)
    if sp:
        per_layer = sb * h * (18 + 4 * F / h) / s.tp
        layer_formula = "s·b·h·(18 + 4·F/h) / tp"
    else:
        per_layer = sb * h * (10 + 24 / s.tp)
        layer_formula = "s·b·h·(10 + 24/tp)"
    emb_in = 8 * sb * s.pp / (s.tp if sp else 1)
    emb_drop = sb * h * s.pp / (s.tp if sp else 1)
    rows.append(("megatron.layers", round(per_layer * scale), layer_formula, "", L, "", "",
                 None, ()))
    rows.append(("megatron.embedding_input", round(emb_in * scale), "8·s·b·pp", "", 1, "", "",
                 None, ()))
    rows.append(("megatron.embedding_dropout", round(emb_drop * scale), "s·b·h·pp", "", 1, "",
                 "", None, ()))
    if s.pp == 1:
        out = (sb * h * 4 * (1 + V / h) / s.tp) if sp else 2 * (sb * V / s.tp + sb * h)
        rows.append(("megatron.output", round(out), "4·s·b·h·(1 + V/h) / tp" if sp else
                     "2·(s·b·V/tp + s·b·h)", "", 1, "", "", None, ()))
    if not sp:
        body = sum(r[1] * r[4] for r in rows)
        rows.append(("megatron.temporaries", round(body * 0.05), "5 % of the above", "", 1,
                     "", "", None, ()))
    return Breakdown(spec.name, "bytes", tuple(rows), (
        "activations: Megatron-LM's theoretical formula for its own layers (first pipeline "
        "stage, per GPU), not transformers' implementation",), {})


def korthikanti_per_layer(spec: ModelSpec, batch: int, seq_len: int) -> int:
    """Korthikanti et al. 2022, Eq. 1: s·b·h·(34 + 5·a·s/h) bytes per layer (16-bit, no
    parallelism, dropout masks of 1 byte)."""
    s, b, h, heads = seq_len, batch, spec.d_model, spec.n_heads
    return s * b * h * 34 + 5 * heads * s * s * b


# -- the report ------------------------------------------------------------------------------

FREEZABLE = CATEGORIES  # the parts --freeze names
OFFLOADS = ("none", "optimizer", "all")
_BNB_4BIT = ("bnb-nf4", "bnb-fp4")


@dataclass(frozen=True)
class Settings:
    """How the model is trained or served; every knob that changes the bytes."""

    precision: str = "fp32"  # fp32 | fp16 | bf16: the weights' dtype (pure), or with mixed
    mixed: bool = False  # AMP: fp32 master weights + 16-bit copies (precision picks which)
    # the framework (RECIPES, recipes.py): how mixed precision runs and ZeRO shards. hf (amp:
    # torch autocast over fp32 weights, as the Hugging Face Trainer runs bf16=True; torchtune
    # and litgpt run torch's way too) or megatron / deepspeed (the model in 16-bit, an fp32
    # master copy and fp32 gradients beside it). The CLI's --recipe also sets the fields
    # below that the recipe fixes (recipes.RECIPE_SETTINGS); here it is one field
    recipe: str = "hf"
    optimizer: str = "adamw"
    batch_size: int = 1
    seq_len: int = 0  # 0: the model's max_positions (or 2048)
    recompute: str = "none"
    # whose layers the activations describe: hf (transformers' modelling code, tensor by
    # tensor, measured) or megatron (Megatron-LM's own layers, by its theoretical formula)
    activations: str = "hf"
    micro_batches: int = 0  # megatron: micro-batches per step (0: at least pp, as assumed)
    attention: str = "eager"
    sdpa_kernel: str = "auto"  # SDPA_KERNELS: auto = as torch picks it (attention_kernel)
    experts: str = "auto"  # EXPERTS_IMPLS: auto = transformers' default for the class
    device: str = "cuda"
    dropout: bool | None = None  # None: on when the model trains with dropout (spec.dropout)
    gpus: int = 1
    zero: int = 0  # ZeRO stage 0-3 (3 = FSDP full sharding)
    tp: int = 1
    pp: int = 1
    ep: int = 1  # expert parallel (Megatron-LM): experts split over ep ranks of dp · cp
    cp: int = 1  # context parallel: each rank holds T / cp of the sequence
    # DeepSpeed: ZeRO-Offload / ZeRO-Infinity move model states to CPU memory:
    # none | optimizer (fp32 master weights, gradients and optimizer states) | all (the
    # parameters too, ZeRO-3); ZeRO-3's live gathered parameters, in elements
    offload: str = "none"
    zero3_max_live: int = 1_000_000_000  # stage3_max_live_parameters (DeepSpeed default 1e9)
    zero3_prefetch: int = 50_000_000  # stage3_prefetch_bucket_size (DeepSpeed default 5e7)
    sequence_parallel: bool = False
    inference: bool = False
    dtype: str = "bf16"  # inference weights: fp32, fp16, bf16, int8, int4
    kv_dtype: str = ""  # inference KV cache ("" = bf16, or the weights' dtype if 16/32-bit)
    group_size: int = 128  # int8/int4 scale group
    grad_accum: int = 1  # micro-batches per optimizer step (gradients live across them)
    optimizer_impl: str = "foreach"  # foreach (torch's CUDA default) | fused | for-loop
    # Fine-tuning: LoRA adapters of this rank over a frozen base (0: none), on
    # these layers (lora.ALL_LINEAR or module names), with this dropout on their input; or
    # full fine-tuning with these parts frozen (params.CATEGORIES)
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ("all-linear",)
    lora_dropout: float = 0.0
    freeze: tuple[str, ...] = ()
    # Weights stored in a real quantised format (quant.FORMATS), served or as a frozen base
    quant: str = ""
    # bitsandbytes 4-bit: QLoRA's double quantisation of the block absmax (on), or fp32 absmax
    # (BitsAndBytesConfig's default); and bitsandbytes before 0.44, whose MatMul4Bit kept its
    # input for backward whenever it needed a gradient (ctx.tensors = (A, B); since 0.44
    # (None, B): bitsandbytes/autograd/_functions.py)
    double_quant: bool = True
    bnb_legacy: bool = False
    # bitsandbytes' layers as Lightning's BitsandbytesPrecision makes them (LitGPT): every
    # nn.Linear replaced, the LM head's too, each quantised from an fp16 copy, so its
    # quant_state is fp16 and MatMul4Bit's dequantise-then-cast to the compute dtype holds
    # two 16-bit copies of a matrix for a moment (lightning/fabric/plugins/precision/
    # bitsandbytes.py, _Linear4bit.quantize: weight.to(dtype=torch.half))
    lightning_bnb: bool = False
    # the training loop keeps the previous micro-batch's logits named until the next forward
    # returns (LitGPT's fit: `logits = model(input_ids, lm_head_chunk_size=128)`), so the
    # graph behind them lives through the next forward, with what autograd functions hold as
    # ctx attributes, which backward does not free: bitsandbytes before 0.44 keeps each 4-bit
    # matmul's input there (MatMul4Bit: ctx.tensors = (A, B))
    keeps_previous_graph: bool = False
    # transformers' generation cache in training (None: its default, on unless gradient
    # checkpointing turns it off): DynamicCache's torch.cat copies K and V
    use_cache: bool | None = None
    # tensor parallelism's plan: layers (the attention and MLP sharded, embeddings, head and
    # loss whole on every rank: transformers' tp_plan, torchtitan's layer plan, DTensor) or
    # vocab (Megatron-LM's vocabulary-parallel embedding, head and cross-entropy too);
    # "" follows the recipe (megatron: vocab)
    tp_plan: str = ""
    # Serving: a paged KV cache's block of tokens (0: exact); the share of the GPU
    # the runtime may take (vLLM's gpu_memory_utilization, 0.9 by default); the prefill chunk
    # whose activations must fit beside the cache (vLLM's max_num_batched_tokens)
    kv_block: int = 0
    gpu_util: float = 0.9
    prefill_chunk: int = 2048
    # The frameworks' own ways (recipes.py). LoRA adapters' dtype ("": fp32, as PEFT upcasts
    # them; bf16 in torchtune, LitGPT and DeepSpeed, which make or cast them in the model's)
    adapter_dtype: str = ""
    # the loss (LOGITS_FP32): where the logits become fp32, the chunks the head and loss run
    # in (torchtune's CEWithChunkedOutputLoss: 8), and whether torch.compile compiles the
    # cross-entropy with its upcast (it then keeps the 16-bit logits, not the fp32
    # log-softmax: measured, tests/data/loss_context_cuda_h100.json)
    logits_fp32: str = "loss"
    loss_chunks: int = 1
    compile_loss: bool = False
    # the LM head a matrix of its own where the model ties it to the token embedding: LitGPT
    # converts a Hub checkpoint with lm_head.weight copied from the embedding
    # (litgpt/scripts/convert_hf_checkpoint.py) and its GPT holds the two apart
    untied_head: bool = False
    # torchtune's optimizer_in_bwd: one optimizer per parameter stepped in its
    # post-accumulate-grad hook, so each gradient is freed as soon as it is made
    optimizer_in_backward: bool = False
    # bitsandbytes' paged optimizers: the states in CUDA unified memory (cudaMallocManaged),
    # outside the caching allocator's counters (torch.cuda.max_memory_allocated)
    paged_optimizer: bool = False
    # torchtune's activation offloading (OffloadActivations): what the model saves for
    # backward goes to CPU memory, brought back a layer ahead of backward; needs full
    # recomputation
    offload_activations: bool = False
    # the peak reported (METRICS): allocated, reserved, or what nvidia-smi shows
    metric: str = "allocated"

    @property
    def sixteen_bit_model(self) -> bool:
        """Mixed precision with the model itself in 16-bit and an fp32 master copy beside it:
        the megatron recipe, and DeepSpeed / FSDP wherever they hold the parameters (ZeRO-3,
        offload), which autocast does not run under."""
        return self.mixed and (self.recipe in SIXTEEN_BIT_RECIPES or self.offload != "none")

    @property
    def torch_parallel(self) -> bool:
        """Data parallelism as torch runs it (the recipes hf, torchtune and litgpt, no
        DeepSpeed offload): DDP with gradient_as_bucket_view, ZeroRedundancyOptimizer for
        ZeRO-1, FSDP2 for ZeRO-2 (reshard_after_forward=False) and ZeRO-3; else Megatron-LM's
        / DeepSpeed's."""
        return self.recipe not in SIXTEEN_BIT_RECIPES and self.offload == "none"

    @property
    def fsdp2_mixed(self) -> bool:
        """FSDP2 (ZeRO-2/3 as torch runs it) under --mixed: MixedPrecisionPolicy gathers the
        parameters in bf16 and casts the inputs, so the model computes in 16-bit."""
        return self.mixed and self.torch_parallel and self.zero >= 2 and self.dp * self.cp > 1

    @property
    def vocab_parallel(self) -> bool:
        """Tensor parallelism shards the embeddings, head and loss over the vocabulary."""
        return (self.tp_plan or ("vocab" if self.recipe == "megatron" else "layers")) == "vocab"

    def __post_init__(self) -> None:
        if not (self.gpus >= 1 and self.tp >= 1 and self.pp >= 1):
            raise TcalcError("--gpus, --tp and --pp: expected integers >= 1")
        checks = [
            (self.precision in PRECISIONS, f"--precision: expected one of {', '.join(PRECISIONS)}"),
            (not (self.mixed and self.precision == "fp32"),
             "--mixed: pick its 16-bit dtype with --precision fp16 or bf16"),
            (self.recipe in RECIPES, f"--recipe: expected one of {', '.join(RECIPES)}"),
            (self.sdpa_kernel in SDPA_KERNELS,
             f"--sdpa-kernel: expected one of {', '.join(SDPA_KERNELS)}"),
            (self.sdpa_kernel == "auto" or self.attention == "sdpa",
             "--sdpa-kernel: applies to --attention sdpa"),
            (self.experts in EXPERTS_IMPLS,
             f"--experts: expected one of {', '.join(EXPERTS_IMPLS)}"),
            (self.recipe not in SIXTEEN_BIT_RECIPES or self.mixed,
             f"--recipe {self.recipe}: needs --mixed"),
            (self.adapter_dtype in ("", *ADAPTER_DTYPES),
             f"--adapter-dtype: expected one of {', '.join(ADAPTER_DTYPES)}"),
            (self.logits_fp32 in LOGITS_FP32,
             f"--logits-fp32: expected one of {', '.join(LOGITS_FP32)}"),
            (self.loss_chunks >= 1, "--loss-chunks: expected an integer >= 1"),
            (self.metric in METRICS, f"--metric: expected one of {', '.join(METRICS)}"),
            (not self.optimizer_in_backward or self.grad_accum == 1,
             "--optim-in-bwd: needs --grad-accum 1 (each gradient is stepped and "
             "freed in backward; torchtune refuses it too)"),
            (not self.optimizer_in_backward or (self.gpus == 1 and not self.lora_rank),
             "--optim-in-bwd: modelled for full training on one GPU (torchtune's "
             "single-device recipe)"),
            (not self.paged_optimizer or self.optimizer in ("adamw", "adam", "adamw8bit"),
             "--paged: bitsandbytes pages AdamW's states (--optimizer adamw or "
             "adamw8bit)"),
            (not self.offload_activations or self.recompute == "full",
             "--offload activations: needs --recompute full (torchtune offloads the inputs "
             "that activation checkpointing keeps)"),
            (self.optimizer in OPTIMIZERS, f"--optimizer: expected one of {', '.join(OPTIMIZERS)}"),
            (self.batch_size >= 1, "--batch-size: expected an integer >= 1"),
            (self.seq_len >= 0, "--seq-len: expected an integer >= 1"),
            (self.gpus >= 1 and self.tp >= 1 and self.pp >= 1,
             "--gpus, --tp and --pp: expected integers >= 1"),
            (self.ep >= 1 and self.cp >= 1, "--ep and --cp: expected integers >= 1"),
            (self.gpus % (self.tp * self.pp * self.cp) == 0,
             f"--gpus {self.gpus}: expected a multiple of --tp × --pp"
             + (" × --cp" if self.cp > 1 else "") + f" = {self.tp * self.pp * self.cp}"),
            (self.gpus % (self.tp * self.pp * self.cp) or (self.dp * self.cp) % self.ep == 0,
             f"--ep {self.ep}: expected a divisor of data × context parallel "
             f"({self.gpus // max(self.tp * self.pp, 1)} GPUs; Megatron-LM draws the expert-"
             "parallel group from them)"),
            (0 <= self.zero <= 3, "--zero: expected a stage from 0 to 3"),
            (self.grad_accum >= 1, "--grad-accum: expected an integer >= 1"),
            (self.optimizer_impl in OPTIMIZER_IMPLS,
             f"--optimizer-impl: expected one of {', '.join(OPTIMIZER_IMPLS)}"),
            (not self.sequence_parallel or self.tp > 1, "--sequence-parallel needs --tp > 1"),
            (self.lora_rank >= 0, "--lora: expected a rank >= 1"),
            (0 <= self.lora_dropout < 1, "--lora-dropout: expected a probability in [0, 1)"),
            (not (self.lora_rank and self.freeze),
             "--freeze: applies to full fine-tuning; with --lora the whole base is frozen"),
            (not (self.lora_rank and self.optimizer == "adafactor"),
             "--optimizer adafactor: not modelled with --lora"),
            (all(c in FREEZABLE for c in self.freeze),
             f"--freeze: expected parts among {', '.join(FREEZABLE)}"),
            (not self.quant or self.quant in FORMATS,
             f"--quant: expected one of {', '.join(FORMATS)}"),
            (self.double_quant or self.quant in _BNB_4BIT,
             "--no-double-quant: applies to a bitsandbytes 4-bit base (--quant bnb-nf4 or "
             "bnb-fp4, --qlora)"),
            (not self.bnb_legacy or (self.quant in _BNB_4BIT and self.lora_rank),
             "--bnb-legacy: applies to LoRA over a bitsandbytes 4-bit base (--qlora, or "
             "--lora with --quant bnb-nf4 / bnb-fp4)"),
            (not self.quant or self.inference or self.lora_rank,
             "--quant: a quantised base trains only adapters; add --lora RANK (QLoRA: "
             "--lora RANK --quant bnb-nf4)"),
            (self.offload in OFFLOADS, f"--offload: expected one of {', '.join(OFFLOADS)}"),
            (self.offload == "none" or self.zero >= (3 if self.offload == "all" else 1),
             "--offload: optimizer needs --zero 1 or more (ZeRO-Offload), all needs --zero 3 "
             "(ZeRO-Infinity)"),
            (self.tp_plan in ("", "layers", "vocab"), "--tp-plan: expected layers or vocab"),
            (self.activations in ("hf", "megatron"),
             "--activations: expected hf or megatron"),
            (not (self.activations == "megatron" and self.lora_rank),
             "--activations megatron: not with --lora (Megatron trains full models)"),
            (self.kv_block >= 0, "--kv-block: expected an integer >= 0"),
            (0 < self.gpu_util <= 1, "--gpu-util: expected a fraction in (0, 1]"),
            (self.prefill_chunk >= 1, "--prefill-chunk: expected an integer >= 1"),
            (not (self.quant and self.inference and self.dtype in QUANT_BITS),
             "--quant and --dtype int8/int4: pick one weight format"),
            (len(set(self.freeze)) < len(FREEZABLE) or not self.freeze,
             "--freeze: something must train; use --inference for a model that does not"),
        ]
        for ok, message in checks:
            if not ok:
                raise TcalcError(message)

    @property
    def cache_in_training(self) -> bool:
        """Whether the training forward builds transformers' DynamicCache: the config's
        use_cache (True), which gradient checkpointing turns off (modeling_utils warns
        "use_cache=True is incompatible with gradient checkpointing")."""
        return self.recompute != "full" if self.use_cache is None else self.use_cache

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def act_bytes(self) -> int:
        return 4 if self.precision == "fp32" else 2

    @property
    def adapter_bytes(self) -> int:
        """Bytes per LoRA adapter parameter: fp32 (PEFT's upcast) unless a 16-bit dtype is
        named."""
        return 4 if self.adapter_dtype in ("", "fp32") else 2

    @property
    def upcast_in_loss(self) -> bool:
        """Whether the fp32 copy of the logits is made inside the loss (transformers' loss
        function; each chunk in torchtune's chunked loss, whose model returns 16-bit
        chunks), where a compiled loss can fuse it away."""
        return self.logits_fp32 == "loss" or (self.logits_fp32 == "model"
                                              and self.loss_chunks > 1)


def state_bytes_per_param(s: Settings) -> list[tuple[str, float, str]]:
    """(component, bytes per parameter, why) for training. Adafactor is shape-dependent and
    reported separately."""
    return list(_states(s.mixed, s.precision, s.optimizer)[0])


@functools.cache
def _states(mixed: bool, precision: str, optimizer: str
            ) -> tuple[tuple[tuple[str, float, str], ...], tuple[tuple[str, float, str], ...]]:
    """state_bytes_per_param's rows, and the same as (name, bytes, formula); a handful of
    distinct answers, so built once each (memory_report runs in sweeps)."""
    half = 2
    rows: list[tuple[str, float, str]] = []
    if mixed:
        # HF performance docs: "mixed precision training: 6 bytes per parameter" (an fp32
        # copy and a 16-bit copy); gradients stay fp32 (4 bytes).
        rows.append(("weights", half, f"{precision} copy used in forward/backward"))
        rows.append(("master_weights", 4, "fp32 master weights the optimizer updates"))
        rows.append(("gradients", 4, "fp32 (HF performance docs)"))
    else:
        w = 4 if precision == "fp32" else half
        rows.append(("weights", w, f"{precision} weights"))
        rows.append(("gradients", w, f"{precision}, like the weights"))
    if optimizer != "adafactor":
        per = OPTIMIZER_BYTES[optimizer]
        if not mixed and precision != "fp32" and optimizer in ("adamw", "adam", "lion",
                                                                "sgd-momentum"):
            per = per // 2  # pure 16-bit training: torch keeps the moments in the param dtype
            why = f"{OPTIMIZER_SOURCE[optimizer]}, kept in {precision} (pure 16-bit)"
        else:
            why = OPTIMIZER_SOURCE[optimizer]
        rows.append(("optimizer_states", per, why))
    return tuple(rows), tuple((name, per, f"params · {per:g} bytes ({why})")
                              for name, per, why in rows)



# cuBLAS and cuBLASLt workspaces, which torch allocates through the caching allocator: 32 MiB
# each, cuBLAS's recommendation for Hopper (cublasSetWorkspace). Measured on an H100: 65.2 MiB
# allocated besides weights and optimizer states between steps (docs/peak_cuda_h100.md).
# Pre-Hopper GPUs use less (4 MiB each): an over-estimate of at most 56 MiB there.
CUBLAS_WORKSPACE = 64 << 20
# The CUDA caching allocator rounds every allocation up to a multiple of 512 bytes.
BLOCK = 512


class Phase(NamedTuple):
    """What is live at the high point of one phase of a training step, per GPU."""

    name: str  # forward | backward | optimizer
    when: str  # the moment the peak falls on
    items: Breakdown


# What no count of tensors sees, shown apart from the peak: the caching
# allocator's cache, measured as max_memory_reserved − max_memory_allocated over the 20
# training runs on an H100 (tests/data/peak_cuda_h100.json, peak_lora_cuda_h100.json): 2.0 %
# to 12.1 % of the peak (torch AMP with SDPA the most: autocast's short-lived casts fragment
# it). The CUDA context lives outside the allocator and was not measured: not included.
ALLOCATOR_CACHE = (0.020, 0.121)

# The reserve model behind --metric reserved: max_memory_reserved over max_memory_allocated
# in the 42 single-process training runs on an H100 (tests/data/peak_cuda_h100.json,
# peak_lora_cuda_h100.json, peak_qlora_cuda_h100.json, peak_lora_opt_cuda_h100.json,
# peak_no_cache_cuda_h100.json; torch 2.11): the median 4.73 % above the peak (2.0 % to
# 13.8 %), and the caching allocator reserves whole 2 MiB segments at least
# (c10/cuda/CUDACachingAllocator.cpp, kMinLargeAlloc / kRoundLarge).
RESERVE_MEDIAN = 0.0473
RESERVE_RANGE = (0.020, 0.138)
SEGMENT = 2 << 20
# The CUDA context beside the allocator, what nvidia-smi adds per process: measured on an
# H100 (torch 2.11, CUDA 13.0: nvidia-smi's process memory minus memory_reserved, after a
# cuBLAS matmul and an SDPA kernel; tests/data/loss_context_cuda_h100.json,
# tools/measure_loss_context_cuda.py). Other GPU families were not measured: the H100's
# value stands for them, said in the output.
CUDA_CONTEXT = {"H100": 692 << 20}


class Change(NamedTuple):
    """A change of settings and what it would use: the command-line flags that say it, the
    peak (serving: what the budget holds), and whether that fits."""

    flags: str
    used: int
    fits: bool


@dataclass(frozen=True)
class Fit:
    gpu: str
    capacity: int
    fits: bool
    headroom: int  # budget - what is used (negative: does not fit)
    max_batch_size: int  # 0 when even batch 1 does not fit
    max_seq_len: int = 0  # the longest sequence (context) that fits at this batch; 0: none
    budget: int = 0  # what may be used: the capacity, or for serving its runtime share
    prefill: int = 0  # serving: one prefill chunk's activations, set aside
    seq_ceiling: int = 0  # the model's own limit, where the length search stops
    # training: the allocator's cache beside the peak (ALLOCATOR_CACHE), low and high
    reserve: tuple[int, int] = (0, 0)
    # when it does not fit: what a change of settings would use, the fitting ones first
    changes: tuple[Change, ...] = ()



@dataclass(frozen=True, init=False)
class MemoryReport:
    model: str
    settings: Settings
    seq_len: int
    params: int
    components: Breakdown  # weights, master_weights, gradients, optimizer_states, activations
    per_gpu: Breakdown  # the same per GPU after sharding
    activations: Breakdown  # one item per saved tensor (per layer), one micro-batch
    bytes_per_param: tuple[tuple[str, float, str], ...]
    korthikanti_per_layer: int
    fit: Fit | None
    notes: tuple[str, ...]
    trainable_params: int  # what gets gradients: params, the adapters, or the unfrozen part
    host: Breakdown  # per GPU, in CPU memory: what --offload moves there (DeepSpeed)

    def __init__(self, model: str, settings: Settings, seq_len: int, params: int,
                 components: Breakdown, per_gpu: Breakdown, activations: Breakdown,
                 bytes_per_param: tuple[tuple[str, float, str], ...],
                 korthikanti_per_layer: int, fit: Fit | None, notes: tuple[str, ...],
                 phases: Callable[[], tuple[Phase, ...]] = tuple,
                 trainable_params: int | None = None,
                 timeline: Callable[[], Timeline | None] = lambda: None) -> None:
        # Frozen; set once through __dict__, 3x faster than the generated per-field
        # object.__setattr__ (memory_report runs in sweeps and in the batch search: make bench)
        self.__dict__.update(model=model, settings=settings, seq_len=seq_len, params=params,
                             components=components, per_gpu=per_gpu, activations=activations,
                             bytes_per_param=bytes_per_param,
                             korthikanti_per_layer=korthikanti_per_layer, fit=fit, notes=notes,
                             _phases=phases, _timeline=timeline, trainable_params=params
                             if trainable_params is None else trainable_params)

    @property
    def timeline(self) -> Timeline | None:
        """Training: the step op group by op group (costs/timeline.py); None in inference.
        Built when first read: a sweep that reads only totals does not pay for it (make
        bench)."""
        timeline = self.__dict__["_timeline"]
        if callable(timeline):
            timeline = self.__dict__["_timeline"] = timeline()
        return timeline

    @property
    def phases(self) -> tuple[Phase, ...]:
        """Training: forward, backward, optimizer step, the timeline's maxima; () in
        inference. Built when first read, from a walk in as few points as keep the maxima."""
        phases = self.__dict__["_phases"]
        if callable(phases):
            phases = self.__dict__["_phases"] = phases()
        return phases

    @property
    def peak_phase(self) -> Phase | None:
        return max(self.phases, key=lambda p: p.items.total) if self.phases else None

    @property
    def peak(self) -> int:
        """Per GPU: the highest phase of a training step; in inference, the total."""
        p = self.peak_phase
        return p.items.total if p else self.per_gpu.total

    @property
    def peaks(self) -> dict[str, int]:
        """The peak in each metric (METRICS), per GPU: allocated (the tensors, as
        torch.cuda.max_memory_allocated counts them), reserved (the caching allocator's
        segments: RESERVE_MEDIAN above, in whole 2 MiB segments), nvidia-smi (reserved and the
        CUDA context). Paged optimizer states (unified memory, which the driver moves between
        host and GPU as it is touched) are in none of them: reported apart."""
        allocated = self.peak
        reserved = math.ceil(allocated * (1 + RESERVE_MEDIAN) / SEGMENT) * SEGMENT
        return {"allocated": allocated, "reserved": reserved,
                "nvidia-smi": reserved + self.cuda_context[1]}

    @property
    def cuda_context(self) -> tuple[str, int]:
        """(the GPU family whose measurement stands for this GPU, the context's bytes)."""
        gpu = (self.fit.gpu if self.fit is not None else "").upper()
        family = next((f for f in CUDA_CONTEXT if f in gpu), "H100")
        return family, CUDA_CONTEXT[family]


def _require_flash_path(spec: ModelSpec) -> None:
    """--attention flash is transformers' flash_attention_2: a class without that path raises
    when it is asked for (hf_defaults.NO_FLASH, each class's _supports_flash_attn), so there
    is no such run to estimate."""
    from transformer_calc.hf_defaults import FLASH_KERNELS, NO_FLASH, NO_SDPA

    if spec.model_type in NO_FLASH:
        raise TcalcError(f"--attention flash: transformers 5.23 has no flash_attention_2 path "
                         f"for model type {spec.model_type} ({spec.name}); use --attention "
                         "sdpa or eager")
    if spec.model_type == "falcon" and spec.position == "alibi":
        raise TcalcError(f"--attention flash: transformers 5.23's FalconFlashAttention2 raises "
                         f"for ALiBi ({spec.name}: 'alibi is not supported when use_flash_attn "
                         "is True'); use --attention sdpa or eager")
    if spec.model_type in FLASH_KERNELS:
        # from_pretrained swaps flash_attention_2 for the class's own kernel (attention
        # sinks, which flash-attn 2 lacks), whose saved set tcalc does not transcribe
        use = "eager" if spec.model_type in NO_SDPA else "sdpa or eager"
        raise TcalcError(f"--attention flash: transformers 5.23 runs model type "
                         f"{spec.model_type}'s flash attention as "
                         f"{FLASH_KERNELS[spec.model_type]}, a kernel tcalc does not model; "
                         f"use --attention {use}")
    if not spec.model_type and spec.arch == "encoder-decoder":
        from transformer_calc.graph.evaluate import family_of
        from transformer_calc.graph.families.paper import Paper

        try:
            paper = isinstance(family_of(spec), Paper)
        except TcalcError:
            paper = False
        if paper:
            raise TcalcError(f"--attention flash: {spec.name} is torch.nn.Transformer, whose "
                             "nn.MultiheadAttention has no flash_attention_2 option (SDPA "
                             "picks torch's flash kernel itself); use --attention sdpa")


def memory_report(spec: ModelSpec, s: Settings, gpu: str | None = None,
                  pattern=None, params: Breakdown | None = None  # type: ignore[no-untyped-def]
                  ) -> MemoryReport:
    """``params``: count_params(spec), when the caller has it already."""
    spec.require_runnable()
    if not s.inference:
        spec.require_training_memory()
    untie = s.untied_head and spec.tie_embeddings and spec.lm_head and not s.inference
    if untie:  # the head a copy of the embedding: V·d_model more (frozen, under LoRA) weights
        spec, params = spec.replace(tie_embeddings=False, expected_params=None,
                                    expected_params_source=""), None
    if s.attention == "auto":  # what transformers runs for the class
        import dataclasses

        s = dataclasses.replace(s, attention="sdpa" if spec.sdpa_path else "eager")
    if s.attention == "flash" and not s.inference:
        _require_flash_path(spec)
    p = params or count_params(spec)
    N = p.total
    adapters: Breakdown | None = None
    T = s.seq_len or spec.default_seq_len
    spec.check_context(T)
    _check_parallel(spec, s)
    notes: tuple[str, ...] = ()
    comps: list[tuple] = []  # type: ignore[type-arg]  # rows, as in Breakdown
    rows: tuple[tuple[str, float, str], ...] = ()
    trainable = 0
    if s.inference:
        if s.quant:
            stored = weight_format_bytes(spec, p, s.quant, s.group_size, s.double_quant)
            comps.append(Item("weights", stored.total, f"{s.quant} as stored: " + " + ".join(
                i.name for i in stored.items), " + ".join(f"{i.total:,}" for i in stored.items)))
        else:
            w = weight_bytes(N, s.dtype, s.group_size)
            comps.append(Item("weights", w, f"params · {s.dtype}", f"{N:,} · {s.dtype}"))
        kv_dtype = s.kv_dtype or ("bf16" if s.dtype in QUANT_BITS or s.dtype == "fp8" or s.quant
                                  else s.dtype)
        from transformer_calc.hardware import DTYPE_BYTES

        if kv_dtype not in DTYPE_BYTES:
            raise TcalcError(f"--kv-dtype: unknown dtype '{kv_dtype}'")
        per_seq = kv_cache_elements(spec, T, s.kv_block)
        kv = math.ceil(s.batch_size * per_seq * DTYPE_BYTES[kv_dtype])
        if s.kv_block > 1:
            comps.append(Item("kv_cache", kv, "batch · Σ layers · cached tokens in whole "
                              f"blocks of {s.kv_block} · cached values per token · bytes",
                              f"{s.batch_size} · {per_seq:,} · {kv_dtype}",
                              note=f"paged: {s.kv_block}-token blocks (vLLM's block_size)"))
        elif per_seq == T * kv_elements_per_token(spec):
            comps.append(Item("kv_cache", kv,
                              "batch · context · 2 · layers · n_kv_heads · d_head · bytes",
                              f"{s.batch_size} · {T} · {per_seq // T:,} · {kv_dtype}"))
        else:
            comps.append(Item("kv_cache", kv, "batch · Σ layers · min(context, window) · "
                              "cached values per token · bytes",
                              f"{s.batch_size} · {per_seq:,} · {kv_dtype}",
                              note="sliding-window and chunked layers keep only their window"))
        conv, ssm = recurrent_state_elements(spec)
        if conv or ssm:
            # measured: transformers 5.23 keeps the convolution state in the model's dtype and
            # the recurrent state in fp32 (tools/reference_kv_cache.py --split)
            sd = {"fp32": 4, "bf16": 2, "fp16": 2}.get(spec.ssm_state_dtype) \
                or DTYPE_BYTES[kv_dtype]  # "cache": the KV cache's dtype (MiniMax)
            state = s.batch_size * math.ceil(conv * DTYPE_BYTES[kv_dtype] + ssm * sd)
            comps.append(Item(
                "recurrent_state", state,
                "batch · (conv state · bytes + recurrent state · state bytes)",
                f"{s.batch_size} · ({conv:,} · {kv_dtype} + {ssm:,} · "
                f"{kv_dtype if spec.ssm_state_dtype == 'cache' else spec.ssm_state_dtype})",
                note="constant in the context: the last ssm_conv inputs of each convolution "
                     "channel and the state of every recurrent layer"))
        # a quantization_config whose method tcalc does not model (the note's last part),
        # said where it serves
        at = spec.note.find("quantization_config:")
        inference_notes = [spec.note[at:]] if at >= 0 else []
        if s.quant:
            inference_notes.append(_QUANT_NOTE)
        elif s.dtype in QUANT_BITS:
            inference_notes.append(f"{s.dtype}: {QUANT_BITS[s.dtype]} bits per weight + one fp16 "
                                   f"scale per {s.group_size} weights (group quantisation)")
        inference_notes.append("inference: weights and KV cache" + (
            " and recurrent state" if conv or ssm else "") + "; transient activations are left "
                               "out")
        notes = tuple(inference_notes)
        acts = Breakdown(spec.name, "bytes", ())
        korth = 0
    else:
        rows, formulas = _states(s.mixed, s.precision, s.optimizer)
        if s.lora_rank and spec.o_groups:
            # peft 0.21 wraps DeepseekV4GroupedLinear (an nn.Linear whose forward is a
            # grouped bmm) as a plain linear layer: with all-linear the forward fails (a shape
            # mismatch, measured); and peft matches kv_proj and gate_proj in the compressors
            # and the indexer too, which tcalc's roles do not follow
            raise TcalcError(f"--lora: LoRA fine-tuning of {spec.name} (DeepSeek-V4) is not "
                             "modelled: peft 0.21's all-linear fails in its grouped output "
                             "projection, and named targets match its compressors' layers too")
        adapters = lora_params(spec, p, s.lora_rank, s.lora_targets) if s.lora_rank else None
        if adapters is not None and (spec.router_topk == "sparsemixer"
                                     or spec.model_type == "llama4_text") and any(
                a.role == "router" for a in adapted_layers(spec, p, s.lora_targets)):
            # PhimoeTopKRouter and Llama4Router are nn.Linear whose forward returns a tuple:
            # peft 0.21's lora.Linear fails on it (measured: tools/measure_activations_hf.py
            # --lora 8 on phimoe-top1.json; peft.get_peft_model over llama4_text-chunked.json
            # with all-linear or router, AttributeError in peft/tuners/lora/layer.py)
            which = "PhiMoE's" if spec.router_topk == "sparsemixer" else "Llama 4's"
            raise TcalcError(f"--lora-targets: peft 0.21 cannot adapt {spec.name}'s router "
                             f"({which} router returns a tuple, which peft's LoRA layer "
                             "fails on); name targets without it, e.g. "
                             "q_proj,k_proj,v_proj,o_proj")
        trainable = (adapters.total if adapters is not None else
                     N - sum([n for c, n in by_category(p).items() if c in s.freeze])
                     if s.freeze else N)
        if adapters is None and (spec.index_heads or spec.csa_index_heads):
            # DSA's indexer runs under torch.no_grad (transformers 5.23), DeepSeek-V4's feeds
            # only top-k indices: their parameters get no gradient, so neither a gradient nor
            # optimizer states are ever made for them (DeepSeek-V4: measured, .grad None)
            trainable -= sum([r[1] * r[4] for r in p.rows if (".attn.index_" in r[0]
                                                             or ".attn.indexer." in r[0])
                              and category(r[0]) not in s.freeze])
        if adapters is not None:
            comps.extend(_lora_states(spec, s, p, adapters.total))
        else:
            for name, per, formula in formulas:
                if trainable != N and name in ("gradients", "optimizer_states"):
                    comps.append((name, math.ceil(trainable * per), formula.replace(
                        "params", "trainable params", 1), "", 1, "", "", None, ()))
                else:
                    comps.append((name, math.ceil(N * per), formula, "", 1, "", "", None, ()))
        if s.optimizer == "adafactor":
            # one fused QKV matrix per attention sublayer (self, and cross in nn.Transformer)
            blocks = sum(g.count * (1 + (g.block.cross is not None))
                         for g in plan_of(spec).groups)
            elems = adafactor_state_elements(p) + fused_qkv_correction(spec) * blocks
            if trainable != N:
                raise TcalcError("--optimizer adafactor: not modelled with --freeze")
            comps.append(Item("optimizer_states", 4 * elems,
                              "4 · Σ (rows + columns) over matrices + Σ vector sizes",
                              f"4 · {elems:,}", note=OPTIMIZER_SOURCE["adafactor"]))
        # autocast runs over fp32 weights; LoRA keeps a 16-bit base (autocast on the adapters)
        # and the megatron recipe a 16-bit model (under ZeRO-3 / offload the activations are
        # still autocast's: the Trainer's accelerate enables it beside FSDP; not measured)
        # (FSDP2 under --mixed gathers bf16 parameters, MixedPrecisionPolicy casting the
        # inputs too: autocast then runs over a 16-bit model, as it does over LoRA's base)
        fsdp2_mixed = s.fsdp2_mixed
        amp = s.mixed and adapters is None and s.recipe not in SIXTEEN_BIT_RECIPES \
            and not fsdp2_mixed
        if s.activations == "megatron":  # Megatron-LM's formula, not what autograd keeps
            spec.require_training_memory()
            acts = megatron_activations(spec, s, T)
        else:
            acts = _saved_activations(spec, s, T, p, adapters is not None, amp, pattern,
                                      amp16=s.mixed and (adapters is not None or fsdp2_mixed)
                                      and s.precision != "fp32")
        acts = _loss_saved(spec, s, acts, T)
        notes = acts.notes
        if spec.index_heads and adapters is None:
            index = sum([r[1] * r[4] for r in p.rows if ".attn.index_" in r[0]])
            notes += (f"DSA's indexer ({index:,} parameters) runs under torch.no_grad in "
                      "transformers 5.23: no gradients or optimizer states are made for it",)
        if spec.csa_index_heads and adapters is None:
            index = sum([r[1] * r[4] for r in p.rows if ".attn.indexer." in r[0]])
            notes += (f"the Q layers' indexer ({index:,} parameters) only picks indices: it "
                      "gets no gradient, so no gradients or optimizer states are made for it",)
        comps.append(("activations", acts.total, "Σ saved tensors (below)",
                      f"batch {s.batch_size} · seq {T}", 1, "", "", None, ()))
        korth = korthikanti_per_layer(spec, s.batch_size, T)
    if s.paged_optimizer and not s.inference:
        comps = [_paged_states(s, r, trainable) if r[0] == "optimizer_states" else r
                 for r in comps]
    components = Breakdown(spec.name, "bytes", tuple(comps), notes, {},
                           functools.partial(dict, params=N))
    per_gpu, host, parallel_notes = _per_gpu(spec, s, components, acts, p, adapters)
    notes += parallel_notes
    if s.offload_activations:
        host = Breakdown(host.model, "bytes", host.items + (Item(
            "activations", _offloaded(acts, s)[1], "what the model saves for backward, "
            "offloaded (the loss's and the rebuilt layer's stay)"),))
    notes += _recipe_notes(s)
    if untie:
        notes += (f"the LM head its own {spec.vocab_size:,} × {spec.embed_dim:,} matrix, a copy "
                  "of the tied token embedding, as LitGPT's converted checkpoint holds it "
                  "(--tie-embeddings: tied)",)
    timeline: Callable[[], Timeline | None] = (lambda: None) if s.inference else \
        functools.partial(training_timeline, spec, s, T, per_gpu, acts, p)
    phases: Callable[[], tuple[Phase, ...]] = tuple if s.inference else functools.partial(
        training_phases, spec, s, T, per_gpu, acts, p)
    report = MemoryReport(spec.name, s, T, N, components, per_gpu, acts, rows, korth, None,
                          notes, phases, trainable, timeline)
    report.__dict__["host"] = host
    if s.paged_optimizer and not s.inference:
        report.__dict__["unified"] = per_gpu.get("optimizer_states").total
    if gpu:
        report.__dict__["fit"] = _fit(spec, s, report, gpu, pattern)
    return report


def _paged_states(s: Settings, row: tuple, trainable: int) -> tuple:  # type: ignore[type-arg]
    """bitsandbytes' paged states: its 32-bit optimizers keep fp32 states whatever the
    parameters' dtype (Optimizer2State.init_state: dtype=torch.float32), its 8-bit ones one
    byte per moment (and fp32 block scales, not counted); both in unified memory."""
    per = OPTIMIZER_BYTES[s.optimizer]
    return ("optimizer_states", trainable * per, f"params · {per} (bitsandbytes' paged states, "
            "in CUDA unified memory: outside the allocator's counters)", "", 1, "", "", None,
            ())


def _recipe_notes(s: Settings) -> tuple[str, ...]:
    """What the recipe and the settings it fixes assume, said in the output."""
    if s.inference:
        return ()
    from transformer_calc.recipes import RECIPE_NOTES

    out = [f"recipe {s.recipe}: {RECIPE_NOTES[s.recipe]}"] if s.recipe not in ("hf", "amp") \
        else []
    if s.lora_rank and s.adapter_bytes != ADAPTER_BYTES:
        out.append(f"LoRA adapters in {s.adapter_dtype}: their gradients and moments too, "
                   "and no fp32 copy of their inputs")
    if s.loss_chunks > 1:
        out.append(f"the head and the loss in {s.loss_chunks} chunks (torchtune's "
                   "CEWithChunkedOutputLoss): one chunk's fp32 upcast at a time")
    if s.compile_loss:
        out.append("torch.compile of the cross-entropy: it keeps the 16-bit logits and "
                   "recomputes the softmax (measured on an H100); the layers are counted "
                   "uncompiled")
    if s.logits_fp32 == "model" and s.loss_chunks == 1:
        out.append("the logits upcast to fp32 inside the model (output(h).float())")
    if s.logits_fp32 == "never":
        out.append("the loss on the 16-bit logits, never upcast")
    if s.lightning_bnb and s.quant in _BNB_4BIT:
        out.append("Lightning's bitsandbytes layers: the LM head quantised too; each matrix "
                   "dequantised to fp16 and cast for its matmul (two copies for a moment)")
    if s.keeps_previous_graph and s.bnb_legacy and s.quant in _BNB_4BIT:
        out.append("the previous micro-batch's 4-bit matmul inputs (held on ctx by "
                   "bitsandbytes < 0.44) live through the next forward: the loop keeps its "
                   "logits named until the forward returns")
    if s.optimizer_in_backward:
        out.append("optimizer in backward: each gradient stepped and freed as it is made")
    if s.paged_optimizer:
        out.append("paged optimizer states (bitsandbytes): in CUDA unified memory, which the "
                   "driver pages between host and GPU; outside every peak shown "
                   "(JSON unified_memory_bytes)")
    if s.offload_activations:
        out.append("activation offloading: the model's saved tensors in CPU memory")
    return tuple(out)


def _loss_saved(spec: ModelSpec, s: Settings, acts: Breakdown, T: int) -> Breakdown:
    """What the loss keeps for backward as the recipe runs it (the log-softmax row of the
    activations, rewritten). Measured on an H100 (tests/data/loss_context_cuda_h100.json,
    tools/measure_loss_context_cuda.py), per B·T·vocab_size element: 4 bytes (the fp32
    log-softmax) wherever the logits are upcast, whole or in chunks; 2 (the 16-bit logits
    themselves, 16 bytes per row beside) when torch.compile fuses the upcast into the
    cross-entropy; the activation dtype's bytes when the loss runs on 16-bit logits (LitGPT's
    cross-entropy)."""
    row = next((r for r in acts.rows if r[0] == "loss.log_softmax"), None)
    if row is None or s.activations != "hf" or s.act_bytes == 4:
        return acts
    a = s.act_bytes
    btv = s.batch_size * T * spec.vocab_size
    bt = s.batch_size * T
    if s.compile_loss and s.upcast_in_loss:
        new: tuple[Any, ...] = (
            ("loss.logits", btv * a, "B·T·vocab_size · act (the 16-bit logits the compiled "
             "cross-entropy keeps; it recomputes the softmax)", "", 1, "", "", None, ()),
            ("loss.row_stats", bt * 16, "B·T · 16 (per row: the compiled loss's fp32 "
             "statistics and int64 labels, measured)", "", 1, "", "", None, ()))
    elif s.logits_fp32 == "never" and not s.mixed:
        new = (("loss.log_softmax", btv * a, "B·T·vocab_size · act (log-softmax of the "
                "16-bit logits, never upcast)", "", 1, "", "", None, ()),)
    else:
        return acts
    rows: list[Any] = []
    for r in acts.rows:
        rows.extend(new if r is row else (r,))
    return Breakdown(acts.model, "bytes", tuple(rows), acts.notes, {}, acts.symbols)


def _saved_activations(spec: ModelSpec, s: Settings, T: int, p: Breakdown, lora: bool,
                       amp: bool, pattern, *, amp16: bool  # type: ignore[no-untyped-def]
                       ) -> Breakdown:
    """What autograd keeps for backward: from the op graph where it expresses the run
    (costs/activations.py), else from activation_breakdown's rules (with lora_activations'
    under LoRA, recomputation applied after the adapters' rows so the two compose)."""
    from transformer_calc.costs.activations import graph_activations

    spec.require_training_memory()
    adapted = adapted_layers(spec, p, s.lora_targets) if lora else None
    acts = graph_activations(spec, s, T, amp=amp, amp16=amp16, pattern=pattern,
                             adapted_roles=None if adapted is None
                             # (a MoE's experts by their weight: experts.gate_up, .out)
                             else frozenset(a.role if a.role != "experts" else
                                            "experts." + a.name.rsplit(".", 1)[1]
                                            for a in adapted))
    if acts is not None:
        return acts
    acts = activation_breakdown(
        spec, s.batch_size, T, act_bytes=s.act_bytes, device=s.device,
        attention=s.attention, amp=amp, sdpa_kernel=s.sdpa_kernel, experts=s.experts,
        dropout=s.dropout if s.dropout is not None else spec.trains_with_dropout,
        recompute="none" if lora else s.recompute, pattern=pattern,
        use_cache=s.cache_in_training, amp16=amp16)
    if adapted is not None:
        acts = lora_activations(spec, acts, adapted, s, T)
        if s.recompute != "none":
            acts = apply_recompute(spec, acts, s.recompute,
                                   s.batch_size * T * spec.d_model * s.act_bytes)
    return acts


def _per_gpu(spec: ModelSpec, s: Settings, components: Breakdown, acts: Breakdown,
             p: Breakdown, adapters: Breakdown | None
             ) -> tuple[Breakdown, Breakdown, tuple[str, ...]]:
    """What one GPU holds (and, offloaded, its host), as the recipe's framework shards it,
    and the notes that say which framework that is."""
    trainable_tensors = None
    if not s.inference and s.zero == 1 and s.torch_parallel and s.dp * s.cp > 1:
        trainable_tensors = _trainable_tensors(s, p, adapters)
    per_gpu = _shard(spec, s, components, acts, p, trainable_tensors)
    notes: tuple[str, ...] = ()
    if not s.inference and zero_note(s):
        notes += (zero_note(s),)
    if s.tp > 1 and not s.inference:
        notes += ("tensor parallel over {}: {}".format(s.tp, "Megatron-LM's plan, the "
                  "embeddings, head and cross-entropy sharded over the vocabulary too"
                  if s.vocab_parallel else "the attention and MLP sharded, embeddings, head "
                  "and loss whole on every rank (transformers' tp_plan, torchtitan's layer "
                  "plan; --tp-plan vocab for Megatron-LM's)"),)
    host = Breakdown(spec.name, "bytes", ())
    if not s.inference and s.zero >= 2 and s.torch_parallel and s.dp * s.cp > 1:
        per_gpu = _fsdp2_gathered(spec, s, per_gpu, p)
    elif not s.inference and (s.zero == 3 or s.offload != "none"):
        per_gpu, host = _deepspeed(spec, s, per_gpu, p)
    return per_gpu, host, notes


# LoRA over a frozen base. PEFT keeps the adapters in fp32 over a 16-bit base
# (get_peft_model(..., autocast_adapter_dtype=True), its default), so their gradients and
# optimizer states are fp32 too; the base has no gradients and no states.
ADAPTER_BYTES = 4


_QUANT_NOTE = ("quantised weights as the format stores them (quant.py); embeddings, the LM "
               "head, norms, biases and routers stay 16-bit")


def _lora_states(spec: ModelSpec, s: Settings, params: Breakdown,
                 adapters: int) -> list[tuple]:  # type: ignore[type-arg]
    N = params.total
    base = 4 if s.precision == "fp32" else 2
    per = OPTIMIZER_BYTES[s.optimizer]
    ab = s.adapter_bytes
    if ab != ADAPTER_BYTES and s.optimizer in ("adamw", "adam", "lion", "sgd-momentum"):
        per = per * ab // ADAPTER_BYTES  # torch keeps the moments in the parameters' dtype
    dtype = "fp32: PEFT's autocast_adapter_dtype" if ab == ADAPTER_BYTES else \
        f"{s.adapter_dtype}, as the framework makes them"
    if s.quant:
        stored = weight_format_bytes(spec, params, s.quant, s.group_size, s.double_quant,
                                     head=s.lightning_bnb and s.quant in _BNB_4BIT)
        weights = ("weights", stored.total, f"frozen base in {s.quant} as stored (computed in "
                   f"{s.precision})", " + ".join(f"{i.total:,}" for i in stored.items), 1, "",
                   "", None, ())
    else:
        weights = ("weights", N * base, f"frozen base: params · {base} ({s.precision})", "",
                   1, "", "", None, ())
    return [
        weights,
        ("lora_weights", adapters * ab, f"adapter params · {ab} ({dtype})", "", 1, "", "",
         None, ()),
        ("gradients", adapters * ab, f"adapter params · {ab} (like the adapters)",
         "", 1, "", "", None, ()),
        ("optimizer_states", adapters * per, f"adapter params · {per} "
         f"({OPTIMIZER_SOURCE[s.optimizer]})", "", 1, "", "", None, ()),
    ]


# What a frozen base no longer saves (measured with saved_tensors_hooks, transformers 5.23 +
# peft 0.21.2: tools/measure_activations_hf.py --lora): tensors kept only for a weight's
# gradient. The normalised tensor of a norm (its weight's mul), the token and position ids
# (the embedding's), the LM head's input, and each projection's input unless an adapter
# reads that very tensor; and nothing below the first adapter needs a gradient, so the
# embeddings and the first layer's input norm keep nothing.
# rows kept only for a weight's gradient (a norm's weight, Gemma 3n's AltUp output scale):
# a frozen base keeps none
# (DiffLlama's concatenated maps are kept by λ's multiply, for λ's gradient)
_WEIGHT_GRAD_ONLY = (".normalized", ".scaled_output", ".correct_coef_input", ".alpha_input",
                     ".maps_concat")
_IDS = ("embed.token_ids", "embed.position_ids", "head.input", "head.mlm.decoder_input",
        "embed.side_ids")
# a projection's input row -> the roles of the adapted layers that read it
_PROJECTION_INPUTS = {
    "attn.input": ("q", "k", "v", "qkv", "q_a", "kv_a", "attn_gate", "laurel"),
    "attn.o_input": ("o",), "cross.input": ("q",), "cross.o_input": ("o",),
    "attn.kv_b_input": ("kv_b",), "attn.q_b_input": ("q_b",),
    "ffn.input": ("gate", "up", "gate_up", "shared", "router", "shared_gate"),
    "ffn.router_fp32_input": ("router",),
    "ffn.out_input": ("down",), "ffn.shared.out_input": ("shared",),
    # each expert's copy of its tokens, the first expert matmul's input (measured:
    # jamba-tiny.json with q_proj,v_proj adapted keeps none)
    "ffn.routed_input": ("experts",),
    # Gemma 4's per-layer input; Gemma 3n's AltUp router and coefficients, LAuReL's right
    "ple.gate_input": ("ple",), "ple.project_input": ("ple",),
    "altup.predict_router_input": ("altup",), "altup.correct_router_input": ("altup",),
    "altup.predict_modality_cast": ("altup",),
    "laurel.right_input": ("laurel",)}


# the projection inputs a quantised base's own linear layers read (bitsandbytes quantises
# nn.Linear; experts' 3-D weights and routers kept in 16-bit read the rest)
_QUANTISED_INPUTS = frozenset(("attn.input", "attn.o_input", "cross.input", "cross.o_input",
                               "attn.kv_b_input", "attn.q_b_input", "ffn.input",
                               "ffn.out_input", "ffn.shared.out_input"))


# Mamba's and Mamba-2's in_proj and out_proj inputs (and Mamba's x_proj's, a copy of its
# own), kept by nothing else (measured: jamba-tiny.json, falcon_h1-tiny.json; not so LFM2's
# short convolution or MiniMax's lightning mixer, whose rows these are not)
_MIXER_PROJECTION_INPUTS = {"mamba": frozenset(("mixer.input", "mixer.x",
                                                "mixer.out_proj_input")),
                            "mamba2": frozenset(("mixer.input", "mixer.out_proj_input")),
                            "short_conv": frozenset(("mixer.input", "mixer.out_proj_input")),
                            "lightning": frozenset(("mixer.input", "mixer.out_proj_input"))}


# the adapted layers that make a layer's attention core need a gradient (its Q, K, V, their
# latents, gates and indexers; DeBERTa's position projections)
_ATTN_CORE_ROLES = frozenset(("q", "k", "v", "qkv", "q_a", "q_b", "kv_a", "kv_b", "kv",
                              "attn_gate", "pos_key", "pos_query", "index_q", "index_k",
                              "index_weights", "compressor", "indexer"))
# what a router keeps (its probabilities, the routing weights' products), for its gradient
_ROUTER_ROWS = ("ffn.router", "ffn.expert_output")
# the adapted layers inside an FFN, and the rows of what its matmuls keep between them
_FFN_MATRIX_ROLES = frozenset(("gate", "up", "down", "gate_up", "experts", "shared"))
_FFN_INSIDE = frozenset(("ffn.activation", "ffn.activation_mask", "ffn.inner_dropout_mask"))
_QKV_GRAD_ONLY = frozenset(f"attn.{n}" for n in ("q", "k", "dropout_output", "softmax_cast",
                                                   "relative_tables"))
# Gemma 3n's AltUp rows of a layer's prediction (memory.activation_breakdown's altup_rows)
_ALTUP_PREDICT = frozenset(f"altup.{n}" for n in (
    "streams", "predict_norm", "predict_router_input", "predict_modalities",
    "predict_modality_cast", "prediction_coefs", "predictions"))


def _reads(a: Adapted) -> str:
    """The projection-input row an adapted layer reads, relative to its group."""
    rest = a.name[len(a.stack) + 1:] if a.stack else a.name
    rest = rest.split(".", 1)[1] if rest.startswith(("encoder.", "decoder.")) else rest
    if rest.startswith("ffn.shared."):
        return "ffn.shared.out_input" if rest.endswith(".out") else "ffn.input"
    if rest.startswith("ffn.experts.") and not rest.endswith(".out"):
        return "ffn.routed_input"  # the experts' first matmul reads its tokens' copy
    if rest.startswith("ffn."):
        return "ffn.out_input" if rest.endswith(".out") else "ffn.input"
    if rest.startswith(("ple.", "altup.", "laurel.")):
        return {"ple.gate": "ple.gate_input", "ple.project": "ple.project_input",
                "altup.router": "altup.predict_router_input", "laurel.left": "attn.input",
                "laurel.right": "laurel.right_input"}.get(rest, "altup.predict_modality_cast")
    sub = rest.split(".", 1)[0]  # attn | cross | mixer
    if sub == "mixer":  # Mamba's x_proj reads the convolved x, dt_proj a view of its output
        return {"mixer.out_proj": "mixer.out_proj_input", "mixer.x_proj": "mixer.x",
                "mixer.dt_proj": "mixer.x_proj_output"}.get(rest, "mixer.input")
    if rest.endswith((".pos_key", ".pos_query")):  # DeBERTa: the relative table
        return f"{sub}.relative_table"
    if rest.endswith((".kv_b", ".q_b")):  # MLA: the normed latents
        return f"{sub}.{rest.rsplit('.', 1)[1]}_input"
    return f"{sub}.o_input" if rest.endswith(".o") else f"{sub}.input"


def lora_activations(spec: ModelSpec, acts: Breakdown, adapted: tuple[Adapted, ...],
                     s: Settings, T: int) -> Breakdown:
    """The frozen base's saved tensors (acts, as in full training, filtered) plus what the
    adapters keep: per adapted layer its input (a copy when PEFT casts it to the fp32
    adapters' dtype, or the dropout's output and mask), and lora_A's output (B·T·r)."""
    B, a = s.batch_size, s.act_bytes
    tokens = B * T
    # a 16-bit base: PEFT casts each adapter's input to fp32; its bitsandbytes layers
    # (peft/tuners/lora/bnb.py: requires_conversion = not torch.is_autocast_enabled()) only
    # outside autocast, so under --mixed their adapters read the input as it is (measured:
    # QLoRA on an H100, tests/data/peak_qlora_cuda_h100.json)
    # (FSDP2 under --mixed gathers the adapters in bf16 too: the cast is to bf16, a no-op)
    # (adapters made in 16-bit, as torchtune and LitGPT make them, read the input as it is)
    cast = a != s.adapter_bytes and not (s.mixed and s.quant.startswith("bnb-")) \
        and not s.fsdp2_mixed
    # a bitsandbytes base keeps the input of each of its layers whose input needs a gradient:
    # MatMul8bitLt always, MatMul4Bit before 0.44 (ctx.tensors = (A, B))
    base_keeps_input = s.quant == "bnb-int8" or (s.quant in _BNB_4BIT and s.bnb_legacy)
    # ... the LM head's too where it is quantised with them (Lightning's layers)
    head_keeps_input = base_keeps_input and s.lightning_bnb and s.quant in _BNB_4BIT \
        and spec.lm_head
    drop = s.lora_dropout > 0
    # what the adapters keep is fp32, or 16-bit where autocast computes them (--mixed)
    kept = 2 if s.mixed else s.adapter_bytes
    mask = 1 if s.device == "cuda" else s.adapter_bytes  # dropout on the adapters' input
    shared_reads = {(ad.stack, _reads(ad)) for ad in adapted} if not (cast or drop) else set()
    # PEFT's parametrised experts multiply their inputs as they are by the merged weight (no
    # cast, no dropout), which keeps them for its gradient
    shared_reads |= {(ad.stack, _reads(ad)) for ad in adapted if ad.experts > 1}
    # ... as does a router PEFT's conversion adapts (Mixtral's, Qwen2-MoE's pattern): its
    # weight parametrised as W + s·B·A, an F.linear of the input as it is
    # (DeepSeek's router multiplies fp32 copies of its input and merged weight: in 16-bit
    # those copies are what is kept, the weight's as in full training)
    wrapped_router = spec.peft_moe in ("mixtral", "qwen2_moe") and not spec.peft_router_linear
    router_fp32 = spec.router_fp32 and a != 4
    shared_reads |= {(ad.stack, "ffn.router_fp32_input" if router_fp32 else _reads(ad))
                     for ad in adapted if ad.role == "router" and wrapped_router}
    # (Gemma 3n's router runs twice a layer: its adapter reads the correct side's input too)
    shared_reads |= {(st, "altup.correct_router_input") for st, rd in shared_reads
                     if rd == "altup.predict_router_input"}
    # AltUp (Gemma 3n): with adapters on its routers or on the embeddings' projections to the
    # streams, the first layer's input already needs a gradient; without, the first layer's
    # prediction keeps nothing, nor does the model's projection to the streams (measured on
    # gemma3n_text variants: all-linear, and q_proj,v_proj)
    altup_grad = bool(spec.altup_inputs) and any(
        ad.role == "altup" or ad.name == "embed.project_altup" for ad in adapted)
    embed_grad = altup_grad or any(ad.name.startswith("embed.") for ad in adapted)
    # The layers below the first adapter (a stack's first layers when they hold none of the
    # targeted modules: dense layers before experts that alone are adapted, Mamba layers
    # before the first attention layer) run without a gradient: they keep nothing, and the
    # first adapted layer is the one the first-layer rules below speak of (measured:
    # qwen3_moe-sparse-step.json, gate_proj,up_proj,down_proj adapting the experts alone).
    # (A decoder with cross-attention gets a gradient from an adapted encoder: not there.)
    in_layers = {ad.stack for ad in adapted if ad.stack}
    first_of: dict[str, str] = {}  # stack -> the group of its first adapted layer
    below: Counter[str] = Counter()  # layers of each group below it
    for st in plan_of(spec).stacks:
        if embed_grad or any(g.block.cross is not None for g in st.groups):
            first_of[st.name] = st.groups[0].name
            continue
        # (ModernBERT's bare first layer: its layers all hold the same modules, so the first
        # adapted layer is layer 0 or none is)
        first_of[st.name], before = layers_before(spec, st, in_layers)
        below.update(before)
    firsts = {g for g in first_of.values() if g} \
        if spec.norm_position == "pre" and not altup_grad else set()
    first_predict = firsts if spec.altup_inputs else set()
    # the first layer's attention norm keeps nothing under a frozen base: its rows, one
    # layer fewer (none to drop where that layer has no norm: ModernBERT)
    first_norms = firsts - {st.bare_first for st in plan_of(spec).stacks}
    # the frozen embeddings keep nothing, except along Gemma 4's and 3n's per-layer inputs:
    # every layer's multiply keeps them, and an adapted projection to them makes its norm
    # keep its input and its adapter read the embeddings (measured: gemma3n_text variants)
    embed_kept: tuple[str, ...] = ()
    if spec.per_layer_input:
        embed_kept = ("embed.per_layer_inputs",)
        if any(ad.name == "embed.project_per_layer" for ad in adapted):
            embed_kept += ("embed.per_layer_norm.",) + (
                () if cast or drop else ("embed.project_per_layer_input",))
    # The first layer's input needs no gradient either (frozen embeddings): with no adapter
    # inside its attention it computes the attention without one, so keeps nothing of its
    # core (the Q/K/V copies, probabilities, masks) nor, with none on its output projection
    # either, of the norm its output reaches next (measured: llama-biases.json, gate, up and
    # down adapted: the layer's attention and post-attention norm keep nothing)
    # (an adapter on a projection before the layers, OPT's project_in, gives their input a
    # gradient: then none of this holds)
    first_blocks = {g.name: g.block for st in plan_of(spec).stacks for g in st.groups
                    if g.name == first_of[st.name]} if not embed_grad else {}
    # A stack with no adapter in any of its layers (I-BERT, whose QuantLinear layers PEFT
    # does not adapt; an encoder when only the decoder is adapted) runs without a gradient
    # throughout: its layers and final norm keep nothing (measured: ibert-tiny.json,
    # all-linear adapts the head's dense layer alone)
    frozen: set[str] = set()
    if not embed_grad:
        for st in plan_of(spec).stacks:
            names = {g.name for g in st.groups}
            if not names & in_layers:
                frozen |= names | {f"{st.name}.final_norm", f"{st.name}.final_dropout"}
    first_groups = set(first_blocks)
    free_core = first_groups - {ad.stack for ad in adapted if ad.role in _ATTN_CORE_ROLES}
    # (an adapted recurrent mixer, or LAuReL beside the attention, gives the sublayer's output
    # a gradient as an adapted o_proj does)
    free_norm = free_core - {ad.stack for ad in adapted if ad.role in ("o", "o_a", "o_b")
                             or ".mixer." in ad.name or ad.role == "laurel"}
    # the norm the attention's output reaches next: a post-norm's own, or the pre-norm of
    # the next sublayer (a decoder's cross-attention: its keys and values come from the
    # encoder, so that sublayer is kept whole)
    next_norm = {g: ("attn.norm." if spec.norm_position != "pre" else "cross.norm."
                     if blk.cross is not None else "ffn.norm.", "attn.post_norm.")
                 for g, blk in first_blocks.items()}
    # ... and a decoder's first cross-attention then has a query without one: its scores
    # keep Q (for the encoder's keys' gradient), not K (measured, bart-asymmetric.json with
    # fc1,fc2 adapted); the encoder's output is kept only by adapters on the cross K or V
    # (their frozen projections need no input)
    free_cross = {g for g in free_core if first_blocks[g].cross is not None}
    # ... and where its attention has Q adapted but not K (q_proj,v_proj, PEFT's default for
    # Llama-like models), the scores' matmul keeps K for Q's gradient but not Q for K's, and
    # the other way round (measured: falcon_h1-tiny.json and jamba-tiny.json, q_proj,v_proj,
    # eager: the first adapted layer keeps no Q copy)
    free_q_copy = first_groups - {
        ad.stack for ad in adapted if ad.role in ("k", "qkv", "kv_a", "kv_b", "kv")}
    free_k_copy = first_groups - {
        ad.stack for ad in adapted if ad.role in ("q", "qkv", "q_a", "q_b")}
    # ... and, without an adapter on V's projection, V needs no gradient there: the A·V
    # matmul keeps no probabilities for it, so the copy it reads (the 16-bit cast of fp32
    # probabilities, or the dropout's output) is not kept (LoRA on q alone: +2.5 % before)
    free_v_copy = first_groups - {
        ad.stack for ad in adapted if ad.role in ("v", "qkv", "kv_a", "kv_b", "kv")}
    # ... and a recurrent mixer with no adapter of its own reads an input without one:
    # it keeps nothing there (measured: falcon_h1-tiny.json with q_proj,v_proj adapted, its
    # first layer's Mamba-2 beside the attention keeps nothing)
    free_mixer = {g for g in first_groups if first_blocks[g].mixer is not None} - {
        ad.stack for ad in adapted if ".mixer." in ad.name}
    # ... and with nothing adapted in its attention, the first layer's FFN input has no
    # gradient either; nor, whatever the attention holds, has a parallel block's, which reads
    # the layer's normed input (measured: phi-gqa-tied.json and cohere2-tiny.json with
    # q_proj,v_proj, +9 to +38 % before). There:
    ffn_free = free_norm | {g for g in first_groups if first_blocks[g].parallel}
    # - an unadapted router keeps nothing (its probabilities, the weights' products), and
    #   the experts' first matmul (gate/up) keeps no merged weight, which only its input's
    #   gradient needs (measured: mixtral-top1.json with w1,w2,w3 adapted);
    router_adapted = {ad.stack for ad in adapted if ad.role == "router"}
    free_router = ffn_free - router_adapted
    # - shared experts without an adapter of their own keep nothing (measured:
    #   deepseek_v3-no-q-lora-bias.json, gate_proj,up_proj,down_proj adapting the routed
    #   experts alone), nor with one on their down alone, which reads the activation's
    #   output, needing no gradient then (measured: minimax_m3_vl_text-tiny.json, whose fused
    #   gate_up_proj the MLP's names miss);
    free_shared = ffn_free - {ad.stack for ad in adapted if ".ffn.shared." in ad.name
                              and _reads(ad) != "ffn.shared.out_input"}
    # - with no adapter on the shared experts nor on their gate, the gate's product keeps
    #   nothing (measured: qwen3_next-tiny.json with the MLP's names);
    free_shared_gate = ffn_free - {ad.stack for ad in adapted if ".ffn.shared" in ad.name}
    # - the routed experts' insides keep nothing where nothing but the router, the shared
    #   experts or down is adapted (measured: mixtral-top1.json, gate adapted, +22 to +28 %
    #   before; phi3-gqa-tied.json, whose down_proj alone the MLP's names adapt;
    #   qwen3_5_moe_text-attn.json, the shared expert alone), and their outputs' scatter and
    #   sort order only where the experts or the router are adapted;
    free_ffn = ffn_free - {ad.stack for ad in adapted
                           if ad.role in _FFN_MATRIX_ROLES and ad.role != "shared"
                           and not _reads(ad).endswith("out_input")}
    free_scatter = free_ffn - router_adapted - {
        ad.stack for ad in adapted if ad.role in ("experts", "gate", "up", "gate_up", "down")}
    # - the dense FFN beside adapted experts, without an adapter of its own, keeps nothing.
    free_dense = ffn_free - {ad.stack for ad in adapted if ".ffn.dense." in ad.name}
    if spec.moe_shortcut:
        # LongCat-Flash: the experts' output joins the residual after the layer's second
        # attention and FFN (the next layer of the plan), which, with nothing adapted
        # before the experts, run without a gradient too (measured: longcat_flash-tiny.json,
        # gate_proj,up_proj,down_proj adapting the experts alone: +38 % before)
        for st in plan_of(spec).stacks:
            if first_of[st.name] in free_norm:
                nxt = group_of_layer(spec, st, sum(below[g.name] for g in st.groups) + 1)
                if nxt and nxt not in in_layers:
                    below[nxt] += 1
    cross_kv = any(".cross." in ad.name and ad.role in ("k", "v", "qkv") for ad in adapted)
    # DeBERTa with its position projections adapted but not Q, K, V: the scores need a
    # gradient, Q, K, V do not, so what is kept only for theirs is not (measured,
    # deberta-relative.json: the scores' Q and K copies, the A·V matmul's probabilities, the
    # projected tables Q and K multiply)
    free_qkv = (first_groups - free_core) - {
        ad.stack for ad in adapted if ad.role in _ATTN_CORE_ROLES - {"pos_key", "pos_query"}}
    # a relative table is a frozen parameter: its dropout keeps no mask, and only an adapter
    # on a position projection keeps the table (its input)
    # (under share_att_key the attention's own query and key projections project the
    # table: their adapters read it too)
    table_read = {ad.stack for ad in adapted if _reads(ad) == "attn.relative_table" or (
        spec.rel_shared_key and ad.role in ("q", "k", "qkv") and ".attn." in ad.name)}
    # an output projection's adapter reading the attention's output as it is (no cast, no
    # dropout): o_input, or where o_proj reads the kernel's output itself (the CPU's flash
    # kernel), that output
    o_reads: set[tuple[str, str]] = set()
    if not (cast or drop):
        for grp in {ad.stack for ad in adapted if ad.role == "o"} & free_core:
            has_copy = any(r[5] == grp and r[0] == f"{grp}.attn.o_input" for r in acts.rows)
            o_reads.add((grp, "attn.o_input" if has_copy else "attn.out"))
    # (a parallel block with one norm: its FFN reads the attention's normed input, that row)
    shared_reads |= {(g.name, "attn.input") for g in plan_of(spec).groups
                     if g.block.ffn_reads_attn_input and (g.name, "ffn.input") in shared_reads}
    o_reads |= shared_reads
    # an ungated FFN whose activation keeps its result (ReLU): down's input is that result,
    # which the activation's backward reads (measured: opt-nobias-post.json, q_proj,v_proj;
    # −15 % before); with an FFN dropout between them the result has a row of its own
    result_in = {g.name for g in plan_of(spec).groups if g.block.ffn is not None
                 and g.block.ffn.kind == "plain" and g.block.ffn.activation in RESULT_SAVERS
                 and not any(r[5] == g.name and r[0].endswith(".ffn.activation")
                             for r in acts.rows)}
    mixer_inputs = {g.name: _MIXER_PROJECTION_INPUTS[g.block.mixer.kind]
                    for g in plan_of(spec).groups if g.block.mixer is not None
                    and g.block.mixer.kind in _MIXER_PROJECTION_INPUTS}
    rows = []
    for r in acts.rows:
        name, stack = r[0], r[5]
        rest = name[len(stack) + 1:] if stack else name
        if name.endswith(_WEIGHT_GRAD_ONLY) or (
                name in _IDS and ("", name) not in shared_reads
                and not (name == "head.input" and head_keeps_input)) or (
                name.startswith("embed.") and not name.startswith(embed_kept)) \
                or name.endswith(("embed.token_ids", "embed.position_ids")):
            continue
        if stack and (rest in _PROJECTION_INPUTS or rest in mixer_inputs.get(stack, ())) \
                and (stack, rest) not in shared_reads \
                and not (rest == "ffn.out_input" and stack in result_in) \
                and not (base_keeps_input and rest in _QUANTISED_INPUTS):
            continue
        if stack in frozen or (not stack and name.startswith(tuple(frozen))):
            continue
        if stack in below:  # the layers below the first adapter keep nothing
            reps = r[4] - below[stack]
            if reps < 1:
                continue
            r = (*r[:4], reps, *r[5:])
        # (the copies of Q and K DeBERTa's terms multiply are kept for the projected table's
        # gradient: with the table's projections frozen, they are not; measured, in_proj
        # adapted alone)
        if rest == "attn.relative_table_dropout_mask" or (
                rest in ("attn.relative_table", "attn.relative_c2p_query",
                         "attn.relative_p2c_key") and stack not in table_read) or (
                name == "decoder.cross.encoder_output" and not cross_kv):
            continue
        if (stack in first_norms and rest.startswith(("attn.norm.", "mixer.norm."))) or (
                stack in first_predict and rest in _ALTUP_PREDICT) or (
                stack in free_core and rest.startswith("attn.")
                and (stack, rest) not in o_reads
                and not rest.startswith(("attn.norm.", "attn.post_norm."))) or (
                stack in free_norm and rest.startswith(next_norm[stack])) or (
                stack in free_qkv and rest in _QKV_GRAD_ONLY) or (
                stack in free_cross and rest == "cross.k") or (
                stack in free_q_copy and rest in ("attn.q", "attn.q_second_map")) or (
                stack in free_k_copy and rest in ("attn.k", "attn.k_second_map")) or (
                stack in free_v_copy and rest in ("attn.softmax_cast",
                                                  "attn.dropout_output")) or (
                stack in free_router and rest.startswith(_ROUTER_ROWS)) or (
                stack in free_shared and rest.startswith("ffn.shared.")
                and (stack, rest) not in shared_reads) or (
                stack in free_shared_gate and rest == "ffn.shared_gate_product") or (
                stack in free_ffn and (rest in _FFN_INSIDE or (
                    rest == "ffn.out_input" and (stack, rest) not in shared_reads))) or (
                stack in free_dense and rest.startswith("ffn.dense.")) or (
                stack in free_scatter and rest in ("ffn.expert_scatter", "ffn.expert_order")) or (
                stack in free_mixer and rest.startswith("mixer.")) or (
                # (a quantised base keeps no input its layers read without a gradient)
                base_keeps_input and stack in first_groups and rest == "attn.input"
                and (stack, rest) not in shared_reads):
            if r[4] > 1:
                rows.append((*r[:4], r[4] - 1, *r[5:]))
            continue
        if name == "altup.input_streams" and spec.altup_inputs and not altup_grad:
            continue
        rows.append(r)
    for ad in adapted:
        if ad.name.endswith(".altup.correct"):
            # Gemma3nTextAltUp.correct multiplies by the clamped weight with F.linear, so
            # peft's adapter on correction_coefs never runs in training (measured)
            continue
        if ad.name.endswith(".altup.router"):
            # the router runs twice a layer (predict, correct), and its adapter with it
            ad = ad._replace(repeat=2 * ad.repeat)
        if spec.idle_cross_attention and ".cross." in ad.name or ".attn.index_" in ad.name \
                or ad.stack.endswith(".idle"):
            # adapters on a cross-attention a decoder alone never runs, or inside DSA's
            # indexer (torch.no_grad: autograd saves nothing there)
            continue
        if ad.role == "router" and wrapped_router:
            # the router's ParamWrapper: the merged W + s·B·A, in the base's dtype, is what
            # its F.linear keeps for the input's gradient; none where the input needs none
            # (the first adapted layer's); no lora_A output, no cast kept (measured:
            # mixtral-top1.json, gate adapted, fp32 and bf16)
            base = 4 if s.precision == "fp32" else 2
            merged = ad.repeat - (ad.stack in ffn_free)
            if merged and not router_fp32:
                rows.append((ad.name + ".lora_merged_weight", ad.fan_in * ad.fan_out * base,
                             "in · out · base bytes (W + s·B·A, kept)",
                             f"{ad.fan_in:,} · {ad.fan_out:,} · {base}", merged, ad.stack, "",
                             None, ()))
            continue
        if ad.experts > 1:
            # PEFT's ParamWrapper reparametrises the experts' 3-D weight as W + s·B·A
            # (torch parametrize, one baddbmm): the merged expert weights are a tensor the
            # expert matmuls keep for backward, in the base's dtype (peft/tuners/lora/
            # layer.py, ParamWrapper._activate_lora); what they read is saved as in full
            # training (routed_input)
            base = 4 if s.precision == "fp32" else 2
            size = ad.experts * ad.fan_in * ad.fan_out
            merged = ad.repeat - (ad.stack in ffn_free and not ad.name.endswith(".out"))
            if merged:
                rows.append((ad.name + ".lora_merged_weight", size * base,
                             "n_experts · in · out · base bytes (W + s·B·A, kept)",
                             f"{ad.experts} · {ad.fan_in:,} · {ad.fan_out:,} · {base}", merged,
                             ad.stack, "", None, ()))
            if base != s.adapter_bytes:
                # over a 16-bit base the merge casts the fp32 A and B to the base's dtype, and
                # the batched product keeps both casts (measured: mixtral-top1.json, bf16)
                rank = s.lora_rank * ad.rank_factor
                rows.append((ad.name + ".lora_weight_casts",
                             ad.experts * rank * (ad.fan_in + ad.fan_out) * base,
                             "n_experts · r · (in + out) · base bytes (A and B, cast)",
                             f"{ad.experts} · {rank} · ({ad.fan_in:,} + {ad.fan_out:,}) · "
                             f"{base}", ad.repeat, ad.stack, "", None, ()))
            continue
        # DeBERTa's position projections read the relative table (its rows the sequence
        # meets), once for the whole batch, not B·T tokens
        rows_in = spec.rel_rows(T) if ad.role in ("pos_key", "pos_query") else tokens
        n = rows_in * ad.fan_in
        rank = s.lora_rank * ad.rank_factor
        if spec.layer_groups and ad.stack:
            # ALBERT: an adapter of a shared layer runs (and keeps its tensors) in each of the
            # n_layers / layer_groups layers that share it
            ad = ad._replace(repeat=ad.repeat * spec.n_layers // spec.layer_groups)
        read, how_many = ("B·T", f"{B} · {T}") if rows_in == tokens and ad.role not in (
            "pos_key", "pos_query") else ("rel_rows", f"{rows_in:,}")
        width = f"{how_many} · {ad.fan_in:,}"
        # the first layer's input needs no gradient: its attention adapters' dropout keeps no
        # mask there (measured)
        first = ad.stack in firsts and _reads(ad) == "attn.input"
        # (nor the head's, where no adapter below it gives its input a gradient)
        first = first or (ad.role == "lm_head" and not in_layers and not embed_grad)
        # (a row-parallel layer's input is split by tensor parallelism, and its adapter's
        # copy with it)
        split = "tp" if _reads(ad).endswith(("o_input", "out_input")) else ""
        if drop and ad.repeat - first:
            rows.append((ad.name + ".lora_dropout_mask", n * mask, f"{read}·in · mask",
                         f"{width} · {mask}", ad.repeat - first, ad.stack, split, None, ()))
        if cast or drop:
            rows.append((ad.name + ".lora_input", n * kept, f"{read}·in · {kept} (" + (
                "autocast's 16-bit copy" if s.mixed else "the adapter's fp32 copy" if cast
                else "the dropout's output") + ")", f"{width} · {kept}",
                ad.repeat, ad.stack, split, None, ()))
        rows.append((ad.name + ".lora_a_output", rows_in * rank * kept,
                     f"{read}·r · {kept} (lora_B's input)", f"{how_many} · {rank} · {kept}",
                     ad.repeat, ad.stack, "", None, ()))
    notes = acts.notes + (
        "LoRA: the frozen base keeps only what its inputs' gradients need; each adapter "
        "keeps its input" + (f" (a {'fp32' if s.adapter_bytes == 4 else '16-bit'} copy)"
                             if cast and not s.mixed else "") +
        (", a dropout mask" if drop else "") + " and the B·T·r output of lora_A",)
    if any(ad.role == "lm_head" for ad in adapted):
        notes += ("LoRA on the LM head: lora_B's output, its scaling and the sum are "
                  "B·T·vocab_size each for a moment in the head (their gradients in "
                  "backward); none is kept, and they are not drawn beyond the loss's own "
                  "moments",)
    return Breakdown(acts.model, "bytes", tuple(rows), notes, {}, acts.symbols)


def autocast_copy_params(spec: ModelSpec, params: Breakdown, layers: str = "all",
                         experts: bool = True) -> int:
    """Parameters torch autocast casts to 16-bit for a matmul (and keeps for backward): every
    linear and convolution weight and bias, the LM head (the token embedding itself when
    tied); not the norms, nor tables only looked up (embeddings, relative-position tables).
    ``layers``: "all", or "largest" / "none" with those outside the layers: what backward
    holds under full recomputation while it rebuilds a layer / before (autocast's cache dies
    with the forward's autocast region; each rebuilt layer casts its weights anew).
    ``experts``: False leaves out the MoE experts' weights (cached_experts)."""
    outside = 0
    layer: dict[str, int] = {}
    for name, count, *_rest in params.rows:
        repeat, stack = _rest[2], _rest[3]
        looked_up = name.startswith("embed.") or ".embed." in name or "relative" in name
        if "norm" in name or (looked_up and not (name == "embed.tokens" and spec.tie_embeddings
                                                 and spec.lm_head)):
            continue
        if not experts and ".ffn.experts." in name:
            continue
        if stack:
            layer[stack] = layer.get(stack, 0) + count * (1 if layers == "largest" else repeat)
        else:
            outside += count * repeat
    return outside + (sum(layer.values()) if layers == "all" else
                      max(layer.values(), default=0) if layers == "largest" else 0)


def cached_experts(spec: ModelSpec, s: Settings, acts: Breakdown) -> bool:
    """Whether autocast's cache holds the MoE experts' 16-bit copies. Not for the 3-D experts
    of transformers' experts classes (spec.experts_grouped): grouped_mm is not
    autocast-enabled and reads them whole in fp32, and the eager loop's F.linear casts each
    expert's slice anew (a view: autocast caches only a leaf parameter), copies the graph
    keeps as activations (decoder.ffn.expert_weight_casts; measured under CPU autocast,
    tests/test_graph_moe_amp.py). The rules keep counting the eager loop's as cached: the
    same bytes, every expert hit."""
    if not spec.experts_grouped:
        return True
    return not (experts_impl(spec, s.experts) == "grouped_mm"
                or any(r[0].endswith("ffn.expert_weight_casts") for r in acts.rows))


def training_timeline(spec: ModelSpec, s: Settings, T: int, per_gpu: Breakdown,
                      acts: Breakdown, params: Breakdown, max_points: int = 240) -> Timeline:
    """The training step walked op group by op group (costs/timeline.py), in max_points
    points at most (0: one per run of layers); its maxima are the phases' peaks."""
    from transformer_calc.costs.timeline import op_groups, walk

    step = training_step(spec, s, T, per_gpu, acts, params)
    return walk(step, op_groups(spec, s, acts, params, "lora_weights" in step.held_names),
                max_points)


def training_phases(spec: ModelSpec, s: Settings, T: int, per_gpu: Breakdown,
                    acts: Breakdown, params: Breakdown) -> tuple[Phase, ...]:
    """The high point of each phase of a training step: the timeline's maxima (walked in
    as few points as keep them)."""
    return training_timeline(spec, s, T, per_gpu, acts, params, 0).phases


def training_step(spec: ModelSpec, s: Settings, T: int, per_gpu: Breakdown,
                  acts: Breakdown, params: Breakdown) -> Step:
    """What a training step after the first holds and makes at each of its high points, per
    GPU (measured on an H100 with torch.cuda.max_memory_allocated:
    docs/peak_cuda_h100.md); costs/timeline.py walks it op group by op group.

    Gradients are freed by zero_grad(set_to_none=True) (torch's default), so forward and the
    start of backward hold no gradients; backward peaks at its start: every saved activation
    and the loss's two B·T·V fp32 gradient buffers; the optimizer step holds weights,
    gradients, states and its own temporaries. Under torch AMP the fp32 weights are the
    model's parameters, and autocast's 16-bit copies live from forward to backward.
    """
    c = dict.fromkeys(("weights", "master_weights", "gradients", "optimizer_states"), 0)
    c.update({i.name: i.total for i in per_gpu.items})  # offloaded states: 0 on the GPU
    # the share of the parameters on the most loaded GPU (before ZeRO), as _shard takes it
    share = sum(_params_on_busiest_gpu(spec, s, params)) / params.total if s.gpus > 1 else 1
    cuda = s.device == "cuda"
    data_parallel = s.dp * s.cp > 1 and s.torch_parallel
    # FSDP2 gathers the weights in their compute dtype (bf16 under MixedPrecisionPolicy):
    # autocast finds nothing to cast
    fsdp2 = data_parallel and s.zero >= 2
    if "lora_weights" in c:
        weights = ("weights", c["weights"] + c["lora_weights"], "the frozen base and the "
                   "fp32 adapters")
    elif s.sixteen_bit_model:
        # Megatron-LM / DeepSpeed / FSDP mixed precision: 16-bit parameters and an fp32
        # master copy (a shard under ZeRO, in CPU memory under --offload), no autocast copies:
        # 2 + 4 + 4 (fp32 gradients) + 8 = 18 bytes per parameter, held throughout
        weights = ("weights", c["weights"] + c["master_weights"], "16-bit weights + the fp32 "
                   "master copy" + (" (in CPU memory)" if s.offload != "none" else ""))
    elif s.mixed:
        weights = ("weights", c["master_weights"], "fp32 weights (torch AMP: the model's own "
                   "parameters, which the optimizer updates)")
    else:
        weights = ("weights", c["weights"], f"{s.precision} weights")
    # bitsandbytes' paged states live in unified memory, which the allocator does not count
    states = ("optimizer_states", 0 if s.paged_optimizer else c["optimizer_states"],
              "paged: in unified memory, outside the allocator's counters"
              if s.paged_optimizer else "as in the totals")
    grads = ("gradients", c["gradients"], "as in the totals")
    acts_bytes = c["activations"]
    if cuda:  # the caching allocator's 512-byte blocks, per saved tensor
        acts_bytes += sum([(-r[1] % BLOCK) * r[4] for r in acts.rows]) // (
            s.tp * s.cp)
    # full recomputation: the layer backward rebuilds is live in backward alone
    rebuilt = (sum([r[1] * r[4] for r in acts.rows if r[6] == RECOMPUTED_TP]) // s.tp
               + sum([r[1] * r[4] for r in acts.rows if r[6] == RECOMPUTED])
               // (s.tp if s.sequence_parallel else 1)) // s.cp
    activations = ("activations", acts_bytes - rebuilt, "every tensor saved for backward" +
                   (", in 512-byte blocks" if cuda else ""))
    if s.offload_activations:
        activations = ("activations", _offloaded(acts, s)[0], "the loss's saved tensors and "
                       "two layers' kept inputs (the one backward reaches, the one brought back "
                       "ahead of it); the rest in CPU memory")
    common = [weights, states]
    rebuild_copies = start_copies = None
    if s.mixed and "lora_weights" in c:
        common.append(("autocast_copies", c["lora_weights"] // 2, "16-bit copies of the "
                       "adapters (torch autocast; the base is 16-bit already)"))
    elif s.mixed and not s.sixteen_bit_model and not fsdp2:
        experts = cached_experts(spec, s, acts)
        copies = math.ceil(2 * autocast_copy_params(spec, params, experts=experts) * share)
        common.append(("autocast_copies", copies, "16-bit copies of the matmul weights, kept "
                       "for backward (torch autocast; norms and embedding lookups stay fp32)"))
        if rebuilt:
            # autocast's cache dies with forward; backward holds the copies outside the layers
            # and those of the layer it rebuilds
            start_copies = ("autocast_copies", math.ceil(2 * autocast_copy_params(
                spec, params, "none") * share), "16-bit copies of the matmul weights outside "
                "the layers (the layers' died with forward's autocast cache)")
            rebuild_copies = ("autocast_copies", math.ceil(2 * autocast_copy_params(
                spec, params, "largest", experts) * share), "16-bit copies of the matmul weights "
                "outside the layers and of the layer being rebuilt")
    if s.mixed and s.recipe in SIXTEEN_BIT_RECIPES:
        # Megatron-LM's DDP keeps one contiguous fp32 gradient buffer (main_grad), zeroed
        # between steps, never freed: 2 + 4 + 4 + 8 = 18 bytes per parameter throughout
        common.append(("gradients", c["gradients"], "fp32 main gradients: a persistent "
                       "buffer (Megatron-LM's DDP zeroes it, never frees it)"))
    elif data_parallel and s.zero <= 1:
        # DDP (gradient_as_bucket_view=True) allocates its gradient buckets once; the
        # gradients are views into them, which zero_grad(set_to_none=True) drops, not the
        # buckets: live throughout
        common.append(("gradients", c["gradients"], "DDP's gradient buckets: allocated "
                       "once, live throughout"))
    elif s.grad_accum > 1:
        common.append(("gradients", c["gradients"], f"accumulated over {s.grad_accum} "
                       "micro-batches: live from the second one on"))
    if cuda:
        common.append(("cublas_workspace", CUBLAS_WORKSPACE, "cuBLAS + cuBLASLt workspaces, "
                       "32 MiB each (Hopper)"))
    if "gathered_parameters" in c:
        common.append(("gathered_parameters", c["gathered_parameters"], (
            "FSDP2: gathered for forward and backward" if fsdp2 else
            "ZeRO-3: the layer in use and the prefetched ones, gathered")))
    lightning = s.lightning_bnb and s.quant in _BNB_4BIT
    if s.quant:
        # a quantised base is dequantised one layer at a time for its matmul (bitsandbytes'
        # MatMul4Bit, forward and backward): one 16-bit copy of the largest matrix is live
        # (Lightning's layers: the head's too, dequantised to fp16 and cast, two copies)
        from transformer_calc.quant import tensors

        largest = max([t.shape[-2] * t.shape[-1] for t in tensors(params)
                       if t.kind in ("linear", "experts") or (lightning and t.kind == "head"
                                                             and len(t.shape) == 2)]
                      or [0])
        copies = 2 if lightning and s.act_bytes == 2 else 1
        common.append(("dequantised_weight", largest * s.act_bytes * copies, (
            "the largest quantised matrix, dequantised to fp16 and cast for its matmul"
            if copies == 2 else "the largest quantised matrix, dequantised for its matmul")))
    btv = s.batch_size * T * spec.vocab_size // ((s.tp if s.vocab_parallel else 1) * s.cp) \
        if spec.lm_head or spec.mlm_head else 0
    forward = list(common) + [activations]
    backward = [start_copies if start_copies and r[0] == "autocast_copies" else r
                for r in common] + [activations]
    rebuild = _rebuild_phase(spec, s, acts, params, c, common, rebuild_copies,
                             rebuilt) if rebuilt else []
    if btv:
        head_logits, loss_grads = _loss_transients(spec, s, btv)
        if head_logits[1]:
            forward.append(head_logits)
        backward.append(loss_grads)
    if s.keeps_previous_graph and s.bnb_legacy and s.quant in _BNB_4BIT:
        forward.append(_previous_graph(acts, s))
    index = max([g.block.attn.index_heads for g in plan_of(spec).groups
                 if g.block.attn is not None] or [0])
    when = "at the end of forward, while the loss is computed"
    indexer = None
    if index:
        # DSA's indexer (transformers 5.23 DeepseekV32Indexer, under no_grad): the fp32
        # scores of every query against every key in each index head, and their ReLU, live
        # together for a moment in each layer; in the last, beside every layer's saved tensors
        scores = 2 * s.batch_size * T * index * T * 4 // (s.tp * s.cp)
        indexer = ("indexer_scores", scores, "2 · B·T·index_heads·T · 4 (the last "
                   "layer's fp32 indexer scores and their ReLU, freed at once)")
    temp, why = (0, "") if s.paged_optimizer else _optimizer_temporary(s, c, params)
    step_when = "inside the optimizer step"
    if s.optimizer_in_backward:
        # one optimizer per parameter, stepped in its post-accumulate-grad hook: a single
        # gradient and that step's temporary live at once (measured on an H100: two tensors'
        # bytes over weights and states, tests/data/loss_context_cuda_h100.json)
        trainable = [r for r in params.rows if category(r[0]) not in s.freeze]
        largest = max([r[1] for r in trainable])
        total = sum([r[1] * r[4] for r in trainable])
        grads = ("gradients", math.ceil(c["gradients"] * largest / total), "the largest "
                 "parameter's gradient: each is stepped and freed as backward makes it")
        temp = math.ceil(temp * largest / total) if s.optimizer_impl == "foreach" else temp
        why = why and why.split(":")[0] + ": that parameter's step alone"
        step_when = "inside backward, one parameter's step at a time"
        rebuild = [grads if r[0] == "gradients" else r for r in rebuild]
        if rebuild and temp:
            rebuild.append(("optimizer_temporary", temp, why))
    optimizer = [weights, grads, states] + [r for r in common[2:] if r[0] == "cublas_workspace"]
    if temp:
        optimizer.append(("optimizer_temporary", temp, why))
    from transformer_calc.costs.timeline import Step

    copies = next((r[1] for r in common if r[0] == "autocast_copies"), 0)
    return Step(spec.name, tuple(common), activations, tuple(forward), when, tuple(backward),
                tuple(rebuild), tuple(optimizer), step_when, grads,
                ("optimizer_temporary", temp, why) if temp else None,
                accumulate=not any(r[0] == "gradients" for r in common),
                in_backward=s.optimizer_in_backward,
                outside_copies=start_copies[1] if start_copies else 0 if "lora_weights" in c
                else min(copies, math.ceil(2 * autocast_copy_params(spec, params, "none")
                                           * share)) if copies else 0,
                layer_copies=(rebuild_copies[1] - start_copies[1]) if rebuild_copies
                and start_copies else 0, rebuilt=rebuilt, offload=s.offload_activations,
                pipeline=s.pp, indexer=indexer, reshard="" if "gathered_parameters" not in c
                else "layer" if fsdp2 and s.zero == 2 else "end")


def _previous_graph(acts: Breakdown, s: Settings) -> tuple[str, int, str]:
    """What the previous micro-batch's graph still holds at the end of the next forward
    (Settings.keeps_previous_graph): the input of each of its 4-bit matmuls that kept one,
    held on ctx (bitsandbytes before 0.44), as many bytes as this micro-batch's. Its logits
    live as long, until `logits` is rebound, before the loss keeps its log-softmax: under
    LitGPT's 16-bit loss as large as what the loss keeps, whose row stands for them here."""
    # (o_proj reads the attention kernel's output itself where no copy of it is kept: SDPA's
    # flash output, laid out (B, T, H, d_head) already)
    copies = {r[5] for r in acts.rows if r[5] and r[0] == f"{r[5]}.attn.o_input"}
    held = sum([r[1] * r[4] for r in acts.rows if (r[0][len(r[5]) + 1:] if r[5] else r[0])
                in _QUANTISED_INPUTS or (s.lightning_bnb and r[0] == "head.input")
                or (r[5] and r[5] not in copies and r[0] == f"{r[5]}.attn.out")])
    return ("previous_micro_batch", held // (s.tp * s.cp), "the previous micro-batch's 4-bit "
            "matmul inputs, held on ctx until its logits are rebound after this forward")


def _loss_transients(spec: ModelSpec, s: Settings, btv: int
                     ) -> tuple[tuple[str, int, str], tuple[str, int, str]]:
    """The logits live beside what the loss keeps while it is taken (forward's high point),
    and the loss's gradients at the start of backward, as the recipe runs the head and the
    loss (``btv``: B·T·vocab_size on this GPU). Measured on an H100, in bytes per element
    beyond what the loss keeps (tests/data/loss_context_cuda_h100.json): transformers' loss
    6 in forward (16-bit logits and their fp32 copy), 8 in backward; logits upcast in the
    model 4 and 8; N chunks each upcast in the loss 2 + 4/N and 8/N; compiled chunks 0 and
    2/N; a 16-bit loss 2 and 4."""
    a, N = s.act_bytes, s.loss_chunks
    up = (spec.loss_fp32 or s.mixed or a == 4) and not (s.logits_fp32 == "never"
                                                        and not s.mixed)
    chunks = f" / {N} (one chunk at a time)" if N > 1 else ""
    if a == 4 or not up:  # the loss runs in the logits' own dtype
        g = 4 if a == 4 or up else a
        return (("logits", btv * a, "B·T·vocab_size · act (freed once the loss is taken)"),
                ("loss_gradients", 2 * btv * g // N, f"2 · B·T·vocab_size · {g}{chunks} (the "
                 "gradients of log-softmax and of the logits)"))
    if s.compile_loss and s.upcast_in_loss:
        return (("logits", 0, "kept by the compiled loss (activations)"),
                ("loss_gradients", btv * a // N, f"B·T·vocab_size · act{chunks} (the "
                 "compiled loss's 16-bit gradient of the logits)"))
    back = ("loss_gradients", 2 * btv * 4 // N, f"2 · B·T·vocab_size · 4{chunks} (the fp32 "
            "gradients of log-softmax and of the logits)")
    if N > 1:
        return (("logits", btv * a + btv * 4 // N, f"B·T·vocab_size · act (the 16-bit chunks) "
                 f"+ B·T·vocab_size · 4 / {N} (one chunk's fp32 upcast)"), back)
    if s.logits_fp32 == "model":
        return (("logits", btv * 4, "B·T·vocab_size · 4 (upcast inside the model, the 16-bit "
                 "logits freed; freed once the loss is taken)"), back)
    return (("logits", btv * a + btv * 4, "B·T·vocab_size · act + its fp32 upcast for the "
             "loss (freed once the loss is taken)"), back)


def _offloaded(acts: Breakdown, s: Settings) -> tuple[int, int]:
    """Activation offloading (torchtune's OffloadActivations around the model's forward):
    (what stays on the GPU, what goes to CPU memory). Every tensor the model saves moves to
    the host; the loss's (taken outside the model) and the rebuilt layer's (made in backward)
    stay, and two layers' kept inputs are on the GPU at a time: the one backward reaches and
    the one brought back ahead of it."""
    stay = moved = 0
    inputs = [r[1] for r in acts.rows if r[0].endswith(".checkpoint_input")]
    for r in acts.rows:
        size = (r[1] + (-r[1] % BLOCK if s.device == "cuda" else 0)) * r[4]
        if r[0].startswith("loss.") or r[6] in (RECOMPUTED, RECOMPUTED_TP):
            stay += size if not r[6] else 0
        else:
            moved += size
    return stay + 2 * max(inputs, default=0), moved


def _rebuild_phase(spec: ModelSpec, s: Settings, acts: Breakdown, params: Breakdown,
                   c: dict[str, int], common: list[tuple[str, int, str]],
                   copies: tuple[str, int, str] | None, rebuilt: int
                   ) -> list[tuple[str, int, str]]:
    """Backward under full recomputation while it rebuilds the first layer: the layer's saved
    tensors and its largest op's gradients (``rebuilt``, per GPU), every layer's gradients
    but its own, the kept inputs of the layers above freed; backward peaks here or at its
    start (the loss's gradients beside what is kept), whichever is larger."""
    inputs = sum([r[1] for r in acts.rows if r[0].endswith(".checkpoint_input")])
    below = sum([r[1] * r[4] for r in acts.rows if not r[5] and r[0].startswith("embed.")])
    rows = [copies if copies and r[0] == "autocast_copies" else r for r in common] + [
        ("activations", (inputs + below) // (s.tp * s.cp),
         "the first layer's kept input and what the embeddings keep"),
        ("recomputed_layer", rebuilt, "one layer's saved tensors, rebuilt, and the "
         "gradients its largest op holds")]
    if not any(r[0] == "gradients" for r in common):
        # made so far: not the rebuilt layer's own, nor the embedding tables', whose
        # gradients backward reaches last (a table tied to the head has its gradient from
        # the head already)
        late = max([sum([r[1] for r in params.rows if r[5] == g.name])
                    for g in plan_of(spec).groups] or [0]) + sum([
            r[1] * r[4] for r in params.rows if not r[5] and r[0].startswith("embed.")
            and not (r[0] == "embed.tokens" and spec.tie_embeddings and spec.lm_head)])
        made = max(c["gradients"] - c["gradients"] * late // params.total, 0)
        rows.append(("gradients", made, "every layer's above the one rebuilt, and the head's"))
    return rows


def _optimizer_temporary(s: Settings, c: dict[str, int], params: Breakdown) -> tuple[int, str]:
    """Bytes an optimizer step allocates besides its states. torch's foreach Adam/AdamW
    (torch/optim/adam.py, _multi_tensor_adam: exp_avg_sq_sqrt = _foreach_sqrt(...)) makes one
    moment-sized temporary of every parameter at once: half the two moments' bytes, exact on
    the H100 (4 bytes per parameter in fp32, 2 in bf16); the for-loop implementation makes
    two of the largest tensor (sqrt, then the division); fused kernels none."""
    if s.optimizer not in ("adamw", "adam") or s.optimizer_impl == "fused":
        return 0, ""
    if s.optimizer_impl == "foreach":
        return c["optimizer_states"] // 2, "foreach: sqrt of every second moment at once"
    if "lora_weights" in c:
        # the largest adapter matrix: r · the widest side of a matrix (an over-estimate where
        # that matrix is not adapted; the tensors are small either way)
        largest = s.lora_rank * max([max(r[8]) for r in params.rows if len(r[8]) == 2]
                                    or [0])
        per = s.adapter_bytes
    else:
        largest = max([r[1] for r in params.rows] or [0])
        per = 2 if s.precision != "fp32" and not s.mixed else 4
    return 2 * largest * per, "for-loop: two temporaries of the largest tensor"


def _check_parallel(spec: ModelSpec, s: Settings) -> None:
    """Tensor parallelism splits the heads (Megatron-LM: query heads evenly; K/V heads evenly,
    or replicated when there are fewer than --tp and they divide it); pipeline parallelism
    splits the layers evenly (an uneven split is refused, not assumed)."""
    if s.tp > 1 and spec.n_heads:
        if spec.n_heads % s.tp:
            raise TcalcError(f"--tp {s.tp}: expected a divisor of {spec.name}'s "
                             f"{spec.n_heads} attention heads")
        kv = spec.kv_heads
        if not spec.mla and kv % s.tp and s.tp % kv:
            raise TcalcError(f"--tp {s.tp}: expected a divisor of {spec.name}'s {kv} K/V heads, "
                             "or a multiple of them (each K/V head then replicated)")
    if s.ep > 1 and (not spec.n_experts or spec.n_experts % s.ep):
        raise TcalcError(f"--ep {s.ep}: expected a divisor of {spec.name}'s "
                         f"{spec.n_experts or 0} experts per layer")
    if s.cp > 1 and (s.seq_len or spec.default_seq_len) % (2 * s.cp):
        raise TcalcError(f"--cp {s.cp}: the sequence length must be a multiple of 2 · cp "
                         "(Megatron-LM's load-balanced context split)")
    if s.pp > 1 and spec.total_layers % s.pp:
        raise TcalcError(f"--pp {s.pp}: expected a divisor of {spec.name}'s "
                         f"{spec.total_layers} layers (an uneven split is not modelled)")


def _shard(spec: ModelSpec, s: Settings, total: Breakdown, acts: Breakdown,
           params: Breakdown | None = None,
           trainable_tensors: list[int] | None = None) -> Breakdown:
    """Per-GPU bytes, with Megatron-LM's semantics (Korthikanti et al. 2022; Megatron-LM's
    megatron/training/theoretical_memory_usage.py for the most loaded shard).

    Model states: tensor parallelism splits every tensor; pipeline parallelism splits the
    layers, and the most loaded stage also holds the embeddings (the first stage; the last
    holds the LM head, a copy of a tied embedding, and the final norm); expert parallelism
    splits the experts over --ep ranks drawn from data × context parallel. ZeRO
    (Rajbhandari et al. 2020; Megatron's distributed optimizer is stage 1) shards over
    data × context parallel: stage 1 optimizer states and master weights, stage 2 also
    gradients, stage 3 also weights; the experts' share over (data × context) / ep.
    Activations: one micro-batch per GPU; tensor parallelism splits the attention/FFN
    internals (Eq. 2), sequence parallelism the rest too (Eq. 4), context parallelism
    every token-sized tensor (each rank holds T / cp); the first pipeline stage holds as many
    in-flight micro-batches as it has layers' share, L layers in all (Sec. 4.2.3)."""
    if s.gpus == 1:
        return total
    params = params or count_params(spec)
    dense, expert = _params_on_busiest_gpu(spec, s, params)
    group = s.dp * s.cp  # the data-parallel group ZeRO and the distributed optimizer use
    zero_stage = dict(_ZERO_STAGE)
    if s.mixed and not s.sixteen_bit_model:
        # torch AMP: the fp32 weights are the model's own parameters (the 16-bit copies are
        # autocast's): ZeRO-1 (ZeroRedundancyOptimizer) shards the optimizer states, ZeRO-2
        # the gradients too; only fully sharded data parallel the weights
        zero_stage["master_weights"] = 3
    if s.torch_parallel:
        # FSDP2 holds every parameter sharded at rest with reshard_after_forward=False too
        # (gathered for forward and backward: _fsdp2_gathered)
        zero_stage.update(weights=2, master_weights=2, lora_weights=2)
    n_all = params.total
    out = []
    for item in total.items:
        if item.name == "activations" and s.activations == "megatron":
            out.append(Item("activations", item.total, "Megatron-LM's first pipeline stage, "
                            "per GPU (its formula)"))
        elif item.name == "activations":
            split = sum([r[1] * r[4] for r in acts.rows if r[6] in ("tp", RECOMPUTED_TP)])
            rest = acts.total - split
            per = split // s.tp + (rest // s.tp if s.sequence_parallel else rest)
            per //= s.cp
            out.append(Item("activations", per, "tp-split part / tp + the rest"
                            + (" / tp (sequence parallel)" if s.sequence_parallel else "")
                            + (" / cp" if s.cp > 1 else "")))
        elif item.name == "kv_cache":
            # --batch-size is per GPU (as in training): each data-parallel replica caches its
            # own batch; pipeline parallelism splits the layers; tensor parallelism the K/V
            # heads, each rank holding at least one (replicated past n_kv_heads) and MLA's
            # latent whole (kv_cache_elements)
            T = s.seq_len or spec.default_seq_len
            whole = kv_cache_elements(spec, T, s.kv_block)
            rank = kv_cache_elements(spec, T, s.kv_block, s.tp)
            out.append(Item(item.name, math.ceil(item.total * rank / whole / s.pp) if whole
                            else 0, "kv_cache on one rank: its K/V heads (at least one; an "
                            "MLA latent whole)" + (" / pp" if s.pp > 1 else "")
                            if s.tp > 1 else "kv_cache / pp" if s.pp > 1 else "kv_cache"))
        elif item.name == "recurrent_state":
            # tensor parallelism splits the mixers' heads, pipeline parallelism the layers
            mp = s.tp * s.pp
            out.append(Item(item.name, math.ceil(item.total / mp),
                            f"{item.name} / (tp · pp)" if mp > 1 else item.name))
        elif item.name == "optimizer_states" and trainable_tensors and s.zero == 1:
            # ZeroRedundancyOptimizer hands each rank whole parameters, largest first to the
            # least loaded rank (torch/distributed/optim/zero_redundancy_optimizer.py,
            # _partition_parameters): the busiest rank's share of the states
            share = _busiest_partition(trainable_tensors, group) / sum(trainable_tensors)
            out.append(Item(item.name, math.ceil(item.total * share * (dense + expert) / n_all),
                            "optimizer_states of the busiest rank's whole parameters "
                            f"(ZeroRedundancyOptimizer over {group})"))
        else:
            sharded = s.zero >= zero_stage.get(item.name, 4)
            zd = group if sharded else 1
            ze = max(group // s.ep, 1) if sharded else 1
            per_param = item.total / n_all
            b = math.ceil(per_param * (dense / zd + expert / ze))
            how = "busiest shard" + (f" / ZeRO over {zd}" if sharded else "")
            out.append(Item(item.name, b, f"{item.name} on the {how}"))
    return Breakdown(total.model, "bytes", tuple(out))


def _trainable_tensors(s: Settings, params: Breakdown, adapters: Breakdown | None
                       ) -> list[int]:
    """The elements of every trainable tensor, one entry per tensor (the adapters' A and B
    under LoRA; the unfrozen parameters otherwise)."""
    if adapters is not None:
        rows = adapters.rows
    else:
        rows = tuple(r for r in params.rows if category(r[0]) not in s.freeze)
    return [r[1] for r in rows for _ in range(r[4])]


def _busiest_partition(sizes: list[int], ranks: int) -> int:
    """The largest rank total when tensors go, largest first, each to the least loaded
    rank (ZeroRedundancyOptimizer's greedy partition)."""
    import heapq

    loads = [0] * ranks
    for n in sorted(sizes, reverse=True):
        heapq.heapreplace(loads, loads[0] + n)
    return max(loads)


def _fsdp2_gathered(spec: ModelSpec, s: Settings, per_gpu: Breakdown, params: Breakdown
                    ) -> Breakdown:
    """FSDP2 (torch.distributed.fsdp.fully_shard on every layer and the root) gathers
    parameters in their compute dtype (MixedPrecisionPolicy's bf16 under --mixed) for forward
    and backward: with reshard_after_forward=False (ZeRO-2) every layer stays gathered from
    its forward to its backward; fully sharded (ZeRO-3) the root's own (embeddings, head,
    final norm: the root is never resharded between forward and backward) and two layers,
    the one running and the one prefetched."""
    wbytes = 2 if s.mixed or s.precision != "fp32" else 4
    dense, expert = _params_on_busiest_gpu(spec, s, params)
    per_layer, _ = _layer_params(params)
    outside = sum([r[1] * r[4] for r in params.rows if not r[5]])
    layer = max(per_layer.values(), default=0) / (s.tp * (s.ep if s.ep > 1 else 1))
    if s.zero == 2:
        # (and the all-gather buffer of the layer in flight)
        n = dense + expert + layer
        formula = "(every parameter + the largest layer's all-gather buffer), gathered · " \
                  "compute bytes"
    else:
        n = outside / (s.tp if s.vocab_parallel else 1) + 2 * layer
        formula = "(the root's parameters + 2 · the largest layer), gathered · compute bytes"
    return Breakdown(per_gpu.model, "bytes", per_gpu.items + (Item(
        "gathered_parameters", math.ceil(n * wbytes), formula, f"{math.ceil(n):,} · {wbytes}",
        note="FSDP2: gathered for forward and backward"),))


# the ZeRO stage from which each model state is sharded (Rajbhandari et al. 2020: stage 1
# the optimizer states and the fp32 master weights of a 16-bit model, stage 2 the gradients,
# stage 3 the parameters)
_ZERO_STAGE = {"optimizer_states": 1, "master_weights": 1, "gradients": 2, "weights": 3,
               "lora_weights": 3}


def zero_note(s: Settings) -> str:
    """Which framework's sharding a ZeRO stage follows, said in the output."""
    if s.zero == 0 or s.dp * s.cp == 1:
        return ""
    over = f"over {s.dp * s.cp} data-parallel ranks"
    if s.zero == 3:
        return (f"ZeRO-3 {over} (FSDP full sharding / DeepSpeed stage 3): weights, gradients "
                "and optimizer states sharded; each layer's weights gathered while it runs")
    what = "optimizer states" + (" and gradients" if s.zero == 2 else "")
    if s.mixed and not s.sixteen_bit_model:
        return (f"ZeRO-{s.zero} {over} under torch AMP (fp32 weights under autocast, with "
                f"{'ZeroRedundancyOptimizer' if s.zero == 1 else 'FSDP2 SHARD_GRAD_OP'}): "
                f"{what} sharded; the fp32 weights are the model's parameters and stay whole "
                "on every rank (DeepSpeed's and Megatron-LM's bf16 keep a 16-bit model: "
                "--recipe megatron)")
    if s.mixed:
        return (f"ZeRO-{s.zero} {over} (Megatron-LM's distributed optimizer / DeepSpeed bf16): "
                f"{what} and the fp32 master weights sharded; the 16-bit weights whole")
    return f"ZeRO-{s.zero} {over}: {what} sharded; the weights whole on every rank"


_OFFLOADED = {"optimizer": ("master_weights", "gradients", "optimizer_states"),
              "all": ("master_weights", "gradients", "optimizer_states", "weights")}


def _deepspeed(spec: ModelSpec, s: Settings, per_gpu: Breakdown, params: Breakdown
               ) -> tuple[Breakdown, Breakdown]:
    """DeepSpeed's knobs on the per-GPU states: ZeRO-3 gathers a layer's parameters before
    using it and prefetches the next ones, at most stage3_max_live_parameters elements
    (deepspeed/runtime/zero/config.py: max_live_parameters 1e9, prefetch_bucket_size 5e7);
    ZeRO-Offload keeps the fp32 master weights, gradients and optimizer states in CPU memory
    (offload_optimizer), ZeRO-Infinity the parameters too (offload_param)."""
    moved = _OFFLOADED.get(s.offload, ())
    gpu = [Item(i.name, 0, "in CPU memory (--offload)") if i.name in moved else i
           for i in per_gpu.items]
    host = [i for i in per_gpu.items if i.name in moved]
    if s.zero == 3:
        # (outside the layers, gathered one module at a time: the largest tensor)
        per_layer, outside = _layer_params(params)
        largest = max([*per_layer.values(), outside]) // (s.tp * (s.ep if s.ep > 1 else 1))
        live = min(s.zero3_max_live, largest + s.zero3_prefetch,
                   math.ceil(sum(_params_on_busiest_gpu(spec, s, params))))
        wbytes = 2 if s.mixed or s.precision != "fp32" else 4
        gpu.append(Item("gathered_parameters", live * wbytes,
                        "min(max_live, the largest layer + prefetch bucket) · weight bytes",
                        f"min({s.zero3_max_live:,}, {largest:,} + {s.zero3_prefetch:,}) · "
                        f"{wbytes}", note="ZeRO-3: gathered for use, freed after"))
    return (Breakdown(per_gpu.model, "bytes", tuple(gpu)),
            Breakdown(per_gpu.model, "bytes", tuple(host)))


def _layer_params(params: Breakdown) -> tuple[dict[str, int], int]:
    """Parameters of one layer of each group, and the largest tensor outside the layers."""
    per_layer: dict[str, int] = {}
    outside = 0
    for r in params.rows:
        if r[5]:
            per_layer[r[5]] = per_layer.get(r[5], 0) + r[1]
        else:
            outside = max(outside, r[1])
    return per_layer, outside


def _params_on_busiest_gpu(spec: ModelSpec, s: Settings, params: Breakdown
                           ) -> tuple[float, float]:
    """(dense, expert) parameters on the most loaded GPU before ZeRO sharding: the layers'
    share of one pipeline stage plus the heavier of the first stage's embeddings and the
    last stage's head and final norm, over tp; the experts also over ep."""
    layer_dense = layer_expert = first = last = 0
    for r in params.rows:
        n = r[1] * r[4]
        if r[5]:
            if ".experts." in r[0]:
                layer_expert += n
            else:
                layer_dense += n
        elif r[0].startswith("head.") or "final_norm" in r[0]:
            last += n
        else:
            first += n
    if s.pp > 1 and spec.tie_embeddings and spec.lm_head:
        # Megatron keeps the tied word embeddings on the last stage too, for the output layer
        last += spec.vocab_size * spec.embed_dim
    outside = max(first, last) if s.pp > 1 else first + last
    # (a layers-only plan keeps the embeddings and head whole on every rank)
    return (layer_dense / s.pp / s.tp + outside / (s.tp if s.vocab_parallel else 1),
            layer_expert / (s.pp * s.tp * s.ep))


def prefill_activation_bytes(spec: ModelSpec, s: Settings) -> int:
    """Serving: what one chunk of prefill keeps live at its widest point, an estimate (not
    measured): the chunk's hidden states in and out and the FFN's gate and up outputs (for
    experts, the top-k routed copies) in the activation dtype, and one row of fp32 logits per
    sequence sampled (engines compute logits only where they sample)."""
    tokens = min(s.prefill_chunk, s.batch_size * (s.seq_len or spec.default_seq_len))
    F = (spec.d_ff_expert or spec.d_ff) * spec.top_k if spec.n_experts else spec.d_ff
    return tokens * (2 * F + 3 * spec.d_model) * 2 + s.batch_size * spec.vocab_size * 4


def _fit(spec: ModelSpec, s: Settings, report: MemoryReport, gpu_name: str,
         pattern) -> Fit:  # type: ignore[no-untyped-def]
    """Fits or not, headroom, the largest batch and the longest sequence that fit: by the
    peak of a training step, or for serving by the weights, cache and state
    within the runtime's share of the GPU (--gpu-util, vLLM's gpu_memory_utilization) less
    one prefill chunk's activations. Both searches double then bisect (logarithmic)."""
    import dataclasses

    from transformer_calc.hardware import get_gpu

    gpu = get_gpu(gpu_name)
    cap = gpu.memory_bytes
    budget, prefill = cap, 0
    if s.inference:
        prefill = prefill_activation_bytes(spec, s)
        budget = int(cap * s.gpu_util) - prefill
    used = report.peak

    def batch_fits(b: int) -> bool:
        return _used(spec, s, b, pattern) <= budget

    def length_fits(t: int) -> bool:
        return memory_report(spec, dataclasses.replace(s, seq_len=t), None,
                             pattern).peak <= budget

    longest_allowed = spec.max_context or spec.max_positions or 1 << 24
    reserve = (0, 0) if s.inference or s.device != "cuda" else (
        round(used * ALLOCATOR_CACHE[0]), round(used * ALLOCATOR_CACHE[1]))
    changes = () if used <= budget else _changes(spec, s, budget, pattern)
    return Fit(gpu.name, cap, used <= budget, budget - used, largest(batch_fits, 1 << 30),
               largest(length_fits, longest_allowed), budget, prefill, longest_allowed,
               reserve, changes)


def _candidates(spec: ModelSpec, s: Settings) -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    """Changes a user would try first, each as (flags, Settings fields), in the order of
    what they cost: the same run kept, then less precision or fewer trainable parameters,
    then more GPUs."""
    out: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    if s.inference:
        out += [("--batch-size 1", dict(batch_size=1))] if s.batch_size > 1 else []
        out += [("--kv-dtype fp8", dict(kv_dtype="fp8"))] if s.kv_dtype != "fp8" else []
        if not s.quant:
            out += [(f"--dtype {d}", dict(dtype=d)) for d in ("int8", "int4")
                    if s.dtype not in ("int4", d)]
        out += [(f"--tp {n} --gpus {n * s.gpus // s.tp}", dict(tp=n, gpus=n * s.gpus // s.tp))
                for n in (2, 4, 8) if n > s.tp]
        return out
    out += [("--recompute full", dict(recompute="full"))] if s.recompute != "full" else []
    out += [("--attention sdpa", dict(attention="sdpa"))] if s.attention == "eager" else []
    out += [("--batch-size 1", dict(batch_size=1))] if s.batch_size > 1 else []
    if s.optimizer in ("adamw", "adam"):
        out.append(("--optimizer adamw8bit", dict(optimizer="adamw8bit")))
    if s.precision == "fp32" and not s.mixed and not s.lora_rank:
        out.append(("--mixed --precision bf16", dict(mixed=True, precision="bf16")))
    if not s.lora_rank and not s.freeze:
        out.append(("--lora 16 --precision bf16", dict(lora_rank=16, precision="bf16")))
    elif s.lora_rank and not s.quant:
        out.append(("--qlora", dict(quant="bnb-nf4", precision="bf16")))
    if s.zero < 3 and not s.lora_rank and s.offload == "none":
        out.append((f"--zero 3 --gpus {8 * s.gpus}", dict(zero=3, gpus=8 * s.gpus)))
    return out


def _changes(spec: ModelSpec, s: Settings, budget: int, pattern  # type: ignore[no-untyped-def]
             ) -> tuple[Change, ...]:
    """What each candidate change would use, computed (not guessed): those that fit, in
    order, at most three; else the one that comes closest, and all the cheap ones at once."""
    import dataclasses

    def used(**change: Any) -> int | None:
        try:
            return memory_report(spec, dataclasses.replace(s, **change), None, pattern).peak
        except TcalcError:
            return None

    tried = [(flags, used(**change)) for flags, change in _candidates(spec, s)]
    done = [Change(f, u, u <= budget) for f, u in tried if u is not None]
    fitting = [c for c in done if c.fits][:3]
    if fitting or not done:
        return tuple(fitting)
    together = {k: v for flags, change in _candidates(spec, s)
                if not flags.startswith(("--zero", "--tp", "--lora", "--qlora"))
                for k, v in change.items()}
    both = used(**together) if together else None
    closest = min(done, key=lambda c: c.used)
    if both is not None and both < closest.used:
        flags = " ".join(f for f, _ in _candidates(spec, s)
                         if not f.startswith(("--zero", "--tp", "--lora", "--qlora")))
        return (Change(flags, both, both <= budget), closest)
    return (closest,)


def largest(fits: Callable[[int], bool], ceiling: int) -> int:
    """The largest n in [1, ceiling] with fits(n) (fits is monotone), or 0: doubling, then
    bisection, so O(log n) evaluations."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= ceiling and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, ceiling + 1)  # fits(lo), not fits(hi) (or hi past the ceiling)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _used(spec: ModelSpec, s: Settings, batch: int, pattern) -> int:  # type: ignore[no-untyped-def]
    import dataclasses

    return memory_report(spec, dataclasses.replace(s, batch_size=batch), None,
                         pattern).peak
