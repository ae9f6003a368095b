"""The embedded engine under the store owner's two slots at once: readers search from several
threads while another thread upserts and deletes and a third rebuilds the collection
(next generation, graph built in a child process, alias switch, old generation dropped), on
a real qdrant-edge store.

qdrant-edge-py holds the GIL inside each call, so the engine never sees two calls at once
from one process; what is tested is what the owner relies on around that: every search
answers (never fails, never comes back empty) while shards are created, built, switched and
dropped under it, the writes all land, and a graph build does not stall the readers.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import numpy as np

from pipelines.index.vectors import CollectionParams, ContextFusion, VectorPoint
from workers.adapters.vector_edge import EdgeIndex

DIM = 64
ALIAS = "mh_episodic"
TENANTS = ("acme", "globex")
# Enough points that a generation's HNSW build takes a while (segments past the engine's
# full-scan threshold get a graph), few enough to keep the test to seconds.
SEEDED = 6_000
READERS = 3


def _points(rng: np.random.Generator, start: int, n: int) -> list[VectorPoint]:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return [
        VectorPoint(
            id=uuid.UUID(int=start + i + 1),
            vector=vectors[i].tolist(),
            context=vectors[(i + 1) % n].tolist(),
            payload={"tenant_id": TENANTS[(start + i) % 2], "task_id": "main", "level": 0},
        )
        for i in range(n)
    ]


def _ids(index: EdgeIndex, collection: str) -> set[uuid.UUID]:
    out: set[uuid.UUID] = set()
    offset = None
    while True:
        ids, offset = index.scroll_ids(collection, offset, limit=1000)
        out.update(ids)
        if offset is None:
            return out


def _sync(index: EdgeIndex, old: str, new: str) -> None:
    """Make ``new`` hold what ``old`` holds (a rebuild's catch-up, PostgreSQL left out)."""
    old_ids, new_ids = _ids(index, old), _ids(index, new)
    missing = sorted(old_ids - new_ids)
    for start in range(0, len(missing), 1000):
        index.upsert(new, index.retrieve(old, missing[start : start + 1000]))
    index.delete(new, sorted(new_ids - old_ids))


def _in_thread(errors: list[BaseException], fn: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_searches_upserts_and_rebuilds_from_several_threads_on_one_store(
    tmp_path: Path,
) -> None:
    # given a store of SEEDED points behind an alias, its graph built
    rng = np.random.default_rng(7)
    index = EdgeIndex(tmp_path / "qdrant")
    params = CollectionParams(hnsw_m=8, hnsw_ef_construct=32, search_ef=32)
    index.ensure_collection(ALIAS, DIM, params)
    seeded = _points(rng, 0, SEEDED)
    for start in range(0, SEEDED, 1000):
        index.upsert(ALIAS, seeded[start : start + 1000])
    index.build_index(ALIAS)  # behind the alias: built in place
    queries = rng.standard_normal((64, DIM)).astype(np.float32).tolist()
    stop = threading.Event()
    errors: list[BaseException] = []
    answered: list[float] = []  # when each search returned
    empty: list[str] = []
    written: list[uuid.UUID] = []
    deleted: list[uuid.UUID] = []
    builds: list[tuple[float, float]] = []

    def read(seed: int) -> None:
        turn = seed
        while not stop.is_set():
            tenant = TENANTS[turn % 2]
            fusion = ContextFusion(context=queries[-1], content_weight=0.7, context_weight=0.3)
            answers = index.search_many(
                ALIAS, queries[turn % 32 : turn % 32 + 3], tenant_id=tenant, task_id="main",
                limit=10, fusion=fusion, with_payload=False,
            )  # fmt: skip
            for hits in answers:
                if len(hits) != 10:
                    empty.append(f"{tenant}: {len(hits)} hits")
            answered.append(time.monotonic())
            turn += 1

    # The owner runs writes and a rebuild's last catch-up and switch on one slot, one at a
    # time; the build before it overlaps the writes.
    slot = threading.Lock()

    def write() -> None:
        start = SEEDED
        while not stop.is_set():
            batch = _points(rng, start, 50)
            with slot:
                index.upsert(ALIAS, batch)
                written.extend(p.id for p in batch)
                # delete some of the new points again (never the seeded ones readers need)
                gone = [p.id for p in batch[:5]]
                index.delete(ALIAS, gone)
                deleted.extend(gone)
            start += 50
            time.sleep(0.002)

    def rebuild() -> None:
        for generation in (2, 3):
            old = index.resolve(ALIAS)
            assert old is not None
            new = f"{ALIAS}__g{generation}"
            index.create_collection(new, DIM, params)
            _sync(index, old, new)
            started = time.monotonic()
            index.build_index(new)
            builds.append((started, time.monotonic()))
            with slot:  # the writes and deletes that landed during the build
                _sync(index, old, new)
                previous = index.switch_alias(ALIAS, new)
            assert previous == old
            index.drop_collection(previous)

    # when readers, a writer and a rebuilder run at once
    threads = [_in_thread(errors, lambda s=s: read(s)) for s in range(READERS)]  # type: ignore[misc]
    writer = _in_thread(errors, write)
    rebuilder = _in_thread(errors, rebuild)
    rebuilder.join(timeout=240)
    stop.set()
    for thread in [*threads, writer]:
        thread.join(timeout=30)

    # then nothing failed and every search answered in full
    assert not errors, errors
    assert not rebuilder.is_alive()
    assert not empty, empty[:5]
    assert len(builds) == 2 and len(answered) > 100

    # and the readers kept answering through each graph build: the longest pause between
    # two answers is a small part of the build (an in-process build holds the GIL for all of it)
    for started, ended in builds:
        during = [started, *(t for t in answered if started <= t <= ended), ended]
        longest_pause = max(b - a for a, b in pairwise(during))
        assert len(during) > 10, (ended - started, len(during))
        assert longest_pause < (ended - started) / 4, (longest_pause, ended - started)

    # and the store holds exactly the seeded and the surviving written points, under g3
    assert index.resolve(ALIAS) == f"{ALIAS}__g3"
    assert index.collections() == [f"{ALIAS}__g3"]
    expected = SEEDED + len(written) - len(deleted)
    assert index.count(ALIAS) == expected
    index.close()


def test_an_optimize_that_would_build_a_graph_in_place_is_flagged(tmp_path: Path) -> None:
    # given a serving collection of 384-d points past the engine's indexing threshold
    # (10,000 KB of one vector's data: ~6,700 points), none in a graph yet
    rng = np.random.default_rng(3)
    index = EdgeIndex(tmp_path / "qdrant")
    index.ensure_collection(ALIAS, 384, CollectionParams(hnsw_m=8, hnsw_ef_construct=16))
    vectors = rng.standard_normal((7_500, 384)).astype(np.float32)
    for start in range(0, 7_500, 2_500):
        index.upsert(ALIAS, [
            VectorPoint(id=uuid.UUID(int=start + i + 1), vector=vectors[start + i].tolist(),
                        payload={"tenant_id": "acme", "task_id": "main"})
            for i in range(2_500)
        ])  # fmt: skip

    # then an in-place optimize would stall the process, and once built it would not
    assert index.optimize_would_stall(ALIAS)
    index.optimize(ALIAS)
    assert not index.optimize_would_stall(ALIAS)

    # and a collection behind no alias never stalls a reader: it is built in a child
    index.create_collection(f"{ALIAS}__g9", 384, CollectionParams())
    index.upsert(
        f"{ALIAS}__g9", index.retrieve(ALIAS, [uuid.UUID(int=i + 1) for i in range(7_000)])
    )
    assert not index.optimize_would_stall(f"{ALIAS}__g9")
    index.close()
