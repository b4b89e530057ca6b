"""More model_type records, read as hf.py reads its own: one record per type, the sizes from
the file or from the config class's defaults (hf_defaults.py, transformers 5.23).

hf.py merges these into GENERIC and MAPPERS; each mapper here transcribes what its config
class derives before the generic record reads the keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformer_calc.errors import SpecError
from transformer_calc.hf import (
    Config,
    Layout,
    Moe,
    Seq2Seq,
    T5Like,
    _generic,
    _int,
    _runs,
    _seq2seq,
    _t5,
)

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
    for key, n in (("num_key_value_heads", kv), ("num_experts_per_tok", k)):
        if n < 1:
            raise SpecError(key, "an integer >= 1 (JetMoeConfig derives num_attention_heads = "
                            "num_key_value_heads · num_experts_per_tok)", n, source=c.where)
    out = _generic(c.with_data(dict(c.data) | {"num_attention_heads": kv * k}),
                   RECORDS["jetmoe"])
    return out | {"attn_experts": True, "moe_output_bias": True,
                  "activations_unmodelled": "JetMoE's mixture of attention heads "
                  "(JetMoeMoA) saves what tcalc's activation rules do not describe (not "
                  "measured)"}


T5S: dict[str, T5Like] = {
    # Switch Transformers: T5's layers (relative buckets in the first layer, RMS norms, no
    # biases, a plain FFN of dense_act_fn), a top-1 router and num_experts experts of d_ff in
    # every sparse_step-th layer of each stack: _switch_transformers
    "switch_transformers": T5Like("SwitchTransformersForConditionalGeneration",
                                  tied_head=False),
}


SEQ2SEQ: dict[str, Seq2Seq] = {
    # NLLB-MoE: M2M-100's layers (pre-norm, a final norm per stack, sinusoidal positions, biases
    # everywhere) with a top-2 router and num_experts biased experts every sparse_step-th
    # layer of each stack: _nllb_moe
    "nllb-moe": Seq2Seq("NllbMoeForConditionalGeneration", norm_position="pre",
                        final_norm=True, embedding_norm=False, position="sinusoidal"),
}


def _nllb_moe(c: Config) -> dict[str, Any]:
    """NllbMoeForConditionalGeneration: M2M-100's mapping, with experts where
    NllbMoeEncoder and NllbMoeDecoder put them: layer i is sparse when (i + 1) % step == 0
    (encoder_sparse_step, decoder_sparse_step; 0: none). One FFN pattern for both stacks."""
    out = _seq2seq(c, SEQ2SEQ["nllb-moe"])
    if not all(isinstance(out[k], int) and out[k] > 0
               for k in ("n_encoder_layers", "n_decoder_layers")):
        return out  # (no layers to lay experts in: ModelSpec names the key)
    stacks = []
    for key, n in (("encoder_sparse_step", out["n_encoder_layers"]),
                   ("decoder_sparse_step", out["n_decoder_layers"])):
        # (0 means no sparse layer here, where Qwen2-MoE's decoder_sparse_step must be >= 1)
        step = c.data[key] if c.data.get(key) is not None else c.table.get(key)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise SpecError(key, "an integer >= 0 (0: no sparse layers)", step, source=c.where)
        letters = ["E" if step > 0 and (i + 1) % step == 0 else "D" for i in range(n)]
        stacks.append((letters, letters[:step] if step > 0 else ["D"]))
    pattern = _one_pattern(c, "decoder_sparse_step", stacks)
    drops = []
    for key in ("encoder_layerdrop", "decoder_layerdrop"):
        p = c.data[key] if c.data.get(key) is not None else 0.05  # NllbMoeConfig's
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise SpecError(key, "a probability in [0, 1]", p, source=c.where)
        drops += [key] if p > 0 else []
    if drops:
        c.notes.append(f"{' and '.join(drops)}: in training transformers skips each layer with "
                       "that probability; FLOPs and memory count every layer (an upper bound)")
    if not pattern:
        return out
    # NllbMoeExperts (transformers 5.23) one-hots the router's top-1 mask, itself one-hot:
    # its loop runs expert 0 on n_experts - 1 copies of every token and expert 1 on one,
    # n_experts evaluations where fairseq's NLLB-MoE runs the top-2
    c.notes.append("FLOPs count the top-2 experts each token is routed to; transformers "
                   "5.23's NllbMoeExperts runs n_experts expert evaluations per token (it "
                   "one-hots its one-hot top-1 mask)")
    return out | {"n_experts": c.t("num_experts"), "top_k": 2,
                  "router_bias": bool(c.t("router_bias")), "layer_ffn": pattern,
                  "activations_unmodelled": "NllbMoeExperts in transformers 5.23 runs every "
                  "token through its experts n_experts times (it one-hots the one-hot top-1 "
                  "mask), which tcalc's activation rules do not describe"}


def _sparse_every(c: Config, sparse: str, n: int) -> tuple[list[str], list[str]]:
    """SwitchTransformersStack: layer i has experts when i % step == 1 (or step is 1), step
    = layers // sparse layers (SwitchTransformersConfig.__post_init__; with none sparse,
    step = the layer count, which still makes layer 1 sparse: transcribed as it builds).
    The stack's letters, and the unit they repeat."""
    k = c.t(sparse)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise SpecError(sparse, "a non-negative integer", k, source=c.where)
    step = n // k if k > 0 else n
    letters = ["E" if step > 0 and (i % step == 1 or step == 1) else "D" for i in range(n)]
    return letters, letters[:step] if step > 0 else ["D"]


