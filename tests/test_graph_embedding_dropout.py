"""The embeddings' dropout read apart from the residual one, where a config gives it its own
key (Phi's embd_pdrop, GPT-2's and GPT-J's embd_pdrop, GPT-Neo's embed_dropout): Phi-2
publishes resid_pdrop 0.1 beside embd_pdrop 0.0, GPT-Neo's class defaults both to 0.0.

Fixture: tests/data/activations_embedding_dropout_cpu.jsonl, written by

    python tools/measure_activations_hf.py -B 2 -T 64 tests/data/hf/variants/{phi-dropout-resid,\
        phi-dropout-embd,gpt2-dropout-resid,gpt_neo-dropout-resid,gptj-dropout-embd}.json

(torch 2.13 CPU, transformers 5.23, saved_tensors_hooks; the classes' training forward with
use_cache=False; GPT-Neo and GPT-J have no SDPA path, their SDPA lines skipped). Its
tcalc_bytes column is not read here (memory_report with transformers' default use_cache).

Tolerance: none.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import (
    check_measured,
    every_row,
    row_run,
    spec_of,
)

from transformer_calc.errors import TcalcError
from transformer_calc.graph import family_of
from transformer_calc.hf import spec_from_hf
from transformer_calc.spec import ModelSpec, SpecError

ROWS = [json.loads(line) for line in
        (DATA / "activations_embedding_dropout_cpu.jsonl").read_text().splitlines()]


def _data(config: str) -> dict:
    return json.loads((DATA / "hf" / "variants" / config).read_text())


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_each_family_and_both_ways_round() -> None:
    assert len(ROWS) == 16
    assert {(r["config"], _spec(r["config"]).dropout, _spec(r["config"]).embed_dropout)
            for r in ROWS} == {
        ("phi-dropout-resid.json", 0.1, 0.0), ("phi-dropout-embd.json", 0.0, 0.1),
        ("gpt2-dropout-resid.json", 0.1, 0.0), ("gpt_neo-dropout-resid.json", 0.1, 0.0),
        ("gptj-dropout-embd.json", 0.0, 0.1)}


def test_the_graph_and_memory_report_equal_the_measurement() -> None:
    # the trace and the compiled structure (and peft's trainable count), and memory_report's
    # total, each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, family_of(_spec(row["config"])), row_run(row), _spec(row["config"]),
        report_rows=None))


def test_one_probability_for_both_keeps_one_dropout() -> None:
    # equal keys: no embed_dropout, the one dropout for both (GPT-2's class default 0.1)
    spec = spec_from_hf(_data("gpt2-dropout-resid.json") | {"embd_pdrop": 0.1})
    assert (spec.dropout, spec.embed_dropout) == (0.1, None)
    assert family_of(spec).embd_pdrop == 0.1  # type: ignore[union-attr]


def test_phi_2_as_published_is_on_the_graph() -> None:
    # microsoft/phi-2's config.json: resid_pdrop 0.1, embd_pdrop 0.0, attention_dropout 0.0
    spec = spec_from_hf(json.loads((DATA / "hf" / "phi-2.json").read_text()))
    assert (spec.dropout, spec.embed_dropout) == (0.1, 0.0)
    fam = family_of(spec)
    assert (fam.hidden_dropout, fam.embd_dropout) == (0.1, 0.0)  # type: ignore[union-attr]


def test_a_family_that_does_not_read_it_refuses() -> None:
    # Llama's graph has no embedding dropout: one given apart is not silently dropped
    spec = _spec("llama-head-dim.json")
    family_of(spec)
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(spec, embed_dropout=0.1))


def test_a_probability_out_of_range_is_refused() -> None:
    with pytest.raises(SpecError, match="embed_dropout"):
        replace(_spec("phi-dropout-embd.json"), embed_dropout=1.5)
