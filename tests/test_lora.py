"""LoRA's trainable parameters equal PEFT's.

The reference numbers in tests/data/lora_reference.json were obtained with peft 0.21.2,
transformers 5.23.0 and torch 2.13.0 (CPU): each config built on the meta device as the class
tcalc counts (hf.HEAD_CLASS), wrapped by peft.get_peft_model(model, LoraConfig(r, target_modules))
and counted with get_nb_trainable_parameters() — `python tools/reference_lora.py --fixture
tests/data/lora_reference.json`. A case peft refuses (Mamba's out_proj, a module the model does
not have) keeps peft's error, and tcalc must refuse it too.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from graph_rows import every_row

from transformer_calc.errors import TcalcError
from transformer_calc.hf import spec_from_hf
from transformer_calc.lora import adapted_layers, lora_params
from transformer_calc.params import count_params
from transformer_calc.presets import load_model

DATA = Path(__file__).parent / "data"
ROOT = DATA.parent.parent
REFERENCE = json.loads((DATA / "lora_reference.json").read_text())


@cache
def _file(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def _config(case: str) -> dict:
    path, _, index = case.partition("#")
    data = _file(path)
    return data["cases"][int(index)]["config"] if index else data


CASES = [{**c, "rank": s["rank"], "targets": s["targets"],
          "id": f"{s['name']}-{c['case'].split('/')[-1]}"}
         for s in REFERENCE["sets"] for c in s["cases"]]


# Where tcalc refuses what peft counts, and why (a refusal, never a wrong number)
REFUSED = {"bigbird_pegasus": "query in the encoder, q_proj in the decoder: tcalc's roles do "
                              "not tell the stacks apart",
           # (PEFT adapts the attention's and the mixer's module of a name alike; tcalc asks
           # for its own role names there: q, in_proj, ...)
           "kimi_linear": "its delta-attention mixer has q_proj, gate_proj of its own",
           "olmo_hybrid": "its delta-attention mixer has q_proj, gate_proj of its own"}


def test_trainable_equals_peft() -> None:
    every_row(CASES, _trainable_equals_peft, ids=lambda c: c["id"])


def _trainable_equals_peft(case: dict) -> None:
    rank, targets = case["rank"], case["targets"]
    config = _config(case["case"])
    spec = spec_from_hf(config)
    if "peft_error" in case or (config["model_type"] in REFUSED and targets != "all-linear"):
        with pytest.raises(TcalcError):
            lora_params(spec, count_params(spec), rank, tuple(targets.split(",")))
    else:
        got = lora_params(spec, count_params(spec), rank, tuple(targets.split(","))).total
        assert got == case["trainable"]


def test_reference_covers_what_it_claims() -> None:
    """The fixture holds every registry case, dense and MoE, and refusals."""
    sets = {s["name"]: s for s in REFERENCE["sets"]}
    registry = json.loads((DATA / "registry_cases.json").read_text())["cases"]
    assert len(sets["registry"]["cases"]) == len(registry)
    assert REFERENCE["versions"]["peft"] == "0.21.2"
    assert any("peft_error" in c for s in sets.values() for c in s["cases"])


# Hand-checkable cases: the formula r · (in + out) per adapted layer, with the shapes of the
# published configs (numbers from peft 0.21.2 as above; cross-checked by hand in the comment).

def test_llama_all_linear_by_hand() -> None:
    # Llama-3.1-8B, r = 16: per layer q 16·(4096+4096) + k, v 16·(4096+1024) each + o
    # 16·(4096+4096) + gate, up 16·(4096+14336) each + down 16·(14336+4096) = 1,310,720;
    # × 32 layers = 41,943,040 (peft: 41,943,040)
    spec = load_model("llama-3.1-8b")
    assert lora_params(spec, count_params(spec), 16).total == 41_943_040


def test_gpt2_fused_conv1d() -> None:
    # GPT-2: c_attn (768 -> 2304), attn c_proj, c_fc, mlp c_proj; r = 8:
    # 8·(768+2304 + 768+768 + 768+3072 + 3072+768) = 98,304 per layer × 12 = 1,179,648 (peft)
    spec = load_model("gpt2")
    assert lora_params(spec, count_params(spec), 8).total == 1_179_648
    with pytest.raises(TcalcError, match="one matrix; target qkv"):
        lora_params(spec, count_params(spec), 8, ("q",))
    with pytest.raises(TcalcError, match="gpt2 has no module named q_proj"):  # peft: not found
        lora_params(spec, count_params(spec), 8, ("q_proj",))
    assert lora_params(spec, count_params(spec), 8, ("c_attn",)).total == 12 * 8 * (768 + 2304)


def test_mixtral_experts_rank_doubled_for_gate_up() -> None:
    # Mixtral-8x7B, r = 8, all-linear, as peft 0.21 converts it for transformers 5: attention
    # 212,992 + router 8·(4096+8) + gate_up 16·8·(4096+28672) + down 8·8·(14336+4096) per
    # layer; × 32 = 179,832,832 (peft: 179,832,832)
    spec = load_model("mixtral-8x7b")
    assert lora_params(spec, count_params(spec), 8).total == 179_832_832
    with pytest.raises(TcalcError, match="w1"):  # Mixtral's experts are w1, w3, w2 to PEFT
        lora_params(spec, count_params(spec), 8, ("gate_proj", "up_proj", "down_proj"))
    with pytest.raises(TcalcError, match="both or neither"):
        lora_params(spec, count_params(spec), 8, ("w1",))


def test_unknown_target_names_the_model_and_its_layers() -> None:
    spec = load_model("llama-3.1-8b")
    with pytest.raises(TcalcError, match=r"unknown module 'qproj'"):
        lora_params(spec, count_params(spec), 8, ("qproj",))
    with pytest.raises(TcalcError, match=r"no linear layer 'experts' \(its layers: down, gate, "
                                         r"k, o, q, up, v\)"):
        lora_params(spec, count_params(spec), 8, ("experts",))
    with pytest.raises(TcalcError, match="rank >= 1"):
        lora_params(spec, count_params(spec), 0)


def test_adapted_layers_scale_with_groups_not_layers() -> None:
    """One adapted item per distinct layer kind, however deep the model (the plan's groups)."""
    spec = load_model("llama-3.1-405b")
    layers = adapted_layers(spec, count_params(spec), ("all-linear",))
    assert len(layers) == 7 and {a.repeat for a in layers} == {126}



def test_rank_one_is_a_rank() -> None:
    # mutation testing (seed 11): nothing used rank 1, the smallest PEFT accepts. LoRA's
    # count is linear in r, so rank 1 is peft's rank-16 count of the same case over 16
    s = next(s for s in REFERENCE["sets"] if s["rank"] == 16 and s["targets"] == "all-linear")
    case = next(c for c in s["cases"] if "trainable" in c
                and _config(c["case"])["model_type"] == "llama")
    spec = spec_from_hf(_config(case["case"]))
    assert lora_params(spec, count_params(spec), 1).total * 16 == case["trainable"]
    with pytest.raises(TcalcError, match="--lora: expected a rank >= 1, got 0"):
        lora_params(spec, count_params(spec), 0)


def test_deepseek_v3_without_shared_experts_still_has_their_empty_mlp() -> None:
    # DeepseekV3MoE builds shared_experts = DeepseekV3MLP(moe_intermediate_size ·
    # n_shared_experts), 0 wide with n_shared_experts 0: no parameters, but three nn.Linear
    # PEFT adapts (r · in each for gate and up, r · out for down). peft 0.21.2 +
    # transformers 5.23, `tools/reference_lora.py -r 8` on deepseek_v3-no-q-lora-bias.json
    # with n_shared_experts 0: 74,560 trainable (all-linear); base total 185,296
    config = json.loads((DATA / "hf" / "variants" / "deepseek_v3-no-q-lora-bias.json")
                        .read_text()) | {"n_shared_experts": 0}
    spec = spec_from_hf(config)
    params = count_params(spec)
    assert params.total == 259_856 - 74_560
    assert lora_params(spec, params, 8).total == 74_560


def test_a_name_the_model_lacks_adapts_nothing_beside_one_it_has() -> None:
    """PEFT adapts every module a target names and refuses only a list matching nothing
    (peft 0.21.2: "Target modules ... not found"). Phi-3 has gate_up_proj, not gate_proj or
    up_proj: gate_proj,up_proj,down_proj adapt its down_proj alone, r · (d_ff + d_model) per
    layer (the fixture's variants_mlp set has peft's counts); tcalc says which names found
    nothing. tcalc's own role names must each find a layer."""
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "phi3-gqa-tied.json")
                                   .read_text()))
    got = lora_params(spec, count_params(spec), 8, ("gate_proj", "up_proj", "down_proj"))
    assert got.total == spec.n_layers * 8 * (spec.d_ff + spec.d_model)
    assert got.notes and got.notes[0].startswith("gate_proj, up_proj: no such module")
    with pytest.raises(TcalcError, match="has no module named gate_proj"):
        lora_params(spec, count_params(spec), 8, ("gate_proj",))
    with pytest.raises(TcalcError, match="no linear layer 'experts'"):
        lora_params(spec, count_params(spec), 8, ("down", "experts"))


