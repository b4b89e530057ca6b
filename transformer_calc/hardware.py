"""Accelerator presets: memory, dense peak FLOP/s per dtype, memory bandwidth. Pure data.

Peak numbers are the vendor datasheets' dense figures (no 2:4 sparsity: a datasheet's
"with sparsity" figure halved), in FLOP/s; memory is the nominal capacity, read as GiB as the
cards' names give it (the CUDA context and allocator reserve part of it: torch reports about
79.1 GiB on an "80GB" H100). The source of each card stands beside it: NVIDIA's datasheets
(datacenter, workstation) and architecture whitepapers (GeForce: fp16/bf16 tensor with fp32
accumulate), AMD Instinct datasheets (matrix cores), Google Cloud's TPU documentation.
"""

from __future__ import annotations

import difflib
import re
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
    _gpu("H100-PCIe-80GB", 80, 2000, "NVIDIA H100 datasheet (PCIe)", fp32=51.2, tf32=378,
         bf16=756, fp16=756, fp8=1513, int8=1513),
    _gpu("H100-NVL-94GB", 94, 3900, "NVIDIA H100 datasheet (NVL)", fp32=60, tf32=417.5,
         bf16=835.5, fp16=835.5, fp8=1670.5, int8=1670.5),
    _gpu("B200-180GB", 180, 8000, "NVIDIA HGX B200 datasheet, per GPU", fp32=75, tf32=1100,
         bf16=2250, fp16=2250, fp8=4500, int8=4500),
    _gpu("L40S", 48, 864, "NVIDIA L40S datasheet", fp32=91.6, tf32=183, bf16=362, fp16=362,
         fp8=733, int8=733),
    _gpu("RTX-A6000", 48, 768, "NVIDIA RTX A6000 datasheet", fp32=38.7, tf32=77.4,
         bf16=154.8, fp16=154.8, int8=309.7),
    _gpu("RTX-6000-Ada", 48, 960, "NVIDIA RTX 6000 Ada datasheet", fp32=91.1, tf32=182.1,
         bf16=364.2, fp16=364.2, fp8=728.5, int8=728.5),
    _gpu("RTX-5090", 32, 1792, "NVIDIA RTX Blackwell GB202 whitepaper", fp32=104.8,
         tf32=104.8, bf16=209.5, fp16=209.5, fp8=419, int8=838),
    _gpu("MI250X", 128, 3277, "AMD Instinct MI250X datasheet", fp32=95.7, bf16=383,
         fp16=383, int8=383),
    _gpu("MI300X", 192, 5300, "AMD Instinct MI300X datasheet", fp32=163.4, tf32=653.7,
         bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9),
    _gpu("MI325X", 256, 6000, "AMD Instinct MI325X datasheet", fp32=163.4, tf32=653.7,
         bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9),
)}

# What people call them: each alias -> a preset (compared with case, spaces, "-" and "_"
# ignored). A bare generation names its SXM part with the most memory.
ALIASES = {"h100": "H100-80GB", "h100sxm": "H100-80GB", "h100pcie": "H100-PCIe-80GB",
           "h100nvl": "H100-NVL-94GB", "h200": "H200-141GB", "b200": "B200-180GB",
           "a100": "A100-80GB", "v100": "V100-32GB", "a6000": "RTX-A6000",
           "rtx6000ada": "RTX-6000-Ada", "6000ada": "RTX-6000-Ada", "3090": "RTX-3090",
           "4090": "RTX-4090", "5090": "RTX-5090", "tpuv4": "TPU-v4"}


def gpu_names() -> list[str]:
    return list(GPUS)


def _key(name: str) -> str:
    return "".join(c for c in name.lower() if c not in " -_")


# a capacity alone: "48GB", "80 GiB", "24G" (GB read as GiB, as the cards' names are)
_CAPACITY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(g|gb|gib|t|tb|tib)\s*", re.I)


def get_gpu(name: str) -> GPU:
    """A preset by name or alias (case, spaces, "-" and "_" ignored), or any capacity
    ("48GB": a card of that memory, no FLOP/s), with suggestions when unknown."""
    want = _key(name)
    for key, gpu in GPUS.items():
        if _key(key) == want:
            return gpu
    if want in ALIASES:
        return GPUS[ALIASES[want]]
    m = _CAPACITY.fullmatch(name)
    if m and float(m.group(1)) > 0:
        size = float(m.group(1)) * (1024 if m.group(2).lower().startswith("t") else 1)
        return GPU(f"{m.group(1)}{'TB' if m.group(2).lower().startswith('t') else 'GB'}",
                   int(size * GiB), 0.0, {}, "a capacity given on the command line")
    choices = {_key(k): k for k in GPUS} | {a: ALIASES[a] for a in ALIASES}
    close = difflib.get_close_matches(want, list(choices), n=3, cutoff=0.5)
    names = list(dict.fromkeys(choices[c] for c in close))
    hint = f"; did you mean {', '.join(names)}?" if names else ""
    raise TcalcError(f"unknown GPU {name!r}{hint} (known: {', '.join(GPUS)}; or a capacity "
                     "such as 48GB)")
