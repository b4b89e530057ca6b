"""Whisper's text decoder as transformers 5.23 runs it: models/whisper/modeling_whisper.py
(WhisperForCausalLM, WhisperDecoderWrapper, WhisperDecoder, WhisperDecoderLayer,
WhisperAttention with eager_attention_forward or integrations/sdpa_attention.py,
WhisperPositionalEmbedding). The decoder alone: its layers' cross-attention (encoder_attn)
is built but idle without encoder states. WhisperForConditionalGeneration (the convolutional
audio encoder in front) is not this graph: family_of leaves it to the rules.

The measurement's forward is model(input_ids=ids, labels=ids): the decoder over ids,
proj_out tied to the token table, CrossEntropyLoss over the logits and the labels unshifted.
No attention_mask: create_causal_mask gives the (B, 1, T, T) mask under eager and None
under SDPA (is_causal)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.tensor import I64, Tensor

ACTIVATIONS = {"gelu": ops.gelu, "relu": ops.relu, "silu": ops.silu}


@dataclass(frozen=True)
class Whisper:
    """WhisperConfig's decoder keys. Symbols: V vocab, P max_target_positions, E d_model,
    H decoder_attention_heads, dh = E / H, F decoder_ffn_dim, L decoder_layers. act:
    activation_function. (scale_embedding's product with √E keeps nothing: not read.)"""

    V: int
    P: int
    E: int
    H: int
    F: int
    L: int
    act: str = "gelu"
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "L": self.L}


def forward(m: Builder, cfg: Whisper) -> Tensor:
    """WhisperForCausalLM.forward(input_ids=ids, labels=ids): model.decoder, proj_out (tied
    to model.decoder.embed_tokens), CrossEntropyLoss over logits.view(-1, V) and
    labels.view(-1) in the logits' dtype."""
    B, T, V = m["B"], m["T"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"), m.module("decoder"):
        h = _embed(m, cfg, ids)
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        h = m.layers("layers", lambda x: _layer(m, cfg, x, mask), h,
                     () if mask is None else (mask,))
        h = m.layer_norm("layer_norm", h)
    with m.module("proj_out"):
        logits = ops.linear(h, m.tied("model.decoder.embed_tokens.weight"))
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _embed(m: Builder, cfg: Whisper, ids: Tensor) -> Tensor:
    """WhisperDecoder.forward's embeddings: embed_tokens(ids) (the decoder's embed_scale
    is not applied to them); position_ids = arange(T).unsqueeze(0).repeat(B, 1) (a new
    (B, T) int64 tensor); WhisperPositionalEmbedding with position_ids: weight[position_ids]
    (an index, which keeps the indices for the table's gradient); the sum, dropout."""
    B, T, E = m["B"], m["T"], m["E"]
    x = m.embedding("embed_tokens", ids, m["V"], E)
    with m.trace.no_grad():
        positions = m.trace.tensor((B, T), I64, False, name="position_ids")
    with m.module("embed_positions"):
        pos = ops.index(m.param("weight", m["P"], E), [positions])
    return m.dropout(ops.add(x, pos), cfg.dropout)


def _layer(m: Builder, cfg: Whisper, h: Tensor, mask: Tensor | None) -> Tensor:
    """WhisperDecoderLayer.forward, pre-norm: self_attn_layer_norm, self-attention, dropout,
    residual; (encoder_attn idle: its parameters, no ops); final_layer_norm, fc1, the
    activation, activation dropout, fc2, dropout, residual."""
    E = m["E"]
    with m.module("self_attn"):
        a = _attention(m, cfg, m.layer_norm("self_attn_layer_norm", h), mask)
    h = ops.add(h, m.dropout(a, cfg.dropout))
    with m.module("encoder_attn"):  # built with the layer, idle without encoder states
        for name, bias in (("k_proj", False), ("v_proj", True), ("q_proj", True),
                           ("out_proj", True)):
            m.idle_linear(name, E, E, bias)
    with m.module("encoder_attn_layer_norm"):
        m.param("weight", E)
        m.param("bias", E)
    x = m.layer_norm("final_layer_norm", h)
    x = ACTIVATIONS[cfg.act](m.linear("fc1", x, m["F"], True))
    x = m.dropout(x, cfg.activation_dropout)
    x = m.dropout(m.linear("fc2", x, E, True), cfg.dropout)
    return ops.add(h, x)


def _attention(m: Builder, cfg: Whisper, x: Tensor, mask: Tensor | None) -> Tensor:
    """WhisperAttention.forward (self-attention): (q_proj(x) · dh^-0.5) viewed as
    (B, T, H, dh), transposed and made contiguous (a copy); k_proj (no bias) and v_proj
    the same; the DynamicCache's update under use_cache (concatenating K and V: copies);
    the attention interface with scaling 1.0; the output reshaped, contiguous, out_proj."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]

    def heads(y: Tensor) -> Tensor:
        return ops.contiguous(ops.transpose(ops.view(y, (B, T, H, dh)), 1, 2))

    q = heads(ops.mul(m.linear("q_proj", x, H * dh, True), float(dh.value) ** -0.5))
    k = heads(m.linear("k_proj", x, H * dh, False))
    v = heads(m.linear("v_proj", x, H * dh, True))
    if m.use_cache:
        k, v = ops.cat([k], -2), ops.cat([v], -2)
    p = cfg.attention_dropout
    if m.run.attention == "eager":
        # eager_attention_forward: matmul(q, kᵀ) · 1.0, + the mask, softmax, dropout, the
        # product with V, transposed, contiguous
        w = ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), 1.0)
        if mask is not None:
            w = ops.add(w, mask)
        w = m.dropout(ops.softmax(w), p)
        out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    elif m.run.attention == "flash":  # flash_attention_2: (B, T, H, dh) out, no mask; its
        # out_padded follows the contiguous (B, H, T, dh) query: the reshape copies
        out = flash_attention_forward(m, q, k, v)
    else:
        # sdpa_attention_forward: no mask, is_causal (q_length > 1), scale 1.0
        out = scaled_dot_product_attention(q, k, v, is_causal=T.value > 1, dropout_p=p,
                                           scale=1.0)
        out = ops.contiguous(ops.transpose(ops.reshape(out, (B, H, T, dh)), 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("out_proj", out, m["E"], True)
