//! `aalo`: Discretized Coflow-Aware Least-Attained-Service (D-CLAS), Aalo's scheduler for
//! coflows whose sizes are unknown (the talk in `shared/seeds/001_…`, Aalo SIGCOMM 2015).
//!
//! A coflow's priority falls with the bytes it has already sent, in steps: `K` queues with
//! exponentially spaced thresholds (queue 0 holds coflows that sent less than `A`, queue `i` those
//! that sent less than `A·Eⁱ`, the last one everything above), so that similar coflows do not
//! oscillate as continuous least-attained-service would make them, but go first-come first-served
//! inside a queue. Queues share every port by weight (queue `i` weighs `K − i`): every non-empty
//! queue gets some of each port it uses, so nothing starves, and higher queues get more.
//!
//! Rates: on each port, each queue present gets its weighted share; inside a queue, coflows in
//! arrival order, and each of their flows (legs) in turn, take as much as both their ports' shares
//! still allow. A second pass hands out whatever the shares left unused in the same order, so the
//! allocation is work-conserving.
//!
//! Aalo is a [`BlindScheduler`]: it reads no size, only the bytes each coflow had sent at the last
//! progress report, which comes every sync interval. It decides on coflow arrivals and
//! completions, at most once per sync interval after flows finish, and when a coflow it serves
//! will have crossed its queue's threshold by the next report (predicted from the rates it gave,
//! and checked against the report).

use std::collections::BTreeMap;
use std::ops::Range;

use coflow_core::{CoflowId, MIB, Nanos};

use crate::blind::{BlindAllocation, BlindCoflow, BlindInput, BlindLeg, BlindScheduler};
use crate::fabric::ResourceId;
use crate::kernel::FULL;

/// Parameters of [`Aalo`]; the defaults are the and the talk's: `K = 10` queues, first
/// threshold `A = 10 MiB`, growth `E = 10`, progress every 8 ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AaloConfig {
    /// `K`, the number of queues (at least 1).
    pub queues: usize,
    /// `A`, the bytes sent below which a coflow sits in the first queue.
    pub first_threshold: f64,
    /// `E`, the factor between consecutive thresholds.
    pub factor: f64,
    /// How often the coordinator learns coflows' progress (the agents' report interval).
    pub sync_interval: Nanos,
    /// After flows finish, decide again at most once per this interval, so that their ports are
    /// handed on (`None`: only on coflow arrivals, completions and threshold crossings).
    pub flow_finish_gap: Option<Nanos>,
    /// Rank a coflow by the bytes its whole job has sent ([`BlindCoflow::job_sent`]) rather than
    /// its own (the talk's job-aware D-CLAS, `aalo-job`): a later stage of a job that has already
    /// moved much data does not jump ahead of small jobs.
    pub job_aware: bool,
}

impl Default for AaloConfig {
    fn default() -> Self {
        AaloConfig {
            queues: 10,
            first_threshold: (10 * MIB) as f64,
            factor: 10.0,
            sync_interval: Nanos::from_millis(8),
            flow_finish_gap: Some(Nanos::from_millis(40)),
            job_aware: false,
        }
    }
}

impl AaloConfig {
    /// The queue of a coflow that has sent `sent` bytes.
    pub fn queue(&self, sent: f64) -> usize {
        let mut q = 0;
        let mut threshold = self.first_threshold;
        while q + 1 < self.queues && sent >= threshold {
            q += 1;
            threshold *= self.factor;
        }
        q
    }

    /// The bytes sent at which a coflow leaves queue `q` (infinite for the last queue).
    pub fn threshold(&self, q: usize) -> f64 {
        if q + 1 >= self.queues { f64::INFINITY } else { self.first_threshold * self.factor.powi(q as i32) }
    }

    /// The weight of queue `q` in the sharing across queues: `K − q`.
    pub fn weight(&self, q: usize) -> f64 {
        (self.queues - q.min(self.queues - 1)) as f64
    }
}

/// D-CLAS.
#[derive(Debug, Default)]
pub struct Aalo {
    cfg: AaloConfig,
    /// Each active coflow's legs grouped by sender and the resources its active legs cross,
    /// redone only when its count of active flows changes (a leg's route never does).
    shapes: BTreeMap<CoflowId, Shape>,
    /// Scratch, per decision.
    queue: Vec<usize>,
    order: Vec<usize>,
    rate: Vec<f64>,
    /// Per queue and resource (`q · resources + r`): whether the queue uses it, then its share left.
    share: Vec<f64>,
    present: Vec<bool>,
    total_weight: Vec<f64>,
    left: Vec<f64>,
    seen: Vec<u8>,
}

