//! The coordinator on a wide area: agents name their datacenters, flows inside one go
//! unscheduled, flows between two are scheduled on their link, and a link's bandwidth is what its
//! flows were measured to carry.

use coflow_coordinator::{CoordError, CoordinatorConfig, Core, FlowOutcome, Notice};
use coflow_core::{FlowId, MachineId, Nanos};
use coflow_proto::{AgentRegistration, CoflowOptions, DataId, ErrorKind, GetAnnouncement};
use coflow_sched::{Bandwidth, Link, WideArea};

use super::{CAP, Harness, by_name, last_rate};

/// Two datacenters `a` and `b`, each link at `bw` bytes per second.
fn two_dcs(bw: f64) -> WideArea {
    let link = |from, to| Link { from, to, bandwidth: Bandwidth::Constant(bw) };
    WideArea { datacenters: vec!["a".into(), "b".into()], links: vec![link(0, 1), link(1, 0)] }
}

fn config(policy: &str, wa: WideArea) -> CoordinatorConfig {
    CoordinatorConfig {
        policy: policy.into(),
        bypass_threshold_bytes: 0,
        topology: Some("test".into()),
        wide_area: Some(wa),
        ..CoordinatorConfig::default()
    }
}

/// Machines 0 and 1 in `a`, 2 and 3 in `b`.
fn harness(policy: &str, bw: f64) -> Harness {
    let cfg = config(policy, two_dcs(bw));
    cfg.validate().unwrap();
    let core = Core::new(cfg, by_name(policy));
    Harness::with_datacenters(core, &[CAP; 4], &["a", "a", "b", "b"])
}

#[test]
fn an_agent_must_name_one_of_the_wide_areas_datacenters() {
    let mut core = Core::new(config("mrtf", two_dcs(1e6)), by_name("mrtf"));
    let reg = |datacenter: &str| AgentRegistration {
        machine: MachineId(0),
        data_addr: "127.0.0.1:9000".parse().unwrap(),
        port_rate: CAP,
        datacenter: datacenter.into(),
    };
    for bad in ["", "c"] {
        let e = core.handle_register_agent(Nanos::ZERO, reg(bad)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
        assert!(e.to_string().contains("datacenter"), "{e}");
    }
    assert_eq!(core.agents_alive(), 0);
    core.handle_register_agent(Nanos::ZERO, reg("b")).unwrap();
    assert_eq!(core.agents_alive(), 1);
}

#[test]
fn a_topology_without_a_link_between_two_datacenters_is_refused() {
    let mut wa = two_dcs(1e6);
    wa.links.pop();
    let e = config("mrtf", wa).validate().unwrap_err();
    assert_eq!(e.field, "topology", "{e}");
    assert!(e.reason.starts_with("no link from datacenter \"b\" to \"a\""), "named as the file names them: {e}");
    // Named but not read into `wide_area`: refused too, rather than run as a big switch.
    let e = CoordinatorConfig { topology: Some("x.json".into()), ..CoordinatorConfig::default() }.validate();
    assert_eq!(e.unwrap_err().field, "topology");
    // A policy that assumes the big switch cannot run on it.
    assert_eq!(config("pfp", two_dcs(1e6)).validate().unwrap_err().field, "policy");
    // Multi-path on a big switch has no detour to take.
    let e = CoordinatorConfig { multipath: true, ..CoordinatorConfig::default() }.validate();
    assert_eq!(e.unwrap_err().field, "multipath");
}

/// A link slower than the agents' data plane can pace (1e-5 Gbit/s: a 4 KiB frame every 3 s, none
/// in a 400 ms measurement period) would be measured at nothing and stall a get across it with no
/// error: it is refused at validation, the error naming the link and its field; 800 kbit/s, the
/// least, is taken.
#[test]
fn a_link_slower_than_the_data_plane_can_pace_is_refused() {
    let gbps = 125_000_000.0;
    let e = config("mrtf", two_dcs(1e-5 * gbps)).validate().unwrap_err();
    assert_eq!(e.field, "topology", "{e}");
    assert!(
        e.reason.starts_with("links[0].constant_gbps (a -> b): a mean of 1e-5 Gbit/s is below the 0.0008 Gbit/s"),
        "{e}"
    );
    let mut wa = two_dcs(gbps);
    wa.links[1].bandwidth = Bandwidth::Uniform(1e-300, 1e-6 * gbps);
    let e = config("mrtf", wa).validate().unwrap_err();
    assert!(e.reason.starts_with("links[1].uniform_gbps (b -> a): a mean of 5e-7 Gbit/s"), "{e}");
    config("mrtf", two_dcs(0.0008 * gbps)).validate().unwrap();
}

/// A flow inside a datacenter crosses nothing scheduled: it goes unscheduled (not paced). Two
/// coflows across the one link a -> b: `mrtf` serves the one with less time left first at the
/// link's whole bandwidth, and the other waits.
#[test]
fn mrtf_orders_coflows_on_their_link_and_leaves_a_datacenters_own_flows_alone() {
    let mut h = harness("mrtf", 1e6);
    let local = h.register(1, CoflowOptions::default());
    h.put(local, "l", 0, 1_000).unwrap();
    let fl = h.get(local, "l", 1).unwrap();
    let big = h.register(1, CoflowOptions::default());
    h.put(big, "b", 0, 10_000).unwrap();
    let fb = h.get(big, "b", 2).unwrap();
    let small = h.register(1, CoflowOptions::default());
    h.put(small, "s", 1, 1_000).unwrap();
    let fs = h.get(small, "s", 3).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, fl.flow), Some(f64::INFINITY), "inside a datacenter: not paced");
    assert_eq!(last_rate(&pushed, fs.flow), Some(1e6), "the coflow with less time left takes the link");
    assert_eq!(last_rate(&pushed, fb.flow).unwrap_or(0.0), 0.0, "the other waits");
}

