"""Constrained decoding in the batch generator on the shipped Gemma 3 270M (lavapipe): JSON schemas enforced by
llguidance's token masks (models/text/grammar.py) in a batch shared with free sequences.

A base model that was never taught JSON is the hard case for the guarantee: whatever the sampler (greedy, a seeded
temperature draw on the GPU, top_p on the CPU), every reply that ends "stop" must be a document of its schema.
The free rows beside them must not notice: their tokens equal those of the same rows run with no constrained
neighbour (the masked step program leaves unmasked rows alone, and the noise of a seeded row is keyed by its seed
and position, not by the batch). As in tests/models/test_engine.py, batched and single-row kernels differ only in
the last bits of f32 rounding, which these prompts' tokens do not depend on: the tests ask for identical tokens.

The generations are kept short (a reply of about 45 tokens; lavapipe on 2 cores decodes a few tokens a second), and
shared between tests through module-scoped runs whose batches reuse the same step programs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from models.text import batch
from models.text.batch import BatchGenerator, EndEvent, TokenEvent
from models.text.engine import Engine, TextModel, load_text_model
from models.text.grammar import GrammarVocabulary, TokenConstraint, compile_grammar, grammar_vocabulary, json_schema
from models.text.sampler import SamplingParams

try:  # a second opinion where the reference validator is installed; the hand check below always runs
    import jsonschema
except ImportError:
    jsonschema = None

GREEDY = SamplingParams(temperature=0.0)
SEEDED = SamplingParams(temperature=0.8, seed=11)  # the GPU's Gumbel-max draw
TOP_P = SamplingParams(temperature=0.8, top_p=0.9, seed=5)  # the CPU sampler, from the row's candidates

# A nested object, an enum, an array, an optional field, integer bounds; strings and arrays bounded so that every
# reply ends within REPLY_TOKENS (about 50 tokens at most: keys and punctuation are a token or two each).
PET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 1, "maximum": 20},
        "owner": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 5}, "vip": {"type": "boolean"}},
            "required": ["name", "vip"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["old", "shy"]}, "maxItems": 2},
        "nick": {"type": "string", "maxLength": 3},
    },
    "required": ["kind", "age", "owner", "tags"],
    "additionalProperties": False,
}
REPLY_TOKENS = 64
# The preemption test's reply (about 12 tokens) must fit a 32-position context with its prompt.
SMALL: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
    "required": ["n", "ok"],
    "additionalProperties": False,
}
# Jump-forward's case: long keys, each a run of tokens the grammar forces (the model picks only the booleans).
LONG_KEYS: dict[str, Any] = {
    "type": "object",
    "properties": {"the_animal_is_a_domestic_pet": {"type": "boolean"},
                   "the_animal_has_been_vaccinated_this_year": {"type": "boolean"}},
    "required": ["the_animal_is_a_domestic_pet", "the_animal_has_been_vaccinated_this_year"],
    "additionalProperties": False,
}
JSON_PROMPT = "A pet record as JSON: "
FREE_PROMPTS = {"free-greedy": "The capital of France is", "free-seeded": "Once upon a time, in a small village",
                "free-top-p": "def fibonacci(n):"}
FREE_TOKENS = 8
CUT_TOKENS = 5  # a reply cut here is inside the JSON
OVERLAP_TOKENS = 8  # the overlapped run's rows: tokens of several rounds (4 GPU steps a submission)


@dataclass(frozen=True)
class Row:
    """One sequence of a run: its prompt, sampler, token budget and the schema it must follow (None: free)."""

    prompt: str
    sampling: SamplingParams
    max_tokens: int
    schema: Mapping[str, Any] | None = None


@dataclass
class Run:
    """What a batch run gave each row: its tokens, how it ended, and whether the end came in the same step() as
    the row's last token (a finished grammar ends a row at once; an end-of-sequence token would take a step)."""

    tokens: dict[str, list[int]] = field(default_factory=dict)
    ends: dict[str, EndEvent] = field(default_factory=dict)
    ended_with_last_token: dict[str, bool] = field(default_factory=dict)
    rounds: int = 0  # step() calls until every row had ended
    forced: int = 0  # tokens handed out by jump-forward (forced by a grammar) rather than sampled


