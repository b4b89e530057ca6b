"""Llama 4's text decoder (llama4_text, transformer_calc/graph/families/llama4.py) against every
measured CPU row of its configs, to the byte.

Fixtures (read, not changed; torch 2.13 CPU, transformers 5.23, peft 0.21.2 rank 8,
saved_tensors_hooks, each storage still held at the end of the forward once, parameters
excluded; tools/measure_activations_hf.py wrote them; Llama4TextExperts runs its own bmm
whatever the experts implementation):
- llama4_text-chunked.json (three chunked RoPE layers with L2 q/k norms and a NoPE layer,
  dense and MoE layers alternating, GQA, 4 experts top-1): activations_decoders_encoders_cpu
  .jsonl (whole model, eager and SDPA, fp32 and bf16, B 2 T 64 and B 1 T 128),
  activations_lora_survey_{qv,attn,mlp}_cpu.jsonl (LoRA);
- activations_llama4_cpu.jsonl: that config under use_cache (the DynamicCache's K/V copies),
  and llama4_text-moe-every-layer.json (experts in every layer, 3 experts top-2, one K/V
  head, q/k/v/o biases, no q/k norm, a NoPE layer between two chunked ones, chunks of 16,
  tied embeddings), whole model at B 2 T 64, B 1 T 128 and B 2 T 12 (under the chunk: SDPA
  gets no mask), and LoRA; written by
      V=tests/data/hf/variants
      python tools/measure_activations_hf.py $V/llama4_text-chunked.json -B 2 -T 64 --use-cache
      python tools/measure_activations_hf.py $V/llama4_text-chunked.json -B 1 -T 128 --use-cache
      for bt in "2 64" "1 128" "2 12"; do set -- $bt
        python tools/measure_activations_hf.py $V/llama4_text-moe-every-layer.json -B $1 -T $2
      done
      for t in q_proj,v_proj gate_proj,up_proj,down_proj; do
        python tools/measure_activations_hf.py $V/llama4_text-moe-every-layer.json --lora 8 \\
            --lora-targets $t; done
      python tools/measure_activations_hf.py $V/llama4_text-chunked.json -B 2 -T 7
  (T 7, under the chunk of 8; their tcalc_bytes dropped: the graph answered them already).
The per-tensor rules (memory.activation_breakdown, memory_report without the graph, use_cache
as each row ran) on llama4_text-chunked's 32 rows: −524 … +21,244 bytes (−0.02 … +0.93 %);
on llama4_text-moe-every-layer's 20: −524 … +80,124 bytes (−0.04 … +7.3 %, the most on its LoRA rows
whose gate_proj, up_proj, down_proj name the shared expert alone). The graph meets every row.
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
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.llama4 import Llama4
from transformer_calc.graph.names import component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("llama4_text-chunked.json", "llama4_text-moe-every-layer.json")
ROWS = measured_rows(CONFIGS)


def _id(r: dict) -> str:
    return "{}-{}-{}-B{}-T{}-{}-{}{}".format(
        r["config"].removesuffix(".json").removeprefix("llama4_text-"), r["attention"],
        r["dtype"], r["B"], r["T"],
        r["file"].removeprefix("activations_").removesuffix("_cpu.jsonl"),
        "-".join(map(str, r.get("lora", ()))) or "full", "-cache" if r.get("use_cache") else "")


def _spec(config: str) -> ModelSpec:
    return spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))


def _family(config: str) -> Llama4:
    fam = family_of(_spec(config))
    assert isinstance(fam, Llama4)
    return fam


def _run(row: dict) -> Run:
    return replace(row_run(row), use_cache=row.get("use_cache", False))


def _settings(row: dict) -> Settings:
    lora = {}
    if row.get("lora"):
        rank, targets, dropout = row["lora"]
        lora = dict(lora_rank=rank, lora_dropout=dropout,
                    lora_targets=tuple(targets.split(",")))
    return Settings(precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
                    attention=row["attention"], device="cpu", experts="eager",
                    use_cache=row.get("use_cache", False), **lora)  # type: ignore[arg-type]


def test_the_rows_cover_the_layouts() -> None:
    assert len(ROWS) == 20 + 8 + 4 + 12 + 8
    assert sum(bool(r.get("use_cache")) for r in ROWS) == 8
    assert {r["attention"] for r in ROWS} == {"eager", "sdpa"}
    assert {r["dtype"] for r in ROWS} == {"fp32", "bf16"}
    assert {r["lora"][1] for r in ROWS if r.get("lora")} == {
        "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj", "gate_proj,up_proj,down_proj"}
    chunked, every = _family(CONFIGS[0]), _family(CONFIGS[1])
    assert (chunked.kinds, chunked.pattern, chunked.window, chunked.l2_qk) == (
        "CCCN", "DEDE", 8, True)
    assert (every.kinds, every.pattern, every.window, every.l2_qk, every.Hkv, every.K) == (
        "CNC", "EEE", 16, False, 1, 2)
    assert every.bias_q and every.bias_o and every.tied


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_saved_bytes_equal_the_measurement(row: dict) -> None:
    """The traced graph against a measured row, the adapters' parameters against peft's
    count; memory_report (the compiled graph, which the random draws below check against
    the trace) on the bf16 eager rows at B 2 T 64 (a compile costs more than a trace)."""
    result = evaluate(_family(row["config"]), _run(row))
    assert result.activation_bytes == row["measured_bytes"]
    if "trainable" in row:
        assert result.trainable_params == row["trainable"][0]
    if row["dtype"] == "bf16" and row["attention"] == "eager" and row["T"] == 64:
        report = memory_report(_spec(row["config"]), _settings(row))
        assert report.activations.total == row["measured_bytes"]


def test_the_rules_missed_these_rows() -> None:
    # memory_report without the graph: the rules' error on the rows the graph meets
    rows = [r for r in ROWS if r["dtype"] == "fp32" and r["attention"] == "eager"
            and not r.get("lora") and r["B"] == 2 and r["T"] == 64]
    assert len(rows) == 3
    ask = graph_costs.graph_activations
    try:
        graph_costs.graph_activations = lambda *a, **k: None  # type: ignore[assignment]
        missed = [memory_report(_spec(r["config"]), _settings(r)).activations.total
                  - r["measured_bytes"] for r in rows]
    finally:
        graph_costs.graph_activations = ask
    assert all(missed), missed


def test_memory_report_rows_are_the_graphs() -> None:
    # the report's rows, name by name, are the traced graph's; the layers' groups as the
    # rules name them
    for row in (ROWS[0], ROWS[-1]):
        report = memory_report(_spec(row["config"]), _settings(row))
        assert report.activations.total == row["measured_bytes"]
        assert [r[:2] + r[4:] for r in report.activations.rows] == [
            r[:2] + r[4:] for r in component_rows(_family(row["config"]), _run(row))]
    names = {r[0]: r[1] for r in memory_report(_spec(CONFIGS[0]), _settings(ROWS[1]))
             .activations.rows}
    # Llama4TextL2Norm: Q's fp32 input and 1/rms, B·T·H·(dh + 1) · 4, in the RoPE layers only
    assert names["decoder.chunked.moe.attn.q_l2norm"] == 2 * 64 * 4 * 17 * 4
    assert "decoder.nope.moe.attn.q_l2norm" not in names
    assert names["decoder.nope.moe.attn.temperature_scales"] == 64 * 4  # attn_scales, (T,)


# torch.utils.flop_counter's forward FLOPs at B = 1:
#   /work/refvenv/bin/python tools/reference_flops.py --seq-len T \
#       tests/data/hf/variants/llama4_text-{chunked,moe-every-layer}.json
# (torch 2.13, transformers 5.23). They count what runs: every expert on every token and the
# chunked layers' full T × T scores; tcalc's count_flops counts the top-k experts and the
# keys within a chunk (the useful work), so it is lower.
FLOPS = {("llama4_text-chunked.json", 37): 17_504_256,
         ("llama4_text-chunked.json", 64): 32_047_104,
         ("llama4_text-moe-every-layer.json", 37): 6_532_128,
         ("llama4_text-moe-every-layer.json", 64): 12_294_144}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    r = evaluate(_family(config), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(_spec(config)).total
    assert r.forward_flops == FLOPS[config, T]


def test_other_llama4_layouts_are_refused() -> None:
    spec = _spec(CONFIGS[0])
    for change in ({"norm_fp32": True}, {"dropout": 0.1}, {"router_topk": "renorm"},
                   {"n_shared_experts": 2}, {"d_ff_shared": 8}, {"qk_norm": "head"},
                   {"attention_chunk": 0, "layer_attention": "3F 1N"},
                   {"experts_every_token": False}, {"bias_ffn_in": True},
                   {"activation": "gelu"}):
        with pytest.raises(TcalcError, match="llama4_text layout"):
            family_of(replace(spec, **change))  # type: ignore[arg-type]


def test_autocast_and_an_adapted_router_keep_the_rules() -> None:
    spec = _spec(CONFIGS[0])
    cpu = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                   device="cpu")
    ask = graph_costs.graph_activations
    for experts in ("eager", "grouped_mm", "auto"):  # its own bmm whatever they say
        assert ask(spec, replace(cpu, experts=experts), 64, amp=False, amp16=False,
                   adapted_roles=None) is not None
    assert ask(spec, cpu, 64, amp=True, amp16=False, adapted_roles=None) is None
    # Llama4Router returns a tuple: peft 0.21's LoRA layer fails on it (all-linear too)
    for targets in (("all-linear",), ("router",)):
        with pytest.raises(TcalcError, match="cannot adapt .* router"):
            memory_report(spec, replace(cpu, lora_rank=8, lora_targets=targets))


def _draw(rng: random.Random) -> tuple[Llama4, Run]:
    """Sizes drawn freely with the 0/1 edge cases (one K/V head, one expert, chunks of 1,
    T = 1), each kind of layer in some order."""
    Hkv, G, X = rng.choice((1, 2)), rng.choice((1, 2)), rng.choice((1, 2, 4))
    L = rng.randint(1, 4)
    bias = rng.random() < 0.3
    fam = Llama4(V=rng.randint(3, 40), E=rng.randint(1, 24), H=Hkv * G, Hkv=Hkv,
                 dh=rng.choice((2, 4, 6)), F=rng.randint(1, 20), L=L, X=X,
                 K=rng.randint(1, X), Fe=rng.randint(1, 12),
                 kinds="".join(rng.choice("CN") for _ in range(L)),
                 pattern="".join(rng.choice("DE") for _ in range(L)),
                 window=rng.choice((1, 4, 8, 64)), tied=rng.random() < 0.5, bias_q=bias,
                 bias_k=bias, bias_v=bias, bias_o=bias, l2_qk=rng.random() < 0.7,
                 router="llama4")
    lora = None
    if rng.random() < 0.4:
        targets = rng.choice((("q_proj", "v_proj"), ("gate_proj", "up_proj", "down_proj"),
                              ("o_proj",), ("k_proj", "down_proj")))
        lora = Lora(rng.choice((1, 4)), frozenset(targets), rng.choice((0.0, 0.05)))
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 17)),
              rng.choice((F32, BF16, F16)), "cpu", rng.choice(("eager", "sdpa")), lora=lora,
              use_cache=rng.random() < 0.3, recompute=rng.choice(("none", "full", "selective")))
    return fam, run


def test_compiled_equals_traced_on_random_llama4_configurations() -> None:
    # every output and row name of the compiled structure against the trace, 10 draws
    assert cache_hits_on_random_draws(_draw, 20261128, 10) >= 1
