"""The op graph's DeepSeek-V4 (transformer_calc/graph/families/deepseek_v4.py) against every
measured CPU row of its configs, to the byte.

Fixture (read, not changed; torch 2.13 CPU, transformers 5.23, saved_tensors_hooks, each
storage still held at the end of the forward once, parameters excluded;
tools/measure_activations_hf.py wrote it): activations_t5gemma_gemma3n_dsv4_cpu.jsonl, the
rows of deepseek_v4-tiny.json (three H layers and a Q layer, two streams, two output groups,
top-2 of 4 experts) and deepseek_v4-types.json (an S, a Q and an H layer, three streams, one
output group, top-1, a hash-routed layer, tied), eager attention (the class has no other
path), fp32 and bf16, B 2 T 64 and B 1 T 128, the eager experts and grouped_mm (B 2 T 64).
On main before the graph answered them, memory_report's per-tensor rules were off by
−32,012 … −8,452 bytes (−0.56 … −0.19 %) on these rows; the graph meets every one.
activations_deepseek_v4_cache_t37_cpu.jsonl: the same configs with transformers'
DynamicCache in the training forward (its default use_cache; the sliding window's cat and
the compressors' buffers keep nothing more: the same bytes), and T = 37, which no compress
rate divides (the windows T // rate, the tokens after the last one dropped), written by
    python tools/measure_activations_hf.py --use-cache -B 1 -T 64 CONFIGS
    python tools/measure_activations_hf.py --use-cache -B 2 -T 64 CONFIGS
    python tools/measure_activations_hf.py -B 2 -T 37 CONFIGS
    python tools/measure_activations_hf.py --experts grouped_mm -B 1 -T 37 CONFIGS
with CONFIGS tests/data/hf/variants/deepseek_v4-{tiny,types}.json (the rows the class
skips, SDPA, and the tool's tcalc columns left out: the graph answered them).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import cache_hits_on_random_draws, measured_rows, row_run

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import TcalcError
from transformer_calc.graph import BF16, F32, Run, evaluate, family_of
from transformer_calc.graph.families.deepseek_v4 import DeepseekV4
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("deepseek_v4-tiny.json", "deepseek_v4-types.json")
ROWS = measured_rows(CONFIGS)


def _spec(config: str) -> ModelSpec:
    return spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))


def _family(row: dict) -> DeepseekV4:
    fam = family_of(_spec(row["config"]))
    assert isinstance(fam, DeepseekV4)
    return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")


def _id(r: dict) -> str:
    return "{}-{}-B{}-T{}-{}{}".format(r["config"].removesuffix(".json"), r["dtype"], r["B"],
                                       r["T"], r["experts"], "-cache" * r.get("use_cache", 0))


def test_the_rows_cover_the_layouts() -> None:
    assert len(ROWS) == 12 + 16
    assert {r["T"] for r in ROWS} == {37, 64, 128}
    assert {r.get("use_cache", False) for r in ROWS} == {False, True}
    assert {r["experts"] for r in ROWS} == {"eager", "grouped_mm"}
    assert {r["attention"] for r in ROWS} == {"eager"}
    assert {r["dtype"] for r in ROWS} == {"fp32", "bf16"}
    tiny, types = (family_of(_spec(c)) for c in CONFIGS)
    assert isinstance(tiny, DeepseekV4) and isinstance(types, DeepseekV4)
    # DeepseekV4Config's partial_rotary_factor 64 / 512: int(16 / 8) = 2 channels rotated
    # in tiny; int(24 / 8) = 3 in types, whose inv_freq has 2 pairs: 4 channels
    assert (tiny.kinds, tiny.Ns, tiny.Og, tiny.R) == ("HHHQ", 2, 2, 2)
    assert (types.kinds, types.Ns, types.Og, types.R, types.tied) == ("SQH", 3, 1, 4, True)


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_saved_bytes_equal_the_measurement(row: dict) -> None:
    """The traced graph against the row; memory_report (the compiled graph, checked against
    the trace on the random draws below; T = 37 from the structure T = 64 compiled) on the
    bf16 rows without the cache (another structure to compile, the same graph)."""
    run = replace(row_run(row), use_cache=row.get("use_cache", False))
    assert evaluate(_family(row), run).activation_bytes == row["measured_bytes"]
    if row["dtype"] == "bf16" and not run.use_cache:
        report = memory_report(_spec(row["config"]), Settings(
            precision="bf16", batch_size=row["B"], seq_len=row["T"], attention="eager",
            device="cpu", experts=row["experts"], use_cache=False))
        assert report.activations.total == row["measured_bytes"]


# tools/reference_flops.py --seq-len T tests/data/hf/variants/deepseek_v4-{tiny,types}.json
# (torch 2.13, transformers 5.23, eager experts; the indexer's matmuls included)
FLOPS = {("deepseek_v4-tiny.json", 37): 9_463_712,
         ("deepseek_v4-tiny.json", 64): 18_464_768,
         ("deepseek_v4-types.json", 37): 4_981_088,
         ("deepseek_v4-types.json", 64): 9_883_648}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    r = evaluate(_family({"config": config}), Run(1, T, F32, "cpu", "eager"))
    assert r.params == count_params(_spec(config)).total
    assert r.forward_flops == FLOPS[config, T]


def test_the_indexer_keeps_nothing_and_the_layers_their_streams() -> None:
    """The indexer's top-k only masks: nothing it computes is held; every sublayer's
    hyper-connection keeps 2 · hc_sinkhorn_iters divisions' inputs (the first the softmax
    plus eps) besides the softmax (walked: deepseek_v4-types.json, fp32, B=2 T=64)."""
    fam = _family({"config": "deepseek_v4-types.json"})
    r = evaluate(fam, Run(2, 64, F32, "cpu", "eager"))
    assert not [s for s in r.saved if ".indexer" in s.scope or ".indexer" in s.storage.name]
    divided = [s for s in r.saved if s.scope.endswith("layers.1.attn_hc")
               and s.role == "div.self"]
    assert len(divided) == 2 * fam.iters - 1


def test_other_layouts_and_runs_are_refused() -> None:
    spec = _spec("deepseek_v4-tiny.json")
    for change in ({"n_shared_experts": 2}, {"swiglu_clamp": False}, {"bias_o": True},
                   {"attention_sinks": False}, {"n_kv_heads": 2}, {"o_groups": 3},
                   {"dropout": 0.1}, {"qk_norm": "head"}, {"norm_fp32": False}):
        with pytest.raises(TcalcError):
            family_of(replace(spec, **change))  # type: ignore[arg-type]
    # the CPU without autocast, the compressors with an entry each: else the rules answer
    ask = graph_costs.graph_activations
    cpu = Settings(precision="bf16", batch_size=2, seq_len=16, attention="eager",
                   device="cpu")
    assert ask(spec, cpu, 16, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(spec, cpu, 16, amp=True, amp16=False, adapted_roles=None) is None
    assert ask(spec, cpu, 7, amp=False, amp16=False, adapted_roles=None) is None
    assert memory_report(spec, replace(cpu, seq_len=7)).activations.total > 0
    with pytest.raises(ValueError, match="compress rate"):
        evaluate(family_of(spec), Run(1, 7, F32, "cpu", "eager"))


def _draw(rng: random.Random) -> tuple[DeepseekV4, Run]:
    """DeepSeek-V4 structures: layer kinds in some order, sizes drawn freely (one head,
    several groups, one stream, rotating the whole head), either experts path, full
    recomputation or none; T at least the compress rates."""
    H, dh = rng.choice((1, 2, 4)), rng.choice((2, 4, 6, 8))
    Og = rng.choice([g for g in (1, 2, 4) if (H * dh) % g == 0])
    X = rng.choice((1, 2, 4))
    Mc, Mh = rng.choice((1, 2, 4)), rng.choice((2, 4, 8))
    fam = DeepseekV4(V=rng.randint(5, 40), E=rng.randint(1, 24), H=H, dh=dh,
                     rq=rng.randint(1, 8), Og=Og, Ro=rng.randint(1, 6),
                     R=rng.choice([r for r in (2, 4) if r <= dh]), Ns=rng.choice((1, 2, 3)),
                     X=X, K=rng.randint(1, X), Fe=rng.randint(1, 12), Mc=Mc, Mh=Mh,
                     Ih=rng.choice((1, 2)), Id=rng.choice((2, 4)),
                     kinds=rng.choice(("SQH", "H", "QQ", "HSQ", "S")),
                     iters=rng.choice((1, 2, 20)), tied=rng.random() < 0.5,
                     grouped=rng.random() < 0.5)
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((8, 9, 17)), rng.choice((F32, BF16)),
                    "cpu", "eager", recompute=rng.choice(("none", "full")))


def test_compiled_equals_traced_on_random_configurations() -> None:
    assert cache_hits_on_random_draws(_draw, 20261128, 8) >= 1
