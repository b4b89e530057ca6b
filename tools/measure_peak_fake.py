"""Peak memory per phase of a training step without a GPU (developer tool, needs torch +
transformers): the peak's validation for machines with no GPU, beside
tools/measure_peak_cuda.py (a real GPU, the final arbiter).

torch.distributed._tools.mem_tracker.MemTracker counts every tensor storage that is alive
(parameters, gradients, optimizer states, activations, temporaries) while a model runs under
FakeTensorMode, so nothing is computed and nothing is allocated. Fake CUDA tensors abort on a
CPU-only torch (and the CUDA wheel without a driver fails in backward, pytorch#92627), so the
tensors are fake *CPU* tensors and CUDA's choices are emulated:

- every allocation rounded up to the caching allocator's 512-byte blocks (MemTracker rounds
  only CUDA tensors; c10/cuda/CUDACachingAllocator.cpp kMinBlockSize);
- dropout as aten.native_dropout, which CUDA runs, keeping a 1-byte bool mask (the CPU's
  dropout keeps a mask in the activation dtype);
- scaled_dot_product_attention routed to the kernel torch 2.13 picks on an H100 (sm90,
  torch/csrc/aten/native/transformers/sdp_utils.cpp): flash for 16-bit inputs with a head
  size up to 256 (a multiple of 8), else the memory-efficient kernel when K/V are not grouped,
  else the math kernel (which keeps the T x T probabilities);
- AdamW as torch's CUDA default, foreach (the CPU default is the for-loop);
- CUDA's autocast for the AMP recipe, as a TorchFunctionMode over CUDA's op lists
  (aten/src/ATen/autocast_mode.cpp: matmuls and SDPA in bf16, pow, softmax, log_softmax,
  layer_norm and the losses in fp32, a parameter's bf16 copy cached for the region): the
  CPU's own autocast has other lists (GPT-2's GELU stays bf16 there, SDPA is not cast).

Per phase (forward with the loss, backward, optimizer step) of the second of two steps, the
peak is MemTracker's, reset at the start of the phase as torch.cuda.reset_peak_memory_stats()
resets it. One JSON object: the grid of tools/measure_peak_cuda.py (GPT-2 B=8 T=1024, a
Llama-3.2-1B-shaped model B=2 T=2048; fp32, AMP bf16, pure bf16; SDPA and eager).
tests/data/peak_fake_cpu.json was written by

    python tools/measure_peak_fake.py --out tests/data/peak_fake_cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_peak_cuda import ATTENTIONS, MODELS, RECIPES  # noqa: E402

MIB = 1 << 20
BLOCK = 512  # the CUDA caching allocator's smallest block (kMinBlockSize)


def _round_to_blocks() -> None:
    from torch.distributed._tools import mem_tracker

    def mem_consumed(self) -> int:  # type: ignore[no-untyped-def]
        return math.ceil(self.size * self.element_size / BLOCK) * BLOCK

    mem_tracker._WeakRefInfo._calculate_mem_consumed = mem_consumed  # type: ignore[method-assign]


def h100_sdpa_kernel(q: torch.Tensor, k: torch.Tensor, dropout: float) -> str:
    """The kernel torch 2.13 runs for these inputs on an H100 (sdp_utils.cpp, sm90): flash
    needs 16-bit inputs and a head size <= 256 divisible by 8; the memory-efficient kernel
    takes fp32 but not grouped K/V heads; the math kernel takes anything."""
    d = q.shape[-1]
    if q.dtype in (torch.float16, torch.bfloat16) and d <= 256 and d % 8 == 0:
        return "flash"
    if k.shape[-3] == q.shape[-3]:
        return "efficient"
    return "math"


def _emulate_cuda_kernels() -> None:
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention

    def dropout(x, p=0.5, training=True, inplace=False):  # type: ignore[no-untyped-def]
        if not training or p == 0:
            return x
        return torch.ops.aten.native_dropout(x, p, True)[0]

    def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):  # type: ignore[no-untyped-def]
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if AUTOCAST:  # scaled_dot_product_attention is on CUDA autocast's bf16 list
            q, k, v = (x.to(torch.bfloat16) if x.dtype == torch.float32 else x
                       for x in (q, k, v))
        # no fused kernel takes an arbitrary mask here
        kernel = "math" if attn_mask is not None else h100_sdpa_kernel(q, k, dropout_p)
        if kernel == "flash":
            return torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, dropout_p, is_causal, False, scale=scale)[0]
        if kernel == "efficient":
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, None, True, dropout_p, is_causal, scale=scale)[0]
        if enable_gqa and k.shape[-3] != q.shape[-3]:
            rep = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
        with sdpa_kernel(SDPBackend.MATH):
            return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale)

    F.dropout = dropout
    F.scaled_dot_product_attention = attention


# CUDA autocast's op lists (aten/src/ATen/autocast_mode.cpp, torch 2.13), by the name a
# Python call reaches torch with: cast to bf16, or to fp32
LOWER = frozenset("""linear matmul __matmul__ __rmatmul__ mm bmm addmm baddbmm addbmm addmv mv
einsum conv1d conv2d conv3d prelu chain_matmul scaled_dot_product_attention""".split())
FP32 = frozenset("""pow __pow__ __rpow__ exp expm1 log log2 log10 log1p reciprocal rsqrt acos
asin cosh sinh tan erfinv softplus layer_norm group_norm softmax log_softmax cumsum cumprod
prod logsumexp cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss kl_div
binary_cross_entropy_with_logits cosine_similarity dist cdist renorm""".split())


AUTOCAST: list[bool] = []  # non-empty while cuda_autocast() is entered


def cuda_autocast():  # type: ignore[no-untyped-def]
    """torch.autocast("cuda", torch.bfloat16) emulated on CPU tensors: a TorchFunctionMode
    that casts the floating inputs of CUDA's lists (its casts are recorded by autograd, as
    autocast's are), caching one bf16 copy per parameter for the region."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    class CudaAutocast(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.cache: dict[int, torch.Tensor] = {}

        def __enter__(self):  # type: ignore[no-untyped-def]
            AUTOCAST.append(True)
            return super().__enter__()

        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            AUTOCAST.pop()
            return super().__exit__(*exc)

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            to = torch.bfloat16 if name in LOWER else torch.float32 if name in FP32 else None
            if to is not None:
                def cast(x):  # type: ignore[no-untyped-def]
                    if not isinstance(x, torch.Tensor) or not x.is_floating_point() \
                            or x.dtype == to:
                        return x
                    if isinstance(x, torch.nn.Parameter) and to == torch.bfloat16:
                        if id(x) not in self.cache:
                            self.cache[id(x)] = x.to(to)
                        return self.cache[id(x)]
                    return x.to(to)
                args, kwargs = tree_map(cast, args), tree_map(cast, kwargs)
            return func(*args, **kwargs)

    return CudaAutocast()


