"""The layer plan: one description of how a model is built, walked by every cost.

FLOPs and KV-cache numbers pinned here come from transformers 5.23.0 / torch 2.13.0+cpu on the
named config file, by the tools named beside them; none was printed by tcalc first.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from transformer_calc import count_params, load_model
from transformer_calc.errors import SpecError
from transformer_calc.explain import explain
from transformer_calc.flops import count_flops
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import (
    Settings,
    activation_breakdown,
    kv_cache_elements,
    memory_report,
)
from transformer_calc.plan import parse_pattern, plan_of

V = DATA / "hf" / "variants"
HF = DATA / "hf"

# python tools/reference_flops.py --seq-len 8 <file>: FlopCounterMode, eager attention and
# experts, T = 8 (within every sliding window here, where eager attention meets all T keys)
FLOPS_PER_TOKEN_T8 = {
    "qwen3-sliding-bias.json": 422_400,  # QK-norm, biases, sliding layers
    "qwen3_moe-sparse-step.json": 292_352,  # MoE every 2nd layer, mlp_only_layers
    "deepseek_v3-no-q-lora-bias.json": 251_392,  # MLA without q_lora, 1 dense + 3 MoE, shared
    "deepseek_v3-all-dense.json": 256_512,  # MLA with q_lora, all dense
    "gemma3_text-layer-types.json": 389_632,  # sandwich norms, layer_types
    "gpt_oss-tied-nobias.json": 514_560,  # sinks, biased router, experts with biases
    "olmo2-gqa.json": 315_904,  # QK-norm over the width, post-norms
    "axk1-tiny.json": 205_824,  # DeepSeek-V3's MLA and MoE; a norm after each MoE block
    "phi3-gqa-tied.json": 315_904,  # fused qkv and gate_up
    "deepseek_v32-tiny.json": 235_712,  # DSA: the indexer's projections and scores
    "glm_moe_dsa-tiny.json": 227_168,  # the same, 2 index heads
    # Gemma 4: full layers of their own width without V (k_eq_v), K/V-shared layers with a
    # double-wide FFN, per-layer embeddings; and its experts beside the dense FFN
    "gemma4_text-tiny.json": 631_808,
    "gemma4_text-moe.json": 1_209_856,
    "gemma4_unified_text-tiny.json": 613_376,
    "beam-tiny.json": 504_320,  # a width gate, NoPE full layers, dense then MoE layers
    # MiMo-V2-Flash: V heads narrower than Q/K (16 against 24), the sliding layers with twice
    # the K/V heads and sinks; dense then MoE (tiny), or listed layer and MLP types (types)
    "mimo_v2_flash-tiny.json": 649_728,
    "mimo_v2_flash-types.json": 131_712,
    # T5Gemma (an encoder-decoder: T source and T target tokens, FLOPs per token of each):
    # sandwich norms, the cross-attention's too; sliding and full layers in both stacks
    "t5gemma-tiny.json": 387_072,
    "t5gemma-untied.json": 501_760,  # an untied head, one K/V head of 24, biases, F S S F
    # Gemma 3n: AltUp (3 streams: projections in and out, router, coefficients, the streams'
    # mix), LAuReL (rank 4), per-layer embeddings, 2 K/V-shared layers; and 2 streams, rank 8,
    # an untied head, biases, one K/V head of 24 (untied)
    "gemma3n_text-tiny.json": 450_224,
    "gemma3n_text-untied.json": 188_256,
    # DeepSeek-V4: hyper-connections (2 streams), a K=V head with a low-rank query and a
    # grouped low-rank output, 3 HCA layers (entries of 8) and a CSA layer (entries of 4 and
    # its indexer's projections and scores), MoE layers the first hash-routed; and a sliding
    # layer, CSA of 2, HCA of 4, 3 streams, one output group (types)
    "deepseek_v4-tiny.json": 221_760,
    "deepseek_v4-types.json": 113_664,
}


@pytest.mark.parametrize("name", sorted(FLOPS_PER_TOKEN_T8))
def test_forward_flops_equal_flop_counter(name: str) -> None:
    assert count_flops(load_model(str(V / name)), 8).total == FLOPS_PER_TOKEN_T8[name]


# python tools/reference_kv_cache.py --seq-len 4 32 <file>: bytes of every key and value
# tensor in transformers' cache after a prefill of T tokens, fp32
KV_BYTES_FP32 = {
    "qwen3-sliding-bias.json": {4: 8_192, 32: 48_128},  # 2 of 4 layers slide, window 16
    "gemma3_text-layer-types.json": {4: 4_096, 32: 19_968},  # S F F S, window 8
    "gpt_oss-tied-nobias.json": {4: 4_096, 32: 19_968},  # S F S F, window 8
    "deepseek_v3-all-dense.json": {4: 1_280, 32: 10_240},  # MLA: latent + RoPE key
    "llama4_text-chunked.json": {4: 4_096, 32: 13_568},  # 3 chunked (chunk 8) + 1 NoPE layer
    # DSA: the latent, the RoPE key and the indexer's key (DynamicIndexedLayer.indexer_keys)
    "deepseek_v32-tiny.json": {4: 1_920, 32: 15_360},
    # LFM3: 4 convolution layers (no K/V), a full and a sliding layer (window 32)
    "lfm3-tiny.json": {16: 8_192, 48: 20_224},
    # Mllama: 3 self-attention layers; its 2 cross-attention layers, skipped, cache nothing
    "mllama-tiny.json": {16: 12_288, 48: 36_864},
    # Gemma 4: 4 caching layers (2 sliding, window 32; 2 full of head width 32, K and V
    # cached apart though V comes from K's projection); the 2 K/V-shared layers cache nothing
    "gemma4_text-tiny.json": {16: 16_384, 48: 40_448},
    "gemma4_unified_text-tiny.json": {16: 16_384, 48: 40_448},
    # Beam: 5 sliding layers (window 32) and 1 full layer without RoPE
    "beam-tiny.json": {16: 24_576, 48: 51_968},
    # MiMo-V2-Flash: 5 sliding layers (window 8) of 4 K/V heads, 2 full layers of 2; K of 24
    # and V of 16 per head (tiny); S F S F, window 9, one K/V head in full layers (types)
    "mimo_v2_flash-tiny.json": {16: 32_640, 48: 53_120},
    "mimo_v2_flash-types.json": {16: 6_144, 48: 12_288},
    # Ministral: 2 sliding layers (window 16) and a full one, 2 K/V heads of 16
    # (--seq-len 16 48)
    "ministral-tiny.json": {16: 11_776, 48: 19_968},
    # dots.llm1: 3 full layers (max_window_layers 62 > the layers: none slides)
    "dots1-tiny.json": {16: 12_288, 48: 36_864},
    # LongCat-Flash: 2 decoder layers of two MLA sublayers each: 4 latents (16) + RoPE keys (8)
    "longcat_flash-tiny.json": {16: 6_144, 48: 18_432},
    # DBRX: 2 layers of 2 K/V heads of 16 (the fused Wqkv's K and V)
    "dbrx-tiny.json": {16: 8_192, 48: 24_576},
    # T5Gemma: the decoder's self-attention (1 sliding layer of window 8, 1 full) and its
    # cross-attention over the T source tokens (EncoderDecoderCache); the encoder caches nothing
    "t5gemma-tiny.json": {16: 14_080, 48: 38_656},
    "t5gemma-untied.json": {16: 21_120, 48: 57_984},  # 4 decoder layers: F S S F
    # Gemma 3n: 4 caching layers (S F S F, window 8), the last 2 reuse their keys (tiny); 4
    # layers of one K/V head of 24, 3 sliding (untied)
    "gemma3n_text-tiny.json": {16: 11_776, 48: 28_160},
    "gemma3n_text-untied.json": {16: 7_104, 48: 13_248},
    # DeepSeek-V4: each layer's window of one K=V head (window 16); its compressed entries,
    # the tokens waiting for a whole window (kv and gate) and, in the CSA layer, the
    # indexer's and the last window's overlap (--seq-len 16 19 48); a sliding-only layer keeps
    # the head twice, as keys and as values (types)
    # (and --seq-len 3: no whole window of the CSA layer yet in tiny, so no overlap kept)
    "deepseek_v4-tiny.json": {3: 3_072, 16: 5_376, 19: 7_680, 48: 6_912},
    "deepseek_v4-types.json": {3: 2_880, 16: 6_144, 19: 7_360, 48: 8_960},
}


@pytest.mark.parametrize("name", sorted(KV_BYTES_FP32))
def test_kv_cache_equals_transformers_cache(name: str) -> None:
    spec = load_model(str(V / name))
    for T, expected in KV_BYTES_FP32[name].items():
        assert 4 * kv_cache_elements(spec, T) == expected


def test_sliding_layers_stop_growing_at_their_window() -> None:
    spec = load_model(str(HF / "gpt-oss-20b.json"))  # 12 sliding (128) + 12 full layers
    per_layer = 8 * 2 * 64  # K and V of 8 heads of 64
    grow = kv_cache_elements(spec, 4096) - kv_cache_elements(spec, 2048)
    assert grow == 2048 * 12 * per_layer  # only the full layers grow
    assert kv_cache_elements(spec, 100) == 100 * 24 * per_layer
    r = memory_report(spec, Settings(inference=True, seq_len=8192, dtype="bf16"))
    assert r.components.get("kv_cache").total == 2 * (8192 * 12 + 127 * 12) * per_layer


def test_a_spec_keeps_its_plan_and_copies_and_pickles_through_its_fields() -> None:
    """A spec's fields live in slots, beside one for its plan (built once, on first use); a
    copy or an unpickled spec starts without a plan and builds the same one."""
    import copy
    import pickle

    spec = load_model("deepseek-v3")
    plan = plan_of(spec)
    assert plan_of(spec) is plan
    for twin in (pickle.loads(pickle.dumps(spec)),  # noqa: S301 - our own bytes
                 copy.copy(spec), spec.replace()):
        assert twin == spec and twin._plan is None
        assert plan_of(twin) == plan and count_params(twin).total == count_params(spec).total
    import dataclasses

    for name in ("n_layers", "not_a_field", "_plan"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(spec, name, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del spec.n_layers


def test_groups_are_distinct_blocks_not_layers() -> None:
    ds = load_model(str(HF / "deepseek-v3.json"))
    groups = plan_of(ds).groups
    assert [(g.name, g.count) for g in groups] == [("decoder.dense", 3), ("decoder.moe", 58)]
    deeper = ds.replace(n_layers=610, layer_ffn="30D 580E")
    assert len(plan_of(deeper).groups) == 2
    g3 = load_model(str(HF / "gemma-3-1b.json"))  # 26 layers, 5 sliding : 1 full
    assert {g.name: g.count for g in plan_of(g3).groups} == {"decoder.sliding": 22,
                                                              "decoder.full": 4}


def test_pattern_runs_and_repeats() -> None:
    assert parse_pattern("2D 1E", "DE", 3, "layer_ffn") == ("D", "D", "E")
    assert parse_pattern("1S 1F *", "FSCN", 5, "layer_attention") == tuple("SFSFS")
    for bad in ("2D", "2D 2X", "", "0D 3E"):
        with pytest.raises(SpecError, match="layer_ffn"):
            parse_pattern(bad, "DE", 3, "layer_ffn")


def test_pattern_needs_what_it_names() -> None:
    base = load_model("llama-3-8b")
    with pytest.raises(SpecError, match="sliding_window"):
        base.replace(layer_attention="1S 1F *")
    with pytest.raises(SpecError, match="n_experts"):
        base.replace(layer_ffn="1D 1E *")
    # an encoder-decoder reads one FFN pattern over each stack (Switch Transformers): dense
    # and expert layers only, experts only with n_experts
    t5 = load_model("t5-small")
    with pytest.raises(SpecError, match="D and E layers only for arch encoder-decoder"):
        t5.replace(layer_ffn="1D 1X*")
    with pytest.raises(SpecError, match="n_experts"):
        t5.replace(layer_ffn="1D 1E*")
    with pytest.raises(SpecError, match="runs covering exactly 6 layers"):
        t5.replace(layer_ffn="5D")
    assert count_params(t5.replace(layer_ffn="1D*")).total == count_params(t5).total


def test_dense_first_layers_change_active_and_total_exactly() -> None:
    ds = load_model(str(HF / "deepseek-v3.json"))
    all_moe = ds.replace(layer_ffn="")
    E, F, Fe, X = 7168, 18432, 2048, 256
    dense_ffn = 3 * E * F
    moe_ffn = X * 3 * E * Fe + E * X + 3 * E * Fe  # routed + router + 1 shared
    assert count_params(all_moe).total - count_params(ds).total == 3 * (moe_ffn - dense_ffn)


def test_mixture_active_parameters() -> None:
    # Qwen3-30B-A3B: 48 layers × (128 - 8) unused experts × 3 · 2048 · 768 inactive per token
    b = count_params(load_model(str(HF / "qwen3-30b-a3b.json")))
    assert b.total - b.active_total == 48 * 120 * 3 * 2048 * 768


def test_architectures_is_honoured() -> None:
    bart = json.loads((HF / "bart-base.json").read_text())
    # 96,103,680: BartForCausalLM(bart-base's config), transformers 5.23 on the meta device
    decoder = spec_from_hf(bart | {"architectures": ["BartForCausalLM"]})
    assert count_params(decoder).total == 96_103_680
    assert "counted as transformers' BartForCausalLM" in decoder.note
    t5 = {"model_type": "t5", "architectures": ["T5ForCausalLM"]}
    with pytest.raises(SpecError, match="transformers 5.23 has no T5ForCausalLM"):
        spec_from_hf(t5)
    # a published head class is counted as that class: BartForSequenceClassification and
    # LlamaForSequenceClassification on these configs, transformers 5.23 on the meta device
    # (AutoConfig.for_model(**config), sum of numel() over trainable parameters)
    head = spec_from_hf(bart | {"architectures": ["BartForSequenceClassification"]})
    assert count_params(head).total == 140_013_315
    llama = json.loads((HF / "llama-3-8b.json").read_text())
    score = spec_from_hf(llama | {"architectures": ["LlamaForSequenceClassification"]})
    assert count_params(score).total == 7_504_932_864
    with pytest.raises(SpecError, match="architectures"):
        spec_from_hf(llama | {"architectures": "LlamaForCausalLM"})
    assert count_params(spec_from_hf(bart)).total == 139_420_416  # BartModel: same count


def test_multimodal_wrapper_counts_its_language_model() -> None:
    text = json.loads((HF / "gemma-3-1b.json").read_text())
    wrapper = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
               "text_config": text, "vision_config": {"hidden_size": 1152}}
    spec = spec_from_hf(wrapper, "config.json")
    # Gemma3ForConditionalGeneration, transformers 5.23 on the meta device: counted whole
    assert count_params(spec).total == 1_163_523_712
    assert "siglip tower" in spec.note
    # --text-only: Gemma3ForCausalLM on text_config, the same 5.23 meta-device count
    assert count_params(spec.text_only()).total == 999_885_952


def test_explain_walks_groups() -> None:
    sections = explain(load_model(str(HF / "deepseek-v3.json")), "params")
    titles = [s.title for s in sections]
    assert "decoder layer, dense kind" in titles and "decoder layer, moe kind" in titles
    moe = next(s for s in sections if s.title == "decoder layer, moe kind")
    assert moe.steps[-1].value == 58 * count_params(load_model(
        str(HF / "deepseek-v3.json"))).layer_total("decoder.moe")


def test_multi_token_prediction_is_counted_apart() -> None:
    b = count_params(load_model("deepseek-v3"))
    assert b.total == 671_026_404_352  # DeepseekV3ForCausalLM, transformers 5.23: no MTP
    E, V = 7168, 129280
    moe_layer = b.layer_total("decoder.moe")
    assert b.extra["mtp_params"] == moe_layer + 2 * E * E + 3 * E
    assert b.extra["mtp_params_stored"] == b.extra["mtp_params"] + 2 * V * E
    # deepseek-ai/DeepSeek-V3 model card: "685B, which includes 671B of the Main Model weights
    # and 14B of the Multi-Token Prediction (MTP) Module weights" (both rounded)
    assert 684.0e9 < b.total + b.extra["mtp_params_stored"] < 685.5e9
    assert 13.0e9 < b.extra["mtp_params_stored"] < 14.5e9
    assert any("multi-token prediction: 1 module" in n for n in b.notes)


def test_shared_expert_gate_flops() -> None:
    # python tools/check_registry.py --flops 8 qwen2_moe (FlopCounterMode, transformers 5.23):
    # the shared_expert_gate's d_model -> 1 matmul costs 2 · d_model per token per MoE layer
    spec = load_model(str(V / "qwen3_moe-sparse-step.json")).replace(
        n_shared_experts=1, d_ff_shared=32, shared_expert_gate=True)
    without = spec.replace(shared_expert_gate=False)
    moe_layers = sum(g.count for g in plan_of(spec).groups if g.block.ffn.moe)
    assert count_flops(spec, 8).total - count_flops(without, 8).total == 2 * 64 * moe_layers


def test_a_decoder_alone_counts_its_idle_cross_attention_and_nothing_else() -> None:
    """BartForCausalLM builds each layer's encoder attention (is_decoder) but skips it without
    encoder states: parameters, not FLOPs, activations, cache or LoRA activations."""
    from transformer_calc.flops import count_flops
    from transformer_calc.memory import (
        Settings,
        activation_breakdown,
        kv_cache_elements,
        memory_report,
    )

    bart = json.loads((HF / "bart-base.json").read_text())
    decoder = spec_from_hf(bart | {"architectures": ["BartForCausalLM"]})
    E, L = 768, 6
    p = count_params(decoder)
    cross = sum(r.count * r.repeat for r in p.items if ".cross." in r.name)
    assert cross == L * (4 * (E * E + E) + 2 * E)  # q, k, v, o with biases, and the norm
    assert not any(".cross." in r.name for r in count_flops(decoder, 128).items)
    assert kv_cache_elements(decoder, 100) == L * 2 * E * 100  # self-attention's K and V only
    acts = activation_breakdown(decoder, 1, 64, act_bytes=4)
    assert not any(".cross." in r.name for r in acts.items)
    # LoRA on every linear layer adapts the idle q/k/v/o too (trainable), keeps nothing for them
    lora = memory_report(decoder, Settings(seq_len=64, lora_rank=8))
    adapted = [r.name for r in lora.activations.items if "lora_a_output" in r.name]
    assert adapted and not any(".cross." in n for n in adapted)
    # 958,464: peft 0.21.2 LoraConfig(r=8, all-linear) over BartForCausalLM(bart-base),
    # transformers 5.23 (tools/reference_lora.py --registry, the case above): 8 attention
    # matrices per layer (self and cross) and the two FFN matrices
    assert lora.trainable_params == 958_464 == 8 * L * (8 * 2 * E + 2 * (E + 3072))
    with pytest.raises(SpecError, match="idle_cross_attention"):
        decoder.replace(arch="encoder")


def test_dsa_attends_to_the_indexers_top_k_and_scores_every_key() -> None:
    """DeepSeek Sparse Attention: the indexer scores all T keys (index_heads · index_head_dim
    each), the attention meets min(T, index_topk). FlopCounterMode over transformers 5.23's
    eager DeepseekV32ForCausalLM (tools/reference_flops.py --seq-len 64) counts 312,320 FLOPs
    per token: eager attention masks a dense 64 × 64, so it counts the 48 keys past the
    indexer's top 16 that tcalc leaves out, 2 · n_heads · (d_q + d_v) · 48 per layer."""
    spec = load_model(str(V / "deepseek_v32-tiny.json"))
    H, dq, dv, L = 4, 16 + 8, 16, 3
    assert count_flops(spec, 64).total == 312_320 - L * 2 * H * (dq + dv) * (64 - 16)
    rows = {r.name: r for r in count_flops(spec, 64).items}
    assert rows["decoder.dense.attn.index_scores"].count == 2 * 4 * 16 * 64  # all T keys
    assert rows["decoder.dense.attn.scores"].count == 2 * H * dq * 16  # the top 16
    # the indexer gets no gradient (torch.no_grad): no gradients or states for its
    # 3 · (32·64 + 64·16 + 2·16 + 64·4) parameters; its fp32 scores and their ReLU
    # (2 · B·T·index_heads·T · 4) are the forward's high point when they outgrow the logits
    r = memory_report(spec, Settings(seq_len=128))
    assert r.trainable_params == 145_840 - 3 * (32 * 64 + 64 * 16 + 2 * 16 + 64 * 4)
    forward = r.phases[0]
    assert forward.when == "in the last layer's DSA indexer"
    assert forward.items.get("indexer_scores").total == 2 * 128 * 4 * 128 * 4
    # sharded, each rank scores its index heads (tensor parallelism) for its share of the
    # queries (context parallelism): a quarter with tp = cp = 2 (a mutation sample, // -> *,
    # survived without this)
    tp = memory_report(spec, Settings(seq_len=128, tp=2, cp=2, gpus=4)).phases[0]
    assert tp.items.get("indexer_scores").total == 2 * 128 * 4 * 128 * 4 // 4
    # LoRA (peft 0.21.2, r = 8, all-linear, tools/reference_lora.py on the same file): the
    # indexer's wq_b, wk and weights_proj are adapted too
    lora = memory_report(spec, Settings(seq_len=64, lora_rank=8))
    assert lora.trainable_params == 43_488
    assert not any(".index_" in i.name for i in lora.activations.items)


