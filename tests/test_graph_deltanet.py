"""The op graph's Gated DeltaNet hybrids (transformer_calc/graph/families/qwen3_next.py:
Qwen3-Next, Qwen3.5 and Qwen3.5-MoE as transformers 5.23's torch fallbacks run them on the
CPU) against every measured CPU row of their configs, to the byte.

Fixtures (torch 2.13 CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks, each storage
still held at the end of the forward once, parameters excluded; written by
tools/measure_activations_hf.py, its docstring has the commands):
- tests/data/activations_mixers_cpu.jsonl: the bytes first saved inside the Gated DeltaNet
  modules (`--mixers`) of qwen3_5_text-mixer.json and qwen3_next-tiny.json, B 1 T 64,
  B 2 T 128, B 1 T 200 (one, two and four chunks of 64, the last padded), fp32 and bf16;
- the whole model's rows, eager and SDPA, fp32 and bf16, B 2 T 64: qwen3_next-tiny.json in
  activations_qwen2_moe_qwen3_next_cpu.jsonl (full training) and with peft's LoRA in
  activations_lora_moe_hybrid_targets_cpu.jsonl (q_proj,v_proj; shared_expert_gate) and
  activations_lora_survey_{qv,attn,mlp,all_linear}_cpu.jsonl; qwen3_5_text-tiny.json and
  qwen3_5_text-mixer.json with LoRA in those files; qwen3_5_moe_text-attn.json (attention
  layers only, experts in each) in activations_deberta_v2_sweep_cpu.jsonl (full training,
  B 1 and 2) and with LoRA in the survey files.
- tests/data/frozen_parts_gated_deltanet_activations_cpu.jsonl: --freeze (tcalc's parts:
  the Gated DeltaNet's linear_attn is a mixer, the gated attention attention), written by
      python tools/measure_activations_hf.py --freeze PARTS \
          tests/data/hf/variants/{qwen3_next-tiny,qwen3_5_text-tiny}.json
      # PARTS: mixers; attention
      python tools/measure_activations_hf.py --freeze mixers -B 1 -T 200 \
          tests/data/hf/variants/qwen3_5_text-mixer.json
  (its tcalc_bytes column is what tcalc printed on the day and is not read here).
The per-tensor rules (memory_report without the graph, on main before this family) on the
whole-model rows: Qwen3-Next −2,564 … +85,324 bytes (−0.11 … +5.32 %), Qwen3.5 −308 …
+37,612 (−0.09 … +3.03 %), Qwen3.5-MoE −10,692 … +26,236 (−0.64 … +1.72 %); their mixer
rows (tools/measure_activations_hf.py's mixer_rows) met the 12 mixers' rows already. The
graph meets every row.
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
    row_id,
    row_run,
    row_settings,
    spec_of,
)

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import TcalcError
from transformer_calc.graph import BF16, DTYPES, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.qwen3_next import Qwen3Next
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("qwen3_next-tiny.json", "qwen3_5_text-tiny.json", "qwen3_5_text-mixer.json",
           "qwen3_5_moe_text-attn.json")
ROWS = measured_rows(CONFIGS)
MIXER_ROWS = [r for r in ROWS if r["file"] == "activations_mixers_cpu.jsonl"]
MODEL_ROWS = [r for r in ROWS if r["file"] != "activations_mixers_cpu.jsonl"]


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _family(config: str) -> Qwen3Next:
    fam = family_of(_spec(config))
    assert isinstance(fam, Qwen3Next)
    return fam


def test_the_rows_cover_the_types_dtypes_lora_and_the_chunks() -> None:
    per_type = {}
    for r in ROWS:
        t = _spec(r["config"]).model_type
        per_type[t] = per_type.get(t, 0) + 1
    assert per_type == {"qwen3_next": 34, "qwen3_5_text": 34, "qwen3_5_moe_text": 24}
    assert len(MIXER_ROWS) == 12
    assert {r["lora"][1] for r in MODEL_ROWS if r.get("lora")} == {
        "q_proj,v_proj", "shared_expert_gate", "q_proj,k_proj,v_proj,o_proj",
        "gate_proj,up_proj,down_proj", "all-linear"}
    assert {(r["dtype"], r.get("attention")) for r in MODEL_ROWS} == {
        (d, a) for d in ("fp32", "bf16") for a in ("eager", "sdpa")}
    # one chunk, two, and four with the last padded
    assert {-(-r["T"] // 64) for r in MIXER_ROWS} == {1, 2, 4}


def test_mixer_bytes_equal_the_measurement() -> None:
    every_row(MIXER_ROWS, _mixer_bytes)


def _mixer_bytes(row: dict) -> None:
    # what the measurement counts: the storages first saved while a Gated DeltaNet runs
    result = evaluate(_family(row["config"]), Run(row["B"], row["T"], DTYPES[row["dtype"]],
                                                  "cpu", "eager"))
    inside = sum(s.nbytes for s in result.saved if ".linear_attn" in s.scope)
    assert inside == row["measured_bytes"]


# peft 0.21's conversion of Qwen3-Next (the qwen2_moe pattern, _convert_peft_config_moe):
# gate_proj, up_proj and down_proj move to target_parameters naming the experts' fused
# weights (the dense and shared experts' linears are then not adapted), all-linear's router
# too; the rest stay module names
_EXPERTS = frozenset(("gate_up_proj", "down_proj"))
CONVERTED = {"gate_proj,up_proj,down_proj": (frozenset(), _EXPERTS),
             "all-linear": (frozenset(("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkvz",
                                       "in_proj_ba", "out_proj", "shared_expert_gate")),
                            _EXPERTS | {"gate.weight"})}


def _run(row: dict) -> Run:
    run = row_run(row)
    if run.lora is not None and row["config"] == "qwen3_next-tiny.json" \
            and row["lora"][1] in CONVERTED:
        targets, parameters = CONVERTED[row["lora"][1]]
        run = replace(run, lora=replace(run.lora, targets=targets, parameters=parameters))
    return run


def test_saved_bytes_equal_the_measurement() -> None:
    # the trace and peft's trainable count (the experts as the row ran them: eager, the
    # tool's default)
    every_row(MODEL_ROWS, lambda row: check_measured(row, replace(
        _family(row["config"]), grouped=row.get("experts") == "grouped_mm"), _run(row),
        compiled=None))


# memory_report end to end (peft's targets from tcalc's roles, the compiled structure):
# one row per config and LoRA targets (each compiles a structure of its own)
REPORTED = list({(r["config"], str(r.get("lora"))): r for r in MODEL_ROWS}.values())
REPORTED = [r for r in REPORTED if r["config"] != "qwen3_5_text-tiny.json"]


def test_memory_report_reads_the_graph() -> None:
    every_row(REPORTED, _reported)


def _reported(row: dict) -> None:
    report = memory_report(_spec(row["config"]), row_settings(row))
    assert report.activations.total == row["measured_bytes"]
    if not row.get("lora"):  # the Gated DeltaNet's rows named as a mixer's
        assert any(r[0].startswith("decoder.mixer.") for r in report.activations.rows) == (
            any(k in "cd" for k in _family(row["config"]).kinds))


FROZEN = [json.loads(line) for line in (
    DATA / "frozen_parts_gated_deltanet_activations_cpu.jsonl").read_text().splitlines()]


def test_frozen_parts_equal_the_measurement() -> None:
    every_row(FROZEN, _frozen_parts, ids=lambda r: row_id(r) + "-" + "+".join(r["freeze"]))


def _frozen_parts(row: dict) -> None:
    fam = replace(_family(row["config"]), grouped=row.get("experts") == "grouped_mm")
    result = evaluate(fam, replace(row_run(row), frozen=frozenset(row["freeze"])))
    assert result.activation_bytes == row["measured_bytes"]
    assert result.trainable_params == row["trainable"][0]


def test_memory_report_reads_frozen_parts() -> None:
    # --freeze end to end: the graph's trainable parameters agree with count_params' (the
    # Gated DeltaNet's linear_attn read as a mixer, graph/parts.py), so the graph answers
    row = FROZEN[0]
    s = row_settings(row)
    assert s.freeze == tuple(row["freeze"])
    assert memory_report(_spec(row["config"]), s).activations.total == row["measured_bytes"]


def test_qwen3_next_lora_as_peft_converts_it() -> None:
    # peft 0.21 converts Qwen3-Next as the qwen2_moe pattern: gate_proj, up_proj and
    # down_proj become the experts' (and all-linear the router's) target parameters; the
    # Gated DeltaNet's in_proj_qkvz and in_proj_ba are tcalc's in_proj role
    spec = _spec("qwen3_next-tiny.json")
    fam = _family("qwen3_next-tiny.json")
    s = row_settings({"dtype": "fp32", "B": 2, "T": 64, "attention": "eager",
                   "lora": [8, "all-linear", 0.0]})
    lora = graph_costs._lora(fam, s, frozenset(("q", "k", "v", "o", "in_proj", "out_proj",
                                                "shared_gate", "router", "experts.gate_up",
                                                "experts.out")), spec.peft_moe)
    assert lora is not None and lora.targets == {
        "q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkvz", "in_proj_ba", "out_proj",
        "shared_expert_gate"}
    assert lora.parameters == {"gate.weight", "gate_up_proj", "down_proj"}
    # Qwen3.5-MoE is not converted: gate_proj, up_proj, down_proj name its shared expert's
    moe = _family("qwen3_5_moe_text-attn.json")
    s = replace(s, lora_targets=("gate_proj", "up_proj"))
    lora = graph_costs._lora(moe, s, frozenset(("shared",)), "none")
    assert lora is not None and lora.targets == {"gate_proj", "up_proj"} and not lora.parameters


# torch.utils.flop_counter's forward FLOPs at B = 1 (the convolutions and the delta rule's
# matmuls included): tools/reference_flops.py --seq-len T over the configs (torch 2.13,
# transformers 5.23, eager experts)
FLOPS = {("qwen3_next-tiny.json", 37): 7_207_168, ("qwen3_next-tiny.json", 128): 30_057_408,
         ("qwen3_next-tiny.json", 200): 54_838_720,
         ("qwen3_5_text-tiny.json", 37): 1_405_408, ("qwen3_5_text-tiny.json", 200): 8_688_000,
         ("qwen3_5_text-mixer.json", 64): 6_342_912,
         ("qwen3_5_text-mixer.json", 128): 12_683_520,
         ("qwen3_5_text-mixer.json", 200): 21_135_616,
         ("qwen3_5_moe_text-attn.json", 37): 8_321_152,
         ("qwen3_5_moe_text-attn.json", 200): 70_016_000}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    r = evaluate(_family(config), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(_spec(config)).total
    assert r.forward_flops == FLOPS[config, T]


def test_the_loop_keeps_each_chunks_state() -> None:
    # the zero state and each state a chunk passes on (the last chunk's update is dead: its
    # state is dropped, what only it kept freed): one (B, Hv, Dk, Dv) fp32 state per chunk
    fam = _family("qwen3_5_text-mixer.json")
    B, Hv, Dk, Dv = 2, fam.Hk * fam.Hr, fam.Dk, fam.Dv
    state = B * Hv * Dk * Dv * 4

    def states(T: int) -> int:
        r = evaluate(fam, Run(B, T, F32, "cpu", "eager"))
        total = 0
        for s in r.saved:  # (B, Hv, Dk, Dv) sized, the loop's repeated ones times Tq − 2
            sym = {x for m, _ in s.storage.numel.poly.terms for x in m}
            if ".linear_attn" in s.scope and {"Dk", "Dv"} <= sym and not sym & {"T", "Q"}:
                total += s.nbytes // state
        return total

    assert [states(64 * n) for n in (1, 2, 3, 5)] == [1, 2, 3, 5]


def test_other_layouts_are_refused() -> None:
    next_spec, text, moe = (_spec(c) for c in ("qwen3_next-tiny.json", "qwen3_5_text-tiny.json",
                                               "qwen3_5_moe_text-attn.json"))
    for spec, change in ((next_spec, {"bias_q": True}), (next_spec, {"attn_gate": "none"}),
                         (next_spec, {"ssm_chunk": 32}), (next_spec, {"ssm_conv_bias": True}),
                         (next_spec, {"mixer": "mamba2"}), (next_spec, {"ssm_in_projs": 4}),
                         (next_spec, {"dropout": 0.1}), (next_spec, {"router_topk": "renorm"}),
                         (next_spec, {"router_topk": "none"}),
                         (next_spec, {"n_shared_experts": 0}),
                         (text, {"rotary_fraction": 1.0}), (text, {"qk_norm": "none"}),
                         (text, {"norm_fp32": False}), (moe, {"ssm_dt_norms": True})):
        with pytest.raises(TcalcError):
            family_of(replace(spec, **change))  # type: ignore[arg-type]
    fam = _family("qwen3_next-tiny.json")
    assert (fam.kinds, fam.Hk, fam.Hr, fam.Dk, fam.Dv, fam.Dr, fam.split_proj) == (
        "abd", 1, 4, 4, 8, 4, False)
    assert _family("qwen3_5_text-tiny.json").kinds == "ac"
    assert _family("qwen3_5_moe_text-attn.json").kinds == "bbb"


def test_cuda_keeps_the_rules_and_cpu_autocast_reads_the_graph() -> None:
    # on CUDA transformers runs fla's chunk_gated_delta_rule and causal-conv1d where
    # installed (not modelled): the rules answer; an attention-only Qwen3.5-MoE runs none.
    # CPU autocast: tests/test_graph_autocast.py
    ask = graph_costs.graph_activations
    cpu = Settings(precision="bf16", batch_size=2, seq_len=64, attention="sdpa",
                   device="cpu")
    for config, on_cuda in (("qwen3_next-tiny.json", False), ("qwen3_5_text-tiny.json", False),
                            ("qwen3_5_moe_text-attn.json", True)):
        spec = _spec(config)
        assert ask(spec, cpu, 64, amp=False, amp16=False, adapted_roles=None) is not None
        assert ask(spec, cpu, 64, amp=True, amp16=False, adapted_roles=None) is not None
        for amp in (False, True):
            cuda = ask(spec, replace(cpu, device="cuda"), 64, amp=amp, amp16=False,
                       adapted_roles=None)
            assert (cuda is not None) == on_cuda


def _draw(rng: random.Random, s: dict) -> tuple[Qwen3Next, Run]:
    """Sizes drawn freely around a structure, with the edge cases: one key head (views
    rather than copies), one value head per key head (no repeat_interleave), chunks of 1,
    T = 1, B = 1, one K/V head."""
    Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
    dh = rng.choice((4, 8))
    X = rng.choice((2, 4))
    fam = Qwen3Next(V=rng.randint(3, 40), E=rng.randint(1, 24), H=Hkv * G, Hkv=Hkv, dh=dh,
                    F=rng.randint(1, 20), L=len(s["kinds"]), X=X, K=rng.randint(1, X),
                    Fe=rng.randint(1, 9), Fs=rng.randint(1, 9), router="qwen",
                    shared_expert=True, grouped=s["grouped"], Hk=rng.choice((1, 2)),
                    Hr=rng.choice((1, 2)), Dk=rng.choice((1, 4)), Dv=rng.choice((1, 3)),
                    Kc=rng.choice((1, 4)), Q=rng.choice((1, 4, 8)), Dr=dh // 2,
                    kinds=s["kinds"], split_proj=s["split"], batch_rope=s["split"],
                    tied=s["tied"])
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 17)), s["dtype"], "cpu",
              s["attention"], lora=s["lora"], recompute=s["recompute"])
    return fam, run


def test_compiled_equals_traced_on_random_configurations() -> None:
    # the compiled structures (the chunks as Tq, the loop's repeated chunk as Tq − 2, the
    # padding Tq·Q − T; the layer kinds, attention, LoRA, experts) against the reference
    # trace on every output and row name, and other sizes from the cache: 8 draws
    rng = random.Random(20261128)  # noqa: S311 (not cryptography)
    loras = (None, Lora(4, frozenset(("q_proj", "v_proj"))),
             Lora(4, frozenset(("in_proj_qkvz", "out_proj", "shared_expert_gate")), 0.05),
             Lora(4, frozenset(("all-linear",))),
             Lora(4, frozenset(("q_proj",)), 0.0, None,
                  frozenset(("gate.weight", "gate_up_proj", "down_proj"))))
    structures = [{"kinds": rng.choice(("ad", "bc", "c", "d")),
                   "split": rng.random() < 0.5, "tied": rng.random() < 0.5,
                   "grouped": rng.random() < 0.3, "dtype": rng.choice((F32, BF16, F16)),
                   "attention": rng.choice(("eager", "sdpa")), "lora": lora,
                   "recompute": rng.choice(("none", "full"))}
                  for lora in loras]
    hits = cache_hits_on_random_draws(lambda r: _draw(r, r.choice(structures)), 20261128, 8)
    assert hits >= 1
