"""Check every model_type tcalc maps against transformers on random small configs
(developer tool, needs torch + transformers); --write records the cases as test fixtures.

For each type: its default config (model_type alone), then N configs drawing the shape keys
the config class has (widths, heads, K/V heads, head_dim, layers, vocabulary, tying, bias
switches, expert counts and sizes) at random, small enough to build in a moment. Each is built
on the meta device as the class tcalc counts; the trainable total must equal tcalc's.

    python tools/check_registry.py --cases 4 --flops 8 \
        [--write tests/data/registry_cases.json] [TYPE...]

The recurrent and hybrid types are recorded apart, with FLOPs by aten op (their
convolution padding and chunked scans are accounted for op by op in tests/test_mixers.py), at
a length that fills whole chunks (Gated DeltaNet's chunk is 64):

    python tools/check_registry.py --cases 4 --flops 8 --write tests/data/registry_mixers_T8.json \
        mamba falcon_mamba mamba2 nemotron_h bamba granitemoehybrid jamba lfm2 falcon_h1 minimax \
        lfm3 lfm2_moe
    python tools/check_registry.py --cases 4 --flops 64 \
        --write tests/data/registry_mixers_T64.json qwen3_next qwen3_5_text qwen3_5_moe_text \
        olmo_hybrid kimi_linear

Every type's other classes (the base model, sequence and token classification, question
answering, multiple choice, an encoder's *ForCausalLM), named in architectures, with
num_labels or id2label drawn:

    python tools/check_registry.py --task base,seq_cls,token_cls,qa,multiple_choice,causal \
        --cases 2 --write tests/data/registry_heads.json

The seq2seq families' decoders alone (``architectures: [BartForCausalLM]``, ...):

    python tools/check_registry.py --causal --cases 4 --flops 8 \
        --write tests/data/registry_causal_decoders.json bart marian mbart mvp plbart \
        blenderbot blenderbot-small pegasus bigbird_pegasus
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformer_calc import count_params  # noqa: E402
from transformer_calc.errors import SpecError  # noqa: E402
from transformer_calc.hf import (  # noqa: E402
    HEAD_CLASS,
    TABLE_DRIVEN,
    counted_class,
    spec_from_hf,
)

BOOLS = ("relative_attention", "share_att_key", "position_biased_input",
         "tie_word_embeddings", "attention_bias", "mlp_bias", "use_bias", "use_qkv_bias",
         "multi_query", "qkv_bias", "bias", "attention_out_bias", "use_qk_norm",
         "use_parallel_residual", "qk_layernorm")


def draw(rng: random.Random, fields: set[str]) -> dict:
    heads = rng.choice([2, 4, 8])
    kv = rng.choice([k for k in (1, 2, 4, 8) if heads % k == 0])
    d_head = rng.choice([8, 16])
    cfg: dict = {"hidden_size": heads * rng.choice([8, 16]), "num_attention_heads": heads,
                 "num_key_value_heads": kv, "intermediate_size": rng.choice([24, 40, 64]),
                 "num_hidden_layers": rng.choice([2, 3, 4]), "vocab_size": rng.choice([97, 128]),
                 "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    if "head_dim" in fields:
        # half the time its own width, half the time what the class derives (some classes
        # default head_dim to a fixed 128 instead)
        cfg["head_dim"] = d_head if rng.random() < 0.5 else cfg["hidden_size"] // heads
    for key in BOOLS:
        if key in fields:
            cfg[key] = rng.random() < 0.5
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if key in fields:
            cfg[key] = rng.choice([4, 8])
            cfg["num_experts_per_tok"] = rng.choice([1, 2])
    for key, values in (("moe_intermediate_size", [16, 24]),
                        ("shared_expert_intermediate_size", [0, 32]),
                        ("n_shared_experts", [0, 1, 2]), ("num_shared_experts", [0, 1, 2]),
                        ("shared_intermediate_size", [0, 32]), ("first_k_dense_replace", [0, 1]),
                        ("decoder_sparse_step", [1, 2])):
        if key in fields:
            cfg[key] = rng.choice(values)
    if "dim" in fields:  # DistilBERT's own names
        cfg |= {"dim": cfg.pop("hidden_size"), "n_heads": cfg.pop("num_attention_heads"),
                "n_layers": cfg.pop("num_hidden_layers"),
                "hidden_dim": cfg.pop("intermediate_size")}
    if "d_model" in fields and "encoder_layers" in fields:  # the BART lineage's names
        cfg |= {"d_model": cfg.pop("hidden_size"), "encoder_layers": cfg["num_hidden_layers"],
                "decoder_layers": rng.choice([1, 2, 3]),
                "encoder_attention_heads": heads, "decoder_attention_heads": heads,
                "encoder_ffn_dim": cfg["intermediate_size"],
                "decoder_ffn_dim": cfg.pop("intermediate_size"),
                "max_position_embeddings": rng.choice([64, 100])}
        cfg.pop("num_hidden_layers"), cfg.pop("num_attention_heads")
        cfg["decoder_start_token_id"] = 0
        cfg["forced_eos_token_id"] = None
    if "d_kv" in fields:  # T5's names
        cfg |= {"d_model": cfg.pop("hidden_size"), "num_layers": cfg.pop("num_hidden_layers"),
                "num_heads": cfg.pop("num_attention_heads"), "d_kv": d_head,
                "d_ff": cfg.pop("intermediate_size"),
                "num_decoder_layers": rng.choice([1, 2, 3]),
                "feed_forward_proj": rng.choice(["relu", "gated-gelu"])}
        cfg["decoder_start_token_id"] = 0
    if "altup_num_inputs" in fields:
        # Gemma 3n: its AltUp streams, LAuReL rank, sparsified first layers and K/V-shared
        # last layers drawn small (the class defaults share 15 layers' keys and values, more
        # than a drawn config has); sliding and full layers alternate, so that a shared layer
        # finds an earlier one of its kind
        L = cfg["num_hidden_layers"]
        cfg |= {"altup_num_inputs": rng.choice([2, 3, 4]), "laurel_rank": rng.choice([2, 4]),
                "num_kv_shared_layers": rng.choice([0, 1, 2]) if L > 2 else 0,
                # (at least the FLOPs' T = 8: eager attention masks a dense T × T)
                "sliding_window": rng.choice([8, 16]),
                "layer_types": ["sliding_attention", "full_attention"] * (L // 2)
                + ["sliding_attention"] * (L % 2),
                "activation_sparsity_pattern": [0.95] * (s := rng.choice([0, 1, 2]))
                + [0.0] * (L - s)}
    if "hc_mult" in fields:
        # DeepSeek-V4: its low-rank query and output, indexer, compression rates and
        # hyper-connection streams drawn small (the class defaults are full size); a head of
        # 16 (its RoPE is an eighth of the head); windows of at least the FLOPs' T = 8
        L = cfg["num_hidden_layers"]
        kinds = ("sliding_attention", "compressed_sparse_attention",
                 "heavily_compressed_attention")
        cfg |= {"head_dim": 16, "q_lora_rank": rng.choice([8, 16]),
                "o_groups": rng.choice([1, 2]), "o_lora_rank": rng.choice([4, 8]),
                "index_n_heads": rng.choice([1, 2]), "index_head_dim": 8, "index_topk": 64,
                "compress_rates": {"compressed_sparse_attention": rng.choice([2, 4]),
                                   "heavily_compressed_attention": rng.choice([4, 8])},
                "hc_mult": rng.choice([2, 3]), "sliding_window": rng.choice([8, 16]),
                "layer_types": [rng.choice(kinds) for _ in range(L)]}
    if {"encoder", "decoder", "dropout_rate"} <= fields:
        # T5Gemma: each stack's keys in its own mapping; one width, attention and FFN for
        # both (tcalc refuses the unbalanced ones), the layer counts, vocabularies and
        # sliding window drawn
        module = {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                      "num_key_value_heads", "head_dim") if k in cfg}
        module |= {"sliding_window": rng.choice([4, 8]), "max_position_embeddings": 64,
                   "attention_bias": rng.random() < 0.5}
        cfg |= {"encoder": module | {"num_hidden_layers": cfg["num_hidden_layers"],
                                     "vocab_size": cfg["vocab_size"]},
                "decoder": module | {"num_hidden_layers": rng.choice([1, 2, 3]),
                                     "vocab_size": rng.choice([97, 128])}}
    # families that spell the shape keys their own way (GPT-2 lineage, XLM, MPT, XGLM, ...)
    for std, aliases in (("hidden_size", ("n_embd", "emb_dim", "d_model")),
                         ("num_hidden_layers", ("n_layer", "n_layers", "num_layers")),
                         ("num_attention_heads", ("n_head", "n_heads", "num_heads",
                                                  "attention_heads")),
                         ("intermediate_size", ("n_inner", "dff", "ffn_dim", "d_inner"))):
        if std in cfg and std not in fields:
            alias = next((a for a in aliases if a in fields), None)
            value = cfg.pop(std)
            if alias is not None:
                cfg[alias] = value
    for key in ("n_positions", "max_seq_len"):
        if key in fields:
            cfg[key] = rng.choice([64, 128])
    if "attention_types" in fields:  # GPT-Neo: one entry per layer, global or local
        layers = next(cfg[k] for k in ("num_layers", "num_hidden_layers") if k in cfg)
        cfg["attention_types"] = [[["global", "local"], layers // 2]] if layers % 2 == 0 \
            else [[["global"], layers]]
    if "rotary_dim" in fields:  # GPT-J, CodeGen: rotary dims within a head
        width = next(cfg[k] for k in ("n_embd", "hidden_size") if k in cfg)
        cfg["rotary_dim"] = min(8, width // heads)
    if "vocab_size_per_layer_input" in fields:  # Gemma 4's per-layer embeddings: looked up
        # by the token ids, so as many rows as the vocabulary
        cfg["vocab_size_per_layer_input"] = cfg["vocab_size"]
        cfg["hidden_size_per_layer_input"] = rng.choice([0, 8])
    if "type_vocab_size" in fields:
        cfg["type_vocab_size"] = rng.choice([1, 2])
    if "num_sparse_encoder_layers" in fields:
        # Switch Transformers: experts every num_layers // num_sparse_* layers of each stack,
        # the stacks alike (tcalc reads one FFN pattern for both)
        cfg["num_decoder_layers"] = cfg["num_layers"]
        cfg["num_sparse_encoder_layers"] = cfg["num_sparse_decoder_layers"] = rng.choice(
            [0, 1, 2, cfg["num_layers"]])
    if "encoder_sparse_step" in fields:  # NLLB-MoE: experts every sparse_step-th layer
        cfg["encoder_sparse_step"] = cfg["decoder_sparse_step"] = rng.choice([0, 1, 2, 3])
        # (no layer skipped at random in training: the FLOPs of one forward are the model's)
        cfg["encoder_layerdrop"] = cfg["decoder_layerdrop"] = 0.0
    if "kv_channels" in fields:  # JetMoE's head width (its head_dim)
        cfg["kv_channels"] = rng.choice([8, 16])
    if "block_sizes" in fields:  # Funnel: layers per block, the decoder's, its own head width
        cfg |= {"block_sizes": [rng.choice([1, 2]) for _ in range(rng.choice([1, 2, 3]))],
                "num_decoder_layers": rng.choice([0, 1, 2]), "d_head": rng.choice([8, 16])}
        cfg["block_repeats"] = rng.choice([None, [2] * len(cfg["block_sizes"])])
    if "languages" in fields:  # X-MOD: its adapters, one per language, and where they sit
        cfg |= {"languages": rng.sample(["en_XX", "de_DE", "fr_XX"], rng.choice([1, 2, 3])),
                "adapter_reduction_factor": rng.choice([2, 4]),
                "adapter_layer_norm": rng.random() < 0.5, "pre_norm": rng.random() < 0.5}
    if "head_ratio" in fields:  # ConvBERT: attention heads kept, convolution width, embeddings
        cfg |= {"head_ratio": rng.choice([1, 2, 4]), "conv_kernel_size": rng.choice([3, 9]),
                "embedding_size": rng.choice([cfg["hidden_size"], 8])}
    if "entity_vocab_size" in fields:  # LUKE: a small entity table, its width, its queries
        cfg |= {"entity_vocab_size": rng.choice([50, 64]),
                "entity_emb_size": rng.choice([8, cfg["hidden_size"]]),
                "use_entity_aware_attention": rng.random() < 0.5}
    if "prediction_head_size" in fields:  # Ultrabert's prediction head
        cfg["prediction_head_size"] = rng.choice([8, 16])
    if "conv_kernel_size" in fields and "num_landmarks" in fields:  # Nystromformer
        cfg["conv_kernel_size"] = rng.choice([3, 9, 65])
    # an explicit null is the config class's to derive (K/V heads = heads, head_dim = d / h)
    for key in ("num_key_value_heads", "head_dim"):
        if key in cfg and rng.random() < 0.2:
            cfg[key] = None
    if "n_group" in fields and "num_experts" in fields:
        # Beam's group-limited routing needs the experts to split into n_group groups: one
        # group (no rng draw, so the other types' draws stay as recorded)
        cfg |= {"n_group": 1, "topk_group": 1}
    if "index_n_heads" in fields:
        # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): shrink the latent attention and
        # its indexer too (the class defaults are full size); K/V heads = heads under MLA.
        # index_topk >= the FLOPs' T: eager attention masks a dense T × T
        rope = rng.choice([4, 8])
        cfg |= {"num_key_value_heads": heads, "qk_rope_head_dim": rope,
                "qk_nope_head_dim": rng.choice([8, 16]), "v_head_dim": rng.choice([8, 16]),
                "kv_lora_rank": rng.choice([16, 32]), "q_lora_rank": rng.choice([16, 32]),
                "index_n_heads": rng.choice([2, 4]), "index_head_dim": rng.choice([rope, 16]),
                "index_topk": rng.choice([8, 64]), "head_dim": rope}
    if "attn_config" in fields and "ffn_config" in fields:
        # DBRX: attention and FFN keys in sub-configs; rope_theta has no default there, and
        # without clip_qkv the attention cannot run (torch.clamp with neither bound)
        cfg |= {"attn_config": {"rope_theta": 10000.0, "kv_n_heads": kv,
                                "clip_qkv": rng.choice([4.0, 8.0])},
                "ffn_config": {"ffn_hidden_size": rng.choice([16, 24]),
                               "moe_num_experts": rng.choice([4, 8]),
                               "moe_top_k": rng.choice([1, 2]),
                               "moe_jitter_eps": rng.choice([None, 0.01])}}
    if "zero_expert_num" in fields:
        # LongCat-Flash: its own spellings and full-size defaults (MLA, experts), shrunk; no
        # zero-computation experts half the time (a token routed to one computes nothing, so
        # the FLOPs then depend on the random routing)
        # (the standard names were renamed or dropped above: num_layers is its own)
        cfg |= {"ffn_hidden_size": rng.choice([24, 40, 64]),
                "expert_ffn_hidden_size": rng.choice([16, 24]),
                # top-2 or 3: LongcatFlashExperts' eager loop fails with one (its squeeze(0))
                "moe_topk": cfg.pop("num_experts_per_tok", 1) + 1,
                "zero_expert_num": rng.choice([0, 0, 2]), "q_lora_rank": rng.choice([16, 32]),
                "kv_lora_rank": rng.choice([16, 32]), "qk_nope_head_dim": rng.choice([8, 16]),
                "qk_rope_head_dim": rng.choice([4, 8]), "v_head_dim": rng.choice([8, 16]),
                "router_bias": rng.random() < 0.5}
        cfg["head_dim"] = cfg["qk_rope_head_dim"]  # the rotary embedding's width
        cfg["num_key_value_heads"] = cfg["num_attention_heads"]  # MLA: K/V heads = heads
    if "position_buckets" in fields:
        cfg["position_buckets"] = rng.choice([-1, 8])
        cfg["pos_att_type"] = rng.choice(["p2c|c2p", "c2p", ""])
        cfg["norm_rel_ebd"] = rng.choice(["none", "layer_norm"])
        cfg["max_position_embeddings"] = rng.choice([16, 32])
    if "mlp_only_layers" in fields:
        cfg["mlp_only_layers"] = rng.choice([[], [0]])
    # (BigBird-Pegasus has a block_size too, for its sparse attention: no mixer)
    if "linear_head_dim" in fields:
        # Kimi Linear: its MLA layers shrunk (the class defaults are full size; K/V heads =
        # heads), no position encoding at all
        cfg |= {"num_key_value_heads": heads, "kv_lora_rank": rng.choice([16, 32]),
                "qk_rope_head_dim": rng.choice([4, 8]), "qk_nope_head_dim": rng.choice([8, 16]),
                "v_head_dim": rng.choice([8, 16]), "q_lora_rank": rng.choice([None, 16])}
    if fields & {"state_size", "ssm_state_size", "mamba_d_state", "linear_key_head_dim",
                 "conv_L_cache", "block_size", "linear_head_dim"} and "hidden_size" in cfg:
        mixer = draw_mixer(rng, fields, cfg)
        return {k: v for k, v in cfg.items() if k in fields or k.endswith("_token_id")} | mixer
    return {k: v for k, v in cfg.items() if k in fields or k.endswith("_token_id")}


def draw_mixer(rng: random.Random, fields: set[str], cfg: dict) -> dict:
    """Recurrent-mixer sizes and hybrid layouts, in each family's spelling."""
    E = cfg["hidden_size"]
    L = cfg.get("num_hidden_layers") or rng.choice([2, 3, 4])
    expand = rng.choice([1, 2])
    heads = rng.choice([2, 4])
    groups = rng.choice([g for g in (1, 2) if heads % g == 0])
    conv, state = rng.choice([2, 3, 4]), rng.choice([4, 8])
    kinds = [rng.choice(["M", "A"]) for _ in range(L)]
    out: dict = {}
    if "state_size" in fields and "n_groups" not in fields and rng.random() < 0.5:
        # MambaConfig: a file's intermediate_size overrides expand · hidden_size
        out["intermediate_size"] = rng.choice([E, 3 * E])
    if "state_size" in fields:  # MambaConfig, Mamba2Config
        out |= {"state_size": state, "expand": expand, "conv_kernel": conv,
                "use_bias": rng.random() < 0.5, "use_conv_bias": rng.random() < 0.5,
                "time_step_rank": rng.choice(["auto", 4])}
        if "n_groups" in fields:  # Mamba2: heads · head_dim = expand · hidden_size
            out |= {"num_heads": heads, "head_dim": expand * E // heads, "n_groups": groups,
                    "chunk_size": rng.choice([4, 8])}
    if "ssm_state_size" in fields:  # NemotronHConfig: one sublayer per layer
        out |= {"ssm_state_size": state, "mamba_num_heads": heads,
                "mamba_head_dim": rng.choice([4, 8]), "n_groups": groups, "conv_kernel": conv,
                "use_conv_bias": rng.random() < 0.5, "use_bias": rng.random() < 0.5,
                "moe_intermediate_size": rng.choice([16, 24]),
                "moe_shared_expert_intermediate_size": rng.choice([8, 16]),
                "mlp_bias": False,  # refused when true (the routed experts have none)
                "chunk_size": rng.choice([4, 8])}
        pattern = "".join(rng.choice("M*-E") for _ in range(L))
        if rng.random() < 0.5:
            out["hybrid_override_pattern"] = pattern
        else:
            names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
            out["layers_block_type"] = [names[ch] for ch in pattern]
    if "mamba_d_state" in fields:  # Bamba, GraniteMoeHybrid, Jamba
        out |= {"mamba_d_state": state, "mamba_d_conv": conv, "mamba_expand": expand,
                "mamba_conv_bias": rng.random() < 0.5, "mamba_proj_bias": rng.random() < 0.5}
        if "projectors_bias" in fields:  # Falcon-H1: out_proj's bias key, the same switch
            out["projectors_bias"] = out["mamba_proj_bias"]
        if "mamba_n_heads" in fields:
            inner = expand * E
            if "mamba_d_ssm" in fields:  # Falcon-H1: its own mixer width, or null (expand)
                inner = rng.choice([None, heads * 8])
                out |= {"mamba_d_ssm": inner, "mamba_rms_norm": rng.random() < 0.5}
                inner = inner or expand * E
            out |= {"mamba_n_heads": heads, "mamba_d_head": inner // heads,
                    "mamba_n_groups": groups, "mamba_chunk_size": rng.choice([4, 8])}
        if "attn_layer_indices" in fields:
            out["attn_layer_indices"] = [i for i, k in enumerate(kinds) if k == "A"]
        if "layer_types" in fields:
            out["layer_types"] = ["attention" if k == "A" else "mamba" for k in kinds]
        if "attn_layer_period" in fields:  # Jamba
            out |= {"attn_layer_period": 2, "attn_layer_offset": rng.choice([0, 1]),
                    "expert_layer_period": 2, "expert_layer_offset": rng.choice([0, 1]),
                    "mamba_dt_rank": rng.choice(["auto", 4])}
    if "linear_key_head_dim" in fields:  # Qwen3-Next, Qwen3.5: Gated DeltaNet
        out |= {"linear_key_head_dim": state, "linear_value_head_dim": rng.choice([4, 8]),
                "linear_num_key_heads": groups, "linear_num_value_heads": heads,
                "linear_conv_kernel_dim": conv,
                "layer_types": ["full_attention" if k == "A" else "linear_attention"
                                for k in kinds]}
    if "linear_head_dim" in fields:  # Kimi Linear: KDA layers and MLA layers
        out |= {"linear_head_dim": state, "linear_num_heads": heads,
                "linear_conv_kernel_dim": conv,
                "layer_types": ["full_attention" if k == "A" else "linear_attention"
                                for k in kinds]}
    if "block_size" in fields and "full_attn_alpha_factor" in fields:  # MiniMax lightning
        out |= {"block_size": rng.choice([4, 8]),
                "layer_types": ["full_attention" if k == "A" else "linear_attention"
                                for k in kinds]}
    if "conv_L_cache" in fields:  # LFM2
        out |= {"conv_L_cache": conv, "conv_bias": rng.random() < 0.5,
                "block_multiple_of": rng.choice([8, 16]),
                "layer_types": ["full_attention" if k == "A" else "conv" for k in kinds]}
    return out


