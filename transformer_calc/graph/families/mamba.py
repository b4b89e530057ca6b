"""Mamba and Mamba-2 as transformers 5.23 runs them without the mamba_ssm and causal-conv1d
kernels (the CPU's path): models/mamba/modeling_mamba.py (MambaForCausalLM, MambaModel,
MambaBlock with residual_in_fp32, MambaRMSNorm, MambaMixer.forward's torch path:
causal_conv1d_fn and mamba_selective_scan's sequential loop over T) and
models/mamba2/modeling_mamba2.py (Mamba2ForCausalLM, Mamba2Block, Mamba2Mixer.forward's
torch path: causal_conv1d_fn, mamba2_chunk_scan's SSD in chunks with segment_sum, cumsum,
exp and einsums, and MambaRMSNormGated).

The scan's loop runs T steps of small ops; autograd keeps each step's state (and, in a
16-bit model, its cast for the output's matmul), so the graph traces the first step and one
more that stands for the T − 1 alike (Trace.loop, Trace.repeat)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from transformer_calc.graph import autocast, ops
from transformer_calc.graph.families.llama import rms_norm
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor


@dataclass(frozen=True)
class Mamba:
    """MambaConfig's sizes. Symbols: V vocab, E hidden, L layers, Di intermediate_size
    (expand · hidden), N state_size, Kc conv_kernel, R time_step_rank."""

    V: int
    E: int
    L: int
    Di: int
    N: int
    Kc: int
    R: int
    tied: bool = False
    conv_bias: bool = True  # use_conv_bias
    bias: bool = False  # use_bias: in_proj and out_proj
    # FalconMambaMixer (models/falcon_mamba/modeling_falcon_mamba.py): dt, B and C through
    # FalconMambaWeightlessRMSNorm after x_proj's split
    weightless_norms: bool = False

    def sizes(self) -> dict[str, int]:
        # Q: the CUDA scan's chunk of 2048 tokens (its scan_intermediates, ⌈T / Q⌉ each)
        return {"V": self.V, "E": self.E, "L": self.L, "Di": self.Di, "N": self.N,
                "Kc": self.Kc, "Rd": self.R, "Q": 2048}


@dataclass(frozen=True)
class Mamba2:
    """Mamba2Config's sizes. Symbols: V, E, L, N, Kc as Mamba's; Gs n_groups, Hg heads per
    group (num_heads = Gs·Hg), Ph head_dim (intermediate = Gs·Hg·Ph), Q chunk_size; the run
    adds Tq, the chunks (T / Q rounded up)."""

    V: int
    E: int
    L: int
    Gs: int
    Hg: int
    Ph: int
    N: int
    Kc: int
    Q: int
    tied: bool = False
    conv_bias: bool = True
    bias: bool = False

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "L": self.L, "Gs": self.Gs, "Hg": self.Hg,
                "Ph": self.Ph, "N": self.N, "Kc": self.Kc, "Q": self.Q}


def forward(m: Builder, cfg: Mamba | Mamba2) -> Tensor:
    """MambaForCausalLM.forward (Mamba2ForCausalLM's is the same): the backbone, norm_f,
    lm_head over hidden_states.to(lm_head's dtype), logits .float(), the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    ids = m.trace.input((B, T), I64, "input_ids")
    with m.module("backbone"):
        h = m.embedding("embeddings", ids, V, E)
        h = m.layers("layers", lambda x: _block(m, cfg, x), h)
        h = rms_norm(m, "norm_f", h)
    with m.module("lm_head"):
        w = m.tied("backbone.embeddings.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(ops.to(h, w.dtype), w)
    return causal_lm_loss(logits, ids, V)


def _block(m: Builder, cfg: Mamba | Mamba2, h: Tensor) -> Tensor:
    """MambaBlock.forward: the norm over hidden_states.to(norm's dtype), the residual in
    fp32 (residual_in_fp32, the configs' default), the mixer, the sum."""
    x = rms_norm(m, "norm", ops.to(h, m.run.dtype))
    residual = ops.to(h, F32)
    with m.module("mixer"):
        y = mamba_mixer(m, x, cfg.conv_bias, cfg.bias, dt_norms=cfg.weightless_norms,
                        weightless=True) if isinstance(cfg, Mamba) else \
            mamba2_mixer(m, x, cfg.conv_bias, cfg.bias)
    return ops.add(residual, y)


def causal_conv1d(m: Builder, x: Tensor, channels: Dim, bias: bool,
                  kernel: bool = False) -> Tensor:
    """causal_conv1d_fn's torch fallback: F.conv1d over x.to(weight's dtype), depthwise,
    padded K − 1 on both sides, cut to the first T steps, SiLU, .to(x's dtype). kernel:
    causal-conv1d's CausalConv1dFn with the SiLU fused (ops.causal_conv1d_fn), what the
    installed package runs on CUDA."""
    Kc, T = m["Kc"], x.shape[-1]
    with m.module("conv1d"):
        w = m.param("weight", channels, Dim.const(1), Kc)
        b = m.param("bias", channels) if bias else None
        if kernel:
            return ops.causal_conv1d_fn(x, w, b)
        out = ops.conv1d_depthwise(ops.to(x, w.dtype), w, b, Kc.value - 1)
    return ops.to(ops.silu(ops.narrow(out, 2, 0, T)), x.dtype)


def mamba_mixer(m: Builder, x: Tensor, conv_bias: bool, bias: bool,
                dt_norms: bool = False, weightless: bool = False) -> Tensor:
    """MambaMixer.forward in training without kernels: in_proj, the convolution over the
    first half (the second is the gate z), x_proj into dt, B, C; dt_proj's weight times dt
    (a matmul, its bias added inside the scan), the scan, out_proj. dt_norms:
    JambaMambaMixer's RMSNorms over dt, B and C (dt_layernorm, b_layernorm, c_layernorm)
    after the split; weightless: FalconMambaMixer's FalconMambaWeightlessRMSNorm there
    instead (weightless_rms_norm). Sizes: the Builder's Di, N, R, Kc."""
    Di, N, R, E = m["Di"], m["N"], m["Rd"], m["E"]
    dtype = x.dtype
    proj = ops.transpose(m.linear("in_proj", x, 2 * Di, bias), 1, 2)
    A = ops.neg(ops.exp(ops.to(m.param("A_log", Di, N), F32)))
    if m.run.device == "cuda" and (weightless or not dt_norms):
        # training on CUDA: mamba_ssm's kernel (FalconMambaMixer's with its norms' weights)
        return _mamba_inner(m, proj, A, conv_bias, bias)
    # JambaMambaMixer on CUDA: causal-conv1d's and mamba_ssm's kernels where installed, the
    # rest as on the CPU
    kernels = m.run.device == "cuda"
    hs, gate = ops.split(proj, Di, 1)
    hs = causal_conv1d(m, hs, Di, conv_bias, kernel=kernels)
    xp = m.linear("x_proj", ops.transpose(hs, 1, 2), R + 2 * N, False)
    dt, Bm, Cm = (ops.narrow(xp, -1, start, n) for start, n in (
        (0, R), (R.value, N), (R.value + N.value, N)))
    if dt_norms:
        dt, Bm, Cm = ((weightless_rms_norm(m, name, t) if weightless else rms_norm(m, name, t))
                      for name, t in (("dt_layernorm", dt), ("b_layernorm", Bm),
                                      ("c_layernorm", Cm)))
    if dt_norms and m.run.lora is not None and m.run.lora.quant:
        # JambaMambaMixer on a quantised model (config._is_quantized): "a hack to properly
        # call the nn.Linear module", (dt_proj(time_step) - dt_proj.bias).transpose(1, 2):
        # the bitsandbytes layer, and peft's adapter on it, run
        out = m.linear("dt_proj", dt, Di, True)
        with m.module("dt_proj"):
            b = m.tied(f"{m.trace.scope}.bias")
            time_step = ops.transpose(ops.sub(out, b), 1, 2)
            dt_bias = ops.to(b, F32)
    else:
        with m.module("dt_proj"):
            time_step = ops.matmul(m.param("weight", Di, R), ops.transpose(dt, 1, 2))
            dt_bias = ops.to(m.param("bias", Di), F32)
    D = ops.to(m.param("D", Di), F32)
    if kernels:  # mamba_ssm's selective_scan_fn(u, dt, A, B.T, C.T, D, z=gate, ...)
        y = ops.selective_scan_fn(hs, time_step, A, ops.transpose(Bm, 1, 2),
                                  ops.transpose(Cm, 1, 2), D, gate, dt_bias, m["Tq"])
    else:
        y = _selective_scan(m, hs, time_step, A, Bm, Cm, D, gate, dt_bias)
    return m.linear("out_proj", ops.to(ops.transpose(y, 1, 2), dtype), E, bias)


def weightless_rms_norm(m: Builder, name: str, x: Tensor) -> Tensor:
    """FalconMambaWeightlessRMSNorm.forward: _norm(x.float()).type_as(x), where _norm(y) =
    y * rsqrt(y.pow(2).mean(-1, keepdim=True) + eps); its weight is a buffer of ones the
    forward never reads (no parameter, nothing kept for it)."""
    with m.module(name):
        y = ops.to(x, F32)
        return ops.to(ops.mul(y, ops.rsqrt(ops.add(ops.mean(ops.pow(y, 2.0)), 1e-6))),
                      x.dtype)


def _mamba_inner(m: Builder, proj: Tensor, A: Tensor, conv_bias: bool, bias: bool) -> Tensor:
    """MambaMixer.forward in training on CUDA: mamba_inner_fn(projected_states,
    conv1d.weight, conv1d.bias, x_proj.weight, dt_proj.weight, out_proj.weight,
    out_proj.bias.float(), A, None, None, D.float(), delta_bias=dt_proj.bias.float(),
    delta_softplus=True): mamba_ssm's MambaInnerFn, one op (ops.mamba_inner) that makes
    xz contiguous and returns out_proj's output."""
    Di, N, R, E, Kc = m["Di"], m["N"], m["Rd"], m["E"], m["Kc"]
    with m.module("conv1d"):
        weights = [m.param("weight", Di, Dim.const(1), Kc)]
        weights += [m.param("bias", Di)] if conv_bias else []
    with m.module("x_proj"):
        x_proj = m.param("weight", R + 2 * N, Di)
    with m.module("dt_proj"):
        dt_proj = m.param("weight", Di, R)
        delta_bias = ops.to(m.param("bias", Di), F32)
    with m.module("out_proj"):
        out_proj = m.param("weight", E, Di)
        out_bias = ops.to(m.param("bias", E), F32) if bias else None
    # under CUDA's autocast its forward casts x_proj, dt_proj and out_proj's weights (the
    # copies kept) and out_proj's bias (read only)
    weights += _kernel_casts(m, [x_proj, dt_proj, out_proj])
    D = ops.to(m.param("D", Di), F32)
    return ops.mamba_inner(ops.contiguous(proj), A, D, delta_bias, weights, out_bias, R, E,
                           m["Tq"])


def _selective_scan(m: Builder, u: Tensor, dt: Tensor, A: Tensor, Bm: Tensor, Cm: Tensor,
                    D: Tensor, z: Tensor, dt_bias: Tensor) -> Tensor:
    """mamba_selective_scan's torch path (delta_softplus, the sequential loop): u and dt
    (B, Di, T), A (Di, N) fp32, Bm and Cm (B, T, N) views of x_proj's output."""
    B, T, Di, N = m["B"], m["T"], m["Di"], m["N"]
    dtype = u.dtype
    dt = ops.softplus(ops.add(dt, ops.unsqueeze(ops.to(dt_bias, dt.dtype), -1)))
    dt4 = ops.unsqueeze(dt, -1)
    # discrete_A = exp(A[None, :, None, :] * dt[..., None]); discrete_B = dt[..., None] *
    # B[:, None].float(); deltaB_u = discrete_B * u[..., None].float()
    dA = ops.exp(ops.mul(ops.unsqueeze(ops.unsqueeze(A, 0), 2), dt4))
    dB = ops.mul(dt4, ops.to(ops.unsqueeze(Bm, 1), F32))
    dBu = ops.mul(dB, ops.to(ops.unsqueeze(u, -1), F32))
    tr = m.trace
    with tr.no_grad():
        state = tr.tensor((B, Di, N), dtype, False)  # torch.zeros: the initial state
    outputs_rg = False
    with tr.loop():
        # ssm_state = discrete_A[:, :, i] * ssm_state + deltaB_u[:, :, i];
        # scan_output = matmul(ssm_state.to(dtype), C[:, i, :].unsqueeze(-1))
        for i in range(2):
            if i == 1 and not T.value > 1:
                break
            with tr.repeat(T + (-1)) if i == 1 else nullcontext():
                state = ops.add(ops.mul(ops.select(dA, 2, i), state), ops.select(dBu, 2, i))
                y = ops.matmul(ops.to(state, dtype), ops.unsqueeze(ops.select(Cm, 1, i), -1))
                outputs_rg = outputs_rg or y.requires_grad
    y = ops.stack_new(y, (B, Di, T), outputs_rg)  # torch.stack(scan_outputs, dim=-1)
    y = ops.add(y, ops.mul(u, ops.unsqueeze(ops.unsqueeze(D, 0), -1)))
    return ops.mul(y, ops.silu(z))


def mamba2_mixer(m: Builder, x: Tensor, conv_bias: bool, bias: bool,
                 falcon: str = "") -> Tensor:
    """Mamba2Mixer.forward in training without kernels (BambaMixer's is the same): in_proj
    split into the gate, the convolution's channels (x, B, C) and dt; the convolution; the
    chunked scan; the gated RMSNorm; out_proj. Sizes: the Builder's Gs, Hg, Ph, N, Kc, Q.
    falcon: FalconH1Mixer's (modeling_falcon_h1.py): the input times ssm_in_multiplier,
    in_proj's output times the mup_vector buffer (a (1, 1, width) copy per layer, kept by
    the product: model memory, as parameters are), then FalconH1RMSNormGated normalising
    before the gate ("norm", mamba_rms_norm) or y · silu(z) without a norm ("gate")."""
    B, T, E, N = m["B"], m["T"], m["E"], m["N"]
    Gs, Hg, Ph = m["Gs"], m["Hg"], m["Ph"]
    H, Di = Gs * Hg, Gs * Hg * Ph
    conv_dim = Di + 2 * Gs * N
    dtype = x.dtype
    if falcon:
        x = ops.mul(x, 1.0)  # * ssm_in_multiplier
    proj = m.linear("in_proj", x, Di + conv_dim + H, bias)
    if falcon:  # * mup_vector: a buffer in the model's dtype (the model's memory)
        one = Dim.const(1)
        mup = m.trace.tensor((one, one, proj.shape[-1]), dtype, False, "buffer",
                             "mup_vector")
        proj = ops.mul(proj, mup)
    A = ops.neg(ops.exp(ops.to(m.param("A_log", H), F32)))
    if m.run.device == "cuda":  # training on CUDA: mamba_ssm's fused kernel
        return _split_conv1d_scan_combined(m, proj, A, conv_dim, conv_bias, bias,
                                           falcon != "gate")
    gate = ops.narrow(proj, -1, 0, Di)
    xbc = ops.narrow(proj, -1, Di.value, conv_dim)
    dt = ops.narrow(proj, -1, Di.value + conv_dim.value, H)
    xbc = ops.transpose(causal_conv1d(m, ops.transpose(xbc, 1, 2), conv_dim, conv_bias), 1, 2)
    hs, Bm, Cm = (ops.narrow(xbc, -1, start, n) for start, n in (
        (0, Di), (Di.value, Gs * N), (Di.value + Gs.value * N.value, Gs * N)))
    y = _chunk_scan(m, ops.view(hs, (B, T, H, Ph)), dt, A, ops.view(Bm, (B, T, Gs, N)),
                    ops.view(Cm, (B, T, Gs, N)), m.param("D", H), m.param("dt_bias", H))
    y = ops.reshape(y, (B, T, Di))
    if falcon == "gate":
        y = ops.mul(y, ops.silu(gate))
    elif falcon:
        y = _falcon_gated_norm(m, y, gate, Gs, Hg * Ph)
    else:
        y = gated_rms_norm(m, "norm", y, gate, Gs, Hg * Ph)
    return m.linear("out_proj", ops.to(y, dtype), E, bias)


def _split_conv1d_scan_combined(m: Builder, proj: Tensor, A: Tensor, conv_dim: Dim,
                                conv_bias: bool, bias: bool, norm: bool) -> Tensor:
    """Mamba2Mixer.forward in training on CUDA (BambaMixer's and FalconH1Mixer's are the
    same): mamba2_split_conv1d_scan_combined(projected_states, conv1d.weight.squeeze(1),
    conv1d.bias, dt_bias, A, D, ..., rmsnorm_weight=norm.weight (Falcon-H1: None without
    mamba_rms_norm), outproj_weight=out_proj.weight, outproj_bias=out_proj.bias,
    norm_before_gate=False): mamba_ssm's MambaSplitConv1dScanCombinedFn, one op
    (ops.mamba_split_conv1d_scan_combined) that returns out_proj's output."""
    Gs, Hg, Ph, E = m["Gs"], m["Hg"], m["Ph"], m["E"]
    H, Di = Gs * Hg, Gs * Hg * Ph
    with m.module("conv1d"):
        weights = [m.param("weight", conv_dim, Dim.const(1), m["Kc"])]
        weights += [m.param("bias", conv_dim)] if conv_bias else []
    weights += [m.param("dt_bias", H), m.param("D", H)]
    if norm:
        with m.module("norm"):
            weights.append(m.param("weight", Di))
    with m.module("out_proj"):
        out_proj = [m.param("weight", E, Di)] + ([m.param("bias", E)] if bias else [])
    # under autocast (torch.is_autocast_enabled(), CUDA's) its forward casts outproj_weight
    # and outproj_bias to the autocast dtype (plain .to copies) and saves those
    weights += _kernel_casts(m, out_proj)
    return ops.mamba_split_conv1d_scan_combined(proj, A, weights, (H, Ph), Gs, norm, E)


def _kernel_casts(m: Builder, weights: list[Tensor]) -> list[Tensor]:
    """The weights a mamba_ssm Function's forward reads: under CUDA's autocast
    (torch.is_autocast_enabled()) each cast with .to(torch.get_autocast_gpu_dtype()), a
    copy made inside the forward (no grad: the Function's own) that its
    ctx.save_for_backward keeps; the parameters themselves otherwise."""
    half = autocast.cuda_enabled(m.trace)
    if half is None:
        return weights
    with m.trace.no_grad():
        return [ops.to(w, half) for w in weights]


def _falcon_gated_norm(m: Builder, h: Tensor, gate: Tensor, groups: Dim, width: Dim) -> Tensor:
    """FalconH1RMSNormGated.forward with norm_before_gate (its default): an RMSNorm over each
    group in fp32, weight.view(groups, width) times it, then times silu(gate.to(fp32)),
    .to(the input's dtype)."""
    with m.module("norm"):
        w = m.param("weight", h.shape[-1])
        x = ops.to(h, F32)
        g = ops.view(x, (*x.shape[:-1], groups, width))
        g = ops.mul(g, ops.rsqrt(ops.add(ops.mean(ops.pow(g, 2.0)), 1e-6)))
        g = ops.mul(ops.view(w, (groups, width)), g)
        x = ops.mul(ops.view(g, x.shape), ops.silu(ops.to(gate, F32)))
        return ops.to(x, h.dtype)


def gated_rms_norm(m: Builder, name: str, h: Tensor, gate: Tensor, groups: Dim,
                   width: Dim) -> Tensor:
    """MambaRMSNormGated.forward: x.to(fp32) * silu(gate.to(fp32)), an RMSNorm over each of
    the groups (a view (..., groups, width)), weight * x.to(the input's dtype)."""
    with m.module(name):
        w = m.param("weight", h.shape[-1])
        x = ops.mul(ops.to(h, F32), ops.silu(ops.to(gate, F32)))
        g = ops.view(x, (*x.shape[:-1], groups, width))
        g = ops.mul(g, ops.rsqrt(ops.add(ops.mean(ops.pow(g, 2.0)), 1e-6)))
        return ops.mul(w, ops.to(ops.view(g, x.shape), h.dtype))


def segment_sum(m: Builder, x: Tensor) -> Tensor:
    """modeling_mamba2.segment_sum: x[..., None] expanded over the chunk, masked below the
    diagonal, cumsum over the rows, masked above it with -inf (two (Q, Q) bool masks,
    each kept by its masked_fill)."""
    Q = x.shape[-1]
    x = ops.expand(ops.unsqueeze(x, -1), (*x.shape, Q))
    masks = []
    with m.trace.no_grad():
        for _ in range(2):  # ~torch.tril(torch.ones(Q, Q, dtype=bool), diagonal)
            masks.append(m.trace.tensor((Q, Q), BOOL, False))
    x = ops.masked_fill(x, masks[0])
    return ops.masked_fill(ops.cumsum(x), masks[1])


def _chunk_scan(m: Builder, hs: Tensor, dt: Tensor, A: Tensor, Bm: Tensor, Cm: Tensor,
                D: Tensor, dt_bias: Tensor) -> Tensor:
    """mamba2_chunk_scan (dt_softplus, dt_limit (0, inf), no initial state): hs (B, T, H,
    P), dt (B, T, H), A (H,) fp32, Bm and Cm (B, T, G, N); (B, T, H, P) out."""
    B, T, Q, Tq = m["B"], m["T"], m["Q"], m["Tq"]
    H = m["Gs"] * m["Hg"]
    dt = ops.add(dt, ops.to(dt_bias, dt.dtype))
    dt = ops.clamp(ops.softplus(dt))
    hs = ops.to(hs, F32)
    Bm = ops.repeat_interleave(ops.to(Bm, F32), m["Hg"], 2)
    Cm = ops.repeat_interleave(ops.to(Cm, F32), m["Hg"], 2)
    pad = Tq * Q + Dim(-T.value, -T.poly)  # (chunk_size - T % chunk_size) % chunk_size
    d_residual = ops.mul(ops.unsqueeze(D, -1), ops.pad(hs, pad, 1))
    # dt[..., None].float() and dt.float(): two copies in a 16-bit model
    hs = ops.mul(hs, ops.to(ops.unsqueeze(dt, -1), F32))
    A = ops.mul(ops.to(A, hs.dtype), ops.to(dt, F32))
    hs, A, Bm, Cm = (_chunks(m, t, pad) for t in (hs, A, Bm, Cm))
    A = ops.permute(A, (0, 3, 1, 2))  # (B, H, c, Q)
    a_cumsum = ops.cumsum(A)
    # 1. the diagonal blocks
    Lw = ops.exp(segment_sum(m, A))
    G = ops.einsum("bclhn,bcshn->bclsh", Cm, Bm)
    M = ops.mul(G, ops.permute(Lw, (0, 2, 3, 4, 1)))
    y_diag = ops.einsum("bclsh,bcshp->bclhp", M, hs)
    # 2. each chunk's state
    last = ops.narrow(a_cumsum, -1, Q.value - 1, Dim.const(1))
    decay_states = ops.exp(ops.sub(last, a_cumsum))
    b_decay = ops.mul(Bm, ops.unsqueeze(ops.permute(decay_states, (0, 2, 3, 1)), -1))
    states = ops.einsum("bclhn,bclhp->bchpn", b_decay, hs)
    # 3. the recurrence between chunks
    with m.trace.no_grad():
        previous = m.trace.tensor((B, Dim.const(1), *states.shape[2:]), F32, False)
    states = ops.cat([previous, states], 1)
    ends = ops.pad(ops.select(a_cumsum, -1, Q.value - 1), 1)
    decay_chunk = ops.transpose(ops.exp(segment_sum(m, ends)), 1, 3)
    new_states = ops.einsum("bzch,bzhpn->bchpn", decay_chunk, states)
    states = ops.narrow(new_states, 1, 0, Tq)
    # 4. each chunk's state to its outputs
    state_decay_out = ops.exp(a_cumsum)
    c_states = ops.einsum("bclhn,bchpn->bclhp", Cm, states)
    y_off = ops.mul(c_states, ops.unsqueeze(ops.permute(state_decay_out, (0, 2, 3, 1)), -1))
    out = ops.contiguous(ops.add(y_diag, y_off))
    out = ops.reshape(out, (B, Tq * Q, H, hs.shape[-1]))
    out = ops.add(out, d_residual)
    if pad.value > 0:
        out = ops.narrow(out, 1, 0, T)
    return out


def _chunks(m: Builder, t: Tensor, pad: Dim) -> Tensor:
    """reshape_into_chunks: padded along T (F.pad: a new tensor), (B, c, Q, ...)."""
    t = ops.pad(t, pad, 1)
    return ops.reshape(t, (t.shape[0], m["Tq"], m["Q"], *t.shape[2:]))

