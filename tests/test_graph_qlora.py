"""LoRA over a bitsandbytes base through the op graph (graph/ops.py bnb_matmul, graph/lora.py
adapted_bnb): each bitsandbytes autograd function one op keeping what its ctx keeps
(bitsandbytes/autograd/_functions.py: MatMul4Bit since 0.44 ctx.tensors = (None, B), before
0.44 (A, B); MatMul8bitLt (CAt, subA, A)), peft 0.21's Linear4bit/Linear8bitLt around it
(peft/tuners/lora/bnb.py: the input cast to the adapters' dtype only outside autocast).
The measured fixture is the H100's QLoRA runs (tests/data/peak_qlora_cuda_h100.json,
tools/measure_peak_cuda.py --lora 16 --quant bnb-nf4, bitsandbytes 0.50.2, peft 0.21.0)."""
from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import DATA
from test_lora_memory import LORA_MODELS

from transformer_calc.breakdown import Breakdown
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report

QLORA = json.loads((DATA / "peak_qlora_cuda_h100.json").read_text())


def _report(monkeypatch: pytest.MonkeyPatch, model: str, spec: Any = None, **kw: Any
            ) -> tuple[Any, Breakdown | None]:
    """memory_report, and what the op graph answered for its activations (None: the rules)."""
    import transformer_calc.costs.activations as activations

    seen: list[Breakdown | None] = []
    inner = activations.graph_activations

    def spy(*a: Any, **k: Any) -> Breakdown | None:
        seen.append(inner(*a, **k))
        return seen[-1]

    monkeypatch.setattr(activations, "graph_activations", spy)
    config, B, T = LORA_MODELS[model] if model else ("", 1, 256)
    settings = {"precision": "bf16", "batch_size": B, "seq_len": T, "attention": "sdpa",
                "device": "cuda", "lora_rank": 16, **kw}
    r = memory_report(spec or spec_from_hf(config), Settings(**settings))
    return r, seen[-1]


@pytest.mark.parametrize("run", QLORA["runs"], ids=lambda r: "{model}-{recipe}-{c}".format(
    c="checkpointing" if r["checkpointing"] else "stored", **r))
def test_the_graph_answers_the_h100_qlora_runs_within_3_percent(
        monkeypatch: pytest.MonkeyPatch, run: dict[str, Any]) -> None:
    r, graph = _report(monkeypatch, run["model"], mixed=run["recipe"] == "lora_amp_bf16",
                       quant="bnb-nf4", double_quant=False,
                       recompute="full" if run["checkpointing"] else "none")
    assert graph is not None and r.activations.total == graph.total
    measured = run["steps"][1]
    for phase in r.phases:
        got, want = phase.items.total, measured[f"{phase.name}_peak_mib"] * (1 << 20)
        assert abs(got - want) <= 0.03 * want, (phase.name, got, want)


def test_the_bitsandbytes_op_keeps_its_input_where_its_ctx_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """MatMul4Bit before 0.44 and MatMul8bitLt keep A whenever it needs a gradient: every
    quantised linear's bf16 input, but the first layer's q/k/v (the frozen embeddings need
    none), and o_proj's (the flash kernel's output, kept by it anyway: one storage).
    Compiled one after the other in one process: the compile cache tells them apart."""
    E, F, L, T = 4096, 14336, 32, LORA_MODELS["llama-3.1-8b"][2]
    inputs = T * 2 * (L * (E + F) + (L - 1) * E)
    kept = {}
    for quant, legacy in (("bnb-nf4", False), ("bnb-nf4", True), ("bnb-int8", False),
                          ("bnb-fp4", False)):
        r, graph = _report(monkeypatch, "llama-3.1-8b", batch_size=1, quant=quant,
                           bnb_legacy=legacy)
        assert graph is not None
        kept[quant, legacy] = r.activations
    new = kept["bnb-nf4", False]
    assert kept["bnb-nf4", True].total - new.total == inputs
    assert kept["bnb-int8", False].total - new.total == inputs
    assert kept["bnb-fp4", False].total == new.total
    rows = {row[0]: row[4] for row in kept["bnb-int8", False].rows}
    assert (rows["decoder.attn.input"], rows["decoder.ffn.input"],
            rows["decoder.ffn.out_input"]) == (L - 1, L, L)
    assert "decoder.attn.input" not in {row[0] for row in new.rows}


