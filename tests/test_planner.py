"""The layout planner's parts: collectives, kernels, the pipeline schedule, the search's
rules and its memory pruning, the FLOP conventions of the published runs, `tcalc plan`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import DATA

from transformer_calc.planner import collectives as cc
from transformer_calc.planner import kernels
from transformer_calc.planner.calibration import PRIOR, calibration
from transformer_calc.planner.frameworks import FRAMEWORKS
from transformer_calc.planner.hardware import CLUSTERS
from transformer_calc.planner.runs import SOURCES, case_of, cases, load_runs
from transformer_calc.planner.search import MemoryCheck, groups, search, settings_for
from transformer_calc.planner.step import Layout, StepModel, Workload
from transformer_calc.presets import load_model

RUNS = DATA / "published_runs_dev.json"
H100 = CLUSTERS["dgx-h100"]
MEGATRON = FRAMEWORKS["megatron"]


# -- collectives: the ring's volumes (Thakur, Rabenseifner & Gropp 2005) --------------------

def test_an_all_reduce_inside_a_domain_moves_2_n_minus_1_over_n_of_the_bytes() -> None:
    link, S = H100.nvlink, 1 << 30
    for n in (2, 4, 8):
        want = 2 * (n - 1) * link.latency + 2 * (n - 1) / n * S / (link.bandwidth
                                                                    * link.efficiency)
        assert cc.all_reduce(H100, S, n) == pytest.approx(want, rel=1e-12)
        # an all-gather (or reduce-scatter) is half of it
        assert cc.all_gather(H100, S, n) == pytest.approx(want / 2, rel=1e-12)


def test_a_group_across_domains_sends_its_shard_over_each_members_nic() -> None:
    # 64 GPUs, 8 per domain: in-domain reduce-scatter + all-gather, and across 8 domains an
    # all-reduce of 1/8 of the bytes through each member's own NIC
    S, nv, ib = 1 << 30, H100.nvlink, H100.network
    want = (14 * nv.latency + 2 * 7 / 8 * S / (nv.bandwidth * nv.efficiency)
            + 14 * ib.latency + 2 * 7 / 8 * S / 8 / (ib.bandwidth * ib.efficiency))
    assert cc.all_reduce(H100, S, 64) == pytest.approx(want, rel=1e-12)
    # a stride of 8 (one member per domain, as data parallelism behind tp 8): all on NICs
    one = 126 * ib.latency + 2 * 63 / 64 * S / (ib.bandwidth * ib.efficiency)
    assert cc.all_reduce(H100, S, 64, stride=8) == pytest.approx(one, rel=1e-12)


def test_small_messages_see_little_of_the_bandwidth() -> None:
    # α-β: bus bandwidth grows with the message until S ≫ α·B
    def bus(S: float) -> float:
        return 2 * 7 / 8 * S / cc.all_reduce(H100, S, 8)

    assert bus(64 << 10) < 0.1 * bus(1 << 30)
    assert bus(4 << 30) == pytest.approx(H100.nvlink.bandwidth * H100.nvlink.efficiency,
                                         rel=0.01)


# -- kernels -------------------------------------------------------------------------------

def test_waves_that_do_not_fill_the_gpu_cost_a_whole_wave() -> None:
    # 133 output tiles of 256 × 128 on 132 SMs: the second wave holds one tile; a smaller
    # tile shape packs better, at its own lower rate
    util = kernels.wave_utilisation(133 * 256, 128, 132)
    assert util < 0.8
    assert kernels.wave_utilisation(132 * 256, 128, 132) == 1.0


def test_a_gemm_is_never_faster_than_its_operands_stream_from_memory() -> None:
    # a matrix-vector product: 2·m·k FLOPs, m·k·2 bytes
    t = kernels.gemm_seconds(8192, 1, 8192, peak=989e12, rate=0.8, bandwidth=3.35e12,
                             sms=132)
    assert t >= 8192 * 8192 * 2 / (3.35e12 * kernels.HBM_EFFICIENCY)


def test_causal_attention_computes_about_half_the_scores() -> None:
    assert kernels.causal_fraction(8192, 8192) == pytest.approx(0.5 + 0.5 * 128 / 8192)
    assert kernels.causal_fraction(64, 64) == 1.0


# -- the step --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model70() -> StepModel:
    spec = load_model("llama-3.1-70b")
    return StepModel(Workload(spec, 8192, 256), H100, MEGATRON, PRIOR)


@pytest.mark.parametrize(("pp", "vp", "mb"), [(4, 1, 1), (8, 1, 2), (4, 5, 1), (8, 2, 1)])
def test_the_bubble_is_p_minus_1_over_m_v_of_the_micro_batches(model70: StepModel, pp: int,
                                                                 vp: int, mb: int) -> None:
    # Narayanan et al. 2021, Sec. 2.2: 1F1B's bubble (p − 1)/m, interleaved (p − 1)/(m·v)
    lay = Layout(tp=4, pp=pp, dp=64 // (4 * pp) * 4, vp=vp, mb=mb, zero=1, sp=True)
    st = model70.step(lay)
    per_mb = (st.compute + st.tp + st.cp + st.ep + st.pp) / st.micro_batches
    assert st.micro_batches == 256 // (lay.dp * mb)
    assert st.bubble == pytest.approx((pp - 1) / vp * per_mb, rel=1e-12)
    assert st.bubble / (st.micro_batches * per_mb) == pytest.approx(
        (pp - 1) / (st.micro_batches * vp), rel=1e-12)


def test_recomputation_costs_a_forward_and_overlap_hides_communication(
        model70: StepModel) -> None:
    base = Layout(tp=8, pp=1, dp=32, mb=1, zero=1, sp=True)
    none, full = model70.step(base), model70.step(base._replace(recompute="full"))
    x = model70.layer(8, 1, 1, 1, True)
    assert full.compute - none.compute == pytest.approx(
        none.micro_batches * model70.n_layers * x.fwd, rel=1e-9)
    # the same layout without Transformer Engine's overlap exposes all its TP communication
    exposed = StepModel(model70.work, H100, MEGATRON, PRIOR._replace(
        values=PRIOR.values | {"tp_hidden.megatron": 1e-9}))
    assert exposed.step(base).tp > 5 * none.tp > 0


def test_data_parallel_reduction_hides_behind_backward_only_where_the_framework_does_it(
        model70: StepModel) -> None:
    lay = Layout(tp=8, pp=1, dp=32, mb=8, zero=0, sp=True)
    overlapped = model70.step(lay).dp
    plain = StepModel(model70.work, H100, MEGATRON._replace(dp_overlap=False), PRIOR)
    assert plain.step(lay).dp > overlapped


# -- the search ------------------------------------------------------------------------------

def test_the_search_keeps_the_frameworks_rules() -> None:
    spec = load_model("llama-3.1-70b")  # 64 heads, 8 K/V heads, 80 layers
    work = Workload(spec, 8192, 512)
    seen = [lay for g in groups(work, 256, MEGATRON, 8) for lay in g.layouts()]
    assert seen and all(lay.gpus == 256 for lay in seen)
    assert {lay.tp for lay in seen} == {1, 2, 4, 8}  # within the NVLink domain
    assert all(512 % (lay.dp * lay.mb) == 0 for lay in seen)
    assert all(lay.vp == 1 or (512 // (lay.dp * lay.mb)) % lay.pp == 0 for lay in seen)
    assert all(not lay.sp or lay.tp > 1 for lay in seen)
    assert {lay.zero for lay in seen} == {0, 1}
    # PyTorch FSDP: no tensor parallelism, ZeRO-3 only
    fsdp = [lay for g in groups(work, 64, FRAMEWORKS["fsdp"], 8) for lay in g.layouts()]
    assert {(lay.tp, lay.zero) for lay in fsdp} == {(1, 3)}


def test_the_best_layouts_are_the_fastest_that_fit_as_exhaustive_search_finds_them() -> None:
    spec = load_model("llama-3.1-8b")
    work = Workload(spec, 8192, 64)
    found = search(work, H100, MEGATRON, PRIOR, 64, top=3)
    assert len(found.best) == 3
    model = StepModel(work, H100, MEGATRON, PRIOR)
    check = MemoryCheck(model)
    everything = sorted(((model.step(lay).total, lay) for g in groups(work, 64, MEGATRON, 8)
                         for lay in g.layouts()), key=lambda t: t[0])
    fits = [lay for _, lay in everything if check.peak(lay) <= found.budget_bytes][:3]
    assert [c.layout for c in found.best] == fits
    assert found.memory_calls < found.layouts / 10  # most layouts never reach the core


def test_memory_pruning_is_the_memory_cores_peak_per_layout() -> None:
    from transformer_calc.memory import memory_report

    spec = load_model("llama-3.1-70b")
    work = Workload(spec, 8192, 256)
    found = search(work, H100, MEGATRON, PRIOR, 64, top=3)
    model = StepModel(work, H100, MEGATRON, PRIOR)
    for c in found.best:
        lay = c.layout
        m = 256 // (lay.dp * lay.mb)
        r = memory_report(spec, settings_for(model, lay, min(m, lay.pp)))
        acts = next(i.total for i in r.per_gpu.items if i.name == "activations")
        peak = r.peak
        if lay.cp > 1:  # Megatron-LM's activation formula is the whole sequence's: T / cp
            peak -= acts - acts // lay.cp
            acts //= lay.cp
        # Megatron-LM's interleaving keeps 1 + (p − 1)/(p·v) of the activations in flight
        extra = round(acts * (lay.pp - 1) / (lay.pp * lay.vp)) if lay.vp > 1 else 0
        assert c.peak_bytes == peak + extra <= found.budget_bytes


def test_nothing_fits_is_said() -> None:
    spec = load_model("llama-3.1-405b")
    found = search(Workload(spec, 8192, 8), H100, MEGATRON, PRIOR, 8)
    assert found.best == () and found.layouts > 0


# -- the published runs ----------------------------------------------------------------------

def test_every_row_is_a_case_or_says_why_not() -> None:
    rows = load_runs(RUNS)
    got = [case_of(r) for r in rows]
    assert len(got) == len(rows) == 608
    used = [c for c in got if not c.reason]
    assert len(used) >= 300
    assert all(c.source in SOURCES.values() for c in got)
    # TPU and unpinned Blackwell rows are context only
    assert all(c.reason for c in got if c.group == "maxtext_tpu")


# Each source's own numbers, reproduced by the planner's reading of its FLOP convention:
# (row id, the source's printed MFU or TFLOP/s per GPU, what the planner derives from the
# row's step time or tokens/s and its convention, the tolerance: the print's rounding)
@pytest.mark.parametrize(("row", "printed", "tol"), [
    ("korthikanti2022-t5-175B-selective+sp", ("mfu", 0.514), 0.005),  # Table 5
    ("korthikanti2022-t5-1T-selective+sp", ("mfu", 0.563), 0.005),
    ("korthikanti2022-530B-dp8-selective+sp", ("mfu", 0.542), 0.005),  # the text
    ("nemo-24.07-h100-fp8-GPT3-175B-512", ("model_tflops_per_gpu", 888), 0.002),
    ("nemo-24.07-h100-fp8-LLAMA3-70B-64", ("model_tflops_per_gpu", 734), 0.002),
    ("bridge-25.11-DGX-H100-LLAMA3.1_405B-FP8-CS-1024-tp8pp8cp2ep1-gbs512",
     ("model_tflops_per_gpu", 737), 0.002),
    ("mpt-H100_80GB_BF16-7b-s65536-n8-mb1-16", ("mfu", 0.2859), 0.002),
])
def test_the_flop_conventions_reproduce_each_sources_own_numbers(
        row: str, printed: tuple[str, float], tol: float) -> None:
    r = next(x for x in load_runs(RUNS) if x["id"] == row)
    c = case_of(r)
    derived = c.conv_flops / (c.measured_s * c.gpus) / 1e12
    key, value = printed
    if key == "mfu":
        derived /= r["gpu_peak_tflops"]
    assert derived == pytest.approx(value, rel=tol)


def test_the_calibration_folds_never_saw_their_own_source() -> None:
    sources = {c.source for c in cases(RUNS) if not c.reason}
    allc = calibration()
    assert allc.name == "all"
    from transformer_calc.planner.calibration import trained_on

    assert set(trained_on("all")) == sources
    for s in sources:
        fold = calibration(s)
        assert s not in trained_on(s)
        assert set(trained_on(s)) == sources - {s}
        assert all(v > 0 for v in fold.values.values())


# -- tcalc plan ------------------------------------------------------------------------------

def test_plan_says_the_verdict_first_then_the_breakdown(cli) -> None:
    out = cli("plan", "llama-3.1-8b", "--gpu", "H100", "--gpus", "64", "--global-batch",
              "128", "--seq-len", "8192", "--tokens", "15T").stdout
    lines = out.splitlines()
    assert lines[0].startswith("llama-3.1-8b on 64 × H100-80GB (dgx-h100, megatron, bf16)")
    assert lines[2].startswith("best: tp") and "step " in lines[3] and "MFU" in lines[3]
    assert "15T tokens: " in lines[4] and "GPU-hours" in lines[4]
    assert "fastest layouts that fit" in out and "compute" in out


def test_plan_json_and_markdown_carry_the_same_layouts(cli) -> None:
    args = ("plan", "llama-3.1-70b", "--gpu", "H100", "--gpus", "256", "--global-batch",
            "512", "--seq-len", "8192", "--tokens", "1T")
    data = cli.json(*args)
    assert data["schema"] == "tcalc.plan/1" and len(data["layouts"]) == 5
    best = data["layouts"][0]
    parts = sum(best["breakdown_seconds"].values())
    assert parts == pytest.approx(best["step_seconds"], rel=1e-12)
    tps = 512 * 8192 / (best["step_seconds"] * 256)
    assert best["tokens_per_s_per_gpu"] == pytest.approx(tps, rel=1e-12)
    assert best["run_days"] == pytest.approx(1e12 / (tps * 256) / 86400, rel=1e-12)
    assert best["gpu_hours"] == pytest.approx(best["run_days"] * 24 * 256, rel=1e-12)
    steps = [x["step_seconds"] for x in data["layouts"]]
    assert steps == sorted(steps)
    md = cli(*args, "--format", "markdown").stdout
    assert "| # | layout |" in md and md.count("\n| ") >= 6


def test_plan_holds_what_the_user_fixes(cli) -> None:
    data = cli.json("plan", "llama-3.1-70b", "--gpu", "H100", "--gpus", "256",
                    "--global-batch", "512", "--seq-len", "8192", "--tp", "8", "--pp", "4",
                    "--recompute", "full")
    assert {(x["layout"]["tp"], x["layout"]["pp"], x["layout"]["recompute"])
            for x in data["layouts"]} == {(8, 4, "full")}


@pytest.mark.parametrize(("args", "message"), [
    (("--gpu", "T4"), "--gpu T4: the planner models"),
    (("--gpu", "H100", "--framework", "jax"), "--framework: expected one of"),
    (("--cluster", "nosuch"), "--cluster: unknown cluster 'nosuch'"),
    (("--gpu", "H100", "--precision", "int4"), "--precision: expected one of"),
])
def test_plan_errors_are_one_line(cli, args: tuple[str, ...], message: str) -> None:
    r = cli("plan", "gpt2", "--global-batch", "8", "--seq-len", "1024", *args, code=2)
    assert r.stderr.startswith("Error: ") and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_search_is_fast_enough_for_a_large_cluster() -> None:
    # 405B on 16,384 H100s (make bench measures it with its own timer)
    spec = load_model("llama-3.1-405b")
    found = search(Workload(spec, 8192, 2048), H100, MEGATRON, calibration(), 16384)
    assert found.best and found.layouts > 10_000
    assert found.seconds < 10  # generous: a shared CI machine; docs/planner.md has the time


def test_the_dev_set_copy_is_the_shared_one_when_present() -> None:
    shared = Path(__file__).resolve().parents[2] / "shared" / "published_runs_dev.json"
    if not shared.is_file():
        pytest.skip("no shared copy beside the repository")
    assert shared.read_bytes() == RUNS.read_bytes()


def test_kendall_tau_is_tau_b() -> None:
    from transformer_calc.planner.validate import kendall_tau

    # by hand: 7 concordant and 3 discordant pairs of 10 -> (7 - 3) / 10
    assert kendall_tau([1, 2, 3, 4, 5], [3, 1, 2, 5, 4]) == pytest.approx(0.4)
    # with ties (Kendall 1945's τ-b): 4 concordant, one pair tied in each -> 4 / √(5 · 5)
    assert kendall_tau([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)
    assert math.isnan(kendall_tau([1, 1], [2, 2]))
