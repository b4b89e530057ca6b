"""The op graph's LFM2 family (transformer_calc/graph/families/lfm2.py: Lfm2ForCausalLM,
Lfm2MoeForCausalLM and Lfm3ForCausalLM as transformers 5.23 runs them on the CPU, the short
convolution through causal_conv1d_fn's torch fallback) and MiniMax (families/minimax.py:
MiniMaxForCausalLM, its lightning attention's Python loop over blocks, Mixtral's experts)
against every measured CPU row of their configs, to the byte.

Fixtures (torch 2.13 CPU, transformers 5.23, peft 0.21.2, saved_tensors_hooks, each storage
still held at the end of the forward once, parameters excluded):
- tests/data/activations_lfm2_minimax_whole_model_cpu.jsonl: the whole model's bytes of
  lfm2-tiny.json (a convolution layer, then attention with one K/V head; biases; a tied
  table) and lfm2-mixer.json (one convolution layer, no biases), B 1 T 37 and B 2 T 64,
  eager and SDPA, fp32 and bf16, written by
      for bt in "1 37" "2 64"; do set -- $bt
        python tools/measure_activations_hf.py tests/data/hf/variants/lfm2-{tiny,mixer}.json \\
          -B $1 -T $2
      done
  (tcalc_bytes dropped: the graph answers them);
- the LoRA rows (rank 8) of lfm2-tiny.json (q_proj,v_proj; q_proj,k_proj,v_proj,o_proj:
  LFM2 has no o_proj, peft adapts nothing by it; all-linear) and lfm2-mixer.json
  (all-linear) in activations_lora_moe_hybrid_targets_cpu.jsonl and
  activations_lora_survey_{qv,attn,all_linear_rest}_cpu.jsonl;
- lfm2_moe-tiny.json's (a convolution layer with the dense MLP, then attention and a
  convolution with 8 experts, 2 per token, behind the sigmoid router with its expert bias):
  the whole model's in activations_moe_dense_kimi_linear_cpu.jsonl (B 2 T 64, B 1 T 128),
  and with the grouped_mm experts in activations_lfm2_minimax_whole_model_cpu.jsonl
  (`tools/measure_activations_hf.py tests/data/hf/variants/{minimax,lfm2_moe}-tiny.json
  -B 2 -T 64 --experts grouped_mm`, minimax-tiny's too), and the LoRA rows (eager
  experts) in activations_lora_survey_{qv,attn,all_linear_rest}_cpu.jsonl;
- lfm3-tiny.json (convolutions, full attention, a sliding layer of 32; sandwich norms, the
  attention gate, fp32 RoPE): the whole model's in activations_decoders_encoders_cpu.jsonl
  (B 2 T 64, B 1 T 128) and the LoRA rows in the same LoRA fixtures;
- minimax-tiny.json (attention, lightning, attention; blocks of 8) and minimax-mixer.json
  (one lightning layer, blocks of 16): their whole-model rows in
  activations_lfm2_minimax_whole_model_cpu.jsonl, written as LFM2's (B 1 T 37: a short last
  block), and their LoRA rows (eager experts; all-linear: peft 0.21 converts the experts and
  the router too, ParamWrapper) in the same LoRA fixtures;
- lfm2-mixer.json's and minimax-mixer.json's mixer rows in activations_mixers_cpu.jsonl
  (`tools/measure_activations_hf.py --mixers`: the bytes first saved inside Lfm2ShortConv and
  MiniMaxLightningAttention).
The per-tensor rules (memory_report without the graph) on the whole-model rows: LFM2's 32
−12 … +4,604 bytes (−0.01 … +2.1 %), LFM2-MoE's 24 −7,180 … +16,892 (−0.3 … +2.4 %),
LFM3's 20 −16,396 … +74,748 (−0.4 … +2.7 %), MiniMax's 36 −8,756 … +12,764 (−0.8 …
+1.1 %); none exact. The graph meets every row.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
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
from transformer_calc.graph.evaluate import Family
from transformer_calc.graph.families.lfm2 import Lfm2, Lfm2Moe
from transformer_calc.graph.families.minimax import Minimax
from transformer_calc.memory import Settings
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("lfm2-tiny.json", "lfm2-mixer.json", "lfm2_moe-tiny.json", "lfm3-tiny.json",
           "minimax-tiny.json", "minimax-mixer.json")
# (the q_proj,v_proj rows of lfm2-tiny and minimax-tiny are in two fixture files: once here)
ROWS = list({json.dumps({k: v for k, v in r.items() if k != "file"}, sort_keys=True): r
             for r in measured_rows(CONFIGS)}.values())
MIXER_ROWS = [r for r in ROWS if r["file"] == "activations_mixers_cpu.jsonl"]
MODEL_ROWS = [r for r in ROWS if r["file"] != "activations_mixers_cpu.jsonl"]


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _family(row: dict) -> Family:
    """The row's graph, the experts on the path the row ran (rows without an experts key
    ran the tool's default, eager)."""
    fam = family_of(_spec(row["config"]))
    if isinstance(fam, Lfm2Moe | Minimax):
        return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")
    return fam


