"""--sdpa-kernel through the op graph: the kernel torch.nn.attention.sdpa_kernel forces.

Rows: tests/data/activations_sdpa_kernel_forced_cpu.jsonl, measured with transformers 5.23.0,
torch 2.13 CPU, saved_tensors_hooks:
  /work/refvenv/bin/python tools/measure_activations_hf.py tests/data/hf/variants/{llama-head-dim,
  qwen2-untied,bert-untied,falcon-multi-query}.json tests/data/hf/gpt2.json -B 1 -T 64
  --sdpa-kernel {math,cpu_flash}
(a row with "torch" in place of measured_bytes: torch raised "No available kernel" for the
forced kernel: BERT's attention dropout, Falcon's one K/V head broadcast without enable_gqa)."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from transformer_calc.costs.activations import graph_activations
from transformer_calc.errors import TcalcError
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report

ROWS = [json.loads(line) for line in
        (DATA / "activations_sdpa_kernel_forced_cpu.jsonl").read_text().splitlines()]


def _spec(config: str):  # type: ignore[no-untyped-def]
    path = DATA / "hf" / config
    if not path.exists():
        path = DATA / "hf" / "variants" / config
    return spec_from_hf(json.loads(path.read_text()), str(path))


def _settings(row: dict, kernel: str | None = None, device: str = "cpu") -> Settings:
    return Settings(precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
                    attention="sdpa", device=device,
                    sdpa_kernel=kernel or row["sdpa_kernel"])


@pytest.mark.parametrize("row", [r for r in ROWS if "measured_bytes" in r],
                         ids=lambda r: f"{r['config']}-{r['dtype']}-{r['sdpa_kernel']}")
def test_the_graph_answers_a_forced_kernel_byte_for_byte(row: dict) -> None:
    spec, s = _spec(row["config"]), _settings(row)
    got = graph_activations(spec, s, row["T"], amp=False, amp16=False, adapted_roles=None)
    assert got is not None  # the graph answers, not the rules
    assert memory_report(spec, s).activations.total == row["measured_bytes"]


@pytest.mark.parametrize("row", [r for r in ROWS if "torch" in r], ids=lambda r: r["config"])
def test_a_kernel_torch_refuses_is_refused_in_one_line(row: dict) -> None:
    with pytest.raises(TcalcError, match=r"^--sdpa-kernel cpu_flash: torch's kernel refuses"):
        memory_report(_spec(row["config"]), _settings(row))


def test_forced_math_keeps_what_eager_keeps_and_flash_does_not() -> None:
    """Llama with its own head dim: forced math = eager's bytes (measured rows: both
    3633420 fp32), forced cpu_flash = the auto kernel's."""
    row = next(r for r in ROWS if r["config"] == "llama-head-dim.json"
               and r["dtype"] == "fp32" and r["sdpa_kernel"] == "math")
    spec = _spec(row["config"])
    math = memory_report(spec, _settings(row)).activations.total
    flash = memory_report(spec, _settings(row, "cpu_flash")).activations.total
    auto = memory_report(spec, _settings(row, "auto")).activations.total
    assert flash == auto < math


@pytest.mark.parametrize("kernel, dtype, device, why", [
    ("flash", "fp32", "cuda", "fp32 inputs"),
    ("efficient", "bf16", "cuda", "grouped key/value heads"),
    ("efficient", "bf16", "cpu", "not a kernel torch has on cpu"),
    ("cpu_flash", "bf16", "cuda", "not a kernel torch has on cuda"),
])
def test_cuda_kernels_refuse_what_torch_refuses(kernel: str, dtype: str, device: str,
                                                 why: str) -> None:
    """torch 2.13's cuda/sdp_utils.cpp: flash takes 16-bit only, the memory-efficient kernel
    no grouped K/V (Llama's variant has fewer K/V heads than query heads)."""
    row = {"dtype": dtype, "B": 1, "T": 64}
    with pytest.raises(TcalcError, match=why):
        memory_report(_spec("llama-head-dim.json"), _settings(row, kernel, device))
