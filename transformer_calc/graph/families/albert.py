"""ALBERT with its masked-LM head as transformers 5.23 runs it:
models/albert/modeling_albert.py (AlbertForMaskedLM: AlbertModel without its pooler,
AlbertEmbeddings of embedding_size, AlbertTransformer's embedding_hidden_mapping_in and its
layer groups, AlbertLayer with AlbertAttention, AlbertMLMHead).

Layers share weights: layer i runs the set of weights int(i / (L / G)) (ModelSpec's
layer_groups sets, each run by L / G consecutive layers), so a set's parameters, and under
LoRA its adapters, are counted once. The attention is BERT's, bidirectional without a mask
(families/bert.py)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families.bert import (
    Factorized,
    bidirectional_attention,
    embeddings,
    head,
)
from transformer_calc.graph.families.gpt2 import new_gelu
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class Albert(Factorized):
    """ELECTRA's factorized sizes (Ee: embedding_size) and the layers' weight sets: sets,
    one letter per layer naming the set it runs ("A": every layer the same weights)."""

    sets: str = "A"


def forward(m: Builder, cfg: Albert) -> Tensor:
    """AlbertForMaskedLM.forward(input_ids=ids, labels=ids): the embeddings (Ee wide),
    embedding_hidden_mapping_in to E, the layers, AlbertMLMHead, CrossEntropyLoss over the
    (B·T, V) view in the scores' dtype."""
    B, T, V = m["B"], m["T"], m["V"]
    ids = m.trace.input((B, T), I64, "input_ids")
    with m.module(cfg.base):
        h = embeddings(m, cfg, ids)
        with m.module("encoder"):
            h = m.linear("embedding_hidden_mapping_in", h, m["E"], True)
            kinds = cfg.sets if len(set(cfg.sets)) > 1 else cfg.sets[0]
            order = sorted(set(cfg.sets))
            for weights in range(len(order)):
                _set_params(m, cfg, weights)
            h = m.layers_by_kind(
                "albert_layers", kinds,
                lambda x, kind: _shared_layer(m, cfg, x, order.index(kind)), h,
                lambda kind: ())
    scores = head(m, cfg, h)
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def _path(cfg: Albert, weights: int) -> str:
    return f"{cfg.base}.encoder.albert_layer_groups.{weights}.albert_layers.0"


def _set_params(m: Builder, cfg: Albert, weights: int) -> None:
    """A set's parameters (and LoRA's adapters on its linears), made before the layers: the
    model's, not one layer's (the layers that run them find them by name)."""
    E, F, HD = m["E"], m["F"], m["H"] * m["dh"]
    lora = m.run.lora
    with m.trace.module_path(_path(cfg, weights)):
        for name, out, width in (("attention.query", HD, E), ("attention.key", HD, E),
                                 ("attention.value", HD, E), ("attention.dense", E, HD),
                                 ("ffn", F, E), ("ffn_output", E, F)):
            with m.trace.module_path(f"{m.trace.scope}.{name}"):
                m.param("weight", out, width), m.param("bias", out)
                if lora is not None and lora.adapts(m.trace.scope):
                    with m.module("lora_A"):
                        m.param("weight", m["r"], width, adapter=True)
                    with m.module("lora_B"):
                        m.param("weight", out, m["r"], adapter=True)
        for name in ("attention.LayerNorm", "full_layer_layer_norm"):
            with m.trace.module_path(f"{m.trace.scope}.{name}"):
                m.param("weight", E), m.param("bias", E)


def _shared_layer(m: Builder, cfg: Albert, h: Tensor, weights: int) -> Tensor:
    """The layer with its set's parameters (albert_layer_groups.<set>.albert_layers.0)."""
    with m.trace.module_path(_path(cfg, weights)):
        return _layer(m, cfg, h)


def _layer(m: Builder, cfg: Albert, h: Tensor) -> Tensor:
    """AlbertLayer.forward: AlbertAttention (q, k, v, the attention, dense, output_dropout,
    LayerNorm of the sum with the input); ffn, the activation (gelu_new), ffn_output;
    full_layer_layer_norm of the sum with the attention's output (no dropout)."""
    B, T, H, dh, E = m["B"], m["T"], m["H"], m["dh"], m["E"]
    with m.module("attention"):
        q, k, v = (ops.transpose(ops.view(m.linear(name, h, H * dh, True), (B, T, H, dh)),
                                 1, 2) for name in ("query", "key", "value"))
        a = bidirectional_attention(m, q, k, v, cfg.attention_dropout)
        a = m.dropout(m.linear("dense", a, E, True), cfg.hidden_dropout)
        a = m.layer_norm("LayerNorm", ops.add(h, a))
    x = m.linear("ffn", a, m["F"], True)
    with m.module("activation"):
        x = new_gelu(x)
    x = m.linear("ffn_output", x, E, True)
    return m.layer_norm("full_layer_layer_norm", ops.add(x, a))
