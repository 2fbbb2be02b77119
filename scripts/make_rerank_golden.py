r"""The rerank parity fixture: a tiny random-weight BERT cross-encoder, its GGUF by llama.cpp's own converter, and
sentence-transformers' CrossEncoder scores on it as golden data.

1. A small WordPiece vocabulary (specials, the words of the pairs below, a few "##" pieces) as a BertTokenizerFast
   (tokenizer.json, vocab.txt, configs);
2. transformers' BertForSequenceClassification (hidden 32, 2 layers, 4 heads, FFN 64, 2 token types,
   num_labels 1) with seeded weights: its own initialisation at initializer_range 0.2, LayerNorm weights 1 +- 0.2
   and all biases N(0, 0.1^2) (so no term of the network is trivially zero), saved as safetensors with its
   tokenizer: `tests/golden/rerank_tiny/`, a directory CrossEncoder loads as it is;
3. llama.cpp's convert_hf_to_gguf.py (from the llama-cpp-python 0.3.36 sdist, run as
   scripts/make_family_fixtures.py runs it) writes `tests/golden/rerank_tiny.f32.gguf`. The converter drops
   `bert.pooler.dense` ("only using BERT for embeddings") and keeps `classifier` as `cls.output`; it writes no
   pooling type (llama.cpp's server is told `--reranking`), so the file holds a head of its own;
4. `tests/golden/rerank_tiny.json`: the query, the documents, the HF tokenizer's pair ids and token types, and
   - `crossencoder_scores`: CrossEncoder(dir).predict(pairs), its default activation for one label (sigmoid),
   - `crossencoder_logits`: the same with no activation,
   - `gguf_logits`: what the GGUF's network computes, in torch on the same checkpoint: the classifier on the last
     layer's [CLS] row without the pooler (llama.cpp's RANK pooling on this file), token types as the tokenizer
     gives them;
5. the same for a tiny XLMRobertaForSequenceClassification (bge-reranker's architecture; a Unigram tokenizer
   trained on the pairs, XLM-R's `<s> A </s></s> B </s>` template, positions from padding_idx + 1):
   `tests/golden/rerank_tiny_xlmr/` and `rerank_tiny_xlmr.json` (no GGUF: its SentencePiece vocabulary is not read).

    /work/main/.venv/bin/python scripts/make_rerank_golden.py \
        --llama-cpp /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp

Needs torch, transformers and sentence-transformers (dev tools, not runtime dependencies).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
DEFAULT_LLAMA_CPP = Path("/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp")
SEED = 0

QUERY = "how many people live in berlin?"
DOCUMENTS = [
    "berlin has a population of about three million people.",
    "the cat sat on the mat.",
    "paris is the capital of france.",
    "berlin is a city in germany with many museums and parks.",
    "people in berlin like to ride bikes.",
    "unrelated words: rocket, volcano, piano.",
    "Berlin's population grew quickly after unification; its boroughs are large.",
]
EXTRA_WORDS = ("the a of in is and to with like many how people live has about city".split()
               + "##s ##ed ##ing ##ly ##er ##'s".split())


def _vocab() -> list[str]:
    from tokenizers import normalizers, pre_tokenizers

    norm, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    words: list[str] = []
    for text in [QUERY, *DOCUMENTS]:
        words += [w for w, _ in pre.pre_tokenize_str(norm.normalize_str(text))]
    # "berlin's", "unification" and "boroughs" stay partly unknown or split into pieces: both paths are exercised.
    words = [w for w in words if w not in ("unification", "boroughs")]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return specials + sorted(set(words) | set(EXTRA_WORDS) - set(specials))


def build(out: Path) -> None:
    """Write the tokenizer and the seeded BertForSequenceClassification to out (a transformers directory)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(_vocab())}
    wordpiece = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    wordpiece.decoder = decoders.WordPiece()
    tokenizer = BertTokenizerFast(tokenizer_object=wordpiece, do_lower_case=True, model_max_length=128,
                                  unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                                  mask_token="[MASK]")
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, type_vocab_size=2, num_labels=1,
                        initializer_range=0.2, architectures=["BertForSequenceClassification"],
                        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(SEED)
    model = BertForSequenceClassification(config).eval()
    _perturb(model)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def build_xlmr(out: Path) -> None:
    """Write a tiny XLMRobertaForSequenceClassification (bge-reranker's architecture) with a Unigram tokenizer
    trained on the pairs, XLM-R's `<s> A </s></s> B </s>` pair template, to out."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification, XLMRobertaTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    unigram = Tokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    unigram.decoder = decoders.Metaspace()
    unigram.train_from_iterator([QUERY, *DOCUMENTS] * 4, trainers.UnigramTrainer(
        vocab_size=150, special_tokens=specials, unk_token="<unk>"))
    ids = {t: unigram.token_to_id(t) for t in specials}
    unigram.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[(t, ids[t]) for t in ("<s>", "</s>")])
    tokenizer = XLMRobertaTokenizerFast(tokenizer_object=unigram, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                        cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                        model_max_length=128)
    config = XLMRobertaConfig(vocab_size=unigram.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=64, max_position_embeddings=130,
                              type_vocab_size=1, num_labels=1, initializer_range=0.2, pad_token_id=ids["<pad>"],
                              bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                              architectures=["XLMRobertaForSequenceClassification"])
    torch.manual_seed(SEED + 1)
    model = XLMRobertaForSequenceClassification(config).eval()
    _perturb(model)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _perturb(model: object) -> None:
    """LayerNorm weights 1 +- 0.2 and biases N(0, 0.1^2), so no term of the network is trivially zero."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():  # type: ignore[attr-defined]
            if name.endswith("LayerNorm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))


def golden(hf_dir: Path, gguf_reference: bool = True) -> dict:
    """CrossEncoder's scores and logits, the tokenizer's pairs, and (BERT) the GGUF's head in torch."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    pairs = [(QUERY, d) for d in DOCUMENTS]
    encoder = CrossEncoder(str(hf_dir), device="cpu")
    scores = encoder.predict(pairs, convert_to_numpy=True)
    logits = encoder.predict(pairs, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
    ids, types, gguf_logits = [], [], []
    for query, doc in pairs:
        enc = tokenizer(query, doc, return_tensors="pt", return_token_type_ids=True)
        ids.append(enc["input_ids"][0].tolist())
        types.append(enc["token_type_ids"][0].tolist())
        if gguf_reference:
            with torch.no_grad():
                cls_row = model.bert(**enc).last_hidden_state[0, 0]
                gguf_logits.append(float(model.classifier(cls_row)[0]))
    data = {"query": QUERY, "documents": DOCUMENTS, "ids": ids, "token_types": types,
            "crossencoder_scores": np.asarray(scores, np.float64).tolist(),
            "crossencoder_logits": np.asarray(logits, np.float64).tolist(),
            "crossencoder": "sentence-transformers CrossEncoder.predict, default activation (sigmoid for one label)"}
    if gguf_reference:
        data["gguf_logits"] = gguf_logits
    return data


def _family_fixtures():
    path = ROOT / "scripts" / "make_family_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_family_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=GOLDEN)
    parser.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP, help="llama.cpp source tree")
    args = parser.parse_args()
    hf_dir = args.out / "rerank_tiny"
    if hf_dir.exists():
        shutil.rmtree(hf_dir)
    build(hf_dir)
    gguf = args.out / "rerank_tiny.f32.gguf"
    log = Path(tempfile.gettempdir()) / "rerank_tiny_convert.log"
    # The tiny vocabulary's hash is unknown to the converter: name llama.cpp's BERT WordPiece pre-tokenizer.
    _family_fixtures().convert(args.llama_cpp, hf_dir, gguf, "f32", "bert-bge", log)
    data = golden(hf_dir)
    data["converter"] = "llama.cpp convert_hf_to_gguf.py from llama-cpp-python 0.3.36, --outtype f32"
    (args.out / "rerank_tiny.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: data[k] for k in ("crossencoder_scores", "crossencoder_logits", "gguf_logits")}, indent=1))
    xlmr_dir = args.out / "rerank_tiny_xlmr"
    if xlmr_dir.exists():
        shutil.rmtree(xlmr_dir)
    build_xlmr(xlmr_dir)
    data = golden(xlmr_dir, gguf_reference=False)
    (args.out / "rerank_tiny_xlmr.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: data[k] for k in ("crossencoder_scores", "ids")}))


if __name__ == "__main__":
    main()
