"""Start-up stays light: the CLI module must not import what only some commands need."""

from __future__ import annotations

import subprocess
import sys


def test_cli_import_is_lazy() -> None:
    code = ("import sys, transformer_calc.cli; "
            "print(sorted(m for m in ('yaml', 'rich.table', 'rich.console', "
            "'transformer_calc.params', 'transformer_calc.presets', 'transformer_calc.render', "
            "'transformer_calc.hf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
