"""The sequence-classification head of a BERT cross-encoder (a reranker): the [CLS] row of the last layer,
through the pooler (dense + tanh) where the checkpoint has one, then the classifier (dense) to one logit per label.

    logits = W_c tanh(W_p h[CLS] + b_p) + b_c        # BertForSequenceClassification; h[CLS]: [D]

XLM-RoBERTa's head (classifier.dense, tanh, classifier.out_proj on the <s> row) is the same computation.

It runs on the host in float32: it reads one row per sequence, so the GPU pass ends at the pooled [CLS] rows
(models/embeddings/engine.py's `cls` pooling) and the head is two small matrix products here.

Weights come from a transformers directory (`bert.pooler.dense`, `classifier`) or from a GGUF with pooling type
RANK (llama.cpp's `cls` = the pooler, `cls.output` = the classifier). llama.cpp's converter drops
`bert.pooler.dense` from BertForSequenceClassification checkpoints, so such a file holds only `cls.output`: its
scores are the classifier on the raw [CLS] row, as llama.cpp computes them, not the checkpoint's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES

from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.safetensors_dir import ModelDir, ModelDirError
from models.formats.weights import GGUFSource


@dataclass(frozen=True)
class SequenceClassifier:
    """pooler: (W [D, D], b [D]) or None; out: (W [labels, D], b [labels]); all float32 on the host."""

    pooler: tuple[np.ndarray, np.ndarray] | None
    out: tuple[np.ndarray, np.ndarray]

    @property
    def labels(self) -> int:
        return self.out[0].shape[0]

    def __call__(self, cls_rows: np.ndarray) -> np.ndarray:
        """float32 [N, labels] logits from the last layer's [CLS] rows (float32 [N, D])."""
        x = np.asarray(cls_rows, np.float32)
        if self.pooler is not None:
            x = np.tanh(x @ self.pooler[0].T + self.pooler[1])
        return (x @ self.out[0].T + self.out[1]).astype(np.float32)


def is_sequence_classifier(d: ModelDir) -> bool:
    """Whether a transformers directory's config names a ...ForSequenceClassification architecture."""
    return any(str(a).endswith("ForSequenceClassification") for a in d.config.get("architectures") or ())


def classifier_from_dir(d: ModelDir, prefix: str) -> SequenceClassifier:
    """The head of a ...ForSequenceClassification checkpoint: BERT's pooler (under the model's prefix) and
    `classifier`, or RoBERTa's `classifier.dense` and `classifier.out_proj` (the same computation)."""
    d_model = int(d.config["hidden_size"])

    def linear(name: str) -> tuple[np.ndarray, np.ndarray]:
        weight = d.tensor(f"{name}.weight").reshape(-1, d_model)
        bias = d.tensor(f"{name}.bias").reshape(-1) if d.has(f"{name}.bias") else np.zeros(len(weight), np.float32)
        return weight, bias

    if d.has("classifier.out_proj.weight"):
        return SequenceClassifier(linear("classifier.dense"), linear("classifier.out_proj"))
    if not d.has("classifier.weight"):
        raise ModelDirError(f"{d.path.name}: a sequence classifier without classifier.weight")
    pooler = linear(f"{prefix}pooler.dense") if d.has(f"{prefix}pooler.dense.weight") else None
    return SequenceClassifier(pooler, linear("classifier"))


def classifier_from_gguf(f: GGUFFile, d_model: int) -> SequenceClassifier:
    """The head of a GGUF with pooling type RANK: `cls` (pooler, then tanh) if present, `cls.output` required."""
    source = GGUFSource(f)
    cls_name, out_name = TENSOR_NAMES[MODEL_TENSOR.CLS], TENSOR_NAMES[MODEL_TENSOR.CLS_OUT]
    if not source.has(f"{out_name}.weight"):
        raise GGUFFormatError(f"{f.path.name}: pooling type RANK without {out_name}.weight (a classifier-less "
                              "reranker is not supported)")

    def linear(name: str) -> tuple[np.ndarray, np.ndarray]:
        # A one-label classifier is stored with one dimension ([D]); it is still a [1, D] matrix.
        weight = source.array(f"{name}.weight").reshape(-1, d_model)
        bias = source.array(f"{name}.bias").reshape(-1) if source.has(f"{name}.bias") else \
            np.zeros(weight.shape[0], np.float32)
        return np.ascontiguousarray(weight, np.float32), np.ascontiguousarray(bias, np.float32)

    pooler = linear(cls_name) if source.has(f"{cls_name}.weight") else None
    if pooler is not None and pooler[0].shape[0] != d_model:
        raise GGUFFormatError(f"{f.path.name}: {cls_name}.weight is not [{d_model}, {d_model}]")
    return SequenceClassifier(pooler, linear(out_name))
