"""transformers 5.23's flash_attention_2 (attn_implementation="flash_attention_2"): the
flash-attn package's kernel behind transformers' own code around it.

integrations/flash_attention.py flash_attention_forward: Q, K, V transposed from
(B, H, T, d) to (B, T, H, d) (views), V padded to the query's head dim where it is narrower
(F.pad, a new tensor; the output cropped back, a view), get_target_dtype: an fp32 query
under autocast goes in the autocast dtype (else the module's first nn.Linear's weight
dtype); modeling_flash_attention_utils.py _flash_attention_forward:
fa_peft_integration_check casts an fp32 Q, K, V to that dtype (`.to`: copies; an
argument already of that dtype is itself), no attention mask in training without padding
(flash_attention_mask returns None), position_ids of one increasing sequence (not packed),
so flash_attn_func (not the varlen one) with causal, softmax_scale, dropout_p and,
where the keys outnumber sliding_window, window_size = (sliding_window - 1,
sliding_window - 1), which mha_fwd turns into (sliding_window - 1, 0) under causal: each
query meets min(T, sliding_window) keys. The output is (B, T, H, d), not transposed back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer_calc.errors import TcalcError
from transformer_calc.graph import autocast, ops
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, Tensor

if TYPE_CHECKING:
    from transformer_calc.graph.modules import Builder


def flash_attention_forward(m: Builder, q: Tensor, k: Tensor, v: Tensor, *,
                            sliding_window: int = 0, softcap: float = 0.0) -> Tensor:
    """flash_attention_forward over q (B, H, T, d), k and v (B, Hkv, S, d): the attention's
    output (B, T, H, dv). The kernel regenerates its dropout from rng_state, so the
    dropout probability changes nothing saved; softcap is a kernel argument too (no
    tensor). sliding_window 0: none."""
    if q.trace.device != "cuda":
        raise TcalcError("--attention flash: flash-attn runs on CUDA only (--device cuda)")
    del softcap  # (a kernel argument: changes no saved tensor, no FLOP count)
    q, k, v = (ops.transpose(t, 1, 2) for t in (q, k, v))
    d, dv = q.shape[-1], v.shape[-1]
    if dv.value != d.value:  # pad `value` up to the query head dim (MLA)
        v = ops.pad(v, d + dv * -1)
    if q.dtype == F32:  # get_target_dtype, then fa_peft_integration_check
        # (the model's dtype is its linears' weights'; peft's lora.Linear puts the base
        # layer, in that dtype, before its fp32 adapters in module.modules())
        target = autocast.lower_precision(q.trace) or m.run.dtype
        q, k, v = (ops.to(t, target) for t in (q, k, v))
    S = k.shape[1]
    keys = Dim.const(sliding_window) if sliding_window and S.value > sliding_window else S
    out = ops.flash_attn_func(q, k, v, keys, dv)
    return ops.narrow(out, -1, 0, dv) if dv.value != d.value else out
