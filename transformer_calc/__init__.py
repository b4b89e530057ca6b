"""tcalc: exact parameter counts, memory and compute for transformer models.

Library first, CLI second::

    from transformer_calc import load_model, count_params
    b = count_params(load_model("gpt2"))
    b.total  # 124439808
"""

from transformer_calc.breakdown import Breakdown, Item
from transformer_calc.errors import PresetError, SpecError, TcalcError
from transformer_calc.params import count_params
from transformer_calc.presets import load_model, preset_names
from transformer_calc.spec import ModelSpec

__version__ = "0.1.0"

__all__ = [
    "Breakdown",
    "Item",
    "ModelSpec",
    "PresetError",
    "SpecError",
    "TcalcError",
    "count_params",
    "load_model",
    "preset_names",
]
