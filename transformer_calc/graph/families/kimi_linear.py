"""Kimi Linear as transformers 5.23 runs it without fla (the CPU's path):
models/kimi_linear/modeling_kimi_linear.py (KimiLinearForCausalLM, KimiLinearModel,
KimiLinearDecoderLayer: pre-norm mixer and MLP around the residual; KimiLinearRMSNorm,
LlamaRMSNorm's ops).

The mixer is KimiLinearAttention (DeepSeek-V3's latent attention without any position
encoding: q_proj, kv_a_proj_with_mqa split into the latent, normed, and the shared key part
used as it is; expand_kv's kv_b_proj views and the key written into a new tensor) or
KimiLinearDeltaAttention: q, k, v projections concatenated for causal_conv1d_fn (a depthwise
convolution, SiLU), KimiLinearForgetGate (f_b_proj(f_a_proj(x)) plus dt_bias in fp32, a
softplus written as where(g > 20, g, log(1 + exp(g))), times -exp(A_log)), beta =
sigmoid(b_proj), chunk_kimi_delta_attention (L2-normed q and k in fp32, chunks of 64 padded,
a per-channel decay mask (B, H, c, 64, 64, d), the forward substitution's Python loop over
the 63 rows of each chunk, each of whose products keeps its row and block clones (one
storage each for the 63, their bytes summed), then the
loop over chunks keeping each chunk's state, decays and intra-chunk scores: the graph traces
the first two chunks, a third standing for all but the last, and the last, whose dead state
update autograd frees), KimiLinearRMSNormGated (fp32, a sigmoid gate through g_a_proj and
g_b_proj) and o_proj.

The MLP is KimiLinearMLP before the experts begin (mlp_layer_types) and KimiLinearMoE after:
DeepSeek-V3's fp32 sigmoid router renormalising its top-k in place, the experts' eager loop
or grouped_mm, the shared experts (families/mla.py's)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, mla
from transformer_calc.graph.families.mamba import causal_conv1d
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor

CHUNK = 64  # chunk_kimi_delta_attention's chunk_size
# a layer's kind as one letter (Builder.layers_by_kind): its mixer (F latent attention, M
# Kimi Delta Attention) and its MLP (D dense, E the experts)
KINDS = {("F", "D"): "a", ("F", "E"): "b", ("M", "D"): "c", ("M", "E"): "d"}


@dataclass(frozen=True)
class KimiLinear(mla.MlaMoe):
    """KimiLinearConfig's sizes: MlaMoe's (no query latent, no RoPE: dr only widens the
    shared key part) and the delta attention's: Hl linear_num_heads, dl linear_head_dim, Kc
    linear_conv_kernel_dim, Q the chunk (64; Tq the chunks). layers: each layer's letter of
    KINDS."""

    Hl: int = 1
    dl: int = 1
    Kc: int = 1
    layers: str = "d"

    def sizes(self) -> dict[str, int]:
        return {**mla.MlaMoe.sizes(self), "Hl": self.Hl, "dl": self.dl, "Kc": self.Kc,
                "Q": CHUNK}

    @property
    def mixers(self) -> str:
        """Each layer's mixer, F or M."""
        back = {v: k for k, v in KINDS.items()}
        return "".join(back[k][0] for k in self.layers)