/// A link that carries half of what it is asked was the bottleneck: the coordinator measures it,
/// takes the measurement as the link's bandwidth and decides again; a link that then keeps up
/// with all it is asked is offered more (the probe), until it falls short again.
#[test]
fn a_links_bandwidth_is_what_its_flows_were_measured_to_carry() {
    let mut h = harness("mrtf", 1e7);
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 1_000_000_000_000).unwrap();
    let f = h.get(c, "p", 2).unwrap();
    h.advance(0);
    assert!((last_rate(&h.drain(), f.flow).unwrap() - 1e7).abs() < 1e-6);
    // The source reports every 100 ms what it sent; the link carries at most `link` B/s.
    let mut sent = 0u64;
    let mut rate: f64 = 1e7;
    let mut run = |h: &mut Harness, link: f64, ms: u64| {
        let mut rates = Vec::new();
        for _ in 0..ms / 100 {
            h.advance(100);
            sent += (rate.min(link) * 0.1).max(1.0) as u64;
            assert!(h.heartbeat(0, vec![(f.flow, sent)]));
            for m in 1..4 {
                assert!(h.heartbeat(m, Vec::new()));
            }
            if let Some(r) = last_rate(&h.drain(), f.flow) {
                rate = r;
                rates.push(r);
            }
        }
        rates
    };
    // The link carries 5 MB/s, half of what it is asked: within a few periods the coordinator
    // takes 5 MB/s for its bandwidth.
    let rates = run(&mut h, 5e6, 2000);
    assert!(rates.iter().any(|&r| (r - 5e6).abs() < 1e4), "{rates:?}");
    assert!(h.core.link_estimates()[0].1 >= 1, "samples were taken");
    // From then on it is offered at most a probe above what it carries, and never less.
    let rates = run(&mut h, 5e6, 4000);
    assert!(rates.iter().all(|&r| (4.99e6..=5e6 * 1.26).contains(&r)), "{rates:?}");
    // The link grows to 20 MB/s: the offers grow with it, by a probe a period.
    let rates = run(&mut h, 2e7, 4000);
    assert!(rates.last().is_some_and(|&r| r >= 1.9e7), "{rates:?}");
    assert_eq!(h.core.link_estimates()[1].1, 0, "the other link was asked nothing and measured nothing");
}

