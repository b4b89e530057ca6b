"""A training step as a timeline of allocations and frees, per GPU, op group by op group.

memory.training_step says what a step holds and makes at the moments its peaks were measured
at (tests/data/peak_*_cuda_h100.json: the end of forward while the loss is taken, the start of
backward, the first layer's rebuild under full recomputation, the optimizer step). This
module walks the step through the op groups between them, the way PyTorch's memory snapshot
viewer draws it:

- forward: each op group (the embeddings, every layer in order, the final norm and head, the
  loss) adds what it saves for backward, and under torch AMP the 16-bit copies of its matmul
  weights; the loss adds its logits for a moment (the DSA indexer its scores in the last
  layer);
- backward: the loss's gradients appear for a moment, then each op group, from the loss down
  to the embeddings, frees what it saved and makes its parameters' gradients (under
  --optim-in-bwd each is stepped and freed at once: only the largest and its step's
  temporary are live); under full recomputation each layer is rebuilt in turn, its saved
  tensors and its copies live while backward runs through it;
- the optimizer step with its temporaries, then zero_grad.

What a phase holds throughout (weights, optimizer states, persistent gradient buffers, cuBLAS's
workspaces, parameters FSDP or ZeRO-3 keep gathered, a dequantised matrix) is held at every
point of that phase. Each op group's share of the saved tensors is its share of the bytes in
the activation breakdown (a layer: its group's rows over its layer count), and its share of the
gradients and copies its share of the trainable parameters, so the sums over a pass are the
phase rows' values exactly and each measured moment is a point of the walk. The working set
inside an op group (an op's output consumed by the next) is not drawn beyond those moments.

The timeline's maxima are the phases' peaks (MemoryReport.phases reads them here). It is
bounded: past MAX_POINTS points, runs of consecutive layers of one pass are merged into one
point each (its bytes after the run, the highest moment inside it), so each phase keeps its
maximum.
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import TYPE_CHECKING, NamedTuple

from transformer_calc.breakdown import Breakdown

if TYPE_CHECKING:
    from transformer_calc.memory import Phase, Settings
    from transformer_calc.spec import ModelSpec

Row3 = tuple[str, int, str]  # (name, bytes, formula): a phase row

# at most this many points: a deep model's layers are merged in runs beyond it
MAX_POINTS = 240
PHASES = ("forward", "backward", "optimizer")


class Step(NamedTuple):
    """What a training step holds and makes, per GPU (memory.training_step): the rows of
    each moment a phase's peak was measured at, and what the walk needs besides."""

    model: str
    held: tuple[Row3, ...]  # live from forward to backward (autocast's copies: all of them)
    activations: Row3  # what forward saves for backward, on this GPU
    forward: tuple[Row3, ...]  # at the end of forward, while the loss is taken
    forward_when: str
    backward: tuple[Row3, ...]  # at the start of backward (the loss's gradients)
    rebuild: tuple[Row3, ...]  # while backward rebuilds the first layer; () without
    optimizer: tuple[Row3, ...]  # inside the optimizer step
    optimizer_when: str
    gradients: Row3  # all of them (--optim-in-bwd: the largest parameter's)
    temporary: Row3 | None  # the optimizer step's temporary (--optim-in-bwd: one step's)
    accumulate: bool  # gradients are made in backward (no buffer holds them throughout)
    in_backward: bool  # --optim-in-bwd
    outside_copies: int  # autocast's copies outside the layers (of the head)
    layer_copies: int  # full recomputation: the copies of the layer being rebuilt
    rebuilt: int  # full recomputation: one layer's saved tensors, rebuilt
    offload: bool  # --offload activations
    pipeline: int  # pipeline stages (the first holds L layers' worth of micro-batches)
    indexer: Row3 | None = None  # DSA: the last layer's indexer scores, for a moment
    # where backward frees the gathered parameters: "layer" (FSDP2 without resharding after
    # forward: each op group's after its backward), "end" (its last op group's), "" none
    reshard: str = ""

    @property
    def held_names(self) -> frozenset[str]:
        return frozenset(r[0] for r in self.held)


class OpGroup(NamedTuple):
    """One op group of forward (backward runs them in reverse), with its shares: the
    activation breakdown's bytes it saves, the trainable parameters whose gradients its
    backward makes, and the matmul parameters autocast copies for it."""

    kind: str  # embeddings | layer | head | loss
    label: str  # "embeddings", "layer 3", "encoder layer 2", "head", "loss"
    saved: float
    grads: float
    copies: float
    largest: float = 0  # its largest trainable tensor (--optim-in-bwd steps one at a time)
    # the head: an embedding table tied to it, whose gradient backward holds from here until
    # the embeddings add theirs (autograd runs its AccumulateGrad, and --optim-in-bwd's hook,
    # once, with both)
    tied: float = 0


