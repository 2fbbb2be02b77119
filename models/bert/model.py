"""BERT-family encoders (BERT, MiniLM, BGE, ...) on the executor, from a sentence-transformers directory
or from a GGUF file as llama.cpp's converter writes it (architecture "bert").

One step over a packed batch of T tokens (gpu/ops/encoder.py):

    x = LayerNorm(word[ids] + token_type[0] + position[pos])   # lookup on the host, norm on the GPU; x: [T, D]
    for each layer (post-norm):
        q, k, v = x Wq + bq, x Wk + bk, x Wv + bv                # one fused [3D, D] weight when the types agree
        a = attention(q, k, v) over each token's own sequence    # [T, H, Dh], no causal mask
        x = LayerNorm(a Wo + bo + x)
        x = LayerNorm(gelu_erf(x Wup + bup) Wdown + bdown + x)
    e = pool(x) per sequence, then the Dense modules and L2 normalisation the model's pipeline names

A cross-encoder (BertForSequenceClassification, or a GGUF with pooling type RANK) pools the [CLS] row and ends in
its classification head (models/bert/classifier.py); its inputs are pairs, `[CLS] query [SEP] doc [SEP]`, whose
second segment reads token type row 1.

GGUF particulars: llama.cpp's converter stores the WordPiece vocabulary with a leading "\u2581" on word
starts instead of "##" on continuations (undone here), CLS as BOS and SEP as EOS, the pooling in
`bert.pooling_type`, and no normalisation flag: GGUF embeddings are L2-normalised, as llama.cpp does.
Its GELU is the exact one (erf), as in the checkpoints the files come from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES, GGMLQuantizationType, Keys, PoolingType, TokenType
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from gpu.ops import encoder as ops
from gpu.ops.matmul import linear
from gpu.program import Executor, ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.bert.classifier import (
    SequenceClassifier,
    classifier_from_dir,
    classifier_from_gguf,
    is_sequence_classifier,
)
from models.embeddings.engine import EncoderInputs, Head, HFTextEncoder, record_head
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.safetensors_dir import ModelDir, ModelDirError
from models.formats.weights import DirSource, GGUFSource, Matrix, Progress, Uploader, fuse_rows

_ROBERTA_TYPES = ("roberta", "xlm-roberta")  # BERT's network with offset positions and one token type
_GGUF_POOLING = {PoolingType.MEAN: "mean", PoolingType.CLS: "cls", PoolingType.LAST: "last"}
_PHANTOM = "\u2581"  # llama.cpp's mark of a word start in BERT vocabularies


@dataclass(frozen=True)
class BertConfig:
    n_layers: int
    d_model: int  # D
    n_heads: int  # H
    d_ffn: int
    eps: float
    max_positions: int
    vocab_size: int
    position_offset: int = 0  # rows of the position table before position 0 (RoBERTa's padding_idx + 1)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> BertConfig:
        if config.get("hidden_act", "gelu") != "gelu":
            raise ModelDirError(f"hidden_act {config['hidden_act']!r} is not supported (only exact gelu)")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ModelDirError("only absolute position embeddings are supported")
        # RoBERTa numbers positions from padding_idx + 1: its table's first rows are never read.
        offset = int(config.get("pad_token_id", 1)) + 1 if config.get("model_type") in _ROBERTA_TYPES else 0
        return cls(config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
                   config["intermediate_size"], float(config.get("layer_norm_eps", 1e-12)),
                   config["max_position_embeddings"] - offset, config["vocab_size"], offset)

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> BertConfig:
        _, shape, _ = f.raw(TENSOR_NAMES[MODEL_TENSOR.TOKEN_EMBD] + ".weight")
        return cls(int(f.value(Keys.LLM.BLOCK_COUNT)), int(f.value(Keys.LLM.EMBEDDING_LENGTH)),
                   int(f.value(Keys.Attention.HEAD_COUNT)), int(f.value(Keys.LLM.FEED_FORWARD_LENGTH)),
                   float(f.value(Keys.Attention.LAYERNORM_EPS, 1e-12)), int(f.value(Keys.LLM.CONTEXT_LENGTH)),
                   int(shape[1]))


# Checkpoint names of each weight: (HF name, gguf MODEL_TENSOR); ".weight"/".bias" are added.
_EMBEDDINGS = {
    "word": ("embeddings.word_embeddings", MODEL_TENSOR.TOKEN_EMBD),
    "position": ("embeddings.position_embeddings", MODEL_TENSOR.POS_EMBD),
    "token_type": ("embeddings.token_type_embeddings", MODEL_TENSOR.TOKEN_TYPES),
    "norm": ("embeddings.LayerNorm", MODEL_TENSOR.TOKEN_EMBD_NORM),
}
_LAYER = {
    "q": ("encoder.layer.{i}.attention.self.query", MODEL_TENSOR.ATTN_Q),
    "k": ("encoder.layer.{i}.attention.self.key", MODEL_TENSOR.ATTN_K),
    "v": ("encoder.layer.{i}.attention.self.value", MODEL_TENSOR.ATTN_V),
    "qkv": (None, MODEL_TENSOR.ATTN_QKV),
    "o": ("encoder.layer.{i}.attention.output.dense", MODEL_TENSOR.ATTN_OUT),
    "attn_norm": ("encoder.layer.{i}.attention.output.LayerNorm", MODEL_TENSOR.ATTN_OUT_NORM),
    "up": ("encoder.layer.{i}.intermediate.dense", MODEL_TENSOR.FFN_UP),
    "down": ("encoder.layer.{i}.output.dense", MODEL_TENSOR.FFN_DOWN),
    "out_norm": ("encoder.layer.{i}.output.LayerNorm", MODEL_TENSOR.LAYER_OUT_NORM),
}


@dataclass
class BertLayer:
    qkv: list[QuantWeight]  # one fused [3D, D] weight, or q, k, v
    qkv_bias: list[Tensor]
    o: QuantWeight
    o_bias: Tensor
    attn_norm: tuple[Tensor, Tensor]  # (gamma, beta)
    up: QuantWeight
    up_bias: Tensor
    down: QuantWeight
    down_bias: Tensor
    out_norm: tuple[Tensor, Tensor]


class Bert:
    """A BERT encoder's weights (tables on the host, layers on the GPU) and its step program."""

    matryoshka = False
    causal = False

    def __init__(self, executor: Executor, config: BertConfig, source: DirSource | GGUFSource, gguf: bool,
                 head: tuple[str, list[tuple[Matrix, np.ndarray | None]], bool], max_tokens: int,
                 progress: Progress | None, classifier: SequenceClassifier | None = None) -> None:
        self.config = c = config
        self.d_model = c.d_model
        self.vocab_size = c.vocab_size
        self.max_tokens = min(max_tokens, c.max_positions)
        self._gguf = gguf
        self._source = source
        total = sum(m.data.nbytes for m, _ in head[1]) + 4 * c.d_model * (
            (c.vocab_size + c.max_positions) + c.n_layers * (4 * c.d_model + 2 * c.d_ffn))
        up = Uploader(executor, total, progress)
        # The tables stay on the host: each step looks up its rows there (float32, as the checkpoint).
        self.word = source.array(self._name(_EMBEDDINGS["word"]))
        positions = source.array(self._name(_EMBEDDINGS["position"]))
        self.position_and_type = positions[c.position_offset:c.position_offset + c.max_positions]
        if source.has(self._name(_EMBEDDINGS["token_type"])):
            self.type_rows = source.array(self._name(_EMBEDDINGS["token_type"])).reshape(-1, c.d_model)
        else:
            self.type_rows = np.zeros((1, c.d_model), np.float32)
        self.type_row = self.type_rows[0]
        self.classifier = classifier  # the head of a cross-encoder, on the host; None for an embedding model
        up.host(self.word.nbytes + self.position_and_type.nbytes)
        self.embed_norm = self._norm(up, _EMBEDDINGS["norm"])
        self.layers = [self._layer(up, i) for i in range(c.n_layers)]
        pooling, dense, normalize = head
        self.head = Head(pooling, tuple(
            (up.matrix(f"dense{j}", m), None if b is None else up.vector(f"dense{j}.bias", b))
            for j, (m, b) in enumerate(dense)), normalize)
        self.d_out = dense[-1][0].n if dense else c.d_model
        self.weight_bytes = up.uploaded_bytes

    def _name(self, names: tuple[str | None, MODEL_TENSOR], i: int | None = None, suffix: str = "weight") -> str:
        hf, kind = names
        if self._gguf:
            base = TENSOR_NAMES[kind]
            return f"{base.format(bid=i) if i is not None else base}.{suffix}"
        if hf is None:
            return ""
        return f"{hf.format(i=i) if i is not None else hf}.{suffix}"

    def _norm(self, up: Uploader, names: tuple[str | None, MODEL_TENSOR],
              i: int | None = None) -> tuple[Tensor, Tensor]:
        gamma, beta = (self._name(names, i, s) for s in ("weight", "bias"))
        return up.vector(gamma, self._source.array(gamma)), up.vector(beta, self._source.array(beta))

    def _linear(self, up: Uploader, key: str, i: int) -> tuple[QuantWeight, Tensor]:
        weight, bias = (self._name(_LAYER[key], i, s) for s in ("weight", "bias"))
        return up.matrix(weight, self._source.matrix(weight)), up.vector(bias, self._source.array(bias))

    def _layer(self, up: Uploader, i: int) -> BertLayer:
        src = self._source
        fused_name = self._name(_LAYER["qkv"], i)
        if fused_name and src.has(fused_name):
            weight, bias = self._linear(up, "qkv", i)
            qkv, qkv_bias = [weight], [bias]
        else:
            names = [self._name(_LAYER[key], i) for key in "qkv"]
            fused = fuse_rows([src.matrix(n) for n in names])
            biases = [src.array(self._name(_LAYER[key], i, "bias")) for key in "qkv"]
            if fused is not None:
                qkv = [up.matrix(f"blk.{i}.qkv", fused)]
                qkv_bias = [up.vector(f"blk.{i}.qkv.bias", np.concatenate(biases))]
            else:
                qkv = [up.matrix(n, src.matrix(n)) for n in names]
                qkv_bias = [up.vector(f"{n}.bias", b) for n, b in zip(names, biases)]
        o, o_bias = self._linear(up, "o", i)
        ffn_up, up_bias = self._linear(up, "up", i)
        down, down_bias = self._linear(up, "down", i)
        return BertLayer(qkv, qkv_bias, o, o_bias, self._norm(up, _LAYER["attn_norm"], i), ffn_up, up_bias, down,
                         down_bias, self._norm(up, _LAYER["out_norm"], i))

    def input_rows(self, ids: np.ndarray, positions: np.ndarray, types: np.ndarray | None = None) -> np.ndarray:
        """word + token type (0 unless given) + position rows, added in HF's order (float32 [T, D])."""
        if types is None:
            return (self.word[ids] + self.type_row) + self.position_and_type[positions]
        if len(types) and (min(types) < 0 or max(types) >= len(self.type_rows)):
            raise ValueError(f"token types outside [0, {len(self.type_rows)})")
        return (self.word[ids] + self.type_rows[types]) + self.position_and_type[positions]

    def record(self, b: ProgramBuilder, inputs: EncoderInputs) -> None:
        c, t = self.config, inputs.t_max
        d = c.d_model
        x = b.activation("x0", (t, d))
        ops.layer_norm(b, inputs.x, self.embed_norm[0], x, c.eps, beta=self.embed_norm[1])
        scale = 1.0 / math.sqrt(c.head_dim)
        for i, w in enumerate(self.layers):
            q, k, v, offsets = ops.qkv_projection(b, w.qkv, w.qkv_bias, x, t, i)
            a = b.activation(f"attn{i}", (t, d))
            ops.attention(b, q, k, v, inputs.spans, a, heads=c.n_heads, kv_heads=c.n_heads, head_dim=c.head_dim,
                          scale=scale, offsets=offsets)
            o = b.activation(f"o{i}", (t, d))
            linear(b, w.o, a, o, t)
            h = b.activation(f"h{i}", (t, d))
            ops.layer_norm(b, o, w.attn_norm[0], h, c.eps, beta=w.attn_norm[1], bias=w.o_bias, residual=x)
            u = b.activation(f"up{i}", (t, c.d_ffn))
            linear(b, w.up, h, u, t)
            g = b.activation(f"gelu{i}", (t, c.d_ffn))
            ops.gelu(b, u, g, bias=w.up_bias)
            down = b.activation(f"down{i}", (t, d))
            linear(b, w.down, g, down, t)
            x = b.activation(f"x{i + 1}", (t, d))
            ops.layer_norm(b, down, w.out_norm[0], x, c.eps, beta=w.out_norm[1], bias=w.down_bias, residual=h)
        record_head(b, x, inputs, self.head)


