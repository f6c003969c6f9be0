//! The coordinator's core without a network, in simulated time: each test calls the core's
//! `handle_*` methods with `now`, then `handle_timeout`, and asserts on what they return and on
//! what `poll_transmit` and `poll_timeout` give; no channel, no runtime.

mod bypass;
mod deadlines;
mod jobs;
mod leases;
mod policy;
mod ports;
mod random;
mod sources;
mod status;
mod wide_area;

use coflow_coordinator::{CoordError, CoordinatorConfig, Core, FlowGrant, FlowOutcome, Notice, RateBatch, Transmit};
use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_proto::{
    AgentRegistration, CoflowOptions, DataId, FlowRecovery, GetAnnouncement, Heartbeat, PutAnnouncement, Readiness,
    Registration,
};

const CAP: f64 = 100.0;

/// A core with agents on `machines` machines, each watching its rates, and what the core has
/// transmitted to each, not yet looked at.
struct Harness {
    core: Core,
    now: Nanos,
    /// Each granted flow's receiving machine.
    receivers: std::collections::BTreeMap<FlowId, MachineId>,
    rates: Vec<Vec<RateBatch>>,
    notices: Vec<Vec<Notice>>,
    ended: Vec<MachineId>,
}

impl Harness {
    fn new(policy: &str, machines: u32, cfg: CoordinatorConfig) -> Harness {
        let cfg = CoordinatorConfig { policy: policy.into(), ..cfg };
        let core = Core::new(cfg, coflow_sched::policy::by_name(policy).unwrap());
        Harness::with_core(core, &vec![CAP; machines as usize])
    }

    /// `core` with one agent per entry of `port_rates`, registered and watching.
    fn with_core(core: Core, port_rates: &[f64]) -> Harness {
        Harness::with_datacenters(core, port_rates, &[])
    }

    /// `core` with one agent per entry of `port_rates`, agent `m` in datacenter
    /// `datacenters[m]` (none named past its end), registered and watching.
    fn with_datacenters(mut core: Core, port_rates: &[f64], datacenters: &[&str]) -> Harness {
        let now = Nanos::from_secs(1);
        let (mut rates, mut notices) = (Vec::new(), Vec::new());
        for (m, &port_rate) in port_rates.iter().enumerate() {
            let machine = MachineId(m as u32);
            let a = AgentRegistration {
                machine,
                data_addr: format!("127.0.0.1:{}", 9000 + m).parse().unwrap(),
                port_rate,
                datacenter: datacenters.get(m).map_or(String::new(), |d| d.to_string()),
            };
            core.handle_register_agent(now, a).unwrap();
            rates.push(vec![core.handle_watch(now, machine)]);
            notices.push(Vec::new());
        }
        let mut h = Harness { core, now, receivers: Default::default(), rates, notices, ended: Vec::new() };
        h.drain();
        h
    }

    fn advance(&mut self, ms: u64) {
        self.now = self.now + Nanos::from_millis(ms);
        self.core.handle_timeout(self.now);
    }

    fn register(&mut self, num_flows: u32, options: CoflowOptions) -> CoflowId {
        self.core.handle_register(self.now, Registration { num_flows, options, ..Default::default() }).unwrap()
    }

    /// A coflow of one flow registered by `owner` (an identity).
    fn register_by(&mut self, owner: &str) -> Result<CoflowId, CoordError> {
        self.core.handle_register(self.now, Registration { num_flows: 1, owner: owner.into(), ..Default::default() })
    }

    fn put(&mut self, coflow: CoflowId, id: &str, machine: u32, size: u64) -> Result<(), CoordError> {
        let p = PutAnnouncement {
            coflow,
            data_id: DataId::new(id).unwrap(),
            machine: MachineId(machine),
            size,
            recovered: false,
            registration: None,
            client: String::new(),
            sealed: false,
        };
        self.core.handle_put(self.now, p).map(|_| ())
    }

    /// A put of 10 bytes by the client `client` (an identity).
    fn put_by(&mut self, client: &str, coflow: CoflowId, id: &str, machine: u32) -> Result<(), CoordError> {
        self.put_sized_by(client, coflow, id, machine, 10)
    }

    /// A put of `size` bytes by the client `client` (an identity).
    fn put_sized_by(
        &mut self,
        client: &str,
        coflow: CoflowId,
        id: &str,
        machine: u32,
        size: u64,
    ) -> Result<(), CoordError> {
        let p = PutAnnouncement {
            coflow,
            data_id: DataId::new(id).unwrap(),
            machine: MachineId(machine),
            size,
            recovered: false,
            registration: None,
            client: client.into(),
            sealed: false,
        };
        self.core.handle_put(self.now, p).map(|_| ())
    }

    /// A get by the client `client` (an identity).
    fn get_by(&mut self, client: &str, coflow: CoflowId, id: &str, machine: u32) -> Result<FlowGrant, CoordError> {
        let g = GetAnnouncement {
            coflow,
            data_id: DataId::new(id).unwrap(),
            machine: MachineId(machine),
            client: client.into(),
            resume: None,
            resume_end: None,
        };
        let grant = self.core.handle_get(self.now, g);
        if let Ok(g) = &grant {
            self.receivers.insert(g.flow, MachineId(machine));
        }
        grant
    }

    fn get(&mut self, coflow: CoflowId, id: &str, machine: u32) -> Result<FlowGrant, CoordError> {
        let g = GetAnnouncement {
            coflow,
            data_id: DataId::new(id).unwrap(),
            machine: MachineId(machine),
            client: String::new(),
            resume: None,
            resume_end: None,
        };
        let grant = self.core.handle_get(self.now, g);
        if let Ok(g) = &grant {
            self.receivers.insert(g.flow, MachineId(machine));
        }
        grant
    }

    /// The end of `flow` as its receiver reports it.
    fn end(&mut self, flow: FlowId, outcome: FlowOutcome) -> Result<(), CoordError> {
        let by = self.receivers.get(&flow).copied().unwrap_or(MachineId(0));
        self.core.handle_flow_finished(self.now, by, flow, outcome)
    }

    fn finish(&mut self, flow: FlowId) {
        self.end(flow, FlowOutcome::Completed).unwrap();
    }

    fn heartbeat(&mut self, machine: u32, flows: Vec<(FlowId, u64)>) -> bool {
        self.heartbeat_unread(machine, flows, Vec::new())
    }

    /// A heartbeat that also lists the flows `machine` receives whose client stopped reading.
    fn heartbeat_unread(&mut self, machine: u32, flows: Vec<(FlowId, u64)>, unread: Vec<FlowId>) -> bool {
        let hb = Heartbeat { machine: MachineId(machine), flows, tx_bps: 0.0, rx_bps: 0.0, unread };
        self.core.handle_heartbeat(self.now, hb)
    }

    /// Sorts what the core has transmitted since the last call by machine and kind.
    fn collect(&mut self) {
        while let Some(t) = self.core.poll_transmit() {
            match t {
                Transmit::Rates(m, batch) => self.rates[m.0 as usize].push(batch),
                Transmit::Notice(m, n) => self.notices[m.0 as usize].push(n),
                Transmit::EndWatch(m) => self.ended.push(m),
            }
        }
    }

