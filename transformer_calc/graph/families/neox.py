"""The GPT-NeoX-style decoders as transformers 5.23 runs them: LayerNorm (with biases)
before attention and MLP, which run one after the other or in parallel off the same
residual, and a rotary embedding over the first R dims of each head (partial rotary).

- models/gpt_neox/modeling_gpt_neox.py (GPTNeoXForCausalLM, GPTNeoXModel, GPTNeoXLayer,
  GPTNeoXAttention, GPTNeoXMLP, GPTNeoXRotaryEmbedding, apply_rotary_pos_emb): one fused
  query_key_value whose output is viewed as (B, T, H, 3·dh), each head's Q, K and V side by
  side; two LayerNorms a layer whether the residual is parallel or sequential; the MLP's
  hidden_act (erf GELU by default).
- models/stablelm/modeling_stablelm.py (StableLmForCausalLM, StableLmDecoderLayer,
  StableLmAttention, StableLmMLP): q/k/v projections with grouped K/V heads, a gated SiLU
  MLP, one LayerNorm feeding both sublayers when the residual is parallel.
- models/phi/modeling_phi.py (PhiForCausalLM, PhiDecoderLayer, PhiAttention, PhiMLP):
  q/k/v and dense, fc1/fc2 with gelu_new, one LayerNorm feeding both sublayers, the
  embeddings' and each sublayer's dropout, an LM head with a bias.
- models/persimmon/modeling_persimmon.py (PersimmonForCausalLM, PersimmonDecoderLayer,
  PersimmonAttention, PersimmonMLP): the fused query_key_value viewed as (B, T, H, 3, dh),
  a LayerNorm over each head of Q and of K (q_layernorm, k_layernorm), squared ReLU.
- models/gpt_neox_japanese/modeling_gpt_neox_japanese.py (GPTNeoXJapaneseForCausalLM,
  GPTNeoXJapaneseLayer, GPTNeoXJapaneseAttention, GPTNeoXJapaneseMLP, bias_dropout_add):
  GPT-NeoX's fused split, sequential, no biases but the last layer's dense_bias; its own
  eager attention (baddbmm scores, softmax in the input's dtype, dropout, the product with
  V; no SDPA).

Each but GPT-NeoX-Japanese with eager_attention_forward (softmax in fp32, cast back) or
integrations/sdpa_attention.py; all with cache_utils.DynamicLayer.update when use_cache
builds a DynamicCache in training."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import autocast, ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.families.gpt2 import new_gelu
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

# each model's module names: the model's attribute, the token table, the final norm, the
# attention's module, its fused or separate projections, its output, the MLP's in and out
_MODULES = {
    "gpt_neox": ("gpt_neox", "embed_in", "final_layer_norm", "attention", "query_key_value",
                 "dense", "dense_h_to_4h", "dense_4h_to_h"),
    "stablelm": ("model", "embed_tokens", "norm", "self_attn", "", "o_proj", "up_proj",
                 "down_proj"),
    "phi": ("model", "embed_tokens", "final_layernorm", "self_attn", "", "dense", "fc1",
            "fc2"),
    "persimmon": ("model", "embed_tokens", "final_layernorm", "self_attn", "query_key_value",
                  "dense", "dense_h_to_4h", "dense_4h_to_h"),
    "gpt_neox_japanese": ("gpt_neox_japanese", "embed_in", "final_layer_norm", "attention",
                          "query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"),
}
JAPANESE = "gpt_neox_japanese"
MODELS = tuple(_MODULES)


@dataclass(frozen=True)
class NeoX:
    """The config keys that shape the graph. Symbols: V vocab, E hidden, H heads, Hkv K/V
    heads, dh head size (E / H), F intermediate, L layers, R the rotary dims (the cos/sin
    table's width: int(dh · partial_rotary_factor), rounded up to even), G = H / Hkv.
    model: whose forward (MODELS); parallel: attention and MLP off the same residual;
    act: the MLP's activation (gelu, gelu_new, relu2; StableLM's gated silu)."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    F: int
    L: int
    R: int
    model: str = "gpt_neox"
    tied: bool = False
    parallel: bool = True
    bias_qkv: bool = True
    bias_o: bool = True
    bias_mlp: bool = True
    act: str = "gelu"
    hidden_dropout: float = 0.0  # each sublayer's output (Phi's resid_pdrop)
    attention_dropout: float = 0.0
    embd_dropout: float = 0.0  # GPT-NeoX's emb_dropout (hidden_dropout), Phi's embd_pdrop
    lm_head_bias: bool = False  # Phi

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "F": self.F, "L": self.L, "R": self.R, "G": self.H // self.Hkv}


