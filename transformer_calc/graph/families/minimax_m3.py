"""MiniMax-M3's text decoder as transformers 5.23 runs it: models/minimax_m3_vl/
modeling_minimax_m3_vl.py (MiniMaxM3VLForCausalLM, MiniMaxM3VLTextModel,
MiniMaxM3VLDecoderLayer, MiniMaxM3VLRMSNorm, MiniMaxM3VLRotaryEmbedding, MiniMaxM3VLAttention
with full attention layers (the Lightning Indexer's minimax_m3_sparse layers are refused),
MiniMaxM3VLDenseMLP, MiniMaxM3VLSparseMoeBlock with MiniMaxM3VLTopKRouter and
MiniMaxM3VLExperts' eager loop).

- MiniMaxM3VLRMSNorm is GemmaRMSNorm's ops (fp32, times 1 + weight: families/gemma.py), for
  the layers' norms, q_norm and k_norm over each head (before the transpose) and the final
  norm;
- RoPE over int(head_dim · partial_rotary_factor) of each head (rope_parameters; the
  config's rotary_dim is not read by the text model), the rest concatenated (a new tensor
  even when empty); Llama's eager or SDPA attention;
- the MLPs (dense layers' and the shared experts') and each expert: gpt-oss's clamped
  SwiGLU on the halves of a fused gate_up projection: gate.clamp(max=limit),
  up.clamp(-limit, limit) (each keeps its input), gate · sigmoid(gate · alpha), (up + 1) ·
  that;
- the MoE block over the flattened tokens: the shared experts first; the router (F.linear
  in the model's dtype, sigmoid of the logits' fp32 copy; the choice among the
  bias-corrected scores leaves only its indices; the chosen scores gathered and divided by
  their sum in place); the experts' loop (moe.py's one-expert transcription); times
  routed_scaling_factor (a number), plus the shared output."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.families.gemma import rms_norm
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class MiniMaxM3:
    """MiniMaxM3VLTextConfig's sizes. Symbols: V, E, H, Hkv, dh, L, G = H / Hkv as Llama's; F
    the dense layers' MLP width (dense_intermediate_size), Fs the shared experts'
    (shared_intermediate_size), X experts, K per token, Fe an expert's inner size
    (intermediate_size); Dr the rotated width. pattern: each layer's MLP, D dense or E
    experts."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    L: int
    Dr: int
    X: int
    K: int
    Fe: int
    Fs: int
    pattern: str
    tied: bool = False
    attention_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "G": self.H // self.Hkv, "F": self.F, "L": self.L, "Dr": self.Dr,
                "X": self.X, "K": self.K, "Fe": self.Fe, "Fs": self.Fs}


def forward(m: Builder, cfg: MiniMaxM3) -> Tensor:
    """MiniMaxM3VLForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T).unsqueeze(0)
        mask = llama.attention_mask(m, h, "F", 0)
        cos, sin = llama.rotary_tables(m, h, width=m["Dr"])
        extras = (positions, cos, sin) + (() if mask is None else (mask,))

        def layer(x: Tensor, kind: str) -> Tensor:
            return _layer(m, cfg, x, kind, cos, sin, mask)

        h = m.layers_by_kind("layers", cfg.pattern, layer, h, lambda _: extras)
        h = rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: MiniMaxM3, h: Tensor, kind: str, cos: Tensor, sin: Tensor,
           mask: Tensor | None) -> Tensor:
    """MiniMaxM3VLDecoderLayer.forward: pre-norm attention and MLP (or MoE) around the
    residual."""
    with m.module("self_attn"):
        h = ops.add(h, _attention(m, cfg, rms_norm(m, "input_layernorm", h), cos, sin, mask))
    x = rms_norm(m, "post_attention_layernorm", h)
    with m.module("mlp"):
        return ops.add(h, _moe(m, x) if kind == "E" else _dense_mlp(m, x, "F"))


def _swiglu(m: Builder, gate_up: Tensor, width: Dim) -> Tensor:
    """The clamped SwiGLU (module docstring) of a fused projection's two halves (views)."""
    gate, up = ops.split(gate_up, width, -1)
    gate, up = ops.clamp(gate), ops.clamp(up)  # clamp(max=limit); clamp(-limit, limit)
    glu = ops.mul(gate, ops.sigmoid(ops.mul(gate, 1.0)))  # gate * sigmoid(gate * alpha)
    return ops.mul(ops.add(up, 1.0), glu)