def run_batch(model: TextModel, vocabulary: GrammarVocabulary, rows: Mapping[str, Row], overlap_rounds: bool,
              engine: Engine | None = None, jump_forward: bool = True) -> tuple[Run, BatchGenerator]:
    """Every row in one BatchGenerator (4 GPU steps a submission, as test_engine.py), run until all have ended;
    end-of-sequence ids are not stops, so a constrained row can end "stop" only through its grammar."""
    generator = BatchGenerator(model, steps_per_submit=4, engine=engine, overlap_rounds=overlap_rounds,
                               jump_forward=jump_forward)
    grammars = {id(r.schema): compile_grammar(vocabulary, json_schema(r.schema)) for r in rows.values() if r.schema}
    for key, row in rows.items():
        constraint = TokenConstraint(vocabulary, grammars[id(row.schema)]) if row.schema else None
        generator.add(key, model.tokenizer.encode(row.prompt), row.sampling, row.max_tokens, stop_ids=frozenset(),
                      constraint=constraint)
    result = Run(tokens={key: [] for key in rows})
    while generator.busy:
        events = generator.step()
        result.rounds += 1
        for event in events:
            if isinstance(event, TokenEvent):
                result.tokens[event.key].append(event.token.id)
            else:
                assert isinstance(event, EndEvent) and event.key not in result.ends
                result.ends[event.key] = event
                result.ended_with_last_token[event.key] = any(
                    isinstance(e, TokenEvent) and e.key == event.key for e in events)
    assert set(result.ends) == set(rows)
    result.forced = generator.forced_tokens
    return result, generator


def check_schema(value: Any, schema: Mapping[str, Any], where: str = "$") -> None:
    """Assert that value is a document of schema, for the keywords these tests use (the subset of JSON Schema in
    PET and SMALL); AssertionError names the first place that is not."""
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} is not one of {schema['enum']}"
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        properties = schema.get("properties", {})
        missing = [k for k in schema.get("required", []) if k not in value]
        assert not missing, f"{where}: required {missing} missing"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            assert not extra, f"{where}: properties {extra} are not allowed"
        for key, item in value.items():
            if key in properties:
                check_schema(item, properties[key], f"{where}.{key}")
    elif kind == "array":
        assert isinstance(value, list), f"{where}: {value!r} is not an array"
        assert schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)), f"{where}: length"
        for i, item in enumerate(value):
            check_schema(item, schema.get("items", {}), f"{where}[{i}]")
    elif kind == "string":
        assert isinstance(value, str), f"{where}: {value!r} is not a string"
        assert schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)), f"{where}: length"
    elif kind in ("integer", "number"):
        numeric = (int,) if kind == "integer" else (int, float)
        assert isinstance(value, numeric) and not isinstance(value, bool), f"{where}: {value!r} is not a {kind}"
        assert schema.get("minimum", value) <= value <= schema.get("maximum", value), f"{where}: {value} out of bounds"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{where}: {value!r} is not a boolean"
    else:
        assert kind is None, f"{where}: type {kind!r} is not checked here"


def parse_reply(model: TextModel, tokens: list[int], schema: Mapping[str, Any]) -> Any:
    """The reply's text as JSON, checked against its schema (by hand, and by jsonschema where installed)."""
    text = model.tokenizer.decode(tokens, skip_special=False)
    value = json.loads(text)  # the whole text: nothing may follow the document
    check_schema(value, schema)
    if jsonschema is not None:
        jsonschema.validate(value, schema)
    return value


# -- the runs (module-scoped: each test asserts one property of them) ------------------------------------------

