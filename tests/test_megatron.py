"""Per-GPU model states against Megatron-LM's theoretical memory formula.

megatron/training/theoretical_memory_usage.py, compute_weight_and_optimizer_memory (NVIDIA
Megatron-LM, main as of 2026-11): parameters on the most loaded shard =
(transformer block / pp + embedding (+ the output layer when untied and pp == 1)) / tp, at
18 bytes per parameter (bf16 weights 2, fp32 gradients 4, fp32 master 4, Adam 8), or
6 + 12 / dp with the distributed optimizer. Transcribed below for dense GQA models and MoE
without expert parallelism (the formula has no EP or CP); tcalc runs the same setting as
--mixed --recipe megatron (a bf16 model beside fp32 master weights and gradients, 18 bytes per
parameter), ZeRO 0 or 1 (the distributed optimizer). Under torch AMP (the default recipe) the
fp32 weights are the model itself, which ZeRO-1 leaves whole: the test beside this one.
"""

from __future__ import annotations

import pytest

from transformer_calc.memory import Settings, memory_report
from transformer_calc.presets import load_model


def megatron_states(spec, tp: int, pp: int, dp: int, distributed: bool) -> float:  # type: ignore[no-untyped-def]
    h, a, g, L = spec.d_model, spec.n_heads, spec.kv_heads, spec.n_layers
    kv_channels = spec.head_dim
    ratio = kv_channels * a / h
    self_attn = 2 * h * h * ((1 + g / a) * ratio)
    norm = 1  # RMSNorm
    gated = 3 / 2
    if spec.n_experts:
        moe_ff = spec.d_ff_expert or spec.d_ff
        layer = 2 * h * (moe_ff * spec.n_experts * gated + norm) + self_attn + h * spec.n_experts
        # (+ the router, h · n_experts, which the formula leaves out: added so both count it)
    else:
        layer = 2 * h * (spec.d_ff * gated + norm) + self_attn
    block = layer * L + norm * h
    embedding = h * spec.vocab_size
    shard = (block / pp + embedding) / tp
    if not spec.tie_embeddings and pp == 1:
        shard += embedding / tp
    per_param = 18 if not distributed else 6 + 12 / dp
    return shard * per_param


CASES = [("llama-3.1-8b", 1, 1, 8, False), ("llama-3.1-8b", 2, 1, 4, True),
         ("llama-3.1-70b", 8, 4, 4, True), ("llama-3.1-70b", 4, 2, 8, False),
         ("mixtral-8x7b", 2, 4, 8, True), ("gemma-2b", 1, 2, 4, True)]


@pytest.mark.parametrize(("model", "tp", "pp", "dp", "distributed"), CASES)
def test_model_states_match_megatron(model: str, tp: int, pp: int, dp: int,
                                     distributed: bool) -> None:
    spec = load_model(model)
    r = memory_report(spec, Settings(precision="bf16", mixed=True, recipe="megatron",
                                     gpus=tp * pp * dp, tp=tp, pp=pp,
                                     zero=1 if distributed else 0, seq_len=1024))
    states = sum(i.total for i in r.per_gpu.items
                 if i.name in ("weights", "master_weights", "gradients", "optimizer_states"))
    want = megatron_states(spec, tp, pp, dp, distributed)
    # the one difference: Megatron divides the final norm over the stages with the layers,
    # tcalc keeps it on the last stage (d_model parameters)
    assert abs(states - want) <= 18 * spec.d_model + 1e-9 * want


