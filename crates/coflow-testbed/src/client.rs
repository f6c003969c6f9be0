//! The client that runs inside a host's namespace (`coflow testbed client`, started with
//! `ip netns exec`), so that the bytes it reads from its local agent never cross the host's
//! shaped link a second time. It reads requests as JSON lines on stdin, runs each at once, and
//! writes a reply line per request on stdout, in completion order.

use std::time::{Duration, Instant};

use coflow_client::{Client, ClientConfig, ClusterToken, CoflowOptions};
use coflow_core::CoflowId;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};

use crate::workload::{Checker, piece};

/// One request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    /// Echoed in the reply.
    pub id: u64,
    /// What to do.
    pub op: Op,
}

/// What a client does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Op {
    /// Register a coflow of `num_flows` pieces.
    Register {
        /// Pieces.
        num_flows: u32,
        /// Its name.
        name: String,
    },
    /// Put piece `data_id` of `size` bytes, content from `seed`.
    Put {
        /// The coflow.
        coflow: u64,
        /// The piece.
        data_id: String,
        /// Its size.
        size: u64,
        /// Its content's seed.
        seed: u64,
    },
    /// Get a piece and check every byte against the content of `seed`, giving up after
    /// `timeout_ms` (then the reply says `Hung`).
    Get {
        /// The coflow.
        coflow: u64,
        /// The piece.
        data_id: String,
        /// Its size.
        size: u64,
        /// Its content's seed.
        seed: u64,
        /// The bound on the get.
        timeout_ms: u64,
    },
    /// Unregister a coflow.
    Unregister {
        /// The coflow.
        coflow: u64,
    },
    /// Count the agents the coordinator knows alive.
    Agents,
    /// The coordinator's wide-area counters: bytes relayed through a third datacenter (the
    /// reply's `value`) and flows rerouted (its `bytes`).
    Relayed,
    /// The coordinator's count of policy decisions (the reply's `value`).
    Decisions,
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Done; for a get, every byte as put.
    Ok,
    /// A get ended with success but bytes differ from what was put.
    Corrupted,
    /// Failed with an error of this kind (the `ClientError` variant).
    Failed(String),
    /// Did not end within its bound.
    Hung,
}

/// One reply.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    /// The request's id.
    pub id: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// A registered coflow's id, the number of live agents, or the bytes relayed.
    pub value: u64,
    /// Bytes a get delivered, or the flows rerouted.
    pub bytes: u64,
    /// Bytes a get delivered wrong (or missing) although it ended with success.
    pub corrupted: u64,
    /// The error's text.
    pub message: String,
    /// Seconds from the request's arrival to its end (for a get, its last byte at the client).
    pub elapsed_s: f64,
    /// For a get: seconds from the request's arrival to its first verified bytes at the client.
    #[serde(default)]
    pub first_byte_s: Option<f64>,
}

impl Reply {
    /// The reply to request `id` that failed with error `kind`, saying `message`.
    pub fn failed(id: u64, kind: &str, message: String) -> Reply {
        Reply {
            id,
            outcome: Outcome::Failed(kind.to_string()),
            value: 0,
            bytes: 0,
            corrupted: 0,
            message,
            elapsed_s: 0.0,
            first_byte_s: None,
        }
    }
}

/// The kind of a client error: its variant's name.
fn kind(e: &coflow_client::ClientError) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("Other").to_string()
}

/// What a request came to: its outcome, a value, bytes delivered, bytes wrong, the error's text
/// and, for a get, when its first bytes came.
type Handled = (Outcome, u64, u64, u64, String, Option<Duration>);

