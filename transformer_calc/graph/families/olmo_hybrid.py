"""OLMo Hybrid as transformers 5.23 runs it without fla (the CPU's path):
models/olmo_hybrid/modeling_olmo_hybrid.py (OlmoHybridForCausalLM, OlmoHybridModel,
OlmoHybridAttentionDecoderLayer with OLMo 3's attention: q_norm and k_norm over the width,
RoPE in fp32 or none (NoPE), each sublayer's output normalised before the residual add;
OlmoHybridLinearAttentionDecoderLayer: pre-norms around OlmoHybridGatedDeltaNet and the
MLP; OlmoHybridRMSNorm, whose weight multiplies in fp32).

The Gated DeltaNet's torch path: separate q, k, v projections concatenated for
causal_conv1d_fn (a depthwise convolution, SiLU), beta = sigmoid(b_proj), the decay
g = -exp(A_log) · softplus(a_proj + dt_bias), torch_chunk_gated_delta_rule (L2-normed
q and k in fp32, chunks of 64, two triangular solves, then a Python loop over the chunks
that keeps each chunk's state and new values: the graph traces the first two chunks and a
third that stands for the rest, Trace.loop and Trace.repeat), OlmoHybridRMSNormGated and
o_proj. The last chunk's state update feeds nothing the loss reads: autograd frees what it
saved, so the graph runs it without grad (its FLOPs still count)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.families.mamba import causal_conv1d
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor

CHUNK = 64  # torch_chunk_gated_delta_rule's chunk_size


@dataclass(frozen=True)
class OlmoHybrid:
    """OlmoHybridConfig's sizes. Symbols: V, E, H, Hkv, dh, F, L, G = H / Hkv as Llama's;
    Hk linear_num_key_heads, Hv linear_num_value_heads (Gk = Hv / Hk), dk and dv their head
    widths, Kc the convolution's kernel, Q the chunk (64; Tq the chunks). kinds: each
    layer's, "F" attention or "M" the Gated DeltaNet. rope: False where rope_theta is null
    (NoPE)."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    L: int
    Hk: int
    Hv: int
    dk: int
    dv: int
    Kc: int
    kinds: str
    tied: bool = False
    rope: bool = True

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv, "Hk": self.Hk,
                "Hv": self.Hv, "Gk": self.Hv // self.Hk, "dk": self.dk, "dv": self.dv,
                "Kc": self.Kc, "Q": CHUNK}


def forward(m: Builder, cfg: OlmoHybrid) -> Tensor:
    """OlmoHybridForCausalLM.forward(input_ids=ids, labels=ids, use_cache=False): the
    loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T).unsqueeze(0)
        # OlmoHybridRotaryEmbedding returns fp32 cos and sin; none under NoPE
        cos, sin = llama.rotary_tables(m, h, fp32=True) if cfg.rope else (None, None)
        # create_causal_mask for attention; create_recurrent_attention_mask (None without
        # padding) for the linear layers
        mask = causal_mask(m, h) if m.run.attention == "eager" else None

        def extras(kind: str) -> tuple[Tensor, ...]:
            if kind == "M":
                return (positions,)
            rope = (cos, sin) if cos is not None and sin is not None else ()
            return (positions, *rope) + ((mask,) if mask is not None else ())

        def layer(x: Tensor, kind: str) -> Tensor:
            if kind == "M":
                return _linear_layer(m, cfg, x)
            return _attention_layer(m, x, cos, sin, mask)

        h = m.layers_by_kind("layers", cfg.kinds, layer, h, extras)
        h = llama.rms_norm(m, "norm", h, fp32_weight=True)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    return causal_lm_loss(logits, ids, V)


def _mlp(m: Builder, x: Tensor) -> Tensor:
    """OlmoHybridMLP.forward: down_proj(silu(gate_proj(x)) * up_proj(x))."""
    with m.module("mlp"):
        F, E = m["F"], m["E"]
        gate = ops.silu(m.linear("gate_proj", x, F, False))
        return m.linear("down_proj", ops.mul(gate, m.linear("up_proj", x, F, False)), E, False)


def _attention_layer(m: Builder, h: Tensor, cos: Tensor | None, sin: Tensor | None,
                     mask: Tensor | None) -> Tensor:
    """OlmoHybridAttentionDecoderLayer.forward: attention, post_attention_layernorm, the
    residual; the MLP, post_feedforward_layernorm, the residual."""
    with m.module("self_attn"):
        a = _attention(m, h, cos, sin, mask)
    h = ops.add(h, llama.rms_norm(m, "post_attention_layernorm", a, fp32_weight=True))
    return ops.add(h, llama.rms_norm(m, "post_feedforward_layernorm", _mlp(m, h),
                                     fp32_weight=True))


def _attention(m: Builder, x: Tensor, cos: Tensor | None, sin: Tensor | None,
               mask: Tensor | None) -> Tensor:
    """OlmoHybridAttention.forward: q_norm(q_proj(x)), k_norm(k_proj(x)), v_proj(x) viewed
    as heads; RoPE in fp32 cast back (apply_rotary_pos_emb's .to(q_type)) unless NoPE;
    eager_attention_forward or SDPA; o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(name: str, n: Dim, norm: str) -> Tensor:
        y = m.linear(name, x, n * dh, False)
        if norm:
            y = llama.rms_norm(m, norm, y, fp32_weight=True)
        return ops.transpose(ops.view(y, (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H, "q_norm"), heads("k_proj", Hkv, "k_norm"), \
        heads("v_proj", Hkv, "")
    if cos is not None and sin is not None:
        cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
        q, k = (ops.to(llama.apply_rotary(t, cos, sin), v.dtype) for t in (q, k))
    G, scaling = m["G"], float(dh.value) ** -0.5
    if m.run.attention == "eager":
        assert mask is not None
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=0.0, scaling=scaling)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=0.0, scaling=scaling)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], False)


