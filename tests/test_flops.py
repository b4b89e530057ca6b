"""FLOPs, training cost and the inference roofline against published figures."""

from __future__ import annotations

import pytest

from transformer_calc import ModelSpec, count_params, load_model
from transformer_calc.flops import (
    AttentionPattern,
    count_flops,
    flops_report,
    roofline,
    training_flops_per_token,
    training_run,
)
from transformer_calc.hardware import get_gpu


def test_gpt2_forward_at_1024_by_hand() -> None:
    # Per token, 2 FLOPs per multiply-add, L = 12, E = 768, T = 1024, V = 50257:
    #   QKV 2·E·3E = 3,538,944; scores and A·V 2·E·T = 1,572,864 each; O 2·E² = 1,179,648;
    #   FFN 2·2·E·4E = 9,437,184; per layer 17,301,504; × 12 = 207,618,048;
    #   LM head 2·E·V = 77,194,752.  Forward = 284,812,800.
    b = count_flops(load_model("gpt2"), 1024)
    assert b.layer_total("decoder") == 17_301_504
    assert b.get("head.lm").total == 77_194_752
    assert b.total == 284_812_800
    assert training_flops_per_token(b) == 3 * 284_812_800


def test_recompute_costs() -> None:
    b = count_flops(load_model("gpt2"), 1024)
    assert training_flops_per_token(b, "full") == 4 * b.total
    # selective (Korthikanti et al. 2022): only the attention core is redone
    assert training_flops_per_token(b, "selective") == 3 * b.total + 12 * 2 * 1_572_864


def test_gpt3_training_flops_published() -> None:
    # Brown et al. 2020 / Kaplan's 6N·D: 175B on 300B tokens ≈ 3.14e23 FLOPs.
    spec = load_model("gpt3-175b")
    assert count_params(spec).total == 174_604_259_328
    r = flops_report(spec, 2048, tokens=300_000_000_000)
    assert r.rule_6n * 300e9 == pytest.approx(3.14e23, rel=0.005)
    # The itemised count adds attention over 2048 positions and the LM head: +3.1 %.
    assert r.run.total_flops == pytest.approx(3.14e23, rel=0.04)
    assert r.run.total_flops > r.rule_6n * 300e9


def test_chinchilla_default_tokens() -> None:
    # Hoffmann et al. 2022: Chinchilla, 70B parameters, 1.4T tokens (~20 per parameter).
    # (The paper's Table 4 shapes count 64.96B here, not the quoted 70B, so the published
    # pair is pinned directly.)
    run = training_run(6 * 70 * 10**9, 70 * 10**9, "A100-80GB")
    assert run.tokens == 1_400_000_000_000
    assert "Chinchilla" in run.tokens_source
    assert training_run(6, 123, None).tokens == 20 * 123


PALM_540B = ModelSpec(
    # Chowdhery et al. 2022, Table 1: 118 layers, d_model 18432, 48 heads of 256, d_ff 4·d,
    # SwiGLU, multi-query, parallel block, no biases, shared input/output embedding, 256k vocab.
    name="palm-540b", vocab_size=256_000, d_model=18432, n_layers=118, n_heads=48, d_head=256,
    n_kv_heads=1, d_ff=73728, ffn="gated", activation="silu", position="rope",
    norm="layernorm_nobias", parallel_block=True, bias_q=False, bias_k=False, bias_v=False,
    bias_o=False, bias_ffn_in=False, bias_ffn_out=False)


def test_palm_mfu_worked_example() -> None:
    # PaLM, App. B: 238.3K tokens/s on 6144 TPU v4 chips (275 TFLOP/s bf16) at T = 2048 is
    # 46.2 % MFU, with 6N + 12·L·H·Q·T FLOPs per token (N = 540.35B).
    n = count_params(PALM_540B).total
    assert n == pytest.approx(540.35e9, rel=0.001)
    paper = 6 * 540.35e9 + 12 * 118 * 48 * 256 * 2048
    run = training_run(round(paper), n, "TPU-v4", 6144, tokens_per_second=238.3e3)
    assert run.mfu == pytest.approx(0.462, abs=0.0005)
    # The itemised count agrees with the paper's formula within 0.3 %.
    r = flops_report(PALM_540B, 2048, gpu="TPU-v4", n_gpus=6144, tokens_per_second=238.3e3)
    assert r.training == pytest.approx(paper, rel=0.003)
    assert r.run.mfu == pytest.approx(0.462, abs=0.002)


