"""Tool-call formats (models/text/tool_calls/): grammars checked token by token with llguidance against real
vocabularies (the shipped Gemma 3 one, Gemma 4's fixture pieces, small byte-level vocabularies with Qwen's, Llama
3's and Mistral's pieces), parsing whole and streamed at every split, and tools through the built-in templates."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import TokenType

from models.text.chat_template import GEMMA4_TEMPLATE, ChatTemplate
from models.text.grammar import (
    GrammarError,
    GrammarVocabulary,
    TokenConstraint,
    compile_grammar,
    grammar_vocabulary,
    json_schema,
    lark,
)
from models.text.tokenizer import GGUFVocab, Tokenizer, _byte_level_table
from models.text.tool_calls import (
    ContentDelta,
    Gemma4Format,
    JsonCallFormat,
    ParsedCall,
    PythonicFormat,
    ToolCallDelta,
    ToolCallFormat,
    XmlCallFormat,
    format_for,
    render_gemma_value,
)
from scripts.make_gemma4_fixtures import MERGES, TOKEN_TYPES, VOCAB

FAMILIES_DIR = Path(__file__).resolve().parents[1] / "golden" / "families"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city"], "additionalProperties": False}}}
NOW = {"type": "function", "function": {"name": "now"}}  # no parameters: takes none
TOOLS = [WEATHER, NOW]


# -- vocabularies --------------------------------------------------------------------------------------------------

GEMMA4_MARKERS = ("<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>", "<|tool_response>")


def gemma4_tokenizer(control: bool = False) -> Tokenizer:
    """Gemma 4's fixture vocabulary (its markers user-defined, as Hearth's loader makes them) with the tool
    response pieces added; `control`: the markers as control pieces instead (a grammar names them as tokens)."""
    tokens = list(VOCAB) + ["<|tool_response>", "<tool_response|>", "<|tool>", "<tool|>"]
    types = np.asarray(list(TOKEN_TYPES) + [TokenType.USER_DEFINED] * 4, np.int32)
    if control:
        for piece in GEMMA4_MARKERS:
            types[tokens.index(piece)] = TokenType.CONTROL
    return Tokenizer(GGUFVocab(
        model="gemma4", pre="gemma4", tokens=tokens, scores=np.zeros(len(tokens), np.float32), types=types,
        merges=MERGES, bos_id=tokens.index("<bos>"), eos_id=tokens.index("<eos>"), eot_id=tokens.index("<turn|>"),
        eom_id=None, add_bos=True, add_eos=False, add_space_prefix=False, chat_template=None))


def byte_tokenizer(specials: dict[str, int]) -> Tokenizer:
    """A byte-level BPE vocabulary (any text encodes) with a family's special pieces; "<|end|>" ends turns."""
    table = _byte_level_table()
    merges = ['{ "', '" :', "n a", "m e", "na me", "Ġ t"]
    tokens = ["<unk>", "<s>", "<|end|>", *specials, *sorted(table, key=table.get), '{"', '":', "na", "me", "name",
              "Ġt"]
    types = np.full(len(tokens), TokenType.NORMAL, np.int32)
    types[:3] = TokenType.CONTROL
    for i, kind in enumerate(specials.values()):
        types[3 + i] = kind
    return Tokenizer(GGUFVocab(
        model="gpt2", pre="gpt-2", tokens=tokens, scores=np.zeros(len(tokens), np.float32), types=types,
        merges=merges, bos_id=1, eos_id=2, eot_id=None, eom_id=None, add_bos=False, add_eos=False,
        add_space_prefix=False, chat_template=None))


FAMILY_PIECES = {
    "qwen": {"<tool_call>": TokenType.USER_DEFINED, "</tool_call>": TokenType.USER_DEFINED},
    "llama3": {"<|python_tag|>": TokenType.CONTROL, "<|start_header_id|>": TokenType.CONTROL},
    "mistral": {"[TOOL_CALLS]": TokenType.CONTROL},
}


@pytest.fixture(scope="module")
def gemma3() -> tuple[Tokenizer, GrammarVocabulary]:
    from models.text.engine import resolve_model_path

    tokenizer = Tokenizer.from_gguf(resolve_model_path("gemma-3-270m"))
    return tokenizer, grammar_vocabulary(tokenizer)


@pytest.fixture(scope="module", params=[False, True], ids=["user-defined", "control"])
def gemma4(request: pytest.FixtureRequest) -> tuple[Tokenizer, GrammarVocabulary]:
    tokenizer = gemma4_tokenizer(control=request.param)
    return tokenizer, grammar_vocabulary(tokenizer)


def walk(tokenizer: Tokenizer, vocabulary: GrammarVocabulary, grammar: str, text: str) -> str:
    """Feed text's tokens to the Lark grammar: "accepted" (a whole reply), "incomplete", or which token it refused."""
    return walk_spec(tokenizer, vocabulary, lark(grammar), text)


def walk_spec(tokenizer: Tokenizer, vocabulary: GrammarVocabulary, spec: str, text: str) -> str:
    """walk, for a grammar in llguidance's terms (models.text.grammar.lark's result and the like)."""
    constraint = TokenConstraint(vocabulary, compile_grammar(vocabulary, spec))
    mask = np.zeros(vocabulary.mask_words, np.uint32)
    ids = tokenizer.encode(text, add_bos=False)
    for n, token in enumerate(ids):
        constraint.fill_mask(mask)
        if not (mask[token >> 5] >> (token & 31)) & 1:
            return f"refused {tokenizer.id_to_piece(token)!r} after {tokenizer.decode(ids[:n], False)!r}"
        constraint.advance(token)
    return "accepted" if constraint.accepting else "incomplete"


