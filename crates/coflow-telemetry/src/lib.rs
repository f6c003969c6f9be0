//! What the services show of themselves over HTTP: Prometheus metrics through the official
//! client library (`prometheus-client`), liveness and readiness, and any pages a service adds
//! (the coordinator's web page), served by axum on one listener until shutdown.
//!
//! # Layout
//! - `metrics`: [`Metrics`], a service's registry with `coflow_build_info`; [`Sample`]s, the
//!   counters and gauges a service reads from its state at each scrape ([`Snapshot`]); histogram
//!   buckets; [`reference()`], the metrics reference page generated from an encoded registry.
//! - `http`: [`Health`] (ready or not), [`router`] (`/metrics`, `/healthz`, `/readyz`) and
//!   [`serve`], which gives each request its [`Peer`].
//! - `places`: which connections the listener serves, counted by peer address and group, and
//!   which it asks to close to make room for a newcomer.
//! - `body`: [`Bodies`], a bound on the large response bodies alive at once, one per peer group.

#![warn(missing_docs)]

mod body;
mod http;
mod metrics;
mod places;

pub use body::{Bodies, BodyPlace};
pub use http::{CONNECTION_LIFETIME, HEADER_TIMEOUT, Health, Peer, SEND_BUFFER, Scrape, WRITE_BUFFER, router, serve};
pub use metrics::{
    CONTENT_TYPE, Kind, Metrics, Sample, Snapshot, Value, exponential_buckets, parse_families, reference,
};
pub use places::{MAX_CLOSING, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS, MAX_CONNECTIONS_PER_GROUP};
pub use prometheus_client;
