"""The asyncio twin of :class:`coflow.Client`.

Each call runs the blocking client's call (which releases the GIL) on a thread of the client's
own, so one implementation of errors, TLS and streaming serves both. A client runs up to
``max_calls`` calls at once (1,024 by default; more wait for a thread), apart from the event loop's
default executor: the gets of a coflow that waits for all its gets run together, and a status call
does not wait behind long gets. Cancelling a call (its task cancelled, or timed out by
``asyncio.wait_for``) cancels the blocking call too, within about 100 ms: a get stops taking its
coflow's bandwidth and gives its thread back. A call cancelled after its request left may still
take effect: a cancelled ``register`` can leave a coflow whose id never came back, which a lease
(``lease_s``) removes. At exit, before Python waits for the clients' threads, the calls whose event
loop no longer runs (a loop closed or stopped with their tasks pending) are cancelled, so that the
interpreter does not wait for a get no one can await any more.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar

from . import _coflow
from .client import Client as _SyncClient
from .client import TlsFiles, _call, _Chunked, _text, _uint
from .sim import PathArg

__all__ = ["Client", "Stream"]

T = TypeVar("T")

#: How many calls one client runs at once by default.
MAX_CALLS = 1024

# The calls of every client in flight, each with the event loop that awaits it.
_IN_FLIGHT: Set[Tuple[asyncio.AbstractEventLoop, "_coflow.Cancel"]] = set()
_IN_FLIGHT_LOCK = threading.Lock()


def _cancel_abandoned() -> None:
    """Cancels the calls in flight whose event loop no longer runs: their answers can never be
    taken. A loop that runs (in a thread Python is about to wait for) keeps its calls."""
    with _IN_FLIGHT_LOCK:
        calls = list(_IN_FLIGHT)
    for loop, cancel in calls:
        if not loop.is_running():
            cancel.cancel()


# At exit, Python waits for the executors' threads (a hook of concurrent.futures, which this
# module imported first) after the hooks registered later than it, and before `atexit`'s:
# an abandoned call is cancelled before that wait, rather than waited for as long as its get.
_register_atexit = getattr(threading, "_register_atexit", None)
if _register_atexit is not None:
    _register_atexit(_cancel_abandoned)


async def _run(
    executor: Optional[ThreadPoolExecutor],
    f: Callable[..., T],
    *args: Any,
    discard: Optional[Callable[[T], None]] = None,
    **kwargs: Any,
) -> T:
    """Runs ``f(*args, **kwargs)`` on a thread of ``executor``, cancelled with the awaiting task;
    a result that comes after all the same (the call was cancelled too late to stop it) is given
    to ``discard``, rather than left for the garbage collector to free at some later time."""
    if executor is None:
        # A closed client: its calls, and the chunks of its streams, fail at once, never on the
        # event loop's thread.
        raise ValueError("the client is closed")
    loop = asyncio.get_running_loop()
    cancel = _coflow.Cancel()

    def call() -> T:
        # The calls of this executor thread answer to this task's cancel until it returns.
        _coflow._cancel_with(cancel)
        try:
            return f(*args, **kwargs)
        finally:
            _coflow._cancel_with(None)

    entry = (loop, cancel)
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT.add(entry)
    future = executor.submit(call)
    try:
        return await asyncio.wrap_future(future, loop=loop)
    except asyncio.CancelledError:
        cancel.cancel()
        if discard is not None:
            future.add_done_callback(lambda done: _discard(done, discard))
        raise
    finally:
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT.discard(entry)


def _discard(done: "Future[T]", discard: Callable[[T], None]) -> None:
    if not done.cancelled() and done.exception() is None:
        discard(done.result())


class Client:
    """An asyncio client of a coflow cluster; arguments as :class:`coflow.Client`, and
    ``max_calls``, how many of its calls run at once (each on a thread of its own, made as
    needed and kept until the client closes).

    Use ``async with coflow.aio.Client(...) as c:``; every method is a coroutine.
    """

    def __init__(
        self,
        coordinator: str = "http://127.0.0.1:7070",
        agent: str = "http://127.0.0.1:7071",
        token: Optional[str] = None,
        tls: Optional[TlsFiles] = None,
        timeout_s: Optional[float] = None,
        max_calls: int = MAX_CALLS,
    ) -> None:
        max_calls = _uint(max_calls, "max_calls", 1 << 20)
        if max_calls == 0:
            raise ValueError("max_calls must be at least 1")
        self._sync = _SyncClient(coordinator, agent, token=token, tls=tls, timeout_s=timeout_s)
        self._executor: Optional[ThreadPoolExecutor] = ThreadPoolExecutor(max_calls, thread_name_prefix="coflow-aio")

    async def register(
        self,
        num_flows: int,
        name: str = "",
        kind: str = "",
        deadline_s: Optional[float] = None,
        parents: Sequence[int] = (),
        weight: float = 1.0,
        all_gets_timeout_s: Optional[float] = None,
        lease_s: Optional[float] = None,
    ) -> int:
        """Registers a coflow of ``num_flows`` pieces and returns its id."""
        return await _run(
            self._executor,
            self._sync.register,
            num_flows, name, kind, deadline_s, parents, weight, all_gets_timeout_s, lease_s
        )

    async def renew(self, coflows: Iterable[int]) -> List[int]:
        """Renews the leases of ``coflows``; returns the ids not renewed."""
        return await _run(self._executor, self._sync.renew, coflows)

    async def put(self, coflow: int, data_id: str, data: bytes) -> int:
        """Stores ``data`` as piece ``data_id`` of ``coflow``; returns its size."""
        return await _run(self._executor, self._sync.put, coflow, data_id, data)

    async def put_file(self, coflow: int, data_id: str, path: PathArg, length: int, offset: int = 0) -> int:
        """Stores a segment of a file in the agent's data directory (with TLS, beneath the
        client's own directory ``clients/NAME``) as piece ``data_id``."""
        return await _run(self._executor, self._sync.put_file, coflow, data_id, path, length, offset)

    async def get(self, coflow: int, data_id: str) -> bytes:
        """Fetches piece ``data_id`` of ``coflow``."""
        return await _run(self._executor, self._sync.get, coflow, data_id)

    def get_stream(self, coflow: int, data_id: str) -> "Stream":
        """Fetches piece ``data_id`` of ``coflow`` chunk by chunk, as a :class:`Stream` (``async
        for chunk in client.get_stream(...)``), whose first chunk's wait starts the get. It
        yields every byte of the piece, in order, and then stops, or it raises: a wait for a
        chunk that is cancelled (``asyncio.wait_for`` timing out) ends the stream, and every later
        ``__anext__`` raises ``ValueError``."""
        return Stream(self, _uint(coflow, "coflow", 2**64 - 1), _text(data_id, "data_id"))

    async def seal(self, coflow: int) -> None:
        """Says no more puts will come for ``coflow``."""
        await _run(self._executor, self._sync.seal, coflow)

    async def unregister(self, coflow: int) -> None:
        """Removes ``coflow``."""
        await _run(self._executor, self._sync.unregister, coflow)

    async def status(self) -> Dict[str, Any]:
        """What the coordinator is doing."""
        return await _run(self._executor, self._sync.status)

    async def close(self) -> None:
        """Drops the connections; calls under way finish, and the client's threads end with them;
        later calls, and the next chunks of its streams, raise ``ValueError``, as a closed file's do."""
        self._sync.close()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _close_chunks(chunks: "_coflow.Chunks") -> None:
    chunks.close()


