"""Activation estimate against what PyTorch really saves for backward (±10 %).

The fixture was measured by tools/measure_activations.py (torch 2.13.0 CPU, transformers
5.23.0): HF GPT2LMHeadModel in train mode, dropout 0.1, loss on labels, eager and SDPA
attention, B in {1, 4}, T in {128, 512, 1024}, the whole model in fp32 and in bf16, bytes seen
by torch.autograd.graph.saved_tensors_hooks, each storage once, parameters excluded.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from graph_rows import every_row, spec_of

from transformer_calc import load_model
from transformer_calc.memory import Settings, memory_report

FIXTURE = json.loads((DATA / "activations_gpt2_cpu.json").read_text())
ROWS = FIXTURE["rows"]


def test_fixture_covers_the_grid() -> None:
    grid = {(r["dtype"], r["attention"], r["batch_size"], r["seq_len"]) for r in ROWS}
    assert grid == {(d, a, b, t) for d in ("fp32", "bf16") for a in ("eager", "sdpa")
                    for b in (1, 4) for t in (128, 512, 1024)}
    assert FIXTURE["device"] == "cpu" and FIXTURE["torch"].startswith("2.13.0")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "{dtype}-{attention}-B{batch_size}-T{seq_len}"
                         .format(**r))
def test_estimate_within_10_percent(row) -> None:
    r = memory_report(load_model("gpt2"), Settings(
        precision=row["dtype"], attention=row["attention"], device="cpu",
        batch_size=row["batch_size"], seq_len=row["seq_len"]))
    estimate = r.activations.total
    assert abs(estimate - row["saved_bytes"]) / row["saved_bytes"] <= 0.10
    # In fact the per-tensor derivation reproduces PyTorch to within a few hundred bytes:
    assert abs(estimate - row["saved_bytes"]) / row["saved_bytes"] < 1e-4


def test_cli_reports_the_same_activations(cli) -> None:
    row = ROWS[0]
    data = cli.json("memory", "gpt2", "--precision", row["dtype"], "--attention",
                    row["attention"], "--device", "cpu", "--batch-size",
                    str(row["batch_size"]), "--seq-len", str(row["seq_len"]))
    assert data["activations"]["bytes"] == pytest.approx(row["saved_bytes"], rel=1e-4)


# -- every architecture --------------------------------------------------------------------
# Measured by tools/measure_activations_hf.py (torch 2.13.0+cpu, transformers 5.23.0, CPU,
# saved_tensors_hooks, each storage once, parameters excluded) on the small variant configs in
# tests/data/hf/variants: activations_families_cpu.jsonl (14 architectures, B=1 T=64 and
# B=2 T=128, written by `python tools/measure_activations_hf.py -B 1 -T 64 CONFIGS` and
# `-B 2 -T 128`), activations_2024_26_families_cpu.jsonl (B=2 T=64; its tcalc_bytes column is
# what tcalc printed on the day, not read here) and activations_loss_dtype_cpu.jsonl (BERT,
# BART and T5 with a vocabulary that dominates the saved bytes, so that the loss's dtype
# decides the total: B=1 T=64 and B=2 T=128, the same command) and activations_more_cpu.jsonl
# (HY-V3, Nomic BERT, TAPAS, LayoutLM, BERT-Generation: B=2 T=64 and B=1 T=128) and
# activations_decoders_encoders_cpu.jsonl (Whisper's, TrOCR's and BART's decoders alone,
# DeepSeek-V3.2 and GLM-5's DSA, MPNet, GPT-NeoX-Japanese, Apertus's xIELU, Jina Embeddings
# v3, LFM3, and Gemma 2 with its two soft-cappings; BitNet, ModernBERT and its decoder, FSMT,
# ELECTRA, RemBERT, ALBERT, RoCBERT, Mllama, DiffLlama, Gemma 4 and its unified variant,
# Beam; the same two shapes; MiMo-V2-Flash, eager only;
# phi3-gqa-tied.json's two SDPA rows at B=2 T=64 in activations_2024_26_families_cpu.jsonl
# measured again with the same versions: 2,728,452 and 1,544,708 bytes). Mixtures of experts were
# measured with transformers' eager expert loop (experts_implementation="eager");
# activations_moe_grouped_cpu.jsonl measures nine of them again on its default grouped_mm
# path (`--experts grouped_mm`, B=2 T=64 and B=1 T=128; its rows say "experts").
# activations_sweep_variants_cpu.jsonl: 24 variants of the types whose drawn registry config
# is more than 10 % off without a rule of its own (tools/sweep_activations.py: Cohere's
# hand-written LayerNorm, BioGPT's, CTRL's, GPT's and GPTBigCode's dropout keys, GPT-Neo's,
# GPT-J's, CodeGen's and Flint's fp32 Q/K, InternLM3's and MPT's fp32 softmax, PhiMoE's two experts,
# OpenAI GPT's gelu_new; nanochat's weightless norms on the embeddings and on Q and K, and
# its soft-capped logits; GraniteSWA's sinks as a logsumexp scale; VaultGemma's
# soft-capping; StableLM's and Persimmon's concatenating RoPE, whose SDPA output is copied
# back, and Persimmon's Q/K LayerNorms on views of the fused output; MiniMax-M3's clamped
# SwiGLU, gpt-oss's; Nemotron-H's RMSNorm multiplying its weight in fp32: the whole model,
# its mixer-only rows being in activations_mixers_cpu.jsonl; Falcon-H1 without
# mamba_rms_norm, whose mixer gates y by silu(z) without a norm; OLMo's LayerNorm on an fp32
# copy), measured on variant configs: B=2 T=64, B=1 T=128.
# The measurement counts what autograd still holds when the forward is over (each saved
# tensor's detached alias, by weak reference); counting every storage ever saved, by address,
# would count storages freed mid-forward (saved by ops off the loss's graph) and miss later
# ones at a reused address. Every row above was measured that way with the same versions
# (tools/measure_activations_hf.py): against the by-address count, 415 of 786 unchanged, the
# rest within 1.1 % (a few bytes of scalars in most; mixer-only rows within 3.2 %).
# DeBERTa-v2, whose by-address totals differed between runs (753,932 or 622,860 bytes for one
# shape), keeps 1,384,972: activations_deberta_v2_sweep_cpu.jsonl holds it and a variant with
# both disentangled terms (B=2 T=64 and B=1 T=128, eager, fp32 and bf16), each equal to a
# walk of the autograd graph from the loss (its nodes' saved tensors) to the byte at B=2
# T=64; and UMT5 and mT5 (−5 to −13.5 %
# without their own rules), B=2 T=64 and B=1 T=128, eager and SDPA;
# XGLM (−8.8 %: its clamped scores; eager only), GTE (−7.5 %: its FFN's dropout) and I-BERT
# (−6.9 %: its LayerNorms written out; eager only), MiniCPM3 (−7.2 %: SDPA's math kernel) and
# Qwen3.5-MoE's gated attention (−7.4 %: q_proj's output in fp32), the same shapes.
# activations_longt5_olmo_hybrid_cpu.jsonl (the same versions and tool): LongT5's local
# attention (blocks, not dense T×T scores: −88 % if counted dense) and its
# transient-global attention, two variants each and one without dropout,
# B=2 T=64 and B=1 T=128, and B=2 T=30 (a sequence padded to whole blocks); eager only.
# And OLMo Hybrid (its Gated DeltaNet layers are Qwen3-Next's kernel), two variants, B=2 T=64
# and B=1 T=128, eager and SDPA: −0.3 to 0.0 % (the Gated DeltaNet
# rule written out line by line); and
# A.X K1 (DeepSeek-V3 with a norm after each MoE block), the same shapes: −0.4 % in each; and
# YOSO's expectation attention (+43 to +77 % if counted as a softmax with dropout),
# eager only: +0.2 %.
# activations_moe_dense_kimi_linear_cpu.jsonl (the same versions and tool): one tiny variant
# each of dots.llm1, Hunyuan dense and MoE, Nemotron, Ministral, LFM2-MoE, LongCat-Flash
# without zero-computation experts, DBRX and Kimi Linear, B=2 T=64 and B=1 T=128,
# eager and SDPA, fp32 and bf16; Kimi Linear with two KDA heads of 32 too, B=3 T=100 and
# B=1 T=192.
# activations_t5gemma_gemma3n_dsv4_cpu.jsonl (the same versions and tool): T5Gemma's two
# variants, B=2 T=64 and B=1 T=128, fp32 and bf16, eager (T5GemmaForConditionalGeneration
# has no SDPA path: those lines say "skipped"); Gemma 3n's two, the same shapes, eager and SDPA;
# DeepSeek-V4's two (eager only), the same shapes, and B=2 T=64 with --experts grouped_mm.
# activations_deberta_falcon_opt_cpu.jsonl (the same versions and tool): DeBERTa v1
# (DebertaForMaskedLM, eager only) with both disentangled terms, c2p alone over a table
# shorter than the sequence (max_relative_positions 24, absolute positions, token types,
# untied), p2c alone; B=2 T=64 and B=1 T=40, fp32 and bf16, and B=3 T=100 for the first;
# Falcon's new layout with ALiBi and with RoPE, B=2 T=64 and B=1 T=128, eager and SDPA (under
# SDPA the explicit masks and the broadcast K/V, −20.2 % and −4.8 % without them); OPT with
# a narrower embedding (project_in/out), the same shapes.
# activations_switch_transformers_cpu.jsonl (the same versions and tool): Switch Transformers,
# experts every other layer and in every layer (a biased router, gelu_new), B=2 T=64, B=1
# T=128 and B=3 T=24, fp32 and bf16, eager (SwitchTransformersForConditionalGeneration has no
# SDPA path);
# expert_capacity 256, so that no token is dropped: −0.1 to 0.0 % (its router's fp32 input
# and jitter noise kept, as DeepSeek-V3's and DBRX's)
# activations_qwen2_moe_qwen3_next_cpu.jsonl (the same versions and tool): Qwen2-MoE (a dense
# first layer, experts beside a gated shared expert) and Qwen3-Next, B=2 T=64, eager and SDPA,
# fp32 and bf16 (Qwen2-MoE keeps the shared experts' gate product: −2.9 to −3.5 % without it).
from transformer_calc.hf import spec_from_hf  # noqa: E402
from transformer_calc.memory import activation_breakdown  # noqa: E402
from transformer_calc.plan import plan_of  # noqa: E402

FAMILY_ROWS = [json.loads(line) for name in ("activations_families_cpu.jsonl",
                                               "activations_2024_26_families_cpu.jsonl",
                                               "activations_loss_dtype_cpu.jsonl",
                                               "activations_more_cpu.jsonl",
                                               "activations_decoders_encoders_cpu.jsonl",
                                               "activations_moe_grouped_cpu.jsonl",
                                               "activations_sweep_variants_cpu.jsonl",
                                               "activations_deberta_v2_sweep_cpu.jsonl",
                                               "activations_longt5_olmo_hybrid_cpu.jsonl",
                                               "activations_moe_dense_kimi_linear_cpu.jsonl",
                                               "activations_t5gemma_gemma3n_dsv4_cpu.jsonl",
                                               "activations_deberta_falcon_opt_cpu.jsonl",
                                               "activations_qwen2_moe_qwen3_next_cpu.jsonl",
                                               "activations_switch_transformers_cpu.jsonl")
               for line in (DATA / name).read_text().splitlines()]
MEASURED = [r for r in FAMILY_ROWS if "skipped" not in r]
# Every measured case is within ±10 % (the last gap, DeepSeek-V3 with SDPA in bf16 at −11.7 %,
# closed when its router's fp32 copies were itemised: router_fp32).


def _estimate(row: dict) -> int:
    spec = spec_of(row["config"])
    return activation_breakdown(spec, row["B"], row["T"], act_bytes=4 if row["dtype"] == "fp32"
                                else 2, device="cpu", attention=row["attention"],
                                dropout=spec.trains_with_dropout,
                                experts=row.get("experts", "eager")).total  # (key: new rows)


# classes transformers offers no SDPA path for (the measurement skipped it)
EAGER_ONLY = {"gpt_oss-tied-nobias.json", "tapas-tiny.json", "trocr-tiny.json",
              "mpnet-tiny.json", "gpt_neox_japanese-tiny.json", "gemma2-bias-untied.json",
              "fsmt-tiny.json", "rembert-tiny.json", "mimo_v2_flash-tiny.json",
              "mimo_v2_flash-types.json", "codegen-tiny.json", "gpt_neo-local.json",
              "gptj-tiny.json", "mpt-tiny.json", "openai-gpt-tiny.json", "xlm-tiny.json",
              "flint-tiny.json", "granite_swa-tiny.json", "granitemoe_swa-tiny.json",
              "vaultgemma-tiny.json", "deberta-v2-relative.json", "deberta-v2-c2p-p2c.json",
              "xglm-tiny.json", "ibert-tiny.json", "longt5-local.json",
              "longt5-local-default.json", "longt5-tglobal.json", "longt5-tglobal-default.json",
              "longt5-local-nodropout.json", "yoso-tiny.json", "t5gemma-tiny.json",
              "t5gemma-untied.json", "deepseek_v4-tiny.json", "deepseek_v4-types.json",
              "deberta-relative.json", "deberta-c2p-absolute.json", "deberta-p2c.json",
              "switch_transformers-tiny.json", "switch_transformers-all-sparse.json"}


def test_the_fixtures_cover_14_architectures_both_attentions_and_dtypes() -> None:
    families = {r["config"] for r in MEASURED}
    assert len(families) >= 18  # within ±10 % in every case
    for config in families:
        cases = {(r["attention"], r["dtype"]) for r in MEASURED if r["config"] == config}
        attentions = ("eager",) if config in EAGER_ONLY else ("eager", "sdpa")
        assert cases == {(a, d) for a in attentions for d in ("fp32", "bf16")}, config


def _within_10_percent(row: dict) -> None:
    error = (_estimate(row) - row["measured_bytes"]) / row["measured_bytes"]
    assert abs(error) <= 0.10, f"{error:+.1%}"


def test_every_architecture_within_10_percent() -> None:
    every_row(MEASURED, _within_10_percent)


def test_masked_lm_and_seq2seq_losses_keep_the_activation_dtype() -> None:
    # BertForMaskedLM, BART and T5 call nn.CrossEntropyLoss on the logits as they
    # are; causal LMs' loss_function (ForCausalLMLoss) upcasts them to fp32 first. Autocast
    # puts log_softmax on its fp32 list, so AMP keeps it in fp32 either way.
    def log_softmax(config: str, **kw: object) -> int:
        spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
        b = activation_breakdown(spec, 2, 128, device="cpu", **kw)  # type: ignore[arg-type]
        return b.get("loss.log_softmax").total

    for config, V in (("bert-big-vocab.json", 30522), ("t5-big-vocab.json", 32128),
                      ("bart-big-vocab.json", 50265)):
        assert log_softmax(config, act_bytes=2) == 2 * 128 * V * 2
        assert log_softmax(config, act_bytes=2, amp=True) == 2 * 128 * V * 4
    assert log_softmax("llama-head-dim.json", act_bytes=2) == 2 * 128 * 1000 * 4


def test_a_deepseek_router_keeps_fp32_copies_in_16_bit() -> None:
    # DeepseekV3TopkRouter runs F.linear(hidden_states.type(torch.float32),
    # self.weight.type(torch.float32)); in bf16 both casts are new tensors autograd keeps
    spec = spec_from_hf(json.loads(
        (DATA / "hf" / "variants" / "deepseek_v3-no-q-lora-bias.json").read_text()))
    assert spec.router_fp32
    rows = {i.name: i for i in activation_breakdown(spec, 2, 64, act_bytes=2, device="cpu",
                                                    attention="sdpa").items}
    assert rows["decoder.moe.ffn.router_fp32_input"].count == 2 * 64 * 64 * 4
    assert rows["decoder.moe.ffn.router_fp32_weight"].count == 8 * 64 * 4
    assert rows["decoder.moe.ffn.router_fp32_input"].repeat == 3  # the MoE layers
    fp32 = activation_breakdown(spec, 2, 64, act_bytes=4, device="cpu", attention="sdpa")
    assert not any("router_fp32" in i.name for i in fp32.items)  # no-op casts


def _names(config: str, **kw: object) -> dict[str, int]:
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
    kw.setdefault("experts", "eager")  # as the fixtures were measured
    b = activation_breakdown(spec, 2, 64, act_bytes=2, device="cpu",  # type: ignore[arg-type]
                             attention="eager", dropout=spec.trains_with_dropout, **kw)
    return {i.name: i.count for i in b.items}


def test_opt_drops_hidden_states_not_attention_probabilities() -> None:
    # OPT's dropout is 0.1 and its attention_dropout 0.0: residual masks, no mask on
    # the probabilities (one dropout switch for everything would count one: +112 %)
    names = _names("opt-nobias-post.json")
    assert "decoder.attn.residual_dropout_mask" in names
    assert not any("attn.dropout_mask" in n for n in names)


def test_mixtral_keeps_the_routed_tokens_and_the_expert_outputs() -> None:
    # transformers' expert loop indexes each expert's tokens (a copy) and scales
    # its output (kept by the mul): top_k · B·T·d_model each (−31 % without them)
    names = _names("mixtral-top1.json")
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "mixtral-top1.json")
                                   .read_text()))
    want = spec.top_k * 2 * 64 * spec.d_model * 2
    assert names["decoder.ffn.routed_input"] == names["decoder.ffn.expert_output"] == want


def _error(config: str, dtype: str = "") -> float:
    rows = [r for r in MEASURED if r["config"] == config and dtype in r["dtype"]]
    assert rows
    return max(abs(_estimate(r) - r["measured_bytes"]) / r["measured_bytes"] for r in rows)


def test_the_expert_loop_keeps_what_index_add_adds_back() -> None:
    # transformers 5.23's eager expert loop ends each expert with final.index_add_(0,
    # token_idx, scaled_output): IndexAddBackward0 saves that source, a third top_k ·
    # B·T·d_model beside the routed copy and the output the weight's mul keeps, and
    # torch.where's (slot, token) int64 pairs (the saved_tensors_hooks listing of
    # MiMoV2FlashForCausalLM, mimo_v2_flash-types.json: per expert (n,) int64 of 16·n bytes
    # and three (n, 48) fp32 tensors). Without them these MoE families would be −4.5 to −7.6 %.
    names = _names("mixtral-top1.json")
    assert names["decoder.ffn.expert_scatter"] == 1 * 2 * 64 * (256 * 2 + 20)  # top 1, bf16
    for config in ("mixtral-top1.json", "hy_v3-tiny.json", "gpt_oss-tied-nobias.json",
                   "deepseek_v3-no-q-lora-bias.json", "mimo_v2_flash-tiny.json"):
        assert _error(config) <= 0.02, config


def test_grouped_mm_experts_keep_the_sort_order_not_a_scatter_source() -> None:
    # transformers 5.23's default (get_correct_experts_implementation: grouped_mm) sorts the
    # routed slots by expert and sums them back by reshape: no index_add_, so no third
    # top_k · B·T·d_model; perm // top_k, perm and inv_perm (int64), the fp32 weights and the
    # int32 offsets instead (the listing of MixtralForCausalLM, mixtral-top1.json, bf16,
    # B=2, T=64: three (128,) int64, a (128, 1) fp32, a (4,) int32)
    grouped = _names("mixtral-top1.json", experts="grouped_mm")
    assert "decoder.ffn.expert_scatter" not in grouped
    assert grouped["decoder.ffn.expert_order"] == 1 * 2 * 64 * 28 + 4 * 4
    spec = spec_from_hf({"model_type": "mixtral"})
    auto = activation_breakdown(spec, 1, 16, act_bytes=2, device="cpu")
    assert any(i.name.endswith("expert_order") for i in auto.items)  # auto: grouped_mm
    assert any("grouped_mm path (this class's default)" in n for n in auto.notes)
    for config in ("mixtral-top1.json", "qwen3_moe-sparse-step.json", "hy_v3-tiny.json",
                   "gpt_oss-tied-nobias.json", "deepseek_v3-no-q-lora-bias.json"):
        rows = [r for r in MEASURED if r["config"] == config and "experts" in r]
        assert len(rows) >= 4 and all(r["experts"] == "grouped_mm" for r in rows)
        assert max(abs(_estimate(r) - r["measured_bytes"]) / r["measured_bytes"]
                   for r in rows) <= 0.02, config


def test_a_class_without_a_grouped_path_runs_its_own_loop() -> None:
    # Llama4TextExperts has no @use_experts_implementation (transformers 5.23)
    from transformer_calc.errors import TcalcError

    spec = spec_from_hf({"model_type": "llama4_text"})
    assert spec.n_experts and not spec.experts_grouped
    b = activation_breakdown(spec, 1, 16, act_bytes=2, device="cpu")
    assert not any(i.name.endswith("expert_order") for i in b.items)
    assert any(n.startswith("experts run transformers' every_expert path") for n in b.notes)
    assert activation_breakdown(spec, 1, 16, act_bytes=2, device="cpu", experts="eager").total \
        == b.total  # its eager forward is that path
    with pytest.raises(TcalcError, match="--experts grouped_mm"):
        activation_breakdown(spec, 1, 16, act_bytes=2, device="cpu", experts="grouped_mm")
    with pytest.raises(TcalcError, match="--experts: expected one of auto, grouped_mm, eager"):
        activation_breakdown(spec, 1, 16, act_bytes=2, device="cpu", experts="loop")


def test_a_class_without_a_grouped_path_may_loop_over_the_experts_hit() -> None:
    # LongcatFlashExperts has no @use_experts_implementation either, but its forward loops
    # over the experts hit (transformers 5.23): eager's rows, not Llama 4's every-expert path
    from transformer_calc.errors import TcalcError

    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "longcat_flash-tiny.json")
                                   .read_text()))
    assert spec.n_experts and not spec.experts_grouped and not spec.experts_every_token
    b = activation_breakdown(spec, 1, 16, act_bytes=2, device="cpu")
    assert any(n.startswith("experts run transformers' eager path") for n in b.notes)
    assert b.total == activation_breakdown(spec, 1, 16, act_bytes=2, device="cpu",
                                           experts="eager").total
    with pytest.raises(TcalcError, match="its own loop over the experts"):
        activation_breakdown(spec, 1, 16, act_bytes=2, device="cpu", experts="grouped_mm")


def test_llama4_runs_every_expert_norms_qk_without_weight_and_masks_its_chunks() -> None:
    # Llama4TextMoe repeats the tokens once per expert and scales them by the router's scores
    # (every expert runs every token: -29 to -37 % when counted as top-k routing);
    # Llama4TextL2Norm keeps Q's and K's fp32 copies and 1/rms in the RoPE layers; under SDPA
    # the chunked layers pass an explicit (B, 1, T, T) mask and K/V repeated to every head
    # (measured: activations_decoders_encoders_cpu.jsonl, llama4_text-chunked.json)
    rows = [r for r in MEASURED if r["config"] == "llama4_text-chunked.json"]
    assert len(rows) == 8
    for r in rows:
        error = abs(_estimate(r) - r["measured_bytes"]) / r["measured_bytes"]
        assert error <= (0.01 if r["attention"] == "eager" else 0.04), r
    names = _names("llama4_text-chunked.json")
    assert names["decoder.chunked.moe.attn.q_l2norm"] == 2 * 64 * 4 * 17 * 4
    assert "decoder.nope.moe.attn.q_l2norm" not in names  # NoPE layers skip it


def test_the_sweep_variants_hold_tightly() -> None:
    # each of these is 8 to 58 % off without its own rule (activations_sweep_variants_cpu.jsonl):
    # within 1 % for the exact ones, 4 % for the rest
    for config, bound in (("biogpt-tiny.json", 0.01), ("ctrl-tiny.json", 0.01),
                          ("gpt_neo-local.json", 0.01), ("xlm-tiny.json", 0.01),
                          ("cohere-qknorm.json", 0.01), ("cohere2-tiny.json", 0.01),
                          ("cohere2_moe-tiny.json", 0.01), ("flint-tiny.json", 0.01),
                          ("granite_swa-tiny.json", 0.01),
                          ("granitemoe_swa-tiny.json", 0.01),
                          ("stablelm-parallel.json", 0.01),
                          ("vaultgemma-tiny.json", 0.01),
                          ("persimmon-qknorm.json", 0.01),
                          ("minimax_m3_vl_text-tiny.json", 0.03),
                          ("nemotron_h-tiny.json", 0.03),
                          ("falcon_h1-nonorm.json", 0.01),
                          ("olmo-tiny.json", 0.02),
                          ("nanochat-tiny.json", 0.02), ("gptj-tiny.json", 0.02),
                          ("internlm3-tiny.json", 0.03), ("codegen-tiny.json", 0.04),
                          ("openai-gpt-tiny.json", 0.04), ("phimoe-top1.json", 0.04)):
        assert _error(config) <= bound, config


def test_deberta_keeps_a_mask_per_layer_and_what_each_disentangled_term_gathers() -> None:
    # the autograd graph's saved tensors (walked from the loss; torch 2.13.0, transformers
    # 5.23.0, DebertaV2ForMaskedLM, eager, fp32, B=2, T=64): with pos_att_type unset
    # (deberta-v2-relative.json) each layer keeps its (2, 1, 64, 64) bool mask, 8,192 bytes,
    # and nothing of the relative table (its projections' outputs are unused, freed); with
    # c2p and p2c (deberta-v2-c2p-p2c.json: share_att_key, 16 buckets, a 32-row table) each
    # layer also keeps the table after its dropout (32, 32) and that dropout's mask (4,096
    # bytes each), per term the projected table repeated (8, 32, 8) (8,192), the scores it
    # gathers from (8, 64, 32) (65,536) and the int64 index (64, 64) (32,768), and K for
    # p2c (8, 64, 8) (16,384); the table's LayerNorm keeps its statistics once (2 · 128)
    def rows(name: str) -> dict:  # type: ignore[type-arg]
        spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / name).read_text()))
        return {i.name: i for i in activation_breakdown(spec, 2, 64, act_bytes=4,
                                                        device="cpu").items}

    plain = rows("deberta-v2-relative.json")
    assert plain["encoder.attn.relative_mask"].count == 8_192
    assert not any(n.startswith(("encoder.attn.relative_t", "embed.relative"))
                   for n in plain)
    both = rows("deberta-v2-c2p-p2c.json")
    assert [both[f"encoder.attn.relative_{n}"].count for n in (
        "mask", "table", "table_dropout_mask", "tables", "terms", "p2c_key")] == [
        8_192, 4_096, 4_096, 2 * 8_192, 2 * (65_536 + 32_768), 16_384]
    assert both["encoder.attn.relative_terms"].repeat == 2
    assert both["embed.relative_table_norm.stats"].count == 256
    # in bf16 on the CPU the statistics are bf16: NativeLayerNormBackward0's (32, 1) result1
    # and result2, 64 bytes each (the same graph walk, bf16)
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "deberta-v2-c2p-p2c.json")
                                   .read_text()))
    bf16 = activation_breakdown(spec, 2, 64, act_bytes=2, device="cpu")
    assert bf16.get("embed.relative_table_norm.stats").count == 128


def test_deberta_v1_slices_its_table_copies_q_and_k_per_term_and_norms_by_hand() -> None:
    # the saved tensors alive after the forward, attributed to the module saving them
    # (torch 2.13.0, transformers 5.23.0, DebertaForMaskedLM, eager, deberta-relative.json:
    # a 96-row table, both terms; tools/measure_activations_hf.py gives the totals of
    # activations_deberta_falcon_opt_cpu.jsonl): at T=40 each term projects 2 · 40 = 80 rows,
    # (8, 8, 80) fp32 (20,480 bytes) and gathers from (2, 4, 40, 80) (102,400), the int64
    # index (40, 40) (12,800); the table after its dropout keeps all 96 rows (12,288). B=2:
    # the c2p matmul copies the query (8, 40, 8) and p2c the key, 10,240 each; B=1: neither
    # (the scores' query and the fused output's key are read as they are). DebertaLayerNorm
    # keeps x − mean twice in fp32, 1/std, and the normalised tensor cast back (bf16: 5,120
    # bytes of 2·40·32); the MLM head's nn.LayerNorm its input and two statistics
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "deberta-relative.json")
                                   .read_text()))

    def rows(B: int, a: int) -> dict:  # type: ignore[type-arg]
        return {i.name: i.count for i in activation_breakdown(spec, B, 40, act_bytes=a,
                                                              device="cpu").items}

    two = rows(2, 4)
    assert two["encoder.attn.relative_tables"] == 2 * 20_480
    assert two["encoder.attn.relative_terms"] == 2 * (102_400 + 12_800)
    assert two["encoder.attn.relative_table"] == 12_288
    assert two["encoder.attn.relative_c2p_query"] == two["encoder.attn.relative_p2c_key"] \
        == 10_240
    one = rows(1, 4)
    assert "encoder.attn.relative_c2p_query" not in one
    assert "encoder.attn.relative_p2c_key" not in one
    bf16 = rows(2, 2)
    assert bf16["encoder.attn.norm.fp32_terms"] == 2 * 2 * 40 * 32 * 4
    assert bf16["encoder.attn.norm.normalized"] == 5_120
    assert bf16["head.mlm.norm.input"] == 5_120 and bf16["head.mlm.norm.stats"] == 320
    # under torch autocast the residual stream is fp32, so the normalised tensor is cast back
    # to fp32 (DebertaLayerNorm's input_type; from the modelling code, not measured there)
    amp = {i.name: i.count for i in activation_breakdown(spec, 2, 40, act_bytes=2,
                                                         device="cuda", amp=True).items}
    assert amp["encoder.attn.norm.normalized"] == 2 * 40 * 32 * 4
    # past max_relative_positions the slice stops growing: 2 · 24 rows at T=64
    c2p = spec_from_hf(json.loads((DATA / "hf" / "variants" / "deberta-c2p-absolute.json")
                                  .read_text()))
    assert c2p.rel_rows(64) == 48 and c2p.rel_rows(10) == 20


def test_falcon_under_sdpa_keeps_its_explicit_masks_and_broadcast_heads() -> None:
    # walked (transformers 5.23, FalconForCausalLM, SDPA, fp32, B=2, T=64): FalconModel
    # always builds the causal mask (allow_is_causal_skip=False), so each layer's call keeps
    # its (2, 1, 64, 64) fp32 copy (16,384 bytes); with ALiBi the mask is the (2, 8, 64, 64)
    # bias, one tensor for every layer (131,072); _split_heads broadcasts K and V to the 8
    # heads, so the kernel keeps Q, K and V of 8 heads (3 · 32,768 each layer)
    def rows(name: str) -> dict:  # type: ignore[type-arg]
        spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / name).read_text()))
        return {i.name: i for i in activation_breakdown(
            spec, 2, 64, act_bytes=4, device="cpu", attention="sdpa",
            dropout=spec.trains_with_dropout).items}

    rope = rows("falcon-new-rope.json")
    assert rope["decoder.attn.mask"].count == 2 * 64 * 64 * 4
    assert rope["decoder.attn.qkv"].count == 3 * 2 * 64 * 8 * 32 * 4
    alibi = rows("falcon-alibi-new-1ln.json")
    assert "decoder.attn.mask" not in alibi
    assert alibi["attn.alibi_mask"].count == 2 * 8 * 64 * 64 * 4
    assert alibi["attn.alibi_mask"].repeat == 1
    old = rows("falcon-sequential-bias.json")
    assert old["decoder.attn.mask"].count == 2 * 64 * 64 * 4


def test_deberta_v1_within_a_fifth_of_a_percent() -> None:
    # activations_deberta_falcon_opt_cpu.jsonl: every DeBERTa v1 case (the rest is the labels
    # tensor the tool shares with the inputs, the embeddings' (B, T, 1) mask and 0-d scales)
    rows = [r for r in MEASURED if r["config"].startswith("deberta-") and "-v2" not in
            r["config"]]
    assert len(rows) == 14
    for row in rows:
        error = (_estimate(row) - row["measured_bytes"]) / row["measured_bytes"]
        assert abs(error) <= 0.002, (row["config"], row["B"], row["dtype"], f"{error:+.2%}")


def test_umt5_keeps_a_bucket_index_per_self_attention_and_relu_its_result() -> None:
    # the autograd graph's saved tensors (UMT5ForConditionalGeneration, umt5.json drawn by
    # the registry, eager, fp32, B=2, T=32; torch 2.13.0, transformers 5.23.0): three
    # EmbeddingBackward0 (32, 32) int64 indices, one per self-attention (each layer owns its
    # bias table), and three ReluBackward0 (2, 32, 64) results beside the dropout's output
    # that wo reads: 73,728 bytes tcalc lacked (-11.8 %; within 0.8 % after, in the 16 cases
    # of umt5-tiny.json and mt5-tiny.json)
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "umt5-tiny.json").read_text()))
    rows = {i.name: i for i in activation_breakdown(spec, 2, 32, act_bytes=4,
                                                    device="cpu").items}
    assert [(rows[f"{s}.attn.relative_buckets"].count, rows[f"{s}.attn.relative_buckets"]
             .repeat) for s in ("encoder", "decoder")] == [(8_192, 2), (8_192, 1)]
    assert "decoder.cross.relative_buckets" not in rows
    assert rows["encoder.ffn.activation"].count == 2 * 32 * 64 * 4
    no_dropout = {i.name for i in activation_breakdown(spec, 2, 32, act_bytes=4, device="cpu",
                                                       dropout=False).items}
    assert "encoder.ffn.activation" not in no_dropout  # ReLU's result is then wo's input


def test_xglm_keeps_its_clamped_scores_and_a_bf16_softmax() -> None:
    # the autograd graph's saved tensors (XGLMForCausalLM, xglm-tiny.json, eager, B=2, T=32;
    # torch 2.13.0, transformers 5.23.0): each layer's MaximumBackward0 keeps the masked
    # scores (2, 2, 32, 32), 16,384 bytes in fp32, 8,192 in bf16; its softmax upcasts fp16
    # scores only, so in bf16 SoftmaxBackward0 keeps a bf16 (4, 32, 32) result. Without these
    # rules tcalc would be -8.8 % in fp32 (and right in bf16 only by two errors cancelling)
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "xglm-tiny.json").read_text()))
    assert spec.scores_clamped and not spec.softmax_fp32
    for a in (4, 2):
        rows = {i.name: i for i in activation_breakdown(spec, 2, 32, act_bytes=a,
                                                        device="cpu").items}
        assert rows["decoder.attn.scores_clamp_input"].count == 2 * 2 * 32 * 32 * a
        assert rows["decoder.attn.softmax"].count == 2 * 2 * 32 * 32 * a
    assert not spec_from_hf(json.loads((DATA / "hf" / "variants" / "llama-head-dim.json")
                                       .read_text())).scores_clamped


def test_gte_drops_out_its_ffn_and_ibert_writes_its_layernorms_out() -> None:
    # the autograd graph's saved tensors (torch 2.13.0, transformers 5.23.0, eager, fp32,
    # B=2, T=32): GteMLP drops out the gated product before down_proj (MulBackward0's
    # (2, 32, 24) mask per layer, 6,144 bytes: -6.4 to -7.5 % without it); I-BERT's
    # IntLayerNorm outside quant mode keeps x − mean and the normalised tensor (2, 32, 16)
    # and sqrt(eps + var) (2, 32, 1), 8,448 bytes per norm, where nn.LayerNorm keeps 4,608
    # (-6.9 % before); its MLM head's norm is an nn.LayerNorm
    def rows(name: str, a: int = 4) -> dict:  # type: ignore[type-arg]
        spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / name).read_text()))
        return {i.name: i for i in activation_breakdown(spec, 2, 32, act_bytes=a,
                                                        device="cpu").items}

    assert rows("gte-tiny.json")["encoder.ffn.inner_dropout_mask"].count == 2 * 32 * 24 * 4
    ibert = rows("ibert-tiny.json")
    assert ibert["encoder.attn.norm.terms"].count + ibert["encoder.attn.norm.std"].count \
        == 8_448
    assert "head.mlm.norm.stats" in ibert and "head.mlm.norm.terms" not in ibert


def test_mla_with_a_narrower_value_runs_sdpas_math_kernel_on_the_cpu() -> None:
    # MiniCPM3ForCausalLM (minicpm3-tiny.json: d_nope + d_rope = 96, d_v = 8), SDPA on the CPU,
    # B=2, T=32 (torch 2.13.0, transformers 5.23.0): its autograd graph holds
    # SafeSoftmaxBackward0, the math kernel's (the CPU flash kernel takes one head width),
    # with fp32 Q, K and probabilities in bf16 (-7.2 % while read as flash); and with two
    # sequences the A·V matmul copies V alone, (4, 32, 8), not kv_b's whole output
    from transformer_calc.memory import attention_kernel

    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "minicpm3-tiny.json")
                                   .read_text()))
    assert attention_kernel(spec, "sdpa", "cpu", 2, False) == "math"
    ds = spec_from_hf(json.loads((DATA / "hf" / "variants" / "deepseek_v3-no-q-lora-bias.json")
                                 .read_text()))  # d_nope + d_rope = d_v = 12
    assert attention_kernel(ds, "sdpa", "cpu", 2, False) == "cpu_flash"
    rows = {i.name: i for i in activation_breakdown(spec, 2, 32, act_bytes=4, device="cpu",
                                                    attention="eager").items}
    assert rows["decoder.attn.v"].count == 2 * 32 * 2 * 8 * 4
    one = {i.name: i for i in activation_breakdown(spec, 1, 32, act_bytes=4, device="cpu",
                                                   attention="eager").items}
    assert one["decoder.attn.v"].count == 32 * 2 * (64 + 8) * 4  # kv_b's output, whole


def test_gated_attention_in_fp32_keeps_q_projs_whole_output() -> None:
    # Qwen3_5MoeForCausalLM (qwen3_5_moe_text-attn.json, eager, fp32, B=2, T=32; torch 2.13.0,
    # transformers 5.23.0): q_norm's pow keeps a (2, 32, 8, 8) view whose storage is q_proj's
    # whole (query, gate) output, 32,768 bytes, not the query's 16,384; in bf16 its
    # .to(float32) copies the query alone (-7.4 % before, within 4 % after)
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "qwen3_5_moe_text-attn.json")
                                   .read_text()))
    fp32 = {i.name: i for i in activation_breakdown(spec, 2, 32, act_bytes=4, device="cpu",
                                                    attention="eager").items}
    assert fp32["decoder.attn.q_proj_gate_half"].count == 2 * 32 * 8 * 8 * 4
    assert fp32["decoder.attn.q_norm.input_fp32"].count == 2 * 32 * 8 * 8 * 4
    bf16 = {i.name for i in activation_breakdown(spec, 2, 32, act_bytes=2, device="cpu",
                                                 attention="eager").items}
    assert "decoder.attn.q_proj_gate_half" not in bf16


def test_mla_in_16_bit_keeps_the_norms_fp32_copies_not_the_projections_outputs() -> None:
    # DeepSeek-V3.2 in bf16 (measured listing: kv_a_layernorm keeps a (B, T, kv_lora_rank)
    # fp32 copy, 1/rms and the normed latent; kv_a's own bf16 output is not kept; with SDPA's
    # math kernel V's fp32 copy is d_v wide): +4.8 / +5.9 % before, within 2 % after
    assert _error("deepseek_v32-tiny.json", "bf16") <= 0.02
    assert _error("glm_moe_dsa-tiny.json", "bf16") <= 0.02


def test_sinks_widen_the_softmax_and_the_row_max_keeps_its_indices() -> None:
    # the saved_tensors_hooks listing of MiMoV2FlashForCausalLM (mimo_v2_flash-types.json,
    # eager, fp32, B=2, T=64; torch 2.13.0, transformers 5.23.0): a sliding layer keeps its
    # probabilities as (2, 4, 64, 65) fp32 = 133,120 bytes (the sink column), a full layer
    # (2, 4, 64, 64) = 131,072; each keeps max's indices (2, 4, 64, 1) int64 = 4,096 bytes
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "mimo_v2_flash-types.json")
                                   .read_text()))
    assert spec.softmax_sink_column and spec.softmax_row_max
    rows = {i.name: i.count for i in activation_breakdown(spec, 2, 64, act_bytes=4,
                                                          device="cpu").items}
    assert rows["decoder.sliding.moe.attn.softmax"] == 133_120
    assert rows["decoder.full.dense.attn.softmax"] == 131_072
    assert rows["decoder.full.dense.attn.row_max_indices"] == 4_096
    plain = spec_from_hf({"model_type": "qwen3"})
    assert not (plain.softmax_sink_column or plain.softmax_row_max)


def test_t5_layernorm_keeps_its_16_bit_input_beside_the_fp32_copy() -> None:
    # T5LayerNorm computes the variance from an fp32 copy but multiplies the input
    # itself by rsqrt, so in bf16 both are kept (−8.2 % in bf16 before, −0.1 % after)
    names = _names("t5-gated-asym.json")
    assert names["encoder.attn.norm.input"] == 2 * 64 * 256 * 2  # B·T·d_model · 2
    assert "encoder.attn.norm.input_fp32" in names
    assert "decoder.attn.norm.input" not in _names("llama-head-dim.json")  # Llama: the copy


def test_t5_keeps_its_bucket_index_and_its_extra_dropouts() -> None:
    # T5's T×T int64 relative-position buckets, dropout inside the FFN and after
    # each stack's final norm
    names = _names("t5-gated-asym.json")
    assert names["embed.relative_buckets"] == 64 * 64 * 8
    assert "encoder.ffn.inner_dropout_mask" in names and "encoder.final_dropout_mask" in names


def test_the_per_architecture_table_is_generated_from_the_fixtures() -> None:
    from conftest import load_tool

    doc = (DATA.parents[1] / "docs" / "activations_by_architecture.md").read_text()
    assert doc == load_tool("activation_errors").render(), \
        "run: python tools/activation_errors.py > docs/activations_by_architecture.md"


def test_attention_dropout_alone_keeps_no_residual_masks() -> None:
    """GPTNeoXJapaneseConfig: attention_dropout 0.1, hidden_dropout 0.0 (transformers 5.23):
    the attention probabilities' mask and output are kept, no residual or embedding masks
    (within 0.4 % of the measurement in activations_decoders_encoders_cpu.jsonl)."""
    spec = spec_from_hf({"model_type": "gpt_neox_japanese"})
    assert (spec.dropout, spec.attention_dropout, spec.trains_with_dropout) == (0.0, 0.1, True)
    names = [i.name for i in activation_breakdown(spec, 1, 64, act_bytes=2, device="cpu",
                                                   dropout=True).items]
    assert any(n.endswith("attn.dropout_mask") for n in names)
    assert not any("residual_dropout" in n or n == "embed.dropout_mask" for n in names)


def test_gemma2_keeps_both_soft_cappings_tanh_outputs() -> None:
    """Gemma2Config's attn_logit_softcapping 50 and final_logit_softcapping 30 (transformers
    5.23): each tanh keeps its output, a scores-sized tensor per layer and a B·T·vocab one;
    without them the estimate would be −8.5 to −20.5 % (activations_decoders_encoders_cpu.jsonl)."""
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "gemma2-bias-untied.json")
                                   .read_text()))
    assert (spec.attn_softcapping, spec.logit_softcapping) == (50.0, 30.0)
    rows = {i.name: i for i in activation_breakdown(spec, 1, 64, act_bytes=2, device="cpu",
                                                    dropout=False).items}
    assert rows["head.softcap_tanh"].total == 64 * 100 * 2
    tanh = [r for n, r in rows.items() if n.endswith("attn.softcap_tanh")]
    assert tanh and all(r.count == 4 * 64 * 64 * 2 for r in tanh)


@pytest.mark.parametrize("config", ["modernbert-tiny.json", "modernbert-decoder-tiny.json",
                                    "bert-untied.json", "roberta-untied.json"])
def test_prediction_head_and_sliding_mask_close_the_gap(config: str) -> None:
    """Measured (activations_decoders_encoders_cpu.jsonl, activations_families_cpu.jsonl): the MLM
    prediction head keeps its dense output (the activation's input), the norm's input and
    statistics and the decoder's input; under SDPA the sliding layers' explicit (B, 1, T, T)
    mask is kept once. Without them ModernBERT would be −9.1 to −2.5 %, BERT and RoBERTa −6.2 to
    −3.3 %; with them every case is within 2 %."""
    rows = [r for r in MEASURED if r["config"] == config]
    assert len(rows) == 8
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
    for r in rows:
        est = activation_breakdown(spec, r["B"], r["T"], act_bytes=2 if r["dtype"] == "bf16"
                                   else 4, device="cpu", attention=r["attention"],
                                   dropout=spec.trains_with_dropout).total
        assert abs(est / r["measured_bytes"] - 1) < 0.02, r


def test_each_sliding_layer_keeps_its_own_mask_once_the_window_is_reached() -> None:
    """masking_utils._ignore_causal_mask_sdpa (transformers 5.23) skips the mask while the
    keys fit the window; from T = window on, SDPA is given a (B, 1, T, T) bool mask, which
    scaled_dot_product_attention converts to the query's dtype on every call: each sliding
    layer keeps its own copy. Walked (autograd's saved tensors, torch 2.13.0+cpu,
    transformers 5.23.0, sdpa, B=1 T=128): ModernBERT's encoder and decoder variants (one
    sliding layer) keep one (1, 1, 128, 128) attn_mask, Ministral's (two) two, Gemma 4's
    (three, one of them sharing K/V) three. ModernBERT's windows: the decoder's 128, the
    encoder's half window, 128, of 257 keys."""
    for config, window, layers in (("modernbert-decoder-tiny.json", 128, 1),
                                   ("modernbert-tiny.json", 257, 1),
                                   ("ministral-tiny.json", 16, 2),
                                   ("gemma4_text-tiny.json", 32, 3)):
        spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
        assert spec.sliding_window == window
        reach = 128 if window == 257 else window
        for T, kept in ((reach - 1, False), (reach, True), (128, True)):
            items = activation_breakdown(spec, 2, T, act_bytes=2, device="cpu",
                                         attention="sdpa", dropout=False).items
            masks = [i for i in items if i.name.endswith("attn.mask")]
            assert sum(i.repeat for i in masks) == (layers if kept else 0), (config, T)
            assert all(i.count == 2 * T * T * 2 for i in masks)