    /// Every rate batch transmitted since the last drain, per machine, in order.
    fn drain(&mut self) -> Vec<Vec<RateBatch>> {
        self.collect();
        self.rates.iter_mut().map(std::mem::take).collect()
    }

    /// Every notice transmitted to `machine` since the last look, in order.
    fn notices(&mut self, machine: u32) -> Vec<Notice> {
        self.collect();
        std::mem::take(&mut self.notices[machine as usize])
    }
}

fn by_name(policy: &str) -> Box<dyn coflow_sched::Scheduler> {
    coflow_sched::policy::by_name(policy).unwrap()
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

    // The small coflow finishes: the big one gets the port back at once (no push window by
    // default).
    h.finish(fs.flow);
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fb.flow), Some(CAP));
    assert_eq!(h.core.counters().flows_finished, 1);
}

/// A flow's remaining bytes are what its source last reported, not that report brought forward
/// at the assigned rate: a flow that has not moved (its receiver never connected, or it runs
/// below its rate) must not look nearly done, or SEBF would keep giving it the whole port.
#[test]
fn a_flow_that_reports_no_progress_does_not_look_nearly_done() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let big = h.register(1, CoflowOptions::default());
    h.put(big, "b", 0, 10_000).unwrap();
    let fb = h.get(big, "b", 2).unwrap();
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), fb.flow), Some(CAP));
    // 99.5 s at 100 B/s would have moved 9,950 of its 10,000 bytes; its source has not
    // started it (a source reports a flow once its receiver has connected).
    for _ in 0..199 {
        h.advance(500);
        for m in 0..3 {
            assert!(h.heartbeat(m, vec![]));
        }
    }
    let small = h.register(1, CoflowOptions::default());
    h.put(small, "s", 1, 1_000).unwrap();
    let fs = h.get(small, "s", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fs.flow), Some(CAP), "the small coflow (10 s) goes before the big one (100 s left)");
    assert_eq!(last_rate(&pushed, fb.flow), Some(0.0));
}

/// A flow its source reports is brought forward at its rate since the report, for at most a
/// heartbeat: 9,000 of 10,000 bytes reported, then 90 ms at 100 B/s make 991 bytes left, so a
/// newcomer of 995 bytes on the same port waits behind it (from the report alone, 1,000 bytes
/// left, it would go first).
#[test]
fn a_reported_flow_is_brought_forward_at_its_rate_for_at_most_a_heartbeat() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let big = h.register(1, CoflowOptions::default());
    h.put(big, "b", 0, 10_000).unwrap();
    let fb = h.get(big, "b", 2).unwrap();
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), fb.flow), Some(CAP));
    assert!(h.heartbeat(0, vec![(fb.flow, 9_000)]));
    for m in 1..3 {
        assert!(h.heartbeat(m, vec![]));
    }
    h.advance(90);
    let small = h.register(1, CoflowOptions::default());
    h.put(small, "s", 1, 995).unwrap();
    let fs = h.get(small, "s", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fs.flow).unwrap_or(0.0), 0.0, "991 bytes left go first: {pushed:?}");
    assert_eq!(last_rate(&pushed, fb.flow), None, "the big flow keeps its rate");
}

/// A flow brought forward counts the bytes of every rate in force since its report, not only
/// the last one's: 9,000 of 10,000 bytes reported, 50 ms at 100 B/s, 10 ms at rate 0 (a coflow
/// of 1 byte goes first), 30 ms at 100 B/s again make 992 bytes left, so a newcomer of 995
/// bytes on the same port waits behind it (from the last rate alone, 997 bytes left, it would
/// go first).
#[test]
fn a_reported_flow_counts_the_bytes_of_every_rate_since_the_report() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let big = h.register(1, CoflowOptions::default());
    h.put(big, "b", 0, 10_000).unwrap();
    let fb = h.get(big, "b", 2).unwrap();
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), fb.flow), Some(CAP));
    assert!(h.heartbeat(0, vec![(fb.flow, 9_000)]));
    for m in 1..3 {
        assert!(h.heartbeat(m, vec![]));
    }
    h.advance(50);
    let tiny = h.register(1, CoflowOptions::default());
    h.put(tiny, "t", 0, 1).unwrap();
    let ft = h.get(tiny, "t", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, ft.flow), Some(CAP), "{pushed:?}");
    assert_eq!(last_rate(&pushed, fb.flow), Some(0.0), "{pushed:?}");
    h.advance(10);
    h.finish(ft.flow);
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), fb.flow), Some(CAP));
    h.advance(30);
    let small = h.register(1, CoflowOptions::default());
    h.put(small, "s", 1, 995).unwrap();
    let fs = h.get(small, "s", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fs.flow).unwrap_or(0.0), 0.0, "992 bytes left go first: {pushed:?}");
    assert_eq!(last_rate(&pushed, fb.flow), None, "the big flow keeps its rate");
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
    h.core.handle_seal(h.now, "", c).unwrap();
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
    h.core.handle_seal(h.now, "", d).unwrap();
    h.advance(0);
    assert!(last_rate(&h.drain(), fx.flow).unwrap() > 0.0, "released by the seal");
    assert_eq!(h.core.handle_seal(h.now, "", CoflowId(999)), Err(CoordError::UnknownCoflow(CoflowId(999))));
}

#[test]
fn a_get_asked_again_after_its_flow_ended_is_not_counted_twice_towards_all_gets() {
    // Two flows expected, waiting for all gets: a reducer's get of `a` is cancelled and asked
    // again, which is still one of the two gets; the coflow waits for `b`'s.
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let opts = CoflowOptions { readiness: Readiness::AllGets { timeout: Nanos::from_secs(60) }, ..Default::default() };
    let c = h.register(2, opts);
    h.put(c, "a", 0, 1000).unwrap();
    h.put(c, "b", 0, 1000).unwrap();
    let first = h.get(c, "a", 1).unwrap();
    h.end(first.flow, FlowOutcome::Failed("client-departed".into())).unwrap();
    let again = h.get(c, "a", 1).unwrap();
    h.advance(100);
    assert_eq!(last_rate(&h.drain(), again.flow), None, "held: `b` is not asked for yet");
    let fb = h.get(c, "b", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert!(last_rate(&pushed, again.flow).unwrap() > 0.0 && last_rate(&pushed, fb.flow).unwrap() > 0.0);

    h.finish(again.flow);
    h.finish(fb.flow);

    // Two gets of one piece on one machine at once (two readers of a broadcast piece there) are
    // two of the gets expected.
    let opts = CoflowOptions { readiness: Readiness::AllGets { timeout: Nanos::from_secs(60) }, ..Default::default() };
    let d = h.register(2, opts);
    h.put(d, "x", 0, 1000).unwrap();
    let x1 = h.get(d, "x", 1).unwrap();
    let x2 = h.get(d, "x", 1).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert!(last_rate(&pushed, x1.flow).unwrap() > 0.0 && last_rate(&pushed, x2.flow).unwrap() > 0.0);
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
    assert_eq!(last_rate(&pushed, fs.flow), Some(f64::INFINITY), "bypass: not paced, full port speed");
    assert_eq!(last_rate(&pushed, fb.flow), Some(CAP), "the scheduled coflow is not preempted by it");
    let st = h.core.status();
    assert!(st.coflows.iter().any(|c| c.id == small && c.bypass));
}

/// A small coflow is judged again at each get by the most bytes on one machine, over its pieces
/// (by sender) and its unfinished flows (by receiver): gets that gather its pieces on one receiver
/// make it large, and a finished flow no longer counts.
#[test]
fn a_bypassed_coflow_is_judged_again_by_the_bytes_its_gets_gather() {
    let mut h = Harness::new("varys", 4, CoordinatorConfig { bypass_threshold_bytes: 5000, ..Default::default() });
    let c = h.register(0, CoflowOptions::default());
    for m in 0..3 {
        h.put(c, &format!("p{m}"), m, 2000).unwrap();
    }
    let bypassed = |h: &Harness| h.core.status().coflows.iter().any(|k| k.id == c && k.bypass);
    let first = h.get(c, "p0", 3).unwrap();
    h.get(c, "p1", 3).unwrap();
    assert!(bypassed(&h), "4000 bytes to machine 3");
    h.finish(first.flow);
    h.get(c, "p2", 3).unwrap();
    assert!(bypassed(&h), "4000 bytes to machine 3 unfinished");
    let again = h.get(c, "p0", 3).unwrap();
    assert!(!bypassed(&h), "6000 bytes to machine 3");
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), again.flow), Some(CAP), "scheduled, at the port's rate");
}

