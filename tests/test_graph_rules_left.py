"""Runs of model types already on the op graph that the old rules answered: LoRA over a
bitsandbytes base of T5, mT5 and UMT5 (their wo left unquantised), LongT5 (8-bit), BART,
DeepSeek-V3's experts and gpt-oss, against tests/data/quantised_base_more_activations_cpu.jsonl
and the T5 rows of tests/data/quantised_base_activations_cpu.jsonl
(tools/measure_activations_hf.py --lora 8 --quant bnb-nf4 / bnb-int8: bitsandbytes 0.50.2,
transformers 5.23, peft 0.21.2, torch 2.13 CPU; the commands are in the tool's docstring)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import DATA
from graph_rows import assert_compiled_equals_traced, every_row, spec_of

from transformer_calc.breakdown import Breakdown
from transformer_calc.memory import Settings, memory_report

# (the T5 rows of quantised_base_activations_cpu.jsonl: tests/test_graph_quant.py)
QUANTISED = [json.loads(line) for line in
             (DATA / "quantised_base_more_activations_cpu.jsonl").read_text().splitlines()]
# one row of each config in the fast suite (each row traces a structure of its own, ~1 s):
# 8-bit in bf16, where the bases differ most (MatMul8bitFp keeps its input)
FAST = [r for r in QUANTISED if (r["quant"], r["attention"], r["dtype"]) ==
        ("bnb-int8", "eager", "bf16")]


def _quantised_settings(row: dict[str, Any], **more: Any) -> Settings:
    rank, targets, dropout = row["lora"]
    fields: dict[str, Any] = dict(
        precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
        attention=row["attention"], device="cpu", lora_rank=rank,
        lora_targets=tuple(targets.split(",")), lora_dropout=dropout,
        experts=row.get("experts", "eager"), quant=row["quant"],
        use_cache=False,  # as the rows were measured
        double_quant=row["quant"] == "bnb-int8")
    return Settings(**{**fields, **more})


def _graph_answer(monkeypatch: pytest.MonkeyPatch, spec: Any, s: Settings
                  ) -> tuple[int, Breakdown | None]:
    """memory_report's activations, and what the op graph answered (None: the rules)."""
    import transformer_calc.costs.activations as activations

    seen: list[Breakdown | None] = []
    inner = activations.graph_activations

    def spy(*a: Any, **k: Any) -> Breakdown | None:
        seen.append(inner(*a, **k))
        return seen[-1]

    with monkeypatch.context() as mp:
        mp.setattr(activations, "graph_activations", spy)
        total = memory_report(spec, s).activations.total
    return total, seen[-1]


def _check(monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, Any]]) -> None:
    def check(row: dict[str, Any]) -> None:
        total, graph = _graph_answer(monkeypatch, spec_of(row["config"]),
                                     _quantised_settings(row))
        assert graph is not None, "the rules answered"
        assert total == graph.total == row["measured_bytes"], \
            f"measured {row['measured_bytes']:,}, got {total:,}"

    every_row(rows, check, lambda r: "{config}-{quant}-{attention}-{dtype}".format(**r))


