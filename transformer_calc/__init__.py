"""tcalc: exact parameter counts, memory and compute for transformer models.

Library first, CLI second::

    from transformer_calc import load_model, count_params
    b = count_params(load_model("gpt2"))
    b.total  # 124439808

Names resolve lazily (PEP 562), so `import transformer_calc.cli` stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Breakdown": "breakdown",
    "Item": "breakdown",
    "ModelSpec": "spec",
    "PresetError": "errors",
    "SpecError": "errors",
    "TcalcError": "errors",
    "count_params": "params",
    "load_model": "presets",
    "preset_names": "presets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"transformer_calc.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'transformer_calc' has no attribute {name!r}")
