"""What the op-graph family tests share: a measured fixture row as the graph's Run and as
memory_report's Settings, the check of a row against its measurement (the full trace, the
compiled structure and memory_report, each to the byte), and the check that a compiled
structure equals the full trace, on every output and on the named rows memory_report reads.

A family's test file checks all its measured rows in one test, each row once through each path
(the trace is shared by the checks that read it; the compiled structure is cached across rows,
so each structure compiles once), and the failure lists every failing row with what was
expected and what came back:

    ROWS = measured_rows(CONFIGS)

    def test_every_row_equals_the_measurement() -> None:
        every_row(ROWS, lambda row: check_measured(
            row, family_of(spec_of(row["config"])), row_run(row), spec_of(row["config"])))

check_measured's options say what a family checks beyond the saved bytes: the compiled result
against the trace on every output (compiled="traced"), memory_report's rows against the
trace's (report_rows), and a row's own assertions go in the function handed to every_row.
every_row serves any list of pinned cases the same way (the registry's and peft's counts, the
H100 runs): one pytest item per list, which costs far less than one per case, and a failure
that still names each failing case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any, Literal

from transformer_calc.graph import DTYPES, Lora, Run, evaluate
from transformer_calc.graph.compile import OUTPUTS, evaluate_fast
from transformer_calc.graph.evaluate import Family, Result
from transformer_calc.graph.modules import symbol_values
from transformer_calc.graph.names import by_name, component_rows, row_of
from transformer_calc.memory import Settings
from transformer_calc.spec import ModelSpec


def row_run(row: dict) -> Run:
    """A row of tests/data/activations_*_cpu.jsonl (tools/measure_activations_hf.py: the CPU,
    peft's LoRA as [rank, targets, dropout]) as the Run the graph evaluates."""
    lora = None
    if row.get("lora"):
        rank, targets, dropout = row["lora"]
        lora = Lora(rank, frozenset(targets.split(",")), dropout)
    return Run(row["B"], row["T"], DTYPES[row["dtype"]], "cpu", row["attention"], lora=lora)


def row_id(row: dict) -> str:
    """A measured row as a test reads it: config, attention (where the row ran a whole
    model), dtype, B, T, the experts' implementation where the row names one, the LoRA
    (rank, targets, dropout) or full, and the fixture file it came from."""
    parts = [row["config"].removesuffix(".json"), row.get("attention"), row["dtype"],
             f"B{row['B']}", f"T{row['T']}", row.get("experts"),
             "-".join(map(str, row.get("lora") or ())) or "full"]
    where = f" ({row['file']})" if "file" in row else ""
    return "-".join(p for p in parts if p) + where


def row_settings(row: dict, **more: object) -> Settings:
    """A row of tests/data/activations_*_cpu.jsonl as memory_report's Settings: the CPU, the
    row's dtype, batch, length and attention; peft's LoRA as [rank, targets, dropout], with
    tcalc's role names where the row gives them (tcalc_targets: the same layers where peft's
    module names are no alias of a role); the experts as the row ran them (the measuring
    tool's default: transformers' eager loop); the generation cache where the row built it
    (use_cache; off otherwise, as the tool runs); the parts the row froze (freeze)."""
    fields: dict = dict(precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
                        attention=row["attention"], device="cpu",
                        experts=row.get("experts", "eager"),
                        use_cache=bool(row.get("use_cache")),
                        freeze=tuple(row.get("freeze", ())))
    if row.get("lora"):
        rank, targets, dropout = row["lora"]
        fields.update(lora_rank=rank, lora_dropout=dropout,
                      lora_targets=tuple((row.get("tcalc_targets") or targets).split(",")))
    return Settings(**{**fields, **more})


@cache
def spec_of(config: str) -> ModelSpec:
    """tests/data/hf/variants/CONFIG as tcalc reads it, once per process (memory_report
    finds a spec it has seen by identity)."""
    import json

    from conftest import DATA

    from transformer_calc.hf import spec_from_hf

    return spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()), config)


def every_row(rows: Iterable[Any], check: Callable[[Any], object],
              ids: Callable[[Any], str] | Sequence[str] = row_id) -> None:
    """check(row) on every row (a measured row, or any pinned case; ids: each row's name,
    or a function that names a row);
    fails once, naming each failing row (its id, and what was expected and what came back,
    or the error it raised)."""
    import pytest

    rows = list(rows)
    assert rows, "no rows to check"
    names = list(map(ids, rows)) if callable(ids) else list(ids)
    assert len(names) == len(rows)
    failures = []
    for name, row in zip(names, rows, strict=True):
        try:
            check(row)
        # (every row is checked; each failure is reported below, pytest.raises' too)
        except (Exception, pytest.fail.Exception) as e:
            what = str(e) if isinstance(e, AssertionError) else f"{type(e).__name__}: {e}"
            failures.append(f"{name}: {what}")
    assert not failures, f"{len(failures)} of {len(rows)} rows fail:\n" + "\n".join(failures)