def draw_tower(rng: random.Random, kind: str, text_width: int,
               model_type: str = "") -> tuple[dict, dict]:
    """A small vision_config of this tower kind, and the wrapper's own keys beside it (in the
    spelling of the wrapper's vision config: SigLIP2's num_patches, MoonViT's position grid)."""
    heads = rng.choice([2, 4])
    width = heads * rng.choice([8, 16])
    patch = rng.choice([2, 4])
    vision: dict = {"hidden_size": width, "intermediate_size": rng.choice([24, 40, 64])}
    top: dict = {}
    if kind == "siglip":
        vision |= {"num_hidden_layers": rng.choice([1, 2]), "num_attention_heads": heads,
                   "patch_size": patch, "image_size": patch * rng.choice([2, 4]),
                   "vision_use_head": rng.random() < 0.5}
        if model_type == "lfm2_vl":  # SigLIP2: a position table of num_patches rows
            vision["num_patches"] = rng.choice([4, 16])
            top = {"downsample_factor": rng.choice([1, 2]),
                   "projector_hidden_size": rng.choice([16, 32]),
                   "projector_bias": rng.random() < 0.5}
        if model_type == "kimi_k25":  # MoonViT: a height × width grid of positions
            k = rng.choice([1, 2])
            vision |= {"pos_emb_height": rng.choice([2, 4]), "pos_emb_width": rng.choice([2, 4]),
                       "merge_kernel_size": [k, k]}
            top = {"projection_hidden_size": width}
    elif kind in ("qwen2_5_vl", "qwen3_vl"):
        depth = rng.choice([1, 2, 3])
        vision |= {"depth": depth, "num_heads": heads, "patch_size": patch,
                   "temporal_patch_size": rng.choice([1, 2]),
                   "spatial_merge_size": rng.choice([1, 2]), "out_hidden_size": text_width}
        if kind == "qwen2_5_vl":
            vision["fullatt_block_indexes"] = [depth - 1]
            if model_type == "exaone4_5":  # its vision attention's K/V heads
                vision["num_key_value_heads"] = rng.choice([k for k in (1, 2, heads)
                                                            if heads % k == 0])
        else:
            vision |= {"num_position_embeddings": rng.choice([4, 16]),
                       "deepstack_visual_indexes": sorted(rng.sample(range(depth),
                                                                     rng.choice([0, 1])))}
    elif kind == "pixtral":
        vision |= {"num_hidden_layers": rng.choice([1, 2]), "num_attention_heads": heads,
                   "head_dim": width // heads, "patch_size": patch,
                   "image_size": patch * rng.choice([4, 8])}
        top = {"spatial_merge_size": rng.choice([1, 2]),
               "multimodal_projector_bias": rng.random() < 0.5,
               "vision_feature_layer": rng.choice([-1, [-1, -2]])}
    elif kind == "got_ocr2":  # Segment Anything's ViT: windows, some global layers, a neck
        layers = rng.choice([1, 2, 3])
        vision = {"hidden_size": width, "mlp_dim": vision["intermediate_size"],
                  "num_hidden_layers": layers, "num_attention_heads": heads,
                  "patch_size": patch, "image_size": patch * rng.choice([4, 8]),
                  "window_size": rng.choice([0, 2, 4]), "output_channels": rng.choice([8, 16]),
                  "global_attn_indexes": sorted(rng.sample(range(layers + 1),
                                                           rng.choice([0, 1, 2])))}
    elif kind == "fuyu":  # one linear layer over a patch's pixels (Fuyu's own keys)
        vision, top = {}, {"patch_size": patch, "num_channels": rng.choice([1, 3])}
    elif kind == "glmasr":  # Whisper-style, K/V heads of its own
        vision |= {"num_hidden_layers": rng.choice([1, 2]), "num_attention_heads": heads,
                   "num_key_value_heads": rng.choice([k for k in (1, 2, heads)
                                                      if heads % k == 0]),
                   "num_mel_bins": rng.choice([8, 16])}
    elif kind == "qwen3_asr":  # its own spellings: three convolutions, conv_out, output_dim
        vision = {"d_model": width, "encoder_layers": rng.choice([1, 2]),
                  "encoder_attention_heads": heads,
                  "encoder_ffn_dim": vision["intermediate_size"],
                  "num_mel_bins": rng.choice([8, 13, 16]),
                  "downsample_hidden_size": rng.choice([4, 8]),
                  "output_dim": rng.choice([text_width, 24])}
    elif kind == "whisper":  # an audio language model's encoder, in both spellings of its keys
        layers = rng.choice([1, 2])
        vision |= {"d_model": width, "num_hidden_layers": layers, "encoder_layers": layers,
                   "num_attention_heads": heads, "encoder_attention_heads": heads,
                   "encoder_ffn_dim": vision["intermediate_size"],
                   "num_mel_bins": rng.choice([8, 16]),
                   "max_source_positions": rng.choice([8, 16])}
        if model_type == "moss_transcribe_diarize":
            top = {"projector_bias": rng.random() < 0.5, "audio_merge_size": rng.choice([1, 4])}
        if model_type in ("audioflamingo3", "musicflamingo"):
            top = {"projector_bias": rng.random() < 0.5}
            vision["model_type"] = "audioflamingo3_encoder"  # (the class needs it named)
    elif kind == "gemma4":  # heads of their own width, fewer K/V heads
        vision |= {"num_hidden_layers": rng.choice([1, 2]), "num_attention_heads": heads,
                   "num_key_value_heads": rng.choice([k for k in (1, 2, heads)
                                                      if heads % k == 0]),
                   "head_dim": rng.choice([8, 16]), "patch_size": patch,
                   "position_embedding_size": rng.choice([8, 16]),
                   "use_clipped_linears": rng.random() < 0.5}
        if rng.random() < 0.6:  # its conformer audio encoder (audio_config), small
            aheads = rng.choice([2, 4])
            top = {"audio_config": {
                "hidden_size": aheads * rng.choice([4, 8]), "num_attention_heads": aheads,
                "num_hidden_layers": rng.choice([1, 2]), "conv_kernel_size": rng.choice([3, 5]),
                "subsampling_conv_channels": [rng.choice([4, 6, 8]), rng.choice([2, 4])],
                "output_proj_dims": rng.choice([8, 24]),
                "use_clipped_linears": rng.random() < 0.5}}
    elif kind == "gemma4_unified":  # an encoder-free patch embedder, audio frames beside it
        vision = {"patch_size": patch, "pooling_kernel_size": rng.choice([1, 2, 3]),
                  "mm_embed_dim": width, "mm_posemb_size": rng.choice([8, 16]),
                  "output_proj_dims": width}
        if rng.random() < 0.75:
            top = {"audio_config": rng.choice([{}, {"audio_embed_dim": rng.choice([8, 24])},
                                               {"output_proj_dims": rng.choice([8, 24])}])}
    else:  # mllama
        layers = rng.choice([2, 3])
        picked = sorted(rng.sample(range(layers), rng.choice([1, 2])))
        vision |= {"num_hidden_layers": layers, "num_global_layers": rng.choice([1, 2]),
                   "attention_heads": heads, "patch_size": patch,
                   "image_size": patch * rng.choice([2, 4]), "max_num_tiles": rng.choice([2, 4]),
                   "supported_aspect_ratios": [[1, 1], [1, 2], [2, 1]][:rng.choice([1, 3])],
                   "intermediate_layers_indices": picked,
                   "vision_output_dim": width * (len(picked) + 1)}
    return vision, top


