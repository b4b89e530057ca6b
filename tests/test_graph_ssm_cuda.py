"""The op graph's Mamba, Mamba-2, Bamba and Falcon-H1 mixers on CUDA: transformers 5.23's
Mamba2Mixer, BambaMixer and FalconH1Mixer in training call mamba2_split_conv1d_scan_combined
(mamba_ssm's MambaSplitConv1dScanCombinedFn, out_proj fused) where the kernel is installed,
MambaMixer mamba_inner_fn (MambaInnerFn, checkpoint_lvl 1, out_proj fused), and the graph
answers with each as ONE op (ops.mamba_split_conv1d_scan_combined, ops.mamba_inner).

Its saved set is transcribed from mamba_ssm 2.3.2.post1, ops/triton/ssd_combined.py
(state-spaces/mamba e9594ce1): ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias,
out_x, A, D, dt_bias, initial_states, seq_idx, rmsnorm_weight, rstd, outproj_weight,
outproj_bias); out_x is _chunk_scan_fwd's (B, T, H, P) output in x's dtype, rstd
layernorm_gated._layer_norm_fwd's (ngroups · B·T,) fp32 (None without rmsnorm_weight:
Falcon-H1 without mamba_rms_norm). From the kernel's source, not measured on a GPU: the
expected bytes below are written from that source, not from tcalc's output. The CPU path
(the torch fallback, measured: tests/test_graph_mixers.py) is unchanged.
"""

from __future__ import annotations

import json
import random

import pytest
from conftest import DATA
from graph_rows import assert_compiled_equals_traced

from transformer_calc.graph import BF16, F32, Run, evaluate, family_of
from transformer_calc.graph.families.bamba import Bamba
from transformer_calc.graph.families.falcon_h1 import FalconH1
from transformer_calc.graph.families.mamba import Mamba2
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, activation_breakdown, memory_report

CONFIGS = ("mamba2-tiny.json", "mamba2-biases-tied.json", "bamba-tiny.json",
           "bamba-gqa-tied.json", "falcon_h1-tiny.json", "falcon_h1-nonorm.json")
MAMBA = ("mamba-tiny.json", "mamba-biases-tied.json", "mamba-mixer.json")
NOTE = "from the kernel's source, not measured on a GPU"
KERNEL = "MambaSplitConv1dScanCombinedFn"


def _kernel_bytes(cfg: dict, B: int, T: int, a: int) -> dict[str, int]:
    """One mixer layer's activations the kernel saves, from the config's own keys."""
    if cfg["model_type"] == "mamba2":
        H, P, G, N = cfg["num_heads"], cfg["head_dim"], cfg["n_groups"], cfg["state_size"]
        norm = True
    else:
        H, P, G, N = (cfg["mamba_n_heads"], cfg["mamba_d_head"], cfg["mamba_n_groups"],
                      cfg["mamba_d_state"])
        norm = cfg.get("mamba_rms_norm", True) if cfg["model_type"] == "falcon_h1" else True
    Di = H * P
    out = {"in_proj_output": B * T * (2 * Di + 2 * G * N + H) * a,  # zxbcdt
           "scan_output": B * T * Di * a,  # out_x
           "A": H * 4}  # -exp(A_log.float())
    if norm:
        out["norm_rstd"] = G * B * T * 4
    return out


def _mixer_layers(cfg: dict) -> int:
    if cfg["model_type"] == "bamba":
        return cfg["num_hidden_layers"] - len(cfg.get("attn_layer_indices") or ())
    return int(cfg["num_hidden_layers"])


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_kernel_rows_are_its_saved_set(name: str, precision: str) -> None:
    cfg = json.loads((DATA / "hf" / "variants" / name).read_text())
    spec = spec_from_hf(cfg)
    B, T, a = 2, 19, 4 if precision == "fp32" else 2
    r = memory_report(spec, Settings(precision=precision, device="cuda", batch_size=B,
                                     seq_len=T, dropout=False))
    rows = {row[0].rsplit(".", 1)[-1] if ".mixer." in row[0] else row[0]: row
            for row in r.activations.rows if ".mixer." in row[0]}
    want = _kernel_bytes(cfg, B, T, a)
    L = _mixer_layers(cfg)
    for part, n in want.items():
        row = rows[part]
        assert (row[1], row[4], row[6]) == (n, L, NOTE), part
    assert "norm_rstd" in rows or "norm_rstd" not in want
    # nothing else of the scan: the convolution, the chunks and the gated norm are recomputed
    assert not {"conv_output", "dt", "scan_operands", "scan", "chunk_masks", "gated_norm",
                "out_proj_input"} & rows.keys()
    # the rules' cuda_kernels rows transcribe the same source: they agree, except that they
    # keep rstd without the norm too (Falcon-H1 without mamba_rms_norm passes
    # rmsnorm_weight=None: rstd is None) and leave out A (H · 4 bytes)
    rules = activation_breakdown(spec, B, T, act_bytes=a, device="cuda", dropout=False)
    ruled = {row[0].rsplit(".", 1)[-1]: row[1] for row in rules.rows if ".mixer." in row[0]}
    for part in ("in_proj_output", "scan_output", "input"):
        assert ruled[part] == rows[part][1], part
    if "norm_rstd" in want:
        assert ruled["norm_rstd"] == rows["norm_rstd"][1]
    else:  # the rules' overcount: G · B·T · 4 bytes per layer
        assert ruled["norm_rstd"] == cfg["mamba_n_groups"] * B * T * 4


