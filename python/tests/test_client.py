"""The SDK against a coordinator and agents started from the built binary."""

from __future__ import annotations

import _thread
import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import List

import pytest

import coflow
from coflow.errors import from_kind

from conftest import TOKEN, Cluster


def test_a_shuffle_moves_exact_bytes(cluster: Cluster) -> None:
    rng = random.Random(13)
    mappers, reducers = 2, 2
    pieces = {(m, r): bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200_000))) for m in range(2) for r in range(2)}
    with cluster.client(0) as m0, cluster.client(1) as m1:
        clients = [m0, m1]
        stage = m0.register(1, name="py-stage", lease_s=60, deadline_s=30)
        shuffle = m0.register(mappers * reducers, name="py-shuffle", kind="shuffle", parents=[stage])
        for (m, r), data in pieces.items():
            assert clients[m].put(shuffle, f"map{m}-reduce{r}", data) == len(data)
        m0.seal(shuffle)
        live = {c["coflow"]: c for c in m0.status()["coflows"]}
        assert live[shuffle]["name"] == "py-shuffle" and live[shuffle]["puts"] == 4, live
        assert live[shuffle]["job"] == stage and live[stage]["job"] == stage, "the shuffle joined its parent's job"
        assert live[shuffle]["lease_left_s"] is None and 0 < live[stage]["lease_left_s"] <= 60, live
        # A deadline shows as registered; varys has no admission control to say what it made of it.
        assert (live[stage]["deadline_s"], live[stage]["admission"]) == (30.0, None), live
        assert live[shuffle]["deadline_s"] is None, live
        assert [a["datacenter"] for a in m0.status()["agents"]] == [None, None], "a big switch has no datacenters"
        for (m, r), data in pieces.items():
            # Reducer r runs on machine r: half the pieces cross machines, half are local.
            assert clients[r].get(shuffle, f"map{m}-reduce{r}") == data
        m0.unregister(shuffle)
        m0.unregister(stage)


def test_a_streaming_get_yields_the_bytes_in_chunks(cluster: Cluster) -> None:
    data = random.Random(5).randbytes(3 << 20)
    with cluster.client(0) as a, cluster.client(1) as b:
        c = a.register(1)
        a.put(c, "big", data)
        chunks: List[bytes] = list(b.get_stream(c, "big"))
        assert len(chunks) > 1
        assert b"".join(chunks) == data
        a.unregister(c)


def test_put_file_reads_from_the_agents_data_directory(cluster: Cluster) -> None:
    (cluster.root / "agent0" / "part.bin").write_bytes(b"0123456789")
    with cluster.client(0) as a, cluster.client(1) as b:
        c = a.register(1)
        assert a.put_file(c, "seg", "part.bin", length=4, offset=3) == 4
        assert b.get(c, "seg") == b"3456"
        a.unregister(c)


class _BytesPath(os.PathLike):
    """A path-like object whose path is bytes."""

    def __init__(self, path: bytes) -> None:
        self.path = path

    def __fspath__(self) -> bytes:
        return self.path


def test_put_file_takes_a_path_as_bytes_or_a_path_like_of_bytes(cluster: Cluster) -> None:
    (cluster.root / "agent0" / "part.bin").write_bytes(b"0123456789")
    with cluster.client(0) as a, cluster.client(1) as b:
        c = a.register(2)
        assert a.put_file(c, "bytes", b"part.bin", length=2, offset=1) == 2
        assert a.put_file(c, "path-like", _BytesPath(b"part.bin"), length=3, offset=5) == 3
        assert (b.get(c, "bytes"), b.get(c, "path-like")) == (b"12", b"567")
        # A path the protocol cannot carry is named before any call.
        with pytest.raises(ValueError, match=r"^path: not valid text"):
            a.put_file(c, "undecodable", b"part\xff.bin", length=1)
        a.unregister(c)


def test_each_error_is_its_typed_exception(cluster: Cluster) -> None:
    with cluster.client(0) as a, cluster.client(1) as b:
        c = a.register(2)
        a.put(c, "x", b"one")
        with pytest.raises(coflow.DuplicateDataId):
            a.put(c, "x", b"two")
        with pytest.raises(coflow.NoSuchData) as e:
            b.get(c, "missing")
        assert e.value.kind == "no-such-data"
        with pytest.raises(coflow.Invalid):
            a.put(c, "", b"no name")
        a.seal(c)
        with pytest.raises(coflow.Sealed):
            a.put(c, "y", b"late")
        a.unregister(c)
        with pytest.raises(coflow.UnknownCoflow):
            a.seal(c)
        with pytest.raises(coflow.UnknownCoflow):
            a.put(987654321, "z", b"nobody")
    # Every typed error is a CoflowError.
    assert issubclass(coflow.Sealed, coflow.CoflowError)


