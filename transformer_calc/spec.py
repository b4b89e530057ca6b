"""ModelSpec: one transformer architecture, validated on construction.

Every architecture field is declared once here, with its type, allowed values and help text in
the field's metadata. The YAML loader, the HF config mapping, the CLI's ``--field`` overrides and
``tcalc check`` all read that one declaration.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from transformer_calc.errors import SpecError, TcalcError

ARCHES = ("decoder", "encoder", "encoder-decoder")
POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "relative", "none")
# *_noaffine: normalisation without a learned scale (OLMo-1, nanochat): no parameters
NORMS = ("layernorm", "layernorm_nobias", "rmsnorm", "layernorm_noaffine", "rmsnorm_noaffine")
NORM_POSITIONS = ("pre", "post")
FFN_KINDS = ("plain", "gated", "param_attention")
# gelu_new: GELU's tanh approximation written out in Python (HF NewGELUActivation, GPT-2):
# the same function as gelu_tanh (one fused kernel) but autograd keeps 4 tensors, not 1.
# swiglu_oss: gpt-oss's clamped SwiGLU, gate · sigmoid(α · gate) · (up + 1) (GptOssExperts)
# xielu: xIELU (Huang & Schlag 2024, arXiv 2411.13010; Apertus), with two trainable scalars
ACTIVATIONS = ("relu", "relu2", "gelu", "gelu_tanh", "gelu_new", "silu", "swiglu_oss", "swish",
               "sigmoid", "tanh",
               "identity", "xielu")
RELATIVE_SCOPES = ("first", "every")
# heads of the sequence/token classification and question-answering classes (transformers)
CLASSIFIERS = ("none", "linear", "dense", "dense_norm")
# encoder towers before a language model, and the projectors after them (towers.py)
TOWERS = ("none", "siglip", "qwen2_5_vl", "qwen3_vl", "pixtral", "mllama", "whisper", "gemma4",
          "gemma4_unified", "qwen3_asr", "got_ocr2", "glmasr", "fuyu")
PROJECTORS = ("none", "gemma3", "mistral3", "linear", "mlp", "lfm2_vl", "kimi_k25",
              "qwen3_asr", "got_ocr2", "glmasr", "moss")
QK_NORMS = ("none", "head", "width", "l2")
ATTN_GATES = ("none", "head", "width")
# Recurrent mixers: layers whose state does not grow with the context.
MIXERS = ("none", "mamba", "mamba2", "gated_deltanet", "short_conv", "lightning", "kda")
# Layer-pattern letters (see plan.parse_pattern): the mixer per layer, the FFN per layer. M is
# the spec's recurrent mixer; X is no sublayer at all (a Mamba layer has no FFN, a Nemotron-H
# MLP layer no mixer).
ATTENTION_LAYER_KINDS = {"F": "full", "S": "sliding", "C": "chunked", "N": "full, no RoPE",
                         "M": "recurrent mixer", "P": "full attention and the recurrent mixer in "
                         "parallel", "Q": "sliding beside compressed sparse entries "
                         "(DeepSeek-V4's CSA)", "H": "sliding beside heavily compressed entries "
                         "(DeepSeek-V4's HCA)", "X": "none"}
FFN_LAYER_KINDS = {"D": "dense", "E": "experts", "X": "none"}
# Upper bound on every integer field. Real models stay far below (d_model ~1e4, vocab ~1e6);
# the bound keeps totals printable and arithmetic O(1) whatever a file says.
MAX_SIZE = 2**40
# Layers of a stack: far beyond any model (the deepest have a few hundred), low enough that
# reading a per-layer list (a pattern, transformers' layer_types) stays instant; a config
# asking for 10^9 layers is refused, not read layer by layer for minutes.
MAX_LAYERS = 100_000


def _f(default: Any, help: str, *, choices: tuple[str, ...] = (), minimum: int | None = None,
       maximum: int = 0, arch: bool = True) -> Any:
    """A spec field; ``arch`` fields are architecture (overridable from the CLI); an integer is
    at most ``maximum`` (0: MAX_SIZE)."""
    meta = {"help": help, "choices": choices, "minimum": minimum, "maximum": maximum,
            "arch": arch}
    return field(default=default, metadata=meta)


# repr, eq, hash and (at run time) __init__ are written by hand: the generated ones for ~150
# fields are compiled at every import, ~8 ms of each CLI start-up (make bench), and a spec is
# compared or printed rarely. The type checker still sees the generated __init__'s signature.
# At run time a spec keeps its fields in slots, and one more for its layer plan (plan.plan_of):
# a sweep reads ~150 fields per configuration, and a slot is read faster than a 184-key
# instance dict, which is also 4x the memory (make bench: +5-10 % configurations/s).
# (dataclass(slots=True) takes no extra slot, so the slotted class is made here, as
# dataclasses._add_slots makes it.)
if TYPE_CHECKING:
    from dataclasses import dataclass as spec_dataclass
else:
    def spec_dataclass(**options: Any) -> Any:
        def slotted(cls: type) -> type:
            cls = dataclass(**options, init=False)(cls)
            names = tuple(f.name for f in dataclasses.fields(cls))
            body = {k: v for k, v in cls.__dict__.items()
                    if k not in names and k not in ("__dict__", "__weakref__")}
            body["__slots__"] = (*names, "_plan")
            # frozen: the generated __setattr__ names the class it was made for, not this one
            body["__setattr__"] = _frozen
            body["__delattr__"] = _frozen
            return type(cls)(cls.__name__, cls.__bases__, body)
        return slotted

    def _frozen(self: Any, name: str, *value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field '{name}'")


@spec_dataclass(frozen=True, repr=False, eq=False)
class ModelSpec:
    """A transformer architecture. Sizes are exact integers; names follow the papers."""

    # -- identity (not architecture) ------------------------------------------------------
    name: str = _f("custom", "preset name", arch=False)
    description: str = _f("", "one line: what this model is", arch=False)
    source: str = _f("", "paper or model card the architecture comes from", arch=False)
    expected_params: int | None = _f(None, "reference total of trainable parameters", arch=False,
                                     minimum=0)
    expected_params_source: str = _f("", "where expected_params came from (library, version, "
                                     "class)", arch=False)
    note: str = _f("", "a remark shown with every breakdown (e.g. which class is counted)",
                   arch=False)
    model_type: str = _f("", "the Hugging Face model_type the spec was read from (empty: "
                         "written by hand); the op graph reads a family's forward code by it",
                         arch=False)
    unrunnable: str = _f("", "why the model as configured cannot run a forward (a key its "
                         "config leaves null that only the forward reads: DeepseekV2Config's "
                         "num_experts_per_tok): its parameters are counted, and FLOPs and "
                         "memory refuse with this reason; top_k may then be 0", arch=False)
    unmodelled: str = _f("", "what tcalc's FLOPs and training activations do not model in "
                         "this model's forward (its attention or mixer): tcalc flops and "
                         "training memory refuse it, naming this; empty: all modelled",
                         arch=False)
    activations_unmodelled: str = _f("", "what tcalc's training activations do not model "
                                     "in this model's forward when its FLOPs are: training "
                                     "memory refuses it, naming this; empty: none",
                                     arch=False)
    dropout: float = _f(0.0, "dropout probability in training (0: no dropout masks are kept; "
                        "GPT-2, BERT: 0.1)", arch=False)
    embed_dropout: float | None = _f(None, "dropout on the embeddings' output, when it "
                                     "differs from dropout (Phi-2: embd_pdrop 0.0 beside "
                                     "resid_pdrop 0.1)", arch=False)
    attention_dropout: float | None = _f(None, "dropout on the attention probabilities, when "
                                         "it differs from dropout (OPT, BART: 0.0)", arch=False)
    activation_dropout: float = _f(0.0, "dropout on the FFN's activation output, before its "
                                   "down projection (BART-style configs' activation_dropout; "
                                   "bart-base: 0.1)", arch=False)
    softmax_fp32: bool = _f(False, "eager attention computes the softmax in fp32 and casts it "
                            "back (transformers' Llama-style eager attention): a 16-bit model "
                            "keeps both copies", arch=False)
    sdpa_path: bool = _f(True, "transformers has an SDPA path for the class (false: "
                         "_supports_sdpa is false, it runs eager attention only; --attention "
                         "sdpa then says so beside what an SDPA kernel would keep)", arch=False)
    experts_grouped: bool = _f(True, "the MoE experts take transformers' grouped_mm path by "
                               "default (their module has @use_experts_implementation; false: "
                               "the class's own code, e.g. Llama 4's)", arch=False)
    experts_every_token: bool = _f(False, "with experts_grouped false: the class runs every "
                                   "expert on every token, scaled by the router's scores "
                                   "(Llama4TextMoe); false: it loops over the experts hit, as "
                                   "the eager path does (LongCat-Flash)", arch=False)
    qkv_clamp: bool = _f(False, "the fused QKV output is clamped (DBRX's clip_qkv): the clamp "
                         "keeps its input for backward", arch=False)
    router_jitter: bool = _f(False, "the router multiplies its input by uniform noise in "
                             "training (DBRX's moe_jitter_eps), in place: the multiply keeps "
                             "the noise", arch=False)
    attn_fp32: bool = _f(False, "eager attention casts Q and K to fp32 and computes the scores "
                         "and softmax there, casting the probabilities back (GPT-Neo, GPT-J, "
                         "CodeGen)", arch=False)
    scores_clamped: bool = _f(False, "eager attention clamps its masked scores from below "
                              "(XGLM: torch.max(scores, finfo.min)), which keeps them",
                              arch=False)
    yoso_expectation: bool = _f(False, "YOSO's expectation attention (YosoCumulation): "
                                "(1 − acos(q̂·k̂ᵀ)/π)^hash_code_len over l2-normalised q and k, "
                                "no softmax, no attention dropout", arch=False)
    rope_concat: bool = _f(False, "RoPE concatenates the rotated part of each head with the rest "
                           "(partial rotary: StableLM, GPT-NeoX, Phi, GLM), so Q leaves it "
                           "contiguous in (B, H, T, d) order", arch=False)
    rope_fp32: bool = _f(False, "RoPE keeps cos and sin in fp32 and computes q·cos + "
                         "rotate_half(q)·sin in fp32, cast back to the query's dtype (OLMo, "
                         "OLMo2, OLMo3, FlexOlmo, Beam, LFM3)", arch=False)
    block_sparse_from: int = _f(0, "the sequence length from which BigBird's block-sparse "
                                "attention runs ((5 + 2 · num_random_blocks) · block_size + 1; "
                                "shorter sequences run full attention); 0: full attention at "
                                "every length", arch=False)
    norm_manual: bool = _f(False, "the LayerNorm is written out in fp32 (CohereLayerNorm): it "
                           "keeps x − mean twice, the normalised tensor and 1/std, and a "
                           "(heads, d_head) QK-norm norms each head apart", arch=False)
    explicit_mask: bool = _f(False, "the model always hands SDPA an explicit causal mask "
                             "(Falcon: allow_is_causal_skip off): each layer keeps its copy, or "
                             "with ALiBi the one (B, heads, T, T) bias mask", arch=False)
    kv_broadcast: bool = _f(False, "K and V are broadcast to every query head before "
                            "attention, as copies (Falcon's new decoder architecture)",
                            arch=False)
    norm_manual_cast: bool = _f(False, "that hand-written LayerNorm casts the normalised "
                                "tensor back to the input's dtype before its weight "
                                "(DebertaLayerNorm)", arch=False)
    softmax_sink_column: bool = _f(False, "eager attention appends the sink logits as one more "
                                   "softmax column, so the probabilities kept are keys + 1 wide "
                                   "(gpt-oss, MiMo-V2-Flash, Flint)", arch=False)
    softmax_sink_lse: bool = _f(False, "eager attention applies the sinks after the softmax as "
                                "sigmoid(logsumexp(scores) − sink), keeping the scores once more "
                                "(GraniteSWA)", arch=False)
    softmax_row_max: bool = _f(False, "eager attention subtracts each row's max before the "
                               "softmax, and max keeps its int64 indices (gpt-oss, "
                               "MiMo-V2-Flash)", arch=False)

    # -- shape ----------------------------------------------------------------------------
    arch: str = _f("decoder", "stack layout", choices=ARCHES)
    vocab_size: int = _f(0, "token vocabulary size V", minimum=1)
    d_model: int = _f(0, "hidden size (d_model, E)", minimum=1)
    n_layers: int = _f(0, "layers of a decoder-only or encoder-only model (L)", minimum=0,
                       maximum=MAX_LAYERS)
    n_encoder_layers: int = _f(0, "encoder layers (encoder-decoder models)", minimum=0,
                               maximum=MAX_LAYERS)
    n_decoder_layers: int = _f(0, "decoder layers (encoder-decoder models)", minimum=0,
                               maximum=MAX_LAYERS)
    n_heads: int = _f(0, "attention (query) heads h (0: no attention layers, e.g. Mamba)",
                      minimum=0)
    n_kv_heads: int | None = _f(None, "key/value heads: = n_heads (MHA), 1 (MQA), or a divisor "
                                "of n_heads (GQA); default n_heads", minimum=1)
    d_head: int | None = _f(None, "size of one head; default d_model / n_heads", minimum=1)
    d_ff: int = _f(0, "FFN inner size (per expert for MoE; 0: no FFN, e.g. Mamba)", minimum=0)
    max_positions: int = _f(0, "maximum sequence length (rows of a learned position table)",
                            minimum=0)

    # -- positions ------------------------------------------------------------------------
    position: str = _f("learned", "position encoding", choices=POSITIONS)
    position_offset: int = _f(0, "extra rows in a learned position table (OPT, BART: 2)",
                              minimum=0)
    rotary_fraction: float = _f(1.0, "fraction of each head rotated by RoPE (no parameters)")
    relative_buckets: int = _f(32, "buckets of a learned relative position bias (T5: 32)",
                               minimum=1)
    relative_scope: str = _f("first", "which layers own a relative bias table: first (T5) or "
                             "every", choices=RELATIVE_SCOPES)
    relative_bias: bool = _f(False, "a learned relative-position bias (relative_buckets × "
                             "n_heads, one table per stack) beside another position encoding "
                             "(MPNet: with its learned table)")
    rel_embeddings: int = _f(0, "rows of a relative-position embedding table shared by the "
                             "layers, × d_model (DeBERTa: 2 · position_buckets)", minimum=0)
    rel_embeddings_norm: bool = _f(False, "a norm over that table (DeBERTa norm_rel_ebd)")
    rel_projections: int = _f(0, "position key/query projections per layer, d_model × d_model "
                              "+ bias each (DeBERTa without share_att_key: up to 2)", minimum=0)
    rel_shared_key: bool = _f(False, "DeBERTa's share_att_key: the relative table is projected "
                              "by the attention's own key and query projections (both, "
                              "whatever the terms) rather than position projections")
    rel_terms: str = _f("none", "DeBERTa's disentangled scores in use (pos_att_type): c2p "
                        "(content to position), p2c, both or none",
                        choices=("none", "c2p", "p2c", "c2p|p2c"))
    rel_key_bias: bool = _f(True, "the c2p position projection has a bias (DeBERTa v1's "
                            "pos_proj: none)")
    rel_span: str = _f("table", "rows of the relative table a layer projects: table (all of "
                       "them, DeBERTa-v2) or sequence (2 · min(T, rel_embeddings / 2), "
                       "DeBERTa v1's compute_attention_span)", choices=("table", "sequence"))
    xl_relative: bool = _f(False, "Transformer-XL's relative attention with segment terms "
                           "(XLNet, Funnel): per layer a bias-free d_model → n_heads · d_head "
                           "projection of the relative positions, content, position and "
                           "segment biases (n_heads · d_head each) and a segment embedding "
                           "(2 · n_heads · d_head)")
    global_qkv: bool = _f(False, "Longformer's global-attention projections beside Q, K and V "
                          "(query_global, key_global, value_global): d_model × n_heads · "
                          "d_head and a bias each, per layer")
    value_conv: int = _f(0, "Nyströmformer's depthwise convolution over each head's values "
                         "(conv_kernel_size): a kernel of this width per head and layer, no "
                         "bias; 0: none", minimum=0)
    span_conv: int = _f(0, "ConvBERT's span-based dynamic convolution beside the attention "
                        "heads (conv_kernel_size): per layer a separable convolution of the "
                        "keys' input, a projection to a kernel per head and position, the "
                        "convolved values' projection, and an output projection that reads "
                        "both halves (d_model × d_model); 0: none", minimum=0)
    fourier_mixer: bool = _f(False, "FNet's Fourier transform over the sequence and the hidden "
                             "width in place of attention (layer_attention X): no parameters "
                             "but the norm after it, one per layer")
    entity_queries: bool = _f(False, "LUKE's entity-aware attention: word-to-entity, "
                              "entity-to-word and entity-to-entity query projections beside Q "
                              "(d_model × n_heads · d_head and a bias each), per layer")
    lang_adapters: int = _f(0, "X-MOD's language adapters: per layer, this many bottleneck "
                            "adapters (d_model → adapter_width → d_model, biased) after the "
                            "FFN, one run per token's language; 0: none", minimum=0)
    adapter_width: int = _f(0, "their inner width (X-MOD: hidden_size // "
                            "adapter_reduction_factor)", minimum=0)
    adapter_norm: bool = _f(False, "a norm of its own before each layer's adapters (X-MOD "
                            "adapter_layer_norm)")

    # -- block ----------------------------------------------------------------------------
    ffn: str = _f("plain", "FFN kind: plain (2 matrices), gated (3: SwiGLU, GeGLU) or "
                  "param_attention (Vaswani et al. 2017, appendix)", choices=FFN_KINDS)
    activation: str = _f("gelu", "FFN nonlinearity (with ffn: gated, silu = SwiGLU, "
                         "gelu = GeGLU)", choices=ACTIVATIONS)
    norm: str = _f("layernorm", "norm kind", choices=NORMS)
    norm_position: str = _f("pre", "norm placement in each block", choices=NORM_POSITIONS)
    final_norm: bool = _f(True, "a norm after the last layer (per stack)")
    embedding_norm: bool = _f(False, "a norm right after the embeddings (BERT, BART; per stack)")
    parallel_block: bool = _f(False, "attention and FFN read the same input (GPT-J, NeoX, "
                              "Falcon, Phi)")
    parallel_norms: int = _f(1, "norms per parallel block: 1 (GPT-J, Phi, Falcon-7B) or 2 "
                             "(NeoX, Falcon-40B)", minimum=1)
    fused_qkv: bool = _f(False, "Q, K and V stored as one matrix (same parameter count)")
    attn_gate_named_gate_proj: bool = _f(False, "the attention output gate is a module named "
                                         "gate_proj (AFMoE), a name PEFT's MoE conversion "
                                         "takes for the experts")
    attn_gate_in_q: bool = _f(False, "the attention output gate is computed by q_proj (its "
                              "output doubled: Qwen3-Next, Qwen3.5), not a module of its own")
    ssm_in_projs: int = _f(1, "separate input projection matrices of the mixer (Qwen3-Next: 2, "
                           "in_proj_qkvz and in_proj_ba; Qwen3.5: 4; OLMo Hybrid: 6); same "
                           "parameters, one LoRA adapter each", minimum=1)
    peft_head: bool = _f(False, "PEFT's all-linear adapts the LM head too: the model's "
                         "get_output_embeddings does not return it, so PEFT does not know it "
                         "as the output layer (FSMT's output_projection)")
    peft_mamba: bool = _f(False, "PEFT refuses LoRA on this model's out_proj and conv1d "
                          "(peft's guard for Mamba-based model types)")
    peft_names_shared: bool = _f(False, "the mixer's projections carry the attention's module "
                                 "names (OLMo Hybrid's linear attention: q_proj, k_proj, "
                                 "v_proj, o_proj), so PEFT adapts both by one name: "
                                 "--lora-targets takes all-linear or tcalc's own names")
    module_names: str = _f("", "transformers' names of the linear layers (of lora's aliases: "
                           "q_proj, query, c_attn, ...) that --lora-targets accepts for this "
                           "model, comma-separated; empty: the Llama family's; none: none")
    weight_format: str = _f("", "the checkpoint's quantised weight format (from config.json's "
                            "quantization_config): a --quant format that serving uses by "
                            "default; empty: none", arch=False)
    weight_group_size: int = _f(0, "its group size (GPTQ/AWQ group_size; 0: the default 128)",
                                minimum=0, arch=False)
    layers_nn_linear: bool = _f(True, "the layers' projections are torch nn.Linear modules "
                                "(false: I-BERT's QuantLinear, which LoRA's all-linear skips)")
    fused_gate_up: bool = _f(False, "the gated FFN's gate and up projections stored as one "
                             "matrix (Phi-3: gate_up_proj; same parameter count, one LoRA "
                             "adapter)")
    t5_dropouts: bool = _f(False, "T5's dropouts beyond the residual ones: inside the FFN "
                           "(before wo) and after each stack's final norm")
    norm_int: bool = _f(False, "I-BERT's IntLayerNorm outside quant mode: LayerNorm written out "
                        "in the activation dtype, keeping x − mean, the normalised tensor and "
                        "the std (the MLM head's norm is nn.LayerNorm)", arch=False)
    ffn_dropout: bool = _f(False, "a dropout inside the FFN, on its inner width before the "
                           "down projection (GTE; T5's is one of t5_dropouts)")
    norm_fp32: bool = _f(False, "the RMSNorm keeps its normalised tensor in fp32 (Gemma: "
                         "x̂ · (1 + w) computed in fp32, cast back after)")
    norm_mean_square: bool = _f(False, "the RMSNorm's 1/rms is torch.pow(mean_squared, -0.5), "
                                "which keeps the mean square too, and a 16-bit model keeps the "
                                "weight's fp32 copy (Gemma 3n, Gemma 4)", arch=False)
    norm_keeps_input: bool = _f(False, "the RMSNorm multiplies its input itself (not its fp32 "
                                "copy) by the fp32 rsqrt, so a 16-bit model keeps both (T5)")
    router_fp32: bool = _f(False, "the MoE router casts its input and weight to fp32 before "
                           "its matmul (DeepSeek-V2/V3, GLM-4 MoE, Nemotron-H): a 16-bit "
                           "model keeps fp32 copies of both for backward")
    logit_softcapping: float = _f(0.0, "final logits soft-capped as cap · tanh(logits / cap) "
                                  "(Gemma 2, Beam: final_logit_softcapping; 0: none): no "
                                  "parameters, one more B·T·vocab tensor kept in training",
                                  arch=False)
    softcap_fp32: bool = _f(False, "the final soft-capping runs on an fp32 copy of the logits "
                            "(Beam): its tanh output is kept in fp32")
    ffn_act_fp32: bool = _f(False, "the gated FFN computes act(gate) · up on fp32 copies (Beam): "
                            "a 16-bit model keeps those tensors in fp32")
    attn_softcapping: float = _f(0.0, "attention scores soft-capped as cap · tanh(s / cap) "
                                 "in eager attention (Gemma 2: attn_logit_softcapping 50; 0: "
                                 "none): one more tensor of the scores' size kept",
                                 arch=False)
    loss_fp32: bool = _f(True, "the loss upcasts the logits to fp32 before its log-softmax "
                         "(transformers' loss_function of causal and masked LMs); false: "
                         "nn.CrossEntropyLoss in the activation dtype (BERT's, RoBERTa's, "
                         "BART's and T5's own heads; under autocast it runs in fp32 anyway)")
    sandwich_norm: bool = _f(False, "norms before and after attention and FFN (Gemma 2/3: 4 "
                             "per layer)")
    first_attn_norm: bool = _f(True, "the first layer normalises its attention input; false: "
                               "it reads the normed embeddings as they are (ModernBERT's "
                               "attn_norm is nn.Identity in layer 0)")
    sub_norms: bool = _f(False, "a norm over the attention output before its output projection "
                         "and one over the FFN's inner width before its down projection "
                         "(BitNet's attn_sub_norm, ffn_sub_norm)")
    qk_final_norm: str = _f("same", "the norm kind of the QK-norms and the final norm: same "
                            "(norm's), or another (ESMC: layernorm_nobias beside its layers' "
                            "layernorm)", choices=("same", *NORMS))
    qk_norm: str = _f("none", "norm on queries and keys: none, head (one norm over d_head, "
                      "shared by the heads: Qwen3, Gemma 3), width (over n_heads · d_head: "
                      "OLMo-2, Cohere) or l2 (an RMS norm per head without a weight, in the RoPE "
                      "layers: Llama 4, nanochat)", choices=QK_NORMS)
    attention_sinks: bool = _f(False, "a learned sink logit per head (gpt-oss)")
    sinks_sliding_only: bool = _f(False, "the sink logits sit in the sliding-window layers "
                                  "only; the full layers have none (MiMo-V2-Flash)")
    differential: bool = _f(False, "differential attention (Ye et al. 2024; DiffLlama): two "
                            "attention maps over one Q and K, each over half the V heads, "
                            "combined by λ from four learned d_head vectors per layer, then a "
                            "parameter-free RMSNorm over head pairs")
    attn_gate: str = _f("none", "a sigmoid gate on the attention output, from the block input: "
                        "none, head (one per head: d_model -> n_heads) or width (d_model -> "
                        "n_heads · d_head; AFMoE, Beam)", choices=ATTN_GATES)
    attn_gate_bias: str = _f("none", "bias of that gate: none, head (n_heads) or width",
                             choices=ATTN_GATES)
    # efficient attention: how the self-attention mixes the values
    attention_mechanism: str = _f(
        "softmax", "softmax (dense or --attention-pattern), linformer (keys and values "
        "projected from max_positions to linformer_k, Wang et al. 2020), performer (FAVOR+ "
        "random features, Choromanski et al. 2021) or linear (elu + 1 feature map, "
        "Katharopoulos et al. 2020)", choices=("softmax", "linformer", "performer", "linear"))
    linformer_k: int = _f(256, "Linformer: the projected length k", minimum=1)
    linformer_sharing: str = _f(
        "headwise", "Linformer's E and F: headwise (one pair per layer shared by the heads, the "
        "linformer package's default), kv (one matrix per layer, and the values are the keys: "
        "the package's share_kv), layerwise (one matrix for every layer and head, the paper's) "
        "or none (a pair per head)", choices=("headwise", "kv", "layerwise", "none"))
    performer_features: int = _f(0, "Performer: random features m (0: performer-pytorch's "
                                 "default, int(d_head · ln d_head))", minimum=0)
    qkv_conv: int = _f(0, "Primer's multi-dconv-head attention: a depthwise convolution of this "
                       "width over the sequence after each Q, K and V projection (So et al. "
                       "2021: 3; 0: none)", minimum=0)
    qkv_conv_bias: bool = _f(False, "a bias on those convolutions")

    # -- layers that differ -----------------------------------------------------------------
    sliding_window: int = _f(0, "keys a sliding-window layer attends to (0: none); in an "
                             "encoder-decoder's encoder the window is both ways, 2 · "
                             "sliding_window + 1 keys (T5Gemma)", minimum=0)
    attention_chunk: int = _f(0, "chunk size of chunked-attention layers (Llama 4)", minimum=0)
    encoder_local_block: int = _f(0, "LongT5's local attention: the encoder's self-attention "
                                  "runs on blocks of this many tokens (local_radius + 1), the "
                                  "sequence padded to whole blocks, each block's queries "
                                  "meeting the keys of three blocks (0: dense)", minimum=0)
    encoder_global_block: int = _f(0, "LongT5's transient-global attention: every query also "
                                   "meets one summary per this many tokens (global_block_size: "
                                   "their sum, normed, through K and V); 0: local only",
                                   minimum=0)
    layer_attention: str = _f("", "mixer per layer: F full attention, S sliding, C chunked, N "
                              "full without RoPE, M the recurrent mixer, P attention and the "
                              "mixer in parallel (Falcon-H1), X none; runs like "
                              "'3S 1F', a trailing '*' repeats the pattern (default: M everywhere "
                              "with a mixer, else S if sliding_window, else F); an "
                              "encoder-decoder: F and S, one pattern for both stacks")
    global_head_dim: int | None = _f(None, "d_head of the full-attention layers when it differs "
                                     "from the sliding ones' (Gemma 4: global_head_dim)",
                                     minimum=1)
    global_kv_heads: int | None = _f(None, "K/V heads of the full-attention layers when they "
                                     "differ (Gemma 4: num_global_key_value_heads)", minimum=1)
    global_k_eq_v: bool = _f(False, "the full-attention layers have no value projection: the "
                             "values are the keys' projection, normed apart (Gemma 4: "
                             "attention_k_eq_v)")
    kv_shared_layers: int = _f(0, "the last layers reuse the keys and values of the last "
                               "earlier layer of their kind: no K/V projections or norms, "
                               "nothing cached (Gemma 4: num_kv_shared_layers)", minimum=0)
    kv_shared_wide_ffn: bool = _f(False, "those layers' dense FFN is 2 · d_ff wide (Gemma 4: "
                                  "use_double_wide_mlp)")
    value_norm: bool = _f(False, "an RMSNorm without weight over each value head (Gemma 4's "
                          "v_norm)")
    layer_ffn: str = _f("", "FFN per layer: D dense, E mixture of experts, X none; runs like "
                        "'3D 58E', a trailing '*' repeats (default: E everywhere if n_experts, "
                        "else D, or X when d_ff is 0)")

    # -- Gemma 4's per-layer embeddings and experts beside the dense FFN --------------------
    per_layer_input: int = _f(0, "width of each layer's own embedding (Gemma 4's per-layer "
                              "embeddings: hidden_size_per_layer_input; 0: none): a table of "
                              "per_layer_vocab × n_layers · width, a d_model -> n_layers · width "
                              "projection and its norm, and per layer a gate, a projection back "
                              "and a norm", minimum=0)
    per_layer_vocab: int = _f(0, "rows of that table (vocab_size_per_layer_input)", minimum=0)
    # -- Gemma 3n ----------------------------------------------------------------------------
    altup_inputs: int = _f(0, "AltUp's streams (Gemma 3n: altup_num_inputs; 0: none): the "
                           "embeddings projected to n - 1 more streams and back before the "
                           "head (d_model × d_model each way); each layer predicts every "
                           "stream from a router over the first, runs its sublayers on the "
                           "first and corrects the rest", minimum=0)
    laurel_rank: int = _f(0, "LAuReL's rank (Gemma 3n: laurel_rank; 0: none): beside the "
                          "attention, the normed input through d_model -> rank -> d_model and a "
                          "norm, added to the residual", minimum=0)
    sparse_ffn_layers: int = _f(0, "the first layers whose FFN gate keeps only its values above "
                                "mean + z · std (Gemma 3n's activation_sparsity_pattern, 0.95 "
                                "in its first 10 layers): no parameters or matmuls, tensors "
                                "kept", minimum=0)
    moe_beside_dense: bool = _f(False, "the experts run beside the dense FFN of d_ff and the "
                                "two outputs are summed, each with its own norms; the router "
                                "norms its input and scales it per channel and its weights "
                                "per expert (Gemma 4's enable_moe_block)")
    moe_shortcut: bool = _f(False, "with moe_beside_dense: the experts read the dense FFN's own "
                            "normed input and add their output to the residual stream, with no "
                            "norm or scale of their own (LongCat-Flash's shortcut MoE)")

    # -- recurrent mixers (Mamba, Mamba-2, Gated DeltaNet, short convolutions) --------------
    mixer: str = _f("none", "the recurrent mixer of M layers (layer_attention): mamba (Gu & Dao "
                    "2023), mamba2 (Dao & Gu 2024), gated_deltanet (Yang et al. 2025; Qwen3-Next)"
                    ", short_conv (LFM2), lightning (MiniMax's linear attention) or kda (Kimi "
                    "Delta Attention: Gated DeltaNet with a decay per channel, Kimi Linear)",
                    choices=MIXERS)
    ssm_inner: int = _f(0, "mixer width d_inner (mamba, mamba2: expand · d_model; "
                        "gated_deltanet: value heads · value head size)", minimum=0)
    ssm_state: int = _f(0, "state size N per channel (mamba, mamba2); key head size "
                        "(gated_deltanet)", minimum=0)
    ssm_heads: int = _f(0, "mamba2: heads (d_inner / head size); gated_deltanet: value heads",
                        minimum=0)
    ssm_groups: int = _f(0, "mamba2: groups of B and C (n_groups); gated_deltanet: key heads",
                         minimum=0)
    ssm_conv: int = _f(0, "kernel of the mixer's causal depthwise convolution (d_conv)",
                       minimum=0)
    ssm_dt_rank: int = _f(0, "mamba: rank of the step-size projection (dt_rank)", minimum=0)
    ssm_chunk: int = _f(256, "mamba2, gated_deltanet: chunk length of the chunked scan (SSD; "
                        "chunk_size), which sets its FLOPs", minimum=1)
    ssm_state_dtype: str = _f("fp32", "dtype of the recurrent state in the inference cache "
                              "(transformers keeps Mamba's and Gated DeltaNet's in fp32 whatever "
                              "the model's dtype; Nemotron-H's mamba_ssm_cache_dtype; cache: the "
                              "KV cache's dtype, as MiniMax keeps it)",
                              choices=("fp32", "bf16", "fp16", "cache"))
    ssm_conv_bias: bool = _f(True, "a bias on the mixer's convolution")
    ssm_bias: bool = _f(False, "biases on the mixer's input and output projections")
    ssm_norm: bool = _f(True, "mamba2: a gated RMSNorm over d_inner before out_proj")
    ssm_dt_norms: bool = _f(False, "mamba: RMSNorms on dt, B and C (Jamba)")

    layer_groups: int = _f(0, "sets of layer weights when layers share them: each is run by "
                           "n_layers / layer_groups consecutive layers (ALBERT: "
                           "num_hidden_groups · inner_group_num; 0: every layer its own)",
                           minimum=0)
    idle_cross_layers: int = _f(0, "decoder layers of cross-attention (QK-norm, two tanh gates) "
                                "and an FFN that a text-only forward skips (Llama 3.2 Vision's "
                                "MllamaForCausalLM): parameters only, no FLOPs, activations or "
                                "cache; n_layers counts the layers that run", minimum=0)
    idle_cross_attention: bool = _f(
        False, "each decoder layer also holds an encoder-attention sublayer and its norm, "
        "which a decoder alone never runs (the *ForCausalLM class of an encoder-decoder "
        "family: BART's, Whisper's and TrOCR's decoders): its parameters are counted; "
        "without encoder states it costs no FLOPs, activations or cache")

    # -- multi-head latent attention (DeepSeek-V2/V3) ------------------------------------------
    kv_lora_rank: int = _f(0, "MLA: latent K/V width (0: not MLA)", minimum=0)
    q_lora_rank: int = _f(0, "MLA: latent query width (0: queries projected directly)",
                          minimum=0)
    qk_nope_head_dim: int = _f(0, "MLA: per-head query/key width without RoPE", minimum=0)
    qk_rope_head_dim: int = _f(0, "MLA: per-head query/key width with RoPE (key part shared "
                               "by the heads)", minimum=0)
    v_head_dim: int = _f(0, "per-head value width: MLA's; with other attention, the value "
                         "heads' width when it differs from d_head (MiMo-V2-Flash: 128 against "
                         "192; 0: d_head)", minimum=0)
    index_heads: int = _f(0, "DeepSeek Sparse Attention (DSA; DeepSeek-V3.2, GLM-5): heads of "
                          "the lightning indexer that picks the keys each query attends to "
                          "(index_n_heads; 0: no indexer)", minimum=0)
    index_head_dim: int = _f(0, "DSA: the indexer's query/key width per head (index_head_dim; "
                             "its keys are cached beside the latent)", minimum=0)
    index_topk: int = _f(0, "DSA: keys each query attends to, picked by the indexer "
                         "(index_topk; DeepSeek-V3.2: 2048)", minimum=0)
    # -- DeepSeek-V4 -------------------------------------------------------------------------
    hc_streams: int = _f(0, "manifold-constrained hyper-connections (DeepSeek-V4's mHC: "
                         "hc_mult; 0: a plain residual): the residual is this many streams, "
                         "collapsed before and expanded after each sublayer by weights a "
                         "projection of all streams gives (Sinkhorn-normalised mixing)",
                         minimum=0)
    compress_csa: int = _f(0, "DeepSeek-V4's Q layers (compressed sparse attention): source "
                           "tokens per compressed key/value entry (compress_rates' "
                           "compressed_sparse_attention; windows overlap by half), beside the "
                           "sliding window; an indexer picks csa_index_topk entries per query",
                           minimum=0)
    compress_hca: int = _f(0, "DeepSeek-V4's H layers (heavily compressed attention): source "
                           "tokens per compressed entry, non-overlapping, all entries attended",
                           minimum=0)
    csa_index_heads: int = _f(0, "DeepSeek-V4: heads of the Q layers' indexer (index_n_heads)",
                              minimum=0)
    csa_index_dim: int = _f(0, "DeepSeek-V4: the indexer's width per head (index_head_dim)",
                            minimum=0)
    csa_index_topk: int = _f(0, "DeepSeek-V4: compressed entries each query meets in a Q layer "
                             "(index_topk)", minimum=0)
    hc_sinkhorn_iters: int = _f(20, "Sinkhorn-Knopp iterations that make each hyper-connection's "
                                "stream mix doubly stochastic (hc_sinkhorn_iters): no "
                                "parameters, tensors kept", minimum=1)
    swiglu_clamp: bool = _f(False, "the gated FFN clamps its gate and up outputs before the "
                            "activation (DeepSeek-V4's swiglu_limit): the clamps keep their "
                            "inputs")
    o_groups: int = _f(0, "grouped low-rank output projection (DeepSeek-V4): the heads split "
                       "into this many groups, each projected to o_lora_rank, then mixed to "
                       "d_model (0: one o_proj)", minimum=0)
    o_lora_rank: int = _f(0, "that projection's width per group", minimum=0)
    mtp_layers: int = _f(0, "multi-token-prediction modules (DeepSeek-V3): counted apart from "
                         "the total, as transformers does not build them", minimum=0)

    # -- biases ---------------------------------------------------------------------------
    bias_q: bool = _f(True, "bias on the Q projection")
    bias_k: bool = _f(True, "bias on the K projection")
    bias_v: bool = _f(True, "bias on the V projection")
    bias_o: bool = _f(True, "bias on the attention output projection")
    last_layer_o_bias: bool = _f(False, "a bias on the last layer's attention output only "
                           "(GPT-NeoX-Japanese's dense_bias; with bias_o false)")
    bias_ffn_in: bool = _f(True, "bias on the FFN input (and gate) projection")
    bias_ffn_out: bool = _f(True, "bias on the FFN output projection")

    # -- embeddings and heads -------------------------------------------------------------
    tie_embeddings: bool = _f(True, "LM head shares the token embedding matrix")
    tie_encoder_decoder: bool = _f(True, "encoder and decoder share one token embedding")
    encoder_vocab_size: int | None = _f(None, "rows of the encoder's token table when they "
                                        "differ from vocab_size, the decoder's and the "
                                        "head's (FSMT: src_vocab_size; with "
                                        "tie_encoder_decoder false)", minimum=1)
    token_types: int = _f(0, "token-type (segment) vocabulary; 0 = none", minimum=0)
    type_tables: int = _f(0, "TAPAS: token_types split over this many tables (type_vocab_sizes), "
                          "each read at its column of one (B, T, tables) id tensor and summed; "
                          "0 = one table", minimum=0, arch=False)
    cell_positions: bool = _f(False, "TAPAS's reset_position_index_per_cell: position ids "
                              "restart at each table cell (a (B, T) index tensor)", arch=False)
    layout_positions: int = _f(0, "LayoutLM's 2-D position tables (x, y, height, width), "
                               "rows in each; 0 = none", minimum=0)
    extra_token_rows: int = _f(0, "rows of the token table beyond vocab_size, which the head "
                               "does not predict (Mllama: 8 image tokens)", minimum=0)
    embed_proj_dim: int | None = _f(None, "token embedding width when it differs from d_model "
                                    "(OPT-350M: project_in/out)", minimum=1)
    embed_factorized: bool = _f(False, "every embedding table (tokens, positions, token types) "
                                "and the embedding norm are embed_proj_dim wide, projected to "
                                "d_model by one biased matrix, and the MLM head maps back to "
                                "mlm_width (ALBERT, ELECTRA, RemBERT; the projection is there "
                                "even when the widths agree); false: OPT's project_in/out of "
                                "the token embedding alone")
    mlm_width: int | None = _f(None, "width of the MLM head's dense output, its norm and the "
                               "decoder's input (default: embed_proj_dim when embed_factorized, "
                               "else d_model; RemBERT: output_embedding_size)", minimum=1)
    mask_embedding: bool = _f(False, "a learned d_model vector standing in for the masked "
                              "tokens' content in two-stream attention (XLNet's mask_emb)")
    entity_vocab: int = _f(0, "LUKE's entity vocabulary: a table of entity_vocab × "
                           "entity_width, projected to d_model (no bias) when narrower, with "
                           "position and token-type tables and a norm of its own; 0: none",
                           minimum=0)
    entity_width: int = _f(0, "its width (LUKE entity_emb_size)", minimum=0)
    entity_head: bool = _f(False, "LUKE's entity prediction head (entity_predictions): a "
                           "biased dense d_model → entity_width, a norm, a decoder tied to the "
                           "entity table (with tie_embeddings) and a bias")
    mlm_decoder_untied: bool = _f(False, "the MLM decoder keeps a weight of its own whatever "
                                  "tie_embeddings says (LukeForMaskedLM ties its entity "
                                  "decoder only)")
    side_embeddings: str = _f("", "extra token tables beside the word embedding, as 'rows x "
                              "width' items separated by spaces (RoCBERT: '24858x512 910x768', "
                              "its shape and pronunciation tables)")
    side_concat: bool = _f(False, "the side tables' vectors are concatenated to the word "
                           "embedding and projected back to d_model by one biased matrix "
                           "(RoCBERT's map_inputs_layer); false: built, not run")
    head_bottleneck: int = _f(0, "a bias-free d_model → width → d_model pair before the LM "
                              "head (Ultrabert's prediction head: linear1, linear2); 0: none",
                              minimum=0)
    lm_head: bool = _f(True, "a language-model head (d_model -> vocab)")
    lm_head_bias: bool = _f(False, "bias on the LM head (Phi)")
    pooler: bool = _f(False, "BERT pooler: dense d_model -> d_model on the first token")
    mlm_head: bool = _f(False, "BERT/RoBERTa MLM head: dense + norm + decoder bias "
                        "(its decoder weight tied to the embedding)")
    mlm_dense_bias: bool = _f(True, "a bias on the MLM head's dense layer, and on a dense_norm "
                              "classifier's (ModernBERT: classifier_bias, false by default)")
    classifier: str = _f("none", "a classification head on the model's output instead of an LM "
                         "head: none, linear (d_model -> num_labels: token classification, "
                         "question answering, a decoder's score), dense (d_model -> d_model with "
                         "a bias, then -> num_labels: RoBERTa's, BART's, DeBERTa's pooler) or "
                         "dense_norm (the dense, a norm, then -> num_labels: ModernBERT's)",
                         choices=CLASSIFIERS)
    num_labels: int = _f(0, "outputs of the classification head (config.json's num_labels, or "
                         "id2label's size; question answering: 2, a start and an end logit)",
                         minimum=0)
    classifier_bias: bool = _f(True, "a bias on the classification head's output layer (a "
                               "decoder's sequence-classification score has none)")
    mlm_bias: str = _f("bert", "the MLM head's vocabulary bias: bert (one, tied with the "
                       "decoder's; an untied decoder keeps a second), decoder (the decoder's "
                       "own, one either way: ModernBERT's decoder_bias) or none",
                       choices=("bert", "decoder", "none"))

    # -- mixture of experts ---------------------------------------------------------------
    n_experts: int = _f(0, "routed experts per layer; 0 = dense FFN", minimum=0)
    top_k: int = _f(0, "experts each token is routed to", minimum=0)
    n_shared_experts: int = _f(0, "always-active experts per layer", minimum=0)
    d_ff_expert: int | None = _f(None, "inner size of one routed expert (default d_ff)",
                                 minimum=1)
    d_ff_shared: int | None = _f(None, "inner size of one shared expert (default d_ff_expert; "
                                 "0: an empty shared expert, as Qwen2-MoE allows)", minimum=0)
    router_bias: bool = _f(False, "a bias on the router (gpt-oss)")
    zero_experts: int = _f(0, "zero-computation (identity) experts the router also chooses "
                           "among (LongCat-Flash's zero_expert_num): the router has n_experts + "
                           "zero_experts outputs and transformers builds their gate/up weights, "
                           "never used; a token routed to one computes nothing, so the active "
                           "count and FLOPs of top_k experts are an upper bound", minimum=0)
    shared_expert_gate: bool = _f(False, "a d_model -> 1 gate on the shared experts (Qwen2-MoE)")
    router_topk: str = _f("none", "what the MoE router does with its top-k softmax values, as "
                          "transformers 5.23 writes it: renorm (MixtralTopKRouter: divided by "
                          "their sum in place, kept fp32), cast (Qwen2/3-MoE: cast to the "
                          "model's dtype), renorm_cast (Qwen2/3-MoE with norm_topk_prob), "
                          "sparsemixer (PhiMoE: two experts sampled per token), topk_softmax "
                          "(Cohere 2 MoE: a softmax over the top-k logits, cast to the "
                          "model's dtype), topk_sigmoid and topk_sigmoid_renorm (Flint: the "
                          "top-k of the fp32 sigmoid scores, divided by their sum with "
                          "norm_topk_prob), pnorm (DBRX: divided by their p-norm, "
                          "moe_normalize_expert_weights); none: not read (the op graph leaves "
                          "the model to the per-tensor rules)",
                          choices=("none", "renorm", "cast", "renorm_cast", "sparsemixer",
                                   "topk_softmax", "topk_sigmoid", "topk_sigmoid_renorm",
                                   "pnorm"))
    attn_experts: bool = _f(False, "the attention's query and output projections are experts "
                            "too (JetMoE's mixture of attention heads, JetMoeMoA): n_experts "
                            "pairs, each n_kv_heads · d_head wide, top_k of them per token "
                            "(so n_heads = top_k · n_kv_heads run), chosen by a router of their "
                            "own; bias_o is one d_model bias after they are combined")
    moe_output_bias: bool = _f(False, "one d_model bias added after the experts' outputs are "
                               "combined (JetMoeMoE.bias), instead of a bias in each expert")
    moe_post_norm: bool = _f(False, "a norm over the output of each MoE block, shared experts "
                             "included (A.X K1's post_mlp_layernorm; dense layers have none)")
    peft_moe: str = _f("none", "how PEFT adapts this MoE with LoRA (peft 0.21's transformers-5 "
                       "conversion): mixtral or qwen2_moe (router + fused experts), none "
                       "(experts and router untouched), linear_router (the router is an "
                       "nn.Linear: Llama 4, PhiMoE) or linear_experts (the router and each "
                       "expert's layers are nn.Linear modules, adapted one by one: Switch "
                       "Transformers)",
                       choices=("none", "mixtral", "qwen2_moe", "linear_router",
                                "linear_experts"))
    peft_router_linear: bool = _f(False, "the router of a converted MoE is an nn.Linear module "
                                  "PEFT adapts as any linear layer (HunYuan's gate.wg, "
                                  "LongCat-Flash's router.classifier), not a parametrised "
                                  "weight")

    # -- the encoder tower before the language model (vision-language and speech models) ----
    tower: str = _f("none", "an encoder tower whose output the language model reads, as "
                    "transformers builds it: siglip (Gemma 3's), qwen2_5_vl (Qwen2.5-VL's ViT "
                    "and merger), qwen3_vl (Qwen3-VL's, with its deepstack mergers), pixtral "
                    "(Mistral 3's), mllama (Llama 3.2 Vision's, tiles and a gated global "
                    "encoder), whisper (Whisper's audio encoder), gemma4 (Gemma 4's vision "
                    "encoder), gemma4_unified (Gemma 4 Unified's encoder-free patch embedder), "
                    "qwen3_asr (Qwen3-ASR's audio encoder), got_ocr2 (GOT-OCR 2's SAM image "
                    "encoder and neck), glmasr (GLM-ASR's Whisper-style encoder with rotary "
                    "positions), fuyu (Fuyu's one linear layer over patch pixels) or none",
                    choices=TOWERS)
    tower_d_model: int = _f(0, "the tower's width", minimum=0)
    tower_layers: int = _f(0, "the tower's layers (Mllama: its local encoder's)", minimum=0,
                           maximum=MAX_LAYERS)
    tower_heads: int = _f(0, "the tower's attention heads", minimum=0)
    tower_kv_heads: int = _f(0, "the tower's key/value heads when fewer than its heads "
                             "(EXAONE 4.5's num_key_value_heads); 0: tower_heads", minimum=0)
    tower_head_dim: int = _f(0, "the width of each of the tower's attention heads when not "
                             "tower_d_model / tower_heads (Gemma 4's head_dim); 0: that",
                             minimum=0)
    tower_d_ff: int = _f(0, "the tower's MLP inner size", minimum=0)
    tower_channels: int = _f(3, "input channels of its patch embedding (images: 3; Whisper: "
                             "num_mel_bins)", minimum=1)
    tower_patch: int = _f(0, "side of an image patch (the patch embedding's kernel)", minimum=0)
    tower_temporal: int = _f(1, "frames per patch (Qwen-VL's temporal_patch_size: a 3-D patch "
                             "embedding)", minimum=1)
    tower_positions: int = _f(0, "rows of the tower's learned position table (SigLIP: patches "
                              "per image; Qwen3-VL: num_position_embeddings; Mllama: patches + "
                              "the class token; Whisper: max_source_positions, frozen); 0: none",
                              minimum=0)
    tower_merge: int = _f(1, "patches merged into one token per side (spatial_merge_size: "
                          "Qwen-VL's merger, Mistral 3's patch merger)", minimum=1)
    tower_out: int = _f(0, "the width the tower hands on, when not tower_d_model (Qwen-VL: "
                        "out_hidden_size; Mllama: vision_output_dim, the intermediate layers "
                        "concatenated; Mistral 3: its feature layers concatenated)", minimum=0)
    tower_deepstack: int = _f(0, "Qwen3-VL's deepstack mergers (deepstack_visual_indexes)",
                              minimum=0)
    tower_global_layers: int = _f(0, "Mllama's gated global encoder layers", minimum=0,
                                  maximum=MAX_LAYERS)
    tower_tiles: int = _f(0, "Mllama: tiles per image (max_num_tiles)", minimum=0)
    tower_aspect_ratios: int = _f(0, "Mllama: rows of its tile embeddings (the supported aspect "
                                  "ratios and a padding row)", minimum=0)
    tower_head: bool = _f(False, "SigLIP's attention-pooling head (vision_use_head)")
    tower_conv_channels: int = _f(0, "channels of the tower's downsampling convolutions "
                                  "(Qwen3-ASR's downsample_hidden_size)", minimum=0)
    tower_grid: int = _f(0, "patches per side of the image a tower was built for (GOT-OCR 2's "
                         "image_size / patch_size: its position table and global attention's "
                         "relative positions)", minimum=0)
    tower_window: int = _f(0, "the side of a windowed attention layer's window (GOT-OCR 2's "
                           "window_size; its relative positions); 0: every layer global",
                           minimum=0)
    tower_global_attn: int = _f(0, "layers of the tower attending globally among windowed ones "
                                "(GOT-OCR 2's global_attn_indexes)", minimum=0,
                                maximum=MAX_LAYERS)
    # Gemma 4's audio encoder beside its vision tower (Gemma4AudioModel, a conformer)
    tower_audio_d_model: int = _f(0, "the width of a conformer audio encoder beside the tower "
                                  "(Gemma 4's audio_config hidden_size); 0: none", minimum=0)
    tower_audio_layers: int = _f(0, "the audio encoder's conformer layers", minimum=0,
                                 maximum=MAX_LAYERS)
    tower_audio_heads: int = _f(0, "the audio encoder's attention heads", minimum=0)
    tower_audio_kernel: int = _f(0, "the audio encoder's depthwise convolution kernel "
                                 "(conv_kernel_size)", minimum=0)
    tower_audio_subsample: int = _f(0, "channels of the audio encoder's first subsampling "
                                    "convolution (subsampling_conv_channels[0])", minimum=0)
    tower_audio_channels: int = _f(0, "channels of its second (subsampling_conv_channels[1])",
                                   minimum=0)
    tower_audio_in: int = _f(0, "the width of audio frames projected to d_model without a bias "
                             "beside the tower (Gemma 4 Unified's embed_audio: audio_embed_dim); "
                             "0: none", minimum=0)
    projector: str = _f("none", "what maps the tower's output to the language model's width: "
                        "gemma3 (a norm and a matrix), mistral3 (a norm, a patch merger and a "
                        "two-layer MLP), linear (Mllama's, Qwen2-Audio's, Gemma 4's), mlp (two "
                        "layers, Voxtral's), lfm2_vl (a norm over merged patches, two layers "
                        "through projector_d_ff), kimi_k25 (a norm, then two layers over merged "
                        "patches), qwen3_asr (two biased layers, the second to tower_out), "
                        "got_ocr2 (two stride-2 convolutions and a linear layer), glmasr (two "
                        "biased layers through 2 · d_model), moss (two layers and a LayerNorm) "
                        "or none (the tower's own merger does, Qwen-VL; Whisper's "
                        "decoder reads the encoder by cross-attention)",
                        choices=PROJECTORS)
    projector_bias: bool = _f(True, "biases on the projector's linear layers (Mistral 3: "
                              "multimodal_projector_bias)")
    projector_d_ff: int = _f(0, "the projector's inner width (LFM2-VL: projector_hidden_size)",
                             minimum=0)

    # -- attention over parameters (Vaswani et al. 2017, appendix) -----------------------
    pattn_heads: int = _f(0, "h_p: heads of the attention-over-parameters sublayer", minimum=0)
    pattn_n: int = _f(0, "n_p: trainable key-value pairs per head", minimum=0)
    pattn_d_key: int = _f(0, "d_pk: key size per head", minimum=0)
    pattn_d_value: int = _f(0, "d_pv: value size per head", minimum=0)

    if TYPE_CHECKING:
        _plan: ClassVar[Any]  # the layer plan, set once by plan.plan_of (a slot at run time)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in FIELDS)

    # frozen and slotted: copy and pickle through the fields (the plan is rebuilt on demand)
    def __getstate__(self) -> tuple[Any, ...]:
        return self._values()

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for (_, setter), value in zip(_SETTERS, state, strict=True):
            setter(self, value)
        _set_plan(self, None)

    def __eq__(self, other: object) -> bool:
        return type(other) is ModelSpec and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:  # the fields that differ from their defaults
        changed = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                            if getattr(self, f.name) != f.default)
        return f"ModelSpec({changed})"

    def __post_init__(self) -> None:
        for name, check in _CHECKS:
            check(getattr(self, name))
        self._check_shape()

    # Derived sizes: read these, never the raw Optional fields, in formulas. (Plain
    # properties: functools.cached_property's first read takes a lock on Python 3.11 and costs
    # more than a spec ever saves; make bench.)
    @property
    def trains_with_dropout(self) -> bool:
        """Dropout anywhere in training: the residual streams' or the attention's own."""
        return (self.dropout > 0 or (self.attention_dropout or 0.0) > 0
                or (self.embed_dropout or 0.0) > 0 or self.activation_dropout > 0)

    @property
    def rel_term_count(self) -> int:
        """DeBERTa's disentangled terms in use (rel_terms): 0, 1 or 2."""
        return 0 if self.rel_terms == "none" else self.rel_terms.count("|") + 1

    def rel_rows(self, seq_len: int) -> int:
        """Rows of DeBERTa's relative table a layer projects for a sequence: all of them, or
        (v1, rel_span sequence) 2 · att_span, att_span = min(T, max_relative_positions)."""
        R = self.rel_embeddings
        return min(R, 2 * seq_len) if self.rel_span == "sequence" else R

    def require_runnable(self) -> None:
        """FLOPs and memory follow a forward: refused, with the reason, for a model that cannot
        run one as configured (``unrunnable``)."""
        if self.unrunnable:
            raise TcalcError(self.unrunnable)

    def require_training_memory(self) -> None:
        """Training memory follows the saved activations, which tcalc's rules express for
        the blocks it has measured: refused, naming the block, for one they do not."""
        if self.activations_unmodelled:
            raise TcalcError(f"{self.name}: training memory is not modelled: "
                             f"{self.activations_unmodelled}; parameters, FLOPs and serving "
                             "memory (--inference) are counted")
        if self.costs_unmodelled:
            raise TcalcError(f"{self.name}: training memory is not modelled: "
                             f"{self.costs_unmodelled}; parameters and serving memory "
                             "(--inference) are counted")

    @property
    def costs_unmodelled(self) -> str:
        """What tcalc's FLOPs and training activations do not model in this model's forward:
        ``unmodelled``, else the fields whose tensors are counted as parameters only."""
        if self.unmodelled:
            return self.unmodelled
        named = [name for name, on in (
            ("xl_relative", self.xl_relative), ("global_qkv", self.global_qkv),
            ("value_conv", self.value_conv), ("lang_adapters", self.lang_adapters),
            ("mask_embedding", self.mask_embedding), ("span_conv", self.span_conv),
            ("fourier_mixer", self.fourier_mixer), ("entity_vocab", self.entity_vocab),
            ("entity_queries", self.entity_queries),
            ("head_bottleneck", self.head_bottleneck)) if on]
        return f"{', '.join(named)}: counted as parameters only" if named else ""

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def head_dim(self) -> int:
        if self.d_head is not None:
            return self.d_head
        return self.d_model // self.n_heads if self.n_heads else 0

    @property
    def embed_dim(self) -> int:
        return self.embed_proj_dim if self.embed_proj_dim is not None else self.d_model

    @property
    def side_tables(self) -> tuple[tuple[int, int], ...]:
        """side_embeddings parsed: (rows, width) per table."""
        if not self.side_embeddings.strip():
            return ()
        return tuple((int(r), int(w)) for r, w in (item.split("x") for item in
                                                   self.side_embeddings.split()))

    @property
    def head_width(self) -> int:
        """The MLM head's output width, which its decoder reads."""
        if self.mlm_width is not None:
            return self.mlm_width
        return self.embed_dim if self.embed_factorized else self.d_model

    @property
    def expert_ff(self) -> int:
        return self.d_ff_expert if self.d_ff_expert is not None else self.d_ff

    @property
    def shared_ff(self) -> int:
        return self.d_ff_shared if self.d_ff_shared is not None else self.expert_ff

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def stacks(self) -> tuple[tuple[str, int], ...]:
        """(stack name, layers) in forward order."""
        if self.arch == "encoder-decoder":
            return (("encoder", self.n_encoder_layers), ("decoder", self.n_decoder_layers))
        return ((self.arch, self.n_layers),)

    @property
    def default_seq_len(self) -> int:
        """The context every command assumes when none is given (one default):
        the model's max_positions, or 2048 when it has none."""
        return self.max_positions or 2048

    @property
    def max_context(self) -> int | None:
        """The longest sequence the model can take: its learned position table's rows (GPT-2:
        1,024); None when positions are computed (RoPE, ALiBi, sinusoidal, relative)."""
        return self.max_positions if self.position == "learned" and self.max_positions else None

    def check_context(self, seq_len: int) -> None:
        """A sequence longer than a learned position table cannot be run: refuse it, naming
        the table's size."""
        limit = self.max_context
        if limit is not None and seq_len > limit:
            from transformer_calc.errors import TcalcError

            raise TcalcError(f"--seq-len {seq_len:,}: longer than {self.name}'s learned position "
                             f"table ({limit:,} positions)")

    @property
    def total_layers(self) -> int:
        return sum(n for _, n in self.stacks)

    def replace(self, **changes: Any) -> ModelSpec:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def text_only(self) -> ModelSpec:
        """The language model alone: the encoder tower and its projector left out (their
        fields back to their defaults), the note saying which class that is."""
        if self.tower == "none" and not self.tower_audio_in:
            return self
        match = re.match(r"counted as transformers' (\w+): its .*? and language model "
                         r"\(([\w +]+)\)", self.note)
        note = f"the language model alone, its {self.tower} tower and projector left out"
        if match:
            note = (f"counted as transformers' {match[2]}: the language model of {match[1]} "
                    "alone (its tower and projector left out)" + self.note[match.end():])
        cleared = {f.name: f.default for f in dataclasses.fields(self)
                   if f.name.startswith(("tower", "projector"))}
        return self.replace(**cleared, note=note if match else f"{note}; {self.note}")

    def _check_shape(self) -> None:
        if self.arch == "encoder-decoder":
            if self.n_encoder_layers < 1 or self.n_decoder_layers < 1:
                raise SpecError("n_encoder_layers", "n_encoder_layers and n_decoder_layers >= 1 "
                                "for arch encoder-decoder",
                                (self.n_encoder_layers, self.n_decoder_layers))
            if self.n_layers:
                raise SpecError("n_layers", "0 for arch encoder-decoder (set n_encoder_layers and "
                                "n_decoder_layers)", self.n_layers)
        elif self.n_layers < 1:
            raise SpecError("n_layers", f"an integer >= 1 for arch {self.arch}", self.n_layers)
        if self.n_heads and self.d_head is None and self.d_model % self.n_heads:
            raise SpecError("n_heads", f"a divisor of d_model={self.d_model} (or set d_head)",
                            self.n_heads)
        if self.n_heads and self.n_heads % self.kv_heads:
            raise SpecError("n_kv_heads", f"a divisor of n_heads={self.n_heads}", self.n_kv_heads)
        if not 0.0 <= self.dropout < 1.0:
            raise SpecError("dropout", "a probability in [0, 1)", self.dropout)
        if self.embed_dropout is not None and not 0.0 <= self.embed_dropout < 1.0:
            raise SpecError("embed_dropout", "a probability in [0, 1)", self.embed_dropout)
        if not 0.0 <= self.activation_dropout < 1.0:
            raise SpecError("activation_dropout", "a probability in [0, 1)",
                            self.activation_dropout)
        if self.attention_mechanism != "softmax":
            if self.kv_lora_rank or self.arch == "encoder-decoder":
                raise SpecError("attention_mechanism", "softmax for latent attention and "
                                "encoder-decoders (not modelled otherwise)",
                                self.attention_mechanism)
            if self.attention_mechanism == "linformer" and not self.max_positions:
                raise SpecError("max_positions", "the length Linformer projects from (>= 1)",
                                self.max_positions)
        if not 0.0 <= self.rotary_fraction <= 1.0:
            raise SpecError("rotary_fraction", "a number in [0, 1]", self.rotary_fraction)
        if self.n_experts:
            if not (1 <= self.top_k <= self.n_experts or self.top_k == 0 and self.unrunnable):
                raise SpecError("top_k", f"1 <= top_k <= n_experts={self.n_experts}", self.top_k)
            if self.ffn == "param_attention":
                raise SpecError("n_experts", "0 with ffn: param_attention", self.n_experts)
            if self.attn_experts and self.n_heads != self.top_k * self.kv_heads:
                raise SpecError("n_heads", f"top_k · n_kv_heads = {self.top_k * self.kv_heads} "
                                "with attn_experts (each routed expert runs n_kv_heads query "
                                "heads)", self.n_heads)
        elif self.top_k:
            raise SpecError("top_k", "0 when n_experts is 0 (a dense FFN)", self.top_k)
        for key in ("attn_experts", "moe_output_bias"):
            if getattr(self, key) and not self.n_experts:
                raise SpecError(key, "false when n_experts is 0 (no experts to route to)",
                                True)
        if self.ffn == "param_attention":
            for key in ("pattn_heads", "pattn_n", "pattn_d_key", "pattn_d_value"):
                if getattr(self, key) < 1:
                    raise SpecError(key, "an integer >= 1 with ffn: param_attention",
                                    getattr(self, key))
        if self.parallel_norms > 2:
            raise SpecError("parallel_norms", "1 or 2", self.parallel_norms)
        if (self.classifier == "none") != (self.num_labels == 0):
            raise SpecError("num_labels", "an integer >= 1 with a classifier, 0 without one",
                            self.num_labels)
        if self.classifier != "none" and (self.lm_head or self.mlm_head):
            raise SpecError("classifier", "none with lm_head or mlm_head (a model has one head)",
                            self.classifier)
        if self.lm_head_bias and not self.lm_head:
            raise SpecError("lm_head_bias", "false when lm_head is false", True)
        if self.embed_factorized and (self.embed_proj_dim is None
                                      or self.arch == "encoder-decoder"):
            raise SpecError("embed_factorized", "false unless embed_proj_dim is set and arch "
                            "is encoder or decoder", True)
        if self.mlm_width is not None and (not self.mlm_head or (
                self.tie_embeddings and self.mlm_width != self.embed_dim)):
            raise SpecError("mlm_width", "null unless mlm_head, and equal to the token "
                            f"table's width ({self.embed_dim}) when tie_embeddings",
                            self.mlm_width)
        if self.layer_groups and (self.arch == "encoder-decoder" or self.layer_attention
                                  or self.layer_ffn or self.mixer != "none"
                                  or self.n_layers % self.layer_groups):
            raise SpecError("layer_groups", f"0, or a divisor of n_layers={self.n_layers} in a "
                            "decoder or encoder whose layers are all alike", self.layer_groups)
        if self.differential and (self.mla or self.attention_mechanism != "softmax"
                                  or self.kv_heads % 2 or self.arch == "encoder-decoder"):
            raise SpecError("differential", "false unless the attention is softmax (not MLA) "
                            "with an even number of K/V heads, outside an encoder-decoder",
                            True)
        if self.kv_shared_layers and (self.kv_shared_layers >= self.n_layers
                                      or self.arch != "decoder" or self.mixer != "none"):
            raise SpecError("kv_shared_layers", f"fewer than n_layers={self.n_layers} in a "
                            "decoder of attention layers (an earlier layer computes the keys "
                            "they reuse)", self.kv_shared_layers)
        if self.kv_shared_wide_ffn and not self.kv_shared_layers:
            raise SpecError("kv_shared_wide_ffn", "false without kv_shared_layers", True)
        if (self.altup_inputs or self.laurel_rank or self.sparse_ffn_layers) \
                and self.arch != "decoder":
            raise SpecError("altup_inputs" if self.altup_inputs else "laurel_rank"
                            if self.laurel_rank else "sparse_ffn_layers",
                            "0 unless arch is decoder (Gemma 3n's)", self.altup_inputs
                            or self.laurel_rank or self.sparse_ffn_layers)
        if self.altup_inputs == 1:
            raise SpecError("altup_inputs", "0 or an integer >= 2 (streams)", 1)
        if self.sparse_ffn_layers > self.n_layers:
            raise SpecError("sparse_ffn_layers", f"at most n_layers={self.n_layers}",
                            self.sparse_ffn_layers)
        if self.per_layer_input and (self.per_layer_vocab < 1 or self.arch != "decoder"):
            raise SpecError("per_layer_vocab", "an integer >= 1 with per_layer_input, in a "
                            "decoder", self.per_layer_vocab)
        if self.moe_beside_dense and not (self.n_experts and self.d_ff):
            raise SpecError("moe_beside_dense", "false unless there are experts (n_experts) "
                            "and a dense FFN (d_ff) to run beside", True)
        if self.moe_shortcut and not self.moe_beside_dense:
            raise SpecError("moe_shortcut", "false unless moe_beside_dense (the shortcut is how "
                            "the experts run beside the dense FFN)", True)
        if self.zero_experts and not self.n_experts:
            raise SpecError("zero_experts", "0 without routed experts (n_experts)",
                            self.zero_experts)
        for key in ("global_head_dim", "global_kv_heads", "global_k_eq_v"):
            if getattr(self, key) not in (None, False) and (self.mla or self.arch == "encoder-"
                                                             "decoder"):
                raise SpecError(key, "unset with MLA or in an encoder-decoder", getattr(self, key))
        if self.global_kv_heads and self.n_heads % self.global_kv_heads:
            raise SpecError("global_kv_heads", f"a divisor of n_heads={self.n_heads}",
                            self.global_kv_heads)
        if self.idle_cross_layers and (self.arch != "decoder" or self.mixer != "none"
                                       or not self.n_heads or not self.d_ff):
            raise SpecError("idle_cross_layers", "0 unless arch is decoder with attention and "
                            "a dense FFN", self.idle_cross_layers)
        if self.extra_token_rows and (self.tie_embeddings or self.arch == "encoder-decoder"):
            raise SpecError("extra_token_rows", "0 with tie_embeddings or in an encoder-decoder "
                            "(a tied head predicts every row)", self.extra_token_rows)
        if self.side_embeddings.strip():
            items = self.side_embeddings.split()
            if not all(re.fullmatch(r"[1-9]\d{0,12}x[1-9]\d{0,12}", i) for i in items):
                raise SpecError("side_embeddings", "'rows x width' items like '910x768 "
                                "24858x512' (integers >= 1)", self.side_embeddings)
        if self.side_concat and not self.side_embeddings.strip():
            raise SpecError("side_concat", "false without side_embeddings", True)
        if self.encoder_vocab_size not in (None, self.vocab_size) and (
                self.arch != "encoder-decoder" or self.tie_encoder_decoder):
            raise SpecError("encoder_vocab_size", "null or equal to vocab_size unless arch is "
                            "encoder-decoder with tie_encoder_decoder false (one shared "
                            "table has one size)", self.encoder_vocab_size)
        if self.mlm_head and self.arch == "encoder-decoder":
            raise SpecError("mlm_head", "false in an encoder-decoder", True)
        if not self.first_attn_norm and (self.norm_position != "pre" or self.parallel_block
                                         or self.sandwich_norm):
            raise SpecError("first_attn_norm", "true unless the layers are pre-norm (neither "
                            "parallel nor sandwich)", False)
        if self.qk_norm == "l2" and (self.mla or self.arch == "encoder-decoder"):
            raise SpecError("qk_norm", "none, head or width with MLA or in an encoder-decoder "
                            "(l2 is Llama 4's, on plain attention)", "l2")
        if self.mla:
            for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, key) < 1:
                    raise SpecError(key, "an integer >= 1 with kv_lora_rank (MLA)",
                                    getattr(self, key))
        elif self.v_head_dim and (self.attention_mechanism != "softmax" or self.differential
                                  or self.global_k_eq_v or self.qkv_conv or self.fused_qkv
                                  or self.arch == "encoder-decoder"):
            raise SpecError("v_head_dim", "0 unless the attention is MLA, or softmax with "
                            "separate Q, K and V projections (no differential attention, "
                            "global_k_eq_v, qkv_conv or fused_qkv) outside an "
                            "encoder-decoder", self.v_head_dim)
        if self.sinks_sliding_only and not (self.attention_sinks and self.sliding_window):
            raise SpecError("sinks_sliding_only", "false unless attention_sinks and "
                            "sliding_window are set", True)
        if self.index_heads:
            # DeepseekV32Indexer: wq_b reads the query latent, RoPE on d_rope of its head
            if not (self.mla and self.q_lora_rank):
                raise SpecError("index_heads", "0 unless the attention is MLA with a query "
                                "latent (kv_lora_rank and q_lora_rank >= 1): the indexer's "
                                "queries read it", self.index_heads)
            if self.index_head_dim < max(1, self.qk_rope_head_dim):
                raise SpecError("index_head_dim", f"an integer >= qk_rope_head_dim="
                                f"{self.qk_rope_head_dim} with index_heads (its keys are rotated "
                                "over that width)", self.index_head_dim)
            if self.index_topk < 1:
                raise SpecError("index_topk", "an integer >= 1 with index_heads",
                                self.index_topk)
        if self.sub_norms and (self.n_experts or self.mla or self.ffn == "param_attention"):
            raise SpecError("sub_norms", "false with experts, MLA or ffn: param_attention "
                            "(BitNet's sub-norms sit in a dense FFN and a plain attention)",
                            True)
        if self.last_layer_o_bias and (self.bias_o or self.arch == "encoder-decoder"):
            raise SpecError("last_layer_o_bias", "false with bias_o (every layer has one) or in an "
                            "encoder-decoder", True)
        if self.encoder_local_block and self.arch != "encoder-decoder":
            raise SpecError("encoder_local_block", "0 unless arch is encoder-decoder (LongT5's "
                            "local attention is its encoder's)", self.encoder_local_block)
        if self.encoder_global_block and not self.encoder_local_block:
            raise SpecError("encoder_global_block", "0 unless encoder_local_block is set "
                            "(transient-global attention is local attention with global "
                            "tokens)", self.encoder_global_block)
        if self.moe_post_norm and not self.n_experts:
            raise SpecError("moe_post_norm", "false without experts (n_experts >= 1)", True)
        if self.idle_cross_attention and self.arch != "decoder":
            raise SpecError("idle_cross_attention", "false unless arch is decoder (an "
                            "encoder-decoder runs its cross-attention)", True)
        if self.mixer != "none":
            _check_mixer(self)
        if self.tower != "none" or self.projector != "none":
            _check_tower(self)
        if self.tower_audio_layers:
            _check_audio(self)
        if self.layer_attention or self.layer_ffn or self.mixer != "none" or not self.n_heads \
                or not self.d_ff:
            from transformer_calc.plan import check_patterns

            check_patterns(self)


