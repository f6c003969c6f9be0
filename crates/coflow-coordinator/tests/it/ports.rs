//! A big switch's ports as measured: a host whose link carries less than its agent registered
//! is offered what it carries, and a healthy one keeps its rate.

use std::collections::BTreeMap;

use coflow_coordinator::{CoordinatorConfig, Core};
use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::CoflowOptions;

use super::{Harness, by_name};

const RATE: f64 = 1000.0;

/// `machines` agents at `RATE` under `policy`, nothing bypassed.
fn harness(policy: &str, machines: usize) -> Harness {
    let cfg = CoordinatorConfig { policy: policy.into(), bypass_threshold_bytes: 0, ..Default::default() };
    Harness::with_core(Core::new(cfg, by_name(policy)), &vec![RATE; machines])
}

/// The network: each machine's uplink and downlink carry at most these bytes per second, and a
/// healthy port moves `HEALTHY` of what it is asked (an agent's port cap, a little short).
struct Network {
    up: Vec<f64>,
    down: Vec<f64>,
    /// Each flow: its sender, receiver, and the bytes it has moved.
    flows: BTreeMap<FlowId, (u32, u32, u64)>,
}

const HEALTHY: f64 = 0.97;

impl Network {
    /// `ms` milliseconds of reports every 100 ms, each flow moving at its assigned rate as far
    /// as its ports let it (a port asked more than it carries shares what it carries by rate).
    fn run(&mut self, h: &mut Harness, ms: u64) {
        let machines = self.up.len() as u32;
        for _ in 0..ms / 100 {
            // The rates in force over the next 100 ms.
            let rates: BTreeMap<FlowId, f64> =
                self.flows.keys().map(|f| (*f, h.core.rate(*f).unwrap_or(0.0))).collect();
            let rate = |f: &FlowId| rates[f];
            h.advance(100);
            let (mut up, mut down) = (vec![0.0; self.up.len()], vec![0.0; self.down.len()]);
            for (f, &(s, d, _)) in &self.flows {
                up[s as usize] += rate(f);
                down[d as usize] += rate(f);
            }
            let share = |asked: f64, cap: f64| if asked > cap { cap / asked } else { HEALTHY };
            let mut reports: BTreeMap<u32, Vec<(FlowId, u64)>> = BTreeMap::new();
            for (f, (s, d, sent)) in self.flows.iter_mut() {
                let k =
                    share(up[*s as usize], self.up[*s as usize]).min(share(down[*d as usize], self.down[*d as usize]));
                *sent += (rate(f) * k * 0.1).round() as u64;
                reports.entry(*s).or_default().push((*f, *sent));
            }
            for m in 0..machines {
                assert!(h.heartbeat(m, reports.remove(&m).unwrap_or_default()));
            }
            h.drain();
        }
    }

    fn rates(&self, h: &Harness, src: u32) -> f64 {
        self.flows.iter().filter(|(_, f)| f.0 == src).map(|(id, _)| h.core.rate(*id).unwrap_or(0.0)).sum()
    }
}

fn ports(h: &Harness, m: u32) -> (f64, f64) {
    let a = h.core.agents().find(|a| a.machine == MachineId(m)).unwrap();
    (a.uplink_bps, a.downlink_bps)
}

