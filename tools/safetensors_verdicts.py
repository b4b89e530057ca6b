"""Record what the safetensors library itself says of valid and corrupted headers (developer
tool, needs safetensors and torch): tests/test_fuzz_safetensors.py holds tcalc's validator to
the same verdict on every case, and to the same element count where both accept.

Each case is a header (as bytes: a valid one safetensors' own writer would produce, then one
change from the grammar: a size, an offset, the data's length, a value's type, a key dropped,
a name given twice, bytes replaced or cut) and the bytes of data after it. The verdict is
safe_open's (it parses and validates the header: safetensors/src/tensor.rs) and, where it
accepts, the elements of every tensor by get_slice's shape.

    python tools/safetensors_verdicts.py tests/data/safetensors_verdicts.json
"""

from __future__ import annotations

import base64
import json
import math
import random
import struct
import sys
import tempfile
from pathlib import Path

# (dtype, bits): the safetensors 0.8 dtypes with whole-byte elements, and F4
DTYPES = [("BOOL", 8), ("U8", 8), ("I8", 8), ("F8_E4M3", 8), ("F8_E5M2", 8), ("I16", 16),
          ("U16", 16), ("F16", 16), ("BF16", 16), ("I32", 32), ("U32", 32), ("F32", 32),
          ("F64", 64), ("I64", 64), ("U64", 64), ("F4", 4)]
CASES = 400


def valid(rng: random.Random) -> tuple[dict, int]:
    header: dict = {}
    if rng.random() < 0.3:
        header["__metadata__"] = {"format": "pt"}
    at = 0
    for i in range(rng.randint(1, 5)):
        dtype, bits = rng.choice(DTYPES)
        shape = [rng.randint(0, 5) for _ in range(rng.randint(0, 3))]
        if bits == 4 and math.prod(shape) % 2:
            shape = [*shape, 2]
        size = math.prod(shape) * bits // 8
        header[f"model.layers.{i}.w"] = {"dtype": dtype, "shape": shape,
                                         "data_offsets": [at, at + size]}
        at += size
    return header, at


def corrupt(rng: random.Random, header: dict, size: int) -> tuple[bytes, int]:
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    kind = rng.choice(["none", "dim", "offset", "data", "value", "drop", "dup", "bytes", "cut",
                       "swap"])
    if kind == "dim" and header[name]["shape"]:
        header[name]["shape"][rng.randrange(len(header[name]["shape"]))] = rng.choice(
            [0, 1, 3, 7, 2**20, 2**63])
    elif kind == "offset":
        header[name]["data_offsets"][rng.randrange(2)] += rng.choice([-2, -1, 1, 2, 8])
    elif kind == "data":
        size = max(0, size + rng.choice([-2, -1, 1, 2, 8]))
    elif kind == "value":
        header[name][rng.choice(["dtype", "shape", "data_offsets"])] = rng.choice(
            [None, True, 1.5, "x", [1, -1], {"a": 1}, "F99", [0]])
    elif kind == "drop":
        del header[name][rng.choice(["dtype", "shape", "data_offsets"])]
    elif kind == "swap" and len(names) > 1:
        a, b = rng.sample(names, 2)
        header[a]["data_offsets"], header[b]["data_offsets"] = (header[b]["data_offsets"],
                                                                header[a]["data_offsets"])
    body = json.dumps(header).encode()
    if kind == "dup":
        first = json.dumps({name: header[name]})[1:-1].encode()
        body = body[:-1] + b", " + first + b"}"
    elif kind == "bytes":
        at = rng.randrange(len(body))
        body = body[:at] + bytes([rng.randrange(256)]) + body[at + 1:]
    elif kind == "cut":
        body = body[:rng.randrange(1, len(body))]
    return body, size


def verdict(body: bytes, size: int) -> dict:
    from safetensors import safe_open

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.safetensors"
        path.write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * size)
        try:
            with safe_open(path, framework="pt") as f:
                params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 -- safe_open is no dict
        except Exception as e:  # noqa: BLE001 -- the library raises its own and OSError
            return {"ok": False, "error": str(e)[:100]}
    return {"ok": True, "params": params}


def main() -> None:
    rng = random.Random(20260101)  # noqa: S311 -- a fixed seed: the same cases each run
    cases = []
    for _ in range(CASES):
        header, size = valid(rng)
        body, size = corrupt(rng, header, size)
        cases.append({"header": base64.b64encode(body).decode(), "data": size,
                      **verdict(body, size)})
    import safetensors

    head = json.dumps({"tool": "tools/safetensors_verdicts.py",
                       "safetensors": safetensors.__version__})[:-1]
    body = ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases)
    Path(sys.argv[1]).write_text(f'{head}, "cases": [\n{body}\n]}}\n')
    print(sum(c["ok"] for c in cases), "accepted of", len(cases))


if __name__ == "__main__":
    main()
