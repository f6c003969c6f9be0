//! What a run created, recorded before it is created, in a state file per run
//! (`/run/coflow-testbed/<prefix>.json`, or under the temporary directory when `/run` is not
//! writable), so that `coflow testbed down` removes what a killed run left behind, and a
//! SIGINT/SIGTERM tears the run down before the process exits.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::TestbedError;

/// One run's record.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunState {
    /// The run's name prefix (`cfb` and six hex digits).
    pub prefix: String,
    /// The process that owns the run.
    pub owner_pid: u32,
    /// Network namespaces, in creation order.
    pub namespaces: Vec<String>,
    /// Processes started (each command line holds the prefix, checked before a kill).
    pub pids: Vec<u32>,
    /// Files: tokens, logs, data directories.
    pub run_dir: PathBuf,
}

/// Where state files live.
pub fn state_dir() -> PathBuf {
    let run = Path::new("/run/coflow-testbed");
    if std::fs::create_dir_all(run).is_ok() && is_writable(run) {
        return run.to_path_buf();
    }
    std::env::temp_dir().join("coflow-testbed-state")
}

fn is_writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    let ok = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(probe);
    ok
}

/// Serializes topology changes with the signal handler's teardown, so that a teardown never
/// races a half-made change, and records that the process is being torn down.
pub(crate) static CHANGES: Mutex<bool> = Mutex::new(false);

/// State files of runs in this process, torn down on SIGINT/SIGTERM.
static ACTIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A live run's state, saved on every change.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    state: Mutex<RunState>,
}

impl StateFile {
    /// Starts the record of a run.
    pub fn create(prefix: &str, run_dir: &Path) -> Result<StateFile, TestbedError> {
        let dir = state_dir();
        std::fs::create_dir_all(&dir).map_err(|e| TestbedError::io(&dir, e))?;
        let path = dir.join(format!("{prefix}.json"));
        let state = RunState {
            prefix: prefix.to_string(),
            owner_pid: std::process::id(),
            run_dir: run_dir.to_path_buf(),
            ..Default::default()
        };
        let f = StateFile { path, state: Mutex::new(state) };
        f.save()?;
        ACTIVE.lock().expect("active lock").push(f.path.clone());
        Ok(f)
    }

    /// The run's prefix.
    pub fn prefix(&self) -> String {
        self.state.lock().expect("state lock").prefix.clone()
    }

    fn save(&self) -> Result<(), TestbedError> {
        let text = serde_json::to_string_pretty(&*self.state.lock().expect("state lock")).expect("serializable");
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| TestbedError::io(&tmp, e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| TestbedError::io(&self.path, e))
    }

    /// Records a namespace about to be created.
    pub fn add_namespace(&self, ns: &str) -> Result<(), TestbedError> {
        self.state.lock().expect("state lock").namespaces.push(ns.to_string());
        self.save()
    }

    /// Records a started process.
    pub fn add_pid(&self, pid: u32) -> Result<(), TestbedError> {
        self.state.lock().expect("state lock").pids.push(pid);
        self.save()
    }

    /// Removes everything recorded and the record itself.
    pub fn teardown(&self) -> Vec<String> {
        let st = self.state.lock().expect("state lock").clone();
        let removed = teardown(&st);
        let _ = std::fs::remove_file(&self.path);
        ACTIVE.lock().expect("active lock").retain(|p| p != &self.path);
        removed
    }

    /// Leaves the run up (for `--keep`): `coflow testbed down` removes it later.
    pub fn keep(&self) {
        ACTIVE.lock().expect("active lock").retain(|p| p != &self.path);
    }
}

fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(String::from_utf8_lossy(&raw).replace('\0', " "))
}

/// Whether process `pid` is one of the run's (its command line names the prefix).
fn is_ours(pid: u32, prefix: &str) -> bool {
    cmdline(pid).is_some_and(|c| c.contains(prefix))
}