def test_the_last_layers_output_bias_sits_in_the_last_layers_group() -> None:
    """GPT-NeoX-Japanese: only the last layer's attention output has a bias (dense_bias);
    with layers that differ, the plan names the group the last layer belongs to."""
    spec = spec_from_hf(json.loads((V / "gpt_neox_japanese-tiny.json").read_text()))
    assert count_params(spec).total == 163_264  # GPTNeoXJapaneseForCausalLM, transformers 5.23
    mixed = spec.replace(sliding_window=4, layer_attention="1F 1S 1F")
    bias = [i for i in count_params(mixed).items if i.name.endswith("attn.o.bias")]
    assert [(i.name, i.count, i.repeat) for i in bias] == [("decoder.full.attn.o.bias", 64, 1)]
    assert plan_of(mixed.replace(layer_attention="1F 2S")).stacks[0].last_o_bias == \
        "decoder.sliding"


def test_sub_norms_sit_in_the_layer_and_refuse_experts() -> None:
    """BitNet's attn_sub_norm (n_heads · d_head) and ffn_sub_norm (d_ff) are RMSNorms inside
    the sublayers (BitNetAttention, BitNetMLP in transformers 5.23); a mixture of experts has
    no place for them, so asking for both is one clear error."""
    spec = spec_from_hf(json.loads((DATA / "hf/variants/bitnet-tiny.json").read_text()))
    rows = {r[0]: r[1] * r[4] for r in count_params(spec).rows}
    assert rows["decoder.attn.sub_norm"] == 3 * 64 and rows["decoder.ffn.sub_norm"] == 3 * 160
    with pytest.raises(SpecError, match="sub_norms"):
        load_model("llama-3-8b").replace(n_experts=4, top_k=1, sub_norms=True)


