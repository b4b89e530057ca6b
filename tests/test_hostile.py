"""Hostile input: no file destroyed, no hang on a pipe or a device, YAML 1.1's
surprises refused, every numeric option checked at its edges, never a traceback or a NaN."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

GPT2 = ROOT / "configs" / "gpt2.yaml"


# -- import never destroys a file -------------------------------------------------------------

def test_import_refuses_to_overwrite_its_own_input(cli, tmp_path: Path) -> None:
    src = tmp_path / "gpt2.yaml"
    src.write_text(GPT2.read_text())
    before = src.read_text()
    r = cli("import", str(src), "-o", str(src), "--force", code=2)
    assert r.stderr == f"Error: {src}: is the input file; choose another output\n"
    link = tmp_path / "link.yaml"
    link.symlink_to(src)
    r = cli("import", str(src), "-o", str(link), "--force", code=2)
    assert "is the input file" in r.stderr
    assert src.read_text() == before


def test_import_replaces_an_existing_file_only_with_force(cli, tmp_path: Path) -> None:
    out = tmp_path / "out.yaml"
    out.write_text("precious\n")
    r = cli("import", str(GPT2), "-o", str(out), code=2)
    assert r.stderr == f"Error: {out}: exists; use --force to replace it\n"
    assert out.read_text() == "precious\n"
    cli("import", str(GPT2), "-o", str(out), "--force")
    assert "vocab_size: 50257" in out.read_text()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(cli, tmp_path: Path,
                                                             monkeypatch) -> None:
    out = tmp_path / "out.yaml"
    out.write_text("precious\n")

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    r = cli("import", str(GPT2), "-o", str(out), "--force", code=2)
    assert r.stderr == f"Error: {out}: cannot write: No space left on device\n"
    assert out.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]


def test_a_missing_folder_leaves_nothing(cli, tmp_path: Path) -> None:
    out = tmp_path / "nope" / "out.yaml"
    r = cli("import", str(GPT2), "-o", str(out), code=2)
    assert r.stderr.startswith(f"Error: {out}: cannot write")
    assert not out.parent.exists()


# -- inputs that are not regular files ----------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_without_reading_it(cli, tmp_path: Path) -> None:
    fifo = tmp_path / "model.yaml"
    os.mkfifo(fifo)
    r = cli("params", str(fifo), code=2)
    assert r.stderr == (f"Error: {fifo}: not a regular file (a pipe, device or socket), "
                        "expected a .yaml or config.json file\n")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_a_device_is_refused(cli) -> None:
    r = cli("params", "/dev/zero", code=2)
    assert "not a regular file" in r.stderr


# -- YAML 1.1 surprises and NaN -----------------------------------------------------------------

BASE = "name: x\nd_model: 768\nn_layers: 12\nn_heads: 12\nd_ff: 3072\n"


@pytest.mark.parametrize(("line", "why"), [
    ("vocab_size: 012", "012 is octal in YAML 1.1 (10)"),
    ("vocab_size: 51:12", "51:12 is a base-60 number in YAML 1.1"),
    ("tie_embeddings: yes", "yes is a boolean in YAML 1.1"),
    ("tie_embeddings: off", "off is a boolean in YAML 1.1"),
    ("dropout: .nan", ".nan is not a finite number"),
    ("rotary_fraction: .inf", ".inf is not a finite number"),
    ("d_ff: 4096", "duplicate key 'd_ff'"),
])
def test_yaml_1_1_surprises_are_refused_not_obeyed(cli, tmp_path: Path, line: str,
                                                   why: str) -> None:
    path = tmp_path / "m.yaml"
    text = BASE + ("" if line.startswith("vocab_size") else "vocab_size: 50257\n") + line + "\n"
    path.write_text(text)
    r = cli("params", str(path), code=2)
    assert r.stderr.startswith(f"Error: {path}: invalid YAML (line ")
    assert why in r.stderr and r.stderr.count("\n") == 1


def test_plain_values_still_load(cli, tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(BASE + "vocab_size: 50257\nmax_positions: 1024\ntie_embeddings: true\n"
                           "dropout: 0.1\nnote: '012'\n")
    assert cli.json("params", str(path))["total_params"] == 124_439_808


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_nan_in_a_key_tcalc_reads_is_one_error_naming_it(cli, tmp_path: Path,
                                                              constant: str) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2", "resid_pdrop": ' + constant + "}")
    r = cli("params", str(path), code=2)
    assert r.stderr.startswith(f"Error: {path}: ") and "resid_pdrop" in r.stderr
    assert constant in r.stderr and r.stderr.count("\n") == 1


# -- numeric options ----------------------------------------------------------------------------

# (command line, the option) for every numeric option the CLI has, from cli.NUMERIC_LIMITS
OPTION_USE = {
    "batch_size": ["memory", "gpt2"], "seq_len": ["memory", "gpt2"],
    "gpus": ["memory", "gpt2"], "tp": ["memory", "gpt2"], "pp": ["memory", "gpt2"],
    "ep": ["memory", "mixtral-8x7b"], "cp": ["memory", "gpt2"],
    "zero": ["memory", "gpt2"], "group_size": ["memory", "gpt2", "--inference"],
    "window": ["flops", "gpt2"], "block": ["flops", "gpt2"], "summary": ["flops", "gpt2"],
    "global_tokens": ["flops", "gpt2"], "random": ["flops", "gpt2"],
    "mfu": ["flops", "gpt2", "--gpu", "A100-80GB"],
    "tokens_per_second": ["flops", "gpt2", "--gpu", "A100-80GB"],
    "grad_accum": ["memory", "gpt2"], "lora": ["memory", "gpt2"],
    "lora_dropout": ["memory", "gpt2", "--lora", "8"],
    "kv_block": ["memory", "gpt2", "--inference"], "gpu_util": ["memory", "gpt2", "--inference"],
    "prefill_chunk": ["memory", "gpt2", "--inference"],
    "micro_batches": ["memory", "gpt2", "--activations", "megatron"],
    "loss_chunks": ["memory", "gpt2"],
}


def test_every_limited_option_is_exercised() -> None:
    from transformer_calc.cli import NUMERIC_LIMITS

    assert set(OPTION_USE) == set(NUMERIC_LIMITS)


def _bad_values(name: str) -> list[str]:
    from transformer_calc.cli import NUMERIC_LIMITS

    low, high, exclusive = NUMERIC_LIMITS[name]
    is_float = name in ("mfu", "tokens_per_second", "lora_dropout", "gpu_util")
    below = str(low if exclusive else low - 1)
    out = [below, "-1", str(int(high) + 1) if not is_float else str(high * 10)]
    if is_float:
        out += ["nan", "inf", "-inf"]
    return out


@pytest.mark.parametrize(("name", "value"), [(n, v) for n in sorted(OPTION_USE)
                                             for v in _bad_values(n)])
def test_each_numeric_option_rejects_its_edges_in_one_line(cli, name: str, value: str) -> None:
    flag = "--" + name.replace("_", "-")
    r = cli(*OPTION_USE[name], f"{flag}={value}", code=2)
    assert r.stderr.startswith(f"Error: {flag}: expected "), r.stderr
    assert r.stderr.count("\n") == 1


def test_parallel_degrees_are_checked_before_dividing(cli) -> None:
    r = cli("memory", "gpt2", "--tp", "0", code=2)
    assert r.stderr == "Error: --tp: expected an integer >= 1 and <= 1,073,741,824, got 0\n"


def test_tokens_past_what_a_float_can_carry_are_refused(cli) -> None:
    r = cli("flops", "gpt2", "--gpu", "A100-80GB", "--tokens", "1e300", code=2)
    assert r.stderr == "Error: --tokens: expected a number from 1 to 1e30, got '1e300'\n"


def _no_nan(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_no_nan(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_nan(v) for v in value)
    return True


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(OPTION_USE)),
       value=st.one_of(st.integers(min_value=-10, max_value=2**62),
                       st.floats(allow_nan=True, allow_infinity=True)))
def test_any_numeric_value_gives_a_result_or_one_clean_line(name: str, value) -> None:  # type: ignore[no-untyped-def]
    import contextlib
    import io
    from unittest import mock

    from transformer_calc.cli import main

    flag = "--" + name.replace("_", "-")
    if name not in ("mfu", "tokens_per_second") and isinstance(value, float):
        value = repr(value)  # an int option given a float: a usage error, one line
    args = [*OPTION_USE[name], f"{flag}={value}", "--format", "json"]
    if name in ("tp", "pp") and isinstance(value, int) and 1 < value <= 2**30:
        args.append(f"--gpus={value}")
    out, err = io.StringIO(), io.StringIO()
    with mock.patch("sys.argv", ["tcalc", *args]), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main()  # the real entry point: typer in non-standalone mode, one error boundary
    code = exit_.value.code or 0
    if code == 0:
        assert _no_nan(json.loads(out.getvalue()))
    else:
        assert code == 2
        assert err.getvalue().startswith("Error: ") and err.getvalue().count("\n") == 1, \
            err.getvalue()


# -- no option silently ignored ------------------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["memory", "gpt2", "--dtype", "int4"],
     "Error: --dtype: applies to --inference (training precision is --precision / --mixed)\n"),
    (["memory", "gpt2", "--kv-dtype", "fp8"],
     "Error: --kv-dtype: applies to --inference (training precision is --precision / "
     "--mixed)\n"),
    (["flops", "gpt2", "--window", "512"],
     "Error: --window: applies with --attention-pattern (local, strided, fixed, longformer, "
     "bigbird)\n"),
    (["flops", "gpt2", "--global-tokens", "4"],
     "Error: --global-tokens: applies with --attention-pattern (local, strided, fixed, "
     "longformer, bigbird)\n"),
])
def test_an_option_that_would_do_nothing_is_an_error(cli, args: list[str], message: str) -> None:
    assert cli(*args, code=2).stderr == message


def test_compare_uses_the_gpu_it_is_given(cli) -> None:
    text = cli("compare", "gpt2", "gpt2-medium", "--mixed", "--gpu", "RTX-4090").stdout
    assert "fits on RTX-4090" in text and "largest batch that fits" in text
    # the same largest batches memory reports for each model alone
    for name in ("gpt2", "gpt2-medium"):
        alone = cli.json("memory", name, "--mixed", "--gpu", "RTX-4090")["fit"]
        assert str(alone["max_batch_size"]) in text
    r = cli("compare", "gpt2", "gpt2-medium", "--gpu", "NOPE", code=2)
    assert r.stderr.startswith("Error: unknown GPU 'NOPE'")


def test_compare_shows_a_component_only_some_models_have(cli) -> None:
    from conftest import DATA

    text = cli("compare", "gpt2", str(DATA / "hf" / "mamba-130m.json"), "--inference").stdout
    assert "memory: recurrent_state" in text


# -- input is data, never markup or terminal commands ----------------------------------------

TINY = "vocab_size: 100\nd_model: 64\nn_layers: 1\nn_heads: 4\nd_ff: 128\n"


def test_markup_and_escape_sequences_in_a_name_are_shown_as_text(cli, tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text('name: "[/bold]x\\e[31mred"\n' + TINY)
    out = cli("params", str(path), "--format", "table").stdout
    assert "[/bold]x\\x1b[31mred" in out and "\x1b" not in out
    # markdown: the same text, GFM's brackets and backslash escaped (it renders as above)
    out = cli("params", str(path), "--format", "markdown").stdout
    assert "\\[/bold\\]x\\\\x1b\\[31mred" in out and "\x1b" not in out


def test_an_escape_sequence_in_a_file_name_is_shown_as_text(cli, tmp_path: Path) -> None:
    path = tmp_path / "bad\x1b[31m.yaml"
    path.write_text("nme: 1\n")
    r = cli("params", str(path), code=2)
    assert "\x1b" not in r.stderr and "bad\\x1b[31m.yaml" in r.stderr
    assert r.stderr.count("\n") == 1


def test_a_newline_cannot_forge_a_github_annotation(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from transformer_calc.cli import app

    path = tmp_path / "a.yaml"
    path.write_text("name: 'x'\nexpected_params: 5\n" + TINY)
    forged = tmp_path / "x\n::error file=forged::oops.yaml"
    forged.write_text("name: 'y'\nexpected_params: 5\n" + TINY)
    result = CliRunner().invoke(app, ["check", str(path), str(forged), "--format", "json"],
                                env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 1
    json.loads(result.stdout)  # annotations go to stderr: stdout stays valid JSON
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("::error file=") for line in lines)
    assert "x%0A%3A%3Aerror file=forged%3A%3Aoops.yaml" in lines[1]  # encoded, inert
    assert not any(line.startswith("::error file=forged") for line in lines)


def test_an_error_line_is_capped(cli, tmp_path: Path) -> None:
    path = tmp_path / ("x" * 200) / ("y" * 200) / ("z" * 200 + ".yaml")
    r = cli("params", str(path), code=2)
    assert len(r.stderr.rstrip("\n")) <= 500 and "characters, cut)" in r.stderr


# -- paths, presets and model folders ---------------------------------------------------------

def test_a_folder_named_like_a_preset_does_not_shadow_it(cli, tmp_path: Path,
                                                          monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").mkdir()
    assert cli.json("params", "gpt2")["total_params"] == 124_439_808
    r = cli("params", "./gpt2", code=2)
    assert "a folder without a config.json" in r.stderr


def test_a_model_folder_is_a_model_and_check_skips_its_side_files(cli, tmp_path: Path) -> None:
    from conftest import DATA

    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "config.json").write_text((DATA / "hf" / "gpt2.json").read_text())
    for side in ("generation_config.json", "tokenizer_config.json", "tokenizer.json",
                 "special_tokens_map.json", "model.safetensors.index.json"):
        (folder / side).write_text("{}")
    assert cli.json("params", str(folder))["total_params"] == 124_439_808
    out = cli("check", str(folder)).stdout
    assert out.splitlines()[-1] == "1 file checked: 1 ok, 0 failed"


def test_an_upper_case_json_suffix_is_json(cli, tmp_path: Path) -> None:
    from conftest import DATA

    path = tmp_path / "CONFIG.JSON"
    path.write_text((DATA / "hf" / "gpt2.json").read_text())
    assert cli.json("params", str(path))["total_params"] == 124_439_808


# -- output that cannot be written --------------------------------------------------------------

def _tcalc(*args: str, **kw) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    import sys

    return subprocess.run([sys.executable, "-m", "transformer_calc", *args], text=True,
                          check=False, **kw)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_full_disk_is_one_error_line(fmt: str) -> None:
    with open("/dev/full", "w") as full:
        r = _tcalc("params", "gpt2", "--format", fmt, stdout=full, stderr=subprocess.PIPE)
    assert r.returncode == 1
    assert r.stderr == "Error: cannot write the output: No space left on device\n"


def test_a_closed_stdout_ends_quietly_as_sigpipe_does() -> None:
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "transformer_calc", "sweep", "gpt2",
                             "--batch-size", "1,2,4,8,16", "--gpu", "A100-80GB"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before tcalc writes
    err = proc.stderr.read()
    # `tcalc ... | head`: no message, and the shell's convention for a process SIGPIPE ended
    # (128 + 13), not 0: the output is not whole
    assert proc.wait(timeout=60) == 141
    assert err == ""


# -- shapes the options must respect ---------------------------------------------------------

def test_a_sequence_longer_than_the_position_table_is_refused(cli) -> None:
    for args in (["memory", "gpt2", "--seq-len", "2048"], ["flops", "gpt2", "--seq-len", "4096"],
                 ["sweep", "gpt2", "--seq-len", "1024,2048"]):
        r = cli(*args, code=2)
        assert r.stderr.startswith("Error: --seq-len 2,048: longer than gpt2's learned "
                                   "position table (1,024 positions)") or \
            r.stderr.startswith("Error: --seq-len 4,096: longer than gpt2's")
    # defaults stay within the table: sweep's grid, compare's length, the overview's
    data = cli.json("sweep", "gpt2")
    assert sorted({c["seq_len"] for c in data["cells"]}) == [512, 1024]
    out = cli("compare", "bert-base", "gpt2").stdout
    assert "T=512" in out
    cli("memory", "--mixed")  # every preset, BERT at its 512 positions
    assert cli.json("memory", "llama-3-8b", "--seq-len", "65536")["seq_len"] == 65536  # RoPE


def test_parallel_degrees_must_split_heads_and_layers(cli) -> None:
    r = cli("memory", "gpt2", "--gpus", "8", "--tp", "8", code=2)
    assert r.stderr == "Error: --tp 8: expected a divisor of gpt2's 12 attention heads\n"
    r = cli("memory", "gpt2-xl", "--gpus", "2", "--tp", "2", code=2)  # 25 heads: even two
    assert r.stderr == "Error: --tp 2: expected a divisor of gpt2-xl's 25 attention heads\n"
    r = cli("memory", "gpt2", "--gpus", "5", "--pp", "5", code=2)
    assert r.stderr == ("Error: --pp 5: expected a divisor of gpt2's 12 layers (an uneven "
                        "split is not modelled)\n")
    # Llama 3 8B: 32 query heads, 8 K/V heads; --tp 16 replicates each K/V head twice
    assert cli.json("memory", "llama-3-8b", "--gpus", "16", "--tp", "16")["per_gpu_bytes"] > 0
    r = cli("memory", "mixtral-8x7b", "--gpus", "12", "--tp", "12", code=2)
    assert "expected a divisor of mixtral-8x7b's 32 attention heads" in r.stderr


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_without_utf8_gets_ascii_stand_ins(encoding: str) -> None:
    import os
    import sys

    for args in (["params", "gpt2"], ["memory", "gpt2"], ["sweep", "gpt2", "--gpu",
                                                          "A100-80GB"]):
        r = subprocess.run([sys.executable, "-m", "transformer_calc", *args],
                           capture_output=True, check=False,
                           env={**os.environ, "PYTHONIOENCODING": encoding, "COLUMNS": "120"})
        assert r.returncode == 0, r.stderr.decode(encoding, "replace")
        text = r.stdout.decode(encoding)
        assert "Traceback" not in text and "gpt2" in text
        if args[0] != "sweep":
            assert "total" in text.lower()
    if encoding == "ascii":
        assert "d_model x (n_heads * d_head)" in _tcalc_text(encoding, "params", "gpt2")


def _tcalc_text(encoding: str, *args: str) -> str:
    import os
    import sys

    r = subprocess.run([sys.executable, "-m", "transformer_calc", *args], capture_output=True,
                       check=True, env={**os.environ, "PYTHONIOENCODING": encoding,
                                        "COLUMNS": "200"})
    return r.stdout.decode(encoding)


def test_a_what_if_is_not_a_reference_that_differs(cli) -> None:
    # overriding a field on purpose sets the preset's reference count aside, says so
    data = cli.json("params", "gpt2", "--no-tie-embeddings")
    assert "expected_params" not in data
    assert any("what-if (tie_embeddings = False)" in n for n in data["notes"])
    assert "DIFFERS" not in cli("params", "gpt2", "--no-tie-embeddings").stdout
    same = cli.json("params", "gpt2", "--n-heads", "12")  # no change: still the reference
    assert same["expected_params"]["matches"] is True


def test_one_default_context_for_every_command(cli) -> None:
    # memory, flops and explain all take the model's max_positions (else 2048) when none given
    from transformer_calc import load_model

    spec = load_model("llama-3.1-8b")
    assert spec.default_seq_len == 131_072
    assert cli.json("memory", "gpt2")["seq_len"] == 1024
    assert cli.json("flops", "gpt2")["seq_len"] == 1024
    explain = cli("explain", "gpt2", "--topic", "flops").stdout
    assert "T = 1,024" in explain or "1024" in explain


@pytest.mark.parametrize(("name", "text", "key"), [
    # transformers' per-layer lists (Gemma 2's sliding/full layers) are read layer by layer,
    # and so is a per-layer pattern: 10^9 layers took minutes and gigabytes before the cap
    ("gemma2.json", json.dumps({"model_type": "gemma2", "num_hidden_layers": 10**9}),
     "num_hidden_layers"),
    ("t5gemma.json", json.dumps({"model_type": "t5gemma",
                                 "encoder": {"num_hidden_layers": 10**9}}), "num_hidden_layers"),
    ("deep.yaml", "name: deep\nvocab_size: 1000\nd_model: 64\nn_layers: 1000000000\n"
     "n_heads: 4\nd_ff: 256\nmax_positions: 128\nposition: rope\nsliding_window: 16\n"
     "layer_attention: 1S 1F *\n", "n_layers"),
])
def test_an_absurd_layer_count_is_refused_not_walked(cli, tmp_path: Path, name: str, text: str,
                                                      key: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    r = cli("params", str(path), code=2)
    assert r.stderr.count("\n") == 1 and f"key '{key}'" in r.stderr
    assert "100,000" in r.stderr
    edge = tmp_path / "edge.json"  # one past the cap
    edge.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 100_001}))
    assert "key 'num_hidden_layers'" in cli("params", str(edge), code=2).stderr


def test_the_deepest_allowed_stacks_are_read_at_once(cli, tmp_path: Path) -> None:
    """100,000 layers in each of T5Gemma's stacks, one short of it in the decoder: one pattern
    for both is found in linear time (it was a quadratic search)."""
    path = tmp_path / "t5gemma.json"
    path.write_text(json.dumps({"model_type": "t5gemma", "encoder": {"num_hidden_layers": 100_000},
                                "decoder": {"num_hidden_layers": 99_999}}))
    assert "50000 × sliding, 49999 × full" in cli("params", str(path)).stdout.replace("\n", " ")


# config.json values that must raise a SpecError, not a TypeError (or ZeroDivisionError):
# drawn by feeding every mapped type's list-valued keys lists of lists, dicts and
# strings, and its scalar keys 0, -1, 2^40, 1.5, "x", null, true and 10^6 (a family's own
# spelling of a standard key is checked as that key, named as in the file)
@pytest.mark.parametrize(("config", "key"), [
    ({"model_type": "gemma2", "layer_types": [["a"]] * 26}, "layer_types"),
    ({"model_type": "nemotron_h", "layers_block_type": [["a"]] * 4}, "layers_block_type"),
    ({"model_type": "lfm2", "full_attn_idxs": "x"}, "full_attn_idxs"),
    ({"model_type": "bamba", "attn_layer_indices": "x"}, "attn_layer_indices"),
    ({"model_type": "olmo_hybrid", "layer_types": [["a"]] * 16}, "layer_types"),
    ({"model_type": "lfm2_moe", "layer_types": [["a"]] * 24}, "layer_types"),
    ({"model_type": "deepseek_v4", "compress_ratios": [["a"]] * 43}, "compress_ratios"),
    ({"model_type": "deepseek_v4", "layer_types": [["a"]] * 43}, "layer_types"),
    ({"model_type": "flaubert", "emb_dim": "x"}, "emb_dim"),
    ({"model_type": "xlm", "n_heads": "x"}, "n_heads"),
    ({"model_type": "mpt", "n_heads": "x"}, "n_heads"),
    ({"model_type": "xglm", "attention_heads": "x"}, "attention_heads"),
    ({"model_type": "nemotron_h", "moe_shared_expert_intermediate_size": "x"},
     "moe_shared_expert_intermediate_size"),
    ({"model_type": "lfm2", "block_multiple_of": 0}, "block_multiple_of"),
])
def test_a_malformed_value_is_one_error_line_naming_its_key(cli, tmp_path: Path,
                                                            config: dict, key: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", str(path), code=2)
    assert r.stderr.count("\n") == 1 and f"key '{key}'" in r.stderr


def test_every_type_refuses_nested_lists_in_its_list_keys_by_name() -> None:
    """Each mapped type's own drawn config (tests/data/registry_*.json) with each list-valued
    key replaced by a list of lists: a SpecError naming a key, never a TypeError."""
    from transformer_calc.errors import SpecError
    from transformer_calc.hf import HEAD_CLASS, spec_from_hf

    cases, seen = [], set()
    for name in ("registry_cases.json", "registry_cases_more.json", "registry_mixers_T8.json",
                 "registry_mixers_T64.json", "registry_decoders_more.json",
                 "registry_encoders_layered.json"):
        cases += json.loads((ROOT / "tests" / "data" / name).read_text())["cases"]
    for case in cases:
        config = case["config"]
        if config["model_type"] in seen:
            continue
        seen.add(config["model_type"])
        for key in ("layer_types", "mlp_layer_types", "layers_block_type", "compress_ratios",
                    "full_attn_idxs", "attn_layer_indices", "activation_sparsity_pattern"):
            with contextlib.suppress(SpecError):
                spec_from_hf(config | {key: [["a"]] * 8})
    assert seen == set(HEAD_CLASS)



# -- the atomic writer: only regular files replaced, modes kept, nothing left behind ----------

def _import(out: Path, *extra: str, umask: int | None = None) -> subprocess.CompletedProcess:
    import sys

    def set_umask() -> None:
        if umask is not None:
            os.umask(umask)

    return subprocess.run([sys.executable, "-m", "transformer_calc", "import", str(GPT2), "-o",
                           str(out), *extra], text=True, capture_output=True, check=False,
                          preexec_fn=set_umask)  # noqa: PLW1509 -- the child's umask only


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_force_never_replaces_a_pipe_a_device_or_a_link_to_one(tmp_path: Path) -> None:
    import stat

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    to_null = tmp_path / "null.yaml"
    to_null.symlink_to(os.devnull)
    to_stdout = tmp_path / "stdout.yaml"
    to_stdout.symlink_to("/proc/self/fd/1")  # (the child's stdout: a pipe)
    for out, what in ((fifo, "a pipe; tcalc replaces regular files only"),
                      (to_null, "a symlink to a device; tcalc replaces regular files only"),
                      (tmp_path, "a folder; tcalc replaces regular files only")):
        r = _import(out, "--force")
        assert (r.returncode, r.stderr) == (2, f"Error: {out}: {what}\n")
    r = _import(to_stdout, "--force")
    assert r.returncode == 2 and "a symlink to a pipe" in r.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode) and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert to_null.is_symlink() and to_stdout.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.yaml", "null.yaml",
                                                          "stdout.yaml"]


def test_a_symlink_to_a_file_keeps_being_a_link(tmp_path: Path) -> None:
    target = tmp_path / "real.yaml"
    target.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    assert _import(link).returncode == 2  # exists: --force needed
    assert _import(link, "--force").returncode == 0
    assert link.is_symlink() and "vocab_size: 50257" in target.read_text()


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_the_umask_mode_and_a_replaced_one_keeps_its_own(tmp_path: Path,
                                                                         umask: int) -> None:
    import stat

    new = tmp_path / "new.yaml"
    assert _import(new, umask=umask).returncode == 0
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask  # as open(O_CREAT) would give
    kept = tmp_path / "kept.yaml"
    kept.write_text("old\n")
    kept.chmod(0o640)
    assert _import(kept, "--force", umask=umask).returncode == 0
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640


def test_sigterm_during_a_write_leaves_the_old_file_and_no_temporary(cli, tmp_path: Path,
                                                                     monkeypatch) -> None:
    import signal

    out = tmp_path / "out.yaml"
    out.write_text("precious\n")
    real_fsync = os.fsync

    def terminated(fd: int) -> None:  # the signal arrives with the data half on disk
        real_fsync(fd)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(os, "fsync", terminated)
    result = cli.runner.invoke(__import__("transformer_calc.cli").cli.app,
                               ["import", str(GPT2), "-o", str(out), "--force"])
    assert result.exit_code == 128 + signal.SIGTERM
    assert out.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # (the handler given back)


def test_an_output_name_that_is_not_utf8_writes_a_preset_that_reads_back(cli,
                                                                         tmp_path: Path) -> None:
    out = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xff name.yaml"))
    r = cli("import", str(GPT2), "-o", str(out))
    assert r.stderr == (f"wrote {tmp_path}/bad\\xff name.yaml: bad\ufffd name, 124,439,808 "
                        "parameters\n")
    data = cli.json("params", str(out))
    assert data["model"] == "bad\ufffd name" and data["total_params"] == 124_439_808
    r = cli("import", str(GPT2), "--name", "x\udcffy", code=2)
    assert r.stderr == "Error: --name: x\\xffy is not UTF-8 text\n"


# -- the environment: a closed stdout, a width that is no width ---------------------------------

@pytest.mark.parametrize("args", [("params", "gpt2"), ("params", "gpt2", "--format", "json"),
                                  ("check", "configs/gpt2.yaml"), ("--version",)])
def test_a_closed_stdout_is_an_error_not_a_silent_success(args: tuple[str, ...]) -> None:
    import shlex
    import sys

    command = shlex.join([sys.executable, "-m", "transformer_calc", *args])
    r = subprocess.run(["sh", "-c", f"exec {command} >&-"], text=True, capture_output=True,
                       check=False, cwd=ROOT)
    assert (r.returncode, r.stderr) == (1, "Error: cannot write the output: stdout is closed\n")


@pytest.mark.parametrize("columns", ["0", "-3", "abc", "1", "7"])
def test_a_width_that_is_no_width_still_shows_the_table(columns: str) -> None:
    r = _tcalc("params", "gpt2", capture_output=True, env={**os.environ, "COLUMNS": columns})
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[0].startswith("gpt2: trainable parameters") and len(lines) > 10
    assert min(len(line) for line in lines[:3]) >= 40  # at least MIN_COLUMNS wide


# -- quantisation configs: never a silent bf16 -------------------------------------------------

@pytest.mark.parametrize(("qc", "result"), [
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, ("gptq-int3", 128)),
    ({"quant_method": "gptq", "bits": 2, "group_size": 64}, ("gptq-int2", 64)),
    ({"quant_method": "gptq", "bits": 4, "group_size": -1}, ("gptq", 2**40)),
    ({"quant_method": "awq", "w_bit": 4, "q_group_size": 128}, ("awq", 128)),
])
def test_a_quantization_config_maps_to_its_stored_format(qc: dict, result: tuple) -> None:
    from transformer_calc.quant import from_quantization_config

    got = from_quantization_config(qc, "config.json")
    assert (got["weight_format"], got["weight_group_size"]) == result


@pytest.mark.parametrize(("qc", "message"), [
    # transformers' GPTQConfig refuses these (post_init: bits must be one of 2, 3, 4, 8)
    ({"quant_method": "gptq", "bits": "4"}, "key 'quantization_config.bits': expected one of "
                                            "2, 3, 4, 8 (an integer), got '4'"),
    ({"quant_method": "gptq", "bits": 5}, "key 'quantization_config.bits'"),
    ({"quant_method": "awq", "bits": 3}, "key 'quantization_config.bits': expected one of 4"),
    ({"quant_method": "gptq", "group_size": 0}, "key 'quantization_config.group_size'"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "int4"},
     "key 'quantization_config.bnb_4bit_quant_type': expected nf4 or fp4"),
])
def test_a_quantization_config_transformers_refuses_is_one_error(qc: dict, message: str
                                                                 ) -> None:
    from transformer_calc.errors import SpecError
    from transformer_calc.quant import from_quantization_config

    with pytest.raises(SpecError, match=re.escape(message)):
        from_quantization_config(qc, "config.json")


@pytest.mark.parametrize("method", ["hqq", "compressed-tensors", "quanto", None])
def test_a_method_tcalc_does_not_model_is_said(method: str | None) -> None:
    from transformer_calc.quant import from_quantization_config

    got = from_quantization_config({"quant_method": method}, "config.json")
    assert "weight_format" not in got
    assert got["note"].startswith(f"quantization_config: quant_method {str(method)!r} is not "
                                  "a format tcalc models")


def test_three_bit_gptq_matrix_by_hand() -> None:
    from transformer_calc.quant import _linear

    # AutoGPTQ QuantLinear (qlinear_cuda_old.py) for 4096 -> 11008 at 3 bits, group 128:
    # qweight int32 (4096 // 32 · 3, 11008), qzeros int32 (4096 / 128, 11008 // 32 · 3),
    # scales fp16 (32, 11008), g_idx int32 (4096,)
    parts = {k: b for k, b, _ in _linear("gptq-int3", 11008, 4096, 4096 * 11008, 128)}
    assert parts == {"qweight": 4096 // 32 * 3 * 11008 * 4, "qzeros": 32 * (11008 // 32 * 3) * 4,
                     "scales": 32 * 11008 * 2, "g_idx": 4096 * 4}


# -- memory and time bounded by the structure, not by the bytes --------------------------------

# A child's ru_maxrss counts the memory of the process it was forked from (Linux carries the
# old image's high-water mark across exec): so tcalc is started from this small process,
# whose own few MB are the same for the baseline and for every input
_SPAWN = """import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def _peak_rss(*args: str) -> tuple[int, str, int]:
    """(exit code, stderr, peak resident bytes) of one tcalc process, from the kernel's own
    accounting of that child (wait4's ru_maxrss, KiB on Linux)."""
    import sys

    r = subprocess.run([sys.executable, "-S", "-E", "-c", _SPAWN, sys.executable, "-m",
                        "transformer_calc", *args], capture_output=True, text=True,
                       check=False, errors="replace")
    code, kib = map(int, r.stdout.split())
    return code, r.stderr, kib * 1024


