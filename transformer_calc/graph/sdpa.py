"""torch.nn.functional.scaled_dot_product_attention as its kernels run it.

Kernel choice (aten/src/ATen/native/transformers/sdp_utils_cpp.cpp on the CPU,
cuda/sdp_utils.cpp on CUDA): the CPU's flash kernel unless there is dropout; on CUDA flash
for 16-bit inputs without a mask, else memory-efficient, else math (a simplification of
the CUDA checks: head dim a multiple of 8 and at most 256, GQA in flash only).

The fused kernels keep query, key, value, the output and the log-sum-exp for backward
(derivatives.yaml _scaled_dot_product_flash_attention_for_cpu, _scaled_dot_product_flash_
attention, _scaled_dot_product_efficient_attention); the output is allocated as
(B, T, H, d) and returned transposed to (B, H, T, d). The math kernel
(attention.cpp _scaled_dot_product_attention_math) is expanded into its ops."""

from __future__ import annotations

from transformer_calc.errors import TcalcError
from transformer_calc.graph import autocast, ops
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import BF16, BOOL, F16, F32, DType, Tensor, preserve_strides


def kernel(q: Tensor, k: Tensor, dropout_p: float, has_mask: bool, enable_gqa: bool,
           v: Tensor | None = None) -> str:
    """The kernel torch picks. The flash kernels need one head dim for query, key and value
    (check_head_dim_size_cpp, check_head_dim_size_flash); the memory-efficient one a
    query and key of one head dim, the value's aligned too (check_head_dim_size_mem_efficient):
    MLA's value heads narrower than its query's run math on the CPU."""
    d = q.sizes[-1]
    dv = v.sizes[-1] if v is not None else d
    same = d == k.sizes[-1] == dv
    if q.trace.sdpa_kernel != "auto":
        return _forced(q, k, dropout_p, has_mask, enable_gqa, dv)
    if not enable_gqa and q.shape[-3].poly != k.shape[-3].poly and q.sizes[-3] != k.sizes[-3]:
        # check_batch_size_and_num_heads_dense: the fused kernels want as many K/V heads as
        # query heads (or enable_gqa); K/V broadcast over the heads (Falcon-7B's one K/V
        # head) run the math kernel
        return "math"
    if q.trace.device == "cpu":
        return "cpu_flash" if dropout_p == 0 and same else "math"
    aligned = d % 8 == 0 and d <= 256
    gqa = enable_gqa and q.sizes[-3] != k.sizes[-3]
    if aligned and same and q.dtype in (BF16, F16) and not has_mask:
        return "flash"
    if aligned and d == k.sizes[-1] and dv % 8 == 0 and not gqa:
        return "efficient"
    return "math"


def _forced(q: Tensor, k: Tensor, dropout_p: float, has_mask: bool, enable_gqa: bool,
            dv: object) -> str:
    """The kernel torch.nn.attention.sdpa_kernel forces (--sdpa-kernel), refused where torch
    raises "No available kernel" for these inputs (torch 2.13's sdp_utils_cpp.cpp
    use_flash_attention_cpp; cuda/sdp_utils.cpp use_flash_attention,
    use_mem_efficient_attention)."""
    name, device = q.trace.sdpa_kernel, q.trace.device
    d = q.sizes[-1]
    if name == "math":
        return name
    if (name == "cpu_flash") != (device == "cpu"):
        raise TcalcError(f"--sdpa-kernel {name}: not a kernel torch has on {device}")
    why = ""
    grouped = q.shape[-3].poly != k.shape[-3].poly and q.sizes[-3] != k.sizes[-3]
    if grouped and not enable_gqa:  # check_batch_size_and_num_heads_dense
        why = "the key/value heads broadcast over the query heads (no enable_gqa)"
    elif name == "efficient" and grouped:  # check_batch_size_and_num_heads_dense<false>
        why = "grouped key/value heads (enable_gqa); flash (16-bit) or math"
    elif name in ("flash", "cpu_flash") and not d == k.sizes[-1] == dv:
        why = "query, key and value of different head dims"  # check_head_dim_size_*
    elif name == "efficient" and (d != k.sizes[-1] or d % 8 or dv % 8):  # type: ignore[operator]
        why = "head dims not multiples of 8"  # check_head_dim_size_mem_efficient
    elif name == "flash" and (d % 8 or d > 256):
        why = "a head dim not a multiple of 8 up to 256"  # check_head_dim_size_flash
    elif name == "flash" and q.dtype not in (BF16, F16):
        why = "fp32 inputs; it takes fp16 or bf16 only"  # check_flash_attention_datatype
    elif name == "flash" and has_mask:
        why = "an attention mask; it takes none"  # check_for_attn_mask
    elif name == "cpu_flash" and dropout_p:
        why = "dropout; it takes none"  # check_for_dropout
    if why:
        raise TcalcError(f"--sdpa-kernel {name}: torch's kernel refuses this model's "
                         f"attention: {why}")
    return name


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool,
                                 dropout_p: float = 0.0, scale: float | None = None,
                                 enable_gqa: bool = False, mask: Tensor | None = None
                                 ) -> Tensor:
    # (autocast casts every floating argument, a float mask too: T5's position bias)
    q, k, v, *rest = autocast.cast_inputs("scaled_dot_product_attention", q, k, v,
                                          *(() if mask is None else (mask,)))
    mask = rest[0] if rest else None
    if mask is not None and mask.dtype == BOOL:
        mask = _float_mask(mask, q.dtype)
    with autocast.disabled(q.trace):
        name = kernel(q, k, dropout_p, mask is not None, enable_gqa, v)
        q.trace.kernels.add(name)
        if name == "math":
            return _math(q, k, v, is_causal=is_causal, dropout_p=dropout_p, scale=scale,
                         enable_gqa=enable_gqa, mask=mask)
        return _fused(name, q, k, v, mask)