def test_modernberts_first_layer_has_no_attention_norm() -> None:
    """ModernBertEncoderLayer / ModernBertDecoderLayer (transformers 5.23): attn_norm is
    nn.Identity in layer 0. The norm is missing from the group holding layer 0, in the
    parameters and in the saved activations, and under LoRA no other layer's norm is dropped
    in its place (the first layer has none to drop)."""
    data = json.loads((DATA / "hf/variants/modernbert-decoder-tiny.json").read_text())
    spec = spec_from_hf(data)  # layers 0 and 2 global, layer 1 local
    st = plan_of(spec).stacks[0]
    assert st.bare_first == "decoder.full"
    rows = {r[0]: r[4] for r in count_params(spec).rows}
    assert rows["decoder.full.attn.norm"] == 1 and rows["decoder.sliding.attn.norm"] == 1
    full = memory_report(spec, Settings(seq_len=64, device="cpu"))
    lora = memory_report(spec, Settings(seq_len=64, device="cpu", lora_rank=8))
    for report in (full, lora):  # (the op graph's rows: layers 1 and 2 keep a norm's input)
        norms = {i.name: i.repeat for i in report.activations.items if ".attn.norm." in i.name}
        assert norms["decoder.attn.norm.input"] == 2
    every = spec.replace(first_attn_norm=True)
    assert count_params(every).total - count_params(spec).total == 64  # norm_bias false


