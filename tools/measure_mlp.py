"""What the dense MLP of a Nemotron-H layer saves for backward (developer tool, needs torch and
transformers): its squared ReLU (relu2, HF ReLUSquaredActivation). Forward hooks mark
when the first NemotronHMLP module (the dense MLP layer; the MoE layer's shared expert is the
other) runs; saved_tensors_hooks record the storages first saved inside it, parameters
excluded. tests/data/activations_relu2_cpu.json was written by

    python tools/measure_mlp.py > tests/data/activations_relu2_cpu.json
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
import transformers

CONFIG = Path(__file__).resolve().parents[1] / "tests/data/hf/variants/nemotron_h-tiny.json"


def measure(cfg: dict, dt: torch.dtype, B: int, T: int) -> int:
    torch.manual_seed(0)
    c = transformers.AutoConfig.for_model(**cfg)
    model = transformers.NemotronHForCausalLM(c).to(dt).train()
    mlp = next(m for m in model.modules() if type(m).__name__ == "NemotronHMLP")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    inside = [False]
    storages: dict[int, int] = {}
    mlp.register_forward_pre_hook(lambda m, a: inside.__setitem__(0, True))
    mlp.register_forward_hook(lambda m, a, o: inside.__setitem__(0, False))

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if inside[0] and s.data_ptr() not in params:
            storages[s.data_ptr()] = s.nbytes()
        return t

    ids = torch.randint(0, c.vocab_size, (B, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids, use_cache=False)
    return sum(storages.values())


def main() -> None:
    warnings.filterwarnings("ignore")
    cfg = json.loads(CONFIG.read_text())
    rows = [{"dtype": name, "B": B, "T": T, "saved_bytes": measure(cfg, dt, B, T)}
            for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16))
            for B, T in ((2, 64), (1, 128))]
    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                      "config": "tests/data/hf/variants/nemotron_h-tiny.json",
                      "module": "the first NemotronHMLP (mlp_hidden_act relu2)",
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
