"""tcalc check: CI validation of presets and config.json files (issue 6)."""

from __future__ import annotations

import json
import os

from conftest import DATA, ROOT


def test_shipped_presets_pass(cli) -> None:
    out = cli("check").stdout
    n = len(list((ROOT / "configs").glob("*.yaml")))
    assert out.endswith(f"{n} files checked: {n} ok, 0 failed\n")
    assert "ok    configs/gpt2.yaml: gpt2, 124,439,808 parameters = expected_params" in out


def test_configs_folder_and_hf_files_pass(cli) -> None:
    cli("check", "configs")
    out = cli("check", str(DATA / "hf")).stdout
    assert "ok    tests/data/hf/llama-3-8b.json: llama-3-8b, 8,030,261,248 parameters" in out
    assert " 0 failed" in out


def test_expected_params_mismatch_shows_both_and_difference(cli) -> None:
    r = cli("check", str(DATA / "bad" / "expected_mismatch.yaml"), code=1)
    assert r.stdout == (
        "FAIL  tests/data/bad/expected_mismatch.yaml (line 9): expected_params is 124,439,800 "
        "but the architecture has 124,439,808 (difference +8)\n"
        "1 file checked: 0 ok, 1 failed\n")


def test_mixed_pass_and_fail_exits_1(cli) -> None:
    r = cli("check", "configs/gpt2.yaml", str(DATA / "bad" / "unknown_key.yaml"), code=1)
    assert r.stdout.splitlines() == [
        "ok    configs/gpt2.yaml: gpt2, 124,439,808 parameters = expected_params",
        "FAIL  tests/data/bad/unknown_key.yaml (line 4): unknown key 'n_head': did you mean "
        "'n_heads'?",
        "2 files checked: 1 ok, 1 failed",
    ]


def test_usage_errors_exit_2(cli, tmp_path) -> None:
    assert cli("check", "no/such/path", code=2).stderr == (
        "Error: no/such/path: no such file or folder\n")
    assert cli("check", str(tmp_path), code=2).stderr == (
        f"Error: {tmp_path}: no .yaml, .yml or .json files in this folder\n")


def test_json_format(cli) -> None:
    r = cli("check", "configs/gpt2.yaml", str(DATA / "bad" / "syntax.yaml"), "--format",
            "json", code=1)
    data = json.loads(r.stdout)
    assert data["schema"] == "tcalc.check/1"
    assert (data["ok"], data["failed"]) == (1, 1)
    assert data["files"][1] == {
        "path": "tests/data/bad/syntax.yaml", "ok": False, "model": None,
        "total_params": None, "expected_params": None,
        "message": "invalid YAML (line 3, column 8): did not find expected ',' or ']'",
        "line": 3, "key": None}


def test_markdown_format(cli) -> None:
    out = cli("check", "configs/gpt2.yaml", "--format", "markdown").stdout
    assert "| configs/gpt2.yaml | ok | 124,439,808 |  |" in out


def test_github_actions_annotations(cli) -> None:
    path = str(DATA / "bad" / "unknown_key.yaml")
    r = cli.runner.invoke(__import__("transformer_calc.cli").cli.app, ["check", path],
                          env={"GITHUB_ACTIONS": "true"})
    assert r.exit_code == 1
    assert ("::error file=tests/data/bad/unknown_key.yaml,line=4,title=tcalc check::unknown "
            "key 'n_head': did you mean 'n_heads'?") in r.stderr.splitlines()
    assert "::error" not in r.stdout  # annotations on stderr: stdout stays the report
    assert "::error" not in cli("check", path, code=1).stderr  # only under GitHub Actions


def test_annotation_escaping() -> None:
    from transformer_calc.check import CheckResult
    from transformer_calc.render import github_annotations

    r = CheckResult("a,b:c.yaml", False, "100% bad\nsecond line", line=2)
    assert github_annotations([r]) == [
        "::error file=a%2Cb%3Ac.yaml,line=2,title=tcalc check::100%25 bad%0Asecond line"]


def test_pre_commit_hook_runs_check() -> None:
    import yaml

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hooks[0]["id"] == "tcalc-check" and hooks[0]["entry"] == "tcalc check"
    assert os.path.exists(ROOT / "README.md")
    assert "tcalc-check" in (ROOT / "README.md").read_text()


def test_a_memory_budget_for_ci(cli) -> None:
    # --max-memory: each model's peak per GPU, for the run the options describe, within a
    # size or a GPU; the failing line says the peak, the run and the budget
    r = cli("check", "configs/gpt2.yaml", "configs/llama-3-8b.yaml", "--max-memory", "40GB",
            code=1)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("ok    configs/gpt2.yaml")
    assert lines[1].startswith("FAIL  configs/llama-3-8b.yaml: ") and lines[1].endswith(
        "over --max-memory 40GB (40.00 GiB)")
    peak = cli.json("memory", "llama-3-8b", "--seq-len", "4096")["peak_bytes"]
    assert peak > 40 * 2**30
    # the same models with LoRA over a bf16 base on an H100 meet it
    assert cli("check", "configs/gpt2.yaml", "configs/llama-3-8b.yaml", "--max-memory",
               "h100", "--lora", "16").exit_code == 0
    r = cli("check", "configs/gpt2.yaml", "--max-memory", "lots", code=2)
    assert r.stderr.startswith("Error: unknown GPU 'lots'")
