"""The Llama-shaped model types whose forward differs from Llama's in a few places, each
as a mapper from its ModelSpec to the Llama graph's flags (families/llama.py) or Cohere's
(families/cohere.py). A mapper sets its model type's own fields aside, asks the Llama
mapper (base: evaluate._llama, which refuses any field it does not read) for the rest, and
adds the flags; None where the spec is not that model type's layout (family_of then tries
the other families, and the rules answer)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from transformer_calc.graph.families.cohere import Cohere
from transformer_calc.graph.families.llama import Llama
from transformer_calc.spec import ModelSpec

# the Llama mapper: a spec -> its Llama graph, or None
Base = Callable[[ModelSpec], Llama | None]


def _sliding(spec: ModelSpec, base: Base) -> Llama | None:
    """Qwen3Model and MinistralModel: Llama's layers, each with a causal or a sliding-window
    mask as layer_types says (layer_attention: F full, S sliding); otherwise Llama's."""
    from transformer_calc.plan import layer_kinds_in_order

    if not spec.sliding_window:
        return None
    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    family = base(replace(spec, sliding_window=0, layer_attention=""))
    if family is None or set(kinds) - {"F", "S"}:
        return None
    return replace(family, window=spec.sliding_window,
                   kinds=kinds if len(set(kinds)) > 1 else kinds[0])


def _olmo(spec: ModelSpec, base: Base) -> Llama | None:
    """OlmoModel: Llama's layers with OlmoLayerNorm (weightless, over an fp32 copy: the
    spec's layernorm_noaffine with norm_fp32) and Olmo's fp32 RoPE (rope_fp32)."""
    if not (spec.norm == "layernorm_noaffine" and spec.norm_fp32 and spec.rope_fp32):
        return None
    family = base(replace(spec, norm="rmsnorm", norm_fp32=False))
    return None if family is None else replace(family, norm="olmo")


def _bitnet(spec: ModelSpec, base: Base) -> Llama | None:
    """BitNetModel: Llama's layers with a squared-ReLU MLP and an RMSNorm before each output
    projection (sub_norms: attn_sub_norm, ffn_sub_norm)."""
    if not (spec.sub_norms and spec.activation == "relu2" and spec.ffn == "gated"):
        return None
    family = base(replace(spec, sub_norms=False, activation="silu"))
    return None if family is None else replace(family, activation="relu2", sub_norms=True)


def _nemotron(spec: ModelSpec, base: Base) -> Llama | None:
    """NemotronModel: NemotronLayerNorm1P (a LayerNorm with weight + 1 and a bias) before
    attention, before the MLP and at the end; an ungated squared-ReLU MLP; RoPE on the
    first int(d_head · rotary_fraction) of each head, concatenated with the rest."""
    dr = int(spec.head_dim * spec.rotary_fraction)
    if not (spec.norm == "layernorm" and spec.ffn == "plain" and spec.activation == "relu2"
            and spec.rope_concat and dr > 0 and dr % 2 == 0):
        return None
    family = base(replace(spec, norm="rmsnorm", ffn="gated", activation="silu",
                          rope_concat=False, rotary_fraction=1.0))
    if family is None:
        return None
    return replace(family, norm="layer1p", gated=False, activation="relu2",
                   rope_concat=True, partial_rotary=dr < spec.head_dim,
                   dr=dr if dr < spec.head_dim else 0)


def _apertus(spec: ModelSpec, base: Base) -> Llama | None:
    """ApertusModel: Llama's layers (their norms named attention_layernorm and
    feedforward_layernorm) with an ungated xIELU MLP and q_norm, k_norm over each head after
    the transpose."""
    if not (spec.ffn == "plain" and spec.activation == "xielu"
            and spec.qk_norm in ("none", "head")):
        return None
    family = base(replace(spec, ffn="gated", activation="silu"))
    if family is None:
        return None
    return replace(family, gated=False, activation="xielu",
                   qk_norm="head_t" if spec.qk_norm == "head" else "none",
                   norm_names=("attention_layernorm", "feedforward_layernorm"))


def _nanochat(spec: ModelSpec, base: Base) -> Llama | None:
    """NanoChatModel: weightless RMSNorms (the embeddings normed by model.norm too; q_norm and
    k_norm over each head after RoPE, whose rotate_half is cat((x2, -x1))), an ungated
    squared-ReLU MLP of fc1 and fc2, and the logits soft-capped."""
    if not (spec.norm == "rmsnorm_noaffine" and spec.embedding_norm and spec.qk_norm == "l2"
            and spec.ffn == "plain" and spec.activation == "relu2"):
        return None
    family = base(replace(spec, norm="rmsnorm", embedding_norm=False,
                          qk_norm="none", ffn="gated", activation="silu",
                          logit_softcapping=0.0))
    if family is None:
        return None
    return replace(family, norm="rms_plain", embed_norm=True, qk_norm="after_rope",
                   gated=False, activation="relu2", mlp_names=("fc1", "fc2"),
                   final_softcap=spec.logit_softcapping or 0.0,
                   rotate_flipped=True)


