"""The op graph's hybrid and latent-attention MoE types against every measured CPU row of their
configs, to the byte: Nemotron-H (transformer_calc/graph/families/nemotron_h.py), A.X K1
(families/mla.py, DeepSeek-V3's layers with post_mlp_layernorm after each MoE block),
MiMo-V2-Flash (families/mimo_v2_flash.py) and MiniMax-M3's text decoder
(families/minimax_m3.py).

Fixtures (read, not changed; torch 2.13 CPU, transformers 5.23, peft 0.21.2 rank 8,
saved_tensors_hooks, each storage still held at the end of the forward once, parameters
excluded; tools/measure_activations_hf.py wrote them, rows without an "experts" key ran
transformers' eager experts):
- nemotron_h-tiny.json (layers mamba, attention, mlp, moe, mamba; GQA with one K/V head, the
  mixer's in/out biases, no conv bias, 8 ungated experts top-1 and the shared MLP):
  activations_sweep_variants_cpu.jsonl (whole model, eager and SDPA, fp32 and bf16, B 2 T 64
  and B 1 T 128), activations_lora_moe_hybrid_targets_cpu.jsonl (in_proj; q_proj,v_proj) and
  activations_lora_survey_{qv,attn,mlp}_cpu.jsonl (LoRA), activations_mixers_cpu.jsonl (the
  bytes first saved inside the two Mamba-2 mixers, `--mixers`);
- activations_nemotron_h_cpu.jsonl: nemotron_h-tiny.json with grouped_mm experts, and
  nemotron_h-mtp.json (hybrid_override_pattern ME*E, two groups, top-2, the default chunk of
  128 > T: one padded chunk), both experts paths, and its mixers, written by
      for e in grouped_mm eager; do for bt in "2 64" "1 128"; do set -- $bt
        python tools/measure_activations_hf.py tests/data/hf/variants/nemotron_h-{tiny,mtp}.json \
            -B $1 -T $2 --experts $e; done; done     (less the tiny eager rows: above)
      python tools/measure_activations_hf.py --mixers tests/data/hf/variants/nemotron_h-mtp.json
  (their tcalc_bytes dropped: the graph answered them already);
- axk1-tiny.json (a dense first layer, then 8 experts top-2 behind a grouped router, one
  shared expert): activations_longt5_olmo_hybrid_cpu.jsonl (whole model, eager experts),
  activations_lora_moe_hybrid_targets_cpu.jsonl and activations_lora_survey_{mlp,attn,
  all_linear_rest}_cpu.jsonl (LoRA), and activations_axk1_grouped_cpu.jsonl (grouped_mm:
  `python tools/measure_activations_hf.py tests/data/hf/variants/axk1-tiny.json --experts
  grouped_mm`, tcalc_bytes dropped).
- mimo_v2_flash-tiny.json (full and sliding layers, V heads narrower than Q/K's, a dense
  first layer) and mimo_v2_flash-types.json (its own layer_types and mlp_layer_types, q/k/v
  biases, tied): activations_decoders_encoders_cpu.jsonl (whole model, eager: the class has
  no SDPA path), activations_moe_grouped_cpu.jsonl (grouped_mm), activations_lora_survey_
  {qv,attn,mlp,all_linear_rest}_cpu.jsonl (LoRA);
- minimax_m3_vl_text-tiny.json (two MoE layers, one shared MLP each):
  activations_sweep_variants_cpu.jsonl (whole model) and activations_lora_survey_{qv,attn,
  mlp,all_linear_rest}_cpu.jsonl (LoRA), eager experts.
The per-tensor rules (memory.activation_breakdown, memory_report without the graph) on
these rows: Nemotron-H tiny whole model −19,376 … −616 bytes (−1.9 … −0.05 %), LoRA
−13,614 … +7,592 (−2.8 … +1.0 %), mixers +208 … +2,652 (+0.03 … +0.3 %); the MTP config
whole model −88,364 … +10,188 (−3.0 … +0.5 %), mixers −35,890 … +9,176 (−1.6 … +0.9 %);
A.X K1 whole model −15,372 … −9,220 (−0.4 %), LoRA −11,268 … −9,220 (−0.7 … −0.4 %);
MiMo-V2-Flash whole model −17,412 … +80,884 (−0.3 … +1.9 %), LoRA −19,460 … −5,124
(−0.8 … −0.3 %); MiniMax-M3 whole model −7,756 … −7,748 (−1.1 … −0.6 %), LoRA −7,684 …
+9,788 (−1.2 … +1.8 %). The graph meets every row.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
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
from transformer_calc.errors import TcalcError
from transformer_calc.graph import BF16, DTYPES, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.mimo_v2_flash import MiMoV2Flash
from transformer_calc.graph.families.minimax_m3 import MiniMaxM3
from transformer_calc.graph.families.mla import MlaMoe
from transformer_calc.graph.families.nemotron_h import NemotronH
from transformer_calc.graph.names import component_rows
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("nemotron_h-tiny.json", "nemotron_h-mtp.json")
ROWS = measured_rows(CONFIGS)
MIXER_ROWS = [r for r in ROWS if "attention" not in r]  # --mixers
MODEL_ROWS = [r for r in ROWS if "attention" in r]


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _family(row: dict) -> NemotronH:
    """The row's graph, with the experts' path the row ran (rows without an experts key ran
    the tool's default, eager)."""
    fam = family_of(_spec(row["config"]))
    assert isinstance(fam, NemotronH)
    return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")


def test_the_rows_cover_the_layouts() -> None:
    assert len(MIXER_ROWS) == 6 + 6 and len(MODEL_ROWS) == 8 + 20 + 8 + 16
    assert {r.get("experts") for r in MODEL_ROWS} == {"eager", "grouped_mm"}
    assert {r["attention"] for r in MODEL_ROWS} == {"eager", "sdpa"}
    assert {r["dtype"] for r in ROWS} == {"fp32", "bf16"}
    assert {r["lora"][1] for r in MODEL_ROWS if r.get("lora")} == {
        "in_proj", "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj",
        "gate_proj,up_proj,down_proj"}
    fam = family_of(_spec("nemotron_h-tiny.json"))
    assert isinstance(fam, NemotronH) and fam.kinds == "MFDEM" and fam.grouped


def _assert_row(fam: object, row: dict) -> None:
    """The traced graph against a measured row, the adapters' parameters against peft's
    count; memory_report (the compiled graph, which the random draws below check against
    the trace) on the bf16 rows of each eager layout: one compile per structure costs more
    than a trace, and the suite's time is short."""
    reported = row["dtype"] == "bf16" and row["attention"] == "eager"
    check_measured(row, fam, row_run(row),  # type: ignore[arg-type]
                   _spec(row["config"]) if reported else None, compiled=None,
                   report_rows=None)


def test_saved_bytes_equal_the_measurement() -> None:
    every_row(MODEL_ROWS, lambda row: _assert_row(_family(row), row))


def test_mixer_bytes_equal_the_measurement() -> None:
    every_row(MIXER_ROWS, _mixer_bytes)


def _mixer_bytes(row: dict) -> None:
    # what --mixers counts: the storages first saved while a NemotronHMamba2Mixer runs
    fam = _family(row)
    result = evaluate(fam, Run(row["B"], row["T"], DTYPES[row["dtype"]], "cpu", "eager"))
    inside = sum(s.nbytes for s in result.saved if ".mixer" in s.scope
                 and s.layer is not None and fam.kinds[s.layer] == "M")
    assert inside == row["measured_bytes"]


def test_memory_report_rows_are_the_graphs() -> None:
    # the report's rows, name by name, are the traced graph's (two layouts)
    for row in (MODEL_ROWS[0], MODEL_ROWS[-1]):
        report = memory_report(_spec(row["config"]), row_settings(row))
        assert report.activations.total == row["measured_bytes"]
        assert [r[:2] + r[4:] for r in report.activations.rows] == [
            r[:2] + r[4:] for r in component_rows(_family(row), row_run(row))]


# torch.utils.flop_counter's forward FLOPs at B = 1 (eager experts):
#   /work/refvenv/bin/python tools/reference_flops.py --seq-len T \
#       tests/data/hf/variants/nemotron_h-{tiny,mtp}.json   (torch 2.13, transformers 5.23)
FLOPS = {("nemotron_h-tiny.json", 37): 2_278_016, ("nemotron_h-tiny.json", 64): 4_158_848,
         ("nemotron_h-mtp.json", 37): 5_556_480, ("nemotron_h-mtp.json", 64): 8_424_960}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    spec = _spec(config)
    # (the experts as tools/reference_flops.py runs them: eager)
    r = evaluate(_family({"config": config}), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(spec).total
    assert r.forward_flops == FLOPS[config, T]


def test_other_nemotron_h_layouts_are_refused() -> None:
    spec = _spec("nemotron_h-tiny.json")
    for change in ({"bias_ffn_in": True}, {"dropout": 0.1}, {"router_topk": "none"},
                   {"n_shared_experts": 2}, {"ssm_norm": False}, {"norm_fp32": False},
                   {"activation": "silu"}, {"position": "rope"}, {"ssm_dt_norms": True}):
        with pytest.raises(TcalcError):
            family_of(replace(spec, **change))  # type: ignore[arg-type]
    mtp = family_of(_spec("nemotron_h-mtp.json"))
    assert isinstance(mtp, NemotronH) and mtp.kinds == "MEFE"


def test_cuda_runs_the_mamba_kernel_and_the_experts_both_paths() -> None:
    # on CUDA transformers runs the mamba_ssm kernels where installed: the graph's
    # MambaSplitConv1dScanCombinedFn (tests/test_graph_ssm_defaults.py); CPU autocast:
    # tests/test_graph_autocast.py; the graph transcribes NemotronHExperts' own loop and
    # grouped_mm
    spec = _spec("nemotron_h-tiny.json")
    cpu = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                   device="cpu")
    ask = graph_costs.graph_activations
    assert ask(spec, cpu, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(spec, cpu, 64, amp=True, amp16=False, adapted_roles=None) is not None
    assert ask(spec, replace(cpu, device="cuda"), 64, amp=False, amp16=False,
               adapted_roles=None) is not None
    for experts in ("eager", "grouped_mm"):
        assert ask(spec, replace(cpu, experts=experts), 64, amp=False, amp16=False,
                   adapted_roles=None) is not None


def _draw(rng: random.Random) -> tuple[NemotronH, Run]:
    """Sizes drawn freely with the 0/1 edge cases (one K/V head, one group, chunks of 1, a
    kernel of 1, one expert, T = 1), each kind of layer in some order."""
    Hkv, G, X = rng.choice((1, 2)), rng.choice((1, 2)), rng.choice((1, 2, 4))
    kinds = rng.choice(("MFDEM", "ME", "FE", "D", "EMF", "M"))
    fam = NemotronH(V=rng.randint(3, 40), E=rng.randint(1, 24), H=Hkv * G, Hkv=Hkv,
                    dh=rng.choice((2, 4)), F=rng.randint(1, 20), L=len(kinds),
                    Gs=rng.choice((1, 2)), Hg=rng.choice((1, 3)), Ph=rng.choice((1, 4)),
                    N=rng.choice((1, 2, 5)), Kc=rng.choice((1, 2, 4)), Q=rng.choice((1, 4, 8)),
                    X=X, K=rng.randint(1, X), Fe=rng.randint(1, 12), Fs=rng.randint(1, 12),
                    kinds=kinds, tied=rng.random() < 0.5, conv_bias=rng.random() < 0.5,
                    bias=rng.random() < 0.5, grouped=rng.random() < 0.5)
    lora = None
    if rng.random() < 0.4:
        targets = rng.choice((("in_proj",), ("q_proj", "v_proj"), ("up_proj", "down_proj"),
                              ("all-linear",)))
        lora = Lora(rng.choice((1, 4)), frozenset(targets), rng.choice((0.0, 0.05)))
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 17)),
              rng.choice((F32, BF16, F16)), "cpu", rng.choice(("eager", "sdpa")), lora=lora,
              recompute=rng.choice(("none", "full")))
    return fam, run