def test_the_graph_reproduces_a_quantised_row_of_each_config(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A row of each config to the byte, through memory_report, answered by the graph. T5's
    wo is one of T5ForConditionalGeneration's _keep_in_fp32_modules, which
    replace_with_bnb_linear leaves out: a plain nn.Linear under peft's lora.Linear, in the
    model's dtype (transformers 5.23 upcasts those modules for fp16 only)."""
    assert {r["config"] for r in FAST} == {r["config"] for r in QUANTISED} >= {
        "t5-big-vocab.json", "bart-asymmetric.json", "deepseek_v3-no-q-lora-bias.json",
        "gpt_oss-tied-nobias.json", "umt5-tiny.json", "longt5-tglobal.json"}
    _check(monkeypatch, FAST)


@pytest.mark.slow
def test_the_graph_reproduces_every_quantised_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of the fixture (eager and SDPA, fp32 and bf16, 4- and 8-bit)."""
    _check(monkeypatch, [r for r in QUANTISED if r not in FAST])


def test_t5s_wo_is_no_bitsandbytes_layer() -> None:
    """The graph's T5 over a quantised base: every linear a bitsandbytes matmul but wo
    (and the LM head), wo adapted as peft's lora.Linear. Over an 8-bit base in bf16 that is
    wo's input, (B, T, F) per layer, which MatMul8bitFp would have kept on ctx: the
    difference between the measured T5 row and a graph that quantised wo too."""
    from transformer_calc.costs.activations import _family
    from transformer_calc.graph import Lora, Run, evaluate
    from transformer_calc.graph.tensor import BF16

    fam = _family(spec_of("t5-gated-asym.json"))  # d_ff 512, 3 + 1 layers
    assert fam is not None
    lora = Lora(8, frozenset(("all-linear",)), quant="int8")
    kept = Lora(8, frozenset(("all-linear",)), quant="int8", unconverted=frozenset(("wo",)))
    every = evaluate(fam, Run(2, 64, BF16, "cpu", "eager", lora=lora))
    left = evaluate(fam, Run(2, 64, BF16, "cpu", "eager", lora=kept))
    assert sum(o.op == "bnb_matmul" for o in every.ops) \
        - sum(o.op == "bnb_matmul" for o in left.ops) == 4
    assert every.activation_bytes - left.activation_bytes == 4 * 2 * 64 * 512 * 2
    rows = map(json.loads, (DATA / "quantised_base_activations_cpu.jsonl").read_text()
               .splitlines())
    row = next(r for r in rows if (r["config"], r["quant"], r["attention"], r["dtype"]) ==
               ("t5-gated-asym.json", "bnb-int8", "eager", "bf16"))
    assert left.activation_bytes == row["measured_bytes"]


def test_a_kept_linear_under_fp16_is_left_to_the_rules(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """Under an fp16 model transformers loads T5's wo in fp32 (_keep_in_fp32_modules), a
    second dtype the graph's one model dtype does not say: the rules answer."""
    row = next(r for r in QUANTISED if r["config"] == "t5-big-vocab.json")
    _, graph = _graph_answer(monkeypatch, spec_of(row["config"]),
                             _quantised_settings(row, precision="fp16"))
    assert graph is None


# peft's LoRA of the paper's Transformer: tests/data/lora_activations_nn_transformer_cpu.jsonl,
# written by tools/measure_activations_nn_transformer.py (torch 2.13 CPU, peft 0.21.2):
#     --lora 8 -B 2 -T 16
#     --lora 8 --d 48 --heads 3 --ff 80 --layers 1 -B 1 -T 24 --dropout 0.0
#     --lora 4 --lora-targets linear1,linear2 --lora-dropout 0.05 -B 2 -T 16
#     --lora 8 --lora-targets self_attn,multihead_attn -B 2 -T 16
#     --lora 8 --autocast -B 2 -T 16
PAPER_LORA = [json.loads(line) for line in
              (DATA / "lora_activations_nn_transformer_cpu.jsonl").read_text().splitlines()]
# peft's module names as tcalc's LoRA targets (roles): nn.MultiheadAttention is qkv and o
TCALC_TARGETS = {"self_attn,multihead_attn,linear1,linear2": ("all-linear",),
                 "linear1,linear2": ("up", "down"), "self_attn,multihead_attn": ("qkv", "o")}


def _paper_spec(row: dict[str, Any]) -> Any:
    from dataclasses import replace

    from transformer_calc.presets import load_model

    return replace(load_model("transformer-base"), vocab_size=row["vocab"],
                   d_model=row["d_model"], n_heads=row["heads"], d_ff=row["d_ff"],
                   n_encoder_layers=row["layers"], n_decoder_layers=row["layers"],
                   dropout=row["dropout"])


def test_paper_lora_rows_through_memory_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """peft adapts nn.MultiheadAttention whole (lora.MultiheadAttention merges the adapters
    into in_proj_weight and out_proj.weight for the forward: the merged weights are saved,
    graph/families/paper.py _merged) and linear1, linear2 as lora.Linear; every row without
    autocast through memory_report, answered by the graph, to the byte, with peft's count of
    the adapters' parameters."""
    rows = [r for r in PAPER_LORA if "autocast" not in r]
    assert {r["lora"][1] for r in rows} == set(TCALC_TARGETS)

    def check(row: dict[str, Any]) -> None:
        rank, targets, dropout = row["lora"]
        s = Settings(precision=row["dtype"], batch_size=row["B"], seq_len=row["T"],
                     attention="sdpa", device="cpu", lora_rank=rank,
                     lora_targets=TCALC_TARGETS[targets], lora_dropout=dropout)
        total, graph = _graph_answer(monkeypatch, _paper_spec(row), s)
        assert graph is not None, "the rules answered"
        assert total == row["measured_bytes"], f"measured {row['measured_bytes']:,}, got {total:,}"
        assert memory_report(_paper_spec(row), s).trainable_params == row["trainable"]

    every_row(rows, check, lambda r: "{dtype}-{d_model}-{lora}".format(**r))


def test_paper_lora_under_cpu_autocast() -> None:
    """An fp32 model under torch.autocast("cpu", torch.bfloat16): every storage saved,
    autocast's 16-bit copies of the adapters and of the merged weights among them, and the
    cast of the attention's 16-bit output back to the query's fp32 (lora.MultiheadAttention
    .forward: result[0].to(previous_dtype)), which dropout then reads in fp32."""
    from transformer_calc.graph import DTYPES, Lora, Run, evaluate, family_of

    rows = [r for r in PAPER_LORA if "autocast" in r]
    assert rows
    for row in rows:
        rank, targets, dropout = row["lora"]
        run = Run(row["B"], row["T"], DTYPES["fp32"], "cpu", "sdpa", autocast=DTYPES["bf16"],
                  lora=Lora(rank, frozenset(targets.split(",")), dropout))
        got = evaluate(family_of(_paper_spec(row)), run)
        assert sum(s.nbytes for s in got.saved) == row["measured_bytes"]
        assert got.trainable_params == row["trainable"]


def test_paper_lora_of_one_attention_projection_is_refused() -> None:
    """peft adapts nn.MultiheadAttention's in_proj and out_proj together (no module name
    gives one of them): targets naming only one are refused in one line."""
    from transformer_calc.costs.activations import _paper_lora
    from transformer_calc.errors import TcalcError
    from transformer_calc.presets import load_model

    for targets in (("qkv",), ("o", "up")):
        with pytest.raises(TcalcError, match="nn.MultiheadAttention, which peft adapts whole"):
            memory_report(load_model("transformer-base"),
                          Settings(lora_rank=8, lora_targets=targets, precision="bf16"))
    s = Settings(lora_rank=8, lora_targets=("qkv", "o", "down"))
    lora = _paper_lora(s, frozenset(("qkv", "o", "down")))
    assert lora is not None and lora.targets == {"self_attn", "multihead_attn", "linear2"}


def _paper_draw(rng: Any) -> tuple[Any, Any]:
    from transformer_calc.graph import DTYPES, Lora, Run
    from transformer_calc.graph.families.paper import Paper

    H = rng.choice((1, 2, 4))
    fam = Paper(V=rng.choice((16, 40)), E=H * rng.choice((2, 8)), H=H,
                F=rng.choice((8, 24)), Le=rng.choice((1, 2)), Ld=rng.choice((1, 2)),
                dropout=rng.choice((0.0, 0.1)))
    targets = rng.choice((("self_attn", "multihead_attn", "linear1", "linear2"),
                          ("self_attn", "multihead_attn"), ("linear2",)))
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 5, 16)),
                    DTYPES[rng.choice(("fp32", "bf16"))], "cpu", "sdpa",
                    lora=Lora(rng.choice((2, 8)), frozenset(targets)),
                    recompute=rng.choice(("none", "full")))


