"""The CLI as users see it: commands, formats, overrides, exit codes."""

from __future__ import annotations

import json

import pytest

from transformer_calc import count_params, load_model


def test_params_table_shows_rows_total_and_rule_of_thumb(cli) -> None:
    out = cli("params", "gpt2").stdout
    for text in ("embed.tokens", "attn.q.weight", "attn.q.bias", "ffn.in.weight", "attn.norm",
                 "layer subtotal", "final_norm", "head.lm.weight", "7,087,872", "85,054,464",
                 "total trainable parameters: 124,439,808 (124.4M)",
                 "rule of thumb V·E + 12·L·E² = 123,532,032 (-0.73% vs exact)",
                 "reference 124,439,808 matches", "31.02%"):
        assert text in out, text


def test_params_json_schema_exact_integers(cli) -> None:
    data = cli.json("params", "gpt2")
    assert data["schema"] == "tcalc.params/1"
    assert data["model"] == "gpt2"
    assert data["total_params"] == 124_439_808
    assert sum(c["count"] for c in data["components"]) == data["total_params"]
    q = next(c for c in data["components"] if c["name"] == "decoder.attn.q.weight")
    assert q == {"name": "decoder.attn.q.weight", "count": 12 * 589_824, "per_layer": True,
                 "layers": 12, "count_per_layer": 589_824, "active": 12 * 589_824,
                 "formula": "d_model × (n_heads · d_head)", "expr": "768 × (12 · 64)",
                 "note": "fused with Q, K, V in one matrix; counted by part"}
    assert data["rule_of_thumb"] == {"formula": "V·E + 12·L·E²", "params": 123_532_032,
                                     "error_pct": -0.7295}
    assert data["expected_params"]["matches"] is True
    assert data["spec"]["d_model"] == 768
    assert all(isinstance(c["count"], int) for c in data["components"])


def test_params_json_is_the_core_breakdown(cli) -> None:
    for name in ("bert-large", "transformer-big"):
        data = cli.json("params", name)
        b = count_params(load_model(name))
        assert [(c["name"], c["count"]) for c in data["components"]] == [
            (i.name, i.total) for i in b.items]


def test_params_markdown(cli) -> None:
    out = cli("params", "transformer-base", "--format", "markdown").stdout
    assert out.startswith("## transformer-base: trainable parameters\n")
    assert "| component | formula | per layer | params | share |" in out
    assert "| **encoder layer (× 6)** |" in out
    assert "| attn.q.weight | d_model × (n_heads · d_head) = 512 × (8 · 64) | 262,144 |" in out
    assert "- total trainable parameters: 63,084,544 (63.1M)" in out


@pytest.mark.parametrize("heads", ["1", "4", "12", "24"])
def test_override_heads_keeps_total(cli, heads: str) -> None:
    assert cli.json("params", "gpt2", "--n-heads", heads)["total_params"] == 124_439_808


def test_overrides_width_depth_and_tying(cli) -> None:
    base = cli.json("params", "gpt2")["total_params"]
    untied = cli.json("params", "gpt2", "--no-tie-embeddings")["total_params"]
    assert untied - base == 50257 * 768
    # gpt2 at d_model 1024, 24 layers, d_ff 4096 and 16 heads is gpt2-medium exactly.
    medium = cli.json("params", "gpt2", "--d-model", "1024", "--n-layers", "24",
                      "--d-ff", "4096", "--n-heads", "16")
    assert medium["total_params"] == 354_823_168
    assert cli.json("params", "gpt2", "--position", "rope")["total_params"] == base - 1024 * 768
    assert cli.json("params", "gpt2", "--norm", "rmsnorm")["total_params"] == base - 25 * 768


def test_override_validation_is_one_line(cli) -> None:
    r = cli("params", "gpt2", "--n-heads", "7", code=2)
    assert r.stderr == ("Error: key 'n_heads': expected a divisor of d_model=768 (or set "
                        "d_head), got 7\n")
    r = cli("params", "gpt2", "--position", "rotary", code=2)
    assert "rotary" in r.stderr and "Traceback" not in r.stderr


def test_help_lists_overrides(cli) -> None:
    out = cli("params", "--help").stdout
    for flag in ("--n-heads", "--d-model", "--n-layers", "--n-kv-heads", "--tie-embeddings",
                 "--format"):
        assert flag in out


