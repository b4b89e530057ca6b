"""LFM2 as transformers 5.23 runs it on the CPU: models/lfm2/modeling_lfm2.py
(Lfm2ForCausalLM, Lfm2Model, Lfm2DecoderLayer, Lfm2RMSNorm, Lfm2RotaryEmbedding,
Lfm2Attention with q_layernorm and k_layernorm over each head, Lfm2MLP's w1, w3, w2, and
Lfm2ShortConv.forward with causal_conv1d_fn's torch fallback, the kernels hub's
causal-conv1d not installed). Each layer is a gated short convolution or attention
(layer_types), then the SwiGLU MLP; the model's last norm is embedding_norm.
LFM2-MoE (models/lfm2_moe/modeling_lfm2_moe.py): the same layers, the sparse ones' FFN
Mixtral's experts behind a sigmoid router. LFM3 (models/lfm3/modeling_lfm3.py,
Lfm3ForCausalLM): the same layers with sandwich norms (post_operator_norm, post_ffn_norm),
full or sliding attention, each kind its own fp32 RoPE table (Lfm3RotaryEmbedding: the
rotation in fp32, cast back), q_norm and k_norm, and a sigmoid gate per head (g_proj)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

# a layer's kind as one letter (Builder.layers_by_kind): its operator (F attention, M the
# short convolution) and its FFN (D the MLP, E the experts: families/lfm2_moe.py)
KINDS = {("F", "D"): "a", ("F", "E"): "b", ("M", "D"): "c", ("M", "E"): "d", ("S", "D"): "s"}
OPERATOR = {v: k[0] for k, v in KINDS.items()}  # a kind's letter -> F, S or M


# the experts' block (families/lfm2_moe.py): (builder, config, ffn_norm's output) -> output
Ffn = Callable[[Builder, "Lfm2", Tensor], Tensor]


@dataclass(frozen=True)
class Lfm2:
    """Lfm2Config's sizes. Symbols: V, E, H, Hkv, dh, F, L, G = H / Hkv as Llama's (F the
    MLP's width after Lfm2MLP's block_auto_adjust_ff_dim); Kc conv_L_cache, the
    convolution's kernel. kinds: each layer's letter of KINDS. conv_bias: the convolution's,
    in_proj's and out_proj's biases."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    L: int
    Kc: int
    kinds: str
    tied: bool = True
    conv_bias: bool = False
    lfm3: bool = False  # Lfm3ForCausalLM's layers (module docstring)
    window: int = 0  # LFM3's sliding_window (the layers whose kind is s)

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv, "Kc": self.Kc}

    @property
    def mixers(self) -> str:
        """Each layer's operator, F, S or M (names.py's first norms)."""
        return "".join(OPERATOR[k] for k in self.kinds)