def forward(m: Builder, cfg: KimiLinear) -> Tensor:
    """KimiLinearForCausalLM.forward(input_ids=ids, labels=ids, use_cache=False): the
    loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T).unsqueeze(0)
        # create_causal_mask for the latent attention; create_recurrent_attention_mask
        # (None without padding) for the delta attention
        mask = causal_mask(m, h) if m.run.attention == "eager" else None

        def extras(kind: str) -> tuple[Tensor, ...]:
            return (positions,) + ((mask,) if kind in "ab" and mask is not None else ())

        h = m.layers_by_kind("layers", cfg.layers, lambda x, k: _layer(m, cfg, x, k, mask),
                             h, extras)
        h = llama.rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: KimiLinear, h: Tensor, kind: str, mask: Tensor | None) -> Tensor:
    """KimiLinearDecoderLayer.forward: input_layernorm, the mixer, the residual;
    post_attention_layernorm, the MLP or the MoE, the residual."""
    x = llama.rms_norm(m, "input_layernorm", h)
    with m.module("self_attn"):
        y = _latent_attention(m, cfg, x, mask) if kind in "ab" else delta_attention(m, x)
    h = ops.add(h, y)
    x = llama.rms_norm(m, "post_attention_layernorm", h)
    f = mla._moe_block(m, cfg, x) if kind in "bd" else llama._mlp(m, cfg, x)
    return ops.add(h, f)


def _latent_attention(m: Builder, cfg: KimiLinear, x: Tensor, mask: Tensor | None) -> Tensor:
    """KimiLinearAttention.forward: the query q_proj(x) as heads; kv_a_proj_with_mqa(x) split
    into the latent (kv_a_layernorm over a view: it keeps the projection whole) and the
    shared key part, each viewed as one head; expand_kv; eager or SDPA attention (a value
    narrower than the query: SDPA's math kernel on the CPU); o_proj."""
    B, T, H, E = m["B"], m["T"], m["H"], m["E"]
    rkv, dn, dr, dv = m["rkv"], m["dn"], m["dr"], m["dv"]
    one = Dim.const(1)
    q = ops.transpose(ops.view(m.linear("q_proj", x, H * (dn + dr), False),
                               (B, T, H, dn + dr)), 1, 2)
    compressed = m.linear("kv_a_proj_with_mqa", x, rkv + dr, cfg.bias_k)
    kv, k_rot = ops.narrow(compressed, -1, 0, rkv), ops.narrow(compressed, -1, rkv.value, dr)
    kv = ops.view(llama.rms_norm(m, "kv_a_layernorm", kv), (B, one, T, rkv))
    k_rot = ops.view(k_rot, (B, one, T, dr))
    # expand_kv: kv_b_proj viewed (B, T, H, dn + dv), transposed and split (views); the key
    # a new_empty tensor that two copy_ fill (a new contiguous tensor, as a cat makes it)
    kv = ops.transpose(ops.view(m.linear("kv_b_proj", kv, H * (dn + dv), False),
                                (B, T, H, dn + dv)), 1, 2)
    k_pass, value = ops.narrow(kv, -1, 0, dn), ops.narrow(kv, -1, dn.value, dv)
    key = ops.cat([k_pass, ops.expand(k_rot, (B, H, T, dr))], -1)
    scaling = float((dn + dr).value) ** -0.5
    if mask is not None:
        out = llama.eager_attention(m, q, key, value, mask, dropout=cfg.attention_dropout,
                                    scaling=scaling)
    else:
        out = scaled_dot_product_attention(q, key, value, is_causal=True,
                                           dropout_p=cfg.attention_dropout, scale=scaling)
        out = ops.contiguous(ops.transpose(out, 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dv)))
    return m.linear("o_proj", out, E, cfg.bias_o)


def delta_attention(m: Builder, x: Tensor) -> Tensor:
    """KimiLinearDeltaAttention.forward in training, without a cache or padding mask."""
    B, T, E, Hl, dl = m["B"], m["T"], m["E"], m["Hl"], m["dl"]
    D = Hl * dl
    mixed = ops.cat([m.linear(name, x, D, False) for name in ("q_proj", "k_proj", "v_proj")],
                    -1)
    mixed = ops.transpose(causal_conv1d(m, ops.transpose(mixed, 1, 2), 3 * D, False), 1, 2)
    q, k, v = (ops.view(ops.narrow(mixed, -1, i * D.value, D), (B, T, Hl, dl))
               for i in range(3))
    with m.module("forget_gate"):
        g = _forget_gate(m, x)
    beta = ops.sigmoid(m.linear("b_proj", x, Hl, False))
    out = chunk_delta_rule(m, q, k, v, g, beta)
    gate = ops.view(m.linear("g_b_proj", m.linear("g_a_proj", x, dl, False), D, False),
                    (B, T, Hl, dl))
    out = ops.reshape(_gated_norm(m, out, gate), (B, T, D))
    return m.linear("o_proj", out, E, False)


