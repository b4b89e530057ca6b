"""The layout planner: on N GPUs of a kind, which parallel layout fits and trains fastest,
with its step time split into where it goes, its throughput and MFU, and what a run of T
tokens costs. ``plan_training`` is the entry point; `tcalc plan` renders its report.

Modules: hardware (clusters as data), kernels (GEMMs by shape, attention, memory-bound
passes), collectives (α-β per network tier), layer (one layer's ops for one micro-batch),
step (the step's composition: pipeline schedule, overlap, data parallelism), frameworks
(how each framework runs a step, as data), search (layouts, memory pruning, ranking),
calibration (the fitted efficiency parameters), runs and validate (the published runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from transformer_calc.planner.step import Layout, StepTime, Workload
from transformer_calc.spec import ModelSpec

__all__ = ["Layout", "PlanReport", "Ranked", "StepTime", "Workload", "plan_training"]


class Ranked(NamedTuple):
    """One layout of the search, with what it delivers."""

    layout: Layout
    time: StepTime
    peak_bytes: int
    tokens_per_s_per_gpu: float
    mfu: float  # model FLOPs (tcalc flops, no recomputation) / the GEMM dtype's dense peak
    hfu: float  # the same with the recomputation's FLOPs


class PlanReport(NamedTuple):
    model: str
    cluster: str
    cluster_description: str
    gpu: str
    framework: str
    gpus: int
    global_batch: int
    seq_len: int
    precision: str
    peak_flops: float  # per GPU, the dense peak MFU divides by
    flops_per_token: int  # model FLOPs per token (training, no recomputation)
    ranked: tuple[Ranked, ...]  # fastest first
    layouts: int  # layouts the framework allows
    after_bound: int  # left after the analytic memory bound
    memory_calls: int
    search_seconds: float
    budget_bytes: int
    calibration: str
    trained_on: tuple[str, ...]
    tokens: int | None  # the run's tokens (--tokens), or None

    @property
    def best(self) -> Ranked | None:
        return self.ranked[0] if self.ranked else None

    def run_days(self, r: Ranked) -> float | None:
        if not self.tokens:
            return None
        return self.tokens / (r.tokens_per_s_per_gpu * self.gpus) / 86400

    def gpu_hours(self, r: Ranked) -> float | None:
        days = self.run_days(r)
        return None if days is None else days * 24 * self.gpus


def plan_training(spec: ModelSpec, *, gpus: int, global_batch: int, seq_len: int,
                  gpu: str | None = None, cluster: str | None = None,
                  framework: str = "megatron", precision: str = "bf16", top: int = 5,
                  fixed: Mapping[str, object] | None = None, tokens: int | None = None
                  ) -> PlanReport:
    """Search the layouts of training ``spec`` on ``gpus`` GPUs, fastest first."""
    from transformer_calc.errors import TcalcError
    from transformer_calc.flops import count_flops, training_flops_per_token
    from transformer_calc.planner.calibration import calibration, trained_on
    from transformer_calc.planner.frameworks import framework as framework_of
    from transformer_calc.planner.hardware import cluster_for
    from transformer_calc.planner.search import search

    if gpus < 1 or global_batch < 1 or seq_len < 1:
        raise TcalcError("--gpus, --global-batch and --seq-len: expected integers >= 1")
    if top < 1:
        raise TcalcError("--top: expected an integer >= 1")
    spec.require_runnable()
    spec.require_training_memory()
    spec.check_context(seq_len)
    where = cluster_for(gpu, cluster)
    fw = framework_of(framework)
    cal = calibration()
    work = Workload(spec, seq_len, global_batch, precision)
    found = search(work, where, fw, cal, gpus, top=top, fixed=dict(fixed or {}))
    forward = count_flops(spec, seq_len)
    per_token = training_flops_per_token(forward, "none")
    peak = where.gpu.peak("bf16" if precision == "bf16" else "fp8")
    ranked = []
    for c in found.best:
        tps = global_batch * seq_len / (c.time.total * gpus)
        hw = training_flops_per_token(forward, c.layout.recompute)
        ranked.append(Ranked(c.layout, c.time, c.peak_bytes, tps, per_token * tps / peak,
                             hw * tps / peak))
    return PlanReport(spec.name, where.name, where.description, where.gpu.name, fw.name, gpus,
                      global_batch, seq_len, precision, peak, per_token, tuple(ranked),
                      found.layouts, found.after_bound, found.memory_calls, found.seconds,
                      found.budget_bytes, cal.name, trained_on(cal.name), tokens)