def test_torch_amp_keeps_its_fp32_weights_whole_under_zero_1_and_2() -> None:
    # torch AMP (the Trainer's bf16=True): the fp32 parameters are the model; ZeRO-1
    # (ZeroRedundancyOptimizer) shards only the optimizer states, ZeRO-2 the gradients too,
    # ZeRO-3 the weights (torch.distributed.optim.ZeroRedundancyOptimizer, FSDP2)
    spec = load_model("llama-3.1-8b")
    base = dict(precision="bf16", mixed=True, gpus=8, seq_len=1024)
    N = memory_report(spec, Settings(precision="bf16", mixed=True, seq_len=1024)).params
    r = memory_report(spec, Settings(**base, zero=1))
    per = {i.name: i.total for i in r.per_gpu.items}
    assert per["master_weights"] == 4 * N and per["gradients"] == 4 * N  # whole
    assert per["optimizer_states"] < 8 * N / 7  # whole parameters: near an eighth
    assert any("stay whole on every rank" in n for n in r.notes)
    # ... ZeRO-2 as FSDP2 runs it (reshard_after_forward=False): the gradients sharded, the
    # weights sharded at rest and gathered in bf16 from forward to backward
    r = memory_report(spec, Settings(**base, zero=2))
    per = {i.name: i.total for i in r.per_gpu.items}
    assert per["gradients"] == pytest.approx(4 * N / 8, abs=8)
    assert per["gathered_parameters"] > 2 * N
    mega = memory_report(spec, Settings(**base, zero=1, recipe="megatron"))
    assert {i.name: i.total for i in mega.per_gpu.items}["master_weights"] == pytest.approx(
        4 * N / 8, abs=8)
    assert any("Megatron-LM's distributed optimizer" in n for n in mega.notes)


def test_expert_parallel_splits_the_experts_and_their_states() -> None:
    spec = load_model("mixtral-8x7b")
    base = dict(precision="bf16", mixed=True, gpus=64, tp=2, pp=4, zero=1, seq_len=1024)
    one = memory_report(spec, Settings(**base)).per_gpu
    eight = memory_report(spec, Settings(**base, ep=8)).per_gpu
    # 45.1B of Mixtral's 46.7B parameters are experts: their bf16 weights split 8 ways
    assert eight.get("weights").total < one.get("weights").total / 5
    assert eight.get("activations").total == one.get("activations").total


def test_context_parallel_splits_activations() -> None:
    spec = load_model("llama-3-8b")
    base = dict(precision="bf16", mixed=True, seq_len=8192, attention="flash")
    one = memory_report(spec, Settings(**base, gpus=4)).per_gpu
    four = memory_report(spec, Settings(**base, gpus=4, cp=4)).per_gpu
    assert four.get("activations").total == one.get("activations").total // 4
    assert four.get("weights").total == one.get("weights").total


# -- DeepSpeed's knobs -----------------------------------------------------------------------

def test_zero3_gathers_a_layer_and_a_prefetch_bucket() -> None:
    # deepspeed/runtime/zero/config.py: stage3_max_live_parameters 1e9, stage3_prefetch_bucket
    # _size 5e7 elements. Llama-3-8B's largest module gathered at once: the 525M-parameter
    # token embedding (one module), plus the bucket, in bf16
    spec = load_model("llama-3-8b")
    ds = dict(precision="bf16", mixed=True, gpus=8, zero=3, seq_len=1024, recipe="megatron")
    r = memory_report(spec, Settings(**ds))  # type: ignore[arg-type]
    gathered = r.per_gpu.get("gathered_parameters").total
    assert gathered == 2 * (128_256 * 4096 + 50_000_000)
    small = memory_report(spec, Settings(**ds, zero3_max_live=100_000_000))  # type: ignore[arg-type]
    assert small.per_gpu.get("gathered_parameters").total == 2 * 100_000_000
    # FSDP2 (torch's ZeRO-3) gathers the root's parameters (both 525M-parameter tables and
    # the final norm, never resharded between forward and backward) and two layers in bf16
    fsdp = memory_report(spec, Settings(**{**ds, "recipe": "amp"}))  # type: ignore[arg-type]
    layer = 4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14_336 + 2 * 4096
    assert fsdp.per_gpu.get("gathered_parameters").total == 2 * (
        2 * 128_256 * 4096 + 4096 + 2 * layer)


