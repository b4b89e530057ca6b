"""Llama, Qwen2, Qwen3, OLMo2 and Phi-3 as transformers 5.23 runs them:
models/llama/modeling_llama.py
(LlamaForCausalLM, LlamaModel, LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding,
apply_rotary_pos_emb, repeat_kv, eager_attention_forward, LlamaMLP) with
integrations/sdpa_attention.py (use_gqa_in_sdpa); models/qwen2/modeling_qwen2.py, the
same graph with biases on q, k and v only; models/qwen3/modeling_qwen3.py, with an RMSNorm
over each head of Q and of K (q_norm, k_norm) before the rotation;
models/olmo2/modeling_olmo2.py, with q_norm and k_norm over the whole projection, each
sublayer's output normalised before the residual add, and RMSNorm's weight applied in fp32;
models/phi3/modeling_phi3.py, with Q, K and V as slices of one qkv_proj, gate and up as the
chunks of one gate_up_proj, and a rotary embedding that concatenates the rotated part with
the rest (a copy even when the rest is empty)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class Llama:
    """The config keys that shape the graph. Symbols: V vocab, E hidden, H heads, Hkv K/V
    heads, dh head_dim, F intermediate, L layers, G = H / Hkv query heads per K/V head."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    L: int
    tied: bool = False
    bias_q: bool = False
    bias_k: bool = False
    bias_v: bool = False
    bias_o: bool = False
    bias_mlp_in: bool = False
    bias_mlp_out: bool = False
    attention_dropout: float = 0.0
    fused_qkv: bool = False  # Phi-3's qkv_proj
    fused_gate_up: bool = False  # Phi-3's gate_up_proj
    rope_concat: bool = False  # Phi-3's apply_rotary_pos_emb: cat([rotated, pass])
    # q_norm, k_norm: over each head (Qwen3) or the width (OLMo2); "rotated": HunYuan's
    # query_layernorm, key_layernorm over each head after RoPE
    qk_norm: str = "none"
    post_norm: bool = False  # OLMo2: each sublayer's output normalised, then added
    norm_fp32: bool = False  # OLMo2's RMSNorm: (weight * x) in fp32, then cast
    rope_fp32: bool = False  # OLMo2: cos and sin stay fp32, RoPE in fp32 cast back
    layer_norm: bool = False  # PhiMoE: nn.LayerNorm (with a bias) where Llama has RMSNorm

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv}


# an MLP: (builder, config, the post-attention norm's output) -> its output
Mlp = Callable[[Builder, "Llama", Tensor], Tensor]
# the decoder layers: (builder, the layer as a function of its input and MLP, hidden states,
# what a checkpoint keeps) -> the last layer's output
Stack = Callable[[Builder, Callable[[Tensor, Mlp], Tensor], Tensor, tuple[Tensor, ...]], Tensor]


