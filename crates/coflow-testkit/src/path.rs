//! Where a get's time goes: a `tracing` layer that records, with the time it saw them, the
//! events the services emit under the target `coflow::path` at each step of a get (the agent
//! receives it, the coordinator grants it, pushes its rate, the source agent receives the rate
//! and the request, writes the first block, the receiver reads it). One process holds the
//! coordinator and the agents of an in-process cluster, so one clock orders every step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// The target under which the services mark the steps of a get.
pub const TARGET: &str = "coflow::path";

/// The steps of a get, in order, as the services name them.
pub const STEPS: [&str; 9] =
    ["get", "grant", "push", "granted", "rate", "requested", "request", "first-write", "first-byte"];

/// One event: its step, its flow (for the steps that know it), the coflow and piece (for those
/// that know them) and when it was seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// The step.
    pub step: String,
    /// The flow.
    pub flow: Option<u64>,
    /// The coflow.
    pub coflow: Option<u64>,
    /// The piece.
    pub data_id: Option<String>,
    /// A rate the step carries (`push`, `rate`).
    pub rate: Option<f64>,
    /// When it was seen.
    pub at: Instant,
}

/// The recording layer; clones share what they recorded.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    marks: Arc<Mutex<Vec<Mark>>>,
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    flow: Option<u64>,
    coflow: Option<u64>,
    data_id: Option<String>,
    rate: Option<f64>,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "flow" => self.flow = Some(value),
            "coflow" => self.coflow = Some(value),
            _ => {}
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "rate" {
            self.rate = Some(value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "data_id" {
            self.data_id = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = Some(format!("{value:?}"));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let at = Instant::now();
        let mut f = Fields::default();
        event.record(&mut f);
        let Some(step) = f.message else { return };
        let mark = Mark { step, flow: f.flow, coflow: f.coflow, data_id: f.data_id, rate: f.rate, at };
        self.marks.lock().expect("marks lock").push(mark);
    }
}

impl Recorder {
    /// Takes what was recorded so far.
    pub fn take(&self) -> Vec<Mark> {
        std::mem::take(&mut *self.marks.lock().expect("marks lock"))
    }
}

/// The steps of one get, each at the first time it was seen (a rate at the first push or
/// receipt of a nonzero rate).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GetSteps {
    /// By step name.
    pub at: HashMap<String, Instant>,
}

/// Groups marks into gets: the agent's `get` and `granted` name the coflow and piece, which ties
/// the flow to them; every later step names the flow.
pub fn gets(marks: &[Mark]) -> HashMap<(u64, String), GetSteps> {
    let mut by_piece: HashMap<(u64, String), GetSteps> = HashMap::new();
    let mut flow_of: HashMap<u64, (u64, String)> = HashMap::new();
    for m in marks {
        if let (Some(c), Some(d)) = (m.coflow, &m.data_id) {
            let key = (c, d.clone());
            if let Some(f) = m.flow {
                flow_of.insert(f, key.clone());
            }
            by_piece.entry(key).or_default().at.entry(m.step.clone()).or_insert(m.at);
        }
    }
    for m in marks {
        if m.coflow.is_some() || m.rate == Some(0.0) {
            continue;
        }
        let Some(key) = m.flow.and_then(|f| flow_of.get(&f)) else { continue };
        by_piece.entry(key.clone()).or_default().at.entry(m.step.clone()).or_insert(m.at);
    }
    by_piece
}
