"""Memory: model states, activations, sharding, inference and fit."""

from __future__ import annotations

import pytest

from transformer_calc import ModelSpec, count_params, load_model
from transformer_calc.errors import TcalcError
from transformer_calc.memory import (
    Settings,
    activation_breakdown,
    adafactor_state_elements,
    korthikanti_per_layer,
    kv_elements_per_token,
    memory_report,
    weight_bytes,
)

GPT2 = load_model("gpt2")
N = 124_439_808  # GPT2LMHeadModel, transformers 5.23.0 (see test_params_presets.py)


def states(**kw) -> dict[str, int]:
    r = memory_report(GPT2, Settings(**kw))
    return {i.name: i.total for i in r.components.items if i.name != "activations"}


def test_fp32_adamw_is_16_bytes_per_param() -> None:
    # HF performance docs: fp32 weights 4 + gradients 4 + AdamW 8 = 16 bytes per parameter
    assert states() == {"weights": 4 * N, "gradients": 4 * N, "optimizer_states": 8 * N}
    assert sum(states().values()) == 16 * N


def test_mixed_precision_accounting() -> None:
    # HF docs: mixed weights 6 (fp32 + 16-bit copy), gradients 4 (fp32), AdamW 8 -> 18
    assert states(precision="bf16", mixed=True) == {
        "weights": 2 * N, "master_weights": 4 * N, "gradients": 4 * N,
        "optimizer_states": 8 * N}
    assert states(precision="fp16", mixed=True, optimizer="adamw8bit")["optimizer_states"] == 2 * N


@pytest.mark.parametrize("optimizer, per_param", [
    ("adam", 8), ("adamw8bit", 2), ("sgd", 0), ("sgd-momentum", 4), ("lion", 4)])
def test_optimizer_bytes(optimizer: str, per_param: int) -> None:
    assert states(optimizer=optimizer)["optimizer_states"] == per_param * N


def test_pure_bf16_keeps_moments_in_bf16() -> None:
    assert states(precision="bf16") == {"weights": 2 * N, "gradients": 2 * N,
                                        "optimizer_states": 4 * N}


def test_adafactor_from_shapes() -> None:
    # Factored second moment: r + c per matrix, n per vector (Shazeer & Stern 2018).
    spec = ModelSpec(name="t", vocab_size=100, d_model=8, n_layers=1, n_heads=2, d_ff=32,
                     max_positions=16, final_norm=False, tie_embeddings=False)
    # tokens (100, 8): 108; positions (16, 8): 24; Q, K, V, O (8, 8): 4·16 = 64 and biases
    # 4·8 = 32; FFN in (32, 8): 40, bias 32, out (8, 32): 40, bias 8; norms 2·16 = 32;
    # LM head (100, 8): 108.
    assert adafactor_state_elements(count_params(spec)) == (
        108 + 24 + 64 + 32 + 40 + 32 + 40 + 8 + 32 + 108)
    r = memory_report(spec, Settings(optimizer="adafactor"))
    assert r.components.get("optimizer_states").total == 4 * 488
    # Far below AdamW's 8 bytes per parameter for a real model:
    gpt2 = states(optimizer="adafactor")["optimizer_states"]
    assert gpt2 < N // 50


def test_adafactor_fused_qkv_is_one_matrix() -> None:
    fused = memory_report(GPT2, Settings(optimizer="adafactor")).components
    split = memory_report(GPT2.replace(fused_qkv=False), Settings(optimizer="adafactor"))
    diff = split.components.get("optimizer_states").total - fused.get("optimizer_states").total
    assert diff == 4 * 2 * 768 * 12  # (768, 2304) factored once instead of three (768, 768)
    # nn.Transformer fuses Q/K/V in every attention block, cross-attention included: 18 here
    base = load_model("transformer-base")
    fused = memory_report(base, Settings(optimizer="adafactor")).components
    split = memory_report(base.replace(fused_qkv=False), Settings(optimizer="adafactor"))
    assert (split.components.get("optimizer_states").total
            - fused.get("optimizer_states").total) == 4 * 2 * 512 * 18


