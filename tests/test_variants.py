"""Each architecture variant's exact parameter cost, on a small spec.

The expected numbers are derived by hand from the tensor shapes the transformers modules
create (named in each test); the HF-level totals in test_hf.py check the same code paths
against transformers itself.
"""

from __future__ import annotations

import pytest

from transformer_calc import ModelSpec, count_params
from transformer_calc.errors import SpecError

E, H, F, V, L = 64, 8, 256, 100, 2
BASE = ModelSpec(name="t", vocab_size=V, d_model=E, n_layers=L, n_heads=H, d_ff=F,
                 max_positions=32, position="rope", final_norm=False, tie_embeddings=True)


def total(**changes) -> int:
    return count_params(BASE.replace(**changes)).total


def per_layer(**changes) -> int:
    return count_params(BASE.replace(**changes)).layer_total("decoder")


def test_base_layer() -> None:
    # 4 projections with bias + plain FFN with biases + 2 LayerNorms
    assert per_layer() == 4 * (E * E + E) + (E * F + F + F * E + E) + 2 * 2 * E


def test_multi_query_and_grouped_query() -> None:
    kv = 2 * (E * E + E)  # K and V at full width
    mqa = 2 * (E * 8 + 8)  # one K/V head of d_head 8
    gqa = 2 * (E * 16 + 16)  # two K/V heads
    assert per_layer() - per_layer(n_kv_heads=1) == kv - mqa
    assert per_layer() - per_layer(n_kv_heads=2) == kv - gqa
    with pytest.raises(SpecError):
        BASE.replace(n_kv_heads=3)


def test_explicit_d_head_changes_count_heads_alone_do_not() -> None:
    assert total(n_heads=4) == total(n_heads=16) == total()
    # Gemma-style: d_head independent of d_model: Q/K/V/O widths become n_heads · d_head.
    assert per_layer(d_head=16) - per_layer() == 4 * E * (H * 16 - E) + 3 * (H * 16 - E)


def test_biases_per_projection() -> None:
    assert per_layer() - per_layer(bias_q=False) == E
    assert per_layer() - per_layer(bias_k=False, bias_v=False) == 2 * E
    assert per_layer() - per_layer(bias_o=False) == E
    assert per_layer() - per_layer(bias_ffn_in=False) == F
    assert per_layer() - per_layer(bias_ffn_out=False) == E


def test_fused_qkv_costs_the_same() -> None:
    assert total(fused_qkv=True) == total()


def test_parallel_block_norms() -> None:
    two_norms = 2 * 2 * E
    assert per_layer(parallel_block=True, parallel_norms=1) == per_layer() - two_norms // 2
    assert per_layer(parallel_block=True, parallel_norms=2) == per_layer()


def test_gated_ffn_has_three_matrices() -> None:
    # SwiGLU / GeGLU: gate_proj, up_proj (d_model × d_ff) and down_proj (d_ff × d_model)
    assert per_layer(ffn="gated", activation="silu") - per_layer() == E * F + F
    assert (per_layer(ffn="gated", bias_ffn_in=False, bias_ffn_out=False)
            - per_layer(bias_ffn_in=False, bias_ffn_out=False)) == E * F


def test_norm_kinds_and_placement() -> None:
    assert per_layer() - per_layer(norm="rmsnorm") == 2 * E
    assert per_layer(norm="layernorm_nobias") == per_layer(norm="rmsnorm")
    assert total(norm_position="post") == total()
    assert total(final_norm=True) - total() == 2 * E
    assert total(embedding_norm=True) - total() == 2 * E


@pytest.mark.parametrize("position, expected", [
    ("sinusoidal", 0), ("rope", 0), ("alibi", 0), ("none", 0),
    ("learned", 32 * E),  # nn.Embedding(max_positions, d_model)
])
def test_absolute_positions(position: str, expected: int) -> None:
    assert total(position=position) - total(position="none") == expected


def test_partial_rotary_has_no_parameters() -> None:
    assert total(rotary_fraction=0.25) == total()


def test_learned_positions_with_opt_offset() -> None:
    # OPTLearnedPositionalEmbedding(max_positions + 2, d_model)
    assert total(position="learned", position_offset=2) - total(position="none") == 34 * E


def test_relative_bias_first_layer_or_every_layer() -> None:
    # T5: relative_attention_bias (buckets, n_heads) in block 0 only; "every": one per layer
    assert total(position="relative", relative_buckets=32) - total() == 32 * H
    assert total(position="relative", relative_scope="every") - total() == L * 32 * H


