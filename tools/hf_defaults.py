"""Write transformer_calc/hf_defaults.py: each generic record's config-class defaults, and
which model types' eager attention computes its softmax in fp32 (developer tool, needs
transformers).

transformers' config classes are dataclasses; a field's default is what the class fills in
when config.json leaves the key out (None where the class derives it, e.g. head_dim from
hidden_size / num_attention_heads, which the mapper derives the same way). Only the keys the
generic mapper reads are written.

    python tools/hf_defaults.py > transformer_calc/hf_defaults.py
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import pprint
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformer_calc.hf import TABLE_DRIVEN  # noqa: E402

KEYS = """hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads
head_dim vocab_size max_position_embeddings tie_word_embeddings attention_bias mlp_bias
use_bias use_qkv_bias qkv_bias bias attention_out_bias use_qk_norm hidden_act
hidden_activation num_experts num_local_experts n_routed_experts num_experts_per_tok
moe_intermediate_size shared_expert_intermediate_size n_shared_experts num_shared_experts
shared_intermediate_size first_k_dense_replace decoder_sparse_step mlp_only_layers
use_parallel_residual qk_layernorm moe_num_shared_experts type_vocab_size dim n_layers n_heads
hidden_dim activation d_model encoder_layers decoder_layers encoder_attention_heads
decoder_attention_heads encoder_ffn_dim decoder_ffn_dim activation_function
share_encoder_decoder_embeddings decoder_vocab_size n_embd n_layer n_head n_inner n_positions
num_layers num_heads attention_heads ffn_dim afn activation_function multi_query
expansion_ratio max_seq_len n_layers n_heads kv_lora_rank q_lora_rank qk_nope_head_dim
qk_rope_head_dim v_head_dim moe_num_experts moe_topk qk_layernorm moe_layer_freq d_kv d_ff
num_layers num_decoder_layers relative_attention_num_buckets feed_forward_proj
encoder_attention_type intermediate_size_mlp interleave_moe_layer_step dense_intermediate_size
shared_expert_intermediate_size dff emb_dim n_langs use_lang_emb sinusoidal_embeddings moe_k
moe_layer_start_index moe_layer_end_index moe_layer_interval embedding_size
decoder_sparse_step num_dense_layers position_biased_input relative_attention position_buckets
max_relative_positions norm_rel_ebd share_att_key pos_att_type conv_kernel_size
state_size expand conv_kernel time_step_rank use_conv_bias n_groups chunk_size
ssm_state_size mamba_num_heads mamba_head_dim mlp_hidden_act moe_shared_expert_intermediate_size
mamba_n_heads mamba_d_head mamba_n_groups mamba_d_state mamba_d_conv mamba_expand
mamba_chunk_size mamba_conv_bias mamba_proj_bias mamba_dt_rank attn_layer_period
attn_layer_offset expert_layer_period expert_layer_offset linear_conv_kernel_dim
linear_key_head_dim linear_value_head_dim linear_num_key_heads linear_num_value_heads
conv_bias conv_L_cache block_multiple_of block_ffn_dim_multiplier block_auto_adjust_ff_dim
full_attention_interval mamba_d_ssm mamba_rms_norm projectors_bias block_size mlp_layer_types
gating type_vocab_sizes max_2d_position_embeddings hidden_dropout_prob max_target_positions
reset_position_index_per_cell
layernorm_embedding use_learned_position_embeddings cross_attention_hidden_size index_n_heads
index_head_dim index_topk intermediate_multiple_size use_sandwich_norm use_attention_gate
attention_probs_dropout_prob resid_pdrop embd_pdrop attn_pdrop dropout_rate dropout
attention_dropout hidden_dropout residual_dropout input_embedding_size
output_embedding_size num_hidden_groups inner_group_num shape_vocab_size shape_embed_dim
pronunciation_vocab_size pronunciation_embed_dim concat_input ffn_hidden_size
expert_ffn_hidden_size zero_expert_num router_bias qk_head_dim kv_channels dense_act_fn
num_sparse_encoder_layers num_sparse_decoder_layers router_jitter_noise
encoder_sparse_step decoder_sparse_step d_inner d_head ff_activation
block_sizes block_repeats num_decoder_layers languages adapter_reduction_factor
adapter_layer_norm pre_norm summary_use_proj head_ratio num_groups entity_vocab_size
entity_emb_size use_entity_aware_attention q_groups k_groups v_groups post_attention_groups
intermediate_groups output_groups prediction_head_size attention_chunk_size""".split()


# transformers' eager_attention_forward of Llama-style models: the softmax runs in
# fp32 and is cast back, so a 16-bit model keeps the fp32 probabilities and a 16-bit copy
SOFTMAX_FP32 = ("softmax(attn_weights, dim=-1, dtype=torch.float32)",
                # XLM, FlauBERT, LongT5: softmax(scores.float()).type_as(scores); MPT
                "softmax(scores.float(), dim=-1)", "softmax(attention_scores.float(), dim=-1)")


def types_whose_code_has(*patterns: str) -> list[str]:
    """The model types tcalc reads whose counted class's modelling file holds one of the
    patterns (read from the installed transformers' source). The file is the class's own:
    InternLM3 and IQuestCoder are LlamaForCausalLM, GPT-SW3 is GPT2LMHeadModel, and
    data2vec-text's file is modeling_data2vec_text (a lookup by model type missed all four)."""
    import inspect

    import transformers

    from transformer_calc.hf import HEAD_CLASS, MAPPERS

    out = []
    for model_type in sorted(MAPPERS):
        text = Path(inspect.getsourcefile(getattr(transformers, HEAD_CLASS[model_type])) or
                    "").read_text()
        if any(pattern in text for pattern in patterns):
            out.append(model_type)
    return out


# Eager attention that appends the sink logits as one more softmax column (the probabilities
# kept are T + 1 wide), and that subtracts each row's max first (max keeps its int64 indices)
SINK_COLUMN = "torch.cat([attn_weights, sinks], dim=-1)"
ROW_MAX = ".max(dim=-1, keepdim=True).values"
# ... or that applies the sinks after it, as a sigmoid of the scores' logsumexp (GraniteSWA)
SINK_LSE = "lse = torch.logsumexp(attn_weights, dim=-1)"
# Eager attention that casts Q and K to fp32 before the scores (GPT-Neo, GPT-J, CodeGen;
# Flint)
ATTN_FP32 = ("query = query.to(torch.float32)",
             "torch.matmul(query.float(), key_states.float().transpose(2, 3))")
# RoPE that concatenates the rotated part with the rest (Q then contiguous in (B, H, T, d))
ROPE_CONCAT = ("torch.cat([q_embed, q_pass]", "torch.cat([q_rot, q_pass]",
               "torch.cat((query_rot, query_pass)", "torch.cat((query, query_pass)",
               "torch.cat([(q_rot * cos)", "torch.cat((q_embed, q_pass)")
# RoPE in fp32: cos and sin kept fp32, q·cos + rotate_half(q)·sin computed in fp32 and cast
# back to the query's dtype (OLMo's family)
ROPE_FP32 = "q_embed.to(q_type)"
# LayerNorms written out in fp32 that compute x − mean twice (CohereLayerNorm)
NORM_MANUAL = "variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)"
# Experts modules that take transformers' experts_implementation (grouped_mm by default)
EXPERTS_GROUPED = "@use_experts_implementation"
# Experts modules without that path that run every expert on every token (Llama4TextMoe);
# the others without it loop over the experts hit, as the eager path does
EXPERTS_EVERY = "routed_in = hidden_states.repeat(router_scores.shape[1], 1)"
# Eager attention that clamps the masked scores from below (XGLM: torch.max(scores,
# finfo.min)): max keeps its input, one more B·H·T² tensor
SCORES_CLAMPED = "torch.full((), torch.finfo(attn_weights.dtype).min"


# ... unless the upcast is for fp16 scores alone (XGLM): bf16, what training uses, stays bf16
# (measured). tcalc's activation bytes do not tell fp16 from bf16; it follows bf16.
FP16_ONLY_UPCAST = "if attn_weights.dtype == torch.float16:"


# LongT5's `softmax(scores.float())` is its local and transient-global attention's, which
# tcalc models apart (memory.activation_breakdown's local_core); its dense attention (the
# decoder's eager_attention_forward) softmaxes in the scores' dtype (measured: the autograd
# graph of LongT5ForConditionalGeneration in bf16)
LOCAL_ATTENTION_ONLY = ("longt5",)


def softmax_fp32_types() -> list[str]:
    """The model types whose eager attention has SOFTMAX_FP32 (for bf16 too)."""
    fp16_only = set(types_whose_code_has(FP16_ONLY_UPCAST)) | set(LOCAL_ATTENTION_ONLY)
    return [t for t in types_whose_code_has(*SOFTMAX_FP32) if t not in fp16_only]


# RMSNorms whose weight multiplies in fp32 before the cast back, so the normalised tensor the
# mul keeps is fp32 (Gemma's x̂ · (1 + w), OLMo-2's and gpt-oss's (w · x̂).to(dtype), Gemma 4's
# x̂ · w.float())
NORM_FP32 = ("return (self.weight * hidden_states).to(input_dtype)",
             "output * (1.0 + self.weight.float())",
             "normed_output = normed_output * self.weight.float()",
             "return (self.weight.to(torch.float32) * hidden_states).to(input_dtype)",
             # OLMo: a LayerNorm on an fp32 copy (input and statistics kept in fp32)
             "F.layer_norm(hidden_states.to(dtype=torch.float32)")


def norm_fp32_types() -> list[str]:
    """The model types whose RMSNorm has one of NORM_FP32."""
    return types_whose_code_has(*NORM_FP32)


# T5LayerNorm: the variance from an fp32 copy, then the input itself (16-bit in a 16-bit model)
# multiplied by the fp32 rsqrt, so the mul keeps that input beside the copy
NORM_KEEPS_INPUT = "variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)"


def norm_keeps_input_types() -> list[str]:
    """The model types whose RMSNorm has NORM_KEEPS_INPUT."""
    return types_whose_code_has(NORM_KEEPS_INPUT)


# Gemma3nRMSNorm: 1/rms as torch.pow(mean_squared, -0.5), which keeps the mean square beside
# its result, and the weight multiplied as an fp32 copy (kept in a 16-bit model)
NORM_MEAN_SQUARE = "torch.pow(mean_squared, -0.5)"


# DeepSeek-V3-style routers: F.linear on fp32 casts of the input and the weight, so a 16-bit
# model keeps an fp32 copy of each for backward; Switch Transformers' router casts its input
# to router_dtype (fp32) and its classifier module to it (measured: the fp32 input is kept)
ROUTER_FP32 = ("F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))",
               "F.linear(hidden_states.float(), self.weight.float())",
               "F.linear(hidden_states.type(torch.float32), self.classifier.weight.type(",
               "self.classifier = self.classifier.to(self.dtype)")


def router_fp32_types() -> list[str]:
    """The model types whose MoE router has ROUTER_FP32."""
    return types_whose_code_has(*ROUTER_FP32)


def no_sdpa_types() -> list[str]:
    """The model types whose counted class has no SDPA path (``_supports_sdpa`` false):
    transformers refuses attn_implementation="sdpa" for them (Gemma 2, gpt-oss, ...)."""
    import transformers

    from transformer_calc.hf import HEAD_CLASS, MAPPERS

    return [t for t in sorted(MAPPERS)
            if not getattr(getattr(transformers, HEAD_CLASS[t]), "_supports_sdpa", False)]


def no_flash_types() -> list[str]:
    """The model types whose counted class has no flash_attention_2 path
    (``_supports_flash_attn`` false): transformers refuses attn_implementation=
    "flash_attention_2" for them."""
    import transformers

    from transformer_calc.hf import HEAD_CLASS, MAPPERS

    return [t for t in sorted(MAPPERS)
            if not getattr(getattr(transformers, HEAD_CLASS[t]), "_supports_flash_attn", False)]


def flash_kernels() -> dict[str, str]:
    """The model types whose counted class lists the flash kernels it takes
    (``_compatible_flash_implementations``) without flash_attention_2: from_pretrained
    replaces attn_implementation="flash_attention_2" by the first of them with builds for
    the device (modeling_utils.PreTrainedModel._check_and_adjust_attn_implementation), a hub
    kernel or flash_attention_4; the first listed, per model type."""
    import transformers

    from transformer_calc.hf import HEAD_CLASS, MAPPERS

    out = {}
    for t in sorted(MAPPERS):
        kernels = getattr(getattr(transformers, HEAD_CLASS[t]),
                          "_compatible_flash_implementations", None)
        if kernels and "flash_attention_2" not in kernels:
            out[t] = kernels[0]
    return out


def loss_no_upcast_types() -> list[str]:
    """The model types whose counted class takes its loss without self.loss_function (whose
    ForCausalLMLoss and ForMaskedLMLoss upcast the logits to fp32): nn.CrossEntropyLoss or
    nn.functional.cross_entropy on the logits as they are (BERT, BART, T5, XLM)."""
    import inspect

    import transformers

    from transformer_calc.hf import HEAD_CLASS, MAPPERS

    return [t for t in sorted(MAPPERS) if "self.loss_function(" not in inspect.getsource(
        getattr(transformers, HEAD_CLASS[t]).forward)]


def peft_moe_patterns() -> dict[str, str]:
    """Model types (of those tcalc reads) whose MoE layers peft converts for LoRA on
    transformers 5, and the pattern: peft.utils.transformers_weight_conversion's
    _MODEL_TO_CONVERSION_PATTERN restricted to _MOE_TARGET_MODULE_MAPPING's patterns."""
    from peft.utils import transformers_weight_conversion as conv

    from transformer_calc.hf import MAPPERS

    return {t: p for t, p in sorted(conv._MODEL_TO_CONVERSION_PATTERN.items())
            if t in MAPPERS and p in conv._MOE_TARGET_MODULE_MAPPING
            and conv._MOE_FUSED_TARGETS.get(p)}


def linear_names() -> dict[str, tuple[str, ...]]:
    """Per model type: which of the transformers module names --lora-targets accepts
    (lora.ROLE_ALIASES, and Mixtral's w1/w2/w3) name an nn.Linear or Conv1D of the class
    tcalc counts, built on the meta device from the type's default config and the small configs
    of it in the registries and tests/data/hf/variants."""
    import torch
    import transformers
    from transformers.pytorch_utils import Conv1D

    from transformer_calc.hf import HEAD_CLASS, MAPPERS
    from transformer_calc.lora import ROLE_ALIASES

    known = set(ROLE_ALIASES) | {"w1", "w2", "w3"}
    moe = peft_moe_patterns()
    out = {}
    # DeBERTa's defaults build no position projections: build them too
    relative = {"relative_attention": True, "pos_att_type": ["c2p", "p2c"],
                "share_att_key": False}
    # and the registries' small configs of the type, whose layers differ (DeepSeek's q_proj
    # without a q_lora_rank, Bamba's attention layers): the names of any of them (one that a
    # config lacks adapts nothing there, as in PEFT)
    root = Path(__file__).resolve().parents[1]
    small: dict[str, list[dict]] = {}
    for name in ("registry_cases.json", "registry_cases_more.json", "registry_mixers_T8.json"):
        for case in json.loads((root / "tests/data" / name).read_text())["cases"]:
            small.setdefault(case["config"]["model_type"], []).append(case["config"])
    for path in sorted((root / "tests/data/hf/variants").glob("*.json")):
        config = json.loads(path.read_text())
        small.setdefault(config.get("model_type", ""), []).append(config)
    for model_type in sorted(MAPPERS):
        names: set[str] = set()
        built = False
        for config in [{"model_type": model_type}, *small.get(model_type, [])]:
            try:
                cfg = transformers.AutoConfig.for_model(
                    **config, **(relative if model_type.startswith("deberta") else {}))
                with torch.device("meta"):
                    model = getattr(transformers, HEAD_CLASS[model_type])(cfg)
            except Exception:  # noqa: BLE001, S112 - a config that does not build
                continue
            built = True
            names |= {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                      if isinstance(m, (torch.nn.Linear, Conv1D))}
        if not built:
            continue
        # PEFT's MoE conversion: the transformers-4 expert names stand for the fused experts
        names |= {"mixtral": {"w1", "w2", "w3"}, "qwen2_moe": {"gate_proj", "up_proj",
                                                               "down_proj"}
                  }.get(moe.get(model_type, ""), set())
        out[model_type] = tuple(sorted(names & known))
    return out


# transformers' auto mappings, by the task tcalc names them: the class each builds for a
# model type (AutoModel, AutoModelForSequenceClassification, ...)
TASK_MAPPINGS = (("base", "MODEL_MAPPING_NAMES"), ("causal", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
                 ("masked", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
                 ("seq2seq", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
                 ("seq_cls", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
                 ("token_cls", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
                 ("qa", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES"),
                 ("multiple_choice", "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES"),
                 ("speech", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
                 ("image_text", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"))


def task_classes(model_types: list[str]) -> dict[str, dict[str, str]]:
    """Per model type: the class transformers' auto mapping of each task builds for it."""
    from transformers.models.auto import modeling_auto

    out: dict[str, dict[str, str]] = {}
    for model_type in model_types:
        # (a tuple of classes: the auto class builds the first, Funnel's FunnelModel before
        # FunnelBaseModel)
        row = {task: _first(getattr(modeling_auto, name)[model_type])
               for task, name in TASK_MAPPINGS if model_type in getattr(modeling_auto, name)}
        if row:
            out[model_type] = row
    return out


def _first(classes: str | tuple[str, ...]) -> str:
    return classes[0] if isinstance(classes, tuple) else classes


def frozen(name: str, comment: str, types: list[str]) -> str:
    """One generated set of model types, with the comment that says what it marks."""
    return (f"\n\n{comment}\n{name}: frozenset[str] = frozenset(\n"
            + pprint.pformat(types, width=92, compact=True) + ")")


def config_keys(model_types: list[str]) -> dict[str, tuple[str, ...]]:
    """Per model type: which of the keys hf.FILE_KEYS knows its config class has (so that an
    error names the key as the family spells it: GPT-2's n_embd, Mixtral's num_local_experts)."""
    import transformers

    from transformer_calc.hf import FILE_KEYS, TABLE_DRIVEN

    known = {k for keys in FILE_KEYS.values() for k in keys}
    out = {}
    for model_type in model_types:
        cls = type(transformers.AutoConfig.for_model(model_type))
        if getattr(TABLE_DRIVEN.get(model_type), "text_config", False):
            cls = cls.sub_configs["text_config"]  # Mllama: the language model's class
        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) \
            else set(transformers.AutoConfig.for_model(model_type).to_dict())
        out[model_type] = tuple(sorted(fields & known))
    return out


def model_types() -> list[str]:
    """The model types tcalc reads."""
    from transformer_calc.hf import MAPPERS

    return sorted(MAPPERS)


def class_defaults(cls: type, keys: list[str]) -> dict:
    """A config dataclass's defaults for these keys (the ones it has)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    row = {}
    for key in keys:
        f = fields.get(key)
        if f is None:
            continue
        if f.default is not dataclasses.MISSING:
            row[key] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            row[key] = f.default_factory()
    return row


# The keys of a wrapper's vision_config (towers.py reads them), and of the wrapper itself
TOWER_KEYS = """hidden_size intermediate_size num_hidden_layers depth num_attention_heads num_heads
attention_heads patch_size image_size num_channels in_channels in_chans temporal_patch_size
spatial_merge_size out_hidden_size num_position_embeddings deepstack_visual_indexes
vision_use_head num_global_layers max_num_tiles supported_aspect_ratios vision_output_dim
head_dim num_patches pos_emb_height pos_emb_width merge_kernel_size num_key_value_heads
position_embedding_size mm_embed_dim mm_posemb_size pooling_kernel_size output_proj_dims
audio_embed_dim downsample_hidden_size output_dim mlp_dim output_channels window_size
global_attn_indexes qkv_bias use_abs_pos use_rel_pos conv_kernel_size
subsampling_conv_channels""".split()
WHISPER_KEYS = """d_model encoder_layers encoder_attention_heads encoder_ffn_dim num_mel_bins
max_source_positions""".split()
WRAPPER_KEYS = """tie_word_embeddings spatial_merge_size multimodal_projector_bias
vision_feature_layer projector_hidden_act downsample_factor projector_hidden_size projector_bias
projector_use_layernorm projection_hidden_size audio_merge_size""".split()


def wrapper_defaults() -> tuple[dict, dict, dict]:
    """Per wrapper (hf.WRAPPERS): its text config class's defaults (under the text model
    type), its vision config class's, and its own; and, under "absent:" + the model type, the
    text and vision configs the wrapper builds when the file has none (the wrapper's own
    defaults, which may differ from the classes')."""
    import transformers

    from transformer_calc.hf import WRAPPERS

    text, tower, top = {}, {}, {}
    for model_type, w in sorted(WRAPPERS.items()):
        config = transformers.AutoConfig.for_model(model_type)
        if not w.tower_key:  # Whisper: one flat config, the encoder's keys beside the decoder's
            tower[model_type] = class_defaults(type(config), WHISPER_KEYS + (
                TOWER_KEYS if w.flat_text_keys else []))
            top[model_type] = class_defaults(type(config), WRAPPER_KEYS)
            if w.flat_text_keys:  # Fuyu: the text config it builds from its own defaults
                built = config.text_config.to_dict()
                text["absent:" + model_type] = {k: built[k] for k in KEYS if k in built}
            continue
        if w.text_type not in TABLE_DRIVEN:
            text[w.text_type] = class_defaults(type(config.text_config), KEYS)
        sub = getattr(config, w.tower_key)
        top[model_type] = class_defaults(type(config), WRAPPER_KEYS)
        if w.audio_key:  # audio frames projected beside the tower (Gemma 4 Unified's)
            tower["audio:" + model_type] = class_defaults(
                type(config).sub_configs[w.audio_key], TOWER_KEYS)
        if sub is None:  # an optional tower the class builds only from a file's sub-config
            tower[model_type] = class_defaults(type(config).sub_configs[w.tower_key],
                                               TOWER_KEYS + WHISPER_KEYS)
            built = config.text_config.to_dict()
            text["absent:" + model_type] = {k: built[k] for k in KEYS if k in built}
            continue
        tower[model_type] = class_defaults(type(sub), TOWER_KEYS + WHISPER_KEYS)
        built = sub.to_dict()
        tower["absent:" + model_type] = {k: built[k] for k in TOWER_KEYS + WHISPER_KEYS
                                         if k in built}
        built = config.text_config.to_dict()
        text["absent:" + model_type] = {k: built[k] for k in KEYS if k in built}
        # a config that lays its own text defaults under a file's text_config (Voxtral's)
        if "init_kwargs, **self.text_config" in inspect.getsource(type(config)):
            kwargs = type(config).sub_configs_defaults["text_config"].init_kwargs
            text["merged:" + model_type] = {k: kwargs[k] for k in KEYS if k in kwargs}
    return text, tower, top


def main() -> None:
    import peft
    import transformers

    out: dict[str, dict] = {}
    for model_type in sorted(TABLE_DRIVEN):
        cls = type(transformers.AutoConfig.for_model(model_type))
        if getattr(TABLE_DRIVEN[model_type], "text_config", False):
            cls = cls.sub_configs["text_config"]  # Mllama: the language model's class
        out[model_type] = class_defaults(cls, KEYS)
    text, tower, top = wrapper_defaults()
    out |= text
    print('"""Config-class defaults per model_type for the records in hf.py.\n\n'
          f"Generated by tools/hf_defaults.py from transformers {transformers.__version__} and "
          f"peft {peft.__version__}; "
          'do not edit.\n"""\n\nfrom typing import Any\n\nDEFAULTS: dict[str, dict[str, Any]] = '
          + pprint.pformat(out, width=96, sort_dicts=True)
          + "".join(frozen(name, comment, types) for name, comment, types in (
              ("SOFTMAX_FP32", "# Eager attention computes the softmax in fp32 (transformers' "
               f"modelling code has\n# `{SOFTMAX_FP32[0]}`, or .float())", softmax_fp32_types()),
              ("SINK_COLUMN", "# Eager attention appends the sink logits as a softmax column\n"
               f"# (`{SINK_COLUMN}`)", types_whose_code_has(SINK_COLUMN)),
              ("ATTN_FP32", "# Eager attention on fp32 copies of Q and K\n"
               f"# (`{ATTN_FP32[0]}`, or .float())", types_whose_code_has(*ATTN_FP32)),
              ("ROPE_CONCAT", "# RoPE concatenating the rotated part with the rest\n"
               f"# (`{ROPE_CONCAT[0]}...`)", types_whose_code_has(*ROPE_CONCAT)),
              ("ROPE_FP32", "# RoPE computed in fp32 over fp32 cos and sin, cast back\n"
               f"# (`{ROPE_FP32}`)", types_whose_code_has(ROPE_FP32)),
              ("NORM_MANUAL", "# LayerNorms written out in fp32, x − mean computed twice\n"
               f"# (`{NORM_MANUAL}`)", types_whose_code_has(NORM_MANUAL)),
              ("EXPERTS_GROUPED", "# MoE experts that run grouped_mm by default (their module "
               f"has\n# `{EXPERTS_GROUPED}`)", types_whose_code_has(EXPERTS_GROUPED)),
              ("EXPERTS_EVERY", "# MoE experts run on every token, scaled by the router\n"
               f"# (`{EXPERTS_EVERY}`)", types_whose_code_has(EXPERTS_EVERY)),
              ("SINK_LSE", "# Eager attention scales its output by sigmoid(logsumexp(scores) "
               f"- sink)\n# (`{SINK_LSE}`)", types_whose_code_has(SINK_LSE)),
              ("ROW_MAX", "# Eager attention subtracts each row's max before the softmax\n"
               f"# (`{ROW_MAX}`)", types_whose_code_has(ROW_MAX)),
              ("SCORES_CLAMPED", "# Eager attention clamps the masked scores from below "
               f"(torch.max keeps its input)\n# (`{SCORES_CLAMPED}`)",
               types_whose_code_has(SCORES_CLAMPED)),
              ("NORM_FP32", "# RMSNorms that keep their normalised tensor in fp32 (the weight "
               "multiplies before the cast back)", norm_fp32_types()),
              ("NORM_KEEPS_INPUT", "# RMSNorms that multiply their (16-bit) input itself by the "
               f"fp32 rsqrt\n# (`{NORM_KEEPS_INPUT}`)", norm_keeps_input_types()),
              ("NORM_MEAN_SQUARE", "# RMSNorms that keep the mean square beside 1/rms (and, "
               f"16-bit, an fp32 copy of the weight)\n# (`{NORM_MEAN_SQUARE}`)",
               types_whose_code_has(NORM_MEAN_SQUARE)),
              ("ROUTER_FP32", "# MoE routers that matmul fp32 copies of their input and weight"
               f"\n# (`{ROUTER_FP32[0]}`, or .float())", router_fp32_types()),
              ("LOSS_NO_UPCAST", "# Losses taken in the activation dtype (no fp32 upcast of the "
               "logits)", loss_no_upcast_types()),
              ("NO_SDPA", "# Classes without an SDPA path (`_supports_sdpa` false): transformers "
               "runs them eager", no_sdpa_types()),
              ("NO_FLASH", "# Classes without a flash_attention_2 path (`_supports_flash_attn` "
               "false)", no_flash_types())))
          + "\n\n# Classes whose flash attention is another kernel: transformers runs it for\n"
          + "# attn_implementation=\"flash_attention_2\" (_compatible_flash_implementations)\n"
          + "FLASH_KERNELS: dict[str, str] = "
          + pprint.pformat(flash_kernels(), width=92, compact=True)
          + "\n\n# LoRA on a mixture of experts: the model types peft converts (router and fused\n"
          + "# experts adapted), by pattern (peft.utils.transformers_weight_conversion)\n"
          + "PEFT_MOE: dict[str, str] = "
          + pprint.pformat(peft_moe_patterns(), width=92, compact=True)
          + "\n\n# transformers' names of the linear layers --lora-targets takes, per model type\n"
          + "LINEAR_NAMES: dict[str, tuple[str, ...]] = {\n"
          + "".join(f"    {t!r}: {n!r},\n" for t, n in linear_names().items()) + "}"
          + "\n\n# The class each task's auto mapping builds, per model type (AutoModel: base)\n"
          + "TASK_CLASSES: dict[str, dict[str, str]] = "
          + pprint.pformat(task_classes(model_types()), width=96,
                           sort_dicts=True)
          + "\n\n# Each wrapper's vision config class's defaults (hf.WRAPPERS), and its own\n"
          + "TOWER_DEFAULTS: dict[str, dict[str, Any]] = "
          + pprint.pformat(tower, width=96, sort_dicts=True)
          + "\nWRAPPER_DEFAULTS: dict[str, dict[str, Any]] = "
          + pprint.pformat(top, width=96, sort_dicts=True)
          + "\n\n# The shape keys each config class has (of those hf.FILE_KEYS spells)\n"
          + "CONFIG_KEYS: dict[str, tuple[str, ...]] = "
          + pprint.pformat(config_keys(model_types()), width=96, compact=True))


if __name__ == "__main__":
    main()
