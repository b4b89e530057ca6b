"""`tcalc plan`'s Doc: the verdict first (the best layout, its step time, throughput, MFU
and what the run costs), then the fastest layouts with their step time split into where it
goes, then how the search ran."""

from __future__ import annotations

from typing import Any

from transformer_calc.render.doc import Column, Doc, Table, Text
from transformer_calc.render.units import human, human_bytes

# the breakdown's parts: (StepTime field, column header, what it is in JSON)
PARTS = (("compute", "compute"), ("bubble", "bubble"), ("tp", "TP"), ("cp", "CP"),
         ("ep", "EP"), ("pp", "PP"), ("dp", "DP"), ("optimizer", "optim"),
         ("overhead", "other"))


def _knobs(lay: Any) -> str:
    parts = [f"micro-batch {lay.mb}", f"ZeRO-{lay.zero}" if lay.zero else "no ZeRO",
             f"{lay.recompute} recompute" if lay.recompute != "none" else "no recompute"]
    if lay.sp:
        parts.append("sequence parallel")
    return ", ".join(parts)


def _seconds(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.2f}" if x < 100 else f"{x:,.1f}"


def _layout_dict(report: Any, r: Any) -> dict[str, Any]:
    lay, t = r.layout, r.time
    out: dict[str, Any] = {
        "layout": lay._asdict(), "step_seconds": t.total,
        "breakdown_seconds": {f: getattr(t, f) for f, _ in PARTS},
        "micro_batches": t.micro_batches, "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
        "mfu": r.mfu, "hfu": r.hfu, "peak_bytes_per_gpu": r.peak_bytes}
    if report.tokens:
        out["run_days"] = report.run_days(r)
        out["gpu_hours"] = report.gpu_hours(r)
    return out


def plan_doc(report: Any) -> Doc:
    """report: planner.PlanReport."""
    data = {"schema": "tcalc.plan/1", "model": report.model, "gpu": report.gpu,
            "cluster": report.cluster, "framework": report.framework, "gpus": report.gpus,
            "global_batch": report.global_batch, "seq_len": report.seq_len,
            "precision": report.precision, "tokens": report.tokens,
            "peak_flops_per_gpu": report.peak_flops,
            "model_flops_per_token": report.flops_per_token,
            "layouts": [_layout_dict(report, r) for r in report.ranked],
            "search": {"layouts": report.layouts, "after_memory_bound": report.after_bound,
                       "memory_core_calls": report.memory_calls,
                       "seconds": report.search_seconds,
                       "memory_budget_bytes": report.budget_bytes},
            "calibration": {"name": report.calibration,
                            "trained_on": list(report.trained_on)}}
    title = (f"{report.model} on {report.gpus:,} × {report.gpu} ({report.cluster}, "
             f"{report.framework}, {report.precision}): global batch "
             f"{report.global_batch:,} × {report.seq_len:,} tokens")
    blocks: list[Any] = [Text([], "title", title)]
    best = report.best
    if best is None:
        blocks.append(Text([f"no layout fits {human_bytes(report.budget_bytes)} per GPU: "
                            "more GPUs, a smaller global batch or a shorter sequence"],
                           "lines"))
        return Doc(data, blocks + [Text(_notes(report), "notes")])
    lines = [f"best: {best.layout.describe()}, {_knobs(best.layout)}",
             f"step {_seconds(best.time.total)} s · {best.tokens_per_s_per_gpu:,.0f} "
             f"tokens/s/GPU · MFU {100 * best.mfu:.1f}% (HFU {100 * best.hfu:.1f}%) · peak "
             f"{human_bytes(best.peak_bytes)} per GPU"]
    if report.tokens:
        lines.append(f"{human(report.tokens)} tokens: {report.run_days(best):,.1f} days, "
                     f"{human(report.gpu_hours(best) or 0)} GPU-hours")
    blocks.append(Text(lines, "lines"))
    blocks.append(_table(report))
    blocks.append(Text(_notes(report), "notes"))
    return Doc(data, blocks)


def _table(report: Any) -> Table:
    shown = [(f, h) for f, h in PARTS
             if any(getattr(r.time, f) > 0 for r in report.ranked)]
    # on a narrow terminal the knobs and the breakdown's smaller parts leave first (the
    # verdict above names the best layout's knobs)
    columns = [Column("#", True), Column("layout"), Column("mb", True, drop=14),
               Column("ZeRO", True, drop=16), Column("recompute", drop=15),
               Column("step s", True), Column("tok/s/GPU", True, drop=17),
               Column("MFU", True)]
    ranks = {"compute": 0, "bubble": 8, "tp": 9, "dp": 10, "pp": 11, "ep": 12, "cp": 13,
             "optimizer": 19, "overhead": 20}
    columns += [Column(h, True, drop=ranks[f]) for f, h in shown]
    columns.append(Column("peak", True, drop=18))
    rows = []
    for i, r in enumerate(report.ranked, 1):
        lay = r.layout
        rows.append([str(i), lay.describe() + (" sp" if lay.sp else ""), str(lay.mb),
                     str(lay.zero), lay.recompute, _seconds(r.time.total),
                     f"{r.tokens_per_s_per_gpu:,.0f}", f"{100 * r.mfu:.1f}%"]
                    + [_seconds(getattr(r.time, f)) for f, _ in shown]
                    + [human_bytes(r.peak_bytes)])
    return Table(f"The {len(rows)} fastest layouts that fit: a step's seconds, where they go",
                 columns, rows)


def _notes(report: Any) -> list[str]:
    fitted = ", ".join(report.trained_on) or "none (priors)"
    return [
        f"searched {report.layouts:,} layouts; {report.after_bound:,} left after the "
        f"analytic memory bound, {report.memory_calls:,} checked by the memory core, in "
        f"{report.search_seconds:.2f} s",
        f"memory: the busiest pipeline stage's peak (tcalc memory) within "
        f"{human_bytes(report.budget_bytes)} per GPU (the capacity less 3 GiB for the CUDA "
        "context, workspaces and fragmentation)",
        "TP, CP, EP, PP, DP: communication not hidden behind compute; bubble: pipeline fill "
        "and drain; other: a constant per step (data loading, logging)",
        f"MFU: model FLOPs ({human(report.flops_per_token)} per token, tcalc flops: "
        "matmuls, causal attention counted in full) over the dense "
        f"{report.precision if report.precision == 'bf16' else 'fp8'} peak "
        f"({report.peak_flops / 1e12:,.0f} TFLOP/s); HFU adds the recomputation",
        f"step-time model calibrated on published runs ({fitted}); see docs/planner.md for "
        "its error on each",
    ]
