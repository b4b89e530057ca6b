"""MiniMax as transformers 5.23 runs it on the CPU: models/minimax/modeling_minimax.py
(MiniMaxForCausalLM, MiniMaxModel, MiniMaxDecoderLayer, MiniMaxRMSNorm, MiniMaxAttention:
Llama's, MiniMaxLightningAttention.forward without a cache: its Python loop over blocks of
block_size tokens, MiniMaxSparseMoeBlock with MiniMaxTopKRouter and MiniMaxExperts:
Mixtral's, families/moe.py). Each layer normalises its input first and adds the sublayer to
the normalised input (residual · alpha + output · beta, the factors 1); every layer's FFN is
the experts.

The lightning loop runs ceil(T / Q) blocks of small ops; each keeps what its matmuls need
(their copies of the block's Q, K, V and decayed Q, K, the masked scores, the state entering
it), so the graph traces the first block, one that stands for the full blocks after it
(Trace.loop, Trace.repeat) and the last, which may be shorter; its new state is returned to
the layer, which drops it: what only that state's ops save is freed with it."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import llama, moe
from transformer_calc.graph.modules import Builder, causal_lm_loss, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import I64, Tensor


@dataclass(frozen=True)
class Minimax:
    """MiniMaxConfig's sizes. Symbols: V, E, H, Hkv, dh, L, G = H / Hkv as Llama's (the
    lightning layers' heads and head_dim the same H and dh); X experts, K per token, Fe
    intermediate_size (each expert's); Q block_size; the run adds Tq, the blocks (T / Q
    rounded up). kinds: each layer's, "F" attention or "M" lightning attention
    (layer_types). The fields moe.sparse_moe_block reads: Mixtral's router, renormalised."""

    V: int
    E: int
    H: int
    Hkv: int
    dh: int
    L: int
    X: int
    K: int
    Fe: int
    Q: int
    kinds: str
    tied: bool = False
    grouped: bool = False
    router: str = "mixtral"
    norm_topk: bool = True
    shared_expert: bool = False
    shared_mlp: bool = False

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "E": self.E, "H": self.H, "Hkv": self.Hkv, "dh": self.dh,
                "L": self.L, "G": self.H // self.Hkv, "X": self.X, "K": self.K,
                "Fe": self.Fe, "Q": self.Q}

    @property
    def mixers(self) -> str:
        """Each layer's attention, F or M (names.py's first norms)."""
        return self.kinds


def forward(m: Builder, cfg: Minimax) -> Tensor:
    """MiniMaxForCausalLM.forward(input_ids=ids, labels=ids, use_cache=False),
    output_router_logits off (the config's default: no auxiliary loss)."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = m.embedding("embed_tokens", ids, V, E)
        # position_ids = arange(T).unsqueeze(0); causal_mask_mapping: create_causal_mask
        # (sliding_window None) for full attention, create_recurrent_attention_mask (None
        # without padding) for the lightning layers; cos and sin once
        positions = tr.tensor((T,), I64, False)
        mask = causal_mask(m, h) if m.run.attention == "eager" else None
        cos, sin = llama.rotary_tables(m, h)

        def extras(kind: str) -> tuple[Tensor, ...]:
            return (positions, cos, sin) + ((mask,) if kind == "F" and mask is not None
                                            else ())

        def layer(x: Tensor, kind: str) -> Tensor:
            return _layer(m, cfg, x, kind, cos, sin, mask)

        h = m.layers_by_kind("layers", cfg.kinds, layer, h, extras)
        h = llama.rms_norm(m, "norm", h)
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = m.lm_head_lora(h, ops.linear(h, w), V)
    return causal_lm_loss(logits, ids, V)


def _layer(m: Builder, cfg: Minimax, h: Tensor, kind: str, cos: Tensor, sin: Tensor,
           mask: Tensor | None) -> Tensor:
    """MiniMaxDecoderLayer.forward: input_layernorm, the residual its output; attention or
    lightning attention; residual · alpha + output · beta (Python numbers: new tensors
    that keep nothing); post_attention_layernorm, the experts, the same sum."""
    h = llama.rms_norm(m, "input_layernorm", h)
    with m.module("self_attn"):
        y = _attention(m, h, cos, sin, mask) if kind == "F" else lightning(m, h)
    h = ops.add(ops.mul(h, 1.0), ops.mul(y, 1.0))
    h = llama.rms_norm(m, "post_attention_layernorm", h)
    y = moe.sparse_moe_block(m, cfg, h)  # type: ignore[arg-type]
    return ops.add(ops.mul(h, 1.0), ops.mul(y, 1.0))


def _attention(m: Builder, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None
               ) -> Tensor:
    """MiniMaxAttention.forward: Llama's (no biases, dropout 0 in the config)."""
    B, T, H, Hkv, dh = m["B"], m["T"], m["H"], m["Hkv"], m["dh"]

    def heads(name: str, n: Dim) -> Tensor:
        return ops.transpose(ops.view(m.linear(name, x, n * dh, False), (B, T, n, dh)), 1, 2)

    q, k, v = heads("q_proj", H), heads("k_proj", Hkv), heads("v_proj", Hkv)
    cos, sin = ops.unsqueeze(cos, 1), ops.unsqueeze(sin, 1)
    q, k = llama.apply_rotary(q, cos, sin), llama.apply_rotary(k, cos, sin)
    G, scaling = m["G"], float(dh.value) ** -0.5
    if mask is not None:
        out = llama.eager_attention(m, q, llama.repeat_kv(k, G), llama.repeat_kv(v, G), mask,
                                    dropout=0.0, scaling=scaling)
    else:
        out = llama.sdpa_attention(q, k, v, G, dropout=0.0, scaling=scaling)
    out = ops.contiguous(ops.reshape(out, (B, T, H * dh)))
    return m.linear("o_proj", out, m["E"], False)