def test_a_coflow_whose_lease_is_not_renewed_is_unregistered(cluster: Cluster) -> None:
    with cluster.client(0) as a, cluster.client(1) as b:
        kept = a.register(1, lease_s=1)
        lapsed = a.register(1, lease_s=1)
        a.put(lapsed, "p", b"dropped with its coflow")
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            assert a.renew([kept]) == []
            time.sleep(0.3)
        assert a.renew([kept, lapsed]) == [lapsed]
        with pytest.raises(coflow.UnknownCoflow):
            b.get(lapsed, "p")
        a.unregister(kept)


def test_numbers_of_every_kind_are_taken_as_numbers(cluster: Cluster) -> None:
    import numpy as np

    with cluster.client(0) as a:
        c = a.register(
            1, weight=Decimal("2.5"), deadline_s=Fraction(600), all_gets_timeout_s=np.float64(1), lease_s=np.int64(60)
        )
        assert a.renew([c]) == []
        a.unregister(c)


def test_every_error_kind_of_the_protocol_has_its_class() -> None:
    from coflow import _coflow, errors

    assert sorted(errors._BY_KIND) == sorted(_coflow.ERROR_KINDS)
    for kind in _coflow.ERROR_KINDS:
        e = from_kind(kind, "m")
        assert type(e) is not coflow.CoflowError and e.kind == kind
    assert type(from_kind("something-new", "m")) is coflow.CoflowError


def test_bad_arguments_are_errors_naming_the_field_before_any_call() -> None:
    # No cluster: every one of these is refused before the client connects.
    c = coflow.Client("http://127.0.0.1:9", "http://127.0.0.1:9", token="x" * 32, timeout_s=1)
    for call, says in [
        (lambda: c.register(-1), r"^num_flows: expected an integer from 0 to 10000000, got -1$"),
        (lambda: c.register(True), r"^num_flows: expected a non-negative integer, got True$"),
        (lambda: c.register(2, parents=[-1]), r"^parents: expected an integer from 0 to"),
        (lambda: c.register(1, lease_s=0), r"^lease_s: expected from 1 to 86400 seconds, or None"),
        (lambda: c.register(1, lease_s=0.999), r"^lease_s: expected from 1 to 86400 seconds"),
        (lambda: c.register(1, lease_s=float("nan")), r"^lease_s: expected"),
        (lambda: c.renew("12"), r"^coflows: expected a list of coflow ids"),
        (lambda: c.renew([-1]), r"^coflows: expected an integer from 0 to"),
        (lambda: c.register(2, parents=5), r"^parents: expected a list of coflow ids, got 5$"),
        (lambda: c.register(2, weight=float("nan")), r"^weight: expected a positive finite number, got nan$"),
        (lambda: c.register(2, weight=0), r"^weight: expected a positive finite number, got 0$"),
        (lambda: c.register(2, weight=10**400), r"^weight: expected a positive finite number, got 1000"),
        (lambda: c.register(2, deadline_s=True), r"^deadline_s: expected a non-negative number of seconds"),
        (lambda: c.register(2, deadline_s="5"), r"^deadline_s: expected a non-negative number of seconds"),
        (lambda: c.register(2, all_gets_timeout_s=-1), r"^all_gets_timeout_s: expected a non-negative number"),
        (lambda: c.register(2, lease_s=Decimal("0.5")), r"^lease_s: expected from 1 to 86400 seconds"),
        (lambda: c.put(-1, "p", b"x"), r"^coflow: expected an integer from 0 to"),
        (lambda: c.put_file(1, "p", "f", length=-1), r"^length: expected an integer from 0 to"),
        (lambda: c.get(1.5, "p"), r"^coflow: expected a non-negative integer, got 1.5$"),
        (lambda: c.get_stream(1.5, "p"), r"^coflow: expected a non-negative integer, got 1.5$"),
        (lambda: c.get(1, "p\ud800"), r"^data_id: not valid text \(a lone surrogate at 1\)"),
        (lambda: c.register(1, name=b"n"), r"^name: expected a string, got b'n'$"),
        (lambda: c.put_file(1, "p", None, 10), r"^path: expected a path relative to the agent's data directory"),
        (lambda: coflow.Client(token="x" * 32, timeout_s=1e20), r"^timeout_s: expected a positive number"),
        (lambda: coflow.Client(token="x" * 32, timeout_s=True), r"^timeout_s: expected a positive number"),
        (lambda: coflow.Client(token="x" * 32, timeout_s=0), r"^timeout_s: expected a positive number"),
        (lambda: coflow.Client(tls="abc"), r"^tls: expected \(ca, cert, key\), three paths, got 'abc'$"),
        (lambda: coflow.Client(tls=("a", "b")), r"^tls: expected \(ca, cert, key\)"),
        (lambda: coflow.Client(token="x" * 32, tls=("a", "b", "c")), r"^token: give the cluster token or tls"),
    ]:
        with pytest.raises(ValueError, match=says):
            call()
    # An int would be that many zero bytes to bytes(); a str has no one encoding.
    for data, kind in [(5, "int"), ("abc", "str"), (None, "NoneType")]:
        with pytest.raises(TypeError, match=rf"^data: expected bytes-like data, got {kind}$"):
            c.put(1, "p", data)  # type: ignore[arg-type]