def test_activations_follow_korthikanti_in_the_ideal_case() -> None:
    # Korthikanti et al. 2022, Eq. 1: per layer s·b·h·(34 + 5·a·s/h) bytes, 16-bit, 1-byte
    # masks, native GELU, Q/K/V each kept once. tcalc's per-tensor sum for such a layer with
    # flash-free eager attention differs only by HF's contiguous K/V copies (2 · 2sbh), the
    # separate Q (already in the 34) and the LayerNorm statistics (fp32 mean/rstd: 2 · 2 · 4sb).
    spec = GPT2.replace(activation="gelu", fused_qkv=False)
    B, T = 2, 256
    items = activation_breakdown(spec, B, T, act_bytes=2, device="cuda", attention="eager").items
    layer = sum(i.count for i in items if i.stack == "decoder")
    s, b, h = T, B, 768
    assert korthikanti_per_layer(spec, B, T) == s * b * h * 34 + 5 * 12 * s * s * b
    # tcalc keeps K and V (2·2sbh) where Korthikanti's Q,K (4sbh) + V (2sbh) are counted, so
    # the only differences are the K/V-for-copy accounting (same bytes) and the statistics.
    assert layer == korthikanti_per_layer(spec, B, T) + 2 * 2 * 4 * s * b


def test_flash_attention_keeps_no_t_squared() -> None:
    def act(T: int, attention: str) -> int:
        items = activation_breakdown(GPT2, 1, T, act_bytes=2, attention=attention).items
        return sum(i.total for i in items)

    eager_growth = act(2048, "eager") / act(1024, "eager")
    flash_growth = act(2048, "flash") / act(1024, "flash")
    assert eager_growth > 2.5 and flash_growth == pytest.approx(2.0, rel=0.01)


def test_recompute_shrinks_activations() -> None:
    def act(recompute: str) -> int:
        items = activation_breakdown(GPT2, 4, 1024, act_bytes=2, recompute=recompute).items
        return sum(i.total for i in items)

    assert act("full") < act("selective") < act("none")
    # selective drops exactly the B·H·T² tensors: softmax 2, mask 1, dropout output 2 bytes
    assert act("none") - act("selective") == 12 * 5 * 4 * 12 * 1024 * 1024


def test_no_dropout_keeps_no_masks() -> None:
    items = activation_breakdown(GPT2, 1, 128, act_bytes=2, dropout=False).items
    assert not [i for i in items if "dropout" in i.name]


def test_dropout_follows_the_model() -> None:
    llama = load_model("llama-3-8b")
    assert llama.dropout == 0 and GPT2.dropout == 0.1
    r = memory_report(llama, Settings(precision="bf16", seq_len=128))
    assert not [i for i in r.activations.items if "dropout" in i.name]


def test_kv_cache_gqa() -> None:
    # Llama-3-8B: 2 (K, V) · 32 layers · 8 K/V heads · 128 = 65,536 elements per token
    llama = load_model("llama-3-8b")
    assert kv_elements_per_token(llama) == 65_536
    r = memory_report(llama, Settings(inference=True, batch_size=4, seq_len=8192))
    assert r.components.get("kv_cache").total == 4 * 8192 * 65_536 * 2
    # the same model with full multi-head attention would cache 4×
    mha = memory_report(llama.replace(n_kv_heads=None), Settings(inference=True,
                                                                 batch_size=4, seq_len=8192))
    assert mha.components.get("kv_cache").total == 4 * r.components.get("kv_cache").total


def test_inference_weight_dtypes() -> None:
    assert weight_bytes(1000, "fp32") == 4000
    assert weight_bytes(1000, "bf16") == 2000
    assert weight_bytes(1024, "int8", 128) == 1024 + 8 * 2  # + one fp16 scale per 128
    assert weight_bytes(1024, "int4", 128) == 512 + 8 * 2
    with pytest.raises(TcalcError):
        weight_bytes(10, "fp12")


