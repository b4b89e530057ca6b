"""Hugging Face config.json files counted exactly, offline.

REFERENCE: every number was obtained from transformers 5.23.0 with torch 2.13.0 (CPU, meta
device) by tools/reference_counts.py: the model class named beside it, built from that exact
file, sum of numel() over parameters() with requires_grad. The files under tests/data/hf are
the published config.json of the named Hub models; tests/data/hf/variants are small configs
written to reach each mapping branch (defaults-*.json hold only model_type, so every other
key takes the config class's default). The tests need no torch.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from graph_rows import every_row

from transformer_calc import count_params, load_model
from transformer_calc.errors import SpecError
from transformer_calc.hf import HEAD_CLASS, spec_from_hf
from transformer_calc.plan import plan_of

HF = DATA / "hf"

REFERENCE = {
    "bart-base.json": (139_420_416, "BartModel"),  # its architectures
    "bert-base-uncased.json": (109_514_298, "BertForMaskedLM"),
    "falcon-40b.json": (41_303_293_952, "FalconForCausalLM"),
    "falcon-7b.json": (6_921_720_704, "FalconForCausalLM"),
    "gemma-2b.json": (2_506_172_416, "GemmaForCausalLM"),
    "gpt2.json": (124_439_808, "GPT2LMHeadModel"),
    "llama-2-7b.json": (6_738_415_616, "LlamaForCausalLM"),
    "llama-3-8b.json": (8_030_261_248, "LlamaForCausalLM"),
    "mistral-7b.json": (7_241_732_096, "MistralForCausalLM"),
    "mixtral-8x7b.json": (46_702_792_704, "MixtralForCausalLM"),
    "opt-125m.json": (125_239_296, "OPTForCausalLM"),
    "opt-350m.json": (331_196_416, "OPTForCausalLM"),
    "opus-mt-en-de.json": (73_886_208, "MarianMTModel"),
    "phi-2.json": (2_779_683_840, "PhiForCausalLM"),
    "pythia-160m.json": (162_322_944, "GPTNeoXForCausalLM"),
    "qwen2-0.5b.json": (494_032_768, "Qwen2ForCausalLM"),
    "roberta-base.json": (124_697_433, "RobertaForMaskedLM"),
    "t5-base.json": (222_903_552, "T5ForConditionalGeneration"),
    "t5-small.json": (60_506_624, "T5ForConditionalGeneration"),
    "t5-v1_1-small.json": (60_511_616, "T5ForConditionalGeneration"),
    "variants/bart-asymmetric.json": (2_695_680, "BartForConditionalGeneration"),
    # ... with activation_dropout 0.1 (no parameter of its own)
    "variants/bart-activation-dropout.json": (2_695_680, "BartForConditionalGeneration"),
    "variants/bert-untied.json": (1_767_120, "BertForMaskedLM"),
    "variants/bert-big-vocab.json": (2_088_186, "BertForMaskedLM"),
    "variants/bert-seq-cls.json": (1_509_379, "BertForSequenceClassification"),
    "variants/bert-token-cls.json": (1_444_101, "BertForTokenClassification"),
    "variants/xlm-roberta-seq-cls.json": (103_555, "XLMRobertaForSequenceClassification"),
    "variants/hy_v3-tiny.json": (251_936, "HYV3ForCausalLM"),
    "variants/deepseek_v32-tiny.json": (145_840, "DeepseekV32ForCausalLM"),
    "variants/glm_moe_dsa-tiny.json": (142_384, "GlmMoeDsaForCausalLM"),
    "variants/whisper-tiny.json": (180_736, "WhisperForCausalLM"),
    "variants/trocr-tiny.json": (181_120, "TrOCRForCausalLM"),
    "variants/bart-causal.json": (181_120, "BartForCausalLM"),
    "variants/mpnet-tiny.json": (152_872, "MPNetForMaskedLM"),
    # the last layer's attention output alone has a bias (dense_bias): 64 parameters
    "variants/gpt_neox_japanese-tiny.json": (163_264, "GPTNeoXJapaneseForCausalLM"),
    # xIELU's alpha_p and alpha_n: 2 parameters per layer
    "variants/apertus-tiny.json": (226_854, "ApertusForCausalLM"),
    # attn_sub_norm (64) and ffn_sub_norm (160) in each of 3 layers
    "variants/bitnet-tiny.json": (258_144, "BitNetForCausalLM"),
    # layer 0 has no attention norm (nn.Identity); the head's dense has no bias, the
    # decoder's bias is its own (1,000): the same count for the encoder and the decoder
    "variants/modernbert-tiny.json": (174_056, "ModernBertForMaskedLM"),
    "variants/modernbert-decoder-tiny.json": (174_056, "ModernBertDecoderForCausalLM"),
    # a source table of 1,000 rows and a target table of 900 (untied output projection of
    # 900), sinusoidal position tables that transformers 5.23 trains: 2 · 130 · 64
    "variants/fsmt-tiny.json": (346_752, "FSMTForConditionalGeneration"),
    # BART's kin, each config class's defaults with small sizes (the sinusoidal tables of
    # Pegasus and M2M-100 frozen or buffers; BigBird-Pegasus's attention without biases)
    "variants/mbart-tiny.json": (217_344, "MBartForConditionalGeneration"),
    "variants/plbart-tiny.json": (217_088, "PLBartForConditionalGeneration"),
    "variants/blenderbot-tiny.json": (216_832, "BlenderbotForConditionalGeneration"),
    "variants/blenderbot-small-tiny.json": (216_832,
                                            "BlenderbotSmallForConditionalGeneration"),
    "variants/pegasus-tiny.json": (200_448, "PegasusForConditionalGeneration"),
    "variants/m2m_100-tiny.json": (200_448, "M2M100ForConditionalGeneration"),
    "variants/mvp-tiny.json": (217_088, "MvpForConditionalGeneration"),
    "variants/bigbird_pegasus-tiny.json": (231_680, "BigBirdPegasusForConditionalGeneration"),
    # embeddings of 32 (tables and norm) projected to 64 with a bias; the head back to 32,
    # the decoder tied with its own bias
    "variants/electra-tiny.json": (104_264, "ElectraForMaskedLM"),
    "variants/electra-unprojected.json": (104_904, "ElectraForMaskedLM"),
    "variants/camembert-tiny.json": (44_028, "CamembertForMaskedLM"),
    "variants/data2vec-text-tiny.json": (60_192, "Data2VecTextForMaskedLM"),
    "variants/ernie-tiny.json": (149_820, "ErnieForMaskedLM"),
    "variants/xlm-roberta-tiny.json": (103_988, "XLMRobertaForMaskedLM"),
    # embeddings of 32 projected to 64; a head of 48 and an untied 48 × 1,000 decoder
    "variants/rembert-tiny.json": (153_336, "RemBertForMaskedLM"),
    # 4 layers sharing 2 sets of weights (num_hidden_groups 2), embeddings of 32
    "variants/albert-tiny.json": (104_264, "AlbertForMaskedLM"),
    # a shape table (70 × 16) and a pronunciation table (50 × 24) beside the word table,
    # concatenated and projected back: (64 + 16 + 24) × 64 + 64
    "variants/roc_bert-tiny.json": (153_656, "RoCBertForMaskedLM"),
    # 3 self-attention layers and 2 cross-attention layers (q/k norms, two gates), which a
    # text-only forward skips; a token table of 1,008 rows, an untied head of 1,000
    "variants/mllama-tiny.json": (282_884, "MllamaForCausalLM"),
    # λ's four vectors of d_head (16) per layer
    "variants/diffllama-tiny.json": (189_888, "DiffLlamaForCausalLM"),
    # Gemma 4: full layers of head width 32 with one K/V head and no value projection
    # (attention_k_eq_v), the last two layers reusing earlier keys (no K/V projections or
    # norms) with a 2 · d_ff FFN, per-layer embeddings of 8
    "variants/gemma4_text-tiny.json": (356_920, "Gemma4ForCausalLM"),
    # Gemma 4 with experts beside the dense FFN (enable_moe_block: 4 experts of 24, top 2;
    # the router's scales, three more norms per layer); full layer of global_head_dim 512
    "variants/gemma4_text-moe.json": (624_660, "Gemma4ForCausalLM"),
    "variants/gemma4_unified_text-tiny.json": (299_312, "Gemma4UnifiedForCausalLM"),
    # Beam: a gate per channel with a bias per head on the attention output, sandwich norms,
    # 3 dense layers then 3 of 4 experts (top 2)
    "variants/beam-tiny.json": (339_480, "BeamForCausalLM"),
    # MiMo-V2-Flash: Q/K heads of 24, V heads of 16; sliding layers with twice the K/V heads
    # and a sink per head; a dense first layer, then experts (tiny); layer_types and
    # mlp_layer_types listed, biased Q/K/V, V as wide as K, tied (types)
    "variants/mimo_v2_flash-tiny.json": (463_080, "MiMoV2FlashForCausalLM"),
    "variants/mimo_v2_flash-types.json": (84_296, "MiMoV2FlashForCausalLM"),
    # the activation sweep over types not otherwise measured (each total from
    # tools/reference_counts.py, as above): CohereLayerNorm with QK-norm, Cohere 2 and its
    # MoE, BioGPT, CTRL, GPT-Neo (local attention), GPT-J, CodeGen, InternLM3 (a
    # LlamaForCausalLM), MPT, PhiMoE with num_experts_per_tok 1, OpenAI GPT, XLM, GPTBigCode
    "variants/cohere-qknorm.json": (105_280, "CohereForCausalLM"),
    "variants/cohere2-tiny.json": (53_760, "Cohere2ForCausalLM"),
    "variants/cohere2_moe-tiny.json": (337_280, "Cohere2MoeForCausalLM"),
    "variants/biogpt-tiny.json": (33_368, "BioGptForCausalLM"),
    "variants/ctrl-tiny.json": (21_376, "CTRLLMHeadModel"),
    "variants/gpt_neo-local.json": (12_640, "GPTNeoForCausalLM"),
    "variants/gptj-tiny.json": (197_888, "GPTJForCausalLM"),
    "variants/codegen-tiny.json": (74_560, "CodeGenForCausalLM"),
    "variants/internlm3-tiny.json": (8_016, "LlamaForCausalLM"),
    "variants/mpt-tiny.json": (52_544, "MptForCausalLM"),
    "variants/phimoe-top1.json": (21_792, "PhimoeForCausalLM"),
    "variants/openai-gpt-tiny.json": (39_808, "OpenAIGPTLMHeadModel"),
    "variants/xlm-tiny.json": (124_800, "XLMWithLMHeadModel"),
    "variants/gpt_bigcode-mha.json": (69_040, "GPTBigCodeForCausalLM"),
    "variants/gpt_bigcode-mqa.json": (56_560, "GPTBigCodeForCausalLM"),
    "variants/flint-tiny.json": (206_816, "FlintForCausalLM"),
    "variants/nanochat-tiny.json": (16_640, "NanoChatForCausalLM"),
    "variants/granite_swa-tiny.json": (341_152, "GraniteSWAForCausalLM"),
    "variants/granitemoe_swa-tiny.json": (359_244, "GraniteMoeSWAForCausalLM"),
    "variants/stablelm-parallel.json": (296_192, "StableLmForCausalLM"),
    "variants/vaultgemma-tiny.json": (108_160, "VaultGemmaForCausalLM"),
    "variants/persimmon-qknorm.json": (117_504, "PersimmonForCausalLM"),
    "variants/minimax_m3_vl_text-tiny.json": (18_208, "MiniMaxM3VLForCausalLM"),
    "variants/falcon_h1-nonorm.json": (22_080, "FalconH1ForCausalLM"),
    "variants/deberta-v2-relative.json": (72_816, "DebertaV2ForMaskedLM"),
    "variants/deberta-v2-c2p-p2c.json": (24_688, "DebertaV2ForMaskedLM"),
    # DeBERTa v1: in_proj (no bias) with q_bias and v_bias, pos_proj without a bias, pos_q_proj
    # with one (tools/reference_counts.py, transformers 5.23.0, DebertaForMaskedLM)
    "variants/deberta-relative.json": (26_544, "DebertaForMaskedLM"),
    "variants/deberta-c2p-absolute.json": (30_256, "DebertaForMaskedLM"),
    "variants/deberta-p2c.json": (25_520, "DebertaForMaskedLM"),
    "variants/defaults-deberta.json": (124_685_913, "DebertaForMaskedLM"),
    "variants/umt5-tiny.json": (12_128, "UMT5ForConditionalGeneration"),
    # LongT5's local attention (blocks of 8; of 128 by default) adds no tensors; its
    # transient-global attention adds a bias table for the global tokens in the first layer
    # and a norm over them in every encoder layer
    "variants/longt5-local.json": (156_672, "LongT5ForConditionalGeneration"),
    "variants/longt5-local-default.json": (31_424, "LongT5ForConditionalGeneration"),
    "variants/longt5-tglobal.json": (156_928, "LongT5ForConditionalGeneration"),
    "variants/longt5-tglobal-default.json": (31_552, "LongT5ForConditionalGeneration"),
    "variants/longt5-local-nodropout.json": (94_912, "LongT5ForConditionalGeneration"),
    # OLMo Hybrid: three Gated DeltaNet layers and one full (RoPE), and a NoPE variant with
    # grouped K/V heads, its own layer_types and linear head sizes
    "variants/olmo_hybrid-tiny.json": (184_864, "OlmoHybridForCausalLM"),
    "variants/olmo_hybrid-nope.json": (110_160, "OlmoHybridForCausalLM"),
    # A.X K1: DeepSeek-V3 with a norm over each MoE block's output (1 dense, 2 MoE layers)
    "variants/axk1-tiny.json": (181_688, "AXK1ForCausalLM"),
    # the activation measurements' tiny variants of dots.llm1, Hunyuan, LFM2-MoE, Ministral,
    # Nemotron, LongCat-Flash, DBRX and Kimi Linear
    "variants/dots1-tiny.json": (196_128, "Dots1ForCausalLM"),
    "variants/hunyuan_v1_dense-tiny.json": (74_432, "HunYuanDenseV1ForCausalLM"),
    "variants/hunyuan_v1_moe-tiny.json": (152_960, "HunYuanMoEV1ForCausalLM"),
    "variants/lfm2_moe-tiny.json": (171_872, "Lfm2MoeForCausalLM"),
    "variants/ministral-tiny.json": (108_992, "MinistralForCausalLM"),
    "variants/nemotron-tiny.json": (74_368, "NemotronForCausalLM"),
    # LongCat-Flash: 2 decoder layers (4 MLA sublayers, 4 dense MLPs, 2 shortcut MoEs)
    "variants/longcat_flash-tiny.json": (236_256, "LongcatFlashForCausalLM"),
    # DBRX: sub-configs, fused Wqkv clamped (clip_qkv), 4 experts top-2 with router jitter
    "variants/dbrx-tiny.json": (90_944, "DbrxForCausalLM"),
    # ... one K/V head, top-1 of 3 experts, no jitter, the top value's 2-norm, attn_pdrop 0.1
    "variants/dbrx-mqa-p2.json": (88_768, "DbrxForCausalLM"),
    # the op graph's dense Llama kin (tests/test_graph_llama_kin.py): each config class's
    # defaults with small sizes; Starcoder2 with a window and dropouts; GLM with 3 layers
    "variants/starcoder2-tiny.json": (75_136, "Starcoder2ForCausalLM"),
    "variants/starcoder2-sliding-dropout.json": (75_136, "Starcoder2ForCausalLM"),
    "variants/seed_oss-tiny.json": (107_072, "SeedOssForCausalLM"),
    "variants/arcee-tiny.json": (90_432, "ArceeForCausalLM"),
    "variants/jais2-tiny.json": (91_520, "Jais2ForCausalLM"),
    "variants/glm4-tiny.json": (107_328, "Glm4ForCausalLM"),
    "variants/glm-quarter-rotary.json": (144_192, "GlmForCausalLM"),
    "variants/hyperclovax-tiny.json": (107_072, "HyperCLOVAXForCausalLM"),
    "variants/youtu-tiny.json": (102_880, "YoutuForCausalLM"),
    "variants/eurobert-tiny.json": (106_816, "EuroBertForMaskedLM"),
    "variants/bloom-tiny.json": (116_608, "BloomForCausalLM"),
    # ... dbrx-tiny with resid_pdrop 0.1 and emb_pdrop 0.2 (which DbrxModel never applies)
    "variants/dbrx-dropout.json": (90_944, "DbrxForCausalLM"),
    # T5Gemma: encoder 3 and decoder 2 layers, a table each, the head tied to the decoder's
    "variants/t5gemma-tiny.json": (196_224, "T5GemmaForConditionalGeneration"),
    # ... vocabularies 120 and 128, an untied head, biases, F S S F in both stacks
    "variants/t5gemma-untied.json": (262_144, "T5GemmaForConditionalGeneration"),
    # Gemma 3n: AltUp (3 streams), LAuReL (rank 4), per-layer embeddings, 2 K/V-shared layers
    "variants/gemma3n_text-tiny.json": (223_808, "Gemma3nForCausalLM"),
    # ... 2 streams, rank 8, an untied head, biases, a per-layer list of FFN widths
    "variants/gemma3n_text-untied.json": (99_940, "Gemma3nForCausalLM"),
    # DeepSeek-V4: H H H Q layers, 2 hyper-connection streams, 4 experts of 24
    "variants/deepseek_v4-tiny.json": (150_579, "DeepseekV4ForCausalLM"),
    # ... S Q H layers, 3 streams, one output group, tied embeddings, a hash-routed layer
    "variants/deepseek_v4-types.json": (72_894, "DeepseekV4ForCausalLM"),
    # Kimi Linear: three KDA layers and one MLA layer, the first dense
    "variants/kimi_linear-tiny.json": (206_924, "KimiLinearForCausalLM"),
    # and two KDA heads of 32 with a 3-tap convolution (a second shape for its activations)
    "variants/kimi_linear-wide-heads.json": (218_294, "KimiLinearForCausalLM"),
    "variants/yoso-tiny.json": (148_496, "YosoForMaskedLM"),
    "variants/mt5-tiny.json": (22_640, "MT5ForConditionalGeneration"),
    "variants/xglm-tiny.json": (24_120, "XGLMForCausalLM"),
    "variants/gte-tiny.json": (8_977, "GteForMaskedLM"),
    "variants/ibert-tiny.json": (20_752, "IBertForMaskedLM"),
    "variants/minicpm3-tiny.json": (618_624, "MiniCPM3ForCausalLM"),
    "variants/qwen3_5_moe_text-attn.json": (134_576, "Qwen3_5MoeForCausalLM"),
    "variants/olmo-tiny.json": (17_104, "OlmoForCausalLM"),
    "variants/jina_embeddings_v3-tiny.json": (136_424, "JinaEmbeddingsV3ForMaskedLM"),
    # 4 convolution, 1 full and 1 sliding layer; sandwich norms, a gate per head
    "variants/lfm3-tiny.json": (342_400, "Lfm3ForCausalLM"),
    "variants/nomic_bert-tiny.json": (151_976, "NomicBertForMaskedLM"),
    "variants/tapas-tiny.json": (268_392, "TapasForMaskedLM"),
    "variants/layoutlm-tiny.json": (435_560, "LayoutLMForMaskedLM"),
    "variants/bert-generation-tiny.json": (164_840, "BertGenerationDecoder"),
    "variants/bart-big-vocab.json": (3_432_256, "BartForConditionalGeneration"),
    "variants/t5-big-vocab.json": (2_138_816, "T5ForConditionalGeneration"),
    "variants/defaults-bart.json": (406_291_456, "BartForConditionalGeneration"),
    "variants/defaults-bert.json": (109_514_298, "BertForMaskedLM"),
    "variants/defaults-falcon.json": (6_921_720_704, "FalconForCausalLM"),
    "variants/defaults-gemma.json": (8_537_680_896, "GemmaForCausalLM"),
    "variants/defaults-gpt2.json": (124_439_808, "GPT2LMHeadModel"),
    "variants/defaults-gpt_neox.json": (20_554_567_680, "GPTNeoXForCausalLM"),
    "variants/defaults-llama.json": (6_738_415_616, "LlamaForCausalLM"),
    "variants/defaults-marian.json": (412_210_176, "MarianMTModel"),
    "variants/defaults-mistral.json": (7_241_732_096, "MistralForCausalLM"),
    "variants/defaults-mixtral.json": (46_702_792_704, "MixtralForCausalLM"),
    "variants/defaults-opt.json": (125_239_296, "OPTForCausalLM"),
    "variants/defaults-phi.json": (1_418_270_720, "PhiForCausalLM"),
    "variants/defaults-qwen2.json": (12_049_846_272, "Qwen2ForCausalLM"),
    "variants/defaults-roberta.json": (124_696_665, "RobertaForMaskedLM"),
    "variants/defaults-t5.json": (60_506_624, "T5ForConditionalGeneration"),
    "variants/falcon-alibi-new-1ln.json": (892_416, "FalconForCausalLM"),
    "variants/falcon-new-rope.json": (892_416, "FalconForCausalLM"),
    "variants/falcon-new-2ln-dropout.json": (218_368, "FalconForCausalLM"),
    "variants/falcon-multi-query.json": (369_408, "FalconForCausalLM"),
    "variants/neox-parallel-dropout.json": (330_752, "GPTNeoXForCausalLM"),
    "variants/opt-projected.json": (83_456, "OPTForCausalLM"),
    "variants/falcon-sequential-bias.json": (1_836_032, "FalconForCausalLM"),
    "variants/gemma-gqa.json": (1_371_392, "GemmaForCausalLM"),
    "variants/gpt2-n-inner.json": (1_611_352, "GPT2LMHeadModel"),
    "variants/llama-biases.json": (1_375_232, "LlamaForCausalLM"),
    "variants/llama-head-dim.json": (2_086_144, "LlamaForCausalLM"),
    "variants/marian-unshared.json": (3_938_560, "MarianMTModel"),
    "variants/mixtral-top1.json": (3_988_736, "MixtralForCausalLM"),
    "variants/neox-sequential-nobias.json": (1_308_672, "GPTNeoXForCausalLM"),
    "variants/opt-nobias-post.json": (1_896_960, "OPTForCausalLM"),
    "variants/phi-gqa-tied.json": (1_113_320, "PhiForCausalLM"),
    # the embeddings' dropout apart (tools/reference_counts.py, transformers 5.23, meta device)
    "variants/phi-dropout-resid.json": (1_113_320, "PhiForCausalLM"),
    "variants/phi-dropout-embd.json": (1_113_320, "PhiForCausalLM"),
    "variants/gpt2-dropout-resid.json": (172_288, "GPT2LMHeadModel"),
    "variants/gpt_neo-dropout-resid.json": (12_640, "GPTNeoForCausalLM"),
    "variants/gptj-dropout-embd.json": (197_888, "GPTJForCausalLM"),
    "variants/bert-base-model.json": (143_552, "BertModel"),
    "variants/xlm-roberta-base-model.json": (143_680, "XLMRobertaModel"),
    "variants/electra-base-model.json": (105_280, "ElectraModel"),
    "variants/qwen2-null-kv.json": (1_825_536, "Qwen2ForCausalLM"),
    "variants/qwen2-untied.json": (1_693_952, "Qwen2ForCausalLM"),
    "variants/qwen3-qknorm.json": (568_480, "Qwen3ForCausalLM"),
    "variants/roberta-untied.json": (1_766_608, "RobertaForMaskedLM"),
    "variants/t5-gated-asym.json": (2_159_488, "T5ForConditionalGeneration"),
    # the 2024-26 families (real configs named in tests/data/hf/SOURCES.md)
    "deberta-v3-base.json": (184_551_780, "DebertaV2ForMaskedLM"),
    "deberta-large.json": (406_264_921, "DebertaForMaskedLM"),
    "deepseek-v3.json": (671_026_404_352, "DeepseekV3ForCausalLM"),
    "deepseek-v3.2.json": (671_877_929_216, "DeepseekV32ForCausalLM"),
    "gemma-2-9b.json": (9_241_705_984, "Gemma2ForCausalLM"),
    "gemma-3-1b.json": (999_885_952, "Gemma3ForCausalLM"),
    "gpt-oss-120b.json": (116_829_156_672, "GptOssForCausalLM"),
    "gpt-oss-20b.json": (20_914_757_184, "GptOssForCausalLM"),
    "llama-3.1-405b.json": (405_853_388_800, "LlamaForCausalLM"),
    "llama-3.1-70b.json": (70_553_706_496, "LlamaForCausalLM"),
    "llama-3.1-8b.json": (8_030_261_248, "LlamaForCausalLM"),
    "olmo-2-7b.json": (7_298_617_344, "Olmo2ForCausalLM"),
    "phi-4.json": (14_659_507_200, "Phi3ForCausalLM"),
    "qwen3-235b-a22b.json": (235_093_634_560, "Qwen3MoeForCausalLM"),
    "qwen3-30b-a3b.json": (30_532_122_624, "Qwen3MoeForCausalLM"),
    "qwen3-4b.json": (4_022_468_096, "Qwen3ForCausalLM"),
    "qwen3-8b.json": (8_190_735_360, "Qwen3ForCausalLM"),
    "variants/deepseek_v3-all-dense.json": (132_768, "DeepseekV3ForCausalLM"),
    "variants/deepseek_v3-no-q-lora-bias.json": (212_944, "DeepseekV3ForCausalLM"),
    "variants/defaults-deepseek_v3.json": (671_026_404_352, "DeepseekV3ForCausalLM"),
    "variants/defaults-gemma2.json": (2_614_341_888, "Gemma2ForCausalLM"),
    "variants/defaults-gpt-sw3.json": (124_439_808, "GPT2LMHeadModel"),
    "variants/defaults-gemma3_text.json": (2_628_658_432, "Gemma3ForCausalLM"),
    "variants/defaults-gpt_oss.json": (116_829_156_672, "GptOssForCausalLM"),
    "variants/defaults-olmo2.json": (6_888_624_128, "Olmo2ForCausalLM"),
    "variants/defaults-phi3.json": (3_821_079_552, "Phi3ForCausalLM"),
    "variants/defaults-qwen3.json": (12_049_461_248, "Qwen3ForCausalLM"),
    "variants/defaults-qwen3_moe.json": (15_350_731_776, "Qwen3MoeForCausalLM"),
    "variants/gemma2-bias-untied.json": (162_112, "Gemma2ForCausalLM"),
    "variants/gemma3_text-layer-types.json": (187_968, "Gemma3ForCausalLM"),
    "variants/gpt_oss-tied-nobias.json": (455_520, "GptOssForCausalLM"),
    "variants/llama4_text-chunked.json": (226_368, "Llama4ForCausalLM"),
    "variants/llama4_text-moe-every-layer.json": (78_312, "Llama4ForCausalLM"),
    "variants/olmo2-gqa.json": (161_984, "Olmo2ForCausalLM"),
    "variants/phi3-gqa-tied.json": (154_432, "Phi3ForCausalLM"),
    "variants/qwen3-sliding-bias.json": (205_120, "Qwen3ForCausalLM"),
    "variants/qwen3_moe-sparse-step.json": (186_048, "Qwen3MoeForCausalLM"),
    # the same with norm_topk_prob (the router's renormalisation; the activation measurement's
    # variant), and a two-layer OLMoE (q_norm/k_norm over the width, norm_topk_prob)
    "variants/qwen3_moe-norm-topk.json": (186_048, "Qwen3MoeForCausalLM"),
    "variants/olmoe-tiny.json": (87_552, "OlmoeForCausalLM"),
    # a dense first layer, then experts beside a gated shared expert (the LoRA and activation
    # measurements' variant)
    "variants/qwen2_moe-tiny.json": (143_296, "Qwen2MoeForCausalLM"),
    # recurrent and hybrid models; tools/reference_counts.py, as above
    "qwen3-next-80b-a3b.json": (79_674_391_296, "Qwen3NextForCausalLM"),
    "mamba-130m.json": (129_135_360, "MambaForCausalLM"),
    "falcon-mamba-7b.json": (7_272_665_088, "FalconMambaForCausalLM"),
    "jamba-v0.1.json": (51_570_323_328, "JambaForCausalLM"),
    "nemotron-h-8b.json": (8_100_852_736, "NemotronHForCausalLM"),
    "nemotron-3-nano-30b-a3b.json": (31_577_937_344, "NemotronHForCausalLM"),
    # its time_step_limit is [0.0, Infinity], as Python's json writes it
    "mamba2-2.7b.json": (2_702_599_680, "Mamba2ForCausalLM"),
    "variants/bamba-tiny.json": (30_366, "BambaForCausalLM"),
    "variants/jamba-tiny.json": (316_320, "JambaForCausalLM"),
    "variants/lfm2-tiny.json": (20_432, "Lfm2ForCausalLM"),
    "variants/mamba-tiny.json": (100_928, "MambaForCausalLM"),
    "variants/mamba2-tiny.json": (25_074, "Mamba2ForCausalLM"),
    "variants/nemotron_h-tiny.json": (50_720, "NemotronHForCausalLM"),
    # a multi-token-prediction layer pair (num_nextn_predict_layers 1, "*E"), which
    # NemotronHForCausalLM does not build: the same count without it
    "variants/nemotron_h-mtp.json": (55_212, "NemotronHForCausalLM"),
    "variants/qwen3_5_text-tiny.json": (9_932, "Qwen3_5ForCausalLM"),
    "variants/qwen3_next-tiny.json": (131_888, "Qwen3NextForCausalLM"),
    "variants/falcon_h1-tiny.json": (95_768, "FalconH1ForCausalLM"),
    "variants/minimax-tiny.json": (136_448, "MiniMaxForCausalLM"),
    "variants/minimax-mixer.json": (61_952, "MiniMaxForCausalLM"),
    "variants/lfm2-mixer.json": (45_440, "Lfm2ForCausalLM"),
    "variants/mamba-mixer.json": (47_104, "MambaForCausalLM"),
    "variants/mamba2-mixer.json": (46_540, "Mamba2ForCausalLM"),
    "variants/qwen3_5_text-mixer.json": (46_160, "Qwen3_5ForCausalLM"),
    # the op graph's mixer variants (tests/test_graph_mixers.py): tools/reference_counts.py,
    # as above
    "variants/mamba-biases-tied.json": (54_768, "MambaForCausalLM"),
    "variants/mamba2-biases-tied.json": (56_184, "Mamba2ForCausalLM"),
    "variants/bamba-gqa-tied.json": (73_056, "BambaForCausalLM"),
    # Switch Transformers' measured variants (tests/data/activations_switch_transformers_cpu
    # .jsonl): `tools/reference_counts.py` (torch 2.13.0+cpu, transformers 5.23.0, meta device)
    "variants/switch_transformers-tiny.json": (453_248,
                                               "SwitchTransformersForConditionalGeneration"),
    "variants/switch_transformers-all-sparse.json": (
        371_092, "SwitchTransformersForConditionalGeneration"),
    # BERT's kin measured in tests/data/activations_encoders_kin_cpu.jsonl:
    # `tools/reference_counts.py` (torch 2.13.0+cpu, transformers 5.23.0, meta device)
    "variants/distilbert-tiny.json": (129_152, "DistilBertForMaskedLM"),
    "variants/roberta-prelayernorm-tiny.json": (129_408, "RobertaPreLayerNormForMaskedLM"),
    "variants/xlm-roberta-xl-tiny.json": (129_344, "XLMRobertaXLForMaskedLM"),
    "variants/megatron-bert-tiny.json": (129_280, "MegatronBertForMaskedLM"),
    "variants/flaubert-tiny.json": (166_144, "FlaubertWithLMHeadModel"),
    "variants/roformer-tiny.json": (96_512, "RoFormerForMaskedLM"),
    "variants/roformer-rotary-value.json": (96_512, "RoFormerForMaskedLM"),
    "variants/big_bird-tiny.json": (362_816, "BigBirdForMaskedLM"),
    # the recurrent types' defaults at small sizes (tests/test_graph_ssm_defaults.py):
    # `tools/reference_counts.py` (torch 2.13.0+cpu, transformers 5.23.0, meta device)
    "variants/bamba-all-mamba.json": (171_184, "BambaForCausalLM"),
    "variants/falcon_mamba-tiny.json": (98_240, "FalconMambaForCausalLM"),
    "variants/lfm2-all-attention.json": (125_312, "Lfm2ForCausalLM"),
    "variants/granitemoehybrid-tiny.json": (282_800, "GraniteMoeHybridForCausalLM"),
    # the MoE decoders' measured variants (tests/data/activations_moe_kin_a_cpu.jsonl):
    # `tools/reference_counts.py` (torch 2.13.0+cpu, transformers 5.23.0, meta device)
    "variants/granitemoe-tiny.json": (189_760, "GraniteMoeForCausalLM"),
    "variants/granitemoeshared-tiny.json": (208_192, "GraniteMoeSharedForCausalLM"),
    "variants/aria_text-tiny.json": (214_336, "AriaTextForCausalLM"),
    "variants/ernie4_5_moe-tiny.json": (138_048, "Ernie4_5_MoeForCausalLM"),
    "variants/flex_olmo-tiny.json": (177_536, "FlexOlmoForCausalLM"),
    "variants/minimax_m2-tiny.json": (189_952, "MiniMaxM2ForCausalLM"),
    "variants/minimax_m2-rotary-dim.json": (189_952, "MiniMaxM2ForCausalLM"),
    "variants/mellum-tiny.json": (189_824, "MellumForCausalLM"),
    "variants/ernie4_5-tiny.json": (266_560, "Ernie4_5ForCausalLM"),
    # the routed MoE decoders' measured variants (tests/data/activations_moe_kin_b_cpu.jsonl):
    # `tools/reference_counts.py` (torch 2.13.0+cpu, transformers 5.23.0, meta device)
    "variants/afmoe-tiny.json": (336_576, "AfmoeForCausalLM"),
    "variants/exaone_moe-tiny.json": (301_248, "ExaoneMoeForCausalLM"),
    "variants/glm4_moe-odd-rotary.json": (232_992, "Glm4MoeForCausalLM"),
    "variants/glm4_moe-tiny.json": (233_280, "Glm4MoeForCausalLM"),
    "variants/glm4_moe_lite-tiny.json": (163_216, "Glm4MoeLiteForCausalLM"),
    "variants/kolibri1-tiny.json": (279_968, "Kolibri1ForCausalLM"),
    "variants/laguna-tiny.json": (239_904, "LagunaForCausalLM"),
    "variants/solar_open-tiny.json": (202_048, "SolarOpenForCausalLM"),
}


# The published classes beside the LM heads (embedding models, rerankers, question answering):
# tests/data/hf_published_classes.json, written by tools/reference_counts.py --write from these
# files (its provenance says how); tcalc counts the trainable parameters
PUBLISHED = json.loads((DATA / "hf_published_classes.json").read_text())
assert PUBLISHED["transformers"] == "5.23.0"
REFERENCE |= {name: (row["trainable"], row["class"]) for name, row in PUBLISHED["files"].items()}


def _total_equals_transformers(path: str) -> None:
    spec = load_model(str(HF / path))
    assert count_params(spec).total == REFERENCE[path][0]
    assert f"counted as transformers' {REFERENCE[path][1]}" in spec.note


def test_config_json_total_equals_transformers() -> None:
    every_row(sorted(REFERENCE), _total_equals_transformers, ids=sorted(REFERENCE))


def test_every_config_file_has_a_reference() -> None:
    files = {str(p.relative_to(HF)) for p in HF.rglob("*.json")}
    assert files == set(REFERENCE)


def test_every_hand_written_model_type_is_covered() -> None:
    # the generic records (hf.GENERIC) are covered by tests/test_registry.py
    from transformer_calc.hf import TABLE_DRIVEN

    covered = {__import__("json").loads((HF / p).read_text())["model_type"] for p in REFERENCE}
    assert covered >= set(HEAD_CLASS) - set(TABLE_DRIVEN)


def test_import_round_trip(cli, tmp_path) -> None:
    def round_trip(path: str) -> None:
        out = tmp_path / path.replace("/", "_").replace(".json", ".yaml")
        cli("import", str(HF / path), "-o", str(out))
        assert cli.json("params", str(out))["total_params"] == REFERENCE[path][0]
        assert cli.json("params", str(HF / path))["total_params"] == REFERENCE[path][0]

    every_row(sorted(REFERENCE), round_trip, ids=sorted(REFERENCE))


def test_import_to_stdout_is_yaml(cli) -> None:
    out = cli("import", str(HF / "llama-3-8b.json")).stdout
    assert "n_kv_heads: 8\n" in out and "ffn: gated\n" in out and "norm: rmsnorm\n" in out


def test_mixtral_total_and_active() -> None:
    # active: attention + norms + embeddings + LM head + router + 2 of 8 experts per layer;
    # 12,879,925,248 = 46,702,792,704 - 32 layers · 6 unused experts · 3 · 4096 · 14336
    b = count_params(load_model(str(HF / "mixtral-8x7b.json")))
    assert b.active_total == 46_702_792_704 - 32 * 6 * 3 * 4096 * 14336 == 12_879_925_248


def test_t5_untied_config_is_tied_by_transformers_5() -> None:
    spec = load_model(str(HF / "t5-v1_1-small.json"))
    assert spec.tie_embeddings
    assert "transformers >= 5.0 ties T5's lm_head regardless (4.x kept it: +16,449,536)" in (
        spec.note)
    # The 4.x count, for users on an older version: untie the head.
    assert count_params(spec.replace(tie_embeddings=False)).total == 76_961_152


def test_opt_350m_project_in_out_and_offset() -> None:
    # OPT-350M: embed_tokens (50272, 512), project_in (1024, 512), project_out (512, 1024),
    # embed_positions (2048 + 2, 1024); no final norm (post-norm).
    b = count_params(load_model(str(HF / "opt-350m.json")))
    assert b.get("embed.tokens").total == 50272 * 512
    assert b.get("embed.project_in").total == b.get("embed.project_out").total == 524_288
    assert b.get("embed.positions").total == 2050 * 1024
    assert not any(i.name.endswith("final_norm") for i in b.items)


def test_falcon_layouts() -> None:
    # falcon-7b: one input_layernorm, MQA (query_key_value (4672, 4544) = (71 + 2) · 64 rows);
    # falcon-40b: ln_attn + ln_mlp, 8 K/V heads (query_key_value (9216, 8192)).
    b7 = count_params(load_model(str(HF / "falcon-7b.json")))
    assert sum(b7.get(f"decoder.attn.{p}.weight").count for p in "qkv") == 4672 * 4544
    assert [i.name for i in b7.items if i.name.endswith("norm") and i.stack] == [
        "decoder.attn.norm"]
    b40 = count_params(load_model(str(HF / "falcon-40b.json")))
    assert sum(b40.get(f"decoder.attn.{p}.weight").count for p in "qkv") == 9216 * 8192
    assert [i.name for i in b40.items if i.name.endswith("norm") and i.stack] == [
        "decoder.attn.norm", "decoder.ffn.norm"]


def test_unsupported_model_type(cli, tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "zamba2"}')
    r = cli("params", str(path), code=2)
    assert r.stderr == (f"Error: {path}: key 'model_type': expected a model_type tcalc can "
                        "count (its recurrent mixer or hybrid layout is not modelled yet: "
                        "Mamba, Mamba-2, Gated DeltaNet, Kimi's delta attention, lightning "
                        "attention and LFM2's convolutions are; Zamba's shared blocks, "
                        "Bailing's hybrid, RecurrentGemma, RWKV and xLSTM are not), got "
                        "'zamba2'\n")
    # (every type that message names as refused is refused, none of them mapped)
    from transformer_calc.hf import MAPPERS, RECURRENT

    assert not RECURRENT & set(MAPPERS)
    path.write_text('{"model_type": "qwen4"}')
    r = cli("params", str(path), code=2)
    assert r.stderr == (f"Error: {path}: key 'model_type': expected one of the "
                        f"{len(HEAD_CLASS)} model types in docs/model_types.md (closest: "
                        "qwen3, qwen2), got 'qwen4'\n")


@pytest.mark.parametrize("config, key", [
    ({"model_type": "phi", "qk_layernorm": True}, "qk_layernorm"),
    ({"model_type": "bert", "position_embedding_type": "relative_key"},
     "position_embedding_type"),
    ({"model_type": "gpt2", "add_cross_attention": True}, "add_cross_attention"),
    ({"model_type": "opt", "layer_norm_elementwise_affine": False},
     "layer_norm_elementwise_affine"),
    ({"model_type": "bart", "encoder_attention_heads": 16, "decoder_attention_heads": 8},
     "decoder_attention_heads"),
    ({"model_type": "llama", "hidden_act": "mish"}, "hidden_act"),
])
def test_keys_the_mapping_cannot_honour_are_refused(config, key: str) -> None:
    from transformer_calc.errors import SpecError

    with pytest.raises(SpecError) as e:
        spec_from_hf(config, "config.json")
    assert e.value.key == key
    assert str(e.value).startswith(f"config.json: key '{key}'")


def test_impossible_shape_from_defaults(cli) -> None:
    # GemmaConfig defaults num_key_value_heads to 16; with 8 query heads that cannot work.
    path = DATA / "bad-hf" / "gemma-kv-exceeds-heads.json"
    r = cli("params", str(path), code=2)
    assert r.stderr == (f"Error: {path}: key 'num_key_value_heads': expected a divisor of "
                        "num_attention_heads=8 (the file has no num_key_value_heads: its config "
                        "class's default stood in), got 16\n")


@pytest.mark.parametrize("config, message", [
    ({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5},
     "key 'num_key_value_heads': expected a divisor of num_attention_heads=32, got 5"),
    # Mixtral spells its expert count num_local_experts (the class's default here)
    ({"model_type": "mixtral", "num_experts_per_tok": 9},
     "key 'num_experts_per_tok': expected 1 <= num_experts_per_tok <= num_local_experts=8, "
     "got 9"),
    # GPT-2's own spellings; its config class reads no head_dim
    ({"model_type": "gpt2", "n_head": 7},
     "key 'n_head': expected a divisor of n_embd=768, got 7"),
    ({"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 7},
     "key 'num_kv_heads': expected a divisor of num_attention_heads=71, got 7"),
    ({"model_type": "mamba2", "num_heads": 6, "n_groups": 4, "expand": 3, "head_dim": 32,
      "hidden_size": 64},
     "key 'n_groups': expected a divisor of num_heads=6, got 4"),
])
def test_shape_errors_name_the_files_own_keys(config: dict, message: str) -> None:
    with pytest.raises(SpecError) as e:
        spec_from_hf(config, "config.json")
    assert str(e.value) == f"config.json: {message}"


@pytest.mark.parametrize("text, message", [
    ("{", "invalid JSON (line 1, column 2): Expecting property name enclosed in double quotes"),
    ("[1, 2]", "expected a JSON object (a config.json), got list"),
    ('{"model_type": "llama", "hidden_size": "4096"}',
     "key 'hidden_size': expected a non-negative integer, got '4096'"),
])
def test_bad_json(cli, tmp_path, text: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    assert cli("params", str(path), code=2).stderr == f"Error: {path}: {message}\n"


# These presets were generated by `tcalc import` from these config.json files.
PRESET_CONFIG = {
    "llama-2-7b": "llama-2-7b.json", "llama-3-8b": "llama-3-8b.json",
    "mistral-7b": "mistral-7b.json", "mixtral-8x7b": "mixtral-8x7b.json",
    "qwen2-0.5b": "qwen2-0.5b.json", "gemma-2b": "gemma-2b.json", "phi-2": "phi-2.json",
    "pythia-160m": "pythia-160m.json", "opt-125m": "opt-125m.json",
    "falcon-7b": "falcon-7b.json", "t5-small": "t5-small.json", "t5-base": "t5-base.json",
    "bart-base": "bart-base.json",
}


@pytest.mark.parametrize("preset", sorted(PRESET_CONFIG))
def test_imported_preset_equals_transformers(preset: str) -> None:
    spec = load_model(preset)
    assert count_params(spec).total == REFERENCE[PRESET_CONFIG[preset]][0]
    assert spec.expected_params == REFERENCE[PRESET_CONFIG[preset]][0]


@pytest.mark.parametrize("value, terms", [(["p2c", "c2p"], "c2p|p2c"), ("c2p", "c2p"),
                                          ("p2c|c2p", "c2p|p2c"), ([], "none"), (None, "none")])
def test_deberta_reads_its_disentangled_terms(value: object, terms: str) -> None:
    data = json.loads((HF / "variants" / "deberta-v2-c2p-p2c.json").read_text())
    assert spec_from_hf(data | {"pos_att_type": value}).rel_terms == terms


@pytest.mark.parametrize("value", [5, [1, 2], {"c2p": 1}])
def test_deberta_refuses_pos_att_type_that_is_no_list_of_names(cli, tmp_path,
                                                               value: object) -> None:
    path = tmp_path / "config.json"
    data = json.loads((HF / "variants" / "deberta-v2-c2p-p2c.json").read_text())
    path.write_text(json.dumps(data | {"pos_att_type": value}))
    assert cli("params", str(path), code=2).stderr == (
        f"Error: {path}: key 'pos_att_type': expected a list of 'c2p' / 'p2c', or them joined "
        f"by '|', got {value}\n")


def test_deberta_v1_refuses_talking_heads(cli, tmp_path) -> None:
    # DisentangledSelfAttention builds head_logits_proj and head_weights_proj (n_heads² each)
    # and mixes the scores across heads with them: not modelled, refused by name
    path = tmp_path / "config.json"
    data = json.loads((HF / "variants" / "deberta-relative.json").read_text())
    path.write_text(json.dumps(data | {"talking_head": True}))
    assert cli("params", str(path), code=2).stderr == (
        f"Error: {path}: key 'talking_head': expected a value tcalc can count (DeBERTa's "
        "talking-head projections are not modelled), got True\n")


def test_deberta_v1_names_its_position_projections_by_term() -> None:
    # pos_proj (c2p, no bias) and pos_q_proj (p2c, a bias): p2c alone is the query's
    spec = spec_from_hf(json.loads((HF / "variants" / "deberta-p2c.json").read_text()))
    names = {i.name for i in count_params(spec).items if ".pos_" in i.name}
    assert names == {"encoder.attn.pos_query.weight", "encoder.attn.pos_query.bias"}
    spec = spec_from_hf(json.loads((HF / "variants" / "deberta-relative.json").read_text()))
    names = {i.name for i in count_params(spec).items if ".pos_" in i.name}
    assert names == {"encoder.attn.pos_key.weight", "encoder.attn.pos_query.weight",
                     "encoder.attn.pos_query.bias"}


def test_lfm2_reads_tie_embedding_over_tie_word_embeddings() -> None:
    """Lfm2Config and Lfm2MoeConfig pop ``tie_embedding`` (the key LFM2's published configs
    use) over tie_word_embeddings. transformers 5.23, meta device (tools/reference_counts.py
    on {"model_type": "lfm2", "tie_embedding": false}):
    2,873,269,760 untied; the default, tied: 2,705,497,600."""
    assert count_params(spec_from_hf({"model_type": "lfm2", "tie_embedding": False})).total \
        == 2_873_269_760
    assert count_params(spec_from_hf({"model_type": "lfm2"})).total == 2_705_497_600
    assert count_params(spec_from_hf({"model_type": "lfm2", "tie_word_embeddings": False,
                                      "tie_embedding": True})).total == 2_705_497_600


def test_hunyuan_moe_top_k_per_layer_and_expert_count() -> None:
    """HunYuanMoEV1Gate reads moe_topk per layer when it is a list; tcalc's MoE layers route
    alike, so a list of one value is that value and a mixed list is refused by name;
    num_experts must be one integer (HunYuanMoEV1Config rejects a list)."""
    base = {"model_type": "hunyuan_v1_moe", "head_dim": 16, "num_experts": 8,
            "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
            "intermediate_size": 32, "vocab_size": 100}
    # transformers 5.23 (meta): 157,568 trainable parameters, whatever the top-k
    spec = spec_from_hf(base | {"moe_topk": [3, 3]})
    assert (spec.top_k, count_params(spec).total) == (3, 157_568)
    assert spec_from_hf(base | {"num_experts_per_tok": 2}).top_k == 2
    with pytest.raises(SpecError, match="key 'moe_topk'"):
        spec_from_hf(base | {"moe_topk": [2, 3]})
    with pytest.raises(SpecError, match="key 'num_experts'"):
        spec_from_hf(base | {"num_experts": [8, 8]})


def test_longcat_flash_layers_zero_experts_and_spellings() -> None:
    """LongcatFlashForCausalLM (transformers 5.23, meta device, tools/reference_counts.py /
    check_registry.py): each of num_layers decoder layers is two MLA sublayers with a dense
    MLP each and one shortcut MoE; the router scores n_routed_experts + zero_expert_num
    experts and LongcatFlashExperts builds gate/up weights for the zero-computation ones too.
    The default config: 741,053,585,408 parameters, of which 28 · 256 · 2 · 2048 · 6144
    belong to the zero experts' gate/up, which no checkpoint holds."""
    spec = spec_from_hf({"model_type": "longcat_flash"})
    assert (spec.n_layers, spec.layer_ffn, spec.zero_experts) == (56, "1E 1D *", 256)
    p = count_params(spec)
    assert p.total == 741_053_585_408
    unused = 28 * 256 * 2 * 2048 * 6144
    assert p.sum_prefix("decoder.moe.ffn.experts.zero_gate_up") == unused
    assert p.get("decoder.moe.ffn.router.weight").count == 6144 * (512 + 256)
    assert any(f"{unused:,} parameters no checkpoint holds" in n for n in p.notes)
    # the zero experts hold no active parameters; top-12 real experts bound the active count
    assert p.active_total < p.total - unused
    # the standard names (LongcatFlashConfig.attribute_map) and num_hidden_layers = 2 · L
    small = {"model_type": "longcat_flash", "hidden_size": 64, "num_attention_heads": 4,
             "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
             "qk_rope_head_dim": 8, "v_head_dim": 16, "zero_expert_num": 2, "vocab_size": 128}
    aliased = spec_from_hf(small | {"num_hidden_layers": 5, "intermediate_size": 96,
                                    "num_experts_per_tok": 2, "num_local_experts": 4,
                                    "moe_intermediate_size": 32})
    own = spec_from_hf(small | {"num_layers": 2, "ffn_hidden_size": 96, "moe_topk": 2,
                                "n_routed_experts": 4, "expert_ffn_hidden_size": 32})
    # transformers 5.23 (meta) builds 203,232 parameters from either spelling
    assert count_params(aliased).total == count_params(own).total == 203_232
    # router_bias, not one of LongcatFlashConfig's fields, is read with getattr: 187,048 with
    # it and attention biases, no zero experts (transformers 5.23, meta)
    biased = spec_from_hf(small | {"num_layers": 2, "ffn_hidden_size": 96, "moe_topk": 2,
                                   "n_routed_experts": 4, "expert_ffn_hidden_size": 32,
                                   "zero_expert_num": 0, "router_bias": True,
                                   "attention_bias": True})
    assert count_params(biased).total == 187_048
    for bad, key in (({"n_routed_experts": 0}, "n_routed_experts"),
                     ({"qk_head_dim": 20}, "qk_head_dim"), ({"num_layers": 0}, "num_layers"),
                     ({"q_lora_rank": None}, "q_lora_rank")):
        with pytest.raises(SpecError, match=f"key '{key}'"):
            spec_from_hf(small | {"num_layers": 2} | bad)


