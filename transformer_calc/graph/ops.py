"""The op vocabulary: per op its output (shape, dtype, layout), its FLOPs (matmuls,
2·m·n·k as torch.utils.flop_counter counts them) and what it saves for backward, as
PyTorch's tools/autograd/derivatives.yaml states it: a tensor kept for another input's
gradient is kept only when that input requires one. Views share their base's storage.

Each function takes and returns `Tensor`s of one `Trace` (the tensors carry it)."""

from __future__ import annotations

from transformer_calc.errors import TcalcError
from transformer_calc.graph import autocast
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import (
    BOOL,
    C64,
    F32,
    I64,
    DType,
    Tensor,
    compute_stride,
    contiguous_strides,
    iterator_strides,
    preserve_strides,
    promote,
)

Scalar = float


def _alias(t: Tensor, shape: tuple[Dim, ...], stride: tuple[int, ...], op: str,
           offset: int = 0) -> Tensor:
    """A view: the same storage, another shape and strides."""
    out = Tensor(shape, stride, t.dtype, t.storage, t.requires_grad and t.trace.grad_enabled,
                 t.trace, t.offset + offset)
    t.trace.record(op, out)
    return out


def _new(like: Tensor, shape: tuple[Dim, ...], dtype: DType, requires_grad: bool,
         stride: tuple[int, ...] | None = None) -> Tensor:
    return like.trace.tensor(shape, dtype, requires_grad, stride=stride)


def _rg(*ts: Tensor | Scalar | None) -> bool:
    return any(isinstance(t, Tensor) and t.requires_grad for t in ts)


def _check_numel(t: Tensor, shape: tuple[Dim, ...]) -> tuple[int, ...]:
    sizes = tuple(d.value for d in shape)
    if _numel(sizes) != _numel(t.sizes):
        raise ValueError(f"cannot view {t.sizes} as {sizes}")
    return sizes