def test_paper_lora_compiled_equals_traced_on_random_draws() -> None:
    from graph_rows import cache_hits_on_random_draws

    assert cache_hits_on_random_draws(_paper_draw, seed=11, draws=12) > 0


# --attention flash (transformers 5.23's flash_attention_2, graph/flash.py; unmeasured: no
# GPU run, the kernel's saved set pinned to flash-attn's source in tests/test_graph_flash.py)
@pytest.mark.parametrize(("config", "T"), [
    ("ctrl-tiny.json", 64), ("falcon_h1-tiny.json", 64),
    # Beam's sliding layers (window 32) keep no mask under SDPA while the keys fit in it
    ("beam-tiny.json", 16)])
def test_flash_differs_from_sdpas_flash_kernel_by_the_rng_state(config: str, T: int) -> None:
    """CTRL, Beam and Falcon-H1 call transformers' attention interface (their flash branch):
    where SDPA on CUDA runs its flash kernel (16-bit, no mask) flash_attention_2 keeps what
    it keeps but FlashAttnFunc's (2,) int64 RNG state per layer."""
    from transformer_calc.costs.activations import _family
    from transformer_calc.graph import Run
    from transformer_calc.graph.names import by_name, component_rows
    from transformer_calc.graph.tensor import BF16

    fam = _family(spec_of(config))
    assert fam is not None
    flash = by_name(component_rows(fam, Run(2, T, BF16, "cuda", "flash")))
    sdpa = by_name(component_rows(fam, Run(2, T, BF16, "cuda", "sdpa")))
    rng = {n: flash.pop(n) for n in list(flash) if n.endswith("rng_state")}
    assert sum(rng.values()) == 16 * fam.L  # type: ignore[union-attr]
    assert flash == sdpa