def _run(row: dict) -> Run:
    """The row's Run: peft 0.21's all-linear on MiniMax (a Mixtral-pattern MoE it converts)
    adapts its nn.Linear layers by name and wraps the router's and the experts' parameters
    (ParamWrapper), as memory_report asks the graph."""
    run = row_run(row)
    if run.lora is not None and row["config"].startswith("minimax") \
            and "all-linear" in run.lora.targets:
        run = replace(run, lora=replace(run.lora, targets=MINIMAX_LINEARS,
                                        parameters=MINIMAX_WRAPPED))
    return run


MINIMAX_LINEARS = frozenset(("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "output_gate",
                             "out_proj"))
MINIMAX_WRAPPED = frozenset(("gate.weight", "gate_up_proj", "down_proj"))


def test_the_rows_cover_the_types_dtypes_and_lora() -> None:
    lfm2 = [r for r in MODEL_ROWS if r["config"].startswith("lfm2-")]
    assert len(lfm2) == 16 + 16 and len(MIXER_ROWS) == 12
    minimax = [r for r in MODEL_ROWS if r["config"].startswith("minimax")]
    assert len(minimax) == 16 + 16 + 4
    assert {r["lora"][1] for r in minimax if r.get("lora")} == {
        "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj", "all-linear"}
    assert len([r for r in MODEL_ROWS if r["config"] == "lfm2_moe-tiny.json"]) == 20 + 4
    assert {r.get("experts") for r in MODEL_ROWS if r["config"] == "lfm2_moe-tiny.json"} == {
        "eager", "grouped_mm"}
    assert len([r for r in MODEL_ROWS if r["config"] == "lfm3-tiny.json"]) == 20
    assert {r["lora"][1] for r in lfm2 if r.get("lora")} == {
        "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj", "all-linear"}
    assert {(r["attention"], r["dtype"]) for r in lfm2} == {
        (a, d) for a in ("eager", "sdpa") for d in ("fp32", "bf16")}


def test_mixer_bytes_equal_the_measurement() -> None:
    every_row(MIXER_ROWS, _mixer_bytes)


def _mixer_bytes(row: dict) -> None:
    # the storages first saved inside Lfm2ShortConv (in_proj's input and output, B·x, the
    # padded convolution's output, out_proj's input) or MiniMaxLightningAttention;
    # parameters excluded but not buffers: the lightning layer's query_decay and key_decay
    # (H, Q, 1) and diagonal_decay (1, H, Q, Q) its products keep, which the graph holds as
    # model memory (the whole-model measurement leaves buffers out)
    fam = family_of(_spec(row["config"]))
    run = Run(row["B"], row["T"], DTYPES[row["dtype"]], "cpu", "eager")
    inside = sum(s.nbytes for s in evaluate(fam, run).saved
                 if ".conv" in s.scope or ".self_attn" in s.scope)
    if isinstance(fam, Minimax):
        buffers = fam.H * (2 * fam.Q + fam.Q ** 2) * DTYPES[row["dtype"]].itemsize
        inside += fam.kinds.count("M") * buffers
    assert inside == row["measured_bytes"]


def test_saved_bytes_and_memory_report_equal_the_measurement() -> None:
    # the reference trace (and peft's trainable count), and memory_report (its compiled
    # structure, the rows named as tcalc names them)
    every_row(MODEL_ROWS, lambda row: check_measured(
        row, _family(row), _run(row), _spec(row["config"]), compiled=None,
        report_rows="names"))