def _one_pattern(c: Config, key: str, stacks: list[tuple[list[str], list[str]]]) -> str:
    """One layer_ffn for both stacks (tcalc reads one pattern over each stack's layers): a
    repeating unit of either stack that lays out both, else refused naming ``key``."""
    for _, unit in stacks:
        if unit and all((unit * (len(s) // len(unit) + 1))[:len(s)] == s for s, _ in stacks):
            return "" if set(unit) == {"D"} else _runs(unit) + "*"
    raise SpecError(key, "a count that lays out the decoder's experts as the encoder's "
                    "(tcalc reads one FFN pattern for both stacks)", c.t(key), source=c.where)


def _switch_transformers(c: Config) -> dict[str, Any]:
    """SwitchTransformersForConditionalGeneration: T5's mapping (its activation under
    dense_act_fn) with experts where each stack's sparse step puts them; tcalc reads one FFN
    pattern for both stacks, so their steps must agree."""
    # (as BART's: untied, transformers 5.23 keeps the shared table, unused, beside the
    # encoder's and the decoder's own tables and the head)
    c.refuse("tie_word_embeddings", lambda v: v is False,
             "false adds an unused shared table beside the stacks' own, not modelled")
    act = c.get("dense_act_fn", c.table.get("dense_act_fn", "relu"))
    c.activation("dense_act_fn", act)  # checked under the file's own key
    out = _t5(c.with_data(dict(c.data) | {"feed_forward_proj": act}), T5S["switch_transformers"])
    if not all(isinstance(out[k], int) and out[k] > 0
               for k in ("n_encoder_layers", "n_decoder_layers")):
        return out  # (no layers to lay experts in: ModelSpec names the key)
    stacks = [_sparse_every(c, "num_sparse_encoder_layers", out["n_encoder_layers"]),
              _sparse_every(c, "num_sparse_decoder_layers", out["n_decoder_layers"])]
    pattern = _one_pattern(c, "num_sparse_decoder_layers", stacks)
    if not pattern:
        return out
    capacity = c.t("expert_capacity", 64)  # SwitchTransformersConfig's
    if isinstance(capacity, int) and not isinstance(capacity, bool):
        # SwitchTransformersTop1Router masks a token out once its expert has taken
        # expert_capacity tokens of the sequence (cumsum over T): which ones is data
        c.notes.append(f"the router drops the tokens an expert takes past expert_capacity "
                       f"({capacity}) in a sequence; memory and FLOPs count every token (exact "
                       f"up to {capacity} tokens per sequence, an upper bound past it)")
    jitter = c.t("router_jitter_noise", 0.01)  # SwitchTransformersConfig's
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)):
        raise SpecError("router_jitter_noise", "a number", jitter, source=c.where)
    # the router multiplies its input by uniform noise in training when router_jitter_noise
    # is above 0 (SwitchTransformersTop1Router), keeping the noise for backward; its
    # classifier and each expert's wi and wo are nn.Linear modules peft adapts one by one
    return out | {"n_experts": c.t("num_experts"), "top_k": 1,
                  "router_bias": bool(c.t("router_bias")), "layer_ffn": pattern,
                  "router_jitter": jitter > 0, "peft_moe": "linear_experts"}


MAPPERS: dict[str, Callable[[Config], dict[str, Any]]] = {
    "jetmoe": _jetmoe, "switch_transformers": _switch_transformers, "nllb-moe": _nllb_moe}
