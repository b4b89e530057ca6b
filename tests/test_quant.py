"""Quantised weights as the real formats store them, against the byte sizes of
published checkpoints and the formats' own block layouts."""

from __future__ import annotations

import json

import pytest

from transformer_calc import ModelSpec
from transformer_calc.errors import TcalcError
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.presets import load_model
from transformer_calc.quant import FORMATS, GGML_TYPES, weight_format_bytes


def size(model: str, fmt: str, group: int = 128) -> int:
    spec = load_model(model)
    return weight_format_bytes(spec, count_params(spec), fmt, group).total


# Published checkpoints, in decimal GB as their repositories list them (two decimals: a
# tolerance of 0.005 GB plus the file's own metadata, ~1 MB of GGUF tokenizer or safetensors
# header). Sources:
#  TheBloke/Llama-2-7B-GPTQ (main: 4-bit, group 128, act-order no): 3.90 GB
#  TheBloke/Llama-2-7B-AWQ (4-bit, group 128): 3.89 GB
#  TheBloke/Llama-2-7B-GGUF: Q4_0 3.83, Q4_K_S 3.86, Q4_K_M 4.08, Q5_K_M 4.78, Q6_K 5.53,
#    Q8_0 7.16 GB
#  unsloth/llama-3-8b-bnb-4bit (bitsandbytes NF4, double quantisation): 5.70 GB
#  neuralmagic/Meta-Llama-3-8B-Instruct-FP8 (fp8 e4m3, per-tensor weight and input scales):
#    9.08 GB
#  TheBloke/Mixtral-8x7B-v0.1-GGUF Q8_0: 49.62 GB
PUBLISHED = [
    ("llama-2-7b", "gptq", 3.90), ("llama-2-7b", "awq", 3.89),
    ("llama-2-7b", "gguf-q4_0", 3.83), ("llama-2-7b", "gguf-q4_k_s", 3.86),
    ("llama-2-7b", "gguf-q4_k_m", 4.08), ("llama-2-7b", "gguf-q5_k_m", 4.78),
    ("llama-2-7b", "gguf-q6_k", 5.53), ("llama-2-7b", "gguf-q8_0", 7.16),
    ("llama-3-8b", "bnb-nf4", 5.70), ("llama-3-8b", "fp8-tensor", 9.08),
    ("mixtral-8x7b", "gguf-q8_0", 49.62),
]


@pytest.mark.parametrize(("model", "fmt", "gb"), PUBLISHED)
def test_published_checkpoint_sizes(model: str, fmt: str, gb: float) -> None:
    assert abs(size(model, fmt) / 1e9 - gb) <= 0.0075


def test_gpt_oss_mxfp4_to_the_byte() -> None:
    # openai/gpt-oss-120b model.safetensors.index.json "total_size": 65,248,815,744 bytes:
    # MXFP4 experts (blocks of 32 e2m1 pairs + one e8m0 scale), everything else bf16
    assert size("gpt-oss-120b", "mxfp4") == 65_248_815_744


def test_int4_formats_keep_embeddings_and_head_16_bit() -> None:
    # generic int4 quantises the embeddings and LM head that GPTQ/AWQ
    # checkpoints keep in fp16 (Llama-3-8B: 2 · 128,256 · 4,096 · 2 bytes = 2.1 GB)
    spec = load_model("llama-3-8b")
    b = {i.name: i.total for i in weight_format_bytes(spec, count_params(spec), "awq").items}
    assert b["unquantised"] == 2 * (2 * 128_256 * 4096) + 2 * (65 * 4096)


# Bits per weight of each layout, from the formats' definitions: ggml's type traits
# (block elements, block bytes), bitsandbytes' blockwise 4-bit with double quantisation,
# OCP MXFP4, NVIDIA NVFP4.
@pytest.mark.parametrize(("gtype", "bpw"), [("q4_0", 4.5), ("q4_1", 5.0), ("q5_0", 5.5),
                                            ("q5_1", 6.0), ("q8_0", 8.5), ("q2_k", 2.625),
                                            ("q3_k", 3.4375), ("q4_k", 4.5), ("q5_k", 5.5),
                                            ("q6_k", 6.5625)])
