"""The peak of a training step, and the implementation details that decide what is saved.

The reference is a real GPU: tests/data/peak_cuda_h100.json, written by
tools/measure_peak_cuda.py on one NVIDIA H100 80GB HBM3 (torch 2.11.0+cu130, transformers
5.17.0, CUDA 13.0): torch.cuda.max_memory_allocated() within the forward, the backward and
the AdamW step (foreach, torch's CUDA default) of the second of two training steps, GPT-2
(B=8, T=1024) and a Llama-3.2-1B-shaped model (B=2, T=2048), fp32 / torch AMP bf16 / pure
bf16, SDPA / eager. Nothing here was printed by tcalc.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache

import pytest
from conftest import DATA
from graph_rows import every_row

from transformer_calc import load_model
from transformer_calc.memory import (
    CUBLAS_WORKSPACE,
    Settings,
    activation_breakdown,
    attention_kernel,
    memory_report,
)
from transformer_calc.spec import ModelSpec

H100 = json.loads((DATA / "peak_cuda_h100.json").read_text())
MIB = 1 << 20
# meta-llama/Llama-3.2-1B's shape keys, as tools/measure_peak_cuda.py builds it
LLAMA_1B = dict(name="llama-3.2-1b-shape", vocab_size=128256, d_model=2048, n_layers=16,
                n_heads=32, n_kv_heads=8, d_head=64, d_ff=8192, max_positions=131072,
                position="rope", ffn="gated", activation="silu", norm="rmsnorm",
                tie_embeddings=True, bias=False, softmax_fp32=True)
RECIPES = {"fp32": dict(precision="fp32"), "amp_bf16": dict(precision="bf16", mixed=True),
           "bf16": dict(precision="bf16")}


def _spec(name: str) -> ModelSpec:
    if name == "gpt2":
        return load_model("gpt2")
    return ModelSpec(**{k: v for k, v in LLAMA_1B.items() if k != "bias"},
                     **{k: False for k in ("bias_q", "bias_k", "bias_v", "bias_o",
                                           "bias_ffn_in", "bias_ffn_out")})


def _report(run: dict):  # type: ignore[no-untyped-def]
    return _report_of(run["model"], run["recipe"], run["attention"], run["batch"],
                      run["seq_len"])


@cache
def _report_of(model: str, recipe: str, attention: str, batch: int, seq_len: int
               ):  # type: ignore[no-untyped-def]
    """memory_report for a run's settings, once per process (several tests read each)."""
    return memory_report(_spec(model), Settings(
        **RECIPES[recipe], attention=attention, device="cuda", batch_size=batch,
        seq_len=seq_len))


RUNS = H100["runs"]


def _run_id(run: dict) -> str:
    return f"{run['model']}-{run['recipe']}-{run['attention']}"


def test_the_model_is_the_one_measured() -> None:
    for run in RUNS:
        assert _report(run).params == run["params"]


def _every_phase_within_10_percent_of_the_h100(run: dict) -> None:
    measured = run["steps"][1]  # the steady state: optimizer states exist, gradients freed
    phases = {p.name: p.items.total for p in _report(run).phases}
    errors = {name: (phases[name] - measured[f"{name}_peak_mib"] * MIB)
              / (measured[f"{name}_peak_mib"] * MIB) for name in phases}
    assert all(abs(e) <= 0.10 for e in errors.values()), errors
    # in fact within 3 % everywhere (measured 2026-11-23): a regression shows here first
    assert all(abs(e) <= 0.03 for e in errors.values()), errors


def test_every_phase_within_10_percent_of_the_h100() -> None:
    every_row(RUNS, _every_phase_within_10_percent_of_the_h100, ids=_run_id)


def _the_peak_is_the_start_of_backward_and_in_its_phase(run: dict) -> None:
    r = _report(run)
    measured = run["steps"][1]
    assert r.peak_phase.name == max(("forward", "backward", "optimizer"),
                                    key=lambda n: measured[f"{n}_peak_mib"]) == "backward"
    assert r.peak == r.peak_phase.items.total > r.per_gpu.total - r.per_gpu.get(
        "gradients").total


def test_the_peak_is_the_start_of_backward_and_in_its_phase() -> None:
    every_row(RUNS, _the_peak_is_the_start_of_backward_and_in_its_phase, ids=_run_id)


