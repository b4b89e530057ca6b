"""The op graphs of the encoders beyond BERT's own layout, which memory_report reads for
them: the rotary encoders (transformer_calc/graph/families/rope_encoder.py: GTE, NomicBERT,
Jina v3), against every measured CPU row of their model types, to the byte; compiled
against traced on random configurations; what family_of maps and what it leaves to the rules.

Fixtures (read, not changed; torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, each storage still held at the end of the forward once, parameters and
buffers excluded; measured by tools/measure_activations_hf.py): the rows of gte-tiny,
nomic_bert-tiny and jina_embeddings_v3-tiny in tests/data/activations_*_cpu.jsonl (full
training and peft's LoRA on all-linear, q/k/v/o, gate/up/down and q/v); DeBERTa
(families/deberta.py): the rows of deberta-relative, deberta-c2p-absolute and deberta-p2c
(eager: DeBERTa has no SDPA path; LoRA on all-linear, in_proj, pos_proj/pos_q_proj),
and of deberta-v2-relative and deberta-v2-c2p-p2c (LoRA on all-linear and
query_proj/value_proj; tests/data/activations_deberta_v2_sweep_cpu.jsonl among them);
BERT's forward with a difference (families/bert.py): bert-generation-tiny
(BertGenerationDecoder), layoutlm-tiny, roc_bert-tiny, rembert-tiny; ALBERT (families/albert.py):
albert-tiny; ModernBERT (families/modernbert.py): modernbert-tiny; MPNet
(families/mpnet.py): mpnet-tiny; XLM (families/xlm.py): xlm-tiny. The published
classification heads: tests/data/activations_encoder_heads_cpu.jsonl, written by (the
labels: one random class per sequence, or per token)

    V=tests/data/hf/variants
    python tools/measure_activations_hf.py $V/{bert-seq-cls,bert-token-cls,xlm-roberta-seq-cls}.json
    python tools/measure_activations_hf.py -B 1 -T 96 --lora 8 \\
        $V/{bert-seq-cls,xlm-roberta-seq-cls}.json
    python tools/measure_activations_hf.py -B 3 -T 40 --lora 4 --lora-targets query,value \\
        --lora-dropout 0.05 $V/bert-seq-cls.json

(its first file's tcalc_bytes are the rules', the rest the graph's).
Tolerance: none.
"""

from __future__ import annotations

import json
import random

import pytest
from conftest import DATA
from graph_rows import (
    assert_compiled_equals_traced,
    check_measured,
    every_row,
    measured_rows,
    row_run,
    spec_of,
)

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.albert import Albert
from transformer_calc.graph.families.bert import Bert, LayoutLM, RemBert, RoCBert
from transformer_calc.graph.families.deberta import Deberta
from transformer_calc.graph.families.modernbert import ModernBert
from transformer_calc.graph.families.mpnet import MPNet
from transformer_calc.graph.families.rope_encoder import RopeEncoder
from transformer_calc.graph.families.xlm import XLM
from transformer_calc.graph.names import by_name, component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

ROPE_CONFIGS = ("gte-tiny.json", "nomic_bert-tiny.json", "jina_embeddings_v3-tiny.json")
DEBERTA_CONFIGS = ("deberta-relative.json", "deberta-c2p-absolute.json", "deberta-p2c.json")
DEBERTA_V2_CONFIGS = ("deberta-v2-relative.json", "deberta-v2-c2p-p2c.json")
# BERT's forward with a difference (families/bert.py's options)
BERT_CONFIGS = ("bert-generation-tiny.json", "layoutlm-tiny.json", "roc_bert-tiny.json",
                "albert-tiny.json", "modernbert-tiny.json", "rembert-tiny.json",
                "mpnet-tiny.json", "xlm-tiny.json")
