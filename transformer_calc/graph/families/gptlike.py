"""GPT-2's relatives with learned positions, as transformers 5.23 runs them.

- models/gpt_bigcode/modeling_gpt_bigcode.py (GPTBigCodeForCausalLM, GPTBigCodeModel,
  GPTBigCodeBlock, GPTBigCodeAttention with its eager_attention_forward or
  integrations/sdpa_attention.py, GPTBigCodeMLP): GPT-2's pre-norm block with nn.Linear
  layers; the fused c_attn viewed as (B, T, H, 3·dh), transposed and split into each head's
  Q, K and V, or (multi_query) unsqueezed and split into Q and one K/V head, repeated for
  eager (repeat_kv) and SDPA's own GQA; the softmax in fp32 cast back; the tanh GELU.
- models/openai/modeling_openai.py (OpenAIGPTLMHeadModel, OpenAIGPTModel, Block, Attention,
  MLP): post-norm blocks (ln_1 after the attention's sum, ln_2 after the MLP's) without a
  final norm; position ids a slice of a buffer; Conv1D c_attn split, K permuted to
  (B, H, dh, T); the scores divided by sqrt(dh), multiplied by the tril buffer's slice and
  offset by -1e4 where it is 0; a softmax in the scores' dtype; gelu_new.
- models/ctrl/modeling_ctrl.py (CTRLLMHeadModel, CTRLModel, EncoderLayer, MultiHeadAttention
  with its eager_attention_forward or integrations/sdpa_attention.py,
  point_wise_feed_forward_network): the token embeddings times sqrt(E) plus rows of a
  sinusoidal buffer (no grad), pre-norm layers with biased Wq/Wk/Wv/dense, the softmax in
  the scores' dtype, no dropout on the scores, a ReLU MLP (ffn.0, ffn.2), the final
  layernorm and a biased LM head.
- models/gpt_neo/modeling_gpt_neo.py (GPTNeoForCausalLM, GPTNeoModel, GPTNeoBlock,
  GPTNeoAttention, GPTNeoSelfAttention, GPTNeoMLP; eager only): GPT-2's layout with bias-free
  q/k/v_proj and a biased out_proj; Q and K cast to fp32 and multiplied unscaled; the
  global or local causal pattern a bool buffer (torch.where keeps only it: the model's
  memory), the model's causal mask added, the softmax in fp32 cast to V's dtype.
- models/mpt/modeling_mpt.py (MptForCausalLM, MptModel, MptBlock, MptAttention, MptMLP;
  eager only): no positions but ALiBi, an fp32 (H, 1, max_seq_len) tensor built each
  forward and added to the scores (so they turn fp32), the causal mask cast to bool and
  masked_fill'd (kept by every layer, one storage), the softmax over the fp32 scores cast
  to V's dtype; bias-free LayerNorms and linears, the fused Wqkv chunked into views, an erf
  GELU MLP 4·E wide; attn_config.attn_pdrop is every dropout of the layers.
- models/granite_swa/modeling_granite_swa.py (GraniteSWAForCausalLM, GraniteSWAModel,
  GraniteSWADecoderLayer, GraniteSWAAttention with its eager_attention_forward; eager only):
  Llama's layers (families/llama.py) with Granite's multipliers (the embeddings', each
  sublayer's output before the residual add, the logits divided by logits_scaling: Python
  numbers, nothing kept) and a learned sink per head applied after the attention:
  sigmoid(logsumexp(scores) - sinks) in fp32 scales the output."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.families.gpt2 import GPT2, new_gelu
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I64, Tensor


@dataclass(frozen=True)
class GPTBigCode(GPT2):
    """GPTBigCodeConfig's keys: GPT-2's symbols and dropouts; multi_query: one K/V head."""

    multi_query: bool = False

    def sizes(self) -> dict[str, int]:
        """GPT-2's, with Hkv K/V heads (1 under multi_query) and G = H / Hkv."""
        kv = 1 if self.multi_query else self.H
        return super().sizes() | {"Hkv": kv, "G": self.H // kv}


@dataclass(frozen=True)
class OpenAIGPT(GPT2):
    """OpenAIGPTConfig's keys: GPT-2's symbols (F = 4·E, MLP(4 * nx)) and dropouts."""


def bigcode_forward(m: Builder, cfg: GPTBigCode) -> Tensor:
    """GPTBigCodeForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        h = m.embedding("wte", ids, V, E)
        # position_ids = (torch.arange(T) + past_seen_tokens).unsqueeze(0)
        positions = ops.unsqueeze(ops.add(tr.input((T,), I64, "arange"), 0), 0)
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        h = ops.add(h, m.embedding("wpe", positions, m["P"], E))
        h = m.dropout(h, cfg.embd_pdrop)
        extras = (positions,) if mask is None else (positions, mask)
        h = m.layers("h", lambda x: _bigcode_block(m, cfg, x, mask), h, extras)
        h = m.layer_norm("ln_f", h)
    with m.module("lm_head"):
        w = m.tied("transformer.wte.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _bigcode_block(m: Builder, cfg: GPTBigCode, h: Tensor, mask: Tensor | None) -> Tensor:
    """GPTBigCodeBlock.forward: pre-norm attention and MLP (c_fc, tanh GELU, c_proj,
    dropout), each added to the residual."""
    a = _bigcode_attention(m, cfg, m.layer_norm("ln_1", h), mask)
    h = ops.add(a, h)
    with m.module("mlp"):
        x = ops.gelu(m.linear("c_fc", m.layer_norm("ln_2", h), m["F"], True))
        x = m.dropout(m.linear("c_proj", x, m["E"], True), cfg.resid_pdrop)
    return ops.add(h, x)


def _bigcode_attention(m: Builder, cfg: GPTBigCode, x: Tensor, mask: Tensor | None) -> Tensor:
    """GPTBigCodeAttention.forward (self-attention, multi-head): c_attn(x).view(B, T, H,
    3·dh).transpose(1, 2).split(dh, dim=3); the interface called with head_dim**-0.5; the
    output reshaped to (B, T, E), contiguous, c_proj, resid_dropout."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    with m.module("attn"):
        if cfg.multi_query:  # c_attn(x).unsqueeze(1).split((E, dh, dh), dim=3)
            qkv = ops.unsqueeze(m.linear("c_attn", x, (H + 2) * dh, True), 1)
            q = ops.narrow(qkv, 3, 0, H * dh)
            k, v = (ops.view(ops.narrow(qkv, 3, (H.value + i) * dh.value, dh),
                             (B, m["Hkv"], T, dh)) for i in (0, 1))
            q = ops.transpose(ops.view(q, (B, T, H, dh)), 1, 2)
        else:  # .view(B, T, H, 3·dh).transpose(1, 2).split(3 * [dh], dim=3)
            qkv = m.linear("c_attn", x, 3 * (H * dh), True)
            qkv = ops.transpose(ops.view(qkv, (B, T, H, 3 * dh)), 1, 2)
            q, k, v = ops.split(qkv, dh, 3)
        groups = m["G"]  # num_key_value_groups
        if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
            k, v = (ops.cat([t], -2) for t in (k, v))
        scaling = dh.value ** -0.5
        if mask is not None:
            k, v = llama.repeat_kv(k, groups), llama.repeat_kv(v, groups)
            out = llama.eager_attention(m, q, k, v, mask, dropout=cfg.attn_pdrop,
                                        scaling=scaling)
        elif m.run.attention == "flash":  # flash_attention_2: (B, T, H, dh) out
            out = flash_attention_forward(m, q, k, v)
        else:
            out = llama.sdpa_attention(q, k, v, groups, dropout=cfg.attn_pdrop,
                                       scaling=scaling)
        out = ops.contiguous(ops.reshape(out, (B, T, E)))
        return m.dropout(m.linear("c_proj", out, E, True), cfg.resid_pdrop)


@dataclass(frozen=True)
class Ctrl:
    """CTRLConfig's keys (n_embd, n_head, dff as F, n_layer, n_positions; resid_pdrop and
    embd_pdrop; its attention is called with dropout 0.0). GPT-2's symbols."""

    V: int
    P: int
    E: int
    H: int
    F: int
    L: int
    tied: bool = True
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "L": self.L}


