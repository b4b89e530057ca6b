"""Runs of model types already on the op graph that the old rules answered: LoRA over a
bitsandbytes base of T5, mT5 and UMT5 (their wo left unquantised), LongT5 (8-bit), BART,
DeepSeek-V3's experts and gpt-oss, against tests/data/quantised_base_more_activations_cpu.jsonl
and the T5 rows of tests/data/quantised_base_activations_cpu.jsonl
(tools/measure_activations_hf.py --lora 8 --quant bnb-nf4 / bnb-int8: bitsandbytes 0.50.2,
transformers 5.23, peft 0.21.2, torch 2.13 CPU; the commands are in the tool's docstring)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import DATA
from graph_rows import every_row, spec_of

from transformer_calc.breakdown import Breakdown
from transformer_calc.memory import Settings, memory_report

# (the T5 rows of quantised_base_activations_cpu.jsonl: tests/test_graph_quant.py)
QUANTISED = [json.loads(line) for line in
             (DATA / "quantised_base_more_activations_cpu.jsonl").read_text().splitlines()]
# one row of each config in the fast suite (each row traces a structure of its own, ~1 s):
# 8-bit in bf16, where the bases differ most (MatMul8bitFp keeps its input)
FAST = [r for r in QUANTISED if (r["quant"], r["attention"], r["dtype"]) ==
        ("bnb-int8", "eager", "bf16")]


def _quantised_settings(row: dict[str, Any], **more: Any) -> Settings:
    rank, targets, dropout = row["lora"]
    fields: dict[str, Any] = dict(
        precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
        attention=row["attention"], device="cpu", lora_rank=rank,
        lora_targets=tuple(targets.split(",")), lora_dropout=dropout,
        experts=row.get("experts", "eager"), quant=row["quant"],
        use_cache=False,  # as the rows were measured
        double_quant=row["quant"] == "bnb-int8")
    return Settings(**{**fields, **more})


def _graph_answer(monkeypatch: pytest.MonkeyPatch, spec: Any, s: Settings
                  ) -> tuple[int, Breakdown | None]:
    """memory_report's activations, and what the op graph answered (None: the rules)."""
    import transformer_calc.costs.activations as activations

    seen: list[Breakdown | None] = []
    inner = activations.graph_activations

    def spy(*a: Any, **k: Any) -> Breakdown | None:
        seen.append(inner(*a, **k))
        return seen[-1]

    with monkeypatch.context() as mp:
        mp.setattr(activations, "graph_activations", spy)
        total = memory_report(spec, s).activations.total
    return total, seen[-1]


def _check(monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, Any]]) -> None:
    def check(row: dict[str, Any]) -> None:
        total, graph = _graph_answer(monkeypatch, spec_of(row["config"]),
                                     _quantised_settings(row))
        assert graph is not None, "the rules answered"
        assert total == graph.total == row["measured_bytes"], \
            f"measured {row['measured_bytes']:,}, got {total:,}"

    every_row(rows, check, lambda r: "{config}-{quant}-{attention}-{dtype}".format(**r))


def test_the_graph_reproduces_a_quantised_row_of_each_config(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A row of each config to the byte, through memory_report, answered by the graph. T5's
    wo is one of T5ForConditionalGeneration's _keep_in_fp32_modules, which
    replace_with_bnb_linear leaves out: a plain nn.Linear under peft's lora.Linear, in the
    model's dtype (transformers 5.23 upcasts those modules for fp16 only)."""
    assert {r["config"] for r in FAST} == {r["config"] for r in QUANTISED} >= {
        "t5-big-vocab.json", "bart-asymmetric.json", "deepseek_v3-no-q-lora-bias.json",
        "gpt_oss-tied-nobias.json", "umt5-tiny.json", "longt5-tglobal.json"}
    _check(monkeypatch, FAST)


@pytest.mark.slow
def test_the_graph_reproduces_every_quantised_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of the fixture (eager and SDPA, fp32 and bf16, 4- and 8-bit)."""
    _check(monkeypatch, [r for r in QUANTISED if r not in FAST])


def test_t5s_wo_is_no_bitsandbytes_layer() -> None:
    """The graph's T5 over a quantised base: every linear a bitsandbytes matmul but wo
    (and the LM head), wo adapted as peft's lora.Linear. Over an 8-bit base in bf16 that is
    wo's input, (B, T, F) per layer, which MatMul8bitFp would have kept on ctx: the
    difference between the measured T5 row and a graph that quantised wo too."""
    from transformer_calc.costs.activations import _family
    from transformer_calc.graph import Lora, Run, evaluate
    from transformer_calc.graph.tensor import BF16

    fam = _family(spec_of("t5-gated-asym.json"))  # d_ff 512, 3 + 1 layers
    assert fam is not None
    lora = Lora(8, frozenset(("all-linear",)), quant="int8")
    kept = Lora(8, frozenset(("all-linear",)), quant="int8", unconverted=frozenset(("wo",)))
    every = evaluate(fam, Run(2, 64, BF16, "cpu", "eager", lora=lora))
    left = evaluate(fam, Run(2, 64, BF16, "cpu", "eager", lora=kept))
    assert sum(o.op == "bnb_matmul" for o in every.ops) \
        - sum(o.op == "bnb_matmul" for o in left.ops) == 4
    assert every.activation_bytes - left.activation_bytes == 4 * 2 * 64 * 512 * 2
    rows = map(json.loads, (DATA / "quantised_base_activations_cpu.jsonl").read_text()
               .splitlines())
    row = next(r for r in rows if (r["config"], r["quant"], r["attention"], r["dtype"]) ==
               ("t5-gated-asym.json", "bnb-int8", "eager", "bf16"))
    assert left.activation_bytes == row["measured_bytes"]


def test_a_kept_linear_under_fp16_is_left_to_the_rules(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """Under an fp16 model transformers loads T5's wo in fp32 (_keep_in_fp32_modules), a
    second dtype the graph's one model dtype does not say: the rules answer."""
    row = next(r for r in QUANTISED if r["config"] == "t5-big-vocab.json")
    _, graph = _graph_answer(monkeypatch, spec_of(row["config"]),
                             _quantised_settings(row, precision="fp16"))
    assert graph is None
