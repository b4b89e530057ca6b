"""Per-rank peak memory per phase of a training step under data and tensor parallelism, without
a GPU (developer tool, needs torch + transformers + peft): the combinations users run, beside
tools/measure_peak_fake.py (one GPU) whose CUDA emulations it imports.

Each run is one rank's (rank 0's) training step under FakeTensorMode with a fake process group
(torch.testing._internal.distributed.fake_pg, collectives return at once, nothing is computed
or allocated): ZeRO sharding and tensor parallelism run per rank on fake CPU tensors, and
torch.distributed._tools' MemTracker (FSDPMemTracker for FSDP2, which knows FSDP's all-gather
and reduce-scatter buffers) counts every tensor storage that is alive. CUDA's choices are
emulated as tools/measure_peak_fake.py does (imported, not copied): 512-byte allocator blocks,
CUDA's dropout masks (1 byte), the H100 SDPA kernel choice, CUDA autocast's op lists for AMP.

The grid (models × training × checkpointing × precision × parallelism):

- models: MODELS, a GPT-2-shaped and a Llama-shaped config small enough for seconds per run;
  B=2, T=256, random tokens as labels, attn_implementation="sdpa";
- training: full (every parameter trains), lora_qv (peft LoraConfig r=8 on q_proj, v_proj /
  GPT-2's c_attn, lora_dropout=0), lora_all (target_modules="all-linear");
- checkpointing: none (the forward gets use_cache=False), or
  activation_checkpointing_enable({"use_reentrant": False}) as the Hugging Face Trainer calls
  it (transformers then sets use_cache=False and itself calls enable_input_require_grads,
  with peft or without: main_input_name is input_ids);
- precision: fp32; amp_bf16 (fp32 weights, the emulated CUDA autocast around forward + loss,
  as the Trainer's bf16=True; under FSDP2 also accelerate's MixedPrecisionPolicy for bf16:
  param, reduce and output dtype bf16); bf16 (the model built in bf16, pure). LoRA: the base
  in bf16 for bf16 and amp_bf16, the adapters in fp32 (peft's autocast_adapter_dtype);
- parallelism of rank 0: single (no process group); zero1 (DDP with gradient_as_bucket_view
  and ZeroRedundancyOptimizer over AdamW); zero2 (FSDP2 fully_shard of every decoder layer
  and the root, reshard_after_forward=False); zero3 (FSDP2 fully_shard, its defaults), at
  world sizes 2, 4, 8; tp at 2, 4, 8: torchtitan's layer plan with parallelize_module
  (ColwiseParallel on q/k/v/gate/up, RowwiseParallel on o/down; embeddings, final norm, LM
  head and loss whole on every rank; over LoRA the base layer split as the plain one,
  lora_B of a column-parallel layer column-wise, lora_A of a row-parallel one row-wise);
  tp_emulation "dtensor". Where DTensor cannot express the split (K/V heads fewer than tp;
  GPT-2's fused Conv1D c_attn, which ColwiseParallel does not take) each rank's local model
  is built instead, as Megatron-LM splits it (heads H/tp, K/V heads max(1, kv/tp)
  replicated, FFN F/tp, same hidden size; GPT-2's c_attn 3·E/tp outputs): tp_emulation
  "local-shapes". The Llama rows at tp 2 are run both ways, to check the emulation.

What fake tensors and the fake group cannot do, and what stands in (each in its function):
transformers cannot tell on fake position ids that no sequences are packed and would build a
(B, 1, T, T) mask, so it is told there are none, as it finds on a GPU (_no_packing); a fake
parameter cannot be swapped in place by Module.to(), so peft's and the GPT-2 local layers'
casts make new Parameters (_fake_apply); DDP's shape check and bucket rebuild read tensor
data and its built-in all-reduce hook finds no result in the fake Work, so the check and
the rebuild are skipped and a hook hands the bucket back in place (_ddp); the device mesh is
made outside fake mode; MemTracker hooks the gradient of every parameter, which LoRA's frozen
base refuses, so those are marked hooked; checkpoint's recompute re-enters the emulated
autocast as it re-enters torch.autocast (context_fn); MemTracker's per-module peaks, unread
here, are not kept (_global_peak_only, 3x faster). FSDP2 runs unchanged on the fake group:
torch.distributed._tools.fake_collectives gives its collectives fake kernels.

AdamW, lr 1e-5, foreach, over the trainable parameters. Per phase (forward with the loss,
backward, optimizer step) the peak in bytes, reset at the start of each phase as
torch.cuda.reset_peak_memory_stats() resets it, for both of two steps (step 2 the steady
state), and the memory after setup. tests/data/peak_fake_parallel_cpu.json was written by

    python tools/measure_peak_parallel.py --jobs 2 --out tests/data/peak_fake_parallel_cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_peak_fake import (  # noqa: E402
    _emulate_cuda_kernels,
    _round_to_blocks,
    cuda_autocast,
)

BATCH, SEQ = 2, 256
LORA_RANK = 8
MODELS: dict[str, dict[str, Any]] = {
    # GPT-2's defaults but the sizes: dropout 0.1 on embeddings, attention and residuals
    "gpt2-small-shape": {"model_type": "gpt2", "vocab_size": 4096, "n_positions": 1024,
                         "n_embd": 256, "n_layer": 4, "n_head": 8, "resid_pdrop": 0.1,
                         "embd_pdrop": 0.1, "attn_pdrop": 0.1},
    "llama-small-shape": {"model_type": "llama", "vocab_size": 4096, "hidden_size": 256,
                          "intermediate_size": 688, "num_hidden_layers": 4,
                          "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                          "max_position_embeddings": 1024, "tie_word_embeddings": False,
                          "rms_norm_eps": 1e-5, "rope_theta": 500000.0},
}
TRAININGS = ("full", "lora_qv", "lora_all")
LORA_QV = {"gpt2": ["c_attn"], "llama": ["q_proj", "v_proj"]}
PRECISIONS = ("fp32", "amp_bf16", "bf16")
PARALLELS = (("single", 1), *((k, w) for k in ("zero1", "zero2", "zero3", "tp")
                              for w in (2, 4, 8)))
COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROWWISE = ("o_proj", "down_proj")


def _local_config(config: dict, tp: int) -> dict:
    """One tensor-parallel rank's share of the model, as Megatron-LM splits it: heads H/tp,
    K/V heads max(1, kv/tp) (replicated where fewer than tp), the FFN's F/tp, the hidden
    size whole."""
    c = dict(config)
    if c["model_type"] == "llama":
        c["num_attention_heads"] //= tp
        c["num_key_value_heads"] = max(1, c["num_key_value_heads"] // tp)
        c["intermediate_size"] //= tp
    return c


def _gpt2_local(model: torch.nn.Module, tp: int, dtype: torch.dtype) -> None:
    """GPT-2's blocks cut to one rank's share in place: c_attn's 3·E outputs and c_proj's E
    inputs to E/tp per part, the MLP's 4·E to 4·E/tp (Conv1D weights are [in, out])."""
    from transformers.pytorch_utils import Conv1D

    for block in model.transformer.h:
        attn, mlp = block.attn, block.mlp
        e = attn.embed_dim
        attn.c_attn = Conv1D(3 * e // tp, e).to(dtype)
        attn.c_proj = Conv1D(e, e // tp).to(dtype)  # a rank's rows; the bias whole
        attn.num_heads //= tp
        attn.split_size = e // tp
        inner = mlp.c_fc.weight.shape[1]
        mlp.c_fc = Conv1D(inner // tp, e).to(dtype)
        mlp.c_proj = Conv1D(e, inner // tp).to(dtype)


def _tp_plan(model: torch.nn.Module, lora: bool) -> dict:
    """torchtitan's layers-only plan by module path; over peft's layers the base layer is
    split as the plain layer would be, lora_B of a column-parallel layer column-wise and
    lora_A of a row-parallel layer row-wise (the rank-r side whole on every rank)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict = {}
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf not in COLWISE + ROWWISE:
            continue
        col = leaf in COLWISE
        style = ColwiseParallel if col else RowwiseParallel
        if lora and hasattr(mod, "base_layer"):
            plan[f"{name}.base_layer"] = style()
            if "default" in getattr(mod, "lora_A", {}):
                plan[f"{name}.lora_B.default" if col else f"{name}.lora_A.default"] = style()
        elif isinstance(mod, torch.nn.Linear):
            plan[name] = style()
    return plan


def _tp_kind(config: dict, tp: int) -> str:
    """dtensor where parallelize_module expresses the split, else local-shapes (why: see
    the module docstring)."""
    if config["model_type"] != "llama":
        return "local-shapes"  # GPT-2's fused Conv1D c_attn: not an nn.Linear
    if config["num_key_value_heads"] % tp:
        return "local-shapes"  # fewer K/V heads than ranks: replicated, not a DTensor split
    return "dtensor"


def _ddp(model: torch.nn.Module) -> torch.nn.Module:
    """DDP with gradient_as_bucket_view (the gradients live in its buckets) over the fake
    group: two of its steps read tensor data, which fake tensors have not (the check that every
    rank's shapes agree, the rebuild of the buckets in gradient order after the first step:
    the same bytes), and its built-in all-reduce hook finds no result in the fake group's Work,
    so a hook that all-reduces in place (as NCCL does) stands in."""
    import torch.distributed.utils as dist_utils
    import torch.nn.parallel.distributed as ddp_mod
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp_mod._verify_param_shape_across_processes = lambda *a, **k: None  # type: ignore
    dist_utils._verify_param_shape_across_processes = lambda *a, **k: None  # type: ignore
    ddp = DDP(model, gradient_as_bucket_view=True)

    def allreduce_in_place(state, bucket):  # type: ignore[no-untyped-def]
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    ddp.register_comm_hook(None, allreduce_in_place)
    ddp.reducer = _NoRebuild(ddp.reducer)  # type: ignore[assignment]
    return ddp


@contextlib.contextmanager
def _fake_apply():  # type: ignore[no-untyped-def]
    """Module.to() / .float() for fake parameters: torch swaps a fake parameter in place,
    which fails (peft moves and casts its adapters so, the GPT-2 local layers are cast);
    here a converted parameter is a new Parameter object, fine before any optimizer."""
    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        if recurse:
            for child in self.children():
                child._apply(fn)
        for key, p in self._parameters.items():
            if p is not None:
                with torch.no_grad():
                    q = fn(p)
                if q is not p:
                    self._parameters[key] = torch.nn.Parameter(q, requires_grad=p.requires_grad)
        for key, b in self._buffers.items():
            if b is not None:
                self._buffers[key] = fn(b)
        return self

    saved = torch.nn.Module._apply
    torch.nn.Module._apply = _apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module._apply = saved  # type: ignore[method-assign]


def _build(name: str, training: str, ckpt: bool, precision: str, tp: int,
           local: bool, row: dict) -> tuple[torch.nn.Module, Any]:
    """The model (under the active fake mode), with peft's adapters and checkpointing."""
    import transformers

    config = MODELS[name]
    build = _local_config(config, tp) if local else config
    cfg = transformers.AutoConfig.for_model(**build)
    lora = training != "full"
    # the base in bf16 for pure bf16, and for LoRA under AMP (a frozen base is cast)
    base16 = precision == "bf16" or (lora and precision == "amp_bf16")
    dtype = torch.bfloat16 if base16 else torch.float32
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                          dtype=dtype)
    if local and config["model_type"] == "gpt2":
        with _fake_apply():
            _gpt2_local(model, tp, dtype)
    if lora:
        import peft

        targets = LORA_QV[config["model_type"]] if training == "lora_qv" else "all-linear"
        with _fake_apply():
            model = peft.get_peft_model(model, peft.LoraConfig(
                r=LORA_RANK, target_modules=targets, lora_dropout=0.0))
        row["lora"] = {"r": LORA_RANK, "target_modules": targets, "lora_dropout": 0.0,
                       "base_dtype": str(dtype).removeprefix("torch."),
                       "adapter_dtype": "float32"}
    if ckpt:
        kwargs: dict = {"use_reentrant": False}
        if precision == "amp_bf16":
            # checkpoint re-enters torch.autocast around the recompute; the emulated autocast
            # is no torch.autocast, so it is handed to checkpoint to re-enter the same way
            kwargs["context_fn"] = lambda: (contextlib.nullcontext(), cuda_autocast())
            row["checkpoint_context_fn"] = "the emulated CUDA autocast around the recompute"
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    # with checkpointing transformers' activation_checkpointing_enable itself calls
    # enable_input_require_grads (main_input_name is input_ids), as under the Trainer; without
    # it nothing does (peft only for quantised models)
    row["input_require_grads"] = ckpt
    model.train()
    return model, cfg


def measure(name: str, training: str, ckpt: bool, precision: str, parallel: str,
            world: int, tp_emulation: str | None = None) -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    config = MODELS[name]
    lora = training != "full"
    tp = world if parallel == "tp" else 1
    if parallel == "tp":
        tp_emulation = tp_emulation or _tp_kind(config, tp)
    local = tp_emulation == "local-shapes"
    row: dict = {"model": name, "config": config, "batch": BATCH, "seq_len": SEQ,
                 "training": training, "checkpointing": ckpt, "precision": precision,
                 "parallel": parallel, "world_size": world, "use_cache": False,
                 "attention": "sdpa", "tp_emulation": tp_emulation,
                 "dropout": {k: v for k, v in config.items() if k.endswith("pdrop")}
                 or {"attention_dropout": 0.0},
                 "params": _params(config, training)[0],
                 "trainable_params": _params(config, training)[1]}
    torch.manual_seed(0)
    mesh = None
    if parallel in ("zero2", "zero3") or (parallel == "tp" and not local):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world,))  # outside fake mode: it reads its ranks
    with FakeTensorMode():
        model, cfg = _build(name, training, ckpt, precision, tp, local, row)
        if parallel in ("zero2", "zero3"):
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            kw: dict = {"mesh": mesh}
            if parallel == "zero2":
                kw["reshard_after_forward"] = False
            if precision == "amp_bf16":
                kw["mp_policy"] = MixedPrecisionPolicy(
                    param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                    output_dtype=torch.bfloat16)
                row["fsdp_mp_policy"] = "param, reduce, output dtype bf16 (accelerate's bf16)"
            for layer in _layers(model):
                fully_shard(layer, **kw)
            fully_shard(model, **kw)
        if parallel == "tp" and not local:
            from torch.distributed.tensor.parallel import parallelize_module

            parallelize_module(model, mesh, _tp_plan(model, lora))
        opt: Any = None
        if parallel != "zero1":  # AdamW allocates its states in its first step
            trainable = [p for p in model.parameters() if p.requires_grad]
            # foreach takes no mix of DTensors and tensors (tp's whole embeddings and head):
            # a group each, the same bytes
            groups = [[p for p in trainable if _is_dtensor(p) == d] for d in (True, False)]
            opt = torch.optim.AdamW([{"params": g} for g in groups if g], lr=1e-5,
                                    foreach=True)
        ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
        mt: Any = FSDPMemTracker(model, opt) if parallel in ("zero2", "zero3") \
            else MemTracker()
        if parallel not in ("zero2", "zero3"):
            mt.track_external(model)
        dev = ids.device
        steps = []
        with mt:
            def total() -> int:
                return int(mt.get_tracker_snapshot("current")[dev]["Total"])

            def reset() -> None:  # torch.cuda.reset_peak_memory_stats()
                mt._peak_mem_snap[dev] = mt.get_tracker_snapshot("current")[dev]
                mt._peak_mem[dev] = total()

            def peak() -> int:
                return int(mt.get_tracker_snapshot("peak")[dev]["Total"])

            def categories() -> dict:
                snap = mt.get_tracker_snapshot("peak")[dev]
                return {str(k).split(".")[-1]: int(v) for k, v in snap.items()
                        if k != "Total" and v}

            # built under the tracker: DDP's buckets are allocated here
            if parallel == "zero1":
                from torch.distributed.optim import ZeroRedundancyOptimizer

                model = _ddp(model)
                opt = ZeroRedundancyOptimizer(
                    [p for p in model.parameters() if p.requires_grad],
                    optimizer_class=torch.optim.AdamW, lr=1e-5, foreach=True)
                row["zero1"] = "DDP(gradient_as_bucket_view=True) + " \
                               "ZeroRedundancyOptimizer(AdamW, foreach)"
            row["params_per_rank"] = sum(_local(p).numel() for p in model.parameters())
            # MemTracker hooks the gradient of every parameter a module holds, which a frozen
            # one (LoRA's base) refuses: marked as hooked already
            for p in model.parameters():
                if not p.requires_grad:
                    mt._param_to_grad_hook_handles[p] = (_NO_HOOK, _NO_HOOK)
            row["after_setup_bytes"] = total()
            for _ in range(2):
                step: dict = {}
                mt.reset_mod_stats()
                reset()
                if precision == "amp_bf16":
                    with cuda_autocast():
                        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
                else:
                    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
                step["forward_peak_bytes"] = peak()
                step["forward_categories"] = categories()
                step["after_forward_bytes"] = total()
                reset()
                loss.backward()
                step["backward_peak_bytes"] = peak()
                step["backward_categories"] = categories()
                del loss
                step["after_backward_bytes"] = total()
                reset()
                opt.step()
                step["optimizer_peak_bytes"] = peak()
                step["optimizer_categories"] = categories()
                step["after_optimizer_bytes"] = total()
                opt.zero_grad(set_to_none=True)
                step["after_zero_grad_bytes"] = total()
                steps.append(step)
        row["steps"] = steps
    return row


class _NoHook:
    def remove(self) -> None:
        pass


_NO_HOOK = _NoHook()


def _is_dtensor(p: torch.Tensor) -> bool:
    return hasattr(p, "to_local")


class _NoRebuild:
    """DDP's reducer, but for the rebuild of its buckets in gradient order after the first
    step: that syncs the order over the group by reading a tensor's data (none here); the
    rebuilt buckets hold the same bytes."""

    def __init__(self, reducer: Any) -> None:
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p  # type: ignore[operator]


def _layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers, under peft's wrappers too."""
    return [m for m in model.modules()
            if type(m).__name__ in ("GPT2Block", "LlamaDecoderLayer")
            or type(m).__name__.removeprefix("FSDP") in ("GPT2Block", "LlamaDecoderLayer")]


_PARAMS: dict = {}


def _params(config: dict, training: str) -> tuple[int, int]:
    """The whole model's parameters and trainable parameters (not one rank's share)."""
    key = (json.dumps(config, sort_keys=True), training)
    if key not in _PARAMS:
        import transformers
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            m = transformers.AutoModelForCausalLM.from_config(
                transformers.AutoConfig.for_model(**config))
            if training != "full":
                import peft

                targets = LORA_QV[config["model_type"]] if training == "lora_qv" \
                    else "all-linear"
                with _fake_apply():
                    m = peft.get_peft_model(m, peft.LoraConfig(r=LORA_RANK,
                                                               target_modules=targets))
            _PARAMS[key] = (sum(p.numel() for p in m.parameters()),
                            sum(p.numel() for p in m.parameters() if p.requires_grad))
    return _PARAMS[key]


def _cases(names: list[str], parallels: list[tuple[str, int]]) -> list[tuple]:
    """The grid, grouped by (parallel, world size, model): one process each."""
    groups = []
    for parallel, world in parallels:
        for name in names:
            cases = [(name, t, c, p, parallel, world, None) for t in TRAININGS
                     for c in (False, True) for p in PRECISIONS]
            if parallel == "tp" and world == 2 and MODELS[name]["model_type"] == "llama":
                # the emulation checked against DTensor where both run
                cases += [(name, t, c, p, parallel, world, "local-shapes") for t in TRAININGS
                          for c in (False, True) for p in PRECISIONS]
            groups.append((parallel, world, cases))
    return groups


def _global_peak_only() -> None:
    """MemTracker updates every tracked module's own peak after every op, a walk over all the
    modules (peft's adapters make them many) that made a run 3x slower; only the device's
    peak is read here, and updated as MemTracker does."""
    from torch.distributed._tools import mem_tracker

    def update_peak_stats(self, peak_state) -> None:  # type: ignore[no-untyped-def]
        for dev, dev_snap in self._curr_mem_snap.items():
            if self._peak_mem.get(dev, 0) < dev_snap[mem_tracker._TOTAL_KEY]:
                self._peak_mem[dev] = dev_snap[mem_tracker._TOTAL_KEY]
                self._peak_mem_snap[dev] = dict(dev_snap)

    mem_tracker.MemTracker._update_peak_stats = update_peak_stats  # type: ignore


def _no_packing() -> None:
    """transformers looks for packed sequences in the position ids and, on fake tensors (its
    is_tracing), cannot read that there are none, so it builds a (B, 1, T, T) mask and SDPA
    leaves its fused kernels; on a GPU it reads the ids (0..T-1, one sequence a row), finds
    no packing and passes is_causal=True with no mask: emulated."""
    from transformers import masking_utils

    masking_utils.find_packed_sequence_indices = lambda position_ids: None


def _run_group(group: tuple) -> list[dict]:
    """One process: the fake process group of this world size, then every case in turn."""
    import warnings

    import torch.distributed as dist
    import transformers

    parallel, world, cases = group
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    _round_to_blocks()
    _emulate_cuda_kernels()
    _global_peak_only()
    _no_packing()
    if parallel != "single":
        import torch.distributed._tools.fake_collectives  # noqa: F401  fake collectives
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    rows = []
    for case in cases:
        t0 = time.time()
        try:
            row = measure(*case)
        except Exception as e:  # noqa: BLE001  a case that cannot run is recorded, with why
            name, training, ckpt, precision, parallel, world, emulation = case
            where = traceback.extract_tb(e.__traceback__)[-1]
            row = {"model": name, "training": training, "checkpointing": ckpt,
                   "precision": precision, "parallel": parallel, "world_size": world,
                   "tp_emulation": emulation,
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                            f" (at {Path(where.filename).name}:{where.lineno})"}
        row["wall_s"] = round(time.time() - t0, 2)
        print(json.dumps({k: v for k, v in row.items() if k not in ("config", "steps")}),
              flush=True)
        rows.append(row)
    if parallel != "single":
        dist.destroy_process_group()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--parallel", default="",
                    help="only these, e.g. single,zero3:4,tp:2 (default: the whole grid)")
    ap.add_argument("--jobs", type=int, default=1, help="processes at once")
    args = ap.parse_args()
    import multiprocessing

    import peft
    import transformers

    parallels = list(PARALLELS)
    if args.parallel:
        want = args.parallel.split(",")
        parallels = [(k, w) for k, w in parallels if k in want or f"{k}:{w}" in want]
    groups = _cases(args.models.split(","), parallels)
    t0 = time.time()
    # a fresh process per group: its own process group, nothing left from the last
    with multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        rows = [r for rs in pool.map(_run_group, groups, chunksize=1) for r in rs]
    meta = {"torch": torch.__version__, "transformers": transformers.__version__,
            "peft": peft.__version__, "python": platform.python_version(),
            "command": "python tools/measure_peak_parallel.py " + " ".join(sys.argv[1:]),
            "wall_s": round(time.time() - t0, 1),
            "how": "tools/measure_peak_parallel.py: rank 0 of a fake process group "
                   "(torch.testing._internal.distributed.fake_pg) runs two training steps "
                   "on FakeTensorMode CPU tensors under MemTracker (FSDPMemTracker for "
                   "FSDP2), with tools/measure_peak_fake.py's emulation of CUDA (512-byte "
                   "allocator blocks, 1-byte dropout masks, the H100 SDPA kernel choice, "
                   "CUDA autocast's op lists for amp_bf16); zero1 = DDP(gradient_as_bucket_"
                   "view) + ZeroRedundancyOptimizer, zero2/zero3 = FSDP2 fully_shard per "
                   "decoder layer and root (zero2: reshard_after_forward=False), tp = "
                   "parallelize_module with torchtitan's layers-only plan, or each rank's "
                   "local shapes where DTensor cannot split (tp_emulation); per phase "
                   "(forward with loss, backward, optimizer step) the peak in bytes since "
                   "the phase began, of both steps (step 2 the steady state); categories: "
                   "the tracker's snapshot at each phase's peak",
            "batch": BATCH, "seq_len": SEQ, "attention": "sdpa",
            "optimizer": "AdamW(lr=1e-5, foreach=True) over the trainable parameters"}
    runs = [r for r in rows if "error" not in r]
    not_run = [r for r in rows if "error" in r]
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "runs": runs, "not_run": not_run}, f, indent=1)
    print(f"{len(runs)} runs, {len(not_run)} not run, {meta['wall_s']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