def test_run_hours_and_days() -> None:
    run = training_run(6 * 10**9, 10**9, "A100-80GB", 8, tokens=10**12, mfu=0.5)
    seconds = 6e21 / (312e12 * 0.5)
    assert run.gpu_hours == pytest.approx(seconds / 3600)
    assert run.wall_days == pytest.approx(seconds / 8 / 86400)


@pytest.mark.parametrize("pattern", [
    AttentionPattern("local", window=4096),
    AttentionPattern("strided", block=4096),
    AttentionPattern("fixed", block=4096, summary=2),
    AttentionPattern("longformer", window=4096, global_tokens=4),
    AttentionPattern("bigbird", window=4096, global_tokens=4, random=3),
])
@pytest.mark.parametrize("T", [1, 7, 512, 1024, 4096])
def test_patterns_equal_dense_when_window_covers_sequence(pattern, T: int) -> None:
    spec = load_model("llama-3-8b")  # RoPE: no position table bounds T
    assert pattern.pairs(T) == T * T
    assert count_flops(spec, T, pattern).total == count_flops(spec, T).total


def test_patterns_pay_at_long_context() -> None:
    T = 32768
    assert AttentionPattern("local", window=512).pairs(T) == T * 512
    # Sparse Transformer with l = √T: about 2√T keys per query instead of T
    assert AttentionPattern("strided", block=181).pairs(T) == T * (181 + 182)
    assert AttentionPattern("fixed", block=128, summary=1).pairs(T) == T * (128 + 256)
    # Longformer: 512-window + 16 global tokens, which themselves see all T
    assert AttentionPattern("longformer", window=512, global_tokens=16).pairs(T) == (
        (T - 16) * 528 + 16 * T)
    assert AttentionPattern("bigbird", window=192, global_tokens=64, random=192).pairs(T) == (
        (T - 64) * 448 + 64 * T)


def test_roofline_decode_is_memory_bound_and_gqa_helps() -> None:
    spec = load_model("llama-3-8b")
    r = roofline(spec, "H100-80GB", batch=1, context=4096)
    assert r.prefill.bound == "compute" and r.decode.bound == "memory"
    n = count_params(spec).total
    kv = 2 * 32 * 8 * 128 * 2 * 4096  # K,V · layers · kv heads · d_head · bf16 · context
    assert r.decode.bytes == 2 * n + kv
    assert r.decode.seconds == pytest.approx(r.decode.bytes / 3.35e12)
    assert r.decode_mha is not None and r.decode_mha.bytes == 2 * n + kv * 4 + 2 * 2 * 32 * (
        4096 * 4096 - 4096 * 1024)
    assert r.decode.tokens_per_second > r.decode_mha.tokens_per_second


def test_moe_decode_reads_only_routed_experts() -> None:
    spec = load_model("mixtral-8x7b")
    one = roofline(spec, "H100-80GB", batch=1, context=1)
    big = roofline(spec, "H100-80GB", batch=64, context=1)
    p = count_params(spec)
    assert one.decode.bytes < big.decode.bytes
    assert big.decode.bytes == 2 * p.total + 64 * 2 * 32 * 8 * 128 * 2


def test_gpu_lookup() -> None:
    assert get_gpu("h100-80gb").name == "H100-80GB"
    assert get_gpu("H100").name == "H100-80GB"  # the generation alone: its SXM part
    with pytest.raises(Exception, match="did you mean H100-80GB"):
        get_gpu("H1OO")


def test_cli_flops_json(cli) -> None:
    data = cli.json("flops", "gpt2", "--seq-len", "1024")
    assert data["schema"] == "tcalc.flops/1"
    assert data["forward_flops_per_token"] == 284_812_800
    assert data["training_flops_per_token"] == 854_438_400
    assert sum(c["flops"] for c in data["components"]) == 284_812_800
    assert {c["name"] for c in data["components"]} >= {
        "decoder.attn.qkv", "decoder.attn.scores", "decoder.attn.values", "decoder.attn.o",
        "decoder.ffn", "head.lm"}
    assert data["rules_of_thumb"]["6N"]["training_flops_per_token"] == 6 * 124_439_808


