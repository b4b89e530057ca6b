"""What LoRA adapts and adds: the adapted linear layers of a model, as PEFT picks
them, and the adapters' parameters.

LoRA (Hu et al. 2021) adds to a frozen linear layer W (out × in) two trainable matrices,
A (r × in) and B (out × r): r · (in + out) parameters, no bias (PEFT's default bias="none").
The layers are read from the parameter breakdown (count_params walks the layer plan), so this
module knows no shape of its own: it only knows which tensors are linear layers in
transformers and how PEFT 0.21 targets them:

- ``all-linear`` (peft.tuners.tuners_utils._maybe_include_all_linear_layers): every
  ``nn.Linear`` and GPT-2 ``Conv1D`` except the output embedding (the LM head, the MLM
  decoder). Fused matrices are one layer: GPT-2's c_attn (Q, K, V), Phi-3's gate_up_proj.
- ``lm_head`` names the LM head itself (peft adapts the nn.Linear of that name; LitGPT's
  ``lora_head: true``): d_model -> vocab_size, r · (d_model + vocab_size) parameters.
- Mixture-of-experts layers: transformers 5 stores the experts as 3-D parameters and the
  router as its own module, neither an ``nn.Linear``, so PEFT adapts them only for the model
  types it converts (peft/utils/transformers_weight_conversion.py, ``_MOE_TARGET_MODULE_MAPPING``
  patterns "mixtral" and "qwen2_moe"): the router weight with rank r, the fused gate/up
  experts with rank 2·r per expert and the down experts with rank r per expert
  (lora.ParamWrapper: A is (rank · n_experts) × in, B out × (rank · n_experts)). Under the
  "qwen2_moe" pattern the names gate_proj/up_proj/down_proj are taken by the experts, so the
  dense and shared-expert MLPs that carry those names are not adapted (what PEFT 0.21 does).

Pinned against peft 0.21.2 + transformers 5.23.0 on the meta device for every registry case:
tools/reference_lora.py, tests/test_lora.py.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from transformer_calc.breakdown import Breakdown
from transformer_calc.errors import TcalcError
from transformer_calc.spec import ModelSpec

ALL_LINEAR = "all-linear"

# The roles a target may name: tcalc's sublayer names, and transformers' Llama-convention
# module names for them (what most LoRA recipes write: q_proj, v_proj, ...).
ROLE_ALIASES = {
    "q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate",
    "up_proj": "up", "down_proj": "down", "query": "q", "key": "k", "value": "v",
    "c_attn": "qkv", "query_key_value": "qkv", "qkv_proj": "qkv", "gate_up_proj": "gate_up",
    "q_a_proj": "q_a", "q_b_proj": "q_b", "kv_a_proj_with_mqa": "kv_a", "kv_b_proj": "kv_b",
    "wq_b": "index_q", "wk": "index_k", "weights_proj": "index_weights",
    # DeBERTa's position projections of the relative table (v1: pos_proj, pos_q_proj)
    "pos_proj": "pos_key", "pos_key_proj": "pos_key", "pos_q_proj": "pos_query",
    "pos_query_proj": "pos_query",
    # DeBERTa-v2/v3's own projections (the usual LoRA recipe: query_proj, value_proj)
    "query_proj": "q", "key_proj": "k", "value_proj": "v",
}
ROLES = ("q", "k", "v", "o", "qkv", "q_a", "q_b", "kv_a", "kv_b", "attn_gate", "gate", "up",
         "down", "gate_up", "router", "experts", "shared", "shared_gate", "in_proj", "x_proj",
         "dt_proj", "out_proj", "qkv_proj", "output_gate", "project", "head", "index_q",
         "index_k", "index_weights", "ple", "f_a_proj", "f_b_proj", "b_proj", "g_a_proj",
         "g_b_proj", "altup", "laurel", "kv", "o_a", "o_b", "compressor", "indexer", "pos_key",
         "pos_query", "lm_head")
# tcalc's FFN tensor names -> the role a user names
_FFN_ROLE = {"gate": "gate", "in": "up", "out": "down"}


class Adapted(NamedTuple):
    """One adapted linear layer (or the fused experts of one MoE layer), per layer."""

    name: str  # the breakdown item's id without ".weight", e.g. "decoder.attn.q"
    role: str  # one of ROLES
    fan_in: int
    fan_out: int
    experts: int  # ParamWrapper's num_experts (1 for a plain linear layer)
    rank_factor: int  # fused gate/up experts: 2 (one rank per fused matrix)
    repeat: int  # layers
    stack: str


def _role(rest: str) -> str | None:
    """The role of a 2-D or 3-D weight, from its name after the group prefix; None when it is
    not a linear layer in transformers (embeddings, relative tables, convolutions)."""
    parts = rest.split(".")
    if parts[-1] != "weight":
        return None
    if parts[0] in ("attn", "cross"):
        leaf = parts[1]
        return "attn_gate" if leaf == "gate" else leaf if leaf in ROLES else None
    if parts[0] in ("ple", "altup", "laurel"):
        # Gemma 4's per-layer embedding gate and projection; Gemma 3n's AltUp router and
        # coefficients, LAuReL's two projections: nn.Linear each
        return parts[0]
    if parts[0] == "ffn":
        if parts[1] == "dense":  # Gemma 4: the dense MLP beside the experts
            return _FFN_ROLE.get(parts[2])
        if parts[1] in ("experts", "shared"):
            return parts[1]
        if parts[1] == "pattn":
            return parts[2] if parts[2] in ("q", "o") else None
        if parts[1] == "shared_gate":
            return "shared_gate"
        if parts[1] == "router":
            return "router"
        return _FFN_ROLE.get(parts[1])
    if parts[0] == "mixer":
        return parts[1] if parts[1] in ROLES else None
    return None


def adapted_layers(spec: ModelSpec, params: Breakdown, targets: tuple[str, ...]
                   ) -> tuple[Adapted, ...]:
    """The layers LoRA adapts for ``targets`` (("all-linear",) or module names), per layer."""
    wanted, own, _ = _resolve(spec, targets)
    hits: set[str] = set()

    def take(*roles: str) -> bool:
        """Whether the targets select a layer that these roles name (and note the hit)."""
        if wanted is None:
            return True
        hit = wanted.intersection(roles)
        hits.update(hit)
        return bool(hit)

    moe = "" if spec.peft_moe == "none" else spec.peft_moe  # mixtral, qwen2_moe, linear_router
    converted = moe in ("mixtral", "qwen2_moe")
    out: list[Adapted] = []
    fused: dict[str, list] = {}  # type: ignore[type-arg]  # name -> parts of one matrix
    zero: dict[str, int] = {}  # fused gate/up experts -> zero-computation experts beside them
    for row in params.rows:
        name, repeat, stack, shape = row[0], row[4], row[5], row[8]
        if len(shape) < 2:
            continue  # a vector (norms, biases), or a tensor absent from this model
        base = name.removesuffix(".weight")
        if not stack:  # outside the layers: OPT's projections, the heads' dense layers
            role = ("project" if name.startswith("embed.project_")
                    else "head" if name in ("head.mlm.dense.weight", "head.pooler.weight",
                                            "head.altup_unembed")
                    else None)
            if role and take(role):
                out.append(Adapted(base, role, shape[1], shape[0], 1, 1, repeat, stack))
            continue
        if not spec.layers_nn_linear:
            continue
        rest = re.sub(r"^(encoder|decoder)\.", "", name[len(stack) + 1:])
        role = _role(rest)
        if role is None:
            continue
        part = rest.split(".")[2] if role in ("experts", "shared") else ""
        parent = base.rsplit(".", 1)[0]
        if role == "router":
            # transformers 5: a module of its own, an nn.Linear only in Llama 4 and PhiMoE;
            # PEFT's MoE conversion adapts its weight
            if moe and take("router"):
                out.append(Adapted(base, "router", shape[1], shape[0], 1, 1, repeat, stack))
        elif role == "experts" and moe == "linear_experts":
            # each expert's own nn.Linear layers (Switch Transformers' wi and wo, named as
            # the dense MLP's): one adapter of rank r each, X of them
            X, fan_out, fan_in = shape
            if take("experts", "down" if part == "out" else "up"):
                out.append(Adapted(base, "experts", fan_in, fan_out, X, 1, repeat, stack))
        elif role == "experts":
            # 3-D parameters (n_experts, out, in), adapted only by PEFT's MoE conversion: gate
            # and up are one gate_up_proj (rank 2·r), down has rank r
            if not converted:
                continue
            X, fan_out, fan_in = shape
            if part == "zero_gate_up":
                # LongCat-Flash: gate_up_proj holds the zero-computation experts' rows too, and
                # PEFT's wrapper takes its experts from that tensor (peft 0.21)
                zero[parent + ".gate_up"] = X
            elif part == "out":
                if take("experts", "down"):
                    out.append(Adapted(base, "experts", fan_in, fan_out, X, 1, repeat, stack))
            elif take("experts", "gate", "up"):
                fused.setdefault(parent + ".gate_up", []).append(
                    ("experts", fan_in, fan_out, repeat, stack, X))
        elif moe == "qwen2_moe" and (role in ("gate", "up", "down", "shared") or
                                     role == "attn_gate" and spec.attn_gate_named_gate_proj):
            continue  # PEFT 0.21 gave the names gate_proj/up_proj/down_proj to the experts
        elif role == "shared":
            # one MLP of n_shared · d_ff_shared (Qwen2-MoE, DeepSeek): (S, out, in) per expert
            S, rows_out, cols_in = shape
            fan_in, fan_out = (S * cols_in, rows_out) if part == "out" else (cols_in,
                                                                             S * rows_out)
            # (its modules carry the MLP's names: gate_proj, up_proj, down_proj adapt them)
            if not take("shared", "gate_up" if part != "out" and spec.fused_gate_up
                        else _FFN_ROLE.get(part, "shared")):
                continue
            if part != "out" and spec.fused_gate_up:
                fused.setdefault(parent + ".gate_up", []).append(
                    ("shared", fan_in, fan_out, repeat, stack, 1))
            else:
                out.append(Adapted(base, "shared", fan_in, fan_out, 1, 1, repeat, stack))
        elif spec.attn_gate_in_q and role in ("q", "attn_gate") and rest.startswith("attn."):
            if take("q"):  # q_proj computes the query and the gate (Qwen3-Next)
                fused.setdefault(parent + ".q", []).append(
                    ("q", shape[1], shape[0], repeat, stack, 1))
        elif (role in ("q", "k", "v") and spec.fused_qkv) or (role in ("gate", "up")
                                                               and spec.fused_gate_up):
            whole = "qkv" if role in ("q", "k", "v") else "gate_up"
            if wanted is not None and role in wanted:
                raise TcalcError(f"--lora-targets {role}: {spec.name} stores "
                                 f"{'Q, K and V' if whole == 'qkv' else 'gate and up'} as one "
                                 f"matrix; target {whole}")
            if take(whole):
                fused.setdefault(f"{parent}.{whole}", []).append(
                    (whole, shape[1], shape[0], repeat, stack, 1))
        elif take(role, *(("gate",) if role in ("compressor", "indexer")
                          and rest.endswith(".gate.weight") and "gate" not in own else ())):
            # (DeepSeek-V4's compressors name their gate gate_proj: that name adapts them)
            # Qwen3-Next/Qwen3.5 split the mixer's input projection into several nn.Linear:
            # one adapter each, r · (parts · in + out)
            splits = spec.ssm_in_projs if role == "in_proj" else 1
            out.append(Adapted(base, role, shape[1] * splits, shape[0], 1, 1, repeat, stack))
    if spec.peft_head and spec.lm_head and wanted is None:
        # FSMT: get_output_embeddings returns the decoder's table, so all-linear adapts
        # output_projection (d_model -> vocab_size) as any other layer (peft 0.21)
        out.append(Adapted("head.lm", "head", spec.embed_dim, spec.vocab_size, 1, 1, 1, ""))
    elif spec.lm_head and wanted is not None and take("lm_head"):
        # the LM head named as a target: an adapter over the whole vocabulary, reading the
        # final norm's output (the head's input)
        out.append(Adapted("head.lm", "lm_head", spec.embed_dim, spec.vocab_size, 1, 1, 1, ""))
    for base, parts in fused.items():
        role, fan_in, _, repeat, stack, X = parts[0]
        rank_factor = len(parts) if role == "experts" else 1
        X += zero.get(base, 0)
        out.append(Adapted(base, role, fan_in, sum(p[2] for p in parts), X, rank_factor,
                           repeat, stack))
    if spec.peft_mamba and any(a.role == "out_proj" for a in out):
        raise TcalcError(f"--lora-targets: PEFT refuses LoRA on out_proj for Mamba-based "
                         f"models such as {spec.name} (peft 0.21), and all-linear includes it; "
                         "name the targets, e.g. --lora-targets in_proj")
    if wanted is not None and len(hits & {"qkv", "o"}) == 1 and _multihead_attention(spec):
        raise TcalcError(f"--lora-targets: {spec.name}'s attention is torch's "
                         "nn.MultiheadAttention, which peft adapts whole (in_proj and out_proj "
                         "together, peft 0.21's lora.MultiheadAttention); target qkv and o")
    # PEFT adapts every module a target names and refuses only a list that names none; a
    # transformers name this model has that reaches no layer tcalc sees is the same, and
    # tcalc's own role names must each find theirs
    missing = ((wanted - hits) & own if hits else wanted) if wanted is not None else set()
    if missing:
        raise TcalcError(f"--lora-targets: {spec.name} has no linear layer "
                         f"'{', '.join(sorted(missing))}' (its layers: "
                         f"{', '.join(_available(spec, params))})")
    if converted and wanted is not None and len(wanted & {"gate", "up"}) == 1:
        # peft: "Cannot convert PEFT target(s) ... without also targeting ... because they
        # are fused into gate_up_proj"
        raise TcalcError(f"--lora-targets: {spec.name}'s experts hold gate and up as one "
                         "gate_up_proj; PEFT adapts both or neither")
    return tuple(out)


def _available(spec: ModelSpec, params: Breakdown) -> list[str]:
    return sorted({a.role for a in adapted_layers(spec, params, (ALL_LINEAR,))}
                  if not spec.peft_mamba else {"in_proj"})


def _resolve(spec: ModelSpec, targets: tuple[str, ...]
             ) -> tuple[set[str] | None, set[str], tuple[str, ...]]:
    """The roles the targets name (None for all-linear), those named by tcalc's own names,
    and the transformers names this model does not have. tcalc's own names hold for every
    model; a transformers name counts where this model has it (spec.module_names, generated
    per model type by tools/hf_defaults.py; Mixtral's experts are w1, w3, w2 to PEFT), and
    one it lacks matches nothing, which PEFT allows beside a name that matches (Phi-3's
    gate_up_proj: gate_proj,up_proj,down_proj adapt its down_proj alone)."""
    if not targets or targets == (ALL_LINEAR,):
        return None, set(), ()
    every = dict(ROLE_ALIASES, w1="gate", w3="up", w2="down")
    names = (spec.module_names or "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,"
             "qkv_proj,gate_up_proj,q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj").split(",")
    aliases = {k: v for k, v in every.items() if k in names}
    roles, own, absent = set(), set(), []
    for t in targets:
        if t == ALL_LINEAR:
            raise TcalcError("--lora-targets: all-linear stands alone, not in a list")
        if spec.peft_names_shared and t in aliases and t not in ROLES:
            raise TcalcError(f"--lora-targets {t}: {spec.name}'s recurrent mixer has a "
                             f"{t} of its own, which PEFT adapts with the attention's; name "
                             "tcalc's roles (q, k, v, o, in_proj, out_proj, ...) or all-linear")
        if t in ROLES:
            roles.add(t)
            own.add(t)
        elif t in aliases:
            roles.add(aliases[t])
        elif t in every and spec.module_names != "none":
            absent.append(t)  # a module this model does not have
        else:
            raise TcalcError(f"--lora-targets: unknown module '{t}' for {spec.name} (known: "
                             f"{', '.join(ROLES)}; transformers' names "
                             f"{', '.join(sorted(aliases)) or 'none'}; or all-linear)")
    if not roles:
        raise TcalcError(f"--lora-targets: {spec.name} has no module named "
                         f"{', '.join(targets)} (transformers' names "
                         f"{', '.join(sorted(aliases)) or 'none'}; or tcalc's roles: "
                         f"{', '.join(ROLES)}); PEFT refuses a list that matches nothing")
    return roles, own, tuple(absent)


def lora_params(spec: ModelSpec, params: Breakdown, rank: int,
                targets: tuple[str, ...] = (ALL_LINEAR,)) -> Breakdown:
    """The adapters' parameters, one item per adapted layer: r · (in + out) each, times the
    experts (and 2 for the fused gate/up experts) in a converted MoE layer."""
    if rank < 1:
        raise TcalcError(f"--lora: expected a rank >= 1, got {rank}")
    rows = []
    absent = _resolve(spec, targets)[2]
    for a in adapted_layers(spec, params, targets):
        r = rank * a.rank_factor * a.experts
        formula = (f"r · (in + out) = {rank} · ({a.fan_in} + {a.fan_out})" if r == rank else
                   f"r · {a.rank_factor * a.experts} · (in + out) = {rank} · "
                   f"{a.rank_factor * a.experts} · ({a.fan_in} + {a.fan_out})")
        rows.append((a.name + ".lora", r * (a.fan_in + a.fan_out), formula, formula, a.repeat,
                     a.stack, "", None, ()))
    notes = (f"{', '.join(absent)}: no such module in {spec.name}, so it adapts nothing "
             "(PEFT takes the list as long as one name matches)",) if absent else ()
    return Breakdown(spec.name, "params", tuple(rows), notes)


def _multihead_attention(spec: ModelSpec) -> bool:
    """Whether the model's attention is torch.nn.MultiheadAttention (the paper's Transformer
    as torch.nn builds it: graph/families/paper.py)."""
    from transformer_calc.graph.evaluate import family_of
    from transformer_calc.graph.families.paper import Paper

    try:
        return isinstance(family_of(spec), Paper)
    except TcalcError:
        return False