/// A flow's rate on a link is never decided for a machine with no datacenter: registration
/// refuses it, so every scheduled flow has a link or none.
#[test]
fn a_get_across_datacenters_is_scheduled_on_the_link_between_them() {
    let mut h = harness("siphon-mc", 1e6);
    let c = h.register(2, CoflowOptions::default());
    h.put(c, "x", 0, 500).unwrap();
    h.put(c, "y", 3, 500).unwrap();
    let a_to_b = h.get(c, "x", 2).unwrap();
    let b_to_a = h.get(c, "y", 1).unwrap();
    h.advance(0);
    let pushed = h.drain();
    assert_eq!(last_rate(&pushed, a_to_b.flow), Some(1e6));
    assert_eq!(last_rate(&pushed, b_to_a.flow), Some(1e6), "each direction is a link of its own");
    h.finish(a_to_b.flow);
    let e = h.end(a_to_b.flow, coflow_coordinator::FlowOutcome::Completed).unwrap_err();
    assert!(matches!(e, CoordError::UnknownFlow(FlowId(_))), "{e}");
}

/// Three datacenters `a`, `b`, `c`, one machine each (0, 1, 2): the link a -> b at `slow`, every
/// other link at 10 MB/s; mrtf with multi-path routing.
fn three_dcs(slow: f64) -> Harness {
    three_dcs_with(slow, &["a", "b", "c"])
}

/// [`three_dcs`] with machine `m` in datacenter `machines[m]`.
fn three_dcs_with(slow: f64, machines: &[&str]) -> Harness {
    let cfg = three_dcs_config(slow);
    Harness::with_datacenters(Core::new(cfg, by_name("mrtf")), &vec![CAP; machines.len()], machines)
}

/// The configuration of [`three_dcs`]: multi-path routing under `mrtf`.
fn three_dcs_config(slow: f64) -> CoordinatorConfig {
    let mut links = Vec::new();
    for from in 0..3 {
        for to in 0..3 {
            if from != to {
                let bw = if (from, to) == (0, 1) { slow } else { 1e7 };
                links.push(Link { from, to, bandwidth: Bandwidth::Constant(bw) });
            }
        }
    }
    let wa = WideArea { datacenters: vec!["a".into(), "b".into(), "c".into()], links };
    let cfg = CoordinatorConfig { multipath: true, ..config("mrtf", wa) };
    cfg.validate().unwrap();
    cfg
}

fn resume(
    h: &mut Harness,
    coflow: coflow_core::CoflowId,
    id: &str,
    flow: FlowId,
    at: u64,
) -> coflow_coordinator::FlowGrant {
    resume_by(h, 1, coflow, id, flow, at)
}

/// A resume by receiver `machine`.
fn resume_by(
    h: &mut Harness,
    machine: u32,
    coflow: coflow_core::CoflowId,
    id: &str,
    flow: FlowId,
    at: u64,
) -> coflow_coordinator::FlowGrant {
    let g = GetAnnouncement {
        coflow,
        data_id: DataId::new(id).unwrap(),
        machine: MachineId(machine),
        client: String::new(),
        resume: Some((flow, at)),
        resume_end: None,
    };
    h.core.handle_get(h.now, g).unwrap()
}

/// A grant's parts as `(offset, length, relay)`.
/// A get of 1.1 MB from `a` to `b` on [`three_dcs`] at 100 B/s, which the coordinator plans over
/// detours: its receiver is told to resume it.
fn planned_over_detours() -> (Harness, coflow_core::CoflowId, coflow_coordinator::FlowGrant) {
    planned_over_detours_on(three_dcs(1e6))
}

/// [`planned_over_detours`] on `h`.
fn planned_over_detours_on(mut h: Harness) -> (Harness, coflow_core::CoflowId, coflow_coordinator::FlowGrant) {
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 1_100_000).unwrap();
    let g = h.get(c, "p", 1).unwrap();
    h.advance(20);
    assert_eq!(h.notices(1), vec![Notice::Reroute(g.flow)]);
    (h, c, g)
}