def test_an_encoder_table_of_its_own_size_needs_separate_tables() -> None:
    """FSMT's src_vocab_size and tgt_vocab_size: the encoder's table has its own rows; one
    shared table cannot have two sizes, so asking for both is one clear error."""
    spec = spec_from_hf(json.loads((DATA / "hf/variants/fsmt-tiny.json").read_text()))
    rows = {r[0]: r[1] for r in count_params(spec).rows}
    assert rows["encoder.embed.tokens"] == 1000 * 64 and rows["decoder.embed.tokens"] == 900 * 64
    with pytest.raises(SpecError, match="encoder_vocab_size"):
        spec.replace(tie_encoder_decoder=True)
    with pytest.raises(SpecError, match="tie_word_embeddings"):
        spec_from_hf({"model_type": "fsmt", "tie_word_embeddings": True, "src_vocab_size": 10})


def test_factorised_embeddings_are_narrow_and_the_head_returns_to_its_width() -> None:
    """ELECTRA (embedding_size 32, hidden 64) and RemBERT (input 32, output 48): the tables,
    the embedding norm and the head's norm sit at their own widths, one biased projection
    lifts the embeddings (no projection back: the head's dense does that), and FLOPs count
    the projection, the head's dense and the decoder at those widths."""
    electra = spec_from_hf(json.loads((DATA / "hf/variants/electra-tiny.json").read_text()))
    rows = {r[0]: r[1] for r in count_params(electra).rows}
    assert rows["embed.positions"] == 256 * 32 and rows["embed.norm"] == 2 * 32
    assert rows["embed.project_in"] == 32 * 64 and rows["embed.project_in.bias"] == 64
    assert "embed.project_out" not in rows and rows["head.mlm.dense.weight"] == 64 * 32
    flops = {r[0]: r[1] for r in count_flops(electra, 8).rows}
    assert flops["head.mlm.decoder"] == 2 * 32 * 1000 and "embed.project_out" not in flops
    rembert = spec_from_hf(json.loads((DATA / "hf/variants/rembert-tiny.json").read_text()))
    rows = {r[0]: r[1] for r in count_params(rembert).rows}
    assert rows["head.mlm.decoder.weight"] == 48 * 1000 and rows["head.mlm.norm"] == 2 * 48
    with pytest.raises(SpecError, match="mlm_width"):
        rembert.replace(tie_embeddings=True)
    with pytest.raises(SpecError, match="embed_factorized"):
        load_model("gpt2").replace(embed_factorized=True)


