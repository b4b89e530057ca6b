"""Obtain reference parameter counts from the real libraries (developer tool, needs torch).

Not used by the tests or CI: it is how the golden numbers pinned in tests/ were obtained.

    python tools/reference_counts.py tests/data/hf/*.json      # HF config.json files
    python tools/reference_counts.py --named tests/data/hf/gpt2.json   # every tensor
    python tools/reference_counts.py --builtin                  # the non-HF references
    python tools/reference_counts.py --write tests/data/hf_published_classes.json \
        tests/data/hf/{bge-m3,bge-reranker-base,...}.json         # a fixture, with provenance

Counts are of trainable parameters (requires_grad), each shared tensor once, exactly what
``sum(p.numel() for p in model.parameters() if p.requires_grad)`` gives. Models are built on
the meta device, so no memory is allocated and no weights are downloaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

# The "usual head class" per model_type: the one tcalc counts for a config.json. Imported from
# the package (pure Python, no torch), so the references and tcalc can never disagree on it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformer_calc.hf import counted_class  # noqa: E402


def trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_hf(config: dict, cls_name: str | None = None) -> torch.nn.Module:
    import transformers

    cfg = transformers.AutoConfig.for_model(**config)
    cls = getattr(transformers, cls_name or counted_class(config))
    with torch.device("meta"):
        return cls(cfg)


# The modules of a wrapper's tower and projector, by the names transformers gives them
TOWER_MODULES = (".visual.", ".vision_tower.", ".vision_model.", ".model.encoder.")
PROJECTOR_MODULES = (".multi_modal_projector",)


def parts(model: torch.nn.Module) -> dict[str, int]:
    """A wrapper's trainable parameters by part (tower, projector, language model), from its
    modules' names; {} for a model without a tower."""
    out = {"tower": 0, "projector": 0, "language_model": 0}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        dotted = f".{name}"
        part = "tower" if any(m in dotted for m in TOWER_MODULES) else "projector" if any(
            m in dotted for m in PROJECTOR_MODULES) else "language_model"
        out[part] += p.numel()
    return out if out["tower"] else {}


def builtin() -> dict[str, int]:
    """References that are not a config.json: torch.nn.Transformer and default HF configs."""
    import transformers

    out: dict[str, int] = {}
    # Vaswani et al. 2017 as torch.nn builds it: nn.Transformer (post-norm, with the final
    # encoder/decoder LayerNorm torch adds) + one nn.Embedding(37000, d) shared by encoder input,
    # decoder input and the pre-softmax projection (so counted once).
    for name, d, h, ff in (("transformer-base", 512, 8, 2048), ("transformer-big", 1024, 16, 4096)):
        with torch.device("meta"):
            t = torch.nn.Transformer(d_model=d, nhead=h, num_encoder_layers=6,
                                     num_decoder_layers=6, dim_feedforward=ff)
            emb = torch.nn.Embedding(37000, d)
        out[f"{name} (nn.Transformer + shared nn.Embedding(37000))"] = trainable(t) + trainable(emb)
    for heads in (4, 12):
        for vocab, label in ((30522, "pre-4.30 default vocab"), (50265, "4.30+ default vocab")):
            cfg = transformers.RobertaConfig(num_attention_heads=heads, vocab_size=vocab)
            with torch.device("meta"):
                m = transformers.RobertaForMaskedLM(cfg)
            key = f"RobertaForMaskedLM RobertaConfig(heads={heads}, vocab={vocab}) [{label}]"
            out[key] = trainable(m)
    out["RobertaConfig() defaults in this version"] = transformers.RobertaConfig().vocab_size
    for name, kw in (
        ("gpt2", {}),
        ("gpt2-medium", dict(n_embd=1024, n_layer=24, n_head=16)),
        ("gpt2-large", dict(n_embd=1280, n_layer=36, n_head=20)),
        ("gpt2-xl", dict(n_embd=1600, n_layer=48, n_head=25)),
    ):
        with torch.device("meta"):
            m = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kw))
        out[f"{name} GPT2LMHeadModel"] = trainable(m)
    for name, kw in (
        ("bert-base", {}),
        ("bert-large", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                            intermediate_size=4096)),
    ):
        with torch.device("meta"):
            bert = transformers.BertModel(transformers.BertConfig(**kw))
            out[f"{name} BertModel"] = trainable(bert)
            out[f"{name} BertForMaskedLM"] = trainable(
                transformers.BertForMaskedLM(transformers.BertConfig(**kw)))
    for name, kw in (
        ("roberta-base", {}),
        ("roberta-large", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                               intermediate_size=4096)),
    ):
        cfg = dict(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                   pad_token_id=1, layer_norm_eps=1e-5, **kw)
        with torch.device("meta"):
            out[f"{name} RobertaModel"] = trainable(
                transformers.RobertaModel(transformers.RobertaConfig(**cfg)))
            out[f"{name} RobertaForMaskedLM"] = trainable(
                transformers.RobertaForMaskedLM(transformers.RobertaConfig(**cfg)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", type=Path)
    ap.add_argument("--named", action="store_true", help="list every parameter tensor")
    ap.add_argument("--builtin", action="store_true", help="non-config.json references")
    ap.add_argument("--cls", help="override the head class")
    ap.add_argument("--write", type=Path, help="also write the counts to this JSON fixture: "
                    "each file's class, its parameters and its trainable ones")
    args = ap.parse_args()
    import transformers

    print(f"# torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr)
    rows: dict[str, dict[str, object]] = {}
    if args.builtin:
        for k, v in builtin().items():
            print(f"{v:>16,}  {k}")
    for path in args.configs:
        config = json.loads(path.read_text())
        model = build_hf(config, args.cls)
        print(f"{trainable(model):>16,}  {path.name}  {type(model).__name__}")
        rows[path.name] = {"class": type(model).__name__,
                           "params": sum(p.numel() for p in model.parameters()),
                           "trainable": trainable(model)} | parts(model)
        if args.named:
            for n, p in model.named_parameters():
                print(f"    {n:70s} {tuple(p.shape)!s:20s} {p.numel():>12,} "
                      f"{'' if p.requires_grad else 'frozen'}")
    if args.write:
        args.write.write_text(json.dumps({
            "provenance": f"tools/reference_counts.py --write, torch {torch.__version__}, "
                          f"transformers {transformers.__version__}: each file's class (its "
                          "architectures) built on the meta device; params: sum(p.numel() for p "
                          "in model.parameters()), trainable: those with requires_grad",
            "transformers": transformers.__version__, "files": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