def lightning(m: Builder, x: Tensor) -> Tensor:
    """MiniMaxLightningAttention.forward without a cache: silu(qkv_proj(x)) reshaped to
    (B, T, H, 3·dh), split into Q, K, V (views), transposed; the blocks (_blocks); the
    outputs concatenated (a new tensor), transposed and reshaped (a copy); norm (an RMSNorm
    over H·dh); sigmoid(output_gate(x)) times it; out_proj."""
    B, T, H, dh, E = m["B"], m["T"], m["H"], m["dh"], m["E"]
    qkv = ops.silu(m.linear("qkv_proj", x, 3 * H * dh, False))
    qkv = ops.reshape(qkv, (B, T, H, 3 * dh))
    q, k, v = (ops.transpose(t, 1, 2) for t in ops.split(qkv, dh, 3))
    out = _blocks(m, q, k, v)
    out = ops.reshape(ops.transpose(out, 1, 2), (B, T, H * dh))
    out = llama.rms_norm(m, "norm", out)
    gate = ops.sigmoid(m.linear("output_gate", x, H * dh, False))
    return m.linear("out_proj", ops.mul(gate, out), E, False)


def _blocks(m: Builder, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The loop over blocks (q, k, v (B, H, T, dh) views): the buffers slope_rate (H, 1, 1),
    query_decay and key_decay (H, Q, 1), diagonal_decay (1, H, Q, Q), in the model's dtype
    (fp32 under autocast over fp32 weights); the state zeros (B, H, dh, dh) in V's; per
    block _block. Returns the outputs concatenated."""
    B, T, H, dh, Q, Tq = m["B"], m["T"], m["H"], m["dh"], m["Q"], m["Tq"]
    tr, one = m.trace, Dim.const(1)

    def buffer(name: str, *shape: Dim) -> Tensor:
        return tr.tensor(shape, m.run.dtype, False, "buffer", f"{tr.scope}.{name}")

    decays = (buffer("slope_rate", H, one, one), buffer("query_decay", H, Q, one),
              buffer("key_decay", H, Q, one), buffer("diagonal_decay", one, H, Q, Q))
    # the last block's length: T − (Tq − 1)·Q (Q where Q divides T)
    last = T + Q + Dim(-(Tq * Q).value, -(Tq * Q).poly)
    rg = q.requires_grad
    with tr.loop():
        state = tr.tensor((B, H, dh, dh), v.dtype, False)  # torch.zeros
        if Tq.value > 1:
            state, out = _block(m, q, k, v, decays, state, 0, Q, True)
            if Tq.value > 2:
                with tr.repeat(Tq + (-2)):
                    state, out = _block(m, q, k, v, decays, state, Q.value, Q, True)
        # (its new state dropped with the layer's second output)
        _, out = _block(m, q, k, v, decays, state, (Tq.value - 1) * Q.value, last, False)
    return ops.stack_new(out, (B, H, T, dh), rg)  # torch.cat(attn_output, dim=-2)


def _block(m: Builder, q: Tensor, k: Tensor, v: Tensor, decays: tuple[Tensor, ...],
           state: Tensor, start: int, n: Dim, kept: bool) -> tuple[Tensor, Tensor]:
    """One block of n tokens from start: Q·Kᵀ times diagonal_decay's corner, times V; Q
    times query_decay's first n rows, times the state entering; their sum the block's
    output; the next state: state · exp(-slope_rate · n) + (K · key_decay's last n
    rows)ᵀ · V. kept: whether the next state is used (else it is made without the ops that
    keep anything for it: freed with it)."""
    slope, query_decay, key_decay, diagonal = decays
    Q = m["Q"]
    cq, ck, cv = (ops.narrow(t, 2, start, n) for t in (q, k, v))
    cqd = ops.narrow(query_decay, 1, 0, n)
    ckd = ops.narrow(key_decay, 1, Q.value - n.value, n)
    cdd = ops.narrow(ops.narrow(diagonal, 2, 0, n), 3, 0, n)
    scores = ops.matmul(cq, ops.transpose(ck, -1, -2))
    intra = ops.matmul(ops.mul(scores, cdd), cv)
    inter = ops.matmul(ops.mul(cq, cqd), state)
    out = ops.add(inter, intra)
    tr = m.trace
    with tr.no_grad() if not kept else nullcontext():
        block_decay = ops.exp(ops.mul(ops.neg(slope), 1.0))  # · n, a Python int
        update = ops.matmul(ops.transpose(ops.mul(ck, ckd), -1, -2), cv)
        state = ops.add(ops.mul(state, block_decay), update)
    return state, out