class Moment(NamedTuple):
    """What the walk holds at a point: the step's held rows, autocast's copies of the op
    groups that hold them, the saved tensors not yet consumed, the gradients made so far,
    and the point's transients (its rows, built only when read)."""

    step: Step
    copies: int
    acts: int
    grads: int
    released: int  # gathered parameters resharded in backward so far
    extra: tuple[Row3, ...]

    @property
    def rows(self) -> tuple[Row3, ...]:
        st, out = self.step, []
        full = next((r[1] for r in st.held if r[0] == "autocast_copies"), 0)
        for r in st.held:
            if r[0] == "autocast_copies" and self.copies != full:
                r = (r[0], self.copies, "16-bit copies of the matmul weights of the op groups "
                     "that hold them now")
            elif r[0] == "gathered_parameters" and self.released:
                r = (r[0], r[1] - self.released, "the op groups' backward has not reached, "
                     "still gathered")
            out.append(r)
        out.append(st.activations if self.acts == st.activations[1] else (
            "activations", self.acts, "the saved tensors of the op groups run so far and not "
            "yet consumed by backward"))
        if self.grads:
            out.append(("gradients", self.grads, "made so far, from the head down"))
        return (*out, *self.extra)


class Point(NamedTuple):
    """One op group's moment in the timeline, per GPU."""

    phase: str  # forward | backward | optimizer
    step: str  # "forward layer 3", "backward layers 4-29"
    allocated: int  # bytes allocated after it
    peak: int  # the highest moment inside it: the sum of ``rows``
    when: str  # the phase's wording, where this point is the phase's high point
    # its rows are a moment a phase's peak was measured at (memory.training_step): of equal
    # points, the phase's high point
    measured: bool
    moment: Moment | tuple[Row3, ...]  # the rows, or the walk's state they are built from

    @property
    def rows(self) -> tuple[Row3, ...]:
        """What is live at the point's highest moment."""
        m = self.moment
        return m.rows if isinstance(m, Moment) else m


class Timeline(NamedTuple):
    model: str
    points: tuple[Point, ...]
    layers_per_point: int  # 1, or how many consecutive layers one point stands for
    notes: tuple[str, ...] = ()

    @property
    def peak(self) -> int:
        return max(p.peak for p in self.points)

    @property
    def phases(self) -> tuple[Phase, ...]:
        """Each phase's highest point (of equals, a measured moment, else the first), its
        rows as the phase's."""
        from transformer_calc.memory import Phase

        out = []
        for name in PHASES:
            points = [p for p in self.points if p.phase == name]
            if points:
                top = max(points, key=lambda p: (p.peak, p.measured))
                out.append(Phase(name, top.when, Breakdown(self.model, "bytes", tuple(
                    (n, b, f, "", 1, "", "", None, ()) for n, b, f in top.rows))))
        return tuple(out)


def split(total: int, weights: list[float]) -> list[int]:
    """``total`` in parts proportional to ``weights`` (none negative) that sum to it exactly:
    each part the difference of the rounded-down running shares; all to the last where the
    weights are all zero."""
    if not weights:
        return []
    runs = list(accumulate(weights))
    whole = runs[-1]
    if whole <= 0:
        return [0] * (len(weights) - 1) + [total]
    upto = [int(total * r / whole) for r in runs]
    upto[-1] = total
    return [b - a for a, b in zip([0, *upto], upto, strict=False)]


def _outside(name: str) -> str:
    """The op group of a saved tensor outside the layers: the embeddings' (and the rotary
    embedding's cos and sin, made once before the first layer), the loss's, or the head's
    (the final norm, the head, the masks the layers read)."""
    return "embeddings" if name.startswith(("embed.", "rope.")) else "loss" if \
        name.startswith("loss.") else "head"


