//! A big switch's ports in the coordinator: each agent's uplink and downlink at what it was
//! measured to carry ([`crate::measure::PortMeter`], its registered port rate until measured
//! lower), less what traffic outside the policy was seen to use of it. A host whose link fell
//! below its registered rate is so offered what it carries, not what it registered.

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::{MachineId, Rate};
use coflow_sched::{BigSwitch, Fabric};

use super::{Core, FlowRec, FlowState};
use crate::measure::{Carried, Port};

/// Adds to `c` what flow `f` carried since its source's previous report: `moved` bytes, and
/// `asked` by its assigned rates, at most the bytes it had left (a flow that ended inside the
/// interval asked no more). A flow served outside the policy asked nothing: it took what it found;
/// nor does one whose receiving client holds it back (`unread`) tell whether a port did. What it
/// added to the ports' judgement: bytes moved and asked.
pub(super) fn carried(c: &mut Carried, f: &FlowRec, moved: f64, asked: f64, unread: bool) -> (f64, f64) {
    if f.state == FlowState::Unscheduled || unread {
        c.other_moved += moved;
        c.other_asked += moved;
        (0.0, 0.0)
    } else {
        let asked = asked.min(f.size.saturating_sub(f.sent) as f64);
        c.moved += moved;
        c.asked += asked;
        (moved, asked)
    }
}

impl Core {
    /// The big switch of machines `0..machines`: each alive agent's ports at their measured
    /// capacity less what unscheduled traffic was seen to use of them (at least a tenth of it);
    /// a machine without an alive agent has none.
    pub(super) fn big_switch(&self, machines: u32) -> Fabric {
        let ports = BigSwitch::new(machines, Rate::from_bytes_per_sec(1.0));
        let mut fabric = Fabric::new(ports);
        for r in 0..fabric.resources() as u32 {
            fabric.set_capacity(r, 0.0);
        }
        let mut sched_tx: BTreeMap<MachineId, f64> = BTreeMap::new();
        let mut sched_rx: BTreeMap<MachineId, f64> = BTreeMap::new();
        let mut unsched_tx = BTreeSet::new();
        let mut unsched_rx = BTreeSet::new();
        for f in self.flows.values().filter(|f| f.state != FlowState::Held) {
            if f.state == FlowState::Unscheduled {
                unsched_tx.insert(f.src);
                unsched_rx.insert(f.dst);
            } else {
                *sched_tx.entry(f.src).or_default() += f.rate;
                *sched_rx.entry(f.dst).or_default() += f.rate;
            }
        }
        for (&m, a) in self.agents.iter().filter(|(_, a)| a.alive) {
            let others = |used: f64, sched: Option<&f64>, any: bool| {
                if any { (used - sched.copied().unwrap_or(0.0)).max(0.0) } else { 0.0 }
            };
            let tx = others(a.tx_bps, sched_tx.get(&m), unsched_tx.contains(&m));
            let rx = others(a.rx_bps, sched_rx.get(&m), unsched_rx.contains(&m));
            let (up, down) = self.port_capacity(m, a.port_rate);
            fabric.set_capacity(ports.ingress(m), (up - tx).max(0.1 * up));
            fabric.set_capacity(ports.egress(m), (down - rx).max(0.1 * down));
        }
        fabric
    }

    /// Logs (debug) the ports measured below their registered rate, after an estimate changed.
    pub(super) fn log_ports(&self) {
        for (&m, a) in self.agents.iter().filter(|(_, a)| a.alive) {
            let (up, down) = self.port_capacity(m, a.port_rate);
            if up < a.port_rate || down < a.port_rate {
                tracing::debug!(machine = m.0, up, down, port_rate = a.port_rate, "ports measured");
            }
        }
    }

    /// Machine `m`'s ports' capacity (uplink, downlink) as far as the coordinator knows: what
    /// they were measured to carry, else `port_rate`, its registered rate (on a wide area, whose
    /// agents' ports are not what the coordinator schedules, always that).
    pub(super) fn port_capacity(&self, m: MachineId, port_rate: f64) -> (f64, f64) {
        let at = |p: Port| if self.meter.is_some() { None } else { self.ports.capacity(p) };
        (at(Port::Up(m)).unwrap_or(port_rate), at(Port::Down(m)).unwrap_or(port_rate))
    }
}