fn parts_of(r: &coflow_coordinator::FlowGrant) -> Vec<(u64, u64, Option<MachineId>)> {
    r.parts.iter().map(|p| (p.offset, p.length, p.via.as_ref().map(|v| v.machine))).collect()
}

/// A tenth of a second: machine 0 reports `flows`, every other machine nothing.
fn beat(h: &mut Harness, flows: Vec<(FlowId, u64)>) {
    h.advance(100);
    h.heartbeat(0, flows);
    for m in 1..h.notices.len() as u32 {
        h.heartbeat(m, Vec::new());
    }
}

/// Receiver 1 resumes grant `g` of coflow `c` from its start, partly through the relay of `c`
/// (machine 2), then cuts that part 1,000 bytes in, not having reached the relay: the rest is
/// planned direct. Returns where the rest starts, and its grant.
fn blame_the_relay(
    h: &mut Harness,
    c: coflow_core::CoflowId,
    g: &coflow_coordinator::FlowGrant,
) -> (u64, coflow_coordinator::FlowGrant) {
    let r = resume(h, c, "p", g.flow, 0);
    let relayed = r.parts.iter().find(|p| p.via.is_some()).expect("a part through c").clone();
    assert_eq!(relayed.via.as_ref().map(|v| v.machine), Some(MachineId(2)));
    h.advance(0);
    let at = relayed.offset + 1000;
    let again = resume(h, c, "p", relayed.flow, at);
    assert_eq!(parts_of(&again), vec![(at, relayed.length - 1000, None)], "not through the relay that failed");
    (at, again)
}

/// Receiver 1, which never reached its source directly, resumes the rest of `again` (from
/// `at`): it goes through a detour again once the relay has been left out of its paths for ten
/// agent timeouts (30 s), and not before.
fn the_relay_serves_again_after_ten_agent_timeouts(
    h: &mut Harness,
    c: coflow_core::CoflowId,
    (at, again): (u64, coflow_coordinator::FlowGrant),
) {
    for _ in 0..299 {
        beat(h, Vec::new());
    }
    let at = at + 1000;
    let before = resume(h, c, "p", again.parts[0].flow, at);
    assert!(parts_of(&before).iter().all(|p| p.2.is_none()), "29.9 s on: {:?}", parts_of(&before));
    for _ in 0..2 {
        beat(h, Vec::new());
    }
    let after = resume(h, c, "p", before.parts[0].flow, at + 1000);
    assert!(parts_of(&after).iter().any(|p| p.2 == Some(MachineId(2))), "30.1 s on: {:?}", parts_of(&after));
}

/// A get over a link ten times slower than its detour waits a moment for the other gets of its
/// coflow, moves nothing meanwhile, and is then water-filled: its receiver is told to resume it,
/// and the resume's parts take the shares water-filling gave, 1/11 direct and 10/11 through the
/// agent of `c` (D(1 - α)/10⁶ = Dα/10⁷).
#[test]
fn a_coflows_gets_are_water_filled_together_and_resumed_over_their_plan() {
    let mut h = three_dcs(1e6);
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 1_100_000).unwrap();
    let g = h.get(c, "p", 1).unwrap();
    assert!(g.parts.is_empty(), "granted whole, direct, at first");
    h.advance(0);
    assert_eq!(last_rate(&h.drain(), g.flow).unwrap_or(0.0), 0.0, "it waits to be routed");
    h.advance(20);
    assert_eq!(h.notices(1), vec![Notice::Reroute(g.flow)], "its receiver resumes it over the plan");
    let r = resume(&mut h, c, "p", g.flow, 0);
    let parts = parts_of(&r);
    assert_eq!(parts, vec![(0, 100_000, None), (100_000, 1_000_000, Some(MachineId(2)))]);
    h.advance(0);
    let pushed = h.drain();
    let (direct, relayed) =
        (last_rate(&pushed, r.parts[0].flow).unwrap(), last_rate(&pushed, r.parts[1].flow).unwrap());
    assert!((direct - 1e6).abs() < 1e-6 && (relayed - 1e7).abs() < 1e-6, "{direct} {relayed}");
    assert!(h.core.rate(g.flow).is_none(), "the cut flow ended as its parts began");
    assert_eq!(h.core.counters().flows_rerouted, 0, "a planned split is not a lost path");
}

