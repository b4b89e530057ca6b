"""RoFormer with its masked-LM head as transformers 5.23 runs it:
models/roformer/modeling_roformer.py (RoFormerForMaskedLM: RoFormerEmbeddings, word and
token-type embeddings (RoFormerEmbeddings' torch.zeros(input_shape, long): a new (B, T)
int64), LayerNorm, dropout, no position table; RoFormerEncoder's
RoFormerSinusoidalPositionalEmbedding, a frozen (max_position_embeddings, dh) table read at
arange(T) under no_grad once; RoFormerLayer: BERT's post-norm layer whose
RoFormerSelfAttention rotates Q and K (apply_rotary_position_embeddings), its own eager
attention code; BERT's MLM head, cls.predictions).

The attention is bidirectional: RoFormerModel's mask of ones, plain bidirectional, through
create_bidirectional_mask is None (nothing added to the scores). RoFormer has no SDPA path.

apply_rotary_position_embeddings, per layer: sin, cos = sinusoidal_pos.chunk(2, -1) (views);
sin_pos = torch.stack([sin, sin], -1).reshape_as(sinusoidal_pos) and cos_pos alike: new
(1, 1, T, dh) tensors without a gradient, kept by the products below (q and k share them);
rotate_half = torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape_as(x): a new tensor (its
reshape a view); x · cos_pos + rotate_half · sin_pos."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.bert import Bert, head
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class RoFormer(Bert):
    """Bert's sizes (P: the sinusoidal table's rows, a buffer to tcalc: frozen, not
    trained); base "roformer", head "bert"."""


def forward(m: Builder, cfg: RoFormer) -> Tensor:
    """RoFormerForMaskedLM.forward(input_ids=ids, labels=ids): CrossEntropyLoss over the
    prediction scores' (B·T, V) view, in their dtype."""
    B, T, V, E = m["B"], m["T"], m["V"], m["E"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module(cfg.base):
        with m.module("embeddings"):
            h = m.embedding("word_embeddings", ids, V, E)
            types = tr.tensor((B, T), I64, False, name="token_type_ids")
            h = ops.add(h, m.embedding("token_type_embeddings", types, m["Ty"], E))
            h = m.dropout(m.layer_norm("LayerNorm", h), cfg.hidden_dropout)
        with m.module("encoder"):
            # embed_positions(arange(T)) under no_grad, [None, None]: (1, 1, T, dh) in the
            # table's dtype (the model's)
            with tr.no_grad():
                table = tr.tensor((T, m["dh"]), m.run.dtype, False, name="sinusoidal_pos")
            table = ops.unsqueeze(ops.unsqueeze(table, 0), 0)
            h = m.layers("layer", lambda x: _layer(m, cfg, x, table), h, (table,))
    scores = head(m, cfg, h)
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def _layer(m: Builder, cfg: RoFormer, h: Tensor, table: Tensor) -> Tensor:
    """RoFormerLayer.forward: self-attention, RoFormerSelfOutput (dense, dropout, LayerNorm
    of the sum with the input); RoFormerIntermediate (dense, GELU); RoFormerOutput (dense,
    dropout, LayerNorm of the sum)."""
    E = m["E"]
    with m.module("attention"):
        with m.module("self"):
            a = _self_attention(m, cfg, h, table)
        with m.module("output"):
            a = m.dropout(m.linear("dense", a, E, True), cfg.hidden_dropout)
            a = m.layer_norm("LayerNorm", ops.add(a, h))
    with m.module("intermediate"):
        x = ops.gelu(m.linear("dense", a, m["F"], True))
    with m.module("output"):
        x = m.dropout(m.linear("dense", x, E, True), cfg.hidden_dropout)
        return m.layer_norm("LayerNorm", ops.add(x, a))


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x · cos_pos + rotate_half(x) · sin_pos (rotate_half: stack([-x[..., 1::2],
    x[..., ::2]], -1) reshaped as x)."""
    half = x.shape[-1].halved()
    odd, even = ops.slice_step(x, -1, 1, half, 2), ops.slice_step(x, -1, 0, half, 2)
    stacked = ops.cat([ops.unsqueeze(ops.neg(odd), -1), ops.unsqueeze(even, -1)], -1)
    return ops.add(ops.mul(x, cos), ops.mul(ops.view(stacked, x.shape), sin))


def _self_attention(m: Builder, cfg: RoFormer, x: Tensor, table: Tensor) -> Tensor:
    """RoFormerSelfAttention.forward: q, k, v viewed as (B, H, T, dh); Q and K rotated
    (under rotary_value V too: a new tensor of V's size and dtype that the product with
    the probabilities keeps where it kept V's view, the same bytes, not traced);
    scores divided by sqrt(dh), softmax in their dtype, dropout, the product with V
    permuted, contiguous, viewed as (B, T, E)."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (ops.transpose(ops.view(m.linear(name, x, H * dh, True), (B, T, H, dh)), 1, 2)
               for name in ("query", "key", "value"))
    one = Dim.const(1)
    with m.trace.no_grad():  # sin_pos, cos_pos: new tensors, no gradient
        sin = m.trace.tensor((one, one, T, dh), table.dtype, False, name="sin_pos")
        cos = m.trace.tensor((one, one, T, dh), table.dtype, False, name="cos_pos")
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    w = ops.div(ops.matmul(q, ops.transpose(k, -1, -2)), float(dh.value) ** 0.5)
    w = m.dropout(ops.softmax(w), cfg.attention_dropout)
    out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    return ops.view(out, (B, T, H * dh))