def class_of(config: dict) -> str:
    """The class counted: the one ``architectures`` names (a seq2seq family's *ForCausalLM,
    --causal), else the model type's head class."""
    return counted_class(config)


def reference(config: dict) -> int:
    import torch
    import transformers

    kwargs = {k: v for k, v in config.items() if k != "architectures"}
    cfg = transformers.AutoConfig.for_model(**kwargs)
    with torch.device("meta"):
        model = getattr(transformers, class_of(config))(cfg)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def flops_per_token(config: dict, seq_len: int) -> int | None:
    """FlopCounterMode over one forward of T tokens, eager attention and experts, divided by
    T; an encoder-decoder reads T source and T target tokens (tcalc's per-token FLOPs count
    one of each, as tools/reference_flops.py runs it)."""
    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    kwargs = {k: v for k, v in config.items() if k != "architectures"}
    cfg = transformers.AutoConfig.for_model(**kwargs, attn_implementation="eager",
                                            experts_implementation="eager")
    torch.manual_seed(0)
    model = getattr(transformers, class_of(config))(cfg).train()
    ids = torch.randint(0, cfg.get_text_config().vocab_size, (1, seq_len))
    both = getattr(cfg, "is_encoder_decoder", False) and "architectures" not in config
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, use_cache=False, **({"decoder_input_ids": ids} if both else {}))
    LAST_OPS.clear()
    LAST_OPS.update({str(op).split(".")[-1]: n for op, n in
                     counter.get_flop_counts()["Global"].items()})
    return counter.get_total_flops() // seq_len


