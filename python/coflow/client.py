"""The SDK: register coflows, put and get their data through the local agent.

:class:`Client` wraps the Rust SDK (``coflow-client``) through the extension, on a tokio runtime
the extension owns; every call releases the GIL while it waits, so threads of a Python framework
run their puts and gets side by side.
"""

from __future__ import annotations

import atexit
import decimal
import math
import numbers
import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

from . import _coflow
from .errors import from_kind
from .sim import PathArg, _path

__all__ = ["Client", "Stream"]

T = TypeVar("T")

# A daemon thread still inside a call when the interpreter finalizes would be ended there, across
# the extension's frames, which aborts the process: at exit (after Python joined the threads that
# are not daemons), calls in flight are cancelled (they raise RuntimeError in their threads) and
# given a second to return. Calls made later, by exit hooks that run after this one, are served.
atexit.register(_coflow._close_calls, 1.0)

TlsFiles = Tuple[PathArg, PathArg, PathArg]

# The longest a control call may be given (a year), the extension's bound.
_MAX_TIMEOUT_S = _coflow.MAX_TIMEOUT_S


def _uint(value: Any, what: str, most: int) -> int:
    """A whole number from 0 to ``most`` (what the protocol's unsigned field holds), not a
    boolean."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what}: expected a non-negative integer, got {value!r}")
    n = int(value)
    if not 0 <= n <= most:
        raise ValueError(f"{what}: expected an integer from 0 to {most}, got {value!r}")
    return n


def _number(value: Any, what: str, expected: str, ok: Callable[[float], bool]) -> float:
    """A finite real number that ``ok`` accepts: an ``int``, ``float``, ``Fraction``,
    ``Decimal`` or numpy's, not a boolean or a string; else a ``ValueError`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, decimal.Decimal)):
        raise ValueError(f"{what}: expected {expected}, got {value!r}")
    try:
        x = float(value)
    except (OverflowError, ValueError):
        x = math.nan
    if not (math.isfinite(x) and ok(x)):
        raise ValueError(f"{what}: expected {expected}, got {value!r}")
    return x


def _seconds(value: Any, what: str, most: float, said: str) -> Optional[float]:
    """A number of seconds from 0 to ``most`` (``said`` in words), or ``None``."""
    if value is None:
        return None
    expected = f"a non-negative number of seconds up to {said} ({most:g}), or None"
    return _number(value, what, expected, lambda x: 0 <= x <= most)


def _text(value: Any, what: str) -> str:
    """A string the protocol can carry (UTF-8: no lone surrogate), else a ``ValueError``
    naming ``what``."""
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what}: not valid text (a lone surrogate at {e.start}), got {value!r}") from None
    return value


def _short_text(value: Any, what: str, most: int) -> str:
    """A string of at most ``most`` bytes of UTF-8 (a bound of the protocol), else a
    ``ValueError`` naming ``what``."""
    n = len(_text(value, what).encode("utf-8"))
    if n > most:
        raise ValueError(f"{what}: at most {most} bytes of UTF-8, got {n}")
    return value


def _is_buffer(data: Any) -> bool:
    """Whether ``data`` exposes its bytes (``bytes``, ``bytearray``, ``memoryview``, numpy)."""
    try:
        memoryview(data)
    except TypeError:
        return False
    return True


def _call(f: Callable[..., T], *args: Any) -> T:
    """Calls into the extension, raising the exception class of the service's error kind."""
    try:
        return f(*args)
    except _coflow.ServiceError as e:
        kind, message = e.args
        raise from_kind(kind, message) from None


