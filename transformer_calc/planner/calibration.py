"""The step model's efficiency parameters, as versioned data (calibration.json beside this
file, written by tools/fit_planner.py from the published runs in
tests/data/published_runs_dev.json).

The file holds the parameters fitted on every source ("all"), which `tcalc plan` uses, and
one set per source fitted without that source ("folds"), which the validation uses for that
source's rows: no source validates what it fitted. Parameters a fold has no data for keep
their prior (PRIORS), said in the fold's "unfitted" list.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, NamedTuple

from transformer_calc.errors import TcalcError

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")

# What each parameter means and its prior (the value before any fit, from the sources named)
PRIORS: dict[str, tuple[float, str]] = {
    "gemm.a100.bf16": (0.80, "fraction of the dense bf16 peak a large GEMM reaches on A100 "
                             "(cuBLAS ~ 250 of 312 TFLOP/s)"),
    "gemm.h100.bf16": (0.75, "the same on H100 (cuBLAS ~ 700-750 of 989 TFLOP/s)"),
    "gemm.h100.fp8": (0.65, "fraction of the dense fp8 peak a large fp8 GEMM reaches on H100"),
    "gemm.h100.fp8_rowwise": (0.45, "the same with row-wise scales (CUTLASS, not cuBLAS)"),
    "gemm.b200.bf16": (0.75, "fraction of the dense bf16 peak on B200 (no run fits it)"),
    "gemm.b200.fp8": (0.65, "fraction of the dense fp8 peak on B200 (no run fits it)"),
    "clock.h100_500w": (0.80, "sustained clock of the 500 W H100 against the SXM part's "
                              "boost (its peak is not published)"),
    "tp_hidden.megatron": (0.85, "share of TP communication Transformer Engine's userbuffers "
                                 "overlap hides (--tp-comm-overlap)"),
    "tp_hidden.async": (0.70, "share of TP communication async tensor parallelism hides "
                              "(torch micro-pipelining)"),
    "attention.flash2.a100": (1.0, "FlashAttention-2's rate on A100 against the paper's "
                                   "figures (kernels.ATTENTION)"),
    "attention.flash2.h100": (1.0, "FlashAttention-2's rate on H100 (SDPA, flash-attn)"),
    "attention.triton.a100": (1.0, "FlashAttention in Triton's rate on A100 (llm-foundry)"),
    "attention.triton.h100": (1.0, "FlashAttention in Triton's rate on H100 (llm-foundry)"),
    "attention.cudnn.h100": (1.0, "cuDNN fused attention's rate on H100 (Transformer "
                                  "Engine)"),
    "attention.cudnn.b200": (1.0, "cuDNN fused attention's rate on B200 (no run fits it)"),
    "attention.flash2.b200": (1.0, "FlashAttention-2's rate on B200 (no run fits it)"),
    "attention.falloff": (0.3, "the attention kernels' loss of rate at long sequences: "
                               "rate / (1 + falloff · keys / 65,536) (an estimate until fitted)"),
    "elementwise": (1.0, "the memory-bound passes (norms, residuals, activations, the "
                         "loss) against the framework's count"),
    "overhead_s": (0.03, "seconds per step outside the model: data loading, logging, "
                         "launch gaps"),
}


class Calibration(NamedTuple):
    values: dict[str, float]
    name: str = "priors"  # all | a fold's source | priors

    def value(self, key: str) -> float:
        if key in self.values:
            return self.values[key]
        if key in PRIORS:
            return PRIORS[key][0]
        raise TcalcError(f"{CALIBRATION_FILE.name}: no parameter {key!r}")


PRIOR = Calibration({k: v for k, (v, _) in PRIORS.items()})


@functools.cache
def _load() -> dict[str, Any]:
    try:
        data = json.loads(CALIBRATION_FILE.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise TcalcError(f"{CALIBRATION_FILE}: cannot read: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("all"), dict):
        raise TcalcError(f"{CALIBRATION_FILE}: expected an object with key 'all' (the "
                         "parameters fitted on every source)")
    return data


def calibration(fold: str | None = None) -> Calibration:
    """The parameters fitted on every source, or (``fold``) on every source but one."""
    data = _load()
    if not data:
        return PRIOR
    if fold is None:
        return Calibration(dict(data["all"]["parameters"]), "all")
    folds = data.get("folds", {})
    if fold not in folds:
        raise TcalcError(f"{CALIBRATION_FILE}: key 'folds' has no {fold!r} (expected one "
                         "per source of the published runs)")
    return Calibration(dict(folds[fold]["parameters"]), fold)


def trained_on(name: str) -> tuple[str, ...]:
    """The sources a calibration was fitted on (none for the priors)."""
    data = _load()
    if not data or name == "priors":
        return ()
    entry = data["all"] if name == "all" else data.get("folds", {}).get(name, {})
    return tuple(entry.get("trained_on", ()))
