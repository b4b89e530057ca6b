"""What forward has saved for backward after each of its op groups, on the CPU (developer tool,
needs torch + transformers): the reference for the forward half of `tcalc memory`'s timeline
(costs/timeline.py), op group by op group.

Method (as tools/measure_activations.py counts a forward's saved tensors): the class built
from the config with random weights on the CPU, fp32, train mode, eager attention, a forward
with labels and use_cache=False; inside torch.autograd.graph.saved_tensors_hooks every
storage autograd packs is recorded once, parameters and buffers out, with the op group
running when it was first packed: forward hooks mark the embeddings (before the first layer),
each decoder layer, the head (from the final norm's input) and the loss (after the LM head);
the rotary embedding's cos and sin, made before the first layer and first saved in it, are
the embeddings'.
A storage counts if autograd still holds it when the forward is over. One JSON object:
per case, the bytes saved by each op group, in forward's order.

    python tools/measure_timeline_cpu.py > tests/data/timeline_forward_cpu.json
"""

from __future__ import annotations

import gc
import json
import sys
import weakref

import torch

CASES = {
    "gpt2-tiny": {"model_type": "gpt2", "vocab_size": 1000, "n_embd": 128, "n_layer": 4,
                  "n_head": 4, "n_positions": 128},
    "llama-tiny": {"model_type": "llama", "vocab_size": 1000, "hidden_size": 128,
                   "intermediate_size": 352, "num_hidden_layers": 4,
                   "num_attention_heads": 4, "num_key_value_heads": 2,
                   "max_position_embeddings": 128, "tie_word_embeddings": False},
}
B, T = 2, 64


def _parts(model: torch.nn.Module) -> tuple[list[torch.nn.Module], torch.nn.Module,
                                            torch.nn.Module]:
    """The decoder layers, the final norm, the LM head."""
    if hasattr(model, "transformer"):  # GPT-2
        return list(model.transformer.h), model.transformer.ln_f, model.lm_head
    return list(model.model.layers), model.model.norm, model.lm_head


def measure(config: dict) -> list[tuple[str, int]]:
    import transformers

    cfg = transformers.AutoConfig.for_model(**config, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().train()
    layers, norm, head = _parts(model)
    stage = ["embeddings"]
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda m, a, i=i: stage.__setitem__(0, f"layer {i + 1}"))
    norm.register_forward_pre_hook(lambda m, a: stage.__setitem__(0, "head"))
    head.register_forward_hook(lambda m, a, o: stage.__setitem__(0, "loss"))
    # the rotary embedding's cos and sin are made once, before the first layer
    # (LlamaModel.forward), and saved first inside it: made with the embeddings
    made_early: set[int] = set()
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is not None:
        rotary.register_forward_hook(lambda m, a, out: made_early.update(
            o.untyped_storage().data_ptr() for o in out))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    params |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    packed: list[tuple[weakref.ref[torch.Tensor], int, int, str]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        alias = t.detach()
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            packed.append((weakref.ref(alias), s.data_ptr(), s.nbytes(), "embeddings"
                           if s.data_ptr() in made_early else stage[0]))
        return alias

    ids = torch.randint(0, config["vocab_size"], (B, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    gc.collect()
    first: dict[int, tuple[int, str]] = {}
    for ref, ptr, n, where in packed:
        if ref() is not None:
            first.setdefault(ptr, (n, where))
    order = ["embeddings", *[f"layer {i + 1}" for i in range(len(layers))], "head", "loss"]
    out = [(name, sum(n for n, where in first.values() if where == name)) for name in order]
    del loss
    return out


def main() -> None:
    torch.set_num_threads(1)
    import transformers

    out = {"meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                    "batch": B, "seq_len": T, "dtype": "fp32", "attention": "eager",
                    "use_cache": False, "command": "python tools/measure_timeline_cpu.py"},
           "cases": {name: {"config": config, "saved_by_op_group": measure(config)}
                     for name, config in CASES.items()}}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