# the published classification heads on BERT's graph (tests/data/activations_encoder_heads_
# cpu.jsonl)
HEAD_CONFIGS = ("bert-seq-cls.json", "bert-token-cls.json", "xlm-roberta-seq-cls.json")
CONFIGS = ROPE_CONFIGS + DEBERTA_CONFIGS + DEBERTA_V2_CONFIGS + BERT_CONFIGS + HEAD_CONFIGS
ROWS = measured_rows(CONFIGS)


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_the_model_types_full_training_and_lora() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    rope = [r for r in ROWS if r["config"] in ROPE_CONFIGS]
    assert len(rope) == 24 + 24 + 20
    v1 = [r for r in ROWS if r["config"] in DEBERTA_CONFIGS]
    assert len(v1) == 14 + 8 + 6 and {r["attention"] for r in v1} == {"eager"}
    assert {r["lora"][1] for r in v1 if r.get("lora")} == {
        "all-linear", "in_proj", "pos_proj,pos_q_proj"}
    assert len([r for r in ROWS if r["config"] == "bert-generation-tiny.json"]) == 12
    assert len([r for r in ROWS if r["config"] == "layoutlm-tiny.json"]) == 12
    assert len([r for r in ROWS if r["config"] == "roc_bert-tiny.json"]) == 12
    assert len([r for r in ROWS if r["config"] == "albert-tiny.json"]) == 12
    assert len([r for r in ROWS if r["config"] == "modernbert-tiny.json"]) == 12
    assert len([r for r in ROWS if r["config"] == "rembert-tiny.json"]) == 6
    assert len([r for r in ROWS if r["config"] == "mpnet-tiny.json"]) == 6
    assert len([r for r in ROWS if r["config"] == "xlm-tiny.json"]) == 6
    assert len([r for r in ROWS if r["config"] in HEAD_CONFIGS]) == 12 + 4 + 8
    v2 = [r for r in ROWS if r["config"] in DEBERTA_V2_CONFIGS]
    assert len(v2) == 6 + 8
    assert {r["lora"][1] for r in v2 if r.get("lora")} == {"all-linear", "query_proj,value_proj"}
    assert {r["lora"][1] for r in rope if r.get("lora")} == {
        "all-linear", "q_proj,k_proj,v_proj,o_proj", "gate_proj,up_proj,down_proj",
        "q_proj,v_proj"}


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report's
    # total, each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, family_of(_spec(row["config"])), row_run(row), _spec(row["config"]),
        report_rows=None))


# torch.utils.flop_counter.FlopCounterMode over the counted class's forward (XForMaskedLM
# (config).train(), torch 2.13, transformers 5.23, eager) at B=1 T=64 and B=3 T=90: DeBERTa
# projects its relative table once per batch, not per sequence, so only B = 1 is
# count_flops' per-token figure (tcalc counts the projections per sequence: B - 1 too
# many); LayoutLM's pooler runs once per sequence (count_flops rounds it per token)
PINNED_FLOPS = {"layoutlm-tiny.json": (19_210_240, 84_627_456),
                # (the classifiers' labels: tools/measure_activations_hf.py's; count_flops
                # leaves the classification heads out)
                "bert-seq-cls.json": (142_738_944, 616_395_264),
                "bert-token-cls.json": (142_770_176, 616_688_640),
                "xlm-roberta-seq-cls.json": (9_445_760, 43_433_088),
                "deberta-relative.json": (5_767_168, 23_596_032),
                 "deberta-c2p-absolute.json": (3_997_696, 18_029_568),
                 "deberta-p2c.json": (4_980_736, 21_122_048),
                 "deberta-v2-relative.json": (3_407_872, 16_174_080),
                 "deberta-v2-c2p-p2c.json": (4_194_304, 18_648_064)}


@pytest.mark.parametrize("config", PINNED_FLOPS)
def test_params_and_measured_forward_flops(config: str) -> None:
    spec = _spec(config)
    for (B, T), flops in zip(((1, 64), (3, 90)), PINNED_FLOPS[config], strict=True):
        r = evaluate(family_of(spec), Run(B, T, F32, "cpu", "eager"))
        assert r.params == r.trainable_params == count_params(spec).total
        assert r.forward_flops == flops
        if B == 1 and config not in HEAD_CONFIGS:
            assert r.forward_flops == T * count_flops(spec, T).total


