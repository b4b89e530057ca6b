"""Every class of bad input: one line naming file, key and expectation; exit 2."""

from __future__ import annotations

import pytest
from conftest import DATA, ROOT

BAD = DATA / "bad"

# file -> the exact message after "Error: <path>: "
EXPECTED = {
    "syntax.yaml": "invalid YAML (line 3, column 8): did not find expected ',' or ']'",
    "unknown_key.yaml": "unknown key 'n_head': did you mean 'n_heads'?",
    "wrong_type.yaml": "key 'd_model': expected an integer, got '768'",
    "zero_layers.yaml": "key 'n_layers': expected an integer >= 1 for arch decoder, got 0",
    "negative.yaml": "key 'd_ff': expected an integer >= 0, got -3072",
    "indivisible_heads.yaml": ("key 'n_heads': expected a divisor of d_model=768 (or set "
                               "d_head), got 10"),
    "list.yaml": "expected a mapping of keys (name: ..., d_model: ...), got list",
    "empty.yaml": "expected a mapping of keys (name: ..., d_model: ...), got empty",
    "bad_bias.yaml": "unknown key 'bias.qkv': (bias keys: q, k, v, o, ffn_in, ffn_out)",
    "missing_layers.yaml": "key 'n_layers': expected to be present (required: n_layers)",
    "bad_choice.yaml": ("key 'position': expected one of learned, sinusoidal, rope, alibi, "
                        "relative, none, got 'rotary'"),
    "bad_bool.yaml": "key 'tie_embeddings': expected true or false, got 'yes please'",
    "python_tag.yaml": ("invalid YAML (line 1, column 4): could not determine a constructor "
                        "for the tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_file_gives_one_clean_line(cli, name: str) -> None:
    path = BAD / name
    r = cli("params", str(path), code=2)
    assert r.stderr == f"Error: {path}: {EXPECTED[name]}\n"
    assert r.stdout == ""


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check_reports_the_same_message(cli, name: str) -> None:
    r = cli("check", str(BAD / name), code=1)
    assert f"FAIL  {BAD.relative_to(ROOT) / name}" in r.stdout and EXPECTED[name] in r.stdout


def test_every_bad_example_is_tested() -> None:
    # expected_mismatch.yaml loads fine; only `tcalc check` fails it (tests/test_check.py).
    assert {p.name for p in BAD.iterdir()} == set(EXPECTED) | {"expected_mismatch.yaml"}


def test_unknown_preset_suggests_close_names(cli) -> None:
    r = cli("params", "gpt2-mediun", code=2)
    assert r.stderr.startswith("Error: unknown preset 'gpt2-mediun'; did you mean gpt2-medium")


def test_missing_file(cli, tmp_path) -> None:
    r = cli("params", str(tmp_path / "nope.yaml"), code=2)
    assert r.stderr == f"Error: {tmp_path / 'nope.yaml'}: no such file\n"


def test_directory_instead_of_file(cli, tmp_path) -> None:
    r = cli("params", str(tmp_path), code=2)
    assert r.stderr == (f"Error: {tmp_path}: a folder without a config.json, expected a .yaml "
                        "or config.json file or a model folder\n")


def test_not_utf8(cli, tmp_path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    assert cli("params", str(path), code=2).stderr == (
        f"Error: {path}: not UTF-8 text (byte 9)\n")


def test_huge_file_refused_before_parsing(cli, tmp_path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("# " + "x" * (1 << 20) + "\n")
    r = cli("params", str(path), code=2)
    assert "larger than the 1,048,576-byte limit" in r.stderr


def test_encoder_decoder_needs_both_stacks(cli) -> None:
    r = cli("params", "transformer-base", "--n-layers", "3", code=2)
    assert r.stderr == ("Error: key 'n_layers': expected 0 for arch encoder-decoder (set "
                        "n_encoder_layers and n_decoder_layers), got 3\n")