def test_shared_experts_answer_to_the_mlp_names_where_peft_does_not_convert() -> None:
    """Qwen2-MoE is not among the types PEFT 0.21 converts (its own name is the pattern's),
    so gate_proj,up_proj,down_proj adapt the dense first layer's MLP and every shared expert,
    never the routed experts: 9,984 trainable in qwen2_moe-tiny.json (peft 0.21.2, the
    fixture's variants_mlp set): 3 · 8 · (64 + 128) + 2 layers · 3 · 8 · (64 + 48)."""
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "qwen2_moe-tiny.json")
                                   .read_text()))
    got = lora_params(spec, count_params(spec), 8, ("gate_proj", "up_proj", "down_proj"))
    assert got.total == 3 * 8 * (64 + 128) + 2 * 3 * 8 * (64 + 48) == 9_984
    assert not any(".experts." in i.name for i in got.items)


def test_a_name_the_model_has_that_reaches_no_layer_here_adapts_nothing() -> None:
    """The deepseek_v3 type has q_proj where q_lora_rank is null, q_a_proj and q_b_proj where
    it is set (its published config): q_proj,kv_b_proj there adapt kv_b_proj alone, as in
    PEFT (r · (kv_lora_rank + n_heads · (d_nope + d_v)) per layer), and no note says q_proj
    is unknown to the type."""
    spec = spec_from_hf(json.loads((DATA / "hf" / "deepseek-v3.json").read_text()))
    assert "q_proj" in spec.module_names.split(",")
    got = lora_params(spec, count_params(spec), 8, ("q_proj", "kv_b_proj"))
    assert got.total == spec.total_layers * 8 * (512 + 128 * (128 + 128))
    assert not got.notes