def op_groups(spec: ModelSpec, s: Settings, acts: Breakdown, params: Breakdown,
              lora: bool) -> tuple[OpGroup, ...]:
    """Forward's op groups in order (the embeddings, each stack's layers in the layer plan's
    order, the head, the loss), with their shares (OpGroup)."""
    from transformer_calc.memory import RECOMPUTED, RECOMPUTED_TP
    from transformer_calc.params import category
    from transformer_calc.plan import layer_kinds_in_order, plan_of

    plan = plan_of(spec)
    counts = {g.name: g.count for g in plan.groups}
    saved = dict.fromkeys(("embeddings", "head", "loss"), 0.0)
    layer_saved: dict[str, float] = {}
    inputs = [0]
    for r in acts.rows:
        if r[6] in (RECOMPUTED, RECOMPUTED_TP):
            continue
        if r[0].endswith(".checkpoint_input"):
            inputs.append(r[1])
        if r[5] in counts:
            layer_saved[r[5]] = layer_saved.get(r[5], 0) + r[1] * r[4] / counts[r[5]]
        else:
            saved[_outside(r[0])] += r[1] * r[4]
    grads = dict.fromkeys(("embeddings", "head"), 0.0)
    largest = dict.fromkeys(("embeddings", "head"), 0.0)
    table = 0.0
    layer_params: dict[str, float] = {}
    tied = spec.tie_embeddings and spec.lm_head
    for r in params.rows:
        trains = not lora and category(r[0]) not in s.freeze
        if r[5] in counts:
            layer_params[r[5]] = layer_params.get(r[5], 0) + r[1] * r[4] / counts[r[5]]
            largest[r[5]] = max(largest.get(r[5], 0), r[1] if trains else 0)
        elif trains:
            # a table tied to the head gets its gradient from the head's backward first
            shared = tied and r[0] == "embed.tokens"
            early = r[0].startswith("embed.") and not shared
            grads["embeddings" if early else "head"] += r[1] * r[4]
            largest["embeddings" if early or shared else "head"] = max(
                largest["embeddings" if early or shared else "head"], r[1])
            table = r[1] if shared else table
    if lora:  # the adapters: alike in every layer, none outside
        largest = dict.fromkeys(layer_params, 1.0)
    layer_grads = layer_params if not s.freeze else {g: sum(
        [r[1] * r[4] / counts[g] for r in params.rows if r[5] == g
         and category(r[0]) not in s.freeze]) for g in layer_params}
    if s.offload_activations:
        # torchtune's OffloadActivations: the loss's saved tensors stay, and two layers'
        # kept inputs (memory._offloaded); the rest is in CPU memory
        saved = {"embeddings": 0.0, "head": 0.0, "loss": saved["loss"]}
    out = [OpGroup("embeddings", "embeddings", saved["embeddings"], grads["embeddings"], 0,
                   largest.get("embeddings", 0))]
    n = 0
    for stack in plan.stacks:
        names = [g.name for g in stack.groups]
        if len(names) > 1:
            by_kinds = {g.kinds: g.name for g in stack.groups}
            names = [by_kinds[k] for k in layer_kinds_in_order(spec, stack.layers)]
        prefix = f"{stack.name} " if len(plan.stacks) > 1 else ""
        for i in range(stack.layers):
            g = names[i] if len(names) > 1 else names[0]
            kept = (max(inputs) if n < 2 else 0) if s.offload_activations else \
                layer_saved.get(g, 0)
            out.append(OpGroup("layer", f"{prefix}layer {i + 1}", kept,
                               layer_grads.get(g, 0), layer_params.get(g, 0),
                               largest.get(g, 0)))
            n += 1
    return (*out, OpGroup("head", "head", saved["head"], grads["head"], 0,
                          largest.get("head", 0), table),
            OpGroup("loss", "loss", saved["loss"], 0, 0))


class _Run:
    """Consecutive layers of one pass merged into one point, so far: the first's label, the
    last's, how many, the bytes after them, and the highest moment among them."""

    __slots__ = ("allocated", "first", "last", "moment", "n", "peak", "phase", "when")

    def __init__(self, phase: str, label: str, allocated: int, peak: int, moment: Moment,
                 when: str) -> None:
        self.phase, self.first, self.last, self.n = phase, label, label, 1
        self.allocated, self.peak, self.moment, self.when = allocated, peak, moment, when


