"""The asyncio twin of :class:`coflow.Client`.

Each call runs the blocking client's call (which releases the GIL) on the event loop's default
executor, so one implementation of errors, TLS and streaming serves both. Cancelling a call (its
task cancelled, or timed out by ``asyncio.wait_for``) cancels the blocking call too, within about
100 ms: a get stops taking its coflow's bandwidth and gives its executor thread back.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Dict, Iterable, List, Optional, Sequence, TypeVar

from . import _coflow
from .client import Client as _SyncClient
from .client import TlsFiles, _call, _text, _uint

__all__ = ["Client"]

T = TypeVar("T")


async def _run(f: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    cancel = _coflow.Cancel()

    def call() -> T:
        # The calls of this executor thread answer to this task's cancel until it returns.
        _coflow._cancel_with(cancel)
        try:
            return f(*args, **kwargs)
        finally:
            _coflow._cancel_with(None)

    try:
        return await loop.run_in_executor(None, call)
    except asyncio.CancelledError:
        cancel.cancel()
        raise


class Client:
    """An asyncio client of a coflow cluster; arguments as :class:`coflow.Client`.

    Use ``async with coflow.aio.Client(...) as c:``; every method is a coroutine.
    """

    def __init__(
        self,
        coordinator: str = "http://127.0.0.1:7070",
        agent: str = "http://127.0.0.1:7071",
        token: Optional[str] = None,
        tls: Optional[TlsFiles] = None,
        timeout_s: Optional[float] = None,
    ) -> None:
        self._sync = _SyncClient(coordinator, agent, token=token, tls=tls, timeout_s=timeout_s)

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
            self._sync.register, num_flows, name, kind, deadline_s, parents, weight, all_gets_timeout_s, lease_s
        )

    async def renew(self, coflows: Iterable[int]) -> List[int]:
        """Renews the leases of ``coflows``; returns the ids not renewed."""
        return await _run(self._sync.renew, coflows)

    async def put(self, coflow: int, data_id: str, data: bytes) -> int:
        """Stores ``data`` as piece ``data_id`` of ``coflow``; returns its size."""
        return await _run(self._sync.put, coflow, data_id, data)

    async def put_file(self, coflow: int, data_id: str, path: str, length: int, offset: int = 0) -> int:
        """Stores a segment of a file in the agent's data directory (with TLS, beneath the
        client's own directory ``clients/NAME``) as piece ``data_id``."""
        return await _run(self._sync.put_file, coflow, data_id, path, length, offset)

    async def get(self, coflow: int, data_id: str) -> bytes:
        """Fetches piece ``data_id`` of ``coflow``."""
        return await _run(self._sync.get, coflow, data_id)

    async def get_stream(self, coflow: int, data_id: str) -> AsyncIterator[bytes]:
        """Fetches piece ``data_id`` of ``coflow`` chunk by chunk."""
        coflow, data_id = _uint(coflow, "coflow", 2**64 - 1), _text(data_id, "data_id")
        chunks: _coflow.Chunks = await _run(_call, self._sync._c.get_stream, coflow, data_id)
        while True:
            chunk = await _run(_call, chunks.next)
            if chunk is None:
                return
            yield chunk

    async def seal(self, coflow: int) -> None:
        """Says no more puts will come for ``coflow``."""
        await _run(self._sync.seal, coflow)

    async def unregister(self, coflow: int) -> None:
        """Removes ``coflow``."""
        await _run(self._sync.unregister, coflow)

    async def status(self) -> Dict[str, Any]:
        """What the coordinator is doing."""
        return await _run(self._sync.status)

    async def close(self) -> None:
        """Drops the connections."""
        self._sync.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