# tools/measure_activations_hf.py's measure() (torch 2.13.0+cpu, transformers 5.23.0, the
# saved tensors still held after the forward), on variant configs changed from the files
# named: T5 with gated-relu (ReLU's result is act(gate), which the product keeps beside up:
# a result-keeping activation keeps one tensor more when gated, -7.8 % without it), and
# DeBERTa with one disentangled term (p2c keeps K, c2p does not)
CHANGED_VARIANTS = [
    ("t5-gated-asym.json", {"feed_forward_proj": "gated-relu"}, "eager", "fp32", 2, 64,
     13_430_276),
    ("t5-gated-asym.json", {"feed_forward_proj": "gated-relu"}, "eager", "bf16", 1, 128,
     9_373_186),
    ("t5-gated-asym.json", {"feed_forward_proj": "gated-relu"}, "sdpa", "fp32", 2, 64,
     13_434_372),
    ("t5-gated-asym.json", {"feed_forward_proj": "gated-relu"}, "sdpa", "bf16", 1, 128,
     11_601_410),
    ("deberta-v2-c2p-p2c.json", {"pos_att_type": ["c2p"]}, "eager", "fp32", 2, 64, 1_613_588),
    ("deberta-v2-c2p-p2c.json", {"pos_att_type": ["p2c"]}, "eager", "fp32", 2, 64, 1_646_356),
]


