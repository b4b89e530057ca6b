"""The op graphs of BERT's kin that the encoder families did not map: DistilBERT
(transformer_calc/graph/families/distilbert.py), the pre-norm encoders RoBERTa-PreLayerNorm,
XLM-RoBERTa-XL and Megatron-BERT (families/prenorm_bert.py), RoFormer (families/roformer.py),
BigBird where it runs full attention (families/bert.py's BigBird) and Flaubert (XLM's
forward, families/xlm.py), which memory_report reads for their model types: against every
measured CPU row of their configs, to the byte (full training, peft's LoRA, CPU autocast);
family_of maps them strictly; parameters and FLOPs as tcalc counts them (and as
transformers and FlopCounterMode count them, pinned below); compiled against traced on
random configurations.

Fixture: tests/data/activations_encoders_kin_cpu.jsonl (torch 2.13 CPU, transformers 5.23,
peft 0.21.2, saved_tensors_hooks, use_cache=False, each storage still held at the end of the
forward once, parameters and buffers excluded; the class hf.counted_class names, B=2 T=64,
eager and SDPA where the class has it, fp32 and bf16; the rows the measurement skipped,
classes without SDPA, left out), written by the commands in
tools/measure_activations_hf.py's docstring: the seven -tiny configs full, LoRA all-linear
r 8 and under CPU autocast; roformer-rotary-value the same; LoRA on DistilBERT's and
Flaubert's q_lin,v_lin and DistilBERT's out_lin,lin2. The tcalc_bytes column of the seven
configs' rows is what the rules (memory.activation_breakdown) answered before the graph
mapped these types, of the other rows the graph's; the autocast rows count autocast's saved
weight copies too. BigBird's rows ran original_full: T=64 is below its block-sparse length
((5 + 2·3)·64 + 1 = 705; transformers switches the attention type and says so).

Tolerance: none.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import (
    cache_hits_on_random_draws,
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
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import evaluate_fast
from transformer_calc.graph.families.bert import Bert, BigBird
from transformer_calc.graph.families.distilbert import DistilBert
from transformer_calc.graph.families.prenorm_bert import LAYOUTS, PreNormBert
from transformer_calc.graph.families.roformer import RoFormer
from transformer_calc.graph.families.xlm import XLM
from transformer_calc.graph.names import by_name, component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params

CONFIGS = ("distilbert-tiny.json", "roberta-prelayernorm-tiny.json",
           "xlm-roberta-xl-tiny.json", "megatron-bert-tiny.json", "flaubert-tiny.json",
           "roformer-tiny.json", "roformer-rotary-value.json", "big_bird-tiny.json")
ROWS = measured_rows(CONFIGS)


def test_the_rows_cover_every_config() -> None:
    counts = {c: sum(r["config"] == c for r in ROWS) for c in CONFIGS}
    # eager and SDPA (not Megatron-BERT's, Flaubert's, RoFormer's, BigBird's), fp32 and
    # bf16, full and LoRA all-linear r 8; fp32 under autocast; LoRA on peft's q_lin,v_lin
    # (DistilBERT, Flaubert) and out_lin,lin2 (DistilBERT)
    assert counts == {"distilbert-tiny.json": 18, "roberta-prelayernorm-tiny.json": 10,
                      "xlm-roberta-xl-tiny.json": 10, "megatron-bert-tiny.json": 5,
                      "flaubert-tiny.json": 7, "roformer-tiny.json": 5,
                      "roformer-rotary-value.json": 5, "big_bird-tiny.json": 5}
    assert {r["file"] for r in ROWS} == {"activations_encoders_kin_cpu.jsonl"}


def _check(row: dict) -> None:
    spec = spec_of(row["config"])
    fam = family_of(spec)
    if not row.get("autocast"):
        check_measured(row, fam, row_run(row), spec)
        return
    # an fp32 model under torch.autocast("cpu", bf16): the hooks see autocast's saved
    # bf16 copies of the weights too
    run = replace(row_run(row), autocast=BF16)
    traced = evaluate(fam, run)
    copies = sum(s.nbytes for s in traced.saved if s.storage.kind == "weight_copy")
    want = row["measured_bytes"]
    assert traced.activation_bytes + copies == want, \
        f"traced: measured {want:,}, got {traced.activation_bytes + copies:,}"
    assert evaluate_fast(fam, run).activation_bytes == traced.activation_bytes
    report = memory_report(spec, row_settings(row, precision="bf16", mixed=True))
    assert report.activations.total + copies == want, \
        f"memory_report: measured {want:,}, got {report.activations.total + copies:,}"


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report's
    # total and rows, each to the byte
    every_row(ROWS, _check)


def test_the_families_are_their_model_types() -> None:
    kinds = {c: family_of(spec_of(c)) for c in CONFIGS}
    assert isinstance(kinds["distilbert-tiny.json"], DistilBert)
    assert {c: (f.layout, f.base) for c, f in kinds.items() if isinstance(f, PreNormBert)} == {
        "roberta-prelayernorm-tiny.json": ("roberta-prelayernorm", "roberta_prelayernorm"),
        "xlm-roberta-xl-tiny.json": ("xlm-roberta-xl", "roberta"),
        "megatron-bert-tiny.json": ("megatron-bert", "bert")}
    assert type(kinds["flaubert-tiny.json"]) is XLM
    assert type(kinds["roformer-tiny.json"]) is type(kinds["roformer-rotary-value.json"]) \
        is RoFormer
    big = kinds["big_bird-tiny.json"]
    assert isinstance(big, BigBird) and (big.act, big.head_act, big.sparse_from) == (
        "gelu_new", "gelu_new", 705)


# torch.utils.flop_counter.FlopCounterMode over the class's forward with labels (torch 2.13,
# transformers 5.23, eager, fp32, train mode) of one sequence at T=64 and T=100:
# tools/reference_flops.py --seq-len 64 (100) on each config
PINNED_FLOPS = {"distilbert-tiny.json": (14_155_776, 23_961_600),
                "roberta-prelayernorm-tiny.json": (14_155_776, 23_961_600),
                "xlm-roberta-xl-tiny.json": (14_155_776, 23_961_600),
                "megatron-bert-tiny.json": (14_155_776, 23_961_600),
                "flaubert-tiny.json": (18_874_368, 31_334_400),
                "roformer-tiny.json": (14_155_776, 23_961_600),
                # (the pooler's dense over the first token: 2 · 64 · 64 more)
                "big_bird-tiny.json": (14_163_968, 23_969_792)}


# the class's trainable parameters on the meta device (tools/reference_counts.py, torch 2.13,
# transformers 5.23)
PINNED_PARAMS = {"distilbert-tiny.json": 129_152, "roberta-prelayernorm-tiny.json": 129_408,
                 "xlm-roberta-xl-tiny.json": 129_344, "megatron-bert-tiny.json": 129_280,
                 "flaubert-tiny.json": 166_144, "roformer-tiny.json": 96_512,
                 "big_bird-tiny.json": 362_816}


@pytest.mark.parametrize("config", sorted(PINNED_FLOPS))
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = spec_of(config)
    for B, T in ((1, 64), (1, 100), (3, 100)):
        r = evaluate(family_of(spec), Run(B, T, F32, "cpu", "eager"))
        assert r.params == r.trainable_params == count_params(spec).total \
            == PINNED_PARAMS[config]
        per_token = count_flops(spec, T).total
        # (BigBird's pooler runs once a sequence: tcalc's per-token figure is floored)
        assert r.forward_flops // (B * T) == per_token
        assert spec.pooler or r.forward_flops == B * T * per_token
        assert r.forward_flops == B * PINNED_FLOPS[config][T == 100]


def _names(config: str, run: Run) -> dict[str, int]:
    return by_name(component_rows(family_of(spec_of(config)), run))


def test_the_prenorm_layouts_keep_their_norms_and_dropouts() -> None:
    # two norms a layer and a final norm, each keeping its input and its (B, T, 1) mean
    # and rstd; the embeddings' LayerNorm only on RoBERTa-PreLN; XLM-RoBERTa-XL's
    # XLMRobertaXLOutput has no dropout: one residual dropout mask a layer fewer
    B, T, E, L = 2, 64, 64, 2
    run = Run(B, T, F32, "cpu", "eager")
    pre, xl, meg = (_names(c, run) for c in ("roberta-prelayernorm-tiny.json",
                                             "xlm-roberta-xl-tiny.json",
                                             "megatron-bert-tiny.json"))
    for names in (pre, xl, meg):
        assert names["encoder.final_norm.input"] == B * T * E * 4
        assert names["encoder.attn.norm.input"] == names["encoder.ffn.norm.input"] \
            == L * B * T * E * 4
    assert "embed.norm.input" in pre and "embed.norm.input" not in xl | meg
    assert pre["encoder.ffn.residual_dropout_mask"] == L * B * T * E * 4
    assert "encoder.ffn.residual_dropout_mask" not in xl
    assert meg["embed.token_type_ids"] == B * T * 8  # MegatronBertModel's zeros


def test_distilbert_has_no_token_types_and_no_attention_output_dropout() -> None:
    B, T = 2, 64
    names = _names("distilbert-tiny.json", Run(B, T, F32, "cpu", "eager"))
    assert "embed.token_type_ids" not in names
    assert "encoder.attn.residual_dropout_mask" not in names
    # peft's names: q_lin, v_lin (r 8: 2 layers × 2 × 8 · (64 + 64))
    lora = Run(B, T, F32, "cpu", "eager", lora=Lora(8, frozenset({"q_lin", "v_lin"})))
    assert evaluate(family_of(spec_of("distilbert-tiny.json")), lora).trainable_params \
        == 2 * 2 * 8 * 128


@pytest.mark.parametrize("config, change", [
    ("distilbert-tiny.json", dict(token_types=2)),
    ("distilbert-tiny.json", dict(norm_position="pre")),
    ("distilbert-tiny.json", dict(mlm_head=False, classifier="linear", num_labels=2)),
    ("roberta-prelayernorm-tiny.json", dict(norm_position="post")),
    ("roberta-prelayernorm-tiny.json", dict(embedding_norm=False)),
    ("roberta-prelayernorm-tiny.json", dict(final_norm=False)),
    ("xlm-roberta-xl-tiny.json", dict(embedding_norm=True)),
    ("xlm-roberta-xl-tiny.json", dict(sdpa_path=False)),
    ("megatron-bert-tiny.json", dict(sdpa_path=True)),
    ("megatron-bert-tiny.json", dict(activation="gelu_new")),
    ("flaubert-tiny.json", dict(norm_position="pre")),
    ("roformer-tiny.json", dict(position="learned")),
    ("roformer-tiny.json", dict(sdpa_path=True)),
    ("roformer-tiny.json", dict(d_model=60, n_heads=4)),  # heads 15 wide: no feature pairs
    ("big_bird-tiny.json", dict(activation="relu")),
    ("big_bird-tiny.json", dict(pooler=False)),
    ("big_bird-tiny.json", dict(sdpa_path=True)),
], ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.items())))
def test_what_the_graphs_do_not_transcribe_is_refused(config: str, change: dict) -> None:
    spec = spec_of(config)
    assert isinstance(family_of(spec), Bert | XLM)
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(spec, **change))


def test_flauberts_pre_norm_is_read_and_refused() -> None:
    # FlaubertModel's pre_norm puts layer_norm1/2 before the sublayers: spec_from_hf says
    # so, and the graph (XLM's post-norm forward) refuses it; layerdrop is noted
    config = json.loads((DATA / "hf" / "variants" / "flaubert-tiny.json").read_text())
    pre = spec_from_hf({**config, "pre_norm": True})
    assert pre.norm_position == "pre"
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(pre)
    assert "layerdrop" in spec_from_hf({**config, "layerdrop": 0.1}).note


BASES = {"roberta-prelayernorm": "roberta_prelayernorm", "xlm-roberta-xl": "roberta",
         "megatron-bert": "bert"}


def test_bigbird_block_sparse_lengths_keep_the_rules() -> None:
    # attention_type block_sparse (BigBirdConfig's default): original_full up to
    # (5 + 2 · 3) · 64 = 704 tokens, BigBird's block-sparse attention from 705 on, which the
    # graph does not transcribe; original_full at every length reads the graph
    config = json.loads((DATA / "hf" / "variants" / "big_bird-tiny.json").read_text())
    for cfg, T, graph in ((config, 704, True), (config, 705, False),
                          ({**config, "attention_type": "original_full"}, 2048, True),
                          ({**config, "block_size": 16, "num_random_blocks": 2}, 145, False)):
        spec = spec_from_hf(cfg)
        settings = Settings(precision="fp32", batch_size=1, seq_len=T, attention="eager",
                            device="cpu")
        got = graph_costs.graph_activations(spec, settings, T, amp=False, amp16=False,
                                            adapted_roles=None)
        assert (got is not None) == graph, (cfg, T)
        assert memory_report(spec, settings).activations.total > 0


def _draw(rng: random.Random) -> tuple[Bert, Run]:
    """DistilBERT, a pre-norm layout, RoFormer or BigBird with sizes drawn freely (one head,
    one layer, B = 1, T = 1 among them), eager or SDPA (Megatron-BERT, RoFormer and BigBird
    eager), any dtype and device, LoRA, recomputation."""
    layout = rng.choice(("distilbert", "roformer", "big_bird", *LAYOUTS))
    H, dh = rng.choice((1, 2, 4)), rng.choice((2, 8) if layout == "roformer" else (1, 2, 8))
    p = rng.choice((0.0, 0.1))
    sizes = dict(V=rng.randint(5, 40), P=rng.randint(70, 90), Ty=rng.randint(1, 3),
                 E=H * dh, H=H, F=rng.randint(1, 24), L=rng.choice((1, 2, 3)),
                 tied=rng.random() < 0.5, hidden_dropout=p, attention_dropout=p)
    fam: Bert
    if layout == "distilbert":
        fam = DistilBert(**sizes, base="distilbert", head="distilbert", type_table=False)
    elif layout == "roformer":
        fam = RoFormer(**sizes, base="roformer")
    elif layout == "big_bird":
        act = rng.choice(("gelu", "gelu_new"))
        fam = BigBird(**sizes, head_act=act, act=act, sparse_from=705)
    else:
        bert_like = layout == "megatron-bert"
        fam = PreNormBert(**sizes, base=BASES[layout], head="bert" if bert_like else "roberta",
                          positions_from_ids=not bert_like, layout=layout)
    lora = None
    if rng.random() < 0.5:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("query", "value", "q_lin", "lin2", "dense", "all-linear"), rng.choice((1, 2)))),
            rng.choice((0.0, 0.05)))
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, BF16, F16))
    attention = rng.choice(("eager", "sdpa")) if layout in (
        "distilbert", "roberta-prelayernorm", "xlm-roberta-xl") else "eager"
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 7, 33)), dtype, device, attention,
                    autocast=rng.choice((None, BF16)) if dtype == F32 else None, lora=lora,
                    recompute=rng.choice(("none", "selective", "full")))


def test_compiled_equals_traced_on_random_encoders() -> None:
    assert cache_hits_on_random_draws(_draw, 20261130, 20) >= 5
