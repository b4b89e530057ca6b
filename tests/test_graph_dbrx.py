"""The op graph's DBRX (transformer_calc/graph/families/dbrx.py) against every measured CPU row
of its configs, to the byte.

Fixtures (read, not changed; torch 2.13 CPU, transformers 5.23, peft 0.21.2 rank 8,
saved_tensors_hooks, each storage still held at the end of the forward once, parameters
excluded; tools/measure_activations_hf.py wrote them, DbrxExperts' own loop):
- dbrx-tiny.json (GQA with 2 K/V heads, clip_qkv 8, 4 experts top-2, moe_jitter_eps 0.01,
  the top values' 1-norm): activations_moe_dense_kimi_linear_cpu.jsonl (whole model, eager
  and SDPA, fp32 and bf16, B 2 T 64 and B 1 T 128), activations_lora_survey_all_linear_rest_
  cpu.jsonl (LoRA all-linear);
- activations_dbrx_layouts_cpu.jsonl: dbrx-tiny.json with use_cache=True and with LoRA target
  lists, dbrx-mqa-p2.json (one K/V head, 3 experts top-1, no jitter, the top value's 2-norm,
  attn_pdrop 0.1) and dbrx-dropout.json (resid_pdrop 0.1; emb_pdrop 0.2, which DbrxModel
  never applies), written by
      for bt in "2 64" "1 128"; do set -- $bt
        python tools/measure_activations_hf.py tests/data/hf/variants/dbrx-tiny.json \\
            -B $1 -T $2 --use-cache; done
      python tools/measure_activations_hf.py tests/data/hf/variants/dbrx-tiny.json --lora 8 \\
          --lora-targets Wqkv,router.layer --tcalc-targets qkv,router
      python tools/measure_activations_hf.py tests/data/hf/variants/dbrx-tiny.json --lora 8 \\
          --lora-targets out_proj,lm_head --tcalc-targets o,lm_head
      python tools/measure_activations_hf.py tests/data/hf/variants/dbrx-mqa-p2.json
      python tools/measure_activations_hf.py tests/data/hf/variants/dbrx-mqa-p2.json --lora 8
      python tools/measure_activations_hf.py tests/data/hf/variants/dbrx-dropout.json
  (their tcalc_bytes dropped: the graph answers them).
The per-tensor rules (memory.activation_breakdown and lora_activations, memory_report without
the graph) on these 40 rows: dbrx-tiny 7,172 bytes short in fp32 and 2,564 in bf16
(-0.68 ... -0.16 %), dbrx-mqa-p2 4,100 and 1,028 short (-0.23 ... -0.07 %), dbrx-dropout
+1.09 ... +1.54 % (an embedding dropout mask DBRX never makes). The graph meets every row.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import cache_hits_on_random_draws, measured_rows, row_run

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import SpecError, TcalcError
from transformer_calc.graph import BF16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.dbrx import Dbrx
from transformer_calc.graph.names import component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("dbrx-tiny.json", "dbrx-mqa-p2.json", "dbrx-dropout.json")
ROWS = measured_rows(CONFIGS)


def _id(r: dict) -> str:
    return "{}-{}-{}-B{}-T{}{}-{}".format(
        r["config"].removesuffix(".json"), r["attention"], r["dtype"], r["B"], r["T"],
        "-cache" if r.get("use_cache") else "", r.get("tcalc_targets")
        or "-".join(map(str, r.get("lora", ()))) or "full")


def _config(name: str) -> dict:
    return json.loads((DATA / "hf" / "variants" / name).read_text())


def _spec(name: str) -> ModelSpec:
    return spec_from_hf(_config(name))


def _run(row: dict) -> Run:
    return replace(row_run(row), use_cache=row.get("use_cache", False))


def _settings(row: dict) -> Settings:
    lora = {}
    if row.get("lora"):
        rank, targets, dropout = row["lora"]
        lora = dict(lora_rank=rank, lora_dropout=dropout,
                    lora_targets=tuple(row.get("tcalc_targets", targets).split(",")))
    return Settings(precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
                    attention=row["attention"], device="cpu", experts="eager",
                    use_cache=row.get("use_cache", False), **lora)  # type: ignore[arg-type]


def test_the_rows_cover_the_layouts() -> None:
    assert len(ROWS) == 12 + 16 + 8 + 4
    assert {r["attention"] for r in ROWS} == {"eager", "sdpa"}
    assert {r["dtype"] for r in ROWS} == {"fp32", "bf16"}
    assert {r["lora"][1] for r in ROWS if r.get("lora")} == {
        "all-linear", "Wqkv,router.layer", "out_proj,lm_head"}
    assert sum(bool(r.get("use_cache")) for r in ROWS) == 8
    tiny, p2 = family_of(_spec("dbrx-tiny.json")), family_of(_spec("dbrx-mqa-p2.json"))
    assert isinstance(tiny, Dbrx) and isinstance(p2, Dbrx)
    assert (tiny.Hkv, tiny.K, tiny.jitter, tiny.attention_dropout) == (2, 2, True, 0.0)
    assert (p2.Hkv, p2.K, p2.jitter, p2.attention_dropout) == (1, 1, False, 0.1)
    dropout = family_of(_spec("dbrx-dropout.json"))
    assert isinstance(dropout, Dbrx) and (dropout.dropout, dropout.attention_dropout) == (0.1, 0)


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_saved_bytes_equal_the_measurement(row: dict) -> None:
    """The traced graph against the row, the adapters' parameters against peft's count;
    memory_report (the compiled graph) on the bf16 rows."""
    result = evaluate(family_of(_spec(row["config"])), _run(row))
    assert result.activation_bytes == row["measured_bytes"]
    if "trainable" in row:
        assert result.trainable_params == row["trainable"][0]
    if row["dtype"] == "bf16":
        report = memory_report(_spec(row["config"]), _settings(row))
        assert report.activations.total == row["measured_bytes"]


def test_what_the_router_and_the_clamp_keep() -> None:
    # dbrx-tiny at B 2 T 64 in fp32, its two layers: topk's int64 indices, the top values
    # the norm keeps (K·B·T) and the norm (B·T: the division keeps both again); the
    # experts' (K·B·T, 2) int64 nonzero and the slots' routing weights gathered; the jitter's
    # noise (B·T·E); Wqkv's output the clamp keeps (B·T·(H + 2·Hkv)·dh). The rules left out
    # the first three (and the loss's 0-d total_weight): 2 · 3,584 + 4 = 7,172 bytes short
    row = next(r for r in ROWS if r["config"] == "dbrx-tiny.json" and not r.get("lora")
               and r["attention"] == "eager" and r["dtype"] == "fp32" and r["B"] == 2
               and not r.get("use_cache"))
    names = {n: b for n, _, b in ((r[0], r[1], r[1] * r[4]) for r in component_rows(
        family_of(_spec("dbrx-tiny.json")), _run(row)))}
    N, K = 2 * 64, 2
    assert names["decoder.ffn.router_topk"] == 2 * (K * N * 8 + K * N * 4 + N * 4)
    assert names["decoder.ffn.expert_index"] == 2 * (K * N * 2 * 8)
    assert names["decoder.ffn.routing_weight"] == 2 * (K * N * 4)
    assert names["decoder.ffn.router_jitter"] == 2 * (N * 64 * 4)
    assert names["decoder.attn.qkv_clamp_input"] == 2 * (N * (64 + 2 * 2 * 16) * 4)


def test_dropout_off_is_dbrx_tiny() -> None:
    # dbrx-dropout.json is dbrx-tiny.json with resid_pdrop and emb_pdrop: with dropout off
    # (Settings.dropout False) the report is dbrx-tiny's measured row
    row = next(r for r in ROWS if r["config"] == "dbrx-tiny.json" and not r.get("lora")
               and r["attention"] == "eager" and r["dtype"] == "bf16" and r["B"] == 2
               and not r.get("use_cache"))
    settings = replace(_settings(row), dropout=False)
    assert memory_report(_spec("dbrx-dropout.json"), settings).activations.total == \
        row["measured_bytes"]


def test_memory_report_rows_are_the_graphs() -> None:
    for row in (ROWS[0], ROWS[-1]):
        report = memory_report(_spec(row["config"]), _settings(row))
        assert report.activations.total == row["measured_bytes"]
        assert [r[:2] + r[4:] for r in report.activations.rows] == [
            r[:2] + r[4:] for r in component_rows(family_of(_spec(row["config"])), _run(row))]


# torch.utils.flop_counter's forward FLOPs at B = 1:
#   /work/refvenv/bin/python tools/reference_flops.py --seq-len T \
#       tests/data/hf/variants/dbrx-{tiny,mqa-p2}.json   (torch 2.13, transformers 5.23)
FLOPS = {("dbrx-tiny.json", 37): 4_982_272, ("dbrx-tiny.json", 64): 9_502_720,
         ("dbrx-mqa-p2.json", 37): 4_063_488, ("dbrx-mqa-p2.json", 64): 7_913_472}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    from transformer_calc.flops import count_flops

    spec = _spec(config)
    r = evaluate(family_of(spec), Run(1, T, F32, "cpu", "eager"))
    # (DbrxForCausalLM on the meta device: 90,944 and 88,768, tests/test_hf.py)
    assert r.params == r.trainable_params == count_params(spec).total
    assert r.forward_flops == FLOPS[config, T] == T * count_flops(spec, T).total


def test_spec_from_hf_reads_the_routers_norm() -> None:
    """DbrxFFNConfig.moe_normalize_expert_weights: 1.0 by default, any p divides the top
    values by their p-norm (the same saved tensors); null leaves them as topk gives them,
    which the graph does not transcribe (the rules answer)."""
    cfg = _config("dbrx-tiny.json")
    ffn = cfg["ffn_config"]
    assert _spec("dbrx-tiny.json").router_topk == "pnorm"
    bare = spec_from_hf(cfg | {"ffn_config": ffn | {"moe_normalize_expert_weights": None}})
    assert bare.router_topk == "none"
    with pytest.raises(TcalcError, match="no op graph for this dbrx layout"):
        family_of(bare)
    settings = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                        device="cpu", use_cache=False)
    assert memory_report(bare, settings).activations.total != \
        memory_report(_spec("dbrx-tiny.json"), settings).activations.total
    with pytest.raises(SpecError, match="moe_normalize_expert_weights"):
        spec_from_hf(cfg | {"ffn_config": ffn | {"moe_normalize_expert_weights": "l1"}})


@pytest.mark.parametrize("change", [
    {"qkv_clamp": False}, {"router_topk": "renorm"},
    {"activation": "gelu"}, {"bias_o": True}, {"norm": "layernorm"}, {"fused_qkv": False},
    {"n_shared_experts": 1}, {"layer_ffn": "1D 1E"}, {"peft_moe": "mixtral"},
    {"tie_embeddings": True}, {"qk_norm": "head"}, {"sliding_window": 8}])
def test_what_the_graph_does_not_transcribe_keeps_the_rules(change: dict) -> None:
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(_spec("dbrx-tiny.json"), **change))


def test_autocast_and_unknown_targets_keep_the_rules() -> None:
    # no row measures DBRX under autocast; peft reaches no expert (plain parameters)
    spec = _spec("dbrx-tiny.json")
    base = dict(batch_size=2, seq_len=64, attention="eager", device="cpu", use_cache=False)
    amp = Settings(precision="bf16", mixed=True, **base)  # type: ignore[arg-type]
    assert graph_costs.graph_activations(spec, amp, 64, amp=True, amp16=False,
                                         adapted_roles=None) is None
    lora = Settings(precision="bf16", lora_rank=8, lora_targets=("router", "experts"),
                    **base)  # type: ignore[arg-type]
    assert graph_costs.graph_activations(spec, lora, 64, amp=False, amp16=False,
                                         adapted_roles=frozenset(("router", "experts"))) is None


def test_tcalc_memory_reads_the_graph(cli) -> None:  # type: ignore[no-untyped-def]
    row = next(r for r in ROWS if r["config"] == "dbrx-tiny.json" and not r.get("lora")
               and r["attention"] == "sdpa" and r["dtype"] == "bf16" and r["B"] == 2
               and r.get("use_cache"))
    out = cli.json("memory", str(DATA / "hf" / "variants" / "dbrx-tiny.json"), "-b", "2",
                   "--seq-len", "64", "--precision", "bf16", "--attention",
                   "sdpa", "--device", "cpu")
    assert out["activations"]["bytes"] == row["measured_bytes"]


# -- the compiled path ------------------------------------------------------------------------
def _draw(rng):  # type: ignore[no-untyped-def]
    H = rng.choice((1, 2, 4))
    Hkv = rng.choice([n for n in (1, 2, 4) if H % n == 0])
    dh = rng.choice((4, 8))
    X = rng.choice((2, 3, 4))
    Fe = rng.choice((8, 24))
    fam = Dbrx(V=rng.choice((16, 40)), E=H * dh, H=H, Hkv=Hkv, dh=dh, F=Fe,
               L=rng.choice((1, 2, 3)), attention_dropout=rng.choice((0.0, 0.1)), X=X,
               K=rng.choice(range(1, X + 1)), Fe=Fe, router="dbrx",
               jitter=rng.random() < 0.5, dropout=rng.choice((0.0, 0.1)))
    targets = rng.choice((None, "all-linear", "Wqkv,router.layer", "out_proj,lm_head"))
    lora = Lora(8, frozenset(targets.split(",")), rng.choice((0.0, 0.1))) if targets else None
    run = Run(rng.choice((1, 2, 3)), rng.choice((5, 8, 16)), rng.choice((F32, BF16)), "cpu",
              rng.choice(("eager", "sdpa")), use_cache=rng.random() < 0.3, lora=lora)
    return fam, run


def test_compiled_equals_traced_on_random_configurations() -> None:
    assert cache_hits_on_random_draws(_draw, 23, 12) > 0
