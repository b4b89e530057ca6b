"""The op graph's state-space mixers (transformer_calc/graph/families/mamba.py: Mamba and
Mamba-2 as transformers 5.23's torch path runs them; families/bamba.py: Bamba's attention and
Mamba-2 layers; families/falcon_h1.py: Falcon-H1's parallel mixer and attention;
families/jamba.py: Jamba's attention and Mamba layers with MLPs or experts) against every
measured CPU row of their configs, to the byte.

Fixtures (torch 2.13 CPU, transformers 5.23, saved_tensors_hooks, each storage still held at
the end of the forward once, parameters excluded):
- tests/data/activations_mixers_cpu.jsonl: the bytes first saved inside the mixer modules
  (`tools/measure_activations_hf.py --mixers`, its docstring has the command), B 1 T 64,
  B 2 T 128, B 1 T 200, fp32 and bf16, of mamba-mixer.json and mamba2-mixer.json;
- tests/data/activations_mamba_whole_model_cpu.jsonl: the whole model's bytes, of those two and
  of mamba-biases-tied.json and mamba2-biases-tied.json (three layers, in_proj/out_proj biases,
  no conv bias; Mamba's tied table, Mamba-2 padding T = 37 to chunks of 8), B 1 T 37 and
  B 2 T 64, fp32 and bf16, written by
      for c in mamba-mixer mamba2-mixer mamba-biases-tied mamba2-biases-tied; do
        for bt in "1 37" "2 64"; do set -- $bt
          python tools/measure_activations_hf.py tests/data/hf/variants/$c.json -B $1 -T $2
      done; done | grep -v skipped
  (the SDPA rows are skipped: neither class has an attention);
- tests/data/activations_bamba_whole_model_cpu.jsonl: the same command over bamba-tiny.json
  and bamba-gqa-tied.json (four layers, GQA, no biases, a tied table, Mamba-2 with two groups
  and chunks of 16), eager and SDPA;
- tests/data/activations_falcon_h1_whole_model_cpu.jsonl and
  activations_jamba_whole_model_cpu.jsonl: the same command over falcon_h1-tiny.json and
  jamba-tiny.json (and for Jamba `-B 2 -T 64 --experts grouped_mm`); their rows carry no
  tcalc_bytes (the graph answered them already);
- the LoRA rows (peft 0.21.2, rank 8) of bamba-tiny.json and falcon_h1-tiny.json in
  activations_lora_moe_hybrid_targets_cpu.jsonl (in_proj; q_proj,v_proj; jamba-tiny.json's
  too) and of those, jamba-tiny.json and falcon_h1-nonorm.json in
  activations_lora_survey_{qv,attn,mlp,all_linear_rest}_cpu.jsonl (eager experts);
  falcon_h1-nonorm.json's whole-model rows in activations_sweep_variants_cpu.jsonl; the
  mixers' rows of bamba-tiny.json, falcon_h1-tiny.json and jamba-tiny.json in
  activations_mixers_cpu.jsonl.
The per-tensor rules (memory.activation_breakdown, memory_report without the graph) on the
whole-model rows: Mamba −9,220 … +212,348 bytes (−0.3 … +8.3 %), Mamba-2 −14,934 … +8,198
(−2.1 … +0.3 %), Bamba −7,484 … +19,154 (−0.9 … +4.1 %), Falcon-H1 −788 … +59,558
(−0.04 … +4.3 %), Jamba −48,132 … +269,308 (−0.8 … +6.6 %); on the mixers' rows
−1.3 … +8.6 %. The graph meets every row.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from graph_rows import (
    assert_compiled_equals_traced,
    check_measured,
    every_row,
    measured_rows,
    row_run,
    spec_of,
)

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import TcalcError
from transformer_calc.graph import BF16, DTYPES, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import cached, clear_cache, evaluate_fast, sweep
from transformer_calc.graph.families.bamba import Bamba
from transformer_calc.graph.families.falcon_h1 import FalconH1
from transformer_calc.graph.families.jamba import Jamba
from transformer_calc.graph.families.mamba import Mamba, Mamba2
from transformer_calc.memory import Settings
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("mamba-mixer.json", "mamba2-mixer.json", "mamba-biases-tied.json",
           "mamba2-biases-tied.json", "bamba-tiny.json", "bamba-gqa-tied.json",
           "falcon_h1-tiny.json", "falcon_h1-nonorm.json", "jamba-tiny.json")
ROWS = measured_rows(CONFIGS)
MIXER_ROWS = [r for r in ROWS if r["file"] == "activations_mixers_cpu.jsonl"]
MODEL_ROWS = [r for r in ROWS if r["file"] != "activations_mixers_cpu.jsonl"]


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _family(row: dict) -> Mamba | Mamba2 | Bamba | FalconH1 | Jamba:
    """The row's graph; Jamba's with the experts path the row ran (rows without an experts
    key ran the tool's default, eager)."""
    fam = family_of(_spec(row["config"]))
    if isinstance(fam, Jamba):
        return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")
    return fam  # type: ignore[return-value]


def _run(row: dict) -> Run:
    return row_run(row) if "attention" in row else Run(row["B"], row["T"],
                                                       DTYPES[row["dtype"]], "cpu", "eager")


def test_the_rows_cover_the_types_dtypes_lora_and_a_padded_chunk() -> None:
    # Mamba and Mamba-2; Bamba (whole, LoRA); Falcon-H1 (whole, tiny LoRA, nonorm LoRA and
    # whole); Jamba (whole, LoRA)
    assert len(MIXER_ROWS) == 30 and len(MODEL_ROWS) == 16 + (16 + 24) + (8 + 20 + 12 + 8) + (
        12 + 24)
    assert {r.get("experts") for r in MODEL_ROWS if r["config"] == "jamba-tiny.json"} == {
        "eager", "grouped_mm"}
    assert {r["config"] for r in MODEL_ROWS} == set(CONFIGS)
    assert {r["lora"][1] for r in MODEL_ROWS if r.get("lora")} == {
        "in_proj", "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj",
        "gate_proj,up_proj,down_proj", "all-linear"}
    assert {r["dtype"] for r in ROWS} == {"fp32", "bf16"}
    # T = 37, 200 against chunks of 8 and 16: the padded last chunk
    assert any(r["T"] % 16 for r in MIXER_ROWS if r["config"] == "mamba2-mixer.json")


def test_mixer_bytes_equal_the_measurement() -> None:
    every_row(MIXER_ROWS, _mixer_bytes)


def _mixer_bytes(row: dict) -> None:
    # what the measurement counts: the storages first saved while a mixer module runs,
    # parameters excluded but not buffers: Falcon-H1's mup_vector, (1, 1, in_proj's width)
    # per layer, which the graph keeps as model memory
    fam = _family(row)
    result = evaluate(fam, _run(row))
    inside = sum(s.nbytes for s in result.saved if ".mixer" in s.scope or ".mamba" in s.scope)
    if isinstance(fam, FalconH1):  # in_proj's width: 2·d_inner + 2·groups·state + heads
        H = fam.Gs * fam.Hg
        width = 2 * H * fam.Ph + 2 * fam.Gs * fam.N + H
        inside += fam.L * width * DTYPES[row["dtype"]].itemsize
    assert inside == row["measured_bytes"]


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows' names, bytes, layers, stacks and notes as the trace's), each to
    # the byte
    every_row(MODEL_ROWS, lambda row: check_measured(
        row, _family(row), _run(row), _spec(row["config"]), report_rows="names"))


