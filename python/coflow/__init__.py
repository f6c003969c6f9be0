"""coflow: coflow scheduling from Python.

- The simulator: :func:`simulate` replays a workload (:func:`read_trace`, :func:`synthetic`, or
  :func:`workload` from lists or a pandas DataFrame) under scheduling policies and returns a
  :class:`Report` (pandas DataFrames, the JSON of ``coflow sim``, a matplotlib plot).
- The SDK: :class:`Client` (and :class:`coflow.aio.Client`) registers coflows and puts and gets
  their data through a live cluster; errors are :class:`CoflowError` subclasses.
"""

from . import aio
from ._coflow import __version__
from .client import Client
from .errors import (
    AgentUnreachable,
    ClientDeparted,
    CoflowError,
    CoordinatorUnreachable,
    Corrupted,
    DataLost,
    DuplicateDataId,
    Invalid,
    LimitExceeded,
    NoSuchData,
    PermissionDenied,
    Refused,
    Sealed,
    ShuttingDown,
    TimedOut,
    Unauthenticated,
    UnknownCoflow,
    UnknownFlow,
)
from .sim import (
    JOB_POLICIES,
    POLICIES,
    WIDE_AREA_POLICIES,
    Coflow,
    Flow,
    Report,
    Workload,
    read_trace,
    simulate,
    sweep,
    synthetic,
    workload,
)

__all__ = [
    "AgentUnreachable",
    "Client",
    "ClientDeparted",
    "Coflow",
    "CoflowError",
    "CoordinatorUnreachable",
    "Corrupted",
    "DataLost",
    "DuplicateDataId",
    "Flow",
    "Invalid",
    "LimitExceeded",
    "NoSuchData",
    "POLICIES",
    "WIDE_AREA_POLICIES",
    "JOB_POLICIES",
    "PermissionDenied",
    "Refused",
    "Report",
    "Sealed",
    "ShuttingDown",
    "TimedOut",
    "Unauthenticated",
    "UnknownCoflow",
    "UnknownFlow",
    "Workload",
    "__version__",
    "aio",
    "read_trace",
    "simulate",
    "sweep",
    "synthetic",
    "workload",
]