/// A receiver that does not resume a flow planned over detours (it missed the notice) is not
/// left waiting: after two seconds the flow goes on over its direct path.
#[test]
fn a_planned_flow_not_resumed_goes_on_over_its_direct_path() {
    let (mut h, _, g) = planned_over_detours();
    h.advance(1000);
    assert_eq!(last_rate(&h.drain(), g.flow).unwrap_or(0.0), 0.0);
    for _ in 0..11 {
        beat(&mut h, Vec::new());
    }
    assert!(last_rate(&h.drain(), g.flow).is_some_and(|r| r > 0.0), "it goes on, direct");
}

/// A link that goes down under a flow too small to split: the flow is rerouted once, its resume
/// (from its first byte) names its one part, all of it through the agent of the third
/// datacenter, and the part is not rerouted again while the link stays down.
#[test]
fn a_flow_on_a_link_down_resumes_whole_through_a_detour_and_stays_there() {
    let mut h = three_dcs(1e7);
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 100_000).unwrap();
    let g = h.get(c, "p", 1).unwrap();
    h.advance(0);
    assert!(last_rate(&h.drain(), g.flow).is_some_and(|r| r > 0.0), "too small to split: direct");
    // It moves 100 bytes, then nothing: the link a -> b is down after three periods.
    let mut notices = Vec::new();
    for k in 0..20 {
        beat(&mut h, vec![(g.flow, if k == 0 { 1 } else { 100 })]);
        notices.extend(h.notices(1));
    }
    assert_eq!(notices, vec![Notice::Reroute(g.flow)], "rerouted once");
    let r = resume(&mut h, c, "p", g.flow, 0);
    let parts = parts_of(&r);
    assert_eq!(parts, vec![(0, 100_000, Some(MachineId(2)))], "whole, through c");
    h.advance(0);
    assert!(last_rate(&h.drain(), r.parts[0].flow).is_some_and(|r| r > 0.0));
    for _ in 0..12 {
        beat(&mut h, vec![(r.parts[0].flow, 1)]);
        assert_eq!(h.notices(1), vec![], "its links are up: it stays");
    }
    assert_eq!(h.core.counters().flows_rerouted, 1);
}

/// A grant says whether the coordinator routes around lost paths: across datacenters with
/// multi-path routing it does, so a receiver that cannot reach the source resumes; a resume of a
/// flow its source never reported (its receiver could not reach it directly) goes through the
/// detour, however small.
#[test]
fn a_receiver_that_cannot_reach_its_source_is_sent_through_a_detour() {
    let mut h = three_dcs(1e7);
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 100_000).unwrap();
    let g = h.get(c, "p", 1).unwrap();
    assert!(g.reroutable, "multi-path across datacenters: parts are resumed, not failed");
    h.advance(0);
    let r = resume(&mut h, c, "p", g.flow, 0);
    let parts = parts_of(&r);
    assert_eq!(parts, vec![(0, 100_000, Some(MachineId(2)))], "whole, through c");
    // Without multi-path routing a grant is not reroutable.
    let mut h = harness("mrtf", 1e7);
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 100_000).unwrap();
    assert!(!h.get(c, "p", 2).unwrap().reroutable);
}

/// A receiver that could not reach the relay of its part (the coordinator did not reroute it)
/// resumes it: the rest does not go through that relay again while the coordinator still counts
/// it alive; with no other agent in its datacenter, the rest goes direct.
#[test]
fn a_relay_its_receiver_could_not_reach_is_left_out_of_the_resume() {
    let (mut h, c, g) = planned_over_detours();
    let rest = blame_the_relay(&mut h, c, &g);
    the_relay_serves_again_after_ten_agent_timeouts(&mut h, c, rest);
}

