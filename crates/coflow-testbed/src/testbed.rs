//! One testbed: its network, its processes and its state file, torn down when dropped (unless
//! kept); and a replay of a workload on it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use coflow_core::Workload;

use crate::TestbedError;
use crate::client::{Op, Outcome};
use crate::net::{self, Names};
use crate::procs::{Cluster, ServiceConfig};
use crate::state::StateFile;
use crate::topology::Topology;
use crate::workload::{data_id, piece_seed};

/// A testbed that is up.
#[derive(Debug)]
pub struct Testbed {
    /// Its names.
    pub names: Names,
    /// Its record.
    pub state: StateFile,
    /// Its topology.
    pub topology: Topology,
    cluster: Option<Cluster>,
    run_dir: PathBuf,
    keep: bool,
}

/// One get of a replay.
#[derive(Clone, Debug)]
pub struct GetRecord {
    /// The coflow's index in the workload.
    pub coflow: usize,
    /// The sending host.
    pub src: usize,
    /// The receiving host (where the get was issued).
    pub dst: usize,
    /// The piece's size.
    pub size: u64,
    /// When it was issued.
    pub issued: Instant,
    /// How it ended; `Hung` also when its client never answered.
    pub outcome: Outcome,
    /// When its reply came.
    pub end: Option<Instant>,
    /// Bytes delivered.
    pub bytes: u64,
    /// Bytes delivered wrong by a get that ended with success.
    pub corrupted: u64,
    /// Seconds from the get's arrival at its client to its first verified bytes there.
    pub first_byte_s: Option<f64>,
    /// Seconds from the get's arrival at its client to its end there.
    pub last_byte_s: Option<f64>,
}

/// What a replay measured.
#[derive(Debug)]
pub struct Replayed {
    /// When the clock started (the first coflow's arrival).
    pub t0: Instant,
    /// Each coflow's scheduled arrival.
    pub starts: Vec<Instant>,
    /// Every get.
    pub gets: Vec<GetRecord>,
    /// Samples of the links' byte counters (per host: sent by it, sent to it).
    pub samples: Vec<(Instant, Vec<(u64, u64)>)>,
}

impl Replayed {
    /// Each coflow's CCT in seconds (its scheduled arrival to its last byte), `None` unless every
    /// get ended with exact bytes.
    pub fn ccts(&self) -> Vec<Option<f64>> {
        let mut out: Vec<Option<f64>> = self.starts.iter().map(|_| Some(0.0)).collect();
        for g in &self.gets {
            let slot = &mut out[g.coflow];
            match (g.outcome == Outcome::Ok, g.end, *slot) {
                (true, Some(end), Some(c)) => {
                    *slot = Some(c.max(end.duration_since(self.starts[g.coflow]).as_secs_f64()));
                }
                _ => *slot = None,
            }
        }
        out
    }
}

impl Testbed {
    /// Builds a testbed for `topology` running `svc`, with the `coflow` binary `exe`.
    pub fn up(topology: &Topology, exe: &Path, svc: &ServiceConfig) -> Result<Testbed, TestbedError> {
        let dc_of = if topology.wan.is_some() { topology.dc_of() } else { Vec::new() };
        let names = Names { dc_of, ..Names::fresh() };
        let run_dir = std::env::temp_dir().join("coflow-testbed").join(&names.prefix);
        std::fs::create_dir_all(&run_dir).map_err(|e| TestbedError::io(&run_dir, e))?;
        let state = StateFile::create(&names.prefix, &run_dir)?;
        let mut tb =
            Testbed { names, state, topology: topology.clone(), cluster: None, run_dir: run_dir.clone(), keep: false };
        match &topology.wan {
            Some(dcs) => crate::wide_area::up(topology, dcs, &tb.names, &tb.state)?,
            None => net::up(topology, &tb.names, &tb.state)?,
        }
        tb.cluster = Some(Cluster::start(exe, &tb.names, topology, &tb.state, &run_dir, svc)?);
        Ok(tb)
    }

    /// The processes.
    pub fn cluster(&self) -> &Cluster {
        self.cluster.as_ref().expect("a testbed that is up has its processes")
    }

    /// Where logs and data directories are.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Leaves the testbed up when dropped; `coflow testbed down` removes it.
    pub fn keep(&mut self) {
        self.keep = true;
        self.state.keep();
    }

    /// The coordinator's count of policy decisions since it started.
    pub fn decisions(&self) -> Result<u64, TestbedError> {
        self.status(Op::Decisions).map(|r| r.value)
    }

    /// The coordinator's wide-area counters: bytes it sent through relays and flows rerouted.
    pub fn relayed(&self) -> Result<(u64, u64), TestbedError> {
        self.status(Op::Relayed).map(|r| (r.value, r.bytes))
    }

    /// Asks host 0's client for a reading of the coordinator's status.
    fn status(&self, op: Op) -> Result<crate::client::Reply, TestbedError> {
        let r = self.cluster().hub.ask(0, op, Duration::from_secs(10))?;
        if r.outcome != crate::client::Outcome::Ok {
            return Err(TestbedError::Setup(format!("the coordinator's status: {}", r.message)));
        }
        Ok(r)
    }