/// Machine 0's link carries half its rate both ways; it sends to 2 and 3, and 1 sends to 4 at
/// its whole rate. Within a few periods the coordinator offers machine 0's uplink about what it
/// carries (within a tenth below, for what a port moves short of its rate, and at most a probe
/// above) and its flows' rates add up to that, while machine 1 keeps
/// its whole rate and its receivers' ports are never taken for slow.
#[test]
fn a_host_whose_link_fell_is_offered_what_it_carries() {
    for policy in ["varys", "fair"] {
        let mut h = harness(policy, 5);
        let c = h.register(2, CoflowOptions::default());
        let d = h.register(1, CoflowOptions::default());
        let mut net = Network { up: vec![RATE; 5], down: vec![RATE; 5], flows: BTreeMap::new() };
        net.up[0] = RATE / 2.0;
        net.down[0] = RATE / 2.0;
        for (coflow, id, src, dst) in [(c, "a", 0, 2), (c, "b", 0, 3), (d, "x", 1, 4)] {
            h.put(coflow, id, src, 1 << 40).unwrap();
            let g = h.get(coflow, id, dst).unwrap();
            net.flows.insert(g.flow, (src, dst, 0));
        }
        h.advance(0);
        h.drain();
        assert_eq!(net.rates(&h, 0), RATE, "{policy}: the slow host is first offered its registered rate");
        net.run(&mut h, 2000);
        let (up, down) = ports(&h, 0);
        assert!((450.0..=500.0 * 1.26).contains(&up), "{policy}: uplink measured at {up}");
        assert_eq!(down, RATE, "{policy}: a downlink asked nothing is not judged");
        // From then on its flows are offered what its uplink carries, within a probe.
        for _ in 0..10 {
            net.run(&mut h, 200);
            let offered = net.rates(&h, 0);
            assert!((450.0..=500.0 * 1.26).contains(&offered), "{policy}: offered {offered}");
        }
        assert_eq!(net.rates(&h, 1), RATE, "{policy}: the healthy host keeps its whole rate");
        for m in 1..5 {
            assert_eq!(ports(&h, m), (RATE, RATE), "{policy}: machine {m}'s ports");
        }
    }
}

/// Two machines under `varys`, and one flow from machine 0 to 1, granted.
fn lone_flow() -> (Harness, FlowId) {
    let mut h = harness("varys", 2);
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "a", 0, 1 << 40).unwrap();
    let flow = h.get(c, "a", 1).unwrap().flow;
    h.advance(0);
    h.drain();
    (h, flow)
}

/// Machine 0 sends one flow to machine 1 and nothing else crosses either port; after 300 ms the
/// receiving client stops reading, so the flow moves nothing. Its receiver's agent reports it
/// unread, even late, and neither port is taken for slow: machine 0's next flows would be offered its whole
/// uplink. Unreported, the two ports cannot be told from a dead link, and the stall is put down
/// to the sender's uplink.
#[test]
fn a_lone_flow_whose_reader_stopped_is_no_ports_fault_once_reported() {
    for reported in [true, false] {
        let (mut h, flow) = lone_flow();
        let mut sent = 0;
        for step in 0..30 {
            let rate = h.core.rate(flow).unwrap_or(0.0);
            h.advance(100);
            let reading = step < 3;
            if reading {
                sent += (rate * HEALTHY * 0.1).round() as u64;
            }
            assert!(h.heartbeat(0, vec![(flow, sent)]));
            // The report comes 400 ms after the flow stalled, in the period after: what the
            // flow moved before it, in that period, is no sample of its ports either.
            let unread = if reported && step >= 7 { vec![flow] } else { Vec::new() };
            assert!(h.heartbeat_unread(1, Vec::new(), unread));
            h.drain();
        }
        let (up, down) = ports(&h, 0);
        if reported {
            assert_eq!((up, down, ports(&h, 1)), (RATE, RATE, (RATE, RATE)), "reported unread");
        } else {
            assert!(up < RATE / 2.0, "unreported, the sender's uplink is taken for slow: {up}");
        }
    }
}

/// Machine 0 sends one flow to machine 1, whose agent freezes after 300 ms (stopped, its host
/// gone): it sends no heartbeat, so it cannot report its reader, and the flow moves nothing. A
/// receiver silent for three heartbeats speaks for none of its pairs: the sender's uplink keeps
/// its whole rate while the receiver is silent, and after it is declared dead. Were the silent
/// agent's pairs judged, the stall would be put down to the sender's uplink, as when a live
/// receiver does not report its reader (above).
#[test]
fn a_frozen_receiver_is_no_fault_of_its_senders_uplink() {
    let (mut h, flow) = lone_flow();
    let (mut sent, mut lowest) = (0, f64::INFINITY);
    for step in 0..60 {
        let rate = h.core.rate(flow);
        h.advance(100);
        if step < 3 {
            sent += (rate.unwrap_or(0.0) * HEALTHY * 0.1).round() as u64;
        }
        let listed = if rate.is_some() { vec![(flow, sent)] } else { Vec::new() };
        assert!(h.heartbeat(0, listed));
        if step < 3 {
            assert!(h.heartbeat(1, Vec::new()));
        }
        h.drain();
        lowest = lowest.min(ports(&h, 0).0);
    }
    assert!(h.core.rate(flow).is_none(), "the frozen receiver was declared dead and its flow failed");
    assert_eq!(lowest, RATE, "the sender's uplink while its receiver was silent and after");
}