@pytest.mark.parametrize("name", CONFIGS)
def test_cuda_runs_one_kernel_per_mixer_and_the_cpu_none(name: str) -> None:
    cfg = json.loads((DATA / "hf" / "variants" / name).read_text())
    fam = family_of(spec_from_hf(cfg))
    cuda = evaluate(fam, Run(2, 19, BF16, "cuda", "eager"))
    kernels = [o for o in cuda.ops if o.op == KERNEL]
    assert len(kernels) == _mixer_layers(cfg)
    # FLOPs as FlopCounterMode counts the custom op: the fused F.linear into out_proj alone
    E, Di = cfg["hidden_size"], _kernel_bytes(cfg, 1, 1, 1)["scan_output"]
    assert all(o.flops == 2 * 2 * 19 * Di * E for o in kernels)
    assert not any(o.op == KERNEL for o in evaluate(fam, Run(2, 19, BF16, "cpu", "eager")).ops)


def _draw(rng: random.Random) -> tuple[Mamba2 | Bamba | FalconH1, Run]:
    common = {"V": rng.randint(3, 40), "E": rng.randint(1, 24), "N": rng.choice((1, 2, 5)),
              "Kc": rng.choice((1, 2, 4)), "Gs": rng.choice((1, 2)), "Hg": rng.choice((1, 3)),
              "Ph": rng.choice((1, 4)), "Q": rng.choice((1, 4, 8)),
              "tied": rng.random() < 0.5, "conv_bias": rng.random() < 0.5,
              "bias": rng.random() < 0.5}
    kind = rng.choice(("mamba2", "bamba", "falcon_h1"))
    Hkv, G = rng.choice((1, 2)), rng.choice((1, 2))
    fam: Mamba2 | Bamba | FalconH1
    if kind == "mamba2":
        fam = Mamba2(L=rng.choice((1, 2, 3)), **common)
    elif kind == "bamba":
        kinds = rng.choice(("FM", "MFM", "M"))
        fam = Bamba(H=Hkv * G, Hkv=Hkv, dh=rng.choice((2, 4)), F=rng.randint(1, 20),
                    L=len(kinds), kinds=kinds, bias_attn=rng.random() < 0.5,
                    bias_mlp=rng.random() < 0.5, **common)
    else:
        fam = FalconH1(H=Hkv * G, Hkv=Hkv, dh=rng.choice((2, 4)), F=rng.randint(1, 20),
                       L=rng.choice((1, 2)), bias_attn=rng.random() < 0.5,
                       bias_mlp=rng.random() < 0.5, norm=rng.random() < 0.5, **common)
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 8, 17)), rng.choice((F32, BF16)),
              "cuda", "eager" if kind == "mamba2" else rng.choice(("eager", "sdpa")),
              recompute=rng.choice(("none", "full")))
    return fam, run


def test_compiled_equals_traced_on_random_cuda_draws() -> None:
    rng = random.Random(20261128)  # noqa: S311 (not cryptography)
    for _ in range(24):
        assert_compiled_equals_traced(*_draw(rng))


def test_lora_on_cuda_keeps_the_rules() -> None:
    # peft's out_proj adapter is bypassed by the fused kernel (it reads out_proj.weight):
    # the rules answer those runs; autocast over the kernel: the graph
    # (tests/test_graph_autocast.py)
    from transformer_calc.costs.activations import graph_activations

    spec = spec_from_hf(json.loads((DATA / "hf" / "variants" / "bamba-tiny.json").read_text()))
    cuda = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                    device="cuda")
    assert graph_activations(spec, cuda, 64, amp=False, amp16=False,
                             adapted_roles=None) is not None
    assert graph_activations(spec, cuda, 64, amp=True, amp16=False,
                             adapted_roles=None) is not None
    assert graph_activations(spec, cuda, 64, amp=False, amp16=False,
                             adapted_roles=frozenset(("in_proj",))) is None


