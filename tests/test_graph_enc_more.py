"""The op graphs of Mllama's text model (transformer_calc/graph/families/mllama.py: Llama's
graph with its idle cross-attention layers), which memory_report reads for their model
types: against every measured CPU row of their configs, to the byte; family_of maps them
strictly; parameters and FLOPs as tcalc counts them; compiled against traced on random
configurations.

Fixtures (read, not changed; torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, use_cache=False, each storage still held at the end of the forward
once, parameters and buffers excluded; measured by tools/measure_activations_hf.py): the rows
of mllama-tiny (MllamaForCausalLM, text only: the measurement gives no cross-attention
states, so MllamaTextModel skips the cross-attention layers) in tests/data/activations_*.jsonl.

Tolerance: none.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import cache_hits_on_random_draws, measured_rows, row_run
from test_graph import _row_settings

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import evaluate_fast
from transformer_calc.graph.families.mllama import Mllama
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("mllama-tiny.json",)
ROWS = measured_rows(CONFIGS)
IDS = ["{}-{}-{}-B{}-T{}-{}".format(
    r["config"].removesuffix(".json"), r["attention"], r["dtype"], r["B"], r["T"],
    "-".join(map(str, r.get("lora", ()))) or "full") for r in ROWS]


def _spec(config: str) -> ModelSpec:
    return spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))


def test_the_rows_cover_every_config() -> None:
    counts = {c: sum(r["config"] == c for r in ROWS) for c in CONFIGS}
    assert counts == {"mllama-tiny.json": 24}


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_saved_bytes_equal_the_measurement(row: dict) -> None:
    fam = family_of(_spec(row["config"]))
    traced, compiled = evaluate(fam, row_run(row)), evaluate_fast(fam, row_run(row))
    assert traced.activation_bytes == compiled.activation_bytes == row["measured_bytes"]
    if "trainable" in row:  # peft's count of the adapters' parameters
        assert traced.trainable_params == row["trainable"][0]


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_memory_report_reads_the_graph(row: dict) -> None:
    report = memory_report(_spec(row["config"]), _row_settings(row))
    assert report.activations.total == row["measured_bytes"]


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    for attention in ("eager", "sdpa"):
        for B, T in ((1, 64), (3, 100)):
            r = evaluate(family_of(spec), Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


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
                    rng.choice(("eager", "sdpa")), lora=lora,
                    recompute=rng.choice(("none", "selective", "full")))


def test_compiled_equals_traced_on_random_mllamas() -> None:
    assert cache_hits_on_random_draws(_draw_mllama, 20261128, 20) >= 5
