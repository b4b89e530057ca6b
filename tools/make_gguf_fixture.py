"""Write tests/data/gguf/tiny-llama-q4_k_m.gguf with the gguf package's writer (developer tool,
needs gguf and numpy): the header of a Llama-architecture GGUF whose tensors carry the types
llama.cpp's Q4_K_M recipe gives a 256-wide, 4-layer model (Q6_K for the output and for the
attn_v / ffn_down layers use_more_bits picks, Q4_K elsewhere, F32 norms), with zero-filled
data of each type's byte size. Also prints gguf's GGML_QUANT_SIZES for the test.

    python tools/make_gguf_fixture.py tests/data/gguf
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    import gguf
    from gguf.constants import GGML_QUANT_SIZES
    from gguf.constants import GGMLQuantizationType as T

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    E, F, L, V, H, KV = 256, 512, 4, 1024, 4, 2
    dh = E // H
    w = gguf.GGUFWriter(out / "tiny-llama-q4_k_m.gguf", "llama")
    w.add_name("tiny-llama")
    w.add_context_length(2048)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M

    def more_bits(i: int, n: int) -> bool:
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    def tensor(name: str, shape: tuple[int, ...], t: T) -> None:
        if t == T.F32:
            w.add_tensor(name, np.zeros(shape, dtype=np.float32))
            return
        block, size = GGML_QUANT_SIZES[t]
        rows, cols = shape
        # quantised data as bytes, (rows, bytes per row): the writer infers the shape
        w.add_tensor(name, np.zeros((rows, cols // block * size), dtype=np.uint8), raw_dtype=t)

    tensor("token_embd.weight", (V, E), T.Q4_K)
    for i in range(L):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", (E,), T.F32)
        tensor(p + "attn_q.weight", (E, E), T.Q4_K)
        tensor(p + "attn_k.weight", (KV * dh, E), T.Q4_K)
        tensor(p + "attn_v.weight", (KV * dh, E), T.Q6_K if more_bits(i, L) else T.Q4_K)
        tensor(p + "attn_output.weight", (E, E), T.Q4_K)
        tensor(p + "ffn_norm.weight", (E,), T.F32)
        tensor(p + "ffn_gate.weight", (F, E), T.Q4_K)
        tensor(p + "ffn_up.weight", (F, E), T.Q4_K)
        tensor(p + "ffn_down.weight", (E, F), T.Q6_K if more_bits(i, L) else T.Q4_K)
    tensor("output_norm.weight", (E,), T.F32)
    tensor("output.weight", (V, E), T.Q6_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    sizes = {t.name.lower(): [int(t), *GGML_QUANT_SIZES[t]] for t in T if t in GGML_QUANT_SIZES}
    (out / "ggml_quant_sizes.json").write_text(json.dumps(
        {"gguf": "0.19.0", "sizes": sizes}, indent=0) + "\n")


if __name__ == "__main__":
    main()
