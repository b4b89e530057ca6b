"""The op graph's mixture-of-experts decoders (transformer_calc/graph/families/moe.py: Mixtral,
Qwen2-MoE, Qwen3-MoE, OLMoE, PhiMoE, HunYuan-MoE) against every measured CPU row of their
configs, to the byte.

Fixtures (read, not changed): the rows of mixtral-top1, qwen2_moe-tiny,
qwen3_moe-sparse-step, phimoe-top1 and hunyuan_v1_moe-tiny in
tests/data/activations_*_cpu.jsonl,
tests/data/activations_moe_norm_topk_cpu.jsonl (qwen3_moe-norm-topk: norm_topk_prob on) and
tests/data/activations_olmoe_cpu.jsonl (olmoe-tiny: norm_topk_prob on; eager experts at
B 2 T 64 with and without LoRA on q,v and q,k,v,o, grouped_mm at B 1 T 128), measured by
tools/measure_activations_hf.py (torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, each storage still held at the end of the forward once, parameters
excluded); rows without an "experts" key ran transformers' eager experts (the tool's
default), the others grouped_mm. The measured bytes do not depend on the routing: the eager
loop's per-expert tensors sum over the experts hit to the K·B·T routed slots (the graph runs
them as one expert), and an expert no token picks saves nothing.

The rows whose LoRA targets peft 0.21 converts (Mixtral's router and experts, the qwen2_moe
pattern's gate_proj/up_proj/down_proj on Qwen3-MoE and OLMoE, all-linear on them) wrap the
router's weight and the 3-D expert weights in ParamWrapper parametrisations (W + s·B·A);
tests/data/activations_moe_peft_param_wrapper_cpu.jsonl adds such rows with grouped_mm
experts, with OLMoE's all-linear and with Mixtral's down projection alone:

    python tools/measure_activations_hf.py tests/data/hf/variants/mixtral-top1.json \
        --lora 8 --lora-targets w1,w2,w3 --experts grouped_mm
    python tools/measure_activations_hf.py tests/data/hf/variants/qwen3_moe-sparse-step.json \
        --lora 8 --experts grouped_mm
    python tools/measure_activations_hf.py tests/data/hf/variants/olmoe-tiny.json --lora 8
    python tools/measure_activations_hf.py tests/data/hf/variants/mixtral-top1.json \
        --lora 8 --lora-targets w2 --tcalc-targets down
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
    row_settings,
    spec_of,
)

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import cached, clear_cache
from transformer_calc.graph.families.moe import Moe
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("mixtral-top1.json", "qwen2_moe-tiny.json", "qwen3_moe-sparse-step.json",
           "qwen3_moe-norm-topk.json", "olmoe-tiny.json", "phimoe-top1.json",
           "hunyuan_v1_moe-tiny.json")
# peft 0.21's _MOE_TARGET_MODULE_MAPPING (utils/transformers_weight_conversion.py): the
# targets it converts into target_parameters, per conversion pattern; all-linear resolves to
# the nn.Linear layers' names (the attention's, below) and all of these
MAPPING = {"mixtral": {"gate": "gate.weight", "w1": "gate_up_proj", "w3": "gate_up_proj",
                       "w2": "down_proj"},
           "qwen2_moe": {"gate": "gate.weight", "gate_proj": "gate_up_proj",
                         "up_proj": "gate_up_proj", "down_proj": "down_proj"}}
# (Qwen2-MoE itself is not converted: its gate_proj/up_proj/down_proj are its dense and
# shared experts' nn.Linear layers)
PATTERN = {"mixtral-top1.json": "mixtral", "qwen3_moe-sparse-step.json": "qwen2_moe",
           "qwen3_moe-norm-topk.json": "qwen2_moe", "olmoe-tiny.json": "qwen2_moe",
           "hunyuan_v1_moe-tiny.json": "qwen2_moe"}
# all-linear's nn.Linear layers that keep their names: the attention's, HunYuan's router
ATTENTION = frozenset(("q_proj", "k_proj", "v_proj", "o_proj"))
LINEAR = {"hunyuan_v1_moe-tiny.json": ATTENTION | {"wg"}}


def _rows() -> list[dict]:
    return measured_rows(CONFIGS)


def _converted(row: dict) -> bool:
    targets = set(row["lora"][1].split(",")) if row.get("lora") else set()
    pattern = PATTERN.get(row["config"])
    return pattern is not None and bool(targets & {"all-linear", *MAPPING[pattern]})


ROWS = _rows()
CONVERTED = [r for r in ROWS if _converted(r)]


def converted_run(row: dict) -> Run:
    """The row's Run, with peft's conversion of the MoE targets where it applies."""
    run = row_run(row)
    if not _converted(row):
        return run
    rank, targets, dropout = row["lora"]
    mapping = MAPPING[PATTERN[row["config"]]]
    names = set(mapping) if targets == "all-linear" else set(targets.split(","))
    modules = LINEAR.get(row["config"], ATTENTION) if targets == "all-linear" else \
        names - mapping.keys()
    return replace(run, lora=Lora(rank, frozenset(modules), dropout,
                                  parameters=frozenset(mapping[n] for n in names
                                                       if n in mapping)))


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def _family(row: dict) -> Moe:
    fam = family_of(_spec(row["config"]))
    assert isinstance(fam, Moe)
    return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")


def test_the_rows_cover_the_six_types_both_experts_paths_and_lora() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    assert len(ROWS) == 36 + 28 + 32 + 8 + 16 + 16 + 16 + 24 and len(CONVERTED) == 24 + 16 + 8
    assert {r.get("experts", "eager") for r in ROWS} == {"eager", "grouped_mm"}
    assert {r.get("experts", "eager") for r in CONVERTED} == {"eager", "grouped_mm"}
    assert {r["lora"][1] for r in ROWS if r.get("lora")} == {
        "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj", "gate_proj,up_proj,down_proj",
        "shared_expert_gate", "all-linear", "gate", "w1,w2,w3", "w2"}


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows' names, bytes, layers, stacks and notes as the trace's; the
    # formula's text may name H for G·Hkv where the compiled structure's guards made them
    # equal), each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, _family(row), converted_run(row), _spec(row["config"]), report_rows="names"))


def test_param_wrapper_keeps_the_merged_weight_where_its_input_needs_a_gradient() -> None:
    # mixtral-top1 (X 4, E 256, Fe 512, two layers), w1,w2,w3 in bf16: the fused gate_up
    # adapter has rank 2·8 over the 4 experts. Its baddbmm keeps the factors' bf16 copies in
    # both layers; the merged weight is kept by the matmul that reads it only where that
    # matmul's input needs a gradient: down_proj's everywhere (its input comes from the
    # merged gate_up), gate_up_proj's from the second layer on (the first layer's input
    # comes from the frozen embeddings)
    row = next(r for r in CONVERTED if r["config"] == "mixtral-top1.json"
               and r["lora"][1] == "w1,w2,w3" and r["dtype"] == "bf16"
               and r["attention"] == "eager" and r.get("experts") == "eager")
    rows = {r[0]: (r[1], r[4]) for r in memory_report(_spec(row["config"]),
                                                      row_settings(row)).activations.rows}
    X, E, Fe, r = 4, 256, 512, 8
    assert rows["decoder.ffn.experts.gate_up.lora_merged_weight"] == (X * 2 * Fe * E * 2, 1)
    assert rows["decoder.ffn.experts.out.lora_merged_weight"] == (X * E * Fe * 2, 2)
    assert rows["decoder.ffn.experts.gate_up.lora_weight_casts"] == (
        X * 2 * r * (E + 2 * Fe) * 2, 2)
    assert rows["decoder.ffn.experts.out.lora_weight_casts"] == (X * r * (Fe + E) * 2, 2)


def test_peft_conversion_targets() -> None:
    # the conversion as memory_report hands it to the graph: w1,w2,w3 and gate_proj,...
    # become target parameters, all-linear keeps the attention's nn.Linear names
    spec = _spec("qwen3_moe-sparse-step.json")
    s = Settings(precision="fp32", batch_size=1, seq_len=8, attention="eager",
                 device="cpu", experts="eager", lora_rank=4, lora_targets=("all-linear",))
    fam = graph_costs._family(spec)
    assert fam is not None
    lora = graph_costs._lora(fam, s, frozenset(("q", "k", "v", "o", "router",
                                                  "experts.gate_up", "experts.out")),
                             spec.peft_moe)
    assert lora is not None and lora.targets == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert lora.parameters == {"gate.weight", "gate_up_proj", "down_proj"}
    assert lora.wraps("model.layers.1.mlp.gate.weight")
    assert not lora.wraps("model.layers.0.mlp.down_proj.weight")
    # peft refuses lora_dropout on a ParamWrapper: the graph does not answer
    dropped = replace(s, lora_dropout=0.1)
    assert graph_costs._lora(fam, dropped, frozenset(("experts.out",)), spec.peft_moe) is None


def test_norm_topk_prob_keeps_the_renormalisation() -> None:
    # Qwen3MoeTopKRouter with norm_topk_prob: router_top_value /= its sum, in place; the
    # division keeps the sum (B·T · 4) and a clone of the top values (K·B·T · 4) per layer
    # with experts (qwen3_moe-norm-topk.json: one of its four layers)
    on, off = _spec("qwen3_moe-norm-topk.json"), _spec("qwen3_moe-sparse-step.json")
    assert (on.router_topk, off.router_topk) == ("renorm_cast", "cast")
    assert _spec("mixtral-top1.json").router_topk == "renorm"
    run = Run(2, 64, F32, "cpu", "eager")
    diff = evaluate(family_of(on), run).activation_bytes - \
        evaluate(family_of(off), run).activation_bytes
    assert diff == 2 * 64 * (2 + 1) * 4


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    for grouped in (False, True):
        for B, T in ((1, 64), (3, 100)):
            fam = replace(family_of(spec), grouped=grouped)
            r = evaluate(fam, Run(B, T, F32, "cpu", "sdpa"))
            assert r.params == r.trainable_params == count_params(spec).total
            # count_flops is per token at context T; the graph counts the B·T tokens'
            # matmuls, the experts' over the K·B·T routed slots (grouped_mm's too, which
            # torch.utils.flop_counter does not count)
            assert r.forward_flops == B * T * count_flops(spec, T).total


def test_other_moe_layouts_are_refused() -> None:
    base = _spec("qwen2_moe-tiny.json")
    for change in ({"n_shared_experts": 2}, {"router_topk": "none"}, {"router_bias": True},
                   {"d_ff_shared": 0}):
        with pytest.raises(TcalcError):
            family_of(replace(base, **change))  # type: ignore[arg-type]
    fam = family_of(base)
    assert isinstance(fam, Moe) and fam.pattern == "DEE" and fam.shared_expert
    phimoe = family_of(_spec("phimoe-top1.json"))
    assert isinstance(phimoe, Moe) and phimoe.layer_norm and phimoe.router == "sparsemixer"


def test_rows_are_named_by_group_where_layers_differ() -> None:
    # qwen2_moe-tiny: a dense layer, then two with experts; named as the plan's groups
    # (decoder.dense, decoder.moe), as the rules name theirs
    row = {"config": "qwen2_moe-tiny.json", "attention": "eager", "dtype": "fp32", "B": 2,
           "T": 64}
    rows = memory_report(_spec(row["config"]), row_settings(row)).activations.rows
    stacks = {r[0]: (r[5], r[4]) for r in rows}
    assert stacks["decoder.dense.ffn.activation"] == ("decoder.dense", 1)
    assert stacks["decoder.moe.ffn.routed_input"] == ("decoder.moe", 2)
    assert stacks["decoder.moe.attn.softmax"] == ("decoder.moe", 2)
    assert not any(r[0].startswith("decoder.ffn") for r in rows)


def test_other_experts_paths_keep_the_rules() -> None:
    # Llama 4's experts run every expert on every token (experts_every_token): not the loop
    # the graph transcribes (autocast: tests/test_graph_moe_amp.py)
    spec = _spec("mixtral-top1.json")
    s = Settings(precision="bf16", batch_size=2, seq_len=64, attention="sdpa", device="cuda",
                 experts="auto")
    fam = family_of(spec)
    every = replace(spec, experts_grouped=False, experts_every_token=True)
    assert graph_costs._experts(every, fam, s, False) is None
    assert graph_costs._experts(spec, fam, s, False) == replace(fam, grouped=True)
    assert graph_costs._experts(spec, fam, replace(s, experts="eager"), True) == replace(
        fam, grouped=False)


def _moe_settings(rng: random.Random) -> dict:
    """Settings of an MoE configuration: type, flags, dtype, device, kernel, LoRA targets
    over what peft adapts as nn.Linear and the parameters its MoE conversion wraps,
    recomputation."""
    kind = rng.choice(("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "phimoe", "hunyuan"))
    targets = ("q_proj", "v_proj", "o_proj") + (
        ("gate_proj", "down_proj", "shared_expert_gate") if kind == "qwen2_moe" else
        ("router",) if kind == "phimoe" else ("wg",) if kind == "hunyuan" else ())
    lora = None
    if rng.random() < 0.4:
        lora = (frozenset(rng.sample(targets, rng.choice((1, 2)))), rng.choice((0.0, 0.05)),
                frozenset())
    if kind in ("mixtral", "qwen3_moe", "olmoe", "hunyuan") and rng.random() < 0.4:
        # peft's conversion: ParamWrapper over the router and expert weights (no dropout)
        wrapped = ("gate.weight", "gate_up_proj", "down_proj")
        lora = (frozenset(rng.sample(targets, rng.choice((0, 1)))), 0.0,
                frozenset(rng.sample(wrapped, rng.choice((1, 2, 3)))))
    return {"kind": kind, "grouped": rng.random() < 0.5, "norm_topk": rng.random() < 0.5,
            "device": rng.choice(("cpu", "cuda")), "dtype": rng.choice((F32, BF16, F16)),
            "attention": rng.choice(("eager", "sdpa")), "lora": lora,
            "pattern": rng.choice(("", "", "DE", "EDE", "DEDD")),
            "recompute": rng.choice(("none", "selective", "full"))}


def _moe_draw(rng: random.Random, s: dict) -> tuple[Moe, Run]:
    """Sizes drawn freely, with the 0/1 edge cases: one expert, K = 1 or K = X, B = T = 1."""
    Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
    X = rng.choice((1, 2, 4, 8))
    pattern = s["pattern"]
    L = len(pattern) if pattern else rng.choice((1, 2, 3))
    fam = Moe(V=rng.randint(5, 60), E=rng.randint(1, 40), H=Hkv * G, Hkv=Hkv,
              dh=rng.choice((2, 4, 8)), F=rng.randint(1, 30), L=L,
              bias_q=s["kind"] == "qwen2_moe", bias_k=s["kind"] == "qwen2_moe",
              bias_v=s["kind"] == "qwen2_moe",
              qk_norm={"qwen3_moe": "head", "olmoe": "width", "hunyuan": "rotated"}.get(
                  s["kind"], "none"),
              X=X, K=rng.randint(1, X), Fe=rng.randint(1, 30), Fs=rng.randint(1, 30),
              pattern=pattern, layer_norm=s["kind"] == "phimoe",
              router={"mixtral": "mixtral", "phimoe": "sparsemixer",
                      "hunyuan": "hunyuan"}.get(s["kind"], "qwen"),
              norm_topk=s["norm_topk"], shared_expert=s["kind"] == "qwen2_moe",
              shared_mlp=s["kind"] == "hunyuan",
              grouped=s["grouped"])
    lora = None if s["lora"] is None else Lora(rng.choice((1, 4)), *s["lora"][:2],
                                               parameters=s["lora"][2])
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 33)), s["dtype"], s["device"],
                    s["attention"], lora=lora, recompute=s["recompute"])


def test_compiled_equals_traced_on_random_moe_configurations() -> None:
    # the compiled structures (K·B·T slots as a polynomial, dense/sparse patterns unrolled,
    # all-sparse stacks replayed) against the reference trace on every output: 60 draws
    clear_cache()
    rng, hits, draws = random.Random(20261127), 0, 60  # noqa: S311 (not cryptography)
    settings = [_moe_settings(rng) for _ in range(16)]
    for _ in range(draws):
        fam, run = _moe_draw(rng, rng.choice(settings))
        before = len(cached())
        assert_compiled_equals_traced(fam, run)
        hits += len(cached()) == before
    # (a structure's guards pin K = 1, K = X, B = E and the like: fewer draws share one)
    assert hits >= 2