def test_compiled_equals_traced_on_random_nemotron_h_configurations() -> None:
    # every output and row name of the compiled structure against the trace, 12 draws
    assert cache_hits_on_random_draws(_draw, 20261128, 12) >= 1


# -- A.X K1 ---------------------------------------------------------------------------------
AXK1_ROWS = measured_rows(("axk1-tiny.json",))


def _axk1(row: dict) -> MlaMoe:
    fam = family_of(_spec("axk1-tiny.json"))
    assert isinstance(fam, MlaMoe)
    return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")


def test_the_axk1_rows_cover_its_paths() -> None:
    assert len(AXK1_ROWS) == 8 + 4 + 16
    assert {r["experts"] for r in AXK1_ROWS} == {"eager", "grouped_mm"}
    assert {r["lora"][1] for r in AXK1_ROWS if r.get("lora")} == {
        "gate_proj,up_proj,down_proj", "q_proj,k_proj,v_proj,o_proj", "all-linear"}
    fam = family_of(_spec("axk1-tiny.json"))
    assert isinstance(fam, MlaMoe) and fam.moe_norm and fam.pattern == "DEE" and fam.grouped


def test_axk1_saved_bytes_equal_the_measurement() -> None:
    every_row(AXK1_ROWS, lambda row: _assert_row(_axk1(row), row))


