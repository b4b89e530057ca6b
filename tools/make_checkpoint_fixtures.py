"""Write the model folders tests/test_checkpoint.py reads (developer tool, needs torch,
transformers and safetensors): tiny real checkpoints, so the tests read headers exactly as
transformers and the safetensors package write them.

- tiny-llama: LlamaForCausalLM from a small config, save_pretrained (bf16, one file);
- tiny-llama-sharded: the same, save_pretrained(max_shard_size="100KB") (an index + shards);
- tiny-llama-extra: the same weights by safetensors.torch.save_file plus a copy of the tied
  head (lm_head.weight) and a rotary buffer, as some exported checkpoints hold them.

    python tools/make_checkpoint_fixtures.py tests/data/checkpoints
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

CONFIG = {"model_type": "llama", "vocab_size": 128, "hidden_size": 64,
          "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 256, "tie_word_embeddings": True}


def main() -> None:
    import safetensors.torch
    import transformers

    out = Path(sys.argv[1])
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(**CONFIG)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out / "tiny-llama")
    model.save_pretrained(out / "tiny-llama-sharded", max_shard_size="100KB")
    extra = out / "tiny-llama-extra"
    extra.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    state["model.rotary_emb.inv_freq"] = torch.ones(8, dtype=torch.float32)
    safetensors.torch.save_file(state, extra / "model.safetensors")
    (extra / "config.json").write_text((out / "tiny-llama" / "config.json").read_text())
    for folder in out.iterdir():  # keep only what the tests read
        for f in folder.iterdir():
            if f.name not in ("config.json", "model.safetensors.index.json") \
                    and not f.name.endswith(".safetensors"):
                f.unlink()
    print(json.dumps({f.name: sorted(p.name for p in f.iterdir()) for f in out.iterdir()}))


if __name__ == "__main__":
    main()