def forward(m: Builder, cfg: Llama, stack: Stack | None = None) -> Tensor:
    """LlamaForCausalLM.forward(input_ids=ids, labels=ids): the loss. stack: how the layers
    are laid out (the MoE families: which layers carry experts); default: L layers of
    LlamaMLP."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        # cache_position = arange(T); position_ids its unsqueezed view (one storage),
        # passed to the layers with cos, sin and, eager, the causal mask
        positions = tr.tensor((m["T"],), I64, False)
        cos, sin = rotary_tables(m, h, cfg.rope_fp32)
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        extras = (positions, cos, sin) + (() if mask is None else (mask,))

        def layer(x: Tensor, mlp: Mlp) -> Tensor:
            return _layer(m, cfg, x, cos, sin, mask, mlp)

        h = (stack or _uniform)(m, layer, h, extras)
        h = _norm(m, cfg, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _uniform(m: Builder, layer: Callable[[Tensor, Mlp], Tensor], h: Tensor,
             extras: tuple[Tensor, ...]) -> Tensor:
    """L layers of LlamaMLP, traced until one repeats."""
    return m.layers("layers", lambda x: layer(x, _mlp), h, extras)


def rotary_tables(m: Builder, like: Tensor, fp32: bool = False) -> tuple[Tensor, Tensor]:
    """LlamaRotaryEmbedding.forward, under no_grad, once for the model: cos and sin of
    (1, T, dh), cast to the activation dtype (a view of the fp32 product when that is
    fp32); Olmo2RotaryEmbedding leaves them fp32."""
    one, T, dh = Dim.const(1), m["T"], m["dh"]
    with m.trace.no_grad(), m.module("rotary_emb"):
        pair = []
        for _ in ("cos", "sin"):
            emb = m.trace.tensor((one, T, dh), F32, False)
            scaled = ops.mul(emb, 1.0)  # · attention_scaling
            pair.append(scaled if fp32 else ops.to(scaled, like.dtype))
        return pair[0], pair[1]


def rms_norm(m: Builder, name: str, h: Tensor, fp32_weight: bool = False) -> Tensor:
    """LlamaRMSNorm.forward: hidden_states.to(float32); variance = pow(2).mean(-1,
    keepdim=True); hidden_states * rsqrt(variance + eps); weight * hidden.to(input_dtype).
    fp32_weight (Olmo2RMSNorm): (weight * hidden_states).to(input_dtype), the product in
    fp32."""
    with m.module(name):
        w = m.param("weight", h.shape[-1])
        x = ops.to(h, F32)
        variance = ops.mean(ops.pow(x, 2.0))
        x = ops.mul(x, ops.rsqrt(ops.add(variance, 1e-6)))
        if fp32_weight:
            return ops.to(ops.mul(w, x), h.dtype)
        return ops.mul(w, ops.to(x, h.dtype))


def _layer(m: Builder, cfg: Llama, h: Tensor, cos: Tensor, sin: Tensor,
           mask: Tensor | None, mlp: Mlp) -> Tensor:
    """LlamaDecoderLayer.forward: pre-norm attention and MLP around the residual;
    Olmo2DecoderLayer.forward: each sublayer's output normalised, then added."""
    if cfg.post_norm:
        with m.module("self_attn"):
            a = _attention(m, cfg, h, cos, sin, mask)
        h = ops.add(h, rms_norm(m, "post_attention_layernorm", a, cfg.norm_fp32))
        return ops.add(h, rms_norm(m, "post_feedforward_layernorm", mlp(m, cfg, h),
                                   cfg.norm_fp32))
    with m.module("self_attn"):
        a = _attention(m, cfg, _norm(m, cfg, "input_layernorm", h), cos, sin, mask)
    h = ops.add(h, a)
    return ops.add(h, mlp(m, cfg, _norm(m, cfg, "post_attention_layernorm", h)))


def _norm(m: Builder, cfg: Llama, name: str, h: Tensor) -> Tensor:
    """The pre-norm: LlamaRMSNorm, or PhiMoE's nn.LayerNorm."""
    return m.layer_norm(name, h) if cfg.layer_norm else rms_norm(m, name, h, cfg.norm_fp32)


def _mlp(m: Builder, cfg: Llama, x: Tensor, name: str = "mlp", width: str = "F") -> Tensor:
    """LlamaMLP (Phi3MLP with the fused gate_up_proj): down(silu(gate(x)) * up(x)); name
    and width: the module and its inner size's symbol (an MoE's shared expert)."""
    with m.module(name):
        F, E = m[width], m["E"]
        if cfg.fused_gate_up:
            # Phi3MLP: gate, up_states = gate_up_proj(x).chunk(2, dim=-1);
            # up_states * act(gate): the chunks are views of one output
            gate, up = ops.split(m.linear("gate_up_proj", x, 2 * F, False), F, -1)
            x = m.linear("down_proj", ops.mul(up, ops.silu(gate)), E, cfg.bias_mlp_out)
        else:
            gate = ops.silu(m.linear("gate_proj", x, F, cfg.bias_mlp_in))
            x = m.linear("down_proj",
                         ops.mul(gate, m.linear("up_proj", x, F, cfg.bias_mlp_in)), E,
                         cfg.bias_mlp_out)
    return x


