"""Qwen3-Embedding on the executor: the Qwen 3 decoder run as an encoder over packed sequences (causal attention
within each sequence), its last token's final hidden state as the embedding, L2-normalised. From a GGUF file
as llama.cpp's converter writes it (architecture "qwen3" with a pooling_type: the sentence-transformers
directory's last-token pooling).

One step over a packed batch of T tokens (gpu/ops/encoder.py):

    x = embed[ids]                                               # lookup on the host; x: [T, D]
    for each layer:
        h = rms_norm(x) * attn_norm
        q, k = rms_norm(h Wq) * q_norm, rms_norm(h Wk) * k_norm  # per head, then RoPE at each token's position
        x += attention(q, k, h Wv) Wo                            # causal: keys up to the token's own row
        x += (silu(rms_norm(x) * ffn_norm Wgate) * (... Wup)) Wdown
    e = normalize((rms_norm(x) * output_norm)[last token])

The tokenizer appends <|endoftext|> where the file says so (add_eos_token), as the reference tokenizer does:
that token's state is the embedding. Queries are meant to carry an instruction, `Instruct: {task}\\nQuery:{query}`,
which the client writes into the input (documents go as they are). Trained with Matryoshka truncation, so
/v1/embeddings' `dimensions` may shorten its vectors.
"""

from __future__ import annotations

import numpy as np
from gguf import MODEL_TENSOR, Keys, PoolingType

from gpu.ops import encoder as ops
from gpu.ops import transformer
from gpu.ops.matmul import linear
from gpu.program import Executor, ProgramBuilder
from models.embeddings.engine import EncoderInputs, EncoderLayer, Head, record_head, record_self_attention
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import GGUFSource, Progress, Uploader, dequantize_rows
from models.gemma.embedding_gemma import GGUFTextEncoder, rope_table
from models.text.decoder import DecoderConfig, standard_config, tensor_name
from models.text.tokenizer import Tokenizer

T = MODEL_TENSOR
_NORMS = {"attn_norm": T.ATTN_NORM, "q_norm": T.ATTN_Q_NORM, "k_norm": T.ATTN_K_NORM, "ffn_norm": T.FFN_NORM}
_MATRICES = {"q": T.ATTN_Q, "k": T.ATTN_K, "v": T.ATTN_V, "o": T.ATTN_OUT, "gate": T.FFN_GATE, "up": T.FFN_UP,
             "down": T.FFN_DOWN}


class Qwen3Embedding:
    """Qwen3-Embedding's weights (token table on the host, layers on the GPU) and its step program."""

    matryoshka = True
    causal = True

    def __init__(self, executor: Executor, f: GGUFFile, config: DecoderConfig, progress: Progress | None) -> None:
        self.config = c = config
        self.d_model = self.d_out = c.d_model
        self.vocab_size = c.vocab_size
        self.max_tokens = c.n_ctx_train
        source = GGUFSource(f)
        up = Uploader(executor, source.total_bytes, progress)
        self._embed_type, _, raw = f.raw(tensor_name(T.TOKEN_EMBD))  # rows stay in their block format, mapped
        self._embed_rows = raw.reshape(c.vocab_size, -1)
        up.host(self._embed_rows.nbytes)
        self.layers = [
            EncoderLayer({key: up.vector(tensor_name(kind, i), source.array(tensor_name(kind, i)))
                        for key, kind in _NORMS.items()},
                       {key: up.matrix(tensor_name(kind, i), source.matrix(tensor_name(kind, i)))
                        for key, kind in _MATRICES.items()})
            for i in range(c.n_layers)]
        self.output_norm = up.vector("output_norm", source.array(tensor_name(T.OUTPUT_NORM)))
        self.head = Head("last", (), True)
        head_dim = c.head_dims[0]
        self.rope = executor.tensor("rope", (self.max_tokens, head_dim),
                                    data=rope_table(head_dim, self.max_tokens, c.rope_base_full))
        self.weight_bytes = up.uploaded_bytes

    def input_rows(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return dequantize_rows(self._embed_rows[ids], self._embed_type)

    def record(self, b: ProgramBuilder, inputs: EncoderInputs) -> None:
        c, t = self.config, inputs.t_max
        d, d_ffn = c.d_model, c.d_ffn[0]
        x = inputs.x
        for i, w in enumerate(self.layers):
            h = b.activation(f"h{i}", (t, d))
            ops.layer_norm(b, x, w.norms["attn_norm"], h, c.eps, rms=True)
            o = record_self_attention(b, i, w, h, inputs, heads=c.n_heads, kv_heads=c.kv_heads[i],
                                      head_dim=c.head_dims[i], eps=c.eps, scale=c.query_scale, rope=self.rope)
            x_mid = b.activation(f"x_mid{i}", (t, d))
            transformer.add(b, x, o, x_mid)
            h2 = b.activation(f"h2_{i}", (t, d))
            ops.layer_norm(b, x_mid, w.norms["ffn_norm"], h2, c.eps, rms=True)
            gate, up = b.activation(f"gate{i}", (t, d_ffn)), b.activation(f"up{i}", (t, d_ffn))
            linear(b, w.mats["gate"], h2, gate, t)
            linear(b, w.mats["up"], h2, up, t)
            act = b.activation(f"act{i}", (t, d_ffn))
            transformer.glu_mul(b, gate, up, act, "silu")
            down = b.activation(f"down{i}", (t, d))
            linear(b, w.mats["down"], act, down, t)
            x = b.activation(f"x{i + 1}", (t, d))
            transformer.add(b, x_mid, down, x)
        out = b.activation("final", (t, d))
        ops.layer_norm(b, x, self.output_norm, out, c.eps, rms=True)
        record_head(b, out, inputs, self.head)


def from_gguf(f: GGUFFile, executor: Executor, progress: Progress | None) -> tuple[Qwen3Embedding, GGUFTextEncoder]:
    """A GGUF `qwen3` file converted from a sentence-transformers Qwen3-Embedding directory (last-token pooling)."""
    pooling = int(f.value(Keys.LLM.POOLING_TYPE, PoolingType.NONE))
    if pooling != PoolingType.LAST:
        raise GGUFFormatError(f"{f.path.name}: a qwen3 file without last-token pooling is a chat model, not an "
                              f"embedding model (pooling_type {PoolingType(pooling).name})")
    config = standard_config(f)
    if any(dim != config.head_dims[0] for dim in config.head_dims) or len(set(config.kv_heads)) > 1:
        raise GGUFFormatError(f"{f.path.name}: layers of different shapes")
    return Qwen3Embedding(executor, f, config, progress), GGUFTextEncoder(Tokenizer.from_gguf(f.reader))