/// A blind policy's coflows are never judged by the sizes put: the small coflow that `varys`
/// lets bypass goes to the policy like any other.
#[test]
fn a_blind_policy_schedules_small_coflows_too() {
    for policy in ["aalo", "philae", "saath"] {
        let mut h = Harness::new(policy, 3, CoordinatorConfig { bypass_threshold_bytes: 5000, ..Default::default() });
        let small = h.register(1, CoflowOptions::default());
        h.put(small, "s", 1, 100).unwrap();
        let fs = h.get(small, "s", 2).unwrap();
        h.advance(0);
        let pushed = h.drain();
        assert_eq!(last_rate(&pushed, fs.flow), Some(CAP), "{policy}: scheduled, at the port's rate");
        let st = h.core.status();
        assert!(st.coflows.iter().any(|c| c.id == small && !c.bypass), "{policy}: not bypassed");
    }
}

/// A live coflow gains flows while it is scheduled (its gets come one by one): a blind policy
/// counts the bytes its later flows send too. Here the coflow first seen with one small flow
/// sends 50 MB through a flow that came later, so `aalo` moves it out of the first queue, and a
/// small coflow arriving behind it on the same ports is served at once rather than after it.
#[test]
fn a_blind_policy_counts_the_bytes_of_flows_a_coflow_gains_while_scheduled() {
    let mut h = Harness::new("aalo", 2, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let big = h.register(2, CoflowOptions::default());
    h.put(big, "first", 0, 1000).unwrap();
    h.get(big, "first", 1).unwrap();
    h.advance(10);
    h.put(big, "later", 0, 100_000_000).unwrap();
    let later = h.get(big, "later", 1).unwrap();
    h.advance(10);
    assert!(h.heartbeat(0, vec![(later.flow, 50_000_000)]));
    h.advance(100);
    let small = h.register(1, CoflowOptions::default());
    h.put(small, "s", 0, 1000).unwrap();
    let s = h.get(small, "s", 1).unwrap();
    h.advance(10);
    let pushed = h.drain();
    let rate = last_rate(&pushed, s.flow).unwrap_or(0.0);
    assert!(rate > CAP / 2.0, "the small coflow waits behind one that sent 50 MB: {rate}");
}

#[test]
fn tcp_assigns_no_rates_every_flow_goes_at_its_senders_port_rate() {
    let cfg =
        CoordinatorConfig { policy: coflow_coordinator::TCP.into(), bypass_threshold_bytes: 0, ..Default::default() };
    cfg.validate().unwrap();
    let port_rates: Vec<f64> = (1..=3).map(|m| CAP * f64::from(m)).collect();
    let mut h = Harness::with_core(Core::new(cfg, by_name("fair")), &port_rates);
    // Two large coflows into one receiver: fair would halve its port, tcp leaves it to the network.
    let a = h.register(1, CoflowOptions::default());
    h.put(a, "a", 0, 1_000_000).unwrap();
    let b = h.register(1, CoflowOptions::default());
    h.put(b, "b", 1, 1_000_000).unwrap();
    let fa = h.get(a, "a", 2).unwrap();
    let fb = h.get(b, "b", 2).unwrap();
    h.advance(10);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fa.flow), Some(f64::INFINITY), "not paced: the network shares the links");
    assert_eq!(last_rate(&pushed, fb.flow), Some(f64::INFINITY));
    assert_eq!(h.core.counters().decisions, 0, "no policy decides under tcp");
    let st = h.core.status();
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
    let e = h.end(FlowId(12345), FlowOutcome::Completed).unwrap_err();
    assert_eq!(e, CoordError::UnknownFlow(FlowId(12345)));
}

/// Only a flow's receiver may say it is complete: a report from its source or a bystander is
/// refused and the flow stays live, with its rate; its source may say it gave the flow up (its
/// receiver stopped reading), a bystander may not.
#[test]
fn only_the_receiver_ends_a_flow() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 1000).unwrap();
    let g = h.get(c, "p", 1).unwrap();
    h.advance(0);
    for by in [0, 2] {
        let e = h.core.handle_flow_finished(h.now, MachineId(by), g.flow, FlowOutcome::Completed).unwrap_err();
        assert_eq!(e, CoordError::NotTheReceiver { flow: g.flow, machine: MachineId(by) });
        assert_eq!(e.kind().as_str(), "permission-denied");
    }
    assert_eq!(h.core.counters().flows_finished, 0);
    let gave_up = || FlowOutcome::Failed("timed-out".into());
    let e = h.core.handle_flow_finished(h.now, MachineId(2), g.flow, gave_up()).unwrap_err();
    assert_eq!(e, CoordError::NotTheReceiver { flow: g.flow, machine: MachineId(2) });
    assert_eq!(h.core.status().coflows[0].flows.len(), 1, "the flow is still live");
    h.finish(g.flow);
    assert_eq!(h.core.counters().flows_finished, 1);
    let g = h.get(c, "p", 2).unwrap();
    h.advance(0);
    h.core.handle_flow_finished(h.now, MachineId(0), g.flow, gave_up()).unwrap();
    assert_eq!(h.core.status().coflows[0].flows.len(), 0, "the flow its source gave up is gone");
    assert_eq!(h.core.counters().flows_failed, 1);
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
    // Machines 1 and 2 keep reporting (1 its flow moving at its rate, half the port), machine 0
    // falls silent.
    for k in 1..=12 {
        h.advance(100);
        assert!(h.heartbeat(1, vec![(fb.flow, 5 * k)]));
        assert!(h.heartbeat(2, vec![]));
    }
    assert_eq!(h.core.rate(fa.flow), None, "its flow failed");
    assert!(h.core.rate(fb.flow).is_some(), "the other flow goes on");
    assert_eq!(h.core.counters().flows_failed, 1);
    assert!(!h.heartbeat(0, vec![]), "a dead agent must register again");
    assert!(matches!(h.get(c, "a", 2).unwrap_err(), CoordError::NoSuchData { .. }), "its pieces are gone");
    // Progress reports move the remaining-bytes estimate: the flow alone gets the whole port.
    h.advance(0);
    let rate = h.core.rate(fb.flow).unwrap();
    assert!((rate - CAP).abs() < 1e-9, "{rate}");
}

