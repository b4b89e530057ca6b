"""GGUF files (llama.cpp), header only (issue 17): the architecture, every tensor's type,
parameters and bytes, and a spec for the Llama-family architectures, so serving memory works
for a .gguf file. Pure Python; the weights are never read.

Layout (ggml/docs/gguf.md, versions 2 and 3, little-endian): b"GGUF", version u32, tensor
count u64, metadata count u64; each metadata entry a string key, a u32 value type and the
value (strings are a u64 length and UTF-8 bytes; arrays a u32 element type, a u64 count and
the elements); then per tensor its name, u32 dimensions, u64 sizes (innermost first), u32
ggml type and u64 data offset.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from transformer_calc.errors import PresetError

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
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
HEADER_CAP = 512 << 20  # bytes of header read at most (a 256K-token vocabulary is ~10 MB)
MAX_COUNT = 10_000_000


class GGUF(NamedTuple):
    version: int
    metadata: dict[str, Any]  # arrays longer than 64 are kept as their length only
    tensors: dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, ggml type)
    params: int
    bytes: int
    types: dict[str, int]  # ggml type -> elements


class _Reader:
    def __init__(self, f: BinaryIO, where: str) -> None:
        self.f, self.where, self.read_bytes = f, where, 0

    def take(self, n: int) -> bytes:
        self.read_bytes += n
        if n < 0 or self.read_bytes > HEADER_CAP:
            raise PresetError(f"{self.where}: not a GGUF file (its header runs past "
                              f"{HEADER_CAP >> 20} MiB)")
        data = self.f.read(n)
        if len(data) < n:
            raise PresetError(f"{self.where}: not a GGUF file (its header ends early)")
        return data

    def scalar(self, kind: int) -> Any:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.scalar(10)
        if n > HEADER_CAP:
            raise PresetError(f"{self.where}: not a GGUF file (a string of {n:,} bytes)")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise PresetError(f"{self.where}: not a GGUF file (a string is not UTF-8)") \
                from None

    def value(self, kind: int, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.scalar(kind)
        if kind == 8:
            return self.string()
        if kind == 9 and depth < 2:
            inner, n = self.scalar(4), self.scalar(10)
            if n > MAX_COUNT:
                raise PresetError(f"{self.where}: not a GGUF file (an array of {n:,})")
            items = [self.value(inner, depth + 1) for _ in range(n)]
            return items if n <= 64 else n
        raise PresetError(f"{self.where}: not a GGUF file (metadata value type {kind})")


def read_gguf(path: Path) -> GGUF:
    where = str(path)
    try:
        with path.open("rb") as f:
            r = _Reader(f, where)
            if r.take(4) != b"GGUF":
                raise PresetError(f"{where}: not a GGUF file (no GGUF magic)")
            version = r.scalar(4)
            if version not in (2, 3):
                raise PresetError(f"{where}: GGUF version {version}: expected 2 or 3")
            n_tensors, n_kv = r.scalar(10), r.scalar(10)
            if n_tensors > MAX_COUNT or n_kv > MAX_COUNT:
                raise PresetError(f"{where}: not a GGUF file ({n_tensors:,} tensors, "
                                  f"{n_kv:,} metadata entries)")
            meta = {}
            for _ in range(n_kv):
                key = r.string()
                meta[key] = r.value(r.scalar(4))
            tensors: dict[str, tuple[tuple[int, ...], str]] = {}
            params = nbytes = 0
            types: dict[str, int] = {}
            for _ in range(n_tensors):
                name = r.string()
                dims = r.scalar(4)
                if dims > 8:
                    raise PresetError(f"{where}: tensor {name!r}: {dims} dimensions")
                shape = tuple(r.scalar(10) for _ in range(dims))
                kind = r.scalar(4)
                r.scalar(10)  # offset
                if kind not in GGML:
                    raise PresetError(f"{where}: tensor {name!r}: unknown ggml type {kind}")
                gname, block, size = GGML[kind]
                n = 1
                for d in shape:
                    n *= d
                if n > 2**48 or n % block:
                    raise PresetError(f"{where}: tensor {name!r}: {n:,} elements for a "
                                      f"{gname} block of {block}")
                tensors[name] = (shape, gname)
                params += n
                nbytes += n // block * size
                types[gname] = types.get(gname, 0) + n
    except OSError as e:
        raise PresetError(f"{where}: cannot read: {e.strerror or e}") from None
    return GGUF(version, meta, tensors, params, nbytes, types)


# llama.cpp architectures whose GGUF metadata maps onto a transformers config tcalc reads
ARCHS = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}


def hf_config(g: GGUF, where: str) -> dict[str, Any]:
    """The transformers config.json of a Llama-family GGUF (its general.architecture's
    keys: embedding_length, block_count, feed_forward_length, attention.head_count,
    attention.head_count_kv, context_length, rope.freq_base), so every command reads it."""
    arch = g.metadata.get("general.architecture")
    if arch not in ARCHS:
        raise PresetError(f"{where}: general.architecture: expected one of "
                          f"{', '.join(ARCHS)} (the Llama-family GGUFs tcalc maps), got "
                          f"{arch!r}")

    def key(name: str, default: Any = None) -> Any:
        value = g.metadata.get(f"{arch}.{name}", default)
        if value is None:
            raise PresetError(f"{where}: {arch}.{name}: expected it in the GGUF metadata")
        return value

    embd = g.tensors.get("token_embd.weight")
    if embd is None:
        raise PresetError(f"{where}: token_embd.weight: expected the token embedding tensor")
    heads = key("attention.head_count")
    cfg: dict[str, Any] = {
        "model_type": ARCHS[arch], "hidden_size": key("embedding_length"),
        "num_hidden_layers": key("block_count"),
        "intermediate_size": key("feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": key("attention.head_count_kv", heads),
        "max_position_embeddings": key("context_length"),
        "vocab_size": embd[0][1], "tie_word_embeddings": "output.weight" not in g.tensors}
    head_dim = g.metadata.get(f"{arch}.attention.key_length")
    if head_dim:
        cfg["head_dim"] = head_dim
    return cfg


def recipe(g: GGUF) -> str:
    """tcalc's --quant for the file's general.file_type ("" when not one tcalc models)."""
    ftype = g.metadata.get("general.file_type")
    return f"gguf-{FILE_TYPES[ftype]}" if ftype in FILE_TYPES else ""
