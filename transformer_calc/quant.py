"""Quantised weights as the real formats store them: bytes per tensor, and which
tensors each format leaves in 16-bit.

A format quantises the linear layers inside the model's layers (read from the parameter
breakdown, as lora.py reads them); embeddings, the LM head, norms, biases, routers and
convolutions stay in the unquantised dtype (bf16), each format's default:

- gptq (AutoGPTQ / GPTQModel QuantLinear): qweight int32 (in · out · bits / 8 bytes), qzeros
  int32 (ceil(in / g) · out · bits / 8), scales fp16 (ceil(in / g) · out · 2), g_idx int32
  (in · 4), group g = --group-size (128). gptq-int8: bits 8; gptq-int3, gptq-int2: bits 3
  and 2 (QuantLinear packs 32 / bits... rows of bits into each int32 row: in · bits / 32
  int32 rows, the same in · out · bits / 8 bytes).
- awq (AutoAWQ WQLinear_GEMM): as gptq without g_idx.
- bnb-nf4, bnb-fp4 (bitsandbytes Linear4bit): 4-bit data (ceil(n / 2) bytes) and an absmax
  per block of 64: with QLoRA's double quantisation (bnb_4bit_use_double_quant, tcalc's
  default) quantised to uint8 (ceil(n / 64)), its own fp32 absmax per 256 of those and an fp32
  offset; without (BitsAndBytesConfig's default), fp32 (4 · ceil(n / 64)); and the 16-value
  code (64 bytes) per tensor.
- bnb-int8 (LLM.int8, Linear8bitLt): int8 weights and one fp32 scale per output row.
- fp8 (e4m3, 1 byte per weight) with DeepSeek-V3's 128 × 128 blocks of fp32 scales
  (weight_scale_inv); fp8-channel one bf16 scale per output channel (compressed-tensors
  FP8_DYNAMIC); fp8-tensor one fp32 weight scale and one fp32 input scale per tensor.
- mxfp4 (OCP microscaling, gpt-oss): 4-bit e2m1 pairs in a byte and one e8m0 scale byte per
  32 weights; gpt-oss quantises only the experts (its quantization_config keeps attention,
  router, embeddings and head in bf16), so the experts alone when a model has them.
- nvfp4 (NVIDIA ModelOpt): 4-bit e2m1 pairs, one fp8 scale per 16 weights, one fp32 global
  weight scale and one fp32 input scale per tensor.
- gguf-TYPE (llama.cpp): block layouts from ggml's type traits, and the recipe's per-tensor
  choices from llama.cpp's llama_tensor_get_type (src/llama-quant.cpp): the output tensor
  (and a tied token embedding) Q6_K, attn_v and ffn_down in Q6_K for the layers
  use_more_bits picks in Q4_K_M / Q5_K_M, 8-expert models' attn_v / attn_k in Q8_0, norms
  and the router in F32; a tensor whose rows are not a multiple of its block falls back
  (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from transformer_calc.breakdown import Breakdown
from transformer_calc.errors import TcalcError
from transformer_calc.spec import ModelSpec

# ggml type traits (ggml/src/ggml.c type_traits): (elements per block, bytes per block)
GGML_TYPES = {
    "f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18),
    "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24), "q2_k": (256, 84),
    "q3_k": (256, 110), "q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210),
}
# llama.cpp ftype -> the default type of its 2-D weights
GGUF_RECIPES = {
    "q8_0": "q8_0", "q6_k": "q6_k", "q5_k_m": "q5_k", "q5_k_s": "q5_k", "q5_0": "q5_0",
    "q5_1": "q5_1", "q4_k_m": "q4_k", "q4_k_s": "q4_k", "q4_0": "q4_0", "q4_1": "q4_1",
    "f16": "f16", "bf16": "bf16",
}
_FALLBACK = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0", "q2_k": "q4_0", "q3_k": "q4_0"}

FORMATS = ("gptq", "gptq-int8", "gptq-int3", "gptq-int2", "awq", "bnb-nf4", "bnb-fp4",
           "bnb-int8", "fp8",
           "fp8-channel", "fp8-tensor", "mxfp4", "nvfp4",
           *(f"gguf-{r}" for r in GGUF_RECIPES))
UNQUANTISED = 2  # bytes: what every format keeps in bf16 (fp16 for GPTQ/AWQ, same size)
GPTQ_BITS = {"gptq": 4, "gptq-int8": 8, "gptq-int3": 3, "gptq-int2": 2}
PER_CHANNEL = 2**40  # a group size larger than any row: one group per output channel


def from_quantization_config(q: object, where: str) -> dict[str, object]:
    """config.json's quantization_config -> the spec's weight_format and weight_group_size,
    as transformers' quantizers read it: gptq bits 2, 3, 4 or 8 (GPTQConfig accepts those
    integers only), awq w_bit / bits 4 (AutoAWQ's GEMM kernels), bitsandbytes 4-bit NF4 / FP4
    or 8-bit, fp8 (with DeepSeek-V3's weight_block_size, or per tensor), mxfp4. A value
    transformers would refuse is a SpecError naming its key; a method tcalc does not model
    (hqq, compressed-tensors, quanto, ...) is said in the spec's note, with the weights left
    as the run's dtype, never silently."""
    from transformer_calc.errors import SpecError

    if q is None:
        return {}
    if not isinstance(q, dict):
        raise SpecError("quantization_config", "a JSON object", q, source=where)
    method = q.get("quant_method")
    group = q.get("group_size", 128)
    if method in ("gptq", "awq"):
        if type(group) is not int or not (group > 0 or group == -1):
            raise SpecError("quantization_config.group_size", "a positive integer, or -1 "
                            "(one group per output channel)", group, source=where)
        key = "bits" if method == "gptq" or "bits" in q else "w_bit"
        bits = q.get(key, 4)
        allowed = (2, 3, 4, 8) if method == "gptq" else (4,)
        if type(bits) is not int or bits not in allowed:
            raise SpecError(f"quantization_config.{key}",
                            f"one of {', '.join(map(str, allowed))} (an integer)", bits,
                            source=where)
        fmt = "awq" if method == "awq" else {4: "gptq", 8: "gptq-int8", 3: "gptq-int3",
                                             2: "gptq-int2"}[bits]
        return {"weight_format": fmt,
                "weight_group_size": PER_CHANNEL if group == -1 else group}
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            kind = q.get("bnb_4bit_quant_type", "fp4")
            if kind not in ("nf4", "fp4"):
                raise SpecError("quantization_config.bnb_4bit_quant_type", "nf4 or fp4", kind,
                                source=where)
            return {"weight_format": f"bnb-{kind}"}
        if q.get("load_in_8bit"):
            return {"weight_format": "bnb-int8"}
        return {}
    if method == "fp8":
        return {"weight_format": "fp8" if q.get("weight_block_size") else "fp8-tensor"}
    if method == "mxfp4":
        return {"weight_format": "mxfp4"}
    from transformer_calc.errors import printable

    shown = printable(str(method), one_line=True)[:40]
    return {"note": f"quantization_config: quant_method {shown!r} is not a format tcalc "
                    "models; weights counted in the run's dtype (give --quant for one it "
                    "models)"}


class Tensor(NamedTuple):
    """One weight tensor of the breakdown, per layer: its name, shape (out, in) or
    (experts, out, in), repeat, and what it is to a quantiser."""

    name: str
    count: int  # type: ignore[assignment]  # shadows tuple.count; the domain name wins
    repeat: int
    shape: tuple[int, ...]
    kind: str  # linear | experts | embed | head | other (norms, biases, routers, ...)
    stack: str  # the layer group ("" outside the layers)


def tensors(params: Breakdown) -> list[Tensor]:
    from transformer_calc.lora import _role

    out = []
    for row in params.rows:
        name, count, repeat, stack, shape = row[0], row[1], row[4], row[5], row[8]
        if not count:
            continue
        if name.startswith(("embed.tokens", "encoder.embed.tokens", "decoder.embed.tokens")):
            kind = "embed"
        elif name.startswith("head.lm") or name == "head.mlm.decoder.weight":
            kind = "head"
        elif stack and len(shape) >= 2:
            rest = name[len(stack) + 1:]
            rest = rest.split(".", 1)[1] if rest.startswith(("encoder.", "decoder.")) else rest
            role = _role(rest)
            kind = ("experts" if role == "experts" else "other" if role in (None, "router")
                    else "linear")
        else:
            kind = "other"
        out.append(Tensor(name, count, repeat, shape, kind, stack))
    return out


def weight_format_bytes(spec: ModelSpec, params: Breakdown, fmt: str,
                        group_size: int = 128, double_quant: bool = True,
                        head: bool = False) -> Breakdown:
    """Bytes of every tensor of the model stored in ``fmt``: one item per kind of tensor
    (quantised data, scales, zeros, indices; what stays 16-bit). ``head``: the LM head
    quantised too (Lightning's BitsandbytesPrecision replaces every nn.Linear)."""
    if fmt not in FORMATS:
        raise TcalcError(f"--quant: unknown format '{fmt}' (known: {', '.join(FORMATS)})")
    if group_size < 1:
        raise TcalcError(f"--group-size: expected an integer >= 1, got {group_size}")
    ts = tensors(params)
    if fmt.startswith("gguf-"):
        return _gguf(spec, ts, fmt[5:])
    has_experts = any(t.kind == "experts" for t in ts)
    sums: dict[str, list] = {}  # type: ignore[type-arg]  # item -> [bytes, formula]

    def add(item: str, n: int, formula: str) -> None:
        sums.setdefault(item, [0, formula])[0] += n

    for t in ts:
        quantised = (t.kind in ("linear", "experts") or (head and t.kind == "head"
                                                         and len(t.shape) == 2)) and not (
            fmt == "mxfp4" and has_experts and t.kind != "experts")
        if not quantised:
            add("unquantised", t.count * t.repeat * UNQUANTISED,
                "embeddings, head, norms, biases, routers · 2 (bf16)")
            continue
        X = t.shape[0] if t.kind == "experts" else 1
        out, inp = t.shape[-2], t.shape[-1]
        per = X * t.repeat
        for item, b, formula in _linear(fmt, out, inp, out * inp, group_size, double_quant):
            add(item, b * per, formula)
    return Breakdown(spec.name, "bytes", tuple((name, b, formula, "", 1, "", "", None, ())
                                              for name, (b, formula) in sums.items()))


def _linear(fmt: str, out: int, inp: int, n: int, g: int,
            double_quant: bool = True) -> list[tuple[str, int, str]]:
    """(item, bytes, formula) of one quantised matrix of ``out`` rows and ``inp`` columns."""
    groups = math.ceil(inp / g) * out
    if fmt in GPTQ_BITS or fmt == "awq":
        bits = GPTQ_BITS.get(fmt, 4)
        parts = [("qweight", math.ceil(n * bits / 8), f"in · out · {bits} / 8 (int32-packed)"),
                 ("qzeros", math.ceil(groups * bits / 8),
                  f"ceil(in / {g}) · out · {bits} / 8 (int32-packed)"),
                 ("scales", groups * 2, f"ceil(in / {g}) · out · 2 (fp16)")]
        if fmt != "awq":
            parts.append(("g_idx", inp * 4, "in · 4 (int32 group index)"))
        return parts
    if fmt in ("bnb-nf4", "bnb-fp4"):
        blocks = math.ceil(n / 64)
        if not double_quant:
            return [("data", math.ceil(n / 2), "n / 2 (4-bit pairs)"),
                    ("absmax", 4 * blocks, "4 · n / 64 (fp32)"),
                    ("quant_map", 64, "16 · 4 per tensor (the 4-bit code)")]
        return [("data", math.ceil(n / 2), "n / 2 (4-bit pairs)"),
                ("absmax", blocks, "n / 64 (uint8: double-quantised)"),
                ("nested_absmax", 4 * math.ceil(blocks / 256) + 4,
                 "4 · n / 16384 + 4 (fp32, and the offset)"),
                ("quant_map", 64, "16 · 4 per tensor (the 4-bit code)")]
    if fmt == "bnb-int8":
        return [("data", n, "n (int8)"), ("scales", out * 4, "out · 4 (fp32 per row)")]
    if fmt == "fp8":
        return [("data", n, "n (e4m3)"), ("scales", math.ceil(out / 128) *
                                          math.ceil(inp / 128) * 4,
                                          "ceil(out / 128) · ceil(in / 128) · 4 (fp32)")]
    if fmt == "fp8-channel":
        return [("data", n, "n (e4m3)"), ("scales", out * 2, "out · 2 (bf16)")]
    if fmt == "fp8-tensor":
        return [("data", n, "n (e4m3)"), ("scales", 8, "4 + 4 per tensor (fp32 weight and "
                                                       "input scales)")]
    if fmt == "mxfp4":
        return [("data", math.ceil(n / 2), "n / 2 (e2m1 pairs)"),
                ("scales", math.ceil(n / 32), "n / 32 (e8m0 per 32)")]
    # nvfp4
    return [("data", math.ceil(n / 2), "n / 2 (e2m1 pairs)"),
            ("scales", math.ceil(n / 16), "n / 16 (fp8 per 16)"),
            ("global_scales", 8, "4 + 4 per tensor (fp32 weight and input scales)")]


def _gguf(spec: ModelSpec, ts: list[Tensor], recipe: str) -> Breakdown:
    base = GGUF_RECIPES[recipe]
    experts = spec.n_experts
    # (only the IQ, Q2 and Q3 recipes look at the GQA ratio: they are not offered)
    n_attn_v = sum(t.repeat for t in ts if t.name.endswith("attn.v.weight"))
    n_ffn_down = sum(t.repeat for t in ts if t.name.endswith(("ffn.out.weight",
                                                              "experts.out.weight",
                                                              "shared.out.weight")))
    tied = spec.tie_embeddings
    sums: dict[str, list] = {}  # type: ignore[type-arg]

    def add(gtype: str, elements: int) -> None:
        block, size = GGML_TYPES[gtype]
        s = sums.setdefault(gtype, [0, f"elements / {block} · {size}"])
        s[0] += elements // block * size

    def more_bits(i: int, n: int) -> bool:
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    def fits(gtype: str, cols: int) -> str:
        while cols % GGML_TYPES[gtype][0]:
            gtype = _FALLBACK.get(gtype, "f16")
        return gtype

    for t in ts:
        cols = t.shape[-1] if t.shape else t.count
        n = t.count
        if t.kind == "other" or len(t.shape) < 2:
            # norms, biases, routers (ffn_gate_inp), position tables: F32 in the GGUF
            add("f32", n * t.repeat)
            continue
        if base in ("f16", "bf16"):
            add(base, n * t.repeat)
            continue
        if t.kind == "head" or (t.kind == "embed" and tied):
            gtype = "q8_0" if base == "q8_0" or cols % GGML_TYPES[base][0] else "q6_k"
            add(fits(gtype, cols), n * t.repeat)
            continue
        if t.kind == "embed":
            add(fits(base, cols), n * t.repeat)
            continue
        name = t.name
        is_v = name.endswith("attn.v.weight")
        is_k = name.endswith("attn.k.weight")
        is_down = name.endswith(("ffn.out.weight", "experts.out.weight", "shared.out.weight"))
        is_o = name.endswith("attn.o.weight")
        # layer-dependent choices: one count per layer of the group, in layer order (the
        # groups' own order: exact for one homogeneous stack, the usual case)
        for i in range(t.repeat):
            gtype = base
            if is_v:
                idx = _index(ts, t, i, ("attn.v.weight",))
                if recipe in ("q4_k_m", "q5_k_m") and more_bits(idx, n_attn_v):
                    gtype = "q6_k"
                elif recipe == "q4_k_s" and idx < 4:
                    gtype = "q5_k"
                if experts == 8:
                    gtype = "q8_0"
            elif is_k and experts == 8:
                gtype = "q8_0"
            elif is_down:
                idx = _index(ts, t, i, ("ffn.out.weight", "experts.out.weight",
                                        "shared.out.weight"))
                layer, n_layer = (idx, n_ffn_down) if experts <= 1 else (
                    _layer(spec, t, i), n_ffn_down)
                if recipe in ("q4_k_m", "q5_k_m") and more_bits(layer, n_layer):
                    gtype = "q6_k"
                elif recipe == "q4_k_s" and layer < n_layer // 8:
                    gtype = "q5_k"
            elif is_o and experts == 8 and recipe in ("q4_k_m", "q4_k_s"):
                gtype = "q5_k"
            add(fits(gtype, cols), n)
    rows = tuple((f"gguf.{g}", b, formula, "", 1, "", "", None, ()) for g, (b, formula)
                 in sums.items())
    return Breakdown(spec.name, "bytes", rows)


def _index(ts: list[Tensor], t: Tensor, i: int, suffixes: tuple[str, ...]) -> int:
    """llama.cpp's running counter for the i-th layer of tensor t: tensors of the category
    counted in layer order (the plan's groups in order, taken as contiguous runs of layers:
    exact for one homogeneous stack and for dense-then-MoE models)."""
    before = 0
    for u in ts:
        if u is t:
            return before + i
        if u.name.endswith(suffixes):
            before += u.repeat
    return before + i


def _layer(spec: ModelSpec, t: Tensor, i: int) -> int:
    """The layer number of the i-th layer of tensor t's group (groups as contiguous runs)."""
    from transformer_calc.plan import plan_of

    first = 0
    for st in plan_of(spec).stacks:
        for g in st.groups:
            if g.name == t.stack:
                return first + i
            first += g.count
    return i