def test_a_value_past_a_bound_of_the_protocol_is_a_value_error_naming_its_keyword() -> None:
    # No cluster: the coordinator would refuse each naming its wire field (`options.deadline_ms`
    # in milliseconds, or the request's size), so the SDK refuses it first, by keyword.
    c = coflow.Client("http://127.0.0.1:9", "http://127.0.0.1:9", token="x" * 32, timeout_s=1)
    for call, says in [
        (lambda: c.register(10_000_001), r"^num_flows: expected an integer from 0 to 10000000, got 10000001$"),
        (lambda: c.register(1, name="x" * 257), r"^name: at most 256 bytes of UTF-8, got 257$"),
        (lambda: c.register(1, name="é" * 129), r"^name: at most 256 bytes of UTF-8, got 258$"),
        (lambda: c.register(1, name="x" * (5 << 20)), r"^name: at most 256 bytes of UTF-8, got 5242880$"),
        (lambda: c.register(1, kind="k" * 65), r"^kind: at most 64 bytes of UTF-8, got 65$"),
        (lambda: c.register(1, parents=range(1, 1026)), r"^parents: at most 1024 coflows, got 1025$"),
        (lambda: c.register(1, deadline_s=1e10), r"^deadline_s: expected a non-negative number of seconds up to a year \(3\.1536e\+07\), or None, got 10000000000\.0$"),
        (lambda: c.register(1, deadline_s=365 * 86400 + 0.001), r"^deadline_s: expected .* up to a year"),
        (lambda: c.register(1, all_gets_timeout_s=86400.5), r"^all_gets_timeout_s: expected a non-negative number of seconds up to a day \(86400\), or None, got 86400\.5$"),
        (lambda: c.register(1, all_gets_timeout_s=1e300), r"^all_gets_timeout_s: expected .* up to a day"),
        (lambda: c.put_file(1, "p", "f", length=(64 << 30) + 1), r"^length: expected an integer from 0 to 68719476736, got 68719476737$"),
        (lambda: c.put_file(1, "p", "f", length=2, offset=2**64 - 2), r"^offset: 18446744073709551614 \+ length 2 is past the last byte"),
    ]:
        with pytest.raises(ValueError, match=says):
            call()


def test_values_at_the_protocols_bounds_are_taken(cluster: Cluster) -> None:
    with cluster.client(0) as c:
        parents = [c.register(1) for _ in range(2)] * 512
        coflows = [
            c.register(10_000_000),
            c.register(1, name="é" * 128, kind="k" * 64, parents=parents, deadline_s=365 * 86400),
            c.register(1, all_gets_timeout_s=86400),
        ]
        for id in {*parents, *coflows}:
            c.unregister(id)


def test_text_the_client_cannot_send_is_a_value_error_naming_its_argument() -> None:
    # A lone surrogate (a non-UTF-8 byte of the environment, decoded) is no URL or token; the
    # token's message does not repeat the secret.
    token = "x" * 32
    for kwargs, says in [
        (dict(coordinator="http://127.0.0.1:7070\udcff", token=token), r"^coordinator: not valid text \(a lone surrogate at 21\)"),
        (dict(agent="http://\ud800", token=token), r"^agent: not valid text \(a lone surrogate at 7\)"),
        (dict(token="secret\udcff"), r"^token: not valid text \(a lone surrogate at 6\)$"),
    ]:
        with pytest.raises(ValueError, match=says):
            coflow.Client(**kwargs)


