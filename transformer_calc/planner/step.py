"""A training step's time for one layout, split into where it goes.

Per micro-batch, the busiest pipeline stage runs its layers forward and backward (and again
forward where recomputation asks), with the tensor-, context- and expert-parallel
communication the framework does not hide, and its sends to the neighbouring stages. The
pipeline runs m micro-batches plus (p − 1)/v micro-batches' worth of bubble (1F1B, Narayanan
et al. 2021, Sec. 2.2: bubble fraction (p − 1)/m; interleaved with v virtual stages:
(p − 1)/(m·v)). After the last backward, the data-parallel gradient reduction that did not
hide behind it, the parameter all-gather that does not hide behind the next forward, the
optimizer's pass over its shard, and a constant per step (data loading, logging, launch).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from transformer_calc.errors import TcalcError
from transformer_calc.planner import collectives as cc
from transformer_calc.planner import kernels
from transformer_calc.planner.calibration import PRIORS, Calibration
from transformer_calc.planner.frameworks import Framework
from transformer_calc.planner.hardware import Cluster
from transformer_calc.planner.layer import Device, LayerCost, Shard, layers_of
from transformer_calc.spec import ModelSpec

PRECISIONS = ("bf16", "fp8", "fp8-rowwise")
# Adam over an fp32 shard: read master weights, gradients, both moments (16 bytes), write
# master weights and moments (12), write the 16-bit copy (2), read gradients once more for
# the norm clipping (4): 34 bytes per parameter
OPTIMIZER_BYTES = 34


class Layout(NamedTuple):
    """A parallel layout: degrees, ZeRO stage, micro-batch, recomputation."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int = 1  # virtual stages per pipeline rank (interleaved 1F1B); 1: plain 1F1B
    mb: int = 1  # sequences per micro-batch
    zero: int = 0  # 0 DDP, 1 distributed optimizer, 2 + gradients, 3 FSDP
    recompute: str = "none"  # none | selective | full
    sp: bool = False  # sequence parallelism (with tp > 1)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def describe(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}" + (f"×v{self.vp}" if self.vp > 1 else ""),
                 f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        return " ".join(parts)


class Workload(NamedTuple):
    spec: ModelSpec
    seq_len: int
    global_batch: int  # sequences per optimizer step
    precision: str = "bf16"  # the layers' GEMMs: bf16 | fp8 | fp8-rowwise


class StepTime(NamedTuple):
    """Seconds of one step, by where they go; ``total`` is their sum."""

    compute: float  # the micro-batches' forward, backward and recomputation
    bubble: float  # pipeline fill and drain
    tp: float  # exposed communication, by parallel dimension
    cp: float
    ep: float
    pp: float
    dp: float
    optimizer: float
    overhead: float
    micro_batches: int

    @property
    def total(self) -> float:
        return (self.compute + self.bubble + self.tp + self.cp + self.ep + self.pp + self.dp
                + self.optimizer + self.overhead)


