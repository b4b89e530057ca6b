"""Reference LoRA trainable-parameter counts from peft (developer tool, needs torch,
transformers and peft): how the numbers pinned in tests/test_lora.py were obtained.

For each config: the class tcalc counts (hf.counted_class) built on the meta device from the
config (no memory, no weights), wrapped by peft.get_peft_model with LoraConfig(r=R,
target_modules=TARGETS) (peft's defaults otherwise: no bias, lora_dropout 0), and the
trainable parameters counted as peft's print_trainable_parameters does. One JSON line per
case, with the targeted modules' (in, out) shapes when --modules is given.

    python tools/reference_lora.py tests/data/hf/llama-3.1-8b.json -r 16 -t q_proj,v_proj
    python tools/reference_lora.py --fixture tests/data/lora_reference.json   # the pinned set

--fixture writes what tests/test_lora.py checks: every case of the registries (default and
small configs of every model type tcalc reads; all-linear, r = 8), every config.json in
tests/data/hf and its variants (all-linear, r = 16), the real configs with q_proj,v_proj and
a few with gate_proj,up_proj,down_proj, and the registries' small configs and the variants
with both target lists (r = 8). A case peft refuses keeps peft's error.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformer_calc.hf import counted_class  # noqa: E402


def lora_count(config: dict, cls_name: str, rank: int, targets: str,
               modules: bool = False) -> dict:
    import peft
    import transformers

    cfg = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = getattr(transformers, cls_name)(cfg)
        target: str | list[str] = targets if targets == "all-linear" else targets.split(",")
        lora = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=target))
    trainable, total = lora.get_nb_trainable_parameters()
    out = {"config": config, "class": cls_name, "rank": rank, "targets": targets,
           "trainable": trainable, "all": total,
           "versions": {"peft": peft.__version__, "transformers": transformers.__version__,
                        "torch": torch.__version__}}
    if modules:
        out["modules"] = sorted({
            f"{type(m.base_layer).__name__}:{m.in_features}->{m.out_features}"
            for m in lora.modules() if isinstance(m, peft.tuners.lora.LoraLayer)})
    return out


FIXTURE_SETS = (
    # (name, registry or glob of configs, rank, targets)
    ("registry", "tests/data/registry_cases.json", 8, "all-linear"),
    ("mixers", "tests/data/registry_mixers_T8.json", 8, "all-linear"),
    ("registry_more", "tests/data/registry_cases_more.json", 8, "all-linear"),
    ("causal_decoders", "tests/data/registry_causal_decoders.json", 8, "all-linear"),
    ("configs", "tests/data/hf/*.json", 16, "all-linear"),
    ("variants", "tests/data/hf/variants/*.json", 16, "all-linear"),
    ("q_v", "tests/data/hf/*.json", 8, "q_proj,v_proj"),
    ("registry_q_v", "tests/data/registry_cases.json", 8, "q_proj,v_proj"),
    ("mlp", "tests/data/hf/{llama-3.1-8b,mixtral-8x7b,qwen3-30b-a3b,deepseek-v3}.json", 8,
     "gate_proj,up_proj,down_proj"),
    # every small config and variant with the MLP's names and with q_proj,v_proj (PEFT adapts
    # what each name matches and refuses only a list matching nothing; shared experts carry
    # the MLP's names)
    ("registry_mlp", "tests/data/registry_cases.json", 8, "gate_proj,up_proj,down_proj"),
    ("registry_more_mlp", "tests/data/registry_cases_more.json", 8,
     "gate_proj,up_proj,down_proj"),
    ("variants_mlp", "tests/data/hf/variants/*.json", 8, "gate_proj,up_proj,down_proj"),
    ("registry_more_q_v", "tests/data/registry_cases_more.json", 8, "q_proj,v_proj"),
    ("variants_q_v", "tests/data/hf/variants/*.json", 8, "q_proj,v_proj"),
)


def fixture(out: Path) -> None:
    import glob

    import peft
    import transformers

    root = Path(__file__).resolve().parents[1]
    result: dict = {"versions": {"peft": peft.__version__,
                                 "transformers": transformers.__version__,
                                 "torch": torch.__version__},
                    "command": "python tools/reference_lora.py --fixture " + str(out),
                    "sets": []}
    for name, where, rank, targets in FIXTURE_SETS:
        cases: list[tuple[str, dict, str]] = []
        if where.endswith("registry_cases.json") or "registry_" in where:
            for i, case in enumerate(json.loads((root / where).read_text())["cases"]):
                cases.append((f"{where}#{i}", case["config"], case["class"]))
        else:
            head, _, tail = where.partition("{")
            names = [head + n + tail.split("}")[1] for n in tail.split("}")[0].split(",")] \
                if tail else sorted(glob.glob(str(root / where)))
            for path in names:
                config = json.loads((root / path).read_text())
                cases.append((str(Path(path).relative_to(root) if Path(path).is_absolute()
                                  else path), config, counted_class(config)))
        rows = []
        for where_case, config, cls_name in cases:
            try:
                rows.append({"case": where_case, "trainable":
                             lora_count(config, cls_name, rank, targets)["trainable"]})
            except Exception as e:  # noqa: BLE001 - peft's refusal is the reference
                rows.append({"case": where_case, "peft_error": f"{type(e).__name__}: {e}"[:160]})
        result["sets"].append({"name": name, "rank": rank, "targets": targets, "cases": rows})
    out.write_text(json.dumps(result, indent=0) + "\n")


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", type=Path)
    ap.add_argument("--registry", type=Path, help="a registry_cases.json: every case in it")
    ap.add_argument("-r", "--rank", type=int, default=8)
    ap.add_argument("-t", "--targets", default="all-linear")
    ap.add_argument("--modules", action="store_true")
    ap.add_argument("--fixture", type=Path, help="write the pinned reference set here")
    args = ap.parse_args()
    if args.fixture:
        fixture(args.fixture)
        return
    cases: list[tuple[dict, str]] = []
    for path in args.configs:
        config = json.loads(path.read_text())
        cases.append((config, counted_class(config)))
    if args.registry:
        for case in json.loads(args.registry.read_text())["cases"]:
            cases.append((case["config"], case["class"]))
    for config, cls_name in cases:
        try:
            row = lora_count(config, cls_name, args.rank, args.targets, args.modules)
        except Exception as e:  # noqa: BLE001 - a refusal is data: say which and why
            row = {"config": config, "class": cls_name, "error": f"{type(e).__name__}: {e}"[:300]}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
