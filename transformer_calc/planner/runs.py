"""Published training runs as planner cases: each row of a runs file (the format of
tests/data/published_runs_dev.json) read into a workload, a cluster, a framework and the
layout knobs the source prints; knobs it leaves out are searched (the fastest that fits the
memory, as the source's own tuning would pick). The measured throughput becomes a step time
and a TFLOP/s per GPU in the source's own FLOP convention.

A row that does not state enough (its layout, its GEMM precision, an architecture the
planner models, a GPU whose peak is published) is kept with the reason it is left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from transformer_calc.errors import TcalcError
from transformer_calc.planner.frameworks import FRAMEWORKS, Framework
from transformer_calc.planner.hardware import CLUSTERS, Cluster
from transformer_calc.spec import ModelSpec

# A source is a publication: its source groups share authors, code and conventions, so a
# fold of the calibration leaves all of them out together.
SOURCES = {
    "korthikanti2022_table5": "korthikanti2022", "korthikanti2022_text": "korthikanti2022",
    "korthikanti2022_table4_layer": "korthikanti2022",
    "megatron_readme_h100_weak": "megatron_readme", "megatron_readme_h100_strong":
        "megatron_readme",
    "torchtitan_2024_12": "torchtitan_2024_12",
    "torchtitan_asynctp_2025_06": "torchtitan_asynctp_2025_06",
    "torchtitan_trainy_h200": "torchtitan_trainy_h200", "ibm_fsdp_blog": "ibm_fsdp_blog",
    "nemo_24_07_perf_summary": "nemo_24_07", "megatron_bridge_perf_summary": "megatron_bridge",
    "mosaic_mpt_benchmarks": "mosaic_mpt", "maxtext_tpu": "maxtext_tpu",
}

# Which framework each source ran, and on which cluster (by the row's GPU)
_FRAMEWORK = {"korthikanti2022": "megatron-2022", "megatron_readme": "megatron",
              "nemo_24_07": "megatron", "megatron_bridge": "megatron",
              "torchtitan_2024_12": "torchtitan", "torchtitan_asynctp_2025_06": "torchtitan",
              "torchtitan_trainy_h200": "torchtitan", "ibm_fsdp_blog": "fsdp",
              "mosaic_mpt": "fsdp"}
_CLUSTER = {"A100-80GB": "dgx-a100", "A100-40GB": "dgx-a100-40gb",
            "H100-80GB-SXM": "dgx-h100", "H100-96GB-HBM2e(500W)": "grand-teton-h100",
            "H200-141GB": "hgx-h200"}
_IBM_CLUSTER = {"A100-80GB": "a100-shared-400g", "H100-80GB-SXM": "h100-shared-400g"}
# models read from tcalc's presets (the HF config the row's arch_ref names)
_PRESETS = {"Llama-3.1-8B": "llama-3.1-8b", "Llama-3.1-70B": "llama-3.1-70b",
            "Llama-3.1-405B": "llama-3.1-405b", "Llama-2-7b-hf": "llama-2-7b",
            "Qwen3-30B-A3B": "qwen3-30b-a3b", "Qwen3-235B-A22B": "qwen3-235b-a22b",
            "gpt-oss-120b": "gpt-oss-120b"}


class Case(NamedTuple):
    """One published run, ready to predict."""

    id: str
    source: str  # the publication (a calibration fold)
    group: str  # the source group
    tier: str
    reason: str  # why the row is left out ("" when it is used)
    spec: ModelSpec | None = None
    cluster: Cluster | None = None
    framework: Framework | None = None
    precision: str = "bf16"
    async_tp: bool = False
    gpus: int = 0
    seq_len: int = 0
    global_batch: int = 0
    fixed: dict[str, Any] = {}  # noqa: RUF012  (the layout knobs the source prints)
    measured_s: float = 0.0  # the measured step time, seconds
    measured_tflops: float = 0.0  # TFLOP/s per GPU in the source's convention (0: none)
    convention: str = ""
    conv_flops: float = 0.0  # FLOPs of one step in the source's convention (0: none)
    metric: str = ""  # what the source measured: step time, tokens/s, TFLOP/s, MFU, layer


def load_runs(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TcalcError(f"{path}: cannot read the published runs: {e}") from None
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise TcalcError(f"{path}: expected an object with key 'runs' (a list of runs)")
    return runs


def _ref(row: dict[str, Any]) -> str:
    ref = row.get("arch_ref") or ""
    for name in _PRESETS:
        if f"/{name} " in ref or ref.endswith(f"/{name}"):
            return _PRESETS[name]
    return ""


def model_of(row: dict[str, Any]) -> ModelSpec:
    """The row's architecture: a preset for the HF configs tcalc ships, else built from the
    row's own fields (GPT: LayerNorm and GELU, FFN 4·h where unstated, learned positions)."""
    preset = _ref(row)
    if preset:
        from transformer_calc.presets import load_model

        return load_model(preset)
    a = row.get("arch") or {}
    if a.get("experts"):
        raise TcalcError("a mixture of experts without a preset")
    h, L, H = a["hidden"], a["layers"], a["heads"]
    act = a.get("ffn_act") or "gelu"
    gated = bool(a.get("gated")) or act == "swiglu"
    rope = a.get("pos") == "rope"
    mpt = row["source_group"] == "mosaic_mpt_benchmarks"
    from transformer_calc.presets import spec_from_mapping

    return spec_from_mapping({
        "name": row["model"], "vocab_size": a["vocab"], "d_model": h, "n_layers": L,
        "n_heads": H, "n_kv_heads": a.get("kv_heads") or H, "d_ff": a.get("ffn") or 4 * h,
        "max_positions": max(row.get("seq_len") or 2048, a.get("seq_len") or 0),
        "position": "rope" if rope else "learned", "ffn": "gated" if gated else "plain",
        "activation": {"swiglu": "silu", "squared-relu": "relu2"}.get(act, "gelu"),
        "norm": "rmsnorm" if rope else ("layernorm_nobias" if mpt else "layernorm"),
        "bias": not (rope or mpt), "tie_embeddings": bool(a.get("tied", not rope)),
        "dropout": 0.1 if row["source_group"].startswith("korthikanti") else 0.0})


