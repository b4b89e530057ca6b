"""Where a training step's time goes: the planner's best layout, derived step by step for
`tcalc explain --topic step`.

Every number is the step model's own (step.StepModel, layer.Layer.cost with its per-op
record): the ops of one layer for one micro-batch, the busiest pipeline stage's layers, the
micro-batches, then the parts of the step as step.StepTime splits them. The sections add up
to the step time `tcalc plan` ranks the layout by (tests recompute the sums).
"""

from __future__ import annotations

from collections.abc import Mapping

from transformer_calc.explain import Section, Step
from transformer_calc.planner.layer import OpTime, Shard
from transformer_calc.planner.step import Layout, StepModel, StepTime, Workload
from transformer_calc.spec import ModelSpec

US, MS = 1e6, 1e3  # seconds to µs, to ms


def step_derivation(spec: ModelSpec, *, gpus: int, global_batch: int | None, seq_len: int,
                    gpu: str | None = None, framework: str = "megatron",
                    precision: str = "bf16", fixed: Mapping[str, object] | None = None
                    ) -> list[Section]:
    """The fastest layout that fits ``gpus`` GPUs, and its step time op by op."""
    from transformer_calc.errors import TcalcError
    from transformer_calc.planner import plan_training
    from transformer_calc.planner.calibration import calibration
    from transformer_calc.planner.frameworks import framework as framework_of
    from transformer_calc.planner.hardware import cluster_for

    gb = global_batch or gpus
    report = plan_training(spec, gpus=gpus, global_batch=gb, seq_len=seq_len, gpu=gpu,
                           framework=framework, precision=precision, top=1, fixed=fixed)
    best = report.best
    if best is None:
        raise TcalcError(f"{spec.name}: no layout of {gpus} × {report.gpu} fits its memory "
                         f"(global batch {gb}, {seq_len:,} tokens); `tcalc plan` lists the "
                         "search")
    cluster = cluster_for(gpu, None)
    model = StepModel(Workload(spec, seq_len, gb, precision), cluster, framework_of(framework),
                      calibration())
    time = model.step(best.layout)
    layout_note = "" if global_batch else " (one sequence per GPU: --global-batch to change)"
    return ([_layout(report.layouts, best.layout, time, model, gb, seq_len, layout_note,
                     cluster.description)]
            + _layers(model, best.layout)
            + [_step(model, best.layout, time),
               _throughput(gb, seq_len, gpus, time, report.flops_per_token,
                           report.peak_flops)])


