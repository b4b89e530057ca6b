"""transformers' flash_attention_2 on the op graph (graph/flash.py, ops.flash_attn_func).

No run of flash-attn is measured (it needs a GPU; no peak fixture and no published case uses
it), so what the graph keeps is pinned to the kernel's source: flash-attn 2.8.4's
FlashAttnFunc (flash_attn/flash_attn_interface.py, Dao-AILab/flash-attention 0251105):
`ctx.save_for_backward(q, k, v, out_padded, softmax_lse, rng_state)`, q, k, v padded to a
multiple of 8 when the head dim is not one (`F.pad(q, [0, 8 - head_size_og % 8])`), out
returned as `out_padded[..., :head_size_og]`; csrc/flash_attn/flash_api.cpp mha_fwd:
`out = torch::empty_like(q)`, `softmax_lse = torch::empty({batch_size, num_heads,
seqlen_q}, opts.dtype(at::kFloat))`, `rng_state = torch::empty({2}, ...kInt64)`; and to
transformers 5.23's integrations/flash_attention.py and modeling_flash_attention_utils.py
(K/V not repeated; `window_size = (sliding_window - 1, sliding_window - 1)` where the keys
outnumber the window). The graph's rows are also held against the rules
(memory.activation_breakdown), which treat the kernel as SDPA's flash kernel."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from conftest import DATA
from graph_rows import cache_hits_on_random_draws

from transformer_calc.costs import activations
from transformer_calc.errors import TcalcError
from transformer_calc.flops import count_flops
from transformer_calc.graph import Lora, Run, evaluate
from transformer_calc.graph.evaluate import family_of
from transformer_calc.graph.families.llama import Llama
from transformer_calc.graph.names import by_name, component_rows
from transformer_calc.graph.tensor import BF16, F16, F32
from transformer_calc.hf import spec_from_hf
from transformer_calc.memory import Settings, memory_report
from transformer_calc.presets import load_model
from transformer_calc.spec import ModelSpec


def _spec(config: str) -> ModelSpec:
    return spec_from_hf(json.loads((DATA / "hf" / "variants" / config).read_text()))


def _llama(head_dim: int) -> ModelSpec:
    """A two-layer LlamaConfig with grouped K/V heads of head_dim."""
    return spec_from_hf({"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
                         "intermediate_size": 96, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2,
                         "head_dim": head_dim})


def _rules(spec: ModelSpec, s: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The rules' rows by name, the graph switched off."""
    with monkeypatch.context() as patch:
        patch.setattr(activations, "graph_activations", lambda *a, **k: None)
        return {i.name: i.total for i in memory_report(spec, s).activations.items}


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_the_kernel_keeps_what_flash_attn_func_saves(dtype: object) -> None:
    # llama-head-dim: 2 layers, H 8, Hkv 4, head_dim 64 (a multiple of 8: nothing padded)
    spec = _spec("llama-head-dim.json")
    fam = family_of(spec)
    B, T, L, H, Hkv, d = 2, 64, 2, 8, 4, 64
    rows = by_name(component_rows(fam, Run(B, T, dtype, "cuda", "flash")))  # type: ignore
    assert rows["decoder.attn.qkv"] == L * B * T * (H + 2 * Hkv) * d * 2  # K/V not repeated
    # out_padded = empty_like(q): q is (B, T, H, d) memory (RoPE's output follows the
    # projection's layout), so the reshape before o_proj is a view: o_proj keeps it too
    assert rows["decoder.attn.out"] == L * B * T * H * d * 2
    assert rows["decoder.attn.logsumexp"] == L * B * H * T * 4  # (B, H, T) fp32
    assert rows["decoder.attn.rng_state"] == L * 16  # (2,) int64, dropout or not
    assert "decoder.attn.mask" not in rows  # no mask: the kernel's causal flag
    # SDPA's CUDA flash kernel (16-bit, no mask) keeps the same but the RNG state
    sdpa = evaluate(fam, Run(B, T, dtype, "cuda", "sdpa"))  # type: ignore[arg-type]
    flash = evaluate(fam, Run(B, T, dtype, "cuda", "flash"))  # type: ignore[arg-type]
    assert flash.activation_bytes == sdpa.activation_bytes + L * 16


