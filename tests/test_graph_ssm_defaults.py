"""The recurrent model types whose default configs (hf_defaults.DEFAULTS) are laid out as no
measured variant was, on the op graph (CPU): BambaConfig's and GraniteMoeHybridConfig's
defaults are every layer a Mamba-2 mixer (attn_layer_indices None; layer_types
"linear_attention"), Lfm2Config's every layer attention (full_attn_idxs None), and
Falcon-Mamba is Mamba with dt, B and C normalised without weights
(FalconMambaWeightlessRMSNorm). families/bamba.py, granitemoehybrid.py, lfm2.py, mamba.py.

Fixture: tests/data/activations_ssm_defaults_cpu.jsonl (torch 2.13 CPU, transformers 5.23,
peft 0.21.2, saved_tensors_hooks, each storage still held at the end of the forward once,
parameters excluded) over bamba-all-mamba.json, falcon_mamba-tiny.json,
lfm2-all-attention.json and granitemoehybrid-tiny.json (tests/data/hf/variants: each config
class's defaults at small sizes), written by

    V=tests/data/hf/variants; C="$V/bamba-all-mamba.json $V/falcon_mamba-tiny.json \\
        $V/lfm2-all-attention.json $V/granitemoehybrid-tiny.json"
    python tools/measure_activations_hf.py $C
    python tools/measure_activations_hf.py -B 1 -T 37 $C
    python tools/measure_activations_hf.py --lora 8 $C
    python tools/measure_activations_hf.py --experts grouped_mm $V/granitemoehybrid-tiny.json
    python tools/measure_activations_hf.py --autocast $C
    python tools/measure_activations_hf.py --mixers $V/bamba-all-mamba.json \\
        $V/falcon_mamba-tiny.json $V/granitemoehybrid-tiny.json

(tcalc_bytes and error_pct dropped; the rows FalconMambaForCausalLM skipped kept: no SDPA
path, and peft 0.21 refuses out_proj in a Mamba model's all-linear). The per-tensor rules
(memory_report without the graph) on the whole-model rows: Bamba's mixers alone 12 rows
−1.66 … +3.56 %, Falcon-Mamba 4 rows −0.87 … +2.08 %, LFM2's attention alone 12 rows 4 to 12
bytes short, GraniteMoeHybrid 16 rows −1.55 … +3.66 %; the graph meets every row.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import DATA
from graph_rows import (
    cache_hits_on_random_draws,
    check_measured,
    every_row,
    row_run,
    row_settings,
    spec_of,
)

from transformer_calc.costs import activations as graph_costs
from transformer_calc.errors import TcalcError
from transformer_calc.graph import BF16, DTYPES, F16, F32, Lora, Run, evaluate, family_of
from transformer_calc.graph.evaluate import Family
from transformer_calc.graph.families.bamba import Bamba
from transformer_calc.graph.families.granitemoehybrid import GraniteMoeHybrid
from transformer_calc.graph.families.jamba import Jamba
from transformer_calc.graph.families.lfm2 import Lfm2
from transformer_calc.graph.families.mamba import Mamba
from transformer_calc.hf import spec_from_hf
from transformer_calc.hf_defaults import DEFAULTS
from transformer_calc.memory import Settings, memory_report
from transformer_calc.params import count_params

FIXTURE = "activations_ssm_defaults_cpu.jsonl"
ROWS = [json.loads(line) for line in (DATA / FIXTURE).read_text().splitlines()]
MEASURED = [r for r in ROWS if "skipped" not in r]
MIXER_ROWS = [r for r in MEASURED if "attention" not in r]
AUTOCAST_ROWS = [r for r in MEASURED if r.get("autocast")]
MODEL_ROWS = [r for r in MEASURED if "attention" in r and not r.get("autocast")]


def _family(row: dict) -> Family:
    """The row's graph, the experts on the path the row ran."""
    fam = family_of(spec_of(row["config"]))
    if isinstance(fam, GraniteMoeHybrid):
        return replace(fam, grouped=row.get("experts", "eager") == "grouped_mm")
    return fam