def _forget_gate(m: Builder, x: Tensor) -> Tensor:
    """KimiLinearForgetGate.forward: (f_b_proj(f_a_proj(x)).float() + dt_bias.float()) as
    heads; -exp(A_log.float()) · where(g > 20, g, log(1 + exp(g)))."""
    B, T, Hl, dl = m["B"], m["T"], m["Hl"], m["dl"]
    one = Dim.const(1)
    D = Hl * dl
    f = m.linear("f_b_proj", m.linear("f_a_proj", x, dl, False), D, False)
    bias = ops.view(ops.to(m.param("dt_bias", D), F32), (one, one, D))
    g = ops.view(ops.add(ops.to(f, F32), bias), (B, T, Hl, dl))
    rate = ops.exp(ops.to(m.param("A_log", one, one, Hl, one), F32))
    softplus = ops.where(ops.gt(g, 20.0), g, ops.log(ops.add(ops.exp(g), 1.0)))
    return ops.mul(ops.neg(rate), softplus)


def _gated_norm(m: Builder, h: Tensor, gate: Tensor) -> Tensor:
    """KimiLinearRMSNormGated.forward: x.to(fp32) · rsqrt(mean(x²) + eps), times
    weight.to(fp32), times sigmoid(gate.to(fp32)), .to(the input's dtype)."""
    with m.module("o_norm"):
        w = m.param("weight", h.shape[-1])
        x = ops.to(h, F32)
        x = ops.mul(x, ops.rsqrt(ops.add(ops.mean(ops.pow(x, 2.0)), 1e-6)))
        x = ops.mul(ops.to(w, F32), x)
        return ops.to(ops.mul(x, ops.sigmoid(ops.to(gate, F32))), h.dtype)


def _l2norm(x: Tensor) -> Tensor:
    """l2norm: x / sqrt((x * x).sum(-1, keepdim=True) + eps)."""
    return ops.div_tensor(x, ops.sqrt(ops.add(ops.sum_dim(ops.mul(x, x), -1, keepdim=True),
                                              1e-6)))


def chunk_delta_rule(m: Builder, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor
                     ) -> Tensor:
    """chunk_kimi_delta_attention(q, k, v, g, beta, use_qk_l2norm_in_kernel=True), no initial
    state, the final state not returned: q, k, v, g (B, T, Hl, dl), beta (B, T, Hl);
    (B, T, Hl, dl) out in q's dtype."""
    B, T, Q, Tq, dl = m["B"], m["T"], m["Q"], m["Tq"], m["dl"]
    dtype = q.dtype
    q, k, v, beta, g = (ops.to(ops.contiguous(ops.transpose(t, 1, 2)), F32)
                        for t in (q, k, v, beta, g))
    q, k = _l2norm(q), _l2norm(k)
    pad = Tq * Q + Dim(-T.value, -T.poly)  # (chunk_size - T % chunk_size) % chunk_size
    q = ops.mul(ops.pad(q, pad, 2), float(dl.value) ** -0.5)
    k, v, g, beta = (ops.pad(t, pad, 2) for t in (k, v, g, beta))
    v_beta = ops.mul(v, ops.unsqueeze(beta, -1))
    k_beta = ops.mul(k, ops.unsqueeze(beta, -1))
    q, k, v, g, k_beta, v_beta = (ops.reshape(t, (t.shape[0], t.shape[1], Tq, Q, t.shape[-1]))
                                  for t in (q, k, v, g, k_beta, v_beta))
    g = ops.cumsum(g)  # over the chunk's positions
    tr = m.trace
    with tr.no_grad():  # torch.triu(torch.ones(Q, Q, dtype=bool), diagonal=0 and 1)
        mask, strict = tr.tensor((Q, Q), BOOL, False), tr.tensor((Q, Q), BOOL, False)
    decay = ops.sub(ops.unsqueeze(g, -2), ops.unsqueeze(g, -3))
    decay = ops.exp(ops.masked_fill(decay, ops.unsqueeze(strict, -1)))  # (.float(): as is)
    attn = ops.mul(ops.mul(ops.unsqueeze(k_beta, -2), ops.unsqueeze(k, -3)), decay)
    attn = ops.neg(ops.masked_fill(ops.sum_dim(attn, -1), mask))
    _substitute(attn)
    with tr.no_grad():
        eye = tr.tensor((Q, Q), F32, False)
    attn = ops.add(attn, eye)
    value = ops.matmul(attn, v_beta)
    k_cumdecay = ops.matmul(attn, ops.mul(k_beta, ops.exp(g)))
    with tr.no_grad():
        # torch.zeros(..., dtype=value.dtype): 16-bit under autocast (attn @ v_beta), so
        # both matmuls reading it keep the one tensor
        state = tr.tensor((B, m["Hl"], dl, dl), value.dtype, False)
        out = tr.tensor(value.shape, value.dtype, False)  # zeros_like(value)
        upper = tr.tensor((Q, Q), BOOL, False)  # triu(diagonal=1), made anew
    # the chunks traced: the first two, a third standing for all but the last, and the
    # last (its state update dead: what it saves is freed)
    steps = [0, 1, 2, 3] if Tq.value > 3 else [0, 1, 2] if Tq.value > 2 else \
        [0, 1] if Tq.value > 1 else [0]
    out_rg = False
    with tr.loop():
        for n, i in enumerate(steps):
            final = n == len(steps) - 1
            with tr.repeat(Tq + (-3)) if i == 2 and not final else nullcontext():
                state, y = _chunk_step(m, i, q, k, value, g, decay, k_cumdecay, state,
                                       upper, final)
                out_rg = out_rg or y.requires_grad  # core_attn_out[:, :, i] = y
    out.requires_grad = out_rg
    out = ops.narrow(ops.reshape(out, (B, m["Hl"], Tq * Q, dl)), 2, 0, T)
    return ops.to(ops.contiguous(ops.transpose(out, 1, 2)), dtype)