def test_dbrx_reads_its_sub_configs_and_refuses_what_transformers_cannot_build() -> None:
    """DbrxConfig keeps the attention's keys in attn_config and the FFN's in ffn_config
    (transformers 5.23, meta device: the tiny variant 90,944 parameters; check_registry.py's
    drawn cases in tests/data/registry_cases_more.json). DbrxAttention reads
    attn_config.rope_theta, which DbrxAttentionConfig has no default for, and DbrxConfig
    refuses tied embeddings: both refused by name. Without clip_qkv the model builds but
    cannot run a forward: counted, with a note."""
    cfg = json.loads((HF / "variants" / "dbrx-tiny.json").read_text())
    spec = spec_from_hf(cfg)
    assert (spec.n_kv_heads, spec.d_ff_expert, spec.n_experts, spec.top_k) == (2, 32, 4, 2)
    assert (spec.fused_qkv, spec.norm, spec.qkv_clamp, spec.router_jitter) == \
        (True, "layernorm_nobias", True, True)
    with pytest.raises(SpecError, match="key 'rope_theta'"):
        spec_from_hf({"model_type": "dbrx"})
    with pytest.raises(SpecError, match="key 'tie_word_embeddings'"):
        spec_from_hf(cfg | {"tie_word_embeddings": True})
    with pytest.raises(SpecError, match="key 'ffn_act_fn'"):
        spec_from_hf(cfg | {"ffn_config": cfg["ffn_config"] | {"ffn_act_fn": {"name": "x"}}})
    loose = spec_from_hf(cfg | {"attn_config": cfg["attn_config"] | {"clip_qkv": None},
                                "ffn_config": cfg["ffn_config"] | {"moe_jitter_eps": None}})
    assert not loose.qkv_clamp and not loose.router_jitter
    assert "cannot run a forward" in loose.note
    assert count_params(loose).total == 90_944
    # the sub-configs' defaults (DbrxAttentionConfig: kv_n_heads 1; DbrxFFNConfig: 4 experts,
    # top-1): transformers 5.23 builds 86,848 parameters from this config
    bare = spec_from_hf({k: v for k, v in cfg.items() if k not in ("attn_config", "ffn_config")}
                        | {"attn_config": {"rope_theta": 10000.0},
                           "ffn_config": {"ffn_hidden_size": 32}})
    assert (bare.n_kv_heads, bare.n_experts, bare.top_k) == (1, 4, 1)
    assert count_params(bare).total == 86_848


