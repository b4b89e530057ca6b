"""The op graph's linear-attention hybrids against every measured CPU row of their configs, to
the byte: OLMo Hybrid (transformer_calc/graph/families/olmo_hybrid.py: OLMo 3's attention
layers and Gated DeltaNet layers as transformers 5.23's torch path runs them, without fla)
and Kimi Linear (families/kimi_linear.py: latent attention without positions, Kimi Delta
Attention's torch path, dense MLPs then DeepSeek-V3's experts).

Fixtures (torch 2.13 CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks, each storage
still held at the end of the forward once, parameters excluded):
- olmo_hybrid-tiny.json (four layers, the last attention with RoPE, Hk = Hv) and
  olmo_hybrid-nope.json (three layers, NoPE, GQA, two value heads per key head): whole-model
  rows B 2 T 64 and B 1 T 128, eager and SDPA, fp32 and bf16, in
  tests/data/activations_longt5_olmo_hybrid_cpu.jsonl
  (`tools/measure_activations_hf.py CONFIG -B B -T T`); LoRA rank 8 over all-linear in
  activations_lora_survey_all_linear_rest_cpu.jsonl (`--lora 8`); the Gated DeltaNet
  modules' own bytes (`--mixers`: B 1 T 64, B 2 T 128, B 1 T 200, one, two and four chunks
  of 64) in activations_mixers_cpu.jsonl.
- kimi_linear-tiny.json (four layers: three delta attention, the last latent attention; the
  first layer dense, the others experts; heads of 16) and kimi_linear-wide-heads.json (two
  heads of 32, a kernel of 3): whole-model rows with the eager experts, B 2 T 64, B 1 T 128,
  B 3 T 100 and B 1 T 192, eager and SDPA, fp32 and bf16, in
  activations_moe_dense_kimi_linear_cpu.jsonl (`--experts eager`); LoRA rank 8 over
  all-linear in activations_lora_survey_all_linear{,_rest}_cpu.jsonl; kimi_linear-tiny's
  delta attention's own bytes (`--mixers`) in activations_mixers_cpu.jsonl.
The per-tensor rules (memory_report without the graph): OLMo Hybrid's 24 whole-model rows
−12 … +174,636 bytes (−0.0002 … +2.9 %, mean |error| 0.73 %: the loss's total_weight on the
full rows, up to +2.9 % on the LoRA rows), its 12 mixer rows exact; Kimi Linear's 24
whole-model rows −174,396 … +303,716 bytes (−0.41 … +1.08 %, mean |error| 0.37 %), its
6 mixer rows −184,032 … −4,896 (−0.30 … −0.03 %). The graph meets every row.
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

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import TcalcError
from transformer_calc.graph import BF16, DTYPES, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.kimi_linear import KimiLinear
from transformer_calc.graph.families.olmo_hybrid import OlmoHybrid
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("olmo_hybrid-tiny.json", "olmo_hybrid-nope.json", "kimi_linear-tiny.json",
           "kimi_linear-wide-heads.json")
ROWS = measured_rows(CONFIGS)
MIXER_ROWS = [r for r in ROWS if r["file"] == "activations_mixers_cpu.jsonl"]
MODEL_ROWS = [r for r in ROWS if r["file"] != "activations_mixers_cpu.jsonl"]


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _family(row: dict) -> OlmoHybrid | KimiLinear:
    """The row's graph; Kimi Linear's with the experts path the row ran."""
    fam = family_of(_spec(row["config"]))
    if isinstance(fam, KimiLinear):
        return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")
    assert isinstance(fam, OlmoHybrid)
    return fam


def _run(row: dict) -> Run:
    return row_run(row) if "attention" in row else Run(row["B"], row["T"],
                                                       DTYPES[row["dtype"]], "cpu", "eager")


def test_the_rows_cover_the_configs_dtypes_lora_and_several_chunks() -> None:
    assert len(MIXER_ROWS) == 12 + 6 and len(MODEL_ROWS) == (16 + 8) + (16 + 8)
    assert {r["config"] for r in MODEL_ROWS} == set(CONFIGS)
    assert {r["config"] for r in MIXER_ROWS} == set(CONFIGS) - {"kimi_linear-wide-heads.json"}
    assert {r["dtype"] for r in ROWS} == {"fp32", "bf16"}
    assert {r["attention"] for r in MODEL_ROWS} == {"eager", "sdpa"}
    # one, two and four chunks of 64 (T = 200: a padded last chunk)
    assert {-(-r["T"] // 64) for r in MIXER_ROWS} == {1, 2, 4}


def _mixer_scope(fam: OlmoHybrid | KimiLinear, scope: str) -> bool:
    """Whether an op of this scope ran inside a delta-rule mixer module."""
    if isinstance(fam, OlmoHybrid):
        return ".linear_attn" in scope
    parts = scope.split(".")
    return ".self_attn" in scope and fam.mixers[int(parts[2])] == "M"


def test_mixer_bytes_equal_the_measurement() -> None:
    every_row(MIXER_ROWS, _mixer_bytes)


def _mixer_bytes(row: dict) -> None:
    # what the measurement counts: the storages first saved while a GatedDeltaNet or a
    # KimiLinearDeltaAttention runs
    fam = _family(row)
    result = evaluate(fam, _run(row))
    assert sum(s.nbytes for s in result.saved if _mixer_scope(fam, s.scope)) == \
        row["measured_bytes"]


def test_saved_bytes_and_memory_report_equal_the_measurement() -> None:
    # the traced graph (and peft's trainable count), and memory_report reading the compiled
    # one, its rows named as component_rows names the trace's
    every_row(MODEL_ROWS, lambda row: check_measured(
        row, _family(row), _run(row), _spec(row["config"]), compiled=None,
        report_rows="names"))


# torch.utils.flop_counter's forward FLOPs at B = 1 (the chunks' matmuls, the last chunk's
# dead state update and the convolution included): tools/reference_flops.py --seq-len T
# (torch 2.13, transformers 5.23)
# (T = 64: 29,619,712 and 17,963,008 for OLMo Hybrid's two; Kimi Linear's at T = 260:
# 134,869,504 and 146,651,392, the same counts as the graph's)
FLOPS = {("olmo_hybrid-tiny.json", 37): 19_424_512, ("olmo_hybrid-tiny.json", 130): 68_204_032,
         ("olmo_hybrid-nope.json", 37): 11_790_592, ("olmo_hybrid-nope.json", 130): 42_486_784,
         # (Kimi Linear's experts as tools/reference_flops.py runs them: eager)
         ("kimi_linear-tiny.json", 37): 18_265_920, ("kimi_linear-tiny.json", 130): 64_982_784,
         ("kimi_linear-wide-heads.json", 37): 20_276_928,
         ("kimi_linear-wide-heads.json", 130): 71_460_096}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    spec = _spec(config)
    r = evaluate(_family({"config": config}), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(spec).total
    assert r.forward_flops == FLOPS[config, T]


def test_the_chunk_loop_keeps_a_state_and_new_values_per_chunk() -> None:
    # each chunk after the first keeps its incoming state (B, Hv, dk, dv) and its new values
    # (B, Hv, 64, dv), fp32; the first keeps the zeros it starts from
    fam = family_of(_spec("olmo_hybrid-tiny.json"))
    assert isinstance(fam, OlmoHybrid)

    def mixer(T: int) -> int:
        r = evaluate(fam, Run(1, T, F32, "cpu", "eager"))
        return sum(s.nbytes for s in r.saved if ".layers.0.linear_attn" in s.scope)

    per_chunk = 4 * fam.Hv * (fam.dk * fam.dv + 64 * fam.dv)
    # T = 192 .. 320: the chunks' other tensors grow by 64 tokens each chunk, alike
    steps = [mixer(T) for T in (192, 256, 320)]
    assert steps[2] - steps[1] == steps[1] - steps[0] > per_chunk


def test_other_layouts_are_refused() -> None:
    spec = _spec("olmo_hybrid-tiny.json")
    fam = family_of(spec)
    assert isinstance(fam, OlmoHybrid) and fam.kinds == "MMMF" and fam.rope
    nope = family_of(_spec("olmo_hybrid-nope.json"))
    assert isinstance(nope, OlmoHybrid) and nope.kinds == "MFM" and not nope.rope
    assert (nope.Hk, nope.Hv) == (2, 4)
    for change in ({"ssm_conv_bias": True}, {"bias_q": True}, {"ssm_chunk": 32},
                   {"norm_position": "pre"}, {"sliding_window": 16}):
        with pytest.raises(TcalcError, match="olmo_hybrid layout"):
            family_of(replace(spec, **change))  # type: ignore[arg-type]


def test_kimi_linear_layouts_and_refusals() -> None:
    spec = _spec("kimi_linear-tiny.json")
    fam = family_of(spec)
    assert isinstance(fam, KimiLinear) and fam.layers == "cddb" and fam.mixers == "MMMF"
    assert (fam.Hl, fam.dl, fam.Kc, fam.X, fam.K) == (4, 16, 4, 4, 2)
    wide = family_of(_spec("kimi_linear-wide-heads.json"))
    assert isinstance(wide, KimiLinear) and (wide.Hl, wide.dl, wide.Kc) == (2, 32, 3)
    # a query latent, biases on the delta attention's side, a router not renormalised
    # (moe_renormalize: false), a grouped query: not transcribed
    for change in ({"q_lora_rank": 8}, {"bias_v": True}, {"router_topk": "none"},
                   {"n_kv_heads": 2}, {"ssm_conv_bias": True}):
        with pytest.raises(TcalcError, match="kimi_linear layout"):
            family_of(replace(spec, **change))  # type: ignore[arg-type]
    config = json.loads((DATA / "hf" / "variants" / "kimi_linear-tiny.json").read_text())
    assert spec_from_hf({**config, "moe_renormalize": False}).router_topk == "none"


@pytest.mark.parametrize("config", ["olmo_hybrid-tiny.json", "kimi_linear-tiny.json"])
def test_cuda_and_an_adapted_head_keep_the_rules(config: str) -> None:
    # on CUDA transformers runs fla's kernels where installed; no measured row covers an
    # adapted lm_head. CPU autocast reads the graph (tests/test_graph_autocast.py)
    spec = _spec(config)
    cpu = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                   device="cpu")
    ask = graph_costs.graph_activations
    assert ask(spec, cpu, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(spec, cpu, 64, amp=True, amp16=False, adapted_roles=None) is not None
    assert ask(spec, replace(cpu, device="cuda"), 64, amp=False, amp16=False,
               adapted_roles=None) is None
    assert ask(spec, cpu, 64, amp=False, amp16=False,
               adapted_roles=frozenset(("lm_head",))) is None


def _draw_olmo_hybrid(rng: random.Random) -> tuple[OlmoHybrid, Run]:
    """Sizes drawn freely with the 0/1 edge cases (one head, one K/V head, a kernel of 1,
    widths of 1), layer kinds, NoPE, tied tables; lengths of one to four chunks."""
    Hkv, G, Hk, Gk = (rng.choice((1, 2)) for _ in range(4))
    kinds = rng.choice(("MF", "MMF", "FM", "MFM"))
    fam = OlmoHybrid(V=rng.randint(3, 40), E=rng.randint(1, 24), H=Hkv * G, Hkv=Hkv,
                     dh=rng.choice((2, 4)), F=rng.randint(1, 20), L=len(kinds), Hk=Hk,
                     Hv=Hk * Gk, dk=rng.choice((1, 3, 4)), dv=rng.choice((1, 2, 5)),
                     Kc=rng.choice((1, 2, 4)), kinds=kinds, tied=rng.random() < 0.5,
                     rope=rng.random() < 0.5)
    lora = None
    if rng.random() < 0.3:
        lora = Lora(rng.choice((1, 4)), frozenset(rng.choice((
            ("all-linear",), ("q_proj", "v_proj"), ("g_proj", "o_proj")))),
            rng.choice((0.0, 0.05)))
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 64, 65, 130)),
              rng.choice((F32, BF16, F16)), "cpu", rng.choice(("eager", "sdpa")), lora=lora,
              recompute=rng.choice(("none", "full")))
    return fam, run


def _draw_kimi_linear(rng: random.Random) -> tuple[KimiLinear, Run]:
    """Sizes drawn freely with the 0/1 edge cases, layer kinds (either mixer, dense or
    experts), the experts' paths; lengths of one to five chunks."""
    X = rng.choice((1, 2, 4))
    fam = KimiLinear(V=rng.randint(3, 40), E=rng.randint(1, 24), H=rng.choice((1, 2, 3)),
                     Hkv=1, dh=1, F=rng.randint(1, 20), L=0, q_latent=False,
                     rkv=rng.choice((1, 4)), dn=rng.choice((1, 2)), dr=rng.choice((1, 2)),
                     dv=rng.choice((1, 3)), X=X, K=rng.randint(1, X),
                     Fe=rng.randint(1, 8), Fs=rng.randint(1, 8), router="sigmoid",
                     shared_expert=True, grouped=rng.random() < 0.5,
                     Hl=rng.choice((1, 2)), dl=rng.choice((1, 3)), Kc=rng.choice((1, 2, 4)),
                     layers=rng.choice(("cd", "db", "ad", "d")),
                     bias_k=rng.random() < 0.3, bias_o=rng.random() < 0.3)
    fam = replace(fam, L=len(fam.layers))
    lora = None
    if rng.random() < 0.3:
        lora = Lora(rng.choice((1, 4)), frozenset(("all-linear",)), rng.choice((0.0, 0.05)))
    run = Run(rng.choice((1, 2)), rng.choice((1, 2, 64, 65, 130, 200, 257)),
              rng.choice((F32, BF16)), "cpu", rng.choice(("eager", "sdpa")), lora=lora,
              recompute=rng.choice(("none", "full")))
    return fam, run