def forward(m: Builder, cfg: Lfm2, ffn: Ffn | None = None) -> Tensor:
    """Lfm2ForCausalLM.forward(input_ids=ids, labels=ids, use_cache=False): the loss.
    ffn: the experts' block (families/lfm2_moe.py) for the layers whose kind has them."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        # position_ids = arange(T).unsqueeze(0); causal_mask_mapping: create_causal_mask for
        # the attention layers, create_recurrent_attention_mask (None without padding) for
        # the convolutions; cos and sin once, whatever the layers
        positions = tr.tensor((T,), I64, False)
        masks, tables = _masks_and_tables(m, cfg, h)

        def extras(kind: str) -> tuple[Tensor, ...]:
            op = OPERATOR[kind]
            mask = masks.get(op)
            return (positions, *tables.get(op, ())) + (() if mask is None else (mask,))

        def layer(x: Tensor, kind: str) -> Tensor:
            op = OPERATOR[kind]
            return _layer(m, cfg, x, kind, tables.get(op), masks.get(op), ffn)

        h = m.layers_by_kind("layers", cfg.kinds, layer, h, extras)
        h = llama.rms_norm(m, "embedding_norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _masks_and_tables(m: Builder, cfg: Lfm2, h: Tensor
                      ) -> tuple[dict[str, Tensor | None], dict[str, tuple[Tensor, Tensor]]]:
    """causal_mask_mapping by operator (create_causal_mask for attention; LFM3's sliding
    layers create_sliding_window_causal_mask; the convolutions
    create_recurrent_attention_mask, None without padding), then the rotary tables: LFM2's
    one pair in the activations' dtype, passed to every layer ("M": the convolutions'
    too); LFM3's fp32 pair per attention kind in use (_rope_type_labels: full, then
    sliding; the convolutions get None)."""
    ops_in_use = set(cfg.mixers)
    if not cfg.lfm3:
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        pair = llama.rotary_tables(m, h)
        return {"F": mask}, {"F": pair, "M": pair}
    masks: dict[str, Tensor | None] = {op: llama.attention_mask(m, h, op, cfg.window)
                                       for op in sorted(ops_in_use - {"M"})}
    tables: dict[str, tuple[Tensor, Tensor]] = {
        op: llama.rotary_tables(m, h, fp32=True) for op in ("F", "S") if op in ops_in_use}
    return masks, tables


def _layer(m: Builder, cfg: Lfm2, h: Tensor, kind: str, rope: tuple[Tensor, Tensor] | None,
           mask: Tensor | None, ffn: Ffn | None) -> Tensor:
    """Lfm2DecoderLayer.forward: operator_norm, attention or the convolution, the
    residual (output + residual); ffn_norm, the MLP (or the experts), the residual.
    Lfm3DecoderLayer.forward: each sublayer's output normalised (post_operator_norm,
    post_ffn_norm) before its residual add."""
    x = llama.rms_norm(m, "operator_norm", h)
    if rope is not None and OPERATOR[kind] != "M":
        with m.module("self_attn"):
            y = _attention(m, cfg, x, *rope, mask)
    else:
        with m.module("conv"):
            y = short_conv(m, x, cfg.conv_bias, kernel=not cfg.lfm3)
    if cfg.lfm3:
        y = llama.rms_norm(m, "post_operator_norm", y)
    h = ops.add(y, h)
    x = llama.rms_norm(m, "ffn_norm", h)
    f = ffn(m, cfg, x) if kind in "bd" and ffn is not None else mlp(m, x, "F")
    if cfg.lfm3:
        f = llama.rms_norm(m, "post_ffn_norm", f)
    return ops.add(h, f)


def mlp(m: Builder, x: Tensor, width: str) -> Tensor:
    """Lfm2MLP.forward: w2(silu(w1(x)) * w3(x)), no biases, in the module feed_forward."""
    with m.module("feed_forward"):
        F, E = m[width], m["E"]
        gate = ops.silu(m.linear("w1", x, F, False))
        return m.linear("w2", ops.mul(gate, m.linear("w3", x, F, False)), E, False)


def short_conv(m: Builder, x: Tensor, bias: bool, kernel: bool = True) -> Tensor:
    """Lfm2ShortConv.forward without a cache: BCx = in_proj(x).transpose(-1, -2), chunked in
    three along the channels (views: B, C, x); B * x; causal_conv1d_fn's fallback:
    F.conv1d(Bx.to(weight's dtype), weight (squeezed and unsqueezed: views), bias,
    padding=K − 1, groups=E)[:, :, :T], no activation, .to(Bx's dtype); C times it;
    transposed, made contiguous, out_proj. On CUDA (kernel: LFM2's and LFM2-MoE's
    causal_conv1d_fn, which use_kernel_func_from_hub_with_fallback resolves to the installed
    causal-conv1d package; LFM3's is not wrapped), causal-conv1d's kernel:
    ops.causal_conv1d_fn, which keeps Bx and returns (B, E, T) in Bx's channel-last strides,
    so the transposed product is contiguous already."""
    cuda = kernel and m.run.device == "cuda"
    E, Kc, T = m["E"], m["Kc"], m["T"]
    bcx = ops.transpose(m.linear("in_proj", x, 3 * E, bias), -1, -2)
    b, c, xs = ops.split(bcx, E, -2)
    bx = ops.mul(b, xs)
    with m.module("conv"):
        w = m.param("weight", E, Dim.const(1), Kc)
        conv_b = m.param("bias", E) if bias else None
        if cuda:
            out = ops.causal_conv1d_fn(bx, w, conv_b)
        else:
            out = ops.conv1d_depthwise(ops.to(bx, w.dtype), w, conv_b, Kc.value - 1)
    if not cuda:
        out = ops.to(ops.narrow(out, 2, 0, T), bx.dtype)
    y = ops.contiguous(ops.transpose(ops.mul(c, out), -1, -2))
    return m.linear("out_proj", y, E, bias)


def _attention(m: Builder, cfg: Lfm2, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """Lfm2Attention.forward: q_layernorm(q_proj(x).view(heads)).transpose(1, 2), K alike,
    V viewed; RoPE; eager or SDPA attention (dropout 0); reshape, contiguous, out_proj.
    Lfm3Attention.forward: q_norm and k_norm; RoPE against fp32 tables, each product cast
    back (.to(q's dtype)); the (B, T, H, dh) output times sigmoid(g_proj(x)).unsqueeze(-1);
    o_proj. SDPA with a sliding mask repeats K and V (no GQA with a mask)."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    q_norm, k_norm, o_proj = ("q_norm", "k_norm", "o_proj") if cfg.lfm3 else (
        "q_layernorm", "k_layernorm", "out_proj")

    def heads(name: str, n: Dim, norm: str = "") -> Tensor:
        y = ops.view(m.linear(name, x, n * dh, False), (B, T, n, dh))
        if norm:
            y = llama.rms_norm(m, norm, y)
        return ops.transpose(y, 1, 2)

    q = heads("q_proj", H, q_norm)
    k = heads("k_proj", Hkv, k_norm)
    v = heads("v_proj", Hkv)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = (ops.to(llama.apply_rotary(t, cos, sin), t.dtype) for t in (q, k))
    G, scaling = m["G"], float(dh.value) ** -0.5
    if m.run.attention == "eager":
        assert mask is not None
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=0.0, scaling=scaling)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=0.0, scaling=scaling, mask=mask)
    if cfg.lfm3:  # attn_output * torch.sigmoid(self.g_proj(hidden_states)).unsqueeze(-1)
        out = ops.mul(out, ops.unsqueeze(ops.sigmoid(m.linear("g_proj", x, H, False)), -1))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear(o_proj, out, m["E"], False)


@dataclass(frozen=True)
class Lfm2Moe(Lfm2):
    """Lfm2MoeConfig's sizes (models/lfm2_moe/modeling_lfm2_moe.py: Lfm2MoeForCausalLM, the
    layers LFM2's, the first num_dense_layers with Lfm2MoeMLP of F, the rest with
    Lfm2MoeSparseMoeBlock). Symbols beside LFM2's: X experts, K per token, Fe
    moe_intermediate_size. kinds: each layer's letter of KINDS. grouped: the grouped_mm
    experts (families/moe.py, the same integration as Mixtral's)."""

    X: int = 1
    K: int = 1
    Fe: int = 1
    grouped: bool = False

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "X": self.X, "K": self.K, "Fe": self.Fe}


def moe_forward(m: Builder, cfg: Lfm2Moe) -> Tensor:
    """Lfm2MoeForCausalLM.forward(input_ids=ids, labels=ids, use_cache=False): LFM2's, the
    sparse layers' FFN the experts."""
    return forward(m, cfg, _sparse_moe_block)  # type: ignore[arg-type]


def _sparse_moe_block(m: Builder, cfg: Lfm2Moe, x: Tensor) -> Tensor:
    """Lfm2MoeSparseMoeBlock.forward (use_expert_bias, norm_topk_prob, the config's
    defaults): Lfm2MoeTopKRouter.forward: logits = F.linear(x, weight), sigmoid; the
    expert_bias buffer (fp32, zeros) added to choose the top k (the sum fp32: a new
    tensor), the chosen sigmoids gathered (type_as the logits: the same dtype), divided by
    their sum + 1e-6, times routed_scaling_factor (a Python number); then Lfm2MoeExperts
    (Mixtral's: families/moe.py)."""
    from transformer_calc.graph.families import moe

    B, T, E = x.shape
    X, K = m["X"], m["K"]
    with m.module("feed_forward"):
        flat = ops.view(x, (B * T, E))
        bias = m.trace.tensor((X,), F32, False, "buffer", f"{m.trace.scope}.expert_bias")
        with m.module("gate"):
            probs = ops.sigmoid(ops.linear(flat, m.param("weight", X, E)))
            _, chosen = ops.topk(ops.add(probs, bias), K)
            weights = ops.gather(probs, 1, chosen)
            weights = ops.div(weights, ops.add(ops.sum_dim(weights, -1, keepdim=True), 1e-6))
            weights = ops.mul(weights, 1.0)  # * routed_scaling_factor
        with m.module("experts"):
            run = moe.grouped_experts if cfg.grouped else moe.eager_experts
            out = run(m, flat, chosen, weights)
        return ops.reshape(out, (B, T, E))