def forward(m: Builder, cfg: NeoX) -> Tensor:
    """<Model>ForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    base, embed, final, *_ = _MODULES[cfg.model]
    if cfg.model == JAPANESE and m.run.attention != "eager":
        raise ValueError(f"{cfg.model}: eager attention only (the class supports no SDPA)")
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module(base):
        h = m.embedding(embed, ids, V, E)
        # position_ids = torch.arange(T) + past_seen_tokens, unsqueezed (a new tensor)
        positions = ops.unsqueeze(ops.add(tr.input((T,), I64, "arange"), 0), 0)
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        if cfg.model in ("gpt_neox", "phi"):  # emb_dropout, embed_dropout
            h = m.dropout(h, cfg.embd_dropout)
        cos, sin = rotary_tables(m, h)
        extras = (positions, cos, sin) + (() if mask is None else (mask,))
        if cfg.model == JAPANESE:  # the last layer's attention has a bias: a kind of its own
            kinds = "A" * (cfg.L - 1) + "Z"
            h = m.layers_by_kind("layers", kinds if cfg.L > 1 else "Z",
                                 lambda x, kind: _japanese_layer(m, cfg, x, cos, sin, mask,
                                                                 kind == "Z"),
                                 h, lambda _: extras)
        else:
            h = m.layers("layers", lambda x: _layer(m, cfg, x, cos, sin, mask), h, extras)
        h = m.layer_norm(final, h)
    with m.module("embed_out" if cfg.model == JAPANESE else "lm_head"):
        w = m.tied(f"{base}.{embed}.weight") if cfg.tied else m.param("weight", V, E)
        b = m.param("bias", V) if cfg.lm_head_bias else None
        logits = ops.linear(h, w, b)
    return causal_lm_loss(logits, ids, V)


def rotary_tables(m: Builder, like: Tensor) -> tuple[Tensor, Tensor]:
    """<Model>RotaryEmbedding.forward, under no_grad, once for the model: cos and sin of
    (1, T, R), R = 2 · len(inv_freq) (cat((freqs, freqs))), times attention_scaling and
    cast to the activation dtype (a view of the fp32 product when that is fp32)."""
    one, T, R = Dim.const(1), m["T"], m["R"]
    with m.trace.no_grad(), m.module("rotary_emb"):
        pair = []
        for _ in ("cos", "sin"):
            emb = m.trace.tensor((one, T, R), F32, False)
            pair.append(ops.to(ops.mul(emb, 1.0), like.dtype))
        return pair[0], pair[1]


def _layer(m: Builder, cfg: NeoX, h: Tensor, cos: Tensor, sin: Tensor,
           mask: Tensor | None) -> Tensor:
    """The decoder layer: GPTNeoXLayer (input_layernorm before attention,
    post_attention_layernorm before the MLP, of h when parallel), StableLmDecoderLayer and
    PhiDecoderLayer (one input_layernorm for both when parallel), PersimmonDecoderLayer
    (sequential); each sublayer's output through its dropout."""
    attn_module = _MODULES[cfg.model][3]
    p = cfg.hidden_dropout
    x = m.layer_norm("input_layernorm", h)
    with m.module(attn_module):  # (its dropout named as the attention's)
        a = _attention(m, cfg, x, cos, sin, mask)
        if cfg.model in ("gpt_neox", "phi"):  # post_attention_dropout, resid_dropout
            a = m.dropout(a, p)
    if cfg.parallel:
        if cfg.model == "gpt_neox":
            x = m.layer_norm("post_attention_layernorm", h)
        f = _mlp(m, cfg, x, p)
        if cfg.model == "gpt_neox":  # mlp_output + attn_output + hidden_states
            return ops.add(ops.add(f, a), h)
        return ops.add(ops.add(h, a), f) if cfg.model == "stablelm" else \
            ops.add(ops.add(a, f), h)  # Phi: attn_outputs + feed_forward + residual
    h = ops.add(a, h) if cfg.model == "gpt_neox" else ops.add(h, a)
    f = _mlp(m, cfg, m.layer_norm("post_attention_layernorm", h), p)
    return ops.add(f, h) if cfg.model in ("gpt_neox", "persimmon") else ops.add(h, f)


