//! A service's metrics: a `prometheus-client` registry under the `coflow_` prefix, with
//! `coflow_build_info`, histograms the service observes as events happen, and counters and gauges
//! it reads from its state at each scrape ([`Snapshot`]).

use std::fmt::Write;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// The content type of the text [`Metrics::encode`] writes (OpenMetrics, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A counter or a gauge read from a service's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows; exposed with the `_total` suffix.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// A sample's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A count.
    Int(u64),
    /// A measurement.
    Float(f64),
}

/// One counter or gauge, read from a service's state: its name under the service's prefix
/// (without `_total`), help text, kind, labels and value. Samples of one name come together.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The name under the service's prefix, e.g. `decisions` for `coflow_coordinator_decisions_total`.
    pub name: &'static str,
    /// What it counts or measures, one sentence.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Label pairs.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: Value,
}

impl Sample {
    /// An unlabelled counter.
    pub fn counter(name: &'static str, help: &'static str, v: u64) -> Sample {
        Sample { name, help, kind: Kind::Counter, labels: Vec::new(), value: Value::Int(v) }
    }

    /// An unlabelled gauge.
    pub fn gauge(name: &'static str, help: &'static str, v: Value) -> Sample {
        Sample { name, help, kind: Kind::Gauge, labels: Vec::new(), value: v }
    }

    /// The same with a label added.
    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Sample {
        self.labels.push((key, value.into()));
        self
    }
}

/// The counters and gauges of the last [`Snapshot::set`], encoded at each scrape.
#[derive(Debug, Default)]
pub struct Snapshot(Mutex<Vec<Sample>>);

impl Snapshot {
    /// Replaces the samples.
    pub fn set(&self, samples: Vec<Sample>) {
        *self.0.lock().expect("snapshot lock") = samples;
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let samples = self.0.lock().expect("snapshot lock");
        let mut i = 0;
        while i < samples.len() {
            let first = &samples[i];
            let n = samples[i..].iter().take_while(|s| s.name == first.name).count();
            let kind = match first.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let mut family = encoder.encode_descriptor(first.name, first.help, None, kind)?;
            if n == 1 && first.labels.is_empty() {
                // Unlabelled: encoded as `name value`, not `name{} value`.
                encode_value(first, family)?;
            } else {
                for s in &samples[i..i + n] {
                    let labels: Vec<(&str, &str)> = s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    encode_value(s, family.encode_family(&labels)?)?;
                }
            }
            i += n;
        }
        Ok(())
    }
}

fn encode_value(s: &Sample, metric: prometheus_client::encoding::MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
    match (s.kind, s.value) {
        (Kind::Counter, Value::Int(v)) => ConstCounter::new(v).encode(metric),
        (Kind::Counter, Value::Float(v)) => ConstCounter::new(v).encode(metric),
        (Kind::Gauge, Value::Int(v)) => ConstGauge::new(v as i64).encode(metric),
        (Kind::Gauge, Value::Float(v)) => ConstGauge::new(v).encode(metric),
    }
}

/// A service's metrics: the registry (prefix `coflow_`), the service's own sub-registry
/// (`coflow_<service>_`) for its histograms, and the snapshot of its counters and gauges.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    snapshot: Arc<Snapshot>,
}

impl Metrics {
    /// The metrics of `service` (`coordinator` or `agent`), with
    /// `coflow_build_info{service, version}` = 1.
    pub fn new(service: &'static str, version: &'static str) -> Metrics {
        let mut registry = Registry::with_prefix("coflow");
        let info = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
        info.get_or_create(&vec![("service", service), ("version", version)]).set(1);
        registry.register("build_info", "The version of this service; always 1", info);
        let snapshot = Arc::new(Snapshot::default());
        registry.sub_registry_with_prefix(service).register_collector(Box::new(snapshot.clone()));
        Metrics { registry, snapshot }
    }

    /// The service's sub-registry (`coflow_<service>_`), to register histograms in.
    pub fn registry(&mut self, service: &'static str) -> &mut Registry {
        self.registry.sub_registry_with_prefix(service)
    }