/// The source of a part relayed through the agent of `c` gives it up, the relay having stopped
/// reading (frozen while the coordinator still counts it alive): the part is not failed but
/// rerouted, its receiver told to resume the rest at once, and the rest does not go through that
/// relay again while the coordinator counts it alive, as when the receiver blames the relay.
#[test]
fn a_relayed_part_its_source_gives_up_is_rerouted_around_the_relay() {
    let (mut h, c, g) = planned_over_detours();
    let r = resume(&mut h, c, "p", g.flow, 0);
    let relayed = r.parts.iter().find(|p| p.via.is_some()).expect("a part through c").clone();
    h.advance(0);
    let gave_up = FlowOutcome::Failed("timed-out".into());
    h.core.handle_flow_finished(h.now, MachineId(0), relayed.flow, gave_up).unwrap();
    h.advance(0);
    assert_eq!(h.notices(1), vec![Notice::Reroute(relayed.flow)], "its receiver resumes it at once");
    assert_eq!(h.core.counters().flows_failed, 0, "no byte of it is lost");
    let at = relayed.offset + 1000;
    let rest = resume(&mut h, c, "p", relayed.flow, at);
    assert_eq!(parts_of(&rest), vec![(at, relayed.length - 1000, None)], "not through the relay that stalled");
    assert_eq!(h.core.counters().flows_rerouted, 1);
    the_relay_serves_again_after_ten_agent_timeouts(&mut h, c, (at, rest));
}

/// The bytes relayed are what relays delivered, not what was granted through them: nothing while
/// a relayed part runs, the 1,000 bytes before the cut when it is resumed (the rest going direct
/// adds none), a relayed part's whole length when it completes.
#[test]
fn bytes_relayed_count_what_relays_delivered_not_what_was_granted() {
    let (mut h, c, g) = planned_over_detours();
    let r = resume(&mut h, c, "p", g.flow, 0);
    let relayed = r.parts.iter().find(|p| p.via.is_some()).expect("a part through c").clone();
    assert_eq!(h.core.counters().bytes_relayed, 0, "granted, not yet relayed");
    h.advance(0);
    let rest = resume(&mut h, c, "p", relayed.flow, relayed.offset + 1000);
    assert_eq!(h.core.counters().bytes_relayed, 1000, "the bytes before the cut");
    h.core.handle_flow_finished(h.now, MachineId(1), rest.parts[0].flow, FlowOutcome::Completed).unwrap();
    assert_eq!(h.core.counters().bytes_relayed, 1000, "the rest went direct");

    let (mut h, c, g) = planned_over_detours();
    let r = resume(&mut h, c, "p", g.flow, 0);
    let relayed = r.parts.iter().find(|p| p.via.is_some()).expect("a part through c").clone();
    h.advance(0);
    h.core.handle_flow_finished(h.now, MachineId(1), relayed.flow, FlowOutcome::Completed).unwrap();
    assert_eq!(h.core.counters().bytes_relayed, relayed.length, "a part relayed whole");
}

/// The relay a receiver could not reach is left out of that receiver's new paths only: receiver
/// A (machine 1) blames the relay R (machine 2, in `c`) of its part; gets of A and B (machine 3,
/// also in `b`) asked together are water-filled together, and the detour through `c` takes B's
/// get through R while A's stays direct (no other agent in `c`); after ten agent timeouts A's
/// paths may use R again.
#[test]
fn a_relay_one_receiver_could_not_reach_still_serves_the_others() {
    let (mut h, c, g) = planned_over_detours_on(three_dcs_with(1e6, &["a", "b", "c", "b"]));
    let rest = blame_the_relay(&mut h, c, &g);
    // A new coflow's gets by A and B, water-filled together over the one detour through `c`.
    let both = h.register(2, CoflowOptions::default());
    h.put(both, "a", 0, 1_100_000).unwrap();
    h.put(both, "b", 0, 1_100_000).unwrap();
    h.get(both, "a", 1).unwrap();
    let gb = h.get(both, "b", 3).unwrap();
    h.advance(20);
    assert_eq!(h.notices(1), vec![], "A's new get is not planned through R: it stays direct");
    assert_eq!(h.notices(3), vec![Notice::Reroute(gb.flow)], "B's new get is planned over the detour");
    let rb = resume_by(&mut h, 3, both, "b", gb.flow, 0);
    assert!(parts_of(&rb).iter().any(|p| p.2 == Some(MachineId(2))), "B's path goes through R: {:?}", parts_of(&rb));
    for p in &rb.parts {
        h.core.handle_flow_finished(h.now, MachineId(3), p.flow, coflow_coordinator::FlowOutcome::Completed).unwrap();
    }
    // A's paths may use R again after ten agent timeouts, and not before.
    the_relay_serves_again_after_ten_agent_timeouts(&mut h, c, rest);
}