class _Walk:
    """The walk's state between op groups (Moment's parts) and the points made so far; a
    layer's point is merged with the layers before it, ``k`` at most per point."""

    def __init__(self, step: Step, k: int) -> None:
        self.step, self.k = step, k
        self.full_copies = next((r[1] for r in step.held if r[0] == "autocast_copies"), 0)
        self.base = sum([r[1] for r in step.held]) - self.full_copies
        self.copies = self.acts = self.grads = self.released = 0
        self.points: list[Point] = []
        self.run: _Run | None = None

    @property
    def allocated(self) -> int:
        return self.base + self.copies + self.acts + self.grads - self.released

    def add(self, phase: str, label: str, extra: tuple[Row3, ...] = (), when: str = "",
            copies: int = 0) -> None:
        """A point of the walk's own state (and these transients) at its highest moment."""
        self.flush()
        self.points.append(Point(
            phase, f"{phase} {label}", self.allocated, self.allocated + copies + sum(
                [r[1] for r in extra]), when or _when(phase, label), False,
            Moment(self.step, self.copies + copies, self.acts, self.grads, self.released,
                   extra)))

    def measured(self, phase: str, label: str, rows: tuple[Row3, ...], when: str,
                 allocated: int | None = None) -> None:
        """A point whose highest moment is one a phase's peak was measured at (or, where
        what the op group leaves is more, that)."""
        self.flush()
        after = self.allocated if allocated is None else allocated
        if after > sum([r[1] for r in rows]):
            self.add(phase, label)
            return
        self.points.append(Point(phase, f"{phase} {label}", after, sum([r[1] for r in rows]),
                                 when, True, rows))

    def layer(self, phase: str, label: str, peak: int, moment: tuple[int, int, int, int],
              extra: tuple[Row3, ...], when: str) -> None:
        """A layer's point (the bytes after it; ``peak``: its highest moment, of the walk's
        copies, saved tensors and gradients in ``moment`` and these transients), merged into
        the run of layers before it."""
        run = self.run
        allocated = self.allocated
        if allocated > peak:  # what the layer leaves is more than its moment
            peak, moment, extra = allocated, (self.copies, self.acts, self.grads,
                                              self.released), ()
            when = _when(phase, label)
        if run is None or run.phase != phase or run.n == self.k:
            self.flush()
            self.run = _Run(phase, label, allocated, peak, Moment(self.step, *moment, extra),
                            when)
            return
        if peak > run.peak:
            run.peak, run.moment, run.when = peak, Moment(self.step, *moment, extra), when
        run.last, run.n, run.allocated = label, run.n + 1, allocated

    def flush(self) -> None:
        run = self.run
        if run is None:
            return
        self.run = None
        step = f"{run.phase} {run.first}"
        if run.n > 1:
            head, _, a = run.first.rpartition(" ")
            tail, _, b = run.last.rpartition(" ")
            step = f"{run.phase} {head}s {a}-{b}" if head == tail else \
                f"{run.phase} {run.first} to {run.last}"
        self.points.append(Point(run.phase, step, run.allocated, run.peak, run.when, False,
                                 run.moment))


