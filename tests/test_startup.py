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


def test_cli_import_builds_no_command() -> None:
    # Options (one per architecture field, Enum types for choices) are built per command,
    # only for the command that runs.
    code = ("import transformer_calc.cli as c; "
            "print(c._choice_enum.cache_info().currsize, c._full_app.cache_info().currsize, "
            "sum(b.cache_info().currsize for b in c.COMMANDS.values()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["0", "0", "0"]


def test_entry_point_builds_only_the_invoked_command() -> None:
    from transformer_calc.cli import COMMANDS, _app_for, app

    assert _app_for([]) is app and _app_for(["--help"]) is app and _app_for(["nosuch"]) is app
    single = _app_for(["params", "gpt2"])
    assert [c.name for c in single.registered_commands] == ["params"]
    assert set(COMMANDS) == {c.name for c in app.registered_commands}


def test_real_entry_point_runs_a_subcommand() -> None:
    import json

    out = subprocess.run([sys.executable, "-m", "transformer_calc", "params", "gpt2", "-f",
                          "json"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["total_params"] == 124_439_808