@pytest.mark.parametrize("name, changes, attention, dtype, B, T, measured", CHANGED_VARIANTS)
def test_changed_variants_match_what_pytorch_saves(name: str, changes: dict, attention: str,
                                                   dtype: str, B: int, T: int,
                                                   measured: int) -> None:
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / name).read_text()) | changes)
    est = activation_breakdown(spec, B, T, act_bytes=4 if dtype == "fp32" else 2,
                               device="cpu", attention=attention,
                               dropout=spec.trains_with_dropout).total
    assert abs(est - measured) / measured <= 0.002, (est, measured)


@pytest.mark.parametrize("row", [r for r in MEASURED if r["config"].startswith("longt5")],
                         ids=lambda r: f"{r['config'][:-5]}-{r['dtype']}-B{r['B']}-T{r['T']}")
def test_longt5_local_attention_to_a_few_bytes(row: dict) -> None:
    # LongT5LocalAttention computes blocks of local_radius + 1 queries against three blocks
    # of keys, the sequence padded to whole blocks (at T=64 the default block of 128 keeps
    # (B, 1, H, 128, 384) probabilities). The measurement passes the input ids as the labels,
    # one storage, which a seq2seq loss keeps as they are (tcalc counts the labels apart: a
    # B·T int64 tensor); beyond that, within a few scalars' bytes
    extra = row["B"] * row["T"] * 8
    assert abs(_estimate(row) - row["measured_bytes"] - extra) <= 8


