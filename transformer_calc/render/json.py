"""--format json: the Doc's data, as is (exact integers; no NaN, no Infinity).

Escaped for the channel it travels on: valid JSON and valid UTF-8 whatever the names hold
(a file name's stray bytes, lone surrogates, are \\uXXXX escapes, never raw bytes), no raw
DEL or C1 control character (U+0085 ends a line for some readers, U+009B starts a terminal
escape), no raw U+2028 / U+2029, and no '##[' that a CI runner would run as a workflow command
(errors.runner_safe): each written as the \\uXXXX escape JSON gives every character."""

from __future__ import annotations

import json
import re
from typing import Any

from transformer_calc.render.doc import Doc

# outside strings JSON has none of these characters ('#' included), so each match is inside
# a string, where \\uXXXX is the same character
_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff]|#(?=#\\[)")


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    return "\\u0023" if ch == "#" else f"\\u{ord(ch):04x}"


def dumps(obj: Any) -> str:
    return _UNSAFE.sub(_escape, json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False))


def render(doc: Doc) -> str:
    return dumps(doc.data) + "\n"
