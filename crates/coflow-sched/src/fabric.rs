//! The fabric: a set of capacitated resources that every flow crosses, and the [`Topology`] that
//! says which.
//!
//! A topology names the resources, gives each its first capacity and says which ones a flow
//! between two machines crosses; the [`Fabric`] holds one behind that interface with the
//! resources' current capacities. Policies and the simulator only ever see resources and routes.
//! Two topologies exist: the non-blocking [`BigSwitch`] of Varys §2.2, where machine `i` owns an
//! ingress (sending) port and an egress (receiving) port, and Siphon's wide area
//! ([`crate::Wan`]), whose resources are directed inter-datacenter links. Another (racks with an
//! oversubscribed core, a testbed's sites) is one more implementation of [`Topology`], with no
//! change here, in the policies or in the simulator.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use coflow_core::{MachineId, Rate};

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

/// Which resources exist, what they are called and what capacity to expect of them, and which a
/// flow crosses: one implementation per kind of fabric. It is [`Any`], so that
/// [`Fabric::topology`] can hand out the concrete type to the few that need it.
pub trait Topology: Any + fmt::Debug + Send + Sync {
    /// The kind of fabric, as messages name it: `big switch`, `wide area`.
    fn kind(&self) -> &'static str;

    /// The number of machines.
    fn machines(&self) -> u32;

    /// Every resource's capacity at first, in bytes per second, indexed by [`ResourceId`]: its
    /// length is the number of resources.
    fn initial_capacities(&self) -> Vec<f64>;

    /// The resources a flow from `src` to `dst` crosses.
    fn route(&self, src: MachineId, dst: MachineId) -> Route;

    /// A human name for a resource, e.g. `in7` or `dc0->dc1`.
    fn resource_name(&self, r: ResourceId) -> String;

    /// The capacity resource `r` is expected to have, given that it has `now` (a fluctuating
    /// link's mean). By default what it has now.
    fn expected_capacity(&self, _r: ResourceId, now: f64) -> f64 {
        now
    }

    /// The median capacity of resource `r`, given that it has `now`. By default what it has now.
    fn median_capacity(&self, _r: ResourceId, now: f64) -> f64 {
        now
    }

    /// The distribution of resource `r`'s capacity, if it fluctuates (a wide-area link's
    /// bandwidth); `None`: it has the capacity it has now.
    fn distribution(&self, _r: ResourceId) -> Option<&crate::bandwidth::Bandwidth> {
        None
    }

    /// Whether every route is a sender's ingress port and a receiver's egress port of equal
    /// standing (the big switch), which some policies assume.
    fn is_big_switch(&self) -> bool {
        false
    }
}

/// The non-blocking big switch of Varys §2.2: resource `i` is machine `i`'s ingress port and
/// resource `machines + i` its egress port; a flow crosses its sender's ingress and its
/// receiver's egress, a flow inside one machine crosses nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BigSwitch {
    machines: u32,
    port_rate: Rate,
}

impl BigSwitch {
    /// A big switch of `machines` machines whose every port runs at `port_rate`.
    pub fn new(machines: u32, port_rate: Rate) -> BigSwitch {
        BigSwitch { machines, port_rate }
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
}

impl Topology for BigSwitch {
    fn kind(&self) -> &'static str {
        "big switch"
    }

    fn machines(&self) -> u32 {
        self.machines
    }

    fn initial_capacities(&self) -> Vec<f64> {
        vec![self.port_rate.bytes_per_sec(); 2 * self.machines as usize]
    }

    fn route(&self, src: MachineId, dst: MachineId) -> Route {
        if src == dst { Route::LOCAL } else { Route::new(&[self.ingress(src), self.egress(dst)]) }
    }

    fn resource_name(&self, r: ResourceId) -> String {
        if r < self.machines { format!("in{r}") } else { format!("out{}", r - self.machines) }
    }

    fn is_big_switch(&self) -> bool {
        true
    }
}

/// A topology and the capacity of every resource now, in bytes per second.
#[derive(Clone, Debug)]
pub struct Fabric {
    capacity: Vec<f64>,
    topology: Arc<dyn Topology>,
}

impl Fabric {
    /// A fabric of this topology, every resource at its initial capacity.
    pub fn new(topology: impl Topology) -> Fabric {
        Fabric { capacity: topology.initial_capacities(), topology: Arc::new(topology) }
    }

    /// A non-blocking big switch of `machines` machines whose every port runs at `port_rate`
    /// ([`BigSwitch`]).
    pub fn big_switch(machines: u32, port_rate: Rate) -> Fabric {
        Fabric::new(BigSwitch::new(machines, port_rate))
    }

    /// The topology, if it is a `T`: `fabric.topology::<BigSwitch>()` for the ports of a machine,
    /// `fabric.topology::<Wan>()` for the links' bandwidth distributions.
    pub fn topology<T: Topology>(&self) -> Option<&T> {
        let any: &dyn Any = &*self.topology;
        any.downcast_ref::<T>()
    }

    /// The kind of fabric, as messages name it ([`Topology::kind`]).
    pub fn kind(&self) -> &'static str {
        self.topology.kind()
    }

    /// The capacity a resource is expected to have ([`Topology::expected_capacity`]): a
    /// fluctuating link's mean, else its capacity.
    pub fn expected_capacity(&self, r: ResourceId) -> f64 {
        self.topology.expected_capacity(r, self.capacity[r as usize])
    }

    /// The median capacity of a resource ([`Topology::median_capacity`]).
    pub fn median_capacity(&self, r: ResourceId) -> f64 {
        self.topology.median_capacity(r, self.capacity[r as usize])
    }

    /// The distribution of a resource's capacity ([`Topology::distribution`]): a fluctuating
    /// link's, else a constant at its capacity now.
    pub fn distribution(&self, r: ResourceId) -> crate::bandwidth::Bandwidth {
        self.topology
            .distribution(r)
            .cloned()
            .unwrap_or_else(|| crate::bandwidth::Bandwidth::Constant(self.capacity[r as usize]))
    }

    /// Whether it is the big switch ([`Topology::is_big_switch`]).
    pub fn is_big_switch(&self) -> bool {
        self.topology.is_big_switch()
    }

    /// The number of machines.
    pub fn machines(&self) -> u32 {
        self.topology.machines()
    }

    /// The number of resources.
    pub fn resources(&self) -> usize {
        self.capacity.len()
    }

    /// The resources a flow from `src` to `dst` crosses; none when they are the same machine.
    pub fn route(&self, src: MachineId, dst: MachineId) -> Route {
        self.topology.route(src, dst)
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

    /// A human name for a resource, e.g. `in7` or `out3` ([`Topology::resource_name`]).
    pub fn resource_name(&self, r: ResourceId) -> String {
        self.topology.resource_name(r)
    }
}

impl PartialEq for Fabric {
    /// The same capacities on the same topology: one shared instance, or two whose every field
    /// is equal (topologies are plain data, so their `Debug` forms are equal exactly then).
    fn eq(&self, other: &Fabric) -> bool {
        self.capacity == other.capacity
            && (Arc::ptr_eq(&self.topology, &other.topology)
                || format!("{:?}", self.topology) == format!("{:?}", other.topology))
    }
}
