"""Property-based and fuzz tests: invariants over generated architectures, and bad
input that must always end in one clean error line, never a traceback, hang or blow-up.

Example counts are bounded so the suite stays within seconds in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_calc import ModelSpec, count_params
from transformer_calc.cli import app
from transformer_calc.presets import dump_yaml, spec_from_mapping
from transformer_calc.render import params_dict

# CI runs the bounded default; TCALC_FUZZ_EXAMPLES=5000 make test fuzzes harder locally.
N = int(os.environ.get("TCALC_FUZZ_EXAMPLES", "150"))
FAST = settings(max_examples=N, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW = settings(max_examples=max(N // 6, 10), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def specs(draw, arch: str | None = None) -> ModelSpec:
    arch = arch or draw(st.sampled_from(["decoder", "encoder", "encoder-decoder"]))
    n_heads = draw(st.integers(1, 16))
    d_model = n_heads * draw(st.integers(1, 64))
    kv = draw(st.sampled_from([d for d in range(1, n_heads + 1) if n_heads % d == 0]))
    n_experts = draw(st.sampled_from([0, 0, 0, 2, 4, 8]))
    ffn = draw(st.sampled_from(["plain", "gated"] + (["param_attention"] if not n_experts
                                                     else [])))
    layers = {"n_layers": draw(st.integers(1, 48))} if arch != "encoder-decoder" else {
        "n_encoder_layers": draw(st.integers(1, 24)), "n_decoder_layers": draw(st.integers(1, 24))}
    return ModelSpec(
        name="gen", arch=arch, vocab_size=draw(st.integers(1, 300_000)), d_model=d_model,
        n_heads=n_heads, n_kv_heads=kv, d_ff=draw(st.integers(1, 65_536)),
        max_positions=draw(st.integers(0, 8192)),
        position=draw(st.sampled_from(["learned", "sinusoidal", "rope", "alibi", "relative",
                                       "none"])),
        position_offset=draw(st.integers(0, 2)),
        relative_scope=draw(st.sampled_from(["first", "every"])), ffn=ffn,
        norm=draw(st.sampled_from(["layernorm", "layernorm_nobias", "rmsnorm"])),
        final_norm=draw(st.booleans()), embedding_norm=draw(st.booleans()),
        parallel_block=draw(st.booleans()), parallel_norms=draw(st.integers(1, 2)),
        bias_q=draw(st.booleans()), bias_o=draw(st.booleans()),
        bias_ffn_in=draw(st.booleans()), tie_embeddings=draw(st.booleans()),
        tie_encoder_decoder=draw(st.booleans()), token_types=draw(st.integers(0, 4)),
        lm_head=arch != "encoder", pooler=draw(st.booleans()),
        mlm_head=arch == "encoder" and draw(st.booleans()),
        n_experts=n_experts, top_k=draw(st.integers(1, n_experts)) if n_experts else 0,
        n_shared_experts=draw(st.integers(0, 2)) if n_experts else 0,
        pattn_heads=4 if ffn == "param_attention" else 0,
        pattn_n=64 if ffn == "param_attention" else 0,
        pattn_d_key=16 if ffn == "param_attention" else 0,
        pattn_d_value=16 if ffn == "param_attention" else 0,
        **layers,
    )


# -- invariants ----------------------------------------------------------------------------

@FAST
@given(specs())
def test_total_is_the_sum_of_components(spec: ModelSpec) -> None:
    b = count_params(spec)
    assert b.total == sum(i.count * i.repeat for i in b.items)
    assert all(i.count >= 0 for i in b.items)
    assert 0 < b.active_total <= b.total


@FAST
@given(specs(), st.data())
def test_head_count_never_changes_the_total(spec: ModelSpec, data) -> None:
    # Multi-head attention: d_head = d_model / n_heads, so Q, K, V, O stay d_model × d_model
    # whatever the head count. Not so for T5's relative bias table (buckets × heads): excluded.
    spec = spec.replace(position="rope" if spec.position == "relative" else spec.position)
    divisors = [h for h in range(1, spec.d_model + 1) if spec.d_model % h == 0][:32]
    heads = data.draw(st.sampled_from(divisors))
    assert count_params(spec.replace(n_heads=heads, n_kv_heads=heads)).total == count_params(
        spec.replace(n_kv_heads=spec.n_heads)).total


@FAST
@given(specs(), st.data())
def test_grouped_query_total_depends_on_group_size_only(spec: ModelSpec, data) -> None:
    # K/V width = n_kv_heads · d_head = d_model / (n_heads / n_kv_heads): the group size.
    spec = spec.replace(position="rope" if spec.position == "relative" else spec.position)
    group = spec.n_heads // spec.kv_heads
    options = [h for h in range(group, spec.d_model + 1, group) if spec.d_model % h == 0][:16]
    heads = data.draw(st.sampled_from(options))
    assert count_params(spec.replace(n_heads=heads, n_kv_heads=heads // group)).total == \
        count_params(spec).total


@FAST
@given(specs())
def test_totals_grow_with_layers_and_width(spec: ModelSpec) -> None:
    total = count_params(spec).total
    if spec.arch == "encoder-decoder":
        deeper = spec.replace(n_decoder_layers=spec.n_decoder_layers + 1)
    else:
        deeper = spec.replace(n_layers=spec.n_layers + 1)
    assert count_params(deeper).total > total
    wider = spec.replace(d_model=spec.d_model + spec.n_heads)  # d_head + 1
    assert count_params(wider).total > total


@FAST
@given(specs(arch="decoder"))
def test_tied_and_untied_differ_by_vocab_times_d_model(spec: ModelSpec) -> None:
    tied = count_params(spec.replace(tie_embeddings=True)).total
    untied = count_params(spec.replace(tie_embeddings=False)).total
    assert untied - tied == spec.vocab_size * spec.d_model


@FAST
@given(specs())
def test_json_round_trips_with_exact_integers(spec: ModelSpec) -> None:
    data = params_dict(count_params(spec), spec)
    again = json.loads(json.dumps(data))
    assert again == data
    assert again["total_params"] == sum(c["count"] for c in again["components"])


@FAST
@given(specs())
def test_yaml_round_trip_is_the_same_spec(spec: ModelSpec) -> None:
    assert spec_from_mapping(yaml.safe_load(dump_yaml(spec))) == spec


@SLOW
@given(specs())
def test_cli_agrees_with_the_core(cli, tmp_path_factory, spec: ModelSpec) -> None:
    path = tmp_path_factory.mktemp("spec") / "gen.yaml"
    path.write_text(dump_yaml(spec))
    b = count_params(spec)
    data = cli.json("params", str(path))
    assert data["total_params"] == b.total and data["active_params"] == b.active_total
    check = json.loads(cli("check", str(path), "--format", "json").stdout)
    assert check["files"][0]["total_params"] == b.total


# -- fuzzed bad input ----------------------------------------------------------------------

def assert_clean_failure(runner, path: Path) -> None:
    """Exit 2 and exactly one line on stderr starting 'Error: ', or a valid model (exit 0)."""
    r = runner.invoke(app, ["params", str(path), "--format", "json"])
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception  # a traceback would reach the user: fail with it
    if r.exit_code == 0:
        json.loads(r.stdout)
        return
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr


@pytest.mark.parametrize("name", ["model.yaml", "config.json"])
@FAST
@given(data=st.binary(max_size=2000))
def test_random_bytes(cli, tmp_path_factory, name: str, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / name
    path.write_bytes(data)
    assert_clean_failure(cli.runner, path)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                    st.floats(allow_nan=True), st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)
KEYS = ["vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "n_kv_heads", "d_head",
        "arch", "bias", "position", "ffn", "n_experts", "top_k", "tie_embeddings", "nmae"]


@FAST
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=10))
def test_random_mappings(cli, tmp_path_factory, mapping) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "model.yaml"
    path.write_text(yaml.safe_dump(mapping))
    assert_clean_failure(cli.runner, path)


@FAST
@given(st.dictionaries(st.sampled_from(
    ["model_type", "hidden_size", "num_attention_heads", "num_hidden_layers",
     "intermediate_size", "vocab_size", "num_key_value_heads", "head_dim", "n_embd",
     "feed_forward_proj", "hidden_act", "tie_word_embeddings", "bias"]),
    st.one_of(values, st.sampled_from(["llama", "t5", "gpt2", "falcon", "bart", "gated-gelu"])),
    max_size=8))
def test_random_config_json(cli, tmp_path_factory, mapping) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "config.json"
    path.write_text(json.dumps(mapping))
    assert_clean_failure(cli.runner, path)


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, n in zip("abcdefgh", "bcdefghi", strict=True)) + "d_model: *i\n"

CASES = {
    "empty": b"",
    "list": b"- 1\n- 2\n",
    "scalar": b"42\n",
    "deep_flow": b"a: " + b"[" * 100_000,
    "deep_json": b"[" * 100_000,
    "deep_block": "".join(" " * i + "a:\n" for i in range(2000)).encode(),
    "huge_int": b"d_model: " + b"9" * 5000 + b"\n",
    "big_int": b"vocab_size: 1\nd_model: 99999999999999999999\nn_layers: 1\nn_heads: 1\nd_ff: 1\n",
    "negative": b"vocab_size: -5\nd_model: 8\nn_layers: 1\nn_heads: 1\nd_ff: 1\n",
    "float_for_int": b"vocab_size: 100\nd_model: 768.0\nn_layers: 1\nn_heads: 1\nd_ff: 1\n",
    "bool_for_int": b"vocab_size: 100\nd_model: true\nn_layers: 1\nn_heads: 1\nd_ff: 1\n",
    "nan": b"vocab_size: 100\nd_model: .nan\nn_layers: 1\nn_heads: 1\nd_ff: 1\n",
    "alias_bomb": BILLION_LAUGHS.encode(),
    "python_object": b"d_model: !!python/object/apply:os.system ['true']\n",
    "python_name": b"d_model: !!python/name:os.system\n",
    "non_utf8": b"name: \xff\xfe\n",
    "utf16_bom": "name: x\n".encode("utf-16"),
    "nul_bytes": b"name: a\x00b\n",
    "tabs": b"\tname: x\n",
    "duplicate_and_weird_keys": b"? [a, b]\n: 1\n",
    "rotary_string": b"vocab_size: 1\nd_model: 8\nn_layers: 1\nn_heads: 1\nd_ff: 1\n"
                     b"rotary_fraction: half\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_known_bad_inputs(cli, tmp_path, name: str) -> None:
    path = tmp_path / ("config.json" if name == "deep_json" else "model.yaml")
    path.write_bytes(CASES[name])
    r = cli.runner.invoke(app, ["params", str(path)])
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code == 2, (name, r.stdout)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(f"Error: {path}"), r.stderr


def test_alias_bomb_message_stays_short(cli, tmp_path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BILLION_LAUGHS)
    r = cli("params", str(path), code=2)
    assert len(r.stderr) < 400


def test_directory_and_huge_file(cli, tmp_path) -> None:
    cli("params", str(tmp_path), code=2)
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.seek(50 * 2**20)  # sparse 50 MiB file: refused by size, never read
        f.write(b"\n")
    assert "larger than the 1,048,576-byte limit" in cli("params", str(big), code=2).stderr


def test_real_process_never_prints_a_traceback(tmp_path) -> None:
    """The installed entry point, as a user runs it, on a crash-prone input."""
    path = tmp_path / "deep.yaml"
    path.write_bytes(CASES["deep_flow"])
    r = subprocess.run([sys.executable, "-m", "transformer_calc", "params", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr == f"Error: {path}: invalid YAML: nested more than 32 levels deep\n"


# The keys these model types read (BitNet, ModernBERT, FSMT, ALBERT/ELECTRA/RemBERT, RoCBERT,
# Mllama, DiffLlama, Gemma 4, Beam), each given wrong types, zeros, negatives and lists: every
# draw is counted or refused with one clean error (a Beam config of 0 layers among them:
# its layer types are derived from the count).
_NEW_TYPES = ("bitnet", "modernbert", "modernbert-decoder", "fsmt", "electra", "rembert",
              "albert", "roc_bert", "mllama", "diffllama", "gemma4_text",
              "gemma4_unified_text", "beam")
_NEW_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "intermediate_size", "vocab_size", "local_attention", "global_attn_every_n_layers",
             "src_vocab_size", "embedding_size", "input_embedding_size",
             "output_embedding_size", "num_hidden_groups", "inner_group_num", "shape_embed_dim",
             "cross_attention_layers", "num_kv_shared_layers", "global_head_dim",
             "hidden_size_per_layer_input", "vocab_size_per_layer_input", "num_experts",
             "top_k_experts", "moe_intermediate_size", "enable_moe_block", "layer_types",
             "sliding_window", "attention_k_eq_v", "num_global_key_value_heads", "head_dim",
             "mlp_layer_types", "tie_word_embeddings", "concat_input", "attention_dropout")
_NEW_VALUES = (0, -1, 1, 3, "x", None, True, 1.5, [], [1, 2], {"a": 1}, 10**13,
               ["full_attention"], ["sparse"])


def test_encoder_and_decoder_types_fail_cleanly_on_any_value() -> None:
    import random

    from transformer_calc.errors import TcalcError
    from transformer_calc.flops import count_flops
    from transformer_calc.hf import spec_from_hf
    from transformer_calc.memory import Settings, memory_report
    from transformer_calc.params import count_params

    rng = random.Random(9)  # noqa: S311 - a reproducible draw, not a secret
    # every key alone at its edges, then random pairs and triples
    draws = [(t, {k: v}) for t in _NEW_TYPES for k in _NEW_KEYS for v in (0, None, "x", -1)]
    draws += [(rng.choice(_NEW_TYPES), {rng.choice(_NEW_KEYS): rng.choice(_NEW_VALUES)
                                        for _ in range(rng.randint(2, 3))}) for _ in range(600)]
    for model_type, keys in draws:
        data = {"model_type": model_type, "text_config": keys} if model_type == "mllama" \
            else {"model_type": model_type, **keys}
        try:
            spec = spec_from_hf(data)
            assert count_params(spec).total > 0
            assert count_flops(spec, 64).total > 0
            assert memory_report(spec, Settings(seq_len=64)).per_gpu.total > 0
        except TcalcError:
            pass


# Every type tcalc reads, with each shape key it may divide by or count layers with set to 0,
# null, a string or a list: one clean error or a count, never a traceback (a fuzz found
# ZeroDivisionError, IndexError and TypeError in 9 places of the records before
# POSITIVE_KEYS and the required-key checks).
_SHAPE_KEYS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "hidden_size", "intermediate_size", "decoder_sparse_step", "attn_layer_period",
               "full_attention_interval", "qk_rope_head_dim", "qk_nope_head_dim",
               "kv_lora_rank", "linear_num_value_heads", "mamba_n_heads", "n_head", "n_layer",
               "num_layers", "num_heads", "num_experts", "num_experts_per_tok")


def test_every_type_fails_cleanly_on_shape_keys_at_their_edges() -> None:
    from transformer_calc.errors import TcalcError
    from transformer_calc.flops import count_flops
    from transformer_calc.hf import HEAD_CLASS, spec_from_hf
    from transformer_calc.memory import Settings, memory_report
    from transformer_calc.params import count_params

    for model_type in sorted(HEAD_CLASS):
        for key in _SHAPE_KEYS:
            for value in (0, None, "x", []):
                keys = {key: value}
                data = {"model_type": model_type, "text_config": keys} \
                    if model_type == "mllama" else {"model_type": model_type, **keys}
                try:
                    spec = spec_from_hf(data)
                    count_params(spec)
                    count_flops(spec, 16)
                    memory_report(spec, Settings(seq_len=16))
                except TcalcError:
                    pass
