//! The coordinator's event handling without a network, in simulated time, through the same
//! [`Event`] enum the gRPC service sends.

mod policy;

use coflow_coordinator::{CoordError, CoordinatorConfig, Core, Event, FlowGrant, Notice, RateBatch};
use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_proto::{
    AgentRegistration, CoflowOptions, DataId, FlowRecovery, GetAnnouncement, Heartbeat, PutAnnouncement, Readiness,
    Registration,
};
use tokio::sync::{mpsc, oneshot};

const CAP: f64 = 100.0;

/// A core with agents on `machines` machines of capacity `CAP`, each watching its rates.
struct Harness {
    core: Core,
    now: Nanos,
    rates: Vec<mpsc::UnboundedReceiver<RateBatch>>,
}

fn ask<T: std::fmt::Debug>(
    core: &mut Core,
    now: Nanos,
    make: impl FnOnce(oneshot::Sender<Result<T, CoordError>>) -> Event,
) -> Result<T, CoordError> {
    let (tx, mut rx) = oneshot::channel();
    core.handle(now, make(tx));
    rx.try_recv().expect("the core replies at once")
}

impl Harness {
    fn new(policy: &str, machines: u32, cfg: CoordinatorConfig) -> Harness {
        let cfg = CoordinatorConfig { policy: policy.into(), ..cfg };
        let mut core = Core::new(cfg, coflow_sched::policy::by_name(policy).unwrap());
        let now = Nanos::from_secs(1);
        let mut rates = Vec::new();
        for m in 0..machines {
            let a = AgentRegistration {
                machine: MachineId(m),
                data_addr: format!("127.0.0.1:{}", 9000 + m).parse().unwrap(),
                port_rate: CAP,
            };
            ask(&mut core, now, |r| Event::RegisterAgent(a, r)).unwrap();
            let (tx, rx) = mpsc::unbounded_channel();
            core.handle(now, Event::Watch(MachineId(m), tx));
            rates.push(rx);
        }
        let mut h = Harness { core, now, rates };
        h.drain();
        h
    }

    fn advance(&mut self, ms: u64) {
        self.now = self.now + Nanos::from_millis(ms);
        self.core.poll(self.now);
    }

    fn register(&mut self, num_flows: u32, options: CoflowOptions) -> CoflowId {
        let reg = Registration { num_flows, options };
        ask(&mut self.core, self.now, |r| Event::Register(reg, r)).unwrap()
    }

    fn put(&mut self, coflow: CoflowId, id: &str, machine: u32, size: u64) -> Result<(), CoordError> {
        let p = PutAnnouncement {
            coflow,
            data_id: DataId::new(id).unwrap(),
            machine: MachineId(machine),
            size,
            recovered: false,
            registration: None,
        };
        ask(&mut self.core, self.now, |r| Event::Put(p, r)).map(|_| ())
    }

    fn get(&mut self, coflow: CoflowId, id: &str, machine: u32) -> Result<FlowGrant, CoordError> {
        let g = GetAnnouncement { coflow, data_id: DataId::new(id).unwrap(), machine: MachineId(machine) };
        ask(&mut self.core, self.now, |r| Event::Get(g, r))
    }

    fn finish(&mut self, flow: FlowId) {
        ask(&mut self.core, self.now, |r| Event::FlowFinished(flow, true, r)).unwrap();
    }

    fn heartbeat(&mut self, machine: u32, flows: Vec<(FlowId, u64)>) -> bool {
        let hb = Heartbeat { machine: MachineId(machine), flows, tx_bps: 0.0, rx_bps: 0.0 };
        ask(&mut self.core, self.now, |r| Event::Heartbeat(hb, r)).unwrap()
    }

    /// Every rate pushed so far, per machine, in order.
    fn drain(&mut self) -> Vec<Vec<RateBatch>> {
        self.rates
            .iter_mut()
            .map(|rx| {
                let mut v = Vec::new();
                while let Ok(b) = rx.try_recv() {
                    v.push(b);
                }
                v
            })
            .collect()
    }
}

fn last_rate(pushed: &[Vec<RateBatch>], flow: FlowId) -> Option<f64> {
    pushed.iter().flatten().flatten().filter(|(f, _)| *f == flow).map(|&(_, r)| r).next_back()
}

