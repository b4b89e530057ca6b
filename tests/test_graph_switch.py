"""Switch Transformers' op graph (transformer_calc/graph/families/switch.py:
SwitchTransformersForConditionalGeneration on T5's stacks, its top-1 router and experts),
which memory_report reads for it, against every measured CPU row of
switch_transformers-tiny (experts every other layer) and switch_transformers-all-sparse
(experts in every layer, a biased router, gelu_new), to the byte, compiled equal to traced,
and mapped from their specs strictly.

Fixtures (torch 2.13 CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks, each storage
still held at the end of the forward once, parameters excluded as they were before the
forward; tools/measure_activations_hf.py, whose forward is model(input_ids=ids, labels=ids,
use_cache=False); expert_capacity 256, so no token is dropped):
activations_switch_transformers_cpu.jsonl: full training, fp32 and bf16, eager (the class
has no SDPA path: those rows are skipped), B=2 T=64 and B=1 T=128 (`-B 1 -T 128`), and
B=3 T=24 (`-B 3 -T 24`); activations_switch_transformers_lora_cpu.jsonl: `--lora 8`
(all-linear, B=2 T=64: peft adapts every expert's wi and wo and the router's classifier) and
`-B 1 -T 48 --lora 16 --lora-targets q,v --lora-dropout 0.05`. Tolerance: none.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import (
    assert_compiled_equals_traced,
    cache_hits_on_random_draws,
    measured_rows,
    row_run,
)

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.switch import Switch
from transformer_calc.graph.names import by_name, component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("switch_transformers-tiny.json", "switch_transformers-all-sparse.json")
ROWS = measured_rows(CONFIGS)
# the rows memory_report and the compiled structures are checked on (a structure compiles in
# about half a second): one per layout, dtype and adapter
REPORTED = [r for r in ROWS if (r["config"], r["dtype"], r["B"], (r.get("lora") or [0])[0])
            in ((CONFIGS[0], "fp32", 2, 0), (CONFIGS[1], "bf16", 1, 0),
                (CONFIGS[0], "bf16", 2, 8), (CONFIGS[1], "fp32", 1, 16))]


def _id(r: dict) -> str:
    return "{}-{}-B{}-T{}-{}".format(r["config"].removesuffix(".json"), r["dtype"], r["B"],
                                     r["T"], "-".join(map(str, r.get("lora") or ())) or "full")


def _spec(config: str) -> ModelSpec:
    return spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()), config)


def _settings(row: dict) -> Settings:
    lora = {}
    if row.get("lora"):
        rank, targets, dropout = row["lora"]
        lora = dict(lora_rank=rank, lora_targets=tuple(targets.split(",")),
                    lora_dropout=dropout)
    return Settings(precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
                    attention=row["attention"], device="cpu", use_cache=False,
                    **lora)  # type: ignore[arg-type]


def test_the_rows_cover_both_layouts_full_training_and_lora() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    assert {_spec(c).model_type for c in CONFIGS} == {"switch_transformers"}
    full = [r for r in ROWS if not r.get("lora")]
    assert len(full) == 12 and len(ROWS) - len(full) == 8
    assert {r["dtype"] for r in ROWS} == {"fp32", "bf16"}
    assert {r["lora"][1] for r in ROWS if r.get("lora")} == {"all-linear", "q,v"}
    assert len(REPORTED) == 4


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_saved_bytes_equal_the_measurement(row: dict) -> None:
    traced = evaluate(family_of(_spec(row["config"])), row_run(row))
    assert traced.activation_bytes == row["measured_bytes"]
    if "trainable" in row:  # peft's count: all-linear adapts each expert and the router
        assert traced.trainable_params == row["trainable"][0]


@pytest.mark.parametrize("row", REPORTED, ids=_id)
def test_memory_report_reads_the_graph_compiled(row: dict) -> None:
    fam = family_of(_spec(row["config"]))
    compiled = assert_compiled_equals_traced(fam, row_run(row))
    report = memory_report(_spec(row["config"]), _settings(row))
    assert report.activations.total == compiled.activation_bytes == row["measured_bytes"]
    if "trainable" in row:  # peft's count (the rules' adapters: each expert's, the router's)
        assert report.trainable_params == row["trainable"][0]
    assert report.activations.rows == tuple(
        r[:3] + ("",) + r[4:] for r in component_rows(fam, row_run(row)))


def test_tcalc_memory_end_to_end(cli) -> None:  # type: ignore[no-untyped-def]
    # switch_transformers-tiny, B=2 T=64, fp32, eager: the measured row's 11,111,428 bytes
    out = cli.json("memory", str(DATA / "hf" / "variants" / CONFIGS[0]), "--batch-size", "2",
                   "--seq-len", "64", "--attention", "eager", "--device", "cpu",
                   "--precision", "fp32")
    acts = next(c for c in out["components"] if c["name"] == "activations")
    assert acts["bytes"] == 11_111_428


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc_and_torch(config: str) -> None:
    spec = _spec(config)
    for B, T in ((1, 64), (3, 100)):
        r = evaluate(family_of(spec), Run(B, T, F32, "cpu", "eager"))
        assert r.params == r.trainable_params == count_params(spec).total
        assert r.forward_flops == B * T * count_flops(spec, T).total
    # torch 2.13 CPU FlopCounterMode, transformers 5.23 SwitchTransformersForConditionalGeneration,
    # B = 1, T = 64 source and target tokens, eager experts:
    # python tools/reference_flops.py --seq-len 64 <config>
    flops = {CONFIGS[0]: 51_511_296, CONFIGS[1]: 31_096_832}[config]
    assert evaluate(family_of(spec), Run(1, 64, F32, "cpu", "eager")).forward_flops == flops


def test_maps_each_stacks_layers_strictly_eager_only() -> None:
    tiny, sparse = (family_of(_spec(c)) for c in CONFIGS)
    assert isinstance(tiny, Switch) and (tiny.kinds_e, tiny.kinds_d, tiny.X, tiny.act,
                                         tiny.router_bias, tiny.jitter) == (
        "DEDE", "DEDE", 4, "relu", False, True)
    assert isinstance(sparse, Switch) and (sparse.kinds_e, sparse.kinds_d, sparse.act,
                                           sparse.router_bias) == ("EEE", "EE", "gelu_new", True)
    with pytest.raises(ValueError, match="eager attention only"):
        evaluate(tiny, Run(2, 8, attention="sdpa"))
    spec = _spec(CONFIGS[0])
    for other in (spec.replace(top_k=2), spec.replace(router_fp32=False),
                  spec.replace(bias_q=True), spec.replace(sdpa_path=True),
                  spec.replace(tie_embeddings=False), spec.replace(relative_scope="every"),
                  spec.replace(norm_position="post"), spec.replace(loss_fp32=True),
                  spec.replace(ffn="gated"), spec.replace(d_ff_expert=32),
                  spec.replace(attention_dropout=0.2), spec.replace(peft_moe="none")):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(other)


def test_the_router_keeps_its_noise_and_a_16_bit_models_fp32_weight() -> None:
    # switch_transformers-tiny: two sparse layers per stack (X 4, E 64), B=2 T=64. The
    # router's in-place jitter keeps its fp32 (B, T, E) noise; over an fp32 model the
    # classifier keeps the jittered states themselves (the experts read them), over a
    # bf16 one their fp32 copy and the classifier's weight made fp32 in the forward
    spec = _spec(CONFIGS[0])
    fam = family_of(spec)
    B, T, E, X = 2, 64, 64, 4
    for dtype in (F32, BF16):
        names = by_name(component_rows(fam, Run(B, T, dtype, "cpu", "eager")))
        for stack in ("encoder", "decoder"):
            p = f"{stack}.moe.ffn."
            assert names[p + "router_jitter"] == 2 * B * T * E * 4
            assert names[p + "router"] == 2 * B * T * X * 4  # the fp32 softmax
            assert names[p + "router_topk"] == 2 * B * T * 8  # max.dim's int64 indices
            assert names.get(p + "router_fp32_weight", 0) == (
                0 if dtype == F32 else 2 * X * E * 4)
            assert names.get(p + "router_fp32_input", 0) == (
                0 if dtype == F32 else 2 * B * T * E * 4)
    quiet = replace(fam, jitter=False)
    kept = evaluate(fam, Run(B, T, F32, "cpu", "eager")).activation_bytes
    assert evaluate(quiet, Run(B, T, F32, "cpu", "eager")).activation_bytes == \
        kept - 4 * B * T * E * 4
    assert family_of(spec.replace(router_jitter=False)).jitter is False


def _draw(rng: random.Random) -> tuple[Switch, Run]:
    """A random Switch model and run: one layer per stack or more, dense and sparse layers
    mixed or not, one expert or several, B = 1, T = 1, LoRA or not, full recomputation."""
    Le, Ld = rng.randint(1, 2), rng.randint(1, 2)
    fam = Switch(V=rng.randint(5, 40), E=rng.choice((4, 6)), H=rng.choice((1, 2)),
                 dh=rng.choice((1, 4)), F=rng.randint(1, 24), Nb=rng.choice((1, 8)),
                 Le=Le, Ld=Ld, act=rng.choice(("relu", "gelu_new")),
                 dropout=rng.choice((0.0, 0.1)), X=rng.choice((1, 3)),
                 kinds_e="".join(rng.choice("DE") for _ in range(Le)),
                 kinds_d="".join(rng.choice("DE") for _ in range(Ld)),
                 router_bias=rng.random() < 0.5, jitter=rng.random() < 0.7)
    lora = rng.choice((None, Lora(rng.randint(1, 8), frozenset({"all-linear"})),
                       Lora(4, frozenset({"q", "wi"}), 0.1)))
    return fam, Run(rng.choice((1, 3)), rng.choice((1, 17)), rng.choice((F32, BF16)),
                    "cpu", "eager", lora=lora,
                    recompute=rng.choice(("none", "none", "full")))


def test_compiled_equals_traced_on_random_draws() -> None:
    assert cache_hits_on_random_draws(_draw, 2, 4) > 0
