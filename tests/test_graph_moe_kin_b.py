"""The DeepSeek-V3-routed decoders on the op graph against every measured CPU row of their tiny
configs, to the byte: GLM-4.5 (glm4_moe) and Solar Open (solar_open) as families/moe.py's
graph (graph/routed.py maps them), GLM-4.7-Flash (glm4_moe_lite) as the latent-attention graph
(families/mla.py: DeepSeek-V3's modelling file under another name), K-EXAONE (exaone_moe),
Kolibri1 (kolibri1), AFMoE (afmoe) and Laguna (laguna) as families/routed_moe.py's.

Fixture: tests/data/activations_moe_kin_b_cpu.jsonl (torch 2.13 CPU, transformers 5.23, peft
0.21.2, saved_tensors_hooks, each storage still held at the end of the forward once,
parameters excluded; transformers' eager experts, or grouped_mm where the row says), written
by

    V=tests/data/hf/variants
    C="$V/glm4_moe-tiny.json $V/solar_open-tiny.json $V/glm4_moe_lite-tiny.json \\
       $V/exaone_moe-tiny.json $V/afmoe-tiny.json $V/kolibri1-tiny.json"
    python tools/measure_activations_hf.py $C              # eager and SDPA, fp32 and bf16
    python tools/measure_activations_hf.py --lora 8 $C     # peft's LoRA, all-linear
    python tools/measure_activations_hf.py --autocast $C   # fp32 under CPU autocast to bf16
    python tools/measure_activations_hf.py [--lora 8] $V/glm4_moe-odd-rotary.json
    python tools/measure_activations_hf.py [--lora 8 | --autocast] $V/laguna-tiny.json
    python tools/measure_activations_hf.py --experts grouped_mm $C $V/laguna-tiny.json

(B 2, T 64; OMP_NUM_THREADS=1; their tcalc_bytes dropped: the graph answers them). peft 0.21
converts the qwen2_moe layouts' routers and experts (all but Kolibri1's and Laguna's) into
ParamWrappers (trainable counts in the rows); memory_report builds that run itself, and the
tests read the family and run it evaluates. The per-tensor rules (memory.activation_breakdown and
lora_activations) on these 106 rows: -0.94 ... -0.21 % in full training (either experts
implementation), -0.90 ... +1.71 % under LoRA (AFMoE's router adapters), -15.2 ... -3.9 %
under autocast.

AFMoE's router is zero-initialised (AfmoePreTrainedModel._init_weights): every token's scores
tie, and its top-k takes experts 0 and 1 in every layer of the measured model. Under autocast
the eager loop casts each hit expert's weight slices anew; the graph takes every expert as hit
(moe._expert_slice), so on those two rows it counts the six idle experts' slices more.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import (
    cache_hits_on_random_draws,
    check_measured,
    every_row,
    measured_rows,
    row_settings,
    spec_of,
)

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import SpecError, TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import evaluate_fast
from transformer_calc.graph.families.mla import MlaMoe
from transformer_calc.graph.families.moe import Moe
from transformer_calc.graph.families.routed_moe import RoutedMoe
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params

CONFIGS = ("glm4_moe-tiny.json", "glm4_moe-odd-rotary.json", "solar_open-tiny.json",
           "glm4_moe_lite-tiny.json", "exaone_moe-tiny.json", "afmoe-tiny.json",
           "kolibri1-tiny.json", "laguna-tiny.json")
ROWS = measured_rows(CONFIGS)


class _Chosen(Exception):
    """memory_report's graph run, caught where the graph would be evaluated."""


