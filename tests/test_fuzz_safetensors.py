"""safetensors headers from their grammar (huggingface/safetensors docs "Format": an 8-byte
length, a JSON object of {name: {dtype, shape, data_offsets}} and __metadata__, the data):
every header the safetensors library accepts is read with the totals its structure declares;
every corruption of one is a one-line PresetError, never another exception, never a count
its bytes do not back. Derandomized, so CI runs the same cases every time."""

from __future__ import annotations

import json
import math
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_calc.checkpoint import DTYPE_BITS, read_header
from transformer_calc.errors import PresetError

FUZZ = settings(max_examples=150, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
# dtypes whose elements are whole bytes (F4 / F6 need an element count that fills bytes)
WHOLE = sorted(d for d, bits in DTYPE_BITS.items() if bits % 8 == 0)


@st.composite
def tensors(draw: st.DrawFn) -> list[tuple[str, str, list[int]]]:
    names = draw(st.lists(st.text(min_size=1, max_size=20).filter(lambda s: s != "__metadata__"),
                          min_size=0, max_size=8, unique=True))
    out = []
    for name in names:
        dtype = draw(st.sampled_from(WHOLE))
        shape = draw(st.lists(st.integers(0, 6), min_size=0, max_size=4))
        out.append((name, dtype, shape))
    return out


def header_of(entries: list[tuple[str, str, list[int]]], metadata: dict[str, str] | None
              ) -> tuple[dict, int]:
    """The header safetensors writes for these tensors (contiguous, in order) and its data
    size."""
    header: dict = {"__metadata__": metadata} if metadata is not None else {}
    at = 0
    for name, dtype, shape in entries:
        size = math.prod(shape) * DTYPE_BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + size]}
        at += size
    return header, at


def write(folder: Path, body: bytes, data: int, length: int | None = None) -> Path:
    path = folder / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(body) if length is None else length) + body
                     + b"\0" * data)
    return path


@FUZZ
@given(tensors(), st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=8),
                                              max_size=3))
def test_a_valid_header_gives_what_its_structure_declares(entries, metadata) -> None:
    header, size = header_of(entries, metadata)
    with tempfile.TemporaryDirectory() as d:
        totals = read_header(write(Path(d), json.dumps(header).encode(), size))
    assert totals.params == sum(math.prod(s) for _, _, s in entries)
    assert totals.bytes == size
    by_dtype: dict[str, int] = {}
    for _, dtype, shape in entries:
        by_dtype[dtype] = by_dtype.get(dtype, 0) + math.prod(shape)
    assert totals.dtypes == by_dtype


def _mutations() -> st.SearchStrategy:
    """(what to change) in a valid header: a size, an offset, the data's length, a value's
    type, a key dropped, bytes flipped or cut."""
    return st.one_of(
        st.tuples(st.just("dim"), st.integers(0, 7), st.integers(-3, 2**70)),
        st.tuples(st.just("offset"), st.integers(0, 7), st.integers(0, 1),
                  st.integers(-5, 2**65)),
        st.tuples(st.just("data"), st.integers(-16, 16)),
        st.tuples(st.just("value"), st.integers(0, 7),
                  st.sampled_from(["dtype", "shape", "data_offsets"]),
                  st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True),
                            st.text(max_size=4), st.lists(st.integers(-2, 2), max_size=3),
                            st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))),
        st.tuples(st.just("drop"), st.integers(0, 7),
                  st.sampled_from(["dtype", "shape", "data_offsets"])),
        st.tuples(st.just("bytes"), st.integers(0, 10**6), st.binary(min_size=1, max_size=3)),
        st.tuples(st.just("cut"), st.integers(0, 10**6)),
        st.tuples(st.just("length"), st.integers(0, 2**64 - 1)),
    )


@FUZZ
@given(tensors().filter(bool), _mutations())
def test_a_corrupted_header_is_one_clean_error_or_an_honest_count(entries, change) -> None:
    header, size = header_of(entries, None)
    names = list(header)
    kind, *args = change
    length = None
    body: bytes
    if kind == "dim":
        name = names[args[0] % len(names)]
        shape = header[name]["shape"]
        if shape:
            shape[args[0] % len(shape)] = args[1]
    elif kind == "offset":
        header[names[args[0] % len(names)]]["data_offsets"][args[1]] = args[2]
    elif kind == "data":
        size = max(0, size + args[0])
    elif kind == "value":
        header[names[args[0] % len(names)]][args[1]] = args[2]
    elif kind == "drop":
        del header[names[args[0] % len(names)]][args[1]]
    body = json.dumps(header).encode()
    if kind == "bytes":
        at = args[0] % len(body)
        body = body[:at] + args[1] + body[at + len(args[1]):]
    elif kind == "cut":
        body = body[:args[0] % len(body)]
    elif kind == "length":
        length = args[0]
    with tempfile.TemporaryDirectory() as d:
        try:
            totals = read_header(write(Path(d), body, size, length))
        except PresetError as e:
            assert "\n" not in str(e)
            return
    # accepted: then it is a header safetensors accepts, and the count is what it declares
    parsed = json.loads(body)
    declared = [v for k, v in parsed.items() if k != "__metadata__"]
    assert totals.params == sum(math.prod(t["shape"]) for t in declared)
    assert totals.bytes == size == sum(t["data_offsets"][1] - t["data_offsets"][0]
                                       for t in declared)
    for t in declared:
        bits = math.prod(t["shape"]) * DTYPE_BITS[t["dtype"]]
        assert bits == 8 * (t["data_offsets"][1] - t["data_offsets"][0])


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 400))
def test_random_bytes_are_never_a_traceback(body: bytes, length: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        try:
            read_header(write(Path(d), body, 0, length))
        except PresetError as e:
            assert "\n" not in str(e)


def test_the_same_verdict_as_the_safetensors_library() -> None:
    # 400 headers, valid then changed once, and what safetensors 0.8.0's safe_open said of
    # each (tools/safetensors_verdicts.py): accepted by both or refused by both, and where
    # accepted, the same elements
    import base64

    from conftest import DATA

    cases = json.loads((DATA / "safetensors_verdicts.json").read_text())["cases"]
    disagree = []
    with tempfile.TemporaryDirectory() as d:
        for case in cases:
            body = base64.b64decode(case["header"])
            try:
                params = read_header(write(Path(d), body, case["data"])).params
            except PresetError:
                params = None
            if (params is not None) != case["ok"] or (case["ok"] and params != case["params"]):
                disagree.append((body[:200], case))
    assert disagree == [], disagree[:3]