def test_tls_paths_may_be_bytes_or_path_likes_of_bytes(tmp_path: Path) -> None:
    # Each names the file itself, not the repr of its bytes.
    ca = os.path.join(os.fsencode(tmp_path), b"ca.pem")
    for path in (ca, _BytesPath(ca)):
        with pytest.raises(FileNotFoundError, match=rf"^tls ca: cannot read {re.escape(str(tmp_path))}/ca\.pem: "):
            coflow.Client(tls=(path, path, path))
    with pytest.raises(ValueError, match=r"^tls cert: a file's path holds no NUL character"):
        coflow.Client(tls=(ca, b"cert\0.pem", ca))


def test_a_url_the_client_cannot_take_is_a_value_error_naming_its_argument() -> None:
    # Refused when the client is made, with no call: an argument, not a service's refusal.
    token = "x" * 32
    for kwargs, says in [
        (dict(coordinator="not a url"), r'^coordinator: url "http://not a url": invalid URI$'),
        (dict(agent="::::"), r'^agent: url "http://::::": invalid URI$'),
        (dict(coordinator="ftp://x"), r'^coordinator: url "ftp://x" must start with http:// \(TLS is off'),
        (dict(agent="https://127.0.0.1:7071"), r'^agent: url "https://127.0.0.1:7071" must start with http://'),
        # Both wrong: the coordinator, checked first, is named.
        (dict(coordinator="not a url", agent="::::"), r"^coordinator: "),
    ]:
        with pytest.raises(ValueError, match=says):
            coflow.Client(token=token, **kwargs)  # type: ignore[arg-type]

        async def make() -> None:
            coflow.aio.Client(token=token, **kwargs)  # type: ignore[arg-type]

        with pytest.raises(ValueError, match=says):
            asyncio.run(make())


def test_a_client_made_before_a_fork_refuses_calls_in_the_child(cluster: Cluster) -> None:
    # The child has none of the parent's runtime threads: a call there would wait for ever.
    with cluster.client(0) as a:
        a.register(1)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                a.register(1)
                said = b"the call returned"
            except RuntimeError as e:
                said = str(e).encode()
            except BaseException as e:  # noqa: B036 - whatever it is, the parent reports it
                said = repr(e).encode()
            os.write(w, said)
            os._exit(0)
        os.close(w)
        deadline = time.monotonic() + 20
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the call in the forked child did not return within 20 s")
            time.sleep(0.02)
        said = os.read(r, 4096).decode()
        os.close(r)
        assert "before a fork: make a new Client in this process" in said, said
        # The parent's client goes on.
        a.register(1)


def test_bytes_like_data_of_every_kind_is_put_whole(cluster: Cluster) -> None:
    with cluster.client(0) as a, cluster.client(1) as b:
        cid = a.register(3)
        payload = bytes(range(256)) * 4
        assert a.put(cid, "bytes", payload) == len(payload)
        assert a.put(cid, "bytearray", bytearray(payload)) == len(payload)
        assert a.put(cid, "view", memoryview(payload)[16:]) == len(payload) - 16
        assert b.get(cid, "bytearray") == payload
        assert b.get(cid, "view") == payload[16:]
        a.unregister(cid)


def test_a_closed_client_refuses_calls(cluster: Cluster) -> None:
    c = cluster.client(0)
    c.close()
    with pytest.raises(ValueError, match="the client is closed"):
        c.register(1)


def test_ctrl_c_interrupts_a_waiting_get(cluster: Cluster) -> None:
    with cluster.client(0) as a, cluster.client(1) as b:
        # All-gets readiness: a get waits until both gets arrived (or 30 s), and only one comes.
        c = a.register(2, all_gets_timeout_s=30)
        a.put(c, "p0", b"waits")
        a.put(c, "p1", b"never fetched")
        # A process started in the background by a shell inherits SIGINT ignored, and then
        # interrupt_main does nothing: Ctrl-C is Python's default handler here, as in a terminal.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            timer = threading.Timer(0.5, _thread.interrupt_main)
            started = time.monotonic()
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                b.get(c, "p0")
            assert time.monotonic() - started < 10
        finally:
            signal.signal(signal.SIGINT, previous)
        a.unregister(c)


