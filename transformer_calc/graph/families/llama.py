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
the rest (a copy even when the rest is empty). Its flags transcribe the variants
graph/variants.py maps, among them models/starcoder2, seed_oss, arcee, jais2, glm, glm4,
hyperclovax and eurobert (modeling_<type>.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformer_calc.graph import autocast, ops
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor


@dataclass(frozen=True)
class Llama:
    """The config keys that shape the graph. Symbols: V vocab, E hidden, H heads, Hkv K/V
    heads, dh head_dim, F intermediate, L layers, G = H / Hkv query heads per K/V head,
    dr the rotated part of a head (partial_rotary; else dr = dh, unused)."""

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
    # q_norm, k_norm: over each head (Qwen3: "head"; Apertus, after the transpose:
    # "head_t"; NanoChat, after RoPE: "after_rope") or the width (OLMo2); "rotated":
    # HunYuan's query_layernorm, key_layernorm over each head after RoPE
    qk_norm: str = "none"
    post_norm: bool = False  # OLMo2: each sublayer's output normalised, then added
    norm_fp32: bool = False  # OLMo2's RMSNorm: (weight * x) in fp32, then cast
    rope_fp32: bool = False  # OLMo2: cos and sin stay fp32, RoPE in fp32 cast back
    layer_norm: bool = False  # PhiMoE: nn.LayerNorm (with a bias) where Llama has RMSNorm
    norm: str = "rms"  # the layers' and the final norm: "rms" (LlamaRMSNorm), "olmo"
    # (OlmoLayerNorm: F.layer_norm without weight or bias over an fp32 copy, cast back),
    # "layer1p" (NemotronLayerNorm1P: nn.LayerNorm's forward with weight + 1), "rms_plain"
    # (NanoChatRMSNorm: no weight, q_norm and k_norm too)
    gated: bool = True  # gate_proj beside up_proj (False: NemotronMLP, down(act(up(x))))
    partial_rotary: bool = False  # Nemotron: RoPE on the first dr of each head, the rest
    # concatenated after it (rope_concat)
    dr: int = 0  # the rotated width (partial_rotary)
    mlp_names: tuple[str, str] = ("up_proj", "down_proj")  # NanoChatMLP: fc1, fc2
    embed_norm: bool = False  # NanoChat: model.norm over the embeddings too
    final_softcap: float = 0.0  # NanoChat: final_logit_softcapping
    rotate_flipped: bool = False  # NanoChat's rotate_half: cat((x2, -x1))
    differential: bool = False  # DiffLlama: two attention calls over V's halves, λ, groupnorm
    activation: str = "silu"  # the MLP's: silu, relu2 (ReLUSquaredActivation: relu, square),
    # xielu (XIELUActivation's Python path)
    norm_names: tuple[str, str] = ("input_layernorm", "post_attention_layernorm")  # Apertus:
    # attention_layernorm, feedforward_layernorm
    sub_norms: bool = False  # BitNet: attn_sub_norm before o_proj, ffn_sub_norm before down
    window: int = 0  # sliding_window (Qwen3, Ministral: the layers whose kind is S)
    kinds: str = "F"  # each layer's attention, F full or S sliding (one letter: all)
    extra_rows: int = 0  # token-table rows beyond V, which the head does not predict (Mllama)
    residual_dropout: float = 0.0  # Starcoder2, Seed-OSS: dropout over o_proj's and the MLP's
    # output before each residual add
    embed_dropout: float = 0.0  # Starcoder2: dropout over the embeddings
    # GLM-4, HyperCLOVA X: an RMSNorm over each sublayer's output before the residual add,
    # beside the pre-norms (their names: the attention's, the MLP's; "": none)
    post_norms: tuple[str, str] = ("", "")
    rope_interleaved: bool = False  # GLM: RoPE on the first dr of each head in interleaved
    # pairs, cos and sin repeat_interleaved anew in each layer, the rest concatenated after
    # EuroBERT: bidirectional attention (no mask, SDPA's is_causal off) under a masked-LM loss
    bidirectional: bool = False
    rope_glm: bool = False  # Ernie 4.5 MoE: fp32 tables, the interleaved rotation (glm_rotary)

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "G": self.H // self.Hkv, "dr": self.dr or self.dh}


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
        h = m.embedding("embed_tokens", ids, V + cfg.extra_rows if cfg.extra_rows else V, E)
        h = m.dropout(h, cfg.embed_dropout)  # Starcoder2Model: after the embeddings
        # cache_position = arange(T); position_ids its unsqueezed view (one storage),
        # passed to the layers with cos, sin and their mask
        positions = tr.tensor((m["T"],), I64, False)
        cos, sin = rotary_tables(m, h, cfg.rope_fp32 or cfg.rope_glm,
                                 m["dr"] if cfg.partial_rotary or cfg.rope_interleaved else None)
        if cfg.embed_norm:  # NanoChatModel: self.norm(hidden_states) before the layers
            h = _norm(m, cfg, "norm", h)
        # causal_mask_mapping: a mask per layer type in use (EuroBertModel's
        # create_bidirectional_mask: none without padding)
        masks = {k: None if cfg.bidirectional else attention_mask(m, h, k, cfg.window)
                 for k in sorted(set(cfg.kinds))}

        def extras(kind: str) -> tuple[Tensor, ...]:
            mask = masks[kind]
            return (positions, cos, sin) + (() if mask is None else (mask,))

        def layer(x: Tensor, mlp: Mlp, kind: str = "F") -> Tensor:
            return _layer(m, cfg, x, cos, sin, masks[kind], mlp,
                          cfg.window if kind == "S" else 0)

        if stack is None:
            h = m.layers_by_kind("layers", cfg.kinds, lambda x, k: layer(x, _mlp, k), h,
                                 extras)
        else:
            h = stack(m, layer, h, extras("F"))
        h = _norm(m, cfg, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.head(h, w, V)
    if cfg.final_softcap:  # logits / cap, tanh, * cap
        logits = ops.mul(ops.tanh(ops.div(logits, cfg.final_softcap)), cfg.final_softcap)
    if cfg.bidirectional:  # ForMaskedLMLoss: logits.float(), viewed (B·T, V); labels.view(-1)
        rows = m["B"] * m["T"]
        return ops.cross_entropy(ops.view(ops.to(logits, F32), (rows, V)),
                                 ops.view(ids, (rows,)))
    return causal_lm_loss(logits, ids, V)


def attention_mask(m: Builder, like: Tensor, kind: str, window: int) -> Tensor | None:
    """causal_mask_mapping[kind] (masking_utils.py): eager, a (B, 1, T, T) float mask in the
    embeddings' dtype; SDPA, none for full attention (is_causal), and for sliding attention
    none while T < sliding_window (_ignore_causal_mask_sdpa), else sdpa_mask's (1, 1, T, T)
    bool mask expanded over B; flash_attention_2, none (flash_attention_mask without
    padding: the kernel's causal flag and window_size instead)."""
    if m.run.attention == "eager":
        return causal_mask(m, like)
    if m.run.attention == "flash" or kind != "S" or not m["T"].value >= window:
        return None
    one, T = Dim.const(1), m["T"]
    mask = m.trace.input((one, one, T, T), BOOL, "causal_mask")
    return ops.expand(mask, (m["B"], one, T, T))


def rotary_tables(m: Builder, like: Tensor, fp32: bool = False, width: Dim | None = None
                  ) -> tuple[Tensor, Tensor]:
    """LlamaRotaryEmbedding.forward, under no_grad, once for the model: cos and sin of
    (1, T, dh), cast to the activation dtype (a view of the fp32 product when that is
    fp32); Olmo2RotaryEmbedding leaves them fp32. width: a partial rotary's (Nemotron's
    inv_freq covers int(head_dim · partial_rotary_factor))."""
    one, T, dh = Dim.const(1), m["T"], width or m["dh"]
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
           mask: Tensor | None, mlp: Mlp, window: int = 0) -> Tensor:
    """LlamaDecoderLayer.forward: pre-norm attention and MLP around the residual;
    Olmo2DecoderLayer.forward: each sublayer's output normalised, then added. window: a
    sliding layer's sliding_window (0: full attention)."""
    if cfg.post_norm:
        with m.module("self_attn"):
            a = _attention(m, cfg, h, cos, sin, mask, window)
        h = ops.add(h, rms_norm(m, "post_attention_layernorm", a, cfg.norm_fp32))
        return ops.add(h, rms_norm(m, "post_feedforward_layernorm", mlp(m, cfg, h),
                                   cfg.norm_fp32))
    attn_norm, ffn_norm = cfg.norm_names
    with m.module("self_attn"):
        a = _attention(m, cfg, _norm(m, cfg, attn_norm, h), cos, sin, mask, window)
    after_attn, after_mlp = cfg.post_norms
    if after_attn:  # Glm4DecoderLayer: post_self_attn_layernorm; HyperCLOVAX: post_norm1
        a = rms_norm(m, after_attn, a)
    h = ops.add(h, a)
    out = mlp(m, cfg, _norm(m, cfg, ffn_norm, h))
    if after_mlp:  # post_mlp_layernorm; post_norm2
        out = rms_norm(m, after_mlp, out)
    return ops.add(h, out)


def _norm(m: Builder, cfg: Llama, name: str, h: Tensor) -> Tensor:
    """The pre-norm: LlamaRMSNorm, PhiMoE's nn.LayerNorm, or OlmoLayerNorm.forward:
    F.layer_norm(hidden_states.to(float32), ..., None, None).to(orig_dtype)."""
    if cfg.norm == "olmo":
        with m.module(name):
            return ops.to(ops.layer_norm(ops.to(h, F32), None, None), h.dtype)
    if cfg.norm == "layer1p":
        return _layer_norm_1p(m, name, h)
    if cfg.norm == "rms_plain":  # NanoChatRMSNorm: x.float() * rsqrt(...), type_as(x)
        with m.module(name):
            x = ops.to(h, F32)
            x = ops.mul(x, ops.rsqrt(ops.add(ops.mean(ops.pow(x, 2.0)), 1e-6)))
            return ops.to(x, h.dtype)
    return m.layer_norm(name, h) if cfg.layer_norm else rms_norm(m, name, h, cfg.norm_fp32)


def _layer_norm_1p(m: Builder, name: str, h: Tensor) -> Tensor:
    """NemotronLayerNorm1P.forward: F.layer_norm(input, shape, self.weight + 1.0, bias), its
    arguments first cast to autocast's dtype when CUDA's autocast is on
    (_cast_if_autocast_enabled reads torch.is_autocast_enabled(), CUDA's: .to copies), then
    run with autocast off (so in 16 bits under CUDA's autocast, as they are on the CPU's)."""
    with m.module(name):
        E, tr = h.shape[-1], h.trace
        args = [h, ops.add(m.param("weight", E), 1.0), m.param("bias", E)]
        half = autocast.cuda_enabled(tr)
        if half is not None:
            args = [ops.to(t, half) for t in args]
        with autocast.disabled(tr):
            return ops.layer_norm(*args)


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
        elif not cfg.gated:  # NemotronMLP: down_proj(act_fn(up_proj(x))); NanoChat's fc1, fc2
            up_name, down_name = cfg.mlp_names
            up = _activation(m, cfg, m.linear(up_name, x, F, cfg.bias_mlp_in))
            x = m.linear(down_name, up, E, cfg.bias_mlp_out)
        else:
            gate = _activation(m, cfg, m.linear("gate_proj", x, F, cfg.bias_mlp_in))
            x = ops.mul(gate, m.linear("up_proj", x, F, cfg.bias_mlp_in))
            if cfg.sub_norms:  # BitNetMLP: down_proj(ffn_sub_norm(act(gate(x)) * up(x)))
                x = rms_norm(m, "ffn_sub_norm", x)
            x = m.linear("down_proj", x, E, cfg.bias_mlp_out)
    # Starcoder2MLP, SeedOssMLP: dropout(p=residual_dropout) over the output
    return m.dropout(x, cfg.residual_dropout)


def _activation(m: Builder, cfg: Llama, x: Tensor) -> Tensor:
    """ACT2FN[hidden_act]: SiLU, ReLUSquaredActivation: torch.square(relu(x)), square
    being pow(x, 2) (relu keeps its result, pow its input: one storage), xIELU, or
    gelu_pytorch_tanh (one gelu, keeping its input)."""
    if cfg.activation == "relu2":
        return ops.pow(ops.relu(x), 2.0)
    if cfg.activation == "xielu":
        return _xielu(m, x)
    if cfg.activation == "gelu_tanh":  # GELUTanh: gelu(x, approximate="tanh")
        return ops.gelu(x)
    return ops.silu(x)


def _xielu(m: Builder, x: Tensor) -> Tensor:
    """XIELUActivation._xielu_python (activations.py; the Python path, without the xielu
    CUDA wheel): alpha_p = softplus(self.alpha_p); alpha_n = self.beta +
    softplus(self.alpha_n); where(x > 0, alpha_p * x * x + self.beta * x,
    (expm1(min(x, self.eps)) - x) * alpha_n + self.beta * x). alpha_p and alpha_n are
    (1,) parameters, beta and eps 0-d buffers, all in the model's dtype."""
    one, tr = Dim.const(1), m.trace
    with m.module("act_fn"):
        alpha_p = ops.softplus(m.param("alpha_p", one))
        raw_n = ops.softplus(m.param("alpha_n", one))
        beta, eps = (tr.tensor((), m.run.dtype, False, "buffer", f"{tr.scope}.{name}")
                     for name in ("beta", "eps"))
        alpha_n = ops.add(beta, raw_n)
        positive = ops.add(ops.mul(ops.mul(alpha_p, x), x), ops.mul(beta, x))
        negative = ops.add(ops.mul(ops.sub(ops.expm1(ops.minimum(x, eps)), x), alpha_n),
                           ops.mul(beta, x))
        return ops.where(ops.gt(x, 0.0), positive, negative)


def _attention(m: Builder, cfg: Llama, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None, window: int = 0) -> Tensor:
    """LlamaAttention.forward: projections viewed as heads, RoPE, (cache), attention
    (eager, SDPA or flash_attention_2, graph/flash.py: K/V not repeated, its (B, T, H, d)
    output made contiguous by the reshape), o."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(y: Tensor, n: Dim, norm: str = "") -> Tensor:
        if norm and cfg.qk_norm == "width":  # Olmo2Attention: q_norm(q_proj(x)), then view
            y = rms_norm(m, norm, y, cfg.norm_fp32)
        y = ops.view(y, (B, T, n, dh))
        if norm and cfg.qk_norm == "head":  # Qwen3Attention: q_norm(q_proj(x).view(...))
            y = rms_norm(m, norm, y, cfg.norm_fp32)
        y = ops.transpose(y, 1, 2)
        if norm and cfg.qk_norm == "head_t":  # ApertusAttention: q_norm(... .transpose(1, 2))
            y = rms_norm(m, norm, y, cfg.norm_fp32)
        return y

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
    if cfg.rope_interleaved:  # Glm4's apply_rotary_pos_emb
        q, k = _interleaved_rotary(q, k, cos, sin, m["dr"])
    elif cfg.partial_rotary:  # Nemotron: cat((q_embed, q_pass), dim=-1), a new tensor
        q, k = (_partial_rotary(t, cos, sin, m["dr"]) for t in (q, k))
    elif cfg.rope_glm:
        q, k = glm_rotary(q, k, cos, sin)
    else:
        q, k = (apply_rotary(t, cos, sin, cfg.rotate_flipped) for t in (q, k))
    if cfg.qk_norm == "rotated":  # HunYuanMoEV1Attention: the norms after RoPE
        q = rms_norm(m, "query_layernorm", q, cfg.norm_fp32)
        k = rms_norm(m, "key_layernorm", k, cfg.norm_fp32)
    if cfg.qk_norm == "after_rope":  # NanoChatAttention: q_norm(q), k_norm(k) after RoPE
        q, k = _norm(m, cfg, "q_norm", q), _norm(m, cfg, "k_norm", k)
    if cfg.rope_fp32:  # olmo2's apply_rotary_pos_emb: q_embed.to(q_type)
        q, k = ops.to(q, v.dtype), ops.to(k, v.dtype)
    if cfg.rope_concat and not (cfg.partial_rotary or cfg.rope_interleaved):
        # torch.cat([rotated, x[..., rotary_dim:]]): the pass part empty
        q, k = ops.cat([q], -1), ops.cat([k], -1)
    if cfg.differential:
        if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
            k, v = (ops.cat([t], -2) for t in (k, v))
        out = _differential(m, q, k, v, mask, float(dh.value) ** -0.5)
    else:
        out = attend(m, q, k, v, mask, dropout=cfg.attention_dropout, window=window,
                     causal=not cfg.bidirectional)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    if cfg.sub_norms:  # BitNetAttention: self.attn_sub_norm(attn_output), then o_proj
        out = rms_norm(m, "attn_sub_norm", out)
    # Starcoder2Attention, SeedOssAttention: dropout(p=residual_dropout) after o_proj
    return m.dropout(m.linear("o_proj", out, m["E"], cfg.bias_o), cfg.residual_dropout)


def attend(m: Builder, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *,
           dropout: float, window: int = 0, causal: bool = True) -> Tensor:
    """transformers' attention interface over (B, H, T, dh) Q and (B, Hkv, T, dh) K and V,
    scaled by dh ** -0.5, after the cache's update (DynamicLayer.update: torch.cat onto the
    empty cache, a copy): eager (K and V repeated to every query head), flash_attention_2
    (window: its sliding_window, 0 for none) or SDPA."""
    if m.use_cache:
        k, v = (ops.cat([t], -2) for t in (k, v))
    G = m["G"]  # query heads per K/V head, H / Hkv
    scaling = float(q.shape[-1].value) ** -0.5
    if m.run.attention == "eager":
        assert mask is not None or not causal
        return eager_attention(m, q, repeat_kv(k, G), repeat_kv(v, G), mask, dropout=dropout,
                               scaling=scaling)
    if m.run.attention == "flash":
        return flash_attention_forward(m, q, k, v, sliding_window=window)
    return sdpa_attention(q, k, v, G, dropout=dropout, scaling=scaling, mask=mask,
                          causal=causal)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, flipped: bool = False) -> Tensor:
    """apply_rotary_pos_emb: (x * cos) + (rotate_half(x) * sin); rotate_half:
    cat((-x2, x1), dim=-1) of the two halves (views); flipped (NanoChat's):
    cat((x2, -x1), dim=-1)."""
    half = x.shape[-1].halved()
    x1, x2 = ops.narrow(x, -1, 0, half), ops.narrow(x, -1, half.value, half)
    rotated = ops.cat([x2, ops.neg(x1)] if flipped else [ops.neg(x2), x1], -1)
    return ops.add(ops.mul(x, cos), ops.mul(rotated, sin))


def _differential(m: Builder, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                  scaling: float) -> Tensor:
    """DiffLlamaAttention.forward from V on: value_states1, value_states2 = (v.repeat(1, 2,
    1, 1) for v in torch.chunk(value_states, 2, dim=1)); two attention calls (dropout 0)
    sharing Q and K (flash_attention_2 too: two kernel calls, each its own log-sum-exp and RNG
    state); torch.cat of the outputs on the last dim, chunked in two on the head
    dim (views); lambda_i = exp(sum(lambda_qi * lambda_ki, -1, dtype=float32)).to(q's
    dtype); lambda_full = lambda_1 - lambda_2 + lambda_init; (out1 - lambda_full * out2)
    through groupnorm (nn.RMSNorm without weight over 2·head_dim: aten's rms_norm,
    x.to(opmath) · rsqrt(pow(2).mean + eps), type_as) times (1 - lambda_init), a Python
    number (lambda_init_fn(layer_idx): a scalar either way)."""
    G, dh = m["G"], m["dh"]
    halves = ops.split(v, v.shape[1].halved(), 1)
    outputs = []
    for vv in (ops.repeat(t, 1, 2) for t in halves):
        if m.run.attention == "eager":
            assert mask is not None
            outputs.append(eager_attention(m, q, repeat_kv(k, G), repeat_kv(vv, G), mask,
                                           dropout=0.0, scaling=scaling))
        elif m.run.attention == "flash":  # each call (B, T, H, dh), as the others
            outputs.append(flash_attention_forward(m, q, k, vv))
        else:
            outputs.append(sdpa_attention(q, k, vv, G, dropout=0.0, scaling=scaling,
                                          mask=mask))
    both = ops.cat(outputs, -1)
    out1, out2 = ops.split(both, both.shape[2].halved(), 2)

    def lam(i: int) -> Tensor:
        prod = ops.mul(m.param(f"lambda_q{i}", dh), m.param(f"lambda_k{i}", dh))
        return ops.to(ops.exp(ops.sum_dim(prod, -1, dtype=F32)), q.dtype)

    lambda_full = ops.add(ops.sub(lam(1), lam(2)), 0.5)  # + lambda_init
    x = ops.sub(out1, ops.mul(lambda_full, out2))
    with m.module("groupnorm"):
        xf = ops.to(x, F32)
        xf = ops.mul(xf, ops.rsqrt(ops.add(ops.mean(ops.pow(xf, 2.0)), 1e-6)))
        x = ops.to(xf, x.dtype)
    return ops.mul(x, 0.5)  # (1 - lambda_init) * groupnorm(...)


def _rotate_pairs(x: Tensor) -> Tensor:
    """rotate_half over interleaved pairs (GLM's, ERNIE 4.5's):
    torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2), a new tensor (the
    stack's) flattened as a view."""
    half = x.shape[-1].halved()
    x1, x2 = ops.slice_step(x, -1, 0, half, 2), ops.slice_step(x, -1, 1, half, 2)
    pairs = ops.cat([ops.unsqueeze(ops.neg(x2), -1), ops.unsqueeze(x1, -1)], -1)
    return ops.view(pairs, x.shape)


def _interleaved_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, dr: Dim
                        ) -> tuple[Tensor, Tensor]:
    """Glm4's apply_rotary_pos_emb (Glm's too): cos[..., :dr // 2].repeat_interleave(2,
    dim=-1) and sin's, new (1, 1, T, dr) tensors made once a layer for Q and K (the tables
    cover dr = int(head_dim · partial_rotary_factor)); x[..., :dr] and x[..., dr:] views;
    (x_rot * cos) + (rotate_half(x_rot) * sin), rotate_half being torch.stack((-x[..., 1::2],
    x[..., 0::2]), dim=-1).flatten(-2) (a new tensor, flattened as a view); torch.cat with
    the pass part, a new tensor (the pass part empty when dr is the whole head)."""
    half, two = dr.halved(), Dim.const(2)
    cos, sin = (ops.repeat_interleave(ops.narrow(t, -1, 0, half), two, -1) for t in (cos, sin))

    def rotate(x: Tensor) -> Tensor:
        rot = ops.narrow(x, -1, 0, dr)
        embed = ops.add(ops.mul(rot, cos), ops.mul(_rotate_pairs(rot), sin))
        if dr.value == x.shape[-1].value:
            return ops.cat([embed], -1)
        rest = x.shape[-1] + dr * -1
        return ops.cat([embed, ops.narrow(x, -1, dr.value, rest)], -1)

    return rotate(q), rotate(k)


