"""GGUF headers from their grammar (ggml docs/gguf.md: magic, version, counts, typed metadata,
tensor infos, aligned data): every file llama.cpp's reader accepts is read with the values
and totals it declares, and every corruption of one (a length, a type, a count, bytes cut) is
a one-line PresetError, never another exception and never a read the structure did not
declare. Derandomized, so CI runs the same cases every time."""

from __future__ import annotations

import re
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_calc.errors import PresetError
from transformer_calc.gguf_file import GGML, KEEP_ARRAY, Skipped, hf_config, read_gguf, recipe

FUZZ = settings(max_examples=150, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
SCALARS = {0: ("<B", st.integers(0, 255)), 1: ("<b", st.integers(-128, 127)),
           2: ("<H", st.integers(0, 2**16 - 1)), 3: ("<h", st.integers(-2**15, 2**15 - 1)),
           4: ("<I", st.integers(0, 2**32 - 1)), 5: ("<i", st.integers(-2**31, 2**31 - 1)),
           7: ("<?", st.booleans()), 10: ("<Q", st.integers(0, 2**64 - 1)),
           11: ("<q", st.integers(-2**63, 2**63 - 1))}


def s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


@st.composite
def value(draw: st.DrawFn) -> tuple[int, bytes, object]:
    """(type, encoded, what tcalc keeps) of one metadata value."""
    kind = draw(st.sampled_from([*SCALARS, 8, 9]))
    if kind in SCALARS:
        fmt, strategy = SCALARS[kind]
        v = draw(strategy)
        return kind, struct.pack(fmt, v), v
    if kind == 8:
        text = draw(st.text(max_size=20))
        return kind, s(text), text
    inner = draw(st.sampled_from([*SCALARS, 8]))
    n = draw(st.integers(0, KEEP_ARRAY + 3))
    if inner == 8:
        items = [draw(st.text(max_size=4)) for _ in range(n)]
        raw = b"".join(s(t) for t in items)
    else:
        fmt, strategy = SCALARS[inner]
        items = [draw(strategy) for _ in range(n)]
        raw = b"".join(struct.pack(fmt, v) for v in items)
    kept = items if n <= KEEP_ARRAY else Skipped("array", n)
    return kind, struct.pack("<IQ", inner, n) + raw, kept


def gguf(meta: list[tuple[str, int, bytes]], tensors: list[tuple[str, tuple[int, ...], int]],
         alignment: int = 32) -> bytes:
    """A GGUF file as llama.cpp writes one (gguf_write_to_buf): each tensor's data at the
    running offset, padded to the alignment, after a header padded to it."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    out += b"".join(s(k) + struct.pack("<I", kind) + raw for k, kind, raw in meta)
    offset, sizes = 0, []
    for name, shape, t in tensors:
        _, block, size = GGML[t]
        n = 1
        for d in shape:
            n *= d
        out += s(name) + struct.pack("<I", len(shape)) + b"".join(
            struct.pack("<Q", d) for d in shape) + struct.pack("<IQ", t, offset)
        nbytes = n // block * size
        sizes.append(nbytes)
        offset += -(-nbytes // alignment) * alignment
    if tensors:
        out += b"\0" * (-len(out) % alignment)
    return out + b"\0" * offset


@st.composite
def files(draw: st.DrawFn) -> tuple[bytes, dict, list]:
    keys = draw(st.lists(st.text(min_size=1, max_size=12).filter(
        lambda k: k != "general.alignment"), unique=True, max_size=6))
    meta, expect = [], {}
    for k in keys:
        kind, raw, kept = draw(value())
        meta.append((k, kind, raw))
        expect[k] = kept
    names = draw(st.lists(st.text(min_size=1, max_size=10).filter(
        lambda n: len(n.encode()) < 64), unique=True, max_size=4))
    tensors = []
    for name in names:
        t = draw(st.sampled_from(sorted(GGML)))
        block = GGML[t][1]
        shape = (block * draw(st.integers(0, 3)),) + tuple(
            draw(st.lists(st.integers(0, 3), max_size=3)))
        tensors.append((name, shape, t))
    return gguf(meta, tensors), expect, tensors


def _read(data: bytes) -> object:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.gguf"
        path.write_bytes(data)
        return read_gguf(path)


@FUZZ
@given(files())
def test_a_valid_file_gives_what_it_declares(case) -> None:
    data, expect, tensors = case
    g = _read(data)
    assert g.metadata == expect  # type: ignore[attr-defined]
    params = 0
    for _, shape, _t in tensors:
        n = 1
        for d in shape:
            n *= d
        params += n
    assert g.params == params  # type: ignore[attr-defined]


@FUZZ
@given(files(), st.one_of(
    st.tuples(st.just("cut"), st.integers(0, 10**6)),
    st.tuples(st.just("bytes"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("u64"), st.integers(0, 10**6), st.integers(0, 2**64 - 1)),
))
def test_a_corrupted_file_is_one_clean_error(case, change) -> None:
    data = case[0]
    kind, at, *rest = change
    at %= len(data)
    if kind == "cut":
        data = data[:at]
    elif kind == "bytes":
        data = data[:at] + rest[0] + data[at + len(rest[0]):]
    else:
        data = data[:at] + struct.pack("<Q", rest[0]) + data[at + 8:]
    try:
        g = _read(data)
    except PresetError as e:
        assert "\n" not in str(e)
        return
    # accepted: every tensor's data lies within the file, as llama.cpp requires
    assert g.bytes <= len(data)  # type: ignore[attr-defined]


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_after_the_magic_are_never_a_traceback(tail: bytes) -> None:
    try:
        _read(b"GGUF" + tail)
    except PresetError as e:
        assert "\n" not in str(e)


# the metadata a Llama-family file needs, and each key given the wrong kind of value
LLAMA = [("general.architecture", 8, s("llama")), ("llama.embedding_length", 4,
         struct.pack("<I", 256)), ("llama.block_count", 4, struct.pack("<I", 2)),
         ("llama.feed_forward_length", 4, struct.pack("<I", 512)),
         ("llama.attention.head_count", 4, struct.pack("<I", 4)),
         ("llama.context_length", 4, struct.pack("<I", 1024))]
EMBED = ("token_embd.weight", (256, 1024), 0)


@pytest.mark.parametrize(("key", "kind", "raw", "message"), [
    ("general.architecture", 9, struct.pack("<IQ", 8, 1) + s("llama"),
     "general.architecture: expected one of llama, mistral, qwen2, qwen3"),
    ("general.architecture", 4, struct.pack("<I", 7), "general.architecture: expected one of"),
    ("llama.block_count", 8, s("2"), "llama.block_count: expected a positive integer, got '2'"),
    ("llama.attention.head_count", 9, struct.pack("<IQ", 4, 2) + struct.pack("<II", 4, 4),
     "llama.attention.head_count: expected a positive integer, got an array"),
    ("llama.embedding_length", 4, struct.pack("<I", 0),
     "llama.embedding_length: expected a positive integer, got 0"),
])
def test_metadata_of_the_wrong_kind_is_one_error_naming_its_key(tmp_path, key, kind, raw,
                                                                 message) -> None:
    meta = [(k, t, r) if k != key else (k, kind, raw) for k, t, r in LLAMA]
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf(meta, [EMBED]))
    with pytest.raises(PresetError, match=message):
        hf_config(read_gguf(path), str(path))


@pytest.mark.parametrize(("shape", "found"), [((), "[]"), ((256,), "[256]"),
                                              ((512, 1024), "[512, 1024]")])
def test_a_token_embedding_of_the_wrong_shape_is_one_error(tmp_path, shape, found) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf(LLAMA, [("token_embd.weight", shape, 0)]))
    with pytest.raises(PresetError, match=rf"token_embd.weight: expected the shape \[256, "
                                          rf"vocabulary\].*got {re.escape(found)}"):
        hf_config(read_gguf(path), str(path))


@pytest.mark.parametrize(("raw", "message"), [
    (None, "general.file_type: expected one of the llama.cpp recipes tcalc models .*, the "
           "file does not say; give --quant"),
    ((4, struct.pack("<I", 12)), "got 12 \\(Q3_K_M\\); give --quant"),
    ((9, struct.pack("<IQ", 4, 1) + struct.pack("<I", 15)), "not an integer"),
])
def test_a_file_type_without_a_recipe_is_said_not_served_as_bf16(tmp_path, raw, message
                                                                 ) -> None:
    meta = LLAMA + ([("general.file_type", *raw)] if raw else [])
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf(meta, [EMBED]))
    with pytest.raises(PresetError, match=message):
        recipe(read_gguf(path))