def _japanese_layer(m: Builder, cfg: NeoX, h: Tensor, cos: Tensor, sin: Tensor,
                    mask: Tensor | None, last: bool) -> Tensor:
    """GPTNeoXJapaneseLayer.forward: bias_dropout_add(attention(input_layernorm(h)),
    dense_bias (the last layer's), h, hidden_dropout), then bias_dropout_add(mlp(
    post_attention_layernorm(that)), None, that, hidden_dropout)."""
    x = m.layer_norm("input_layernorm", h)
    with m.module("attention"):
        a = _attention(m, cfg, x, cos, sin, mask)
        if last:  # x + attn_bias.expand_as(residual)
            a = ops.add(a, m.param("dense_bias", m["E"]))
        h = ops.add(h, m.dropout(a, cfg.hidden_dropout))
    f = _mlp(m, cfg, m.layer_norm("post_attention_layernorm", h), cfg.hidden_dropout)
    return ops.add(h, f)


def _mlp(m: Builder, cfg: NeoX, x: Tensor, p: float) -> Tensor:
    """GPTNeoXMLP, PhiMLP, PersimmonMLP: out(act(in(x))); StableLmMLP:
    down(silu(gate(x)) * up(x)); then the layer's dropout of p (named as the MLP's)."""
    *_, up, down = _MODULES[cfg.model]
    F, E = m["F"], m["E"]
    with m.module("mlp"):
        if cfg.act == "silu":
            gate = ops.silu(m.linear("gate_proj", x, F, cfg.bias_mlp))
            y = ops.mul(gate, m.linear(up, x, F, cfg.bias_mlp))
        else:
            y = _activation(cfg.act, m.linear(up, x, F, cfg.bias_mlp))
        return m.dropout(m.linear(down, y, E, cfg.bias_mlp), p)


def _activation(act: str, x: Tensor) -> Tensor:
    """ACT2FN: gelu (F.gelu, erf), gelu_new (NewGELUActivation's ops), relu2
    (ReLUSquaredActivation: torch.square(relu(x)))."""
    if act == "gelu":
        return ops.gelu(x)
    if act == "gelu_new":
        return new_gelu(x)
    if act == "relu2":
        return ops.pow(ops.relu(x), 2.0)
    raise ValueError(f"activation {act}: not in the NeoX-style graph")


def _attention(m: Builder, cfg: NeoX, x: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | None) -> Tensor:
    """The attention: projections viewed as heads, RoPE over the first R dims of Q and K
    (the rest passed through, concatenated back), (cache), attention, the output
    projection."""
    *_, fused, dense, _, _ = _MODULES[cfg.model]
    B, T, E, H, Hkv, dh = m["B"], m["T"], m["E"], m["H"], m["Hkv"], m["dh"]
    q, k, v = _qkv(m, cfg, x, fused)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = partial_rotary(q, cos, sin, m["R"]), partial_rotary(k, cos, sin, m["R"])
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    G = m["G"]
    scaling = float(dh.value) ** -0.5
    if cfg.model == JAPANESE:
        assert mask is not None
        out = _japanese_attention(m, cfg, q, k, v, mask)
    elif mask is not None:
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=cfg.attention_dropout, scaling=scaling)
    elif m.run.attention == "flash":  # flash_attention_2: (B, T, H, dh) out
        out = flash_attention_forward(m, q, k, v)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=cfg.attention_dropout,
                                   scaling=scaling)
    del Hkv
    # attn_output.reshape(*input_shape, -1) (.contiguous(): GPT-NeoX, Phi)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear(dense, out, E, cfg.bias_o)


