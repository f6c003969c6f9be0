"""Fixtures: the `coflow` binary built from this checkout, and clusters of its processes on
127.0.0.1 (a coordinator and agents on free ports, data directories in tmp_path), torn down at
the end of the test or module."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

import coflow

REPO = Path(__file__).resolve().parents[2]
TOKEN = "python-tests-token"


@pytest.fixture(scope="session")
def coflow_bin() -> Path:
    """`target/release/coflow` (scripts/test-all builds it before running pytest)."""
    path = REPO / "target" / "release" / "coflow"
    if not path.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "coflow-cli"], cwd=REPO, check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """A process exited because another took one of its ports between `free_port` and its bind."""


def wait_for_port(port: int, proc: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log.read_text()
            kind = PortTaken if "Address already in use" in text else RuntimeError
            raise kind(f"{what} exited with {proc.returncode}: {text}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within 20 s: {log.read_text()}")


def start_on_free_ports(ports: int, start: Callable[[List[int]], None], attempts: int = 5) -> List[int]:
    """Picks `ports` free ports and calls `start` with them (it starts a process and waits until it
    listens); picks again, at most `attempts` times,
    when another process took one of them first. Gives the ports it started on."""
    for attempt in range(1, attempts + 1):
        picked = [free_port() for _ in range(ports)]
        try:
            start(picked)
            return picked
        except PortTaken:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


class Cluster:
    """A coordinator and agents, each a `coflow` process."""

    def __init__(
        self,
        binary: Path,
        root: Path,
        agents: int,
        port_rate: str = "1Gbps",
        tls: bool = False,
        coordinator_args: Optional[List[str]] = None,
    ) -> None:
        self.binary = binary
        self.root = root
        self.procs: List[subprocess.Popen] = []
        self.agent_procs: List[subprocess.Popen] = []
        # COFLOW_TEST_LOG (a RUST_LOG filter) keeps more of the processes' logs, which stay in
        # the cluster's directory under pytest's base temp.
        self.env = {**os.environ, "COFLOW_TOKEN": TOKEN, "RUST_LOG": os.environ.get("COFLOW_TEST_LOG", "warn")}
        self.certs = root / "certs"
        self.tls = tls
        if tls:
            # One cluster CA, and a certificate per member made by `coflow certs`, as the README's recipe does.
            self._certs("init", str(self.certs))
            self._certs("issue", str(self.certs), "--coordinator", "127.0.0.1")
            for m in range(agents):
                self._certs("issue", str(self.certs), "--agent", str(m), "--host", "127.0.0.1")
            self._certs("issue", str(self.certs), "--client", "pytest")
        scheme = "https" if tls else "http"
        self.agents: List[str] = []

        def coordinator(ports: List[int]) -> None:
            port, http = ports
            log = root / "coordinator.log"
            args = ["coordinator", "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{http}", "--policy", "varys"]
            proc = self._spawn([*args, *(coordinator_args or []), *self._tls_flags("coordinator")], log)
            wait_for_port(port, proc, "the coordinator", log)

        port, http = start_on_free_ports(2, coordinator)
        self.coordinator = f"{scheme}://127.0.0.1:{port}"
        # The coordinator's HTTP listener: /metrics, the probes and the web page.
        self.http = f"http://127.0.0.1:{http}"
        for m in range(agents):
            data_dir = root / f"agent{m}"
            data_dir.mkdir(parents=True, exist_ok=True)

            def agent(ports: List[int], m: int = m, data_dir: Path = data_dir) -> None:
                grpc, data = ports
                log = root / f"agent{m}.log"
                args = [
                    "agent",
                    "--machine", str(m),
                    "--coordinator", self.coordinator,
                    "--listen", f"127.0.0.1:{grpc}",
                    "--data-listen", f"127.0.0.1:{data}",
                    "--data-dir", str(data_dir),
                    "--port-rate", port_rate,
                    *self._tls_flags(f"agent-{m}"),
                ]  # fmt: skip
                proc = self._spawn(args, log)
                wait_for_port(grpc, proc, f"agent {m}", log)
                self.agent_procs.append(proc)

            grpc, _ = start_on_free_ports(2, agent)
            self.agents.append(f"{scheme}://127.0.0.1:{grpc}")
        # Every agent has registered with the coordinator before the test starts.
        deadline = time.monotonic() + 20
        with self.client(0) as c:
            while sum(a["alive"] for a in c.status()["agents"]) < agents:
                if time.monotonic() > deadline:
                    raise RuntimeError("agents did not register within 20 s")
                time.sleep(0.05)

    def _certs(self, *args: str) -> None:
        subprocess.run([str(self.binary), "certs", *args], check=True, capture_output=True)

    def _tls_flags(self, member: str) -> List[str]:
        if not self.tls:
            return []
        c = self.certs
        return ["--tls-ca", str(c / "ca.crt"), "--tls-cert", str(c / f"{member}.crt"), "--tls-key", str(c / f"{member}.key")]

    def tls_files(self, member: str) -> tuple:
        """(ca, cert, key) of a member of this cluster, e.g. `client-pytest` or `agent-0`."""
        c = self.certs
        return (c / "ca.crt", c / f"{member}.crt", c / f"{member}.key")

    def _spawn(self, args: List[str], log: Path) -> subprocess.Popen:
        out = open(log, "wb")
        proc = subprocess.Popen([str(self.binary), *args], env=self.env, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.procs.append(proc)
        return proc

    def client(self, machine: int, token: Optional[str] = TOKEN, **kwargs: object) -> coflow.Client:
        if self.tls:
            kwargs.setdefault("tls", self.tls_files("client-pytest"))
        if "tls" in kwargs:
            token = None
        return coflow.Client(self.coordinator, self.agents[machine], token=token, **kwargs)  # type: ignore[arg-type]

    def kill_coordinator(self) -> None:
        p = self.procs[0]
        p.kill()
        p.wait(timeout=10)

    def kill_agent(self, machine: int) -> None:
        p = self.agent_procs[machine]
        p.kill()
        p.wait(timeout=10)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(coflow_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two agents behind one coordinator, shared by a module's tests."""
    c = Cluster(coflow_bin, tmp_path_factory.mktemp("cluster"), agents=2)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def slow_cluster(coflow_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two agents whose ports move 5 MB/s, so that a get of a few megabytes lasts long enough
    to be interrupted, closed or given up while its flow runs."""
    c = Cluster(coflow_bin, tmp_path_factory.mktemp("slow-cluster"), agents=2, port_rate="5MB/s")
    yield c
    c.stop()


@pytest.fixture
def own_cluster(coflow_bin: Path, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of two agents for one test (which may kill an agent)."""
    c = Cluster(coflow_bin, tmp_path, agents=2)
    yield c
    c.stop()


@pytest.fixture
def tls_cluster(coflow_bin: Path, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of two agents over mutual TLS, with certificates from `coflow certs`."""
    c = Cluster(coflow_bin, tmp_path, agents=2, tls=True)
    yield c
    c.stop()
