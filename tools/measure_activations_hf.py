"""Bytes PyTorch saves for backward, for any config.json tcalc reads (developer tool, needs torch
+ transformers), beside tcalc's activation estimate: issue 13's measurement, generalised from
tools/measure_activations.py (GPT-2 only).

Method (as measure_activations.py): the class tcalc counts (hf.HEAD_CLASS), built from the
config with random weights on the CPU, cast to the dtype, train mode, a forward with labels;
inside torch.autograd.graph.saved_tensors_hooks every tensor autograd packs is recorded by its
storage, each storage once, parameters excluded. MoE experts run transformers' eager
implementation. One JSON line per case.

    python tools/measure_activations_hf.py tests/data/hf/variants/qwen3-sliding-bias.json
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_activations import saved_bytes  # noqa: E402

from transformer_calc.hf import HEAD_CLASS, spec_from_hf  # noqa: E402
from transformer_calc.memory import activation_breakdown  # noqa: E402

DTYPES = {"fp32": (torch.float32, 4), "bf16": (torch.bfloat16, 2)}


def measure(config: dict, attention: str, dtype: str, B: int, T: int) -> int:
    import transformers

    cfg = transformers.AutoConfig.for_model(**config, attn_implementation=attention,
                                            experts_implementation="eager")
    torch.manual_seed(0)
    model = getattr(transformers, HEAD_CLASS[config["model_type"]])(cfg)
    model = model.to(DTYPES[dtype][0]).train()
    return sum(saved_bytes(model, B, T).values())


def main() -> None:
    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+", type=Path)
    ap.add_argument("-B", type=int, default=2)
    ap.add_argument("-T", type=int, default=64)
    args = ap.parse_args()
    print(f"# torch {torch.__version__}, transformers {transformers.__version__}, CPU",
          file=sys.stderr)
    for path in args.configs:
        config = json.loads(path.read_text())
        spec = spec_from_hf(config, str(path))
        for attention in ("eager", "sdpa"):
            for dtype in DTYPES:
                try:
                    got = measure(config, attention, dtype, args.B, args.T)
                except ValueError as e:  # e.g. a class without an SDPA path
                    print(json.dumps({"config": path.name, "attention": attention,
                                      "dtype": dtype, "skipped": str(e)[:100]}))
                    continue
                est = activation_breakdown(spec, args.B, args.T, act_bytes=DTYPES[dtype][1],
                                           device="cpu", attention=attention,
                                           dropout=spec.dropout > 0).total
                print(json.dumps({"config": path.name, "attention": attention, "dtype": dtype,
                                  "B": args.B, "T": args.T, "measured_bytes": got,
                                  "tcalc_bytes": est,
                                  "error_pct": round(100 * (est - got) / got, 1)}))


if __name__ == "__main__":
    main()