def _check_tower(spec: ModelSpec) -> None:
    """The sizes each tower needs (its module in transformers 5.23 reads them)."""
    if spec.tower == "none":
        raise SpecError("projector", "none without a tower", spec.projector)
    needs = ["tower_d_model", "tower_layers", "tower_heads", "tower_d_ff"]
    if spec.tower in ("gemma4_unified", "fuyu"):  # no layers: patches straight on
        needs = ["tower_d_model"]
    if spec.tower == "qwen3_asr":
        needs.append("tower_conv_channels")
    elif spec.tower == "glmasr":
        pass
    elif spec.tower == "got_ocr2":
        needs += ["tower_patch", "tower_grid", "tower_out"]
    elif spec.tower != "whisper":
        needs.append("tower_patch")
    if spec.tower in ("qwen3_vl", "siglip", "mllama", "gemma4", "gemma4_unified"):
        needs.append("tower_positions")
    if spec.tower == "mllama":
        needs += ["tower_tiles", "tower_aspect_ratios"]
    for key in needs:
        if getattr(spec, key) < 1:
            raise SpecError(key, f"an integer >= 1 with tower: {spec.tower}", getattr(spec, key))
    if spec.tower_heads and spec.tower_d_model % spec.tower_heads and not spec.tower_head_dim:
        raise SpecError("tower_heads", f"a divisor of tower_d_model={spec.tower_d_model}",
                        spec.tower_heads)
    if spec.tower_kv_heads and spec.tower_heads % spec.tower_kv_heads:
        raise SpecError("tower_kv_heads", f"a divisor of tower_heads={spec.tower_heads}",
                        spec.tower_kv_heads)
    if spec.projector == "lfm2_vl" and spec.projector_d_ff < 1:
        raise SpecError("projector_d_ff", "an integer >= 1 with projector: lfm2_vl",
                        spec.projector_d_ff)