def walk(step: Step, ops: tuple[OpGroup, ...], max_points: int = MAX_POINTS) -> Timeline:
    """The step op group by op group (module docstring), in ``max_points`` points at most
    (0: one point per run of layers, all a phase's peak needs)."""
    layers = sum(1 for o in ops if o.kind == "layer")
    # two passes of ceil(layers / k) points, one more where the first layer's rebuild is
    # measured, and ten outside the layers
    k = max(layers, 1) if max_points <= 0 else max(
        1, math.ceil(layers / max((max_points - 11) // 2, 1)))
    w = _Walk(step, k)
    acts = split(step.activations[1], [o.saved for o in ops])
    copies = split(w.full_copies - step.outside_copies,
                   [o.copies if o.kind == "layer" else 0 for o in ops])
    copies[[o.kind for o in ops].index("head")] += step.outside_copies
    accumulate = step.accumulate and not step.in_backward
    grads = split(step.gradients[1] if accumulate else 0, [o.grads for o in ops])
    w.add("forward", "start", when="at the start of forward")
    last_layer = max([i for i, o in enumerate(ops) if o.kind == "layer"], default=-1)
    for i, o in enumerate(ops):
        w.acts += acts[i]
        w.copies += copies[i]
        if o.kind == "loss":
            if step.rebuild:
                # full recomputation: the layers' autocast copies die with forward's cache
                w.copies = next((r[1] for r in step.backward if r[0] == "autocast_copies"), 0)
            w.measured("forward", o.label, step.forward, step.forward_when)
        elif i == last_layer and step.indexer is not None:
            w.add("forward", o.label, (step.indexer,), "in the last layer's DSA indexer")
        elif o.kind == "layer":
            w.layer("forward", o.label, w.allocated, (w.copies, w.acts, w.grads, 0), (),
                    _when("forward", o.label))
        else:
            w.add("forward", o.label)
    _backward(step, ops, w, acts, copies, grads)
    opt = step.optimizer
    kept = tuple(r for r in opt if r[0] != "optimizer_temporary" and not (
        r[0] == "gradients" and (step.accumulate or step.in_backward)))
    # after the step: its temporary freed (inside backward, the gradient too)
    after = sum([r[1] for r in (kept if step.in_backward else opt)
                 if r[0] != "optimizer_temporary"])
    w.measured("optimizer", "step of the largest parameter (inside backward)"
               if step.in_backward else "step", opt, step.optimizer_when, allocated=after)
    total = sum([r[1] for r in kept])
    w.points.append(Point("optimizer", "optimizer zero_grad", total, total, "after zero_grad",
                          False, kept))
    notes: tuple[str, ...] = ()
    if step.pipeline > 1:
        notes = (f"pipeline parallel over {step.pipeline}: the first stage's in-flight "
                 "micro-batches, drawn as one pass over the model's layers' worth",)
    if k > 1:
        notes += (f"up to {k} consecutive layers per point (the bytes after them, the "
                  "highest moment among them)",)
    return Timeline(step.model, tuple(w.points), k, notes)


def _backward(step: Step, ops: tuple[OpGroup, ...], w: _Walk, acts: list[int],
              copies: list[int], grads: list[int]) -> None:
    """Backward, from the loss's gradients down to the embeddings (walk): each point's
    bytes after the op group's frees, its highest moment a rebuilt layer's before its kept
    input is freed, otherwise after the frees."""
    recompute = bool(step.rebuild)
    # FSDP2 reshards what it gathered as each op group's backward ends (the root's last)
    gathered = next((r[1] for r in step.held if r[0] == "gathered_parameters"), 0)
    resharded = split(gathered, [o.copies if o.kind == "layer" else o.grads for o in ops])
    first_layer = min([i for i, o in enumerate(ops) if o.kind == "layer"], default=-1)
    top = max([o.largest for o in ops]) or 1
    # --optim-in-bwd: a tied table's gradient, held from the head to the embeddings
    tied = math.ceil(step.gradients[1] * max([o.tied for o in ops]) / top) \
        if step.in_backward else 0
    rebuilt = ("recomputed_layer", step.rebuilt, "one layer's saved tensors, rebuilt, and "
               "the gradients its largest op holds")
    for i in reversed(range(len(ops))):
        o = ops[i]
        in_backward = _stepped(step, o.largest / top) if step.in_backward and (
            o.grads or o.kind == "embeddings" and tied) else ()
        transient = sum([r[1] for r in in_backward])
        rebuild = (rebuilt, *in_backward)
        moment = (w.copies + step.layer_copies, w.acts, w.grads, w.released)
        peak = w.allocated + step.rebuilt + step.layer_copies + transient
        w.acts -= acts[i]
        w.grads += grads[i]
        if not recompute:
            w.copies -= copies[i]
        if o.kind == "head":
            w.grads += tied
        if o.kind == "embeddings":
            w.copies, w.released, w.grads = 0, gathered, w.grads - tied
        elif step.reshard == "layer":
            w.released += resharded[i]
        if o.kind == "loss":
            w.measured("backward", o.label, step.backward, "at the start of backward")
        elif o.kind == "layer" and recompute and i == first_layer:
            w.measured("backward", o.label, step.rebuild,
                       "while backward rebuilds the first layer")
        elif o.kind == "layer" and recompute:
            w.layer("backward", o.label, peak, moment, rebuild,
                    f"while backward rebuilds {o.label}")
        elif o.kind == "layer":
            w.layer("backward", o.label, w.allocated + transient,
                    (w.copies, w.acts, w.grads, w.released), in_backward,
                    _when("backward", o.label))
        else:
            w.add("backward", o.label, in_backward)


def _when(phase: str, label: str) -> str:
    """The moment an op group's point stands for, in words (a phase's when)."""
    if phase == "backward" and label == "embeddings":
        return "at the end of backward"
    the = "" if label.startswith(("layer", "encoder", "decoder")) else "the "
    return f"in {phase}, {'after' if phase == 'forward' else 'at'} {the}{label}"


def _stepped(step: Step, share: float) -> tuple[Row3, ...]:
    """--optim-in-bwd: what an op group's backward holds for a moment, its largest
    parameter's gradient and that parameter's step's temporary (``share``: that parameter
    over the model's largest, whose bytes the step gives)."""
    rows = [(step.gradients[0], math.ceil(step.gradients[1] * share), "its largest "
             "parameter's gradient, stepped and freed at once")]
    if step.temporary is not None:
        rows.append((step.temporary[0], math.ceil(step.temporary[1] * share),
                     "that parameter's step's temporary"))
    return tuple(rows)
