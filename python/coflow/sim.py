"""The trace simulator as a library: workloads, :func:`simulate`, and its :class:`Report`.

The runs, the lower bounds and the report are those of ``coflow sim`` (the same Rust code):
``simulate(...).to_json()`` is byte for byte what ``coflow sim --json`` writes on the same inputs.
"""

from __future__ import annotations

import copy
import decimal
import fractions
import html
import io
import json
import math
import numbers
import operator
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _coflow

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "Flow",
    "Coflow",
    "Workload",
    "Report",
    "read_trace",
    "synthetic",
    "workload",
    "simulate",
    "sweep",
    "POLICIES",
    "WIDE_AREA_POLICIES",
    "JOB_POLICIES",
]

#: The policies ``"all"`` runs, as ``coflow sim --policies all`` does.
POLICIES: Tuple[str, ...] = tuple(_coflow.POLICIES)
#: The wide-area policies (Siphon's), which run with ``wan=`` and are not part of ``"all"``.
WIDE_AREA_POLICIES: Tuple[str, ...] = tuple(_coflow.WIDE_AREA_POLICIES)
#: The job-aware variants, which differ from their base policy only on workloads with parents
#: (``stages=``), not part of ``"all"``.
JOB_POLICIES: Tuple[str, ...] = tuple(_coflow.JOB_POLICIES)


@dataclass(frozen=True)
class Flow:
    """One flow: ``bytes`` from machine ``src`` to machine ``dst``."""

    src: int
    dst: int
    bytes: int


@dataclass(frozen=True)
class Coflow:
    """One coflow: its flows, released at ``arrival`` seconds.

    ``deadline`` is in seconds after arrival; ``parents`` are ids of coflows that must finish first.
    """

    id: int
    arrival: float
    flows: Sequence[Union[Flow, Tuple[int, int, int], Mapping[str, int]]]
    deadline: Optional[float] = None
    weight: float = 1.0
    parents: Sequence[int] = field(default_factory=tuple)


class Workload:
    """A workload to simulate: from :func:`read_trace`, :func:`synthetic` or :func:`workload`.

    Workloads are values: two are equal when they hold the same machines and coflows under the
    same :attr:`source` (a pickled workload equals what it was), and equal ones hash alike.
    """

    def __init__(self, inner: _coflow.Workload) -> None:
        # Made by the functions below: a DataFrame or a path given here would fail only later.
        if not isinstance(inner, _coflow.Workload):
            raise TypeError(
                "Workload: made by coflow.workload(data), coflow.read_trace(path) or coflow.synthetic(...), "
                f"not from {type(inner).__name__}"
            )
        self._inner = inner

    @property
    def machines(self) -> int:
        """The number of machines."""
        return self._inner.machines

    @property
    def coflows(self) -> int:
        """The number of coflows."""
        return self._inner.coflows

    @property
    def flows(self) -> int:
        """The number of flows."""
        return self._inner.flows

    @property
    def bytes(self) -> int:
        """The bytes of all flows."""
        return self._inner.bytes

    @property
    def source(self) -> str:
        """What the workload is, as reports name it."""
        return self._inner.source

    def to_jsonl(self) -> str:
        """The workload in the ``coflow-jsonl`` trace format (``coflow sim --trace`` reads it)."""
        return self._inner.to_jsonl()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Workload):
            return NotImplemented
        return self._inner.same_as(other._inner)

    def __hash__(self) -> int:
        # The counts only: cheap, and equal for equal workloads.
        return hash((self.machines, self.coflows, self.flows, self.bytes, self.source))

    def __reduce__(self) -> Tuple[Any, ...]:
        # Pickled as its trace text, which reads back to the same workload (multiprocessing,
        # joblib and a notebook's saved state all pickle).
        return (_workload_from_jsonl, (self.to_jsonl(), self.source))

    def to_dataframe(self) -> "pd.DataFrame":
        """One row per flow: coflow, arrival (s), src, dst, bytes, deadline (s), weight, parents.

        A coflow without flows has no row, and times are float seconds, which hold a time to the
        nanosecond up to about three weeks: :func:`workload` of the frame leaves such coflows out
        and rounds later times to the float's precision.
        """
        import pandas as pd

        rows = []
        for line in self.to_jsonl().splitlines()[1:]:
            if not line.strip():
                continue
            c = json.loads(line)
            deadline = c.get("deadline_ns")
            for f in c["flows"]:
                rows.append(
                    {
                        "coflow": c["id"],
                        "arrival": c["arrival_ns"] / 1e9,
                        "src": f["src"],
                        "dst": f["dst"],
                        "bytes": f["bytes"],
                        "deadline": None if deadline is None else deadline / 1e9,
                        "weight": c.get("weight", 1.0),
                        "parents": list(c.get("parents", [])),
                    }
                )
        return pd.DataFrame(rows, columns=["coflow", "arrival", "src", "dst", "bytes", "deadline", "weight", "parents"])

    def __repr__(self) -> str:
        return (
            f"Workload({self.source!r}: {self.coflows} coflows, {self.flows} flows, "
            f"{self.machines} machines, {self.bytes} bytes)"
        )


def read_trace(path: Any) -> Workload:
    """Reads a trace file: the coflow-benchmark format (the Facebook trace) or ``coflow-jsonl``.

    Errors (:class:`ValueError`) name the line; a file that cannot be opened or read raises the
    :class:`OSError` of its kind (:class:`FileNotFoundError`, :class:`IsADirectoryError`,
    :class:`PermissionError`).
    """
    return Workload(_coflow.read_trace(_path(path, "path")))


