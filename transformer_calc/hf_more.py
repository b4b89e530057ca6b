"""More model_type records, read as hf.py reads its own: one record per type, the sizes from
the file or from the config class's defaults (hf_defaults.py, transformers 5.23).

hf.py merges these into GENERIC and MAPPERS; each mapper here transcribes what its config
class derives before the generic record reads the keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformer_calc.hf import Config, Layout, Moe, _generic, _int

RECORDS: dict[str, Layout] = {
    # JetMoE (JetMoeForCausalLM): a mixture of attention heads (JetMoeMoA: num_local_experts
    # query/output projection pairs of num_key_value_heads · kv_channels, top-k per token,
    # their own router, one output bias) over one shared K/V projection (kv_proj, no bias),
    # and a mixture of gated experts of intermediate_size with one output bias (JetMoeMoE)
    "jetmoe": Layout("JetMoeForCausalLM", qkv_bias=False, o_bias=True, mlp_bias=False,
                     act="activation_function", keys=(("head_dim", "kv_channels"),),
                     moe=Moe(experts=("num_local_experts",), expert_ff="")),
}


def _jetmoe(c: Config) -> dict[str, Any]:
    """JetMoeForCausalLM: JetMoeConfig.__post_init__ sets num_attention_heads to
    num_key_value_heads · num_experts_per_tok (whatever the file says: each routed attention
    expert runs num_key_value_heads query heads over the shared keys)."""
    kv = _int(c, ("num_key_value_heads",), c.table.get("num_key_value_heads"))
    k = _int(c, ("num_experts_per_tok",), c.table.get("num_experts_per_tok"))
    out = _generic(c.with_data(dict(c.data) | {"num_attention_heads": kv * k}),
                   RECORDS["jetmoe"])
    return out | {"attn_experts": True, "moe_output_bias": True}


MAPPERS: dict[str, Callable[[Config], dict[str, Any]]] = {"jetmoe": _jetmoe}
