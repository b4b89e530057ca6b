"""LoRA as peft 0.21's lora.Linear.forward runs it (peft/tuners/lora/layer.py), around a
frozen base layer:

    result = self.base_layer(x)
    torch_result_dtype = result.dtype
    x = self._cast_input_dtype(x, lora_A.weight.dtype)
    result = result + lora_B(lora_A(dropout(x))) * scaling
    result = result.to(torch_result_dtype)

The adapters are fp32 (get_peft_model's autocast_adapter_dtype upcasts 16-bit ones), so
over a 16-bit base the cast is a new fp32 copy of the input per adapted layer.

A parameter peft targets directly (target_parameters: the MoE conversion's router weight and
3-D expert weights) is a ParamWrapper: while its module runs, the weight is parametrised
(torch.nn.utils.parametrize, cached for the forward) as W plus the adapter's product, which
the module then reads as it reads W (_LoraFactorsProxy: one baddbmm over the experts;
_LoraParameterProxy: W + delta). register_parametrization evaluates the parametrisation once
to check its shape and dtype (a result dropped), and the module's first read evaluates it
again, the one cached."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.graph import autocast, ops
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import DType, Tensor

# PEFT's LoraConfig defaults: lora_alpha 8, so scaling = alpha / r (a scalar mul either way)
LORA_ALPHA = 8


@dataclass(frozen=True)
class Lora:
    """rank r, the targeted module names ('all-linear': every linear but the LM head),
    the adapters' dropout, and the dtype they compute in: fp32 as get_peft_model upcasts
    them (None), or a 16-bit dtype where FSDP2's MixedPrecisionPolicy gathers every
    parameter, the adapters' too, in it. parameters: peft's target_parameters, each a
    parameter's name or its path's end ("gate.weight", "gate_up_proj")."""

    rank: int
    targets: frozenset[str]
    dropout: float = 0.0
    dtype: DType | None = None
    parameters: frozenset[str] = frozenset()
    # the base's bitsandbytes layers (transformers' replace_with_bnb_linear: every nn.Linear
    # and Conv1D but the LM head): "" none, "4bit" (MatMul4Bit since 0.44), "4bit-legacy"
    # (before 0.44), "int8" (MatMul8bitLt; on the CPU in training MatMul8bitFp, which keeps
    # its input too); or torchtune's torchao NF4 linears, "nf4" (ops.nf4_linear)
    quant: str = ""
    # the LM head quantised with them (Lightning's layers: Builder.head)
    head: bool = False
    # the modules replace_with_bnb_linear leaves out besides the LM head, by their path's end:
    # the class's _keep_in_fp32_modules (get_modules_to_not_convert; T5's "wo"), plain
    # nn.Linear layers under peft's lora.Linear
    unconverted: frozenset[str] = frozenset()

    @property
    def base_keeps_input(self) -> bool:
        """Whether the quantised base's autograd function keeps its input (ops.bnb_matmul)."""
        return self.quant in ("4bit-legacy", "int8")

    def adapts(self, module: str) -> bool:
        """Whether peft adapts the module at this path: a target names it whole or ends it
        after a dot (peft's check_target_module_exists: "intermediate.dense" matches
        "bert.encoder.layer.0.intermediate.dense")."""
        return "all-linear" in self.targets or any(
            module == t or module.endswith("." + t) for t in self.targets)

    def converts(self, module: str) -> bool:
        """Whether the module at this path is a bitsandbytes layer of the quantised base."""
        return bool(self.quant) and not any(
            module == t or module.endswith("." + t) for t in self.unconverted)

    def wraps(self, parameter: str) -> bool:
        """Whether peft wraps the parameter at this path (_inject_parameters: the key or
        its end after a dot)."""
        return any(parameter == t or parameter.endswith("." + t) for t in self.parameters)


def adapted(result: Tensor, x: Tensor, a: Tensor, b: Tensor, lora: Lora) -> Tensor:
    """The adapter's ops after the base layer's result: cast, dropout, A, B, scale, add,
    cast back."""
    result_dtype = result.dtype
    x = ops.to(x, a.dtype)
    delta = ops.linear(ops.linear(ops.dropout(x, lora.dropout), a), b)
    result = ops.add(result, ops.mul(delta, LORA_ALPHA / lora.rank))
    return ops.to(result, result_dtype)


def adapted_bnb(result: Tensor, x: Tensor, a: Tensor, b: Tensor, lora: Lora) -> Tensor:
    """peft 0.21's bitsandbytes layers (peft/tuners/lora/bnb.py, Linear4bit.forward and
    Linear8bitLt.forward) after the base layer's result: 4-bit clones the result ("for 4bit,
    we need to defensively clone"); requires_conversion = not torch.is_autocast_enabled(),
    so the input is cast to the adapters' dtype, and the adapters' output back to the
    result's, only outside autocast; dropout, A, B, the scale, the add."""
    if lora.quant != "int8":
        result = ops.clone(result)
    conversion = autocast.cuda_enabled(x.trace) is None
    if conversion:
        x = ops.to(x, a.dtype)
    out = ops.linear(ops.linear(ops.dropout(x, lora.dropout), a), b)
    scale = LORA_ALPHA / lora.rank
    if lora.quant != "int8":  # 4-bit scales first, 8-bit casts first
        out = ops.mul(out, scale)
    if conversion:
        out = ops.to(out, result.dtype)
    if lora.quant == "int8":
        out = ops.mul(out, scale)
    return ops.add(result, out)


def expert_factors(w: Tensor, a: Tensor, b: Tensor, R: Dim) -> tuple[Tensor, Tensor]:
    """ParamWrapper.get_delta_factors for a 3-D (experts, out, in) weight (in and out
    swapped: not is_transposed): lora_A.weight (R·X, in) as (X, R, in), lora_B.weight
    (out, R·X) as (out, R, X) permuted to (X, out, R), both cast to the weight's dtype
    (.to: a copy where the adapters are fp32 over a 16-bit base, else the view itself)."""
    X, out_f, in_f = w.shape
    lhs = ops.permute(ops.reshape(b, (out_f, R, X)), (2, 0, 1))
    rhs = ops.reshape(a, (X, R, in_f))
    return ops.to(lhs, w.dtype), ops.to(rhs, w.dtype)


def fold(w: Tensor, lhs: Tensor, rhs: Tensor) -> Tensor:
    """_LoraFactorsProxy.forward: baddbmm(W, lhs, rhs, alpha=scaling), autocast off (alpha
    scales the product in place: no tensor of its own)."""
    return ops.baddbmm(w, lhs, rhs)


def delta_weight(w: Tensor, a: Tensor, b: Tensor, rank: int) -> Tensor:
    """ParamWrapper.get_delta_weight for a 2-D weight (one expert: lora.Linear's),
    lora_B.weight @ lora_A.weight * scaling, to the weight's dtype."""
    return ops.to(ops.mul(ops.matmul(b, a), LORA_ALPHA / rank), w.dtype)