def test_dbrx_with_its_published_sizes() -> None:
    """DBRX's model card sizes (d_model 6144, 40 layers, 48 heads and 8 K/V heads, 16 experts
    of 10752, top-4, vocabulary 100352; clip_qkv 8): 131,596,523,520 parameters from
    transformers 5.23 on the meta device (tools/reference_counts.py on this config; not the
    Hub file, which cannot be reached from here), "132B total, 36B active" as the card says."""
    spec = spec_from_hf({"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40,
                         "max_seq_len": 32768, "vocab_size": 100352,
                         "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
                         "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16,
                                        "moe_top_k": 4, "moe_jitter_eps": 0.01}})
    p = count_params(spec)
    assert p.total == 131_596_523_520
    assert round(p.active_total / 1e9) == 36


def test_kimi_linear_reads_its_layer_lists_and_never_ties() -> None:
    """KimiLinearConfig (transformers 5.23): the checkpoint's linear_attn_config sub-dict
    (head_dim, num_heads, short_conv_kernel_size, 1-indexed full_attn_layers and kda_layers)
    overrides the flat keys; without lists every 4th layer from the 5th is MLA; the first
    first_k_dense_replace layers (default 1) are dense. Totals from transformers on the meta
    device: 259,616 (5 layers, defaults' rules), 205,678 (the sub-dict, 2 dense layers, 2
    shared experts, a query latent, attention biases), 110,212 (layer_types, mlp_layer_types,
    no shared expert). KimiLinearForCausalLM ties nothing (_tied_weights_keys is empty)."""
    base = {"model_type": "kimi_linear", "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 96, "moe_intermediate_size": 32, "num_local_experts": 4,
            "num_experts_per_tok": 2, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 16, "v_head_dim": 16, "vocab_size": 128, "pad_token_id": 0}
    plain = spec_from_hf(base | {"num_hidden_layers": 5, "linear_head_dim": 16,
                                 "linear_num_heads": 4})
    assert (plain.layer_attention, plain.layer_ffn, plain.position) == ("4M 1F", "1D 4E",
                                                                        "none")
    assert count_params(plain).total == 259_616
    listed = spec_from_hf(base | {"num_hidden_layers": 5, "q_lora_rank": 24,
                                  "attention_bias": True, "n_shared_experts": 2,
                                  "first_k_dense_replace": 2,
                                  "linear_attn_config": {"head_dim": 8, "num_heads": 2,
                                                         "short_conv_kernel_size": 3,
                                                         "full_attn_layers": [2, 5],
                                                         "kda_layers": [1, 3, 4]}})
    assert (listed.layer_attention, listed.ssm_heads, listed.ssm_state, listed.ssm_conv) == \
        ("1M 1F 2M 1F", 2, 8, 3)
    assert count_params(listed).total == 205_678
    typed = spec_from_hf(base | {"num_hidden_layers": 3, "n_shared_experts": 0,
                                 "layer_types": ["linear_attention", "full_attention",
                                                 "linear_attention"],
                                 "mlp_layer_types": ["sparse", "dense", "sparse"],
                                 "linear_head_dim": 8, "linear_num_heads": 2})
    assert count_params(typed).total == 110_212
    tied = spec_from_hf(base | {"num_hidden_layers": 5, "linear_head_dim": 16,
                                "linear_num_heads": 4, "tie_word_embeddings": True})
    assert not tied.tie_embeddings and "ties nothing" in tied.note
    assert count_params(tied).total == 259_616
    with pytest.raises(SpecError, match="key 'full_attn_layers'"):
        spec_from_hf(base | {"num_hidden_layers": 5, "linear_attn_config": {
            "full_attn_layers": [0], "kda_layers": [1]}})


