"""How each framework runs a training step, as data: the settings its code fixes.

A recipe names a framework (``--recipe``) and stands for the values of individual settings,
each of which is a flag of its own (memory.Settings, cli.py): a flag the user gives wins over
the recipe. A recipe holds only what the framework's code or documented defaults fix, never
what its configs choose per run (checkpointing, the optimizer, optimizer-in-backward,
activation offloading, torch.compile): those stay flags. docs/memory.md cites each source.
"""

from __future__ import annotations

from typing import Any

# name -> the settings it fixes
RECIPE_SETTINGS: dict[str, dict[str, Any]] = {
    # The Hugging Face Trainer with bf16=True (torch.autocast over fp32 weights), PEFT's
    # adapters (get_peft_model's autocast_adapter_dtype=True upcasts them to fp32), and
    # transformers' loss_function (ForCausalLMLoss: logits.float() inside the loss)
    "hf": {"precision": "bf16", "mixed": True, "adapter_dtype": "fp32", "logits_fp32": "loss",
           "loss_chunks": 1},
    # torchtune's recipes: the model in bf16 (dtype: bf16, no autocast); LoRALinear's
    # adapters made in that dtype; TransformerDecoder.forward returns output(h).float(); the
    # configs' loss CEWithChunkedOutputLoss(num_output_chunks=8), which makes the model
    # return 16-bit chunks and upcasts one chunk at a time
    "torchtune": {"precision": "bf16", "mixed": False, "adapter_dtype": "bf16",
                  "logits_fp32": "model", "loss_chunks": 8},
    # LitGPT (precision "bf16-true"): the model and LoRA's A and B in bf16; its fine-tuning
    # scripts run the LM head in chunks of 128 tokens and chunked_cross_entropy on the 16-bit
    # chunks, never upcast. Its checkpoint conversion copies a tied embedding into
    # lm_head.weight (litgpt/scripts/convert_hf_checkpoint.py: 'if "lm_head.weight" not in
    # state_dict') and its GPT has an lm_head of its own; fine-tuning refuses
    # tie_embeddings (litgpt/finetune/lora.py, validate_args)
    # With --quantize bnb.*, Lightning's BitsandbytesPrecision replaces every nn.Linear, the
    # head's too, quantising from fp16 (lightning_bnb); its fit loop keeps the previous
    # micro-batch's logits named through the next forward (keeps_previous_graph)
    "litgpt": {"precision": "bf16", "mixed": False, "adapter_dtype": "bf16",
               "logits_fp32": "never", "loss_chunks": 1, "untied_head": True,
               "lightning_bnb": True, "keeps_previous_graph": True},
    # Megatron-LM (--bf16): the model in bf16, fp32 main params and a persistent fp32
    # gradient buffer; vocabulary-parallel embeddings, head and cross-entropy under TP
    "megatron": {"precision": "bf16", "mixed": True, "logits_fp32": "loss", "loss_chunks": 1},
    # DeepSpeed (bf16 enabled): the engine casts the whole module, adapters included, to
    # bf16 (module.bfloat16()), the optimizer keeps fp32 master weights and gradients;
    # ZeRO stages and offload by --zero and --offload; a transformers model's loss
    "deepspeed": {"precision": "bf16", "mixed": True, "adapter_dtype": "bf16",
                  "logits_fp32": "loss", "loss_chunks": 1},
}
RECIPE_SETTINGS["amp"] = RECIPE_SETTINGS["hf"]  # another name of hf

# what each recipe assumes, said in the output
RECIPE_NOTES = {
    "hf": "the Hugging Face Trainer: torch AMP over fp32 weights, PEFT's fp32 adapters, "
          "the logits upcast in transformers' loss",
    "torchtune": "torchtune: the model in bf16, bf16 adapters, output(h).float() in the "
                 "model or CEWithChunkedOutputLoss's 16-bit chunks, each upcast in the loss",
    "litgpt": "LitGPT (bf16-true): the model and adapters in bf16, cross-entropy on the "
              "16-bit logits in 128-token chunks, an LM head of its own where the Hub's "
              "model ties it to the embedding",
    "megatron": "Megatron-LM: a bf16 model, fp32 main params and a persistent fp32 gradient "
                "buffer",
    "deepspeed": "DeepSpeed: the module cast to bf16 (adapters too), fp32 master weights "
                 "and gradients in the optimizer",
}
RECIPE_NOTES["amp"] = RECIPE_NOTES["hf"]


def recipe_settings(name: str) -> dict[str, Any]:
    """The settings a recipe fixes, as memory.Settings keywords (a copy)."""
    from transformer_calc.errors import TcalcError

    if name not in RECIPE_SETTINGS:
        raise TcalcError(f"--recipe: expected one of {', '.join(RECIPE_SETTINGS)}, "
                         f"got {name!r}")
    return {"recipe": name, **RECIPE_SETTINGS[name]}
