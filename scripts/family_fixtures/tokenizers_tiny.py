"""Tiny tokenizers laid out as the real repositories ship them: byte-level BPE (tokenizers) or SentencePiece BPE
with byte fallback, with tokenizer.json, tokenizer_config.json (chat template inside), special_tokens_map.json."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

from .specs import GEMMA_CONTROLS, GEMMA_TURNS, MISTRAL_CONTROLS, PHI3_ADDED, Family

BPE_MERGES = 120  # learned merges on top of the 256 byte symbols
SPM_SIZES = {"mistral": 384, "phi3": 352, "gemma": 448}  # SentencePiece model sizes, specials and bytes included

CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model can still say something about the weather.
Paris is the capital of France, and Berlin is the capital of Germany. Rome is in Italy; Madrid is in Spain.
What is the capital of France? The answer is Paris. What is the capital of China? It is Beijing.
Gravity is a force that attracts two bodies towards each other. Water boils at 100 degrees Celsius.
You are a helpful assistant. Please answer the question as briefly as you can, and think before you answer.
The user asked a question and the assistant gave an answer. The system message sets the rules of the chat.
In 2024 there were 366 days; in 2025 there are 365. Numbers like 3.14, 42 and 1000 appear in text too.
def add(a, b):\n    return a + b\nprint(add(2, 3))  # prints 5
Once upon a time there was a little house by the river, and in the house lived an old man and his cat.
Every morning the old man walked to the market to buy bread, cheese and apples for the day.
She said: "I've been told he's there", and they're sure we'll make it. It's late; don't wait.
Search the web for passages that answer the query, then rank the documents by how relevant they are.
Machine learning models learn patterns from data. Language models predict the next token in a sequence.
The train leaves at 9:45 from platform 3. Tickets cost 12 euros for adults and 6 for children.
Questions, answers, instructions and documents: the model reads them all as tokens, one after another.
"""

PROMPT_TEXT = (
    "Once upon a time there was a little house by the river. Every morning the old man walked to the market "
    "to buy bread, cheese and apples, and every evening he told his cat about the weather, the trains and the "
    "capital cities of the world, which the cat never remembered."
)


def _round_up(n: int, m: int) -> int:
    return int(math.ceil(n / m) * m)


def _corpus(template: str) -> list[str]:
    return [line for line in (CORPUS + template).splitlines() if line.strip()]


def _write_config(fam: Family, hf_dir: Path, template: str, extra: dict[str, Any]) -> None:
    """tokenizer_config.json as the repositories ship it (added_tokens_decoder and chat template inside; the
    converter reads both), special_tokens_map.json; drops transformers 5's separate chat_template.jinja so the
    template has one home."""
    from transformers import AutoTokenizer

    decoder = {str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized, "rstrip": t.rstrip,
                        "single_word": t.single_word, "special": t.special}
               for i, t in sorted(AutoTokenizer.from_pretrained(hf_dir).added_tokens_decoder.items())}
    path = hf_dir / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(extra, added_tokens_decoder=decoder, chat_template=template, bos_token=fam.bos, eos_token=fam.eos,
               pad_token=fam.pad)
    if fam.tokenizer_class:
        cfg["tokenizer_class"] = fam.tokenizer_class
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    (hf_dir / "chat_template.jinja").unlink(missing_ok=True)
    stm = {k: v for k, v in (("bos_token", fam.bos), ("eos_token", fam.eos), ("pad_token", fam.pad)) if v}
    if fam.tokenizer == "spm":
        stm["unk_token"] = "<unk>"
    (hf_dir / "special_tokens_map.json").write_text(json.dumps(stm, indent=2) + "\n")