def test_longt5s_local_attention_is_eager_whatever_the_implementation() -> None:
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "longt5-local.json").read_text()))
    rows = {}
    for attention in ("eager", "sdpa"):
        b = activation_breakdown(spec, 2, 30, act_bytes=2, device="cuda", attention=attention)
        rows[attention] = {i.name: i.count for i in b.items if i.name.startswith("encoder.attn")}
        assert any("local attention" in n for n in b.notes) == (attention == "sdpa")
    assert rows["eager"] == rows["sdpa"]
    # B=2, T=30 padded to 32, 4 heads of 16, blocks of 8: fp32 probabilities of 3 blocks
    assert rows["sdpa"]["encoder.attn.softmax"] == 2 * 4 * 32 * 24 * 4
    assert rows["sdpa"]["encoder.attn.kv_blocks"] == 2 * 3 * 2 * 32 * 4 * 16 * 2


def test_longt5s_global_tokens_norm_counts_global_tokens_whatever_the_norm() -> None:
    # LongT5's global_input_layer_norm runs over B · (T // global_block_size) vectors; a
    # LayerNorm there (a YAML spec may ask for one) keeps its statistics per global token
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "longt5-tglobal.json")
                                   .read_text())).replace(norm="layernorm")
    rows = {i.name: i.count for i in activation_breakdown(spec, 2, 30, act_bytes=2,
                                                          device="cuda").items}
    G = 30 // 4
    assert rows["encoder.attn.global_input_norm.input"] == 2 * G * 64 * 2
    assert rows["encoder.attn.global_input_norm.stats"] == 2 * 2 * G * 4  # mean, rstd: fp32
    assert rows["encoder.attn.norm.stats"] == 2 * 2 * 30 * 4