# the last flops_per_token call's FLOPs over the whole sequence by aten op (mm, bmm,
# convolution, ...): recorded for recurrent mixers, whose conv padding and chunked scans the
# tests account for op by op
LAST_OPS: dict[str, int] = {}


def main() -> None:
    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("types", nargs="*")
    ap.add_argument("-v", action="store_true", help="print the FLOPs by op of a difference")
    ap.add_argument("--cases", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", type=Path)
    ap.add_argument("--causal", action="store_true",
                    help="count each seq2seq type's *ForCausalLM (its decoder alone), named "
                         "in architectures")
    ap.add_argument("--task", help="count the classes of these tasks (comma-separated: base, "
                         "seq_cls, token_cls, qa, multiple_choice; transformers' auto mappings), "
                         "named in architectures; lm: the head class, as without --task")
    ap.add_argument("--wrappers", action="store_true",
                    help="count the vision-language wrappers whole (hf.WRAPPERS): the default, "
                         "then drawn text and vision configs")
    ap.add_argument("--flops", type=int, default=0, metavar="T",
                    help="also compare forward FLOPs per token at T tokens (recorded with "
                         "--write)")
    args = ap.parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - reproducible test configs, not secrets
    rows, bad = [], 0
    from transformer_calc.hf import SEQ2SEQ, WRAPPERS
    from transformer_calc.hf_defaults import TASK_CLASSES

    jobs: list[tuple[str, dict, str]] = []  # (model type, architectures, task)
    for model_type in args.types or sorted(WRAPPERS if args.wrappers else HEAD_CLASS):
        if args.wrappers:
            jobs.append((model_type, {"architectures": [WRAPPERS[model_type].cls]}, "whole"))
            continue
        if not args.task:
            jobs.append((model_type, {"architectures": [SEQ2SEQ[model_type].decoder_cls]}
                         if args.causal else {}, ""))
        for task in args.task.split(",") if args.task else ():
            if task == "lm":  # the type's head class, as without --task
                jobs.append((model_type, {}, ""))
                continue
            task_cls = TASK_CLASSES.get(model_type, {}).get(task)
            if task_cls is not None and task_cls != HEAD_CLASS[model_type]:
                jobs.append((model_type, {"architectures": [task_cls]}, task))
    for model_type, named, task in jobs:
        cls = type(transformers.AutoConfig.for_model(model_type))
        # (Whisper's own keys sit side by side; an audio LM's encoder is in audio_config)
        whisper = task == "whole" and not WRAPPERS[model_type].tower_key \
            and WRAPPERS[model_type].tower == "whisper"
        nested = getattr(TABLE_DRIVEN.get(model_type), "text_config", False) or (
            task == "whole" and not whisper)
        if nested:  # Mllama, the wrappers: the drawn keys go in text_config
            cls = type(transformers.AutoConfig.for_model(model_type).text_config)
        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) \
            else set(transformers.AutoConfig.for_model(model_type).to_dict())
        counted, attempts = 0, 0
        config: dict = {"model_type": model_type, **named}
        # the default, then drawn configs until --cases are counted (a draw the class rejects
        # or tcalc refuses by name does not count; at most 4 × --cases draws)
        # an optional tower at its class's defaults, and audio frames alone (Gemma 4's)
        w = WRAPPERS.get(model_type) if task == "whole" else None
        extra = [] if w is None or not w.tower_optional else [
            {w.tower_key: {}, **({w.audio_key: {}} if w.audio_key else {})}] + (
            [{w.audio_key: {}}] if w.audio_key else [])
        while counted <= args.cases + len(extra) and attempts <= 4 * args.cases:
            if 0 < attempts <= len(extra):
                config = {"model_type": model_type, **named, **extra[attempts - 1]}
            elif attempts and nested:
                inner = draw(rng, fields)
                if "cross_attention_layers" in fields:  # some of the layers, by index
                    n = inner["num_hidden_layers"]
                    inner["cross_attention_layers"] = sorted(rng.sample(range(n),
                                                                        rng.choice([1, n // 2])))
                config = {"model_type": model_type, **named, "text_config": inner}
                if task == "whole":
                    inner["model_type"] = transformers.AutoConfig.for_model(
                        model_type).text_config.model_type  # (EXAONE 4.5 needs it named)
                    vision, top = draw_tower(rng, WRAPPERS[model_type].tower,
                                             inner.get("hidden_size", 64), model_type)
                    # (the head tied or not at the top, where transformers 5 reads it)
                    config |= {WRAPPERS[model_type].tower_key: vision,
                               "tie_word_embeddings": rng.random() < 0.5, **top}
                    flat = WRAPPERS[model_type].flat_text_keys
                    if flat:  # Fuyu: the tower's keys its own, the text's flat half the time
                        config.pop("")
                        if rng.random() < 0.5:
                            text = config.pop("text_config")
                            config |= {k: v for k, v in text.items() if k in flat}
            elif attempts:
                config = {"model_type": model_type, **named, **draw(rng, fields)}
                if model_type == "esmc":  # no GQA (EsmcConfig), heads as wide as hidden_size
                    config |= {"num_key_value_heads": config["num_attention_heads"],
                               "head_dim": config["hidden_size"] // config["num_attention_heads"]}
                if whisper:  # the encoder's own sizes: its input and its (frozen) positions
                    config |= {"num_mel_bins": rng.choice([8, 80]),
                               "max_source_positions": rng.choice([16, 32]),
                               "max_target_positions": rng.choice([16, 32])}
            if attempts and task in ("seq_cls", "token_cls", "qa"):
                # the labels as a file gives them: id2label, num_labels, or neither (2)
                config |= rng.choice([{"id2label": {str(i): f"L{i}" for i in range(3)}},
                                      {"num_labels": 5}, {}])
            attempts += 1
            try:
                want = reference(config)
            except Exception as e:  # noqa: BLE001 - a drawn config the class rejects
                print(f"skip {model_type}: {type(e).__name__}: {str(e)[:80]}")
                continue
            try:
                got = count_params(spec_from_hf(config, "drawn")).total
            except SpecError as e:  # refused by name: never a miscount
                print(f"refused {model_type}: {str(e)[:100]}")
                continue
            counted += 1
            ref = None
            # drawn configs only, and small ones (a family whose keys the draw does not
            # shrink keeps its full size): the counter runs the model with real weights
            # (not with zero-computation experts: the FLOPs then follow the random routing)
            # (the type's head class only: tcalc's FLOPs leave the classification heads out)
            if args.flops and not task and len(config) > 1 + len(named) and want < 50_000_000 \
                    and not config.get("zero_expert_num"):
                try:
                    ref = flops_per_token(config, args.flops)
                except Exception as e:  # noqa: BLE001 - a forward the class cannot run
                    print(f"skip flops {model_type}: {type(e).__name__}: {str(e)[:80]}")
                    ref = None
                if ref is not None and spec_from_hf(config, "drawn").unmodelled:
                    ref = None  # (tcalc refuses this type's FLOPs, naming what it lacks)
                if ref is not None:
                    from transformer_calc.flops import count_flops

                    mine = count_flops(spec_from_hf(config, "drawn"), args.flops).total
                    print(f"{'flops ok  ' if mine == ref else 'flops DIFF'} {model_type:18s} "
                          f"{ref:>14,} {mine - ref:+,}"
                          + (f" {LAST_OPS}" if mine != ref and "-v" in sys.argv else ""))
            ok = got == want
            bad += not ok
            print(f"{'ok  ' if ok else 'DIFF'} {model_type:18s} {want:>16,} {got - want:+,}"
                  + ("" if ok else f"  {json.dumps(config)}"))
            row = {"config": config, "total": want, "class": class_of(config)}
            if ref is not None:
                row[f"flops_per_token_T{args.flops}"] = ref
                if spec_from_hf(config, "drawn").mixer != "none":
                    row[f"flops_ops_T{args.flops}"] = dict(sorted(LAST_OPS.items()))
            rows.append(row)
    print(f"# {len(rows) - bad} of {len(rows)} equal; torch + transformers "
          f"{transformers.__version__}", file=sys.stderr)
    if args.write:
        args.write.write_text(json.dumps({"transformers": transformers.__version__,
                                          "cases": rows}, indent=0) + "\n")


if __name__ == "__main__":
    main()
