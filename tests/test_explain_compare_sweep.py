"""explain, compare and sweep."""

from __future__ import annotations

import json
import re

import pytest
from conftest import DATA, evaluate

from transformer_calc import count_params, load_model
from transformer_calc.explain import explain
from transformer_calc.flops import count_flops, training_flops_per_token
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import by_category

SNAPSHOTS = DATA / "snapshots"


@pytest.mark.parametrize("model", ["gpt2", "transformer-base"])
@pytest.mark.parametrize("topic", ["params", "memory", "flops"])
def test_explain_snapshot(cli, model: str, topic: str) -> None:
    # Regenerate after an intended change: tcalc explain MODEL --topic TOPIC > the file
    expected = (SNAPSHOTS / f"explain-{model}-{topic}.txt").read_text()
    assert cli("explain", model, "--topic", topic).stdout == expected


def test_explain_shows_the_q_example() -> None:
    lines = [s.render() for sec in explain(load_model("gpt2")) for s in sec.steps]
    assert ("Q: d_model × (n_heads · d_head) + n_heads · d_head = 768 × (12 · 64) + 12 · 64 "
            "= 590,592 params") in lines




def core_value(spec, ref: str, T: int):  # noqa: ANN001, ANN201 - test helper
    """Recompute, with the core's own API, the quantity a step says it shows."""
    p = count_params(spec)
    kind, _, arg = ref.partition(":")
    if ref == "params:total":
        return p.total
    if kind == "params":
        return p.get(arg).total
    if kind == "params-layer":
        return sum(p.get(n).count for n in arg.split(","))
    if kind == "params-layer-total":
        return p.layer_total(arg)
    if kind == "params-stack":
        return sum(i.total for i in p.items if i.stack == arg)
    if kind == "params-heads":
        # the model's own n_kv_heads held (None: MHA, following n_heads), so that
        # explain never turns GQA into MHA here and calls the changed total "unchanged"
        held = spec.kv_heads != spec.n_heads
        return count_params(spec.replace(n_heads=int(arg)) if held else
                            spec.replace(n_heads=int(arg), n_kv_heads=None)).total
    if kind == "params-count":
        return next(i.count for i in p.items if i.name.endswith(f"attn.{arg}.weight"))
    if kind == "params-category":
        return by_category(p)[arg]
    if ref == "params-ratio:ffn/attention":
        c = by_category(p)
        return c["ffn"] / c["attention"]
    if ref in ("rule", "rule-layer", "rule-error"):
        from transformer_calc.params import rule_of_thumb

        return {"rule": rule_of_thumb(spec), "rule-layer": 12 * spec.d_model ** 2,
                "rule-error": 100 * (rule_of_thumb(spec) - p.total) / p.total}[ref]
    if kind == "rule-gap":
        return rule_gap_parts(spec)[arg]
    if ref.startswith("tying-"):
        tied = count_params(spec.replace(tie_embeddings=True)).total
        untied = count_params(spec.replace(tie_embeddings=False)).total
        return {"head": spec.vocab_size * spec.embed_dim, "tied": tied, "untied": untied,
                "saving": untied - tied}[ref.removeprefix("tying-")]
    if ref == "params-mha-saving":
        return count_params(spec.replace(n_kv_heads=None)).total - p.total
    if kind == "spec":
        return getattr(spec, arg)
    if kind == "bpp-fp32-adamw":
        fp32 = memory_report(spec, Settings())
        if arg == "total":
            return 16
        return fp32.components.get(arg).total // p.total
    if ref == "memory-states":
        fp32 = memory_report(spec, Settings())
        return sum(i.total for i in fp32.components.items if i.name != "activations")
    mixed = memory_report(spec, Settings(precision="bf16", mixed=True, seq_len=T))
    if kind == "activation":
        return mixed.activations.get(arg).total
    if ref == "memory:activations":
        return mixed.activations.total
    if ref == "activation-square":
        return square_bytes(spec, T)
    if kind == "activation-share":
        acts = mixed.activations
        part = (sum(i.total for i in acts.items if i.name.startswith("loss.")) if arg == "loss"
                else square_bytes(spec, T))
        return 100 * part / acts.total
    if ref == "korthikanti":
        return mixed.korthikanti_per_layer
    if kind in ("kv-token", "kv-ratio"):
        return kv_bytes_per_token(spec, arg.split(":")[0] if kind == "kv-token" else "ratio")
    if kind == "attn-core":
        # from the papers' operation counts (independent of count_flops): dense
        # 4·H·dh·T; a local window 4·H·dh·w; Linformer 4·H·dh·k + 4·k·H_kv·dh (E·K, F·V);
        # Performer H·(8·m·dh + 2·m), m = int(dh · ln dh); linear H·(4·dh² + 2·dh)
        import math

        H, Hkv, dh = spec.n_heads, spec.kv_heads, spec.head_dim
        if arg == "dense":
            return 4 * H * dh * T
        if arg.startswith("local-"):
            return 4 * H * dh * min(T, int(arg[6:]))
        if arg == "linformer":
            return 4 * H * dh * 256 + 4 * 256 * Hkv * dh
        if arg == "performer":
            m = int(dh * math.log(dh))
            return H * (8 * m * dh + 2 * m)
        return H * (4 * dh * dh + 2 * dh)
    f = count_flops(spec, T)
    if ref == "flops:total":
        return f.total
    if ref == "flops:training":
        return training_flops_per_token(f)
    if ref == "flops:6N":
        return 6 * p.active_total
    if ref == "flops:6N-error":
        t = training_flops_per_token(f)
        return 100 * (6 * p.active_total - t) / t
    if kind == "flops":
        return f.get(arg).count
    raise KeyError(ref)


