"""Text <-> token ids for GGUF models, rebuilt from the file's metadata to give llama.cpp's ids.

A `tokenizers` (Hugging Face, Rust) pipeline is assembled from `tokenizer.ggml.*`:

- "llama" (SentencePiece vocabulary with scores). llama.cpp's SPM tokenizer splits a text fragment into
  UTF-8 characters and repeatedly merges the adjacent pair whose concatenation is a vocabulary piece of
  the highest score (ties: leftmost), falling back to `<0xXX>` byte pieces for characters not in the
  vocabulary. That is BPE whose merge list holds every split of every piece into two pieces, ranked by
  the piece's score; scores of normal pieces are distinct, so the ranking is the same.
- "gpt2": byte-level BPE with the file's merges, split first by the regex llama.cpp uses for the
  file's `tokenizer.ggml.pre`.
- "gemma4": BPE with the file's merges over raw UTF-8 with spaces as "▁", split at newline runs,
  `<0xXX>` byte fallback (llama.cpp's LLAMA_VOCAB_PRE_TYPE_GEMMA4).

In every case control, user-defined and unknown pieces are cut out of the raw text before the model
runs, as llama.cpp's `tokenizer_st_partition` does with parse_special=True. llama.cpp's quirks that change
ids are kept: pieces it makes control pieces by their text ("<end_of_turn>", "<eos>", FIM markers, ...),
pieces cut at a NUL byte. Decoding follows llama.cpp's `token_to_piece`: "▁" becomes a space, byte pieces
their byte, control and unused pieces nothing unless asked for; the stream decoder never splits a UTF-8 character.

Checked against llama-cpp-python (tests/models/test_tokenizer.py): the shipped Gemma 3 vocabulary, and
small trained vocabularies of each kind ("llama" with a leading space, "gpt2" under the pre-tokenizers
below, "gemma4"); and against llama.cpp's own vocabulary files of the model families with the ids its tests
expect (tests/models/test_tokenizer_llama_cpp.py).
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from gguf import GGUFReader, GGUFValueType, Keys, TokenType
from tokenizers import AddedToken, Regex, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from models.formats.gguf_file import MetadataReader

SPACE = "\u2581"  # "▁": SentencePiece's visible space

# Pieces that end generation by their text whatever the file says: llama.cpp's end-of-generation list
# (llama_vocab::impl::load) but for Gemma 4's "<|tool_response>", which its tool-call parser stops at itself
# (models/text/tool_calls), and "</s>" where it is text: Gemma 3's HTML tag (user-defined, as is its "<s>") and
# Gemma 4's (normal). Llama 2's, Mistral's, Phi-3's (user-defined beside a control "<s>") and Qwen's (which llama.cpp
# makes a control piece by its text) end generation, as in llama.cpp.
END_OF_TURN_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                     "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                     "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
                     "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[", "</s>")
# Fill-in-the-middle pieces llama.cpp also ends generation at (padding, repository name, file separator).
FIM_END_TEXTS = ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
                 "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>")

# Split regexes llama.cpp applies before byte-level BPE, by `tokenizer.ggml.pre` (llm_tokenizer_bpe in
# src/llama-vocab.cpp, copied as written there). Each regex re-splits the pieces the previous one produced, keeping
# matches and the text between them. llama.cpp runs the regexes it has no hand-written splitter for on a copy of the
# text where each non-ASCII character stands for its Unicode category; Oniguruma on the real text gives the same
# split, e.g. tekken's and gpt-4o's `(?=[\p{L}])([^a-z])` ("a letter that is not a-z") takes any non-ASCII letter,
# upper or lower case, in both places.
_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                 r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN_REGEX = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
                 r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
                 r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CONTRACTION = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
_GPT4O_REGEX = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _CONTRACTION
                + r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _CONTRACTION
                + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class _BPEPre:
    """How llama.cpp pre-tokenizes for one `tokenizer.ggml.pre` kind."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a word that is a whole piece is taken as it is, not merged from characters
    add_bos: bool = False  # llama.cpp's add_bos where the file has no tokenizer.ggml.add_bos_token


