"""Encoders' base classes (BertModel, XLMRobertaModel, ElectraModel: what embedding models
such as bge-m3 publish, and the bert-base and roberta-base presets) on the op graph
(families/bert.py, task "base"): the encoder and its pooler, under a loss of the user's
that tcalc does not count.

Fixture: tests/data/activations_base_models_cpu.jsonl, written by

    python tools/measure_activations_hf.py -B 2 -T 64 tests/data/hf/variants/{bert,\
        xlm-roberta,electra}-base-model.json
    python tools/measure_activations_hf.py -B 2 -T 64 --lora 8 --lora-targets query,value \
        tests/data/hf/variants/{bert,xlm-roberta}-base-model.json
    python tools/measure_activations_hf.py -B 2 -T 64 --lora 8 \
        tests/data/hf/variants/bert-base-model.json

(torch 2.13 CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks; a base class has no
loss: the tool backpropagates the sum of last_hidden_state and pooler_output, whose backward
keeps sizes only). Tolerance: none.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from graph_rows import (
    check_measured,
    every_row,
    row_run,
    spec_of,
)

from transformer_calc.flops import count_flops
from transformer_calc.graph import evaluate, family_of
from transformer_calc.params import count_params
from transformer_calc.presets import load_model
from transformer_calc.spec import ModelSpec

ROWS = [json.loads(line) for line in
        (DATA / "activations_base_models_cpu.jsonl").read_text().splitlines()]


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_three_base_classes_with_and_without_a_pooler() -> None:
    assert len(ROWS) == 24
    fams = {r["config"]: family_of(_spec(r["config"])) for r in ROWS}
    assert {c: (f.task, f.pooler) for c, f in fams.items()} == {  # type: ignore[union-attr]
        "bert-base-model.json": ("base", True), "xlm-roberta-base-model.json": ("base", True),
        "electra-base-model.json": ("base", False)}


def test_the_graph_and_memory_report_equal_the_measurement() -> None:
    # the trace and the compiled structure (and peft's trainable count), and memory_report's
    # total, each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, family_of(_spec(row["config"])), row_run(row), _spec(row["config"]),
        report_rows=None))


@pytest.mark.parametrize("name", ["bert-base", "bert-large", "roberta-base", "roberta-large"])
def test_the_presets_run_as_their_base_class(name: str) -> None:
    spec = load_model(name)
    fam = family_of(spec)
    assert (fam.task, fam.pooler) == ("base", True)  # type: ignore[union-attr]
    run = row_run({"B": 1, "T": 32, "dtype": "fp32", "attention": "sdpa"})
    result = evaluate(fam, run)
    # the graph's parameters are the class's (BertModel with its pooler: 109,482,240 for
    # bert-base, the preset's expected_params from transformers)
    assert result.params == count_params(spec).total == spec.expected_params
    assert result.forward_flops == 32 * count_flops(spec, 32).total