def test_yoso_keeps_its_expectation_matrix_not_a_softmax() -> None:
    # YosoCumulation (transformers 5.23) keeps the normalised Q and K, V, the B·H·T·T
    # expectation and an int32 mask; YOSO's attention applies no dropout. Measured
    # (activations_longt5_olmo_hybrid_cpu.jsonl): within 0.2 % beyond the labels alias and a
    # position-id slice of a buffer the measurement leaves out
    config = json.loads((DATA / "hf" / "variants" / "yoso-tiny.json").read_text())
    spec = spec_from_hf(config)
    assert spec.yoso_expectation
    rows = {i.name: i.count for i in activation_breakdown(spec, 2, 64, act_bytes=4,
                                                          device="cpu").items}
    assert rows["encoder.attn.expectation"] == 2 * 4 * 64 * 64 * 4
    assert "encoder.attn.softmax" not in rows and "encoder.attn.dropout_mask" not in rows
    for r in (r for r in MEASURED if r["config"] == "yoso-tiny.json"):
        # beyond the labels (the input ids themselves: B·T·8) and the position ids (a slice
        # of a buffer: T·8), within a few scalars' bytes
        extra = r["B"] * r["T"] * 8 + r["T"] * 8
        assert abs(_estimate(r) - r["measured_bytes"] - extra) <= 8, r
    from transformer_calc.errors import SpecError

    with pytest.raises(SpecError, match="use_expectation.*LSH"):
        spec_from_hf(config | {"use_expectation": False})


