"""--format json: the Doc's data, as is (exact integers; no NaN, no Infinity)."""

from __future__ import annotations

import json
from typing import Any

from transformer_calc.render.doc import Doc


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False)


def render(doc: Doc) -> str:
    return dumps(doc.data) + "\n"
