"""The breakdown structure: totals from rows, items made on demand, and shown arithmetic that
equals the number shown (each item's expr is its formula with this model's values in)."""

from __future__ import annotations

import re

import pytest
from conftest import evaluate

from transformer_calc import count_params, load_model, preset_names
from transformer_calc.breakdown import Breakdown, Item, substitute
from transformer_calc.flops import AttentionPattern, count_flops
from transformer_calc.memory import Settings, activation_breakdown, memory_report

LETTERS = re.compile("[A-Za-z]")
PRESETS = preset_names()
# Variants no preset has, so that every branch of the builders shows its arithmetic.
VARIANTS = {
    "opt-350m-like": ("opt-125m", {"embed_proj_dim": 512}),
    "opt-350m-untied": ("opt-125m", {"embed_proj_dim": 512, "tie_embeddings": False}),
    "moe-shared": ("mixtral-8x7b", {"n_shared_experts": 2, "bias_ffn_in": True,
                                    "bias_ffn_out": True}),
    "bart-untied": ("bart-base", {"tie_encoder_decoder": False, "tie_embeddings": False}),
    "t5-every-layer-bias": ("t5-small", {"relative_scope": "every"}),
    "param-attention": ("transformer-base", {"ffn": "param_attention", "pattn_heads": 8,
                                             "pattn_n": 1024, "pattn_d_key": 64,
                                             "pattn_d_value": 64}),
    "bert-untied-mlm": ("bert-base", {"tie_embeddings": False, "pooler": True}),
    "gpt2-fused-gqa": ("gpt2", {"n_kv_heads": 4, "fused_qkv": True, "lm_head_bias": True}),
    "neox-two-norms": ("pythia-160m", {"parallel_norms": 2}),
}
# the 2024-26 block kinds, from their real configs: MLA + dense/MoE groups, sinks + sliding,
# sandwich norms + QK-norm, QK-norm over the width, MoE with dense layers between
HF_FILES = {"deepseek-v3-hf": "deepseek-v3.json", "gpt-oss-20b-hf": "gpt-oss-20b.json",
            "gemma-3-1b-hf": "gemma-3-1b.json", "olmo-2-7b-hf": "olmo-2-7b.json",
            "qwen3-moe-sparse-hf": "variants/qwen3_moe-sparse-step.json",
            "deepseek-no-q-lora-hf": "variants/deepseek_v3-no-q-lora-bias.json",
            "deberta-v3-hf": "deberta-v3-base.json", "deberta-hf": "deberta-large.json"}
MODELS = PRESETS + list(VARIANTS) + list(HF_FILES)


def model(name: str):  # type: ignore[no-untyped-def]
    if name in HF_FILES:
        from conftest import DATA

        return load_model(str(DATA / "hf" / HF_FILES[name]))
    if name in VARIANTS:
        base, changes = VARIANTS[name]
        return load_model(base).replace(name=name, **changes)
    return load_model(name)


def assert_shown_arithmetic(b: Breakdown, skip: tuple[str, ...] = ()) -> None:
    """Each item's expr is pure arithmetic (every symbol of its formula got a value) and
    evaluates to the item's count."""
    assert b.items, b.model
    for item in b.items:
        if item.name.endswith(skip):
            continue
        assert not LETTERS.search(item.expr), f"{b.model} {item.name}: {item.formula!r} -> " \
            f"{item.expr!r}"
        assert evaluate(item.expr) == item.count, f"{b.model} {item.name}: {item.expr}"


@pytest.mark.parametrize("name", MODELS)
def test_params_and_flops_show_their_arithmetic(name: str) -> None:
    spec = model(name)
    assert_shown_arithmetic(count_params(spec))
    T = min(4096, spec.max_context or 4096)  # a learned position table bounds the context
    assert_shown_arithmetic(count_flops(spec, min(1024, T)))
    assert_shown_arithmetic(count_flops(spec, T, AttentionPattern("local", window=256)))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("knobs", [
    {"attention": "eager", "device": "cuda"},
    {"attention": "sdpa", "device": "cpu"},  # fp32 upcast on the CPU math path
    {"attention": "flash", "device": "cuda", "recompute": "selective"},
    {"attention": "eager", "device": "cpu", "recompute": "full", "dropout": False},
])
def test_activations_show_their_arithmetic(name: str, knobs: dict) -> None:
    for batch in (1, 3):
        acts = activation_breakdown(model(name), batch, 512, act_bytes=2, **knobs)
        # recomputed_layer sums one layer's items: its formula is words, not arithmetic
        assert_shown_arithmetic(acts, skip=(".recomputed_layer",))


