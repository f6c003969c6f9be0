"""Operating the services as a scheduler does: a coordinator and an agent started with no
`--machine`, every flag from `COFLOW_*` variables, logs as JSON, probes green while serving, then
SIGTERM to each: a clean stop logged, exit code 0, the agent deregistered, nothing left listening."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import TOKEN, free_port


def probe(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def until(what: str, check, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


def logs(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_services_from_the_environment_stop_cleanly_on_sigterm(coflow_bin: Path, tmp_path: Path) -> None:
    grpc, http, agent_grpc, agent_data, agent_http = (free_port() for _ in range(5))
    base = {**os.environ, "COFLOW_TOKEN": TOKEN, "RUST_LOG": "info", "COFLOW_LOG_FORMAT": "json"}
    coordinator_env = {**base, "COFLOW_LISTEN": f"127.0.0.1:{grpc}", "COFLOW_METRICS_LISTEN": f"127.0.0.1:{http}"}
    data_dir = tmp_path / "agent"
    agent_env = {
        **base,
        "COFLOW_COORDINATOR": f"http://127.0.0.1:{grpc}",
        "COFLOW_LISTEN": f"127.0.0.1:{agent_grpc}",
        "COFLOW_DATA_LISTEN": f"127.0.0.1:{agent_data}",
        "COFLOW_METRICS_LISTEN": f"127.0.0.1:{agent_http}",
        "COFLOW_DATA_DIR": str(data_dir),
    }
    clog, alog = tmp_path / "coordinator.log", tmp_path / "agent.log"
    with open(clog, "wb") as out:
        coordinator = subprocess.Popen([str(coflow_bin), "coordinator"], env=coordinator_env, stderr=out)
    with open(alog, "wb") as out:
        agent = subprocess.Popen([str(coflow_bin), "agent"], env=agent_env, stderr=out)
    try:
        until("the coordinator ready", lambda: probe(f"http://127.0.0.1:{http}/readyz") == 200)
        assert probe(f"http://127.0.0.1:{http}/healthz") == 200
        # The agent waits for its id (the coordinator's first agent timeout), then registers.
        until("the agent ready", lambda: probe(f"http://127.0.0.1:{agent_http}/readyz") == 200)
        assert probe(f"http://127.0.0.1:{agent_http}/healthz") == 200
        assert (data_dir / "machine-id").read_text() == "0\n"
        assert any(l["fields"].get("message") == "machine id assigned by the coordinator" for l in logs(alog))

        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0, alog.read_text()
        messages = [l["fields"].get("message") for l in logs(alog)]
        assert "stopping" in messages and "deregistered from the coordinator" in messages, messages
        assert messages[-1] == "agent stopped", messages
        assert any(l["fields"].get("signal") == "SIGTERM" for l in logs(alog))
        def left():
            agents = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/api/status").read())["agents"]
            return [(a["alive"], a["departed"]) for a in agents] == [(False, True)]

        until("the agent deregistered, shown as left", left, 2.0)

        coordinator.send_signal(signal.SIGTERM)
        assert coordinator.wait(timeout=15) == 0, clog.read_text()
        messages = [l["fields"].get("message") for l in logs(clog)]
        assert "agent deregistered" in messages and messages[-1] == "coordinator stopped", messages
        for port in (grpc, http, agent_grpc, agent_data, agent_http):
            assert probe(f"http://127.0.0.1:{port}/healthz") == 0, f"port {port} still answers"
    finally:
        for p in (agent, coordinator):
            if p.poll() is None:
                p.kill()
                p.wait()