@pytest.mark.parametrize("config", [c for c in ROPE_CONFIGS + BERT_CONFIGS
                                    if c not in PINNED_FLOPS])
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    for attention in ("eager", "sdpa"):
        for B, T in ((1, 64), (3, 100)):
            r = evaluate(family_of(spec), Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


def test_bert_generation_is_berts_layers_with_a_causal_loss() -> None:
    # BertGenerationDecoder without is_decoder: BERT's bidirectional layers, no token
    # types, the decoder alone as the head, ForCausalLMLoss: the logits' shifted labels, a
    # new (B, T) int64 (a view of the padded (B, T + 1) at B = 1), and in bf16 the logits'
    # fp32 copy that log_softmax reads
    fam = family_of(_spec("bert-generation-tiny.json"))
    assert isinstance(fam, Bert) and fam.causal_loss and not fam.type_table
    names = {dt: by_name(component_rows(fam, Run(2, 64, dt, "cpu", "eager"))) for dt in (F32, BF16)}
    assert "embed.token_type_ids" not in names[F32]
    assert names[F32]["loss.targets"] == 2 * 64 * 8
    assert names[BF16]["loss.log_softmax"] == names[F32]["loss.log_softmax"] == 2 * 64 * 1000 * 4


def test_layoutlm_keeps_its_bbox_and_not_its_pooler() -> None:
    # LayoutLMModel's bbox of zeros, (B, T, 4) int64, is what the x and y tables keep (views
    # of it), its heights and widths two new (B, T) int64 differences; the pooler runs but
    # the loss never reads it, so nothing it saved is held; the pooler's parameters train
    fam = family_of(_spec("layoutlm-tiny.json"))
    assert isinstance(fam, LayoutLM) and fam.P2 == 1024
    r = evaluate(fam, Run(2, 64, F32, "cpu", "eager"))
    names = by_name(component_rows(fam, Run(2, 64, F32, "cpu", "eager"), r))
    assert names["embed.bbox"] == 2 * 64 * 4 * 8
    assert names["embed.bbox_extents"] == 2 * (2 * 64 * 8)
    assert not any(s.scope.startswith("layoutlm.pooler") for s in r.saved)
    assert r.trainable_params == count_params(_spec("layoutlm-tiny.json")).total
    lora = evaluate(fam, Run(2, 64, F32, "cpu", "eager", lora=Lora(8, frozenset({"dense"}))))
    # peft adapts every module named dense: per layer the attention output, intermediate
    # and output dense, the MLM head's transform, and the pooler's (64 -> 64): 10,240
    # trainable (peft 0.21.2's get_peft_model on LayoutLMForMaskedLM(layoutlm-tiny), r 8)
    assert lora.trainable_params == 2 * 8 * (64 + 64 + 64 + 128 + 128 + 64) + 2 * 8 * 128 \
        == 10_240


def test_roc_berts_side_tables_are_concatenated() -> None:
    # RoCBertEmbeddings with concat_input: the word embedding's clone and the shape (70 x
    # 16) and pronunciation (50 x 24) embeddings of two new (B, T) int64 zero ids, cat into
    # (B, T, 64 + 16 + 24), which map_inputs_layer keeps
    fam = family_of(_spec("roc_bert-tiny.json"))
    assert isinstance(fam, RoCBert) and (fam.Vs, fam.Ds, fam.Vp, fam.Dp) == (70, 16, 50, 24)
    names = by_name(component_rows(fam, Run(2, 64, F32, "cpu", "eager")))
    assert names["embed.side_ids"] == 2 * (2 * 64 * 8)
    assert names["embed.project_input"] == 2 * 64 * (64 + 16 + 24) * 4


def test_albert_layers_share_their_weight_sets() -> None:
    # albert-tiny: 4 layers, 2 sets (num_hidden_groups), layers 0-1 the first, 2-3 the
    # second; parameters and LoRA's adapters once per set: peft 0.21.2 gives 14,848
    # trainable for all-linear at r 8 (AlbertForMaskedLM(albert-tiny), get_peft_model)
    fam = family_of(_spec("albert-tiny.json"))
    assert isinstance(fam, Albert) and fam.sets == "AABB" and fam.Ee == 32
    r = evaluate(fam, Run(2, 8, lora=Lora(8, frozenset({"all-linear"}))))
    assert r.trainable_params == 14_848
    # each layer keeps its own activations: four layers' worth, whatever the sharing
    rows = component_rows(fam, Run(2, 64, F32, "cpu", "eager"))
    assert {row[4] for row in rows if row[0] == "encoder.attn.softmax"} == {4}


def test_modernberts_sliding_mask_from_its_window_on() -> None:
    # modernbert-tiny: layers F S F, local_attention 256, so the sliding layer's mask is
    # skipped while T < 128 and built from T = 128 on (measured: B=1 T=128 rows exact
    # with it); SDPA's bool mask, converted per sliding layer to a float (B, 1, T, T) in the
    # activations' dtype, is kept by the kernel; eager's is added and kept by nothing
    fam = family_of(_spec("modernbert-tiny.json"))
    assert isinstance(fam, ModernBert) and fam.kinds == "FSF" and fam.window == 128
    for T in (127, 128):
        sdpa = by_name(component_rows(fam, Run(1, T, BF16, "cpu", "sdpa")))
        eager = by_name(component_rows(fam, Run(1, T, BF16, "cpu", "eager")))
        assert sdpa.get("encoder.attn.mask", 0) == (T * T * 2 if T >= 128 else 0)
        assert "encoder.attn.mask" not in eager
    for T in (100, 127, 128, 200):
        assert_compiled_equals_traced(fam, Run(2, T, BF16, "cpu", "sdpa"))


def test_classification_heads() -> None:
    # BertForSequenceClassification: the pooler's dense keeps the first token's view, so
    # the whole last hidden state (B, T, E) (nothing else keeps it without an MLM head);
    # tanh's output, the dropout's noise and the classifier's input are (B, E); the loss's
    # labels (B,) int64. BertForTokenClassification: every token's dropout and classifier;
    # RobertaClassificationHead: dropout, dense, tanh, dropout, out_proj on the first token
    B, T, E = 2, 64, 256
    seq, token, roberta = (family_of(_spec(c)) for c in HEAD_CONFIGS)
    assert isinstance(seq, Bert) and (seq.task, seq.NL, seq.head) == ("seq_cls", 3, "bert")
    assert (token.task, token.NL) == ("token_cls", 5)
    assert (roberta.task, roberta.head) == ("seq_cls", "roberta")
    names = by_name(component_rows(seq, Run(B, T, F32, "cpu", "eager")))
    assert names["head.pooler.input"] == B * T * E * 4
    assert names["head.pooler.tanh"] == names["head.cls.input"] == B * E * 4
    assert names["head.cls.dropout_mask"] == B * E * 4
    assert names["loss.targets"] == B * 8 and names["loss.log_softmax"] == B * 3 * 4
    names = by_name(component_rows(token, Run(B, T, F32, "cpu", "eager")))
    assert names["head.cls.input"] == names["head.cls.dropout_mask"] == B * T * E * 4
    assert names["loss.targets"] == B * T * 8


def test_the_rotary_encoders_layouts() -> None:
    gte, nomic, jina = (family_of(_spec(c)) for c in ROPE_CONFIGS)
    assert isinstance(gte, RopeEncoder) and gte.gated and gte.bias and gte.mlp_dropout
    assert isinstance(nomic, RopeEncoder) and nomic.gated and not nomic.bias
    assert (nomic.act, nomic.head_act, nomic.head) == ("silu", "silu", "nomic")
    assert isinstance(jina, RopeEncoder) and not jina.gated and jina.bias
    assert (jina.base, jina.head) == ("roberta", "roberta")


@pytest.mark.parametrize("change", [
    {"hidden_act": "relu"},
    {"architectures": ["GteForSequenceClassification"]},
    {"type_vocab_size": 0},
], ids=lambda c: "-".join(map(str, c)))
def test_other_rotary_layouts_keep_the_rules(change: dict) -> None:
    config = json.loads((DATA / "hf" / "variants" / "gte-tiny.json").read_text())
    try:
        spec = spec_from_hf({**config, **change})
    except TcalcError:
        return  # not even a spec
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(spec)


def test_a_rotary_spec_that_says_otherwise_keeps_the_rules() -> None:
    spec = _spec("gte-tiny.json")
    assert isinstance(family_of(spec), RopeEncoder)
    for other in (spec.replace(model_type=""), spec.replace(norm_position="pre"),
                  spec.replace(bias_o=False), spec.replace(loss_fp32=True),
                  spec.replace(ffn="plain"), spec.replace(n_kv_heads=1)):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(other)


def _draw_rope(rng: random.Random) -> tuple[RopeEncoder, Run]:
    """A random rotary encoder and run, with the 0/1 edge cases (B = 1, T = 1, one head,
    one layer, head dims of 2)."""
    H, dh = rng.choice((1, 2, 3)), rng.choice((2, 4, 8))
    p = rng.choice((0.0, 0.1))
    kind = rng.choice(("gte", "nomic", "roberta"))
    fam = RopeEncoder(V=rng.randint(5, 40), P=64, Ty=rng.choice((1, 2)), E=H * dh, H=H,
                      F=rng.randint(1, 24), L=rng.choice((1, 2, 3)),
                      base={"gte": "gte", "nomic": "nomic_bert", "roberta": "roberta"}[kind],
                      head=kind, tied=rng.random() < 0.5, hidden_dropout=p,
                      attention_dropout=rng.choice((0.0, p)),
                      head_act=rng.choice(("gelu", "silu")), gated=kind != "roberta",
                      act=rng.choice(("gelu", "silu")), bias=rng.random() < 0.5,
                      mlp_dropout=kind == "gte")
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.5:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("q_proj", "v_proj", "o_proj", "up_proj", "fc2", "dense", "all-linear"),
            rng.choice((1, 2)))), rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 1, 2, 3)), rng.choice((1, 2, 7, 33)), dtype, device,
                    rng.choice(("eager", "sdpa")),
                    autocast=rng.choice((None, BF16)) if device == "cuda" and dtype == F32
                    else None, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_rotary_encoders() -> None:
    rng = random.Random(20261128)  # noqa: S311 (not cryptography)
    for _ in range(30):
        assert_compiled_equals_traced(*_draw_rope(rng))