def _cohere(spec: ModelSpec, base: Base) -> Cohere | None:
    """CohereModel and Cohere2Model: parallel layers under CohereLayerNorm (the spec's
    layernorm_nobias, norm_manual, parallel_block), the gated SiLU MLP, logits scaled by
    logit_scale (a Python number: no tensor kept, whatever its value); Cohere's q/k norms
    (qk_norm width: over each head, weighted per head); Cohere 2's sliding and full layers
    (layer_attention S and N: no RoPE in full layers), without q/k norms."""
    from transformer_calc.plan import layer_kinds_in_order

    v2 = spec.model_type == "cohere2"
    if not (spec.norm == "layernorm_nobias" and spec.norm_manual and spec.parallel_block
            and not spec.norm_manual_cast and spec.qk_norm in ("none", "width")
            and not (v2 and spec.qk_norm == "width")):
        return None
    kinds = "".join(k[0] for k in layer_kinds_in_order(spec, spec.n_layers))
    if set(kinds) - ({"S", "N"} if v2 else {"F"}):
        return None
    family = base(replace(
        spec, norm="rmsnorm", norm_manual=False, parallel_block=False, qk_norm="none",
        sliding_window=0, layer_attention=""))
    if family is None:
        return None
    return Cohere(**{**vars(family), "window": spec.sliding_window,
                     "kinds": kinds if len(set(kinds)) > 1 else kinds[0]},
                  cohere_qk_norm=spec.qk_norm == "width")


def _diffllama(spec: ModelSpec, base: Base) -> Llama | None:
    """DiffLlamaModel: Llama's layers with differential attention (two calls over the
    halves of V's heads, repeated; DiffLlamaAttention wants an even number of K/V heads and
    no attention dropout)."""
    Hkv = spec.n_kv_heads or spec.n_heads
    if not spec.differential or Hkv % 2 or spec.attention_dropout:
        return None
    family = base(replace(spec, differential=False))
    return None if family is None else replace(family, differential=True)


def _mllama(spec: ModelSpec, base: Base) -> Llama | None:
    """MllamaForCausalLM without images: Llama's layers where the self-attention layers are
    (n_layers), the idle cross-attention layers (idle_cross_layers) built beside them, the
    token table extra_token_rows longer than the vocabulary."""
    from transformer_calc.graph.families.mllama import Mllama

    if not (spec.idle_cross_layers and spec.extra_token_rows):
        return None
    family = base(replace(spec, idle_cross_layers=0, extra_token_rows=0))
    if family is None:
        return None
    return Mllama(**{**vars(family), "extra_rows": spec.extra_token_rows},
                  Lc=spec.idle_cross_layers)


def _dropouts(spec: ModelSpec) -> tuple[ModelSpec, float, float]:
    """The spec with its residual and embedding dropouts set aside (the attention's kept
    apart), the residual probability and the embeddings'."""
    attention = spec.dropout if spec.attention_dropout is None else spec.attention_dropout
    embed = spec.dropout if spec.embed_dropout is None else spec.embed_dropout
    return (replace(spec, dropout=0.0, embed_dropout=None, attention_dropout=attention),
            spec.dropout, embed)


def _starcoder2(spec: ModelSpec, base: Base) -> Llama | None:
    """Starcoder2Model: Llama's layers under nn.LayerNorm (with a bias), an ungated MLP of
    c_fc and c_proj (gelu_pytorch_tanh by default), biases as use_bias says, dropout over
    the embeddings (embedding_dropout) and over o_proj's and the MLP's outputs
    (residual_dropout); a sliding window over every layer where sliding_window is set
    (create_sliding_window_causal_mask)."""
    if not (spec.norm == "layernorm" and spec.ffn == "plain"
            and spec.activation in ("gelu_tanh", "silu", "relu2")):
        return None
    plain, residual, embed = _dropouts(replace(spec, norm="rmsnorm", ffn="gated",
                                               activation="silu"))
    family = _sliding(plain, base) if plain.sliding_window else base(plain)
    if family is None:
        return None
    return replace(family, layer_norm=True, gated=False, activation=spec.activation,
                   mlp_names=("c_fc", "c_proj"), residual_dropout=residual,
                   embed_dropout=embed)


