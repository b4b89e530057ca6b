"""The trace a family's forward runs against: it creates tensors, records each op (shape,
FLOPs, what it saves for backward) and keeps the saved storages once each."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from transformer_calc.graph.symbols import Dim, Poly
from transformer_calc.graph.tensor import DType, Storage, Tensor, contiguous_strides, numel_of


@dataclass(frozen=True)
class OpRecord:
    """One op as the forward ran it: where, what, the output, the matmul FLOPs, and the
    storages it saved for backward (as roles: 'mm.self', 'softmax.result')."""

    scope: str
    op: str
    shape: tuple[Dim, ...]
    dtype: DType
    flops: int
    saves: tuple[str, ...]


@dataclass(frozen=True)
class Saved:
    """A storage autograd holds at the end of the forward: first saver and its bytes."""

    storage: Storage
    scope: str
    role: str
    layer: int | None = None  # the layer of the op that saved it first (None: outside)
    op_index: int = -1  # that op's index in Trace.ops (-1: kept by recomputation)

    @property
    def nbytes(self) -> int:
        return self.storage.nbytes


@dataclass
class Trace:
    """device: 'cpu' or 'cuda'; autocast: the 16-bit dtype of torch.autocast, or None.

    Layers: `in_layer(i, args)` marks the ops of decoder layer i and the tensors it is called
    with (what a checkpoint keeps). `savers` says, per saved storage, where it was saved: the
    layers' indices, None for an op outside the layers. `replay`, set by a compiled trace:
    layer j -> count, layer j's contribution repeats `count` more times (the layers not
    traced: after the last one traced, or, for layers of mixed kinds, those whose kind and
    state match a traced layer's)."""

    device: str = "cpu"
    autocast: DType | None = None
    sdpa_kernel: str = "auto"  # the kernel torch.nn.attention.sdpa_kernel forces (graph/sdpa.py)
    ops: list[OpRecord] = field(default_factory=list)
    saved: dict[int, Saved] = field(default_factory=dict)
    params: dict[str, Tensor] = field(default_factory=dict)
    weight_casts: dict[tuple[int, DType], Tensor] = field(default_factory=dict)
    flops: int = 0
    flops_poly: Poly = field(default_factory=lambda: Poly(()))
    grad_enabled: bool = True
    autocast_paused: int = 0  # inside an op autocast already handled (its inner ops run as is)
    layer: int | None = None
    savers: dict[int, set[int | None]] = field(default_factory=dict)
    layer_args: dict[int, tuple[Tensor, ...]] = field(default_factory=dict)
    layer_saves: set[int] = field(default_factory=set)  # layers whose ops saved anything
    layer_flops: dict[int, Poly] = field(default_factory=dict)
    replay: dict[int, Dim] = field(default_factory=dict)
    kernels: set[str] = field(default_factory=set)  # the SDPA kernels the forward ran
    # sizes that are no polynomial of the others, named as symbols of their own by the
    # Builder: ("div", H, Hkv) -> G, ("ceil", T, 32) -> T32 (keyed by the operands' polys)
    derived: dict[tuple[str, Poly, Poly], Dim] = field(default_factory=dict)
    _scope: list[str] = field(default_factory=list)
    _loop_storages: set[int] | None = None  # storages made inside a `loop` (by id)

    # -- creation --------------------------------------------------------------------------
    def tensor(self, shape: tuple[Dim, ...], dtype: DType, requires_grad: bool,
               kind: str = "activation", name: str = "",
               stride: tuple[int, ...] | None = None) -> Tensor:
        sizes = tuple(d.value for d in shape)
        storage = Storage(numel_of(shape), dtype, kind, name or self.scope, self.layer)
        if self._loop_storages is not None:
            self._loop_storages.add(id(storage))
        return Tensor(shape, stride or contiguous_strides(sizes), dtype, storage,
                      requires_grad and self.grad_enabled, self)

    def param(self, name: str, shape: tuple[Dim, ...], dtype: DType, trainable: bool) -> Tensor:
        """A parameter, created once per name (a tied weight is the same name); it trains
        or not whatever the grad mode its module first runs in (DeepSeek-V3.2's indexer runs
        under no_grad)."""
        if name not in self.params:
            p = self.tensor(shape, dtype, trainable, "param", name)
            p.requires_grad = trainable
            self.params[name] = p
        return self.params[name]

    def input(self, shape: tuple[Dim, ...], dtype: DType, name: str) -> Tensor:
        return self.tensor(shape, dtype, False, "input", name)

    # -- scopes (module paths) and no_grad --------------------------------------------------
    @property
    def scope(self) -> str:
        return ".".join(self._scope)

    @contextmanager
    def module(self, name: str) -> Iterator[None]:
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    @contextmanager
    def module_path(self, path: str) -> Iterator[None]:
        """The module scopes replaced by an absolute path: one module run at several places
        (ALBERT's layer groups, shared by consecutive layers), its parameters named once."""
        saved, self._scope = self._scope, path.split(".")
        try:
            yield
        finally:
            self._scope = saved

    @contextmanager
    def in_layer(self, index: int, args: tuple[Tensor, ...]) -> Iterator[None]:
        self.layer, self.layer_args[index] = index, args
        self.layer_flops[index] = Poly(())
        try:
            yield
        finally:
            self.layer = None

    def named(self, op: str, a: Dim, b: Dim) -> Dim:
        """The symbol the Builder named for a size that is no polynomial: ("div", H, Hkv)
        is G = H / Hkv, ("ceil", T, 32) is T rounded up to a multiple of 32."""
        key = (op, a.poly, b.poly)
        if key not in self.derived:
            raise ValueError(f"no symbol for {op}({a}, {b}): name it in the Builder")
        return self.derived[key]

    @contextmanager
    def loop(self) -> Iterator[None]:
        """A Python loop of small ops (Mamba's scan over T): its steps are traced inside
        this block, and a step traced under `repeat` stands for several."""
        outer, self._loop_storages = self._loop_storages, set()
        try:
            yield
        finally:
            self._loop_storages = outer

    @contextmanager
    def repeat(self, count: Dim) -> Iterator[None]:
        """One step of a `loop` standing for `count` steps alike: what autograd keeps of
        each step (the storages first saved during it, made inside the loop: the step's own
        tensors and the previous step's state it reads) is that step's set times count;
        its FLOPs likewise. A storage made before the loop and first saved here would be
        saved once, not per step: refused."""
        if self._loop_storages is None:
            raise ValueError("repeat: only inside a loop")
        before = set(self.saved)
        flops, flops_poly = self.flops, self.flops_poly
        layer_flops = self.layer_flops.get(self.layer) if self.layer is not None else None
        yield
        for key in self.saved.keys() - before:
            st = self.saved[key].storage
            if key not in self._loop_storages:
                raise ValueError(f"{self.scope}: a loop's step first saves {st.name}, made "
                                 "before the loop")
            st.numel = st.numel * count
        extra = count + (-1)
        self.flops += (self.flops - flops) * extra.value
        delta = self.flops_poly - flops_poly
        self.flops_poly = self.flops_poly + delta * extra.poly
        if layer_flops is not None and self.layer is not None:
            self.layer_flops[self.layer] = self.layer_flops[self.layer] + (
                self.layer_flops[self.layer] - layer_flops) * extra.poly

    @contextmanager
    def no_grad(self) -> Iterator[None]:
        before, self.grad_enabled = self.grad_enabled, False
        try:
            yield
        finally:
            self.grad_enabled = before

    # -- recording ---------------------------------------------------------------------------
    def record(self, op: str, out: Tensor, saves: Iterable[tuple[str, Tensor | None, bool]] = (),
               flops: Dim | None = None) -> None:
        """Record op's output; when it requires grad, keep each (role, tensor, condition)
        whose condition holds (derivatives.yaml: a tensor is saved for another input's
        gradient only when that input requires one)."""
        kept: list[str] = []
        if not out.storage.op:
            out.storage.op = op
        if out.requires_grad:
            for role, t, needed in saves:
                if t is None or not needed:
                    continue
                kept.append(role)
                if self.layer is not None:
                    self.layer_saves.add(self.layer)
                if t.storage.kind in ("param", "buffer"):
                    continue  # the model's own memory, not an activation
                key = id(t.storage)
                if key not in self.saved:
                    self.saved[key] = Saved(t.storage, self.scope, f"{op}.{role}", self.layer,
                                            len(self.ops))
                    self.savers[key] = set()
                    self._check_reach(t)
                self.savers[key].add(self.layer)
        if flops is not None:
            self.flops += flops.value
            self.flops_poly = self.flops_poly + flops.poly
            if self.layer is not None:
                self.layer_flops[self.layer] = self.layer_flops[self.layer] + flops.poly
        self.ops.append(OpRecord(self.scope, op, out.shape, out.dtype,
                                 flops.value if flops else 0, tuple(kept)))

    def _check_reach(self, t: Tensor) -> None:
        """A layer saves only what it created or was called with (its checkpoint's inputs):
        anything else would be a tensor reached another way, which neither recomputation
        nor the replay of layers accounts for."""
        if self.layer is None or t.storage.layer == self.layer:
            return
        if t.storage.kind == "weight_copy":
            return  # autocast's cached cast of a parameter
        if any(a.storage is t.storage for a in self.layer_args[self.layer]):
            return
        raise ValueError(f"{self.scope}: saves {t.storage.name}, which is not among the "
                         "layer's inputs")
