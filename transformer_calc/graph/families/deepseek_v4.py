"""DeepSeek-V4 as transformers 5.23 runs it: models/deepseek_v4/modeling_deepseek_v4.py
(DeepseekV4ForCausalLM, DeepseekV4Model, DeepseekV4DecoderLayer, DeepseekV4RMSNorm,
DeepseekV4UnweightedRMSNorm, apply_rotary_pos_emb, DeepseekV4Attention with its own
eager_attention_forward, DeepseekV4GroupedLinear, DeepseekV4HCACompressor,
DeepseekV4CSACompressor, DeepseekV4Indexer, DeepseekV4HyperConnection, DeepseekV4HyperHead,
DeepseekV4SparseMoeBlock with DeepseekV4TopKRouter or DeepseekV4HashRouter,
DeepseekV4Experts and DeepseekV4MLP). Eager attention only (the class has no other path).

- The residual is N = hc_mult streams, (B, T, N, E): the embeddings expanded and made
  contiguous. Around each sublayer a hyper-connection (DeepseekV4HyperConnection) reads
  the streams flattened in fp32 through a weightless RMSNorm, projects them with its fn
  (cast to fp32) to pre (N), post (N) and comb (N·N) weights (each scaled by a 0-d view
  of `scale`, plus `base`): pre = sigmoid + eps, post = 2 · sigmoid, comb a softmax + eps
  then 2 · hc_sinkhorn_iters − 1 divisions by its column and row sums (+ eps); the
  sublayer reads the streams collapsed by pre; its output comes back as post ⊗ output +
  combᵀ @ streams. The hyper head (DeepseekV4HyperHead) collapses the streams before the
  final norm.
- DeepseekV4RMSNorm multiplies its weight in fp32 and casts once (Olmo2RMSNorm's ops).
- The attention: q_a_proj, q_a_norm, q_b_proj, a weightless norm over each head; one
  K=V head (kv_proj, kv_norm); interleaved RoPE on each head's last R channels
  (cos and sin repeat_interleaved anew at each call, the rotation in fp32, cast back,
  concatenated after the rest); the Q and H layers append compressed entries to the
  keys (their compressor); repeat_kv to every head, the scores with the (sliding-window
  causal) mask, the sink column, minus the row max (max.dim keeps its indices), softmax in
  the scores' dtype, the sink column dropped, times V; the output's RoPE undone (-sin);
  o_a_proj, a grouped linear over Og groups (a bmm), then o_b_proj.
- The compressors: kv_proj and gate_proj over the tokens, the first W · m of them in
  windows of m (W = T // m), the gate plus position_bias, a softmax over the window in
  fp32 (cast back) weighting kv, summed, kv_norm, RoPE at the windows' positions. The CSA
  compressor (Q layers) lays out two series, each window's second half and the previous
  window's first, in windows of 2·m (new_zeros with two slice assignments: one new tensor,
  nothing kept, written here as a cat); its indexer picks entries for a mask only: its
  top-k indices carry no gradient, so autograd frees all it saved (run here under no_grad,
  its FLOPs counted).
- The MoE block: a router over sqrt(softplus(logits)) in the model's dtype (the top-k
  router's ranking or the hash router's table lookup: only the indices live on), the
  gathered scores renormalised (+ 1e-20) and scaled by routed_scaling_factor (a number);
  the experts (eager loop or grouped_mm, families/moe.py) with the clamped SwiGLU
  (gate.clamp(max=limit), up.clamp(-limit, limit)); the shared expert, DeepseekV4MLP with
  the same clamps."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

EPS = 1e-6  # rms_norm_eps and hc_eps (their defaults; neither changes a byte)


@dataclass(frozen=True)
class DeepseekV4:
    """DeepseekV4Config's sizes. Symbols: V vocab, E hidden, H heads, dh head_dim, rq
    q_lora_rank, Og o_groups, Ro o_lora_rank, Dg = H·dh / Og (a group's width), R the
    rotated width, Ns hc_mult, X experts, K per token, Fe moe_intermediate_size, Mc and Mh
    the CSA and HCA compress rates (their windows Wc = T // Mc, Wh = T // Mh), Ih and Id
    the indexer's heads and head width. kinds: each layer's attention, S (sliding), Q
    (compressed sparse) or H (heavily compressed). iters: hc_sinkhorn_iters. grouped: the
    grouped_mm experts."""

    V: int
    E: int
    H: int
    dh: int
    rq: int
    Og: int
    Ro: int
    R: int
    Ns: int
    X: int
    K: int
    Fe: int
    Mc: int
    Mh: int
    Ih: int
    Id: int
    kinds: str
    iters: int = 20
    tied: bool = False
    attention_dropout: float = 0.0
    grouped: bool = False

    def sizes(self) -> dict[str, int]:
        # (the windows, Wc = T // Mc and Wh = T // Mh, are symbols of their own: Builder)
        return {"V": self.V, "E": self.E, "H": self.H, "dh": self.dh, "rq": self.rq,
                "Og": self.Og, "Ro": self.Ro, "Dg": self.H * self.dh // self.Og,
                "R": self.R, "Ns": self.Ns, "X": self.X, "K": self.K, "Fe": self.Fe,
                "Mc": self.Mc, "Mh": self.Mh, "Ih": self.Ih, "Id": self.Id,
                "L": len(self.kinds)}


def forward(m: Builder, cfg: DeepseekV4) -> Tensor:
    """DeepseekV4ForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V, N = m["B"], m["T"], m["E"], m["V"], m["Ns"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        x = m.embedding("embed_tokens", ids, V, E)
        positions = tr.tensor((T,), I64, False)  # arange(T).unsqueeze(0)
        mask = causal_mask(m, x)  # create_sliding_window_causal_mask: every layer's
        # position_embeddings["main"] and ["compress"]: (1, T, R / 2) each, no grad
        with tr.no_grad(), m.module("rotary_emb"):
            tables = tuple(tr.tensor((Dim.const(1), T, m["R"].halved()), x.dtype, False)
                           for _ in range(4))
        h = ops.contiguous(ops.expand(ops.unsqueeze(x, 2), (B, T, N, E)))
        h = m.layers_by_kind("layers", cfg.kinds, lambda y, k: _layer(m, cfg, y, k, mask), h,
                             lambda k: (ids, positions, mask, *tables))
        h = _hyper_head(m, h)
        h = llama.rms_norm(m, "norm", h, fp32_weight=True)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: DeepseekV4, h: Tensor, kind: str, mask: Tensor) -> Tensor:
    """DeepseekV4DecoderLayer.forward: each sublayer between two hyper-connections."""
    post, comb, collapsed = _hyper_connection(m, cfg, "attn_hc", h)
    x = llama.rms_norm(m, "input_layernorm", collapsed, fp32_weight=True)
    with m.module("self_attn"):
        out = _attention(m, cfg, x, kind, mask)
    h = _mix(m, "attn_hc", post, comb, out, h)
    post, comb, collapsed = _hyper_connection(m, cfg, "ffn_hc", h)
    x = llama.rms_norm(m, "post_attention_layernorm", collapsed, fp32_weight=True)
    return _mix(m, "ffn_hc", post, comb, _moe_block(m, cfg, x), h)


def _mix(m: Builder, hc: str, post: Tensor, comb: Tensor, out: Tensor, streams: Tensor
         ) -> Tensor:
    """post.to(dtype).unsqueeze(-1) * out.unsqueeze(-2) + torch.matmul(comb.to(dtype)
    .transpose(-1, -2), hidden_states) (the decoder layer's, named here by its
    hyper-connection)."""
    dtype = streams.dtype
    with m.module(hc), m.module("mix"):
        spread = ops.mul(ops.unsqueeze(ops.to(post, dtype), -1), ops.unsqueeze(out, -2))
        mixed = ops.matmul(ops.transpose(ops.to(comb, dtype), -1, -2), streams)
        return ops.add(spread, mixed)


def _unweighted_norm(x: Tensor) -> Tensor:
    """DeepseekV4UnweightedRMSNorm.forward: x * torch.rsqrt(x.float().square().mean(-1,
    keepdim=True) + eps).to(x.dtype)."""
    r = ops.rsqrt(ops.add(ops.mean(ops.pow(ops.to(x, F32), 2.0)), EPS))
    return ops.mul(x, ops.to(r, x.dtype))


def _hyper_connection(m: Builder, cfg: DeepseekV4, name: str, h: Tensor
                      ) -> tuple[Tensor, Tensor, Tensor]:
    """DeepseekV4HyperConnection.forward (module docstring): (post, comb, collapsed)."""
    B, T, N, E = h.shape
    with m.module(name):
        width = (N + 2) * N
        fn = m.param("fn", width, N * E)
        base, scale = m.param("base", width), m.param("scale", Dim.const(3))
        flat = _unweighted_norm(ops.to(ops.view(h, (B, T, N * E)), F32))
        mixes = ops.linear(flat, ops.to(fn, F32))
        NN = N * N

        def weights(i: int, start: int, n: Dim) -> Tensor:
            # *_w * *_scale + *_b: a view of the projection, a 0-d view of scale, base's
            return ops.add(ops.mul(ops.narrow(mixes, -1, start, n), ops.select(scale, 0, i)),
                           ops.narrow(base, 0, start, n))

        pre = ops.add(ops.sigmoid(weights(0, 0, N)), EPS)
        post = ops.mul(ops.sigmoid(weights(1, N.value, N)), 2.0)
        comb = ops.view(weights(2, 2 * N.value, NN), (B, T, N, N))
        comb = ops.add(ops.softmax(comb), EPS)
        comb = ops.div(comb, ops.add(ops.sum_dim(comb, -2, keepdim=True), EPS))
        for _ in range(cfg.iters - 1):
            comb = ops.div(comb, ops.add(ops.sum_dim(comb, -1, keepdim=True), EPS))
            comb = ops.div(comb, ops.add(ops.sum_dim(comb, -2, keepdim=True), EPS))
        collapsed = ops.sum_dim(ops.mul(ops.unsqueeze(pre, -1), h), 2)
        return post, comb, ops.to(collapsed, h.dtype)


def _hyper_head(m: Builder, h: Tensor) -> Tensor:
    """DeepseekV4HyperHead.forward: flat = input_norm(x.flatten(2).float()); mixes =
    F.linear(flat, hc_fn.float()); pre = sigmoid(mixes * hc_scale.float() +
    hc_base.float()) + eps; (pre.unsqueeze(-1) * x).sum(dim=2).to(x.dtype)."""
    B, T, N, E = h.shape
    with m.module("hc_head"):
        fn = m.param("hc_fn", N, N * E)
        base, scale = m.param("hc_base", N), m.param("hc_scale", Dim.const(1))
        flat = _unweighted_norm(ops.to(ops.view(h, (B, T, N * E)), F32))
        mixes = ops.linear(flat, ops.to(fn, F32))
        pre = ops.sigmoid(ops.add(ops.mul(mixes, ops.to(scale, F32)), ops.to(base, F32)))
        pre = ops.add(pre, EPS)
        return ops.to(ops.sum_dim(ops.mul(ops.unsqueeze(pre, -1), h), 2), h.dtype)


def _rotary(m: Builder, x: Tensor, rows: Dim, batch: Dim | None = None) -> Tensor:
    """apply_rotary_pos_emb: cos and sin repeat_interleave(2)-ed and unsqueezed, new
    (batch or 1, 1, rows, R) tensors in the model's dtype (no grad); x's last R channels
    rotated in fp32 ((rope.float() * cos) + (rotate_half(rope).float() * sin), each mul
    keeping its table), cast back and concatenated after the rest. rotate_half: the odd and
    even channels stacked and flattened, a new tensor (written as a cat: neither keeps
    anything)."""
    R, one = m["R"], Dim.const(1)
    with m.trace.no_grad():
        cos, sin = (m.trace.tensor((batch or one, one, rows, R), m.run.dtype, False)
                    for _ in range(2))
    d = x.shape[-1]
    rest = d + R * -1
    rope = ops.narrow(x, -1, rest.value, R)
    half = R.halved()
    odd, even = ops.narrow(rope, -1, 0, half), ops.narrow(rope, -1, half.value, half)
    rotated_half = ops.cat([ops.neg(even), odd], -1)
    rotated = ops.add(ops.mul(ops.to(rope, F32), cos), ops.mul(ops.to(rotated_half, F32), sin))
    rotated = ops.to(rotated, x.dtype)
    if rest.value == 0:
        return ops.cat([rotated], -1)
    return ops.cat([ops.narrow(x, -1, 0, rest), rotated], -1)


def _attention(m: Builder, cfg: DeepseekV4, x: Tensor, kind: str, mask: Tensor) -> Tensor:
    """DeepseekV4Attention.forward with eager_attention_forward (module docstring)."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q_residual = llama.rms_norm(m, "q_a_norm", m.linear("q_a_proj", x, m["rq"], False),
                                fp32_weight=True)
    q = ops.view(m.linear("q_b_proj", q_residual, H * dh, False), (B, T, H, dh))
    q = _rotary(m, _unweighted_norm(ops.transpose(q, 1, 2)), T)
    kv = llama.rms_norm(m, "kv_norm", m.linear("kv_proj", x, dh, False), fp32_weight=True)
    kv = _rotary(m, ops.transpose(ops.view(kv, (B, T, Dim.const(1), dh)), 1, 2), T)
    if kind != "S":
        compressed = _compressor(m, x, q_residual, kind == "Q")
        kv = ops.cat([kv, compressed], 2)
        with m.trace.no_grad():  # torch.cat([attention_mask, block_bias.to(...)], dim=-1)
            mask = m.trace.tensor((B, Dim.const(1), T, kv.shape[2]), mask.dtype, False)
    keys = llama.repeat_kv(kv, H)
    values = llama.repeat_kv(kv, H)
    w = ops.mul(ops.matmul(q, ops.transpose(keys, 2, 3)), float(dh.value) ** -0.5)
    w = ops.add(w, mask)
    one = Dim.const(1)  # sinks.reshape(1, -1, 1, 1).expand(B, -1, T, -1), one more column
    sinks = ops.expand(ops.view(m.param("sinks", H), (one, H, one, one)), (B, H, T, one))
    w = ops.cat([w, sinks], -1)
    w = ops.softmax(ops.sub(w, ops.max_dim(w)))  # dtype=combined_logits.dtype
    w = m.dropout(ops.narrow(w, -1, 0, keys.shape[2]), cfg.attention_dropout)
    out = ops.contiguous(ops.transpose(ops.matmul(w, values), 1, 2))
    # apply_rotary_pos_emb(attn_output.transpose(1, 2), cos, -sin).transpose(1, 2)
    out = ops.transpose(_rotary(m, ops.transpose(out, 1, 2), T), 1, 2)
    grouped = _grouped_linear(m, ops.reshape(out, (B, T, m["Og"], m["Dg"])))
    return m.linear("o_b_proj", grouped, m["E"], False)


def _grouped_linear(m: Builder, x: Tensor) -> Tensor:
    """DeepseekV4GroupedLinear.forward (o_a_proj) then .flatten(2): w = weight.view(Og, -1,
    Dg).transpose(1, 2); x.reshape(-1, Og, Dg).transpose(0, 1); torch.bmm(x, w)
    .transpose(0, 1).reshape(B, T, Og, -1)."""
    B, T, Og, Dg = x.shape
    Ro = m["Ro"]
    with m.module("o_a_proj"):
        w = ops.transpose(ops.view(m.param("weight", Og * Ro, Dg), (Og, Ro, Dg)), 1, 2)
        y = ops.bmm(ops.transpose(ops.reshape(x, (B * T, Og, Dg)), 0, 1), w)
    y = ops.reshape(ops.transpose(y, 0, 1), (B, T, Og, Ro))
    return ops.reshape(y, (B, T, Og * Ro))


def _windows(m: Builder, x: Tensor, width: Dim, rate: Dim, W: Dim, csa: bool
             ) -> tuple[Tensor, Tensor]:
    """A compressor's kv and gate over the first W · rate tokens in windows, the gate plus
    position_bias; CSA's (and its indexer's) two series laid out in windows of 2 · rate
    (new_kv, new_gate: one new tensor each)."""
    B = x.shape[0]
    kv, gate = (m.linear(name, x, width, False) for name in ("kv_proj", "gate_proj"))
    bias = m.param("position_bias", rate, width)
    kv, gate = (ops.view(ops.narrow(t, 1, 0, W * rate), (B, W, rate, width))
                for t in (kv, gate))
    gate = ops.add(gate, bias)
    if csa:
        half = width.halved()
        kv, gate = (ops.cat([ops.narrow(t, -1, 0, half), ops.narrow(t, -1, half.value, half)],
                            2) for t in (kv, gate))
    return kv, gate


def _pool(m: Builder, kv: Tensor, gate: Tensor, W: Dim) -> Tensor:
    """kv_norm((new_kv * new_gate.softmax(dim=2, dtype=torch.float32).to(new_kv.dtype))
    .sum(dim=2)), RoPE at the windows' positions: (B, 1, W, width)."""
    pooled = ops.sum_dim(ops.mul(kv, ops.to(ops.softmax(gate, F32), kv.dtype)), 2)
    pooled = llama.rms_norm(m, "kv_norm", pooled, fp32_weight=True)
    return _rotary(m, ops.unsqueeze(pooled, 1), W, kv.shape[0])


def _compressor(m: Builder, x: Tensor, q_residual: Tensor, csa: bool) -> Tensor:
    """DeepseekV4CSACompressor / DeepseekV4HCACompressor.forward without a cache (module
    docstring): the compressed entries, (B, 1, W, dh)."""
    dh = m["dh"]
    rate, W = (m["Mc"], m["Wc"]) if csa else (m["Mh"], m["Wh"])
    if not m["T"].value >= rate.value:  # (a guard: T >= rate, recorded where symbolic)
        raise ValueError("fewer tokens than a compress rate: no compressed entry, which "
                         "the graph does not express")
    with m.module("compressor"):
        kv, gate = _windows(m, x, 2 * dh if csa else dh, rate, W, csa)
        compressed = _pool(m, kv, gate, W)
        if csa:
            with m.module("indexer"), m.trace.no_grad():
                _indexer(m, x, q_residual, W)
    return compressed


def _indexer(m: Builder, x: Tensor, q_residual: Tensor, W: Dim) -> None:
    """DeepseekV4Indexer.forward, whose top-k indices only mask (run under no_grad: what it
    would save is freed with its nodes): its compressor at index_head_dim, the queries
    q_b_proj(q_residual) rotated, DeepseekV4IndexerScorer's q.float() @ entriesᵀ.float()
    and weights_proj."""
    B, T, Ih, Id = m["B"], m["T"], m["Ih"], m["Id"]
    kv, gate = _windows(m, x, 2 * Id, m["Mc"], W, True)
    entries = _pool(m, kv, gate, W)  # (B, 1, W, Id)
    q = ops.view(m.linear("q_b_proj", q_residual, Ih * Id, False), (B, T, Ih, Id))
    q = ops.transpose(_rotary(m, ops.transpose(q, 1, 2), T), 1, 2)
    keys = ops.expand(ops.transpose(ops.to(entries, F32), -1, -2), (B, T, Id, W))
    ops.matmul(ops.to(q, F32), keys)  # scores [B, S, H, T]
    with m.module("scorer"):
        m.linear("weights_proj", x, Ih, False)


def _moe_block(m: Builder, cfg: DeepseekV4, x: Tensor) -> Tensor:
    """DeepseekV4SparseMoeBlock.forward: the routed experts plus the shared expert."""
    B, T, E = x.shape
    with m.module("mlp"):
        flat = ops.view(x, (B * T, E))
        weights, chosen = _router(m, flat)
        with m.module("experts"):
            run = moe.grouped_experts if cfg.grouped else moe.eager_experts
            routed = run(m, flat, chosen, weights, apply_gate=_clamped_gate)
        routed = ops.view(routed, (B, T, E))
        with m.module("shared_experts"):
            Fe = m["Fe"]
            gate = m.linear("gate_proj", x, Fe, False)
            up = m.linear("up_proj", x, Fe, False)
            shared = m.linear("down_proj", _clamped_gate(gate, up), E, False)
        return ops.add(routed, shared)


def _clamped_gate(gate: Tensor, up: Tensor) -> Tensor:
    """DeepseekV4Experts._apply_gate and DeepseekV4MLP.forward: act_fn(gate.clamp(max=
    limit)) * up.clamp(min=-limit, max=limit) (each clamp keeps its input)."""
    return ops.mul(ops.silu(ops.clamp(gate)), ops.clamp(up))


def _router(m: Builder, flat: Tensor) -> tuple[Tensor, Tensor]:
    """DeepseekV4TopKRouter / DeepseekV4HashRouter.forward: logits = F.linear(flat,
    weight); scores = sqrt(softplus(logits)) (scoring_func sqrtsoftplus); the indices
    (topk of scores + e_score_correction_bias with autograd on, its values dropped, or
    tid2eid[input_ids]: only the indices live on); weights = scores.gather(1, indices),
    divided by their sum + 1e-20, times routed_scaling_factor (a number). Returns
    (weights, indices), (B·T, K) each."""
    N, X, K = flat.shape[0], m["X"], m["K"]
    with m.module("gate"):
        logits = ops.linear(flat, m.param("weight", X, flat.shape[-1]))
        scores = ops.sqrt(ops.softplus(logits))
        with m.trace.no_grad():
            chosen = m.trace.tensor((N, K), I64, False)
        weights = ops.gather(scores, 1, chosen)
        weights = ops.div(weights, ops.add(ops.sum_dim(weights, -1, keepdim=True), 1e-20))
        return ops.mul(weights, 1.5), chosen