def test_between_steps_weights_states_and_the_cublas_workspaces() -> None:
    # after zero_grad the H100 holds weights + AdamW states + 65.0 to 82.7 MiB: cuBLAS's two
    # 32 MiB workspaces and up to 19 MiB of small tensors not identified (< 0.2 % of any peak)
    for run in RUNS:
        r = _report(run)
        held = (r.per_gpu.get("master_weights" if run["recipe"] == "amp_bf16" else "weights")
                .total + r.per_gpu.get("optimizer_states").total)
        extra = run["steps"][1]["after_zero_grad_mib"] * MIB - held
        assert CUBLAS_WORKSPACE <= extra <= CUBLAS_WORKSPACE + 19 * MIB


def test_the_loss_buffers_are_what_backward_adds_to_forward() -> None:
    # max allocated in backward − allocated after forward = two B·T·V fp32 buffers, exactly
    for run in RUNS:
        s = run["steps"][1]
        btv = run["batch"] * run["seq_len"] * _spec(run["model"]).vocab_size
        assert abs((s["backward_peak_mib"] - s["after_forward_mib"]) * MIB - 2 * btv * 4) < MIB
        r = _report(run)
        backward = r.phases[1].items
        assert backward.get("loss_gradients").total == 2 * btv * 4


def test_foreach_adamw_makes_one_parameter_sized_temporary() -> None:
    for run in RUNS:
        s, r = run["steps"][1], _report(run)
        temporary = (s["optimizer_peak_mib"] - s["after_backward_mib"]) * MIB
        per = 2 if run["recipe"] == "bf16" else 4
        assert abs(temporary - run["params"] * per) < 9 * MIB  # within the allocator's slack
        assert r.phases[2].items.get("optimizer_temporary").total == run["params"] * per


def test_optimizer_implementations() -> None:
    spec = load_model("gpt2")
    base = Settings(seq_len=1024)
    temp = {impl: memory_report(spec, dataclasses.replace(base, optimizer_impl=impl))
            .phases[2].items for impl in ("foreach", "fused", "for-loop")}
    assert temp["foreach"].get("optimizer_temporary").total == spec_params(spec) * 4
    assert "optimizer_temporary" not in {i.name for i in temp["fused"].items}
    # for-loop: two temporaries of the largest tensor, GPT-2's token embedding (50257 × 768)
    assert temp["for-loop"].get("optimizer_temporary").total == 2 * 50257 * 768 * 4
    sgd = memory_report(spec, dataclasses.replace(base, optimizer="sgd")).phases[2].items
    assert "optimizer_temporary" not in {i.name for i in sgd.items}


def spec_params(spec: ModelSpec) -> int:
    from transformer_calc import count_params

    return count_params(spec).total


def test_gradient_accumulation_keeps_gradients_through_forward_and_backward() -> None:
    spec = load_model("gpt2")
    one = memory_report(spec, Settings(seq_len=1024))
    four = memory_report(spec, Settings(seq_len=1024, grad_accum=4))
    grads = one.per_gpu.get("gradients").total
    assert four.phases[1].items.total - one.phases[1].items.total == grads
    assert four.phases[2].items.total == one.phases[2].items.total
    assert four.per_gpu.total == one.per_gpu.total


def test_autocast_copies_are_the_matmul_weights_only() -> None:
    # GPT-2: every parameter but the position table and the 25 LayerNorms (the tied token
    # embedding is cast for the LM head)
    spec = load_model("gpt2")
    r = memory_report(spec, Settings(precision="bf16", mixed=True, seq_len=1024))
    copies = r.phases[0].items.get("autocast_copies").total
    assert copies == 2 * (124439808 - 1024 * 768 - 25 * 2 * 768)
    # untied: the token embedding is only looked up, never cast; the LM head is
    llama = load_model("llama-3-8b")
    r = memory_report(llama, Settings(precision="bf16", mixed=True, seq_len=8))
    assert r.phases[0].items.get("autocast_copies").total == 2 * (
        8030261248 - 128256 * 4096 - (2 * 32 + 1) * 4096)
    assert "autocast_copies" not in {i.name for i in r.phases[2].items.items}