def from_dir(d: ModelDir, executor: Executor, progress: Progress | None) -> tuple[Bert, HFTextEncoder]:
    """A BERT sentence-transformers directory (weights named as BertModel's, with or without `bert.`), or a
    (XLM-)RoBERTa one (under `roberta.`: the same network, positions offset, one token type)."""
    prefix = next((p for p in ("bert.", "roberta.") if d.has(f"{p}embeddings.word_embeddings.weight")), "")
    config = BertConfig.from_hf(d.config)
    p = d.pipeline
    max_tokens = p.max_seq_length or config.max_positions
    if is_sequence_classifier(d):  # a cross-encoder: [CLS] row, then its classification head
        arch = Bert(executor, config, DirSource(d, prefix), False, ("cls", [], False), max_tokens, progress,
                    classifier_from_dir(d, prefix))
        return arch, HFTextEncoder(d.tokenizer())
    dense = [(Matrix(GGMLQuantizationType.F32, m.weight.shape[1], m.weight.shape[0], m.weight), m.bias)
             for m in p.dense]
    arch = Bert(executor, config, DirSource(d, prefix), False, (p.pooling, dense, p.normalize), max_tokens, progress)
    return arch, HFTextEncoder(d.tokenizer())


def from_gguf(f: GGUFFile, executor: Executor, progress: Progress | None) -> tuple[Bert, HFTextEncoder]:
    """A GGUF `bert` file (llama.cpp's converter): pooling from bert.pooling_type, L2-normalised output; pooling
    type RANK, or none and a classifier (`cls.output`, which llama.cpp's converter writes for
    BertForSequenceClassification with no pooling type): a cross-encoder, its [CLS] row through that head."""
    config = BertConfig.from_gguf(f)
    classifier = TENSOR_NAMES[MODEL_TENSOR.CLS_OUT] + ".weight" in f.tensors
    kind = PoolingType(int(f.value(Keys.LLM.POOLING_TYPE, PoolingType.RANK if classifier else PoolingType.MEAN)))
    if kind == PoolingType.RANK:
        arch = Bert(executor, config, GGUFSource(f), True, ("cls", [], False), config.max_positions, progress,
                    classifier_from_gguf(f, config.d_model))
        return arch, HFTextEncoder(wordpiece_from_gguf(f))
    if kind not in _GGUF_POOLING:
        raise GGUFFormatError(f"{f.path.name}: pooling type {kind.name} is not supported for embeddings")
    arch = Bert(executor, config, GGUFSource(f), True, (_GGUF_POOLING[kind], [], True), config.max_positions,
                progress)
    return arch, HFTextEncoder(wordpiece_from_gguf(f))