# tools/reference_flops.py --seq-len T tests/data/hf/variants/axk1-tiny.json (torch 2.13,
# transformers 5.23, eager experts)
AXK1_FLOPS = {37: 8_645_568, 64: 16_613_376}


@pytest.mark.parametrize("T", sorted(AXK1_FLOPS))
def test_axk1_params_and_flops_equal_torch(T: int) -> None:
    r = evaluate(_axk1({}), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(_spec("axk1-tiny.json")).total
    assert r.forward_flops == AXK1_FLOPS[T]


def test_the_moe_norm_is_axk1s_own() -> None:
    spec = _spec("axk1-tiny.json")
    for change in ({"moe_post_norm": False}, {"model_type": "deepseek_v3"},
                   {"q_lora_rank": 0}):
        with pytest.raises(TcalcError):
            family_of(replace(spec, **change))  # type: ignore[arg-type]
    # the norm's bytes per MoE layer (two), fp32: its input, 1/rms and the normed product
    # the weight's gradient reads: B·T·(2·E + 1)·4
    row = {"experts": "eager"}
    run = Run(2, 16, F32, "cpu", "eager")
    with_norm, without = (evaluate(replace(_axk1(row), moe_norm=n), run) for n in (True, False))
    E = _axk1(row).E
    assert with_norm.activation_bytes - without.activation_bytes == 2 * 2 * 16 * (2 * E + 1) * 4


def _axk1_draw(rng: random.Random) -> tuple[MlaMoe, Run]:
    """A.X K1 structures: sizes drawn freely, a dense first layer or none, either experts
    path, LoRA on the latent projections or all-linear."""
    X = rng.choice((1, 2, 4))
    dn, dr = rng.choice((1, 8)), rng.choice((2, 4))
    pattern = rng.choice(("", "DE", "DEE"))
    fam = MlaMoe(V=rng.randint(5, 40), E=rng.randint(1, 24), H=rng.choice((1, 2, 3)), Hkv=1,
                 dh=1, F=rng.randint(1, 20), L=len(pattern) or rng.choice((1, 2)),
                 q_latent=True, rq=rng.randint(1, 12), rkv=rng.randint(1, 12), dn=dn, dr=dr,
                 dv=rng.choice((dn, 3)), interleave=True, X=X, K=rng.randint(1, X),
                 Fe=rng.randint(1, 12), Fs=rng.randint(1, 12), pattern=pattern,
                 router="sigmoid", norm_topk=True, shared_expert=True,
                 grouped=rng.random() < 0.5, moe_norm=True)
    lora = None
    if rng.random() < 0.4:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.choice(
            (("q_a_proj", "kv_b_proj"), ("o_proj",), ("all-linear",)))), 0.0)
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 33)),
                    rng.choice((F32, BF16, F16)), "cpu", rng.choice(("eager", "sdpa")),
                    lora=lora, recompute=rng.choice(("none", "full")))