class Stream(_Chunked):
    """The chunks of one piece, in order (:meth:`Client.get_stream`): an asynchronous iterator,
    and an asynchronous context manager that closes it.

    Its first ``__anext__`` starts the get. It yields every byte of the piece and then stops, or
    it raises. Once an exception has come out of a wait for a chunk (an error of the transfer, or
    the wait cancelled: its task cancelled, ``asyncio.wait_for`` timing out), the stream has ended
    short: its transfer ends at once (the cancelled call stops as any call of the client does), a
    chunk may have been lost in the wait, and every later ``__anext__`` raises ``ValueError``,
    whose ``__cause__`` is that exception (a ``CancelledError`` for a cancelled wait), rather than
    stopping as an async generator does once an exception left it; get the piece again. A
    per-chunk timeout is therefore no way to poll a stream: time the whole read instead.
    :meth:`aclose` (or :meth:`close`) ends an unfinished stream at once; later ``__anext__`` calls
    raise ``ValueError``. A stream dropped unfinished ends its transfer too, while one kept unread
    holds its flow, and the bandwidth the coordinator gives it, until the agent's idle timeout
    ends the get. One ``__anext__`` at a time: a second, while one waits, raises
    ``RuntimeError``, as an async generator's does.
    """

    def __init__(self, client: Client, coflow: int, data_id: str) -> None:
        super().__init__(None)
        self._client = client
        self._coflow = coflow
        self._data_id = data_id

    def __aiter__(self) -> "Stream":
        return self

    async def __anext__(self) -> bytes:
        if self._waiting:
            raise RuntimeError("anext(): the stream is already waiting for its next chunk")
        if self._complete():
            raise StopAsyncIteration
        with self._wait():
            chunks = self._chunks
            if chunks is None:
                # The get starts with the first chunk's wait.
                # A get whose start is cancelled as it comes ends at once, not when its
                # connection is collected.
                start = self._client._sync._c.get_stream
                chunks = await _run(
                    self._client._executor, _call, start, self._coflow, self._data_id, discard=_close_chunks
                )
                if self._state != "open":
                    # Closed while it started.
                    chunks.close()
                    self._complete()
                self._chunks = chunks
            chunk = await _run(self._client._executor, _call, chunks.next)
            if chunk is not None:
                return chunk
            self._done()
        raise StopAsyncIteration

    def close(self) -> None:
        """Ends the transfer, unless the piece came whole; later ``__anext__`` calls then raise
        ``ValueError`` (and a wait under way does)."""
        self._end(None)

    async def aclose(self) -> None:
        """:meth:`close`, as a coroutine (as an async generator's, for ``contextlib.aclosing``)."""
        self.close()

    async def __aenter__(self) -> "Stream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
