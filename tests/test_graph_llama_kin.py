"""Dense decoders near Llama on the op graph (transformer_calc/graph/families/llama.py with a
flag per difference, mapped by graph/variants.py): Starcoder2 (LayerNorm, an ungated
gelu_pytorch_tanh MLP of c_fc and c_proj, biases, embedding and residual dropouts, a sliding
window over every layer), Seed-OSS (residual dropout beside the attention's), Arcee and
Jais2 (an ungated ReLU² MLP; Jais2 under LayerNorm), GLM and GLM-4 (GLM's interleaved partial
RoPE, the fused gate_up_proj; GLM-4's norms over each sublayer's output), HyperCLOVA X (norms
over each sublayer's output, muP multipliers) and EuroBERT (bidirectional, a masked-LM loss).
Every measured CPU row of their configs, to the byte, through the trace (a few per config
through the compiled structure and memory_report too); family_of maps them (and refuses
what the graph does not transcribe); the compiled path equals the trace on random
configurations.

Fixture: tests/data/activations_llama_kin_cpu.jsonl (tools/measure_activations_hf.py, the
commands in its docstring: torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, use_cache=False; full training B 2 T 64 and B 1 T 37, eager and SDPA,
fp32 and bf16; peft's LoRA rank 8 on all-linear and on q_proj,v_proj; an fp32 model under
torch.autocast("cpu", torch.bfloat16), whose rows count autocast's saved weight copies too).
The configs: tests/data/hf/variants/*-tiny.json (each config class's defaults with small
sizes), starcoder2-sliding-dropout.json (a 16-token window, dropouts 0.1, 0.1, 0.05) and
glm-quarter-rotary.json (GLM, 3 layers, a quarter of each head rotated; full training and
LoRA on all-linear at B 2 T 64 only). Youtu (DeepSeek-V3's latent attention, families/mla.py)
and BLOOM (families/bloom.py, eager only) are here too.

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
    row_settings,
    spec_of,
)
from test_graph import _rules_report

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.bloom import Bloom
from transformer_calc.graph.families.llama import Llama
from transformer_calc.graph.families.mla import Mla
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import memory_report
from transformer_calc.params import count_params

# config -> its model type
CONFIGS = {"starcoder2-tiny.json": "starcoder2", "starcoder2-sliding-dropout.json": "starcoder2",
           "seed_oss-tiny.json": "seed_oss", "arcee-tiny.json": "arcee",
           "jais2-tiny.json": "jais2", "glm4-tiny.json": "glm4",
           "hyperclovax-tiny.json": "hyperclovax", "youtu-tiny.json": "youtu",
           "eurobert-tiny.json": "eurobert", "bloom-tiny.json": "bloom",
           "glm-quarter-rotary.json": "glm"}
ROWS = measured_rows(tuple(CONFIGS))
AUTOCAST = [r for r in ROWS if r.get("autocast")]


def test_the_rows_cover_every_config() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    for config in CONFIGS:
        rows = [r for r in ROWS if r["config"] == config]
        assert any(not r["lora"] for r in rows) and any(r["lora"] for r in rows)
        assert any(r.get("autocast") for r in rows) or config == "glm-quarter-rotary.json"
        assert {r["attention"] for r in rows} == (
            {"eager", "sdpa"} if spec_of(config).sdpa_path else {"eager"})


def _reported(row: dict) -> bool:
    """The rows also checked through the compiled structure and memory_report (each
    structure compiles once, the suite's main cost): per config, B = 1 in bf16 under both
    attentions and LoRA in fp32 under SDPA (eager where the class has no SDPA path)."""
    kernel = "sdpa" if spec_of(row["config"]).sdpa_path else "eager"
    return (row["B"] == 1 and row["dtype"] == "bf16") or (
        bool(row["lora"]) and (row["dtype"], row["attention"]) == ("fp32", kernel))


def test_every_row_equals_the_measurement() -> None:
    # every row's trace (and peft's trainable count); on _reported's rows the compiled
    # structure and memory_report too (its total, and its rows as the trace names them),
    # each to the byte
    every_row([r for r in ROWS if not r.get("autocast")], lambda row: check_measured(
        row, family_of(spec_of(row["config"])), row_run(row),
        spec_of(row["config"]) if _reported(row) else None,
        compiled="bytes" if _reported(row) else None))


def _autocast(row: dict) -> None:
    # an fp32 model under CPU autocast: every saved storage (autocast's weight copies
    # included) against the measurement, traced and through memory_report (--mixed: a 16-bit
    # LoRA base, so the LoRA rows, whose base is fp32, are checked on the trace only)
    spec = spec_of(row["config"])
    fam = family_of(spec)
    run = replace(row_run(row), autocast=BF16)
    traced = evaluate(fam, run)
    assert sum(s.nbytes for s in traced.saved) == row["measured_bytes"]
    if row["lora"]:
        return
    report = memory_report(spec, row_settings(row, precision="bf16", mixed=True))
    copies = sum(s.nbytes for s in traced.saved if s.storage.kind == "weight_copy")
    assert report.activations.total + copies == row["measured_bytes"]


def test_autocast_rows_equal_the_measurement() -> None:
    every_row(AUTOCAST, _autocast)


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    # parameters: count_params (itself pinned against transformers on the meta device);
    # FLOPs: count_flops per token at context T, the graph's matmuls over B·T tokens (T
    # below every sliding window, where tcalc counts a window's keys)
    spec = spec_of(config)
    fam = family_of(spec)
    for attention in ("eager", "sdpa") if spec.sdpa_path else ("eager",):
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


# -- where the rules went wrong -------------------------------------------------------------
def _rules(row: dict) -> int:
    return _rules_report(spec_of(row["config"]), row_settings(row)).activations.total


def _labels(row: dict) -> int:
    """The loss's 0-d total_weight (4 bytes) and, at B = 1, the padded labels' storage (8
    more): what the rules leave out of every row."""
    return 4 + (8 if row["B"] == 1 else 0)


def test_seed_oss_has_no_embedding_dropout() -> None:
    # SeedOssModel applies no dropout to the embeddings (residual_dropout acts after o_proj
    # and the MLP, attention_dropout on the probabilities); the rules take the residual
    # probability for the embeddings too and keep a (B, T, d_model) noise tensor in full
    # training: +0.90 to +1.62 % on the eight rows
    rows = [r for r in ROWS if r["config"] == "seed_oss-tiny.json" and not r["lora"]
            and not r.get("autocast")]
    assert len(rows) == 8
    fam = family_of(spec_of("seed_oss-tiny.json"))
    for row in rows:
        itemsize = 4 if row["dtype"] == "fp32" else 2
        assert _rules(row) - row["measured_bytes"] == \
            row["B"] * row["T"] * fam.E * itemsize - _labels(row)


# -- which specs map to these graphs ----------------------------------------------------------
# each config's graph flags, as its config class's defaults set them
FLAGS: dict[str, dict[str, object]] = {
    "starcoder2-tiny.json": dict(
        layer_norm=True, gated=False, mlp_names=("c_fc", "c_proj"), activation="gelu_tanh",
        bias_q=True, bias_o=True, bias_mlp_in=True, bias_mlp_out=True, kinds="F", tied=True),
    "starcoder2-sliding-dropout.json": dict(
        kinds="S", window=16, residual_dropout=0.1, embed_dropout=0.05,
        attention_dropout=0.1),
    # SeedOssConfig: attention_dropout 0.1, residual_dropout 0.1, attention_bias (q, k, v)
    "seed_oss-tiny.json": dict(residual_dropout=0.1, attention_dropout=0.1, embed_dropout=0.0,
                               bias_q=True, bias_o=False, gated=True),
    "arcee-tiny.json": dict(gated=False, activation="relu2", layer_norm=False,
                            mlp_names=("up_proj", "down_proj"), bias_q=False),
    # Jais2Config: nn.LayerNorm, attention_bias and mlp_bias true
    "jais2-tiny.json": dict(layer_norm=True, gated=False, activation="relu2", bias_q=True,
                            bias_o=True, bias_mlp_in=True, bias_mlp_out=True),
    # Glm4Config: partial_rotary_factor 0.5 of a 16-wide head, attention_bias (q, k, v)
    "glm4-tiny.json": dict(rope_interleaved=True, dr=8, fused_gate_up=True, bias_q=True,
                           bias_o=False, post_norms=("post_self_attn_layernorm",
                                                   "post_mlp_layernorm")),
    "hyperclovax-tiny.json": dict(post_norms=("post_norm1", "post_norm2"), bias_q=False),
    # GlmConfig's layers, 3 of them, a quarter of each 16-wide head rotated
    "glm-quarter-rotary.json": dict(rope_interleaved=True, dr=4, post_norms=("", ""),
                                    fused_gate_up=True, L=3),
    # YoutuConfig: DeepSeek-V3's latent attention (a query latent, interleaved RoPE), tied
    "youtu-tiny.json": dict(q_latent=True, rq=48, rkv=32, dn=16, dr=8, dv=16, interleave=True,
                            tied=True),
    "eurobert-tiny.json": dict(bidirectional=True, tied=False, bias_q=False, gated=True),
    # BloomConfig: hidden_dropout and attention_dropout 0.0, the LM head tied
    "bloom-tiny.json": dict(H=4, tied=True, hidden_dropout=0.0, attention_dropout=0.0),
}
FAMILIES: dict[str, type] = {"youtu-tiny.json": Mla, "bloom-tiny.json": Bloom}


@pytest.mark.parametrize("config", CONFIGS)
def test_each_config_maps_to_its_flags(config: str) -> None:
    fam = family_of(spec_of(config))
    assert type(fam) is FAMILIES.get(config, Llama)
    assert {k: getattr(fam, k) for k in FLAGS[config]} == FLAGS[config]


def _tiny(config: str, **change: object) -> dict:
    return json.loads((DATA / "hf" / "variants" / config).read_text()) | change


def test_glm_reads_its_partial_rotary_factor() -> None:
    # GlmConfig and Glm4Config keep partial_rotary_factor in rope_parameters (default 0.5):
    # the whole head rotated still concatenates (an empty pass part); GLM (glm) is GLM-4
    # without the norms over each sublayer's output; an odd rotated width is refused
    rope = {"rope_type": "default", "rope_theta": 1e4}
    whole = family_of(spec_from_hf(_tiny("glm4-tiny.json", rope_parameters=rope | {
        "partial_rotary_factor": 1.0})))
    assert isinstance(whole, Llama) and whole.rope_interleaved and whole.dr == 16
    glm = family_of(spec_from_hf(_tiny("glm4-tiny.json", model_type="glm")))
    assert isinstance(glm, Llama) and glm.rope_interleaved and glm.dr == 8
    assert glm.post_norms == ("", "")
    odd = spec_from_hf(_tiny("glm4-tiny.json", rope_parameters=rope | {
        "partial_rotary_factor": 0.3125}))
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(odd)


def test_glm4_keeps_cos_and_sin_in_every_layer() -> None:
    # Glm4's apply_rotary_pos_emb repeat_interleaves cos[..., :dr/2] and sin's in each
    # layer: new (1, 1, T, dr) tensors, kept by the products with the rotated Q and K; the
    # rules keep one model-level pair, (L - 1) · 2 · T · dr elements short (-0.14 to -0.48 %)
    fam = family_of(spec_of("glm4-tiny.json"))
    rows = [r for r in ROWS if r["config"] == "glm4-tiny.json" and not r["lora"]
            and not r.get("autocast")]
    assert len(rows) == 8
    for row in rows:
        itemsize = 4 if row["dtype"] == "fp32" else 2
        assert row["measured_bytes"] - _rules(row) == \
            (fam.L - 1) * 2 * row["T"] * fam.dr * itemsize + _labels(row)


def test_glm_rotates_part_of_each_head_in_every_layer() -> None:
    # GLM's cos and sin, dr wide, made in each of the L layers: against Llama's whole-head
    # RoPE (one model-level pair, dh wide, concatenated after: how the graph read GLM
    # before), 2 · T · (dh - L · dr) elements apart, +0.05 to +0.11 % on these rows (on
    # glm4-tiny, L · dr = dh: the same bytes either way)
    fam = family_of(spec_of("glm-quarter-rotary.json"))
    assert isinstance(fam, Llama)
    whole = replace(fam, rope_interleaved=False, dr=0, rope_concat=True)
    rows = [r for r in ROWS if r["config"] == "glm-quarter-rotary.json"]
    assert len(rows) == 8
    for row in rows:
        itemsize = 4 if row["dtype"] == "fp32" else 2
        assert evaluate(whole, row_run(row)).activation_bytes - row["measured_bytes"] == \
            2 * row["T"] * (fam.dh - fam.L * fam.dr) * itemsize


# -- compiled against traced ---------------------------------------------------------------
def _draw(rng: random.Random) -> tuple[Llama, Run]:
    G, Hkv, L = rng.choice((1, 2)), rng.choice((1, 2)), rng.choice((1, 2))
    kind = rng.choice(("starcoder2", "seed_oss", "plain", "glm4", "hyperclovax"))
    dh = rng.choice((4, 8))
    dr = rng.choice([d for d in (2, 4, 8) if d <= dh])
    window = rng.choice((1, 4, 40))
    fam = Llama(V=rng.randint(5, 60), E=rng.randint(1, 48), H=Hkv * G, Hkv=Hkv, dh=dh,
                F=rng.randint(1, 40), L=L, tied=rng.random() < 0.5,
                bias_q=(b := kind in ("starcoder2", "plain") and rng.random() < 0.7),
                bias_k=b, bias_v=b, bias_o=b, bias_mlp_in=b, bias_mlp_out=b,
                attention_dropout=rng.choice((0.0, 0.1)),
                layer_norm=kind == "starcoder2" or (kind == "plain" and rng.random() < 0.5),
                gated=kind not in ("starcoder2", "plain"),
                activation="gelu_tanh" if kind == "starcoder2" else
                "relu2" if kind == "plain" else "silu",
                mlp_names=("c_fc", "c_proj") if kind == "starcoder2" else
                ("up_proj", "down_proj"),
                residual_dropout=rng.choice((0.0, 0.1)) if kind in ("starcoder2", "seed_oss")
                else 0.0,
                embed_dropout=rng.choice((0.0, 0.05)) if kind == "starcoder2" else 0.0,
                kinds=rng.choice("FS") if kind == "starcoder2" else "F", window=window,
                fused_gate_up=kind == "glm4", rope_interleaved=kind == "glm4",
                dr=dr if kind == "glm4" else 0,
                post_norms=("post_self_attn_layernorm", "post_mlp_layernorm") if kind == "glm4"
                else ("post_norm1", "post_norm2") if kind == "hyperclovax" else ("", ""))
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.4:
        targets = rng.sample(("q_proj", "k_proj", "v_proj", "o_proj", "down_proj", "c_fc",
                              "gate_up_proj", "all-linear"), rng.choice((1, 2)))
        lora = Lora(rng.choice((1, 8)), frozenset(targets), rng.choice((0.0, 0.05)))
    autocast = None
    if dtype == F32 and rng.random() < 0.5:
        autocast = BF16
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 33)), dtype, device,
                    rng.choice(("eager", "sdpa")), autocast=autocast,
                    use_cache=rng.random() < 0.2, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def _draw_bloom(rng: random.Random) -> tuple[Bloom, Run]:
    H = rng.choice((1, 2, 4))
    fam = Bloom(V=rng.randint(5, 60), E=H * rng.choice((1, 2, 8)), H=H, L=rng.choice((1, 2)),
                tied=rng.random() < 0.7, hidden_dropout=rng.choice((0.0, 0.1)),
                attention_dropout=rng.choice((0.0, 0.1)))
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.4:
        targets = rng.sample(("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h",
                              "all-linear"), rng.choice((1, 2)))
        lora = Lora(rng.choice((1, 8)), frozenset(targets), rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 33)), dtype, device,
                    "eager", autocast=BF16 if dtype == F32 and rng.random() < 0.5 else None,
                    lora=lora, recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_configurations() -> None:
    assert cache_hits_on_random_draws(_draw, 20261128, 12) >= 3
    assert cache_hits_on_random_draws(_draw_bloom, 20261128, 8) >= 2
