"""The paper's Transformer as torch.nn builds it (transformer_calc/graph/families/paper.py: the
transformer-base and transformer-big presets) against measured CPU rows, to the byte.

Fixture: tests/data/activations_nn_transformer_cpu.jsonl, written by

    python tools/measure_activations_nn_transformer.py --d 32 --heads 4 --ff 64 --layers 2 \
        -B 2 -T 16
    python tools/measure_activations_nn_transformer.py --d 48 --heads 3 --ff 80 --layers 1 \
        -B 1 -T 24
    python tools/measure_activations_nn_transformer.py --d 32 --heads 4 --ff 64 --layers 2 \
        -B 3 -T 10 --dropout 0.0

(torch 2.13 CPU, saved_tensors_hooks; the tool's docstring says the model around
nn.Transformer), and tests/data/autocast_activations_nn_transformer_cpu.jsonl by the same
tool with --autocast (-B 2 -T 16; -B 1 -T 24 --dropout 0.0): an fp32 model under
torch.autocast("cpu", torch.bfloat16), autocast's saved weight copies counted. Under
dropout torch runs SDPA's math kernel; without it the CPU's flash kernel, whose output is
empty_like(query): nn.MultiheadAttention's (T, B, H, d) query makes the output's permute
back to (T, B, E) free (no copy). Tolerance: none.
"""

from __future__ import annotations

import contextlib
import json
import random
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import cache_hits_on_random_draws
from test_graph import _row_settings

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import DTYPES, Run, evaluate, family_of
from transformer_calc.graph.compile import evaluate_fast
from transformer_calc.graph.families.paper import Paper
from transformer_calc.memory import memory_report
from transformer_calc.params import count_params
from transformer_calc.presets import load_model
from transformer_calc.spec import ModelSpec

ROWS = [json.loads(line) for line in
        (DATA / "activations_nn_transformer_cpu.jsonl").read_text().splitlines()]
IDS = ["d{}-L{}-p{}-{}".format(r["d_model"], r["layers"], r["dropout"], r["dtype"])
       for r in ROWS]


def _spec(row: dict) -> ModelSpec:
    """transformer-base at the row's sizes."""
    return replace(load_model("transformer-base"), vocab_size=row["vocab"],
                   d_model=row["d_model"], n_heads=row["heads"], d_ff=row["d_ff"],
                   n_encoder_layers=row["layers"], n_decoder_layers=row["layers"],
                   dropout=row["dropout"])


def _run(row: dict) -> Run:
    return Run(row["B"], row["T"], DTYPES[row["dtype"]], "cpu", "sdpa")


def test_the_rows_cover_both_kernels_and_dtypes() -> None:
    assert len(ROWS) == 6
    assert {(r["dropout"] > 0, r["dtype"]) for r in ROWS} == {
        (True, "fp32"), (True, "bf16"), (False, "fp32"), (False, "bf16")}


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_the_graph_equals_the_measurement(row: dict) -> None:
    fam = family_of(_spec(row))
    assert isinstance(fam, Paper)
    assert evaluate(fam, _run(row)).activation_bytes == row["measured_bytes"]
    assert evaluate_fast(fam, _run(row)).activation_bytes == row["measured_bytes"]


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_memory_report_reads_the_graph(row: dict) -> None:
    settings = _row_settings({**row, "attention": "sdpa"})
    assert memory_report(_spec(row), settings).activations.total == row["measured_bytes"]


@pytest.mark.parametrize("name", ["transformer-base", "transformer-big"])
def test_the_presets_parameters_and_flops(name: str) -> None:
    spec = load_model(name)
    result = evaluate(family_of(spec), Run(1, 32, DTYPES["fp32"], "cpu", "sdpa"))
    # torch.nn.Transformer + nn.Embedding (tools/reference_counts.py --builtin, torch 2.13)
    assert result.params == count_params(spec).total == spec.expected_params
    assert result.forward_flops == 32 * count_flops(spec, 32).total


def test_other_layouts_keep_their_own_families() -> None:
    spec = load_model("transformer-base")
    for other in (replace(spec, norm_position="pre"), replace(spec, activation="gelu"),
                  replace(spec, tie_encoder_decoder=False), replace(spec, fused_qkv=False),
                  replace(spec, attention_dropout=0.0)):
        with contextlib.suppress(TcalcError):
            assert not isinstance(family_of(other), Paper)


def _draw(rng: random.Random) -> tuple[Paper, Run]:
    H = rng.choice((1, 2, 4))
    fam = Paper(V=rng.choice((16, 40)), E=H * rng.choice((2, 8)), H=H,
                F=rng.choice((8, 24)), Le=rng.choice((1, 2, 3)), Ld=rng.choice((1, 2)),
                dropout=rng.choice((0.0, 0.1)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 5, 16)),
                    DTYPES[rng.choice(("fp32", "bf16"))], "cpu", "sdpa",
                    recompute=rng.choice(("none", "full")))


def test_compiled_equals_traced_on_random_draws() -> None:
    assert cache_hits_on_random_draws(_draw, seed=7, draws=20) > 0


@pytest.mark.parametrize("settings", [
    dict(), dict(mixed=True, precision="bf16"), dict(mixed=True, precision="bf16", batch_size=1),
    dict(precision="bf16"),
    dict(recompute="full"), dict(recompute="selective"),
    dict(tp=2, gpus=2, precision="bf16"), dict(device="cpu", precision="fp32"),
    dict(precision="bf16", attention="eager")], ids=str)
def test_the_presets_runs_read_the_graph(settings: dict,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import transformer_calc.memory as memory

    def rules(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the rules answered")

    monkeypatch.setattr(memory, "activation_breakdown", rules)
    from transformer_calc.memory import Settings

    report = memory_report(load_model("transformer-big"),
                           Settings(**{"batch_size": 2, "seq_len": 256, **settings}))
    assert report.activations.total > 0


AUTOCAST_ROWS = [json.loads(line) for line in
                 (DATA / "autocast_activations_nn_transformer_cpu.jsonl").read_text().splitlines()]


def test_cpu_autocast_equals_the_measurement() -> None:
    # every storage saved, autocast's 16-bit weight copies among them (the in_proj slices'
    # casts are made at every call: only a parameter itself is cached)
    rows = AUTOCAST_ROWS
    assert {r["dropout"] for r in rows} == {0.0, 0.1}
    for row in rows:
        run = Run(row["B"], row["T"], DTYPES["fp32"], "cpu", "sdpa", autocast=DTYPES["bf16"])
        saved = evaluate(family_of(_spec(row)), run).saved
        assert sum(s.nbytes for s in saved) == row["measured_bytes"], row