def test_shared_layers_count_their_weights_once_and_run_every_layer() -> None:
    """AlbertTransformer (transformers 5.23): 4 layers, num_hidden_groups 2: two sets of
    weights, each run by two layers. Parameters and LoRA's adapters count the sets; FLOPs and
    activations count the layers run."""
    spec = spec_from_hf(json.loads((DATA / "hf/variants/albert-tiny.json").read_text()))
    assert (spec.n_layers, spec.layer_groups) == (4, 2)
    rows = {r[0]: r[4] for r in count_params(spec).rows}
    assert rows["encoder.attn.q.weight"] == 2
    assert {r[0]: r[4] for r in count_flops(spec, 8).rows}["encoder.attn.qkv"] == 4
    one = spec.replace(layer_groups=4)
    assert count_params(one).total - count_params(spec).total == \
        sum(r[1] * r[4] for r in count_params(spec).rows if r[5] == "encoder")
    lora = memory_report(spec, Settings(seq_len=64, device="cpu", lora_rank=8, precision="bf16"))
    kept = {i.name: i.repeat for i in lora.activations.items
            if i.name.endswith("lora_a_output") and i.name.startswith("encoder.")}
    assert kept and set(kept.values()) == {4}
    with pytest.raises(SpecError, match="layer_groups"):
        spec.replace(layer_groups=3)


def test_side_tables_are_read_as_rows_by_width() -> None:
    """RoCBERT's tables: counted always, concatenated and projected only with side_concat;
    anything but 'rows x width' items is one clear error."""
    spec = spec_from_hf(json.loads((DATA / "hf/variants/roc_bert-tiny.json").read_text()))
    assert spec.side_tables == ((70, 16), (50, 24)) and spec.side_concat
    rows = {r[0]: r[1] for r in count_params(spec).rows}
    assert rows["embed.side_0"] == 70 * 16 and rows["embed.project_side"] == 104 * 64
    assert {r[0]: r[1] for r in count_flops(spec, 8).rows}["embed.project_side"] == 2 * 104 * 64
    built = spec.replace(side_concat=False)
    assert count_params(spec).total - count_params(built).total == 104 * 64 + 64
    for bad in ("70 by 16", "0x16", "70x"):
        with pytest.raises(SpecError, match="side_embeddings"):
            spec.replace(side_embeddings=bad)
    with pytest.raises(SpecError, match="side_concat"):
        spec.replace(side_embeddings="")


def test_mllamas_cross_attention_layers_are_counted_and_never_run() -> None:
    """MllamaTextModel (transformers 5.23) skips the cross_attention_layers without image
    states: their tensors are parameters (and LoRA's adapters), never FLOPs, activations or
    cache. The published file names MllamaForConditionalGeneration: its language model is
    counted, with a note that the vision tower is not."""
    data = json.loads((V / "mllama-tiny.json").read_text())
    spec = spec_from_hf(data)
    assert (spec.n_layers, spec.idle_cross_layers, spec.extra_token_rows) == (3, 2, 8)
    rows = {r[0]: r for r in count_params(spec).rows}
    assert rows["decoder.idle.cross.q_norm"][4] == 2 and rows["decoder.idle.gates"][1] == 2
    assert rows["embed.tokens"][1] == 1008 * 64
    assert not any(".idle." in r[0] for r in count_flops(spec, 8).rows)
    lora = memory_report(spec, Settings(seq_len=64, device="cpu", lora_rank=8))
    assert not any(".idle." in i.name for i in lora.activations.items)
    from transformer_calc.lora import adapted_layers

    adapted = adapted_layers(spec, count_params(spec), ("all-linear",))
    assert {a.name for a in adapted if a.stack == "decoder.idle"} >= {
        "decoder.idle.cross.q", "decoder.idle.ffn.out"}
    wrapped = spec_from_hf(data | {"architectures": ["MllamaForConditionalGeneration"]})
    # MllamaForConditionalGeneration, transformers 5.23 on the meta device: counted whole
    assert count_params(wrapped).total == 837_062_487 and "mllama tower" in wrapped.note


def test_differential_attention_runs_two_maps() -> None:
    """DiffLlamaAttention (transformers 5.23): the scores and the values twice per layer (two
    attention calls; FlopCounterMode agrees: registry_cases_more.json), λ's four d_head
    vectors; transformers refuses odd K/V head counts and attention dropout, and so does
    tcalc, by name."""
    spec = spec_from_hf(json.loads((V / "diffllama-tiny.json").read_text()))
    plain = spec.replace(differential=False)
    flops = {r[0]: r[1] for r in count_flops(spec, 8).rows}
    assert flops["decoder.attn.scores"] == 2 * {r[0]: r[1] for r in
                                                count_flops(plain, 8).rows}["decoder.attn.scores"]
    assert count_params(spec).total - count_params(plain).total == 2 * 4 * 16
    with pytest.raises(SpecError, match="differential"):
        spec.replace(n_kv_heads=1)
    with pytest.raises(SpecError, match="attention_dropout"):
        spec_from_hf({"model_type": "diffllama", "attention_dropout": 0.1})


