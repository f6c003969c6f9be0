"""The simulator from Python: parity with `coflow sim --json` to the byte, workloads from Python
data against hand-computed CCTs, and errors that name the option or field."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import List

import numpy as np
import pandas as pd
import pytest

import coflow


def cli_json(coflow_bin: Path, tmp_path: Path, args: List[str]) -> str:
    out = tmp_path / "cli.json"
    run = subprocess.run([str(coflow_bin), "sim", *args, "--json", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return out.read_text()


def test_the_embedded_workload_gives_the_clis_json_to_the_byte(coflow_bin: Path, tmp_path: Path) -> None:
    expected = cli_json(coflow_bin, tmp_path, ["--coflows", "80", "--policies", "varys,fair,sincronia,aalo"])
    report = coflow.simulate(coflow.synthetic(coflows=80), policies=["varys", "fair", "sincronia", "aalo"])
    assert report.to_json() == expected
    assert list(report.summary["policy"]) == ["varys", "fair", "sincronia", "aalo"]


def test_default_synthetic_average_ccts_match_the_cli(coflow_bin: Path, tmp_path: Path) -> None:
    expected = json.loads(cli_json(coflow_bin, tmp_path, ["--policies", "varys,fair"]))
    summary = coflow.simulate(coflow.synthetic(), policies=["varys", "fair"]).summary
    for r in expected["results"]:
        assert summary.loc[r["policy"], "avg_cct_s"] == r["avg_cct_s"]


def test_deadlines_offline_and_a_baseline_not_asked_for_match_the_cli(coflow_bin: Path, tmp_path: Path) -> None:
    args = ["--coflows", "40", "--seed", "3", "--policies", "edf,varys-deadline", "--deadline-fraction", "0.5"]
    expected = cli_json(coflow_bin, tmp_path, [*args, "--offline"])
    report = coflow.simulate(
        coflow.synthetic(seed=3, coflows=40),
        policies="edf,varys-deadline",
        deadline_fraction=0.5,
        offline=True,
        seed=3,
    )
    assert report.to_json() == expected
    # The CSV's rows are the policies asked for; the baseline's come only to the plot.
    assert set(report.coflows["policy"]) == {"edf", "varys-deadline"}
    expected = cli_json(coflow_bin, tmp_path, ["--coflows", "30", "--deadlines", "--policies", "varys-deadline"])
    report = coflow.simulate(coflow.synthetic(coflows=30), policies=["varys-deadline"], deadlines=True)
    assert report.to_json() == expected


def test_a_trace_file_gives_the_clis_json_to_the_byte(coflow_bin: Path, tmp_path: Path) -> None:
    # coflow-benchmark: "machines coflows", then per coflow: id arrival_ms mappers... reducers:MB...
    trace = tmp_path / "small.txt"
    trace.write_text("4 3\n1 0 2 0 1 2 2:10.0 3:4.0\n2 5 1 3 1 0:25.0\n3 20 2 1 2 1 3:1.5\n")
    args = ["--trace", str(trace), "--policies", "varys,fair,scf", "--port-rate", "128MiB/s"]
    expected = cli_json(coflow_bin, tmp_path, args)
    report = coflow.simulate(coflow.read_trace(str(trace)), policies=["varys", "fair", "scf"], port_rate="128MiB/s")
    assert report.to_json() == expected
    csv = tmp_path / "cli.csv"
    subprocess.run([str(coflow_bin), "sim", *args, "--csv", str(csv)], check=True, capture_output=True)
    assert report.coflows.equals(pd.read_csv(csv))


def test_policies_run_with_the_gil_released() -> None:
    w = coflow.synthetic(coflows=300)
    done: List[coflow.Report] = []
    t = threading.Thread(target=lambda: done.append(coflow.simulate(w, policies=["varys", "aalo", "sincronia"])))
    t.start()
    spins = 0
    while t.is_alive():
        spins += 1
    t.join()
    # Holding the GIL, the simulation would leave this thread a handful of turns at most.
    assert len(done) == 1 and spins > 10_000, spins


def two_coflows_on_one_port() -> pd.DataFrame:
    # Coflow 1: 125 MB from machine 0 to 1; coflow 2: 62.5 MB from machine 0 to 2; both at t=0.
    return pd.DataFrame(
        {
            "coflow": [1, 2],
            "arrival": [0.0, 0.0],
            "src": [0, 0],
            "dst": [1, 2],
            "bytes": [125_000_000, 62_500_000],
        }
    )


def test_a_dataframe_workload_gives_hand_computed_ccts() -> None:
    one = pd.DataFrame({"coflow": [7], "arrival": [2.5], "src": [0], "dst": [1], "bytes": [125_000_000]})
    report = coflow.simulate(one, policies=["varys"], baseline="varys")
    # 125 MB at 1 Gbit/s (125 MB/s) takes one second.
    assert report.summary.loc["varys", "avg_cct_s"] == pytest.approx(1.0, abs=1e-9)
    assert report.coflows.loc[0, "arrival_s"] == pytest.approx(2.5)

    report = coflow.simulate(two_coflows_on_one_port(), policies=["varys", "fair"])
    cct = report.coflows.set_index(["policy", "coflow"])["cct_s"]
    # Varys: the smaller coflow first at the full port (0.5 s), then the larger (1 s more).
    assert cct[("varys", 2)] == pytest.approx(0.5, abs=1e-6)
    assert cct[("varys", 1)] == pytest.approx(1.5, abs=1e-6)
    # Fair: halves of the port until the smaller finishes (62.5 MB at 62.5 MB/s), then the rest.
    assert cct[("fair", 2)] == pytest.approx(1.0, abs=1e-6)
    assert cct[("fair", 1)] == pytest.approx(1.5, abs=1e-6)
    assert report.summary.loc["varys", "factor_vs_baseline"] == pytest.approx(1.25 / 1.0, abs=1e-6)


def test_lists_of_coflows_and_dataframes_give_the_same_workload() -> None:
    listed = coflow.workload(
        [
            coflow.Coflow(1, 0.0, [coflow.Flow(0, 1, 125_000_000)]),
            {"id": 2, "arrival": 0.0, "flows": [(0, 2, 62_500_000)], "deadline": 4.0},
        ]
    )
    df = two_coflows_on_one_port()
    df["deadline"] = [None, 4.0]
    framed = coflow.workload(df)
    assert listed.to_jsonl() == framed.to_jsonl()
    assert (listed.machines, listed.coflows, listed.flows, listed.bytes) == (3, 2, 2, 187_500_000)
    back = framed.to_dataframe()
    assert list(back["bytes"]) == [125_000_000, 62_500_000]
    assert back["deadline"].iloc[1] == pytest.approx(4.0)


def test_workloads_and_reports_pickle_to_what_they_were() -> None:
    import pickle

    jobs = coflow.workload(
        [
            {"id": 1, "arrival": 0.0, "flows": [(0, 1, 10_000_000)], "deadline": 2.0, "weight": 2.0},
            {"id": 2, "arrival": 0.5, "flows": [(1, 2, 5_000_000), (0, 2, 1)], "parents": [1]},
        ]
    )
    for w in (coflow.synthetic(coflows=20), jobs):
        back = pickle.loads(pickle.dumps(w))
        assert (back.to_jsonl(), back.source) == (w.to_jsonl(), w.source)
        report = coflow.simulate(w, policies="varys,fair", threads=1, progress=False)
        assert coflow.simulate(back, policies="varys,fair", threads=1, progress=False).to_json() == report.to_json()
        kept = pickle.loads(pickle.dumps(report))
        assert (kept.to_json(), kept.kind, kept.describe, kept.wall_s) == (report.to_json(), report.kind, report.describe, report.wall_s)
        pd.testing.assert_frame_equal(kept.coflows, report.coflows)
        assert kept._repr_html_() == report._repr_html_()


def test_a_dataframe_coflow_of_many_flows_needs_only_the_required_columns() -> None:
    # Two flows of one coflow, with no weight, deadline or parents column: the defaults hold for
    # every row, and the coflow is one.
    df = pd.DataFrame({"coflow": [1, 1], "arrival": [0.0, 0.0], "src": [0, 1], "dst": [1, 0], "bytes": [5, 6]})
    w = coflow.workload(df)
    assert (w.coflows, w.flows, w.bytes) == (1, 2, 11)
    # Parents as a list or an array are kept; rows that disagree on them, or a cell that is not a
    # list, are errors naming the coflow and the column.
    jobs = pd.DataFrame(
        {"coflow": [1, 2, 2], "arrival": [0.0] * 3, "src": [0, 0, 1], "dst": [1, 1, 0], "bytes": [5, 5, 5]}
    )
    jobs["parents"] = [[], np.array([1]), np.array([1])]
    assert json.loads(coflow.workload(jobs).to_jsonl().splitlines()[2])["parents"] == [1]
    jobs["parents"] = [[], [1], []]
    with pytest.raises(ValueError, match=r"^coflow 2: column 'parents' differs between its flows"):
        coflow.workload(jobs)
    jobs["parents"] = [[], 1, 1]
    with pytest.raises(ValueError, match=r"^coflow 2: column 'parents' must be a list of coflow ids"):
        coflow.workload(jobs)


def test_numbers_and_lists_of_the_wrong_kind_are_errors_naming_the_option() -> None:
    w = coflow.synthetic(coflows=5)
    for option in ("seed", "threads", "stages"):
        with pytest.raises(ValueError, match=rf"^{option}: expected a non-negative integer, got -1"):
            coflow.simulate(w, **{option: -1})
    for policies in (None, 5, [b"varys"]):
        with pytest.raises(ValueError, match=r"^policies: expected a list of policy names"):
            coflow.simulate(w, policies=policies)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^concurrent: expected a list"):
        coflow.sweep(w, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^coflows: expected a non-negative integer"):
        coflow.synthetic(coflows=-1)
    with pytest.raises(ValueError, match=r"^baseline names one policy"):
        coflow.simulate(w, baseline="all")
    # An on-or-off option takes a boolean: the string "no" would otherwise be true.
    for option in ("deadlines", "offline", "multipath", "per_connection"):
        with pytest.raises(ValueError, match=rf"^{option}: expected True or False, got 'no'"):
            coflow.simulate(w, **{option: "no"})
    with pytest.raises(ValueError, match=r"^deadlines: expected True or False, got 1"):
        coflow.sweep(w, [2], deadlines=1)
    import numpy as np

    assert coflow.simulate(w, deadlines=np.True_).to_json() == coflow.simulate(w, deadlines=True).to_json()
    # Every option is a ValueError naming it, whatever the wrong value's type.
    wrong = [
        (dict(seed=2**64), r"^seed: at most 18446744073709551615"),
        (dict(threads=0), r"^threads must be at least 1"),
        (dict(baseline=3), r"^baseline: expected a policy's name or None"),
        (dict(deadlines=True, deadline_x="1"), r"^deadline_x: expected a number, got '1'"),
        (dict(deadline_fraction="half"), r"^deadline_fraction: expected a number"),
        (dict(wan=1), r"^wan: expected 'default' or a topology file's path, got 1"),
        (dict(wan="default", redraw_ms=-1), r"^redraw_ms: expected a non-negative integer, got -1"),
        (dict(wan="default", machines_per_dc=2**32), r"^machines_per_dc: at most 4294967295"),
        (dict(wan="default", policies="siphon-mc", mc={"rounds": "5"}), r"^mc rounds: expected a non-negative integer"),
        (dict(wan="default", policies="siphon-mc", mc={"one_draw": "yes"}), r"^mc one_draw: expected True or False"),
    ]
    for options, says in wrong:
        with pytest.raises(ValueError, match=says):
            coflow.simulate(w, progress=False, **options)
    with pytest.raises(ValueError, match=r"^deadline_x: expected a number"):
        coflow.sweep(w, [2], deadlines=True, deadline_x=None)
    # No baseline: None as the empty name.
    assert coflow.simulate(w, baseline=None).to_json() == coflow.simulate(w, baseline="").to_json()
    assert coflow.simulate(w, baseline=None).baseline is None
    # Bytes that would wrap around when summed are refused, not reported as none.
    with pytest.raises(ValueError, match=r"pass 2\^64"):
        coflow.workload([{"id": i, "arrival": 0.0, "flows": [(0, 1, 2**62)] * 2} for i in (1, 2)])


def test_bad_options_and_workloads_are_errors_naming_the_field() -> None:
    w = coflow.synthetic(coflows=5)
    with pytest.raises(ValueError, match=r'^policies: unknown policy "nope"'):
        coflow.simulate(w, policies=["varys", "nope"])
    with pytest.raises(ValueError, match=r'^port_rate "fast"'):
        coflow.simulate(w, port_rate="fast")
    with pytest.raises(ValueError, match=r"^baseline: unknown policy"):
        coflow.simulate(w, baseline="slowest")
    with pytest.raises(ValueError, match=r"^deadline_fraction must be between 0 and 1"):
        coflow.simulate(w, deadline_fraction=1.5)
    with pytest.raises(ValueError, match=r"^deadline_x must be a non-negative number"):
        coflow.simulate(w, deadlines=True, deadline_x=-1.0)
    # As `--deadline-x` requires `--deadlines`, deadline_x goes with deadlines=True.
    for x in (-1.0, 2.0):
        with pytest.raises(ValueError, match=rf"^deadline_x: only with deadlines=True .*, got {x}$"):
            coflow.simulate(w, deadline_x=x, progress=False)
        with pytest.raises(ValueError, match=r"^deadline_x: only with deadlines=True"):
            coflow.sweep(w, [2], deadline_x=x, progress=False)
    with pytest.raises(ValueError, match=r"^deadline_x: only with deadlines=True"):
        coflow.simulate(w, deadline_fraction=0.5, deadline_x=2.0, progress=False)
    with pytest.raises(ValueError, match=r"at least one machine"):
        coflow.synthetic(machines=0)
    df = two_coflows_on_one_port()
    with pytest.raises(ValueError, match=r"no column 'bytes'"):
        coflow.workload(df.drop(columns=["bytes"]))
    bad = df.copy()
    bad.loc[1, "bytes"] = -5
    with pytest.raises(ValueError, match=r"^coflow 2 flow 0: bytes"):
        coflow.workload(bad)
    with pytest.raises(ValueError, match=r"^coflow 1: arrival"):
        coflow.workload([{"id": 1, "arrival": "soon", "flows": []}])
    with pytest.raises(ValueError, match=r"^machines: a flow's endpoint is machine 2"):
        coflow.workload(df, machines=2)
    with pytest.raises(ValueError, match=r"^coflow 1: id: given to two coflows \(items 0 and 1\)$"):
        coflow.workload([{"id": 1, "arrival": 0, "flows": [(0, 1, 5)]}, {"id": 1, "arrival": 1, "flows": [(0, 1, 5)]}])


def test_values_of_the_wrong_type_are_errors_naming_the_field(tmp_path: Path) -> None:
    one = {"id": 1, "arrival": 0, "flows": [(0, 1, 100)]}
    wrong = [
        ({**one, "arrival": "0.5"}, r"^coflow 1: arrival: expected a number of seconds, got '0.5'$"),
        ({**one, "arrival": True}, r"^coflow 1: arrival: expected a number of seconds, got True$"),
        ({**one, "weight": "2"}, r"^coflow 1: weight: expected a number, got '2'$"),
        ({**one, "weight": True}, r"^coflow 1: weight: expected a number, got True$"),
        ({**one, "flows": None}, r"^coflow 1: flows: expected a list of flows, got None$"),
        ({**one, "flows": [(0, 2**32, 5)]}, r"^coflow 1 flow 0: dst: machine 4294967296 is out of range"),
    ]
    for c, says in wrong:
        with pytest.raises(ValueError, match=says):
            coflow.workload([c])
    with pytest.raises(ValueError, match=r"^workload: expected a list of coflows or a DataFrame, got int$"):
        coflow.workload(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^workload: expected a list of coflows or a DataFrame, got dict$"):
        coflow.workload(one)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^source: expected a string, got 5$"):
        coflow.workload([one], source=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^machines: at most 1000000, got 4294967296$"):
        coflow.workload([one], machines=2**32)
    w = coflow.workload([one])
    with pytest.raises(ValueError, match=r"^model: expected a string or None, got 3$"):
        coflow.simulate(w, model=3, progress=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^coflowsim_rules: expected a string or None, got 3$"):
        coflow.simulate(w, coflowsim_rules=3, progress=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^mc: expected a mapping of options, got 'abc'$"):
        coflow.simulate(w, wan="default", mc="abc", progress=False)  # type: ignore[arg-type]
    # A path may be bytes, as os functions take it; anything else is no path.
    trace = tmp_path / "one.txt"
    trace.write_text("2 1\n1 0 1 0 1 1:5\n")
    assert coflow.read_trace(os.fsencode(trace)).coflows == 1
    assert coflow.simulate(os.fsencode(trace), progress=False).data["workload"]["coflows"] == 1
    for nothing in (None, 3):
        with pytest.raises(TypeError, match=rf"^path: expected a file's path, got {nothing}$"):
            coflow.read_trace(nothing)


def test_a_dataframe_the_model_refuses_is_an_error_naming_the_coflow_and_field() -> None:
    # The user wrote rows, not the library's text lines: errors name the coflow (its `coflow`
    # cell) and the column, never a line.
    def rows(**columns: list) -> pd.DataFrame:
        return two_coflows_on_one_port().assign(**columns)

    wrong = [
        (rows(arrival=[0.0, 1e30]), r"^coflow 2: arrival: must be below 2\^64 ns \(about 18446744073\.7 seconds\), got 1e\+30$"),
        (rows(arrival=[0.0, 18446744073.71]), r"^coflow 2: arrival: must be below 2\^64 ns"),
        (rows(deadline=[1e30, None]), r"^coflow 1: deadline: must be below 2\^64 ns"),
        (rows(weight=[1.0, 0]), r"^coflow 2: weight: must be a positive finite number, got 0"),
        (rows(weight=[float("inf"), 1.0]), r"^coflow 1: weight: must be a positive finite number, got inf$"),
        (rows(parents=[[], [7]]), r"^coflow 2: parent 7 is not a coflow of this trace$"),
        (rows(parents=[[2], [1]]), r"^workload: coflow 1 depends on itself through its parents \(a dependency cycle\)$"),
    ]
    for df, says in wrong:
        with pytest.raises(ValueError, match=says):
            coflow.workload(df)
    # The largest time there is still holds.
    w = coflow.workload(rows(arrival=[0.0, 18446744073.7]))
    assert json.loads(w.to_jsonl().splitlines()[2])["arrival_ns"] == 18446744073699999744


def test_a_bad_trace_is_an_error_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("2 1\n1 0 1 0 1 5\n")
    with pytest.raises(ValueError, match=r"line 2"):
        coflow.read_trace(bad)
    with pytest.raises(FileNotFoundError, match=r"nowhere"):
        coflow.read_trace(tmp_path / "nowhere.txt")
    with pytest.raises(FileNotFoundError, match=r"^reading trace .*nowhere"):
        coflow.simulate(tmp_path / "nowhere.txt")
    # A file the system cannot read is the OSError of its kind; one that is not text names its line.
    with pytest.raises(IsADirectoryError, match=r"^reading trace "):
        coflow.read_trace(tmp_path)
    bad.write_bytes(b"2 1\n1 0 1 0 1 1:\xff\n")
    with pytest.raises(ValueError, match=r"^reading trace .*bad.txt: line 2, column 13: not UTF-8 text$"):
        coflow.read_trace(bad)


def test_the_plot_draws_every_policy_and_the_baseline(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report = coflow.simulate(coflow.synthetic(coflows=40), policies=["varys", "scf"])
    out = tmp_path / "plot.png"
    fig = report.plot(out)
    assert out.stat().st_size > 10_000
    cdf, bins = fig.axes
    # As `coflow sim --plot` draws them: the baseline in black and drawn last, the others'
    # factors (not the baseline's) per bin and over all coflows on a log axis.
    assert [l.get_label() for l in cdf.get_lines()] == ["varys", "scf", "fair (baseline)"]
    assert cdf.get_lines()[-1].get_color() == "black"
    assert len(bins.patches) == 2 * (len(report.summary.loc["varys", "bins"]) + 1)
    assert bins.get_yscale() == "log"
    assert [t.get_text() for t in bins.get_xticklabels()][-1] == "all (40)"
    with_baseline = coflow.simulate(coflow.synthetic(coflows=40), policies=["fair", "varys"], progress=False).plot()
    assert len(with_baseline.axes[1].patches) == len(report.summary.loc["varys", "bins"]) + 1
    # SVG or PNG by the extension, as the command writes; any other is refused before drawing.
    report.plot(tmp_path / "plot.SVG")
    assert (tmp_path / "plot.SVG").read_text().lstrip().startswith("<?xml")
    for name in ("cct.jpg", "cct"):
        with pytest.raises(ValueError, match=rf"^path '.*{name}': the file name must end in \.svg or \.png$"):
            report.plot(tmp_path / name)
        assert not list(tmp_path.glob(f"{name}*"))
    # Without a baseline, the distributions alone; a sweep has none to draw.
    alone = coflow.simulate(coflow.synthetic(coflows=40), policies=["varys"], baseline="").plot()
    assert len(alone.axes) == 1
    swept = coflow.sweep(coflow.synthetic(coflows=40), [10], windows=1, policies=["varys"])
    with pytest.raises(ValueError, match=r"^plot: a sweep's report"):
        swept.plot()
    # An empty workload draws its panels empty.
    empty = coflow.simulate(coflow.synthetic(coflows=0), ["varys", "fair"], progress=False).plot()
    assert len(empty.axes) == 2 and not empty.axes[0].get_lines()


def test_a_trace_read_from_a_fifo_no_one_writes_stops_at_ctrl_c(tmp_path: Path) -> None:
    # The read runs off the interpreter's thread, which wakes for signals: Ctrl-C ends it at once.
    fifo = tmp_path / "trace.txt"
    os.mkfifo(fifo)
    # The child takes Ctrl-C as an interactive interpreter does, even when this test runs where
    # SIGINT is ignored (a job a non-interactive shell put in the background), which the child
    # would inherit; one still there after 8 s writes where each of its threads is.
    code = (
        "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import faulthandler\nfaulthandler.dump_traceback_later(8)\n"
        f"import coflow\nprint('reading', flush=True)\ncoflow.read_trace({str(fifo)!r})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "reading\n"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"Ctrl-C did not end the read within 10 s; the child's threads:\n{err}")
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err, err


def test_numpy_booleans_are_no_counts() -> None:
    for flow in [(np.bool_(True), 1, 5), (0, np.bool_(True), 5), (0, 1, np.bool_(True))]:
        with pytest.raises(ValueError, match=r"expected a non-negative integer, got (np\.)?True"):
            coflow.workload([{"id": 1, "arrival": 0, "flows": [flow]}])
    with pytest.raises(ValueError, match=r"^seed: expected a non-negative integer"):
        coflow.simulate(coflow.synthetic(coflows=4), ["varys"], seed=np.bool_(False), progress=False)


def test_the_wide_area_gives_the_clis_json_to_the_byte(coflow_bin: Path, tmp_path: Path) -> None:
    args = ["--coflows", "40", "--policies", "mrtf,siphon-mc,varys,pfp", "--wan", "default", "--multipath"]
    expected = cli_json(coflow_bin, tmp_path, [*args, "--mc-rounds", "8"])
    with pytest.warns(UserWarning, match=r"^skipping pfp: they assume the big switch"):
        report = coflow.simulate(
            coflow.synthetic(coflows=40),
            policies="mrtf,siphon-mc,varys,pfp",
            wan="default",
            multipath=True,
            mc={"rounds": 8},
        )
    assert report.to_json() == expected
    assert report.kind == "wide_area" and report.baseline == "mrtf" and report.lower_bounds is None
    assert set(report.bins["bin"]) == {"<10MiB", "10-100MiB", "100MiB-1GiB", ">=1GiB"}
    # No baseline is no baseline the wide area overrides: nothing to warn of.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        coflow.simulate(coflow.synthetic(coflows=20, machines=12), wan="default", baseline=None, progress=False)
    with pytest.raises(ValueError, match=r"^multipath: only for a wide-area run"):
        coflow.simulate(coflow.synthetic(coflows=5), multipath=True)
    # A topology file that cannot be opened is the OSError of its kind, as a trace's is.
    with pytest.raises(FileNotFoundError, match=r"^reading topology .*nowhere\.json: No such file"):
        coflow.simulate(coflow.synthetic(coflows=5), wan=tmp_path / "nowhere.json", progress=False)
    with pytest.raises(IsADirectoryError, match=r"^reading topology "):
        coflow.simulate(coflow.synthetic(coflows=5), wan=str(tmp_path), progress=False)
    with pytest.raises(ValueError, match=r"^wan: a topology file's path is UTF-8 text"):
        coflow.simulate(coflow.synthetic(coflows=5), wan=os.fsencode(str(tmp_path)) + b"/top\xff.json", progress=False)


def test_the_reference_model_and_stages_give_the_clis_json_to_the_byte(coflow_bin: Path, tmp_path: Path) -> None:
    expected = cli_json(coflow_bin, tmp_path, ["--coflows", "60", "--policies", "varys,scf", "--model", "coflowsim"])
    report = coflow.simulate(coflow.synthetic(coflows=60), policies="varys,scf", model="coflowsim")
    assert report.to_json() == expected
    args = ["--coflows", "60", "--seed", "2", "--policies", "varys,aalo-job", "--stages", "3"]
    expected = cli_json(coflow_bin, tmp_path, args)
    report = coflow.simulate(coflow.synthetic(seed=2, coflows=60), policies="varys,aalo-job", stages=3, seed=2)
    assert report.to_json() == expected
    assert "(jobs of 3 stages)" in report.data["workload"]["source"]
    with pytest.raises(ValueError, match=r"^model: expected"):
        coflow.simulate(coflow.synthetic(coflows=5), model="approximate")
    with pytest.raises(ValueError, match=r"^policies: .*sincronia"):
        coflow.simulate(coflow.synthetic(coflows=5), policies="sincronia", model="coflowsim")
    # Rules alone choose the reference model, as --coflowsim-rules does; beside model="exact"
    # they are refused, as --model exact --coflowsim-rules is.
    ruled = dict(policies="varys,scf", coflowsim_rules="epochs")
    w = coflow.synthetic(coflows=60)
    expected = cli_json(coflow_bin, tmp_path, ["--coflows", "60", "--policies", "varys,scf", "--coflowsim-rules", "epochs"])
    assert coflow.simulate(w, **ruled).to_json() == expected
    assert coflow.simulate(w, model="coflowsim", **ruled).to_json() == expected
    with pytest.raises(ValueError, match=r"^coflowsim_rules are the reference simulator's"):
        coflow.simulate(w, model="exact", **ruled)


def test_a_sweep_gives_the_clis_json_to_the_byte(coflow_bin: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    args = ["sim", "sweep", "--coflows", "60", "--concurrent", "10,20", "--windows", "2", "--policies", "varys,sincronia"]
    run = subprocess.run([str(coflow_bin), *args, "--deadlines", "--json", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = coflow.sweep(
        coflow.synthetic(coflows=60), concurrent=[10, 20], windows=2, policies=["varys", "sincronia"], deadlines=True
    )
    assert report.to_json() == out.read_text()
    assert report.kind == "sweep"
    assert list(report.summary.index) == [(10, "varys"), (10, "sincronia"), (20, "varys"), (20, "sincronia")]
    assert "improvement of average CCT over fair" in report.tables
    assert "sweep: 2 windows per N; windows of N consecutive coflows" in report.describe
    plain = coflow.sweep(coflow.synthetic(coflows=30), concurrent=[10], windows=1, policies=["varys"])
    assert "(add deadlines=True for the share" in plain.tables, "the hint in Python's spelling"
    with pytest.raises(ValueError, match=r"^concurrent 61: must be between 1 and the workload's 60 coflows"):
        coflow.sweep(coflow.synthetic(coflows=60), concurrent=[61])


def test_a_decimal_or_a_fraction_is_a_number() -> None:
    from decimal import Decimal
    from fractions import Fraction

    w = coflow.synthetic(coflows=20)
    want = coflow.simulate(w, policies="varys", deadlines=True, deadline_x=1.5).to_json()
    for x in (Decimal("1.5"), Fraction(3, 2)):
        assert coflow.simulate(w, policies="varys", deadlines=True, deadline_x=x).to_json() == want
    with pytest.raises(ValueError, match=r"^deadline_x: expected a number a float holds"):
        coflow.simulate(w, policies="varys", deadlines=True, deadline_x=10**400)
    with pytest.raises(ValueError, match=r"^deadline_x must be a non-negative number, at most 1000, got inf"):
        coflow.simulate(w, policies="varys", deadlines=True, deadline_x=Decimal("1e400"))
    with pytest.raises(ValueError, match=r"^deadline_x must be a non-negative number, at most 1000, got 1e308"):
        coflow.simulate(w, policies="varys", deadlines=True, deadline_x=1e308)


def test_a_numeric_port_rate_is_bytes_per_second() -> None:
    w = coflow.synthetic(coflows=30)
    assert coflow.simulate(w, port_rate=125_000_000).to_json() == coflow.simulate(w, port_rate="1Gbps").to_json()
    with pytest.raises(ValueError, match=r"^port_rate: a number of bytes per second must be whole"):
        coflow.simulate(w, port_rate=1.5)
    # Too fast for any port: refused by name, the value in its short form.
    with pytest.raises(ValueError, match=r'^port_rate "1e\+300": at most 1 Pbit/s'):
        coflow.simulate(w, port_rate=1e300)
    # numpy's numbers, as a DataFrame's cell gives them, are numbers too.
    import numpy as np

    same = coflow.simulate(w, port_rate="1Gbps").to_json()
    for rate in (np.int64(125_000_000), np.float64(125e6), np.uint32(125_000_000)):
        assert coflow.simulate(w, port_rate=rate).to_json() == same, type(rate)
    with pytest.raises(ValueError, match=r"^port_rate: expected a rate"):
        coflow.simulate(w, port_rate=np.True_)


def test_a_report_renders_as_html_and_has_a_tidy_frame_per_bin() -> None:
    report = coflow.simulate(coflow.synthetic(coflows=30), policies=["varys", "fair"], baseline="fair")
    page = report._repr_html_()
    assert page.startswith("<table>") and page.count("<tr>") == 3, page
    assert "<th>avg_cct_s</th>" in page and "<td>varys</td>" in page
    bins = report.bins
    assert list(bins.columns[:2]) == ["policy", "bin"] and len(bins) == 2 * 4
    by = bins.set_index(["policy", "bin"])
    for r in report.data["results"]:
        for b in r["bins"]:
            assert by.loc[(r["policy"], b["bin"]), "coflows"] == b["coflows"]
    assert coflow.__version__ == coflow._coflow.__version__ and coflow.__version__[0].isdigit()


def test_progress_is_reported_and_ctrl_c_stops_a_run() -> None:
    from coflow import _coflow

    w = coflow.synthetic(coflows=60)
    seen: List[tuple] = []
    _coflow.simulate(w._inner, "varys,fair", "1Gbps", "fair", None, None, False, 1, 1, progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1] == (2 * 60, 2 * 60), seen[-3:]
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:])), "progress only moves forward"

    import _thread
    import signal
    import time

    # Replays that would run for hours: `varys` at 1 kbit/s decides every 200 ms of
    # simulated time (starvation freedom) and finishes no coflow for a long while.
    endless = dict(policies="varys,fair", port_rate="1kbps", threads=2)
    # With no progress reported, and with a callable of the caller's reporting it.
    for progress in (False, lambda done, total: None):
        # A process started in the background inherits SIGINT ignored, and Python then raises no
        # KeyboardInterrupt (interrupt_main does nothing): install Python's own handler for the test.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        timer = threading.Timer(0.5, _thread.interrupt_main)
        started = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                coflow.simulate(w, progress=progress, **endless)
        finally:
            elapsed = time.monotonic() - started
            timer.cancel()
            signal.signal(signal.SIGINT, previous)
        # The call returns within a tick of the signal, and the replays stop with it: over the next
        # second the process uses next to no CPU, where two replays still going would use two seconds.
        assert elapsed < 2.0, elapsed
        time.sleep(0.1)
        cpu = time.process_time()
        time.sleep(1.0)
        assert time.process_time() - cpu < 0.5, "the replays go on after Ctrl-C"

    # An error raised by the progress callback stops the replays too.
    def fail(done: int, total: int) -> None:
        raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError):
        _coflow.simulate(w._inner, "varys,fair", "1kbps", "fair", None, None, False, 1, 2, progress=fail)
    time.sleep(0.1)
    cpu = time.process_time()
    time.sleep(1.0)
    assert time.process_time() - cpu < 0.5, "the replays go on after the callback's error"
    # And a sweep's.
    with pytest.raises(ZeroDivisionError):
        _coflow.simulate(w._inner, "varys", "1kbps", "varys", None, None, False, 1, 2, sweep=([30], 2), progress=fail)
    time.sleep(0.1)
    cpu = time.process_time()
    time.sleep(1.0)
    assert time.process_time() - cpu < 0.5, "the sweep goes on after the callback's error"


def test_a_coflow_left_unfinished_is_warned_of() -> None:
    # 10 TB at 1 kbit/s takes 2,500 years, past the 584 a replay's clock holds.
    w = coflow.workload([{"id": 1, "arrival": 0, "flows": [(0, 1, 10**13)]}, {"id": 2, "arrival": 0, "flows": [(1, 0, 1000)]}])
    with pytest.warns(UserWarning, match=r"^fair: 1 of 2 coflows did not finish \(a replay ends at 584 years"):
        report = coflow.simulate(w, policies="fair", port_rate="1kbps", baseline=None, progress=False)
    assert report.summary.loc["fair", "completed"] == 1


def test_records_name_the_item_a_misspelled_field_and_a_bad_list() -> None:
    with pytest.raises(ValueError, match=r"^coflow item 0 \(id 5\): missing field 'arrival' \(and has unknown field 'arival'\)$"):
        coflow.workload([{"id": 5, "arival": 0, "flows": [(0, 1, 5)]}])
    with pytest.raises(ValueError, match=r"^coflow item 1: missing field 'id'$"):
        coflow.workload([{"id": 5, "arrival": 0, "flows": [(0, 1, 5)]}, {"arrival": 0, "flows": []}])
    with pytest.raises(ValueError, match=r"^coflow 1 flow 0: unknown field 'size'$"):
        coflow.workload([{"id": 1, "arrival": 0, "flows": [{"src": 0, "dst": 1, "bytes": 5, "size": 9}]}])
    with pytest.raises(ValueError, match=r"^machines: no flow names a machine"):
        coflow.workload([])
    assert coflow.workload([], machines=2).coflows == 0
    with pytest.raises(ValueError, match=r"^machines: at most 1000000, got 4294967296$"):
        coflow.synthetic(machines=2**32)
    w = coflow.synthetic(coflows=5)
    for item in ("", " ", "varys,fair"):
        with pytest.raises(ValueError, match=r"^policies: each item of a list names one policy"):
            coflow.simulate(w, policies=["varys", item], progress=False)


def test_a_path_need_not_be_utf8(tmp_path: Path) -> None:
    name = os.path.join(os.fsencode(tmp_path), b"\xff.txt")
    with pytest.raises(FileNotFoundError):
        coflow.read_trace(name)
    with open(name, "w") as f:
        f.write("2 1\n1 0 1 0 1 1:5\n")
    assert coflow.read_trace(name).coflows == 1


def test_machines_are_bounded_as_a_trace_file_bounds_them() -> None:
    # An endpoint past the most machines a workload holds is named where the user wrote it,
    # rather than as the count of machines it would imply.
    with pytest.raises(ValueError, match=r"^coflow 1 flow 0: dst: machine 4294967295 is out of range: .* at most 1000000$"):
        coflow.workload([{"id": 1, "arrival": 0, "flows": [(0, 2**32 - 1, 5)]}])
    with pytest.raises(ValueError, match=r"^coflow 1 flow 0: src: machine 1000000 is out of range"):
        coflow.workload([{"id": 1, "arrival": 0, "flows": [(10**6, 0, 5)]}])
    # The count given names the argument, not a line of text the user never wrote.
    with pytest.raises(ValueError, match=r"^machines: at most 1000000, got 4294967295$"):
        coflow.workload([{"id": 1, "arrival": 0, "flows": [(0, 1, 5)]}], machines=2**32 - 1)
    assert coflow.workload([{"id": 1, "arrival": 0, "flows": [(0, 999_999, 5)]}]).machines == 10**6


def test_a_workload_of_no_machines_is_taken_however_it_comes(tmp_path: Path) -> None:
    # A trace file may declare 0 machines when no flow names one; so may Python data.
    bench = tmp_path / "empty.txt"
    bench.write_text("0 0\n")
    jsonl = tmp_path / "flowless.jsonl"
    jsonl.write_text('{"format":"coflow-jsonl","version":1,"machines":0}\n{"id":1,"arrival_ns":0,"flows":[]}\n')
    empty, flowless = coflow.read_trace(bench), coflow.read_trace(jsonl)
    assert (empty.machines, empty.coflows, flowless.machines, flowless.coflows) == (0, 0, 0, 1)
    assert coflow.workload([], machines=0).to_jsonl() == empty.to_jsonl()
    given = coflow.workload([{"id": 1, "arrival": 0, "flows": []}], machines=0)
    assert given.to_jsonl() == flowless.to_jsonl()
    assert coflow.simulate(given, policies="varys", progress=False).summary.loc["varys", "completed"] == 1
    # A flow needs its machines, wherever it comes from.
    with pytest.raises(ValueError, match=r"^machines: a flow's endpoint is machine 1, but there are only 0 machines$"):
        coflow.workload([{"id": 1, "arrival": 0, "flows": [(0, 1, 5)]}], machines=0)
    jsonl.write_text('{"format":"coflow-jsonl","version":1,"machines":0}\n{"id":1,"arrival_ns":0,"flows":[{"src":0,"dst":1,"bytes":5}]}\n')
    with pytest.raises(ValueError, match=r"line 2.*out of range: the header declares 0 machines"):
        coflow.read_trace(jsonl)


def test_progress_is_a_flag_or_a_callable() -> None:
    w = coflow.synthetic(coflows=20)
    seen: List[tuple] = []
    report = coflow.simulate(w, policies="varys,fair", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (2 * 20, 2 * 20), seen
    assert report == coflow.simulate(w, policies="varys,fair", progress=False)
    swept: List[tuple] = []
    coflow.sweep(w, [5, 10], windows=2, policies="varys", progress=lambda done, total: swept.append((done, total)))
    assert swept and swept[-1] == (2 * 2 * 2, 2 * 2 * 2), swept
    # Anything else is refused before the run, as the other on-or-off options are.
    for wrong in (1, None, "yes", np.int64(1)):
        with pytest.raises(ValueError, match=rf"^progress: expected True, False or a callable progress\(done, total\), got {re.escape(repr(wrong))}$"):
            coflow.simulate(w, progress=wrong)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^progress: expected True, False or a callable"):
            coflow.sweep(w, [5], progress=wrong)  # type: ignore[arg-type]
    # An exception the callable raises is the call's.
    def fail(done: int, total: int) -> None:
        raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError, match="from the callback"):
        coflow.simulate(w, progress=fail)
    with pytest.raises(ZeroDivisionError, match="from the callback"):
        coflow.sweep(w, [5], progress=fail)


def test_paths_may_be_bytes_or_path_likes_of_bytes(tmp_path: Path) -> None:
    class BytesPath:
        def __init__(self, path: bytes) -> None:
            self.path = path

        def __fspath__(self) -> bytes:
            return self.path

    w = coflow.synthetic(coflows=20, machines=12)
    topology = Path(__file__).resolve().parents[2] / "docs" / "wan-default.json"
    want = coflow.simulate(w, wan=str(topology), baseline=None, progress=False)
    for wan in (os.fsencode(topology), BytesPath(os.fsencode(topology))):
        assert coflow.simulate(w, wan=wan, baseline=None, progress=False) == want
    pytest.importorskip("matplotlib")
    report = coflow.simulate(coflow.synthetic(coflows=20), policies=["varys"], progress=False)
    for out in (os.fsencode(tmp_path / "a.png"), BytesPath(os.fsencode(tmp_path / "b.svg"))):
        report.plot(out)
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "b.svg").stat().st_size > 0
    with pytest.raises(ValueError, match=r"^path '.*c\.jpg': the file name must end in \.svg or \.png$"):
        report.plot(os.fsencode(tmp_path / "c.jpg"))
    with pytest.raises(TypeError, match=r"^path: expected a file's path, got 5$"):
        report.plot(5)


def test_decimals_and_fractions_are_numbers_wherever_numbers_are_taken() -> None:
    from decimal import Decimal
    from fractions import Fraction

    def arrival_ns(value: object, **fields: object) -> int:
        w = coflow.workload([{"id": 1, "arrival": value, "flows": [(0, 1, 5)], **fields}])
        return json.loads(w.to_jsonl().splitlines()[1])["arrival_ns"]

    assert arrival_ns(Decimal("0.5")) == arrival_ns(0.5) == 500_000_000
    # Exact where the number is: to the nanosecond, ties to even.
    assert arrival_ns(Decimal("18446744073.709551614")) == 2**64 - 2
    assert arrival_ns(Decimal("0.0000000025")) == 2 and arrival_ns(Decimal("0.0000000035")) == 4
    assert arrival_ns(Fraction(1, 3)) == 333_333_333 and arrival_ns(np.int64(2)) == 2 * 10**9
    deadline = coflow.workload([{"id": 1, "arrival": 0, "flows": [(0, 1, 5)], "deadline": Decimal("1.25"), "weight": Decimal(2)}])
    assert json.loads(deadline.to_jsonl().splitlines()[1])["deadline_ns"] == 1_250_000_000
    # NaN is a missing deadline or weight, a Decimal's as a float's.
    for nan in (Decimal("NaN"), Decimal("sNaN"), float("nan")):
        assert arrival_ns(0, deadline=nan, weight=nan) == 0
    for wrong, says in [
        (Decimal("-0.5"), r"must be a non-negative number of seconds, got Decimal\('-0\.5'\)$"),
        (Decimal("Infinity"), r"must be a non-negative number of seconds"),
        (Decimal("sNaN"), r"must be a non-negative number of seconds"),
        (Fraction(-1, 2), r"must be a non-negative number of seconds"),
        (Decimal("18446744073.7095516155"), r"must be below 2\^64 ns"),
        (Decimal("1e999999999"), r"must be below 2\^64 ns"),
        (10**400, r"must be below 2\^64 ns"),
    ]:
        with pytest.raises(ValueError, match=rf"^coflow 1: arrival: {says}"):
            arrival_ns(wrong)
    w = coflow.synthetic(coflows=10)
    want = coflow.simulate(w, policies="varys", progress=False)
    for rate in (Decimal(125_000_000), Decimal("1.25E+8"), Fraction(250_000_000, 2)):
        assert coflow.simulate(w, policies="varys", port_rate=rate, progress=False) == want, rate
    for rate in (Decimal("1.5"), Decimal("NaN"), Decimal("sNaN"), Decimal("Infinity"), Fraction(1, 3)):
        with pytest.raises(ValueError, match=r"^port_rate: a number of bytes per second must be whole"):
            coflow.simulate(w, port_rate=rate, progress=False)
    with pytest.raises(ValueError, match=r'^port_rate "1e\+400": rate must be positive and finite'):
        coflow.simulate(w, port_rate=Decimal("1e400"), progress=False)


def test_reports_and_workloads_are_equal_by_value() -> None:
    import pickle

    w = coflow.synthetic(coflows=20)
    same = coflow.synthetic(coflows=20)
    assert w == same and hash(w) == hash(same) and w == pickle.loads(pickle.dumps(w))
    assert w != coflow.synthetic(coflows=21) and w != coflow.synthetic(coflows=20, seed=2)
    # The source is part of the value: it names the workload in reports.
    renamed = coflow.workload(pd.DataFrame(w.to_dataframe()), machines=w.machines, source="other")
    assert renamed.to_jsonl() == w.to_jsonl() and renamed != w
    assert renamed == coflow.workload(w.to_dataframe(), machines=w.machines, source="other")
    assert w != w.to_jsonl() and len({w, same}) == 1

    report = coflow.simulate(w, policies="varys,fair", threads=1, progress=False)
    again = coflow.simulate(same, policies="varys,fair", threads=1, progress=False)
    # Wall times differ from run to run; everything reported is the same.
    assert report == again and hash(report) == hash(again)
    kept = pickle.loads(pickle.dumps(report))
    assert kept == report and report == kept and len({report, again, kept}) == 1
    assert report != coflow.simulate(w, policies="varys", threads=1, progress=False)
    assert report != coflow.simulate(w, policies="varys,fair", port_rate="2Gbps", threads=1, progress=False)
    assert report != report.to_json()


def test_a_path_with_a_nul_is_a_value_error_naming_its_argument(tmp_path: Path) -> None:
    # As Python's own `open` refuses it, and named, whichever argument holds it.
    for path in ("trace\0.txt", b"trace\0.txt"):
        with pytest.raises(ValueError, match=r"^path: a file's path holds no NUL character"):
            coflow.read_trace(path)
        with pytest.raises(ValueError, match=r"^path: a file's path holds no NUL character"):
            coflow.simulate(path, progress=False)
    w = coflow.synthetic(coflows=4)
    with pytest.raises(ValueError, match=r"^wan: a file's path holds no NUL character"):
        coflow.simulate(w, wan=str(tmp_path / "topology\0.json"), progress=False)
    report = coflow.simulate(w, policies="varys", progress=False)
    with pytest.raises(ValueError, match=r"^path: a file's path holds no NUL character"):
        report.plot(str(tmp_path / "cct\0.png"))


def test_a_dataframe_with_a_column_twice_is_refused_naming_it() -> None:
    # Of two columns of one name, a row would keep one: the other's values would be lost unseen.
    df = pd.DataFrame([[1, 0.0, 0, 1, 5, 7]], columns=["coflow", "arrival", "src", "dst", "bytes", "bytes"])
    with pytest.raises(ValueError, match=r"^workload: the DataFrame has column 'bytes' more than once$"):
        coflow.workload(df)


def test_a_decimal_of_a_huge_exponent_is_refused_at_once() -> None:
    # `int` would write out every digit of 10^999999999, for hours with the GIL held, and `abs`
    # overflows the decimal context past 10^999999: each is refused by its size, naming the
    # argument. The calls run in a child, so that a regression fails the test rather than hangs it.
    code = (
        "import coflow, decimal\n"
        "huge = decimal.Decimal('1e999999999')\n"
        "w = coflow.synthetic(coflows=4)\n"
        "for call in [\n"
        "    lambda: coflow.workload([{'id': 1, 'arrival': 0, 'flows': [(0, 1, huge)]}]),\n"
        "    lambda: coflow.synthetic(seed=decimal.Decimal('-1e999999999')),\n"
        "    lambda: coflow.sweep(w, concurrent=[huge], progress=False),\n"
        "    lambda: coflow.simulate(w, port_rate=huge, progress=False),\n"
        "]:\n"
        "    try:\n"
        "        call()\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "ValueError coflow 1 flow 0: bytes: at most 18446744073709551615, got Decimal('1E+999999999')",
        "ValueError seed: expected a non-negative integer, got Decimal('-1E+999999999')",
        "ValueError concurrent: at most 18446744073709551615, got Decimal('1E+999999999')",
        'ValueError port_rate "1e+999999999": rate must be positive and finite, got "1e+999999999"',
    ]


def test_a_workload_given_machines_or_a_source_is_refused_rather_than_left_as_it_was() -> None:
    # A Workload keeps its own machines and source: options given with one would be lost unseen.
    w = coflow.synthetic(coflows=4)
    assert coflow.workload(w) is w
    with pytest.raises(ValueError, match=r"^machines: a Workload keeps its own \(50 machines, source 'synthetic .*'\); give machines= with Python data"):
        coflow.workload(w, machines=60)
    with pytest.raises(ValueError, match=r"^source: a Workload keeps its own .*; give source= with Python data"):
        coflow.workload(w, source="mine")
    renamed = coflow.workload(w.to_dataframe(), machines=60, source="mine")
    assert (renamed.machines, renamed.source) == (60, "mine")
    assert coflow.workload([{"id": 1, "arrival": 0, "flows": [(0, 1, 5)]}]).source == "python"


def test_a_workload_or_a_report_is_made_by_its_functions() -> None:
    # `coflow.Workload(df)` would otherwise make an object that fails later, far from the mistake.
    df = pd.DataFrame({"coflow": [1], "arrival": [0.0], "src": [0], "dst": [1], "bytes": [5]})
    for wrong in (df, "trace.txt", None):
        with pytest.raises(TypeError, match=r"^Workload: made by coflow\.workload\(data\), coflow\.read_trace\(path\) or coflow\.synthetic\(\.\.\.\)"):
            coflow.Workload(wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^Report: made by coflow\.simulate\(\.\.\.\) or coflow\.sweep\(\.\.\.\), not from dict$"):
        coflow.Report({"json": "{}"})  # type: ignore[arg-type]


def test_changing_a_reports_data_or_summary_leaves_the_report_as_it_is() -> None:
    report = coflow.simulate(coflow.synthetic(coflows=10), policies="varys", progress=False)
    avg, bins, html = report.summary.loc["varys", "avg_cct_s"], report.bins, report._repr_html_()
    data = report.data
    data["results"][0]["avg_cct_s"] = -1.0
    data["results"][0]["bins"][0]["avg_cct_s"] = -1.0
    report.summary.loc["varys", "bins"][0]["coflows"] = -1
    assert report.summary.loc["varys", "avg_cct_s"] == avg
    assert report.bins.equals(bins) and report._repr_html_() == html
    assert report.data == json.loads(report.to_json())


def test_a_synthetic_size_too_large_names_its_keyword() -> None:
    # Refused before anything is generated, naming the keyword to change.
    with pytest.raises(ValueError, match=r"^coflows: at most 1000000 coflows, got 1000000000000$"):
        coflow.synthetic(coflows=10**12)
    with pytest.raises(ValueError, match=r"^machines: the fabric needs at least one machine$"):
        coflow.synthetic(machines=0)
    # Too many flows is the product of both.
    with pytest.raises(ValueError, match=r"^coflows, machines: 1000000 coflows on 50 machines would have about \d+ flows"):
        coflow.synthetic(coflows=10**6)


def test_a_monte_carlo_search_too_large_to_hold_is_refused_naming_its_options() -> None:
    # A search holds every candidate order at once: 12 positions of 12 coflows are 12! orders,
    # gigabytes, whose failed allocation would end the interpreter; refused before the run.
    w = coflow.synthetic(coflows=4, machines=12)

    def run(mc: dict) -> coflow.Report:
        return coflow.simulate(w, wan="default", policies="siphon-mc", mc=mc, progress=False)

    with pytest.raises(ValueError, match=r"^mc_depth 12 with mc_breadth 12: a search would compare more than 100000 candidate orders"):
        run({"depth": 12})
    with pytest.raises(ValueError, match=r"^mc_depth 2 with mc_breadth 1000000: "):
        run({"breadth": 10**6})
    assert list(run({"depth": 3}).summary.index) == ["siphon-mc"]


def test_the_policy_lists_name_every_policy_simulate_runs_once() -> None:
    lists = [coflow.POLICIES, coflow.WIDE_AREA_POLICIES, coflow.JOB_POLICIES]
    names = [p for names in lists for p in names]
    assert len(names) == len(set(names)), "no policy in two lists"
    assert {"varys", "fair"} <= set(coflow.POLICIES) and "mrtf" in coflow.WIDE_AREA_POLICIES
    assert "aalo-job" in coflow.JOB_POLICIES
    w = coflow.synthetic(coflows=6, machines=8)
    ran = coflow.simulate(w, policies=list(coflow.JOB_POLICIES), stages=2, progress=False)
    assert [r["policy"] for r in ran.data["results"]][: len(coflow.JOB_POLICIES)] == list(coflow.JOB_POLICIES)
    wide = coflow.simulate(w, policies=list(coflow.WIDE_AREA_POLICIES), wan="default", progress=False)
    assert {r["policy"] for r in wide.data["results"]} == set(coflow.WIDE_AREA_POLICIES)