#: A file's path as :func:`read_trace` and the other functions taking one accept it.
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def _path(value: Any, what: str) -> str:
    """A file's path: a ``str``, ``bytes`` or :class:`os.PathLike`, as the library reads it."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{what}: expected a file's path, got {value!r}")
    path = os.fsdecode(os.fspath(value))
    # No file's path holds a NUL, which Python's own ``open`` refuses as a ``ValueError`` too.
    if "\0" in path:
        raise ValueError(f"{what}: a file's path holds no NUL character, got {value!r}")
    return path


def synthetic(seed: int = 1, coflows: Optional[int] = None, machines: Optional[int] = None) -> Workload:
    """The seeded synthetic workload shaped like the Facebook trace that ``coflow sim`` replays by
    default (``--seed``, ``--coflows``, ``--machines``; the same defaults)."""
    seed = _count(seed, "seed")
    coflows = None if coflows is None else _count(coflows, "coflows")
    machines = None if machines is None else _count(machines, "machines", _MAX_MACHINES)
    return Workload(_coflow.synthetic(seed, coflows, machines))


WorkloadLike = Union[Workload, "pd.DataFrame", Iterable[Union[Coflow, Mapping[str, Any]]]]


#: The largest time a workload holds: 2^64 - 1 ns (its times are unsigned 64-bit nanoseconds).
_MAX_NANOS = 2**64 - 1

#: The most machines a workload holds (as a trace file, or generated); machines are numbered
#: from 0.
_MAX_MACHINES: int = _coflow.MAX_MACHINES


def _nanos(value: Any, what: str) -> int:
    """A non-negative number of seconds (an ``int``, a ``float``, a ``Fraction``, a ``Decimal``
    or numpy's, as :func:`_real` takes) as whole nanoseconds, rounded half to even: exactly for
    an integer, a ``Fraction`` or a ``Decimal``; a float's through its product with 1e9."""
    if _is_bool(value) or not isinstance(value, (numbers.Real, decimal.Decimal)):
        raise ValueError(f"{what}: expected a number of seconds, got {value!r}")
    if isinstance(value, decimal.Decimal):
        if value.is_nan() or value.is_infinite() or value < 0:
            raise ValueError(f"{what}: must be a non-negative number of seconds, got {value!r}")
        # Checked before it is scaled, so that no huge exponent is ever expanded.
        if value >= _MAX_NANOS:
            raise ValueError(f"{what}: must be below 2^64 ns (about 18446744073.7 seconds), got {value!r}")
        # Below 2^64 s, nanoseconds have at most 29 digits: at this precision, both steps are exact.
        exact = decimal.Context(prec=40, rounding=decimal.ROUND_HALF_EVEN)
        nanos = int(value.quantize(decimal.Decimal("1e-9"), context=exact).scaleb(9, context=exact))
    elif isinstance(value, numbers.Rational):
        if value < 0:
            raise ValueError(f"{what}: must be a non-negative number of seconds, got {value!r}")
        nanos = round(fractions.Fraction(int(value.numerator), int(value.denominator)) * 10**9)
    else:
        seconds = float(value)
        if not (seconds >= 0.0 and seconds != float("inf")):
            raise ValueError(f"{what}: must be a non-negative number of seconds, got {value!r}")
        nanos = round(seconds * 1e9)
    if nanos > _MAX_NANOS:
        raise ValueError(f"{what}: must be below 2^64 ns (about 18446744073.7 seconds), got {value!r}")
    return nanos


def _policy_list(policies: Any) -> str:
    """``policies`` as the comma-separated list the library reads: a string, or names."""
    if isinstance(policies, str):
        return policies
    names = None if isinstance(policies, bytes) or not isinstance(policies, Iterable) else list(policies)
    if names is None or not all(isinstance(p, str) for p in names):
        raise ValueError(f"policies: expected a list of policy names or a comma-separated string, got {policies!r}")
    # In a list, each item is one name.
    for p in names:
        if "," in p or not p.strip():
            raise ValueError(f"policies: each item of a list names one policy, got {p!r}")
    return ",".join(names)


def _run_counts(seed: Any, threads: Any, stages: Any) -> Tuple[int, Optional[int], int]:
    """A run's ``seed``, ``threads`` (``None``: the machine's cores) and ``stages``, checked."""
    return _count(seed, "seed"), None if threads is None else _count(threads, "threads"), _count(stages, "stages")


def _count(value: Any, what: str, most: int = 2**64 - 1) -> int:
    """A whole number from 0 to ``most`` (what the library's unsigned integer holds), not a
    boolean (Python's or numpy's)."""
    if _is_bool(value):
        raise ValueError(f"{what}: expected a non-negative integer, got {value!r}")
    # A ``Decimal`` of 10^20 or more in size passes any bound (2^64 < 10^20): refused before
    # ``int`` writes out every digit of a huge exponent, which takes hours.
    if isinstance(value, decimal.Decimal) and value.is_finite() and value.adjusted() >= 20:
        if value < 0:
            raise ValueError(f"{what}: expected a non-negative integer, got {value!r}")
        raise ValueError(f"{what}: at most {most}, got {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what}: expected a non-negative integer, got {value!r}") from None
    if n != value or n < 0:
        raise ValueError(f"{what}: expected a non-negative integer, got {value!r}")
    if n > most:
        raise ValueError(f"{what}: at most {most}, got {value!r}")
    return n


def _real(value: Any, what: str) -> float:
    """A real number (an ``int``, a ``float``, a ``Fraction``, a ``Decimal`` or numpy's), not a
    string or a boolean."""
    if _is_bool(value) or not isinstance(value, (numbers.Real, decimal.Decimal)):
        raise ValueError(f"{what}: expected a number, got {value!r}")
    try:
        return float(value)
    except (OverflowError, ValueError):
        raise ValueError(f"{what}: expected a number a float holds, got {value!r}") from None


def _deadline_x(value: Any, deadlines: bool) -> float:
    """``deadline_x``, the slack of the deadlines that ``deadlines=True`` draws: a number, and
    only with ``deadlines`` (as ``--deadline-x`` requires ``--deadlines``) unless it is the
    default 1."""
    x = _real(value, "deadline_x")
    if not deadlines and x != 1.0:
        raise ValueError(f"deadline_x: only with deadlines=True (the slack of its deadlines), got {value!r}")
    return x


def _name(value: Any, what: str) -> Optional[str]:
    """An option named by a string, or ``None``."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{what}: expected a string or None, got {value!r}")
    return value


def _baseline(value: Any) -> str:
    """``baseline``: one policy's name, or ``None`` (or ``""``) for none."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"baseline: expected a policy's name or None, got {value!r}")
    return value


def _flow(f: Any, what: str) -> Dict[str, int]:
    if isinstance(f, Flow):
        src, dst, size = f.src, f.dst, f.bytes
    elif isinstance(f, Mapping):
        _fields(f, what, ("src", "dst", "bytes"), ())
        src, dst, size = f["src"], f["dst"], f["bytes"]
    else:
        try:
            src, dst, size = f
        except (TypeError, ValueError):
            raise ValueError(f"{what}: expected a Flow, a (src, dst, bytes) tuple or a mapping, got {f!r}") from None
    return {
        "src": _machine(src, f"{what}: src"),
        "dst": _machine(dst, f"{what}: dst"),
        "bytes": _count(size, f"{what}: bytes"),
    }


def _machine(value: Any, what: str) -> int:
    """A flow's endpoint: a machine's number, below the most machines a workload holds."""
    n = _count(value, what)
    if n >= _MAX_MACHINES:
        raise ValueError(
            f"{what}: machine {n} is out of range: machines are numbered from 0 and a workload holds "
            f"at most {_MAX_MACHINES}"
        )
    return n


def _fields(m: Mapping[Any, Any], what: str, required: Tuple[str, ...], optional: Tuple[str, ...]) -> None:
    """Refuses a mapping that lacks a required field or has one it does not know; a field missing
    beside an unknown one names both, as the unknown one is likely the missing one misspelled."""
    unknown = sorted(map(repr, set(m) - set(required) - set(optional)))
    missing = [k for k in required if k not in m]
    if missing:
        besides = f" (and has unknown field {unknown[0]})" if unknown else ""
        raise ValueError(f"{what}: missing field {missing[0]!r}{besides}")
    if unknown:
        raise ValueError(f"{what}: unknown field {unknown[0]}")


def _coflow_record(c: Any, i: int) -> Dict[str, Any]:
    if isinstance(c, Coflow):
        c = {
            "id": c.id,
            "arrival": c.arrival,
            "flows": c.flows,
            "deadline": c.deadline,
            "weight": c.weight,
            "parents": c.parents,
        }
    # Named by its place in the list until its id is known to be one.
    item = f"coflow item {i}" + (f" (id {c['id']!r})" if isinstance(c, Mapping) and "id" in c else "")
    if not isinstance(c, Mapping):
        raise ValueError(f"{item}: expected a Coflow or a mapping, got {c!r}")
    _fields(c, item, ("id", "arrival", "flows"), ("deadline", "weight", "parents"))
    cid = _count(c["id"], f"{item}: id")
    what = f"coflow {cid}"
    flows = c["flows"]
    if isinstance(flows, (str, bytes, Mapping)) or not isinstance(flows, Iterable):
        raise ValueError(f"{what}: flows: expected a list of flows, got {flows!r}")
    rec: Dict[str, Any] = {
        "id": cid,
        "arrival_ns": _nanos(c["arrival"], f"{what}: arrival"),
        "flows": [_flow(f, f"{what} flow {j}") for j, f in enumerate(flows)],
    }
    deadline = c.get("deadline")
    if not _missing(deadline):
        rec["deadline_ns"] = _nanos(deadline, f"{what}: deadline")
    weight = c.get("weight", 1.0)
    if _missing(weight):
        weight = 1.0
    rec["weight"] = _real(weight, f"{what}: weight")
    if not (math.isfinite(rec["weight"]) and rec["weight"] > 0.0):
        raise ValueError(f"{what}: weight: must be a positive finite number, got {weight!r}")
    rec["parents"] = [_count(p, f"{what}: parents") for p in _parent_list(c.get("parents"), f"{what}: parents")]
    return rec


def _missing(value: Any) -> bool:
    """Whether an optional field is absent: ``None``, or NaN (a DataFrame's missing value), a
    ``Decimal``'s among them (whose signalling NaN compares with nothing)."""
    if isinstance(value, decimal.Decimal):
        return value.is_nan()
    return value is None or value != value


def _records_from_dataframe(df: "pd.DataFrame") -> List[Dict[str, Any]]:
    # A row holds one value per column name: of a column given twice, one would be dropped.
    repeated = sorted({repr(c) for c in df.columns[df.columns.duplicated()]})
    if repeated:
        raise ValueError(f"workload: the DataFrame has column {repeated[0]} more than once")
    missing = [k for k in ("coflow", "arrival", "src", "dst", "bytes") if k not in df.columns]
    if missing:
        raise ValueError(f"workload: the DataFrame has no column {missing[0]!r}")
    unknown = set(df.columns) - {"coflow", "arrival", "src", "dst", "bytes", "deadline", "weight", "parents"}
    if unknown:
        raise ValueError(f"workload: unknown column {sorted(unknown)[0]!r}")
    coflows: Dict[Any, Dict[str, Any]] = {}
    for row in df.to_dict("records"):
        cid = row["coflow"]
        flow = {"src": row["src"], "dst": row["dst"], "bytes": row["bytes"]}
        fields = _coflow_fields(row, cid)
        c = coflows.get(cid)
        if c is None:
            coflows[cid] = {"id": cid, **fields, "flows": [flow]}
            continue
        for k, b in fields.items():
            a = c[k]
            same = a == b or (a is None and b is None) or (a != a and b != b)
            if not same:
                raise ValueError(f"coflow {cid}: column {k!r} differs between its flows ({a!r} and {b!r})")
        c["flows"].append(flow)
    return list(coflows.values())


def _coflow_fields(row: Dict[str, Any], cid: Any) -> Dict[str, Any]:
    """A DataFrame row's coflow-wide fields, with the defaults of absent columns: no deadline,
    weight 1, no parents (a list of coflow ids, or an empty cell)."""
    parents = row.get("parents")
    if isinstance(parents, float) and parents != parents:
        parents = None
    return {
        "arrival": row["arrival"],
        "deadline": row.get("deadline"),
        "weight": row.get("weight", 1.0),
        "parents": _parent_list(parents, f"coflow {cid}: column 'parents'"),
    }


def _parent_list(parents: Any, what: str) -> List[Any]:
    """A coflow's parents as a list: none for ``None``, an array's items, or a list or tuple."""
    if parents is None:
        return []
    if hasattr(parents, "tolist") and not isinstance(parents, (str, bytes)):
        parents = parents.tolist()
    if not isinstance(parents, (list, tuple)):
        raise ValueError(f"{what} must be a list of coflow ids, got {parents!r}")
    return list(parents)


def workload(data: WorkloadLike, machines: Optional[int] = None, source: Optional[str] = None) -> Workload:
    """A workload from Python data.

    ``data`` is a list of coflows (:class:`Coflow` or mappings with ``id``, ``arrival`` (s),
    ``flows`` (each a :class:`Flow`, a ``(src, dst, bytes)`` tuple or a mapping), and optional
    ``deadline`` (s after arrival), ``weight``, ``parents``), or a pandas DataFrame with one row
    per flow and columns ``coflow``, ``arrival``, ``src``, ``dst``, ``bytes`` and optional
    ``deadline``, ``weight``, ``parents``.
    ``machines`` (at most 1,000,000, as in a trace file) defaults to one more than the largest
    endpoint; a workload whose flows name no machine (none, or coflows without flows) may have 0,
    as a trace file's header may say.
    ``source`` names the workload in reports (``"python"`` by default).
    A :class:`Workload` is returned as it is: it keeps its own machines and source, so giving
    ``machines`` or ``source`` with one is refused (``workload(w.to_dataframe(), machines=...)``
    makes a new one, of the coflows that have flows).
    Errors (:class:`ValueError`) name the coflow and the field.
    """
    if isinstance(data, Workload):
        given = [k for k, v in (("machines", machines), ("source", source)) if v is not None]
        if given:
            raise ValueError(
                f"{given[0]}: a Workload keeps its own ({data.machines} machines, source {data.source!r}); "
                f"give {given[0]}= with Python data, such as workload(w.to_dataframe(), {given[0]}=...)"
            )
        return data
    if source is None:
        source = "python"
    if not isinstance(source, str):
        raise ValueError(f"source: expected a string, got {source!r}")
    if hasattr(data, "columns") and hasattr(data, "to_dict"):
        raw: Iterable[Any] = _records_from_dataframe(data)  # type: ignore[arg-type]
    elif isinstance(data, (str, bytes, Mapping)) or not isinstance(data, Iterable):
        raise ValueError(f"workload: expected a list of coflows or a DataFrame, got {type(data).__name__}")
    else:
        raw = data
    records = [_coflow_record(c, i) for i, c in enumerate(raw)]
    largest = max((max(f["src"], f["dst"]) for r in records for f in r["flows"]), default=-1)
    if machines is None:
        if largest < 0:
            raise ValueError("machines: no flow names a machine (the workload has no flows), so give machines=")
        machines = largest + 1
    machines = _count(machines, "machines", _MAX_MACHINES)
    if largest >= machines:
        raise ValueError(f"machines: a flow's endpoint is machine {largest}, but there are only {machines} machines")
    header = {"format": "coflow-jsonl", "version": 1, "machines": machines}
    lines = [json.dumps(header)] + [json.dumps(r) for r in records]
    try:
        return Workload(_coflow.parse_workload("\n".join(lines) + "\n", source))
    except ValueError as e:
        raise _at_coflow(e, records) from None


def _at_coflow(e: ValueError, records: List[Dict[str, Any]]) -> ValueError:
    """The library's error about line ``n`` of the text :func:`workload` wrote (line 1 its
    header, line ``n`` the record ``n - 2``), naming that record's coflow instead of the line."""
    m = re.match(r"workload: line (\d+)(?:, column \d+|, field ([^:]+))?: (.*)", str(e), re.S)
    if m is None or not 2 <= int(m[1]) < len(records) + 2:
        return e
    cid, field, message = records[int(m[1]) - 2]["id"], m[2], m[3]
    repeated = re.fullmatch(r"coflow id \d+ already appeared on line (\d+)", message)
    if repeated is not None:
        message = f"given to two coflows (items {int(repeated[1]) - 2} and {int(m[1]) - 2})"
    if field is not None:
        message = f"{field}: {message}"
    if re.search(rf"\bcoflow {cid}\b", message):
        return ValueError(f"workload: {message}")
    return ValueError(f"coflow {cid}: {message}")


# `simulate`'s parameter is named `workload` too.
_make_workload = workload


def _workload_from_jsonl(text: str, source: str) -> Workload:
    return Workload(_coflow.parse_workload(text, source))


@dataclass(frozen=True)
class _KeptResults:
    """A report's results as plain values, as a pickled :class:`Report` keeps them."""

    json: str
    csv: str
    baseline_csv: Optional[str]
    describe: str
    wall_s: List[Tuple[str, float]]
    notes: List[str]
    kind: str
    tables: str


class Report:
    """What :func:`simulate` found, as ``coflow sim`` reports it.

    Reports are values: two are equal when everything they report is (the JSON, the per-coflow
    rows, the tables, the notes), so that two runs of the same inputs give equal reports and a
    pickled report equals what it was; the wall times (:attr:`wall_s`), which differ from run to
    run, are not compared. Equal reports hash alike.
    """

    def __init__(self, results: Union[_coflow.Results, _KeptResults]) -> None:
        if not isinstance(results, (_coflow.Results, _KeptResults)):
            raise TypeError(f"Report: made by coflow.simulate(...) or coflow.sweep(...), not from {type(results).__name__}")
        self._results = results
        self._data: Dict[str, Any] = json.loads(results.json)

    def __reduce__(self) -> Tuple[Any, ...]:
        r = self._results
        kept = _KeptResults(
            r.json, r.csv, r.baseline_csv, r.describe, list(r.wall_s), list(r.notes), r.kind, r.tables
        )
        return (Report, (kept,))

    def _compared(self) -> Tuple[Any, ...]:
        """What equality compares: every result but the wall times."""
        r = self._results
        return (r.json, r.csv, r.baseline_csv, r.describe, r.kind, r.tables, tuple(r.notes))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Report):
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._results.json)

    def to_json(self) -> str:
        """The JSON report, byte for byte as ``coflow sim --json`` writes it."""
        return self._results.json

    @property
    def data(self) -> Dict[str, Any]:
        """The JSON report, parsed: a copy, so that changing it leaves the report as it is."""
        return copy.deepcopy(self._data)

    @property
    def describe(self) -> str:
        """The workload's line at the top of the report."""
        return self._results.describe

    @property
    def baseline(self) -> Optional[str]:
        """The policy the others are compared against."""
        return self._data["baseline"]

    @property
    def kind(self) -> str:
        """``"replay"`` (the big switch), ``"wide_area"`` or ``"sweep"``: the report's layout."""
        return self._results.kind

    @property
    def summary(self) -> "pd.DataFrame":
        """One row per policy asked for (indexed by policy; by N and policy for a sweep): the JSON
        report's ``results``, whose ``bins`` column holds each policy's per-bin figures as the
        report's list (:attr:`bins` has them as a tidy frame)."""
        import pandas as pd

        # A copy: the ``bins`` cells hold lists of dicts, which the frame would share otherwise.
        df = pd.DataFrame(copy.deepcopy(self._data["results"]))
        if self.kind == "sweep":
            df.index = pd.MultiIndex.from_arrays([df["concurrent"].tolist(), df["policy"].tolist()], names=["N", "policy"])
        else:
            df.index = pd.Index(df["policy"].tolist())
        return df

    @property
    def bins(self) -> "pd.DataFrame":
        """One row per policy and bin (Varys's SN, LN, SW, LW on the big switch; Siphon's size
        bins on a wide area): the policy, the bin and the bin's figures, as a tidy frame."""
        import pandas as pd

        rows = [{"policy": r["policy"], **b} for r in self._data["results"] for b in r.get("bins", [])]
        return pd.DataFrame(rows)

    @property
    def coflows(self) -> "pd.DataFrame":
        """One row per coflow and policy asked for: ``coflow sim --csv``'s fields (none for a
        sweep)."""
        import pandas as pd

        if not self._results.csv:
            return pd.DataFrame()
        return pd.read_csv(io.StringIO(self._results.csv), keep_default_na=True)

    @property
    def lower_bounds(self) -> Optional[Dict[str, Any]]:
        """The lower bounds on the average CCT (isolation, per-port, LP relaxation) and the best;
        ``None`` on a wide area or for a sweep."""
        bounds = self._data.get("lower_bounds")
        return None if bounds is None else dict(bounds)

    @property
    def wall_s(self) -> Dict[str, float]:
        """Each policy's wall time in seconds."""
        return dict(self._results.wall_s)

    @property
    def tables(self) -> str:
        """A sweep's text tables, as ``coflow sim sweep`` prints them (empty otherwise)."""
        return self._results.tables

    def _repr_html_(self) -> str:
        """The summary as an HTML table, for notebooks."""
        results = self._data["results"]
        columns = [k for k in (results[0] if results else {}) if k != "bins" and not isinstance(results[0][k], (dict, list))]

        def cell(v: Any) -> str:
            if v is None:
                return "–"
            if isinstance(v, float):
                return f"{v:.4g}"
            return html.escape(str(v))

        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{cell(r[c])}</td>" for c in columns) + "</tr>" for r in results)
        caption = html.escape(self.describe).replace("\n", "<br>")
        return f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def plot(self, path: Any = None) -> "Figure":
        """The panels of ``coflow sim --plot``, drawn with matplotlib: each policy's CCT
        distribution on a log axis, the baseline's in black among them, beside each other
        policy's factor of improvement of average CCT over the baseline per bin and over all
        coflows, as bars from 1x on a log axis (without a baseline, the distributions alone).
        Saves to ``path`` if given, as SVG or PNG by its extension (any other is refused before
        drawing); returns the matplotlib figure, made without pyplot, so that neither the backend
        nor pyplot's open figures change. Needs ``matplotlib``; a sweep's report, which has no
        per-coflow times, is refused."""
        if self.kind == "sweep":
            raise ValueError("plot: a sweep's report has no per-coflow completion times to draw")
        image = None
        if path is not None:
            path = _path(path, "path")
            image = os.path.splitext(path)[1].lower().lstrip(".")
            if image not in ("svg", "png"):
                raise ValueError(f"path {path!r}: the file name must end in .svg or .png")
        try:
            from matplotlib.figure import Figure
            from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("Report.plot needs matplotlib: pip install 'coflow[plot]'") from e
        import pandas as pd

        rows = self.coflows
        if self._results.baseline_csv is not None:
            rows = pd.concat([rows, pd.read_csv(io.StringIO(self._results.baseline_csv))], ignore_index=True)
        baseline = self.baseline
        results = self._data["results"]
        others = [r for r in results if r["policy"] != baseline]
        with_bars = baseline is not None and bool(others)
        # Every policy run, and the baseline, has a colour, whether or not it has rows to draw.
        order = list(dict.fromkeys([str(r["policy"]) for r in results] + ([baseline] if baseline else [])))
        color = {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(q for q in order if q != baseline)}
        if baseline is not None:
            color[baseline] = "black"
        fig = Figure(figsize=(15, 6.4) if with_bars else (8, 6.4), layout="constrained")
        axes = fig.subplots(1, 2 if with_bars else 1, squeeze=False)[0]
        cdf = axes[0]
        fig.suptitle(self.describe)
        # The baseline last, so that it stays visible where curves coincide.
        drawn = False
        for policy in sorted(order, key=lambda p: p == baseline):
            group = rows[rows["policy"] == policy]
            cct = group["cct_s"].dropna().sort_values().to_numpy()
            if len(cct) == 0:
                continue
            frac = [(i + 1) / len(group) for i in range(len(cct))]
            label = f"{policy} (baseline)" if policy == baseline else policy
            width = 3 if policy == baseline else 2
            cdf.step(cct, frac, where="post", label=label, color=color[policy], linewidth=width)
            drawn = True
        cdf.set_xscale("log")
        cdf.set_ylim(0.0, 1.0)
        cdf.set_xlabel("coflow completion time (s)")
        cdf.set_ylabel("fraction of coflows")
        cdf.set_title("Coflow completion times (CDF, log axis)")
        if drawn:
            cdf.legend()
        if with_bars:
            bars = axes[1]
            first = results[0]
            groups = [f"{b['bin']} ({b['coflows']})" for b in first["bins"]] + [f"all ({first['coflows']})"]
            slot = 0.84 / len(others)
            lo, hi = 1.0, 1.0
            for k, r in enumerate(others):
                factors = [b["factor_vs_baseline"] for b in r["bins"]] + [r["factor_vs_baseline"]]
                shown = [(g, f) for g, f in enumerate(factors) if f is not None and 0.0 < f < float("inf")]
                xs = [g - 0.42 + k * slot for g, _ in shown]
                heights = [f - 1.0 for _, f in shown]
                lo, hi = min([lo] + [f for _, f in shown]), max([hi] + [f for _, f in shown])
                bars.bar(xs, heights, bottom=1.0, width=slot * 0.9, align="edge", color=color[r["policy"]])
            bars.set_yscale("log")
            bars.set_ylim(lo / 1.3, hi * 1.3)
            bars.yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
            bars.yaxis.set_minor_locator(NullLocator())
            bars.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
            bars.axhline(1.0, color="black", linewidth=1.5)
            bars.set_xlim(-0.5, len(groups) - 0.5)
            bars.set_xticks(range(len(groups)))
            bars.set_xticklabels(groups)
            wide_area = "topology" in self._data
            bars.set_xlabel("size bin (coflows)" if wide_area else "Varys bin (coflows): short/long, narrow/wide")
            bars.set_ylabel(f"factor of improvement over {baseline}")
            bars.set_title(f"Improvement of average CCT over {baseline}, per bin")
        if image is not None:
            fig.savefig(path, format=image)
        return fig

    def __repr__(self) -> str:
        return f"Report({self.describe!r})"


