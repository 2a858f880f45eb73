"""The console's read-ahead of a hand-out (ingestd/web/streaming.py): every piece in order,
never more than a few fetched ahead, an error in its place after the pieces before it,
and a client that goes away closes the hand-out on the worker's thread, once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from ingestd.web.streaming import read_ahead


class Pieces:
    """A hand-out stand-in: numbered pieces, counts how far it was read and who closed it."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.given = 0
        self.closed_by: list[str] = []
        self.busy = threading.Lock()

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        assert self.busy.acquire(blocking=False), "two threads advanced the hand-out at once"
        try:
            if self.given == self.fail_at:
                raise ValueError(f"piece {self.given} is not the archive's")
            if self.given >= self.n:
                raise StopIteration
            self.given += 1
            return b"%d;" % (self.given - 1)
        finally:
            self.busy.release()

    def close(self) -> None:
        self.closed_by.append(threading.current_thread().name)


async def _take(pieces: Pieces, count: int | None = None, depth: int = 4) -> list[bytes]:
    got = []
    stream = read_ahead(pieces, depth)
    try:
        async for chunk in stream:
            got.append(chunk)
            await asyncio.sleep(0.01)  # a slow client: the worker gets ahead if it may
            assert pieces.given - len(got) <= depth + 1
            if count is not None and len(got) == count:
                break
    finally:
        await stream.aclose()
    return got


def _closed(pieces: Pieces) -> list[str]:
    deadline = time.monotonic() + 30
    while not pieces.closed_by and time.monotonic() < deadline:
        time.sleep(0.01)
    return pieces.closed_by


def test_every_piece_in_order_and_the_hand_out_closed_once() -> None:
    pieces = Pieces(50)
    got = asyncio.run(_take(pieces))
    assert got == [b"%d;" % i for i in range(50)]
    assert len(_closed(pieces)) == 1


def test_an_error_comes_after_the_pieces_before_it() -> None:
    pieces = Pieces(50, fail_at=7)
    got: list[bytes] = []

    async def run() -> None:
        async for chunk in read_ahead(pieces, 2):
            got.append(chunk)

    with pytest.raises(ValueError, match="piece 7"):
        asyncio.run(run())
    assert got == [b"%d;" % i for i in range(7)]
    assert len(_closed(pieces)) == 1


def test_a_client_that_goes_away_stops_the_reading_and_closes_on_the_worker() -> None:
    pieces = Pieces(10_000)
    main = threading.current_thread().name
    got = asyncio.run(_take(pieces, count=3, depth=3))
    assert len(got) == 3
    closed = _closed(pieces)
    assert len(closed) == 1 and closed[0] != main
    assert pieces.given <= 3 + 3 + 1  # it stopped reading, far short of the file
