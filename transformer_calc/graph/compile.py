"""Compile a traced structure once into polynomials, and evaluate configurations from them.

A trace with `SInt` sizes (symbols.py) gives every byte, parameter and FLOP count as a
polynomial in the symbols (B, T, E, H, Hkv, dh, F, V, r, L, ...) and records, as guards,
every comparison it made with a size: which dims equal 1, which reshapes are views, a
kernel's alignment (torch.compile's 0/1 specialisation and guards, made explicit). The
polynomials hold for every configuration with the same *static key* (the family's flags,
the run's dtypes, device, kernel choice, LoRA targets, dropout on or off, recomputation)
whose sizes pass the same guards; the two together are the structure key. Layers are traced
until one repeats and replayed (modules.Builder.layers), so L stays a symbol.

    s = compile_run(family, run)        # traced once per structure, then cached
    r = evaluate_fast(family, run)      # the costs evaluate() gives, from the cache
    cols = sweep(family, run, B=[...], T=[...])   # many sizes of one model at once
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from fractions import Fraction
from typing import Any

from transformer_calc.graph.evaluate import Family, trace
from transformer_calc.graph.held import held, totals
from transformer_calc.graph.modules import WINDOWS, Run, symbol_values
from transformer_calc.graph.names import NamedRow, named_rows, tensor_parallel
from transformer_calc.graph.symbols import Coef, Guard, Monomial, Poly, recording

OUTPUTS = ("activation_bytes", "weight_copy_bytes", "params", "trainable_params",
           "forward_flops", "recomputed_layer_bytes")
_SIZE_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _fields_of(family: Family) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The family's config fields that are sizes (symbols), and the rest (flags)."""
    cls = type(family)
    if cls not in _SIZE_FIELDS:
        sizes = family.sizes()
        names = tuple(f.name for f in fields(family))
        _SIZE_FIELDS[cls] = (tuple(n for n in names if n in sizes),
                             tuple(n for n in names if n not in sizes))
    return _SIZE_FIELDS[cls]


def static_key(family: Family, run: Run) -> tuple[object, ...]:
    """Everything but the sizes that decides the graph: the family and its flags (a dropout
    probability as on or off: the graph reads only p == 0), and the run's settings."""
    cls = type(family)
    flags = tuple(v != 0 if isinstance(v, float) else v
                  for v in (getattr(family, n) for n in _fields_of(family)[1]))
    lora = run.lora
    adapters = None if lora is None else (tuple(sorted(lora.targets)), lora.dropout != 0,
                                          lora.dtype.name if lora.dtype else None,
                                          tuple(sorted(lora.parameters)), lora.quant,
                                          lora.head)
    return (cls.__name__, flags, run.dtype.name, run.device, run.attention,
            run.autocast.name if run.autocast else None,
            run.use_cache and run.recompute != "full", run.recompute, adapters,
            tuple(sorted(run.frozen)), run.sdpa_kernel)


# -- guards: normal form and what the rest implies ------------------------------------------------
def _integral(p: Poly) -> Poly:
    """p times the lcm of its coefficients' denominators (a positive factor)."""
    den = math.lcm(*(Fraction(c).denominator for _, c in p.terms)) if p.terms else 1
    out: dict[Monomial, Coef] = {m: int(c * den) for m, c in p.terms}
    return Poly.of(out)


def _normal(kind: str, p: Poly) -> Poly:
    """Divide out what cannot change the comparison: a common monomial (sizes are >= 1)
    and the coefficients' gcd; == and != also the sign."""
    p = _integral(p)
    if kind == "%" or not p.terms:
        return p
    common = Counter(p.terms[0][0])
    for m, _ in p.terms[1:]:
        common &= Counter(m)
    g = math.gcd(*(int(c) for _, c in p.terms))
    if kind in ("==", "!=") and p.terms[-1][1] < 0:
        g = -g
    out: dict[Monomial, Coef] = {}
    for m, c in p.terms:
        rest = Counter(m) - common
        out[tuple(sorted(rest.elements()))] = int(c) // g
    return Poly.of(out)


