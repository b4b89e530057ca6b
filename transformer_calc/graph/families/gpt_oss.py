"""GPT-OSS as transformers 5.23 runs it: models/gpt_oss/modeling_gpt_oss.py (GptOssForCausalLM,
GptOssModel, GptOssDecoderLayer, GptOssRMSNorm, GptOssRotaryEmbedding, _apply_rotary_emb,
eager_attention_forward, GptOssAttention, GptOssMLP, GptOssTopKRouter, GptOssExperts).
Llama's pre-norm layers with GptOssRMSNorm (the weight's product in fp32, then cast), sliding
and full layers (layer_types), RoPE on the two halves of each head (cos and sin half a head
wide: first * cos - second * sin, second * cos + first * sin, concatenated), eager attention
only (GptOssPreTrainedModel has no SDPA) with a learned sink logit per head: the scores with
the sinks concatenated as one more column, the row's maximum subtracted, softmax, the sink
column dropped (a view). Every layer's MLP is the experts: GptOssTopKRouter (F.linear with a
bias, topk of the logits, softmax over the top values in their dtype) and GptOssExperts
(3-D weights (X, E, 2·Fe) and (X, Fe, E) read untransposed, with biases; the gate and up
interleaved, clamped, gate · sigmoid(alpha · gate) · (up + 1)), eager (the loop over the
experts hit, run once for the K·B·T slots as moe.py's) or grouped_mm (integrations/moe.py,
is_transposed, has_bias: the biases gathered by the sorted expert ids)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I32, I64, Tensor


@dataclass(frozen=True)
class GptOss(moe.Moe):
    """moe.Moe's sizes (X local experts, K per token, Fe intermediate_size) and Llama's
    (kinds: S sliding, F full; window), grouped: the grouped_mm experts; router "gpt_oss"
    (GptOssTopKRouter, as _mlp runs it)."""


def forward(m: Builder, cfg: GptOss) -> Tensor:
    """GptOssForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)
        cos, sin = llama.rotary_tables(m, h, width=m["dh"].halved())  # emb = freqs
        masks = {k: llama.attention_mask(m, h, k, cfg.window) for k in sorted(set(cfg.kinds))}

        def extras(kind: str) -> tuple[Tensor, ...]:
            mask = masks[kind]
            return (positions, cos, sin) + (() if mask is None else (mask,))

        h = m.layers_by_kind("layers", cfg.kinds,
                             lambda x, kind: _layer(m, cfg, x, cos, sin, masks[kind]), h,
                             extras)
        h = llama.rms_norm(m, "norm", h, fp32_weight=True)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: GptOss, h: Tensor, cos: Tensor, sin: Tensor,
           mask: Tensor | None) -> Tensor:
    """GptOssDecoderLayer.forward: pre-norm attention and experts around the residual."""
    with m.module("self_attn"):
        a = _attention(m, cfg, llama.rms_norm(m, "input_layernorm", h, fp32_weight=True),
                       cos, sin, mask)
    h = ops.add(h, a)
    x = llama.rms_norm(m, "post_attention_layernorm", h, fp32_weight=True)
    return ops.add(h, _mlp(m, cfg, x))


