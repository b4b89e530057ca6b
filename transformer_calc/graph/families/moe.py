"""Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE and PhiMoE as transformers 5.23 runs them: the Llama
graph (llama.py: attention, RMSNorm, RoPE; Qwen2-MoE's q/k/v biases, Qwen3-MoE's per-head
q_norm and k_norm, OLMoE's over the width, PhiMoE's nn.LayerNorm) with a sparse MoE block for
the MLP in the layers that carry experts.

models/mixtral/modeling_mixtral.py: MixtralSparseMoeBlock, MixtralTopKRouter (softmax of
the fp32 logits, topk, the top values renormalised in place, kept fp32), MixtralExperts
(3-D gate_up_proj and down_proj). models/qwen2_moe/modeling_qwen2_moe.py:
Qwen2MoeSparseMoeBlock (a shared expert, a Qwen2MoeMLP of shared_expert_intermediate_size,
scaled by sigmoid(shared_expert_gate(x)) and added to the experts' output),
Qwen2MoeTopKRouter (softmax(logits, dtype=float), topk, renormalised only with
norm_topk_prob, cast back to the logits' dtype); models/qwen3_moe/modeling_qwen3_moe.py: the
same router and experts without a shared expert (models/olmoe/modeling_olmoe.py: OLMoE's
too). models/phimoe/modeling_phimoe.py: PhimoeTopKRouter, an nn.Linear, and sparsemixer
(two experts per token, sampled in training) feeding the same experts. Both Qwen decoders
put a dense MLP of intermediate_size where `layer_idx in mlp_only_layers or (layer_idx + 1)
% decoder_sparse_step` (the pattern).

The experts run as `config._experts_implementation` says (integrations/moe.py):

- eager, the class's own forward: a loop over the experts hit, each taking its tokens
  (torch.where(expert_mask[e]): an int64 (n_e, 2) nonzero, its two columns views),
  hidden_states[token_idx] (a copy), linear with its slice of gate_up_proj, silu(gate) * up,
  linear with its slice of down_proj, times top_k_weights[token_idx, top_k_pos, None],
  cast to the hidden dtype and index_add_-ed into zeros.
- grouped_mm (grouped_mm_experts_forward): the K·B·T (token, expert) slots sorted by expert,
  hidden_states[perm // K] and the weights[perm] gathered, two grouped matmuls over the whole
  3-D weights with int32 offsets, the routing weights multiplied, weighted_out[inv_perm],
  summed over the K slots of each token and cast back.

Which token goes to which expert is data: n_e rows for expert e. Every tensor the loop saves
has n_e rows and a width that does not depend on e, so over the experts their bytes sum to
the same tensor with n = K·B·T rows: the graph runs the loop once, as one expert that takes
all K·B·T slots (every expert's slice of the weights is a view of the same parameter; the
FLOPs, 2·n_e·k·m per matmul, sum the same way). An idle expert runs nothing and saves
nothing, so the bytes do not depend on the routing (measured: tests/test_graph_moe.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from transformer_calc.graph import autocast, ops
from transformer_calc.graph.families import llama
from transformer_calc.graph.modules import Builder
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BOOL, F32, I32, I64, Tensor

ROUTERS = ("mixtral", "qwen", "sparsemixer")
SIGMOID_ROUTERS = ("hy_v3", "dots1", "beam", "minimax_m2")


@dataclass(frozen=True)
class Moe(llama.Llama):
    """A Llama-shaped decoder with experts. Symbols beside Llama's: X experts, K experts per
    token, Fe an expert's inner size, Fs the shared expert's (Qwen2-MoE; 1 without one).
    pattern: per layer D (a dense MLP of F) or E (experts); "" every layer E.
    router: "mixtral" (always renormalised, scores fp32), "qwen" (renormalised with
    norm_topk, scores cast to the model's dtype), "hunyuan" (qwen's, renormalised, its
    weight an nn.Linear, gate.wg) or "sparsemixer" (PhiMoE: two experts per token sampled
    in training, nn.Linear router). shared_expert: Qwen2-MoE's gated shared expert;
    shared_mlp: HunYuan's, ungated, run first on the block's input. grouped: the grouped_mm
    experts. router "hy_v3" (HYV3TopKRouter) and "dots1" (Dots1TopkRouter): DeepSeek-V3's
    sigmoid of fp32 logits, its top-k chosen with autograd on (sigmoid_router);
    shared_experts: their ungated MLP of Fs (n_shared · moe_intermediate_size) added after
    the experts (HYV3MoE, Dots1MoE, Cohere2MoeSparseMoeBlock); router "cohere2_moe": a
    softmax over the top-k logits (cohere.py's CohereMoe); router "aria" (AriaTextMoELayer,
    models/aria/modeling_aria.py): AriaTextTopKRouter, self.router, the same softmax in the
    logits' dtype, AriaExperts' weights stored transposed (X, E, 2·Fe) and (X, Fe, E), read
    by `@` (grouped_mm: is_transposed), and AriaSharedExpertsMLP (shared_experts, Fs)
    added after the experts."""

    X: int = 1
    K: int = 1
    Fe: int = 1
    Fs: int = 1
    pattern: str = ""
    router: str = "mixtral"
    norm_topk: bool = True
    shared_expert: bool = False
    shared_mlp: bool = False
    shared_experts: bool = False
    grouped: bool = False

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "X": self.X, "K": self.K, "Fe": self.Fe,
                "Fs": max(self.Fs, 1)}


def forward(m: Builder, cfg: Moe) -> Tensor:
    """MixtralForCausalLM / Qwen2MoeForCausalLM / Qwen3MoeForCausalLM.forward(input_ids=ids,
    labels=ids), output_router_logits off (the config's default: no auxiliary loss)."""
    return llama.forward(m, cfg, stack=lambda m, layer, h, extras: _stack(
        m, cfg, layer, h, extras))


def _stack(m: Builder, cfg: Moe, layer: Callable[[Tensor, llama.Mlp], Tensor], h: Tensor,
           extras: tuple[Tensor, ...]) -> Tensor:
    """The decoder layers: all sparse (traced until one repeats, L a symbol), or the
    pattern's layers one by one (L is then the pattern's length)."""

    router = "router" if cfg.router == "aria" else "gate"

    def sparse(x: Tensor) -> Tensor:
        return layer(x, lambda m, c, y: sparse_moe_block(m, cfg, y, router=router))

    if not cfg.pattern:
        return m.layers("layers", sparse, h, extras)
    for i, kind in enumerate(cfg.pattern):
        with m.module(f"layers.{i}"), m.trace.in_layer(i, (h, *extras)):
            h = sparse(h) if kind == "E" else layer(h, llama._mlp)
    return h


def sparse_moe_block(m: Builder, cfg: Moe, x: Tensor, name: str = "mlp",
                     router: str = "gate") -> Tensor:
    """MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock.forward
    (JambaSparseMoeBlock's: the module and its router named feed_forward and router)."""
    B, T, E = x.shape
    N = B * T
    with m.module(name):
        # HunYuanMoEV1Moe: hidden_states_mlp = self.shared_mlp(hidden_states), first
        # (Ernie4_5_MoeSparseMoeBlock: shared_output = self.shared_experts(hidden_states))
        ungated = llama._mlp(m, cfg, x, "shared_experts" if cfg.router == "ernie4_5_moe"
                             else "shared_mlp", "Fs") if cfg.shared_mlp else None
        flat = ops.view(x, (N, E))  # hidden_states.view(-1, hidden_dim)
        shared = (llama._mlp(m, cfg, flat, "shared_expert", "Fs") if cfg.shared_expert
                  else None)
        weights, chosen = (_sparsemixer(m, flat) if cfg.router == "sparsemixer"
                           else _topk_softmax_router(m, flat, router,
                                                     fp32=cfg.router == "cohere2_moe")
                           if cfg.router in ("cohere2_moe", "aria")
                           else sigmoid_router(m, cfg, flat, router)
                           if cfg.router in SIGMOID_ROUTERS
                           else _ernie_router(m, flat, router)
                           if cfg.router == "ernie4_5_moe"
                           else _router(m, cfg, flat, router))
        with m.module("experts"):
            run = grouped_experts if cfg.grouped else eager_experts
            out = run(m, flat, chosen, weights, transposed=cfg.router == "aria")
        if getattr(cfg, "shared_experts", False):  # (Jamba's config is not a Moe)
            out = _shared_experts(m, cfg, x, out)
        if shared is not None:
            # F.sigmoid(self.shared_expert_gate(x)) * shared_expert_output
            gate = ops.sigmoid(m.linear("shared_expert_gate", flat, Dim.const(1), False))
            out = ops.add(out, ops.mul(gate, shared))
        out = ops.reshape(out, (B, T, E))
        return out if ungated is None else ops.add(out, ungated)


def _topk_softmax_router(m: Builder, flat: Tensor, name: str = "gate", fp32: bool = True
                         ) -> tuple[Tensor, Tensor]:
    """Cohere2MoeTopKRouter.forward (expert_selection_fn softmax): router_logits =
    F.linear(hidden_states, self.weight); torch.topk(router_logits, top_k) (its values
    used: topk keeps the indices); F.softmax(router_scores, dim=1, dtype=torch.float),
    .to(hidden_states.dtype); AriaTextTopKRouter.forward (fp32 False): the softmax in the
    logits' dtype. Returns (scores, indices), (B·T, K) each."""
    with m.module(name):
        w = _as_read(m, [("weight", m.param("weight", m["X"], flat.shape[-1]), 1)],
                     scoped=False)["weight"]()
        values, indices = ops.topk(ops.linear(flat, w), m["K"])
        if not fp32:
            return ops.softmax(values), indices
        return ops.to(ops.softmax(values, F32), flat.dtype), indices


def _ernie_router(m: Builder, flat: Tensor, name: str = "gate") -> tuple[Tensor, Tensor]:
    """Ernie4_5_MoeTopKRouter.forward, autocast off: router_logits =
    F.linear(hidden_states.float(), self.weight.float()) (copies where the model is 16-bit);
    softmax(dim=1, dtype=float); the experts ranked on it + moe_statics'
    e_score_correction_bias (a frozen fp32 parameter) by torch.topk, only its indices used
    (the ranking keeps nothing, as sigmoid_router's); the probabilities gathered, divided by
    clamp(their sum, min=moe_norm_min), cast to the input's dtype. Returns (weights,
    indices), (B·T, K) each."""
    N, K = flat.shape[0], m["K"]
    with m.module(name), autocast.disabled(m.trace):
        w = _as_read(m, [("weight", m.param("weight", m["X"], flat.shape[-1]), 1)],
                     scoped=False)["weight"]()
        probs = ops.softmax(ops.linear(ops.to(flat, F32), ops.to(w, F32)), F32)
        with m.trace.no_grad():
            chosen = m.trace.tensor((N, K), I64, False)
        weights = ops.gather(probs, -1, chosen)
        total = ops.clamp(ops.sum_dim(weights, -1, keepdim=True))  # min=moe_norm_min
        weights = ops.div(weights, total)
    return ops.to(weights, flat.dtype), chosen


def _shared_experts(m: Builder, cfg: Moe, x: Tensor, routed: Tensor) -> Tensor:
    """The ungated shared experts added after the routed ones. HYV3MoE (its config's
    enable_moe_fp32_combine, on by default: spec_from_hf does not read it, and it keeps
    nothing either way): (routed_output.float() + self.shared_experts(hidden_states).float())
    .to(hidden_states.dtype) on the flattened tokens; Dots1MoE: the experts' output viewed
    back to (B, T, E) plus self.shared_experts(residuals)."""
    if cfg.router in ("dots1", "aria"):  # (AriaTextMoELayer: expert_output
        # .view(original_shape) + self.shared_experts(hidden_states.view(original_shape)))
        shared = llama._mlp(m, cfg, x, "shared_experts", "Fs")
        return ops.view(ops.add(ops.view(routed, x.shape), shared), routed.shape)
    flat = ops.view(x, routed.shape)
    shared = llama._mlp(m, cfg, flat, "shared_experts", "Fs")
    if cfg.router == "cohere2_moe":  # shared_expert_combination_strategy "average" (its
        # default; "sum" keeps nothing more): (final_hidden_states + shared_expert_output) / 2
        return ops.div(ops.add(routed, shared), 2.0)
    return ops.to(ops.add(ops.to(routed, F32), ops.to(shared, F32)), routed.dtype)


def sigmoid_router(m: Builder, cfg: Moe, flat: Tensor, name: str = "gate"
                   ) -> tuple[Tensor, Tensor]:
    """HYV3TopKRouter / Dots1TopkRouter.forward: router_logits = F.linear(hidden_states
    .float(), self.weight.float()); scores = sigmoid; the experts ranked on scores +
    e_score_correction_bias (Dots1's by n_group groups first: topk(2) of each group, summed,
    topk_group of them scattered into a mask, masked_fill(~mask, -inf)) with torch.topk, all
    with autograd on but only topk's indices used: every node of the ranking dies with its
    discarded values, nothing of it stays held (measured: tests/test_graph_moe_more.py), and
    the indices stay as gather's; the weights scores.gather(1, top_k_index) divided by their
    sum + 1e-20 (HYV3's always, a new tensor; Dots1's with norm_topk_prob, in place), times
    the scaling factor (a number). BeamTopKRouter: Dots1's. MiniMaxM2TopKRouter
    (models/minimax_m2/modeling_minimax_m2.py): F.linear(hidden_states.to(weight.dtype),
    weight), sigmoid(router_logits.float()), ranked on it + the block's
    e_score_correction_bias, the gathered weights divided by their sum in place, no
    scaling. Returns (fp32 weights, indices), (B·T, K) each."""
    N, X, K = flat.shape[0], m["X"], m["K"]
    with m.module(name):
        w = _as_read(m, [("weight", m.param("weight", X, flat.shape[-1]), 1)],
                     scoped=False)["weight"]()
        if cfg.router == "minimax_m2":
            scores = ops.sigmoid(ops.to(ops.linear(ops.to(flat, w.dtype), w), F32))
        else:
            scores = ops.sigmoid(ops.linear(ops.to(flat, F32), ops.to(w, F32)))
        with m.trace.no_grad():
            chosen = m.trace.tensor((N, K), I64, False)
        weights = ops.gather(scores, 1, chosen)
        if cfg.router == "minimax_m2":  # top_k_weights /= top_k_weights.sum(-1, keepdim)
            return ops.div_(weights, ops.sum_dim(weights, -1, keepdim=True)), chosen
        if cfg.router == "hy_v3" or cfg.norm_topk:
            total = ops.add(ops.sum_dim(weights, -1, keepdim=True), 1e-20)
            weights = ops.div(weights, total) if cfg.router == "hy_v3" else \
                ops.div_(weights, total)
        # (BeamTopKRouter leaves the scaling to BeamMoE, on the experts' output)
        return (weights if cfg.router == "beam" else ops.mul(weights, 1.0)), chosen


def _router(m: Builder, cfg: Moe, flat: Tensor, name: str = "gate"
            ) -> tuple[Tensor, Tensor]:
    """MixtralTopKRouter / Qwen2MoeTopKRouter.forward: logits = linear(x, weight); softmax
    over the experts in fp32; topk; the top values divided by their sum (in place);
    Qwen's cast back to the logits' dtype, Jamba's to the input's. Returns (scores,
    indices), (B·T, K) each."""
    with m.module(name):
        if cfg.router == "hunyuan":  # HunYuanMoEV1Gate: self.wg, an nn.Linear
            logits = m.linear("wg", flat, m["X"], False)
        else:
            w = m.param("weight", m["X"], flat.shape[-1])
            logits = ops.linear(flat, _as_read(m, [("weight", w, 1)],
                                               scoped=False)["weight"]())
        probs = ops.softmax(logits, F32)
        values, indices = ops.topk(probs, m["K"])
        if cfg.router == "mixtral" or cfg.norm_topk:
            values = ops.div_(values, ops.sum_dim(values, -1, keepdim=True))
        if cfg.router in ("qwen", "hunyuan"):
            values = ops.to(values, logits.dtype)
        elif cfg.router == "jamba":  # JambaTopKRouter: .to(hidden_states.dtype), fp32
            values = ops.to(values, flat.dtype)  # under autocast where the logits are not
    return values, indices


def _sparsemixer(m: Builder, flat: Tensor) -> tuple[Tensor, Tensor]:
    """PhimoeTopKRouter.forward (an nn.Linear, input jitter off) and sparsemixer in
    training (models/phimoe/modeling_phimoe.py), twice, for the first and the second
    expert: the logits masked where they fall too far below the best (a bool mask, no
    grad), an expert sampled (Gumbel, no grad: (B·T, 1) int64), softmax over the masked
    logits, its value at the sample gathered, and PhimoeMultiplier, a custom Function whose
    ctx.save_for_backward keeps that value, the sample and the softmax; the second round
    first scatters -inf at the first expert. Returns the (B·T, 2) multipliers and experts."""
    N, X = flat.shape[0], m["X"]
    scores = m.linear("router", flat, X, False)
    multipliers: list[Tensor] = []
    chosen: list[Tensor] = []
    masked = scores
    with m.module("router"):
        for k in range(2):
            if k:
                masked = ops.scatter(scores, chosen[0])
            with m.trace.no_grad():
                mask = m.trace.tensor((N, X), BOOL, False)
                expert = m.trace.tensor((N, Dim.const(1)), I64, False)
                for_one = m.trace.tensor((N, Dim.const(1)), scores.dtype, False)
            gates = ops.softmax(ops.masked_fill(masked, mask))
            picked = ops.gather(gates, -1, expert)
            out = m.trace.tensor(picked.shape, picked.dtype, False)  # multiplier * mask_for_one
            multipliers.append(ops.function("PhimoeMultiplier", [scores, picked, gates, for_one],
                                            [picked, expert, gates], out))
            chosen.append(expert)
    with m.trace.no_grad():
        experts = ops.cat(chosen, -1)
    return ops.cat(multipliers, -1), experts


def eager_experts(m: Builder, flat: Tensor, chosen: Tensor, weights: Tensor,
                  act: Callable[[Tensor], Tensor] = ops.silu, fp32_gate: bool = False,
                  apply_gate: Callable[[Tensor, Tensor], Tensor] | None = None,
                  transposed: bool = False) -> Tensor:
    """MixtralExperts.forward (the Qwen experts' is the same; Gemma4TextExperts' with
    act GELU), its loop over the experts hit run once for all n = K·B·T slots (module
    docstring). fp32_gate: the class's _apply_gate in fp32 (BeamExperts: _gate);
    apply_gate: a class's own _apply_gate(gate, up) (DeepseekV4Experts' clamps);
    transposed: AriaExperts' (in, out) slices, current_state @ self.gate_up_proj[e]."""
    gate_up, down = _expert_weights(m, flat.shape[-1], transposed)
    mm = ops.matmul if transposed else ops.linear
    n = chosen.shape[0] * chosen.shape[1]
    final = m.trace.tensor(flat.shape, flat.dtype, False)  # torch.zeros_like(hidden_states)
    with m.trace.no_grad():  # torch.where(expert_mask[expert_idx]): (top_k_pos, token_idx)
        pairs = m.trace.tensor((n, Dim.const(2)), I64, False)
    top_k_pos, token_idx = (ops.select(pairs, 1, j) for j in (0, 1))
    state = ops.index(flat, [token_idx])
    gate, up = ops.split(mm(state, _expert_slice(m, gate_up())), m["Fe"], -1)
    h = apply_gate(gate, up) if apply_gate else _gate(m, gate, up, act, fp32_gate)
    h = mm(h, _expert_slice(m, down()))
    h = ops.mul(h, ops.unsqueeze(ops.index(weights, [token_idx, top_k_pos]), -1))
    return ops.index_add_(final, token_idx, ops.to(h, final.dtype))


def _expert_slice(m: Builder, w: Tensor) -> Tensor:
    """self.gate_up_proj[expert_idx] (a view of the 3-D weight) as the loop's F.linear
    reads it. Under autocast F.linear casts it to the 16-bit dtype anew at every call:
    autocast's cache keeps only a parameter itself (autocast_mode.cpp cached_cast: a leaf
    that requires grad, not a view), so each expert hit gets a copy of its slice, which the
    matmul keeps where its input needs a gradient. Which experts are hit is routing: the
    graph takes every expert as hit (a batch of many more routed tokens than experts
    almost surely hits each, as the measured rows' did), so the copies are the X slices'
    (one storage here, their bytes summed)."""
    target = autocast.lower_precision(m.trace)
    if target is not None and w.dtype.floating and w.dtype != target:
        w = ops.to(w, target)
    return ops.select(w, 0, 0)


def grouped_experts(m: Builder, flat: Tensor, chosen: Tensor, weights: Tensor,
                    act: Callable[[Tensor], Tensor] = ops.silu, fp32_gate: bool = False,
                    apply_gate: Callable[[Tensor, Tensor], Tensor] | None = None,
                    transposed: bool = False) -> Tensor:
    """grouped_mm_experts_forward (integrations/moe.py), the weights not transposed
    (is_transposed False: weight.transpose(-2, -1), a view; transposed: AriaExperts', read
    as they are); act: the experts' act_fn; fp32_gate: the class's _apply_gate in fp32
    (_gate); apply_gate: a class's own."""
    X, E, Fe = m["X"], flat.shape[-1], m["Fe"]
    read_gate_up, read_down = _expert_weights(m, E, transposed)

    def t(w: Tensor) -> Tensor:
        return w if transposed else ops.transpose(w, -2, -1)

    N, K = chosen.shape
    n = N * K
    sample_weights = ops.reshape(weights, (n,))
    with m.trace.no_grad():
        # expert_ids_g, perm = torch.sort(expert_ids); perm // num_top_k (new int64 each);
        # offsets = cumsum(histc(...), dtype=int32)
        perm = m.trace.tensor((n,), I64, False)
        token_of = m.trace.tensor((n,), I64, False)
        offsets = m.trace.tensor((X,), I32, False)
    selected = ops.index(flat, [token_of])
    sample_weights = ops.index(sample_weights, [perm])
    # _grouped_mm(input.to(weight.dtype), weight, offs): the input is in the weights' dtype
    gate_up = read_gate_up()
    h = ops.grouped_mm(ops.to(selected, gate_up.dtype), t(gate_up), offsets)
    gate, up = ops.split(h, Fe, -1)  # self._apply_gate
    a = apply_gate(gate, up) if apply_gate else _gate(m, gate, up, act, fp32_gate)
    down = read_down()
    h = ops.grouped_mm(ops.to(a, down.dtype), t(down), offsets)
    weighted = ops.mul(h, ops.unsqueeze(sample_weights, -1))
    with m.trace.no_grad():  # inv_perm[perm] = arange(S)
        inv_perm = m.trace.tensor((n,), I64, False)
    weighted = ops.index(weighted, [inv_perm])
    out = ops.sum_dim(ops.view(weighted, (N, K, E)), 1)
    return ops.to(out, flat.dtype)


def _gate(m: Builder, gate: Tensor, up: Tensor, act: Callable[[Tensor], Tensor],
          fp32: bool) -> Tensor:
    """_default_apply_gate: act_fn(gate) * up; fp32 (BeamExperts._apply_gate):
    (act_fn(gate.float()) * up.float()).to(gate.dtype)."""
    if fp32:
        with m.module("act_fn"):
            a = act(ops.to(gate, F32))
        return ops.to(ops.mul(a, ops.to(up, F32)), gate.dtype)
    with m.module("act_fn"):
        a = act(gate)
    return ops.mul(a, up)


Read = Callable[[], Tensor]


def _expert_weights(m: Builder, E: Dim, transposed: bool = False) -> tuple[Read, Read]:
    """MixtralExperts' 3-D gate_up_proj (X, 2·Fe, E) and down_proj (X, E, Fe) as the
    forward reads them (transposed: AriaExperts' (X, E, 2·Fe) and (X, Fe, E)). peft 0.21
    wraps gate_up_proj first (its parameters' order), so
    down_proj's ParamWrapper is the outer one and registers first; gate_up_proj's adapter
    has twice the rank (gate and up fused: rank_pattern 2·r, alpha_pattern 2·alpha)."""
    X, Fe = m["X"], m["Fe"]
    gate_up = m.param("gate_up_proj", X, E, 2 * Fe) if transposed else \
        m.param("gate_up_proj", X, 2 * Fe, E)
    down = m.param("down_proj", X, Fe, E) if transposed else m.param("down_proj", X, E, Fe)
    reads = _as_read(m, [("down_proj", down, 1), ("gate_up_proj", gate_up, 2)])
    return reads["gate_up_proj"], reads["down_proj"]


def _as_read(m: Builder, weights: list[tuple[str, Tensor, int]], scoped: bool = True
             ) -> dict[str, Read]:
    """A module's parameters as its forward reads them: each itself, or, where peft wraps
    it (Lora.parameters), W plus its adapter's product as its ParamWrapper parametrises it
    (graph/lora.py): the wrappers register outermost first, each evaluating the
    parametrisation once to check it (the result dropped); the forward's first read
    evaluates it once more, the one cached for the forward. weights: (name, parameter,
    the adapter's rank factor), outermost first; scoped: each wrapper's ops in a scope of
    its parameter's name (the experts' two weights), else in the module's (the router's)."""
    lora = m.run.lora
    reads: dict[str, Read] = {}
    for name, w, k in weights:
        if lora is None or not lora.wraps(w.storage.name):
            reads[name] = functools.partial(_itself, w)
            continue
        scope = name if scoped else ""
        with _scope(m, scope):
            evaluate = _parametrisation(m, w, k)
            evaluate()  # register_parametrization's check
        reads[name] = _cached(m, scope, evaluate)
    return reads


def _itself(w: Tensor) -> Tensor:
    return w


def _parametrisation(m: Builder, w: Tensor, k: int) -> Read:
    """ParamWrapper._activate_lora: the adapter (nn.Linear's lora_A (in -> R·X) and
    lora_B (R·X -> out), R = k·r) and the parametrisation it registers: over several experts
    _LoraFactorsProxy, a baddbmm of the weight and the factors (made once); over one
    _LoraParameterProxy, W + delta (the delta made once)."""
    from transformer_calc.graph import lora as peft

    R = m["r"] * k
    if w.ndim == 3:
        X, out_f, in_f = w.shape
        with m.module("lora_A"):
            a = m.param("weight", R * X, in_f, adapter=True)
        with m.module("lora_B"):
            b = m.param("weight", out_f, R * X, adapter=True)
        lhs, rhs = peft.expert_factors(w, a, b, R)
        return lambda: peft.fold(w, lhs, rhs)
    out_f, in_f = w.shape
    with m.module("lora_A"):
        a = m.param("weight", R, in_f, adapter=True)
    with m.module("lora_B"):
        b = m.param("weight", out_f, R, adapter=True)
    delta = peft.delta_weight(w, a, b, m.sizes["r"] * k)
    return lambda: ops.add(w, delta)


def _cached(m: Builder, scope: str, evaluate: Read) -> Read:
    """parametrize.cached(): the first read evaluates, later reads get the same tensor."""
    memo: list[Tensor] = []

    def read() -> Tensor:
        if not memo:
            with _scope(m, scope):
                memo.append(evaluate())
        return memo[0]
    return read


def _scope(m: Builder, name: str) -> AbstractContextManager[None]:
    return m.module(name) if name else nullcontext()