def ctrl_forward(m: Builder, cfg: Ctrl) -> Tensor:
    """CTRLLMHeadModel.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        h = m.embedding("w", ids, V, E)
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        h = ops.mul(h, float(E.value) ** 0.5)  # inputs_embeds *= np.sqrt(d_model_size)
        # pos_encoding[position_ids, :]: a buffer indexed, no grad; + token_type_embeds (0)
        pos = tr.tensor((Dim.const(1), T, E), h.dtype, False)
        h = m.dropout(ops.add(ops.add(h, pos), 0), cfg.embd_pdrop)
        h = m.layers("h", lambda x: _ctrl_layer(m, cfg, x, mask), h,
                     () if mask is None else (mask,))
        h = m.layer_norm("layernorm", h)
    with m.module("lm_head"):
        w = m.tied("transformer.w.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w, m.param("bias", V)), V)
    return causal_lm_loss(logits, ids, V)


def _ctrl_layer(m: Builder, cfg: Ctrl, x: Tensor, mask: Tensor | None) -> Tensor:
    """EncoderLayer.forward: out1 = x + dropout1(mha(layernorm1(x))); out1 +
    dropout2(ffn(layernorm2(out1)))."""
    B, T, E, H, dh = m["B"], m["T"], m["E"], m["H"], m["dh"]
    normed = m.layer_norm("layernorm1", x)
    with m.module("multi_head_attention"):
        q, k, v = (ops.transpose(ops.view(m.linear(name, normed, E, True), (B, T, H, dh)), 1, 2)
                   for name in ("Wq", "Wk", "Wv"))
        if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
            k, v = (ops.cat([t], -2) for t in (k, v))
        scaling = dh.value ** -0.5
        if mask is not None:  # eager_attention_forward (modeling_ctrl.py): softmax as is
            w = ops.add(ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), scaling), mask)
            w = m.dropout(ops.softmax(w), 0.0)
            out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
        elif m.run.attention == "flash":  # flash_attention_2: (B, T, H, dh) out
            out = flash_attention_forward(m, q, k, v)
        else:
            out = llama.sdpa_attention(q, k, v, Dim.const(1), dropout=0.0, scaling=scaling)
        out = ops.contiguous(ops.reshape(out, (B, T, E)))
        a = m.linear("dense", out, E, True)
    out1 = ops.add(x, m.dropout(a, cfg.resid_pdrop))
    out2 = m.layer_norm("layernorm2", out1)
    with m.module("ffn"):
        y = ops.relu(m.linear("0", out2, m["F"], True))
        y = m.linear("2", y, E, True)
    return ops.add(out1, m.dropout(y, cfg.resid_pdrop))


@dataclass(frozen=True)
class GPTNeo:
    """GPTNeoConfig's keys (hidden_size, num_heads, intermediate_size or 4·E, num_layers,
    max_position_embeddings; resid_dropout as dropout, embed_dropout, attention_dropout).
    Local and global layers keep the same tensors (their windows differ in a buffer only).
    GPT-2's symbols."""

    V: int
    P: int
    E: int
    H: int
    F: int
    L: int
    tied: bool = True
    dropout: float = 0.0
    attention_dropout: float = 0.0
    embed_dropout: float = 0.0

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": self.F, "L": self.L}


