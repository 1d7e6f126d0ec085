"""The Hugging Face model zoo: architectures from transformers 5.x built from small configs on
the meta device, traced and planned through autoshard's Python API (AutoParallel).

Each entry gives a name, a family, the model class, a config builder (small: 2 layers, hidden
64, 4 heads, vocabulary 256: the main dimensions divide the 2x4 mesh) and an input builder
(batch 8, sequence 32, or 8 images of 32x32); weights are bfloat16.  Shared by
tests/python/test_zoo.py (a quick subset) and bench/zoo_bench.py (all of them, table in
docs/zoo.md).

`plan_entry(entry)` is the whole check: trace one training step (forward, the default loss:
the sum of every floating output, backward) and plan it on a 2x4 (dp, tp) mesh; it returns
the graph size, the seconds per phase and the ops planned replicated for want of a sharding
rule (the plan's "no sharding rule for op" warnings: the zoo wants none).
"""
from __future__ import annotations

import dataclasses
import re
import time
from typing import Any, Callable

BATCH = 8
SEQ = 32
VOCAB = 256
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
FFN = 128
LAYERS = 2
IMAGE = 32
PATCH = 8

DECODER, ENCODER, ENC_DEC, VISION, MOE = ("decoder", "encoder", "encoder-decoder", "vision",
                                          "moe")
SPEECH, RECURRENT = "speech", "recurrent"

#: The kinds of code issue 40 added to the zoo (an entry's `kind`; "" for the others):
#: rotary embeddings on complex tensors, Mixture-of-Experts blocks that loop over the experts
#: `nonzero` hit, speech models trained with CTC, LSTM / GRU models.
COMPLEX_ROTARY, EXPERT_LOOP, CTC, RNN = "complex rotary", "expert loop", "ctc", "rnn"
KINDS = (COMPLEX_ROTARY, EXPERT_LOOP, CTC, RNN)


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    """One architecture: `model_class` (attribute of the module `source`: transformers, or
    zoo_local for the plain-PyTorch models) built from `config()`, its floating weights in
    `dtype` (bfloat16, as the checkpoints ship and train).  `loss` (of the model's output)
    replaces the default loss, the sum of every floating output; `kind` is one of KINDS or ""."""

    name: str
    family: str
    model_class: str
    config: Callable[[], Any]
    inputs: Callable[[Any], dict]
    """the model's keyword inputs, given the model (for its config and dtype)"""
    dtype: str = "bfloat16"
    kind: str = ""
    loss: Callable[[Any], Any] | None = None
    source: str = "transformers"

    def build(self) -> Any:
        """The model with meta weights (nothing allocated)."""
        import importlib

        import torch

        cls = getattr(importlib.import_module(self.source), self.model_class)
        with torch.device("meta"):
            return cls(self.config()).to(getattr(torch, self.dtype))


def _cfg(class_name: str, **kw: Any) -> Callable[[], Any]:
    """A builder of transformers.<class_name>(**kw) with the cache off (training step)."""
    def build() -> Any:
        import transformers

        cfg = getattr(transformers, class_name)(**kw)
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False
        return cfg
    return build


def _local(**kw: Any) -> Callable[[], Any]:
    """A builder of zoo_local.LocalConfig(**kw) (the zoo's sizes by default)."""
    def build() -> Any:
        from zoo_local import LocalConfig

        return LocalConfig(**kw)
    return build


def _text(model: Any) -> dict:
    import torch

    return {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ))}


def _text_mask(model: Any) -> dict:
    """Token ids and a padding mask (all ones), as an encoder gets them from a tokenizer."""
    import torch

    return {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ)),
            "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long)}


def _seq2seq(model: Any) -> dict:
    import torch

    return {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ)),
            "decoder_input_ids": torch.randint(0, VOCAB, (BATCH, SEQ))}


def _audio_seq2seq(model: Any) -> dict:
    """Log-mel features (2 x the encoder's positions: Whisper's conv stem halves them) and
    decoder token ids."""
    import torch

    frames = 2 * model.config.max_source_positions
    return {"input_features": torch.randn(BATCH, model.config.num_mel_bins, frames,
                                          dtype=model.dtype),
            "decoder_input_ids": torch.randint(0, VOCAB, (BATCH, SEQ))}


def _pixels(model: Any) -> dict:
    """Images in the model's dtype (a vision model's preprocessing casts them so)."""
    import torch

    return {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE, dtype=model.dtype)}


