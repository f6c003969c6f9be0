//! `coflow certs`: make a cluster CA and its members' certificates (the logic is
//! `coflow_proto::certs`; this parses and prints).

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use coflow_proto::certs::{self, Subject};

/// `coflow certs init | issue`.
#[derive(Debug, Subcommand)]
pub(crate) enum CertsCommand {
    /// Make a new cluster CA: DIR/ca.crt and DIR/ca.key (keep ca.key off the cluster's machines).
    Init {
        /// The certificates' directory.
        dir: PathBuf,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Issue a certificate signed by DIR's CA: DIR/coordinator.{crt,key}, DIR/agent-N.{crt,key},
    /// DIR/client-NAME.{crt,key} or DIR/admin.{crt,key}.
    Issue(IssueArgs),
}

/// Options of `coflow certs issue`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("whom").required(true).args(["coordinator", "agent", "client", "admin"])))]
pub(crate) struct IssueArgs {
    /// The certificates' directory (holding ca.crt and ca.key).
    dir: PathBuf,
    /// For the coordinator, reached at HOST (IP or DNS name; several comma-separated).
    #[arg(long, value_name = "HOST")]
    coordinator: Option<String>,
    /// For the agent of machine N (with --host).
    #[arg(long, value_name = "N", requires = "host")]
    agent: Option<u32>,
    /// The agent's host (IP or DNS name; several comma-separated), as clients reach its gRPC
    /// listener.
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// For a client named NAME (letters, digits, '.', '_', '-').
    #[arg(long, value_name = "NAME")]
    client: Option<String>,
    /// For the operator (role coflow://admin): a client that may unregister or seal any coflow.
    #[arg(long)]
    admin: bool,
    /// Overwrite existing files.
    #[arg(long)]
    force: bool,
}

fn hosts(list: &str) -> Vec<String> {
    list.split(',').map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).collect()
}

pub(crate) fn run(cmd: CertsCommand) -> Result<()> {
    let written = match cmd {
        CertsCommand::Init { dir, force } => certs::init(&dir, force)?,
        CertsCommand::Issue(a) => {
            if a.host.is_some() && a.agent.is_none() {
                bail!("--host goes with --agent (the coordinator's host is --coordinator HOST)");
            }
            let subject = match (a.coordinator, a.agent, a.client, a.admin) {
                (Some(h), None, None, false) => Subject::Coordinator { hosts: hosts(&h) },
                (None, Some(machine), None, false) => {
                    // An agent presenting it would be refused at registration.
                    let limit = coflow_proto::MACHINE_ID_LIMIT;
                    if machine >= limit {
                        bail!("--agent {machine}: must be below {limit}, as every machine id is");
                    }
                    Subject::Agent { machine, hosts: hosts(a.host.as_deref().unwrap_or_default()) }
                }
                (None, None, Some(name), false) => Subject::Client { name },
                (None, None, None, true) => Subject::Admin,
                _ => bail!("give one of --coordinator, --agent, --client, --admin"),
            };
            let written = certs::issue(&a.dir, &subject, a.force)?;
            crate::output::say!(&[], "issued {}", subject.role());
            written
        }
    };
    for p in written {
        crate::output::say!(&[], "wrote {}", p.display());
    }
    Ok(())
}