def _attn_rows(spec: ModelSpec, run: Run) -> dict[str, int]:
    """The attention's rows summed over the layer kinds (decoder.sliding.attn.qkv, ...)."""
    out: dict[str, int] = {}
    for name, nbytes in by_name(component_rows(family_of(spec), run)).items():
        if ".attn." in name:
            part = name.rsplit(".attn.", 1)[1]
            out[part] = out.get(part, 0) + nbytes
    return out


@pytest.mark.parametrize(("config", "sizes"), [
    # (L, H, Hkv, d, what q, k, v keep: GPT-2's are views of c_attn's (B, T, 3·E) output)
    ("gpt2-n-inner.json", (2, 8, 8, 32)),
    ("gemma2-bias-untied.json", (4, 4, 2, 16)),  # soft-capped: SDPA refuses, flash not
    ("gemma3_text-layer-types.json", (4, 4, 1, 32)),  # sliding and full layers
    ("vaultgemma-tiny.json", None)])
def test_the_other_families_keep_the_same_set(config: str, sizes: tuple[int, ...] | None
                                               ) -> None:
    spec = _spec(config)
    fam = family_of(spec)
    if sizes is None:
        sizes = (fam.L, fam.H, fam.Hkv, fam.dh)  # type: ignore[union-attr]
    L, H, Hkv, d = sizes
    B, T = 2, 64
    rows = _attn_rows(spec, Run(B, T, BF16, "cuda", "flash"))
    assert rows["qkv"] == L * B * T * (H + 2 * Hkv) * d * 2
    assert rows["out"] == L * B * T * H * d * 2
    assert rows["logsumexp"] == L * B * H * T * 4
    assert rows["rng_state"] == L * 16
    assert "mask" not in rows


@pytest.mark.parametrize("config", ["neox-sequential-nobias.json", "phi-gqa-tied.json",
                                    "stablelm-parallel.json", "persimmon-qknorm.json",
                                    "cohere-qknorm.json", "cohere2-tiny.json",
                                    "cohere2_moe-tiny.json", "mixtral-top1.json",
                                    "opt-projected.json", "biogpt-tiny.json",
                                    "gpt_bigcode-mha.json", "gpt_bigcode-mqa.json",
                                    # bidirectional encoders: the kernel's causal off
                                    "bert-untied.json", "albert-tiny.json",
                                    "nomic_bert-tiny.json"])
def test_flash_differs_from_sdpas_flash_kernel_by_the_rng_state(config: str) -> None:
    # where SDPA on CUDA runs its flash kernel (16-bit, no mask, GQA in the kernel) it keeps
    # what FlashAttnFunc keeps but the (2,) int64 RNG state
    fam = family_of(_spec(config))
    flash = by_name(component_rows(fam, Run(2, 64, BF16, "cuda", "flash")))
    sdpa = by_name(component_rows(fam, Run(2, 64, BF16, "cuda", "sdpa")))
    rng = {n: flash.pop(n) for n in list(flash) if n.endswith("attn.rng_state")}
    assert sum(rng.values()) == 16 * fam.L  # type: ignore[union-attr]
    assert flash == sdpa


@pytest.mark.parametrize(("config", "calls"), [
    ("marian-unshared.json", 2 + 2 * 3),  # the encoder's 2 layers, the decoder's 3 (self
    # and cross-attention)
    ("bart-causal.json", 2), ("whisper-tiny.json", 2)])  # BartForCausalLM, Whisper's decoder
def test_encoder_decoders_keep_what_sdpas_flash_kernel_keeps_and_the_rng_state(
        config: str, calls: int) -> None:
    fam = family_of(_spec(config))
    flash = by_name(component_rows(fam, Run(2, 64, BF16, "cuda", "flash")))
    sdpa = by_name(component_rows(fam, Run(2, 64, BF16, "cuda", "sdpa")))
    rng = {n: flash.pop(n) for n in list(flash) if n.endswith(".rng_state")}
    assert sum(rng.values()) == 16 * calls
    assert flash == sdpa