    /// The snapshot of counters and gauges the service sets before each scrape.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

/// `count` buckets from `start`, each `factor` times the one before.
pub fn exponential_buckets(start: f64, factor: f64, count: u16) -> Vec<f64> {
    prometheus_client::metrics::histogram::exponential_buckets(start, factor, count).collect()
}

/// The metric families of an exposition: (name as queried, type, help), in order. A counter's name
/// carries `_total`; a histogram is listed once, by its base name.
pub fn parse_families(text: &str) -> Vec<(String, String, String)> {
    let mut help = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, h) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(name.to_string(), h.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let queried = if kind == "counter" { format!("{name}_total") } else { name.to_string() };
            out.push((queried, kind.to_string(), help.get(name).cloned().unwrap_or_default()));
        }
    }
    out
}

/// The metrics reference page (Markdown) for the expositions of the given services: one table per
/// service, a row per metric family with its type, labels and help.
pub fn reference(services: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (service, text) in services {
        let _ = writeln!(s, "### {service}\n\n| metric | type | labels | meaning |\n| --- | --- | --- | --- |");
        for (name, kind, help) in parse_families(text) {
            let labels = labels_of(text, &name, &kind);
            let _ = writeln!(s, "| `{name}` | {kind} | {labels} | {help} |");
        }
        s.push('\n');
    }
    s
}

/// The label names a family's samples carry (`le` of histogram buckets left out).
fn labels_of(text: &str, name: &str, kind: &str) -> String {
    let base = if kind == "histogram" { format!("{name}_bucket") } else { name.to_string() };
    let mut names = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(base.as_str()) else { continue };
        let Some(inner) = rest.strip_prefix('{').and_then(|r| r.split_once('}')).map(|(i, _)| i) else { continue };
        for pair in inner.split(',') {
            if let Some((k, _)) = pair.split_once('=')
                && k != "le"
            {
                names.insert(k.to_string());
            }
        }
    }
    if names.is_empty() {
        "".into()
    } else {
        names.into_iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::histogram::Histogram;

    #[test]
    fn build_info_samples_and_histograms_encode_as_prometheus_reads_them() {
        let mut m = Metrics::new("coordinator", "1.2.3");
        let h = Histogram::new(exponential_buckets(0.001, 10.0, 3));
        m.registry("coordinator").register("decision_seconds", "Time to decide", h.clone());
        h.observe(0.05);
        m.snapshot().set(vec![
            Sample::counter("decisions", "Policy decisions.", 7),
            Sample::gauge("agents_alive", "Live agents.", Value::Int(3)),
            Sample::counter("flows_failed_by_reason", "Failed flows.", 2).with("reason", "corrupted"),
            Sample::counter("flows_failed_by_reason", "Failed flows.", 1).with("reason", "data-lost"),
        ]);
        let text = m.encode();
        for line in [
            "coflow_build_info{service=\"coordinator\",version=\"1.2.3\"} 1",
            "coflow_coordinator_decisions_total 7",
            "coflow_coordinator_agents_alive 3",
            "coflow_coordinator_flows_failed_by_reason_total{reason=\"corrupted\"} 2",
            "coflow_coordinator_flows_failed_by_reason_total{reason=\"data-lost\"} 1",
            "coflow_coordinator_decision_seconds_bucket{le=\"0.01\"} 0",
            "coflow_coordinator_decision_seconds_bucket{le=\"0.1\"} 1",
            "coflow_coordinator_decision_seconds_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        let families: Vec<String> = parse_families(&text).into_iter().map(|f| f.0).collect();
        assert_eq!(
            families,
            [
                "coflow_build_info",
                "coflow_coordinator_decisions_total",
                "coflow_coordinator_agents_alive",
                "coflow_coordinator_flows_failed_by_reason_total",
                "coflow_coordinator_decision_seconds",
            ]
        );
        let page = reference(&[("coordinator", &text)]);
        assert!(
            page.contains("| `coflow_coordinator_flows_failed_by_reason_total` | counter | `reason` | Failed flows. |"),
            "{page}"
        );
        assert!(page.contains("| `coflow_coordinator_decision_seconds` | histogram |  | Time to decide. |"), "{page}");
    }
}
