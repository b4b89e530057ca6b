"""The op graphs of Mllama's text model (transformer_calc/graph/families/mllama.py: Llama's
graph with its idle cross-attention layers) and of TAPAS, I-BERT and YOSO (options of
families/bert.py; YOSO's attention in families/yoso.py), which memory_report reads for their
model types: against every measured CPU row of their configs, to the byte; family_of maps
them strictly; parameters and FLOPs as tcalc counts them (and as FlopCounterMode counts
them, pinned below); compiled against traced on random configurations.

Fixtures (read; torch 2.13 CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks,
use_cache=False, each storage still held at the end of the forward once, parameters and
buffers excluded; measured by tools/measure_activations_hf.py): the rows of mllama-tiny
(MllamaForCausalLM, text only: the measurement gives no cross-attention states, so
MllamaTextModel skips the cross-attention layers), tapas-tiny, ibert-tiny and yoso-tiny in
tests/data/activations_*.jsonl. I-BERT's three bf16 rows (B=2 T=64, B=1 T=128, and LoRA
all-linear B=2 T=64) were measured again once tools/measure_activations.py held the
parameters and buffers through the forward: QuantAct replaces its x_min/x_max buffers in
training, and a (B, T, 1) std or the loss's 0-d total_weight allocated at a freed buffer's
address had been taken for the buffer (706,050, 1,099,520 and 54,528 bytes before; 706,306,
1,099,522 and 54,786 now, the fp32 rows unchanged), by

    python tools/measure_activations_hf.py tests/data/hf/variants/ibert-tiny.json
    python tools/measure_activations_hf.py -B 1 -T 128 tests/data/hf/variants/ibert-tiny.json
    python tools/measure_activations_hf.py --lora 8 tests/data/hf/variants/ibert-tiny.json

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
    spec_of,
)

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.bert import Bert, IBert, Tapas, Yoso
from transformer_calc.graph.families.mllama import Mllama
from transformer_calc.graph.names import by_name, component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("mllama-tiny.json", "tapas-tiny.json", "ibert-tiny.json", "yoso-tiny.json")
ROWS = measured_rows(CONFIGS)


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_every_config() -> None:
    counts = {c: sum(r["config"] == c for r in ROWS) for c in CONFIGS}
    assert counts == {"mllama-tiny.json": 24, "tapas-tiny.json": 6, "ibert-tiny.json": 6,
                      "yoso-tiny.json": 6}


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report's
    # total, each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, family_of(_spec(row["config"])), row_run(row), _spec(row["config"]),
        report_rows=None))


# torch.utils.flop_counter.FlopCounterMode over XForMaskedLM(config).train()'s forward with
# labels (torch 2.13, transformers 5.23, eager, fp32) at B=1 T=64 and B=3 T=100 (YOSO's: the
# two matmuls in YosoCumulation's forward counted too)
PINNED_FLOPS = {"tapas-tiny.json": (19_202_048, 95_539_200),
                "ibert-tiny.json": (2_260_992, 13_363_200),
                "yoso-tiny.json": (3_145_728, 17_510_400)}


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    for attention in ("eager", "sdpa") if config == "mllama-tiny.json" else ("eager",):
        for i, (B, T) in enumerate(((1, 64), (3, 100))):
            r = evaluate(family_of(spec), Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total
            if config in PINNED_FLOPS:
                assert r.forward_flops == PINNED_FLOPS[config][i]


def test_mllamas_cross_attention_layers_are_built_and_idle() -> None:
    # mllama-tiny: 5 layers, cross_attention_layers [1, 3]: three run, two hold parameters
    # (peft adapts their q/k/v/o too: 17,920 trainable at r 8, the measured row's count),
    # the token table 1000 + 8 rows, lm_head 1000
    spec = _spec("mllama-tiny.json")
    fam = family_of(spec)
    assert isinstance(fam, Mllama) and (fam.L, fam.Lc, fam.extra_rows) == (3, 2, 8)
    r = evaluate(fam, Run(2, 64, F32, "cpu", "eager"))
    assert not any(".cross_layers." in s.scope for s in r.saved)
    E, F, kv = 64, 96, 32
    cross = 2 * E * E + 2 * E * kv + 3 * E * F + 2 * 16 + 2 * E + 2
    plain = evaluate(replace(fam, Lc=0, extra_rows=0), Run(2, 64, F32, "cpu", "eager"))
    assert r.params - plain.params == 2 * cross + 8 * E
    assert r.activation_bytes == plain.activation_bytes
    lora = Lora(8, frozenset({"q_proj", "k_proj", "v_proj", "o_proj"}))
    assert evaluate(fam, Run(2, 64, lora=lora)).trainable_params == 17_920


@pytest.mark.parametrize("change", [
    dict(model_type="llama"), dict(idle_cross_layers=0), dict(extra_token_rows=0),
    dict(ffn="plain"), dict(dropout=0.1), dict(position="learned"),
], ids=lambda c: "-".join(map(str, c.items())))
def test_what_the_mllama_graph_does_not_transcribe_is_refused(change: dict) -> None:
    spec = _spec("mllama-tiny.json")
    assert isinstance(family_of(spec), Mllama)
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(spec, **change))


def _draw_mllama(rng: random.Random) -> tuple[Mllama, Run]:
    Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
    fam = Mllama(V=rng.randint(5, 60), E=rng.randint(1, 40), H=Hkv * G, Hkv=Hkv,
                 dh=rng.choice((2, 8)), F=rng.randint(1, 30), L=rng.choice((1, 2, 3)),
                 attention_dropout=rng.choice((0.0, 0.1)), extra_rows=8,
                 Lc=rng.choice((1, 2)))
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, BF16, F16))
    lora = None
    if rng.random() < 0.5:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("q_proj", "v_proj", "o_proj", "up_proj", "down_proj", "all-linear"), 2)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 7, 33)), dtype, device,
                    rng.choice(("eager", "sdpa")),
                    autocast=rng.choice((None, BF16)) if device == "cuda" and dtype == F32
                    else None, lora=lora, recompute=rng.choice(("none", "selective", "full")))


def test_compiled_equals_traced_on_random_mllamas() -> None:
    assert cache_hits_on_random_draws(_draw_mllama, 20261128, 12) >= 3


def _names(config: str, run: Run, **change: object) -> dict[str, int]:
    fam = family_of(_spec(config))
    return by_name(component_rows(replace(fam, **change) if change else fam, run))


def test_tapas_reads_its_token_type_tables_and_cell_positions() -> None:
    # TapasModel's (B, T, 7) int64 token-type zeros, a column per table (views: one storage);
    # the positions per cell a new (B, T) int64, else arange(T) expanded (T int64)
    fam = family_of(_spec("tapas-tiny.json"))
    assert isinstance(fam, Tapas) and (fam.tables, fam.cell_positions, fam.Ty) == (7, True, 1039)
    B, T = 2, 64
    names = _names("tapas-tiny.json", Run(B, T, F32, "cpu", "eager"))
    assert names["embed.token_type_ids"] == B * T * 7 * 8
    assert names["embed.position_ids"] == B * T * 8
    names = _names("tapas-tiny.json", Run(B, T, F32, "cpu", "eager"), cell_positions=False)
    assert names["embed.position_ids"] == T * 8
    config = json.loads((DATA / "hf" / "variants" / "tapas-tiny.json").read_text())
    absolute = family_of(spec_from_hf({**config, "reset_position_index_per_cell": False}))
    assert isinstance(absolute, Tapas) and not absolute.cell_positions
    two = spec_from_hf({**config, "type_vocab_sizes": [3, 256],
                        "reset_position_index_per_cell": False})
    assert isinstance(family_of(two), Tapas) and family_of(two).tables == 2
    with pytest.raises(TcalcError, match="no op graph"):  # the cells' ids need tables 1, 2
        family_of(spec_from_hf({**config, "type_vocab_sizes": [3, 256]}))


def test_ibert_writes_its_layer_norms_out_and_adapts_only_its_head() -> None:
    # IntLayerNorm: x - mean and the normalised tensor (B, T, E) each, the std (B, T, 1), in
    # the activations' dtype, per norm (two a layer, four layers); QuantLinear is no
    # nn.Linear: under all-linear peft adapts the head's dense alone (r 8: 8·(16 + 16) = 256
    # trainable, the measured row's count), and the frozen layers keep nothing
    B, T, E, L = 2, 64, 16, 4
    fam = family_of(_spec("ibert-tiny.json"))
    assert isinstance(fam, IBert) and (fam.base, fam.head) == ("ibert", "roberta")
    names = _names("ibert-tiny.json", Run(B, T, BF16, "cpu", "eager"))
    assert names["encoder.attn.norm.terms"] == L * 2 * B * T * E * 2
    assert names["encoder.attn.norm.std"] == L * B * T * 2
    assert names["embed.token_type_ids"] == B * T * 8
    lora = Run(B, T, F32, "cpu", "eager", lora=Lora(8, frozenset({"all-linear"})))
    r = evaluate(fam, lora)
    assert r.trainable_params == 256
    assert not any(n.startswith("encoder.") for n in by_name(component_rows(fam, lora, r)))
    config = json.loads((DATA / "hf" / "variants" / "ibert-tiny.json").read_text())
    with pytest.raises(TcalcError, match="no op graph"):  # quantised: another forward
        family_of(spec_from_hf({**config, "quant_mode": True}))


def test_yoso_keeps_its_expectation_and_no_softmax() -> None:
    # YosoCumulation keeps the (B·H, T, T) expectation in the activations' dtype and the
    # layer's int32 (B·H, T) mask; three normalisations keep their inputs and norms
    B, T, H, L = 2, 64, 4, 2
    fam = family_of(_spec("yoso-tiny.json"))
    assert isinstance(fam, Yoso) and fam.P == 4096 + 2 and fam.attention_dropout == 0.0
    names = _names("yoso-tiny.json", Run(B, T, BF16, "cpu", "eager"))
    assert names["encoder.attn.expectation"] == L * B * H * T * T * 2
    assert names["encoder.attn.mask"] == L * B * H * T * 4
    assert names["encoder.attn.norms"] == L * 3 * 2 * B * H * T * 2
    assert "encoder.attn.softmax" not in names and "encoder.attn.dropout_mask" not in names
    config = json.loads((DATA / "hf" / "variants" / "yoso-tiny.json").read_text())
    for change in ({"use_expectation": False}, {"conv_window": 3}):
        with pytest.raises(TcalcError):  # LSH's CUDA kernels, the convolution over V
            spec_from_hf({**config, **change})


@pytest.mark.parametrize("config, change", [
    ("tapas-tiny.json", dict(type_tables=0)), ("tapas-tiny.json", dict(model_type="bert")),
    ("tapas-tiny.json", dict(sdpa_path=True)), ("tapas-tiny.json", dict(norm_int=True)),
    ("ibert-tiny.json", dict(norm_int=False)), ("ibert-tiny.json", dict(layers_nn_linear=True)),
    ("ibert-tiny.json", dict(model_type="roberta")), ("ibert-tiny.json", dict(type_tables=7)),
    ("yoso-tiny.json", dict(yoso_expectation=False)), ("yoso-tiny.json", dict(position_offset=0)),
    ("yoso-tiny.json", dict(model_type="bert")), ("yoso-tiny.json", dict(cell_positions=True)),
], ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.items())))
def test_what_the_encoder_graphs_do_not_transcribe_is_refused(config: str,
                                                              change: dict) -> None:
    spec = _spec(config)
    assert isinstance(family_of(spec), Tapas | IBert | Yoso)
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(spec, **change))


def _draw_encoder(rng: random.Random) -> tuple[Bert, Run]:
    """TAPAS, I-BERT or YOSO with sizes drawn freely (one head, one layer, B = 1, T = 1
    among them), eager (their only path), any dtype and device, LoRA, recomputation."""
    H, dh = rng.choice((1, 2, 4)), rng.choice((1, 2, 8))
    p = rng.choice((0.0, 0.1))
    kind = rng.choice((Tapas, IBert, Yoso))
    fam: Bert = kind(V=rng.randint(5, 40), P=rng.randint(70, 90), Ty=rng.randint(1, 30),
                     E=H * dh, H=H, F=rng.randint(1, 24), L=rng.choice((1, 2, 3)),
                     base=kind.__name__.lower(), head="roberta" if kind is IBert else "bert",
                     positions_from_ids=kind is IBert, tied=rng.random() < 0.5,
                     hidden_dropout=p, attention_dropout=0.0 if kind is Yoso else p)
    if isinstance(fam, Tapas):
        fam = replace(fam, tables=rng.choice((1, 3, 7)), cell_positions=rng.random() < 0.5)
    lora = None
    if rng.random() < 0.5:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(
            ("query", "value", "dense", "all-linear"), rng.choice((1, 2)))),
            rng.choice((0.0, 0.05)))
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, BF16, F16))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 7, 33)), dtype, device, "eager",
                    autocast=rng.choice((None, BF16)) if device == "cuda" and dtype == F32
                    else None, lora=lora, recompute=rng.choice(("none", "selective", "full")))


def test_compiled_equals_traced_on_random_encoders() -> None:
    assert cache_hits_on_random_draws(_draw_encoder, 20261129, 16) >= 4