def _safetensors(path: Path, header: dict, data: int) -> None:
    body = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(body).to_bytes(8, "little") + body)
        f.truncate(8 + len(body) + data)  # (sparse: the data is never read)


def _gguf(path: Path, meta: bytes, n_kv: int, size: int = 0, tensors: bytes = b"",
          n_tensors: int = 0) -> None:
    with open(path, "wb") as f:
        f.write(b"GGUF" + (3).to_bytes(4, "little") + n_tensors.to_bytes(8, "little")
                + n_kv.to_bytes(8, "little") + meta + tensors)
        if size:
            f.truncate(size)


def _large_inputs(root: Path) -> dict[str, list[str]]:
    """Inputs whose bytes once cost GBs: a 60 MB safetensors header (one metadata value),
    a 16 MB one of 200,000 tensors, a 16 MB index.json, GGUF metadata of a 64 MiB array and
    of 300,000 strings, a 200 MiB string declared in an 8 KB sparse file, a 2 GiB GGUF that
    fails in `check`."""
    config = (ROOT / "tests" / "data" / "checkpoints" / "tiny-llama" / "config.json").read_text()
    cases: dict[str, list[str]] = {}
    for name in ("meta", "many", "index"):
        (root / name).mkdir()
        (root / name / "config.json").write_text(config)
    _safetensors(root / "meta" / "model.safetensors",
                 {"__metadata__": {"blob": "x" * 60_000_000}}, 0)
    cases["60 MB header"] = ["params", str(root / "meta")]
    _safetensors(root / "many" / "model.safetensors",
                 {f"model.layers.{i}.w": {"dtype": "BF16", "shape": [1],
                                          "data_offsets": [2 * i, 2 * i + 2]}
                  for i in range(200_000)}, 400_000)
    cases["200,000 tensors"] = ["params", str(root / "many")]
    _safetensors(root / "index" / "model.safetensors",
                 {"w": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}, 2)
    (root / "index" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {f"model.layers.{i}.mlp.weight": "model.safetensors"
                        for i in range(400_000)}}))
    cases["16 MB index.json"] = ["params", str(root / "index")]

    def kv(key: str, kind: int, raw: bytes) -> bytes:
        return len(key).to_bytes(8, "little") + key.encode() + kind.to_bytes(4, "little") + raw

    strings = b"".join(len(t).to_bytes(8, "little") + t for t in
                       (f"tok{i}".encode() for i in range(300_000)))
    _gguf(root / "arrays.gguf",
          kv("tokenizer.ggml.tokens", 9, (8).to_bytes(4, "little")
             + (300_000).to_bytes(8, "little") + strings)
          + kv("big", 9, (0).to_bytes(4, "little") + (64 << 20).to_bytes(8, "little")), 2,
          size=96 << 20)
    cases["GGUF arrays"] = ["params", str(root / "arrays.gguf")]
    _gguf(root / "string.gguf", kv("s", 8, (200 << 20).to_bytes(8, "little")), 1,
          size=(200 << 20) + 100)
    cases["200 MiB GGUF string"] = ["params", str(root / "string.gguf")]
    # a Llama GGUF whose 3 K/V heads do not divide its 4 heads: a key error, whose line
    # `check` once looked for by reading the whole file as text
    llama = (kv("general.architecture", 8, (5).to_bytes(8, "little") + b"llama")
             + b"".join(kv(f"llama.{k}", 4, v.to_bytes(4, "little")) for k, v in (
                 ("embedding_length", 256), ("block_count", 1), ("feed_forward_length", 512),
                 ("attention.head_count", 4), ("attention.head_count_kv", 3),
                 ("context_length", 64))))
    embd = ((17).to_bytes(8, "little") + b"token_embd.weight" + (2).to_bytes(4, "little")
            + (256).to_bytes(8, "little") + (1000).to_bytes(8, "little")
            + (0).to_bytes(4, "little") + (0).to_bytes(8, "little"))
    _gguf(root / "big.gguf", llama, 7, size=2 << 30, tensors=embd, n_tensors=1)
    cases["2 GiB GGUF in check"] = ["check", str(root / "big.gguf")]
    return cases


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="no wait4 on this platform")
def test_memory_on_large_inputs_stays_within_256_mb_of_the_baseline(tmp_path: Path) -> None:
    import time

    code, err, baseline = _peak_rss("params", "gpt2")
    assert code == 0, err
    for what, args in _large_inputs(tmp_path).items():
        start = time.monotonic()
        code, err, peak = _peak_rss(*args)
        assert code in (0, 1, 2) and "Traceback" not in err and err.count("\n") <= 1, (what,
                                                                                       err)
        assert peak - baseline < 256 << 20, (what, peak >> 20, baseline >> 20)
        assert time.monotonic() - start < 30, what


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("command", ["params", "check"])
def test_a_pipe_named_like_a_model_file_never_blocks(tmp_path: Path, command: str) -> None:
    import sys

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(
        (ROOT / "tests" / "data" / "checkpoints" / "tiny-llama" / "config.json").read_text())
    os.mkfifo(folder / "model.safetensors")
    os.mkfifo(tmp_path / "model.gguf")
    for target, name in ((folder, "model.safetensors"), (tmp_path / "model.gguf",
                                                           "model.gguf")):
        r = subprocess.run([sys.executable, "-m", "transformer_calc", command, str(target)],
                           capture_output=True, text=True, timeout=60, check=False)
        said = r.stdout + r.stderr
        assert r.returncode in (1, 2) and f"{name}: " in said and "not a regular file" in said


def test_one_bad_gguf_never_stops_the_report(cli, tmp_path: Path) -> None:
    # general.architecture as an array: a line of its own, the other files still checked
    bad = tmp_path / "bad.gguf"
    meta = ((20).to_bytes(8, "little") + b"general.architecture" + (9).to_bytes(4, "little")
            + (8).to_bytes(4, "little") + (1).to_bytes(8, "little") + (5).to_bytes(8, "little")
            + b"llama")
    _gguf(bad, meta, 1)
    r = cli("check", str(bad), str(GPT2), code=1)
    lines = r.stdout.splitlines()
    assert lines[0] == (f"FAIL  {bad}: general.architecture: expected one of llama, mistral, "
                        "qwen2, qwen3 (the Llama-family GGUFs tcalc maps), got a list")
    assert lines[1].startswith("ok    ") and lines[2] == "2 files checked: 1 ok, 1 failed"