def test_the_interpreter_exits_cleanly_with_gets_in_flight_on_daemon_threads(cluster: Cluster) -> None:
    # Gets that wait (all-gets readiness, four of a hundred come) on daemon threads when the
    # main thread returns: at exit they are cancelled and return, so no thread is inside the
    # extension when the interpreter finalizes (which would abort the process); calls of exit
    # hooks that run later are served.
    with cluster.client(0) as a:
        c = a.register(100, all_gets_timeout_s=30)
        a.put(c, "p0", b"waits")
    script = f"""
import atexit, sys, threading, time
def cleanup():
    # An exit hook registered before the package's runs after it: its calls are served.
    c.status()
    sys.stdout.write("cleaned up\\n")
atexit.register(cleanup)
import coflow
c = coflow.Client({cluster.coordinator!r}, {cluster.agents[1]!r}, token={TOKEN!r})
def get():
    try:
        c.get({c}, "p0")
    except RuntimeError:
        pass  # cancelled at exit
class SlowToGo:
    # Finalization takes a while (a module global torn down), so that the waiting threads
    # would wake inside it.
    def __del__(self):
        time.sleep(0.5)
keep = SlowToGo()
for _ in range(4):
    threading.Thread(target=get, daemon=True).start()
time.sleep(0.5)
sys.stdout.write("main returns\\n")
"""
    for _ in range(3):
        started = time.monotonic()
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "FATAL" not in r.stderr, (r.returncode, r.stderr)
        assert r.stdout == "main returns\ncleaned up\n", r.stderr
        assert time.monotonic() - started < 10
    with cluster.client(0) as a:
        a.unregister(c)


def test_a_wrong_token_is_refused(cluster: Cluster) -> None:
    with cluster.client(0, token="not-the-token") as c:
        with pytest.raises(coflow.Unauthenticated):
            c.register(1)


def test_a_dead_agent_is_unreachable(own_cluster: Cluster) -> None:
    with own_cluster.client(0) as a, own_cluster.client(1) as b:
        c = a.register(1)
        own_cluster.kill_agent(1)
        with pytest.raises(coflow.AgentUnreachable):
            b.put(c, "p", b"bytes")


def test_a_dead_coordinator_is_named(own_cluster: Cluster) -> None:
    with own_cluster.client(0) as a:
        c = a.register(1)
        own_cluster.kill_coordinator()
        # Its own call, and no agent's fault: a framework retries, and blames no source.
        with pytest.raises(coflow.CoordinatorUnreachable):
            a.register(1)
        with pytest.raises(coflow.CoordinatorUnreachable):
            a.unregister(c)


def test_a_cancelled_asyncio_call_stops_its_blocking_call(cluster: Cluster) -> None:
    # One call at a time: a get left running after its task gave up would hold the thread, and
    # the next call would wait behind it for the 30 s of the get's readiness.
    async def main() -> None:
        async with coflow.aio.Client(cluster.coordinator, cluster.agents[0], token=TOKEN) as a:
            async with coflow.aio.Client(cluster.coordinator, cluster.agents[1], token=TOKEN, max_calls=1) as b:
                # All-gets readiness: a get waits until both gets arrived (or 30 s), and only one comes.
                c = await a.register(2, all_gets_timeout_s=30)
                await a.put(c, "p0", b"waits")
                await a.put(c, "p1", b"never fetched")
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(b.get(c, "p0"), 0.5)
                started = time.monotonic()
                await asyncio.wait_for(b.status(), 10)
                assert time.monotonic() - started < 5, "the cancelled get gave its thread back"
                await a.unregister(c)

    asyncio.run(main())


def test_at_exit_asyncio_calls_whose_loop_no_longer_runs_are_cancelled_and_others_kept(cluster: Cluster) -> None:
    # Two gets that wait (all-gets readiness, one of two gets comes): one abandoned on a loop
    # closed with its task pending, which the exit does not wait for (60 s); one on a loop that
    # still runs in a thread Python waits for, which is served when its readiness times out (3 s).
    with cluster.client(0) as a:
        abandoned, kept = a.register(2, all_gets_timeout_s=60), a.register(2, all_gets_timeout_s=3)
        a.put(abandoned, "p", b"never")
        a.put(kept, "p", b"kept!")
    script = f"""
import asyncio, sys, threading, time
import coflow
b = coflow.aio.Client({cluster.coordinator!r}, {cluster.agents[1]!r}, token={TOKEN!r})
def served():
    got = asyncio.run(b.get({kept}, "p"))
    sys.stdout.write(f"kept: {{got!r}}\\n")
threading.Thread(target=served).start()
loop = asyncio.new_event_loop()
task = loop.create_task(b.get({abandoned}, "p"))
loop.run_until_complete(asyncio.sleep(0.5))
loop.close()
sys.stdout.write("main returns\\n")
"""
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=40)
    assert r.returncode == 0 and "FATAL" not in r.stderr, (r.returncode, r.stderr)
    assert r.stdout == "main returns\nkept: b'kept!'\n", r.stderr
    assert time.monotonic() - started < 20
    with cluster.client(0) as a:
        for c in (abandoned, kept):
            a.unregister(c)