def _attention(m: Builder, cfg: Llama, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """LlamaAttention.forward: projections viewed as heads, RoPE, (cache), attention, o."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(y: Tensor, n: Dim, norm: str = "") -> Tensor:
        if norm and cfg.qk_norm == "width":  # Olmo2Attention: q_norm(q_proj(x)), then view
            y = rms_norm(m, norm, y, cfg.norm_fp32)
        y = ops.view(y, (B, T, n, dh))
        if norm and cfg.qk_norm == "head":  # Qwen3Attention: q_norm(q_proj(x).view(...))
            y = rms_norm(m, norm, y, cfg.norm_fp32)
        return ops.transpose(y, 1, 2)

    if cfg.fused_qkv:
        # Phi3Attention: qkv[..., :query_pos], the K and V slices after it: views
        qkv = m.linear("qkv_proj", x, (H + 2 * Hkv) * dh, False)
        q, k, v = (heads(ops.narrow(qkv, -1, start, n * dh), n) for start, n in (
            (0, H), (H.value * dh.value, Hkv), ((H.value + Hkv.value) * dh.value, Hkv)))
    else:
        q, k, v = heads(m.linear("q_proj", x, H * dh, cfg.bias_q), H, "q_norm"), \
            heads(m.linear("k_proj", x, Hkv * dh, cfg.bias_k), Hkv, "k_norm"), \
            heads(m.linear("v_proj", x, Hkv * dh, cfg.bias_v), Hkv)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    if cfg.qk_norm == "rotated":  # HunYuanMoEV1Attention: the norms after RoPE
        q = rms_norm(m, "query_layernorm", q, cfg.norm_fp32)
        k = rms_norm(m, "key_layernorm", k, cfg.norm_fp32)
    if cfg.rope_fp32:  # olmo2's apply_rotary_pos_emb: q_embed.to(q_type)
        q, k = ops.to(q, v.dtype), ops.to(k, v.dtype)
    if cfg.rope_concat:  # torch.cat([rotated, x[..., rotary_dim:]]): the pass part empty
        q, k = ops.cat([q], -1), ops.cat([k], -1)
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    G = m["G"]  # query heads per K/V head, H / Hkv
    scaling = float(dh.value) ** -0.5
    if mask is not None:
        out = eager_attention(m, q, repeat_kv(k, G), repeat_kv(v, G), mask,
                              dropout=cfg.attention_dropout, scaling=scaling)
    else:
        out = sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout, scaling=scaling)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], cfg.bias_o)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """apply_rotary_pos_emb: (x * cos) + (rotate_half(x) * sin); rotate_half:
    cat((-x2, x1), dim=-1) of the two halves (views)."""
    half = x.shape[-1].halved()
    x1, x2 = ops.narrow(x, -1, 0, half), ops.narrow(x, -1, half.value, half)
    rotated = ops.cat([ops.neg(x2), x1], -1)
    return ops.add(ops.mul(x, cos), ops.mul(rotated, sin))


def repeat_kv(x: Tensor, groups: Dim) -> Tensor:
    """repeat_kv: x[:, :, None].expand(B, Hkv, groups, T, dh).reshape(B, H, T, dh), a view
    where computeStride finds one (one K/V head and B = 1), else a copy."""
    if groups.value == 1:
        return x
    B, Hkv, T, dh = x.shape
    x = ops.expand(ops.unsqueeze(x, 2), (B, Hkv, groups, T, dh))
    return ops.reshape(x, (B, Hkv * groups, T, dh))


def eager_attention(m: Builder, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, *,
                    dropout: float, scaling: float, softcap: float = 0.0) -> Tensor:
    """eager_attention_forward (modeling_llama.py): scores · scaling plus the mask,
    softmax in fp32 cast back to the query's dtype, dropout, the product with V,
    transposed and made contiguous. softcap (modeling_gemma2.py's version): the scaled
    scores divided by the cap, tanh, times the cap, before the mask."""
    w = ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), scaling)
    if softcap:
        w = ops.mul(ops.tanh(ops.div(w, softcap)), softcap)
    w = ops.add(w, mask)
    w = ops.to(ops.softmax(w, F32), q.dtype)
    w = m.dropout(w, dropout)
    return ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, groups: Dim, *, dropout: float,
                   scaling: float, mask: Tensor | None = None) -> Tensor:
    """sdpa_attention_forward (integrations/sdpa_attention.py): SDPA's own GQA where
    use_gqa_in_sdpa allows it (no mask, head dims <= 256), else repeat_kv; is_causal
    without a mask; the (B, H, T, d) output transposed back and made contiguous."""
    B, H, T, dh = q.shape
    gqa = groups.value > 1 and mask is None and k.shape[-1].value <= 256
    if groups.value > 1 and not gqa:
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    out = scaled_dot_product_attention(q, k, v, is_causal=mask is None, enable_gqa=gqa,
                                       dropout_p=dropout, scale=scaling, mask=mask)
    return ops.contiguous(ops.transpose(ops.reshape(out, (B, H, T, dh)), 1, 2))
