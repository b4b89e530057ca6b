"""The op graph's GPT-like decoders (transformer_calc/graph/families/gptlike.py: GPTBigCode,
OpenAI GPT, CTRL, GPT-Neo, MPT, Granite SWA; families/modernbert.py: ModernBERT's decoder), which
memory_report reads for their model types: against every measured CPU row of their configs,
to the byte; family_of maps them (and nothing it does not transcribe); parameters and FLOPs
equal tcalc's counts; the compiled path equals the full trace on random configurations.

Fixtures (read, not changed): the rows of the configs below in tests/data/activations_*.jsonl
(full training and peft LoRA, eager and SDPA where the model has it, fp32 and bf16), all
measured by tools/measure_activations_hf.py: torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, use_cache=False, each storage still held at the end of the forward
once, parameters and buffers excluded. activations_gptlike_cache_cpu.jsonl holds the same
forward with use_cache=True (transformers' DynamicCache in training: K and V concatenated
onto the empty cache, contiguous copies), written by

    python tools/measure_activations_hf.py --use-cache tests/data/hf/variants/{gpt_bigcode-mha,\
        ctrl-tiny,gpt_neo-local,mpt-tiny,granite_swa-tiny,modernbert-decoder-tiny,\
        openai-gpt-tiny}.json
    python tools/measure_activations_hf.py --use-cache -B 1 -T 128 (the same configs)

and activations_gpt_bigcode_mqa_cpu.jsonl (gpt_bigcode-mqa.json: gpt_bigcode-mha.json with
multi_query true) by the same tool: B=2 T=64, -B 1 -T 128, --lora 8, --use-cache -B 1 -T 128.

Tolerance: none.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import (
    cache_hits_on_random_draws,
    check_measured,
    every_row,
    measured_rows,
    spec_of,
)
from graph_rows import row_run as _row_run
from test_graph import _row_settings, _rules_report

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.gptlike import (
    Ctrl,
    GPTBigCode,
    GPTNeo,
    GraniteSwa,
    Mpt,
    OpenAIGPT,
)
from transformer_calc.graph.families.modernbert import ModernBertDecoder
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

# config -> the family its model type maps to
CONFIGS = {"gpt_bigcode-mha.json": GPTBigCode, "gpt_bigcode-mqa.json": GPTBigCode,
           "openai-gpt-tiny.json": OpenAIGPT,
           "modernbert-decoder-tiny.json": ModernBertDecoder, "ctrl-tiny.json": Ctrl,
           "gpt_neo-local.json": GPTNeo, "mpt-tiny.json": Mpt,
           "granite_swa-tiny.json": GraniteSwa}
ROWS = measured_rows(tuple(CONFIGS))
# the rows without transformers' generation cache (what the rules are compared on)
PLAIN = [r for r in ROWS if not r.get("use_cache")]


def row_run(row: dict) -> Run:
    """The row's Run, with transformers' use_cache as the row ran it."""
    return replace(_row_run(row), use_cache=row.get("use_cache", False))


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_every_config() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    for config in CONFIGS:
        rows = [r for r in ROWS if r["config"] == config]
        assert any(not r.get("lora") for r in rows) and any(r.get("lora") for r in rows)
        assert {r["dtype"] for r in rows} == {"fp32", "bf16"}


def _measured(row: dict) -> None:
    fam = family_of(_spec(row["config"]))
    assert type(fam) is CONFIGS[row["config"]], type(fam)
    check_measured(row, fam, row_run(row), _spec(row["config"]))


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows as the trace names them), each to the byte
    every_row(ROWS, _measured)


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    # parameters: count_params (itself pinned against transformers on the meta device);
    # FLOPs: count_flops per token at context T, the graph's matmuls over B·T tokens
    spec = _spec(config)
    fam = family_of(spec)
    for attention in ("eager", "sdpa"):
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


# -- where the rules went wrong -------------------------------------------------------------
def _rules(row: dict) -> int:
    return _rules_report(_spec(row["config"]), _row_settings(row)).activations.total


def test_openai_gpt_keeps_no_position_ids_and_the_rules_miss_the_loss_weight() -> None:
    # OpenAIGPTModel reads its positions as a slice of the position_ids buffer (the model's
    # memory: the embedding's saved indices are no activation), which the rules count as
    # T int64s (under LoRA the embeddings keep nothing either way); the rules leave out the
    # loss's 0-d total_weight (4 bytes) and, at B = 1, the padded labels (8)
    for row in (r for r in PLAIN if r["config"] == "openai-gpt-tiny.json"):
        ids = 0 if row.get("lora") else row["T"] * 8
        labels = 8 if row["B"] == 1 else 0
        assert _rules(row) - row["measured_bytes"] == ids - 4 - labels, row


def test_gpt_bigcode_math_kernel_copies_q_and_k_at_one_sequence() -> None:
    # the rules miss the loss's total_weight and the padded labels at B = 1; and under SDPA
    # in fp32 at B = 1, where the math kernel (dropout on the scores) multiplies Q·Kᵀ over the
    # fused c_attn's views, contiguous copies of Q and K (B·T·E each, every layer): -5.1 %
    fam = family_of(_spec("gpt_bigcode-mha.json"))
    for row in (r for r in PLAIN if r["config"] == "gpt_bigcode-mha.json"):
        B, T = row["B"], row["T"]
        copies = 2 * fam.L * B * T * fam.E * 4 \
            if (row["attention"], row["dtype"], B) == ("sdpa", "fp32", 1) else 0
        labels = 8 if B == 1 else 0
        assert row["measured_bytes"] - _rules(row) == 4 + labels + copies, row


@pytest.mark.parametrize("config", ["ctrl-tiny.json", "gpt_neo-local.json"])
def test_ctrl_and_gpt_neo_miss_only_small_tensors_in_the_rules(config: str) -> None:
    # the loss's 0-d total_weight and, at B = 1, the padded labels (GPT-Neo's fp32 Q and K
    # copies and its bool pattern, a buffer, the rules have right)
    for row in (r for r in PLAIN if r["config"] == config):
        labels = 8 if row["B"] == 1 else 0
        assert row["measured_bytes"] - _rules(row) == 4 + labels, row


def test_ctrls_lora_roles_reach_its_modules() -> None:
    # tcalc's roles name CTRL's Wq, Wk, Wv, dense and ffn.0, ffn.2 (peft's path ends)
    spec = _spec("ctrl-tiny.json")
    fam = family_of(spec)
    for roles, targets in ((("q", "v"), "Wq,Wv"), (("o", "up", "down"), "dense,ffn.0,ffn.2")):
        settings = Settings(batch_size=2, seq_len=64, device="cpu", attention="sdpa",
                            lora_rank=8, lora_targets=roles, lora_dropout=0.0)
        run = Run(2, 64, F32, "cpu", "sdpa", lora=Lora(8, frozenset(targets.split(",")), 0.0))
        result = evaluate(fam, run)
        assert result.trainable_params == fam.L * 8 * (
            4 * fam.E if roles == ("q", "v") else 2 * fam.E + 2 * (fam.E + fam.F))
        assert memory_report(spec, settings).activations.total == result.activation_bytes


def test_mpt_keeps_its_causal_mask_as_bool() -> None:
    # MptModel casts create_causal_mask's (B, 1, T, T) mask to bool, and every layer's
    # masked_fill keeps it (one storage), which the rules leave out; and the loss's
    # total_weight, the padded labels at B = 1. -0.6 to -1.2 % in the rules
    for row in (r for r in PLAIN if r["config"] == "mpt-tiny.json"):
        B, T = row["B"], row["T"]
        labels = 8 if B == 1 else 0
        assert row["measured_bytes"] - _rules(row) == B * T * T + 4 + labels, row


def test_mpt_reads_attn_config() -> None:
    # MptConfig.attn_config: attn_pdrop is every dropout of MPT's layers; clip_qkv clamps
    # Wqkv's output (one more kept tensor): refused by name
    data = json.loads((DATA / "hf" / "variants" / "mpt-tiny.json").read_text())
    fam = family_of(spec_from_hf(data | {"attn_config": {"attn_pdrop": 0.1}}))
    assert isinstance(fam, Mpt) and fam.dropout == 0.1
    with pytest.raises(TcalcError, match="attn_config.clip_qkv"):
        spec_from_hf(data | {"attn_config": {"clip_qkv": 6.0}})


def test_granite_swa_keeps_its_sink_scale_cast() -> None:
    # GraniteSWA's eager attention: sink_scale.unsqueeze(-1).to(attn_output.dtype) is a
    # (B, H, T, 1) copy in bf16 (the fp32 sigmoid itself in fp32), kept by the product, in
    # every layer whose attention backpropagates (the first layer's not when only the MLPs
    # are adapted), which the rules leave out; and the loss's total_weight, the padded
    # labels at B = 1. -0.13 to -0.21 % in the rules under bf16
    fam = family_of(_spec("granite_swa-tiny.json"))
    assert isinstance(fam, GraniteSwa)
    for row in (r for r in PLAIN if r["config"] == "granite_swa-tiny.json"):
        B, T = row["B"], row["T"]
        mlp_only = row.get("lora", [0, ""])[1] == "gate_proj,up_proj,down_proj"
        layers = fam.L - 1 if mlp_only else fam.L
        cast = layers * B * fam.H * T * 2 if row["dtype"] == "bf16" else 0
        labels = 8 if B == 1 else 0
        assert row["measured_bytes"] - _rules(row) == cast + 4 + labels, row


def test_modernbert_decoder_keeps_a_rope_table_per_sequence_and_layer_type() -> None:
    # ModernBertDecoderModel: position_ids = arange(T).unsqueeze(0).expand(B, -1), so each
    # layer type's cos and sin (its rotary_emb call, cast to the activations' dtype) are
    # (B, T, dh), and RoPE's products keep them: 2 · kinds · B·T·dh elements, where the rules
    # count one (T, dh) pair; and the loss's total_weight, the padded labels at B = 1.
    # -0.3 to -1.4 % in the rules
    fam = family_of(_spec("modernbert-decoder-tiny.json"))
    assert isinstance(fam, ModernBertDecoder) and fam.kinds == "FSF" and fam.window == 128
    dh = fam.E // fam.H
    for row in (r for r in PLAIN if r["config"] == "modernbert-decoder-tiny.json"):
        B, T = row["B"], row["T"]
        itemsize = 4 if row["dtype"] == "fp32" else 2
        tables = (2 * 2 * B - 2) * T * dh * itemsize
        labels = 8 if B == 1 else 0
        assert row["measured_bytes"] - _rules(row) == tables + 4 + labels, row


@pytest.mark.parametrize("config", ["modernbert-decoder-tiny.json", "modernbert-tiny.json"])
def test_modernberts_lora_roles_reach_their_modules(config: str) -> None:
    # tcalc's roles o, down and gate_up are ModernBERT's attn.Wo, mlp.Wo and Wi (peft matches
    # a target against the module path's end after a dot): each role adapts its L linears,
    # and the saved bytes are the graph's for those targets, never a run without adapters
    spec = _spec(config)
    fam = family_of(spec)
    for roles, targets in ((("o",), "attn.Wo"), (("down",), "mlp.Wo"), (("gate_up",), "Wi"),
                           (("o", "down"), "attn.Wo,mlp.Wo")):
        settings = Settings(batch_size=2, seq_len=64, device="cpu", attention="sdpa",
                            lora_rank=8, lora_targets=roles, lora_dropout=0.0)
        run = Run(2, 64, F32, "cpu", "sdpa", lora=Lora(8, frozenset(targets.split(",")), 0.0))
        result = evaluate(fam, run)
        widths = {"attn.Wo": (fam.E, fam.E), "mlp.Wo": (fam.F, fam.E), "Wi": (fam.E, 2 * fam.F)}
        assert result.trainable_params == sum(
            fam.L * 8 * (i + o) for i, o in (widths[t] for t in targets.split(",")))
        assert memory_report(spec, settings).activations.total == result.activation_bytes


def test_the_generation_cache_copies_k_and_v_where_matmul_would_not() -> None:
    # use_cache=True in training: each layer's K and V concatenated onto the empty cache,
    # contiguous copies that the scores' and the output's matmuls keep. Where those matmuls
    # copy their non-contiguous operands anyway (B = 2 here, and GPTBigCode's SDPA math
    # kernel at B = 1, whose own Q and K copies then go) the cache changes nothing; at B = 1
    # GPTBigCode's and MPT's fused views are foldable, so the copies are new storages (under
    # multi_query the one K/V head's, repeated afterwards)
    cached = {(r["config"], r["attention"], r["dtype"], r["B"]): r["measured_bytes"]
              for r in ROWS if r.get("use_cache")}
    plain = {(r["config"], r["attention"], r["dtype"], r["B"]): r["measured_bytes"]
             for r in PLAIN if not r.get("lora")}
    changed = {k: cached[k] - plain[k] for k in cached if cached[k] != plain[k]}
    assert changed == {("gpt_bigcode-mha.json", "eager", "fp32", 1): 131072,
                       ("gpt_bigcode-mha.json", "eager", "bf16", 1): 65536,
                       ("gpt_bigcode-mha.json", "sdpa", "fp32", 1): -131072,
                       ("gpt_bigcode-mqa.json", "eager", "fp32", 1): 32768,
                       ("gpt_bigcode-mqa.json", "eager", "bf16", 1): 16384,
                       ("mpt-tiny.json", "eager", "fp32", 1): 131072,
                       ("mpt-tiny.json", "eager", "bf16", 1): 65536}


# -- which specs map to these graphs ----------------------------------------------------------
@pytest.mark.parametrize(("config", "change"), [
    ("gpt_bigcode-mha.json", {"n_kv_heads": 2}), ("gpt_bigcode-mha.json", {"activation": "gelu"}),
    ("gpt_bigcode-mha.json", {"bias_o": False}), ("gpt_bigcode-mha.json", {"fused_qkv": False}),
    ("gpt_bigcode-mha.json", {"norm_position": "post"}),
    ("gpt_bigcode-mha.json", {"qk_norm": "head"}),
    ("openai-gpt-tiny.json", {"d_ff": 100}), ("openai-gpt-tiny.json", {"final_norm": True}),
    ("openai-gpt-tiny.json", {"norm_position": "pre"}),
    ("openai-gpt-tiny.json", {"position": "rope"}),
    ("openai-gpt-tiny.json", {"sdpa_path": True}),
    ("modernbert-decoder-tiny.json", {"dropout": 0.1}),
    ("modernbert-decoder-tiny.json", {"fused_qkv": True}),
    ("modernbert-decoder-tiny.json", {"bias_q": True}),
    ("modernbert-decoder-tiny.json", {"first_attn_norm": True}),
    ("modernbert-decoder-tiny.json", {"activation": "silu"}),
    ("ctrl-tiny.json", {"attention_dropout": 0.1}), ("ctrl-tiny.json", {"lm_head_bias": False}),
    ("ctrl-tiny.json", {"position": "learned"}), ("ctrl-tiny.json", {"activation": "gelu"}),
    ("ctrl-tiny.json", {"softmax_fp32": True}),
    ("gpt_neo-local.json", {"attn_fp32": False}), ("gpt_neo-local.json", {"bias_q": True}),
    ("gpt_neo-local.json", {"sdpa_path": True}), ("gpt_neo-local.json", {"n_kv_heads": 1}),
    ("gpt_neo-local.json", {"activation": "gelu"}),
    ("mpt-tiny.json", {"d_ff": 64}), ("mpt-tiny.json", {"bias_o": True}),
    ("mpt-tiny.json", {"position": "rope"}), ("mpt-tiny.json", {"norm": "layernorm"}),
    ("mpt-tiny.json", {"attention_dropout": 0.1}),
    ("granite_swa-tiny.json", {"softmax_sink_lse": False}),
    ("granite_swa-tiny.json", {"sdpa_path": True}), ("granite_swa-tiny.json", {"bias_q": True}),
    ("granite_swa-tiny.json", {"qk_norm": "head"}),
    ("granite_swa-tiny.json", {"activation": "gelu"})])
def test_what_the_graphs_do_not_transcribe_keeps_the_rules(config: str, change: dict) -> None:
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(_spec(config), **change))


def test_gpt_neo_reads_its_residual_and_embedding_dropout() -> None:
    # GPTNeoConfig's resid_dropout and embed_dropout (0.0 by default) beside attention_dropout
    data = json.loads((DATA / "hf" / "variants" / "gpt_neo-local.json").read_text())
    fam = family_of(spec_from_hf(data | {"resid_dropout": 0.1}))
    assert isinstance(fam, GPTNeo) and (fam.dropout, fam.attention_dropout) == (0.1, 0.0)
    fam = family_of(spec_from_hf(data | {"attention_dropout": 0.2}))
    assert isinstance(fam, GPTNeo) and (fam.dropout, fam.attention_dropout) == (0.0, 0.2)


def test_only_these_model_types_map_to_these_graphs() -> None:
    mapped: dict[str, set[str]] = {}
    for path in sorted((DATA / "hf").rglob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or "model_type" not in data:
            continue
        try:
            fam = family_of(spec_from_hf(data))
        except TcalcError:
            continue
        mapped.setdefault(type(fam).__name__, set()).add(data["model_type"])
    assert {k: mapped[k] for k in ("GPTBigCode", "OpenAIGPT", "ModernBertDecoder", "Ctrl",
                                   "GPTNeo", "Mpt", "GraniteSwa")} == {
        "GPTBigCode": {"gpt_bigcode"}, "OpenAIGPT": {"openai-gpt"},
        "ModernBertDecoder": {"modernbert-decoder"}, "Ctrl": {"ctrl"}, "GPTNeo": {"gpt_neo"},
        "Mpt": {"mpt"}, "GraniteSwa": {"granite_swa"}}
    assert "gpt2" in mapped["GPT2"] and not mapped["GPT2"] & {"gpt_bigcode", "openai-gpt"}


# -- the compiled path ------------------------------------------------------------------------
def _draw(rng):  # type: ignore[no-untyped-def]
    kind = rng.choice((GPTBigCode, OpenAIGPT, ModernBertDecoder, Ctrl, GPTNeo, Mpt,
                       GraniteSwa))
    H = rng.choice((1, 2, 4))
    E = H * rng.choice((4, 8))
    L = rng.choice((1, 2, 3))
    V = rng.choice((16, 40))
    fam: GPTBigCode | OpenAIGPT | ModernBertDecoder | Ctrl | GPTNeo | Mpt | GraniteSwa
    if kind is ModernBertDecoder:
        fam = ModernBertDecoder(V=V, E=E, H=H, F=rng.choice((8, 24)), L=L,
                                kinds="".join(rng.choice("FS") for _ in range(L)),
                                window=rng.choice((4, 8, 64)), tied=rng.random() < 0.5)
        targets = rng.choice((None, "all-linear", "q_proj,v_proj", "Wi,Wo"))
    elif kind is Ctrl:
        p = rng.choice((0.0, 0.1))
        fam = Ctrl(V=V, P=64, E=E, H=H, F=rng.choice((8, 24)), L=L, tied=rng.random() < 0.5,
                   resid_pdrop=p, embd_pdrop=p)
        targets = rng.choice((None, "all-linear", "Wq,Wv", "dense,ffn.2", "lm_head"))
    elif kind is GPTNeo:
        fam = GPTNeo(V=V, P=64, E=E, H=H, F=rng.choice((8, 24)), L=L, tied=rng.random() < 0.5,
                     dropout=rng.choice((0.0, 0.1)), attention_dropout=rng.choice((0.0, 0.1)))
        targets = rng.choice((None, "all-linear", "q_proj,v_proj", "out_proj,c_fc"))
    elif kind is Mpt:
        fam = Mpt(V=V, P=rng.choice((64, 128)), E=E, H=H, L=L, tied=rng.random() < 0.5,
                  dropout=rng.choice((0.0, 0.1)))
        targets = rng.choice((None, "all-linear", "Wqkv", "up_proj,down_proj"))
    elif kind is GraniteSwa:
        Hkv = rng.choice([n for n in (1, 2, 4) if H % n == 0])
        fam = GraniteSwa(V=V, E=E, H=H, Hkv=Hkv, dh=E // H, F=rng.choice((8, 24)), L=L,
                         tied=rng.random() < 0.5, attention_dropout=rng.choice((0.0, 0.1)))
        targets = rng.choice((None, "all-linear", "q_proj,v_proj", "gate_proj,down_proj"))
    else:
        p = rng.choice((0.0, 0.1))
        fam = kind(V=V, P=rng.choice((64, 128)), E=E, H=H,
                   F=4 * E if kind is OpenAIGPT else rng.choice((8, 24)), L=L,
                   tied=rng.random() < 0.5, resid_pdrop=p, embd_pdrop=p,
                   attn_pdrop=rng.choice((0.0, 0.1)))
        if kind is GPTBigCode and H > 1 and rng.random() < 0.5:
            fam = replace(fam, multi_query=True)
        targets = rng.choice((None, "all-linear", "c_attn", "c_fc,c_proj"))
    lora = Lora(8, frozenset(targets.split(",")), rng.choice((0.0, 0.1))) if targets else None
    run = Run(rng.choice((1, 2, 3)), rng.choice((5, 8, 16)), rng.choice((F32, BF16)), "cpu",
              rng.choice(("eager", "sdpa")), lora=lora)
    return fam, run


def test_compiled_equals_traced_on_random_configurations() -> None:
    assert cache_hits_on_random_draws(_draw, 11, 28) > 0