def glm_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Ernie 4.5 MoE's apply_rotary_pos_emb (models/ernie4_5_moe/modeling_ernie4_5_moe.py,
    "glm rope style"): the fp32 cos and sin cut to their first half and
    repeat_interleave(2, dim=-1)-ed, new tensors of the call (q's and k's); (x.float() * cos)
    + (rotate_half(x).float() * sin), cast back to x's dtype; rotate_half:
    torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2), a new tensor."""
    tr = q.trace
    with tr.no_grad():
        tables = []
        for t in (cos, sin):
            table = tr.tensor(t.shape, t.dtype, False)
            tr.record("repeat_interleave", table)
            tables.append(table)
    c, s = tables

    def rotate(x: Tensor) -> Tensor:
        rotated = _rotate_pairs(x)
        return ops.to(ops.add(ops.mul(ops.to(x, F32), c), ops.mul(ops.to(rotated, F32), s)),
                      x.dtype)
    return rotate(q), rotate(k)


def _partial_rotary(x: Tensor, cos: Tensor, sin: Tensor, dr: Dim) -> Tensor:
    """Nemotron's apply_rotary_pos_emb: x[..., :rot_dim] rotated, x[..., rot_dim:] passed,
    both views; torch.cat((x_embed, x_pass), dim=-1)."""
    rest = x.shape[-1] + dr * -1
    rotated = apply_rotary(ops.narrow(x, -1, 0, dr), cos, sin)
    return ops.cat([rotated, ops.narrow(x, -1, dr.value, rest)], -1)


def repeat_kv(x: Tensor, groups: Dim) -> Tensor:
    """repeat_kv: x[:, :, None].expand(B, Hkv, groups, T, dh).reshape(B, H, T, dh), a view
    where computeStride finds one (one K/V head and B = 1), else a copy."""
    if groups.value == 1:
        return x
    B, Hkv, T, dh = x.shape
    x = ops.expand(ops.unsqueeze(x, 2), (B, Hkv, groups, T, dh))
    return ops.reshape(x, (B, Hkv * groups, T, dh))


def eager_attention(m: Builder, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *,
                    dropout: float, scaling: float, softcap: float = 0.0) -> Tensor:
    """eager_attention_forward (modeling_llama.py): scores · scaling plus the mask,
    softmax in fp32 cast back to the query's dtype, dropout, the product with V,
    transposed and made contiguous. softcap (modeling_gemma2.py's version): the scaled
    scores divided by the cap, tanh, times the cap, before the mask."""
    w = ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), scaling)
    if softcap:
        w = ops.mul(ops.tanh(ops.div(w, softcap)), softcap)
    if mask is not None:  # (T5Gemma's cross-attention has none)
        w = ops.add(w, mask)
    w = ops.to(ops.softmax(w, F32), q.dtype)
    w = m.dropout(w, dropout)
    return ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, groups: Dim, *, dropout: float,
                   scaling: float, mask: Tensor | None = None, causal: bool = True) -> Tensor:
    """sdpa_attention_forward (integrations/sdpa_attention.py): SDPA's own GQA where
    use_gqa_in_sdpa allows it (no mask, head dims <= 256), else repeat_kv; is_causal
    without a mask (and a causal module: EuroBERT's is not); the (B, H, T, d) output
    transposed back and made contiguous."""
    B, H, T, dh = q.shape
    gqa = groups.value > 1 and mask is None and k.shape[-1].value <= 256
    if groups.value > 1 and not gqa:
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    out = scaled_dot_product_attention(q, k, v, is_causal=causal and mask is None,
                                       enable_gqa=gqa,
                                       dropout_p=dropout, scale=scaling, mask=mask)
    return ops.contiguous(ops.transpose(ops.reshape(out, (B, H, T, dh)), 1, 2))
