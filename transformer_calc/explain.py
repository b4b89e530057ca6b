"""explain: the derivation step by step, formula first, then the numbers, then the result.

Every number comes from the core (count_params, memory_report, count_flops): items carry
their formula and the same with numbers substituted, and this module only composes them.
Each step names the core quantity it shows (``ref``) so tests can recompute it independently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transformer_calc.breakdown import Breakdown, Item
from transformer_calc.choices import TOPICS
from transformer_calc.errors import SpecError
from transformer_calc.params import (
    RULE_OF_THUMB,
    by_category,
    category,
    count_params,
    rule_of_thumb,
    token_table,
)
from transformer_calc.render.units import human_bytes
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
            parts.append(fmt(self.value) + (f" {self.unit}" if self.unit else "")
                         + human(self.value, self.unit))
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


def human(value: float, unit: str) -> str:
    """A byte count's size in binary units after it, from 1 KiB on: ' (1.00 GiB)'."""
    return f" ({human_bytes(value)})" if unit == "bytes" and abs(value) >= 1024 else ""


def signed_sum(values: list[int]) -> str:
    """'a + b − c': the terms of a sum as shown arithmetic, the positive ones first and each
    negative one subtracted (no leading minus sign: '0 − a − b' where all are negative)."""
    terms = [v for v in values if v >= 0] + [v for v in values if v < 0]
    out = f"{terms[0]:,}" if terms[0] >= 0 else "0"
    for v in terms[1:] if terms[0] >= 0 else terms:
        out += f" − {-v:,}" if v < 0 else f" + {v:,}"
    return out


def explain(spec: ModelSpec, topic: str = "params", *, batch_size: int = 1,
            seq_len: int | None = None, gpu: str | None = None, gpus: int = 8,
            global_batch: int | None = None, framework: str = "megatron") -> list[Section]:
    """The sections of a topic. ``step``: the planner's fastest layout of training on
    ``gpus`` GPUs of kind ``gpu`` (``global_batch`` sequences per step, one per GPU when
    None), its step time op by op (transformer_calc.planner.derivation)."""
    from transformer_calc.errors import TcalcError

    if topic not in TOPICS:
        raise TcalcError(f"--topic: expected one of {', '.join(TOPICS)}, got '{topic}'")
    T = seq_len or spec.default_seq_len
    if topic == "step":
        from transformer_calc.planner.derivation import step_derivation

        if gpu is None:
            raise TcalcError("--topic step: expected --gpu (a GPU of `tcalc gpus`; the "
                             "cluster is its DGX/HGX node)")

        return step_derivation(spec, gpus=gpus, global_batch=global_batch,
                               seq_len=T, gpu=gpu, framework=framework)
    b = count_params(spec)
    if topic == "params":
        return (_layers(spec, b) + _embeddings(spec, b) + [_total(b)] + _heads_invariance(spec, b)
                + [_attention_vs_ffn(spec, b), _rule(spec, b), _rule_gap(spec, b),
                   _tying(spec, b)])
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
    # (a row repeated outside the stacks, an encoder tower's layer: its count times)
    steps = [Step(i.name, i.formula if i.repeat == 1 else f"{i.repeat} × ({i.formula})",
                  i.expr if i.repeat == 1 else f"{i.repeat} × ({i.expr})", i.total, "params",
                  ref=f"params:{i.name}", text=i.note)
             for i in b.items if not i.stack and not i.name.endswith("final_norm")]
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
    if spec.mla:
        return [Section("multi-head latent attention (MLA): what the KV cache keeps",
                        tuple(_kv_cache(spec)))]
    if spec.kv_heads == spec.n_heads or spec.attn_experts:
        # (JetMoE: n_heads = top_k · n_kv_heads by construction, no multi-head variant)
        return []
    mha = count_params(spec.replace(n_kv_heads=None)).total
    kind = "multi-query" if spec.kv_heads == 1 else "grouped-query"
    return [Section(f"{kind} attention: {spec.kv_heads} K/V head{'s' * (spec.kv_heads > 1)} for "
                    f"{spec.n_heads} query heads", (
        Step("K/V heads", "n_kv_heads", "", spec.kv_heads, ref="spec:kv_heads"),
        Step("parameters saved against full multi-head attention", "MHA total − this total",
             f"{mha:,} − {b.total:,}", mha - b.total, "params", ref="params-mha-saving"),
        *_kv_cache(spec),
    ))]


