"""Results as text: each command's result is one Doc (reports.py); one renderer per format
(json.py, markdown.py, terminal.py) renders every Doc. Only terminal.py imports rich."""

from __future__ import annotations

import sys

from transformer_calc.render.doc import Doc
from transformer_calc.render.reports import (
    check_doc,
    compare_doc,
    explain_doc,
    flops_doc,
    github_annotations,
    gpus_doc,
    memory_doc,
    memory_overview_doc,
    params_dict,
    params_doc,
    presets_doc,
    sweep_doc,
)
from transformer_calc.render.units import human, human_bytes

__all__ = ["Doc", "check_doc", "compare_doc", "explain_doc", "flops_doc",
           "github_annotations", "gpus_doc", "human", "human_bytes", "memory_doc",
           "memory_overview_doc", "params_dict", "params_doc", "presets_doc", "show",
           "sweep_doc"]


def show(doc: Doc, fmt: str) -> None:
    """Print ``doc`` in ``fmt`` (table, json, markdown) on stdout."""
    if fmt == "table":
        from transformer_calc.render import terminal

        terminal.render(doc)
        return
    from transformer_calc.errors import printable
    from transformer_calc.render import json as json_format
    from transformer_calc.render import markdown

    # each format escapes for its channel: JSON its own way (render/json.py), markdown's
    # text made printable and inert for a CI log here
    text = json_format.render(doc) if fmt == "json" else printable(markdown.render(doc))
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()
