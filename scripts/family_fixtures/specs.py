"""The families of issue 39 at toy size: transformers config, tokenizer layout, chat template and quirks.

Imported by the converter's subprocess too, so only the standard library at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

N_GREEDY = 32
PROMPT_LENGTHS = (5, 40)  # 40 > gemma2's window of 16

# Regexes of the real tokenizer.json files (Llama 3's \p{N}{1,3}; Qwen2's single digits)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# (content, special): special tokens split from text and hidden from decoding; the rest are plain added tokens
LLAMA3_SPECIALS = [("<|begin_of_text|>", True), ("<|end_of_text|>", True), ("<|reserved_special_token_0|>", True),
                   ("<|reserved_special_token_1|>", True), ("<|finetune_right_pad_id|>", True),
                   ("<|reserved_special_token_2|>", True), ("<|start_header_id|>", True), ("<|end_header_id|>", True),
                   ("<|eom_id|>", True), ("<|eot_id|>", True), ("<|python_tag|>", True)]
QWEN_SPECIALS = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                 ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
                 ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
                 ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
                 ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
                 ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
                 ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False)]
QWEN3_SPECIALS = QWEN_SPECIALS + [("<tool_response>", False), ("</tool_response>", False), ("<think>", False),
                                  ("</think>", False)]
# SmolLM3 ships Llama 3.2's tokenizer with reserved slots renamed: <think> </think> <|im_start|> <|im_end|>
SMOLLM3_SPECIALS = [("<|begin_of_text|>", True), ("<|end_of_text|>", True), ("<think>", False), ("</think>", False),
                    ("<|finetune_right_pad_id|>", True), ("<|reserved_special_token_2|>", True),
                    ("<|start_header_id|>", True), ("<|end_header_id|>", True), ("<|eom_id|>", True),
                    ("<|eot_id|>", True), ("<|python_tag|>", True), ("<|im_start|>", True), ("<|im_end|>", True)]
# Mistral v0.3's SentencePiece control pieces after <unk> <s> </s>
MISTRAL_CONTROLS = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                    "[/TOOL_RESULTS]"]
# Phi-3.5's added tokens, ids after the SentencePiece model's (32000.. in the real one); rstrip as the real ones
PHI3_ADDED = ["<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>",
              "<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>"]
# Gemma: <pad> <eos> <bos> <unk> <mask> [@BOS@] <unused0..99> at 0..105, <start_of_turn> 106, <end_of_turn> 107
GEMMA_CONTROLS = ["<mask>", "[@BOS@]"] + [f"<unused{i}>" for i in range(100)]
GEMMA_TURNS = ["<start_of_turn>", "<end_of_turn>"]

# LFM2's specials (the real vocabulary has them first, ids 0..; here after the learned vocabulary)
LFM2_SPECIALS = [("<|pad|>", True), ("<|startoftext|>", True), ("<|endoftext|>", True), ("<|fim_pre|>", True),
                 ("<|fim_mid|>", True), ("<|fim_suf|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                 ("<|tool_list_start|>", True), ("<|tool_list_end|>", True), ("<|tool_call_start|>", True),
                 ("<|tool_call_end|>", True), ("<|tool_response_start|>", True), ("<|tool_response_end|>", True)]

QWEN3_EMBED_TASK = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_EMBED_QUERY_PREFIX = f"Instruct: {QWEN3_EMBED_TASK}\nQuery:"


@dataclass(frozen=True)
class Family:
    name: str
    hf_class: str
    config: dict[str, Any]
    template: str  # llama.cpp models/templates/<file>
    tokenizer: str  # "bpe" (tokenizers, byte level) or "spm" (SentencePiece BPE, byte fallback)
    tokenizer_note: str
    bos: str | None
    eos: str  # tokenizer_config's eos_token
    gen_eos: tuple[str, ...]  # generation_config's eos_token_id, first = config's
    pad: str | None = None
    add_bos: bool = False  # the tokenizer prepends bos
    specials: list[tuple[str, bool]] = field(default_factory=list)  # BPE: added after the learned vocab
    split_regex: str = LLAMA3_SPLIT
    nfc: bool = False  # Qwen's tokenizer.json normalises to NFC
    append_eos: str | None = None  # Qwen3-Embedding's post-processor appends <|endoftext|>
    pad_vocab_to: int = 1  # config vocab_size rounded up (Qwen's and Phi-3's are padded past the tokenizer)
    spm_layout: str = ""  # "mistral", "phi3" or "gemma"
    tokenizer_class: str = ""
    pre: str | None = None  # llama.cpp's BPE pre-tokenizer name (patched in, see the script's docstring)
    seed: int = 0
    chat_variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"default": {}})
    system_turn: bool = True  # the template accepts a system message
    permute_qk: bool = False  # llama-arch files: the converter permutes Q/K rows
    norm_plus_one: bool = False  # Gemma: the checkpoint stores w, the converter 1 + w
    plain_norms: tuple[str, ...] = ()  # name substrings of norms that store w itself even with norm_plus_one
    embedding: bool = False
    texts: tuple[str, ...] = ()
    query_prefix: str = ""
    dtypes: tuple[str, ...] = ("f32", "q8_0")  # GGUF files made and recorded
    embed_std: float = 0.2
    norm_scales: dict[str, float] = field(default_factory=dict)  # name substring -> factor on 1 +- 0.2
    pin_long_rope: bool = False
    alt_golden: Callable[[Any], Any] | None = None
    alt_prefix: str = ""
    prompt_lengths: tuple[int, ...] = PROMPT_LENGTHS
    converter_args: tuple[str, ...] = ()  # extra convert_hf_to_gguf.py arguments
    notes: str = ""


def _base(**kw: Any) -> dict[str, Any]:
    c = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2,
             intermediate_size=192, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True)
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def _gemma2_head_dim_scale(model: Any) -> Any:
    """The gemma2 model with query_pre_attn_scalar = head_dim: what llama.cpp computes on the file (it ignores the
    config's scalar and scales by 1/sqrt(head_dim) unless the model has 46 layers, Gemma 2 27B)."""
    import copy

    other = copy.deepcopy(model)
    for layer in other.model.layers:
        layer.self_attn.scaling = other.config.head_dim ** -0.5
    return other


# Gemma scales embeddings by sqrt(hidden) and ties the head, so a token's own embedding adds sqrt(D) |e|^2 to its
# logit: at std 0.2 that outweighs everything and greedy echoes its input. Smaller embeddings; Gemma 2's post-norms
# (which cap each block's output) scaled up, as trained ones are; a larger final norm so logits (std ~3.5) reach
# into the softcap's curve.
_GEMMA_SCALES: dict[str, Any] = {"embed_std": 0.08, "norm_scales": {"model.norm.": 4.0}}
_GEMMA2_SCALES: dict[str, Any] = {"embed_std": 0.04, "norm_scales": {"model.norm.": 8.0, "post_": 3.0}}

_PHI3_SHORT = [1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4]
_PHI3_LONG = [1.0, 1.1, 1.25, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4, 2.55, 2.7, 2.8, 2.9, 2.95, 3.0, 3.0]

FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family(
        "llama3", "LlamaForCausalLM",
        _base(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
              hidden_act="silu", attention_bias=False, mlp_bias=False),
        "meta-llama-Llama-3.2-3B-Instruct.jinja", "bpe", "byte-level BPE, Llama 3 split regex, specials after "
        "the vocabulary, post-processor prepends <|begin_of_text|>", bos="<|begin_of_text|>", eos="<|eot_id|>",
        gen_eos=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"), pad=None, add_bos=True, specials=LLAMA3_SPECIALS,
        pre="llama-bpe", seed=100, permute_qk=True, chat_variants={"default": {"date_string": "26 Jul 2024"}},
        notes="rope_freqs.weight (the llama3 factor of each rotary pair) is written by the converter; no rope "
              "scaling keys. context_length 256 < original 8192 (transformers warns; its llama3 rope ignores it)"),
    Family(
        "llama3_h256", "LlamaForCausalLM",
        _base(hidden_size=256, head_dim=64, intermediate_size=256,
              rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
              hidden_act="silu", attention_bias=False, mlp_bias=False),
        "meta-llama-Llama-3.2-3B-Instruct.jinja", "bpe", "as llama3", bos="<|begin_of_text|>", eos="<|eot_id|>",
        gen_eos=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"), add_bos=True, specials=LLAMA3_SPECIALS,
        pre="llama-bpe", seed=1000, permute_qk=True, chat_variants={"default": {"date_string": "26 Jul 2024"}},
        dtypes=("q4_k_m",),
        notes="llama3 at hidden 256 (rows a multiple of 256, as K-quants need): Q4_K_M by llama.cpp's llama-quantize "
              "from the converter's F32 file (not committed: 3.6 MB); golden on the Q4_K/Q6_K weights dequantised "
              "by gguf-py"),
    Family(
        "qwen2", "Qwen2ForCausalLM",
        _base(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, hidden_act="silu",
              use_sliding_window=False, head_dim=None),
        "Qwen-Qwen2.5-7B-Instruct.jinja", "bpe", "byte-level BPE, Qwen2 split regex, NFC, no BOS",
        bos=None, eos="<|im_end|>", gen_eos=("<|im_end|>", "<|endoftext|>"), pad="<|endoftext|>",
        specials=QWEN_SPECIALS, split_regex=QWEN2_SPLIT, nfc=True, pad_vocab_to=64, pre="qwen2", seed=200,
        notes="q/k/v biases nonzero (attn_q.bias etc.)"),
    Family(
        "qwen3", "Qwen3ForCausalLM",
        _base(head_dim=48, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, hidden_act="silu",
              attention_bias=False, use_sliding_window=False),
        "Qwen-Qwen3-0.6B.jinja", "bpe", "byte-level BPE, Qwen2 split regex, NFC, no BOS",
        bos=None, eos="<|im_end|>", gen_eos=("<|im_end|>", "<|endoftext|>"), pad="<|endoftext|>",
        specials=QWEN3_SPECIALS, split_regex=QWEN2_SPLIT, nfc=True, pad_vocab_to=64, pre="qwen2", seed=300,
        chat_variants={"thinking_off": {"enable_thinking": False}, "thinking_on": {"enable_thinking": True}},
        notes="head_dim 48 != hidden/heads 32 (q is 192 wide, as Qwen3's is wider than hidden); q/k RMS norms "
              "(attn_q_norm, attn_k_norm) random around 1"),
    Family(
        "mistral", "MistralForCausalLM",
        _base(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, hidden_act="silu",
              sliding_window=None, tie_word_embeddings=False),
        "mistralai-Mistral-Nemo-Instruct-2407.jinja", "spm", "SentencePiece BPE with byte fallback, Mistral v0.3 "
        "control pieces [INST].. at 3..9, add_dummy_prefix", bos="<s>", eos="</s>", gen_eos=("</s>",), add_bos=True,
        spm_layout="mistral", tokenizer_class="LlamaTokenizer", seed=400, permute_qk=True,
        notes="Nemo-style head_dim 16 < hidden/heads 32 (attention.key_length 16; Nemo: 128 < 5120/32); untied "
              "output.weight"),
    Family(
        "smollm3", "SmolLM3ForCausalLM",
        _base(num_hidden_layers=4, rope_parameters={"rope_type": "default", "rope_theta": 5000000.0},
              hidden_act="silu", no_rope_layer_interval=4, use_sliding_window=False, head_dim=None),
        "HuggingFaceTB-SmolLM3-3B.jinja", "bpe", "byte-level BPE, Llama 3 split regex (SmolLM3 ships Llama 3.2's "
        "tokenizer), no BOS added", bos="<|begin_of_text|>", eos="<|im_end|>", gen_eos=("<|im_end|>",),
        pad="<|finetune_right_pad_id|>", specials=SMOLLM3_SPECIALS, pre="llama-bpe", seed=500, permute_qk=True,
        chat_variants={"default": {}, "thinking_off": {"enable_thinking": False}},
        notes="no_rope_layers [1, 1, 1, 0]: layer 3 skips RoPE; the GGUF has no key for it (llama.cpp hardcodes "
              "n_no_rope_layer_step = 4 for arch smollm3)"),
    Family(
        "phi3", "Phi3ForCausalLM",
        _base(rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": _PHI3_SHORT,
                               "long_factor": _PHI3_LONG, "original_max_position_embeddings": 64},
              original_max_position_embeddings=64, hidden_act="silu", sliding_window=None, head_dim=None,
              tie_word_embeddings=False),
        "microsoft-Phi-3.5-mini-instruct.jinja", "spm", "SentencePiece BPE with byte fallback, add_dummy_prefix; "
        "Phi-3.5's added tokens <|endoftext|>..<|user|> after it (rstrip as shipped), vocab padded to 64",
        bos="<s>", eos="<|endoftext|>", gen_eos=("<|end|>", "<|assistant|>", "<|endoftext|>"), pad="<|endoftext|>",
        add_bos=False, spm_layout="phi3", tokenizer_class="LlamaTokenizer", pad_vocab_to=64, seed=600,
        pin_long_rope=True,
        notes="fused attn_qkv and ffn_up (gate then up, 2 x 192 rows); longrope: rope_factors_long.weight and "
              "rope_factors_short.weight, rope.scaling.attn_factor sqrt(1 + ln 4 / ln 64), "
              "rope.scaling.original_context_length 64, context_length 256, attention.sliding_window 0, and no "
              "rope.scaling.type key (the Phi-3 converter writes its own hparams). Golden pins transformers to the "
              "long factors for every step (transformers would use the short ones while max position < 64; llama.cpp "
              "uses the long ones whenever n_ctx > 64, as with the default n_ctx 256)"),
    Family(
        "gemma", "GemmaForCausalLM",
        _base(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
              hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh"),
        "google-gemma-2-2b-it.jinja", "spm", "SentencePiece BPE with byte fallback, no dummy prefix; Gemma's ids: "
        "<pad> 0 <eos> 1 <bos> 2 <unk> 3, <start_of_turn> 106, <end_of_turn> 107", bos="<bos>", eos="<eos>",
        gen_eos=("<eos>", "<end_of_turn>"), pad="<pad>", add_bos=True, spm_layout="gemma",
        tokenizer_class="GemmaTokenizer", seed=700, system_turn=False, norm_plus_one=True, **_GEMMA_SCALES,
        chat_variants={"user_only": {}},
        notes="norm weights stored as 1 + w by the converter; embeddings scaled by sqrt(128) in the graph; "
              "the converter writes eot_token_id 107 whatever the vocabulary (here <end_of_turn>, as in Gemma's) "
              "and add_space_prefix false"),
    Family(
        "gemma2", "Gemma2ForCausalLM",
        _base(head_dim=16, query_pre_attn_scalar=32, sliding_window=16,
              attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
              hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh"),
        "google-gemma-2-2b-it.jinja", "spm", "as gemma", bos="<bos>", eos="<eos>",
        gen_eos=("<eos>", "<end_of_turn>"), pad="<pad>", add_bos=True, spm_layout="gemma",
        tokenizer_class="GemmaTokenizer", seed=800, system_turn=False, norm_plus_one=True, **_GEMMA2_SCALES,
        chat_variants={"user_only": {}}, alt_golden=_gemma2_head_dim_scale, alt_prefix="headdim_scale/",
        notes="layer 0 sliding (window 16), layer 1 full; softcaps 50 / 30; query_pre_attn_scalar 32 "
              "(= hidden/heads, 27B's relation) != head_dim 16. The converter writes no key for the scalar and "
              "llama.cpp scales by 1/sqrt(head_dim) unless n_layer == 46: <dtype>/logits_<i> are transformers' "
              "(scale 1/sqrt(32)), <dtype>/headdim_scale/logits_<i> the same weights with 1/sqrt(16), what "
              "llama.cpp computes on this file"),
    Family(
        "lfm2", "Lfm2ForCausalLM",
        _base(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=None, num_hidden_layers=3,
              layer_types=["conv", "full_attention", "conv"], intermediate_size=192, block_auto_adjust_ff_dim=True,
              block_multiple_of=64, block_ffn_dim_multiplier=1.0, conv_L_cache=3, conv_bias=False,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, rms_norm_eps=None, norm_eps=1e-5),
        "LFM2.5-Instruct.jinja", "bpe", "byte-level BPE, Llama 3 split regex (llama.cpp's lfm2 pre-tokenizer), "
        "<|startoftext|> prepended; LFM2's specials after the learned vocabulary (the real one has them first)",
        bos="<|startoftext|>", eos="<|im_end|>", gen_eos=("<|im_end|>",), pad="<|pad|>", add_bos=True,
        specials=LFM2_SPECIALS, pre="lfm2", seed=1100,
        notes="LFM2.5-350M's layout shrunk (hidden 64, 3 layers: conv, attention, conv; conv_L_cache 3): conv "
              "layers write head_count_kv 0 in the per-layer array and shortconv.{in_proj,conv,out_proj} (conv "
              "squeezed to [D, 3]); attention layers q/k norms (attn_q_norm, attn_k_norm); the final norm "
              "(HF embedding_norm) is token_embd_norm; feed_forward_length 128 (block_auto_adjust_ff_dim: "
              "int(2 * 192 / 3) rounded up to a multiple of 64). Prompt 1 (40 tokens) runs in chunks of 16 in "
              "tests/models/test_lfm2.py (state carried between chunks)"),
    Family(
        "lfm2_h256", "Lfm2ForCausalLM",
        _base(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=None, num_hidden_layers=2,
              layer_types=["conv", "full_attention"], intermediate_size=384, block_auto_adjust_ff_dim=True,
              block_multiple_of=256, block_ffn_dim_multiplier=1.0, conv_L_cache=3, conv_bias=False,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, rms_norm_eps=None, norm_eps=1e-5),
        "LFM2.5-Instruct.jinja", "bpe", "as lfm2", bos="<|startoftext|>", eos="<|im_end|>", gen_eos=("<|im_end|>",),
        pad="<|pad|>", add_bos=True, specials=LFM2_SPECIALS, pre="lfm2", seed=1200, dtypes=("q4_k_m",),
        notes="lfm2 at hidden 256 (rows a multiple of 256, as K-quants need), a conv and an attention layer, "
              "feed_forward_length 256: Q4_K_M by llama.cpp's llama-quantize from the converter's F32 file (not "
              "committed); golden on the dequantised weights"),
    Family(
        "qwen3_embedding", "Qwen3Model",
        _base(head_dim=48, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, hidden_act="silu",
              attention_bias=False, use_sliding_window=False),
        "Qwen-Qwen3-0.6B.jinja", "bpe", "as qwen3, and the post-processor appends <|endoftext|> (as "
        "Qwen3-Embedding's tokenizer.json does), so the last token pooled is <|endoftext|>",
        bos=None, eos="<|im_end|>", gen_eos=("<|im_end|>", "<|endoftext|>"), pad="<|endoftext|>",
        specials=QWEN3_SPECIALS, split_regex=QWEN2_SPLIT, nfc=True, append_eos="<|endoftext|>", pad_vocab_to=64,
        pre="qwen2", seed=900, chat_variants={}, embedding=True, query_prefix=QWEN3_EMBED_QUERY_PREFIX,
        texts=(f"{QWEN3_EMBED_QUERY_PREFIX}What is the capital of China?",
               f"{QWEN3_EMBED_QUERY_PREFIX}Explain gravity",
               "The capital of China is Beijing.",
               "Gravity is a force that attracts two bodies towards each other."),
        notes="architectures Qwen3Model (no lm_head); sentence-transformers modules.json + 1_Pooling "
              "(pooling_mode_lasttoken) + 2_Normalize -> the converter writes qwen3.pooling_type = 3 (LAST); "
              "normalisation is not in the GGUF. The tokenizer.json post-processor appending <|endoftext|> makes the "
              "converter write eos_token_id <|endoftext|>, eot_token_id <|im_end|> (tokenizer_config's eos) and "
              "add_eos_token true. Queries are 'Instruct: {task}\\nQuery:{query}' (no space after "
              "'Query:'), documents as they are"),
    Family(
        "qwen35", "Qwen3_5ForCausalLM",
        _base(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_hidden_layers=4,
              intermediate_size=64, hidden_act="silu", attention_bias=False,
              layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
              linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
              linear_num_value_heads=2,
              rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                               "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
        "Qwen3.5-4B.jinja", "bpe", "byte-level BPE, Qwen3.5's split regex (letters with marks), NFC, no BOS; "
        "Qwen3's specials (the real one adds more vision specials after these)",
        bos=None, eos="<|im_end|>", gen_eos=("<|im_end|>", "<|endoftext|>"), pad="<|endoftext|>",
        specials=QWEN3_SPECIALS, split_regex=QWEN35_SPLIT, nfc=True, pad_vocab_to=64, pre="qwen35", seed=1100,
        norm_plus_one=True, plain_norms=("linear_attn.norm",), prompt_lengths=(5, 70), converter_args=("--no-mtp",),
        chat_variants={"thinking_off": {"enable_thinking": False}, "thinking_on": {"enable_thinking": True}},
        notes="Qwen3.5-0.8B's layout shrunk (its 24 layers repeat 3 Gated DeltaNet layers then 1 full-attention "
              "layer; equal key and value heads, so the converter's V-head reorder is the identity): hidden 64, "
              "FFN 64, linear attention 2 heads of 16, conv kernel 4; full attention 2 heads of 32 (q_proj twice as "
              "wide: query and output gate), 1 KV head, rotary on a quarter of each head (interleaved MRoPE, all "
              "sections at the text position). RMSNorms compute with 1 + w (the converter stores 1 + w) except "
              "the gated norm of the linear attention (ssm_norm, stored as is); A_log stored as ssm_a = "
              "-exp(A_log), dt_bias as ssm_dt.bias, the conv weight squeezed to [channels, 4]. The 70-token prompt "
              "is longer than transformers' 64-token DeltaNet chunk. Converted with --no-mtp: transformers' "
              "Qwen3_5ForCausalLM has no multi-token-prediction layer (the real checkpoints' mtp.* tensors)"),
    Family(
        "qwen35_h256", "Qwen3_5ForCausalLM",
        _base(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_hidden_layers=2,
              intermediate_size=256, hidden_act="silu", attention_bias=False,
              layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4, linear_key_head_dim=64,
              linear_value_head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
              rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                               "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
        "Qwen3.5-4B.jinja", "bpe", "as qwen35", bos=None, eos="<|im_end|>", gen_eos=("<|im_end|>", "<|endoftext|>"),
        pad="<|endoftext|>", specials=QWEN3_SPECIALS, split_regex=QWEN35_SPLIT, nfc=True, pad_vocab_to=64,
        pre="qwen35", seed=1200, norm_plus_one=True, plain_norms=("linear_attn.norm",), prompt_lengths=(5, 70),
        converter_args=("--no-mtp",), dtypes=("q4_k_m",), chat_variants={},
        notes="qwen35 at hidden 256 (rows a multiple of 256, as K-quants need): a Gated DeltaNet layer with 4 value "
              "heads over 2 key heads of 64 (the converter's tiled V-head order) and a gated attention layer of 4 "
              "heads of 64 (rotary on 16 dims); Q4_K_M by llama.cpp's llama-quantize from the converter's F32 file "
              "(not committed); golden on the dequantised weights"),
]}
