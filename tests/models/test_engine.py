"""The engine on the shipped Gemma 3 270M: paged KV cache, GPU sampling, several decode steps per
submission and continuous batching give the same tokens as one sequence decoded step by step.

Exactness: a batch's steps run other kernels than one sequence's, with the same f32 products summed in
another order. On a GPU the matvecs of steps of several tokens split rows over other lanes (rows in pairs
at 32 threads a row and more; from 4 tokens, Q4_K's lanes along quant words, which dequantise each value
before its product where one token's kernel applies the scales per sub-block, and the other kernels' rows
interleaved thread by thread). On software adapters a batch takes the whole-row matmul
(software_matvec_max_tokens), which sums each row's 16-value groups in the matvec's order; only Q8_0 (the
270M's output head) applies its block scales per value there rather than per block. Those differences sit
in the last bits of f32 rounding and would change a greedy token only at a near-tie, which these prompts do
not have: the tests ask for identical tokens. The GPU's argmax takes the lowest index on ties, as numpy's does.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from config.settings import MAX_STEPS_PER_SUBMIT as config_max_steps
from gpu.device import Device, choose_adapter
from gpu.kv_cache import PAGE_TOKENS
from gpu.ops.sampling import mask_words
from models.text.batch import JUMP_TOKENS, BatchGenerator, EndEvent, TokenEvent
from models.text.engine import MAX_STEPS_PER_SUBMIT, DecodeRow, Engine, TextModel, load_text_model
from models.text.generate import SOFTWARE_STEPS_PER_SUBMIT, STEPS_PER_SUBMIT, generate
from models.text.sampler import SamplingParams
from models.text.step_io import ChunkRow, GpuSampling
from tests.models.batch_logits import assert_agree, batched_and_alone, greedy_tokens

pytestmark = pytest.mark.heavy
GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village"]


@pytest.fixture(scope="module")
def model() -> Iterator[TextModel]:
    yield load_text_model("gemma-3-270m", max_batch=4, pool_tokens=8 * PAGE_TOKENS)


def encode(model: TextModel, text: str) -> list[int]:
    return model.tokenizer.encode(text)


def test_gpu_greedy_multi_step_equals_host_argmax(model: TextModel) -> None:
    prompt = encode(model, PROMPTS[0])
    want = greedy_tokens(model, prompt, 20)
    session = model.new_session()
    try:  # the GPU path: first token from the prefill, then submissions of 8, 8 and 3 steps
        got = [t.id for t in generate(model, session, prompt, GREEDY, 20, stop_ids=frozenset())]
    finally:
        session.close()
    assert got == want


def test_a_rewound_session_writes_its_positions_again(model: TextModel) -> None:
    """Session.rewind (a refused constrained token, models/text/batch.py): after going back two positions, feeding
    the token that stood there gives the logits it gave the first time, as if the tokens after it were never fed;
    a session does not rewind forward."""
    prompt = encode(model, "The capital of France is")
    session = model.new_session()
    try:
        session.prefill(prompt)
        first = session.decode(17)
        session.decode(4)
        session.decode(99)
        session.rewind(len(prompt))
        np.testing.assert_array_equal(session.decode(17), first)
        assert session.n_past == len(prompt) + 1
        with pytest.raises(ValueError, match="cannot rewind"):
            session.rewind(len(prompt) + 2)
    finally:
        session.close()


def test_warm_up_leaves_a_request_nothing_to_compile() -> None:
    """After warm_up without running (a software adapter's default), a batch of prompts and decodes (GPU-sampled
    and CPU-sampled rows) compiles no pipeline, and every pipeline of every program has been dispatched once (with
    no workgroups: a software adapter's driver compiles a pipeline at its first dispatch), which changed nothing:
    the server's worker warms up this way before it says it is ready. On a device of its own, so that the other
    tests' programs have compiled nothing for it."""
    fresh = load_text_model("gemma-3-270m", max_batch=4, pool_tokens=8 * PAGE_TOKENS,
                            device=Device(choose_adapter()))
    device = fresh.executor.device
    greedy = greedy_tokens(fresh, encode(fresh, PROMPTS[0]), 6)
    assert fresh.engine().warm_up(run=False) > 0
    pipelines = {id(d.pipeline) for program in fresh.engine().programs() for d in program.dispatches}
    assert pipelines <= device.pipelines_dispatched
    assert fresh.executor.dispatch_pipelines(fresh.engine().programs()) == 0
    assert greedy_tokens(fresh, encode(fresh, PROMPTS[0]), 6) == greedy
    before = device.pipelines_compiled
    generator = BatchGenerator(fresh, steps_per_submit=4, overlap_rounds=False)
    generator.add("greedy", encode(fresh, PROMPTS[0]), GREEDY, 6)
    generator.add("long", encode(fresh, PROMPTS[2] * 3), SamplingParams(temperature=0.8, seed=1), 6)
    generator.add("top_k", encode(fresh, PROMPTS[1]), SamplingParams(temperature=0.8, top_k=5, seed=1), 6)
    ended = 0
    while generator.busy:
        ended += sum(isinstance(event, EndEvent) for event in generator.step())
    assert ended == 3
    assert device.pipelines_compiled == before
    # jump-forward's chunks of several sequences (the grammar's forced tokens, up to JUMP_TOKENS each)
    sessions = [fresh.new_session() for _ in range(3)]
    try:
        for session, prompt in zip(sessions, PROMPTS, strict=False):
            fresh.engine().submit_prefill(session, encode(fresh, prompt)).wait()
        chunks = [ChunkRow(session, [5] * n) for session, n in zip(sessions, (JUMP_TOKENS, 3, 1), strict=True)]
        fresh.engine().submit_last_chunks(chunks).wait()
    finally:
        for session in sessions:
            session.close()
    assert device.pipelines_compiled == before


def test_steps_per_submit_changes_the_pacing_not_the_tokens(model: TextModel) -> None:
    """One step a submission (tokens paced one by one) and sixteen (the most) give the same greedy tokens."""
    prompts = {str(i): encode(model, p) for i, p in enumerate(PROMPTS[:2])}

    def run(steps: int) -> dict[str, list[int]]:
        generator = BatchGenerator(model, steps_per_submit=steps)
        for key, prompt in prompts.items():
            generator.add(key, prompt, GREEDY, 12, stop_ids=frozenset())
        got: dict[str, list[int]] = {key: [] for key in prompts}
        while generator.busy:
            for event in generator.step():
                if isinstance(event, TokenEvent):
                    got[str(event.key)].append(event.token.id)
        return got

    one = run(1)
    assert all(len(tokens) == 12 for tokens in one.values())
    assert run(16) == one
    assert config_max_steps == MAX_STEPS_PER_SUBMIT  # the setting's bound is the engine's
    # by default a GPU's batches take eight steps a submission, a software adapter's one (its steps are slow)
    software = model.executor.device.is_software
    assert model.steps_per_submit == (SOFTWARE_STEPS_PER_SUBMIT if software else STEPS_PER_SUBMIT)
    assert model.generator().steps_per_submit == model.steps_per_submit
    with pytest.raises(ValueError, match="steps_per_submit"):
        load_text_model(steps_per_submit=MAX_STEPS_PER_SUBMIT + 1)


def test_batched_decode_equals_each_sequence_alone(model: TextModel) -> None:
    prompts = [encode(model, p) for p in PROMPTS]
    want = [greedy_tokens(model, p, 6) for p in prompts]
    engine = model.engine()
    sessions = [model.new_session() for _ in prompts]
    try:
        firsts = [int(engine.submit_prefill(s, p).wait()[0][0, 0]) for s, p in zip(sessions, prompts, strict=True)]
        tokens, _ = engine.submit_decode([DecodeRow(s) for s in sessions], n_steps=5).wait()
        got = [[first, *tokens[:, i].tolist()] for i, first in enumerate(firsts)]
    finally:
        for s in sessions:
            s.close()
    assert got == want


def test_seeded_sampling_is_reproducible(model: TextModel) -> None:
    prompt = encode(model, PROMPTS[2])

    def draw(seed: int) -> list[int]:
        session = model.new_session()
        try:
            params = SamplingParams(temperature=1.5, seed=seed)
            return [t.id for t in generate(model, session, prompt, params, 10, stop_ids=frozenset())]
        finally:
            session.close()

    first = draw(7)
    assert draw(7) == first
    assert draw(8) != first  # 10 draws at temperature 1.5 agreeing by chance: vanishingly unlikely


@pytest.mark.parametrize("overlap_rounds", [True, False], ids=["overlapped", "one-at-a-time"])
def test_continuous_batching_matches_single_sequences(model: TextModel, overlap_rounds: bool) -> None:
    """A greedy GPU sequence, a CPU-sampled one (penalty: logits come back) and a prompt of three
    prefill chunks (chunks of 16 here, 512 in service: the arithmetic per token is the same) that
    joins while the others decode; each gets its single-sequence tokens, and every slot and page
    is back in the pool at the end; whether rounds overlap (a GPU) or run one at a time (a CPU adapter)."""
    pool = model.engine().pool
    free_slots, free_tokens = pool.free_slots, pool.free_tokens
    short = [encode(model, p) for p in PROMPTS[:2]]
    long = encode(model, " ".join(["The quick brown fox jumps over the lazy dog."] * 4))
    assert 32 < len(long) <= 48
    penalised = SamplingParams(temperature=0.0, repetition_penalty=1.3)
    want = {
        "gpu": greedy_tokens(model, short[0], 12),
        "long": greedy_tokens(model, long, 4),
    }
    session = model.new_session()
    try:
        want["cpu"] = [t.id for t in generate(model, session, short[1], penalised, 12, stop_ids=frozenset())]
    finally:
        session.close()
    generator = BatchGenerator(model, steps_per_submit=4, prefill_chunk=16, overlap_rounds=overlap_rounds)
    generator.add("gpu", short[0], GREEDY, 12, stop_ids=frozenset())
    generator.add("cpu", short[1], penalised, 12, stop_ids=frozenset())
    got: dict[str, list[int]] = {"gpu": [], "cpu": [], "long": []}
    ended: dict[str, str] = {}
    rounds = 0
    while generator.busy:
        for event in generator.step():
            if isinstance(event, TokenEvent):
                got[event.key].append(event.token.id)
            else:
                assert isinstance(event, EndEvent) and event.error is None
                ended[event.key] = event.reason
        rounds += 1
        if rounds == 2:  # the long prompt joins a running batch
            assert generator.can_admit(long, 4)
            generator.add("long", long, GREEDY, 4, stop_ids=frozenset())
    assert got == want
    assert ended == {"gpu": "length", "cpu": "length", "long": "length"}
    assert (pool.free_slots, pool.free_tokens) == (free_slots, free_tokens)


@pytest.mark.parametrize("overlap_rounds", [True, False], ids=["overlapped", "one-at-a-time"])
def test_preempted_sequences_resume_with_the_same_tokens(model: TextModel, overlap_rounds: bool) -> None:
    """Three sequences in a pool of five 16-position pages that all of them would outgrow: the
    newest are preempted (pages back to the pool) and prefill their tokens so far again later,
    each still giving its single-sequence greedy tokens."""
    engine = Engine(model, "f16", pool_tokens=80, page_tokens=16, n_ctx=64)
    assert engine.pool.n_pages == 5
    prompts = [encode(model, p) for p in PROMPTS]
    want = {i: greedy_tokens(model, p, 20) for i, p in enumerate(prompts)}
    generator = BatchGenerator(model, steps_per_submit=4, prefill_chunk=16, engine=engine,
                               overlap_rounds=overlap_rounds)
    for i, p in enumerate(prompts):
        generator.add(i, p, GREEDY, 20, stop_ids=frozenset())
    got: dict[int, list[int]] = {i: [] for i in want}
    while generator.busy:
        for event in generator.step():
            if isinstance(event, TokenEvent):
                got[event.key].append(event.token.id)
            else:
                assert isinstance(event, EndEvent) and event.reason == "length", event
    assert generator.preemptions > 0
    assert got == want
    assert engine.pool.free_slots == engine.pool.n_slots and engine.pool.free_tokens == 80


def test_abandoned_generations_give_their_buffers_back(model: TextModel) -> None:
    """A client that stops reading leaves a submission in flight; its read-back buffer must still go
    back to the pool (else every early stop would keep one: a leak in a long-running server)."""
    prompt = encode(model, PROMPTS[1])

    def stop_early() -> int:
        session = model.new_session()
        try:
            tokens = generate(model, session, prompt, GREEDY, 40, stop_ids=frozenset())
            next(tokens)
            next(tokens)  # the first decode submission is read, the second is in flight
            tokens.close()
        finally:
            session.close()
        return model.executor.transfer_buffers

    first = stop_early()
    assert stop_early() == first  # the second run found every buffer it needed back in the pool


def test_split_steps_draw_the_tokens_of_one_step_submissions(model: TextModel) -> None:
    """Engine.submit_logits then LogitsStep.sample (the network, then the masked sampling, as constrained rows
    decode) give the tokens of the one-step masked submission, greedy and seeded, each row within its mask."""
    engine = model.engine()
    rows_sampling = [GpuSampling(), GpuSampling(temperature=1.2, seed=3)]
    ids = np.arange(model.vocab_size)
    allowed = [ids % 5 == 1, ids % 3 == 0]  # each row may take a third or a fifth of the vocabulary
    bits = mask_words(model.vocab_size) * 32
    masks = np.stack([np.packbits(np.pad(a, (0, bits - a.size)), bitorder="little").view(np.uint32) for a in allowed])
    prompts = [encode(model, p) for p in PROMPTS[:2]]

    def decode(split: bool) -> list[list[int]]:
        sessions = [model.new_session() for _ in prompts]
        try:
            for s, p in zip(sessions, prompts, strict=True):
                engine.submit_prefill(s, p).wait()
            got: list[list[int]] = [[], []]
            for _ in range(3):
                rows = [DecodeRow(s, sampling=g, constrained=True)
                        for s, g in zip(sessions, rows_sampling, strict=True)]
                if split:
                    pending = engine.submit_logits(rows).sample(masks)
                else:
                    for row, mask in zip(rows, masks, strict=True):
                        row.mask = mask
                    pending = engine.submit_decode(rows)
                for i, token in enumerate(pending.wait()[0][0].tolist()):
                    got[i].append(token)
            return got
        finally:
            for s in sessions:
                s.close()

    fused, split = decode(False), decode(True)
    assert split == fused
    assert all(allowed[i][t] for i, row in enumerate(split) for t in row)


def test_a_split_step_is_sampled_once_before_the_next(model: TextModel) -> None:
    engine = model.engine()
    session = model.new_session()
    try:
        engine.submit_prefill(session, encode(model, PROMPTS[0])).wait()
        step = engine.submit_logits([DecodeRow(session)])
        with pytest.raises(RuntimeError, match="not been submitted"):
            engine.submit_logits([DecodeRow(session)])
        step.sample().wait()
        with pytest.raises(RuntimeError, match="sampled already"):
            step.sample()
        engine.submit_logits([DecodeRow(session)]).abandon()  # a step left unsampled frees the engine too
        engine.submit_logits([DecodeRow(session)]).sample().wait()
    finally:
        session.close()


@pytest.mark.slow
def test_gpu_kernels_agree_with_the_software_ones(model: TextModel) -> None:
    """The kernels a GPU runs (split-row matvecs with the residual norms folded in, matvec_q4_k, tiled matmuls,
    wider norms) run here on lavapipe by making the device claim not to be a CPU; fed the same tokens, their
    logits match the software kernels' ones. Cosine >= 0.99999: both are f32 with different summation orders
    (the parity tests against transformers allow 0.9999 for the whole model)."""
    from gpu.device import Device

    prompt = encode(model, PROMPTS[2])
    forced = greedy_tokens(model, prompt, 6)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Device, "is_software", property(lambda self: False))
        gpu_model = load_text_model("gemma-3-270m", max_batch=1, pool_tokens=2 * PAGE_TOKENS)
        session, reference = gpu_model.new_session(), model.new_session()
        try:
            pairs = [(session.prefill(prompt), reference.prefill(prompt))]
            pairs += [(session.decode(token), reference.decode(token)) for token in forced]
        finally:
            session.close()
            reference.close()
    for step, (got, want) in enumerate(pairs):
        cosine = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
        assert cosine >= 0.99999, f"step {step}: cosine {cosine}"
        assert int(np.argmax(got)) == int(np.argmax(want)), f"step {step}"


