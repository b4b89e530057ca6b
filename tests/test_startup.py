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


def _override_names(app) -> set[str]:  # type: ignore[no-untyped-def]
    import inspect

    from transformer_calc.spec import ARCH_FIELDS

    fn = app.registered_commands[0].callback
    return set(inspect.signature(fn).parameters) & {f.name for f in ARCH_FIELDS}


def test_a_command_is_built_with_only_the_overrides_argv_names() -> None:
    from transformer_calc.cli import _app_for
    from transformer_calc.spec import ARCH_FIELDS

    assert _override_names(_app_for(["params", "gpt2", "-f", "json"])) == set()
    assert _override_names(_app_for(["params", "gpt2", "--n-heads=4", "--no-tie-embeddings",
                                     "--mixed"])) == {"n_heads", "tie_embeddings"}
    every = {f.name for f in ARCH_FIELDS}
    assert _override_names(_app_for(["params", "gpt2", "--help"])) == every
    assert _override_names(_app_for(["params", "gpt2"], named=False)) == every


def test_narrowed_command_answers_as_the_whole_one(cli) -> None:  # type: ignore[no-untyped-def]
    import json

    # the real entry point (narrowed) against the full app (every override built)
    args = ["params", "gpt2", "--n-heads", "4", "--no-tie-embeddings", "-f", "json"]
    out = subprocess.run([sys.executable, "-m", "transformer_calc", *args],
                         capture_output=True, text=True, check=True).stdout
    full = cli(*args)
    assert json.loads(out) == json.loads(full.stdout)
    assert json.loads(out)["total_params"] == 124_439_808 + 50_257 * 768  # the head untied


def test_a_misspelt_override_still_gets_clicks_suggestions() -> None:
    # the narrowed command does not know --n-head's neighbours: main runs the whole one again
    r = subprocess.run([sys.executable, "-m", "transformer_calc", "params", "gpt2", "--n-head",
                        "4"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("Error: No such option: --n-head (Possible options: --d-head, "
                                "--lm-head, --n-heads)")