@pytest.mark.parametrize(("config", "without"), [("hunyuan_v1_dense-tiny.json", "+4.5 %"),
                                             ("nemotron-tiny.json", "-8.0 %"),
                                             ("ministral-tiny.json", "-4.4 %"),
                                             ("dots1-tiny.json", ""),
                                             ("hunyuan_v1_moe-tiny.json", ""),
                                             ("lfm2_moe-tiny.json", ""),
                                             ("longcat_flash-tiny.json", "+37.1 %"),
                                             ("dbrx-tiny.json", "-37.5 %"),
                                             ("kimi_linear-tiny.json", "-83.0 %"),
                                             ("kimi_linear-wide-heads.json", "")])
def test_moe_dense_kimi_types_within_one_and_a_half_percent(config: str, without: str) -> None:
    """activations_moe_dense_kimi_linear_cpu.jsonl (tools/measure_activations_hf.py, torch
    2.13.0+cpu, transformers 5.23.0), eight cases each, and the rules they check (`without`: the
    worst case without its rule): with one K/V head and one sequence eager attention keeps K and
    V as views of that head (Hunyuan's MQA variant; Llama's and Qwen3's alike); Nemotron's
    partial RoPE concatenates the rotated half (torch.cat((q_embed, q_pass))), so SDPA's output
    is copied for o_proj; every sliding layer keeps its own converted mask under SDPA
    (Ministral); LongCat-Flash's experts, without a grouped path, loop over the experts hit
    (not Llama 4's every-expert path); DBRX's clamp keeps the fused QKV projection's output,
    its router jitter the noise, and it softmaxes in fp32 (in bf16, without the three)."""
    rows = [r for r in MEASURED if r["config"] == config]
    assert len(rows) == 8
    for r in rows:
        assert abs(_estimate(r) / r["measured_bytes"] - 1) < 0.015, (r, without)