#[test]
fn varys_serves_the_smaller_coflow_first_and_pushes_only_changes() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    // A big coflow 0 -> 2, then a small one 1 -> 2: both need port out2.
    let big = h.register(1, CoflowOptions::default());
    h.put(big, "b", 0, 10_000).unwrap();
    let fb = h.get(big, "b", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fb.flow), Some(CAP), "alone, the big coflow gets the whole port");

    h.advance(1000);
    let small = h.register(1, CoflowOptions::default());
    h.put(small, "s", 1, 100).unwrap();
    let fs = h.get(small, "s", 2).unwrap();
    assert_eq!((fs.src, fs.size), (MachineId(1), 100));
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fs.flow), Some(CAP), "SEBF: the small coflow takes out2");
    assert_eq!(last_rate(&pushed, fb.flow), Some(0.0), "and the big one waits");
    assert_eq!(pushed[0].len(), 1, "one batch to machine 0");
    assert!(pushed[2].is_empty(), "nothing for a machine that sends nothing");

    // The small coflow finishes: the big one gets the port back at the next push window.
    h.finish(fs.flow);
    h.advance(0);
    assert!(h.drain().iter().all(Vec::is_empty), "held for the push window after the last push");
    h.advance(5);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fb.flow), Some(CAP));
    assert_eq!(h.core.counters().flows_finished, 1);
}

#[test]
fn rate_pushes_are_batched_over_the_window() {
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 0, push_window_ms: 20, ..Default::default() };
    let mut h = Harness::new("fair", 3, cfg);
    let c = h.register(2, CoflowOptions::default());
    h.put(c, "a", 0, 1000).unwrap();
    h.put(c, "b", 0, 1000).unwrap();
    let fa = h.get(c, "a", 1).unwrap();
    h.advance(0);
    let first = h.drain();
    assert_eq!(last_rate(&first, fa.flow), Some(CAP), "the first push goes out at once");
    // A second flow 5 ms later changes both rates, but the window holds the push back.
    h.advance(5);
    let fb = h.get(c, "b", 2).unwrap();
    h.advance(0);
    assert!(h.drain().iter().all(Vec::is_empty), "held inside the window");
    h.advance(15);
    let pushed = h.drain();
    assert_eq!(pushed[0].len(), 1, "one batch carries both changes");
    assert_eq!(last_rate(&pushed, fa.flow), Some(CAP / 2.0));
    assert_eq!(last_rate(&pushed, fb.flow), Some(CAP / 2.0));
}

#[test]
fn waiting_for_all_gets_holds_flows_until_the_last_get_or_the_timeout() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let opts =
        CoflowOptions { readiness: Readiness::AllGets { timeout: Nanos::from_millis(500) }, ..Default::default() };
    let c = h.register(2, opts.clone());
    h.put(c, "a", 0, 1000).unwrap();
    h.put(c, "b", 0, 1000).unwrap();
    let fa = h.get(c, "a", 1).unwrap();
    h.advance(100);
    assert_eq!(last_rate(&h.drain(), fa.flow), None, "held until both gets are in");
    let fb = h.get(c, "b", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert!(last_rate(&pushed, fa.flow).unwrap() > 0.0 && last_rate(&pushed, fb.flow).unwrap() > 0.0);

    // Another coflow whose second get never comes is released by the timeout.
    let d = h.register(2, opts);
    h.put(d, "x", 1, 1000).unwrap();
    let fx = h.get(d, "x", 2).unwrap();
    h.advance(499);
    assert_eq!(last_rate(&h.drain(), fx.flow), None);
    h.advance(1);
    assert!(last_rate(&h.drain(), fx.flow).unwrap() > 0.0, "released at the timeout");
}

