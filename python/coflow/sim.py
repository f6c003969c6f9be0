"""The trace simulator as a library: workloads, :func:`simulate`, and its :class:`Report`.

The runs, the lower bounds and the report are those of ``coflow sim`` (the same Rust code):
``simulate(...).to_json()`` is byte for byte what ``coflow sim --json`` writes on the same inputs.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

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
    "POLICIES",
]

#: The policies :func:`simulate` knows (``"all"`` runs every one).
POLICIES: Tuple[str, ...] = tuple(_coflow.POLICIES)


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
    """A workload to simulate: from :func:`read_trace`, :func:`synthetic` or :func:`workload`."""

    def __init__(self, inner: _coflow.Workload) -> None:
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

    def to_dataframe(self) -> "pd.DataFrame":
        """One row per flow: coflow, arrival (s), src, dst, bytes, deadline (s), weight, parents."""
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

    Errors (:class:`ValueError`) name the line.
    """
    return Workload(_coflow.read_trace(str(path)))


def synthetic(seed: int = 1, coflows: Optional[int] = None, machines: Optional[int] = None) -> Workload:
    """The seeded synthetic workload shaped like the Facebook trace that ``coflow sim`` replays by
    default (``--seed``, ``--coflows``, ``--machines``; the same defaults)."""
    return Workload(_coflow.synthetic(seed, coflows, machines))


WorkloadLike = Union[Workload, "pd.DataFrame", Iterable[Union[Coflow, Mapping[str, Any]]]]