def _kv_cache(spec: ModelSpec) -> list[Step]:
    """The KV cache per token of context and per layer, in bf16, against multi-head
    attention's: what GQA/MQA (fewer K/V heads) and MLA (a cached latent) are for. From
    plan.Attention.kv_per_token, for each distinct cache layout of the layers that keep one
    (a decoder's, or a one-stack model's; not Gemma 4's layers that reuse an earlier cache)."""
    from transformer_calc.hardware import DTYPE_BYTES
    from transformer_calc.plan import Attention, plan_of

    nb = int(DTYPE_BYTES["bf16"])
    enc_dec = spec.arch == "encoder-decoder"
    # each cache layout once, with the first group that has it
    layouts: dict[tuple[int, ...], tuple[str, Attention]] = {}
    for g in plan_of(spec).groups:
        at = g.block.attn
        if at is None or at.kv_shared or at.o_groups or (enc_dec and
                                                         g.name.startswith("encoder")):
            continue
        layouts.setdefault((at.heads, at.kv_heads, at.d_head, at.d_v, at.kv_lora_rank,
                            at.d_rope, at.index_dim), (g.name, at))
    steps: list[Step] = []
    for group, a in layouts.values():
        where = f" ({group} layers)" if len(layouts) > 1 else ""
        # multi-head: K and V of every head, at the widths this layer's heads have
        this, mha = a.kv_per_token() * nb, a.heads * (a.d_head + a.d_v) * nb
        if a.mla:
            idx = " + index_head_dim" if a.index_dim else ""
            steps.append(Step(
                f"KV cache per token per layer{where}",
                f"(kv_lora_rank + qk_rope_head_dim{idx}) · bytes",
                f"({a.kv_lora_rank} + {a.d_rope}{f' + {a.index_dim}' if a.index_dim else ''}) "
                f"· {nb}", this, "bytes", ref=f"kv-token:mla:{group}",
                text="bf16; MLA caches its compressed latent and the one RoPE key the heads "
                     "share instead of K and V, as vLLM and SGLang keep it: DeepSeek-V2 paper, "
                     "Sec. 2.1.2" + ("; and the indexer's key" if a.index_dim else "")))
            steps.append(Step(
                f"multi-head attention's, per token per layer{where}",
                "n_heads · (qk_nope_head_dim + qk_rope_head_dim + v_head_dim) · bytes",
                f"{a.heads} · ({a.d_head - a.d_rope} + {a.d_rope} + {a.d_v}) · {nb}", mha,
                "bytes", ref=f"kv-token:mha:{group}",
                text="K and V of every head: what the latent expands to, and what transformers' "
                     "eager cache keeps"))
            why = "the latent against every head's K and V"
        else:
            same = a.d_v == a.d_head
            kv_formula = ("2 · {} · d_head · bytes" if same else "{} · (d_head + d_v) · bytes")
            width = f"{a.d_head}" if same else f"({a.d_head} + {a.d_v})"
            steps.append(Step(
                f"KV cache per token per layer{where}", kv_formula.format("n_kv_heads"),
                f"{'2 · ' if same else ''}{a.kv_heads} · {width} · {nb}", this, "bytes",
                ref=f"kv-token:gqa:{group}", text="bf16: K and V of each K/V head"))
            steps.append(Step(
                f"multi-head attention's, per token per layer{where}",
                kv_formula.format("n_heads"), f"{'2 · ' if same else ''}{a.heads} · {width} · {nb}",
                mha, "bytes", ref=f"kv-token:mha:{group}", text="K and V of every head"))
            why = "n_heads / n_kv_heads"
        steps.append(Step(f"KV cache ratio{where}", "multi-head / this",
                          f"{mha:,} bytes / {this:,} bytes", mha / this,
                          ref=f"kv-ratio:{group}",
                          text=f"{why}: the cache per token, and what decoding reads of it for "
                               "each new token, are this many times smaller"))
    return steps


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
             text="the next section splits exact − rule into its parts"),
    ))


