//! The wide-area topology file (JSON, documented in `docs/src/guide/wan-topology.md`), its validation, and
//! the [`WanConfig`] a run on it uses.
//!
//! Reading is in two steps, because a file does not know the workload it will carry:
//! [`Topology::from_json`] (or [`Topology::from_path`], [`Topology::named`]) checks everything
//! the file says on its own (one bandwidth distribution per link, datacenter names, sample
//! files), then [`Topology::config`] places the workload's machines, applies what the caller
//! overrides (the command line's `--machines-per-dc`, `--redraw-ms`, `--per-connection`), and
//! builds the [`Wan`] and its fabric.
//! Every error names the field (or the file and line) it is about.

use std::path::{Path, PathBuf};

use coflow_core::Nanos;
use coflow_sched::{Bandwidth, Link, MAX_BANDWIDTH, Wan, WanError};
use coflow_trace::{read_regular_text, read_text};
use serde::Deserialize;

use crate::WanConfig;

/// The built-in topology (`--wan default`): three datacenters, as Siphon's inter-coflow testbed
/// (Victoria, Toronto, Montreal), with links of unequal means and unequal spreads, sized so that
/// the Facebook trace spread evenly over them loads each link to about 0.5–0.7 on average.
pub const DEFAULT_TOPOLOGY: &str = include_str!("../../../docs/wan-default.json");

/// Bytes per second in a Gbit/s, the unit of the file's bandwidths.
pub const GBPS: f64 = 125_000_000.0;

/// The redraw interval when neither the file nor the caller names one, in milliseconds.
pub const DEFAULT_REDRAW_MS: u64 = 5_000;

/// The longest redraw interval a run takes, in milliseconds (about 584 years): the simulated
/// clock counts nanoseconds in 64 bits and ends there, so a longer one would not fit it.
pub const MAX_INTERVAL_MS: u64 = Nanos::MAX_MILLIS;

/// The least bandwidth a link may take, in bytes per second: 1 kbit/s, a port's least too, below
/// which a replay is redraws on a link that moves next to nothing.
pub const MIN_LINK: f64 = 125.0;

/// The most bytes a topology's samples files hold together (a file named by two links counts
/// twice): 64 MiB, as much as the topology file itself may hold when a coordinator reads it, and
/// millions of samples.
pub const MAX_SAMPLES_BYTES: u64 = 64 << 20;

/// The longest datacenter name, in bytes: an agent names its datacenter in 1 to 256 bytes
/// without control characters, so no agent could join a datacenter named otherwise.
pub const MAX_DATACENTER_NAME: usize = 256;

/// The most bytes of a file's text an error quotes: enough to find the mistake on its line, too
/// few to show a line of a file the topology's author could not read.
const QUOTED_LINE: usize = 16;

/// The most bytes of a datacenter name an error quotes.
const QUOTED_NAME: usize = 32;

/// A topology that cannot be used; the message names the field, or the file and line.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// The topology file could not be read.
    #[error("reading {what} {}: {message}", path.display())]
    Read {
        /// `topology`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Not JSON of the documented shape (serde's message names the field and, from text, the
    /// line and column).
    #[error("parsing JSON: {0}")]
    Json(String),
    /// The file places machines twice: by `machines_per_dc` and by `placement`.
    #[error("machines_per_dc and placement both place the machines: give one of them")]
    TwoPlacements,
    /// `datacenters` is empty.
    #[error("datacenters: none given")]
    NoDatacenters,
    /// A datacenter name that no agent could give: empty, longer than [`MAX_DATACENTER_NAME`]
    /// bytes, or holding a control character.
    #[error("datacenters[{at}]: {name} is not a name of 1 to {MAX_DATACENTER_NAME} bytes without control characters")]
    DatacenterName {
        /// Where it is in `datacenters`.
        at: usize,
        /// The name, quoted (its start only, if long).
        name: String,
    },
    /// A name given to two datacenters.
    #[error("datacenters[{at}]: {name:?} names datacenters[{first}] already")]
    DuplicateDatacenter {
        /// The name.
        name: String,
        /// Where it is first in `datacenters`.
        first: usize,
        /// Where it is again.
        at: usize,
    },
    /// A name that is not one of `datacenters`.
    #[error("{field}: no datacenter {name:?}")]
    UnknownDatacenter {
        /// Where the name is, e.g. `links[2].from` or `placement[7]`.
        field: String,
        /// The name.
        name: String,
    },
    /// A link with no bandwidth distribution or more than one.
    #[error(
        "links[{link}] ({from} -> {to}): give exactly one bandwidth distribution of constant_gbps, uniform_gbps, \
         normal_gbps, samples_gbps, samples_file"
    )]
    Distribution {
        /// Index of the link.
        link: usize,
        /// Its source datacenter, as named.
        from: String,
        /// Its destination datacenter, as named.
        to: String,
    },
    /// A bandwidth distribution that is not finite and positive, in the file's Gbit/s.
    #[error("{field} ({from} -> {to}): {reason} (Gbit/s)")]
    Bandwidth {
        /// Where it is, e.g. `links[2].uniform_gbps`.
        field: String,
        /// The link's source datacenter, as named.
        from: String,
        /// Its destination datacenter, as named.
        to: String,
        /// What is wrong, quoting the file's numbers.
        reason: String,
    },
    /// A link joins a datacenter to itself.
    #[error("links[{link}] ({name} -> {name}): a link joins two datacenters")]
    SelfLink {
        /// Index of the link.
        link: usize,
        /// The datacenter, as named.
        name: String,
    },
    /// Two links join the same datacenters in the same direction.
    #[error("links[{link}] ({from} -> {to}): links[{first}] joins them already")]
    DuplicateLink {
        /// Index of the second link.
        link: usize,
        /// Index of the first.
        first: usize,
        /// Their source datacenter, as named.
        from: String,
        /// Their destination datacenter, as named.
        to: String,
    },
    /// A samples file that cannot be read (missing, not a regular file, past the bound).
    #[error("{at}: reading {}: {message}", path.display())]
    SamplesRead {
        /// The field and the link's datacenters, e.g. `links[2].samples_file (a -> b)`.
        at: String,
        /// The samples file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A line of a samples file that is not a number.
    #[error("{at}: {} line {line}: not a number: {text}", path.display())]
    Sample {
        /// The field and the link's datacenters, e.g. `links[2].samples_file (a -> b)`.
        at: String,
        /// The samples file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// Its start, quoted with what is not printable escaped; the rest of the line is not
        /// kept, as the file may be one the topology's author could not read.
        text: String,
    },
    /// A line of a samples file whose number no link may carry (not positive, out of range).
    #[error("{at}: {} line {line}: {reason} (Gbit/s)", path.display())]
    SampleValue {
        /// The field and the link's datacenters, e.g. `links[2].samples_file (a -> b)`.
        at: String,
        /// The samples file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong, quoting the number.
        reason: String,
    },
    /// Two datacenters that hold machines have no link between them in one direction.
    #[error("links: no link from {from:?} to {to:?}, though both hold machines")]
    MissingLink {
        /// The source datacenter, as named.
        from: String,
        /// The destination datacenter, as named.
        to: String,
    },
    /// `placement` names fewer machines than the workload has.
    #[error("placement names {named} machines, the workload has {machines}")]
    PlacementTooShort {
        /// Machines `placement` names.
        named: usize,
        /// Machines of the workload.
        machines: u32,
    },
    /// `machines_per_dc` (or its override) is zero.
    #[error("machines_per_dc: must be at least 1")]
    ZeroMachinesPerDc,
    /// `machines_per_dc` machines in every datacenter are fewer than the workload's.
    #[error("machines_per_dc: {per_dc} machines per datacenter in {dcs} datacenters cannot hold {machines} machines")]
    TooFewPlaces {
        /// Machines per datacenter.
        per_dc: u32,
        /// Datacenters.
        dcs: u32,
        /// Machines of the workload.
        machines: u32,
    },
    /// A redraw interval past [`MAX_INTERVAL_MS`].
    #[error("{field}: {ms} ms is past the end of the simulated clock (at most {MAX_INTERVAL_MS} ms; 0 never redraws)")]
    Interval {
        /// `redraw_ms` or `connection_redraw_ms`, from the file or the caller.
        field: &'static str,
        /// The interval given.
        ms: u64,
    },
    /// `connection_redraw_ms` without per-connection bandwidth.
    #[error("connection_redraw_ms needs per-connection bandwidth (\"per_connection\": true or --per-connection)")]
    RedrawWithoutConnections,
    /// The links and placement do not make a topology (a missing link, a bad distribution).
    #[error(transparent)]
    Wan(#[from] WanError),
}

/// A topology file, read and checked on its own (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// Datacenter names; a datacenter's index is its position.
    pub datacenters: Vec<String>,
    /// Directed links with their distributions, in bytes per second, in file order.
    pub links: Vec<Link>,
    /// `redraw_ms`: how often capacities are redrawn (`0`: never), if the file says.
    pub redraw_ms: Option<u64>,
    /// `machines_per_dc`, if the file says.
    pub machines_per_dc: Option<u32>,
    /// `placement`: every machine's datacenter, if the file says.
    pub placement: Option<Vec<u32>>,
    /// `per_connection`.
    pub per_connection: bool,
    /// `connection_redraw_ms`, if the file says.
    pub connection_redraw_ms: Option<u64>,
    /// The `samples_file`s read, as opened: files a run's outputs must not be written over.
    pub samples_files: Vec<PathBuf>,
}