def _precision(text: str) -> str:
    t = (text or "").lower()
    if "not printed" in t or not t:
        return ""
    if "rowwise" in t:
        return "fp8-rowwise"
    if "fp8" in t or "float8" in t:
        return "fp8"
    return "bf16"


def _recompute(text: str | None) -> str:
    t = (text or "").lower()
    if t.startswith("full"):
        return "full"
    if t.startswith("selective (every"):
        return "?blocks"  # a share of the blocks, not printed
    if t.startswith("selective"):
        return "selective"
    if t == "none":
        return "none"
    return ""  # per recipe / not stated: searched


def _zero(text: str | None, framework: str) -> int | None:
    t = (text or "").lower()
    if "fsdp" in t or "full_shard" in t or "zero-3" in t:
        return 2 if "shard_grad_op" in t else 3
    if "distributed optimizer" in t:
        return 1
    if t == "none":
        return 0
    return 1 if framework == "megatron" else None


def case_of(row: dict[str, Any]) -> Case:
    """A row as a case, or the reason it cannot be one."""
    group = row["source_group"]
    source = SOURCES.get(group, group)
    base = Case(row["id"], source, group, row.get("tier", ""), "")
    if source == "maxtext_tpu":
        return base._replace(reason="TPU: its interconnect is not modelled")
    gpu = row.get("gpu") or ""
    clusters = _IBM_CLUSTER if source == "ibm_fsdp_blog" else _CLUSTER
    if gpu not in clusters:
        return base._replace(reason=f"{gpu}: peak not pinned by the source or not modelled")
    if not row.get("tp") or row.get("pp") is None:
        return base._replace(reason="the layout is not printed")
    precision = _precision(row.get("precision") or "")
    if not precision:
        return base._replace(reason="the GEMM precision is not printed")
    recompute = _recompute(row.get("recompute"))
    if recompute == "?blocks":
        return base._replace(reason="recomputes a share of the blocks the source does not "
                                    "print")
    try:
        spec = model_of(row)
    except (TcalcError, KeyError, TypeError) as e:
        return base._replace(reason=f"architecture not stated or not modelled ({e})")
    from transformer_calc.planner.layer import layers_of

    try:
        layers_of(spec)
    except TcalcError as e:
        return base._replace(reason=str(e))
    fw = FRAMEWORKS[_FRAMEWORK[source]]
    text = (row.get("precision") or "").lower()
    if fw.name == "torchtitan" and "compile" not in text:
        fw = fw._replace(elementwise=1.6, ce_bytes=24)  # eager: no fused kernels
    if source == "mosaic_mpt":
        # llm-foundry's MPT: FlashAttention in Triton (the yamls' attn_impl: triton, and
        # submit_benchmarks.py's default), flash-attn's fused cross-entropy (modeling_mpt.py:
        # loss_fn defaults to fused_crossentropy), 16-bit LayerNorms (submit_benchmarks.py:
        # low_precision_layernorm), no biases or dropout: a fused layer's passes. IBM's
        # runs use SDPA's FlashAttention-2 under eager modules.
        fw = fw._replace(attention="triton", elementwise=1.0, ce_bytes=12)
    n = row["num_gpus"]
    seq = row["seq_len"]
    tp, pp, cp = row["tp"], row["pp"], row.get("cp") or 1
    dp = row.get("dp") or n // (tp * pp * cp)
    gbs = row.get("global_batch") or (row["micro_batch"] * dp if row.get("micro_batch")
                                      else 0)
    fixed: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "dp": dp,
                             "ep": row.get("ep") or 1}
    if row.get("vp") is not None:
        fixed["vp"] = max(1, row["vp"])
    elif source == "korthikanti2022":
        fixed["vp"] = 1  # the paper: 3 virtual stages for 175B and 530B, none otherwise
    if pp == 1:
        fixed["vp"] = 1
    local = gbs // dp if dp else 0
    if row.get("micro_batch") and (source != "torchtitan_2024_12" or pp == 1):
        fixed["mb"] = int(row["micro_batch"])
    if fw.name == "torchtitan":
        # torchtitan's local batch is one micro-batch; with pipeline parallelism its
        # default splits it into as many micro-batches as stages
        # (pipeline_parallel_microbatches: "the default value will be the number of
        # pipeline stages")
        fixed["mb"] = local // pp if pp > 1 and local % pp == 0 else local
    if recompute:
        fixed["recompute"] = recompute
    if row.get("sp") is not None:
        fixed["sp"] = bool(row["sp"]) and tp > 1
    zero = _zero(row.get("zero"), fw.name)
    if zero is not None:
        fixed["zero"] = zero
    if "interleaved" in row["id"].lower():
        fixed.setdefault("vp", 2)
    elif fw.name == "torchtitan" and pp > 1:
        fixed["vp"] = 1
    measured = _measured(row, spec, n, gbs * seq)
    if measured is None:
        return base._replace(reason="no throughput the planner predicts")
    t_meas, tflops, conv, flops, metric = measured
    return base._replace(spec=spec, cluster=CLUSTERS[clusters[gpu]], framework=fw,
                         precision=precision, async_tp="asynctp" in text.replace(" ", ""),
                         gpus=n, seq_len=seq, global_batch=gbs, fixed=fixed,
                         measured_s=t_meas, measured_tflops=tflops, convention=conv,
                         conv_flops=flops, metric=metric)