def _substitute(p: Poly, fixed: dict[str, int]) -> Poly:
    out: dict[Monomial, Any] = {}
    for m, c in p.terms:
        rest = []
        for s in m:
            if s in fixed:
                c = c * fixed[s]
            else:
                rest.append(s)
        out[tuple(rest)] = out.get(tuple(rest), 0) + c
    return Poly.of(out)


def _at_least(p: Poly, lb: dict[str, int]) -> int | None:
    """p's least value when every coefficient but the constant is >= 0, else None."""
    if any(c < 0 for m, c in p.terms if m):
        return None
    return p.evaluate({s: lb.get(s, 1) for m, _ in p.terms for s in m})


def _implied(kind: str, p: Poly, lb: dict[str, int]) -> bool:
    const = p.constant
    if const is not None:
        if not {"==": const == 0, "!=": const != 0, ">": const > 0, ">=": const >= 0,
                "%": True}[kind]:
            raise AssertionError(f"guard {kind} 0 fails on the trace's own values: {p}")
        return True
    low, high = _at_least(p, lb), _at_least(-p, lb)
    if kind == ">":
        return low is not None and low > 0
    if kind == ">=":
        return low is not None and low >= 0
    if kind == "!=":
        return (low is not None and low > 0) or (high is not None and high > 0)
    return False


def _replace(p: Poly, s: str, by: Poly) -> Poly:
    """p with the symbol s replaced by the polynomial `by`."""
    out = Poly(())
    for m, c in p.terms:
        term = Poly.of({tuple(x for x in m if x != s): c})
        for _ in range(m.count(s)):
            term = term * by
        out = out + term
    return out


def _rule(p: Poly) -> tuple[str, Poly] | None:
    """p == 0 solved for a symbol of degree 1 and coefficient ±1 in one term only
    (H·dh - E == 0: E = H·dh; B - 1 == 0: B = 1)."""
    for m, c in p.terms:
        if len(m) == 1 and c in (1, -1):
            s = m[0]
            rest = Poly(tuple(t for t in p.terms if t[0] != m))
            if all(s not in t for t, _ in rest.terms):
                return s, rest * Poly.const(-c)
    return None


