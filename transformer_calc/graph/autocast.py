"""torch.autocast on CUDA (aten/src/ATen/autocast_mode.cpp): ops of the lower-precision list
run in the 16-bit dtype, those of the fp32 list in fp32, the rest in their inputs' promoted
dtype. A cast is a new storage; a parameter's cast is cached for the forward (a weight copy,
reported apart from activations). Only the top-level op casts: the ops it runs inside
(linear's addmm) see its casts, as ATen's ExcludeDispatchKeyGuard does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from transformer_calc.graph.tensor import F32, DType, Tensor, numel_of, preserve_strides

if TYPE_CHECKING:
    from transformer_calc.graph.trace import Trace

# autocast_mode.cpp, KERNEL_CUDA(..., lower_precision_fp): the ones the graphs use
LOWER_PRECISION = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear",
                             "scaled_dot_product_attention"})
# KERNEL_CUDA(..., fp32) and fp32_set_opt_dtype (softmax, log_softmax, sum, ...)
FP32 = frozenset({"pow", "rsqrt", "layer_norm", "nll_loss", "cross_entropy", "softmax",
                  "log_softmax", "_safe_softmax", "acos", "logsumexp"})


def _active(trace: Trace) -> bool:
    return trace.autocast is not None and trace.device == "cuda" and not trace.autocast_paused


def lower_precision(trace: Trace) -> DType | None:
    """The dtype autocast runs the lower-precision list in where it is active, else None."""
    return trace.autocast if _active(trace) else None


@contextmanager
def disabled(trace: Trace) -> Iterator[None]:
    trace.autocast_paused += 1
    try:
        yield
    finally:
        trace.autocast_paused -= 1


def _cast(t: Tensor, dtype: DType) -> Tensor:
    """autocast's cached_cast: floating tensors of another dtype; parameters once."""
    from transformer_calc.graph import ops

    if not t.dtype.floating or t.dtype == dtype:
        return t
    tr = t.trace
    # cached_cast caches a leaf that requires grad: the parameter itself, not a slice of it
    # (nn.MultiheadAttention's w_q and w_kv of in_proj_weight are cast at every call)
    whole = t.offset == 0 and numel_of(t.shape).value == t.storage.numel.value
    if t.storage.kind != "param" or not whole:
        return ops.to(t, dtype)
    key = (id(t.storage), dtype)
    if key not in tr.weight_casts:
        out = tr.tensor(t.shape, dtype, t.requires_grad, "weight_copy",
                        f"{t.storage.name}.to({dtype.name})",
                        preserve_strides(t.sizes, t.stride))
        tr.record("to", out)
        tr.weight_casts[key] = out
    return tr.weight_casts[key]


def cast_inputs(op: str, *ts: Tensor) -> tuple[Tensor, ...]:
    if not ts or not _active(ts[0].trace):
        return ts
    if op in LOWER_PRECISION:
        target = ts[0].trace.autocast
        assert target is not None
        return tuple(_cast(t, target) for t in ts)
    if op in FP32:
        return tuple(_cast(t, F32) for t in ts)
    return ts


def cast_linear(x: Tensor, w: Tensor, b: Tensor | None
                ) -> tuple[Tensor, Tensor, Tensor | None]:
    if not _active(x.trace):
        return x, w, b
    target = x.trace.autocast
    assert target is not None
    return _cast(x, target), _cast(w, target), None if b is None else _cast(b, target)


def softmax_input(op: str, a: Tensor, dtype: DType | None) -> Tensor:
    """softmax(x, dtype) converts its input first; autocast sets dtype=fp32 when none is
    given (fp32_set_opt_dtype)."""
    from transformer_calc.graph import ops

    if dtype is None and _active(a.trace) and op in FP32:
        dtype = F32
    return a if dtype is None else ops.to(a, dtype)