/// What the caller sets beside the file; each `Some` (or `true`) wins over the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Machines in blocks of N per datacenter, over the file's placement.
    pub machines_per_dc: Option<u32>,
    /// The capacity redraw interval in milliseconds (`0`: never).
    pub redraw_ms: Option<u64>,
    /// Per-connection bandwidth on, even if the file says nothing.
    pub per_connection: bool,
    /// The connection redraw interval in milliseconds (`0`: held for a flow's life).
    pub connection_redraw_ms: Option<u64>,
}

/// The file's shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    datacenters: Vec<String>,
    #[serde(deserialize_with = "coflow_trace::object::objects")]
    links: Vec<LinkSpec>,
    #[serde(default)]
    redraw_ms: Option<u64>,
    #[serde(default)]
    machines_per_dc: Option<u32>,
    #[serde(default)]
    placement: Option<Vec<String>>,
    #[serde(default)]
    per_connection: bool,
    #[serde(default)]
    connection_redraw_ms: Option<u64>,
}

/// One link: its ends and exactly one bandwidth distribution, in Gbit/s.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkSpec {
    from: String,
    to: String,
    #[serde(default)]
    constant_gbps: Option<f64>,
    #[serde(default)]
    uniform_gbps: Option<Vec<f64>>,
    #[serde(default, deserialize_with = "coflow_trace::object::optional_object")]
    normal_gbps: Option<NormalSpec>,
    #[serde(default)]
    samples_gbps: Option<Vec<f64>>,
    #[serde(default)]
    samples_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NormalSpec {
    mean: f64,
    sd: f64,
    min: f64,
}

/// `ms` of `field` as an interval, `0` meaning never (`Nanos::MAX`); past [`MAX_INTERVAL_MS`], an
/// error.
fn interval(field: &'static str, ms: u64) -> Result<Nanos, TopologyError> {
    match ms {
        0 => Ok(Nanos::MAX),
        ms => Nanos::checked_from_millis(ms).ok_or(TopologyError::Interval { field, ms }),
    }
}

impl Topology {
    /// The datacenters and links alone, as a cluster's coordinator schedules them before any
    /// machine joins (its agents name their datacenters); placement and redraws are a
    /// simulation's.
    pub fn wide_area(&self) -> coflow_sched::WideArea {
        coflow_sched::WideArea { datacenters: self.datacenters.clone(), links: self.links.clone() }
    }

