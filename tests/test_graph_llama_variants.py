"""The op graph's Llama variants (transformer_calc/graph/families/llama.py with a flag per
difference from Llama), which memory_report reads for their model types: against every
measured CPU row of their configs, to the byte; family_of maps them (and nothing it does
not transcribe); the compiled path equals the full trace on random configurations.

Fixtures (read, not changed): the rows of the configs below in tests/data/activations_*.jsonl
(full training and peft LoRA, eager and SDPA where the class has it, fp32 and bf16), all
measured by tools/measure_activations_hf.py: torch 2.13 CPU, transformers 5.23, peft 0.21.2,
saved_tensors_hooks, use_cache=False, each storage still held at the end of the forward
once, parameters and buffers excluded.

Tolerance: none.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import (
    cache_hits_on_random_draws,
    check_measured,
    every_row,
    measured_rows,
    row_run,
    spec_of,
)
from test_graph import _row_settings, _rules_report

from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import BF16, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.families.cohere import Cohere
from transformer_calc.graph.families.llama import Llama
from transformer_calc.hf import spec_from_hf
from transformer_calc.params import count_params
from transformer_calc.spec import ModelSpec

# config -> its model type
CONFIGS = {"qwen3-sliding-bias.json": "qwen3", "ministral-tiny.json": "ministral",
           "olmo-tiny.json": "olmo", "bitnet-tiny.json": "bitnet",
           "nemotron-tiny.json": "nemotron", "apertus-tiny.json": "apertus",
           "nanochat-tiny.json": "nanochat", "cohere-qknorm.json": "cohere",
           "cohere2-tiny.json": "cohere2", "diffllama-tiny.json": "diffllama",
           "hunyuan_v1_dense-tiny.json": "hunyuan_v1_dense", "internlm3-tiny.json": "internlm3"}
ROWS = measured_rows(tuple(CONFIGS))


def _spec(config: str) -> ModelSpec:
    return spec_of(config)


def test_the_rows_cover_every_config() -> None:
    assert {r["config"] for r in ROWS} == set(CONFIGS)
    for config in CONFIGS:
        rows = [r for r in ROWS if r["config"] == config]
        assert any(not r.get("lora") for r in rows) and any(r.get("lora") for r in rows)


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count), the compiled structure and memory_report (its
    # total, and its rows as the trace names them), each to the byte
    every_row(ROWS, lambda row: check_measured(
        row, family_of(_spec(row["config"])), row_run(row), _spec(row["config"])))


@pytest.mark.parametrize("config", CONFIGS)
def test_params_and_forward_flops_equal_tcalc(config: str) -> None:
    # parameters: count_params (itself pinned against transformers on the meta device);
    # FLOPs: count_flops per token at context T, the graph's matmuls over B·T tokens (T
    # below every sliding window, where tcalc counts a window's keys)
    spec = _spec(config)
    fam = family_of(spec)
    for attention in ("eager", "sdpa") if spec.sdpa_path else ("eager",):
        for B, T in ((1, 8), (3, 5)):
            r = evaluate(fam, Run(B, T, F32, "cpu", attention))
            assert r.params == r.trainable_params == count_params(spec).total
            assert r.forward_flops == B * T * count_flops(spec, T).total


# -- where the rules went wrong -------------------------------------------------------------
def _rules(row: dict) -> int:
    return _rules_report(_spec(row["config"]), _row_settings(row)).activations.total


@pytest.mark.parametrize("config", ("qwen3-sliding-bias.json", "nanochat-tiny.json",
                                    "cohere-qknorm.json"))
def test_lora_on_q_and_v_keeps_no_k_norm_in_the_first_layer(config: str) -> None:
    # LoRA on q_proj and v_proj: the first layer's k_proj is frozen and reads a frozen
    # input, so its per-head k_norm keeps nothing (its fp32 input and 1/rms are kept only
    # for a gradient no one needs); the rules keep them: Qwen3 +1.2 to +1.8 %, NanoChat
    # (whose k_norm follows RoPE) +1.1 to +2.0 %, Cohere (its LayerNorm written out keeps
    # the centred fp32 input twice) +2.3 to +4.5 % on the four rows
    rows = [r for r in ROWS if r["config"] == config
            and r.get("lora") == [8, "q_proj,v_proj", 0.0]]
    assert len(rows) == 4
    fam = family_of(_spec(config))
    for row in rows:
        B, T = row["B"], row["T"]
        # k_norm's pow input (fp32) and rsqrt result: B·T·Hkv·(dh + 1) · 4; Cohere's
        # centred input twice: B·T·Hkv·(2·dh + 1) · 4 (less the loss's 0-d total_weight,
        # which the rules miss, and in 16 bits Cohere's norms' fp32 weights, below)
        terms = 2 if isinstance(fam, Cohere) else 1
        assert _rules(row) - row["measured_bytes"] == \
            B * T * fam.Hkv * (terms * fam.dh + 1) * 4 - 4 - _cohere_fp32_weights(row, fam)
        assert evaluate(fam, row_run(row)).activation_bytes == row["measured_bytes"]


def test_bitnet_sdpa_fp32_keeps_the_kernels_output_once() -> None:
    # BitNet's attn_sub_norm reads the attention's output: in fp32 its .to(float32) is the
    # tensor itself, and SDPA's output, laid out (B, T, H, d_head), reshapes as a view: the
    # norm's pow keeps the kernel's output, which the kernel keeps already. The rules count
    # it again, B·T·H·d_head · 4 bytes a layer: +2.9 to +4.6 % on the six SDPA fp32 rows
    # (under LoRA on the MLP alone the first layer's attention needs no gradient and keeps
    # nothing, in the rules too: L - 1 layers)
    rows = [r for r in ROWS if r["config"] == "bitnet-tiny.json"
            and (r["attention"], r["dtype"]) == ("sdpa", "fp32")]
    assert len(rows) == 6
    fam = family_of(_spec("bitnet-tiny.json"))
    for row in rows:
        B, T = row["B"], row["T"]
        labels = 8 if B == 1 else 0  # B = 1: the padded labels' storage
        mlp_only = row.get("lora") == [8, "gate_proj,up_proj,down_proj", 0.0]
        assert _rules(row) - row["measured_bytes"] == \
            (fam.L - mlp_only) * B * T * fam.H * fam.dh * 4 - 4 - labels
        assert evaluate(fam, row_run(row)).activation_bytes == row["measured_bytes"]


def test_nemotron_keeps_its_layer_norms_weight_plus_one() -> None:
    # NemotronLayerNorm1P passes self.weight + 1.0 to F.layer_norm, whose backward keeps its
    # weight: a (d_model,) activation per norm whose input needs a gradient (5 in full
    # training: two a layer and the final one; under LoRA the first layer's input norm
    # has none, nor, with the attention frozen, its second); the rules have no row for it
    # (and with no partial_rotary_factor read, which the spec reads now, the rules counted
    # cos and sin and the rotated copies over the whole head: +0.13 to +0.73 %)
    for row in (r for r in ROWS if r["config"] == "nemotron-tiny.json"):
        spec = _spec(row["config"])
        fam = family_of(spec)
        itemsize = 4 if row["dtype"] == "fp32" else 2
        lora = row.get("lora")
        frozen = 0 if not lora else 2 if lora[1] == "gate_proj,up_proj,down_proj" else 1
        norms = 2 * fam.L + 1 - frozen
        labels = 8 if row["B"] == 1 else 0
        assert row["measured_bytes"] - _rules(row) == norms * fam.E * itemsize + 4 + labels
        assert evaluate(fam, row_run(row)).activation_bytes == row["measured_bytes"]


def test_apertus_keeps_xielus_alphas() -> None:
    # XIELUActivation: softplus(alpha_p) · x keeps the (1,) softplus(alpha_p) for x's
    # gradient, and (expm1(min(x, eps)) - x) · alpha_n the (1,) beta + softplus(alpha_n):
    # two elements a layer, which the rules leave out; under LoRA on q and v the first
    # layer's k_norm (over a frozen projection of a frozen input) keeps nothing, which the
    # rules keep: B·T·Hkv·(d_head + 1) fp32 elements, +0.7 to +1.0 %
    for row in (r for r in ROWS if r["config"] == "apertus-tiny.json"):
        fam = family_of(_spec(row["config"]))
        itemsize = 4 if row["dtype"] == "fp32" else 2
        labels = 8 if row["B"] == 1 else 0
        k_norm = row["B"] * row["T"] * fam.Hkv * (fam.dh + 1) * 4 \
            if row.get("lora") == [8, "q_proj,v_proj", 0.0] else 0
        assert row["measured_bytes"] - _rules(row) == \
            2 * fam.L * itemsize + 4 + labels - k_norm
        assert evaluate(fam, row_run(row)).activation_bytes == row["measured_bytes"]


def _cohere_fp32_weights(row: dict, fam: Llama) -> int:
    """CohereLayerNorm's self.weight.to(torch.float32): in a 16-bit model a new fp32 tensor,
    kept by the product with the normalised input wherever that needs a gradient (under
    LoRA not in the first layer's input norm, whose input is the frozen embedding, nor in
    its q_norm or k_norm unless q_proj or k_proj is adapted); no rule counts it."""
    if not isinstance(fam, Cohere) or row["dtype"] == "fp32":
        return 0
    lora = row.get("lora")
    targets = set(lora[1].split(",")) if lora else {"all-linear"}
    norms = (fam.L + 1 - bool(lora)) * fam.E  # input_layernorm in each layer, the final one
    if fam.cohere_qk_norm:
        for proj, heads in (("q_proj", fam.H), ("k_proj", fam.Hkv)):
            first = bool(targets & {proj, "all-linear"})
            norms += (fam.L - 1 + first) * heads * fam.dh
    return 4 * norms


@pytest.mark.parametrize("config", ("cohere-qknorm.json", "cohere2-tiny.json"))
def test_cohere_keeps_its_norms_fp32_weights(config: str) -> None:
    for row in (r for r in ROWS if r["config"] == config
                and r.get("lora") != [8, "q_proj,v_proj", 0.0]):
        fam = family_of(_spec(config))
        labels = 8 if row["B"] == 1 else 0
        assert row["measured_bytes"] - _rules(row) == \
            _cohere_fp32_weights(row, fam) + 4 + labels, row
        assert evaluate(fam, row_run(row)).activation_bytes == row["measured_bytes"]


def test_diffllama_keeps_lambda_and_q_once_at_b1() -> None:
    # DiffLlamaAttention: λ_i = exp(sum(λ_qi · λ_ki, dtype=float32)) keeps its 0-d fp32
    # result (two a layer), and λ_full · out2 keeps λ_full (0-d, the activation dtype): 8 +
    # itemsize bytes a layer the rules leave out (under LoRA, with λ frozen, λ_full alone,
    # where the attention's output needs a gradient). Eager at B = 1, Q·Kᵀ folds Q into rows as
    # a view of the rotated Q, one storage for both calls: the rules count a second copy,
    # B·H·T·d_head · itemsize a layer (+1.1 to +2.1 %)
    for row in (r for r in ROWS if r["config"] == "diffllama-tiny.json"):
        fam = family_of(_spec(row["config"]))
        itemsize = 4 if row["dtype"] == "fp32" else 2
        B, T = row["B"], row["T"]
        second_q = fam.L * B * fam.H * T * fam.dh * itemsize \
            if B == 1 and row["attention"] == "eager" else 0
        labels = 8 if B == 1 else 0
        lora = row.get("lora")
        lambdas = fam.L * (8 + itemsize) if not lora else \
            (fam.L - (lora[1] == "gate_proj,up_proj,down_proj")) * itemsize
        assert row["measured_bytes"] - _rules(row) == lambdas + 4 + labels - second_q, row
        assert evaluate(fam, row_run(row)).activation_bytes == row["measured_bytes"]


def test_nemotron_reads_its_partial_rotary_factor() -> None:
    # NemotronConfig keeps partial_rotary_factor (default 0.5) in rope_parameters, where
    # NemotronRotaryEmbedding reads it; a top-level key is read as the config class takes it
    data = json.loads((DATA / "hf" / "variants" / "nemotron-tiny.json").read_text())
    quarter = family_of(spec_from_hf(data | {"rope_parameters": {"rope_type": "default",
                                                                 "rope_theta": 1e4,
                                                                 "partial_rotary_factor": 0.25}}))
    assert isinstance(quarter, Llama) and quarter.dr == 4
    whole = family_of(spec_from_hf(data | {"partial_rotary_factor": 1.0}))
    assert isinstance(whole, Llama) and not whole.partial_rotary and whole.rope_concat
    with pytest.raises(TcalcError, match="rope_parameters.partial_rotary_factor"):
        spec_from_hf(data | {"rope_parameters": {"partial_rotary_factor": "half"}})


# -- which specs map to these graphs ----------------------------------------------------------
def test_each_config_maps_to_its_flags() -> None:
    qwen3 = family_of(_spec("qwen3-sliding-bias.json"))
    assert isinstance(qwen3, Llama) and qwen3.kinds == "FFSS" and qwen3.window == 16
    assert qwen3.qk_norm == "head" and qwen3.bias_q and qwen3.bias_o
    ministral = family_of(_spec("ministral-tiny.json"))
    assert isinstance(ministral, Llama) and ministral.kinds == "SSF"
    assert ministral.window == 16
    olmo = family_of(_spec("olmo-tiny.json"))
    assert isinstance(olmo, Llama) and olmo.norm == "olmo" and olmo.rope_fp32
    assert olmo.bias_q and olmo.bias_o and not olmo.bias_mlp_in
    bitnet = family_of(_spec("bitnet-tiny.json"))
    assert isinstance(bitnet, Llama) and bitnet.sub_norms and bitnet.activation == "relu2"
    nemotron = family_of(_spec("nemotron-tiny.json"))
    # NemotronConfig's partial_rotary_factor defaults to 0.5: 8 of each head's 16 rotated
    assert isinstance(nemotron, Llama) and nemotron.norm == "layer1p"
    assert not nemotron.gated and nemotron.activation == "relu2"
    assert nemotron.partial_rotary and nemotron.dr == 8 and nemotron.rope_concat
    apertus = family_of(_spec("apertus-tiny.json"))
    assert isinstance(apertus, Llama) and apertus.activation == "xielu"
    assert not apertus.gated and apertus.qk_norm == "head_t"
    assert apertus.norm_names == ("attention_layernorm", "feedforward_layernorm")
    nanochat = family_of(_spec("nanochat-tiny.json"))
    assert isinstance(nanochat, Llama) and nanochat.norm == "rms_plain" and nanochat.embed_norm
    assert nanochat.qk_norm == "after_rope" and nanochat.mlp_names == ("fc1", "fc2")
    assert nanochat.final_softcap == 15.0 and nanochat.rotate_flipped and not nanochat.gated
    command_r = family_of(_spec("cohere-qknorm.json"))
    assert isinstance(command_r, Cohere) and command_r.cohere_qk_norm and command_r.kinds == "F"
    # Cohere2Config: layer i slides unless i + 1 is a multiple of 4 (2 layers: both slide)
    cohere2 = family_of(_spec("cohere2-tiny.json"))
    assert isinstance(cohere2, Cohere) and cohere2.kinds == "S" and cohere2.window == 4096
    assert cohere2.bias_q and cohere2.bias_o and not cohere2.cohere_qk_norm
    eight = family_of(replace(_spec("cohere2-tiny.json"), n_layers=8,
                              layer_attention="3S 1N 3S 1N"))
    assert isinstance(eight, Cohere) and eight.kinds == "SSSNSSSN"
    diffllama = family_of(_spec("diffllama-tiny.json"))
    assert isinstance(diffllama, Llama) and diffllama.differential and diffllama.Hkv == 2


@pytest.mark.parametrize("config, change, why", [
    ("qwen3-sliding-bias.json", dict(model_type="llama"), "Llama's forward has no window"),
    ("qwen3-sliding-bias.json", dict(model_type=""), "a hand-written spec with a window"),
    ("qwen3-sliding-bias.json", dict(layer_attention="2C 2F", attention_chunk=8),
     "chunked attention"),
    ("qwen3-sliding-bias.json", dict(dropout=0.1), "hidden dropout"),
    ("ministral-tiny.json", dict(attention_sinks=True), "attention sinks"),
    ("olmo-tiny.json", dict(norm_fp32=False), "a weightless LayerNorm in the input's dtype"),
    ("olmo-tiny.json", dict(norm="layernorm"), "a LayerNorm with weight and bias"),
    ("olmo-tiny.json", dict(model_type="llama"), "OLMo's layout under another model type"),
    ("bitnet-tiny.json", dict(activation="silu"), "sub-norms with a SiLU MLP"),
    ("bitnet-tiny.json", dict(ffn="plain"), "an ungated squared-ReLU MLP"),
    ("bitnet-tiny.json", dict(model_type="llama"), "sub-norms in Llama's forward"),
    ("nemotron-tiny.json", dict(activation="gelu"), "another activation"),
    ("nemotron-tiny.json", dict(ffn="gated"), "a gated MLP"),
    ("nemotron-tiny.json", dict(norm="rmsnorm"), "RMSNorm"),
    ("nemotron-tiny.json", dict(rotary_fraction=0.2), "an odd rotated width: int(16 · 0.2)"),
    ("nemotron-tiny.json", dict(model_type="phi"), "Nemotron's layout as another type"),
    ("apertus-tiny.json", dict(ffn="gated"), "a gated xIELU MLP"),
    ("apertus-tiny.json", dict(qk_norm="width"), "q/k norms over the width"),
    ("apertus-tiny.json", dict(model_type="llama"), "xIELU in Llama's forward"),
    ("nanochat-tiny.json", dict(embedding_norm=False), "no norm on the embeddings"),
    ("nanochat-tiny.json", dict(qk_norm="head"), "weighted q/k norms before RoPE"),
    ("nanochat-tiny.json", dict(norm="rmsnorm"), "weighted norms"),
    ("nanochat-tiny.json", dict(model_type="llama"), "NanoChat's layout as Llama"),
    ("cohere-qknorm.json", dict(parallel_block=False), "a sequential block"),
    ("cohere-qknorm.json", dict(norm_manual=False), "torch's LayerNorm"),
    ("cohere-qknorm.json", dict(qk_norm="head"), "RMSNorm over each head"),
    ("cohere-qknorm.json", dict(layer_attention="2F 2S", sliding_window=16),
     "sliding layers in Cohere (1)"),
    ("cohere2-tiny.json", dict(qk_norm="width"), "q/k norms in Cohere 2"),
    ("cohere2-tiny.json", dict(layer_attention="1S 1F"), "a full layer with RoPE"),
    ("cohere2-tiny.json", dict(model_type="llama"), "Cohere's layout as Llama"),
    ("diffllama-tiny.json", dict(attention_dropout=0.1), "attention dropout (DiffLlama raises)"),
    ("diffllama-tiny.json", dict(model_type="llama"), "differential attention as Llama"),
])
def test_what_the_graphs_do_not_transcribe_is_refused(config: str, change: dict,
                                                      why: str) -> None:
    spec = _spec(config)
    assert isinstance(family_of(spec), Llama)
    with pytest.raises(TcalcError, match="no op graph"):
        family_of(replace(spec, **change))


# -- the compiled path on random configurations ----------------------------------------------
def _draw(rng: random.Random) -> tuple[Llama, Run]:
    """A Llama variant with sizes drawn freely (the 0/1 edge cases: B = 1, T = 1, one layer,
    one head or K/V head), its flags drawn as the model types set them; any dtype, device,
    attention, LoRA, recomputation."""
    L = rng.choice((1, 2, 3, 5))
    Hkv, G = rng.choice((1, 2)), rng.choice((1, 2, 4))
    kinds = rng.choice(("F", "S", "".join(rng.choice("SF") for _ in range(L))))
    norm = rng.choice(("rms", "olmo"))
    bitnet = rng.random() < 0.3
    dh = rng.choice((2, 8, 10))
    nemotron = not bitnet and rng.random() < 0.3
    apertus = not (bitnet or nemotron) and rng.random() < 0.3
    nanochat = not (bitnet or nemotron or apertus) and rng.random() < 0.3
    differential = Hkv == 2 and rng.random() < 0.3
    dr = rng.choice([d for d in (2, 4, 6) if d < dh] or [0]) if nemotron else 0
    fam = Llama(V=rng.randint(5, 60), E=rng.randint(1, 48), H=Hkv * G, Hkv=Hkv,
                dh=dh, F=rng.randint(1, 40), L=L,
                tied=rng.random() < 0.5, bias_q=(b := rng.random() < 0.3), bias_k=b,
                bias_v=b, bias_o=b, differential=differential,
                attention_dropout=0.0 if differential else rng.choice((0.0, 0.0, 0.1)),
                qk_norm="after_rope" if nanochat else
                rng.choice(("none", "head_t" if apertus else "head")),
                window=rng.choice((1, 4, 8, 40)),
                kinds=kinds if len(set(kinds)) > 1 else kinds[0],
                norm="layer1p" if nemotron else "rms_plain" if nanochat else norm,
                gated=not (nemotron or apertus or nanochat), embed_norm=nanochat,
                mlp_names=("fc1", "fc2") if nanochat else ("up_proj", "down_proj"),
                final_softcap=rng.choice((0.0, 15.0)), rotate_flipped=nanochat,
                rope_concat=nemotron, partial_rotary=bool(dr), dr=dr,
                rope_fp32=norm == "olmo", sub_norms=bitnet,
                activation="relu2" if bitnet or nemotron or nanochat else "xielu" if apertus
                else "silu")
    if rng.random() < 0.25:  # Cohere (F layers, q/k norms or not), Cohere 2 (S and N)
        v2 = rng.random() < 0.5
        ckinds = "".join(rng.choice("SN") for _ in range(L)) if v2 else "F"
        fam = Cohere(**{k: getattr(fam, k) for k in ("V", "E", "H", "Hkv", "dh", "F", "L",
                                                      "tied", "bias_q", "bias_k", "bias_v",
                                                      "bias_o", "attention_dropout",
                                                      "window")},
                     kinds=ckinds if len(set(ckinds)) > 1 else ckinds[0],
                     cohere_qk_norm=not v2 and rng.random() < 0.5)
    device, dtype = rng.choice(("cpu", "cuda")), rng.choice((F32, F32, BF16, F16))
    lora = None
    if rng.random() < 0.4:
        targets = rng.sample(("q_proj", "k_proj", "v_proj", "o_proj", "down_proj", "fc1",
                              "all-linear"), rng.choice((1, 2)))
        lora = Lora(rng.choice((1, 8)), frozenset(targets), rng.choice((0.0, 0.05)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 33)), dtype, device,
                    rng.choice(("eager", "sdpa")),
                    autocast=BF16 if device == "cuda" and dtype == F32 and rng.random() < 0.5
                    else None, use_cache=rng.random() < 0.2, lora=lora,
                    recompute=rng.choice(("none", "none", "selective", "full")))


def test_compiled_equals_traced_on_random_configurations() -> None:
    assert cache_hits_on_random_draws(_draw, 20261128, 40) >= 8