def test_compiled_equals_traced_on_random_axk1_configurations() -> None:
    assert cache_hits_on_random_draws(_axk1_draw, 20261128, 8) >= 1


# -- MiMo-V2-Flash ----------------------------------------------------------------------------
MIMO_CONFIGS = ("mimo_v2_flash-tiny.json", "mimo_v2_flash-types.json")
MIMO_ROWS = measured_rows(MIMO_CONFIGS)


def _mimo(row: dict) -> MiMoV2Flash:
    fam = family_of(_spec(row["config"]))
    assert isinstance(fam, MiMoV2Flash)
    return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")


def test_the_mimo_rows_cover_its_layouts() -> None:
    assert len(MIMO_ROWS) == 16 + 12
    assert {r.get("experts", "eager") for r in MIMO_ROWS} == {"eager", "grouped_mm"}
    assert {r["attention"] for r in MIMO_ROWS} == {"eager"}
    tiny, types = (family_of(_spec(c)) for c in MIMO_CONFIGS)
    assert isinstance(tiny, MiMoV2Flash) and isinstance(types, MiMoV2Flash)
    # tiny: full, five sliding, full, sliding; a dense first layer; V heads narrower than
    # Q/K's; types: its own layer types and a dense second layer, q/k/v biases, tied
    assert tiny.attention_kinds == "FSSSSFS" and tiny.kinds == "addddbd"
    assert (tiny.dh, tiny.dv, tiny.Hkv, tiny.Dr) == (24, 16, 2, 8)
    assert types.kinds == "dadb" and types.bias_qkv and types.tied and types.dv == types.dh


