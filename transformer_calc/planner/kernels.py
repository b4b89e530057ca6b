"""Time of one kernel: GEMMs by shape (tile and wave quantisation), attention kernels,
memory-bound passes. Pure functions of sizes, the GPU and the calibration.

GEMM: a kernel tiles the output in tm × tn blocks, one block per SM at a time; the last wave
of blocks runs partly empty (wave quantisation) and edge blocks compute padding (tile
quantisation). cuBLAS picks among tile shapes; the model takes the best of a few, smaller
tiles paying a lower rate (NVIDIA's "Matrix Multiplication Background User's Guide",
sections "Tile quantization" and "Wave quantization"). A short reduction dimension K does
not amortise a tile's prologue and epilogue: rate × K / (K + K_HALF). The rate itself, the
fraction of the dense peak a large GEMM reaches, is calibrated (``gemm.<arch>.<dtype>``).
A GEMM never runs faster than its operands stream from HBM (the roofline).
"""

from __future__ import annotations

import math

# (tile rows, tile columns, relative rate): the large tiles cuBLAS uses for big bf16/fp8
# GEMMs on A100 and H100, and the smaller ones it falls back to for small outputs (the
# smaller tile's lower rate: less reuse per loaded operand; an estimate, not fitted)
TILES = ((256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.9), (128, 64, 0.75), (64, 64, 0.55))
K_HALF = 64  # the reduction length at which a tile runs at half its rate (an estimate)
LAUNCH_S = 4e-6  # a kernel launch and its tail, seconds (CUDA launch latency, a few µs)
HBM_EFFICIENCY = 0.85  # streaming kernels reach ~ 85-90 % of the HBM datasheet bandwidth


def wave_utilisation(m: int, n: int, sms: int, batch: int = 1) -> float:
    """The best over TILES of (useful output / output the launched waves compute) × the
    tile's relative rate: 1.0 for a large output that fills whole waves."""
    best = 0.0
    for tm, tn, rate in TILES:
        tiles = batch * -(-m // tm) * -(-n // tn)
        waves = -(-tiles // sms)
        util = batch * m * n / (waves * sms * tm * tn) * rate
        best = max(best, util)
    return best


def gemm_seconds(m: int, n: int, k: int, *, peak: float, rate: float, bandwidth: float,
                 sms: int, elem_bytes: float = 2.0, batch: int = 1) -> float:
    """One (batched) GEMM C[m, n] = A[m, k] · B[k, n]: 2·m·n·k FLOPs at the calibrated rate,
    quantised by tiles, waves and K; at least the time its operands take from HBM."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    util = wave_utilisation(m, n, sms, batch) * k / (k + K_HALF)
    compute = flops / (peak * rate * util)
    stream = batch * (m * k + k * n + m * n) * elem_bytes / (bandwidth * HBM_EFFICIENCY)
    return max(compute, stream) + LAUNCH_S


def stream_seconds(nbytes: float, bandwidth: float) -> float:
    """A memory-bound pass: bytes moved through HBM."""
    return nbytes / (bandwidth * HBM_EFFICIENCY) if nbytes > 0 else 0.0


# Attention kernels: the fraction of the dense 16-bit peak the forward and the backward pass
# reach at long sequences with 128-wide heads (causal FLOPs counted halved, as the papers
# count them). FlashAttention-2 (Dao 2023, Figs. 4-6: 50-73 % of peak forward on A100, the
# backward lower); on H100 FlashAttention-2 reaches ~ 35 % of peak (Shah et al. 2024,
# FlashAttention-3, Fig. 5: 330-370 TFLOP/s forward), cuDNN's fused attention (what
# Transformer Engine runs) ~ 55 % and FlashAttention-3 ~ 65 % forward (same figure).
# FlashAttention in Triton (Tillet's kernel, 2022; what llm-foundry's benchmark runs
# default to: scripts/train/benchmarking/submit_benchmarks.py, --attn_impl triton) runs at
# 1/1.3 to 1/2.5 of FlashAttention-2's rate (Dao 2023, Sec. 4.1 and Fig. 4): on A100 about
# 130 TFLOP/s forward; on H100, which the kernel predates, the same ratio to FlashAttention-2.
ATTENTION: dict[tuple[str, str], tuple[float, float]] = {
    ("triton", "a100"): (0.42, 0.30),
    ("triton", "h100"): (0.23, 0.17),
    ("flash2", "a100"): (0.66, 0.55),
    ("flash2", "h100"): (0.36, 0.30),
    ("cudnn", "a100"): (0.66, 0.55),
    ("cudnn", "h100"): (0.55, 0.42),
    ("flash3", "h100"): (0.65, 0.50),
    ("flash2", "b200"): (0.30, 0.25),
    ("cudnn", "b200"): (0.55, 0.42),
}
# The rate falls at short sequences (fewer key blocks to amortise a query block over): the
# same papers' curves halve near 256 keys; rate × s / (s + S_HALF).
S_HALF = 128


def flash_seconds(flops_fwd: float, keys: int, kernel: str, arch: str, peak16: float,
                  backward: bool, falloff: float = 0.0, chunk: int = 0) -> float:
    """A fused attention kernel: its FLOPs (the backward's are 2.5 × the forward's: it
    recomputes the scores) at the kernel's rate for the GPU. Measured training runs lose
    rate at long sequences that the kernel papers' benchmarks do not show: the rate is
    divided by 1 + falloff · keys / 65,536 (``falloff`` calibrated). ``chunk``: the keys
    one kernel call meets, where a ring (context parallelism) splits them."""
    fwd, bwd = ATTENTION.get((kernel, arch), ATTENTION.get(("flash2", arch), (0.4, 0.33)))
    per_call = chunk or keys
    rate = (bwd if backward else fwd) * per_call / (per_call + S_HALF) \
        / (1 + falloff * keys / 65536)
    flops = flops_fwd * (2.5 if backward else 1.0)
    return flops / (peak16 * rate) + LAUNCH_S if flops > 0 else 0.0


def causal_fraction(q_len: int, k_len: int, block: int = 128) -> float:
    """The share of a causal q_len × k_len score matrix a block-sparse kernel computes: the
    lower triangle and the diagonal blocks (keys after the queries' end are skipped)."""
    if q_len <= 0 or k_len <= 0:
        return 0.0
    return min(1.0, 0.5 + 0.5 * min(block, q_len) / q_len)


def log2_ceil(n: int) -> int:
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0