def test_the_defaults_read_the_graph() -> None:
    # each type's default config (hf_defaults.DEFAULTS) maps to its family, and memory_report
    # answers it from the graph
    expected = {"bamba": Bamba, "granitemoehybrid": GraniteMoeHybrid, "lfm2": Lfm2,
                "falcon_mamba": Mamba}
    for model_type, cls in expected.items():
        spec = spec_from_hf({**DEFAULTS[model_type], "model_type": model_type})
        fam = graph_costs._family(spec)
        assert type(fam) is cls, model_type
    fams = [family_of(spec_of(c)) for c in ("bamba-all-mamba.json", "lfm2-all-attention.json",
                                            "falcon_mamba-tiny.json")]
    assert isinstance(fams[0], Bamba) and fams[0].kinds == "MM"
    assert isinstance(fams[1], Lfm2) and fams[1].kinds == "aa"
    assert isinstance(fams[2], Mamba) and fams[2].weightless_norms
    assert not family_of(spec_of("mamba-tiny.json")).weightless_norms  # type: ignore[union-attr]


def test_the_rows_cover_the_types_dtypes_lora_experts_and_autocast() -> None:
    assert len(MODEL_ROWS) == 12 + 4 + 12 + 16 and len(AUTOCAST_ROWS) == 2 + 1 + 2 + 2
    assert len(MIXER_ROWS) == 18
    assert {r["config"] for r in MODEL_ROWS} == {
        "bamba-all-mamba.json", "falcon_mamba-tiny.json", "lfm2-all-attention.json",
        "granitemoehybrid-tiny.json"}
    assert {r.get("experts") for r in MODEL_ROWS
            if r["config"] == "granitemoehybrid-tiny.json"} == {"eager", "grouped_mm"}
    assert {r["dtype"] for r in MODEL_ROWS} == {"fp32", "bf16"}
    assert {(r["B"], r["T"]) for r in MODEL_ROWS} == {(2, 64), (1, 37)}
    assert sum(bool(r["lora"]) for r in MODEL_ROWS) == 12


def test_every_row_equals_the_measurement() -> None:
    # the trace (and peft's trainable count) and memory_report (its compiled structure: its
    # total and its rows as the trace names them), each to the byte
    every_row(MODEL_ROWS, lambda row: check_measured(
        row, _family(row), row_run(row), spec_of(row["config"]), compiled=None,
        report_rows="names"))


def test_autocast_rows_equal_the_measurement() -> None:
    # an fp32 model under CPU autocast to bf16: every storage saved (autocast's weight
    # copies too), and memory_report's activations beside those copies
    def check(row: dict) -> None:
        fam = _family(row)
        run = replace(row_run(row), autocast=BF16)
        saved = evaluate(fam, run).saved
        assert sum(s.nbytes for s in saved) == row["measured_bytes"]
        copies = sum(s.nbytes for s in saved if s.storage.kind == "weight_copy")
        report = memory_report(spec_of(row["config"]), row_settings(
            row, precision="bf16", mixed=True)).activations
        assert report.total + copies == row["measured_bytes"]

    every_row(AUTOCAST_ROWS, check)


def test_mixer_bytes_equal_the_measurement() -> None:
    # the storages first saved while a mixer module runs (tools/measure_activations_hf.py
    # --mixers: B 1 and 2, T 64, 128 and 200, fp32 and bf16)
    def check(row: dict) -> None:
        run = Run(row["B"], row["T"], DTYPES[row["dtype"]], "cpu", "eager")
        saved = evaluate(_family(row), run).saved
        inside = sum(s.nbytes for s in saved if ".mixer" in s.scope or ".mamba" in s.scope)
        assert inside == row["measured_bytes"]

    every_row(MIXER_ROWS, check)


