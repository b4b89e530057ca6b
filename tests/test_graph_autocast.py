"""torch.autocast in the op graph (transformer_calc/graph/autocast.py): each device's lists,
the CPU's pinned by measured rows to the byte, CUDA's differing only where its lists do.

Fixture: tests/data/autocast_activations_routers_mixers_cpu.jsonl, fp32 models whose forward
and loss ran under torch.autocast("cpu", torch.bfloat16) (tools/measure_activations_hf.py
--autocast, torch 2.13 CPU, transformers 5.23, peft 0.21.2; the commands are in the tool's
docstring): the MoE routers (DeepSeek-V3's sigmoid, LongCat-Flash's softmax, HY-V3, dots.llm1,
Beam, GPT-OSS, Flint, GraniteMoE-SWA, PhiMoE's sparsemixer), MiniMax-M3, MiMo-V2-Flash and the
recurrent mixers (Mamba, Mamba-2, Bamba, Falcon-H1, Jamba, Nemotron-H, OLMo Hybrid, Kimi
Linear, Qwen3-Next, Qwen3.5, LFM2, LFM2-MoE, MiniMax's lightning attention); full training
at B 2 T 64 and B 1 T 37, eager and SDPA, LoRA (q_proj,v_proj and all-linear) and
grouped_mm experts. measured_bytes count every storage saved_tensors_hooks saw, autocast's
saved weight copies included.

The lists (torch 2.13, aten/src/ATen/autocast_mode.cpp and autocast_mode.h; which ops have an
AutocastCPU or AutocastCUDA kernel: torch._C._dispatch_has_kernel_for_dispatch_key): the CPU
casts matmuls, convolutions and SDPA down and the losses up, and promotes cat, stack and
index_copy; CUDA casts the same matmuls down, and up a long fp32 list (exp, log, softplus,
pow, rsqrt, the norms, the losses) and fp32_set_opt_dtype (softmax, log_softmax, sum,
cumsum, prod)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import assert_compiled_equals_traced

from transformer_calc.costs import activations as graph_costs
from transformer_calc.graph import BF16, F32, ops
from transformer_calc.graph.evaluate import evaluate
from transformer_calc.graph.modules import Run
from transformer_calc.graph.tensor import Tensor
from transformer_calc.graph.trace import Trace
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report

ROWS = [json.loads(line) for line in
        (DATA / "autocast_activations_routers_mixers_cpu.jsonl").read_text().splitlines()]


def _id(r: dict) -> str:
    return "{}-{}-B{}T{}-{}-{}".format(r["config"].removesuffix(".json"), r["attention"],
                                       r["B"], r["T"], r.get("experts", "dense"),
                                       r["lora"][1] if r["lora"] else "full")


def _settings(row: dict, device: str = "cpu") -> Settings:
    lora = row["lora"]
    return Settings(precision="bf16", mixed=True, batch_size=row["B"], seq_len=row["T"],
                    attention=row["attention"], device=device,
                    experts=row.get("experts", "eager"), lora_rank=lora[0] if lora else 0,
                    lora_targets=tuple((lora[1] if lora else "all-linear").split(",")),
                    lora_dropout=lora[2] if lora else 0.0)


class _Chosen(Exception):
    """memory_report's graph run, caught where the graph would be compiled."""


def _chosen(row: dict, monkeypatch: pytest.MonkeyPatch, device: str = "cpu"):  # type: ignore[no-untyped-def]
    """The family and Run memory_report answers the row with from the graph, or None where
    the rules answer it."""
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / row["config"]).read_text()))

    def caught(_spec, fam, run, *_):  # type: ignore[no-untyped-def]
        raise _Chosen(fam, run)

    monkeypatch.setattr(graph_costs, "_breakdown", caught)
    try:
        memory_report(spec, _settings(row, device))
    except _Chosen as e:
        return e.args
    return None, None