#[test]
fn a_sealed_coflow_expects_one_get_per_piece_and_takes_no_more_puts() {
    // Registered without knowing its number of flows (0), waiting for all gets: the driver's
    // seal says the two pieces put are all there is, so the second get releases both.
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let opts = CoflowOptions { readiness: Readiness::AllGets { timeout: Nanos::from_secs(60) }, ..Default::default() };
    let c = h.register(0, opts.clone());
    h.put(c, "a", 0, 1000).unwrap();
    h.put(c, "b", 0, 1000).unwrap();
    ask(&mut h.core, h.now, |r| Event::Seal(c, r)).unwrap();
    assert_eq!(h.put(c, "late", 0, 1000), Err(CoordError::Sealed(c)));
    let fa = h.get(c, "a", 1).unwrap();
    h.advance(100);
    assert_eq!(last_rate(&h.drain(), fa.flow), None, "held: one piece is not asked for yet");
    let fb = h.get(c, "b", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert!(last_rate(&pushed, fa.flow).unwrap() > 0.0 && last_rate(&pushed, fb.flow).unwrap() > 0.0);

    // Sealed after its gets are in: the seal itself releases them.
    let d = h.register(0, opts);
    h.put(d, "x", 1, 1000).unwrap();
    let fx = h.get(d, "x", 2).unwrap();
    h.advance(100);
    assert_eq!(last_rate(&h.drain(), fx.flow), None);
    ask(&mut h.core, h.now, |r| Event::Seal(d, r)).unwrap();
    h.advance(0);
    assert!(last_rate(&h.drain(), fx.flow).unwrap() > 0.0, "released by the seal");
    assert_eq!(
        ask(&mut h.core, h.now, |r| Event::Seal(CoflowId(999), r)),
        Err(CoordError::UnknownCoflow(CoflowId(999)))
    );
}

#[test]
fn gets_are_scheduled_as_they_arrive_so_reducer_waves_proceed() {
    let mut h = Harness::new("varys", 4, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let c = h.register(4, CoflowOptions::default());
    for (i, m) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
        h.put(c, &format!("p{i}"), m, 1000).unwrap();
    }
    // Wave one: half the gets.
    let wave1 = [h.get(c, "p0", 2).unwrap(), h.get(c, "p2", 2).unwrap()];
    h.advance(0);
    let pushed = h.drain();
    for g in &wave1 {
        assert!(last_rate(&pushed, g.flow).unwrap() > 0.0);
        h.finish(g.flow);
    }
    h.advance(10);
    // Wave two comes after the first finished, and is served too.
    let wave2 = [h.get(c, "p1", 3).unwrap(), h.get(c, "p3", 3).unwrap()];
    h.advance(0);
    let pushed = h.drain();
    for g in &wave2 {
        assert!(last_rate(&pushed, g.flow).unwrap() > 0.0, "wave two scheduled");
    }
    // A piece may be read again (another stage).
    assert!(h.get(c, "p0", 3).is_ok());
}

#[test]
fn small_coflows_bypass_the_policy_at_full_speed() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 5000, ..Default::default() });
    let big = h.register(1, CoflowOptions::default());
    h.put(big, "b", 0, 10_000).unwrap();
    let fb = h.get(big, "b", 2).unwrap();
    let small = h.register(1, CoflowOptions::default());
    h.put(small, "s", 1, 100).unwrap();
    let fs = h.get(small, "s", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fs.flow), Some(CAP), "bypass: full port speed");
    assert_eq!(last_rate(&pushed, fb.flow), Some(CAP), "the scheduled coflow is not preempted by it");
    let st = ask(&mut h.core, h.now, Event::Status).unwrap();
    assert!(st.coflows.iter().any(|c| c.id == small && c.bypass));
}

#[test]
fn tcp_assigns_no_rates_every_flow_goes_at_its_senders_port_rate() {
    let cfg =
        CoordinatorConfig { policy: coflow_coordinator::TCP.into(), bypass_threshold_bytes: 0, ..Default::default() };
    cfg.validate().unwrap();
    let mut h = Harness::new("fair", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    h.core = Core::new(cfg, coflow_sched::policy::by_name("fair").unwrap());
    let mut rates = Vec::new();
    for m in 0..3 {
        let a = AgentRegistration {
            machine: MachineId(m),
            data_addr: format!("127.0.0.1:{}", 9000 + m).parse().unwrap(),
            port_rate: CAP * f64::from(m + 1),
        };
        ask(&mut h.core, h.now, |r| Event::RegisterAgent(a, r)).unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        h.core.handle(h.now, Event::Watch(MachineId(m), tx));
        rates.push(rx);
    }
    h.rates = rates;
    h.drain();
    // Two large coflows into one receiver: fair would halve its port, tcp leaves it to the network.
    let a = h.register(1, CoflowOptions::default());
    h.put(a, "a", 0, 1_000_000).unwrap();
    let b = h.register(1, CoflowOptions::default());
    h.put(b, "b", 1, 1_000_000).unwrap();
    let fa = h.get(a, "a", 2).unwrap();
    let fb = h.get(b, "b", 2).unwrap();
    h.advance(10);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fa.flow), Some(CAP));
    assert_eq!(last_rate(&pushed, fb.flow), Some(2.0 * CAP));
    assert_eq!(h.core.counters().decisions, 0, "no policy decides under tcp");
    let st = ask(&mut h.core, h.now, Event::Status).unwrap();
    assert_eq!(st.policy, "tcp");
}