def _float_mask(mask: Tensor, dtype: DType) -> Tensor:
    """convert_boolean_attn_mask (attention.cpp): zeros_like(mask, dtype) filled with -inf
    where the mask is False, a new tensor in the query's dtype (contiguous for an expanded
    mask: zeros_like preserves only dense strides); the kernel keeps this one (measured:
    (B, 1, T, T) fp32 for a (1, 1, T, T) bool mask expanded over B, torch 2.13 CPU)."""
    out = mask.trace.tensor(mask.shape, dtype, False,
                            stride=preserve_strides(mask.sizes, mask.stride))
    mask.trace.record("masked_fill", out)
    return out


def _fused(name: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """A fused kernel: out (B, H, T, dv) in (B, T, H, dv) memory, logsumexp in fp32 ((B, H,
    T): (B, T, H) memory on the CPU; the efficient kernel pads T to a multiple of 32).
    FLOPs: flop_counter's sdpa_flop_count, the two products 2·B·H·T·S·d + 2·B·H·T·S·dv."""
    tr = q.trace
    B, H, T, d = q.shape
    S, dv = k.shape[-2], v.shape[-1]
    # the output follows the query's memory order (empty_like of the query the kernel is
    # given): (B, T, H, d) for a query viewed from a projection, but (B, H, T, d) for one
    # made contiguous as heads (Phi-3's and StableLM's rotary concatenation, MLA's
    # query): then the output's transpose back is a copy (measured on Phi-3 and StableLM)
    btHd = (T.value * H.value * dv.value, dv.value, H.value * dv.value, 1)
    if name in ("cpu_flash", "flash") and dv.value == d.value:
        # the flash kernels' output is empty_like(query) (torch 2.13 CPU, measured: a query
        # in (T, B, H, d) memory, nn.MultiheadAttention's, gives an output in that memory;
        # a packed one, not dense, dense strides in its order: (B, T, H, d); CUDA's mha_fwd:
        # out = torch::empty_like(q) of the query transposed to (B, T, H, d), which is the
        # rule below for the layouts the H100 rows measure)
        stride: tuple[int, ...] | None = preserve_strides(q.sizes, q.stride)
    else:
        stride = None if q.is_contiguous() and H.value > 1 and T.value > 1 else btHd
    out = tr.tensor((B, H, T, dv), q.dtype, ops._rg(q, k, v), stride=stride)
    if name == "cpu_flash":
        lse = tr.tensor((B, H, T), F32, False, stride=(T.value * H.value, 1, H.value))
    elif name == "efficient":
        padded = tr.named("ceil", T, Dim.const(32))  # ceil(T / 32) · 32, a symbol
        lse = tr.tensor((B, H, padded), F32, False)
    else:
        lse = tr.tensor((B, H, T), F32, False)
    flops = 2 * B * H * T * S * d + 2 * B * H * T * S * dv
    saves = [("query", q, True), ("key", k, True), ("value", v, True), ("output", out, True),
             ("logsumexp", lse, True), ("attn_mask", mask, True)]
    tr.record(f"sdpa_{name}", out, saves, flops=flops)
    return out


def _math(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool, dropout_p: float,
          scale: float | None, enable_gqa: bool, mask: Tensor | None) -> Tensor:
    """_scaled_dot_product_attention_math: 16-bit q, k, v upcast to fp32 (accuracy), q and
    Kᵀ each scaled by sqrt(scale), the causal mask added in place, _safe_softmax, dropout,
    the product with V, cast back to the input dtype."""
    origin = q.dtype
    q, k, v = (ops.to(t, F32) if t.dtype in (BF16, F16) else t for t in (q, k, v))
    sf = (scale if scale is not None else float(q.sizes[-1]) ** -0.5) ** 0.5
    q = ops.mul(q, sf)
    if enable_gqa and k.sizes[-3] != q.sizes[-3]:
        # pre_process_group_query_attention_input: repeat_interleave, a new tensor each
        rep = q.trace.named("div", q.shape[-3], k.shape[-3])  # H / Hkv, a symbol
        k, v = (_repeat_heads(t, rep) for t in (k, v))
    attn = ops.matmul(q, ops.mul(ops.transpose(k, -2, -1), sf))
    if mask is not None or is_causal:
        q.trace.record("add_", attn)  # the mask, added in place
    attn = ops.safe_softmax(attn)
    attn = ops.dropout(attn, dropout_p)
    return ops.to(ops.matmul(attn, v), origin)


def _repeat_heads(t: Tensor, rep: Dim) -> Tensor:
    B, Hkv, S, d = t.shape
    out = t.trace.tensor((B, Hkv * rep, S, d), t.dtype, t.requires_grad)
    t.trace.record("repeat_interleave", out)
    return out
