"""XLM with its language-model head as transformers 5.23 runs it:
models/xlm/modeling_xlm.py (XLMWithLMHeadModel: XLMModel, MultiHeadAttention,
TransformerFFN, XLMPredLayer without adaptive softmax), non-causal.

XLMModel builds an EncoderDecoderCache whatever use_cache says, so each layer's K and V
are DynamicLayer.update's torch.cat copies; get_masks' (B, T) bool mask (tokens before
each sequence's length, counted from the ids unequal to pad_index) is multiplied in after
the embeddings and after every layer (`tensor *= mask.unsqueeze(-1).to(dtype)`: a new
(B, T, 1) copy each time, kept by the product), and each layer's masked_fill_ keeps its
`mask == 0`, a new (B, T) bool tensor."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor


@dataclass(frozen=True)
class XLM:
    """Symbols: V vocab (n_words), P positions, E emb_dim, H heads, dh = E / H, F the FFN's
    width (4·E), L layers. dropout, attention_dropout: the config's."""

    V: int
    P: int
    E: int
    H: int
    F: int
    L: int
    tied: bool = True
    dropout: float = 0.1
    attention_dropout: float = 0.1

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "L": self.L}


def forward(m: Builder, cfg: XLM) -> Tensor:
    """XLMWithLMHeadModel.forward(input_ids=ids, labels=ids)."""
    B, T, V, E = m["B"], m["T"], m["V"], m["E"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        with tr.no_grad():  # lengths and get_masks: (B, T) bool
            mask = tr.tensor((B, T), BOOL, False, name="mask")
        buffer = tr.tensor((Dim.const(1), m["P"]), I64, False, "buffer", "position_ids")
        h = m.embedding("embeddings", ids, V, E)
        positions = m.embedding("position_embeddings", ops.narrow(buffer, 1, 0, T), m["P"], E)
        h = ops.add(h, ops.expand(positions, h.shape))
        h = m.dropout(m.layer_norm("layer_norm_emb", h), cfg.dropout)
        h = _masked(h, mask)
        # (its layers' modules live in per-kind lists, attentions[i], ffns[i],
        # layer_norm1[i], layer_norm2[i]: here one scope per layer, h.i)
        h = m.layers("h", lambda x: _layer(m, cfg, x, mask), h, (mask,))
    with m.module("pred_layer"), m.module("proj"):
        w = m.tied("transformer.embeddings.weight") if cfg.tied else m.param("weight", V, E)
        scores = ops.linear(h, w, m.param("bias", V))
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def _masked(h: Tensor, mask: Tensor) -> Tensor:
    """tensor *= mask.unsqueeze(-1).to(tensor.dtype): a new (B, T, 1) copy, kept."""
    return ops.mul(h, ops.to(ops.unsqueeze(mask, -1), h.dtype))


def _layer(m: Builder, cfg: XLM, h: Tensor, mask: Tensor) -> Tensor:
    """One of XLMModel's layers (its attentions[i], layer_norm1[i], ffns[i], layer_norm2[i],
    here under one scope): attention, dropout, residual, layer_norm1; the FFN (lin1, gelu,
    lin2, dropout), residual, layer_norm2; the mask multiplied in."""
    with m.module("attention"):
        a = _attention(m, cfg, h, mask)
    h = m.layer_norm("layer_norm1", ops.add(h, m.dropout(a, cfg.dropout)))
    with m.module("ffn"):
        x = m.linear("lin2", ops.gelu(m.linear("lin1", h, m["F"], True)), m["E"], True)
        x = m.dropout(x, cfg.dropout)
    h = m.layer_norm("layer_norm2", ops.add(h, x))
    return _masked(h, mask)


def _attention(m: Builder, cfg: XLM, x: Tensor, mask: Tensor) -> Tensor:
    """MultiHeadAttention.forward: q, k, v viewed as heads; K and V through the cache's cat
    (copies); q / sqrt(dh); scores; masked_fill_ with (mask == 0) viewed (B, 1, 1, T) and
    expanded; softmax of scores.float(), type_as the scores; dropout; the product with V;
    transposed, contiguous, out_lin."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]

    def heads(name: str) -> Tensor:
        return ops.transpose(ops.view(m.linear(name, x, H * dh, True), (B, T, H, dh)), 1, 2)

    q = heads("q_lin")
    k, v = (ops.cat([heads(name)], -2) for name in ("k_lin", "v_lin"))
    q = ops.div(q, float(dh.value) ** 0.5)
    scores = ops.matmul(q, ops.transpose(k, 2, 3))
    with m.trace.no_grad():
        hidden = m.trace.tensor(mask.shape, BOOL, False)  # mask == 0
    one = Dim.const(1)
    scores = ops.masked_fill(scores, ops.expand(ops.view(hidden, (B, one, one, T)),
                                                scores.shape))
    w = ops.to(ops.softmax(ops.to(scores, F32)), scores.dtype)
    w = m.dropout(w, cfg.attention_dropout)
    out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    return m.linear("out_lin", ops.view(out, (B, T, H * dh)), m["E"], True)