def test_offload_moves_states_to_cpu_memory(cli) -> None:
    spec = load_model("llama-3-8b")
    base = dict(precision="bf16", mixed=True, gpus=8, seq_len=1024)
    # DeepSpeed's offload runs a 16-bit model beside an fp32 master copy: the megatron recipe
    on_gpu = memory_report(spec, Settings(**base, zero=2, recipe="megatron")).per_gpu
    off = memory_report(spec, Settings(**base, zero=2, offload="optimizer"))
    moved = ("master_weights", "gradients", "optimizer_states")
    assert off.host.total == sum(on_gpu.get(n).total for n in moved)
    assert all(off.per_gpu.get(n).total == 0 for n in moved)
    assert off.per_gpu.get("weights").total == on_gpu.get("weights").total
    every = memory_report(spec, Settings(**base, zero=3, offload="all"))
    assert every.per_gpu.get("weights").total == 0 and every.host.total > off.host.total
    data = cli.json("memory", "llama-3-8b", "--mixed", "--gpus", "8", "--zero", "2",
                    "--offload", "optimizer", "--seq-len", "1024")
    assert data["host_bytes"] == off.host.total
    r = cli("memory", "llama-3-8b", "--offload", "all", "--zero", "2", "--gpus", "8", code=2)
    assert "all needs --zero 3" in r.stderr


def test_the_last_stage_holds_a_tied_heads_copy() -> None:
    # Megatron-LM keeps the word embeddings on the last pipeline stage too when they are tied
    # (the output layer's weight), and the final norm there: for Gemma-2B (tied, RoPE: no
    # position table) that stage, layers / 2 + V·E + E, is the busiest, one d_model above the
    # first stage's layers / 2 + V·E
    from transformer_calc.params import count_params

    spec = load_model("gemma-2b")
    p = count_params(spec)
    V, E = spec.vocab_size, spec.d_model
    layers = p.total - V * E - E
    r = memory_report(spec, Settings(precision="bf16", gpus=2, pp=2, seq_len=1024))
    assert r.per_gpu.get("weights").total == 2 * (layers // 2 + V * E + E)


# -- activations: Megatron-LM's own formula, as a named recipe (--activations megatron) -------

def megatron_activations(spec, T: int, b: int, tp: int, pp: int, sp_selective: bool,  # type: ignore[no-untyped-def]
                         micro_batches: int | None = None) -> float:
    """megatron/training/theoretical_memory_usage.py, compute_activation_memory (sequence
    parallel + selective recomputation) and compute_activation_memory_without_sp, transcribed
    (no virtual pipeline)."""
    h, F, V, L = spec.d_model, spec.d_ff, spec.vocab_size, spec.n_layers
    if sp_selective:
        act = T * b * h * (18 + 4 * (F / h)) * L
        act += 8 * T * b * pp + T * b * h * pp
        if pp > 1 and micro_batches is not None:
            act *= min(1, micro_batches / pp)
        if pp == 1:
            act += T * b * h * 4 * (1 + V / h)
        return act / tp
    act = T * b * h * (10 + 24 / tp) * L + 8 * T * b * pp + T * b * h * pp
    if pp > 1 and micro_batches is not None:
        act *= min(1, micro_batches / pp)
    if pp == 1:
        act += (T * b * V / tp + T * b * h) * 2
    return act * 1.05


@pytest.mark.parametrize(("model", "T", "b", "tp", "pp", "sp", "mb"), [
    ("llama-3.1-70b", 4096, 1, 8, 4, True, None), ("llama-3.1-70b", 4096, 1, 8, 4, True, 2),
    ("llama-3.1-8b", 8192, 2, 2, 1, True, None), ("llama-3.1-8b", 2048, 4, 4, 1, False, None),
    ("gpt3-175b", 2048, 1, 8, 8, False, None), ("gpt3-175b", 2048, 1, 8, 8, False, 4),
])
def test_megatron_recipe_equals_its_formula(model: str, T: int, b: int, tp: int, pp: int,
                                            sp: bool, mb: int | None) -> None:
    spec = load_model(model)
    r = memory_report(spec, Settings(
        precision="bf16", mixed=True, gpus=tp * pp, tp=tp, pp=pp, sequence_parallel=sp and tp > 1,
        recompute="selective" if sp else "none", activations="megatron", batch_size=b,
        seq_len=T, micro_batches=mb or 0))
    want = megatron_activations(spec, T, b, tp, pp, sp, mb)
    assert abs(r.per_gpu.get("activations").total - want) <= 8  # integer rounding per row
