//! Which machine this agent is, what the coordinator asks of it, and leaving the cluster.
//!
//! The machine id is, in order: the one the agent's certificate names (TLS; a configured id
//! must agree with it), the configured one, the one kept in `data_dir/machine-id` from an earlier
//! start, or one the coordinator assigns (`AssignMachine`, asked every 500 ms until it answers),
//! which is then kept there. So an agent never becomes machine 0 for want of a flag, and an agent
//! restarted on the same data directory is the same machine.
//! At a clean stop the agent deregisters, so its flows fail at once rather than at its timeout.
//! An agent holds its data directory for as long as it runs ([`hold_data_dir`]): a second agent
//! started on the same directory stops at once, rather than taking the first one's machine id.
//!
//! Every registration goes through [`Coordinator`], which reads each answer in one place: from
//! an acceptance it learns the coordinator's [`Terms`] (its heartbeat interval and agent timeout,
//! 0 meaning unknown: an older coordinator), and from a refusal whether the agent is refused for
//! good ([`refusal`]). The rule: a refusal is for good when the coordinator itself answered
//! (its error kind is attached, or the code is one only it sends) and what it refused is this
//! process's own claim, which no retry can change while the process runs:
//! - `ABORTED`: a process that started later holds the machine ([`Refusal::Superseded`]); the
//!   machine never goes back to this one.
//! - `INVALID_ARGUMENT` with the error kind `invalid`: the registration states what the
//!   coordinator cannot take, built from the agent's configuration, which does not change while
//!   it runs (a datacenter the coordinator's wide area does not have, or none named on one, a
//!   machine id or an address out of range: [`Refusal::Invalid`]).
//!
//! Everything else is transient and retried with backoff: no answer (the coordinator is down,
//! restarting, paused or unreachable: a transport error, `UNAVAILABLE`, a deadline), a stopping
//! coordinator, the machine live under another session (a restarted agent in token mode waits
//! for its old registration to time out: `PERMISSION_DENIED`), and authentication
//! (`UNAUTHENTICATED`, a wrong token: a coordinator restarted with the right one, or a new one
//! behind the same address, takes the agent back without a restart). An agent refused for good
//! stops as at a clean stop (its in-flight gets end `shutting-down`), does not deregister (it
//! holds no registration; a superseded one's machine is another process's), and its run returns
//! [`crate::RunError::Refused`], so that `coflow agent` exits non-zero naming the reason and a
//! supervisor restarts it or an operator reads why.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use coflow_proto::{ErrorKind, Role, Security, pb};
use tokio::sync::watch;

use crate::RunError;
use crate::config::AgentConfig;
use crate::retry::{RETRY_WARN_EVERY, Retries};

/// A client of the coordinator that attaches the cluster token (in token mode); `state`'s
/// `CoordClient`, named here so that this module does not import `state`, which holds a
/// [`Coordinator`].
type CoordClient = coflow_proto::pb::coordinator_client::CoordinatorClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, coflow_proto::TokenAttach>,
>;

/// The file in the data directory that keeps an assigned machine id.
pub const MACHINE_ID_FILE: &str = "machine-id";

/// This agent's machine id (see the module doc).
pub(crate) async fn resolve(
    config: &AgentConfig,
    security: &Security,
    mut coord: CoordClient,
) -> Result<u32, RunError> {
    let certified = match security.tls().map(|t| t.role()) {
        Some(Role::Agent(n)) => Some(*n),
        Some(other) => return Err(RunError::Machine(format!("the certificate is for {}, not an agent", other.uri()))),
        None => None,
    };
    let path = config.data_dir.join(MACHINE_ID_FILE);
    let stored = read(&path)?;
    let id = match (certified, config.machine) {
        (Some(c), Some(m)) if c != m => {
            return Err(RunError::Machine(format!("configured as machine {m}, but the certificate names machine {c}")));
        }
        (Some(c), _) => c,
        (None, Some(m)) => m,
        (None, None) => match stored {
            Some(s) => {
                tracing::info!(machine = s, file = %path.display(), "machine id kept from an earlier start");
                return Ok(s);
            }
            None => assign(&mut coord, Duration::from_millis(config.heartbeat_interval_ms)).await,
        },
    };
    if stored != Some(id) {
        if let Some(s) = stored {
            tracing::warn!(kept = s, machine = id, file = %path.display(), "the data directory was another machine's; now this one's");
        }
        write(&path, id)?;
    }
    Ok(id)
}

