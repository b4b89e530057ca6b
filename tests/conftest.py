from __future__ import annotations

import ast
import json
import operator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from transformer_calc.cli import app

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


def load_tool(name: str) -> Any:
    """A developer tool (tools/NAME.py) as a module, for the tests that check a generated file
    equals what its tool writes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"tool_{name}", ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
       ast.Div: operator.truediv, ast.Pow: operator.pow, ast.FloorDiv: operator.floordiv}


def evaluate(expr: str) -> float:
    """The arithmetic a step shows, evaluated: '768 × (12 · 64) + 12 · 64' -> 590592."""
    text = (expr.replace("×", "*").replace("·", "*").replace("−", "-").replace(",", "")
            .replace("²", "**2").replace("⌊", "(").replace("⌋", ")//1"))  # ⌊x⌋: rounded down

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp):
            return OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(expr)

    return walk(ast.parse(text, mode="eval"))


class Run:
    """Invoke the CLI in-process; result.stdout / result.stderr / result.exit_code."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str, code: int = 0) -> Any:
        result = self.runner.invoke(app, list(args), env={"COLUMNS": "200", "GITHUB_ACTIONS": ""})
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr,
                                          result.exception)
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--format", "json").stdout)


@pytest.fixture
def cli() -> Run:
    return Run()
