"""More encoder-decoders' op graphs, which memory_report reads for them: Whisper's text
decoder (transformer_calc/graph/families/whisper.py: WhisperForCausalLM, its cross-attention
built and idle), T5Gemma (families/t5gemma.py: T5GemmaForConditionalGeneration, eager
only) and LongT5 with local and transient-global attention (families/t5.py:
LongT5ForConditionalGeneration, eager only), against every measured CPU row of those
layouts, to the byte, compiled equal to traced, and mapped from their specs strictly.

Fixtures (torch 2.13 CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks, each storage
still held at the end of the forward once, parameters and buffers excluded; measured by
tools/measure_activations_hf.py, whose forward is model(input_ids=ids, labels=ids,
use_cache=False)): the rows of whisper-tiny, t5gemma-tiny, t5gemma-untied, longt5-local,
longt5-local-default, longt5-local-nodropout, longt5-tglobal and longt5-tglobal-default in
tests/data/activations_*_cpu.jsonl
(activations_decoders_encoders_cpu.jsonl: Whisper's full training, eager and SDPA, fp32 and
bf16; activations_t5gemma_gemma3n_dsv4_cpu.jsonl: T5Gemma's full training and all-linear
LoRA, eager; activations_longt5_olmo_hybrid_cpu.jsonl: LongT5's full training, eager, T a
multiple of the block or not; the LoRA surveys' rows). Tolerance: none.
"""

from __future__ import annotations

import json
import random

import pytest
from conftest import DATA
from graph_rows import (
    cache_hits_on_random_draws,
    check_measured,
    every_row,
    measured_rows,
    row_run,
    spec_of,
)

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.t5 import T5
from transformer_calc.graph.families.t5gemma import T5Gemma
from transformer_calc.graph.families.whisper import Whisper
from transformer_calc.graph.names import by_name, component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

WHISPER_CONFIGS = ("whisper-tiny.json",)
T5GEMMA_CONFIGS = ("t5gemma-tiny.json", "t5gemma-untied.json")
LONGT5_CONFIGS = ("longt5-local.json", "longt5-local-default.json",
                  "longt5-local-nodropout.json", "longt5-tglobal.json",
                  "longt5-tglobal-default.json")
CONFIGS = WHISPER_CONFIGS + T5GEMMA_CONFIGS + LONGT5_CONFIGS
EAGER_ONLY = T5GEMMA_CONFIGS + LONGT5_CONFIGS
ROWS = measured_rows(CONFIGS)


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_the_model_types_full_training_and_lora() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    assert {_spec(c).model_type for c in WHISPER_CONFIGS} == {"whisper"}
    assert {_spec(c).model_type for c in T5GEMMA_CONFIGS} == {"t5gemma"}
    assert {_spec(c).model_type for c in LONGT5_CONFIGS} == {"longt5"}
    full = [r for r in ROWS if not r.get("lora")]
    assert len(full) == 8 + 8 + 16 + 10
    assert len(ROWS) - len(full) == 12 + 16 + 6 + 4


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure against the trace on
    # every output and named row, and memory_report (its total, and its rows as the trace
    # names them), each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, family_of(_spec(row["config"])), row_run(row), _spec(row["config"]),
        compiled="traced"))


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    # (T5Gemma's sliding layers: up to T = sliding_window, past which tcalc's FLOPs count
    # the window's keys, where eager attention computes all T; LongT5's local blocks: T a
    # multiple of the block, past which the einsums run on padded blocks, pinned below)
    sizes = ((1, 8), (3, 5)) if config in T5GEMMA_CONFIGS else \
        ((1, 128), (3, 256)) if config in LONGT5_CONFIGS else ((1, 64), (3, 100))
    for attention in ("eager",) if config in EAGER_ONLY else ("eager", "sdpa"):
        for B, T in sizes:
            r = evaluate(family_of(spec), Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


# -- Whisper's decoder ---------------------------------------------------------------------
def test_whisper_keeps_its_idle_cross_attention_and_its_copied_heads() -> None:
    # WhisperForCausalLM's layers build encoder_attn and never call it: its parameters
    # count (k_proj without a bias), and peft adapts its q, k, v too (the rows' trainable
    # counts: 12,288 for q,k,v on two layers of d_model 64 = 2 · 2 · 3 · 8 · (64 + 64));
    # the attention makes Q (scaled), K and V contiguous: eager's products keep the copies
    fam = family_of(_spec("whisper-tiny.json"))
    assert isinstance(fam, Whisper) and (fam.L, fam.P) == (2, 256)
    r = evaluate(fam, Run(2, 8, lora=Lora(8, frozenset({"q_proj", "k_proj", "v_proj"}))))
    assert r.trainable_params == 2 * 2 * 3 * 8 * (64 + 64) == 12_288
    assert not any(o.scope.startswith("model.decoder.layers.0.encoder_attn") for o in r.ops)
    ops = evaluate(fam, Run(2, 8, attention="eager")).ops
    attn = [o.op for o in ops if o.scope == "model.decoder.layers.0.self_attn"]
    assert attn.count("clone") >= 3


def test_whisper_with_its_encoder_keeps_the_rules() -> None:
    spec = _spec("whisper-tiny.json")
    data = json.loads((DATA / "hf" / "variants" / "whisper-tiny.json").read_text())
    full = spec_from_hf({**data, "architectures": ["WhisperForConditionalGeneration"],
                         "num_mel_bins": 80, "max_source_positions": 32}, "whisper")
    assert full.tower == "whisper"
    for other in (full, spec.replace(bias_k=True), spec.replace(norm_position="post"),
                  spec.replace(final_norm=False), spec.replace(loss_fp32=True),
                  spec.replace(tie_embeddings=False), spec.replace(position_offset=2),
                  spec.replace(n_kv_heads=2)):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(other)


def _draw_whisper(rng: random.Random) -> tuple[Whisper, Run]:
    """A random Whisper decoder and run, with the 0/1 edge cases (B = 1, T = 1, one head,
    one layer, head dims of 1), dropout on or off, LoRA or not."""
    H = rng.choice((1, 2, 4))
    fam = Whisper(V=rng.randint(5, 40), P=rng.randint(1, 300), E=H * rng.choice((1, 2, 8)),
                  H=H, F=rng.randint(1, 24), L=rng.randint(1, 3),
                  act=rng.choice(("gelu", "relu")), dropout=rng.choice((0.0, 0.1)),
                  attention_dropout=rng.choice((0.0, 0.1)),
                  activation_dropout=rng.choice((0.0, 0.1)))
    lora = rng.choice((None, Lora(rng.randint(1, 8), frozenset({"all-linear"})),
                       Lora(4, frozenset({"q_proj", "v_proj"}))))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 17)),
                    rng.choice((F32, BF16)), "cpu", rng.choice(("eager", "sdpa")),
                    use_cache=rng.random() < 0.3, lora=lora)


