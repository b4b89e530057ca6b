"""Every model_type tcalc maps, on its default config and on random small configs.

REFERENCE: tests/data/registry_cases.json was written by
`python tools/check_registry.py --cases 4 --write tests/data/registry_cases.json` under
torch 2.13.0+cpu and transformers 5.23.0: each case is a config.json (model_type alone, or with
its shape keys drawn at random), the class transformers built from it on the meta device, and
that model's trainable total. Configs tcalc refuses by name are not recorded there.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA, evaluate
from graph_rows import every_row

from transformer_calc import count_params
from transformer_calc.errors import SpecError
from transformer_calc.hf import HEAD_CLASS, TABLE_DRIVEN, spec_from_hf
from transformer_calc.plan import plan_of

CASES = json.loads((DATA / "registry_cases.json").read_text())
assert CASES["transformers"] == "5.23.0"
# the recurrent and hybrid types, recorded apart with FLOPs by op (test_mixers.py),
# and types added since the full run (`tools/check_registry.py --cases 6 --flops 8 --write
# tests/data/registry_cases_more.json laguna bert-generation nomic_bert tapas layoutlm hy_v3
# whisper trocr deepseek_v32 glm_moe_dsa mpnet gpt_neox_japanese apertus
# jina_embeddings_v3 bitnet modernbert modernbert-decoder fsmt electra rembert albert
# roc_bert mllama diffllama gemma4_text gemma4_unified_text beam mimo_v2_flash axk1 dots1
# hunyuan_v1_dense hunyuan_v1_moe nemotron ministral longcat_flash dbrx t5gemma
# gemma3n_text deepseek_v4 deberta`)
# The seq2seq families' decoders alone, named in architectures (BartForCausalLM, ...):
# `tools/check_registry.py --causal --cases 4 --flops 8 --write
# tests/data/registry_causal_decoders.json bart marian mbart mvp plbart blenderbot
# blenderbot-small pegasus bigbird_pegasus`
# More decoders and encoder-decoders: `tools/check_registry.py --cases 4 --flops 8 --write
# tests/data/registry_decoders_more.json deepseek_v2 jetmoe switch_transformers nllb-moe`
# (an encoder-decoder's FLOPs there are FlopCounterMode's over T source and T target tokens)
# The encoders whose layers hold tensors beyond BERT's (hf_encoders.py), each class of theirs:
# `tools/check_registry.py --cases 4 --flops 8 --task
# lm,base,seq_cls,token_cls,qa,multiple_choice,causal --write
# tests/data/registry_encoders_layered.json longformer xlnet funnel convbert xmod luke fnet
# nystromformer esmc ultrabert` (FLOPs recorded for ESMC's head class: tcalc refuses the
# others')
for _name in ("registry_mixers_T8.json", "registry_mixers_T64.json",
              "registry_cases_more.json", "registry_causal_decoders.json",
              "registry_decoders_more.json", "registry_encoders_layered.json"):
    _more = json.loads((DATA / _name).read_text())
    assert _more["transformers"] == "5.23.0"
    CASES["cases"] += _more["cases"]
IDS = [f"{c['config']['model_type']}-{i}" for i, c in enumerate(CASES["cases"])]


def _total_equals_transformers(case: dict) -> None:
    spec = spec_from_hf(case["config"], "case.json")
    assert count_params(spec).total == case["total"]
    assert f"counted as transformers' {case['class']}" in spec.note


def test_total_equals_transformers() -> None:
    every_row(CASES["cases"], _total_equals_transformers, ids=IDS)


def test_every_mapped_type_has_its_default_and_drawn_cases() -> None:
    per_type: dict[str, int] = {}
    for c in CASES["cases"]:
        per_type[c["config"]["model_type"]] = per_type.get(c["config"]["model_type"], 0) + 1
    assert set(per_type) == set(HEAD_CLASS)
    defaults = {c["config"]["model_type"] for c in CASES["cases"] if len(c["config"]) == 1}
    # Config classes whose defaults transformers 5.23 cannot build (tools/check_registry.py
    # prints "skip" for them: TypeError in the model's __init__) leave a key null that the
    # model reads: refused by name, so only drawn configs (which set it) are recorded
    unbuildable = {"dots1": "n_routed_experts",
                   "hunyuan_v1_dense": "head_dim", "hunyuan_v1_moe": "head_dim",
                   "ministral": "head_dim", "nemotron": "num_key_value_heads",
                   "lfm2_moe": "layer_types", "dbrx": "rope_theta"}
    assert defaults == set(HEAD_CLASS) - set(unbuildable)
    for model_type, key in unbuildable.items():
        with pytest.raises(SpecError, match=f"key '{key}'"):
            spec_from_hf({"model_type": model_type})
    assert all(n >= 2 for n in per_type.values()), per_type


def test_generic_records_read_their_class_defaults() -> None:
    from transformer_calc.hf_defaults import DEFAULTS

    # (and the text config classes of the wrappers, hf.WRAPPERS)
    assert set(DEFAULTS) >= set(TABLE_DRIVEN)
    # StarCoder2's defaults: 2 K/V heads, biases on, tied embeddings (Starcoder2Config)
    spec = spec_from_hf({"model_type": "starcoder2"})
    assert (spec.n_kv_heads, spec.bias_q, spec.bias_ffn_in, spec.tie_embeddings) == (
        2, True, True, True)


def test_refusals_name_the_key_and_why() -> None:
    with pytest.raises(SpecError, match="head_dim.*o_proj takes hidden_size"):
        spec_from_hf({"model_type": "helium", "hidden_size": 64, "num_attention_heads": 4,
                      "head_dim": 8})
    with pytest.raises(SpecError, match="tie_word_embeddings.*unused table"):
        spec_from_hf({"model_type": "bart", "tie_word_embeddings": False})


def _default_total(model_type: str) -> int:
    return next(c["total"] for c in CASES["cases"]
                if c["config"] == {"model_type": model_type})


def test_a_top_k_left_null_counts_parameters_and_refuses_what_the_forward_needs(
        cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # DeepseekV2Config leaves num_experts_per_tok null and transformers 5.23 builds
    # DeepseekV2ForCausalLM from it (the default case of registry_decoders_more.json); its
    # router reads the count only in the forward (torch.topk needs k), which cannot run
    from transformer_calc.errors import TcalcError
    from transformer_calc.flops import count_flops
    from transformer_calc.memory import Settings, activation_breakdown, memory_report

    spec = spec_from_hf({"model_type": "deepseek_v2"})
    counted = count_params(spec)
    assert counted.total == _default_total("deepseek_v2")
    assert counted.active_total == counted.total  # no active count is claimed
    assert "the number each token uses unset" in " ".join(counted.notes)
    refusal = "key 'num_experts_per_tok': expected an integer >= 1 to count FLOPs and memory"
    for cost in (lambda: count_flops(spec, 8),
                 lambda: memory_report(spec, Settings(inference=True)),
                 lambda: memory_report(spec, Settings()),
                 lambda: activation_breakdown(spec, 1, 8, act_bytes=2)):
        with pytest.raises(TcalcError, match=refusal):
            cost()
    src = tmp_path / "config.json"
    src.write_text(json.dumps({"model_type": "deepseek_v2"}))
    assert cli.json("params", str(src))["total_params"] == counted.total
    failed = cli("flops", str(src), code=2)
    assert failed.stderr.strip().splitlines() == [f"Error: {src}: {refusal} (the config class "
                                                  "leaves it null: transformers builds the "
                                                  "model, so its parameters are counted, but "
                                                  "the router reads it in the forward, which "
                                                  "cannot run without it)"]
    # set, the same layers run: its FLOPs are those of the drawn cases
    assert count_flops(spec_from_hf({"model_type": "deepseek_v2", "num_experts_per_tok": 6}),
                       8).total > 0


def test_jetmoe_routes_its_attention_too_and_refuses_training_memory() -> None:
    from transformer_calc.errors import TcalcError
    from transformer_calc.memory import Settings, memory_report

    # JetMoeConfig.__post_init__: num_attention_heads = num_key_value_heads ·
    # num_experts_per_tok, whatever the file says
    spec = spec_from_hf({"model_type": "jetmoe", "num_attention_heads": 7})
    assert (spec.n_heads, spec.n_kv_heads, spec.head_dim) == (32, 16, 128)
    assert count_params(spec).total == _default_total("jetmoe")
    # a token runs 2 of the 8 query/output experts: the active count holds a quarter of them
    q = count_params(spec).get("decoder.attn.q.weight")
    assert (q.count, q.active) == (8 * 2048 * 16 * 128, 2 * 2048 * 16 * 128)
    # serving: JetMoeAttention caches K and V before repeating them for the routed heads:
    # 2 · 12 layers · 16 K/V heads · 128 · 4,096 tokens · 2 bytes
    served = memory_report(spec, Settings(inference=True)).components
    assert served.get("kv_cache").count == 2 * 12 * 16 * 128 * 4096 * 2
    with pytest.raises(TcalcError, match="training memory is not modelled: .*JetMoeMoA"):
        memory_report(spec, Settings())
    with pytest.raises(SpecError, match="key 'num_key_value_heads': expected an integer"):
        spec_from_hf({"model_type": "jetmoe", "num_key_value_heads": None})
    with pytest.raises(SpecError, match="key 'num_experts_per_tok': expected an integer >= 1"):
        spec_from_hf({"model_type": "jetmoe", "num_experts_per_tok": 0})
    with pytest.raises(SpecError, match="n_heads.*top_k · n_kv_heads"):
        spec.replace(n_heads=16)


def test_nllb_moe_flops_differ_by_the_extra_expert_evaluations() -> None:
    from transformer_calc.flops import count_flops

    rows = [c for c in CASES["cases"] if c["config"]["model_type"] == "nllb-moe"
            and "flops_per_token_T8" in c]
    assert len(rows) >= 3
    for case in rows:
        spec = spec_from_hf(case["config"], "case.json")
        # per sparse layer, n_experts - 2 more biased up/down experts run than the top 2
        sparse = sum(g.count for st in plan_of(spec).stacks for g in st.groups
                     if g.block.ffn is not None and g.block.ffn.moe)
        extra = (spec.n_experts - 2) * 2 * 2 * spec.d_model * spec.d_ff * sparse
        assert count_flops(spec, 8).total + extra == case["flops_per_token_T8"]
    assert any(spec_from_hf(c["config"]).n_experts > 2 for c in rows)


def test_experts_every_few_layers_of_both_stacks_and_what_is_refused() -> None:
    from transformer_calc.errors import TcalcError
    from transformer_calc.memory import Settings, memory_report

    # SwitchTransformersConfig: 12 layers, 3 sparse: layers 1, 5 and 9 of each stack
    spec = spec_from_hf({"model_type": "switch_transformers"})
    assert (spec.layer_ffn, spec.n_experts, spec.top_k) == ("1D 1E 2D*", 8, 1)
    assert [g.count for g in plan_of(spec).stacks[0].groups] == [9, 3]
    # NllbMoeConfig: sparse_step 4, layers 3, 7 and 11
    spec = spec_from_hf({"model_type": "nllb-moe"})
    assert (spec.layer_ffn, spec.n_experts, spec.top_k) == ("3D 1E*", 128, 2)
    with pytest.raises(TcalcError, match="nllb-moe: training memory is not modelled"):
        memory_report(spec, Settings())
    # one FFN pattern for both stacks: steps that lay them out differently are refused
    with pytest.raises(SpecError, match="key 'decoder_sparse_step'.*one FFN pattern"):
        spec_from_hf({"model_type": "nllb-moe", "encoder_sparse_step": 2,
                      "decoder_sparse_step": 3})
    with pytest.raises(SpecError, match="key 'num_sparse_decoder_layers'.*one FFN pattern"):
        spec_from_hf({"model_type": "switch_transformers", "num_sparse_decoder_layers": 4})
    # 0 is NLLB-MoE's "no sparse layer" (the count: M2M-100's layers alone)
    dense = spec_from_hf({"model_type": "nllb-moe", "encoder_sparse_step": 0,
                          "decoder_sparse_step": 0})
    assert (dense.n_experts, dense.layer_ffn) == (0, "")
    with pytest.raises(SpecError, match="key 'encoder_sparse_step': expected an integer >= 0"):
        spec_from_hf({"model_type": "nllb-moe", "encoder_sparse_step": -1})
    with pytest.raises(SpecError, match="key 'num_sparse_encoder_layers': expected a non-neg"):
        spec_from_hf({"model_type": "switch_transformers", "num_sparse_encoder_layers": "3"})
    with pytest.raises(SpecError, match="key 'encoder_layers': expected encoder_layers and "):
        spec_from_hf({"model_type": "nllb-moe", "encoder_layers": 0})
    with pytest.raises(SpecError, match="key 'decoder_layerdrop': expected a probability"):
        spec_from_hf({"model_type": "nllb-moe", "decoder_layerdrop": 2})
    # untied, both keep an unused shared table beside the stacks' own (as BART)
    for model_type in ("switch_transformers", "nllb-moe"):
        with pytest.raises(SpecError, match="key 'tie_word_embeddings'.*unused"):
            spec_from_hf({"model_type": model_type, "tie_word_embeddings": False})


FIRST_CASE = {}
for _case in CASES["cases"]:
    FIRST_CASE.setdefault(_case["config"]["model_type"], _case)


@pytest.mark.parametrize("model_type", sorted(FIRST_CASE))
def test_every_model_type_round_trips_through_import(cli, tmp_path, model_type: str) -> None:
    case = FIRST_CASE[model_type]
    src = tmp_path / "config.json"
    src.write_text(json.dumps(case["config"]))
    out = tmp_path / "imported.yaml"
    cli("import", str(src), "-o", str(out))
    assert cli.json("params", str(out))["total_params"] == case["total"]


def test_model_types_doc_is_generated_from_the_registry() -> None:
    from conftest import load_tool

    doc = (DATA.parents[1] / "docs" / "model_types.md").read_text()
    assert doc == load_tool("model_types_doc").render(), \
        "run: python tools/model_types_doc.py > docs/model_types.md"


# Where FlopCounterMode (eager attention and experts, T = 8) sees other work than the model's
# own matmuls, and why; every other drawn case must equal count_flops exactly.
KNOWN_FLOPS_GAPS = {
    "llama4_text": "transformers' eager Llama4TextMoe runs every expert on every token; tcalc "
                   "counts the routed top-k",
    "mra": "without its CUDA kernels transformers' mra2_attention returns zeros (no attention "
           "on the CPU: the counter sees none); tcalc counts dense scores",
    "big_bird": "the pooler runs once per sequence; tcalc counts it per token (upper bound)",
    "nllb-moe": "transformers 5.23's NllbMoeExperts one-hots its one-hot top-1 mask, so every "
                "token runs n_experts expert evaluations; tcalc counts the top-2 routed "
                "(test_nllb_moe_flops_differ_by_the_extra_expert_evaluations)",
}
# (recurrent mixers are checked op by op in test_mixers.py: flops_ops_T*)
FLOPS_CASES = [c for c in CASES["cases"] if "flops_per_token_T8" in c
               and not any(k.startswith("flops_ops_") for k in c)
               and c["config"]["model_type"] not in KNOWN_FLOPS_GAPS]


def _forward_flops_equal_flop_counter(case: dict) -> None:
    from transformer_calc.flops import count_flops

    spec = spec_from_hf(case["config"], "case.json")
    assert count_flops(spec, 8).total == case["flops_per_token_T8"]


def test_forward_flops_equal_flop_counter() -> None:
    every_row(FLOPS_CASES, _forward_flops_equal_flop_counter,
              ids=[c["config"]["model_type"] for c in FLOPS_CASES])


def test_flops_cover_most_types() -> None:
    covered = {c["config"]["model_type"] for c in FLOPS_CASES}
    assert len(covered) >= 80, len(covered)


def test_absent_dropout_keys_take_the_config_class_defaults() -> None:
    # transformers 5.23: NomicBertConfig hidden_dropout_prob = attention_probs_dropout_prob =
    # 0.0 (a BERT-style family default of 0.1 counted masks it never makes: +29 to +104 %);
    # XLMConfig dropout = 0.1 and attention_dropout = 0.1
    assert spec_from_hf({"model_type": "nomic_bert"}).dropout == 0.0
    assert spec_from_hf({"model_type": "xlm"}).dropout == 0.1
    assert spec_from_hf({"model_type": "nomic_bert", "hidden_dropout_prob": 0.2}).dropout == 0.2


# Every type's other classes: the base model (AutoModel), sequence and token classification,
# question answering, multiple choice and an encoder's *ForCausalLM (BertLMHeadModel), each
# named in architectures, with num_labels or id2label drawn. REFERENCE: `python
# tools/check_registry.py --task base,seq_cls,token_cls,qa,multiple_choice,causal --cases 2
# --write tests/data/registry_heads.json`
# (torch 2.13.0+cpu, transformers 5.23.0, meta device, the class its auto mapping names)
HEAD_CASES = json.loads((DATA / "registry_heads.json").read_text())
assert HEAD_CASES["transformers"] == "5.23.0"
# and the head classes of the types in registry_decoders_more.json: `tools/check_registry.py
# --task base,seq_cls,token_cls,qa,multiple_choice,causal --cases 2 --write
# tests/data/registry_heads_decoders_more.json deepseek_v2 jetmoe switch_transformers nllb-moe`
_more_heads = json.loads((DATA / "registry_heads_decoders_more.json").read_text())
assert _more_heads["transformers"] == "5.23.0"
HEAD_CASES["cases"] += _more_heads["cases"]


def _head_class_equals_transformers(case: dict) -> None:
    spec = spec_from_hf(case["config"], "case.json")
    assert count_params(spec).total == case["total"]
    assert f"counted as transformers' {case['class']}" in spec.note


def test_head_class_equals_transformers() -> None:
    every_row(HEAD_CASES["cases"], _head_class_equals_transformers, ids=[
        f"{c['class']}-{i}" for i, c in enumerate(HEAD_CASES["cases"])])


def test_every_head_class_is_counted_or_refused_by_name() -> None:
    from transformer_calc.hf import HEAD_TASKS
    from transformer_calc.hf_defaults import TASK_CLASSES

    recorded = {c["class"] for c in HEAD_CASES["cases"] + CASES["cases"]}
    for model_type, tasks in TASK_CLASSES.items():
        for task, cls in tasks.items():
            if task not in HEAD_TASKS or cls == HEAD_CLASS[model_type] or cls in recorded:
                continue
            # a class whose defaults transformers cannot build is recorded from drawn configs
            # only; the rest are refused, naming the class and why
            with pytest.raises(SpecError, match=f"key 'architectures'.*{cls}"):
                spec_from_hf({"model_type": model_type, "architectures": [cls]})
    assert len(recorded) >= 406, len(recorded)


@pytest.mark.parametrize("config, counted, note", [
    # transformers' class of the type, spelt otherwise (Phi-3.5-MoE's published config)
    ({"model_type": "phimoe", "architectures": ["PhiMoEForCausalLM"]}, "PhimoeForCausalLM",
     "architectures names PhiMoEForCausalLM, transformers' PhimoeForCausalLM"),
    # a class transformers does not have: its auto classes build by model_type, the task by
    # the name's end
    ({"model_type": "qwen2", "architectures": ["Qwen2ForRewardModel"]}, "Qwen2Model",
     "architectures names Qwen2ForRewardModel; transformers builds Qwen2Model for model_type "
     "qwen2"),
    ({"model_type": "llama", "architectures": ["MistralForCausalLM"]}, "LlamaForCausalLM",
     "architectures names MistralForCausalLM; transformers builds LlamaForCausalLM"),
    ({"model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"]}, "XLMRobertaModel", ""),
])
def test_architectures_are_matched_as_transformers_matches_them(config: dict, counted: str,
                                                                note: str) -> None:
    spec = spec_from_hf(config)
    assert spec.note.startswith(f"counted as transformers' {counted}")
    assert note in spec.note


def test_a_class_not_counted_is_refused_with_the_ones_that_are() -> None:
    with pytest.raises(SpecError) as e:
        spec_from_hf({"model_type": "bert", "architectures": ["BertForPreTraining"]})
    assert "BertForMaskedLM, BertLMHeadModel, BertModel, BertForSequenceClassification" \
        in str(e.value)
    with pytest.raises(SpecError, match="T5ForTokenClassification: it runs the encoder alone"):
        spec_from_hf({"model_type": "t5", "architectures": ["T5ForTokenClassification"]})
    with pytest.raises(SpecError, match="key 'num_labels': expected equal to id2label's size"):
        spec_from_hf({"model_type": "bert", "architectures": ["BertForSequenceClassification"],
                      "num_labels": 3, "id2label": {"0": "a", "1": "b"}})


# The vision-language wrappers whole (hf.WRAPPERS): their default configs and drawn text and
# vision configs. REFERENCE: `python tools/check_registry.py --wrappers --cases 8 --write
# tests/data/registry_wrappers.json audioflamingo3 exaone4_5 gemma3 kimi_k25 lfm2_vl mistral3
# mllama musicflamingo qwen2_5_vl qwen2_audio qwen3_5 qwen3_5_moe qwen3_vl qwen3_vl_moe voxtral
# whisper` (torch 2.13.0+cpu, transformers 5.23.0, meta device, the
# *ForConditionalGeneration class)
WRAPPER_CASES = json.loads((DATA / "registry_wrappers.json").read_text())
assert WRAPPER_CASES["transformers"] == "5.23.0"


def _wrapper_whole_equals_transformers(case: dict) -> None:
    spec = spec_from_hf(case["config"], "case.json")
    assert count_params(spec).total == case["total"]
    assert spec.note.startswith(f"counted as transformers' {case['class']}: its {spec.tower}")


def test_wrapper_whole_equals_transformers() -> None:
    every_row(WRAPPER_CASES["cases"], _wrapper_whole_equals_transformers, ids=[
        f"{c['config']['model_type']}-{i}" for i, c in enumerate(WRAPPER_CASES["cases"])])


def test_an_audio_models_head_is_its_own_and_voxtral_lays_its_text_defaults_under() -> None:
    # transformers 5.23, meta device, trainable parameters: these classes have no tied-weight
    # keys (the head stays apart under tie_word_embeddings true), and VoxtralConfig fills a
    # text_config's missing keys from its own defaults (head_dim 128: q_proj 512 × 64)
    audio = {"d_model": 32, "hidden_size": 32, "encoder_layers": 1, "num_hidden_layers": 1,
             "encoder_attention_heads": 2, "num_attention_heads": 2, "intermediate_size": 64,
             "encoder_ffn_dim": 64, "max_source_positions": 8, "num_mel_bins": 8}
    text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
    for model_type, inner, want in (("audioflamingo3", "qwen2", 183_936),
                                    ("musicflamingo", "qwen2", 183_936),
                                    ("qwen2_audio", "qwen2", 179_776),
                                    ("voxtral", "llama", 271_744)):
        config = {"model_type": model_type, "tie_word_embeddings": True,
                  "text_config": {"model_type": inner, **text}, "audio_config": audio}
        assert count_params(spec_from_hf(config)).total == want, model_type


# Fuyu, Gemma 4, Gemma 4 Unified, GLM-ASR, GOT-OCR 2, MOSS-Transcribe-Diarize and Qwen3-ASR
# whole: the default config, the optional towers at their classes' defaults, drawn
# text_config (Fuyu's flat keys half the time), vision_config and audio_config. REFERENCE:
# `python tools/check_registry.py --wrappers --cases 8 --write
# tests/data/registry_wrappers_more.json fuyu gemma4 gemma4_unified glmasr got_ocr2
# moss_transcribe_diarize qwen3_asr` (torch 2.13.0+cpu, transformers 5.23.0, meta device, the
# class each record names)
MORE_WRAPPER_CASES = json.loads((DATA / "registry_wrappers_more.json").read_text())
assert MORE_WRAPPER_CASES["transformers"] == "5.23.0"


def _more_wrappers_whole_equal_transformers(case: dict) -> None:
    spec = spec_from_hf(case["config"], "case.json")
    assert count_params(spec).total == case["total"]
    assert spec.note.startswith(f"counted as transformers' {case['class']}: its ")


def test_more_wrappers_whole_equal_transformers() -> None:
    every_row(MORE_WRAPPER_CASES["cases"], _more_wrappers_whole_equal_transformers, ids=[
        f"{c['config']['model_type']}-{i}" for i, c in enumerate(MORE_WRAPPER_CASES["cases"])])


@pytest.mark.parametrize(("config", "parts"), [
    # transformers 5.23, meta device: the trainable parameters under each top-level module of
    # the class's model (vision_tower / audio_tower, embed_vision / embed_audio /
    # multi_modal_projector, language_model)
    ({"model_type": "gemma4", "vision_config": {}},
     {"tower": 167_364_608, "projector": 1_769_472, "language_model": 5_077_177_856}),
    # (audio_tower 304,824,608, Gemma4AudioModel: tcalc's tower.audio rows; embed_audio
    # 3,538,944 beside embed_vision)
    ({"model_type": "gemma4", "vision_config": {}, "audio_config": {}},
     {"tower": 167_364_608 + 304_824_608, "projector": 1_769_472 + 3_538_944,
      "language_model": 5_077_177_856}),
    # (Gemma4UnifiedVisionEmbedder: 44,024,064 with its 3,840 × 2,304 projection, which tcalc
    # counts as the projector's; embed_audio 640 × 2,304)
    ({"model_type": "gemma4_unified", "vision_config": {}, "audio_config": {}},
     {"tower": 44_024_064 - 8_847_360, "projector": 8_847_360 + 1_474_560,
      "language_model": 3_010_758_400}),
    ({"model_type": "glmasr"},
     {"tower": 635_048_960, "projector": 29_366_272, "language_model": 1_472_055_296}),
    # (FuyuForCausalLM: vision_embed_tokens; its lm_head untied, 1,073,741,824)
    ({"model_type": "fuyu"},
     {"tower": 11_063_296, "projector": 0, "language_model": 8_323_433_472 + 1_073_741_824}),
    # (audio_tower 307,216,384 with its 1,500 × 1,024 frozen positions, not trainable)
    ({"model_type": "moss_transcribe_diarize"},
     {"tower": 305_680_384, "projector": 5_246_976, "language_model": 596_049_920}),
    ({"model_type": "got_ocr2"},
     {"tower": 89_670_912, "projector": 6_947_840, "language_model": 463_909_888}),
    ({"model_type": "qwen3_asr"},
     {"tower": 314_328_704, "projector": 4_723_200, "language_model": 1_720_574_976}),
])
def test_more_wrappers_part_by_part(config: dict, parts: dict) -> None:
    spec = spec_from_hf(config)
    b = count_params(spec)
    assert b.sum_prefix("tower.") == parts["tower"]
    assert b.sum_prefix("projector.") == parts["projector"]
    assert count_params(spec.text_only()).total == parts["language_model"] == \
        b.total - parts["tower"] - parts["projector"]


def test_the_new_towers_show_their_arithmetic() -> None:
    # each tower and projector row's formula, with this model's sizes in, is its count
    for config in ({"model_type": "gemma4", "vision_config": {}, "audio_config": {}},
                   {"model_type": "gemma4_unified", "vision_config": {}, "audio_config": {}},
                   {"model_type": "got_ocr2"}, {"model_type": "qwen3_asr"},
                   {"model_type": "glmasr"}, {"model_type": "fuyu"},
                   {"model_type": "moss_transcribe_diarize"},
                   {"model_type": "gemma4", "audio_config": {"subsampling_conv_channels":
                                                             [10, 3]}}):
        b = count_params(spec_from_hf(config))
        rows = [i for i in b.items if i.name.startswith(("tower.", "projector."))]
        assert rows
        for item in rows:
            assert evaluate(item.expr) == item.count, (config, item.name, item.expr)


def test_gemma4_reads_its_audio_conformer_and_names_a_bad_key() -> None:
    # without vision_config the class builds no vision tower; the conformer and embed_audio
    # alone (transformers 5.23, meta device: 304,824,608 + 3,538,944 beside the language model)
    spec = spec_from_hf({"model_type": "gemma4", "audio_config": {}})
    assert spec.tower == "none" and "its audio encoder (audio_config)" in spec.note
    assert count_params(spec).total == 5_077_177_856 + 304_824_608 + 3_538_944
    with pytest.raises(SpecError, match=r"^g.json \(audio_config\): key "
                       r"'subsampling_conv_channels': expected two integers"):
        spec_from_hf({"model_type": "gemma4", "audio_config": {
            "subsampling_conv_channels": [8]}}, "g.json")
    with pytest.raises(SpecError, match=r"^g.json: key 'audio_config': expected a mapping"):
        spec_from_hf({"model_type": "gemma4", "audio_config": 3}, "g.json")


def test_got_ocr2_refuses_what_its_encoder_does_not_build_as_counted() -> None:
    for vision, key in (({"qkv_bias": False}, "qkv_bias"), ({"use_rel_pos": False},
                                                          "use_rel_pos"),
                        ({"image_size": [64, 64]}, "image_size"),
                        ({"global_attn_indexes": 2}, "global_attn_indexes")):
        with pytest.raises(SpecError, match=rf"^o.json \(vision_config\): key '{key}'"):
            spec_from_hf({"model_type": "got_ocr2", "vision_config": vision}, "o.json")


@pytest.mark.parametrize(("config", "message"), [
    ({"model_type": "gemma4", "audio_config": {"num_attention_heads": 3}},
     "w.json (audio_config): key 'num_attention_heads': expected a divisor of "
     "hidden_size=1024, got 3"),
    ({"model_type": "qwen3_asr", "audio_config": {"downsample_hidden_size": 0}},
     "w.json (audio_config): key 'downsample_hidden_size': expected an integer >= 1"),
    ({"model_type": "got_ocr2", "vision_config": {"output_channels": 0}},
     "w.json (vision_config): key 'output_channels': expected an integer >= 1"),
    ({"model_type": "glmasr", "audio_config": {"num_key_value_heads": 3}},
     "w.json (audio_config): key 'num_key_value_heads': expected a divisor of "
     "num_attention_heads=20, got 3"),
    ({"model_type": "fuyu", "patch_size": 0}, "w.json: key 'patch_size': expected an integer"),
    ({"model_type": "gemma4_unified", "vision_config": {"mm_embed_dim": 0}},
     "w.json (vision_config): key 'mm_embed_dim': expected an integer >= 1"),
    ({"model_type": "moss_transcribe_diarize", "audio_merge_size": 0},
     "w.json: key 'audio_merge_size': expected an integer >= 1"),
    ({"model_type": "gemma3", "vision_config": {"hidden_size": 64, "num_attention_heads": 3}},
     "w.json (vision_config): key 'num_attention_heads': expected a divisor of "
     "hidden_size=64, got 3"),
])
def test_a_bad_tower_key_is_named_as_the_file_spells_it(config: dict, message: str) -> None:
    with pytest.raises(SpecError) as e:
        spec_from_hf(config, "w.json")
    assert str(e.value).startswith(message), str(e.value)


def test_every_wrapper_has_its_default_and_drawn_cases() -> None:
    from transformer_calc.hf import WRAPPERS

    per_type: dict[str, int] = {}
    for c in WRAPPER_CASES["cases"] + MORE_WRAPPER_CASES["cases"]:
        per_type[c["config"]["model_type"]] = per_type.get(c["config"]["model_type"], 0) + 1
    assert set(per_type) == set(WRAPPERS) and min(per_type.values()) >= 5, per_type


LAYERED_CLASSES = {  # each class of theirs, recorded (tests/data/registry_encoders_layered.json)
    "longformer": 6, "xlnet": 6, "funnel": 6, "convbert": 6, "xmod": 7, "luke": 6, "fnet": 6,
    "nystromformer": 6, "esmc": 4, "ultrabert": 5}


def test_layered_encoders_have_every_class_recorded_on_drawn_configs() -> None:
    from transformer_calc.hf_encoders import LAYERED

    assert set(LAYERED) == set(LAYERED_CLASSES)
    for model_type, n in LAYERED_CLASSES.items():
        cases = [c for c in CASES["cases"] if c["config"]["model_type"] == model_type]
        classes = {c["class"] for c in cases}
        assert len(classes) == n, (model_type, classes)
        for cls in classes:  # the default and 4 drawn configs of each
            assert sum(c["class"] == cls for c in cases) == 5, cls


@pytest.mark.parametrize("model_type, what", [
    ("longformer", "its sliding-window attention over attention_window keys"),
    ("xlnet", "XLNet's two-stream relative attention"),
    ("funnel", "Funnel's pooling of the sequence between blocks"),
    ("xmod", "X-MOD's language adapters"),
    ("nystromformer", "Nyström attention over num_landmarks segment means"),
    ("convbert", "ConvBERT's span-based dynamic convolution heads"),
    ("luke", "LUKE's entity inputs and entity-aware attention"),
    ("fnet", "FNet's Fourier transforms over the sequence and the hidden width"),
    ("ultrabert", "Ultrabert's bidirectional sliding-window layers"),
])
def test_layered_encoders_refuse_flops_and_training_memory_naming_what(
        cli, tmp_path, model_type: str, what: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(FIRST_CASE[model_type]["config"]))
    for args, start in ((("flops",), f"FLOPs not modelled ({what}"),
                        (("memory",), f"training memory is not modelled: {what}"),
                        (("memory", "--lora", "8"), f"training memory is not modelled: {what}")):
        err = cli(*args, str(path), code=2).stderr
        assert err.startswith(f"Error: {model_type}: {start}"), err
        assert len(err.strip().splitlines()) == 1, err
    # serving memory (weights, no KV cache for an encoder) stays, and every breakdown says
    # what is refused
    assert cli.json("memory", str(path), "--inference")["total_bytes"] > 0
    assert f"tcalc flops and training memory refuse this model: {what}" in spec_from_hf(
        FIRST_CASE[model_type]["config"]).note


@pytest.mark.parametrize("config, key", [
    ({"model_type": "funnel", "block_sizes": []}, "block_sizes"),
    ({"model_type": "funnel", "block_sizes": [2, True]}, "block_sizes"),
    ({"model_type": "funnel", "block_sizes": [1, 1], "block_repeats": [1]}, "block_repeats"),
    ({"model_type": "xmod", "languages": "en_XX"}, "languages"),
    ({"model_type": "xmod", "adapter_reduction_factor": 0}, "adapter_reduction_factor"),
    ({"model_type": "nystromformer", "conv_kernel_size": None}, "conv_kernel_size"),
    ({"model_type": "xlnet", "summary_type": "attn"}, "summary_type"),
    ({"model_type": "convbert", "num_groups": 2}, "num_groups"),
    ({"model_type": "convbert", "head_ratio": 0}, "head_ratio"),
    ({"model_type": "luke", "entity_vocab_size": 0}, "entity_vocab_size"),
    ({"model_type": "luke", "entity_emb_size": 2**41}, "entity_emb_size"),
    ({"model_type": "ultrabert", "prediction_head_size": 0}, "prediction_head_size"),
    ({"model_type": "funnel", "block_sizes": [60_000, 60_000]}, "block_sizes"),
    ({"model_type": "funnel", "d_head": 0}, "d_head"),
    ({"model_type": "xmod", "languages": [["en_XX"]]}, "languages"),
    ({"model_type": "esmc", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 8},
     "head_dim"),
    ({"model_type": "xlnet", "architectures": ["XLNetForSequenceClassification"],
      "summary_use_proj": False}, "summary_use_proj"),
])
def test_layered_encoders_refuse_keys_they_cannot_build_by_name(config: dict, key: str) -> None:
    with pytest.raises(SpecError, match=f"key '{key}'"):
        spec_from_hf(config)


def test_a_preset_with_tensors_costs_do_not_run_refuses_flops_and_training_memory() -> None:
    from transformer_calc.errors import TcalcError
    from transformer_calc.flops import count_flops
    from transformer_calc.memory import Settings, memory_report
    from transformer_calc.spec import ModelSpec

    spec = ModelSpec(name="mine", arch="encoder", vocab_size=100, d_model=32, n_layers=2,
                     n_heads=4, d_ff=64, max_positions=16, global_qkv=True)
    assert count_params(spec).total > count_params(spec.replace(global_qkv=False)).total
    with pytest.raises(TcalcError, match=r"^mine: FLOPs not modelled \(global_qkv: counted "
                       r"as parameters only\)"):
        count_flops(spec, 8)
    with pytest.raises(TcalcError, match="^mine: training memory is not modelled: "):
        memory_report(spec, Settings(seq_len=8))


def test_esmc_flops_are_modelled_and_its_training_memory_refused(cli, tmp_path) -> None:
    # its head class's FLOPs equal FlopCounterMode (tests/data/registry_encoders_layered.json,
    # test_forward_flops_equal_flop_counter); its activations are not measured
    assert sum("flops_per_token_T8" in c for c in CASES["cases"]
               if c["config"]["model_type"] == "esmc") == 4
    path = tmp_path / "config.json"
    path.write_text(json.dumps(FIRST_CASE["esmc"]["config"] | {"num_hidden_layers": 2}))
    assert cli.json("flops", str(path), "--seq-len", "8")["forward_flops_per_token"] > 0
    err = cli("memory", str(path), code=2).stderr
    assert err.startswith("Error: esmc: training memory is not modelled: ESMC's layer norms")
