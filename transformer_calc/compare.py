"""Models side by side (`tcalc compare`): one Metric per row, a value per model, read from
the same params, memory and FLOPs reports the single-model commands print."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from transformer_calc.spec import ModelSpec


class Metric(NamedTuple):
    name: str
    unit: str  # params, bytes, fits, batch, FLOPs: how render shows the values
    values: list[float]  # one per model, in the order given


def compare_models(specs: Sequence[ModelSpec], settings: Any, gpu: str | None,
                   seq_len: int) -> list[Metric]:
    from transformer_calc.flops import count_flops, training_flops_per_token
    from transformer_calc.memory import memory_report
    from transformer_calc.params import CATEGORIES, by_category, count_params

    params = [count_params(s) for s in specs]
    mems = [memory_report(s, settings, gpu) for s in specs]
    flops = [count_flops(s, seq_len) for s in specs]
    rows = [Metric("params: total", "params", [p.total for p in params]),
            Metric("params: active per token", "params", [p.active_total for p in params])]
    cats = [by_category(p) for p in params]
    rows += [Metric(f"params: {c}", "params", [x[c] for x in cats]) for c in CATEGORIES
             if c != "mixers" or any(x[c] for x in cats)]
    # every component any model has (a hybrid's recurrent_state), 0 where a model has none
    names = list(dict.fromkeys(i.name for m in mems for i in m.per_gpu.items))
    rows += [Metric(f"memory: {n}", "bytes", [sum(i.total for i in m.per_gpu.items
                                                  if i.name == n) for m in mems])
             for n in names]
    rows.append(Metric("memory: sum of the components per GPU", "bytes",
                       [m.per_gpu.total for m in mems]))
    # the number to compare with a GPU: the peak of a training step (or the serving total)
    rows.append(Metric("memory: peak per GPU", "bytes", [m.peak for m in mems]))
    fits = [m.fit for m in mems if m.fit is not None]
    if fits:  # --gpu: does each fit, and its largest batch
        rows.append(Metric(f"fits on {fits[0].gpu}", "fits", [float(f.fits) for f in fits]))
        rows.append(Metric("largest batch that fits", "batch",
                           [f.max_batch_size for f in fits]))
    rows.append(Metric(f"FLOPs/token forward (T={seq_len})", "FLOPs",
                       [f.total for f in flops]))
    rows.append(Metric("FLOPs/token training", "FLOPs",
                       [training_flops_per_token(f) for f in flops]))
    return rows