# Pre names by kind. Each kind is checked against llama.cpp's ids (tests/models/test_tokenizer_llama_cpp.py); the
# other names in a group are those llama.cpp gives the same regexes and flags.
_BPE_PRE_KINDS: tuple[tuple[tuple[str, ...], _BPEPre], ...] = (
    (("default",), _BPEPre((r"[\p{P}\$\+<=>\^~\|]+", _GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]"))),
    (("gpt-2", "phi-2", "mpt", "olmo", "exaone4"), _BPEPre((_GPT2_REGEX,))),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "lfm2"),
     _BPEPre((_LLAMA3_REGEX,), ignore_merges=True, add_bos=True)),
    (("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"), _BPEPre((_QWEN2_REGEX,))),
    (("qwen35",), _BPEPre((_QWEN35_REGEX,))),
    # SmolLM and SmolLM2 ("smollm") split digits first; so do StarCoder, Refact and Command R.
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
     _BPEPre((r"\p{N}", _GPT2_REGEX))),
    (("falcon",), _BPEPre((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2_REGEX, r"[0-9][0-9][0-9]"))),
    # Mistral Nemo and Pixtral's Tekken.
    (("tekken",), _BPEPre((_TEKKEN_REGEX,), ignore_merges=True, add_bos=True)),
    # o200k: Phi-4-mini, Llama 4.
    (("gpt-4o", "llama4"), _BPEPre((_GPT4O_REGEX,))),
)
_BPE_PRE: dict[str, _BPEPre] = {name: kind for names, kind in _BPE_PRE_KINDS for name in names}

