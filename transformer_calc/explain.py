"""explain: the derivation step by step, formula first, then the numbers, then the result.

Every number comes from the core (count_params, memory_report, count_flops): items carry
their formula and the same with numbers substituted, and this module only composes them.
Each step names the core quantity it shows (``ref``) so tests can recompute it independently.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer_calc.breakdown import Breakdown, Item
from transformer_calc.choices import TOPICS
from transformer_calc.errors import SpecError
from transformer_calc.params import (
    RULE_OF_THUMB,
    by_category,
    count_params,
    rule_of_thumb,
    token_table,
)
from transformer_calc.spec import ModelSpec


@dataclass(frozen=True)
class Step:
    label: str
    formula: str = ""
    expr: str = ""
    value: int | float | None = None
    unit: str = ""
    ref: str = ""  # "params:<prefix>", "params:total", "memory:<component>", ... (for tests)
    text: str = ""  # a sentence; its numbers come from the values above it

    def render(self) -> str:
        parts = [self.formula] if self.formula else []
        repeats_value = self.value is not None and self.expr.replace(",", "") == str(self.value)
        if self.expr and self.expr != self.formula and not repeats_value:
            parts.append(self.expr)
        if self.value is not None:
            parts.append(fmt(self.value) + (f" {self.unit}" if self.unit else ""))
        line = f"{self.label}: " + " = ".join(parts) if parts else self.label
        return line + (f"  ({self.text})" if self.text and parts else
                       (f": {self.text}" if self.text else ""))


@dataclass(frozen=True)
class Section:
    title: str
    steps: tuple[Step, ...]


def fmt(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}"


def explain(spec: ModelSpec, topic: str = "params", *, batch_size: int = 1,
            seq_len: int | None = None) -> list[Section]:
    from transformer_calc.errors import TcalcError

    if topic not in TOPICS:
        raise TcalcError(f"--topic: expected one of {', '.join(TOPICS)}, got '{topic}'")
    T = seq_len or spec.default_seq_len
    b = count_params(spec)
    if topic == "params":
        return (_layers(spec, b) + _embeddings(spec, b) + [_total(b)] + _heads_invariance(spec, b)
                + [_attention_vs_ffn(spec, b), _rule(spec, b), _tying(spec, b)])
    if topic == "attention":
        return (_layers(spec, b, only=("attn", "cross")) + _heads_invariance(spec, b)
                + _kv_heads(spec, b) + [_attention_vs_ffn(spec, b)] + _efficient(spec, T))
    if topic == "ffn":
        return _layers(spec, b, only=("ffn",)) + [_attention_vs_ffn(spec, b)]
    if topic == "embeddings":
        return _embeddings(spec, b) + [_tying(spec, b)]
    if topic == "memory":
        return _memory(spec, batch_size, T)
    return _flops(spec, T)


# -- parameters ----------------------------------------------------------------------------

def _pair(items: list[Item], label: str) -> Step:
    """A weight and its bias as one step: 'Q: d × (h·d_h) + h·d_h = ... = 590,592'."""
    return Step(label, " + ".join(i.formula for i in items), " + ".join(i.expr for i in items),
                sum(i.count for i in items), "params",
                ref="params-layer:" + ",".join(i.name for i in items))


LABELS = {"q": "Q", "k": "K", "v": "V", "o": "O (output projection)", "in": "FFN in",
          "gate": "FFN gate", "out": "FFN out", "router": "router"}


def _layers(spec: ModelSpec, b: Breakdown, only: tuple[str, ...] = ()) -> list[Section]:
    sections = []
    for stack in b.stacks:
        items = [i for i in b.items if i.stack == stack]
        groups: dict[str, list[Item]] = {}
        for i in items:
            parts = i.name[len(stack) + 1:].split(".")  # drop the group (stack) id
            if only and parts[0] not in only:
                continue
            # attn.q.weight / attn.q.bias -> "attn.q"; ffn.experts.in.weight -> "ffn.experts.in"
            key = ".".join(parts[:-1]) if parts[-1] in ("weight", "bias") else ".".join(parts)
            groups.setdefault(key, []).append(i)
        steps = []
        for key, group in groups.items():
            last = key.split(".")[-1]
            label = LABELS.get(last, last)
            if key.startswith("cross."):
                label = f"cross-attention {label}"
            if ".experts." in f".{key}.":
                label = f"experts' {label}"
            if key.endswith("norm"):
                label = key.replace(".", " ").replace("_", " ")
            steps.append(_pair(group, label))
        if not only:
            n = items[0].repeat
            one = b.layer_total(stack)
            steps.append(Step("one layer", "sum of the above", "", one, "params",
                              ref=f"params-layer-total:{stack}"))
            steps.append(Step(f"{n} layers", f"{n} × one layer", f"{n} × {one:,}", n * one,
                              "params", ref=f"params-stack:{stack}"))
        if steps:
            title = f"{stack} layer" if "." not in stack else \
                f"{stack.split('.')[0]} layer, {stack.split('.', 1)[1]} kind"
            sections.append(Section(title, tuple(steps)))
    return sections


def _embeddings(spec: ModelSpec, b: Breakdown) -> list[Section]:
    steps = [Step(i.name, i.formula, i.expr, i.total, "params", ref=f"params:{i.name}",
                  text=i.note) for i in b.items if not i.stack and not i.name.endswith(
                      "final_norm")]
    return [Section("embeddings and heads", tuple(steps))]


def _total(b: Breakdown) -> Section:
    return Section("total", (Step("trainable parameters", "embeddings + layers + norms + heads",
                                  "", b.total, "params", ref="params:total"),))


def _heads_invariance(spec: ModelSpec, b: Breakdown) -> list[Section]:
    if spec.d_head is not None or spec.mla:
        return [Section("head count", (Step(
            "d_head is set explicitly", text=f"d_head = {spec.head_dim}: here the head count "
            "does change Q, K, V and O (n_heads · d_head columns)"),))]
    E, H, Hkv = spec.d_model, spec.n_heads, spec.kv_heads
    steps = [Step("d_head", "d_model / n_heads", f"{E} / {H}", spec.head_dim, ref="spec:head_dim"),
             Step("Q weight", "d_model × (n_heads · d_head)", f"{E} × ({H} · {spec.head_dim})",
                  E * H * spec.head_dim, "params", ref="params-count:q",
                  text="n_heads · d_head = d_model, whatever n_heads is")]
    if Hkv != H:
        steps.append(Step("K weight", "d_model × (n_kv_heads · d_head)",
                          f"{E} × ({Hkv} · {spec.head_dim})", E * Hkv * spec.head_dim, "params",
                          ref="params-count:k", text="n_kv_heads · d_head shrinks as n_heads "
                          "grows with n_kv_heads held"))
    # other head counts that still divide d_model and keep this model's n_kv_heads
    held = Hkv != H  # MHA's K/V heads follow n_heads; MQA's and GQA's are held
    others = [h for h in (1, H // 2, H * 2)
              if h >= 1 and h != H and E % h == 0 and (not held or h % Hkv == 0)]
    totals = []
    for h in others[:2]:
        # MHA: K/V heads follow the head count (even where the file writes n_kv_heads out)
        try:
            total = count_params(spec.replace(n_heads=h) if held
                                 else spec.replace(n_heads=h, n_kv_heads=None)).total
        except SpecError:  # a head count the model cannot take (DiffLlama: odd K/V heads)
            continue
        totals.append(total)
        steps.append(Step(f"total with {h} head{'s' if h > 1 else ''}", "", "", total, "params",
                          ref=f"params-heads:{h}"))
    steps.append(Step(f"total with {H} heads", "", "", b.total, "params", ref="params:total"))
    if all(t == b.total for t in totals):
        title = "why the head count leaves the parameters unchanged"
    else:
        title = (f"why the head count changes the parameters: K and V are n_kv_heads · d_head = "
                 f"{Hkv} · d_model / n_heads wide")
    return [Section(title, tuple(steps))]


def _kv_heads(spec: ModelSpec, b: Breakdown) -> list[Section]:
    if spec.kv_heads == spec.n_heads:
        return []
    mha = count_params(spec.replace(n_kv_heads=None)).total
    return [Section("multi-query / grouped-query attention", (
        Step("K/V heads", "n_kv_heads", "", spec.kv_heads, ref="spec:kv_heads"),
        Step("parameters saved against full multi-head attention", "MHA total − this total",
             f"{mha:,} − {b.total:,}", mha - b.total, "params", ref="params-mha-saving"),
    ))]


def _attention_vs_ffn(spec: ModelSpec, b: Breakdown) -> Section:
    cats = by_category(b)
    ratio = cats["ffn"] / cats["attention"] if cats["attention"] else 0.0
    return Section("attention against FFN", (
        Step("attention (all layers)", "Σ Q, K, V, O (and biases)", "", cats["attention"],
             "params", ref="params-category:attention"),
        Step("FFN (all layers)", "Σ FFN matrices (and biases)", "", cats["ffn"], "params",
             ref="params-category:ffn"),
        Step("FFN : attention", "FFN / attention", f"{cats['ffn']:,} / {cats['attention']:,}",
             ratio, ref="params-ratio:ffn/attention",
             text="2 at d_ff = 4·d_model: 4·d² for Q, K, V, O against 2·4·d² for the FFN"),
    ))


def _rule(spec: ModelSpec, b: Breakdown) -> Section:
    V, E, L = spec.vocab_size, spec.d_model, spec.total_layers
    rot = rule_of_thumb(spec)
    return Section("where the 12·L·E² rule comes from", (
        Step("per layer", "4·E² (Q, K, V, O) + 8·E² (FFN, d_ff = 4·E)", f"12 · {E}²", 12 * E * E,
             "params", ref="rule-layer"),
        Step("rule", RULE_OF_THUMB, f"{V} · {E} + 12 · {L} · {E}²", rot, "params",
             ref="rule"),
        Step("exact", "", "", b.total, "params", ref="params:total"),
        Step("rule's error", "(rule − exact) / exact", f"({rot:,} − {b.total:,}) / {b.total:,}",
             100 * (rot - b.total) / b.total, "%", ref="rule-error",
             text="it leaves out biases, norms, position tables and heads, and assumes "
                  "d_ff = 4·d_model with plain attention"),
    ))


def _tying(spec: ModelSpec, b: Breakdown) -> Section:
    V, Ve = spec.vocab_size, spec.embed_dim
    try:
        other = count_params(spec.replace(tie_embeddings=not spec.tie_embeddings)).total
    except SpecError as e:  # Mllama's extra token rows, RemBERT's wider MLM head: no tying
        return Section("what tying the embeddings saves", (Step(
            "tying", text=f"not possible for this model: {e}"),))
    tied, untied = (b.total, other) if spec.tie_embeddings else (other, b.total)
    return Section("what tying the embeddings saves", (
        Step("LM head when untied", token_table(spec), f"{V} × {Ve}", V * Ve, "params",
             ref="tying-head"),
        Step("untied total", "", "", untied, "params", ref="tying-untied"),
        Step("tied total", "", "", tied, "params", ref="tying-tied"),
        Step("saving", "untied − tied", f"{untied:,} − {tied:,}", untied - tied, "params",
             ref="tying-saving",
             text="this model ties them" if spec.tie_embeddings else "this model does not"),
    ))


# -- memory ---------------------------------------------------------------------------------

def _efficient(spec: ModelSpec, T: int) -> list[Section]:
    """Issue 18: the attention core at the user's T, dense against a local window, Linformer,
    Performer and linear attention, each from count_flops on the same model with that
    mechanism, and the context from which each costs less than dense."""
    import dataclasses

    from transformer_calc.flops import AttentionPattern, count_flops, crossover

    if not spec.n_heads or spec.kv_lora_rank or spec.arch == "encoder-decoder":
        return []
    base = dataclasses.replace(spec, attention_mechanism="softmax")

    def core(s: ModelSpec, pattern: AttentionPattern | None = None) -> int:
        rows = count_flops(s, T, pattern or AttentionPattern()).rows
        first = next(r[5] for r in rows if ".attn." in r[0])
        return sum(r[1] for r in rows if r[5] == first and ".attn." in r[0]
                   and not r[0].endswith((".qkv", ".qk", ".o", ".gate", ".qkv_conv")))

    dense = core(base)
    window = min(512, T)
    formula = ("2 · n_heads · (d_head + d_v) · T" if spec.v_head_dim else
               "2 · 2 · n_heads · d_head · T")  # scores over d_head, values of d_v (MiMo)
    steps = [Step("dense softmax", formula, "", dense, "FLOPs",
                  ref="attn-core:dense",
                  text=f"scores and values per token per layer at T = {T:,}")]
    local = core(base, AttentionPattern("local", window=window))
    steps.append(Step(f"local window of {window}", "2 · 2 · n_heads · d_head · window", "",
                      local, "FLOPs", ref=f"attn-core:local-{window}",
                      text=f"pays from T = {window + 1:,}"))
    for name, mech, kw in (
            ("Linformer, k = 256", "linformer",
             dict(linformer_k=256, max_positions=max(T, spec.max_positions))),
            ("Performer (FAVOR+)", "performer", {}),
            ("linear attention (elu + 1)", "linear", {})):
        try:
            variant = dataclasses.replace(base, attention_mechanism=mech,
                                          **kw)  # type: ignore[arg-type]
        except SpecError as e:  # a layout the mechanism cannot take (MiMo's narrow V heads)
            steps.append(Step(name, "", "", None, text=f"not defined for this model: {e}"))
            continue
        c, t = crossover(variant)
        steps.append(Step(name, "", "", core(variant), "FLOPs", ref=f"attn-core:{mech}",
                          text=f"the same at every T; pays from T = {t:,}"))
    return [Section(f"attention core per token and layer at T = {T:,}: dense, a pattern, "
                    "low-rank, kernel", tuple(steps))]


def _memory(spec: ModelSpec, batch: int, T: int) -> list[Section]:
    from transformer_calc.memory import Settings, memory_report, state_bytes_per_param

    rows = state_bytes_per_param(Settings())
    n = count_params(spec).total
    states = [Step(name, "bytes per parameter", "", per, "bytes", ref=f"bpp-fp32-adamw:{name}",
                   text=why) for name, per, why in rows]
    per = sum(p for _, p, _ in rows)
    states.append(Step("fp32 AdamW", " + ".join(name for name, _, _ in rows),
                       " + ".join(f"{p:g}" for _, p, _ in rows), per, "bytes per parameter",
                       ref="bpp-fp32-adamw:total"))
    states.append(Step("model states", "parameters × bytes per parameter", f"{n:,} × {per:g}",
                       n * per, "bytes", ref="memory-states"))
    r = memory_report(spec, Settings(precision="bf16", mixed=True, batch_size=batch, seq_len=T))
    acts = r.activations
    total = acts.total
    top = sorted(acts.items, key=lambda i: -i.total)[:4]
    steps = [Step(i.name, i.formula, f"{i.count:,} × {i.repeat}" if i.repeat > 1 else "",
                  i.total, "bytes", ref=f"activation:{i.name}") for i in top]
    square = sum(i.total for i in acts.items if i.name.endswith(
        (".softmax", ".dropout_mask", ".dropout_output")))
    loss = sum(i.total for i in acts.items if i.name.startswith("loss."))
    steps += [
        Step("all saved tensors", "Σ", "", total, "bytes", ref="memory:activations"),
        Step("share of the T² attention tensors", "T² terms / all", f"{square:,} / {total:,}",
             100 * square / total if total else 0.0, "%", ref="activation-share:square"),
        Step("share of the loss's log-softmax", "B·T·V·4 / all", f"{loss:,} / {total:,}",
             100 * loss / total if total else 0.0, "%", ref="activation-share:loss"),
        Step("Korthikanti et al. 2022, per layer", "s·b·h·(34 + 5·a·s/h)",
             f"{T}·{batch}·{spec.d_model}·(34 + 5·{spec.n_heads}·{T}/{spec.d_model})",
             r.korthikanti_per_layer, "bytes", ref="korthikanti"),
    ]
    return [Section("why fp32 AdamW costs 16 bytes per parameter", tuple(states)),
            Section(f"what dominates activations (mixed bf16, batch {batch}, T = {T})",
                    tuple(steps))]


# -- flops ----------------------------------------------------------------------------------

def _flops(spec: ModelSpec, T: int) -> list[Section]:
    from transformer_calc.flops import count_flops, rule_6n, training_flops_per_token

    f = count_flops(spec, T)
    steps = [Step(i.name, i.formula, i.expr, i.count, "FLOPs", ref=f"flops:{i.name}")
             for i in f.items]
    n = count_params(spec).active_total
    train = training_flops_per_token(f)
    rule = rule_6n(n)
    return [
        Section(f"forward FLOPs per token: one layer's matmuls, then the head (T = {T})",
                tuple(steps)),
        Section("training", (
            Step("forward", "Σ matmuls × layers", "", f.total, "FLOPs", ref="flops:total"),
            Step("training", "3 × forward (backward = 2 × forward)", f"3 × {f.total:,}", train,
                 "FLOPs", ref="flops:training"),
            Step("6N", "6 × parameters", f"6 × {n:,}", rule, "FLOPs", ref="flops:6N",
                 text="2 FLOPs per parameter forward, 4 backward; leaves out attention over T"),
            Step("6N's error", "(6N − itemised) / itemised", f"({rule:,} − {train:,}) / {train:,}",
                 100 * (rule - train) / train, "%", ref="flops:6N-error"),
        )),
    ]