    /// The fields this file sets that only a simulation reads, in the file's names: placement,
    /// redraws and per-connection bandwidth, which a live coordinator, reading the datacenters
    /// and links alone ([`Topology::wide_area`]), ignores.
    pub fn simulation_only(&self) -> Vec<&'static str> {
        let set = [
            ("placement", self.placement.is_some()),
            ("machines_per_dc", self.machines_per_dc.is_some()),
            ("redraw_ms", self.redraw_ms.is_some()),
            ("per_connection", self.per_connection),
            ("connection_redraw_ms", self.connection_redraw_ms.is_some()),
        ];
        set.into_iter().filter(|&(_, on)| on).map(|(name, _)| name).collect()
    }

    /// The file of the datacenters and links alone (what [`Topology::wide_area`] gives), which
    /// [`Topology::from_json`] reads back: every distribution in Gbit/s, samples inline.
    pub fn wide_area_json(wa: &coflow_sched::WideArea) -> String {
        let links: Vec<serde_json::Value> = wa
            .links
            .iter()
            .map(|l| {
                let mut o = serde_json::Map::new();
                o.insert("from".into(), wa.datacenters[l.from as usize].clone().into());
                o.insert("to".into(), wa.datacenters[l.to as usize].clone().into());
                let (key, value) = match &l.bandwidth {
                    Bandwidth::Constant(v) => ("constant_gbps", serde_json::json!(v / GBPS)),
                    Bandwidth::Uniform(lo, hi) => ("uniform_gbps", serde_json::json!([lo / GBPS, hi / GBPS])),
                    Bandwidth::Normal { mean, sd, min } => {
                        ("normal_gbps", serde_json::json!({"mean": mean / GBPS, "sd": sd / GBPS, "min": min / GBPS}))
                    }
                    Bandwidth::Empirical(s) => {
                        ("samples_gbps", serde_json::json!(s.iter().map(|v| v / GBPS).collect::<Vec<f64>>()))
                    }
                };
                o.insert(key.into(), value);
                serde_json::Value::Object(o)
            })
            .collect();
        let file = serde_json::json!({"datacenters": wa.datacenters, "links": links});
        serde_json::to_string_pretty(&file).expect("plain values serialize")
    }

    /// `default` (the embedded [`DEFAULT_TOPOLOGY`]) or the file at path `spec`.
    pub fn named(spec: &str) -> Result<Topology, TopologyError> {
        if spec == "default" { Topology::from_json(DEFAULT_TOPOLOGY, None) } else { Topology::from_path(spec) }
    }

    /// The topology file at `path`; its `samples_file`s are relative to its directory.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Topology, TopologyError> {
        let path = path.as_ref();
        let text = read_text(path).map_err(|e| TopologyError::Read {
            what: "topology",
            path: path.to_path_buf(),
            message: reason(e),
        })?;
        Topology::from_json(&text, path.parent())
    }

    /// The topology in `text`; relative `samples_file`s are read from `base` (the working
    /// directory if `None`).
    pub fn from_json(text: &str, base: Option<&Path>) -> Result<Topology, TopologyError> {
        let f = serde_json::from_str(text).map_err(|e| match serde_json::from_str(text) {
            Ok(other) => not_an_object(&other).unwrap_or_else(|| TopologyError::Json(e.to_string())),
            Err(_) => TopologyError::Json(e.to_string()),
        })?;
        Topology::from_file(f, base)
    }

    /// [`Topology::from_json`] of a value already parsed, as a file that embeds a topology holds
    /// it; its errors name fields, not positions, which are the embedding file's to tell.
    pub fn from_value(value: serde_json::Value, base: Option<&Path>) -> Result<Topology, TopologyError> {
        if let Some(e) = not_an_object(&value) {
            return Err(e);
        }
        Topology::from_file(serde_json::from_value(value).map_err(|e| TopologyError::Json(e.to_string()))?, base)
    }

    fn from_file(f: TopologyFile, base: Option<&Path>) -> Result<Topology, TopologyError> {
        for (at, name) in f.datacenters.iter().enumerate() {
            if name.is_empty() || name.len() > MAX_DATACENTER_NAME || name.chars().any(char::is_control) {
                return Err(TopologyError::DatacenterName { at, name: quoted(name, QUOTED_NAME) });
            }
            if let Some(first) = f.datacenters[..at].iter().position(|d| d == name) {
                return Err(TopologyError::DuplicateDatacenter { name: name.clone(), first, at });
            }
        }
        let dc = |field: String, name: &str| -> Result<u32, TopologyError> {
            f.datacenters
                .iter()
                .position(|d| d == name)
                .map(|i| i as u32)
                .ok_or_else(|| TopologyError::UnknownDatacenter { field, name: name.to_string() })
        };
        let mut links: Vec<Link> = Vec::new();
        let mut samples_left = MAX_SAMPLES_BYTES;
        let mut samples_files = Vec::new();
        for (i, l) in f.links.iter().enumerate() {
            let set = [
                l.constant_gbps.is_some(),
                l.uniform_gbps.is_some(),
                l.normal_gbps.is_some(),
                l.samples_gbps.is_some(),
                l.samples_file.is_some(),
            ];
            if set.iter().filter(|&&s| s).count() != 1 {
                return Err(TopologyError::Distribution { link: i, from: l.from.clone(), to: l.to.clone() });
            }
            // In the file's unit, Gbit/s, so that an error quotes the file's numbers.
            let (field, gbps) = if let Some(v) = l.constant_gbps {
                ("constant_gbps", Bandwidth::Constant(v))
            } else if let Some(bounds) = &l.uniform_gbps {
                let &[lo, hi] = bounds.as_slice() else {
                    return Err(TopologyError::Bandwidth {
                        field: format!("links[{i}].uniform_gbps"),
                        from: l.from.clone(),
                        to: l.to.clone(),
                        reason: format!("expected two bounds, [low, high], got {}", bounds.len()),
                    });
                };
                ("uniform_gbps", Bandwidth::Uniform(lo, hi))
            } else if let Some(n) = &l.normal_gbps {
                ("normal_gbps", Bandwidth::Normal { mean: n.mean, sd: n.sd, min: n.min })
            } else if let Some(s) = &l.samples_gbps {
                ("samples_gbps", Bandwidth::Empirical(s.clone()))
            } else {
                let rel = l.samples_file.as_ref().expect("checked: one is set");
                let path = base.map_or_else(|| rel.clone(), |b| b.join(rel));
                let read = samples(&path, &mut samples_left, i, l)?;
                samples_files.push(path);
                ("samples_file", Bandwidth::Empirical(read))
            };
            let gbps = gbps.validate_within(MIN_LINK / GBPS, MAX_BANDWIDTH / GBPS).map_err(|reason| {
                TopologyError::Bandwidth {
                    field: format!("links[{i}].{field}"),
                    from: l.from.clone(),
                    to: l.to.clone(),
                    reason,
                }
            })?;
            let bandwidth = gbps.scaled(GBPS);
            let from = dc(format!("links[{i}].from"), &l.from)?;
            let to = dc(format!("links[{i}].to"), &l.to)?;
            if from == to {
                return Err(TopologyError::SelfLink { link: i, name: l.from.clone() });
            }
            if let Some(first) = links.iter().position(|k| (k.from, k.to) == (from, to)) {
                let (from, to) = (l.from.clone(), l.to.clone());
                return Err(TopologyError::DuplicateLink { link: i, first, from, to });
            }
            links.push(Link { from, to, bandwidth });
        }
        if f.datacenters.is_empty() {
            return Err(TopologyError::NoDatacenters);
        }
        if f.machines_per_dc.is_some() && f.placement.is_some() {
            return Err(TopologyError::TwoPlacements);
        }
        let placement = match &f.placement {
            Some(p) => Some(
                p.iter().enumerate().map(|(m, d)| dc(format!("placement[{m}]"), d)).collect::<Result<Vec<u32>, _>>()?,
            ),
            None => None,
        };
        Ok(Topology {
            datacenters: f.datacenters,
            links,
            redraw_ms: f.redraw_ms,
            machines_per_dc: f.machines_per_dc,
            placement,
            per_connection: f.per_connection,
            connection_redraw_ms: f.connection_redraw_ms,
            samples_files,
        })
    }

    /// The topology with `machines` machines placed: by `machines_per_dc` (the override's, then
    /// the file's), else by the file's `placement`, else spread evenly (Siphon §5.3).
    pub fn wan(&self, machines: u32, machines_per_dc: Option<u32>) -> Result<Wan, TopologyError> {
        let dcs = self.datacenters.len() as u32;
        let placement = match (&self.placement, machines_per_dc.or(self.machines_per_dc)) {
            (Some(p), None) => {
                if (p.len() as u32) < machines {
                    return Err(TopologyError::PlacementTooShort { named: p.len(), machines });
                }
                p.clone()
            }
            (_, Some(0)) => return Err(TopologyError::ZeroMachinesPerDc),
            (_, per) => {
                if let Some(n) = per
                    && u64::from(n) * u64::from(dcs) < u64::from(machines)
                {
                    return Err(TopologyError::TooFewPlaces { per_dc: n, dcs, machines });
                }
                Wan::spread(dcs, machines, per)
            }
        };
        Wan::new(self.datacenters.clone(), self.links.clone(), placement).map_err(|e| match e {
            WanError::MissingLink { from, to } => TopologyError::MissingLink {
                from: self.datacenters[from as usize].clone(),
                to: self.datacenters[to as usize].clone(),
            },
            other => other.into(),
        })
    }

    /// The configuration of a run of a workload of `machines` machines on this topology, its
    /// capacity draws seeded by `seed`, with `overrides` applied; multi-path routing is off.
    pub fn config(&self, machines: u32, seed: u64, overrides: &Overrides) -> Result<WanConfig, TopologyError> {
        let wan = self.wan(machines, overrides.machines_per_dc)?;
        let redraw = interval("redraw_ms", overrides.redraw_ms.or(self.redraw_ms).unwrap_or(DEFAULT_REDRAW_MS))?;
        // The command line may turn on what the file leaves off, so these are checked together.
        let per_connection = self.per_connection || overrides.per_connection;
        if !per_connection && (overrides.connection_redraw_ms.is_some() || self.connection_redraw_ms.is_some()) {
            return Err(TopologyError::RedrawWithoutConnections);
        }
        let connection_redraw_ms = overrides.connection_redraw_ms.or(self.connection_redraw_ms).unwrap_or(0);
        let per_connection =
            if per_connection { Some(interval("connection_redraw_ms", connection_redraw_ms)?) } else { None };
        Ok(WanConfig { wan, redraw, seed, multipath: false, per_connection, weather: None })
    }
}

