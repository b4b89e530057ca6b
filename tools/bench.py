"""make bench: tcalc's speed as ratios measured in one run (absolute times are too noisy).

1. start-up: `tcalc params gpt2-medium --format json` as a whole process ÷
   `python -c "import typer, rich, yaml"` (the floor of any CLI on this stack);
2. the same ÷ counting gpt2-medium with transformers on the meta device (what users do today);
   only where transformers is importable (this interpreter, or --hf-python), said otherwise;
3. the core: configurations per second for params + memory + FLOPs over a sweep of 10,000
   architectures, and the time for gpt2 against a 1-trillion-parameter configuration;
4. tcalc plan's layout search for a 405B model on 16,384 GPUs.

Runs are interleaved and summarised by their median. Public tools only: Python's subprocess,
time.perf_counter and statistics.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

HF_CODE = """
import torch, transformers
with torch.device("meta"):
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=1024, n_layer=24, n_head=16))
print(sum(p.numel() for p in m.parameters() if p.requires_grad))
"""

# The targets tcalc holds itself to, printed beside the results.
TARGET_STARTUP = 1.3
TARGET_VS_HF = 30
TARGET_CONFIGS_PER_S = 20_000


# As a user's machine runs it: with bytecode cached. (Some sandboxes set
# PYTHONDONTWRITEBYTECODE, which makes every call recompile tcalc from source while the
# floor's site-packages were compiled by pip at install time: not a fair comparison.)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=ENV)
    return time.perf_counter() - t0


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sweep_specs(n: int):  # type: ignore[no-untyped-def]
    """n distinct architectures, deterministic: widths, depths, heads, vocabularies, FFN and
    attention variants drawn from a fixed cycle."""
    from transformer_calc import ModelSpec

    out = []
    for i in range(n):
        heads = (4, 8, 12, 16, 32)[i % 5]
        d_head = (32, 64, 128)[(i // 5) % 3]
        kv = (heads, 1, max(1, heads // 4))[(i // 15) % 3]
        gated = (i // 45) % 2 == 1
        L = 2 + i % 48
        if i % 4 == 3:
            # heterogeneous, DeepSeek-V3-like: MLA, the first layers dense, the rest MoE
            out.append(ModelSpec(
                name=f"s{i}", vocab_size=8000 + 97 * i, d_model=heads * d_head, n_layers=L,
                n_heads=heads, d_ff=4 * heads * d_head, max_positions=2048, position="rope",
                ffn="gated", activation="silu", norm="rmsnorm", tie_embeddings=False,
                kv_lora_rank=4 * d_head, q_lora_rank=8 * d_head, qk_nope_head_dim=d_head,
                qk_rope_head_dim=d_head // 2, v_head_dim=d_head, n_experts=64, top_k=6,
                n_shared_experts=1, d_ff_expert=heads * d_head // 2,
                layer_ffn=f"1D {L - 1}E", bias_q=False, bias_k=False, bias_v=False,
                bias_o=False, bias_ffn_in=False, bias_ffn_out=False))
            continue
        out.append(ModelSpec(
            name=f"s{i}", vocab_size=8000 + 97 * i, d_model=heads * d_head,
            n_layers=2 + i % 48, n_heads=heads, n_kv_heads=kv, d_ff=4 * heads * d_head,
            max_positions=2048, position=("learned", "rope")[i % 2],
            ffn="gated" if gated else "plain", activation="silu" if gated else "gelu",
            norm=("layernorm", "rmsnorm")[i % 2], tie_embeddings=i % 3 == 0,
            # every other rope model slides on alternate layers (gpt-oss, Gemma 2)
            sliding_window=512 if i % 4 == 1 else 0,
            layer_attention="1S 1F *" if i % 4 == 1 else ""))
    return out


def core_seconds(specs, settings, seq_len: int) -> float:  # type: ignore[no-untyped-def]
    from transformer_calc.flops import count_flops
    from transformer_calc.memory import memory_report
    from transformer_calc.params import count_params

    for spec in specs:  # a spec keeps its layer plan: start every sweep without one
        object.__setattr__(spec, "_plan", None)
    t0 = time.perf_counter()
    read = 0  # each answer's total is read, so that nothing computed lazily escapes the timing
    for spec in specs:
        p = count_params(spec)
        read += (p.total + count_flops(spec, seq_len).total
                 + memory_report(spec, settings, params=p).per_gpu.total)
    assert read > 0
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tcalc", default=str(Path(sys.executable).with_name("tcalc")))
    ap.add_argument("--hf-python", default=os.environ.get("HF_PYTHON", ""),
                    help="an interpreter with torch + transformers (default: this one)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--configs", type=int, default=10_000)
    ap.add_argument("--sweeps", type=int, default=5)
    args = ap.parse_args()

    print(f"tcalc bench, {date.today().isoformat()}, {cpu_name()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {platform.system()} {platform.machine()}")

    # 1 and 2: whole processes, interleaved
    floor_cmd = [sys.executable, "-c", "import typer, rich, yaml"]
    tcalc_cmd = [args.tcalc, "params", "gpt2-medium", "--format", "json"]
    hf_python = args.hf_python or sys.executable
    has_hf = subprocess.run([hf_python, "-c", "import torch, transformers"],
                            capture_output=True, env=ENV).returncode == 0
    floor, tcalc, hf = [], [], []
    run(floor_cmd), run(tcalc_cmd)  # warm the file cache
    for i in range(args.runs):
        floor.append(run(floor_cmd))
        tcalc.append(run(tcalc_cmd))
        if has_hf and i < 5:
            hf.append(run([hf_python, "-c", HF_CODE]))
    f, t = statistics.median(floor), statistics.median(tcalc)
    ratio = t / f
    print(f"start-up: tcalc params gpt2-medium --format json {t * 1000:.0f} ms; import floor "
          f"{f * 1000:.0f} ms; ratio {ratio:.2f} (target <= {TARGET_STARTUP}) "
          f"{'OK' if ratio <= TARGET_STARTUP else 'MISSED'}")
    if hf:
        h = statistics.median(hf)
        print(f"transformers (meta device, {hf_python}): {h * 1000:.0f} ms; tcalc is "
              f"{h / t:.0f}x faster (target >= {TARGET_VS_HF}x) "
              f"{'OK' if h / t >= TARGET_VS_HF else 'MISSED'}")
    else:
        print("transformers: not importable here (pass --hf-python or HF_PYTHON); not measured")

    # 3: the core, in this process, one core
    from transformer_calc import ModelSpec
    from transformer_calc.memory import Settings
    from transformer_calc.presets import load_model

    t0 = time.perf_counter()
    specs = sweep_specs(args.configs)
    build = time.perf_counter() - t0
    settings = Settings(precision="bf16", mixed=True, batch_size=4, seq_len=1024)
    # Whole sweeps, repeated; the best is the machine's speed with the least interference
    # (timeit's advice), the median says how noisy the machine was.
    times = sorted(core_seconds(specs, settings, 1024) for _ in range(args.sweeps))
    best, median = times[0], statistics.median(times)
    rate = len(specs) / best
    print(f"core: {rate:,.0f} configurations/s for params + memory + FLOPs over "
          f"{len(specs):,} architectures, best of {args.sweeps} sweeps "
          f"({best / len(specs) * 1e6:.0f} us each; median sweep {len(specs) / median:,.0f}/s; "
          f"building the specs: {build / len(specs) * 1e6:.0f} us each, not included) "
          f"(target >= {TARGET_CONFIGS_PER_S:,}) "
          f"{'OK' if rate >= TARGET_CONFIGS_PER_S else 'MISSED'}")
    ds = load_model("deepseek-v3")
    ds10 = ds.replace(n_layers=610, layer_ffn="30D 580E")
    t_ds = min(core_seconds([ds.replace() for _ in range(500)], settings, 1024)
               for _ in range(3)) / 500
    t_ds10 = min(core_seconds([ds10.replace() for _ in range(500)], settings, 1024)
                 for _ in range(3)) / 500
    print(f"layers: deepseek-v3 (61 layers, MLA, 3 dense + 58 MoE) {t_ds * 1e6:.0f} us, the same "
          f"with 610 layers {t_ds10 * 1e6:.0f} us: ratio {t_ds10 / t_ds:.2f} (target: flat) "
          f"{'OK' if t_ds10 / t_ds < 1.5 else 'MISSED'}")
    small = load_model("gpt2")
    huge = ModelSpec(name="1T", vocab_size=256_000, d_model=25_600, n_layers=128,
                     n_heads=200, d_ff=4 * 25_600, max_positions=8192)
    from transformer_calc.params import count_params

    n_huge = count_params(huge).total
    reps = [small] * 2000
    t_small = min(core_seconds(reps, settings, 1024) for _ in range(3)) / len(reps)
    t_huge = min(core_seconds([huge] * 2000, settings, 1024) for _ in range(3)) / 2000
    print(f"size: gpt2 {t_small * 1e6:.0f} us, a {n_huge / 1e12:.2f}T-parameter model "
          f"{t_huge * 1e6:.0f} us per params + memory + FLOPs: ratio {t_huge / t_small:.2f} "
          f"(target: flat) {'OK' if t_huge / t_small < 1.5 else 'MISSED'}")
    plan_search()


# 4: tcalc plan's layout search on a large cluster (target: <= 1 s on one core)
TARGET_PLAN_S = 1.0


def plan_search() -> None:
    from transformer_calc.planner import plan_training
    from transformer_calc.presets import load_model

    spec = load_model("llama-3.1-405b")
    times, report = [], None
    for _ in range(3):  # a fresh search each time (nothing cached between calls)
        report = plan_training(spec, gpus=16_384, global_batch=2048, seq_len=8192,
                               gpu="H100-80GB")
        times.append(report.search_seconds)
    assert report is not None and report.best is not None
    best = min(times)
    print(f"plan: llama-3.1-405b on 16,384 H100s (global batch 2,048 × 8,192): "
          f"{report.layouts:,} layouts, {report.memory_calls} memory-core calls, "
          f"{best:.2f} s (best of 3; target <= {TARGET_PLAN_S:g} s) "
          f"{'OK' if best <= TARGET_PLAN_S else 'MISSED'}; best {report.best.layout.describe()}")


if __name__ == "__main__":
    main()
