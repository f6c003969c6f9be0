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

use coflow_core::{CoflowId, MIB, Nanos};

use crate::blind::{BlindAllocation, BlindCoflow, BlindInput, BlindScheduler};
use crate::kernel::FULL;
use crate::shape::{Leftover, Pool, Shapes, serve, set_bit, words};

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
    /// Each active coflow's legs grouped by sender and the resources its active legs cross.
    shapes: Shapes,
    /// Scratch, per decision.
    queue: Vec<usize>,
    order: Vec<usize>,
    /// Per queue, where its coflows begin in `order`, while it is counted out.
    at: Vec<usize>,
    rate: Vec<f64>,
    /// Per queue and resource (`q · resources + r`): whether the queue uses it, then its share
    /// left. Only the slots listed in `touched` (as queue and resource) are set, and they are
    /// cleared after the decision.
    share: Vec<f64>,
    present: Vec<bool>,
    touched: Vec<(usize, usize)>,
    /// Per queue, the resources where its share has room, as a bit set (`words(resources)` words
    /// a queue), all clear between decisions.
    share_room: Vec<u64>,
    /// Per queue, its weight.
    weights: Vec<f64>,
    total_weight: Vec<f64>,
    left: Vec<f64>,
    /// Scratch: a coflow's receivers with room, as a bit set.
    open: Vec<u64>,
    /// Scratch: the resources with room, as a bit set.
    room: Vec<u64>,
}

impl Aalo {
    /// D-CLAS with these parameters.
    pub fn new(cfg: AaloConfig) -> Aalo {
        assert!(cfg.queues >= 1 && cfg.first_threshold > 0.0 && cfg.factor > 1.0, "invalid Aalo parameters");
        Aalo { cfg, ..Aalo::default() }
    }
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
        self.shapes.remove(coflow);
    }

    fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
        let cap = input.fabric.capacities();
        let resources = cap.len();
        let k = self.cfg.queues;
        self.shapes.update(input, |_, _| {});
        // Coflows that left without being said finished: forgotten.
        if self.shapes.len() > input.coflows.len() {
            self.shapes.retain(&input.ids());
        }

        // Queues, and the order: by queue, then arrival (the input's order).
        self.queue.clear();
        let job_aware = self.cfg.job_aware;
        let attained = |c: &BlindCoflow| if job_aware { c.job_sent } else { c.sent };
        self.queue.extend(input.coflows.iter().map(|c| self.cfg.queue(attained(c))));
        // Stably by queue, counted out (queues are few): the input's order inside each queue.
        self.at.clear();
        self.at.resize(k + 1, 0);
        for &q in &self.queue {
            self.at[q + 1] += 1;
        }
        for q in 0..k {
            self.at[q + 1] += self.at[q];
        }
        self.order.clear();
        self.order.resize(input.coflows.len(), 0);
        for (i, &q) in self.queue.iter().enumerate() {
            self.order[self.at[q]] = i;
            self.at[q] += 1;
        }
        self.rate.clear();
        self.rate.resize(input.coflows.len(), 0.0);

        // Each port's share per queue present there (only the slots of queues present are set).
        self.present.resize(k * resources, false);
        self.share.resize(k * resources, 0.0);
        let room_words = words(resources);
        self.share_room.resize(k * room_words, 0);
        self.weights.clear();
        self.weights.extend((0..k).map(|q| self.cfg.weight(q)));
        self.touched.clear();
        self.total_weight.clear();
        self.total_weight.resize(resources, 0.0);
        for (i, c) in input.coflows.iter().enumerate() {
            let q = self.queue[i];
            for &(r, _) in &self.shapes[&c.id].resources {
                let slot = q * resources + r as usize;
                if !self.present[slot] {
                    self.present[slot] = true;
                    self.touched.push((q, r as usize));
                    self.total_weight[r as usize] += self.weights[q];
                }
            }
        }
        for &(q, r) in &self.touched {
            let share = cap[r] * self.weights[q] / self.total_weight[r];
            self.share[q * resources + r] = share;
            if share > cap[r] * FULL {
                set_bit(&mut self.share_room[q * room_words..], r as u32);
            }
        }

        // Pass 1: inside each queue's shares, first come first served, flow by flow.
        self.left.clear();
        self.left.extend_from_slice(cap);
        let mut unused = usize::MAX;
        for &i in &self.order {
            let c = &input.coflows[i];
            let q = self.queue[i];
            let mut pool = Pool {
                cap,
                avail: &mut self.share,
                base: q * resources,
                mirror: Some(&mut self.left),
                open: &mut unused,
                room: Some(&mut self.share_room[q * room_words..(q + 1) * room_words]),
            };
            self.rate[i] += serve(c, &self.shapes[&c.id], input.legs, out, &mut pool, &mut self.open);
        }
        for &(q, r) in &self.touched {
            self.present[q * resources + r] = false;
            self.share[q * resources + r] = 0.0;
        }
        self.share_room.fill(0);

        // Pass 2: what the shares left unused, in the same order, so that no port idles while a
        // flow through it could send. It stops once every port some flow uses is full.
        let weight = &self.total_weight;
        let mut rest = Leftover::new(cap, &mut self.left, |r| weight[r] > 0.0, &mut self.room);
        for &i in &self.order {
            if !rest.any() {
                break;
            }
            let c = &input.coflows[i];
            self.rate[i] += rest.serve(c, &self.shapes[&c.id], input.legs, out, &mut self.open);
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
    use crate::blind::BlindLeg;
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
                width: 1,
                pending: 0,
                active_flows: 1,
                legs: i..i + 1,
            })
            .collect();
        let input = BlindInput {
            now: Nanos::ZERO,
            fabric,
            coflows: &coflows,
            legs: &legs,
            next_report: Nanos::ZERO,
            everything: true,
            legs_finished: &[],
            flows_finished: &[],
        };
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
