"""Encoders with rotary positions and post-norm layers, with their masked-LM heads, as
transformers 5.23 runs them: models/gte/modeling_gte.py (GteForMaskedLM: GteEmbeddings
without a position table, GteRotaryEmbedding, GteLayer with GteAttention and the gated
GteMLP, GteLMHead), models/nomic_bert/modeling_nomic_bert.py (NomicBertForMaskedLM: GTE's
layer without biases or the MLP's dropout, BERT's prediction head with hidden_act) and
models/jina_embeddings_v3/modeling_jina_embeddings_v3.py (JinaEmbeddingsV3ForMaskedLM:
GTE's attention, the plain fc1/fc2 MLP, RoBERTa's LM head).

As BERT's (families/bert.py), the attention is bidirectional without a mask: eager adds
none (its softmax in the scores' dtype), SDPA runs with is_causal False."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.bert import Bert, bidirectional_attention, head
from transformer_calc.graph.families.llama import apply_rotary, rotary_tables
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class RopeEncoder(Bert):
    """Bert's sizes (P unused: no position table) and the layout's switches. gated: the
    MLP is down(act(gate(x)) · up(x)) (GTE, NomicBERT), else fc2(act(fc1(x))) (Jina);
    act: the MLP's activation (gelu, the erf one, or silu); bias: q, k, v, o and the MLP's
    output projection have biases (fc1 too where not gated); mlp_dropout: GteMLP's dropout
    on the gated product."""

    gated: bool = True
    act: str = "gelu"
    bias: bool = True
    mlp_dropout: bool = True


def forward(m: Builder, cfg: RopeEncoder) -> Tensor:
    """XForMaskedLM.forward(input_ids=ids, labels=ids): the encoder, the MLM head,
    CrossEntropyLoss over the scores' (B·T, V) view in their dtype."""
    B, T, V = m["B"], m["T"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module(cfg.base):
        h = _embeddings(m, cfg, ids)
        # position_ids = arange(T)[None, :], read by the rotary embedding under no_grad
        positions = tr.tensor((m["T"],), I64, False)
        cos, sin = rotary_tables(m, h)
        h = m.layers("layers", lambda x: _layer(m, cfg, x, cos, sin), h, (positions, cos, sin))
    scores = head(m, cfg, h)
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def _embeddings(m: Builder, cfg: RopeEncoder, ids: Tensor) -> Tensor:
    """GteEmbeddings.forward (NomicBert's, Jina's): word embeddings plus the token types'
    (token_type_ids = zeros(input_shape, long): a new (B, T) int64 tensor), LayerNorm,
    dropout."""
    with m.module("embeddings"):
        h = m.embedding("word_embeddings", ids, m["V"], m["E"])
        types = m.trace.tensor((m["B"], m["T"]), I64, False, name="token_type_ids")
        h = ops.add(h, m.embedding("token_type_embeddings", types, m["Ty"], m["E"]))
        return m.dropout(m.layer_norm("LayerNorm", h), cfg.hidden_dropout)


def _layer(m: Builder, cfg: RopeEncoder, h: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """GteLayer.forward: residual + post_attention_dropout(self_attn(h)), its LayerNorm;
    residual + post_mlp_dropout(mlp(h)), its LayerNorm."""
    with m.module("self_attn"):
        a = _attention(m, cfg, h, cos, sin)
    with m.module("post_attention_dropout"):
        a = m.dropout(a, cfg.hidden_dropout)
    h = m.layer_norm("post_attention_layernorm", ops.add(h, a))
    with m.module("mlp"):
        x = _mlp(m, cfg, h)
    with m.module("post_mlp_dropout"):
        x = m.dropout(x, cfg.hidden_dropout)
    return m.layer_norm("post_mlp_layernorm", ops.add(h, x))


def _attention(m: Builder, cfg: RopeEncoder, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """GteAttention.forward: q, k, v viewed as (B, T, H, dh) and transposed, RoPE
    (apply_rotary_pos_emb with cos, sin unsqueezed at 1), the attention interface, the
    output reshaped to (B, T, E), contiguous, o_proj."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (ops.transpose(ops.view(m.linear(name, x, H * dh, cfg.bias), (B, T, H, dh)), 1, 2)
               for name in ("q_proj", "k_proj", "v_proj"))
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    out = bidirectional_attention(m, q, k, v, cfg.attention_dropout)
    return m.linear("o_proj", out, m["E"], cfg.bias)


def _mlp(m: Builder, cfg: RopeEncoder, x: Tensor) -> Tensor:
    """GteMLP: down(dropout(act(gate(x)) · up(x))) (NomicBertMLP without the dropout);
    JinaEmbeddingsV3MLP: fc2(act(fc1(x)))."""
    F, E = m["F"], m["E"]

    def act(y: Tensor) -> Tensor:
        return ops.silu(y) if cfg.act == "silu" else ops.gelu(y)

    if not cfg.gated:
        return m.linear("fc2", act(m.linear("fc1", x, F, True)), E, True)
    y = ops.mul(act(m.linear("gate_proj", x, F, False)), m.linear("up_proj", x, F, False))
    if cfg.mlp_dropout:
        y = m.dropout(y, cfg.hidden_dropout)
    return m.linear("down_proj", y, E, cfg.bias)