def _bpe(fam: Family, hf_dir: Path, template: str) -> None:
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    llama3 = fam.pre in ("llama-bpe",)
    tk = Tokenizer(models.BPE(ignore_merges=llama3))  # Llama 3's tokenizer.json ignores merges for whole words
    if fam.nfc:
        tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(fam.split_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + BPE_MERGES, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tk.train_from_iterator(_corpus(template), trainer=trainer)
    for content, special in fam.specials:  # ids after the learned vocabulary, in the real order
        tk.add_tokens([AddedToken(content, special=special, normalized=False)])
    steps: list[Any] = [processors.ByteLevel(trim_offsets=False)]
    if fam.add_bos:
        bos = fam.bos
        steps.append(processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                                   special_tokens=[(bos, tk.token_to_id(bos))]))
    if fam.append_eos:
        eos = fam.append_eos
        steps.append(processors.TemplateProcessing(single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:1 {eos}:1",
                                                   special_tokens=[(eos, tk.token_to_id(eos))]))
    tk.post_processor = processors.Sequence(steps) if len(steps) > 1 else steps[0]
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=fam.bos, eos_token=fam.eos, pad_token=fam.pad,
                                  clean_up_tokenization_spaces=False)
    tok.save_pretrained(hf_dir)
    extra: dict[str, Any] = {"add_bos_token": fam.add_bos, "add_eos_token": bool(fam.append_eos),
                             "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072}
    if fam.name.startswith("qwen"):
        extra |= {"tokenizer_class": "Qwen2Tokenizer", "errors": "replace", "split_special_tokens": False}
    _write_config(fam, hf_dir, template, extra)


def _spm(fam: Family, hf_dir: Path, template: str) -> None:
    import sentencepiece as spm
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    gemma = fam.spm_layout == "gemma"
    ids = dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3) if gemma else dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus(template)), model_writer=buf, model_type="bpe",
        vocab_size=SPM_SIZES[fam.spm_layout], byte_fallback=True, character_coverage=1.0, split_digits=True,
        add_dummy_prefix=not gemma, remove_extra_whitespaces=False, normalization_rule_name="identity",
        allow_whitespace_only_pieces=False, control_symbols=GEMMA_CONTROLS if gemma else
        (MISTRAL_CONTROLS if fam.spm_layout == "mistral" else []), user_defined_symbols=GEMMA_TURNS if gemma else [],
        pad_piece="<pad>", unk_piece="<unk>", bos_piece="<bos>" if gemma else "<s>",
        eos_piece="<eos>" if gemma else "</s>", num_threads=1, minloglevel=2, **ids)
    (hf_dir / "tokenizer.model").write_bytes(buf.getvalue())
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": fam.tokenizer_class, "bos_token": fam.bos, "eos_token": "<eos>" if gemma else "</s>",
         "unk_token": "<unk>", "pad_token": "<pad>" if gemma else None, "add_bos_token": fam.add_bos,
         "add_eos_token": False, "legacy": False}) + "\n")
    tok = AutoTokenizer.from_pretrained(hf_dir)  # transformers converts tokenizer.model to tokenizer.json
    if gemma:  # user-defined pieces in tokenizer.model, special added tokens in Gemma's tokenizer files
        tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in GEMMA_TURNS], special_tokens=True)
        assert tok.convert_tokens_to_ids(GEMMA_TURNS) == [106, 107]
    if fam.spm_layout == "phi3":
        tok.add_tokens([AddedToken(t, special=True, normalized=False, rstrip=t != "<|endoftext|>")
                        for t in PHI3_ADDED], special_tokens=True)
        added = {t: tok.convert_tokens_to_ids(t) for t in PHI3_ADDED}
        (hf_dir / "added_tokens.json").write_text(json.dumps(added, indent=2) + "\n")
    tok.save_pretrained(hf_dir)
    (hf_dir / "tokenizer.model").write_bytes(buf.getvalue())  # save_pretrained may not keep the original
    _write_config(fam, hf_dir, template, {"add_bos_token": fam.add_bos, "add_eos_token": False,
                                          "model_max_length": 131072, "legacy": False})


def build_tokenizer(fam: Family, hf_dir: Path, template: str) -> tuple[Any, int]:
    """Writes the tokenizer files into hf_dir; returns the tokenizer as transformers loads it from there and the
    config's vocab_size (the tokenizer's length, rounded up where the family pads)."""
    from transformers import AutoTokenizer

    (_bpe if fam.tokenizer == "bpe" else _spm)(fam, hf_dir, template)
    tok = AutoTokenizer.from_pretrained(hf_dir)
    return tok, _round_up(len(tok), fam.pad_vocab_to)


def prompt_ids(fam: Family, tok: Any) -> list[list[int]]:
    """Logit prompts (PROMPT_TEXT's first tokens, BOS first where the tokenizer adds it, at the family's
    prompt_lengths), or for the embedding family its texts as the tokenizer encodes them (with the appended
    <|endoftext|>)."""
    if fam.embedding:
        return [tok.encode(t) for t in fam.texts]
    body = tok.encode(PROMPT_TEXT, add_special_tokens=False)
    head = [tok.convert_tokens_to_ids(fam.bos)] if fam.add_bos else []
    out = [head + body[:n - len(head)] for n in fam.prompt_lengths]
    assert all(len(p) == n for p, n in zip(out, fam.prompt_lengths)), "PROMPT_TEXT too short"
    return out
