"""DistilBERT with its masked-LM head as transformers 5.23 runs it:
models/distilbert/modeling_distilbert.py (DistilBertForMaskedLM: DistilBertModel's
Embeddings, word and position tables (the position_ids buffer's slice) summed, LayerNorm,
dropout, no token types; Transformer's TransformerBlock: DistilBertSelfAttention (q_lin,
k_lin, v_lin, eager_attention_forward or the attention interface, out_lin) with no dropout
on its output, sa_layer_norm of the sum with the input; FFN (lin1, the erf GELU, lin2,
dropout), output_layer_norm of the sum; the head's vocab_transform, GELU, vocab_layer_norm
and vocab_projector, tied to the token table with a bias of its own).

As BERT's (families/bert.py), the attention is bidirectional without a mask: eager adds
none (its softmax in the scores' dtype), SDPA runs with is_causal False."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.bert import Bert, bidirectional_attention, embeddings, head
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class DistilBert(Bert):
    """Bert's sizes (Ty unused: no token-type table), base "distilbert", head
    "distilbert" (bert.HEADS)."""


def forward(m: Builder, cfg: DistilBert) -> Tensor:
    """DistilBertForMaskedLM.forward(input_ids=ids, labels=ids): mlm_loss_fct
    (CrossEntropyLoss) over the logits' (B·T, V) view, in their dtype."""
    B, T, V = m["B"], m["T"], m["V"]
    ids = m.trace.input((B, T), I64, "input_ids")
    with m.module(cfg.base):
        h = embeddings(m, cfg, ids)
        with m.module("transformer"):
            h = m.layers("layer", lambda x: _block(m, cfg, x), h)
    scores = head(m, cfg, h)
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def _block(m: Builder, cfg: DistilBert, h: Tensor) -> Tensor:
    """TransformerBlock.forward: sa_layer_norm(attention(h) + h), then
    output_layer_norm(ffn(a) + a): post-norm."""
    B, T, H, dh, E = m["B"], m["T"], m["H"], m["dh"], m["E"]
    with m.module("attention"):
        q, k, v = (ops.transpose(ops.view(m.linear(name, h, E, True), (B, T, H, dh)), 1, 2)
                   for name in ("q_lin", "k_lin", "v_lin"))
        a = m.linear("out_lin", bidirectional_attention(m, q, k, v, cfg.attention_dropout),
                     E, True)
    a = m.layer_norm("sa_layer_norm", ops.add(a, h))
    with m.module("ffn"):
        # get_activation("gelu"): GELUActivation, the erf GELU
        x = ops.gelu(m.linear("lin1", a, m["F"], True))
        x = m.dropout(m.linear("lin2", x, E, True), cfg.hidden_dropout)
    return m.layer_norm("output_layer_norm", ops.add(x, a))