# The parts of exact − rule, each a sum over the parameter breakdown's rows: (key, label,
# formula). Every row falls in exactly one part, so the parts add up to the gap.
GAP_PARTS = (
    ("cross", "cross-attention", "Σ cross-attention Q, K, V, O weights"),
    ("attention", "self-attention weights against 4·E² per layer",
     "Σ self-attention weights − 4·L·E²"),
    ("ffn", "FFN weights against 8·E² per layer", "Σ FFN weights − 8·L·E²"),
    ("biases", "biases", "Σ attention and FFN biases"),
    ("norms", "norms", "Σ norms"),
    ("embeddings", "embeddings beyond V·E", "Σ embeddings − V·E"),
    ("heads", "heads", "Σ output heads"),
    ("mixers", "recurrent mixers", "Σ mixer weights (the rule counts their layers as 12·E²)"),
    ("tower", "encoder tower and projector", "Σ tower and projector weights (the rule counts "
     "the language model alone)"),
)


def gap_part(name: str) -> str:
    """Which part of exact − rule a parameter row belongs to (GAP_PARTS' keys)."""
    c = category(name)
    if c in ("norms", "embeddings", "heads", "mixers", "tower"):
        return c
    if name.endswith(".bias"):
        return "biases"
    return "cross" if ".cross." in f".{name}" else c  # attention or ffn