def check(tokenizer: Tokenizer, vocabulary: GrammarVocabulary, grammar: str, good: list[str], bad: list[str]) -> None:
    for text in good:
        assert walk(tokenizer, vocabulary, grammar, text) == "accepted", text
    for text in bad:
        assert walk(tokenizer, vocabulary, grammar, text) != "accepted", text


# -- format table ------------------------------------------------------------------------------------------------------

def test_format_for_picks_by_vocabulary_then_template() -> None:
    assert format_for(gemma4_tokenizer(), "gemma4", None).name == "gemma4"
    for family, pieces in FAMILY_PIECES.items():
        assert format_for(byte_tokenizer(pieces), "", None).name == family
    plain = byte_tokenizer({})
    assert format_for(plain, "", None).name == "gemma3"
    assert format_for(plain, "", "{% if tools %}<tool_call>{% endif %}").name == "qwen"


def test_marker_pieces_are_tokens() -> None:
    """A marker the vocabulary holds as one piece, control or user-defined `<...>` (Tokenizer.is_special), is a
    token to the grammar; without such a piece it is text."""
    for control in (False, True):
        tokens = gemma4_tokenizer(control=control)
        fmt = Gemma4Format(tokens)
        assert fmt._opener.special and fmt._opener.token == tokens.encode("<|tool_call>", add_bos=False)[0]
        assert fmt.stop_markers[0].token == tokens.encode("<|tool_response>", add_bos=False)[0]
    assert Gemma4Format(byte_tokenizer({})).stop_markers == ()
    assert not Gemma4Format(byte_tokenizer({}))._opener.special
    assert JsonCallFormat("mistral", byte_tokenizer(FAMILY_PIECES["mistral"]))._opener.special
    assert JsonCallFormat("qwen", byte_tokenizer(FAMILY_PIECES["qwen"]))._opener.special


# -- Gemma 4 grammars --------------------------------------------------------------------------------------------------

PARIS = '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>'
ROME = '<|tool_call>call:get_weather{city:<|"|>Rome<|"|>,days:3}<tool_call|>'
NOW_CALL = "<|tool_call>call:now{}<tool_call|>"


def test_gemma4_required(gemma4: tuple[Tokenizer, GrammarVocabulary]) -> None:
    fmt = Gemma4Format(gemma4[0])
    good = [PARIS, PARIS + ROME + NOW_CALL, PARIS + "<|tool_response>", NOW_CALL,
            "<|channel>thought\nParis, then.<channel|>" + PARIS]
    bad = ["Sure. " + PARIS,  # text before the call
           "<|tool_call>call:get_time{}<tool_call|>",  # no such function
           '<|tool_call>call:get_weather{unit:<|"|>celsius<|"|>}<tool_call|>',  # city is required
           '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>kelvin<|"|>}<tool_call|>',  # not in the enum
           '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:9}<tool_call|>',  # above the maximum
           '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,when:1}<tool_call|>',  # no additional properties
           '<|tool_call>call:get_weather{city:3}<tool_call|>',  # not a string
           '<|tool_call>call:get_weather{"city": "Paris"}<tool_call|>',  # JSON is not Gemma's syntax
           '<|tool_call>call:get_weather{unit:<|"|>celsius<|"|>,city:<|"|>Paris<|"|>}<tool_call|>',  # schema order
           PARIS + " and more", "<|tool_call>call:now{a:1}<tool_call|>", ""]
    check(*gemma4, fmt.grammar(TOOLS, "required"), good, bad)
    check(*gemma4, fmt.grammar(TOOLS, "required", parallel=False), [PARIS], [PARIS + ROME])
    check(*gemma4, fmt.grammar(TOOLS, "now"), [NOW_CALL], [PARIS, NOW_CALL + NOW_CALL])


def test_gemma4_auto_is_free_until_a_call_opens(gemma4: tuple[Tokenizer, GrammarVocabulary]) -> None:
    fmt = Gemma4Format(gemma4[0])
    good = ["", "It is sunny in Paris.", "Let me look. " + PARIS, PARIS + ROME, "a <tool_cal b < | <|too"]
    bad = ["Let me look. <|tool_call>call:get_weather{town:1}<tool_call|>", "x <|tool_call>hello",
           PARIS + "and then text"]
    check(*gemma4, fmt.grammar(TOOLS, "auto"), good, bad)


SCHEMA = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 2},
        "ratio": {"type": "number"},
        "flag": {"type": ["boolean", "null"]},
        "mode": {"const": "fast"},
        "pick": {"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["x"]}]},
        "tree": {"$ref": "#/$defs/node"},
        "extra": {"type": "object"},
    },
    "required": ["tags"],
    "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "additionalProperties": False}},
}


