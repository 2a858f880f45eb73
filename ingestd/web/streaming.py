"""Sending a hand-out's pieces to a browser with the reading and hashing of the next
pieces under way while this one goes out.

A hand-out (archive/handout.py) is a plain iterator: each piece is read from the archive
and added to the file's SHA-256 before it is given, the last held back until the hash
matched. Iterated the usual way (one piece fetched in a thread, then sent, then the next
fetched) the hash and the socket take turns; here a worker thread keeps up to ``depth``
pieces ready while the event loop sends, so a download costs about the longer of the two
rather than their sum (hashlib and the socket both let go of the GIL).

Invariant kept: the worker is the only one that ever advances or closes the iterator, so
a hand-out is never touched by two threads at once; a client that goes away stops the
worker, which closes the hand-out (its file) on its own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator

import anyio.to_thread

_running: set[asyncio.Future[None]] = set()  # workers of unfinished sends (kept referenced)


async def read_ahead(chunks: Iterator[bytes], depth: int = 4) -> AsyncIterator[bytes]:
    """``chunks`` as an async iterator, up to ``depth`` pieces fetched ahead in a worker
    thread (the console's thread pool); an error of the iterator is raised here, in
    order, after the pieces before it."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Queue[tuple[bytes | None, BaseException | None]] = asyncio.Queue()
    room = threading.Semaphore(depth)
    stop = threading.Event()

    def tell(item: tuple[bytes | None, BaseException | None]) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(ready.put_nowait, item)

    def fetch() -> None:
        try:
            while True:
                room.acquire()
                if stop.is_set():
                    return
                chunk = next(chunks, None)
                tell((chunk, None))
                if chunk is None:
                    return
        except BaseException as exc:  # handed to the sender, who raises it in its place
            tell((None, exc))
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    worker = asyncio.ensure_future(anyio.to_thread.run_sync(fetch))
    _running.add(worker)
    worker.add_done_callback(_running.discard)
    try:
        while True:
            chunk, error = await ready.get()
            if error is not None:
                raise error
            if chunk is None:
                return
            room.release()
            yield chunk
    finally:
        stop.set()
        room.release()
