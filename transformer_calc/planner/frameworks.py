"""How each training framework runs a step, as data: which attention kernel, how much
elementwise traffic its fusions leave, which communication it hides behind compute, how it
shards data parallelism. The step model (step.py) reads only these fields; a framework is a
record, not a code path.
"""

from __future__ import annotations

from typing import NamedTuple

from transformer_calc.errors import TcalcError


class Framework(NamedTuple):
    name: str
    description: str
    attention: str  # kernels.ATTENTION key: flash2 | cudnn | flash3 | unfused
    # elementwise passes relative to a fused layer (apex / Transformer Engine kernels:
    # fused LayerNorm, bias-GELU, bias-dropout-add): eager torch ~ 1.6, torch.compile ~ 0.6
    elementwise: float
    # bytes per logit element for the cross-entropy, forward and backward (vocab-parallel
    # fused: read the 16-bit logits, one fp32 pass each way; eager: casts and log-softmax)
    ce_bytes: float
    tp_hidden: float  # share of tensor-parallel communication hidden behind GEMMs
    dp_overlap: bool  # the gradient reduction runs behind the last micro-batch's backward
    gather_overlap: bool  # ZeRO-1/2 parameter all-gather behind the next forward
    pp_hidden: bool  # pipeline sends/receives overlapped with compute
    sharding: str  # "megatron" (DDP / distributed optimizer) | "fsdp" (per-layer gathers)
    grad_bytes: int  # bytes per gradient element reduced across data parallel
    zero_stages: tuple[int, ...]  # the ZeRO stages the search may pick
    schedules: tuple[str, ...]  # pipeline schedules it ships: 1f1b, interleaved
    recompute: tuple[str, ...]  # recomputation modes: none, selective, full
    selective: str  # what selective recomputation redoes: "attention" (Megatron-LM's core
    # attention) or "op" (torchtitan's per-op policy: every second matmul and the elementwise)
    source: str
    parallel: tuple[str, ...] = ("tp", "pp", "cp", "ep")  # the model-parallel dimensions


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("megatron", "Megatron-LM / Megatron-Core with Transformer Engine (NeMo, "
              "Megatron-Bridge): cuDNN fused attention, TP communication overlap, "
              "distributed optimizer with overlapped gradient reduce and parameter gather",
              "cudnn", 1.0, 12, 0.85, True, True, True, "megatron", 2, (0, 1), ("1f1b",
              "interleaved"), ("none", "selective", "full"), "attention",
              "Megatron-LM README (--overlap-grad-reduce, --overlap-param-gather, "
              "--tp-comm-overlap); Transformer Engine userbuffers"),
    Framework("megatron-2022", "Megatron-LM as Korthikanti et al. 2022 ran it: unfused "
              "attention (batched GEMMs and a fused softmax), apex fusions, TP all-reduce "
              "exposed in forward and overlapped with the weight-gradient GEMM in backward, no "
              "data-parallel overlap", "unfused", 1.0, 12, 0.0, False, False, False,
              "megatron", 4, (0,), ("1f1b", "interleaved"), ("none", "selective", "full"),
              "attention", "Korthikanti et al. 2022, Sec. 6 and Table 4's note"),
    Framework("torchtitan", "torchtitan: FSDP2 (+ HSDP), tensor parallel over DTensor, "
              "torch.compile, SDPA flash attention, pipeline schedules from torch.distributed",
              "flash2", 0.6, 8, 0.0, True, True, False, "fsdp", 4, (3,),
              ("1f1b", "interleaved"), ("none", "selective", "full"), "op",
              "torchtitan docs and benchmarks/ (2024-12)", ("tp", "pp", "cp")),
    Framework("fsdp", "PyTorch FSDP (FULL_SHARD) with eager modules and FlashAttention-2 "
              "(llm-foundry, IBM's fms-fsdp)", "flash2", 1.6, 24, 0.0, True, True, False,
              "fsdp", 4, (3,), ("1f1b",), ("none", "selective", "full"), "attention",
              "PyTorch FSDP docs; llm-foundry; IBM/PyTorch FSDP blog", ()),
)}


def framework(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise TcalcError(f"--framework: expected one of {', '.join(FRAMEWORKS)}, got {name!r}")
    return FRAMEWORKS[name]
