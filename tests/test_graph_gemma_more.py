"""The op graph's Gemma 4 and Gemma 3n text decoders (transformer_calc/graph/families/
gemma4.py: Gemma4ForCausalLM with and without experts, Gemma4UnifiedForCausalLM;
gemma3n.py: Gemma3nForCausalLM), which memory_report reads for those model types: against
every measured CPU row of their configs, to the byte.

Fixtures (read, not changed): the rows of gemma4_text-tiny, gemma4_unified_text-tiny,
gemma4_text-moe, gemma3n_text-tiny and gemma3n_text-untied in tests/data/activations_*.jsonl
(full training and peft LoRA, eager and SDPA, fp32 and bf16; the experts as transformers'
eager loop and, in activations_moe_grouped_cpu.jsonl, grouped_mm; a row's tcalc_targets is
the --lora-targets naming peft's targets, LAuReL's two linears),
measured by tools/measure_activations_hf.py: torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, use_cache=False, each storage still held at the end of the forward once,
parameters and buffers excluded.

Tolerance: none.
"""

from __future__ import annotations

import random
from dataclasses import fields, replace

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
from test_graph import _rules_report

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.evaluate import trace
from transformer_calc.graph.families.gemma3n import Gemma3n
from transformer_calc.graph.families.gemma4 import Gemma4
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

MOE = "gemma4_text-moe.json"
GEMMA4 = ("gemma4_text-tiny.json", "gemma4_unified_text-tiny.json", MOE)
GEMMA3N = ("gemma3n_text-tiny.json", "gemma3n_text-untied.json")
CONFIGS = GEMMA4 + GEMMA3N
ROWS = measured_rows(CONFIGS)
def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _family(row: dict) -> Gemma4:
    """The row's graph, its experts as the row ran them (the tool's default: eager)."""
    fam = family_of(_spec(row["config"]))
    assert isinstance(fam, Gemma4)
    return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")


def test_the_rows_cover_the_five_configs() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    full = [r for r in ROWS if not r.get("lora")]
    assert len(full) == 16 + 16 + 8 + 8 and len(ROWS) - len(full) == 32 + 16 + 52
    assert {(r["attention"], r["dtype"]) for r in ROWS} == {
        (a, d) for a in ("eager", "sdpa") for d in ("fp32", "bf16")}
    assert {r.get("experts", "eager") for r in ROWS if r["config"] == MOE} == {
        "eager", "grouped_mm"}


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows as the trace names them), each to the byte
    every_row(ROWS, lambda row: check_measured(row, _family(row), row_run(row),
                                               _spec(row["config"])))


def test_what_the_rules_missed() -> None:
    # the rules (activation_breakdown, lora_activations) miss every row: Gemma 4 by -0.18 ...
    # +2.10 % without experts, -2.85 ... +3.48 % with them; Gemma 3n by -0.55 ... +1.93 %
    for config in CONFIGS:
        spec = _spec(config)
        missed = [(_rules_report(spec, row_settings(r)).activations.total - r["measured_bytes"])
                  / r["measured_bytes"] for r in ROWS if r["config"] == config]
        assert all(missed) and max(abs(d) for d in missed) > (0.03 if config == MOE else 0.016)
        assert min(missed) < 0 < max(missed)


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    fam = family_of(spec)
    for attention in ("eager", "sdpa"):
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


def test_the_layers_share_keys_and_values_as_the_config_says() -> None:
    fam = family_of(_spec("gemma4_text-tiny.json"))
    assert isinstance(fam, Gemma4) and fam.kinds == "SFSFSF" and fam.ple and fam.k_eq_v
    # num_kv_shared_layers = 2: layers 4 and 5 reuse layer 2's (sliding) and 3's (full)
    assert fam.modes() == ["", "", "store", "store", "reuse", "reuse"]
    params = trace(fam, Run(1, 8)).trace.params
    attn = {n.split(".", 4)[-1].rsplit(".", 1)[0] for n in params if ".self_attn." in n
            and n.startswith(("model.layers.4.", "model.layers.5."))}
    assert attn == {"q_proj", "q_norm", "o_proj"}
    # the full layers' V is their K projection (attention_k_eq_v): no v_proj
    assert "model.layers.1.self_attn.v_proj.weight" not in params
    assert "model.layers.0.self_attn.v_proj.weight" in params
    # use_double_wide_mlp: the shared layers' MLP is 2 · d_ff wide
    assert params["model.layers.5.mlp.gate_proj.weight"].shape[0].value == 2 * fam.F
    assert params["model.layers.3.mlp.gate_proj.weight"].shape[0].value == fam.F


# -- which specs are Gemma 4 graphs ----------------------------------------------------------
def test_gemma4_model_types_map_to_their_graph() -> None:
    for config in GEMMA4:
        assert isinstance(family_of(_spec(config)), Gemma4)
    fam = family_of(_spec(MOE))
    assert isinstance(fam, Gemma4) and fam.experts and (fam.X, fam.K, fam.Fe) == (4, 2, 24)
    # experts in some layers only, or not beside a dense MLP: no graph (the rules answer)
    for change in (dict(layer_ffn="1D 2E"), dict(moe_beside_dense=False)):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(replace(_spec(MOE), **change))