def measure(config: dict, batch: int, seq: int, recipe: str, attn: str) -> dict:
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(**config)
    with FakeTensorMode():
        # pure bf16 built in bf16 (a fake module's .to() cannot swap its tensors)
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, attn_implementation=attn,
            dtype=torch.bfloat16 if recipe == "bf16" else torch.float32)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        mt = MemTracker()
        mt.track_external(model, opt)
        dev = ids.device
        out: dict = {"params": sum(p.numel() for p in model.parameters()), "batch": batch,
                     "seq_len": seq, "recipe": recipe, "attention": attn, "steps": []}
        with mt:
            def total() -> int:
                return mt.get_tracker_snapshot("current")[dev]["Total"]

            def reset() -> None:  # torch.cuda.reset_peak_memory_stats()
                mt._peak_mem[dev] = total()

            def peak() -> float:
                return mt.get_tracker_snapshot("peak")[dev]["Total"] / MIB

            for _ in range(2):
                step = {}
                mt.reset_mod_stats()  # per-module statistics are one iteration's
                reset()
                if recipe == "amp_bf16":
                    with cuda_autocast():
                        loss = model(input_ids=ids, labels=ids).loss
                else:
                    loss = model(input_ids=ids, labels=ids).loss
                step["forward_peak_mib"] = peak()
                step["after_forward_mib"] = total() / MIB
                reset()
                loss.backward()
                step["backward_peak_mib"] = peak()
                del loss
                step["after_backward_mib"] = total() / MIB
                reset()
                opt.step()
                step["optimizer_peak_mib"] = peak()
                step["after_optimizer_mib"] = total() / MIB
                opt.zero_grad(set_to_none=True)
                step["after_zero_grad_mib"] = total() / MIB
                out["steps"].append(step)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    import warnings

    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    _round_to_blocks()
    _emulate_cuda_kernels()
    rows = []
    for name in args.models.split(","):
        config, batch, seq = MODELS[name]
        for recipe in RECIPES:
            for attention in ATTENTIONS:
                row = measure(config, batch, seq, recipe, attention)
                row["model"] = name
                rows.append(row)
                print(json.dumps(row), flush=True)
    meta = {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(),
            "how": "tools/measure_peak_fake.py: MemTracker over FakeTensorMode CPU tensors, "
                   "CUDA's allocator rounding, dropout and H100 SDPA kernels emulated; the "
                   "peak per phase of the second of two steps"}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