def neo_forward(m: Builder, cfg: GPTNeo) -> Tensor:
    """GPTNeoForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        h = m.embedding("wte", ids, V, E)
        positions = ops.unsqueeze(ops.add(tr.input((T,), I64, "arange"), 0), 0)
        # create_causal_mask: eager's (B, 1, T, T) (the class has no SDPA path: eager for
        # sdpa too); flash_attention_2's none
        mask = None if m.run.attention == "flash" else causal_mask(m, h)
        h = m.dropout(ops.add(h, m.embedding("wpe", positions, m["P"], E)), cfg.embed_dropout)
        h = m.layers("h", lambda x: _neo_block(m, cfg, x, mask), h,
                     () if mask is None else (mask,))
        h = m.layer_norm("ln_f", h)
    with m.module("lm_head"):
        w = m.tied("transformer.wte.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _neo_block(m: Builder, cfg: GPTNeo, h: Tensor, mask: Tensor | None) -> Tensor:
    """GPTNeoBlock.forward: pre-norm attention and MLP (c_fc, gelu_new, c_proj, dropout)."""
    h = ops.add(_neo_attention(m, cfg, m.layer_norm("ln_1", h), mask), h)
    with m.module("mlp"):
        x = new_gelu(m.linear("c_fc", m.layer_norm("ln_2", h), m["F"], True))
        x = m.dropout(m.linear("c_proj", x, m["E"], True), cfg.dropout)
    return ops.add(h, x)


def _neo_attention(m: Builder, cfg: GPTNeo, x: Tensor, mask: Tensor | None) -> Tensor:
    """GPTNeoSelfAttention.forward and _attn, as described above; _merge_heads (permute,
    contiguous, view), out_proj, resid_dropout. GPTNeoFlashAttention2.forward: Q, K, V
    transposed back to (B, T, H, dh) (views), _flash_attention_forward with softmax_scale
    1.0 and no window (a local layer's window lives in the eager path's bias buffer only:
    under flash_attention_2 every layer attends to all earlier tokens), the output reshaped
    to (B, T, E), out_proj, resid_dropout."""
    B, T, E, H, dh, P = m["B"], m["T"], m["E"], m["H"], m["dh"], m["P"]
    one = Dim.const(1)
    with m.module("attn"), m.module("attention"):
        q, k, v = (ops.permute(ops.view(m.linear(name, x, E, False), (B, T, H, dh)), (0, 2, 1, 3))
                   for name in ("q_proj", "k_proj", "v_proj"))
        if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
            k, v = (ops.cat([t], -2) for t in (k, v))
        if m.run.attention == "flash":
            out = ops.reshape(flash_attention_forward(m, q, k, v), (B, T, E))
            return m.dropout(m.linear("out_proj", out, E, True), cfg.dropout)
        assert mask is not None
        w = ops.matmul(ops.to(q, F32), ops.transpose(ops.to(k, F32), -1, -2))
        bias = m.trace.tensor((one, one, P, P), BOOL, False, "buffer", "bias")
        causal = ops.narrow(ops.narrow(bias, 2, 0, T), 3, 0, T)
        floor = m.trace.tensor((), F32, False)  # torch.tensor(finfo.min)
        w = ops.add(ops.where(causal, w, floor), mask)
        w = m.dropout(ops.to(ops.softmax(w), v.dtype), cfg.attention_dropout)
        out = ops.contiguous(ops.permute(ops.matmul(w, v), (0, 2, 1, 3)))
        out = m.linear("out_proj", ops.view(out, (B, T, E)), E, True)
        return m.dropout(out, cfg.dropout)


@dataclass(frozen=True)
class Mpt:
    """MptConfig's keys (d_model, n_heads, n_layers, max_seq_len as P; F = 4·E, MptMLP's
    width; dropout: attn_config.attn_pdrop). GPT-2's symbols."""

    V: int
    P: int
    E: int
    H: int
    L: int
    tied: bool = True
    dropout: float = 0.0

    @property
    def attention_dropout(self) -> float:  # (the scores' dropout is attn_pdrop too)
        return self.dropout

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "P": self.P, "E": self.E, "H": self.H, "dh": self.E // self.H,
                "F": 4 * self.E, "L": self.L}


