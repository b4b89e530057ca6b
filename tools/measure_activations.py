"""Measure the bytes PyTorch saves for backward in HF GPT-2 (developer tool, needs torch).

Not run by the tests or CI. It produced tests/data/activations_gpt2_cpu.json, which the tests
compare tcalc's activation estimate against (it must be within ±10 %).

    python tools/measure_activations.py                     # the full grid, CPU, as JSON
    python tools/measure_activations.py --list -B 1 -T 128  # every saved tensor, by op

Method: GPT2LMHeadModel (GPT2Config(), dropout 0.1, train mode, the whole model cast to the
dtype), loss on labels = input_ids. Inside torch.autograd.graph.saved_tensors_hooks, every
tensor autograd packs is recorded by its storage; each storage counts once (views share it)
and parameters' storages are excluded. ``--list`` walks the autograd graph instead, to show
which op saved what (the totals agree).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import sys
import weakref
from collections import Counter
from collections.abc import Callable, Iterator

import torch


def build(attn: str, dtype: torch.dtype, device: str = "cpu") -> torch.nn.Module:
    import transformers

    cfg = transformers.GPT2Config()
    model = transformers.GPT2LMHeadModel._from_config(cfg, attn_implementation=attn)
    return model.to(device=device, dtype=dtype).train()


@contextlib.contextmanager
def recorded(model: torch.nn.Module) -> Iterator[dict[int, int]]:
    """Every storage autograd saves for backward within it and still holds at its end (once;
    parameters and buffers out: a saved view of a buffer, like GPT-Neo's causal-mask table,
    is the model's memory, allocated with it, not an activation), by
    torch.autograd.graph.saved_tensors_hooks: storage pointer -> bytes, filled at the exit.
    The parameters and buffers are held until then: a module that replaces a buffer in its
    forward (I-BERT's QuantAct: self.x_min = ...) would otherwise free the old storage, and
    an activation allocated at its address was taken for the buffer (measured: I-BERT bf16,
    a (B, T, 1) std or the loss's 0-d total_weight left out, by the run's allocations)."""
    held = [*model.parameters(), *model.buffers()]
    params = {t.untyped_storage().data_ptr() for t in held}
    storages: dict[int, int] = {}
    packed: list[tuple[weakref.ref[torch.Tensor], int, int]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        # a detached alias, held by the saved variable alone (no cycle through grad_fn):
        # it dies with the autograd node that saved it
        alias = t.detach()
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            packed.append((weakref.ref(alias), s.data_ptr(), s.nbytes()))
        return alias

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield storages
    # what backward would find: the storages still saved when the forward is over. A storage
    # saved by an op whose node the forward dropped (not on the loss's graph) is freed, and its
    # address may be reused by a later one: counting addresses ever saved miscounted both
    # (DeBERTa-v2's totals differed between runs).
    gc.collect()
    storages.update({ptr: n for ref, ptr, n in packed if ref() is not None})


def input_vocab(cfg: object) -> int:
    """Token ids every table takes: T5Gemma's encoder and decoder keep vocabularies of their
    own (its encoder and decoder sub-configs), the rest one."""
    return min(getattr(getattr(cfg, k, None), "vocab_size", None) or cfg.vocab_size  # type: ignore[attr-defined]
               for k in ("encoder", "decoder"))


def saved_bytes(model: torch.nn.Module, B: int, T: int, device: str = "cpu",
                labels: Callable[[torch.Tensor], torch.Tensor] | None = None,
                use_cache: bool = False) -> dict[str, int]:
    """labels: the labels as a function of the token ids (default: the ids themselves, a
    language model's; a classifier's are its classes'). use_cache: the forward's flag (the
    generation cache transformers builds in training when it is on)."""
    torch.manual_seed(0)
    ids = torch.randint(0, input_vocab(model.config), (B, T), device=device)
    # use_cache=False: no generation cache in training (a hybrid's first layer may have no
    # attention, and transformers then cannot size its cache). Not nothing: with the config's
    # default use_cache=True transformers 5.23 builds a DynamicCache even in training, and
    # attention then saves K and V as the cache's concatenated copies. The GPT-2 grid
    # (activations_gpt2_cpu.json), measured without this flag, is that default forward:
    # 206,246,412 bytes at B=1 T=128 eager fp32 with the cache, 196,809,228 without
    # (measured counting what autograd still holds after the forward).
    import inspect

    with recorded(model) as storages:
        # (peft's PeftModel.forward takes *args, **kwargs: ask the model it wraps)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        if "labels" in inspect.signature(base.forward).parameters:
            loss = model(input_ids=ids, labels=ids if labels is None else labels(ids),
                         use_cache=use_cache).loss
        else:  # a base model (BertModel...): the sum of its outputs, whose backward keeps
            # sizes only, so what is recorded is the model's own
            out = model(input_ids=ids, use_cache=use_cache)
            loss = sum(t.sum() for t in (out.last_hidden_state,
                                         getattr(out, "pooler_output", None)) if t is not None)
            del out
    total = sum(storages.values())
    del loss
    return {"saved_bytes": total, "storages": len(storages)}


def list_saved(model: torch.nn.Module, B: int, T: int) -> None:
    """Each saved tensor, attributed to the autograd node that saved it."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(0, input_vocab(model.config), (B, T))
    loss = model(input_ids=ids, labels=ids).loss
    seen: dict[int, tuple[str, tuple[int, ...], str, int]] = {}
    stack, visited = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except RuntimeError:
                continue
            for t in value if isinstance(value, tuple) else (value,):
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in params:
                    s = t.untyped_storage()
                    seen.setdefault(s.data_ptr(), (f"{node.name()}.{attr}", tuple(t.shape),
                                                   str(t.dtype), s.nbytes()))
        stack += [n for n, _ in node.next_functions]
    by_kind: Counter[tuple[str, tuple[int, ...], str]] = Counter()
    size: dict[tuple[str, tuple[int, ...], str], int] = {}
    for name, shape, dtype, nbytes in seen.values():
        by_kind[(name, shape, dtype)] += 1
        size[(name, shape, dtype)] = nbytes
    for (name, shape, dtype), n in sorted(by_kind.items(), key=lambda kv: -size[kv[0]] * kv[1]):
        print(f"{n:4d} × {size[(name, shape, dtype)]:>12,}  {name:45s} {shape!s:24s} {dtype}")
    print(f"total {sum(v[3] for v in seen.values()):,} bytes in {len(seen)} storages")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("-B", type=int, default=1)
    ap.add_argument("-T", type=int, default=128)
    ap.add_argument("--attn", default="eager")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--one", action="store_true", help="measure one configuration (-B -T "
                    "--attn --dtype) and print its JSON row")
    args = ap.parse_args()
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.list:
        list_saved(build(args.attn, dtypes[args.dtype], args.device), args.B, args.T)
        return
    if args.one:
        r = saved_bytes(build(args.attn, dtypes[args.dtype], args.device), args.B, args.T,
                        args.device)
        print(json.dumps({"dtype": args.dtype, "attention": args.attn, "batch_size": args.B,
                          "seq_len": args.T, **r}))
        return
    import os
    import subprocess

    import transformers

    # One process per configuration, with a fixed mmap threshold: glibc's dynamic threshold
    # otherwise keeps freed 12 MB activations on the heap and B=4, T=1024 in fp32 (13 GB
    # saved) outgrows a 24 GB machine.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    rows = []
    for dtype in ("fp32", "bf16"):
        for attn in ("eager", "sdpa"):
            for B in (1, 4):
                for T in (128, 512, 1024):
                    out = subprocess.run(
                        [sys.executable, __file__, "--one", "-B", str(B), "-T", str(T),
                         "--attn", attn, "--dtype", dtype, "--device", args.device],
                        env=env, capture_output=True, text=True, check=True).stdout
                    rows.append(json.loads(out.strip().splitlines()[-1]))
                    print(rows[-1], file=sys.stderr, flush=True)
    print(json.dumps({
        "model": "GPT2LMHeadModel(GPT2Config()), train mode, dropout 0.1, loss on labels",
        "device": args.device, "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "method": "torch.autograd.graph.saved_tensors_hooks; each storage once; parameters "
                  "excluded (tools/measure_activations.py)",
        "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