def test_memory_components_show_their_arithmetic() -> None:
    r = memory_report(load_model("gpt2"), Settings(precision="bf16", mixed=True))
    for item in r.components.items:
        if item.name != "activations":
            arithmetic = item.expr.split(" bytes")[0]  # "124,439,808 · 2 bytes"
            assert evaluate(arithmetic) == item.count


def test_total_and_items_agree_and_items_are_made_once() -> None:
    b = count_params(load_model("llama-3-8b"))
    # 8,030,261,248: LlamaForCausalLM(config.json of Llama-3-8B), transformers 5.23.0
    assert b.total == sum(i.total for i in b.items) == 8_030_261_248
    assert b.items is b.items  # materialised once
    assert all(type(i) is Item for i in b.items)
    assert b.active_total == sum(i.active_total for i in b.items)
    assert b.layer_total("decoder") == sum(i.count for i in b.items if i.stack == "decoder")
    assert b.sum_prefix("decoder.attn.") == sum(i.total for i in b.items
                                                if i.name.startswith("decoder.attn."))


def test_substitute() -> None:
    symbols = {"d_model": 768, "n_heads": 12, "n_kv_heads": 4, "d_head": 64,
               "vocab_size": 128_256}
    assert substitute("d_model × (n_heads · d_head)", symbols) == "768 × (12 · 64)"
    assert substitute("d_model · d_ff", symbols) == "768 · d_ff"  # unknown: left as written
    # n_heads inside n_kv_heads is not a symbol of its own; remarks in words are dropped
    assert substitute("2·n_kv_heads (grouped-query)", symbols) == "2·4"
    assert substitute("2 · d_model (scale + shift)", symbols) == "2 · 768"
    assert substitute("2 · d_model²", symbols) == "2 · 768²"
    assert substitute("vocab_size × d_model", symbols) == "128,256 × 768"  # long: grouped


def test_a_breakdown_without_symbols_keeps_exprs_as_given() -> None:
    rows = (Item("a", 3, "x", "1 + 2"), ("b", 4, "y", "", 2, "", "", None, ()))
    b = Breakdown("m", "bytes", rows)
    assert [i.expr for i in b.items] == ["1 + 2", ""]
    assert b.total == 3 + 8


def test_memory_json_shows_each_activation_arithmetic(cli) -> None:
    import json

    out = json.loads(cli("memory", "gpt2", "--mixed", "--precision", "bf16", "-b", "2",
                         "--format", "json").stdout)
    acts = out["activations"]["components"]
    assert acts and all(evaluate(a["expr"]) * a["layers"] == a["bytes"] for a in acts)
    weights = out["components"][0]
    # 124,439,808: GPT2LMHeadModel(GPT2Config()), transformers 5.23.0; bf16 copy = 2 bytes
    assert weights["expr"] == "124,439,808 · 2 bytes" and weights["bytes"] == 2 * 124_439_808


def test_reports_pickle_with_their_symbols() -> None:
    # symbols are partials of module functions, not lambdas: results can cross processes
    import pickle

    spec = load_model("gpt2")
    for b in (count_params(spec), count_flops(spec, 256),
              memory_report(spec, Settings(mixed=True, precision="bf16")).activations):
        copy = pickle.loads(pickle.dumps(b))  # noqa: S301 - our own bytes
        assert copy == b and copy.items == b.items


def test_every_tensor_shape_multiplies_to_its_count() -> None:
    """The shape each parameter item carries (shown as transformers names it) holds exactly
    its count, for every shipped preset and every real config: a shape and a formula that
    disagree would show one number and count another."""
    import math

    from conftest import DATA

    from transformer_calc.presets import load_file, preset_names

    specs = [load_model(n) for n in preset_names()]
    specs += [load_file(p) for p in sorted((DATA / "hf").glob("*.json"))]
    for spec in specs:
        for item in count_params(spec).items:
            if item.shape:
                assert math.prod(item.shape) == item.count, (spec.name, item.name)
