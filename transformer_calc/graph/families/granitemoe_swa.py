"""GraniteMoeSWA as transformers 5.23 runs it: models/granitemoe_swa/modeling_granitemoe_swa.py
(GraniteMoeSWAForCausalLM, GraniteMoeSWAModel, GraniteMoeSWADecoderLayer, GraniteMoeSWARMSNorm,
GraniteMoeSWAAttention, eager_attention_forward, GraniteMoeSWAMoE, GraniteMoeSWATopKRouter,
GraniteMoeSWAExperts). Llama's pre-norm layers (LlamaRMSNorm's form) with Granite's
multipliers (embeddings, residual branches, attention scale, logits: Python numbers, nothing
kept), sliding and full layers (layer_types; RoPE where layer_rope_theta is not 0), eager
attention only with a learned per-head sink applied after it: sigmoid((logsumexp(scores) -
sinks).float()) scales the output. Every layer's MLP is the experts behind
GraniteMoeSWATopKRouter (F.linear, .float(), topk, softmax over the top logits, type_as the
input), eager or grouped_mm (moe.py).

GraniteMoe and GraniteMoeShared (models/granitemoe/modeling_granitemoe.py,
models/granitemoeshared/modeling_granitemoeshared.py: GraniteMoeAttention,
GraniteMoeSharedMLP, GraniteMoeSharedDecoderLayer) are the same layers without the sink
and the sliding layers: every layer full with RoPE, attention through transformers'
interface (eager, SDPA or flash_attention_2: llama.py's, the scaling attention_multiplier,
a number), and GraniteMoeShared's shared MLP (input_linear to 2·shared_intermediate_size,
act(chunk 0) · chunk 1, output_linear) run on the post-attention norm's output and added to
the experts' output."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class GraniteMoeSwa(moe.Moe):
    """moe.Moe's sizes (X local experts, K per token, Fe intermediate_size) and Llama's
    kinds (F full, S sliding, N full without RoPE) and window; router "granitemoe_swa"."""


@dataclass(frozen=True)
class GraniteMoe(GraniteMoeSwa):
    """GraniteMoeForCausalLM / GraniteMoeSharedForCausalLM: no sink, every layer F, any
    attention implementation; shared: GraniteMoeShared's shared MLP of Fs."""

    shared: bool = False


def forward(m: Builder, cfg: GraniteMoeSwa) -> Tensor:
    """GraniteMoeSWAForCausalLM (GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM)
    .forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = ops.mul(m.embedding("embed_tokens", ids, V, E), 1.0)  # * embedding_multiplier
        positions = tr.tensor((T,), I64, False)
        masks = {k: llama.attention_mask(m, h, k, cfg.window) for k in sorted(set(cfg.kinds))}
        cos, sin = llama.rotary_tables(m, h)

        def extras(kind: str) -> tuple[Tensor, ...]:
            mask = masks[kind]
            return (positions, cos, sin) + (() if mask is None else (mask,))

        h = m.layers_by_kind("layers", cfg.kinds,
                             lambda x, kind: _layer(m, cfg, x, cos, sin, masks[kind], kind), h,
                             extras)
        h = llama.rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(ops.div(logits, 1.0), ids, V)  # logits / logits_scaling


def _layer(m: Builder, cfg: GraniteMoeSwa, h: Tensor, cos: Tensor, sin: Tensor,
           mask: Tensor | None, kind: str) -> Tensor:
    """GraniteMoeSWADecoderLayer.forward: residual + branch * residual_multiplier, twice;
    the second branch the sparse block (no shared MLP: shared_intermediate_size 0);
    GraniteMoeDecoderLayer's and GraniteMoeSharedDecoderLayer's the same with
    GraniteMoeAttention, and moe_hidden_states + self.shared_mlp(hidden_states)."""
    granite = isinstance(cfg, GraniteMoe)
    with m.module("self_attn"):
        x = llama.rms_norm(m, "input_layernorm", h)
        a = llama._attention(m, cfg, x, cos, sin, mask) if granite else \
            _attention(m, cfg, x, cos, sin, mask, kind)
    h = ops.add(h, ops.mul(a, 1.0))
    x = llama.rms_norm(m, "post_attention_layernorm", h)
    out = moe_block(m, cfg.grouped, x)
    if isinstance(cfg, GraniteMoe) and cfg.shared:
        out = ops.add(out, _shared_mlp(m, x))
    return ops.add(h, ops.mul(out, 1.0))


def _shared_mlp(m: Builder, x: Tensor) -> Tensor:
    """GraniteMoeSharedMLP.forward: input_linear, chunk(2, dim=-1) (views),
    activation(chunk 0) * chunk 1, output_linear."""
    with m.module("shared_mlp"):
        Fs = m["Fs"]
        gate, up = ops.split(m.linear("input_linear", x, 2 * Fs, False), Fs, -1)
        return m.linear("output_linear", ops.mul(ops.silu(gate), up), m["E"], False)


def _attention(m: Builder, cfg: GraniteMoeSwa, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None, kind: str) -> Tensor:
    """GraniteMoeSWAAttention.forward with eager_attention_forward: repeat_kv; scores ·
    attention_multiplier + mask; lse = logsumexp(scores, -1); sink_scale = (lse -
    sinks.view(1, -1, 1)).to(float32).sigmoid(); softmax in fp32 cast to Q's dtype,
    dropout, the product with V, times sink_scale.unsqueeze(-1).to(its dtype), transposed,
    contiguous; o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    one = Dim.const(1)

    def heads(name: str, n: Dim, bias: bool) -> Tensor:
        return ops.transpose(ops.view(m.linear(name, x, n * dh, bias), (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H, cfg.bias_q), heads("k_proj", Hkv, cfg.bias_k), \
        heads("v_proj", Hkv, cfg.bias_v)
    if kind != "N":
        c, s = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
        q, k = llama.apply_rotary(q, c, s), llama.apply_rotary(k, c, s)
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    assert mask is not None  # eager only
    G = m["G"]
    k, v = llama.repeat_kv(k, G), llama.repeat_kv(v, G)
    w = ops.add(ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), 1.0), mask)
    sinks = ops.view(m.param("sinks", H), (one, H, one))
    scale = ops.sigmoid(ops.to(ops.sub(ops.logsumexp(w), sinks), F32))
    w = m.dropout(ops.to(ops.softmax(w, F32), q.dtype), cfg.attention_dropout)
    out = ops.matmul(w, v)
    out = ops.mul(out, ops.to(ops.unsqueeze(scale, -1), out.dtype))
    out = ops.contiguous(ops.transpose(out, 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_o)


def moe_block(m: Builder, grouped: bool, x: Tensor) -> Tensor:
    """GraniteMoeSWAMoE.forward (GraniteMoeHybridMoE's is the same): layer_input.reshape(-1,
    E); the router; the experts (grouped: the grouped_mm path); .view(B, T, E)."""
    B, T, E = x.shape
    with m.module("block_sparse_moe"):
        flat = ops.reshape(x, (B * T, E))
        with m.module("router"):
            # F.linear(hidden_states, self.weight).float(); topk; softmax(dim=-1), type_as
            logits = ops.to(ops.linear(flat, m.param("weight", m["X"], E)), F32)
            values, chosen = ops.topk(logits, m["K"])
            weights = ops.to(ops.softmax(values), flat.dtype)
        with m.module("experts"):
            run = moe.grouped_experts if grouped else moe.eager_experts
            out = run(m, flat, chosen, weights)
        return ops.view(out, (B, T, E))
