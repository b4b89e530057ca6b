"""`tcalc explain --topic step`: where a training step's time goes, for the layout `tcalc plan`
ranks first. The derivation must add up to the planner's own numbers: each layer's ops to the
layer's forward and backward, the parts of the step to the step time plan ranks by, and the
throughput and MFU to plan's."""

from __future__ import annotations

import pytest

from transformer_calc.errors import TcalcError
from transformer_calc.explain import explain
from transformer_calc.planner import plan_training
from transformer_calc.planner.calibration import calibration
from transformer_calc.planner.frameworks import framework
from transformer_calc.planner.hardware import cluster_for
from transformer_calc.planner.layer import OpTime, Shard
from transformer_calc.planner.step import StepModel, Workload
from transformer_calc.presets import load_model as load_preset

CASES = [  # (preset, gpu, gpus, global batch, sequence, framework)
    ("llama-3.1-8b", "H100-80GB", 8, 64, 8192, "megatron"),
    ("llama-3.1-70b", "H100-80GB", 64, 256, 8192, "megatron"),
    ("mixtral-8x7b", "H100-80GB", 16, 64, 4096, "megatron"),
    ("gpt-oss-20b", "H100-80GB", 8, 32, 4096, "torchtitan"),
    ("gpt2-medium", "A100-80GB", 4, 32, 1024, "fsdp"),
]


def _sections(case):  # type: ignore[no-untyped-def]
    name, gpu, gpus, gb, T, fw = case
    spec = load_preset(name)
    return spec, explain(spec, "step", gpu=gpu, gpus=gpus, global_batch=gb, seq_len=T,
                         framework=fw)


