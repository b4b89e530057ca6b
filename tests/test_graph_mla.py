"""The op graph's latent-attention decoders (transformer_calc/graph/families/mla.py: DeepSeek-V3,
DeepSeek-V3.2, GLM-MoE-DSA, LongCat-Flash, MiniCPM3) against every measured CPU row of their
configs, to the byte.

Fixtures (read, not changed): the rows of deepseek_v3-no-q-lora-bias (a plain q_proj, attention
biases, one dense layer and three with experts), deepseek_v3-all-dense (a query latent, dense
MLPs, a value narrower than the query), deepseek_v32-tiny (the lightning indexer, its top-k
mask in every layer), glm_moe_dsa-tiny (V3.2's layers; its indexer's RoPE interleaved),
longcat_flash-tiny (two sublayers and a shortcut MoE a layer, the latents scaled) and
minicpm3-tiny (MiniCPM3's scaled embedding and residuals, query 96
and value 8 wide) in tests/data/activations_*_cpu.jsonl, measured by
tools/measure_activations_hf.py (torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, each storage still held at the end of the forward once, parameters and
buffers excluded); rows whose "experts" key is absent or eager ran transformers' eager experts.
tests/data/activations_mla_shapes_latent_lora_cpu.jsonl holds 36 rows measured for this
family, held out while it was written (V=tests/data/hf/variants):

    python tools/measure_activations_hf.py $V/deepseek_v3-no-q-lora-bias.json \
        $V/deepseek_v3-all-dense.json $V/deepseek_v32-tiny.json $V/longcat_flash-tiny.json \
        $V/minicpm3-tiny.json -B 1 -T 37
    python tools/measure_activations_hf.py $V/deepseek_v3-no-q-lora-bias.json -B 3 -T 20 \
        --experts grouped_mm
    python tools/measure_activations_hf.py $V/minicpm3-tiny.json -B 2 -T 32 --lora 8 \
        --lora-targets q_a_proj,kv_b_proj --lora-dropout 0.05
    python tools/measure_activations_hf.py $V/deepseek_v3-all-dense.json -B 2 -T 32 --lora 4 \
        --lora-targets kv_a_proj_with_mqa,q_b_proj
    python tools/measure_activations_hf.py $V/deepseek_v32-tiny.json -B 2 -T 32 --lora 4 \
        --lora-targets wq_b,o_proj

(LoRA on the indexer's wq_b, which runs under no_grad: peft's adapters train, 2,688
parameters, and keep nothing; the rules were 8.7-13.8 % over.)

peft 0.21 converts DeepSeek-V3's, V3.2's, GLM-MoE-DSA's and LongCat-Flash's targets with
the qwen2_moe pattern (transformers' conversion_mapping._MODEL_TO_CONVERSION_PATTERN):
gate_proj, up_proj, down_proj and the router's gate become ParamWrapper adapters over the
router's weight and the fused 3-D expert weights (moe.py's parametrised reads), and on the
dense deepseek_v3-all-dense "all-linear" then adapts the attention alone (peft's count:
12,416 parameters, q_a/q_b/kv_a/kv_b/o_proj; mla.converted_all_linear).
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
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.compile import evaluate_fast
from transformer_calc.graph.families.mla import Mla, MlaMoe, converted_all_linear
from transformer_calc.graph.names import component_rows
from transformer_calc.memory import Settings
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

CONFIGS = ("deepseek_v3-no-q-lora-bias.json", "deepseek_v3-all-dense.json",
           "deepseek_v32-tiny.json", "glm_moe_dsa-tiny.json", "longcat_flash-tiny.json",
           "minicpm3-tiny.json")
# the model types peft 0.21 converts with the qwen2_moe pattern, and its mapping
# (utils/transformers_weight_conversion.py _MOE_TARGET_MODULE_MAPPING): the names it moves to
# target_parameters (ParamWrapper over the router's weight and the 3-D expert weights)
CONVERTED_TYPES = ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "longcat_flash")
MAPPING = {"gate": "gate.weight", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj",
           "down_proj": "down_proj"}


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


ROWS = measured_rows(CONFIGS)


def _converted(row: dict) -> bool:
    targets = set(row["lora"][1].split(",")) if row.get("lora") else set()
    return (_spec(row["config"]).model_type in CONVERTED_TYPES
            and bool(targets & {"all-linear", *MAPPING}))


def _family(row: dict) -> Mla:
    fam = family_of(_spec(row["config"]))
    assert isinstance(fam, Mla)
    if isinstance(fam, MlaMoe):
        fam = replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")
    return fam


def _run(row: dict, fam: Mla) -> Run:
    """The row's Run, with peft's conversion where it applies: all-linear resolves to the
    nn.Linear layers that keep their names (the attention's and the indexer's, LongCat's
    router classifier) and the mapping's, which become target_parameters (on a dense
    DeepSeek-V3 they match no parameter: its MLPs are not adapted)."""
    run = row_run(row)
    if not _converted(row):
        return run
    rank, targets, dropout = row["lora"]
    names = set(MAPPING) if targets == "all-linear" else set(targets.split(","))
    modules = set(converted_all_linear(fam)) if targets == "all-linear" else \
        names - MAPPING.keys()
    if targets == "all-linear" and isinstance(fam, MlaMoe) and fam.longcat:
        modules.add("classifier")
    return replace(run, lora=Lora(rank, frozenset(modules), dropout, parameters=frozenset(
        MAPPING[n] for n in names if n in MAPPING)))


def test_the_rows_cover_both_types_both_experts_paths_and_lora() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    # deepseek_v3-no-q-lora-bias 32 (12 converted by peft), -all-dense 8 (4), deepseek_v32-tiny
    # 32 (12), glm_moe_dsa-tiny 24 (12), longcat_flash-tiny 24 (12), minicpm3-tiny 20, and
    # the 36 of activations_mla_shapes_latent_lora_cpu.jsonl
    assert len(ROWS) == 176 and sum(map(_converted, ROWS)) == 52
    assert {r.get("experts", "eager") for r in ROWS} == {"eager", "grouped_mm"}
    assert {r["lora"][1] for r in ROWS if r.get("lora")} == {
        "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj", "gate_proj,up_proj,down_proj",
        "all-linear", "q_a_proj,kv_b_proj", "kv_a_proj_with_mqa,q_b_proj", "wq_b,o_proj"}
    assert {r["B"] for r in ROWS} == {1, 2, 3} and any(r["lora"][2] for r in ROWS
                                                       if r.get("lora"))


def _measured(row: dict) -> None:
    fam = _family(row)
    check_measured(row, fam, _run(row, fam), _spec(row["config"]), report_rows="names")


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows' names, bytes, layers, stacks and notes as the trace's), each to
    # the byte
    every_row(ROWS, _measured)


def test_peft_adapts_the_attention_alone_for_all_linear_on_a_dense_deepseek_v3() -> None:
    # peft 0.21.2's trainable count on deepseek_v3-all-dense with target_modules="all-linear"
    # (get_peft_model, r=8): q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj and o_proj of
    # the four layers, no MLP
    fam = family_of(_spec("deepseek_v3-all-dense.json"))
    assert isinstance(fam, Mla) and not isinstance(fam, MlaMoe)
    run = Run(2, 64, F32, "cpu", "sdpa", lora=Lora(8, converted_all_linear(fam)))
    assert evaluate(fam, run).trainable_params == 12_416


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    spec = _spec(config)
    for grouped in (False, True):
        for B, T in ((1, 64), (3, 100)):
            fam = family_of(spec)
            if isinstance(fam, MlaMoe):
                fam = replace(fam, grouped=grouped)
            r = evaluate(fam, Run(B, T, F32, "cpu", "sdpa"))
            assert r.params == r.trainable_params == count_params(spec).total
            # count_flops counts DSA's attention over the index_topk keys the indexer keeps;
            # transformers' eager and SDPA paths score all T keys and mask the rest, as
            # torch.utils.flop_counter counts them: 2 · H · (dq + dv) · (T - topk) per token
            # and layer more
            dq, dv = spec.qk_nope_head_dim + spec.qk_rope_head_dim, spec.v_head_dim
            dense = 2 * spec.n_layers * B * T * spec.n_heads * (dq + dv) * (
                T - min(spec.index_topk, T)) if spec.index_heads else 0
            assert r.forward_flops == B * T * count_flops(spec, T).total + dense


def test_the_families_and_their_flags() -> None:
    moe = family_of(_spec("deepseek_v3-no-q-lora-bias.json"))
    assert isinstance(moe, MlaMoe) and moe.pattern == "DEEE" and not moe.q_latent
    assert (moe.X, moe.K, moe.Fe, moe.Fs, moe.interleave) == (8, 2, 24, 48, True)
    dense = family_of(_spec("deepseek_v3-all-dense.json"))
    assert type(dense) is Mla and dense.q_latent
    assert (dense.rq, dense.dv, dense.dn + dense.dr) == (8, 8, 12)
    v32 = family_of(_spec("deepseek_v32-tiny.json"))
    assert isinstance(v32, MlaMoe) and v32.indexer and (v32.Hi, v32.di) == (4, 16)
    glm = family_of(_spec("glm_moe_dsa-tiny.json"))
    assert glm == replace(v32, Hi=2)  # V3.2's graph, two index heads
    longcat = family_of(_spec("longcat_flash-tiny.json"))
    assert isinstance(longcat, MlaMoe) and longcat.longcat and longcat.L == 2  # 4 sublayers
    assert not longcat.shared_expert and longcat.pattern == ""
    mini = family_of(_spec("minicpm3-tiny.json"))
    assert type(mini) is Mla and mini.minicpm and not mini.interleave and mini.tied


def test_minicpm3_keeps_its_cast_embedding_scale() -> None:
    # MiniCPM3ScaledWordEmbedding: torch.tensor(scale_emb = 12) is an int64 buffer, so
    # .to(weight.dtype) is a new 0-d tensor the product keeps (4 bytes fp32, 2 bf16; the rows
    # above measure it); with the table frozen (LoRA) nothing keeps it
    fam = family_of(_spec("minicpm3-tiny.json"))
    assert isinstance(fam, Mla)
    for dtype, nbytes in ((F32, 4), (BF16, 2)):
        rows = dict((r[0], r[1]) for r in component_rows(fam, Run(2, 64, dtype, "cpu", "eager")))
        assert rows["embed.scale"] == nbytes
    lora = Run(2, 64, F32, "cpu", "eager", lora=Lora(8, frozenset(("o_proj",))))
    assert "embed.scale" not in {r[0] for r in component_rows(fam, lora)}


def test_a_value_narrower_than_the_query_runs_sdpa_math_on_the_cpu() -> None:
    # sdp_utils_cpp.cpp check_head_dim_size_cpp: the CPU's flash kernel wants one head dim for
    # query, key and value (measured: minicpm3-tiny's SDPA rows in fp32 equal its eager ones)
    for config, expected in (("minicpm3-tiny.json", {"math"}),
                             ("deepseek_v3-all-dense.json", {"math"}),
                             ("deepseek_v3-no-q-lora-bias.json", {"cpu_flash"})):
        fam = family_of(_spec(config))
        assert evaluate_fast(fam, Run(2, 64, F32, "cpu", "sdpa")).structure.kernels == expected
    rows = {r["dtype"]: r["measured_bytes"] for r in ROWS if r["config"] == "minicpm3-tiny.json"
            and r["B"] == 2 and not r.get("lora") and r["attention"] == "sdpa"}
    eager = {r["dtype"]: r["measured_bytes"] for r in ROWS
             if r["config"] == "minicpm3-tiny.json" and r["B"] == 2 and not r.get("lora")
             and r["attention"] == "eager"}
    assert rows["fp32"] == eager["fp32"]


def test_other_latent_attention_layouts_are_refused() -> None:
    # the MLA types mla.py does not transcribe keep the per-tensor rules
    with pytest.raises(TcalcError):  # LongCat-Flash's identity experts save by the routing
        family_of(replace(_spec("longcat_flash-tiny.json"), zero_experts=2))
    base = _spec("deepseek_v3-no-q-lora-bias.json")
    for change in ({"router_topk": "none"}, {"router_fp32": False}, {"moe_post_norm": True},
                   {"n_kv_heads": 2}, {"bias_v": True}, {"d_ff_shared": 0},
                   {"model_type": "deepseek_v2"}, {"index_heads": 4},
                   {"rope_concat": True}):
        with pytest.raises(TcalcError):
            family_of(replace(base, **change))  # type: ignore[arg-type]
    assert family_of(replace(base, mtp_layers=1)) == family_of(base)  # not built


AUTOCAST = [json.loads(line) for line in
            (DATA / "autocast_activations_mla_cpu.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("row", AUTOCAST, ids=lambda r: f"{r['config']}-{r['attention']}")
def test_the_graph_under_autocast_meets_the_cpu_autocast_rows(row: dict) -> None:
    # tests/data/autocast_activations_mla_cpu.jsonl: fp32 models under
    # torch.autocast("cpu", torch.bfloat16) (tools/measure_activations_hf.py --autocast
    # tests/data/hf/variants/{deepseek_v3-all-dense,minicpm3-tiny}.json), every storage the
    # hooks saw, autocast's saved weight copies included: the CPU graph (the CPU's lists).
    # The CUDA graph casts the same ops here (the fp32 list's ops read fp32 already, the
    # latents' norms upcasting first), but SDPA's kernel is chosen per device: MiniCPM3's
    # 96-wide query over an 8-wide value runs CUDA's memory-efficient kernel, the CPU's math.
    fam = family_of(_spec(row["config"]))
    run = Run(row["B"], row["T"], F32, "cpu", row["attention"], BF16)
    assert sum(s.nbytes for s in evaluate(fam, run).saved) == row["measured_bytes"]
    cuda = replace(run, device="cuda")
    graph = sum(s.nbytes for s in evaluate(fam, cuda).saved)
    if row["config"] == "minicpm3-tiny.json" and row["attention"] == "sdpa":
        assert "efficient" in evaluate_fast(fam, cuda).structure.kernels
        assert graph != row["measured_bytes"]
    else:
        assert graph == row["measured_bytes"]


def test_autocast_reads_the_graph_with_experts_and_without() -> None:
    # DeepSeek-V3's sigmoid router under autocast: tests/test_graph_autocast.py
    s = Settings(precision="bf16", batch_size=2, seq_len=64, attention="sdpa", device="cuda")
    for config in ("deepseek_v3-no-q-lora-bias.json", "deepseek_v3-all-dense.json"):
        assert graph_costs.graph_activations(_spec(config), s, 64, amp=True, amp16=False,
                                             adapted_roles=None) is not None


def _mla_settings(rng: random.Random) -> dict:
    """Settings of an MLA configuration: DeepSeek-V3 (with or without experts) or MiniCPM3,
    a query latent or not, flags, dtype, device, kernel, LoRA targets, recomputation."""
    kind = rng.choice(("deepseek", "deepseek_moe", "deepseek_v32", "longcat", "minicpm"))
    targets = ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
               "wq_b", "weights_proj", "shared_experts.up_proj", "mlps.1.down_proj")
    if kind != "deepseek_moe":
        targets += ("gate_proj", "down_proj")
    lora = None
    if rng.random() < 0.4:
        lora = (frozenset(rng.sample(targets, rng.choice((1, 2)))), rng.choice((0.0, 0.05)))
    return {"kind": kind, "latent": rng.random() < 0.5, "bias": rng.random() < 0.5,
            "grouped": rng.random() < 0.5, "norm_topk": rng.random() < 0.5,
            "device": rng.choice(("cpu", "cuda")), "dtype": rng.choice((F32, BF16, F16)),
            "attention": rng.choice(("eager", "sdpa")), "lora": lora,
            "pattern": rng.choice(("", "", "DE", "EDE")), "use_cache": rng.random() < 0.3,
            "recompute": rng.choice(("none", "selective", "full"))}


def _mla_draw(rng: random.Random, s: dict) -> tuple[Mla, Run]:
    """Sizes drawn freely, with the 0/1 edge cases: one head, dn = dv, B = T = 1."""
    dr = rng.choice((2, 4, 8))
    dn = rng.choice((1, 2, 8))
    pattern = s["pattern"] if s["kind"] in ("deepseek_moe", "deepseek_v32") else ""
    longcat = s["kind"] == "longcat"
    L = len(pattern) if pattern else rng.choice((1, 2, 3))
    fam = Mla(V=rng.randint(5, 60), E=rng.randint(1, 40), H=rng.choice((1, 2, 3)), Hkv=1,
              dh=1, F=rng.randint(1, 30), L=L, tied=rng.random() < 0.3,
              bias_q=s["bias"], bias_k=s["bias"], bias_o=s["bias"],
              q_latent=s["latent"] or s["kind"] in ("deepseek_v32", "longcat"),
              rq=rng.randint(1, 20), rkv=rng.randint(1, 20), dn=dn,
              dr=dr, dv=rng.choice((dn, dn + dr, 3)), interleave=s["kind"] != "minicpm",
              minicpm=s["kind"] == "minicpm", indexer=s["kind"] == "deepseek_v32",
              Hi=rng.choice((1, 2, 4)), di=rng.choice((1, 8, 16)), longcat=longcat)
    if s["kind"] in ("deepseek_moe", "deepseek_v32", "longcat"):
        X = rng.choice((1, 2, 4, 8))
        fam = MlaMoe(**vars(fam), X=X, K=rng.randint(1, X), Fe=rng.randint(1, 30),
                     Fs=rng.randint(1, 30), pattern=pattern,
                     router="softmax" if longcat else "sigmoid",
                     norm_topk=s["norm_topk"] and not longcat, shared_expert=not longcat,
                     grouped=s["grouped"])
    lora = None if s["lora"] is None else Lora(rng.choice((1, 4)), *s["lora"])
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 33)), s["dtype"], s["device"],
                    s["attention"], use_cache=s["use_cache"], lora=lora,
                    recompute=s["recompute"])


def test_compiled_equals_traced_on_random_mla_configurations() -> None:
    # the compiled structures (the latents' and head widths as symbols, the kernel's
    # head-dim guards, dense/sparse patterns unrolled) against the reference trace: 30 draws,
    # and each at other sizes from the cache
    settings = [_mla_settings(random.Random(20261128 + i)) for i in range(16)]  # noqa: S311

    def draw(rng: random.Random):  # type: ignore[no-untyped-def]
        return _mla_draw(rng, rng.choice(settings))

    assert cache_hits_on_random_draws(draw, 20261128, 30) >= 3