@pytest.mark.slow
def test_gpu_batched_kernels_agree_with_one_sequence() -> None:
    """The GPU's batched-decode kernels (4 sequences: Q4_K matvecs on word lanes, the others' rows interleaved,
    rows in pairs), run here on lavapipe by making the device claim not to be a CPU: fed the same tokens, each
    sequence's logits match the one-sequence kernels' (cosine >= 0.99999, as the test above: f32 with different
    summation orders) with the same greedy token at every step."""
    from gpu.device import Device

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Device, "is_software", property(lambda self: False))
        gpu_model = load_text_model("gemma-3-270m", max_batch=4, pool_tokens=8 * PAGE_TOKENS)
        prompts = [encode(gpu_model, p) for p in [*PROMPTS, "Water boils at"]]
        batched, alone = batched_and_alone(gpu_model, prompts, 5)
        defines = [d.defines for d in gpu_model.engine().program(4, 4).dispatches]  # the batch's decode step
    assert any(d.get("LANE_WORDS") for d in defines) and max(d.get("INTERLEAVE", 1) for d in defines) > 1, (
        "the batch did not run the batched-decode kernels")
    assert_agree(batched, alone, 0.99999)


@pytest.mark.slow
def test_int8_decode_stays_near_the_exact_logits(model: TextModel) -> None:
    """int8_activations' decode path on the GPU kernels (run here on lavapipe as above, with the size threshold
    lifted so that the 270M's small matrices take it too): the o projection's int8 matvec, the gate-up writing
    its output quantised and the int8 down projection reading it; and, in its prompt program, the residual norms
    writing the int8 tiles' inputs quantised (each layer's gate-up input and the next layer's q|k|v input). Fed
    the same tokens as the exact software kernels, the logits keep a cosine >= 0.998: the lower end of what
    activations rounded to 8 bits gave on this model's prompts (0.9980 and 0.9997 for the int8 prompt path,
    README Configuration; llama.cpp, which rounds every matmul's activations, 0.9988-0.9998 against
    transformers in DESIGN.md)."""
    from dataclasses import replace

    from gpu.device import Device

    prompt = encode(model, PROMPTS[1])
    forced = greedy_tokens(model, prompt, 6)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Device, "is_software", property(lambda self: False))
        int8_model = load_text_model("gemma-3-270m", max_batch=1, pool_tokens=2 * PAGE_TOKENS,
                                     int8_activations=True)
        int8_model.executor.tuning = replace(int8_model.executor.tuning, int8_matvec_min_values=0)
        session, reference = int8_model.new_session(), model.new_session()
        try:
            pairs = [(session.prefill(prompt), reference.prefill(prompt))]
            pairs += [(session.decode(token), reference.decode(token)) for token in forced]
            program = int8_model.engine().program(1, 1)
            prompt_program, _ = int8_model.engine().prefill_program(64)  # built, not run
        finally:
            session.close()
            reference.close()
    # a 64-token chunk runs int8 tiles, their inputs quantised by the residual norms before them (bit for bit as
    # quantize_q8 would: tests/gpu/test_matmul_i8.py)
    prompt_labels = [d.label for d in prompt_program.dispatches]
    assert sum(label.startswith("residual_norm_q8[") for label in prompt_labels) == 2 * 18 - 1
    labels = [d.label for d in program.dispatches]
    assert any(label.startswith("matvec_q4_k_i8[") and label.endswith("q8_direct]") for label in labels)
    assert any(label.endswith(",q8,normed]") for label in labels), "no gate-up wrote a quantised output"
    assert any(label.endswith("q8_buffer]") for label in labels), "no down projection read one"
    for step, (got, want) in enumerate(pairs):
        cosine = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
        assert cosine >= 0.998, f"step {step}: cosine {cosine}"


