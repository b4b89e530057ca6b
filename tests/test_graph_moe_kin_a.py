"""Seven more mixture-of-experts decoders on the op graph, against every measured CPU row of
their configs, to the byte: GraniteMoe and GraniteMoeShared (granitemoe_swa.py's GraniteMoe:
Granite's multipliers, the softmax-over-top-k router, GraniteMoeShared's shared MLP), Aria's
text model (moe.py, router "aria": its transposed experts and shared experts), ERNIE 4.5 MoE
(moe.py, router "ernie4_5_moe", llama.glm_rotary), FlexOlmo (OLMo2's layers with OLMoE's
experts), MiniMax-M2 (moe.py, router "minimax_m2"; its partial rotary) and Mellum (Qwen3-MoE's
layout); ERNIE 4.5's dense model (llama.py with the same RoPE); and Llama 4's default text
config, whose chunked layers map to families/llama4.py.

Fixtures (read, not changed): tests/data/activations_moe_kin_a_cpu.jsonl (68 rows: eager and
SDPA, fp32 and bf16, full training and peft's LoRA all-linear of rank 8) and
tests/data/autocast_activations_moe_kin_a_cpu.jsonl (16 rows: fp32 models under CPU autocast
to bf16), measured by tools/measure_activations_hf.py (the commands in its docstring; torch 2.13
CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks, each storage still held at the end of
the forward once, parameters excluded), the experts as transformers' eager loop. peft 0.21
converts FlexOlmo's, Mellum's and ERNIE's experts as Qwen2-MoE's and MiniMax-M2's as Mixtral's
(memory_report's graph run says which targets become ParamWrappers: costs/activations.py);
GraniteMoe's, GraniteMoeShared's and Aria's routers and experts are parameters peft leaves.
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
from transformer_calc.errors import SpecError, TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import evaluate_fast
from transformer_calc.graph.families.granitemoe_swa import GraniteMoe
from transformer_calc.graph.families.llama import Llama
from transformer_calc.graph.families.llama4 import Llama4
from transformer_calc.graph.families.moe import Moe
from transformer_calc.hf import spec_from_hf
from transformer_calc.hf_defaults import DEFAULTS
from transformer_calc.memory import Settings, adapted_layers, memory_report
from transformer_calc.params import count_params

CONFIGS = ("granitemoe-tiny.json", "granitemoeshared-tiny.json", "aria_text-tiny.json",
           "ernie4_5_moe-tiny.json", "flex_olmo-tiny.json", "minimax_m2-tiny.json",
           "minimax_m2-rotary-dim.json", "mellum-tiny.json", "ernie4_5-tiny.json")
ROWS = measured_rows(CONFIGS)
AUTOCAST = [json.loads(line) for line in
            (DATA / "autocast_activations_moe_kin_a_cpu.jsonl").read_text().splitlines()]


def _family(config: str, grouped: bool = False) -> Llama:
    """The config's graph with the experts as the row ran them (ERNIE 4.5's dense: none)."""
    fam = family_of(spec_of(config))
    return replace(fam, grouped=grouped) if isinstance(fam, Moe) else fam


def test_the_rows_cover_each_type() -> None:
    counts = {c: sum(r["config"] == c for r in ROWS) for c in CONFIGS}
    assert counts == {c: 4 if c == "minimax_m2-rotary-dim.json" else 8 for c in CONFIGS}
    assert all(r["file"] == "activations_moe_kin_a_cpu.jsonl" for r in ROWS)
    assert sorted({r["config"] for r in AUTOCAST}) == sorted(
        c for c in CONFIGS if c != "minimax_m2-rotary-dim.json")
    assert all(r["autocast"] == "bf16" and r["dtype"] == "fp32" for r in AUTOCAST)


def _from_graph(row: dict, s: Settings) -> bool:
    """Whether memory_report's activations for the row come from the op graph (the roles
    LoRA adapts as memory_report derives them)."""
    spec = spec_of(row["config"])
    roles = None
    if s.lora_rank:
        # (a MoE's experts by their weight, as memory_report names them: experts.gate_up)
        roles = frozenset(a.role if a.role != "experts" else
                          "experts." + a.name.rsplit(".", 1)[1]
                          for a in adapted_layers(spec, count_params(spec), s.lora_targets))
    return graph_costs.graph_activations(spec, s, row["T"], amp=s.mixed, amp16=False,
                                         adapted_roles=roles) is not None


def _compiled_and_reported(row: dict) -> None:
    spec = spec_of(row["config"])
    if not row["lora"]:  # (the LoRA rows' conversion: memory_report's, below)
        fam = _family(row["config"])
        assert evaluate_fast(fam, row_run(row)).activation_bytes == row["measured_bytes"]
    s = row_settings(row)
    report = memory_report(spec, s)
    assert report.activations.total == row["measured_bytes"]
    if "trainable" in row:  # peft's count of the adapters' parameters
        assert report.trainable_params == row["trainable"][0]


def test_saved_bytes_equal_the_measurement() -> None:
    every_row(ROWS, _compiled_and_reported)


# one full-training row per config, and the LoRA rows of the types peft does not convert, are
# traced op by op and their named rows compared with memory_report's
TRACED = [next(r for r in ROWS if r["config"] == c and not r["lora"]) for c in CONFIGS] + [
    next(r for r in ROWS if r["config"] == c and r["lora"])
    for c in ("granitemoe-tiny.json", "granitemoeshared-tiny.json", "aria_text-tiny.json")]


def test_memory_report_reads_the_graph() -> None:
    # (the rules answer otherwise): a full-training and a LoRA row of each config
    every_row([r for r in ROWS if r is next(x for x in ROWS if x["config"] == r["config"]
                                            and bool(x["lora"]) == bool(r["lora"]))],
              lambda row: _from_graph(row, row_settings(row)) or pytest.fail("the rules"))


def test_the_trace_and_memory_reports_rows_agree() -> None:
    every_row(TRACED, lambda row: check_measured(
        row, _family(row["config"]), row_run(row),
        spec_of(row["config"]), compiled=None, report_rows="names"))


def _autocast_row(row: dict) -> None:
    # the report's activations and autocast's saved copies of the weights: the measurement
    spec = spec_of(row["config"])
    s = Settings(precision="bf16", mixed=True, batch_size=row["B"], seq_len=row["T"],
                 attention=row["attention"], device="cpu", experts="eager")
    fam = _family(row["config"])
    run = Run(row["B"], row["T"], F32, "cpu", row["attention"], BF16)
    copies = sum(t.nbytes for t in evaluate(fam, run).saved
                 if t.storage.kind == "weight_copy")
    assert memory_report(spec, s).activations.total + copies == row["measured_bytes"]
    assert _from_graph(row, s)


def test_cpu_autocast_rows_equal_the_measurement() -> None:
    every_row(AUTOCAST, _autocast_row)


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    # parameters: count_params (pinned against transformers on the meta device: the trainable
    # ones, ERNIE's frozen e_score_correction_bias aside); FLOPs: count_flops per token at
    # context T, the experts' over the K·B·T routed slots
    spec = spec_of(config)
    for grouped in (False, True):
        r = evaluate(_family(config, grouped), Run(3, 5, F32, "cpu", "sdpa"))
        assert r.params == r.trainable_params == count_params(spec).total
        assert r.forward_flops == 3 * 5 * count_flops(spec, 5).total


def test_the_types_map_to_their_graphs() -> None:
    fams = {c: family_of(spec_of(c)) for c in CONFIGS}
    assert type(fams["ernie4_5-tiny.json"]) is Llama and fams["ernie4_5-tiny.json"].rope_glm
    assert isinstance(fams["granitemoe-tiny.json"], GraniteMoe)
    assert not fams["granitemoe-tiny.json"].shared
    assert fams["granitemoeshared-tiny.json"].shared
    routers = {c: f.router for c, f in fams.items() if isinstance(f, Moe)}
    assert routers == {"granitemoe-tiny.json": "granitemoe_swa",
                       "granitemoeshared-tiny.json": "granitemoe_swa",
                       "aria_text-tiny.json": "aria", "ernie4_5_moe-tiny.json": "ernie4_5_moe",
                       "flex_olmo-tiny.json": "qwen", "minimax_m2-tiny.json": "minimax_m2",
                       "minimax_m2-rotary-dim.json": "minimax_m2", "mellum-tiny.json": "qwen"}
    # ERNIE: a dense first layer (moe_layer_start_index 1), its fp32 interleaved RoPE
    assert fams["ernie4_5_moe-tiny.json"].pattern == "DE"
    assert fams["ernie4_5_moe-tiny.json"].rope_glm
    flex = fams["flex_olmo-tiny.json"]
    assert flex.post_norm and flex.norm_fp32 and flex.rope_fp32 and not flex.norm_topk
    assert fams["mellum-tiny.json"].norm_topk and fams["mellum-tiny.json"].qk_norm == "head"
    # MiniMax-M2's rotary_dim 8 of head_dim 16: the first 8 channels of each head rotated
    assert not fams["minimax_m2-tiny.json"].partial_rotary
    assert fams["minimax_m2-rotary-dim.json"].partial_rotary
    assert fams["minimax_m2-rotary-dim.json"].dr == 8


def test_mellum_reads_its_dense_layers_and_minimax_m2_its_rotary_dim() -> None:
    config = json.loads((DATA / "hf" / "variants" / "mellum-tiny.json").read_text())
    dense = spec_from_hf({**config, "mlp_layer_types": ["dense", "sparse"]}, "m.json")
    assert dense.layer_ffn == "1D 1E"
    assert family_of(dense).pattern == "DE"
    config = json.loads((DATA / "hf" / "variants" / "minimax_m2-rotary-dim.json").read_text())
    # an explicit partial_rotary_factor wins over the legacy rotary_dim
    assert spec_from_hf({**config, "partial_rotary_factor": 0.25}, "m.json").rotary_fraction \
        == 0.25
    with pytest.raises(SpecError, match="rotary_dim"):
        spec_from_hf({**config, "rotary_dim": 7}, "m.json")


def test_llama4_texts_default_config_reads_the_graph() -> None:
    # Llama4TextConfig's attention_chunk_size (8192) is its default: the RoPE layers chunked
    spec = spec_from_hf({**DEFAULTS["llama4_text"], "model_type": "llama4_text"}, "l.json")
    fam = family_of(spec)
    assert isinstance(fam, Llama4) and fam.window == 8192 and set(fam.kinds) == {"C", "N"}


@pytest.mark.parametrize(("config", "change"), [
    ("granitemoe-tiny.json", {"qk_norm": "head"}),
    ("granitemoe-tiny.json", {"n_shared_experts": 1, "d_ff_shared": 32}),
    ("granitemoeshared-tiny.json", {"fused_gate_up": False}),
    ("aria_text-tiny.json", {"router_topk": "renorm"}),
    ("aria_text-tiny.json", {"d_ff_shared": 48}),
    ("ernie4_5_moe-tiny.json", {"bias_q": True}),
    ("ernie4_5_moe-tiny.json", {"router_fp32": False}),
    ("flex_olmo-tiny.json", {"norm_position": "pre"}),
    ("minimax_m2-tiny.json", {"router_jitter": 0.1}),
    ("minimax_m2-tiny.json", {"rope_concat": False}),
    ("mellum-tiny.json", {"sliding_window": 16, "layer_attention": "1S 1F"})])
def test_other_layouts_are_refused(config: str, change: dict) -> None:
    with pytest.raises(TcalcError):
        family_of(replace(spec_of(config), **change))


def _draw(rng: random.Random) -> tuple[Moe, Run]:
    kind = rng.choice(("granitemoe", "aria", "ernie", "flex", "minimax_m2", "mellum"))
    X = rng.randint(1, 6)
    H, G = rng.choice(((2, 1), (4, 2), (4, 4), (6, 3)))
    L = rng.randint(1, 3)
    dh = rng.choice((2, 4, 8))
    common = dict(V=rng.randint(5, 60), E=rng.choice((8, 16, 24)), H=H, Hkv=H // G, dh=dh,
                  F=rng.randint(1, 30), L=L, X=X, K=rng.randint(1, X), Fe=rng.randint(1, 30),
                  Fs=rng.randint(1, 30), grouped=rng.random() < 0.5)
    pattern = "".join(rng.choice("DE") for _ in range(L)) if rng.random() < 0.5 else ""
    fam: Moe
    if kind == "granitemoe":
        fam = GraniteMoe(**common, router="granitemoe_swa", shared=rng.random() < 0.5)
    elif kind == "aria":
        fam = Moe(**common, router="aria", shared_experts=True)
    elif kind == "ernie":
        fam = Moe(**common, router="ernie4_5_moe", rope_glm=True, shared_mlp=True,
                  pattern=pattern)
    elif kind == "flex":
        fam = Moe(**common, router="qwen", norm_topk=False, qk_norm="width", post_norm=True,
                  norm_fp32=True, rope_fp32=True)
    elif kind == "minimax_m2":
        dr = rng.choice((0, dh // 2)) if dh > 2 else 0
        fam = Moe(**common, router="minimax_m2", qk_norm="width", rope_concat=True,
                  partial_rotary=bool(dr), dr=dr)
    else:
        fam = Moe(**common, router="qwen", qk_norm="head", pattern=pattern)
    lora = None
    if rng.random() < 0.4:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(("q_proj", "v_proj", "o_proj"),
                                                             rng.choice((1, 2)))), 0.0)
    return fam, Run(rng.randint(1, 3), rng.randint(2, 40), rng.choice((F32, BF16)), "cpu",
                    rng.choice(("eager", "sdpa")), lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_configs() -> None:
    cache_hits_on_random_draws(_draw, seed=41, draws=16)
