"""Write the planner's validation into docs/planner.md: the error of every published run
(each predicted with the calibration fitted without its source), the ranking checks, and
the summary. tests/test_planner_validation.py asserts the page equals what this writes.

    .venv/bin/python tools/planner_validation.py          # rewrite docs/planner.md
    .venv/bin/python tools/planner_validation.py --check  # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformer_calc.planner.calibration import calibration  # noqa: E402
from transformer_calc.planner.runs import cases  # noqa: E402
from transformer_calc.planner.validate import (  # noqa: E402
    Row,
    Sweep,
    TopCheck,
    rows,
    sweeps,
    top_checks,
)

RUNS = ROOT / "tests" / "data" / "published_runs_dev.json"
PAGE = ROOT / "docs" / "planner.md"
START, END = "<!-- planner-validation: start -->", "<!-- planner-validation: end -->"


class Results:
    """Everything the page shows, computed once."""

    def __init__(self) -> None:
        self.cases = cases(RUNS)
        self.rows = rows(self.cases, calibration)
        self.sweeps = sweeps(self.rows)
        self.tops = top_checks(self.cases, calibration)

    @property
    def used(self) -> list[Row]:
        return [r for r in self.rows if r.prediction is not None]


def _pct(x: float) -> str:
    return "" if math.isnan(x) else f"{100 * x:+.1f}%"


def _num(x: float) -> str:
    if math.isnan(x):
        return ""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def summary(res: Results) -> list[str]:
    used = res.used
    errs = [abs(r.error) for r in used]
    head = [r for r in used if r.case.tier == "A"]
    taus = [s.tau for s in res.sweeps if not math.isnan(s.tau)]
    ranked = [t for t in res.tops]
    out = [
        f"- rows: {len(res.rows)}; predicted: {len(used)}; left out (the reason in the "
        f"table): {len(res.rows) - len(used)}",
        f"- median |error|: {100 * statistics.median(errs):.1f}% (goal ≤ 5%); within 10%: "
        f"{sum(e <= 0.10 for e in errs)} of {len(errs)}; within 20%: "
        f"{sum(e <= 0.20 for e in errs)}",
        f"- headline rows (tier A): {len(head)}, median |error| "
        f"{100 * statistics.median(abs(r.error) for r in head):.1f}%, "
        f"{sum(abs(r.error) <= 0.10 for r in head)} within 10% (goal: all), worst "
        f"{_pct(max((r.error for r in head), key=abs))}",
        f"- same-cluster sweeps: {len(taus)}, Kendall τ median {statistics.median(taus):.2f}, "
        f"{sum(t >= 0.8 for t in taus)} at τ ≥ 0.8 (goal: all)",
        f"- published layouts in the search's top 5: {sum(t.rank > 0 for t in ranked)} of "
        f"{len(ranked)} workloads with a choice of degrees",
    ]
    return out


def by_source(res: Results) -> list[str]:
    groups: dict[str, list[float]] = defaultdict(list)
    for r in res.used:
        groups[r.case.source].append(r.error)
    lines = ["| source | rows | median error | median abs. error | worst | within 10% |",
             "|---|---|---|---|---|---|"]
    for src, es in sorted(groups.items()):
        lines.append(f"| {src} | {len(es)} | {_pct(statistics.median(es))} | "
                     f"{100 * statistics.median(abs(e) for e in es):.1f}% | "
                     f"{_pct(max(es, key=abs))} | {sum(abs(e) <= 0.1 for e in es)} |")
    return lines


def _layout(r: Row) -> str:
    p = r.prediction
    if p is None:
        return ""
    lay = p.layout
    text = f"{lay.describe()} mb{lay.mb} z{lay.zero} {lay.recompute}" + (" sp" if lay.sp
                                                                          else "")
    return text + (f" (searched: {', '.join(p.searched)})" if p.searched else "")


def table(res: Results) -> list[str]:
    lines = ["| run | source | tier | measured | predicted | unit | error | layout |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res.rows:
        c = r.case
        if r.prediction is None:
            lines.append(f"| {c.id} | {c.source} | {c.tier} |  |  |  | left out | "
                         f"{c.reason.replace('|', '/')} |")
            continue
        lines.append(f"| {c.id} | {c.source} | {c.tier} | {_num(r.measured)} | "
                     f"{_num(r.predicted)} | {r.unit} | {_pct(r.error)} | {_layout(r)} |")
    return lines


def sweep_table(sw: Sequence[Sweep]) -> list[str]:
    lines = ["| sweep | runs | Kendall τ |", "|---|---|---|"]
    lines += [f"| {s.name} | {len(s.ids)} | {s.tau:+.2f} |" for s in sw]
    return lines


def top_table(tops: Sequence[TopCheck]) -> list[str]:
    lines = ["| workload | published tp, pp, cp, ep | degree choices | rank in the search |",
             "|---|---|---|---|"]
    for t in tops:
        lines.append(f"| {t.name} | {', '.join(map(str, t.published))} | {t.choices} | "
                     f"{t.rank if t.rank else 'not in the top 5'} |")
    return lines


def section(res: Results) -> str:
    parts = ["### Summary", "", *summary(res), "", "### By source", "", *by_source(res), "",
             "### Same-cluster sweeps (Kendall τ of FLOP/s per GPU, measured against "
             "predicted)", "", *sweep_table(res.sweeps), "",
             "### Published layouts against the search (degrees tp, pp, cp, ep; the knobs "
             "searched freely)", "", *top_table(res.tops), "",
             "### Every row", "", *table(res)]
    return "\n".join(parts)


def clusters() -> str:
    from transformer_calc.planner.hardware import CLUSTERS

    lines = ["| cluster (`--cluster`) | GPU | SMs | NVLink domain | NIC per GPU | sources |",
             "|---|---|---|---|---|---|"]
    for c in CLUSTERS.values():
        lines.append(
            f"| {c.name} | {c.gpu.name} | {c.sms} | {c.domain} × {c.nvlink.bandwidth / 1e9:g}"
            f" GB/s, {c.nvlink.efficiency:.0%} reached | {c.network.bandwidth / 1e9:g} GB/s, "
            f"{c.network.efficiency:.0%} reached | {c.gpu.source}; {c.nvlink.source}; "
            f"{c.network.source} |")
    return "\n".join(["## Clusters", "", *lines, "",
                      "`--gpu` plans on the DGX/HGX node of that GPU (A100, H100, H200, "
                      "B200); the others are the clusters published runs ran on."])


def calibration_table() -> str:
    import json

    from transformer_calc.planner.calibration import CALIBRATION_FILE, PRIORS

    data = json.loads(CALIBRATION_FILE.read_text(encoding="utf-8"))
    folds = data["folds"]
    lines = ["| parameter | what it is | prior | fitted on all | range over the folds |",
             "|---|---|---|---|---|"]
    for key, (prior, why) in PRIORS.items():
        got = [f["parameters"][key] for f in folds.values() if key not in f["unfitted"]]
        fitted = "" if key in data["all"]["unfitted"] else f"{data['all']['parameters'][key]:g}"
        span = f"{min(got):g} - {max(got):g}" if got else ""
        lines.append(f"| `{key}` | {why} | {prior:g} | {fitted or 'not fitted'} | {span} |")
    return "\n".join([f"Fitted {data['fitted']} on {data['rows']} rows "
                      f"({len(folds)} sources):", "", *lines])


BLOCKS = {"planner-clusters": clusters, "planner-calibration": calibration_table}


def render(text: str, res: Results) -> str:
    pattern = re.compile(re.escape(START) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{PAGE}: no {START} ... {END} block")
    text = pattern.sub(lambda _: f"{START}\n{section(res)}\n{END}", text)
    for name, make in BLOCKS.items():
        start, end = f"<!-- {name}: start -->", f"<!-- {name}: end -->"
        block = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
        if not block.search(text):
            raise SystemExit(f"{PAGE}: no {start} ... {end} block")
        text = block.sub(lambda _, make=make, start=start, end=end:
                         f"{start}\n{make()}\n{end}", text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page differs")
    args = ap.parse_args()
    text = PAGE.read_text(encoding="utf-8")
    new = render(text, Results())
    if args.check:
        sys.exit(0 if new == text else 1)
    PAGE.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