def test_mimo_saved_bytes_equal_the_measurement() -> None:
    every_row(MIMO_ROWS, lambda row: _assert_row(_mimo(row), row))


# tools/reference_flops.py --seq-len T tests/data/hf/variants/mimo_v2_flash-{tiny,types}.json
# (torch 2.13, transformers 5.23, eager experts)
MIMO_FLOPS = {("mimo_v2_flash-tiny.json", 37): 28_846_976,
              ("mimo_v2_flash-tiny.json", 64): 57_638_912,
              ("mimo_v2_flash-types.json", 37): 5_697_408,
              ("mimo_v2_flash-types.json", 64): 11_182_080}


@pytest.mark.parametrize(("config", "T"), sorted(MIMO_FLOPS))
def test_mimo_params_and_flops_equal_torch(config: str, T: int) -> None:
    r = evaluate(_mimo({"config": config}), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(_spec(config)).total
    assert r.forward_flops == MIMO_FLOPS[config, T]


def test_other_mimo_layouts_are_refused() -> None:
    spec = _spec("mimo_v2_flash-tiny.json")
    for change in ({"rotary_fraction": 1.0}, {"router_topk": "none"}, {"bias_o": True},
                   {"attention_sinks": False}, {"global_kv_heads": 3},
                   {"n_shared_experts": 1}, {"qk_norm": "head"}, {"dropout": 0.1}):
        with pytest.raises(TcalcError):
            family_of(replace(spec, **change))  # type: ignore[arg-type]
    # no SDPA path in the class; autocast over its sigmoid router: measured
    # (tests/test_graph_autocast.py)
    ask = graph_costs.graph_activations
    cpu = Settings(precision="bf16", batch_size=2, seq_len=16, attention="eager",
                   device="cpu")
    assert ask(spec, cpu, 16, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(spec, cpu, 16, amp=True, amp16=False, adapted_roles=None) is not None


def test_the_sinks_column_and_the_row_max() -> None:
    # per sliding layer: the scores with the sink column, softmaxed (B·H·T·(T + 1)), the
    # contiguous copy of its first T columns the product with V reads (B·H·T·T); the row
    # max's int64 index (B·H·T·8) on every layer
    fam = _mimo({"config": "mimo_v2_flash-types.json"})
    B, T, H = 2, 16, fam.H
    r = evaluate(fam, Run(B, T, F32, "cpu", "eager"))
    softmax = [s for s in r.saved if s.role == "softmax.result"]
    assert sorted(s.nbytes for s in softmax) == sorted(
        B * H * T * (T + (k == "S")) * 4 for k in fam.attention_kinds)
    index = [s for s in r.saved if s.role == "max.indices"]
    assert [s.nbytes for s in index] == [B * H * T * 8] * fam.L


def _mimo_draw(rng: random.Random) -> tuple[MiMoV2Flash, Run]:
    """MiMo-V2-Flash structures: layer kinds in some order, sizes drawn freely (one K/V
    head, dv ≠ dh, one expert), either experts path, LoRA or not."""
    Hkv = rng.choice((1, 2))
    dh = rng.choice((4, 6, 8))
    X = rng.choice((1, 2, 4))
    fam = MiMoV2Flash(V=rng.randint(5, 40), E=rng.randint(1, 24), H=2 * Hkv * rng.choice((1, 2)),
                      Hkv=Hkv, dh=dh, dv=rng.choice((dh, 3)), F=rng.randint(1, 20),
                      L=0, Dr=rng.choice((2, 4)), X=X, K=rng.randint(1, X),
                      Fe=rng.randint(1, 12), kinds=rng.choice(("adb", "d", "cab", "bd")),
                      tied=rng.random() < 0.5, bias_qkv=rng.random() < 0.5,
                      grouped=rng.random() < 0.5)
    fam = replace(fam, L=len(fam.kinds))
    lora = None
    if rng.random() < 0.4:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.choice(
            (("q_proj", "v_proj"), ("gate_proj", "up_proj", "down_proj"), ("all-linear",)))),
            rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 17)),
                    rng.choice((F32, BF16, F16)), "cpu", "eager", lora=lora,
                    recompute=rng.choice(("none", "full")))


