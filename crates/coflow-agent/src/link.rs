//! The agent's link to the coordinator: registers, then keeps one session stream on which it
//! sends its announcements (a piece stored, a piece wanted), flow ends and heartbeats, and
//! receives the answers, its flows' rates and notices. Registers again whenever the session ends
//! (the coordinator restarted, or forgot this agent); then re-announces the pieces it holds (with
//! their coflows' registrations) and the flows it is still receiving, so that a restarted
//! coordinator schedules them again under their ids. Coflows the coordinator says are gone are
//! forgotten.
//! What the rest of the agent sends goes through the session's [`crate::session::Link`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use coflow_core::{CoflowId, FlowId};
use coflow_proto::pb::agent_message::Body;
use coflow_proto::{ErrorKind, pb};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::retry::Retries;
use crate::session::Batches;
use crate::state::{Shared, Stop};

/// How long the agent waits for an answer to a re-announcement.
const REANNOUNCE_DEADLINE: Duration = Duration::from_secs(10);

/// How long the agent waits for its registration and its session to open: a coordinator that
/// accepts the connection but does not answer (its process is paused) is tried again.
const REGISTER_DEADLINE: Duration = Duration::from_secs(5);

pub(crate) async fn run(shared: Arc<Shared>, data_addr: String, mut shutdown: watch::Receiver<bool>) {
    let every = Duration::from_millis(shared.config.heartbeat_interval_ms);
    let mut coord = shared.coordinator.clone();
    let machine_id = shared.config.machine_id();
    // When this process started: of two processes claiming one machine, the later one wins.
    let incarnation =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_micros() as u64);
    // Registrations failed in a row (another kind of failure, such as a refusal after a
    // connection error, is warned of at once).
    let mut retries = Retries::new(every, machine_id);
    // The flow key of the last session opened: another one means another coordinator (each
    // draws its keys at start), which knows none of the flows the previous one granted.
    let mut last_key = None::<Vec<u8>>;
    loop {
        let reg = pb::RegisterAgentRequest {
            machine_id,
            data_addr: data_addr.clone(),
            port_rate_bps: shared.config.port_rate_bps,
            session: shared.session(),
            incarnation,
            datacenter: shared.config.datacenter.clone().unwrap_or_default(),
        };
        let mut key = None;
        let registered = async {
            let answer = coord.register_agent(reg).await?.into_inner();
            let session = answer.session;
            key = Some(answer.flow_key.clone());
            shared.fetches_per_peer.store(answer.fetches_per_peer, Ordering::Relaxed);
            match coflow_proto::ticket::FlowKey::new(&answer.flow_key) {
                Some(key) => shared.flow_keys.learn(key),
                None => tracing::warn!("the coordinator sent no flow key: this agent can serve no flow"),
            }
            shared.session.store(session, Ordering::Relaxed);
            let open = pb::AgentBatch { machine_id, session, messages: Vec::new() };
            let outbound = Batches::new(open, shared.link.open());
            coord.agent_session(outbound).await
        };
        let registered = async {
            tokio::time::timeout(REGISTER_DEADLINE, registered).await.unwrap_or_else(|_| {
                Err(tonic::Status::unavailable("the coordinator did not answer the registration in time"))
            })
        };
        let mut stream = match registered.await {
            Ok(s) => s.into_inner(),
            Err(_) if shared.coordinator.terms().refusal().is_some() => {
                // Refused for good (a process that started later holds this machine, or the
                // registration itself is wrong), as the membership logged: the agent stops.
                shared.link.close();
                shared.link_lost();
                return;
            }
            Err(e) => {
                shared.link.close();
                let wait = retries.failed();
                let failures = retries.failures();
                if retries.warn_due(e.code(), Instant::now()) {
                    tracing::warn!(status = %e.message(), failures, "cannot register with the coordinator; retrying");
                } else {
                    tracing::debug!(status = %e.message(), failures, "cannot register with the coordinator; retrying");
                }
                shared.link_lost();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        retries.reset();
        let epoch = shared.link_epoch.fetch_add(1, Ordering::SeqCst) + 1;
        *shared.link_down_since.lock().expect("link lock") = None;
        // Heartbeats go at the interval the coordinator asked, if it said one.
        let terms = shared.coordinator.terms();
        let (every, timeout) = (terms.heartbeat_every(shared.config.heartbeat_interval_ms), terms.agent_timeout());
        tracing::info!(machine = machine_id, heartbeat = ?every, agent_timeout = ?timeout, "registered with the coordinator");
        // The coordinator's state is soft: after a restart it learns again what this agent holds.
        // Re-announcements wait for answers that come on this very session, so they run beside
        // the loop that reads it; they end with it.
        let mut recovery = JoinSet::new();
        for (coflow, data_id, size, reg, sealed) in shared.store.list() {
            let shared = shared.clone();
            recovery.spawn(async move {
                let ann = pb::AnnouncePutRequest {
                    coflow_id: coflow.0,
                    data_id: data_id.as_str().to_string(),
                    machine_id,
                    size,
                    recovered: true,
                    registration: reg.as_ref().map(Into::into),
                    client: String::new(),
                    sealed,
                };
                if let Err(e) = shared.link.call(Body::Put(ann), REANNOUNCE_DEADLINE).await {
                    if ErrorKind::of(&e) == Some(ErrorKind::UnknownCoflow) {
                        // Unregistered while this agent was not listening: forget it now, and end
                        // the gets of it this agent receives, as the drop notice would have.
                        let (n, gets) = shared.drop_coflow(coflow);
                        tracing::info!(%coflow, pieces = n, gets, "coflow unregistered; pieces dropped, gets ended");
                    } else {
                        tracing::warn!(%coflow, %data_id, status = %e.message(), "could not re-announce a piece");
                    }
                }
            });
        }
        if last_key.is_some() && key != last_key {
            resume_parts(&shared, epoch);
        }
        last_key = key;
        recover_flows(&shared, epoch, &mut recovery);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut last_tx, mut last_rx, mut last_at) =
            (shared.tx_bytes.load(Ordering::Relaxed), shared.rx_bytes.load(Ordering::Relaxed), Instant::now());
        loop {
            tokio::select! {
                msg = stream.message() => match msg {
                    Ok(Some(batch)) => {
                        for r in batch.replies {
                            shared.link.answer(r);
                        }
                        if let Some(update) = batch.update {
                            apply(&shared, update);
                        }
                    }
                    _ => {
                        tracing::warn!("the session with the coordinator ended; registering again");
                        break;
                    }
                },
                _ = tick.tick() => {
                    let (tx, rx, now) =
                        (shared.tx_bytes.load(Ordering::Relaxed), shared.rx_bytes.load(Ordering::Relaxed), Instant::now());
                    let dt = now.duration_since(last_at).as_secs_f64().max(1e-3);
                    let flows = shared
                        .sending
                        .lock()
                        .expect("sending lock")
                        .iter()
                        .map(|(f, p)| pb::FlowProgress { flow_id: f.0, bytes_sent: p.load(Ordering::Relaxed) })
                        .collect();
                    let hb = pb::HeartbeatRequest {
                        machine_id,
                        flows,
                        tx_bps: (tx - last_tx) as f64 / dt,
                        rx_bps: (rx - last_rx) as f64 / dt,
                        unread_flow_ids: shared.unread.flows(now),
                    };
                    (last_tx, last_rx, last_at) = (tx, rx, now);
                    shared.rates.collect_garbage();
                    shared.link.tell(Body::Heartbeat(hb));
                    if recovery.is_empty() {
                        recover_flows(&shared, epoch, &mut recovery);
                    }
                }
                Some(_) = recovery.join_next(), if !recovery.is_empty() => {}
                // A get's client began to hold it back: the coordinator hears of it now rather
                // than a heartbeat interval later, but no sooner than a quarter interval (at most
                // 50 ms) after the previous heartbeat, however many gets' clients begin to.
                _ = shared.unread.changed.notified() => {
                    let gap = (every / 4).min(Duration::from_millis(50));
                    tick.reset_at(tokio::time::Instant::from_std(last_at + gap));
                }
                _ = shutdown.changed() => {
                    shared.link.close();
                    return;
                }
            }
        }
        shared.link.close();
        shared.link_lost();
    }
}