#[test]
fn errors_name_what_is_missing() {
    let mut h = Harness::new("varys", 2, CoordinatorConfig::default());
    let c = h.register(1, CoflowOptions::default());
    assert_eq!(h.put(CoflowId(99), "a", 0, 1).unwrap_err(), CoordError::UnknownCoflow(CoflowId(99)));
    h.put(c, "a", 0, 1).unwrap();
    assert!(matches!(h.put(c, "a", 1, 1).unwrap_err(), CoordError::DuplicateDataId { .. }));
    assert!(matches!(h.get(c, "zz", 1).unwrap_err(), CoordError::NoSuchData { .. }));
    assert_eq!(h.put(c, "b", 7, 1).unwrap_err(), CoordError::AgentUnavailable(MachineId(7)));
    let e = ask(&mut h.core, h.now, |r| Event::FlowFinished(FlowId(12345), true, r)).unwrap_err();
    assert_eq!(e, CoordError::UnknownFlow(FlowId(12345)));
}

#[test]
fn a_silent_agent_is_declared_dead_its_flows_fail_and_the_rest_goes_on() {
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 0, agent_timeout_ms: 1000, ..Default::default() };
    let mut h = Harness::new("varys", 3, cfg);
    let c = h.register(2, CoflowOptions::default());
    h.put(c, "a", 0, 1000).unwrap();
    h.put(c, "b", 1, 1000).unwrap();
    let fa = h.get(c, "a", 2).unwrap();
    let fb = h.get(c, "b", 2).unwrap();
    h.advance(0);
    // Machines 1 and 2 keep reporting, machine 0 falls silent.
    for _ in 0..12 {
        h.advance(100);
        assert!(h.heartbeat(1, vec![(fb.flow, 100)]));
        assert!(h.heartbeat(2, vec![]));
    }
    assert_eq!(h.core.rate(fa.flow), None, "its flow failed");
    assert!(h.core.rate(fb.flow).is_some(), "the other flow goes on");
    assert_eq!(h.core.counters().flows_failed, 1);
    assert!(!h.heartbeat(0, vec![]), "a dead agent must register again");
    assert!(matches!(h.get(c, "a", 2).unwrap_err(), CoordError::NoSuchData { .. }), "its pieces are gone");
    // Progress reports move the remaining-bytes estimate: the flow alone gets the whole port.
    h.advance(0);
    assert_eq!(h.core.rate(fb.flow), Some(CAP));
}

fn metrics(core: &mut Core, now: Nanos) -> String {
    ask(core, now, Event::Metrics).unwrap()
}

/// After a restart (ids of the previous coordinator lie below the new base), a receiver
/// re-announces a flow the old coordinator held at rate zero: the new one schedules it under its
/// old id, new flows never take that id, the coflow gets its options back from the source's
/// re-announced put, and a coflow this coordinator never knew at or above its base is refused.
#[test]
fn a_restarted_core_schedules_recovered_flows_under_their_ids() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    h.core.set_id_base(1000);
    let old = CoflowId(5);
    let rec = FlowRecovery {
        flow: FlowId(999),
        coflow: old,
        data_id: DataId::new("p").unwrap(),
        src: MachineId(0),
        dst: MachineId(1),
        size: 1000,
        received: 400,
    };
    let g = ask(&mut h.core, h.now, |r| Event::RecoverFlow(rec.clone(), r)).unwrap();
    assert_eq!((g.flow, g.src, g.size), (FlowId(999), MachineId(0), 1000));
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, FlowId(999)), Some(CAP), "the recovered flow gets a rate");
    // Twice is harmless.
    assert!(ask(&mut h.core, h.now, |r| Event::RecoverFlow(rec.clone(), r)).is_ok());

    // The source re-announces its piece with the registration it learned.
    let options = CoflowOptions { name: "q7".into(), weight: 3.0, ..Default::default() };
    let put = PutAnnouncement {
        coflow: old,
        data_id: DataId::new("p").unwrap(),
        machine: MachineId(0),
        size: 1000,
        recovered: true,
        registration: Some(Registration { num_flows: 4, options: options.clone() }),
    };
    let reg = ask(&mut h.core, h.now, |r| Event::Put(put, r)).unwrap();
    assert_eq!((reg.num_flows, &reg.options), (4, &options));
    let st = ask(&mut h.core, h.now, Event::Status).unwrap();
    let c = st.coflows.iter().find(|c| c.id == old).unwrap();
    assert_eq!((c.name.as_str(), c.num_flows), ("q7", 4), "adopted with its options");

    // New ids are above every recovered one.
    let fresh = h.register(1, CoflowOptions::default());
    assert!(fresh.0 >= 1000);
    h.put(fresh, "n", 2, 10).unwrap();
    let g = h.get(fresh, "n", 1).unwrap();
    assert!(g.flow.0 >= 1000 && g.flow != FlowId(999), "{:?}", g.flow);

    // A coflow id this coordinator allocated and no longer knows was unregistered by it: its
    // pieces are not adopted.
    ask(&mut h.core, h.now, |r| Event::Unregister(fresh, r)).unwrap();
    let zombie = PutAnnouncement {
        coflow: fresh,
        data_id: DataId::new("z").unwrap(),
        machine: MachineId(0),
        size: 10,
        recovered: true,
        registration: None,
    };
    assert_eq!(ask(&mut h.core, h.now, |r| Event::Put(zombie, r)), Err(CoordError::UnknownCoflow(fresh)));
    let m = metrics(&mut h.core, h.now);
    assert!(m.contains("coflow_coordinator_flows_recovered_total 1\n"), "{m}");
    assert!(m.contains("coflow_coordinator_coflows_adopted_total 1\n"), "{m}");
}