def test_zero_stages_and_parallelism() -> None:
    base = dict(precision="bf16", mixed=True, batch_size=1, seq_len=1024)
    single = memory_report(GPT2, Settings(**base)).per_gpu

    def per_gpu(**kw) -> dict[str, int]:
        r = memory_report(GPT2, Settings(**base, **kw)).per_gpu
        return {i.name: i.total for i in r.items}

    # Megatron-LM / DeepSpeed (a 16-bit model beside fp32 master weights): ZeRO-1 shards the
    # states and master weights, ZeRO-2 the gradients too, ZeRO-3 the 16-bit weights
    z0, z1, z2, z3 = (per_gpu(gpus=8, zero=z, recipe="megatron") for z in range(4))
    one = memory_report(GPT2, Settings(**base, recipe="megatron")).per_gpu
    assert z0["optimizer_states"] == single.get("optimizer_states").total
    assert z1["optimizer_states"] == -(-8 * N // 8) and z1["master_weights"] == 4 * N // 8
    assert z1["gradients"] == 4 * N and z2["gradients"] == 4 * N // 8
    assert z2["weights"] == 2 * N and z3["weights"] == 2 * N // 8
    assert z3["activations"] == one.get("activations").total  # data parallel: per GPU
    # torch (AMP: the fp32 weights are the model): ZeroRedundancyOptimizer hands out whole
    # parameters, so the busiest rank holds the token embedding's states (38,597,376
    # parameters, more than an eighth of GPT-2), and the weights stay whole; FSDP2 shards the
    # weights at rest for ZeRO-2 and 3, gathering them in bf16 for forward and backward
    t1, t2, t3 = (per_gpu(gpus=8, zero=z) for z in (1, 2, 3))
    assert t1["optimizer_states"] == 8 * 38_597_376 and t1["master_weights"] == 4 * N
    assert t2["master_weights"] == t3["master_weights"] == 4 * N // 8
    assert t2["gathered_parameters"] > 2 * N > t3["gathered_parameters"]
    # tensor and pipeline parallelism as Megatron-LM splits them (vocabulary-parallel)
    tp = per_gpu(gpus=4, tp=4, recipe="megatron")
    assert tp["weights"] == 2 * N // 4
    assert tp["activations"] < one.get("activations").total
    sp = per_gpu(gpus=4, tp=4, sequence_parallel=True, recipe="megatron")
    assert sp["activations"] == pytest.approx(one.get("activations").total / 4, rel=1e-6)
    # a layers-only plan (transformers' tp_plan, torchtitan) keeps the embeddings whole
    layers = per_gpu(gpus=4, tp=4, recipe="megatron", tp_plan="layers")
    assert layers["weights"] == 2 * (85_054_464 // 4 + 38_597_376 + 786_432 + 2 * 768)
    pp = per_gpu(gpus=4, pp=4, recipe="megatron")
    # the most loaded stage (Megatron-LM's theoretical_memory_usage.py): 3 of the 12 layers
    # (85,054,464 / 4 parameters) and the first stage's token and position tables
    # (38,597,376 + 786,432), heavier than the last stage's final norm and tied-head copy
    assert pp["weights"] == 2 * (85_054_464 // 4 + 38_597_376 + 786_432)
    assert pp["activations"] == one.get("activations").total


def test_fit_and_largest_batch() -> None:
    r = memory_report(GPT2, Settings(precision="bf16", mixed=True, seq_len=1024),
                      gpu="A100-80GB")
    f = r.fit
    # "fits" and the largest batch go by the peak of a training step
    assert f.fits and f.headroom == 80 * 2**30 - r.peak
    at = memory_report(GPT2, Settings(precision="bf16", mixed=True, seq_len=1024,
                                      batch_size=f.max_batch_size))
    over = memory_report(GPT2, Settings(precision="bf16", mixed=True, seq_len=1024,
                                        batch_size=f.max_batch_size + 1))
    assert at.peak <= 80 * 2**30 < over.peak
    big = memory_report(load_model("llama-3-8b"), Settings(), gpu="RTX-4090").fit
    assert not big.fits and big.max_batch_size == 0


@pytest.mark.parametrize("kw, message", [
    (dict(mixed=True), "--mixed: pick its 16-bit dtype"),
    (dict(gpus=6, tp=4), "--gpus 6: expected a multiple of --tp × --pp = 4"),
    (dict(zero=4), "--zero: expected a stage from 0 to 3"),
    (dict(sequence_parallel=True), "--sequence-parallel needs --tp > 1"),
    (dict(optimizer="rmsprop"), "--optimizer: expected one of"),
])
def test_settings_validation(kw, message: str) -> None:
    with pytest.raises(TcalcError, match=message.replace("(", r"\(").replace("×", ".")):
        Settings(**kw)


def test_cli_memory_json_schema(cli) -> None:
    data = cli.json("memory", "gpt2-medium", "--mixed", "--adamw8bit", "--batch-size", "8")
    names = [c["name"] for c in data["components"]]
    assert names == ["weights", "master_weights", "gradients", "optimizer_states",
                     "activations"]
    assert data["total_bytes"] == sum(c["bytes"] for c in data["components"])
    assert data["per_gpu_bytes"] == data["total_bytes"]
    assert data["components"][0]["bytes"] == 2 * 354_823_168
    assert data["activations"]["bytes"] == data["components"][-1]["bytes"]
    assert all(isinstance(c["bytes"], int) for c in data["activations"]["components"])


def test_cli_memory_inference_and_fit(cli) -> None:
    data = cli.json("memory", "llama-3-8b", "--inference", "--dtype", "int4", "--batch-size",
                    "8", "--seq-len", "8192", "--gpu", "RTX-4090")
    assert [c["name"] for c in data["components"]] == ["weights", "kv_cache"]
    assert data["fit"]["fits"] is True and data["fit"]["max_batch_size"] >= 8
    table = cli("memory", "llama-3-8b", "--inference", "--gpu", "L4").stdout
    assert "L4" in table and "largest batch that fits" in table


def test_cli_memory_without_model(cli) -> None:
    out = cli("memory", "--mixed", "--adamw8bit").stdout
    assert "bytes per parameter" in out and "gpt2-medium" in out and "12" in out
    data = cli.json("memory", "--precision", "fp32")
    assert sum(r["bytes"] for r in data["bytes_per_param"]) == 16
    assert len(data["models"]) >= 23


def test_cli_memory_markdown(cli) -> None:
    md = cli("memory", "gpt2", "--format", "markdown").stdout
    # the verdict first, then the breakdown
    assert md.startswith("- gpt2 (training, bf16 AMP, sdpa, batch 1 × 1,024): peak ")
    assert "\n## gpt2: memory" in md
    assert "### activations" in md


def test_group_quantisation_down_to_one_weight_per_scale() -> None:
    from transformer_calc.memory import weight_bytes

    # int4: half a byte per weight plus one fp16 scale per group of group_size weights
    assert weight_bytes(1000, "int4", group_size=1) == 500 + 1000 * 2
    assert weight_bytes(1000, "int4", group_size=128) == 500 + 8 * 2  # ceil(1000 / 128) = 8
    with pytest.raises(TcalcError):
        weight_bytes(1000, "int4", group_size=0)


def test_kv_cache_says_which_formula_it_used() -> None:
    full = memory_report(load_model("llama-3-8b"), Settings(inference=True, seq_len=4096))
    assert full.components.get("kv_cache").formula == (
        "batch · context · 2 · layers · n_kv_heads · d_head · bytes")
    sliding = memory_report(load_model("gemma-2-9b"), Settings(inference=True, seq_len=8192))
    assert sliding.components.get("kv_cache").formula.startswith(
        "batch · Σ layers · min(context, window)")


def test_settings_default_context_is_the_models_own() -> None:
    # Settings() leaves seq_len 0: the model's max_positions (GPT-2: 1,024), else 2,048
    assert memory_report(load_model("gpt2"), Settings()).seq_len == 1024
    assert memory_report(load_model("t5-small"), Settings()).seq_len == 2048


def test_inference_batch_is_per_gpu_and_tp_pp_split_the_cache() -> None:
    # --batch-size is per GPU in inference as in training: a data-parallel replica keeps its
    # own batch's cache whole; tensor and pipeline parallelism split it (heads, layers)
    spec = load_model("llama-3-8b")
    one = memory_report(spec, Settings(inference=True, seq_len=4096, batch_size=4))
    kv = one.components.get("kv_cache").total
    # batch · T · (K, V) · layers · K/V heads · d_head · bf16
    assert kv == 4 * 4096 * 2 * 32 * 8 * 128 * 2
    dp = memory_report(spec, Settings(inference=True, seq_len=4096, batch_size=4, gpus=8))
    assert dp.per_gpu.get("kv_cache").total == kv
    tp = memory_report(spec, Settings(inference=True, seq_len=4096, batch_size=4, gpus=8, tp=8))
    assert tp.per_gpu.get("kv_cache").total == kv // 8
    pp = memory_report(spec, Settings(inference=True, seq_len=4096, batch_size=4, gpus=4, pp=4))
    assert pp.per_gpu.get("kv_cache").total == kv // 4


@pytest.mark.parametrize(("model", "tp"), [("llama-3.1-70b", 8), ("llama-3.1-70b", 16),
                                           ("qwen3-235b-a22b", 8), ("deepseek-v3", 8),
                                           ("llama-3-8b", 4), ("qwen2-0.5b", 14)])
def test_kv_heads_under_tensor_parallelism_as_vllm_splits_them(model: str, tp: int) -> None:
    # vLLM's ModelConfig.get_num_kv_heads (vllm/config/model.py): K/V heads per GPU are
    # max(1, total_num_kv_heads // tensor_parallel_size), replicated once tp exceeds them; an
    # MLA model caches its latent whole on every rank ("becomes MQA": one head). Values from
    # the configs' own keys (num_key_value_heads, head_dim, kv_lora_rank, qk_rope_head_dim).
    spec = load_model(model)
    T, B = 4096, 2
    r = memory_report(spec, Settings(inference=True, seq_len=T, batch_size=B, gpus=tp, tp=tp))
    L = spec.n_layers
    if spec.mla:
        per_token = spec.kv_lora_rank + spec.qk_rope_head_dim
    else:
        per_token = 2 * max(1, spec.kv_heads // tp) * spec.head_dim
    assert r.per_gpu.get("kv_cache").total == B * T * L * per_token * 2  # bf16


def test_largest_saved_tensors_are_per_gpu_beside_per_gpu_totals(cli) -> None:
    one = cli("memory", "llama-3-8b", "--mixed", "--seq-len", "4096", "--attention",
              "eager").stdout
    tp = cli("memory", "llama-3-8b", "--mixed", "--seq-len", "4096", "--gpus", "8",
             "--tp", "8", "--attention", "eager").stdout
    line1 = next(x for x in one.splitlines() if x.startswith("largest saved tensors: "))
    line8 = next(x for x in tp.splitlines() if x.startswith("largest saved tensors per GPU: "))
    # the attention probabilities (tensor-parallel) are an eighth per GPU with --tp 8
    # (fp32 under autocast: softmax is on its fp32 list)
    assert "decoder.attn.softmax 64.00 GiB" in line1 and "decoder.attn.softmax 8.00 GiB" in line8


def test_rmsnorm_keeps_one_fp32_value_per_token() -> None:
    # HF LlamaRMSNorm keeps torch.rsqrt(variance + eps), shape (B, T, 1), in fp32 whatever the
    # activation dtype: 1,024 bytes for B = 2, T = 128 (saved_tensors_hooks on a small
    # LlamaForCausalLM, torch 2.13 CPU, bf16 and fp32 alike)
    from transformer_calc.memory import activation_breakdown

    for act in (2, 4):
        b = activation_breakdown(load_model("llama-3-8b"), 2, 128, act_bytes=act, device="cpu",
                                 attention="eager", dropout=False)
        assert b.get("decoder.attn.norm.rstd").count == 2 * 128 * 4


def test_two_micro_batches_already_keep_gradients_live() -> None:
    # with gradient accumulation the gradients of the first micro-batch live through the
    # second one's forward and backward: from --grad-accum 2 on, not only past 2
    spec = load_model("gpt2")
    one = memory_report(spec, Settings(seq_len=256, grad_accum=1)).phases
    two = memory_report(spec, Settings(seq_len=256, grad_accum=2)).phases
    grads = {i.name: i.total for i in two[0].items.items}.get("gradients")
    assert grads == 4 * 124_439_808
    assert two[0].items.total - one[0].items.total == grads


def test_squared_relu_keeps_one_tensor_of_the_ffn_width() -> None:
    # HF ReLUSquaredActivation (Nemotron-H's MLP) keeps relu's output, which the
    # square reads too: one B·T·d_ff tensor, beside the MLP's input and the down projection's
    # input. Measured (tools/measure_mlp.py: torch 2.13 CPU, transformers 5.23, the dense
    # NemotronHMLP of tests/data/hf/variants/nemotron_h-tiny.json): activations_relu2_cpu.json
    import json

    from conftest import DATA

    from transformer_calc.hf import spec_from_hf
    from transformer_calc.memory import activation_breakdown

    fixture = json.loads((DATA / "activations_relu2_cpu.json").read_text())
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "nemotron_h-tiny.json")
                                   .read_text()))
    for row in fixture["rows"]:
        b = activation_breakdown(spec, row["B"], row["T"],
                                 act_bytes=4 if row["dtype"] == "fp32" else 2, device="cpu",
                                 attention="eager", dropout=False)
        mlp = sum(b.get(f"decoder.dense.ffn.{n}").total
                  for n in ("input", "activation", "out_input"))
        assert mlp == row["saved_bytes"]


def test_expert_parallel_error_names_the_data_parallel_gpus() -> None:
    # 8 GPUs over tp 2: 4 data-parallel ranks, which --ep 3 does not divide (a mutation of
    # the message's gpus // (tp · pp) survived until this test)
    with pytest.raises(TcalcError, match=r"--ep 3: .*\(4 GPUs;"):
        Settings(gpus=8, tp=2, ep=3)


def test_expert_parallel_needs_experts_it_divides() -> None:
    # --ep 2 on a dense model, or 6 experts over ep 4, is one error line
    from transformer_calc.presets import load_model

    gpt2 = load_model("gpt2")
    with pytest.raises(TcalcError, match=r"--ep 2: expected a divisor of gpt2's 0 experts"):
        memory_report(gpt2, Settings(gpus=2, ep=2))
    moe = gpt2.replace(n_experts=6, top_k=2)
    with pytest.raises(TcalcError, match=r"--ep 4: expected a divisor of gpt2's 6 experts"):
        memory_report(moe, Settings(gpus=4, ep=4))
    assert memory_report(moe, Settings(gpus=2, ep=2)).per_gpu.total > 0


def test_context_parallel_needs_a_length_of_whole_chunk_pairs() -> None:
    # --cp 2 splits the sequence into 2 · cp = 4 chunks (Megatron-LM's load-balanced split):
    # 1,022 tokens are refused, 1,024 taken (a mutation of cp > 1 into cp > 2 survived until
    # this test: seed 13)
    from transformer_calc.presets import load_model

    gpt2 = load_model("gpt2")
    with pytest.raises(TcalcError, match=r"--cp 2: the sequence length must be a multiple"):
        memory_report(gpt2, Settings(gpus=2, cp=2, seq_len=1022))
    assert memory_report(gpt2, Settings(gpus=2, cp=2, seq_len=1024)).per_gpu.total > 0


def test_a_loss_without_upcast_holds_the_logits_in_their_own_dtype() -> None:
    """The forward's high point holds the logits: in the activation dtype alone when the model
    takes its loss without an fp32 upcast (BERT: LOSS_NO_UPCAST, read from transformers'
    source) and the run is pure bf16; with the upcast, an fp32 copy beside them. (A mutation
    sample, seed 16, added a byte to the first and survived.)"""
    from transformer_calc.hf import spec_from_hf

    spec = spec_from_hf({"model_type": "bert"})
    assert not spec.loss_fp32
    B, T, V = 2, 128, spec.vocab_size
    pure = memory_report(spec, Settings(precision="bf16", batch_size=B, seq_len=T))
    logits = [i for p in pure.phases for i in p.items.items if i.name == "logits"]
    assert logits and all(i.total == B * T * V * 2 for i in logits)
    up = memory_report(spec.replace(loss_fp32=True), Settings(precision="bf16", batch_size=B,
                                                                seq_len=T))
    logits = [i for p in up.phases for i in p.items.items if i.name == "logits"]
    assert logits and all(i.total == B * T * V * (2 + 4) for i in logits)


def test_inference_trains_nothing() -> None:
    # (a mutation sample, seed 16: the inference path's trainable count 0 -> 1 survived)
    rep = memory_report(load_model("gpt2"), Settings(inference=True, seq_len=128))
    assert rep.trainable_params == 0


def test_deepseek_v4_indexer_gets_no_gradient_and_lora_is_refused() -> None:
    """DeepSeek-V4's Q layers pick compressed entries by the indexer's top-k indices only, so
    its parameters never receive a gradient (measured: after loss.backward() on
    deepseek_v4-tiny.json in transformers 5.23, exactly the indexer's 6 tensors, 2,504
    parameters, have .grad None): no gradients or optimizer states are counted for them.
    peft 0.21's LoRA with all-linear fails in the grouped output projection's forward
    (measured: a shape mismatch in DeepseekV4GroupedLinear), so LoRA is refused."""
    import json
    from pathlib import Path

    from transformer_calc.hf import spec_from_hf

    spec = spec_from_hf(json.loads((Path(__file__).parent / "data" / "hf" / "variants"
                                    / "deepseek_v4-tiny.json").read_text()))
    p = count_params(spec)
    indexer = sum(i.total for i in p.items if ".attn.indexer." in i.name)
    assert indexer == 2_504
    r = memory_report(spec, Settings(precision="fp32", seq_len=64))
    assert r.trainable_params == p.total - indexer
    assert any("indexer (2,504 parameters)" in n for n in r.notes)
    with pytest.raises(TcalcError, match=r"--lora: LoRA fine-tuning of .* \(DeepSeek-V4\)"):
        memory_report(spec, Settings(precision="bf16", seq_len=64, lora_rank=8))


def test_the_presets_table_shows_each_peak_beside_its_sum(cli) -> None:
    # `tcalc memory` without a model: a row per preset, its peak (what a GPU must hold) and
    # the components' sum apart, each as that preset's own report gives them
    data = cli.json("memory")
    assert data["schema"] == "tcalc.memory-overview/1"
    row = next(m for m in data["models"] if m["model"] == "gpt2")
    one = cli.json("memory", "gpt2", "--seq-len", "1024")
    assert row["peak_bytes"] == one["peak_bytes"] != row["total_bytes"]
    import re

    assert re.search(r"┃\s+sum\s+┃\s+peak\s+┃", cli("memory").stdout)
