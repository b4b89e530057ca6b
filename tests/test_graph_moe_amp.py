"""The MoE graph under autocast (transformer_calc/graph/families/moe.py, _expert_slice) against
CPU autocast measurements, to the byte.

Fixture: tests/data/autocast_activations_moe_cpu.jsonl, fp32 models whose forward and loss ran
under torch.autocast("cpu", torch.bfloat16) (tools/measure_activations_hf.py --autocast: torch
2.13 CPU, transformers 5.23, peft 0.21.2; the commands are in the tool's docstring). Its
measured_bytes count every storage saved_tensors_hooks saw, autocast's cached weight copies
included; its tcalc_bytes column is not read here.

The graph's autocast has each device's lists (graph/autocast.py): the rows pin the CPU graph
exactly. The CUDA graph differs only by CUDA's lists: in torch 2.13 the ops with an
AutocastCUDA kernel but no AutocastCPU one are the fp32 list's (softmax, log_softmax, pow,
rsqrt, sum, layer_norm, exp, ...), the lower-precision list (mm, bmm, baddbmm, linear,
matmul, SDPA) has both, and _grouped_mm, index, index_add_, mul, silu and topk have neither:

    python -c "import torch; print(torch._C._dispatch_has_kernel_for_dispatch_key(
        'aten::softmax.int', 'AutocastCUDA'), ...(..., 'AutocastCPU'))"

and in Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE and HunYuan-MoE every fp32-list op reads fp32
already (the norms upcast first, the router's softmax and the attention's take
dtype=float32, the loss reads logits.float()), so CUDA's casts there are no-ops: the CUDA
graph equals these rows too. PhiMoE's sparsemixer is where they differ: it takes the
softmax of the 16-bit router logits, fp32 on CUDA (its fp32 list), bf16 on the CPU.

What the rows pin: autocast caches a cast only for a parameter itself (a leaf that requires
grad, not a view), so the eager loop's F.linear casts each hit expert's slice of gate_up_proj
and down_proj anew, and the matmul keeps the copy; grouped_mm is not autocast-enabled (the
weights stay fp32, the input cast to them: integrations/moe.py _grouped_mm). Routing decides
which experts are hit: the graph takes every expert as hit, as the rows' random routing of
128 tokens over 4 or 8 experts did.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import assert_compiled_equals_traced
from test_graph_moe import converted_run

from transformer_calc.costs import activations as graph_costs
from transformer_calc.graph import BF16, evaluate, family_of
from transformer_calc.graph.families.moe import Moe
from transformer_calc.graph.names import component_rows
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.spec import ModelSpec

ROWS = [json.loads(line) for line in
        (DATA / "autocast_activations_moe_cpu.jsonl").read_text().splitlines()]
PINNED = [r for r in ROWS if r["config"] != "phimoe-top1.json"]
PHIMOE = [r for r in ROWS if r["config"] == "phimoe-top1.json"]


def _id(r: dict) -> str:
    return "{}-{}-{}-{}".format(r["config"].removesuffix(".json"), r["attention"],
                                r.get("experts", "dense"),
                                "-".join(map(str, r["lora"])) or "full")


def _spec(config: str) -> ModelSpec:
    return spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))


def _graph(row: dict):  # type: ignore[no-untyped-def]
    """The row's family and Run: the fp32 model under the CPU's bf16 autocast."""
    fam = family_of(_spec(row["config"]))
    if isinstance(fam, Moe):
        fam = replace(fam, grouped=row.get("experts") == "grouped_mm")
    run = converted_run({**row, "dtype": "fp32"})
    return fam, replace(run, device="cpu", autocast=BF16)


def test_the_rows_cover_both_experts_paths_lora_and_peft_conversion() -> None:
    assert len(ROWS) == 24 and len(PHIMOE) == 2
    assert all(r["autocast"] == "bf16" and r["dtype"] == "fp32" for r in ROWS)
    assert {r.get("experts") for r in PINNED} == {None, "eager", "grouped_mm"}
    assert {r["lora"][1] for r in PINNED if r["lora"]} == {"q_proj,v_proj", "w1,w2,w3",
                                                           "all-linear"}


@pytest.mark.parametrize("row", PINNED, ids=_id)
def test_saved_bytes_equal_the_measurement(row: dict) -> None:
    fam, run = _graph(row)
    result = evaluate(fam, run)
    # what the hooks saw: the activations and the weight copies autograd saved (autocast's
    # cache holds more: the biases' copies, which addmm does not save)
    assert sum(s.nbytes for s in result.saved) == row["measured_bytes"]
    if "trainable" in row:
        assert result.trainable_params == row["trainable"][0]
    assert_compiled_equals_traced(fam, run)
    cuda = replace(run, device="cuda")  # CUDA's lists cast nothing more here
    assert sum(s.nbytes for s in evaluate(fam, cuda).saved) == row["measured_bytes"]


@pytest.mark.parametrize("row", PHIMOE, ids=_id)
def test_phimoe_saved_bytes_equal_the_measurement(row: dict) -> None:
    fam, run = _graph(row)
    assert sum(s.nbytes for s in evaluate(fam, run).saved) == row["measured_bytes"]


@pytest.mark.parametrize("row", PHIMOE, ids=_id)
def test_phimoe_differs_where_cuda_autocast_does(row: dict) -> None:
    # sparsemixer's two softmaxes over the (B·T, X) router logits, the two (B·T, 1)
    # multipliers gathered from them and their (B·T, 2) concatenation, the experts' routing
    # weights: 4 bytes each in the CUDA graph, 2 on the CPU (phimoe-top1: two layers, X 4)
    fam, run = _graph(row)
    graph = sum(s.nbytes for s in evaluate(fam, replace(run, device="cuda")).saved)
    BT, X, L = 128, 4, 2
    assert graph - row["measured_bytes"] == L * (2 * BT * X + 2 * BT + 2 * BT) * (4 - 2)


def test_expert_weight_casts_are_every_experts_slices() -> None:
    # mixtral-top1 (X 4, E 256, Fe 512), eager experts under autocast: per layer a bf16
    # copy of each expert's gate_up slice (2·Fe × E) and down slice (E × Fe), all experts hit
    s = Settings(precision="bf16", mixed=True, batch_size=2, seq_len=64, attention="eager",
                 device="cuda", experts="eager")
    rows = {r[0]: (r[1], r[4]) for r in memory_report(_spec("mixtral-top1.json"),
                                                      s).activations.rows}
    X, E, Fe = 4, 256, 512
    assert rows["decoder.ffn.expert_weight_casts"] == (X * (2 * Fe * E + E * Fe) * 2, 2)
    # grouped_mm reads the fp32 weights whole: no copies; nor without autocast
    for changed in (replace(s, experts="grouped_mm"), replace(s, mixed=False)):
        names = {r[0] for r in memory_report(_spec("mixtral-top1.json"),
                                             changed).activations.rows}
        assert "decoder.ffn.expert_weight_casts" not in names


@pytest.mark.parametrize("row", [r for r in PINNED if not r["lora"] and r.get("experts")],
                         ids=_id)
def test_memory_report_reads_the_graph_under_autocast(row: dict) -> None:
    spec = _spec(row["config"])
    s = Settings(precision="bf16", mixed=True, batch_size=row["B"], seq_len=row["T"],
                 attention=row["attention"], device="cpu", experts=row["experts"])
    fam, run = _graph(row)
    report = memory_report(spec, s).activations
    assert [r[:2] + r[4:] for r in report.rows] == [
        r[:2] + r[4:] for r in component_rows(fam, run)]
    weight_copies = sum(st.nbytes for st in evaluate(fam, run).saved
                        if st.storage.kind == "weight_copy")
    assert report.total + weight_copies == row["measured_bytes"]


def test_phimoe_under_autocast_reads_the_graph() -> None:
    spec = _spec("phimoe-top1.json")
    s = Settings(precision="bf16", mixed=True, batch_size=2, seq_len=64, attention="eager",
                 device="cuda", experts="eager")
    assert graph_costs.graph_activations(spec, s, 64, amp=True, amp16=False,
                                         adapted_roles=None) is not None
    assert graph_costs.graph_activations(spec, replace(s, mixed=False), 64, amp=False,
                                         amp16=False, adapted_roles=None) is not None
    assert graph_costs.graph_activations(_spec("mixtral-top1.json"), s, 64, amp=True,
                                         amp16=False, adapted_roles=None) is not None



def test_autocast_cache_holds_no_expert_weights() -> None:
    # mixtral-top1: the step's autocast copies are the attention's, the routers' and the LM
    # head's weights; the experts' 3-D weights are never in autocast's cache (grouped_mm
    # reads them in fp32; the eager loop's slice copies are activations), PhiMoE's as well
    spec = _spec("mixtral-top1.json")
    E, V, X, L, Hkv, dh = 256, 1000, 4, 2, 2, 32
    outside = (2 * E * E + 2 * E * Hkv * dh + X * E) * L + V * E
    for experts in ("grouped_mm", "eager"):
        r = memory_report(spec, Settings(precision="bf16", mixed=True, batch_size=2,
                                         seq_len=64, device="cuda", experts=experts))
        assert r.phases[0].items.get("autocast_copies").total == 2 * outside
    phimoe = _spec("phimoe-top1.json")
    E, V, X, L = 16, 128, 4, 2
    r = memory_report(phimoe, Settings(precision="bf16", mixed=True, batch_size=2,
                                       seq_len=64, device="cuda", experts="eager"))
    assert r.phases[0].items.get("autocast_copies").total == 2 * ((4 * E * E + X * E) * L
                                                                   + V * E)