def check_measured(row: dict, fam: Family, run: Run, spec: ModelSpec | None = None,
                   settings: Settings | None = None, *,
                   compiled: Literal["bytes", "traced"] | None = "bytes",
                   report_rows: Literal["formula", "names"] | None = "formula") -> Result:
    """A measured row (tests/data/activations_*_cpu.jsonl) against the graph, to the byte:
    the trace's saved bytes and, where the row has peft's count, its trainable parameters;
    the compiled structure's saved bytes and trainable parameters (compiled="bytes"), or
    every output and named row of it against the trace (compiled="traced",
    assert_compiled_equals_traced); with a spec, memory_report for the row's settings
    (row_settings unless given): its total, and its rows as the trace names them, with their
    formulas (report_rows="formula"; the numbers shown in them are memory_report's to leave
    out) or without (report_rows="names": the names, bytes, layers, stacks and notes).
    Returns the trace."""
    want = row["measured_bytes"]
    traced = evaluate(fam, run)
    assert traced.activation_bytes == want, \
        f"traced saved bytes: measured {want:,}, got {traced.activation_bytes:,}"
    if "trainable" in row:  # peft's count of the adapters' parameters
        assert traced.trainable_params == row["trainable"][0], \
            f"trainable parameters: peft {row['trainable'][0]:,}, got {traced.trainable_params:,}"
    if compiled == "traced":
        assert_compiled_equals_traced(fam, run, traced)
    elif compiled == "bytes":
        fast = evaluate_fast(fam, run)
        assert fast.activation_bytes == want, \
            f"compiled saved bytes: measured {want:,}, got {fast.activation_bytes:,}"
        if "trainable" in row:
            assert fast.trainable_params == row["trainable"][0], \
                f"compiled trainable parameters: peft {row['trainable'][0]:,}, " \
                f"got {fast.trainable_params:,}"
    if spec is None:
        return traced
    from transformer_calc.memory import memory_report

    report = memory_report(spec, settings if settings is not None else row_settings(row))
    total = report.activations.total
    assert total == want, f"memory_report's activations: measured {want:,}, got {total:,}"
    if report_rows is None:
        return traced
    ours = component_rows(fam, run, traced)
    if report_rows == "formula":
        got_rows, expected = report.activations.rows, tuple(r[:3] + ("",) + r[4:] for r in ours)
    else:
        got_rows = tuple(r[:2] + r[4:] for r in report.activations.rows)
        expected = tuple(r[:2] + r[4:] for r in ours)
    if got_rows != expected:
        only = [f"  traced only: {r}" for r in expected if r not in got_rows] + [
            f"  reported only: {r}" for r in got_rows if r not in expected]
        raise AssertionError(f"memory_report's rows differ from the trace's ({len(got_rows)} "
                             f"reported, {len(expected)} traced):\n"
                             + ("\n".join(only[:6]) or "  the same rows in another order"))
    return traced


def assert_compiled_equals_traced(fam: Family, run: Run, ref: Result | None = None
                                  ):  # type: ignore[no-untyped-def]
    """The compiled structure against the reference trace (evaluated here unless given) on
    every output and per row name (with the layer's group where layers differ); returns the
    compiled result."""
    fast = evaluate_fast(fam, run)
    ref = ref if ref is not None else evaluate(fam, run)
    for k in OUTPUTS:
        assert getattr(fast, k) == getattr(ref, k), \
            f"compiled {k}: traced {getattr(ref, k)}, got {getattr(fast, k)} ({fam}, {run}, " \
            f"{fast.structure.key})"
    st, values = fast.structure, symbol_values(run, fam.sizes())
    numbers = st.named_values(values)
    compiled: dict[str, int] = {}
    for i, named in enumerate(st.named):
        name = row_of(named, 0, 0)[0]
        compiled[name] = compiled.get(name, 0) + numbers[2 * i] * numbers[2 * i + 1]
    # (rows of no bytes, a zero-width layer's, are left out on both sides)
    traced = {n: b for n, b in by_name(component_rows(fam, run, ref)).items() if b}
    compiled = {n: b for n, b in compiled.items() if b}
    assert compiled == traced, "compiled rows by name differ from the trace's: " + ", ".join(
        f"{n}: traced {traced.get(n)}, got {compiled.get(n)}"
        for n in sorted(set(traced) | set(compiled)) if traced.get(n) != compiled.get(n)
    ) + f" ({fam}, {run})"
    return fast


def measured_rows(configs: tuple[str, ...]) -> list[dict]:
    """Every measured CPU row (tests/data/activations_*.jsonl) of these configs, with the
    file it came from; rows the measurement skipped are left out, and those under a kernel
    --sdpa-kernel forces (tests/test_graph_kernels.py reads them)."""
    import json

    from conftest import DATA

    rows = []
    for path in sorted(DATA.glob("activations_*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("config") in configs and "skipped" not in r and "sdpa_kernel" not in r:
                rows.append({**r, "file": path.name})
    return rows


def cache_hits_on_random_draws(draw, seed: int, draws: int) -> int:  # type: ignore[no-untyped-def]
    """Compiled against traced on `draws` random (family, run) pairs from `draw(rng)`, and on
    another size of each (batch + 3, length + 40) from the cache where its guards pass;
    returns how many of those other sizes the cache served."""
    import random
    from dataclasses import replace

    from transformer_calc.graph.compile import cached, clear_cache

    clear_cache()
    rng, hits = random.Random(seed), 0  # noqa: S311 (not cryptography)
    for _ in range(draws):
        fam, run = draw(rng)
        assert_compiled_equals_traced(fam, run)
        other = replace(run, batch=run.batch + 3, seq_len=run.seq_len + 40)
        before = len(cached())
        assert evaluate_fast(fam, other).activation_bytes == \
            evaluate(fam, other).activation_bytes
        hits += len(cached()) == before
    return hits
