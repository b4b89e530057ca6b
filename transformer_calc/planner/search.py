"""The layout search: every layout the framework allows for the cluster, pruned by an
analytic lower bound of the model states per GPU, timed by the step model (cheap: layer
costs are cached by the shard they depend on), then walked fastest first through tcalc's
memory core (memory.memory_report, per pipeline stage, with the micro-batches in flight)
until the requested number of layouts fit.

Framework rules (what each framework accepts):
- the model-parallel dimensions the framework has (PyTorch FSDP: none; torchtitan: no
  expert parallelism); tensor parallelism within an NVLink domain, dividing the attention
  heads (K/V heads divide it or it divides them: memory.py's rule);
- pipeline stages dividing the layers evenly; micro-batches dividing each data-parallel
  rank's batch; interleaving (v virtual stages per rank dividing its layers) when the
  number of micro-batches is a multiple of the stages (Megatron-LM's interleaved schedule);
- context parallelism with a sequence length divisible by 2·cp (Megatron-LM's
  load-balanced split);
- expert parallelism over divisors of the experts that divide tensor × context × data
  parallelism (Megatron-Core's MoE parallel folding);
- sequence parallelism with tensor parallelism (Megatron-LM may leave it off; torchtitan
  always uses it);
- the ZeRO stages and recomputation modes the framework ships (frameworks.py).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from transformer_calc.errors import TcalcError
from transformer_calc.hardware import GiB
from transformer_calc.planner.calibration import Calibration
from transformer_calc.planner.frameworks import Framework
from transformer_calc.planner.hardware import Cluster
from transformer_calc.planner.step import Layout, StepModel, StepTime, Workload

# What a GPU may fill: its capacity less the CUDA context, cuBLAS workspaces and allocator
# fragmentation (tcalc memory reports the allocator's cache as 2-12 % beside the peak)
RESERVE_BYTES = 3 * GiB
MAX_MICRO_BATCH = 64
MAX_CP = 32


class Candidate(NamedTuple):
    layout: Layout
    time: StepTime
    peak_bytes: int  # per GPU, the busiest pipeline stage (memory core)


class SearchResult(NamedTuple):
    best: tuple[Candidate, ...]  # fastest first, each fits
    layouts: int  # layouts the framework allows for the cluster
    after_bound: int  # left after the analytic memory bound
    memory_calls: int  # memory-core evaluations
    seconds: float  # wall time of the search
    budget_bytes: int


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers(limit: int) -> list[int]:
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return out


class Group(NamedTuple):
    """Layouts that share their degrees, micro-batch, recomputation and sequence
    parallelism (so their compute), differing in interleaving and ZeRO stage."""

    base: Layout  # vp 1, the first ZeRO stage
    vps: tuple[int, ...]
    zeros: tuple[int, ...]

    def layouts(self) -> Iterator[Layout]:
        for vp in self.vps:
            for zero in self.zeros:
                yield self.base._replace(vp=vp, zero=zero)


def groups(work: Workload, gpus: int, fw: Framework, domain: int,
           fixed: dict[str, Any] | None = None) -> Iterator[Group]:
    """Every layout the framework's rules allow (module docstring), in groups, with
    ``fixed`` knobs held at their values."""
    fx = fixed or {}
    spec = work.spec
    L, H, kv = spec.total_layers, spec.n_heads, spec.kv_heads

    def opts(name: str, values: list[Any]) -> list[Any]:
        if name in fx:
            return [fx[name]]
        return values if name in fw.parallel or name not in ("tp", "pp", "cp", "ep") \
            else [1]

    tps = [t for t in _powers(domain) if gpus % t == 0 and H % t == 0
           and (spec.mla or kv % t == 0 or t % kv == 0)]
    for tp in opts("tp", tps):
        cps = [c for c in _powers(MAX_CP) if (gpus // tp) % c == 0
               and work.seq_len % (2 * c) == 0] if work.seq_len >= 4096 else [1]
        for cp in opts("cp", cps or [1]):
            # stages of ⌈L/p⌉ layers, the last ones fewer where p does not divide L
            # (Megatron-LM's first/last-stage layer counts, torchtitan's split points)
            for pp in opts("pp", [p for p in range(1, L + 1) if (gpus // (tp * cp)) % p == 0
                                  and -(-L // p) * (p - 1) < L]):
                if gpus % (tp * cp * pp):
                    continue
                dp = gpus // (tp * cp * pp)
                if ("dp" in fx and fx["dp"] != dp) or work.global_batch % dp:
                    continue
                yield from _inner(work, fw, fx, tp, cp, pp, dp, opts)


def _inner(work: Workload, fw: Framework, fx: dict[str, Any], tp: int, cp: int, pp: int,
           dp: int, opts: Any) -> Iterator[Group]:
    local = work.global_batch // dp
    per_stage = -(-work.spec.total_layers // pp)
    experts = work.spec.n_experts
    # (Megatron-Core's MoE parallel folding: the expert-parallel group may take in the
    # tensor-parallel ranks too, ep dividing tp · cp · dp)
    eps = [e for e in _divisors(experts) if (tp * dp * cp) % e == 0] if experts else [1]
    mbs = [b for b in _divisors(local) if b <= MAX_MICRO_BATCH]
    sps = [True] if tp > 1 and fw.name == "torchtitan" else ([True, False] if tp > 1
                                                               else [False])
    zeros = tuple(opts("zero", list(fw.zero_stages)))
    for ep in opts("ep", eps):
        for mb in opts("mb", mbs):
            if local % mb:
                continue
            m = local // mb
            vps = [1]
            if pp > 1 and "interleaved" in fw.schedules and m % pp == 0:
                vps += [v for v in _divisors(per_stage) if v > 1]
            for rc in opts("recompute", list(fw.recompute)):
                for sp in opts("sp", sps):
                    yield Group(Layout(tp, pp, dp, cp, ep, 1, mb, zeros[0], rc, sp),
                                tuple(opts("vp", vps)), zeros)


def layouts(work: Workload, gpus: int, fw: Framework, domain: int,
            fixed: dict[str, Any] | None = None) -> Iterator[Layout]:
    for g in groups(work, gpus, fw, domain, fixed):
        yield from g.layouts()


def states_lower_bound(model: StepModel, lay: Layout) -> float:
    """Bytes per GPU no layout can go below: the 16-bit weights of its stage (whole unless
    ZeRO-3) and the sharded fp32 master weights, gradients and Adam moments (16 bytes per
    parameter over the ZeRO group)."""
    params = -(-model.n_layers // lay.pp) * model.layer_params(lay.tp, lay.ep) \
        + model.edge_params(lay.tp)
    group = lay.dp * lay.cp
    whole = 2.0 if lay.zero < 3 else 0.0
    return params * (whole + (16.0 / group if lay.zero >= 1 else 16.0))


def settings_for(model: StepModel, lay: Layout, m: int) -> Any:
    """tcalc's memory Settings for a layout, as its framework runs it: Megatron-LM's
    16-bit model with fp32 master weights and its activation formula (recomputing
    everything: the layer inputs only, from transformers' layers), or torch AMP under FSDP."""
    from transformer_calc.memory import Settings

    work = model.work
    megatron = model.fw.sharding == "megatron" and lay.zero < 3
    full = lay.recompute == "full"
    return Settings(
        precision="bf16", mixed=True, recipe="megatron" if megatron else "amp",
        activations="megatron" if megatron and not full else "hf",
        attention="sdpa", gpus=lay.gpus, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep,
        zero=lay.zero, batch_size=lay.mb, seq_len=work.seq_len,
        recompute="selective" if megatron and lay.recompute == "none" else lay.recompute,
        sequence_parallel=lay.sp and lay.tp > 1, micro_batches=m if lay.pp > 1 else 0,
        grad_accum=m if lay.pp == 1 else 1, tp_plan="vocab" if lay.tp > 1 else "",
        dropout=False)


class MemoryCheck:
    """The memory core per layout, cached by what the peak depends on."""

    def __init__(self, model: StepModel) -> None:
        from transformer_calc.params import count_params

        self.model = model
        self.spec = model.work.spec
        self.params = count_params(self.spec)
        self.calls = 0

    def peak(self, lay: Layout) -> int:
        m = self.model.work.global_batch // (lay.dp * lay.mb)
        # (the peak depends on dp only through ZeRO's and expert parallelism's groups, and on
        # the micro-batches only up to the stages in flight)
        key = lay._replace(vp=1, dp=lay.dp if lay.zero or lay.ep > 1 else 1)
        base, acts = self._peak(key, min(m, lay.pp) if lay.pp > 1 else m)
        if lay.cp > 1 and settings_for(self.model, lay, m).activations == "megatron":
            # Megatron-LM's activation formula (memory.megatron_activations) is written for
            # the whole sequence: each context-parallel rank holds T/cp of it
            base -= acts - acts // lay.cp
            acts //= lay.cp
        if lay.vp > 1:
            # Megatron-LM's theoretical memory: the interleaved schedule keeps
            # 1 + (p − 1)/(p·v) times the activations in flight
            base += round(acts * (lay.pp - 1) / (lay.pp * lay.vp))
        return base

    @functools.lru_cache(maxsize=256)  # noqa: B019
    def _stages(self, pp: int) -> tuple[Any, Any]:
        """The model the memory core sees for ``pp`` stages, and its parameters: itself, or
        for an uneven split one of p·⌈L/p⌉ layers (every stage as busy as the busiest)."""
        if self.spec.total_layers % pp == 0:
            return self.spec, self.params
        from transformer_calc.params import count_params

        spec = dataclasses.replace(self.spec, n_layers=-(-self.spec.total_layers // pp) * pp)
        return spec, count_params(spec)

    @functools.lru_cache(maxsize=65536)  # noqa: B019
    def _peak(self, lay: Layout, m: int) -> tuple[int, int]:
        from transformer_calc.memory import memory_report

        self.calls += 1
        spec, params = self._stages(lay.pp)
        r = memory_report(spec, settings_for(self.model, lay, m), params=params)
        acts = next((i.total for i in r.per_gpu.items if i.name == "activations"), 0)
        return r.peak, acts


def search(work: Workload, cluster: Cluster, fw: Framework, cal: Calibration, gpus: int,
           *, top: int = 5, fixed: dict[str, Any] | None = None, async_tp: bool = False,
           memory_budget: int | None = None, check_memory: bool = True) -> SearchResult:
    """The ``top`` fastest layouts that fit the memory, fastest first (without
    ``check_memory``: the fastest, their memory not asked).

    Best-first: each group's compute alone bounds all its layouts from below, so groups are
    opened in the order of their bound and a layout is taken (its memory checked by the
    core) only when no unopened group can beat it; the answer is the one an exhaustive
    evaluation gives, most groups never timed."""
    t0 = time.perf_counter()
    model = StepModel(work, cluster, fw, cal, async_tp=async_tp)
    budget = memory_budget if memory_budget is not None else \
        cluster.gpu.memory_bytes - RESERVE_BYTES
    bounded: list[tuple[float, int, Group]] = []
    total = kept = 0
    for i, g in enumerate(groups(work, gpus, fw, cluster.domain, fixed)):
        n = len(g.vps) * len(g.zeros)
        total += n
        # (the analytic bound at the group's highest ZeRO stage: the lowest it can go)
        if states_lower_bound(model, g.base._replace(zero=max(g.zeros))) > budget:
            continue
        kept += n
        bounded.append((model.compute_bound(g.base), i, g))
    bounded.sort(key=lambda b: (b[0], b[1]))
    check = MemoryCheck(model)
    best: list[Candidate] = []
    ready: list[tuple[float, int, Layout, StepTime]] = []  # a heap of timed layouts
    opened, serial = 0, 0
    while len(best) < top and (ready or opened < len(bounded)):
        if opened < len(bounded) and (not ready or bounded[opened][0] < ready[0][0]):
            for lay in bounded[opened][2].layouts():
                if states_lower_bound(model, lay) > budget:
                    continue
                st = model.step(lay)
                heapq.heappush(ready, (st.total, serial, lay, st))
                serial += 1
            opened += 1
            continue
        _, _, lay, st = heapq.heappop(ready)
        if not check_memory:
            best.append(Candidate(lay, st, 0))
            continue
        try:
            peak = check.peak(lay)
        except TcalcError:
            continue
        if peak <= budget:
            best.append(Candidate(lay, st, peak))
    return SearchResult(tuple(best), total, kept, check.calls, time.perf_counter() - t0,
                        budget)
