"""Switch Transformers as transformers 5.23 runs them:
models/switch_transformers/modeling_switch_transformers.py
(SwitchTransformersForConditionalGeneration, SwitchTransformersStack,
SwitchTransformersBlock, SwitchTransformersLayerFF, SwitchTransformersDenseActDense,
SwitchTransformersSparseMLP, SwitchTransformersTop1Router, SwitchTransformersExperts; the
attention, its relative position bias, the layer norm and the eager attention are T5's,
families/t5.py). Eager only: the model has no SDPA path (_supports_sdpa is False).

The forward is model(input_ids=ids, labels=ids) as T5's (t5.forward), with
output_router_logits off (the forward's default: no router z-loss, no auxiliary loss, as
the Trainer runs it). Each stack makes attention_mask = torch.ones(B, T) (no mask given):
the encoder's (1 - mask[:, None, None, :]) · min in the embeddings' dtype, (B, 1, 1, T), the
decoder's create_causal_mask, (B, 1, T, T) under eager; added to the scores, kept by nothing.

A sparse layer's MLP (layer i of a stack is sparse when i % step == 1, or step is 1;
spec_from_hf lays them out, kinds_e and kinds_d) routes each token to one expert:
SwitchTransformersTop1Router casts its input to router_dtype (float32: the model's fp32
input is itself), multiplies it in place by uniform noise in training where
router_jitter_noise > 0 (the multiply keeps the noise; over an fp32 model the experts then
read the jittered tensor), casts its classifier to fp32 (Module.to: its parameters become
fp32), the fp32 softmax cast back to the input's dtype, argmax, one_hot, cumsum and the
capacity mask (integer ops, no gradient), and the top probability (max.dim keeps its
int64 indices). SwitchTransformersExperts loops over the experts hit: each takes its tokens
(torch.where over its one-hot column: an int64 (n_e, 2) nonzero, its columns views),
hidden_states[None, top_x] (a copy), its SwitchTransformersDenseActDense (wi, act, dropout,
wo), times routing_weights[top_x, idx, None], index_add_ into zeros. As in
families/moe.py, every tensor the loop saves has n_e rows and a width independent of the
expert, so the graph runs it once as expert_0 over all B·T tokens (each token one expert);
the other experts' linears are built idle (their parameters, peft's adapters). Tokens an
expert takes beyond expert_capacity per sequence are dropped by the router (data: not
modelled; with T <= expert_capacity none can be), so past it the graph counts every token
(an upper bound)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import t5
from transformer_calc.graph.modules import Builder, causal_mask
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class Switch(t5.T5):
    """T5's fields (t5.T5: relative bias in the first layer, the decoder's output rescaled
    before the tied head, not gated) and the experts': X num_experts (a field, not a
    symbol: the idle experts are built one by one), kinds_e and kinds_d each stack's
    layers (D dense, E sparse), router_bias, jitter (router_jitter_noise > 0)."""

    X: int = 1
    kinds_e: str = ""
    kinds_d: str = ""
    router_bias: bool = False
    jitter: bool = True


def forward(m: Builder, cfg: Switch) -> Tensor:
    """SwitchTransformersForConditionalGeneration.forward(input_ids=ids, labels=ids): T5's
    (t5.forward) with Switch's stacks."""
    if m.run.attention != "eager":
        raise ValueError("Switch Transformers run eager attention only (_supports_sdpa is "
                         "False in transformers 5.23)")
    return t5.forward(m, cfg, stack=_stack)


def _stack(m: Builder, cfg: t5.T5, ids: Tensor, shared: Tensor, enc: Tensor | None
           ) -> Tensor:
    """SwitchTransformersStack.forward: embed_tokens (the shared table), the stack's mask,
    dropout, the blocks (the first computes the position biases the others are passed),
    the final layer norm, dropout."""
    assert isinstance(cfg, Switch)
    decoder = enc is not None
    x = ops.embedding(shared, ids)
    one = Dim.const(1)
    mask = causal_mask(m, x) if decoder else \
        m.trace.input((m["B"], one, one, m["T"]), x.dtype, "extended_attention_mask")
    h = m.dropout(x, cfg.dropout)
    biases: list[Tensor] = []

    def block(x: Tensor, kind: str) -> Tensor:  # SwitchTransformersBlock.forward
        first = kind.islower()  # the stack's first block: has_relative_attention_bias
        with m.module("layer.0"):
            x, bias = t5._self_attention(m, cfg, x, mask, None if first else biases[0],
                                         decoder)
        cross = None
        if enc is not None:
            with m.module("layer.1"):
                x, cross = t5._cross_attention(m, cfg, x, enc, None if first else biases[1])
        if first:
            biases.extend([bias] if cross is None else [bias, cross])
        with m.module("layer.2" if decoder else "layer.1"):
            return _layer_ff(m, cfg, x, kind in "eE")

    def extras(kind: str) -> tuple[Tensor, ...]:  # what a block is called with besides h
        passed = () if kind.islower() else tuple(biases)
        return tuple(t for t in (mask, enc, *passed) if t is not None)

    kinds = cfg.kinds_d if decoder else cfg.kinds_e
    h = m.layers_by_kind("block", kinds[0].lower() + kinds[1:], block, h, extras,
                         count="Ld" if decoder else "Le")
    h = t5.t5_layer_norm(m, "final_layer_norm", h)
    return m.dropout(h, cfg.dropout)


