"""What autograd holds when the forward is over, under each recomputation policy, read off a
trace (unrolled, or compiled with its last traced layer replayed).

- none: every saved storage once (a view keeps its base).
- selective (Korthikanti et al. 2022, Sec. 5, as tcalc's --recompute selective): the
  attention core's T² tensors (scores, probabilities, their dropout mask) are recomputed,
  so storages whose size has a T² term are not held.
- full: torch.utils.checkpoint(use_reentrant=False) around each decoder layer, as
  transformers' gradient checkpointing runs it (GradientCheckpointingLayer). Its saved-tensor
  hooks hold a placeholder for everything a layer saves; the recompute closure keeps the
  layer's inputs (hidden states and the model-level tensors passed to it: positions,
  RoPE's cos and sin, the eager mask), but only where the layer saved anything (an
  untouched frame is freed with its inputs: a frozen layer below LoRA's first adapter).
  Backward rebuilds one layer at a time: `rebuilt` lists, per traced layer, the storages
  its rebuild allocates (what it saves and created itself; its inputs are held already)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph.symbols import Dim, Poly
from transformer_calc.graph.tensor import Storage
from transformer_calc.graph.trace import Saved, Trace

ONE = Dim.const(1)


@dataclass(frozen=True)
class Held:
    """saved: (storage held, how many such storages: 1, or the replay count of the
    layer it belongs to); rebuilt: per traced layer, what full recomputation rebuilds."""

    saved: tuple[tuple[Saved, Dim], ...]
    rebuilt: tuple[tuple[Storage, ...], ...]


def quadratic_in_t(s: Storage) -> bool:
    """A size with a T² term: the attention core's (B, H, T, T) tensors."""
    return any(m.count("T") >= 2 for m, _ in s.numel.poly.terms)


def held(tr: Trace, recompute: str) -> Held:
    reps = tr.replay
    items: list[tuple[Saved, Dim]] = []
    if recompute != "full":
        for s in tr.saved.values():
            if recompute == "selective" and quadratic_in_t(s.storage):
                continue
            items.append((s, ONE))
            if s.layer in reps:
                items.append((s, reps[s.layer]))  # the same storage in each replayed layer
        return Held(tuple(items), ())
    seen: set[int] = set()
    for key, s in tr.saved.items():
        if None in tr.savers[key]:  # saved by an op outside the layers
            items.append((s, ONE))
            seen.add(key)
    rebuilt: list[tuple[Storage, ...]] = []
    for i in sorted(tr.layer_args):
        if i not in tr.layer_saves:
            rebuilt.append(())
            continue
        for a in tr.layer_args[i]:
            st = a.storage
            if id(st) not in seen and st.kind not in ("param", "buffer"):
                seen.add(id(st))
                items.append((Saved(st, st.name, "checkpoint.input", i), ONE))
        rebuilt.append(tuple(s.storage for k, s in tr.saved.items()
                             if i in tr.savers[k] and s.storage.layer == i
                             and s.storage.kind != "weight_copy"))
    for rep, count in reps.items():
        if rep in tr.layer_saves:
            h = tr.layer_args[rep][0].storage  # each replayed layer's own hidden-state input
            items.append((Saved(h, h.name, "checkpoint.input", rep), count))
    return Held(tuple(items), tuple(rebuilt))


@dataclass(frozen=True)
class Totals:
    """The costs as polynomials (a trace's symbols): activations held, autocast's weight
    copies, parameters, trainable ones, forward matmul FLOPs, and per traced layer what full
    recomputation rebuilds (the largest counts)."""

    activation_bytes: Poly
    weight_copy_bytes: Poly
    params: Poly
    trainable_params: Poly
    forward_flops: Poly
    rebuilt: tuple[Poly, ...]


def totals(tr: Trace, h: Held) -> Totals:
    reps = tr.replay
    act = Poly(())
    for s, n in h.saved:
        if s.storage.kind != "weight_copy":
            act = act + n.poly * s.storage.formula

    def summed(storages: list[Storage], numel: bool) -> Poly:
        out = Poly(())
        for st in storages:
            one = st.numel.poly if numel else st.formula
            out = out + one
            if st.layer in reps:
                out = out + reps[st.layer].poly * one
        return out

    casts = [t.storage for t in tr.weight_casts.values()]
    params = [p.storage for p in tr.params.values()]
    trainable = [p.storage for p in tr.params.values() if p.requires_grad]
    flops = tr.flops_poly
    for rep, count in reps.items():
        flops = flops + count.poly * tr.layer_flops[rep]
    rebuilt = tuple(sum((st.formula for st in layer), Poly(())) for layer in h.rebuilt)
    return Totals(act, summed(casts, False), summed(params, True), summed(trainable, True),
                  flops, rebuilt)