# torch.utils.flop_counter's forward FLOPs at B = 1 (convolutions and the scan's matmuls
# included): tools/reference_flops.py --seq-len T over the four configs (torch 2.13,
# transformers 5.23)
FLOPS = {("mamba-mixer.json", 37): 2_844_672, ("mamba-biases-tied.json", 37): 3_946_176,
         ("mamba2-mixer.json", 37): 3_561_984, ("mamba2-biases-tied.json", 37): 4_533_984,
         ("mamba-mixer.json", 64): 4_918_272, ("mamba-biases-tied.json", 64): 6_823_296,
         ("mamba2-mixer.json", 64): 5_874_176, ("mamba2-biases-tied.json", 64): 7_842_240,
         ("bamba-tiny.json", 37): 2_357_952, ("bamba-gqa-tied.json", 37): 6_583_392,
         ("bamba-tiny.json", 64): 4_519_104, ("bamba-gqa-tied.json", 64): 11_767_808,
         ("falcon_h1-tiny.json", 37): 7_345_664, ("falcon_h1-nonorm.json", 37): 2_445_568,
         ("falcon_h1-tiny.json", 64): 13_586_432, ("falcon_h1-nonorm.json", 64): 4_803_328,
         ("jamba-tiny.json", 37): 20_730_880, ("jamba-tiny.json", 64): 37_623_808}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    spec = _spec(config)
    # (Jamba's experts as tools/reference_flops.py runs them: eager)
    r = evaluate(_family({"config": config}), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(spec).total
    assert r.forward_flops == FLOPS[config, T]


def test_the_scan_keeps_one_state_per_step() -> None:
    # mamba_selective_scan's loop: each step's (B, Di, N) fp32 state is kept by its matmul
    # with C and by the next step's product, the initial zeros by the first: T + 1 states;
    # in bf16 the last fp32 state is not kept (its matmul keeps its bf16 cast): T − 1 fp32
    # states, T casts and the bf16 zeros
    fam = family_of(_spec("mamba-mixer.json"))
    assert isinstance(fam, Mamba)
    B, Di, N = 2, fam.Di, fam.N

    def states(dtype: object, T: int) -> int:
        r = evaluate(fam, Run(B, T, dtype, "cpu", "eager"))  # type: ignore[arg-type]
        return sum(s.nbytes for s in r.saved if s.storage.op == "add"
                   and s.role in ("mul.other", "bmm.self") and ".mixer" in s.scope
                   or s.storage.op == "to" and s.role == "bmm.self")

    for T in (1, 2, 9):
        assert states(F32, T) - states(F32, 1) == (T - 1) * B * Di * N * 4
        assert states(BF16, T) - states(BF16, 1) == (T - 1) * B * Di * N * (4 + 2)


def test_other_mixer_layouts_are_refused() -> None:
    # (Nemotron-H's own layout: tests/test_graph_moe_exotic.py)
    mamba, mamba2 = _spec("mamba-mixer.json"), _spec("mamba2-mixer.json")
    for spec, change in ((mamba, {"ssm_dt_norms": True}), (mamba2, {"ssm_norm": False}),
                         (mamba, {"dropout": 0.1}), (mamba2, {"layer_attention": "MF"}),
                         (mamba, {"model_type": "jamba"})):
        with pytest.raises(TcalcError):
            family_of(replace(spec, **change))  # type: ignore[arg-type]
    assert isinstance(family_of(mamba2), Mamba2)
    bamba = _spec("bamba-tiny.json")
    for change in ({"layer_attention": "1S 1M 1F"}, {"dropout": 0.1}, {"ssm_norm": False},
                   {"bias_o": False}, {"rope_concat": False}):
        with pytest.raises(TcalcError):
            family_of(replace(bamba, **change))  # type: ignore[arg-type]
    fam = family_of(bamba)
    assert isinstance(fam, Bamba) and fam.kinds == "FMF"
    falcon = _spec("falcon_h1-tiny.json")
    for change in ({"layer_attention": "1P 1F"}, {"rope_concat": True}, {"dropout": 0.1}):
        with pytest.raises(TcalcError):
            family_of(replace(falcon, **change))  # type: ignore[arg-type]
    jamba = _spec("jamba-tiny.json")
    for change in ({"ssm_dt_norms": False}, {"bias_o": True}, {"router_topk": "renorm"},
                   {"d_ff_expert": 8}):
        with pytest.raises(TcalcError):
            family_of(replace(jamba, **change))  # type: ignore[arg-type]
    fam_j = family_of(jamba)
    assert isinstance(fam_j, Jamba) and fam_j.mixers == "MFMF" and fam_j.kinds == "cbcb"
    nonorm = family_of(_spec("falcon_h1-nonorm.json"))
    assert isinstance(nonorm, FalconH1) and not nonorm.norm and family_of(falcon).norm


def test_lora_keeps_the_rules() -> None:
    # no measured row covers LoRA; on CUDA the graph runs mamba_ssm's kernels
    # (tests/test_graph_ssm_cuda.py), under autocast too (tests/test_graph_autocast.py)
    spec = _spec("mamba-mixer.json")
    cpu = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                   device="cpu")
    ask = graph_costs.graph_activations
    assert ask(spec, cpu, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(spec, cpu, 64, amp=True, amp16=False, adapted_roles=None) is not None
    assert ask(spec, replace(cpu, device="cuda"), 64, amp=False, amp16=False,
               adapted_roles=None) is not None
    assert ask(spec, replace(cpu, device="cuda"), 64, amp=True, amp16=False,
               adapted_roles=None) is not None
    assert ask(spec, cpu, 64, amp=False, amp16=False,
               adapted_roles=frozenset(("in_proj",))) is None


def _structure(rng: random.Random, kind: str, attention: str = "eager",
               lora: bool = False) -> dict:
    """The structure-fixing choices of a configuration: type, flags, dtype, recomputation;
    Bamba's layer kinds, attention and LoRA targets."""
    targets = None
    if lora:
        targets = (frozenset(rng.choice((("in_proj",), ("q_proj", "v_proj"), ("all-linear",),
                                         ("out_proj", "gate_proj")))),
                   rng.choice((0.0, 0.05)))
    return {"kind": kind, "tied": rng.random() < 0.5,
            "conv_bias": rng.random() < 0.5, "bias": rng.random() < 0.5,
            "dtype": rng.choice((F32, BF16, F16)), "recompute": rng.choice(("none", "full")),
            "kinds": rng.choice(("FM", "MFM", "MMF", "M")), "attention": attention,
            "jamba_kinds": rng.choice(("cb", "cbcb", "ad", "d")),
            "lora": targets}


def _draw(rng: random.Random, s: dict
          ) -> tuple[Mamba | Mamba2 | Bamba | FalconH1 | Jamba, Run]:
    """Sizes drawn freely, with the 0/1 edge cases (one channel, one state, a kernel of 1,
    chunks of 1, T = 1, one group or one head per group, one K/V head)."""
    flags = {"tied": s["tied"], "conv_bias": s["conv_bias"], "bias": s["bias"]}
    common = {"V": rng.randint(3, 40), "E": rng.randint(1, 24), "N": rng.choice((1, 2, 5)),
              "Kc": rng.choice((1, 2, 4))}
    mixer2 = {"Gs": rng.choice((1, 2)), "Hg": rng.choice((1, 3)), "Ph": rng.choice((1, 4)),
              "Q": rng.choice((1, 4, 8))}
    fam: Mamba | Mamba2 | Bamba | FalconH1 | Jamba
    lora = None
    if s["kind"] == "jamba":
        Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
        X = rng.choice((1, 2, 4))
        kinds = s["jamba_kinds"]
        fam = Jamba(H=Hkv * G, Hkv=Hkv, dh=rng.choice((2, 4)), F=rng.randint(1, 20),
                    L=len(kinds), Di=rng.choice((1, 3, 16)), R=rng.choice((1, 4)), X=X,
                    K=rng.randint(1, X), kinds=kinds, grouped=s["bias"], **common, **flags)
        if s["lora"] is not None:
            lora = Lora(rng.choice((1, 4)), *s["lora"])
    elif s["kind"] == "falcon_h1":
        Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
        fam = FalconH1(H=Hkv * G, Hkv=Hkv, dh=rng.choice((2, 4)), F=rng.randint(1, 20),
                       L=rng.choice((1, 2, 3)), bias_attn=s["bias"], bias_mlp=s["conv_bias"],
                       norm=s["tied"], **common, **mixer2, **flags)
        if s["lora"] is not None:
            lora = Lora(rng.choice((1, 4)), *s["lora"])
    elif s["kind"] == "bamba":
        Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
        fam = Bamba(H=Hkv * G, Hkv=Hkv, dh=rng.choice((2, 4, 6)), F=rng.randint(1, 20),
                    L=len(s["kinds"]), kinds=s["kinds"], bias_attn=s["bias"],
                    bias_mlp=s["conv_bias"], **common, **mixer2, **flags)
        if s["lora"] is not None:
            lora = Lora(rng.choice((1, 4)), *s["lora"])
    elif s["kind"] == "mamba2":
        fam = Mamba2(L=rng.choice((1, 2, 3)), **common, **mixer2, **flags)
    else:
        fam = Mamba(L=rng.choice((1, 2, 3)), Di=rng.choice((1, 3, 16)), R=rng.choice((1, 4)),
                    **common, **flags)
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 17)), s["dtype"], "cpu",
              "eager" if s["kind"] in ("mamba", "mamba2") else s["attention"], lora=lora,
              recompute=s["recompute"])
    return fam, run


