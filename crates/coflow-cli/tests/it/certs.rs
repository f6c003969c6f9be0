//! `coflow certs` and a cluster of real processes started with its certificates.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::procs::{Proc, free_port};
use crate::{coflow, tmp};

fn run_ok(args: &[&str], dir: &Path) -> String {
    let out = coflow().args(args).arg(dir).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn certs_init_and_issue_write_the_files_and_refuse_to_overwrite() {
    let dir = tmp("certs-files");
    let _ = std::fs::remove_dir_all(&dir);
    let out = coflow().args(["certs", "init"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out =
        coflow().args(["certs", "issue"]).arg(&dir).args(["--coordinator", "127.0.0.1,coord.local"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("coflow://coordinator"));
    let out =
        coflow().args(["certs", "issue"]).arg(&dir).args(["--agent", "3", "--host", "127.0.0.1"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = coflow().args(["certs", "issue"]).arg(&dir).args(["--client", "spark"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["ca", "coordinator", "agent-3", "client-spark"] {
        assert!(dir.join(format!("{f}.crt")).is_file(), "{f}.crt");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(format!("{f}.key"))).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}.key");
        }
    }
    let before = std::fs::read(dir.join("client-spark.key")).unwrap();
    let out = coflow().args(["certs", "issue"]).arg(&dir).args(["--client", "spark"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(dir.join("client-spark.key")).unwrap(), before, "refused: the key is unchanged");
    let out = coflow().args(["certs", "issue"]).arg(&dir).args(["--client", "spark", "--force"]).output().unwrap();
    assert!(out.status.success());
    assert_ne!(std::fs::read(dir.join("client-spark.key")).unwrap(), before, "forced: a new key");
    // Bad input names the input.
    let out = coflow().args(["certs", "issue"]).arg(&dir).args(["--client", "a/b"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("client name"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = coflow().args(["certs", "issue"]).arg(&dir).args(["--agent", "1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--host"), "{}", String::from_utf8_lossy(&out.stderr));
    // An id no coordinator takes is no certificate to issue.
    let out = coflow().args(["certs", "issue"]).arg(&dir).args(["--agent", "65536", "--host", "h"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--agent 65536: must be below 65536"));
    assert!(!dir.join("agent-65536.crt").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// What every peer would refuse only later, at the handshake or at registration, is refused at
/// start and names what is wrong: a coordinator given a client's certificate, an agent told to
/// advertise a data address no agent can reach, or listening on every address with none.
#[test]
fn services_refuse_another_members_certificate_and_an_unreachable_data_address_at_start() {
    let dir = tmp("certs-misused");
    let _ = std::fs::remove_dir_all(&dir);
    run_ok(&["certs", "init"], &dir);
    run_ok(&["certs", "issue", "--client", "ops"], &dir);
    run_ok(&["certs", "issue", "--agent", "0", "--host", "127.0.0.1"], &dir);
    let f = |name: &str| dir.join(name).display().to_string();
    let out = coflow()
        .args(["coordinator", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--tls-ca", &f("ca.crt"), "--tls-cert", &f("client-ops.crt"), "--tls-key", &f("client-ops.key")])
        .env_remove("COFLOW_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("coflow://client/ops, not the coordinator"), "{err}");
    // Told an address no agent can reach, or none while listening on every address.
    let data = [
        vec![format!("127.0.0.1:{}", free_port()), "--data-advertise".into(), "garbage".into()],
        vec![format!("0.0.0.0:{}", free_port())],
    ];
    for data in data {
        let out = coflow()
            .args(["agent", "--machine", "0", "--coordinator", "https://127.0.0.1:1"])
            .args(["--listen", &format!("127.0.0.1:{}", free_port()), "--data-listen"])
            .args(&data)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--tls-ca", &f("ca.crt"), "--tls-cert", &f("agent-0.crt"), "--tls-key", &f("agent-0.key")])
            .env_remove("COFLOW_TOKEN")
            .env_remove("COFLOW_DATA_ADVERTISE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("data_advertise"), "{data:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cluster_started_with_certs_serves_tls_clients_and_refuses_plaintext_ones() {
    let dir = tmp("certs-cluster");
    let _ = std::fs::remove_dir_all(&dir);
    run_ok(&["certs", "init"], &dir);
    run_ok(&["certs", "issue", "--coordinator", "127.0.0.1"], &dir);
    run_ok(&["certs", "issue", "--agent", "0", "--host", "127.0.0.1"], &dir);
    run_ok(&["certs", "issue", "--client", "ops"], &dir);
    let f = |name: &str| dir.join(name).display().to_string();
    let (cport, aport, dport) = (free_port(), free_port(), free_port());
    let curl = format!("https://127.0.0.1:{cport}");
    let data_dir = dir.join("data");
    let _coord = Proc(
        coflow()
            .args(["coordinator", "--listen", &format!("127.0.0.1:{cport}")])
            .args(["--tls-ca", &f("ca.crt"), "--tls-cert", &f("coordinator.crt"), "--tls-key", &f("coordinator.key")])
            .env_remove("COFLOW_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _agent = Proc(
        coflow()
            .args(["agent", "--machine", "0", "--coordinator", &curl])
            .args(["--listen", &format!("127.0.0.1:{aport}"), "--data-listen", &format!("127.0.0.1:{dport}")])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--tls-ca", &f("ca.crt"), "--tls-cert", &f("agent-0.crt"), "--tls-key", &f("agent-0.key")])
            .env_remove("COFLOW_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let tls_status = || {
        coflow()
            .args(["status", "--coordinator", &curl])
            .args(["--tls-ca", &f("ca.crt"), "--tls-cert", &f("client-ops.crt"), "--tls-key", &f("client-ops.key")])
            .env_remove("COFLOW_TOKEN")
            .output()
            .unwrap()
    };
    let started = Instant::now();
    loop {
        let out = tls_status();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && text.contains("alive") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no live agent over TLS: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Plaintext, and a client certificate of another CA, are refused.
    let out = coflow()
        .args(["status", "--coordinator", &format!("http://127.0.0.1:{cport}")])
        .env("COFLOW_TOKEN", "anything")
        .output()
        .unwrap();
    assert!(!out.status.success(), "a plaintext status was answered");
    let other = dir.join("other");
    run_ok(&["certs", "init"], &other);
    run_ok(&["certs", "issue", "--client", "ops"], &other);
    let g = |name: &str| other.join(name).display().to_string();
    let out = coflow()
        .args(["status", "--coordinator", &curl])
        .args(["--tls-ca", &f("ca.crt"), "--tls-cert", &g("client-ops.crt"), "--tls-key", &g("client-ops.key")])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a client of another CA was answered");
    drop((_agent, _coord));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_runs_over_tls_by_default_with_every_coflow_complete() {
    let json = tmp("demo-tls.json");
    let out = coflow()
        .args(["demo", "--policies", "varys", "--agents", "4", "--coflows", "6"])
        .args(["--total-bytes", "8000000", "--port-rate", "200Mbps", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("over mutual TLS"));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let r = &report["results"][0];
    assert_eq!(r["completed"], 6, "every coflow completed with its exact bytes: {r}");
    assert_eq!(r["failed_gets"], 0);
}

/// The demo's cluster keeps its keys in a directory of its own, readable by its user only, and
/// an interrupted demo (Ctrl-C) removes it: no private key is left in the temporary directory.
#[test]
fn an_interrupted_demo_leaves_no_keys_behind() {
    use std::os::unix::fs::PermissionsExt;
    let tmpdir = tmp("demo-tmpdir");
    let _ = std::fs::remove_dir_all(&tmpdir);
    std::fs::create_dir_all(&tmpdir).unwrap();
    let mut child = coflow()
        .args(["demo", "--policies", "varys", "--agents", "3", "--coflows", "400"])
        .args(["--total-bytes", "4GB", "--port-rate", "100Mbps"])
        .env("TMPDIR", &tmpdir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let clusters = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&tmpdir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("certs").exists()).collect()
    };
    let started = std::time::Instant::now();
    let root = loop {
        // Its keys written, the cluster is up (or coming up): interrupt it then.
        if let Some(root) = clusters().into_iter().find(|r| r.join("certs/ca.key").exists()) {
            break root;
        }
        assert!(child.try_wait().unwrap().is_none(), "the demo ended before its cluster came up");
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "no cluster after 60 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{} is private", root.display());
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            panic!("the demo did not end within 10 s of SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    assert!(clusters().is_empty(), "left behind: {:?}", clusters());
    let _ = std::fs::remove_dir_all(&tmpdir);
}

/// A member's certificate and key put in place of the CA's (copied from `admin.*`) match each
/// other, but what they would sign verifies nowhere: `issue` refuses, naming the file, and
/// writes nothing.
#[test]
fn certs_issue_refuses_a_member_certificate_as_the_ca_and_writes_nothing() {
    let dir = tmp("certs-not-ca");
    let _ = std::fs::remove_dir_all(&dir);
    run_ok(&["certs", "init"], &dir);
    run_ok(&["certs", "issue", "--admin"], &dir);
    for ext in ["crt", "key"] {
        std::fs::copy(dir.join(format!("admin.{ext}")), dir.join(format!("ca.{ext}"))).unwrap();
    }
    let out = coflow().args(["certs", "issue"]).arg(&dir).args(["--client", "z"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let ca = dir.join("ca.crt").display().to_string();
    assert!(err.contains(&format!("{ca} is not a CA certificate (no basicConstraints CA:TRUE)")), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("issued"));
    assert!(!dir.join("client-z.crt").exists() && !dir.join("client-z.key").exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Directories `certs` makes are 0755, certificates 0644 and keys 0600, whatever the umask and
/// whether a file is new or replaced (`--force`): no other local user may replace the CA.
#[test]
fn certs_files_have_their_own_modes_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    for umask in ["000", "077"] {
        let root = tmp(&format!("certs-umask-{umask}"));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("cluster/certs");
        let certs = |args: &[&str]| {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
                .arg(env!("CARGO_BIN_EXE_coflow"))
                .arg("certs")
                .args(args)
                .arg(&dir)
                .output()
                .unwrap();
            assert!(out.status.success(), "umask {umask} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let mode = |p: &Path| format!("{:o}", std::fs::metadata(p).unwrap().permissions().mode() & 0o777);
        for force in [false, true] {
            let flag: &[&str] = if force { &["--force"] } else { &[] };
            certs(&[&["init"], flag].concat());
            certs(&[&["issue", "--admin"], flag].concat());
            for d in [root.join("cluster"), dir.clone()] {
                assert_eq!(mode(&d), "755", "umask {umask}, force {force}: {}", d.display());
            }
            for stem in ["ca", "admin"] {
                let (crt, key) = (dir.join(format!("{stem}.crt")), dir.join(format!("{stem}.key")));
                assert_eq!(mode(&crt), "644", "umask {umask}, force {force}: {}", crt.display());
                assert_eq!(mode(&key), "600", "umask {umask}, force {force}: {}", key.display());
            }
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
