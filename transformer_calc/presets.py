"""Load a model: a shipped preset name, a YAML preset file or a Hugging Face config.json.

The only module that imports yaml, and only ``yaml.safe_load``-style loading: no tags that
construct Python objects. Inputs are bounded (MAX_FILE_BYTES) before they are parsed.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path
from typing import Any

from transformer_calc.errors import PresetError, SpecError, value_error_text
from transformer_calc.spec import ARCH_FIELDS, FIELDS, ModelSpec

MAX_FILE_BYTES = 1 << 20  # 1 MiB: a preset or config.json is a few KiB; refuse anything huge
MAX_FLOW_DEPTH = 32  # [ / { nesting allowed in a YAML file (presets use 1)
REQUIRED = ("vocab_size", "d_model", "n_heads", "d_ff")
BIAS_KEYS = {"q": "bias_q", "k": "bias_k", "v": "bias_v", "o": "bias_o",
             "ffn_in": "bias_ffn_in", "ffn_out": "bias_ffn_out"}
SUFFIXES = (".yaml", ".yml", ".json", ".gguf")


def preset_dir() -> Path:
    """The shipped presets: configs/ at the top of the repo.

    A wheel installs it as transformer_calc/configs (pyproject.toml maps it as package data);
    a source checkout or editable install reads the repo's configs/ directly.
    """
    here = Path(__file__).resolve().parent
    packaged = here / "configs"
    return packaged if packaged.is_dir() else here.parent / "configs"


def preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


def load_model(ref: str) -> ModelSpec:
    """A preset name, or a path to a YAML preset or an HF config.json."""
    import os

    path = Path(ref)
    # a path when it looks like one; else a preset name first, so that a local folder or file
    # called like a preset does not shadow it
    looks_like_path = (ref.lower().endswith(SUFFIXES) or "/" in ref or os.sep in ref
                       or ref.startswith((".", "~")))
    candidate = preset_dir() / f"{ref}.yaml"
    if not looks_like_path and candidate.is_file():
        return load_file(candidate, shown=ref)
    if not path.exists() and not ref.startswith((".", "~", "/")):
        from transformer_calc.hub import parse

        if parse(ref) is not None:  # a Hub id or URL: its config.json
            from transformer_calc.hub import config_path

            config = config_path(ref)
            return load_file(config, shown=f"{ref} (config.json)")
    if looks_like_path or path.exists():
        path = path.expanduser()
        if path.is_dir():  # a model folder (a Hub snapshot): its config.json
            config = path / "config.json"
            if not config.is_file():
                raise PresetError(f"{ref}: a folder without a config.json, expected a .yaml or "
                                  "config.json file or a model folder")
            return load_file(config)
        return load_file(path)
    names = preset_names()
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise PresetError(f"unknown preset '{ref}'{hint} (`tcalc presets` lists all {len(names)}; "
                      "a path to a .yaml or config.json file also works)")


def read_text(path: Path, shown: str | None = None) -> str:
    """The file's text, with every way of failing turned into one clean message."""
    import stat

    where = shown or str(path)
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise PresetError(f"{where}: is a directory, expected a .yaml or config.json file")
        if not stat.S_ISREG(mode):
            # a FIFO would block forever, /dev/zero never ends: only regular files are read
            raise PresetError(f"{where}: not a regular file (a pipe, device or socket), "
                              "expected a .yaml or config.json file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise PresetError(f"{where}: {size:,} bytes, larger than the {MAX_FILE_BYTES:,}-byte "
                              "limit for a model file")
        with path.open("rb") as f:  # read at most the limit, whatever the file grows to
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise PresetError(f"{where}: larger than the {MAX_FILE_BYTES:,}-byte limit for a "
                              "model file")
    except FileNotFoundError:
        raise PresetError(f"{where}: no such file") from None
    except OSError as e:
        raise PresetError(f"{where}: cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PresetError(f"{where}: not UTF-8 text (byte {e.start})") from None


def flow_depth(text: str) -> int:
    """Deepest nesting of [ and { (brackets inside strings count too: an over-estimate)."""
    if text.count("[") + text.count("{") <= MAX_FLOW_DEPTH:
        return 0  # cannot nest deeper than the brackets it has: skip the scan
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return deepest


@functools.cache
def _strict_loader() -> Any:
    """PyYAML's safe loader, refusing what YAML 1.1 reads differently from what people mean:
    octal (012 is 10), base-60 (51:12 is 3072), yes/no/on/off as booleans, NaN and
    infinities, and a key given twice (the last silently wins). Each is an error with its
    line; quoting the value or writing it plainly is the fix the message names."""
    import re

    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    octal = re.compile(r"[-+]?0[0-7_]+$")
    sexagesimal = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$")

    def refuse(node: Any, why: str) -> None:
        raise yaml.constructor.ConstructorError(None, None, why, node.start_mark)

    class Strict(base):  # type: ignore[misc, valid-type]
        def construct_yaml_int(self, node: Any) -> Any:
            text = self.construct_scalar(node)
            if octal.match(text):
                refuse(node, f"{text} is octal in YAML 1.1 ({int(text.replace('_', ''), 8)}); "
                             "write it without the leading zero, or quote it")
            if sexagesimal.match(text):
                refuse(node, f"{text} is a base-60 number in YAML 1.1; quote it if it is text")
            return super().construct_yaml_int(node)

        def construct_yaml_float(self, node: Any) -> Any:
            text = self.construct_scalar(node)
            if sexagesimal.match(text):
                refuse(node, f"{text} is a base-60 number in YAML 1.1; quote it if it is text")
            value = super().construct_yaml_float(node)
            if value != value or value in (float("inf"), float("-inf")):
                refuse(node, f"{text} is not a finite number")
            return value

        def construct_yaml_bool(self, node: Any) -> Any:
            text = self.construct_scalar(node)
            if text.lower() not in ("true", "false"):
                refuse(node, f"{text} is a boolean in YAML 1.1; write true or false, or quote "
                             "it if it is text")
            return super().construct_yaml_bool(node)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # a merge key (<<: *base): merged below, its keys overridable
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, str) and key in seen:
                    refuse(key_node, f"duplicate key '{key}' (the last would silently win)")
                if isinstance(key, str):
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    Strict.add_constructor("tag:yaml.org,2002:int", Strict.construct_yaml_int)
    Strict.add_constructor("tag:yaml.org,2002:float", Strict.construct_yaml_float)
    Strict.add_constructor("tag:yaml.org,2002:bool", Strict.construct_yaml_bool)
    Strict.add_constructor("tag:yaml.org,2002:map", Strict.construct_yaml_map)
    return Strict


