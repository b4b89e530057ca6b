"""The BERT-style encoders' op graph (transformer_calc/graph/families/bert.py: BERT, ERNIE,
RoBERTa, CamemBERT, XLM-RoBERTa, Data2VecText and ELECTRA with their masked-LM heads),
which memory_report reads for them: against every measured CPU row of those model types, to
the byte, and beside the rules (activation_breakdown, lora_activations), with each
difference between the two explained.

Fixtures (torch 2.13 CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks, each storage
still held at the end of the forward once, parameters and buffers excluded; measured by
tools/measure_activations_hf.py): the rows of bert-big-vocab, bert-untied, roberta-untied
and electra-tiny in tests/data/activations_*_cpu.jsonl, and
tests/data/activations_bert_layouts_cpu.jsonl, written by

    V=tests/data/hf/variants
    python tools/measure_activations_hf.py \\
        $V/{xlm-roberta-tiny,camembert-tiny,data2vec-text-tiny,ernie-tiny,electra-unprojected}.json
    python tools/measure_activations_hf.py -B 1 -T 96 --lora 8 \\
        $V/{xlm-roberta-tiny,ernie-tiny,electra-unprojected}.json
    python tools/measure_activations_hf.py -B 3 -T 40 --lora 4 --lora-targets query,value \\
        --lora-dropout 0.05 $V/{camembert-tiny,data2vec-text-tiny}.json

(that file's tcalc_bytes are what tcalc answered then: the graph's; its trainable counts are
peft's beside tcalc's). Tolerance: none.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from graph_rows import (
    check_measured,
    every_row,
    measured_rows,
    row_run,
    row_settings,
    spec_of,
)

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, DTYPES, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import OUTPUTS, evaluate_fast
from transformer_calc.graph.families.bert import Bert, Factorized
from transformer_calc.graph.names import by_name, component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.presets import load_model
from transformer_calc.spec import ModelSpec

CONFIGS = ("bert-big-vocab.json", "bert-untied.json", "roberta-untied.json",
           "electra-tiny.json", "xlm-roberta-tiny.json", "camembert-tiny.json",
           "data2vec-text-tiny.json", "ernie-tiny.json", "electra-unprojected.json")


def _rows() -> list[dict]:
    return measured_rows(CONFIGS)


ROWS = _rows()


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_the_model_types_full_training_and_lora() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    assert {_spec(c).model_type for c in CONFIGS} == {
        "bert", "roberta", "electra", "xlm-roberta", "camembert", "data2vec-text", "ernie"}
    full = [r for r in ROWS if not r.get("lora")]
    assert len(full) == 32 + 20 and len(ROWS) - len(full) == 20 + 20
    assert {r["lora"][1] for r in ROWS if r.get("lora")} == {
        "all-linear", "intermediate.dense", "query,value"}


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows as the trace names them), each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, family_of(_spec(row["config"])), row_run(row), _spec(row["config"])))


def test_peft_adapts_every_linear_but_the_decoder() -> None:
    # peft's all-linear on bert-untied (E 256, F 512, two layers; the fixture rows carry no
    # count): q, k, v, the attention output, intermediate and output dense per layer, and the
    # MLM head's dense; not the decoder (the output embedding). ELECTRA's embeddings_project
    # (32 -> 64) is adapted too: r · (32 + 64) more
    r = evaluate(family_of(_spec("bert-untied.json")),
                 Run(2, 8, lora=Lora(8, frozenset({"all-linear"}))))
    per_layer = 4 * 8 * (256 + 256) + 8 * (256 + 512) + 8 * (512 + 256)
    assert r.trainable_params == 2 * per_layer + 8 * (256 + 256) == 61_440
    e = evaluate(family_of(_spec("electra-tiny.json")),
                 Run(2, 8, lora=Lora(8, frozenset({"all-linear"}))))
    assert e.trainable_params == 2 * (4 * 8 * 128 + 8 * 160 * 2) + 8 * 96 + 8 * 96 == 14_848


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    for attention in ("eager", "sdpa"):
        for B, T in ((1, 64), (3, 100)):
            r = evaluate(family_of(spec), Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


def test_robertas_positions_are_counted_from_the_ids() -> None:
    # bert-untied and roberta-untied differ in their token types (4, 2: no tensor) and in
    # RobertaEmbeddings' positions: create_position_ids_from_input_ids makes a (B, T) int64
    # tensor the position table keeps, where BERT slices its position_ids buffer (a buffer:
    # no activation); the token types gathered at those positions are (B, T), not (1, T)
    def measured(config: str) -> int:
        return next(r["measured_bytes"] for r in ROWS if r["config"] == config
                    and not r.get("lora") and r["B"] == 2 and r["T"] == 128
                    and r["attention"] == "eager" and r["dtype"] == "fp32")

    B, T = 2, 128
    assert measured("roberta-untied.json") - measured("bert-untied.json") == (
        B * T * 8 + (B * T - T) * 8) == 3072
    bert, roberta = (family_of(_spec(c)) for c in ("bert-untied.json", "roberta-untied.json"))
    assert not bert.positions_from_ids and roberta.positions_from_ids
    names = {c: by_name(component_rows(f, Run(B, T, F32, "cpu", "eager")))
             for c, f in (("bert", bert), ("roberta", roberta))}
    assert "embed.position_ids" not in names["bert"]
    assert names["roberta"]["embed.position_ids"] == B * T * 8
    assert (names["bert"]["embed.token_type_ids"], names["roberta"]["embed.token_type_ids"]) \
        == (T * 8, B * T * 8)


# -- where the rules differ, and why (the graph meets every row) ----------------------------
def _rules_rows(row: dict) -> tuple:  # type: ignore[type-arg]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph_costs, "graph_activations", lambda *a, **k: None)
        return memory_report(_spec(row["config"]), row_settings(row)).activations.rows


def _first_layer_dropout(row: dict, fam: Bert) -> int:
    """Adapter dropout in the first layer: its input (the embeddings' output) needs no
    gradient, so dropout's product keeps no noise; the rules keep one per adapter."""
    lora = row.get("lora")
    if not lora or not lora[2]:
        return 0
    return -row["B"] * row["T"] * fam.E * 4  # the adapters' fp32 input


NAME_DIFFERENCES: dict[str, tuple[str, Callable[[dict, Bert], int]]] = {
    "loss.total_weight": (
        "nll_loss keeps its 0-d total_weight in the scores' dtype; the rules have no row",
        lambda row, fam: DTYPES[row["dtype"]].itemsize),
    "loss.targets": (
        "the labels are the input ids, the storage the word embedding keeps already; the "
        "rules count them again (under LoRA the frozen table keeps nothing: no difference)",
        lambda row, fam: 0 if row.get("lora") else -row["B"] * row["T"] * 8),
    "embed.position_ids": (
        "BERT's and ELECTRA's positions are a slice of a buffer (no activation), RoBERTa's a "
        "(B, T) tensor; the rules count T · 8 for every learned table",
        lambda row, fam: 0 if row.get("lora") else
        (row["B"] * row["T"] * 8 if fam.positions_from_ids else 0) - row["T"] * 8),
    "embed.token_type_ids": (
        "the token types gathered from the buffer at the positions, (1, T) or RoBERTa's "
        "(B, T); the rules have no row",
        lambda row, fam: 0 if row.get("lora") else
        (row["B"] if fam.positions_from_ids else 1) * row["T"] * 8),
    "embed.project_input": (
        "ELECTRA under LoRA in fp32: the adapter on embeddings_project keeps its input, the "
        "embeddings' output itself (in bf16 its fp32 copy, which the rules count)",
        lambda row, fam: row["B"] * row["T"] * fam.Ee * 4
        if isinstance(fam, Factorized) and row.get("lora") and row["dtype"] == "fp32"
        else 0),
    **{f"encoder.attn.{n}.lora_dropout_mask": (
        "adapter dropout keeps no noise in the first layer (" + _first_layer_dropout.__doc__
        .split("(")[0].strip() + ")", lambda row, fam: _first_layer_dropout(row, fam))
       for n in ("q", "v")},
}


def test_the_rules_differ_by_what_the_graph_explains() -> None:
    every_row(ROWS, _differences_explained)


def _differences_explained(row: dict) -> None:
    fam = family_of(_spec(row["config"]))
    ours, rules = by_name(component_rows(fam, row_run(row))), by_name(_rules_rows(row))
    assert sum(ours.values()) == row["measured_bytes"]
    for name in set(ours) | set(rules):
        why, diff = NAME_DIFFERENCES.get(name, ("", lambda row, fam: 0))
        assert ours.get(name, 0) - rules.get(name, 0) == diff(row, fam), (name, why)


# -- what family_of maps, and what it leaves to the rules -------------------------------------
@pytest.mark.parametrize("config", [
    # TAPAS's positions per cell read the column and row tables: two tables are not a model
    {"model_type": "tapas", "type_vocab_sizes": [3, 256]},
    {"model_type": "mra"},  # MraSelfAttention: the hub's CUDA kernels (zeros on the CPU)
    {"model_type": "big_bird", "hidden_act": "relu"},
    {"model_type": "bert", "hidden_act": "relu"},
    {"model_type": "bert", "type_vocab_size": 0},
    {"model_type": "bert", "architectures": ["BertForSequenceClassification"],
     "num_labels": 1},  # a regression (MSELoss)
    {"model_type": "electra", "architectures": ["ElectraForSequenceClassification"]},
], ids=lambda c: "-".join(str(v) for v in c.values()))
def test_other_encoders_keep_the_rules(config: dict) -> None:
    base = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 2, "vocab_size": 100}
    try:
        spec = spec_from_hf({**base, **config})
    except TcalcError:
        return  # not even a spec
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(spec)