def test_the_latent_attentions_value_is_padded_to_the_querys_head_dim() -> None:
    # minicpm3-tiny: 3 layers, H 2, query/key heads of dq = 64 + 32, values of dv = 8.
    # flash_attention_forward pads V to dq (F.pad: a new tensor the kernel keeps) and crops
    # the output (attn_output[..., :v_head_dim], a view), which the reshape before o_proj
    # copies; SDPA's memory-efficient kernel takes dv as it is
    spec = _spec("minicpm3-tiny.json")
    L, H, dq, dv, B, T = 3, 2, 96, 8, 2, 64
    rows = by_name(component_rows(family_of(spec), Run(B, T, BF16, "cuda", "flash")))
    assert rows["decoder.attn.qkv"] == L * B * T * 3 * H * dq * 2
    assert rows["decoder.attn.out"] == L * B * T * H * dq * 2
    assert rows["decoder.attn.o_input"] == L * B * T * H * dv * 2
    # FLOPs as flops.py counts them: scores over dq, values over dv (the padding is zeros)
    r = evaluate(family_of(spec), Run(B, T, BF16, "cuda", "flash"))
    assert r.forward_flops == B * T * count_flops(spec, T).total


def test_a_head_dim_off_the_multiple_of_8_is_padded() -> None:
    # head_dim 20: q, k, v padded to 24 (F.pad: new tensors, kept instead of the unpadded
    # ones), out_padded (B, T, H, 24) and its [..., :20] view, which the reshape before
    # o_proj copies: a (B, T, H·20) tensor o_proj keeps besides
    spec = _llama(20)
    B, T, L, H, Hkv = 2, 32, 2, 4, 2
    rows = by_name(component_rows(family_of(spec), Run(B, T, BF16, "cuda", "flash")))
    assert rows["decoder.attn.qkv"] == L * B * T * (H + 2 * Hkv) * 24 * 2
    assert rows["decoder.attn.out"] == L * B * T * H * 24 * 2
    assert rows["decoder.attn.o_input"] == L * B * T * H * 20 * 2
    unpadded = by_name(component_rows(family_of(_llama(24)), Run(B, T, BF16, "cuda",
                                                                 "flash")))
    assert rows["decoder.attn.qkv"] == unpadded["decoder.attn.qkv"]


@pytest.mark.parametrize("config", ["qwen3-sliding-bias.json", "ministral-tiny.json"])
def test_a_sliding_window_is_the_kernels_window(config: str) -> None:
    # the window is a kernel argument: the FLOPs over min(T, sliding_window) keys, as
    # flops.py counts a sliding layer; nothing of T × window kept. (SDPA and eager get
    # transformers' full (T, T) mask and score every pair: FlopCounterMode counts T keys
    # there, so the graph's SDPA FLOPs exceed flops.py's on sliding layers.)
    spec = _spec(config)
    fam = family_of(spec)
    assert isinstance(fam, Llama) and "S" in fam.kinds and fam.window == 16
    B = 2
    for T in (8, 16, 17, 64):
        r = evaluate(fam, Run(B, T, BF16, "cuda", "flash"))
        assert r.forward_flops == B * T * count_flops(spec, T).total, T
        full = evaluate(dataclasses.replace(fam, kinds="F", window=0),
                        Run(B, T, BF16, "cuda", "flash"))
        assert r.activation_bytes == full.activation_bytes
        if T > 16:  # the full layers' FLOPs: every key
            assert full.forward_flops > r.forward_flops


