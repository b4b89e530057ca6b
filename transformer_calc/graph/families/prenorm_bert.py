"""BERT-style encoders with pre-norm layers and a final norm, with their masked-LM heads, as
transformers 5.23 runs them:
models/roberta_prelayernorm/modeling_roberta_prelayernorm.py (RobertaPreLayerNormForMaskedLM:
RoBERTa's embeddings with their LayerNorm; RobertaPreLayerNormAttention's LayerNorm before
the self-attention, RobertaPreLayerNormSelfOutput's dense, dropout and residual;
RobertaPreLayerNormIntermediate's LayerNorm, dense and GELU; RobertaPreLayerNormOutput's
dense, dropout and residual; RobertaPreLayerNormModel's LayerNorm after the encoder;
RoBERTa's LM head), models/xlm_roberta_xl/modeling_xlm_roberta_xl.py
(XLMRobertaXLForMaskedLM: RoBERTa's embeddings without a LayerNorm; the attention's
self_attn_layer_norm, the layer's LayerNorm before XLMRobertaXLIntermediate,
XLMRobertaXLOutput without a dropout; XLMRobertaXLEncoder's LayerNorm after the layers) and
models/megatron_bert/modeling_megatron_bert.py (MegatronBertForMaskedLM: BERT's position
slice and MegatronBertModel's (B, T) int64 zeros as the token types, no embedding norm,
`embeddings += position_embeddings`; the attention's ln, the layer's ln before the
intermediate, MegatronBertEncoder's ln; its own eager attention; BERT's MLM head).

As BERT's (families/bert.py), no attention mask reaches the attention
(create_bidirectional_mask gives None for a mask of ones, Megatron-BERT's too): eager adds
none, SDPA runs with is_causal False. Megatron-BERT has no SDPA path."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.bert import Bert, bidirectional_attention, embeddings, head
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor

# each layout's modules: (the attention's norm, the MLP's norm (its scope in the layer),
# the final norm's scope under the base model, the embeddings' LayerNorm, the layer
# output's dropout)
LAYOUTS = {"roberta-prelayernorm": ("attention.LayerNorm", "intermediate.LayerNorm",
                                    "LayerNorm", True, True),
           "xlm-roberta-xl": ("attention.self_attn_layer_norm", "LayerNorm",
                              "encoder.LayerNorm", False, False),
           "megatron-bert": ("attention.ln", "ln", "encoder.ln", False, True)}


@dataclass(frozen=True)
class PreNormBert(Bert):
    """Bert's sizes; layout: the model type (LAYOUTS)."""

    layout: str = "roberta-prelayernorm"


def forward(m: Builder, cfg: PreNormBert) -> Tensor:
    """XForMaskedLM.forward(input_ids=ids, labels=ids): CrossEntropyLoss over the scores'
    (B·T, V) view, in their dtype."""
    B, T, V = m["B"], m["T"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    final = LAYOUTS[cfg.layout][2]
    with m.module(cfg.base):
        if cfg.layout == "megatron-bert":
            # MegatronBertModel: token types torch.zeros(input_shape, long); its
            # torch.ones((B, T)) mask, plain bidirectional, through create_bidirectional_mask:
            # None (nothing added to the scores)
            types = tr.tensor((B, T), I64, False, name="token_type_ids")
            h = _megatron_embeddings(m, cfg, ids, types)
        else:
            h = _embeddings(m, cfg, ids)
        with m.module("encoder"):
            h = m.layers("layer", lambda x: _layer(m, cfg, x), h)
        h = m.layer_norm(final, h)
    scores = head(m, cfg, h)
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def _embeddings(m: Builder, cfg: PreNormBert, ids: Tensor) -> Tensor:
    """RoBERTa's embeddings (RobertaPreLayerNormEmbeddings with their LayerNorm;
    XLMRobertaXLEmbeddings without one: word + token types + positions, dropout)."""
    if LAYOUTS[cfg.layout][3]:
        return embeddings(m, cfg, ids)
    tr = m.trace
    B, T, P, E = m["B"], m["T"], m["P"], m["E"]
    with m.module("embeddings"):
        zeros = tr.tensor((Dim.const(1), P), I64, False, "buffer", "token_type_ids")
        with tr.no_grad():  # create_position_ids_from_input_ids: a new (B, T) int64
            positions = tr.tensor((B, T), I64, False, name="position_ids")
        # token_type_ids.expand(B, -1), gathered at the positions, expanded: a new (B, T)
        types = ops.expand(ops.gather(ops.expand(zeros, (B, P)), 1, positions), (B, T))
        h = m.embedding("word_embeddings", ids, m["V"], E)
        h = ops.add(h, m.embedding("token_type_embeddings", types, m["Ty"], E))
        h = ops.add(h, m.embedding("position_embeddings", positions, P, E))
        return m.dropout(h, cfg.hidden_dropout)


def _megatron_embeddings(m: Builder, cfg: PreNormBert, ids: Tensor, types: Tensor) -> Tensor:
    """MegatronBertEmbeddings.forward: word + token types, += positions (the buffer's
    slice), dropout."""
    tr = m.trace
    T, E = m["T"], m["E"]
    with m.module("embeddings"):
        arange = tr.tensor((Dim.const(1), m["P"]), I64, False, "buffer", "position_ids")
        h = m.embedding("word_embeddings", ids, m["V"], E)
        h = ops.add(h, m.embedding("token_type_embeddings", types, m["Ty"], E))
        h = ops.add(h, m.embedding("position_embeddings", ops.narrow(arange, 1, 0, T),
                                   m["P"], E))
        return m.dropout(h, cfg.hidden_dropout)


def _layer(m: Builder, cfg: PreNormBert, h: Tensor) -> Tensor:
    """The layer: the attention's norm, self-attention, dense, dropout, + h; the MLP's
    norm, dense, GELU; dense, dropout (not XLM-RoBERTa-XL's), + the attention's output."""
    attn_norm, mlp_norm, _, _, out_dropout = LAYOUTS[cfg.layout]
    E = m["E"]
    with m.module("attention"):
        x = m.layer_norm(attn_norm.removeprefix("attention."), h)
        with m.module("self"):
            x = _self_attention(m, cfg, x)
        with m.module("output"):
            a = ops.add(m.dropout(m.linear("dense", x, E, True), cfg.hidden_dropout), h)
    if mlp_norm == "intermediate.LayerNorm":
        with m.module("intermediate"):
            x = ops.gelu(m.linear("dense", m.layer_norm("LayerNorm", a), m["F"], True))
    else:
        x = m.layer_norm(mlp_norm, a)
        with m.module("intermediate"):
            x = ops.gelu(m.linear("dense", x, m["F"], True))
    with m.module("output"):
        x = m.linear("dense", x, E, True)
        if out_dropout:
            x = m.dropout(x, cfg.hidden_dropout)
        return ops.add(x, a)


def _self_attention(m: Builder, cfg: PreNormBert, x: Tensor) -> Tensor:
    """The self-attention's query, key and value as (B, H, T, dh), the attention interface
    (MegatronBertSelfAttention's own eager code computes the same: scores divided by
    sqrt(dh), softmax in their dtype, dropout, the product with V permuted, contiguous,
    viewed as (B, T, E))."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (ops.transpose(ops.view(m.linear(name, x, H * dh, True), (B, T, H, dh)), 1, 2)
               for name in ("query", "key", "value"))
    return bidirectional_attention(m, q, k, v, cfg.attention_dropout)
