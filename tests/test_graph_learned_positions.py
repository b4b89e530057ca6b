"""The op graph's decoders with learned positions (transformer_calc/graph/families/opt.py: OPT,
BioGPT, XGLM and TrOCR),
which memory_report reads for their model types: against every measured CPU row of their
configs, to the byte; family_of maps them (and nothing it does not transcribe); the compiled
path equals the full trace on random configurations.

Fixtures (read, not changed): the rows of the configs below in tests/data/activations_*.jsonl
(full training and peft LoRA, eager and SDPA, fp32 and bf16), all measured by
tools/measure_activations_hf.py: torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, use_cache=False, each storage still held at the end of the forward
once, parameters and buffers excluded. activations_opt_projections_lora_cpu.jsonl was written
by

    python tools/measure_activations_hf.py --lora 8 \\
        --lora-targets project_in,project_out,fc1,fc2 --tcalc-targets project,up,down \\
        tests/data/hf/variants/opt-projected.json

Tolerance: none.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import (
    assert_compiled_equals_traced,
    check_measured,
    every_row,
    measured_rows,
    row_run,
    row_settings,
    spec_of,
)
from test_graph import _rules_report

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import clear_cache
from transformer_calc.graph.families.opt import OPT, BioGpt, TrOcr, Xglm
from transformer_calc.hf import spec_from_hf
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

# config -> its model type
CONFIGS = {"opt-projected.json": "opt", "opt-nobias-post.json": "opt",
           "biogpt-tiny.json": "biogpt", "xglm-tiny.json": "xglm",
           "trocr-tiny.json": "trocr"}
ROWS = measured_rows(tuple(CONFIGS))


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _in_tcalcs_roles(row: dict) -> bool:
    """Whether tcalc's LoRA roles name the row's layers: its "project" is both of OPT's
    projections, so project_in adapted alone has no name."""
    return "project_in,fc1,fc2" not in (row.get("lora") or ("",))[1:2]


def test_the_rows_cover_every_config() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    for config in CONFIGS:
        rows = [r for r in ROWS if r["config"] == config]
        assert any(not r.get("lora") for r in rows) and any(r.get("lora") for r in rows)
        # (XGLMForCausalLM and TrOCRForCausalLM have no SDPA path: their rows are eager)
        assert {r["attention"] for r in rows} == (
            {"eager"} if config in ("xglm-tiny.json", "trocr-tiny.json") else {"eager", "sdpa"})
        assert {r["dtype"] for r in rows} == {"fp32", "bf16"}


def _measured(row: dict) -> None:
    if "trainable" in row and row["config"] == "trocr-tiny.json":
        # peft's count of the adapters' parameters in TrOCR holds those of each layer's idle
        # encoder_attn too, whose q/k/v_proj peft adapts as well: half of them
        n = row["trainable"][0]
        row = {**row, "trainable": [n - n // 2]}
    # (memory_report where tcalc's roles name the row's layers)
    spec = _spec(row["config"])
    check_measured(row, family_of(spec), row_run(row), spec if _in_tcalcs_roles(row) else None)


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows as the trace names them), each to the byte
    every_row(ROWS, _measured)


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    # parameters: count_params (itself pinned against transformers on the meta device);
    # FLOPs: count_flops per token at context T, the graph's matmuls over B·T tokens.
    # TrOCRForCausalLM builds each layer's cross-attention (encoder_attn and its norm: 4
    # biased E×E linears and a LayerNorm), which a decoder-only forward leaves idle
    spec = _spec(config)
    fam = family_of(spec)
    E = spec.d_model
    idle = fam.L * (4 * (E * E + E) + 2 * E) if isinstance(fam, TrOcr) else 0
    for attention in ("eager", "sdpa"):
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total - idle
            assert r.forward_flops == B * T * count_flops(spec, T).total


# -- where the rules went wrong -------------------------------------------------------------
def _rules(row: dict) -> int:
    return _rules_report(_spec(row["config"]), row_settings(row)).activations.total


def test_opt_keeps_its_projections_inputs_and_a_position_per_sequence() -> None:
    # OPTDecoder: project_in keeps the token embeddings (B, T, d_embed) and project_out its
    # (B, T, d_model) input, which the rules leave out; there is no dropout on the
    # embeddings, whose mask (B·T·d_model, as many bytes as project_out's input) the rules
    # count; position_ids come from a cumulative sum over a (B, T) mask of ones, so the
    # embedding keeps B·T int64 ids (the rules T); the loss's 0-d total_weight and, at B = 1,
    # the padded labels. Full training: -0.6 to -1.8 % in the rules
    for row in (r for r in ROWS if not r.get("lora") and r["config"].startswith("opt")):
        fam = family_of(_spec(row["config"]))
        assert isinstance(fam, OPT) and fam.projected
        B, T = row["B"], row["T"]
        itemsize = 4 if row["dtype"] == "fp32" else 2
        labels = 8 if B == 1 else 0
        assert row["measured_bytes"] - _rules(row) == \
            B * T * fam.Ee * itemsize + (B - 1) * T * 8 + 4 + labels, row
        assert evaluate(fam, row_run(row)).activation_bytes == row["measured_bytes"]


@pytest.mark.parametrize("config", ("biogpt-tiny.json", "xglm-tiny.json"))
def test_biogpt_and_xglm_miss_only_small_tensors_in_the_rules(config: str) -> None:
    # the loss's 0-d total_weight and, at B = 1, the padded labels (8 bytes); XGLM's
    # torch.max(scores, torch.full((), finfo.min)) keeps its 0-d fp32 floor in each layer
    fam = family_of(_spec(config))
    floors = 4 * fam.L if isinstance(fam, Xglm) else 0
    for row in (r for r in ROWS if r["config"] == config):
        labels = 8 if row["B"] == 1 else 0
        assert row["measured_bytes"] - _rules(row) == 4 + labels + floors, row


def test_trocr_positions_per_sequence_and_its_loss_dtype() -> None:
    # TrOCRLearnedPositionalEmbedding: arange(T).expand(B, -1) + 2, B·T int64 ids that
    # the embedding keeps (in full training); the rules count T·8 bytes more. The loss
    # (nn.CrossEntropyLoss over the logits unshifted, in their dtype) keeps a 0-d
    # total_weight of that dtype, which the rules leave out: +0.03 to +0.10 % in full
    # training, -2 or -4 bytes under LoRA
    for row in (r for r in ROWS if r["config"] == "trocr-tiny.json"):
        itemsize = 4 if row["dtype"] == "fp32" else 2
        ids = 0 if row.get("lora") else row["T"] * 8
        assert _rules(row) - row["measured_bytes"] == ids - itemsize, row


# -- which specs map to these graphs ----------------------------------------------------------
def test_each_config_maps_to_its_flags() -> None:
    post = family_of(_spec("opt-nobias-post.json"))
    assert isinstance(post, OPT) and not post.pre_norm and not post.final_norm
    assert not post.bias and not post.tied and post.Ee == 128 and post.E == 256
    projected = family_of(_spec("opt-projected.json"))
    assert isinstance(projected, OPT) and projected.bias and projected.tied
    assert projected.Ee == 32 and projected.P == 128
    biogpt = family_of(_spec("biogpt-tiny.json"))
    assert isinstance(biogpt, BioGpt) and biogpt.pre_norm and biogpt.bias and biogpt.tied
    assert biogpt.dropout == biogpt.attention_dropout == 0.1 and not biogpt.projected
    assert not isinstance(biogpt, Xglm)
    xglm = family_of(_spec("xglm-tiny.json"))
    assert isinstance(xglm, Xglm) and xglm.L == 3 and xglm.F == 40 and xglm.tied
    trocr = family_of(_spec("trocr-tiny.json"))
    assert isinstance(trocr, TrOcr) and not trocr.pre_norm and trocr.attention_dropout == 0


def test_a_pre_norm_opt_maps_with_its_final_norm() -> None:
    data = json.loads((DATA / "hf" / "variants" / "opt-projected.json").read_text())
    fam = family_of(spec_from_hf(data | {"do_layer_norm_before": True}))
    assert isinstance(fam, OPT) and fam.pre_norm and fam.final_norm
    fam = family_of(spec_from_hf(data | {"do_layer_norm_before": True,
                                         "_remove_final_layer_norm": True}))
    assert isinstance(fam, OPT) and fam.pre_norm and not fam.final_norm


@pytest.mark.parametrize("change", [
    {"activation": "gelu"}, {"position_offset": 0}, {"bias_o": False},
    {"norm": "rmsnorm"}, {"position": "sinusoidal"}, {"n_kv_heads": 2},
    {"model_type": "biogpt"}])
def test_what_opts_graph_does_not_transcribe_keeps_the_rules(change: dict) -> None:
    spec = replace(_spec("opt-projected.json"), **change)
    try:
        fam = family_of(spec)
    except TcalcError:  # no family at all: the rules answer
        return
    assert not isinstance(fam, OPT)


@pytest.mark.parametrize("change", [
    {"activation": "relu"}, {"softmax_fp32": True}, {"bias_ffn_in": False},
    {"norm_position": "post"}, {"n_kv_heads": 1}, {"embed_proj_dim": 16},
    {"model_type": "opt"}])
def test_what_biogpts_graph_does_not_transcribe_keeps_the_rules(change: dict) -> None:
    spec = replace(_spec("biogpt-tiny.json"), **change)
    try:
        fam = family_of(spec)
    except TcalcError:  # no family at all: the rules answer
        return
    assert not isinstance(fam, BioGpt)


@pytest.mark.parametrize("change", [
    {"scores_clamped": False}, {"sdpa_path": True}, {"position": "learned"},
    {"activation": "relu"}, {"norm_position": "post"}, {"model_type": "biogpt"}])
def test_what_xglms_graph_does_not_transcribe_keeps_the_rules(change: dict) -> None:
    spec = replace(_spec("xglm-tiny.json"), **change)
    try:
        fam = family_of(spec)
    except TcalcError:  # no family at all: the rules answer
        return
    assert not isinstance(fam, Xglm)


# -- the compiled path ------------------------------------------------------------------------
def test_compiled_equals_traced_on_random_configurations() -> None:
    rng = random.Random(7)  # noqa: S311 (not cryptography)
    clear_cache()
    for _ in range(40):
        H = rng.choice((1, 2, 4))
        E = H * rng.choice((4, 8))
        kind = rng.choice((OPT, OPT, BioGpt, Xglm, TrOcr))
        fam = kind(V=rng.choice((16, 40)), P=rng.choice((32, 64)), E=E, H=H,
                  F=rng.choice((8, 24)), L=rng.choice((1, 2, 3)),
                  Ee=rng.choice((E, E // 2)) if kind is OPT else E, tied=rng.random() < 0.5,
                  bias=rng.random() < 0.5 or kind is not OPT,
                  pre_norm=(pre := kind is not TrOcr and (rng.random() < 0.5 or kind is not OPT)),
                  final_norm=pre and (rng.random() < 0.7 or kind is not OPT),
                  dropout=rng.choice((0.0, 0.1)), attention_dropout=rng.choice((0.0, 0.1)))
        targets = rng.choice((None, "all-linear", "q_proj,v_proj", "project_in,fc1,fc2",
                              "out_proj,fc2", "project_out"))
        lora = Lora(8, frozenset(targets.split(",")), rng.choice((0.0, 0.1))) \
            if targets else None
        run = Run(rng.choice((1, 2, 3)), rng.choice((5, 8, 16)), rng.choice((F32, BF16)),
                  "cpu", "eager" if kind in (Xglm, TrOcr) else rng.choice(("eager", "sdpa")),
                  lora=lora)
        assert_compiled_equals_traced(fam, run)