def _inner_bytes(cfg: dict, B: int, T: int, a: int) -> dict[str, int]:
    """One Mamba layer's activations MambaInnerFn saves, from the config's own keys."""
    Di, N, R = cfg["expand"] * cfg["hidden_size"], cfg["state_size"], cfg["time_step_rank"]
    return {"in_proj_output": B * 2 * Di * T * a,  # xz
            "x_proj_output": B * T * (R + 2 * N) * a,  # x_dbl
            "A": Di * N * 4, "B_C": 2 * B * N * T * a,
            "scan_intermediates": B * Di * -(-T // 2048) * 2 * N * 4,
            "scan_output": B * Di * T * a}  # out


@pytest.mark.parametrize("name", MAMBA)
@pytest.mark.parametrize(("precision", "T"), [("fp32", 19), ("bf16", 2049)])
def test_mamba_inner_rows_are_its_saved_set(name: str, precision: str, T: int) -> None:
    cfg = json.loads((DATA / "hf" / "variants" / name).read_text())
    spec = spec_from_hf(cfg)
    B, a = 2, 4 if precision == "fp32" else 2
    r = memory_report(spec, Settings(precision=precision, device="cuda", batch_size=B,
                                     seq_len=T, dropout=False))
    rows = {row[0].rsplit(".", 1)[-1]: row for row in r.activations.rows
            if ".mixer." in row[0]}
    want = _inner_bytes(cfg, B, T, a)
    Di = cfg["expand"] * cfg["hidden_size"]
    if a == 2:  # D.float() and dt_proj.bias.float(): copies of 16-bit parameters
        want["D_dt_bias"] = 2 * Di * 4
    L = cfg["num_hidden_layers"]
    for part, n in want.items():
        assert (rows[part][1], rows[part][4], rows[part][6]) == (n, L, NOTE), part
    assert ("D_dt_bias" in rows) == (a == 2)
    assert not {"conv_output", "dt", "scan_operands", "scan", "out_proj_input"} & rows.keys()
    # the rules transcribe the same source: they agree on xz, x_dbl, out and the
    # intermediates, keep out_proj's input as well (F.linear runs inside the Function:
    # nothing of it is saved) and leave out A, B, C and the fp32 copies
    rules = activation_breakdown(spec, B, T, act_bytes=a, device="cuda", dropout=False)
    ruled = {row[0].rsplit(".", 1)[-1]: row[1] for row in rules.rows if ".mixer." in row[0]}
    for part in ("input", "in_proj_output", "x_proj_output", "scan_output",
                 "scan_intermediates"):
        assert ruled[part] == rows[part][1], part
    assert ruled["out_proj_input"] == B * T * Di * a


def test_mamba_inner_flops_are_its_aten_matmuls() -> None:
    cfg = json.loads((DATA / "hf" / "variants" / "mamba-tiny.json").read_text())
    fam = family_of(spec_from_hf(cfg))
    B, T = 2, 19
    kernels = [o for o in evaluate(fam, Run(B, T, BF16, "cuda", "eager")).ops
               if o.op == "MambaInnerFn"]
    Di, N, R, E = 128, 4, 4, 64
    assert len(kernels) == 3 and all(
        o.flops == 2 * B * T * Di * (R + 2 * N) + 2 * Di * R * B * T + 2 * B * T * Di * E
        for o in kernels)


def test_compiled_equals_traced_on_random_mamba_cuda_draws() -> None:
    from transformer_calc.graph.families.mamba import Mamba

    rng = random.Random(20261129)  # noqa: S311 (not cryptography)
    for _ in range(12):
        fam = Mamba(V=rng.randint(3, 40), E=rng.randint(1, 24), L=rng.choice((1, 2)),
                    Di=rng.choice((1, 3, 16)), N=rng.choice((1, 2, 5)),
                    Kc=rng.choice((1, 2, 4)), R=rng.choice((1, 4)),
                    tied=rng.random() < 0.5, conv_bias=rng.random() < 0.5,
                    bias=rng.random() < 0.5)
        run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 17, 2049)),
                  rng.choice((F32, BF16)), "cuda", "eager",
                  recompute=rng.choice(("none", "full")))
        assert_compiled_equals_traced(fam, run)