async fn handle(client: &Client, op: Op) -> Handled {
    let fail = |e: coflow_client::ClientError| (Outcome::Failed(kind(&e)), 0, 0, 0, e.to_string(), None);
    match op {
        Op::Register { num_flows, name } => {
            match client.register(num_flows, CoflowOptions { name, ..Default::default() }).await {
                Ok(id) => (Outcome::Ok, id.0, 0, 0, String::new(), None),
                Err(e) => fail(e),
            }
        }
        Op::Put { coflow, data_id, size, seed } => {
            match client.put(CoflowId(coflow), &data_id, piece(seed, size as usize)).await {
                Ok(_) => (Outcome::Ok, 0, 0, 0, String::new(), None),
                Err(e) => fail(e),
            }
        }
        Op::Get { coflow, data_id, size, seed, timeout_ms } => {
            let mut check = Checker::new(seed);
            let (asked, mut first) = (Instant::now(), None);
            let got = tokio::time::timeout(
                Duration::from_millis(timeout_ms),
                client.get_with(CoflowId(coflow), &data_id, |b| {
                    first.get_or_insert_with(|| asked.elapsed());
                    check.update(b)
                }),
            )
            .await;
            match got {
                Err(_) => (Outcome::Hung, 0, check.seen, 0, format!("no end within {timeout_ms} ms"), first),
                Ok(Err(e)) => (Outcome::Failed(kind(&e)), 0, check.seen, 0, e.to_string(), first),
                Ok(Ok(_)) => {
                    let bad = check.corrupted(size);
                    let o = if bad == 0 { Outcome::Ok } else { Outcome::Corrupted };
                    (o, 0, check.seen, bad, String::new(), first)
                }
            }
        }
        Op::Unregister { coflow } => match client.unregister(CoflowId(coflow)).await {
            Ok(()) => (Outcome::Ok, 0, 0, 0, String::new(), None),
            Err(e) => fail(e),
        },
        Op::Agents => match client.status().await {
            Ok(st) => (Outcome::Ok, st.agents.iter().filter(|a| a.alive).count() as u64, 0, 0, String::new(), None),
            Err(e) => fail(e),
        },
        Op::Relayed => match client.status_page(0, 1).await {
            Ok(st) => (Outcome::Ok, st.bytes_relayed, st.flows_rerouted, 0, String::new(), None),
            Err(e) => fail(e),
        },
        Op::Decisions => match client.status_page(0, 1).await {
            Ok(st) => (Outcome::Ok, st.decisions, 0, 0, String::new(), None),
            Err(e) => fail(e),
        },
    }
}

/// Serves requests from stdin until it closes.
pub fn serve(coordinator: &str, agent: &str, token: ClusterToken) -> Result<(), crate::TestbedError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| crate::TestbedError::Setup(format!("tokio runtime: {e}")))?;
    let cfg = ClientConfig::new(coordinator, agent, token);
    // Lines in and out on threads of their own (stdin and stdout are blocking).
    let (line_tx, mut line_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let (tx, rx) = std::sync::mpsc::channel::<Reply>();
    let writer = std::thread::spawn(move || {
        let mut out = std::io::stdout().lock();
        for r in rx {
            let line = serde_json::to_string(&r).expect("serializable");
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                break;
            }
        }
    });
    let served = rt.block_on(async move {
        let client = Client::connect(cfg).await.map_err(|e| crate::TestbedError::Setup(format!("client: {e}")))?;
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                line = line_rx.recv() => {
                    let Some(line) = line else { break };
                    let req: Request = match serde_json::from_str(&line) {
                        Ok(r) => r,
                        Err(e) => {
                            eprintln!("bad request line: {e}");
                            continue;
                        }
                    };
                    let (client, tx) = (client.clone(), tx.clone());
                    tasks.spawn(async move {
                        let t = Instant::now();
                        let (outcome, value, bytes, corrupted, message, first) = handle(&client, req.op).await;
                        let elapsed_s = t.elapsed().as_secs_f64();
                        let first_byte_s = first.map(|d| d.as_secs_f64());
                        let _ = tx.send(Reply { id: req.id, outcome, value, bytes, corrupted, message, elapsed_s, first_byte_s });
                    });
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        tasks.shutdown().await;
        Ok(())
    });
    let _ = writer.join();
    // The reader ends with stdin, which has closed when the loop above ended.
    let _ = reader.join();
    served
}
