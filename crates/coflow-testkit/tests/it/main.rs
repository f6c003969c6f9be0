//! Loopback integration tests: a coordinator, several agents and clients in one process on
//! `127.0.0.1:0`.

mod abuse;
mod capability;
mod faults;
mod live;
mod ops;
mod rates;
mod session;
mod tls;
mod wide_area;

use coflow_client::CoflowId;

/// Distinct, position-dependent bytes for piece `tag`, so that a swapped or shifted piece fails
/// the comparison.
pub(crate) fn content(tag: u64, len: usize) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub(crate) fn tag(coflow: CoflowId, m: u64, r: u64) -> u64 {
    coflow.0.wrapping_mul(1_000_000).wrapping_add(m * 1000 + r)
}

/// Logs to the test output, so that a failing test shows its trace.
pub(crate) fn subscribe() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}