def test_fits_goes_by_the_peak() -> None:
    spec = load_model("gpt2")
    r = memory_report(spec, Settings(seq_len=1024, batch_size=8), gpu="H100-80GB")
    assert r.fit.headroom == r.fit.capacity - r.peak
    assert r.peak > r.per_gpu.total  # the loss buffers outweigh the gradients here


def test_cli_json_has_the_peak(cli) -> None:
    data = cli.json("memory", "gpt2", "--seq-len", "1024", "--batch-size", "8", "--attention",
                    "sdpa")
    assert data["peak_phase"] == "backward"
    assert [p["name"] for p in data["phases"]] == ["forward", "backward", "optimizer"]
    backward = data["phases"][1]
    assert backward["bytes"] == data["peak_bytes"] == sum(c["bytes"] for c in
                                                          backward["components"])
    inference = cli.json("memory", "gpt2", "--inference")
    assert inference["phases"] == [] and inference["peak_bytes"] == inference["per_gpu_bytes"]
    out = cli("memory", "gpt2", "--seq-len", "1024", "--grad-accum", "2", "--optimizer-impl",
              "fused").stdout
    assert "peak of a training step: " in out and "at the start of backward" in out
    bad = cli("memory", "gpt2", "--grad-accum", "0", code=2)
    assert "--grad-accum" in bad.stderr


# -- the causes of the peak, one test each ----------------------------------------------------

LLAMA = load_model("llama-3-8b")


def _names(spec: ModelSpec, **kw) -> set[str]:  # type: ignore[no-untyped-def]
    kw.setdefault("act_bytes", 2)
    b = activation_breakdown(spec, 1, 256, **kw)
    return {i.name.rsplit(".", 1)[-1] for i in b.items}


def test_cpu_sdpa_without_dropout_keeps_no_t_squared_tensor() -> None:
    assert attention_kernel(LLAMA, "sdpa", "cpu", 2, dropout=False) == "cpu_flash"
    assert "softmax" not in _names(LLAMA, device="cpu", attention="sdpa", dropout=False)
    assert "softmax" in _names(LLAMA, device="cpu", attention="sdpa", dropout=True)


def test_cuda_sdpa_kernel_choice() -> None:
    gpt2 = load_model("gpt2")
    assert attention_kernel(LLAMA, "sdpa", "cuda", 2, dropout=False) == "flash"
    # fp32 with grouped K/V heads: enable_gqa, which the memory-efficient kernel lacks: math
    assert attention_kernel(LLAMA, "sdpa", "cuda", 4, dropout=False) == "math"
    assert attention_kernel(gpt2, "sdpa", "cuda", 4, dropout=True) == "efficient"
    assert "softmax" in _names(LLAMA, device="cuda", attention="sdpa", act_bytes=4,
                               dropout=False)


def test_eager_softmax_in_fp32_keeps_both_copies() -> None:
    b = activation_breakdown(LLAMA, 1, 256, act_bytes=2, device="cuda", attention="eager",
                             dropout=False)
    probs = 32 * 256 * 256  # B·H·T·T
    assert b.get("decoder.attn.softmax").count == probs * 4
    assert b.get("decoder.attn.softmax_cast").count == probs * 2
    gpt2 = activation_breakdown(load_model("gpt2"), 1, 256, act_bytes=2, device="cuda",
                                attention="eager", dropout=False)
    assert gpt2.get("decoder.attn.softmax").count == 12 * 256 * 256 * 2  # GPT-2: no upcast


def test_rmsnorm_keeps_an_fp32_copy_and_the_normalised_tensor() -> None:
    b = activation_breakdown(LLAMA, 1, 256, act_bytes=2, device="cuda", attention="sdpa",
                             dropout=False)
    assert b.get("decoder.attn.norm.input_fp32").count == 256 * 4096 * 4
    assert b.get("decoder.attn.norm.normalized").count == 256 * 4096 * 2
    assert b.get("decoder.attn.norm.rstd").count == 256 * 4


def test_autocast_keeps_the_residual_stream_in_fp32_and_a_cast_per_projection() -> None:
    amp = activation_breakdown(LLAMA, 1, 256, act_bytes=2, device="cuda", attention="sdpa",
                               dropout=False, amp=True)
    assert amp.get("decoder.attn.norm.normalized").count == 256 * 4096 * 4
    assert amp.get("decoder.attn.input").count == 3 * 256 * 4096 * 2  # q, k, v casts
    assert amp.get("decoder.ffn.input").count == 2 * 256 * 4096 * 2  # gate, up casts


