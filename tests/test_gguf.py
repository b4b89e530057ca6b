"""GGUF headers: tests/data/gguf/tiny-llama-q4_k_m.gguf was written by the gguf
package's GGUFWriter (gguf 0.19.0; tools/make_gguf_fixture.py): a Llama-architecture header
with Q4_K, Q6_K and F32 tensors laid out as llama.cpp's Q4_K_M recipe gives them, and
zero-filled data of each type's size."""

from __future__ import annotations

import json
import struct

import pytest
from conftest import DATA

from transformer_calc.errors import PresetError
from transformer_calc.gguf_file import GGML, read_gguf, recipe
from transformer_calc.params import count_params
from transformer_calc.presets import load_model

FILE = DATA / "gguf" / "tiny-llama-q4_k_m.gguf"


def test_ggml_type_table_equals_the_gguf_package() -> None:
    sizes = json.loads((DATA / "gguf" / "ggml_quant_sizes.json").read_text())["sizes"]
    for name, (type_id, block, nbytes) in sizes.items():
        if type_id in GGML:
            assert GGML[type_id] == (name, block, nbytes)
    assert {GGML[t][0] for t in GGML} <= set(sizes)


def test_header_gives_architecture_types_params_and_bytes() -> None:
    g = read_gguf(FILE)
    assert g.version == 3 and g.metadata["general.architecture"] == "llama"
    assert recipe(g) == "gguf-q4_k_m"
    # 4 layers of 256 wide (K/V 128), FFN 512, vocab 1,024, untied output
    layer = 256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 512 + 2 * 256
    assert g.params == 4 * layer + 2 * 1024 * 256 + 256
    assert set(g.types) == {"f32", "q4_k", "q6_k"}
    # the file holds exactly the bytes of its tensors after the header
    assert FILE.stat().st_size - g.bytes < 4096


def test_a_gguf_is_a_model_for_every_command(cli) -> None:
    spec = load_model(str(FILE))
    assert count_params(spec).total == read_gguf(FILE).params
    data = cli.json("params", str(FILE))
    assert data["checkpoint"]["matches"] is True
    mem = cli.json("memory", str(FILE), "--inference", "--seq-len", "2048")
    assert mem["settings"]["quant"] == "gguf-q4_k_m"
    weights = next(c for c in mem["components"] if c["name"] == "weights")
    # tcalc's Q4_K_M recipe sizes the same tensors as the file holds them
    assert weights["bytes"] == read_gguf(FILE).bytes
    cli.json("flops", str(FILE), "--seq-len", "1024")


@pytest.mark.parametrize(("data", "message"), [
    (b"GGUX" + b"\0" * 20, "no GGUF magic"),
    (b"GGUF" + struct.pack("<I", 9) + b"\0" * 16, "GGUF version 9"),
    (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0), "tensors"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**40),
     "a metadata key of 1,099,511,627,776 bytes"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1), "its header ends early, at byte 24"),
])
def test_hostile_gguf_fails_in_one_line(tmp_path, cli, data: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(PresetError, match=message):
        read_gguf(path)
    r = cli("params", str(path), code=2)
    assert message in r.stderr and r.stderr.count("\n") == 1


def test_an_architecture_not_mapped_is_refused_by_name(tmp_path) -> None:
    raw = FILE.read_bytes().replace(b"llama", b"bloom", 1)
    path = tmp_path / "bloom.gguf"
    path.write_bytes(raw)
    with pytest.raises(PresetError, match="general.architecture: expected one of"):
        load_model(str(path))
