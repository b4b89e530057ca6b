"""What a family's forward is written with: the run's settings and symbols, and torch.nn's
modules (Linear, transformers' Conv1D, Embedding, LayerNorm) as ops over parameters that
train or stay frozen, with LoRA wrapped around the targeted linears."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from transformer_calc.graph import lora as peft
from transformer_calc.graph import ops
from transformer_calc.graph.parts import part
from transformer_calc.graph.symbols import Dim, Poly, SInt
from transformer_calc.graph.tensor import F32, DType, Tensor
from transformer_calc.graph.trace import Trace

RECOMPUTE = ("none", "selective", "full")
# DeepSeek-V4's compress rates and their windows' symbols, T // rate
WINDOWS = (("Mc", "Wc"), ("Mh", "Wh"))


@dataclass(frozen=True)
class Run:
    """How the forward runs: batch B, length T, the model's dtype, device, attention
    implementation (eager or sdpa), CUDA autocast's dtype (None: off), transformers'
    use_cache (a DynamicCache even in training; off under full recomputation, as
    transformers turns it off with gradient checkpointing), LoRA (None: full training),
    activation recomputation: "none", "selective" (the attention core's T² tensors are
    recomputed, Korthikanti et al. 2022, Sec. 5) or "full" (torch.utils.checkpoint,
    non-reentrant, around each decoder layer, as transformers' gradient checkpointing)."""

    batch: int
    seq_len: int
    dtype: DType = F32
    device: str = "cpu"
    attention: str = "sdpa"
    autocast: DType | None = None
    use_cache: bool = False
    lora: peft.Lora | None = None
    recompute: str = "none"
    # the parts of the model that do not train (--freeze: graph/parts.py's categories)
    frozen: frozenset[str] = frozenset()
    # the SDPA kernel torch.nn.attention.sdpa_kernel forces (--sdpa-kernel), "auto": torch's
    sdpa_kernel: str = "auto"


def symbol_values(run: Run, sizes: dict[str, int]) -> dict[str, int]:
    """The symbols' values: B, T, the family's sizes, r (LoRA's rank), T32 (T rounded
    up to a multiple of 32, the memory-efficient kernel's log-sum-exp length), with a
    chunk size Q, Tq (the chunks: T / Q rounded up), with a global block Gb, Tg (T / Gb
    rounded down)."""
    out = {"B": run.batch, "T": run.seq_len, "T32": -(-run.seq_len // 32) * 32, **sizes}
    if "Q" in sizes:  # a chunked scan's chunks: T / Q rounded up (Mamba-2)
        out["Tq"] = -(-run.seq_len // sizes["Q"])
    if "Gb" in sizes:  # LongT5's transient-global blocks: T / Gb rounded down
        out["Tg"] = run.seq_len // sizes["Gb"]
    for rate, windows in WINDOWS:  # DeepSeek-V4's compressed entries: one per rate
        if rate in sizes:  # tokens, T / rate rounded down (at least 1: a layout without
            # that compressor has no such term, one with it guards T >= rate)
            out[windows] = max(run.seq_len // sizes[rate], 1)
    if run.lora is not None:
        out["r"] = run.lora.rank
    for name, v in out.items():
        if v < 1:
            raise ValueError(f"{name} = {v}: every size is at least 1")
    return out


class Builder:
    """A model under construction: symbols by name, parameters that train unless LoRA
    freezes the base, module scopes for the trace's records. symbolic: sizes are SInts, so
    the trace records its guards and layers are traced until they repeat (compile.py)."""

    def __init__(self, run: Run, sizes: dict[str, int], symbolic: bool = False) -> None:
        if run.recompute not in RECOMPUTE:
            raise ValueError(f"recompute: expected one of {', '.join(RECOMPUTE)}")
        self.run = run
        self.symbolic = symbolic
        self.use_cache = run.use_cache and run.recompute != "full"
        self.trace = Trace(run.device, run.autocast, sdpa_kernel=run.sdpa_kernel)
        self.sizes = symbol_values(run, sizes)
        self.dims: dict[str, Dim] = {}
        self.layers_end = 0  # the layer indices layers_by_kind used (replayed ones included)
        for name, v in self.sizes.items():
            poly = Poly((((name,), 1),))
            self.dims[name] = Dim(SInt(v, poly) if symbolic else v, poly)
        d = self.dims
        self.trace.derived[("ceil", d["T"].poly, Poly.const(32))] = d["T32"]
        if "G" in d:  # query heads per K/V head
            self.trace.derived[("div", d["H"].poly, d["Hkv"].poly)] = d["G"]

    def __getitem__(self, name: str) -> Dim:
        return self.dims[name]

    def layers(self, prefix: str, body: Callable[[Tensor], Tensor], h: Tensor,
               extras: tuple[Tensor, ...] | Callable[[], tuple[Tensor, ...]] = (),
               count: str = "L", distinct_first: bool = False) -> Tensor:
        """The layers, each called with h and extras (what a checkpoint keeps; a function:
        asked before each layer, for what an earlier layer made, T5's position bias).
        count: the symbol of how many (an encoder-decoder's two stacks, Le and Ld);
        layers are numbered on from those traced before (a second stack's follow the
        first's). distinct_first: the first layer makes what the others are called with,
        so the second is traced even where its state equals the first's.
        Unrolled: every layer. Symbolic: layer i is traced while its state differs from
        layer i-1's (its input's layout, dtype and requires_grad, which storages outside
        the layers are already saved); once it repeats, layer i-1 is replayed for the
        layers left (the replay count a polynomial: the count stays a symbol)."""
        L = self[count]
        start = max(len(self.trace.layer_args), self.layers_end)

        def args() -> tuple[Tensor, ...]:
            return (h, *(extras() if callable(extras) else extras))

        if not self.symbolic:
            for i in range(L.value):
                with self.module(f"{prefix}.{i}"), self.trace.in_layer(start + i, args()):
                    h = body(h)
            return h
        i, before = 0, None
        while True:
            state = _layer_state(self.trace, h, args()[1:])
            if state == before:
                self.trace.replay[start + i - 1] = L + (-i)
                return h
            if not L.value > i:  # a guard: L > i, or L <= i (and then L = i)
                return h
            with self.module(f"{prefix}.{i}"), self.trace.in_layer(start + i, args()):
                h = body(h)
            before, i = (None if distinct_first and i == 0 else state), i + 1

    def layers_by_kind(self, prefix: str, kinds: str,
                       body: Callable[[Tensor, str], Tensor], h: Tensor,
                       extras: Callable[[str], tuple[Tensor, ...]], count: str = "L") -> Tensor:
        """Decoder layers whose forward depends on the layer's kind (one letter each, as
        ModelSpec.layer_attention spells them: Gemma 2/3's sliding and full layers read
        another mask and, Gemma 3, another RoPE table), each called with h and its kind's
        extras. One kind (a single letter: every layer) is `layers`. Mixed kinds (a family
        flag, so the structure key fixes L): every layer traced; symbolic, a layer whose kind
        and state (as `layers` compares them) match a traced layer's is that layer replayed
        once more, its output a new tensor laid out as the traced layer's. count: the layers'
        symbol where there is one kind (an encoder-decoder's stacks: Le, Ld)."""
        if len(set(kinds)) == 1:
            kind = kinds[0]
            return self.layers(prefix, lambda x: body(x, kind), h, extras(kind), count)
        traced: dict[tuple[object, ...], tuple[int, Tensor]] = {}
        counts: dict[int, int] = {}
        # (a second stack's layers follow the first's)
        start = max(len(self.trace.layer_args), self.layers_end)
        self.layers_end = start + len(kinds)
        for i, kind in enumerate(kinds):
            state = (kind, *_layer_state(self.trace, h))
            if self.symbolic and state in traced:
                j, out = traced[state]
                counts[j] = counts.get(j, 0) + 1
                h = self.trace.tensor(out.shape, out.dtype, out.requires_grad,
                                      stride=out.stride)
                h.storage.layer = start + i
                continue
            with self.module(f"{prefix}.{i}"), \
                    self.trace.in_layer(start + i, (h, *extras(kind))):
                h = body(h, kind)
            traced[state] = (start + i, h)
        self.trace.replay.update({j: Dim.const(n) for j, n in counts.items()})
        return h

    @contextmanager
    def module(self, name: str) -> Iterator[None]:
        with self.trace.module(name):
            yield

    def param(self, name: str, *shape: Dim, adapter: bool = False) -> Tensor:
        """A parameter of the model's dtype that trains unless its part is frozen (LoRA: only
        the adapters, in fp32 unless the run gathers them in 16-bit)."""
        lora = self.run.lora
        full = f"{self.trace.scope}.{name}" if self.trace.scope else name
        trainable = adapter or (lora is None
                                and not (self.run.frozen and part(full) in self.run.frozen))
        dtype = ((lora.dtype if lora is not None and lora.dtype else F32) if adapter
                 else self.run.dtype)
        return self.trace.param(full, shape, dtype, trainable)

    def tied(self, name: str) -> Tensor:
        return self.trace.params[name]

    def linear(self, name: str, x: Tensor, out: Dim, bias: bool,
               tied: str = "", matmul: bool = False, cast: DType | None = None) -> Tensor:
        """nn.Linear(in, out): weight (out, in); tied: the weight is that parameter (FSMT's
        output projection tied to the decoder's table, which peft still adapts). matmul: a
        subclass whose forward is input @ weight.T, then + bias (Falcon's FalconLinear).
        cast: the module converted to that dtype in the forward (Module.to: Switch
        Transformers' router), its parameters read as new tensors of it."""
        with self.module(name):
            w = self.tied(tied) if tied else self.param("weight", out, x.shape[-1])
            b = self.param("bias", out) if bias else None
            if cast is not None:
                w, b = ops.to(w, cast), None if b is None else ops.to(b, cast)
            lora = self.run.lora
            if lora is not None and lora.quant == "nf4":  # torchtune's NF4 linears
                return self._lora(name, x, ops.nf4_linear(x, w, b), out)
            if lora is not None and lora.converts(self.trace.scope) and not tied \
                    and not matmul:
                return self._lora(name, x, self._bnb_linear(x, w, b, lora), out, bnb=True)
            if matmul:
                y = ops.matmul(x, ops.transpose(w, 0, 1))
                y = y if b is None else ops.add(y, b)
            else:
                y = ops.linear(x, w, b)
            return self._lora(name, x, y, out)

    def idle_linear(self, name: str, fan_in: Dim, out: Dim, bias: bool) -> None:
        """An nn.Linear the forward never calls (BartForCausalLM's cross-attention): its
        parameters, and peft's adapters where a target names it."""
        with self.module(name):
            self.param("weight", out, fan_in)
            if bias:
                self.param("bias", out)
            lora = self.run.lora
            if lora is not None and lora.adapts(self.trace.scope):
                r = self["r"]
                with self.module("lora_A"):
                    self.param("weight", r, fan_in, adapter=True)
                with self.module("lora_B"):
                    self.param("weight", out, r, adapter=True)

    def conv1d(self, name: str, x: Tensor, out: Dim) -> Tensor:
        """transformers' Conv1D(nf=out, nx=in): weight (in, out), always a bias."""
        with self.module(name):
            w = self.param("weight", x.shape[-1], out)
            b = self.param("bias", out)
            lora = self.run.lora
            if lora is not None and lora.quant and lora.quant != "nf4":
                # replace_with_bnb_linear converts a Conv1D too, its weight transposed to
                # (out, in) (transformers/integrations/bitsandbytes.py)
                y = self._bnb_linear(x, ops.transpose(w, 0, 1), b, lora)
                return self._lora(name, x, y, out, bnb=True)
            y = ops.conv1d_gpt2(x, w, b)
            return self._lora(name, x, y, out)

    def lm_head_lora(self, x: Tensor, y: Tensor, out: Dim) -> Tensor:
        """The LM head's adapter where a target names it (peft's lm_head; all-linear leaves
        the output embedding out, _maybe_include_all_linear_layers), inside its module."""
        lora = self.run.lora
        if lora is None or "all-linear" in lora.targets:
            return y
        return self._lora("lm_head", x, y, out)

    def head(self, x: Tensor, w: Tensor, out: Dim) -> Tensor:
        """The LM head, inside its module: an F.linear (transformers' replace_with_bnb_linear
        leaves the output embedding out), or, where the run quantises it too (Lightning's
        BitsandbytesPrecision replaces every nn.Linear: Lora.head), the bitsandbytes layer;
        then its adapter where a target names it."""
        lora = self.run.lora
        if lora is None or not (lora.head and lora.quant):
            return self.lm_head_lora(x, ops.linear(x, w), out)
        y = self._bnb_linear(x, w, None, lora)
        if "all-linear" in lora.targets:
            return y
        return self._lora("lm_head", x, y, out, bnb=True)

    def _bnb_linear(self, x: Tensor, w: Tensor, b: Tensor | None, lora: peft.Lora) -> Tensor:
        """bitsandbytes' Linear4bit.forward (bitsandbytes/nn/modules.py): the input cast to
        the compute dtype (the model's 16-bit dtype), MatMul4Bit, the result cast back to the
        input's dtype; Linear8bitLt.forward: MatMul8bitLt on the input as it is."""
        if lora.quant == "int8":
            return ops.bnb_matmul(x, w, b, lora.base_keeps_input)
        compute = self.run.dtype
        y = ops.bnb_matmul(ops.to(x, compute), w, b, lora.base_keeps_input)
        return ops.to(y, x.dtype)

    def _lora(self, name: str, x: Tensor, y: Tensor, out: Dim, bnb: bool = False) -> Tensor:
        lora = self.run.lora
        if lora is None or not lora.adapts(self.trace.scope):  # (inside the module's scope)
            return y
        r = self["r"]
        with self.module("lora_A"):
            a = self.param("weight", r, x.shape[-1], adapter=True)
        with self.module("lora_B"):
            b = self.param("weight", out, r, adapter=True)
        return (peft.adapted_bnb if bnb else peft.adapted)(y, x, a, b, lora)

    def embedding(self, name: str, ids: Tensor, rows: Dim, width: Dim) -> Tensor:
        with self.module(name):
            return ops.embedding(self.param("weight", rows, width), ids)

    def layer_norm(self, name: str, x: Tensor) -> Tensor:
        with self.module(name):
            E = x.shape[-1]
            return ops.layer_norm(x, self.param("weight", E), self.param("bias", E))

    def dropout(self, x: Tensor, p: float) -> Tensor:
        return ops.dropout(x, p)


def _poly_of(x: int) -> Poly:
    return x.poly if isinstance(x, SInt) else Poly.const(x)


def _layer_state(tr: Trace, h: Tensor, extras: tuple[Tensor, ...] = ()) -> tuple[object, ...]:
    """What a layer's trace depends on besides its own parameters: its input's shape,
    layout, dtype, requires_grad and storage (and whether that is saved already), which
    storages created outside the layers are saved or cast already, and which of the other
    tensors it is called with are saved already (T5's position bias, made by the first
    layer). Compared by polynomial, so no guard is recorded."""
    st = h.storage
    outside = frozenset(k for k, s in tr.saved.items() if s.storage.layer is None)
    shared = {id(p.storage) for p in tr.params.values() if p.storage.layer is None}
    casts = frozenset(k for k in tr.weight_casts if k[0] in shared)
    return (tuple(d.poly for d in h.shape), tuple(_poly_of(x) for x in h.stride),
            _poly_of(h.offset), h.dtype, h.requires_grad, st.kind, st.numel.poly, st.dtype,
            id(st) in tr.saved, outside, casts,
            tuple(id(t.storage) in tr.saved for t in extras))


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
    """create_causal_mask's eager mask, once for the model: (B, 1, T, T) in the input
    embeddings' dtype, no grad (its add keeps nothing; a checkpoint keeps it as an input)."""
    return m.trace.input((m["B"], Dim.const(1), m["T"], m["T"]), like.dtype, "causal_mask")