def mpt_forward(m: Builder, cfg: Mpt) -> Tensor:
    """MptForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V, H, P = m["B"], m["T"], m["E"], m["V"], m["H"], m["P"]
    tr = m.trace
    one = Dim.const(1)
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        h = m.embedding("wte", ids, V, E)
        # build_mpt_alibi_tensor(H, max_seq_len): int32 positions times fp32 slopes, no grad
        alibi = tr.tensor((H, one, P), F32, False, name="alibi")
        with tr.no_grad():  # create_causal_mask(...).to(torch.bool)
            mask = ops.to(causal_mask(m, h), BOOL)
        h = m.layers("blocks", lambda x: _mpt_block(m, cfg, x, alibi, mask), h, (alibi, mask))
        h = _norm_no_bias(m, "norm_f", h)
    with m.module("lm_head"):
        w = m.tied("transformer.wte.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _norm_no_bias(m: Builder, name: str, x: Tensor) -> Tensor:
    """nn.LayerNorm with its bias set to None: the weight alone."""
    with m.module(name):
        return ops.layer_norm(x, m.param("weight", x.shape[-1]), None)


def _mpt_block(m: Builder, cfg: Mpt, h: Tensor, alibi: Tensor, mask: Tensor) -> Tensor:
    """MptBlock.forward: resid_attn_dropout(attn(norm_1(h))) + h; MptMLP(norm_2(h), h):
    down_proj(gelu(up_proj(x))), dropout, plus the residual."""
    a = _mpt_attention(m, cfg, _norm_no_bias(m, "norm_1", h), alibi, mask)
    h = ops.add(m.dropout(a, cfg.dropout), h)
    x = _norm_no_bias(m, "norm_2", h)
    with m.module("ffn"):
        x = m.linear("down_proj", ops.gelu(m.linear("up_proj", x, m["F"], False)), m["E"], False)
        return ops.add(m.dropout(x, cfg.dropout), h)


def _mpt_attention(m: Builder, cfg: Mpt, x: Tensor, alibi: Tensor, mask: Tensor) -> Tensor:
    """MptAttention.forward: Wqkv(x).chunk(3, dim=2), each reshaped (a view) to (B, T, H, dh)
    and transposed; Q·Kᵀ · softmax_scale plus the alibi's last T positions; masked_fill;
    softmax(scores.float()) cast to V's dtype; dropout; · V; permute, contiguous, view;
    out_proj."""
    B, T, E, H, dh, P = m["B"], m["T"], m["E"], m["H"], m["dh"], m["P"]
    with m.module("attn"):
        qkv = m.linear("Wqkv", x, 3 * (H * dh), False)
        q, k, v = (ops.transpose(ops.reshape(t, (B, T, H, dh)), 1, 2)
                   for t in ops.split(qkv, H * dh, 2))
        if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
            k, v = (ops.cat([t], -2) for t in (k, v))
        w = ops.mul(ops.matmul(q, ops.transpose(k, -1, -2)), dh.value ** -0.5)
        w = ops.add(w, ops.narrow(alibi, 2, P.value - T.value, T))
        w = ops.masked_fill(w, mask)
        w = m.dropout(ops.to(ops.softmax(ops.to(w, F32)), v.dtype), cfg.dropout)
        out = ops.contiguous(ops.permute(ops.matmul(w, v), (0, 2, 1, 3)))
        return m.linear("out_proj", ops.view(out, (B, T, E)), E, False)


@dataclass(frozen=True)
class GraniteSwa(llama.Llama):
    """GraniteSWAConfig's keys: Llama's. Its sliding layers' eager mask is another (B, 1, T,
    T) input the size of the causal one, kept by nothing, so every layer reads one mask."""


def granite_swa_forward(m: Builder, cfg: GraniteSwa) -> Tensor:
    """GraniteSWAForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = ops.mul(m.embedding("embed_tokens", ids, V, E), 1.0)  # · embedding_multiplier
        positions = tr.tensor((T,), I64, False)
        # one rotary_embs entry per distinct theta (one here), as LlamaRotaryEmbedding
        cos, sin = llama.rotary_tables(m, h)
        mask = causal_mask(m, h)
        h = m.layers("layers", lambda x: _granite_layer(m, cfg, x, cos, sin, mask), h,
                     (positions, cos, sin, mask))
        h = llama.rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(ops.div(logits, 1.0), ids, V)  # / logits_scaling


