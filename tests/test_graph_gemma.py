"""The op graph's Gemma family (transformer_calc/graph/families/gemma.py: Gemma, Gemma 2,
Gemma 3 text, VaultGemma), which memory_report reads for those model types: against every
measured CPU row of its six configs, to the byte, and beside the rules
(activation_breakdown, lora_activations), with each difference between the two explained.

Fixtures (read, not changed): the rows of gemma-gqa, gemma2-bias-untied, defaults-gemma2,
gemma3_text-layer-types, defaults-gemma3_text and vaultgemma-tiny in
tests/data/activations_*.jsonl (full training and peft LoRA, eager and SDPA where the class
has it, fp32 and bf16), and tests/data/activations_gemma_sliding_window_cpu.jsonl (Gemma 3's
sliding layers at T = 7 and 8 around their window of 8: `python tools/measure_activations_hf.py
tests/data/hf/variants/gemma3_text-layer-types.json -B 2 -T 7`, then `-T 8`), all measured by
tools/measure_activations_hf.py: torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, use_cache=False, each storage still held at the end of the forward once,
parameters and buffers excluded.

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
from test_graph import _row_settings, _rules_report

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import OUTPUTS, evaluate_fast
from transformer_calc.graph.families.gemma import Gemma
from transformer_calc.graph.names import by_name, component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.presets import load_model
from transformer_calc.spec import ModelSpec

CONFIGS = ("gemma-gqa.json", "gemma2-bias-untied.json", "defaults-gemma2.json",
           "gemma3_text-layer-types.json", "defaults-gemma3_text.json", "vaultgemma-tiny.json")


def _rows() -> list[dict]:
    return measured_rows(CONFIGS)


ROWS = _rows()


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_the_four_model_types() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    full = [r for r in ROWS if not r.get("lora")]
    # (8 of the LoRA rows adapt the LM head too: activations_lora_head_cpu.jsonl)
    assert len(full) == 8 + 4 + 4 + 4 + 8 and len(ROWS) - len(full) == 53 + 8
    # SDPA only where the class has it (Gemma 2 and VaultGemma are eager-only: skipped rows)
    assert {(r["config"], r["attention"]) for r in ROWS} >= {
        ("gemma-gqa.json", "sdpa"), ("gemma3_text-layer-types.json", "sdpa")}
    assert not any(r["attention"] == "sdpa" for r in ROWS
                   if r["config"] in ("gemma2-bias-untied.json", "vaultgemma-tiny.json"))
    assert {r["lora"][1] for r in ROWS if r.get("lora")} == {
        "all-linear", "q_proj,v_proj", "o_proj,down_proj", "gate_proj,up_proj,down_proj",
        "q_proj,k_proj,v_proj,o_proj", "q_proj,v_proj,lm_head"}


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows as the trace names them), each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, family_of(spec_of(row["config"])), row_run(row), spec_of(row["config"])))


# -- where the rules differ, name by name (the graph equals the measurement on every row) -----
def _layer_group(fam: Gemma, i: int) -> str:
    """The name prefix of layer i's rows: the layer plan's group in a model of mixed kinds."""
    if len(set(fam.kinds)) == 1:
        return "decoder."
    return "decoder.sliding." if fam.kinds[i] == "S" else "decoder.full."


def _explained(row: dict, fam: Gemma, name: str, diff: int) -> bool:
    """Whether the graph's bytes under `name` less the rules' are a difference this family
    explains (each checked to the byte)."""
    itemsize = 4 if row["dtype"] == "fp32" else 2
    B, T = row["B"], row["T"]
    if name.endswith(".one_plus_weight"):
        # GemmaRMSNorm's output * (1.0 + weight.float()) keeps the fp32 (1 + w), of the norm's
        # width, wherever its input needs a gradient; the rules have no row for it
        width = fam.dh if name.rsplit(".", 2)[-2] in ("q_norm", "k_norm") else fam.E
        layers = 1 if name.startswith("decoder.final_norm.") else fam.L
        return diff % (width * 4) == 0 and 1 <= diff // (width * 4) <= layers
    if name == "loss.total_weight":  # nll_loss's 0-d total_weight; no rule
        return diff == 4
    if name == "loss.targets":  # B = 1: labels[..., 1:].contiguous() views the padded labels
        return diff == (8 if B == 1 else 0)
    if name == "rope.cos_sin":
        # Gemma 3: a cos/sin pair per layer type in use (local and global RoPE); the rules
        # count one pair
        return diff == (2 * T * fam.dh * itemsize if fam.rope_per_kind
                        and len(set(fam.kinds)) > 1 else 0)
    return diff == _frozen_first_qk_norm(row, fam, name)


def _frozen_first_qk_norm(row: dict, fam: Gemma, name: str) -> int:
    """Gemma 3 under LoRA on attention projections but not this one: the first layer's
    q_norm (k_norm) normalises a frozen projection of a frozen input and keeps nothing; the
    rules keep its fp32 input and 1/rms in every layer."""
    lora = row.get("lora")
    first = _layer_group(fam, 0)
    if not lora or not fam.qk_norm or not name.startswith(first + "attn."):
        return 0
    targets = set(lora[1].split(","))
    norm, _, part = name.removeprefix(first + "attn.").partition(".")
    attention = {"q_proj", "k_proj", "v_proj", "o_proj"}
    if norm not in ("q_norm", "k_norm") or "all-linear" in targets \
            or f"{norm[0]}_proj" in targets or not attention & targets:
        return 0
    heads = fam.H if norm == "q_norm" else fam.Hkv
    per_token = {"input_fp32": heads * fam.dh, "rstd": heads}.get(part, 0)
    return -per_token * row["B"] * row["T"] * 4


def _names_explained(row: dict) -> None:
    spec = spec_of(row["config"])
    fam = family_of(spec)
    assert isinstance(fam, Gemma)
    ours = by_name(component_rows(fam, row_run(row)))
    rules = by_name(_rules_report(spec, _row_settings(row)).activations.rows)
    for name in set(ours) | set(rules):
        diff = ours.get(name, 0) - rules.get(name, 0)
        assert not diff or _explained(row, fam, name, diff), (name, diff)


def test_component_names_match_activation_breakdown() -> None:
    every_row(ROWS, _names_explained)


def test_what_the_rules_missed_on_gemma3() -> None:
    # gemma3_text-layer-types, SDPA fp32, B 2, T 64 (measured 3,952,388): the rules are
    # 21,764 bytes short: the global layers' RoPE table (cos and sin, 2 · T · d_head · 4 =
    # 16,384), each GemmaRMSNorm's fp32 (1 + w) (4 layers × (4 norms × 256 + q and k norms
    # × 128) + the final norm's 256 = 5,376) and the loss's total_weight (4)
    row = next(r for r in ROWS if r["config"] == "gemma3_text-layer-types.json"
               and r["attention"] == "sdpa" and r["dtype"] == "fp32" and not r.get("lora")
               and r["T"] == 64)
    spec = _spec(row["config"])
    rules = _rules_report(spec, _row_settings(row)).activations.total
    assert row["measured_bytes"] - rules == 16_384 + 5_376 + 4 == 21_764
    assert evaluate(family_of(spec), row_run(row)).activation_bytes == row["measured_bytes"]


def test_sdpa_keeps_a_float_mask_in_sliding_layers_from_the_window_on() -> None:
    # sdpa_mask skips a sliding layer's mask while T < sliding_window (8); from T = 8 on it
    # is a (1, 1, T, T) bool mask expanded over B, which SDPA converts into a (B, 1, T, T)
    # mask of the query's dtype and keeps, and K and V go through repeat_kv (no GQA with a
    # mask): tests/data/activations_gemma_sliding_window_cpu.jsonl
    rows = [json.loads(line) for line in
            (DATA / "activations_gemma_sliding_window_cpu.jsonl").read_text().splitlines()]
    assert {(r["T"], r["attention"], r["dtype"]) for r in rows} == {
        (T, a, d) for T in (7, 8) for a in ("eager", "sdpa") for d in ("fp32", "bf16")}
    spec = _spec("gemma3_text-layer-types.json")
    fam = family_of(spec)
    for r in rows:
        got = evaluate(fam, row_run(r))
        assert got.activation_bytes == r["measured_bytes"], r
        masks = [s for s in got.saved if s.role.endswith(".attn_mask")]
        itemsize = 4 if r["dtype"] == "fp32" else 2
        if r["attention"] == "sdpa" and r["T"] >= fam.window:
            assert [s.nbytes for s in masks] == [2 * r["T"] ** 2 * itemsize] * 2
        else:
            assert not masks


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    fam = family_of(spec)
    # (T up to the sliding window: past it tcalc counts a sliding layer's attention over
    # the window's keys, where eager attention and SDPA's kernels multiply all T, as
    # torch.utils.flop_counter counts them)
    for attention in ("eager", "sdpa") if spec.sdpa_path else ("eager",):
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


def test_soft_capped_attention_is_eager_only() -> None:
    # Gemma2PreTrainedModel._supports_sdpa is False, and sdpa_attention_forward refuses a
    # softcap: no SDPA graph for it
    with pytest.raises(ValueError, match="eager only"):
        evaluate(family_of(_spec("gemma2-bias-untied.json")), Run(1, 8, F32, "cpu", "sdpa"))


# -- which specs are Gemma graphs ------------------------------------------------------------
def test_only_gemma_model_types_map_to_the_gemma_graph() -> None:
    mapped = {}
    for path in sorted((DATA / "hf").rglob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or "model_type" not in data:
            continue
        try:
            fam = family_of(spec_from_hf(data))
        except TcalcError:
            continue
        mapped.setdefault(type(fam).__name__, set()).add(data["model_type"])
    assert mapped["Gemma"] == {"gemma", "gemma2", "gemma3_text", "vaultgemma"}
    for preset, kinds in (("gemma-2b", "F"), ("gemma-2-9b", "SF" * 21),
                          ("gemma-3-1b", ("S" * 5 + "F") * 4 + "SS")):
        fam = family_of(load_model(preset))
        assert isinstance(fam, Gemma) and fam.kinds == kinds, preset


@pytest.mark.parametrize("change, why", [
    (dict(attn_softcapping=50.0), "Gemma 3's attention passes no softcap"),
    (dict(qk_norm="none", attn_softcapping=50.0), "soft-capped scores with an SDPA path"),
    (dict(sandwich_norm=False), "a per-head q/k norm without sandwich norms"),
    (dict(bias_q=True, bias_k=True, bias_v=True), "attention biases on q, k, v but not o"),
    (dict(bias_ffn_in=True), "an MLP bias"),
    (dict(qk_norm="width"), "a q/k norm over the width"),
    (dict(norm_fp32=False), "Llama's RMSNorm with a GELU MLP"),
    (dict(layer_attention="2C 2F", attention_chunk=8), "chunked attention"),
    (dict(rope_fp32=True), "a field the graph does not read"),
])
def test_other_gemma_like_layouts_are_refused(change: dict, why: str) -> None:
    # as a hand-written spec (no model_type): the layout alone decides
    spec = replace(_spec("gemma3_text-layer-types.json"), model_type="")
    assert isinstance(family_of(spec), Gemma)
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(spec, **change))


def test_a_config_is_the_gemma_of_its_model_type() -> None:
    # Gemma 3's layout read from a file of another model type (a Gemma-like forward the
    # graph does not transcribe) is refused; as a gemma2 file's layout it is Gemma 2's
    spec = _spec("gemma3_text-layer-types.json")
    for other in ("gemma2", "gemma3n_text", "llama"):
        with pytest.raises(TcalcError, match="no op graph"):
            family_of(replace(spec, model_type=other))
    fam = family_of(replace(spec, model_type="gemma2", qk_norm="none"))
    assert isinstance(fam, Gemma) and fam.sandwich and not fam.qk_norm


# -- the compiled path on random configurations ----------------------------------------------
def _draw(rng: random.Random) -> tuple[Gemma, Run]:
    """A Gemma of any variant with sizes drawn freely (the 0/1 edge cases: B = 1, T = 1, one
    layer, one head or K/V head, head dims past 256), with mixed or uniform layer kinds and
    a window below, at or above T; any dtype, device, attention, LoRA, recomputation."""
    variant = rng.choice(("gemma", "gemma2", "gemma3", "vaultgemma"))
    L = rng.choice((1, 2, 3, 5, 7))
    kinds = "F"
    if variant in ("gemma2", "gemma3"):
        kinds = rng.choice(("F", "S", "".join(rng.choice("SF") for _ in range(L))))
    Hkv, G = rng.choice((1, 2)), rng.choice((1, 2, 4))
    capped = variant in ("gemma2", "vaultgemma")
    fam = Gemma(V=rng.randint(5, 60), E=rng.randint(1, 48), H=Hkv * G, Hkv=Hkv,
                dh=rng.choice((2, 8, 10, 264)), F=rng.randint(1, 40), L=L,
                tied=rng.random() < 0.5, bias=rng.random() < 0.3,
                attention_dropout=rng.choice((0.0, 0.0, 0.1)),
                sandwich=variant in ("gemma2", "gemma3"),
                ffn_norm="pre_feedforward_layernorm" if variant == "vaultgemma"
                else "post_attention_layernorm",
                qk_norm=variant == "gemma3", rope_per_kind=variant == "gemma3",
                attn_softcap=50.0 if capped else 0.0,
                final_softcap=rng.choice((0.0, 30.0)) if variant != "gemma" else 0.0,
                window=rng.choice((1, 4, 8, 40)), kinds=kinds if len(set(kinds)) > 1
                else kinds[0])
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.4:
        targets = rng.sample(("q_proj", "k_proj", "v_proj", "o_proj", "down_proj",
                              "all-linear"), rng.choice((1, 2)))
        lora = Lora(rng.choice((1, 8)), frozenset(targets), rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 33)), dtype, device,
                    "eager" if capped else rng.choice(("eager", "sdpa")),
                    autocast=BF16 if device == "cuda" and dtype == F32 and rng.random() < 0.5
                    else None, use_cache=rng.random() < 0.2, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_gemma_configurations() -> None:
    assert cache_hits_on_random_draws(_draw, 20261127, 40) >= 15


def test_mixed_layers_compile_from_a_few_traced_ones() -> None:
    # Gemma 2 9B: 42 layers alternating sliding and full; the structure traces layers 0-2
    # and replays layer 1 (full) for the 20 full layers after it and layer 2 (sliding) for
    # the 19 sliding ones: under full recomputation each replay keeps its own input (made
    # in the layer before the one replayed)
    fam = family_of(load_model("gemma-2-9b"))
    run = Run(1, 128, BF16, "cuda", "eager", recompute="full")
    st = evaluate_fast(fam, run).structure
    assert {r[0] for r in st.rows if " [x " in r[0]} == {
        "model.layers.0 [x (20)]", "model.layers.1 [x (19)]"}
    for k in OUTPUTS:
        assert getattr(evaluate_fast(fam, run), k) == getattr(evaluate(fam, run), k)


def test_tcalc_memory_reads_the_graph_for_a_gemma_preset() -> None:
    spec = load_model("gemma-3-1b")
    s = Settings(precision="bf16", batch_size=2, seq_len=1024, attention="sdpa",
                 device="cuda")
    report = memory_report(spec, s)
    rows = component_rows(family_of(spec), Run(2, 1024, BF16, "cuda", "sdpa",
                                                use_cache=s.cache_in_training))
    assert report.activations.rows == tuple(r[:3] + ("",) + r[4:] for r in rows)