def test_mixture_of_experts_total_and_active() -> None:
    ffn = E * F + F + F * E + E
    b = count_params(BASE.replace(n_experts=8, top_k=2))
    dense = count_params(BASE)
    assert b.total - dense.total == L * (7 * ffn + E * 8)  # 8 experts + router (d_model × 8)
    assert b.active_total - dense.total == L * (1 * ffn + E * 8)
    shared = count_params(BASE.replace(n_experts=8, top_k=2, n_shared_experts=1))
    assert shared.total - b.total == L * ffn
    assert shared.active_total - b.active_total == L * ffn


def test_moe_validation() -> None:
    with pytest.raises(SpecError, match="top_k"):
        BASE.replace(n_experts=4, top_k=5)
    with pytest.raises(SpecError, match="top_k"):
        BASE.replace(top_k=2)


@pytest.mark.parametrize("hp, n_p", [(8, 1536), (16, 512)])
def test_attention_over_parameters_equals_the_ffn_it_replaces(hp: int, n_p: int) -> None:
    # Vaswani et al. 2017, appendix: both configurations at d_model 512 with d_pk = d_pv = 64
    # cost 2,097,152 per sublayer, like the 2 · 512 · 2048 FFN they replace.
    spec = ModelSpec(name="aop", vocab_size=37000, d_model=512, n_layers=6, n_heads=8,
                     d_ff=2048, position="sinusoidal", ffn="param_attention", pattn_heads=hp,
                     pattn_n=n_p, pattn_d_key=64, pattn_d_value=64)
    b = count_params(spec)
    sub = b.sum_prefix("decoder.ffn.pattn.") // 6  # the sublayer, its norm aside
    assert sub == 2_097_152 == 2 * 512 * 2048
    assert b.get("decoder.ffn.pattn.keys").count == hp * n_p * 64


def test_param_attention_requires_its_sizes() -> None:
    with pytest.raises(SpecError, match="pattn_heads"):
        BASE.replace(ffn="param_attention")


def test_untied_encoder_decoder_embeddings() -> None:
    ed = ModelSpec(name="ed", arch="encoder-decoder", vocab_size=V, d_model=E,
                   n_encoder_layers=1, n_decoder_layers=1, n_heads=H, d_ff=F,
                   position="sinusoidal")
    assert count_params(ed.replace(tie_encoder_decoder=False)).total - count_params(ed).total \
        == V * E
    assert count_params(ed.replace(tie_embeddings=False)).total - count_params(ed).total == V * E


def test_value_heads_of_their_own_width() -> None:
    # MiMoV2FlashAttention (transformers 5.23): v_proj is d_model × (n_kv_heads · v_head_dim),
    # o_proj (n_heads · v_head_dim) × d_model; Q and K keep head_dim
    dv = 4
    wide, narrow = per_layer(), per_layer(v_head_dim=dv)
    assert wide - narrow == (E * E + E) - (E * H * dv + H * dv) + (E * E) - (H * dv * E)
    spec = BASE.replace(v_head_dim=dv)
    from transformer_calc.plan import plan_of

    attn = plan_of(spec).groups[0].block.attn
    assert attn is not None and (attn.d_head, attn.d_v) == (E // H, dv)
    # rejected where the layout has no separate value projection of its own
    for other in ({"fused_qkv": True}, {"differential": True, "n_kv_heads": 2},
                  {"arch": "encoder-decoder", "n_layers": 0, "n_encoder_layers": 1,
                   "n_decoder_layers": 1},
                  {"qkv_conv": 3}):
        with pytest.raises(SpecError, match="v_head_dim"):
            BASE.replace(v_head_dim=dv, **other)


def test_sinks_in_the_sliding_layers_only() -> None:
    # MiMoV2FlashAttention: sinks = nn.Parameter(num_attention_heads) if is_swa else None
    spec = BASE.replace(attention_sinks=True, sinks_sliding_only=True, sliding_window=8,
                        layer_attention="1S 1F")
    names = [i.name for i in count_params(spec).items if i.name.endswith("sinks")]
    assert names == ["decoder.sliding.attn.sinks"]
    assert total(attention_sinks=True, sliding_window=8, layer_attention="1S 1F") \
        == count_params(spec).total + H
    with pytest.raises(SpecError, match="sinks_sliding_only"):
        BASE.replace(sinks_sliding_only=True, attention_sinks=True)