def test_every_command_has_help(cli) -> None:
    from transformer_calc.cli import app

    names = [command.name for command in app.registered_commands]
    assert {"params", "presets", "import"} <= set(names)
    for command in app.registered_commands:
        assert command.callback.__doc__, command.name
        first = command.callback.__doc__.splitlines()[0]
        assert first in " ".join(cli(command.name, "--help").stdout.split())


def test_presets_lists_every_preset_with_total(cli) -> None:
    out = cli("presets").stdout
    assert "gpt2-medium" in out and "354,823,168" in out
    data = json.loads(cli("presets", "--format", "json").stdout)
    assert {"name": "gpt2", "description": "GPT-2 small (124M)", "total_params": 124_439_808,
            "active_params": 124_439_808} in data
    md = cli("presets", "--format", "markdown").stdout
    assert "| transformer-base | Transformer (base), Vaswani et al. 2017 | 63,084,544 |" in md


def test_model_may_be_a_yaml_path(cli, tmp_path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text("vocab_size: 100\nd_model: 8\nn_layers: 1\nn_heads: 2\nd_ff: 32\n"
                    "max_positions: 16\n")
    data = cli.json("params", str(path))
    assert data["model"] == "tiny"
    # 100·8 + 16·8 + layer (4·(64+8) + 8·32+32 + 32·8+8 + 2·16) + final 16, lm head tied
    assert data["total_params"] == 800 + 128 + (288 + 288 + 264 + 32) + 16


@pytest.mark.parametrize("args, message", [
    (["params", "gpt2", "--format", "yaml"],
     "Error: Invalid value for '--format' / '-f': 'yaml' is not one of 'table', 'json', "
     "'markdown'."),
    (["nosuch"], "Error: No such command 'nosuch'."),
    (["params", "gpt2", "--n-heads", "many"],
     "Error: Invalid value for '--n-heads': 'many' is not a valid int."),
    (["params", "gpt2", "--no-such-option"],
     "Error: No such option: --no-such-option (Possible options: --no-sub-norms, "
     "--norm-position)"),
])
def test_usage_errors_are_one_line_from_the_real_entry_point(args, message: str) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "transformer_calc", *args], capture_output=True,
                       text=True)
    assert r.returncode == 2
    assert r.stderr == message + "\n"


def test_numbers_never_fold_at_80_columns() -> None:
    # a number split across two lines of a table is a wrong number to the reader
    import json
    import os
    import re
    import subprocess
    import sys

    env = os.environ | {"COLUMNS": "80", "NO_COLOR": "1"}
    args = [sys.executable, "-m", "transformer_calc", "memory", "gpt-oss-20b", "--inference",
            "--seq-len", "131072"]
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout
    data = json.loads(subprocess.run(args + ["--format", "json"], capture_output=True,
                                     text=True, env=env, check=True).stdout)
    # every component's exact bytes whole in the table (the weights in the checkpoint's MXFP4)
    assert all(f"{c['bytes']:,}" in out for c in data["components"])
    assert data["settings"]["quant"] == "mxfp4"
    # no cell ends in a comma-grouped fragment continued on the next line
    assert not re.search(r"\d,\d{1,2} │", out), out


@pytest.mark.parametrize("columns", ["0", "-3", "abc", ""])
def test_any_columns_value_prints_the_answer(columns: str) -> None:
    # COLUMNS that is no positive width is ignored as unset (it printed nothing at 0)
    import os
    import subprocess
    import sys

    env = os.environ | {"COLUMNS": columns, "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, "-m", "transformer_calc", "params", "gpt2"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stderr == ""
    assert "total trainable parameters: 124,439,808 (124.4M)" in r.stdout


def test_version() -> None:
    # --version, the installed distribution's version (pyproject.toml)
    import re
    import subprocess
    import sys
    from pathlib import Path

    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    want = re.search(r'^version = "([^"]+)"', pyproject, re.M)
    assert want is not None
    r = subprocess.run([sys.executable, "-m", "transformer_calc", "--version"],
                       capture_output=True, text=True)
    assert r.returncode == 0
    assert r.stdout == f"tcalc {want.group(1)}\n"


def test_shell_completion_is_typers_own() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "transformer_calc", "--show-completion", "bash"],
                         capture_output=True, text=True, check=True).stdout
    assert "_tcalc_completion()" in out or "complete" in out