def test_gemma4_translates_the_schema_subset(gemma4: tuple[Tokenizer, GrammarVocabulary]) -> None:
    fmt = Gemma4Format(gemma4[0])
    tool = [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]
    q = '<|"|>'

    def call(args: str) -> str:
        return f"<|tool_call>call:f{{{args}}}<tool_call|>"

    good = [call(f"tags:[{q}a{q}]"), call(f"tags:[{q}ab{q},{q}{q}],ratio:-1.5e3,flag:null,mode:{q}fast{q}"),
            call(f"tags:[{q}a{q}],pick:7,tree:{{kids:[{{}},{{kids:[]}}]}}"), call(f"tags:[{q}a{q}],pick:{q}x{q}"),
            call(f"tags:[{q}a{q}],extra:{{any:[1,{q}t{q},{{k:true}}],n:null}}"), call(f"tags:[{q}a{q}],flag:true")]
    bad = [call(""), call("tags:[]"), call(f"tags:[{q}a{q},{q}b{q},{q}c{q}]"), call(f"tags:[{q}abcd{q}]"),
           call(f"tags:[{q}a{q}],mode:{q}slow{q}"), call(f"tags:[{q}a{q}],pick:{q}y{q}"),
           call(f"tags:[{q}a{q}],tree:{{kids:[{{leaf:1}}]}}"), call(f"tags:[{q}a{q}],ratio:01")]
    check(*gemma4, fmt.grammar(tool, "required"), good, bad)


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "string", "pattern": "^a"}, "pattern"), ({"type": "string", "format": "date"}, "format"),
    ({"oneOf": [{"type": "string"}]}, "oneOf"), ({"allOf": [{"type": "string"}]}, "allOf"),
    ({"$ref": "https://example.com/s.json"}, "local $refs"), ({"$ref": "#/$defs/missing"}, "points at nothing"),
    ({"type": "string", "anyOf": [{"maxLength": 2}]}, "anyOf beside"), ({"type": []}, "type must"),
    ({"type": "string", "minLength": "2"}, "minLength"), ({"enum": []}, "enum"), ({"type": "date"}, "type 'date'"),
])
def test_gemma4_refuses_what_it_cannot_enforce(schema: dict, keyword: str) -> None:
    tool = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": schema}, "required": ["a"]}}}]
    with pytest.raises(GrammarError, match=re.escape(keyword)):
        Gemma4Format().grammar(tool, "required")


def test_choices_and_tools_that_cannot_be_enforced() -> None:
    fmt = Gemma4Format()
    with pytest.raises(GrammarError, match="not among the tools"):
        fmt.grammar(TOOLS, "get_time")
    with pytest.raises(GrammarError, match="needs no grammar"):
        fmt.grammar(TOOLS, "none")
    with pytest.raises(GrammarError, match="two tools"):
        fmt.grammar([NOW, NOW], "auto")
    with pytest.raises(GrammarError, match="function name"):
        fmt.grammar([{"type": "function", "function": {"name": "a b"}}], "auto")
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(60):
        deep = {"type": "array", "items": deep}
    with pytest.raises(GrammarError, match="deeper"):
        fmt.grammar([{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": deep}}}}], "auto")


def test_gemma4_random_replies_give_arguments_llguidance_json_accepts(gemma4: tuple[Tokenizer, GrammarVocabulary],
                                                                      ) -> None:
    """Replies sampled at random under the mask (a model that knows nothing) parse into calls whose JSON arguments
    match the function's schema, checked by llguidance's own JSON-schema grammar: the Gemma-syntax grammar, the
    translation to JSON and llguidance's JSON agree."""
    tokenizer, vocabulary = gemma4
    fmt = Gemma4Format(tokenizer)
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        k: v for k, v in SCHEMA.items() if k != "properties"} | {"properties": {
            k: v for k, v in SCHEMA["properties"].items() if k != "pick"}}}}  # anyOf of int | "x" is ambiguous
    grammar = compile_grammar(vocabulary, lark(fmt.grammar([tool, WEATHER], "required")))
    checkers = {name: compile_grammar(vocabulary, json_schema(params))
                for name, params in (("f", tool["function"]["parameters"]),
                                     ("get_weather", WEATHER["function"]["parameters"]))}
    structural = [i for i in range(tokenizer.vocab_size) if not tokenizer.id_to_piece(i).isalnum()]
    finished = 0
    for seed in range(32):
        rng = random.Random(seed)
        constraint = TokenConstraint(vocabulary, grammar)
        mask = np.zeros(vocabulary.mask_words, np.uint32)
        ids: list[int] = []
        for _ in range(400):
            constraint.fill_mask(mask)
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:tokenizer.vocab_size])
            preferred = np.intersect1d(allowed, structural)
            token = int(rng.choice(preferred if len(preferred) and rng.random() < 0.6 else allowed))
            if token in tokenizer.eos_ids:
                break
            ids.append(token)
            constraint.advance(token)
            if constraint.finished:
                break
        else:
            continue  # still going: a reply cut at max_tokens
        finished += 1
        reply = tokenizer.decode(ids, skip_special=False)
        if reply.startswith("<|channel>"):  # a thought first (it cannot hold its closing marker): split off
            reply = reply[reply.index("<channel|>") + len("<channel|>"):]
        content, calls = fmt.parse(reply)
        assert content is None and calls
        for call in calls:
            json.loads(call.arguments)
            result = walk(tokenizer, vocabulary, checkers[call.name], call.arguments)
            assert result == "accepted", (call, result)
    assert finished >= 12


# -- JSON formats ----------------------------------------------------------------------------------------------------

def json_calls(fmt: JsonCallFormat) -> tuple[str, str]:
    return (fmt.render_call("get_weather", {"city": "Paris", "unit": "celsius"}),
            fmt.render_calls([("get_weather", {"city": "Rome", "days": 3}), ("now", {})]))


def test_gemma3_prompt_format_on_the_shipped_vocabulary(gemma3: tuple[Tokenizer, GrammarVocabulary]) -> None:
    fmt = format_for(gemma3[0], "gemma3", None)
    assert fmt.name == "gemma3"
    one, two = json_calls(fmt)
    assert one == '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}'
    bad = ['{"name": "get_time", "parameters": {}}', '{"name": "get_weather", "parameters": {"unit": "celsius"}}',
           '{"name":"get_weather","parameters":{"city":"Paris"}}',  # the layout is json.dumps's
           "Sure: " + one, one + " ok", '{"name": "now", "parameters": {"x": 1}}']
    check(*gemma3, fmt.grammar(TOOLS, "required"), [one, two], bad)
    check(*gemma3, fmt.grammar(TOOLS, "required", parallel=False), [one], [two])
    check(*gemma3, fmt.grammar(TOOLS, "auto"), ["", "The weather is fine.", " Yes {}", one, two],
          ['{"answer": 42}', one + "\nThen text"])


