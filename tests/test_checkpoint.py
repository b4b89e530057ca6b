"""Checkpoint truth from safetensors headers (issue 17): model folders written by transformers
and the safetensors package (tools/make_checkpoint_fixtures.py: torch 2.13.0, transformers
5.23.0, safetensors 0.8.0), read without the weights and without either library."""

from __future__ import annotations

import json
import struct

import pytest
from conftest import DATA

from transformer_calc.checkpoint import compare, pattern, read_checkpoint, read_header
from transformer_calc.errors import PresetError

CKPT = DATA / "checkpoints"
# LlamaForCausalLM(vocab 128, hidden 64, ffn 96, 2 layers, 4 heads, 2 K/V heads, tied):
# torch counts 69,952 parameters (tools/reference_counts.py on its config.json)
TINY = 69_952


def test_single_and_sharded_equal_the_architecture(cli) -> None:
    for folder in ("tiny-llama", "tiny-llama-sharded"):
        data = cli.json("params", str(CKPT / folder))
        c = data["checkpoint"]
        assert data["total_params"] == TINY
        assert c["params"] == TINY and c["bytes"] == 2 * TINY and c["dtypes"] == {"BF16": TINY}
        assert c["matches"] is True and c["difference"] == 0
    sharded = cli.json("params", str(CKPT / "tiny-llama-sharded"))["checkpoint"]
    assert len(sharded["files"]) == 2


def test_the_difference_is_named_by_tensor_pattern() -> None:
    ckpt = read_checkpoint(CKPT / "tiny-llama-extra")
    assert ckpt is not None
    c = compare(ckpt, TINY)
    # a copy of the tied head (128 × 64) and an 8-element rotary buffer, saved beside it
    assert c["difference"] == 128 * 64 + 8
    assert c["explained_by"] == ["lm_head.weight", "model.rotary_emb.inv_freq"]
    assert ckpt.dtypes == {"BF16": TINY + 128 * 64, "F32": 8}


def test_pattern_names_layers_as_n() -> None:
    assert pattern("model.layers.12.mlp.up_proj.weight") == "model.layers.N.mlp.up_proj.weight"


def _write(path, header_len: int, body: bytes) -> None:  # type: ignore[no-untyped-def]
    path.write_bytes(struct.pack("<Q", header_len) + body)


@pytest.mark.parametrize(("length", "body", "message"), [
    (10**12, b"{}", "header length"),
    (5, b"nope!", "not JSON"),
    (2, b"[]", "not a JSON object"),
    (None, json.dumps({"w": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}}).encode(),
     "expected dtype, shape and data_offsets"),
    (None, json.dumps({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}}).encode(),
     "expected dtype, shape and data_offsets"),
])
def test_hostile_headers_fail_in_one_line(tmp_path, length, body: bytes, message: str) -> None:
    path = tmp_path / "model.safetensors"
    _write(path, len(body) if length is None else length, body)
    with pytest.raises(PresetError, match=message):
        read_header(path)


def test_a_short_file_and_a_bad_index(tmp_path, cli) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    with pytest.raises(PresetError, match="shorter than its 8-byte"):
        read_header(tmp_path / "model.safetensors")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text((CKPT / "tiny-llama" / "config.json").read_text())
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "../../etc/passwd.safetensors"}}))
    r = cli("params", str(folder), code=2)
    assert "weight_map: expected .safetensors file names in the folder" in r.stderr
    assert r.stderr.count("\n") == 1