/// After a restart (a previous coordinator's ids lie below the base), a receiver resumes a part
/// the previous coordinator granted, which this one never saw: once its source has re-announced
/// the piece, inside the restart window and naming where the part's bytes end, it is granted the
/// rest, planned anew, and the parts get rates. Without its end, with an id this coordinator
/// could have issued, or past the window, it is refused.
#[test]
fn a_part_granted_by_a_previous_coordinator_is_resumed_inside_the_restart_window() {
    let mut h = three_dcs(1e6);
    h.core.set_id_base(1000);
    let old = coflow_core::CoflowId(5);
    let client = "coflow://client/a";
    let ask = |flow: u64, at: u64, end: Option<u64>| GetAnnouncement {
        coflow: old,
        data_id: DataId::new("p").unwrap(),
        machine: MachineId(1),
        client: client.into(),
        resume: Some((FlowId(flow), at)),
        resume_end: end,
    };
    let e = h.core.handle_get(h.now, ask(900, 100_000, Some(600_000))).unwrap_err();
    assert_eq!(e, CoordError::UnknownCoflow(old), "not yet: its source has not re-announced the piece");
    h.core.handle_put(h.now, super::recovered(old, "p", 0, 1_100_000, Some(super::old_registration()))).unwrap();
    let e = h.core.handle_get(h.now, ask(900, 100_000, None)).unwrap_err();
    assert_eq!(e, CoordError::UnknownFlow(FlowId(900)), "without its end");
    let e = h.core.handle_get(h.now, ask(900, 100_000, Some(1_100_001))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "past the piece: {e}");
    assert!(e.to_string().contains("resume_end"), "{e}");
    let e = h.core.handle_get(h.now, ask(1000, 100_000, Some(600_000))).unwrap_err();
    assert_eq!(e, CoordError::UnknownFlow(FlowId(1000)), "not a previous coordinator's");
    let r = h.core.handle_get(h.now, ask(900, 100_000, Some(600_000))).unwrap();
    let parts = parts_of(&r);
    assert_eq!(parts.first().map(|p| p.0), Some(100_000));
    assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), 500_000, "the rest of the part: {parts:?}");
    h.advance(0);
    let pushed = h.drain();
    for p in &r.parts {
        assert!(last_rate(&pushed, p.flow).is_some_and(|r| r > 0.0), "part {:?} is scheduled", p.flow);
    }
    let e = h.core.handle_get(h.now, ask(900, 200_000, Some(600_000))).unwrap_err();
    assert_eq!(e, CoordError::UnknownFlow(FlowId(900)), "resumed once only");
    // As a flow of this coordinator's resumed twice.
    let mine = r.parts[0].flow;
    let again = GetAnnouncement { resume: Some((mine, 100_000)), resume_end: None, ..ask(0, 0, None) };
    h.core.handle_get(h.now, again.clone()).unwrap();
    assert_eq!(h.core.handle_get(h.now, again).unwrap_err(), CoordError::UnknownFlow(mine));
    h.core.set_restart_window(h.now);
    let e = h.core.handle_get(h.now, ask(901, 0, Some(100_000))).unwrap_err();
    assert!(matches!(e, CoordError::NotRecoverable(_)), "past the window: {e}");
}