@pytest.mark.parametrize("family", list(FAMILY_PIECES))
def test_family_grammars(family: str) -> None:
    tokenizer = byte_tokenizer(FAMILY_PIECES[family])
    vocabulary = grammar_vocabulary(tokenizer)
    fmt = format_for(tokenizer, "", None)
    assert isinstance(fmt, JsonCallFormat) and fmt.name == family
    one, two = json_calls(fmt)
    key = fmt.spec.args_key
    wrong = fmt.render_call("get_weather", {"town": "Paris"})
    required = fmt.grammar(TOOLS, "required")
    check(tokenizer, vocabulary, required, [one, two], [wrong, "Hi " + one, one.replace(f'"{key}"', '"args"')])
    check(tokenizer, vocabulary, fmt.grammar(TOOLS, "now"), [fmt.render_call("now", {})], [one])
    check(tokenizer, vocabulary, fmt.grammar(TOOLS, "auto"), ["Plain text.", one, two], [wrong])
    if family != "llama3":  # calls after text: formats with an opener
        check(tokenizer, vocabulary, fmt.grammar(TOOLS, "auto"), ["Let me check. " + one], ["Let me " + wrong])
    if family == "llama3":
        check(tokenizer, vocabulary, required, ["<|python_tag|>" + one], [])


@pytest.mark.parametrize("family", ["mistral", "phi3", "gemma2"])
def test_family_grammars_on_sentencepiece_vocabularies(family: str) -> None:
    """SentencePiece tokenizers that put a space before text (Mistral, Phi-3, Gemma 1 and 2): llguidance forces tokens
    by their exact bytes, so the tokenizer it is given must not add that space (it once offered only "▁" where
    Mistral's grammar forces "[" after [TOOL_CALLS], and then refused it). Random walks through the masks all end in
    a call the format parses."""
    path = FAMILIES_DIR / f"{family}.q8_0.gguf"
    if not path.exists():
        pytest.skip("tests/golden/families is missing")
    tokenizer = Tokenizer.from_gguf(path)
    vocabulary = grammar_vocabulary(tokenizer)
    fmt = format_for(tokenizer, "", None)
    bounded = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}]
    grammar = compile_grammar(vocabulary, lark(fmt.grammar(bounded, "required", parallel=False)))
    rng = random.Random(7)
    mask = np.zeros(vocabulary.mask_words, np.uint32)
    for _ in range(8):
        constraint, ids = TokenConstraint(vocabulary, grammar), []
        while not constraint.finished and len(ids) < 400:
            mask[:] = 0
            constraint.fill_mask(mask)
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:tokenizer.vocab_size])
            ids.append(int(rng.choice(allowed)))
            constraint.advance(ids[-1])
        assert constraint.finished, tokenizer.decode(ids, skip_special=False)
        eos = set(tokenizer.eos_ids)
        content, calls = fmt.parse(tokenizer.decode([i for i in ids if i not in eos], skip_special=False))
        assert content is None and len(calls) == 1 and calls[0].name == "get_weather", ids
        assert json.loads(calls[0].arguments)["unit"] in ("c", "f")


# -- parsing, whole and streamed -----------------------------------------------------------------------------------

def assert_streams_like_whole(fmt: ToolCallFormat, text: str, tools: list[dict] | None = None,
                              ) -> tuple[str | None, list[ParsedCall]]:
    """Streamed in two pieces at every split and one character at a time: the deltas give the whole parse,
    each call's name in its first delta only."""
    whole = fmt.parse(text, tools or ())
    splits = [[text[:cut], text[cut:]] for cut in range(len(text) + 1)] + [list(text)]
    for pieces in splits:
        stream = fmt.stream(tools or ())
        deltas = [d for piece in pieces for d in stream.push(piece)] + stream.flush()
        content = "".join(d.text for d in deltas if isinstance(d, ContentDelta)) or None
        calls: dict[int, list[str]] = {}
        for d in deltas:
            if isinstance(d, ToolCallDelta):
                assert (d.name is not None) == (d.index not in calls), (pieces, d)
                calls.setdefault(d.index, [d.name or ""]).append(d.arguments)
        assert sorted(calls) == list(range(len(calls)))
        parsed = [ParsedCall(parts[0], "".join(parts[1:])) for _, parts in sorted(calls.items())]
        assert (content, parsed) == whole, pieces
    return whole


def calls_of(result: tuple[str | None, list[ParsedCall]]) -> list[tuple[str, Any]]:
    return [(c.name, json.loads(c.arguments)) for c in result[1]]


def test_gemma4_parse() -> None:
    fmt = Gemma4Format()
    text = ('Checking. <|tool_call>call:get_weather{city:<|"|>Paris, "FR" {x}<|<|"|>,n:-3,f:true,xs:[1,2.5e1,<|"|>a'
            '<|"|>,null],o:{k:{},<|"|>odd key<|"|>:[]}}<tool_call|><|tool_call>call:now{}<tool_call|><|tool_response>')
    result = assert_streams_like_whole(fmt, text)
    assert result[0] == "Checking."
    assert calls_of(result) == [("get_weather", {"city": 'Paris, "FR" {x}<|', "n": -3, "f": True,
                                                 "xs": [1, 25.0, "a", None], "o": {"k": {}, "odd key": []}}),
                                ("now", {})]
    assert assert_streams_like_whole(fmt, "No call <|tool here.\n") == ("No call <|tool here.\n", [])
    cut = assert_streams_like_whole(fmt, 'Hm <|tool_call>call:get_weather{city:<|"|>Pa')  # max_tokens cut it
    assert cut == ("Hm", [ParsedCall("get_weather", '{"city": "Pa')])
    assert assert_streams_like_whole(fmt, "<|tool_call>call:get_wea") == (None, [])  # no name yet: no call