/// Agents set their own heartbeat interval: two that report once a second to a coordinator
/// that expects a report every 100 ms are not taken for silent, and the sender's uplink, which
/// carries half its rate, is measured so.
#[test]
fn agents_that_report_seldom_are_still_measured() {
    let (mut h, flow) = lone_flow();
    let mut sent = 0;
    for _ in 0..20 {
        let rate = h.core.rate(flow).unwrap_or(0.0);
        h.advance(1000);
        sent += (rate.min(RATE / 2.0) * HEALTHY).round() as u64;
        assert!(h.heartbeat(0, vec![(flow, sent)]));
        assert!(h.heartbeat(1, Vec::new()));
        h.drain();
    }
    let up = ports(&h, 0).0;
    assert!(up < 0.6 * RATE, "the sender's uplink carries half its rate: {up}");
    assert_eq!(ports(&h, 1), (RATE, RATE), "the receiver's ports kept up");
}

/// A lone flow from machine 0 to 1 moves at its rate for 5 s, then nothing for 14 s: while its
/// receiver lists it (a client holding its get back), dropping the listing for one heartbeat
/// every 2 s, no port is judged by it however long that lasts (a client that reads slowly for
/// minutes holds back only its own flow); once the receiver lists it no more, the stall is put
/// down to the sender's uplink. The sender lists the flow all along, which counts for nothing:
/// only its receiver speaks for it.
#[test]
fn a_flow_listed_unread_is_no_ports_fault_for_as_long_as_it_is_listed() {
    let (mut h, flow) = lone_flow();
    let (mut sent, mut lowest) = (0, f64::INFINITY);
    for step in 1..=190 {
        let rate = h.core.rate(flow).unwrap_or(0.0);
        h.advance(100);
        if step <= 50 {
            sent += (rate * HEALTHY * 0.1).round() as u64;
        }
        assert!(h.heartbeat_unread(0, vec![(flow, sent)], vec![flow]));
        let unread = if (51..=150).contains(&step) && step % 20 != 0 { vec![flow] } else { Vec::new() };
        assert!(h.heartbeat_unread(1, Vec::new(), unread));
        h.drain();
        if step <= 150 {
            lowest = lowest.min(ports(&h, 0).0);
        }
    }
    assert_eq!(lowest, RATE, "while the receiver lists it");
    let up = ports(&h, 0).0;
    assert!(up < RATE / 2.0, "unlisted, the stall is put down to the sender's uplink: {up}");
}

/// Pieces `a` and `b` of the given coflows and sizes put on machine 0 and got on machine 1: their
/// flows, once decided for.
fn zero_to_one(h: &mut Harness, pieces: [(CoflowId, u64); 2]) -> (FlowId, FlowId) {
    let [fa, fb] = [("a", pieces[0]), ("b", pieces[1])].map(|(id, (c, size))| {
        h.put(c, id, 0, size).unwrap();
        h.get(c, id, 1).unwrap().flow
    });
    h.advance(0);
    h.drain();
    (fa, fb)
}

/// The rates of flows `fa` and `fb` (zero for one without).
fn rates(h: &Harness, fa: FlowId, fb: FlowId) -> (f64, f64) {
    (h.core.rate(fa).unwrap_or(0.0), h.core.rate(fb).unwrap_or(0.0))
}

