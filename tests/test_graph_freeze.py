"""--freeze through the op graph: parameters of the frozen parts need no gradient, so the ops
that read them save only what their inputs' gradients need (derivatives.yaml), and
requires_grad flows on from there.

tests/data/frozen_parts_activations_cpu.jsonl: 88 rows on six families (Llama, GPT-2, Qwen3,
Mixtral, BERT with a classification head, T5), eager and SDPA, fp32 and bf16, B=2 T=64,
measured with torch 2.13 (CPU), transformers 5.23, saved_tensors_hooks, by

    python tools/measure_activations_hf.py --freeze PARTS \
        tests/data/hf/variants/{llama-biases,gpt2-n-inner}.json
    # PARTS: embeddings; attention; ffn; norms; embeddings,attention,norms
    python tools/measure_activations_hf.py --freeze PARTS \
        tests/data/hf/variants/{qwen3-qknorm,mixtral-top1,bert-seq-cls,t5-gated-asym}.json
    # PARTS: attention; ffn,norms; embeddings,heads

The tool freezes parameters by transformers' own module names (its `part`); each row records
how many parameters still trained, beside tcalc's count (the tcalc_bytes column is what tcalc
printed on the day and is not read here).
"""

from __future__ import annotations

import json
from functools import cache

import pytest
from conftest import DATA
from graph_rows import every_row, row_settings

from transformer_calc.graph.parts import part
from transformer_calc.memory import Settings, memory_report
from transformer_calc.presets import load_model

ROWS = [json.loads(line) for line in
        (DATA / "frozen_parts_activations_cpu.jsonl").read_text().splitlines()]


@cache
def _load(config: str):  # type: ignore[no-untyped-def]
    return load_model(str(DATA / "hf" / "variants" / config))


def _spec(row: dict):  # type: ignore[no-untyped-def]
    return _load(row["config"])


def test_the_rows_cover_every_part_and_six_families() -> None:
    assert len(ROWS) == 88
    assert {p for r in ROWS for p in r["freeze"]} == {
        "embeddings", "attention", "ffn", "norms", "heads"}
    assert len({r["config"] for r in ROWS}) == 6


def _frozen_parts(row: dict) -> None:
    # (the experts as transformers runs them by default for the class)
    report = memory_report(_spec(row), row_settings(row, experts=row.get("experts", "auto")))
    assert report.activations.total == row["measured_bytes"]
    # the same parameters train on both sides (the measurement's count, not tcalc's)
    assert report.trainable_params == row["trainable"][0]


def test_frozen_parts_save_what_pytorch_saves() -> None:
    every_row(ROWS, _frozen_parts, ids=lambda r: "-".join(
        [r["config"][:-5], r["attention"], r["dtype"], *r["freeze"]]))


def test_freezing_changes_what_is_saved() -> None:
    # a frozen FFN keeps no inputs for its weights' gradients: less than full training
    spec = load_model(str(DATA / "hf" / "variants" / "llama-biases.json"))
    s = Settings(precision="fp32", batch_size=2, seq_len=64, attention="sdpa", device="cpu")
    full = memory_report(spec, s).activations.total
    import dataclasses
    frozen = memory_report(spec, dataclasses.replace(s, freeze=("ffn",))).activations.total
    assert frozen < full


def test_parts_by_module_path() -> None:
    assert part("model.layers.0.self_attn.q_norm.weight") == "norms"
    assert part("transformer.ln_f.weight") == "norms"
    assert part("transformer.wte.weight") == "embeddings"
    assert part("shared.weight") == "embeddings"
    assert part("model.layers.0.self_attn.q_proj.weight") == "attention"
    assert part("bert.encoder.layer.0.attention.output.dense.weight") == "attention"
    assert part("bert.encoder.layer.0.output.dense.weight") == "ffn"
    assert part("bert.pooler.dense.weight") == "heads"
    assert part("lm_head.weight") == "heads"
    # a head is the model's own module (top level, or the base model's pooler), not a
    # module of that name inside a layer
    assert part("model.decoder.proj_out.weight") == "ffn"
    assert part("backbone.layers.0.mixer.in_proj.weight") == "mixers"


def test_a_misread_part_leaves_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    # where the graph's parts disagree with count_params' categories, the graph does not
    # answer (the trainable counts differ), and the rules do
    from transformer_calc.costs import activations
    from transformer_calc.graph import compile as graph_compile
    from transformer_calc.graph import modules

    spec = load_model(str(DATA / "hf" / "variants" / "llama-biases.json"))
    s = Settings(precision="fp32", batch_size=2, seq_len=64, attention="sdpa", device="cpu",
                 freeze=("attention",))
    kwargs = dict(amp=False, amp16=False, adapted_roles=None)
    assert activations.graph_activations(spec, s, 64, **kwargs) is not None
    monkeypatch.setattr(modules, "part", lambda path: "ffn")
    graph_compile.clear_cache()
    try:
        assert activations.graph_activations(spec, s, 64, **kwargs) is None
    finally:
        monkeypatch.undo()
        graph_compile.clear_cache()