def test_a_fused_rotated_query_with_grouped_heads_keeps_no_fused_output() -> None:
    """Phi-3's fused qkv_proj with RoPE and 2 K/V heads of 4, eager, one sequence: the query is
    rotated into a tensor of its own and repeat_kv copies V, so the fused output is freed
    (walked: BmmBackward0 keeps a (4, 64, 16) query, no (1, 64, 128) projection output).
    Counted as GPT-2's un-rotated view it would be +3.8 % (activations_families_cpu.jsonl)."""
    rows = [r for r in MEASURED if r["config"] == "phi3-gqa-tied.json" and "lora" not in r]
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "phi3-gqa-tied.json")
                                   .read_text()))
    assert len(rows) >= 8 and spec.fused_qkv and spec.n_kv_heads < spec.n_heads
    for r in rows:
        assert abs(_estimate(r) / r["measured_bytes"] - 1) < 0.01, r
    one = activation_breakdown(spec, 1, 64, act_bytes=4, device="cpu", attention="eager",
                               dropout=spec.trains_with_dropout)
    assert not any(i.name.endswith("qkv_output") for i in one.items)
    assert any(i.name == "decoder.attn.q" for i in one.items)


@pytest.mark.parametrize("config", ["t5gemma-tiny.json", "t5gemma-untied.json"])
def test_t5gemma_within_half_a_percent(config: str) -> None:
    """activations_t5gemma_gemma3n_dsv4_cpu.jsonl (tools/measure_activations_hf.py, torch
    2.13.0+cpu, transformers 5.23.0), four eager cases each. T5Gemma's cross-attention soft-caps its
    scores as the self-attention does (T5GemmaCrossAttention passes attn_logit_softcapping): its
    tanh keeps a B·H·T·T output there too, not in self-attention only (-4.7 % in fp32 without it).
    With a window of 8 at T = 64 and 128 the eager layers still keep all T² scores."""
    rows = [r for r in MEASURED if r["config"] == config]
    assert len(rows) == 4 and {r["attention"] for r in rows} == {"eager"}
    for r in rows:
        assert abs(_estimate(r) / r["measured_bytes"] - 1) < 0.005, r
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
    acts = activation_breakdown(spec, 2, 64, act_bytes=4, device="cpu", attention="eager")
    assert acts.get("decoder.full.cross.softcap_tanh").count == 2 * spec.n_heads * 64 * 64 * 4


def test_classes_without_an_sdpa_path_say_so() -> None:
    """transformers 5.23 refuses attn_implementation="sdpa" for a class whose _supports_sdpa
    is false (hf_defaults.NO_SDPA, generated from it): every variant the measurement skipped
    for that reason is of such a type, and every one it measured with SDPA is not. tcalc still
    estimates an SDPA kernel there (code of one's own may run one) and says that transformers
    runs eager attention."""
    from transformer_calc.hf_defaults import NO_SDPA

    skipped = {r["config"] for r in FAMILY_ROWS if "skipped" in r
               and "does not support an attention implementation" in r["skipped"]}
    sdpa = {r["config"] for r in MEASURED if r["attention"] == "sdpa"}
    assert len(skipped) >= 20 and len(sdpa) >= 50
    for configs, expected in ((skipped, False), (sdpa, True)):
        for config in configs:
            spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
            model_type = json.loads((DATA / "hf" / "variants" / config).read_text())["model_type"]
            assert spec.sdpa_path is expected and (model_type not in NO_SDPA) is expected, config
    gemma2 = spec_from_hf(json.loads((DATA / "hf" / "gemma-2-9b.json").read_text()))
    llama = spec_from_hf(json.loads((DATA / "hf" / "llama-3-8b.json").read_text()))
    for spec, attention, said in ((gemma2, "sdpa", True), (gemma2, "eager", False),
                                  (llama, "sdpa", False)):
        notes = activation_breakdown(spec, 1, 64, act_bytes=2, attention=attention).notes
        assert any("no SDPA path" in n for n in notes) is said, (spec.name, attention)
    assert load_model("gemma-2-9b").sdpa_path is False
    assert load_model("gpt-oss-20b").sdpa_path is load_model("gpt-oss-120b").sdpa_path is False


@pytest.mark.parametrize(("config", "without"), [("gemma3n_text-tiny.json", "-40.0 %"),
                                             ("gemma3n_text-untied.json", "-33.9 %")])
def test_gemma3n_within_one_and_a_half_percent(config: str, without: str) -> None:
    """activations_t5gemma_gemma3n_dsv4_cpu.jsonl (tools/measure_activations_hf.py, torch
    2.13.0+cpu, transformers 5.23.0), eight cases each: AltUp's streams, router and coefficients,
    LAuReL, the sparsified FFN gate of the first layers, the model's stream projections and their
    magnitudes, and Gemma3nRMSNorm keeping its mean square (torch.pow), all counted (`without`: the
    worst case without them, with Gemma 4's layer rules alone)."""
    rows = [r for r in MEASURED if r["config"] == config]
    assert len(rows) == 8
    for r in rows:
        assert abs(_estimate(r) / r["measured_bytes"] - 1) < 0.015, (r, without)
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
    fp32 = activation_breakdown(spec, 2, 64, act_bytes=4, device="cpu", attention="eager")
    bf16 = activation_breakdown(spec, 2, 64, act_bytes=2, device="cpu", attention="eager")
    N, E = spec.altup_inputs, spec.d_model
    group = plan_of(spec).groups[0].name
    # the layer's input streams; in fp32 the input norm keeps the other predictions alive too
    assert fp32.get(f"{group}.altup.streams").count == N * 128 * E * 4
    assert fp32.get(f"{group}.altup.predictions").count == (N - 1) * 128 * E * 4
    assert not any(i.name.endswith("altup.predictions") for i in bf16.items)
    assert bf16.get(f"{group}.altup.innovation").count == N * 128 * E * 2
    # Gemma3nRMSNorm's torch.pow(mean_squared, -0.5) keeps the mean square; 16-bit, the
    # weight's fp32 copy too (walked: PowBackward0 (2, 64, 1), MulBackward0 (d_model,) fp32)
    assert fp32.get(f"{group}.attn.norm.mean_square").count == 128 * 4
    assert bf16.get(f"{group}.attn.norm.weight_fp32").count == E * 4
    assert not any(i.name.endswith("weight_fp32") for i in fp32.items)