def test_help_fits_one_screen_and_help_all_explains_the_rest() -> None:
    import os
    import subprocess
    import sys

    def help_of(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "transformer_calc", "memory", *args],
                              capture_output=True, text=True, check=True,
                              env=os.environ | {"COLUMNS": "80"}).stdout

    brief, full = help_of("--help"), help_of("--help-all")
    assert len(brief.splitlines()) <= 50 and len(full.splitlines()) > 300
    assert all(len(line) <= 80 for line in brief.splitlines())
    brief, full = " ".join(brief.split()), " ".join(full.split())
    # every option is at least named in --help, and explained in --help-all
    for flag in ("--lora-targets", "--tp-plan", "--kv-block", "--window", "--d-ff"):
        assert flag in brief
        assert f"{flag} <" in full or f"{flag} " in full
    assert "PEFT's: every linear layer" in full and "PEFT's: every linear layer" not in brief
    assert "(158 in all)" in brief or "in all)" in brief


def test_help_groups_the_run_before_the_overrides(cli) -> None:
    out = cli("memory", "--help-all").stdout
    run, arch = out.index("Training / serving:"), out.index("Architecture overrides (what if?):")
    assert out.index("--batch-size") < run < out.index("--precision") < arch
    assert out.index("--d-model") > arch and out.index("--gpu ") < arch


@pytest.mark.parametrize("columns", [80, 60])
def test_memory_tables_are_whole_at_80_and_readable_at_60(columns: int) -> None:
    # a value is never cut: a column that does not fit is left out, and said to be
    import os
    import re
    import subprocess
    import sys

    env = os.environ | {"COLUMNS": str(columns), "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, "-m", "transformer_calc", "memory", "llama-3.1-8b",
                          "--zero", "1", "--gpus", "8"], capture_output=True, text=True,
                         env=env, check=True).stdout
    lines = out.splitlines()
    assert all(len(line) <= columns for line in lines)
    assert not re.search(r"\d \S*$|\d\.\d+ G(?!iB)|\d\.\d+ M(?!iB)", "\n".join(
        line for line in lines if line.startswith("│")))
    assert "29.92 GiB" in out and f"left out at {columns} columns: bytes" in out


def test_the_tensor_parallel_plan_can_be_named(cli) -> None:
    # --tp-plan: transformers' / torchtitan's layers-only plan keeps the embeddings whole on
    # every rank; Megatron-LM's vocabulary-parallel plan splits them too
    def weights(*args: str) -> int:
        data = cli.json("memory", "llama-3-8b", "--tp", "4", "--gpus", "4", "--seq-len", "1024",
                        *args)
        return next(c["per_gpu_bytes"] for c in data["components"] if c["name"] == "weights")

    layers, vocab = weights("--tp-plan", "layers"), weights("--tp-plan", "vocab")
    assert layers == weights()  # the default recipe (torch) runs the layers-only plan
    # both tables and the final norm outside the layers, in 16-bit: whole, not a quarter
    assert layers - vocab == 2 * (2 * 128_256 * 4096 + 4096) * 3 // 4
    notes = cli.json("memory", "llama-3-8b", "--tp", "4", "--gpus", "4", "--recipe", "megatron",
                     "--mixed", "--seq-len", "1024")["notes"]
    assert any("Megatron-LM's plan" in n for n in notes)  # --recipe megatron: vocabulary


@pytest.mark.parametrize("columns", [80, 60])
@pytest.mark.parametrize("args", [("params", "gpt2"), ("flops", "gpt2"),
                                  ("compare", "gpt2", "gpt2-medium"), ("gpus",), ("presets",),
                                  ("sweep", "gpt2", "--batch-size", "1,2"), ("memory",)])
def test_no_table_is_cut_at_the_edge(columns: int, args: tuple[str, ...]) -> None:
    # every row of every table ends in its border: a column that does not fit is left out
    # whole (and said), never cut
    import os
    import subprocess
    import sys

    env = os.environ | {"COLUMNS": str(columns), "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, "-m", "transformer_calc", *args], capture_output=True,
                         text=True, env=env, check=True).stdout.splitlines()
    assert all(len(line) <= columns for line in out)
    assert all(line.rstrip().endswith("│") for line in out if line.startswith("│"))
