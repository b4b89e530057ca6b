"""What a family's forward is written with: the run's settings and symbols, and torch.nn's
modules (Linear, transformers' Conv1D, Embedding, LayerNorm) as ops over parameters that
train or stay frozen, with LoRA wrapped around the targeted linears."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from transformer_calc.graph import lora as peft
from transformer_calc.graph import ops
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, DType, Tensor
from transformer_calc.graph.trace import Trace


@dataclass(frozen=True)
class Run:
    """How the forward runs: batch B, length T, the model's dtype, device, attention
    implementation (eager or sdpa), CUDA autocast's dtype (None: off), transformers'
    use_cache (a DynamicCache even in training), LoRA (None: full training)."""

    batch: int
    seq_len: int
    dtype: DType = F32
    device: str = "cpu"
    attention: str = "sdpa"
    autocast: DType | None = None
    use_cache: bool = False
    lora: peft.Lora | None = None


class Builder:
    """A model under construction: symbols by name, parameters that train unless LoRA
    freezes the base, module scopes for the trace's records."""

    def __init__(self, run: Run, sizes: dict[str, int]) -> None:
        self.run = run
        self.trace = Trace(run.device, run.autocast)
        self.sizes = {"B": run.batch, "T": run.seq_len, **sizes}
        if run.lora is not None:
            self.sizes["r"] = run.lora.rank

    def __getitem__(self, name: str) -> Dim:
        return Dim.sym(name, self.sizes[name])

    @contextmanager
    def module(self, name: str) -> Iterator[None]:
        with self.trace.module(name):
            yield

    def param(self, name: str, *shape: Dim, adapter: bool = False) -> Tensor:
        """A parameter of the model's dtype that trains (LoRA: only the adapters, fp32)."""
        trainable = adapter or self.run.lora is None
        dtype = F32 if adapter else self.run.dtype
        full = f"{self.trace.scope}.{name}" if self.trace.scope else name
        return self.trace.param(full, shape, dtype, trainable)

    def tied(self, name: str) -> Tensor:
        return self.trace.params[name]

    def linear(self, name: str, x: Tensor, out: Dim, bias: bool) -> Tensor:
        """nn.Linear(in, out): weight (out, in)."""
        with self.module(name):
            w = self.param("weight", out, x.shape[-1])
            b = self.param("bias", out) if bias else None
            y = ops.linear(x, w, b)
            return self._lora(name, x, y, out)

    def conv1d(self, name: str, x: Tensor, out: Dim) -> Tensor:
        """transformers' Conv1D(nf=out, nx=in): weight (in, out), always a bias."""
        with self.module(name):
            w = self.param("weight", x.shape[-1], out)
            b = self.param("bias", out)
            y = ops.conv1d_gpt2(x, w, b)
            return self._lora(name, x, y, out)

    def _lora(self, name: str, x: Tensor, y: Tensor, out: Dim) -> Tensor:
        lora = self.run.lora
        if lora is None or not lora.adapts(name):
            return y
        r = self["r"]
        with self.module("lora_A"):
            a = self.param("weight", r, x.shape[-1], adapter=True)
        with self.module("lora_B"):
            b = self.param("weight", out, r, adapter=True)
        return peft.adapted(y, x, a, b, lora)

    def embedding(self, name: str, ids: Tensor, rows: Dim, width: Dim) -> Tensor:
        with self.module(name):
            return ops.embedding(self.param("weight", rows, width), ids)

    def layer_norm(self, name: str, x: Tensor) -> Tensor:
        with self.module(name):
            E = x.shape[-1]
            return ops.layer_norm(x, self.param("weight", E), self.param("bias", E))

    def dropout(self, x: Tensor, p: float) -> Tensor:
        return ops.dropout(x, p)


def causal_lm_loss(logits: Tensor, ids: Tensor, V: Dim) -> Tensor:
    """transformers' ForCausalLMLoss (loss/loss_utils.py): logits.float(); labels padded
    with -100 to T+1 and shifted, labels[..., 1:].contiguous() (a view of the padded
    storage where it is already contiguous, B = 1); cross_entropy over the (B·T, V) view."""
    logits = ops.to(logits, F32)
    B, T = ids.shape
    shift = ops.contiguous(ops.narrow(ops.pad(ids, 1), 1, 1, T))
    rows = B * T
    return ops.cross_entropy(ops.view(logits, (rows, V)), ops.view(shift, (rows,)))


def causal_mask(m: Builder, like: Tensor) -> Tensor:
    """create_causal_mask's eager mask: (B, 1, T, T) in the activation dtype, no grad (its
    add keeps nothing)."""
    return m.trace.input((m["B"], Dim.const(1), m["T"], m["T"]), like.dtype, "causal_mask")
