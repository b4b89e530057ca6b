"""Accelerator presets: memory, dense peak FLOP/s per dtype, memory bandwidth. Pure data.

Peak numbers are the vendor datasheets' dense figures (no 2:4 sparsity), in FLOP/s; memory is
the nominal capacity (the CUDA context and allocator reserve part of it: torch reports about
79.1 GiB on an "80GB" H100). Sources: NVIDIA V100, A100, H100, H200, L4, A10 and T4
datasheets; the GeForce RTX 3090 (Ampere GA102) and RTX 4090 (Ada AD102) whitepapers,
fp16/bf16 tensor with fp32 accumulate; Google Cloud TPU v4 documentation.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from transformer_calc.errors import TcalcError

GiB = 2**30
T = 1e12

# Bytes per element of each storage dtype. int4 packs two values per byte.
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1,
                                 "int8": 1, "int4": 0.5}


@dataclass(frozen=True)
class GPU:
    name: str
    memory_bytes: int
    bandwidth: float  # bytes/s
    peak_flops: dict[str, float] = field(default_factory=dict)  # dtype -> dense FLOP/s
    source: str = ""

    def peak(self, dtype: str) -> float:
        """Dense peak for a compute dtype; fp16 stands in for bf16 on chips without bf16."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        if dtype == "bf16" and "fp16" in self.peak_flops:
            return self.peak_flops["fp16"]
        if dtype in ("int4", "fp8", "int8") and "fp16" in self.peak_flops:
            return self.peak_flops["fp16"]  # weight-only quantisation computes in 16-bit
        raise TcalcError(f"{self.name} has no {dtype} peak; known: "
                         + ", ".join(self.peak_flops))


def _gpu(name: str, mem_gib: float, bw_gbs: float, source: str, **peaks_tflops: float) -> GPU:
    return GPU(name, int(mem_gib * GiB), bw_gbs * 1e9,
               {k: v * T for k, v in peaks_tflops.items()}, source)


GPUS: dict[str, GPU] = {g.name: g for g in (
    _gpu("V100-16GB", 16, 900, "NVIDIA V100 SXM2 datasheet", fp32=15.7, fp16=125),
    _gpu("V100-32GB", 32, 900, "NVIDIA V100 SXM2 datasheet", fp32=15.7, fp16=125),
    _gpu("T4", 16, 320, "NVIDIA T4 datasheet", fp32=8.1, fp16=65, int8=130),
    _gpu("A10", 24, 600, "NVIDIA A10 datasheet", fp32=31.2, tf32=62.5, bf16=125, fp16=125,
         int8=250),
    _gpu("A100-40GB", 40, 1555, "NVIDIA A100 SXM datasheet", fp32=19.5, tf32=156, bf16=312,
         fp16=312, int8=624),
    _gpu("A100-80GB", 80, 2039, "NVIDIA A100 SXM datasheet", fp32=19.5, tf32=156, bf16=312,
         fp16=312, int8=624),
    _gpu("H100-80GB", 80, 3350, "NVIDIA H100 SXM datasheet", fp32=66.9, tf32=494.7,
         bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
    _gpu("H200-141GB", 141, 4800, "NVIDIA H200 SXM datasheet", fp32=66.9, tf32=494.7,
         bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
    _gpu("L4", 24, 300, "NVIDIA L4 datasheet", fp32=30.3, tf32=60, bf16=121, fp16=121,
         fp8=242.5, int8=242.5),
    _gpu("RTX-3090", 24, 936, "NVIDIA Ampere GA102 whitepaper", fp32=35.6, tf32=35.6,
         bf16=71, fp16=71, int8=284),
    _gpu("RTX-4090", 24, 1008, "NVIDIA Ada AD102 whitepaper", fp32=82.6, tf32=82.6,
         bf16=165.2, fp16=165.2, fp8=330.3, int8=660.6),
    _gpu("TPU-v4", 32, 1200, "Google Cloud TPU v4 documentation", bf16=275, int8=275),
)}


def gpu_names() -> list[str]:
    return list(GPUS)


def get_gpu(name: str) -> GPU:
    """A preset by name, case-insensitive, with suggestions when unknown."""
    for key, gpu in GPUS.items():
        if key.lower() == name.lower():
            return gpu
    close = difflib.get_close_matches(name.upper(), [k.upper() for k in GPUS], n=3, cutoff=0.4)
    names = [k for k in GPUS if k.upper() in close]
    hint = f"; did you mean {', '.join(names)}?" if names else ""
    raise TcalcError(f"unknown GPU '{name}'{hint} (known: {', '.join(GPUS)})")
