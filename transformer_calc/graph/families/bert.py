"""BERT-style encoders with a masked-LM head as transformers 5.23 runs them:
models/bert/modeling_bert.py (BertForMaskedLM, BertModel without its pooler,
BertEmbeddings, BertLayer: BertSelfAttention with eager_attention_forward or
integrations/sdpa_attention.py, BertSelfOutput, BertIntermediate, BertOutput;
BertOnlyMLMHead), models/roberta/modeling_roberta.py (RobertaForMaskedLM: position ids
counted from the token ids, RobertaLMHead; CamemBERT, XLM-RoBERTa and Data2VecText are the
same code), models/ernie/modeling_ernie.py (BERT's, without task-type ids) and
models/electra/modeling_electra.py (ElectraForMaskedLM, the generator: embeddings of
embedding_size projected to hidden_size, ElectraGeneratorPredictions back to embedding_size
and generator_lm_head tied to the token table).

The encoder's attention is bidirectional: with no attention_mask (the measurement passes
none) create_bidirectional_mask returns None for eager and SDPA alike, so eager adds no mask
and SDPA runs with is_causal False and no mask."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from transformer_calc.graph import ops
from transformer_calc.graph.families import yoso
from transformer_calc.graph.families.gpt2 import new_gelu
from transformer_calc.graph.flash import flash_attention_forward
from transformer_calc.graph.modules import Builder, causal_lm_loss
from transformer_calc.graph.sdpa import scaled_dot_product_attention
from transformer_calc.graph.symbols import Dim
from transformer_calc.graph.tensor import F32, I64, Tensor

# the masked-LM head's modules, by the class's layout: (the head's scope, its dense, its
# norm, the decoder; whether a bias parameter of the head's own is the tied decoder's)
HEADS = {"bert": ("cls.predictions", "transform.dense", "transform.LayerNorm", "decoder", True),
         "nomic": ("cls.predictions", "transform.dense", "transform.layer_norm", "decoder", True),
         "gte": ("lm_head", "dense", "layer_norm", "decoder", False),
         "generation": ("lm_head", "", "", "decoder", True),
         "albert": ("predictions", "dense", "LayerNorm", "decoder", True),
         "rembert": ("cls.predictions", "dense", "LayerNorm", "decoder", False),
         "roberta": ("lm_head", "dense", "layer_norm", "decoder", True),
         "electra": ("", "generator_predictions.dense", "generator_predictions.LayerNorm",
                     "generator_lm_head", False),
         "distilbert": ("", "vocab_transform", "vocab_layer_norm", "vocab_projector", False)}


@dataclass(frozen=True)
class Bert:
    """The config keys that shape the graph. Symbols: V vocab, P positions, Ty token types,
    E hidden, H heads, dh = E / H, F intermediate, L layers.

    base: the encoder's attribute ("bert", "roberta", "electra", ...); head: the MLM head's
    layout (HEADS); positions_from_ids: RoBERTa's create_position_ids_from_input_ids (a
    (B, T) tensor) rather than a slice of the position_ids buffer; tied: the decoder's
    weight is the token table (tie_word_embeddings)."""

    V: int
    P: int
    Ty: int
    E: int
    H: int
    F: int
    L: int
    base: str = "bert"
    head: str = "bert"
    positions_from_ids: bool = False
    tied: bool = True
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    head_act: str = "gelu"  # the MLM head's activation (NomicBERT's: hidden_act, silu)
    type_table: bool = True  # a token-type table (BertGeneration has none)
    causal_loss: bool = False  # BertGenerationDecoder: ForCausalLMLoss, shifted, in fp32
    # the head: mlm (the masked-LM head), seq_cls (XForSequenceClassification: BERT's pooler,
    # dropout and classifier, RoBERTa's classification head), token_cls
    # (XForTokenClassification: dropout and classifier per token), base (XModel: the
    # encoder, its pooler where pooler, under a loss of the user's); NL: num_labels
    task: str = "mlm"
    NL: int = 1
    pooler: bool = False  # the base model's pooler (BertModel(add_pooling_layer=True))

    def sizes(self) -> dict[str, int]:
        return {"V": self.V, "P": self.P, "Ty": self.Ty, "E": self.E, "H": self.H,
                "dh": self.E // self.H, "F": self.F, "L": self.L, "NL": self.NL}


@dataclass(frozen=True)
class Factorized(Bert):
    """ELECTRA with embedding_size (Ee) unlike hidden_size: the embeddings, their norm and
    dropout, and the MLM head are Ee wide; embeddings_project maps Ee to E."""

    Ee: int = 1

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "Ee": self.Ee}


@dataclass(frozen=True)
class RemBert(Factorized):
    """RemBERT (models/rembert/modeling_rembert.py): embeddings of input_embedding_size
    (Ee) with the token types a new (B, T) int64 zeros tensor, the encoder's
    embedding_hidden_mapping_in to E, BERT's layers (eager), the head output_embedding_size
    (Eo) wide with a decoder of its own."""

    Eo: int = 1

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "Eo": self.Eo}


@dataclass(frozen=True)
class LayoutLM(Bert):
    """LayoutLM (models/layoutlm/modeling_layoutlm.py): BERT with the 2-D position tables
    (x, y, h, w, P2 = max_2d_position_embeddings rows each) read at a bbox of zeros, the
    extended (B, 1, 1, T) mask added to the scores (eager) or given to SDPA, eager softmax
    in fp32 cast back."""

    P2: int = 1

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "P2": self.P2}


@dataclass(frozen=True)
class RoCBert(Bert):
    """RoCBert (models/roc_bert/modeling_roc_bert.py, concat_input): the word embedding
    concatenated with the shape table's (Vs rows, Ds wide) and the pronunciation table's
    (Vp, Dp), each read at new (B, T) int64 zeros, through map_inputs_layer to E; then the
    token types and positions added, LayerNorm, dropout."""

    Vs: int = 1
    Ds: int = 1
    Vp: int = 1
    Dp: int = 1

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "Vs": self.Vs, "Ds": self.Ds, "Vp": self.Vp, "Dp": self.Dp}


@dataclass(frozen=True)
class Tapas(Bert):
    """TAPAS (models/tapas/modeling_tapas.py, TapasForMaskedLM): BERT's layers (eager; the
    scores divided by sqrt(dh)) after TapasEmbeddings: word and position embeddings, then a
    token-type table per type_vocab_sizes entry (`tables` of them), each read at its column
    of TapasModel's (B, T, tables) int64 zeros, added in place. The spec knows the tables'
    rows in all (Ty): one (Ty, E) table read once per entry, parameter for parameter.
    cell_positions (reset_position_index_per_cell): the positions restart at each table
    cell, integer ops without a gradient ending in torch.min(...), a new (B, T) int64
    tensor; otherwise arange(T) unsqueezed and expanded over B (T int64)."""

    tables: int = 7
    cell_positions: bool = True


@dataclass(frozen=True)
class IBert(Bert):
    """I-BERT with quant_mode off (models/ibert/modeling_ibert.py, IBertForMaskedLM,
    quant_modules.py): RoBERTa's layout, positions counted from the ids, the token types a
    new (B, T) int64 zeros tensor; QuantLinear runs F.linear (not an nn.Linear: peft adapts
    none of the layers' projections); QuantAct returns identity + x, records running
    minima and maxima without a gradient; IntLayerNorm written out (int_layer_norm);
    IntGELU is nn.GELU, IntSoftmax softmax; the head is RoBERTa's (nn.Linear, nn.LayerNorm)."""


@dataclass(frozen=True)
class Yoso(Bert):
    """YOSO (models/yoso/modeling_yoso.py, YosoForMaskedLM): BERT's embeddings (the
    positions the buffer's slice, from 2 on; the token types a view of the buffer), BERT's
    layers with YOSO's expectation attention (families/yoso.py) over YosoModel's (B, T)
    fp32 ones mask, BERT's MLM head. P: the position table's rows,
    max_position_embeddings + 2."""


@dataclass(frozen=True)
class BigBird(Bert):
    """BigBird (models/big_bird/modeling_big_bird.py, BigBirdForMaskedLM) where it runs
    original_full: BERT's post-norm layers (BigBirdSelfAttention: eager code, scores
    divided by sqrt(dh), softmax in their dtype) with hidden_act (act; gelu_new its
    default) in the intermediate and the head's transform; BigBirdEmbeddings: the token
    types and positions slices of buffers, dropout before the LayerNorm; BigBirdModel's
    pooler (an nn.Linear and tanh of the first token) run, its output unread.
    sparse_from: the length from which attention_type block_sparse runs BigBird's
    block-sparse attention ((5 + 2 · num_random_blocks) · block_size + 1; shorter
    sequences switch to original_full), which the graph does not transcribe (0: never)."""

    act: str = "gelu_new"
    sparse_from: int = 0


def _width(m: Builder, cfg: Bert) -> Dim:
    """The embeddings' and the MLM head's width."""
    return m["Ee"] if isinstance(cfg, Factorized) else m["E"]


def forward(m: Builder, cfg: Bert) -> Tensor:
    """BertForMaskedLM.forward(input_ids=ids, labels=ids) (RobertaForMaskedLM's,
    ElectraForMaskedLM's): the encoder, the MLM head, CrossEntropyLoss over
    prediction_scores.view(-1, V) and labels.view(-1), in the scores' dtype."""
    B, T, V = m["B"], m["T"], m["V"]
    ids = m.trace.input((B, T), I64, "input_ids")
    mask = None
    with m.module(cfg.base):
        if isinstance(cfg, LayoutLM):
            h = _layout_embeddings(m, cfg, ids)
            # LayoutLMModel: the ones mask unsqueezed, in the model's dtype, (1 - m) · min:
            # a (B, 1, 1, T) tensor without a gradient
            mask = m.trace.tensor((B, Dim.const(1), Dim.const(1), T), m.run.dtype, False,
                                  name="attention_mask")
        elif isinstance(cfg, Tapas):
            h = _tapas_embeddings(m, cfg, ids)
        else:
            h = embeddings(m, cfg, ids)
        if isinstance(cfg, Yoso):  # YosoModel: torch.ones((B, T)), fp32, no gradient
            mask = m.trace.tensor((B, T), F32, False, name="attention_mask")
        if isinstance(cfg, Factorized) and not isinstance(cfg, RemBert):
            h = m.linear("embeddings_project", h, m["E"], True)  # ElectraModel's
        with m.module("encoder"):
            if isinstance(cfg, RemBert):  # RemBertEncoder: embedding_hidden_mapping_in
                h = m.linear("embedding_hidden_mapping_in", h, m["E"], True)
            h = m.layers("layer", lambda x: _layer(m, cfg, x, mask), h,
                         () if mask is None else (mask,))
        if isinstance(cfg, LayoutLM):
            _unused_pooler(m, h)
        elif isinstance(cfg, BigBird):  # BigBirdModel's pooler: an nn.Linear itself
            _unused_pooler(m, h, "")
        if cfg.task == "seq_cls" and cfg.head == "bert":  # BertModel's pooler
            with m.module("pooler"):
                h = ops.tanh(m.linear("dense", ops.select(h, 1, 0), m["E"], True))
        elif cfg.task == "base":
            return _base_outputs(m, cfg, h)
    if cfg.task != "mlm":
        return _classify(m, cfg, h)
    scores = head(m, cfg, h)
    if cfg.causal_loss:
        return causal_lm_loss(scores, ids, V)
    return ops.cross_entropy(ops.view(scores, (B * T, V)), ops.view(ids, (B * T,)))


def embeddings(m: Builder, cfg: Bert, ids: Tensor) -> Tensor:
    """BertEmbeddings.forward (RobertaEmbeddings'): word + token-type + position embeddings,
    LayerNorm, dropout."""
    tr = m.trace
    B, T, P = m["B"], m["T"], m["P"]
    width = _width(m, cfg)
    one = Dim.const(1)
    with m.module("embeddings"):
        # buffers (the model's memory, never an activation): position_ids = arange(P)
        # expanded to (1, P); token_type_ids = zeros of the same shape
        arange = tr.tensor((one, P), I64, False, "buffer", "position_ids")
        zeros = tr.tensor((one, P), I64, False, "buffer", "token_type_ids")
        if cfg.positions_from_ids:
            # create_position_ids_from_input_ids: mask = input_ids.ne(padding_idx).int();
            # (cumsum(mask, dim=1).type_as(mask) + 0) * mask, .long() + padding_idx: integer
            # ops without a gradient, whose last result is a new (B, T) int64 tensor
            with tr.no_grad():
                positions = tr.tensor((B, T), I64, False, name="position_ids")
        else:
            positions = ops.narrow(arange, 1, 0, T)  # self.position_ids[:, 0:T]
        # token_type_ids.expand(position_ids.shape[0], -1), gathered at the positions, then
        # expanded to (B, T): a new (1, T) tensor for BERT's positions, (B, T) for RoBERTa's
        h = m.embedding("word_embeddings", ids, m["V"], width)
        if isinstance(cfg, RoCBert):
            h = _side_tables(m, h)
        if cfg.type_table:
            if isinstance(cfg, RemBert | IBert):  # zeros(input_shape, long): new (B, T)
                types = tr.tensor((B, T), I64, False, name="token_type_ids")
            elif isinstance(cfg, Yoso | BigBird):  # the buffer's [:, :T] expanded: a view
                types = ops.expand(ops.narrow(zeros, 1, 0, T), (B, T))
            else:
                buffered = ops.expand(zeros, (positions.shape[0], P))
                types = ops.expand(ops.gather(buffered, 1, positions), (B, T))
            h = ops.add(h, m.embedding("token_type_embeddings", types, m["Ty"], width))
        h = ops.add(h, m.embedding("position_embeddings", positions, P, width))
        if isinstance(cfg, BigBird):  # BigBirdEmbeddings: dropout, then the LayerNorm
            return _norm(m, cfg, "LayerNorm", m.dropout(h, cfg.hidden_dropout))
        return m.dropout(_norm(m, cfg, "LayerNorm", h), cfg.hidden_dropout)


def _classify(m: Builder, cfg: Bert, h: Tensor) -> Tensor:
    """The classification heads and CrossEntropyLoss (single-label: num_labels > 1 and
    integer labels) over logits.view(-1, num_labels), in the logits' dtype, with the
    labels (B,) or (B, T), an int64 input. BertForSequenceClassification: dropout of the
    pooled output (classifier_dropout, else hidden_dropout_prob), classifier;
    BertForTokenClassification: dropout of every token's state, classifier;
    RobertaClassificationHead: the first token (features[:, 0, :], a view), dropout, dense,
    tanh, dropout, out_proj."""
    B, T, NL, E = m["B"], m["T"], m["NL"], m["E"]
    p = cfg.hidden_dropout
    if cfg.task == "seq_cls" and cfg.head == "roberta":
        with m.module("classifier"):
            x = m.dropout(ops.select(h, 1, 0), p)
            x = m.dropout(ops.tanh(m.linear("dense", x, E, True)), p)
            logits = m.linear("out_proj", x, NL, True)
    else:
        with m.module("dropout"):
            h = m.dropout(h, p)
        logits = m.linear("classifier", h, NL, True)
    rows = B if cfg.task == "seq_cls" else B * T
    labels = m.trace.input((B,) if cfg.task == "seq_cls" else (B, T), I64, "labels")
    return ops.cross_entropy(ops.view(logits, (rows, NL)), ops.view(labels, (rows,)))


def _base_outputs(m: Builder, cfg: Bert, h: Tensor) -> Tensor:
    """A base model (BertModel, RobertaModel, ElectraModel...) has no loss: the user's own
    head and loss read its outputs, and are not counted. The graph closes it as
    tools/measure_activations_hf.py measures it: the sum of last_hidden_state and of the
    pooler's output (BertPooler: tanh of dense of the first token, a view of the last
    hidden state), whose backward keeps sizes only, so what is saved is the model's own."""
    loss = ops.sum_dim(ops.view(h, (m["B"] * m["T"] * m["E"],)), 0)
    if not cfg.pooler:
        return loss
    with m.module("pooler"):
        pooled = ops.tanh(m.linear("dense", ops.select(h, 1, 0), m["E"], True))
    return ops.add(loss, ops.sum_dim(ops.view(pooled, (m["B"] * m["E"],)), 0))


def _side_tables(m: Builder, h: Tensor) -> Tensor:
    """RoCBertEmbeddings (concat_input): clone of the word embeddings, cat with the shape
    and the pronunciation embeddings of zeros(input_shape) ids, map_inputs_layer back to E
    (which keeps the concatenation); the token types and positions are added after it."""
    x = ops.clone(h)
    for table, rows, width in (("shape_embed", "Vs", "Ds"),
                               ("pronunciation_embed", "Vp", "Dp")):
        zeros = m.trace.tensor((m["B"], m["T"]), I64, False, name=f"input_{table}_ids")
        x = ops.cat([x, m.embedding(table, zeros, m[rows], m[width])], -1)
    return m.linear("map_inputs_layer", x, m["E"], True)


def _unused_pooler(m: Builder, h: Tensor, dense: str = "dense") -> None:
    """A pooler the masked-LM loss never reads (LayoutLMModel's: dense and tanh of the first
    token; BigBirdModel's pooler an nn.Linear itself, dense ""): its parameters and FLOPs
    count, but its output reaches nothing, so autograd frees what it saved with it before
    the forward ends: run without a gradient."""
    E = m["E"]
    with m.module("pooler"), m.module(dense) if dense else contextlib.nullcontext():
        # its parameters (and adapters) train
        m.param("weight", E, E), m.param("bias", E)
        lora = m.run.lora
        if lora is not None and lora.adapts(m.trace.scope):
            with m.module("lora_A"):
                m.param("weight", m["r"], E, adapter=True)
            with m.module("lora_B"):
                m.param("weight", E, m["r"], adapter=True)
    with m.trace.no_grad():
        first = ops.select(h, 1, 0)
        if dense:
            with m.module("pooler"):
                ops.tanh(m.linear(dense, first, E, True))
        else:
            ops.tanh(m.linear("pooler", first, E, True))


def _tapas_embeddings(m: Builder, cfg: Tapas, ids: Tensor) -> Tensor:
    """TapasEmbeddings.forward: position ids (per cell, or arange(T) expanded), the word
    and position embeddings summed, each token-type table's embedding of its column of the
    (B, T, tables) ids added in place; LayerNorm, dropout."""
    tr = m.trace
    B, T, E = m["B"], m["T"], m["E"]
    types = tr.tensor((B, T, Dim.const(cfg.tables)), I64, False, name="token_type_ids")
    with m.module("embeddings"):
        if cfg.cell_positions:  # IndexMap, reduce_min, gather, torch.min: integer ops
            with tr.no_grad():
                positions = tr.tensor((B, T), I64, False, name="position_ids")
        else:  # torch.arange(T).unsqueeze(0).expand(input_shape)
            arange = tr.tensor((T,), I64, False, name="position_ids")
            positions = ops.expand(ops.unsqueeze(arange, 0), (B, T))
        h = m.embedding("word_embeddings", ids, m["V"], E)
        h = ops.add(h, m.embedding("position_embeddings", positions, m["P"], E))
        with m.module("token_type_embeddings"):
            table = m.param("weight", m["Ty"], E)
            for i in range(cfg.tables):  # embeddings += token_type_embeddings_i(ids[..., i])
                h = ops.add(h, ops.embedding(table, ops.select(types, 2, i)))
        return m.dropout(m.layer_norm("LayerNorm", h), cfg.hidden_dropout)


def _layout_embeddings(m: Builder, cfg: LayoutLM, ids: Tensor) -> Tensor:
    """LayoutLMEmbeddings.forward: word, position (the buffer's slice), the bbox's four
    coordinates through the x and y tables (views of LayoutLMModel's (B, T, 4) int64 zeros),
    its height and width (new (B, T) int64 differences) through the h and w tables, and the
    token types (LayoutLMModel's (B, T) int64 zeros), summed; LayerNorm, dropout."""
    tr = m.trace
    B, T, E, P2 = m["B"], m["T"], m["E"], m["P2"]
    one = Dim.const(1)
    types = tr.tensor((B, T), I64, False, name="token_type_ids")
    box = tr.tensor((B, T, Dim.const(4)), I64, False, name="bbox")
    with m.module("embeddings"):
        arange = tr.tensor((one, m["P"]), I64, False, "buffer", "position_ids")
        h = m.embedding("word_embeddings", ids, m["V"], E)
        h = ops.add(h, m.embedding("position_embeddings", ops.narrow(arange, 1, 0, T),
                                   m["P"], E))
        for i, table in enumerate("xyxy"):  # bbox[:, :, i]: a view
            coordinate = ops.select(box, 2, i)
            h = ops.add(h, m.embedding(f"{table}_position_embeddings", coordinate, P2, E))
        for table in "hw":  # bbox[:, :, 3] - bbox[:, :, 1], bbox[:, :, 2] - bbox[:, :, 0]
            with tr.no_grad():
                extent = tr.tensor((B, T), I64, False)
            h = ops.add(h, m.embedding(f"{table}_position_embeddings", extent, P2, E))
        h = ops.add(h, m.embedding("token_type_embeddings", types, m["Ty"], E))
        return m.dropout(m.layer_norm("LayerNorm", h), cfg.hidden_dropout)


def _layer(m: Builder, cfg: Bert, h: Tensor, mask: Tensor | None = None) -> Tensor:
    """BertLayer.forward: self-attention, then BertSelfOutput (dense, dropout, LayerNorm of
    the sum with the layer's input); BertIntermediate (dense, gelu); BertOutput (dense,
    dropout, LayerNorm of the sum with the attention's output): post-norm."""
    with m.module("attention"):
        with m.module("self"):
            a = _self_attention(m, cfg, h, mask)
        a = _output(m, cfg, a, h)
    with m.module("intermediate"):
        x = _dense(m, cfg, "dense", a, m["F"])
        # ACT2FN["gelu"]: erf GELU; BigBird's hidden_act, gelu_new by default
        x = new_gelu(x) if isinstance(cfg, BigBird) and cfg.act == "gelu_new" else ops.gelu(x)
    return _output(m, cfg, x, a)


def _dense(m: Builder, cfg: Bert, name: str, x: Tensor, out: Dim) -> Tensor:
    """The layers' nn.Linear with a bias; I-BERT's QuantLinear (F.linear with its weight
    and bias), which peft does not adapt."""
    if not isinstance(cfg, IBert):
        return m.linear(name, x, out, True)
    with m.module(name):
        return ops.linear(x, m.param("weight", out, x.shape[-1]), m.param("bias", out))


def _norm(m: Builder, cfg: Bert, name: str, x: Tensor) -> Tensor:
    """nn.LayerNorm, or I-BERT's IntLayerNorm.forward with quant_mode off: mean =
    x.mean(axis=2, keepdim=True); y = x - mean; var = torch.mean(y ** 2, ...); x = y /
    torch.sqrt(self.eps + var); x * self.weight + self.bias (y kept by the square and the
    division, the std by the division and its sqrt, the normalised tensor by the weight's
    product)."""
    if not isinstance(cfg, IBert):
        return m.layer_norm(name, x)
    with m.module(name):
        E = x.shape[-1]
        w, b = m.param("weight", E), m.param("bias", E)
        y = ops.sub(x, ops.mean(x))
        std = ops.sqrt(ops.add(ops.mean(ops.pow(y, 2.0)), 1e-12))
        return ops.add(ops.mul(ops.div(y, std), w), b)


def _output(m: Builder, cfg: Bert, x: Tensor, residual: Tensor) -> Tensor:
    """BertSelfOutput / BertOutput: LayerNorm(dropout(dense(x)) + input_tensor)."""
    with m.module("output"):
        x = m.dropout(_dense(m, cfg, "dense", x, m["E"]), cfg.hidden_dropout)
        return _norm(m, cfg, "LayerNorm", ops.add(x, residual))


def _self_attention(m: Builder, cfg: Bert, x: Tensor, mask: Tensor | None = None) -> Tensor:
    """BertSelfAttention.forward: query, key and value viewed as (B, T, H, dh) and
    transposed, the attention interface, the output reshaped to (B, T, E) and made
    contiguous."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    q, k, v = (ops.transpose(ops.view(_dense(m, cfg, name, x, H * dh), (B, T, H, dh)), 1, 2)
               for name in ("query", "key", "value"))
    if isinstance(cfg, Yoso):
        assert mask is not None
        return yoso.expectation_attention(m, q, k, v, mask)
    return bidirectional_attention(m, q, k, v, cfg.attention_dropout, mask,
                                   softmax_fp32=isinstance(cfg, LayoutLM))


def bidirectional_attention(m: Builder, q: Tensor, k: Tensor, v: Tensor, p: float,
                            mask: Tensor | None = None, softmax_fp32: bool = False) -> Tensor:
    """The attention interface without a causal mask (q, k, v of (B, H, T, dh)), its
    output reshaped to (B, T, H·dh) and made contiguous. mask: LayoutLM's additive
    (B, 1, 1, T) mask; softmax_fp32: its eager softmax in fp32, cast back."""
    B, T, H, dh = m["B"], m["T"], m["H"], m["dh"]
    scaling = float(dh.value) ** -0.5
    if m.run.attention == "eager":
        # eager_attention_forward (modeling_bert.py): matmul(q, kᵀ) · scaling, no mask,
        # softmax in the scores' dtype, dropout, the product with V, transposed, contiguous
        w = ops.mul(ops.matmul(q, ops.transpose(k, 2, 3)), scaling)
        if mask is not None:
            w = ops.add(w, mask)
        w = ops.to(ops.softmax(w, F32), q.dtype) if softmax_fp32 else ops.softmax(w)
        w = m.dropout(w, p)
        out = ops.contiguous(ops.transpose(ops.matmul(w, v), 1, 2))
    elif m.run.attention == "flash":  # flash_attention_2, causal False: (B, T, H, dh) out
        assert mask is None
        out = flash_attention_forward(m, q, k, v)
    else:
        # sdpa_attention_forward: is_causal False (BertSelfAttention.is_causal), the mask
        # (a view of its first T keys) as SDPA's attn_mask; the output reshaped to
        # (B, H, T, dh), transposed and made contiguous
        out = scaled_dot_product_attention(q, k, v, is_causal=False, dropout_p=p,
                                           scale=scaling, mask=mask)
        out = ops.contiguous(ops.transpose(ops.reshape(out, (B, H, T, dh)), 1, 2))
    return ops.contiguous(ops.reshape(out, (B, T, H * dh)))


def head(m: Builder, cfg: Bert, h: Tensor) -> Tensor:
    """The MLM head: dense, gelu, LayerNorm, then the decoder to the vocabulary with a
    bias. BertLMPredictionHead (transform, decoder; its bias parameter is the decoder's
    bias, tied) and RobertaLMHead: hidden_size wide; ElectraGeneratorPredictions and
    generator_lm_head (a bias of its own): embedding_size wide. The decoder's weight is
    the token table when tied. Not a LoRA target under peft's all-linear: it is the
    model's output embedding."""
    scope, dense, norm, decoder, shared_bias = HEADS[cfg.head]
    width, V = m["Eo"] if isinstance(cfg, RemBert) else _width(m, cfg), m["V"]
    table = f"{cfg.base}.embeddings.word_embeddings.weight"
    with m.module(scope) if scope else contextlib.nullcontext():
        bias = m.param("bias", V) if shared_bias else None
        if not dense:  # BertGenerationOnlyLMHead: the decoder alone
            with m.module(decoder):
                w = m.tied(table) if cfg.tied else m.param("weight", V, width)
                return ops.linear(h, w, bias if cfg.tied else m.param("bias", V))
        # (ACT2FN[hidden_act] in BERT's transform, activations.gelu in RoBERTa's and
        # ELECTRA's: the erf GELU each)
        x = m.linear(dense, h, width, True)
        if cfg.head_act == "gelu_new":  # ALBERT's hidden_act
            with m.module("activation"):
                x = new_gelu(x)
        else:
            x = ops.silu(x) if cfg.head_act == "silu" else ops.gelu(x)
        x = m.layer_norm(norm, x)
        with m.module(decoder):
            w = m.tied(table) if cfg.tied else m.param("weight", V, width)
            if bias is None or not cfg.tied:  # an untied decoder has a bias of its own
                bias = m.param("bias", V)
            return ops.linear(x, w, bias)