def test_asyncio_gets_of_a_coflow_waiting_for_all_of_them_run_together(cluster: Cluster) -> None:
    # The client runs its calls on threads of its own: twenty gets of a coflow that waits for all
    # its gets start together, however small the event loop's default executor, and a status
    # call does not wait behind them.
    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        async with coflow.aio.Client(cluster.coordinator, cluster.agents[0], token=TOKEN) as a:
            async with coflow.aio.Client(cluster.coordinator, cluster.agents[1], token=TOKEN) as b:
                c = await a.register(20, all_gets_timeout_s=60)
                pieces = [bytes([k]) * 10_000 for k in range(20)]
                for k, piece in enumerate(pieces):
                    await a.put(c, f"p{k}", piece)
                await a.seal(c)
                started = time.monotonic()
                gets = asyncio.gather(*(b.get(c, f"p{k}") for k in range(20)))
                await asyncio.wait_for(b.status(), 10)
                got = await asyncio.wait_for(gets, 30)
                assert got == pieces
                assert time.monotonic() - started < 20, "the gets ran together, not at the readiness timeout"
                await a.unregister(c)
        with pytest.raises(ValueError, match="max_calls"):
            coflow.aio.Client(cluster.coordinator, cluster.agents[0], token=TOKEN, max_calls=0)

    asyncio.run(main())


def test_a_closed_asyncio_client_fails_its_calls_and_streams_at_once(cluster: Cluster) -> None:
    async def main() -> None:
        async with coflow.aio.Client(cluster.coordinator, cluster.agents[0], token=TOKEN) as a:
            b = coflow.aio.Client(cluster.coordinator, cluster.agents[1], token=TOKEN)
            c = await a.register(1)
            await a.put(c, "p", random.Random(3).randbytes(4 << 20))
            stream = b.get_stream(c, "p")
            assert await stream.__anext__()
            await b.close()
            # The stream's next chunk is not waited for on the event loop's thread: it fails.
            with pytest.raises(ValueError, match="the client is closed"):
                await asyncio.wait_for(stream.__anext__(), 1)
            with pytest.raises(ValueError, match="the client is closed"):
                await b.status()
            await a.unregister(c)

    asyncio.run(main())


def _flows(client: coflow.Client, coflow_id: int) -> int:
    """How many flows of ``coflow_id`` the coordinator has live."""
    return sum(len(c["flows"]) for c in client.status()["coflows"] if c["coflow"] == coflow_id)


def _assert_flows_end(client: coflow.Client, coflow_id: int, what: str, within_s: float = 1.5) -> None:
    """The flows of ``coflow_id`` end within ``within_s``: well before the agent's idle timeout
    (5 s), which would end a get whose reader merely stopped reading."""
    started = time.monotonic()
    while _flows(client, coflow_id):
        assert time.monotonic() - started < within_s, f"{what}: its flow still runs after {within_s} s"
        time.sleep(0.05)


class _Alarm(Exception):
    pass


def test_a_stream_whose_wait_is_interrupted_raises_ever_after_rather_than_ending_short(slow_cluster: Cluster) -> None:
    # A 4 MB piece at 5 MB/s: the reader waits for each chunk. An exception raised into a wait
    # (a signal handler's; a per-chunk asyncio timeout, which cancels the wait) loses what the
    # wait was bringing: the stream ends there, its transfer with it, and every later iteration
    # raises, never stops as if the piece were whole (what a generator does once an exception
    # left it).
    data = random.Random(31).randbytes(4 << 20)
    with slow_cluster.client(0) as a, slow_cluster.client(1) as b:
        c = a.register(2)
        a.put(c, "sync", data)
        a.put(c, "aio", data)

        def alarm(signum: int, frame: object) -> None:
            # Raised only while the main thread waits in the extension (in `_call`, the frame that
            # called it), not between chunks, where it would be the test's own loop that loses one.
            if getattr(getattr(frame, "f_code", None), "co_name", None) == "_call":
                raise _Alarm()
            signal.setitimer(signal.ITIMER_REAL, 0.01)

        previous = signal.signal(signal.SIGALRM, alarm)
        try:
            stream = b.get_stream(c, "sync")
            got: List[bytes] = []
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(_Alarm):
                for chunk in stream:
                    got.append(chunk)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert len(b"".join(got)) < len(data)
        for _ in range(3):
            with pytest.raises(ValueError, match="^the stream is closed: _Alarm ended it before the end of its piece") as e:
                next(stream)
            assert isinstance(e.value.__cause__, _Alarm)
        # Its transfer ended with it, though the reader still holds the stream.
        _assert_flows_end(a, c, "the interrupted stream")

        async def main() -> None:
            async with coflow.aio.Client(slow_cluster.coordinator, slow_cluster.agents[1], token=TOKEN) as ab:
                stream = ab.get_stream(c, "aio")
                got, timeouts = [], 0
                while not timeouts:
                    try:
                        got.append(await asyncio.wait_for(stream.__anext__(), 0.001))
                    except asyncio.TimeoutError:
                        timeouts += 1
                assert len(b"".join(got)) < len(data)
                for _ in range(3):
                    with pytest.raises(ValueError, match="^the stream is closed: CancelledError ended it") as e:
                        await asyncio.wait_for(stream.__anext__(), 5)
                    assert isinstance(e.value.__cause__, asyncio.CancelledError)
                _assert_flows_end(a, c, "the cancelled stream")
                # A stream read to its end is exactly the piece, and then stops, every time.
                whole = ab.get_stream(c, "aio")
                assert b"".join([chunk async for chunk in whole]) == data
                for _ in range(2):
                    with pytest.raises(StopAsyncIteration):
                        await whole.__anext__()

        asyncio.run(main())
        whole = b.get_stream(c, "sync")
        assert b"".join(whole) == data
        assert next(whole, None) is None
        a.unregister(c)