/// A piece re-announced by its holder, as an agent that registered again sends it.
fn recovered(
    coflow: CoflowId,
    id: &str,
    machine: u32,
    size: u64,
    registration: Option<Registration>,
) -> PutAnnouncement {
    PutAnnouncement {
        coflow,
        data_id: DataId::new(id).unwrap(),
        machine: MachineId(machine),
        size,
        recovered: true,
        registration,
        client: String::new(),
        sealed: false,
    }
}

/// A flow re-announced by its receiver `dst`.
fn recovery(flow: u64, coflow: CoflowId, src: u32, dst: u32, size: u64) -> FlowRecovery {
    FlowRecovery {
        flow: FlowId(flow),
        coflow,
        data_id: DataId::new("p").unwrap(),
        src: MachineId(src),
        dst: MachineId(dst),
        size,
        received: 400,
    }
}

/// The registration a previous coordinator handed its agents.
fn old_registration() -> Registration {
    let options = CoflowOptions { name: "q7".into(), weight: 3.0, ..Default::default() };
    Registration { num_flows: 4, options, owner: "coflow://client/a".into(), nonce: 77 }
}

/// After a restart (ids of the previous coordinator lie below the new base), inside the restart
/// window: a receiver's flow is adopted only once its source has re-announced the piece it names,
/// at that size; then it is scheduled under its old id, new ids never take it, the coflow keeps
/// its options and owner, and neither a coflow this coordinator unregistered nor one it adopted
/// and then unregistered comes back.
#[test]
fn a_restarted_core_adopts_only_consistent_re_announcements() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    h.core.set_id_base(1000);
    assert!(h.core.in_restart_window(h.now));
    let old = CoflowId(5);
    let rec = recovery(999, old, 0, 1, 1000);
    // The source has not re-announced yet: not yet.
    assert_eq!(h.core.handle_recover_flow(h.now, rec.clone()), Err(CoordError::UnknownCoflow(old)));
    let reg = h.core.handle_put(h.now, recovered(old, "p", 0, 1000, Some(old_registration()))).unwrap();
    assert_eq!(reg, old_registration(), "adopted with its options, owner and nonce");
    // Inconsistent claims: another size, another source.
    for bad in [recovery(999, old, 0, 1, 64 << 30), recovery(999, old, 2, 1, 1000)] {
        assert!(matches!(h.core.handle_recover_flow(h.now, bad), Err(CoordError::NoSuchData { .. })));
    }
    let g = h.core.handle_recover_flow(h.now, rec.clone()).unwrap();
    assert_eq!((g.flow, g.src, g.size), (FlowId(999), MachineId(0), 1000));
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), FlowId(999)), Some(CAP), "the recovered flow gets a rate");
    // Twice is harmless; another receiver claiming it is not.
    assert!(h.core.handle_recover_flow(h.now, rec).is_ok());
    assert!(h.core.handle_recover_flow(h.now, recovery(999, old, 0, 2, 1000)).is_err());

    // New ids are above every recovered one.
    let fresh = h.register(1, CoflowOptions::default());
    assert!(fresh.0 >= 1000);
    h.put(fresh, "n", 2, 10).unwrap();
    let g = h.get(fresh, "n", 1).unwrap();
    assert!(g.flow.0 >= 1000 && g.flow != FlowId(999), "{:?}", g.flow);

    // Neither a coflow of this coordinator nor an adopted one is revived once unregistered.
    h.core.handle_unregister(h.now, "", fresh).unwrap();
    let zombie = recovered(fresh, "z", 0, 10, None);
    assert_eq!(h.core.handle_put(h.now, zombie), Err(CoordError::UnknownCoflow(fresh)));
    h.core.handle_unregister(h.now, "coflow://client/a", old).unwrap();
    let again = recovered(old, "q", 2, 10, Some(old_registration()));
    assert_eq!(h.core.handle_put(h.now, again), Err(CoordError::UnknownCoflow(old)));
    let m = h.core.metrics();
    assert!(m.contains("coflow_coordinator_flows_recovered_total 1\n"), "{m}");
    assert!(m.contains("coflow_coordinator_coflows_adopted_total 1\n"), "{m}");
}

/// A seal is told to the agents that hold the coflow's pieces, and to none other; after a
/// restart a piece re-announced sealed inside the restart window seals the adopted coflow again
/// (a new put is refused and the gets of its pieces release it, long before its readiness
/// timeout), and an agent that re-announces a piece unsealed into it is told of the seal; past
/// the window, an agent's word seals nothing.
#[test]
fn a_seal_outlives_a_restart_with_the_pieces_of_its_coflow() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let opts = CoflowOptions { readiness: Readiness::AllGets { timeout: Nanos::from_secs(60) }, ..Default::default() };
    let c = h.register(0, opts.clone());
    h.put(c, "a", 0, 1000).unwrap();
    h.put(c, "b", 1, 1000).unwrap();
    h.put(c, "c", 1, 1000).unwrap();
    for m in 0..3 {
        h.notices(m);
    }
    h.core.handle_unwatch(MachineId(0));
    h.core.handle_seal(h.now, "", c).unwrap();
    h.core.handle_seal(h.now, "", c).unwrap();
    let told: Vec<_> = (0..3).map(|m| h.notices(m)).collect();
    assert_eq!(told, [vec![], vec![Notice::CoflowSealed(c)], vec![]], "once, to the holders that watch");
    h.core.handle_watch(h.now, MachineId(0));
    assert_eq!(h.notices(0), [Notice::CoflowSealed(c)], "a holder is told when it watches again");

    // The restarted coordinator: the registration as the agents learned it from their puts.
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    h.core.set_id_base(1000);
    let old = CoflowId(5);
    let reg = Registration { num_flows: 0, options: opts, owner: String::new(), nonce: 77 };
    let sealed = |id: &str, m: u32| PutAnnouncement { sealed: true, ..recovered(old, id, m, 1000, Some(reg.clone())) };
    h.core.handle_put(h.now, sealed("a", 0)).unwrap();
    assert_eq!(h.put(old, "late", 2, 1000), Err(CoordError::Sealed(old)));
    h.notices(1);
    h.core.handle_put(h.now, recovered(old, "b", 1, 1000, Some(reg.clone()))).unwrap();
    assert_eq!(h.notices(1), [Notice::CoflowSealed(old)], "an agent that missed the seal is told");
    h.core.handle_put(h.now, sealed("c", 1)).unwrap();
    let flows: Vec<_> = ["a", "b", "c"].iter().map(|d| h.get(old, d, 2).unwrap().flow).collect();
    h.advance(0);
    let pushed = h.drain();
    for f in flows {
        assert!(last_rate(&pushed, f).is_some_and(|r| r > 0.0), "{f:?} released by its coflow's gets");
    }

    // Past the window, an agent's word seals nothing: this coordinator saw every seal itself.
    let fresh = h.register(0, CoflowOptions::default());
    let reg = h.core.handle_put(h.now, PutAnnouncement { recovered: false, ..recovered(fresh, "f", 0, 10, None) });
    h.core.set_restart_window(h.now);
    let claim = PutAnnouncement { sealed: true, ..recovered(fresh, "f", 0, 10, Some(reg.unwrap())) };
    h.core.handle_put(h.now, claim).unwrap();
    h.put(fresh, "g", 0, 10).unwrap();
}