/// A previous coordinator's flow resumed for a coflow this coordinator registered (an id above
/// its base) is refused: no coflow of this coordinator's holds a previous coordinator's flow.
#[test]
fn a_previous_coordinators_flow_is_not_resumed_into_a_coflow_of_this_one() {
    let mut h = three_dcs(1e6);
    h.core.set_id_base(1000);
    let c = h.register(1, CoflowOptions::default());
    assert!(c.0 >= 1000);
    h.put(c, "p", 0, 1_100_000).unwrap();
    let ask = GetAnnouncement {
        coflow: c,
        data_id: DataId::new("p").unwrap(),
        machine: MachineId(1),
        client: String::new(),
        resume: Some((FlowId(900), 100_000)),
        resume_end: Some(600_000),
    };
    assert_eq!(h.core.handle_get(h.now, ask).unwrap_err(), CoordError::UnknownCoflow(c));
    assert_eq!(h.core.live_flows(), 0, "nothing granted");
}

/// A member's gets are split over detours only within its bound on the flows each machine serves
/// it (`max_gets_per_owner_per_source`), since each part holds a data connection at the source
/// and a relayed one another at its relay: within it a get is split as planned; past it a get
/// that would be split through a relay serving the member its bound goes on direct, a resume whose
/// parts would take more places at the source than its flow held is planned direct, and a fresh
/// get is refused; the counts stay exact throughout.
#[test]
fn a_member_s_gets_are_split_over_detours_only_within_its_bound() {
    let cfg = CoordinatorConfig { max_gets_per_owner_per_source: 2, ..three_dcs_config(1e6) };
    let mut h = Harness::with_datacenters(Core::new(cfg, by_name("mrtf")), &[CAP; 3], &["a", "b", "c"]);
    let a = "coflow://client/a";
    let get = |h: &mut Harness, coflow, id: &str, resume| {
        let g = GetAnnouncement {
            coflow,
            data_id: DataId::new(id).unwrap(),
            machine: MachineId(1),
            client: a.into(),
            resume,
            resume_end: None,
        };
        let grant = h.core.handle_get(h.now, g)?;
        for f in std::iter::once(grant.flow).chain(grant.parts.iter().map(|p| p.flow)) {
            h.receivers.insert(f, MachineId(1));
        }
        Ok::<_, CoordError>(grant)
    };
    let x = h.register_by(a).unwrap();
    for id in ["p", "q", "r"] {
        h.put_sized_by(a, x, id, 0, 1_100_000).unwrap();
    }
    // Within the bound: split, the direct part and the relayed one both served by machine 0.
    let g = get(&mut h, x, "p", None).unwrap();
    h.advance(20);
    assert_eq!(h.notices(1), vec![Notice::Reroute(g.flow)]);
    let r = get(&mut h, x, "p", Some((g.flow, 0))).unwrap();
    assert_eq!(parts_of(&r), vec![(0, 100_000, None), (100_000, 1_000_000, Some(MachineId(2)))]);
    h.core.recount().unwrap();
    let e = get(&mut h, x, "q", None).unwrap_err();
    let want = "coflow://client/a has 2 flows served by machine 0 (max_gets_per_owner_per_source)";
    assert!(matches!(&e, CoordError::LimitExceeded(m) if m == want), "{e}");
    for p in &r.parts {
        h.end(p.flow, FlowOutcome::Completed).unwrap();
    }
    // A get planned over detours while within the bound, resumed once another get took the
    // place its parts needed, is planned direct.
    let q = get(&mut h, x, "q", None).unwrap();
    h.advance(20);
    assert_eq!(h.notices(1), vec![Notice::Reroute(q.flow)]);
    let r = get(&mut h, x, "r", None).unwrap();
    let again = get(&mut h, x, "q", Some((q.flow, 0))).unwrap();
    assert_eq!(parts_of(&again), vec![(0, 1_100_000, None)]);
    h.core.recount().unwrap();
    // With its relay serving the member two small flows of its own, a get that would be split
    // goes on direct.
    for id in ["s", "t"] {
        h.put_sized_by(a, x, id, 2, 10).unwrap();
        get(&mut h, x, id, None).unwrap();
    }
    h.advance(20);
    assert_eq!(h.notices(1), vec![], "not split past the bound");
    h.advance(100);
    assert!(last_rate(&h.drain(), r.flow).is_some_and(|r| r > 0.0), "it goes on, direct");
    h.core.recount().unwrap();
}