def test_compiled_equals_traced_on_random_kimi_linear_configurations() -> None:
    # the compiled structures (the chunks as Tq, the loop's third chunk standing for
    # Tq − 3, the last chunk's dead update; layer kinds, experts, LoRA) against the
    # reference trace on every output and row name: 6 draws, each also at another size
    cache_hits_on_random_draws(_draw_kimi_linear, 20261129, 6)


def test_compiled_equals_traced_on_random_olmo_hybrid_configurations() -> None:
    # the compiled structures (the chunks as Tq, the loop's third chunk standing for
    # Tq − 2, the padding Tq·64 − T; layer kinds, NoPE, LoRA) against the reference trace on
    # every output and row name: 10 draws, each also at another size from the cache
    assert cache_hits_on_random_draws(_draw_olmo_hybrid, 20261128, 10) >= 1


@pytest.mark.parametrize("config", ["olmo_hybrid-tiny.json", "kimi_linear-tiny.json"])
def test_roles_peft_names_in_both_kinds_of_layer_keep_the_rules(config: str) -> None:
    # q, k, v and o name the attention's projections to tcalc; peft's q_proj ... o_proj
    # target the delta attention's as well: no target list gives the rules' layers. The
    # MLP's roles and all-linear (the measured rows) are the graph's.
    spec = _spec(config)
    ask = graph_costs.graph_activations
    for targets, graph in (((("q", "v")), False), (("gate", "up", "down"), True),
                           (("all-linear",), True)):
        s = Settings(precision="fp32", batch_size=2, seq_len=64, attention="eager",
                     device="cpu", lora_rank=8, lora_targets=targets)
        roles = frozenset(targets) if targets != ("all-linear",) else frozenset(
            ("q", "k", "v", "o", "gate", "up", "down"))
        got = ask(spec, s, 64, amp=False, amp16=False, adapted_roles=roles)
        assert (got is not None) == graph, targets
