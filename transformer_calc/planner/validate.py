"""The step model against published runs: each usable case predicted with the calibration
fitted without its source (its fold), the error of its throughput (TFLOP/s per GPU in the
source's own convention, which for one layout is the error of tokens/s too), and ranking
checks on same-cluster sweeps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from transformer_calc.planner.calibration import Calibration
from transformer_calc.planner.runs import Case
from transformer_calc.planner.search import search
from transformer_calc.planner.step import Layout, StepModel, StepTime, Workload


class Prediction(NamedTuple):
    case: Case
    layout: Layout
    time: StepTime
    predicted_s: float
    error: float  # predicted throughput / measured − 1
    searched: tuple[str, ...]  # the knobs the source leaves out, chosen by the search


def workload(case: Case) -> Workload:
    assert case.spec is not None
    return Workload(case.spec, case.seq_len, case.global_batch, case.precision)


LAYOUT_KNOBS = ("tp", "pp", "dp", "cp", "ep", "vp", "mb", "zero", "recompute", "sp")


def predict(case: Case, cal: Calibration, layout: Layout | None = None) -> Prediction:
    """The case's step time: its own layout, the knobs it leaves out searched (or taken
    from ``layout``, a layout the search chose before)."""
    assert case.cluster is not None and case.framework is not None
    work = workload(case)
    missing = tuple(k for k in LAYOUT_KNOBS if k not in case.fixed)
    model = StepModel(work, case.cluster, case.framework, cal, async_tp=case.async_tp)
    if case.metric == "layer":
        return _layer(case, model)
    if not missing or layout is not None:
        lay = layout or Layout(**case.fixed)
        st = model.step(lay)
    else:
        found = search(work, case.cluster, case.framework, cal, case.gpus, top=1,
                       fixed=case.fixed, async_tp=case.async_tp)
        if found.best:
            lay, st = found.best[0].layout, found.best[0].time
        else:  # nothing fits the memory model: the fastest of what the source allows
            found = search(work, case.cluster, case.framework, cal, case.gpus, top=1,
                           fixed=case.fixed, async_tp=case.async_tp, check_memory=False)
            lay, st = found.best[0].layout, found.best[0].time
    return Prediction(case, lay, st, st.total, case.measured_s / st.total - 1, missing)


def _layer(case: Case, model: StepModel) -> Prediction:
    """Korthikanti et al.'s Table 4: one layer's forward and backward, no step around it."""
    fx = case.fixed
    lay = Layout(tp=fx["tp"], mb=fx.get("mb", 1), recompute=fx.get("recompute", "none"),
                 sp=fx.get("sp", False))
    x = model.layer(lay.tp, 1, 1, lay.mb, lay.sp)
    st_full = model.step(lay._replace(dp=1))
    # the layer's share of the step's exposed TP communication, compute and recompute
    tp_layer = st_full.tp / st_full.micro_batches / model.n_layers
    redo = {"none": 0.0, "full": x.fwd, "selective": x.attn_fwd}[lay.recompute]
    t = x.fwd + x.bwd + redo + tp_layer
    st = StepTime(t - tp_layer, 0, tp_layer, 0, 0, 0, 0, 0, 0, 1)
    return Prediction(case, lay, st, t, case.measured_s / t - 1, ())


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's τ-b between two rankings (ties counted as neither concordant nor
    discordant, as scipy.stats.kendalltau's default variant does)."""
    n = len(a)
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return (conc - disc) / denom if denom else math.nan


class Row(NamedTuple):
    """One published run against the planner: measured and predicted throughput (TFLOP/s
    per GPU in the source's convention; tokens/s per GPU where it has none; one layer's
    seconds for Korthikanti's Table 4)."""

    case: Case
    prediction: Prediction | None
    measured: float
    predicted: float
    unit: str  # "TFLOP/s" | "tokens/s" | "layer ms"

    @property
    def error(self) -> float:
        return self.prediction.error if self.prediction else math.nan


def rows(cases: Sequence[Case], calibration_of: Callable[[str], Calibration]) -> list[Row]:
    """Every case, predicted with its source's fold (left-out rows without a prediction)."""
    out = []
    for c in cases:
        if c.reason:
            out.append(Row(c, None, math.nan, math.nan, ""))
            continue
        p = predict(c, calibration_of(c.source))
        if c.metric == "layer":
            out.append(Row(c, p, c.measured_s * 1e3, p.predicted_s * 1e3, "layer ms"))
        elif c.conv_flops:
            out.append(Row(c, p, c.conv_flops / (c.measured_s * c.gpus) / 1e12,
                           c.conv_flops / (p.predicted_s * c.gpus) / 1e12, "TFLOP/s"))
        else:
            tokens = c.global_batch * c.seq_len / c.gpus
            out.append(Row(c, p, tokens / c.measured_s, tokens / p.predicted_s, "tokens/s"))
    return out


