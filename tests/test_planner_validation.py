"""The step model against the published runs of the development set (a copy in
tests/data/published_runs_dev.json): each row predicted with the calibration fitted without
its source. The bounds below are what holds today (docs/planner.md states the goals and how
far each is); they fail if the model gets worse, and the page must equal what
tools/planner_validation.py writes from the code."""

from __future__ import annotations

import statistics

import pytest
from conftest import ROOT, load_tool


@pytest.fixture(scope="module")
def tool():  # type: ignore[no-untyped-def]
    return load_tool("planner_validation")


@pytest.fixture(scope="module")
def results(tool):  # type: ignore[no-untyped-def]
    return tool.Results()


def test_the_page_shows_what_the_code_computes(tool, results) -> None:
    page = (ROOT / "docs" / "planner.md").read_text(encoding="utf-8")
    assert tool.render(page, results) == page, "run: python tools/planner_validation.py"


def test_every_row_is_in_the_table(results) -> None:
    assert len(results.rows) == 608
    assert len(results.used) >= 310


def test_the_errors_stay_where_they_are(results) -> None:
    # goal: median ≤ 5 % (held out by source: 4.7 %, carried by the 216 rows of llm-foundry's
    # MPT sweep; the other sources' medians are 5-19 %, docs/planner.md)
    errors = [abs(r.error) for r in results.used]
    assert statistics.median(errors) <= 0.05
    assert sum(e <= 0.10 for e in errors) >= 0.70 * len(errors)
    assert sum(e <= 0.20 for e in errors) >= 0.85 * len(errors)
    mpt = [abs(r.error) for r in results.used if r.case.source == "mosaic_mpt"]
    others = [abs(r.error) for r in results.used if r.case.source != "mosaic_mpt"]
    assert statistics.median(mpt) <= 0.04 and statistics.median(others) <= 0.15


def test_korthikantis_rows_are_within_11_percent(results) -> None:
    # Korthikanti et al. 2022, Tables 4 and 5 and the text: the Megatron-LM runs the model's
    # unfused attention, TP overlap and schedule are written for (goal: 10 %; Table 4's
    # full-recomputation layer is 10.3 % slow)
    rows = [r for r in results.used if r.case.source == "korthikanti2022"]
    assert len(rows) == 15
    assert all(abs(r.error) <= 0.11 for r in rows), [(r.case.id, r.error) for r in rows]
    assert sum(abs(r.error) <= 0.10 for r in rows) >= 14


def test_the_published_layout_is_often_in_the_top_5(results) -> None:
    tops = results.tops
    assert len(tops) >= 50
    assert sum(t.rank > 0 for t in tops) >= 0.5 * len(tops)
    # Korthikanti's and the Megatron-LM README's layouts, the most tuned of the set
    tuned = [t for t in tops if t.name.startswith(("korthikanti2022", "megatron_readme"))]
    assert sum(t.rank > 0 for t in tuned) >= 0.8 * len(tuned)
