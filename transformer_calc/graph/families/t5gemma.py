"""T5Gemma as transformers 5.23 runs it: models/t5gemma/modeling_t5gemma.py
(T5GemmaForConditionalGeneration, T5GemmaModel, T5GemmaEncoder, T5GemmaDecoder,
T5GemmaEncoderLayer, T5GemmaDecoderLayer, T5GemmaSelfAttention, T5GemmaCrossAttention,
T5GemmaRMSNorm, T5GemmaMLP, T5GemmaRotaryEmbedding, T5GemmaLMHead, eager_attention_forward
with Gemma 2's soft-capped scores; eager only: _supports_sdpa is False). Gemma 2's layer in
each stack (families/gemma.py: its RMSNorm, MLP, rotary tables and eager attention), the
decoder's cross-attention normed before and after as well.

The measurement's forward is model(input_ids=ids, labels=ids): the encoder reads ids, the
decoder _shift_right(labels), a new (B, T) int64 tensor; both stacks run T tokens. Masks
(eager: (B, 1, T, T) in the embeddings' dtype, one per layer type in use; the encoder's
bidirectional ones from its padding mask, ids != pad_token_id, the decoder's causal ones)
are added and so kept by nothing; the cross-attention's mask is None (T5GemmaModel passes
the caller's attention_mask, None)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.gemma import rms_norm
from transformer_calc.graph.families.llama import (
    apply_rotary,
    eager_attention,
    repeat_kv,
    rotary_tables,
)
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class T5Gemma:
    """The config keys that shape the graph (the encoder's and the decoder's alike but the
    vocabularies). Symbols: V the decoder's vocab, Ve the encoder's, E hidden, H heads, Hkv
    K/V heads, dh head_dim, F intermediate, Le, Ld the stacks' layers, G = H / Hkv.
    kinds_e, kinds_d: each stack's layer_types (F full, S sliding)."""

    V: int
    Ve: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    Le: int
    Ld: int
    kinds_e: str
    kinds_d: str
    tied: bool = True
    bias: bool = False  # attention_bias: q, k, v and o
    dropout: float = 0.0  # dropout_rate
    attention_dropout: float = 0.0
    attn_softcap: float = 0.0
    final_softcap: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "Ve": self.Ve, "E": self.E, "H": self.H, "Hkv": self.Hkv,
                "dh": self.dh, "F": self.F, "Le": self.Le, "Ld": self.Ld,
                "G": self.H // self.Hkv}


def forward(m: Builder, cfg: T5Gemma) -> Tensor:
    """T5GemmaForConditionalGeneration.forward(input_ids=ids, labels=ids): the encoder, the
    decoder over the shifted labels, lm_head.out_proj (tied to the decoder's table), the
    logits soft-capped (/ cap, tanh, · cap), ForMaskedLMLoss: logits.float() and
    cross_entropy over the (B·T, V) view and the labels unshifted."""
    if m.run.attention != "eager":
        raise ValueError("T5Gemma runs eager attention only (_supports_sdpa is False in "
                         "transformers 5.23)")
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        with m.module("encoder"):
            enc = _stack(m, cfg, ids, None)
        # _shift_right(labels): new_zeros, the shifted copy, the start token, masked_fill_
        with tr.no_grad():
            dec_ids = tr.tensor((B, T), I64, False, name="decoder_input_ids")
        with m.module("decoder"):
            h = _stack(m, cfg, dec_ids, enc)
    with m.module("lm_head"), m.module("out_proj"):
        w = m.tied("model.decoder.embed_tokens.weight") if cfg.tied else \
            m.param("weight", V, E)
        logits = ops.linear(h, w)
    if cfg.final_softcap:
        logits = ops.mul(ops.tanh(ops.div(logits, cfg.final_softcap)), cfg.final_softcap)
    logits = ops.to(logits, F32)
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _stack(m: Builder, cfg: T5Gemma, ids: Tensor, enc: Tensor | None) -> Tensor:
    """T5GemmaEncoder / T5GemmaDecoder.forward: embed_tokens, times the normalizer
    torch.tensor(hidden_size ** 0.5, dtype) (a new 0-d tensor the product keeps where the
    embeddings require a gradient), dropout, the rotary tables over position_ids
    arange(T).unsqueeze(0), the layers with their type's mask, the final norm, dropout."""
    decoder = enc is not None
    B, T, E = m["B"], m["T"], m["E"]
    x = m.embedding("embed_tokens", ids, m["V"] if decoder else m["Ve"], E)
    with m.trace.no_grad():
        normalizer = m.trace.tensor((), x.dtype, False, name="normalizer")
    h = m.dropout(ops.mul(x, normalizer), cfg.dropout)
    rope = rotary_tables(m, h)
    kinds = cfg.kinds_d if decoder else cfg.kinds_e
    # eager's masks, one per layer type in use: (B, 1, T, T), no gradient
    masks = {k: m.trace.input((B, Dim.const(1), T, T), h.dtype, "attention_mask")
             for k in sorted(set(kinds))}

    def extras(kind: str) -> tuple[Tensor, ...]:
        return (*rope, masks[kind]) + (() if enc is None else (enc,))

    def layer(x: Tensor, kind: str) -> Tensor:
        return _layer(m, cfg, x, rope, masks[kind], enc)

    if len(set(kinds)) == 1:
        h = m.layers("layers", lambda x: layer(x, kinds[0]), h, extras(kinds[0]),
                     count="Ld" if decoder else "Le")
    else:
        h = m.layers_by_kind("layers", kinds, layer, h, extras)
    return m.dropout(rms_norm(m, "norm", h), cfg.dropout)