def test_debertas_layouts() -> None:
    relative, absolute, p2c = (family_of(_spec(c)) for c in DEBERTA_CONFIGS)
    assert isinstance(relative, Deberta) and relative.c2p and relative.p2c
    assert not relative.position_biased and not relative.token_types and relative.R == 48
    assert isinstance(absolute, Deberta) and absolute.c2p and not absolute.p2c
    assert absolute.position_biased and absolute.token_types and absolute.R == 24
    assert isinstance(p2c, Deberta) and p2c.p2c and not p2c.c2p and p2c.R == 64


def test_deberta_v2_layouts() -> None:
    relative, shared = (family_of(_spec(c)) for c in DEBERTA_V2_CONFIGS)
    assert isinstance(relative, Deberta) and relative.v2 and relative.relative_table
    assert not (relative.c2p or relative.p2c or relative.shared_key) and relative.R == 512
    assert isinstance(shared, Deberta) and shared.c2p and shared.p2c and shared.shared_key
    assert shared.rel_norm and shared.R == 16


def test_deberta_v2_without_terms_keeps_no_table_dropout() -> None:
    # relative_attention without pos_att_type: pos_dropout runs on the table, but its
    # output reaches nothing, so autograd frees the noise with its node before the forward
    # ends; the measurement (B=2 T=64 fp32) is 1,384,972 bytes, and the noise of the
    # 1,024 × 32 fp32 table in each of the two layers would add 262,144
    row = next(r for r in ROWS if r["config"] == "deberta-v2-relative.json"
               and not r.get("lora") and r["dtype"] == "fp32" and r["B"] == 2)
    names = by_name(component_rows(family_of(_spec(row["config"])), row_run(row)))
    assert sum(names.values()) == row["measured_bytes"] == 1_384_972
    assert not any("rel" in n for n in names)


