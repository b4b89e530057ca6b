"""What a checkpoint really holds: the safetensors headers of a model folder, never the
weights.

A safetensors file starts with an 8-byte little-endian header length N and N bytes of JSON:
{tensor name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
(huggingface/safetensors, docs/source/index.mdx "Format"). A sharded checkpoint lists its files
in model.safetensors.index.json ("weight_map": tensor -> file).

Every header is validated as the safetensors library validates it before it hands out a
tensor (safetensors/src/tensor.rs, SafeTensors::read_metadata and Metadata::validate): N at
most 100,000,000 bytes and within the file, a UTF-8 JSON object; each tensor's shape times its
dtype's bits equal to its byte range (a whole number of bytes); the ranges, in offset order,
contiguous from 0 and ending where the file ends; of a name given twice, the last entry
(as the library's map keeps it). So a count is never taken
from a shape its bytes do not back. Memory is bounded by the structure, not the file: the
header is parsed one tensor at a time, and only totals per dtype and per name pattern (layer
numbers as N) are kept.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterator
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any, NamedTuple

from transformer_calc.errors import PresetError, value_error_text

HEADER_CAP = 100_000_000  # safetensors' MAX_HEADER_SIZE (safetensors/src/tensor.rs)
INDEX_CAP = HEADER_CAP  # bytes of model.safetensors.index.json (DeepSeek-V3's: 8.9 MB)
MAX_FILES = 10_000  # shards read at most
MAX_PATTERNS = 10_000  # name patterns kept (real checkpoints: tens); the rest pooled
OTHER = "(other tensor names)"
# dtype -> bits per element (safetensors Dtype::bitsize)
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
              "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
              "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
              "U64": 64}
_U64 = 2**64  # sizes and offsets are usize in the format: 64-bit at most


class Checkpoint(NamedTuple):
    files: tuple[str, ...]
    params: int  # elements of every tensor stored (quantised formats: as stored)
    bytes: int  # the tensors' data (headers not included)
    dtypes: dict[str, int]  # dtype -> elements
    tensors: dict[str, int]  # tensor name, or its pattern (layer numbers as N) -> elements


class _Totals:
    """What the headers add up to, kept per dtype and per name pattern only."""

    def __init__(self) -> None:
        self.params = self.bytes = 0
        self.dtypes: dict[str, int] = {}
        self.patterns: dict[str, int] = {}

    def add(self, name: str, dtype: str, n: int, nbytes: int) -> None:
        self.params += n
        self.bytes += nbytes
        self.dtypes[dtype] = self.dtypes.get(dtype, 0) + n
        p = pattern(name)
        if p not in self.patterns and len(self.patterns) >= MAX_PATTERNS:
            p = OTHER
        self.patterns[p] = self.patterns.get(p, 0) + n

    def merge(self, other: _Totals) -> None:
        self.params += other.params
        self.bytes += other.bytes
        for dtype, n in other.dtypes.items():
            self.dtypes[dtype] = self.dtypes.get(dtype, 0) + n
        for p, n in other.patterns.items():
            if p not in self.patterns and len(self.patterns) >= MAX_PATTERNS:
                p = OTHER
            self.patterns[p] = self.patterns.get(p, 0) + n

    def checkpoint(self, files: tuple[str, ...]) -> Checkpoint:
        return Checkpoint(files, self.params, self.bytes, self.dtypes, self.patterns)


def _bad(where: str, name: str, what: str) -> PresetError:
    from transformer_calc.errors import printable

    return PresetError(f"{where}: tensor {printable(name, one_line=True)[:200]!r}: {what}")


def _typed(where: str, name: str, info: Any) -> tuple[str, list[int], int, int]:
    """(dtype, shape, begin, end) of one header entry, of the types safetensors reads it as
    (serde: a known dtype, sizes and two offsets that are 64-bit unsigned integers)."""
    if not isinstance(info, dict):
        raise _bad(where, name, "expected {dtype, shape, data_offsets} as safetensors writes "
                                "them")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise _bad(where, name, f"dtype: expected one of {', '.join(DTYPE_BITS)}")
    if not isinstance(shape, list) or not all(type(d) is int and 0 <= d < _U64 for d in shape):
        raise _bad(where, name, "shape: expected a list of sizes (integers >= 0)")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(type(o) is int and 0 <= o < _U64 for o in offsets)):
        raise _bad(where, name, "data_offsets: expected [begin, end], two integers >= 0")
    return dtype, shape, offsets[0], offsets[1]


def _backed(where: str, name: str, dtype: str, shape: list[int], begin: int, end: int) -> int:
    """The elements of a tensor whose bytes hold its shape exactly (safetensors' validate:
    InvalidOffset, ValidationOverflow, MisalignedSlice, TensorInvalidInfo)."""
    shown = f"{shape[:8]}{'...' if len(shape) > 8 else ''}"
    if begin > end:
        raise _bad(where, name, f"data_offsets [{begin:,}, {end:,}]: expected [begin, end], "
                                "begin <= end")
    n = 1
    for d in shape:
        n *= d
        if n >= _U64:
            raise _bad(where, name, f"shape {shown}: more elements than a 64-bit size holds")
    bits = n * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        size = f"{bits // 8:,} bytes" if bits % 8 == 0 else f"{bits:,} bits (not whole bytes)"
        raise _bad(where, name, f"shape {shown} of {dtype} is {size}, but data_offsets "
                                f"[{begin:,}, {end:,}] hold {end - begin:,} bytes")
    return n


def tensor_size(where: str, name: str, info: Any) -> tuple[str, int, int, int]:
    """(dtype, elements, begin, end) of one header entry, checked as safetensors checks it:
    a known dtype, a shape of sizes, two offsets in order, and bytes that hold the shape."""
    dtype, shape, begin, end = _typed(where, name, info)
    return dtype, _backed(where, name, dtype, shape, begin, end), begin, end


def check_ranges(where: str, begins: array, ends: array, data_size: int | None) -> None:
    """The byte ranges, in offset order, follow each other from 0 with no gap or overlap, up
    to the end of the data (safetensors: InvalidOffset, MetadataIncompleteBuffer)."""
    at = 0  # (begin, end) pairs in order, each as one integer: no tuple per tensor
    for key in sorted(b * _U64 + e for b, e in zip(begins, ends, strict=True)):
        begin, end = divmod(key, _U64)
        if begin != at:
            what = "overlaps the tensor before it" if begin < at else "leaves a gap before it"
            raise PresetError(f"{where}: data_offsets [{begin:,}, {end:,}] {what} "
                              f"(expected to begin at byte {at:,})")
        at = end
    if data_size is not None and at != data_size:
        raise PresetError(f"{where}: the tensors' data_offsets end at byte {at:,}, but the "
                          f"file holds {data_size:,} bytes of data after its header")


class _JSONScanner:
    """A JSON object read one entry at a time (json's own scanners for each key and value),
    so that a large header or index never becomes one large Python object."""

    _WS = re.compile(r"[ \t\n\r]*")
    _decoder = json.JSONDecoder()

    def __init__(self, text: str, where: str, what: str) -> None:
        self.text, self.pos, self.where, self.what = text, 0, where, what

    def error(self, why: str) -> PresetError:
        return PresetError(f"{self.where}: not {self.what} ({why})")

    def _skip(self) -> str:
        self.pos = self._WS.match(self.text, self.pos).end()  # type: ignore[union-attr]
        return self.text[self.pos:self.pos + 1]

    def entries(self) -> Iterator[str]:
        """The keys of the object at the current position; after each, the caller reads its
        value (value() or entries())."""
        if self._skip() != "{":
            raise self.error("expected a JSON object")
        self.pos += 1
        if self._skip() == "}":
            self.pos += 1
            return
        while True:
            if self._skip() != '"':
                raise self.error(f"expected a key at character {self.pos:,}")
            try:
                key, self.pos = scanstring(self.text, self.pos + 1, True)
            except ValueError:
                raise self.error(f"a bad key at character {self.pos:,}") from None
            if self._skip() != ":":
                raise self.error(f"expected ':' at character {self.pos:,}")
            self.pos += 1
            self._skip()
            yield key
            c = self._skip()
            self.pos += 1
            if c == "}":
                return
            if c != ",":
                raise self.error(f"expected ',' or '}}' at character {self.pos - 1:,}")

    def value(self) -> Any:
        self._skip()
        try:
            value, self.pos = self._decoder.raw_decode(self.text, self.pos)
        except RecursionError:
            raise self.error("nested too deeply") from None
        except ValueError as e:  # (JSONDecodeError, or an integer of over 4,300 digits)
            raise self.error(value_error_text(e) if "integer" in str(e)
                             else f"not JSON at character {self.pos:,}") from None
        return value

    def end(self) -> None:
        if self._skip():
            raise self.error(f"more after the object, at character {self.pos:,}")


def read_header(path: Path, totals: _Totals | None = None) -> _Totals:
    """One safetensors file's header, validated and added to ``totals``; one clean error
    otherwise. Reads the 8 + N header bytes only, from a regular file only."""
    import os

    from transformer_calc.files import LFS_POINTER, open_regular

    where = str(path)
    totals = totals if totals is not None else _Totals()
    with open_regular(path, where, "a .safetensors file") as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(8)
        if size <= 1024 and (raw + f.read(32)).startswith(LFS_POINTER):
            raise PresetError(f"{where}: a git-lfs pointer, not the file itself (git lfs pull "
                              "fetches it)")
        f.seek(8)
        if len(raw) < 8:
            raise PresetError(f"{where}: not a safetensors file (shorter than its 8-byte "
                              "header length)")
        n = int.from_bytes(raw, "little")
        if not 2 <= n <= min(size - 8, HEADER_CAP):
            raise PresetError(f"{where}: not a safetensors file (header length {n:,} for a "
                              f"file of {size:,} bytes; at most {HEADER_CAP:,})")
        data = f.read(n)
    if len(data) < n:
        raise PresetError(f"{where}: not a safetensors file (it ends inside its header)")
    try:  # (decoded in the call: only the scanner holds the text, and lets it go)
        scan = _JSONScanner(data.decode("utf-8"), where, "a safetensors file")
    except UnicodeDecodeError as e:
        raise PresetError(f"{where}: not a safetensors file (its header is not UTF-8, byte "
                          f"{e.start:,})") from None
    del data
    add_header(scan, where, totals, size - 8 - n)
    return totals


def add_header(scan: _JSONScanner, where: str, totals: _Totals,
               data_size: int | None) -> None:
    """A header, validated entry by entry and added to ``totals``. As safetensors reads a
    header (serde into a map), every entry must be of the right types, and of a name given
    twice the last one counts: then a second pass keeps the last of each name only."""
    from hashlib import blake2b

    def digest(name: str) -> int:  # (8 bytes per name: the names themselves are not kept)
        return int.from_bytes(blake2b(name.encode("utf-8", "surrogatepass"),
                                      digest_size=8).digest(), "little")

    file = _Totals()
    begins, ends, names = array("Q"), array("Q"), array("Q")
    first_error: PresetError | None = None
    for name in scan.entries():
        value = scan.value()
        if name == "__metadata__":
            _metadata(where, value)
            continue
        dtype, shape, begin, end = _typed(where, name, value)
        names.append(digest(name))
        begins.append(begin)
        ends.append(end)
        try:
            file.add(name, dtype, _backed(where, name, dtype, shape, begin, end), end - begin)
        except PresetError as e:  # (unless a later entry of the same name replaces it)
            first_error = first_error or e
    scan.end()
    order = sorted(names)
    twice = any(a == b for a, b in zip(order, order[1:], strict=False))
    del order
    if twice:
        file, begins, ends = _last_of_each_name(scan, where, names, digest)
    elif first_error is not None:
        raise first_error
    scan.text = ""  # the header's text is no longer needed
    check_ranges(where, begins, ends, data_size)
    totals.merge(file)


def _metadata(where: str, value: Any) -> None:
    if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
        raise PresetError(f"{where}: __metadata__: expected a mapping of text to text")


def _last_of_each_name(scan: _JSONScanner, where: str, names: array,
                       digest: Any) -> tuple[_Totals, array, array]:
    """The header read again, each name's last entry only (the map serde builds)."""
    n = len(names)
    last = bytearray(n)  # 1 where the entry is its name's last
    pairs = sorted(d * n + i for i, d in enumerate(names))
    for k, key in enumerate(pairs):
        if k + 1 == len(pairs) or pairs[k + 1] // n != key // n:
            last[key % n] = 1
    del pairs
    file, begins, ends = _Totals(), array("Q"), array("Q")
    scan.pos, i = 0, 0
    for name in scan.entries():
        value = scan.value()
        if name == "__metadata__":
            continue
        if last[i]:
            dtype, shape, begin, end = _typed(where, name, value)
            file.add(name, dtype, _backed(where, name, dtype, shape, begin, end), end - begin)
            begins.append(begin)
            ends.append(end)
        i += 1
    return file, begins, ends


def _index_files(index: Path) -> list[str] | None:
    """The distinct files model.safetensors.index.json's weight_map names, read one entry
    at a time (the tensor names are not kept); None when it has no weight_map."""
    from transformer_calc.files import read_bounded

    where = str(index)
    raw = read_bounded(index, where, "a model.safetensors.index.json", INDEX_CAP)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PresetError(f"{where}: not UTF-8 text (byte {e.start:,})") from None
    del raw
    scan = _JSONScanner(text, where, "a safetensors index")
    files: set[str] = set()
    found = False
    for key in scan.entries():
        if key != "weight_map":
            scan.value()
            continue
        found = True
        for _ in scan.entries():
            name = scan.value()
            if not isinstance(name, str):
                raise PresetError(f"{where}: weight_map: expected a file name for each "
                                  "tensor")
            files.add(name)
            if len(files) > MAX_FILES:
                raise PresetError(f"{where}: weight_map: more than {MAX_FILES:,} files (tcalc "
                                  "reads at most that many shards)")
    scan.end()
    return sorted(files) if found else None


def files_of(folder: Path) -> list[Path]:
    """The safetensors files of a model folder: the index's shards, or every *.safetensors."""
    import os

    index = folder / "model.safetensors.index.json"
    names = _index_files(index) if os.path.lexists(index) else None
    if names is not None:  # (an index without a weight_map: the folder's files)
        for n in names:
            if "/" in n or "\\" in n or n in (".", "..") or not n.endswith(".safetensors"):
                raise PresetError(f"{index}: weight_map: expected .safetensors file names in "
                                  f"the folder, got {n[:100]!r}")
        missing = [n for n in names if not (folder / n).exists()]
        if missing:
            more = f" (and {len(missing) - 1:,} more)" if len(missing) > 1 else ""
            raise PresetError(f"{index}: weight_map names {missing[0]!r}, which the folder "
                              f"does not have{more}")
        return [folder / n for n in names]
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(".safetensors"):
                found.append(folder / entry.name)
                if len(found) > MAX_FILES:
                    raise PresetError(f"{folder}: more than {MAX_FILES:,} .safetensors files "
                                      "(tcalc reads at most that many shards)")
    return sorted(found)


def read_checkpoint(folder: Path) -> Checkpoint | None:
    """The checkpoint in a model folder, or None when it has no safetensors files."""
    files = files_of(folder)
    if not files:
        return None
    totals = _Totals()
    for path in files:
        read_header(path, totals)
    return totals.checkpoint(tuple(p.name for p in files))


def pattern(name: str) -> str:
    """A tensor name with its layer numbers as N: model.layers.3.mlp -> model.layers.N.mlp."""
    return re.sub(r"\.\d+(?=\.|$)", ".N", name)


def compare(ckpt: Checkpoint, architecture: int) -> dict[str, Any]:
    """Equal, or the difference and the tensor-name patterns that hold it: one or two
    patterns whose elements make the difference exactly (a duplicated head, a buffer saved
    with the weights) are named, and the largest patterns listed."""
    diff = ckpt.params - architecture
    by_pattern: dict[str, int] = {}
    for name, n in ckpt.tensors.items():
        p = pattern(name)
        by_pattern[p] = by_pattern.get(p, 0) + n
    out: dict[str, Any] = {"architecture_params": architecture, "difference": diff,
                           "matches": diff == 0}
    if diff:
        # the patterns (one, or two together) whose elements make the difference exactly
        items = sorted(by_pattern.items())[:500]
        exact = [[p] for p, n in items if n == abs(diff)]
        if not exact:
            exact = [[p, q] for i, (p, n) in enumerate(items) for q, m in items[i + 1:]
                     if n + m == abs(diff)]
        out["explained_by"] = exact[0] if exact else []
        out["largest_patterns"] = [{"pattern": p, "params": n} for p, n in sorted(
            by_pattern.items(), key=lambda kv: -kv[1])[:8]]
    return out