#: The colours of the policies other than the baseline (black), in report order: the Tableau 10
#: palette, then its ten lighter shades (Tableau 20), as ``coflow sim --plot`` draws them.
_PALETTE = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)


def _port_rate(value: Any) -> str:
    """``port_rate`` as the library parses it: a string with its unit, or a whole number of bytes
    per second (any real number :func:`_real` takes: an ``int``, a ``float``, a ``Fraction``, a
    ``Decimal`` or numpy's), the exact value of an integer, a ``Fraction`` or a ``Decimal``."""
    if isinstance(value, str):
        return value
    if _is_bool(value) or not isinstance(value, (numbers.Real, decimal.Decimal)):
        raise ValueError(f"port_rate: expected a rate such as '1Gbps' or a number of bytes per second, got {value!r}")
    if isinstance(value, numbers.Integral):
        return str(operator.index(value))
    if isinstance(value, numbers.Rational):
        if value != int(value):
            raise ValueError(f"port_rate: a number of bytes per second must be whole, got {value!r}")
        return str(int(value))
    if isinstance(value, decimal.Decimal):
        if not (value.is_finite() and value == value.to_integral_value()):
            raise ValueError(f"port_rate: a number of bytes per second must be whole, got {value!r}")
        # A value too large to be any port's rate keeps its short form, as a float's below.
        # ``copy_abs`` is exact, where ``abs`` overflows the context past 10^999999.
        return str(int(value)) if value.copy_abs() < 10**18 else format(value, "e")
    as_float = float(value)
    if not as_float.is_integer():
        raise ValueError(f"port_rate: a number of bytes per second must be whole, got {value!r}")
    # A whole float too large to be any port's rate keeps its short form (``1e+300``), which the
    # library refuses by name, rather than hundreds of digits.
    return str(int(as_float)) if abs(as_float) < 1e18 else repr(as_float)