@pytest.mark.parametrize("config", ["deepseek_v4-tiny.json", "deepseek_v4-types.json"])
def test_deepseek_v4_within_one_and_a_half_percent(config: str) -> None:
    """activations_t5gemma_gemma3n_dsv4_cpu.jsonl (tools/measure_activations_hf.py, torch
    2.13.0+cpu, transformers 5.23.0), six eager cases each (two with transformers' default
    grouped_mm experts): the hyper-connections (the streams, their weightless norm, every Sinkhorn
    division's input), the K=V head repeated to every head over the window and the compressed
    entries (with one sequence a view of the one head), the sink column and row max, the grouped
    output, the compressors' windows and softmax, and the experts' clamps."""
    rows = [r for r in MEASURED if r["config"] == config]
    assert len(rows) == 6 and {r.get("experts", "eager") for r in rows} == {"eager",
                                                                             "grouped_mm"}
    for r in rows:
        assert abs(_estimate(r) / r["measured_bytes"] - 1) < 0.015, r
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
    acts = activation_breakdown(spec, 2, 64, act_bytes=4, device="cpu", attention="eager")
    N, E, iters = spec.hc_streams, spec.d_model, spec.hc_sinkhorn_iters
    g = plan_of(spec).groups[0].name
    # 2 · 20 − 1 divisions, each keeping its (B·T, N, N) input and its sum, and the softmax
    assert acts.get(f"{g}.attn_hc.sinkhorn").count == \
        2 * iters * 128 * N * N * 4 + (2 * iters - 1) * 128 * N * 4
    assert acts.get(f"{g}.attn_hc.streams").count == N * 128 * E * 4


def test_the_walked_rows_of_gemma3n_and_deepseek_v4() -> None:
    """Rows too small for the totals' tolerance, pinned to what the autograd graph keeps
    (walked on the variants in transformers 5.23, B=2 T=64 fp32; the tensors named):
    Gemma 3n's correction keeps its (N, B, T, 1) coefficients and the clamped (N, N) weight
    (MulBackward0, MmBackward0) and a sparsified gate its output and its (B, T, 1) std
    (StdBackward0); DeepSeek-V4's probabilities carry the sink column ((2, 4, 64, 73): 64
    keys, 8 entries and the sink) and a Q layer copies its two series into windows twice as
    long ((2, 16, 8, 16), kept by the weighted sum)."""
    g3 = spec_from_hf(json.loads((DATA / "hf" / "variants" / "gemma3n_text-tiny.json")
                                 .read_text()))
    acts = activation_breakdown(g3, 2, 64, act_bytes=4, device="cpu", attention="eager")
    N, F = g3.altup_inputs, g3.d_ff
    assert acts.get("decoder.sliding.sparse.altup.correction_coefs").count == \
        (N * 128 + N * N) * 4
    assert acts.get("decoder.sliding.sparse.ffn.sparse_gate").count == 128 * F * 4 + 128 * 4
    v4 = spec_from_hf(json.loads((DATA / "hf" / "variants" / "deepseek_v4-tiny.json")
                                 .read_text()))
    acts = activation_breakdown(v4, 2, 64, act_bytes=4, device="cpu", attention="eager")
    assert acts.get("decoder.hca.attn.probs").count == 2 * 4 * 64 * 73 * 4
    assert acts.get("decoder.csa.attn.probs").count == 2 * 4 * 64 * 81 * 4
    assert acts.get("decoder.csa.attn.compressor_kv").count == 2 * 16 * 8 * 16 * 4
    assert acts.get("decoder.hca.attn.compressor_kv").count == 2 * 64 * 16 * 4
    # in bf16 the hyper head keeps fp32 copies of its projection, (2, 128), and of its
    # scale, (1,): 1,024 + 4 bytes (walked, deepseek_v4-tiny.json, B=2 T=64)
    bf16 = activation_breakdown(v4, 2, 64, act_bytes=2, device="cpu", attention="eager")
    assert bf16.get("head.hc.weight_fp32").count == 2 * 2 * 64 * 4 + 4


def test_diffllama_sdpa_keeps_a_second_value_copy_output_and_logsumexp() -> None:
    """DiffLlama under SDPA (the CPU's flash kernel, fp32, B=2 T=64, no dropout): the second
    call keeps its own V copy ((2, 2, 64, 16)), its output ((2, 4, 64, 16)) and its fp32
    log-sum-exp ((2, 4, 64)), walked in transformers 5.23's autograd graph
    (ScaledDotProductFlashAttentionForCpuBackward0's saved tensors, twice a layer)."""
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "diffllama-tiny.json")
                                   .read_text()))
    acts = activation_breakdown(spec, 2, 64, act_bytes=4, device="cpu", attention="sdpa",
                                dropout=False)
    assert acts.get("decoder.attn.second_map").count == (2 * 2 * 64 * 16 + 2 * 4 * 64 * 16) * 4 \
        + 2 * 4 * 64 * 4


def test_deepseek_v4_under_autocast_casts_the_input_per_projection() -> None:
    """Under torch autocast every linear casts its input to 16-bit and keeps the cast (the
    rule measured on an H100 for Llama-style attention, docs/peak_cuda_h100.md); DeepSeek-V4's
    normed input is read by q_a_proj and kv_proj, and in a compressed layer by the
    compressor's kv_proj and gate_proj (the indexer's casts lead to no gradient and are
    freed): 2 casts in a sliding layer, 4 in a compressed one (from the modelling code, not
    measured under autocast)."""
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "deepseek_v4-types.json")
                                   .read_text()))
    acts = activation_breakdown(spec, 2, 64, act_bytes=2, device="cuda", attention="eager",
                                amp=True)
    x = 2 * 64 * spec.d_model * 2
    assert acts.get("decoder.sliding.attn.input").count == 2 * x
    assert acts.get("decoder.hca.attn.input").count == 4 * x


def test_the_readme_counts_the_classes_without_sdpa() -> None:
    from transformer_calc.hf_defaults import NO_SDPA
    from transformer_calc.hf_encoders import LAYERED

    # (the encoders whose training memory tcalc refuses, hf_encoders.LAYERED, get no estimate
    # to say it of)
    estimated = NO_SDPA - set(LAYERED)
    readme = (DATA.parent.parent / "README.md").read_text()
    assert f"for the {len(estimated)} classes\ntransformers 5.23 runs with eager attention only" \
        in readme


def test_a_gated_shared_expert_keeps_the_gate_and_its_output() -> None:
    # walked (qwen2_moe-tiny.json, fp32, B=2, T=64): sigmoid(shared_expert_gate(x)) ·
    # shared_expert(x) keeps the (128, 1) sigmoid and the (128, 64) output, per MoE layer
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "qwen2_moe-tiny.json")
                                   .read_text()))
    rows = {i.name: i for i in activation_breakdown(spec, 2, 64, act_bytes=4, device="cpu",
                                                    attention="eager").items}
    assert rows["decoder.moe.ffn.shared_gate_product"].count == 2 * 64 * (64 + 1) * 4
    assert rows["decoder.moe.ffn.shared_gate_product"].repeat == 2


def test_the_rotary_pair_closes_the_llama_family_to_the_byte() -> None:
    # the model's rotary embedding keeps one (1, T, d_head) cos and sin pair for every layer
    # (saved_tensors_hooks, the fixtures' own rows: torch 2.13, transformers 5.23): with it
    # every Llama and Qwen2 row is within 12 bytes (the padded labels' extra int64 and a 0-d
    # total_weight), −0.14 to −1.05 % without
    rows = [r for r in MEASURED if r["config"] in ("llama-head-dim.json", "qwen2-untied.json")]
    assert len(rows) == 16
    for row in rows:
        assert 0 <= row["measured_bytes"] - _estimate(row) <= 12, row


def test_the_generation_cache_copies_v_where_neox_kept_its_fused_output() -> None:
    # tests/data/activations_neox_use_cache_cpu.jsonl: GPTNeoXForCausalLM from
    # neox-sequential-nobias.json, SDPA, fp32, CPU (torch 2.13.0, transformers 5.23.0),
    # saved_tensors_hooks as tools/measure_activations.py counts them, the same forward with
    # use_cache=True and False. With the cache, V is the cache's concatenated copy and the
    # fused QKV output (kept whole by V's view without it) dies: fewer bytes, not more
    rows = [json.loads(line) for line in
            (DATA / "activations_neox_use_cache_cpu.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / row["config"]).read_text()))
        for use_cache, key in ((True, "with_cache"), (False, "without_cache")):
            got = activation_breakdown(spec, row["B"], row["T"], act_bytes=4, device="cpu",
                                       attention="sdpa", dropout=spec.trains_with_dropout,
                                       use_cache=use_cache).total
            assert 0 <= row[key] - got <= 12, (row, use_cache)  # the labels' 4-12 bytes
        assert row["with_cache"] < row["without_cache"]