def _rule_gap(spec: ModelSpec, b: Breakdown) -> Section:
    """The gap between the count and V·E + 12·L·E², by its causes: an encoder-decoder's is
    mostly the decoder's cross-attention, not biases and norms (4·E² per decoder layer, which
    12·E² per layer leaves out)."""
    V, E, L = spec.vocab_size, spec.d_model, spec.total_layers
    rot = rule_of_thumb(spec)
    gap = b.total - rot
    sums = dict.fromkeys((k for k, _, _ in GAP_PARTS), 0)
    cross: dict[str, tuple[int, int]] = {}  # stack -> (one layer's cross weights, layers)
    extra_tables: list[str] = []  # embedding rows besides the token table
    extra_attn: list[str] = []  # self-attention rows besides Q, K, V, O (relative biases...)
    for r in b.rows:
        part, total = gap_part(r[0]), r[1] * r[4]
        sums[part] += total
        if part == "cross":
            one, _ = cross.get(r[5], (0, 0))
            cross[r[5]] = (one + r[1], r[4])
        if part == "embeddings" and total and r[0] != "embed.tokens":
            extra_tables.append(r[0])
        if part == "attention" and total and not r[0].endswith(
                tuple(f".{w}.weight" for w in ("q", "k", "v", "o", "qkv"))):
            extra_attn.append(r[0])
    sums["attention"] -= 4 * L * E * E
    sums["ffn"] -= 8 * L * E * E
    sums["embeddings"] -= V * E
    parts = sorted(((k, label, formula) for k, label, formula in GAP_PARTS if sums[k]),
                   key=lambda p: -abs(sums[p[0]]))
    shares = gap > 0 and all(sums[k] > 0 for k, _, _ in parts)
    steps = [Step("gap", "exact − rule", f"{b.total:,} − {rot:,}", gap, "params",
                  ref="rule-gap:total")]
    for k, label, formula in parts:
        v, expr, notes = sums[k], "", []
        if k == "cross" and len(cross) == 1:
            (stack, (one, n)), = cross.items()
            expr = f"{n} × {one:,}"
            if one == 4 * E * E:
                notes.append(f"4·E² per {stack.split('.')[0]} layer, which the rule's 12·E² "
                             "per layer leaves out")
        elif k == "attention":
            expr = f"{v + 4 * L * E * E:,} − 4 · {L} · {E}²"
            if spec.mla:
                notes.append("multi-head latent attention: low-rank Q and K/V projections")
            elif spec.kv_heads != spec.n_heads:
                notes.append(f"{spec.kv_heads} K/V head{'s' * (spec.kv_heads > 1)} for "
                             f"{spec.n_heads} query heads")
            elif spec.head_dim * spec.n_heads != E:
                notes.append(f"n_heads · d_head = {spec.n_heads * spec.head_dim}, not d_model")
            if extra_attn and len(extra_attn) <= 4:
                notes.append("with " + ", ".join(extra_attn))
        elif k == "ffn":
            expr = f"{v + 8 * L * E * E:,} − 8 · {L} · {E}²"
            if spec.n_experts:
                notes.append(f"{spec.n_experts} experts")
            if spec.ffn == "gated":
                notes.append("gated: 3 matrices")
            if spec.d_ff != 4 * E and not spec.n_experts:
                notes.append(f"d_ff = {spec.d_ff}, not 4·E = {4 * E}")
        elif k == "embeddings":
            expr = f"{v + V * E:,} − {V} · {E}"
            if extra_tables:
                notes.append(", ".join(extra_tables))
        if shares:
            notes.insert(0, f"{100 * v / gap:.2f} % of the gap")
        steps.append(Step(label, formula, expr, v, "params", ref=f"rule-gap:{k}",
                          text="; ".join(notes)))
    if len(parts) > 1:
        steps.append(Step("sum of the parts", "Σ the parts above",
                          signed_sum([sums[k] for k, _, _ in parts]), gap, "params",
                          ref="rule-gap:total"))
    return Section("what the 12·L·E² rule misses: exact − rule, part by part", tuple(steps))


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
    """Efficient attention: the attention core at the user's T, dense against a local window,
    Linformer, Performer and linear attention, each from count_flops on the same model with that
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


# A factor of T·keys or T·T elements in an activation row's formula ("B·n_heads·T·keys",
# "B·n_heads·T·(keys + 1)", "T·T · 8"); not T·keys_l (block-sparse) nor T·T_chunks.
_SQUARE = re.compile(r"\bT·\(?(?:keys|T)\b")


def square_tensor(formula: str) -> bool:
    """Whether an activation row's formula is of T·keys or T·T elements (T² under dense
    attention)."""
    return bool(_SQUARE.search(formula))


def per_layer_bytes(i: Item) -> str:
    """A saved tensor's bytes as one layer's times the layers: '50,331,648 bytes × 12 layers'
    ('× 2' alone for a row repeated per stack)."""
    if i.repeat == 1:
        return ""
    return f"{i.count:,} bytes × {i.repeat}" + (" layers" if i.stack else "")


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
    steps = [Step(i.name, i.formula, per_layer_bytes(i), i.total, "bytes",
                  ref=f"activation:{i.name}") for i in top]
    # every tensor of T·keys or T·T elements (keys = T under dense attention): the fp32
    # probabilities, their 16-bit copy, dropout masks, soft-capping, T5's bucket indices...
    squares = [i for i in acts.items if square_tensor(i.formula)]
    square = sum(i.total for i in squares)
    loss = sum(i.total for i in acts.items if i.name.startswith("loss."))
    steps.append(Step("all saved tensors", "Σ", "", total, "bytes", ref="memory:activations"))
    steps.append(Step("T² tensors", "Σ rows of T·keys or T·T elements",
                      f"({' + '.join(f'{i.total:,}' for i in squares)}) bytes" if len(squares) > 1
                      else "", square, "bytes", ref="activation-square",
                      text=("the rows " + ", ".join(i.name for i in squares)) if squares else
                      "none: this model's attention keeps no T² tensor"))
    steps += [
        Step("share of the T² attention tensors", "T² tensors / all",
             f"{square:,} bytes / {total:,} bytes", 100 * square / total if total else 0.0, "%",
             ref="activation-share:square"),
        Step("share of the loss's log-softmax", "B·T·V·4 / all",
             f"{loss:,} bytes / {total:,} bytes", 100 * loss / total if total else 0.0, "%",
             ref="activation-share:loss"),
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
