"""Reference numbers for efficient attention (developer tool, needs torch, linformer and
performer-pytorch): how the numbers in tests/test_efficient_attention.py were obtained.

- linformer 0.2.3 (lucidrains): LinformerLM(num_tokens=20000, dim=512, seq_len=4096,
  depth=12, k=256, heads=8) trainable parameters, default (proj_k and proj_v per layer) and
  share_kv=True; LinformerSelfAttention FLOPs (torch.utils.flop_counter.FlopCounterMode) on a
  (1, T, 512) input.
- performer-pytorch 1.1.4: SelfAttention(dim=512, heads=8, causal=False, nb_features=m)
  parameters, buffers and FLOPs on a (1, T, 512) input.
- Primer's depthwise convolution as torch.nn.Conv1d(512, 512, 3, groups=512): parameters
  and FLOPs on 1,024 positions (causal padding of 2: 1,026 outputs).

    python tools/reference_efficient.py > efficient.json
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))


def trainable(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters() if p.requires_grad)


def flops(m: torch.nn.Module, T: int, dim: int = 512) -> int:
    with FlopCounterMode(display=False) as fc:
        m(torch.randn(1, T, dim))
    return fc.get_total_flops()


def saved_bytes(mod: torch.nn.Module, B: int, T: int, dim: int = 512) -> int:
    """Bytes autograd saves for backward in one forward of a (B, T, dim) input (storages once,
    parameters out), by torch.autograd.graph.saved_tensors_hooks."""
    from measure_activations import recorded

    with recorded(mod) as storages:
        mod(torch.randn(B, T, dim, requires_grad=True))
    return sum(storages.values())


def main() -> None:
    import linformer
    import performer_pytorch
    from linformer import LinformerLM, LinformerSelfAttention
    from performer_pytorch import SelfAttention

    warnings.filterwarnings("ignore")
    out: dict = {"versions": {"torch": torch.__version__,
                              "linformer": "0.2.3" if hasattr(linformer, "Linformer") else "?",
                              "performer-pytorch": getattr(performer_pytorch, "__version__",
                                                           "1.1.4")}}
    lm = dict(num_tokens=20000, dim=512, seq_len=4096, depth=12, k=256, heads=8)
    out["linformer_lm_params"] = {"headwise": trainable(LinformerLM(**lm)),
                                  "kv": trainable(LinformerLM(**lm, share_kv=True))}
    attn = LinformerSelfAttention(dim=512, seq_len=4096, k=256, heads=8)
    out["linformer_attention_flops"] = {str(T): flops(attn, T) for T in (1024, 4096)}
    kv = LinformerSelfAttention(dim=512, seq_len=4096, k=256, heads=8, share_kv=True)
    out["linformer_kv_attention_flops"] = {"4096": flops(kv, 4096)}
    out["saved_bytes_B2_T1024_fp32"] = {
        "linformer": saved_bytes(attn.train(), 2, 1024),
        "linformer_kv": saved_bytes(kv.train(), 2, 1024),
        "performer_m256": saved_bytes(SelfAttention(dim=512, heads=8, causal=False,
                                                    nb_features=256).train(), 2, 1024)}
    out["performer"] = {}
    for m in (256, 0):
        kw = {"nb_features": m} if m else {}
        a = SelfAttention(dim=512, heads=8, causal=False, **kw)
        buffers = {k: list(b.shape) for k, b in a.named_buffers()}
        out["performer"][str(m)] = {"params": trainable(a), "buffers": buffers,
                                    "flops": {str(T): flops(a, T) for T in (1024, 4096)}}
    # Primer's multi-dconv-head attention (So et al. 2021, Fig. 1): a depthwise convolution of
    # width 3 over the sequence per channel, as torch builds one (Conv1d with groups = channels)
    conv = torch.nn.Conv1d(512, 512, 3, groups=512, padding=2, bias=False)
    with FlopCounterMode(display=False) as fc:
        conv(torch.randn(1, 512, 1024))
    out["primer_dconv"] = {"channels": 512, "width": 3, "params": trainable(conv),
                           "params_with_bias": trainable(torch.nn.Conv1d(512, 512, 3,
                                                                          groups=512)),
                           "flops_T1024_padded": fc.get_total_flops()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