def _step(section, label):  # type: ignore[no-untyped-def]
    return next(s for s in section.steps if s.label == label)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_parts_add_up_to_the_planners_step(case) -> None:  # type: ignore[no-untyped-def]
    name, gpu, gpus, gb, T, fw = case
    spec, sections = _sections(case)
    best = plan_training(spec, gpus=gpus, global_batch=gb, seq_len=T, gpu=gpu, framework=fw,
                         top=1).best
    assert best is not None
    step = next(s for s in sections if s.title.startswith("The step"))
    parts = [s.value for s in step.steps[1:-1]]
    total = _step(step, "step time").value
    assert total == pytest.approx(best.time.total * 1e3, abs=1e-3)
    assert sum(parts) == pytest.approx(total, abs=0.01)
    assert _step(step, "compute").value == pytest.approx(best.time.compute * 1e3, abs=1e-3)
    delivers = sections[-1]
    assert _step(delivers, "tokens/s per GPU").value == pytest.approx(
        best.tokens_per_s_per_gpu, abs=0.1)
    assert _step(delivers, "MFU").value == pytest.approx(100 * best.mfu, abs=0.01)
    layout = sections[0]
    assert best.layout.describe() in layout.steps[0].text
    assert f"ZeRO-{best.layout.zero}" in layout.steps[0].text or (
        best.layout.zero == 0 and "DDP" in layout.steps[0].text)
    busiest = _step(layout, "layers on the busiest pipeline stage L").value
    layers = sum(g.count for g in StepModel(Workload(spec, T, gb), cluster_for(gpu),
                                            framework(fw), calibration()).layers)
    assert busiest == -(-layers // best.layout.pp)
    assert step.steps[0].expr.startswith(f"{busiest:g} × (")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_layers_ops_add_up_to_the_layer(case) -> None:  # type: ignore[no-untyped-def]
    """The op rows are the step model's own record: their sum is the layer's forward and
    backward (the layer sections are weighted into the average layer the step uses)."""
    name, gpu, gpus, gb, T, fw = case
    spec, sections = _sections(case)
    layers = [s for s in sections if s.title.startswith("One layer")]
    assert layers
    for sec in layers:
        ops = sec.steps[:-2]
        assert len(ops) >= 3  # projections, attention core, FFN, memory-bound passes
        fwd, bwd = _step(sec, "layer forward").value, _step(sec, "layer backward").value
        assert sum(o.value for o in ops) == pytest.approx(fwd, abs=0.01 * len(ops))
        backs = [float(o.text.split(" µs")[0].removeprefix("backward ").replace(",", ""))
                 for o in ops]
        assert sum(backs) == pytest.approx(bwd, abs=0.01 * len(ops))


def test_the_op_record_is_the_cost() -> None:
    """Layer.cost's per-op record sums to the LayerCost it returns, op by op kind."""
    spec = load_preset("mixtral-8x7b")
    model = StepModel(Workload(spec, 4096, 64), cluster_for("H100-80GB"), framework("megatron"),
                      calibration())
    for sh in (Shard(1, 4096, 1, 1, 1, False), Shard(2, 4096, 4, 2, 8, True)):
        for g in model.layers:
            ops: list[OpTime] = []
            cost = g.cost(model.dev, sh, "cudnn", 1.0, ops)
            assert sum(o.fwd for o in ops) == pytest.approx(cost.fwd, rel=1e-12)
            assert sum(o.bwd for o in ops) == pytest.approx(cost.bwd, rel=1e-12)
            assert [o.fwd for o in ops if o.name.startswith("attention core")] == [
                pytest.approx(cost.attn_fwd, rel=1e-12)]
            assert cost == g.cost(model.dev, sh, "cudnn", 1.0)  # recording changes nothing


def test_models_with_layers_of_several_kinds_show_each() -> None:
    spec, sections = _sections(("gpt-oss-20b", "H100-80GB", 8, 32, 4096, "torchtitan"))
    kinds = [s.title for s in sections if s.title.startswith("One layer")]
    assert len(kinds) == 2 and all("12 of them" in k for k in kinds)


def test_a_gpu_is_needed() -> None:
    with pytest.raises(TcalcError, match="--topic step: expected --gpu"):
        explain(load_preset("gpt2"), "step")


def test_cli(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("explain", "llama-3.1-8b", "--topic", "step", "--gpu", "H100-80GB",
              "--gpus", "8", "--global-batch", "64", "--seq-len", "8192").stdout
    for text in ("The layout", "QKV projection", "attention core", "step time", "MFU"):
        assert text in out
    data = cli.json("explain", "llama-3.1-8b", "--topic", "step", "--gpu", "H100-80GB",
                    "--seq-len", "8192")
    assert data["topic"] == "step" and "one sequence per GPU" in data["sections"][0]["steps"][1][
        "text"]
    err = cli("explain", "gpt2", "--topic", "step", code=2).stderr
    assert err.strip().count("\n") == 0 and "--gpu" in err


def test_each_gemms_flops_are_its_shape() -> None:
    """A dense layer's GEMMs on one GPU (tp 1) do 2 FLOPs per weight per token: their sum is
    2 · t · the layer's parameters, as tcalc flops counts a layer's linear layers."""
    spec = load_preset("llama-3.1-8b")
    model = StepModel(Workload(spec, 4096, 64), cluster_for("H100-80GB"), framework("megatron"),
                      calibration())
    for t_seqs in (1, 3):
        ops: list[OpTime] = []
        cost = model.layers[0].cost(model.dev, Shard(t_seqs, 4096, 1, 1, 1, False), "cudnn",
                                    1.0, ops)
        gemms = [o for o in ops if " × " in o.shape and not o.name.startswith("attention")]
        assert len(gemms) == 4
        assert sum(o.flops for o in gemms) == 2 * t_seqs * 4096 * cost.params


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_recomputation_shown_is_the_step_models(recompute: str) -> None:
    from transformer_calc.planner.derivation import step_derivation

    spec = load_preset("llama-3.1-8b")
    sections = step_derivation(spec, gpus=8, global_batch=64, seq_len=4096, gpu="H100-80GB",
                               fixed={"recompute": recompute})
    first = next(s for s in sections if s.title.startswith("The step")).steps[0]
    inner = first.expr.split("(")[1].split(")")[0]
    fwd, _, redo = (float(v.replace(",", "")) for v in inner.split(" + "))
    assert redo == (fwd if recompute == "full" else 0.0)
