"""What a training loop that keeps the previous micro-batch's logits named still holds at the
end of the next forward, when a custom autograd function keeps its input as a ctx attribute
(bitsandbytes before 0.44: MatMul4Bit.forward sets ``ctx.tensors = (A, B)``) or saves it
(``ctx.save_for_backward``, what backward frees). Developer tool (needs torch); the CPU is
enough: which tensors stay alive is autograd's and Python's bookkeeping, not the device's.

The loop is LitGPT's fit (litgpt/finetune/lora.py @00af8b0d): ``logits = model(x)``, a
loss, ``backward``, then ``loss`` rebound to a float (log_interval 1), so only ``logits``
keeps the previous graph. The model: L frozen "4-bit" linear layers (a plain frozen weight
standing for the quantised one), each with a LoRA adapter beside it, so every layer's input
but the first's needs a gradient, as in a LoRA model over frozen embeddings. At the end of the
second forward (a hook on the last layer), the storages of the first micro-batch's layer
inputs still alive are summed.

    python tools/measure_previous_graph_cpu.py > tests/data/previous_graph_cpu.json
"""

from __future__ import annotations

import gc
import json
import weakref

import torch


class HeldOnCtx(torch.autograd.Function):
    """bitsandbytes 0.42's MatMul4Bit, the dequantisation left out: the input on ctx."""

    @staticmethod
    def forward(ctx, A, B):  # type: ignore[no-untyped-def,override]
        ctx.tensors = (A, B) if any(ctx.needs_input_grad[:2]) else (None, None)
        return A @ B.t()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
        _, B = ctx.tensors
        return grad @ B, None


class Saved(torch.autograd.Function):
    """The same matmul saving its input with save_for_backward (freed by backward)."""

    @staticmethod
    def forward(ctx, A, B):  # type: ignore[no-untyped-def,override]
        ctx.save_for_backward(A, B)
        return A @ B.t()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
        _, B = ctx.saved_tensors
        return grad @ B, None


class Layer(torch.nn.Module):
    def __init__(self, d: int, fn: type[torch.autograd.Function], inputs: list) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d, d) / d**0.5, requires_grad=False)
        self.lora_a = torch.nn.Parameter(torch.zeros(4, d))
        self.lora_b = torch.nn.Parameter(torch.zeros(d, 4))
        self.fn, self.inputs = fn, inputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:  # the input the function may hold
            self.inputs.append(weakref.ref(x))
        return torch.relu(self.fn.apply(x, self.weight) + x @ self.lora_a.t() @ self.lora_b.t())


def held_bytes(fn: type[torch.autograd.Function], L: int, B: int, T: int, d: int) -> dict:
    torch.manual_seed(0)
    first: list = []
    model = torch.nn.Sequential(*[Layer(d, fn, first) for _ in range(L)])
    x = torch.randn(B, T, d)
    alive: list[int] = []

    def at_end(*_: object) -> None:  # the end of the second forward
        gc.collect()
        alive.append(sum(r().untyped_storage().nbytes() for r in first if r() is not None))

    logits = model(x)
    loss = logits.pow(2).mean()
    loss.backward()
    loss = loss.item()  # LitGPT: loss = running_loss.compute().item()
    inputs = sum(r().untyped_storage().nbytes() for r in first if r() is not None)
    for layer in model:
        layer.inputs = []  # the second micro-batch's inputs are not counted
    model[-1].register_forward_hook(at_end)
    logits = model(x)  # noqa: F841  (rebound only now: the first graph is freed here)
    gc.collect()
    after = sum(r().untyped_storage().nbytes() for r in first if r() is not None)
    return {"function": fn.__name__, "L": L, "B": B, "T": T, "d": d, "dtype": "fp32",
            "first_inputs_bytes": inputs, "held_at_end_of_next_forward": alive[0],
            "held_after_rebinding": after}


def main() -> None:
    torch.set_num_threads(1)
    runs = [held_bytes(fn, L, B, T, d) for fn in (HeldOnCtx, Saved)
            for L, B, T, d in ((4, 2, 16, 32), (6, 1, 24, 64))]
    print(json.dumps({"tool": "tools/measure_previous_graph_cpu.py",
                      "torch": torch.__version__, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