def test_the_configs_own_note_comes_first() -> None:
    """The notes of a config's parameter breakdown open with what the file was read as (the
    class counted), before the model's own notes (a mutation sample, seed 16, moving it to
    second place survived)."""
    p = count_params(spec_from_hf({"model_type": "qwen2", "tie_word_embeddings": True},
                                  "q.json"))
    assert p.notes[0].startswith("counted as transformers' Qwen2ForCausalLM")
    assert p.notes[1] == "head.lm.weight is the token embedding matrix (tied), counted once."


def test_t5gemma_reads_both_stacks_and_refuses_an_unbalanced_pair() -> None:
    """T5GemmaConfig keeps each stack's keys in its encoder and decoder mappings (transformers
    5.23: the default builds 5,596,853,760 parameters on the meta device, tools/
    reference_counts.py; the variants in REFERENCE). tcalc's spec has one width: a wider
    encoder (t5gemma-9b-2b) is refused by the key that differs. The encoder's sliding layers
    are bidirectional: masking_utils' create_bidirectional_sliding_window_mask lets a query meet
    17 keys at sliding_window 8 (|q − k| <= 8; the decoder's causal one 8), counted there by
    building both masks at T = 40 in transformers 5.23."""
    spec = spec_from_hf({"model_type": "t5gemma"})
    assert count_params(spec).total == 5_596_853_760
    assert (spec.arch, spec.tie_encoder_decoder, spec.sandwich_norm) == \
        ("encoder-decoder", False, True)
    assert spec.layer_attention == "1S 1F *" and spec.attn_softcapping == 50.0
    groups = {g.name: g for g in plan_of(spec).groups}
    enc, dec = groups["encoder.sliding"].block.attn, groups["decoder.sliding"].block.attn
    small = spec.replace(sliding_window=8)
    e8 = {g.name: g for g in plan_of(small).groups}["encoder.sliding"].block.attn
    d8 = {g.name: g for g in plan_of(small).groups}["decoder.sliding"].block.attn
    assert (e8.keys(40), d8.keys(40)) == (17, 8)
    assert (enc.window, dec.window) == (2 * 4096 + 1, 4096)
    assert "cross.post_norm" in groups["decoder.full"].block.norms
    with pytest.raises(SpecError, match="key 'hidden_size'"):
        spec_from_hf({"model_type": "t5gemma", "encoder": {"hidden_size": 3584}})
    with pytest.raises(SpecError, match="key 'layer_types'"):
        spec_from_hf({"model_type": "t5gemma", "encoder": {"num_hidden_layers": 2, "layer_types":
                      ["full_attention", "sliding_attention"]}, "decoder": {
                      "num_hidden_layers": 2, "layer_types": ["sliding_attention",
                                                              "full_attention"]}})
    with pytest.raises(SpecError, match="key 'encoder'"):
        spec_from_hf({"model_type": "t5gemma", "encoder": [2304]})
    # a bad value is named in its own stack's mapping, not as a mismatch with the other's
    with pytest.raises(SpecError, match=r"\(encoder\).*key 'hidden_size': expected a non-neg"):
        spec_from_hf({"model_type": "t5gemma", "encoder": {"hidden_size": "abc"}})
    # different depths, one repeating unit: 3 encoder layers S F S, 2 decoder layers S F
    mixed = spec_from_hf({"model_type": "t5gemma", "encoder": {"num_hidden_layers": 3},
                          "decoder": {"num_hidden_layers": 2}})
    assert (mixed.n_encoder_layers, mixed.n_decoder_layers) == (3, 2)
    assert {g.name: g.count for g in plan_of(mixed).groups} == {
        "encoder.sliding": 2, "encoder.full": 1, "decoder.sliding": 1, "decoder.full": 1}