def test_gemma4_layers_differ_by_kind_and_by_kv_sharing() -> None:
    """Gemma4TextAttention / Gemma4TextMLP (transformers 5.23): full layers take
    global_head_dim and, with attention_k_eq_v, num_global_key_value_heads and no v_proj;
    the last num_kv_shared_layers layers have no k_proj, v_proj or k_norm, cache nothing and,
    with use_double_wide_mlp, an FFN twice as wide: four groups of the plan."""
    spec = spec_from_hf(json.loads((V / "gemma4_text-tiny.json").read_text()))
    groups = {g.name: g for g in plan_of(spec).groups}
    assert set(groups) == {"decoder.sliding", "decoder.full", "decoder.sliding.kv_shared",
                           "decoder.full.kv_shared"}
    full, shared = groups["decoder.full"].block, groups["decoder.full.kv_shared"].block
    assert (full.attn.d_head, full.attn.kv_heads, full.attn.v_is_k) == (32, 1, True)
    assert shared.attn.kv_shared and shared.attn.kv_per_token() == 0
    assert shared.ffn.d_ff == 2 * full.ffn.d_ff
    rows = {r[0] for r in count_params(spec).rows}
    assert "decoder.full.attn.v.weight" not in rows and "decoder.full.attn.k.weight" in rows
    assert not any(r.startswith("decoder.full.kv_shared.attn.k") for r in rows)
    assert "decoder.sliding.kv_shared.attn.q_norm" in rows
    saved = {i.name for i in activation_breakdown(spec, 1, 64, act_bytes=2, device="cpu",
                                                  dropout=False).items}
    assert "decoder.full.kv_shared.attn.q_norm.input_fp32" in saved
    assert not any(n.startswith("decoder.full.kv_shared.attn.k_norm") for n in saved)
    with pytest.raises(SpecError, match="kv_shared_layers"):
        spec.replace(kv_shared_layers=6)
    with pytest.raises(SpecError, match="num_kv_shared_layers"):
        spec_from_hf({"model_type": "gemma4_text", "num_hidden_layers": 6,
                      "num_kv_shared_layers": 1})  # the last 5 sliding layers... one full


def test_gemma4_per_layer_embeddings_and_experts_beside_the_dense_ffn() -> None:
    """Gemma4TextModel's per-layer embeddings (a 1,000 × 3·8 table, a 64 -> 24 projection
    and its norm; per layer a gate, a projection and a norm) and enable_moe_block (the dense
    MLP stays, the experts run beside it with three norms and a scaled router)."""
    spec = spec_from_hf(json.loads((V / "gemma4_text-moe.json").read_text()))
    rows = {r[0]: r[1] * r[4] for r in count_params(spec).rows}
    assert rows["embed.per_layer"] == 1000 * 3 * 8 and rows["embed.project_per_layer"] == 64 * 24
    assert rows["decoder.full.ple.gate.weight"] == 64 * 8
    assert rows["decoder.sliding.ffn.dense.gate.weight"] == 2 * 64 * 96
    assert rows["decoder.sliding.ffn.router.per_expert_scale"] == 2 * 4
    flops = {r[0]: r[1] for r in count_flops(spec, 8).rows}
    assert flops["decoder.sliding.ffn.dense"] == 2 * 3 * 64 * 96
    assert flops["embed.project_per_layer"] == 2 * 64 * 24


def test_beams_full_layers_have_no_rope_and_its_math_runs_in_fp32() -> None:
    """BeamConfig (transformers 5.23): every sixth layer and the last are full attention
    without RoPE (rope_parameters' full_attention None), the rest sliding; BeamMLP and
    BeamExperts compute act(gate.float()) · up.float(), and the final soft-capping runs on an
    fp32 copy: a bf16 model keeps those tensors in fp32 (measured: without them −9.1 to
    −15.2 %)."""
    spec = spec_from_hf(json.loads((V / "beam-tiny.json").read_text()))
    assert spec.layer_attention == "5S 1N" and spec.layer_ffn == "3D 3E"
    assert spec.ffn_act_fp32 and spec.softcap_fp32 and spec.logit_softcapping == 30.0
    rows = {i.name: i for i in activation_breakdown(spec, 1, 64, act_bytes=2, device="cpu",
                                                    dropout=False).items}
    assert rows["head.softcap_tanh"].total == 64 * 1000 * 4
    assert rows["decoder.sliding.dense.ffn.activation"].count == 3 * 64 * 96 * 4


def test_mimo_v2_flash_layers_differ_by_kind() -> None:
    # MiMoV2FlashConfig's defaults (transformers 5.23): full attention at layer 0 and every
    # sixth layer with 4 K/V heads, the others sliding with 8 and a sink per head; one dense
    # layer, then experts; V heads of 128 against Q/K heads of 192
    spec = spec_from_hf({"model_type": "mimo_v2_flash"})
    groups = {g.name: g for g in plan_of(spec).groups}
    assert {n: g.count for n, g in groups.items()} == {
        "decoder.full.dense": 1, "decoder.sliding.moe": 39, "decoder.full.moe": 8}
    full, sliding = groups["decoder.full.moe"].block.attn, groups["decoder.sliding.moe"].block.attn
    assert full is not None and sliding is not None
    assert (full.kv_heads, full.sinks, sliding.kv_heads, sliding.sinks) == (4, False, 8, True)
    assert (sliding.d_head, sliding.d_v) == (192, 128)
    assert "model.mtp" in spec.note  # the checkpoint's MTP modules transformers skips