def test_the_picked_kernel_is_shown(cli) -> None:
    notes = cli.json("memory", "llama-3-8b", "--attention", "sdpa", "--seq-len", "512",
                     "--precision", "fp32")["notes"]
    assert any(n.startswith("sdpa on cuda runs math (as torch picks it): ")
               for n in notes)  # fp32 GQA
    bf16 = cli.json("memory", "llama-3-8b", "--attention", "sdpa", "--seq-len", "512",
                    "--precision", "bf16")["notes"]
    assert any(n.startswith("sdpa on cuda runs flash (as torch picks it): ") for n in bf16)
    eager = cli.json("memory", "llama-3-8b", "--seq-len", "512", "--attention", "eager")["notes"]
    assert not any(n.startswith("sdpa on") for n in eager)


# -- the same grid without a GPU -----------------------------------------------------------
# tests/data/peak_fake_cpu.json was written by tools/measure_peak_fake.py (torch 2.13.0+cpu,
# transformers 5.23.0): MemTracker over FakeTensorMode CPU tensors with CUDA's choices
# emulated (512-byte blocks, native_dropout's 1-byte masks, the H100's SDPA kernel, foreach
# AdamW, CUDA's autocast lists). It sees tensors only: cuBLAS's workspaces are not in it.
FAKE = json.loads((DATA / "peak_fake_cpu.json").read_text())["runs"]


def _without_workspace(run: dict) -> dict[str, int]:
    return {p.name: p.items.total - CUBLAS_WORKSPACE for p in _report(run).phases}


@pytest.mark.parametrize("run", FAKE, ids=lambda r: f"{r['model']}-{r['recipe']}-{r['attention']}")
def test_every_phase_within_10_percent_of_the_emulation(run: dict) -> None:
    measured = run["steps"][1]
    phases = _without_workspace(run)
    errors = {name: (phases[name] - measured[f"{name}_peak_mib"] * MIB)
              / (measured[f"{name}_peak_mib"] * MIB) for name in phases}
    assert all(abs(e) <= 0.10 for e in errors.values()), errors
    # in fact within 2.1 % everywhere (recorded 2026-11-23): a regression shows here first
    assert all(abs(e) <= 0.025 for e in errors.values()), errors


def test_the_emulation_agrees_with_the_h100() -> None:
    # the tool's own check, on the grid both measured: forward and backward within 0.5 % of
    # the real GPU once its 64 MiB of cuBLAS workspaces (which no tensor holds) are added; the
    # optimizer step within 3 % (GPT-2 in bf16 peaks at 1.2 GiB there, and the H100 holds up
    # to 19 MiB of small tensors nothing names: test_between_steps_...)
    h100 = {(r["model"], r["recipe"], r["attention"]): r["steps"][1] for r in RUNS}
    assert {(r["model"], r["recipe"], r["attention"]) for r in FAKE} == set(h100)
    for run in FAKE:
        real = h100[(run["model"], run["recipe"], run["attention"])]
        for phase, tolerance in (("forward", 0.005), ("backward", 0.005), ("optimizer", 0.03)):
            fake = run["steps"][1][f"{phase}_peak_mib"] * MIB + CUBLAS_WORKSPACE
            want = real[f"{phase}_peak_mib"] * MIB
            assert abs(fake - want) <= tolerance * want, (run["model"], run["recipe"],
                                                          run["attention"], phase)


