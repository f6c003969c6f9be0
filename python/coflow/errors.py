"""The exceptions of the SDK, one class per error kind the coflow services name."""

from __future__ import annotations

from typing import Dict, Type


class CoflowError(Exception):
    """Anything a coflow service (or the connection to it) reported.

    ``kind`` is the service's name for the error (e.g. ``"no-such-data"``); an error of a kind
    this package does not know is a plain :class:`CoflowError` carrying that kind.
    """

    KIND = "other"

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind: str = kind if kind is not None else self.KIND
        self.message: str = message


class UnknownCoflow(CoflowError):
    """The coordinator knows no such coflow."""

    KIND = "unknown-coflow"


class DuplicateDataId(CoflowError):
    """A piece of this name was already put for the coflow."""

    KIND = "duplicate-data-id"


class NoSuchData(CoflowError):
    """No piece of this name was put for the coflow, or its agent is gone."""

    KIND = "no-such-data"


class AgentUnreachable(CoflowError):
    """An agent (the local one or the piece's source) cannot be reached, or is stopping: retry;
    past the retries, a get's source is to blame (recompute the piece)."""

    KIND = "agent-unreachable"


class CoordinatorUnreachable(CoflowError):
    """The coordinator cannot be reached, from this client or from its local agent, or is
    stopping: retry; no piece's source is to blame."""

    KIND = "coordinator-unreachable"


class TimedOut(CoflowError):
    """The call took longer than the client's timeout."""

    KIND = "timed-out"


class Corrupted(CoflowError):
    """The bytes did not arrive intact (checksum or size)."""

    KIND = "corrupted"


class Sealed(CoflowError):
    """The coflow was sealed: it takes no more puts."""

    KIND = "sealed"


class Unauthenticated(CoflowError):
    """The cluster token (or certificate) was refused."""

    KIND = "unauthenticated"


class Invalid(CoflowError):
    """A request was invalid; the message names the field."""

    KIND = "invalid"


class DataLost(CoflowError):
    """The source's stored copy of a piece was changed, truncated, removed or cannot be read since
    its put: it can never come from that source, so recompute it."""

    KIND = "data-lost"


class LimitExceeded(CoflowError):
    """A configured limit of the cluster was reached (coflows, pieces per coflow, bytes stored at an
    agent, data connections at an agent); the message names it."""

    KIND = "limit-exceeded"


class PermissionDenied(CoflowError):
    """The caller's identity may not do this."""

    KIND = "permission-denied"


class UnknownFlow(CoflowError):
    """No live flow has this id."""

    KIND = "unknown-flow"


class ShuttingDown(CoflowError):
    """The service is stopping. The SDK raises :class:`AgentUnreachable` or
    :class:`CoordinatorUnreachable` for it (the message says so), since a caller retries them
    alike; this class names the protocol's kind."""

    KIND = "shutting-down"


class Refused(CoflowError):
    """A source agent refused a fetch (a wrong token or a malformed request)."""

    KIND = "refused"


class ClientDeparted(CoflowError):
    """The client read nothing of a get's stream for the agent's data idle timeout (5 s by
    default), or hung up, and the agent ended the get: no source is to blame; a get asked again
    starts afresh."""

    KIND = "client-departed"


# One class per kind of the protocol's ErrorKind (``coflow._coflow.ERROR_KINDS``; a test checks
# that they agree).
_BY_KIND: Dict[str, Type[CoflowError]] = {
    cls.KIND: cls
    for cls in (
        UnknownCoflow,
        DuplicateDataId,
        NoSuchData,
        Sealed,
        AgentUnreachable,
        UnknownFlow,
        Invalid,
        ShuttingDown,
        LimitExceeded,
        PermissionDenied,
        Unauthenticated,
        Refused,
        Corrupted,
        DataLost,
        TimedOut,
        ClientDeparted,
        CoordinatorUnreachable,
    )
}


def from_kind(kind: str, message: str) -> CoflowError:
    """The exception for an error of ``kind``: its class, or :class:`CoflowError` for a kind this
    package does not know."""
    cls = _BY_KIND.get(kind)
    if cls is None:
        return CoflowError(message, kind)
    return cls(message)