def _check_audio(spec: ModelSpec) -> None:
    """The sizes Gemma 4's audio encoder reads (Gemma4AudioModel in transformers 5.23)."""
    for key in ("tower_audio_d_model", "tower_audio_heads", "tower_audio_kernel",
                "tower_audio_subsample", "tower_audio_channels", "tower_audio_in"):
        if getattr(spec, key) < 1:
            raise SpecError(key, "an integer >= 1 with tower_audio_layers", getattr(spec, key))
    if spec.tower_audio_d_model % spec.tower_audio_heads:
        raise SpecError("tower_audio_heads", "a divisor of tower_audio_d_model="
                        f"{spec.tower_audio_d_model}", spec.tower_audio_heads)


def _check_mixer(spec: ModelSpec) -> None:
    """The sizes each recurrent mixer needs (its module in transformers 5.23 reads them)."""
    needs = {"mamba": ("ssm_inner", "ssm_state", "ssm_conv", "ssm_dt_rank"),
             "mamba2": ("ssm_inner", "ssm_state", "ssm_heads", "ssm_groups", "ssm_conv"),
             "gated_deltanet": ("ssm_inner", "ssm_state", "ssm_heads", "ssm_groups",
                                "ssm_conv"),
             "short_conv": ("ssm_conv",),
             "lightning": ("ssm_inner", "ssm_heads"),
             "kda": ("ssm_inner", "ssm_state", "ssm_heads", "ssm_conv")}[spec.mixer]
    for key in needs:
        if getattr(spec, key) < 1:
            raise SpecError(key, f"an integer >= 1 with mixer: {spec.mixer}", getattr(spec, key))
    if spec.mixer in ("mamba2", "gated_deltanet", "lightning", "kda") \
            and spec.ssm_inner % spec.ssm_heads:
        raise SpecError("ssm_heads", f"a divisor of ssm_inner={spec.ssm_inner}", spec.ssm_heads)
    if spec.mixer == "mamba2" and spec.ssm_heads % spec.ssm_groups:
        raise SpecError("ssm_groups", f"a divisor of ssm_heads={spec.ssm_heads}",
                        spec.ssm_groups)
    if spec.mixer == "kda" and (spec.ssm_groups != spec.ssm_heads
                                or spec.ssm_inner != spec.ssm_heads * spec.ssm_state):
        raise SpecError("ssm_groups", f"ssm_heads={spec.ssm_heads}, and ssm_inner ssm_heads · "
                        "ssm_state (KDA's keys and values share its heads and size)",
                        spec.ssm_groups)
    if spec.mixer == "gated_deltanet" and spec.ssm_heads % spec.ssm_groups:
        raise SpecError("ssm_groups", f"a divisor of ssm_heads={spec.ssm_heads} (value heads "
                        "share key heads)", spec.ssm_groups)