/// Applies what the coordinator pushed: rates of the flows this agent sends, flows it receives
/// that failed or lost their path, coflows dropped, and coflows sealed.
fn apply(shared: &Shared, update: pb::RateUpdate) {
    for r in update.rates {
        // Infinite: not paced (a flow the coordinator serves outside its policy).
        let rate = if r.rate_bps >= 0.0 { r.rate_bps } else { 0.0 };
        tracing::debug!(target: "coflow::path", flow = r.flow_id, rate, "rate");
        shared.rates.set(FlowId(r.flow_id), rate);
    }
    for f in update.failed_flows {
        shared.stop_flow(FlowId(f), Stop::Fail("the coordinator declared it dead".into()));
    }
    for f in update.reroute_flows {
        shared.stop_flow(FlowId(f), Stop::Reroute);
    }
    for c in update.dropped_coflows {
        let (n, gets) = shared.drop_coflow(CoflowId(c));
        tracing::debug!(coflow = c, pieces = n, gets, "coflow unregistered; pieces dropped, gets ended");
    }
    for c in update.sealed_coflows {
        shared.store.seal(CoflowId(c));
    }
}

/// Cuts, once registered (registration `epoch`) with a coordinator that restarted, the parts of
/// gets this agent receives that a previous coordinator granted (a range of a piece, or relayed),
/// which cannot be re-announced: the new coordinator would never give them a rate, and one
/// waiting at rate 0 would wait for good. Each part's receiver resumes its rest with the new
/// coordinator, naming where the part ends, which it grants inside its restart window (see
/// [`crate::receive`]). Parts of an unregistered coflow are left alone: they stopped with it.
fn resume_parts(shared: &Shared, epoch: u64) {
    let receiving = shared.receiving.lock().expect("receiving lock");
    let parts = receiving.iter().filter(|(_, r)| {
        !r.recoverable && r.epoch < epoch && r.stop.borrow().is_none() && !shared.store.is_dropped(r.coflow)
    });
    for (flow, r) in parts {
        tracing::info!(%flow, "a part granted by a previous coordinator; resuming it with this one");
        r.stop.send_replace(Some(Stop::Reroute));
    }
}