AUDIO = 4000  # raw samples per utterance (speech): 4000 -> 199 frames of the conv stem below
LABELS = 12    # characters per transcript (CTC labels)


def _audio_ctc(model: Any) -> dict:
    """Raw audio in the model's dtype and padded character labels (>= 1: 0 is the blank and
    padding id): Hugging Face's CTC heads compute the loss from `labels`."""
    import torch

    return {"input_values": torch.randn(BATCH, AUDIO, dtype=model.dtype),
            "labels": torch.randint(1, model.config.vocab_size, (BATCH, LABELS))}


def model_loss(output: Any) -> Any:
    """The loss a Hugging Face model computed from its `labels` (`output.loss`)."""
    return output.loss


# Keyword sets shared by most configs.
_LLAMA_LIKE = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                   num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                   num_key_value_heads=KV_HEADS, max_position_embeddings=2 * SEQ)
_BERT_LIKE = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  max_position_embeddings=2 * SEQ)
_VIT_LIKE = dict(image_size=IMAGE, patch_size=PATCH, hidden_size=HIDDEN,
                 intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=HEADS)
_BART_LIKE = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS,
                  decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                  decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
                  max_position_embeddings=2 * SEQ, pad_token_id=1, bos_token_id=0,
                  eos_token_id=2, decoder_start_token_id=2)
_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # inside the small vocabulary
_MOE = dict(num_local_experts=4, num_experts_per_tok=2)
_LOOP = dict(experts_implementation="eager")  # HF's own expert loop over `nonzero` hits
# wav2vec2-style speech encoders: a 3-layer conv stem (stride 20), a grouped conv positional
# embedding, a character vocabulary of 32 (blank 0)
_W2V = dict(vocab_size=32, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, intermediate_size=FFN, conv_dim=(32, 32, 32),
            conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4, pad_token_id=0, ctc_loss_reduction="mean")
_DEEPSEEK = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                 moe_intermediate_size=FFN // 2, num_hidden_layers=LAYERS,
                 first_k_dense_replace=1, num_attention_heads=HEADS,
                 num_key_value_heads=HEADS, num_experts_per_tok=2, q_lora_rank=32,
                 kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
                 max_position_embeddings=2 * SEQ, **_IDS)