# Each batch below has at most four stepwise rows (constrained or CPU-sampled) and two GPU-sampled ones, so that
# the runs share their step programs (built per batch-size bucket, seconds each on lavapipe).
MIXED = {
    "json-greedy": Row(JSON_PROMPT, GREEDY, REPLY_TOKENS, PET),
    "json-seeded": Row(JSON_PROMPT, SEEDED, REPLY_TOKENS, PET),
    "json-top-p": Row(JSON_PROMPT, TOP_P, REPLY_TOKENS, PET),
    "free-greedy": Row(FREE_PROMPTS["free-greedy"], GREEDY, FREE_TOKENS),
    "free-seeded": Row(FREE_PROMPTS["free-seeded"], SEEDED, FREE_TOKENS),
    "free-top-p": Row(FREE_PROMPTS["free-top-p"], TOP_P, FREE_TOKENS),
}
FREE = {key: row for key, row in MIXED.items() if row.schema is None}
# The seeded rows again, shorter, and a greedy constrained row cut inside its reply.
OVERLAPPED = {key: Row(row.prompt, row.sampling, OVERLAP_TOKENS, row.schema) for key, row in MIXED.items()
              if row.sampling.seed is not None} | {"json-cut": Row(JSON_PROMPT, GREEDY, CUT_TOKENS, PET)}


@pytest.fixture(scope="module")
def model() -> Iterator[TextModel]:
    yield load_text_model("gemma-3-270m", max_batch=8, context_length=256)


@pytest.fixture(scope="module")
def vocabulary(model: TextModel) -> GrammarVocabulary:
    return grammar_vocabulary(model.tokenizer)


@pytest.fixture(scope="module")
def mixed(model: TextModel, vocabulary: GrammarVocabulary) -> Run:
    """Constrained and free rows of every sampler in one batch, rounds one at a time (a CPU adapter's way)."""
    return run_batch(model, vocabulary, MIXED, overlap_rounds=False)[0]


@pytest.fixture(scope="module")
def overlapped(model: TextModel, vocabulary: GrammarVocabulary) -> Run:
    """OVERLAPPED's rows with round N+1 recorded while round N runs (a GPU's way)."""
    result, generator = run_batch(model, vocabulary, OVERLAPPED, overlap_rounds=True)
    assert generator.overlap_rounds
    return result


# -- tests ------------------------------------------------------------------------------------------------------

def test_check_schema_rejects_what_the_schema_forbids() -> None:
    """The hand validator can fail: each document below breaks PET in one way."""
    good = {"kind": "cat", "age": 3, "owner": {"name": "Ann", "vip": False}, "tags": ["old"]}
    check_schema(good, PET)
    check_schema({**good, "nick": "Tib"}, PET)
    bad = [{**good, "kind": "cow"}, {**good, "age": 21}, {**good, "age": 2.5}, {**good, "age": True},
           {**good, "owner": {"name": "Ann"}}, {**good, "owner": {"name": "Annabel", "vip": False}},
           {**good, "tags": ["old", "shy", "old"]}, {**good, "tags": ["calm"]}, {**good, "extra": 1},
           {k: v for k, v in good.items() if k != "tags"}, {**good, "owner": {"name": "Ann", "vip": 0}}]
    for document in bad:
        with pytest.raises(AssertionError):
            check_schema(document, PET)


@pytest.mark.heavy
def test_constrained_replies_are_documents_of_their_schema(model: TextModel, mixed: Run) -> None:
    """Greedy, seeded-temperature (GPU) and top_p (CPU) rows under the schema, beside free rows: each reply that
    ended "stop" is one JSON document of the schema, and nothing follows it."""
    for key in ("json-greedy", "json-seeded", "json-top-p"):
        assert mixed.ends[key].reason == "stop", (key, mixed.ends[key], model.tokenizer.decode(mixed.tokens[key]))
        parse_reply(model, mixed.tokens[key], PET)
    # two seeded draws and the argmax: three different replies, or the samplers were not all in play
    assert len({tuple(mixed.tokens[k]) for k in ("json-greedy", "json-seeded", "json-top-p")}) == 3


