"""Low-rank and kernel attention and Primer: parameters and FLOPs pinned from the
public implementations, memory linear in T, and where each pays off against dense attention.

tests/data/efficient_reference.json was written by `python tools/reference_efficient.py`
(torch 2.13.0 CPU, linformer 0.2.3, performer-pytorch 1.1.4; FLOPs by
torch.utils.flop_counter.FlopCounterMode)."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from transformer_calc.flops import count_flops, crossover
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params
from transformer_calc.presets import spec_from_mapping

REF = json.loads((DATA / "efficient_reference.json").read_text())

# LinformerLM(num_tokens=20000, dim=512, seq_len=4096, depth=12, k=256, heads=8) as a preset:
# bias only on to_out, pre-norm LayerNorm, a GELU FFN of 4 · dim with biases, learned
# positions, no final norm, an untied head with a bias
LINFORMER_LM = dict(name="linformer-lm", arch="decoder", vocab_size=20000, d_model=512,
                    n_layers=12, n_heads=8, d_ff=2048, max_positions=4096, position="learned",
                    activation="gelu", norm="layernorm", final_norm=False, bias_q=False,
                    bias_k=False, bias_v=False, bias_o=True, tie_embeddings=False,
                    lm_head_bias=True, attention_mechanism="linformer", linformer_k=256)


def spec(**kw):  # type: ignore[no-untyped-def]
    return spec_from_mapping({**LINFORMER_LM, **kw})


@pytest.mark.parametrize("sharing", ["headwise", "kv"])
def test_linformer_lm_parameters_equal_the_package(sharing: str) -> None:
    assert count_params(spec(linformer_sharing=sharing)).total == \
        REF["linformer_lm_params"][sharing]


def test_linformer_other_sharings_by_the_paper() -> None:
    # Wang et al. 2020, Sec. 4: a pair per head (none), or one matrix for all layers
    base = count_params(spec()).total
    n_k = 4096 * 256
    assert count_params(spec(linformer_sharing="none")).total == base + 12 * (16 - 2) * n_k
    assert count_params(spec(linformer_sharing="layerwise")).total == base - 12 * 2 * n_k + n_k


def _attention_flops(s, T: int) -> int:  # type: ignore[no-untyped-def]
    rows = count_flops(s, T).rows
    return T * sum(r[1] for r in rows if ".attn." in r[0])


@pytest.mark.parametrize("T", [1024, 4096])
def test_linformer_attention_flops_equal_flop_counter(T: int) -> None:
    assert _attention_flops(spec(n_layers=1), T) == REF["linformer_attention_flops"][str(T)]


@pytest.mark.parametrize(("m", "T"), [(256, 1024), (256, 4096), (0, 1024), (0, 4096)])
def test_performer_attention_flops_and_params(m: int, T: int) -> None:
    # performer_pytorch.SelfAttention(dim=512, heads=8, causal=False, nb_features=m): to_q,
    # to_k, to_v without bias, to_out with one; m = 0 is its default int(64 · ln 64) = 266
    s = spec(n_layers=1, attention_mechanism="performer", performer_features=m)
    ref = REF["performer"][str(m)]
    assert _attention_flops(s, T) == ref["flops"][str(T)]
    attn_params = sum(i.total for i in count_params(s).items  # the block norm aside
                      if ".attn." in i.name and "norm" not in i.name)
    assert attn_params == ref["params"]
    features = next(iter(ref["buffers"].values()))[0]
    assert features == (m or 266)
    assert any("buffer" in n for n in count_params(s).notes)


def test_primer_depthwise_convolutions() -> None:
    # So et al. 2021 (Primer), multi-dconv-head attention: width-3 depthwise convolutions after
    # Q, K and V. Reference: torch.nn.Conv1d(512, 512, 3, groups=512) has 1,536 weights
    # (2,048 with bias) and 2 · 3 · 512 FLOPs per position
    ref = REF["primer_dconv"]
    plain = spec_from_mapping({**LINFORMER_LM, "attention_mechanism": "softmax"})
    primer = spec_from_mapping({**LINFORMER_LM, "attention_mechanism": "softmax",
                                "qkv_conv": 3, "activation": "relu2"})
    primer_b = spec_from_mapping({**LINFORMER_LM, "attention_mechanism": "softmax",
                                  "qkv_conv": 3, "qkv_conv_bias": True})
    extra = count_params(primer).total - count_params(plain).total
    assert extra == 12 * 3 * ref["params"]
    assert count_params(primer_b).total - count_params(plain).total == \
        12 * 3 * ref["params_with_bias"]
    conv = next(r for r in count_flops(primer, 1024).rows if r[0].endswith("qkv_conv"))[1]
    assert conv == 3 * ref["flops_T1024_padded"] // 1026


@pytest.mark.parametrize("mechanism", ["linformer", "performer", "linear"])
def test_memory_is_linear_in_t_and_pays_off_at_the_crossover(mechanism: str) -> None:
    s = spec(max_positions=16384, attention_mechanism=mechanism)
    dense = spec(max_positions=16384, attention_mechanism="softmax")
    st = Settings(precision="bf16", seq_len=4096)
    a4 = memory_report(s, st).activations.total
    a8 = memory_report(s, Settings(precision="bf16", seq_len=8192)).activations.total
    assert a8 <= 2 * a4 + 1024  # linear in T (the fixed part is tiny)
    d4 = memory_report(dense, st).activations.total
    d8 = memory_report(dense, Settings(precision="bf16", seq_len=8192)).activations.total
    assert d8 > 3 * d4  # dense eager: the T² probabilities dominate
    core, t = crossover(s)

    def dense_core(T: int) -> int:
        return sum(r[1] for r in count_flops(dense, T).rows
                   if r[0].endswith(("attn.scores", "attn.values")))

    assert dense_core(t) > core >= dense_core(t - 1)


def test_cli_overrides_select_the_mechanism(cli) -> None:
    data = cli.json("flops", "gpt2", "--attention-mechanism", "performer",
                    "--performer-features", "128", "--seq-len", "1024")
    names = {c["name"] for c in data["components"]}
    assert "decoder.attn.favor_features" in names and "decoder.attn.scores" not in names
    assert any("Performer" in n for n in data["notes"])


def test_a_yaml_preset_selects_linformer(cli, tmp_path) -> None:
    import yaml

    path = tmp_path / "linformer-lm.yaml"
    path.write_text(yaml.safe_dump(LINFORMER_LM))
    data = cli.json("params", str(path))
    assert data["total_params"] == REF["linformer_lm_params"]["headwise"]


def test_linformer_kv_flops_equal_flop_counter() -> None:
    # share_kv: no value projection, but E projects the keys twice (as keys and as values)
    s = spec(n_layers=1, linformer_sharing="kv")
    assert _attention_flops(s, 4096) == REF["linformer_kv_attention_flops"]["4096"]


@pytest.mark.parametrize(("case", "kw"), [
    ("linformer", {}), ("linformer_kv", {"linformer_sharing": "kv"}),
    ("performer_m256", {"attention_mechanism": "performer", "performer_features": 256})])
def test_attention_activations_equal_what_the_implementations_save(case: str, kw: dict) -> None:
    # saved_tensors_hooks on LinformerSelfAttention / performer_pytorch.SelfAttention in train
    # mode, fp32, B = 2, T = 1,024 (parameters excluded): tcalc's rows of the attention
    # sublayer (its norm aside, which the modules do not have)
    from transformer_calc.memory import activation_breakdown

    s = spec(n_layers=1, dropout=0.0, **kw)
    b = activation_breakdown(s, 2, 1024, act_bytes=4, device="cpu", attention="eager",
                             dropout=False)
    ours = sum(i.total for i in b.items if ".attn." in i.name and ".attn.norm" not in i.name)
    want = REF["saved_bytes_B2_T1024_fp32"][case]
    assert abs(ours - want) <= 0.001 * want


def test_linear_attention_keeps_its_feature_maps_and_context() -> None:
    """Linear attention's rows follow its operations (Katharopoulos et al. 2020: φ(Q), φ(K)
    each B·H·T·d_head, and the context φ(K)ᵀ·V of one d_head × d_head matrix per head)."""
    from transformer_calc.memory import activation_breakdown

    s = spec(max_positions=16384, attention_mechanism="linear")
    acts = activation_breakdown(s, 2, 512, act_bytes=2, device="cuda", attention="eager")
    H, dh = s.n_heads, s.head_dim
    rows = {i.name.rsplit(".", 1)[-1]: i.count for i in acts.items if ".attn." in i.name}
    assert rows["linear_features"] == 2 * 2 * H * 512 * dh * 2
    assert rows["linear_context"] == 2 * H * dh * dh * 2


def test_primer_convolutions_keep_their_inputs() -> None:
    """A depthwise torch.nn.Conv1d keeps its input for backward (torch 2.13.0: Conv1d(512,
    512, 3, groups=512) on a (2, 512, 64) input, ConvolutionBackward0._saved_input of that
    shape): Primer's three convolutions over Q, K and V keep B·T·(n_heads + 2·n_kv_heads)·
    d_head values."""
    from transformer_calc.memory import activation_breakdown

    primer = spec_from_mapping({**LINFORMER_LM, "attention_mechanism": "softmax",
                                "qkv_conv": 3})
    acts = activation_breakdown(primer, 2, 64, act_bytes=2, device="cuda", attention="eager")
    row = next(i for i in acts.items if i.name.endswith("attn.qkv_conv_input"))
    assert row.count == 2 * 64 * (primer.n_heads + 2 * primer.kv_heads) * primer.head_dim * 2