# torch.utils.flop_counter's forward FLOPs at B = 1 (the convolutions included):
# tools/reference_flops.py --seq-len T over the configs (torch 2.13, transformers 5.23)
FLOPS = {("lfm2-tiny.json", 37): 1_663_104, ("lfm2-tiny.json", 64): 3_097_344,
         ("lfm2-mixer.json", 37): 2_742_912, ("lfm2-mixer.json", 64): 4_743_936,
         ("lfm2_moe-tiny.json", 37): 7_579_136, ("lfm2_moe-tiny.json", 64): 13_551_104,
         ("lfm3-tiny.json", 37): 25_936_896, ("lfm3-tiny.json", 64): 45_732_864,
         ("minimax-tiny.json", 37): 7_649_536, ("minimax-tiny.json", 64): 14_123_008,
         ("minimax-mixer.json", 37): 3_339_008, ("minimax-mixer.json", 64): 5_799_936}


@pytest.mark.parametrize(("config", "T"), sorted(FLOPS))
def test_params_and_flops_equal_torch(config: str, T: int) -> None:
    spec = _spec(config)
    # (the experts as tools/reference_flops.py runs them: eager)
    r = evaluate(_family({"config": config}), Run(1, T, F32, "cpu", "eager"))
    assert r.params == r.trainable_params == count_params(spec).total
    assert r.forward_flops == FLOPS[config, T]


def test_other_layouts_are_refused() -> None:
    lfm2 = _spec("lfm2-tiny.json")
    fam = family_of(lfm2)
    assert isinstance(fam, Lfm2) and fam.mixers == "MF" and fam.conv_bias and fam.tied
    for change in ({"qk_norm": "none"}, {"bias_o": True}, {"dropout": 0.1},
                   {"activation": "gelu"}, {"sliding_window": 16}, {"d_head": 7}):
        with pytest.raises(TcalcError):
            family_of(replace(lfm2, **change))  # type: ignore[arg-type]
    moe = _spec("lfm2_moe-tiny.json")
    fam_moe = family_of(moe)
    assert isinstance(fam_moe, Lfm2Moe) and fam_moe.kinds == "cbd" and fam_moe.Fe == 32
    with pytest.raises(TcalcError):  # experts where LFM2 has none
        family_of(replace(lfm2, layer_ffn="1D 1E", n_experts=4, top_k=2))
    lfm3 = _spec("lfm3-tiny.json")
    fam3 = family_of(lfm3)
    assert isinstance(fam3, Lfm2) and fam3.lfm3 and fam3.mixers == "MMFMSM" and fam3.window == 32
    for change in ({"sandwich_norm": False}, {"attn_gate": "none"}, {"rope_fp32": False},
                   {"attn_gate_bias": "head"}):
        with pytest.raises(TcalcError):
            family_of(replace(lfm3, **change))  # type: ignore[arg-type]
    with pytest.raises(TcalcError):  # LFM2 has no sliding layers
        family_of(replace(lfm2, layer_attention="1M 1S", sliding_window=16))
    minimax = _spec("minimax-tiny.json")
    fam_m = family_of(minimax)
    assert isinstance(fam_m, Minimax) and fam_m.kinds == "FMF" and fam_m.Q == 8
    mixer = family_of(_spec("minimax-mixer.json"))  # no attention layer: the mixer's heads
    assert isinstance(mixer, Minimax) and (mixer.H, mixer.dh) == (4, 16)
    for change in ({"ssm_heads": 2}, {"bias_q": True}, {"attention_dropout": 0.1},
                   {"router_topk": "renorm"}, {"layer_ffn": "1D 2E"}):
        with pytest.raises(TcalcError):
            family_of(replace(minimax, **change))  # type: ignore[arg-type]