/// Past the restart window nothing is adopted (a phantom recovery is refused with
/// `permission-denied`); a re-announced piece joins a coflow the coordinator knows only with that
/// coflow's nonce, which the put's answer gave the agent that holds it.
#[test]
fn past_the_restart_window_nothing_is_adopted() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    h.core.set_id_base(1000);
    let c = h.register(2, CoflowOptions::default());
    h.core.set_restart_window(h.now);
    assert!(!h.core.in_restart_window(h.now));
    let e = h.core.handle_put(h.now, recovered(CoflowId(5), "p", 0, 1000, Some(old_registration()))).unwrap_err();
    assert!(matches!(e, CoordError::NotRecoverable(_)), "{e}");
    assert_eq!(e.kind().as_str(), "permission-denied");
    h.put(c, "a", 0, 10).unwrap();
    let e = h.core.handle_recover_flow(h.now, recovery(500, CoflowId(5), 0, 1, 1000)).unwrap_err();
    assert!(matches!(e, CoordError::NotRecoverable(_)), "{e}");
    // A flow re-announced into a known coflow with a forged 64 GiB size is refused too.
    let forged = FlowRecovery { data_id: DataId::new("a").unwrap(), ..recovery(500, c, 0, 1, 64 << 30) };
    assert!(h.core.handle_recover_flow(h.now, forged).is_err());
    assert_eq!(h.core.live_flows(), 0);

    // Into a known coflow: not without its nonce; with it (the agent registered again), yes,
    // also once the coflow is sealed, since the piece was there before.
    let reg = h.core.handle_put(h.now, PutAnnouncement { recovered: false, ..recovered(c, "b", 1, 10, None) }).unwrap();
    h.core.handle_seal(h.now, "", c).unwrap();
    let forged = Registration { nonce: reg.nonce ^ 2, ..reg.clone() };
    for wrong in [None, Some(forged)] {
        let e = h.core.handle_put(h.now, recovered(c, "x", 2, 10, wrong)).unwrap_err();
        assert!(matches!(e, CoordError::NotRecoverable(_)), "{e}");
    }
    h.core
        .handle_register_agent(
            h.now,
            AgentRegistration {
                machine: MachineId(1),
                data_addr: "127.0.0.1:9001".parse().unwrap(),
                port_rate: CAP,
                datacenter: String::new(),
            },
        )
        .unwrap();
    assert!(matches!(h.get(c, "b", 2), Err(CoordError::NoSuchData { .. })), "its pieces went with its restart");
    h.core.handle_put(h.now, recovered(c, "b", 1, 10, Some(reg))).unwrap();
    assert!(h.get(c, "b", 2).is_ok(), "re-announced with its registration, it is back");
    let m = h.core.metrics();
    assert!(m.contains("coflow_coordinator_recoveries_refused_total 5\n"), "{m}");
}

/// Ids: only an id below the base is adopted; one above it that this coordinator never issued
/// (a previous run's under a clock set back) is refused but lifts the next ids above it, so no
/// id names two coflows; one far above it (2^64 - 2) neither is adopted nor lifts the counter,
/// so ids never wrap.
#[test]
fn re_announced_ids_never_wrap_or_name_two_coflows() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    h.core.set_id_base(1000);
    let reg = Some(old_registration());
    let far = CoflowId(u64::MAX - 1);
    assert_eq!(h.core.handle_put(h.now, recovered(far, "p", 0, 10, reg.clone())), Err(CoordError::UnknownCoflow(far)));
    assert!(h.core.handle_recover_flow(h.now, recovery(u64::MAX - 1, CoflowId(5), 0, 1, 10)).is_err());
    let a = h.register(1, CoflowOptions::default());
    assert_eq!(a, CoflowId(1000), "not lifted by an id far above the base");
    h.put(a, "p", 0, 10).unwrap();
    assert_eq!(h.get(a, "p", 1).unwrap().flow, FlowId(1000));

    // A previous run's coflow 1500 and flow 1700, under a clock set back.
    let back = CoflowId(1500);
    assert_eq!(h.core.handle_put(h.now, recovered(back, "p", 0, 10, reg)), Err(CoordError::UnknownCoflow(back)));
    assert!(h.core.handle_recover_flow(h.now, recovery(1700, back, 0, 1, 10)).is_err());
    let b = h.register(1, CoflowOptions::default());
    assert!(b.0 > 1500, "{b:?}");
    h.put(b, "p", 0, 10).unwrap();
    assert!(h.get(b, "p", 1).unwrap().flow.0 > 1700);
    assert_eq!(h.core.live_coflows(), 2, "nothing adopted");
}

/// Limits hold for adopted coflows and pieces as for new ones.
#[test]
fn limits_hold_for_adopted_coflows_and_pieces() {
    let cfg = CoordinatorConfig { max_coflows: 2, max_pieces_per_coflow: 2, ..Default::default() };
    let mut h = Harness::new("varys", 3, cfg);
    h.core.set_id_base(1000);
    h.register(1, CoflowOptions::default());
    let reg = Some(old_registration());
    h.core.handle_put(h.now, recovered(CoflowId(5), "1", 0, 10, reg.clone())).unwrap();
    h.core.handle_put(h.now, recovered(CoflowId(5), "2", 1, 10, reg.clone())).unwrap();
    let e = h.core.handle_put(h.now, recovered(CoflowId(5), "3", 2, 10, reg.clone())).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("max_pieces_per_coflow")), "{e}");
    let e = h.core.handle_put(h.now, recovered(CoflowId(6), "1", 0, 10, reg)).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("2 coflows registered (max_coflows)")), "{e}");
    assert_eq!(h.core.live_coflows(), 2);
}

/// The refusal at `max_coflows` counts what is registered, one coflow in the singular.
#[test]
fn a_coordinator_full_at_one_coflow_says_so() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { max_coflows: 1, ..Default::default() });
    h.register(1, CoflowOptions::default());
    let e = h.core.handle_register(h.now, Registration { num_flows: 1, ..Default::default() }).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m == "1 coflow registered (max_coflows)"), "{e}");
}

