"""The paper's Transformer (Vaswani et al. 2017) as torch.nn builds it: the transformer-base and
transformer-big presets. torch 2.13's torch/nn/modules/transformer.py (Transformer,
TransformerEncoderLayer, TransformerDecoderLayer, post-norm, ReLU, the stacks' final
LayerNorms) and torch/nn/functional.py (multi_head_attention_forward, _in_projection_packed:
nn.MultiheadAttention's fused in_proj_weight), batch_first=True, with the model around it as
tools/measure_activations_nn_transformer.py builds it: one token table for both inputs and
the output projection, the lookups times √E plus the sinusoidal table (a buffer), dropout;
the decoder's causal mask passed as tgt_is_causal; F.cross_entropy over the logits.

In training nn.MultiheadAttention calls scaled_dot_product_attention (need_weights=False),
whatever --attention says: torch's kernel choice (math under dropout on the CPU)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import lora as peft
from transformer_calc.graph import ops
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class Paper:
    """Symbols: V vocab, E d_model, H heads, dh = E / H, F dim_feedforward, Le and Ld the
    encoder's and the decoder's layers; dropout: every nn.Dropout and the attention's."""

    V: int
    E: int
    H: int
    F: int
    Le: int
    Ld: int
    dropout: float = 0.1

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "Le": self.Le, "Ld": self.Ld}


def forward(m: Builder, cfg: Paper) -> Tensor:
    """The model's forward(ids, ids): both stacks read the T token ids, the decoder under
    its causal mask; logits = F.linear(out, embed.weight), F.cross_entropy over
    logits.view(-1, V) and the ids."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    ids = m.trace.input((B, T), I64, "input_ids")
    with m.module("embed"):
        table = m.param("weight", V, E)
    src = _embed(m, cfg, ids, table)
    tgt = _embed(m, cfg, ids, table)
    with m.module("transformer"):
        with m.module("encoder"):
            memory = m.layers("layers", lambda x: _encoder_layer(m, cfg, x), src, count="Le")
            memory = m.layer_norm("norm", memory)
        with m.module("decoder"):
            h = m.layers("layers", lambda x: _decoder_layer(m, cfg, x, memory), tgt,
                         (memory,), count="Ld")
            h = m.layer_norm("norm", h)
    logits = ops.linear(h, table)
    return ops.cross_entropy(ops.view(logits, (B * T, V)), ops.view(ids, (B * T,)))


def _embed(m: Builder, cfg: Paper, ids: Tensor, table: Tensor) -> Tensor:
    """dropout(embed(ids) · √E + pe[:T]): the product with a Python number keeps nothing
    saved_tensors_hooks sees; the table's slice is a buffer's view."""
    T, E = m["T"], m["E"]
    pe = m.trace.tensor((T, E), m.run.dtype, False, "buffer", "pe")
    x = ops.add(ops.mul(ops.embedding(table, ids), float(E.value) ** 0.5), pe)
    return m.dropout(x, cfg.dropout)


def _encoder_layer(m: Builder, cfg: Paper, x: Tensor) -> Tensor:
    """TransformerEncoderLayer.forward (norm_first False): norm1(x + dropout1(self_attn)),
    norm2(x + _ff_block(x))."""
    p = cfg.dropout
    a = _attention(m, cfg, "self_attn", x, None, causal=False)
    x = m.layer_norm("norm1", ops.add(x, m.dropout(a, p)))
    return m.layer_norm("norm2", ops.add(x, _ff_block(m, cfg, x)))


def _decoder_layer(m: Builder, cfg: Paper, x: Tensor, memory: Tensor) -> Tensor:
    """TransformerDecoderLayer.forward (norm_first False): norm1(x + _sa_block) under the
    causal mask, norm2(x + _mha_block) over the encoder's output, norm3(x + _ff_block)."""
    p = cfg.dropout
    a = _attention(m, cfg, "self_attn", x, None, causal=True)
    x = m.layer_norm("norm1", ops.add(x, m.dropout(a, p)))
    a = _attention(m, cfg, "multihead_attn", x, memory, causal=False)
    x = m.layer_norm("norm2", ops.add(x, m.dropout(a, p)))
    return m.layer_norm("norm3", ops.add(x, _ff_block(m, cfg, x)))