# torch.utils.flop_counter's forward FLOPs at B = 1 (convolutions and the scans' matmuls
# included; the experts eager): tools/reference_flops.py --seq-len T over the four configs
# (torch 2.13, transformers 5.23)
FLOPS = {("bamba-all-mamba.json", 37): 13_400_064, ("bamba-all-mamba.json", 64): 20_823_552,
         ("falcon_mamba-tiny.json", 37): 7_204_864, ("falcon_mamba-tiny.json", 64): 12_457_984,
         ("lfm2-all-attention.json", 37): 9_945_600,
         ("lfm2-all-attention.json", 64): 18_087_936,
         ("granitemoehybrid-tiny.json", 37): 13_475_840,
         ("granitemoehybrid-tiny.json", 64): 20_954_624}


def test_params_and_flops_equal_torch() -> None:
    def check(case: tuple[str, int]) -> None:
        config, T = case
        r = evaluate(_family({"config": config}), Run(1, T, F32, "cpu", "eager"))
        assert r.params == r.trainable_params == count_params(spec_of(config)).total
        assert r.forward_flops == FLOPS[case]

    every_row(sorted(FLOPS), check, ids=lambda c: f"{c[0]}-T{c[1]}")


def test_other_layouts_are_refused() -> None:
    granite = spec_of("granitemoehybrid-tiny.json")
    # attention layers (their RoPE is position_embedding_type's), no experts, biases
    for change in ({"layer_attention": "1M 1F"}, {"n_experts": 0, "layer_ffn": ""},
                   {"bias_q": True}, {"ssm_norm": False}, {"n_shared_experts": 0}):
        with pytest.raises(TcalcError):
            family_of(replace(granite, **change))  # type: ignore[arg-type]
    falcon = spec_of("falcon_mamba-tiny.json")
    for change in ({"dropout": 0.1}, {"d_ff": 8}, {"ssm_dt_norms": True}):
        with pytest.raises(TcalcError):
            family_of(replace(falcon, **change))  # type: ignore[arg-type]
    lfm2 = spec_of("lfm2-all-attention.json")
    with pytest.raises(TcalcError):  # a convolution layer, but no mixer said
        family_of(replace(lfm2, layer_attention="1M 1F"))