def test_cuda_and_recompute_keep_the_rules() -> None:
    # on CUDA transformers runs causal-conv1d's kernel where installed (the graph's
    # CausalConv1dFn: tests/test_graph_ssm_defaults.py); a model of convolutions alone does
    # not say the rotary table's width, which full recomputation keeps. CPU autocast reads
    # the graph (tests/test_graph_autocast.py)
    tiny, mixer = _spec("lfm2-tiny.json"), _spec("lfm2-mixer.json")
    cpu = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                   device="cpu")
    ask = graph_costs.graph_activations
    assert ask(tiny, cpu, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(tiny, cpu, 64, amp=True, amp16=False, adapted_roles=None) is not None
    assert ask(tiny, replace(cpu, device="cuda"), 64, amp=False, amp16=False,
               adapted_roles=None) is not None
    full = replace(cpu, recompute="full")
    assert ask(tiny, full, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(mixer, full, 64, amp=False, amp16=False, adapted_roles=None) is None
    # the attention's out_proj and the convolution's are one name to peft
    lora = replace(cpu, lora_rank=8, lora_targets=("q", "o"))
    assert ask(tiny, lora, 64, amp=False, amp16=False,
               adapted_roles=frozenset(("q", "o"))) is None
    assert ask(tiny, lora, 64, amp=False, amp16=False,
               adapted_roles=frozenset(("q", "o", "out_proj"))) is not None
    # MiniMax's lightning loop: the same torch ops on either device (no kernel)
    minimax = _spec("minimax-tiny.json")
    assert ask(minimax, cpu, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(minimax, cpu, 64, amp=True, amp16=False, adapted_roles=None) is not None
    assert ask(minimax, replace(cpu, device="cuda"), 64, amp=False, amp16=False,
               adapted_roles=None) is not None


def _draw_lfm2(rng):  # type: ignore[no-untyped-def]
    """Sizes drawn freely, with the 0/1 edge cases (one channel, a kernel of 1, T = 1, one
    K/V head, one expert); the layers' kinds (with experts: LFM2-MoE, eager or grouped),
    dtype, attention, LoRA and recomputation."""
    Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
    kinds = rng.choice(("ca", "ac", "c", "a", "cca", "cbd", "bd", "d", "csca", "sa", "cs"))
    lfm3 = "s" in kinds or rng.random() < 0.2
    sizes = dict(V=rng.randint(3, 40), E=rng.randint(1, 24), H=Hkv * G, Hkv=Hkv,
                 dh=rng.choice((2, 4)), F=rng.randint(1, 20), L=len(kinds),
                 Kc=rng.choice((1, 2, 4)), kinds=kinds, tied=rng.random() < 0.5,
                 conv_bias=rng.random() < 0.5)
    fam: Lfm2 = Lfm2(**sizes, lfm3=lfm3, window=rng.choice((1, 5, 40)))  # type: ignore[arg-type]
    if set(kinds) & set("bd"):
        X = rng.choice((1, 2, 4))
        fam = Lfm2Moe(**sizes, X=X, K=rng.randint(1, X), Fe=rng.randint(1, 12),  # type: ignore[arg-type]
                      grouped=rng.random() < 0.5)
    lora = None
    if rng.random() < 0.4:
        targets = rng.choice((("in_proj",), ("q_proj", "v_proj"), ("all-linear",),
                              ("out_proj", "w1")))
        lora = Lora(rng.choice((1, 4)), frozenset(targets), rng.choice((0.0, 0.05)))
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 17)),
              rng.choice((F32, BF16, F16)), "cpu", rng.choice(("eager", "sdpa")), lora=lora,
              recompute=rng.choice(("none", "full")))
    return fam, run


def _draw_minimax(rng):  # type: ignore[no-untyped-def]
    """Sizes drawn freely (one head, one expert, blocks of 1 and blocks longer than T: one
    block; T a multiple of Q or not), the layers' kinds, the experts' path, dtype,
    attention, LoRA (peft's conversion of the experts and router among them) and
    recomputation."""
    Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
    kinds = rng.choice(("FMF", "M", "MF", "MM"))
    X = rng.choice((1, 2, 4))
    fam = Minimax(V=rng.randint(3, 40), E=rng.randint(1, 24), H=Hkv * G, Hkv=Hkv,
                  dh=rng.choice((2, 4)), L=len(kinds), X=X, K=rng.randint(1, X),
                  Fe=rng.randint(1, 12), Q=rng.choice((1, 3, 8)), kinds=kinds,
                  tied=rng.random() < 0.5, grouped=rng.random() < 0.5)
    lora = None
    if rng.random() < 0.4:
        targets, wrapped = rng.choice(((("q_proj", "v_proj"), ()),
                                       (MINIMAX_LINEARS, MINIMAX_WRAPPED),
                                       (("qkv_proj", "output_gate"), ())))
        lora = Lora(rng.choice((1, 4)), frozenset(targets), 0.0, None, frozenset(wrapped))
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 16, 17)),
              rng.choice((F32, BF16, F16)), "cpu", rng.choice(("eager", "sdpa")), lora=lora,
              recompute=rng.choice(("none", "full")))
    return fam, run


def test_compiled_equals_traced_on_random_configurations() -> None:
    # the compiled structures (the layers' kinds, attention, LoRA, recomputation; MiniMax's
    # blocks: the first, the full ones as (Tq − 2)·…, the last of T − (Tq − 1)·Q) against
    # the reference trace on every output and row name, and another size from the cache
    cache_hits_on_random_draws(_draw_lfm2, 20261128, 12)
    cache_hits_on_random_draws(_draw_minimax, 20261129, 12)
