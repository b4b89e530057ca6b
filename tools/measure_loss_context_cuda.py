"""Measure, on a CUDA GPU, what the published-memory recipes need that the other peak tools do
not: the CUDA context beside the caching allocator (nvidia-smi's per-process memory minus
torch.cuda.memory_reserved), and what the loss keeps for backward as torchtune and LitGPT
run it: the whole logits upcast inside the model (`output(h).float()`), CEWithChunkedOutputLoss
(8 chunks, each upcast in the loss) with and without torch.compile of its per-chunk
cross-entropy, and LitGPT's cross-entropy on 16-bit logits.

    python tools/measure_loss_context_cuda.py > tests/data/loss_context_cuda_h100.json

Each loss case: hidden states h (B, T, d) in bf16 requiring a gradient, a frozen bf16 head
(V, d); the bytes allocated after the loss (what its graph keeps, the logits freed as the
recipe frees them), the peak of forward and loss, and the peak of backward, all relative to
what was allocated before (h and the head).
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch
import torch.nn.functional as F

MiB = 2**20


def smi_used_mib() -> float:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True)
    import os

    for line in out.stdout.splitlines():
        pid, used = (x.strip() for x in line.split(","))
        if int(pid) == os.getpid():
            return float(used)
    return float("nan")


def context() -> dict[str, float]:
    """nvidia-smi's process memory minus what the caching allocator reserved, at three moments:
    after the first allocation, after a cuBLAS matmul, after an SDPA flash kernel."""
    out = {}
    x = torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    out["after_init_mib"] = smi_used_mib() - torch.cuda.memory_reserved() / MiB
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    out["after_cublas_mib"] = smi_used_mib() - torch.cuda.memory_reserved() / MiB
    q = torch.randn(1, 8, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    torch.cuda.synchronize()
    out["after_sdpa_mib"] = smi_used_mib() - torch.cuda.memory_reserved() / MiB
    del x, a, q
    return out


def ce_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels, reduction="sum")


def run(kind: str, B: int, T: int, d: int, V: int, chunks: int = 8) -> dict[str, float]:
    torch.cuda.empty_cache()
    h = torch.randn(B, T, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(V, d, device="cuda", dtype=torch.bfloat16) * 0.02
    labels = torch.randint(0, V, (B, T), device="cuda")
    ce = torch.compile(ce_sum) if kind == "chunked_compiled" else ce_sum
    for _step in range(2):  # the second step is measured (compile happens in the first)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if kind == "hf":  # transformers: 16-bit logits out of the model, upcast in the loss
            logits = F.linear(h, w)
            loss = F.cross_entropy(logits.float().view(-1, V), labels.view(-1))
        elif kind == "model_fp32":  # torchtune: output(h).float() in the model
            logits = F.linear(h, w).float()
            loss = F.cross_entropy(logits.view(-1, V), labels.view(-1))
        elif kind == "bf16":  # LitGPT: cross-entropy on the 16-bit logits
            logits = F.linear(h, w)
            loss = F.cross_entropy(logits.view(-1, V), labels.view(-1))
        else:  # torchtune's CEWithChunkedOutputLoss over the model's chunked output
            logits = [F.linear(c, w) for c in h.chunk(chunks, dim=1)]
            loss = sum(ce(lc.reshape(-1, V), lb.reshape(-1))
                       for lc, lb in zip(logits, labels.chunk(chunks, dim=1), strict=True))
        del logits
        torch.cuda.synchronize()
        kept = torch.cuda.memory_allocated() - base
        forward_peak = torch.cuda.max_memory_allocated() - base
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        backward_peak = torch.cuda.max_memory_allocated() - base
        h.grad = None
        del loss
    btv = B * T * V
    return {"kind": kind, "B": B, "T": T, "d": d, "V": V, "chunks": chunks if "chunk" in kind
            else 1, "kept_bytes": kept, "forward_peak_bytes": forward_peak,
            "backward_peak_bytes": backward_peak, "kept_per_btv": kept / btv,
            "forward_peak_per_btv": forward_peak / btv,
            "backward_peak_per_btv": backward_peak / btv}


def optimizer_in_backward(n: int = 8, d: int = 4096) -> dict[str, float]:
    """torchtune's optimizer_in_bwd: one torch AdamW per parameter stepped from its
    post-accumulate-grad hook, the gradient freed at once. n bf16 (d, d) layers, one warm-up
    step (the states are made in it), then the peak of forward + backward over what is
    allocated before it (weights and states)."""
    torch.cuda.empty_cache()
    layers = [torch.nn.Parameter(torch.randn(d, d, device="cuda", dtype=torch.bfloat16) * 0.01)
              for _ in range(n)]
    optims = {p: torch.optim.AdamW([p], lr=1e-4) for p in layers}

    def hook(p: torch.Tensor) -> None:
        optims[p].step()
        optims[p].zero_grad(set_to_none=True)

    for p in layers:
        p.register_post_accumulate_grad_hook(hook)
    x = torch.randn(64, d, device="cuda", dtype=torch.bfloat16)
    out = {}
    for step in range(2):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y = x
        for p in layers:
            y = y @ p
        y.float().sum().backward()
        torch.cuda.synchronize()
        out = {"layers": n, "d": d, "param_bytes": d * d * 2, "step": step,
               "base_bytes": base, "peak_over_base_bytes": torch.cuda.max_memory_allocated() - base}
    return out


def main() -> None:
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name()}
    ctx = context()
    runs = [run(k, 2, 4096, 3072, 128256) for k in
            ("hf", "model_fp32", "bf16", "chunked", "chunked_compiled")]
    json.dump({"meta": meta, "context": ctx, "loss": runs,
               "optimizer_in_backward": optimizer_in_backward()}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