def test_the_megatron_recipe_holds_18_bytes_per_parameter_throughout(cli) -> None:
    # Megatron-LM / DeepSpeed run the model in 16-bit beside an fp32 master copy
    # and a persistent fp32 gradient buffer; torch AMP keeps fp32 weights, autocast copies
    # from forward to backward and gradients only after backward
    spec = load_model("llama-3-8b")
    base = dict(precision="bf16", mixed=True, batch_size=1, seq_len=1024,
                optimizer_impl="fused")
    mega = memory_report(spec, Settings(**base, recipe="megatron"))
    amp = memory_report(spec, Settings(**base))
    pure = memory_report(spec, Settings(precision="bf16", batch_size=1, seq_len=1024))
    N = mega.params
    forward = {i.name: i.total for i in mega.phases[0].items.items}
    assert forward["weights"] == 6 * N and forward["gradients"] == 4 * N
    assert forward["optimizer_states"] == 8 * N and "autocast_copies" not in forward
    assert mega.activations.total == pure.activations.total  # no autocast: a 16-bit model
    assert "autocast_copies" in {i.name for i in amp.phases[0].items.items}
    assert "gradients" not in {i.name for i in amp.phases[0].items.items}
    out = cli("memory", "llama-3-8b", "--mixed", "--recipe", "megatron", "--optimizer-impl",
              "fused").stdout
    assert "held throughout: 18 in forward, 18 in the step" in " ".join(out.split())
    out = cli("memory", "llama-3-8b", "--mixed").stdout
    assert "in the optimizer step (with its temporary), so 18 at no single moment" in \
        " ".join(out.split())
    r = cli("memory", "llama-3-8b", "--precision", "fp32", "--recipe", "megatron", code=2)
    assert r.stderr == "Error: --recipe megatron: needs --mixed\n"


def test_the_sdpa_kernel_can_be_forced(cli) -> None:
    # the kernel is overridable, as torch.nn.attention.sdpa_kernel forces it
    def memory(*args: str) -> dict:
        return cli.json("memory", "gpt2", "--attention", "sdpa", "--seq-len", "512",
                        "--precision", "fp32", *args)

    auto = memory()  # fp32, MHA: the memory-efficient kernel
    assert any(n.startswith("sdpa on cuda runs efficient (as torch picks it)")
               for n in auto["notes"])
    math = memory("--sdpa-kernel", "math")
    assert any(n.startswith("sdpa on cuda runs math (forced by --sdpa-kernel)")
               for n in math["notes"])
    T2 = {c["name"]: c["bytes"] for c in math["activations"]["components"]}
    assert T2["decoder.attn.softmax"] == 12 * 12 * 512 * 512 * 4  # the T² probabilities
    assert math["activations"]["bytes"] > auto["activations"]["bytes"]
    for args, message in (
            (["--sdpa-kernel", "flash"], "--sdpa-kernel flash: torch's kernel refuses this "
                                         "model's attention: fp32 inputs"),
            (["--sdpa-kernel", "cpu_flash"], "--sdpa-kernel cpu_flash: not a kernel torch "
                                             "has on cuda"),
    ):
        assert cli("memory", "gpt2", "--attention", "sdpa", "--precision", "fp32", *args,
                   code=2).stderr.startswith(
            f"Error: {message}")
    r = cli("memory", "llama-3-8b", "--attention", "sdpa", "--precision", "fp32",
            "--sdpa-kernel", "efficient", code=2)
    assert "refuses this model's attention: grouped key/value heads" in r.stderr
    r = cli("memory", "gpt2", "--sdpa-kernel", "math", code=2)
    assert r.stderr == "Error: --sdpa-kernel: applies to --attention sdpa\n"


def test_what_the_peak_leaves_out_is_a_named_reserve_shown_apart(cli) -> None:
    # the allocator's cache, measured as max_memory_reserved − max_memory_allocated
    # on the H100 runs (2.0 % to 12.1 % of the peak), is shown beside the verdict, not in it
    spread = []
    for run in RUNS + json.loads((DATA / "peak_lora_cuda_h100.json").read_text())["runs"]:
        peak = max(s[k] for s in run["steps"] for k in s if k.endswith("_peak_mib"))
        spread.append((run["reserved_mib"] - peak) / peak)
    assert round(min(spread), 3) == 0.020 and round(max(spread), 3) == 0.121
    data = cli.json("memory", "gpt2", "--gpu", "A100-40GB", "--batch-size", "8")
    low, high = data["fit"]["reserve"]["allocator_cache_bytes"]
    assert (low, high) == (round(data["peak_bytes"] * 0.020), round(data["peak_bytes"] * 0.121))
    assert data["fit"]["headroom_bytes"] == data["fit"]["capacity_bytes"] - data["peak_bytes"]
    best = data["fit"]["max_batch_size"]
    tight = cli.json("memory", "gpt2", "--gpu", "A100-40GB", "--batch-size", str(best))
    out = cli("memory", "gpt2", "--gpu", "A100-40GB", "--batch-size", str(best)).stdout
    # batch 13 leaves 1.50 GiB, less than the cache's 4.66 GiB at the high end
    assert 0 < tight["fit"]["headroom_bytes"] < tight["fit"]["reserve"][
        "allocator_cache_bytes"][1]
    assert "the headroom is less than that: it may not fit" in " ".join(out.split())
    assert "it may not fit" not in " ".join(cli("memory", "gpt2", "--gpu", "A100-40GB",
                                                 "--batch-size", "8").stdout.split())
    assert "reserve" not in cli.json("memory", "gpt2", "--gpu", "A100-40GB",
                                     "--inference")["fit"]