class _Chunked:
    """What a stream of chunks remembers between waits (:class:`Stream`, ``coflow.aio.Stream``):
    whether its piece came whole, or what ended it before."""

    def __init__(self, chunks: Optional[_coflow.Chunks]) -> None:
        self._chunks = chunks
        # "open", "complete" (every byte came), or "ended" (before the piece's end: why in _error,
        # None for a reader's close).
        self._state = "open"
        self._error: Optional[BaseException] = None
        self._waiting = False

    def _complete(self) -> bool:
        """Whether the piece came whole; raises ``ValueError`` for a stream that ended short."""
        if self._state == "open":
            return False
        if self._state == "complete":
            return True
        if self._error is None:
            raise ValueError("the stream is closed")
        error = ValueError(
            f"the stream is closed: {type(self._error).__name__} ended it before the end of its piece, "
            "so the chunks it yielded are not the whole piece: get the piece again"
        )
        error.__cause__ = self._error
        raise error

    def _done(self) -> None:
        """Every byte came (the extension has already let go of the transfer)."""
        self._state, self._chunks = "complete", None

    def _wait(self) -> "_Waiting":
        """Guards one wait for the next chunk: an exception leaving it ends the stream short."""
        return _Waiting(self)

    def _end(self, error: Optional[BaseException]) -> None:
        """Ends an open stream short, for ``error`` (``None``: the reader closed it), and ends its
        transfer at once."""
        if self._state != "open":
            return
        self._state, self._error = "ended", error
        chunks, self._chunks = self._chunks, None
        if chunks is not None:
            chunks.close()


class _Waiting:
    """A wait for a stream's next chunk (:meth:`_Chunked._wait`): marks the stream waiting, and
    ends it short with the exception that leaves the wait, if one does (a signal handler's
    included, wherever in the block it comes: the chunk it interrupted may be lost)."""

    def __init__(self, stream: _Chunked) -> None:
        self._stream = stream

    def __enter__(self) -> None:
        self._stream._waiting = True

    def __exit__(self, kind: Any, error: Optional[BaseException], trace: Any) -> None:
        self._stream._waiting = False
        if error is not None:
            self._stream._end(error)