/// Two coflows from machine 0 to machine 1 under `varys`: the smaller comes first, with the whole
/// of both ports, and the larger waits. Once the receiver lists the smaller's flow held back, its
/// client taking a tenth of the rate, the flow gets half as much again as its client reads and
/// the larger coflow the rest of the ports; listed no more (its client keeps up), the policy has
/// the flow back.
#[test]
fn a_flow_held_back_by_its_reader_gets_what_it_reads_and_the_rest_goes_to_others() {
    let mut h = harness("varys", 2);
    let (a, b) = (h.register(1, CoflowOptions::default()), h.register(1, CoflowOptions::default()));
    let (fa, fb) = zero_to_one(&mut h, [(a, 1 << 30), (b, 1 << 40)]);
    let rates = |h: &Harness| rates(h, fa, fb);
    assert_eq!(rates(&h), (RATE, 0.0), "the smaller coflow first");
    let (mut sa, mut sb) = (0, 0);
    for step in 1..=30 {
        let (ra, rb) = rates(&h);
        h.advance(100);
        // The client reads a tenth of the rate for 2 s, however much more its flow is given, then
        // keeps up.
        let reads = if step <= 20 { RATE / 10.0 } else { RATE };
        sa += (ra.min(reads) * 0.1).round() as u64;
        sb += (rb * 0.1).round() as u64;
        assert!(h.heartbeat(0, vec![(fa, sa), (fb, sb)]));
        let listed = if step <= 20 { vec![fa] } else { Vec::new() };
        assert!(h.heartbeat_unread(1, Vec::new(), listed));
        h.drain();
        if step == 20 {
            let (ra, rb) = rates(&h);
            assert!((ra - 1.5 * RATE / 10.0).abs() < 1.0, "held back: half as much again as its client reads, {ra}");
            assert!((ra + rb - RATE).abs() < 1.0, "the larger coflow takes the rest: {rb}");
        }
    }
    let (ra, rb) = rates(&h);
    assert!((ra - RATE).abs() < 1e-6 && rb == 0.0, "listed no more, the policy has it back: {ra}, {rb}");
}

/// Under `fair`, two flows from machine 0 to machine 1 get half the ports each. One's receiver
/// lists it held back all along, while its client takes whatever comes in bursts (its pace is its
/// rate): its reservation never passes the half the policy gave it when it was first held back,
/// however often the pace calls for another, and the other flow keeps its half.
#[test]
fn a_reservation_never_passes_what_the_policy_gave_the_flow() {
    let mut h = harness("fair", 2);
    let c = h.register(2, CoflowOptions::default());
    let (fa, fb) = zero_to_one(&mut h, [(c, 1 << 40), (c, 1 << 40)]);
    let rates = |h: &Harness| rates(h, fa, fb);
    assert_eq!(rates(&h), (RATE / 2.0, RATE / 2.0));
    let (mut sa, mut sb) = (0, 0);
    for _ in 0..30 {
        let (ra, rb) = rates(&h);
        h.advance(100);
        sa += (ra * 0.1).round() as u64;
        sb += (rb * 0.1).round() as u64;
        assert!(h.heartbeat(0, vec![(fa, sa), (fb, sb)]));
        assert!(h.heartbeat_unread(1, Vec::new(), vec![fa]));
        h.drain();
        let (ra, rb) = rates(&h);
        assert!(ra <= RATE / 2.0 + 1e-6 && rb >= RATE / 2.0 - 1e-6, "held back {ra}, the other {rb}");
    }
}

/// Machine 0's downlink carries half its rate; machines 1 and 2 send to it. The shortfall is its
/// downlink's, not its senders' uplinks'.
#[test]
fn a_slow_receiver_is_told_from_its_senders() {
    let mut h = harness("fair", 3);
    let c = h.register(2, CoflowOptions::default());
    let mut net = Network { up: vec![RATE; 3], down: vec![RATE; 3], flows: BTreeMap::new() };
    net.down[0] = RATE / 2.0;
    for (id, src) in [("a", 1), ("b", 2)] {
        h.put(c, id, src, 1 << 40).unwrap();
        let g = h.get(c, id, 0).unwrap();
        net.flows.insert(g.flow, (src, 0, 0));
    }
    h.advance(0);
    net.run(&mut h, 2000);
    let (_, down) = ports(&h, 0);
    assert!((450.0..=500.0 * 1.26).contains(&down), "downlink measured at {down}");
    for m in [1, 2] {
        assert_eq!(ports(&h, m), (RATE, RATE), "machine {m}'s ports");
    }
    let offered = net.rates(&h, 1) + net.rates(&h, 2);
    assert!((450.0..=500.0 * 1.26).contains(&offered), "offered {offered}");
}
