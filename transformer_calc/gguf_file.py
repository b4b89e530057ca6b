"""GGUF files (llama.cpp), header only: the architecture, every tensor's type, parameters and
bytes, and a spec for the Llama-family architectures, so serving memory works for a .gguf
file. Pure Python; the weights are never read.

Layout (ggml/docs/gguf.md, versions 2 and 3, little-endian): b"GGUF", version u32, tensor
count u64, metadata count u64; each metadata entry a string key, a u32 value type and the
value (strings are a u64 length and UTF-8 bytes; arrays a u32 element type, a u64 count and
the elements); then per tensor its name, u32 dimensions, u64 sizes (innermost first), u32
ggml type and u64 data offset.

Validated as llama.cpp's reader validates it (ggml/src/gguf.cpp, gguf_init_from_reader): no
empty or repeated key, no array of arrays, general.alignment a power of two; tensor names
under 64 bytes (GGML_MAX_NAME) and unique, at most 4 dimensions (GGML_MAX_DIMS), rows a whole
number of blocks, each tensor's data at the offset the ones before it end at (aligned), and
the data within the file. Every declared length is checked against the bytes left in the
file before anything is read, and what is kept is bounded by the structure: values longer
than KEEP bytes and arrays longer than 64 are skipped over (seek), never read into memory.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from transformer_calc.errors import PresetError, printable

# ggml type id -> (name, elements per block, bytes per block): ggml's type traits, as the
# gguf package lists them (gguf/constants.py GGML_QUANT_SIZES; tests/test_gguf.py compares)
GGML = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
        6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 40),
        10: ("q2_k", 256, 84), 11: ("q3_k", 256, 110), 12: ("q4_k", 256, 144),
        13: ("q5_k", 256, 176), 14: ("q6_k", 256, 210), 15: ("q8_k", 256, 292),
        16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98),
        19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110),
        22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1), 25: ("i16", 1, 2),
        26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8), 29: ("iq1_m", 256, 56),
        30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54), 35: ("tq2_0", 256, 66),
        39: ("mxfp4", 32, 17)}
# general.file_type -> tcalc's gguf recipe (llama.cpp's LLAMA_FTYPE_MOSTLY_*)
FILE_TYPES = {1: "f16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1", 14: "q4_k_s",
              15: "q4_k_m", 16: "q5_k_s", 17: "q5_k_m", 18: "q6_k", 32: "bf16"}
# the file types tcalc has no recipe for, by their llama.h names (include/llama.h llama_ftype)
UNMODELLED_FILE_TYPES = {0: "ALL_F32", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L",
                         19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
                         23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
                         28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 36: "TQ1_0",
                         37: "TQ2_0", 38: "MXFP4_MOE"}
# metadata value type -> struct format (gguf.md gguf_metadata_value_type); 8 string, 9 array
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_UINTS = (0, 2, 4, 10)  # u8, u16, u32, u64
HEADER_CAP = 256 << 20  # bytes of header read at most (a 256K-token vocabulary is ~10 MB)
KEEP = 64 << 10  # a metadata string longer than this is skipped, not kept
KEEP_TOTAL = 16 << 20  # bytes of keys, names and strings kept in all (real files: ~100 KB)
KEEP_ARRAY = 64  # arrays longer than this are kept as their length only
MAX_KEY = 65_535  # bytes of a key (gguf.md: "at most 2^16-1 bytes")
MAX_NAME = 64  # GGML_MAX_NAME: a tensor name is shorter
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_KV = 65_536  # metadata entries read at most (real files: tens)
MAX_TENSORS = 65_536  # tensors read at most (real files: a few thousand)
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
_I64 = 2**63


class Skipped(NamedTuple):
    """A metadata value too long to keep: its type and length (bytes, or array elements)."""

    kind: str
    length: int


class GGUF(NamedTuple):
    version: int
    metadata: dict[str, Any]  # arrays longer than 64, strings over 64 KiB: Skipped
    tensors: dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, ggml type)
    params: int
    bytes: int
    types: dict[str, int]  # ggml type -> elements
    where: str = ""  # the file, as messages name it


class _Reader:
    """Bounded reads from the header: every length checked against what the file has left
    and against HEADER_CAP before it is read or skipped."""

    def __init__(self, f: BinaryIO, where: str, size: int) -> None:
        self.f, self.where, self.size, self.pos = f, where, size, 0
        self.kept = 0  # bytes of text kept so far

    def bad(self, why: str) -> PresetError:
        return PresetError(f"{self.where}: not a GGUF file ({why})")

    def _room(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            if what == "the header":
                raise self.bad(f"its header ends early, at byte {self.size:,}")
            raise self.bad(f"{what} of {n:,} bytes at byte {self.pos:,} runs past the end of "
                           f"the file ({self.size:,} bytes)")
        if self.pos + n > HEADER_CAP:
            raise self.bad(f"its header runs past {HEADER_CAP >> 20} MiB")

    def take(self, n: int, what: str = "the header") -> bytes:
        self._room(n, what)
        data = self.f.read(n)
        if len(data) < n:  # (the file shrank while read)
            raise self.bad("its header ends early")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self._room(n, what)
        self.f.seek(n, os.SEEK_CUR)
        self.pos += n

    def scalar(self, kind: int) -> Any:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self, limit: int, what: str) -> str | None:
        """A string of at most ``limit`` bytes; a longer one is skipped (None)."""
        n = self.scalar(10)
        if n > limit or self.kept + n > KEEP_TOTAL:
            self.skip(n, what)
            return None
        self.kept += n
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise self.bad(f"{what} is not UTF-8") from None

    def name(self, limit: int, what: str) -> str:
        n = self.scalar(10)
        if n > limit:
            raise self.bad(f"{what} of {n:,} bytes (at most {limit:,})")
        self.kept += n
        if self.kept > KEEP_TOTAL:
            raise self.bad(f"over {KEEP_TOTAL >> 20} MiB of keys and names")
        text = self.take(n, what)
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError:
            raise self.bad(f"{what} is not UTF-8") from None

    def value(self, kind: int, key: str) -> Any:
        if kind in _SCALARS:
            return self.scalar(kind)
        if kind == _STRING:
            n_before = self.pos
            text = self.string(KEEP, f"the value of {key}")
            return text if text is not None else Skipped("string", self.pos - n_before - 8)
        if kind == _ARRAY:
            inner, n = self.scalar(4), self.scalar(10)
            if inner not in _SCALARS and inner != _STRING:
                raise self.bad(f"{key}: an array of type {inner}")
            size = struct.calcsize(_SCALARS[inner]) if inner in _SCALARS else 8
            if n * size > self.size - self.pos:
                raise self.bad(f"{key}: an array of {n:,} runs past the end of the file")
            if n > KEEP_ARRAY:
                self._skip_array(inner, n, key)
                return Skipped("array", n)
            return [self.value(inner, key) for _ in range(n)]
        raise self.bad(f"{key}: metadata value type {kind}")

    def _skip_array(self, inner: int, n: int, key: str) -> None:
        if inner in _SCALARS:
            self.skip(n * struct.calcsize(_SCALARS[inner]), f"{key}'s array")
            return
        for _ in range(n):  # strings: each length read, its bytes skipped
            self.skip(self.scalar(10), f"a string in {key}")


def read_gguf(path: Path) -> GGUF:
    from transformer_calc.files import open_regular

    where = str(path)
    with open_regular(path, where, "a .gguf file") as f:
        r = _Reader(f, where, os.fstat(f.fileno()).st_size)
        magic = r.take(4, "the magic")
        if magic != b"GGUF":
            from transformer_calc.files import LFS_POINTER

            if r.size <= 1024 and (magic + f.read(64)).startswith(LFS_POINTER):
                raise PresetError(f"{where}: a git-lfs pointer, not the file itself (git lfs "
                                  "pull fetches it)")
            raise PresetError(f"{where}: not a GGUF file (no GGUF magic)")
        version = r.scalar(4)
        if version not in (2, 3):
            raise PresetError(f"{where}: GGUF version {version}: expected 2 or 3")
        n_tensors, n_kv = r.scalar(10), r.scalar(10)
        if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
            raise PresetError(f"{where}: not a GGUF file ({n_tensors:,} tensors, {n_kv:,} "
                              f"metadata entries; tcalc reads at most {MAX_TENSORS:,} of each)")
        meta = _metadata(r, n_kv)
        alignment = meta.get("general.alignment", DEFAULT_ALIGNMENT)
        if "general.alignment" in meta and not (
                type(alignment) is int and alignment > 0 and alignment & (alignment - 1) == 0):
            raise PresetError(f"{where}: general.alignment: expected a power of two, got "
                              f"{alignment!r}")
        g = _tensors(r, n_tensors, alignment, version, meta)
    return g


def _metadata(r: _Reader, n_kv: int) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.name(MAX_KEY, "a metadata key")
        shown = printable(key, one_line=True)[:100]
        if not key or key in meta:
            raise r.bad(f"the metadata key {shown!r} is empty or given twice")
        kind = r.scalar(4)
        value = r.value(kind, shown)
        if key == "general.alignment" and kind != 4:
            raise PresetError(f"{r.where}: general.alignment: expected a u32, got type {kind}")
        meta[key] = value
    return meta


def _tensors(r: _Reader, n_tensors: int, alignment: int, version: int,
             meta: dict[str, Any]) -> GGUF:
    tensors: dict[str, tuple[tuple[int, ...], str]] = {}
    params = nbytes = 0
    types: dict[str, int] = {}
    for _ in range(n_tensors):
        name = r.name(MAX_NAME - 1, "a tensor name")
        shown = printable(name, one_line=True)
        if name in tensors:
            raise r.bad(f"tensor {shown!r} given twice")
        dims = r.scalar(4)
        if dims > MAX_DIMS:
            raise PresetError(f"{r.where}: tensor {shown!r}: {dims} dimensions (at most "
                              f"{MAX_DIMS})")
        shape = tuple(r.scalar(10) for _ in range(dims))
        kind, offset = r.scalar(4), r.scalar(10)
        if kind not in GGML:
            raise PresetError(f"{r.where}: tensor {shown!r}: unknown ggml type {kind}")
        gname, block, size = GGML[kind]
        n = 1
        for d in shape:
            n *= d
        if any(d >= _I64 for d in shape) or n >= _I64:
            raise PresetError(f"{r.where}: tensor {shown!r}: shape {list(shape)} is over "
                              "2^63 elements")
        if shape and shape[0] % block:
            raise PresetError(f"{r.where}: tensor {shown!r}: rows of {shape[0]:,} elements "
                              f"are not whole {gname} blocks of {block}")
        if offset != nbytes:  # each tensor's data where the ones before it end, aligned
            raise PresetError(f"{r.where}: tensor {shown!r}: data offset {offset:,}, "
                              f"expected {nbytes:,}")
        tensors[name] = (shape, gname)
        params += n
        nbytes += -(-(n // block * size) // alignment) * alignment
        types[gname] = types.get(gname, 0) + n
    data_start = -(-r.pos // alignment) * alignment if n_tensors else r.pos
    if data_start + nbytes > r.size:
        raise PresetError(f"{r.where}: the tensors' data ({nbytes:,} bytes from byte "
                          f"{data_start:,}) runs past the end of the file ({r.size:,} bytes)")
    stored = sum(n // GGML_BY_NAME[t][0] * GGML_BY_NAME[t][1] for t, n in types.items())
    return GGUF(version, meta, tensors, params, stored, types, r.where)


GGML_BY_NAME = {name: (block, size) for name, block, size in GGML.values()}

# llama.cpp architectures whose GGUF metadata maps onto a transformers config tcalc reads
ARCHS = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}


def _count(g: GGUF, key: str, where: str, default: Any = None) -> Any:
    """A metadata value that is a count: an unsigned integer, or PresetError naming the key."""
    value = g.metadata.get(key, default)
    if value is None:
        raise PresetError(f"{where}: {key}: expected it in the GGUF metadata")
    if type(value) is not int or value <= 0:
        shown = f"an array of {value.length:,}" if isinstance(value, Skipped) else (
            "an array (per-layer values are not read)" if isinstance(value, list)
            else repr(value)[:60])
        raise PresetError(f"{where}: {key}: expected a positive integer, got {shown}")
    return value


def hf_config(g: GGUF, where: str) -> dict[str, Any]:
    """The transformers config.json of a Llama-family GGUF (its general.architecture's
    keys: embedding_length, block_count, feed_forward_length, attention.head_count,
    attention.head_count_kv, context_length, rope.freq_base), so every command reads it."""
    arch = g.metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in ARCHS:
        shown = repr(arch)[:60] if isinstance(arch, str) or arch is None else (
            f"a {type(arch).__name__}" if not isinstance(arch, Skipped) else "a long value")
        raise PresetError(f"{where}: general.architecture: expected one of "
                          f"{', '.join(ARCHS)} (the Llama-family GGUFs tcalc maps), got "
                          f"{printable(shown, one_line=True)}")
    embd = g.tensors.get("token_embd.weight")
    if embd is None:
        raise PresetError(f"{where}: token_embd.weight: expected the token embedding tensor")
    width = _count(g, f"{arch}.embedding_length", where)
    if len(embd[0]) != 2 or embd[0][0] != width:
        raise PresetError(f"{where}: token_embd.weight: expected the shape [{width:,}, "
                          f"vocabulary] ({arch}.embedding_length first), got {list(embd[0])}")
    heads = _count(g, f"{arch}.attention.head_count", where)
    cfg: dict[str, Any] = {
        "model_type": ARCHS[arch], "hidden_size": width,
        "num_hidden_layers": _count(g, f"{arch}.block_count", where),
        "intermediate_size": _count(g, f"{arch}.feed_forward_length", where),
        "num_attention_heads": heads,
        "num_key_value_heads": _count(g, f"{arch}.attention.head_count_kv", where, heads),
        "max_position_embeddings": _count(g, f"{arch}.context_length", where),
        "vocab_size": embd[0][1], "tie_word_embeddings": "output.weight" not in g.tensors}
    if g.metadata.get(f"{arch}.attention.key_length") is not None:
        cfg["head_dim"] = _count(g, f"{arch}.attention.key_length", where)
    return cfg


def recipe(g: GGUF) -> str:
    """tcalc's --quant for the file's general.file_type; PresetError naming the key when the
    file has none or one tcalc has no recipe for (never a silent bf16)."""
    where = g.where or "the GGUF file"
    ftype = g.metadata.get("general.file_type")
    if type(ftype) is int and ftype in FILE_TYPES:
        return f"gguf-{FILE_TYPES[ftype]}"
    known = ", ".join(f"gguf-{r}" for r in FILE_TYPES.values())
    if ftype is None:
        found = "the file does not say"
    elif type(ftype) is int:
        found = f"got {ftype} ({UNMODELLED_FILE_TYPES.get(ftype, 'unknown to tcalc')})"
    else:
        found = "got a value that is not an integer"
    raise PresetError(f"{where}: general.file_type: expected one of the llama.cpp recipes "
                      f"tcalc models ({known}), {found}; give --quant to serve it in one")
