"""The op-graph engine: a model's forward as PyTorch ops over symbolic tensors, each op's
saved-for-backward rule written once (derivatives.yaml), requires_grad propagated from
trainable or frozen parameters, views sharing their base's storage. Pure Python; memory
reads it for the families it has (transformer_calc/costs/activations.py).

    from transformer_calc.graph import Run, evaluate, family_of
    r = evaluate(family_of(spec), Run(batch=2, seq_len=128, attention="sdpa"))
    r.activation_bytes, r.params, r.forward_flops

The compiled path (compile.py) gives the same costs from polynomials cached per structure:
evaluate_fast(family, run), sweep(family, run, B=[...], T=[...]). names.py names the saved
storages as activation_breakdown's rows: component_rows(family, run).
"""

from __future__ import annotations

from transformer_calc.graph.compile import compile_run, evaluate_fast, sweep
from transformer_calc.graph.evaluate import Result, evaluate, family_of, symbols
from transformer_calc.graph.lora import Lora
from transformer_calc.graph.modules import Run
from transformer_calc.graph.names import component_rows
from transformer_calc.graph.tensor import BF16, DTYPES, F16, F32

__all__ = ["BF16", "DTYPES", "F16", "F32", "Lora", "Result", "Run", "compile_run",
           "component_rows", "evaluate", "evaluate_fast", "family_of", "sweep", "symbols"]