def test_longt5s_encoder_attends_locally_its_decoder_densely() -> None:
    config = json.loads((V / "longt5-local.json").read_text())  # local_radius 7
    spec = spec_from_hf(config)
    assert spec.encoder_local_block == 8
    encoder, decoder = (g.block.attn for g in plan_of(spec).groups)
    assert encoder is not None and decoder is not None
    assert (encoder.kind, encoder.window, decoder.kind) == ("local", 8, "full")
    # the sequence padded to whole blocks; three blocks of keys per query, whatever T
    assert [encoder.queries(T) for T in (1, 8, 9, 30)] == [8, 8, 16, 32]
    assert encoder.keys(30) == encoder.keys(4096) == 24
    assert decoder.queries(30) == 30 and decoder.keys(30) == 30
    # the parameters are T5's (registry_cases.json pins LongT5's totals from transformers)
    dense = spec.replace(encoder_local_block=0)
    assert count_params(spec).total == count_params(dense).total
    # no cache for the encoder: the decoder's self and cross attention only, as dense
    assert kv_cache_elements(spec, 100) == kv_cache_elements(dense, 100)
    # the default radius, 127: blocks of 128
    assert spec_from_hf(config | {"local_radius": None}).encoder_local_block == 128
    assert spec_from_hf({k: v for k, v in config.items()
                         if k != "local_radius"}).encoder_local_block == 128


def test_longt5s_attention_keys_are_checked() -> None:
    config = json.loads((V / "longt5-local.json").read_text())
    with pytest.raises(SpecError, match="local_radius.*non-negative integer"):
        spec_from_hf(config | {"local_radius": -1})
    with pytest.raises(SpecError, match="encoder_attention_type.*local or transient-global"):
        spec_from_hf(config | {"encoder_attention_type": "global"})
    with pytest.raises(SpecError, match="global_block_size.*>= 1"):
        spec_from_hf(config | {"encoder_attention_type": "transient-global",
                               "global_block_size": 0})
    with pytest.raises(SpecError, match="encoder_local_block.*encoder-decoder"):
        load_model("gpt2").replace(encoder_local_block=8)
    with pytest.raises(SpecError, match="encoder_global_block.*encoder_local_block"):
        spec_from_hf(config).replace(encoder_local_block=0, encoder_global_block=16)


def test_longt5s_transient_global_attention_adds_a_summary_per_block() -> None:
    spec = spec_from_hf(json.loads((V / "longt5-tglobal.json").read_text()))
    assert (spec.encoder_local_block, spec.encoder_global_block) == (8, 4)
    encoder = plan_of(spec).groups[0].block.attn
    assert encoder is not None and encoder.global_block == 4
    # one global token per whole block of 4 tokens, met by every query beside its 3 blocks
    assert [encoder.keys(T) for T in (3, 4, 30, 64)] == [24, 25, 31, 40]
    rows = {i.name: i for i in count_params(spec).items}
    assert rows["encoder.attn.global_relative_bias"].total == 32 * 4  # first layer only
    assert rows["encoder.attn.global_input_norm"].total == 2 * 64  # every encoder layer
    assert "decoder.attn.global_input_norm" not in rows
    # the default: 16 tokens per global block
    config = json.loads((V / "longt5-tglobal-default.json").read_text())
    assert spec_from_hf(config).encoder_global_block == 16


def test_olmo_hybrid_derives_its_linear_sizes_and_layer_kinds() -> None:
    # OlmoHybridConfig.__post_init__: key and value heads = num_attention_heads, d_k =
    # int(0.75 · hidden_size / key heads), d_v = 2 · d_k; every 4th layer full attention
    # (the last when none is); totals from transformers on the meta device
    # (tools/reference_counts.py): 184,864 and, with 2 layers, 95,968 (6 layers: below)
    spec = spec_from_hf(json.loads((V / "olmo_hybrid-tiny.json").read_text()))
    assert (spec.ssm_groups, spec.ssm_heads, spec.ssm_state, spec.ssm_inner) == (4, 4, 12, 96)
    kinds = {g.name: g.count for g in plan_of(spec).groups}
    assert kinds == {"decoder.linear": 3, "decoder.full": 1}
    assert count_params(spec).total == 184_864
    two = spec_from_hf(json.loads((V / "olmo_hybrid-tiny.json").read_text())
                       | {"num_hidden_layers": 2})
    assert {g.name: g.count for g in plan_of(two).groups} == {"decoder.linear": 1,
                                                             "decoder.full": 1}
    assert count_params(two).total == 95_968
    six = spec_from_hf(json.loads((V / "olmo_hybrid-tiny.json").read_text())
                       | {"num_hidden_layers": 6})  # layer 3 alone is full: 273,760
    assert {g.name: g.count for g in plan_of(six).groups} == {"decoder.linear": 5,
                                                             "decoder.full": 1}
    assert count_params(six).total == 273_760
    # the mixer layers are pre-norm, the attention layers post-norm (OLMo 3's)
    notes = {g.name: g.block.norm_note for g in plan_of(spec).groups}
    assert notes == {"decoder.linear": "pre-norm", "decoder.full": "post-norm"}
    # rope_theta null: no rotary embedding (the released checkpoints')
    nope = spec_from_hf(json.loads((V / "olmo_hybrid-nope.json").read_text()))
    assert (spec.position, nope.position) == ("rope", "none")
    with pytest.raises(SpecError, match="linear_num_key_heads.*integer >= 1"):
        spec_from_hf({"model_type": "olmo_hybrid", "linear_num_key_heads": 0})
    with pytest.raises(SpecError, match="layer_types.*one linear_attention and one full"):
        spec_from_hf({"model_type": "olmo_hybrid", "num_hidden_layers": 2,
                      "layer_types": ["linear_attention"] * 2})


def test_olmo_hybrid_lora_targets_by_transformers_names_are_refused() -> None:
    from transformer_calc.lora import lora_params

    spec = spec_from_hf(json.loads((V / "olmo_hybrid-tiny.json").read_text()))
    params = count_params(spec)
    # all-linear: every projection of both kinds of layer (the fixture pins it against peft)
    assert lora_params(spec, params, 8).total > 0
    assert lora_params(spec, params, 8, ("q", "v")).total == 8 * (64 + 64) * 2
    with pytest.raises(Exception, match="q_proj of its own"):
        lora_params(spec, params, 8, ("q_proj", "v_proj"))


