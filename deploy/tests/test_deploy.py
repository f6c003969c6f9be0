"""Checks of the deployment kit (run by `scripts/test-all deploy`).

- Each kustomization renders with kustomize and every resource validates against the Kubernetes
  schemas (kubernetes-validate, strict: unknown fields are errors); the ServiceMonitor, a custom
  resource without a schema there, is checked by hand against the Services it selects.
- Each systemd unit passes `systemd-analyze verify`, and a broken one does not (so the check bites);
  the agent's user is the one its sysusers.d file makes (systemd-sysusers into a scratch root).
The example TOMLs are parsed by the services' own config types in the Rust tests
(crates/coflow-testkit/tests/it/ops.rs), and the Grafana dashboard's queries are checked there
against the metrics a running coordinator and agent serve.
"""

import os
import pathlib
import shutil
import subprocess
import tempfile
import tomllib

import kubernetes_validate
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = [DEPLOY / "kubernetes" / "base", DEPLOY / "kubernetes" / "overlays" / "token"]
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
BINARY = ROOT / "target" / "release" / "coflow"


def kustomize(path):
    if shutil.which("kubectl"):
        cmd = ["kubectl", "kustomize", str(path)]
    else:
        cmd = [os.environ.get("KUSTOMIZE", "kustomize"), "build", str(path)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_manifests_validate_against_the_kubernetes_schemas(path):
    docs = kustomize(path)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "DaemonSet", "Deployment", "Namespace", "Service", "Service", "ServiceMonitor"]
    for d in docs:
        if d["kind"] == "ServiceMonitor":
            continue
        kubernetes_validate.validate(d, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_probes_ports_and_service_monitor_agree(path):
    docs = kustomize(path)
    services = [d for d in docs if d["kind"] == "Service"]
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    selected = [
        s for s in services
        if all(s["metadata"].get("labels", {}).get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    ]
    assert sorted(s["metadata"]["name"] for s in selected) == ["coflow-agent", "coflow-coordinator"]
    for s in selected:
        for ep in monitor["spec"]["endpoints"]:
            assert ep["port"] in {p["name"] for p in s["spec"]["ports"]}, s["metadata"]["name"]
    configs = {k: tomllib.loads(v) for k, v in next(d for d in docs if d["kind"] == "ConfigMap")["data"].items()}
    for w in (d for d in docs if d["kind"] in ("Deployment", "DaemonSet")):
        spec = w["spec"]["template"]["spec"]
        for c in spec["containers"]:
            ports = {p["name"]: p["containerPort"] for p in c["ports"] if "name" in p}
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
            # Both probes reach the port the member's own TOML serves HTTP on.
            config = configs[pathlib.PurePath(c["args"][c["args"].index("--config") + 1]).name]
            http = int(config["metrics_listen"].rsplit(":", 1)[1])
            for probe in ("livenessProbe", "readinessProbe"):
                assert ports.get(c[probe]["httpGet"]["port"]) == http, (probe, ports, http)
            assert int(config["listen"].rsplit(":", 1)[1]) in {p["containerPort"] for p in c["ports"]}
            assert c["image"].startswith("localhost/coflow:"), c["image"]
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            assert mounts <= {v["name"] for v in spec["volumes"]}


def mount_of(container, volumes, path):
    """The volume under which `path` lies in `container`."""
    mount = max(
        (m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")),
        key=lambda m: len(m["mountPath"]),
    )
    return next(v for v in volumes if v["name"] == mount["name"])


def test_each_member_reads_its_key_and_no_agent_holds_another_nodes():
    docs = kustomize(KUSTOMIZATIONS[0])
    for w in (d for d in docs if d["kind"] in ("Deployment", "DaemonSet")):
        spec = w["spec"]["template"]["spec"]
        pod = spec.get("securityContext", {})
        if pod.get("runAsUser", 0) != 0:
            # A Secret's files are mounted owned by root: a process that is not root reads them
            # through the pod's fsGroup only.
            assert any("secret" in v for v in spec["volumes"])
            assert pod.get("fsGroup") == pod.get("runAsGroup"), w["metadata"]["name"]
    agent = next(d for d in docs if d["kind"] == "DaemonSet")
    spec = agent["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    key = c["args"][c["args"].index("--tls-key") + 1]
    assert "$(" not in key, "one path on every node: the node holds its own key"
    assert "hostPath" in mount_of(c, spec["volumes"], key), "a Secret would give every node's key to every agent"


def test_token_overlay_has_no_tls_and_reads_the_token():
    docs = kustomize(KUSTOMIZATIONS[1])
    for w in (d for d in docs if d["kind"] in ("Deployment", "DaemonSet")):
        c = w["spec"]["template"]["spec"]["containers"][0]
        assert not any("tls" in a for a in c["args"]), c["args"]
        assert "COFLOW_TOKEN" in {e["name"] for e in c["env"]}
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    assert "tls_" not in config["coordinator.toml"] and "tls_" not in config["agent.toml"]
    assert "http://" in config["agent.toml"]


def verify(units_dir):
    return subprocess.run(
        ["systemd-analyze", "verify", *sorted(str(p) for p in units_dir.glob("*.service"))],
        capture_output=True,
        text=True,
    )


def test_systemd_units_verify():
    assert [u.name for u in UNITS] == ["coflow-agent.service", "coflow-coordinator.service"]
    assert BINARY.exists(), "build the binary first: cargo build --release -p coflow-cli"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        # `verify` checks that ExecStart's binary exists: point it at the built one.
        for u in UNITS:
            (tmp / u.name).write_text(u.read_text().replace("/usr/local/bin/coflow", str(BINARY)))
        r = verify(tmp)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        broken = tmp / "coflow-agent.service"
        broken.write_text(broken.read_text().replace("KillSignal=SIGTERM", "KillSignal=SIGNOTASIGNAL").replace(str(BINARY), "coflow"))
        r = verify(tmp)
        assert r.returncode != 0, "systemd-analyze accepted a broken unit"


def test_the_agent_runs_as_the_user_its_sysusers_file_makes():
    sysusers = DEPLOY / "systemd" / "coflow.sysusers"
    unit = (DEPLOY / "systemd" / "coflow-agent.service").read_text()
    # A dynamic user's state directory lies beneath /var/lib/private (0700): no one else could
    # pass through it to a directory of their own, as Spark's executors do.
    assert "DynamicUser=yes" not in unit
    assert "User=coflow\n" in unit and "Group=coflow\n" in unit and "StateDirectoryMode=0751\n" in unit
    with tempfile.TemporaryDirectory() as root:
        (pathlib.Path(root) / "etc").mkdir()
        r = subprocess.run(["systemd-sysusers", f"--root={root}", str(sysusers)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        passwd = (pathlib.Path(root) / "etc" / "passwd").read_text().splitlines()
        group = (pathlib.Path(root) / "etc" / "group").read_text().splitlines()
    user = next(line.split(":") for line in passwd if line.startswith("coflow:"))
    assert user[5] == "/var/lib/coflow", user
    assert any(line.startswith("coflow:") for line in group), group


def test_the_image_user_and_ports_agree_with_the_manifests():
    containerfile = (ROOT / "Containerfile").read_text().splitlines()
    user = next(line.split()[1] for line in containerfile if line.startswith("USER "))
    exposed = {int(p) for line in containerfile if line.startswith("EXPOSE ") for p in line.split()[1:]}
    uid, gid = (int(x) for x in user.split(":"))
    for w in (d for d in kustomize(KUSTOMIZATIONS[0]) if d["kind"] in ("Deployment", "DaemonSet")):
        spec = w["spec"]["template"]["spec"]
        pod = spec.get("securityContext", {})
        # The agent runs as root with every capability dropped (a new node's hostPath data
        # directory is root's); any other member runs as the image's user.
        if pod.get("runAsUser") != 0:
            assert (pod.get("runAsUser"), pod.get("runAsGroup")) == (uid, gid), w["metadata"]["name"]
        for c in spec["containers"]:
            assert {p["containerPort"] for p in c["ports"]} <= exposed, (w["metadata"]["name"], exposed)
