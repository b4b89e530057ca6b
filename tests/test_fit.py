"""The fit questions: the largest batch and the longest sequence that fit a GPU,
for training by the peak of a step, for serving within the runtime's share less a prefill
chunk; each answer tested at its boundary (one more does not fit)."""

from __future__ import annotations

import dataclasses

import pytest

from transformer_calc.hardware import get_gpu
from transformer_calc.memory import Settings, largest, memory_report, prefill_activation_bytes
from transformer_calc.presets import load_model

CASES = [
    ("llama-3.1-8b", Settings(precision="bf16", attention="sdpa", seq_len=2048, lora_rank=16),
     "H100-80GB"),
    ("llama-3.1-8b", Settings(precision="bf16", attention="sdpa", seq_len=1024, lora_rank=16,
                              quant="bnb-nf4"), "RTX-4090"),
    ("gpt2", Settings(mixed=True, precision="bf16", seq_len=1024), "A100-80GB"),
    ("llama-3-8b", Settings(inference=True, quant="awq", seq_len=4096, batch_size=4,
                            kv_block=16), "RTX-4090"),
    ("qwen3-8b", Settings(inference=True, seq_len=8192, batch_size=8), "H100-80GB"),
]


def _peak(spec, s: Settings) -> int:  # type: ignore[no-untyped-def]
    return memory_report(spec, s).peak


@pytest.mark.parametrize(("model", "s", "gpu"), CASES, ids=[c[0] + "-" + c[2] for c in CASES])
def test_answers_sit_on_the_boundary(model: str, s: Settings, gpu: str) -> None:
    spec = load_model(model)
    fit = memory_report(spec, s, gpu).fit
    assert fit is not None
    cap = get_gpu(gpu).memory_bytes
    budget = cap if not s.inference else int(cap * s.gpu_util) - prefill_activation_bytes(
        spec, s)
    assert fit.budget == budget
    b = fit.max_batch_size
    assert b >= 1
    assert _peak(spec, dataclasses.replace(s, batch_size=b)) <= budget
    assert _peak(spec, dataclasses.replace(s, batch_size=b + 1)) > budget
    t = fit.max_seq_len
    assert _peak(spec, dataclasses.replace(s, seq_len=t)) <= budget
    if t < fit.seq_ceiling:  # else: the model's own limit stopped the search
        assert _peak(spec, dataclasses.replace(s, seq_len=t + 1)) > budget


def test_serving_budget_is_the_runtime_share_less_a_prefill_chunk() -> None:
    spec = load_model("llama-3-8b")
    s = Settings(inference=True, seq_len=4096, gpu_util=0.9, prefill_chunk=2048)
    fit = memory_report(spec, s, "H100-80GB").fit
    assert fit is not None
    # 2048 tokens · (2 · 14,336 + 3 · 4,096) · 2 bytes + one fp32 row of 128,256 logits
    assert fit.prefill == 2048 * (2 * 14336 + 3 * 4096) * 2 + 128256 * 4
    assert fit.budget == int(80 * 2**30 * 0.9) - fit.prefill


def test_paged_cache_rounds_each_layer_to_whole_blocks() -> None:
    spec = load_model("llama-3-8b")
    exact = memory_report(spec, Settings(inference=True, seq_len=1000))
    paged = memory_report(spec, Settings(inference=True, seq_len=1000, kv_block=16))
    kv = {i.name: i.total for i in exact.components.items}["kv_cache"]
    kv16 = {i.name: i.total for i in paged.components.items}["kv_cache"]
    assert kv16 == kv // 1000 * 1008  # 1000 tokens take 63 blocks of 16


def test_largest_is_logarithmic() -> None:
    calls = []

    def fits(n: int) -> bool:
        calls.append(n)
        return n <= 1_234_567

    assert largest(fits, 1 << 30) == 1_234_567
    assert len(calls) <= 2 * 31 + 2
    assert largest(lambda n: False, 100) == 0
    assert largest(lambda n: True, 100) == 100


def test_cli_reports_the_fit_questions(cli) -> None:
    data = cli.json("memory", "llama-3-8b", "--inference", "--quant", "awq", "--seq-len",
                    "4096", "--gpu", "RTX-4090", "--kv-block", "16")
    fit = data["fit"]
    assert fit["max_seq_len"] == 8192 and fit["max_batch_size"] >= 1
    assert fit["prefill_activation_bytes"] > 0
    r = cli("memory", "gpt2", "--kv-block", "16", code=2)
    assert "applies to --inference" in r.stderr


