"""Checkpoint truth from safetensors headers: model folders written by transformers
and the safetensors package (tools/make_checkpoint_fixtures.py: torch 2.13.0, transformers
5.23.0, safetensors 0.8.0), read without the weights and without either library."""

from __future__ import annotations

import json
import re
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


def _tensor(dtype: str, shape: list[int], begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


# each as safetensors refuses it (safetensors/src/tensor.rs: HeaderTooLarge,
# InvalidHeaderDeserialization, TensorInvalidInfo, InvalidOffset, MetadataIncompleteBuffer)
@pytest.mark.parametrize(("length", "header", "data", "message"), [
    (10**12, b"{}", 0, "header length 1,000,000,000,000"),
    (5, b"nope!", 0, "not a safetensors file (expected a JSON object)"),
    (2, b"[]", 0, "not a safetensors file (expected a JSON object)"),
    (None, {"w": _tensor("F99", [2], 0, 8)}, 8, "tensor 'w': dtype: expected one of BOOL"),
    (None, {"w": _tensor("F32", [-1], 0, 8)}, 8, "tensor 'w': shape: expected a list of sizes"),
    (None, {"w": _tensor("F32", [True], 0, 4)}, 4, "tensor 'w': shape: expected a list"),
    # the bytes must hold the shape: a [1000000, 64] BF16 tensor is not 16 KiB
    (None, {"w": _tensor("BF16", [1_000_000, 64], 0, 16384)}, 16384,
     "tensor 'w': shape [1000000, 64] of BF16 is 128,000,000 bytes, but data_offsets "
     "[0, 16,384] hold 16,384 bytes"),
    (None, {"w": _tensor("F4", [3], 0, 2)}, 2, "is 12 bits (not whole bytes)"),
    (None, {"w": _tensor("BF16", [8], 16, 0)}, 16,
     "data_offsets [16, 0]: expected [begin, end], begin <= end"),
    (None, {"a": _tensor("BF16", [8], 0, 16), "b": _tensor("BF16", [8], 8, 24)}, 24,
     "data_offsets [8, 24] overlaps the tensor before it (expected to begin at byte 16)"),
    (None, {"a": _tensor("BF16", [8], 0, 16), "b": _tensor("BF16", [8], 24, 40)}, 40,
     "data_offsets [24, 40] leaves a gap before it"),
    (None, {"w": _tensor("BF16", [8], 0, 16)}, 8,
     "the tensors' data_offsets end at byte 16, but the file holds 8 bytes"),
    (None, {"w": _tensor("BF16", [8], 0, 16)}, 24,
     "the tensors' data_offsets end at byte 16, but the file holds 24 bytes"),
    (None, b'{"w": {"dtype": "BF16", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 2]}}',
     2, "a number with more than 4,300 digits"),
    (None, b'{"w": ' + json.dumps(_tensor("U8", [1], 0, 1)).encode() + b', "w": '
     + json.dumps(_tensor("U8", [1], 1, 2)).encode() + b"}", 2,
     # of a name given twice the last entry counts, as in safetensors' map: bytes 0-1 unused
     "data_offsets [1, 2] leaves a gap before it (expected to begin at byte 0)"),
    (None, {"__metadata__": {"format": 1}}, 0, "__metadata__: expected a mapping of text"),
    (None, b"{" * 100_000, 0, "not a safetensors file"),
    (None, b'{} trailing', 0, "not a safetensors file (more after the object"),
    (None, b"\xff\xfe{}", 0, "its header is not UTF-8, byte 0"),
])
def test_hostile_headers_fail_in_one_line(tmp_path, length, header, data: int,
                                          message: str) -> None:
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = tmp_path / "model.safetensors"
    _write(path, len(body) if length is None else length, body + b"\0" * data)
    with pytest.raises(PresetError, match=re.escape(message)):
        read_header(path)


def test_a_20000_dimension_shape_is_counted() -> None:
    # a shape's rank is not bounded by the format: 20,000 sizes of 1 are one element
    import tempfile
    from pathlib import Path

    body = json.dumps({"w": _tensor("BF16", [1] * 20_000, 0, 2)}).encode()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.safetensors"
        _write(path, len(body), body + b"\0\0")
        assert read_header(path).params == 1


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