def test_cli_flops_run_and_roofline(cli) -> None:
    data = cli.json("flops", "gpt2", "--gpu", "A100-80GB", "--gpus", "8", "--tokens", "10B",
                    "--mfu", "0.5")
    assert data["run"]["tokens"] == 10**10
    assert data["run"]["total_flops"] == 10**10 * data["training_flops_per_token"]
    assert data["roofline"]["decode"]["bound"] == "memory"
    table = cli("flops", "gpt2", "--gpu", "A100-80GB").stdout
    assert "Chinchilla default: 20 tokens per parameter" in table
    assert "memory-bound" in table


def test_cli_flops_mfu_from_throughput(cli) -> None:
    data = cli.json("flops", "gpt2", "--gpu", "A100-80GB", "--tokens-per-second", "1e5")
    assert data["run"]["mfu"] == pytest.approx(1e5 * 854_438_400 / 312e12, rel=1e-5)


def test_cli_flops_pattern_scan(cli) -> None:
    out = cli("flops", "gpt2", "--attention-pattern", "local", "--window", "256",
              "--seq-len", "1024").stdout
    assert "local window of 256" in out and "<- pays" in out
    md = cli("flops", "gpt2", "--format", "markdown").stdout
    assert md.startswith("## gpt2: forward FLOPs per token (T = 1024)")


@pytest.mark.parametrize("args, message", [
    (["--tokens", "lots"], "Error: --tokens: expected a number such as 300e9 or 1.4T, got 'lots'"),
    (["--tokens", "-5"], "Error: --tokens: expected a number from 1 to 1e30, got '-5'"),
    (["--gpu", "H1000"], "unknown GPU 'H1000'"),
    (["--attention-pattern", "local"], "the local pattern needs --window >= 1"),
    (["--mfu", "0.5"], "--mfu and --tokens-per-second need --gpu"),
    (["--gpu", "A100-80GB", "--mfu", "1.5"], "--mfu: expected a number >= 1e-09 and <= 1, got 1.5"),
    (["--seq-len", "0"], "--seq-len: expected an integer >= 1"),
])
def test_cli_flops_bad_options(cli, args, message: str) -> None:
    assert message in cli("flops", "gpt2", *args, code=2).stderr


def test_kaplan_forward_rule_is_the_papers() -> None:
    # Kaplan et al. 2020, Eq. 2.2: C_forward = 2N + 2 · n_layer · n_ctx · d_attn; GPT-2 small:
    # N without embeddings 85,056,000 (12 layers of 7,087,872 + the final norm's 1,536 ...
    # as flops_report computes it from count_params), d_attn = 12 · 64
    from transformer_calc.flops import flops_report

    r = flops_report(load_model("gpt2"), 1024)
    assert r.kaplan == 2 * r.non_embedding + 2 * 12 * 1024 * 12 * 64
    assert r.kaplan == 2 * 85_056_000 + 18_874_368


def test_prefill_is_batch_times_context_times_the_forward() -> None:
    from transformer_calc.flops import flops_report

    r = flops_report(load_model("llama-3-8b"), 2048, gpu="H100-80GB", batch=4)
    per_token = count_flops(load_model("llama-3-8b"), 2048).total
    assert r.roofline is not None
    assert r.roofline.prefill.flops == 4 * 2048 * per_token
    assert r.roofline.decode.flops == 4 * per_token


# torch.utils.flop_counter.FlopCounterMode (torch 2.13.0, transformers 5.23.0,
# DebertaV2ForMaskedLM), forward FLOPs at T=8 over 8, by tools/reference_flops.py --seq-len 8
# on tests/data/hf/variants/deberta-v2-c2p-p2c.json with these keys changed; the relative
# table is projected once per sequence, twice under share_att_key whatever the terms
DEBERTA_TERMS = [
    ({}, 79_872),
    ({"pos_att_type": ["p2c"], "share_att_key": False}, 59_392),
    ({"pos_att_type": "c2p", "share_att_key": True}, 75_776),
    ({"pos_att_type": [], "share_att_key": True}, 71_680),
    ({"pos_att_type": ["c2p", "p2c"], "share_att_key": False, "position_buckets": -1,
      "max_relative_positions": 24}, 100_352),
]


