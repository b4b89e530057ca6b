"""Symbolic sizes: each tensor dimension is a polynomial in named symbols (B, T, E, H, ...)
carried with its value, so a trace gives both the bytes and the formula they came from.

When a structure is compiled (graph/compile.py), the values are `SInt`s: ints that know
their polynomial and record, as a guard, every comparison a trace makes with them (the
decisions torch.compile's guards record: a size equal to 1, a view or a copy, a kernel's
alignment); the compiled polynomials hold wherever the guards do."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

# a monomial: the symbols multiplied, sorted, with repetition (("B", "T", "T") is B·T²)
Monomial = tuple[str, ...]
Coef = int | Fraction  # RoPE's half head is dh/2


@dataclass(frozen=True)
class Poly:
    """A polynomial with integer coefficients: terms as (monomial, coefficient), sorted."""

    terms: tuple[tuple[Monomial, Coef], ...]

    @staticmethod
    def of(terms: dict[Monomial, Coef]) -> Poly:
        return Poly(tuple(sorted((m, c) for m, c in terms.items() if c)))

    @staticmethod
    def const(n: Coef) -> Poly:
        return Poly((((), n),) if n else ())

    @property
    def constant(self) -> Coef | None:
        """The polynomial's value when it has no symbol, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and not self.terms[0][0]:
            return self.terms[0][1]
        return None

    @property
    def constant_term(self) -> Coef:
        return next((c for m, c in self.terms if not m), 0)

    def __neg__(self) -> Poly:
        return Poly(tuple((m, -c) for m, c in self.terms))

    def _plus_constant(self, c: Coef) -> Poly:
        """self + c without re-sorting: the constant term, when there is one, sorts first."""
        terms = self.terms
        if terms and not terms[0][0]:
            c, terms = terms[0][1] + c, terms[1:]
        return Poly((((), c),) + terms if c else terms)

    def __sub__(self, other: Poly) -> Poly:
        o = other.terms
        if not o:
            return self
        if len(o) == 1 and not o[0][0]:  # a constant: the guards' common case
            return self._plus_constant(-o[0][1])
        return self + (-other)

    def __add__(self, other: Poly) -> Poly:
        o, t = other.terms, self.terms
        if not o:
            return self
        if not t:
            return other
        if len(o) == 1 and not o[0][0]:
            return self._plus_constant(o[0][1])
        if len(t) == 1 and not t[0][0]:
            return other._plus_constant(t[0][1])
        out = dict(t)
        for m, c in o:
            out[m] = out.get(m, 0) + c
        return Poly.of(out)

    def __mul__(self, other: Poly) -> Poly:
        if len(self.terms) == 1 and len(other.terms) == 1:  # the common case: fast
            (m1, c1), (m2, c2) = self.terms[0], other.terms[0]
            m = m1 if not m2 else m2 if not m1 else tuple(sorted(m1 + m2))
            return Poly(((m, c1 * c2),))
        out: dict[Monomial, Coef] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Poly.of(out)

    def scaled(self, n: int) -> Poly:
        """self · n, for an int n."""
        return Poly(tuple((m, c * n) for m, c in self.terms)) if n else Poly(())

    def evaluate(self, values: dict[str, int]) -> int:
        total: Coef = 0
        for m, c in self.terms:
            for s in m:
                c *= values[s]
            total += c
        return int(total)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in sorted(self.terms, key=lambda t: (-len(t[0]), t[0])):
            powers = []
            for s in dict.fromkeys(m):
                k = m.count(s)
                powers.append(s if k == 1 else f"{s}^{k}")
            factors = ([str(c)] if c != 1 or not m else []) + powers
            parts.append("·".join(factors))
        return " + ".join(parts)


