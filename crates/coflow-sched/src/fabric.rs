//! The fabric: a set of capacitated resources that every flow crosses.
//!
//! Two topologies: the non-blocking big switch of Varys §2.2, where machine `i` owns an ingress
//! (sending) port and an egress (receiving) port, and the wide-area fabric of Siphon
//! ([`Wan`]), whose resources are directed inter-datacenter links.
//! Policies and the simulator only ever see resources and routes, so an oversubscribed rack
//! uplink or a wide-area link is a new resource kind here, not a new simulator.

use std::sync::Arc;

use coflow_core::{MachineId, Rate};

use crate::wan::Wan;

/// Index of one capacitated resource (a port, an uplink, a link).
pub type ResourceId = u32;

/// The resources one flow crosses, at most four (ingress, uplink, downlink, egress).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    len: u8,
    hops: [ResourceId; 4],
}

impl Route {
    /// A route that crosses no resource (a flow local to one machine).
    pub const LOCAL: Route = Route { len: 0, hops: [0; 4] };

    /// A route over the given resources. Panics on more than four, which is a bug.
    pub fn new(hops: &[ResourceId]) -> Route {
        assert!(hops.len() <= 4, "a route crosses at most four resources");
        let mut r = Route { len: hops.len() as u8, hops: [0; 4] };
        r.hops[..hops.len()].copy_from_slice(hops);
        r
    }

    /// The resources crossed, in order.
    pub fn hops(&self) -> &[ResourceId] {
        &self.hops[..self.len as usize]
    }

    /// Whether the route crosses nothing.
    pub fn is_local(&self) -> bool {
        self.len == 0
    }
}

/// The topology and the capacity of every resource, in bytes per second.
#[derive(Clone, Debug, PartialEq)]
pub struct Fabric {
    machines: u32,
    capacity: Vec<f64>,
    /// The wide-area topology, if this is one (else the big switch).
    wan: Option<Arc<Wan>>,
}

impl Fabric {
    /// A non-blocking big switch of `machines` machines whose every port runs at `port_rate`.
    /// Resource `i` is machine `i`'s ingress port and resource `machines + i` its egress port.
    pub fn big_switch(machines: u32, port_rate: Rate) -> Fabric {
        Fabric { machines, capacity: vec![port_rate.bytes_per_sec(); 2 * machines as usize], wan: None }
    }

    /// A wide-area fabric (Siphon §3.1): resource `i` is the topology's link `i`, at first at its
    /// bandwidth's mean; a flow between datacenters crosses their direct link, a flow inside one
    /// crosses nothing.
    pub fn wan(wan: Wan) -> Fabric {
        let capacity = wan.links().iter().map(|l| l.bandwidth.mean()).collect();
        Fabric { machines: wan.machines(), capacity, wan: Some(Arc::new(wan)) }
    }

    /// The wide-area topology, if this fabric is one.
    pub fn wan_topology(&self) -> Option<&Wan> {
        self.wan.as_deref()
    }

    /// The capacity a resource is expected to have: its bandwidth distribution's mean on a
    /// wide-area fabric, else its capacity.
    pub fn expected_capacity(&self, r: ResourceId) -> f64 {
        match &self.wan {
            Some(w) => w.links()[r as usize].bandwidth.mean(),
            None => self.capacity[r as usize],
        }
    }

    /// The median capacity of a resource (its capacity on the big switch).
    pub fn median_capacity(&self, r: ResourceId) -> f64 {
        match &self.wan {
            Some(w) => w.links()[r as usize].bandwidth.median(),
            None => self.capacity[r as usize],
        }
    }

    /// The number of machines.
    pub fn machines(&self) -> u32 {
        self.machines
    }

    /// The number of resources.
    pub fn resources(&self) -> usize {
        self.capacity.len()
    }

    /// Machine `m`'s ingress (sending) port.
    pub fn ingress(&self, m: MachineId) -> ResourceId {
        debug_assert!(m.0 < self.machines);
        m.0
    }

    /// Machine `m`'s egress (receiving) port.
    pub fn egress(&self, m: MachineId) -> ResourceId {
        debug_assert!(m.0 < self.machines);
        self.machines + m.0
    }

    /// The resources a flow from `src` to `dst` crosses; none when they are the same machine.
    pub fn route(&self, src: MachineId, dst: MachineId) -> Route {
        if let Some(w) = &self.wan {
            return w.route(w.dc_of(src.0), w.dc_of(dst.0));
        }
        if src == dst { Route::LOCAL } else { Route::new(&[self.ingress(src), self.egress(dst)]) }
    }

    /// A resource's capacity in bytes per second.
    pub fn capacity(&self, r: ResourceId) -> f64 {
        self.capacity[r as usize]
    }

    /// Every resource's capacity, indexed by [`ResourceId`].
    pub fn capacities(&self) -> &[f64] {
        &self.capacity
    }

    /// Changes a resource's capacity (the coordinator's bandwidth estimate, a fluctuating link).
    pub fn set_capacity(&mut self, r: ResourceId, bytes_per_sec: f64) {
        assert!(bytes_per_sec.is_finite() && bytes_per_sec >= 0.0, "invalid capacity {bytes_per_sec}");
        self.capacity[r as usize] = bytes_per_sec;
    }

    /// A human name for a resource, e.g. `in7` or `out3`.
    pub fn resource_name(&self, r: ResourceId) -> String {
        if let Some(w) = &self.wan {
            return w.link_name(r);
        }
        if r < self.machines { format!("in{r}") } else { format!("out{}", r - self.machines) }
    }
}