#[derive(Debug, Default)]
struct Shape {
    active_flows: u32,
    /// Runs of consecutive legs with the same first resource, as offsets into the coflow's legs,
    /// and whether all of them cross exactly two resources (then they are sorted by the second).
    groups: Vec<(ResourceId, Range<usize>, bool)>,
    /// The resources its active legs cross, sorted.
    resources: Vec<ResourceId>,
    /// The second resources of its active two-resource legs (receivers), sorted.
    receivers: Vec<ResourceId>,
}

impl Shape {
    /// The shape of `c`; `seen` is scratch, one byte per resource, all zero, left so.
    fn of(c: &BlindCoflow, legs: &[BlindLeg], seen: &mut [u8]) -> Shape {
        let legs = &legs[c.legs.clone()];
        let mut groups: Vec<(ResourceId, Range<usize>, bool)> = Vec::new();
        let mut resources = Vec::new();
        let mut receivers = Vec::new();
        for (j, leg) in legs.iter().enumerate() {
            let Some(&first) = leg.route.hops().first() else { continue };
            let two_hop = leg.route.hops().len() == 2;
            match groups.last_mut() {
                Some((r, range, both)) if *r == first && range.end == j => {
                    range.end = j + 1;
                    *both &= two_hop;
                }
                _ => groups.push((first, j..j + 1, two_hop)),
            }
            if leg.active_flows > 0 {
                for (h, &r) in leg.route.hops().iter().enumerate() {
                    // Bit 0: a resource of the coflow's; bit 1: a receiver of a two-resource leg.
                    if seen[r as usize] & 1 == 0 {
                        seen[r as usize] |= 1;
                        resources.push(r);
                    }
                    if h == 1 && leg.route.hops().len() == 2 && seen[r as usize] & 2 == 0 {
                        seen[r as usize] |= 2;
                        receivers.push(r);
                    }
                }
            }
        }
        for &r in &resources {
            seen[r as usize] = 0;
        }
        resources.sort_unstable();
        receivers.sort_unstable();
        Shape { active_flows: c.active_flows, groups, resources, receivers }
    }
}

impl Aalo {
    /// D-CLAS with these parameters.
    pub fn new(cfg: AaloConfig) -> Aalo {
        assert!(cfg.queues >= 1 && cfg.first_threshold > 0.0 && cfg.factor > 1.0, "invalid Aalo parameters");
        Aalo { cfg, ..Aalo::default() }
    }
}

/// Where one pass hands out bandwidth: `avail[base + r]` on resource `r`, also taken out of
/// `mirror[r]` if given; `open` counts down the resources whose `avail` this fills.
struct Pool<'a> {
    cap: &'a [f64],
    avail: &'a mut [f64],
    base: usize,
    mirror: Option<&'a mut [f64]>,
    open: &'a mut usize,
}

impl Pool<'_> {
    fn room(&self, r: ResourceId) -> f64 {
        let x = self.avail[self.base + r as usize];
        if x <= self.cap[r as usize] * FULL { 0.0 } else { x }
    }

    fn take(&mut self, r: ResourceId, x: f64) {
        let full = self.cap[r as usize] * FULL;
        let slot = &mut self.avail[self.base + r as usize];
        let before = *slot;
        *slot = (before - x).max(0.0);
        if before > full && *slot <= full {
            *self.open = self.open.saturating_sub(1);
        }
        if let Some(m) = self.mirror.as_deref_mut() {
            m[r as usize] = (m[r as usize] - x).max(0.0);
        }
    }
}

/// Gives leg `l` as much as the pool has on every resource of its route; returns it.
fn serve_leg(l: usize, legs: &[BlindLeg], out: &mut BlindAllocation, pool: &mut Pool<'_>) -> f64 {
    let leg = &legs[l];
    if leg.active_flows == 0 {
        return 0.0;
    }
    let room = leg.route.hops().iter().map(|&r| pool.room(r)).fold(f64::INFINITY, f64::min);
    if !(room > 0.0 && room.is_finite()) {
        return 0.0;
    }
    if out.leg_rate[l] == 0.0 {
        out.served.push(l);
    }
    out.leg_rate[l] += room / leg.active_flows as f64;
    for &r in leg.route.hops() {
        pool.take(r, room);
    }
    room
}