def test_gemma3n_reads_altup_laurel_and_its_per_layer_lists() -> None:
    """Gemma3nTextConfig (transformers 5.23): the default builds 6,835,235,568 parameters on
    the meta device (Gemma3nForCausalLM, tools/reference_counts.py): 35 layers, every fifth
    full, the last 15 reusing earlier keys and values, 4 AltUp streams, LAuReL of rank 64, and
    activation_sparsity_pattern 0.95 in the first 10 layers. intermediate_size may be a list
    (one width per layer): tcalc models one, so a list of different widths is refused."""
    spec = spec_from_hf({"model_type": "gemma3n_text"})
    assert count_params(spec).total == 6_835_235_568
    assert (spec.altup_inputs, spec.laurel_rank, spec.sparse_ffn_layers,
            spec.kv_shared_layers) == (4, 64, 10, 15)
    assert {g.name: g.count for g in plan_of(spec).groups} == {
        "decoder.sliding.sparse": 8, "decoder.full.sparse": 2, "decoder.sliding": 8,
        "decoder.full": 2, "decoder.sliding.kv_shared": 12, "decoder.full.kv_shared": 3}
    p = count_params(spec)
    # the model's AltUp projections, 3 each way, and the per-layer AltUp and LAuReL weights
    assert p.get("embed.project_altup").total == 3 * 2048 * 2048
    assert p.get("head.altup_unembed").total == 3 * 2048 * 2048
    assert p.get("decoder.full.altup.predict.weight").count == 4 ** 3
    assert p.get("decoder.full.laurel.left.weight").count == 2048 * 64
    base = json.loads((HF / "variants" / "gemma3n_text-tiny.json").read_text())
    assert spec_from_hf(base | {"intermediate_size": [96] * 6}).d_ff == 96
    for bad, key in (({"intermediate_size": [96, 64] * 3}, "intermediate_size"),
                     ({"activation_sparsity_pattern": [0.0, 0.95] + [0.0] * 4},
                      "activation_sparsity_pattern"),
                     ({"activation_sparsity_pattern": [0.95] * 2}, "activation_sparsity_pattern"),
                     ({"altup_num_inputs": 1}, "altup_num_inputs"),
                     ({"num_kv_shared_layers": 5}, "num_kv_shared_layers")):
        with pytest.raises(SpecError, match=f"key '{key}'"):
            spec_from_hf(base | bad)
    # a wrapper's text_config is read as the language model (the towers not counted)
    wrapped = spec_from_hf({"model_type": "gemma3n", "text_config": base})
    assert count_params(wrapped).total == 223_808 and "not counted" in wrapped.note