/// Asks the coordinator until it answers, waiting between asks as a registration does
/// (doubling up to 2 s, spread between hosts). A coordinator away (or in its
/// first agent timeout, when it assigns no id) is logged at info for the first
/// [`RETRY_WARN_EVERY`], any other refusal (a wrong cluster token) at warn at once,
/// and either at warn once every [`RETRY_WARN_EVERY`] after that (at debug between).
async fn assign(coord: &mut CoordClient, heartbeat: Duration) -> u32 {
    let host = host_name();
    let spread = host.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let (mut retries, first) = (Retries::new(heartbeat, spread), std::time::Instant::now());
    loop {
        match coord.assign_machine(pb::AssignMachineRequest { host: host.clone() }).await {
            Ok(r) => {
                let id = r.into_inner().machine_id;
                tracing::info!(machine = id, host, "machine id assigned by the coordinator");
                return id;
            }
            Err(e) => {
                let wait = retries.failed();
                let failures = retries.failures();
                let early = e.code() == tonic::Code::Unavailable && first.elapsed() < RETRY_WARN_EVERY;
                if early {
                    tracing::info!(status = %e.message(), failures, "waiting for the coordinator to assign a machine id");
                } else if retries.warn_due(e.code(), std::time::Instant::now()) {
                    tracing::warn!(status = %e.message(), failures, "the coordinator assigns no machine id; asking again");
                } else {
                    tracing::debug!(status = %e.message(), failures, "the coordinator assigns no machine id; asking again");
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// The most bytes a machine-id file may hold: an id is at most ten digits, and a line of it
/// with spaces around fits in far less.
const MACHINE_ID_MAX_BYTES: u64 = 64;

/// The most characters of a file that is not a machine id shown in the error.
const SHOWN_CHARS: usize = 32;

/// The machine id kept at `path`, if there is one. Only a regular file of at most
/// [`MACHINE_ID_MAX_BYTES`] is read, opened without blocking ([`coflow_proto::files::read_small`]):
/// a FIFO, a device or a large file there is an error at once, showing at most a short prefix of
/// what the file holds.
fn read(path: &Path) -> Result<Option<u32>, RunError> {
    let bytes = match coflow_proto::files::read_small_unlinked(path, MACHINE_ID_MAX_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RunError::Machine(format!("reading {}: {e}", path.display()))),
    };
    let parsed = std::str::from_utf8(&bytes).ok().and_then(|text| text.trim().parse().ok());
    parsed.map(Some).ok_or_else(|| {
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        let shown: String = text.chars().take(SHOWN_CHARS).collect();
        let more = if shown.len() < text.len() { "..." } else { "" };
        RunError::Machine(format!("{} holds {shown:?}{more}, not a machine id", path.display()))
    })
}

/// Writes the id whole or not at all: into a temporary file beside `path`, created afresh
/// (`O_CREAT | O_EXCL | O_NOFOLLOW`, so a link planted there is never followed), synced, then
/// renamed over the old one. A stale temporary file is removed first, a symlink there refused;
/// the temporary file is removed if any step fails.
fn write(path: &Path, id: u32) -> Result<(), RunError> {
    let tmp = path.with_extension("tmp");
    let failed = |e: std::io::Error| RunError::Machine(format!("keeping the machine id in {}: {e}", path.display()));
    match std::fs::symlink_metadata(&tmp) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(RunError::Machine(format!(
                "keeping the machine id in {}: {} is a symlink, which the agent does not follow; remove it",
                path.display(),
                tmp.display()
            )));
        }
        Ok(_) => std::fs::remove_file(&tmp).map_err(failed)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e)),
    }
    let written = coflow_proto::files::write_new(&tmp, format!("{id}\n").as_bytes(), 0o644)
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(failed(e));
    }
    // The rename is durable once the directory is synced; an id lost to a crash is assigned again.
    if let Some(dir) = path.parent() {
        coflow_proto::files::sync_dir(dir);
    }
    Ok(())
}

