"""Every measured CPU row is checked to the byte by a graph test.

The rows of tests/data/*activations*_cpu.jsonl (saved_tensors_hooks on the CPU: the tools
named in each test module) are the first of tcalc's three memory references. Each graph test
module keeps the rows it checks in module-level lists (graph_rows.measured_rows, or a fixture
read whole) and checks each to the byte (graph_rows.check_measured or its own assertion);
here, every row of every fixture is in one of those lists, so a row added to a fixture
without a graph test to check it fails."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from conftest import DATA

TESTS = Path(__file__).parent
# the keys that name a measured case; tcalc's own columns (tcalc_bytes, error_pct: what tcalc
# printed when the row was measured) are not part of it
_TCALC_COLUMNS = ("file", "tcalc_bytes", "error_pct")


def _key(row: dict) -> str:  # type: ignore[type-arg]
    return json.dumps({k: v for k, v in row.items() if k not in _TCALC_COLUMNS},
                      sort_keys=True)


def _rows_in_graph_tests() -> set[str]:
    keys = set()
    for path in sorted(TESTS.glob("test_graph*.py")):
        module = importlib.import_module(path.stem)
        for value in vars(module).values():
            if isinstance(value, (list, tuple)) and value and isinstance(value[0], dict) \
                    and "measured_bytes" in value[0]:
                keys.update(_key(r) for r in value)
    return keys


def test_every_measured_cpu_row_is_in_a_graph_test() -> None:
    checked = _rows_in_graph_tests()
    missing = []
    fixtures = sorted(DATA.glob("*activations*_cpu.jsonl"))
    assert len(fixtures) > 40
    for path in fixtures:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "skipped" in row or "measured_bytes" not in row:
                continue
            if _key(row) not in checked:
                missing.append(f"{path.name}: {row.get('config')} {row.get('attention')} "
                               f"{row.get('dtype')} B={row.get('B')} T={row.get('T')}")
    assert not missing, f"{len(missing)} measured rows no graph test checks:\n" + \
        "\n".join(missing[:40])