def test_whisper_compiled_equals_traced_on_random_draws() -> None:
    assert cache_hits_on_random_draws(_draw_whisper, 7, 8) > 0


# -- T5Gemma --------------------------------------------------------------------------------
def test_t5gemma_maps_to_its_graph_eager_only() -> None:
    tiny, untied = (family_of(_spec(c)) for c in T5GEMMA_CONFIGS)
    assert isinstance(tiny, T5Gemma) and (tiny.kinds_e, tiny.kinds_d, tiny.tied) == (
        "SFS", "SF", True)
    assert (untied.Ve, untied.V, untied.kinds_e, untied.tied, untied.bias) == (
        120, 128, "FSSF", False, True)
    with pytest.raises(ValueError, match="eager attention only"):
        evaluate(tiny, Run(2, 8, attention="sdpa"))
    spec = _spec("t5gemma-tiny.json")
    for other in (spec.replace(sandwich_norm=False), spec.replace(qk_norm="head"),
                  spec.replace(bias_q=True), spec.replace(bias_ffn_in=True),
                  spec.replace(norm_fp32=False), spec.replace(tie_encoder_decoder=True),
                  spec.replace(sdpa_path=True), spec.replace(ffn="plain")):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(other)


def test_t5gemma_keeps_each_stacks_normalizer() -> None:
    # each stack multiplies its embeddings by torch.tensor(hidden_size ** 0.5, dtype): a new
    # 0-d tensor the product keeps for the table's gradient (full training), none under LoRA
    fam = family_of(_spec("t5gemma-tiny.json"))
    for lora, kept in ((None, 2), (Lora(8, frozenset({"q_proj"})), 0)):
        saved = evaluate(fam, Run(2, 8, BF16, attention="eager", lora=lora)).saved
        assert sum(s.storage.name == "normalizer" for s in saved) == kept


def _draw_t5gemma(rng: random.Random) -> tuple[T5Gemma, Run]:
    """A random T5Gemma and run (one K/V head or several, layer kinds mixed or not, one
    layer per stack, B = 1, T = 1), LoRA or not."""
    Hkv = rng.choice((1, 2))
    Le, Ld = rng.randint(1, 3), rng.randint(1, 3)
    fam = T5Gemma(V=rng.randint(5, 40), Ve=rng.randint(5, 40), E=rng.choice((4, 8)),
                  H=Hkv * rng.choice((1, 2)), Hkv=Hkv, dh=rng.choice((2, 4)),
                  F=rng.randint(1, 24), Le=Le, Ld=Ld,
                  kinds_e="".join(rng.choice("FS") for _ in range(Le)),
                  kinds_d="".join(rng.choice("FS") for _ in range(Ld)),
                  tied=rng.random() < 0.5, bias=rng.random() < 0.5,
                  dropout=rng.choice((0.0, 0.1)), attention_dropout=rng.choice((0.0, 0.1)),
                  attn_softcap=rng.choice((0.0, 50.0)), final_softcap=rng.choice((0.0, 30.0)))
    lora = rng.choice((None, Lora(rng.randint(1, 8), frozenset({"all-linear"})),
                       Lora(4, frozenset({"q_proj", "down_proj"}))))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 17)),
                    rng.choice((F32, BF16)), "cpu", "eager", lora=lora)