def _chosen(spec, settings: Settings, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The family and Run memory_report answers with from the graph (None: the rules)."""

    def caught(_spec, fam, run, *_):  # type: ignore[no-untyped-def]
        raise _Chosen(fam, run)

    with monkeypatch.context() as patch:
        patch.setattr(graph_costs, "_breakdown", caught)
        try:
            memory_report(spec, settings)
        except _Chosen as e:
            return e.args
    return None, None


def _settings(row: dict) -> Settings:
    settings = row_settings(row)
    # (an fp32 model under autocast: tcalc's --mixed)
    return replace(settings, precision="bf16", mixed=True) if row.get("autocast") else settings


def _idle_expert_copies(row: dict) -> int:
    """AFMoE under autocast: the bf16 copies of the slices of the experts its zero-initialised
    router never picks (all but 2 of X), in each MoE layer (module docstring)."""
    if row["config"] != "afmoe-tiny.json" or not row.get("autocast"):
        return 0
    fam = family_of(spec_of(row["config"]))
    assert isinstance(fam, RoutedMoe)
    slices = (2 * fam.Fe * fam.E + fam.E * fam.Fe) * 2  # gate_up_proj[e], down_proj[e]
    return (fam.X - 2) * fam.pattern.count("E") * slices


def test_the_rows_cover_each_type() -> None:
    # four full-training rows (eager and SDPA, fp32 and bf16) with each experts
    # implementation, four LoRA all-linear and two under autocast per config
    # (glm4_moe-odd-rotary: eager experts, no autocast)
    for config in CONFIGS:
        rows = [r for r in ROWS if r["config"] == config]
        odd = config == "glm4_moe-odd-rotary.json"
        assert len(rows) == (8 if odd else 14)
        assert sum(bool(r["lora"]) for r in rows) == 4
        assert sum(r.get("autocast") == "bf16" for r in rows) == (0 if odd else 2)
        assert sum(r["experts"] == "grouped_mm" for r in rows) == (0 if odd else 4)


def test_the_graph_memory_report_runs_equals_every_row(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    # the family and run memory_report builds (peft's conversion included), traced: its
    # saved bytes (with autocast's weight copies: the measurement sees them) and peft's
    # trainable count (the compiled structure and the report: the rows below, and the
    # random draws' compiled == traced)
    def check(row: dict) -> None:
        fam, run = _chosen(spec_of(row["config"]), _settings(row), monkeypatch)
        assert fam is not None, "the rules answered"
        if row.get("autocast"):
            run = replace(run, dtype=F32)  # (the row's model is fp32)
        traced = evaluate(fam, run)
        copies = sum(s.nbytes for s in traced.saved if s.storage.kind == "weight_copy")
        assert traced.activation_bytes + copies == row["measured_bytes"] + \
            _idle_expert_copies(row)
        if row["lora"]:
            assert traced.trainable_params == row["trainable"][0]

    every_row(ROWS, check)


# per config, one LoRA row through memory_report and the compiled structure, its report rows
# named as the trace names them; one autocast row of each family's own router and experts
REPORTED = [next(r for r in ROWS if r["config"] == c and r["lora"]) for c in CONFIGS] + [
    next(r for r in ROWS if r["config"] == c and r.get("autocast"))
    for c in ("glm4_moe-tiny.json", "afmoe-tiny.json", "kolibri1-tiny.json",
              "laguna-tiny.json")]


def test_memory_report_reads_the_graph_to_the_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    def check(row: dict) -> None:
        spec = spec_of(row["config"])
        fam, run = _chosen(spec, _settings(row), monkeypatch)
        if row["lora"]:
            check_measured(row, fam, run, spec, report_rows="names")
            return
        run = replace(run, dtype=F32)
        fast = evaluate_fast(fam, run)
        want = row["measured_bytes"] + _idle_expert_copies(row)
        traced = evaluate(fam, run)
        copies = sum(s.nbytes for s in traced.saved if s.storage.kind == "weight_copy")
        assert fast.activation_bytes + copies == want
        assert memory_report(spec, _settings(row)).activations.total + copies == want

    every_row(REPORTED, check)


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    # parameters: count_params (pinned against transformers on the meta device); FLOPs:
    # count_flops per token at context T (T below every sliding window), the experts' over
    # the K·B·T routed slots
    spec = spec_of(config)
    for grouped in (False, True):
        fam = replace(family_of(spec), grouped=grouped)
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", "sdpa"))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


def _config(name: str) -> dict:
    return json.loads((DATA / "hf" / "variants" / name).read_text())


def test_the_types_map_to_their_graphs() -> None:
    glm, solar = family_of(spec_of("glm4_moe-tiny.json")), family_of(
        spec_of("solar_open-tiny.json"))
    assert type(glm) is Moe and type(solar) is Moe
    # partial_rotary_factor 0.5 of head_dim 16: the first 8 lanes rotated, the rest
    # concatenated after them; q, k and v biased (attention_bias)
    assert (glm.router, glm.partial_rotary, glm.dr, glm.pattern, glm.bias_q, glm.bias_o) == (
        "dots1", True, 8, "DEE", True, False)
    assert (solar.partial_rotary, solar.rope_concat, solar.pattern) == (False, False, "")
    assert isinstance(family_of(spec_of("glm4_moe_lite-tiny.json")), MlaMoe)
    exaone, afmoe, kolibri = (family_of(spec_of(f"{t}-tiny.json"))
                              for t in ("exaone_moe", "afmoe", "kolibri1"))
    assert isinstance(exaone, RoutedMoe) and isinstance(afmoe, RoutedMoe) \
        and isinstance(kolibri, RoutedMoe)
    # ExaoneMoeConfig's layer_types from sliding_window_pattern 4; AfmoeConfig's from
    # global_attn_every_n_layers 4; kolibri1-tiny's listed
    assert (exaone.kinds, exaone.window, exaone.pattern, exaone.qk_norm) == (
        "SSSN", 16, "DEEE", "head_t")
    assert (afmoe.kinds, afmoe.qk_norm, afmoe.norm_fp32, afmoe.output_gate, afmoe.Fs) == (
        "SSSN", "head", True, True, 64)
    assert (kolibri.kinds, kolibri.pattern, kolibri.norm_topk, kolibri.Fs) == (
        "SNS", "", True, 48)
    # Laguna: full layers rotating the first half of each head (rope_parameters'
    # full_attention partial_rotary_factor 0.5), sliding ones all of it; a gate per head
    laguna = family_of(spec_of("laguna-tiny.json"))
    assert isinstance(laguna, RoutedMoe)
    assert (laguna.kinds, laguna.dr, laguna.partial_rotary, laguna.gate_width, laguna.Fs,
            laguna.pattern, laguna.output_gate) == ("FSF", 8, True, "head", 48, "DEE", True)
    # glm4_moe-odd-rotary: int(16 · 0.5625) = 9 lanes, Glm4MoeRotaryEmbedding's table 10
    odd = family_of(spec_of("glm4_moe-odd-rotary.json"))
    assert (odd.dr, odd.qk_norm, odd.bias_q) == (10, "head", False)  # type: ignore[union-attr]


def test_the_class_defaults_read_their_layer_kinds() -> None:
    # without layer_types: ExaoneMoe every 4th layer full, Kolibri1 every 5th, AFMoE every
    # global_attn_every_n_layers-th; full layers without RoPE (N)
    exaone, kolibri, afmoe = (_config(f"{t}-tiny.json")
                              for t in ("exaone_moe", "kolibri1", "afmoe"))
    assert spec_from_hf({**exaone, "num_hidden_layers": 6,
                         "sliding_window_pattern": 3}).layer_attention == "2S 1N 2S 1N"
    del kolibri["layer_types"]
    assert spec_from_hf({**kolibri, "num_hidden_layers": 6}).layer_attention == "4S 1N 1S"
    assert spec_from_hf({**afmoe, "global_attn_every_n_layers": 2}).layer_attention == \
        "1S 1N 1S 1N"
    with pytest.raises(SpecError, match="sliding_window"):
        spec_from_hf({**exaone, "sliding_window": None})
    # with layer_types listed, a null window rotates every layer, unwindowed: the rules answer
    unwindowed = spec_from_hf({**exaone, "sliding_window": None,
                               "layer_types": ["sliding_attention"] * 4})
    assert (unwindowed.layer_attention, unwindowed.sliding_window) == ("4F", 0)
    with pytest.raises(TcalcError):
        family_of(unwindowed)


def test_laguna_reads_its_gate_rope_and_router() -> None:
    laguna = _config("laguna-tiny.json")
    assert spec_from_hf({**laguna, "gating": "per-element"}).attn_gate == "width"
    assert spec_from_hf({**laguna, "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 5e5,
                           "partial_rotary_factor": 0.25}}}).rotary_fraction == 0.25
    # the router's logit soft-capping: left to the rules (router_topk none), refused here
    capped = spec_from_hf({**laguna, "moe_router_logit_softcapping": 30.0})
    assert capped.router_topk == "none"
    with pytest.raises(TcalcError):
        family_of(capped)
    with pytest.raises(SpecError, match="rope_parameters"):
        spec_from_hf({**laguna, "rope_parameters": {"sliding_attention": {
            "rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}}})
    with pytest.raises(SpecError, match="gating"):
        spec_from_hf({**laguna, "gating": "per-token"})


def test_other_layouts_are_refused() -> None:
    glm = spec_of("glm4_moe-tiny.json")
    # Glm4MoeRotaryEmbedding's table: 2 · ceil(int(head_dim · factor) / 2) wide; 0.25 of
    # head_dim 16: 4 lanes rotated; 0.5625: int(9.0), its table 10 wide; 0.05: none left
    for fraction, dr in ((0.25, 4), (0.5625, 10)):
        assert family_of(replace(glm, rotary_fraction=fraction)).dr == dr  # type: ignore[union-attr]
    for base, changes in (
            (glm, ({"rotary_fraction": 0.05}, {"qk_norm": "width"}, {"bias_o": True},
                   {"router_fp32": False}, {"n_shared_experts": 0}, {"router_bias": True},
                   {"sliding_window": 8, "layer_attention": "1S 2F"}, {"rope_concat": False},
                   {"d_ff_shared": 8}, {"peft_moe": "none"})),
            (spec_of("solar_open-tiny.json"), ({"qk_norm": "head"}, {"rotary_fraction": 0.5})),
            (spec_of("exaone_moe-tiny.json"), ({"sandwich_norm": True}, {"layer_attention": "4F"},
                                               {"router_topk": "topk_sigmoid"})),
            (spec_of("kolibri1-tiny.json"), ({"layer_ffn": "1D 2E"}, {"norm_fp32": True},
                                             {"router_topk": "renorm"})),
            (spec_of("afmoe-tiny.json"), ({"attn_gate": "none"}, {"sandwich_norm": False},
                                          {"router_fp32": True}, {"rotary_fraction": 0.5})),
            (spec_of("laguna-tiny.json"), ({"attn_gate": "none"}, {"rope_concat": False},
                                           {"rotary_fraction": 0.05}, {"n_shared_experts": 2},
                                           {"layer_attention": "1F 1N 1F"}))):
        for change in changes:
            with pytest.raises(TcalcError):
                family_of(replace(base, **change))  # type: ignore[arg-type]


def test_kolibri1_renormalises_with_norm_topk_prob() -> None:
    # Kolibri1TopKRouter: router_scores / router_scores.sum(-1, keepdim=True), a new tensor,
    # keeps the sigmoid's output (also kept by sigmoid) and the sum, B·T · 4 bytes, per layer
    config = _config("kolibri1-tiny.json")
    on, off = spec_from_hf(config), spec_from_hf({**config, "norm_topk_prob": False})
    assert (on.router_topk, off.router_topk) == ("topk_sigmoid_renorm", "topk_sigmoid")
    run = Run(2, 64, F32, "cpu", "eager")
    diff = evaluate(family_of(on), run).activation_bytes - \
        evaluate(family_of(off), run).activation_bytes
    assert diff == 3 * 2 * 64 * 4


def _draw(rng):  # type: ignore[no-untyped-def]
    H = rng.choice((2, 4))
    Hkv = rng.choice([n for n in (1, 2, 4) if H % n == 0])
    dh = rng.choice((4, 8))
    X = rng.choice((2, 4))
    L = rng.choice((2, 3))
    ffn = "".join(rng.choice("DE") for _ in range(L - 1)) + "E"
    sizes = dict(V=rng.choice((16, 40)), E=H * dh, H=H, Hkv=Hkv, dh=dh, F=rng.choice((8, 12)),
                 L=L, X=X, K=rng.choice(range(1, X + 1)), Fe=rng.choice((4, 8)),
                 Fs=rng.choice((4, 12)), shared_experts=True, norm_topk=rng.random() < 0.5,
                 grouped=rng.random() < 0.5)
    if rng.random() < 0.4:
        dr = rng.choice([d for d in (2, 4, dh) if d <= dh])
        fam: Moe = Moe(**sizes, router="dots1", rope_concat=True, partial_rotary=dr < dh,
                       dr=dr if dr < dh else 0, pattern=ffn, bias_q=True, bias_k=True,
                       bias_v=True)
    else:
        model = rng.choice(("exaone_moe", "kolibri1", "afmoe", "laguna"))
        laguna = model == "laguna"
        kinds = "".join(rng.choice("FS" if laguna else "SN") for _ in range(L))
        dr = rng.choice([d for d in (2, 4, dh) if d <= dh])
        fam = RoutedMoe(**sizes, model=model, router="dots1" if model == "exaone_moe"
                        else model, window=rng.choice((3, 64)), kinds=kinds,
                        pattern=ffn.replace("D", "E") if model == "kolibri1" else ffn,
                        qk_norm="head" if model in ("afmoe", "laguna") else "head_t",
                        norm_fp32=model == "afmoe", rope_concat=laguna,
                        partial_rotary=laguna and dr < dh, dr=dr if laguna and dr < dh else 0,
                        gate_width=rng.choice(("head", "width")), bias_o=laguna)
    lora = Lora(8, frozenset(("all-linear",))) if rng.random() < 0.4 else None
    run = Run(rng.choice((1, 2)), rng.choice((5, 8)), rng.choice((F32, BF16)), "cpu",
              rng.choice(("eager", "sdpa")), use_cache=rng.random() < 0.2, lora=lora)
    return fam, run


def test_compiled_equals_traced_on_random_configurations() -> None:
    assert cache_hits_on_random_draws(_draw, 31, 6) > 0


@pytest.mark.parametrize(("config", "family"), [("glm4_moe-tiny.json", Moe),
                                                ("laguna-tiny.json", RoutedMoe)])
def test_the_narrowest_partial_rotary_maps(config: str, family: type) -> None:
    # a 4-wide head at partial_rotary_factor 0.5 rotates its first 2 lanes (one pair), the
    # fewest apply_rotary_pos_emb can rotate; transformers runs it as any other width
    data = json.loads((DATA / "hf" / "variants" / config).read_text()) | {"head_dim": 4}
    fam = family_of(spec_from_hf(data))
    assert isinstance(fam, family) and fam.dr == 2  # type: ignore[attr-defined]