class StepModel:
    """The step time of every layout of one workload on one cluster and framework; layer
    costs are cached by the shard they depend on."""

    def __init__(self, work: Workload, cluster: Cluster, fw: Framework, cal: Calibration,
                 *, async_tp: bool = False) -> None:
        if work.precision not in PRECISIONS:
            raise TcalcError(f"--precision: expected one of {', '.join(PRECISIONS)}")
        self.work, self.cluster, self.fw, self.cal = work, cluster, fw, cal
        spec = work.spec
        self.layers = layers_of(spec)
        self.n_layers = sum(g.count for g in self.layers)
        self.h, self.V = spec.d_model, spec.vocab_size
        self.dev = self._device(work.precision)
        self.tp_hidden = cal.value("tp_hidden.async") if async_tp else (
            cal.value("tp_hidden.megatron") if fw.name == "megatron" else fw.tp_hidden)

    def _device(self, precision: str) -> Device:
        c, cal = self.cluster, self.cal
        clock = cal.value(c.clock) if c.clock else 1.0
        peak16 = c.gpu.peak("bf16") * clock
        rate16 = cal.value(f"gemm.{c.arch}.bf16")
        kernel = f"attention.{self.fw.attention}.{c.arch}"
        attn = cal.value(kernel) if kernel in PRIORS else 1.0  # (unfused: GEMMs, no rate)
        elem, fall = cal.value("elementwise"), cal.value("attention.falloff")
        if precision == "bf16":
            return Device(c.arch, c.sms, peak16, peak16, rate16, rate16, c.gpu.bandwidth, 2.0,
                          attn, elem, fall)
        key = "fp8_rowwise" if precision == "fp8-rowwise" else "fp8"
        return Device(c.arch, c.sms, peak16, c.gpu.peak("fp8") * clock, rate16,
                      cal.value(f"gemm.{c.arch}.{key}"), c.gpu.bandwidth, 1.0, attn, elem, fall)

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (one model per workload, short-lived)
    def layer(self, tp: int, cp: int, ep: int, mb: int, sp: bool) -> LayerCost:
        """The average layer's cost for one micro-batch (groups weighted by their layers)."""
        sh = Shard(mb, self.work.seq_len, tp, cp, ep, sp)
        costs = [(g.count, g.cost(self.dev, sh, self.fw.attention, self.fw.elementwise))
                 for g in self.layers]
        n = self.n_layers
        return LayerCost(*(sum(c * getattr(x, f) for c, x in costs) / n
                           for f in LayerCost._fields))

    @functools.lru_cache(maxsize=1024)  # noqa: B019
    def layer_params(self, tp: int, ep: int) -> float:
        """Parameters of the average layer on one GPU (before ZeRO)."""
        return self.layer(tp, 1, ep, 1, False).params

    @functools.lru_cache(maxsize=1024)  # noqa: B019
    def head(self, tp: int, cp: int, mb: int) -> tuple[float, float]:
        """(forward, backward) seconds of the output layer and loss for one micro-batch on
        the last stage: the logits GEMM over the vocabulary shard (16-bit: frameworks keep
        the output layer out of fp8), the cross-entropy's passes over the logits."""
        t = mb * self.work.seq_len // cp
        d = self.dev
        vshard = -(-self.V // tp)

        def g(m: int, n: int, k: int) -> float:
            return kernels.gemm_seconds(m, n, k, peak=d.peak16, rate=d.rate16,
                                        bandwidth=d.bandwidth, sms=d.sms)

        ce = kernels.stream_seconds(self.fw.ce_bytes * t * vshard * d.elementwise, d.bandwidth)
        # embedding backward: a dense gradient of the vocabulary shard, zeroed and scattered
        emb = kernels.stream_seconds(6.0 * vshard * self.h, d.bandwidth)
        return g(t, vshard, self.h) + ce / 3, g(t, self.h, vshard) + g(self.h, vshard, t) \
            + 2 * ce / 3 + emb

    def edge_params(self, tp: int) -> float:
        """Embedding and output-layer parameters on one rank of the busiest edge stage."""
        spec = self.work.spec
        emb = self.V * spec.embed_dim
        return emb / tp * (1 if spec.tie_embeddings else 2)

    def _compute(self, lay: Layout) -> tuple[LayerCost, float, float, float]:
        """(the average layer, the busiest stage's layers, forward and backward seconds of
        one micro-batch on it, recomputation included)."""
        L = float(-(-self.n_layers // lay.pp))  # the busiest stage's layers
        x = self.layer(lay.tp, lay.cp, lay.ep, lay.mb, lay.sp)
        hf, hb = self.head(lay.tp, lay.cp, lay.mb)
        redo = {"none": 0.0, "full": x.fwd,
                "selective": x.op_recompute if self.fw.selective == "op" else x.attn_fwd
                }[lay.recompute]
        return x, L, L * x.fwd + hf, L * (x.bwd + redo) + hb

    def compute_bound(self, lay: Layout) -> float:
        """The step's compute alone: no layout with these degrees, micro-batch and
        recomputation (whatever its interleaving and ZeRO stage) steps faster."""
        _, _, fwd, bwd = self._compute(lay)
        return self.work.global_batch // (lay.dp * lay.mb) * (fwd + bwd) \
            + self.cal.value("overhead_s")

    def step(self, lay: Layout) -> StepTime:
        w = self.work
        if w.global_batch % (lay.dp * lay.mb):
            raise TcalcError(f"global batch {w.global_batch}: not a multiple of dp × "
                             f"micro-batch = {lay.dp * lay.mb}")
        m = w.global_batch // (lay.dp * lay.mb)
        x, L, fwd, bwd = self._compute(lay)
        compute = fwd + bwd
        tp_t, cp_t, ep_t, pp_t = self._exposed(lay, x, L, fwd)
        t_mb = compute + tp_t + cp_t + ep_t + pp_t
        bubble = (lay.pp - 1) / lay.vp * t_mb if lay.pp > 1 else 0.0
        dp_t, opt = self._data_parallel(lay, x, L, m, fwd, bwd)
        return StepTime(m * compute, bubble, m * tp_t, m * cp_t, m * ep_t, m * pp_t, dp_t, opt,
                        self.cal.value("overhead_s"), m)

    def _exposed(self, lay: Layout, x: LayerCost, L: float, fwd: float
                 ) -> tuple[float, float, float, float]:
        """Exposed tensor-, context-, expert- and pipeline-parallel seconds of one
        micro-batch on the busiest stage."""
        c, fw = self.cluster, self.fw
        redo = 1 if lay.recompute == "full" else 0  # the forward again, its collectives too
        tp_t = 0.0
        if lay.tp > 1:
            per_pass = 2 * cc.all_reduce(c, x.tp_bytes, lay.tp)
            # Megatron-LM's sequence parallelism all-gathers each column-parallel layer's
            # input again in backward for its weight gradient (it saved the shard): half a
            # pass more (Korthikanti et al. 2022, Sec. 4.2.2); torchtitan keeps it gathered
            regather = 0.5 * per_pass if lay.sp and fw.sharding == "megatron" else 0.0
            if fw.name == "megatron-2022":
                # forward exposed; backward's all-reduces overlap the weight-gradient GEMMs
                # (Table 4's note), the re-gather does not
                hidden = max(0.0, per_pass - 0.5 * x.wgrad)
                tp_t = L * ((1 + redo) * per_pass + hidden + regather)
            else:
                tp_t = L * ((2 + redo) * per_pass + regather) * (1 - self.tp_hidden)
        cp_t = 0.0
        if lay.cp > 1:
            step_f = cc.send_recv(c, x.cp_bytes, lay.tp)
            step_b = cc.send_recv(c, 2 * x.cp_bytes, lay.tp)
            k = lay.cp - 1
            per = k * (max(0.0, step_f - x.attn_fwd / lay.cp)
                       + max(0.0, step_b - x.attn_bwd / lay.cp))
            cp_t = L * per * (1.5 if redo else 1.0)
        ep_t = 0.0
        if lay.ep > 1 and x.ep_bytes:
            # (folded over the tensor-parallel ranks when it outgrows data × context)
            stride = lay.tp * lay.cp if (lay.dp * lay.cp) % lay.ep == 0 else 1
            a2a = cc.all_to_all(c, x.ep_bytes, lay.ep, stride)
            ep_t = L * 2 * (2 + redo) * a2a
        pp_t = 0.0
        if lay.pp > 1 and not fw.pp_hidden:
            # each TP rank sends its 1/tp of the activation (Narayanan et al. 2021, Sec. 4.1:
            # the scatter/gather optimisation; sequence parallelism shards it anyway)
            t = lay.mb * self.work.seq_len // lay.cp
            nbytes = 2.0 * t * self.h / lay.tp
            pp_t = 2 * lay.vp * cc.send_recv(c, nbytes, lay.tp * lay.cp * lay.dp)
        return tp_t, cp_t, ep_t, pp_t

    def _data_parallel(self, lay: Layout, x: LayerCost, L: float, m: int, fwd: float,
                       bwd: float) -> tuple[float, float]:
        """(exposed data-parallel seconds, optimizer seconds) of one step."""
        c, fw = self.cluster, self.fw
        group, stride = lay.dp * lay.cp, lay.tp
        dense = L * (x.params - x.expert_params) + self.edge_params(lay.tp)
        experts = L * x.expert_params
        egroup = max(1, group // lay.ep)
        if lay.zero == 3 and lay.pp == 1:
            # FSDP: each layer gathered for forward and for backward, its gradients reduce-
            # scattered, every micro-batch; the next layer's while this one computes
            per_layer = x.params - x.expert_params
            ag = cc.all_gather(c, 2 * per_layer, group, stride)
            rs = cc.reduce_scatter(c, fw.grad_bytes * per_layer, group, stride)
            f_l, b_l = fwd / max(L, 1), bwd / max(L, 1)
            exposed = L * (max(0.0, ag - f_l) + max(0.0, ag + rs - b_l)) + ag + rs
            if experts:
                e_ag = cc.all_gather(c, 2 * x.expert_params, egroup, stride * lay.ep)
                exposed += L * (max(0.0, e_ag - f_l) + max(0.0, 2 * e_ag - b_l))
            dp_t = m * exposed if group > 1 else 0.0
        else:
            grads = cc.reduce_scatter if lay.zero >= 1 else cc.all_reduce
            red = grads(c, fw.grad_bytes * dense, group, stride) + grads(
                c, fw.grad_bytes * experts, egroup, stride * lay.ep)
            window = bwd if fw.dp_overlap else 0.0
            dp_t = max(0.0, red - window)
            if lay.zero >= 1:
                ag = cc.all_gather(c, 2 * dense, group, stride) + cc.all_gather(
                    c, 2 * experts, egroup, stride * lay.ep)
                dp_t += max(0.0, ag - (fwd if fw.gather_overlap else 0.0))
        shard = dense / (group if lay.zero >= 1 else 1) + experts / (
            egroup if lay.zero >= 1 else 1)
        opt = kernels.stream_seconds(OPTIMIZER_BYTES * shard, c.gpu.bandwidth)
        return dp_t, opt