class Stream(_Chunked):
    """The chunks of one piece, in order (:meth:`Client.get_stream`): an iterator, and a context
    manager that closes it.

    It yields every byte of the piece and then stops, or it raises. Once an exception has come
    out of a wait for the next chunk (an error of the transfer, such as :class:`ClientDeparted`,
    or one raised into the wait: a signal handler's, ``KeyboardInterrupt``), the stream has ended
    short: its transfer ends at once, a chunk may have been lost in the wait, and every later
    ``next`` raises ``ValueError``, whose ``__cause__`` is that exception, rather than stopping as
    a generator does once an exception left it; get the piece again. :meth:`close` ends an
    unfinished stream (at once, also for a ``next`` that waits on another thread); later ``next``
    calls raise ``ValueError``. A stream dropped unfinished ends its transfer too, while one kept
    unread holds its flow, and the bandwidth the coordinator gives it, until the agent's idle
    timeout ends the get. One ``next`` at a time: a second thread's raises ``ValueError``, as a
    generator's does.
    """

    def __init__(self, chunks: _coflow.Chunks) -> None:
        super().__init__(chunks)

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> bytes:
        if self._waiting:
            raise ValueError("the stream is already waiting for its next chunk in another thread")
        if self._complete():
            raise StopIteration
        chunks = self._chunks
        if chunks is None:
            # Closed by another thread since.
            raise ValueError("the stream is closed")
        with self._wait():
            chunk = _call(chunks.next)
            if chunk is not None:
                return chunk
            self._done()
        raise StopIteration

    def close(self) -> None:
        """Ends the transfer, unless the piece came whole; later ``next`` calls then raise
        ``ValueError``."""
        self._end(None)

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    """A connection to a coflow cluster: the coordinator and the agent on this machine.

    ``token`` is the cluster token (default: the ``COFLOW_TOKEN`` environment variable);
    ``tls=(ca, cert, key)`` names the PEM files of mutual TLS instead.
    ``timeout_s`` bounds control calls (register, put, seal); gets last as long as the schedule
    says, but one whose agent stops answering (its process stopped, its host gone) raises
    :class:`AgentUnreachable` within about 20 s, when the client's ping goes unanswered.
    Connections open on the first call. Usable as a context manager.
    """

    def __init__(
        self,
        coordinator: str = "http://127.0.0.1:7070",
        agent: str = "http://127.0.0.1:7071",
        token: Optional[str] = None,
        tls: Optional[TlsFiles] = None,
        timeout_s: Optional[float] = None,
    ) -> None:
        if token is not None and tls is not None:
            raise ValueError("token: give the cluster token or tls=(ca, cert, key), not both")
        if token is None and tls is None:
            token = os.environ.get("COFLOW_TOKEN")
        for what, url in (("coordinator", coordinator), ("agent", agent)):
            if isinstance(url, str):
                _text(url, what)
        if isinstance(token, str):
            try:
                token.encode("utf-8")
            except UnicodeEncodeError as e:
                # The token itself is a secret: the message does not repeat it.
                raise ValueError(f"token: not valid text (a lone surrogate at {e.start})") from None
        tls_paths = None
        if tls is not None:
            # A string is iterable too, but its letters are not three paths.
            one = isinstance(tls, (str, bytes, os.PathLike)) or not isinstance(tls, Iterable)
            parts = () if one else tuple(tls)
            if len(parts) != 3 or not all(isinstance(p, (str, bytes, os.PathLike)) for p in parts):
                raise ValueError(f"tls: expected (ca, cert, key), three paths, got {tls!r}")
            tls_paths = tuple(_path(p, f"tls {what}") for p, what in zip(parts, ("ca", "cert", "key")))
        if timeout_s is not None:
            expected = "a positive number of seconds, up to a year"
            timeout_s = _number(timeout_s, "timeout_s", expected, lambda x: 0 < x <= _MAX_TIMEOUT_S)
        self.coordinator = coordinator
        self.agent = agent
        self._inner: Optional[_coflow.Client] = _call(
            _coflow.Client, coordinator, agent, token, tls_paths, timeout_s
        )

    @property
    def _c(self) -> _coflow.Client:
        if self._inner is None:
            raise ValueError("the client is closed")
        return self._inner

    def register(
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
        """Registers a coflow of ``num_flows`` pieces and returns its id.

        ``all_gets_timeout_s`` (up to a day) makes gets wait until every one of them arrived (or
        that long), so the coflow is scheduled whole; ``deadline_s`` (up to a year) is relative to
        registration; ``lease_s`` (1 to 86,400 seconds) has the coordinator unregister the coflow
        unless :meth:`renew` names it within that long of its registration and of each renewal.
        ``parents`` (coflows this one depends on) put it in the earliest job among those still
        registered, which job-aware policies (``aalo-job``) rank together; naming another
        identity's coflow raises ``PermissionDenied``. The protocol's bounds (``num_flows`` up to 10,000,000, ``name`` 256 and ``kind`` 64 bytes
        of UTF-8, 1,024 ``parents``) are checked here: a value past one is a ``ValueError``
        naming its keyword.
        """
        num_flows = _uint(num_flows, "num_flows", _coflow.MAX_NUM_FLOWS)
        if isinstance(parents, (str, bytes)) or not isinstance(parents, Iterable):
            raise ValueError(f"parents: expected a list of coflow ids, got {parents!r}")
        parent_ids = [_uint(p, "parents", 2**64 - 1) for p in parents]
        if len(parent_ids) > _coflow.MAX_PARENTS:
            raise ValueError(f"parents: at most {_coflow.MAX_PARENTS} coflows, got {len(parent_ids)}")
        weight = _number(weight, "weight", "a positive finite number", lambda x: x > 0)
        low, high = _coflow.LEASE_S
        if lease_s is not None:
            expected = f"from {low:g} to {high:g} seconds, or None for no lease"
            lease_s = _number(lease_s, "lease_s", expected, lambda x: low <= x <= high)
        return _call(
            self._c.register,
            num_flows,
            _short_text(name, "name", _coflow.MAX_NAME_BYTES),
            _short_text(kind, "kind", _coflow.MAX_KIND_BYTES),
            _seconds(deadline_s, "deadline_s", _coflow.MAX_DEADLINE_S, "a year"),
            parent_ids,
            weight,
            _seconds(all_gets_timeout_s, "all_gets_timeout_s", _coflow.MAX_ALL_GETS_TIMEOUT_S, "a day"),
            lease_s,
        )

    def renew(self, coflows: Iterable[int]) -> List[int]:
        """Renews the leases of ``coflows`` for another lease each, from now; returns the ids
        not renewed (not live, or another identity's). Call it about every third of the lease."""
        if isinstance(coflows, (str, bytes)) or not isinstance(coflows, Iterable):
            raise ValueError(f"coflows: expected a list of coflow ids, got {coflows!r}")
        return _call(self._c.renew, [_uint(c, "coflows", 2**64 - 1) for c in coflows])

    def put(self, coflow: int, data_id: str, data: bytes) -> int:
        """Stores ``data`` as piece ``data_id`` of ``coflow`` at the local agent; returns its size."""
        if isinstance(data, str) or not _is_buffer(data):
            raise TypeError(f"data: expected bytes-like data, got {type(data).__name__}")
        # The extension copies the bytes once; only other buffers are made bytes first.
        content = data if type(data) is bytes else bytes(memoryview(data))
        return _call(self._c.put, _uint(coflow, "coflow", 2**64 - 1), _text(data_id, "data_id"), content)

    def put_file(self, coflow: int, data_id: str, path: PathArg, length: int, offset: int = 0) -> int:
        """Stores ``length`` bytes at ``offset`` of ``path`` (relative to the agent's data
        directory; with TLS, beneath the client's own directory ``clients/NAME``) as piece
        ``data_id``; the caller may exit afterwards. Returns its size."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise ValueError(f"path: expected a path relative to the agent's data directory, got {path!r}")
        length = _uint(length, "length", _coflow.MAX_PIECE_BYTES)
        offset = _uint(offset, "offset", 2**64 - 1)
        if offset + length > 2**64 - 1:
            raise ValueError(f"offset: {offset} + length {length} is past the last byte a file can have (2**64 - 1)")
        return _call(
            self._c.put_file,
            _uint(coflow, "coflow", 2**64 - 1),
            _text(data_id, "data_id"),
            _text(os.fsdecode(os.fspath(path)), "path"),
            offset,
            length,
        )

    def get(self, coflow: int, data_id: str) -> bytes:
        """Fetches piece ``data_id`` of ``coflow``, at the rate the coordinator assigns: exactly
        the bytes put, or an exception."""
        return _call(self._c.get, _uint(coflow, "coflow", 2**64 - 1), _text(data_id, "data_id"))

    def get_stream(self, coflow: int, data_id: str) -> "Stream":
        """Fetches piece ``data_id`` of ``coflow`` chunk by chunk, as a :class:`Stream`. The get
        starts now, so a bad argument or a refused get raises here; errors of the transfer arise
        from the iteration. The stream yields every byte of the piece, in order, and then stops,
        or it raises: once an exception has come out of a wait for its next chunk (an error of the
        transfer, or one raised into the wait, such as a signal handler's), every later ``next``
        raises ``ValueError`` rather than stopping short. The transfer waits for a slow reader up
        to the agent's idle timeout (``data_idle_timeout_ms``, 5 s by default): a reader that takes
        nothing for longer ends the get with :class:`ClientDeparted`; one that stops early should
        :meth:`Stream.close` it (or use it as a context manager)."""
        chunks = _call(self._c.get_stream, _uint(coflow, "coflow", 2**64 - 1), _text(data_id, "data_id"))
        return Stream(chunks)

    def seal(self, coflow: int) -> None:
        """Says no more puts will come for ``coflow``."""
        _call(self._c.seal, _uint(coflow, "coflow", 2**64 - 1))

    def unregister(self, coflow: int) -> None:
        """Removes ``coflow``."""
        _call(self._c.unregister, _uint(coflow, "coflow", 2**64 - 1))

    def status(self) -> Dict[str, Any]:
        """What the coordinator is doing: its policy, live coflows, and agents. Each coflow has
        its flows and rates, ``job`` (the id of the coflow that names its job: its own unless it
        joined a parent's; None from a coordinator that does not say), ``lease_left_s`` (None
        without a lease), ``deadline_s`` (from its registration; None without a deadline) and
        ``admission`` (what a policy with admission control made of the deadline: ``"pending"``,
        ``"admitted"`` or ``"rejected"``; None without one). Each flow has ``via`` (the relay of a
        multi-path part on a wide area, else None) and ``reader_limited`` (its receiving client
        reads it slower than it comes, or not at all); each agent has ``datacenter`` (None on a
        big switch)."""
        return _call(self._c.status)

    def close(self) -> None:
        """Drops the connections; calls under way finish, and later calls raise ``ValueError``, as a
        closed file's do."""
        self._inner = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(coordinator={self.coordinator!r}, agent={self.agent!r})"