def test_gemma3n_e2b_with_its_published_sizes() -> None:
    """Gemma 3n E2B's language model (google/gemma-3n-E2B's text_config: 30 layers of 2048,
    FFN 8192 listed per layer, the last 10 K/V-shared, the first 10 sparsified; sizes as
    ai-edge-torch's Gemma 3n E2B config has them, the Hub file being out of reach here): its
    Gemma3nForCausalLM builds 4,435,182,688 parameters in transformers 5.23 (meta device),
    2,013,265,920 of them the per-layer embedding table that "E2B" (2B effective) leaves out.
    Read through the multimodal wrapper, the towers not counted."""
    E2B = [8192] * 30
    spec = spec_from_hf({"model_type": "gemma3n", "text_config": {
        "model_type": "gemma3n_text", "hidden_size": 2048, "intermediate_size": E2B,
        "num_hidden_layers": 30, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 256, "vocab_size": 262400, "vocab_size_per_layer_input": 262144,
        "hidden_size_per_layer_input": 256, "num_kv_shared_layers": 10,
        "activation_sparsity_pattern": [0.95] * 10 + [0.0] * 20, "laurel_rank": 64,
        "altup_num_inputs": 4, "sliding_window": 512}})
    p = count_params(spec)
    assert p.total == 4_435_182_688
    assert p.get("embed.per_layer").total == 262144 * 30 * 256 == 2_013_265_920
    assert (spec.kv_shared_layers, spec.sparse_ffn_layers, spec.d_ff) == (10, 10, 8192)