@pytest.mark.parametrize("family", ["gemma3", "qwen", "llama3", "mistral"])
def test_json_family_parse(family: str) -> None:
    fmt = JsonCallFormat(family)
    calls = [("get_weather", {"city": 'Pa"ris} \\', "n": [1, {"a": "]"}]}), ("now", {})]
    text = fmt.render_calls(calls)
    assert calls_of(assert_streams_like_whole(fmt, "\n " + text + "\n")) == calls
    assert assert_streams_like_whole(fmt, "Plain {reply} here.") == ("Plain {reply} here.", [])
    cut = assert_streams_like_whole(fmt, text[:text.index("Pa") + 2])
    assert cut[1] == [ParsedCall("get_weather", '{"city": "Pa')]
    if fmt._opener is not None:  # text before calls is content
        assert assert_streams_like_whole(fmt, "Sure. " + text)[0] == "Sure."
    else:  # calls only start a reply: a JSON object later is content
        assert assert_streams_like_whole(fmt, "Sure. " + text) == ("Sure. " + text, [])


def test_llama3_python_tag_and_call_without_arguments() -> None:
    fmt = JsonCallFormat("llama3")
    result = assert_streams_like_whole(fmt, '<|python_tag|>{"name": "now"}; {"name": "f", "parameters": {"a": 1}}')
    assert result == (None, [ParsedCall("now", "{}"), ParsedCall("f", '{"a": 1}')])


def test_arguments_before_the_name_wait_for_it() -> None:
    fmt = JsonCallFormat("qwen")
    text = '<tool_call>\n{"arguments": {"a": [1, "}"]}, "name": "f"}\n</tool_call>'
    assert assert_streams_like_whole(fmt, text) == (None, [ParsedCall("f", '{"a": [1, "}"]}')])


def test_render_gemma_value() -> None:
    assert render_gemma_value({"a": "x", "b c": [1, 2.5, None, True], "d": {}}) == (
        '{a:<|"|>x<|"|>,<|"|>b c<|"|>:[1,2.5,null,true],d:{}}')


# -- tools through the built-in templates ------------------------------------------------------------------------

ASSISTANT_CALLS = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
    {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "{}"}}]}
LOOP = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}, ASSISTANT_CALLS,
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 15}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "noon"}]


def test_gemma3_builtin_template_renders_an_agent_loop() -> None:
    template = ChatTemplate(None, bos_token="<bos>")
    text = template.render(LOOP + [{"role": "assistant", "content": "15 at noon."}, {"role": "user", "content": "Ok"}],
                           tools=[NOW])
    calls = JsonCallFormat("gemma3").render_calls([("get_weather", {"city": "Paris"}), ("now", {})])
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\n"
        "You have access to functions. If you decide to invoke any of the function(s), you MUST put it in the format "
        'of\n{"name": function name, "parameters": dictionary of argument name and its value}\n'
        "To call several functions, write one such object per line.\n\n"
        "You SHOULD NOT include any other text in the response if you call a function\n"
        '[\n  {\n    "name": "now"\n  }\n]\n\nWeather?<end_of_turn>\n'
        f"<start_of_turn>model\n{calls}<end_of_turn>\n"
        '<start_of_turn>user\n```tool_output\n{"temp": 15}\n```\n```tool_output\nnoon\n```<end_of_turn>\n'
        "<start_of_turn>model\n15 at noon.<end_of_turn>\n<start_of_turn>user\nOk<end_of_turn>\n<start_of_turn>model\n")
    assert calls_of(JsonCallFormat("gemma3").parse(calls)) == [("get_weather", {"city": "Paris"}), ("now", {})]


def test_gemma4_builtin_template_renders_an_agent_loop() -> None:
    template = ChatTemplate(GEMMA4_TEMPLATE, bos_token="<bos>")
    calls = Gemma4Format().render_calls([("get_weather", {"city": "Paris"}), ("now", {})])
    system = ('<bos><|turn>system\nBe brief.<|tool>declaration:get_weather{description:<|"|>The weather in a city<|"|>,'
              'parameters:{additionalProperties:false,properties:{city:{description:<|"|>The city<|"|>,type:<|"|>STRING'
              '<|"|>},days:{maximum:7,minimum:1,type:<|"|>INTEGER<|"|>},unit:{enum:[<|"|>celsius<|"|>,<|"|>fahrenheit'
              '<|"|>],type:<|"|>STRING<|"|>}},required:[<|"|>city<|"|>],type:<|"|>OBJECT<|"|>}}<tool|>'
              "<|tool>declaration:now{}<tool|><turn|>\n<|turn>user\nWeather?<turn|>\n")
    results = ('<|tool_response>response:get_weather{value:<|"|>{"temp": 15}<|"|>}<tool_response|>'
               '<|tool_response>response:now{value:<|"|>noon<|"|>}<tool_response|>')
    # after the results the model goes on in its turn
    assert template.render(LOOP, tools=TOOLS) == system + "<|turn>model\n" + calls + results
    follow = LOOP + [{"role": "assistant", "content": "15 at noon."}, {"role": "user", "content": "Ok"}]
    assert template.render(follow, tools=TOOLS) == (
        system + "<|turn>model\n" + calls + results + "15 at noon.<turn|>\n<|turn>user\nOk<turn|>\n<|turn>model\n")
    assert calls_of(Gemma4Format().parse(calls)) == [("get_weather", {"city": "Paris"}), ("now", {})]
    # no tools: the turn format as before
    plain = template.render([{"role": "user", "content": "Hi"}])
    assert plain == "<bos><|turn>user\nHi<turn|>\n<|turn>model\n"


