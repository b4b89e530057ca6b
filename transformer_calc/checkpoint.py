"""What a checkpoint really holds (issue 17): the safetensors headers of a model folder, never
the weights.

A safetensors file starts with an 8-byte little-endian header length and a JSON header:
{tensor name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
(huggingface/safetensors, docs/source/index.mdx "Format"). A sharded checkpoint lists its files
in model.safetensors.index.json ("weight_map": tensor -> file). Pure Python: only the headers
are read, each capped, so a hostile file costs at most the cap.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, NamedTuple

from transformer_calc.errors import PresetError

HEADER_CAP = 100 << 20  # bytes of JSON header read at most (real ones: under 10 MB)
MAX_FILES = 10_000
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
               "F8_E8M0": 1, "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75}


class Checkpoint(NamedTuple):
    files: tuple[str, ...]
    params: int  # elements of every tensor stored (quantised formats: as stored)
    bytes: int  # the tensors' data (headers not included)
    dtypes: dict[str, int]  # dtype -> elements
    tensors: dict[str, int]  # name -> elements


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file, validated; one clean error otherwise."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise PresetError(f"{path}: not a safetensors file (shorter than its 8-byte "
                                  "header length)")
            n = int.from_bytes(raw, "little")
            if not 2 <= n <= min(size - 8, HEADER_CAP):
                raise PresetError(f"{path}: not a safetensors file (header length {n:,} for a "
                                  f"file of {size:,} bytes)")
            text = f.read(n)
    except OSError as e:
        raise PresetError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise PresetError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise PresetError(f"{path}: not a safetensors file (its header is not a JSON object)")
    for name, t in header.items():
        if name == "__metadata__":
            continue
        ok = (isinstance(t, dict) and t.get("dtype") in DTYPE_BYTES
              and isinstance(t.get("shape"), list)
              and all(type(d) is int and 0 <= d < 2**48 for d in t["shape"])
              and isinstance(t.get("data_offsets"), list) and len(t["data_offsets"]) == 2
              and all(type(o) is int and 0 <= o <= size for o in t["data_offsets"]))
        if not ok:
            raise PresetError(f"{path}: tensor {name!r}: expected dtype, shape and "
                              "data_offsets as safetensors writes them")
    return header


def files_of(folder: Path) -> list[Path]:
    """The safetensors files of a model folder: the index's shards, or every *.safetensors."""
    index = folder / "model.safetensors.index.json"
    data: Any = None
    if index.is_file():
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise PresetError(f"{index}: not JSON") from None
    if isinstance(data, dict) and "weight_map" in data:  # else: no index, the files themselves
        try:
            names = sorted(set(data["weight_map"].values()))
        except (TypeError, AttributeError):
            raise PresetError(f"{index}: expected a weight_map of tensor names to files") \
                from None
        if len(names) > MAX_FILES or not all(isinstance(n, str) and "/" not in n
                                             and n.endswith(".safetensors") for n in names):
            raise PresetError(f"{index}: weight_map: expected .safetensors file names in the "
                              "folder")
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise PresetError(f"{index}: weight_map names {missing[0]}, which the folder does "
                              "not have")
        return [folder / n for n in names]
    return sorted(folder.glob("*.safetensors"))[:MAX_FILES]


def read_checkpoint(folder: Path) -> Checkpoint | None:
    """The checkpoint in a model folder, or None when it has no safetensors files."""
    files = files_of(folder)
    if not files:
        return None
    dtypes: dict[str, int] = {}
    tensors: dict[str, int] = {}
    nbytes = 0
    for path in files:
        for name, t in read_header(path).items():
            if name == "__metadata__":
                continue
            n = math.prod(t["shape"])
            tensors[name] = n
            dtypes[t["dtype"]] = dtypes.get(t["dtype"], 0) + n
            nbytes += t["data_offsets"][1] - t["data_offsets"][0]
    return Checkpoint(tuple(p.name for p in files), sum(tensors.values()), nbytes, dtypes,
                      tensors)


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