/// Re-announces, beside the session's loop, the flows this agent receives that the current
/// coordinator (registration `epoch`) does not know yet; those it refuses for good end. Flows of
/// an unregistered coflow are not re-announced (they would bring it back): they stopped with it.
fn recover_flows(shared: &Arc<Shared>, epoch: u64, tasks: &mut JoinSet<()>) {
    let stale: Vec<(FlowId, pb::AnnounceGetRequest)> = shared
        .receiving
        .lock()
        .expect("receiving lock")
        .iter()
        .filter(|(_, r)| r.recoverable && r.epoch < epoch && !shared.store.is_dropped(r.coflow))
        .map(|(&f, r)| {
            let req = pb::AnnounceGetRequest {
                coflow_id: r.coflow.0,
                data_id: r.data_id.as_str().to_string(),
                machine_id: shared.config.machine_id(),
                recovered_flow_id: f.0,
                recovered_src_machine_id: r.src.0,
                recovered_size: r.size,
                recovered_bytes_received: r.received.load(Ordering::Relaxed),
                ..Default::default()
            };
            (f, req)
        })
        .collect();
    for (flow, req) in stale {
        let shared = shared.clone();
        tasks.spawn(async move {
            let answer = shared.link.call(Body::Get(req), REANNOUNCE_DEADLINE).await;
            let mut receiving = shared.receiving.lock().expect("receiving lock");
            let Some(r) = receiving.get_mut(&flow) else { return };
            match answer {
                Ok(_) => {
                    r.epoch = epoch;
                    tracing::info!(%flow, "in-flight flow re-announced");
                }
                // The source is not back yet, or the coordinator did not answer: try again next
                // heartbeat (a source that never comes back stops sending keepalives, and the get
                // ends at the idle timeout).
                Err(e)
                    if matches!(
                        ErrorKind::of(&e),
                        Some(ErrorKind::AgentUnreachable | ErrorKind::CoordinatorUnreachable | ErrorKind::ShuttingDown)
                    ) || matches!(e.code(), tonic::Code::Unavailable | tonic::Code::DeadlineExceeded) => {}
                // Its coflow was unregistered while this agent was not listening.
                Err(e) if ErrorKind::of(&e) == Some(ErrorKind::UnknownCoflow) => {
                    r.stop.send_replace(Some(Stop::Dropped));
                }
                Err(e) => {
                    let why = format!("the coordinator refused the re-announced flow: {}", e.message());
                    r.stop.send_replace(Some(Stop::Fail(why)));
                }
            }
        });
    }
}
