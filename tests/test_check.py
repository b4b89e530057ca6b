"""tcalc check: CI validation of presets and config.json files."""

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
        f"Error: {tmp_path}: no model files in this folder (presets, config.json or .gguf "
        "files that git does not ignore)\n")


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
        "line": 3, "key": None, "checkpoint": None}


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


# -- a real repository ------------------------------------------------------------------------

def _repository(root) -> None:  # type: ignore[no-untyped-def]
    """What a model repository holds besides its presets: CI workflows, package.json, a
    pre-commit config, a model folder, generated files it ignores."""
    (root / ".github" / "workflows").mkdir(parents=True)
    (root / ".github" / "workflows" / "ci.yml").write_text(
        "on: push\njobs:\n  t:\n    runs-on: x\n")
    (root / "package.json").write_text('{"name": "site", "version": "1.0.0"}\n')
    # JSON that mentions a model_type below its top level: a list of cases, not a config
    (root / "cases.json").write_text('{"cases": [{"model_type": "gpt2", "n_layer": 1}]}\n')
    (root / ".pre-commit-config.yaml").write_text("repos:\n- repo: local\n")
    (root / "configs").mkdir()
    (root / "configs" / "gpt2.yaml").write_text((ROOT / "configs" / "gpt2.yaml").read_text())
    (root / "build").mkdir()
    (root / "build" / "broken.yaml").write_text("vocab_size: [\n")
    (root / ".gitignore").write_text("build/\n")


def test_a_repository_is_checked_for_its_model_files_only(cli, tmp_path, monkeypatch) -> None:
    import shutil
    import subprocess

    _repository(tmp_path)
    monkeypatch.chdir(tmp_path)
    expected = ["ok    configs/gpt2.yaml: gpt2, 124,439,808 parameters = expected_params",
                "1 file checked: 1 ok, 0 failed"]
    # outside a git work tree: the .gitignore files read as git reads them
    assert cli("check", ".").stdout.splitlines() == expected
    if shutil.which("git"):  # in one: git's own answer (ls-files --exclude-standard)
        subprocess.run(["git", "init", "-q", "."], check=True)
        assert cli("check", ".").stdout.splitlines() == expected
        (tmp_path / ".git" / "info").mkdir(exist_ok=True)
        (tmp_path / ".git" / "info" / "exclude").write_text("configs/\n")
        r = cli("check", ".", code=2)
        assert "no model files in this folder" in r.stderr
    # a file named on the command line is checked whatever the folder search skips
    r = cli("check", "build/broken.yaml", code=1)
    assert r.stdout.startswith("FAIL  build/broken.yaml (line 2): invalid YAML")


def test_exclude_skips_paths_and_their_parts(cli, tmp_path, monkeypatch) -> None:
    (tmp_path / "configs" / "old").mkdir(parents=True)
    for where in ("configs/gpt2.yaml", "configs/old/gpt2.yaml"):
        (tmp_path / where).write_text((ROOT / "configs" / "gpt2.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    for exclude in ("old", "configs/old/*", "*/old/gpt2.yaml"):
        lines = cli("check", ".", "--exclude", exclude).stdout.splitlines()
        assert [line.split(":")[0] for line in lines[:-1]] == ["ok    configs/gpt2.yaml"]
    r = cli("check", ".", "--exclude", "*.yaml", code=2)
    assert "no model files" in r.stderr


def test_expected_params_in_a_config_json_is_checked(cli, tmp_path) -> None:
    config = json.loads((DATA / "hf" / "gpt2.json").read_text())
    path = tmp_path / "config.json"
    # transformers keeps unknown keys in a config; tcalc reads this one
    for value, code, end in ((124_439_808, 0, "124,439,808 parameters = expected_params"),
                             (124_439_800, 1, "expected_params is 124,439,800 but the "
                                              "architecture has 124,439,808 (difference +8)"),
                             ("many", 1, "key 'expected_params': expected a whole number of "
                                         "parameters (>= 0), got 'many'")):
        path.write_text(json.dumps(config | {"expected_params": value}))
        assert cli("check", str(path), code=code).stdout.splitlines()[0].endswith(end)


def _model_folder(folder, layers: int | None = None, extra: str = "tiny-llama"):  # type: ignore[no-untyped-def]
    import shutil

    shutil.copytree(DATA / "checkpoints" / extra, folder)
    if layers is not None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | {"num_hidden_layers": layers}))


def test_a_checkpoint_that_disagrees_with_its_config_fails(cli, tmp_path) -> None:
    # tiny-llama's checkpoint holds 2 layers (69,952 elements, written by transformers 5.23's
    # LlamaForCausalLM: tools/make_checkpoint_fixtures.py); its config changed to 3 layers
    # describes a larger model than the tensors hold (each MLP projection: 2 layers × 64 × 96)
    _model_folder(tmp_path / "ok")
    assert cli("check", str(tmp_path / "ok")).stdout.splitlines()[0].endswith(
        "llama, 69,952 parameters, checkpoint equal")
    _model_folder(tmp_path / "three", layers=3)
    three = cli.json("params", str(tmp_path / "three" / "config.json"))["total_params"]
    r = cli("check", str(tmp_path / "three"), code=1)
    assert r.stdout.splitlines()[0].endswith(
        f"the checkpoint's tensors hold 69,952 elements, {three - 69_952:,} fewer than the "
        f"config's architecture ({three:,}); largest: model.layers.N.mlp.down_proj.weight "
        "12,288, model.layers.N.mlp.gate_proj.weight 12,288, model.layers.N.mlp.up_proj.weight "
        "12,288")
    # a tied head and a rotary buffer saved beside the weights: passes, and says so
    _model_folder(tmp_path / "extra", extra="tiny-llama-extra")
    assert cli("check", str(tmp_path / "extra")).stdout.splitlines()[0].endswith(
        "checkpoint +8,200 in lm_head.weight, model.rotary_emb.inv_freq")


def test_a_broken_checkpoint_fails_its_folder_only(cli, tmp_path) -> None:
    _model_folder(tmp_path / "a")
    _model_folder(tmp_path / "b")
    with open(tmp_path / "b" / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    r = cli("check", str(tmp_path), code=1)
    lines = r.stdout.splitlines()
    assert lines[0].endswith("checkpoint equal") and lines[1].startswith("FAIL  ")
    assert "checkpoint: " in lines[1] and "not a safetensors file" in lines[1]
    assert lines[2] == "2 files checked: 1 ok, 1 failed"


LFS = ("version https://git-lfs.github.com/spec/v1\n"
       "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
       "size 3145728\n")  # a pointer as git-lfs writes it (git-lfs docs/spec.md)


def test_a_clone_without_its_lfs_files_is_said_not_failed(cli, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(
        (DATA / "checkpoints" / "tiny-llama" / "config.json").read_text())
    (folder / "model.safetensors").write_text(LFS)
    (folder / "model-q4.gguf").write_text(LFS)
    monkeypatch.chdir(tmp_path)
    assert cli("check", "model").stdout.splitlines() == [
        "ok    model/config.json: llama, 69,952 parameters, checkpoint not compared (git-lfs "
        "pointers: git lfs pull fetches it)", "1 file checked: 1 ok, 0 failed"]
    r = cli("check", "model/model-q4.gguf", code=1)
    assert r.stdout.startswith("FAIL  model/model-q4.gguf: a git-lfs pointer, not the file "
                               "itself (git lfs pull fetches it)")
    r = cli("params", "model", code=2)
    assert r.stderr == ("Error: model/model.safetensors: a git-lfs pointer, not the file itself "
                        "(git lfs pull fetches it)\n")
