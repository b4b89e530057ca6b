"""Find model types whose activation estimate is off: one small drawn config of every type
the activation fixtures do not cover, measured once (developer tool, needs torch +
transformers).

The configs come from the registry fixtures (tests/data/registry_cases*.json, drawn by
tools/check_registry.py; the smallest that is not a type's default); each is measured as
tools/measure_activations_hf.py measures (saved_tensors_hooks, storages once, parameters and
buffers out, eager experts) at B=2 and a short T, eager and SDPA, fp32 and bf16, and printed
beside tcalc's estimate when they differ by more than --over percent. A type found here gets a
variant config in tests/data/hf/variants and its two usual shapes in a fixture.

    python tools/sweep_activations.py --over 10 > /tmp/sweep.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
DATA = ROOT / "tests" / "data"


def measured_types() -> set[str]:
    """The model types some activation fixture already measures."""
    from activation_errors import FIXTURES

    out = set()
    for name in FIXTURES:
        for line in (DATA / name).read_text().splitlines():
            config = json.loads(line)["config"]
            out.add(json.loads((DATA / "hf" / "variants" / config).read_text())["model_type"])
    return out


def drawn_configs(skip: set[str]) -> dict[str, dict]:
    """One small drawn config per model type not in ``skip`` (the registry's smallest)."""
    best: dict[str, tuple[int, dict]] = {}
    for path in sorted(DATA.glob("registry_*.json")):
        for case in json.loads(path.read_text())["cases"]:
            config, total = case["config"], case.get("total", 0)
            model_type = config.get("model_type")
            if model_type in skip or len(config) < 4 or not isinstance(total, int):
                continue  # a default config (model_type alone) is too big to run
            if model_type not in best or total < best[model_type][0]:
                best[model_type] = (total, config)
    return {t: c for t, (_, c) in sorted(best.items())}


def main() -> None:
    import transformers
    from measure_activations_hf import DTYPES, measure

    from transformer_calc.hf import spec_from_hf
    from transformer_calc.memory import activation_breakdown

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--over", type=float, default=10.0, help="print cases off by more (%%)")
    ap.add_argument("-T", type=int, default=32)
    ap.add_argument("types", nargs="*", help="only these model types (default: unmeasured)")
    args = ap.parse_args()
    configs = drawn_configs(set() if args.types else measured_types())
    for model_type, config in configs.items():
        if args.types and model_type not in args.types:
            continue
        spec = spec_from_hf(config, f"{model_type} (drawn)")
        for attention in ("eager", "sdpa"):
            for dtype, (_, act_bytes) in DTYPES.items():
                try:
                    got, _ = measure(config, attention, dtype, 2, args.T)
                except Exception as e:  # a drawn config transformers cannot run, no SDPA
                    print(json.dumps({"model_type": model_type, "attention": attention,
                                      "dtype": dtype, "skipped": str(e)[:100]}))
                    continue
                est = activation_breakdown(spec, 2, args.T, act_bytes=act_bytes, device="cpu",
                                           attention=attention, experts="eager",
                                           dropout=spec.trains_with_dropout).total
                error = 100 * (est - got) / got
                if abs(error) > args.over:
                    print(json.dumps({"model_type": model_type, "attention": attention,
                                      "dtype": dtype, "config": config, "measured_bytes": got,
                                      "tcalc_bytes": est, "error_pct": round(error, 1)}))


if __name__ == "__main__":
    main()
