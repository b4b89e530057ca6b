"""BLOOM as transformers 5.23 runs it: models/bloom/modeling_bloom.py (BloomForCausalLM,
BloomModel, BloomBlock, BloomAttention, BloomMLP, BloomGelu's GeLUFunction, dropout_add).

LayerNorms with biases (one over the embeddings, word_embeddings_layernorm); no position
table: ALiBi, a (B·H, 1, T) bias of slopes times positions made once under no grad, is the
`input` of each layer's baddbmm (which keeps the query and the key, not its input); the
fused query_key_value viewed (B, T, H, 3, dh), Q, K and V its slices, reshaped to (B·H, T,
dh) (copies unless computeStride finds a view); the eager causal mask added to the scores,
the softmax in fp32 cast back, the probabilities' dropout, bmm with V, the heads merged
(view, permute, reshape: a copy); each sublayer's output through dropout_add
(hidden_dropout) onto the residual; the MLP's GeLUFunction, a custom autograd Function
keeping its input. BloomPreTrainedModel has no SDPA or flash-attention path: eager only."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.errors import TcalcError
from transformer_calc.graph import autocast, ops
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class Bloom:
    """BloomConfig's keys that shape the graph. Symbols: V vocab, E hidden_size, H n_head,
    dh = E / H, F = 4·E (dense_h_to_4h), L n_layer."""

    V: int
    E: int
    H: int
    L: int
    tied: bool = True
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": 4 * self.E, "L": self.L}


def forward(m: Builder, cfg: Bloom) -> Tensor:
    """BloomForCausalLM.forward(input_ids=ids, labels=ids): the loss (ForCausalLMLoss)."""
    if m.run.attention != "eager":
        raise TcalcError("BLOOM runs eager attention only (transformers 5.23's "
                         "BloomPreTrainedModel has no SDPA or flash-attention path)")
    B, T, E, V, H = m["B"], m["T"], m["E"], m["V"], m["H"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        h = m.embedding("word_embeddings", ids, V, E)
        h = m.layer_norm("word_embeddings_layernorm", h)
        # BloomModel.forward without an attention mask: slopes[:, None, None] ·
        # arange(T), repeated over the batch, .to(hidden_states.dtype); no grad
        alibi = tr.tensor((B * H, Dim.const(1), T), h.dtype, False, name="alibi")
        mask = causal_mask(m, h)
        h = m.layers("h", lambda x: _block(m, cfg, x, alibi, mask), h, (alibi, mask))
        h = m.layer_norm("ln_f", h)
    with m.module("lm_head"):
        w = m.tied("transformer.word_embeddings.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _block(m: Builder, cfg: Bloom, h: Tensor, alibi: Tensor, mask: Tensor) -> Tensor:
    """BloomBlock.forward (apply_residual_connection_post_layernorm false: the residual is
    the block's input; true changes which tensor the add reads, nothing saved)."""
    with m.module("self_attention"):
        a = _attention(m, cfg, m.layer_norm("input_layernorm", h), alibi, mask)
    a = ops.add(h, m.dropout(a, cfg.hidden_dropout))  # dropout_add
    with m.module("mlp"):
        x = m.linear("dense_h_to_4h", m.layer_norm("post_attention_layernorm", a), m["F"],
                     True)
        # GeLUFunction.apply: ctx.save_for_backward(input); bloom_gelu_forward's result
        x = ops.function("GeLUFunction", [x], [x], m.trace.tensor(x.shape, x.dtype, False))
        x = m.linear("dense_4h_to_h", x, m["E"], True)
    return ops.add(a, m.dropout(x, cfg.hidden_dropout))


def _attention(m: Builder, cfg: Bloom, x: Tensor, alibi: Tensor, mask: Tensor) -> Tensor:
    """BloomAttention.forward: _reshape's views of the fused projection, the (B·H, T, dh)
    reshapes, alibi.baddbmm(q, kᵀ, beta=1, alpha=1/√dh) (on autocast's lower-precision
    list: its three inputs cast), the mask, softmax(dtype=float32).to(q's dtype),
    attention_dropout, bmm with V, _merge_heads, dense."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    fused = m.linear("query_key_value", x, 3 * m["E"], True)
    fused = ops.view(fused, (B, T, H, Dim.const(3), dh))

    def part(i: int) -> Tensor:
        t = ops.transpose(ops.select(fused, 3, i), 1, 2)  # (B, H, T, dh)
        return ops.reshape(t, (B * H, T, dh))

    q, k, v = part(0), part(1), part(2)
    dtype = q.dtype
    bias, q, kt = autocast.cast_inputs("baddbmm", alibi, q, ops.transpose(k, -1, -2))
    with autocast.disabled(x.trace):
        scores = ops.baddbmm(bias, q, kt, alpha=float(dh.value) ** -0.5)
    w = ops.add(ops.view(scores, (B, H, T, T)), mask)
    w = ops.to(ops.softmax(w, F32), dtype)
    w = m.dropout(w, cfg.attention_dropout)
    context = ops.bmm(ops.view(w, (B * H, T, T)), v)
    context = ops.permute(ops.view(context, (B, H, T, dh)), (0, 2, 1, 3))
    return m.linear("dense", ops.reshape(context, (B, T, H * dh)), m["E"], True)