def test_deepseek_v4_reads_its_layer_kinds_and_compression() -> None:
    """DeepseekV4Config (transformers 5.23): the default builds 284,325,869,015 parameters on
    the meta device (DeepseekV4ForCausalLM, tools/reference_counts.py): 43 layers, the first
    two heavily compressed (H) then compressed sparse (Q) and H alternating, 4 hyper-connection
    streams, 256 experts of 2048 top-6 and one shared. The checkpoints' legacy compress_ratios
    (0, 4, 128 per layer) name the same kinds."""
    spec = spec_from_hf({"model_type": "deepseek_v4"})
    assert count_params(spec).total == 284_325_869_015
    assert {g.name: g.count for g in plan_of(spec).groups} == {"decoder.hca": 23,
                                                                "decoder.csa": 20}
    assert (spec.hc_streams, spec.compress_csa, spec.compress_hca, spec.o_groups) == \
        (4, 4, 128, 8)
    base = json.loads((HF / "variants" / "deepseek_v4-types.json").read_text())
    legacy = {k: v for k, v in base.items() if k != "layer_types"} | {
        "compress_ratios": [0, 4, 128], "compress_rates": {"compressed_sparse_attention": 4,
                                                           "heavily_compressed_attention": 128}}
    assert spec_from_hf(legacy).layer_attention == "1S 1Q 1H"
    for bad, key in (({"layer_types": ["full_attention"] * 3}, "layer_types"),
                     ({"compress_rates": {"compressed_sparse_attention": 0}}, "compress_rates"),
                     ({"compress_rates": [4, 128]}, "compress_rates"),
                     ({"mlp_bias": True}, "mlp_bias"),
                     ({"layer_types": None, "compress_ratios": [0, 3, 128]},
                      "compress_ratios")):
        with pytest.raises(SpecError, match=f"key '{key}'"):
            spec_from_hf(base | bad)
    noted = spec_from_hf(base | {"n_shared_experts": 2})
    assert "builds one shared expert" in noted.note
    assert count_params(noted).total == 72_894
    assert "multi-token-prediction" in spec.note