def test_templates_get_tool_call_arguments_as_objects() -> None:
    """As transformers' users pass them (a GGUF template writes them with tojson or in its own syntax); arguments
    that are not a JSON object stay text."""
    source = ("{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments | tojson }};{% endfor %}"
              "{% endfor %}")
    calls = [{"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
             {"id": "b", "type": "function", "function": {"name": "g", "arguments": "not json"}}]
    text = ChatTemplate(source).render([{"role": "assistant", "content": None, "tool_calls": calls}])
    assert text == '{"x": 1};"not json";'


# -- on the shipped model ------------------------------------------------------------------------------------------

@pytest.mark.heavy  # loads the 270M model on the GPU (lavapipe: about a minute)
def test_required_call_from_the_shipped_base_model() -> None:
    """tool_choice "required" on Gemma 3 270M (a base model that knows no tools), through the built-in prompt and
    the engine's constrained decoding: the reply is one call with arguments that match, and it ends by itself."""
    from models.text.batch import BatchGenerator, EndEvent, TokenEvent
    from models.text.engine import load_text_model
    from models.text.sampler import SamplingParams

    model = load_text_model("gemma-3-270m", max_batch=2)
    tokenizer = model.tokenizer
    fan = {"type": "function", "function": {"name": "set_fan", "description": "Set the fan", "parameters": {
        "type": "object", "properties": {"speed": {"type": "string", "enum": ["low", "high"]},
                                         "minutes": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["speed", "minutes"], "additionalProperties": False}}}
    prompt = ChatTemplate(None).render([{"role": "user", "content": "Run the fan on high for 5 minutes."}],
                                       tools=[fan])
    fmt = format_for(tokenizer, "gemma3", None)
    vocabulary = grammar_vocabulary(tokenizer)
    grammar = compile_grammar(vocabulary, lark(fmt.grammar([fan], "required", parallel=False)))
    generator = BatchGenerator(model)
    generator.add("fan", tokenizer.encode(prompt, add_bos=False), SamplingParams(temperature=0.0), 40,
                  constraint=TokenConstraint(vocabulary, grammar))
    tokens, reasons = [], []
    while generator.busy:
        for event in generator.step():
            if isinstance(event, TokenEvent):
                tokens.append(event.token.id)
            elif isinstance(event, EndEvent):
                reasons.append(event.reason)
    assert reasons == ["stop"], tokenizer.decode(tokens)
    content, calls = fmt.parse(tokenizer.decode(tokens))
    assert content is None and [c.name for c in calls] == ["set_fan"]
    args = json.loads(calls[0].arguments)
    assert args["speed"] in ("low", "high") and 1 <= args["minutes"] <= 9


# -- LFM2's Pythonic calls ------------------------------------------------------------------------------------------

def lfm2_tokenizer() -> Tokenizer:
    path = FAMILIES_DIR / "lfm2.q8_0.gguf"
    if not path.exists():
        pytest.skip("tests/golden/families is missing")
    return Tokenizer.from_gguf(path)


def test_lfm2_format_is_found_by_its_call_piece() -> None:
    tokenizer = lfm2_tokenizer()
    fmt = format_for(tokenizer, "lfm2", None)
    assert isinstance(fmt, PythonicFormat) and fmt._opener.special and fmt._close.special
    assert fmt.render_calls([("get_weather", {"city": "Paris", "ok": True, "xs": [1, None]}), ("now", "{}")]) == (
        '<|tool_call_start|>[get_weather(city="Paris", ok=True, xs=[1, None]), now()]<|tool_call_end|>')


def test_lfm2_grammar() -> None:
    tokenizer = lfm2_tokenizer()
    vocabulary = grammar_vocabulary(tokenizer)
    fmt = format_for(tokenizer, "lfm2", None)
    flagged = {"type": "function", "function": {"name": "flag", "parameters": {"type": "object", "properties": {
        "on": {"type": "boolean"}, "why": {"type": ["string", "null"]}}, "required": ["on"]}}}
    tools = [*TOOLS, flagged]
    one = fmt.render_call("get_weather", {"city": "Paris", "days": 3})
    two = fmt.render_calls([("get_weather", {"unit": "celsius", "city": "Rome"}), ("now", {}), ("flag", {"on": True})])
    ordered = fmt.render_calls([("get_weather", {"city": "Rome", "unit": "celsius"}), ("now", {}),
                                ("flag", {"on": True})])
    bad = [fmt.render_call("get_weather", {"town": "Paris"}), fmt.render_call("get_weather", {"days": 3}),
           fmt.render_call("flag", {"on": "yes"}), fmt.render_call("get_weather", {"city": "Paris", "days": 9}),
           "Hi " + one, two]  # two: arguments out of the schema's order
    check(tokenizer, vocabulary, fmt.grammar(tools, "required"), [one, ordered, fmt.render_call("now", {})], bad)
    check(tokenizer, vocabulary, fmt.grammar(tools, "required", parallel=False), [one], [ordered])
    check(tokenizer, vocabulary, fmt.grammar(tools, "auto"), ["Plain text.", "Let me check. " + one],
          ["Let me " + bad[0]])


def test_lfm2_random_calls_parse() -> None:
    """Random walks through the required grammar's masks end in one call the format parses into JSON arguments."""
    tokenizer = lfm2_tokenizer()
    vocabulary = grammar_vocabulary(tokenizer)
    fmt = format_for(tokenizer, "lfm2", None)
    tools = [{"type": "function", "function": {"name": "set", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 6}, "on": {"type": "boolean"}, "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
        "required": ["city", "on"], "additionalProperties": False}}}]
    grammar = compile_grammar(vocabulary, lark(fmt.grammar(tools, "required", parallel=False)))
    rng = random.Random(3)
    mask = np.zeros(vocabulary.mask_words, np.uint32)
    for _ in range(8):
        constraint, ids = TokenConstraint(vocabulary, grammar), []
        while not constraint.finished and len(ids) < 300:
            mask[:] = 0
            constraint.fill_mask(mask)
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:tokenizer.vocab_size])
            ids.append(int(rng.choice(allowed)))
            constraint.advance(ids[-1])
        assert constraint.finished, tokenizer.decode(ids, skip_special=False)
        eos = set(tokenizer.eos_ids)
        content, calls = fmt.parse(tokenizer.decode([i for i in ids if i not in eos], skip_special=False))
        assert content is None and [c.name for c in calls] == ["set"], ids
        arguments = json.loads(calls[0].arguments)
        assert isinstance(arguments["on"], bool) and len(arguments["city"]) <= 6