def _attention(m: Builder, cfg: GptOss, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """GptOssAttention.forward with eager_attention_forward: repeat_kv, scores · scaling +
    mask, torch.cat([scores, sinks.reshape(1, -1, 1, 1).expand(B, -1, T, -1)], -1), minus
    its .max(dim=-1, keepdim=True).values, softmax in the scores' dtype, [..., :-1],
    dropout, .to(V's dtype), the product with V, transposed, contiguous, o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    one = Dim.const(1)

    def heads(name: str, n: Dim, bias: bool) -> Tensor:
        return ops.transpose(ops.view(m.linear(name, x, n * dh, bias), (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H, cfg.bias_q), heads("k_proj", Hkv, cfg.bias_k), \
        heads("v_proj", Hkv, cfg.bias_v)
    c, s = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = _rotate(q, c, s), _rotate(k, c, s)
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    assert mask is not None  # eager only
    G = m["G"]
    k, v = llama.repeat_kv(k, G), llama.repeat_kv(v, G)
    w = ops.add(ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), float(dh.value) ** -0.5), mask)
    sinks = ops.expand(ops.view(m.param("sinks", H), (one, H, one, one)), (B, H, T, one))
    combined = ops.cat([w, sinks], -1)
    combined = ops.sub(combined, ops.max_dim(combined))
    probs = ops.narrow(ops.softmax(combined), -1, 0, T)  # probs[..., :-1]
    probs = ops.to(m.dropout(probs, cfg.attention_dropout), v.dtype)
    out = ops.contiguous(ops.transpose(ops.matmul(probs, v), 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_o)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """_apply_rotary_emb: first_half, second_half = torch.chunk(x, 2, dim=-1) (views);
    cat((first * cos - second * sin, second * cos + first * sin), dim=-1)."""
    first, second = ops.split(x, x.shape[-1].halved(), -1)
    return ops.cat([ops.sub(ops.mul(first, cos), ops.mul(second, sin)),
                    ops.add(ops.mul(second, cos), ops.mul(first, sin))], -1)


def _mlp(m: Builder, cfg: GptOss, x: Tensor) -> Tensor:
    """GptOssMLP.forward: hidden_states.reshape(-1, E); the router; the experts; reshaped
    back (the router scores it also returns are not used)."""
    B, T, E = x.shape
    with m.module("mlp"):
        flat = ops.reshape(x, (B * T, E))
        with m.module("router"):
            # F.linear(hidden_states, self.weight, self.bias); topk; softmax(values, dim=1)
            logits = ops.linear(flat, m.param("weight", m["X"], E), m.param("bias", m["X"]))
            values, chosen = ops.topk(logits, m["K"])
            weights = ops.softmax(values)
        with m.module("experts"):
            run = _grouped_experts if cfg.grouped else _eager_experts
            out = run(m, flat, chosen, weights)
        return ops.reshape(out, (B, T, E))


def _weights(m: Builder, E: Dim) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """GptOssExperts' parameters: gate_up_proj (X, E, 2·Fe), its bias (X, 2·Fe), down_proj
    (X, Fe, E), its bias (X, E)."""
    X, Fe = m["X"], m["Fe"]
    return (m.param("gate_up_proj", X, E, 2 * Fe), m.param("gate_up_proj_bias", X, 2 * Fe),
            m.param("down_proj", X, Fe, E), m.param("down_proj_bias", X, E))


def _apply_gate(gate_up: Tensor, Fe: Dim) -> Tensor:
    """GptOssExperts._apply_gate: gate, up = gate_up[..., ::2], gate_up[..., 1::2] (views);
    gate.clamp(max=limit); up.clamp(-limit, limit); glu = gate * sigmoid(gate * alpha);
    (up + 1) * glu."""
    gate = ops.clamp(ops.slice_step(gate_up, -1, 0, Fe, 2))
    up = ops.clamp(ops.slice_step(gate_up, -1, 1, Fe, 2))
    glu = ops.mul(gate, ops.sigmoid(ops.mul(gate, 1.702)))
    return ops.mul(ops.add(up, 1.0), glu)


def _eager_experts(m: Builder, flat: Tensor, chosen: Tensor, weights: Tensor) -> Tensor:
    """GptOssExperts.forward, its loop over the experts hit run once for the n = K·B·T
    slots (moe.py's docstring): hidden_states[token_idx] @ gate_up_proj[e] +
    gate_up_proj_bias[e]; the gate; @ down_proj[e] + down_proj_bias[e]; times
    routing_weights[token_idx, top_k_pos, None]; .to(the hidden dtype), index_add_. Under
    autocast the matmul casts each expert's weight slices anew (moe._expert_slice)."""
    gate_up, gate_up_bias, down, down_bias = _weights(m, flat.shape[-1])
    n = chosen.shape[0] * chosen.shape[1]
    final = m.trace.tensor(flat.shape, flat.dtype, False)  # torch.zeros_like
    with m.trace.no_grad():  # torch.where(expert_mask[expert_idx])
        pairs = m.trace.tensor((n, Dim.const(2)), I64, False)
    top_k_pos, token_idx = (ops.select(pairs, 1, j) for j in (0, 1))
    state = ops.index(flat, [token_idx])
    h = ops.add(ops.matmul(state, moe._expert_slice(m, gate_up)), ops.select(gate_up_bias, 0, 0))
    h = _apply_gate(h, m["Fe"])
    h = ops.add(ops.matmul(h, moe._expert_slice(m, down)), ops.select(down_bias, 0, 0))
    h = ops.mul(h, ops.unsqueeze(ops.index(weights, [token_idx, top_k_pos]), -1))
    return ops.index_add_(final, token_idx, ops.to(h, final.dtype))


def _grouped_experts(m: Builder, flat: Tensor, chosen: Tensor, weights: Tensor) -> Tensor:
    """grouped_mm_experts_forward (integrations/moe.py) with is_transposed and has_bias: the
    slots sorted by expert (expert_ids_g, perm), hidden_states[perm // K], the weights[perm];
    _grouped_linear: grouped_mm of the input in the weights' dtype with the 3-D weight as it
    is, plus bias[expert_ids_g] (a gather keeping the sorted ids); the gate; the same for
    down_proj; times the weights, weighted_out[inv_perm], summed over the K slots, cast."""
    gate_up, gate_up_bias, down, down_bias = _weights(m, flat.shape[-1])
    N, K = chosen.shape
    n = N * K
    with m.trace.no_grad():
        expert_ids = m.trace.tensor((n,), I64, False)  # torch.sort's values
        perm = m.trace.tensor((n,), I64, False)
        token_of = m.trace.tensor((n,), I64, False)  # perm // num_top_k
        offsets = m.trace.tensor((m["X"],), I32, False)
    selected = ops.index(flat, [token_of])
    sample_weights = ops.index(ops.reshape(weights, (n,)), [perm])
    h = ops.grouped_mm(ops.to(selected, gate_up.dtype), gate_up, offsets)
    h = ops.add(h, ops.index(gate_up_bias, [expert_ids]))
    h = _apply_gate(h, m["Fe"])
    h = ops.grouped_mm(ops.to(h, down.dtype), down, offsets)
    h = ops.add(h, ops.index(down_bias, [expert_ids]))
    weighted = ops.mul(h, ops.unsqueeze(sample_weights, -1))
    with m.trace.no_grad():  # inv_perm[perm] = arange(S)
        inv_perm = m.trace.tensor((n,), I64, False)
    weighted = ops.index(weighted, [inv_perm])
    return ops.to(ops.sum_dim(ops.view(weighted, (N, K, flat.shape[-1])), 1), flat.dtype)