/// One identity holds at most `max_coflows_per_owner` coflows, registered or adopted, so that the
/// others still find places under `max_coflows`; an unregistered coflow gives its place back, and
/// coflows with no owner (token mode) are bounded by `max_coflows` only.
#[test]
fn one_owner_cannot_take_every_place() {
    let cfg = CoordinatorConfig { max_coflows: 5, max_coflows_per_owner: 2, ..Default::default() };
    let mut h = Harness::new("varys", 3, cfg);
    h.core.set_id_base(1000);
    let (a, b) = ("coflow://client/a", "coflow://client/b");
    let register = |h: &mut Harness, owner: &str| h.register_by(owner);
    let first = register(&mut h, a).unwrap();
    register(&mut h, a).unwrap();
    let e = register(&mut h, a).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("max_coflows_per_owner")), "{e}");
    assert_eq!(e.kind().as_str(), "limit-exceeded");
    // Adopting a previous run's coflow of the same owner is bounded alike.
    let reg = Some(Registration { owner: a.into(), ..old_registration() });
    let e = h.core.handle_put(h.now, recovered(CoflowId(5), "1", 0, 10, reg)).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("max_coflows_per_owner")), "{e}");
    register(&mut h, b).unwrap();
    h.core.handle_unregister(h.now, a, first).unwrap();
    register(&mut h, a).unwrap();
    register(&mut h, "").unwrap();
    register(&mut h, "").unwrap();
    let e = register(&mut h, "").unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("(max_coflows)")), "{e}");
    assert_eq!(h.core.live_coflows(), 5);
}

/// The coflows of one identity have at most `max_pieces_per_owner` pieces, across coflows, so
/// that one member cannot take the coordinator's memory; a piece withdrawn, lost with its agent or
/// dropped with its coflow gives its place back, another identity has places of its own, and
/// pieces with no owner (token mode) are not counted.
#[test]
fn one_owner_cannot_take_every_piece() {
    let cfg = CoordinatorConfig { max_pieces_per_owner: 3, ..Default::default() };
    let mut h = Harness::new("varys", 3, cfg);
    let (a, b) = ("coflow://client/a", "coflow://client/b");
    let register = |h: &mut Harness, owner: &str| h.register_by(owner).unwrap();
    let (x, y, z) = (register(&mut h, a), register(&mut h, a), register(&mut h, b));
    h.put_by(a, x, "1", 0).unwrap();
    h.put_by(a, x, "2", 1).unwrap();
    h.put_by(a, y, "1", 0).unwrap();
    let full = |h: &mut Harness, coflow, id| {
        let e = h.put_by(a, coflow, id, 0).unwrap_err();
        assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("max_pieces_per_owner")), "{e}");
    };
    full(&mut h, y, "2");
    for id in ["1", "2", "3"] {
        h.put_by(b, z, id, 2).unwrap();
    }
    // A piece its agent gave up announcing gives its place back.
    h.core.handle_withdraw_put(h.now, MachineId(1), x, &DataId::new("2").unwrap());
    h.put_by(a, y, "2", 2).unwrap();
    full(&mut h, y, "3");
    // So do the pieces of an agent that left, and those of an unregistered coflow.
    h.core.handle_deregister_agent(h.now, MachineId(2));
    h.put_by(a, y, "3", 0).unwrap();
    full(&mut h, y, "4");
    h.core.handle_unregister(h.now, a, x).unwrap();
    h.put_by(a, y, "4", 0).unwrap();
    full(&mut h, y, "5");
    let token = register(&mut h, "");
    for id in ["1", "2", "3", "4", "5"] {
        h.put(token, id, 0, 10).unwrap();
    }
}

/// A coflow belongs to the identity that registered it: another may neither unregister nor seal
/// it; the owner and the admin may; a coflow registered in token mode (no owner) is anyone's.
#[test]
fn only_the_owner_or_the_admin_changes_a_coflow() {
    let mut h = Harness::new("varys", 2, CoordinatorConfig::default());
    let owned = |h: &mut Harness, owner: &str| h.register_by(owner).unwrap();
    let (a, b) = ("coflow://client/a", "coflow://client/b");
    let c = owned(&mut h, a);
    for e in [h.core.handle_unregister(h.now, b, c).unwrap_err(), h.core.handle_seal(h.now, b, c).unwrap_err()] {
        assert!(matches!(e, CoordError::NotTheOwner { .. }), "{e}");
        assert_eq!(e.kind().as_str(), "permission-denied");
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::PermissionDenied);
    }
    assert_eq!(h.core.live_coflows(), 1, "refused: still there");
    h.core.handle_seal(h.now, a, c).unwrap();
    h.core.handle_unregister(h.now, a, c).unwrap();
    let c = owned(&mut h, a);
    h.core.handle_unregister(h.now, coflow_coordinator::ADMIN, c).unwrap();
    let c = owned(&mut h, "");
    h.core.handle_unregister(h.now, b, c).unwrap();
    assert_eq!(h.core.live_coflows(), 0);
}

/// Only a coflow's owner and the admin put pieces into it and get pieces from it: another
/// identity is refused before anything about the coflow's pieces is revealed (a piece that does
/// not exist and one that does are refused alike); a coflow with no owner is anyone's.
#[test]
fn only_the_owner_or_the_admin_puts_and_gets_in_a_coflow() {
    let mut h = Harness::new("varys", 2, CoordinatorConfig::default());
    let (a, b) = ("coflow://client/a", "coflow://client/b");
    let reg = Registration { num_flows: 2, owner: a.into(), ..Default::default() };
    let c = h.core.handle_register(h.now, reg).unwrap();
    let e = h.put_by(b, c, "p", 0).unwrap_err();
    assert!(matches!(e, CoordError::NotTheOwner { .. }), "{e}");
    assert_eq!(e.kind().as_str(), "permission-denied");
    h.put_by(a, c, "p", 0).unwrap();
    h.put_by(coflow_coordinator::ADMIN, c, "q", 0).unwrap();
    for id in ["p", "missing"] {
        let e = h.get_by(b, c, id, 1).unwrap_err();
        assert!(matches!(e, CoordError::NotTheOwner { .. }), "{id}: {e}");
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::PermissionDenied);
    }
    assert!(matches!(h.get_by("", c, "p", 1).unwrap_err(), CoordError::NotTheOwner { .. }), "no identity");
    h.get_by(a, c, "p", 1).unwrap();
    h.get_by(coflow_coordinator::ADMIN, c, "q", 1).unwrap();
    let anyone = h.core.handle_register(h.now, Registration { num_flows: 1, ..Default::default() }).unwrap();
    h.put_by(b, anyone, "p", 0).unwrap();
    h.get_by(a, anyone, "p", 1).unwrap();
}

/// A core that did not run for 10 s (its process was stopped) finds every agent silent past the
/// timeout, but not through their fault: none is declared dead for the gap, and one that stays
/// silent afterwards is declared dead a timeout later.
#[test]
fn a_pause_of_the_coordinator_is_not_an_agent_s_death() {
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 0, agent_timeout_ms: 1000, ..Default::default() };
    let mut h = Harness::new("varys", 3, cfg);
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 1000).unwrap();
    let g = h.get(c, "p", 1).unwrap();
    h.advance(0);
    h.drain();
    h.now = h.now + Nanos::from_secs(10);
    // The first thing the core hears after the pause: machine 2's heartbeat, queued meanwhile.
    assert!(h.heartbeat(2, vec![]));
    h.core.handle_timeout(h.now);
    h.collect();
    assert!(h.ended.is_empty(), "no agent is dead for the coordinator's own pause: {:?}", h.ended);
    assert!(h.core.rate(g.flow).is_some(), "the flow lives");
    assert_eq!(h.core.counters().pauses, 1);
    // Machines 0 and 1 stay silent from here on, with the core running: dead a timeout later.
    for _ in 0..12 {
        h.advance(100);
        h.heartbeat(2, vec![]);
    }
    h.collect();
    assert_eq!(h.ended, [MachineId(0), MachineId(1)]);
}