def test_debertas_span_is_the_shorter_of_t_and_the_table() -> None:
    # compute_attention_span: each layer projects 2·min(T, R) rows of the relative table
    # (a view of the whole table through pos_dropout: that is what the projection keeps),
    # and p2c's gather keeps K times them, (B, H, T, 2·span): past T = R it grows with T
    # alone, a guard of the compiled structure (T <= R or T > R)
    fam = family_of(_spec("deberta-p2c.json"))  # R = 64, H = 4, d_model 32, two layers
    assert isinstance(fam, Deberta)
    rows = {T: by_name(component_rows(fam, Run(1, T, F32, "cpu", "eager")))
            for T in (40, 64, 65)}
    for T, span in ((40, 40), (64, 64), (65, 64)):
        assert rows[T]["encoder.attn.relative_table"] == 2 * (2 * 64 * 32 * 4)
        assert rows[T]["encoder.attn.p2c.scores"] == 2 * (4 * T * 2 * span * 4)
    for T in (40, 64, 65, 90):
        assert_compiled_equals_traced(fam, Run(2, T, F32, "cpu", "eager"))


@pytest.mark.parametrize("change", [
    {"talking_head": True}, {"hidden_act": "relu"}, {"conv_kernel_size": 3},
    {"architectures": ["DebertaForSequenceClassification"]},
], ids=lambda c: "-".join(map(str, c)))
def test_other_deberta_layouts_keep_the_rules(change: dict) -> None:
    config = json.loads((DATA / "hf" / "variants" / "deberta-relative.json").read_text())
    try:
        spec = spec_from_hf({**config, **change})
    except TcalcError:
        return  # not even a spec
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(spec)