@pytest.mark.parametrize(("name", "preset"), [
    ("h100", "H100-80GB"), ("H100 SXM", "H100-80GB"), ("h100-pcie", "H100-PCIe-80GB"),
    ("H100_NVL", "H100-NVL-94GB"), ("a100", "A100-80GB"), ("4090", "RTX-4090"),
    ("rtx 5090", "RTX-5090"), ("mi300x", "MI300X"), ("l40s", "L40S"), ("b200", "B200-180GB")])
def test_gpus_answer_to_the_names_people_use(name: str, preset: str) -> None:
    from transformer_calc.hardware import get_gpu

    assert get_gpu(name).name == preset


def test_any_capacity_is_a_gpu(cli) -> None:
    from transformer_calc.hardware import GiB, get_gpu

    assert get_gpu("48GB").memory_bytes == 48 * GiB == get_gpu("48 GiB").memory_bytes
    assert get_gpu("1.5TB").memory_bytes == int(1.5 * 1024 * GiB)
    fit = cli.json("memory", "gpt2", "--mixed", "--gpu", "24GB")["fit"]
    assert fit["capacity_bytes"] == 24 * GiB
    # the H100's own nominal 80 GiB, whatever it is called
    assert cli.json("memory", "gpt2", "--mixed", "--gpu", "80GB")["fit"]["capacity_bytes"] == \
        cli.json("memory", "gpt2", "--mixed", "--gpu", "h100")["fit"]["capacity_bytes"]
    r = cli("memory", "gpt2", "--gpu", "", code=2)
    assert r.stderr.startswith("Error: --gpu: expected a GPU")
    r = cli("memory", "gpt2", "--gpu", "h10", code=2)
    assert "did you mean H100-80GB" in r.stderr


def test_every_gpu_names_its_datasheet() -> None:
    from transformer_calc.hardware import GPUS

    assert len(GPUS) >= 22
    assert all(g.source and g.memory_bytes and g.bandwidth and g.peak_flops
               for g in GPUS.values())
    assert {"MI300X", "B200-180GB", "L40S", "RTX-5090", "H100-PCIe-80GB"} <= set(GPUS)


def test_the_verdict_comes_first_in_every_format(cli) -> None:
    # the answer first: the peak, whether it fits, by how much (the table's first lines, the
    # markdown's first paragraph, the JSON's verdict)
    args = ("memory", "llama-3.1-8b", "--qlora", "--lora", "16", "--seq-len", "4096",
            "--batch-size", "2", "--attention", "sdpa", "--recompute", "full",
            "--gpu", "RTX-4090")
    head = "llama-3.1-8b (LoRA r16 over bnb-nf4, pure bf16, sdpa, batch 2 × 4,096): peak "
    first = cli(*args).stdout.splitlines()[0]
    assert first.startswith(head[:60]) and "fits RTX-4090" in " ".join(
        cli(*args).stdout.split()[:30])
    md = cli(*args, "--format", "markdown").stdout.lstrip().splitlines()[0]
    assert md.startswith("- " + head)
    data = cli.json(*args)
    assert data["verdict"][0].startswith(head) and data["fit"]["fits"]


def test_what_would_fit_is_computed(cli) -> None:
    # each change is a report of its own: its bytes are what tcalc gives for those flags
    args = ["memory", "llama-3.1-8b", "--mixed", "--seq-len", "4096"]
    data = cli.json(*args, "--gpu", "H100-80GB")
    assert not data["fit"]["fits"] and data["verdict"][0].count("does NOT fit") == 1
    changes = data["fit"]["changes"]
    assert changes and changes[0]["fits"]
    again = cli.json(*args, *changes[0]["flags"].split())
    assert again["peak_bytes"] == changes[0]["bytes"] <= data["fit"]["budget_bytes"]
    # serving: a smaller format or more GPUs
    serve = cli.json("memory", "llama-3.1-70b", "--inference", "--seq-len", "32768",
                     "--gpu", "h100")["fit"]["changes"]
    assert any(c["flags"] == "--dtype int4" and c["fits"] for c in serve)


def test_require_fit_gates_a_budget(cli) -> None:
    assert cli("memory", "gpt2", "--gpu", "80GB", "--require-fit").exit_code == 0
    assert cli("memory", "gpt2", "--gpu", "1GB", "--require-fit", code=1).stdout
    r = cli("memory", "gpt2", "--require-fit", code=2)
    assert r.stderr == "Error: --require-fit: give the GPU (or a size) to fit with --gpu\n"
