"""The training step as a timeline (costs/timeline.py): its maxima are the phases' peaks, its
points between the phases are what the H100 held between them, and its shape follows what
forward, backward, recomputation and --optim-in-bwd do; `tcalc memory --plot` draws it.

The measured references are the H100 fixtures the phases are pinned to
(tools/measure_peak_cuda.py: torch.cuda.memory_allocated() after the forward, the backward,
the AdamW step and zero_grad of the second training step, beside max_memory_allocated within
each). Nothing here was printed by tcalc.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import xml.etree.ElementTree as ET

import pytest
from conftest import DATA
from test_peak import CHECKPOINTED, RUNS, _checkpointed_report, _report

from transformer_calc import load_model
from transformer_calc.costs.timeline import MAX_POINTS, split
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.render.plot import chart, svg, text

MIB = 1 << 20
FAMILIES = json.loads((DATA / "peak_graph_families_cuda_h100.json").read_text())["runs"]
# what torch.cuda.memory_allocated() read after each phase, and the timeline's point there
BETWEEN = {"after_forward_mib": "forward loss", "after_backward_mib": "backward embeddings",
           "after_optimizer_mib": "optimizer step", "after_zero_grad_mib": "optimizer zero_grad"}


def _family_report(run: dict):  # type: ignore[no-untyped-def]
    from test_peak_graph_families import CONFIGS, RECIPES

    return memory_report(spec_from_hf(CONFIGS[run["model"]]), Settings(
        **RECIPES[run["recipe"]], attention=run["attention"], device="cuda",  # type: ignore[arg-type]
        batch_size=run["batch"], seq_len=run["seq_len"]))


MEASURED = ([(f"{r['model']}-{r['recipe']}-{r['attention']}", r, _report) for r in RUNS]
            + [(f"{r['model']}-{r['recipe']}-{r['lora_targets'] or 'full'}-checkpointed", r,
                _checkpointed_report) for r in CHECKPOINTED]
            + [(f"{r['model']}-{r['recipe']}-{r['attention']}", r, _family_report)
               for r in FAMILIES])


@pytest.mark.parametrize(("run", "report"), [m[1:] for m in MEASURED],
                         ids=[m[0] for m in MEASURED])
def test_between_the_phases_within_3_percent_of_the_h100(run, report) -> None:  # type: ignore[no-untyped-def]
    # the points no phase peak pins: what forward leaves (every saved tensor, the loss's), what
    # backward leaves (every gradient, no activation), the step's and zero_grad's; in fact
    # within 2.7 % everywhere (GPT-2 in pure bf16: the allocator's small blocks)
    points = {p.step: p for p in report(run).timeline.points}
    measured = run["steps"][1]
    errors = {key: (points[step].allocated - measured[key] * MIB) / (measured[key] * MIB)
              for key, step in BETWEEN.items()}
    assert all(abs(e) <= 0.03 for e in errors.values()), errors


# tests/data/timeline_forward_cpu.json: tools/measure_timeline_cpu.py (torch 2.13 CPU,
# transformers 5.23): the bytes forward has saved for backward after each op group, by
# saved_tensors_hooks, GPT-2's and Llama's shapes (4 layers, fp32, eager, B=2, T=64)
FORWARD_CPU = json.loads((DATA / "timeline_forward_cpu.json").read_text())


@pytest.mark.parametrize("case", sorted(FORWARD_CPU["cases"]))
def test_forward_saves_what_torch_saves_op_group_by_op_group(case: str) -> None:
    measured = FORWARD_CPU["cases"][case]
    m = FORWARD_CPU["meta"]
    r = memory_report(spec_from_hf(measured["config"]), Settings(
        batch_size=m["batch"], seq_len=m["seq_len"], device="cpu", attention=m["attention"],
        use_cache=m["use_cache"]))
    forward = [p for p in r.timeline.points if p.phase == "forward"][1:]
    saved = list(itertools.accumulate(n for _, n in measured["saved_by_op_group"]))
    assert [p.step for p in forward] == [f"forward {name}"
                                         for name, _ in measured["saved_by_op_group"]]
    assert [_row(p, "activations") for p in forward] == saved  # exact, byte for byte


# -- the maxima are the phases' peaks ---------------------------------------------------------

SETTINGS = [
    {}, dict(precision="bf16", mixed=True), dict(recompute="full"),
    dict(recompute="selective", precision="bf16"),
    dict(precision="bf16", mixed=True, recompute="full"),
    dict(optimizer_in_backward=True, precision="bf16"),
    dict(optimizer_in_backward=True, recompute="full", precision="bf16", mixed=True),
    dict(gpus=8, zero=3, precision="bf16", mixed=True),
    dict(gpus=8, zero=2, precision="bf16", mixed=True), dict(gpus=8, zero=1),
    dict(gpus=4, tp=4, precision="bf16", sequence_parallel=True),
    dict(recompute="full", offload_activations=True, precision="bf16", mixed=True),
    dict(lora_rank=16, precision="bf16", mixed=True),
    dict(gpus=8, zero=3, precision="bf16", mixed=True, recipe="deepspeed"),
    dict(gpus=4, pp=4, precision="bf16", mixed=True, recipe="megatron"),
    dict(grad_accum=4, optimizer_impl="fused"), dict(freeze=("embeddings",)),
    dict(optimizer="sgd", batch_size=8, seq_len=64),
]
# dense, MoE, encoder-decoder, encoder, alternating sliding and full layers (groups in the
# layer plan's order), MLA with dense and MoE layers
MODELS = ["gpt2", "llama-3.1-8b", "mixtral-8x7b", "t5-small", "bert-base", "gemma-3-1b",
          "gpt-oss-20b", "deepseek-v3"]


@pytest.mark.parametrize("name", MODELS)
def test_the_timelines_maxima_are_the_phases_peaks(name: str) -> None:
    spec = load_model(name)
    for kw in SETTINGS:
        kw = {"batch_size": 2, "seq_len": 256, **kw}
        try:
            r = memory_report(spec, Settings(**kw))  # type: ignore[arg-type]
        except Exception as e:  # a combination the model refuses (TcalcError) is skipped
            if type(e).__name__ != "TcalcError":
                raise
            continue
        t = r.timeline
        assert t is not None and 8 < len(t.points) <= MAX_POINTS
        phases = {p.name: p for p in r.phases}
        for name_, phase in phases.items():
            top = max(p.peak for p in t.points if p.phase == name_)
            assert top == phase.items.total, (name, kw, name_)
        assert t.peak == r.peak == max(p.items.total for p in r.phases)
        for p in t.points:
            assert p.peak == sum(row[1] for row in p.rows) >= p.allocated >= 0, (name, kw, p)
        # merged to a few points, every phase keeps its maximum and its rows
        assert t.phases == r.phases
        from transformer_calc.memory import training_timeline
        from transformer_calc.params import count_params

        few = training_timeline(spec, r.settings, r.seq_len, r.per_gpu, r.activations,
                                count_params(spec), 30)
        assert len(few.points) <= 30 and few.phases == r.phases, (name, kw)


def test_a_deep_model_is_bounded() -> None:
    spec = load_model("llama-3.1-8b").replace(n_layers=1000)
    r = memory_report(spec, Settings(batch_size=1, seq_len=128, recompute="full"))
    t = r.timeline
    assert len(t.points) <= MAX_POINTS and t.layers_per_point == 9
    assert "9 consecutive layers per point" in t.notes[-1]
    assert any(p.step == "forward layers 1-9" for p in t.points)
    assert t.peak == r.peak


def test_split_sums_exactly() -> None:
    assert split(10, [1, 1, 1]) == [3, 3, 4]
    assert split(7, [0, 0]) == [0, 7] and split(5, []) == []
    for total, n in itertools.product((0, 1, 999_999_937, 2**45 + 3), (1, 2, 7, 130)):
        weights = [(i * 37 % 11) + 0.5 for i in range(n)]
        parts = split(total, weights)
        assert sum(parts) == total and min(parts) >= 0
        assert all(abs(p - total * w / sum(weights)) <= 1 for p, w in zip(parts, weights,
                                                                           strict=True))


# -- its shape --------------------------------------------------------------------------------

def _points(name: str = "gpt2", **kw):  # type: ignore[no-untyped-def]
    r = memory_report(load_model(name), Settings(**{"batch_size": 4, "seq_len": 512, **kw}))
    return r, r.timeline.points


def _row(p, name: str) -> int:  # type: ignore[no-untyped-def]
    return sum(r[1] for r in p.rows if r[0] == name)


def test_forward_only_adds_backward_frees_the_saved_tensors_and_makes_the_gradients() -> None:
    r, points = _points(precision="bf16", mixed=True)
    forward = [p for p in points if p.phase == "forward"]
    assert [p.step for p in forward[:3]] == ["forward start", "forward embeddings",
                                            "forward layer 1"]
    assert all(a.allocated <= b.allocated for a, b in itertools.pairwise(forward))
    # each layer adds its saved tensors and autocast's copies of its weights
    layers = [p for p in forward if "layer" in p.step]
    assert len(layers) == 12 and len({b.allocated - a.allocated
                                      for a, b in itertools.pairwise(layers)}) <= 2
    assert _row(forward[0], "autocast_copies") == 0 < _row(layers[0], "autocast_copies")
    backward = [p for p in points if p.phase == "backward" and not p.measured]
    saved = [_row(p, "activations") for p in backward]
    made = [_row(p, "gradients") for p in backward]
    assert saved == sorted(saved, reverse=True) and saved[-1] == 0
    assert made == sorted(made) and made[-1] == r.per_gpu.get("gradients").total
    assert [p.step for p in backward][:3] == ["backward head", "backward layer 12",
                                             "backward layer 11"]


def test_the_optimizer_in_backward_frees_every_gradient_at_once() -> None:
    r, points = _points(precision="bf16")
    r2, stepped = _points(precision="bf16", optimizer_in_backward=True)
    end = next(p for p in points if p.step == "backward embeddings")
    end2 = next(p for p in stepped if p.step == "backward embeddings")
    assert end.allocated - end2.allocated == r.per_gpu.get("gradients").total
    assert r2.phases[1].items.total <= r.phases[1].items.total
    # a layer holds its own largest gradient for a moment: GPT-2's c_fc / c_proj (768 × 3072),
    # beside the tied embedding's, which autograd holds from the head to the embeddings
    layer = next(p for p in stepped if p.step == "backward layer 5")
    assert sorted(r[1] for r in layer.rows if r[0] == "gradients") == [768 * 3072 * 2,
                                                                       50257 * 768 * 2]
    assert layer.peak - layer.allocated == 768 * 3072 * 2 * 2  # and its foreach temporary
    head = next(p for p in stepped if p.step == "backward head")
    # (the final norm's own weight and bias stepped at once, a few KiB)
    assert max(r[1] for r in head.rows if r[0] == "gradients") == 50257 * 768 * 2
    assert head.peak - head.allocated < 1 << 14
    end = next(p for p in stepped if p.step == "backward embeddings")  # the table's step
    assert end.peak - end.allocated == 50257 * 768 * 2 * 2


def test_full_recomputation_rebuilds_one_layer_at_a_time() -> None:
    r, points = _points(recompute="full")
    rebuilt = sum(i.total for i in r.activations.items if "recomputed" in i.name
                  or "rebuild_gradients" in i.name)
    for before, p in itertools.pairwise(points):
        if p.phase == "backward" and "layer" in p.step:
            # the bump: one layer rebuilt over what backward held when it reached it
            # (the first layer's is the measured moment's count, a few bytes apart: 1e-6)
            assert p.peak - before.allocated >= rebuilt * (1 - 1e-6)
            assert "rebuilds" in p.when and _row(p, "recomputed_layer")
        if p.phase == "forward" and "layer" in p.step:
            assert p.peak == p.allocated  # forward keeps each layer's input only
    first = next(p for p in points if p.step == "backward layer 1")
    assert first.measured and first.when == "while backward rebuilds the first layer"


def test_offloaded_activations_leave_the_gpu() -> None:
    r, points = _points(recompute="full", offload_activations=True)
    kept = r.activations.get("decoder.checkpoint_input").count
    layers = [_row(p, "activations") for p in points
              if p.phase == "forward" and "layer" in p.step]
    # one layer's kept input, then two (the one backward reaches, the one brought back),
    # give or take the 512-byte blocks the loss's tensors round up to
    assert abs(layers[0] - kept) < 64 and all(a == layers[1] for a in layers[1:])
    assert abs(layers[1] - 2 * kept) < 64


def test_fsdp_reshards_its_gathered_parameters_in_backward() -> None:
    # fully sharded: the root's and two layers' gathered through forward and backward, until
    # backward ends
    r, points = _points(gpus=8, zero=3, precision="bf16", mixed=True)
    gathered = r.per_gpu.get("gathered_parameters").total
    held = [_row(p, "gathered_parameters") for p in points]
    assert held[:-3] == [gathered] * (len(points) - 3) and held[-3:] == [0, 0, 0]
    # without resharding after forward: every layer stays gathered until its backward
    r, points = _points(gpus=8, zero=2, precision="bf16", mixed=True)
    gathered = r.per_gpu.get("gathered_parameters").total
    backward = [_row(p, "gathered_parameters") for p in points
                if p.phase == "backward" and not p.measured]
    assert backward == sorted(backward, reverse=True) and backward[-1] == 0
    assert gathered > backward[0] > backward[-2] > 0


# -- the chart --------------------------------------------------------------------------------

def test_the_terminal_chart() -> None:
    r = memory_report(load_model("gpt2"), Settings(batch_size=8, seq_len=1024))
    c = chart(r.timeline, "gpt2", 80 << 30, "H100 80 GiB")
    out = text(c, 100)
    lines = out.splitlines()
    assert "GiB" in lines[2] and "H100 80 GiB" in out and "80.0" in out
    axis = [ln for ln in lines if "┤" in ln or "└" in ln]
    assert len(axis) == 15 and len({len(ln) for ln in axis if "H100" not in ln}) == 1
    assert all(len(ln) <= 100 for ln in lines)
    assert "forward" in out and "backward" in out and "nan" not in out.lower()
    peak = r.phases[1].items.total / (1 << 30)
    assert f"peak {peak:.2f} GiB at the start of backward (backward loss)" in out
    marker = next(ln for ln in lines if ln.strip() == "▲")
    # under the column of the peak's point
    col = marker.index("▲") - (axis[0].index("┤") + 1)
    points = r.timeline.points
    width = len(axis[-1]) - axis[-1].index("└") - 1
    assert points[col * len(points) // width].step == "backward loss"


def test_a_narrow_terminal_and_a_short_step() -> None:
    r = memory_report(load_model("gpt2"), Settings(batch_size=1, seq_len=64,
                                                   precision="bf16", optimizer="sgd"))
    out = text(chart(r.timeline, "gpt2"), 40)
    assert all(len(ln) <= 40 for ln in out.splitlines()[1:])
    assert "MiB" in out.splitlines()[2]  # under a GiB: MiB


def test_the_svg_is_well_formed_and_escapes_every_string() -> None:
    r = memory_report(load_model("gpt2"), Settings(batch_size=2, seq_len=128))
    title = "<script>alert('x') & \"y\"</script>"
    doc = svg(chart(r.timeline, title, 8 << 30, "A <GPU> & co"))
    root = ET.fromstring(doc)  # noqa: S314 (what tcalc itself wrote)
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg" and root.find(f"{ns}title").text == title
    assert "<script>" not in doc and "<GPU>" not in doc
    texts = [e.text for e in root.iter(f"{ns}text")]
    assert "A <GPU> & co" in texts and "forward" in texts and "optimizer" in texts
    assert any(t.startswith("peak ") for t in texts)
    assert "nan" not in doc.lower()


# -- the command line -------------------------------------------------------------------------

def test_cli_plot_in_the_terminal(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("memory", "gpt2", "--plot", "-b", "2", "--gpu", "H100").stdout
    assert "peak of a training step" in out  # the table, then the chart
    assert "bytes allocated per GPU over one training step" in out
    assert "▲" in out and "H100" in out.split("bytes allocated per GPU")[-1]


def test_cli_plot_svg(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "step.svg"
    r = cli("memory", "gpt2", "--plot", str(out), "--format", "json")
    assert json.loads(r.stdout)["timeline"]["points"]
    assert f"wrote {out}" in r.stderr
    ET.fromstring(out.read_text())  # noqa: S314 (what tcalc itself wrote)
    cli("memory", "gpt2", "--plot", str(out), "-b", "2")  # a regular file is replaced
    (tmp_path / "dir.svg").mkdir()
    r = cli("memory", "gpt2", "--plot", str(tmp_path / "dir.svg"), code=2)
    assert "dir.svg: a folder; tcalc replaces regular files only" in r.stderr
    link = tmp_path / "null.svg"
    link.symlink_to("/dev/null")
    r = cli("memory", "gpt2", "--plot", str(link), code=2)
    assert "a symlink to a device" in r.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--format", "json", "--plot"), "--plot: draws in the terminal beside the table; with "
                                     "--format json give a file: --plot FILE.svg"),
    (("--inference", "--plot"), "--plot: draws a training step's timeline; --inference has "
                                "none"),
    (("--plot", "step.png"), "--plot: step.png: expected FILE.svg (or --plot alone, for the "
                             "terminal)"),
])
def test_cli_plot_refusals(cli, args, message) -> None:  # type: ignore[no-untyped-def]
    assert f"Error: {message}" in cli("memory", "gpt2", *args, code=2).stderr


def test_json_timeline(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli.json("memory", "gpt2", "--mixed", "-b", "4")
    t = out["timeline"]
    assert t["layers_per_point"] == 1 and t["notes"] == []
    points = t["points"]
    assert all(type(p["allocated_bytes"]) is int and type(p["peak_bytes"]) is int
               for p in points)
    assert max(p["peak_bytes"] for p in points) == out["peak_bytes"]
    assert [p["phase"] for p in points] == sorted(
        (p["phase"] for p in points), key=("forward", "backward", "optimizer").index)
    assert cli.json("memory", "gpt2", "--inference")["timeline"] is None


def test_pipeline_parallel_says_how_it_is_drawn() -> None:
    r = memory_report(load_model("llama-3.1-8b"), dataclasses.replace(
        Settings(batch_size=1, seq_len=512, precision="bf16", mixed=True, recipe="megatron"),
        gpus=4, pp=4))
    assert "pipeline parallel over 4" in r.timeline.notes[0]