/// Unregister tells every agent to forget the coflow; a source declared dead fails its flows
/// and the receivers are told at once; failures are counted by reason.
#[test]
fn agents_are_told_of_dropped_coflows_and_failed_flows() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let mut notices = Vec::new();
    for m in 0..3 {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        h.core.handle(h.now, Event::Notices(MachineId(m), tx));
        notices.push(rx);
    }
    let a = h.register(1, CoflowOptions::default());
    h.put(a, "p", 0, 1000).unwrap();
    ask(&mut h.core, h.now, |r| Event::Unregister(a, r)).unwrap();
    for rx in &mut notices {
        assert_eq!(rx.try_recv(), Ok(Notice::CoflowDropped(a)));
    }

    let b = h.register(1, CoflowOptions::default());
    h.put(b, "p", 0, 1000).unwrap();
    let g = h.get(b, "p", 1).unwrap();
    h.put(b, "q", 2, 1000).unwrap();
    let g2 = h.get(b, "q", 1).unwrap();
    ask(&mut h.core, h.now, |r| Event::FlowFailed(g2.flow, "data-lost".into(), r)).unwrap();
    // Machine 0 goes silent; 1 and 2 keep reporting.
    for _ in 0..40 {
        h.now = h.now + Nanos::from_millis(100);
        h.heartbeat(1, vec![]);
        h.heartbeat(2, vec![]);
        h.core.poll(h.now);
    }
    assert_eq!(notices[1].try_recv(), Ok(Notice::FlowFailed(g.flow)), "the receiver is told");
    assert!(notices[2].try_recv().is_err());
    let m = metrics(&mut h.core, h.now);
    assert!(m.contains("flows_failed_by_reason_total{reason=\"agent-timed-out\"} 1\n"), "{m}");
    assert!(m.contains("flows_failed_by_reason_total{reason=\"data-lost\"} 1\n"), "{m}");
    assert!(m.contains("flows_timed_out_total{reason=\"agent-heartbeat\"} 1\n"), "{m}");
}

#[test]
fn limits_on_coflows_and_pieces_are_typed_errors() {
    let cfg = CoordinatorConfig { max_coflows: 2, max_pieces_per_coflow: 2, ..Default::default() };
    let mut h = Harness::new("varys", 2, cfg);
    let a = h.register(1, CoflowOptions::default());
    let b = h.register(1, CoflowOptions::default());
    let reg = Registration { num_flows: 1, options: CoflowOptions::default() };
    let e = ask(&mut h.core, h.now, |r| Event::Register(reg.clone(), r)).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("max_coflows")), "{e}");
    assert_eq!(e.kind(), "limit-exceeded");
    assert_eq!(tonic::Status::from(e).code(), tonic::Code::ResourceExhausted);
    h.put(a, "1", 0, 10).unwrap();
    h.put(a, "2", 0, 10).unwrap();
    let e = h.put(a, "3", 0, 10).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("max_pieces_per_coflow")), "{e}");
    // Unregistering makes room.
    ask(&mut h.core, h.now, |r| Event::Unregister(b, r)).unwrap();
    assert!(ask(&mut h.core, h.now, |r| Event::Register(reg, r)).is_ok());
}