@pytest.mark.parametrize("change, why", [
    (dict(value_norm=False), "no v_norm"),
    (dict(norm_mean_square=False), "another RMSNorm"),
    (dict(sandwich_norm=False), "two norms a layer"),
    (dict(qk_norm="none"), "no q/k norms"),
    (dict(attn_softcapping=50.0), "soft-capped scores"),
    (dict(bias_q=True), "a bias on q alone"),
    (dict(bias_ffn_in=True), "an MLP bias"),
    (dict(activation="silu"), "another activation"),
    (dict(rope_fp32=True), "a field the graph does not read"),
    (dict(model_type="gemma3n_text"), "Gemma 3n's forward"),
])
def test_other_gemma4_like_layouts_are_refused(change: dict, why: str) -> None:
    spec = _spec("gemma4_text-tiny.json")
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(spec, **change))


def test_gemma3n_maps_to_its_graph() -> None:
    fam = family_of(_spec("gemma3n_text-tiny.json"))
    assert isinstance(fam, Gemma3n) and (fam.streams, fam.R, fam.sparse) == (3, 4, 2)
    # the first two layers' gates sparse (lower case), layers 2-3 store, 4-5 reuse K and V
    assert fam.letters() == "sfABXY"
    untied = family_of(_spec("gemma3n_text-untied.json"))
    assert isinstance(untied, Gemma3n) and untied.letters() == "SSFS" and not untied.tied


@pytest.mark.parametrize("change, why", [
    (dict(laurel_rank=0), "no LAuReL"),
    (dict(altup_inputs=0), "no AltUp"),
    (dict(value_norm=False), "no v_norm"),
    (dict(global_head_dim=32), "Gemma 4's full-layer head dim"),
    (dict(kv_shared_wide_ffn=True), "Gemma 4's double-wide MLP"),
    (dict(sandwich_norm=False), "two norms a layer"),
])
def test_other_gemma3n_like_layouts_are_refused(change: dict, why: str) -> None:
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(_spec("gemma3n_text-tiny.json"), **change))


def test_unified_has_no_per_layer_inputs() -> None:
    spec = _spec("gemma4_unified_text-tiny.json")
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(spec, per_layer_input=8, per_layer_vocab=100))


# -- the compiled path on random configurations ----------------------------------------------
def _draw(rng: random.Random) -> tuple[Gemma4, Run]:
    """A Gemma 4 or Gemma 3n with sizes drawn freely (B = 1, T = 1, one layer, one K/V
    head, head dims past 256), mixed or uniform layer kinds, K/V sharing, per-layer inputs
    or none, experts or none; any dtype, device, attention, LoRA, recomputation."""
    L = rng.choice((1, 2, 3, 5, 7))
    kinds = rng.choice(("F", "".join(rng.choice("SF") for _ in range(L - 1)) + "F"))
    full = kinds * L if len(kinds) == 1 else kinds
    shared = 0
    for n in range(L - 1, 0, -1):  # the most shared layers whose kinds an earlier one has
        if rng.random() < 0.5 and set(full[:L - n]) >= set(full[L - n:]):
            shared = n
            break
    Hkv, G, Hg = rng.choice((1, 2)), rng.choice((1, 2, 4)), rng.choice((1, 2))
    ple, experts = rng.random() < 0.6, rng.random() < 0.4
    fam = Gemma4(V=rng.randint(5, 60), E=rng.randint(1, 48), H=Hkv * G * Hg, Hkv=Hkv * Hg,
                 dh=rng.choice((2, 8, 10)), F=rng.randint(1, 40), L=L,
                 tied=rng.random() < 0.5, bias=rng.random() < 0.3,
                 attention_dropout=rng.choice((0.0, 0.0, 0.1)), sandwich=True,
                 qk_norm=True, rope_per_kind=True,
                 final_softcap=rng.choice((0.0, 30.0)), window=rng.choice((1, 4, 8, 40)),
                 kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                 dg=rng.choice((4, 16, 264)), Hg=Hg, k_eq_v=rng.random() < 0.5,
                 shared=shared, wide=bool(shared) and rng.random() < 0.5, ple=ple,
                 Ep=rng.randint(1, 9) if ple else 1, Vp=rng.randint(5, 30) if ple else 1,
                 experts=experts, X=rng.choice((1, 3, 4)) if experts else 1,
                 K=1, Fe=rng.randint(1, 12) if experts else 1, grouped=rng.random() < 0.5)
    if experts:
        fam = replace(fam, K=rng.randint(1, fam.X))
    if rng.random() < 0.35:  # Gemma 3n: one head dim, per-layer inputs, no experts
        fam = Gemma3n(**{**{f.name: getattr(fam, f.name) for f in fields(Gemma4)},
                         "dg": fam.dh, "Hg": fam.Hkv, "H": fam.Hkv * G, "k_eq_v": False,
                         "wide": False, "ple": True, "Ep": rng.randint(1, 9),
                         "Vp": rng.randint(5, 30), "experts": False, "X": 1, "K": 1,
                         "Fe": 1}, streams=rng.choice((2, 3)), R=rng.randint(1, 6),
                      sparse=rng.randint(0, L))
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.4:
        # (one target that every layout has: peft refuses targets that match nothing)
        targets = [rng.choice(("q_proj", "o_proj", "down_proj", "all-linear")),
                   *rng.sample(("k_proj", "v_proj", "per_layer_input_gate", "proj",
                                "linear_left", "modality_router", "correction_coefs"),
                               rng.choice((0, 1)))]
        lora = Lora(rng.choice((1, 8)), frozenset(targets), rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 33)), dtype, device,
                    rng.choice(("eager", "sdpa")),
                    autocast=BF16 if device == "cuda" and dtype == F32 and rng.random() < 0.5
                    else None, use_cache=rng.random() < 0.2, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_configurations() -> None:
    assert cache_hits_on_random_draws(_draw, 20261128, 40) >= 8
