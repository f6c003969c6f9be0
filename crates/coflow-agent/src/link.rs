//! The agent's link to the coordinator: registers, listens for rate changes, and reports
//! progress and port utilization every heartbeat. Registers again whenever the coordinator
//! forgets it (a restart) or the rate stream breaks.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use coflow_core::FlowId;
use coflow_proto::pb;
use tokio::sync::watch;

use crate::state::Shared;

pub(crate) async fn run(shared: Arc<Shared>, data_addr: String, mut shutdown: watch::Receiver<bool>) {
    let every = Duration::from_millis(shared.config.heartbeat_interval_ms);
    let mut coord = shared.coordinator.clone();
    loop {
        let reg = pb::RegisterAgentRequest {
            machine_id: shared.config.machine,
            data_addr: data_addr.clone(),
            port_rate_bps: shared.config.port_rate_bps,
            session: shared.session(),
        };
        let registered = async {
            let session = coord.register_agent(reg).await?.into_inner().session;
            shared.session.store(session, Ordering::Relaxed);
            coord.watch_rates(pb::WatchRatesRequest { machine_id: shared.config.machine, session }).await
        };
        let mut stream = match registered.await {
            Ok(s) => s.into_inner(),
            Err(e) => {
                tracing::warn!(status = %e.message(), "cannot register with the coordinator; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        tracing::info!(machine = shared.config.machine, "registered with the coordinator");
        // The coordinator's state is soft: after a restart it learns again what this agent holds.
        for (coflow, data_id, size) in shared.store.list() {
            let ann = pb::AnnouncePutRequest {
                coflow_id: coflow.0,
                data_id: data_id.as_str().to_string(),
                machine_id: shared.config.machine,
                size,
                recovered: true,
                session: shared.session(),
            };
            if let Err(e) = coord.announce_put(ann).await {
                tracing::warn!(%coflow, %data_id, status = %e.message(), "could not re-announce a piece");
            }
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut last_tx, mut last_rx, mut last_at) =
            (shared.tx_bytes.load(Ordering::Relaxed), shared.rx_bytes.load(Ordering::Relaxed), Instant::now());
        loop {
            tokio::select! {
                msg = stream.message() => match msg {
                    Ok(Some(update)) => {
                        for r in update.rates {
                            let rate = if r.rate_bps.is_finite() && r.rate_bps >= 0.0 { r.rate_bps } else { 0.0 };
                            shared.rates.set(FlowId(r.flow_id), rate);
                        }
                    }
                    _ => {
                        tracing::warn!("rate stream from the coordinator ended; registering again");
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
                        machine_id: shared.config.machine,
                        flows,
                        tx_bps: (tx - last_tx) as f64 / dt,
                        rx_bps: (rx - last_rx) as f64 / dt,
                        session: shared.session(),
                    };
                    (last_tx, last_rx, last_at) = (tx, rx, now);
                    shared.rates.collect_garbage();
                    match coord.heartbeat(hb).await {
                        Ok(r) if r.get_ref().known => {}
                        Ok(_) => {
                            tracing::warn!("the coordinator does not know this agent; registering again");
                            break;
                        }
                        Err(e) => tracing::debug!(status = %e.message(), "heartbeat failed"),
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}