def test_axk1_norms_each_moe_blocks_output() -> None:
    # AXK1MoE.post_mlp_layernorm (transformers 5.23): an RMSNorm over each MoE block's
    # output, shared experts included; the dense layers have none. Totals from transformers
    # on the meta device: 181,688 (tools/reference_counts.py), 518,983,052,288 by default
    # (tests/data/registry_cases_more.json)
    config = json.loads((V / "axk1-tiny.json").read_text())
    spec = spec_from_hf(config)
    assert spec.moe_post_norm and spec.layer_ffn == "1D 2E"
    blocks = {g.name: g.block for g in plan_of(spec).groups}
    assert "ffn.post_norm" in blocks["decoder.moe"].norms
    assert "ffn.post_norm" not in blocks["decoder.dense"].norms
    rows = {i.name: i for i in count_params(spec).items}
    assert rows["decoder.moe.ffn.post_norm"].total == 2 * 64
    assert count_params(spec).total == 181_688
    acts = {i.name for i in activation_breakdown(spec, 2, 64, act_bytes=2,
                                                 device="cpu").items}
    assert "decoder.moe.ffn.post_norm.rstd" in acts
    # mlp_layer_types, or first_k_dense_replace (default 1) and moe_layer_freq
    alt = spec_from_hf(config | {"mlp_layer_types": ["sparse", "dense", "sparse"]})
    assert alt.layer_ffn == "1E 1D 1E"
    assert spec_from_hf(config | {"first_k_dense_replace": None}).layer_ffn == "1D 2E"
    dense = spec_from_hf(config | {"mlp_layer_types": ["dense"] * 3})
    assert not dense.n_experts and not dense.moe_post_norm
    with pytest.raises(SpecError, match="q_lora_rank.*query latent"):
        spec_from_hf(config | {"q_lora_rank": None})
    with pytest.raises(SpecError, match="mlp_layer_types.*dense, sparse"):
        spec_from_hf(config | {"mlp_layer_types": ["moe"] * 3})
    with pytest.raises(SpecError, match="moe_post_norm.*without experts"):
        load_model("gpt2").replace(moe_post_norm=True)
    # AXK1Config's own defaults where DeepseekV3Config's differ (its source, 5.23)
    default = spec_from_hf({"model_type": "axk1"})
    assert (default.max_positions, default.n_heads, default.n_experts,
            default.vocab_size) == (32768, 64, 192, 163840)


def test_dots1_and_ministral_derive_their_sliding_layers() -> None:
    """Dots1Config slides from max_window_layers on when sliding_window is set; MinistralConfig
    slides every layer without layer_types. The cache after a prefill, fp32, from
    `tools/reference_kv_cache.py --seq-len 16 48` on these configs (transformers 5.23.0):
    dots1 with max_window_layers 1, window 8: 7,680 and 15,872 bytes; Ministral's tiny
    variant without layer_types (window 16): 11,520 at both lengths."""
    dots = json.loads((V / "dots1-tiny.json").read_text()) | {"max_window_layers": 1,
                                                              "sliding_window": 8}
    ministral = json.loads((V / "ministral-tiny.json").read_text())
    del ministral["layer_types"]
    for config, pattern, window, cache in ((dots, "1F 2S", 8, (7_680, 15_872)),
                                           (ministral, "3S", 16, (11_520, 11_520))):
        spec = spec_from_hf(config)
        assert (spec.layer_attention, spec.sliding_window) == (pattern, window)
        assert tuple(4 * kv_cache_elements(spec, T) for T in (16, 48)) == cache
    # an explicit null window: no sliding layer in either (the classes' own rule)
    for config in (dots, ministral):
        assert spec_from_hf(config | {"sliding_window": None}).layer_attention == ""
    # the classes' defaults (transformers 5.23: Dots1Config(num_hidden_layers=63).layer_types
    # slides from layer 62 with window 4096; MinistralConfig().sliding_window is 4096)
    del dots["max_window_layers"], dots["sliding_window"], ministral["sliding_window"]
    deep = spec_from_hf(dots | {"num_hidden_layers": 63})
    assert (deep.layer_attention, deep.sliding_window) == ("62F 1S", 4096)
    assert spec_from_hf(ministral).sliding_window == 4096


def test_zero_experts_widen_the_router_and_bound_the_active_count() -> None:
    """LongCat-Flash's zero-computation experts (zero_experts): the router scores
    n_experts + zero_experts, transformers builds their gate/up weights (no active share), and
    the experts' FLOPs of top_k real experts are an upper bound (checked against transformers
    in tests/data/registry_cases_more.json; FlopCounterMode there without zero experts)."""
    spec = load_model(str(V / "longcat_flash-tiny.json"))
    assert (spec.zero_experts, spec.moe_shortcut, spec.moe_beside_dense) == (0, True, True)
    E, X, F, Z = 64, 8, 32, 3
    with_zero = spec.replace(zero_experts=Z)
    p0, pz = count_params(spec), count_params(with_zero)
    moe_layers = 2  # of the plan's four: the shortcut MoE sits in every other
    assert pz.total - p0.total == moe_layers * (E * Z + Z * 2 * F * E)
    assert pz.active_total - p0.active_total == moe_layers * E * Z  # the router alone
    f0, fz = count_flops(spec, 8), count_flops(with_zero, 8)
    assert fz.total - f0.total == moe_layers * 2 * E * Z
    assert "upper bound" in fz.get("decoder.moe.ffn.experts").note
    rows = {i.name: i for i in activation_breakdown(with_zero, 1, 8, act_bytes=2,
                                                    device="cpu").items}
    assert rows["decoder.moe.ffn.router"].count == 8 * (X + Z) * 4
    # the shortcut MoE has none of Gemma 4's router scale, per-expert scale or extra norms
    assert not [i for i in pz.items if "scale" in i.name or "pre_norm" in i.name]
    with pytest.raises(SpecError, match="zero_experts"):
        with_zero.replace(n_experts=0, top_k=0, moe_beside_dense=False, moe_shortcut=False,
                     d_ff_expert=None, layer_ffn="")
    with pytest.raises(SpecError, match="moe_shortcut"):
        spec.replace(moe_beside_dense=False)


def test_deepseek_v4_queries_meet_the_window_and_the_indexers_pick() -> None:
    """DeepSeek-V4's attention meets the window's keys and the compressed entries: every entry
    of an H layer (T // compress_hca), the indexer's top index_topk of a Q layer's
    (T // compress_csa), as DeepseekV4CSACompressor's block bias leaves them (eager attention
    masks the rest of a dense product, which FlopCounterMode counts: the FLOPs pinned above
    are at T = 8, within every window and top-k). The default at T = 131,072: 128 + 1,024 keys
    in an H layer, 128 + 512 (not 32,768) in a Q layer."""
    spec = spec_from_hf({"model_type": "deepseek_v4"})
    attn = {g.name: g.block.attn for g in plan_of(spec).groups}
    assert attn["decoder.hca"].keys(131_072) == 128 + 131_072 // 128
    assert attn["decoder.csa"].keys(131_072) == 128 + 512
    assert attn["decoder.csa"].entries(8) == 2