    /// The map stage: registers every coflow (from host 0) and puts every piece on its mapper's
    /// host; returns the coflows' ids.
    pub fn prepare(&self, w: &Workload) -> Result<Vec<u64>, TestbedError> {
        let hub = &self.cluster().hub;
        let regs = w
            .coflows
            .iter()
            .map(|c| (0, Op::Register { num_flows: c.flows.len() as u32, name: format!("coflow-{}", c.id) }))
            .collect();
        let ids: Vec<u64> = hub.ask_all(regs, Duration::from_secs(60))?.iter().map(|r| r.value).collect();
        let mut puts = Vec::new();
        for (k, c) in w.coflows.iter().enumerate() {
            for (i, f) in c.flows.iter().enumerate() {
                let op = Op::Put { coflow: ids[k], data_id: data_id(i), size: f.size.get(), seed: piece_seed(k, i) };
                puts.push((f.src.index(), op));
            }
        }
        hub.ask_all(puts, Duration::from_secs(300))?;
        Ok(ids)
    }

    /// Replays the workload: each coflow's gets are issued on its reducers' hosts at its arrival
    /// (relative to the first), each bounded by `bound`; the links' counters are sampled every
    /// 200 ms meanwhile. `during` runs on its own thread from the start of the clock (faults are
    /// injected there) and its result is returned too.
    pub fn replay<R: Send>(
        &self,
        w: &Workload,
        ids: &[u64],
        bound: Duration,
        during: impl FnOnce(Instant) -> R + Send,
    ) -> Result<(Replayed, R), TestbedError> {
        let hub = &self.cluster().hub;
        let first = w.coflows.first().map_or(coflow_core::Nanos::ZERO, |c| c.arrival);
        let t0 = Instant::now() + Duration::from_millis(200);
        let starts: Vec<Instant> =
            w.coflows.iter().map(|c| t0 + Duration::from_nanos((c.arrival - first).get())).collect();
        let mut plan = Vec::new();
        for (k, c) in w.coflows.iter().enumerate() {
            for f in &c.flows {
                plan.push(GetRecord {
                    coflow: k,
                    src: f.src.index(),
                    dst: f.dst.index(),
                    size: f.size.get(),
                    issued: starts[k],
                    outcome: Outcome::Hung,
                    end: None,
                    bytes: 0,
                    corrupted: 0,
                    first_byte_s: None,
                    last_byte_s: None,
                });
            }
        }
        let (tx, rx) = channel();
        let stop = AtomicBool::new(false);
        let last_start = starts.iter().copied().max().unwrap_or(t0);
        // Every get ends within its bound after its issue; a client that never answers counts
        // as hung after a grace period.
        let deadline = last_start + bound + Duration::from_secs(10);
        let names = &self.names;
        let hosts = self.topology.hosts.len();
        let (gets, samples, r) = std::thread::scope(|s| {
            let sampler = s.spawn(|| {
                let mut samples = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(b) = net::link_bytes(names, hosts) {
                        samples.push((Instant::now(), b));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                samples
            });
            let during = s.spawn(move || during(t0));
            let sender = s.spawn(|| {
                let mut issued: Vec<(usize, u64, Instant)> = Vec::new();
                let mut idx = 0;
                for (k, c) in w.coflows.iter().enumerate() {
                    std::thread::sleep(starts[k].saturating_duration_since(Instant::now()));
                    for (i, f) in c.flows.iter().enumerate() {
                        let op = Op::Get {
                            coflow: ids[k],
                            data_id: data_id(i),
                            size: f.size.get(),
                            seed: piece_seed(k, i),
                            timeout_ms: bound.as_millis() as u64,
                        };
                        let at = Instant::now();
                        if let Ok(id) = hub.send(f.dst.index(), op, &tx) {
                            issued.push((idx, id, at));
                        }
                        idx += 1;
                    }
                }
                drop(tx);
                issued
            });
            let mut replies = std::collections::HashMap::new();
            while Instant::now() < deadline {
                match rx.recv_timeout(Duration::from_millis(200)) {
                    Ok(a) => {
                        replies.insert(a.reply.id, a);
                        if replies.len() == plan.len() {
                            break;
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            let issued = sender.join().expect("sender thread");
            let r = during.join().expect("fault thread");
            stop.store(true, Ordering::Relaxed);
            let samples = sampler.join().expect("sampler thread");
            let mut gets = plan.clone();
            for (idx, id, at) in issued {
                gets[idx].issued = at;
                if let Some(a) = replies.remove(&id) {
                    gets[idx].outcome = a.reply.outcome;
                    gets[idx].end = Some(a.at);
                    gets[idx].bytes = a.reply.bytes;
                    gets[idx].corrupted = a.reply.corrupted;
                    gets[idx].first_byte_s = a.reply.first_byte_s;
                    gets[idx].last_byte_s = Some(a.reply.elapsed_s);
                }
            }
            (gets, samples, r)
        });
        Ok((Replayed { t0, starts, gets, samples }, r))
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.keep || crate::state::interrupted() {
            // Kept, or the signal handler is tearing it down.
            return;
        }
        if let Some(c) = self.cluster.take() {
            c.stop();
        }
        self.state.teardown();
    }
}
