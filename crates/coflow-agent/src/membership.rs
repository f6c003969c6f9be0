//! Which machine this agent is, and leaving the cluster.
//!
//! The machine id is, in order: the one the agent's certificate names (TLS; a configured id
//! must agree with it), the configured one, the one kept in `data_dir/machine-id` from an earlier
//! start, or one the coordinator assigns (`AssignMachine`, asked every 500 ms until it answers),
//! which is then kept there. So an agent never becomes machine 0 for want of a flag, and an agent
//! restarted on the same data directory is the same machine.
//! At a clean stop the agent deregisters, so its flows fail at once rather than at its timeout.

use std::path::Path;
use std::time::Duration;

use coflow_proto::{Role, Security, pb};

use crate::RunError;
use crate::config::AgentConfig;
use crate::state::CoordClient;

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
            None => assign(&mut coord).await,
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

/// Asks the coordinator until it answers.
async fn assign(coord: &mut CoordClient) -> u32 {
    let host = host_name();
    loop {
        match coord.assign_machine(pb::AssignMachineRequest { host: host.clone() }).await {
            Ok(r) => {
                let id = r.into_inner().machine_id;
                tracing::info!(machine = id, host, "machine id assigned by the coordinator");
                return id;
            }
            Err(e) => {
                tracing::info!(status = %e.message(), "waiting for the coordinator to assign a machine id");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

fn read(path: &Path) -> Result<Option<u32>, RunError> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| RunError::Machine(format!("{} holds {:?}, not a machine id", path.display(), text.trim()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RunError::Machine(format!("reading {}: {e}", path.display()))),
    }
}

/// Writes the id whole or not at all (a temporary file renamed over the old one).
fn write(path: &Path, id: u32) -> Result<(), RunError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{id}\n"))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| RunError::Machine(format!("keeping the machine id in {}: {e}", path.display())))
}

/// Tells the coordinator this agent leaves; gives up after two seconds (it then times out).
pub(crate) async fn deregister(coord: &mut CoordClient, machine_id: u32, session: u64) {
    if session == 0 {
        return;
    }
    let req = pb::DeregisterAgentRequest { machine_id, session };
    match tokio::time::timeout(Duration::from_secs(2), coord.deregister_agent(req)).await {
        Ok(Ok(_)) => tracing::info!(machine = machine_id, "deregistered from the coordinator"),
        Ok(Err(e)) => tracing::warn!(status = %e.message(), "could not deregister from the coordinator"),
        Err(_) => tracing::warn!("the coordinator did not answer the deregistration within 2 s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_id_reads_back_and_garbage_is_an_error() {
        let dir = std::env::temp_dir().join(format!("coflow-machine-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(MACHINE_ID_FILE);
        assert_eq!(read(&path).unwrap(), None);
        write(&path, 17).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "17\n");
        assert_eq!(read(&path).unwrap(), Some(17));
        std::fs::write(&path, "seventeen").unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("not a machine id") && e.contains("seventeen"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
