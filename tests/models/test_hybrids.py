"""The hybrids' recurrent state under continuous batching, on the tiny random-weight fixtures of LFM2 (short
convolutions) and Qwen3.5 (Gated DeltaNet) (tests/golden/families/{lfm2,qwen35}.*, scripts/make_family_fixtures.py;
their plain parity runs in test_family_parity.py): each sequence's greedy tokens are transformers' float32 ones
whatever else runs beside it.

- a long prompt (40 and 70 tokens) in chunks of 16 (the conv state, and DeltaNet's matrix state, carried from chunk
  to chunk) joins a running batch mid-way
  while another sequence decodes, and a sequence cancelled mid-run leaves a slot whose stale state a later
  sequence must not read;
- preemption: sequences whose pages run out go back and prefill their tokens so far again from position 0 (the
  state starts empty there, gpu/recurrent_state.py), and go on with the same tokens.

Exactness: F32 file and f32 KV cache; batched and chunked steps sum the same f32 products as single ones (order
aside), and the fixture keeps every step's top two logits apart by more than 1e-3 of the top one: the tokens are
asked to be identical.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from models.text.batch import BatchGenerator, EndEvent, TokenEvent
from models.text.engine import Engine, TextModel, load_text_model
from models.text.sampler import SamplingParams

FAMILIES_DIR = Path(__file__).resolve().parent.parent / "golden" / "families"
GREEDY = SamplingParams(temperature=0.0)

# family -> (recurrent layers, attention layers, long prompt's length, (pool tokens, context) that three sequences
# outgrow together)
HYBRIDS = {"lfm2": (2, 1, 40, (80, 64)), "qwen35": (3, 1, 70, (96, 96))}

pytestmark = pytest.mark.skipif(not all((FAMILIES_DIR / f"{f}.npz").exists() for f in HYBRIDS),
                                reason="no hybrid fixtures")


@pytest.fixture(scope="module", params=sorted(HYBRIDS))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def golden(family: str) -> dict[str, np.ndarray]:
    with np.load(FAMILIES_DIR / f"{family}.npz") as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def model(family: str) -> Iterator[TextModel]:
    yield load_text_model(str(FAMILIES_DIR / f"{family}.f32.gguf"), kv_dtype="f32", context_length=128, max_batch=4)


def _prompt(golden: dict[str, np.ndarray], i: int) -> list[int]:
    return [int(t) for t in golden[f"f32/prompt_{i}"]]


def _greedy(golden: dict[str, np.ndarray], i: int, n: int) -> list[int]:
    return [int(t) for t in golden[f"f32/greedy_{i}"][:n]]


def _run(generator: BatchGenerator, joining: dict[int, tuple[str, list[int], int]] | None = None,
         cancel_at: dict[int, str] | None = None) -> tuple[dict[str, list[int]], dict[str, str]]:
    got: dict[str, list[int]] = {}
    ended: dict[str, str] = {}
    rounds = 0
    while generator.busy or (joining and any(r > rounds for r in joining)):
        for event in generator.step():
            if isinstance(event, TokenEvent):
                got.setdefault(str(event.key), []).append(event.token.id)
            else:
                assert isinstance(event, EndEvent) and event.error is None, event
                ended[str(event.key)] = event.reason
        rounds += 1
        if cancel_at and rounds in cancel_at:
            generator.cancel(cancel_at[rounds])
        if joining and rounds in joining:
            key, prompt, n = joining[rounds]
            generator.add(key, prompt, GREEDY, n, stop_ids=frozenset())
    return got, ended


def test_chunked_prompt_joins_a_running_batch(family: str, model: TextModel, golden: dict[str, np.ndarray]) -> None:
    recurrent, attention, long_length, _ = HYBRIDS[family]
    pool = model.engine().pool
    assert pool.recurrent is not None and len(pool.recurrent.conv) == recurrent and len(pool.keys) == attention
    free = (pool.free_slots, pool.free_tokens)
    short, long = _prompt(golden, 0), _prompt(golden, 1)
    assert len(long) == long_length
    generator = BatchGenerator(model, steps_per_submit=4, prefill_chunk=16, overlap_rounds=False)
    generator.add("short", short, GREEDY, 32, stop_ids=frozenset())
    generator.add("cancelled", long, GREEDY, 32, stop_ids=frozenset())
    # the cancelled sequence leaves its slot (and a state past position 0) to the one that joins after it
    got, ended = _run(generator, joining={3: ("long", long, 32), 5: ("again", short, 8)},
                      cancel_at={2: "cancelled"})
    assert got["short"] == _greedy(golden, 0, 32)
    assert got["long"] == _greedy(golden, 1, 32)
    assert got["again"] == _greedy(golden, 0, 8)
    assert ended == {"short": "length", "long": "length", "again": "length"}
    assert (pool.free_slots, pool.free_tokens) == free


def test_preempted_sequences_resume_with_the_same_tokens(family: str, model: TextModel,
                                                        golden: dict[str, np.ndarray]) -> None:
    """Three sequences in a pool of 16-position pages that they would outgrow together."""
    pool_tokens, n_ctx = HYBRIDS[family][3]
    engine = Engine(model, "f32", pool_tokens=pool_tokens, page_tokens=16, n_ctx=n_ctx)
    prompts = {"a": _prompt(golden, 0), "b": _prompt(golden, 1), "c": _prompt(golden, 0)}
    want = {"a": _greedy(golden, 0, 20), "b": _greedy(golden, 1, 20), "c": _greedy(golden, 0, 20)}
    generator = BatchGenerator(model, steps_per_submit=4, prefill_chunk=16, engine=engine, overlap_rounds=False)
    for key, prompt in prompts.items():
        generator.add(key, prompt, GREEDY, 20, stop_ids=frozenset())
    got, _ = _run(generator)
    assert generator.preemptions > 0
    assert got == want
    assert engine.pool.free_slots == engine.pool.n_slots and engine.pool.free_tokens == pool_tokens


def test_recurrent_state_never_goes_back(model: TextModel) -> None:
    """A recurrent state cannot return to an earlier position: sessions refuse to rewind, and the batch never draws
    a constrained token unmasked to check it (which a refused token would undo by going back a position)."""
    assert BatchGenerator(model, check_first=True).check_first is False
    assert BatchGenerator(model).check_first is False
    session = model.new_session()
    try:
        session.prefill([1, 2, 3])
        with pytest.raises(ValueError, match="recurrent"):
            session.rewind(2)
    finally:
        session.close()


@pytest.mark.parametrize("dtype", ["f32", "q8_0"])
def test_gpu_kernels_give_the_reference_tokens(family: str, golden: dict[str, np.ndarray], dtype: str) -> None:
    """The kernels a GPU runs (residual norms folded into the matvecs that read them, the conv layers' in-projection
    among them; rounds overlapped; attention's decode prologue), run here on lavapipe by making the device claim
    not to be a CPU: transformers' greedy tokens for both prompts decoded in one batch, the long one in chunks of
    16, and its logits after the prompt within the parity tests' cosine of 0.99999."""
    from gpu.device import Device

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Device, "is_software", property(lambda self: False))
        gpu_model = load_text_model(str(FAMILIES_DIR / f"{family}.{dtype}.gguf"), kv_dtype="f32", context_length=128,
                                    max_batch=4)
        prompts = {str(i): [int(t) for t in golden[f"{dtype}/prompt_{i}"]] for i in range(2)}
        session = gpu_model.new_session()
        try:
            logits = np.asarray(session.prefill(prompts["1"]), np.float64)
        finally:
            session.close()
        generator = BatchGenerator(gpu_model, steps_per_submit=4, prefill_chunk=16)
        for key, prompt in prompts.items():
            generator.add(key, prompt, GREEDY, 32, stop_ids=frozenset())
        got, _ = _run(generator)
    want = golden[f"{dtype}/logits_1"][0].astype(np.float64)
    assert float(logits @ want / np.linalg.norm(logits) / np.linalg.norm(want)) >= 0.99999
    assert got == {key: [int(t) for t in golden[f"{dtype}/greedy_{key}"]] for key in prompts}