def test_peft_bnb_layers_read_the_input_as_it_is_under_autocast(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """peft's Linear4bit: requires_conversion = not torch.is_autocast_enabled(): under
    autocast the adapters read the bf16 input itself (no fp32 copy, no lora_input row); outside
    it each adapter keeps its fp32 cast, B·T·in · 4."""
    T = LORA_MODELS["llama-3.2-1b"][2]
    _, mixed = _report(monkeypatch, "llama-3.2-1b", batch_size=1, quant="bnb-nf4", mixed=True)
    _, plain = _report(monkeypatch, "llama-3.2-1b", batch_size=1, quant="bnb-nf4")
    assert mixed is not None and plain is not None
    casts = {row[0]: row[1] for row in plain.rows if row[0].endswith(".lora_input")}
    assert casts["decoder.attn.q.lora_input"] == T * 2048 * 4
    assert casts["decoder.ffn.out.lora_input"] == T * 8192 * 4
    assert not any(row[0].endswith(".lora_input") for row in mixed.rows)


@pytest.mark.parametrize("kw", [{"quant": "gptq"},
                                {"quant": "bnb-int8", "recompute": "full"},
                                {"bnb_legacy": True, "recompute": "full"}],
                         ids=["gptq", "int8-checkpointed", "legacy-checkpointed"])
def test_what_the_graph_does_not_model_keeps_the_rules(
        monkeypatch: pytest.MonkeyPatch, kw: dict[str, Any]) -> None:
    settings = {"quant": "bnb-nf4", "batch_size": 1, **kw}
    _, graph = _report(monkeypatch, "llama-3.2-1b", **settings)
    assert graph is None


@pytest.mark.parametrize("kw", [{"lightning_bnb": True}, {"precision": "fp32"},
                                {"adapter_dtype": "bf16"},
                                {"lightning_bnb": True, "bnb_legacy": True},
                                {"lightning_bnb": True, "quant": "bnb-int8"}],
                         ids=["lightning-4bit", "fp32-compute", "bf16-adapters",
                              "lightning-legacy", "lightning-int8"])
def test_the_graph_answers_every_compute_and_adapter_dtype(
        monkeypatch: pytest.MonkeyPatch, kw: dict[str, Any]) -> None:
    """A 32-bit compute dtype and 16-bit adapters are the graph's dtypes (the CPU rows of
    tests/test_graph_quant.py measure fp32 compute); Lightning's 4-bit head since 0.44 keeps
    nothing a plain frozen head does not."""
    settings = {"quant": "bnb-nf4", "batch_size": 1, **kw}
    r, graph = _report(monkeypatch, "llama-3.2-1b", **settings)
    assert graph is not None and r.activations.total == graph.total


def test_lightning_quantises_the_head_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's BitsandbytesPrecision replaces the LM head as well (Builder.head): before
    bitsandbytes 0.44 its MatMul4Bit keeps the head's bf16 input, B·T·E·2 (the final norm's
    output, kept by nothing else), which transformers' unquantised head does not; since 0.44
    the two keep the same."""
    E, T = 2048, LORA_MODELS["llama-3.2-1b"][2]
    got = {}
    for lightning in (False, True):
        for legacy in (False, True):
            r, graph = _report(monkeypatch, "llama-3.2-1b", batch_size=1, quant="bnb-nf4",
                               lightning_bnb=lightning, bnb_legacy=legacy)
            assert graph is not None
            got[lightning, legacy] = r.activations.total
    assert got[True, True] - got[False, True] == T * E * 2
    assert got[True, False] == got[False, False]


def test_gemma_bitsandbytes_bases_through_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 2 (the Hub's gemma-2-2b config, eager): every linear but the head quantised; the
    8-bit base keeps what the 4-bit one does plus each quantised linear's bf16 input (the
    first layer's q/k/v input needs no gradient; o_proj's, the heads' output made contiguous,
    n_heads·d_head = 2048 wide, in every layer)."""
    from transformer_calc.presets import load_model

    spec = load_model(str(DATA / "published_memory" / "gemma-2-2b.json"))
    E, F, L, T = 2304, 9216, 26, 256
    got = {}
    for quant in ("bnb-nf4", "bnb-int8"):
        r, graph = _report(monkeypatch, "", spec, quant=quant, attention="eager")
        assert graph is not None
        got[quant] = r.activations.total
    assert got["bnb-int8"] - got["bnb-nf4"] == T * 2 * (L * (E + F + 2048) + (L - 1) * E)


def test_compiled_equals_traced_on_random_qlora_draws() -> None:
    """The compile cache under a quantised base: compiled against traced on 16 random
    Llama configurations with each base, Lightning's quantised head among them
    (graph_rows.cache_hits_on_random_draws)."""
    import random

    from graph_rows import cache_hits_on_random_draws

    from transformer_calc.graph.families.llama import Llama
    from transformer_calc.graph.lora import Lora
    from transformer_calc.graph.modules import Run
    from transformer_calc.graph.tensor import BF16

    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def draw(rng: random.Random) -> tuple[Llama, Run]:
        Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
        fam = Llama(V=rng.randint(5, 40), E=rng.randint(1, 32), H=Hkv * G, Hkv=Hkv,
                    dh=rng.choice((2, 4, 8)), F=rng.randint(1, 24), L=rng.choice((1, 2)),
                    tied=rng.random() < 0.5)
        targets = frozenset(("all-linear",)) if rng.random() < 0.4 else frozenset(
            rng.sample(names, rng.choice((1, 2))))
        quant = rng.choice(("4bit", "4bit-legacy", "int8", "nf4"))
        lora = Lora(rng.choice((1, 2, 8)), targets, rng.choice((0.0, 0.05)),
                    BF16 if quant == "nf4" else None, quant=quant,
                    head=quant.startswith("4bit") and rng.random() < 0.5)
        return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 7, 33)), BF16, "cuda",
                        rng.choice(("eager", "sdpa")), autocast=rng.choice((None, BF16)),
                        lora=lora, recompute=rng.choice(("none", "selective", "full")))

    assert cache_hits_on_random_draws(draw, 20260611, 16) >= 1