def test_candidates_are_the_best_logits_of_the_row(model: TextModel) -> None:
    """A CPU-sampled row reads its 64 best logits and softmax statistics instead of all V: they equal the top 64
    of the same step's logits read whole (ids exactly, values and statistics to f32 rounding), and the logits
    kept on the GPU for the steps where candidates do not suffice are that row too."""
    engine = model.engine()
    prompts = [encode(model, text) for text in PROMPTS[:2]]
    sessions = [engine.new_session() for _ in prompts]
    try:
        for s, prompt in zip(sessions, prompts, strict=True):
            engine.submit_prefill(s, prompt).wait()
        rows = [DecodeRow(s, 1000 + i, read_logits=True, read_candidates=True) for i, s in enumerate(sessions)]
        pending = engine.submit_decode(rows)
        _, logits = pending.wait()
        for row, s in enumerate(sessions):
            full = logits[row].reshape(-1)
            c = pending.candidates[row]
            want = np.lexsort((np.arange(full.size), -full))[:c.ids.size]
            assert c.ids.tolist() == want.tolist()
            np.testing.assert_array_equal(c.logits, full[want])
            assert c.max == full.max()
            assert c.sum == pytest.approx(float(np.exp(full.astype(np.float64) - full.max()).sum()), rel=1e-5)
            np.testing.assert_array_equal(engine.row_logits(s), full)
    finally:
        for s in sessions:
            s.close()