def _layer_ff(m: Builder, cfg: Switch, h: Tensor, sparse: bool) -> Tensor:
    """SwitchTransformersLayerFF.forward: layer_norm, mlp (SparseMLP or DenseActDense),
    h + dropout(output)."""
    x = t5.t5_layer_norm(m, "layer_norm", h)
    with m.module("mlp"):
        y = _sparse_mlp(m, cfg, x) if sparse else _dense_act_dense(m, cfg, x)
    return ops.add(h, m.dropout(y, cfg.dropout))


def _dense_act_dense(m: Builder, cfg: Switch, x: Tensor) -> Tensor:
    """SwitchTransformersDenseActDense.forward: wo(dropout(act(wi(x)))) (the cast to wo's
    dtype a no-op: the model is one dtype)."""
    F, E = m["F"], m["E"]
    y = t5.ACTIVATIONS[cfg.act](m.linear("wi", x, F, False))
    return m.linear("wo", m.dropout(y, cfg.dropout), E, False)


def _sparse_mlp(m: Builder, cfg: Switch, x: Tensor) -> Tensor:
    """SwitchTransformersSparseMLP.forward: the router on the (B, T, E) states, the experts
    on them viewed (B·T, E) with the routing weights viewed (B·T, 1), reshaped back."""
    B, T, E = x.shape
    with m.module("router"):
        weights, x = _router(m, cfg, x)
    flat = ops.view(x, (B * T, E))
    with m.module("experts"):
        out = _experts(m, cfg, flat, ops.view(weights, (B * T, Dim.const(1))))
    return ops.reshape(out, (B, T, E))


def _router(m: Builder, cfg: Switch, x: Tensor) -> tuple[Tensor, Tensor]:
    """SwitchTransformersTop1Router.forward in training. Returns the (B, T, 1) top
    probabilities and the states the experts read (x, jittered in place where the cast to
    fp32 was x itself)."""
    h = ops.to(x, F32)
    if cfg.jitter:  # hidden_states *= torch.empty_like(hidden_states).uniform_(...)
        with m.trace.no_grad():
            noise = m.trace.tensor(h.shape, h.dtype, False)
        h = ops.mul_(h, noise)
        if h.storage is x.storage:
            x = h
    # self.classifier = self.classifier.to(float32): a 16-bit model's classifier gets new
    # fp32 parameters in the forward (measured as saved: F.linear keeps the weight for
    # its input's gradient; from then on they are the model's parameters)
    logits = m.linear("classifier", h, Dim.const(cfg.X), cfg.router_bias, cast=F32)
    probs = ops.to(ops.softmax(logits, F32), x.dtype)
    # argmax, one_hot, cumsum, <= expert_capacity, the product: integer, no gradient
    return ops.max_dim(probs), x  # torch.max(router_probs, dim=-1).values.unsqueeze(-1)


def _experts(m: Builder, cfg: Switch, flat: Tensor, weights: Tensor) -> Tensor:
    """SwitchTransformersExperts.forward, its loop run once for all B·T tokens (module
    docstring) by expert_0; the other experts' linears idle."""
    N, E = flat.shape
    final = m.trace.tensor(flat.shape, flat.dtype, False)  # torch.zeros_like(hidden_states)
    with m.trace.no_grad():  # torch.where(expert_mask[expert_idx].squeeze(0)): (idx, top_x)
        pairs = m.trace.tensor((N, Dim.const(2)), I64, False)
    idx, top_x = (ops.select(pairs, 1, j) for j in (0, 1))
    state = ops.index(flat, [top_x])  # hidden_states[None, top_x].reshape(-1, E)
    with m.module("expert_0"):
        y = _dense_act_dense(m, cfg, state)
    for i in range(1, cfg.X):
        with m.module(f"expert_{i}"):
            m.idle_linear("wi", E, m["F"], False)
            m.idle_linear("wo", m["F"], E, False)
    y = ops.mul(y, ops.unsqueeze(ops.index(weights, [top_x, idx]), -1))
    return ops.index_add_(final, top_x, ops.to(y, final.dtype))