ARCH_FIELDS: tuple[dataclasses.Field[Any], ...] = tuple(
    f for f in dataclasses.fields(ModelSpec) if f.metadata["arch"])
FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(ModelSpec)}


def field_type(f: dataclasses.Field[Any]) -> type:
    """The scalar type a field holds (int, float, bool or str), Optional stripped."""
    t = str(f.type)
    for name, py in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if t.startswith(name):
            return py
    raise AssertionError(f"unhandled field type {t}")  # a bug in this module, not user input


def optional(f: dataclasses.Field[Any]) -> bool:
    return "None" in str(f.type)


def _checker(f: dataclasses.Field[Any]) -> Any:
    """A validator for one field, built once (specs are built in loops: make bench)."""
    name, typ, can_be_none = f.name, field_type(f), optional(f)
    minimum, choices = f.metadata["minimum"], f.metadata["choices"]
    maximum = f.metadata["maximum"] or MAX_SIZE

    def check(value: Any) -> None:
        if value is None and can_be_none:
            return
        if typ is bool:
            if value is not True and value is not False:
                raise SpecError(name, "true or false", value)
        elif typ is int:
            # bool is an int subclass in Python; a YAML 'yes' must not pass as 1.
            if type(value) is not int:
                raise SpecError(name, "an integer", value)
            if minimum is not None and value < minimum:
                raise SpecError(name, f"an integer >= {minimum}", value)
            if value > maximum:
                raise SpecError(name, f"an integer <= {maximum:,}" + (
                    " (2^40)" if maximum == MAX_SIZE else ""), value)
        elif typ is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SpecError(name, "a number", value)
        elif not isinstance(value, str):
            raise SpecError(name, "a string", value)
        elif choices and value not in choices:
            raise SpecError(name, "one of " + ", ".join(choices), value)

    return check


_CHECKS = tuple((f.name, _checker(f)) for f in dataclasses.fields(ModelSpec))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelSpec)}


def _init(self: ModelSpec, **values: Any) -> None:
    """ModelSpec(field=value, ...): every field has a default; a name that is not a field is
    a TypeError, as the generated __init__ would raise."""
    unknown = values.keys() - _DEFAULTS.keys()
    if unknown:
        raise TypeError(f"ModelSpec.__init__() got an unexpected keyword argument "
                        f"'{min(unknown)}'")
    get = values.get  # frozen: set once, here, through the slots' own setters
    for name, setter in _SETTERS:
        setter(self, get(name, _DEFAULTS[name]))
    _set_plan(self, None)
    self.__post_init__()


_SETTERS: tuple[tuple[str, Callable[[ModelSpec, Any], None]], ...] = tuple(
    (f.name, ModelSpec.__dict__[f.name].__set__) for f in dataclasses.fields(ModelSpec))
_set_plan: Callable[[ModelSpec, Any], None] = ModelSpec.__dict__["_plan"].__set__
if not TYPE_CHECKING:
    ModelSpec.__init__ = _init