def _dense_mlp(m: Builder, x: Tensor, width: str) -> Tensor:
    """MiniMaxM3VLDenseMLP.forward: down_proj(swiglu(gate_up_proj(x)))."""
    W = m[width]
    return m.linear("down_proj", _swiglu(m, m.linear("gate_up_proj", x, 2 * W, False), W),
                    m["E"], False)


def _moe(m: Builder, x: Tensor) -> Tensor:
    """MiniMaxM3VLSparseMoeBlock.forward (module docstring)."""
    B, T, E = x.shape
    flat = ops.view(x, (B * T, E))
    with m.module("shared_experts"):
        shared = _dense_mlp(m, flat, "Fs")
    weights, chosen = _router(m, flat)
    with m.module("experts"):
        out = _experts(m, flat, chosen, weights)
    out = ops.add(ops.mul(out, 1.0), shared)  # * routed_scaling_factor, + shared_output
    return ops.reshape(out, (B, T, E))


def _router(m: Builder, flat: Tensor) -> tuple[Tensor, Tensor]:
    """MiniMaxM3VLTopKRouter.forward: (B·T, K) routing weights (fp32) and expert indices."""
    N, E = flat.shape
    with m.module("gate"):
        w = moe._as_read(m, [("weight", m.param("weight", m["X"], E), 1)], scoped=False)[
            "weight"]()
        # F.sigmoid(F.linear(hidden_states.to(weight.dtype), weight).float())
        scores = ops.sigmoid(ops.to(ops.linear(flat, w), F32))
        with m.trace.no_grad():  # topk of the bias-corrected scores: its indices alone
            chosen = m.trace.tensor((N, m["K"]), I64, False)
        weights = ops.gather(scores, 1, chosen)
        # top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True)
        return ops.div_(weights, ops.sum_dim(weights, -1, keepdim=True)), chosen


def _experts(m: Builder, flat: Tensor, chosen: Tensor, weights: Tensor) -> Tensor:
    """MiniMaxM3VLExperts.forward, its loop over the experts hit run once for all K·B·T
    slots: hidden_states[token_idx], F.linear of the expert's gate_up_proj, _apply_gate,
    F.linear of its down_proj, times top_k_weights[token_idx, top_k_pos, None], index_add_
    into zeros_like(hidden_states) (the model's dtype)."""
    gate_up, down = moe._expert_weights(m, flat.shape[-1])
    n = chosen.shape[0] * chosen.shape[1]
    final = m.trace.tensor(flat.shape, flat.dtype, False)
    with m.trace.no_grad():  # torch.where(mask[expert_idx]): (top_k_pos, token_idx)
        pairs = m.trace.tensor((n, Dim.const(2)), I64, False)
    top_k_pos, token_idx = (ops.select(pairs, 1, j) for j in (0, 1))
    state = ops.index(flat, [token_idx])
    h = _swiglu(m, ops.linear(state, moe._expert_slice(m, gate_up())), m["Fe"])
    h = ops.linear(h, moe._expert_slice(m, down()))
    h = ops.mul(h, ops.unsqueeze(ops.index(weights, [token_idx, top_k_pos]), -1))
    return ops.index_add_(final, token_idx, ops.to(h, final.dtype))


def _attention(m: Builder, cfg: MiniMaxM3, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """MiniMaxM3VLAttention.forward without an indexer: q_norm(q_proj(x) as heads) and
    k_norm's, transposed; v; RoPE; eager or SDPA attention; o_proj."""
    B, T, H, Hkv, dh, Dr = m["B"], m["T"], m["H"], m["Hkv"], m["dh"], m["Dr"]

    def heads(name: str, n: Dim, norm: str = "") -> Tensor:
        y = ops.view(m.linear(name, x, n * dh, False), (B, T, n, dh))
        return ops.transpose(rms_norm(m, norm, y) if norm else y, 1, 2)

    q, k, v = heads("q_proj", H, "q_norm"), heads("k_proj", Hkv, "k_norm"), heads("v_proj", Hkv)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    if Dr.value < dh.value:
        q, k = (llama._partial_rotary(t, cos, sin, Dr) for t in (q, k))
    else:  # torch.cat([q_embed, q_pass]): the pass part empty
        q, k = (ops.cat([llama.apply_rotary(t, cos, sin)], -1) for t in (q, k))
    G, scaling = m["G"], float(dh.value) ** -0.5
    if m.run.attention == "eager":
        assert mask is not None
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=cfg.attention_dropout, scaling=scaling)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout, scaling=scaling,
                                   mask=mask)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], False)