def _seed_oss(spec: ModelSpec, base: Base) -> Llama | None:
    """SeedOssModel: Llama's layers with dropout (residual_dropout) over o_proj's output
    and over the MLP's, beside the attention's own (attention_dropout)."""
    plain, residual, embed = _dropouts(spec)
    family = base(plain)
    if family is None or embed != residual:  # (no embedding dropout: one key for both)
        return None
    return replace(family, residual_dropout=residual)


def _plain_mlp(spec: ModelSpec, base: Base) -> Llama | None:
    """ArceeModel and Jais2Model: Llama's layers with an ungated MLP,
    down_proj(act_fn(up_proj(x))) (ReLU² by default); Jais2's norms are nn.LayerNorm (with a
    bias), Arcee's LlamaRMSNorm."""
    norm = {"arcee": "rmsnorm", "jais2": "layernorm"}[spec.model_type]
    if not (spec.norm == norm and spec.ffn == "plain"
            and spec.activation in ("relu2", "silu", "gelu_tanh")):
        return None
    family = base(replace(spec, norm="rmsnorm", ffn="gated", activation="silu"))
    if family is None:
        return None
    return replace(family, layer_norm=norm == "layernorm", gated=False,
                   activation=spec.activation)


def _glm(spec: ModelSpec, base: Base) -> Llama | None:
    """GlmModel and Glm4Model: Llama's layers with the fused gate_up_proj and GLM's RoPE, the
    first int(head_dim · partial_rotary_factor) of each head rotated in interleaved pairs
    (rope_interleaved); Glm4's layers add an RMSNorm over the attention's and over the MLP's
    output (post_self_attn_layernorm, post_mlp_layernorm: the spec's sandwich_norm)."""
    dr = int(spec.head_dim * spec.rotary_fraction)
    v4 = spec.model_type == "glm4"
    if not (spec.rope_concat and spec.fused_gate_up and spec.sandwich_norm == v4
            and dr > 0 and dr % 2 == 0):
        return None
    family = base(replace(spec, rope_concat=False, rotary_fraction=1.0, sandwich_norm=False))
    if family is None:
        return None
    return replace(family, rope_interleaved=True, dr=dr,
                   post_norms=("post_self_attn_layernorm", "post_mlp_layernorm") if v4
                   else ("", ""))


def _hyperclovax(spec: ModelSpec, base: Base) -> Llama | None:
    """HyperCLOVAXModel: Llama's layers with an RMSNorm over each sublayer's output before the
    residual add (use_post_norm: post_norm1, post_norm2) and the muP multipliers
    (embedding_multiplier, residual_multiplier, logits_scaling: products with Python
    numbers, which keep nothing; attention_multiplier: the attention's scale)."""
    family = base(replace(spec, sandwich_norm=False))
    if family is None:
        return None
    return replace(family, post_norms=("post_norm1", "post_norm2") if spec.sandwich_norm
                   else ("", ""))


def _eurobert(spec: ModelSpec, base: Base) -> Llama | None:
    """EuroBertForMaskedLM: Llama's layers read bidirectionally (EuroBertAttention's is_causal
    False, no mask without padding), lm_head's logits under ForMaskedLMLoss; its head's bias
    (mlp_bias) is refused (not transcribed)."""
    if spec.arch != "encoder" or spec.lm_head_bias:
        return None
    family = base(replace(spec, arch="decoder"))
    return None if family is None else replace(family, bidirectional=True)


# the Llama-shaped model types whose differences from Llama the Llama graph (or Cohere's)
# transcribes: model_type -> its mapper (asked before evaluate._llama, which reads none of
# their fields)
def _ernie4_5(spec: ModelSpec, base: Base) -> Llama | None:
    """Ernie4_5Model (models/ernie4_5/modeling_ernie4_5.py): Llama's layers with the
    interleaved ("GLM") RoPE in fp32 over fp32 tables (llama.glm_rotary), its biases
    (use_bias) where Llama's are."""
    family = base(spec)
    return None if family is None else replace(family, rope_glm=True)


MAPPERS: dict[str, Callable[[ModelSpec, Base], Llama | None]] = {
    "qwen3": _sliding, "ministral": _sliding, "olmo": _olmo, "bitnet": _bitnet,
    "nemotron": _nemotron, "apertus": _apertus, "nanochat": _nanochat, "cohere": _cohere,
    "cohere2": _cohere, "diffllama": _diffllama, "mllama": _mllama, "ernie4_5": _ernie4_5,
    "starcoder2": _starcoder2, "seed_oss": _seed_oss, "arcee": _plain_mlp,
    "jais2": _plain_mlp, "glm": _glm, "glm4": _glm, "hyperclovax": _hyperclovax,
    "eurobert": _eurobert}