def test_lfm2_parse() -> None:
    fmt = PythonicFormat()
    text = ('Checking. <|tool_call_start|>[get_weather(city="Pa, (ris)", n=-3, f=True, xs=[1, 2.5, \'a\', None], '
            'o={"k": {}, "odd key": [false]}), now()]<|tool_call_end|> Done.')
    result = assert_streams_like_whole(fmt, text)
    assert result[0] == "Checking.Done."
    assert calls_of(result) == [("get_weather", {"city": "Pa, (ris)", "n": -3, "f": True, "xs": [1, 2.5, "a", None],
                                                 "o": {"k": {}, "odd key": [False]}}), ("now", {})]
    assert assert_streams_like_whole(fmt, "No call [here](x).") == ("No call [here](x).", [])
    cut = assert_streams_like_whole(fmt, '<|tool_call_start|>[get_weather(city="Paris", days=')
    assert cut == (None, [ParsedCall("get_weather", '{"city": "Paris", "days": ')])


# -- Qwen3.5's XML calls (Qwen3-Coder's format) --------------------------------------------------------------------

FLAGGED = {"type": "function", "function": {"name": "flag", "parameters": {"type": "object", "properties": {
    "on": {"type": "boolean"}, "why": {"type": ["string", "null"]},
    "tags": {"type": "array", "items": {"type": "string"}}, "note": {"type": "string", "maxLength": 12}},
    "required": ["on"]}}}


def qwen35_tokenizer() -> Tokenizer:
    path = FAMILIES_DIR / "qwen35.q8_0.gguf"
    if not path.exists():
        pytest.skip("tests/golden/families is missing")
    return Tokenizer.from_gguf(path)


def test_qwen35_format_is_found_by_its_template() -> None:
    """Qwen3.5's vocabulary has `<tool_call>` as one piece (the Hermes-style qwen format's), but its template
    writes Qwen3-Coder's XML: the template decides first."""
    tokenizer = qwen35_tokenizer()
    fmt = format_for(tokenizer, "qwen35", tokenizer.chat_template)
    assert isinstance(fmt, XmlCallFormat) and fmt._opener.special and fmt._close.special
    assert format_for(tokenizer, "qwen35", None).name == "qwen3_coder"
    assert format_for(tokenizer, "qwen3", "{{ '<tool_call>' }}").name == "qwen"
    assert fmt.render_calls([("get_weather", '{"city": "Paris", "days": 3}'), ("now", {})]) == (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n</tool_call>")


def test_qwen35_template_renders_an_agent_loop() -> None:
    """Calls (arguments sent as JSON text) and results go back through the model's own template, which writes
    the calls as the format does."""
    tokenizer = qwen35_tokenizer()
    fmt = format_for(tokenizer, "qwen35", tokenizer.chat_template)
    template = ChatTemplate(tokenizer.chat_template, bos_token="", eos_token="<|im_end|>")
    calls = [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'}},
        {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "{}"}}]
    text = template.render([{"role": "user", "content": "Weather?"},
                            {"role": "assistant", "content": "", "tool_calls": calls},
                            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                            {"role": "tool", "tool_call_id": "call_2", "content": "noon"}],
                           tools=TOOLS, tool_syntax=fmt, enable_thinking=False)
    assert fmt.render_calls([("get_weather", {"city": "Paris", "days": 3}), ("now", {})]) + "<|im_end|>" in text
    assert "<tool_response>\nsunny\n</tool_response>" in text and "<function=get_weather>" in text.split("# Tools")[1]


def test_qwen35_grammar() -> None:
    tokenizer = qwen35_tokenizer()
    vocabulary = grammar_vocabulary(tokenizer)
    fmt = format_for(tokenizer, "qwen35", tokenizer.chat_template)
    tools = [*TOOLS, FLAGGED]
    one = fmt.render_call("get_weather", {"city": "Paris,\n<b>France</b>", "days": 3})
    two = fmt.render_calls([("get_weather", {"city": "Rome", "unit": "celsius"}), ("now", {}),
                            ("flag", {"on": True, "why": None, "tags": ["a", "b"], "note": "short"})])
    good = [one, two, fmt.render_call("flag", {"on": False, "why": "it is\nlate"}), fmt.render_call("now", {})]
    bad = [fmt.render_call("get_weather", {"town": "Paris"}),  # not a parameter
           fmt.render_call("get_weather", {"days": 3}),  # city is required
           fmt.render_call("get_weather", {"days": 3, "city": "Paris"}),  # not in the schema's order
           fmt.render_call("get_weather", {"city": "Paris", "unit": "kelvin"}),
           fmt.render_call("get_weather", {"city": "Paris", "days": 9}),
           fmt.render_call("get_weather", {"city": "Pa</parameter>ris"}),
           fmt.render_call("flag", {"on": "yes"}), fmt.render_call("flag", {"on": True, "tags": "a"}),
           fmt.render_call("flag", {"on": True, "note": "far too long a note"}),
           "Hi " + one]
    check(tokenizer, vocabulary, fmt.grammar(tools, "required"), good, bad)
    check(tokenizer, vocabulary, fmt.grammar(tools, "required", parallel=False), [one], [two])
    check(tokenizer, vocabulary, fmt.grammar(tools, "flag"), [good[2]], [one])
    check(tokenizer, vocabulary, fmt.grammar(tools, "auto"), ["Plain text.", "Let me check.\n\n" + one, two],
          ["Let me " + bad[0], "Let me " + bad[4]])


