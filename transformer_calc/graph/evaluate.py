"""Run a family's graph for one configuration, every layer traced (the reference the
compiled path, compile.py, is checked against), and read its costs: the storages autograd
holds when the forward is over (each once; under the run's recomputation policy, held.py),
the parameters it touched (a tied table once), and the forward's matmul FLOPs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformer_calc.errors import TcalcError
from transformer_calc.graph.families import gpt2, llama
from transformer_calc.graph.held import held
from transformer_calc.graph.modules import Builder, Run
from transformer_calc.graph.symbols import Dim, Poly
from transformer_calc.graph.trace import OpRecord, Saved
from transformer_calc.spec import ModelSpec

Family = gpt2.GPT2 | llama.Llama


@dataclass(frozen=True)
class Result:
    """saved: every storage held for backward (activations, inputs such as the token ids,
    and under autocast the parameters' 16-bit copies); weight_copy_bytes: autocast's cache
    of those copies, all held until the forward's autocast region ends; ops: the forward,
    op by op; recomputed_layer_bytes: under full recomputation, the largest layer's saved
    set, rebuilt in backward (0 otherwise)."""

    saved: tuple[Saved, ...]
    weight_copy_bytes: int
    params: int
    trainable_params: int
    forward_flops: int
    flops_formula: Poly
    ops: tuple[OpRecord, ...]
    recomputed_layer_bytes: int = 0

    @property
    def activation_bytes(self) -> int:
        """What saved_tensors_hooks counts with parameters excluded: all but weight copies."""
        return sum(s.nbytes for s in self.saved if s.storage.kind != "weight_copy")

    @property
    def activation_formula(self) -> Poly:
        total = Poly(())
        for s in self.saved:
            if s.storage.kind != "weight_copy":
                total = total + s.storage.formula
        return total


def trace(family: Family, run: Run, symbolic: bool = False,
          replaced: Callable[[Builder], Family] | None = None) -> Builder:
    """Run the family's forward on a Builder. symbolic (compile.py): sizes are SInts, and
    `replaced` gives the forward a config whose sizes are the Builder's SInts, so any
    decision the forward takes on a size is recorded as a guard."""
    m = Builder(run, family.sizes(), symbolic)
    cfg = replaced(m) if replaced is not None else family
    if isinstance(cfg, gpt2.GPT2):
        gpt2.forward(m, cfg)
    else:
        llama.forward(m, cfg)
    return m


def evaluate(family: Family, run: Run) -> Result:
    tr = trace(family, run).trace
    kept = held(tr, run.recompute)
    params = list(tr.params.values())
    copies = sum(t.storage.nbytes for t in tr.weight_casts.values())
    rebuilt = max((sum(st.nbytes for st in layer) for layer in kept.rebuilt), default=0)
    return Result(tuple(s for s, _ in kept.saved), copies,
                  sum(p.storage.numel.value for p in params),
                  sum(p.storage.numel.value for p in params if p.requires_grad),
                  tr.flops, tr.flops_poly, tuple(tr.ops), rebuilt)


def family_of(spec: ModelSpec) -> Family:
    """The graph a ModelSpec's layout runs as (spec_from_hf's fields for gpt2, llama and
    qwen2 configs), or a TcalcError saying it has no graph yet."""
    H = spec.n_heads
    common = (spec.arch == "decoder" and spec.n_experts == 0 and spec.qk_norm == "none"
              and not spec.parallel_block and not spec.sliding_window
              and spec.norm_position == "pre" and spec.lm_head and not spec.lm_head_bias)
    if (common and spec.norm == "layernorm" and spec.position == "learned"
            and spec.ffn == "plain" and spec.activation == "gelu_new"):
        p = spec.dropout
        pa = spec.attention_dropout if spec.attention_dropout is not None else p
        return gpt2.GPT2(V=spec.vocab_size, P=spec.max_positions, E=spec.d_model, H=H,
                         F=spec.d_ff, L=spec.n_layers, tied=spec.tie_embeddings,
                         resid_pdrop=p, embd_pdrop=p, attn_pdrop=pa)
    if (common and spec.norm == "rmsnorm" and spec.position == "rope"
            and spec.rotary_fraction == 1.0 and spec.ffn == "gated"
            and spec.activation == "silu"):
        pa = spec.attention_dropout if spec.attention_dropout is not None else spec.dropout
        return llama.Llama(V=spec.vocab_size, E=spec.d_model, H=H, Hkv=spec.n_kv_heads or H,
                           dh=spec.head_dim, F=spec.d_ff, L=spec.n_layers,
                           tied=spec.tie_embeddings, bias_q=spec.bias_q, bias_k=spec.bias_k,
                           bias_v=spec.bias_v, bias_o=spec.bias_o,
                           bias_mlp_in=spec.bias_ffn_in, bias_mlp_out=spec.bias_ffn_out,
                           attention_dropout=pa)
    raise TcalcError(f"{spec.name}: no op graph for this layout yet (the graph engine covers "
                    "GPT-2 and the Llama/Qwen2 family)")


def symbols(family: Family, run: Run) -> dict[str, Dim]:
    """The symbols the graph is written in, with their values."""
    m = Builder(run, family.sizes())
    return dict(m.dims)
