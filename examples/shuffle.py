"""A shuffle through a coflow cluster from Python: M mappers put one piece per reducer at their
agents, R reducers get theirs through theirs, and every byte is checked.

    python examples/shuffle.py                       # starts a cluster of `coflow` processes
    python examples/shuffle.py --coordinator URL --agent URL --agent URL ...   # an existing one

The token comes from COFLOW_TOKEN (a started cluster gets a fresh one).
"""

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import coflow

REPO = Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(agents, workdir):
    """A coordinator and `agents` agents of the built `coflow` binary on 127.0.0.1."""
    binary = shutil.which("coflow") or str(REPO / "target" / "release" / "coflow")
    env = {**os.environ, "RUST_LOG": "warn"}
    port = free_port()
    coordinator = f"http://127.0.0.1:{port}"
    procs = [subprocess.Popen([binary, "coordinator", "--listen", f"127.0.0.1:{port}", "--policy", "varys"], env=env)]
    urls = []
    for m in range(agents):
        grpc, data = free_port(), free_port()
        (workdir / f"agent{m}").mkdir()
        procs.append(subprocess.Popen([
            binary, "agent", "--machine", str(m), "--coordinator", coordinator,
            "--listen", f"127.0.0.1:{grpc}", "--data-listen", f"127.0.0.1:{data}",
            "--data-dir", str(workdir / f"agent{m}"), "--port-rate", "1Gbps",
        ], env=env))  # fmt: skip
        urls.append(f"http://127.0.0.1:{grpc}")
    deadline = time.monotonic() + 20
    while True:
        try:
            with coflow.Client(coordinator, urls[0]) as c:
                if sum(a["alive"] for a in c.status()["agents"]) == agents:
                    break
        except (coflow.AgentUnreachable, coflow.CoordinatorUnreachable):
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the cluster did not start within 20 s")
        time.sleep(0.1)
    return coordinator, urls, procs


def shuffle(coordinator, agents, mappers, reducers, piece_bytes):
    clients = [coflow.Client(coordinator, a) for a in agents]
    driver = clients[0]
    c = driver.register(mappers * reducers, name="python-shuffle", kind="shuffle")
    pieces = {(m, r): os.urandom(piece_bytes) for m in range(mappers) for r in range(reducers)}
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=mappers + reducers) as pool:
        # Mapper m runs on machine m % agents, reducer r on machine r % agents.
        list(pool.map(lambda kv: clients[kv[0][0] % len(clients)].put(c, f"map{kv[0][0]}-reduce{kv[0][1]}", kv[1]),
                      pieces.items()))
        driver.seal(c)
        got = dict(pool.map(lambda mr: (mr, clients[mr[1] % len(clients)].get(c, f"map{mr[0]}-reduce{mr[1]}")),
                            pieces))
    elapsed = time.monotonic() - started
    assert got == pieces, "a piece came back different"
    total = mappers * reducers * piece_bytes
    print(f"coflow {c}: {mappers} mappers x {reducers} reducers on {len(agents)} agents, "
          f"{total / 2**20:.0f} MiB moved exactly in {elapsed:.2f} s")
    try:
        driver.get(c, "map0-reduce999")
    except coflow.NoSuchData as e:
        print(f"a missing piece raises {type(e).__name__}: {e}")
    driver.unregister(c)
    for client in clients:
        client.close()


def main():
    p = argparse.ArgumentParser(description="A shuffle through a coflow cluster.")
    p.add_argument("--coordinator")
    p.add_argument("--agent", action="append", default=[])
    p.add_argument("--mappers", type=int, default=4)
    p.add_argument("--reducers", type=int, default=4)
    p.add_argument("--piece-bytes", type=int, default=4 << 20)
    a = p.parse_args()
    if a.coordinator:
        shuffle(a.coordinator, a.agent, a.mappers, a.reducers, a.piece_bytes)
        return
    os.environ.setdefault("COFLOW_TOKEN", secrets.token_urlsafe(18))
    with tempfile.TemporaryDirectory() as tmp:
        coordinator, agents, procs = start_cluster(3, Path(tmp))
        try:
            shuffle(coordinator, agents, a.mappers, a.reducers, a.piece_bytes)
        finally:
            for proc in reversed(procs):
                proc.send_signal(signal.SIGINT)
            for proc in procs:
                proc.wait(timeout=10)


if __name__ == "__main__":
    main()