def test_cuda_and_recompute_where_the_graph_does_not_answer() -> None:
    # a model of mixers alone keeps a rotary table of a head_dim it does not say under
    # full recomputation; GraniteMoeHybrid's mixer on CUDA is Bamba's fused kernel,
    # Falcon-Mamba's MambaInnerFn (test_falcon_mamba_on_cuda_runs_mamba_inner)
    ask = graph_costs.graph_activations
    cpu = Settings(precision="bf16", batch_size=2, seq_len=64, attention="eager",
                   device="cpu")
    cuda, full = replace(cpu, device="cuda"), replace(cpu, recompute="full")
    falcon, bamba = spec_of("falcon_mamba-tiny.json"), spec_of("bamba-all-mamba.json")
    granite, lfm2 = spec_of("granitemoehybrid-tiny.json"), spec_of("lfm2-all-attention.json")
    for spec in (falcon, bamba, granite, lfm2):
        assert ask(spec, cpu, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(falcon, cuda, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(falcon, full, 64, amp=False, amp16=False, adapted_roles=None) is not None
    assert ask(granite, cuda, 64, amp=False, amp16=False, adapted_roles=None) is not None
    for spec in (bamba, granite):
        assert ask(spec, full, 64, amp=False, amp16=False, adapted_roles=None) is None
    assert ask(lfm2, full, 64, amp=False, amp16=False, adapted_roles=None) is not None


def _draw(rng):  # type: ignore[no-untyped-def]
    """One of the four layouts with sizes drawn freely (one head, one group, a kernel of
    1, chunks longer than T, one expert), dtype, attention, device, LoRA and
    recomputation."""
    kind = rng.choice(("bamba", "granite", "falcon", "lfm2", "jamba"))
    V, E, L = rng.randint(3, 40), rng.randint(1, 24), rng.choice((1, 2))
    mixer = dict(Gs=rng.choice((1, 2)), Hg=rng.choice((1, 2)), Ph=rng.choice((1, 4)),
                 N=rng.choice((1, 4)), Kc=rng.choice((1, 4)), Q=rng.choice((1, 3, 8)),
                 kinds="M" * L, tied=rng.random() < 0.5, conv_bias=rng.random() < 0.5,
                 bias=rng.random() < 0.5)
    fam: Family
    recompute = "none"
    if kind == "bamba":
        fam = Bamba(V, E, 1, 1, 2, rng.randint(1, 12), L, **mixer)  # type: ignore[arg-type]
    elif kind == "granite":
        X = rng.choice((1, 2, 4))
        fam = GraniteMoeHybrid(V, E, 1, 1, 2, rng.randint(1, 12), L, **mixer,  # type: ignore[arg-type]
                               X=X, K=rng.randint(1, X), Fe=rng.randint(1, 12),
                               grouped=rng.random() < 0.5)
    elif kind == "jamba":  # (on CUDA below: causal-conv1d's and mamba_ssm's kernels)
        X, kinds = rng.choice((1, 2, 4)), rng.choice(("cb", "d", "ca", "c"))
        fam = Jamba(V, E, 2, rng.choice((1, 2)), 2, rng.randint(1, 12), len(kinds),
                    rng.choice((1, 3, 16)), rng.choice((1, 4)), rng.choice((1, 4)),
                    rng.choice((1, 3)), X, rng.randint(1, X), kinds,
                    conv_bias=rng.random() < 0.5, grouped=rng.random() < 0.5)
    elif kind == "falcon":
        fam = Mamba(V, E, L, rng.choice((1, 3, 16)), rng.choice((1, 4)), rng.choice((1, 3)),
                    rng.choice((1, 4)), tied=rng.random() < 0.5, weightless_norms=True)
        recompute = rng.choice(("none", "full"))
    else:  # attention alone, or LFM2's convolutions beside it (on CUDA: CausalConv1dFn)
        Hkv = rng.choice((1, 2))
        kinds = rng.choice(("a" * L, "ca", "c"))
        fam = Lfm2(V, E, Hkv * rng.choice((1, 2)), Hkv, rng.choice((2, 4)),
                   rng.randint(1, 20), len(kinds), rng.choice((1, 2, 4)), kinds,
                   tied=rng.random() < 0.5, conv_bias=rng.random() < 0.5)
        recompute = rng.choice(("none", "full"))
    lora = None
    if kind not in ("falcon", "jamba") and rng.random() < 0.4:
        lora = Lora(rng.choice((1, 4)), frozenset(("all-linear",)), rng.choice((0.0, 0.05)))
    device = "cuda" if kind == "jamba" else rng.choice(("cpu", "cuda"))
    if device == "cuda" and kind != "lfm2":
        lora = None  # (the mamba_ssm kernel reads out_proj's weight itself: the rules)
    run = Run(rng.choice((1, 2, 3)), rng.choice((1, 2, 7, 17)), rng.choice((F32, BF16, F16)),
              device, rng.choice(("eager", "sdpa")), lora=lora, recompute=recompute)
    return fam, run


def test_compiled_equals_traced_on_random_configurations() -> None:
    # the compiled structures against the reference trace on every output and row name,
    # and another size from the cache
    cache_hits_on_random_draws(_draw, 20261128, 16)


def test_nemotron_h_on_cuda_runs_the_combined_kernel() -> None:
    # NemotronHMamba2Mixer.forward in training calls mamba2_split_conv1d_scan_combined with
    # its gated norm's weight and out_proj (models/nemotron_h/modeling_nemotron_h.py): where
    # mamba_ssm is installed, MambaSplitConv1dScanCombinedFn (mamba_ssm 2.3.2.post1,
    # ops/triton/ssd_combined.py, state-spaces/mamba e9594ce) saves zxbcdt, out_x, A and
    # rstd, written here from the config's own keys (not from tcalc's output); not measured
    # on a GPU. The attention, MLP and experts are the torch ops the CPU rows pin.
    cfg = json.loads((DATA / "hf" / "variants" / "nemotron_h-tiny.json").read_text())
    spec = spec_from_hf(cfg)
    B, T, a = 2, 19, 2
    H, P, G, N = (cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["n_groups"],
                  cfg["ssm_state_size"])
    Di, L = H * P, cfg["layers_block_type"].count("mamba")
    want = {"in_proj_output": B * T * (2 * Di + 2 * G * N + H) * a, "scan_output": B * T * Di * a,
            "A": H * 4, "norm_rstd": G * B * T * 4}
    report = memory_report(spec, Settings(precision="bf16", device="cuda", batch_size=B,
                                          seq_len=T, attention="eager")).activations
    rows = {r[0].rsplit(".", 1)[-1]: r for r in report.rows if ".mixer." in r[0]}
    for part, n in want.items():
        assert (rows[part][1], rows[part][4]) == (n, L), part
        assert rows[part][6] == "from the kernel's source, not measured on a GPU"
    assert not {"conv_output", "dt", "scan_operands", "scan", "gated_norm"} & rows.keys()
    fam = family_of(spec)
    kernels = [o for o in evaluate(fam, Run(B, T, BF16, "cuda", "eager")).ops
               if o.op == "MambaSplitConv1dScanCombinedFn"]
    assert len(kernels) == L


def test_lfm2_on_cuda_runs_causal_conv1d() -> None:
    # Lfm2ShortConv's causal_conv1d_fn resolves to the causal-conv1d package where installed
    # (use_kernel_func_from_hub_with_fallback): CausalConv1dFn (Dao-AILab/causal-conv1d
    # dedc05f, causal_conv1d_interface.py) saves x = B·x and returns empty_like(x), (B, E,
    # T) where the torch fallback's F.conv1d output is T + K − 1 long. Written from the
    # source and the config's keys, not measured on a GPU; LFM3's causal_conv1d_fn is not
    # wrapped (its torch path on CUDA: the rules), nor are widths outside 2..4 or channels
    # not a multiple of 8, which the kernel refuses
    cfg = json.loads((DATA / "hf" / "variants" / "lfm2-tiny.json").read_text())
    spec = spec_from_hf(cfg)
    B, T, a, E, K = 2, 19, 2, cfg["hidden_size"], cfg["conv_L_cache"]
    settings = Settings(precision="bf16", device="cuda", batch_size=B, seq_len=T,
                        attention="eager")
    rows = {r[0]: r for r in memory_report(spec, settings).activations.rows}
    want = {"in_proj_output": B * T * 3 * E * a, "conv_input": B * T * E * a,
            "conv_output": B * T * E * a, "out_proj_input": B * T * E * a}
    for part, n in want.items():
        assert rows[f"decoder.mixer.{part}"][1] == n, part
    assert rows["decoder.mixer.conv_output"][6] == "from the kernel's source, not measured on a GPU"
    on_cpu = memory_report(spec, replace(settings, device="cpu")).activations.rows
    cpu = {r[0]: r[1] for r in on_cpu}
    assert cpu["decoder.mixer.conv_output"] == B * E * (T + K - 1) * a
    fam = family_of(spec)
    assert [o.op for o in evaluate(fam, Run(B, T, BF16, "cuda", "eager")).ops].count(
        "CausalConv1dFn") == 1
    ask = graph_costs.graph_activations
    for other in (replace(spec, d_model=36, d_head=8), replace(spec, ssm_conv=5),
                  spec_of("lfm3-tiny.json")):
        family_of(other)  # (a layout the graph has)
        assert ask(other, settings, T, amp=False, amp16=False, adapted_roles=None) is None
        assert ask(other, replace(settings, device="cpu"), T, amp=False, amp16=False,
                   adapted_roles=None) is not None


def test_jamba_on_cuda_runs_causal_conv1d_and_the_selective_scan() -> None:
    # JambaMambaMixer.forward on CUDA with the packages installed: causal_conv1d_fn with
    # SiLU (CausalConv1dFn keeps x, a view of in_proj's output, and returns a channel-last
    # (B, Di, T) that x_proj reads transposed, contiguous) and mamba_ssm's selective_scan_fn
    # (SelectiveScanFn, mamba_ssm 2.3.2.post1, state-spaces/mamba e9594ce: u, B, C and z
    # made contiguous, delta
    # as dt_proj's matmul made it, A, the .float() copies of D and dt_proj's bias, the fp32
    # intermediates (B, Di, ⌈T / 2048⌉, 2N) and out, (B, Di, T)). Written from that source
    # and the config's keys, not measured on a GPU; under autocast and with LoRA the rules
    # answer
    cfg = json.loads((DATA / "hf" / "variants" / "jamba-tiny.json").read_text())
    spec = spec_from_hf(cfg)
    B, T, a = 2, 19, 2
    E, N = cfg["hidden_size"], cfg["mamba_d_state"]
    Di = cfg["mamba_expand"] * E
    settings = Settings(precision="bf16", device="cuda", batch_size=B, seq_len=T,
                        attention="eager")
    rows = {r[0]: r for r in memory_report(spec, settings).activations.rows}
    want = {"in_proj_output": B * T * 2 * Di * a, "x": B * T * Di * a,
            "scan_input": B * T * Di * a, "dt": B * T * Di * a, "A": Di * N * 4,
            "B_C": 2 * B * N * T * a, "D_dt_bias": 2 * Di * 4, "gate": B * T * Di * a,
            "scan_intermediates": B * Di * 1 * 2 * N * 4, "scan_output": B * T * Di * a}
    L = sum(1 for i in range(cfg["num_hidden_layers"])
            if i % cfg["attn_layer_period"] != cfg["attn_layer_offset"])
    for part, n in want.items():
        assert (rows[f"decoder.mixer.{part}"][1], rows[f"decoder.mixer.{part}"][4]) == (n, L), \
            part
    assert "decoder.mixer.scan_operands" not in rows  # no torch loop over T
    ops_run = [o.op for o in evaluate(family_of(spec), Run(B, T, BF16, "cuda", "eager")).ops]
    assert ops_run.count("CausalConv1dFn") == ops_run.count("SelectiveScanFn") == L
    ask = graph_costs.graph_activations
    assert ask(spec, settings, T, amp=True, amp16=False, adapted_roles=None) is None
    assert ask(spec, settings, T, amp=False, amp16=False,
               adapted_roles=frozenset(("in_proj",))) is None


def test_minimax_on_cuda_is_its_cpu_graph_on_cudas_kernels() -> None:
    # MiniMaxLightningAttention has no kernel in transformers: CUDA runs the CPU rows' Python
    # loop; the graph's CUDA run differs from the CPU's only where torch's kernels do
    # (SDPA's, none in eager fp32), compiled equal to traced (not measured on a GPU)
    from graph_rows import assert_compiled_equals_traced

    fam = family_of(spec_of("minimax-tiny.json"))
    cuda, cpu = (Run(2, 37, F32, device, "eager") for device in ("cuda", "cpu"))
    assert evaluate(fam, cuda).activation_bytes == evaluate(fam, cpu).activation_bytes
    for run in (cuda, replace(cuda, dtype=BF16, attention="sdpa"),
                replace(cuda, dtype=F32, autocast=BF16)):
        assert_compiled_equals_traced(fam, run)


def test_falcon_mamba_on_cuda_runs_mamba_inner() -> None:
    # FalconMambaMixer in training calls mamba_inner_fn with b/c/dt_rms_weight (its
    # weightless norms' buffers of ones): MambaInnerFn (mamba_ssm 2.3.2.post1,
    # ops/selective_scan_interface.py, state-spaces/mamba e9594ce) normalises B, C and delta
    # into new tensors of the sizes it keeps without them (rms_norm_forward between
    # contiguous rearranges; delta recomputed in backward), so its saved set is Mamba's:
    # the same kernel rows as Mamba's graph of the same sizes (not measured on a GPU)
    falcon = family_of(spec_of("falcon_mamba-tiny.json"))
    assert isinstance(falcon, Mamba)
    plain = replace(falcon, weightless_norms=False)
    for dtype in (F32, BF16):
        run = Run(2, 19, dtype, "cuda", "eager")
        got, want = evaluate(falcon, run), evaluate(plain, run)
        assert [o.op for o in got.ops].count("MambaInnerFn") == falcon.L
        assert got.activation_bytes == want.activation_bytes
        assert sorted(s.role for s in got.saved) == sorted(s.role for s in want.saved)
