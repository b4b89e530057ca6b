"""One layer's time for one micro-batch on one GPU, op by op, from the layer plan every
other command reads (plan.plan_of): GEMMs with their shapes after tensor, context and expert
parallelism, the attention kernel, the memory-bound passes, and the bytes each parallel
dimension communicates. The step model (step.py) multiplies and overlaps these.

Shapes follow Megatron-LM's split of a layer (Shoeybi et al. 2019; Korthikanti et al. 2022):
QKV and FC1 column-parallel (outputs / tp), the attention output and FC2 row-parallel
(inputs / tp); K/V heads fewer than tp are replicated; MLA's down-projections whole on every
rank; routed experts whole (expert tensor parallelism 1) over ep ranks.
"""

from __future__ import annotations

from typing import NamedTuple

from transformer_calc.errors import TcalcError
from transformer_calc.plan import FFN, Attention, Block, plan_of
from transformer_calc.planner import kernels
from transformer_calc.spec import ModelSpec


class Shard(NamedTuple):
    """How one micro-batch of one layer lands on a GPU."""

    seqs: int  # sequences in the micro-batch
    seq_len: int  # tokens per sequence (whole)
    tp: int
    cp: int
    ep: int
    sp: bool  # sequence parallel: the norms and residual stream split over tp too

    @property
    def tokens(self) -> int:
        """Tokens of the micro-batch one GPU computes (context parallel splits them)."""
        return self.seqs * self.seq_len // self.cp


class Device(NamedTuple):
    """The GPU as the kernels see it: peaks after any sustained-clock factor, calibrated
    GEMM rates."""

    arch: str
    sms: int
    peak16: float  # dense 16-bit FLOP/s
    peak_gemm: float  # dense FLOP/s of the layers' GEMMs (fp8 peak when they run in fp8)
    rate16: float  # calibrated fraction of peak16 a large GEMM reaches
    rate_gemm: float
    bandwidth: float  # HBM bytes/s
    gemm_bytes: float  # bytes per element of the GEMM operands (1 in fp8)
    attention: float = 1.0  # calibrated scale of the attention kernels' rates
    elementwise: float = 1.0  # calibrated scale of the memory-bound passes
    falloff: float = 0.0  # calibrated loss of attention rate at long sequences


class OpTime(NamedTuple):
    """One op of a layer for one micro-batch, as the step model times it (explain reads
    these: where a layer's time goes)."""

    name: str  # "QKV projection", "attention core", "FFN in", ...
    shape: str  # the GEMM "m × n × k" (× batch), or the bytes a memory-bound pass moves
    flops: float  # forward FLOPs (0 for a memory-bound pass)
    fwd: float  # seconds
    bwd: float  # seconds, data and weight gradients


class LayerCost(NamedTuple):
    """Seconds (compute) and bytes (communication) of one layer, one micro-batch."""

    fwd: float  # GEMMs, attention, elementwise: the forward pass
    bwd: float  # the backward pass (data and weight gradients)
    wgrad: float  # of which weight-gradient GEMMs (what TP communication can hide behind)
    attn_fwd: float  # the attention core's forward (what selective recompute redoes)
    attn_bwd: float
    op_recompute: float  # torchtitan's per-op policy: every second GEMM and the elementwise
    tp_bytes: float  # the layer's t × h output: two all-reduces of it per pass
    cp_bytes: float  # K and V of one context-parallel step
    ep_bytes: float  # one all-to-all's bytes (dispatch or combine)
    params: float  # parameters of the layer on this GPU (before ZeRO)
    expert_params: float  # of which routed experts


def _gemm(dev: Device, m: int, n: int, k: int, *, batch: int = 1, sixteen: bool = False
          ) -> float:
    peak, rate, eb = (dev.peak16, dev.rate16, 2.0) if sixteen else (
        dev.peak_gemm, dev.rate_gemm, dev.gemm_bytes)
    return kernels.gemm_seconds(m, n, k, peak=peak, rate=rate, bandwidth=dev.bandwidth,
                                sms=dev.sms, elem_bytes=eb, batch=batch)