/// Holds `dir` for this agent until the returned descriptor is dropped: an exclusive, non-blocking
/// `flock` on the directory itself (created if missing), so that no file is added to it and the
/// lock goes with the process, however it ends. A directory another agent holds is an error
/// naming it; one on a file system without locks is used with a warning.
pub(crate) fn hold_data_dir(dir: &Path) -> Result<rustix::fd::OwnedFd, RunError> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let failed = |e: std::io::Error| RunError::DataDir(format!("{}: {e}", dir.display()));
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::create_dir_all(dir).map_err(failed)?;
        // Said, since a misspelt path starts an agent afresh, with no machine id and no pieces.
        tracing::info!(dir = %dir.display(), "created the data directory, which did not exist");
    }
    let fd = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| failed(e.into()))?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(fd),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(RunError::DataDir(format!(
            "{} is held by another agent on this machine; give each agent a data directory of its own",
            dir.display()
        ))),
        // A file system without locks (some network ones): the agent runs, unguarded.
        Err(e @ (rustix::io::Errno::NOLCK | rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::BADF)) => {
            tracing::warn!(dir = %dir.display(), error = %e, "the data directory cannot be locked: nothing stops a second agent from using it");
            Ok(fd)
        }
        Err(e) => Err(failed(e.into())),
    }
}

/// Why the coordinator refused this agent for good (see the module doc): registering again
/// cannot succeed while this process runs, so the agent stops.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An agent process that started later registered this machine: it is that process's now.
    #[error("an agent process that started later holds this machine: {0}")]
    Superseded(String),
    /// The coordinator cannot take what the registration states, which comes from the agent's
    /// configuration (a datacenter its wide area does not have, say); the message says what.
    #[error("the coordinator refuses this agent's registration: {0}")]
    Invalid(String),
}

/// Whether `status`, the coordinator's answer to a registration or to the session that opens
/// it, refuses this agent for good (see the module doc for the rule); `None`: it is transient.
pub(crate) fn refusal(status: &tonic::Status) -> Option<Refusal> {
    match status.code() {
        // Only the coordinator sends it (tonic maps no transport error to it), and the agent's
        // link stops registering at once on it.
        tonic::Code::Aborted => Some(Refusal::Superseded(status.message().to_string())),
        tonic::Code::InvalidArgument if ErrorKind::of(status) == Some(ErrorKind::Invalid) => {
            Some(Refusal::Invalid(status.message().to_string()))
        }
        _ => None,
    }
}

/// What the coordinator asks of this agent, as told at its last registration, and its refusal
/// for good, if it refused the agent so.
#[derive(Debug)]
pub(crate) struct Terms {
    /// The coordinator's heartbeat interval, milliseconds; 0 before a registration or from an
    /// older coordinator.
    heartbeat_interval_ms: AtomicU64,
    /// The coordinator's agent timeout, milliseconds; 0: unknown.
    agent_timeout_ms: AtomicU64,
    /// The first refusal for good.
    refused: watch::Sender<Option<Refusal>>,
}

impl Default for Terms {
    fn default() -> Terms {
        Terms {
            heartbeat_interval_ms: AtomicU64::new(0),
            agent_timeout_ms: AtomicU64::new(0),
            refused: watch::channel(None).0,
        }
    }
}

/// The longest heartbeat interval a coordinator may ask, milliseconds (its own bound): a larger
/// one is not a coordinator's, and the agent keeps its configured interval.
const MAX_HEARTBEAT_MS: u64 = 60_000;

impl Terms {
    /// Learns what an accepted registration says; a field of 0 (an older coordinator) or out of
    /// range leaves what the agent knew.
    fn learn(&self, answer: &pb::RegisterAgentResponse) {
        let (every, timeout) = (answer.heartbeat_interval_ms, answer.agent_timeout_ms);
        if (1..=MAX_HEARTBEAT_MS).contains(&every) {
            self.heartbeat_interval_ms.store(every, Ordering::Relaxed);
        }
        if timeout != 0 {
            self.agent_timeout_ms.store(timeout, Ordering::Relaxed);
        }
    }

