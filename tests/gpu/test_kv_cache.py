"""The KV pool's page bookkeeping with prefix caching (no GPU: a stand-in executor records page-table writes).

Pages published under keys are shared by reference, stay cached once no slot holds them, and are reclaimed least
recently used; after any run of sequences every page is free or cached and the page table on the "GPU" matches the
host's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from gpu.kv_cache import KVPool, PoolExhausted
from models.text.images import ImageSpan
from models.text.prefix_cache import page_keys, reusable_pages

PAGE = 4


class _Tensor:
    def __init__(self, shape: Sequence[int]) -> None:
        self.data = np.zeros(int(np.prod(shape)), np.uint32)
        self.nbytes = self.data.nbytes


class _Executor:
    """What KVPool asks of an executor: tensors and writes into them."""

    def tensor(self, name: str, shape: Sequence[int], dtype: str = "f32") -> _Tensor:
        return _Tensor(shape)

    def write(self, tensor: _Tensor, data: np.ndarray, offset_elements: int = 0) -> None:
        flat = np.asarray(data, np.uint32).reshape(-1)
        tensor.data[offset_elements:offset_elements + len(flat)] = flat


def new_pool(n_pages: int = 8, n_slots: int = 4) -> KVPool:
    pool = KVPool(_Executor(), "kv", [8], 4 * PAGE, n_pages * PAGE, n_slots, "f16", page_tokens=PAGE)  # type: ignore[arg-type]
    pool.prefix_caching = True
    return pool


def run_sequence(pool: KVPool, ids: list[int]) -> tuple[int, list[int]]:
    """Admit a prompt as the batch generator does (cached pages first, the rest reserved), publish its full
    pages and close it; the positions it found cached and the pages it held."""
    slot = pool.open_slot()
    found = pool.lookup(page_keys(ids, [], PAGE))
    pages = found[:reusable_pages(len(found), len(ids), [], PAGE)]
    pool.share(slot, pages)
    pool.reserve(slot, len(ids))
    held = list(pool._pages[slot])
    pool.publish(slot, page_keys(ids, [], PAGE))
    pool.close_slot(slot)
    return len(pages) * PAGE, held


def assert_all_back(pool: KVPool) -> None:
    assert pool.free_slots == pool.n_slots
    assert pool.free_tokens == pool.n_pages * PAGE
    assert all(r == 0 for r in pool._refs)
    free = set(pool._free_pages) | set(pool._idle)
    assert free == set(range(pool.n_pages)) and len(pool._free_pages) + len(pool._idle) == pool.n_pages


def test_a_repeated_prompt_takes_the_cached_pages_but_computes_its_last_token() -> None:
    pool = new_pool()
    prompt = list(range(10, 21))  # 11 tokens: two full pages and three tokens
    assert run_sequence(pool, prompt)[0] == 0
    cached, held = run_sequence(pool, prompt)
    assert cached == 2 * PAGE
    aligned = list(range(10, 22))  # 12 tokens, three full pages: the last page is recomputed for its last token
    assert run_sequence(pool, aligned)[0] == 2 * PAGE
    assert run_sequence(pool, aligned)[0] == 2 * PAGE
    assert_all_back(pool)


def test_the_match_ends_at_the_first_differing_page() -> None:
    pool = new_pool()
    run_sequence(pool, list(range(12)) + [99])
    other = list(range(6)) + [50] * 7  # differs inside the second page
    assert run_sequence(pool, other)[0] == PAGE
    assert run_sequence(pool, [7] + list(range(1, 13)))[0] == 0  # differs in the first token: nothing matches


def test_shared_pages_are_held_by_reference_and_never_reclaimed_while_held() -> None:
    pool = new_pool(n_pages=6, n_slots=3)
    prompt = list(range(9))  # two full pages and one token
    run_sequence(pool, prompt)
    a, b = pool.open_slot(), pool.open_slot()
    for slot in (a, b):
        pool.share(slot, pool.lookup(page_keys(prompt, [], PAGE, 2)))
        pool.reserve(slot, len(prompt) + 1)
    assert pool._pages[a][:2] == pool._pages[b][:2] and pool._pages[a][2] != pool._pages[b][2]
    assert np.array_equal(pool.page_table.data.reshape(pool.n_slots, -1)[a], pool._table[a])
    # six pages: two shared, one private each; the two left are free, and more cannot be had
    assert pool.free_tokens == 2 * PAGE
    with pytest.raises(PoolExhausted):
        pool.reserve(a, 4 * PAGE + 1)
    pool.close_slot(a)
    assert pool._refs[pool._pages[b][0]] == 1
    pool.close_slot(b)
    assert_all_back(pool)


def test_cached_pages_are_reclaimed_least_recently_used() -> None:
    pool = new_pool(n_pages=4, n_slots=2)
    first, second = [1] * 5, [2] * 5  # one full page each is published
    run_sequence(pool, first)
    run_sequence(pool, second)
    run_sequence(pool, first)  # first's page is used again: second's is now the least recently used
    assert pool.cached_pages == 2
    slot = pool.open_slot()
    pool.reserve(slot, 3 * PAGE)  # two free pages and one cached: second's goes
    assert pool.lookup(page_keys(second, [], PAGE)) == []
    assert len(pool.lookup(page_keys(first, [], PAGE))) == 1
    pool.close_slot(slot)
    assert_all_back(pool)


def test_a_full_pool_runs_many_prompts_and_every_page_comes_back() -> None:
    rng = np.random.default_rng(0)
    pool = new_pool(n_pages=10, n_slots=3)
    headers = [list(rng.integers(0, 50, 8)) for _ in range(3)]
    open_slots: list[tuple[int, list[int]]] = []
    hits = 0
    for i in range(200):
        if len(open_slots) == 3 or (open_slots and rng.random() < 0.4):
            slot, ids = open_slots.pop(int(rng.integers(len(open_slots))))
            pool.publish(slot, page_keys(ids, [], PAGE))
            pool.close_slot(slot)
            continue
        ids = [int(t) for t in headers[i % 3]] + [int(t) for t in rng.integers(0, 50, int(rng.integers(1, 6)))]
        slot = pool.open_slot()
        found = pool.lookup(page_keys(ids, [], PAGE))
        pages = found[:reusable_pages(len(found), len(ids), [], PAGE)]
        pool.share(slot, pages)
        hits += len(pages)
        try:
            pool.reserve(slot, len(ids))
        except PoolExhausted:
            pool.close_slot(slot)
            continue
        open_slots.append((slot, ids))
        assert sum(pool._refs) == sum(len(p) for p in pool._pages)
    for slot, ids in open_slots:
        pool.publish(slot, page_keys(ids, [], PAGE))
        pool.close_slot(slot)
    assert hits > 50
    assert_all_back(pool)
    pool.forget_prefixes()
    assert pool.cached_pages == 0
    assert_all_back(pool)


def test_keys_cover_images_and_stop_at_one_without_a_digest() -> None:
    ids = list(range(12))
    image = np.zeros((3, 2), np.float32)
    a = page_keys(ids, [ImageSpan(5, image, "cat")], PAGE)
    b = page_keys(ids, [ImageSpan(5, image, "dog")], PAGE)
    assert a[0] == b[0] and a[1] != b[1] and a[2] != b[2]  # the image lies in the second page; the chain carries it
    assert len(page_keys(ids, [ImageSpan(5, image)], PAGE)) == 1
    # a reused run never cuts an image: one across the second page boundary ends it at the first
    assert reusable_pages(3, 13, [ImageSpan(7, image, "cat")], PAGE) == 3
    assert reusable_pages(2, 13, [ImageSpan(7, image, "cat")], PAGE) == 1
    assert reusable_pages(2, 13, [ImageSpan(2, image, "a"), ImageSpan(6, image, "b")], PAGE) == 0
    assert reusable_pages(3, 12, [], PAGE) == 2  # the last token's page is computed


def test_a_published_page_is_given_back_before_a_reset_session_writes_it() -> None:
    pool = new_pool()
    slot = pool.open_slot()
    pool.reserve(slot, 2 * PAGE)
    pool.publish(slot, page_keys(list(range(8)), [], PAGE))
    assert pool.holds_published(slot)
    pool.release_pages(slot)
    assert pool._pages[slot] == [] and pool.cached_pages == 2
    pool.close_slot(slot)
    assert_all_back(pool)