def test_compiled_equals_traced_on_random_mimo_configurations() -> None:
    assert cache_hits_on_random_draws(_mimo_draw, 20261128, 8) >= 1


# -- MiniMax-M3 (text) ---------------------------------------------------------------------------
M3_ROWS = measured_rows(("minimax_m3_vl_text-tiny.json",))


def test_the_minimax_m3_rows_cover_its_paths() -> None:
    assert len(M3_ROWS) == 8 + 16
    assert {r["attention"] for r in M3_ROWS} == {"eager", "sdpa"}
    fam = family_of(_spec("minimax_m3_vl_text-tiny.json"))
    # every layer's MLP the experts; the whole head rotated (rotary_dim is not read)
    assert isinstance(fam, MiniMaxM3) and fam.pattern == "EE" and fam.Dr == fam.dh == 16


def test_minimax_m3_saved_bytes_equal_the_measurement() -> None:
    every_row(M3_ROWS, lambda row: _assert_row(family_of(_spec(row["config"])), row))


# tools/reference_flops.py --seq-len T tests/data/hf/variants/minimax_m3_vl_text-tiny.json
# (torch 2.13, transformers 5.23, eager experts)
M3_FLOPS = {37: 1_346_208, 64: 2_770_944}


@pytest.mark.parametrize("T", sorted(M3_FLOPS))
def test_minimax_m3_params_and_flops_equal_torch(T: int) -> None:
    spec = _spec("minimax_m3_vl_text-tiny.json")
    r = evaluate(family_of(spec), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(spec).total
    assert r.forward_flops == M3_FLOPS[T]


def test_other_minimax_m3_layouts_are_refused() -> None:
    spec = _spec("minimax_m3_vl_text-tiny.json")
    for change in ({"qk_norm": "none"}, {"activation": "silu"}, {"n_shared_experts": 0},
                   {"bias_o": True}, {"norm_fp32": False}, {"fused_gate_up": False}):
        with pytest.raises(TcalcError):
            family_of(replace(spec, **change))  # type: ignore[arg-type]
    # grouped_mm experts (the class's default) and autocast keep the rules: unmeasured
    ask = graph_costs.graph_activations
    cpu = Settings(precision="fp32", batch_size=2, seq_len=16, attention="eager",
                   device="cpu", experts="eager")
    assert ask(spec, cpu, 16, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(spec, replace(cpu, experts="grouped_mm"), 16, amp=False, amp16=False,
               adapted_roles=None) is None


def _m3_draw(rng: random.Random) -> tuple[MiniMaxM3, Run]:
    """MiniMax-M3 structures: dense and MoE layers, partial or whole RoPE, GQA or not."""
    Hkv, X = rng.choice((1, 2)), rng.choice((1, 2, 4))
    dh = rng.choice((4, 8))
    pattern = rng.choice(("EE", "DE", "E", "DED"))
    fam = MiniMaxM3(V=rng.randint(5, 40), E=rng.randint(1, 24), H=Hkv * rng.choice((1, 2)),
                    Hkv=Hkv, dh=dh, F=rng.randint(1, 20), L=len(pattern),
                    Dr=rng.choice((2, dh)), X=X, K=rng.randint(1, X), Fe=rng.randint(1, 12),
                    Fs=rng.randint(1, 12), pattern=pattern, tied=rng.random() < 0.5)
    lora = None
    if rng.random() < 0.4:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.choice(
            (("q_proj", "v_proj"), ("down_proj",), ("all-linear",)))), rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 17)),
                    rng.choice((F32, BF16, F16)), "cpu", rng.choice(("eager", "sdpa")),
                    lora=lora, recompute=rng.choice(("none", "full")))


def test_compiled_equals_traced_on_random_minimax_m3_configurations() -> None:
    assert cache_hits_on_random_draws(_m3_draw, 20261128, 6) >= 1