def test_t5gemma_compiled_equals_traced_on_random_draws() -> None:
    assert cache_hits_on_random_draws(_draw_t5gemma, 11, 5) > 0


# -- LongT5 (local and transient-global attention) -----------------------------------------
def test_longt5_maps_to_the_t5_graph_eager_only() -> None:
    local = family_of(_spec("longt5-local.json"))
    assert isinstance(local, T5) and (local.local_block, local.Le, local.Ld) == (8, 2, 2)
    assert family_of(_spec("longt5-local-default.json")).local_block == 128  # radius 127
    tglobal = family_of(_spec("longt5-tglobal.json"))
    assert (tglobal.local_block, tglobal.global_block) == (8, 4)
    assert family_of(_spec("longt5-tglobal-default.json")).global_block == 16
    with pytest.raises(ValueError, match="eager attention only"):
        evaluate(local, Run(2, 8, attention="sdpa"))
    spec = _spec("longt5-local.json")
    for other in (spec.replace(encoder_local_block=0), spec.replace(sdpa_path=True),
                  _spec("t5-gated-asym.json").replace(encoder_local_block=4)):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(other)


def test_longt5_pads_its_blocks_and_keeps_one_merged_bias() -> None:
    # T = 30 over blocks of 8: q, k, v padded to 32 (four blocks), K and V each three blocks
    # wide; the first layer's bias plus the fp32 mask is a (B, Tq, H, Q, 3Q) fp32 tensor
    # passed to the later layers, its (Q, 3Q) buckets kept once by the embedding
    fam = family_of(_spec("longt5-local.json"))
    ops = evaluate(fam, Run(2, 30, BF16, attention="eager")).ops
    pads = [o for o in ops if o.op == "pad" and o.scope.startswith("encoder.block.0.")]
    assert len(pads) == 3 + 2  # q, k, v to the blocks; K and V by a block on each side
    bias = [o for o in ops if o.op == "add" and o.scope == "encoder.block.0.layer.0."
            "LocalSelfAttention" and tuple(d.value for d in o.shape) == (2, 4, 4, 8, 24)]
    assert bias and bias[0].dtype == F32


def test_longt5_forward_flops_count_the_padded_blocks() -> None:
    # T = 100 over blocks of 8 (longt5-local, longt5-tglobal) and 6
    # (longt5-local-nodropout): the local einsums run on 104 and 102 padded tokens.
    # torch 2.13 CPU FlopCounterMode, transformers 5.23 LongT5ForConditionalGeneration,
    # B = 1, T = 100 source and target tokens:
    # python tools/reference_flops.py --seq-len 100 <config>
    for config, flops in (("longt5-local.json", 42_647_552),
                          ("longt5-local-nodropout.json", 24_431_616),
                          ("longt5-tglobal.json", 45_437_952)):
        r = evaluate(family_of(_spec(config)), Run(1, 100, F32, "cpu", "eager"))
        assert r.forward_flops == flops, config


def _draw_longt5(rng: random.Random) -> tuple[T5, Run]:
    """A random LongT5 with local attention and run: blocks of 1 to 8 tokens, T a multiple
    of the block or not (padded), one layer per stack, gated or not, LoRA or not."""
    fam = T5(V=rng.randint(5, 40), E=rng.choice((4, 6)), H=rng.choice((1, 2)),
             dh=rng.choice((1, 4)), F=rng.randint(1, 24), Nb=rng.choice((1, 8)),
             Le=rng.randint(1, 3), Ld=rng.randint(1, 2), gated=rng.random() < 0.5,
             act=rng.choice(("relu", "gelu_new")), dropout=rng.choice((0.0, 0.1)),
             local_block=rng.choice((1, 3, 8)), global_block=rng.choice((0, 0, 1, 4)))
    lora = rng.choice((None, Lora(rng.randint(1, 8), frozenset({"all-linear"}))))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((4, 7, 16, 30)),
                    rng.choice((F32, BF16)), "cpu", "eager", lora=lora)


def test_longt5_transient_global_sums_its_blocks_and_keeps_side_buckets() -> None:
    # each layer's global inputs: the einsum keeps the (B, T, Tg) one-hot block ids (bmm's
    # operand for the hidden states' gradient, with the operands swapped: swap_lo_ro) and
    # a norm of its own; the first layer's side bias looks up (B, T, Tg) int64 buckets.
    # Fewer tokens than a global block: no global tokens, left to the rules
    fam = family_of(_spec("longt5-tglobal.json"))
    B, T = 2, 64
    names = by_name(component_rows(fam, Run(B, T, F32, "cpu", "eager")))
    assert names["encoder.attn.global_one_hot"] == fam.Le * B * T * (T // 4) * 4
    assert names["encoder.attn.side_buckets"] == B * T * (T // 4) * 8
    s = Settings(precision="fp32", batch_size=1, seq_len=3, attention="eager", device="cpu")
    assert graph_costs.graph_activations(_spec("longt5-tglobal.json"), s, 3, amp=False,
                                         amp16=False, adapted_roles=None) is None


def test_longt5_compiled_equals_traced_on_random_draws() -> None:
    assert cache_hits_on_random_draws(_draw_longt5, 5, 6) > 0
