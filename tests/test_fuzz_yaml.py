"""Presets from YAML's grammar: block and flow mappings, every scalar spelling YAML 1.1 reads
in a surprising way, anchors, aliases, merge keys, tags, duplicate keys. A preset is either
read (merge keys as YAML defines them: the explicit keys win) or refused in one line naming
what is wrong; never another exception. Derandomized."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_calc.errors import TcalcError
from transformer_calc.params import count_params
from transformer_calc.presets import load_file, spec_from_mapping

FUZZ = settings(max_examples=200, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
TINY = {"vocab_size": 100, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128}
KEYS = [*TINY, "name", "n_kv_heads", "tie_embeddings", "dropout", "expected_params", "arch",
        "bias", "norm", "activation", "max_positions", "<<", "nme", "d_model "]
# scalar spellings: plain, YAML 1.1's octal, base-60, booleans and NaN, huge and signed
# numbers, quoted, tagged (including tags that would build Python objects)
SCALARS = ["64", "4", "0", "-1", "012", "0o12", "0x40", "1:30", "1_000", "64.0", "1e3",
           ".nan", ".inf", "-.inf", "yes", "no", "on", "off", "true", "null", "~", "''",
           '"64"', "9" * 5000, "!!int 64", "!!str 64", "!!float 64", "!!binary aGk=",
           "!!python/object:os.system ls", "!!timestamp 2001-12-14", "[64]", "{a: 1}",
           "&x 64", "*x", "*missing", "[1, [2, [3]]]", "|\n  block", ">-\n  folded"]


def _load(text: str) -> object:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "preset.yaml"
        path.write_text(text, encoding="utf-8")
        return load_file(path)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(SCALARS)), max_size=12),
       st.booleans())
def test_any_mapping_is_a_preset_or_one_clean_error(pairs, flow) -> None:
    if flow:
        text = "{" + ", ".join(f"{k}: {v}" for k, v in pairs if "\n" not in v) + "}\n"
    else:
        text = "".join(f"{k}: {v}\n" for k, v in pairs)
    try:
        spec = _load(text)
    except TcalcError as e:
        assert "\n" not in str(e)
        return
    assert count_params(spec).total > 0  # type: ignore[arg-type]


@FUZZ
@given(st.dictionaries(st.sampled_from(list(TINY)), st.integers(1, 8), max_size=5),
       st.sampled_from(["inline", "alias", "list"]))
def test_merge_keys_read_as_yaml_defines_them(merged, style) -> None:
    # the keys merged in, and the preset's own keys (which win over merged ones): the
    # reference is the mapping YAML's merge gives, {**merged, **own}
    own = {k: v for k, v in TINY.items() if k not in merged or v % 2}
    merged = {k: v * 16 if k in ("vocab_size", "d_model", "d_ff") else v
              for k, v in merged.items()}
    if style == "inline":
        body = "<<: {" + ", ".join(f"{k}: {v}" for k, v in merged.items()) + "}\n"
    elif style == "list":
        body = "<<: [" + ", ".join(f"{{{k}: {v}}}" for k, v in merged.items()) + "]\n"
    else:  # an anchored mapping inside a list value YAML reads before the merge
        body = ("<<: &base {" + ", ".join(f"{k}: {v}" for k, v in merged.items()) + "}\n")
    text = "name: m\n" + body + "".join(f"{k}: {v}\n" for k, v in own.items())
    want = {**merged, **own}
    try:
        expected = count_params(spec_from_mapping(dict(want), "m")).total
    except TcalcError:
        expected = None
    try:
        got = count_params(_load(text)).total  # type: ignore[arg-type]
    except TcalcError as e:
        assert expected is None, (text, str(e))
        return
    assert got == expected, text