# Pieces llama.cpp makes control pieces by their text alone (end-of-turn, end-of-generation and
# fill-in-the-middle markers in llama_vocab::impl::load), so that they are cut out of text and hidden.
_CONTROL_BY_TEXT = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "[EOT]", "[EOS]", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>", "<|eom_id|>", "<|return|>",
    "<|call|>", "<|flush|>", "<|calls|>", "</s>", "<eos>", "<turn|>", "<|tool_response>", "[e~[",
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>", "<PRE>", "\u2581<PRE>",
    "<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\uff5cfim\u2581hole\uff5c>", "<SUF>", "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>", "<|fim_middle|>",
    "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>", "<MID>", "\u2581<MID>", "<|code_middle|>",
    "<|middle|>", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
    "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
})
# Reserved pieces of Gemma vocabularies; llama.cpp's converter types them as control pieces by this text.
_UNUSED_PIECE = re.compile(r"<unused[0-9]+>")
# gpt-oss pieces llama.cpp always renders as text.
_USER_DEFINED_BY_TEXT = frozenset({"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})

# llama.cpp's default special ids where the file names none (llama_vocab::impl::load).
_DEFAULT_BOS = {"llama": 1, "gpt2": 11}
_DEFAULT_EOS = {"llama": 2, "gpt2": 11}


class TokenizerError(ValueError):
    """The GGUF file's tokenizer metadata is missing, malformed, or of a kind Hearth does not support."""


@dataclass(frozen=True)
class GGUFVocab:
    """The `tokenizer.ggml.*` metadata of a GGUF file, as llama.cpp reads it."""

    model: str  # tokenizer.ggml.model: "llama", "gpt2", "gemma4"
    pre: str  # tokenizer.ggml.pre, "default" when absent
    tokens: list[str]  # piece text per id
    scores: np.ndarray  # [V] float32 (zeros when the file has none)
    types: np.ndarray  # [V] int32 gguf TokenType per id
    merges: list[str] | None  # "left right" per rank (BPE models)
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    eom_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    chat_template: str | None
    fim_end_ids: tuple[int, ...] = ()  # tokenizer.ggml.fim_{pad,rep,sep}_token_id the file names


def _field(reader: GGUFReader, key: str):
    return reader.fields.get(key)


def _scalar(reader: GGUFReader, key: str, default):
    field = _field(reader, key)
    return default if field is None else field.contents()


def _string_array(reader: GGUFReader, key: str) -> list[str] | None:
    field = _field(reader, key)
    if field is None:
        return None
    if field.types != [GGUFValueType.ARRAY, GGUFValueType.STRING]:
        raise TokenizerError(f"{key} is {field.types}, expected an array of strings")
    try:
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    except UnicodeDecodeError as error:
        raise TokenizerError(f"{key} holds a string that is not UTF-8: {error}") from error


def _number_array(reader: GGUFReader, key: str, dtype: type) -> np.ndarray | None:
    field = _field(reader, key)
    if field is None:
        return None
    if len(field.types) != 2 or field.types[0] != GGUFValueType.ARRAY:
        raise TokenizerError(f"{key} is {field.types}, expected an array of numbers")
    # Each element is its own one-value part (a view into the memory map); join them in one copy.
    return np.concatenate([field.parts[i] for i in field.data]).astype(dtype) if field.data else np.zeros(0, dtype)


def read_gguf_vocab(reader: GGUFReader) -> GGUFVocab:
    """Read and check the tokenizer metadata of an open GGUF file."""
    model = _scalar(reader, Keys.Tokenizer.MODEL, None)
    if model is None:
        raise TokenizerError(f"{Keys.Tokenizer.MODEL} is missing: the file has no tokenizer")
    tokens = _string_array(reader, Keys.Tokenizer.LIST)
    if not tokens:
        raise TokenizerError(f"{Keys.Tokenizer.LIST} is missing or empty")
    n = len(tokens)
    # llama.cpp reads pieces as C strings (cut at a NUL) and renames empty ones to keep every text distinct.
    tokens = [t.partition("\x00")[0] or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    scores = _number_array(reader, Keys.Tokenizer.SCORES, np.float32)
    types = _number_array(reader, Keys.Tokenizer.TOKEN_TYPE, np.int32)
    for key, array in ((Keys.Tokenizer.SCORES, scores), (Keys.Tokenizer.TOKEN_TYPE, types)):
        if array is not None and len(array) < n:
            raise TokenizerError(f"{key} has {len(array)} entries for {n} pieces")
    is_spm = model == "llama"
    pre = "gemma4" if model == "gemma4" else _scalar(reader, Keys.Tokenizer.PRE, "default")
    # llama.cpp adds BOS by default for SentencePiece and a few BPE kinds (Llama 3, Tekken); the file may say otherwise.
    bos_by_default = is_spm or (model == "gpt2" and pre in _BPE_PRE and _BPE_PRE[pre].add_bos)
    return GGUFVocab(
        model=model,
        pre=pre,
        tokens=tokens,
        scores=np.zeros(n, np.float32) if scores is None else scores[:n],
        types=_llama_cpp_types(tokens, np.full(n, TokenType.NORMAL, np.int32) if types is None else types[:n]),
        merges=_string_array(reader, Keys.Tokenizer.MERGES),
        bos_id=_scalar(reader, Keys.Tokenizer.BOS_ID, _DEFAULT_BOS.get(model)),
        eos_id=_scalar(reader, Keys.Tokenizer.EOS_ID, _DEFAULT_EOS.get(model)),
        eot_id=_scalar(reader, Keys.Tokenizer.EOT_ID, None),
        eom_id=_scalar(reader, Keys.Tokenizer.EOM_ID, None),
        # llama.cpp forces BOS on for Gemma 4 whatever the file says (llama.cpp PR 21500).
        add_bos=model == "gemma4" or bool(_scalar(reader, Keys.Tokenizer.ADD_BOS, bos_by_default)),
        add_eos=bool(_scalar(reader, Keys.Tokenizer.ADD_EOS, False)),
        # Only SentencePiece vocabularies get the leading space; llama.cpp turns it off for BPE.
        add_space_prefix=is_spm and bool(_scalar(reader, Keys.Tokenizer.ADD_PREFIX, True)),
        chat_template=_scalar(reader, Keys.Tokenizer.CHAT_TEMPLATE, None),
        fim_end_ids=tuple(int(i) for key in (Keys.Tokenizer.FIM_PAD_ID, Keys.Tokenizer.FIM_REP_ID,
                                             Keys.Tokenizer.FIM_SEP_ID)
                          if (i := _scalar(reader, key, None)) is not None),
    )


def _llama_cpp_types(tokens: list[str], types: np.ndarray) -> np.ndarray:
    """Token types after the overrides llama.cpp applies by piece text (they decide what is cut out of text).

    One deliberate difference: a user-defined piece on llama.cpp's control list stays user-defined. Both
    kinds are cut out of text alike, so ids do not change; only decoding does, where llama.cpp hides e.g.
    Gemma 3's "</s>" (an HTML tag there) and Hearth keeps the text.
    """
    types = types.copy()
    where = {t: i for i, t in enumerate(tokens) if t in _CONTROL_BY_TEXT or t in _USER_DEFINED_BY_TEXT}
    for text, i in where.items():
        if text in _USER_DEFINED_BY_TEXT:
            types[i] = TokenType.USER_DEFINED
        elif types[i] != TokenType.USER_DEFINED:
            types[i] = TokenType.CONTROL
    if "<|end|>" in where and _end_is_text(where.keys()):
        types[where["<|end|>"]] = TokenType.USER_DEFINED
    # Gemma 4: "</s>" is plain text when the vocabulary has "<|tool_response>".
    if "</s>" in where and "<|tool_response>" in where:
        types[where["</s>"]] = TokenType.NORMAL
    return types


def _end_is_text(pieces: Iterable[str]) -> bool:
    """gpt-oss and Solar Open: "<|end|>" ends a message but not generation when these pieces are present."""
    present = set(pieces)
    return {"<|return|>", "<|call|>"} <= present or {"<|calls|>", "<|flush|>"} <= present


def _spm_merges(tokens: list[str], scores: np.ndarray) -> list[tuple[str, str]]:
    """Every split of every piece into two pieces, best piece score first (llama.cpp's merge order)."""
    index = {t: i for i, t in enumerate(tokens)}
    # One comprehension: this loop over ~1.5 M split points is most of the load time.
    found = [(i, text[:k], text[k:]) for i, text in enumerate(tokens) for k in range(1, len(text))
             if text[:k] in index and text[k:] in index]
    owner = np.fromiter((f[0] for f in found), np.int64, len(found))
    # Highest score first; equal scores (only special pieces share one) by id, then split point.
    order = np.lexsort((np.arange(len(owner)), owner, -scores[owner].astype(np.float64)))
    return [found[j][1:] for j in order.tolist()]


def _file_merges(merges: list[str] | None) -> list[tuple[str, str]]:
    if merges is None:
        raise TokenizerError(f"{Keys.Tokenizer.MERGES} is missing; BPE vocabularies need it")
    pairs = []
    for line in merges:
        cut = line.find(" ", 1)  # as llama.cpp: the left part may itself start with a space
        if cut < 0:
            raise TokenizerError(f"malformed merge {line!r} in {Keys.Tokenizer.MERGES}")
        pairs.append((line[:cut], line[cut + 1:]))
    return pairs


def _byte_level_table() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte, reversed (character -> byte)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _build_hf(vocab: GGUFVocab) -> HFTokenizer:
    """The `tokenizers` pipeline that reproduces llama.cpp's tokenization of `vocab`."""
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    if len(ids) != len(vocab.tokens):
        raise TokenizerError("the vocabulary has duplicate pieces")
    if vocab.model == "llama":
        model = models.BPE(ids, _spm_merges(vocab.tokens, vocab.scores), byte_fallback=True)
        steps = [normalizers.Replace(" ", SPACE)]
        if vocab.add_space_prefix:
            # Applied to each text fragment between special pieces, as llama.cpp prefixes each one.
            steps.append(normalizers.Prepend(SPACE))
        tokenizer = HFTokenizer(model)
        tokenizer.normalizer = normalizers.Sequence(steps)
    elif vocab.model == "gemma4":
        tokenizer = HFTokenizer(models.BPE(ids, _file_merges(vocab.merges), byte_fallback=True))
        tokenizer.normalizer = normalizers.Replace(" ", SPACE)
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated")
    elif vocab.model == "gpt2":
        if vocab.pre not in _BPE_PRE:
            raise TokenizerError(f"BPE pre-tokenizer {vocab.pre!r} is not supported (known: {sorted(_BPE_PRE)})")
        pre = _BPE_PRE[vocab.pre]
        model = models.BPE(ids, _file_merges(vocab.merges), ignore_merges=pre.ignore_merges)
        tokenizer = HFTokenizer(model)
        splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre.regexes]
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        raise TokenizerError(f"tokenizer model {vocab.model!r} is not supported (llama, gpt2, gemma4)")

    cut_out = (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)
    specials = [vocab.tokens[i] for i in np.flatnonzero(np.isin(vocab.types, cut_out)).tolist()]
    if vocab.model == "gemma4":
        # llama.cpp takes a newline-only word whole when it is a piece (llama.cpp PR 21343).
        specials += [t for t in vocab.tokens if t.strip("\n") == "" and t not in specials]
    # Matched on the raw text before normalisation, longest first, like llama.cpp's partition.
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tokenizer


def _piece_bytes(vocab: GGUFVocab) -> tuple[list[bytes], list[bytes]]:
    """Bytes of each piece as llama.cpp's token_to_piece gives them: (special=True, special=False).

    Reserved "<unusedN>" pieces print as nothing unless specials are asked for, whatever type the file gives
    them: llama.cpp's converter makes them control pieces, but files from other converters may type them normal
    or user-defined, which would put "<unused3936>" in generated text.
    """
    byte_level = _byte_level_table() if vocab.model == "gpt2" else None
    shown: list[bytes] = []
    plain: list[bytes] = []
    for text, kind in zip(vocab.tokens, vocab.types.tolist()):
        if kind in (TokenType.NORMAL, TokenType.USER_DEFINED) and _UNUSED_PIECE.fullmatch(text):
            shown.append(text.encode())
            plain.append(b"")
            continue
        if kind == TokenType.NORMAL:
            if byte_level is None:
                piece = text.replace(SPACE, " ").encode()
            else:
                piece = bytes(byte_level[c] for c in text) if all(c in byte_level for c in text) else text.encode()
        elif kind == TokenType.BYTE:
            piece = bytes([int(text[3:5], 16)])  # "<0xAB>"
        elif kind in (TokenType.CONTROL, TokenType.UNKNOWN):
            shown.append(text.encode())
            plain.append(b"")
            continue
        elif kind == TokenType.USER_DEFINED:
            piece = text.encode()
        else:  # unused and undefined pieces print as nothing in llama.cpp
            piece = b""
        shown.append(piece)
        plain.append(piece)
    return shown, plain


def _end_ids(vocab: GGUFVocab) -> frozenset[int]:
    """The ids that end generation, as llama.cpp's end-of-generation set (special_eog_ids): the file's eos, eot and
    eom ids, the pieces of END_OF_TURN_TEXTS, and the fill-in-the-middle padding, repository and file-separator
    pieces (the file's ids, else found by text; llama.cpp takes one of each kind where several texts match, Hearth
    all of them)."""
    ends = {vocab.eos_id, vocab.eot_id, vocab.eom_id, *vocab.fim_end_ids}
    by_text = {t: i for i, t in enumerate(vocab.tokens) if t in END_OF_TURN_TEXTS or t in FIM_END_TEXTS}
    if "<|end|>" in by_text and _end_is_text(by_text):
        del by_text["<|end|>"]
    if "</s>" in by_text and _closing_s_is_text(vocab):
        del by_text["</s>"]
    ends.update(by_text.values())
    return frozenset(int(i) for i in ends if i is not None and 0 <= i < len(vocab.tokens))


def _closing_s_is_text(vocab: GGUFVocab) -> bool:
    """Whether the vocabulary's "</s>" is text (an HTML tag) rather than SentencePiece's end of sequence."""
    index = vocab.tokens.index
    kind = vocab.types[index("</s>")]
    if kind == TokenType.NORMAL:
        return True
    opening = vocab.types[index("<s>")] if "<s>" in vocab.tokens else TokenType.CONTROL
    return kind == TokenType.USER_DEFINED and opening in (TokenType.NORMAL, TokenType.USER_DEFINED)


class StreamDecoder:
    """Turns token ids into text one at a time, holding back bytes of an unfinished UTF-8 character."""

    def __init__(self, pieces: list[bytes], shown: Mapping[int, bytes] | None = None) -> None:
        self._pieces = pieces
        self._shown = shown or {}
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (possibly empty)."""
        piece = self._shown.get(token_id)
        return self._utf8.decode(self._pieces[token_id] if piece is None else piece)

    def flush(self) -> str:
        """End of stream: return what is held back (an unfinished character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)


class Tokenizer:
    """A GGUF model's tokenizer: encode with llama.cpp's ids, decode, stream-decode."""

    def __init__(self, vocab: GGUFVocab) -> None:
        self._vocab = vocab
        self._hf = _build_hf(vocab)
        self._shown, self._plain = _piece_bytes(vocab)
        self.vocab_size: int = len(vocab.tokens)
        self.chat_template: str | None = vocab.chat_template
        if vocab.bos_id is None and vocab.add_bos:
            raise TokenizerError(f"{Keys.Tokenizer.ADD_BOS} is set but {Keys.Tokenizer.BOS_ID} is missing")
        self.bos_id: int = -1 if vocab.bos_id is None else int(vocab.bos_id)
        self.eos_id: int = -1 if vocab.eos_id is None else int(vocab.eos_id)
        self.eos_ids: frozenset[int] = _end_ids(vocab)

    @classmethod
    def from_gguf(cls, source: str | os.PathLike[str] | GGUFReader) -> Tokenizer:
        """Build the tokenizer of a GGUF file (a path, or a reader the caller already opened)."""
        # MetadataReader reads a vocabulary's arrays in one pass; gguf-py's own reader takes ~15 s on Llama 3's.
        reader = source if isinstance(source, GGUFReader) else MetadataReader(source, "r")
        return cls(read_gguf_vocab(reader))

    @property
    def model(self) -> str:
        """The file's tokenizer kind: "llama" (SentencePiece), "gpt2" or "gemma4"."""
        return self._vocab.model

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of `text`, special pieces in it parsed (llama.cpp's tokenize with parse_special=True).

        `add_bos` is llama.cpp's add_special: BOS (and EOS) are added where the file asks for them.
        """
        ids = self._hf.encode(text, add_special_tokens=False).ids if text else []
        if add_bos and self._vocab.add_bos:
            ids.insert(0, self.bos_id)
        if add_bos and self._vocab.add_eos and self._vocab.eos_id is not None:
            ids.append(int(self._vocab.eos_id))
        return ids

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Text of `ids`; control and unused pieces (BOS, <end_of_turn>, <unused0>, ...) are dropped when
        `skip_special`, as llama.cpp's token_to_piece with special=false and transformers' skip_special_tokens.

        Bytes that do not form UTF-8 become U+FFFD. With a SentencePiece leading space, the space after a
        leading BOS is removed, as llama-cpp-python's detokenize does.
        """
        ids = list(ids)
        pieces = self._plain if skip_special else self._shown
        text = b"".join([pieces[i] for i in ids]).decode("utf-8", errors="replace")
        if self._vocab.add_space_prefix and ids and ids[0] == self.bos_id and text.startswith(" "):
            text = text[1:]
        return text

    def stream_decoder(self, skip_special: bool = True, show: Iterable[int] = ()) -> StreamDecoder:
        """A decoder for generated tokens: push ids one by one, never getting half a UTF-8 character.

        Control and unused pieces give no text unless `skip_special` is False (for callers that need the raw
        markers), or unless named in `show` (a tool-call format's control pieces, which its parser reads); the
        caller still sees every id, so stop ids work on what is not printed.
        """
        return StreamDecoder(self._plain if skip_special else self._shown, {i: self._shown[i] for i in show})

    def id_to_piece(self, token_id: int) -> str:
        """The vocabulary's text for `token_id` as stored ("▁world", "<0x0A>", "<start_of_turn>")."""
        return self._vocab.tokens[token_id]

    def id_to_bytes(self, token_id: int) -> bytes:
        """The bytes `token_id` decodes to on its own (special pieces as their text), e.g. for logprobs."""
        return self._shown[token_id]

    def is_control(self, token_id: int) -> bool:
        """Whether `token_id` is a control piece (dropped by decode with skip_special)."""
        return self._vocab.types[token_id] in (TokenType.CONTROL, TokenType.UNKNOWN)

    def is_special(self, token_id: int) -> bool:
        """Whether the piece is a marker rather than text: control pieces, and user-defined pieces written like
        markers (Gemma 4's `<|channel>`, `<|tool_call>`), which the tokenizer only ever takes whole."""
        kind = self._vocab.types[token_id]
        if kind in (TokenType.CONTROL, TokenType.UNKNOWN):
            return True
        text = self._vocab.tokens[token_id]
        return kind == TokenType.USER_DEFINED and len(text) > 2 and text.startswith("<") and text.endswith(">")

    def ids_to_pieces(self, ids: Sequence[int]) -> list[str]:
        """Vocabulary texts of several ids (for debugging and tests)."""
        return [self._vocab.tokens[i] for i in ids]
