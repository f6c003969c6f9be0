//! Weighted max-min fair sharing by progressive filling.
//!
//! Every route carries `weight` flows; all flows rise together until a resource fills, the
//! flows crossing it freeze at that level, and the rest keep rising.
//! A heap of resources keyed by their fill level makes one call `O(h·n log m)` for `n` routes of
//! `h` hops over `m` resources.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::fabric::{ResourceId, Route};

/// Scratch space reused across calls, so that the hot path does not allocate.
#[derive(Debug, Default)]
pub struct MaxMin {
    rem: Vec<f64>,
    weight: Vec<f64>,
    version: Vec<u32>,
    frozen: Vec<bool>,
    /// Routes crossing each resource, as a CSR adjacency: `start[r]..start[r+1]` into `adj`.
    start: Vec<usize>,
    adj: Vec<u32>,
    heap: BinaryHeap<Level>,
}

#[derive(Debug, PartialEq)]
struct Level {
    level: f64,
    resource: ResourceId,
    version: u32,
}

impl Eq for Level {}

impl Ord for Level {
    fn cmp(&self, other: &Self) -> Ordering {
        // A min-heap on level, ties broken by resource id for determinism.
        other.level.total_cmp(&self.level).then_with(|| other.resource.cmp(&self.resource))
    }
}

impl PartialOrd for Level {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl MaxMin {
    /// Computes the max-min fair per-flow rate of every route and writes it into `rates`.
    ///
    /// `routes[i]` carries `weights[i]` flows; `capacity[r]` is resource `r`'s bytes per second.
    /// Local routes (crossing nothing) get an infinite rate.
    pub fn solve(&mut self, capacity: &[f64], routes: &[Route], weights: &[f64], rates: &mut [f64]) {
        let m = capacity.len();
        let n = routes.len();
        debug_assert_eq!(weights.len(), n);
        debug_assert_eq!(rates.len(), n);
        self.rem.clear();
        self.rem.extend_from_slice(capacity);
        self.weight.clear();
        self.weight.resize(m, 0.0);
        self.version.clear();
        self.version.resize(m, 0);
        self.frozen.clear();
        self.frozen.resize(n, false);

        // Build the resource -> routes adjacency.
        self.start.clear();
        self.start.resize(m + 1, 0);
        for (i, rt) in routes.iter().enumerate() {
            for &r in rt.hops() {
                self.start[r as usize + 1] += 1;
                self.weight[r as usize] += weights[i];
            }
        }
        for r in 0..m {
            self.start[r + 1] += self.start[r];
        }
        self.adj.clear();
        self.adj.resize(self.start[m], 0);
        let mut fill = self.start.clone();
        for (i, rt) in routes.iter().enumerate() {
            if rt.is_local() {
                rates[i] = f64::INFINITY;
                self.frozen[i] = true;
            }
            for &r in rt.hops() {
                self.adj[fill[r as usize]] = i as u32;
                fill[r as usize] += 1;
            }
        }

        self.heap.clear();
        for r in 0..m {
            if self.weight[r] > 0.0 {
                self.heap.push(Level { level: self.rem[r] / self.weight[r], resource: r as ResourceId, version: 0 });
            }
        }
        while let Some(Level { level, resource, version }) = self.heap.pop() {
            let r = resource as usize;
            if version != self.version[r] || self.weight[r] <= 0.0 {
                continue;
            }
            // Resource r fills at `level`: freeze every unfrozen route crossing it.
            let level = level.max(0.0);
            for k in self.start[r]..self.start[r + 1] {
                let i = self.adj[k] as usize;
                if self.frozen[i] {
                    continue;
                }
                self.frozen[i] = true;
                rates[i] = level;
                let w = weights[i];
                for &h in routes[i].hops() {
                    let h = h as usize;
                    self.rem[h] = (self.rem[h] - w * level).max(0.0);
                    self.weight[h] -= w;
                    self.version[h] += 1;
                    if h != r && self.weight[h] > 1e-12 {
                        self.heap.push(Level {
                            level: self.rem[h] / self.weight[h],
                            resource: h as ResourceId,
                            version: self.version[h],
                        });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_flows_share_a_port_and_a_third_takes_the_rest() {
        // Routes: a = 0->2, b = 1->2, c = 1->3 (resources are just ids here), capacities 1.
        let routes = [Route::new(&[0, 2]), Route::new(&[1, 2]), Route::new(&[1, 3])];
        let mut rates = [0.0; 3];
        MaxMin::default().solve(&[1.0; 4], &routes, &[1.0, 1.0, 1.0], &mut rates);
        assert_eq!(rates, [0.5, 0.5, 0.5]);
    }

    #[test]
    fn a_bottlenecked_flow_leaves_room_for_others() {
        // a = 0->2 with capacity of 2 at 0.25; b = 1->2 takes the rest of resource 2.
        let routes = [Route::new(&[0, 2]), Route::new(&[1, 2])];
        let mut rates = [0.0; 2];
        MaxMin::default().solve(&[0.25, 1.0, 1.0], &routes, &[1.0, 1.0], &mut rates);
        assert_eq!(rates, [0.25, 0.75]);
    }

    #[test]
    fn weights_count_flows() {
        // Three flows on route a and one on b share resource 1 equally per flow.
        let routes = [Route::new(&[0, 1]), Route::new(&[2, 1])];
        let mut rates = [0.0; 2];
        MaxMin::default().solve(&[1.0; 3], &routes, &[3.0, 1.0], &mut rates);
        assert_eq!(rates, [0.25, 0.25]);
    }
}