ZOO: list[ZooEntry] = [
    # --- decoders ------------------------------------------------------------------------
    ZooEntry("llama", DECODER, "LlamaForCausalLM", _cfg("LlamaConfig", **_LLAMA_LIKE), _text),
    ZooEntry("qwen2", DECODER, "Qwen2ForCausalLM", _cfg("Qwen2Config", **_LLAMA_LIKE), _text),
    ZooEntry("qwen3", DECODER, "Qwen3ForCausalLM",
             _cfg("Qwen3Config", head_dim=HIDDEN // HEADS, **_LLAMA_LIKE), _text),
    ZooEntry("mistral", DECODER, "MistralForCausalLM",
             _cfg("MistralConfig", sliding_window=None, **_LLAMA_LIKE), _text),
    ZooEntry("gpt2", DECODER, "GPT2LMHeadModel",
             _cfg("GPT2Config", vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                  n_positions=2 * SEQ, **_IDS), _text),
    ZooEntry("gemma", DECODER, "GemmaForCausalLM",
             _cfg("GemmaConfig", head_dim=HIDDEN // HEADS, **_LLAMA_LIKE), _text),
    ZooEntry("gemma2", DECODER, "Gemma2ForCausalLM",
             _cfg("Gemma2Config", head_dim=HIDDEN // HEADS, sliding_window=SEQ // 2,
                  **_LLAMA_LIKE), _text),
    ZooEntry("phi", DECODER, "PhiForCausalLM", _cfg("PhiConfig", **_LLAMA_LIKE), _text),
    ZooEntry("phi3", DECODER, "Phi3ForCausalLM", _cfg("Phi3Config", **_LLAMA_LIKE, **_IDS), _text),
    ZooEntry("falcon", DECODER, "FalconForCausalLM",
             _cfg("FalconConfig", vocab_size=VOCAB, hidden_size=HIDDEN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  new_decoder_architecture=True,
                  num_kv_heads=KV_HEADS, alibi=False), _text),
    ZooEntry("gpt_neox", DECODER, "GPTNeoXForCausalLM",
             _cfg("GPTNeoXConfig", **_BERT_LIKE), _text),
    ZooEntry("opt", DECODER, "OPTForCausalLM",
             _cfg("OPTConfig", vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=FFN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  word_embed_proj_dim=HIDDEN, max_position_embeddings=2 * SEQ), _text),
    ZooEntry("bloom", DECODER, "BloomForCausalLM",
             _cfg("BloomConfig", vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS,
                  n_head=HEADS), _text),
    ZooEntry("stablelm", DECODER, "StableLmForCausalLM",
             _cfg("StableLmConfig", **_LLAMA_LIKE), _text),
    ZooEntry("gptj", DECODER, "GPTJForCausalLM",
             _cfg("GPTJConfig", vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                  rotary_dim=HIDDEN // HEADS // 2, n_positions=2 * SEQ), _text),
    ZooEntry("olmo2", DECODER, "Olmo2ForCausalLM", _cfg("Olmo2Config", **_LLAMA_LIKE, **_IDS),
             _text),
    ZooEntry("gpt_bigcode", DECODER, "GPTBigCodeForCausalLM",
             _cfg("GPTBigCodeConfig", vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS,
                  n_head=HEADS, n_positions=2 * SEQ), _text),
    ZooEntry("gpt_neo", DECODER, "GPTNeoForCausalLM",
             _cfg("GPTNeoConfig", vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS,
                  num_heads=HEADS, attention_types=[[["global", "local"], 1]], window_size=SEQ // 2,
                  max_position_embeddings=2 * SEQ, intermediate_size=FFN), _text),
    ZooEntry("codegen", DECODER, "CodeGenForCausalLM",
             _cfg("CodeGenConfig", vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                  rotary_dim=HIDDEN // HEADS // 2, n_positions=2 * SEQ, n_ctx=2 * SEQ, **_IDS),
             _text),
    ZooEntry("cohere", DECODER, "CohereForCausalLM", _cfg("CohereConfig", **_LLAMA_LIKE, **_IDS),
             _text),
    ZooEntry("granite", DECODER, "GraniteForCausalLM", _cfg("GraniteConfig", **_LLAMA_LIKE),
             _text),
    ZooEntry("starcoder2", DECODER, "Starcoder2ForCausalLM",
             _cfg("Starcoder2Config", sliding_window=None, **_LLAMA_LIKE, **_IDS), _text),
    ZooEntry("persimmon", DECODER, "PersimmonForCausalLM",
             _cfg("PersimmonConfig", vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  max_position_embeddings=2 * SEQ, **_IDS), _text),
    ZooEntry("gemma3", DECODER, "Gemma3ForCausalLM",
             _cfg("Gemma3TextConfig", head_dim=HIDDEN // HEADS, sliding_window=SEQ // 2,
                  **_LLAMA_LIKE), _text),
    ZooEntry("mamba", DECODER, "MambaForCausalLM",
             _cfg("MambaConfig", vocab_size=VOCAB, hidden_size=HIDDEN, state_size=8,
                  num_hidden_layers=LAYERS, **_IDS), _text),
    ZooEntry("glm", DECODER, "GlmForCausalLM", _cfg("GlmConfig", head_dim=HIDDEN // HEADS,
             **_LLAMA_LIKE, **_IDS), _text),
    ZooEntry("helium", DECODER, "HeliumForCausalLM",
             _cfg("HeliumConfig", head_dim=HIDDEN // HEADS, **_LLAMA_LIKE, **_IDS), _text),
    ZooEntry("smollm3", DECODER, "SmolLM3ForCausalLM", _cfg("SmolLM3Config", **_LLAMA_LIKE,
             **_IDS), _text),
    ZooEntry("olmo3", DECODER, "Olmo3ForCausalLM", _cfg("Olmo3Config", sliding_window=SEQ // 2,
             **_LLAMA_LIKE, **_IDS), _text),
    # --- encoders ------------------------------------------------------------------------
    ZooEntry("bert", ENCODER, "BertForMaskedLM", _cfg("BertConfig", **_BERT_LIKE), _text_mask),
    ZooEntry("roberta", ENCODER, "RobertaForMaskedLM",
             _cfg("RobertaConfig", **{**_BERT_LIKE, "max_position_embeddings": 2 * SEQ + 2}),
             _text_mask),
    ZooEntry("distilbert", ENCODER, "DistilBertForMaskedLM",
             _cfg("DistilBertConfig", vocab_size=VOCAB, dim=HIDDEN, hidden_dim=FFN,
                  n_layers=LAYERS, n_heads=HEADS, max_position_embeddings=2 * SEQ), _text_mask),
    ZooEntry("albert", ENCODER, "AlbertForMaskedLM",
             _cfg("AlbertConfig", embedding_size=HIDDEN // 2, **_BERT_LIKE), _text_mask),
    ZooEntry("electra", ENCODER, "ElectraForMaskedLM",
             _cfg("ElectraConfig", embedding_size=HIDDEN // 2, **_BERT_LIKE), _text_mask),
    ZooEntry("deberta_v2", ENCODER, "DebertaV2ForMaskedLM",
             _cfg("DebertaV2Config", **_BERT_LIKE), _text_mask),
    ZooEntry("xlm_roberta", ENCODER, "XLMRobertaForMaskedLM",
             _cfg("XLMRobertaConfig", **{**_BERT_LIKE, "max_position_embeddings": 2 * SEQ + 2}),
             _text_mask),
    ZooEntry("mpnet", ENCODER, "MPNetForMaskedLM",
             _cfg("MPNetConfig", **{**_BERT_LIKE, "max_position_embeddings": 2 * SEQ + 2}),
             _text_mask),
    ZooEntry("deberta", ENCODER, "DebertaForMaskedLM", _cfg("DebertaConfig", **_BERT_LIKE),
             _text_mask),
    ZooEntry("mobilebert", ENCODER, "MobileBertForMaskedLM",
             _cfg("MobileBertConfig", vocab_size=VOCAB, hidden_size=HIDDEN,
                  embedding_size=HIDDEN // 2,
                  intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  intra_bottleneck_size=HIDDEN // 2, true_hidden_size=HIDDEN // 2,
                  max_position_embeddings=2 * SEQ), _text_mask),
    ZooEntry("modernbert", ENCODER, "ModernBertForMaskedLM",
             _cfg("ModernBertConfig", **_BERT_LIKE, **_IDS), _text_mask),
    ZooEntry("roformer", ENCODER, "RoFormerForMaskedLM", _cfg("RoFormerConfig", **_BERT_LIKE),
             _text_mask),
    ZooEntry("esm", ENCODER, "EsmForMaskedLM",
             _cfg("EsmConfig", **_BERT_LIKE, pad_token_id=1, mask_token_id=2), _text_mask),
    # --- encoder-decoders ----------------------------------------------------------------
    ZooEntry("t5", ENC_DEC, "T5ForConditionalGeneration",
             _cfg("T5Config", vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN,
                  num_layers=LAYERS, num_heads=HEADS), _seq2seq),
    ZooEntry("bart", ENC_DEC, "BartForConditionalGeneration", _cfg("BartConfig", **_BART_LIKE),
             _seq2seq),
    ZooEntry("marian", ENC_DEC, "MarianMTModel",
             _cfg("MarianConfig", **{**_BART_LIKE, "decoder_start_token_id": 1}), _seq2seq),
    ZooEntry("pegasus", ENC_DEC, "PegasusForConditionalGeneration",
             _cfg("PegasusConfig", **{**_BART_LIKE, "decoder_start_token_id": 1}), _seq2seq),
    ZooEntry("mbart", ENC_DEC, "MBartForConditionalGeneration", _cfg("MBartConfig", **_BART_LIKE),
             _seq2seq),
    ZooEntry("blenderbot", ENC_DEC, "BlenderbotForConditionalGeneration",
             _cfg("BlenderbotConfig", **_BART_LIKE), _seq2seq),
    ZooEntry("mt5", ENC_DEC, "MT5ForConditionalGeneration",
             _cfg("MT5Config", vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN,
                  num_layers=LAYERS, num_heads=HEADS), _seq2seq),
    ZooEntry("whisper", ENC_DEC, "WhisperForConditionalGeneration",
             _cfg("WhisperConfig", vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS,
                  decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                  decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
                  num_mel_bins=16, max_source_positions=SEQ, max_target_positions=2 * SEQ,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                  suppress_tokens=None, begin_suppress_tokens=None), _audio_seq2seq),
    # --- vision --------------------------------------------------------------------------
    ZooEntry("vit", VISION, "ViTForImageClassification",
             _cfg("ViTConfig", num_labels=8, **_VIT_LIKE), _pixels),
    ZooEntry("deit", VISION, "DeiTForImageClassification",
             _cfg("DeiTConfig", num_labels=8, **_VIT_LIKE), _pixels),
    ZooEntry("beit", VISION, "BeitForImageClassification",
             _cfg("BeitConfig", num_labels=8, **_VIT_LIKE), _pixels),
    ZooEntry("swin", VISION, "SwinForImageClassification",
             _cfg("SwinConfig", image_size=IMAGE, patch_size=2, embed_dim=16, depths=[1, 1],
                  num_heads=[2, 4], window_size=4, num_labels=8), _pixels),
    ZooEntry("clip_vision", VISION, "CLIPVisionModel",
             _cfg("CLIPVisionConfig", **_VIT_LIKE), _pixels),
    ZooEntry("clip_text", VISION, "CLIPTextModel",
             _cfg("CLIPTextConfig", vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  max_position_embeddings=2 * SEQ, **_IDS), _text_mask),
    ZooEntry("dinov2", VISION, "Dinov2Model",
             _cfg("Dinov2Config", **{**_VIT_LIKE, "mlp_ratio": FFN // HIDDEN}), _pixels),
    ZooEntry("siglip_vision", VISION, "SiglipVisionModel",
             _cfg("SiglipVisionConfig", **_VIT_LIKE), _pixels),
    ZooEntry("convnext", VISION, "ConvNextForImageClassification",
             _cfg("ConvNextConfig", image_size=IMAGE, hidden_sizes=[16, 32, 64, 128],
                  depths=[1, 1, 1, 1], num_labels=8), _pixels),
    ZooEntry("swinv2", VISION, "Swinv2ForImageClassification",
             _cfg("Swinv2Config", image_size=IMAGE, patch_size=2, embed_dim=16, depths=[1, 1],
                  num_heads=[2, 4], window_size=4, num_labels=8), _pixels),
    ZooEntry("segformer", VISION, "SegformerForImageClassification",
             _cfg("SegformerConfig", image_size=IMAGE, num_encoder_blocks=2, depths=[1, 1],
                  sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                  num_attention_heads=[1, 2], mlp_ratios=[2, 2], num_labels=8), _pixels),
    ZooEntry("vit_mae", VISION, "ViTMAEForPreTraining", _cfg("ViTMAEConfig", **_VIT_LIKE,
             decoder_hidden_size=HIDDEN, decoder_num_hidden_layers=1,
             decoder_num_attention_heads=HEADS, decoder_intermediate_size=FFN), _pixels),
    # --- mixture of experts --------------------------------------------------------------
    ZooEntry("mixtral", MOE, "MixtralForCausalLM",
             _cfg("MixtralConfig", **_LLAMA_LIKE, **_MOE), _text),
    ZooEntry("qwen2_moe", MOE, "Qwen2MoeForCausalLM",
             _cfg("Qwen2MoeConfig", num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=FFN // 2, shared_expert_intermediate_size=FFN,
                  **_LLAMA_LIKE), _text),
    ZooEntry("qwen3_moe", MOE, "Qwen3MoeForCausalLM",
             _cfg("Qwen3MoeConfig", num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=FFN // 2, head_dim=HIDDEN // HEADS, **_LLAMA_LIKE),
             _text),
    ZooEntry("olmoe", MOE, "OlmoeForCausalLM",
             _cfg("OlmoeConfig", num_experts=4, num_experts_per_tok=2, **_LLAMA_LIKE, **_IDS),
             _text),
    ZooEntry("granitemoe", MOE, "GraniteMoeForCausalLM",
             _cfg("GraniteMoeConfig", **_LLAMA_LIKE, **_MOE), _text),
    ZooEntry("phimoe", MOE, "PhimoeForCausalLM",
             _cfg("PhimoeConfig", sliding_window=None, **_LLAMA_LIKE, **_MOE, **_IDS), _text),
    ZooEntry("deepseek_v3", MOE, "DeepseekV3ForCausalLM",
             _cfg("DeepseekV3Config", vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                  moe_intermediate_size=FFN // 2, num_hidden_layers=LAYERS, first_k_dense_replace=1,
                  num_attention_heads=HEADS, num_key_value_heads=HEADS, n_routed_experts=8,
                  n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
                  q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                  v_head_dim=16, max_position_embeddings=2 * SEQ, **_IDS), _text),
    ZooEntry("gpt_oss", MOE, "GptOssForCausalLM",
             _cfg("GptOssConfig", num_local_experts=4, num_experts_per_tok=2,
                  head_dim=HIDDEN // HEADS,
                  sliding_window=SEQ // 2, **_LLAMA_LIKE, **_IDS), _text),
    # --- issue 40: complex rotary, expert loops, CTC speech, recurrent -----------------------
    ZooEntry("meta_llama", DECODER, "MetaStyleLlama", _local(), _text, kind=COMPLEX_ROTARY,
             source="zoo_local"),
    ZooEntry("titan_llama3", DECODER, "TitanStyleLlama3", _local(), _text, dtype="float32",
             kind=COMPLEX_ROTARY, source="zoo_local"),
    ZooEntry("llama4", MOE, "Llama4ForCausalLM",
             _cfg("Llama4TextConfig", num_local_experts=4, num_experts_per_tok=1,
                  intermediate_size_mlp=FFN, head_dim=HIDDEN // HEADS, **_LLAMA_LIKE), _text,
             kind=COMPLEX_ROTARY),
    ZooEntry("deepseek_v2", MOE, "DeepseekV2ForCausalLM",
             _cfg("DeepseekV2Config", n_routed_experts=4, n_shared_experts=1, **_DEEPSEEK),
             _text, kind=COMPLEX_ROTARY),
    ZooEntry("mixtral_loop", MOE, "MixtralForCausalLM",
             _cfg("MixtralConfig", **_LLAMA_LIKE, **_MOE, **_LOOP), _text, kind=EXPERT_LOOP),
    ZooEntry("qwen2_moe_loop", MOE, "Qwen2MoeForCausalLM",
             _cfg("Qwen2MoeConfig", num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=FFN // 2, shared_expert_intermediate_size=FFN,
                  **_LLAMA_LIKE, **_LOOP), _text, kind=EXPERT_LOOP),
    ZooEntry("qwen3_moe_loop", MOE, "Qwen3MoeForCausalLM",
             _cfg("Qwen3MoeConfig", num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=FFN // 2, head_dim=HIDDEN // HEADS, **_LLAMA_LIKE,
                  **_LOOP), _text, kind=EXPERT_LOOP),
    ZooEntry("olmoe_loop", MOE, "OlmoeForCausalLM",
             _cfg("OlmoeConfig", num_experts=4, num_experts_per_tok=2, **_LLAMA_LIKE, **_IDS,
                  **_LOOP), _text, kind=EXPERT_LOOP),
    ZooEntry("deepseek_v3_loop", MOE, "DeepseekV3ForCausalLM",
             _cfg("DeepseekV3Config", n_routed_experts=8, n_shared_experts=1, n_group=2,
                  topk_group=1, **_DEEPSEEK, **_LOOP), _text, kind=EXPERT_LOOP),
    ZooEntry("wav2vec2_ctc", SPEECH, "Wav2Vec2ForCTC", _cfg("Wav2Vec2Config", **_W2V),
             _audio_ctc, kind=CTC, loss=model_loss),
    ZooEntry("hubert_ctc", SPEECH, "HubertForCTC", _cfg("HubertConfig", **_W2V), _audio_ctc,
             kind=CTC, loss=model_loss),
    ZooEntry("wavlm_ctc", SPEECH, "WavLMForCTC", _cfg("WavLMConfig", **_W2V), _audio_ctc,
             kind=CTC, loss=model_loss),
    ZooEntry("data2vec_audio_ctc", SPEECH, "Data2VecAudioForCTC",
             _cfg("Data2VecAudioConfig", **_W2V), _audio_ctc, kind=CTC, loss=model_loss),
    ZooEntry("sew_ctc", SPEECH, "SEWForCTC", _cfg("SEWConfig", squeeze_factor=2, **_W2V),
             _audio_ctc, kind=CTC, loss=model_loss),
    ZooEntry("unispeech_sat_ctc", SPEECH, "UniSpeechSatForCTC",
             _cfg("UniSpeechSatConfig", **_W2V), _audio_ctc, kind=CTC, loss=model_loss),
    ZooEntry("lstm_lm", RECURRENT, "LstmLM", _local(), _text, kind=RNN, source="zoo_local"),
    ZooEntry("gru_tagger", RECURRENT, "GruTagger", _local(), _text, kind=RNN,
             source="zoo_local"),
]

BY_NAME = {e.name: e for e in ZOO}

_NO_RULE = re.compile(r"no sharding rule for op '([^']+)'")


@dataclasses.dataclass
class ZooResult:
    """What plan_entry measured for one entry."""

    name: str
    family: str
    graph_nodes: int = 0
    op_nodes: int = 0
    trace_s: float = 0.0
    plan_s: float = 0.0
    fallback_ops: list = dataclasses.field(default_factory=list)
    status: str = ""
    error: str = ""
    param_fraction: float = 1.0
    """parameter bytes per device / unsharded parameter bytes, in the plan"""
    kind: str = ""
    ops: list = dataclasses.field(default_factory=list)
    """the distinct ops of the traced step"""
    dtypes: list = dataclasses.field(default_factory=list)
    """the distinct dtypes of the traced step's tensors (autoshard's names: bf16, c64, ...)"""
    data_dependent: list = dataclasses.field(default_factory=list)
    """what the trace decided for data it could not see (tracer policy: docs/tracer.md), as
    "op: value (why)" per decision"""

    @property
    def ok(self) -> bool:
        return not self.error and not self.fallback_ops and self.status in ("optimal",
                                                                            "feasible")


def plan_entry(entry: ZooEntry, time_limit_s: float = 60.0, threads: int = 1,
               param_memory: bool = False) -> ZooResult:
    """Traces and plans `entry` on a 2x4 (dp, tp) mesh through autoshard.AutoParallel; with
    param_memory, under AutoParallel's usual parameter memory constraint (at most 1/8 of the
    parameter bytes per device, as FSDP: the solve then takes seconds, not a tenth of one).

    Raises nothing for a model that fails: the exception's first line goes in `.error`."""
    from autoshard import AutoParallel, core

    res = ZooResult(entry.name, entry.family, kind=entry.kind)
    try:
        model = entry.build()
        options = core.planner_options(time_limit_s=time_limit_s, threads=threads)
        mesh = core.Mesh([2, 4], ["dp", "tp"])
        t0 = time.perf_counter()
        autop = AutoParallel(model, lambda: entry.inputs(model), mesh, options=options,
                             name=entry.name, loss_fn=entry.loss)
        autop.build()
        res.trace_s = time.perf_counter() - t0
        nodes = autop.graph_dict["nodes"]
        res.graph_nodes = len(nodes)
        res.op_nodes = sum(1 for n in nodes if n["kind"] == "op")
        res.ops = sorted({n["op"] for n in nodes if n["kind"] == "op"})
        res.dtypes = sorted({o["dtype"] for n in nodes for o in n.get("outputs", [])
                             if "dtype" in o})
        res.data_dependent = [f"{d.op}: {d.value} ({d.why})"
                              for d in autop.traced.data_dependent]
        t1 = time.perf_counter()
        if param_memory:
            autop.add_parameter_memory_constraint()
        opt = autop.sharding_optimizer
        plan = opt.get_solution()
        res.plan_s = time.perf_counter() - t1
        res.status = str(plan.status)
        res.fallback_ops = sorted({m.group(1) for w in plan.warnings
                                   for m in [_NO_RULE.search(w)] if m})
        if not plan.has_solution:
            res.error = f"no plan ({plan.status})"
            return res
        res.param_fraction = parameter_fraction(nodes, opt.get_placements(plan), mesh.shape)
    except Exception as e:  # noqa: BLE001 - the zoo reports every failure, one line each
        text = str(e).strip()
        res.error = f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
    return res


_PLACEMENT = re.compile(r"S\(\d+\)|R|P\([a-z]+\)|_?S+\([^)]*\)")


def parameter_fraction(nodes: list[dict], placements: dict, mesh_shape: list[int]) -> float:
    """Parameter bytes per device / unsharded parameter bytes under `placements` (node name ->
    {"outputs": [placement string per output]}): a parameter sharded on mesh dim i keeps
    1/mesh_shape[i] of its elements there."""
    total = per_device = 0.0
    for n in nodes:
        if n["kind"] != "parameter":
            continue
        numel = 1
        for d in n["outputs"][0]["shape"]:
            numel *= d
        spec = placements[n["name"]]["outputs"][0]
        tokens = _PLACEMENT.findall(spec)
        if len(tokens) != len(mesh_shape):
            raise ValueError(f"parameter {n['name']}: unexpected placement {spec!r}")
        div = 1
        for tok, size in zip(tokens, mesh_shape):
            if "S" in tok:
                div *= size
        total += numel
        per_device += numel / div
    return per_device / total if total else 1.0
