"""Run a family's graph for one configuration, every layer traced (the reference the
compiled path, compile.py, is checked against), and read its costs: the storages autograd
holds when the forward is over (each once; under the run's recomputation policy, held.py),
the parameters it touched (a tied table once), and the forward's matmul FLOPs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from transformer_calc.errors import TcalcError
from transformer_calc.graph import routed, variants
from transformer_calc.graph.families import (
    albert,
    bamba,
    bart,
    beam,
    bert,
    bloom,
    cohere,
    dbrx,
    deberta,
    deepseek_v4,
    distilbert,
    falcon,
    falcon_h1,
    flint,
    fsmt,
    gemma,
    gemma3n,
    gemma4,
    gpt2,
    gpt_oss,
    gptj,
    gptlike,
    granitemoe_swa,
    granitemoehybrid,
    jamba,
    kimi_linear,
    lfm2,
    llama,
    llama4,
    mamba,
    mimo_v2_flash,
    minimax,
    minimax_m3,
    mla,
    mllama,
    modernbert,
    moe,
    mpnet,
    nemotron_h,
    neox,
    olmo_hybrid,
    opt,
    paper,
    prenorm_bert,
    qwen3_next,
    roformer,
    rope_encoder,
    routed_moe,
    switch,
    t5,
    t5gemma,
    whisper,
    xlm,
)
from transformer_calc.graph.held import held
from transformer_calc.graph.modules import Builder, Run
from transformer_calc.graph.symbols import Dim, Poly
from transformer_calc.graph.trace import OpRecord, Saved
from transformer_calc.spec import ModelSpec

Family = (gpt2.GPT2 | paper.Paper | llama.Llama | bert.Bert | moe.Moe | gemma.Gemma | cohere.Cohere
          | mla.Mla | t5.T5 | bart.Bart | fsmt.Fsmt | neox.NeoX | gptj.GPTJ | falcon.Falcon
          | mamba.Mamba | mamba.Mamba2 | bamba.Bamba | granitemoehybrid.GraniteMoeHybrid
          | falcon_h1.FalconH1 | jamba.Jamba
          | nemotron_h.NemotronH | mimo_v2_flash.MiMoV2Flash | minimax_m3.MiniMaxM3
          | rope_encoder.RopeEncoder | deberta.Deberta | albert.Albert
          | modernbert.ModernBert | mpnet.MPNet | xlm.XLM
          | gemma4.Gemma4 | lfm2.Lfm2 | lfm2.Lfm2Moe | minimax.Minimax
          | opt.OPT | olmo_hybrid.OlmoHybrid | kimi_linear.KimiLinear | whisper.Whisper
          | t5gemma.T5Gemma | qwen3_next.Qwen3Next | gptlike.GPTBigCode | gptlike.OpenAIGPT
          | gptlike.Ctrl | gptlike.GPTNeo | gptlike.Mpt | gptlike.GraniteSwa
          | deepseek_v4.DeepseekV4 | switch.Switch | llama4.Llama4 | dbrx.Dbrx | bloom.Bloom)

# each family's forward, by the class of its config (a subclass runs its base's forward)
_FORWARDS: dict[type, Callable[..., object]] = {
    gpt2.GPT2: gpt2.forward, paper.Paper: paper.forward, llama.Llama: llama.forward,
    bert.Bert: bert.forward,
    moe.Moe: moe.forward, gemma.Gemma: gemma.forward, cohere.Cohere: cohere.forward,
    routed_moe.RoutedMoe: routed_moe.forward,
    cohere.CohereMoe: cohere.moe_forward, beam.Beam: beam.forward,
    gpt_oss.GptOss: gpt_oss.forward, flint.Flint: flint.forward,
    granitemoe_swa.GraniteMoeSwa: granitemoe_swa.forward,
    granitemoe_swa.GraniteMoe: granitemoe_swa.forward,
    mla.Mla: mla.forward, t5.T5: t5.forward, bart.Bart: bart.forward, fsmt.Fsmt: fsmt.forward,
    switch.Switch: switch.forward,
    neox.NeoX: neox.forward, gptj.GPTJ: gptj.forward, falcon.Falcon: falcon.forward,
    mamba.Mamba: mamba.forward, mamba.Mamba2: mamba.forward,
    bamba.Bamba: bamba.forward, falcon_h1.FalconH1: falcon_h1.forward, jamba.Jamba: jamba.forward,
    granitemoehybrid.GraniteMoeHybrid: granitemoehybrid.forward,
    nemotron_h.NemotronH: nemotron_h.forward,
    mimo_v2_flash.MiMoV2Flash: mimo_v2_flash.forward,
    minimax_m3.MiniMaxM3: minimax_m3.forward,
    rope_encoder.RopeEncoder: rope_encoder.forward, deberta.Deberta: deberta.forward,
    albert.Albert: albert.forward, modernbert.ModernBert: modernbert.forward,
    mpnet.MPNet: mpnet.forward, xlm.XLM: xlm.forward,
    distilbert.DistilBert: distilbert.forward,
    prenorm_bert.PreNormBert: prenorm_bert.forward, roformer.RoFormer: roformer.forward,
    gemma4.Gemma4: gemma4.forward, gemma3n.Gemma3n: gemma3n.forward,
    opt.OPT: opt.forward, opt.BioGpt: opt.biogpt_forward,
    opt.TrOcr: opt.trocr_forward, olmo_hybrid.OlmoHybrid: olmo_hybrid.forward,
    kimi_linear.KimiLinear: kimi_linear.forward, whisper.Whisper: whisper.forward,
    t5gemma.T5Gemma: t5gemma.forward, qwen3_next.Qwen3Next: qwen3_next.forward,
    mllama.Mllama: mllama.forward,
    gptlike.GPTBigCode: gptlike.bigcode_forward, gptlike.OpenAIGPT: gptlike.openai_forward,
    gptlike.Ctrl: gptlike.ctrl_forward, gptlike.GPTNeo: gptlike.neo_forward,
    gptlike.Mpt: gptlike.mpt_forward, gptlike.GraniteSwa: gptlike.granite_swa_forward,
    modernbert.ModernBertDecoder: modernbert.decoder_forward, lfm2.Lfm2: lfm2.forward,
    lfm2.Lfm2Moe: lfm2.moe_forward, minimax.Minimax: minimax.forward,
    deepseek_v4.DeepseekV4: deepseek_v4.forward, llama4.Llama4: llama4.forward,
    dbrx.Dbrx: dbrx.forward, bloom.Bloom: bloom.forward}


@dataclass(frozen=True)
class Result:
    """saved: every storage held for backward (activations, inputs such as the token ids,
    and under autocast the parameters' 16-bit copies); weight_copy_bytes: autocast's cache
    of those copies, all held until the forward's autocast region ends; ops: the forward,
    op by op; recomputed_layer_bytes: under full recomputation, the largest layer's saved
    set, rebuilt in backward (0 otherwise)."""

    saved: tuple[Saved, ...]
    weight_copy_bytes: int
    params: int
    trainable_params: int
    forward_flops: int
    flops_formula: Poly
    ops: tuple[OpRecord, ...]
    recomputed_layer_bytes: int = 0

    @property
    def activation_bytes(self) -> int:
        """What saved_tensors_hooks counts with parameters excluded: all but weight copies."""
        return sum(s.nbytes for s in self.saved if s.storage.kind != "weight_copy")

    @property
    def activation_formula(self) -> Poly:
        total = Poly(())
        for s in self.saved:
            if s.storage.kind != "weight_copy":
                total = total + s.storage.formula
        return total


def trace(family: Family, run: Run, symbolic: bool = False,
          replaced: Callable[[Builder], Family] | None = None) -> Builder:
    """Run the family's forward on a Builder. symbolic (compile.py): sizes are SInts, and
    `replaced` gives the forward a config whose sizes are the Builder's SInts, so any
    decision the forward takes on a size is recorded as a guard."""
    m = Builder(run, family.sizes(), symbolic)
    cfg = replaced(m) if replaced is not None else family
    forward = next(_FORWARDS[k] for k in type(cfg).__mro__ if k in _FORWARDS)
    forward(m, cfg)
    return m


def evaluate(family: Family, run: Run) -> Result:
    tr = trace(family, run).trace
    kept = held(tr, run.recompute)
    params = list(tr.params.values())
    copies = sum(t.storage.nbytes for t in tr.weight_casts.values())
    rebuilt = max((sum(st.nbytes for st in layer) for layer in kept.rebuilt), default=0)
    return Result(tuple(s for s, _ in kept.saved), copies,
                  sum(p.storage.numel.value for p in params),
                  sum(p.storage.numel.value for p in params if p.requires_grad),
                  tr.flops, tr.flops_poly, tuple(tr.ops), rebuilt)


# The ModelSpec fields each family's graph reads (or that change no tensor: the spec's
# metadata, the positions a model may reach, how MoE experts would be stored, the format a
# checkpoint stores its weights in). A spec with
# any other field away from its default describes a forward the graph does not transcribe
# (Phi-3's fused projections, MLA, a recurrent mixer, attention sinks...): refused.
_METADATA = frozenset(("name", "description", "source", "expected_params",
                       "expected_params_source", "note", "module_names", "max_positions",
                       "experts_grouped", "model_type", "weight_format"))
_COMMON = frozenset(("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "tie_embeddings",
                     "position", "ffn", "activation", "norm", "dropout", "attention_dropout"))
_READS = {"gpt2": _METADATA | _COMMON | {"fused_qkv", "embed_dropout"},
          "llama": _METADATA | _COMMON | {"n_kv_heads", "d_head", "softmax_fp32", "bias_q",
                                          "bias_k", "bias_v", "bias_o", "bias_ffn_in",
                                          "bias_ffn_out", "fused_qkv", "fused_gate_up",
                                          "rope_concat", "qk_norm", "norm_position",
                                          "norm_fp32", "rope_fp32"},
          # (the encoders' loss_fp32 False, their biases True, their sdpa_path: read as
          # family_of requires them)
          "bert": _METADATA | _COMMON | {"arch", "norm_position", "final_norm",
                                         "embedding_norm", "token_types", "lm_head",
                                         "mlm_head", "loss_fp32", "embed_proj_dim",
                                         "embed_factorized", "mlm_bias", "n_kv_heads",
                                         "d_head", "classifier", "num_labels", "pooler",
                                         "classifier_bias"},
          "gemma": _METADATA | _COMMON | {"n_kv_heads", "d_head", "softmax_fp32", "bias_q",
                                          "bias_k", "bias_v", "bias_o", "bias_ffn_in",
                                          "bias_ffn_out", "qk_norm", "norm_fp32",
                                          "sandwich_norm", "logit_softcapping",
                                          "attn_softcapping", "sliding_window",
                                          "layer_attention", "sdpa_path"}}
# the NeoX-style decoders (families/neox.py; their softmax_fp32 and rope_concat True, their
# sdpa_path: read as _neox requires them)
_READS["neox"] = _METADATA | _COMMON | {"embed_dropout",
    "n_kv_heads", "d_head", "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in",
    "bias_ffn_out", "fused_qkv", "rotary_fraction", "parallel_block", "parallel_norms",
    "lm_head_bias", "qk_norm", "softmax_fp32", "rope_concat", "sdpa_path", "last_layer_o_bias"}
# GPT-J and CodeGen (families/gptj.py; their attn_fp32, rope_concat True and sdpa_path False:
# read as _gptj requires them)
_READS["gptj"] = _METADATA | _COMMON | {"embed_dropout",
    "n_kv_heads", "d_head", "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in",
    "bias_ffn_out", "fused_qkv", "rotary_fraction", "parallel_block", "lm_head_bias",
    "attn_fp32", "rope_concat", "sdpa_path", "softmax_fp32"}
# Falcon (families/falcon.py; its explicit_mask True and kv_broadcast as the layout has it:
# read as _falcon requires them)
_READS["falcon"] = _METADATA | _COMMON | {
    "n_kv_heads", "d_head", "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in",
    "bias_ffn_out", "fused_qkv", "parallel_block", "parallel_norms", "explicit_mask",
    "kv_broadcast"}

# Gemma 4's text decoders (gemma4.py): Gemma's fields, its norms' form and its layouts
_READS["gemma4"] = _READS["gemma"] | {"norm_mean_square", "global_head_dim", "global_kv_heads",
                                     "global_k_eq_v", "kv_shared_layers", "kv_shared_wide_ffn",
                                     "value_norm", "per_layer_input", "per_layer_vocab",
                                     "n_experts", "top_k", "d_ff_expert", "layer_ffn",
                                     "moe_beside_dense", "peft_moe"}
# Gemma 3n's (gemma3n.py): Gemma 4's dense fields and AltUp, LAuReL, the sparse FFN gates
_READS["gemma3n"] = _READS["gemma4"] - {"global_head_dim", "global_kv_heads", "global_k_eq_v",
                                         "kv_shared_wide_ffn", "n_experts", "top_k",
                                         "d_ff_expert", "layer_ffn", "moe_beside_dense",
                                         "peft_moe"} | {"altup_inputs", "laurel_rank",
                                                        "sparse_ffn_layers"}
# The encoders whose forward bert.py transcribes: model_type -> (the encoder's attribute,
# the MLM head's layout, position ids counted from the token ids). Other BERT-shaped types
# (BigBird's sparse attention, ...) keep the rules; TAPAS, I-BERT and YOSO map through
# their own mappers (_tapas, _ibert, _yoso).
_ENCODERS = {"bert": ("bert", "bert", False), "ernie": ("ernie", "bert", False),
             "roberta": ("roberta", "roberta", True),
             "camembert": ("roberta", "roberta", True),
             "xlm-roberta": ("roberta", "roberta", True),
             "data2vec-text": ("data2vec_text", "roberta", True),
             "electra": ("electra", "electra", False)}
# the rotary encoders (rope_encoder.py): model_type -> (the encoder's attribute, the MLM
# head's layout, the MLP gated, GteMLP's dropout)
_ROPE_ENCODERS = {"gte": ("gte", "gte", True, True),
                  "nomic_bert": ("nomic_bert", "nomic", True, False),
                  "jina_embeddings_v3": ("roberta", "roberta", False, False)}
_READS["bert_generation"] = _READS["bert"] | {"lm_head_bias"}
_READS["layoutlm"] = _READS["bert"] | {"softmax_fp32", "pooler", "layout_positions"}
_READS["roc_bert"] = _READS["bert"] | {"side_embeddings", "side_concat"}
_READS["albert"] = _READS["bert"] | {"layer_groups"}
_READS["modernbert"] = _METADATA | _COMMON | {
    "arch", "norm_position", "final_norm", "embedding_norm", "lm_head", "mlm_head",
    "loss_fp32", "n_kv_heads", "d_head", "first_attn_norm", "fused_qkv", "fused_gate_up",
    "softmax_fp32", "mlm_dense_bias", "mlm_bias", "sliding_window", "layer_attention",
    "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out"}
_READS["rembert"] = _READS["bert"] | {"mlm_width", "sdpa_path"}
_READS["mpnet"] = _READS["bert"] | {"relative_bias", "relative_buckets", "sdpa_path"}
_READS["xlm"] = _READS["bert"] | {"softmax_fp32", "sdpa_path", "lm_head_bias"}
_READS["tapas"] = _READS["bert"] | {"type_tables", "cell_positions", "sdpa_path"}
_READS["ibert"] = _READS["bert"] | {"norm_int", "layers_nn_linear", "sdpa_path"}
_READS["yoso"] = _READS["bert"] | {"yoso_expectation", "position_offset", "sdpa_path"}
# DistilBERT (distilbert.py) and the pre-norm encoders (prenorm_bert.py), by model type
_READS["distilbert"] = _READS["bert"]
_READS.update(dict.fromkeys(("roberta-prelayernorm", "xlm-roberta-xl", "megatron-bert"),
                            _READS["bert"] | {"sdpa_path"}))
_READS["roformer"] = _READS["bert"] | {"sdpa_path"}
_READS["big_bird"] = _READS["bert"] | {"sdpa_path", "block_sparse_from"}
_READS["rope_encoder"] = _METADATA | _COMMON | {
    "arch", "norm_position", "final_norm", "embedding_norm", "token_types", "lm_head",
    "mlm_head", "loss_fp32", "n_kv_heads", "d_head", "ffn_dropout", "bias_q", "bias_k",
    "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out"}
_READS["deberta"] = _METADATA | _COMMON | {
    "arch", "norm_position", "final_norm", "embedding_norm", "token_types", "lm_head",
    "mlm_head", "loss_fp32", "n_kv_heads", "d_head", "sdpa_path", "norm_manual",
    "norm_manual_cast", "rel_embeddings", "rel_projections", "rel_terms", "rel_key_bias",
    "rel_span", "fused_qkv", "bias_k", "rel_embeddings_norm", "rel_shared_key"}
# The model types whose forward gemma.py transcribes
_GEMMAS = ("gemma", "gemma2", "gemma3_text", "vaultgemma")
# the MoE decoders: Llama's fields and the experts' (peft_moe says how peft adapts them:
# graph_activations reads it with the LoRA targets)
_READS["moe"] = _READS["llama"] | {"n_experts", "top_k", "d_ff_expert", "n_shared_experts",
                                   "d_ff_shared", "shared_expert_gate", "layer_ffn",
                                   "router_topk", "peft_moe", "peft_router_linear"}
# OPT (its biases all or none, as enable_bias sets them), BioGPT
_READS["trocr"] = _METADATA | _COMMON | {"arch", "position_offset", "norm_position",
                                         "final_norm", "embedding_norm", "loss_fp32",
                                         "softmax_fp32", "sdpa_path", "idle_cross_attention",
                                         "n_kv_heads", "d_head", "bias_q", "bias_k", "bias_v",
                                         "bias_o", "bias_ffn_in", "bias_ffn_out"}
_READS["biogpt"] = _METADATA | _COMMON | {"arch", "position_offset", "norm_position",
                                          "final_norm", "embed_proj_dim", "softmax_fp32",
                                          "n_kv_heads", "d_head", "bias_q", "bias_k", "bias_v",
                                          "bias_o", "bias_ffn_in", "bias_ffn_out"}
_READS["opt"] = _METADATA | _COMMON | {"arch", "position_offset", "norm_position", "final_norm",
                                       "embed_proj_dim", "softmax_fp32", "bias_q", "bias_k",
                                       "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out"}

# T5, mT5, UMT5 (families/t5.py): the encoder-decoder's own fields (t5_dropouts: the FFN's
# and the final norm's dropouts; norm_keeps_input: T5LayerNorm's product with its input)
_READS["t5"] = _METADATA | _COMMON | {
    "arch", "n_encoder_layers", "n_decoder_layers", "d_head", "n_kv_heads",
    "relative_buckets", "relative_scope", "t5_dropouts", "norm_keeps_input", "loss_fp32",
    "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out", "final_norm",
    "norm_position", "tie_encoder_decoder", "encoder_local_block", "encoder_global_block",
    "sdpa_path"}
# the T5 model types: model_type -> (relative_scope, the decoder's output rescaled before
# the tied lm_head: T5's scale_decoder_outputs, UMT5's tie_word_embeddings, never mT5's)
_T5S = {"t5": ("first", True), "mt5": ("first", False), "umt5": ("every", True),
        "longt5": ("first", True)}

# Switch Transformers (families/switch.py): T5's fields, the experts' and where they sit
_READS["switch"] = _READS["t5"] | {"n_experts", "top_k", "router_bias", "router_jitter",
                                   "router_fp32", "layer_ffn", "peft_moe"}

# BART and Marian (families/bart.py): BartForConditionalGeneration, BartForCausalLM (the
# decoder alone with its idle cross-attention), MarianMTModel
_READS["bart"] = _METADATA | _COMMON | {
    "arch", "n_encoder_layers", "n_decoder_layers", "d_head", "n_kv_heads", "position_offset",
    "norm_position", "final_norm", "embedding_norm", "loss_fp32", "bias_q", "bias_k",
    "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out", "tie_encoder_decoder",
    "idle_cross_attention", "activation_dropout"}

# T5Gemma (families/t5gemma.py): Gemma 2's fields, two stacks, a vocabulary each
_READS["t5gemma"] = _READS["gemma"] | {"arch", "n_encoder_layers", "n_decoder_layers",
                                       "encoder_vocab_size", "tie_encoder_decoder",
                                       "ffn_dropout", "max_positions"}

# Whisper's decoder (families/whisper.py): WhisperForCausalLM, its cross-attention idle
_READS["whisper"] = _METADATA | _COMMON | {
    "norm_position", "final_norm", "embedding_norm", "loss_fp32", "bias_q", "bias_k",
    "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out", "idle_cross_attention",
    "activation_dropout", "n_kv_heads", "d_head"}

# BART's kin (families/bart.py): mBART, PLBART, Blenderbot, BlenderbotSmall, Pegasus,
# M2M-100, MVP as their *ForConditionalGeneration (sdpa_path: MVP's eager-only attention)
_READS["bart_kin"] = _READS["bart"] - {"idle_cross_attention"} | {"sdpa_path",
                                                                   "block_sparse_from"}
# model_type -> how it differs from BART (families/bart.py's Bart fields); the spec must say
# the same of its norms, embedding norm and positions (_bart_kin_family); the types without
# an SDPA path (MVP, BigBird-Pegasus) run eager only
_BART_KIN: dict[str, dict[str, Any]] = {
    "plbart": {},
    "mvp": {"bmm_attention": True, "decoder_batch_positions": True},
    # (use_bias: the attention's biases, read from the spec)
    "bigbird_pegasus": {"pre_norm": True, "embedding_norm": False, "position_offset": 0,
                        "bigbird": True},
    "mbart": {"pre_norm": True, "fp16_clamp": True},
    "blenderbot": {"pre_norm": True, "fp16_clamp": True, "embedding_norm": False,
                   "position_offset": 0},
    "blenderbot-small": {"position_offset": 0, "norm_before_positions": True},
    "pegasus": {"pre_norm": True, "fp16_clamp": True, "embedding_norm": False,
                "sinusoidal": True, "position_offset": 0},
    # (its sinusoidal buffer's 2 extra rows: position_offset, the spec's 0)
    "m2m_100": {"pre_norm": True, "fp16_clamp": True, "embedding_norm": False,
                "sinusoidal": True, "logits_bias": False},
}

# FSMT (families/fsmt.py): FSMTForConditionalGeneration, eager only
_READS["fsmt"] = _READS["bart"] - {"idle_cross_attention"} | {
    "encoder_vocab_size", "peft_head", "sdpa_path"}


# the MLA decoders (DeepSeek-V3, MiniCPM3): Llama's fields, the latents' and head widths,
# DeepSeek-V3's experts and sigmoid router (mtp_layers: modules transformers does not build)
_READS["mla"] = _READS["llama"] | {"kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
                                   "qk_rope_head_dim", "v_head_dim", "mtp_layers",
                                   "n_experts", "top_k", "d_ff_expert", "n_shared_experts",
                                   "d_ff_shared", "layer_ffn", "router_topk", "router_fp32",
                                   "peft_moe", "index_heads", "index_head_dim", "index_topk",
                                   "moe_beside_dense", "moe_shortcut", "peft_router_linear",
                                   "moe_post_norm"}
# the model types whose forward mla.py transcribes ("": a preset, read as DeepSeek-V3, or
# with an indexer as V3.2; Youtu: DeepSeek-V3's attention and dense layers), and those with
# DSA's indexer (GLM-MoE-DSA: V3.2's layers, its indexer's RoPE interleaved, which keeps
# nothing either way; spec_from_hf refuses its layers that reuse another's top-k)
# (GLM-4.7-Flash, glm4_moe_lite: DeepSeek-V3's modelling file under another name)
_MLAS = ("", "deepseek_v3", "minicpm3", "deepseek_v32", "glm_moe_dsa", "longcat_flash", "axk1",
         "glm4_moe_lite", "youtu")
_DSAS = ("", "deepseek_v32", "glm_moe_dsa")

# Mamba and Mamba-2 (MambaForCausalLM, Mamba2ForCausalLM): the mixer's sizes and flags; the
# attention's bias flags say only that there is none; the cache's state dtype changes no
# training tensor
_READS["mamba"] = _METADATA | {"vocab_size", "d_model", "n_layers", "tie_embeddings",
                               "position", "ffn", "activation", "norm", "sdpa_path", "mixer",
                               "ssm_inner", "ssm_state", "ssm_conv", "ssm_dt_rank",
                               "ssm_heads", "ssm_groups", "ssm_chunk", "ssm_conv_bias",
                               "ssm_bias", "ssm_norm", "ssm_state_dtype", "peft_mamba",
                               "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in",
                               "bias_ffn_out"}

# Bamba: Llama's attention fields and the Mamba-2 mixer's, the layers' kinds
_READS["bamba"] = _READS["mamba"] | _COMMON | {
    "n_kv_heads", "d_head", "softmax_fp32", "rope_concat", "layer_attention"}

# Jamba: Bamba's fields (attention and a mixer), Mamba's dt/B/C norms, the experts
_READS["jamba"] = _READS["bamba"] | {"layer_ffn", "ssm_dt_norms", "n_experts", "top_k",
                                     "d_ff_expert"}

# OLMo Hybrid: OLMo 3's attention fields and the Gated DeltaNet's sizes, the layers' kinds
_READS["olmo_hybrid"] = _READS["llama"] | {
    "layer_attention", "mixer", "ssm_inner", "ssm_state", "ssm_heads", "ssm_groups",
    "ssm_conv", "ssm_chunk", "ssm_conv_bias", "ssm_in_projs", "peft_names_shared"}

# Kimi Linear: the latent attention's and the experts' fields, the delta attention's sizes,
# the layers' kinds
_READS["kimi_linear"] = _READS["mla"] | {
    "layer_attention", "layer_ffn", "mixer", "ssm_inner", "ssm_state", "ssm_heads",
    "ssm_groups", "ssm_conv", "ssm_chunk", "ssm_conv_bias", "ssm_bias", "ssm_norm",
    "ssm_in_projs", "peft_names_shared", "router_fp32", "router_topk", "n_experts", "top_k",
    "n_shared_experts", "d_ff_expert", "d_ff_shared"}
# Qwen3-Next, Qwen3.5, Qwen3.5-MoE: the gated attention's and the Gated DeltaNet's fields,
# the experts'
_READS["qwen3_next"] = _READS["moe"] | {
    "attn_gate_in_q", "attn_gate", "ssm_in_projs", "layer_attention", "mixer", "ssm_inner",
    "ssm_state", "ssm_heads", "ssm_groups", "ssm_conv", "ssm_chunk", "ssm_conv_bias",
    "rotary_fraction"}
# Nemotron-H: Bamba's fields (attention and a Mamba-2 mixer), the MLP and experts layers,
# DeepSeek-V3's router, NemotronHRMSNorm's fp32 product
_READS["nemotron_h"] = _READS["bamba"] | {"layer_ffn", "n_experts", "top_k", "d_ff_expert",
                                          "n_shared_experts", "d_ff_shared", "router_topk",
                                          "router_fp32", "norm_fp32"}

# MiMo-V2-Flash: Llama's fields, the sliding layers' sinks and doubled K/V heads, V's own
# width, the partial RoPE, DeepSeek-V3's router over experts without shared ones
_READS["mimo_v2_flash"] = _READS["llama"] | {
    "global_kv_heads", "v_head_dim", "attention_sinks", "sinks_sliding_only",
    "softmax_sink_column", "softmax_row_max", "sliding_window", "layer_attention",
    "rotary_fraction", "n_experts", "top_k", "d_ff_expert", "layer_ffn", "router_topk",
    "router_fp32", "sdpa_path"}

# MiniMax-M3's text decoder: Llama's fields, the experts' with a shared MLP, the dense
# layers' width
_READS["minimax_m3"] = _READS["llama"] | {
    "rotary_fraction", "n_experts", "top_k", "d_ff_expert", "n_shared_experts",
    "d_ff_shared", "layer_ffn", "sdpa_path"}

# GPT-2's relatives (families/gptlike.py): their norms' place, the fused c_attn, the biases
# each has (read as _gpt_bigcode and _openai_gpt require them)
_READS["paper"] = _METADATA | _COMMON | {
    "arch", "n_encoder_layers", "n_decoder_layers", "norm_position", "fused_qkv",
    "activation_dropout"}
_READS["gptlike"] = _METADATA | _COMMON | {"embed_dropout",
    "fused_qkv", "n_kv_heads", "d_head", "softmax_fp32", "sdpa_path", "norm_position",
    "final_norm", "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out",
    "lm_head_bias", "attn_fp32"}

# BLOOM (families/bloom.py): ALiBi, its LayerNorms (one over the embeddings), the fused
# query_key_value, biases everywhere, the fp32 softmax, no SDPA path (read as _bloom
# requires them)
_READS["bloom"] = _METADATA | _COMMON | {
    "n_kv_heads", "softmax_fp32", "sdpa_path", "embedding_norm", "fused_qkv", "bias_q",
    "bias_k", "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out"}


@functools.cache
def _defaults(family: str) -> tuple[Callable[[ModelSpec], tuple[object, ...]],
                                    tuple[str, ...], tuple[object, ...]]:
    """The ModelSpec fields the family's graph does not read: a getter of their values (one
    C call: a sweep asks this of thousands of specs), their names and their defaults."""
    import dataclasses
    import operator

    names, defaults = [], []
    for f in dataclasses.fields(ModelSpec):
        if f.name in _READS[family]:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue
        names.append(f.name)
        defaults.append(default)
    getter = operator.attrgetter(*names)
    return getter, tuple(names), tuple(defaults)


def _biased(spec: ModelSpec) -> bool:
    """Whether any projection has a bias (the families whose modelling code has none)."""
    return (spec.bias_q or spec.bias_k or spec.bias_v or spec.bias_o or spec.bias_ffn_in
            or spec.bias_ffn_out)


def _attention_dropout(spec: ModelSpec) -> float:
    """The attention probabilities' dropout: its own key's where the file gives one apart,
    else dropout (ModelSpec.attention_dropout)."""
    return spec.dropout if spec.attention_dropout is None else spec.attention_dropout


def _embed_dropout(spec: ModelSpec) -> float:
    """The embeddings' dropout: its own key's where the file gives one apart, else dropout."""
    return spec.dropout if spec.embed_dropout is None else spec.embed_dropout


def _unread(spec: ModelSpec, family: str) -> list[str]:
    """The spec's fields away from their defaults that the family's graph does not read."""
    getter, names, defaults = _defaults(family)
    values = getter(spec)
    if values == defaults:
        return []
    return [n for n, v, d in zip(names, values, defaults, strict=True) if v != d]


def family_of(spec: ModelSpec) -> Family:
    """The graph a ModelSpec's layout runs as: the first family whose mapper takes the spec
    (_MAPPERS, below), or a TcalcError saying it has no graph yet. A mapper returns None
    when the layout is not its family's, or raises TcalcError to refuse with its reason."""
    for mapper in _MAPPERS:
        family = mapper(spec)
        if family is not None:
            return family
    raise TcalcError(f"{spec.name}: no op graph for this layout yet (docs/op-graph.md lists "
                     "the families and model types the graph engine covers)")


