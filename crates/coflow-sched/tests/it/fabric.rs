//! The fabric is open: a topology the library has never seen (racks of machines behind an
//! oversubscribed core, as a test builds it here) is one implementation of [`Topology`], and every
//! policy that serves any fabric runs on it unchanged, within its capacities.

use coflow_core::{CoflowId, MachineId, Nanos};
use coflow_sched::policy::{Needs, Params, REGISTRY};
use coflow_sched::{
    Allocation, BigSwitch, Fabric, ResourceId, Route, Snapshot, SnapshotCoflow, SnapshotFlow, Topology,
};

/// `racks × per_rack` machines. Resources: each machine's ingress and egress port (`2m`, `2m+1`)
/// at `port` bytes per second, then each rack's uplink and downlink to the core
/// (`2M + 2r`, `2M + 2r + 1`) at `per_rack × port / oversubscription`.
#[derive(Debug)]
struct Racks {
    racks: u32,
    per_rack: u32,
    port: f64,
    oversubscription: f64,
}

impl Racks {
    fn rack(&self, m: MachineId) -> u32 {
        m.0 / self.per_rack
    }

    fn machines_total(&self) -> u32 {
        self.racks * self.per_rack
    }
}

impl Topology for Racks {
    fn kind(&self) -> &'static str {
        "racks"
    }

    fn machines(&self) -> u32 {
        self.machines_total()
    }

    fn initial_capacities(&self) -> Vec<f64> {
        let uplink = self.per_rack as f64 * self.port / self.oversubscription;
        let mut c = vec![self.port; 2 * self.machines_total() as usize];
        c.extend(std::iter::repeat_n(uplink, 2 * self.racks as usize));
        c
    }

    fn route(&self, src: MachineId, dst: MachineId) -> Route {
        let (up, down) = (2 * src.0, 2 * dst.0 + 1);
        let core = 2 * self.machines_total();
        match (src == dst, self.rack(src) == self.rack(dst)) {
            (true, _) => Route::LOCAL,
            (false, true) => Route::new(&[up, down]),
            (false, false) => Route::new(&[up, core + 2 * self.rack(src), core + 2 * self.rack(dst) + 1, down]),
        }
    }

    fn resource_name(&self, r: ResourceId) -> String {
        let m = self.machines_total();
        match (r < 2 * m, r % 2) {
            (true, 0) => format!("in{}", r / 2),
            (true, _) => format!("out{}", r / 2),
            (false, 0) => format!("rack{}-up", (r - 2 * m) / 2),
            (false, _) => format!("rack{}-down", (r - 2 * m) / 2),
        }
    }
}

fn racks() -> Fabric {
    Fabric::new(Racks { racks: 2, per_rack: 3, port: 100.0, oversubscription: 3.0 })
}

#[test]
fn a_new_topology_is_a_fabric_with_its_own_routes_names_and_capacities() {
    let f = racks();
    assert_eq!((f.kind(), f.machines(), f.resources()), ("racks", 6, 16));
    assert_eq!(f.route(MachineId(0), MachineId(4)).hops(), &[0, 12, 15, 9]);
    assert_eq!(f.route(MachineId(1), MachineId(2)).hops(), &[2, 5]);
    assert!(f.route(MachineId(3), MachineId(3)).is_local());
    assert_eq!(f.resource_name(12), "rack0-up");
    assert_eq!(f.resource_name(15), "rack1-down");
    // The core is oversubscribed 3:1: a rack's uplink carries one port's worth.
    assert_eq!((f.capacity(0), f.capacity(12)), (100.0, 100.0));
    // Expected and median capacities default to the capacity now.
    let mut g = f.clone();
    g.set_capacity(12, 40.0);
    assert_eq!((g.expected_capacity(12), g.median_capacity(12)), (40.0, 40.0));
    assert_ne!(f, g);
    assert_eq!(f, f.clone());
    // Ports belong to the big switch alone.
    assert!(f.topology::<BigSwitch>().is_none() && f.topology::<Racks>().is_some());
    let big = Fabric::big_switch(3, coflow_core::Rate::from_bytes_per_sec(1.0));
    let ports = big.topology::<BigSwitch>().expect("a big switch");
    assert_eq!((ports.ingress(MachineId(2)), ports.egress(MachineId(2))), (2, 5));
    assert_eq!(big.route(MachineId(0), MachineId(2)).hops(), &[0, 5]);
}

#[test]
fn every_policy_for_any_fabric_runs_on_racks_within_capacity_and_the_others_are_refused() {
    let fabric = racks();
    // Three coflows, across racks and inside them.
    let coflows: Vec<(SnapshotCoflow, Vec<SnapshotFlow>)> = [
        vec![(0, 4, 300.0), (1, 5, 200.0), (2, 3, 100.0)],
        vec![(3, 0, 50.0), (0, 1, 80.0)],
        vec![(4, 5, 500.0), (5, 2, 20.0), (1, 1, 10.0)],
    ]
    .into_iter()
    .enumerate()
    .map(|(i, flows)| {
        let c = SnapshotCoflow {
            id: CoflowId(i as u64 + 1),
            job: CoflowId(i as u64 + 1),
            arrival: Nanos::from_millis(i as u64),
            deadline: Some(Nanos::from_secs(60)),
            weight: 1.0,
            width: flows.len() as u32,
            pending: 0,
        };
        let fl = flows
            .into_iter()
            .map(|(s, d, b)| SnapshotFlow { src: MachineId(s), dst: MachineId(d), size: b, remaining: b })
            .collect();
        (c, fl)
    })
    .collect();
    let mut ran = 0;
    for e in REGISTRY {
        let refused = coflow_sched::policy::check_serves(e.name, &fabric);
        if e.needs != Needs::AnyFabric {
            let err = refused.expect_err(e.name);
            assert_eq!((err.policy.as_str(), err.fabric), (e.name, "racks"));
            continue;
        }
        refused.unwrap();
        let mut policy = e.build(&Params::default());
        let mut snap = Snapshot::default();
        snap.clear(policy.model());
        let now = Nanos::from_millis(5);
        for (c, flows) in &coflows {
            policy.handle_arrival(c.arrival, c.id);
            snap.push_coflow(&fabric, c, flows);
        }
        let input = snap.input(now, &fabric);
        let mut out = Allocation::default();
        out.reset(&input);
        policy.poll_allocation(&input, &mut out);
        let used = out.usage(&input);
        for (r, (&u, &cap)) in used.iter().zip(fabric.capacities()).enumerate() {
            assert!(u <= cap * (1.0 + 1e-9), "{}: {} carries {u} over {cap}", e.name, fabric.resource_name(r as u32));
        }
        let mut rates = Vec::new();
        snap.flow_rates(&out, &mut rates);
        assert!(rates.iter().any(|&r| r > 0.0 && r.is_finite()), "{} serves nothing on racks: {rates:?}", e.name);
        ran += 1;
    }
    assert!(ran >= 15, "only {ran} policies ran");
}
