"""torch.autocast (aten/src/ATen/autocast_mode.cpp and autocast_mode.h, torch 2.13), per
device: ops of the lower-precision list run in the 16-bit dtype, those of the fp32 list in
fp32, those of fp32_set_opt_dtype with dtype=float32 (a floating input not fp32 gives an fp32
result), those of the promote list in their inputs' widest dtype, the rest in their inputs'
promoted dtype. CUDA's lists and the CPU's differ: the CPU casts no pointwise op, norm,
softmax or reduction (its fp32 list is losses, linear algebra and FFTs), and promotes cat,
stack and index_copy. A cast is a new storage; a parameter's cast is cached for the forward
(a weight copy, reported apart from activations). Only the top-level op casts: the ops it
runs inside (linear's addmm) see its casts, as ATen's ExcludeDispatchKeyGuard does; a
composite op on neither list (einsum on the CPU) runs its parts through autocast."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformer_calc.graph.tensor import F32, DType, Tensor, numel_of, preserve_strides

if TYPE_CHECKING:
    from transformer_calc.graph.trace import Trace


@dataclass(frozen=True)
class Lists:
    """One device's autocast lists, by the op names the graph records (the ones its
    families run; aten's names)."""
    lower: frozenset[str]
    fp32: frozenset[str]
    fp32_opt_dtype: frozenset[str]
    promote: frozenset[str]


# autocast_mode.h AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE,
# AT_FORALL_PROMOTE (KERNEL_CUDA in autocast_mode.cpp); cross_entropy is composite on CUDA:
# log_softmax (fp32_set_opt_dtype) then nll_loss (fp32), an fp32 copy of the logits first
CUDA = Lists(
    lower=frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "einsum", "conv1d",
                     "scaled_dot_product_attention"}),
    fp32=frozenset({"acos", "exp", "expm1", "log", "log1p", "reciprocal", "rsqrt", "pow",
                    "softplus", "layer_norm", "rms_norm", "group_norm", "nll_loss",
                    "cross_entropy", "logsumexp"}),
    fp32_opt_dtype=frozenset({"softmax", "log_softmax", "sum", "cumsum", "prod"}),
    promote=frozenset({"addcmul", "addcdiv", "index_put", "scatter_add"}))
# autocast_mode.cpp TORCH_LIBRARY_IMPL(aten, AutocastCPU, m): lower_precision_fp, fp32 (the
# losses: nll_loss, cross_entropy_loss; prod), promote (stack, cat, index_copy)
CPU = Lists(
    lower=frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "conv1d",
                     "scaled_dot_product_attention"}),
    fp32=frozenset({"nll_loss", "cross_entropy", "prod"}),
    fp32_opt_dtype=frozenset(),
    promote=frozenset({"cat", "stack", "index_copy"}))


def _lists(trace: Trace) -> Lists | None:
    if trace.autocast is None or trace.autocast_paused:
        return None
    return CUDA if trace.device == "cuda" else CPU


def lower_precision(trace: Trace) -> DType | None:
    """The dtype autocast runs the lower-precision list in where it is active, else None."""
    return trace.autocast if _lists(trace) is not None else None


def listed(op: str, trace: Trace) -> bool:
    """Whether autocast handles op itself here (on one of the device's lists, autocast
    active): its parts then run with autocast off."""
    lists = _lists(trace)
    return lists is not None and any(op in s for s in (
        lists.lower, lists.fp32, lists.fp32_opt_dtype, lists.promote))


def cuda_enabled(trace: Trace) -> DType | None:
    """torch.is_autocast_enabled() without a device: CUDA's autocast only (the CPU's is
    is_autocast_enabled("cpu")); its dtype where on, else None."""
    return lower_precision(trace) if trace.device == "cuda" else None


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
    """The inputs an op sees under autocast: cast to its list's dtype (promote: the widest
    floating dtype among them); unchanged off autocast or off the lists."""
    if not ts:
        return ts
    lists = _lists(ts[0].trace)
    if lists is None:
        return ts
    if op in lists.lower:
        target = ts[0].trace.autocast
        assert target is not None
        return tuple(_cast(t, target) for t in ts)
    if op in lists.fp32:
        return tuple(_cast(t, F32) for t in ts)
    if op in lists.promote:
        from transformer_calc.graph.tensor import promote

        floating = [t.dtype for t in ts if t.dtype.floating]
        if not floating:
            return ts
        widest = floating[0]
        for d in floating[1:]:
            widest = promote(widest, d)
        return tuple(_cast(t, widest) for t in ts)
    return ts


def cast_linear(x: Tensor, w: Tensor, b: Tensor | None
                ) -> tuple[Tensor, Tensor, Tensor | None]:
    """F.linear (and conv1d, addmm): the lower-precision list on both devices."""
    if _lists(x.trace) is None:
        return x, w, b
    target = x.trace.autocast
    assert target is not None
    return _cast(x, target), _cast(w, target), None if b is None else _cast(b, target)


def opt_dtype(op: str, a: Tensor, dtype: DType | None) -> DType | None:
    """fp32_set_opt_dtype: an op given no dtype runs with dtype=float32 where its input is
    floating (autocast_mode.h set_opt_dtype: a floating input other than fp64)."""
    lists = _lists(a.trace)
    if dtype is None and lists is not None and op in lists.fp32_opt_dtype \
            and a.dtype.floating and a.dtype.itemsize < 8:
        return F32
    return dtype


def softmax_input(op: str, a: Tensor, dtype: DType | None) -> Tensor:
    """softmax(x, dtype) converts its input first; CUDA's autocast sets dtype=fp32 when none
    is given (fp32_set_opt_dtype)."""
    from transformer_calc.graph import ops

    dtype = opt_dtype(op, a, dtype)
    return a if dtype is None else ops.to(a, dtype)


def fp32_append_dtype(a: Tensor) -> DType:
    """norm.ScalarOpt_dim on CUDA's fp32_append_dtype list: the result in fp32; the CPU's
    autocast leaves it in the input's dtype."""
    lists = _lists(a.trace)
    return F32 if lists is CUDA else a.dtype