def test_zero3_and_offload_keep_16_bit_parameters_and_no_autocast_copies() -> None:
    # mutation testing (seed 11): DeepSpeed holds the parameters in 16-bit beside the fp32
    # master shard (its ZeRO-3, or offload); FSDP2 gathers its fp32 shards in bf16
    # (MixedPrecisionPolicy), so autocast has nothing to cast; DDP + ZeroRedundancyOptimizer
    # runs autocast over the fp32 model
    spec = load_model("gpt2")
    base = dict(precision="bf16", mixed=True, seq_len=1024, gpus=8)
    for kw in (dict(zero=3, recipe="megatron"), dict(zero=2, offload="optimizer")):
        r = memory_report(spec, Settings(**base, **kw))  # type: ignore[arg-type]
        assert r.settings.sixteen_bit_model
        forward = {i.name for i in r.phases[0].items.items}
        assert "autocast_copies" not in forward
    for zero in (2, 3):
        r = memory_report(spec, Settings(**base, zero=zero))
        assert not r.settings.sixteen_bit_model
        forward = {i.name for i in r.phases[0].items.items}
        assert "autocast_copies" not in forward and "gathered_parameters" in forward
    amp = memory_report(spec, Settings(**base, zero=1))
    assert not amp.settings.sixteen_bit_model
    assert "autocast_copies" in {i.name for i in amp.phases[0].items.items}


def test_the_experts_path_can_be_chosen(cli) -> None:
    # transformers 5.23 runs a mixture of experts through grouped_mm by default; the eager
    # loop keeps index_add_'s source on top (tests/test_activations_measured.py measures both)
    def memory(*args: str) -> dict:
        return cli.json("memory", "qwen3-30b-a3b", "--seq-len", "256", "--precision", "fp32",
                        "--attention", "eager", *args)

    auto, eager = memory(), memory("--experts", "eager")
    # (the op graph answers: the sort order, its gather index and inverse are int64 expert
    # indices like the eager loop's token pairs; only the loop's index_add_ keeps a source)
    names = {c["name"] for c in auto["activations"]["components"]}
    assert "decoder.ffn.expert_index" in names and "decoder.ffn.expert_scatter" not in names
    assert "decoder.ffn.expert_scatter" in {c["name"] for c in eager["activations"]["components"]}
    assert any(n.startswith("experts run transformers' grouped_mm path (this class's default)")
               for n in auto["notes"])
    k, E = 8, 2048  # top-8 of 128 experts, d_model 2048 (Qwen3-30B-A3B's config)
    grown = eager["activations"]["bytes"] - auto["activations"]["bytes"]
    assert grown == 48 * (k * 256 * E * 4 + k * 256 * 20 - (k * 256 * 28 + 128 * 4))
    r = cli("memory", "qwen3-30b-a3b", "--experts", "loop", code=2)
    assert "--experts" in r.stderr


# -- gradient checkpointing, full training and LoRA ------------------------------------------
# tests/data/peak_checkpointing_cuda_h100.json: tools/measure_peak_cuda.py --checkpointing
# [--lora 16 [--lora-targets q_proj,v_proj]] on one H100 80GB HBM3 (torch 2.11.0+cu130,
# transformers 5.17.0, peft 0.21.0): non-reentrant checkpointing as the Trainer runs it,
# max_memory_allocated per phase of the second step. Nothing here was printed by tcalc.
CHECKPOINTED = json.loads((DATA / "peak_checkpointing_cuda_h100.json").read_text())["runs"]


