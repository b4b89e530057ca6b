"""LoRA as peft 0.21's lora.Linear.forward runs it (peft/tuners/lora/layer.py), around a
frozen base layer:

    result = self.base_layer(x)
    torch_result_dtype = result.dtype
    x = self._cast_input_dtype(x, lora_A.weight.dtype)
    result = result + lora_B(lora_A(dropout(x))) * scaling
    result = result.to(torch_result_dtype)

The adapters are fp32 (get_peft_model's autocast_adapter_dtype upcasts 16-bit ones), so
over a 16-bit base the cast is a new fp32 copy of the input per adapted layer."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.tensor import DType, Tensor

# PEFT's LoraConfig defaults: lora_alpha 8, so scaling = alpha / r (a scalar mul either way)
LORA_ALPHA = 8


@dataclass(frozen=True)
class Lora:
    """rank r, the targeted module names ('all-linear': every linear but the LM head),
    the adapters' dropout, and the dtype they compute in: fp32 as get_peft_model upcasts
    them (None), or a 16-bit dtype where FSDP2's MixedPrecisionPolicy gathers every
    parameter, the adapters' too, in it."""

    rank: int
    targets: frozenset[str]
    dropout: float = 0.0
    dtype: DType | None = None

    def adapts(self, module: str) -> bool:
        """Whether peft adapts the module at this path: a target names it whole or ends it
        after a dot (peft's check_target_module_exists: "intermediate.dense" matches
        "bert.encoder.layer.0.intermediate.dense")."""
        return "all-linear" in self.targets or any(
            module == t or module.endswith("." + t) for t in self.targets)


def adapted(result: Tensor, x: Tensor, a: Tensor, b: Tensor, lora: Lora) -> Tensor:
    """The adapter's ops after the base layer's result: cast, dropout, A, B, scale, add,
    cast back."""
    result_dtype = result.dtype
    x = ops.to(x, a.dtype)
    delta = ops.linear(ops.linear(ops.dropout(x, lora.dropout), a), b)
    result = ops.add(result, ops.mul(delta, LORA_ALPHA / lora.rank))
    return ops.to(result, result_dtype)