def _measured(row: dict[str, Any], spec: ModelSpec, n: int, tokens: int
              ) -> tuple[float, float, str, float, str] | None:
    """(step seconds, TFLOP/s per GPU in the source's convention, the convention, FLOPs of
    a step in it, what was measured)."""
    rep = row.get("reported") or {}
    conv = (row.get("flops_counting") or "").split(" ")[0]
    flops = convention_flops(conv, spec, row, tokens)
    if "layer_fwd_bwd_ms" in rep:
        return rep["layer_fwd_bwd_ms"] / 1e3, 0.0, "time only", 0.0, "layer"
    if rep.get("step_time_s"):
        t, metric = rep["step_time_s"], "step time"
    elif rep.get("tokens_per_s_per_gpu") and tokens:
        t, metric = tokens / (rep["tokens_per_s_per_gpu"] * n), "tokens/s"
    elif rep.get("tflops_per_gpu") and flops:
        t, metric = flops / (rep["tflops_per_gpu"] * 1e12 * n), "TFLOP/s"
    elif rep.get("mfu") and flops and row.get("gpu_peak_tflops"):
        t, metric = flops / (rep["mfu"] * row["gpu_peak_tflops"] * 1e12 * n), "MFU"
    else:
        return None
    printed = rep.get("tflops_per_gpu") or rep.get("model_tflops_per_gpu")
    tflops = printed or (flops / (t * n) / 1e12 if flops else 0.0)
    return t, float(tflops), conv, flops, metric


def convention_flops(conv: str, spec: ModelSpec, row: dict[str, Any], tokens: int) -> float:
    """FLOPs of one step as the source counts them (0 where the planner does not implement
    the source's formula; tokens/s then carries the comparison)."""
    B = (row.get("global_batch") or 0)
    s = row.get("seq_len") or 0
    if not B or not s or spec.n_experts:
        return 0.0
    L, h, V = spec.n_layers, spec.d_model, spec.vocab_size
    if conv == "korthikanti_eq7_eq8":
        # Korthikanti et al. 2022, Eq. 7: model FLOPs 72·B·s·L·h²·(1 + s/6h + V/12hL)
        return 72.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
    if conv in ("megatron_code_2024", "megatron_bridge_flop_utils", "nemo_model_tflops"):
        # Megatron-LM training.py num_floating_point_operations: 3 passes × 2 FLOP per FMA
        # over every GEMM (GQA, gated FFN × 3/2); current code halves causal attention
        H, g, dh = spec.n_heads, spec.kv_heads, spec.head_dim
        q = H * dh / h
        attn_s = s / h / (2 if conv == "megatron_bridge_flop_utils" else 1)
        gated = 1.5 if spec.ffn == "gated" else 1.0
        return 12.0 * B * s * L * h * h * ((1 + g / H + attn_s) * q + spec.d_ff / h * gated
                                           + V / (2 * L * h))
    if conv == "mosaic_mfu":
        # llm-foundry: (6·N + 12·L·d·s) per token, N its own parameter count
        N = (row.get("arch") or {}).get("num_params_exact") or 0
        return (6.0 * N + 12.0 * L * h * s) * tokens if N else 0.0
    if conv == "palm_mfu":
        # PaLM App. B: 6·N + 12·L·H·Q·T per token
        from transformer_calc.params import count_params

        N = count_params(spec).total
        return (6.0 * N + 12.0 * L * spec.n_heads * spec.head_dim * s) * tokens
    return 0.0


def cases(path: Path) -> list[Case]:
    return [case_of(r) for r in load_runs(path)]
