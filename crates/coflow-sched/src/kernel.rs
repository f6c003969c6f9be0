//! `kernel`: the allocation steps the MADD family shares, whatever its order of coflows.
//!
//! - [`bottleneck`]: a coflow's effective bottleneck `Γ` (Varys Eq. 1).
//! - [`madd`]: Minimum-Allocation-for-Desired-Duration (Varys §5.3.3) on what earlier coflows
//!   left: one rate `σ = 1/Γ'` for every leg, so that all of a coflow's flows finish together.
//! - [`backfill`]: work conservation (Varys §5.3.4), single legs sped up by what their route has
//!   left, through the capped [`Allocation::give_leg`].
//! - [`FULL`]: when a resource counts as full.
//!
//! Policies order coflows; the kernel gives them bandwidth. `varys`, `deadline`, `karuna`,
//! `sincronia` and `mrtf` (with `siphon` on top) call it, and `priority`, `coflowsim` and `aalo`
//! share its notion of a full resource.

use crate::fabric::ResourceId;
use crate::state::{Allocation, CoflowState, Input};

/// A port with less than this fraction of its capacity left counts as full.
pub(crate) const FULL: f64 = 1e-9;

/// Varys Eq. 1: the time the most loaded resource needs for these bytes at these capacities.
pub fn bottleneck(loads: &[(ResourceId, f64)], capacity: &[f64]) -> f64 {
    loads.iter().map(|&(r, b)| b / capacity[r as usize]).fold(0.0, f64::max)
}

/// MADD on the leftover bandwidth `left`: the largest `σ = 1/Γ'` at which every flow can send
/// `remaining × σ`; takes that bandwidth out of `left` and returns `σ` (zero when a port is full).
pub(crate) fn madd(loads: &[(ResourceId, f64)], left: &mut [f64], capacity: &[f64]) -> f64 {
    let mut gamma: f64 = 0.0;
    for &(r, b) in loads {
        let l = left[r as usize];
        if l <= capacity[r as usize] * FULL {
            return 0.0;
        }
        gamma = gamma.max(b / l);
    }
    if gamma <= 0.0 {
        return 0.0;
    }
    let sigma = 1.0 / gamma;
    for &(r, b) in loads {
        left[r as usize] = (left[r as usize] - b * sigma).max(0.0);
    }
    sigma
}

/// Backfill: speeds up single legs of `c` by as much as every resource on their route has left,
/// sender by sender; returns whether it sped any up.
///
/// Every leg it touches fills one of its resources, so a decision hands out at most as many
/// extras as the fabric has resources, and senders with a full port are skipped whole.
pub(crate) fn backfill(
    input: &Input<'_>,
    c: &CoflowState,
    left: &mut [f64],
    capacity: &[f64],
    out: &mut Allocation,
) -> bool {
    let mut any = false;
    for sender in input.senders_of(c) {
        let first = sender.resource as usize;
        for l in sender.legs.clone() {
            if left[first] <= capacity[first] * FULL {
                break;
            }
            let leg = &input.legs[l];
            if !leg.is_active() {
                continue;
            }
            let mut room = f64::INFINITY;
            for &r in leg.route.hops() {
                room = room.min(left[r as usize]);
                if left[r as usize] <= capacity[r as usize] * FULL {
                    room = 0.0;
                }
            }
            let remaining = leg.remaining(c);
            if room > 0.0 && room.is_finite() && remaining > 0.0 {
                out.give_leg(l, room, remaining);
                for &r in leg.route.hops() {
                    left[r as usize] = (left[r as usize] - room).max(0.0);
                }
                any = true;
            }
        }
    }
    any
}