def _granite_layer(m: Builder, cfg: GraniteSwa, h: Tensor, cos: Tensor, sin: Tensor,
                   mask: Tensor) -> Tensor:
    """GraniteSWADecoderLayer.forward: h + attn(norm(h)) · residual_multiplier, then the
    MLP's output likewise."""
    with m.module("self_attn"):
        a = _granite_attention(m, cfg, llama.rms_norm(m, "input_layernorm", h), cos, sin, mask)
    h = ops.add(h, ops.mul(a, 1.0))
    x = llama.rms_norm(m, "post_attention_layernorm", h)
    return ops.add(h, ops.mul(llama._mlp(m, cfg, x), 1.0))


def _granite_attention(m: Builder, cfg: GraniteSwa, x: Tensor, cos: Tensor, sin: Tensor,
                       mask: Tensor) -> Tensor:
    """GraniteSWAAttention.forward with its eager_attention_forward: scores · scaling plus
    the mask; lse = logsumexp(scores); sink_scale = (lse - sinks.view(1, -1, 1)).to(fp32)
    .sigmoid(); softmax in fp32 cast back, dropout, · V; times
    sink_scale.unsqueeze(-1).to(the output's dtype); transposed, contiguous; o_proj."""
    B, T, H, Hkv, dh, G = m["B"], m["T"], m["H"], m["Hkv"], m["dh"], m["G"]

    def heads(name: str, n: Dim) -> Tensor:
        return ops.transpose(ops.view(m.linear(name, x, n * dh, False), (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H), heads("k_proj", Hkv), heads("v_proj", Hkv)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = (llama.apply_rotary(t, cos, sin) for t in (q, k))
    if m.use_cache:  # DynamicLayer.update: torch.cat onto the empty cache, a copy
        k, v = (ops.cat([t], -2) for t in (k, v))
    k, v = llama.repeat_kv(k, G), llama.repeat_kv(v, G)
    w = ops.add(ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), 1.0), mask)  # · scaling
    sinks = ops.view(m.param("sinks", H), (Dim.const(1), H, Dim.const(1)))
    scale = ops.sigmoid(ops.to(ops.sub(ops.logsumexp(w), sinks), F32))
    w = m.dropout(ops.to(ops.softmax(w, F32), q.dtype), cfg.attention_dropout)
    out = ops.matmul(w, v)
    out = ops.mul(out, ops.to(ops.unsqueeze(scale, -1), out.dtype))
    out = ops.contiguous(ops.transpose(out, 1, 2))
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], False)