    /// Notes a refusal if it is for good (the first one stands).
    fn refuse(&self, status: &tonic::Status) {
        if let Some(r) = refusal(status) {
            self.refused.send_if_modified(|held| {
                let first = held.is_none();
                if first {
                    tracing::error!(reason = %r, "the coordinator refused this agent for good; the agent stops");
                    *held = Some(r);
                }
                first
            });
        }
    }

    /// How often this agent is to heartbeat: at the interval the coordinator asked at its last
    /// registration, or, before one or from a coordinator that says none, at `configured_ms`.
    pub(crate) fn heartbeat_every(&self, configured_ms: u64) -> Duration {
        match self.heartbeat_interval_ms.load(Ordering::Relaxed) {
            0 => Duration::from_millis(configured_ms),
            ms => Duration::from_millis(ms),
        }
    }

    /// How long the coordinator lets an agent stay silent before it declares it dead, if it said.
    pub(crate) fn agent_timeout(&self) -> Option<Duration> {
        match self.agent_timeout_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Completes with the coordinator's refusal for good, once there is one.
    pub(crate) async fn refused(&self) -> Refusal {
        let mut rx = self.refused.subscribe();
        let held = rx.wait_for(Option::is_some).await.expect("the sender lives in self");
        held.clone().expect("waited for one")
    }

    /// The coordinator's refusal for good, if it refused this agent so.
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        self.refused.borrow().clone()
    }
}

/// The agent's client of the coordinator for its membership: the calls of the generated client
/// that register and leave, each answer read by [`Terms`].
#[derive(Clone, Debug)]
pub(crate) struct Coordinator {
    client: CoordClient,
    terms: Arc<Terms>,
}

impl Coordinator {
    pub(crate) fn new(client: CoordClient) -> Coordinator {
        Coordinator { client, terms: Arc::default() }
    }

    /// What the coordinator asks of this agent, and its refusal for good.
    pub(crate) fn terms(&self) -> &Terms {
        &self.terms
    }

    /// Registers; the answer is learned from, or its refusal classified ([`refusal`]).
    pub(crate) async fn register_agent(
        &mut self,
        req: pb::RegisterAgentRequest,
    ) -> Result<tonic::Response<pb::RegisterAgentResponse>, tonic::Status> {
        let answer = self.client.register_agent(req).await;
        match &answer {
            Ok(r) => self.terms.learn(r.get_ref()),
            Err(e) => self.terms.refuse(e),
        }
        answer
    }

    /// Opens the session a registration was given; a refusal is classified as a registration's.
    pub(crate) async fn agent_session(
        &mut self,
        outbound: impl tonic::IntoStreamingRequest<Message = pb::AgentBatch>,
    ) -> Result<tonic::Response<tonic::Streaming<pb::CoordinatorBatch>>, tonic::Status> {
        let answer = self.client.agent_session(outbound).await;
        if let Err(e) = &answer {
            self.terms.refuse(e);
        }
        answer
    }
}