/// Unregister tells every agent to forget the coflow; a source declared dead fails its flows
/// and the receivers are told at once; failures are counted by reason.
#[test]
fn agents_are_told_of_dropped_coflows_and_failed_flows() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let a = h.register(1, CoflowOptions::default());
    h.put(a, "p", 0, 1000).unwrap();
    h.core.handle_unregister(h.now, "", a).unwrap();
    for m in 0..3 {
        assert_eq!(h.notices(m), [Notice::CoflowDropped(a)], "machine {m}");
    }

    let b = h.register(1, CoflowOptions::default());
    h.put(b, "p", 0, 1000).unwrap();
    let g = h.get(b, "p", 1).unwrap();
    h.put(b, "q", 2, 1000).unwrap();
    let g2 = h.get(b, "q", 1).unwrap();
    h.end(g2.flow, FlowOutcome::Failed("data-lost".into())).unwrap();
    // Machine 0 goes silent; 1 and 2 keep reporting.
    for _ in 0..40 {
        h.now = h.now + Nanos::from_millis(100);
        h.heartbeat(1, vec![]);
        h.heartbeat(2, vec![]);
        h.core.handle_timeout(h.now);
    }
    assert_eq!(h.notices(1), [Notice::FlowFailed(g.flow)], "the receiver is told");
    assert!(h.notices(2).is_empty());
    assert_eq!(h.ended, [MachineId(0)], "the dead agent's rate stream ends");
    let m = h.core.metrics();
    assert!(m.contains("flows_failed_by_reason_total{reason=\"agent-timed-out\"} 1\n"), "{m}");
    assert!(m.contains("flows_failed_by_reason_total{reason=\"data-lost\"} 1\n"), "{m}");
    assert!(m.contains("flows_timed_out_total{reason=\"agent-heartbeat\"} 1\n"), "{m}");
}

/// Unregistering a coflow ends its flows still running, failed `unknown-coflow`, and its
/// receivers learn of it from the drop notice: none goes on outside the policy at its sender's
/// port rate, which would let a member jump every queue by unregistering a large coflow as its
/// gets begin.
#[test]
fn unregistering_a_coflow_ends_its_running_flows_rather_than_serving_them_unpaced() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    // Both from machine 0: the larger waits behind the smaller.
    let small = h.register(1, CoflowOptions::default());
    h.put(small, "s", 0, 1_000).unwrap();
    let big = h.register(1, CoflowOptions::default());
    h.put(big, "b", 0, 100_000).unwrap();
    let (s, b) = (h.get(small, "s", 1).unwrap(), h.get(big, "b", 2).unwrap());
    h.advance(0);
    h.advance(100);
    let pushed = h.drain();
    assert_eq!((last_rate(&pushed, s.flow), last_rate(&pushed, b.flow).unwrap_or(0.0)), (Some(CAP), 0.0));

    h.core.handle_unregister(h.now, "", big).unwrap();
    h.advance(0);
    h.advance(100);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, b.flow), None, "the dropped coflow's flow gets no rate");
    for m in 0..3 {
        assert_eq!(h.notices(m), [Notice::CoflowDropped(big)], "machine {m}");
    }
    let e = h.end(b.flow, FlowOutcome::Completed).unwrap_err();
    assert!(matches!(e, CoordError::UnknownFlow(f) if f == b.flow), "{e}");
    let m = h.core.metrics();
    assert!(m.contains("flows_failed_by_reason_total{reason=\"unknown-coflow\"} 1\n"), "{m}");
    // The other coflow's flow keeps its rate and ends as usual.
    h.finish(s.flow);
}

#[test]
fn limits_on_coflows_and_pieces_are_typed_errors() {
    let cfg = CoordinatorConfig { max_coflows: 2, max_pieces_per_coflow: 2, ..Default::default() };
    let mut h = Harness::new("varys", 2, cfg);
    let a = h.register(1, CoflowOptions::default());
    let b = h.register(1, CoflowOptions::default());
    let reg = Registration { num_flows: 1, options: CoflowOptions::default(), ..Default::default() };
    let e = h.core.handle_register(h.now, reg.clone()).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("max_coflows")), "{e}");
    assert_eq!(e.kind().as_str(), "limit-exceeded");
    assert_eq!(tonic::Status::from(e).code(), tonic::Code::ResourceExhausted);
    h.put(a, "1", 0, 10).unwrap();
    h.put(a, "2", 0, 10).unwrap();
    let e = h.put(a, "3", 0, 10).unwrap_err();
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m.contains("max_pieces_per_coflow")), "{e}");
    // Unregistering makes room.
    h.core.handle_unregister(h.now, "", b).unwrap();
    assert!(h.core.handle_register(h.now, reg).is_ok());
}

/// The core says when it must run next: an agent's timeout when idle (one nanosecond past it,
/// when silence exceeds it), a readiness timeout, at once after an input that calls for a
/// decision, and the end of the push window while rates wait; nothing is sent before.
#[test]
fn the_core_says_when_it_must_run_next() {
    let cfg = CoordinatorConfig {
        bypass_threshold_bytes: 0,
        agent_timeout_ms: 1000,
        push_window_ms: 20,
        ..Default::default()
    };
    let mut h = Harness::new("fair", 3, cfg);
    let t0 = h.now;
    assert_eq!(h.core.poll_timeout(), Some(t0), "agents joined: decide at once");
    h.advance(0);
    let agent_due = |last_seen: Nanos| last_seen + Nanos::from_millis(1000) + Nanos(1);
    assert_eq!(h.core.poll_timeout(), Some(agent_due(t0)), "idle: the agents' timeouts");

    h.advance(500);
    for m in 0..3 {
        assert!(h.heartbeat(m, vec![]));
    }
    let reported = h.now;
    assert_eq!(h.core.poll_timeout(), Some(agent_due(reported)), "heartbeats put the timeouts off");

    // A get held for readiness: due at its coflow's timeout, and held until then.
    let opts =
        CoflowOptions { readiness: Readiness::AllGets { timeout: Nanos::from_millis(300) }, ..Default::default() };
    let c = h.register(2, opts);
    h.put(c, "a", 0, 1000).unwrap();
    let fa = h.get(c, "a", 1).unwrap();
    assert_eq!(h.core.poll_timeout(), Some(h.now + Nanos::from_millis(300)));
    h.advance(299);
    assert_eq!(last_rate(&h.drain(), fa.flow), None, "held");
    h.advance(1);
    assert_eq!(last_rate(&h.drain(), fa.flow), Some(CAP), "released at the timeout, pushed at once");
    let flushed = h.now;

    // Another coflow inside the push window: decided at once, pushed when the window ends.
    h.advance(5);
    let d = h.register(1, CoflowOptions::default());
    h.put(d, "x", 2, 1000).unwrap();
    let fx = h.get(d, "x", 1).unwrap();
    assert_eq!(h.core.poll_timeout(), Some(h.now), "a release calls for a decision at once");
    h.core.handle_timeout(h.now);
    assert_eq!(h.core.poll_timeout(), Some(flushed + Nanos::from_millis(20)), "the push window");
    assert_eq!(h.core.poll_transmit(), None, "nothing sent inside the window");
    h.now = flushed + Nanos::from_millis(20);
    h.core.handle_timeout(h.now);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fa.flow), Some(CAP / 2.0));
    assert_eq!(last_rate(&pushed, fx.flow), Some(CAP / 2.0));

    // An agent silent for exactly the timeout is alive; one nanosecond more and it is not.
    let due = h.core.poll_timeout().unwrap();
    assert_eq!(due, agent_due(reported), "the heartbeats at 500 ms were the last");
    h.now = due - Nanos(1);
    h.core.handle_timeout(h.now);
    h.collect();
    assert!(h.ended.is_empty(), "silent for exactly the timeout: alive");
    assert!(h.heartbeat(2, vec![]));
    h.now = due;
    h.core.handle_timeout(h.now);
    h.collect();
    assert_eq!(h.ended, [MachineId(0), MachineId(1)], "silent past the timeout: declared dead");
}