/// Hands out the pool to each leg of `c` in turn, sender by sender and in route order, as much as
/// every resource of its route allows; a sender with no room is skipped whole. Returns the bytes
/// per second given to the coflow.
///
/// A wide coflow has many legs per sender and most of its receivers are often full, so when a
/// sender's legs all cross two resources and few of the coflow's resources have room, its legs
/// towards those are found by binary search rather than by a scan: the same legs in the same order.
fn serve(c: &BlindCoflow, shape: &Shape, legs: &[BlindLeg], out: &mut BlindAllocation, pool: &mut Pool<'_>) -> f64 {
    let mut given = 0.0;
    let mut open: Vec<ResourceId> = Vec::new();
    let mut open_known = false;
    for &(sender, ref range, two_hop) in &shape.groups {
        if pool.room(sender) == 0.0 {
            continue;
        }
        if two_hop && !open_known {
            open.extend(shape.receivers.iter().copied().filter(|&r| pool.room(r) > 0.0));
            open_known = true;
        }
        let group = &legs[c.legs.start + range.start..c.legs.start + range.end];
        if two_hop && open.len() * 8 < group.len() {
            for &r in &open {
                if pool.room(sender) == 0.0 {
                    break;
                }
                if r == sender || pool.room(r) == 0.0 {
                    continue;
                }
                let mut j = group.partition_point(|leg| leg.route.hops()[1] < r);
                while j < group.len() && group[j].route.hops()[1] == r {
                    given += serve_leg(c.legs.start + range.start + j, legs, out, pool);
                    j += 1;
                }
            }
        } else {
            for j in range.clone() {
                if pool.room(sender) == 0.0 {
                    break;
                }
                given += serve_leg(c.legs.start + j, legs, out, pool);
            }
        }
    }
    given
}