def test_top_p_requests_sample_from_candidates(model: TextModel) -> None:
    """generate() and the batch generator with top_p / top_k / greedy logprobs: the tokens come from the GPU's
    candidates (the sampler's own tests show the draw is the full row's), reproducibly for a seed."""
    prompt = encode(model, PROMPTS[1])
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=3)
    runs = []
    for _ in range(2):
        session = model.new_session()
        try:
            runs.append([t.id for t in generate(model, session, prompt, params, 8, stop_ids=frozenset())])
        finally:
            session.close()
    assert runs[0] == runs[1] and len(runs[0]) == 8
    generator = BatchGenerator(model)
    generator.add("top_k", prompt, SamplingParams(temperature=1.0, top_k=5, seed=1), 6, stop_ids=frozenset())
    generator.add("logprobs", prompt, SamplingParams(temperature=0, top_logprobs=3), 6, stop_ids=frozenset(),
                  logprobs=True)
    tokens: dict[str, list] = {"top_k": [], "logprobs": []}
    while generator.busy:
        for event in generator.step():
            if isinstance(event, TokenEvent):
                tokens[event.key].append(event.token)
    assert len(tokens["top_k"]) == 6 and len(tokens["logprobs"]) == 6
    greedy = greedy_tokens(model, prompt, 6)
    assert [t.id for t in tokens["logprobs"]] == greedy
    assert all(t.logprob <= 0 and len(t.top) == 3 and t.top[0][0] == t.id for t in tokens["logprobs"])