def _nanos(value: Any, what: str) -> int:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number of seconds, got {value!r}") from None
    if not (seconds >= 0.0 and seconds != float("inf")):
        raise ValueError(f"{what}: must be a non-negative number of seconds, got {value!r}")
    return round(seconds * 1e9)


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a non-negative integer, got {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a non-negative integer, got {value!r}") from None
    if n != value or n < 0:
        raise ValueError(f"{what}: expected a non-negative integer, got {value!r}")
    return n


def _flow(f: Any, what: str) -> Dict[str, int]:
    if isinstance(f, Flow):
        src, dst, size = f.src, f.dst, f.bytes
    elif isinstance(f, Mapping):
        missing = [k for k in ("src", "dst", "bytes") if k not in f]
        if missing:
            raise ValueError(f"{what}: missing field {missing[0]!r}")
        src, dst, size = f["src"], f["dst"], f["bytes"]
    else:
        try:
            src, dst, size = f
        except (TypeError, ValueError):
            raise ValueError(f"{what}: expected a Flow, a (src, dst, bytes) tuple or a mapping, got {f!r}") from None
    return {
        "src": _count(src, f"{what}: src"),
        "dst": _count(dst, f"{what}: dst"),
        "bytes": _count(size, f"{what}: bytes"),
    }


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
    if not isinstance(c, Mapping):
        raise ValueError(f"coflow {i}: expected a Coflow or a mapping, got {c!r}")
    for k in ("id", "arrival", "flows"):
        if k not in c:
            raise ValueError(f"coflow {i}: missing field {k!r}")
    unknown = set(c) - {"id", "arrival", "flows", "deadline", "weight", "parents"}
    if unknown:
        raise ValueError(f"coflow {i}: unknown field {sorted(unknown)[0]!r}")
    cid = _count(c["id"], f"coflow {i}: id")
    what = f"coflow {cid}"
    rec: Dict[str, Any] = {
        "id": cid,
        "arrival_ns": _nanos(c["arrival"], f"{what}: arrival"),
        "flows": [_flow(f, f"{what} flow {j}") for j, f in enumerate(c["flows"])],
    }
    deadline = c.get("deadline")
    if deadline is not None and deadline == deadline:  # NaN (a DataFrame's missing value) is none
        rec["deadline_ns"] = _nanos(deadline, f"{what}: deadline")
    weight = c.get("weight", 1.0)
    if weight is None or weight != weight:
        weight = 1.0
    try:
        rec["weight"] = float(weight)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: weight: expected a number, got {weight!r}") from None
    parents = c.get("parents") or []
    rec["parents"] = [_count(p, f"{what}: parents") for p in parents]
    return rec


def _records_from_dataframe(df: "pd.DataFrame") -> List[Dict[str, Any]]:
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
        c = coflows.get(cid)
        if c is None:
            coflows[cid] = {
                "id": cid,
                "arrival": row["arrival"],
                "flows": [flow],
                "deadline": row.get("deadline"),
                "weight": row.get("weight", 1.0),
                "parents": row.get("parents") if isinstance(row.get("parents"), (list, tuple)) else [],
            }
            continue
        for k in ("arrival", "deadline", "weight"):
            a, b = c.get(k), row.get(k)
            same = a == b or (a is None and b is None) or (a != a and b != b)
            if not same:
                raise ValueError(f"coflow {cid}: column {k!r} differs between its flows ({a!r} and {b!r})")
        c["flows"].append(flow)
    return list(coflows.values())


def workload(data: WorkloadLike, machines: Optional[int] = None, source: str = "python") -> Workload:
    """A workload from Python data.

    ``data`` is a list of coflows (:class:`Coflow` or mappings with ``id``, ``arrival`` (s),
    ``flows`` (each a :class:`Flow`, a ``(src, dst, bytes)`` tuple or a mapping), and optional
    ``deadline`` (s after arrival), ``weight``, ``parents``), or a pandas DataFrame with one row
    per flow and columns ``coflow``, ``arrival``, ``src``, ``dst``, ``bytes`` and optional
    ``deadline``, ``weight``, ``parents``.
    ``machines`` defaults to one more than the largest endpoint.
    Errors (:class:`ValueError`) name the coflow and the field.
    """
    if isinstance(data, Workload):
        return data
    if hasattr(data, "columns") and hasattr(data, "to_dict"):
        raw: Iterable[Any] = _records_from_dataframe(data)  # type: ignore[arg-type]
    else:
        raw = data  # type: ignore[assignment]
    records = [_coflow_record(c, i) for i, c in enumerate(raw)]
    largest = max((max(f["src"], f["dst"]) for r in records for f in r["flows"]), default=-1)
    if machines is None:
        machines = largest + 1
    machines = _count(machines, "machines")
    if machines == 0:
        raise ValueError("machines: a workload needs at least one machine")
    if largest >= machines:
        raise ValueError(f"machines: a flow's endpoint is machine {largest}, but there are only {machines} machines")
    header = {"format": "coflow-jsonl", "version": 1, "machines": machines}
    lines = [json.dumps(header)] + [json.dumps(r) for r in records]
    return Workload(_coflow.parse_workload("\n".join(lines) + "\n", source))


# `simulate`'s parameter is named `workload` too.
_make_workload = workload


class Report:
    """What :func:`simulate` found, as ``coflow sim`` reports it."""

    def __init__(self, results: _coflow.Results) -> None:
        self._results = results
        self._data: Dict[str, Any] = json.loads(results.json)

    def to_json(self) -> str:
        """The JSON report, byte for byte as ``coflow sim --json`` writes it."""
        return self._results.json

    @property
    def data(self) -> Dict[str, Any]:
        """The JSON report, parsed."""
        return self._data

    @property
    def describe(self) -> str:
        """The workload's line at the top of the report."""
        return self._results.describe

    @property
    def baseline(self) -> Optional[str]:
        """The policy the others are compared against."""
        return self._data["baseline"]

    @property
    def summary(self) -> "pd.DataFrame":
        """One row per policy asked for (indexed by policy): the JSON report's ``results``."""
        import pandas as pd

        df = pd.DataFrame(self._data["results"])
        df.index = pd.Index(df["policy"].tolist())
        return df

    @property
    def coflows(self) -> "pd.DataFrame":
        """One row per coflow and policy asked for: ``coflow sim --csv``'s fields."""
        import pandas as pd

        return pd.read_csv(io.StringIO(self._results.csv), keep_default_na=True)

    @property
    def lower_bounds(self) -> Dict[str, Any]:
        """The lower bounds on the average CCT (isolation, per-port, LP relaxation) and the best."""
        return dict(self._data["lower_bounds"])

    @property
    def wall_s(self) -> Dict[str, float]:
        """Each policy's wall time in seconds."""
        return dict(self._results.wall_s)

    def plot(self, path: Any = None) -> "Figure":
        """Draws what ``coflow sim --plot`` draws: each policy's CCT distribution (log axis), the
        baseline's among them, beside each policy's factor of improvement over the baseline per
        bin. Saves to ``path`` if given; returns the matplotlib figure. Needs ``matplotlib``."""
        try:
            import matplotlib

            if path is not None:
                matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("Report.plot needs matplotlib: pip install 'coflow[plot]'") from e
        import pandas as pd

        rows = self.coflows
        if self._results.baseline_csv is not None:
            rows = pd.concat([rows, pd.read_csv(io.StringIO(self._results.baseline_csv))], ignore_index=True)
        fig, (cdf, bins) = plt.subplots(1, 2, figsize=(15, 6.4))
        rate = self.describe.rsplit("; ports at ", 1)[-1]
        fig.suptitle(f"{self._data['workload']['source']} — ports at {rate}")
        for policy, group in rows.groupby("policy", sort=False):
            cct = group["cct_s"].dropna().sort_values().to_numpy()
            if len(cct) == 0:
                continue
            frac = [(i + 1) / len(group) for i in range(len(cct))]
            cdf.step(cct, frac, where="post", label=str(policy))
        cdf.set_xscale("log")
        cdf.set_xlabel("coflow completion time (s)")
        cdf.set_ylabel("fraction of coflows")
        cdf.set_title("CCT distribution")
        cdf.legend()
        names = [r["policy"] for r in self._data["results"]]
        bin_names = [b["bin"] for b in self._data["results"][0]["bins"]] if names else []
        width = 0.8 / max(1, len(names))
        for k, r in enumerate(self._data["results"]):
            factors = [b["factor_vs_baseline"] or 0.0 for b in r["bins"]]
            xs = [i + k * width for i in range(len(bin_names))]
            bins.bar(xs, factors, width=width, label=r["policy"])
        bins.axhline(1.0, color="grey", linewidth=0.8)
        bins.set_xticks([i + 0.4 - width / 2 for i in range(len(bin_names))])
        bins.set_xticklabels(bin_names)
        bins.set_ylabel(f"average CCT of {self.baseline} / policy's")
        bins.set_title(f"improvement over {self.baseline} by bin")
        bins.legend()
        if path is not None:
            fig.savefig(str(path))
        return fig

    def __repr__(self) -> str:
        return f"Report({self.describe!r})"


def simulate(
    workload: WorkloadLike,
    policies: Union[str, Sequence[str]] = ("varys", "fair"),
    port_rate: str = "1Gbps",
    baseline: str = "fair",
    deadlines: bool = False,
    deadline_x: float = 1.0,
    deadline_fraction: Optional[float] = None,
    offline: bool = False,
    wan: Optional[str] = None,
    seed: int = 1,
    threads: Optional[int] = None,
) -> Report:
    """Replays ``workload`` under each of ``policies`` (a list, a comma-separated string, or
    ``"all"``), in parallel with the GIL released, as ``coflow sim`` does with the same options.

    ``baseline`` runs too (factors are against it); ``deadlines`` gives every coflow a deadline
    (the trace's, or drawn with slack ``deadline_x``), ``deadline_fraction`` a seeded fraction of
    them; ``offline`` releases every coflow at time 0. Errors (:class:`ValueError`) name the option.
    """
    if wan is not None:
        raise NotImplementedError("wan=: wide-area runs are not in the Python package yet; use `coflow sim --wan`")
    w = _make_workload(workload)
    names = policies if isinstance(policies, str) else ",".join(policies)
    if deadline_fraction is not None and deadlines:
        raise ValueError("deadline_fraction: give either deadlines=True or deadline_fraction, not both")
    results = _coflow.simulate(
        w._inner,
        names,
        port_rate,
        baseline,
        deadline_x if deadlines else None,
        deadline_fraction,
        offline,
        seed,
        threads,
    )
    return Report(results)