def _substitute(attn: Tensor) -> None:
    """The forward substitution, in place: for i in 1 .. Q − 1, row = attn[..., i, :i]
    .clone(), sub = attn[..., :i, :i].clone(), attn[..., i, :i] = row + (row.unsqueeze(-1)
    * sub).sum(-2). Each product keeps its two clones (mul: each operand for the other's
    gradient; the sum, the add and CopySlices keep nothing; no matmul): the graph makes the
    Q − 1 rows' clones as one storage of Σ i columns and the blocks' as one of Σ i² (the
    bytes summed, as the experts' loop sums its experts), and one product keeping both."""
    B, H, c, Q = attn.shape[:4]
    q, tr = Q.value, attn.trace
    rg = attn.requires_grad
    rows = tr.tensor((B, H, c, Dim.const(q * (q - 1) // 2)), attn.dtype, rg)
    tr.record("clone", rows)
    blocks = tr.tensor((B, H, c, Dim.const((q - 1) * q * (2 * q - 1) // 6)), attn.dtype, rg)
    tr.record("clone", blocks)
    product = tr.tensor(blocks.shape, attn.dtype, rg)
    tr.record("mul", product, [("other", blocks, rows.requires_grad),
                               ("self", rows, blocks.requires_grad)])


def _chunk_step(m: Builder, i: int, q: Tensor, k: Tensor, value: Tensor, g: Tensor,
                decay: Tensor, k_cumdecay: Tensor, state: Tensor, upper: Tensor,
                final: bool) -> tuple[Tensor, Tensor]:
    """One chunk of the loop: the read of the state, the intra-chunk scores against the new
    values, and (not after the last chunk) the state update."""
    Q = m["Q"]
    q_i, k_i, v_i, g_i = (ops.select(t, 2, i) for t in (q, k, value, g))
    inter = ops.matmul(ops.mul(q_i, ops.exp(g_i)), state)
    intra = ops.mul(ops.mul(ops.unsqueeze(q_i, -2), ops.unsqueeze(k_i, -3)),
                    ops.select(decay, 2, i))
    intra = ops.masked_fill(ops.sum_dim(intra, -1), upper)
    v_new = ops.sub(v_i, ops.matmul(ops.select(k_cumdecay, 2, i), state))
    y = ops.add(inter, ops.matmul(intra, v_new))
    with m.trace.no_grad() if final else nullcontext():
        last = ops.exp(ops.select(g_i, -2, Q.value - 1))
        keys = ops.mul(k_i, ops.exp(ops.sub(ops.narrow(g_i, -2, Q.value - 1, Dim.const(1)),
                                            g_i)))
        state = ops.add(ops.mul(state, ops.unsqueeze(last, -1)),
                        ops.matmul(ops.transpose(keys, -1, -2), v_new))
    return state, y
