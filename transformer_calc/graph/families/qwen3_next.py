"""Qwen3-Next and Qwen3.5 (text) as transformers 5.23 runs them without the fla and
causal-conv1d kernels (the CPU's path): models/qwen3_next/modeling_qwen3_next.py
(Qwen3NextForCausalLM, Qwen3NextModel, Qwen3NextDecoderLayer, Qwen3NextAttention with its
sigmoid output gate, Qwen3NextGatedDeltaNet with causal_conv1d_fn's torch fallback and
torch_chunk_gated_delta_rule, Qwen3NextRMSNorm (x · (1 + w)), Qwen3NextRMSNormGated,
Qwen3NextSparseMoeBlock: Qwen2-MoE's experts with a gated shared expert, families/moe.py),
models/qwen3_5/modeling_qwen3_5.py (Qwen3_5ForCausalLM: the same layers with the Gated
DeltaNet's input projections split into in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, the
dense MLP in every layer, and the multimodal RoPE's (B, T, ·) tables) and
models/qwen3_5_moe/modeling_qwen3_5_moe.py (Qwen3_5MoeForCausalLM: Qwen3.5's layers with
Qwen3-Next's experts in every layer).

The CUDA kernels (fla's chunk_gated_delta_rule, FusedRMSNormGated, causal-conv1d) are not
modelled: on CUDA transformers calls them where installed, so memory_report reads this graph
for the CPU only (costs/activations.py).

torch_chunk_gated_delta_rule's second phase is a Python loop over the T / 64 chunks
(rounded up: Tq); autograd keeps each chunk's state and corrected values, so the graph traces
the first chunk, a second (which first saves the decayed queries and keys, read against a
state that now requires a gradient) and one more standing for the Tq − 2 alike
(Trace.loop, Trace.repeat)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.families.mamba import causal_conv1d
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, DType, Tensor

# a layer's letter: (token mixer, MLP) -> kind; F attention, M Gated DeltaNet; D the dense
# MLP, E the experts
KINDS = {("F", "D"): "a", ("F", "E"): "b", ("M", "D"): "c", ("M", "E"): "d"}


@dataclass(frozen=True)
class Qwen3Next(moe.Moe):
    """The config keys that shape the graph. Symbols beside Moe's (V, E, H, Hkv, dh, F, L,
    X, K, Fe, Fs): Hk linear_num_key_heads, Hr value heads per key head
    (linear_num_value_heads = Hk·Hr), Dk linear_key_head_dim, Dv linear_value_head_dim,
    Kc linear_conv_kernel_dim, Q the delta rule's chunk (64; the run adds Tq, the chunks),
    Dr the rotated width of a head (2·⌈int(dh · partial_rotary_factor) / 2⌉).
    kinds: each layer's letter of KINDS. split_proj: Qwen3.5's four input projections
    (else in_proj_qkvz and in_proj_ba); batch_rope: Qwen3.5's RoPE tables, (B, T, Dr).
    The Gated DeltaNet is the torch fallback's: fla's CUDA kernels are not modelled."""

    Hk: int = 1
    Hr: int = 1
    Dk: int = 1
    Dv: int = 1
    Kc: int = 4
    Q: int = 64
    Dr: int = 2
    kinds: str = "a"
    split_proj: bool = False
    batch_rope: bool = False

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "Hk": self.Hk, "Hr": self.Hr, "Dk": self.Dk,
                "Dv": self.Dv, "Kc": self.Kc, "Q": self.Q, "Dr": self.Dr}


def forward(m: Builder, cfg: Qwen3Next) -> Tensor:
    """Qwen3NextForCausalLM / Qwen3_5ForCausalLM.forward(input_ids=ids, labels=ids)
    (output_router_logits off, the configs' default): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T), viewed (and expanded)
        cos, sin = _rotary_tables(m, h, cfg.batch_rope)
        # causal_mask_mapping: create_causal_mask for the attention layers,
        # create_recurrent_attention_mask (None without padding) for the DeltaNet's
        mask = causal_mask(m, h) if m.run.attention == "eager" else None

        def extras(kind: str) -> tuple[Tensor, ...]:
            full = mask if kind in "ab" else None
            return (positions, cos, sin) + (() if full is None else (full,))

        def layer(x: Tensor, kind: str) -> Tensor:
            return _layer(m, cfg, x, kind, cos, sin, mask)

        h = m.layers_by_kind("layers", cfg.kinds, layer, h, extras)
        h = rms_norm_1p(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _rotary_tables(m: Builder, like: Tensor, batch: bool) -> tuple[Tensor, Tensor]:
    """Qwen3NextRotaryEmbedding.forward under no_grad: cos and sin of (1, T, Dr) in fp32,
    cast to the activation dtype; Qwen3_5TextRotaryEmbedding's over position_ids expanded
    to (3, B, T): its interleaved sections concatenated, (B, T, Dr)."""
    one, T, Dr = Dim.const(1), m["T"], m["Dr"]
    with m.trace.no_grad(), m.module("rotary_emb"):
        pair = []
        for _ in ("cos", "sin"):
            emb = m.trace.tensor((m["B"] if batch else one, T, Dr), F32, False)
            pair.append(ops.to(emb, like.dtype))
        return pair[0], pair[1]


def rms_norm_1p(m: Builder, name: str, h: Tensor) -> Tensor:
    """Qwen3NextRMSNorm.forward (Qwen3_5RMSNorm's is the same): x.float() · rsqrt(mean(x²)
    + eps), times (1.0 + weight.float()), .type_as(x)."""
    with m.module(name):
        w = m.param("weight", h.shape[-1])
        x = ops.to(h, F32)
        x = ops.mul(x, ops.rsqrt(ops.add(ops.mean(ops.pow(x, 2.0)), 1e-6)))
        x = ops.mul(x, ops.add(ops.to(w, F32), 1.0))
        return ops.to(x, h.dtype)


def _layer(m: Builder, cfg: Qwen3Next, h: Tensor, kind: str, cos: Tensor, sin: Tensor,
           mask: Tensor | None) -> Tensor:
    """Qwen3NextDecoderLayer.forward: input_layernorm, the Gated DeltaNet (linear_attn) or
    attention (self_attn), the residual; post_attention_layernorm, the MLP or the sparse MoE
    block (mlp), the residual."""
    x = rms_norm_1p(m, "input_layernorm", h)
    if kind in "cd":
        with m.module("linear_attn"):
            y = _gated_deltanet(m, cfg, x)
    else:
        with m.module("self_attn"):
            y = _attention(m, cfg, x, cos, sin, mask)
    h = ops.add(h, y)
    x = rms_norm_1p(m, "post_attention_layernorm", h)
    y = moe.sparse_moe_block(m, cfg, x) if kind in "bd" else llama._mlp(m, cfg, x)
    return ops.add(h, y)


def _attention(m: Builder, cfg: Qwen3Next, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """Qwen3NextAttention.forward: q_proj of twice the width viewed (B, T, H, 2·dh) and
    chunked into the query and the gate (views; the gate reshaped to (B, T, H·dh), a copy),
    q_norm and k_norm over each head, RoPE over the first Dr of each head with the rest
    concatenated back (a copy), Llama's attention, the output times sigmoid(gate), o_proj."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    qg = ops.view(m.linear("q_proj", x, H * dh * 2, False), (B, T, H, dh * 2))
    query, gate = ops.split(qg, dh, -1)
    gate = ops.reshape(gate, (B, T, H * dh))
    q = ops.transpose(rms_norm_1p(m, "q_norm", query), 1, 2)
    k = ops.view(m.linear("k_proj", x, Hkv * dh, False), (B, T, Hkv, dh))
    k = ops.transpose(rms_norm_1p(m, "k_norm", k), 1, 2)
    v = ops.transpose(ops.view(m.linear("v_proj", x, Hkv * dh, False), (B, T, Hkv, dh)), 1, 2)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = (llama._partial_rotary(t, cos, sin, m["Dr"]) for t in (q, k))
    G, scaling = m["G"], float(dh.value) ** -0.5
    if mask is not None:
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=cfg.attention_dropout, scaling=scaling)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout,
                                   scaling=scaling)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    out = ops.mul(out, ops.sigmoid(gate))
    return m.linear("o_proj", out, m["E"], False)


def _gated_deltanet(m: Builder, cfg: Qwen3Next, x: Tensor) -> Tensor:
    """Qwen3NextGatedDeltaNet.forward in training without a cache: the input projections
    (Qwen3-Next's in_proj_qkvz and in_proj_ba viewed per key head and split,
    fix_query_key_value_ordering; Qwen3.5's four), Q, K and V concatenated through the
    causal convolution, beta = sigmoid(b), g = -exp(A_log) · softplus(a + dt_bias), the
    chunked delta rule, the gated RMSNorm over each value head, out_proj."""
    B, T, E = m["B"], m["T"], m["E"]
    Hk, Hr, Dk, Dv = m["Hk"], m["Hr"], m["Dk"], m["Dv"]
    Hv = Hk * Hr
    Kd, Vd = Hk * Dk, Hv * Dv
    if cfg.split_proj:
        mixed = m.linear("in_proj_qkv", x, 2 * Kd + Vd, False)
        z = ops.reshape(m.linear("in_proj_z", x, Vd, False), (B, T, Hv, Dv))
        b = m.linear("in_proj_b", x, Hv, False)
        a = m.linear("in_proj_a", x, Hv, False)
    else:
        qkvz = ops.view(m.linear("in_proj_qkvz", x, 2 * Kd + 2 * Vd, False),
                        (B, T, Hk, 2 * Dk + 2 * Hr * Dv))
        ba = ops.view(m.linear("in_proj_ba", x, 2 * Hv, False), (B, T, Hk, 2 * Hr))
        q, k, v, z = (ops.narrow(qkvz, -1, start, n) for start, n in (
            (0, Dk), (Dk.value, Dk), (2 * Dk.value, Hr * Dv),
            (2 * Dk.value + Hr.value * Dv.value, Hr * Dv)))
        b, a = ops.narrow(ba, -1, 0, Hr), ops.narrow(ba, -1, Hr.value, Hr)
        v, z = (ops.reshape(t, (B, T, Hv, Dv)) for t in (v, z))
        b, a = (ops.reshape(t, (B, T, Hv)) for t in (b, a))
        mixed = ops.cat([ops.reshape(t, (B, T, n)) for t, n in ((q, Kd), (k, Kd), (v, Vd))],
                        -1)
    conv_dim = 2 * Kd + Vd
    mixed = ops.transpose(causal_conv1d(m, ops.transpose(mixed, 1, 2), conv_dim, False), 1, 2)
    q, k, v = (ops.narrow(mixed, -1, start, n) for start, n in (
        (0, Kd), (Kd.value, Kd), (2 * Kd.value, Vd)))
    q, k = (ops.reshape(t, (B, T, Hk, Dk)) for t in (q, k))
    v = ops.reshape(v, (B, T, Hv, Dv))
    beta = ops.sigmoid(b)
    decay = ops.neg(ops.exp(ops.to(m.param("A_log", Hv), F32)))
    g = ops.mul(decay, ops.softplus(ops.add(ops.to(a, F32), m.param("dt_bias", Hv))))
    out = _chunk_gated_delta_rule(m, q, k, v, g, beta)
    out = _gated_norm(m, ops.reshape(out, (B * T * Hv, Dv)),
                      ops.reshape(z, (B * T * Hv, Dv)))
    return m.linear("out_proj", ops.reshape(out, (B, T, Vd)), E, False)


def _gated_norm(m: Builder, h: Tensor, gate: Tensor) -> Tensor:
    """Qwen3NextRMSNormGated.forward (norm before gate): an RMSNorm in fp32, weight times it
    cast back, times silu(gate.to(fp32)), .to(the input's dtype)."""
    with m.module("norm"):
        w = m.param("weight", h.shape[-1])
        x = ops.to(h, F32)
        x = ops.mul(x, ops.rsqrt(ops.add(ops.mean(ops.pow(x, 2.0)), 1e-6)))
        x = ops.mul(w, ops.to(x, h.dtype))
        x = ops.mul(x, ops.silu(ops.to(gate, F32)))
        return ops.to(x, h.dtype)


def _fp32_contiguous(t: Tensor) -> Tensor:
    """x.to(torch.float32, memory_format=torch.contiguous_format): the tensor itself when
    already fp32 (Tensor.to compares the dtype and suggest_memory_format, which a transposed
    tensor passes: its layout stays, measured), else a contiguous fp32 copy (the graph's
    cast then its contiguous copy: the first is freed unsaved)."""
    return t if t.dtype == F32 else ops.contiguous(ops.to(t, F32))


def _l2norm(x: Tensor) -> Tensor:
    """l2norm: x · rsqrt((x · x).sum(-1, keepdim=True) + 1e-6)."""
    inv = ops.rsqrt(ops.add(ops.sum_dim(ops.mul(x, x), -1, keepdim=True), 1e-6))
    return ops.mul(x, inv)


def _chunk_gated_delta_rule(m: Builder, q: Tensor, k: Tensor, v: Tensor, g: Tensor,
                            beta: Tensor) -> Tensor:
    """torch_chunk_gated_delta_rule (chunk_size 64, no initial state, no final state,
    use_qk_l2norm_in_kernel): q, k (B, T, Hk, Dk), v (B, T, Hv, Dv), g (B, T, Hv) fp32, beta
    (B, T, Hv); (B, T, Hv, Dv) out in q's dtype."""
    T, Q, Tq, Hr = m["T"], m["Q"], m["Tq"], m["Hr"]
    dtype = q.dtype
    if Hr.value != 1:  # query, key .repeat_interleave(num_v_heads // num_k_heads, dim=2)
        q, k = ops.repeat_interleave(q, Hr, 2), ops.repeat_interleave(k, Hr, 2)
    q, k, v, beta, g = (_fp32_contiguous(ops.transpose(t, 1, 2)) for t in (q, k, v, beta, g))
    q, k = _l2norm(q), _l2norm(k)
    q = ops.mul(q, float(q.shape[-1].value) ** -0.5)
    pad = Tq * Q + Dim(-T.value, -T.poly)  # (chunk_size - T % chunk_size) % chunk_size
    q, k, v = (ops.pad(t, pad, 2) for t in (q, k, v))
    beta, g = ops.pad(beta, pad, -1), ops.pad(g, pad, -1)
    v_beta = ops.mul(v, ops.unsqueeze(beta, -1))
    k_beta = ops.mul(k, ops.unsqueeze(beta, -1))
    Bn, Hv = q.shape[0], q.shape[1]

    def chunks(t: Tensor) -> Tensor:
        return ops.reshape(t, (Bn, Hv, Tq, Q, t.shape[-1]))

    q, k, k_beta, v_beta = (chunks(t) for t in (q, k, k_beta, v_beta))
    g = ops.reshape(g, (Bn, Hv, Tq, Q))
    tr = m.trace
    with tr.no_grad():  # torch.ones(Q, Q, dtype=bool).triu(1)
        upper = tr.tensor((Q, Q), BOOL, False)
    cum = ops.cumsum(g)
    pairwise = ops.sub(ops.unsqueeze(cum, 4), ops.unsqueeze(cum, 3))
    pairwise = ops.exp(ops.masked_fill(pairwise, upper))
    ut_system = ops.mul(ops.matmul(k_beta, ops.transpose(k, -1, -2)), pairwise)
    intra = ops.mul(ops.matmul(q, ops.transpose(k, -1, -2)), pairwise)
    decayed_k_beta = ops.mul(k_beta, ops.unsqueeze(ops.exp(cum), -1))
    new_values = ops.solve_triangular(ut_system, v_beta)
    k_cumdecay = ops.solve_triangular(ut_system, decayed_k_beta)
    Dk, Dv = q.shape[-1], v_beta.shape[-1]
    with tr.no_grad():  # torch.zeros(recurrent_state_shape)
        state = tr.tensor((Bn, Hv, Dk, Dv), F32, False)
    q = ops.mul(q, ops.unsqueeze(ops.exp(cum), -1))
    # the state's decays, read only by the state updates (with one chunk, only by the last,
    # whose state is dropped: autograd frees what only it kept; its matmul still runs)
    with tr.no_grad() if not Tq.value > 1 else nullcontext():
        last = ops.narrow(cum, -1, Q.value - 1, Dim.const(1))  # cum_decay[..., -1:]
        k = ops.mul(k, ops.unsqueeze(ops.exp(ops.sub(last, cum)), -1))
        chunk_decay = ops.exp(ops.select(cum, -1, Q.value - 1))
        chunk_decay = ops.unsqueeze(ops.unsqueeze(chunk_decay, -1), -1)
    out_rg = False
    with tr.loop():
        # v_new = new_values[:, :, i] - k_cumdecay[:, :, i] @ state;
        # core_attn_out[:, :, i] = query[:, :, i] @ state + intra[:, :, i] @ v_new;
        # state = state * chunk_decay[:, :, i] + key[:, :, i].transpose(-1, -2) @ v_new
        # (chunks 0 and 1 traced, then one standing for the Tq - 2 alike; the last chunk's
        # update is dead, so it keeps nothing: traced without grad where it is a traced one)
        for i in range(3):
            if i == 1 and not Tq.value > 1 or i == 2 and not Tq.value > 2:
                break
            with tr.repeat(Tq + (-2)) if i == 2 else nullcontext():
                sel = [ops.select(t, 2, i) for t in (new_values, k_cumdecay, q, intra, k,
                                                     chunk_decay)]
                v_new = ops.sub(sel[0], ops.matmul(sel[1], state))
                y = ops.add(ops.matmul(sel[2], state), ops.matmul(sel[3], v_new))
                out_rg = out_rg or y.requires_grad
                dead = i < 2 and not Tq.value > i + 1
                with tr.no_grad() if dead else nullcontext():
                    state = ops.add(ops.mul(state, sel[5]),
                                    ops.matmul(ops.transpose(sel[4], -1, -2), v_new))
    # core_attn_out, written chunk by chunk in place (copy_ keeps nothing)
    out = ops.stack_new(new_values, new_values.shape, out_rg)
    out = ops.narrow(ops.reshape(out, (Bn, Hv, Tq * Q, Dv)), 2, 0, T)
    return _to_contiguous(ops.transpose(out, 1, 2), dtype)


def _to_contiguous(t: Tensor, dtype: DType) -> Tensor:
    """.to(initial_dtype, memory_format=torch.contiguous_format), as _fp32_contiguous."""
    return t if t.dtype == dtype else ops.contiguous(ops.to(t, dtype))