def test_a_stream_given_up_at_its_start_ends_its_flow_at_once(slow_cluster: Cluster) -> None:
    # A 20 MB piece at 5 MB/s (4 s): a stream that its reader gives up, whether its first wait
    # was cancelled (`asyncio.wait_for` timing out), or its first chunk came and it was then
    # closed (`aclose()`, `close()`, the end of its `with` or `async with` block) or dropped,
    # ends its flow at once, not at the agent's idle timeout; a stream closed before its end
    # raises on its next iteration rather than stop as if whole. (A stream whose first chunk came
    # and which the reader keeps unread is not given up: it holds its flow until the agent's idle
    # timeout, as any slow reader's.)
    data = random.Random(37).randbytes(20_000_000)
    with slow_cluster.client(0) as a, slow_cluster.client(1) as b:
        c = a.register(1)
        a.put(c, "p", data)

        async def main() -> None:
            async with coflow.aio.Client(slow_cluster.coordinator, slow_cluster.agents[1], token=TOKEN) as ab:
                for delay in (0.0005, 0.002, 0.005, 0.02):
                    stream = ab.get_stream(c, "p")
                    try:
                        assert await asyncio.wait_for(stream.__anext__(), delay)
                        await stream.aclose()
                    except asyncio.TimeoutError:
                        pass
                    _assert_flows_end(a, c, f"a stream given up after {delay * 1000:g} ms")
                    with pytest.raises(ValueError, match="^the stream is closed"):
                        await stream.__anext__()

                stream = ab.get_stream(c, "p")
                assert await stream.__anext__()
                del stream
                _assert_flows_end(a, c, "a dropped stream")

                async with ab.get_stream(c, "p") as stream:
                    assert await stream.__anext__()
                _assert_flows_end(a, c, "a stream whose async with block ended")
                with pytest.raises(ValueError, match="^the stream is closed$"):
                    await stream.__anext__()

        asyncio.run(main())
        with b.get_stream(c, "p") as stream:
            assert next(stream)
        _assert_flows_end(a, c, "a stream whose with block ended")
        with pytest.raises(ValueError, match="^the stream is closed$"):
            next(stream)
        stream = b.get_stream(c, "p")
        assert next(stream)
        stream.close()
        _assert_flows_end(a, c, "a closed stream")
        with pytest.raises(ValueError, match="^the stream is closed$"):
            next(stream)
        a.unregister(c)


def test_the_asyncio_client_puts_and_gets(cluster: Cluster) -> None:
    async def main() -> None:
        async with coflow.aio.Client(cluster.coordinator, cluster.agents[0], token="python-tests-token") as a:
            async with coflow.aio.Client(cluster.coordinator, cluster.agents[1], token="python-tests-token") as b:
                c = await a.register(2)
                data = random.Random(9).randbytes(1 << 20)
                await asyncio.gather(a.put(c, "p0", data), a.put(c, "p1", data[::-1]))
                got = await asyncio.gather(b.get(c, "p0"), b.get(c, "p1"))
                assert got == [data, data[::-1]]
                streamed = [chunk async for chunk in b.get_stream(c, "p0")]
                assert b"".join(streamed) == data
                with pytest.raises(coflow.NoSuchData):
                    await b.get(c, "p2")
                await a.unregister(c)

    asyncio.run(main())