/// Tells the coordinator this agent leaves; gives up after two seconds (it then times out).
/// An agent refused for good holds no registration to give up, and says nothing.
pub(crate) async fn deregister(coord: &Coordinator, machine_id: u32, session: u64) {
    if session == 0 || coord.terms().refusal().is_some() {
        return;
    }
    let req = pb::DeregisterAgentRequest { machine_id, session };
    let mut client = coord.client.clone();
    match tokio::time::timeout(Duration::from_secs(2), client.deregister_agent(req)).await {
        Ok(Ok(_)) => tracing::info!(machine = machine_id, "deregistered from the coordinator"),
        Ok(Err(e)) => tracing::warn!(status = %e.message(), "could not deregister from the coordinator"),
        Err(_) => tracing::warn!("the coordinator did not answer the deregistration within 2 s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of the module doc: superseded and an invalid registration (typed by the
    /// coordinator) are for good; no answer, a stopping coordinator, a machine live under
    /// another session, a wrong token and an untyped `INVALID_ARGUMENT` are retried.
    #[test]
    fn only_a_superseded_or_invalid_registration_is_refused_for_good() {
        let superseded = ErrorKind::PermissionDenied.status(tonic::Code::Aborted, "a later process holds machine 3");
        assert_eq!(refusal(&superseded), Some(Refusal::Superseded("a later process holds machine 3".into())));
        let dc = ErrorKind::Invalid.status(tonic::Code::InvalidArgument, "datacenter: \"z\" is not one of (a, b)");
        assert_eq!(refusal(&dc), Some(Refusal::Invalid("datacenter: \"z\" is not one of (a, b)".into())));
        let transient = [
            tonic::Status::unavailable("connection refused"),
            tonic::Status::deadline_exceeded("the coordinator did not answer the registration in time"),
            ErrorKind::ShuttingDown.status(tonic::Code::Unavailable, "the coordinator is shutting down"),
            coflow_proto::permission_denied("machine 3 is live under another session"),
            tonic::Status::unauthenticated("wrong cluster token"),
            tonic::Status::invalid_argument("not the coordinator's: no error kind"),
            ErrorKind::LimitExceeded.status(tonic::Code::ResourceExhausted, "too many connections"),
            tonic::Status::unimplemented("not a coordinator"),
        ];
        for s in transient {
            assert_eq!(refusal(&s), None, "{s:?}");
        }
    }

    /// The heartbeat interval and timeout a registration tells are learned; 0 (an older
    /// coordinator) or an interval out of range keeps what the agent knew, its configured
    /// interval before any; only the first refusal for good stands.
    #[test]
    fn terms_are_learned_from_registrations_and_fall_back_to_the_configuration() {
        let terms = Terms::default();
        assert_eq!((terms.heartbeat_every(100), terms.agent_timeout()), (Duration::from_millis(100), None));
        let told = |every, timeout| pb::RegisterAgentResponse {
            heartbeat_interval_ms: every,
            agent_timeout_ms: timeout,
            ..Default::default()
        };
        terms.learn(&told(0, 0));
        assert_eq!((terms.heartbeat_every(100), terms.agent_timeout()), (Duration::from_millis(100), None));
        terms.learn(&told(250, 5000));
        assert_eq!(
            (terms.heartbeat_every(100), terms.agent_timeout()),
            (Duration::from_millis(250), Some(Duration::from_secs(5)))
        );
        terms.learn(&told(0, 0));
        terms.learn(&told(MAX_HEARTBEAT_MS + 1, 0));
        assert_eq!(terms.heartbeat_every(100), Duration::from_millis(250), "kept from the last coordinator that said");
        assert_eq!(terms.refusal(), None);
        terms.refuse(&tonic::Status::unavailable("away"));
        assert_eq!(terms.refusal(), None, "transient");
        terms.refuse(&ErrorKind::Invalid.status(tonic::Code::InvalidArgument, "first"));
        terms.refuse(&tonic::Status::aborted("second"));
        assert_eq!(terms.refusal(), Some(Refusal::Invalid("first".into())));
    }

    /// A fresh directory for one test, and the guard that removes it when dropped.
    fn scratch(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let guard = tempfile::Builder::new().prefix(&format!("coflow-machine-id-{name}-")).tempdir().unwrap();
        let dir = guard.path().to_path_buf();
        (guard, dir)
    }

    /// A FIFO at `machine-id` is refused at once, naming the file: no read waits for a writer.
    #[test]
    fn a_fifo_is_refused_at_once() {
        let (_guard, dir) = scratch("fifo");
        let path = dir.join(MACHINE_ID_FILE);
        let d = std::fs::File::open(&dir).unwrap();
        rustix::fs::mknodat(
            &d,
            MACHINE_ID_FILE,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || tx.send(read(&p).map_err(|e| e.to_string())));
        let r = rx.recv_timeout(std::time::Duration::from_secs(2)).expect("reading a FIFO returns at once");
        let e = r.unwrap_err();
        assert!(e.contains(&path.display().to_string()) && e.contains("a FIFO, not a regular file"), "{e}");
        // Nor is a device read.
        let e = read(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("/dev/zero") && e.contains("a device"), "{e}");
    }

    /// A symlink at `machine-id` (the agent writes it as a regular file) is refused, naming it,
    /// and its target is not read.
    #[test]
    fn a_symlink_at_the_machine_id_is_refused() {
        let (_guard, dir) = scratch("linked");
        let (path, target) = (dir.join(MACHINE_ID_FILE), dir.join("elsewhere"));
        std::fs::write(&target, "5\n").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()) && e.contains("a symbolic link"), "{e}");
    }

    /// A file larger than any machine id is refused without being read whole, and a bad one is
    /// shown by a short prefix only.
    #[test]
    fn a_large_or_bad_file_is_refused_with_a_short_error() {
        let (_guard, dir) = scratch("large");
        let path = dir.join(MACHINE_ID_FILE);
        std::fs::write(&path, vec![b'7'; 5 << 20]).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()) && e.contains("larger than 64 bytes"), "{e}");
        assert!(e.len() < 200 + path.display().to_string().len(), "{e}");
        std::fs::write(&path, "x".repeat(60)).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains(&format!("{:?}...", "x".repeat(SHOWN_CHARS))) && e.contains("not a machine id"), "{e}");
        std::fs::write(&path, [0xff, 0xfe, b'1']).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("not a machine id"), "{e}");
    }

    /// A symlink planted at the temporary file is not followed: its target stays as it was, and
    /// the id is not written through it. A stale regular temporary file is replaced.
    #[test]
    fn a_symlink_at_the_temporary_file_is_not_followed() {
        let (_guard, dir) = scratch("symlink");
        let path = dir.join(MACHINE_ID_FILE);
        let target = dir.join("outside");
        std::fs::write(&target, b"precious").unwrap();
        let tmp = path.with_extension("tmp");
        std::os::unix::fs::symlink(&target, &tmp).unwrap();
        let e = write(&path, 5).unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&tmp).unwrap().file_type().is_symlink());
        assert_eq!(read(&path).unwrap(), None);
        // A dangling link, to where a file would be created, is not followed either.
        std::fs::remove_file(&tmp).unwrap();
        let nowhere = dir.join("nowhere");
        std::os::unix::fs::symlink(&nowhere, &tmp).unwrap();
        assert!(write(&path, 5).is_err());
        assert!(!nowhere.exists());
        std::fs::remove_file(&tmp).unwrap();
        // A stale regular temporary file (a write cut short) is replaced.
        std::fs::write(&tmp, b"").unwrap();
        write(&path, 5).unwrap();
        assert_eq!(read(&path).unwrap(), Some(5));
        assert!(!tmp.exists());
    }

    /// A directory one agent holds is refused to a second, with an error naming it, and is free
    /// again once the first lets go; a missing directory is created.
    #[test]
    fn a_data_directory_is_held_by_one_agent() {
        let (_guard, base) = scratch("held");
        let dir = base.join("data");
        let first = hold_data_dir(&dir).expect("a missing directory is created and held");
        let e = hold_data_dir(&dir).unwrap_err();
        assert!(matches!(e, RunError::DataDir(_)), "{e:?}");
        let e = e.to_string();
        assert!(e.contains(&dir.display().to_string()) && e.contains("held by another agent"), "{e}");
        drop(first);
        let again = hold_data_dir(&dir).expect("free again once the first agent let go");
        drop(again);
    }

    #[test]
    fn a_kept_id_reads_back_and_garbage_is_an_error() {
        let (_guard, dir) = scratch("kept");
        let path = dir.join(MACHINE_ID_FILE);
        assert_eq!(read(&path).unwrap(), None);
        write(&path, 17).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "17\n");
        assert_eq!(read(&path).unwrap(), Some(17));
        std::fs::write(&path, "seventeen").unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("not a machine id") && e.contains("seventeen"), "{e}");
    }
}