def test_a_spec_written_by_hand_keeps_the_rules() -> None:
    # the forward code is the model type's: a preset without one, or one whose fields
    # say otherwise (a pooler beside the MLM head), is not mapped
    spec = _spec("bert-untied.json")
    assert isinstance(family_of(spec), Bert)
    for other in (spec.replace(model_type=""), load_model("roberta-base").replace(model_type=""),
                  spec.replace(norm_position="pre"), spec.replace(pooler=True),
                  spec.replace(bias_o=False), spec.replace(loss_fp32=True)):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(other)


# -- the compiled path: polynomials per structure, checked against the trace ------------------
def _draw(rng: random.Random) -> tuple[Bert, Run]:
    """A random encoder and run, with the 0/1 edge cases (B = 1, T = 1, one head, one
    layer, head dims of 1, one token type)."""
    H, dh = rng.choice((1, 2, 3)), rng.choice((1, 2, 8))
    p = rng.choice((0.0, 0.1))
    fam = Bert(V=rng.randint(5, 40), P=64, Ty=rng.choice((1, 2)), E=H * dh, H=H,
               F=rng.randint(1, 24), L=rng.choice((1, 2, 3)),
               base=rng.choice(("bert", "roberta", "electra")), head="bert",
               positions_from_ids=rng.random() < 0.5, tied=rng.random() < 0.5,
               hidden_dropout=p, attention_dropout=rng.choice((0.0, p)))
    fam = Bert(**{**vars(fam), "head": {"bert": "bert", "roberta": "roberta",
                                        "electra": "electra"}[fam.base]})
    if fam.base == "electra" and rng.random() < 0.6:
        fam = Factorized(**vars(fam), Ee=rng.randint(1, 12))
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.5:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("query", "value", "output.dense", "intermediate.dense", "all-linear"),
            rng.choice((1, 2)))), rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 1, 2, 3)), rng.choice((1, 2, 7, 33)), dtype, device,
                    rng.choice(("eager", "sdpa")),
                    autocast=rng.choice((None, BF16)) if device == "cuda" and dtype == F32
                    else None, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_configurations() -> None:
    rng = random.Random(20260607)  # noqa: S311 (not cryptography)
    for _ in range(40):
        fam, run = _draw(rng)
        fast, ref = evaluate_fast(fam, run), evaluate(fam, run)
        for k in OUTPUTS:
            assert getattr(fast, k) == getattr(ref, k), (k, fam, run)
        compiled: dict[str, int] = {}
        st = fast.structure
        from transformer_calc.graph.modules import symbol_values

        numbers = st.named_values(symbol_values(run, fam.sizes()))
        for i, named in enumerate(st.named):
            compiled[named.name] = (compiled.get(named.name, 0)
                                    + numbers[2 * i] * numbers[2 * i + 1])
        assert {n: b for n, b in compiled.items() if b} == by_name(
            component_rows(fam, run, ref)), (fam, run)


def test_lora_roles_become_peft_module_names() -> None:
    # tcalc's roles: q, k, v, up by name; o and down are both "output.dense" to peft, so
    # one of them alone has no module-name list and the rules answer
    spec = _spec("bert-untied.json")
    base = dict(precision="fp32", batch_size=2, seq_len=64, attention="eager", device="cpu",
                lora_rank=8)
    graph = memory_report(spec, Settings(**base, lora_targets=("o", "down")))  # type: ignore[arg-type]
    fam = family_of(spec)
    run = Run(2, 64, lora=Lora(8, frozenset({"output.dense"})), attention="eager")
    assert graph.activations.total == evaluate(fam, run).activation_bytes
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph_costs, "_breakdown", lambda *a: pytest.fail("the graph answered"))
        memory_report(spec, Settings(**base, lora_targets=("o",)))  # type: ignore[arg-type]
