"""The op graph's linear-attention hybrids against every measured CPU row of their configs, to
the byte: OLMo Hybrid (transformer_calc/graph/families/olmo_hybrid.py: OLMo 3's attention
layers and Gated DeltaNet layers as transformers 5.23's torch path runs them, without fla).

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
The per-tensor rules (memory_report without the graph) on the 24 whole-model rows: −12 …
+174,636 bytes (−0.0002 … +2.9 %, mean |error| 0.73 %: the loss's total_weight on the full
rows, up to +2.9 % on the LoRA rows); their mixer rows meet the 12 mixer rows. The graph
meets every row.
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
from transformer_calc.graph import BF16, DTYPES, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import evaluate_fast
from transformer_calc.graph.families.olmo_hybrid import OlmoHybrid
from transformer_calc.graph.names import component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("olmo_hybrid-tiny.json", "olmo_hybrid-nope.json")
ROWS = measured_rows(CONFIGS)
MIXER_ROWS = [r for r in ROWS if r["file"] == "activations_mixers_cpu.jsonl"]
MODEL_ROWS = [r for r in ROWS if r["file"] != "activations_mixers_cpu.jsonl"]


def _id(r: dict) -> str:
    return "{}-{}-{}-B{}-T{}-{}".format(
        r["config"].removesuffix(".json"), r.get("attention", "mixer"), r["dtype"], r["B"],
        r["T"], "-".join(map(str, r.get("lora", ()))) or "full")


def _spec(config: str) -> ModelSpec:
    return spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))


def _run(row: dict) -> Run:
    return row_run(row) if "attention" in row else Run(row["B"], row["T"],
                                                       DTYPES[row["dtype"]], "cpu", "eager")


def _settings(row: dict) -> Settings:
    lora = {}
    if row.get("lora"):
        rank, targets, dropout = row["lora"]
        lora = dict(lora_rank=rank, lora_dropout=dropout,
                    lora_targets=tuple(targets.split(",")))
    return Settings(precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
                    attention=row["attention"], device="cpu", **lora)  # type: ignore[arg-type]


def test_the_rows_cover_both_configs_dtypes_lora_and_several_chunks() -> None:
    assert len(MIXER_ROWS) == 12 and len(MODEL_ROWS) == 16 + 8
    assert {r["config"] for r in MODEL_ROWS} == {r["config"] for r in MIXER_ROWS} == set(CONFIGS)
    assert {r["dtype"] for r in ROWS} == {"fp32", "bf16"}
    assert {r["attention"] for r in MODEL_ROWS} == {"eager", "sdpa"}
    # one, two and four chunks of 64 (T = 200: a padded last chunk)
    assert {-(-r["T"] // 64) for r in MIXER_ROWS} == {1, 2, 4}


@pytest.mark.parametrize("row", MIXER_ROWS, ids=_id)
def test_mixer_bytes_equal_the_measurement(row: dict) -> None:
    # what the measurement counts: the storages first saved while a GatedDeltaNet runs
    result = evaluate(family_of(_spec(row["config"])), _run(row))
    assert sum(s.nbytes for s in result.saved if ".linear_attn" in s.scope) == \
        row["measured_bytes"]


@pytest.mark.parametrize("row", MODEL_ROWS, ids=_id)
def test_saved_bytes_equal_the_measurement(row: dict) -> None:
    fam = family_of(_spec(row["config"]))
    assert evaluate(fam, _run(row)).activation_bytes == row["measured_bytes"]
    assert evaluate_fast(fam, _run(row)).activation_bytes == row["measured_bytes"]


@pytest.mark.parametrize("row", MODEL_ROWS, ids=_id)
def test_memory_report_reads_the_graph(row: dict) -> None:
    spec = _spec(row["config"])
    report = memory_report(spec, _settings(row))
    assert report.activations.total == row["measured_bytes"]
    assert [r[:2] + r[4:] for r in report.activations.rows] == [
        r[:2] + r[4:] for r in component_rows(family_of(spec), _run(row))]


# torch.utils.flop_counter's forward FLOPs at B = 1 (the chunks' matmuls, the last chunk's
# dead state update and the convolution included): tools/reference_flops.py --seq-len T
# (torch 2.13, transformers 5.23)
FLOPS = {("olmo_hybrid-tiny.json", 37): 19_424_512, ("olmo_hybrid-tiny.json", 64): 29_619_712,
         ("olmo_hybrid-tiny.json", 130): 68_204_032,
         ("olmo_hybrid-nope.json", 37): 11_790_592, ("olmo_hybrid-nope.json", 64): 17_963_008,
         ("olmo_hybrid-nope.json", 130): 42_486_784}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    spec = _spec(config)
    r = evaluate(family_of(spec), Run(1, T, F32, "cpu", "eager"))
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


def test_cuda_autocast_and_an_adapted_head_keep_the_rules() -> None:
    # on CUDA transformers runs fla's kernels where installed; no measured row covers
    # autocast over the chunks or an adapted lm_head
    spec = _spec("olmo_hybrid-tiny.json")
    cpu = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                   device="cpu")
    ask = graph_costs.graph_activations
    assert ask(spec, cpu, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(spec, cpu, 64, amp=True, amp16=False, adapted_roles=None) is None
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


def test_compiled_equals_traced_on_random_olmo_hybrid_configurations() -> None:
    # the compiled structures (the chunks as Tq, the loop's third chunk standing for
    # Tq − 2, the padding Tq·64 − T; layer kinds, NoPE, LoRA) against the reference trace on
    # every output and row name: 16 draws, each also at another size from the cache
    assert cache_hits_on_random_draws(_draw_olmo_hybrid, 20261128, 16) >= 1


def test_roles_peft_names_in_both_kinds_of_layer_keep_the_rules() -> None:
    # q, k, v and o name the attention's projections to tcalc; peft's q_proj ... o_proj
    # target the Gated DeltaNet's as well: no target list gives the rules' layers. The MLP's
    # roles and all-linear (the measured rows) are the graph's.
    spec = _spec("olmo_hybrid-tiny.json")
    ask = graph_costs.graph_activations
    for targets, graph in (((("q", "v")), False), (("gate", "up", "down"), True),
                           (("all-linear",), True)):
        s = Settings(precision="fp32", batch_size=2, seq_len=64, attention="eager",
                     device="cpu", lora_rank=8, lora_targets=targets)
        roles = frozenset(targets) if targets != ("all-linear",) else frozenset(
            ("q", "k", "v", "o", "gate", "up", "down"))
        got = ask(spec, s, 64, amp=False, amp16=False, adapted_roles=roles)
        assert (got is not None) == graph, targets