def _paper(spec: ModelSpec) -> paper.Paper | None:
    """The paper's Transformer as torch.nn.Transformer builds it (families/paper.py; the
    transformer-base and transformer-big presets): no transformers model type, post-norm
    layers with the stacks' final norms, the fused in_proj with biases, ReLU, one token
    table for both stacks and the output, sinusoidal positions, one dropout throughout."""
    if not (spec.arch == "encoder-decoder" and not spec.model_type
            and spec.position == "sinusoidal" and spec.activation == "relu"
            and spec.norm == "layernorm" and spec.norm_position == "post" and spec.final_norm
            and spec.ffn == "plain" and spec.fused_qkv and spec.tie_embeddings
            and spec.tie_encoder_decoder and all(
                (spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                 spec.bias_ffn_out))
            and spec.n_heads and spec.d_model % spec.n_heads == 0
            and spec.n_kv_heads in (None, spec.n_heads)
            and spec.d_head in (None, spec.d_model // spec.n_heads)
            and spec.attention_dropout in (None, spec.dropout)
            and spec.activation_dropout in (0.0, spec.dropout)
            and not _unread(spec, "paper")):
        return None
    return paper.Paper(V=spec.vocab_size, E=spec.d_model, H=spec.n_heads, F=spec.d_ff,
                       Le=spec.n_encoder_layers, Ld=spec.n_decoder_layers,
                       dropout=spec.dropout)


def _gpt2(spec: ModelSpec) -> gpt2.GPT2 | None:
    if not (spec.norm == "layernorm" and spec.position == "learned" and spec.ffn == "plain"
            and spec.activation == "gelu_new" and spec.fused_qkv
            and not _unread(spec, "gpt2")):
        return None
    p = spec.dropout
    pa = _attention_dropout(spec)
    return gpt2.GPT2(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model, H=spec.n_heads,
                     F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                     resid_pdrop=p, embd_pdrop=_embed_dropout(spec), attn_pdrop=pa)


def _gptlike(spec: ModelSpec) -> gptlike.GPTBigCode | gptlike.OpenAIGPT | None:
    """GPTBigCode (multi-head) and OpenAI GPT configs as spec_from_hf reads them: learned
    positions, LayerNorms, the fused c_attn and every bias; GPTBigCode pre-norm with a
    final norm and the tanh GELU, OpenAI GPT post-norm without one, gelu_new, F = 4·E, eager
    only. Any other layout of these model types is refused."""
    mt = spec.model_type
    if mt not in ("gpt_bigcode", "openai-gpt"):
        return None
    H, E = spec.n_heads, spec.d_model
    bigcode = mt == "gpt_bigcode"
    multi_query = bigcode and spec.n_kv_heads == 1 and H > 1  # GPTBigCode's multi_query
    if not (spec.norm == "layernorm" and spec.position == "learned" and spec.ffn == "plain"
            and spec.fused_qkv and H and E % H == 0
            and (spec.n_kv_heads in (None, H) or multi_query)
            and spec.d_head in (None, E // H) and spec.d_ff
            and all((spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                     spec.bias_ffn_out))
            and (spec.activation, spec.norm_position, spec.final_norm, spec.sdpa_path,
                 spec.softmax_fp32) == (("gelu_tanh", "pre", True, True, True) if bigcode
                                        else ("gelu_new", "post", False, False, False))
            and (bigcode or spec.d_ff == 4 * E)
            and not _unread(spec, "gptlike")):
        raise TcalcError(f"{spec.name}: no op graph for this {mt} layout yet")
    p = spec.dropout
    pa = _attention_dropout(spec)
    if bigcode:
        return gptlike.GPTBigCode(V=spec.vocab_size, P=spec.max_positions, E=E, H=H,
                                  F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                                  resid_pdrop=p, embd_pdrop=_embed_dropout(spec),
                                  attn_pdrop=pa,
                                  multi_query=multi_query)
    return gptlike.OpenAIGPT(V=spec.vocab_size, P=spec.max_positions, E=E, H=H, F=spec.d_ff,
                             L=spec.n_layers, tied=spec.tie_embeddings, resid_pdrop=p,
                             embd_pdrop=_embed_dropout(spec), attn_pdrop=pa)


def _ctrl(spec: ModelSpec) -> gptlike.Ctrl | None:
    """CTRLLMHeadModel (spec_from_hf's fields for it): sinusoidal positions, pre-norm layers
    with biased projections, the ReLU MLP, the final norm, an LM head with a bias; its
    attention never drops. Any other ctrl layout is refused."""
    if spec.model_type != "ctrl":
        return None
    H, E = spec.n_heads, spec.d_model
    if not (spec.norm == "layernorm" and spec.position == "sinusoidal" and spec.ffn == "plain"
            and spec.activation == "relu" and not spec.fused_qkv and spec.lm_head_bias
            and spec.norm_position == "pre" and spec.final_norm and not spec.softmax_fp32
            and spec.sdpa_path and not spec.attention_dropout
            and all((spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                     spec.bias_ffn_out))
            and H and E % H == 0 and spec.n_kv_heads in (None, H)
            and spec.d_head in (None, E // H) and spec.d_ff
            and not _unread(spec, "gptlike")):
        raise TcalcError(f"{spec.name}: no op graph for this ctrl layout yet")
    p = spec.dropout
    return gptlike.Ctrl(V=spec.vocab_size, P=spec.max_positions, E=E, H=H, F=spec.d_ff,
                        L=spec.n_layers, tied=spec.tie_embeddings, resid_pdrop=p,
                        embd_pdrop=_embed_dropout(spec))


def _gpt_neo(spec: ModelSpec) -> gptlike.GPTNeo | None:
    """GPTNeoForCausalLM (spec_from_hf's fields for it): learned positions, pre-norm layers,
    bias-free q/k/v_proj, a biased out_proj, its fp32 eager attention, gelu_new. Any other
    gpt_neo layout is refused."""
    if spec.model_type != "gpt_neo":
        return None
    H, E = spec.n_heads, spec.d_model
    if not (spec.norm == "layernorm" and spec.position == "learned" and spec.ffn == "plain"
            and spec.activation == "gelu_new" and not spec.fused_qkv and spec.attn_fp32
            and not spec.sdpa_path and not spec.softmax_fp32 and spec.norm_position == "pre"
            and spec.final_norm and not spec.lm_head_bias
            and (spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                 spec.bias_ffn_out) == (False, False, False, True, True, True)
            and H and E % H == 0 and spec.n_kv_heads in (None, H)
            and spec.d_head in (None, E // H) and spec.d_ff
            and not _unread(spec, "gptlike")):
        raise TcalcError(f"{spec.name}: no op graph for this gpt_neo layout yet")
    p = spec.dropout
    pa = _attention_dropout(spec)
    return gptlike.GPTNeo(V=spec.vocab_size, P=spec.max_positions, E=E, H=H, F=spec.d_ff,
                          L=spec.n_layers, tied=spec.tie_embeddings, dropout=p,
                          attention_dropout=pa, embed_dropout=_embed_dropout(spec))


def _mpt(spec: ModelSpec) -> gptlike.Mpt | None:
    """MptForCausalLM (spec_from_hf's fields for it): ALiBi, bias-free LayerNorms and
    linears, the fused Wqkv, the erf GELU MLP 4·E wide (MptMLP ignores expansion_ratio, so
    another d_ff is refused), its eager attention. Any other mpt layout is refused."""
    if spec.model_type != "mpt":
        return None
    H, E = spec.n_heads, spec.d_model
    if not (spec.norm == "layernorm_nobias" and spec.position == "alibi" and spec.ffn == "plain"
            and spec.activation == "gelu" and spec.fused_qkv and not spec.sdpa_path
            and spec.softmax_fp32 and spec.norm_position == "pre" and spec.final_norm
            and not spec.lm_head_bias and spec.d_ff == 4 * E
            and not any((spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                         spec.bias_ffn_out))
            and spec.attention_dropout in (None, spec.dropout)
            and H and E % H == 0 and spec.n_kv_heads in (None, H)
            and spec.d_head in (None, E // H) and not _unread(spec, "gptlike")):
        raise TcalcError(f"{spec.name}: no op graph for this mpt layout yet")
    return gptlike.Mpt(V=spec.vocab_size, P=spec.max_positions, E=E, H=H, L=spec.n_layers,
                       tied=spec.tie_embeddings, dropout=spec.dropout)


def _granite_swa(spec: ModelSpec) -> gptlike.GraniteSwa | None:
    """GraniteSWAForCausalLM (spec_from_hf's fields for it): Llama's layers with its eager
    attention's sinks applied after the softmax (softmax_sink_lse), no SDPA path; its
    dropout is the attention's. Any other granite_swa layout is refused."""
    if spec.model_type != "granite_swa":
        return None
    pa = _attention_dropout(spec)
    base = None
    if spec.attention_sinks and spec.softmax_sink_lse and not spec.sdpa_path \
            and not spec.fused_qkv and spec.qk_norm == "none" and spec.norm_position == "pre" \
            and spec.head_dim % 2 == 0:  # (rotate_half halves each head)
        base = _llama(replace(spec, attention_sinks=False, softmax_sink_lse=False,
                              sdpa_path=True, dropout=0.0, attention_dropout=None))
    if base is None or any((base.bias_q, base.bias_k, base.bias_v, base.bias_o,
                            base.bias_mlp_in, base.bias_mlp_out)):
        raise TcalcError(f"{spec.name}: no op graph for this granite_swa layout yet")
    fields = {f: getattr(base, f) for f in ("V", "E", "H", "Hkv", "dh", "F", "L", "tied")}
    return gptlike.GraniteSwa(**fields, attention_dropout=pa)


def _bloom(spec: ModelSpec) -> bloom.Bloom | None:
    """BloomForCausalLM by its model type: ALiBi, LayerNorms with biases (the embeddings'
    too), the fused query_key_value, a 4·hidden_size GELU MLP (BloomGelu), biases on every
    projection, dropout_add's hidden_dropout and the probabilities' attention_dropout."""
    if spec.model_type != "bloom":
        return None
    H = spec.n_heads
    if not (spec.position == "alibi" and spec.norm == "layernorm" and spec.ffn == "plain"
            and spec.activation == "gelu_tanh" and spec.embedding_norm and spec.fused_qkv
            and spec.softmax_fp32 and not spec.sdpa_path and spec.n_kv_heads in (None, H)
            and spec.bias_q and spec.bias_k and spec.bias_v and spec.bias_o
            and spec.bias_ffn_in and spec.bias_ffn_out and spec.d_model % H == 0
            and spec.d_ff == 4 * spec.d_model and not _unread(spec, "bloom")):
        raise TcalcError(f"{spec.name}: no op graph for this BLOOM layout yet")
    return bloom.Bloom(V=spec.vocab_size, E=spec.d_model, H=H, L=spec.n_layers,
                       tied=spec.tie_embeddings, hidden_dropout=spec.dropout,
                       attention_dropout=_attention_dropout(spec))


def _llama(spec: ModelSpec) -> llama.Llama | None:
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "silu" and spec.softmax_fp32 and not spec.dropout
            and spec.qk_norm in ("none", "head", "width")
            and spec.norm_position in ("pre", "post")
            and not _unread(spec, "llama")):
        return None
    if spec.head_dim % 2:  # rotate_half splits a head in halves (torch fails on odd ones)
        return None
    H = spec.n_heads
    pa = _attention_dropout(spec)
    return llama.Llama(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                       dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers,
                       tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                       bias_v=spec.bias_v, bias_o=spec.bias_o,
                       bias_mlp_in=spec.bias_ffn_in, bias_mlp_out=spec.bias_ffn_out,
                       attention_dropout=pa, fused_qkv=spec.fused_qkv,
                       fused_gate_up=spec.fused_gate_up, rope_concat=spec.rope_concat,
                       qk_norm=spec.qk_norm, post_norm=spec.norm_position == "post",
                       norm_fp32=spec.norm_fp32, rope_fp32=spec.rope_fp32)


def _bert(spec: ModelSpec) -> bert.Bert | None:
    if spec.model_type in _ENCODERS and not _unread(spec, "bert"):
        return _encoder(spec)
    return None


def _bert_generation(spec: ModelSpec) -> bert.Bert | None:
    """BertGenerationDecoder (models/bert_generation): BERT's layers (bidirectional unless
    is_decoder, which spec_from_hf leaves off), word and position embeddings without token
    types, the decoder alone as the head with lm_head.bias, ForCausalLMLoss in fp32."""
    if spec.model_type != "bert-generation" or _unread(spec, "bert_generation"):
        return None
    E, H = spec.d_model, spec.n_heads
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and spec.position == "learned"
            and spec.norm_position == "post" and spec.embedding_norm and not spec.final_norm
            and spec.ffn == "plain" and spec.activation == "gelu" and spec.lm_head
            and spec.lm_head_bias and not spec.mlm_head and spec.loss_fp32
            and spec.token_types == 0 and spec.n_kv_heads in (None, H)
            and spec.d_head in (None, E // H) and H and E % H == 0 and spec.d_ff):
        return None
    p = spec.dropout
    pa = _attention_dropout(spec)
    return bert.Bert(V=spec.vocab_size, P=spec.max_positions, Ty=1, E=E, H=H, F=spec.d_ff,
                     L=spec.n_layers, base="bert", head="generation",
                     tied=spec.tie_embeddings, hidden_dropout=p, attention_dropout=pa,
                     type_table=False, causal_loss=True)


def _albert(spec: ModelSpec) -> albert.Albert | None:
    """AlbertForMaskedLM: BERT's embeddings of embed_proj_dim (factorized), mapped to
    d_model in the encoder, post-norm layers with gelu_new whose weights layer_groups sets
    share (each run by n_layers / layer_groups consecutive layers), the MLM head as wide
    as the embeddings with gelu_new."""
    if spec.model_type != "albert" or _unread(spec, "albert"):
        return None
    E, H, L = spec.d_model, spec.n_heads, spec.n_layers
    G = spec.layer_groups or L
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and spec.position == "learned"
            and spec.norm_position == "post" and spec.embedding_norm and not spec.final_norm
            and spec.ffn == "plain" and spec.activation == "gelu_new" and spec.mlm_head
            and not spec.lm_head and not spec.loss_fp32 and spec.token_types >= 1
            and spec.embed_factorized and spec.embed_proj_dim and spec.mlm_bias == "bert"
            and L % G == 0 and spec.n_kv_heads in (None, H)
            and spec.d_head in (None, E // H) and H and E % H == 0 and spec.d_ff):
        return None
    run = L // G  # layers per set of weights
    sets = "".join(chr(0x41 + i // run if i // run < 26 else 0x100 + i // run)
                   for i in range(L))
    p = spec.dropout
    pa = _attention_dropout(spec)
    return albert.Albert(V=spec.vocab_size, P=spec.max_positions, Ty=spec.token_types, E=E,
                         H=H, F=spec.d_ff, L=L, base="albert", head="albert",
                         tied=spec.tie_embeddings, hidden_dropout=p, attention_dropout=pa,
                         head_act="gelu_new", Ee=spec.embed_proj_dim, sets=sets)


def _modernbert(spec: ModelSpec) -> modernbert.ModernBert | None:
    """ModernBertForMaskedLM (spec_from_hf's fields for it): pre-norm layers with bias-free
    LayerNorms, the first without attn_norm, Wqkv and the GeGLU Wi fused and bias-free,
    RoPE, full and sliding layers as layer_attention says (the window local_attention //
    2 each side: sliding_window = local_attention + 1), eager softmax in fp32, the head's
    bias-free dense and GELU, the decoder's own bias, the loss in fp32; no dropout."""
    if spec.model_type != "modernbert" or _unread(spec, "modernbert"):
        return None
    from transformer_calc.plan import layer_kinds_in_order

    E, H = spec.d_model, spec.n_heads
    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    if not (spec.arch == "encoder" and spec.norm == "layernorm_nobias"
            and spec.position == "rope" and spec.norm_position == "pre" and spec.final_norm
            and spec.embedding_norm and not spec.first_attn_norm and spec.ffn == "gated"
            and spec.activation == "gelu" and spec.fused_qkv and spec.fused_gate_up
            and spec.softmax_fp32 and spec.mlm_head and not spec.lm_head and spec.loss_fp32
            and not spec.mlm_dense_bias and spec.mlm_bias == "decoder" and not spec.dropout
            and not spec.attention_dropout and not any(
                (spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                 spec.bias_ffn_out))
            and set(kinds) <= {"F", "S"} and ("S" not in kinds or spec.sliding_window > 1)
            and spec.n_kv_heads in (None, H) and spec.d_head in (None, E // H) and H
            and E % H == 0 and spec.d_ff):
        return None
    return modernbert.ModernBert(V=spec.vocab_size, E=E, H=H, F=spec.d_ff, L=spec.n_layers,
                                 kinds=kinds, window=(spec.sliding_window - 1) // 2,
                                 tied=spec.tie_embeddings)


def _modernbert_decoder(spec: ModelSpec) -> modernbert.ModernBertDecoder | None:
    """ModernBertDecoderForCausalLM (spec_from_hf's fields for it): ModernBERT's layers with
    q/k/v_proj, causal full and sliding layers (sliding_window = local_attention // 2), the
    head's bias-free dense and GELU, the tied decoder's bias, ForCausalLMLoss; no dropout."""
    if spec.model_type != "modernbert-decoder":
        return None
    from transformer_calc.plan import layer_kinds_in_order

    E, H = spec.d_model, spec.n_heads
    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    if not (spec.arch == "decoder" and spec.norm == "layernorm_nobias"
            and spec.position == "rope" and spec.norm_position == "pre" and spec.final_norm
            and spec.embedding_norm and not spec.first_attn_norm and spec.ffn == "gated"
            and spec.activation == "gelu" and not spec.fused_qkv and spec.fused_gate_up
            and spec.softmax_fp32 and spec.mlm_head and not spec.lm_head
            and not spec.mlm_dense_bias and spec.mlm_bias == "decoder" and not spec.dropout
            and not spec.attention_dropout and not any(
                (spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                 spec.bias_ffn_out))
            and set(kinds) <= {"F", "S"} and ("S" not in kinds or spec.sliding_window > 0)
            and spec.n_kv_heads in (None, H) and spec.d_head in (None, E // H) and H
            and E % H == 0 and (E // H) % 2 == 0 and spec.d_ff
            and not _unread(spec, "modernbert")):  # (rotate_half halves each head)
        raise TcalcError(f"{spec.name}: no op graph for this modernbert-decoder layout yet")
    return modernbert.ModernBertDecoder(V=spec.vocab_size, E=E, H=H, F=spec.d_ff,
                                        L=spec.n_layers, kinds=kinds,
                                        window=spec.sliding_window, tied=spec.tie_embeddings)


def _rembert(spec: ModelSpec) -> bert.Bert | None:
    """RemBertForMaskedLM: BERT's layout (eager only) with embeddings of embed_proj_dim,
    embedding_hidden_mapping_in, a head mlm_width wide with a decoder of its own."""
    if spec.model_type != "rembert" or _unread(spec, "rembert"):
        return None
    if not (spec.embed_factorized and spec.embed_proj_dim and spec.mlm_width
            and spec.mlm_bias == "decoder" and not spec.tie_embeddings and not spec.sdpa_path):
        return None
    plain = spec.replace(model_type="bert", embed_factorized=False, embed_proj_dim=None,
                         mlm_width=None, mlm_bias="bert", sdpa_path=True)
    family = _encoder(plain) if not _unread(plain, "bert") else None
    if family is None or type(family) is not bert.Bert:
        return None
    return bert.RemBert(**{**vars(family), "base": "rembert", "head": "rembert"},
                        Ee=spec.embed_proj_dim, Eo=spec.mlm_width)


def _mpnet(spec: ModelSpec) -> bert.Bert | None:
    """MPNetForMaskedLM: BERT's post-norm layers (eager, its own attention code) with the
    relative position bias of relative_buckets, positions counted from the ids, no token
    types, RoBERTa's MLM head."""
    if spec.model_type != "mpnet" or _unread(spec, "mpnet"):
        return None
    if not (spec.relative_bias and spec.token_types == 0 and not spec.sdpa_path):
        return None
    plain = spec.replace(model_type="roberta", relative_bias=False, token_types=1,
                         sdpa_path=True)
    family = _encoder(plain) if not _unread(plain, "bert") else None
    if family is None or type(family) is not bert.Bert:
        return None
    return mpnet.MPNet(**{**vars(family), "base": "mpnet", "type_table": False},
                       Rb=spec.relative_buckets)


def _xlm(spec: ModelSpec) -> xlm.XLM | None:
    """XLMWithLMHeadModel and FlaubertWithLMHeadModel (the same forward: FlaubertModel's
    with pre_norm off, and its layerdrop counted as no layer skipped, as the spec notes;
    spec_from_hf's fields for model types xlm and flaubert): post-norm layers,
    learned positions, no language embeddings (token_types 0: n_langs 1), eager only, the
    tied projection with its bias, the loss in the scores' dtype. (spec_from_hf reads
    neither gelu_activation nor causal: the graph takes their defaults, GELU and
    bidirectional.)"""
    if spec.model_type not in ("xlm", "flaubert") or _unread(spec, "xlm"):
        return None
    E, H = spec.d_model, spec.n_heads
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and spec.position == "learned"
            and spec.norm_position == "post" and spec.embedding_norm and not spec.final_norm
            and spec.ffn == "plain" and spec.activation == "gelu" and spec.lm_head
            and spec.lm_head_bias and not spec.mlm_head and not spec.loss_fp32
            and spec.softmax_fp32 and not spec.sdpa_path and spec.token_types == 0
            and spec.n_kv_heads in (None, H) and spec.d_head in (None, E // H) and H
            and E % H == 0 and spec.d_ff):
        return None
    p = spec.dropout
    pa = _attention_dropout(spec)
    return xlm.XLM(V=spec.vocab_size, P=spec.max_positions, E=E, H=H, F=spec.d_ff,
                   L=spec.n_layers, tied=spec.tie_embeddings, dropout=p, attention_dropout=pa)


def _bert_shaped(spec: ModelSpec, family: str, **plain: object) -> bert.Bert | None:
    """The BERT graph a spec of model type `family` maps to once its own fields are set to
    BERT's (`plain`, with the model type whose layout it shares); None where that is not
    plain BERT's."""
    if spec.model_type != family or _unread(spec, family):
        return None
    bare = spec.replace(**plain)
    result = _encoder(bare) if not _unread(bare, "bert") else None
    return result if type(result) is bert.Bert else None


def _tapas(spec: ModelSpec) -> bert.Bert | None:
    """TapasForMaskedLM (eager only): BERT's layout with type_tables token-type tables of
    token_types rows in all, positions per table cell (cell_positions: TapasEmbeddings reads
    the column and row tables' ids, so three tables at least)."""
    if not (spec.type_tables >= (3 if spec.cell_positions else 1) and not spec.sdpa_path):
        return None
    family = _bert_shaped(spec, "tapas", model_type="bert", type_tables=0,
                          cell_positions=False, sdpa_path=True)
    if family is None:
        return None
    return bert.Tapas(**{**vars(family), "base": "tapas"}, tables=spec.type_tables,
                      cell_positions=spec.cell_positions)


def _ibert(spec: ModelSpec) -> bert.Bert | None:
    """IBertForMaskedLM with quant_mode off (norm_int; eager only): RoBERTa's layout with
    QuantLinear projections in the layers (layers_nn_linear False) and IntLayerNorm."""
    if not (spec.norm_int and not spec.layers_nn_linear and not spec.sdpa_path):
        return None
    family = _bert_shaped(spec, "ibert", model_type="roberta", norm_int=False,
                          layers_nn_linear=True, sdpa_path=True)
    return None if family is None else bert.IBert(**{**vars(family), "base": "ibert"})


def _yoso(spec: ModelSpec) -> bert.Bert | None:
    """YosoForMaskedLM (eager only): BERT's layout with the expectation attention
    (yoso_expectation; no attention dropout) and a position table position_offset (2) rows
    longer than max_positions."""
    if not (spec.yoso_expectation and spec.position_offset == 2 and not spec.sdpa_path):
        return None
    family = _bert_shaped(spec, "yoso", model_type="bert", yoso_expectation=False,
                          position_offset=0, sdpa_path=True)
    if family is None:
        return None
    return bert.Yoso(**{**vars(family), "base": "yoso", "P": family.P + 2,
                        "attention_dropout": 0.0})


def _distilbert(spec: ModelSpec) -> bert.Bert | None:
    """DistilBertForMaskedLM: BERT's post-norm layout without token types (the position
    table's slice, the embeddings' LayerNorm), no dropout on the attention's output, its own
    head's modules (the vocab_projector's bias its own)."""
    if spec.token_types != 0:
        return None
    family = _bert_shaped(spec, "distilbert", model_type="bert", token_types=1)
    if family is None or family.task != "mlm":
        return None
    return distilbert.DistilBert(**{**vars(family), "base": "distilbert",
                                    "head": "distilbert", "type_table": False})


# the pre-norm encoders (prenorm_bert.py): model_type -> (the base model's attribute, the
# model type whose embeddings and MLM head it shares)
_PRENORM_ENCODERS = {"roberta-prelayernorm": ("roberta_prelayernorm", "roberta"),
                     "xlm-roberta-xl": ("roberta", "roberta"),
                     "megatron-bert": ("bert", "bert")}


def _prenorm_bert(spec: ModelSpec) -> bert.Bert | None:
    """RobertaPreLayerNormForMaskedLM, XLMRobertaXLForMaskedLM and MegatronBertForMaskedLM:
    pre-norm layers and a final norm, the embeddings' LayerNorm as the layout has it (only
    RoBERTa-PreLN's), SDPA where the class has it (not Megatron-BERT's); the embeddings and
    MLM head of RoBERTa or BERT."""
    if spec.model_type not in _PRENORM_ENCODERS:
        return None
    base, like = _PRENORM_ENCODERS[spec.model_type]
    layout = prenorm_bert.LAYOUTS[spec.model_type]
    if not (spec.norm_position == "pre" and spec.final_norm
            and spec.embedding_norm == layout[3]
            and spec.sdpa_path == (spec.model_type != "megatron-bert")):
        return None
    family = _bert_shaped(spec, spec.model_type, model_type=like, norm_position="post",
                          final_norm=False, embedding_norm=True, sdpa_path=True)
    if family is None or family.task != "mlm":
        return None
    return prenorm_bert.PreNormBert(**{**vars(family), "base": base}, layout=spec.model_type)


def _roformer(spec: ModelSpec) -> bert.Bert | None:
    """RoFormerForMaskedLM (eager only): BERT's post-norm layout without a position table,
    Q and K rotated by the sinusoidal table (rope), BERT's MLM head; heads of an even width
    (the rotation pairs a head's features). (spec_from_hf does not read rotary_value: V
    rotated as well is a new tensor of V's size and dtype in the product's saved set, where
    V's view was, so the saved bytes and FLOPs are the same: measured, roformer-rotary-value.)"""
    if not (spec.position == "rope" and not spec.sdpa_path and spec.head_dim % 2 == 0):
        return None
    family = _bert_shaped(spec, "roformer", model_type="bert", position="learned",
                          sdpa_path=True)
    if family is None or family.task != "mlm":
        return None
    return roformer.RoFormer(**{**vars(family), "base": "roformer"})


def _big_bird(spec: ModelSpec) -> bert.Bert | None:
    """BigBirdForMaskedLM where it runs original_full (eager only): BERT's post-norm layout
    with hidden_act (gelu or gelu_new) in the layers and the head, the pooler run unread;
    block_sparse_from: where block-sparse attention starts, which graph_activations leaves
    to the rules."""
    if not (spec.activation in ("gelu", "gelu_new") and spec.pooler and not spec.sdpa_path):
        return None
    family = _bert_shaped(spec, "big_bird", model_type="bert", activation="gelu",
                          pooler=False, sdpa_path=True, block_sparse_from=0)
    if family is None or family.task != "mlm":
        return None
    return bert.BigBird(**{**vars(family), "head_act": spec.activation},
                        act=spec.activation, sparse_from=spec.block_sparse_from)


def _roc_bert(spec: ModelSpec) -> bert.Bert | None:
    """RoCBertForMaskedLM with concat_input: BERT's layout with the shape and pronunciation
    tables concatenated to the word embedding and mapped back (side_embeddings, in that
    order)."""
    if spec.model_type != "roc_bert" or _unread(spec, "roc_bert"):
        return None
    tables = spec.side_tables
    if not (spec.side_concat and len(tables) == 2):
        return None
    spec_bert = spec.replace(model_type="bert", side_embeddings="", side_concat=False)
    family = _encoder(spec_bert) if not _unread(spec_bert, "bert") else None
    if family is None or type(family) is not bert.Bert:
        return None
    (Vs, Ds), (Vp, Dp) = tables
    return bert.RoCBert(**{**vars(family), "base": "roc_bert"}, Vs=Vs, Ds=Ds, Vp=Vp, Dp=Dp)


def _layoutlm(spec: ModelSpec) -> bert.Bert | None:
    """LayoutLMForMaskedLM: BERT's post-norm layers with the 2-D position tables
    (layout_positions rows), its pooler (run, unread), eager softmax in fp32, the BERT MLM
    head."""
    if spec.model_type != "layoutlm" or _unread(spec, "layoutlm"):
        return None
    E, H = spec.d_model, spec.n_heads
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and spec.position == "learned"
            and spec.norm_position == "post" and spec.embedding_norm and not spec.final_norm
            and spec.ffn == "plain" and spec.activation == "gelu" and spec.mlm_head
            and not spec.lm_head and not spec.loss_fp32 and spec.token_types >= 1
            and spec.softmax_fp32 and spec.pooler and spec.layout_positions > 0
            and spec.mlm_bias == "bert" and not spec.embed_factorized
            and spec.n_kv_heads in (None, H) and spec.d_head in (None, E // H) and H
            and E % H == 0 and spec.d_ff):
        return None
    p = spec.dropout
    pa = _attention_dropout(spec)
    return bert.LayoutLM(V=spec.vocab_size, P=spec.max_positions, Ty=spec.token_types, E=E,
                         H=H, F=spec.d_ff, L=spec.n_layers, base="layoutlm", head="bert",
                         tied=spec.tie_embeddings, hidden_dropout=p, attention_dropout=pa,
                         P2=spec.layout_positions)


def _rope_encoder(spec: ModelSpec) -> rope_encoder.RopeEncoder | None:
    """GTE, NomicBERT and Jina v3 (spec_from_hf's fields for them): post-norm layers with
    RoPE over every head dim, GTE's biases (q, k, v, o, the MLP's output) all or none, the
    gated MLP or Jina's plain one, the MLM head of the model type."""
    if spec.model_type not in _ROPE_ENCODERS or _unread(spec, "rope_encoder"):
        return None
    base, head, gated, mlp_dropout = _ROPE_ENCODERS[spec.model_type]
    E, H = spec.d_model, spec.n_heads
    bias = spec.bias_q
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and spec.position == "rope"
            and spec.norm_position == "post" and spec.embedding_norm and not spec.final_norm
            and spec.ffn == ("gated" if gated else "plain")
            and spec.activation in ("gelu", "silu") and spec.mlm_head and not spec.lm_head
            and not spec.loss_fp32 and spec.token_types >= 1
            and spec.ffn_dropout == (mlp_dropout and bool(spec.dropout))
            and spec.n_kv_heads in (None, H) and spec.d_head in (None, E // H)
            and H and E % H == 0 and spec.d_ff
            and {spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_out} == {bias}
            and spec.bias_ffn_in == (bias and not gated)):
        return None
    p = spec.dropout
    pa = _attention_dropout(spec)
    return rope_encoder.RopeEncoder(
        V=spec.vocab_size, P=spec.max_positions, Ty=spec.token_types, E=E, H=H, F=spec.d_ff,
        L=spec.n_layers, base=base, head=head, tied=spec.tie_embeddings, hidden_dropout=p,
        attention_dropout=pa, head_act=spec.activation if head == "nomic" else "gelu",
        gated=gated, act=spec.activation, bias=bias, mlp_dropout=mlp_dropout)


def _deberta_v2(spec: ModelSpec) -> deberta.Deberta | None:
    """DeBERTa-v2 as spec_from_hf reads it: query/key/value projections with biases,
    nn.LayerNorm, post-norm layers with the erf GELU, absolute positions where
    position_biased_input, the relative table of rel_embeddings rows (2·position_buckets
    or 2·max_relative_positions; normed where norm_rel_ebd says layer_norm) projected in
    full by the attention's own projections (share_att_key) or by one projection per term
    with a bias; no convolution layer (spec_from_hf refuses it); the legacy MLM head."""
    if spec.model_type != "deberta-v2" or _unread(spec, "deberta"):
        return None
    E, H = spec.d_model, spec.n_heads
    terms = spec.rel_terms.split("|") if spec.rel_terms != "none" else []
    relative = spec.rel_embeddings > 0
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and not spec.norm_manual
            and spec.position in ("learned", "none") and spec.norm_position == "post"
            and spec.embedding_norm and not spec.final_norm and spec.ffn == "plain"
            and spec.activation == "gelu" and spec.mlm_head and not spec.lm_head
            and not spec.loss_fp32 and not spec.sdpa_path and not spec.fused_qkv
            and spec.bias_k and spec.rel_key_bias and spec.rel_span == "table"
            and spec.n_kv_heads in (None, H) and spec.d_head in (None, E // H) and H
            and E % H == 0 and spec.d_ff and spec.rel_embeddings % 2 == 0
            and (relative or not (terms or spec.rel_shared_key or spec.rel_embeddings_norm))
            and spec.rel_projections == (0 if spec.rel_shared_key or not relative
                                         else len(terms))):
        return None
    p = spec.dropout
    pa = _attention_dropout(spec)
    return deberta.Deberta(
        V=spec.vocab_size, P=spec.max_positions, Ty=max(spec.token_types, 1), E=E, H=H,
        F=spec.d_ff, L=spec.n_layers, base="deberta", head="bert", tied=spec.tie_embeddings,
        hidden_dropout=p, attention_dropout=pa, R=max(spec.rel_embeddings // 2, 1),
        c2p="c2p" in terms, p2c="p2c" in terms, position_biased=spec.position == "learned",
        token_types=spec.token_types > 0, v2=True, relative_table=relative,
        shared_key=spec.rel_shared_key, rel_norm=spec.rel_embeddings_norm)


def _deberta(spec: ModelSpec) -> deberta.Deberta | None:
    """DeBERTa (v1) as spec_from_hf reads it: in_proj with q_bias and v_bias (fused_qkv, no
    key bias), DebertaLayerNorm (norm_manual, cast back), post-norm layers with the erf
    GELU, absolute positions where position_biased_input (position learned, else none),
    the relative table of 2·max_relative_positions rows projected by pos_proj (c2p, no
    bias) and pos_q_proj (p2c) over 2·min(T, R) rows, the legacy MLM head."""
    if spec.model_type != "deberta" or _unread(spec, "deberta"):
        return None
    E, H = spec.d_model, spec.n_heads
    terms = spec.rel_terms.split("|") if spec.rel_terms != "none" else []
    relative = spec.rel_embeddings > 0
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and spec.norm_manual
            and spec.norm_manual_cast and spec.position in ("learned", "none")
            and spec.norm_position == "post" and spec.embedding_norm and not spec.final_norm
            and spec.ffn == "plain" and spec.activation == "gelu" and spec.mlm_head
            and not spec.lm_head and not spec.loss_fp32 and not spec.sdpa_path
            and spec.fused_qkv and not spec.bias_k and not spec.rel_key_bias
            and spec.rel_span == "sequence" and spec.n_kv_heads in (None, H)
            and spec.d_head in (None, E // H) and H and E % H == 0 and spec.d_ff
            and spec.rel_embeddings % 2 == 0 and (relative or not terms)
            and spec.rel_projections == (len(terms) if relative else 0)):
        return None
    p = spec.dropout
    pa = _attention_dropout(spec)
    return deberta.Deberta(
        V=spec.vocab_size, P=spec.max_positions, Ty=max(spec.token_types, 1), E=E, H=H,
        F=spec.d_ff, L=spec.n_layers, base="deberta", head="bert", tied=spec.tie_embeddings,
        hidden_dropout=p, attention_dropout=pa, R=max(spec.rel_embeddings // 2, 1),
        c2p=relative and "c2p" in terms, p2c=relative and "p2c" in terms,
        position_biased=spec.position == "learned", token_types=spec.token_types > 0)


def _gemma_family(spec: ModelSpec) -> gemma.Gemma | None:
    if (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation in ("gelu", "gelu_tanh") and spec.norm_fp32
            and spec.softmax_fp32 and not spec.dropout and spec.norm_position == "pre"
            and spec.model_type in ("", *_GEMMAS) and not _unread(spec, "gemma")):
        return _gemma(spec)
    return None


def _gemma4_family(spec: ModelSpec) -> gemma4.Gemma4 | None:
    """Gemma 4's text decoders by their model type (Gemma4ForCausalLM,
    Gemma4UnifiedForCausalLM: the latter has no per-layer inputs) without experts: Gemma4RMSNorm
    (norm_mean_square with norm_fp32), sandwich norms, q/k norms over each head and v_norm,
    gelu_tanh, attention biases all or none, layers full or sliding; experts beside the
    dense MLP in every layer (enable_moe_block), the router an nn.Linear to peft."""
    if spec.model_type not in ("gemma4_text", "gemma4_unified_text"):
        return None
    from transformer_calc.plan import layer_kinds_in_order, parse_pattern

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    H, Hkv = spec.n_heads, spec.n_kv_heads or spec.n_heads
    Hg = spec.global_kv_heads or Hkv
    unified = spec.model_type == "gemma4_unified_text"
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "gelu_tanh" and spec.norm_fp32 and spec.norm_mean_square
            and spec.softmax_fp32 and not spec.dropout and spec.norm_position == "pre"
            and spec.sandwich_norm and spec.qk_norm == "head" and spec.value_norm
            and not spec.attn_softcapping and not spec.bias_ffn_in and not spec.bias_ffn_out
            and len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) == 1
            and not set(kinds) - {"F", "S"} and H % Hkv == 0 and H % Hg == 0
            and spec.head_dim % 2 == 0 and (spec.global_head_dim or 2) % 2 == 0
            and not (unified and spec.per_layer_input)
            and (not spec.per_layer_input or spec.per_layer_vocab)
            and spec.kv_shared_layers < spec.n_layers
            and (not spec.n_experts or (
                spec.moe_beside_dense and spec.top_k and spec.peft_moe == "linear_router"
                and not unified and set(parse_pattern(spec.layer_ffn or "E", "DEX",
                                                      spec.n_layers, "layer_ffn")) == {"E"}))
            and set(kinds[:spec.n_layers - spec.kv_shared_layers]) >= set(
                kinds[spec.n_layers - spec.kv_shared_layers:])
            and not _unread(spec, "gemma4")):
        return None
    pa = _attention_dropout(spec)
    return gemma4.Gemma4(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=Hkv, dh=spec.head_dim,
                         F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                         bias=spec.bias_q, attention_dropout=pa, sandwich=True,
                         qk_norm=True, rope_per_kind=True,
                         final_softcap=spec.logit_softcapping, window=spec.sliding_window,
                         kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                         dg=spec.global_head_dim or spec.head_dim, Hg=Hg,
                         k_eq_v=spec.global_k_eq_v, shared=spec.kv_shared_layers,
                         wide=spec.kv_shared_wide_ffn, ple=bool(spec.per_layer_input),
                         Ep=spec.per_layer_input or 1, Vp=spec.per_layer_vocab or 1,
                         experts=bool(spec.n_experts), X=spec.n_experts or 1,
                         K=spec.top_k or 1, Fe=spec.expert_ff if spec.n_experts else 1,
                         grouped=spec.experts_grouped)


def _gemma3n_family(spec: ModelSpec) -> gemma3n.Gemma3n | None:
    """Gemma 3n's text decoder by its model type (Gemma3nForCausalLM): Gemma 4's norms,
    attention and per-layer inputs (every layer of one head dim) with AltUp's streams,
    LAuReL and the first layers' sparse FFN gates."""
    if spec.model_type != "gemma3n_text":
        return None
    from transformer_calc.plan import layer_kinds_in_order

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    L, H, Hkv = spec.n_layers, spec.n_heads, spec.n_kv_heads or spec.n_heads
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "gelu_tanh" and spec.norm_fp32 and spec.norm_mean_square
            and spec.softmax_fp32 and not spec.dropout and spec.norm_position == "pre"
            and spec.sandwich_norm and spec.qk_norm == "head" and spec.value_norm
            and not spec.attn_softcapping and not spec.bias_ffn_in and not spec.bias_ffn_out
            and len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) == 1
            and not set(kinds) - {"F", "S"} and H % Hkv == 0 and spec.head_dim % 2 == 0
            and spec.altup_inputs >= 2 and spec.laurel_rank >= 1
            and spec.per_layer_input >= 1 and spec.per_layer_vocab >= 1
            and spec.sparse_ffn_layers <= L and spec.kv_shared_layers < L
            and set(kinds[:L - spec.kv_shared_layers]) >= set(kinds[L - spec.kv_shared_layers:])
            and not _unread(spec, "gemma3n")):
        return None
    pa = _attention_dropout(spec)
    return gemma3n.Gemma3n(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=Hkv, dh=spec.head_dim,
                           F=spec.d_ff, L=L, tied=spec.tie_embeddings, bias=spec.bias_q,
                           attention_dropout=pa, sandwich=True, qk_norm=True,
                           rope_per_kind=True, final_softcap=spec.logit_softcapping,
                           window=spec.sliding_window,
                           kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                           dg=spec.head_dim, Hg=Hkv, shared=spec.kv_shared_layers, ple=True,
                           Ep=spec.per_layer_input, Vp=spec.per_layer_vocab,
                           streams=spec.altup_inputs, R=spec.laurel_rank,
                           sparse=spec.sparse_ffn_layers)


def _moe_family(spec: ModelSpec) -> moe.Moe | None:
    if spec.model_type == "llama4_text":
        return _llama4(spec)
    if spec.model_type in _SIGMOID_MOES:
        return _sigmoid_moe(spec)
    if spec.model_type == "cohere2_moe":
        return _cohere_moe(spec)
    if spec.model_type == "beam":
        return _beam(spec)
    if spec.model_type == "gpt_oss":
        return _gpt_oss(spec)
    if spec.model_type == "flint":
        return _flint(spec)
    if spec.model_type == "granitemoe_swa":
        return _granitemoe_swa(spec)
    if spec.model_type in ("granitemoe", "granitemoeshared"):
        return _granitemoe(spec)
    if spec.model_type == "minimax_m2":
        return _minimax_m2(spec)
    if spec.model_type == "aria_text":
        return _aria(spec)
    if spec.model_type == "ernie4_5_moe":
        return _ernie4_5_moe(spec)
    if spec.model_type == "dbrx":
        return _dbrx(spec)
    if spec.model_type in routed.MOE_TYPES:
        return routed.glm4_moe(spec, _unread(spec, "routed"))
    if spec.model_type in routed.ROUTED_TYPES:
        return routed.routed(spec, _unread(spec, "routed"))
    return _moe(spec) if spec.n_experts else None


# the Llama-shaped decoders whose router is DeepSeek-V3's sigmoid with its top-k chosen under
# autograd (moe.sigmoid_router): model_type -> the attention's q/k norm (HYV3Attention's after
# the transpose, Dots1Attention's Qwen3 one before it)
_SIGMOID_MOES = {"hy_v3": "head_t", "dots1": "head"}


_READS["sigmoid_moe"] = _READS["moe"] | {"router_fp32"}
_READS["routed"] = _READS["moe"] | routed.READS  # graph/routed.py's mappers
_READS["cohere_moe"] = _READS["moe"] | {"norm_manual", "parallel_block", "sliding_window",
                                        "layer_attention"}


# Llama 4's text decoder: the MoE fields, its experts over every token, the layers' kinds
# (chunked with RoPE, NoPE), the chunk
_READS["llama4"] = _READS["moe"] | {"experts_every_token", "attention_chunk",
                                    "layer_attention"}


def _llama4(spec: ModelSpec) -> llama4.Llama4:
    """Llama4ForCausalLM (spec_from_hf's fields for it): pre-norm LlamaRMSNorm layers,
    chunked RoPE layers (C; their L2 q/k norms where qk_norm is l2) and NoPE ones (N),
    dense layers of d_ff and Llama4TextMoe ones (layer_ffn) with every expert on every token
    (experts_every_token), the sigmoid of the top-k logits, one shared expert as wide as an
    expert. Anything else (a chunk of null, whose "chunked" layers transformers 5.23 cannot
    mask, other norms or routers) is refused."""
    from transformer_calc.plan import layer_kinds_in_order

    kinds = layer_kinds_in_order(spec, spec.n_layers)
    attn, ffn = "".join(k[0] for k in kinds), "".join(k[1] for k in kinds)
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "silu" and not spec.norm_fp32 and not spec.softmax_fp32
            and spec.qk_norm in ("l2", "none") and spec.norm_position == "pre"
            and spec.experts_every_token and not spec.experts_grouped
            and spec.attention_chunk >= 1 and not set(attn) - {"C", "N"}
            and not set(ffn) - {"D", "E"} and spec.n_shared_experts == 1
            and spec.d_ff_shared in (None, spec.expert_ff) and not spec.shared_expert_gate
            and spec.router_topk == "none" and spec.peft_moe == "linear_router"
            and not spec.peft_router_linear and not spec.fused_qkv
            and not spec.fused_gate_up and not spec.rope_concat and not spec.rope_fp32
            and not spec.bias_ffn_in and not spec.bias_ffn_out and not spec.dropout
            and not _unread(spec, "llama4")):
        raise TcalcError(f"{spec.name}: no op graph for this llama4_text layout yet (the "
                         "graph engine covers Llama4TextConfig's layout)")
    H = spec.n_heads
    return llama4.Llama4(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                         dh=spec.head_dim, F=spec.d_ff or 1, L=spec.n_layers,
                         tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                         bias_v=spec.bias_v, bias_o=spec.bias_o,
                         attention_dropout=spec.attention_dropout or 0.0,
                         window=spec.attention_chunk, kinds=attn, X=spec.n_experts,
                         K=spec.top_k, Fe=spec.expert_ff, pattern=ffn, router="llama4",
                         l2_qk=spec.qk_norm == "l2")


_READS["beam"] = _READS["sigmoid_moe"] | {
    "sliding_window", "layer_attention", "sandwich_norm", "attn_gate", "attn_gate_bias",
    "attn_gate_named_gate_proj", "logit_softcapping", "softcap_fp32", "ffn_act_fp32"}


def _beam(spec: ModelSpec) -> beam.Beam:
    """BeamForCausalLM (spec_from_hf's fields for it): sandwich BeamRMSNorms in fp32
    (norm_fp32), q/k norms per head, sliding layers with fp32 RoPE (rope_fp32) and full
    ones without (layer_attention S and N), the per-channel output gate with a bias per head
    (attn_gate width, attn_gate_bias head), dense layers then experts (layer_ffn) in fp32
    (ffn_act_fp32), the sigmoid router (router_fp32; router_topk renorm: norm_topk_prob,
    else none), the logits soft-capped in fp32. spec_from_hf does not read n_group and
    topk_group: their ranking keeps nothing either way."""
    from transformer_calc.plan import layer_kinds_in_order, parse_pattern

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    ffn = parse_pattern(spec.layer_ffn, "DE", spec.n_layers, "layer_ffn") \
        if spec.layer_ffn else ("E",) * spec.n_layers
    if not (spec.norm == "rmsnorm" and spec.norm_fp32 and spec.rope_fp32
            and spec.position == "rope" and spec.ffn == "gated" and spec.activation == "silu"
            and spec.softmax_fp32 and not spec.dropout and spec.qk_norm == "head"
            and spec.norm_position == "pre" and spec.sandwich_norm and spec.router_fp32
            and spec.attn_gate == "width" and spec.attn_gate_bias == "head"
            and spec.attn_gate_named_gate_proj and spec.ffn_act_fp32
            and (spec.softcap_fp32 or not spec.logit_softcapping)
            and spec.router_topk in ("renorm", "none") and not spec.n_shared_experts
            and not set(kinds) - {"S", "N"} and spec.sliding_window
            and not spec.fused_qkv and not spec.fused_gate_up and not spec.rope_concat
            and not spec.bias_ffn_in and not spec.bias_ffn_out
            and spec.peft_moe == "qwen2_moe" and not spec.peft_router_linear
            and not _unread(spec, "beam")):
        raise TcalcError(f"{spec.name}: no op graph for this beam layout yet (the graph "
                         "engine covers BeamConfig's layout)")
    H = spec.n_heads
    pa = _attention_dropout(spec)
    return beam.Beam(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                     dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers,
                     tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                     bias_v=spec.bias_v, bias_o=spec.bias_o, attention_dropout=pa,
                     qk_norm="head", window=spec.sliding_window,
                     kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                     X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff,
                     pattern="" if set(ffn) == {"E"} else "".join(ffn), router="beam",
                     norm_topk=spec.router_topk == "renorm",
                     softcap=spec.logit_softcapping or 0.0, grouped=spec.experts_grouped)


_READS["gpt_oss"] = _READS["moe"] | {
    "sdpa_path", "softmax_sink_column", "softmax_row_max", "attention_sinks",
    "sliding_window", "layer_attention", "router_bias"}


def _gpt_oss(spec: ModelSpec) -> gpt_oss.GptOss:
    """GptOssForCausalLM (spec_from_hf's fields for it): pre-norm layers under GptOssRMSNorm
    (norm_fp32), eager attention with a sink column per head (attention_sinks, its
    row maximum subtracted: softmax_sink_column, softmax_row_max), sliding and full layers
    (layer_attention), experts with biases and the clamped SwiGLU (swiglu_oss) in every
    layer behind a biased router (router_bias). Anything else is refused."""
    from transformer_calc.plan import layer_kinds_in_order

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    if not (spec.norm == "rmsnorm" and spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "swiglu_oss"
            and not spec.softmax_fp32 and not spec.sdpa_path and spec.attention_sinks
            and spec.softmax_sink_column and spec.softmax_row_max and spec.router_bias
            and not spec.dropout and spec.qk_norm == "none" and spec.norm_position == "pre"
            and not spec.layer_ffn and not spec.n_shared_experts
            and spec.d_ff_expert is None and spec.router_topk == "none"
            and not set(kinds) - {"S", "F"} and spec.peft_moe == "none"
            and not spec.fused_qkv and not spec.fused_gate_up and not spec.rope_concat
            and not spec.rope_fp32 and not _unread(spec, "gpt_oss")):
        raise TcalcError(f"{spec.name}: no op graph for this gpt_oss layout yet (the graph "
                         "engine covers GptOssConfig's layout)")
    H = spec.n_heads
    pa = _attention_dropout(spec)
    return gpt_oss.GptOss(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                          dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers,
                          tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                          bias_v=spec.bias_v, bias_o=spec.bias_o, attention_dropout=pa,
                          window=spec.sliding_window or 0,
                          kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                          X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff,
                          router="gpt_oss", grouped=spec.experts_grouped)


_READS["flint"] = _READS["sigmoid_moe"] | {
    "sdpa_path", "attn_fp32", "softmax_sink_column", "attention_sinks", "sliding_window",
    "layer_attention"}


def _flint(spec: ModelSpec) -> flint.Flint:
    """FlintForCausalLM (spec_from_hf's fields for it): pre-norm layers under FlintRMSNorm
    (norm_fp32), q/k norms per head, eager attention in fp32 (attn_fp32) with a sink
    column (attention_sinks, softmax_sink_column), sliding layers with RoPE and full ones
    without (layer_attention S and N), dense layers where layer_ffn says D, the others the
    fp32 sigmoid router (router_fp32; router_topk topk_sigmoid[_renorm]) with the experts
    and one ungated shared expert of d_ff_shared (0 allowed). Anything else is refused."""
    from transformer_calc.plan import layer_kinds_in_order, parse_pattern

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    ffn = parse_pattern(spec.layer_ffn, "DE", spec.n_layers, "layer_ffn") \
        if spec.layer_ffn else ("E",) * spec.n_layers
    if not (spec.norm == "rmsnorm" and spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and not spec.softmax_fp32
            and not spec.sdpa_path and spec.attn_fp32 and spec.attention_sinks
            and spec.softmax_sink_column and not spec.dropout and spec.qk_norm == "head"
            and spec.norm_position == "pre" and spec.router_fp32
            and spec.router_topk in ("topk_sigmoid", "topk_sigmoid_renorm")
            and spec.n_shared_experts == 1 and spec.d_ff_shared is not None
            and not spec.shared_expert_gate and not set(kinds) - {"S", "N"}
            and spec.peft_moe == "none" and not spec.fused_qkv and not spec.fused_gate_up
            and not spec.rope_concat and not spec.rope_fp32 and not spec.bias_ffn_in
            and not spec.bias_ffn_out and not _unread(spec, "flint")):
        raise TcalcError(f"{spec.name}: no op graph for this flint layout yet (the graph "
                         "engine covers FlintConfig's layout)")
    H = spec.n_heads
    pa = _attention_dropout(spec)
    return flint.Flint(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                       dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers,
                       tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                       bias_v=spec.bias_v, bias_o=spec.bias_o, attention_dropout=pa,
                       qk_norm="head", window=spec.sliding_window or 0,
                       kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                       X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff,
                       Fs=spec.d_ff_shared or 1, shared_width=bool(spec.d_ff_shared),
                       pattern="" if set(ffn) == {"E"} else "".join(ffn), router="flint",
                       norm_topk=spec.router_topk == "topk_sigmoid_renorm",
                       grouped=spec.experts_grouped)


# DBRX: Llama's fields, the experts', the clamped QKV and the router's jitter
# (embed_dropout: DBRX's emb_pdrop, which DbrxModel never applies)
_READS["dbrx"] = _READS["moe"] | {"qkv_clamp", "router_jitter", "embed_dropout"}


def _dbrx(spec: ModelSpec) -> dbrx.Dbrx:
    """DbrxForCausalLM (spec_from_hf's fields for it): pre-norm blocks under LayerNorms
    without a bias, the fused Wqkv clamped (qkv_clamp; a null clip_qkv cannot run), RoPE,
    bias-free linears, every layer's experts (SiLU, d_ff_expert the FFN's width) behind
    router.layer, an nn.Linear (peft_moe linear_router), its top-k softmax values divided by
    their p-norm (router_topk pnorm), the input jittered where moe_jitter_eps is set
    (router_jitter), resid_pdrop's dropouts (spec.dropout; emb_pdrop, embed_dropout, is
    applied by no forward). Anything else is refused."""
    H, E = spec.n_heads, spec.d_model
    Hkv = spec.n_kv_heads or H
    if not (spec.norm == "layernorm_nobias" and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and spec.fused_qkv and spec.qkv_clamp and spec.router_topk == "pnorm"
            and spec.peft_moe == "linear_router" and not spec.peft_router_linear
            and spec.norm_position == "pre" and spec.qk_norm == "none"
            and not spec.layer_ffn and not spec.n_shared_experts and not spec.fused_gate_up
            and not spec.rope_concat and not spec.norm_fp32 and not spec.rope_fp32
            and not _biased(spec) and not spec.tie_embeddings
            and spec.d_ff_expert in (None, spec.d_ff)
            and H and E % H == 0 and H % Hkv == 0 and spec.d_head in (None, E // H)
            and (E // H) % 2 == 0 and not _unread(spec, "dbrx")):
        raise TcalcError(f"{spec.name}: no op graph for this dbrx layout yet (the graph "
                         "engine covers DbrxConfig's layout with clip_qkv and "
                         "moe_normalize_expert_weights set)")
    pa = _attention_dropout(spec)
    return dbrx.Dbrx(V=spec.vocab_size, E=E, H=H, Hkv=Hkv, dh=E // H, F=spec.d_ff,
                     L=spec.n_layers, attention_dropout=pa, X=spec.n_experts, K=spec.top_k,
                     Fe=spec.expert_ff, router="dbrx", jitter=spec.router_jitter,
                     dropout=spec.dropout, grouped=False)


_READS["granitemoe_swa"] = _READS["moe"] | {
    "sdpa_path", "softmax_sink_lse", "attention_sinks", "sliding_window", "layer_attention"}


def _granitemoe_swa(spec: ModelSpec) -> granitemoe_swa.GraniteMoeSwa:
    """GraniteMoeSWAForCausalLM (spec_from_hf's fields for it): pre-norm layers under
    RMSNorm, eager attention with the per-head sink applied after it (attention_sinks,
    softmax_sink_lse), full and sliding layers (layer_attention F, S; N where
    layer_rope_theta is 0), experts in every layer behind the softmax-over-top-k router
    (router_topk topk_softmax), no shared MLP. Anything else is refused."""
    from transformer_calc.plan import layer_kinds_in_order

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    if not (spec.norm == "rmsnorm" and not spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.sdpa_path and spec.attention_sinks and spec.softmax_sink_lse
            and not spec.dropout and spec.qk_norm == "none" and spec.norm_position == "pre"
            and spec.router_topk == "topk_softmax" and not spec.n_shared_experts
            and not spec.layer_ffn and not set(kinds) - {"F", "S", "N"}
            and spec.peft_moe == "none" and not spec.fused_qkv and not spec.rope_concat
            and not spec.rope_fp32 and not spec.bias_ffn_in and not spec.bias_ffn_out
            and not _unread(spec, "granitemoe_swa")):
        raise TcalcError(f"{spec.name}: no op graph for this granitemoe_swa layout yet (the "
                         "graph engine covers GraniteMoeSWAConfig's layout without a shared "
                         "MLP)")
    H = spec.n_heads
    pa = _attention_dropout(spec)
    return granitemoe_swa.GraniteMoeSwa(
        V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H, dh=spec.head_dim,
        F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings, bias_q=spec.bias_q,
        bias_k=spec.bias_k, bias_v=spec.bias_v, bias_o=spec.bias_o, attention_dropout=pa,
        window=spec.sliding_window or 0, kinds=kinds if len(set(kinds)) > 1 else kinds[0],
        X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff, router="granitemoe_swa",
        grouped=spec.experts_grouped)


_READS["granitemoe"] = _READS["moe"] | {"sdpa_path"}


def _granitemoe(spec: ModelSpec) -> granitemoe_swa.GraniteMoe:
    """GraniteMoeForCausalLM and GraniteMoeSharedForCausalLM (spec_from_hf's fields for
    them): pre-norm layers under RMSNorm, full attention with RoPE in every layer, experts
    in every layer behind the softmax-over-top-k router (router_topk topk_softmax) and
    GraniteMoeShared's ungated shared MLP (input_linear fused: fused_gate_up) where
    shared_intermediate_size is not 0. Anything else is refused."""
    shared = spec.n_shared_experts
    if not (spec.norm == "rmsnorm" and not spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and spec.qk_norm == "none" and spec.norm_position == "pre"
            and spec.router_topk == "topk_softmax" and not spec.layer_ffn
            and (shared == 0 or (shared == 1 and spec.model_type == "granitemoeshared"
                                 and spec.fused_gate_up and not spec.shared_expert_gate
                                 and spec.d_ff_shared == spec.shared_ff))
            and spec.fused_gate_up == (spec.model_type == "granitemoeshared")
            and spec.peft_moe == "none" and not spec.peft_router_linear
            and not spec.fused_qkv and not spec.rope_concat and not spec.rope_fp32
            and not spec.bias_ffn_in and not spec.bias_ffn_out and spec.sdpa_path
            and not _unread(spec, "granitemoe")):
        raise TcalcError(f"{spec.name}: no op graph for this {spec.model_type} layout yet "
                         "(the graph engine covers GraniteMoeConfig's and "
                         "GraniteMoeSharedConfig's layouts)")
    H = spec.n_heads
    return granitemoe_swa.GraniteMoe(
        V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H, dh=spec.head_dim,
        F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings, bias_q=spec.bias_q,
        bias_k=spec.bias_k, bias_v=spec.bias_v, bias_o=spec.bias_o,
        attention_dropout=_attention_dropout(spec), X=spec.n_experts, K=spec.top_k,
        Fe=spec.expert_ff, Fs=spec.shared_ff if shared else 1, router="granitemoe_swa",
        shared=bool(shared), grouped=spec.experts_grouped)


def _aria(spec: ModelSpec) -> moe.Moe:
    """AriaTextForCausalLM (spec_from_hf's fields for it): Llama's pre-norm layers and
    attention, every layer's MLP AriaTextMoELayer: AriaTextTopKRouter (router_topk
    topk_softmax: a softmax over the top-k logits in their dtype), AriaExperts (SiLU) and
    moe_num_shared_experts · intermediate_size wide shared experts (d_ff_shared unset).
    Anything else is refused."""
    if not (spec.norm == "rmsnorm" and not spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and spec.qk_norm == "none" and spec.norm_position == "pre"
            and spec.router_topk == "topk_softmax" and spec.n_shared_experts >= 1
            and spec.d_ff_shared is None and not spec.shared_expert_gate
            and not spec.layer_ffn and spec.peft_moe == "none" and not spec.peft_router_linear
            and not spec.fused_qkv and not spec.fused_gate_up and not spec.rope_concat
            and not spec.rope_fp32 and not spec.bias_ffn_in and not spec.bias_ffn_out
            and not _unread(spec, "moe")):
        raise TcalcError(f"{spec.name}: no op graph for this aria_text layout yet (the graph "
                         "engine covers AriaTextConfig's layout with shared experts)")
    H = spec.n_heads
    return moe.Moe(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                   dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                   bias_q=spec.bias_q, bias_k=spec.bias_k, bias_v=spec.bias_v,
                   bias_o=spec.bias_o, attention_dropout=_attention_dropout(spec),
                   X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff,
                   Fs=spec.n_shared_experts * spec.shared_ff, router="aria",
                   shared_experts=True, grouped=spec.experts_grouped)


_READS["ernie4_5_moe"] = _READS["moe"] | {"router_fp32"}


def _ernie4_5_moe(spec: ModelSpec) -> moe.Moe:
    """Ernie4_5_MoeForCausalLM (spec_from_hf's fields for it): Llama's pre-norm layers with
    the interleaved fp32 RoPE (llama.glm_rotary), dense layers of intermediate_size where
    layer_ffn says D (moe_layer_start_index...), the others Ernie4_5_MoeSparseMoeBlock: its
    ungated shared experts of moe_num_shared_experts · moe_intermediate_size run first,
    the fp32 router with autocast off (router_fp32: moe._ernie_router), the experts. Biases
    (use_bias) and anything else are refused."""
    from transformer_calc.plan import parse_pattern

    kinds = parse_pattern(spec.layer_ffn, "DE", spec.n_layers, "layer_ffn") \
        if spec.layer_ffn else ("E",) * spec.n_layers
    if not (spec.norm == "rmsnorm" and not spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and spec.qk_norm == "none" and spec.norm_position == "pre"
            and spec.router_fp32 and spec.router_topk == "none"
            and spec.n_shared_experts >= 1 and spec.d_ff_shared is None
            and not spec.shared_expert_gate and spec.peft_moe == "qwen2_moe"
            and not spec.peft_router_linear and not _biased(spec) and not spec.fused_qkv
            and not spec.fused_gate_up and not spec.rope_concat and not spec.rope_fp32
            and not _unread(spec, "ernie4_5_moe")):
        raise TcalcError(f"{spec.name}: no op graph for this ernie4_5_moe layout yet (the "
                         "graph engine covers Ernie4_5_MoeConfig's layout with shared "
                         "experts, without biases)")
    H = spec.n_heads
    return moe.Moe(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                   dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                   attention_dropout=_attention_dropout(spec), rope_glm=True,
                   X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff,
                   Fs=spec.n_shared_experts * spec.shared_ff,
                   pattern="" if set(kinds) == {"E"} else "".join(kinds),
                   router="ernie4_5_moe", shared_mlp=True, grouped=spec.experts_grouped)


_READS["minimax_m2"] = _READS["moe"] | {"rotary_fraction"}


def _minimax_m2(spec: ModelSpec) -> moe.Moe:
    """MiniMaxM2ForCausalLM (spec_from_hf's fields for it): pre-norm layers under RMSNorm,
    q_norm and k_norm over the whole projections (qk_norm width), RoPE over every head's
    width with the empty pass-through part concatenated after it (rope_concat: a copy),
    experts in every layer behind MiniMaxM2TopKRouter (moe.sigmoid_router), no shared
    expert; peft converts its experts as Mixtral's (peft_moe mixtral). A partial rotary
    (rotary_fraction, its rotary_dim) rotates the first dr of each head, the rest
    concatenated after it. Router jitter and anything else are refused."""
    if not (spec.norm == "rmsnorm" and not spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and spec.qk_norm == "width" and spec.norm_position == "pre"
            and spec.router_topk == "none" and not spec.n_shared_experts
            and not spec.layer_ffn and spec.rope_concat and spec.peft_moe == "mixtral"
            and not spec.peft_router_linear and not spec.fused_qkv
            and not spec.fused_gate_up and not spec.rope_fp32 and not spec.bias_ffn_in
            and not spec.bias_ffn_out and not _unread(spec, "minimax_m2")):
        raise TcalcError(f"{spec.name}: no op graph for this minimax_m2 layout yet (the "
                         "graph engine covers MiniMaxM2Config's layout)")
    H = spec.n_heads
    dr = int(spec.head_dim * spec.rotary_fraction)  # MiniMaxM2RotaryEmbedding's dim
    return moe.Moe(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                   dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                   bias_q=spec.bias_q, bias_k=spec.bias_k, bias_v=spec.bias_v,
                   bias_o=spec.bias_o, attention_dropout=_attention_dropout(spec),
                   rope_concat=True, qk_norm="width", partial_rotary=dr < spec.head_dim,
                   dr=dr if dr < spec.head_dim else 0, X=spec.n_experts, K=spec.top_k,
                   Fe=spec.expert_ff, router="minimax_m2", grouped=spec.experts_grouped)


def _cohere_moe(spec: ModelSpec) -> cohere.CohereMoe:
    """Cohere2MoeForCausalLM (spec_from_hf's fields for it): Cohere 2's parallel layers
    under Cohere2MoeLayerNorm (layernorm_nobias, norm_manual), sliding layers with RoPE and
    full ones without (layer_attention S and N), every layer's MLP the sparse block with
    the softmax-over-top-k router (router_topk topk_softmax) and, with num_shared_experts,
    an ungated shared MLP averaged in. Dense layers (first_k_dense_replace,
    mlp_layer_types), RMSNorm (rms_norm_eps), the sigmoid selection and anything else
    are refused."""
    from transformer_calc.plan import layer_kinds_in_order

    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    if not (spec.norm == "layernorm_nobias" and spec.norm_manual and spec.parallel_block
            and spec.position == "rope" and spec.ffn == "gated" and spec.activation == "silu"
            and spec.softmax_fp32 and not spec.dropout and spec.qk_norm == "none"
            and spec.router_topk == "topk_softmax" and not spec.layer_ffn
            and not set(kinds) - {"S", "N"} and spec.d_ff_shared is None
            and not spec.bias_ffn_in and not spec.bias_ffn_out
            and not spec.shared_expert_gate and spec.peft_moe == "qwen2_moe"
            and not _unread(spec, "cohere_moe")):
        raise TcalcError(f"{spec.name}: no op graph for this cohere2_moe layout yet (the "
                         "graph engine covers Cohere 2 MoE's sparse layers with the softmax "
                         "router)")
    H = spec.n_heads
    pa = _attention_dropout(spec)
    shared = spec.n_shared_experts
    return cohere.CohereMoe(
        V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H, dh=spec.head_dim,
        F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings, bias_q=spec.bias_q,
        bias_k=spec.bias_k, bias_v=spec.bias_v, bias_o=spec.bias_o, attention_dropout=pa,
        window=spec.sliding_window, kinds=kinds if len(set(kinds)) > 1 else kinds[0],
        X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff,
        Fs=shared * spec.shared_ff if shared else 1, router="cohere2_moe",
        shared_experts=bool(shared), grouped=spec.experts_grouped)


def _sigmoid_moe(spec: ModelSpec) -> moe.Moe:
    """HYV3ForCausalLM and Dots1ForCausalLM (spec_from_hf's fields for them): Qwen3's
    attention (RMSNorm per q/k head), dense layers where layer_ffn says D, the others
    routed by an fp32 sigmoid router (router_fp32) with ungated shared experts of
    n_shared_experts · moe_intermediate_size (d_ff_shared unset). Dots1's router
    renormalises with norm_topk_prob (router_topk renorm, else none) and ranks n_group
    groups first (spec_from_hf does not read n_group and topk_group: that ranking keeps
    nothing either way, moe.sigmoid_router). Anything else is refused."""
    from transformer_calc.plan import parse_pattern

    hy = spec.model_type == "hy_v3"
    kinds = parse_pattern(spec.layer_ffn, "DE", spec.n_layers, "layer_ffn") \
        if spec.layer_ffn else ("E",) * spec.n_layers
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "silu" and spec.softmax_fp32 and not spec.dropout
            and spec.qk_norm == "head" and spec.norm_position == "pre" and spec.router_fp32
            and spec.router_topk in (("none",) if hy else ("none", "renorm"))
            and spec.n_shared_experts >= 1 and spec.d_ff_shared is None
            and not spec.fused_qkv and not spec.fused_gate_up and not spec.rope_concat
            and not spec.norm_fp32 and not spec.rope_fp32 and not spec.bias_ffn_in
            and not spec.bias_ffn_out and not spec.shared_expert_gate
            and spec.peft_moe == ("none" if hy else "qwen2_moe")
            and not spec.peft_router_linear and not _unread(spec, "sigmoid_moe")):
        raise TcalcError(f"{spec.name}: no op graph for this {spec.model_type} layout yet "
                         "(the graph engine covers HY-V3's and dots.llm1's defaults)")
    H = spec.n_heads
    pa = _attention_dropout(spec)
    return moe.Moe(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                   dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                   bias_q=spec.bias_q, bias_k=spec.bias_k, bias_v=spec.bias_v,
                   bias_o=spec.bias_o, attention_dropout=pa,
                   qk_norm=_SIGMOID_MOES[spec.model_type],
                   X=spec.n_experts, K=spec.top_k, Fe=spec.expert_ff,
                   Fs=spec.n_shared_experts * spec.shared_ff,
                   pattern="" if set(kinds) == {"E"} else "".join(kinds),
                   router=spec.model_type, norm_topk=spec.router_topk == "renorm",
                   shared_experts=True, grouped=spec.experts_grouped)


def _encoder(spec: ModelSpec) -> bert.Bert | None:
    """A BERT-style MaskedLM spec as transformers builds it for its model_type: post-norm
    layers, learned positions and token types, the erf GELU, the MLM head with its
    decoder's bias, nn.CrossEntropyLoss in the scores' dtype; ELECTRA's embeddings of
    their own width, projected (its head as wide, the decoder's bias its own)."""
    base, head, from_ids = _ENCODERS[spec.model_type]
    E, H = spec.d_model, spec.n_heads
    electra = head == "electra"
    task = _encoder_task(spec, head)
    if not (spec.arch == "encoder" and spec.norm == "layernorm" and spec.position == "learned"
            and spec.norm_position == "post" and spec.embedding_norm and not spec.final_norm
            and spec.ffn == "plain" and spec.activation == "gelu" and task
            and not spec.lm_head and not spec.loss_fp32 and spec.token_types >= 1
            and spec.n_kv_heads in (None, H) and spec.d_head in (None, E // H)
            and H and E % H == 0 and spec.d_ff
            and (task != "mlm" or spec.mlm_bias == ("decoder" if electra else "bert"))
            and spec.embed_factorized == (electra and spec.embed_proj_dim is not None)):
        return None
    p = spec.dropout
    pa = _attention_dropout(spec)
    family = bert.Bert(V=spec.vocab_size, P=spec.max_positions, Ty=spec.token_types, E=E,
                       H=H, F=spec.d_ff, L=spec.n_layers, base=base, head=head,
                       positions_from_ids=from_ids, tied=spec.tie_embeddings,
                       hidden_dropout=p, attention_dropout=pa, task=task,
                       NL=max(spec.num_labels, 1), pooler=task == "base" and spec.pooler)
    if spec.embed_factorized and spec.embed_proj_dim:
        return bert.Factorized(**vars(family), Ee=spec.embed_proj_dim)
    return family


def _encoder_task(spec: ModelSpec, head: str) -> str:
    """The head a BERT-style spec trains, as the graph runs it ("": none it models): the
    masked-LM head; BertForSequenceClassification's pooler and linear classifier, or
    RobertaClassificationHead's dense ("dense" in ModelSpec.classifier); a linear
    classifier per token without a pooler (XForTokenClassification). Both with a biased
    classifier; ELECTRA's classification head (a GELU) is not modelled. (The spec does not
    read classifier_dropout: the graph takes hidden_dropout_prob, transformers' default.)"""
    if spec.mlm_head:
        return "mlm" if spec.classifier == "none" and not spec.pooler else ""
    if spec.classifier == "none":  # the base model (AutoModel), BERT's pooler or none
        return "base" if head != "electra" or not spec.pooler else ""
    if head == "electra" or not spec.classifier_bias or spec.num_labels < 2:
        return ""
    if spec.classifier == "linear":
        return "seq_cls" if spec.pooler and head == "bert" else \
            "" if spec.pooler else "token_cls"
    if spec.classifier == "dense" and head == "roberta" and not spec.pooler:
        return "seq_cls"
    return ""


def _gemma(spec: ModelSpec) -> gemma.Gemma | None:
    """Gemma's layouts from what the spec says (GemmaRMSNorm is norm_fp32's x̂ · (1 + w),
    the scaled embedding comes with the model types that have it): sandwich norms with a
    per-head q/k norm are Gemma 3 (whose attention ignores attn_logit_softcapping: a spec
    that sets it is refused), sandwich norms alone Gemma 2 (eager only, as soft-capped
    scores must be: a spec that says SDPA runs them is refused); two norms a layer with
    soft-capping are VaultGemma, without it Gemma (full attention only). Attention biases
    all or none, no MLP biases; layers full or sliding, as layer_attention says. A spec read
    from a config.json must be of the model type its layout says."""
    from transformer_calc.plan import layer_kinds_in_order

    v3 = spec.qk_norm == "head"
    vault = not spec.sandwich_norm and bool(spec.attn_softcapping or spec.logit_softcapping)
    variant = "gemma3_text" if v3 else "gemma2" if spec.sandwich_norm else \
        "vaultgemma" if vault else "gemma"
    if spec.model_type and spec.model_type != variant:
        return None
    if (spec.qk_norm not in ("none", "head") or (v3 and not spec.sandwich_norm)
            or (v3 and spec.attn_softcapping)
            or (spec.attn_softcapping and spec.sdpa_path)  # no SDPA with soft-capped scores
            or len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) != 1
            or spec.bias_ffn_in or spec.bias_ffn_out):
        return None
    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    if set(kinds) - {"F", "S"} or ("S" in kinds and not spec.sandwich_norm and not vault):
        return None
    pa = _attention_dropout(spec)
    return gemma.Gemma(V=spec.vocab_size, E=spec.d_model, H=spec.n_heads,
                       Hkv=spec.n_kv_heads or spec.n_heads, dh=spec.head_dim, F=spec.d_ff,
                       L=spec.n_layers, tied=spec.tie_embeddings, bias=spec.bias_q,
                       attention_dropout=pa, sandwich=spec.sandwich_norm,
                       ffn_norm="pre_feedforward_layernorm" if vault
                       else "post_attention_layernorm", qk_norm=v3, rope_per_kind=v3,
                       attn_softcap=spec.attn_softcapping, final_softcap=spec.logit_softcapping,
                       window=spec.sliding_window,
                       kinds=kinds if len(set(kinds)) > 1 else kinds[0])
def _moe(spec: ModelSpec) -> moe.Moe:
    """Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, PhiMoE, HunYuan-MoE, Mellum and FlexOlmo
    (spec_from_hf's fields for them): the Llama layout with a router whose top-k handling
    the spec names (router_topk), gate/up/down experts, at most one shared expert with its
    sigmoid gate (HunYuan's without), and dense layers where layer_ffn says D; FlexOlmo's
    layers OLMo2's (each sublayer's output normalised, then added; RMSNorm's weight and
    RoPE in fp32: norm_position post, norm_fp32, rope_fp32).
    Anything else (fused projections, a router bias or fp32 router, zero experts, several
    shared experts, a norm after the experts...) is refused."""
    from transformer_calc.plan import parse_pattern

    shared = spec.n_shared_experts
    # PhiMoE: nn.LayerNorm and its sparsemixer router; the rest RMSNorm. HunYuan (by its
    # model type: its router, an nn.Linear, renormalises and casts as Qwen's with
    # norm_topk_prob; its shared MLP has no gate; its q/k norms follow RoPE)
    phimoe = spec.router_topk == "sparsemixer"
    hunyuan = spec.model_type == "hunyuan_v1_moe"
    flex = spec.model_type == "flex_olmo"  # (models/flex_olmo/modeling_flex_olmo.py)
    norm = "layernorm" if phimoe else "rmsnorm"
    if not ((spec.router_topk != "none") != hunyuan and spec.norm == norm
            and spec.peft_router_linear == hunyuan and (spec.qk_norm == "head" or not hunyuan)
            and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and spec.qk_norm in ("none", "head", "width")
            and spec.norm_position == ("post" if flex else "pre") and not spec.fused_qkv
            and not spec.fused_gate_up and not spec.rope_concat and spec.norm_fp32 == flex
            and spec.rope_fp32 == flex and not spec.bias_ffn_in and not spec.bias_ffn_out
            and (shared == 0 or (shared == 1 and spec.shared_expert_gate != hunyuan
                                 and spec.shared_ff > 0))
            and not _unread(spec, "moe")):
        raise TcalcError(f"{spec.name}: no op graph for this mixture of experts yet (the "
                         "graph engine covers Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, PhiMoE, "
                         "HunYuan-MoE, Mellum and FlexOlmo)")
    kinds = parse_pattern(spec.layer_ffn, "DEX", spec.n_layers, "layer_ffn") \
        if spec.layer_ffn else ("E",) * spec.n_layers
    if "X" in kinds:
        raise TcalcError(f"{spec.name}: layers without an FFN have no op graph yet")
    H = spec.n_heads
    pa = _attention_dropout(spec)
    return moe.Moe(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                   dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                   bias_q=spec.bias_q, bias_k=spec.bias_k, bias_v=spec.bias_v,
                   bias_o=spec.bias_o, attention_dropout=pa,
                   qk_norm="rotated" if hunyuan else spec.qk_norm, post_norm=flex,
                   norm_fp32=flex, rope_fp32=flex, X=spec.n_experts, K=spec.top_k,
                   Fe=spec.expert_ff,
                   Fs=spec.shared_ff if shared else 1,
                   pattern="" if set(kinds) == {"E"} else "".join(kinds),
                   router="hunyuan" if hunyuan else {
                       "renorm": "mixtral", "sparsemixer": "sparsemixer"}.get(
                       spec.router_topk, "qwen"), layer_norm=phimoe,
                   norm_topk=spec.router_topk != "cast",
                   shared_expert=bool(shared) and not hunyuan,
                   shared_mlp=bool(shared) and hunyuan,
                   grouped=spec.experts_grouped)


def _llama_variant(spec: ModelSpec) -> Family | None:
    """A Llama variant's graph by its model type (graph/variants.py), from what _llama maps
    once the variant's own fields are set aside."""
    variant = variants.MAPPERS.get(spec.model_type)
    return variant(spec, _llama) if variant is not None else None


def _opt(spec: ModelSpec) -> opt.OPT | None:
    """OPTForCausalLM by its model type (spec_from_hf's _opt): LayerNorm, learned positions
    offset by 2, a ReLU MLP, the fp32 softmax, biases all on or all off, the final norm
    only in a pre-norm model; anything else keeps the rules."""
    biases = {spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
              spec.bias_ffn_out}
    pre = spec.norm_position == "pre"
    if not (spec.model_type == "opt" and spec.arch == "decoder" and spec.norm == "layernorm"
            and spec.position == "learned" and spec.position_offset == opt.POSITION_OFFSET
            and spec.ffn == "plain" and spec.activation == "relu" and spec.softmax_fp32
            and spec.norm_position in ("pre", "post") and (pre or not spec.final_norm)
            and len(biases) == 1 and spec.n_heads and spec.d_model % spec.n_heads == 0
            and spec.d_ff and not _unread(spec, "opt")):
        return None
    pa = spec.attention_dropout if spec.attention_dropout is not None else 0.0
    return opt.OPT(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model, H=spec.n_heads,
                   F=spec.d_ff, L=spec.n_layers, Ee=spec.embed_proj_dim or spec.d_model,
                   tied=spec.tie_embeddings, bias=spec.bias_q, pre_norm=pre,
                   final_norm=spec.final_norm, dropout=spec.dropout, attention_dropout=pa)


def _biogpt(spec: ModelSpec) -> opt.BioGpt | None:
    """BioGptForCausalLM by its model type (spec_from_hf's Layout): pre-norm LayerNorm
    layers with biases, learned positions offset by 2, an erf-GELU MLP, the scores' own
    softmax dtype, one dropout probability for the hidden states."""
    biases = {spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
              spec.bias_ffn_out}
    if not (spec.model_type == "biogpt" and spec.arch == "decoder"
            and spec.norm == "layernorm" and spec.norm_position == "pre" and spec.final_norm
            and spec.position == "learned" and spec.position_offset == opt.POSITION_OFFSET
            and spec.ffn == "plain" and spec.activation == "gelu" and not spec.softmax_fp32
            and biases == {True} and spec.n_kv_heads in (None, spec.n_heads)
            and spec.d_head in (None, spec.head_dim) and not spec.embed_proj_dim
            and spec.n_heads and spec.d_model % spec.n_heads == 0 and spec.d_ff
            and not _unread(spec, "biogpt")):
        return None
    pa = _attention_dropout(spec)
    return opt.BioGpt(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model,
                      H=spec.n_heads, F=spec.d_ff, L=spec.n_layers, Ee=spec.d_model,
                      tied=spec.tie_embeddings, dropout=spec.dropout, attention_dropout=pa)


def _xglm(spec: ModelSpec) -> opt.Xglm | None:
    """XGLMForCausalLM by its model type: BioGPT's layout with sinusoidal positions and its
    clamped eager scores (it has no SDPA path)."""
    if not (spec.model_type == "xglm" and spec.position == "sinusoidal"
            and spec.scores_clamped and not spec.sdpa_path):
        return None
    family = _biogpt(replace(spec, model_type="biogpt", position="learned",
                             position_offset=2, scores_clamped=False, sdpa_path=True))
    return opt.Xglm(**vars(family)) if family is not None else None


def _trocr(spec: ModelSpec) -> opt.TrOcr | None:
    """TrOCRForCausalLM by its model type (spec_from_hf's decoder-only Seq2Seq): learned
    positions offset by 2, layernorm_embedding, post-norm layers with biases, GELU, the
    loss in the logits' dtype, eager only; the cross-attention it builds is idle."""
    biases = {spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
              spec.bias_ffn_out}
    if not (spec.model_type == "trocr" and spec.arch == "decoder"
            and spec.norm == "layernorm" and spec.norm_position == "post"
            and not spec.final_norm and spec.embedding_norm and not spec.loss_fp32
            and spec.position == "learned" and spec.position_offset == opt.POSITION_OFFSET
            and spec.ffn == "plain" and spec.activation == "gelu" and not spec.softmax_fp32
            and not spec.sdpa_path and biases == {True}
            and spec.n_kv_heads in (None, spec.n_heads) and spec.d_head in (None, spec.head_dim)
            and spec.n_heads and spec.d_model % spec.n_heads == 0 and spec.d_ff
            and not _unread(spec, "trocr")):
        return None
    pa = _attention_dropout(spec)
    return opt.TrOcr(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model,
                     H=spec.n_heads, F=spec.d_ff, L=spec.n_layers, Ee=spec.d_model,
                     tied=spec.tie_embeddings, dropout=spec.dropout, attention_dropout=pa)


def _mla_family(spec: ModelSpec) -> mla.Mla | None:
    return _mla(spec) if spec.kv_lora_rank else None


def _mla(spec: ModelSpec) -> mla.Mla:
    """DeepSeek-V3 and MiniCPM3 (spec_from_hf's fields for them): MLA with or without a
    query latent, RMSNorm, RoPE on qk_rope_head_dim, gated SiLU MLPs; one attention_bias
    (q_a_proj, kv_a_proj_with_mqa, o_proj); DeepSeek-V3's experts from first_k_dense_replace
    on, with the fp32 sigmoid router renormalising its top-k (router_topk renorm:
    norm_topk_prob) and shared experts; DeepSeek-V3.2's and GLM-MoE-DSA's lightning indexer;
    LongCat-Flash's paired sublayers with its shortcut MoE. Other MLA types (DeepSeek-V2's
    complex RoPE, LongCat-Flash's zero experts...) are
    refused."""
    from transformer_calc.plan import parse_pattern

    H, dn, dr, dv = spec.n_heads, spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    minicpm = spec.model_type == "minicpm3"
    # DeepSeek-V3.2: a query latent always, an indexer in every layer (its RoPE's
    # concatenation is what rope_concat says of it)
    indexer = spec.index_heads > 0
    # LongCat-Flash: two sublayers a layer (n_layers counts them), the MoE beside the first
    # one's MLP and added after the second, no shared experts, no zero experts (identity
    # experts save by the routing)
    longcat = spec.model_type == "longcat_flash"
    # A.X K1: DeepSeek-V3's layers, a norm after each MoE block (moe_post_norm)
    axk1 = spec.model_type == "axk1"
    X = spec.n_experts
    Fs = spec.n_shared_experts * spec.shared_ff  # moe_intermediate_size · n_shared_experts
    if not (spec.model_type in _MLAS and spec.norm == "rmsnorm" and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and spec.norm_position == "pre" and spec.qk_norm == "none"
            and not spec.fused_qkv and not spec.fused_gate_up
            and spec.rope_concat == indexer
            and (spec.model_type in _DSAS if indexer else spec.model_type not in _DSAS[1:])
            and (not indexer or (spec.q_lora_rank > 0 and spec.index_head_dim >= 1))
            and not spec.norm_fp32 and not spec.rope_fp32 and not spec.bias_v
            and spec.bias_q == spec.bias_k == spec.bias_o
            and not spec.bias_ffn_in and not spec.bias_ffn_out
            and spec.n_kv_heads in (None, H) and spec.head_dim == dn + dr
            and min(dn, dr, dv, spec.d_ff) >= 1 and dr % 2 == 0
            and (not X or longcat or (not minicpm and spec.router_fp32
                                      and spec.router_topk == "renorm" and Fs > 0))
            and longcat == spec.moe_beside_dense == spec.moe_shortcut
            and (not longcat or (X and spec.router_fp32 and not spec.n_shared_experts
                                 and spec.q_lora_rank > 0 and spec.n_layers % 2 == 0
                                 and spec.layer_ffn == "1E 1D *"))
            and spec.peft_router_linear == longcat
            and spec.moe_post_norm == axk1 and (not axk1 or spec.q_lora_rank > 0)
            and not _unread(spec, "mla")):
        raise TcalcError(f"{spec.name}: no op graph for this latent-attention layout yet (the "
                         "graph engine covers DeepSeek-V3, V3.2, GLM-MoE-DSA, LongCat-Flash, "
                         "A.X K1, MiniCPM3 and Youtu)")
    L = spec.n_layers // 2 if longcat else spec.n_layers
    kinds = ("E",) * L if longcat else \
        parse_pattern(spec.layer_ffn, "DEX", L, "layer_ffn") if spec.layer_ffn \
        else ("E" if X else "D",) * L
    if "X" in kinds or ("E" in kinds and not X):
        raise TcalcError(f"{spec.name}: this layer pattern has no op graph yet")
    pa = _attention_dropout(spec)
    # (Llama's Hkv and dh: not read, 1)
    family = mla.Mla(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=1, dh=1, F=spec.d_ff, L=L,
                     tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                     bias_o=spec.bias_o, attention_dropout=pa,
                     q_latent=spec.q_lora_rank > 0, rq=max(spec.q_lora_rank, 1),
                     rkv=spec.kv_lora_rank, dn=dn, dr=dr, dv=dv,
                     interleave=not minicpm, minicpm=minicpm, indexer=indexer,
                     Hi=max(spec.index_heads, 1), di=max(spec.index_head_dim, 1),
                     longcat=longcat)
    if "E" not in kinds:
        return family
    return mla.MlaMoe(**vars(family), X=X, K=spec.top_k, Fe=spec.expert_ff, Fs=max(Fs, 1),
                      pattern="" if set(kinds) == {"E"} else "".join(kinds),
                      router="softmax" if longcat else "sigmoid", norm_topk=not longcat,
                      shared_expert=not longcat, grouped=spec.experts_grouped,
                      moe_norm=axk1)


def _t5_family(spec: ModelSpec) -> t5.T5 | None:
    """T5ForConditionalGeneration, MT5's and UMT5's layout (spec_from_hf's _t5): relative
    position buckets (in the first layer's self-attention, UMT5's in every layer's), T5's
    RMSNorm before each sublayer and after each stack, its dropouts, no biases, one token
    table for both stacks and the head, nn.CrossEntropyLoss in the logits' dtype. A spec
    without a model type (a preset) is T5, or UMT5 by its relative scope."""
    if spec.position != "relative" or spec.arch != "encoder-decoder":
        return None
    model_type = spec.model_type or ("umt5" if spec.relative_scope == "every" else "t5")
    if model_type not in _T5S:
        return None
    scope, scale = _T5S[model_type]
    H, dh = spec.n_heads, spec.head_dim
    if not (spec.relative_scope == scope and spec.norm == "rmsnorm"
            and spec.norm_position == "pre" and spec.final_norm and spec.t5_dropouts
            and spec.norm_keeps_input and not spec.loss_fp32 and spec.tie_embeddings
            and spec.tie_encoder_decoder and spec.ffn in ("plain", "gated")
            and spec.activation in t5.ACTIVATIONS and spec.n_kv_heads in (None, H)
            and not any((spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o,
                         spec.bias_ffn_in, spec.bias_ffn_out))
            and spec.attention_dropout in (None, spec.dropout)
            and bool(spec.encoder_local_block) == (model_type == "longt5")
            and spec.sdpa_path == (model_type != "longt5")  # LongT5: eager only
            and not _unread(spec, "t5")):
        return None
    return t5.T5(V=spec.vocab_size, E=spec.d_model, H=H, dh=dh, F=spec.d_ff,
                 Nb=spec.relative_buckets, Le=spec.n_encoder_layers, Ld=spec.n_decoder_layers,
                 gated=spec.ffn == "gated", act=spec.activation, scale_output=scale,
                 bias_every_layer=scope == "every", dropout=spec.dropout,
                 local_block=spec.encoder_local_block, global_block=spec.encoder_global_block)

def _switch(spec: ModelSpec) -> switch.Switch | None:
    """SwitchTransformersForConditionalGeneration by its model type (spec_from_hf's
    _switch_transformers: T5's mapping, one FFN pattern over both stacks): T5's layout (its
    relative buckets in the first layer, RMS norms, dropouts, no biases, one tied table) with
    a plain FFN, experts of d_ff behind the fp32 top-1 router; eager only."""
    from transformer_calc.plan import parse_pattern

    if spec.model_type != "switch_transformers":
        return None
    H, Le, Ld = spec.n_heads, spec.n_encoder_layers, spec.n_decoder_layers
    kinds = ["".join(parse_pattern(spec.layer_ffn, "DE", n, "layer_ffn")) if spec.layer_ffn
             else "D" * n for n in (Le, Ld)]
    sparse = any("E" in k for k in kinds)
    if not (spec.arch == "encoder-decoder" and spec.position == "relative"
            and spec.relative_scope == "first" and spec.norm == "rmsnorm"
            and spec.norm_position == "pre" and spec.final_norm and spec.t5_dropouts
            and spec.norm_keeps_input and not spec.loss_fp32 and spec.tie_embeddings
            and spec.tie_encoder_decoder and spec.ffn == "plain"
            and spec.activation in t5.ACTIVATIONS and spec.n_kv_heads in (None, H)
            and not _biased(spec) and spec.attention_dropout in (None, spec.dropout)
            and not spec.sdpa_path and Le >= 1 and Ld >= 1
            and (not sparse or (spec.n_experts >= 1 and spec.top_k == 1
                                and spec.router_fp32 and spec.peft_moe == "linear_experts"))
            and not _unread(spec, "switch")):
        raise TcalcError(f"{spec.name}: no op graph for this switch_transformers layout (the "
                         "graph engine covers SwitchTransformersForConditionalGeneration's "
                         "own layout)")
    return switch.Switch(V=spec.vocab_size, E=spec.d_model, H=H, dh=spec.head_dim,
                         F=spec.d_ff, Nb=spec.relative_buckets, Le=Le, Ld=Ld,
                         act=spec.activation, dropout=spec.dropout, X=max(spec.n_experts, 1),
                         kinds_e=kinds[0], kinds_d=kinds[1], router_bias=spec.router_bias,
                         jitter=spec.router_jitter)


def _bart_family(spec: ModelSpec) -> bart.Bart | None:
    """BART's layout (spec_from_hf's _seq2seq and _seq2seq_decoder for model_type bart, or
    a preset without a model type): learned positions with BART's offset of 2,
    layernorm_embedding, one token table for both stacks and the head; Marian's
    (MarianMTModel): sinusoidal positions, no embedding norm, the stacks' tables shared or
    not. Both: post-norm layers with biases everywhere, no final norms, the head tied,
    nn.CrossEntropyLoss in the logits' dtype. Other fairseq-style types (mBART's pre-norm,
    FSMT's own attention, ...) keep the rules."""
    causal = (spec.arch == "decoder" and spec.idle_cross_attention
              and spec.model_type in ("", "bart"))
    marian = spec.model_type == "marian"
    if spec.model_type not in ("", "bart", "marian") or not (
            spec.arch == "encoder-decoder" or causal):
        return None
    E, H = spec.d_model, spec.n_heads
    layout = ((spec.position, spec.position_offset, spec.embedding_norm) == (
        ("sinusoidal", 0, False) if marian else ("learned", 2, True))
        and (spec.tie_encoder_decoder or marian))
    if not (layout and spec.norm == "layernorm" and spec.norm_position == "post"
            and not spec.final_norm and not spec.loss_fp32
            and spec.ffn == "plain" and spec.activation in bart.ACTIVATIONS
            and all((spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                     spec.bias_ffn_out))
            and spec.tie_embeddings and spec.n_kv_heads in (None, H) and H and E % H == 0
            and spec.d_head in (None, E // H) and not _unread(spec, "bart")):
        return None
    pa = _attention_dropout(spec)
    return bart.Bart(V=spec.vocab_size, P=spec.max_positions, E=E, H=H, F=spec.d_ff,
                     Le=1 if causal else spec.n_encoder_layers,
                     Ld=spec.n_layers if causal else spec.n_decoder_layers, causal_lm=causal,
                     act=spec.activation, dropout=spec.dropout, attention_dropout=pa,
                     activation_dropout=spec.activation_dropout, sinusoidal=marian,
                     embedding_norm=not marian, shared_tables=spec.tie_encoder_decoder)


def _bart_kin_family(spec: ModelSpec) -> bart.Bart | None:
    """BART's kin by model type (spec_from_hf's _seq2seq, SEQ2SEQ; _BART_KIN says how
    each differs from BART): the encoder-decoder its *ForConditionalGeneration counts, one
    token table for both stacks and the tied head, biases everywhere (BigBird-Pegasus's
    attention: per use_bias), the norms, embedding norm and positions the model type has.
    Its decoder alone (*ForCausalLM) keeps the rules. M2M-100's layerdrop (0.05 by
    default) skips a layer at random in training: the graph runs every layer, the most a
    step holds. BigBird-Pegasus's encoder runs block-sparse attention from
    block_sparse_from tokens on, left to the rules (costs/activations.py)."""
    kin = _BART_KIN.get(spec.model_type)
    if kin is None:
        return None
    flags = {"pre_norm": False, "embedding_norm": True, "sinusoidal": False,
             "position_offset": 2, **kin}
    E, H = spec.d_model, spec.n_heads
    learned_offset = 0 if flags["sinusoidal"] else flags["position_offset"]
    layout = (spec.norm_position, spec.final_norm, spec.embedding_norm, spec.position,
              spec.position_offset) == (
        "pre" if flags["pre_norm"] else "post", flags["pre_norm"], flags["embedding_norm"],
        "sinusoidal" if flags["sinusoidal"] else "learned", learned_offset)
    if not (spec.arch == "encoder-decoder" and layout and spec.norm == "layernorm"
            and spec.tie_encoder_decoder and spec.tie_embeddings and not spec.loss_fp32
            and spec.ffn == "plain" and spec.activation in bart.ACTIVATIONS
            and spec.sdpa_path != bool(kin.get("bmm_attention") or kin.get("bigbird"))
            and (spec.bias_q or kin.get("bigbird")) and spec.bias_ffn_in and spec.bias_ffn_out
            and spec.bias_q == spec.bias_k == spec.bias_v == spec.bias_o
            and (spec.block_sparse_from == 0 or kin.get("bigbird"))
            and spec.n_kv_heads in (None, H) and H and E % H == 0
            and spec.d_head in (None, E // H) and not _unread(spec, "bart_kin")):
        return None
    return bart.Bart(V=spec.vocab_size, P=spec.max_positions, E=E, H=H, F=spec.d_ff,
                     Le=spec.n_encoder_layers, Ld=spec.n_decoder_layers,
                     act=spec.activation, dropout=spec.dropout,
                     attention_dropout=_attention_dropout(spec),
                     activation_dropout=spec.activation_dropout,
                     attention_bias=spec.bias_q, block_sparse_from=spec.block_sparse_from,
                     **kin)


def _fsmt_family(spec: ModelSpec) -> fsmt.Fsmt | None:
    """FSMT's layout (spec_from_hf's _fsmt): a token table per stack (the source and
    target vocabularies), trainable sinusoidal position tables of max_positions +
    pad_token_id + 1 rows, post-norm layers with biases, no embedding norm, the output
    projection tied to the decoder's table or not (peft adapts it either way), eager only."""
    if spec.model_type != "fsmt":
        return None
    E, H = spec.d_model, spec.n_heads
    if not (spec.arch == "encoder-decoder" and spec.position == "learned"
            and spec.position_offset >= 1 and spec.norm == "layernorm"
            and spec.norm_position == "post" and not spec.final_norm
            and not spec.embedding_norm and not spec.loss_fp32 and spec.ffn == "plain"
            and spec.activation in fsmt.ACTIVATIONS and spec.peft_head
            and spec.tie_embeddings == spec.tie_encoder_decoder
            and all((spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                     spec.bias_ffn_out))
            and spec.n_kv_heads in (None, H) and H and E % H == 0
            and spec.d_head in (None, E // H) and not _unread(spec, "fsmt")):
        return None
    pa = _attention_dropout(spec)
    return fsmt.Fsmt(V=spec.vocab_size, Vs=spec.encoder_vocab_size or spec.vocab_size,
                     P=spec.max_positions, E=E, H=H, F=spec.d_ff, Le=spec.n_encoder_layers,
                     Ld=spec.n_decoder_layers, offset=spec.position_offset,
                     act=spec.activation, tied=spec.tie_embeddings, dropout=spec.dropout,
                     attention_dropout=pa, activation_dropout=spec.activation_dropout)

def _t5gemma(spec: ModelSpec) -> t5gemma.T5Gemma | None:
    """T5GemmaForConditionalGeneration by its model type (spec_from_hf's _t5gemma: one width
    for both stacks, a token table each, the head tied to the decoder's or not): Gemma 2's
    sandwich-normed layers with soft-capped scores, full or sliding by layer_types (one
    pattern for both stacks), attention biases all or none, no MLP biases; eager only."""
    if spec.model_type != "t5gemma":
        return None
    from transformer_calc.plan import layer_kinds_in_order

    H, Hkv = spec.n_heads, spec.n_kv_heads or spec.n_heads
    Le, Ld = spec.n_encoder_layers, spec.n_decoder_layers
    ke = "".join(k[0] for k in layer_kinds_in_order(spec, Le))
    kd = "".join(k[0] for k in layer_kinds_in_order(spec, Ld))
    if not (spec.arch == "encoder-decoder" and spec.norm == "rmsnorm" and spec.norm_fp32
            and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation in ("gelu", "gelu_tanh") and spec.softmax_fp32
            and spec.sandwich_norm and spec.qk_norm == "none" and not spec.sdpa_path
            and not spec.tie_encoder_decoder and spec.ffn_dropout
            and len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) == 1
            and not spec.bias_ffn_in and not spec.bias_ffn_out
            and not set(ke + kd) - {"F", "S"} and H and H % Hkv == 0
            and spec.head_dim % 2 == 0 and not _unread(spec, "t5gemma")):
        return None
    pa = _attention_dropout(spec)
    return t5gemma.T5Gemma(V=spec.vocab_size, Ve=spec.encoder_vocab_size or spec.vocab_size,
                           E=spec.d_model, H=H, Hkv=Hkv, dh=spec.head_dim, F=spec.d_ff,
                           Le=Le, Ld=Ld, kinds_e=ke, kinds_d=kd, tied=spec.tie_embeddings,
                           bias=spec.bias_q, dropout=spec.dropout, attention_dropout=pa,
                           attn_softcap=spec.attn_softcapping,
                           final_softcap=spec.logit_softcapping)


def _whisper(spec: ModelSpec) -> whisper.Whisper | None:
    """WhisperForCausalLM by its model type (spec_from_hf's decoder-only Seq2Seq): learned
    positions without offset, pre-norm layers with a final norm, k_proj without a bias,
    the head tied, the loss in the logits' dtype; the cross-attention it builds is idle.
    WhisperForConditionalGeneration (its audio encoder: a tower) keeps the rules."""
    if spec.model_type != "whisper":
        return None
    E, H = spec.d_model, spec.n_heads
    if not (spec.arch == "decoder" and spec.idle_cross_attention and spec.norm == "layernorm"
            and spec.norm_position == "pre" and spec.final_norm and not spec.embedding_norm
            and not spec.loss_fp32 and spec.position == "learned"
            and spec.position_offset == 0 and spec.ffn == "plain"
            and spec.activation in whisper.ACTIVATIONS and spec.tie_embeddings
            and (spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
                 spec.bias_ffn_out) == (True, False, True, True, True, True)
            and spec.n_kv_heads in (None, H) and H and E % H == 0
            and spec.d_head in (None, E // H) and spec.d_ff
            and not _unread(spec, "whisper")):
        return None
    pa = _attention_dropout(spec)
    return whisper.Whisper(V=spec.vocab_size, P=spec.max_positions, E=E, H=H, F=spec.d_ff,
                           L=spec.n_layers, act=spec.activation, dropout=spec.dropout,
                           attention_dropout=pa, activation_dropout=spec.activation_dropout)


def _neox(spec: ModelSpec) -> neox.NeoX | None:
    """A GPT-NeoX, GPT-NeoX-Japanese, StableLM, Phi or Persimmon config (spec_from_hf's
    fields for them) as its model type's forward runs it: LayerNorms with biases, RoPE over
    the first int(d_head · rotary_fraction) dims, the model's own projections, biases, MLP
    and residual layout. Any other layout of these model types is refused."""
    mt = spec.model_type
    if mt not in neox.MODELS:
        return None
    H, E = spec.n_heads, spec.d_model
    Hkv = spec.n_kv_heads or H
    rot = int(spec.head_dim * spec.rotary_fraction)
    R = rot + rot % 2  # inv_freq = arange(0, rot, 2): cat((freqs, freqs)) is even
    biases = (spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
              spec.bias_ffn_out)
    layout = {  # (ffn, fused, qk_norm, parallel norms, biases as each model has them)
        "gpt_neox": ("plain", True, "none", 2, (spec.bias_q,) * 4 + (True, True)),
        "stablelm": ("gated", False, "none", 1, (spec.bias_q,) * 3 + (False,) * 3),
        "phi": ("plain", False, "none", 1, (True,) * 6),
        "persimmon": ("plain", True, "head", 1, (True,) * 6),
        "gpt_neox_japanese": ("plain", True, "none", 1, (False,) * 6)}[mt]
    japanese = mt == neox.JAPANESE  # its own eager attention: no SDPA, softmax as is
    acts = ("silu",) if mt == "stablelm" else ("gelu", "gelu_new", "relu2")
    # hidden_dropout for each use: the spec's dropout
    dropout_keys = mt in ("gpt_neox", neox.JAPANESE, "phi")
    if not (spec.norm == "layernorm" and spec.position == "rope" and spec.ffn == layout[0]
            and spec.fused_qkv == layout[1] and spec.qk_norm == layout[2]
            and (spec.parallel_norms == layout[3] or not spec.parallel_block)
            and biases == layout[4] and spec.activation in acts
            and spec.norm_position == "pre" and spec.rope_concat
            and spec.softmax_fp32 != japanese and spec.sdpa_path != japanese
            and spec.last_layer_o_bias == japanese and spec.lm_head_bias == (mt == "phi")
            and (mt in ("stablelm", "phi") or Hkv == H)
            and (mt not in ("persimmon", neox.JAPANESE) or not spec.parallel_block)
            and H and E % H == 0 and spec.d_head in (None, E // H) and H % Hkv == 0
            and 1 <= R <= spec.head_dim
            and (dropout_keys or not (spec.dropout or spec.attention_dropout))
            and not _unread(spec, "neox")):
        raise TcalcError(f"{spec.name}: no op graph for this {mt} layout yet")
    p = spec.dropout
    pa = _attention_dropout(spec)
    return neox.NeoX(V=spec.vocab_size, E=E, H=H, Hkv=Hkv, dh=spec.head_dim, F=spec.d_ff,
                     L=spec.n_layers, R=R, model=mt, tied=spec.tie_embeddings,
                     parallel=spec.parallel_block, bias_qkv=spec.bias_q, bias_o=spec.bias_o,
                     bias_mlp=spec.bias_ffn_in, act=spec.activation, hidden_dropout=p,
                     attention_dropout=pa,
                     embd_dropout=_embed_dropout(spec) if mt in ("gpt_neox", "phi") else 0.0,
                     lm_head_bias=spec.lm_head_bias)


def _gptj(spec: ModelSpec) -> gptj.GPTJ | None:
    """A GPT-J or CodeGen config (spec_from_hf's fields for them) as its class runs it: one
    LayerNorm before parallel attention and MLP, bias-free attention projections (CodeGen's
    fused, its heads a multiple of mp_num = 4), an MLP and LM head with biases, RoPE over
    the first rotary_dim dims (an even count). Any other layout of these types is refused."""
    mt = spec.model_type
    if mt not in gptj.MODELS:
        return None
    H, E = spec.n_heads, spec.d_model
    R = round(spec.head_dim * spec.rotary_fraction)  # rotary_dim / head_dim, read back
    if not (spec.norm == "layernorm" and spec.position == "rope" and spec.ffn == "plain"
            and spec.activation in ("gelu_new", "gelu") and spec.parallel_block
            and spec.parallel_norms == 1 and spec.norm_position == "pre"
            and spec.fused_qkv == (mt == "codegen") and spec.attn_fp32 and spec.rope_concat
            and not spec.sdpa_path and spec.lm_head_bias and not spec.softmax_fp32
            and not (spec.bias_q or spec.bias_k or spec.bias_v or spec.bias_o)
            and spec.bias_ffn_in and spec.bias_ffn_out
            and H and E % H == 0 and spec.n_kv_heads in (None, H)
            and spec.d_head in (None, E // H) and 2 <= R <= spec.head_dim and R % 2 == 0
            and (mt == "gptj" or H % gptj.MP_NUM == 0)
            and not _unread(spec, "gptj")):
        raise TcalcError(f"{spec.name}: no op graph for this {mt} layout yet")
    p = spec.dropout  # resid_pdrop
    pa = _attention_dropout(spec)
    return gptj.GPTJ(V=spec.vocab_size, E=E, H=H, F=spec.d_ff, L=spec.n_layers, R=R,
                     model=mt, tied=spec.tie_embeddings, act=spec.activation,
                     resid_pdrop=p, embd_pdrop=_embed_dropout(spec), attn_pdrop=pa)


def _falcon(spec: ModelSpec) -> falcon.Falcon | None:
    """A Falcon config (spec_from_hf's fields: K/V heads broadcast to every head in the new
    decoder architecture, which is parallel; the old layout's parallel_attn, and its
    multi_query as one K/V head) as FalconForCausalLM runs it, RoPE or ALiBi, biases all or
    none. The old layout with one head is refused (multi-query or not: the spec says
    neither)."""
    if spec.model_type != "falcon":
        return None
    H, E = spec.n_heads, spec.d_model
    Hkv = spec.n_kv_heads or H
    new = spec.kv_broadcast
    biases = {spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o, spec.bias_ffn_in,
              spec.bias_ffn_out}
    if not (spec.norm == "layernorm" and spec.position in ("rope", "alibi")
            and spec.ffn == "plain" and spec.activation == "gelu" and spec.fused_qkv
            and spec.explicit_mask and spec.norm_position == "pre" and len(biases) == 1
            and (spec.parallel_block or not new)
            and spec.parallel_norms in ((1, 2) if new else (1,))
            and (new or Hkv in (1, H)) and (new or H > 1) and H and E % H == 0
            and H % Hkv == 0
            and spec.d_head in (None, E // H) and not _unread(spec, "falcon")):
        raise TcalcError(f"{spec.name}: no op graph for this falcon layout yet")
    p = spec.dropout
    pa = _attention_dropout(spec)
    return falcon.Falcon(V=spec.vocab_size, E=E, H=H, Hkv=Hkv, F=spec.d_ff, L=spec.n_layers,
                         new=new, parallel=spec.parallel_block, norms=spec.parallel_norms,
                         alibi=spec.position == "alibi", bias=spec.bias_q,
                         tied=spec.tie_embeddings, hidden_dropout=p, attention_dropout=pa)



def _mamba_family(spec: ModelSpec) -> mamba.Mamba | mamba.Mamba2 | None:
    """MambaForCausalLM, FalconMambaForCausalLM and Mamba2ForCausalLM (model types mamba,
    falcon_mamba and mamba2: every layer a mixer, no FFN, RMSNorm), as transformers' torch
    path runs them; Falcon-Mamba's mixer normalises dt, B and C without weights (by its
    model type: the spec counts it as Mamba's)."""
    if spec.mixer == "none" or spec.model_type not in ("mamba", "mamba2", "falcon_mamba"):
        return None
    falcon = spec.model_type == "falcon_mamba"  # Mamba's layout, its dt, B, C normalised
    if not (spec.mixer == ("mamba" if falcon else spec.model_type) and spec.norm == "rmsnorm"
            and spec.position == "none" and not spec.d_ff and not spec.layer_attention
            and not spec.layer_ffn and not spec.ssm_dt_norms and spec.ssm_in_projs == 1
            and (spec.mixer == "mamba" or spec.ssm_norm)
            and not _unread(spec, "mamba")):
        raise TcalcError(f"{spec.name}: no op graph for this {spec.model_type} layout (the "
                         "graph engine covers MambaForCausalLM's, FalconMambaForCausalLM's "
                         "and Mamba2ForCausalLM's own layouts)")
    V, E, L, N, Kc = (spec.vocab_size, spec.d_model, spec.n_layers, spec.ssm_state,
                      spec.ssm_conv)
    flags = (spec.tie_embeddings, spec.ssm_conv_bias, spec.ssm_bias)
    if spec.mixer == "mamba":
        return mamba.Mamba(V, E, L, spec.ssm_inner, N, Kc, spec.ssm_dt_rank, *flags,
                           weightless_norms=falcon)
    H, G = spec.ssm_heads, spec.ssm_groups
    return mamba.Mamba2(V, E, L, G, H // G, spec.ssm_inner // H, N, Kc, spec.ssm_chunk,
                        *flags)


def _bamba_family(spec: ModelSpec) -> bamba.Bamba | None:
    """BambaForCausalLM (model type bamba): each layer attention or a Mamba-2 mixer as
    layer_attention says (F, M), then a gated SiLU MLP; attention biases all or none."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "bamba":
        return None
    kinds = layer_kinds_in_order(spec, spec.n_layers)
    # (BambaConfig's default, attn_layer_indices None, is every layer a mixer: the spec then
    # has no heads, and the graph builds no attention; 1 head of 2 stands in for its sizes)
    attention = any(k[0] == "F" for k in kinds)
    H = spec.n_heads if attention else 1
    Hkv = (spec.n_kv_heads or H) if attention else 1
    dh = spec.head_dim if attention else 2
    if not (spec.mixer == "mamba2" and spec.norm == "rmsnorm" and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and spec.rope_concat and spec.ssm_norm and not spec.dropout
            and {k[:2] for k in kinds} <= {"FD", "MD"} and H and Hkv and H % Hkv == 0
            and spec.ssm_heads and spec.ssm_groups and spec.ssm_heads % spec.ssm_groups == 0
            and spec.ssm_inner % spec.ssm_heads == 0
            and dh >= 2 and spec.bias_ffn_in == spec.bias_ffn_out
            and len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) == 1
            and not _unread(spec, "bamba")):
        raise TcalcError(f"{spec.name}: no op graph for this bamba layout (the graph "
                         "engine covers BambaForCausalLM's own layout)")
    Hs, Gs = spec.ssm_heads, spec.ssm_groups
    pa = _attention_dropout(spec)
    return bamba.Bamba(spec.vocab_size, spec.d_model, H, Hkv, dh, spec.d_ff,
                       spec.n_layers, Gs, Hs // Gs, spec.ssm_inner // Hs, spec.ssm_state,
                       spec.ssm_conv, spec.ssm_chunk, "".join(k[0] for k in kinds),
                       spec.tie_embeddings, spec.bias_q, spec.bias_ffn_in,
                       spec.ssm_conv_bias, spec.ssm_bias, pa)


# GraniteMoeHybrid: Bamba's mixer fields, the experts' and the shared MLP's (peft_moe and
# router_topk: spec_from_hf's for the class, read by the LoRA and the router checks)
_READS["granitemoehybrid"] = _READS["bamba"] | {
    "layer_ffn", "n_experts", "top_k", "d_ff_expert", "n_shared_experts", "d_ff_shared",
    "fused_gate_up", "router_topk", "peft_moe", "peft_router_linear"}


def _granitemoehybrid_family(spec: ModelSpec) -> granitemoehybrid.GraniteMoeHybrid | None:
    """GraniteMoeHybridForCausalLM (model type granitemoehybrid) in GraniteMoeHybridConfig's
    default layout: every layer the Mamba-2 mixer, then the experts (num_local_experts > 0)
    and the fused gated SiLU shared MLP; no biases but the convolution's and the mixer's
    projections'. Attention layers are refused: whether they rotate is
    position_embedding_type's, which the spec does not read."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "granitemoehybrid":
        return None
    kinds = layer_kinds_in_order(spec, spec.n_layers)
    if not (spec.mixer == "mamba2" and spec.norm == "rmsnorm" and spec.ffn == "gated"
            and spec.activation == "silu" and spec.ssm_norm and not spec.dropout
            and {k[:2] for k in kinds} == {"ME"} and spec.n_experts and spec.top_k
            and spec.n_shared_experts == 1 and spec.d_ff_shared == spec.d_ff
            and spec.d_ff_expert and spec.fused_gate_up and not _biased(spec)
            and spec.router_topk in ("none", "topk_softmax")
            and spec.ssm_heads and spec.ssm_groups and spec.ssm_heads % spec.ssm_groups == 0
            and spec.ssm_inner % spec.ssm_heads == 0
            and not _unread(spec, "granitemoehybrid")):
        raise TcalcError(f"{spec.name}: no op graph for this granitemoehybrid layout (the "
                         "graph engine covers GraniteMoeHybridConfig's default layout: every "
                         "layer a Mamba-2 mixer with experts and the shared MLP)")
    Hs, Gs = spec.ssm_heads, spec.ssm_groups
    # (no attention layer: 1 head of 2 stands in for its sizes, as for Bamba's mixers alone)
    return granitemoehybrid.GraniteMoeHybrid(
        spec.vocab_size, spec.d_model, 1, 1, 2, spec.d_ff, spec.n_layers, Gs, Hs // Gs,
        spec.ssm_inner // Hs, spec.ssm_state, spec.ssm_conv, spec.ssm_chunk,
        "M" * spec.n_layers, spec.tie_embeddings, conv_bias=spec.ssm_conv_bias,
        bias=spec.ssm_bias, X=spec.n_experts, K=spec.top_k, Fe=spec.d_ff_expert,
        grouped=spec.experts_grouped)


def _falcon_h1_family(spec: ModelSpec) -> falcon_h1.FalconH1 | None:
    """FalconH1ForCausalLM (model type falcon_h1): every layer the Mamba-2 mixer and
    attention in parallel (layer_attention P), a gated SiLU MLP; attention biases all or
    none. (FalconH1Config's mamba_norm_before_gate is not in the spec: its default, True.)"""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "falcon_h1":
        return None
    kinds = layer_kinds_in_order(spec, spec.n_layers)
    H = spec.n_heads
    Hkv = spec.n_kv_heads or H
    if not (spec.mixer == "mamba2" and spec.norm == "rmsnorm" and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.rope_concat and not spec.dropout
            and {k[:2] for k in kinds} == {"PD"} and H and Hkv and H % Hkv == 0
            and spec.ssm_heads and spec.ssm_groups and spec.ssm_heads % spec.ssm_groups == 0
            and spec.ssm_inner % spec.ssm_heads == 0
            and spec.bias_ffn_in == spec.bias_ffn_out
            and len({spec.bias_q, spec.bias_k, spec.bias_v, spec.bias_o}) == 1
            and not _unread(spec, "bamba")):
        raise TcalcError(f"{spec.name}: no op graph for this falcon_h1 layout (the graph "
                         "engine covers FalconH1ForCausalLM's own layout)")
    Hs, Gs = spec.ssm_heads, spec.ssm_groups
    pa = _attention_dropout(spec)
    return falcon_h1.FalconH1(spec.vocab_size, spec.d_model, H, Hkv, spec.head_dim,
                              spec.d_ff, spec.n_layers, Gs, Hs // Gs, spec.ssm_inner // Hs,
                              spec.ssm_state, spec.ssm_conv, spec.ssm_chunk,
                              spec.tie_embeddings, spec.bias_q, spec.bias_ffn_in,
                              spec.ssm_conv_bias, spec.ssm_bias, spec.ssm_norm, pa)


def _jamba_family(spec: ModelSpec) -> jamba.Jamba | None:
    """JambaForCausalLM (model type jamba): each layer attention without positions or a
    Mamba mixer with dt/B/C norms (layer_attention F, M), then a gated SiLU MLP or experts
    of the same width (layer_ffn D, E) behind a top-k router that is not renormalised."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "jamba":
        return None
    kinds = [jamba.KINDS.get((k[0], k[1])) for k in layer_kinds_in_order(spec, spec.n_layers)]
    H = spec.n_heads
    Hkv = spec.n_kv_heads or H
    if not (spec.mixer == "mamba" and spec.ssm_dt_norms and spec.norm == "rmsnorm"
            and spec.position == "none" and spec.ffn == "gated" and spec.activation == "silu"
            and spec.softmax_fp32 and not spec.dropout and None not in kinds
            and H and Hkv and H % Hkv == 0 and spec.router_topk == "none"
            and (not spec.n_experts or spec.expert_ff == spec.d_ff)
            and not _biased(spec)
            and not _unread(spec, "jamba")):
        raise TcalcError(f"{spec.name}: no op graph for this jamba layout (the graph engine "
                         "covers JambaForCausalLM's own layout)")
    pa = _attention_dropout(spec)
    return jamba.Jamba(spec.vocab_size, spec.d_model, H, Hkv, spec.head_dim, spec.d_ff,
                       spec.n_layers, spec.ssm_inner, spec.ssm_state, spec.ssm_conv,
                       spec.ssm_dt_rank, max(spec.n_experts, 1), max(spec.top_k, 1),
                       "".join(k for k in kinds if k), spec.tie_embeddings,
                       spec.ssm_conv_bias, spec.ssm_bias, pa, spec.experts_grouped)


def _olmo_hybrid_family(spec: ModelSpec) -> olmo_hybrid.OlmoHybrid | None:
    """OlmoHybridForCausalLM (model type olmo_hybrid) as transformers' torch path runs it:
    each layer OLMo 3's attention (RoPE in fp32, or NoPE) or the Gated DeltaNet
    (layer_attention F, M), then the gated SiLU MLP, no biases."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "olmo_hybrid":
        return None
    kinds = layer_kinds_in_order(spec, spec.n_layers)
    H = spec.n_heads
    Hkv = spec.n_kv_heads or H
    Hv, Hk = spec.ssm_heads, spec.ssm_groups
    if not (spec.mixer == "gated_deltanet" and spec.norm == "rmsnorm" and spec.norm_fp32
            and spec.norm_position == "post" and spec.qk_norm == "width"
            and spec.position in ("rope", "none") and spec.rope_fp32
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and not spec.attention_dropout
            and {k[:2] for k in kinds} <= {"FD", "MD"} and H and Hkv and H % Hkv == 0
            and spec.head_dim >= 2 and spec.head_dim % 2 == 0
            and Hv and Hk and Hv % Hk == 0 and spec.ssm_inner % Hv == 0
            and spec.ssm_chunk == olmo_hybrid.CHUNK and spec.ssm_in_projs == 6
            and not spec.ssm_conv_bias and not spec.fused_qkv and not spec.fused_gate_up
            and not _biased(spec)
            and not _unread(spec, "olmo_hybrid")):
        raise TcalcError(f"{spec.name}: no op graph for this olmo_hybrid layout (the graph "
                         "engine covers OlmoHybridForCausalLM's own layout)")
    return olmo_hybrid.OlmoHybrid(
        spec.vocab_size, spec.d_model, H, Hkv, spec.head_dim, spec.d_ff, spec.n_layers, Hk,
        Hv, spec.ssm_state, spec.ssm_inner // Hv, spec.ssm_conv,
        "".join(k[0] for k in kinds), spec.tie_embeddings, spec.position == "rope")


def _kimi_linear_family(spec: ModelSpec) -> kimi_linear.KimiLinear | None:
    """KimiLinearForCausalLM (model type kimi_linear) as transformers' torch path runs it:
    each layer latent attention without positions or Kimi Delta Attention (layer_attention
    F, M), then a dense MLP or DeepSeek-V3's experts (layer_ffn D, E) with the fp32 sigmoid
    router renormalising its top-k and the shared experts."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "kimi_linear":
        return None
    kinds = [kimi_linear.KINDS.get((k[0], k[1]))
             for k in layer_kinds_in_order(spec, spec.n_layers)]
    H, dn, dr, dv = spec.n_heads, spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    X = spec.n_experts
    Fs = spec.n_shared_experts * spec.shared_ff
    Hl = spec.ssm_heads
    if not (spec.mixer == "kda" and spec.norm == "rmsnorm" and spec.position == "none"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and not spec.attention_dropout
            and spec.norm_position == "pre" and None not in kinds
            and not spec.q_lora_rank and spec.kv_lora_rank
            and spec.n_kv_heads in (None, 0, H) and H and min(dn, dr, dv, spec.d_ff) >= 1
            and Hl and spec.ssm_groups == Hl and spec.ssm_inner == Hl * spec.ssm_state
            and spec.ssm_chunk == kimi_linear.CHUNK and spec.ssm_in_projs == 3
            and not spec.ssm_conv_bias and not spec.ssm_bias and spec.ssm_norm
            and (not X or (spec.router_fp32 and spec.router_topk == "renorm" and Fs > 0))
            and not (spec.bias_q or spec.bias_v or spec.bias_ffn_in or spec.bias_ffn_out)
            and spec.bias_k == spec.bias_o
            and not _unread(spec, "kimi_linear")):
        raise TcalcError(f"{spec.name}: no op graph for this kimi_linear layout (the graph "
                         "engine covers KimiLinearForCausalLM's own layout)")
    layers = "".join(k for k in kinds if k)
    if X == 0 and set(layers) & {"b", "d"}:
        raise TcalcError(f"{spec.name}: experts in layer_ffn but no n_experts")
    return kimi_linear.KimiLinear(
        V=spec.vocab_size, E=spec.d_model, H=H, Hkv=1, dh=1, F=spec.d_ff, L=spec.n_layers,
        tied=spec.tie_embeddings, bias_k=spec.bias_k, bias_o=spec.bias_o, q_latent=False,
        rkv=spec.kv_lora_rank, dn=dn, dr=dr, dv=dv, X=max(X, 1), K=max(spec.top_k, 1),
        Fe=max(spec.expert_ff, 1), Fs=max(Fs, 1), router="sigmoid", norm_topk=True,
        shared_expert=True, grouped=spec.experts_grouped, Hl=Hl, dl=spec.ssm_state,
        Kc=spec.ssm_conv, layers=layers)
def _qwen3_next_family(spec: ModelSpec) -> qwen3_next.Qwen3Next | None:
    """Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM (model types
    qwen3_next, qwen3_5_text, qwen3_5_moe_text): each layer gated attention or a Gated
    DeltaNet (layer_attention F, M), then the gated SiLU MLP or Qwen-style experts with a
    gated shared expert (layer_ffn D, E); no biases."""
    from transformer_calc.plan import layer_kinds_in_order

    types = {"qwen3_next": 2, "qwen3_5_text": 4, "qwen3_5_moe_text": 4}
    if spec.model_type not in types:
        return None
    L = spec.n_layers
    kinds = [qwen3_next.KINDS.get((k[0], k[1])) for k in layer_kinds_in_order(spec, L)]
    H, dh = spec.n_heads, spec.head_dim
    Hkv = spec.n_kv_heads or H
    rotated = int(dh * spec.rotary_fraction)  # Qwen3NextRotaryEmbedding's inv_freq width
    Dr = 2 * -(-rotated // 2)
    Hv, Hk = spec.ssm_heads, spec.ssm_groups
    deltanet = any(k in ("c", "d") for k in kinds)
    experts = any(k in ("b", "d") for k in kinds)
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "silu" and spec.softmax_fp32 and spec.rope_concat
            and spec.norm_fp32 and spec.qk_norm == "head" and spec.attn_gate == "width"
            and spec.attn_gate_in_q and not spec.dropout and None not in kinds
            and (not deltanet or (spec.mixer == "gated_deltanet"
                                  and spec.ssm_in_projs == types[spec.model_type]
                                  and Hk and Hv % Hk == 0 and spec.ssm_inner % Hv == 0
                                  and spec.ssm_chunk == 64 and not spec.ssm_conv_bias))
            and (H == 0 or (Hkv and H % Hkv == 0 and 0 < Dr < dh))
            and (not experts or (spec.router_topk in ("renorm_cast", "cast")
                                 and spec.n_shared_experts == 1
                                 and spec.shared_expert_gate and spec.shared_ff > 0))
            and not _biased(spec)
            and not _unread(spec, "qwen3_next")):
        raise TcalcError(f"{spec.name}: no op graph for this {spec.model_type} layout (the "
                         "graph engine covers the layouts transformers' own classes build)")
    pa = _attention_dropout(spec)
    return qwen3_next.Qwen3Next(
        V=spec.vocab_size, E=spec.d_model, H=max(H, 1), Hkv=max(Hkv, 1), dh=max(dh, 1),
        F=spec.d_ff, L=L, tied=spec.tie_embeddings, attention_dropout=pa,
        X=max(spec.n_experts, 1), K=max(spec.top_k, 1), Fe=max(spec.expert_ff, 1),
        Fs=max(spec.shared_ff, 1), router="qwen", norm_topk=spec.router_topk != "cast",
        shared_expert=True,
        grouped=spec.experts_grouped, Hk=max(Hk, 1), Hr=max(Hv // max(Hk, 1), 1),
        Dk=max(spec.ssm_state, 1), Dv=max(spec.ssm_inner // max(Hv, 1), 1),
        Kc=max(spec.ssm_conv, 1), Q=spec.ssm_chunk or 64, Dr=max(Dr, 1),
        kinds="".join(k for k in kinds if k), split_proj=types[spec.model_type] == 4,
        batch_rope=spec.model_type != "qwen3_next")
def _nemotron_h_family(spec: ModelSpec) -> nemotron_h.NemotronH | None:
    """NemotronHForCausalLM (model type nemotron_h): each layer one block whose mixer is the
    Mamba-2 mixer, attention without positions, a squared-ReLU MLP or the experts (ungated,
    behind DeepSeek-V3's fp32 sigmoid router with norm_topk_prob, one shared MLP), as
    layer_attention and layer_ffn say (MX, FX, XD, XE); no biases outside the mixer."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "nemotron_h":
        return None
    pairs = {"MX": "M", "FX": "F", "XD": "D", "XE": "E"}
    kinds = [pairs.get(k[:2]) for k in layer_kinds_in_order(spec, spec.n_layers)]
    H = spec.n_heads
    Hkv = spec.n_kv_heads or H
    moe = "E" in kinds
    if not (spec.mixer == "mamba2" and spec.norm == "rmsnorm" and spec.norm_fp32
            and spec.position == "none" and spec.ffn == "plain" and spec.activation == "relu2"
            and spec.softmax_fp32 and spec.ssm_norm and not spec.dropout and None not in kinds
            and not spec.rope_concat and H and Hkv and H % Hkv == 0 and spec.head_dim >= 1
            and spec.ssm_heads and spec.ssm_groups and spec.ssm_heads % spec.ssm_groups == 0
            and spec.ssm_inner % spec.ssm_heads == 0
            and (not moe or (spec.router_fp32 and spec.router_topk == "renorm"
                             and spec.n_shared_experts == 1 and spec.expert_ff >= 1
                             and spec.shared_ff >= 1 and spec.top_k >= 1))
            and not _biased(spec)
            and not _unread(spec, "nemotron_h")):
        raise TcalcError(f"{spec.name}: no op graph for this nemotron_h layout (the graph "
                         "engine covers NemotronHForCausalLM's own layout)")
    Hs, Gs = spec.ssm_heads, spec.ssm_groups
    pa = _attention_dropout(spec)
    return nemotron_h.NemotronH(
        spec.vocab_size, spec.d_model, H, Hkv, spec.head_dim, max(spec.d_ff, 1),
        spec.n_layers, Gs, Hs // Gs, spec.ssm_inner // Hs, spec.ssm_state, spec.ssm_conv,
        spec.ssm_chunk, max(spec.n_experts, 1), max(spec.top_k, 1), max(spec.expert_ff, 1),
        max(spec.shared_ff, 1), "".join(k for k in kinds if k), spec.tie_embeddings,
        spec.ssm_conv_bias, spec.ssm_bias, pa, grouped=spec.experts_grouped)


def _mimo_v2_flash_family(spec: ModelSpec) -> mimo_v2_flash.MiMoV2Flash | None:
    """MiMoV2FlashForCausalLM (model type mimo_v2_flash), eager attention only: full layers
    of global_kv_heads K/V heads, sliding ones of twice as many (n_kv_heads) with sinks; Q/K
    heads of d_head, V heads of v_head_dim; RoPE over int(d_head · rotary_fraction) of each
    head; a dense gated SiLU MLP or experts behind DeepSeek-V3's fp32 sigmoid router that
    renormalises (norm_topk_prob), no shared experts; q/k/v biases all or none."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "mimo_v2_flash":
        return None
    kinds = [mimo_v2_flash.KINDS.get((k[0], k[1]))
             for k in layer_kinds_in_order(spec, spec.n_layers)]
    H = spec.n_heads
    sliding = any(k in ("c", "d") for k in kinds)
    Hkv = spec.global_kv_heads or 0 if sliding else spec.n_kv_heads or H
    dh = spec.head_dim
    dv = spec.v_head_dim or dh
    Dr = int(dh * spec.rotary_fraction)
    moe = any(k in ("b", "d") for k in kinds)
    if not (spec.norm == "rmsnorm" and spec.position == "rope" and spec.ffn == "gated"
            and spec.activation == "silu" and spec.rope_concat and not spec.sdpa_path
            and spec.norm_position == "pre" and not spec.dropout and None not in kinds
            and not (spec.softmax_fp32 or spec.fused_qkv or spec.fused_gate_up
                     or spec.norm_fp32 or spec.rope_fp32) and spec.qk_norm == "none"
            and spec.attention_sinks == sliding and spec.sinks_sliding_only == sliding
            and spec.softmax_sink_column and spec.softmax_row_max
            and Hkv >= 1 and (spec.n_kv_heads or H) == (2 * Hkv if sliding else Hkv)
            and H % (2 * Hkv if sliding else Hkv) == 0 and dh >= 1
            and spec.rotary_fraction < 1 and 2 <= Dr <= dh and Dr % 2 == 0
            and spec.bias_q == spec.bias_k == spec.bias_v and not spec.bias_o
            and not spec.bias_ffn_in and not spec.bias_ffn_out
            and (not moe or (spec.router_fp32 and spec.router_topk == "renorm"
                             and spec.expert_ff >= 1 and spec.top_k >= 1
                             and not spec.n_shared_experts))
            and not _unread(spec, "mimo_v2_flash")):
        raise TcalcError(f"{spec.name}: no op graph for this mimo_v2_flash layout (the graph "
                         "engine covers MiMoV2FlashForCausalLM's own layout, eager attention)")
    pa = _attention_dropout(spec)
    return mimo_v2_flash.MiMoV2Flash(
        spec.vocab_size, spec.d_model, H, Hkv, dh, dv, max(spec.d_ff, 1), spec.n_layers, Dr,
        max(spec.n_experts, 1), max(spec.top_k, 1), max(spec.expert_ff, 1),
        "".join(k for k in kinds if k), spec.tie_embeddings, spec.bias_q, pa,
        grouped=spec.experts_grouped)


def _minimax_m3_family(spec: ModelSpec) -> minimax_m3.MiniMaxM3 | None:
    """MiniMaxM3VLForCausalLM (model type minimax_m3_vl_text): full attention layers (the
    Lightning Indexer's sparse layers are refused by spec_from_hf) with Gemma-style RMSNorms
    over each head of Q and K, RoPE over int(head_dim · rotary_fraction) of each head; the
    clamped SwiGLU in every MLP (activation swiglu_oss, fused gate_up_proj); a dense MLP or
    the experts behind a sigmoid router with one shared MLP, as layer_ffn says; no
    biases."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "minimax_m3_vl_text":
        return None
    kinds = [k[1] for k in layer_kinds_in_order(spec, spec.n_layers)]
    H = spec.n_heads
    Hkv = spec.n_kv_heads or H
    dh = spec.head_dim
    Dr = int(dh * spec.rotary_fraction)
    if not (spec.norm == "rmsnorm" and spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "swiglu_oss"
            and spec.fused_gate_up and spec.qk_norm == "head" and spec.rope_concat
            and spec.softmax_fp32 and spec.norm_position == "pre" and not spec.dropout
            and not (spec.fused_qkv or spec.rope_fp32) and set(kinds) <= {"D", "E"}
            and H and Hkv and H % Hkv == 0 and dh >= 2 and 2 <= Dr <= dh and Dr % 2 == 0
            and spec.d_ff >= 1
            and ("E" not in kinds or (spec.n_shared_experts == 1 and spec.shared_ff >= 1
                                      and spec.expert_ff >= 1 and spec.top_k >= 1))
            and not _biased(spec)
            and not _unread(spec, "minimax_m3")):
        raise TcalcError(f"{spec.name}: no op graph for this minimax_m3_vl_text layout (the "
                         "graph engine covers MiniMaxM3VLForCausalLM's full-attention layers)")
    pa = _attention_dropout(spec)
    return minimax_m3.MiniMaxM3(
        spec.vocab_size, spec.d_model, H, Hkv, dh, spec.d_ff, spec.n_layers, Dr,
        max(spec.n_experts, 1), max(spec.top_k, 1), max(spec.expert_ff, 1),
        max(spec.shared_ff, 1), "".join(kinds), spec.tie_embeddings, pa)

# LFM2 (Lfm2ForCausalLM): Llama's attention fields with q/k norms over each head, the short
# convolution's kernel and bias, the layers' kinds
_READS["lfm2"] = _METADATA | _COMMON | {
    "n_kv_heads", "d_head", "softmax_fp32", "qk_norm", "layer_attention", "mixer", "ssm_conv",
    "ssm_conv_bias", "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out"}
# LFM2-MoE: LFM2's fields, the layers' FFN kinds, the experts' sizes
_READS["lfm2_moe"] = _READS["lfm2"] | {"layer_ffn", "n_experts", "top_k", "d_ff_expert"}
# LFM3: LFM2's fields, its sandwich norms, attention gate, fp32 RoPE and sliding layers
_READS["lfm3"] = _READS["lfm2"] | {"sandwich_norm", "attn_gate", "rope_fp32", "sliding_window"}


def _lfm2_family(spec: ModelSpec) -> lfm2.Lfm2 | None:
    """Lfm2ForCausalLM, Lfm2MoeForCausalLM and Lfm3ForCausalLM (model types lfm2, lfm2_moe,
    lfm3): each layer the gated short convolution or attention (layer_attention M, F; LFM3
    also S, sliding), then the MLP or (lfm2_moe, layer_ffn E) the experts behind the sigmoid
    router with its expert bias; no biases but the convolution's (conv_bias: the
    convolution, in_proj and out_proj); even head dims (rotate_half). LFM3: its sandwich
    norms, per-head attention gate and fp32 RoPE, as Lfm3Config's defaults have them."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type not in ("lfm2", "lfm2_moe", "lfm3"):
        return None
    moe, lfm3 = spec.model_type == "lfm2_moe", spec.model_type == "lfm3"
    kinds = [lfm2.KINDS.get((k[0], k[1:2])) for k in layer_kinds_in_order(spec, spec.n_layers)]
    H = spec.n_heads
    Hkv = spec.n_kv_heads or H
    dh = spec.head_dim if H else 2
    # (Lfm2Config's default, full_attn_idxs None, is every layer attention: the spec then
    # has no mixer, and the graph builds no convolution)
    convs = any(k and lfm2.OPERATOR[k] == "M" for k in kinds)
    if not (spec.mixer == ("short_conv" if convs else "none") and spec.norm == "rmsnorm"
            and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and spec.qk_norm == "head" and not spec.dropout and not spec.attention_dropout
            and None not in kinds and (not H or (Hkv and H % Hkv == 0 and dh % 2 == 0))
            and (moe or not any(k and k in "bd" for k in kinds))
            and (lfm3 or "s" not in kinds)
            and (spec.sandwich_norm, spec.attn_gate, spec.rope_fp32) == (
                (True, "head", True) if lfm3 else (False, "none", False))
            and (not lfm3 or "s" not in kinds or spec.sliding_window > 0)
            and not _biased(spec)
            and not _unread(spec, spec.model_type)):
        raise TcalcError(f"{spec.name}: no op graph for this {spec.model_type} layout (the "
                         "graph engine covers Lfm2ForCausalLM's and Lfm2MoeForCausalLM's "
                         "own layouts)")
    # (a model of convolutions alone still builds its attention's sizes: Lfm2Config's
    # defaults stand in where the spec has no heads)
    args = (spec.vocab_size, spec.d_model, H or 1, Hkv or 1, dh, spec.d_ff or 1,
            spec.n_layers, spec.ssm_conv if convs else 1, "".join(k for k in kinds if k),
            spec.tie_embeddings, spec.ssm_conv_bias)
    if moe:
        return lfm2.Lfm2Moe(*args, X=max(spec.n_experts, 1), K=max(spec.top_k, 1),
                            Fe=spec.expert_ff or 1, grouped=spec.experts_grouped)
    return lfm2.Lfm2(*args, lfm3=lfm3, window=spec.sliding_window if lfm3 else 0)



# MiniMax (MiniMaxForCausalLM): Llama's attention fields, the lightning layers' heads and
# blocks, the experts and peft's conversion of them (the cache's state dtype changes no
# training tensor)
_READS["minimax"] = _METADATA | _COMMON | {
    "n_kv_heads", "d_head", "softmax_fp32", "layer_attention", "mixer", "ssm_inner",
    "ssm_heads", "ssm_chunk", "ssm_state_dtype", "n_experts", "top_k", "d_ff_expert",
    "peft_moe", "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out"}


def _minimax_family(spec: ModelSpec) -> minimax.Minimax | None:
    """MiniMaxForCausalLM (model type minimax): each layer attention or lightning attention
    (layer_attention F, M) of the same heads and head_dim, then the experts behind
    Mixtral's router; no biases; even head dims (rotate_half)."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "minimax":
        return None
    kinds = layer_kinds_in_order(spec, spec.n_layers)
    H = spec.n_heads or spec.ssm_heads
    Hkv = spec.n_kv_heads or H
    dh = spec.ssm_inner // H if H else 0
    if not (spec.mixer == "lightning" and spec.norm == "rmsnorm" and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.softmax_fp32
            and not spec.dropout and not spec.attention_dropout
            and {k[:2] for k in kinds} <= {"FE", "ME"} and H and Hkv and H % Hkv == 0
            and spec.ssm_heads == H and spec.ssm_inner == H * dh and dh % 2 == 0
            and (not spec.n_heads or spec.head_dim == dh) and spec.ssm_chunk >= 1
            and spec.n_experts >= 1 and spec.top_k >= 1 and spec.router_topk == "none"
            and not _biased(spec)
            and not _unread(spec, "minimax")):
        raise TcalcError(f"{spec.name}: no op graph for this minimax layout (the graph "
                         "engine covers MiniMaxForCausalLM's own layout)")
    return minimax.Minimax(spec.vocab_size, spec.d_model, H, Hkv, dh, spec.n_layers,
                           spec.n_experts, spec.top_k, spec.expert_ff, spec.ssm_chunk,
                           "".join(k[0] for k in kinds), spec.tie_embeddings,
                           spec.experts_grouped)


# DeepSeek-V4 (DeepseekV4ForCausalLM): its attention's ranks, groups and compressors, the
# hyper-connections' streams, the experts and the shared one, the rotated fraction
_READS["deepseek_v4"] = _METADATA | _COMMON | {
    "n_kv_heads", "d_head", "q_lora_rank", "attention_sinks", "sliding_window",
    "layer_attention", "n_experts", "top_k", "d_ff_expert", "n_shared_experts", "hc_streams",
    "compress_csa", "compress_hca", "csa_index_heads", "csa_index_dim", "csa_index_topk",
    "o_groups", "o_lora_rank", "swiglu_clamp", "hc_sinkhorn_iters", "norm_fp32",
    "softmax_sink_column", "softmax_row_max", "sdpa_path", "rotary_fraction", "norm_position",
    "bias_q", "bias_k", "bias_v", "bias_o", "bias_ffn_in", "bias_ffn_out"}


def _deepseek_v4_family(spec: ModelSpec) -> deepseek_v4.DeepseekV4 | None:
    """DeepseekV4ForCausalLM (model type deepseek_v4), eager attention only: one K=V head
    over a sliding window with sinks, low-rank Q, the grouped low-rank output, compressed
    entries on its Q and H layers, hc_streams residual streams, experts behind the
    sqrt-softplus router with one shared expert, the clamped SwiGLU; no biases."""
    from transformer_calc.plan import layer_kinds_in_order

    if spec.model_type != "deepseek_v4":
        return None
    kinds = [k[0] for k in layer_kinds_in_order(spec, spec.n_layers)]
    H, dh, g = spec.n_heads, spec.head_dim, spec.o_groups
    dim = int(dh * spec.rotary_fraction)  # the rotated width: inv_freq's pairs, doubled
    Dr = 2 * ((dim + 1) // 2)
    if not (spec.norm == "rmsnorm" and spec.norm_fp32 and spec.position == "rope"
            and spec.ffn == "gated" and spec.activation == "silu" and spec.swiglu_clamp
            and spec.norm_position == "pre" and not spec.dropout and not spec.sdpa_path
            and spec.attention_sinks and spec.softmax_sink_column and spec.softmax_row_max
            and spec.n_kv_heads == 1 and H >= 1 and dh >= 2 and 2 <= Dr <= dh
            and g >= 1 and (H * dh) % g == 0 and spec.o_lora_rank >= 1
            and spec.q_lora_rank >= 1 and spec.hc_streams >= 1 and spec.hc_sinkhorn_iters >= 1
            and set(kinds) <= {"S", "Q", "H"} and len(kinds) == spec.n_layers
            and spec.n_experts >= 1 and spec.top_k >= 1 and spec.expert_ff >= 1
            and spec.n_shared_experts == 1 and spec.compress_csa >= 1
            and spec.compress_hca >= 1
            and ("Q" not in kinds or (spec.csa_index_heads >= 1 and spec.csa_index_dim >= 2))
            and not _biased(spec)
            and not _unread(spec, "deepseek_v4")):
        raise TcalcError(f"{spec.name}: no op graph for this deepseek_v4 layout (the graph "
                         "engine covers DeepseekV4ForCausalLM's own layout, eager attention)")
    pa = _attention_dropout(spec)
    return deepseek_v4.DeepseekV4(
        spec.vocab_size, spec.d_model, H, dh, spec.q_lora_rank, g, spec.o_lora_rank, Dr,
        spec.hc_streams, spec.n_experts, spec.top_k, spec.expert_ff, spec.compress_csa,
        spec.compress_hca, max(spec.csa_index_heads, 1), max(spec.csa_index_dim, 2),
        "".join(kinds), spec.hc_sinkhorn_iters, spec.tie_embeddings, pa,
        grouped=spec.experts_grouped)


# the mappers family_of asks, in order (a MoE spec is the experts' family, not Llama's; an
# MLA spec, with experts or not, the MLA family's, Jamba's the hybrid's; the NeoX-style model
# types before the layouts that would otherwise claim them)
_MAPPERS: tuple[Callable[[ModelSpec], Family | None], ...] = (
    _neox, _gptj, _falcon, _gptlike, _ctrl, _gpt_neo, _mpt, _bloom, _granite_swa, _gpt2, _opt,
    _biogpt, _xglm, _trocr, _whisper, _t5gemma, _switch,
    _gemma4_family, _gemma3n_family, _kimi_linear_family, _deepseek_v4_family, _mla_family,
    _qwen3_next_family,
    _jamba_family, _olmo_hybrid_family, _nemotron_h_family, _mimo_v2_flash_family,
    _minimax_m3_family, _lfm2_family, _minimax_family, _granitemoehybrid_family,
    _moe_family, _mamba_family,
    _bamba_family, _falcon_h1_family,
    _llama_variant, _llama, _bert, _gemma_family, _t5_family, _bart_family, _bart_kin_family,
    _fsmt_family,
    _paper,
    _rope_encoder, _deberta, _deberta_v2, _bert_generation, _layoutlm, _roc_bert, _albert,
    _modernbert, _modernbert_decoder, _rembert, _mpnet, _xlm, _tapas, _ibert, _yoso,
    _distilbert, _prenorm_bert, _roformer, _big_bird)


def symbols(family: Family, run: Run) -> dict[str, Dim]:
    """The symbols the graph is written in, with their values."""
    m = Builder(run, family.sizes())
    return dict(m.dims)
