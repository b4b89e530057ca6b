"""Gemma 3n's text decoder as transformers 5.23 runs it: models/gemma3n/modeling_gemma3n.py
(Gemma3nForCausalLM, Gemma3nTextModel, Gemma3nTextDecoderLayer, Gemma3nTextAltUp,
Gemma3nTextLaurelBlock, Gemma3nTextMLP, Gemma3nTextAttention, Gemma3nRMSNorm). Gemma 4's
attention (K/V sharing over the last layers, q/k/v norms, scaling 1; every layer of one
head dim), norms and per-layer inputs (families/gemma4.py), with:

- AltUp over `streams` copies of the hidden state: the embeddings projected to the others
  (altup_projections), each rescaled to the embeddings' RMS magnitude (sqrt of a clamped
  mean square), stacked (N, B, T, E); per layer, predict (a router over stream 0:
  router_norm, times a 0-d buffer, modality_router, tanh in fp32; prediction_coefs to N²
  coefficients; the streams permuted and multiplied by them, plus the streams, made
  contiguous), the sublayers on stream 0, then correct (the router over the layer's
  output, the innovation repeated over the streams, times correction_coefs applied with
  its clamped weight via F.linear, plus the predictions); after the layers the streams
  projected back (altup_unembed_projections), rescaled, stacked and averaged.
- LAuReL beside the attention: linear_left, linear_right, post_laurel_norm, plus its input;
  the attention's and LAuReL's sums divided by √2.
- the first sparse layers' FFN gate: relu(gate - (mean + std · z)), z a 0-d tensor the
  product keeps (the normal's icdf at the target sparsity, cast to the gate's dtype).
- the corrected stream 0, cloned and scaled by correct_output_scale, gates the per-layer
  input; the result is added to the other streams in place (nothing kept).

In-place updates (predictions += ..., corrected += ..., corrected[1:] += ...) are written
as new tensors: the storages they update are kept by no op, so nothing held changes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from transformer_calc.graph import ops
from transformer_calc.graph.families import gemma, gemma4
from transformer_calc.graph.families.gemma4 import attention, norm, per_layer_inputs
from transformer_calc.graph.families.llama import attention_mask, rotary_tables
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor


@dataclass(frozen=True)
class Gemma3n(gemma4.Gemma4):
    """Gemma 4's fields (dg = dh, Hg = Hkv; per-layer inputs always) and Gemma 3n's:
    streams (altup_num_inputs, a flag: the streams are separate tensors), R LAuReL's rank,
    sparse the first layers with a sparsified FFN gate."""

    streams: int = 2
    R: int = 1
    sparse: int = 0

    global_dims: ClassVar[bool] = False

    def sizes(self) -> dict[str, int]:
        return super().sizes() | {"R": self.R}

    def sparse_layers(self) -> int:
        return self.sparse


def forward(m: Builder, cfg: Gemma3n) -> Tensor:
    """Gemma3nForCausalLM.forward(input_ids=ids, labels=ids): the loss."""
    B, T, E, V = m["B"], m["T"], m["E"], m["V"]
    tr = m.trace
    ids = tr.input((B, T), I64, "input_ids")
    with m.module("model"):
        h = gemma.scaled_embedding(m, "embed_tokens", ids, V, E)
        pli = per_layer_inputs(m, ids, h, buffers=True)
        positions = tr.tensor((T,), I64, False)
        present = sorted(set(cfg.kinds))
        masks = {k: attention_mask(m, h, k, cfg.window) for k in present}
        streams = _altup_in(m, cfg, h)
        tables = {k: rotary_tables(m, streams) for k in present}
        shared: dict[str, tuple[Tensor, Tensor]] = {}

        def extras(letter: str) -> tuple[Tensor, ...]:
            kind, mode, _ = gemma4.DECODE[letter]
            mask = masks[kind]
            return ((positions, *tables[kind]) + (() if mask is None else (mask,)) + (pli,)
                    + (shared[kind] if mode == "reuse" else ()))

        def layer(x: Tensor, letter: str) -> Tensor:
            kind, mode, sparse = gemma4.DECODE[letter]
            mine = ops.select(pli, 2, m.trace.layer or 0)  # per_layer_inputs[:, :, i, :]
            return _layer(m, cfg, x, (kind, mode, sparse), tables[kind], masks[kind], shared,
                          mine)

        h = m.layers_by_kind("layers", cfg.letters(), layer, streams, extras)
        h = norm(m, "norm", _altup_out(m, cfg, h))
    with m.module("lm_head"):
        w = m.tied("model.embed_tokens.weight") if cfg.tied else m.param("weight", V, E)
        logits = ops.linear(h, w)
    if cfg.final_softcap:  # logits / cap, tanh, * cap
        logits = ops.mul(ops.tanh(ops.div(logits, cfg.final_softcap)), cfg.final_softcap)
    return causal_lm_loss(logits, ids, V)


def _magnitude(x: Tensor) -> Tensor:
    """torch.mean(x ** 2, dim=-1, keepdim=True) ** 0.5 (each pow keeps its input)."""
    return ops.pow(ops.mean(ops.pow(x, 2.0)), 0.5)


def _rescaled(x: Tensor, target: Tensor) -> Tensor:
    """x * target_magnitude / sqrt(mean(x ** 2).clamp(min=1e-5))."""
    new = ops.sqrt(ops.clamp(ops.mean(ops.pow(x, 2.0))))
    return ops.div(ops.mul(x, target), new)


def _stack(ts: list[Tensor]) -> Tensor:
    """torch.stack(ts, dim=0): a new contiguous tensor, nothing kept (as cat's)."""
    return ops.cat([ops.unsqueeze(t, 0) for t in ts], 0)


def _altup_in(m: Builder, cfg: Gemma3n, h0: Tensor) -> Tensor:
    """Gemma3nTextModel.forward before the layers: the streams, (N, B, T, E)."""
    target = _magnitude(h0)
    out = [h0]
    for i in range(1, cfg.streams):
        x = m.linear(f"altup_projections.{i - 1}", h0, m["E"], False)
        out.append(_rescaled(ops.to(x, h0.dtype), target))
    return _stack(out)


def _altup_out(m: Builder, cfg: Gemma3n, h: Tensor) -> Tensor:
    """Gemma3nTextModel.forward after the layers: the streams projected back, rescaled to
    stream 0's magnitude, stacked and averaged (mean over dim 0: nothing kept)."""
    first = ops.select(h, 0, 0)
    target = _magnitude(first)
    out = [first]
    for i in range(1, cfg.streams):
        x = m.linear(f"altup_unembed_projections.{i - 1}", ops.select(h, 0, i), m["E"],
                     False)
        out.append(_rescaled(ops.to(x, first.dtype), target))
    mean = ops.mean(_stack(out), 0)
    return ops.view(mean, mean.shape[1:])


def _modalities(m: Builder, cfg: Gemma3n, x: Tensor) -> Tensor:
    """Gemma3nTextAltUp.compute_router_modalities: tanh(modality_router(router_norm(x) *
    router_input_scale).float()).type_as(x); the scale a 0-d buffer."""
    scale = m.trace.tensor((), m.run.dtype, False, "buffer",
                           f"{m.trace.scope}.router_input_scale")
    r = ops.mul(norm(m, "router_norm", x), scale)
    routed = m.linear("modality_router", r, Dim.const(cfg.streams), False)
    return ops.to(ops.tanh(ops.to(routed, F32)), x.dtype)


def _predict(m: Builder, cfg: Gemma3n, streams: Tensor) -> Tensor:
    """Gemma3nTextAltUp.predict (prediction_coefs' weight clamped through .data: no op)."""
    N = Dim.const(cfg.streams)
    B, T = streams.shape[1], streams.shape[2]
    modalities = _modalities(m, cfg, ops.select(streams, 0, 0))
    coefs = m.linear("prediction_coefs", modalities, N * N, False)
    coefs = ops.permute(ops.reshape(coefs, (B, T, N, N)), (0, 1, 3, 2))
    pred = ops.matmul(ops.permute(streams, (1, 2, 3, 0)), coefs)
    pred = ops.add(ops.permute(pred, (3, 0, 1, 2)), streams)  # predictions += hidden_states
    return ops.contiguous(pred)


def _correct(m: Builder, cfg: Gemma3n, predictions: Tensor, activated: Tensor) -> Tensor:
    """Gemma3nTextAltUp.correct in training (altup_coef_clip set): F.linear(modalities,
    correction_coefs.weight.clamp(...)) + 1.0, the module's weight read directly (a LoRA
    adapter around correction_coefs has parameters but never runs)."""
    N = Dim.const(cfg.streams)
    modalities = _modalities(m, cfg, activated)
    innovation = ops.sub(activated, ops.select(predictions, 0, 0))
    innovation = _stack([innovation] * cfg.streams)  # .repeat(N, 1, 1, 1): nothing kept
    with m.module("correction_coefs"):
        w = m.param("weight", N, N)
        lora = m.run.lora
        if lora is not None and lora.adapts(m.trace.scope):
            with m.module("lora_A"):
                m.param("weight", m["r"], N, adapter=True)
            with m.module("lora_B"):
                m.param("weight", N, m["r"], adapter=True)
        coefs = ops.add(ops.linear(modalities, ops.clamp(w)), 1.0)
    coefs = ops.unsqueeze(ops.permute(coefs, (2, 0, 1)), -1)
    return ops.add(ops.mul(innovation, coefs), predictions)  # corrected += predictions


def _mlp(m: Builder, x: Tensor, sparse: bool) -> Tensor:
    """Gemma3nTextMLP.forward, _gaussian_topk on the gate where the layer is sparse."""
    F = m["F"]
    with m.module("mlp"):
        gate = m.linear("gate_proj", x, F, False)
        if sparse:
            with m.trace.no_grad():  # normal_dist.icdf(target).type(inputs.dtype)
                z = ops.to(m.trace.tensor((), F32, False), gate.dtype)
            cutoff = ops.add(ops.mean(gate), ops.mul(ops.std(gate), z))
            gate = ops.relu(ops.sub(gate, cutoff))
        up = m.linear("up_proj", x, F, False)
        return m.linear("down_proj", ops.mul(ops.gelu(gate), up), m["E"], False)


def _layer(m: Builder, cfg: Gemma3n, streams: Tensor, letter: tuple[str, str, bool],
           rope: tuple[Tensor, Tensor], mask: Tensor | None,
           shared: dict[str, tuple[Tensor, Tensor]], pli: Tensor) -> Tensor:
    """Gemma3nTextDecoderLayer.forward."""
    kind, mode, sparse = letter
    E = m["E"]
    with m.module("altup"):
        predictions = _predict(m, cfg, streams)
    active = ops.select(predictions, 0, 0)
    x = norm(m, "input_layernorm", active)
    with m.module("laurel"):  # Gemma3nTextLaurelBlock
        lr = m.linear("linear_right", m.linear("linear_left", x, m["R"], False), E, False)
        laurel = ops.add(x, norm(m, "post_laurel_norm", lr))
    with m.module("self_attn"):
        a = attention(m, cfg, x, kind, mode, rope, mask, shared)
    a = ops.add(active, norm(m, "post_attention_layernorm", a))
    h = ops.div(ops.add(a, laurel), math.sqrt(2))
    y = norm(m, "post_feedforward_layernorm",
             _mlp(m, norm(m, "pre_feedforward_layernorm", h), sparse))
    with m.module("altup"):
        corrected = _correct(m, cfg, predictions, ops.add(h, y))
        # scale_corrected_output(corrected[0].clone()): (x * correct_output_scale)
        first = ops.mul(ops.clone(ops.select(corrected, 0, 0)),
                        m.param("correct_output_scale", E))
    g = ops.gelu(m.linear("per_layer_input_gate", first, m["Ep"], False))
    g = m.linear("per_layer_projection", ops.mul(g, pli), E, False)
    g = norm(m, "post_per_layer_input_norm", g)
    return ops.add(corrected, g)  # corrected_predictions[1:] += first_prediction