def _checkpointed_report(run: dict):  # type: ignore[no-untyped-def]
    from test_lora_memory import LORA_MODELS

    from transformer_calc.hf import spec_from_hf

    lora = {}
    if run["lora_rank"]:
        spec = spec_from_hf(LORA_MODELS[run["model"]][0])
        targets = run["lora_targets"]
        lora = dict(lora_rank=run["lora_rank"], lora_targets=tuple(targets.split(",")))
        recipe = dict(precision="bf16", mixed=run["recipe"] == "lora_amp_bf16")
    else:
        spec, recipe = _spec(run["model"]), RECIPES[run["recipe"]]
    return memory_report(spec, Settings(**recipe, **lora, attention=run["attention"],
                                        device="cuda", batch_size=run["batch"],
                                        seq_len=run["seq_len"], recompute="full"))


@pytest.mark.parametrize("run", CHECKPOINTED, ids=lambda r: "{model}-{recipe}-{t}".format(
    t=r["lora_targets"] or "full", **r))
def test_checkpointing_within_3_percent_of_the_h100(run: dict) -> None:
    r = _checkpointed_report(run)
    assert r.trainable_params == run["params"] if run["lora_rank"] else r.params == run["params"]
    measured = run["steps"][1]
    for phase in r.phases:
        want = measured[f"{phase.name}_peak_mib"] * MIB
        assert abs(phase.items.total - want) <= 0.03 * want, (phase.name, phase.items.total,
                                                              want)


def test_lora_with_checkpointing_keeps_one_layer_of_adapter_tensors() -> None:
    # the verdict turns on the adapters' per-layer rows: Llama-3.1-8B, LoRA all-linear,
    # bf16, SDPA, checkpointing, measured at 19,412 MiB (backward); the adapters' inputs and
    # lora_A outputs are kept for the rebuilt layer only, not for all 32
    run = next(r for r in CHECKPOINTED if r["model"] == "llama-3.1-8b"
               and r["recipe"] == "lora_bf16" and r["lora_targets"] == "all-linear")
    r = _checkpointed_report(run)
    names = {i.name for i in r.activations.items}
    assert not any(".lora_" in n for n in names)  # inside the rebuilt layer only
    assert r.activations.get("decoder.checkpoint_input").repeat == 32
    assert r.peak_phase.name == "backward"


# -- use_cache in training --------------------------------------------------------------------
# tests/data/peak_no_cache_cuda_h100.json: tools/measure_peak_cuda.py --no-use-cache, the base
# grid with use_cache=False (the base grid above ran transformers' default, the cache on).
NO_CACHE = json.loads((DATA / "peak_no_cache_cuda_h100.json").read_text())["runs"]


@pytest.mark.parametrize("run", NO_CACHE,
                         ids=lambda r: f"{r['model']}-{r['recipe']}-{r['attention']}")
def test_without_the_cache_within_3_percent_of_the_h100(run: dict) -> None:
    r = memory_report(_spec(run["model"]), Settings(
        **RECIPES[run["recipe"]], attention=run["attention"], device="cuda",
        batch_size=run["batch"], seq_len=run["seq_len"], use_cache=False))
    measured = run["steps"][1]
    for phase in r.phases:
        want = measured[f"{phase.name}_peak_mib"] * MIB
        assert abs(phase.items.total - want) <= 0.03 * want, phase.name


def test_the_cache_copies_k_and_v_where_attention_read_views() -> None:
    # GPT-2, SDPA, fp32, B=8, T=1024 on the H100: backward 15,046 MiB with the cache,
    # 14,471 without: 575 MiB, twelve layers' K and V (2 · 8 · 1024 · 768 · 4 bytes each);
    # Llama's rotated K and V are new tensors either way: equal backward peaks (50,013 MiB)
    def peak(name: str, use_cache: bool) -> int:
        run = next(r for r in RUNS if r["model"] == name and r["recipe"] == "fp32"
                   and r["attention"] == "sdpa")
        return memory_report(_spec(name), Settings(
            precision="fp32", attention="sdpa", device="cuda", batch_size=run["batch"],
            seq_len=run["seq_len"], use_cache=use_cache)).phases[1].items.total

    assert peak("gpt2", True) - peak("gpt2", False) == 12 * 2 * 8 * 1024 * 768 * 4
    assert peak("llama-3.2-1b", True) == peak("llama-3.2-1b", False)
    # and gradient checkpointing turns it off, as transformers does
    assert not Settings(recompute="full").cache_in_training
    assert Settings().cache_in_training and not Settings(use_cache=False).cache_in_training
