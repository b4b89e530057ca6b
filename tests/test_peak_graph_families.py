"""The op graph's newer layouts on a real GPU: a training step's peak per phase against an
H100's torch.cuda.max_memory_allocated().

tests/data/peak_graph_families_cuda_h100.json was written by

    python tools/measure_peak_cuda.py --models qwen3-0.6b,olmo-2-1b --out ...

on one NVIDIA H100 80GB HBM3 (torch 2.11.0+cu130, transformers 5.17.0, CUDA 13.0): the second
of two AdamW (foreach) steps of Qwen/Qwen3-0.6B's and allenai/OLMo-2-0425-1B's shapes at
B=2, T=2048, fp32 / torch AMP bf16 / pure bf16, SDPA and eager; and
tests/data/peak_lora_graph_families_cuda_h100.json, by

    python tools/measure_peak_cuda.py --lora 16 --models phi-3-mini,qwen3-8b --out ...

(peft 0.21.0): LoRA rank 16 all-linear over microsoft/Phi-3-mini-4k-instruct's and
Qwen/Qwen3-8B's shapes at B=1, T=2048, a bf16 base, with and without autocast. Nothing here
was printed by tcalc. The configs are the tool's, copied.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from transformer_calc.graph import family_of
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report

MIB = 1 << 20
RUNS = json.loads((DATA / "peak_graph_families_cuda_h100.json").read_text())["runs"]
CONFIGS = {
    "qwen3-0.6b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
                   "intermediate_size": 3072, "num_hidden_layers": 28,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 40960, "tie_word_embeddings": True,
                   "rms_norm_eps": 1e-6, "rope_theta": 1000000.0},
    "olmo-2-1b": {"model_type": "olmo2", "vocab_size": 100352, "hidden_size": 2048,
                  "intermediate_size": 8192, "num_hidden_layers": 16,
                  "num_attention_heads": 16, "num_key_value_heads": 16,
                  "max_position_embeddings": 4096, "tie_word_embeddings": False,
                  "rms_norm_eps": 1e-6, "rope_theta": 500000.0},
}
LORA_RUNS = json.loads((DATA / "peak_lora_graph_families_cuda_h100.json").read_text())["runs"]
LORA_CONFIGS = {
    "phi-3-mini": {"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
                   "intermediate_size": 8192, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 32,
                   "max_position_embeddings": 4096, "tie_word_embeddings": False,
                   "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
    "qwen3-8b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
                 "intermediate_size": 12288, "num_hidden_layers": 36,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "max_position_embeddings": 40960, "tie_word_embeddings": False,
                 "rms_norm_eps": 1e-6, "rope_theta": 1000000.0},
}
RECIPES = {"fp32": dict(precision="fp32"), "amp_bf16": dict(precision="bf16", mixed=True),
           "bf16": dict(precision="bf16")}


def _errors(run: dict) -> dict[str, float]:
    spec = spec_from_hf(CONFIGS[run["model"]])
    report = memory_report(spec, Settings(**RECIPES[run["recipe"]],  # type: ignore[arg-type]
                                          attention=run["attention"], device="cuda",
                                          batch_size=run["batch"], seq_len=run["seq_len"]))
    assert report.params == run["params"]
    measured = run["steps"][1]
    return {p.name: (p.items.total - measured[f"{p.name}_peak_mib"] * MIB)
            / (measured[f"{p.name}_peak_mib"] * MIB) for p in report.phases}


def test_the_fixture_is_the_graphs_families_whole_grid() -> None:
    assert len(RUNS) == 12 and not any("error" in r for r in RUNS)
    assert {type(family_of(spec_from_hf(c))).__name__ for c in CONFIGS.values()} == {"Llama"}


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r['model']}-{r['recipe']}-{r['attention']}")
def test_the_peak_and_every_phase_of_the_h100(run: dict) -> None:
    errors = _errors(run)
    # the step's peak (backward's start) and the optimizer step: within 0.05 % (measured:
    # 0.00-0.02 %); the forward phase, whose transient logits tcalc does not time, within 4 %
    # (measured: -3.83 % at most, Qwen3's tied head under AMP with SDPA)
    assert abs(errors["backward"]) <= 0.0005 and abs(errors["optimizer"]) <= 0.0005, errors
    assert abs(errors["forward"]) <= 0.04, errors


@pytest.mark.parametrize("run", LORA_RUNS,
                         ids=lambda r: f"{r['model']}-{r['recipe']}-{r['attention']}")
def test_lora_over_the_fused_and_qk_norm_layouts(run: dict) -> None:
    spec = spec_from_hf(LORA_CONFIGS[run["model"]])
    assert family_of(spec) is not None  # what memory reads comes from the op graph
    report = memory_report(spec, Settings(
        precision="bf16", mixed=run["recipe"] == "lora_amp_bf16", attention=run["attention"],
        device="cuda", batch_size=run["batch"], seq_len=run["seq_len"], lora_rank=16))
    assert report.trainable_params == run["params"]  # peft 0.21.0's count on the GPU
    measured = run["steps"][1]
    for phase in report.phases:
        want = measured[f"{phase.name}_peak_mib"] * MIB
        # within 1 % (measured: -0.83 % at most, Phi-3's eager backward)
        assert abs(phase.items.total - want) <= 0.01 * want, phase.name
