"""Mllama's text model as transformers 5.23 runs it without images:
models/mllama/modeling_mllama.py (MllamaForCausalLM, MllamaTextModel,
MllamaSelfAttentionDecoderLayer, MllamaTextSelfAttention, MllamaTextMLP, MllamaTextRMSNorm,
MllamaRotaryEmbedding): Llama's graph (families/llama.py) for the self-attention layers.

MllamaTextModel builds a MllamaCrossAttentionDecoderLayer at each index in
cross_attention_layers, and its forward skips such a layer when no cross_attention_states
are given and the cache holds none (a text-only forward: the measurement passes input_ids
and labels alone): those layers' parameters exist (and train, and peft adapts their
linears) but run nothing. The token table has vocab_size + 8 rows (the image tokens),
which lm_head does not predict. MllamaForCausalLM's logits.float() is the fp32 copy that
ForCausalLMLoss would make (a no-op there)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph.families import llama
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import Tensor


@dataclass(frozen=True)
class Mllama(llama.Llama):
    """Llama's sizes and flags (extra_rows 8: embed_tokens' vocab_size + 8 rows); Lc: the
    cross-attention layers, built and idle."""

    Lc: int = 1


def forward(m: Builder, cfg: Mllama) -> Tensor:
    """MllamaForCausalLM.forward(input_ids=ids, labels=ids): the idle cross-attention
    layers' parameters, then Llama's forward over the self-attention layers."""
    with m.module("model"):
        for i in range(cfg.Lc):
            with m.module(f"cross_layers.{i}"):
                _idle_cross_layer(m)
    return llama.forward(m, cfg)


def _idle_cross_layer(m: Builder) -> None:
    """MllamaCrossAttentionDecoderLayer.__init__: cross_attn (MllamaTextCrossAttention:
    q_proj, k_proj, v_proj, o_proj without biases, q_norm and k_norm over a head),
    input_layernorm, cross_attn_attn_gate (1,), mlp (MllamaTextMLP), post_attention_layernorm,
    cross_attn_mlp_gate (1,)."""
    E, H, Hkv, dh, F = m["E"], m["H"], m["Hkv"], m["dh"], m["F"]
    one = Dim.const(1)
    with m.module("cross_attn"):
        for name, fan_in, out in (("q_proj", E, H * dh), ("k_proj", E, Hkv * dh),
                                  ("v_proj", E, Hkv * dh), ("o_proj", H * dh, E)):
            m.idle_linear(name, fan_in, out, False)
        for name in ("q_norm", "k_norm"):
            with m.module(name):
                m.param("weight", dh)
    for name in ("input_layernorm", "post_attention_layernorm"):
        with m.module(name):
            m.param("weight", E)
    m.param("cross_attn_attn_gate", one)
    m.param("cross_attn_mlp_gate", one)
    with m.module("mlp"):
        for name, fan_in, out in (("gate_proj", E, F), ("up_proj", E, F), ("down_proj", F, E)):
            m.idle_linear(name, fan_in, out, False)