def openai_forward(m: Builder, cfg: OpenAIGPT) -> Tensor:
    """OpenAIGPTLMHeadModel.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V, P = m["B"], m["T"], m["E"], m["V"], m["P"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("transformer"):
        # position_ids = self.position_ids[None, :T]: a view of the arange(P) buffer
        table = tr.tensor((P,), I64, False, "buffer", "position_ids")
        positions = ops.narrow(ops.unsqueeze(table, 0), 1, 0, T)
        h = m.embedding("tokens_embed", ops.view(ids, (B, T)), V, E)
        h = ops.add(h, m.embedding("positions_embed", positions, P, E))
        h = m.dropout(ops.add(h, 0), cfg.embd_pdrop)  # + token_type_embeds (0)
        h = m.layers("h", lambda x: _openai_block(m, cfg, x), h, (positions,))
    with m.module("lm_head"):
        w = m.tied("transformer.tokens_embed.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _openai_block(m: Builder, cfg: OpenAIGPT, x: Tensor) -> Tensor:
    """Block.forward: n = ln_1(x + attn(x)); ln_2(n + mlp(n)), the MLP c_fc, gelu_new,
    c_proj, dropout."""
    n = m.layer_norm("ln_1", ops.add(x, _openai_attention(m, cfg, x)))
    with m.module("mlp"):
        y = m.conv1d("c_fc", n, m["F"])
        y = m.dropout(m.conv1d("c_proj", new_gelu(y), m["E"]), cfg.resid_pdrop)
    return m.layer_norm("ln_2", ops.add(n, y))


def _openai_attention(m: Builder, cfg: OpenAIGPT, x: Tensor) -> Tensor:
    """Attention.forward and _attn: Q and V permuted to (B, H, T, dh), K to (B, H, dh, T);
    w = q @ k / sqrt(dh); b = the tril buffer's [:, :, :T, :T]; w * b + -1e4 * (1 - b);
    softmax; dropout; @ v; merge_heads (permute, contiguous, view); c_proj; dropout."""
    B, T, E, H, dh, P = m["B"], m["T"], m["E"], m["H"], m["dh"], m["P"]
    one = Dim.const(1)
    with m.module("attn"):
        qkv = m.conv1d("c_attn", x, 3 * (H * dh))
        q, k, v = (ops.view(t, (B, T, H, dh)) for t in ops.split(qkv, H * dh, 2))
        q, v = (ops.permute(t, (0, 2, 1, 3)) for t in (q, v))
        k = ops.permute(k, (0, 2, 3, 1))
        w = ops.div(ops.matmul(q, k), dh.value ** 0.5)
        bias = m.trace.tensor((one, one, P, P), x.dtype, False, "buffer", "bias")
        b = ops.narrow(ops.narrow(bias, 2, 0, T), 3, 0, T)
        off = ops.mul(ops.sub(b, 1.0), 1e4)  # -1e4 * (1 - b): no grad, nothing kept
        w = ops.add(ops.mul(w, b), off)
        w = m.dropout(ops.softmax(w), cfg.attn_pdrop)
        out = ops.contiguous(ops.permute(ops.matmul(w, v), (0, 2, 1, 3)))
        out = ops.view(out, (B, T, E))
        return m.dropout(m.conv1d("c_proj", out, E), cfg.resid_pdrop)