@pytest.mark.heavy
def test_free_rows_are_not_disturbed_by_constrained_neighbours(model: TextModel, vocabulary: GrammarVocabulary,
                                                                mixed: Run) -> None:
    """Each free row's tokens are those it gets in a batch with no constrained row (no masked program, fewer
    stepwise rows), whatever its sampler."""
    free, _ = run_batch(model, vocabulary, FREE, overlap_rounds=False)
    for key in FREE:
        assert len(mixed.tokens[key]) == FREE_TOKENS and mixed.ends[key].reason == "length"
        assert mixed.tokens[key] == free.tokens[key], key


@pytest.mark.heavy
def test_overlapped_rounds_give_the_same_seeded_tokens(mixed: Run, overlapped: Run) -> None:
    """The seeded rows (constrained and free, GPU and CPU samplers) run again with round N+1 recorded while round N
    runs (a GPU's way), in another batch: the same tokens as in the mixed batch run one round at a time."""
    for key in OVERLAPPED.keys() & MIXED.keys():
        assert len(overlapped.tokens[key]) == OVERLAP_TOKENS <= len(mixed.tokens[key]), key
        assert overlapped.tokens[key] == mixed.tokens[key][:OVERLAP_TOKENS], key


@pytest.mark.heavy
def test_max_tokens_inside_the_json_ends_with_length(model: TextModel, mixed: Run, overlapped: Run) -> None:
    """A constrained reply cut by max_tokens ends "length" with exactly max_tokens tokens: a prefix of the reply the
    same greedy row gives with room (it is not a document yet)."""
    tokens = overlapped.tokens["json-cut"]
    assert overlapped.ends["json-cut"].reason == "length" and len(tokens) == CUT_TOKENS
    assert tokens == mixed.tokens["json-greedy"][:CUT_TOKENS]
    with pytest.raises(json.JSONDecodeError):
        json.loads(model.tokenizer.decode(tokens))


@pytest.mark.heavy
def test_complete_grammar_stops_without_end_of_sequence(model: TextModel, mixed: Run) -> None:
    """A row whose grammar is complete ends "stop" in the step of its last token, though end-of-sequence ids are not
    stops here: the generator does not sample an end-of-sequence token (which would take one more step)."""
    for key in ("json-greedy", "json-seeded", "json-top-p"):
        tokens = mixed.tokens[key]
        assert mixed.ends[key].reason == "stop" and mixed.ended_with_last_token[key], key
        assert not set(tokens) & model.tokenizer.eos_ids, key
        assert model.tokenizer.decode(tokens[-1:]).endswith("}"), key


@pytest.mark.heavy
@pytest.mark.parametrize("overlap_rounds", [False, True], ids=["one-at-a-time", "overlapped"])
def test_preempted_constrained_sequence_gives_valid_json(model: TextModel, vocabulary: GrammarVocabulary,
                                                         overlap_rounds: bool) -> None:
    """Two greedy rows of the same prompt and schema in a pool of two 16-position pages: once both pass 16
    positions, mid-reply, the newer is preempted, and later prefills its prompt and the tokens of its reply so far
    again, its grammar state kept. Its reply is still a document of the schema, the same as the other row's.
    Overlapped (a GPU's way), the rows' network halves are recorded ahead on another thread, and those recorded for
    the batch before the preemption are dropped."""
    engine = Engine(model, "f16", pool_tokens=32, page_tokens=16, n_ctx=32)
    assert engine.pool.n_pages == 2
    rows = {key: Row(JSON_PROMPT, GREEDY, 20, SMALL) for key in ("first", "second")}
    preempted_at: list[tuple[str, int]] = []
    preempt = BatchGenerator._preempt

    def spy(generator: BatchGenerator, seq: Any) -> None:
        preempted_at.append((seq.key, len(seq.emitted)))
        preempt(generator, seq)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BatchGenerator, "_preempt", spy)
        result, _ = run_batch(model, vocabulary, rows, overlap_rounds=overlap_rounds, engine=engine)
    reply = len(result.tokens["second"])
    assert preempted_at and all(key == "second" and 0 < n < reply for key, n in preempted_at), preempted_at
    for key in rows:
        assert result.ends[key].reason == "stop", (key, model.tokenizer.decode(result.tokens[key]))
        parse_reply(model, result.tokens[key], SMALL)
    assert result.tokens["second"] == result.tokens["first"]
    assert engine.pool.free_slots == engine.pool.n_slots and engine.pool.free_tokens == 32


