"""Which part of the model a graph parameter belongs to: tcalc's parameter categories
(transformer_calc.params.CATEGORIES, the parts `--freeze` names), read off the parameter's
module path as transformers names its modules.

The innermost module decides a norm (q_norm inside the attention is a norm, as count_params
files it); then the top-level heads, the embeddings, the attention, the recurrent mixers,
and what is left is the feed-forward. A family whose names this misreads is caught where it
matters: with --freeze the graph's trainable parameters must equal count_params' (costs/
activations.py), or the graph does not answer."""

from __future__ import annotations

# top-level modules of the task heads transformers builds (ForCausalLM's lm_head, the
# classification heads, BERT's prediction head)
_HEADS = ("lm_head", "score", "classifier", "qa_outputs", "cls", "pooler", "proj_out")
_MIXERS = ("mixer", "mamba", "linear_attn", "conv", "short_conv", "feed_forward_conv")


def part(path: str) -> str:
    """The category of the parameter at `path` ("model.layers.0.self_attn.q_proj.weight")."""
    modules = [m.lower() for m in path.split(".")[:-1]]
    if modules and ("norm" in modules[-1] or modules[-1].startswith("ln")):
        return "norms"
    if not modules:
        return "ffn"
    if any(m in _HEADS for m in modules[:2]):  # a head, or the model's pooler
        return "heads"
    if any("embed" in m or m in ("wte", "wpe", "shared") for m in modules):
        return "embeddings"
    if any(("attn" in m or "attention" in m) and m not in _MIXERS for m in modules):
        return "attention"
    if any(m in _MIXERS for m in modules):
        return "mixers"
    return "ffn"
