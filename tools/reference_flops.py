"""Forward FLOPs per token from torch.utils.flop_counter (developer tool, needs torch).

How the FLOPs pinned in tests/test_plan.py were obtained: the HF class tcalc counts, built
from a config.json with random weights on the CPU, eager attention, MoE experts run by
transformers' eager implementation (``experts_implementation="eager"``: the grouped kernel is
invisible to the counter), in training mode, one sequence of T tokens. FlopCounterMode counts
matmuls only (as tcalc does), so the total divided by T is tcalc's forward FLOPs per token.

    python tools/reference_flops.py --seq-len 8 tests/data/hf/variants/qwen3-sliding-bias.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformer_calc.hf import counted_class  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_activations import input_vocab  # noqa: E402


def eager_model(config: dict) -> torch.nn.Module:
    """The class tcalc counts, with random weights on the CPU, eager attention and experts."""
    import transformers

    print(f"# torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr)
    cfg = transformers.AutoConfig.for_model(**config, attn_implementation="eager",
                                            experts_implementation="eager")
    torch.manual_seed(0)
    return getattr(transformers, counted_class(config))(cfg)


def forward_flops(config: dict, seq_len: int) -> int:
    model = eager_model(config).train()
    ids = torch.randint(0, input_vocab(model.config), (1, seq_len))
    # an encoder-decoder: T source and T target tokens (tcalc's convention: per token = one
    # of each)
    extra = {"decoder_input_ids": ids} if model.config.is_encoder_decoder else {}
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, use_cache=False, **extra)
    return counter.get_total_flops()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+", type=Path)
    ap.add_argument("--seq-len", type=int, default=8)
    args = ap.parse_args()
    for path in args.configs:
        total = forward_flops(json.loads(path.read_text()), args.seq_len)
        print(f"{total // args.seq_len:>14,} per token  ({total:,} at T={args.seq_len})  "
              f"{path.name}")


if __name__ == "__main__":
    main()