def test_the_rows_cover_every_family_both_kernels_lora_and_grouped_experts() -> None:
    assert len(ROWS) == 107
    assert all(r["autocast"] == "bf16" and r["dtype"] == "fp32" for r in ROWS)
    assert len({r["config"] for r in ROWS}) == 24
    assert {r["lora"][1] for r in ROWS if r["lora"]} == {"q_proj,v_proj", "all-linear"}
    assert {(r["B"], r["T"]) for r in ROWS} == {(2, 64), (1, 37)}
    assert {r.get("experts") for r in ROWS} == {None, "eager", "grouped_mm"}


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_saved_bytes_equal_the_measurement(row: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    fam, run = _chosen(row, monkeypatch)
    assert fam is not None  # the graph answers, not the rules
    if row["lora"]:  # tcalc's --mixed LoRA is a 16-bit base; the row's base is fp32
        run = replace(run, dtype=F32)
    assert sum(s.nbytes for s in evaluate(fam, run).saved) == row["measured_bytes"]


@pytest.mark.parametrize("config", ["gpt_oss-tied-nobias.json", "jamba-tiny.json",
                                    "minimax-tiny.json", "mamba-mixer.json"])
def test_memory_report_reads_the_graph_under_cpu_autocast(config: str) -> None:
    # the report's activations and autocast's saved copies: the measurement
    row = next(r for r in ROWS if r["config"] == config and not r["lora"])
    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))
    report = memory_report(spec, _settings(row)).activations
    fam = graph_costs._family(spec)
    run = Run(row["B"], row["T"], F32, "cpu", row["attention"], BF16)
    copies = sum(s.nbytes for s in evaluate(fam, run).saved
                 if s.storage.kind == "weight_copy")
    assert report.total + copies == row["measured_bytes"]


@pytest.mark.parametrize("row", [r for r in ROWS if r["B"] == 1 and r["attention"] == "sdpa"
                                 and r["config"].startswith(("gpt_oss", "jamba", "kimi",
                                                             "minimax", "phimoe"))], ids=_id)
