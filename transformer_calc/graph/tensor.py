"""Tensors and storages with symbolic shapes, concrete strides, and ATen's layout rules: when a
reshape is a view (computeStride) and what strides an elementwise result gets (TensorIterator)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from transformer_calc.graph.symbols import Dim, Poly, product

if TYPE_CHECKING:
    from transformer_calc.graph.trace import Trace


class DType(NamedTuple):
    name: str
    itemsize: int
    floating: bool


F32 = DType("float32", 4, True)
BF16 = DType("bfloat16", 2, True)
F16 = DType("float16", 2, True)
I64 = DType("int64", 8, False)
I32 = DType("int32", 4, False)
BOOL = DType("bool", 1, False)
C64 = DType("complex64", 8, True)  # Llama 4's RoPE (torch.polar, view_as_complex)
DTYPES = {"fp32": F32, "bf16": BF16, "fp16": F16}


def promote(a: DType, b: DType) -> DType:
    """torch's type promotion between two tensors of the floating kinds used here."""
    if a == b:
        return a
    if not a.floating or not b.floating:
        return a if a.floating else b
    if F32 in (a, b):
        return F32
    return F32  # bf16 with fp16 promotes to fp32


@dataclass(eq=False)
class Storage:
    """The unit of memory: views share one; parameters' and inputs' storages are never
    activations (kind tells which)."""

    numel: Dim
    dtype: DType
    kind: str  # "activation", "param", "input", "buffer" or "weight_copy"
    name: str = ""
    layer: int | None = None  # the layer whose forward created it (None: outside the layers)
    op: str = ""  # the op that made it (its first recorded output; "" for inputs, masks)

    @property
    def nbytes(self) -> int:
        return self.numel.value * self.dtype.itemsize

    @property
    def formula(self) -> Poly:
        return self.numel.poly * Dim.const(self.dtype.itemsize).poly


@dataclass(eq=False)
class Tensor:
    shape: tuple[Dim, ...]
    stride: tuple[int, ...]
    dtype: DType
    storage: Storage
    requires_grad: bool
    trace: Trace = field(repr=False)
    offset: int = 0

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(d.value for d in self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        return is_contiguous(self.sizes, self.stride)


def numel_of(shape: tuple[Dim, ...]) -> Dim:
    return product(shape)


def contiguous_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def is_contiguous(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """c10's is_contiguous: size-1 dimensions may have any stride."""
    expected = 1
    for s, st in zip(reversed(sizes), reversed(strides), strict=True):
        if s == 0:
            return True
        if s != 1:
            if st != expected:
                return False
            expected *= s
    return True


def is_non_overlapping_and_dense(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """c10's check: some permutation of the dimensions is contiguous."""
    order = sorted(range(len(sizes)), key=lambda d: (strides[d], sizes[d]))
    expected = 1
    for d in order:
        if sizes[d] == 1:
            continue
        if strides[d] != expected:
            return False
        expected *= sizes[d]
    return True


def compute_stride(old_sizes: tuple[int, ...], old_strides: tuple[int, ...],
                   new_sizes: tuple[int, ...]) -> tuple[int, ...] | None:
    """ATen's computeStride (aten/src/ATen/TensorUtils.cpp): the strides that make a view of
    the new shape over the old memory, or None when only a copy can (reshape then copies)."""
    if not old_sizes:
        return tuple(1 for _ in new_sizes)
    new = [0] * len(new_sizes)
    view_d = len(new_sizes) - 1
    chunk_base_stride = old_strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_sizes) - 1, -1, -1):
        tensor_numel *= old_sizes[tensor_d]
        # the end of a chunk of dims that are contiguous with each other
        if tensor_d == 0 or (old_sizes[tensor_d - 1] != 1 and
                             old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_sizes[view_d] == 1):
                new[view_d] = view_numel * chunk_base_stride
                view_numel *= new_sizes[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new)


def preserve_strides(sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """empty_like(memory_format=preserve), as `.to`, clone and dropout's noise allocate: the
    input's strides when it is non-overlapping and dense, else dense strides in the input's
    order of dimensions (aten/src/ATen/native/TensorFactories.cpp empty_like:
    infer_dense_strides, which orders them as TensorIterator does: measured, ModernBERT's
    q.float() of a head view sliced from the fused Wqkv output keeps its (B, T, H, d)
    order)."""
    if is_non_overlapping_and_dense(sizes, strides):
        return strides
    return iterator_strides(sizes, [(sizes, strides, 1)])


def broadcast_sizes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(s) for s in shapes)
    out = []
    for i in range(n):
        sizes = {s[i - n + len(s)] for s in shapes if i - n + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def iterator_strides(out_sizes: tuple[int, ...],
                     operands: list[tuple[tuple[int, ...], tuple[int, ...], int]]
                     ) -> tuple[int, ...]:
    """The strides TensorIterator gives an elementwise op's output
    (aten/src/ATen/TensorIterator.cpp: fast_set_up, then reorder_dimensions). operands: each
    input's (sizes, strides, itemsize), in argument order."""
    if all(s == out_sizes for s, _, _ in operands):
        if all(is_contiguous(s, st) for s, st, _ in operands):
            return contiguous_strides(out_sizes)
        first = operands[0][1]
        if all(is_non_overlapping_and_dense(s, st) and st == first for s, st, _ in operands):
            return first
    n = len(out_sizes)
    # each operand's strides in bytes over the broadcast shape (0 where broadcast)
    byte_strides = []
    for sizes, strides, item in operands:
        pad = n - len(sizes)
        row = [0] * pad
        for i, (s, st) in enumerate(zip(sizes, strides, strict=True)):
            row.append(0 if s == 1 and out_sizes[pad + i] != 1 else st * item)
        byte_strides.append(row)

    def should_swap(d0: int, d1: int) -> int:
        for row in byte_strides:
            s0, s1 = row[d0], row[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if out_sizes[d0] > out_sizes[d1]:
                return 1
        return 0

    perm = list(range(n - 1, -1, -1))  # perm[0]: the fastest-moving dimension
    for i in range(1, n):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            c = should_swap(perm[dim0], perm[dim1])
            if c > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif c < 0:
                break
    out = [0] * n
    acc = 1
    for d in perm:
        out[d] = acc
        acc *= out_sizes[d]
    return tuple(out)
