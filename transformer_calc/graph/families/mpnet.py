"""MPNet with its masked-LM head as transformers 5.23 runs it:
models/mpnet/modeling_mpnet.py (MPNetForMaskedLM: MPNetEmbeddings, positions counted from
the token ids as RoBERTa's, no token types; MPNetEncoder's relative position bias, computed
once: the buckets' (T, T) int64 ids through relative_attention_bias, permuted, expanded to
(B, H, T, T) and made contiguous; MPNetLayer: MPNetSelfAttention (q, k, v, scores divided by
sqrt(d), the bias added in place, softmax in the scores' dtype, dropout, o), dropout and
LayerNorm around it, BERT's intermediate and output; MPNetLMHead, RoBERTa's layout).

No attention mask is passed (create_bidirectional_mask gives None) and the attention is its
own code, whatever the attention implementation."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.bert import Bert, embeddings, head
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class MPNet(Bert):
    """Bert's sizes (Ty unused) and Rb, relative_attention_num_buckets."""

    Rb: int = 32

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "Rb": self.Rb}


def forward(m: Builder, cfg: MPNet) -> Tensor:
    """MPNetForMaskedLM.forward(input_ids=ids, labels=ids)."""
    B, T, V, H = m["B"], m["T"], m["V"], m["H"]
    ids = m.trace.input((B, T), I64, "input_ids")
    with m.module(cfg.base):
        h = embeddings(m, cfg, ids)
        with m.module("encoder"):
            # compute_position_bias: relative_position_bucket of arange differences, (T, T)
            # int64 without a gradient; the table's (T, T, H) rows permuted to (1, H, T, T),
            # expanded over B, contiguous: a new (B, H, T, T) tensor
            with m.trace.no_grad():
                buckets = m.trace.tensor((T, T), I64, False, name="relative_position")
            values = m.embedding("relative_attention_bias", buckets, m["Rb"], H)
            values = ops.unsqueeze(ops.transpose(ops.transpose(values, 1, 2), 0, 1), 0)
            bias = ops.contiguous(ops.expand(values, (B, H, T, T)))
            h = m.layers("layer", lambda x: _layer(m, cfg, x, bias), h, (bias,))
    scores = head(m, cfg, h)
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def _layer(m: Builder, cfg: MPNet, h: Tensor, bias: Tensor) -> Tensor:
    """MPNetLayer.forward: MPNetAttention (attn, dropout, LayerNorm of the sum with the
    input), MPNetIntermediate (dense, gelu), MPNetOutput (dense, dropout, LayerNorm)."""
    with m.module("attention"):
        with m.module("attn"):
            a = _self_attention(m, cfg, h, bias)
        a = m.layer_norm("LayerNorm", ops.add(m.dropout(a, cfg.hidden_dropout), h))
    with m.module("intermediate"):
        x = ops.gelu(m.linear("dense", a, m["F"], True))
    with m.module("output"):
        x = m.dropout(m.linear("dense", x, m["E"], True), cfg.hidden_dropout)
        return m.layer_norm("LayerNorm", ops.add(x, a))


def _self_attention(m: Builder, cfg: MPNet, x: Tensor, bias: Tensor) -> Tensor:
    """MPNetSelfAttention.forward."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (ops.transpose(ops.view(m.linear(name, x, H * dh, True), (B, T, H, dh)), 1, 2)
               for name in ("q", "k", "v"))
    w = ops.div(ops.matmul(q, ops.transpose(k, -1, -2)), float(dh.value) ** 0.5)
    w = ops.add(w, bias)  # attention_scores += position_bias (in place: nothing kept)
    w = m.dropout(ops.softmax(w), cfg.attention_dropout)
    out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    return m.linear("o", ops.view(out, (B, T, H * dh)), m["E"], True)