# -- jump-forward: the tokens a grammar forces go in as one prompt chunk (models/text/batch.py _jump) --------------

JSON_ROWS = ("json-greedy", "json-seeded", "json-top-p")


@pytest.mark.heavy
def test_jump_forward_gives_the_tokens_of_stepping(model: TextModel, vocabulary: GrammarVocabulary,
                                                   mixed: Run) -> None:
    """The constrained rows of the mixed batch (jump-forward on, the default) again with jump-forward off, a step a
    token: the same tokens for greedy, the GPU's seeded draw and the CPU's top_p (forced tokens are the only ones
    the mask allows, the GPU's noise is keyed by position and the CPU sampler skips a draw per forced token), in
    fewer rounds with it on."""
    stepped, _ = run_batch(model, vocabulary, {key: MIXED[key] for key in JSON_ROWS}, overlap_rounds=False,
                           jump_forward=False)
    assert stepped.forced == 0 < mixed.forced
    for key in JSON_ROWS:
        assert stepped.tokens[key] == mixed.tokens[key], key
        assert stepped.ends[key].reason == mixed.ends[key].reason == "stop", key
    assert mixed.rounds < stepped.rounds


@pytest.mark.heavy
def test_jump_forward_feeds_forced_keys_in_one_submission(model: TextModel, vocabulary: GrammarVocabulary) -> None:
    """Two rows of a schema with long keys: their forced tokens (most of the reply) go in as chunks, the two rows'
    chunks together in one submission where they jump in the same round, so the reply takes far fewer rounds than
    tokens; with jump-forward off it takes a round a token, and gives the same tokens."""
    rows = {"greedy": Row(JSON_PROMPT, GREEDY, 40, LONG_KEYS), "seeded": Row(JSON_PROMPT, SEEDED, 40, LONG_KEYS)}
    calls: list[list[int]] = []
    submit = Engine.submit_last_chunks

    def spy(engine: Engine, chunks: Any) -> Any:
        calls.append([len(c.ids) for c in chunks])
        return submit(engine, chunks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Engine, "submit_last_chunks", spy)
        jumped, _ = run_batch(model, vocabulary, rows, overlap_rounds=False)
    stepped, _ = run_batch(model, vocabulary, rows, overlap_rounds=False, jump_forward=False)
    n_tokens = len(jumped.tokens["greedy"])
    for key in rows:
        assert jumped.ends[key].reason == "stop", (key, model.tokenizer.decode(jumped.tokens[key]))
        parse_reply(model, jumped.tokens[key], LONG_KEYS)
        assert jumped.tokens[key] == stepped.tokens[key], key
    assert any(len(chunks) == 2 for chunks in calls)  # both rows' chunks in one submission
    assert max(n for chunks in calls for n in chunks) > 4  # a key's tokens in one chunk
    assert jumped.forced > n_tokens  # of both rows: most of each reply
    assert 2 * jumped.rounds < n_tokens <= stepped.rounds