def wordpiece_from_gguf(f: GGUFFile) -> Tokenizer:
    """The WordPiece tokenizer of a GGUF `bert` vocabulary: llama.cpp's "\u2581word" / "piece" spellings
    turned back into "word" / "##piece", lower-casing and accent stripping as llama.cpp's WPM does,
    and [CLS] ... [SEP] around each input."""
    model = f.value(Keys.Tokenizer.MODEL, "bert")
    if model != "bert":  # XLM-RoBERTa files (bge-reranker, multilingual-e5) carry a SentencePiece vocabulary
        raise GGUFFormatError(f"{f.path.name}: tokenizer model {model!r} is not supported (only WordPiece, 'bert')")
    tokens = list(f.value(Keys.Tokenizer.LIST))
    types = list(f.value(Keys.Tokenizer.TOKEN_TYPE, [TokenType.NORMAL] * len(tokens)))
    vocab: dict[str, int] = {}
    special = []
    for i, (token, kind) in enumerate(zip(tokens, types)):
        if kind == TokenType.CONTROL:
            piece = token
            special.append(token)
        elif token.startswith(_PHANTOM):
            piece = token[len(_PHANTOM):]
        else:
            piece = "##" + token
        vocab.setdefault(piece, i)

    def special_id(key: str, fallback: str) -> int:
        value = f.value(key, None)
        if value is None:
            if fallback not in vocab:
                raise GGUFFormatError(f"{f.path.name}: no {key} and no {fallback} token")
            return vocab[fallback]
        return int(value)

    cls_id = special_id(Keys.Tokenizer.BOS_ID, "[CLS]")
    sep_id = special_id(Keys.Tokenizer.SEP_ID, "[SEP]") if f.has(Keys.Tokenizer.SEP_ID) else \
        special_id(Keys.Tokenizer.EOS_ID, "[SEP]")
    unk = tokens[special_id(Keys.Tokenizer.UNK_ID, "[UNK]")]
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=None, lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_token, sep_token = tokens[cls_id], tokens[sep_id]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls_token} $A {sep_token}", pair=f"{cls_token} $A {sep_token} $B:1 {sep_token}:1",
        special_tokens=[(cls_token, cls_id), (sep_token, sep_id)])
    tokenizer.add_special_tokens(special)
    return tokenizer