class Sweep(NamedTuple):
    """Runs of one source on one cluster (model, GPU, GPU count), ranked by throughput."""

    name: str
    ids: tuple[str, ...]
    tau: float


def _model_flops(c: Case) -> float:
    """FLOPs of a step that make runs of different lengths comparable: the source's
    convention, else tcalc's model FLOPs (flops.count_flops, no recomputation)."""
    if c.conv_flops:
        return c.conv_flops
    from transformer_calc.flops import count_flops, training_flops_per_token

    assert c.spec is not None
    per_token = training_flops_per_token(count_flops(c.spec, c.seq_len), "none")
    return float(per_token) * c.global_batch * c.seq_len


def sweeps(got: Sequence[Row], least: int = 3) -> list[Sweep]:
    """Kendall's τ between measured and predicted FLOP/s per GPU over each same-cluster
    sweep of at least ``least`` runs."""
    by: dict[tuple[str, str, str, int], list[Row]] = {}
    for r in got:
        c = r.case
        if r.prediction is None or c.metric == "layer" or c.cluster is None:
            continue
        by.setdefault((c.source, c.spec.name if c.spec else "", c.cluster.name, c.gpus),
                      []).append(r)
    out = []
    for (source, model, cluster, gpus), rs in sorted(by.items()):
        if len(rs) < least:
            continue
        meas = [_model_flops(r.case) / r.case.measured_s for r in rs]
        pred = [_model_flops(r.case) / r.prediction.predicted_s for r in rs if r.prediction]
        out.append(Sweep(f"{source}: {model} on {gpus} × {cluster}",
                         tuple(r.case.id for r in rs), kendall_tau(meas, pred)))
    return out


class TopCheck(NamedTuple):
    """Whether a published layout's degrees are among the search's fastest."""

    name: str
    published: tuple[int, int, int, int]  # tp, pp, cp, ep
    rank: int  # 1-based among the search's distinct degrees; 0: not in the first ``top``
    choices: int  # distinct degree tuples the framework allows (1: nothing to choose)
    ids: tuple[str, ...]


def top_checks(cases: Sequence[Case], calibration_of: Callable[[str], Calibration],
               top: int = 5) -> list[TopCheck]:
    """For each distinct published workload, the rank of its layout's degrees (tp, pp, cp,
    ep) among the search's fastest layouts that fit, with the knobs searched freely."""
    from transformer_calc.planner.search import groups

    seen: dict[tuple[object, ...], list[Case]] = {}
    for c in cases:
        if c.reason or c.metric == "layer" or c.cluster is None or c.framework is None:
            continue
        f = c.fixed
        seen.setdefault((c.source, c.spec.name if c.spec else "", c.cluster.name,
                         c.framework, c.gpus, c.global_batch, c.seq_len, c.precision,
                         c.async_tp, (f["tp"], f["pp"], f.get("cp", 1), f.get("ep", 1))),
                        []).append(c)
    out = []
    for key, cs in seen.items():
        c = cs[0]
        assert c.cluster is not None and c.framework is not None
        work = workload(c)
        published = key[-1]
        assert isinstance(published, tuple)
        degrees = {(g.base.tp, g.base.pp, g.base.cp, g.base.ep)
                   for g in groups(work, c.gpus, c.framework, c.cluster.domain)}
        if len(degrees) < 2:
            continue  # (data parallelism alone: nothing to rank)
        found = search(work, c.cluster, c.framework, calibration_of(c.source), c.gpus,
                       top=40, async_tp=c.async_tp)
        order: list[tuple[int, int, int, int]] = []
        for cand in found.best:
            d = (cand.layout.tp, cand.layout.pp, cand.layout.cp, cand.layout.ep)
            if d not in order:
                order.append(d)
        rank = order.index(published) + 1 if published in order[:top] else 0
        name = f"{c.source}: {key[1]}, {c.gpus} × {c.cluster.name}, batch {c.global_batch}" \
               f" × {c.seq_len}"
        out.append(TopCheck(name, published, rank, len(degrees), tuple(x.id for x in cs)))
    return out