def test_compiled_equals_traced_under_cpu_autocast(row: dict,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    fam, run = _chosen(row, monkeypatch)
    assert_compiled_equals_traced(fam, run)


@pytest.mark.parametrize("row", [r for r in ROWS if r["B"] == 2 and not r["lora"]
                                 and r.get("experts") != "grouped_mm"], ids=_id)
def test_cuda_autocast_reads_the_graph_but_on_mamba_ssm_kernels(
        row: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA: the same families from CUDA's lists (mamba_ssm's fused kernels with their own
    # casts: test_mamba_ssm_kernels_keep_their_weight_casts_under_cuda_autocast; LFM2's
    # causal-conv1d kernel, which casts nothing), except where transformers calls kernels
    # the graph has only on the CPU's torch path (fla's; Jamba's causal-conv1d and
    # selective scan, which under autocast get B and C of another dtype than u): the rules
    # answer there, as without autocast. MiniMax's lightning loop has no kernel: CUDA's lists
    fam, _ = _chosen(row, monkeypatch, "cuda")
    cpu_only = ("jamba", "olmo_hybrid", "kimi_linear", "qwen3_next", "qwen3_5_text")
    assert (fam is None) == row["config"].startswith(cpu_only)


def _tensor(tr: Trace, dtype=BF16) -> Tensor:  # type: ignore[no-untyped-def]
    from transformer_calc.graph.symbols import Dim

    return tr.tensor((Dim.const(4), Dim.const(8)), dtype, True)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_each_device_casts_its_own_lists(device: str) -> None:
    tr = Trace(device, BF16)
    x = _tensor(tr)
    cuda = device == "cuda"
    # exp, softplus, log: CUDA's fp32 list (an fp32 copy of the input), none of the CPU's
    assert ops.exp(x).dtype == (F32 if cuda else BF16)
    assert ops.softplus(x).dtype == (F32 if cuda else BF16)
    # sum, cumsum, softmax: CUDA's fp32_set_opt_dtype
    assert ops.sum_dim(x, -1).dtype == (F32 if cuda else BF16)
    assert ops.cumsum(x).dtype == (F32 if cuda else BF16)
    assert ops.softmax(x).dtype == (F32 if cuda else BF16)
    # matmuls: both lower-precision lists
    w = _tensor(tr, F32)
    assert ops.matmul(ops.transpose(w, 0, 1), x).dtype == BF16
    assert ops.bmm(ops.unsqueeze(w, 0), ops.unsqueeze(ops.transpose(x, 0, 1), 0)).dtype == BF16
    # einsum: CUDA's list casts its operands; on the CPU its bmm does: bf16 either way
    assert ops.einsum("ij,kj->ik", w, w).dtype == BF16
    # cat: the CPU's promote list casts to the widest (no type change either way)
    assert ops.cat([x, w], 0).dtype == F32
    # off autocast nothing casts
    off = Trace(device, None)
    assert ops.exp(_tensor(off)).dtype == BF16 and ops.sum_dim(_tensor(off), -1).dtype == BF16


def test_phimoe_cuda_graph_differs_from_the_cpu_row_by_cudas_softmax(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # sparsemixer's softmaxes of the 16-bit router logits: fp32 on CUDA (fp32_set_opt_dtype),
    # bf16 on the CPU: the two (B·T, X) softmaxes, the two (B·T, 1) multipliers and their
    # (B·T, 2) concatenation, 4 bytes each on CUDA, 2 on the CPU (phimoe-top1: L 2, X 4)
    row = next(r for r in ROWS if r["config"] == "phimoe-top1.json")
    fam, run = _chosen(row, monkeypatch)
    cuda = sum(s.nbytes for s in evaluate(fam, replace(run, device="cuda")).saved)
    BT, X, L = row["B"] * row["T"], 4, 2
    assert cuda - row["measured_bytes"] == L * (2 * BT * X + 2 * BT + 2 * BT) * (4 - 2)


@pytest.mark.parametrize("config", ["mamba-mixer.json", "mamba2-tiny.json"])
def test_mamba_ssm_kernels_keep_their_weight_casts_under_cuda_autocast(config: str) -> None:
    # mamba_ssm 2.3.2.post1 (state-spaces/mamba e9594ce, from its source, not measured on a
    # GPU): under torch.is_autocast_enabled() MambaInnerFn.forward casts x_proj_weight,
    # delta_proj_weight and out_proj_weight to the autocast dtype and saves the copies
    # (out_proj_bias is cast but not saved); MambaSplitConv1dScanCombinedFn.forward casts
    # outproj_weight and outproj_bias and saves both. Per layer, in bf16, from the config:
    cfg = json.loads((DATA / "hf" / "variants" / config).read_text())
    E, L, N = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["state_size"]
    Di = cfg["expand"] * E
    if cfg["model_type"] == "mamba":
        R = cfg["time_step_rank"]
        per_layer = (R + 2 * N) * Di + Di * R + E * Di
    else:  # use_bias false: the weight alone
        per_layer = E * cfg["num_heads"] * cfg["head_dim"]
    fam = graph_costs._family(spec_from_hf(cfg))
    for dtype, amp, copies in ((F32, BF16, 2 * L * per_layer), (BF16, None, 0)):
        saved = evaluate(fam, Run(2, 64, dtype, "cuda", "eager", amp)).saved
        assert sum(s.nbytes for s in saved if s.role.endswith("Fn.weight")
                   and s.storage.kind == "activation") == copies


DEBERTA_V2_ROWS = [json.loads(line) for line in
                   (DATA / "autocast_activations_deberta_v2_cpu.jsonl").read_text().splitlines()]


def test_deberta_v2_bmm_and_layer_norm_under_cpu_autocast(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    # tests/data/autocast_activations_deberta_v2_cpu.jsonl: DebertaV2ForMaskedLM calls
    # torch.bmm itself (on both lower-precision lists: its fp32 operands cast), and its head's
    # LayerNorm reads the 16-bit dense output with an fp32 weight, where layer_norm_cpu keeps
    # mean and rstd in the weight's fp32 (its mixed type), not the input's dtype
    (row,) = DEBERTA_V2_ROWS
    fam, run = _chosen(row, monkeypatch)
    assert sum(s.nbytes for s in evaluate(fam, run).saved) == row["measured_bytes"]