def test_gemma3n_sparsifies_the_first_ten_layers_only_past_ten() -> None:
    """Gemma3nTextConfig's activation_sparsity_pattern default: 0.95 in the first 10 layers
    when there are more than 10, else none (transformers 5.23: Gemma3nTextConfig(
    num_hidden_layers=10) gives ten zeros, 11 layers ten 0.95 and a zero)."""
    base = {"model_type": "gemma3n_text", "num_kv_shared_layers": 2}
    assert spec_from_hf(base | {"num_hidden_layers": 10}).sparse_ffn_layers == 0
    assert spec_from_hf(base | {"num_hidden_layers": 11}).sparse_ffn_layers == 10


@pytest.mark.parametrize("spelled", ["Infinity", "-Infinity", "NaN", '{"__float__": "Infinity"}'])
def test_a_non_finite_number_is_read_where_transformers_reads_it(spelled: str) -> None:
    # transformers 4.x writes Mamba-2's and Nemotron-H's time_step_limit as [0.0, Infinity]
    # (Python's json); transformers 5 as [0.0, {"__float__": "Infinity"}]. tcalc reads no
    # time_step_limit: the file counts as transformers builds it (the totals pinned above)
    from transformer_calc.hf import spec_from_hf_text

    text = (HF / "nemotron-3-nano-30b-a3b.json").read_text().replace(
        '"time_step_floor"', f'"time_step_limit": [0.0, {spelled}],\n  "time_step_floor"')
    assert "time_step_limit" in text
    spec = spec_from_hf_text(text, "nemotron.json")
    assert count_params(spec).total == 31_577_937_344
    assert "Infinity" in (HF / "mamba2-2.7b.json").read_text()


@pytest.mark.parametrize("spelled, shown", [
    ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("NaN", "NaN"),
    ('{"__float__": "Infinity"}', "Infinity")])
def test_a_non_finite_number_in_a_key_tcalc_reads_is_refused_by_name(cli, tmp_path,
                                                                     spelled: str,
                                                                     shown: str) -> None:
    path = tmp_path / "config.json"
    for key, model_type in (("partial_rotary_factor", "phi"), ("resid_pdrop", "gpt2"),
                            ("final_logit_softcapping", "gemma2"), ("expand", "mamba")):
        path.write_text(f'{{"model_type": "{model_type}", "{key}": {spelled}}}')
        assert cli("params", str(path), code=2).stderr == (
            f"Error: {path}: key '{key}': expected a finite number (tcalc reads this key), "
            f"got {shown}\n")
    # a key tcalc does not read may hold one (rope_scaling's factor is no size)
    path.write_text(f'{{"model_type": "llama", "rope_scaling": {{"factor": {spelled}}}, '
                    '"num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 64, '
                    '"num_attention_heads": 4, "vocab_size": 10}')
    assert cli.json("params", str(path))["total_params"] > 0


WRAPPED = {name: row for name, row in PUBLISHED["files"].items() if "tower" in row}


@pytest.mark.parametrize("path", sorted(WRAPPED))
def test_a_vision_language_model_is_counted_whole_part_by_part(path: str) -> None:
    # transformers 5.23 (tools/reference_counts.py --write): the trainable parameters under
    # the class's vision tower (visual, vision_tower, vision_model), its multi_modal_projector
    # and the rest, the language model
    row = WRAPPED[path]
    spec = load_model(str(HF / path))
    b = count_params(spec)
    assert b.sum_prefix("tower.") == row["tower"]
    assert b.sum_prefix("projector.") == row["projector"]
    assert b.total - row["tower"] - row["projector"] == row["language_model"]
    assert f"counted as transformers' {row['class']}: its {spec.tower} tower" in spec.note
    # the language model alone (--text-only): the same count without the tower and projector
    text = spec.text_only()
    assert count_params(text).total == row["language_model"]
    assert text.tower == text.projector == "none"
    assert "the language model of " + row["class"] + " alone" in text.note


def test_the_tower_is_its_own_section_and_category(cli) -> None:
    from transformer_calc.params import by_category

    spec = load_model(str(HF / "gemma-3-4b.json"))
    assert by_category(count_params(spec))["tower"] == WRAPPED["gemma-3-4b.json"]["tower"] \
        + WRAPPED["gemma-3-4b.json"]["projector"]
    table = cli("params", str(HF / "gemma-3-4b.json"), "--format", "markdown").stdout
    for section in ("tower", "tower layer (× 27)", "projector", "embeddings",
                    "decoder.sliding layer (× 29)"):
        assert f"**{section}**" in table, section
    data = cli.json("params", str(HF / "gemma-3-4b.json"))
    assert data["total_params"] == 4_300_079_472
    assert any("siglip tower 416,866,032 + projector 2,950,272 + language model "
               "3,880,263,168" in n for n in data["notes"])


def test_text_only_counts_the_language_model_alone(cli) -> None:
    row = WRAPPED["qwen3-vl-8b.json"]
    data = cli.json("params", str(HF / "qwen3-vl-8b.json"), "--text-only")
    assert data["total_params"] == row["language_model"] == 8_190_735_360
    assert data["notes"][0].startswith("counted as transformers' Qwen3VLTextModel + lm_head: "
                                       "the language model of Qwen3VLForConditionalGeneration")
    assert not any(c["name"].startswith(("tower.", "projector.")) for c in data["components"])
    # a model without a tower is the same model
    assert cli.json("params", "gpt2", "--text-only")["total_params"] == 124_439_808


def test_an_explicit_null_size_is_refused_by_its_key(cli, tmp_path) -> None:
    # transformers 5.23: AutoConfig.for_model(model_type="gpt2", n_embd=None) raises
    # StrictDataclassFieldValidationError ("expected int, got NoneType"); tcalc counted the
    # default 768 instead. n_inner: null stays GPT2MLP's 4 · n_embd (its documented meaning)
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2", "n_embd": null}')
    err = cli("params", str(path), code=2).stderr
    assert err == (f"Error: {path}: key 'n_embd': expected an integer (transformers' config "
                   "refuses null here)\n")
    path.write_text('{"model_type": "gpt2", "n_inner": null}')
    assert cli.json("params", str(path))["total_params"] == 124_439_808


def test_mpts_mlp_is_four_times_wide_whatever_expansion_ratio_says(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # MptMLP builds Linear(hidden_size, 4 * hidden_size) (transformers 5.23 modeling_mpt.py):
    # mpt-tiny.json with "expansion_ratio": 2 has 52,544 parameters (MptForCausalLM on the
    # meta device, transformers 5.23.0, torch 2.13), as without it
    config = json.loads((DATA / "hf" / "variants" / "mpt-tiny.json").read_text())
    path = tmp_path / "mpt-x2.json"
    path.write_text(json.dumps({**config, "expansion_ratio": 2}))
    assert count_params(load_model(str(path))).total == 52_544
