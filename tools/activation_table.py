"""Write docs/activations.md: measured saved-for-backward bytes against tcalc's estimate.

    python tools/activation_table.py tests/data/activations_gpt2_cpu.json > docs/activations.md

Reads the fixture tools/measure_activations.py wrote; needs no torch.
"""

from __future__ import annotations

import json
import sys

from transformer_calc import load_model
from transformer_calc.memory import activation_breakdown


def estimate(row: dict) -> int:
    items = activation_breakdown(load_model("gpt2"), row["batch_size"], row["seq_len"],
                                act_bytes=4 if row["dtype"] == "fp32" else 2, device="cpu",
                                attention=row["attention"], dropout=True).items
    return sum(i.total for i in items)


def main() -> None:
    with open(sys.argv[1]) as f:
        data = json.load(f)
    print("# Activation memory: measured against tcalc\n")
    print(f"Model: {data['model']}. Measured on {data['device']} with torch {data['torch']}, "
          f"transformers {data['transformers']}, Python {data['python']}. Method: "
          f"{data['method']}.\n")
    print("tcalc: `tcalc memory gpt2 --precision <dtype> --attention <attention> --device cpu "
          "--batch-size <B> --seq-len <T>` (dropout 0.1 from the preset). Target: ±10 %.\n")
    print("| dtype | attention | B | T | measured bytes | tcalc bytes | error |")
    print("|---|---|---:|---:|---:|---:|---:|")
    worst = 0.0
    for r in data["rows"]:
        est = estimate(r)
        err = 100 * (est - r["saved_bytes"]) / r["saved_bytes"]
        worst = max(worst, abs(err))
        print(f"| {r['dtype']} | {r['attention']} | {r['batch_size']} | {r['seq_len']} | "
              f"{r['saved_bytes']:,} | {est:,} | {err:+.4f}% |")
    print(f"\nLargest error: {worst:.4f} %. The few bytes left are float64 scalars autograd "
          "keeps for constant multiplications and the loss's padded label copy.\n")
    print("Not measured here: CUDA (1-byte dropout masks, fp32 LayerNorm statistics, the "
          "flash / memory-efficient SDPA kernels). "
          "`tools/measure_activations.py --device cuda` measures the same on a GPU.")


if __name__ == "__main__":
    main()