def _draw_deberta(rng: random.Random) -> tuple[Deberta, Run]:
    H, dh = rng.choice((1, 2, 3)), rng.choice((1, 2, 8))
    p = rng.choice((0.0, 0.1))
    terms = rng.choice(((True, True), (True, False), (False, True), (False, False)))
    v2 = rng.random() < 0.5
    fam = Deberta(V=rng.randint(5, 40), P=rng.randint(8, 40), Ty=rng.choice((1, 2)),
                  E=H * dh, H=H, F=rng.randint(1, 24), L=rng.choice((1, 2, 3)),
                  base="deberta", head="bert", tied=rng.random() < 0.5, hidden_dropout=p,
                  attention_dropout=rng.choice((0.0, p)), R=rng.choice((1, 4, 20)),
                  c2p=terms[0], p2c=terms[1], position_biased=rng.random() < 0.5,
                  token_types=rng.random() < 0.5, v2=v2,
                  relative_table=v2 and rng.random() < 0.7,
                  shared_key=v2 and rng.random() < 0.5, rel_norm=v2 and rng.random() < 0.5)
    if v2 and not fam.relative_table:
        fam = Deberta(**{**vars(fam), "c2p": False, "p2c": False, "shared_key": False,
                         "rel_norm": False})
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.5:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("in_proj", "pos_proj", "pos_q_proj", "query_proj", "pos_key_proj",
             "output.dense", "intermediate.dense", "all-linear"), rng.choice((1, 2)))),
            rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 1, 2, 3)), rng.choice((1, 2, 7, 33)), dtype, device,
                    "eager", autocast=rng.choice((None, BF16))
                    if device == "cuda" and dtype == F32 else None, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_debertas() -> None:
    rng = random.Random(20261129)  # noqa: S311 (not cryptography)
    for _ in range(30):
        assert_compiled_equals_traced(*_draw_deberta(rng))