def test_compiled_equals_traced_on_random_mixer_configurations() -> None:
    # the compiled structures (the scan's repeated step as (T − 1)·…, the chunks as Tq, the
    # padding Tq·Q − T; the hybrids' layer kinds, attention, LoRA, Jamba's experts) against
    # the reference trace on every output and row name: 60 draws (that a structure serves
    # other sizes: test_a_structure_serves_other_sizes; its guards pin T = 1, a kernel of 1,
    # B = E and the like, so few random draws share one)
    clear_cache()
    rng = random.Random(20261128)  # noqa: S311 (not cryptography)
    structures = [_structure(rng, k) for k in ("mamba", "mamba", "mamba2", "mamba2")] + [
        _structure(rng, kind, attention, lora) for kind in ("bamba", "falcon_h1")
        for attention in ("eager", "sdpa") for lora in (False, True)] + [
        _structure(rng, "jamba", "eager", False), _structure(rng, "jamba", "sdpa", True)]
    for _ in range(60):
        assert_compiled_equals_traced(*_draw(rng, rng.choice(structures)))


def test_a_structure_serves_other_sizes() -> None:
    # one compiled structure per layout: other B, T, widths and layer counts replay it (B
    # apart from the heads: B = heads is a guard of its own, a stride order)
    clear_cache()
    for fam in (Mamba(V=30, E=16, L=2, Di=32, N=4, Kc=4, R=3),
                Mamba2(V=30, E=16, L=2, Gs=2, Hg=2, Ph=4, N=3, Kc=3, Q=8)):
        evaluate_fast(fam, Run(2, 20, BF16, "cpu", "eager"))
        before = len(cached())
        bigger = replace(fam, V=50, E=24, L=5, N=6)
        for run in (Run(3, 27, BF16, "cpu", "eager"), Run(5, 33, BF16, "cpu", "eager")):
            assert evaluate_fast(bigger, run).activation_bytes == \
                evaluate(bigger, run).activation_bytes
        assert len(cached()) == before


def test_a_sweep_over_t_counts_the_chunks() -> None:
    # Tq = T / Q rounded up is a symbol of its own: a sweep over T recomputes it per point
    fam = Mamba2(V=30, E=16, L=2, Gs=2, Hg=2, Ph=4, N=3, Kc=3, Q=8)
    Ts = [5, 8, 9, 16, 17, 33]
    out = sweep(fam, Run(2, 16, F32, "cpu", "eager"), T=Ts)
    assert [int(x) for x in out["activation_bytes"]] == [
        evaluate(fam, Run(2, T, F32, "cpu", "eager")).activation_bytes for T in Ts]