def _numel(sizes: tuple[int, ...]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


# -- views -------------------------------------------------------------------------------------
def view(t: Tensor, shape: tuple[Dim, ...]) -> Tensor:
    """Tensor.view: only where ATen's computeStride finds strides (else torch raises)."""
    stride = compute_stride(t.sizes, t.stride, _check_numel(t, shape))
    if stride is None:
        raise ValueError(f"view of {t.sizes} strides {t.stride} as {shape} needs a copy")
    return _alias(t, shape, stride, "view")


def reshape(t: Tensor, shape: tuple[Dim, ...]) -> Tensor:
    """Tensor.reshape: a view where computeStride allows, else a contiguous copy (clone,
    which saves nothing) viewed."""
    stride = compute_stride(t.sizes, t.stride, _check_numel(t, shape))
    if stride is not None:
        return _alias(t, shape, stride, "reshape")
    return view(clone(t), shape)


def transpose(t: Tensor, d0: int, d1: int) -> Tensor:
    shape, stride = list(t.shape), list(t.stride)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    stride[d0], stride[d1] = stride[d1], stride[d0]
    return _alias(t, tuple(shape), tuple(stride), "transpose")


def unsqueeze(t: Tensor, dim: int) -> Tensor:
    dim = dim if dim >= 0 else dim + t.ndim + 1
    # aten/src/ATen/InferSize / inferUnsqueezeGeometry
    st = t.stride[dim] * t.sizes[dim] if dim < t.ndim else 1
    return _alias(t, t.shape[:dim] + (Dim.const(1),) + t.shape[dim:],
                  t.stride[:dim] + (st,) + t.stride[dim:], "unsqueeze")


def expand(t: Tensor, shape: tuple[Dim, ...]) -> Tensor:
    """Tensor.expand: new or size-1 dimensions broadcast with stride 0."""
    pad = len(shape) - t.ndim
    stride = [0] * pad
    for i, (s, st) in enumerate(zip(t.sizes, t.stride, strict=True)):
        stride.append(st if s == shape[pad + i].value else 0)
    return _alias(t, shape, tuple(stride), "expand")


def narrow(t: Tensor, dim: int, start: int, length: Dim) -> Tensor:
    """Slicing t[..., start:start+length] along dim (split, chunk, rotate_half's halves)."""
    dim = dim % t.ndim
    shape = t.shape[:dim] + (length,) + t.shape[dim + 1:]
    return _alias(t, shape, t.stride, "slice", start * t.stride[dim])


def slice_step(t: Tensor, dim: int, start: int, length: Dim, step: int) -> Tensor:
    """t[..., start::step] along dim (Cohere's rotate_half: x[..., ::2], x[..., 1::2]): a
    view, its stride multiplied by step."""
    dim = dim % t.ndim
    stride = t.stride[:dim] + (t.stride[dim] * step,) + t.stride[dim + 1:]
    return _alias(t, t.shape[:dim] + (length,) + t.shape[dim + 1:], stride, "slice",
                  start * t.stride[dim])


def view_as_complex(t: Tensor) -> Tensor:
    """torch.view_as_complex: a (..., 2) float32 tensor whose last dim has stride 1 as the
    complex64 (...) view of the same storage (its other strides halved)."""
    if t.dtype != F32 or t.sizes[-1] != 2 or t.stride[-1] != 1:
        raise ValueError(f"view_as_complex of {t.dtype.name} {t.sizes} strides {t.stride}")
    out = Tensor(t.shape[:-1], tuple(s // 2 for s in t.stride[:-1]), C64, t.storage,
                 t.requires_grad and t.trace.grad_enabled, t.trace, t.offset // 2)
    t.trace.record("view_as_complex", out)
    return out


def view_as_real(t: Tensor) -> Tensor:
    """torch.view_as_real: a complex64 tensor as the float32 (..., 2) view of its storage."""
    out = Tensor(t.shape + (Dim.const(2),), tuple(s * 2 for s in t.stride) + (1,), F32,
                 t.storage, t.requires_grad and t.trace.grad_enabled, t.trace, t.offset * 2)
    t.trace.record("view_as_real", out)
    return out


def split(t: Tensor, size: Dim, dim: int) -> list[Tensor]:
    """Tensor.split(size, dim) into equal parts."""
    n = t.shape[dim].value // size.value
    return [narrow(t, dim, i * size.value, size) for i in range(n)]


def contiguous(t: Tensor) -> Tensor:
    return t if t.is_contiguous() else clone(t)


def clone(t: Tensor) -> Tensor:
    """A contiguous copy (CloneBackward0 keeps nothing)."""
    out = _new(t, t.shape, t.dtype, t.requires_grad)
    t.trace.record("clone", out)
    return out


def to(t: Tensor, dtype: DType) -> Tensor:
    """Tensor.to(dtype): the tensor itself when the dtype is already dtype, else a copy with
    preserved strides (_to_copy; ToCopyBackward0 keeps nothing)."""
    if t.dtype == dtype:
        return t
    out = _new(t, t.shape, dtype, t.requires_grad and dtype.floating,
               preserve_strides(t.sizes, t.stride))
    t.trace.record("to", out)
    return out


# -- elementwise --------------------------------------------------------------------------------
def _broadcast(*ts: Tensor) -> tuple[Dim, ...]:
    n = max(t.ndim for t in ts)
    shape = []
    for i in range(n):
        dims = [t.shape[i - n + t.ndim] for t in ts if i - n + t.ndim >= 0]
        big = [d for d in dims if d.value != 1]
        if len({d.value for d in big}) > 1:
            raise ValueError(f"shapes {[t.sizes for t in ts]} do not broadcast")
        shape.append(big[0] if big else dims[0])
    return tuple(shape)


def _pointwise(op: str, inputs: list[Tensor], dtype: DType | None = None) -> Tensor:
    """An elementwise result: broadcast shape, TensorIterator's strides, promoted dtype."""
    shape = _broadcast(*inputs)
    sizes = tuple(d.value for d in shape)
    stride = iterator_strides(sizes, [(t.sizes, t.stride, t.dtype.itemsize) for t in inputs])
    if dtype is None:
        dtype = inputs[0].dtype
        for t in inputs[1:]:
            dtype = promote(dtype, t.dtype)
    return _new(inputs[0], shape, dtype, _rg(*inputs), stride)


def add(a: Tensor, b: Tensor | Scalar) -> Tensor:
    # derivatives.yaml add.Tensor: self: handle_r_to_c(self, grad); other: grad * alpha
    out = _pointwise("add", [a, b] if isinstance(b, Tensor) else [a])
    a.trace.record("add", out)
    return out


def sub(a: Tensor, b: Tensor | Scalar) -> Tensor:
    out = _pointwise("sub", [a, b] if isinstance(b, Tensor) else [a])
    a.trace.record("sub", out)
    return out


def neg(a: Tensor) -> Tensor:
    out = _pointwise("neg", [a])
    a.trace.record("neg", out)
    return out


def mul(a: Tensor, b: Tensor | Scalar) -> Tensor:
    """derivatives.yaml mul.Tensor: self: mul_tensor_backward(grad, other, ...), other:
    mul_tensor_backward(grad, self, ...): each operand kept for the other's gradient;
    mul.Scalar (a Python number): nothing."""
    if not isinstance(b, Tensor):
        out = _pointwise("mul", [a])
        a.trace.record("mul", out)
        return out
    out = _pointwise("mul", [a, b])
    a.trace.record("mul", out, [("other", b, a.requires_grad), ("self", a, b.requires_grad)])
    return out


def div(a: Tensor, b: Tensor | Scalar) -> Tensor:
    """Division by a Python number (derivatives.yaml div.Scalar: self: grad / other): a new
    tensor, nothing saved (soft-capping's scores / cap). By a tensor (div.Tensor: self:
    div_tensor_self_backward(grad, other, ...), other: div_tensor_other_backward(grad, self,
    other)): other kept for either gradient, self for other's."""
    if not isinstance(b, Tensor):
        out = _pointwise("div", [a])
        a.trace.record("div", out)
        return out
    out = _pointwise("div", [a, b])
    a.trace.record("div", out, [("other", b, a.requires_grad or b.requires_grad),
                                ("self", a, b.requires_grad)])
    return out


def sqrt(a: Tensor) -> Tensor:
    """derivatives.yaml sqrt: self: grad / (2 * result)."""
    return _unary_saving("sqrt", a, "result")


def clamp(a: Tensor) -> Tensor:
    """clamp(min=...) or clamp(min, max) with Python numbers (derivatives.yaml clamp:
    self: clamp_backward(grad, self, min, max))."""
    return _unary_saving("clamp", a, "self")


def acos(a: Tensor) -> Tensor:
    """derivatives.yaml acos: self: grad * -((-self * self + 1).rsqrt()). On autocast's
    fp32 list (autocast_mode.h AT_FORALL_FP32)."""
    return _unary_saving("acos", a, "self")


def vector_norm(a: Tensor) -> Tensor:
    """a.norm(p=2, dim=-1, keepdim=True) (linalg_vector_norm; derivatives.yaml: self:
    linalg_vector_norm_backward(grad, self, ord, result, dim, keepdim)): keeps its input and
    result. Under autocast norm.ScalarOpt_dim is fp32_append_dtype (autocast_mode.h): the
    input as it is, the norm computed and returned in fp32 (on CUDA; the CPU's autocast
    leaves it alone)."""
    dtype = autocast.fp32_append_dtype(a)
    out = _new(a, a.shape[:-1] + (Dim.const(1),), dtype, a.requires_grad)
    a.trace.record("linalg_vector_norm", out, [("self", a, True), ("result", out, True)])
    return out


def std(a: Tensor) -> Tensor:
    """std(dim=-1, keepdim=True, unbiased=False) (derivatives.yaml std.correction: self:
    std_backward(result, grad, self, dim, correction, keepdim)): keeps its input and result."""
    out = _new(a, a.shape[:-1] + (Dim.const(1),), a.dtype, a.requires_grad)
    a.trace.record("std", out, [("self", a, True), ("result", out, True)])
    return out


def div_tensor(a: Tensor, b: Tensor, inplace: bool = False) -> Tensor:
    """a / b with a tensor b (a 0-d scale, a norm's std). derivatives.yaml div.Tensor: self:
    div_tensor_self_backward(grad, other, ...), other: div_tensor_other_backward(grad, self,
    other): other for either gradient, self for other's. inplace (a /= b): a's dtype and
    layout, and for other's gradient a clone of the original self."""
    if inplace:
        out = Tensor(a.shape, a.stride, a.dtype, a.storage, _rg(a, b), a.trace, a.offset)
    else:
        out = _pointwise("div", [a, b])
    saves: list[tuple[str, Tensor | None, bool]] = [("other", b, _rg(a, b))]
    if b.requires_grad:
        self_ = a
        if inplace:
            with a.trace.no_grad():
                self_ = _new(a, a.shape, a.dtype, False, preserve_strides(a.sizes, a.stride))
        saves.append(("self", self_, True))
    a.trace.record("div_" if inplace else "div", out, saves)
    return out


def mul_(a: Tensor, other: Tensor) -> Tensor:
    """a *= other, in place (Switch Transformers' and DBRX's router jitter). derivatives.yaml
    mul.Tensor (mul_ runs its formulas): self: mul_tensor_backward(grad, other, ...), other:
    mul_tensor_backward(grad, self, ...): other kept for self's gradient; for other's, an
    in-place op keeps a clone of the original self. a's dtype and layout."""
    out = Tensor(a.shape, a.stride, a.dtype, a.storage, _rg(a, other), a.trace, a.offset)
    saves: list[tuple[str, Tensor | None, bool]] = [("other", other, a.requires_grad)]
    if other.requires_grad:
        with a.trace.no_grad():
            original = _new(a, a.shape, a.dtype, False, preserve_strides(a.sizes, a.stride))
        saves.append(("self", original, True))
    a.trace.record("mul_", out, saves)
    return out


def pow(a: Tensor, exponent: Scalar) -> Tensor:
    """derivatives.yaml pow.Tensor_Scalar: self: pow_backward(grad, self, exponent)."""
    (a,) = autocast.cast_inputs("pow", a)
    out = _pointwise("pow", [a])
    a.trace.record("pow", out, [("self", a, True)])
    return out


def _unary_saving(op: str, a: Tensor, role: str) -> Tensor:
    """A unary op keeping its input or result; under autocast its input cast first where the
    device's fp32 list names it (CUDA's exp, log, softplus, expm1, rsqrt, acos)."""
    (a,) = autocast.cast_inputs(op, a)
    out = _pointwise(op, [a])
    a.trace.record(op, out, [(role, a if role == "self" else out, True)])
    return out


def rsqrt(a: Tensor) -> Tensor:
    """derivatives.yaml rsqrt: self: -0.5 * grad * result.pow(3)."""
    return _unary_saving("rsqrt", a, "result")


def tanh(a: Tensor) -> Tensor:
    """derivatives.yaml tanh: self: tanh_backward(grad, result)."""
    return _unary_saving("tanh", a, "result")


def relu(a: Tensor) -> Tensor:
    """derivatives.yaml relu: self: threshold_backward(grad, result, 0)."""
    return _unary_saving("relu", a, "result")


def sigmoid(a: Tensor) -> Tensor:
    """derivatives.yaml sigmoid: self: sigmoid_backward(grad, result)."""
    return _unary_saving("sigmoid", a, "result")


def silu(a: Tensor) -> Tensor:
    """derivatives.yaml silu: self: silu_backward(grad, self)."""
    return _unary_saving("silu", a, "self")


def gelu(a: Tensor) -> Tensor:
    """derivatives.yaml gelu: self: gelu_backward(grad, self, approximate)."""
    return _unary_saving("gelu", a, "self")


def softplus(a: Tensor) -> Tensor:
    """derivatives.yaml softplus: self: softplus_backward(grad, self, beta, threshold)."""
    return _unary_saving("softplus", a, "self")


def exp(a: Tensor) -> Tensor:
    """derivatives.yaml exp: self: grad * result.conj()."""
    return _unary_saving("exp", a, "result")


def repeat(t: Tensor, dim: int, times: int | Dim) -> Tensor:
    """Tensor.repeat with times along dim (1 elsewhere): a new contiguous tensor;
    derivatives.yaml repeat: self: repeat_backward(grad, repeats, self.sym_sizes()) keeps
    sizes only."""
    dim = dim % t.ndim
    out = _new(t, t.shape[:dim] + (t.shape[dim] * times,) + t.shape[dim + 1:], t.dtype,
               t.requires_grad)
    t.trace.record("repeat", out)
    return out


def expm1(a: Tensor) -> Tensor:
    """derivatives.yaml expm1: self: grad * (result.conj() + 1)."""
    return _unary_saving("expm1", a, "result")


def minimum(a: Tensor, b: Tensor) -> Tensor:
    """torch.min(a, b), elementwise. derivatives.yaml minimum: self: at::where(self == other,
    grad / 2, grad).masked_fill_(self > other, 0), other: the same with other: both
    operands, kept whenever either needs a gradient."""
    out = _pointwise("minimum", [a, b])
    need = _rg(a, b)
    a.trace.record("minimum", out, [("self", a, need), ("other", b, need)])
    return out


def maximum(a: Tensor, b: Tensor) -> Tensor:
    """torch.max(a, b), elementwise. derivatives.yaml maximum: self: at::where(self == other,
    grad / 2, grad).masked_fill_(self < other, 0), other: the same with other: both
    operands, kept whenever either needs a gradient. A 0-d b of a's category (XGLM's fp32
    finfo.min) does not promote a dimensioned a (torch.result_type's rule)."""
    out = _pointwise("maximum", [a, b], a.dtype if a.shape and not b.shape else None)
    need = _rg(a, b)
    a.trace.record("maximum", out, [("self", a, need), ("other", b, need)])
    return out


def gt(a: Tensor, b: Scalar) -> Tensor:
    """a > b: a bool tensor, no gradient."""
    out = _pointwise("gt", [a], BOOL)
    out.requires_grad = False
    a.trace.record("gt", out)
    return out


def where(condition: Tensor, a: Tensor, b: Tensor | Scalar) -> Tensor:
    """torch.where(condition, a, b) (b a Python number: a's dtype, T5's min_dtype fill).
    derivatives.yaml where.self: self: where(condition, grad, 0), other: where(condition, 0,
    grad): the condition."""
    if not isinstance(b, Tensor):
        out = _pointwise("where", [condition, a], a.dtype)
    else:
        out = _pointwise("where", [condition, a, b], promote(a.dtype, b.dtype))
    a.trace.record("where", out, [("condition", condition, True)])
    return out


def mean(a: Tensor, dim: int = -1) -> Tensor:
    """mean(dim, keepdim=True): sum_backward(...) / numel keeps sizes only."""
    dim = dim % a.ndim
    shape = a.shape[:dim] + (Dim.const(1),) + a.shape[dim + 1:]
    out = _new(a, shape, a.dtype, a.requires_grad)
    a.trace.record("mean", out)
    return out


def logsumexp(a: Tensor) -> Tensor:
    """torch.logsumexp(a, dim=-1) (keepdim False). derivatives.yaml logsumexp: self:
    logsumexp_backward(grad, self, result, dim, keepdim): the input and the result. On
    autocast's fp32 list (AT_FORALL_FP32)."""
    (a,) = autocast.cast_inputs("logsumexp", a)
    out = _new(a, a.shape[:-1], a.dtype, a.requires_grad)
    a.trace.record("logsumexp", out, [("self", a, True), ("result", out, True)])
    return out


def cat(ts: list[Tensor], dim: int) -> Tensor:
    """cat: cat_tensors_backward keeps sizes only; a contiguous result in the widest dtype
    (the CPU autocast's promote list casts the narrower inputs to it first)."""
    ts = list(autocast.cast_inputs("cat", *ts))
    dim = dim % ts[0].ndim
    width = ts[0].shape[dim]
    for t in ts[1:]:
        width = width + t.shape[dim]
    dtype = ts[0].dtype
    for t in ts[1:]:
        dtype = promote(dtype, t.dtype)
    shape = ts[0].shape[:dim] + (width,) + ts[0].shape[dim + 1:]
    out = _new(ts[0], shape, dtype, _rg(*ts))
    ts[0].trace.record("cat", out)
    return out


def gather(t: Tensor, dim: int, index: Tensor) -> Tensor:
    """torch.gather: a new contiguous tensor of the index's shape in t's dtype.
    derivatives.yaml gather: self: gather_backward(grad, self, dim, index, sparse_grad):
    the index and self itself (the formula names self, so autograd keeps it whole: DeBERTa's
    gathered c2p/p2c scores) kept for self's gradient (the int64 index is no
    differentiable input)."""
    out = _new(t, index.shape, t.dtype, t.requires_grad)
    t.trace.record("gather", out, [("index", index, t.requires_grad),
                                   ("self", t, t.requires_grad)])
    return out


def pad(t: Tensor, extra: Dim | int, dim: int = -1) -> Tensor:
    """constant_pad_nd: a new tensor, the dimension grown by extra, allocated in the input's
    suggest_memory_format (PadNd.cpp): channels-last where a 4-D input's strides are
    channels-last-like (a (B, T, H, P) view of a transposed convolution output), else
    contiguous (no padding: a copy, its layout preserved)."""
    dim = dim % t.ndim
    shape = t.shape[:dim] + (t.shape[dim] + extra,) + t.shape[dim + 1:]
    none = (extra.value if isinstance(extra, Dim) else extra) == 0
    stride = preserve_strides(t.sizes, t.stride) if none else \
        _channels_last_strides(tuple(d.value for d in shape)) \
        if t.ndim == 4 and _channels_last_like(t.sizes, t.stride) else None
    out = _new(t, shape, t.dtype, t.requires_grad, stride)
    t.trace.record("pad", out)
    return out


def _channels_last_like(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """c10's is_channels_last_strides_2d_s4 (MemoryFormat.h): the strides of dims 1, 3, 2, 0
    non-decreasing (a size-1 dim's not multiplied), NCHW where ambiguous."""
    lowest = 0
    if strides[1] == 0:
        return False
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < lowest:
            return False
        if d == 0 and lowest == strides[1]:
            return False
        lowest = strides[d] * (sizes[d] if sizes[d] > 1 else 1)
    return True


def _channels_last_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """get_channels_last_strides_2d: C fastest, then W, H, N."""
    n, c, h, w = (max(s, 1) for s in sizes)
    return (h * w * c, 1, w * c, c)


# -- softmax, dropout ---------------------------------------------------------------------------
def _softmax_like(op: str, a: Tensor, dtype: DType | None) -> Tensor:
    a = autocast.softmax_input(op, a, dtype)
    out = _new(a, a.shape, a.dtype, a.requires_grad)
    a.trace.record(op, out, [("result", out, True)])
    return out


def softmax(a: Tensor, dtype: DType | None = None) -> Tensor:
    """derivatives.yaml _softmax: self: _softmax_backward_data(grad, result, dim, ...); with
    dtype, the input is converted first (at::softmax: input.toType(dtype))."""
    return _softmax_like("softmax", a, dtype)


def safe_softmax(a: Tensor) -> Tensor:
    """derivatives.yaml _safe_softmax: the same backward as _softmax (result)."""
    return _softmax_like("_safe_softmax", a, None)


def log_softmax(a: Tensor, dtype: DType | None = None) -> Tensor:
    """derivatives.yaml _log_softmax: self: _log_softmax_backward_data(grad, result, ...)."""
    return _softmax_like("log_softmax", a, dtype)


def dropout(a: Tensor, p: float) -> Tensor:
    """at::dropout in training. p = 0: the input itself. CUDA: native_dropout, whose
    backward keeps result1, the bool mask. CPU (aten/src/ATen/native/Dropout.cpp
    _dropout_impl): noise = empty_like(input).bernoulli_(1 - p).div_(1 - p); input * noise,
    a MulBackward0 keeping the noise (the input's dtype and layout)."""
    if p == 0:
        return a
    if a.trace.device == "cuda":
        out = _new(a, a.shape, a.dtype, a.requires_grad, preserve_strides(a.sizes, a.stride))
        mask = _new(a, a.shape, BOOL, False, out.stride)
        a.trace.record("native_dropout", out, [("result1", mask, True)])
        return out
    with a.trace.no_grad():
        noise = _new(a, a.shape, a.dtype, False, preserve_strides(a.sizes, a.stride))
    return mul(a, noise)


# -- matmuls ------------------------------------------------------------------------------------
def mm(a: Tensor, b: Tensor, op: str = "mm", bias: Tensor | None = None) -> Tensor:
    """derivatives.yaml mm: self: mm_mat1_backward(grad, mat2, ...) keeps mat2 when self
    needs a gradient... and self for mat2's: each operand for the other's. addmm the same
    (bias: grad alone). FLOPs 2·m·k·n (flop_counter's mm_flop / addmm_flop). On autocast's
    lower-precision list (called at the top level: torch.mm; inside matmul and linear
    autocast has cast already)."""
    a, b = autocast.cast_inputs(op, a, b)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    out = _new(a, (m, n), a.dtype, _rg(a, b, bias))
    a.trace.record(op, out, [("mat2", b, a.requires_grad), ("self", a, b.requires_grad)],
                   flops=2 * m * k * n)
    return out


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """derivatives.yaml bmm: self: grad.bmm(mat2.transpose(1, 2)), mat2:
    self.transpose(1, 2).bmm(grad). FLOPs 2·b·m·k·n (flop_counter's bmm_flop). On
    autocast's lower-precision list (torch.bmm at the top level; einsum's bmm on the CPU)."""
    a, b = autocast.cast_inputs("bmm", a, b)
    nb, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
    out = _new(a, (nb, m, n), a.dtype, _rg(a, b))
    a.trace.record("bmm", out, [("mat2", b, a.requires_grad), ("self", a, b.requires_grad)],
                   flops=2 * nb * m * k * n)
    return out


def baddbmm(w: Tensor, a: Tensor, b: Tensor, alpha: Scalar = 1.0) -> Tensor:
    """torch.baddbmm(w, a, b, alpha=alpha): w + alpha · a @ b, batched (peft's
    _LoraFactorsProxy runs it with autocast off). derivatives.yaml baddbmm: self:
    maybe_multiply(grad, beta) (nothing kept), batch1: grad.bmm(batch2.transpose(1, 2)) *
    alpha, batch2: batch1.transpose(1, 2).bmm(grad) * alpha: each batch for the other's
    gradient. FLOPs 2·b·m·k·n (flop_counter's baddbmm_flop)."""
    nb, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
    out = _new(w, (nb, m, n), w.dtype, _rg(w, a, b))  # (the three of one dtype)
    w.trace.record("baddbmm", out, [("batch2", b, a.requires_grad),
                                    ("batch1", a, b.requires_grad)],
                   flops=2 * nb * m * k * n)
    return out


def permute(t: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Tensor.permute: a view, the sizes and strides reordered."""
    return _alias(t, tuple(t.shape[d] for d in dims), tuple(t.stride[d] for d in dims),
                  "permute")


def _foldable(t: Tensor) -> bool:
    """matmul's should_fold: t.view(-1, t.size(-1)) is free when the leading dims are
    contiguous with each other (aten/src/ATen/native/LinearAlgebra.cpp)."""
    return all(t.stride[i] == t.stride[i + 1] * t.sizes[i + 1] for i in range(t.ndim - 2))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """at::matmul (_matmul_impl): 2-D @ 2-D is mm; N-D @ 2-D folds the batch into rows when
    should_fold allows (the leading dims contiguous with each other, or the matrix requiring
    a gradient: then the rows are a reshape, a copy where no view exists); otherwise both
    sides are expanded to the common batch and reshaped to 3-D (a copy where computeStride
    finds no view) for bmm."""
    a, b = autocast.cast_inputs("matmul", a, b)
    with autocast.disabled(a.trace):
        return _matmul(a, b)


def _matmul(a: Tensor, b: Tensor) -> Tensor:
    if a.ndim == 2 and b.ndim == 2:
        return mm(a, b)
    # should_fold (ATen's matmul): N-D @ 2-D folds the batch into rows when the matrix
    # requires a gradient (a copy in the forward rather than a batch-sized expanded operand
    # in the backward), as a linear layer's weight does, or when the fold is a view; 2-D @
    # N-D folds when the 2-D operand requires one (measured: torch 2.13, saved_tensors_hooks)
    if a.ndim >= 3 and b.ndim == 2 and (b.requires_grad or _foldable(a)):
        out = mm(reshape(a, (_rows(a), a.shape[-1])), b)
        return _alias(out, a.shape[:-1] + (b.shape[1],), contiguous_strides(
            a.sizes[:-1] + (b.sizes[1],)), "_unsafe_view")
    if a.ndim == 2 and b.ndim >= 3 and a.requires_grad:
        # 2-D @ N-D folds b's batch: (bᵀ folded) @ aᵀ, transposed back and made contiguous
        bt = transpose(b, -1, -2)
        out = mm(reshape(bt, (_rows(bt), bt.shape[-1])), transpose(a, 0, 1))
        out = _alias(out, bt.shape[:-1] + (a.shape[0],), contiguous_strides(
            bt.sizes[:-1] + (a.sizes[0],)), "_unsafe_view")
        return contiguous(transpose(out, -1, -2))
    batch = _broadcast_batch(a, b)
    nb = Dim.const(1)
    for d in batch:
        nb = nb * d
    a3 = reshape(expand(a, batch + a.shape[-2:]), (nb,) + a.shape[-2:])
    b2 = b.shape[-2:] if b.ndim >= 2 else (b.shape[0], Dim.const(1))
    b3 = reshape(expand(b, batch + b2), (nb,) + b2)
    out = bmm(a3, b3)
    shape = batch + (a.shape[-2], b.shape[-1])
    return _alias(out, shape, contiguous_strides(tuple(d.value for d in shape)),
                  "_unsafe_view")


def _rows(t: Tensor) -> Dim:
    """The leading dimensions folded into matrix rows."""
    rows = Dim.const(1)
    for d in t.shape[:-1]:
        rows = rows * d
    return rows


def _broadcast_batch(a: Tensor, b: Tensor) -> tuple[Dim, ...]:
    ba, bb = a.shape[:-2], b.shape[:-2]
    n = max(len(ba), len(bb))
    out = []
    for i in range(n):
        dims = [s[i - n + len(s)] for s in (ba, bb) if i - n + len(s) >= 0]
        big = [d for d in dims if d.value != 1]
        out.append(big[0] if big else dims[0])
    return tuple(out)


def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """at::linear (aten/src/ATen/native/Linear.cpp): 2-D input with a bias is addmm; a
    contiguous input with a bias is flattened to 2-D for addmm (_flatten_nd_linear);
    otherwise matmul(x, w.t()) and an in-place bias add."""
    x, w, b = autocast.cast_linear(x, w, b)
    with autocast.disabled(x.trace):
        wt = transpose(w, 0, 1)
        if b is not None and (x.ndim == 2 or x.is_contiguous()):
            if x.ndim == 2:
                return mm(x, wt, "addmm", b)
            out = mm(reshape(x, (_rows(x), x.shape[-1])), wt, "addmm", b)
            return view(out, x.shape[:-1] + (w.shape[0],))
        out = _matmul(x, wt)
        if b is not None:
            out.requires_grad = out.requires_grad or b.requires_grad
            x.trace.record("add_", out)
        return out


def bnb_matmul(x: Tensor, w: Tensor, b: Tensor | None, keeps_input: bool) -> Tensor:
    """One bitsandbytes autograd function over a frozen quantised weight w (out, in), as
    ONE op: MatMul4Bit (bitsandbytes/autograd/_functions.py) dequantises w to x's dtype and
    runs F.linear(x, w, b); since 0.44 it keeps only the quantised weight
    (ctx.tensors = (None, B)), before 0.44 its input too (ctx.tensors = (A, B), whenever A
    needs a gradient). MatMul8bitLt keeps A likewise in every version (ctx.tensors = (CAt,
    subA, A): CAt only for the weight's gradient, which a frozen base has none of; subA,
    the outlier columns above llm_int8_threshold, is data-dependent and not counted). The
    quantised weight is a parameter, not an activation. FLOPs: the matmul's, 2·rows·in·out
    (FlopCounterMode sees the F.linear of the dequantised weight)."""
    out = _new(x, x.shape[:-1] + (w.shape[0],), x.dtype, _rg(x, w, b))
    x.trace.record("bnb_matmul", out, [("A", x, keeps_input)],
                   flops=2 * _rows(x) * x.shape[-1] * w.shape[0])
    return out


def nf4_linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """torchao's linear_nf4 over a frozen NF4Tensor weight w (out, in), as torchtune's
    LoRALinear and FrozenNF4Linear call it (then + bias): LinearNF4.forward
    (torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py, pytorch/ao
    36027d82d1ad9949597ea16002ff4940374b1b94) is ctx.save_for_backward(weight) and
    F.linear(input, weight.to(input.dtype)): it keeps the quantised weight alone (a parameter,
    not an activation), never its input; its backward is grad_output @ weight.to(dtype).
    FLOPs: the F.linear's, 2·rows·in·out."""
    out = _new(x, x.shape[:-1] + (w.shape[0],), x.dtype, _rg(x, w, None))
    x.trace.record("nf4_linear", out, [], flops=2 * _rows(x) * x.shape[-1] * w.shape[0])
    if b is not None:
        return add(out, b)
    return out


def conv1d_gpt2(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """transformers' pytorch_utils.Conv1D.forward: addmm(bias, x.view(-1, nx), weight)
    viewed back (the weight stored (in, out), not transposed)."""
    x, w, bias = autocast.cast_linear(x, w, b)
    with autocast.disabled(x.trace):
        out = mm(view(x, (_rows(x), x.shape[-1])), w, "addmm", bias)
        return view(out, x.shape[:-1] + (w.shape[1],))


# -- embedding, norms, loss ---------------------------------------------------------------------
def embedding(w: Tensor, ids: Tensor) -> Tensor:
    """derivatives.yaml embedding: weight: embedding_backward(grad, indices, ...): the ids
    are kept only for the weight's gradient."""
    out = _new(w, ids.shape + (w.shape[1],), w.dtype, w.requires_grad)
    w.trace.record("embedding", out, [("indices", ids, w.requires_grad)])
    return out


def layer_norm(x: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
    """derivatives.yaml native_layer_norm: native_layer_norm_backward(grad, input, ...,
    result1, result2, weight, bias, ...): input, mean, rstd, weight and bias whenever the
    node exists (a weight is a parameter, kept as the model's own memory, unless it was
    computed: NemotronLayerNorm1P's weight + 1). mean and rstd are (..., 1): fp32 on CUDA
    (acc type), the input's dtype on the CPU, the weight's where the two differ (a 16-bit
    input under autocast with an fp32 weight: layer_norm_cpu's mixed type, measured)."""
    (x,) = autocast.cast_inputs("layer_norm", x)
    out = _new(x, x.shape, x.dtype, _rg(x, w, b))
    stats_dtype = F32 if x.trace.device == "cuda" else x.dtype
    if x.trace.device == "cpu" and w is not None and w.dtype != x.dtype:
        stats_dtype = w.dtype
    stats = x.shape[:-1] + (Dim.const(1),)
    mean_ = _new(x, stats, stats_dtype, False)
    rstd = _new(x, stats, stats_dtype, False)
    x.trace.record("native_layer_norm", out, [("input", x, True), ("result1", mean_, True),
                                              ("result2", rstd, True), ("weight", w, True),
                                              ("bias", b, True)])
    return out


def nll_loss(logp: Tensor, target: Tensor) -> Tensor:
    """derivatives.yaml nll_loss_forward: self: nll_loss_backward(grad, self, target,
    weight, reduction, ignore_index, total_weight): the log-probabilities, the targets and
    the 0-d total_weight (in the input's dtype)."""
    (logp,) = autocast.cast_inputs("nll_loss", logp)
    out = _new(logp, (), logp.dtype, logp.requires_grad)
    total_weight = _new(logp, (), logp.dtype, False)
    logp.trace.record("nll_loss", out, [("self", logp, True), ("target", target, True),
                                         ("total_weight", total_weight, True)])
    return out


def cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """F.cross_entropy (cross_entropy_loss): log_softmax over the classes, then nll_loss."""
    (logits,) = autocast.cast_inputs("cross_entropy", logits)
    with autocast.disabled(logits.trace):
        return nll_loss(log_softmax(logits), target)


# -- mixture of experts: routing and the experts' gathers ------------------------------------------
def select(t: Tensor, dim: int, index: int) -> Tensor:
    """t[index] along dim (an expert's slice of a 3-D weight): a view without that dim."""
    dim = dim % t.ndim
    return _alias(t, t.shape[:dim] + t.shape[dim + 1:], t.stride[:dim] + t.stride[dim + 1:],
                  "select", index * t.stride[dim])


def sum_dim(a: Tensor, dim: int, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
    """sum.dim_IntList: sum_backward(grad, self.sym_sizes(), ...) keeps sizes only; dtype:
    the result's (torch.sum(..., dtype=...)); CUDA's autocast sets fp32 where none is given
    (fp32_set_opt_dtype)."""
    dtype = autocast.opt_dtype("sum", a, dtype)
    dim = dim % a.ndim
    rest = (Dim.const(1),) if keepdim else ()
    out = _new(a, a.shape[:dim] + rest + a.shape[dim + 1:], dtype or a.dtype, a.requires_grad)
    a.trace.record("sum", out)
    return out


def topk(a: Tensor, k: Dim) -> tuple[Tensor, Tensor]:
    """derivatives.yaml topk: self: value_selecting_reduction_backward_symint(grad, dim,
    indices, ...): the int64 indices (values and indices (..., k), new)."""
    shape = a.shape[:-1] + (k,)
    values = _new(a, shape, a.dtype, a.requires_grad)
    with a.trace.no_grad():
        indices = _new(a, shape, I64, False)
    a.trace.record("topk", values, [("indices", indices, True)])
    return values, indices


def max_dim(a: Tensor) -> Tensor:
    """a.max(dim=-1, keepdim=True).values (GPT-OSS's sink logits: the row's maximum).
    derivatives.yaml max.dim: self: value_selecting_reduction_backward_symint(grad, dim,
    indices, ...): the int64 indices (values and indices (..., 1), new)."""
    shape = a.shape[:-1] + (Dim.const(1),)
    values = _new(a, shape, a.dtype, a.requires_grad)
    with a.trace.no_grad():
        indices = _new(a, shape, I64, False)
    a.trace.record("max", values, [("indices", indices, True)])
    return values


def div_(a: Tensor, other: Tensor) -> Tensor:
    """a /= other, in place (the router's renormalisation). derivatives.yaml div.Tensor:
    self: div_tensor_self_backward(grad, other, ...), other: div_tensor_other_backward(grad,
    self, other): other serves both gradients; an in-place op whose formula reads self
    keeps a clone of the original (autograd's original_self), for other's gradient."""
    out = Tensor(a.shape, a.stride, promote(a.dtype, other.dtype), a.storage, _rg(a, other),
                 a.trace, a.offset)
    saves: list[tuple[str, Tensor | None, bool]] = [("other", other, True)]
    if other.requires_grad:
        with a.trace.no_grad():
            original = _new(a, a.shape, a.dtype, False, preserve_strides(a.sizes, a.stride))
        saves.append(("self", original, True))
    a.trace.record("div_", out, saves)
    return out


def index(t: Tensor, indices: list[Tensor], dim: int = 0) -> Tensor:
    """t[i0, i1, ...] with int64 index tensors over its leading dims, or from dim on after
    full slices (t[:, :, [i]]: advanced indexing, a copy). derivatives.yaml index.Tensor:
    self: index_backward(..., indices, grad): the indices."""
    shape = t.shape[:dim] + indices[0].shape + t.shape[dim + len(indices):]
    out = _new(t, shape, t.dtype, t.requires_grad)
    t.trace.record("index", out, [(f"indices{i}", ix, True) for i, ix in enumerate(indices)])
    return out


def index_add_(t: Tensor, index_: Tensor, source: Tensor) -> Tensor:
    """t.index_add_(0, index, source), in place. derivatives.yaml index_add: self: grad;
    source: grad.index_select(dim, index).expand_as(source): the index and the source,
    each only for the source's gradient."""
    out = Tensor(t.shape, t.stride, t.dtype, t.storage, _rg(t, source), t.trace, t.offset)
    t.trace.record("index_add_", out, [("index", index_, source.requires_grad),
                                       ("source", source, source.requires_grad)])
    return out


def grouped_mm(a: Tensor, b: Tensor, offs: Tensor) -> Tensor:
    """torch.nn.functional.grouped_mm(a, b, offs=offs): the rows of a in groups (offs: the
    int32 group ends), group g times b[g]. derivatives.yaml _grouped_mm: self:
    _grouped_mm_mat1_backward(grad, mat2, ..., offs), mat2: _grouped_mm_mat2_backward(grad,
    self, ..., offs): each operand for the other's gradient, offs for both. FLOPs: each row
    once through its group's matrix, 2·rows·k·n (torch.utils.flop_counter counts none)."""
    rows, k, n = a.shape[0], a.shape[1], b.shape[-1]
    out = _new(a, (rows, n), a.dtype, _rg(a, b))
    a.trace.record("_grouped_mm", out, [("mat2", b, a.requires_grad),
                                        ("self", a, b.requires_grad), ("offs", offs, True)],
                   flops=2 * rows * k * n)
    return out


def masked_fill(a: Tensor, mask: Tensor) -> Tensor:
    """a.masked_fill(mask, value). derivatives.yaml masked_fill.Scalar: self:
    grad.masked_fill(mask, 0): the bool mask."""
    out = _new(a, a.shape, a.dtype, a.requires_grad)
    a.trace.record("masked_fill", out, [("mask", mask, True)])
    return out


def scatter(a: Tensor, index_: Tensor) -> Tensor:
    """torch.scatter(a, -1, index, value). derivatives.yaml scatter.value: self:
    grad.scatter(dim, index, 0): the index."""
    out = _new(a, a.shape, a.dtype, a.requires_grad)
    a.trace.record("scatter", out, [("index", index_, True)])
    return out


def scatter_(a: Tensor, index_: Tensor, src: Tensor) -> Tensor:
    """a.scatter_(-1, index, src), in place (Llama4Router's scores over a -inf full_like).
    derivatives.yaml scatter.src: self: grad.scatter(dim, index, 0), src: grad.gather(dim,
    index): the index, for either."""
    out = Tensor(a.shape, a.stride, a.dtype, a.storage, _rg(a, src) and a.trace.grad_enabled,
                 a.trace, a.offset)
    a.trace.record("scatter_", out, [("index", index_, True)])
    return out


def function(name: str, inputs: list[Tensor], saved: list[Tensor], out: Tensor) -> Tensor:
    """A custom torch.autograd.Function: its output requires grad when an input does, and
    ctx.save_for_backward keeps what it names whenever the node exists."""
    out.requires_grad = _rg(*inputs) and out.trace.grad_enabled
    out.trace.record(name, out, [(f"saved{i}", t, True) for i, t in enumerate(saved)])
    return out


def flash_attn_func(q: Tensor, k: Tensor, v: Tensor, keys: Dim, dv: Dim | None = None
                    ) -> Tensor:
    """flash-attn 2.x's flash_attn_func, FlashAttnFunc (flash-attn 2.8.4,
    flash_attn/flash_attn_interface.py, Dao-AILab/flash-attention 0251105) as ONE op: q
    (B, T, H, d), k and v (B, S, Hkv, d), K/V heads not repeated (the kernel groups them).
    Head dims not a multiple of 8 are padded first (F.pad: new tensors); the kernel
    (csrc/flash_attn/flash_api.cpp mha_fwd) allocates out_padded = empty_like(q) (the
    query's strides: (B, H, T, d) memory for a query transposed from heads), softmax_lse
    (B, H, T) fp32 and rng_state (2,) int64 (allocated whatever dropout_p is: the dropout
    mask is regenerated from it in backward); ctx.save_for_backward(q, k, v, out_padded,
    softmax_lse, rng_state). It returns out_padded[..., :d], a view. keys: the keys a
    query meets (S, or the sliding window window_size bounds it to). FLOPs: the score and
    value products over those keys, 2·B·H·T·keys·d and 2·B·H·T·keys·dv over the model's
    head dims (dv: the value's before transformers padded it; the padding is zeros), as
    flops.py counts attention (FlopCounterMode has no formula for the custom op and counts
    none). From the kernel's source, not measured on a GPU."""
    B, T, H, d = q.shape
    tr = q.trace
    if q.dtype == F32 or not q.dtype.floating:
        raise TcalcError("--attention flash: flash-attn takes fp16 or bf16 only (mha_fwd); "
                         "this run gives it fp32 (--precision bf16 or fp16, or --mixed)")
    if d.value > 256:
        raise TcalcError(f"--attention flash: flash-attn takes head dims up to 256 "
                         f"(mha_fwd), this model's are {d.value}")
    rg = _rg(q, k, v) and tr.grad_enabled
    # maybe_contiguous: a last dim of stride 1 is all the kernel asks
    q, k, v = (t if t.stride[-1] == 1 else contiguous(t) for t in (q, k, v))
    extra = -d.value % 8  # head_size_og % 8 != 0: q, k, v padded to a multiple of 8
    if extra:
        q, k, v = (pad(t, extra) for t in (q, k, v))
    out_padded = tr.tensor(q.shape, q.dtype, rg, stride=preserve_strides(q.sizes, q.stride))
    lse = tr.tensor((B, H, T), F32, False)
    rng_state = tr.tensor((Dim.const(2),), I64, False)
    tr.record("FlashAttnFunc", out_padded,
              [("q", q, True), ("k", k, True), ("v", v, True), ("out_padded", out_padded, True),
               ("softmax_lse", lse, True), ("rng_state", rng_state, True)],
              flops=2 * B * H * T * keys * d + 2 * B * H * T * keys * (dv or d))
    return narrow(out_padded, -1, 0, d) if extra else out_padded


# -- state-space mixers: convolution, scans, einsum ---------------------------------------------
def mamba_split_conv1d_scan_combined(zxbcdt: Tensor, A: Tensor, weights: list[Tensor],
                                     heads: tuple[Dim, Dim], groups: Dim, norm: bool,
                                     out_features: Dim) -> Tensor:
    """mamba_ssm's MambaSplitConv1dScanCombinedFn (mamba_ssm 2.3.2.post1,
    ops/triton/ssd_combined.py, state-spaces/mamba e9594ce) as ONE op, with out_proj fused:
    zxbcdt (B, T, width) in_proj's output; A (H,) fp32; weights the parameters it reads
    (conv1d, dt_bias, D, the gated norm's, out_proj's); heads (H, P). Its forward splits
    zxbcdt, runs causal_conv1d_fwd, _mamba_chunk_scan_combined_fwd, the gated RMSNorm
    (_layer_norm_fwd, when norm) and F.linear into out_proj, a new (B, T, out_features) in
    zxbcdt's dtype. ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D,
    dt_bias, initial_states, seq_idx, rmsnorm_weight, rstd, outproj_weight, outproj_bias):
    the activations among them are zxbcdt, out_x (the scan's output, (B, T, H, P) in x's
    dtype), A and rstd ((groups · B·T,) fp32; None without the norm); the convolution and
    the scan are recomputed in backward. From the kernel's source, not measured on a GPU.
    FLOPs as FlopCounterMode counts the custom op: only the fused F.linear, 2·B·T·H·P·out
    (the Triton and causal-conv1d kernels are not aten ops)."""
    B, T = zxbcdt.shape[0], zxbcdt.shape[1]
    H, P = heads
    tr = zxbcdt.trace
    out_x = tr.tensor((B, T, H, P), zxbcdt.dtype, False)
    rstd = tr.tensor((groups * B * T,), F32, False) if norm else None
    out = _new(zxbcdt, (B, T, out_features), zxbcdt.dtype,
               _rg(zxbcdt, A, *weights) and tr.grad_enabled)
    tr.record("MambaSplitConv1dScanCombinedFn", out,
              [("zxbcdt", zxbcdt, True), ("out_x", out_x, True), ("A", A, True),
               ("rstd", rstd, True)] + [("weight", w, True) for w in weights],
              flops=2 * B * T * H * P * out_features)
    return out


def mamba_inner(xz: Tensor, A: Tensor, D: Tensor, delta_bias: Tensor, weights: list[Tensor],
                out_bias: Tensor | None, dt_rank: Dim, out_features: Dim, chunks: Dim
                ) -> Tensor:
    """mamba_ssm's MambaInnerFn (mamba_ssm 2.3.2.post1, ops/selective_scan_interface.py,
    state-spaces/mamba e9594ce; checkpoint_lvl 1) as ONE op, with out_proj fused: xz
    (B, 2·Di, T) in_proj's output made contiguous, A (Di, N) fp32, D and delta_bias (Di,)
    fp32, weights the parameters it keeps (conv1d, x_proj, dt_proj, out_proj), out_bias
    out_proj's fp32 bias (read, not kept). Its forward
    runs causal_conv1d_fwd, x_dbl = F.linear(conv1d_out, x_proj_weight) (B·T, R + 2N),
    delta = dt_proj_weight @ x_dbl[:, :R].t(), B and C as contiguous (B, 1, N, T) copies,
    selective_scan_cuda.fwd (out (B, Di, T) like delta; scan_intermediates (B, Di,
    ⌈T / 2048⌉, 2N) in A's fp32: csrc/selective_scan/selective_scan.cpp) and F.linear into
    out_proj. ctx.save_for_backward(xz, conv1d_weight, conv1d_bias, x_dbl, x_proj_weight,
    delta_proj_weight, out_proj_weight, conv1d_out=None, delta=None, A, B, C, D, delta_bias,
    scan_intermediates, b_rms_weight, c_rms_weight, dt_rms_weight, out): conv1d_out and delta
    are recomputed; FalconMambaMixer's b/c/dt_rms_weight (buffers) normalise B, C and delta
    into new tensors of the same sizes (rms_norm_forward between contiguous rearranges), so
    the saved set is the same with or without them. From the kernel's
    source, not measured on a GPU. FLOPs as FlopCounterMode counts the custom op: its
    three aten matmuls (x_proj, dt_proj, out_proj), not the CUDA extensions' conv and scan."""
    Bn, Di2, T = xz.shape
    Di = A.shape[0]
    N = A.shape[1]
    tr = xz.trace
    x_dbl = tr.tensor((Bn * T, dt_rank + 2 * N), xz.dtype, False)
    one = Dim.const(1)
    Bm, Cm = (tr.tensor((Bn, one, N, T), xz.dtype, False) for _ in range(2))
    inter = tr.tensor((Bn, Di, chunks, 2 * N), F32, False)
    out_scan = tr.tensor((Bn, Di, T), xz.dtype, False)
    out = _new(xz, (Bn, T, out_features), xz.dtype,
               _rg(xz, A, D, delta_bias, out_bias, *weights) and tr.grad_enabled)
    saves = [("xz", xz), ("x_dbl", x_dbl), ("A", A), ("B", Bm), ("C", Cm), ("D", D),
             ("delta_bias", delta_bias), ("scan_intermediates", inter), ("out", out_scan)]
    tr.record("MambaInnerFn", out, [(r, t, True) for r, t in saves]
              + [("weight", w, True) for w in weights],
              flops=2 * Bn * T * Di * (dt_rank + 2 * N) + 2 * Di * dt_rank * Bn * T
              + 2 * Bn * T * Di * out_features)
    return out


def causal_conv1d_fn(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """causal-conv1d's causal_conv1d_fn, CausalConv1dFn (Dao-AILab/causal-conv1d dedc05f,
    causal_conv1d/causal_conv1d_interface.py, csrc/causal_conv1d.cpp) as ONE op, its
    activation (none or SiLU) fused: x (B, C, T) with stride 1 over channels or time (else
    made contiguous: the callers' never is), w (C, 1, K) the module's weight (squeezed: a
    view), b (C,) or None.
    causal_conv1d_fwd allocates out = empty_like(x) (x's strides where dense: a channel-last
    x gives a channel-last out); ctx.save_for_backward(x, weight, bias, seq_idx=None,
    initial_states=None): x is the one activation. FLOPs: none (FlopCounterMode does not
    see the CUDA extension's kernel). From the kernel's source, not measured on a GPU."""
    stride = preserve_strides(x.sizes, x.stride)
    out = _new(x, x.shape, x.dtype, _rg(x, w, b) and x.trace.grad_enabled, stride)
    saved = [("x", x, True), ("weight", w, True)] + ([("bias", b, True)] if b is not None
                                                     else [])
    x.trace.record("CausalConv1dFn", out, saved)
    return out


def selective_scan_fn(u: Tensor, delta: Tensor, A: Tensor, Bm: Tensor, Cm: Tensor, D: Tensor,
                      z: Tensor, delta_bias: Tensor, chunks: Dim) -> Tensor:
    """mamba_ssm's selective_scan_fn, SelectiveScanFn (mamba_ssm 2.3.2.post1,
    ops/selective_scan_interface.py, state-spaces/mamba e9594ce) as ONE op, with z and
    delta_softplus: u and delta (B, D, T), A (D, N) fp32, Bm and Cm (B, N, T), D and
    delta_bias (D,) fp32, z (B, D, T). Its forward makes each of u, delta, B, C, z
    contiguous where its last stride is not 1 (new tensors, made under the Function's
    no_grad) and runs selective_scan_cuda.fwd (out and out_z, (B, D, T) in u's dtype; the
    fp32 intermediates x (B, D, ⌈T / 2048⌉, 2N): csrc/selective_scan/selective_scan.cpp);
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, x, out); it returns out_z.
    FLOPs: none (FlopCounterMode does not see the CUDA extension). From the kernel's
    source, not measured on a GPU."""
    tr = u.trace

    def unit_stride(t: Tensor) -> Tensor:  # `if t.stride(-1) != 1: t = t.contiguous()`
        return t if t.stride[-1] == 1 else _new(t, t.shape, t.dtype, False)

    Bn, Di, T = u.shape
    u2, delta2, B2, C2, z2 = (unit_stride(t) for t in (u, delta, Bm, Cm, z))
    x = tr.tensor((Bn, Di, chunks, 2 * A.shape[1]), F32, False)
    out = tr.tensor((Bn, Di, T), u.dtype, False)
    out_z = _new(u, (Bn, Di, T), u.dtype,
                 _rg(u, delta, A, Bm, Cm, D, z, delta_bias) and tr.grad_enabled)
    saves = [("u", u2), ("delta", delta2), ("A", A), ("B", B2), ("C", C2), ("D", D),
             ("z", z2), ("delta_bias", delta_bias), ("x", x), ("out", out)]
    tr.record("SelectiveScanFn", out_z, [(r, t, True) for r, t in saves])
    return out_z


def conv1d_depthwise(x: Tensor, w: Tensor, b: Tensor | None, padding: int) -> Tensor:
    """F.conv1d(x, w, b, padding=padding, groups=channels) over x (B, C, T), w (C, 1, K): a
    new contiguous (B, C, T + 2·padding − K + 1). derivatives.yaml convolution: input,
    weight, bias: convolution_backward(grad, input, weight, ...): one formula for the three,
    so input and weight are kept whenever the node exists. FLOPs as
    torch.utils.flop_counter's conv_flop_count: 2 · B · T_out · C_out · K · C_in/groups."""
    x, w, b = autocast.cast_linear(x, w, b)
    K = w.shape[-1]
    Bn, C, T = x.shape
    out_t = T + (2 * padding + 1) + Dim(-K.value, -K.poly)
    out = _new(x, (Bn, C, out_t), x.dtype, _rg(x, w, b))
    x.trace.record("convolution", out, [("input", x, True), ("weight", w, True)],
                   flops=2 * Bn * out_t * C * K)
    return out


def cumsum(a: Tensor) -> Tensor:
    """derivatives.yaml cumsum: self: cumsum_backward(grad.to(self.scalar_type()), dim):
    nothing kept; a new contiguous tensor (fp32 under CUDA's autocast: fp32_set_opt_dtype)."""
    dtype = autocast.opt_dtype("cumsum", a, None) or a.dtype
    out = _new(a, a.shape, dtype, a.requires_grad)
    a.trace.record("cumsum", out)
    return out


def repeat_interleave(t: Tensor, repeats: Dim, dim: int) -> Tensor:
    """t.repeat_interleave(repeats, dim) with an int count (aten's repeat_interleave_symint:
    unsqueeze, expand, a contiguous clone flattened): a new tensor, nothing kept."""
    dim = dim % t.ndim
    shape = t.shape[:dim] + (t.shape[dim] * repeats,) + t.shape[dim + 1:]
    out = _new(t, shape, t.dtype, t.requires_grad)
    t.trace.record("repeat_interleave", out)
    return out


def stack_new(like: Tensor, shape: tuple[Dim, ...], requires_grad: bool) -> Tensor:
    """torch.stack of the per-step outputs of a loop (stack_backward keeps sizes only): a
    new contiguous tensor."""
    out = _new(like, shape, like.dtype, requires_grad)
    like.trace.record("stack", out)
    return out


def einsum(equation: str, a: Tensor, b: Tensor) -> Tensor:
    """torch.einsum of two operands as ATen runs it (aten/src/ATen/native/Linear.cpp):
    each operand permuted to the output's labels then the contracted ones (alphabetical),
    size-1 dims added where a label is missing; a contracted dim present in one operand
    only is summed away; sumproduct_pair permutes both to (both, left-only, summed) and
    (both, summed, right-only), reshapes them to 3-D (a copy where no view exists) and
    calls bmm (which keeps each for the other's gradient); the result a view of bmm's.
    Autocast: on CUDA's lower-precision list (both operands cast, the parts run as they
    are); on the CPU's on neither, so its bmm casts its 3-D operands."""
    if not autocast.listed("einsum", a.trace):
        return _einsum(equation, a, b)
    a, b = autocast.cast_inputs("einsum", a, b)
    with autocast.disabled(a.trace):
        return _einsum(equation, a, b)


def _einsum(equation: str, a: Tensor, b: Tensor) -> Tensor:
    lhs, out_labels = equation.replace(" ", "").split("->")
    la, lb = lhs.split(",")
    contracted = sorted(set(la + lb) - set(out_labels))
    order = list(out_labels) + contracted
    ops_ = [_einsum_operand(t, labs, order) for t, labs in ((a, la), (b, lb))]
    left, right = ops_
    n_out = len(out_labels)
    sum_dims = []
    for d in range(n_out, len(order)):
        sl, sr = left.sizes[d] != 1, right.sizes[d] != 1
        if sl and sr:
            sum_dims.append(d)
        elif sl:
            left = sum_dim(left, d, keepdim=True)
        elif sr:
            right = sum_dim(right, d, keepdim=True)
    out = _sumproduct_pair(left, right, sum_dims)
    return view(out, out.shape[:n_out]) if out.ndim > n_out else out


def _einsum_operand(t: Tensor, labels: str, order: list[str]) -> Tensor:
    perm: list[int] = []
    j = t.ndim
    for lab in order:
        if lab in labels:
            perm.append(labels.index(lab))
        else:
            t = unsqueeze(t, -1)
            perm.append(j)
            j += 1
    return permute(t, tuple(perm))


def _sumproduct_pair(left: Tensor, right: Tensor, sum_dims: list[int]) -> Tensor:
    """aten's sumproduct_pair(left, right, sum_dims, keepdim=True) (torch 2.13's
    aten/src/ATen/native/Linear.cpp, its swap_lo_ro included)."""
    if not sum_dims:
        return mul(left, right)
    one = Dim.const(1)
    lro: list[int] = []
    lo: list[int] = []
    ro: list[int] = []
    lro_size, lo_size, ro_size, sum_size = one, one, one, one
    for i in range(left.ndim):
        sl, sr = left.sizes[i] != 1, right.sizes[i] != 1
        if i in sum_dims:
            if sl and sr:
                sum_size = sum_size * left.shape[i]
            elif sl:
                left = sum_dim(left, i, keepdim=True)
            elif sr:
                right = sum_dim(right, i, keepdim=True)
        elif sl and sr:
            lro.append(i)
            lro_size = lro_size * left.shape[i]
        elif sl:
            lo.append(i)
            lo_size = lo_size * left.shape[i]
        else:
            ro.append(i)
            ro_size = ro_size * right.shape[i]
    if lo and ro and ro[-1] < lo[0]:
        # swap_lo_ro: the right operand's output dims all come before the left's: bmm runs
        # with the operands swapped, so its output is laid out in the output's order
        left, right, lo, ro, lo_size, ro_size = right, left, ro, lo, ro_size, lo_size
    out_shape = tuple([left.shape[d] for d in lro] + [left.shape[d] for d in lo]
                      + [one for _ in sum_dims] + [right.shape[d] for d in ro])
    lperm = tuple(lro + lo + sum_dims + ro)
    rperm = tuple(lro + sum_dims + ro + lo)
    operm = [0] * len(out_shape)
    for i, d in enumerate(lro + lo + sum_dims + ro):
        operm[d] = i
    lhs = reshape(permute(left, lperm), (lro_size, lo_size, sum_size))
    rhs = reshape(permute(right, rperm), (lro_size, sum_size, ro_size))
    out = bmm(lhs, rhs)
    return permute(view(out, out_shape), tuple(operm))


# -- chunked delta rules: triangular solves, contiguous casts --------------------------------------
def to_contiguous(t: Tensor, dtype: DType) -> Tensor:
    """Tensor.to(dtype, memory_format=torch.contiguous_format): the tensor itself where the
    dtype is already dtype (aten's to_will_alias: suggest_memory_format is contiguous for
    any tensor not laid out channels-last), else a contiguous copy (ToCopyBackward0 keeps
    nothing)."""
    if t.dtype == dtype:
        return t
    out = _new(t, t.shape, dtype, t.requires_grad and dtype.floating)
    t.trace.record("to", out)
    return out


def solve_triangular(a: Tensor, b: Tensor) -> Tensor:
    """torch.linalg.solve_triangular(a, b, upper=False, unitriangular=True): the result laid
    out column-major in its last two dimensions (LAPACK's trsm writes it so; measured).
    derivatives.yaml linalg_solve_triangular: self, A: linalg_solve_triangular_backward(grad,
    A, result, ...): one formula for both inputs, so A and the result are kept whenever the
    node exists. No FLOPs (torch.utils.flop_counter has no formula for it)."""
    sizes = tuple(d.value for d in b.shape)
    inner = contiguous_strides(sizes[:-2] + (sizes[-1], sizes[-2]))
    stride = inner[:-2] + (inner[-1], inner[-2])
    out = _new(b, b.shape, promote(a.dtype, b.dtype), _rg(a, b), stride)
    b.trace.record("linalg_solve_triangular", out, [("A", a, True), ("result", out, True)])
    return out


def log(a: Tensor) -> Tensor:
    """derivatives.yaml log: self: grad.div(self.conj()): keeps its input."""
    return _unary_saving("log", a, "self")