def _is_bool(value: Any) -> bool:
    """Python's and numpy's booleans (``numpy.bool_`` is no ``bool``)."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"))


def _flag(value: Any, what: str) -> bool:
    """An on-or-off option: a boolean, never a string or a number whose truth would be a guess."""
    if not _is_bool(value):
        raise ValueError(f"{what}: expected True or False, got {value!r}")
    return bool(value)


def _workload_arg(workload: Any) -> Workload:
    """A :class:`Workload`, or a path to a trace (``FileNotFoundError`` if there is none), or
    Python data."""
    if isinstance(workload, (str, bytes, os.PathLike)):
        return read_trace(workload)
    return _make_workload(workload)


#: What ``progress`` takes: on or off (a tqdm bar), or a callable ``progress(done, total)``.
Progress = Union[bool, Callable[[int, int], Any]]


def _progress_bar(progress: Any, what: str) -> Tuple[Optional[Callable[[int, int], Any]], Callable[[], None]]:
    """The callback that reports a run's progress, and what closes it: ``progress`` itself when
    it is callable, else (``True``) a tqdm bar (a notebook widget in a notebook), or none without
    tqdm or for ``False``. Anything else is refused, naming ``progress``."""
    if callable(progress) and not _is_bool(progress):
        return progress, lambda: None
    if not _is_bool(progress):
        raise ValueError(f"progress: expected True, False or a callable progress(done, total), got {progress!r}")
    if not progress:
        return None, lambda: None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None, lambda: None
    bar = tqdm(total=None, desc=what, unit=" units", leave=False)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
            bar.refresh()
        bar.update(done - bar.n)

    return update, bar.close


def _wan_options(
    wan: Optional[PathArg],
    machines_per_dc: Optional[int],
    multipath: bool,
    redraw_ms: Optional[int],
    per_connection: bool,
    connection_redraw_ms: Optional[int],
    mc: Optional[Mapping[str, Any]],
) -> Optional[Dict[str, Any]]:
    if wan is not None and not isinstance(wan, (str, bytes, os.PathLike)):
        raise ValueError(f"wan: expected 'default' or a topology file's path, got {wan!r}")
    if wan is None:
        given = {
            "machines_per_dc": machines_per_dc,
            "redraw_ms": redraw_ms,
            "connection_redraw_ms": connection_redraw_ms,
            "mc": mc,
        }
        named = [k for k, v in given.items() if v is not None] + [
            k for k, v in (("multipath", multipath), ("per_connection", per_connection)) if v
        ]
        if named:
            raise ValueError(f"{named[0]}: only for a wide-area run (give wan='default' or a topology file)")
        return None
    if mc is not None and not isinstance(mc, Mapping):
        raise ValueError(f"mc: expected a mapping of options, got {mc!r}")
    mc = dict(mc or {})
    known = {"rounds", "depth", "breadth", "mean_cost", "one_draw"}
    unknown = set(mc) - known
    if unknown:
        raise ValueError(f"mc: unknown option {sorted(unknown)[0]!r}; known: {', '.join(sorted(known))}")
    def count(value: Any, what: str, most: int) -> Optional[int]:
        return None if value is None else _count(value, what, most)

    topology = _path(wan, "wan")
    try:
        topology.encode("utf-8")
    except UnicodeEncodeError:
        # The topology is named as `coflow sim --wan` names it, in text.
        raise ValueError(f"wan: a topology file's path is UTF-8 text, as --wan's is; got {wan!r}") from None
    if topology != "default":
        # A file that cannot be opened is the OSError of its kind, as a trace's is.
        try:
            with open(topology, "rb"):
                pass
        except OSError as e:
            raise type(e)(f"reading topology {topology}: {e.strerror} (os error {e.errno})") from None
    return {
        "topology": topology,
        "machines_per_dc": count(machines_per_dc, "machines_per_dc", 2**32 - 1),
        "multipath": multipath,
        "redraw_ms": count(redraw_ms, "redraw_ms", 2**64 - 1),
        "per_connection": per_connection,
        "connection_redraw_ms": count(connection_redraw_ms, "connection_redraw_ms", 2**64 - 1),
        "mc_rounds": count(mc.get("rounds"), "mc rounds", 2**32 - 1),
        "mc_depth": count(mc.get("depth"), "mc depth", 2**64 - 1),
        "mc_breadth": count(mc.get("breadth"), "mc breadth", 2**64 - 1),
        "mc_mean_cost": _flag(mc.get("mean_cost", False), "mc mean_cost"),
        "mc_one_draw": _flag(mc.get("one_draw", False), "mc one_draw"),
    }


def simulate(
    workload: Union[WorkloadLike, str, "os.PathLike[str]"],
    policies: Union[str, Sequence[str]] = ("varys", "fair"),
    port_rate: Union[str, int, float] = "1Gbps",
    baseline: Optional[str] = "fair",
    deadlines: bool = False,
    deadline_x: float = 1.0,
    deadline_fraction: Optional[float] = None,
    offline: bool = False,
    wan: Optional[PathArg] = None,
    seed: int = 1,
    threads: Optional[int] = None,
    model: Optional[str] = None,
    coflowsim_rules: Optional[str] = None,
    stages: int = 1,
    machines_per_dc: Optional[int] = None,
    multipath: bool = False,
    redraw_ms: Optional[int] = None,
    per_connection: bool = False,
    connection_redraw_ms: Optional[int] = None,
    mc: Optional[Mapping[str, Any]] = None,
    progress: Progress = True,
) -> Report:
    """Replays ``workload`` under each of ``policies`` (a list, a comma-separated string, or
    ``"all"``), in parallel with the GIL released, as ``coflow sim`` does with the same options.

    ``workload`` is a :class:`Workload`, Python data (see :func:`workload`) or a trace's path
    (``FileNotFoundError`` if it does not exist). ``port_rate`` is a rate with its unit
    (``"1Gbps"``) or a number of bytes per second.
    ``baseline`` runs too (factors are against it; ``None`` for none); ``deadlines`` gives every coflow a deadline
    (the trace's, or drawn with slack ``deadline_x``, 0 to 1000, which goes with ``deadlines`` only, as
    ``--deadline-x`` with ``--deadlines``), ``deadline_fraction`` a seeded fraction of
    them; ``offline`` releases every coflow at time 0; ``stages`` groups coflows into jobs of that
    many stages (``--stages``); ``model="coflowsim"`` (or ``coflowsim_rules`` alone) runs the
    reference simulator's model (``--model``, ``--coflowsim-rules``), ``model="exact"`` (the
    default) the exact one, which takes no rules.
    ``wan`` (``"default"`` or a topology file; one that cannot be opened raises the
    ``OSError`` of its kind, as a trace does) runs on a wide area against ``mrtf``, with
    ``machines_per_dc``, ``multipath``, ``redraw_ms``, ``per_connection``,
    ``connection_redraw_ms`` and ``mc`` (``rounds``, ``depth``, ``breadth``, ``mean_cost``,
    ``one_draw``) as ``coflow sim``'s flags of those names.
    ``progress=True`` draws a bar while it runs when tqdm is installed, ``False`` draws none, and
    a callable is called as ``progress(done, total)`` (units of work: coflows replayed over all
    policies) about every 100 ms and once at the end, on the calling thread; an exception it
    raises stops the run and propagates, as Ctrl-C stops the call.
    Errors (:class:`ValueError`) name the option.
    """
    w = _workload_arg(workload)
    names = _policy_list(policies)
    seed, threads, stages = _run_counts(seed, threads, stages)
    deadlines, offline = _flag(deadlines, "deadlines"), _flag(offline, "offline")
    multipath, per_connection = _flag(multipath, "multipath"), _flag(per_connection, "per_connection")
    baseline, deadline_x = _baseline(baseline), _deadline_x(deadline_x, deadlines)
    if deadline_fraction is not None:
        deadline_fraction = _real(deadline_fraction, "deadline_fraction")
    if deadline_fraction is not None and deadlines:
        raise ValueError("deadline_fraction: give either deadlines=True or deadline_fraction, not both")
    wan_options = _wan_options(wan, machines_per_dc, multipath, redraw_ms, per_connection, connection_redraw_ms, mc)
    update, close = _progress_bar(progress, "simulate")
    try:
        results = _coflow.simulate(
            w._inner,
            names,
            _port_rate(port_rate),
            baseline,
            deadline_x if deadlines else None,
            deadline_fraction,
            offline,
            seed,
            threads,
            stages=stages,
            model_name=_name(model, "model"),
            coflowsim_rules=_name(coflowsim_rules, "coflowsim_rules"),
            wan=wan_options,
            progress=update,
        )
    finally:
        close()
    for note in results.notes:
        warnings.warn(note, stacklevel=2)
    return Report(results)


def sweep(
    workload: Union[WorkloadLike, str, "os.PathLike[str]"],
    concurrent: Sequence[int],
    windows: int = 5,
    policies: Union[str, Sequence[str]] = ("varys", "fair"),
    port_rate: Union[str, int, float] = "1Gbps",
    baseline: Optional[str] = "fair",
    deadlines: bool = False,
    deadline_x: float = 1.0,
    seed: int = 1,
    threads: Optional[int] = None,
    model: Optional[str] = None,
    coflowsim_rules: Optional[str] = None,
    stages: int = 1,
    progress: Progress = True,
) -> Report:
    """Replays the workload's coflow mix with N coflows all present at once, for each N of
    ``concurrent``, on ``windows`` windows per N, as ``coflow sim sweep`` does with the same
    options; the report's ``summary`` has one row per N and policy, each figure a mean over the
    windows. ``progress`` is as :func:`simulate`'s (units of work: windows replayed over all N
    and policies)."""
    w = _workload_arg(workload)
    names = _policy_list(policies)
    seed, threads, stages = _run_counts(seed, threads, stages)
    deadlines = _flag(deadlines, "deadlines")
    baseline, deadline_x = _baseline(baseline), _deadline_x(deadline_x, deadlines)
    if isinstance(concurrent, (str, bytes)) or not hasattr(concurrent, "__iter__"):
        raise ValueError(f"concurrent: expected a list of numbers of coflows, got {concurrent!r}")
    ns = [_count(n, "concurrent") for n in concurrent]
    update, close = _progress_bar(progress, "sweep")
    try:
        results = _coflow.simulate(
            w._inner,
            names,
            _port_rate(port_rate),
            baseline,
            deadline_x if deadlines else None,
            None,
            False,
            seed,
            threads,
            stages=stages,
            model_name=_name(model, "model"),
            coflowsim_rules=_name(coflowsim_rules, "coflowsim_rules"),
            sweep=(ns, _count(windows, "windows")),
            progress=update,
        )
    finally:
        close()
    return Report(results)