def _linear_layer(m: Builder, cfg: OlmoHybrid, h: Tensor) -> Tensor:
    """OlmoHybridLinearAttentionDecoderLayer.forward: input_layernorm, the Gated DeltaNet,
    the residual; post_attention_layernorm, the MLP, the residual."""
    x = llama.rms_norm(m, "input_layernorm", h, fp32_weight=True)
    with m.module("linear_attn"):
        h = ops.add(h, gated_deltanet(m, x))
    x = llama.rms_norm(m, "post_attention_layernorm", h, fp32_weight=True)
    return ops.add(h, _mlp(m, x))


def gated_deltanet(m: Builder, x: Tensor) -> Tensor:
    """OlmoHybridGatedDeltaNet.forward in training without a cache or padding mask."""
    B, T, E = m["B"], m["T"], m["E"]
    Hk, Hv, dk, dv = m["Hk"], m["Hv"], m["dk"], m["dv"]
    key_dim, value_dim = Hk * dk, Hv * dv
    mixed = ops.cat([m.linear("q_proj", x, key_dim, False), m.linear("k_proj", x, key_dim, False),
                     m.linear("v_proj", x, value_dim, False)], -1)
    mixed = causal_conv1d(m, ops.transpose(mixed, 1, 2), 2 * key_dim + value_dim, False)
    mixed = ops.transpose(mixed, 1, 2)  # mixed_qkv[:, :, -seq_len:] is all of it
    q = ops.view(ops.narrow(mixed, -1, 0, key_dim), (B, T, Hk, dk))
    k = ops.view(ops.narrow(mixed, -1, key_dim.value, key_dim), (B, T, Hk, dk))
    v = ops.view(ops.narrow(mixed, -1, 2 * key_dim.value, value_dim), (B, T, Hv, dv))
    # (linear_allow_neg_eigval's beta * 2.0, a product that keeps nothing, changes no
    # saved tensor: the spec does not say it)
    beta = ops.sigmoid(m.linear("b_proj", x, Hv, False))
    a_log = ops.neg(ops.exp(ops.to(m.param("A_log", Hv), F32)))
    a = ops.add(ops.to(m.linear("a_proj", x, Hv, False), F32), m.param("dt_bias", Hv))
    g = ops.mul(a_log, ops.softplus(a))
    out = chunk_gated_delta_rule(m, q, k, v, g, beta)
    gate = m.linear("g_proj", x, value_dim, False)
    out = ops.reshape(out, (B * T * Hv, dv))
    out = gated_rms_norm(m, out, ops.reshape(gate, (B * T * Hv, dv)))
    return m.linear("o_proj", ops.reshape(out, (B, T, value_dim)), E, False)


def gated_rms_norm(m: Builder, h: Tensor, gate: Tensor) -> Tensor:
    """OlmoHybridRMSNormGated.forward (norm before gate): x.to(fp32), x · rsqrt(mean(x²) +
    eps), weight · x.to(input dtype), times silu(gate.to(fp32)), .to(input dtype)."""
    with m.module("o_norm"):
        w = m.param("weight", h.shape[-1])
        x = ops.to(h, F32)
        x = ops.mul(x, ops.rsqrt(ops.add(ops.mean(ops.pow(x, 2.0)), 1e-5)))
        x = ops.mul(w, ops.to(x, h.dtype))
        return ops.to(ops.mul(x, ops.silu(ops.to(gate, F32))), h.dtype)


def _l2norm(x: Tensor) -> Tensor:
    """l2norm: x * rsqrt((x * x).sum(-1, keepdim=True) + eps)."""
    return ops.mul(x, ops.rsqrt(ops.add(ops.sum_dim(ops.mul(x, x), -1, keepdim=True), 1e-6)))