impl BlindScheduler for Aalo {
    fn name(&self) -> &'static str {
        if self.cfg.job_aware { "aalo-job" } else { "aalo" }
    }

    fn report_interval(&self) -> Nanos {
        self.cfg.sync_interval
    }

    fn job_aware(&self) -> bool {
        self.cfg.job_aware
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        // The coordinator hears of finished flows with the agents' reports, so never sooner than
        // a sync interval.
        self.cfg.flow_finish_gap.map(|g| g.max(self.cfg.sync_interval))
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.shapes.remove(&coflow);
    }

    fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
        let cap = input.fabric.capacities();
        let resources = cap.len();
        let k = self.cfg.queues;
        self.seen.resize(resources, 0);
        for c in input.coflows {
            let shape = self.shapes.entry(c.id).or_default();
            if shape.groups.is_empty() || shape.active_flows != c.active_flows {
                *shape = Shape::of(c, input.legs, &mut self.seen);
            }
        }

        // Queues, and the order: by queue, then arrival (the input's order).
        self.queue.clear();
        let job_aware = self.cfg.job_aware;
        let attained = |c: &BlindCoflow| if job_aware { c.job_sent } else { c.sent };
        self.queue.extend(input.coflows.iter().map(|c| self.cfg.queue(attained(c))));
        self.order.clear();
        self.order.extend(0..input.coflows.len());
        let queue = &self.queue;
        self.order.sort_by_key(|&i| queue[i]);
        self.rate.clear();
        self.rate.resize(input.coflows.len(), 0.0);

        // Each port's share per queue present there.
        self.present.clear();
        self.present.resize(k * resources, false);
        self.total_weight.clear();
        self.total_weight.resize(resources, 0.0);
        for (i, c) in input.coflows.iter().enumerate() {
            let q = self.queue[i];
            for &r in &self.shapes[&c.id].resources {
                let slot = q * resources + r as usize;
                if !self.present[slot] {
                    self.present[slot] = true;
                    self.total_weight[r as usize] += self.cfg.weight(q);
                }
            }
        }
        self.share.clear();
        self.share.resize(k * resources, 0.0);
        for q in 0..k {
            let w = self.cfg.weight(q);
            for (r, (&c, &total)) in cap.iter().zip(&self.total_weight).enumerate() {
                let slot = q * resources + r;
                if self.present[slot] {
                    self.share[slot] = c * w / total;
                }
            }
        }

        // Pass 1: inside each queue's shares, first come first served, flow by flow.
        self.left.clear();
        self.left.extend_from_slice(cap);
        let mut unused = usize::MAX;
        for &i in &self.order {
            let c = &input.coflows[i];
            let mut pool = Pool {
                cap,
                avail: &mut self.share,
                base: self.queue[i] * resources,
                mirror: Some(&mut self.left),
                open: &mut unused,
            };
            self.rate[i] += serve(c, &self.shapes[&c.id], input.legs, out, &mut pool);
        }

        // Pass 2: what the shares left unused, in the same order, so that no port idles while a
        // flow through it could send. It stops once every port some flow uses is full.
        let mut open = (0..resources).filter(|&r| self.total_weight[r] > 0.0 && self.left[r] > cap[r] * FULL).count();
        for &i in &self.order {
            if open == 0 {
                break;
            }
            let c = &input.coflows[i];
            let mut pool = Pool { cap, avail: &mut self.left, base: 0, mirror: None, open: &mut open };
            self.rate[i] += serve(c, &self.shapes[&c.id], input.legs, out, &mut pool);
        }

        // Wake when a served coflow will have crossed its threshold, as the report will show:
        // predicted from the last report and the rates just given, not before the next report.
        // Job-aware, a job's bytes grow at the rates of all its coflows.
        let mut job_rate: BTreeMap<CoflowId, f64> = BTreeMap::new();
        if job_aware {
            for (c, &r) in input.coflows.iter().zip(&self.rate) {
                *job_rate.entry(c.job).or_default() += r;
            }
        }
        let mut wake: Option<Nanos> = None;
        for (i, c) in input.coflows.iter().enumerate() {
            let threshold = self.cfg.threshold(self.queue[i]);
            let rate = if job_aware { job_rate[&c.job] } else { self.rate[i] };
            if !threshold.is_finite() || rate <= 0.0 || self.rate[i] <= 0.0 {
                continue;
            }
            let secs = ((threshold - attained(c)) / rate).max(0.0);
            let at = input.now.saturating_add(Nanos::from_secs_f64(secs)).max(input.next_report);
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        wake
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Fabric;
    use coflow_core::{MachineId, Rate};

    fn decide(sent: &[f64], fabric: &Fabric) -> Vec<f64> {
        decide_jobs(sent, sent, AaloConfig::default(), fabric)
    }

    /// Each coflow `i` has sent `sent[i]` and its job `job_sent[i]`, all on one route.
    fn decide_jobs(sent: &[f64], job_sent: &[f64], cfg: AaloConfig, fabric: &Fabric) -> Vec<f64> {
        let route = fabric.route(MachineId(0), MachineId(1));
        let legs: Vec<BlindLeg> = sent.iter().map(|_| BlindLeg { route, active_flows: 1 }).collect();
        let coflows: Vec<BlindCoflow> = sent
            .iter()
            .enumerate()
            .map(|(i, &s)| BlindCoflow {
                id: CoflowId(i as u64),
                arrival: Nanos::from_millis(i as u64),
                weight: 1.0,
                sent: s,
                job: CoflowId(i as u64),
                job_sent: job_sent[i],
                active_flows: 1,
                legs: i..i + 1,
            })
            .collect();
        let input = BlindInput { now: Nanos::ZERO, fabric, coflows: &coflows, legs: &legs, next_report: Nanos::ZERO };
        let mut out = BlindAllocation::default();
        out.reset(&input);
        Aalo::new(cfg).poll_allocation(&input, &mut out);
        out.leg_rate
    }

    #[test]
    fn thresholds_are_exponentially_spaced() {
        let cfg = AaloConfig::default();
        let mib = MIB as f64;
        assert_eq!(cfg.queue(0.0), 0);
        assert_eq!(cfg.queue(10.0 * mib - 1.0), 0);
        assert_eq!(cfg.queue(10.0 * mib), 1);
        assert_eq!(cfg.queue(99.0 * mib), 1);
        assert_eq!(cfg.queue(100.0 * mib), 2);
        assert_eq!(cfg.queue(1e30), 9);
        assert_eq!(cfg.threshold(1), 100.0 * mib);
        assert!(cfg.threshold(9).is_infinite());
    }

    #[test]
    fn one_queue_is_first_come_first_served() {
        let fabric = Fabric::big_switch(2, Rate::from_bytes_per_sec(100.0));
        assert_eq!(decide(&[0.0, 5.0], &fabric), [100.0, 0.0]);
    }

    #[test]
    fn queues_share_a_port_by_weight_so_nothing_starves() {
        // The earlier coflow has sent 20 MiB (queue 1, weight 9); the later one nothing (queue 0,
        // weight 10): the later one goes first, and the earlier one keeps 9/19 of the port.
        let fabric = Fabric::big_switch(2, Rate::from_bytes_per_sec(190.0));
        let rates = decide(&[20.0 * MIB as f64, 0.0], &fabric);
        assert!((rates[0] - 90.0).abs() < 1e-9 && (rates[1] - 100.0).abs() < 1e-9, "{rates:?}");
    }

    #[test]
    fn job_aware_ranks_by_the_jobs_bytes() {
        // Both coflows have sent nothing themselves; the first one's job has sent 20 MiB (an
        // earlier stage). Plain D-CLAS serves the first (arrival order in queue 0); job-aware
        // D-CLAS puts it in queue 1, behind the second, which gets 10/19 of the port.
        let fabric = Fabric::big_switch(2, Rate::from_bytes_per_sec(190.0));
        let (sent, job_sent) = ([0.0, 0.0], [20.0 * MIB as f64, 0.0]);
        assert_eq!(decide_jobs(&sent, &job_sent, AaloConfig::default(), &fabric), [190.0, 0.0]);
        let cfg = AaloConfig { job_aware: true, ..Default::default() };
        let rates = decide_jobs(&sent, &job_sent, cfg, &fabric);
        assert!((rates[0] - 90.0).abs() < 1e-9 && (rates[1] - 100.0).abs() < 1e-9, "{rates:?}");
    }
}
