"""What the op-graph family tests share: a measured fixture row as the graph's Run, and the
check that a compiled structure equals the full trace, on every output and on the named rows
memory_report reads."""

from __future__ import annotations

from transformer_calc.graph import DTYPES, Lora, Run, evaluate
from transformer_calc.graph.compile import OUTPUTS, evaluate_fast
from transformer_calc.graph.evaluate import Family
from transformer_calc.graph.modules import symbol_values
from transformer_calc.graph.names import by_name, component_rows, row_of


def row_run(row: dict) -> Run:
    """A row of tests/data/activations_*_cpu.jsonl (tools/measure_activations_hf.py: the CPU,
    peft's LoRA as [rank, targets, dropout]) as the Run the graph evaluates."""
    lora = None
    if row.get("lora"):
        rank, targets, dropout = row["lora"]
        lora = Lora(rank, frozenset(targets.split(",")), dropout)
    return Run(row["B"], row["T"], DTYPES[row["dtype"]], "cpu", row["attention"], lora=lora)


def assert_compiled_equals_traced(fam: Family, run: Run):  # type: ignore[no-untyped-def]
    """The compiled structure against the reference trace on every output and per row name
    (with the layer's group where layers differ); returns the compiled result."""
    fast = evaluate_fast(fam, run)
    ref = evaluate(fam, run)
    for k in OUTPUTS:
        assert getattr(fast, k) == getattr(ref, k), (k, fam, run, fast.structure.key)
    st, values = fast.structure, symbol_values(run, fam.sizes())
    numbers = st.named_values(values)
    compiled: dict[str, int] = {}
    for i, named in enumerate(st.named):
        name = row_of(named, 0, 0)[0]
        compiled[name] = compiled.get(name, 0) + numbers[2 * i] * numbers[2 * i + 1]
    # (rows of no bytes, a zero-width layer's, are left out on both sides)
    assert {n: b for n, b in compiled.items() if b} == {
        n: b for n, b in by_name(component_rows(fam, run, ref)).items() if b}, (fam, run)
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