def _draw_bert(rng: random.Random) -> tuple[Bert, Run]:
    """A random encoder of BERT's forward with this file's options (BertGeneration's)."""
    H, dh = rng.choice((1, 2, 3)), rng.choice((1, 2, 8))
    p = rng.choice((0.0, 0.1))
    fam = Bert(V=rng.randint(5, 40), P=64, Ty=1, E=H * dh, H=H, F=rng.randint(1, 24),
               L=rng.choice((1, 2, 3)), base="bert", head="generation",
               tied=rng.random() < 0.5, hidden_dropout=p,
               attention_dropout=rng.choice((0.0, p)), type_table=False, causal_loss=True)
    kind = rng.choice(("generation", "layoutlm", "roc_bert", "albert", "rembert", "mpnet",
                       "seq_cls", "token_cls", "roberta_cls"))
    bert = {**vars(fam), "head": "bert", "type_table": True, "causal_loss": False,
            "Ty": rng.choice((1, 2))}
    if kind == "layoutlm":
        fam = LayoutLM(**bert, P2=rng.randint(1, 30))
    elif kind == "albert":
        L = fam.L
        sets = "".join("AB"[i * 2 // (L + 1)] for i in range(L)) if rng.random() < 0.5 \
            else "A" * L
        fam = Albert(**{**bert, "base": "albert", "head": "albert", "head_act": "gelu_new"},
                     Ee=rng.randint(1, 12), sets=sets)
    elif kind in ("seq_cls", "token_cls", "roberta_cls"):
        fam = Bert(**{**bert, "task": "token_cls" if kind == "token_cls" else "seq_cls",
                      "head": "roberta" if kind == "roberta_cls" else "bert",
                      "positions_from_ids": kind == "roberta_cls", "NL": rng.randint(2, 5)})
    elif kind == "mpnet":
        fam = MPNet(**{**bert, "base": "mpnet", "head": "roberta", "type_table": False,
                       "positions_from_ids": True}, Rb=rng.randint(1, 40))
    elif kind == "rembert":
        fam = RemBert(**{**bert, "base": "rembert", "head": "rembert", "tied": False},
                      Ee=rng.randint(1, 12), Eo=rng.randint(1, 12))
    elif kind == "roc_bert":
        fam = RoCBert(**bert, Vs=rng.randint(1, 9), Ds=rng.randint(1, 5),
                      Vp=rng.randint(1, 9), Dp=rng.randint(1, 5))
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


def test_compiled_equals_traced_on_random_bert_variants() -> None:
    rng = random.Random(20261130)  # noqa: S311 (not cryptography)
    for _ in range(30):
        assert_compiled_equals_traced(*_draw_bert(rng))


def _draw_modernbert(rng: random.Random) -> tuple[ModernBert, Run]:
    H, dh = rng.choice((1, 2, 3)), rng.choice((2, 4, 8))
    L = rng.choice((1, 2, 3, 4))
    every = rng.choice((1, 2, 3))
    fam = ModernBert(V=rng.randint(5, 40), E=H * dh, H=H, F=rng.randint(1, 24), L=L,
                     kinds="".join("F" if i % every == 0 else "S" for i in range(L)),
                     window=rng.choice((1, 4, 16)), tied=rng.random() < 0.5)
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.5:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("Wqkv", "Wo", "Wi", "dense", "all-linear"), rng.choice((1, 2)))),
            rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 1, 2, 3)), rng.choice((1, 2, 7, 33)), dtype, device,
                    rng.choice(("eager", "sdpa")),
                    autocast=rng.choice((None, BF16)) if device == "cuda" and dtype == F32
                    else None, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_modernberts() -> None:
    rng = random.Random(20261201)  # noqa: S311 (not cryptography)
    for _ in range(30):
        assert_compiled_equals_traced(*_draw_modernbert(rng))


def test_xlm_keeps_its_cache_copies_and_masks() -> None:
    # XLMModel's EncoderDecoderCache, made whatever use_cache says: K and V are the cache's
    # torch.cat copies; the (B, T, 1) mask copy multiplied in after the embeddings and each
    # layer, each layer's (B, T) bool mask == 0 for masked_fill_
    fam = family_of(_spec("xlm-tiny.json"))
    assert isinstance(fam, XLM)
    B, T = 2, 64
    names = by_name(component_rows(fam, Run(B, T, F32, "cpu", "eager")))
    assert names["embed.mask"] == B * T * 4 and names["encoder.mask"] == 2 * B * T * 4
    assert names["encoder.attn.mask"] == 2 * B * T
    assert names["encoder.attn.k"] == names["encoder.attn.v"] == 2 * B * T * 64 * 4


def _draw_xlm(rng: random.Random) -> tuple[XLM, Run]:
    H, dh = rng.choice((1, 2, 3)), rng.choice((1, 2, 8))
    p = rng.choice((0.0, 0.1))
    fam = XLM(V=rng.randint(5, 40), P=64, E=H * dh, H=H, F=rng.randint(1, 24),
              L=rng.choice((1, 2, 3)), tied=rng.random() < 0.5, dropout=p,
              attention_dropout=rng.choice((0.0, p)))
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.5:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("q_lin", "v_lin", "out_lin", "lin1", "all-linear"), rng.choice((1, 2)))),
            rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 1, 2, 3)), rng.choice((1, 2, 7, 33)), dtype, device,
                    "eager", autocast=rng.choice((None, BF16))
                    if device == "cuda" and dtype == F32 else None, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_xlms() -> None:
    rng = random.Random(20261202)  # noqa: S311 (not cryptography)
    for _ in range(30):
        assert_compiled_equals_traced(*_draw_xlm(rng))