def test_beams_sliding_layers_are_the_kernels_window() -> None:
    """Past the window (T 64 > 32) the sliding layers keep no mask either: the kernel's
    window_size, as flash_attention_2 is called with sliding_window=self.sliding_window;
    what the kernel keeps does not grow with the window (q, k, v, out, log-sum-exp)."""
    from transformer_calc.costs.activations import _family
    from transformer_calc.graph import Run, evaluate
    from transformer_calc.graph.tensor import BF16

    fam = _family(spec_of("beam-tiny.json"))
    assert fam is not None
    got = evaluate(fam, Run(2, 64, BF16, "cuda", "flash"))
    calls = [o for o in got.ops if o.op == "FlashAttnFunc"]
    assert len(calls) == fam.L  # type: ignore[union-attr]
    assert not any("mask" in s.storage.name for s in got.saved if s.storage.name)
    # each sliding layer's queries meet 32 keys, not 64: fewer FLOPs than a window of T
    from dataclasses import replace

    wide = evaluate(replace(fam, window=64), Run(2, 64, BF16, "cuda", "flash"))
    assert got.forward_flops < wide.forward_flops
    assert got.activation_bytes == wide.activation_bytes


def test_flash_on_a_class_of_another_kernel_is_refused() -> None:
    """gpt-oss, Flint, Granite SWA and GraniteMoeSWA (attention sinks) list their flash
    kernels (_compatible_flash_implementations, hf_defaults.FLASH_KERNELS) without
    flash_attention_2: from_pretrained runs kernels-community/vllm-flash-attn3 for it, a
    kernel tcalc does not transcribe: refused in one line."""
    from transformer_calc.errors import TcalcError
    from transformer_calc.hf_defaults import FLASH_KERNELS
    from transformer_calc.presets import load_model

    assert {"gpt_oss", "flint", "granite_swa", "granitemoe_swa"} <= FLASH_KERNELS.keys()
    for spec in (load_model("gpt-oss-20b"), spec_of("granitemoe_swa-tiny.json")):
        with pytest.raises(TcalcError, match="vllm-flash-attn3, a kernel tcalc does not model"):
            memory_report(spec, Settings(attention="flash", precision="bf16", seq_len=64))


