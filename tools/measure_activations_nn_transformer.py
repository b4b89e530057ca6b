"""Bytes PyTorch saves for backward in the paper's Transformer as torch.nn builds it
(developer tool, needs torch): the transformer-base and transformer-big presets' model.

The model (what tools/reference_counts.py --builtin counts): one nn.Embedding(V, d) shared by
the encoder's input, the decoder's input and the output projection (Vaswani et al. 2017,
Sec. 3.4, the embeddings times sqrt(d)), sinusoidal positions (Sec. 3.5, a buffer), dropout
on the sums (Sec. 5.4), and torch.nn.Transformer(d, h, Le, Ld, ff, dropout,
batch_first=True) with the decoder's causal mask (tgt_is_causal); the loss is
F.cross_entropy over the logits (B·T, V) and the token ids. Encoder and decoder both read T
tokens. Training mode, on the CPU; the model cast to the dtype.

Method (tools/measure_activations.py's recorded): every storage saved_tensors_hooks sees,
once, parameters and buffers excluded, counted if autograd still holds it when the forward
is over. One JSON line per case:

    python tools/measure_activations_nn_transformer.py --d 32 --heads 4 --ff 64 --layers 2 \
        --vocab 100 -B 2 -T 16

--lora R: peft's LoRA (--lora-targets, peft's module names; --lora-dropout) over the frozen
model; the rows add the adapters' parameter count. tests/data/lora_activations_nn_transformer_cpu
.jsonl was written with --lora 8 -B 2 -T 16; --lora 8 --d 48 --heads 3 --ff 80 --layers 1 -B 1
-T 24 --dropout 0.0; --lora 4 --lora-targets linear1,linear2 --lora-dropout 0.05 -B 2 -T 16;
--lora 8 --lora-targets self_attn,multihead_attn -B 2 -T 16; --lora 8 --autocast -B 2 -T 16.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_activations import recorded  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class PaperTransformer(torch.nn.Module):
    def __init__(self, V: int, d: int, h: int, ff: int, Le: int, Ld: int, p: float,
                 P: int = 1024) -> None:
        super().__init__()
        self.d = d
        self.embed = torch.nn.Embedding(V, d)
        self.transformer = torch.nn.Transformer(d, h, Le, Ld, ff, p, batch_first=True)
        self.dropout = torch.nn.Dropout(p)
        pos = torch.arange(P).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(P, d)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        T = ids.shape[1]
        return self.dropout(self.embed(ids) * math.sqrt(self.d) + self.pe[:T])

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        T = tgt.shape[1]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(
            T, dtype=self.embed.weight.dtype)
        out = self.transformer(self.embed_tokens(src), self.embed_tokens(tgt), tgt_mask=mask,
                               tgt_is_causal=True)
        logits = F.linear(out, self.embed.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


def measure(V: int, d: int, h: int, ff: int, Le: int, Ld: int, p: float, dtype: str, B: int,
            T: int, autocast: bool = False, lora: tuple[int, str, float] | None = None
            ) -> tuple[int, int]:
    """The saved bytes and the trainable parameters. autocast: an fp32 model whose forward
    and loss run under torch.autocast("cpu", torch.bfloat16) (saved_tensors_hooks then sees
    autocast's weight copies too). lora: (rank, targets, dropout): peft's LoRA over the
    frozen model (get_peft_model, adapters fp32), the targets peft's module names
    (self_attn, multihead_attn: nn.MultiheadAttention, which peft's lora.MultiheadAttention
    adapts whole, in_proj and out_proj; linear1, linear2: the feed-forward's nn.Linear)."""
    import contextlib

    torch.manual_seed(0)
    model: torch.nn.Module = PaperTransformer(V, d, h, ff, Le, Ld, p).to(DTYPES[dtype]).train()
    if lora:
        import peft

        rank, targets, dropout = lora
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=rank, target_modules=targets.split(","), lora_dropout=dropout)).train()
    trainable = sum(q.numel() for q in model.parameters() if q.requires_grad)
    ids = torch.randint(0, V, (B, T))
    with recorded(model) as storages, (torch.autocast("cpu", dtype=torch.bfloat16)
                                       if autocast else contextlib.nullcontext()):
        loss = model(ids, ids)
    total = sum(storages.values())
    del loss
    return total, trainable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("-B", type=int, default=2)
    ap.add_argument("-T", type=int, default=16)
    ap.add_argument("--autocast", action="store_true",
                    help="an fp32 model under CPU autocast to bf16 (rows: autocast bf16)")
    ap.add_argument("--lora", type=int, default=0, help="peft's LoRA of this rank")
    ap.add_argument("--lora-targets", default="self_attn,multihead_attn,linear1,linear2",
                    help="peft's target_modules (module names)")
    ap.add_argument("--lora-dropout", type=float, default=0.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, CPU", file=sys.stderr)
    lora = (args.lora, args.lora_targets, args.lora_dropout) if args.lora else None
    for dtype in ("fp32",) if args.autocast else DTYPES:
        got, trainable = measure(args.vocab, args.d, args.heads, args.ff, args.layers,
                                 args.layers, args.dropout, dtype, args.B, args.T,
                                 args.autocast, lora)
        print(json.dumps({"model": "nn.Transformer", "vocab": args.vocab, "d_model": args.d,
                          "heads": args.heads, "d_ff": args.ff, "layers": args.layers,
                          "dropout": args.dropout, "dtype": dtype,
                          **({"autocast": "bf16"} if args.autocast else {}),
                          "B": args.B, "T": args.T,
                          **({"lora": list(lora), "trainable": trainable} if lora else {}),
                          "measured_bytes": got}))


if __name__ == "__main__":
    main()