def _linear(dev: Device, t: int, n_out: int, k_in: int, batch: int = 1
            ) -> tuple[float, float, float]:
    """(forward, data-gradient, weight-gradient) seconds of a linear layer y = x W over t
    tokens (x: t × k_in, W: k_in × n_out), in the layers' GEMM dtype; fp8 adds the casts of
    its inputs (read 16-bit, write 8-bit, a transposed copy for the weight gradient)."""
    f = _gemm(dev, t, n_out, k_in, batch=batch)
    d = _gemm(dev, t, k_in, n_out, batch=batch)
    w = _gemm(dev, k_in, n_out, t, batch=batch)
    if dev.gemm_bytes < 2:
        f += kernels.stream_seconds(batch * t * k_in * 4.0, dev.bandwidth)
        d += kernels.stream_seconds(batch * t * n_out * 4.0, dev.bandwidth)
    return f, d, w


def _heads(a: Attention, tp: int) -> tuple[int, int]:
    """Query and K/V heads on one tensor-parallel rank (K/V replicated below tp)."""
    return max(1, a.heads // tp), max(1, a.kv_heads // tp)


class Layer:
    """One group of identical layers of a model, ready to be costed for any shard."""

    def __init__(self, spec: ModelSpec, block: Block, count: int) -> None:
        if block.mixer is not None or block.attn is None:
            raise TcalcError(f"{spec.name}: layers without softmax attention (recurrent "
                             "mixers) are not modelled by the planner")
        if block.attn.mechanism != "softmax" or block.cross is not None:
            raise TcalcError(f"{spec.name}: only decoder softmax attention is modelled by "
                             "the planner")
        self.spec, self.block, self.count = spec, block, count
        self.h = spec.d_model
        self.dropout = spec.dropout > 0

    # -- attention ---------------------------------------------------------------------
    def _attention(self, dev: Device, sh: Shard, kernel: str, out: dict[str, float],
                   ops: list[OpTime] | None = None) -> None:
        a, h, t = self.block.attn, self.h, sh.tokens
        assert a is not None
        hq, hkv = _heads(a, sh.tp)
        if a.mla:
            # MLA (DeepSeek-V2): the down-projections whole, the up-projections by head
            rq, rkv = a.q_lora_rank, a.kv_lora_rank
            parts = [("KV down-projection", t, rkv + a.d_rope, h)]
            parts += [("Q down-projection", t, rq, h), ("Q up-projection", t, hq * a.d_head, rq)
                      ] if rq else [("Q projection", t, hq * a.d_head, h)]
            parts.append(("KV up-projection", t, hq * (a.d_head - a.d_rope + a.d_v), rkv))
        else:
            parts = [("QKV projection", t, (hq + 2 * hkv) * a.d_head if a.d_v == a.d_head
                      else (hq + hkv) * a.d_head + hkv * a.d_v, h)]
        parts.append(("output projection", t, h, hq * a.d_v))
        for name, m, n, k in parts:
            f, d, w = _linear(dev, m, n, k)
            out["fwd"] += f
            out["bwd"] += d + w
            out["wgrad"] += w
            out["gemm_fwd"] += f
            if ops is not None:
                ops.append(OpTime(name, f"{m:,} × {n:,} × {k:,}", 2.0 * m * n * k, f, d + w))
        keys = min(sh.seq_len, a.window) if a.window else sh.seq_len
        if kernel == "unfused":
            self._unfused(dev, sh, hq, a.d_head, a.d_v, out, ops)
            return
        # causal work is halved (the kernels skip masked blocks); context parallelism splits
        # it evenly (Megatron-LM's load-balanced chunks)
        cf = kernels.causal_fraction(sh.seq_len, keys) if not a.window else 1.0
        flops = 2.0 * sh.seqs * hq * sh.seq_len * keys * (a.d_head + a.d_v) * cf / sh.cp
        peak = dev.peak16 * dev.attention
        chunk = keys // sh.cp  # a ring step's keys
        f = kernels.flash_seconds(flops, keys, kernel, dev.arch, peak, False, dev.falloff, chunk)
        b = kernels.flash_seconds(flops, keys, kernel, dev.arch, peak, True, dev.falloff, chunk)
        out["fwd"] += f
        out["bwd"] += b
        out["attn_fwd"] += f
        out["attn_bwd"] += b
        if ops is not None:
            split = f", 1/{sh.cp} of it (context parallel)" if sh.cp > 1 else ""
            ops.append(OpTime(f"attention core ({kernel})",
                              f"{sh.seqs:,} × {hq} heads × {sh.seq_len:,} queries × "
                              f"{keys:,} keys{split}", flops, f, b))

    def _unfused(self, dev: Device, sh: Shard, hq: int, dh: int, dv: int,
                 out: dict[str, float], ops: list[OpTime] | None = None) -> None:
        """Megatron-LM before fused attention: batched QKᵀ and PV GEMMs over the whole
        s × s scores (causal masked, not skipped), a fused scale-mask-softmax and dropout
        on the probabilities (2-byte scores: read + write; the dropout's 1-byte mask)."""
        s, bh = sh.seq_len, sh.seqs * hq
        f = _gemm(dev, s, s, dh, batch=bh, sixteen=True) + _gemm(dev, s, dv, s, batch=bh,
                                                               sixteen=True)
        b = (_gemm(dev, s, s, dv, batch=bh, sixteen=True) + _gemm(dev, s, dv, s, batch=bh,
                                                                sixteen=True)
             + _gemm(dev, s, dh, s, batch=bh, sixteen=True) * 2)
        scores = float(bh) * s * s
        drop = self.spec.attention_dropout if self.spec.attention_dropout is not None \
            else self.spec.dropout
        f += kernels.stream_seconds(scores * (4 + (5 if drop else 0)), dev.bandwidth)
        b += kernels.stream_seconds(scores * (6 + (5 if drop else 0)), dev.bandwidth)
        out["fwd"] += f
        out["bwd"] += b
        out["attn_fwd"] += f
        out["attn_bwd"] += b
        if ops is not None:
            ops.append(OpTime("attention core (unfused: QKᵀ, softmax, PV)",
                              f"{bh:,} × {s:,} × {s:,}", 2.0 * bh * s * s * (dh + dv), f, b))

    # -- FFN -----------------------------------------------------------------------------
    def _ffn(self, dev: Device, sh: Shard, out: dict[str, float],
             ops: list[OpTime] | None = None) -> tuple[float, float]:
        """Adds the FFN's GEMMs; returns (its parameters on this GPU, of which experts)."""
        f_: FFN | None = self.block.ffn
        if f_ is None:
            return 0.0, 0.0
        h, t, tp = self.h, sh.tokens, sh.tp
        ins = f_.matrices - 1  # gate and up, or up
        shapes: list[tuple[str, int, int, int, int]] = []  # (name, m, n, k, batch)
        params = experts = 0.0
        if not f_.moe:
            shapes += [("FFN in", t, ins * f_.d_ff // tp, h, 1),
                       ("FFN out", t, h, f_.d_ff // tp, 1)]
            params = f_.matrices * h * f_.d_ff / tp
        else:
            X, k = f_.experts, f_.top_k
            local = max(1, X // sh.ep)
            # the tokens each GPU routes (its sequence-parallel share), spread evenly over
            # the experts (Megatron-Bridge's runs force-balance the routing)
            routed = max(1, (t // tp if tp > 1 else t) * k * sh.ep // X)
            shapes += [("experts in", routed, ins * f_.d_ff, h, local),
                       ("experts out", routed, h, f_.d_ff, local)]
            shapes.append(("router", t // tp if tp > 1 else t, X, h, 1))
            experts = f_.matrices * h * f_.d_ff * local
            if f_.shared:
                ds = f_.d_shared * f_.shared
                shapes += [("shared experts in", t, ins * ds // tp, h, 1),
                           ("shared experts out", t, h, ds // tp, 1)]
                params = f_.matrices * h * ds / tp
            if f_.beside:
                shapes += [("dense FFN in", t, ins * f_.beside // tp, h, 1),
                           ("dense FFN out", t, h, f_.beside // tp, 1)]
                params += f_.matrices * h * f_.beside / tp
        for name, m, n, k, batch in shapes:
            f, d, w = _linear(dev, m, n, k, batch)
            out["fwd"] += f
            out["bwd"] += d + w
            out["wgrad"] += w
            out["gemm_fwd"] += f
            if ops is not None:
                each = f" (× {batch} experts)" if batch > 1 else ""
                ops.append(OpTime(name, f"{m:,} × {n:,} × {k:,}{each}", 2.0 * m * n * k * batch,
                                  f, d + w))
        return params, experts

    def _elementwise(self, dev: Device, sh: Shard, passes: float, out: dict[str, float],
                     ops: list[OpTime] | None = None) -> float:
        """The memory-bound ops of a fused layer (apex / Transformer Engine), forward, in
        bytes per token: two norms (read + write d_model, 2 bytes each), two residual adds
        (two reads, one write), dropout's masks where the model trains with dropout, the
        activation (read + write the inner width; gated: two reads), RoPE over Q and K.
        Scaled by the framework's passes; backward moves about twice the forward's bytes."""
        a, f_, h = self.block.attn, self.block.ffn, self.h
        assert a is not None
        rep = h / sh.tp if sh.sp else h  # replicated over tp unless sequence parallel
        per = 8 * rep + 12 * rep + (6 * rep if self.dropout else 0)
        if f_ is not None:
            width = (f_.d_ff * f_.top_k if f_.moe else f_.d_ff) / sh.tp \
                + (f_.d_shared * f_.shared / sh.tp if f_.moe and f_.shared else 0)
            per += (6 if f_.matrices == 3 else 4) * width
            if f_.moe:
                per += 8 * h * f_.top_k / max(sh.tp, 1)  # permute and unpermute the copies
        if a.rope and self.spec.position == "rope":
            hq, hkv = _heads(a, sh.tp)
            per += 4 * (hq + hkv) * a.d_head
        fwd = kernels.stream_seconds(per * sh.tokens * passes * dev.elementwise, dev.bandwidth)
        out["fwd"] += fwd
        out["bwd"] += 2 * fwd
        if ops is not None:
            ops.append(OpTime("norms, residuals, activation, RoPE (memory-bound)",
                              f"{per * sh.tokens * passes:,.0f} bytes", 0.0, fwd, 2 * fwd))
        return fwd

    def cost(self, dev: Device, sh: Shard, kernel: str, passes: float,
             ops: list[OpTime] | None = None) -> LayerCost:
        """The layer's cost; ``ops``, when given, receives each op's time."""
        out = dict.fromkeys(("fwd", "bwd", "wgrad", "attn_fwd", "attn_bwd", "gemm_fwd"), 0.0)
        self._attention(dev, sh, kernel, out, ops)
        ffn_params, experts = self._ffn(dev, sh, out, ops)
        elem = self._elementwise(dev, sh, passes, out, ops)
        a = self.block.attn
        assert a is not None
        hq, hkv = _heads(a, sh.tp)
        h, t = self.h, sh.tokens
        # TP: per pass two all-reduces of the layer's t × h output, i.e. with sequence
        # parallelism two all-gathers and two reduce-scatters of it (Korthikanti, Sec. 4.2.2)
        tp_bytes = 2.0 * t * h if sh.tp > 1 else 0.0
        # CP: one ring step carries the K and V chunks of the rank's tokens (2 bytes each)
        cp_bytes = 2.0 * t * hkv * (a.d_head + a.d_v) if sh.cp > 1 else 0.0
        f_ = self.block.ffn
        ep_bytes = 2.0 * (t // sh.tp if sh.tp > 1 else t) * f_.top_k * h \
            if f_ is not None and f_.moe and sh.ep > 1 else 0.0
        attn_params = (h * (hq + 2 * hkv) * a.d_head + hq * a.d_v * h) if not a.mla else (
            h * (a.q_lora_rank + a.kv_lora_rank + a.d_rope)
            + hq * a.d_head * (a.q_lora_rank or h)
            + a.kv_lora_rank * hq * (a.d_head - a.d_rope + a.d_v) + hq * a.d_v * h)
        return LayerCost(out["fwd"], out["bwd"], out["wgrad"], out["attn_fwd"], out["attn_bwd"],
                         out["gemm_fwd"] / 2 + elem, tp_bytes, cp_bytes, ep_bytes,
                         attn_params + ffn_params + experts, experts)


def layers_of(spec: ModelSpec) -> list[Layer]:
    """The model's groups of identical layers (a decoder-only stack)."""
    plan = plan_of(spec)
    if spec.arch != "decoder" or len(plan.stacks) != 1:
        raise TcalcError(f"{spec.name}: the planner models decoder-only models (this one is "
                         f"{spec.arch})")
    return [Layer(spec, g.block, g.count) for g in plan.groups]