def test_ggml_bits_per_weight(gtype: str, bpw: float) -> None:
    block, nbytes = GGML_TYPES[gtype]
    assert 8 * nbytes / block == bpw


@pytest.mark.parametrize(("fmt", "bpw"), [("mxfp4", 4.25), ("nvfp4", 4.5), ("bnb-int8", 8.0),
                                          ("fp8", 8.0), ("bnb-nf4", 4.125)])
def test_layout_bits_per_weight_on_a_large_matrix(fmt: str, bpw: float) -> None:
    from transformer_calc.quant import _linear

    out, inp = 16384, 16384
    total = sum(b for _, b, _ in _linear(fmt, out, inp, out * inp, 128))
    assert abs(8 * total / (out * inp) - bpw) < 0.01


def test_gptq_one_matrix_by_hand() -> None:
    from transformer_calc.quant import _linear

    # a 4096 -> 11008 projection, 4 bits, group 128: qweight 4096·11008/2, qzeros and scales
    # per (4096/128 = 32 groups) × 11008, g_idx 4096 int32 (AutoGPTQ QuantLinear buffers)
    parts = {k: b for k, b, _ in _linear("gptq", 11008, 4096, 4096 * 11008, 128)}
    assert parts == {"qweight": 22_544_384, "qzeros": 176_128, "scales": 704_512,
                     "g_idx": 16_384}
    # 8 bits (AutoGPTQ's QuantLinear with bits=8: qweight (in·8/32) × out int32, qzeros
    # groups × (out·8/32) int32): a byte per weight and per zero point
    parts = {k: b for k, b, _ in _linear("gptq-int8", 11008, 4096, 4096 * 11008, 128)}
    assert parts == {"qweight": 45_088_768, "qzeros": 352_256, "scales": 704_512,
                     "g_idx": 16_384}


def test_every_format_runs_and_shrinks_a_bf16_model() -> None:
    spec = load_model("qwen3-30b-a3b")
    p = count_params(spec)
    for fmt in FORMATS:
        b = weight_format_bytes(spec, p, fmt)
        if fmt in ("gguf-f16", "gguf-bf16"):  # norms and routers in f32: a little over 2N
            assert 2 * p.total < b.total < 2.01 * p.total
        else:
            assert 0 < b.total < 2 * p.total, fmt


def test_qlora_memory() -> None:
    spec = load_model("llama-3-8b")
    r = memory_report(spec, Settings(precision="bf16", lora_rank=16, quant="bnb-nf4",
                                     seq_len=1024))
    c = {i.name: i.total for i in r.components.items}
    assert c["weights"] == size("llama-3-8b", "bnb-nf4")
    assert any(i.name == "dequantised_weight" for p in r.phases for i in p.items.items)
    with pytest.raises(TcalcError, match="add --lora"):
        Settings(quant="bnb-nf4")
    with pytest.raises(TcalcError, match="--quant: expected one of"):
        Settings(quant="int3", inference=True)


