"""Mutation testing of the core's formulas: change one operator or constant in the
parameter, FLOPs, memory or plan code, run the tests, and count the mutants they catch.
`make mutation` runs it; the score is written in the README.

Mutants (from the AST, in code that is not a string): + <-> -, * -> +, // -> *, an integer
constant n -> n + 1 (n from 0 to 64), < <-> <=, > <-> >=. A sample of --count of them, drawn
with --seed, each run in a copy of the package on PYTHONPATH against the fast tests that cover
the core (`-x`: the first failure kills it; a run over --timeout seconds counts as killed).

    python tools/mutation.py --count 60 --seed 1 [--jobs 2] [--all]
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("params.py", "flops.py", "memory.py", "plan.py", "lora.py", "quant.py",
           # the op graph's saved-for-backward rules and what memory reads of them
           "graph/ops.py", "graph/sdpa.py", "graph/held.py", "graph/autocast.py",
           "graph/families/llama.py", "graph/families/gpt2.py", "costs/activations.py")
TESTS = ["tests/test_params_presets.py", "tests/test_hf.py", "tests/test_registry.py",
         "tests/test_flops.py", "tests/test_memory.py", "tests/test_plan.py",
         "tests/test_variants.py", "tests/test_mixers.py", "tests/test_breakdown.py",
         "tests/test_activations_measured.py", "tests/test_explain_compare_sweep.py",
         "tests/test_lora.py", "tests/test_lora_memory.py", "tests/test_quant.py",
         "tests/test_fit.py", "tests/test_megatron.py", "tests/test_efficient_attention.py",
         "tests/test_patterns_memory.py", "tests/test_peak.py", "tests/test_parallel_peak.py",
         "tests/test_graph.py"]

SWAPS: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add,
                           ast.FloorDiv: ast.Mult, ast.Lt: ast.LtE, ast.LtE: ast.Lt,
                           ast.Gt: ast.GtE, ast.GtE: ast.Gt}


class Mutant(NamedTuple):
    module: str
    line: int
    what: str  # "a -> b"
    index: int  # the n-th mutation site of the module, in ast.walk order


def _skip_strings(tree: ast.AST) -> set[int]:
    """ids of nodes inside f-strings and docstrings: their arithmetic is text, not a formula."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside |= {id(n) for n in ast.walk(node)}
    return inside


def sites(module: str) -> list[Mutant]:
    tree = ast.parse((ROOT / "transformer_calc" / module).read_text())
    skip = _skip_strings(tree)
    out: list[Mutant] = []
    n = 0
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in SWAPS:
            out.append(Mutant(module, node.lineno, f"{type(node.op).__name__} -> "
                              f"{SWAPS[type(node.op)].__name__}", n))
            n += 1
        elif isinstance(node, ast.Compare) and type(node.ops[0]) in SWAPS:
            out.append(Mutant(module, node.lineno, f"{type(node.ops[0]).__name__} -> "
                              f"{SWAPS[type(node.ops[0])].__name__}", n))
            n += 1
        elif (isinstance(node, ast.Constant) and type(node.value) is int
              and 0 <= node.value <= 64):
            out.append(Mutant(module, node.lineno, f"{node.value} -> {node.value + 1}", n))
            n += 1
    return out


def mutate(module: str, index: int) -> str:
    """The module's source with its index-th mutation site changed."""
    tree = ast.parse((ROOT / "transformer_calc" / module).read_text())
    skip = _skip_strings(tree)
    n = 0
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        hit = False
        if isinstance(node, ast.BinOp) and type(node.op) in SWAPS:
            hit = n == index
            if hit:
                node.op = SWAPS[type(node.op)]()
            n += 1
        elif isinstance(node, ast.Compare) and type(node.ops[0]) in SWAPS:
            hit = n == index
            if hit:
                node.ops[0] = SWAPS[type(node.ops[0])]()
            n += 1
        elif (isinstance(node, ast.Constant) and type(node.value) is int
              and 0 <= node.value <= 64):
            hit = n == index
            if hit:
                node.value += 1
            n += 1
        if hit:
            return ast.unparse(tree)
    raise IndexError(index)


def run(m: Mutant, timeout: int) -> tuple[Mutant, bool, float]:
    """(mutant, killed, seconds). A mutant that breaks the import kills itself too."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tcalc-mutant-") as tmp:
        pkg = Path(tmp) / "transformer_calc"
        shutil.copytree(ROOT / "transformer_calc", pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(ROOT / "configs", Path(tmp) / "configs")  # presets.preset_dir()
        (pkg / m.module).write_text(mutate(m.module, m.index))
        env = dict(os.environ, PYTHONPATH=tmp, PYTHONDONTWRITEBYTECODE="1")
        # run from the copy: `python -m` puts the working directory first on sys.path, and
        # the repository's own package there would shadow the mutant
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                                "no:cacheprovider", "-m", "not slow", "--rootdir", str(ROOT),
                                "-c", str(ROOT / "pyproject.toml"),
                                *(str(ROOT / t) for t in TESTS)], cwd=tmp,
                               env=env, capture_output=True, timeout=timeout, check=False)
            killed = r.returncode != 0
        except subprocess.TimeoutExpired:
            killed = True
    return m, killed, time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--all", action="store_true", help="every mutation site, not a sample")
    ap.add_argument("--modules", nargs="*", default=list(TARGETS),
                    help="only these of the targets (paths under transformer_calc/)")
    ap.add_argument("--tests", nargs="*", default=list(TESTS),
                    help="only these test files (a quicker look at one module)")
    args = ap.parse_args()
    TESTS[:] = args.tests
    every = [s for module in args.modules for s in sites(module)]
    chosen = every if args.all else random.Random(args.seed).sample(  # noqa: S311
        every, min(args.count, len(every)))
    print(f"# {len(chosen)} of {len(every)} mutation sites in {', '.join(args.modules)} "
          f"(seed {args.seed}); tests: {len(TESTS)} files", flush=True)
    baseline = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                               "no:cacheprovider", "-m", "not slow",
                               *(str(ROOT / t) for t in TESTS)], cwd=ROOT,
                              capture_output=True, check=False)
    if baseline.returncode != 0:  # every mutant would look killed
        sys.exit("the tests fail without a mutation: fix them first")
    survivors = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for m, killed, secs in pool.map(lambda m: run(m, args.timeout), chosen):
            print(f"{'killed  ' if killed else 'SURVIVED'} {m.module}:{m.line} {m.what} "
                  f"({secs:.0f} s)", flush=True)
            if not killed:
                survivors.append(m)
    killed_n = len(chosen) - len(survivors)
    print(f"mutation score: {killed_n}/{len(chosen)} killed = "
          f"{100 * killed_n / len(chosen):.1f} %")


if __name__ == "__main__":
    main()
