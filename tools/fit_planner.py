"""Fit the planner's efficiency parameters on published runs, leave-one-source-out, and
write transformer_calc/planner/calibration.json.

    .venv/bin/python tools/fit_planner.py [--runs tests/data/published_runs_dev.json]

For each source (a publication: planner.runs.SOURCES) the parameters are fitted on every
other source's rows; the validation predicts that source's rows with them, so no source
validates what it fitted. "all" is fitted on every source and is what `tcalc plan` uses.

Objective: the squared log error of the step time, each source weighted equally (one
source's 216 rows count as much as another's 9), plus a weak pull of each parameter
towards its prior (calibration.PRIORS) in log space, so that a parameter no training row
informs stays at its prior (listed as "unfitted"). Minimised by Nelder-Mead over the log
parameters. Knobs a row leaves out are chosen by the planner's search with the current
parameters, then held while fitting; the fit runs twice so the choice follows the fit.

Pure Python, deterministic. Takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformer_calc.planner.calibration import (  # noqa: E402
    CALIBRATION_FILE,
    PRIORS,
    Calibration,
)
from transformer_calc.planner.runs import Case, cases  # noqa: E402
from transformer_calc.planner.step import Layout  # noqa: E402
from transformer_calc.planner.validate import predict  # noqa: E402

PRIOR_SIGMA = 0.5  # the pull towards the prior: a factor e^0.5 away costs one unit
VERSION = 1


def used_parameters(case: Case) -> set[str]:
    """The parameters a case's prediction reads."""
    assert case.cluster is not None and case.framework is not None
    arch = case.cluster.arch
    out = {f"gemm.{arch}.bf16", "elementwise"}
    if f"attention.{case.framework.attention}.{arch}" in PRIORS:
        out |= {f"attention.{case.framework.attention}.{arch}", "attention.falloff"}
    if case.precision != "bf16":
        out.add(f"gemm.{arch}.{'fp8_rowwise' if case.precision == 'fp8-rowwise' else 'fp8'}")
    if case.cluster.clock:
        out.add(case.cluster.clock)
    if case.metric != "layer":
        out.add("overhead_s")
    tp = case.fixed.get("tp", 1)
    if case.async_tp and tp > 1:
        out.add("tp_hidden.async")
    elif case.framework.name == "megatron" and tp > 1:
        out.add("tp_hidden.megatron")
    return out


def nelder_mead(f: Callable[[list[float]], float], x0: list[float], step: float = 0.15,
                iters: int = 400, tol: float = 1e-7) -> list[float]:
    """Minimise f from x0 (Nelder & Mead 1965, standard coefficients 1, 2, 0.5, 0.5)."""
    n = len(x0)
    pts = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)]
                        for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        centroid = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        worst = pts[-1]

        def toward(t: float, centroid: list[float] = centroid, worst: list[float] = worst
                   ) -> list[float]:
            return [c + t * (w - c) for c, w in zip(centroid, worst, strict=True)]

        refl = toward(-1.0)
        fr = f(refl)
        if fr < vals[0]:
            exp = toward(-2.0)
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = toward(0.5)
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:  # shrink towards the best
                best = pts[0]
                pts = [best] + [[b + 0.5 * (p - b) for b, p in zip(best, q, strict=True)]
                                for q in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    return pts[min(range(n + 1), key=lambda i: vals[i])]


# parameters that are fractions (of a peak, of a clock, of communication hidden): fitted
# through the logit, so they stay in (0, 1); the rest (scales, seconds) through the log
FRACTIONS = ("gemm.", "clock.", "tp_hidden.")


def _to(k: str, v: float) -> float:
    return math.log(v / (1 - v)) if k.startswith(FRACTIONS) else math.log(v)


def _from(k: str, x: float) -> float:
    return 1 / (1 + math.exp(-x)) if k.startswith(FRACTIONS) else math.exp(x)


def fit(train: Sequence[Case], layouts: dict[str, Layout], base: dict[str, float]
        ) -> tuple[dict[str, float], list[str]]:
    """Parameters fitted on ``train`` (layouts held), and those left at their prior."""
    used = sorted(set().union(*(used_parameters(c) for c in train)))
    weights = Counter(c.source for c in train)
    prior = {k: v for k, (v, _) in PRIORS.items()}

    def loss(x: list[float]) -> float:
        values = dict(base) | {k: _from(k, v) for k, v in zip(used, x, strict=True)}
        cal = Calibration(values, "fit")
        total = 0.0
        for c in train:
            p = predict(c, cal, layouts.get(c.id))
            total += math.log(c.measured_s / p.predicted_s) ** 2 / weights[c.source]
        reg = sum((v - _to(k, prior[k])) ** 2 for k, v in zip(used, x, strict=True))
        return total / len(weights) + reg * (0.002 / PRIOR_SIGMA ** 2)

    x = [_to(k, base.get(k, prior[k])) for k in used]
    for step in (0.3, 0.15, 0.05):  # restarts: Nelder-Mead stalls on long valleys
        x = nelder_mead(loss, x, step=step)
    fitted = dict(base) | {k: _from(k, v) for k, v in zip(used, x, strict=True)}
    return fitted, sorted(set(prior) - set(used))


def resolve(usable: Sequence[Case], values: dict[str, float]) -> dict[str, Layout]:
    """The layout the search picks for each case's unstated knobs, with ``values``."""
    cal = Calibration(values, "fit")
    return {c.id: predict(c, cal).layout for c in usable if c.metric != "layer"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "tests/data/published_runs_dev.json")
    ap.add_argument("--out", type=Path, default=CALIBRATION_FILE)
    args = ap.parse_args()
    usable = [c for c in cases(args.runs) if not c.reason]
    sources = sorted({c.source for c in usable})
    prior = {k: v for k, (v, _) in PRIORS.items()}
    out: dict[str, object] = {
        "version": VERSION, "fitted": date.today().isoformat(),
        "by": "tools/fit_planner.py", "runs": str(args.runs.relative_to(ROOT)),
        "rows": len(usable), "meaning": {k: why for k, (_, why) in PRIORS.items()},
        "priors": prior, "folds": {}}
    t0 = time.perf_counter()
    for fold in [None, *sources]:
        train = [c for c in usable if c.source != fold]
        values = dict(prior)
        for _ in range(2):  # choose the unstated knobs, fit, choose again, fit again
            layouts = resolve(train, values)
            values, unfitted = fit(train, layouts, values)
        entry = {"parameters": {k: round(v, 4) for k, v in sorted(values.items())},
                 "trained_on": sorted({c.source for c in train}),
                 "unfitted": unfitted, "rows": len(train)}
        if fold is None:
            out["all"] = entry
        else:
            out["folds"][fold] = entry  # type: ignore[index]
        print(f"{fold or 'all'}: {len(train)} rows, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
