"""LoRA over a quantised base through the op graph, against the CPU rows
tests/data/quantised_base_activations_cpu.jsonl (tools/measure_activations_hf.py --lora 8
--quant bnb-nf4 / bnb-int8: bitsandbytes 0.50.2, transformers 5.23, peft 0.21.2, torch 2.13
CPU; the base loaded by from_pretrained with a BitsAndBytesConfig, computed in the row's
dtype, 16- or 32-bit; what the saved-tensor hooks see plus what bitsandbytes' autograd
functions hold on ctx), and torchtune's torchao NF4 (ops.nf4_linear)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA

from transformer_calc.breakdown import Breakdown
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report

ROWS = [json.loads(line) for line in
        (DATA / "quantised_base_activations_cpu.jsonl").read_text().splitlines()]


def _graph(spec: Any, monkeypatch: pytest.MonkeyPatch, **kw: Any
           ) -> tuple[Any, Breakdown | None]:
    """memory_report, and what the op graph answered for its activations (None: the rules)."""
    import transformer_calc.costs.activations as activations

    seen: list[Breakdown | None] = []
    inner = activations.graph_activations

    def spy(*a: Any, **k: Any) -> Breakdown | None:
        seen.append(inner(*a, **k))
        return seen[-1]

    monkeypatch.setattr(activations, "graph_activations", spy)
    return memory_report(spec, Settings(**kw)), seen[-1]


def _spec(config: str) -> Any:
    path = DATA / "hf" / "variants" / config
    return spec_from_hf(json.loads(Path(path).read_text()), config)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "{config}-{quant}-{attention}-{dtype}"
                         .format(**r))
def test_the_graph_reproduces_the_quantised_rows(monkeypatch: pytest.MonkeyPatch,
                                                 row: dict[str, Any]) -> None:
    rank, targets, dropout = row["lora"]
    r, graph = _graph(_spec(row["config"]), monkeypatch,
                      precision="fp32" if row["dtype"] == "fp32" else "bf16",
                      batch_size=row["B"], seq_len=row["T"], attention=row["attention"],
                      device="cpu", lora_rank=rank, lora_targets=tuple(targets.split(",")),
                      lora_dropout=dropout, experts=row.get("experts", "eager"),
                      quant=row["quant"], use_cache=False,  # as the rows were measured
                      double_quant=row["quant"] == "bnb-int8")
    assert graph is not None and r.activations.total == graph.total == row["measured_bytes"]


def test_the_8bit_base_keeps_what_the_4bit_one_does_and_its_inputs() -> None:
    """The rows' own difference, bf16: MatMul8bitFp (the CPU's int8 path in training) holds
    each quantised linear's input on ctx, MatMul4Bit none. Falcon's layers are FalconLinear,
    a subclass replace_with_bnb_linear does not convert (type(module) is nn.Linear): its
    two bases keep the same (the rules counted 8-bit inputs there, 13.5 % over)."""
    by = {(r["config"], r["quant"], r["attention"], r["dtype"]): r["measured_bytes"]
          for r in ROWS}
    for config in ("llama-head-dim.json", "gemma-gqa.json", "falcon-new-rope.json"):
        int8, nf4 = by[config, "bnb-int8", "eager", "bf16"], by[config, "bnb-nf4", "eager", "bf16"]
        assert int8 == nf4 if config.startswith("falcon") else int8 > nf4
        # fp32 compute: the adapters read the input as it is, kept by lora_A already
        assert by[config, "bnb-int8", "eager", "fp32"] == by[config, "bnb-nf4", "eager", "fp32"]


def test_torchtune_nf4_keeps_no_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchtune's --qlora: torchao's LinearNF4 saves only the NF4 weight (a parameter), so
    the base keeps what a frozen bf16 nn.Linear does: the activations equal the same run
    over an unquantised base, and the graph answers both (ops.nf4_linear)."""
    spec = load_published("llama-3.2-1b.json")
    kw = {"recipe": "torchtune", "precision": "bf16", "mixed": False, "adapter_dtype": "bf16",
          "batch_size": 2, "seq_len": 512, "attention": "sdpa", "device": "cuda",
          "lora_rank": 16, "lora_targets": ("q_proj", "v_proj", "o_proj")}
    q, qgraph = _graph(spec, monkeypatch, quant="bnb-nf4", **kw)
    plain, pgraph = _graph(spec, monkeypatch, **kw)
    assert qgraph is not None and pgraph is not None
    assert q.activations.total == plain.activations.total == qgraph.total


def test_nf4_linear_is_one_op_that_saves_nothing() -> None:
    from transformer_calc.graph import Lora, Run, evaluate
    from transformer_calc.graph.families.llama import Llama
    from transformer_calc.graph.tensor import BF16

    fam = Llama(V=32, E=16, H=2, Hkv=2, dh=8, F=24, L=2)
    run = Run(2, 8, BF16, "cuda", "sdpa", lora=Lora(4, frozenset(("q_proj",)), dtype=BF16,
                                                     quant="nf4"))
    base = Run(2, 8, BF16, "cuda", "sdpa", lora=Lora(4, frozenset(("q_proj",)), dtype=BF16))
    got, want = evaluate(fam, run), evaluate(fam, base)
    assert got.activation_bytes == want.activation_bytes
    assert got.forward_flops == want.forward_flops
    # the seven projections of each layer, each one nf4_linear
    assert sum(o.op == "nf4_linear" for o in got.ops) == 7 * 2


def load_published(name: str) -> Any:
    from transformer_calc.presets import load_model

    return load_model(str(DATA / "published_memory" / name))