@pytest.mark.heavy
def test_sampled_replies_with_jump_forward_are_documents_over_seeds(model: TextModel,
                                                                    vocabulary: GrammarVocabulary) -> None:
    """Four seeded draws at temperature 1 on the GPU and one top_p draw on the CPU, all jumping forward, rounds
    overlapped (a GPU's way): every reply is a document of the schema."""
    rows = {f"seed-{seed}": Row(JSON_PROMPT, SamplingParams(temperature=1.0, seed=seed), REPLY_TOKENS, PET)
            for seed in range(4)} | {"top-p": Row(JSON_PROMPT, SamplingParams(temperature=1.0, top_p=0.95, seed=7),
                                                  REPLY_TOKENS, PET)}
    result, _ = run_batch(model, vocabulary, rows, overlap_rounds=True)
    assert result.forced > 0
    for key in rows:
        assert result.ends[key].reason == "stop", (key, model.tokenizer.decode(result.tokens[key]))
        parse_reply(model, result.tokens[key], PET)
    assert len({tuple(tokens) for tokens in result.tokens.values()}) > 1


@pytest.mark.heavy
def test_sequence_preempted_between_jumps_gives_valid_json(model: TextModel, vocabulary: GrammarVocabulary) -> None:
    """Three greedy rows of the long-keys schema in a pool of four 16-position pages: rows are preempted while their
    forced tokens wait for their chunk, and rejoin by prefilling their prompt and every token handed out (forced
    ones too), the grammar state kept; each reply is still the document the others give."""
    engine = Engine(model, "f16", pool_tokens=64, page_tokens=16, n_ctx=64)
    rows = {key: Row(JSON_PROMPT, GREEDY, 56, LONG_KEYS) for key in ("first", "second", "third")}
    waiting: list[bool] = []  # at each preemption: whether the row had forced tokens waiting for their chunk
    preempt = BatchGenerator._preempt

    def spy(generator: BatchGenerator, seq: Any) -> None:
        waiting.append(seq.jump)
        preempt(generator, seq)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BatchGenerator, "_preempt", spy)
        result, _ = run_batch(model, vocabulary, rows, overlap_rounds=False, engine=engine)
    assert any(waiting), waiting
    for key in rows:
        assert result.ends[key].reason == "stop", (key, model.tokenizer.decode(result.tokens[key]))
        parse_reply(model, result.tokens[key], LONG_KEYS)
        assert result.tokens[key] == result.tokens["first"], key
    assert engine.pool.free_slots == engine.pool.n_slots and engine.pool.free_tokens == 64


# -- check first: split rows draw unmasked and the grammar checks the token (models/text/batch.py _refused) ---------

@pytest.mark.heavy
@pytest.mark.parametrize("check_first", [True, None], ids=["always", "after-every-mask"])
def test_checking_first_gives_the_tokens_of_masking(model: TextModel, vocabulary: GrammarVocabulary, mixed: Run,
                                                    check_first: bool | None) -> None:
    """The GPU-sampled constrained rows of the mixed batch again with split steps drawn unmasked and checked by the
    grammar, rounds overlapped (a GPU's way): every step, or (as a GPU decides by time) once a mask has taken long,
    here any mask, and again after each refused token's masked step. The grammar refuses some of those tokens, each
    then drawn again under the mask with the same noise, and the replies are the tokens of masking every step,
    greedy and seeded."""
    keys = ("json-greedy", "json-seeded")
    generator = BatchGenerator(model, steps_per_submit=4, overlap_rounds=True, check_first=check_first)
    result = Run(tokens={key: [] for key in keys})
    grammar = compile_grammar(vocabulary, json_schema(PET))
    for key in keys:
        row = MIXED[key]
        generator.add(key, model.tokenizer.encode(row.prompt), row.sampling, row.max_tokens, stop_ids=frozenset(),
                      constraint=TokenConstraint(vocabulary, grammar))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch, "CHECK_FIRST_SHARE", 0.0)  # a mask of any length counts as long
        while generator.busy:
            for event in generator.step():
                if isinstance(event, TokenEvent):
                    result.tokens[event.key].append(event.token.id)
                else:
                    result.ends[event.key] = event
    assert 0 < generator.refused_tokens < generator.checked_tokens
    for key in keys:
        assert result.ends[key].reason == "stop", (key, model.tokenizer.decode(result.tokens[key]))
        assert result.tokens[key] == mixed.tokens[key], key