/// A coflow the policy's admission control refuses stays in the policy as best effort: paced on
/// what the admitted coflows' guarantees leave, never unpaced over them, and not bypassing.
#[test]
fn a_rejected_coflow_is_served_as_best_effort_below_the_guarantees() {
    let mut h =
        Harness::new("varys-deadline", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    // A: 1,000 bytes into machine 2 within 20 s, paced to end 100 ms before (the margin):
    // 1,000 / 19.9 bytes/s of its 100, admitted, and alone it gets the whole port.
    let a = h.register(1, CoflowOptions { deadline: Some(Nanos::from_secs(20)), ..Default::default() });
    h.put(a, "a", 0, 1_000).unwrap();
    let fa = h.get(a, "a", 2).unwrap();
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), fa.flow), Some(CAP));
    // B: 10,000 bytes into machine 2 within 1 s cannot be met: rejected.
    let b = h.register(1, CoflowOptions { deadline: Some(Nanos::from_secs(1)), ..Default::default() });
    h.put(b, "b", 1, 10_000).unwrap();
    let fb = h.get(b, "b", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    let (ra, rb) = (last_rate(&pushed, fa.flow).unwrap(), last_rate(&pushed, fb.flow).unwrap());
    let guarantee = 1_000.0 / 19.9;
    assert!((ra - guarantee).abs() < 1e-6, "A keeps its guarantee: {ra}");
    assert!((rb - (CAP - guarantee)).abs() < 1e-6, "B gets what A leaves: {rb}");
    assert_eq!(h.core.scheduled_coflows(), 2, "both in the policy");
    assert!(h.core.status().coflows.iter().all(|v| !v.bypass));
    h.finish(fa.flow);
    h.finish(fb.flow);
    assert_eq!(h.core.counters().flows_finished, 2);
}

#[test]
fn a_flow_report_names_its_outcome() {
    assert_eq!(FlowOutcome::from_report(true, String::new()), FlowOutcome::Completed);
    assert_eq!(FlowOutcome::from_report(true, "data-lost".into()), FlowOutcome::Completed);
    assert_eq!(FlowOutcome::from_report(false, String::new()), FlowOutcome::Failed("unspecified".into()));
    assert_eq!(FlowOutcome::from_report(false, "data-lost".into()), FlowOutcome::Failed("data-lost".into()));
    // What is no error kind counts as `other`: the coordinator's own endings among them, and
    // anything that would add a reason to count.
    for odd in ["rerouted", "split", "agent-restarted", "Data-Lost", "x\ny", &"a".repeat(10_000)] {
        assert_eq!(FlowOutcome::from_report(false, odd.into()), FlowOutcome::Failed("other".into()), "{odd}");
    }
}

/// A coflow with no flow yet has a rate of zero in the status JSON, not the -0 of a float sum of
/// nothing.
#[test]
fn a_coflow_without_flows_has_a_rate_of_plain_zero() {
    let mut h = Harness::new("varys", 2, CoordinatorConfig::default());
    h.register(1, CoflowOptions::default());
    let json = coflow_coordinator::status_json(&h.core.status());
    assert_eq!(json["coflows"][0]["rate"].to_string(), "0.0", "{json}");
}

/// An agent that reports its flows' failures under names of its own makes the coordinator count
/// no more reasons than the error kinds, and ends no flow as rerouted.
#[test]
fn reported_failure_reasons_stay_a_small_set() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let c = h.register(1, CoflowOptions::default());
    for i in 0..50 {
        h.put(c, &format!("p{i}"), 0, 1_000).unwrap();
        let g = h.get(c, &format!("p{i}"), 2).unwrap();
        let reason = if i % 2 == 0 { format!("made-up-{i}") } else { "rerouted".into() };
        h.end(g.flow, FlowOutcome::from_report(false, reason)).unwrap();
    }
    let reasons: Vec<_> = h.core.failures().collect();
    assert_eq!(reasons, [("other", 50)]);
    assert_eq!((h.core.counters().flows_failed, h.core.counters().flows_rerouted), (50, 0));
}

/// An agent that registers again has restarted: its rate stream ends, the pieces it held are
/// gone, its flows fail as `agent-restarted` and their receivers are told; the stream it opens
/// next carries its rates again.
#[test]
fn an_agent_that_registers_again_starts_afresh() {
    let mut h = Harness::new("varys", 3, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let c = h.register(2, CoflowOptions::default());
    h.put(c, "a", 0, 1000).unwrap();
    let g = h.get(c, "a", 1).unwrap();
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), g.flow), Some(CAP));
    let again = AgentRegistration {
        machine: MachineId(0),
        data_addr: "127.0.0.1:9100".parse().unwrap(),
        port_rate: CAP,
        datacenter: String::new(),
    };
    h.core.handle_register_agent(h.now, again).unwrap();
    h.collect();
    assert_eq!(h.ended, [MachineId(0)], "its old stream ends");
    assert_eq!(h.notices(1), [Notice::FlowFailed(g.flow)], "the receiver is told");
    assert_eq!(h.core.rate(g.flow), None);
    assert!(matches!(h.get(c, "a", 1), Err(CoordError::NoSuchData { .. })), "its pieces are gone");
    let m = h.core.metrics();
    assert!(m.contains("flows_failed_by_reason_total{reason=\"agent-restarted\"} 1\n"), "{m}");

    assert!(h.core.handle_watch(h.now, MachineId(0)).is_empty(), "nothing in force for it");
    h.put(c, "b", 0, 1000).unwrap();
    let g = h.get(c, "b", 2).unwrap();
    h.advance(10);
    assert_eq!(last_rate(&h.drain(), g.flow), Some(CAP), "its new stream carries its rates");
}