def chunk_gated_delta_rule(m: Builder, q: Tensor, k: Tensor, v: Tensor, g: Tensor,
                           beta: Tensor) -> Tensor:
    """torch_chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True), no
    initial state, the final state not returned: q, k (B, T, Hk, dk), v (B, T, Hv, dv), g
    and beta (B, T, Hv); (B, T, Hv, dv) out in v's dtype."""
    B, T, Q, Tq = m["B"], m["T"], m["Q"], m["Tq"]
    Hk, Hv, dk, dv = m["Hk"], m["Hv"], m["dk"], m["dv"]
    dtype = q.dtype
    if Hk.value != Hv.value:  # repeat_interleave(num_v_heads // num_k_heads, dim=2)
        q, k = (ops.repeat_interleave(t, m["Gk"], 2) for t in (q, k))
    q, k, v, beta, g = (ops.to_contiguous(ops.transpose(t, 1, 2), F32)
                        for t in (q, k, v, beta, g))
    q, k = _l2norm(q), _l2norm(k)
    q = ops.mul(q, float(dk.value) ** -0.5)
    pad = Tq * Q + Dim(-T.value, -T.poly)  # (chunk_size - T % chunk_size) % chunk_size
    q, k, v = (ops.pad(t, pad, 2) for t in (q, k, v))
    beta, g = (ops.pad(t, pad, 2) for t in (beta, g))
    v_beta = ops.mul(v, ops.unsqueeze(beta, -1))
    k_beta = ops.mul(k, ops.unsqueeze(beta, -1))
    q, k, k_beta, v_beta = (ops.reshape(t, (B, Hv, Tq, Q, t.shape[-1]))
                            for t in (q, k, k_beta, v_beta))
    g = ops.reshape(g, (B, Hv, Tq, Q))
    tr = m.trace
    with tr.no_grad():  # torch.ones(Q, Q, dtype=bool).triu(1)
        upper = tr.tensor((Q, Q), BOOL, False)
    cum = ops.cumsum(g)
    pairwise = ops.sub(ops.unsqueeze(cum, 4), ops.unsqueeze(cum, 3))
    pairwise = ops.exp(ops.masked_fill(pairwise, upper))
    k_t = ops.transpose(k, -1, -2)
    ut = ops.mul(ops.matmul(k_beta, k_t), pairwise)
    intra = ops.mul(ops.matmul(q, k_t), pairwise)
    decayed_k_beta = ops.mul(k_beta, ops.unsqueeze(ops.exp(cum), -1))
    new_values = ops.solve_triangular(ut, v_beta)
    k_cumdecay = ops.solve_triangular(ut, decayed_k_beta)
    with tr.no_grad():
        state = tr.tensor((B, Hv, dk, dv), F32, False)  # torch.zeros
        out = tr.tensor(new_values.shape, F32, False, stride=new_values.stride)  # zeros_like
    q = ops.mul(q, ops.unsqueeze(ops.exp(cum), -1))
    one = Dim.const(1)
    # the state's decays feed only the state updates, the last of which is dead: with
    # one chunk nothing reads them
    with tr.no_grad() if not Tq.value > 1 else nullcontext():
        last = ops.narrow(cum, -1, Q.value - 1, one)
        k = ops.mul(k, ops.unsqueeze(ops.exp(ops.sub(last, cum)), -1))
        chunk_decay = ops.unsqueeze(ops.unsqueeze(
            ops.exp(ops.select(cum, -1, Q.value - 1)), -1), -1)
    out_rg = False
    with tr.loop():
        for i in range(3):
            if not Tq.value > i:
                break
            final = i < 2 and not Tq.value > i + 1  # the last chunk's update is dead
            with tr.repeat(Tq + (-2)) if i == 2 else nullcontext():
                v_new = ops.sub(ops.select(new_values, 2, i),
                                ops.matmul(ops.select(k_cumdecay, 2, i), state))
                inter = ops.matmul(ops.select(q, 2, i), state)
                y = ops.add(inter, ops.matmul(ops.select(intra, 2, i), v_new))
                out_rg = out_rg or y.requires_grad  # core_attn_out[:, :, i] = y (CopySlices)
                with tr.no_grad() if final else nullcontext():
                    decayed = ops.mul(state, ops.select(chunk_decay, 2, i))
                    state = ops.add(decayed, ops.matmul(
                        ops.transpose(ops.select(k, 2, i), -1, -2), v_new))
    out.requires_grad = out_rg
    out = ops.reshape(out, (B, Hv, Tq * Q, dv))
    out = ops.narrow(out, 2, 0, T)
    return ops.to_contiguous(ops.transpose(out, 1, 2), dtype)