def _japanese_attention(m: Builder, cfg: NeoX, q: Tensor, k: Tensor, v: Tensor,
                        mask: Tensor) -> Tensor:
    """GPTNeoXJapaneseAttention._attn: Q and K viewed as (B·H, T, dh), baddbmm over zeros
    with alpha = 1/sqrt(dh), viewed back, + mask, softmax in the scores' dtype, dropout,
    cast to V's dtype, the product with V; _merge_heads (permute, contiguous)."""
    B, H, T, dh = q.shape
    BH = B * H
    q3, k3 = ops.view(q, (BH, T, dh)), ops.view(k, (BH, k.shape[-2], dh))
    zeros = m.trace.tensor((BH, T, k.shape[-2]), q.dtype, False)
    # (baddbmm is on autocast's lower-precision list: its three inputs cast, then run)
    zeros, q3, kt = autocast.cast_inputs("baddbmm", zeros, q3, ops.transpose(k3, 1, 2))
    with autocast.disabled(m.trace):
        w = ops.baddbmm(zeros, q3, kt, alpha=1 / float(dh.value) ** 0.5)
    w = ops.add(ops.view(w, (B, H, T, k.shape[-2])), mask)
    w = ops.to(m.dropout(ops.softmax(w), cfg.attention_dropout), v.dtype)
    return ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))


def _qkv(m: Builder, cfg: NeoX, x: Tensor, fused: str) -> tuple[Tensor, Tensor, Tensor]:
    """Q, K, V as (B, heads, T, dh): GPT-NeoX's fused output viewed as (B, T, H, 3·dh),
    transposed and chunked (views); Persimmon's viewed as (B, T, H, 3, dh) and indexed
    (views), Q and K through their per-head LayerNorms; StableLM's and Phi's projections
    viewed and transposed."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]
    if cfg.model in ("gpt_neox", JAPANESE):  # (qkv[..., :dh].permute(0, 2, 1, 3): the same)
        qkv = m.linear(fused, x, 3 * (H * dh), cfg.bias_qkv)
        heads = ops.transpose(ops.view(qkv, (B, T, H, 3 * dh)), 1, 2)
        q, k, v = ops.split(heads, dh, -1)
        return q, k, v
    if cfg.model == "persimmon":
        qkv = m.linear(fused, x, 3 * (H * dh), cfg.bias_qkv)
        parts = ops.view(qkv, (B, T, H, Dim.const(3), dh))
        q, k, v = (ops.select(parts, 3, i) for i in range(3))
        q, k = m.layer_norm("q_layernorm", q), m.layer_norm("k_layernorm", k)
        return ops.transpose(q, 1, 2), ops.transpose(k, 1, 2), ops.transpose(v, 1, 2)
    q = m.linear("q_proj", x, H * dh, cfg.bias_qkv)
    k = m.linear("k_proj", x, Hkv * dh, cfg.bias_qkv)
    v = m.linear("v_proj", x, Hkv * dh, cfg.bias_qkv)
    return (ops.transpose(ops.view(q, (B, T, H, dh)), 1, 2),
            ops.transpose(ops.view(k, (B, T, Hkv, dh)), 1, 2),
            ops.transpose(ops.view(v, (B, T, Hkv, dh)), 1, 2))


def partial_rotary(x: Tensor, cos: Tensor, sin: Tensor, R: Dim) -> Tensor:
    """x[..., :R] rotated (apply_rotary_pos_emb: x·cos + rotate_half(x)·sin), then
    torch.cat((rotated, x[..., R:]), dim=-1): a new tensor, even when the rest is empty."""
    dh = x.shape[-1]
    rotated = llama.apply_rotary(ops.narrow(x, -1, 0, R), cos, sin)
    if R.value == dh.value:
        return ops.cat([rotated], -1)
    return ops.cat([rotated, ops.narrow(x, -1, R.value, dh + R * -1)], -1)