def parse_yaml(text: str, where: str) -> Any:
    import yaml

    # libyaml's composer recurses in C without a guard: 100,000 nested '[' crash the
    # process (seen with PyYAML 6.0.3). Presets are flat, so refuse deep flow nesting first.
    if flow_depth(text) > MAX_FLOW_DEPTH:
        raise PresetError(f"{where}: invalid YAML: nested more than {MAX_FLOW_DEPTH} levels deep")
    loader = _strict_loader()
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 -- a SafeLoader, never yaml.Loader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        pos = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = " ".join(str(e.problem or e.context).split())
        raise PresetError(f"{where}: invalid YAML{pos}: {what}",
                          line=mark.line + 1 if mark else None) from None
    except yaml.reader.ReaderError as e:
        raise PresetError(f"{where}: invalid YAML: {e.reason} (character {e.character!r} at "
                          f"position {e.position})") from None
    except yaml.YAMLError as e:
        raise PresetError(f"{where}: invalid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise PresetError(f"{where}: invalid YAML: nested too deeply") from None
    except ValueError as e:  # e.g. an integer of over 4,300 digits (sys.int_info)
        raise PresetError(f"{where}: invalid YAML: {value_error_text(e)}") from None


def load_file(path: Path, shown: str | None = None) -> ModelSpec:
    where = shown or str(path)
    if path.suffix.lower() == ".gguf":  # llama.cpp: its header only
        import stat

        from transformer_calc.gguf_file import hf_config, read_gguf
        from transformer_calc.hf import spec_from_hf

        try:
            if not stat.S_ISREG(path.stat().st_mode):
                raise PresetError(f"{where}: not a regular file, expected a .gguf file")
        except FileNotFoundError:
            raise PresetError(f"{where}: no such file") from None
        return spec_from_hf(hf_config(read_gguf(path), where), where,
                            path.stem.replace(" ", "-"))
    text = read_text(path, shown)
    if path.suffix.lower() == ".json":
        from transformer_calc.hf import spec_from_hf_text

        return spec_from_hf_text(text, where)
    data = parse_yaml(text, where)
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise PresetError(f"{where}: expected a mapping of keys (name: ..., d_model: ...), "
                          f"got {kind}")
    default_name = path.stem
    try:
        return spec_from_mapping(data, default_name)
    except SpecError as e:
        raise e.at(where) from None


def spec_from_mapping(data: dict[Any, Any], default_name: str = "custom") -> ModelSpec:
    """A preset mapping (YAML keys) -> ModelSpec. Raises SpecError naming the key."""
    values: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise SpecError(str(key), "string keys", key)
        if key == "bias":
            values.update(_bias(value))
        elif key in FIELDS:
            values[key] = value
        else:
            known = list(FIELDS) + ["bias"]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "see the README for the keys"
            raise SpecError(key, hint, unknown=True)
    missing = [k for k in REQUIRED if k not in values]
    arch = values.get("arch", "decoder")
    if arch == "encoder-decoder":
        missing += [k for k in ("n_encoder_layers", "n_decoder_layers") if k not in values]
    elif "n_layers" not in values:
        missing.append("n_layers")
    if missing:
        raise SpecError(missing[0], "to be present (required: " + ", ".join(missing) + ")",
                        None)
    values.setdefault("name", default_name)
    return build_spec(values)


def build_spec(values: dict[str, Any]) -> ModelSpec:
    """ModelSpec(**values); callers have checked the keys, the spec checks the values."""
    return ModelSpec(**values)


def _bias(value: Any) -> dict[str, bool]:
    if isinstance(value, bool):
        return {field: value for field in BIAS_KEYS.values()}
    if not isinstance(value, dict):
        raise SpecError("bias", "true, false, or a mapping of " + ", ".join(BIAS_KEYS), value)
    out = {}
    for k, v in value.items():
        if k not in BIAS_KEYS:
            close = difflib.get_close_matches(str(k), list(BIAS_KEYS), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise SpecError(f"bias.{k}", f"{hint}(bias keys: {', '.join(BIAS_KEYS)})",
                            unknown=True)
        if not isinstance(v, bool):
            raise SpecError(f"bias.{k}", "true or false", v)
        out[BIAS_KEYS[k]] = v
    return out


def spec_to_mapping(spec: ModelSpec) -> dict[str, Any]:
    """The YAML mapping for a spec: identity keys, then every architecture field that differs
    from its default (bias folded into one mapping), so the file stays short and exact."""
    out: dict[str, Any] = {}
    for key in ("name", "description", "source", "expected_params", "expected_params_source",
                "note", "dropout"):
        value = getattr(spec, key)
        if value not in ("", None, 0.0):
            out[key] = value
    biases = {}
    for f in ARCH_FIELDS:
        value = getattr(spec, f.name)
        if f.name.startswith("bias_"):
            biases[f.name[5:]] = value
        elif f.name in REQUIRED or value != f.default:
            out[f.name] = value
    if all(biases.values()) or not any(biases.values()):
        out["bias"] = all(biases.values())
    else:
        out["bias"] = biases
    return out


def dump_yaml(spec: ModelSpec) -> str:
    import yaml

    return yaml.safe_dump(spec_to_mapping(spec), sort_keys=False, allow_unicode=True, width=100)


def apply_overrides(spec: ModelSpec, overrides: dict[str, Any]) -> ModelSpec:
    """What-if: the spec with some architecture fields replaced (validated again)."""
    changes = {k: v for k, v in overrides.items() if v is not None
               and v != getattr(spec, k, None)}
    if not changes:
        return spec
    if spec.expected_params is None:
        return spec.replace(**changes)
    # a deliberate what-if is not a reference that differs: the preset's reference
    # count belongs to the unchanged model, so it is set aside and said so
    what = ", ".join(f"{k} = {v}" for k, v in sorted(changes.items()))
    note = (f"what-if ({what}): the preset's reference count {spec.expected_params:,} is for "
            "the unchanged model")
    return spec.replace(**changes, expected_params=None, expected_params_source="",
                        note="; ".join(n for n in (spec.note, note) if n))