/// Sends `signal` (`KILL`, `STOP`, `CONT`, `TERM`) to `pid`.
pub(crate) fn signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether a SIGINT or SIGTERM is tearing this process's runs down (it exits when done).
pub fn interrupted() -> bool {
    *CHANGES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills the run's processes, deletes its namespaces (which deletes the links in them) and
/// files; returns what it removed.
fn teardown(st: &RunState) -> Vec<String> {
    let mut removed = Vec::new();
    let live: Vec<u32> = st.pids.iter().copied().filter(|&p| is_ours(p, &st.prefix)).collect();
    for &p in &live {
        signal(p, "CONT");
        signal(p, "KILL");
        removed.push(format!("process {p}"));
    }
    let until = Instant::now() + Duration::from_secs(5);
    while live.iter().any(|&p| is_ours(p, &st.prefix)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let existing = namespaces();
    for ns in st.namespaces.iter().rev() {
        if existing.contains(ns) {
            // A namespace caught half made by the signal (its file there, not yet mounted) may
            // refuse at first: tried again for a moment, quietly; `ip`'s complaint is shown only
            // if it still refuses.
            let mut said = String::new();
            let ok = (0..5).any(|i| {
                if i > 0 {
                    std::thread::sleep(Duration::from_millis(50));
                }
                match Command::new("ip").args(["netns", "del", ns]).output() {
                    Ok(out) if out.status.success() => true,
                    Ok(out) => {
                        said = String::from_utf8_lossy(&out.stderr).trim().to_string();
                        false
                    }
                    Err(e) => {
                        said = e.to_string();
                        false
                    }
                }
            });
            if ok {
                removed.push(format!("namespace {ns}"));
            } else {
                eprintln!("testbed: namespace {ns} could not be removed: {said}");
            }
        }
    }
    if st.run_dir.as_os_str().len() > 1
        && st.run_dir.to_string_lossy().contains(&st.prefix)
        && std::fs::remove_dir_all(&st.run_dir).is_ok()
    {
        removed.push(format!("directory {}", st.run_dir.display()));
    }
    removed
}

/// What `down` did.
#[derive(Debug, Default)]
pub struct DownReport {
    /// Runs removed, with what was removed of each.
    pub removed: Vec<(String, Vec<String>)>,
    /// Runs left alone because their owner is alive, with its pid.
    pub live: Vec<(String, u32)>,
}

/// Removes every run whose owner process is gone (all runs with `all`). A second call finds
/// nothing to do.
pub fn down(all: bool) -> Result<DownReport, TestbedError> {
    let dir = state_dir();
    let mut report = DownReport::default();
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(report) };
    let mut paths: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    paths.sort();
    for path in paths {
        // A run that ends while this looks removes its own state file: nothing left to do for it.
        let Some(st) = read_run(&path)? else { continue };
        if owner_alive(&st) && !all {
            report.live.push((st.prefix.clone(), st.owner_pid));
            continue;
        }
        let removed = teardown(&st);
        let _ = std::fs::remove_file(&path);
        report.removed.push((st.prefix, removed));
    }
    Ok(report)
}

/// Whether the process that made run `st` is alive (and another than this one).
fn owner_alive(st: &RunState) -> bool {
    st.owner_pid != std::process::id()
        && cmdline(st.owner_pid).is_some_and(|c| c.contains("testbed") || c.contains("coflow"))
}

/// The prefixes of the runs a killed process left (its namespaces and processes still up),
/// which `down` would remove; unreadable state files are passed over.
pub fn orphans() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state_dir()) else { return Vec::new() };
    let mut out: Vec<String> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| read_run(&p).ok().flatten())
        .filter(|st| !owner_alive(st) && st.owner_pid != std::process::id())
        .map(|st| st.prefix)
        .collect();
    out.sort();
    out
}

/// The run a state file records; `None` if the file is gone (its run ended and removed it since
/// the directory was listed). A file that cannot be read or parsed is an error naming it.
fn read_run(path: &Path) -> Result<Option<RunState>, TestbedError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TestbedError::io(path, e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| TestbedError::Setup(format!("state file {}: {e}", path.display())))
}

/// On SIGINT or SIGTERM, tears down this process's runs and exits with status 130: call once,
/// early. The handler runs on its own thread.
pub fn teardown_on_signal() {
    std::thread::spawn(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("signal runtime");
        rt.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            let mut torn = CHANGES.lock().unwrap_or_else(|e| e.into_inner());
            *torn = true;
            let paths = ACTIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
            for path in paths {
                if let Ok(Some(st)) = read_run(&path) {
                    let removed = teardown(&st);
                    let _ = std::fs::remove_file(&path);
                    eprintln!("interrupted: removed testbed {} ({} items)", st.prefix, removed.len());
                }
            }
            std::process::exit(130);
        });
    });
}

/// The network namespaces of this machine, by name (none if `ip` cannot list them).
fn namespaces() -> Vec<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_file_gone_since_the_listing_is_skipped_and_a_bad_one_named() {
        let guard = tempfile::Builder::new().prefix("coflow-testbed-read-run-").tempdir().unwrap();
        let dir = guard.path();
        assert!(read_run(&dir.join("gone.json")).unwrap().is_none());
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"prefix\": ").unwrap();
        let err = read_run(&bad).unwrap_err().to_string();
        assert!(err.contains("bad.json"), "{err}");
    }
}