def _lower_bound(kind: str, p: Poly) -> tuple[str, int] | None:
    """a·s + c > 0 (or >= 0) with a > 0: (s, the least s allowed)."""
    if kind not in (">", ">=") or len(p.terms) > 2 or any(len(m) > 1 for m, _ in p.terms):
        return None
    linear = [(m[0], c) for m, c in p.terms if m]
    if len(linear) != 1 or linear[0][1] <= 0:
        return None
    (s, a), c = linear[0], p.constant_term
    return s, (-c // a + 1 if kind == ">" else -(c // a))


def simplify(guards: Sequence[Guard]) -> tuple[Guard, ...]:
    """The guards less those that every size >= 1 and the kept guards imply: equalities
    solved for a symbol (E = H·dh, B = 1) and substituted, one-symbol lower bounds (B >= 2)
    applied; != becomes > where the difference cannot be negative."""
    norm: dict[Guard, None] = {}
    for kind, p, n in guards:
        q = _normal(kind, p)
        if kind == "!=" and (low := _at_least(q, {})) is not None and low >= 0:
            kind = ">"
        if kind == "%" or not _implied(kind, q, {}):
            norm[(kind, q, n)] = None
    rules: list[tuple[str, Poly]] = []
    lb: dict[str, int] = {}
    kept: list[Guard] = []
    rest: list[Guard] = []
    for g in norm:
        kind, p, _ = g
        rule = _rule(p) if kind == "==" else None
        bound = _lower_bound(kind, p)
        if rule is not None:
            rules.append(rule)
            kept.append(g)
        elif bound is not None:
            lb[bound[0]] = max(lb.get(bound[0], 1), bound[1])
        else:
            rest.append(g)
    for s, least in lb.items():
        kept.append((">=", _normal(">=", Poly.of({(s,): 1, (): -least})), 0))
    for kind, p, n in rest:
        q = p
        for s, by in rules:
            q = _replace(q, s, by)
        q = _normal(kind, q)
        if kind == "%":
            if q.constant is None:
                kept.append((kind, p, n))
            elif int(q.constant) % n:
                raise AssertionError(f"guard ({p}) % {n} fails on the trace's own values")
        elif not _implied(kind, q, lb):
            kept.append((kind, p, n))
    return tuple(sorted(dict.fromkeys(kept), key=lambda g: (str(g[1]), g[0])))


def guard_text(g: Guard) -> str:
    kind, p, n = g
    return f"({p}) % {n} == 0" if kind == "%" else f"{p} {kind} 0"


# -- code generation ---------------------------------------------------------------------------
def _expr(terms: list[tuple[Monomial, int]]) -> str:
    """A sum of integer terms, the most shared symbol factored out first (Horner-like)."""
    if not terms:
        return "0"
    counts = Counter(s for m, _ in terms for s in set(m))
    if not counts or counts.most_common(1)[0][1] == 1:
        return " + ".join("*".join([str(c)] * (c != 1 or not m) + list(m)) for m, c in terms)
    s = counts.most_common(1)[0][0]
    inner, rest = [], []
    for m, c in terms:
        if s in m:
            k = list(m)
            k.remove(s)
            inner.append((tuple(k), c))
        else:
            rest.append((m, c))
    body = _expr(inner)
    head = s if body == "1" else f"{s}*({body})"
    return head if not rest else f"{head} + {_expr(rest)}"


def poly_expr(p: Poly) -> str:
    """Python source for p over its symbols' names, exact in integers (Fraction
    coefficients: the sum over their common denominator, floor-divided)."""
    den = math.lcm(*(Fraction(c).denominator for _, c in p.terms)) if p.terms else 1
    body = _expr([(m, int(c * den)) for m, c in p.terms])
    return f"({body})" if den == 1 else f"(({body}) // {den})"


def _guard_expr(g: Guard) -> str:
    kind, p, n = g
    return f"({poly_expr(p)} % {n} == 0)" if kind == "%" else f"({poly_expr(p)} {kind} 0)"


def _function(args: Sequence[str], body: str, env: dict[str, Any],
              prelude: Sequence[str] = ()) -> Callable[..., Any]:
    """Compile generated arithmetic (built here from our own polynomials, no outside
    text) into a function."""
    lines = "".join(f"    {line}\n" for line in prelude)
    src = f"def _f({', '.join(args)}):\n{lines}    return {body}\n"
    exec(compile(src, "<tcalc.graph.compile>", "exec"), env)  # noqa: S102
    return env["_f"]  # type: ignore[no-any-return]


def _tuple(exprs: Sequence[str]) -> str:
    """A tuple's source (empty where nothing is saved: LoRA targets that match no module)."""
    return f"({', '.join(exprs)},)" if exprs else "()"


def _largest(polys: Sequence[Poly]) -> str:
    return f"_max({', '.join(poly_expr(p) for p in polys)}, 0)" if polys else "0"


@dataclass
class Structure:
    """One compiled structure: its key (static part and guards), the costs as polynomials
    (`rebuilt`: one per traced layer; full recomputation rebuilds the largest), and rows:
    each held storage's polynomial by (scope, role, dtype), replayed layers' scopes
    labelled `*`. check(values) says whether a configuration's sizes pass the guards;
    costs(values) gives OUTPUTS in order."""

    static: tuple[object, ...]
    guards: tuple[Guard, ...]
    polys: dict[str, Poly]
    rebuilt: tuple[Poly, ...]
    rows: tuple[tuple[str, str, str, Poly], ...]
    symbols: tuple[str, ...]
    check: Callable[[dict[str, int]], bool]
    costs: Callable[[dict[str, int]], tuple[int, ...]]
    named: tuple[NamedRow, ...] = ()
    kernels: frozenset[str] = frozenset()  # the SDPA kernels torch picks (sdpa.kernel)
    # per traced layer under full recomputation: the rebuild's part in H, Hkv or F (what
    # tensor parallelism splits) and each storage it rebuilds
    rebuilt_split: tuple[Poly, ...] = ()
    rebuilt_storages: tuple[tuple[Poly, ...], ...] = ()
    _values: Callable[[dict[str, int]], tuple[int, ...]] | None = None
    # the named rows' text (name, formula, stack, note), written once by their reader
    templates: tuple[tuple[str, str, str, str], ...] | None = None

    def named_values(self, values: dict[str, int]) -> tuple[int, ...]:
        """Per named row its bytes and repeat; then per traced layer the rebuild's split
        part and its largest storage (a generated function, compiled on first use)."""
        if self._values is None:
            exprs = [poly_expr(p) for r in self.named for p in (r.nbytes, r.repeat)]
            exprs += [e for split, storages in zip(self.rebuilt_split, self.rebuilt_storages,
                                                   strict=True)
                      for e in (poly_expr(split), _largest(storages))]
            names = sorted({x for r in self.named for p in (r.nbytes, r.repeat)
                            for m, _ in p.terms for x in m}
                           | {x for layer in self.rebuilt_storages for p in layer
                              for m, _ in p.terms for x in m})
            self._values = _function(["v"], _tuple(exprs), {"_max": max},
                                     [f"{x} = v['{x}']" for x in names])
        return self._values(values)

    @property
    def key(self) -> tuple[object, ...]:
        return (self.static, tuple(guard_text(g) for g in self.guards))

    def exprs(self) -> list[str]:
        return [poly_expr(self.polys[k]) for k in OUTPUTS[:-1]] + [_largest(self.rebuilt)]

    def specialised(self, fixed: dict[str, int], swept: Sequence[str]
                    ) -> tuple[Callable[..., Any], Callable[..., Any], list[Poly]]:
        """The guards and costs over the swept symbols alone, the rest fixed: (check,
        costs, the cost polynomials) as functions of the swept columns."""
        sub = {k: v for k, v in fixed.items() if k not in swept}
        guards = [_guard_expr((k, _substitute(p, sub), n)) for k, p, n in self.guards]
        polys = [_substitute(self.polys[k], sub) for k in OUTPUTS[:-1]]
        rebuilt = [_substitute(p, sub) for p in self.rebuilt]
        exprs = [poly_expr(p) for p in polys] + [_largest(rebuilt)]
        env: dict[str, Any] = {}
        check = _function(swept, " & ".join(guards) or "True", env)
        costs = _function(["_max", *swept], _tuple(exprs), {})
        return check, costs, polys + rebuilt


def _build(static: tuple[object, ...], guards: tuple[Guard, ...], polys: dict[str, Poly],
           rebuilt: tuple[Poly, ...], rows: tuple[tuple[str, str, str, Poly], ...]
           ) -> Structure:
    names = sorted({s for p in [*polys.values(), *rebuilt, *(g[1] for g in guards)]
                    for m, _ in p.terms for s in m})
    unpack = [f"{s} = v['{s}']" for s in names]
    check = _function(["v"], " and ".join(_guard_expr(g) for g in guards) or "True", {},
                      unpack)
    st = Structure(static, guards, polys, rebuilt, rows, tuple(names), check, check)
    st.costs = _function(["v"], _tuple(list(st.exprs())), {"_max": max}, unpack)
    return st


# -- the cache -------------------------------------------------------------------------------------
_CACHE: dict[tuple[object, ...], list[Structure]] = {}


def clear_cache() -> None:
    _CACHE.clear()


def cached() -> list[Structure]:
    return [s for group in _CACHE.values() for s in group]


def compile_structure(family: Family, run: Run) -> Structure:
    """Trace the configuration with symbolic sizes (every layer until one repeats), record
    its guards, and compile what it holds into polynomials (no cache)."""
    m_sizes = family.sizes()
    size_fields = _fields_of(family)[0]
    with recording() as recorded:
        m = trace(family, run, symbolic=True,
                  replaced=lambda m: replace(family, **{  # type: ignore[arg-type]
                      f: m[f].value for f in size_fields}))
    tr = m.trace
    kept = held(tr, run.recompute)
    t = totals(tr, kept)
    rows = tuple((s.scope if n.poly.constant == 1 or not tr.replay
                  else f"{s.scope} [x ({n.poly})]", s.role, s.storage.dtype.name,
                  n.poly * s.storage.formula) for s, n in kept.saved)
    named = named_rows(family, run, tr.ops, ((s, n.poly) for s, n in kept.saved))
    split = tuple(sum((st.formula for st in layer if tensor_parallel(st.formula)), Poly(()))
                  for layer in kept.rebuilt)
    storages = tuple(tuple(st.formula for st in layer) for layer in kept.rebuilt)
    polys = {"activation_bytes": t.activation_bytes, "weight_copy_bytes": t.weight_copy_bytes,
             "params": t.params, "trainable_params": t.trainable_params,
             "forward_flops": t.forward_flops}
    st = _build(static_key(family, run), simplify(list(recorded)), polys, t.rebuilt, rows)
    st.named, st.rebuilt_split, st.rebuilt_storages = named, split, storages
    st.kernels = frozenset(tr.kernels)
    values = symbol_values(run, m_sizes)
    if not st.check(values):
        raise AssertionError(f"a structure fails its own guards: {st.key}")
    return st


def compile_run(family: Family, run: Run) -> Structure:
    """The compiled structure for a configuration: from the cache when its static key and
    guards match one, else traced, compiled and cached."""
    return _lookup(family, run, static_key(family, run), symbol_values(run, family.sizes()))


def _lookup(family: Family, run: Run, static: tuple[object, ...],
            values: dict[str, int]) -> Structure:
    group = _CACHE.setdefault(static, [])
    for st in group:
        if st.check(values):
            return st
    st = compile_structure(family, run)
    group.append(st)
    return st


class FastResult:
    """evaluate()'s costs from a compiled structure: activation_bytes, weight_copy_bytes,
    params, trainable_params, forward_flops, recomputed_layer_bytes; the formulas and rows
    from `structure`."""

    __slots__ = ("structure", *OUTPUTS)

    def __init__(self, structure: Structure, costs: tuple[int, ...]) -> None:
        self.structure = structure
        (self.activation_bytes, self.weight_copy_bytes, self.params, self.trainable_params,
         self.forward_flops, self.recomputed_layer_bytes) = costs

    @property
    def activation_formula(self) -> Poly:
        return self.structure.polys["activation_bytes"]

    @property
    def flops_formula(self) -> Poly:
        return self.structure.polys["forward_flops"]


def evaluate_fast(family: Family, run: Run) -> FastResult:
    values = symbol_values(run, family.sizes())
    st = _lookup(family, run, static_key(family, run), values)
    return FastResult(st, st.costs(values))


# -- sweeps ----------------------------------------------------------------------------------------
SWEPT = ("B", "T", "r")


def _bound(p: Poly, largest: dict[str, int]) -> int:
    """An upper bound of |p| where each symbol is at most `largest` (every size >= 1)."""
    total: Coef = 0
    for m, c in p.terms:
        term: Coef = -c if c < 0 else c
        for s in m:
            term = term * largest[s]
        total += term
    return int(total)


def sweep(family: Family, run: Run, **columns: Sequence[int]) -> dict[str, Any]:
    """OUTPUTS for many sizes of one configuration: columns of B, T and (LoRA) r, of equal
    length, the rest as in `run`. Each point is served by the cached structure whose guards
    it passes (traced and compiled where none does), its polynomials specialised to the
    fixed sizes. With numpy (imported here, only if installed) the columns are int64 arrays
    (object arrays where a value could pass 2**62), else lists of ints."""
    swept = [k for k in SWEPT if k in columns]
    sizes = family.sizes()
    if not swept or len(swept) != len(columns):
        raise ValueError(f"sweep: only {', '.join(SWEPT)} can be swept")
    try:
        import numpy as np  # optional: large sweeps as arrays
    except ImportError:
        np = None
    cols: dict[str, Any]
    if np is not None:
        cols = {k: np.asarray(columns[k], dtype=np.int64) for k in swept}
        if "T" in cols:
            cols["T32"] = -(-cols["T"] // 32) * 32
            if "Q" in sizes:  # a chunked scan's chunks
                cols["Tq"] = -(-cols["T"] // sizes["Q"])
            for rate, windows in WINDOWS:  # DeepSeek-V4's compressed entries
                if rate in sizes:
                    cols[windows] = np.maximum(cols["T"] // sizes[rate], 1)
        out: dict[str, Any] = {k: np.zeros(len(cols[swept[0]]), dtype=np.int64)
                               for k in OUTPUTS}
        todo: Any = np.arange(len(cols[swept[0]]))
    else:
        cols = {k: list(columns[k]) for k in swept}
        if "T" in cols:
            cols["T32"] = [-(-t // 32) * 32 for t in cols["T"]]
            if "Q" in sizes:
                cols["Tq"] = [-(-t // sizes["Q"]) for t in cols["T"]]
            for rate, windows in WINDOWS:
                if rate in sizes:
                    cols[windows] = [max(t // sizes[rate], 1) for t in cols["T"]]
        out = {k: [0] * len(cols[swept[0]]) for k in OUTPUTS}
        todo = list(range(len(cols[swept[0]])))
    args = list(cols)
    base = symbol_values(run, family.sizes())
    static = static_key(family, run)
    while len(todo):
        for st in list(_CACHE.get(static, [])):
            check, costs, polys = st.specialised(base, args)
            share = _share_numpy if np is not None else _share_lists
            todo = share(np, check, costs, polys, cols, args, todo, out)
            if not len(todo):
                break
        if len(todo):  # no cached structure takes this point: trace it
            size = {a: int(cols[a][todo[0]]) for a in swept}
            lora = run.lora if "r" not in size or run.lora is None else replace(
                run.lora, rank=size["r"])
            compile_run(family, replace(run, batch=size.get("B", run.batch),
                                        seq_len=size.get("T", run.seq_len), lora=lora))
    return out


def _share_lists(np: Any, check: Callable[..., Any], costs: Callable[..., Any],
                 polys: list[Poly], cols: dict[str, list[int]], args: list[str],
                 todo: list[int], out: dict[str, Any]) -> list[int]:
    """One structure's share of a sweep, point by point; returns the points left."""
    left = []
    for i in todo:
        point = [cols[a][i] for a in args]
        if check(*point):
            for k, v in zip(OUTPUTS, costs(max, *point), strict=True):
                out[k][i] = v
        else:
            left.append(i)
    return left


def _share_numpy(np: Any, check: Callable[..., Any], costs: Callable[..., Any],
                 polys: list[Poly], cols: dict[str, Any], args: list[str],
                 todo: Any, out: dict[str, Any]) -> Any:
    """One structure's share of a sweep, as numpy arrays; returns the points left."""
    arrays = [cols[a][todo] for a in args]
    mask = np.broadcast_to(np.asarray(check(*arrays), dtype=bool), todo.shape)
    if not mask.any():
        return todo
    largest = {a: int(cols[a].max()) for a in args}
    exact = max(_bound(p, largest) for p in polys) < 2 ** 62
    chosen = [a[mask] if exact else a[mask].astype(object) for a in arrays]
    results = costs(lambda *xs: np.maximum.reduce(np.broadcast_arrays(*xs)), *chosen)
    for k, v in zip(OUTPUTS, results, strict=True):
        if not exact and out[k].dtype != object:
            out[k] = out[k].astype(object)
        out[k][todo[mask]] = v
    return todo[~mask]