def test_cli_quant_and_qlora(cli) -> None:
    data = cli.json("memory", "llama-2-7b", "--inference", "--quant", "gguf-q4_k_m",
                    "--seq-len", "4096")
    weights = next(c for c in data["components"] if c["name"] == "weights")
    assert weights["bytes"] == size("llama-2-7b", "gguf-q4_k_m")
    q = cli.json("memory", "llama-3-8b", "--lora", "64", "--qlora", "--seq-len", "1024")
    assert q["settings"]["quant"] == "bnb-nf4" and q["settings"]["precision"] == "bf16"
    for args, message in ((("--qlora",), "--qlora: give the adapters' rank"),
                          (("--quant", "gptq"), "add --lora RANK"),
                          (("--inference", "--quant", "q4"), "--quant: expected one of")):
        r = cli("memory", "llama-3-8b", *args, code=2)
        assert message in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize(("qc", "fmt"), [
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "gptq"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 64}, "gptq-int8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}, "awq"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
     "bnb-nf4"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bnb-int8"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
])
def test_quantization_config_sets_the_served_format(cli, tmp_path, qc: dict, fmt: str) -> None:
    # a quantised checkpoint's config.json says how its weights are stored
    import json

    from conftest import DATA

    config = json.loads((DATA / "hf" / "llama-2-7b.json").read_text()) | {
        "quantization_config": qc}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    data = cli.json("memory", str(path), "--inference", "--seq-len", "1024")
    assert data["settings"]["quant"] == fmt
    assert data["settings"]["group_size"] == qc.get("group_size", 128)
    spec = load_model(str(path))
    weights = next(c for c in data["components"] if c["name"] == "weights")
    assert weights["bytes"] == weight_format_bytes(spec, count_params(spec), fmt,
                                                   qc.get("group_size", 128)).total
    # an explicit --dtype still wins
    bf16 = cli.json("memory", str(path), "--inference", "--seq-len", "1024", "--dtype", "fp16")
    assert bf16["settings"]["quant"] == ""


def test_q4_k_m_gives_more_bits_to_the_layers_llama_cpp_picks() -> None:
    """llama.cpp's use_more_bits (llama-quant.cpp): Q4_K_M stores attn_v and ffn_down in Q6_K
    for layers i < n/8, i >= 7n/8 and (i - n/8) % 3 == 2. With 22 layers that is 0, 1, 4, 7,
    10, 13, 16, 19, 20, 21: ten of each, beside the Q6_K output head (210 bytes per 256
    weights). (A mutation sample, i - n/8 -> i + n/8, survived the 32-layer sizes, whose two
    readings pick as many layers.)"""
    spec = ModelSpec(name="l22", vocab_size=1024, d_model=256, n_layers=22, n_heads=4,
                     d_ff=512, max_positions=512, position="rope", ffn="gated",
                     activation="silu", norm="rmsnorm", tie_embeddings=False, bias_q=False,
                     bias_k=False, bias_v=False, bias_o=False, bias_ffn_in=False,
                     bias_ffn_out=False)
    rows = {i.name: i.total for i in weight_format_bytes(spec, count_params(spec),
                                                         "gguf-q4_k_m").items}
    picked = [0, 1, 4, 7, 10, 13, 16, 19, 20, 21]
    v, down, head = 256 * 256, 512 * 256, 1024 * 256
    assert rows["gguf.q6_k"] == (len(picked) * (v + down) + head) // 256 * 210


def test_a_config_json_is_served_in_its_quantization_config_or_says_why_not(cli, tmp_path
                                                                            ) -> None:
    # a tiny Llama config.json with each quantization_config: GPTQ at 3 bits is served as
    # its 3-bit storage, a method tcalc does not model is said beside the answer, and a
    # value GPTQConfig refuses is one error naming the file's key
    base = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(base | {"quantization_config": {
        "quant_method": "gptq", "bits": 3, "group_size": 128}}))
    out = cli.json("memory", str(path), "--inference")
    assert out["settings"]["quant"] == "gptq-int3"
    weights = next(c for c in out["components"] if c["name"] == "weights")
    assert weights["formula"].startswith("gptq-int3 as stored: ")
    path.write_text(json.dumps(base | {"quantization_config": {"quant_method": "hqq"}}))
    notes = cli.json("memory", str(path), "--inference")["notes"]
    assert any(n.startswith("quantization_config: quant_method 'hqq' is not a format tcalc "
                            "models") for n in notes)
    path.write_text(json.dumps(base | {"quantization_config": {
        "quant_method": "gptq", "bits": "4"}}))
    err = cli("memory", str(path), "--inference", code=2).stderr
    assert "key 'quantization_config.bits': expected one of 2, 3, 4, 8" in err