def test_over_mutual_tls_bytes_are_exact_and_only_members_in_their_role_get_in(tls_cluster: Cluster) -> None:
    data = random.Random(21).randbytes(2 << 20)
    with tls_cluster.client(0) as a, tls_cluster.client(1) as b:
        c = a.register(1, name="over-tls")
        a.put(c, "p", data)
        assert b.get(c, "p") == data
        assert b"".join(b.get_stream(c, "p")) == data
        a.unregister(c)
    # A plaintext client with the token: refused (the services speak only TLS).
    plain = tls_cluster.coordinator.replace("https://", "http://")
    with pytest.raises(coflow.CoflowError):
        with coflow.Client(plain, tls_cluster.agents[0].replace("https://", "http://"), token="python-tests-token") as p:
            p.register(1)
    # An agent's certificate may not use the coflow API: a client's role only.
    with tls_cluster.client(0, tls=tls_cluster.tls_files("agent-0")) as impostor:
        with pytest.raises(coflow.PermissionDenied):
            impostor.register(1)
    # The coordinator's, a server's only, is refused when the client is made, rather than at its
    # first call (where the refusal may read as a lost connection).
    says = r"tls: \S*/coordinator\.crt is the certificate of coflow://coordinator, a server's only; a client needs"
    with pytest.raises(coflow.Invalid, match=says):
        tls_cluster.client(0, tls=tls_cluster.tls_files("coordinator"))
    # Over TLS the URLs are https://: a plaintext one is its argument's ValueError, while a
    # certificate the client refuses stays Invalid whatever the URLs.
    plain_agent = tls_cluster.agents[0].replace("https://", "http://")
    with pytest.raises(ValueError, match=r'^agent: url "http://\S+" must start with https:// \(TLS is on'):
        coflow.Client(tls_cluster.coordinator, plain_agent, tls=tls_cluster.tls_files("client-pytest"))
    with pytest.raises(coflow.Invalid, match=says):
        coflow.Client(plain, plain_agent, tls=tls_cluster.tls_files("coordinator"))


def test_a_client_with_a_token_is_told_a_tls_service_takes_tls_and_not_of_a_certificate(tls_cluster: Cluster) -> None:
    plain = [url.replace("https://", "http://") for url in (tls_cluster.coordinator, tls_cluster.agents[0])]
    with coflow.Client(*plain, token=TOKEN, timeout_s=10) as c:
        # The first call's connection breaks on the TLS service's answer; later ones close
        # before an answer: each is told the same.
        calls = [(c.status, coflow.CoordinatorUnreachable), (lambda: c.get(1, "p"), coflow.AgentUnreachable)]
        for call, kind in calls * 4:
            with pytest.raises(kind) as e:
                call()
            said = str(e.value)
            assert "if the service uses TLS" in said and "https://" in said, said
            assert "refused this client's certificate" not in said, said


def test_tls_files_must_exist(cluster: Cluster) -> None:
    with pytest.raises(FileNotFoundError, match=r"^tls ca: cannot read no-ca\.pem"):
        coflow.Client(cluster.coordinator, cluster.agents[0], tls=("no-ca.pem", "no-cert.pem", "no-key.pem"))
    with pytest.raises(IsADirectoryError, match=r"^tls key: "):
        coflow.Client(cluster.coordinator, cluster.agents[0], tls=(__file__, __file__, os.path.dirname(__file__)))


def test_a_tls_file_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    # Opening a FIFO that no one writes would wait for ever, the GIL held (no Ctrl-C, no other
    # thread runs): it is refused from what it is. In a child, which a hang cannot take down.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script = f"""
import coflow
try:
    coflow.Client(tls=({str(fifo)!r},) * 3)
except OSError as e:
    print(type(e).__name__, e)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert re.match(r"^OSError tls ca: cannot read .*fifo: a FIFO, not a regular file$", r.stdout.strip()), r.stdout


def test_the_token_comes_from_the_environment(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COFLOW_TOKEN", "python-tests-token")
    with coflow.Client(cluster.coordinator, cluster.agents[0]) as c:
        assert c.status()["policy"] == "varys"
    monkeypatch.delenv("COFLOW_TOKEN")
    with pytest.raises(ValueError, match="token"):
        coflow.Client(cluster.coordinator, cluster.agents[0])


def test_unknown_kinds_are_coflow_errors_with_the_kind() -> None:
    e = from_kind("brand-new-kind", "something new")
    assert type(e) is coflow.CoflowError and e.kind == "brand-new-kind"
    assert isinstance(from_kind("data-lost", "gone"), coflow.DataLost)
    assert isinstance(from_kind("limit-exceeded", "full"), coflow.LimitExceeded)
    assert isinstance(from_kind("permission-denied", "no"), coflow.PermissionDenied)
