"""More mixture-of-experts decoders on the op graph: HY-V3 (hy_v3) and dots.llm1 (dots1) in
transformer_calc/graph/families/moe.py (DeepSeek-V3's fp32 sigmoid router with its top-k ranked
under autograd, ungated shared experts), Cohere 2 MoE (cohere2_moe: cohere.py's CohereMoe, a
softmax over the top-k logits), Beam (beam.py), GPT-OSS (gpt_oss.py), Flint (flint.py) and
GraniteMoeSWA (granitemoe_swa.py), against every measured CPU row of their configs, to the
byte.

Fixtures (read, not changed): the rows of hy_v3-tiny, dots1-tiny, cohere2_moe-tiny,
beam-tiny, gpt_oss-tied-nobias, flint-tiny and granitemoe_swa-tiny in
tests/data/activations_*_cpu.jsonl, measured by tools/measure_activations_hf.py (torch 2.13
CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks, each storage still held at the end
of the forward once, parameters excluded); rows without an "experts" key ran transformers'
eager experts, the others grouped_mm. The LoRA rows of dots1, cohere2_moe and beam naming
gate_proj/up_proj/down_proj (and all-linear) are converted by peft 0.21 (transformers'
qwen2_moe conversion pattern) into ParamWrappers over the router's weight and the 3-D
experts; HY-V3's are not (its gate_proj/up_proj/down_proj are the dense and shared MLPs'
nn.Linear layers), nor GPT-OSS's (gpt_oss.py: its router and experts are parameters),
Flint's (its gate_proj/up_proj/down_proj the dense and shared MLPs') or GraniteMoeSWA's; those
three run eager attention only, as their rows do.
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

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import evaluate_fast
from transformer_calc.graph.families.beam import Beam
from transformer_calc.graph.families.cohere import CohereMoe
from transformer_calc.graph.families.flint import Flint
from transformer_calc.graph.families.gpt_oss import GptOss
from transformer_calc.graph.families.granitemoe_swa import GraniteMoeSwa
from transformer_calc.graph.families.moe import Moe
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("hy_v3-tiny.json", "dots1-tiny.json", "cohere2_moe-tiny.json", "beam-tiny.json",
           "gpt_oss-tied-nobias.json", "flint-tiny.json", "granitemoe_swa-tiny.json")
# peft 0.21's qwen2_moe conversion (utils/transformers_weight_conversion.py): the targets
# it moves to target_parameters; all-linear keeps the attention's nn.Linear names
CONVERSION = {"gate": "gate.weight", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj",
              "down_proj": "down_proj"}
CONVERTED_TYPES = ("dots1-tiny.json", "cohere2_moe-tiny.json", "beam-tiny.json")
ATTENTION = frozenset(("q_proj", "k_proj", "v_proj", "o_proj"))
ROWS = measured_rows(CONFIGS)


def _run(row: dict) -> Run:
    """The row's Run, with peft's conversion of the MoE targets where it applies."""
    run = row_run(row)
    if row["config"] not in CONVERTED_TYPES or not row.get("lora"):
        return run
    rank, targets, dropout = row["lora"]
    names = set(CONVERSION) if targets == "all-linear" else set(targets.split(","))
    if not names & CONVERSION.keys():
        return run
    modules = ATTENTION if targets == "all-linear" else names - CONVERSION.keys()
    return replace(run, lora=Lora(rank, frozenset(modules), dropout, parameters=frozenset(
        CONVERSION[n] for n in names if n in CONVERSION)))


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _family(row: dict) -> Moe:
    fam = family_of(_spec(row["config"]))
    assert isinstance(fam, Moe)
    return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")


def test_the_rows_cover_each_type() -> None:
    counts = {c: sum(r["config"] == c for r in ROWS) for c in CONFIGS}
    assert counts == {"hy_v3-tiny.json": 32, "dots1-tiny.json": 24,
                      "cohere2_moe-tiny.json": 24, "beam-tiny.json": 32,
                      "gpt_oss-tied-nobias.json": 12, "flint-tiny.json": 12,
                      "granitemoe_swa-tiny.json": 10}
    assert {r.get("experts", "eager") for r in ROWS} == {"eager", "grouped_mm"}


# one row per config (its first LoRA row) is traced op by op, and its named rows compared
# with memory_report's; every row runs through the compiled structures (compiled == traced
# on random configurations: test_compiled_equals_traced_on_random_configs)
TRACED = [next(r for r in ROWS if r["config"] == c and r.get("lora")) for c in CONFIGS]


def test_saved_bytes_equal_the_measurement() -> None:
    every_row(ROWS, _compiled_and_reported)


def _compiled_and_reported(row: dict) -> None:
    result = evaluate_fast(_family(row), _run(row))
    assert result.activation_bytes == row["measured_bytes"]
    if "trainable" in row:  # peft's count of the adapters' parameters
        assert result.trainable_params == row["trainable"][0]
    report = memory_report(_spec(row["config"]), row_settings(row))
    assert report.activations.total == row["measured_bytes"]


def test_the_trace_and_memory_reports_rows_agree() -> None:
    # the trace (and peft's trainable count) and memory_report (its total, and its rows'
    # names, bytes, layers, stacks and notes as the trace's)
    every_row(TRACED, lambda row: check_measured(
        row, _family(row), _run(row), _spec(row["config"]), compiled=None,
        report_rows="names"))


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    # parameters: count_params (pinned against transformers on the meta device); FLOPs:
    # count_flops per token at context T, the graph's matmuls over B·T tokens, the experts'
    # over the K·B·T routed slots (T below every sliding window, where tcalc counts a
    # window's keys and the kernels multiply all T, as torch.utils.flop_counter counts them)
    spec = _spec(config)
    for grouped in (False, True):
        fam = replace(family_of(spec), grouped=grouped)
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", "sdpa" if spec.sdpa_path else "eager"))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


def test_the_types_map_to_their_routers() -> None:
    hy, dots = family_of(_spec("hy_v3-tiny.json")), family_of(_spec("dots1-tiny.json"))
    assert isinstance(hy, Moe) and isinstance(dots, Moe)
    assert (hy.router, hy.qk_norm, hy.pattern, hy.Fs) == ("hy_v3", "head_t", "DEE", 32)
    # dots1-tiny: n_shared_experts 2 of moe_intermediate_size 32, norm_topk_prob true
    assert (dots.router, dots.qk_norm, dots.norm_topk, dots.Fs) == ("dots1", "head", True, 64)
    assert hy.shared_experts and dots.shared_experts


def test_norm_topk_prob_keeps_dots1s_renormalisation() -> None:
    # Dots1TopkRouter with norm_topk_prob: topk_weights /= (sum + 1e-20), in place: keeps the
    # sum (B·T · 4) and a clone of the top values (K·B·T · 4) in each of the two MoE layers
    on = _spec("dots1-tiny.json")
    config = json.loads((DATA / "hf" / "variants" / "dots1-tiny.json").read_text())
    off = spec_from_hf({**config, "norm_topk_prob": False})
    assert (on.router_topk, off.router_topk) == ("renorm", "none")
    run = Run(2, 64, F32, "cpu", "eager")
    diff = evaluate(family_of(on), run).activation_bytes - \
        evaluate(family_of(off), run).activation_bytes
    assert diff == 2 * (2 * 64 * 4 + 2 * 64 * 2 * 4)


def test_other_layouts_are_refused() -> None:
    hy, dots = _spec("hy_v3-tiny.json"), _spec("dots1-tiny.json")
    for base in (hy, dots):
        for change in ({"router_fp32": False}, {"n_shared_experts": 0}, {"qk_norm": "none"},
                       {"d_ff_shared": 8}, {"bias_ffn_in": True}, {"router_bias": True},
                       {"shared_expert_gate": True}):
            with pytest.raises(TcalcError):
                family_of(replace(base, **change))  # type: ignore[arg-type]
    with pytest.raises(TcalcError):
        family_of(replace(hy, router_topk="renorm"))
    beam = _spec("beam-tiny.json")
    for change in ({"n_shared_experts": 1}, {"attn_gate": "none"}, {"sandwich_norm": False},
                   {"ffn_act_fp32": False}, {"router_fp32": False}, {"rope_fp32": False},
                   {"layer_attention": "6F"}):
        with pytest.raises(TcalcError):
            family_of(replace(beam, **change))  # type: ignore[arg-type]
    oss = _spec("gpt_oss-tied-nobias.json")
    for change in ({"attention_sinks": False}, {"router_bias": False}, {"activation": "silu"},
                   {"sdpa_path": True}, {"norm_fp32": False}, {"n_shared_experts": 1}):
        with pytest.raises(TcalcError):
            family_of(replace(oss, **change))  # type: ignore[arg-type]
    fl = _spec("flint-tiny.json")
    for change in ({"attention_sinks": False}, {"attn_fp32": False}, {"router_fp32": False},
                   {"router_topk": "renorm"}, {"n_shared_experts": 0}, {"sdpa_path": True}):
        with pytest.raises(TcalcError):
            family_of(replace(fl, **change))  # type: ignore[arg-type]
    granite = _spec("granitemoe_swa-tiny.json")
    for change in ({"attention_sinks": False}, {"softmax_sink_lse": False},
                   {"n_shared_experts": 1}, {"sdpa_path": True}, {"router_topk": "none"}):
        with pytest.raises(TcalcError):
            family_of(replace(granite, **change))  # type: ignore[arg-type]
    config = json.loads((DATA / "hf" / "variants" / "cohere2_moe-tiny.json").read_text())
    # Cohere2MoeConfig's dense prefix, its sigmoid selection, its RMSNorm: refused
    for change in ({"first_k_dense_replace": 1}, {"expert_selection_fn": "sigmoid"},
                   {"rms_norm_eps": 1e-6}):
        with pytest.raises(TcalcError):
            family_of(spec_from_hf({**config, **change}))


def test_flint_reads_its_layer_kinds_and_router() -> None:
    # FlintConfig: full attention in layers 0, 1, every fourth from 1 and the last (no RoPE
    # there: N), sliding elsewhere, window 513; norm_topk_prob true by default; flint-tiny's
    # shared expert 0 wide (its linears still keep their input)
    config = json.loads((DATA / "hf" / "variants" / "flint-tiny.json").read_text())
    spec = _spec("flint-tiny.json")
    assert (spec.layer_attention, spec.sliding_window, spec.router_topk) == (
        "2N 1S 1N", 513, "topk_sigmoid_renorm")
    assert spec_from_hf({**config, "norm_topk_prob": False}).router_topk == "topk_sigmoid"
    assert spec_from_hf({**config, "num_hidden_layers": 8}).layer_attention == "2N 3S 1N 1S 1N"
    fam = family_of(spec)
    assert isinstance(fam, Flint) and not fam.shared_width and fam.pattern == "DEDE"


def test_granitemoe_swa_reads_its_layer_kinds() -> None:
    # GraniteMoeSWAConfig: full attention every fourth layer from the first, sliding
    # elsewhere, window 128; layer_rope_theta 0: no RoPE (a full layer only)
    from transformer_calc.errors import SpecError

    config = json.loads((DATA / "hf" / "variants" / "granitemoe_swa-tiny.json").read_text())
    assert (_spec("granitemoe_swa-tiny.json").layer_attention,
            _spec("granitemoe_swa-tiny.json").sliding_window) == ("1F 1S 1S", 128)
    nope = spec_from_hf({**config, "layer_rope_theta": [0, 1e4, 1e4]})
    assert nope.layer_attention == "1N 1S 1S"
    for thetas in ([1e4, 0, 1e4], [1e4, 1e4, 5e5]):
        with pytest.raises(SpecError, match="layer_rope_theta"):
            spec_from_hf({**config, "layer_rope_theta": thetas})


def test_cohere2_moe_reads_its_layer_kinds() -> None:
    # Cohere2MoeConfig: sliding_window_pattern 4 (layer i slides unless (i + 1) % 4 == 0,
    # RoPE only there); a dense prefix of first_k_dense_replace layers by
    # prefix_dense_sliding_window_pattern 1: full attention with RoPE forced (F)
    config = json.loads((DATA / "hf" / "variants" / "cohere2_moe-tiny.json").read_text())
    spec = _spec("cohere2_moe-tiny.json")
    assert (spec.layer_attention, spec.sliding_window, spec.router_topk) == (
        "1S 1S 1S 1N", 4096, "topk_softmax")
    prefixed = spec_from_hf({**config, "first_k_dense_replace": 2, "num_hidden_layers": 6})
    assert prefixed.layer_attention == "1F 1F 1S 1S 1S 1N"
    assert prefixed.layer_ffn.replace(" ", "") == "2D4E"


def test_autocast_reads_the_graph() -> None:
    # the sigmoid routers under autocast: CPU autocast rows (tests/test_graph_autocast.py)
    from transformer_calc.costs import activations as graph_costs

    row = next(r for r in ROWS if not r.get("lora"))
    spec = _spec(row["config"])
    s = replace(row_settings(row), precision="bf16", mixed=True)
    assert graph_costs.graph_activations(spec, s, row["T"], amp=True, amp16=False,
                                         adapted_roles=None) is not None


def _draw(rng: random.Random) -> tuple[Moe, Run]:
    kind = rng.choice(("hy_v3", "dots1", "cohere2_moe", "beam", "gpt_oss", "flint",
                       "granitemoe_swa"))
    X = rng.randint(1, 6)
    H, G = rng.choice(((2, 1), (4, 2), (4, 4), (6, 3)))
    L = rng.randint(1, 3)
    pattern = "".join(rng.choice("DE") for _ in range(L)) if rng.random() < 0.5 else ""
    fam = Moe(V=rng.randint(5, 60), E=rng.choice((8, 16, 24)), H=H, Hkv=H // G,
              dh=rng.choice((2, 4, 8)), F=rng.randint(1, 30), L=L,
              qk_norm="head_t" if kind == "hy_v3" else "head", X=X, K=rng.randint(1, X),
              Fe=rng.randint(1, 30), Fs=rng.randint(1, 30), pattern=pattern, router=kind,
              norm_topk=rng.random() < 0.5, shared_experts=True,
              grouped=rng.random() < 0.5)
    kinds = "".join(rng.choice("SN") for _ in range(L))
    if kind == "beam":
        fam = Beam(**{**vars(fam), "shared_experts": False,
                      "kinds": kinds if len(set(kinds)) > 1 else kinds[0],
                      "window": rng.randint(2, 50), "softcap": rng.choice((0.0, 30.0))})
    if kind == "gpt_oss":
        kinds = "".join(rng.choice("SF") for _ in range(L))
        fam = GptOss(**{**vars(fam), "qk_norm": "none", "pattern": "", "shared_experts": False,
                        "kinds": kinds if len(set(kinds)) > 1 else kinds[0],
                        "window": rng.randint(2, 50), "router": "gpt_oss"})
    if kind == "flint":
        fam = Flint(**{**vars(fam), "shared_experts": False, "router": "flint",
                       "kinds": kinds if len(set(kinds)) > 1 else kinds[0],
                       "window": rng.randint(2, 50), "shared_width": rng.random() < 0.5})
    if kind == "granitemoe_swa":
        kinds = "".join(rng.choice("FSN") for _ in range(L))
        fam = GraniteMoeSwa(**{**vars(fam), "qk_norm": "none", "pattern": "",
                               "shared_experts": False, "router": "granitemoe_swa",
                               "kinds": kinds if len(set(kinds)) > 1 else kinds[0],
                               "window": rng.randint(2, 50)})
    if kind == "cohere2_moe":
        fam = CohereMoe(**{**vars(fam), "qk_norm": "none", "pattern": "",
                           "shared_experts": rng.random() < 0.5,
                           "kinds": kinds if len(set(kinds)) > 1 else kinds[0],
                           "window": rng.randint(2, 50), "bias_q": True, "bias_k": True,
                           "bias_v": True, "bias_o": True})
    lora = None
    if rng.random() < 0.4:
        targets = ("q_proj", "v_proj", "o_proj", "gate_proj", "down_proj")
        lora = Lora(rng.choice((1, 4)), frozenset(rng.sample(targets, rng.choice((1, 2)))),
                    0.0)
    elif kind not in ("hy_v3", "gpt_oss", "flint", "granitemoe_swa") and rng.random() < 0.4:
        lora = Lora(rng.choice((1, 4)), frozenset(), 0.0, parameters=frozenset(
            rng.sample(("gate.weight", "gate_up_proj", "down_proj"), rng.choice((1, 2)))))
    return fam, Run(rng.randint(1, 3), rng.randint(2, 40), rng.choice((F32, BF16)), "cpu",
                    "eager" if kind in ("gpt_oss", "flint", "granitemoe_swa")
                    else rng.choice(("eager", "sdpa")),
                    lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_configs() -> None:
    cache_hits_on_random_draws(_draw, seed=23, draws=15)
