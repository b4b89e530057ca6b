"""List transformers' text model types, what each builds by default, and its parameters
(developer tool, needs torch + transformers): the inventory tcalc's coverage is checked against.

For every model_type in transformers' auto mappings for causal LM, masked LM and seq2seq LM,
build the mapped class from the type's default config on the meta device and print one JSON
line: model_type, class, trainable total (or why it does not build), and its parameter names
with shapes per distinct layer (layer indices folded to N).

    python tools/enumerate_model_types.py > /tmp/model_types.jsonl
"""

from __future__ import annotations

import json
import re
import sys
import warnings


def main() -> None:
    import torch
    import transformers
    from transformers.models.auto import modeling_auto as auto

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    maps = (("causal", auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
            ("masked", auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES),
            ("seq2seq", auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES))
    seen: set[str] = set()
    for task, mapping in maps:
        for model_type, cls_name in mapping.items():
            if model_type in seen:
                continue
            seen.add(model_type)
            row: dict = {"model_type": model_type, "task": task, "class": cls_name}
            try:
                cfg = transformers.AutoConfig.for_model(model_type)
                cls = getattr(transformers, cls_name)
                with torch.device("meta"):
                    model = cls(cfg)
                row["total"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
                shapes: dict[str, list[int]] = {}
                for name, p in model.named_parameters():
                    shapes.setdefault(re.sub(r"\.\d+\.", ".N.", name), list(p.shape))
                row["params"] = shapes
            except Exception as e:  # noqa: BLE001 - an inventory: record why, go on
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            print(json.dumps(row), flush=True)
    print(f"# torch {torch.__version__}, transformers {transformers.__version__}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