def _layer(m: Builder, cfg: T5Gemma, h: Tensor, rope: tuple[Tensor, Tensor], mask: Tensor,
           enc: Tensor | None) -> Tensor:
    """T5GemmaEncoderLayer / T5GemmaDecoderLayer.forward: pre_self_attn_layernorm,
    self_attn, post_self_attn_layernorm, h + dropout(·); (the decoder's)
    pre_cross_attn_layernorm, cross_attn over the encoder's output,
    post_cross_attn_layernorm, h + dropout(·); pre_feedforward_layernorm, mlp,
    post_feedforward_layernorm, h + dropout(·)."""
    x = rms_norm(m, "pre_self_attn_layernorm", h)
    with m.module("self_attn"):
        a = _attention(m, cfg, x, None, rope, mask)
    h = ops.add(h, m.dropout(rms_norm(m, "post_self_attn_layernorm", a), cfg.dropout))
    if enc is not None:
        x = rms_norm(m, "pre_cross_attn_layernorm", h)
        with m.module("cross_attn"):
            a = _attention(m, cfg, x, enc, None, None)
        h = ops.add(h, m.dropout(rms_norm(m, "post_cross_attn_layernorm", a), cfg.dropout))
    x = _mlp(m, cfg, rms_norm(m, "pre_feedforward_layernorm", h))
    return ops.add(h, m.dropout(rms_norm(m, "post_feedforward_layernorm", x), cfg.dropout))


def _mlp(m: Builder, cfg: T5Gemma, x: Tensor) -> Tensor:
    """T5GemmaMLP.forward: down_proj(dropout(act_fn(gate_proj(x)) * up_proj(x))), act_fn
    GELU (tanh approximation: one gelu op), no biases."""
    with m.module("mlp"):
        gate = ops.gelu(m.linear("gate_proj", x, m["F"], False))
        y = m.dropout(ops.mul(gate, m.linear("up_proj", x, m["F"], False)), cfg.dropout)
        return m.linear("down_proj", y, m["E"], False)


def _attention(m: Builder, cfg: T5Gemma, x: Tensor, enc: Tensor | None,
               rope: tuple[Tensor, Tensor] | None, mask: Tensor | None) -> Tensor:
    """T5GemmaSelfAttention.forward (rope given) / T5GemmaCrossAttention.forward (enc
    given: K and V from the encoder's output, no RoPE, no mask): projections viewed as heads
    and transposed, RoPE, repeat_kv (no cache: the decoder makes one only out of training),
    eager_attention_forward with the soft-capped scores and the softmax in fp32, o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    src = x if enc is None else enc

    def heads(name: str, y: Tensor, n: Dim) -> Tensor:
        return ops.transpose(ops.view(m.linear(name, y, n * dh, cfg.bias), (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", x, H), heads("k_proj", src, Hkv), heads("v_proj", src, Hkv)
    if rope is not None:
        cos, sin = (ops.unsqueeze(t, 1) for t in rope)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    G = m["G"]
    # scaling: query_pre_attn_scalar ** -0.5, a scalar that changes no tensor
    out = eager_attention(m, q, repeat_kv(k, G), repeat_kv(v, G), mask,
                          dropout=cfg.attention_dropout, scaling=float(dh.value) ** -0.5,
                          softcap=cfg.attn_softcap)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias)