def _ff_block(m: Builder, cfg: Paper, x: Tensor) -> Tensor:
    """dropout2(linear2(dropout(relu(linear1(x)))))."""
    p = cfg.dropout
    y = m.dropout(ops.relu(m.linear("linear1", x, m["F"], True)), p)
    return m.dropout(m.linear("linear2", y, m["E"], True), p)


def _attention(m: Builder, cfg: Paper, name: str, x: Tensor, memory: Tensor | None, *,
               causal: bool) -> Tensor:
    """nn.MultiheadAttention.forward, batch_first: the inputs transposed to (T, B, E) views;
    multi_head_attention_forward: _in_projection_packed (self-attention: one linear over
    in_proj_weight, its (T, B, 3E) result unflattened to (3, T, B, E), contiguous, split;
    cross-attention: w_q and w_kv = in_proj_weight.split([E, 2E]), q_proj, the K/V packed
    the same way), each viewed (T, B·H, dh), transposed, viewed (B, H, T, dh); SDPA with
    dropout_p (is_causal for the decoder's mask, which torch detects as causal and drops);
    the output permuted to (T, B, H, dh), contiguous, out_proj, viewed back and transposed
    to (B, T, E)."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    three, two = Dim.const(3), Dim.const(2)
    with m.module(name):
        w = m.param("in_proj_weight", 3 * E, E)
        b = m.param("in_proj_bias", 3 * E)
        with m.module("out_proj"):
            w_o, b_o = m.param("weight", E, E), m.param("bias", E)
        adapted = m.run.lora is not None and m.run.lora.adapts(m.trace.scope)
        if adapted:
            w = _merged(m, w)
            with m.module("out_proj"):
                w_o = _merged(m, w_o)
        q_in = ops.transpose(x, 0, 1)
        if memory is None:
            proj = ops.linear(q_in, w, b)
            packed = ops.contiguous(ops.transpose(
                ops.unsqueeze(ops.view(proj, (T, B, three, E)), 0), 0, 3))
            q, k, v = (ops.select(ops.select(packed, 3, 0), 0, i) for i in range(3))
        else:
            w_q, w_kv = ops.narrow(w, 0, 0, E), ops.narrow(w, 0, E.value, 2 * E)
            b_q, b_kv = ops.narrow(b, 0, 0, E), ops.narrow(b, 0, E.value, 2 * E)
            q = ops.linear(q_in, w_q, b_q)
            kv = ops.linear(ops.transpose(memory, 0, 1), w_kv, b_kv)
            packed = ops.contiguous(ops.transpose(
                ops.unsqueeze(ops.view(kv, (T, B, two, E)), 0), 0, 3))
            k, v = (ops.select(ops.select(packed, 3, 0), 0, i) for i in range(2))
        q, k, v = (ops.view(ops.transpose(ops.view(t, (T, B * H, dh)), 0, 1), (B, H, T, dh))
                   for t in (q, k, v))
        out = scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=cfg.dropout)
        out = ops.view(ops.contiguous(ops.permute(out, (2, 0, 1, 3))), (T * B, E))
        with m.module("out_proj"):
            o = ops.linear(out, w_o, b_o)
        o = ops.transpose(ops.view(o, (T, B, E)), 0, 1)
        # lora.MultiheadAttention.forward: result[0].to(previous_dtype), the query's (under
        # autocast a copy: the projection's 16-bit output back to the fp32 stream)
        return ops.to(o, x.dtype) if adapted else o


def _merged(m: Builder, w: Tensor) -> Tensor:
    """peft 0.21's lora.MultiheadAttention (peft/tuners/lora/layer.py), which adapts
    nn.MultiheadAttention whole: forward merges, in_proj first, then out_proj (whose own
    forward multi_head_attention_forward never calls), weight.data.detach() + the delta
    (lora_B.weight @ lora_A.weight · scaling, the adapters fp32, to the weight's dtype) in
    place of the parameter, runs the module, and unmerges; the merged weights are tensors
    that require a gradient, which the projections keep for backward."""
    lora = m.run.lora
    assert lora is not None
    r = m["r"]
    with m.module("lora_A"):
        a = m.param("weight", r, w.shape[1], adapter=True)
    with m.module("lora_B"):
        b = m.param("weight", w.shape[0], r, adapter=True)
    return ops.add(w, peft.delta_weight(w, a, b, lora.rank))