@dataclass(frozen=True)
class Dim:
    """One size: its value and the polynomial it is (``Dim.sym("T", 128)``)."""

    value: int
    poly: Poly

    @staticmethod
    def sym(name: str, value: int) -> Dim:
        return Dim(value, Poly((((name,), 1),)))

    @staticmethod
    def const(n: int) -> Dim:
        return Dim(n, Poly.of({(): n}))

    def __mul__(self, other: Dim | int) -> Dim:
        o = other if isinstance(other, Dim) else Dim.const(other)
        v = self.value * o.value
        return Dim(v, v.poly if isinstance(v, SInt) else self.poly * o.poly)

    __rmul__ = __mul__

    def halved(self) -> Dim:
        """Half of an even size (RoPE's halves of a head)."""
        return Dim(self.value // 2, self.poly * Poly((((), Fraction(1, 2)),)))

    def __add__(self, other: Dim | int) -> Dim:
        o = other if isinstance(other, Dim) else Dim.const(other)
        v = self.value + o.value
        return Dim(v, v.poly if isinstance(v, SInt) else self.poly + o.poly)

    def __str__(self) -> str:
        return str(self.poly)


def product(dims: tuple[Dim, ...]) -> Dim:
    out = Dim.const(1)
    for d in dims:
        out = out * d
    return out


# -- guards --------------------------------------------------------------------------------------
# A guard: (kind, polynomial, operand) that held in the trace, with kind one of
#   "==", "!=", ">", ">=": the polynomial compared with 0 (its operand unused, 0);
#   "%": the polynomial (less the residue the trace saw) divisible by the operand, an int.
Guard = tuple[str, Poly, int]
_RECORDING: list[dict[Guard, None]] = []


@contextmanager
def recording() -> Iterator[dict[Guard, None]]:
    """Collect the guards SInt comparisons record while the block runs (in order, once)."""
    guards: dict[Guard, None] = {}
    _RECORDING.append(guards)
    try:
        yield guards
    finally:
        _RECORDING.pop()


def _guard(kind: str, poly: Poly, operand: int = 0) -> None:
    if _RECORDING and poly.constant is None:
        _RECORDING[-1][(kind, poly, operand)] = None


def _poly(x: int) -> Poly:
    return x.poly if isinstance(x, SInt) else Poly.const(int(x))


class NotPolynomial(ValueError):
    """A compiled trace asked for a size that is not a polynomial in the symbols (H // Hkv:
    the graph must name it, as a symbol of its own)."""


class SInt(int):
    """An int that is a polynomial in the symbols. Arithmetic with ints and SInts keeps the
    polynomial; comparisons return the int comparison and record which way it went (the
    difference ==, !=, >, >= 0), so the decision is part of the structure the trace
    compiles. Floats (scaling factors) drop the polynomial: they are not sizes."""

    poly: Poly

    def __new__(cls, value: int, poly: Poly) -> SInt:
        self = super().__new__(cls, value)
        self.poly = poly
        return self

    def __repr__(self) -> str:
        return f"{int(self)}[{self.poly}]"

    __hash__ = int.__hash__

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, o: Any) -> Any:
        if type(o) is int:  # (the common case, without a Poly for o)
            return SInt(int(self) + o, self.poly._plus_constant(o)) if o else self
        if not isinstance(o, int):
            return int(self) + o
        return SInt(int(self) + int(o), self.poly + _poly(o))

    __radd__ = __add__

    def __sub__(self, o: Any) -> Any:
        if not isinstance(o, int):
            return int(self) - o
        return SInt(int(self) - int(o), self.poly - _poly(o))

    def __rsub__(self, o: Any) -> Any:
        if not isinstance(o, int):
            return o - int(self)
        return SInt(int(o) - int(self), _poly(o) - self.poly)

    def __mul__(self, o: Any) -> Any:
        if type(o) is int:  # (the common case: coefficients scaled)
            return SInt(int(self) * o, self.poly.scaled(o))
        if not isinstance(o, int):
            return int(self) * o
        return SInt(int(self) * int(o), self.poly * _poly(o))

    __rmul__ = __mul__

    def __neg__(self) -> SInt:
        return SInt(-int(self), -self.poly)

    def __floordiv__(self, o: Any) -> Any:
        """By an int: exact when every coefficient divides, else the residue is guarded
        (a head of dh/2 when dh is even). By an SInt: only a monomial dividing every term
        (3·E // E); anything else is no polynomial (NotPolynomial)."""
        if not isinstance(o, int):
            return int(self) // o
        if isinstance(o, SInt) and o.poly.constant is None:
            q = _divide(self.poly, o.poly)
            if q is None or int(self) % int(o):
                raise NotPolynomial(f"({self.poly}) // ({o.poly})")
            return SInt(int(self) // int(o), q)
        n = int(o)
        residue = int(self) % n
        if residue or any(Fraction(c) % n for _, c in self.poly.terms):
            _guard("%", self.poly - Poly.const(residue), n)
        return SInt(int(self) // n, (self.poly - Poly.const(residue)) *
                    Poly.const(Fraction(1, n)))

    def __mod__(self, o: Any) -> Any:
        if isinstance(o, SInt) and o.poly.constant is None:
            raise NotPolynomial(f"({self.poly}) % ({o.poly})")
        if not isinstance(o, int):
            return int(self) % o
        residue = int(self) % int(o)
        _guard("%", self.poly - Poly.const(residue), int(o))
        return residue

    # -- comparisons: each records the way it went ------------------------------------------
    # (int(o): comparing with a plain int would hand an SInt o back to SInt's reflected
    # method, which would record o against a number)
    def __eq__(self, o: object) -> bool:
        if not isinstance(o, int):
            return NotImplemented
        result = int(self) == int(o)
        if _RECORDING:
            _guard("==" if result else "!=", self.poly - _poly(o))
        return result

    def __ne__(self, o: object) -> bool:
        return not self.__eq__(o) if isinstance(o, int) else NotImplemented

    def __gt__(self, o: Any) -> bool:
        return _order(self, o, ">") if isinstance(o, int) else NotImplemented

    def __ge__(self, o: Any) -> bool:
        return _order(self, o, ">=") if isinstance(o, int) else NotImplemented

    def __lt__(self, o: Any) -> bool:
        return _order(o, self, ">") if isinstance(o, int) else NotImplemented

    def __le__(self, o: Any) -> bool:
        return _order(o, self, ">=") if isinstance(o, int) else NotImplemented

    def __bool__(self) -> bool:
        return self.__ne__(0)


def _order(a: int, b: int, kind: str) -> bool:
    """a > b (or a >= b), recorded: a - b > 0 when it holds, else b - a >= 0 (> 0)."""
    result = int(a) > int(b) if kind == ">" else int(a) >= int(b)
    if not _RECORDING:
        return result
    diff = _poly(a) - _poly(b)
    if result:
        _guard(kind, diff)
    else:
        _guard(">=" if kind == ">" else ">", -diff)
    return result


def _divide(num: Poly, den: Poly) -> Poly | None:
    """num / den when den is one term dividing each of num's terms, else None."""
    if len(den.terms) != 1:
        return None
    dm, dc = den.terms[0]
    out: dict[Monomial, Coef] = {}
    for m, c in num.terms:
        rest = list(m)
        for s in dm:
            if s not in rest:
                return None
            rest.remove(s)
        q = Fraction(c) / Fraction(dc)
        out[tuple(rest)] = int(q) if q.denominator == 1 else q
    return Poly.of(out)