@pytest.mark.parametrize(("schema", "keyword"), [
    ({"type": "string", "pattern": "^a+$"}, "pattern"), ({"type": "string", "format": "date"}, "format")])
def test_qwen35_refuses_what_it_cannot_enforce(schema: dict, keyword: str) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": schema}}}}
    with pytest.raises(GrammarError, match=f"f.x: a string parameter's {keyword} cannot be enforced"):
        XmlCallFormat().grammar([tool], "required")
    tool["function"]["parameters"]["properties"] = {"x": {"anyOf": [{"type": "string", "maxLength": 3},
                                                                    {"type": "integer"}]}}
    with pytest.raises(GrammarError, match="f.x: the maxLength of a parameter that takes a string or another type"):
        XmlCallFormat().grammar([tool], "required")
    tool["function"]["parameters"]["properties"] = {"a>b": {"type": "integer"}}
    with pytest.raises(GrammarError, match="a parameter's name cannot hold <, > or a newline"):
        XmlCallFormat().grammar([tool], "required")


def test_qwen35_random_calls_parse() -> None:
    """Random walks through the required grammar's masks end in one call the format parses into JSON arguments of
    the schema's types."""
    tokenizer = qwen35_tokenizer()
    vocabulary = grammar_vocabulary(tokenizer)
    fmt = format_for(tokenizer, "qwen35", tokenizer.chat_template)
    tools = [{"type": "function", "function": {"name": "set", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 6}, "on": {"type": "boolean"}, "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
        "required": ["city", "on", "n"], "additionalProperties": False}}}]
    grammar = compile_grammar(vocabulary, lark(fmt.grammar(tools, "required", parallel=False)))
    rng = random.Random(3)
    mask = np.zeros(vocabulary.mask_words, np.uint32)
    for _ in range(8):
        constraint, ids = TokenConstraint(vocabulary, grammar), []
        while not constraint.finished and len(ids) < 300:
            mask[:] = 0
            constraint.fill_mask(mask)
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:tokenizer.vocab_size])
            ids.append(int(rng.choice(allowed)))
            constraint.advance(ids[-1])
        assert constraint.finished, tokenizer.decode(ids, skip_special=False)
        eos = set(tokenizer.eos_ids)
        content, calls = fmt.parse(tokenizer.decode([i for i in ids if i not in eos], skip_special=False), tools)
        assert content is None and [c.name for c in calls] == ["set"], ids
        arguments = json.loads(calls[0].arguments)
        assert isinstance(arguments["city"], str) and len(arguments["city"]) <= 6
        assert isinstance(arguments["on"], bool) and isinstance(arguments["n"], int)


def test_qwen35_parse() -> None:
    """Values typed by the offered tools' schemas (a string stays text, "7" and all), whole and streamed."""
    fmt = XmlCallFormat()
    text = ("Checking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n7 <b>\n\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=flag>\n"
            "<parameter=on>\ntrue\n</parameter>\n<parameter=why>\nnull\n</parameter>\n<parameter=tags>\n"
            '["x", "y"]\n</parameter>\n<parameter=note>\n{"a": 1}\n</parameter>\n</function>\n</tool_call>')
    result = assert_streams_like_whole(fmt, text, [*TOOLS, FLAGGED])
    assert result[0] == "Checking."
    assert calls_of(result) == [("get_weather", {"city": "7 <b>\n", "days": 3}),
                                ("flag", {"on": True, "why": None, "tags": ["x", "y"], "note": '{"a": 1}'})]
    # without the tools: JSON where the text reads as JSON, else the text
    assert calls_of(fmt.parse(text)) == [("get_weather", {"city": "7 <b>\n", "days": 3}),
                                         ("flag", {"on": True, "why": None, "tags": ["x", "y"], "note": {"a": 1}})]
    why = "<tool_call>\n<function=flag>\n<parameter=why>\nbecause\n</parameter>\n</function>\n</tool_call>"
    assert calls_of(fmt.parse(why, [FLAGGED])) == [("flag", {"why": "because"})]
    assert assert_streams_like_whole(fmt, "No <function=x> call here.") == ("No <function=x> call here.", [])
    cut = assert_streams_like_whole(fmt, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", TOOLS)
    assert cut == (None, [ParsedCall("get_weather", '{"city": "Par"')])
    # a string parameter's text goes out as it comes; the newline that may end it, and what may begin
    # </parameter>, wait
    stream = fmt.stream(TOOLS)
    assert stream.push("<tool_call>\n<function=get_weather>\n<parameter=city>\nLine 1\n") == [
        ToolCallDelta(0, name="get_weather", arguments='{"city": "Line 1')]
    assert stream.push("Line \"2\"\n</para") == [ToolCallDelta(0, arguments='\\nLine \\"2\\"')]
    assert stream.push("meter>\n</function>\n</tool_call>") == [ToolCallDelta(0, arguments='"}')]