def test_config_reads_layer_kinds_and_a_sliding_window(monkeypatch: pytest.MonkeyPatch) -> None:
    from gguf import Keys

    from models.formats.gguf_file import GGUFFile
    from models.lfm2 import LFM2

    f = GGUFFile(FAMILIES_DIR / "lfm2.f32.gguf")
    c = LFM2.read_config(f)
    assert c.layer_kinds == ("short_conv", "attention", "short_conv") and not any(c.sliding)
    assert [c.attention(i) for i in range(3)] == [False, True, False] and c.kv_heads == (0, 2, 0)
    value = f.value
    monkeypatch.setattr(f, "value", lambda key, *default: 64 if key == Keys.Attention.SLIDING_WINDOW
                        else value(key, *default))
    c = LFM2.read_config(f)
    assert c.window == 64 and c.sliding == (False, True, False)


def test_qwen35_config_reads_layer_kinds_rotary_and_delta_heads() -> None:
    from models.formats.gguf_file import GGUFFile
    from models.qwen35 import DELTA_NET, Qwen35, delta_shape

    f = GGUFFile(FAMILIES_DIR / "qwen35.f32.gguf")
    c = Qwen35.read_config(f)
    assert c.layer_kinds == (DELTA_NET,) * 3 + ("attention",) and c.attention(3) and not c.attention(0)
    assert c.rope_dims == 8 and c.head_dims == (32,) * 4 and c.attn_output_gate
    shape = delta_shape(f)
    assert (shape.h_k, shape.h_v, shape.d_k, shape.d_v, shape.conv_dim) == (2, 2, 16, 16, 96)


def test_head_order_pairs_a_partial_rotary_as_neox_halves() -> None:
    """Partial rotary turns dims (i, i + R/2) for i < R/2; after head_order, the step's NeoX rotation pairs dims
    (j, j + Dh/2): the first R/2 of those pairs must be the rotary's, the rest pairs of unturned dims."""
    from models.text.decoder import head_order

    order = head_order(32, 8)
    assert sorted(order) == list(range(32))
    pairs = {(int(order[j]), int(order[j + 16])) for j in range(16)}
    assert {(i, i + 4) for i in range(4)} <= pairs
    assert all(a >= 8 and b >= 8 for a, b in pairs - {(i, i + 4) for i in range(4)})
