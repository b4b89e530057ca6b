"""BART's kin on the op graph (transformer_calc/graph/families/bart.py, a flag per
difference, mapped by graph/evaluate.py's _bart_kin_family): mBART (pre-norm layers, each
stack's final layer_norm), PLBART (BART's layout), Blenderbot (pre-norm, no
layernorm_embedding, positions looked up at arange(T) without BART's offset),
BlenderbotSmall (post-norm, Blenderbot's positions, the decoder's layernorm_embedding before
the positions are added), Pegasus (pre-norm, a frozen sinusoidal table), M2M-100 (pre-norm,
a sinusoidal buffer read under no_grad, no final_logits_bias), MVP without prompts
(BART's layout, MvpAttention's own bmm, eager only) and BigBird-Pegasus where transformers
runs its encoder's original_full attention (Blenderbot's layout with gelu_new, no attention
biases, BigBirdPegasusSelfAttention; eager only; from block_sparse_from tokens on, its
block-sparse attention keeps the rules), each as its *ForConditionalGeneration.
Every measured CPU row of their configs, to the byte, through the trace, the compiled
structure and memory_report; parameters and forward FLOPs equal tcalc's counts; family_of
maps them strictly; the compiled path equals the trace on random configurations.

Fixture: tests/data/activations_bart_kin_cpu.jsonl (tools/measure_activations_hf.py, the
commands in its docstring: torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, use_cache=False; full training B 2 T 64 and B 1 T 37, eager and SDPA,
fp32 and bf16; peft's LoRA rank 8 on all-linear and on q_proj,v_proj; an fp32 model under
torch.autocast("cpu", torch.bfloat16), whose rows count autocast's saved weight copies too;
a float16 model at B 2 T 8, where the pre-norm kin clamp the encoder's output;
MVP's and BigBird-Pegasus's SDPA rows are recorded as skipped: their classes have no SDPA
path; BigBird-Pegasus's rows at T 160, past its block_sparse_from, ran block-sparse). Its
tcalc_bytes column is what tcalc printed when measured (the rules on some rows, the graph
on others), not read here. The configs: tests/data/hf/variants/<type>-tiny.json, each config
class's defaults with small sizes (M2M-100's layerdrop 0.05 included: no layer was dropped
in the measured forwards, whose draws torch.manual_seed(0) fixes, but in the float16 ones,
which dropped a decoder layer; BigBird-Pegasus's
block_size 16 and num_random_blocks 2: block-sparse from (5 + 2 · 2) · 16 + 1 = 145 tokens).

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
from test_graph import _rules_report

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.evaluate import _BART_KIN
from transformer_calc.graph.families.bart import Bart
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import memory_report
from transformer_calc.params import count_params

# config -> its model type
CONFIGS = {f"{t}-tiny.json": t for t in ("mbart", "plbart", "blenderbot", "blenderbot-small",
                                         "pegasus", "m2m_100", "mvp", "bigbird_pegasus")}
EAGER_ONLY = ("mvp", "bigbird_pegasus")
# (the rows transformers ran block-sparse: test_block_sparse_attention_keeps_the_rules)
SPARSE = [r for r in measured_rows(tuple(CONFIGS))
          if 0 < spec_of(r["config"]).block_sparse_from <= r["T"]]
# (the rows whose forward layerdrop skipped a layer in: test_layerdrop_skips_layers)
DROPPED = [r for r in measured_rows(tuple(CONFIGS))
           if r["config"] == "m2m_100-tiny.json" and r["dtype"] == "fp16"]
ROWS = [r for r in measured_rows(tuple(CONFIGS)) if r not in SPARSE + DROPPED]
AUTOCAST = [r for r in ROWS if r.get("autocast")]


def test_the_rows_cover_every_config() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    for config, model_type in CONFIGS.items():
        rows = [r for r in ROWS if r["config"] == config]
        assert spec_of(config).model_type == model_type
        # (BigBird-Pegasus: tcalc takes no q_proj,v_proj targets for it, the row's
        # estimate could not run)
        assert {tuple(r["lora"][1:2]) for r in rows} == {(), ("all-linear",)} | (
            set() if model_type == "bigbird_pegasus" else {("q_proj,v_proj",)})
        assert any(r.get("autocast") for r in rows)
        assert {(r["B"], r["T"]) for r in rows} == {(2, 64), (1, 37)} | (
            set() if model_type == "m2m_100" else {(2, 8)})
        assert any(r["dtype"] == "fp16" for r in rows) == (model_type != "m2m_100")
        # MvpForConditionalGeneration and BigBird-Pegasus's have no SDPA path (their rows
        # say skipped)
        assert {r["attention"] for r in rows} == (
            {"eager"} if model_type in EAGER_ONLY else {"eager", "sdpa"})
    assert len(ROWS) == 6 * (4 * 4 + 2) + 5 * 2 + (2 * 4 + 1 + 1) + (2 * 3 + 1 + 1)
    assert len(DROPPED) == 2
    assert [(r["config"], r["T"], r["dtype"]) for r in SPARSE] == [
        ("bigbird_pegasus-tiny.json", 160, dtype) for dtype in ("fp32", "bf16")]


def _through_the_report(row: dict) -> bool:
    """The fp32 rows of full training and of LoRA on all-linear, and the float16 rows (the
    clamp's row): those checked through the compiled structure and memory_report too (each
    structure compiles once, the test's cost; the other rows' structures differ from these
    in a dtype or a target set only, which the random draws below compile, and the
    autocast rows go through the report)."""
    return row["dtype"] == "fp16" or row["dtype"] == "fp32" and (
        not row["lora"] or row["lora"][1] == "all-linear")


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), to the byte; for _through_the_report's rows
    # the compiled structure and memory_report too (its total, and its rows as the trace
    # names them)
    def check(row: dict) -> None:
        spec = spec_of(row["config"])
        if _through_the_report(row):
            check_measured(row, family_of(spec), row_run(row), spec)
        else:
            check_measured(row, family_of(spec), row_run(row), compiled=None)

    every_row([r for r in ROWS if not r.get("autocast")], check)


def _autocast(row: dict) -> None:
    # an fp32 model under CPU autocast: every saved storage (autocast's weight copies
    # included) against the measurement, traced and through memory_report (--mixed: a 16-bit
    # LoRA base, so the LoRA rows, whose base is fp32, are checked on the trace only)
    spec = spec_of(row["config"])
    fam = family_of(spec)
    traced = evaluate(fam, replace(row_run(row), autocast=BF16))
    assert sum(s.nbytes for s in traced.saved) == row["measured_bytes"]
    if row["lora"]:
        return
    report = memory_report(spec, row_settings(row, precision="bf16", mixed=True))
    copies = sum(s.nbytes for s in traced.saved if s.storage.kind == "weight_copy")
    assert report.activations.total + copies == row["measured_bytes"]


def test_autocast_rows_equal_the_measurement() -> None:
    every_row(AUTOCAST, _autocast)


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    # parameters: count_params (itself pinned against transformers on the meta device; the
    # frozen or buffered sinusoidal tables are not among them); FLOPs: count_flops per token
    # at context T, the graph's matmuls over B·T tokens
    spec = spec_of(config)
    fam = family_of(spec)
    for attention in ("eager",) if CONFIGS[config] in EAGER_ONLY else ("eager", "sdpa"):
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


# -- which specs map to these graphs ----------------------------------------------------------
def test_each_type_maps_to_its_flags() -> None:
    fams = {t: family_of(spec_of(c)) for c, t in CONFIGS.items()}
    assert all(isinstance(f, Bart) and not f.causal_lm and f.shared_tables
               for f in fams.values())
    pre = {t for t, f in fams.items() if isinstance(f, Bart) and f.pre_norm}
    assert pre == {"mbart", "blenderbot", "pegasus", "m2m_100", "bigbird_pegasus"}
    # (BigBirdPegasusEncoderLayer clamps only non-finite values, as BART's: not modelled)
    assert {t for t, f in fams.items() if isinstance(f, Bart) and f.fp16_clamp} == \
        pre - {"bigbird_pegasus"}
    assert {t for t, f in fams.items() if isinstance(f, Bart) and f.sinusoidal} == {
        "pegasus", "m2m_100"}
    assert {t for t, f in fams.items() if isinstance(f, Bart) and not f.embedding_norm} == {
        "blenderbot", "pegasus", "m2m_100", "bigbird_pegasus"}
    # the learned tables: BART's offset 2, Blenderbot's none; M2M-100's buffer has 2 rows more
    assert {t: f.position_offset for t, f in fams.items() if isinstance(f, Bart)} == {
        "mbart": 2, "plbart": 2, "mvp": 2, "blenderbot": 0, "blenderbot-small": 0,
        "pegasus": 0, "m2m_100": 2, "bigbird_pegasus": 0}
    small, m2m, mvp = fams["blenderbot-small"], fams["m2m_100"], fams["mvp"]
    assert isinstance(small, Bart) and small.norm_before_positions
    assert isinstance(m2m, Bart) and not m2m.logits_bias and m2m.act == "relu"
    # M2M100Config, PLBartConfig: attention_dropout 0.1
    assert m2m.attention_dropout == fams["plbart"].attention_dropout == 0.1  # type: ignore[union-attr]
    assert isinstance(mvp, Bart) and mvp.bmm_attention and mvp.decoder_batch_positions
    # BigBirdPegasusConfig: use_bias False, gelu_new, block_size 16 and 2 random blocks here
    bigbird = fams["bigbird_pegasus"]
    assert isinstance(bigbird, Bart) and bigbird.bigbird and not bigbird.attention_bias
    assert bigbird.act == "gelu_new" and bigbird.block_sparse_from == 145
    assert all(isinstance(f, Bart) and f.attention_bias and not f.block_sparse_from
               for t, f in fams.items() if t != "bigbird_pegasus")


def test_block_sparse_attention_keeps_the_rules() -> None:
    # from block_sparse_from tokens on BigBirdPegasusEncoder runs block-sparse attention
    # (the rows at T 160): the graph refuses it, memory_report answers from the rules and
    # says so; the
    # default config switches at (5 + 2 · 3) · 64 + 1 = 705 tokens
    spec = spec_of("bigbird_pegasus-tiny.json")
    for row in SPARSE:
        with pytest.raises(ValueError, match="block-sparse"):
            evaluate(family_of(spec), row_run(row))
        report = memory_report(spec, row_settings(row)).activations
        assert report.total == _rules_report(spec, row_settings(row)).activations.total
        assert any("block-sparse attention" in n for n in report.notes)
    short = memory_report(spec, row_settings(next(
        r for r in ROWS if r["config"] == "bigbird_pegasus-tiny.json"))).activations
    assert not any("block-sparse" in n for n in short.notes)
    default = spec_from_hf({"model_type": "bigbird_pegasus"})
    assert default.block_sparse_from == 705
    full = spec_from_hf(_tiny("bigbird_pegasus-tiny.json", attention_type="original_full"))
    assert full.block_sparse_from == 0
    with pytest.raises(TcalcError, match="attention_type"):
        spec_from_hf(_tiny("bigbird_pegasus-tiny.json", attention_type="sparse"))

def _tiny(config: str, **change: object) -> dict:
    return json.loads((DATA / "hf" / "variants" / config).read_text()) | change


def test_what_the_graph_does_not_transcribe_keeps_the_rules() -> None:
    # the decoder alone (*ForCausalLM), untied tables, another norm placement or position
    # kind than the model type's, an SDPA path MVP does not have: family_of refuses
    decoder = spec_from_hf(_tiny("mbart-tiny.json", architectures=["MBartForCausalLM"]))
    assert decoder.arch == "decoder"
    mbart, pegasus, mvp = (spec_of(c) for c in ("mbart-tiny.json", "pegasus-tiny.json",
                                                "mvp-tiny.json"))
    for other in (decoder, mbart.replace(norm_position="post"),
                  mbart.replace(final_norm=False), mbart.replace(embedding_norm=False),
                  mbart.replace(tie_embeddings=False), mbart.replace(position_offset=0),
                  mbart.replace(bias_k=False), mbart.replace(loss_fp32=True),
                  mbart.replace(n_kv_heads=2), pegasus.replace(position="learned"),
                  mvp.replace(sdpa_path=True), mbart.replace(block_sparse_from=145),
                  mbart.replace(bias_q=False, bias_k=False, bias_v=False, bias_o=False),
                  spec_of("bigbird_pegasus-tiny.json").replace(bias_q=True)):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(other)


def test_the_pre_norm_kin_clamp_a_float16_encoder_output() -> None:
    # MBartEncoderLayer (and Blenderbot's, Pegasus's, M2M-100's): under float16,
    # torch.clamp(hidden_states, ±(finfo.max - 1000)) whatever the values, which keeps its
    # input (derivatives.yaml clamp: self): B·T·E · 2 bytes an encoder layer; BART's clamps
    # only non-finite values (not modelled), PLBART's likewise (the fp16 rows measure it:
    # test_every_row_equals_the_measurement)
    run16, run_bf = (Run(2, 8, dt, "cpu", "eager") for dt in (F16, BF16))
    for config in CONFIGS:
        fam = family_of(spec_of(config))
        assert isinstance(fam, Bart)
        extra = evaluate(fam, run16).activation_bytes - evaluate(fam, run_bf).activation_bytes
        assert extra == (fam.Le * 2 * 8 * fam.E * 2 if fam.fp16_clamp else 0)


def test_layerdrop_skips_layers() -> None:
    # M2M100Config's encoder_layerdrop and decoder_layerdrop (0.05): in training each layer
    # is skipped when torch.rand([]) draws below it. The float16 rows' forwards skipped a
    # decoder layer: the graph, which runs every layer, is their upper bound, and the graph
    # with one decoder layer fewer is the measurement, to the byte
    fam = family_of(spec_of("m2m_100-tiny.json"))
    assert isinstance(fam, Bart)
    for row in DROPPED:
        assert evaluate(fam, row_run(row)).activation_bytes > row["measured_bytes"]
        fewer = replace(fam, Ld=fam.Ld - 1)
        assert evaluate(fewer, row_run(row)).activation_bytes == row["measured_bytes"]
    assert "layerdrop" in spec_of("m2m_100-tiny.json").note
    assert "layerdrop" not in spec_of("mbart-tiny.json").note


# -- compiled against traced ---------------------------------------------------------------
def _draw(rng: random.Random) -> tuple[Bart, Run]:
    """A random member of BART's kin and run, with the 0/1 edge cases (B = 1, T = 1, one
    head, one layer per stack, head dims of 1)."""
    H = rng.choice((1, 2, 4))
    kind = rng.choice(sorted(_BART_KIN))
    flags = _BART_KIN[kind]
    if kind == "bigbird_pegasus":
        flags = {**flags, "attention_bias": rng.random() < 0.5}
    fam = Bart(V=rng.randint(5, 40), P=64, E=H * rng.choice((1, 2, 8)), H=H,
               F=rng.randint(1, 24), Le=rng.choice((1, 2)), Ld=rng.choice((1, 2)),
               act=rng.choice(("gelu", "relu", "gelu_new")), dropout=rng.choice((0.0, 0.1)),
               attention_dropout=rng.choice((0.0, 0.1)),
               activation_dropout=rng.choice((0.0, 0.1)), **flags)
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.4:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("q_proj", "v_proj", "out_proj", "fc1", "fc2", "all-linear"), rng.choice((1, 2)))),
            rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 33)), dtype, device,
                    "eager" if kind in EAGER_ONLY else rng.choice(("eager", "sdpa")),
                    autocast=BF16 if dtype == F32 and rng.random() < 0.4 else None,
                    use_cache=rng.random() < 0.2, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_draws() -> None:
    assert cache_hits_on_random_draws(_draw, 11, 10) > 0