def test_memory_report_reads_the_graph_and_the_rules_miss_the_rng_state(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_model("llama-3.1-8b")
    for kw in ({"mixed": True}, {}, {"lora_rank": 16, "lora_targets": ("q_proj", "v_proj")}):
        s = Settings(precision="bf16", seq_len=2048, batch_size=2, attention="flash",
                     **kw)  # type: ignore[arg-type]
        acts = memory_report(spec, s).activations
        assert any(n.startswith("flash_attention_2 runs flash-attn 2's FlashAttnFunc")
                   for n in acts.notes)
        graph = {i.name: i.total for i in acts.items}
        rules = _rules(spec, s, monkeypatch)
        # the rules keep SDPA's flash set; FlashAttnFunc's (2,) int64 rng_state is theirs to
        # miss (16 bytes a layer), and nll_loss's 0-d total_weight every graph row has
        assert graph.pop("decoder.attn.rng_state") == 32 * 16
        assert graph.pop("loss.total_weight") == 4
        assert graph == rules, kw


def test_fp32_into_the_kernel_is_refused() -> None:
    # mha_fwd: TORCH_CHECK(q_dtype == torch::kFloat16 || q_dtype == torch::kBFloat16);
    # transformers casts an fp32 query to autocast's dtype or the Linear weights' (fp32)
    spec = _spec("llama-head-dim.json")
    with pytest.raises(TcalcError, match="flash-attn takes fp16 or bf16 only"):
        memory_report(spec, Settings(precision="fp32", seq_len=64, attention="flash"))
    # under autocast the fp32 rotated Q and K are cast to bf16 (fa_peft_integration_check):
    # the kernel keeps the casts
    rows = by_name(component_rows(family_of(spec), Run(2, 64, F32, "cuda", "flash", BF16)))
    assert rows["decoder.attn.qkv"] == 2 * 2 * 64 * (8 + 2 * 4) * 64 * 2


def test_families_without_the_flash_branch_keep_the_rules() -> None:
    s = Settings(precision="bf16", seq_len=64, attention="flash")
    # GPT-NeoX-Japanese's class has no flash_attention_2 (_supports_flash_attn false:
    # hf_defaults.NO_FLASH); Falcon's FalconFlashAttention2 raises under ALiBi (GPT-J's,
    # GPT-Neo's and Falcon's own FlashAttention2 classes, DiffLlama's two calls:
    # tests/test_graph_rules_left.py)
    for config in ("gpt_neox_japanese-tiny.json", "falcon-alibi-new-1ln.json"):
        assert activations.graph_activations(_spec(config), s, 64, amp=False, amp16=False,
                                             adapted_roles=None) is None, config
    # the MoE family runs Llama's attention: on the graph
    for config in ("mixtral-top1.json", "qwen2_moe-tiny.json"):
        acts = activations.graph_activations(_spec(config), s, 64, amp=False, amp16=False,
                                             adapted_roles=None)
        assert acts is not None and any(i.name.endswith("attn.rng_state") for i in acts.items)


def _draw(rng: random.Random) -> tuple[Llama, Run]:
    H = rng.choice((2, 4, 6))
    Hkv = rng.choice([h for h in (1, 2, H) if H % h == 0])
    dh = rng.choice((8, 12, 16, 20))
    kinds = rng.choice(("F", "S", "FS", "SSF"))
    fam = Llama(V=rng.randint(8, 64), E=rng.randint(4, 48), H=H, Hkv=Hkv, dh=dh,
                F=rng.randint(4, 64), L=len(kinds) if len(kinds) > 1 else rng.randint(1, 4),
                window=rng.choice((4, 16)) if "S" in kinds else 0, kinds=kinds,
                qk_norm=rng.choice(("none", "head")), fused_qkv=rng.random() < 0.3)
    dtype, autocast = rng.choice(((BF16, None), (F16, None), (F32, BF16), (BF16, BF16)))
    lora = Lora(rng.choice((2, 4)), frozenset(rng.choice((("q_proj",), ("k_proj", "o_proj"),
                                                          ("all-linear",)))), 0.0) \
        if rng.random() < 0.3 else None
    return fam, Run(rng.choice((1, 2, 3)), rng.choice((1, 5, 16, 33)), dtype, "cuda", "flash",
                    autocast, lora=lora, recompute=rng.choice(("none", "none", "full")))


def test_compiled_equals_traced_on_random_flash_runs() -> None:
    # window 4 or 16 against T 1 ... 73: both sides of the window's guard
    assert cache_hits_on_random_draws(_draw, 20261128, 10) >= 1


def test_a_sparse_pattern_under_a_fused_kernel_keeps_the_dense_set() -> None:
    # --attention-pattern names a block-sparse kernel transformers does not run: where the
    # run's kernel keeps no score tensor (flash-attn, SDPA's flash or memory-efficient) that
    # kernel keeps the dense set and the pattern saves compute, not memory (the rules' note);
    # eager attention and SDPA's math kernel keep scores, which the rules answer for
    from transformer_calc.flops import AttentionPattern

    spec, T = load_model("gpt2"), 512
    local = AttentionPattern("local", window=64)
    for kw in ({"attention": "flash"}, {"attention": "sdpa"},
               {"attention": "sdpa", "precision": "fp32"}):
        s = Settings(**{"precision": "bf16", "seq_len": T, "batch_size": 2, **kw})  # type: ignore[arg-type]
        sparse = activations.graph_activations(spec, s, T, amp=False, amp16=False,
                                               adapted_roles=None, pattern=local)
        dense = activations.graph_activations(spec, s, T, amp=False, amp16=False,
                                              adapted_roles=None)
        assert sparse is not None and dense is not None
        assert sparse.total == dense.total
        assert "saves compute, not memory" in sparse.notes[-1], kw
    for kw in ({"attention": "eager"}, {"attention": "sdpa", "device": "cpu"}):  # (dropout:
        # the CPU's math kernel)
        s = Settings(**{"precision": "bf16", "seq_len": T, "batch_size": 2, **kw})  # type: ignore[arg-type]
        assert activations.graph_activations(spec, s, T, amp=False, amp16=False,
                                             adapted_roles=None, pattern=local) is None, kw


@pytest.mark.parametrize("config", ["gemma4_text-tiny.json", "gemma3n_text-tiny.json"])
def test_sliding_layers_keep_no_mask_and_no_repeated_kv(config: str) -> None:
    # T = 64 over a window of 32 (Gemma 4) or 8 (Gemma 3n): SDPA gets sdpa_mask's bool mask
    # on the sliding layers, runs the memory-efficient kernel with K/V repeated to every
    # head and keeps the mask as a float (B, 1, T, T); flash-attn takes the window as
    # window_size and keeps K/V as they are, and no mask
    fam = family_of(_spec(config))
    flash = by_name(component_rows(fam, Run(2, 64, BF16, "cuda", "flash")))
    sdpa = by_name(component_rows(fam, Run(2, 64, BF16, "cuda", "sdpa")))
    assert "decoder.sliding.attn.mask" in sdpa and "decoder.sliding.attn.mask" not in flash
    assert flash["decoder.sliding.attn.qkv"] < sdpa["decoder.sliding.attn.qkv"]
    assert flash["decoder.full.attn.qkv"] == sdpa["decoder.full.attn.qkv"]
    r = evaluate(fam, Run(2, 64, BF16, "cuda", "flash"))
    assert r.forward_flops == 2 * 64 * count_flops(_spec(config), 64).total


def test_a_head_dim_over_256_is_refused() -> None:
    # gemma4_text-moe's full layers: global_head_dim 512 (mha_fwd: head_size <= 256)
    with pytest.raises(TcalcError, match="head dims up to 256"):
        evaluate(family_of(_spec("gemma4_text-moe.json")), Run(2, 64, BF16, "cuda", "flash"))


@pytest.mark.parametrize("model", ["t5-small", "t5-base"])
def test_a_class_without_flash_attention_2_is_refused(cli,  # type: ignore[no-untyped-def]
                                                      model: str) -> None:
    # transformers 5.23's T5ForConditionalGeneration has no flash_attention_2 path
    # (hf_defaults.NO_FLASH: _supports_flash_attn): there is no such run to estimate
    out = cli("memory", model, "--attention", "flash", code=2)
    assert "--attention flash" in out.stderr + out.stdout and "model type t5" in (
        out.stderr + out.stdout)
    cli("memory", model, "--attention", "flash", "--inference")  # serving reads no kernel


def test_the_paper_transformer_has_no_flash_attention_2(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("memory", "transformer-base", "--attention", "flash", code=2)
    assert "nn.MultiheadAttention" in out.stderr + out.stdout