@pytest.mark.parametrize(("config", "heads"), [
    # (H query heads, K/V heads as FlashAttnFunc gets them: not repeated)
    ("gptj-tiny.json", (8, 8)), ("gpt_neo-local.json", (2, 2)),
    # (Falcon's new decoder architecture: _split_heads broadcasts K/V over the query heads,
    # num_kv_heads = num_heads)
    ("falcon-new-rope.json", (8, 8)), ("falcon-multi-query.json", (8, 1)),
    ("ctrl-tiny.json", (4, 4)), ("falcon_h1-tiny.json", (4, 2))])
def test_flash_attention_2_classes_keep_the_kernels_set(config: str,
                                                        heads: tuple[int, int]) -> None:
    """GPT-J's, GPT-Neo's and Falcon's FlashAttention2 modules (GPTJFlashAttention2,
    GPTNeoFlashAttention2, FalconFlashAttention2: Q, K, V as (B, T, H, dh), then
    _flash_attention_forward, no mask built without padding), CTRL's and Falcon-H1's
    interface call: per layer Q, K and V in the kernel (16-bit), its output, the (B, H, T)
    fp32 log-sum-exp and the (2,) int64 RNG state, no mask; a local GPT-Neo layer's window
    is not passed (every layer attends to all earlier tokens)."""
    from transformer_calc.costs.activations import _family
    from transformer_calc.graph import Run
    from transformer_calc.graph.names import by_name, component_rows
    from transformer_calc.graph.tensor import BF16

    fam = _family(spec_of(config))
    assert fam is not None
    B, T, L, d = 2, 64, fam.L, fam.sizes()["dh"]  # type: ignore[union-attr]
    H, Hkv = heads
    rows = by_name(component_rows(fam, Run(B, T, BF16, "cuda", "flash")))
    qkv = rows["decoder.attn.qkv"] + rows.get("decoder.attn.qk_rotated", 0)
    assert qkv == L * B * T * (H + 2 * Hkv) * d * 2
    assert rows["decoder.attn.out"] == L * B * T * H * d * 2
    assert rows["decoder.attn.logsumexp"] == L * B * H * T * 4
    assert rows["decoder.attn.rng_state"] == L * 16
    assert not any(".mask" in n or n.endswith("scores") for n in rows)
    assert_compiled_equals_traced(fam, Run(B, T, BF16, "cuda", "flash"))


def test_flash_on_falcon_with_alibi_is_refused() -> None:
    """FalconFlashAttention2.forward raises ValueError("`alibi` is not supported when
    `use_flash_attn` is True")."""
    from transformer_calc.errors import TcalcError

    with pytest.raises(TcalcError, match="FalconFlashAttention2 raises for ALiBi"):
        memory_report(spec_of("falcon-alibi-new-1ln.json"),
                      Settings(attention="flash", precision="bf16", seq_len=64))


def test_diffllamas_two_flash_calls() -> None:
    """DiffLlamaAttention calls the interface twice, Q and K shared, over V's halves each
    repeated to the K/V heads (v.repeat(1, 2, 1, 1): new tensors): the kernel keeps Q, K
    and both halves, and per call its output, log-sum-exp and RNG state."""
    from transformer_calc.costs.activations import _family
    from transformer_calc.graph import Run
    from transformer_calc.graph.names import by_name, component_rows
    from transformer_calc.graph.tensor import BF16

    fam = _family(spec_of("diffllama-tiny.json"))  # 2 layers, H 4, Hkv 2, dh 16
    assert fam is not None
    B, T, L, H, Hkv, d = 2, 64, 2, 4, 2, 16
    run = Run(B, T, BF16, "cuda", "flash")
    rows = by_name(component_rows(fam, run))
    assert rows["decoder.attn.qkv"] == L * B * T * (H + Hkv + 2 * Hkv) * d * 2
    assert rows["decoder.attn.out"] == 2 * L * B * T * H * d * 2
    assert rows["decoder.attn.logsumexp"] == 2 * L * B * H * T * 4
    assert rows["decoder.attn.rng_state"] == 2 * L * 16
    assert_compiled_equals_traced(fam, run)