def rule_gap_parts(spec) -> dict[str, int]:  # noqa: ANN001 - test helper
    """exact − V·E − 12·L·E², split by the core's categories (by_category) and the rows' names:
    the decoder's cross-attention weights, the attention and FFN biases, and what the self-
    attention and FFN weights hold beyond 4·E² and 8·E² per layer."""
    from transformer_calc.params import category, rule_of_thumb

    p = count_params(spec)
    c = by_category(p)
    V, E, L = spec.vocab_size, spec.d_model, spec.total_layers
    biases = {k: sum(i.total for i in p.items if i.name.endswith(".bias") and
                     category(i.name) == k) for k in ("attention", "ffn")}
    cross = sum(i.total for i in p.items if ".cross." in f".{i.name}" and
                category(i.name) == "attention" and not i.name.endswith(".bias"))
    return {"total": p.total - rule_of_thumb(spec), "cross": cross,
            "biases": biases["attention"] + biases["ffn"], "norms": c["norms"],
            "heads": c["heads"], "mixers": c["mixers"], "embeddings": c["embeddings"] - V * E,
            "attention": c["attention"] - cross - biases["attention"] - 4 * L * E * E,
            "ffn": c["ffn"] - biases["ffn"] - 8 * L * E * E}


def square_bytes(spec, T: int) -> int:  # noqa: ANN001 - test helper
    """The saved tensors of T² size, found without reading formulas: the rows whose bytes grow
    fourfold (more than threefold: a row may add a linear part) from T / 2 to T (halved, not
    doubled: GPT-2's learned positions end at its T)."""
    def report(t: int):  # noqa: ANN202
        return memory_report(spec, Settings(precision="bf16", mixed=True, seq_len=t)).activations

    halved = {i.name: i.total for i in report(T // 2).items}
    return sum(i.total for i in report(T).items if i.total > 3 * halved.get(i.name, i.total))


def kv_bytes_per_token(spec, which: str) -> float:  # noqa: ANN001 - test helper
    """bf16 KV cache per token per layer from the spec's fields (not the plan): GQA/MQA
    2 · n_kv_heads · d_head, multi-head 2 · n_heads · d_head (MLA's heads: K of
    qk_nope + qk_rope, V of v_head_dim), MLA kv_lora_rank + qk_rope_head_dim."""
    H, dh = spec.n_heads, spec.head_dim
    mha = (H * (spec.qk_nope_head_dim + spec.qk_rope_head_dim + spec.v_head_dim) * 2 if spec.mla
           else 2 * H * dh * 2)
    this = ((spec.kv_lora_rank + spec.qk_rope_head_dim) * 2 if spec.mla
            else 2 * spec.kv_heads * dh * 2)
    return {"gqa": this, "mla": this, "mha": mha, "ratio": mha / this}[which]


# Unit words a shown expression may carry after a byte count or a layer count ("50,331,648
# bytes × 12 layers", "(a + b) bytes"); the arithmetic is what is left without them.
UNIT_WORDS = re.compile(r" (?:bytes|layers)\b")


def assert_numbers_are_the_cores(spec, topic: str) -> None:  # noqa: ANN001 - test helper
    T = spec.default_seq_len  # one default context for every command
    checked: list[str] = []
    for section in explain(spec, topic):
        for step in section.steps:
            if step.value is None:
                continue
            assert step.ref, step.label
            assert core_value(spec, step.ref, T) == pytest.approx(step.value), (
                section.title, step.label)
            # every written-out expression, evaluated on its own (independent arithmetic: the
            # numbers as shown, no core), every operator with its own precedence, not only
            # the divisions
            expr = UNIT_WORDS.sub("", step.expr)
            if expr and not any(c.isalpha() for c in expr):
                # a percentage shows its fraction: (a − b) / b = -0.73 %
                want = step.value / 100 if step.unit == "%" else step.value
                assert evaluate(expr) == pytest.approx(want, rel=1e-4), step.render()
                checked.append(expr)
    assert checked or topic == "embeddings", "no expression was checked"


@pytest.mark.parametrize("model", ["gpt2", "transformer-base", "llama-3-8b", "mixtral-8x7b",
                                   "t5-small"])
@pytest.mark.parametrize("topic", ["params", "attention", "ffn", "embeddings", "memory",
                                   "flops"])
def test_every_number_shown_is_the_cores(model: str, topic: str) -> None:
    assert_numbers_are_the_cores(load_model(model), topic)


@pytest.mark.parametrize(("model", "topic"), [
    ("bart-base", "params"), ("falcon-7b", "params"), ("falcon-7b", "attention"),
    ("deepseek-v3", "params"), ("deepseek-v3", "attention"), ("qwen2-0.5b", "attention"),
    ("gemma-2-9b", "memory")])
def test_every_number_shown_is_the_cores_gqa_mqa_mla(model: str, topic: str) -> None:
    # the rule's gap with cross-attention (BART), MQA (Falcon), MLA (DeepSeek-V3), GQA's cache,
    # and soft-capping's T² tensor (Gemma 2) among the T² rows
    assert_numbers_are_the_cores(load_model(model), topic)


def test_explain_formats(cli) -> None:
    data = json.loads(cli("explain", "gpt2", "--format", "json").stdout)
    assert data["schema"] == "tcalc.explain/1" and data["topic"] == "params"
    q = data["sections"][0]["steps"][0]
    assert (q["label"], q["value"]) == ("Q", 590_592)
    md = cli("explain", "gpt2", "--topic", "attention", "--format", "markdown").stdout
    assert md.startswith("# gpt2: attention") and "## why the head count" in md


def test_explain_gqa_and_explicit_d_head(cli) -> None:
    out = cli("explain", "llama-3-8b", "--topic", "attention").stdout
    assert "grouped-query" in out and "K/V heads: n_kv_heads = 8" in out
    wide = cli("explain", "gpt2", "--topic", "attention", "--d-head", "32").stdout
    assert "d_head is set explicitly" in wide


def test_explain_bad_topic(cli) -> None:
    assert "Invalid value for '--topic'" in cli("explain", "gpt2", "--topic", "x", code=2).stderr


def test_compare_values_and_differences(cli) -> None:
    data = cli.json("compare", "gpt2", "gpt2-medium", "llama-3-8b", "--mixed",
                    "--attention", "eager")
    assert data["schema"] == "tcalc.compare/1"
    assert data["models"] == ["gpt2", "gpt2-medium", "llama-3-8b"]
    rows = {r["metric"]: r for r in data["rows"]}
    total = rows["params: total"]
    assert total["values"] == [124_439_808, 354_823_168, 8_030_261_248]
    assert total["diff_vs_first"] == [0, 354_823_168 - 124_439_808, 8_030_261_248 - 124_439_808]
    settings = Settings(precision="bf16", mixed=True, seq_len=1024)
    medium = memory_report(load_model("gpt2-medium"), settings)
    assert rows["memory: sum of the components per GPU"]["values"][1] == medium.per_gpu.total
    # and the peak, the number to compare with a GPU, apart from the sum
    assert rows["memory: peak per GPU"]["values"][1] == medium.peak != medium.per_gpu.total
    assert rows["FLOPs/token forward (T=1024)"]["values"][0] == 284_812_800
    cats = sum(rows[f"params: {c}"]["values"][2] for c in
               ("embeddings", "attention", "ffn", "norms", "heads"))
    assert cats == 8_030_261_248
    table = cli("compare", "gpt2", "gpt2-medium").stdout
    assert "+230,383,360 (+185.1%)" in table
    md = cli("compare", "gpt2", "bert-base", "--format", "markdown").stdout
    assert md.startswith("## compare\n\n| metric | gpt2 | bert-base (Δ vs gpt2) |")


def test_compare_needs_two(cli) -> None:
    assert "at least two models" in cli("compare", "gpt2", code=2).stderr


def test_sweep_grid_and_fit_marks(cli) -> None:
    data = cli.json("sweep", "llama-3-8b", "--mixed", "--attention", "eager",
                    "--gpu", "H100-80GB", "--gpus", "8",
                    "--zero", "3", "--batch-size", "1,4,16", "--seq-len", "512,1024,2048")
    assert data["schema"] == "tcalc.sweep/1" and len(data["cells"]) == 9
    cell = {(c["batch_size"], c["seq_len"]): c for c in data["cells"]}
    for (b, t), c in cell.items():
        r = memory_report(load_model("llama-3-8b"),
                          Settings(precision="bf16", mixed=True, batch_size=b, seq_len=t,
                                   gpus=8, zero=3), gpu="H100-80GB")
        assert c["per_gpu_bytes"] == r.per_gpu.total and c["fits"] == r.fit.fits
    assert cell[(1, 512)]["fits"] is True and cell[(16, 2048)]["fits"] is False
    md = cli("sweep", "gpt2-medium", "--mixed", "--gpu", "RTX-4090", "--batch-size", "1,16",
             "--seq-len", "512", "--format", "markdown").stdout
    assert "✓" in md and "✗" in md and "where the memory goes at batch 16, seq 512" in md
    table = cli("sweep", "gpt2-medium", "--batch-size", "2", "--seq-len", "256").stdout
    assert "activations" in table and "█" in table


@pytest.mark.parametrize("value", ["a,b", "0,1", ""])
def test_sweep_bad_lists(cli, value: str) -> None:
    r = cli("sweep", "gpt2", "--batch-size", value, code=2)
    assert r.stderr.startswith("Error: --batch-size: expected integers")


def test_head_count_section_says_what_gqa_does() -> None:
    # Llama-3-8B: 8 K/V heads held, so 16 or 64 query heads change d_head and with it the K/V
    # width: the totals differ and the section must not claim they are unchanged.
    text = "\n".join(s.title for s in explain(load_model("llama-3-8b"), "params"))
    assert "leaves the parameters unchanged" not in text
    assert "why the head count changes the parameters" in text
    gpt2 = "\n".join(s.title for s in explain(load_model("gpt2"), "params"))
    assert "why the head count leaves the parameters unchanged" in gpt2


def test_head_count_section_with_explicit_mha_kv_heads() -> None:
    # OLMo-2 7B writes num_key_value_heads = num_attention_heads = 32 out: still MHA, so the K/V
    # heads follow the head count (holding them at 32 made an impossible spec at 1 head)
    spec = load_model("olmo-2-7b")
    text = "\n".join(s.title for s in explain(spec, "attention"))
    assert "why the head count leaves the parameters unchanged" in text


def test_every_model_types_default_explains_every_topic() -> None:
    # each record's default config through every topic: explain builds variants of the
    # model (another head count, untied, other attention mechanisms), which a record's own
    # fields may forbid (MiMo-V2-Flash's narrow V heads under linear attention raised)
    from transformer_calc.errors import TcalcError
    from transformer_calc.hf import HEAD_CLASS, spec_from_hf

    explained = 0
    for model_type in sorted(HEAD_CLASS):
        try:
            spec = spec_from_hf({"model_type": model_type})
        except TcalcError:
            continue  # a type whose class needs a key the default leaves out
        for topic in ("params", "attention", "ffn", "embeddings", "memory", "flops"):
            # (a cost the spec says it cannot give is refused with the spec's reason: a
            # forward that cannot run, FLOPs or saved activations not modelled)
            reasons = [r for r in (spec.unrunnable, spec.activations_unmodelled,
                                   spec.costs_unmodelled) if r]
            try:
                shown = explain(spec, topic, seq_len=min(64, spec.max_context or 64))
            except TcalcError as e:
                assert topic != "params" and reasons, (model_type, topic, e)
                assert any(r in str(e) for r in reasons) or (
                    str(e).startswith(f"{model_type}: ") and "not modelled" in str(e)), (
                    model_type, topic, e)
                continue
            assert shown, (model_type, topic)
        explained += 1
    assert explained >= 150


def test_square_share_counts_every_t2_tensor() -> None:
    # the share of the T² tensors counts the fp32 probabilities and the 16-bit copy of them
    # kept too (softmax_cast), not GPT-2's embedding
    # dropout mask (B·T·d_model, not T²) whatever its name, and T5's T·T bucket indices: it
    # reads the rows' formulas and names the rows it counts
    def steps(model: str) -> dict:  # type: ignore[type-arg]
        return {s.label: s for sec in explain(load_model(model), "memory") for s in sec.steps}

    mixtral = steps("mixtral-8x7b")
    assert mixtral["T² tensors"].text == "the rows decoder.attn.softmax, decoder.attn.softmax_cast"
    share = mixtral["share of the T² attention tensors"].value
    assert share == pytest.approx(100 * mixtral["T² tensors"].value
                                  / mixtral["all saved tensors"].value)
    assert 50 < share < 100  # the attention's square rows dominate, the rest is counted too
    gpt2 = steps("gpt2")
    assert gpt2["T² tensors"].text == ("the rows decoder.attn.softmax, decoder.attn.dropout_mask, "
                                       "decoder.attn.dropout_output")
    assert gpt2["T² tensors"].value == 1_056_964_608  # 1,057,751,040 less embed.dropout_mask
    assert "attn.relative_buckets" in steps("t5-small")["T² tensors"].text


@pytest.mark.parametrize("model", ["t5-small", "bart-base", "transformer-base"])
def test_rule_gap_of_an_encoder_decoder_is_its_cross_attention(model: str) -> None:
    # the 12·L·E² rule's gap is not biases and norms: for an encoder-decoder it is
    # mostly the decoder's cross-attention, 4·E² per decoder layer
    spec = load_model(model)
    p = count_params(spec)
    sections = explain(spec, "params")
    rule = next(s for s in sections if s.title.startswith("where the 12·L·E² rule"))
    assert "biases, norms" not in rule.steps[-1].text
    gap = next(s for s in sections if s.title.startswith("what the 12·L·E² rule misses"))
    parts = [s for s in gap.steps if s.ref.startswith("rule-gap:") and s.ref != "rule-gap:total"]
    layers = p.get("decoder.cross.q.weight").repeat
    assert parts[0].label == "cross-attention"
    assert parts[0].value == 4 * spec.d_model ** 2 * layers
    assert parts[0].render().startswith(f"cross-attention: Σ cross-attention Q, K, V, O weights = "
                                        f"{layers} × {4 * spec.d_model ** 2:,} = ")
    assert "4·E² per decoder layer" in parts[0].text
    assert parts[0].value > sum(abs(s.value) for s in parts[1:])  # most of the gap
    assert sum(s.value for s in parts) == gap.steps[0].value == p.total - (
        spec.vocab_size * spec.d_model + 12 * spec.total_layers * spec.d_model ** 2)


@pytest.mark.parametrize(("model", "topic"), [("gpt2", "memory"), ("t5-small", "memory"),
                                              ("llama-3-8b", "attention"),
                                              ("deepseek-v3", "attention")])
def test_every_byte_count_shown_has_its_unit(model: str, topic: str) -> None:
    # a result in bytes shows its binary size after it; a byte count inside the arithmetic
    # says "bytes" (the parameters times bytes per parameter are no byte counts)
    from transformer_calc.render.units import human_bytes

    shown = 0
    for sec in explain(load_model(model), topic):
        for st in sec.steps:
            if st.unit == "bytes" and st.value is not None and st.value >= 1024:
                assert f"{st.value:,} bytes ({human_bytes(st.value)})" in st.render()
                shown += 1
            if sec.title.startswith("what dominates activations") or st.ref.startswith("kv-"):
                rest = re.sub(r"\([\d,+ ]+\) bytes|[\d,]+ bytes", "", st.expr)
                assert not re.search(r"\d,\d", rest), st.render()
    assert shown


def test_gqa_mqa_and_mla_show_the_kv_cache_they_save(cli) -> None:
    from transformer_calc.plan import plan_of

    llama = cli("explain", "llama-3-8b", "--topic", "attention").stdout
    assert ("KV cache per token per layer: 2 · n_kv_heads · d_head · bytes = 2 · 8 · 128 · 2 = "
            "4,096 bytes (4.00 KiB)") in llama
    assert ("multi-head attention's, per token per layer: 2 · n_heads · d_head · bytes = "
            "2 · 32 · 128 · 2 = 16,384 bytes (16.00 KiB)") in llama
    assert "KV cache ratio: multi-head / this = 16,384 bytes / 4,096 bytes = 4.00" in llama
    assert plan_of(load_model("llama-3-8b")).groups[0].block.attn.kv_per_token() * 2 == 4096
    falcon = cli("explain", "falcon-7b", "--topic", "attention").stdout
    assert "multi-query attention: 1 K/V head for 71 query heads" in falcon
    assert "18,176 bytes / 256 bytes = 71.00" in falcon
    deepseek = cli("explain", "deepseek-v3", "--topic", "attention").stdout
    assert ("KV cache per token per layer: (kv_lora_rank + qk_rope_head_dim) · bytes = "
            "(512 + 64) · 2 = 1,152 bytes (1.12 KiB)") in deepseek
    assert "128 · (128 + 64 + 128) · 2 = 81,920 bytes (80.00 KiB)" in deepseek
    assert "81,920 bytes / 1,152 bytes = 71.11" in deepseek
    assert "KV cache" not in cli("explain", "gpt2", "--topic", "attention").stdout  # MHA