/// The error for JSON that is no object (an array, a number), in words rather than serde's
/// (`expected struct TopologyFile`); `None` for an object.
fn not_an_object(value: &serde_json::Value) -> Option<TopologyError> {
    let kind = match value {
        serde_json::Value::Object(_) => return None,
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Null => "null",
    };
    Some(TopologyError::Json(format!(
        r#"a topology is a JSON object ({{"datacenters": [...], "links": [...]}}), not {kind}"#
    )))
}

/// Why a file could not be read, without its path (the error names it).
fn reason(e: coflow_trace::TraceError) -> String {
    match e {
        coflow_trace::TraceError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// The samples of the `samples_file` at `path` of link `link`, in its unit, Gbit/s: one number
/// per line; blank lines and lines starting with `#` are skipped. The file is a regular one of
/// at most `left` bytes, which it then uses up (a FIFO or a device is refused at once rather
/// than waited on or read).
fn samples(path: &Path, left: &mut u64, link: usize, l: &LinkSpec) -> Result<Vec<f64>, TopologyError> {
    let at = || format!("links[{link}].samples_file ({} -> {})", l.from, l.to);
    let text = read_regular_text(path, *left).map_err(|e| {
        let message = match e {
            coflow_trace::TraceError::Io { source, .. } if source.kind() == std::io::ErrorKind::FileTooLarge => {
                format!("past the {} MiB a topology's samples files may hold together", MAX_SAMPLES_BYTES >> 20)
            }
            other => reason(other),
        };
        TopologyError::SamplesRead { at: at(), path: path.to_path_buf(), message }
    })?;
    *left -= text.len() as u64;
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#')) {
        let v: f64 = line.trim().parse().map_err(|_| TopologyError::Sample {
            at: at(),
            path: path.to_path_buf(),
            line: n + 1,
            text: quoted(line.trim(), QUOTED_LINE),
        })?;
        // Checked here, one by one, so that the error names the line.
        Bandwidth::Empirical(vec![v])
            .validate_within(MIN_LINK / GBPS, MAX_BANDWIDTH / GBPS)
            .map_err(|reason| TopologyError::SampleValue { at: at(), path: path.to_path_buf(), line: n + 1, reason })?;
        samples.push(v);
    }
    if samples.is_empty() {
        return Err(TopologyError::SamplesRead { at: at(), path: path.to_path_buf(), message: "no samples".into() });
    }
    Ok(samples)
}

/// `text` quoted for a message, what is not printable escaped: whole if it has at most `shown`
/// bytes, else its start and an ellipsis.
fn quoted(text: &str, shown: usize) -> String {
    if text.len() <= shown {
        return format!("{text:?}");
    }
    let end = (0..=shown).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{:?}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"{"datacenters": ["a", "b"], "links": [
        {"from": "a", "to": "b", "constant_gbps": 1},
        {"from": "b", "to": "a", "uniform_gbps": [1, 3]}]}"#;

    fn err(text: &str) -> TopologyError {
        Topology::from_json(text, None).unwrap_err()
    }

    /// The datacenters and links written alone read back as they were (to float rounding of the
    /// unit).
    #[test]
    fn the_wide_area_alone_reads_back() {
        let t = Topology::named("default").unwrap();
        let back = Topology::from_json(&Topology::wide_area_json(&t.wide_area()), None).unwrap();
        assert_eq!(back.datacenters, t.datacenters);
        assert_eq!(back.links.len(), t.links.len());
        for (a, b) in back.links.iter().zip(&t.links) {
            assert_eq!((a.from, a.to), (b.from, b.to));
            assert!((a.bandwidth.mean() / b.bandwidth.mean() - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn the_default_topology_reads_and_spreads_machines_evenly() {
        let t = Topology::named("default").unwrap();
        assert_eq!(t.datacenters, ["victoria", "toronto", "montreal"]);
        assert_eq!(t.links.len(), 6);
        assert_eq!(t.redraw_ms, Some(5_000));
        let cfg = t.config(150, 3, &Overrides::default()).unwrap();
        let wan = cfg.wan;
        assert_eq!((wan.dc_of(0), wan.dc_of(49), wan.dc_of(50), wan.dc_of(149)), (0, 0, 1, 2));
        assert_eq!(cfg.redraw, Nanos::from_millis(5_000));
        assert_eq!((cfg.seed, cfg.multipath, cfg.per_connection), (3, false, None));
        // victoria -> toronto: normal, mean 16 Gbit/s.
        assert_eq!(wan.links()[0].bandwidth.mean(), 16.0 * GBPS);
    }

    #[test]
    fn bandwidths_are_read_in_gbps() {
        let t = Topology::from_json(TWO, None).unwrap();
        assert_eq!(t.links[0], Link { from: 0, to: 1, bandwidth: Bandwidth::Constant(GBPS) });
        assert_eq!(t.links[1], Link { from: 1, to: 0, bandwidth: Bandwidth::Uniform(GBPS, 3.0 * GBPS) });
    }

    #[test]
    fn overrides_win_over_the_file() {
        let t = Topology::from_json(
            r#"{"datacenters": ["a", "b"], "redraw_ms": 100, "machines_per_dc": 2, "links": [
            {"from": "a", "to": "b", "constant_gbps": 1}, {"from": "b", "to": "a", "constant_gbps": 1}]}"#,
            None,
        )
        .unwrap();
        let file = t.config(4, 1, &Overrides::default()).unwrap();
        assert_eq!(file.redraw, Nanos::from_millis(100));
        assert_eq!(file.wan.dc_of(2), 1);
        let o = Overrides {
            machines_per_dc: Some(4),
            redraw_ms: Some(0),
            per_connection: true,
            connection_redraw_ms: Some(20),
        };
        let cli = t.config(4, 1, &o).unwrap();
        assert_eq!(cli.redraw, Nanos::MAX, "0 never redraws");
        assert_eq!(cli.wan.dc_of(3), 0);
        assert_eq!(cli.per_connection, Some(Nanos::from_millis(20)));
        let held = t.config(4, 1, &Overrides { per_connection: true, ..Overrides::default() }).unwrap();
        assert_eq!(held.per_connection, Some(Nanos::MAX), "held for the flow's life");
        assert_eq!(
            t.config(4, 1, &Overrides { connection_redraw_ms: Some(5), ..Overrides::default() }),
            Err(TopologyError::RedrawWithoutConnections)
        );
    }

    /// A redraw interval past the simulated clock's end, from the file or the caller, is refused
    /// by its field, not wrapped around to a short one.
    #[test]
    fn a_redraw_interval_past_the_clock_is_refused() {
        let past = MAX_INTERVAL_MS + 1;
        let t = Topology::from_json(&TWO.replacen('{', &format!(r#"{{"redraw_ms": {past}, "#), 1), None).unwrap();
        let e = t.config(2, 1, &Overrides::default()).unwrap_err();
        assert_eq!(e, TopologyError::Interval { field: "redraw_ms", ms: past });
        assert_eq!(
            e.to_string(),
            "redraw_ms: 18446744073710 ms is past the end of the simulated clock (at most 18446744073709 ms; 0 never \
             redraws)"
        );
        let longest = Overrides { redraw_ms: Some(MAX_INTERVAL_MS), ..Overrides::default() };
        assert_eq!(t.config(2, 1, &longest).unwrap().redraw, Nanos::from_millis(MAX_INTERVAL_MS));
        let t = Topology::from_json(TWO, None).unwrap();
        let o = Overrides { per_connection: true, connection_redraw_ms: Some(u64::MAX), ..Overrides::default() };
        assert_eq!(
            t.config(2, 1, &o).unwrap_err(),
            TopologyError::Interval { field: "connection_redraw_ms", ms: u64::MAX }
        );
    }

    /// A live coordinator reads the datacenters and links alone: the other fields a file sets
    /// are named, so that the coordinator can say it ignores them.
    #[test]
    fn the_fields_only_a_simulation_reads_are_named() {
        assert!(Topology::from_json(TWO, None).unwrap().simulation_only().is_empty());
        let all = r#"{"placement": ["a", "b"], "redraw_ms": 100, "per_connection": true,
            "connection_redraw_ms": 9, "#;
        let t = Topology::from_json(&TWO.replacen('{', all, 1), None).unwrap();
        let names = ["placement", "redraw_ms", "per_connection", "connection_redraw_ms"];
        assert_eq!(t.simulation_only(), names);
        let t = Topology::from_json(&TWO.replacen('{', r#"{"machines_per_dc": 2, "#, 1), None);
        assert_eq!(t.unwrap().simulation_only(), ["machines_per_dc"]);
        let t = Topology::from_json(&TWO.replacen('{', r#"{"per_connection": false, "redraw_ms": 0, "#, 1), None);
        assert_eq!(t.unwrap().simulation_only(), ["redraw_ms"], "per_connection off is the default");
        assert_eq!(Topology::named("default").unwrap().simulation_only(), ["redraw_ms"]);
    }

    #[test]
    fn placement_names_every_machines_datacenter() {
        let text = TWO.replacen('{', r#"{"placement": ["b", "a", "b"], "#, 1);
        let t = Topology::from_json(&text, None).unwrap();
        assert_eq!(t.placement, Some(vec![1, 0, 1]));
        let wan = t.wan(3, None).unwrap();
        assert_eq!((wan.dc_of(0), wan.dc_of(1), wan.dc_of(2)), (1, 0, 1));
        assert_eq!(t.wan(4, None).unwrap_err(), TopologyError::PlacementTooShort { named: 3, machines: 4 });
        // --machines-per-dc wins over the placement.
        assert_eq!(t.wan(4, Some(2)).unwrap().dc_of(3), 1);
    }

    /// A topology that places machines both ways is refused, naming both fields, rather than
    /// one dropped unchecked; JSON that is no object is told what a topology is.
    #[test]
    fn a_topology_is_one_object_that_places_machines_one_way() {
        let two = r#"{"datacenters": ["a", "b"], "links": [], "machines_per_dc": 6, "placement": ["a"]}"#;
        let e = err(two);
        assert_eq!(e, TopologyError::TwoPlacements);
        assert!(e.to_string().contains("machines_per_dc and placement"), "{e}");
        let value: serde_json::Value = serde_json::from_str(two).unwrap();
        assert_eq!(Topology::from_value(value, None).unwrap_err(), TopologyError::TwoPlacements);
        for (text, kind) in [("[]", "an array"), ("7", "a number"), (r#""a""#, "a string"), ("null", "null")] {
            let want = format!(
                r#"parsing JSON: a topology is a JSON object ({{"datacenters": [...], "links": [...]}}), not {kind}"#
            );
            assert_eq!(err(text).to_string(), want, "{text}");
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(Topology::from_value(value, None).unwrap_err().to_string(), want, "{text}");
        }
        // JSON that is not JSON keeps serde's position.
        let e = err(r#"{"datacenters": ["#);
        assert!(e.to_string().contains("EOF while parsing a list at line 1 column 17"), "{e}");
        // A link or a distribution is an object with named fields, not its fields in order.
        for inner in [r#"["a", "b", 1]"#, r#"{"from": "a", "to": "b", "normal_gbps": [1, 0.1, 0.5]}"#] {
            let text = format!(r#"{{"datacenters": ["a", "b"], "links": [{inner}]}}"#);
            let e = err(&text);
            assert!(e.to_string().contains("invalid type: sequence, expected a JSON object"), "{text}: {e}");
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(Topology::from_value(value, None).is_err(), "{text}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let e = err(r#"{"datacenters": ["a"], "links": [], "wires": 1}"#);
        assert!(matches!(&e, TopologyError::Json(m) if m.contains("wires")), "{e}");
        let e = err(r#"{"datacenters": ["a"]}"#);
        assert!(e.to_string().contains("missing field `links`"), "{e}");
        assert_eq!(err(r#"{"datacenters": [], "links": []}"#), TopologyError::NoDatacenters);
        assert_eq!(
            err(r#"{"datacenters": ["a", "b", "a"], "links": []}"#).to_string(),
            r#"datacenters[2]: "a" names datacenters[0] already"#
        );
        let e = err(r#"{"datacenters": ["a", "b"], "links": [{"from": "a", "to": "c", "constant_gbps": 1}]}"#);
        assert_eq!(e.to_string(), r#"links[0].to: no datacenter "c""#);
        let e = err(r#"{"datacenters": ["a", "b"], "links": [{"from": "a", "to": "b"}]}"#);
        assert_eq!(e, TopologyError::Distribution { link: 0, from: "a".into(), to: "b".into() });
        let e = err(r#"{"datacenters": ["a", "b"], "links": [
            {"from": "a", "to": "b", "constant_gbps": 1, "samples_gbps": [1]}]}"#);
        assert!(e.to_string().starts_with("links[0] (a -> b): give exactly one bandwidth distribution"), "{e}");
        // Bandwidths are checked in the file's unit, so the error quotes the file's numbers.
        let e = err(&TWO.replace("[1, 3]", "[3, 1]"));
        assert_eq!(
            e.to_string(),
            "links[1].uniform_gbps (b -> a): uniform bounds 3..1 are not positive and ordered (Gbit/s)"
        );
        let e = err(&TWO.replace("[1, 3]", "[1, 2, 3]"));
        assert_eq!(e.to_string(), "links[1].uniform_gbps (b -> a): expected two bounds, [low, high], got 3 (Gbit/s)");
        let low_mean = r#""normal_gbps": {"mean": 1, "sd": 0.1, "min": 2}"#;
        let e = err(&TWO.replace(r#""constant_gbps": 1"#, low_mean));
        assert!(e.to_string().contains("min 2 above the mean 1"), "{e}");
        let e = err(&TWO.replace(r#""constant_gbps": 1"#, r#""samples_gbps": [2, -0.5]"#));
        assert_eq!(e.to_string(), "links[0].samples_gbps (a -> b): sample -0.5 is not positive (Gbit/s)");
        // Past 8 Pbit/s, where bytes per second would leave the finite numbers.
        let e = err(&TWO.replace(r#""constant_gbps": 1"#, r#""constant_gbps": 1e301"#));
        assert_eq!(e.to_string(), "links[0].constant_gbps (a -> b): 1e301 is above 8000000 (Gbit/s)");
        // Below 1 kbit/s a replay would be redraws on a link that moves next to nothing; the
        // least value a draw can take is checked, whatever the distribution.
        let e = err(&TWO.replace(r#""constant_gbps": 1"#, r#""constant_gbps": 1e-9"#));
        assert_eq!(
            e.to_string(),
            "links[0].constant_gbps (a -> b): 1e-9 is below 1e-6, the least a link may carry (Gbit/s)"
        );
        let e = err(&TWO.replace(r#""constant_gbps": 1"#, r#""samples_gbps": [2, 1e-300]"#));
        assert!(e.to_string().starts_with("links[0].samples_gbps (a -> b): 1e-300 is below 1e-6"), "{e}");
        let e = err(&TWO.replace("[1, 3]", "[1e-7, 3]"));
        assert!(e.to_string().starts_with("links[1].uniform_gbps (b -> a): 1e-7 is below"), "{e}");
        assert!(Topology::from_json(&TWO.replace(r#""constant_gbps": 1"#, r#""constant_gbps": 1e-6"#), None).is_ok());
        // A normal's error names the parameter at fault.
        let e = err(&TWO.replace(r#""constant_gbps": 1"#, r#""normal_gbps": {"mean": 1, "sd": 100, "min": 0}"#));
        assert_eq!(e.to_string(), "links[0].normal_gbps (a -> b): normal min 0 is not positive (Gbit/s)");
        let e = err(&TWO.replace(r#""constant_gbps": 1"#, r#""normal_gbps": {"mean": 1, "sd": -1, "min": 0.5}"#));
        assert_eq!(
            e.to_string(),
            "links[0].normal_gbps (a -> b): normal sd -1 is not a finite number at least 0 (Gbit/s)"
        );
        let huge_sd = r#""normal_gbps": {"mean": 0.03, "sd": 1e300, "min": 0.004}"#;
        let e = err(&TWO.replace(r#""constant_gbps": 1"#, huge_sd));
        assert_eq!(e.to_string(), "links[0].normal_gbps (a -> b): 1e300 is above 8000000 (Gbit/s)");
        assert!(Topology::from_json(&TWO.replace(r#""constant_gbps": 1"#, r#""constant_gbps": 8e6"#), None).is_ok());
        let e = err(&TWO.replacen('{', r#"{"placement": ["a", "z"], "#, 1));
        assert_eq!(e.to_string(), r#"placement[1]: no datacenter "z""#);
        // Both depend on what the caller overrides, so they are checked when the run is configured.
        let zero = Topology::from_json(&TWO.replacen('{', r#"{"machines_per_dc": 0, "#, 1), None).unwrap();
        assert_eq!(zero.config(2, 1, &Overrides::default()).unwrap_err(), TopologyError::ZeroMachinesPerDc);
        assert!(zero.config(2, 1, &Overrides { machines_per_dc: Some(1), ..Overrides::default() }).is_ok());
        let redraw = Topology::from_json(&TWO.replacen('{', r#"{"connection_redraw_ms": 9, "#, 1), None).unwrap();
        let e = redraw.config(2, 1, &Overrides::default()).unwrap_err();
        assert_eq!(e, TopologyError::RedrawWithoutConnections);
        let on = redraw.config(2, 1, &Overrides { per_connection: true, ..Overrides::default() }).unwrap();
        assert_eq!(on.per_connection, Some(Nanos::from_millis(9)), "--per-connection turns the file's setting on");
        let t = Topology::from_json(TWO, None).unwrap();
        assert_eq!(t.wan(5, Some(2)).unwrap_err(), TopologyError::TooFewPlaces { per_dc: 2, dcs: 2, machines: 5 });
        assert_eq!(t.wan(5, Some(0)).unwrap_err(), TopologyError::ZeroMachinesPerDc);
        // A missing link is the topology's own check.
        let one_way = r#"{"datacenters": ["a", "b"], "links": [{"from": "a", "to": "b", "constant_gbps": 1}]}"#;
        let e = Topology::from_json(one_way, None).unwrap().wan(4, None).unwrap_err();
        assert_eq!(e.to_string(), r#"links: no link from "b" to "a", though both hold machines"#);
        let e = Topology::from_path("/nonexistent/topology.json").unwrap_err();
        assert!(e.to_string().starts_with("reading topology /nonexistent/topology.json: "), "{e}");
    }

    #[test]
    fn samples_files_are_relative_to_the_topology_and_checked_line_by_line() {
        let (_guard, dir) = scratch("samples");
        std::fs::write(dir.join("ab.txt"), "# a comment\n2\n\n4\n").unwrap();
        let text = r#"{"datacenters": ["a", "b"], "links": [
            {"from": "a", "to": "b", "samples_file": "ab.txt"}, {"from": "b", "to": "a", "constant_gbps": 1}]}"#;
        std::fs::write(dir.join("t.json"), text).unwrap();
        let t = Topology::from_path(dir.join("t.json")).unwrap();
        assert_eq!(t.links[0].bandwidth, Bandwidth::Empirical(vec![2.0 * GBPS, 4.0 * GBPS]));
        std::fs::write(dir.join("ab.txt"), "2\nfast\n").unwrap();
        let e = Topology::from_path(dir.join("t.json")).unwrap_err();
        let ab = dir.join("ab.txt");
        assert_eq!(
            e.to_string(),
            format!(r#"links[0].samples_file (a -> b): {} line 2: not a number: "fast""#, ab.display())
        );
        // A number no link may carry names its line too, wherever it is.
        let many: String = (1..=500).map(|v| format!("{v}\n")).collect();
        for (bad, reason) in [
            ("1e-7", "1e-7 is below 1e-6, the least a link may carry"),
            ("0", "sample 0 is not positive"),
            ("-1", "sample -1 is not positive"),
            ("nan", "sample NaN is not positive"),
            ("1e999", "sample inf is not positive"),
            ("9000000", "9000000 is above 8000000"),
        ] {
            std::fs::write(&ab, format!("{many}{bad}\n# after\n3\n")).unwrap();
            let e = Topology::from_path(dir.join("t.json")).unwrap_err();
            let want = format!("links[0].samples_file (a -> b): {} line 501: {reason} (Gbit/s)", ab.display());
            assert_eq!(e.to_string(), want, "{bad}");
        }
        std::fs::write(&ab, "# only a comment\n\n").unwrap();
        let e = Topology::from_path(dir.join("t.json")).unwrap_err();
        assert_eq!(e.to_string(), format!("links[0].samples_file (a -> b): reading {}: no samples", ab.display()));
        std::fs::remove_file(dir.join("ab.txt")).unwrap();
        let e = Topology::from_path(dir.join("t.json")).unwrap_err();
        let reading = format!("links[0].samples_file (a -> b): reading {}: ", ab.display());
        assert!(e.to_string().starts_with(&reading), "{e}");
    }

    /// A fresh directory for one test's files, and the guard that removes it when dropped.
    fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
        let guard = tempfile::Builder::new().prefix(&format!("coflow-topology-{name}-")).tempdir().unwrap();
        let dir = guard.path().to_path_buf();
        (guard, dir)
    }

    /// A topology of two datacenters in `dir` whose links read their samples from `ab` and `ba`.
    fn with_samples(dir: &Path, ab: &str, ba: &str) -> Result<Topology, TopologyError> {
        let text = format!(
            r#"{{"datacenters": ["a", "b"], "links": [
            {{"from": "a", "to": "b", "samples_file": {ab:?}}}, {{"from": "b", "to": "a", "samples_file": {ba:?}}}]}}"#
        );
        Topology::from_json(&text, Some(dir))
    }

    /// The message of a samples file of link 0 that cannot be read.
    fn read_failure(e: TopologyError) -> String {
        match e {
            TopologyError::SamplesRead { at, message, .. } if at.starts_with("links[0].") => message,
            other => panic!("{other}"),
        }
    }

    /// A samples file that is a FIFO is refused at once, not waited on for a writer: a
    /// coordinator would otherwise hang at start without a word.
    #[test]
    fn a_samples_fifo_is_refused_at_once() {
        let (_guard, dir) = scratch("fifo");
        let fifo = dir.join("samples.fifo");
        if !std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfifo is not available");
            return;
        }
        std::fs::write(dir.join("ok.txt"), "1\n").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reading = dir.clone();
        std::thread::spawn(move || tx.send(with_samples(&reading, "samples.fifo", "ok.txt")).unwrap());
        let Ok(got) = rx.recv_timeout(std::time::Duration::from_secs(10)) else {
            // Lets the reader waiting on the FIFO go before failing.
            let _writer = std::fs::OpenOptions::new().write(true).open(&fifo);
            panic!("still waiting on the FIFO after 10 s");
        };
        assert_eq!(read_failure(got.unwrap_err()), "a FIFO, not a regular file");
    }

    /// A device or a directory as a samples file is refused before anything is read from it:
    /// `/dev/zero` would otherwise be read up to a GiB.
    #[test]
    fn a_samples_device_or_directory_is_refused_unread() {
        let (_guard, dir) = scratch("device");
        std::fs::write(dir.join("ok.txt"), "1\n").unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        assert_eq!(read_failure(with_samples(&dir, "sub", "ok.txt").unwrap_err()), "a directory, not a regular file");
        if Path::new("/dev/zero").exists() {
            let e = with_samples(&dir, "/dev/zero", "ok.txt").unwrap_err();
            assert_eq!(
                e.to_string(),
                "links[0].samples_file (a -> b): reading /dev/zero: a device, not a regular file"
            );
        }
    }

    /// The samples files of a topology hold at most [`MAX_SAMPLES_BYTES`] together: one file
    /// past it is refused by its size, unread, and a file named by two links counts twice.
    #[test]
    fn samples_files_are_bounded_together() {
        let (_guard, dir) = scratch("bound");
        let past = std::fs::File::create(dir.join("past.txt")).unwrap();
        past.set_len(MAX_SAMPLES_BYTES + 1).unwrap();
        let e = with_samples(&dir, "past.txt", "past.txt").unwrap_err();
        assert_eq!(read_failure(e), "past the 64 MiB a topology's samples files may hold together");
        // Over half the bound, mostly a comment: one link may read it, not two.
        let half = MAX_SAMPLES_BYTES / 2 + 1;
        let mut text = String::from("1\n#");
        text.push_str(&"x".repeat(half as usize - text.len() - 1));
        text.push('\n');
        std::fs::write(dir.join("half.txt"), &text).unwrap();
        std::fs::write(dir.join("ok.txt"), "1\n").unwrap();
        assert_eq!(
            with_samples(&dir, "half.txt", "ok.txt").unwrap().links[0].bandwidth,
            Bandwidth::Empirical(vec![GBPS])
        );
        let e = with_samples(&dir, "half.txt", "half.txt").unwrap_err();
        assert!(
            matches!(&e, TopologyError::SamplesRead { at, message, .. }
                if at == "links[1].samples_file (b -> a)" && message.starts_with("past the 64 MiB")),
            "{e}"
        );
    }

    /// A line that is not a number is quoted by its start only, what is not printable escaped:
    /// the file may be one the coordinator can read and the topology's author cannot.
    #[test]
    fn a_bad_sample_line_is_quoted_short() {
        let (_guard, dir) = scratch("quote");
        std::fs::write(dir.join("ok.txt"), "1\n").unwrap();
        std::fs::write(dir.join("shadow"), "root:*:20228:0:99999:7:::\n").unwrap();
        let e = with_samples(&dir, "shadow", "ok.txt").unwrap_err();
        let shadow = dir.join("shadow");
        let quoted = r#"not a number: "root:*:20228:0:9"…"#;
        assert_eq!(e.to_string(), format!("links[0].samples_file (a -> b): {} line 1: {quoted}", shadow.display()));
        assert!(!format!("{e:?}").contains("99999"), "the error keeps only the start: {e:?}");
        std::fs::write(dir.join("shadow"), "\n# c\n2\n\u{1b}[2J\u{7}\n").unwrap();
        let e = with_samples(&dir, "shadow", "ok.txt").unwrap_err();
        assert!(e.to_string().ends_with(r#"line 4: not a number: "\u{1b}[2J\u{7}""#), "{e}");
    }

    /// A datacenter name is one an agent can give: 1 to 256 bytes without control characters.
    #[test]
    fn datacenter_names_are_ones_agents_can_give() {
        let named = |name: &str| {
            let text = format!(r#"{{"datacenters": ["a", {name:?}], "links": []}}"#);
            Topology::from_json(&text, None).map(|t| t.datacenters)
        };
        let longest = "x".repeat(MAX_DATACENTER_NAME);
        assert_eq!(named(&longest).unwrap()[1], longest);
        assert_eq!(named("montréal").unwrap()[1], "montréal");
        let rule = "is not a name of 1 to 256 bytes without control characters";
        assert_eq!(named("").unwrap_err().to_string(), format!(r#"datacenters[1]: "" {rule}"#));
        assert_eq!(named("a\tb").unwrap_err().to_string(), format!(r#"datacenters[1]: "a\tb" {rule}"#));
        let e = named(&"y".repeat(MAX_DATACENTER_NAME + 1)).unwrap_err();
        assert_eq!(e, TopologyError::DatacenterName { at: 1, name: format!("{:?}…", "y".repeat(32)) });
    }

    /// Links are checked where they are read, and errors name datacenters as the file does.
    #[test]
    fn link_errors_name_datacenters() {
        let e = err(r#"{"datacenters": ["a", "b"], "links": [{"from": "b", "to": "b", "constant_gbps": 1}]}"#);
        assert_eq!(e.to_string(), "links[0] (b -> b): a link joins two datacenters");
        let e = err(&TWO.replace(r#""from": "b", "to": "a""#, r#""from": "a", "to": "b""#));
        assert_eq!(e.to_string(), "links[1] (a -> b): links[0] joins them already");
        let three = r#"{"datacenters": ["x", "y", "z"], "links": [
            {"from": "x", "to": "y", "constant_gbps": 1}, {"from": "y", "to": "x", "constant_gbps": 1},
            {"from": "x", "to": "z", "constant_gbps": 1}, {"from": "z", "to": "x", "constant_gbps": 1}]}"#;
        let t = Topology::from_json(three, None).unwrap();
        assert_eq!(t.wan(2, Some(1)).unwrap().dcs(), 3, "z holds no machine: y -> z is not needed");
        let e = t.wan(3, Some(1)).unwrap_err();
        assert_eq!(e, TopologyError::MissingLink { from: "y".into(), to: "z".into() });
        assert_eq!(e.to_string(), r#"links: no link from "y" to "z", though both hold machines"#);
    }
}
