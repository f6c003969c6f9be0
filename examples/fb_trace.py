"""Reproduces the README's Facebook table and plot from Python.

    python examples/fb_trace.py [TRACE] [--plot FILE.png]

TRACE defaults to ../shared/traces/FB2010-1Hr-150-0.txt beside the repository; without it the
example says so and exits 0.
"""

import argparse
import sys
from pathlib import Path

import coflow

DEFAULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "FB2010-1Hr-150-0.txt"

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("trace", nargs="?", default=str(DEFAULT))
parser.add_argument("--plot", default="fb2010-128MiBps.png")
args = parser.parse_args()
if not Path(args.trace).exists():
    print(f"skipping: no Facebook trace at {args.trace}")
    sys.exit(0)

report = coflow.simulate(coflow.read_trace(args.trace), policies="all", deadlines=True, port_rate="128MiB/s")
print(report.describe)
table = report.summary[["avg_cct_s", "p95_cct_s", "factor_vs_baseline", "deadline_met_fraction", "admitted_fraction"]]
print(table.round(3).to_string())
bounds = report.lower_bounds
print(f"lower bounds: isolation {bounds['isolation_avg_cct_s']:.2f} s, per-port {bounds['per_port_avg_cct_s']:.2f} s, "
      f"LP {bounds['lp_avg_cct_s']:.2f} s")
try:
    report.plot(args.plot)
    print(f"plot: {args.plot}")
except ImportError as e:
    print(f"no plot: {e}")