@pytest.mark.parametrize("changes, reference", DEBERTA_TERMS)
def test_debertas_disentangled_terms_equal_flop_counter(changes: dict, reference: int) -> None:
    import json
    from pathlib import Path

    from transformer_calc.hf import spec_from_hf

    path = Path(__file__).parent / "data" / "hf" / "variants" / "deberta-v2-c2p-p2c.json"
    spec = spec_from_hf(json.loads(path.read_text()) | changes)
    assert count_flops(spec, 8).total == reference


# torch.utils.flop_counter.FlopCounterMode (torch 2.13.0, transformers 5.23.0,
# DebertaForMaskedLM), forward FLOPs per token by tools/reference_flops.py --seq-len T: DeBERTa
# v1 projects only the 2 · min(T, max_relative_positions) rows of its table the sequence meets
# (deberta-relative.json: 96 rows, both terms; deberta-c2p-absolute.json: 48 rows, c2p;
# deberta-p2c.json: 128 rows, p2c)
DEBERTA_V1 = [
    ("deberta-relative.json", 8, 59_392), ("deberta-relative.json", 40, 83_968),
    ("deberta-relative.json", 64, 90_112), ("deberta-c2p-absolute.json", 8, 49_152),
    ("deberta-c2p-absolute.json", 64, 62_464), ("deberta-p2c.json", 8, 49_152),
    ("deberta-p2c.json", 64, 77_824),
]


@pytest.mark.parametrize("name, T, reference", DEBERTA_V1)
def test_deberta_v1_projects_the_rows_its_sequence_meets(name: str, T: int,
                                                          reference: int) -> None:
    import json
    from pathlib import Path

    from transformer_calc.hf import spec_from_hf

    path = Path(__file__).parent / "data" / "hf" / "variants" / name
    assert count_flops(spec_from_hf(json.loads(path.read_text())), T).total == reference


# torch.utils.flop_counter.FlopCounterMode (torch 2.13.0, transformers 5.23.0,
# LongT5ForConditionalGeneration, eager, T source and T target tokens), forward FLOPs per
# token by tools/reference_flops.py --seq-len T: LongT5's local attention computes each block
# of local_radius + 1 queries against three blocks of keys, the sequence padded to whole
# blocks (longt5-local.json: blocks of 8; longt5-local-default.json: of 128, so that a short
# sequence costs more per token than a long one); transient-global attention adds T //
# global_block_size keys per query (tglobal: 4 tokens per global block; tglobal-default: 16),
# the one-hot sums that make them and their K and V
LONGT5 = [
    ("longt5-local.json", 8, 331_776), ("longt5-local.json", 64, 389_120),
    ("longt5-local-default.json", 8, 1_636_928), ("longt5-local-default.json", 64, 275_008),
    ("longt5-local.json", 30, 355_123), ("longt5-local-default.json", 30, 489_126),
    ("longt5-tglobal.json", 8, 341_504), ("longt5-tglobal.json", 64, 409_600),
    ("longt5-tglobal-default.json", 8, 1_636_928), ("longt5-tglobal-default.json", 64, 278_080),
    ("longt5-tglobal.json", 30, 368_384), ("longt5-tglobal-default.json", 30, 490_619),
]


@pytest.mark.parametrize("config, T, reference", LONGT5)
def test_longt5s_encoder_attention_equals_flop_counter(config: str, T: int,
                                                       reference: int) -> None:
    import json
    from pathlib import Path

    from transformer_calc.hf import spec_from_hf

    path = Path(__file__).parent / "data" / "hf" / "variants" / config
    spec = spec_from_hf(json.loads(path.read_text()))
    flops = count_flops(spec, T)
    if T % 8 == 0:  # whole blocks: exact
        assert flops.total == reference
    else:  # a padded block: the per-sequence rows each rounded down per token, per layer
        floored = 3 if spec.encoder_global_block else 2  # scores, values (, global K/V)
        assert 0 <= reference - flops.total < floored * spec.n_encoder_layers
    assert flops.get("encoder.attn.scores").note.startswith("local: blocks of")


def test_a_windowed_pattern_built_without_a_window_is_refused() -> None:
    # the Python API's defaults (the CLI passes --window itself): no window unless given
    from transformer_calc.errors import TcalcError
    from transformer_calc.flops import AttentionPattern

    with pytest.raises(TcalcError, match="--window: the local pattern needs --window >= 1"):
        AttentionPattern("local")
    assert AttentionPattern("local", window=4).pairs(8) == 8 * 4