def _layout(n: int, lay: Layout, time: StepTime, model: StepModel, gb: int, T: int,
            note: str, where: str) -> Section:
    L = -(-model.n_layers // lay.pp)
    zero = {0: "DDP", 1: "ZeRO-1 (distributed optimizer)", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP"}
    what = (f"{lay.describe()}, {zero[lay.zero]}, micro-batch {lay.mb}, recompute "
            f"{lay.recompute}" + (", sequence parallel" if lay.sp else ""))
    return Section("The layout", (
        Step("layout", text=f"{what}: the fastest of the {n:,} layouts {model.fw.name} allows "
                            f"that fits the memory, on {where}"),
        Step("micro-batches per step m", "global batch / (dp × micro-batch)",
             f"{gb:,} / ({lay.dp} × {lay.mb})", time.micro_batches, text=note.strip()),
        Step("layers on the busiest pipeline stage L", "⌈layers / pp⌉",
             f"⌈{model.n_layers} / {lay.pp}⌉", L),
        Step("tokens one GPU computes per micro-batch t", "micro-batch × sequence / cp",
             f"{lay.mb} × {T:,} / {lay.cp}", lay.mb * T // lay.cp),
    ))


def _op_step(op: OpTime) -> Step:
    rate = f", {op.flops / op.fwd / 1e12:,.0f} TFLOP/s" if op.flops and op.fwd else ""
    return Step(op.name, op.shape, "", round(op.fwd * US, 2), "µs forward",
                text=f"backward {op.bwd * US:,.2f} µs{rate}")


def _layers(model: StepModel, lay: Layout) -> list[Section]:
    """Each group of identical layers, op by op, then the average layer the step uses."""
    sh = Shard(lay.mb, model.work.seq_len, lay.tp, lay.cp, lay.ep, lay.sp)
    out = []
    for i, g in enumerate(model.layers):
        ops: list[OpTime] = []
        cost = g.cost(model.dev, sh, model.fw.attention, model.fw.elementwise, ops)
        title = "One layer, one micro-batch, on one GPU" + (
            f" (layers of kind {i + 1}: {g.count} of them)" if len(model.layers) > 1 else "")
        steps = [_op_step(op) for op in ops]
        steps.append(Step("layer forward", "Σ forward", "", round(cost.fwd * US, 2), "µs"))
        steps.append(Step("layer backward", "Σ backward", "", round(cost.bwd * US, 2), "µs",
                          text=f"of which weight-gradient GEMMs {cost.wgrad * US:,.2f} µs"))
        out.append(Section(title, tuple(steps)))
    return out


def _step(model: StepModel, lay: Layout, t: StepTime) -> Section:
    x, L, fwd, bwd = model._compute(lay)
    hf, hb = model.head(lay.tp, lay.cp, lay.mb)
    m = t.micro_batches
    # what recomputation adds per layer (the step model's choice, read back from its sum;
    # rounding leaves ~1e-19 s where there is none)
    redo = (fwd + bwd - L * (x.fwd + x.bwd) - hf - hb) / L if L else 0.0
    redo = redo if redo > 1e-12 else 0.0
    t_mb = (t.compute + t.tp + t.cp + t.ep + t.pp) / m
    ms = [round(v * MS, 3) for v in t[:8]] + [round(t.overhead * MS, 3)]
    parts = ("compute", "bubble", "tp", "cp", "ep", "pp", "dp", "optimizer")
    steps = [
        Step("one micro-batch on the busiest stage", "L × (forward + backward + recompute) "
             "+ output layer and loss",
             f"{L:g} × ({x.fwd * MS:,.3f} + {x.bwd * MS:,.3f} + {redo * MS:,.3f}) + "
             f"{(hf + hb) * MS:,.3f}", round((fwd + bwd) * MS, 3), "ms"),
        Step("compute", "m × one micro-batch", f"{m} × {(fwd + bwd) * MS:,.3f}", ms[0], "ms"),
        Step("pipeline bubble", "(pp − 1) / v × one micro-batch with its communication",
             f"({lay.pp} − 1) / {lay.vp} × {t_mb * MS:,.3f}", ms[1], "ms",
             text="Narayanan et al. 2021, Sec. 2.2") if lay.pp > 1 else
        Step("pipeline bubble", "", "", 0.0, "ms", text="one pipeline stage: none"),
        Step("exposed tensor-parallel communication", "m × L × all-reduces not hidden", "",
             ms[2], "ms"),
        Step("exposed context-parallel communication", "m × L × ring steps not hidden", "",
             ms[3], "ms"),
        Step("exposed expert-parallel all-to-all", "", "", ms[4], "ms"),
        Step("pipeline sends", "", "", ms[5], "ms"),
        Step("exposed data-parallel communication",
             "gradient reduction and parameter gathers not hidden", "", ms[6], "ms"),
        Step("optimizer step", "34 bytes per parameter of the shard / HBM bandwidth", "",
             ms[7], "ms"),
        Step("per-step overhead", "calibrated constant", "", ms[8], "ms"),
        Step("step time", " + ".join(parts) + " + overhead",
             " + ".join(f"{v:,.3f}" for v in ms), round(t.total * MS, 3), "ms"),
    ]
    return Section("The step, on the busiest GPU", tuple(steps))


def _throughput(gb: int, T: int, gpus: int, t: StepTime, per_token: int, peak: float
                ) -> Section:
    tps = gb * T / (t.total * gpus)
    return Section("What it delivers", (
        Step("tokens/s per GPU", "global batch × sequence / (step × GPUs)",
             f"{gb:,} × {T:,} / ({t.total:,.4f} s × {gpus:,})", round(tps, 1)),
        Step("MFU", "model FLOPs per token × tokens/s / peak",
             f"{per_token:,} × {tps:,.1f} / {peak:.4g}", round(100 * per_token * tps / peak, 2),
             "%", text="model FLOPs: tcalc flops, training, no recomputation"),
    ))
