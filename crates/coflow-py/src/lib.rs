//! `coflow._coflow`: the Rust side of the `coflow` Python package (python/).
//!
//! It exposes the simulator through [`coflow_sim::experiment`] (the same plan, parallel runs and
//! JSON report as `coflow sim`) and the SDK through [`coflow_client`] on a tokio runtime owned
//! by the extension.
//! Every call that waits (a simulation, a remote call) releases the GIL.
//! The typed Python layer (`python/coflow/`) wraps this module: it maps [`ServiceError`]'s kind to
//! the exception classes, builds workloads from Python data, and turns reports into DataFrames.

use std::future::Future;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coflow_client::{ClientConfig, ClientError, ClusterToken, CoflowId, CoflowOptions, Nanos, Readiness, TlsFiles};
use coflow_core::Workload;
use coflow_sched::Select;
use coflow_sched::policy::MonteCarlo;
use coflow_sim::coflowsim::Rules;
use coflow_sim::experiment::{Config, ExperimentError, Model, Spelling, SweepSpec, WideAreaSpec, WorkloadSource};
use coflow_sim::topology::Overrides;
use coflow_trace::TraceFormat;
use pyo3::exceptions::{
    PyFileNotFoundError, PyIsADirectoryError, PyOSError, PyPermissionError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use tokio::runtime::Runtime;

pyo3::create_exception!(
    _coflow,
    ServiceError,
    pyo3::exceptions::PyException,
    "What a coflow service (or the connection to it) reported: args are (kind, message)."
);

/// A workload and the line naming it in reports.
#[pyclass(name = "Workload", module = "coflow._coflow", frozen)]
#[derive(Debug)]
struct PyWorkload {
    workload: Workload,
    source: String,
}

#[pymethods]
impl PyWorkload {
    /// The number of machines.
    #[getter]
    fn machines(&self) -> u32 {
        self.workload.machines
    }

    /// The number of coflows.
    #[getter]
    fn coflows(&self) -> usize {
        self.workload.coflows.len()
    }

    /// The number of flows.
    #[getter]
    fn flows(&self) -> usize {
        self.workload.flow_count()
    }

    /// The bytes of all flows.
    #[getter]
    fn bytes(&self) -> u64 {
        self.workload.total_bytes().get()
    }

    /// What the workload is (a trace's path, the generator's parameters, or the caller's name).
    #[getter]
    fn source(&self) -> &str {
        &self.source
    }

    /// The workload in the `coflow-jsonl` format.
    fn to_jsonl(&self) -> PyResult<String> {
        let mut out = Vec::new();
        TraceFormat::Jsonl.write(&self.workload, &mut out).map_err(|e| PyValueError::new_err(e.to_string()))?;
        String::from_utf8(out).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Whether `other` holds the same machines and coflows under the same source (what the
    /// Python layer's `==` compares).
    fn same_as(&self, other: &PyWorkload) -> bool {
        self.source == other.source && self.workload == other.workload
    }
}

/// Reads a trace (coflow-benchmark or JSON Lines); `source` in reports is `path` as given.
#[pyfunction]
fn read_trace(py: Python<'_>, path: PathBuf) -> PyResult<PyWorkload> {
    let file = path.clone();
    let read = off_thread(py, move || coflow_trace::read_trace(&file))?;
    let source = path.to_string_lossy().into_owned();
    let workload = read.map_err(|source| experiment_error(&ExperimentError::Trace { path, source }))?;
    Ok(PyWorkload { workload, source })
}

/// Runs `f` on a thread of its own while this one waits for it ([`wait_answer`]): Ctrl-C returns
/// at once, leaving `f` to end on its own (a read of a FIFO that no one writes blocks until the
/// process exits).
fn off_thread<T: Send + 'static>(py: Python<'_>, f: impl FnOnce() -> T + Send + 'static) -> PyResult<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("coflow-read".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
    wait_answer(py, rx, || Ok(()))?.ok_or_else(|| PyRuntimeError::new_err("the read failed without an answer"))
}

/// The synthetic workload shaped like the Facebook trace, as `coflow sim` generates it.
#[pyfunction]
#[pyo3(signature = (seed = 1, coflows = None, machines = None))]
fn synthetic(seed: u64, coflows: Option<usize>, machines: Option<u32>) -> PyResult<PyWorkload> {
    let mut cfg = coflow_trace::synth::SynthConfig { seed, ..Default::default() };
    if let Some(n) = coflows {
        cfg.coflows = n;
    }
    if let Some(m) = machines {
        cfg.machines = m;
    }
    cfg.validate().map_err(|e| {
        use coflow_trace::synth::SynthError;
        // Each error names the keyword to change; too many flows is the product of both.
        let keyword = match e {
            SynthError::NoMachines | SynthError::TooManyMachines(_) => "machines",
            SynthError::TooManyCoflows(_) => "coflows",
            _ => "coflows, machines",
        };
        PyValueError::new_err(format!("{keyword}: {e}"))
    })?;
    Ok(PyWorkload { workload: coflow_trace::synth::generate(&cfg), source: cfg.describe() })
}

/// A workload from `coflow-jsonl` text (which the Python layer writes from lists and DataFrames).
#[pyfunction]
fn parse_workload(text: &str, source: String) -> PyResult<PyWorkload> {
    let workload = coflow_trace::parse_jsonl(text).map_err(|e| PyValueError::new_err(format!("workload: {e}")))?;
    Ok(PyWorkload { workload, source })
}

/// What one `simulate` call returns to the Python layer.
#[pyclass(name = "Results", module = "coflow._coflow", frozen, get_all)]
#[derive(Debug)]
struct PyResults {
    /// The JSON report, byte for byte as `coflow sim --json` (or `coflow sim sweep --json`)
    /// writes it.
    json: String,
    /// One row per coflow and policy asked for, as `coflow sim --csv` writes it (a sweep's is
    /// empty).
    csv: String,
    /// The baseline's rows when it ran without being asked for (the plot's reference curve).
    baseline_csv: Option<String>,
    /// The lines at the top of the report (the workload's, and the wide area's if any).
    describe: String,
    /// Each run's wall time in seconds, by policy, in run order (a sweep's is empty).
    wall_s: Vec<(String, f64)>,
    /// What validation left out and why (policies that cannot serve a wide area).
    notes: Vec<String>,
    /// `replay`, `wide_area` or `sweep`: the report's layout.
    kind: &'static str,
    /// The sweep's text tables (empty for a replay).
    tables: String,
}

/// The wide-area options of `simulate`, as the Python layer passes them (`None`: the topology's
/// or the search's default).
#[derive(Debug, FromPyObject)]
#[pyo3(from_item_all)]
struct WanOptions {
    topology: String,
    machines_per_dc: Option<u32>,
    multipath: bool,
    redraw_ms: Option<u64>,
    per_connection: bool,
    connection_redraw_ms: Option<u64>,
    mc_rounds: Option<u32>,
    mc_depth: Option<usize>,
    mc_breadth: Option<usize>,
    mc_mean_cost: bool,
    mc_one_draw: bool,
}

impl WanOptions {
    fn spec(self) -> WideAreaSpec {
        let d = MonteCarlo::default();
        WideAreaSpec {
            topology: self.topology,
            overrides: Overrides {
                machines_per_dc: self.machines_per_dc,
                redraw_ms: self.redraw_ms,
                per_connection: self.per_connection,
                connection_redraw_ms: self.connection_redraw_ms,
            },
            multipath: self.multipath,
            mc: MonteCarlo {
                rounds: self.mc_rounds.unwrap_or(d.rounds),
                depth: self.mc_depth.unwrap_or(d.depth),
                breadth: self.mc_breadth.unwrap_or(d.breadth),
                select: if self.mc_mean_cost { Select::MeanCost } else { Select::Wins },
                one_draw: self.mc_one_draw,
            },
        }
    }
}

/// The model `model` (`exact` or `coflowsim`) and `coflowsim_rules` (comma-separated, implies
/// `coflowsim`) name.
fn model(model: Option<&str>, rules: Option<&str>) -> PyResult<Model> {
    let rules = match (rules, model) {
        (Some(_), Some("exact")) => {
            return Err(PyValueError::new_err(
                "coflowsim_rules are the reference simulator's: they go with model=\"coflowsim\", not \"exact\"",
            ));
        }
        (Some(list), None | Some("coflowsim")) => {
            let rules = Rules::parse(list).map_err(|e| PyValueError::new_err(format!("coflowsim_rules: {e}")))?;
            if rules.names().is_empty() {
                let known = Rules::NAMES.join(", ");
                return Err(PyValueError::new_err(format!("coflowsim_rules names no rule; known rules: all, {known}")));
            }
            Some(rules)
        }
        (None, Some("coflowsim")) => Some(Rules::all()),
        (None, None | Some("exact")) => None,
        (_, Some(other)) => {
            return Err(PyValueError::new_err(format!("model: expected \"exact\" or \"coflowsim\", got {other:?}")));
        }
    };
    Ok(Model(rules))
}

/// A workload error as Python raises it: a trace that cannot be opened or read as the `OSError`
/// of its kind (`FileNotFoundError`, `IsADirectoryError`, `PermissionError`, else `OSError`),
/// `ValueError` for the rest; the message names the option or the file.
fn experiment_error(e: &ExperimentError) -> PyErr {
    match e.io_kind() {
        None => PyValueError::new_err(e.chain()),
        Some(kind) => os_error(kind, e.chain()),
    }
}

/// The `OSError` of `kind` (`FileNotFoundError`, `IsADirectoryError`, `PermissionError`, else
/// `OSError` itself) saying `message`.
fn os_error(kind: std::io::ErrorKind, message: String) -> PyErr {
    use std::io::ErrorKind;
    match kind {
        ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
        ErrorKind::IsADirectory => PyIsADirectoryError::new_err(message),
        ErrorKind::PermissionDenied => PyPermissionError::new_err(message),
        _ => PyOSError::new_err(message),
    }
}

/// Replays `workload` under `policies` (comma-separated, or `all`) on up to `threads` threads
/// with the GIL released, on the big switch or the wide area `wan`, or sweeps it over windows of
/// `sweep = (concurrent, windows)`; options are validated as `coflow sim` validates its flags and
/// errors name them by their keyword. `progress(done, total)` is called about every 100 ms
/// while it runs; Ctrl-C (any pending signal), like an error raised by `progress`, raises at once
/// and stops the runs within milliseconds.
#[pyfunction]
#[pyo3(signature = (
    workload, policies, port_rate, baseline, deadline_x, deadline_fraction, offline, seed, threads,
    stages = 1, model_name = None, coflowsim_rules = None, wan = None, sweep = None, progress = None
))]
#[allow(clippy::too_many_arguments)]
fn simulate(
    py: Python<'_>,
    workload: &PyWorkload,
    policies: &str,
    port_rate: &str,
    baseline: &str,
    deadline_x: Option<f64>,
    deadline_fraction: Option<f64>,
    offline: bool,
    seed: u64,
    threads: Option<usize>,
    stages: usize,
    model_name: Option<&str>,
    coflowsim_rules: Option<&str>,
    wan: Option<WanOptions>,
    sweep: Option<(Vec<usize>, usize)>,
    progress: Option<Py<PyAny>>,
) -> PyResult<PyResults> {
    let config = Config {
        workload: WorkloadSource::Given { workload: workload.workload.clone(), source: workload.source.clone() },
        stages,
        policies: policies.to_string(),
        baseline: baseline.to_string(),
        port_rate: port_rate.to_string(),
        seed,
        threads,
        deadline_x,
        deadline_fraction,
        offline,
        model: model(model_name, coflowsim_rules)?,
        wide_area: wan.map(WanOptions::spec),
        sweep: sweep.map(|(concurrent, windows)| SweepSpec { concurrent, windows }),
    };
    let plan = py.detach(|| config.plan(Spelling::Keyword)).map_err(|e| experiment_error(&e))?;
    let done = Arc::new(AtomicUsize::new(0));
    // However this call returns, the runs it started stop.
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let (tx, rx) = std::sync::mpsc::channel();
    let total;
    // The runs go on a thread of their own, so that this one can report progress and hear Ctrl-C.
    if let Some(spec) = config.sweep {
        let mut ns = spec.concurrent.clone();
        ns.sort_unstable();
        ns.dedup();
        total = ns.len() * spec.windows * plan.to_run().len();
        let count = done.clone();
        let stop = stop.0.clone();
        std::thread::spawn(move || {
            send_unless_panic(&tx, || {
                let go_on = || go_on(&stop);
                let tick = || {
                    count.fetch_add(1, Ordering::Relaxed);
                };
                let Ok(sweep) = plan.sweep(&spec, &tick, &go_on) else { return None };
                Some(PyResults {
                    json: sweep.report_json(&plan),
                    csv: String::new(),
                    baseline_csv: None,
                    describe: format!("{}\n{}", plan.describe(), coflow_sim::experiment::sweep::describe(spec.windows)),
                    wall_s: Vec::new(),
                    notes: plan.notes.clone(),
                    kind: "sweep",
                    tables: sweep.tables(&plan, Spelling::Keyword),
                })
            });
        });
    } else {
        total = plan.workload.coflows.len() * plan.to_run().len();
        let count = done.clone();
        let stop = stop.0.clone();
        std::thread::spawn(move || {
            send_unless_panic(&tx, || {
                let Ok(runs) = plan.run(&|_, _| {
                    let (count, stop) = (count.clone(), stop.clone());
                    let mut seen = 0;
                    Box::new(move |n| {
                        count.fetch_add(n.saturating_sub(seen), Ordering::Relaxed);
                        seen = seen.max(n);
                        go_on(&stop)
                    })
                }) else {
                    return None;
                };
                let csv = coflow_sim::experiment::csv(runs.shown().map(|(r, _)| r));
                let baseline_csv = runs
                    .baseline_run()
                    .filter(|b| !plan.policies.contains(&b.policy.as_str()))
                    .map(|b| coflow_sim::experiment::csv([b]));
                Some(PyResults {
                    json: plan.report_json(&runs),
                    csv,
                    baseline_csv,
                    describe: plan.describe(),
                    wall_s: runs.runs.iter().map(|(r, w)| (r.policy.clone(), *w)).collect(),
                    notes: plan.notes.iter().cloned().chain(runs.notes()).collect(),
                    kind: if plan.wide_area.is_some() { "wide_area" } else { "replay" },
                    tables: String::new(),
                })
            });
        });
    }
    let report_progress = || match &progress {
        Some(p) => p.call1(py, (done.load(Ordering::Relaxed).min(total), total)).map(drop),
        None => Ok(()),
    };
    match wait_answer(py, rx, report_progress)? {
        Some(Ok(results)) => Ok(results),
        Some(Err(panic)) => Err(PyRuntimeError::new_err(format!("the simulation failed: {panic}"))),
        None => Err(PyRuntimeError::new_err("the simulation ended without a report")),
    }
}

/// Waits for the one answer `rx` brings, the GIL released, waking every 100 ms and at the answer
/// to run `on_wake` (a progress report), and between answers to let Python handle signals
/// (Ctrl-C returns at once) and to return when the interpreter exits (counted as a call in
/// flight, as the clients' calls are). `None`: the sender went without answering.
fn wait_answer<T: Send>(
    py: Python<'_>,
    rx: std::sync::mpsc::Receiver<T>,
    on_wake: impl Fn() -> PyResult<()>,
) -> PyResult<Option<T>> {
    use std::sync::mpsc::RecvTimeoutError;
    // `detach` wants what it borrows to be `Sync`; only this thread ever receives.
    let rx = Mutex::new(rx);
    let call = InFlight::enter();
    loop {
        let got = py.detach(|| rx.lock().expect("only this thread receives").recv_timeout(Duration::from_millis(100)));
        on_wake()?;
        match got {
            Ok(v) => return Ok(Some(v)),
            Err(RecvTimeoutError::Timeout) if call.cancelled() => return Err(exiting()),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => return Ok(None),
        }
    }
}

/// The kind the services name an error by (the Python layer maps it to an exception class).
fn service_error(e: &ClientError) -> PyErr {
    let kind = e.kind().map_or("other", |k| k.as_str());
    ServiceError::new_err((kind, e.to_string()))
}

/// The longest a control call may be given, seconds (a year): far past any use, and a bound
/// the runtime's clock can add to the present.
const MAX_TIMEOUT_S: f64 = 365.0 * 86_400.0;

/// The tokio runtime of this process, made on first use and made anew in a forked child (whose
/// copy of the parent's runtime has no threads).
fn runtime() -> PyResult<Arc<Runtime>> {
    static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().map_err(|_| PyRuntimeError::new_err("the client runtime's lock is poisoned"))?;
    if let Some((owner, rt)) = slot.as_ref()
        && *owner == pid
    {
        return Ok(rt.clone());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("coflow-client")
        .enable_all()
        .build()
        .map_err(|e| PyOSError::new_err(format!("starting the client runtime: {e}")))?;
    // A parent's runtime copied by fork cannot be shut down here (its threads are not in this
    // process): it is left alone rather than dropped.
    if let Some(inherited) = slot.take() {
        std::mem::forget(inherited);
    }
    let rt = Arc::new(rt);
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}

/// Counts the exits (`_close_calls`, from an `atexit` hook): calls made before the last one
/// return at once. Calls made after it (an exit hook's cleanup) run as usual.
static CLOSED: std::sync::LazyLock<tokio::sync::watch::Sender<u64>> =
    std::sync::LazyLock::new(|| tokio::sync::watch::Sender::new(0));

/// Calls of the SDK in flight, on any thread, by the exit count when each began.
static IN_FLIGHT: std::sync::LazyLock<Mutex<std::collections::BTreeMap<u64, usize>>> =
    std::sync::LazyLock::new(Mutex::default);

/// A call in flight, counted while it lives under the exit count when it began.
struct InFlight(u64);

impl InFlight {
    fn enter() -> InFlight {
        let mut calls = IN_FLIGHT.lock().expect("calls lock");
        // Read under the lock, so that an exit hook counting the calls before it sees this one.
        let epoch = *CLOSED.borrow();
        *calls.entry(epoch).or_default() += 1;
        InFlight(epoch)
    }

    /// Whether an exit came after it began.
    fn cancelled(&self) -> bool {
        *CLOSED.borrow() != self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut calls = IN_FLIGHT.lock().expect("calls lock");
        if let Some(n) = calls.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                calls.remove(&self.0);
            }
        }
    }
}

fn exiting() -> PyErr {
    PyRuntimeError::new_err("the interpreter is exiting: the call was cancelled")
}

/// Cancels every call of the SDK in flight and waits (the GIL released) at most `timeout_s` for
/// their threads to return. Run at exit: a thread still inside a call when the interpreter
/// finalizes would be ended there by the interpreter, across the extension's frames, which
/// aborts the process. Calls made after it run as usual.
#[pyfunction]
fn _close_calls(py: Python<'_>, timeout_s: f64) {
    let epoch = {
        let _calls = IN_FLIGHT.lock().expect("calls lock");
        let mut epoch = 0;
        CLOSED.send_modify(|e| {
            *e += 1;
            epoch = *e;
        });
        epoch
    };
    let until = std::time::Instant::now() + Duration::from_secs_f64(timeout_s.clamp(0.0, 60.0));
    let before = || IN_FLIGHT.lock().expect("calls lock").range(..epoch).next().is_some();
    while before() && std::time::Instant::now() < until {
        py.detach(|| std::thread::sleep(Duration::from_millis(5)));
    }
}

/// A way to cancel the calls a thread makes from another thread: the asyncio client's, whose
/// calls run on executor threads that a cancelled task would otherwise leave running.
#[pyclass(name = "Cancel", module = "coflow._coflow", frozen)]
#[derive(Debug)]
struct PyCancel {
    cancelled: tokio::sync::watch::Sender<bool>,
}

#[pymethods]
impl PyCancel {
    #[new]
    fn new() -> PyCancel {
        PyCancel { cancelled: tokio::sync::watch::Sender::new(false) }
    }

    /// Cancels the call under way on the thread that holds this (it raises `RuntimeError`
    /// there), and every later call of that thread until the thread lets go of it.
    fn cancel(&self) {
        self.cancelled.send_replace(true);
    }
}

thread_local! {
    /// What cancels the calls of this thread, if anything ([`_cancel_with`]).
    static CANCEL: std::cell::RefCell<Option<tokio::sync::watch::Receiver<bool>>> =
        const { std::cell::RefCell::new(None) };
}

/// Has `cancel` cancel the calls this thread makes from now on (`None`: nothing does).
#[pyfunction]
#[pyo3(signature = (cancel = None))]
fn _cancel_with(cancel: Option<PyRef<'_, PyCancel>>) {
    CANCEL.with(|c| *c.borrow_mut() = cancel.map(|k| k.cancelled.subscribe()));
}

/// Runs `fut` on `rt` with the GIL released, waking every 100 ms to let Python handle signals
/// (Ctrl-C cancels the call) and to return at once when the interpreter exits or the thread's
/// [`PyCancel`] is cancelled.
fn wait<T: Send + 'static>(
    py: Python<'_>,
    rt: &Runtime,
    fut: impl Future<Output = Result<T, ClientError>> + Send + 'static,
) -> PyResult<T> {
    let call = InFlight::enter();
    let mut cancel = CANCEL.with(|c| c.borrow().clone());
    let mut task = rt.spawn(fut);
    let mut closed = CLOSED.subscribe();
    loop {
        let done = py.detach(|| {
            rt.block_on(async {
                let cancelled = async {
                    match cancel.as_mut() {
                        // A dropped `Cancel` cancels nothing: its call waits on as any other.
                        Some(rx) => {
                            if rx.wait_for(|&c| c).await.is_err() {
                                std::future::pending::<()>().await;
                            }
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = &mut task => Some(r),
                    _ = tokio::time::sleep(Duration::from_millis(100)) => None,
                    _ = closed.wait_for(|&e| e != call.0) => None,
                    () = cancelled => None,
                }
            })
        });
        match done {
            Some(Ok(result)) => return result.map_err(|e| service_error(&e)),
            Some(Err(join)) => return Err(PyRuntimeError::new_err(format!("the call failed: {join}"))),
            None => {
                if call.cancelled() {
                    task.abort();
                    return Err(exiting());
                }
                if cancel.as_ref().is_some_and(|rx| *rx.borrow()) {
                    task.abort();
                    return Err(PyRuntimeError::new_err("the call was cancelled"));
                }
                if let Err(e) = py.check_signals() {
                    task.abort();
                    return Err(e);
                }
            }
        }
    }
}

/// A connection to a coflow cluster: the coordinator and the local agent.
#[pyclass(name = "Client", module = "coflow._coflow", frozen)]
#[derive(Debug)]
struct PyClient {
    client: coflow_client::Client,
    rt: Arc<Runtime>,
    /// The process that made it: the runtime it calls on has no threads in a forked child.
    pid: u32,
}

/// Fails in a process that did not make the client (a child forked after it was made), whose
/// calls would wait for ever on the parent's runtime, which has no threads there.
fn same_process(pid: u32) -> PyResult<()> {
    if std::process::id() == pid {
        Ok(())
    } else {
        Err(PyRuntimeError::new_err(format!(
            "this client was made in process {pid}, before a fork: make a new Client in this process"
        )))
    }
}

impl PyClient {
    /// The runtime to call on, in the process that made the client only.
    fn rt(&self) -> PyResult<&Runtime> {
        same_process(self.pid)?;
        Ok(&self.rt)
    }
}

#[pymethods]
impl PyClient {
    #[new]
    #[pyo3(signature = (coordinator, agent, token = None, tls = None, timeout_s = None))]
    fn new(
        py: Python<'_>,
        coordinator: String,
        agent: String,
        token: Option<&str>,
        tls: Option<(PathBuf, PathBuf, PathBuf)>,
        timeout_s: Option<f64>,
    ) -> PyResult<PyClient> {
        // Mutual TLS needs no token (each member has its own key); token mode needs the token.
        let mut cfg = match (token, tls) {
            (_, Some((ca, cert, key))) => {
                // A file that cannot be read is the OSError of its kind, as a trace's is, named by
                // its place in `tls`. What it is comes first, from its metadata: opening a FIFO
                // would wait for a writer, with the GIL held.
                for (what, path) in [("ca", &ca), ("cert", &cert), ("key", &key)] {
                    let readable = std::fs::metadata(path).and_then(|m| {
                        if m.is_dir() {
                            return Err(std::io::Error::from(std::io::ErrorKind::IsADirectory));
                        }
                        coflow_core::files::regular(&m)?;
                        std::fs::File::open(path).map(drop)
                    });
                    if let Err(e) = readable {
                        return Err(os_error(e.kind(), format!("tls {what}: cannot read {}: {e}", path.display())));
                    }
                }
                ClientConfig::tls(coordinator, agent, TlsFiles { ca, cert, key })
            }
            (Some(t), None) => {
                let token = ClusterToken::new(t).map_err(|e| PyValueError::new_err(format!("token: {e}")))?;
                ClientConfig::new(coordinator, agent, token)
            }
            (None, None) => {
                return Err(PyValueError::new_err(
                    "token: give the cluster token (or set COFLOW_TOKEN), or tls=(ca, cert, key)",
                ));
            }
        };
        if let Some(t) = timeout_s {
            if !(t > 0.0 && t <= MAX_TIMEOUT_S) {
                return Err(PyValueError::new_err(format!(
                    "timeout_s must be a positive number of seconds, up to a year, got {}",
                    coflow_core::shown(t)
                )));
            }
            cfg.timeout = Duration::from_secs_f64(t);
        }
        let rt = runtime()?;
        // A URL the client cannot take is the `ValueError` of its argument, which the SDK checks
        // before any call; what else connecting refuses first (TLS files) is the service error it
        // is. Connecting reads the files, then the URLs: the refusal is a URL's if it is what
        // that URL alone gives.
        let url_error = cfg.url_error();
        let client = match wait(py, &rt, async { Ok(coflow_client::Client::connect(cfg).await) })? {
            Ok(client) => client,
            Err(ClientError::Invalid(message)) if url_error.as_ref().is_some_and(|(_, why)| *why == message) => {
                let (field, why) = url_error.expect("checked");
                return Err(PyValueError::new_err(format!("{field}: {why}")));
            }
            Err(e) => return Err(service_error(&e)),
        };
        Ok(PyClient { client, rt, pid: std::process::id() })
    }

    /// Registers a coflow of `num_flows` pieces; returns its id.
    #[pyo3(signature = (num_flows, name = String::new(), kind = String::new(), deadline_s = None, parents = Vec::new(), weight = 1.0, all_gets_timeout_s = None, lease_s = None))]
    #[allow(clippy::too_many_arguments)]
    fn register(
        &self,
        py: Python<'_>,
        num_flows: u32,
        name: String,
        kind: String,
        deadline_s: Option<f64>,
        parents: Vec<u64>,
        weight: f64,
        all_gets_timeout_s: Option<f64>,
        lease_s: Option<f64>,
    ) -> PyResult<u64> {
        let secs = |field: &str, s: f64| {
            if s.is_finite() && s >= 0.0 {
                Ok(Nanos::from_secs_f64(s))
            } else {
                Err(PyValueError::new_err(format!(
                    "{field} must be a non-negative number of seconds, got {}",
                    coflow_core::shown(s)
                )))
            }
        };
        let readiness = match all_gets_timeout_s {
            Some(t) => Readiness::AllGets { timeout: secs("all_gets_timeout_s", t)? },
            None => Readiness::OnGet,
        };
        let options = CoflowOptions {
            name,
            deadline: deadline_s.map(|d| secs("deadline_s", d)).transpose()?,
            parents: parents.into_iter().map(CoflowId).collect(),
            kind,
            readiness,
            weight,
            lease: lease_s.map(|l| secs("lease_s", l)).transpose()?,
        };
        let c = self.client.clone();
        wait(py, self.rt()?, async move { c.register(num_flows, options).await.map(|id| id.0) })
    }

    /// Stores `data` as piece `data_id` of `coflow` at the local agent; returns its size.
    fn put(&self, py: Python<'_>, coflow: u64, data_id: String, data: &[u8]) -> PyResult<u64> {
        // The copy runs with the GIL released (a `bytes` object cannot change meanwhile), so
        // that a large put stalls no other Python thread or event loop.
        let (c, content) = (self.client.clone(), py.detach(|| data.to_vec()));
        wait(py, self.rt()?, async move { c.put(CoflowId(coflow), &data_id, content).await })
    }

    /// Stores `length` bytes at `offset` of `path` (relative to the agent's data directory) as
    /// piece `data_id`; returns its size.
    fn put_file(
        &self,
        py: Python<'_>,
        coflow: u64,
        data_id: String,
        path: String,
        offset: u64,
        length: u64,
    ) -> PyResult<u64> {
        let c = self.client.clone();
        wait(py, self.rt()?, async move { c.put_file(CoflowId(coflow), &data_id, &path, offset, length).await })
    }

    /// Fetches piece `data_id` of `coflow` through the local agent.
    fn get<'py>(&self, py: Python<'py>, coflow: u64, data_id: String) -> PyResult<Bound<'py, PyBytes>> {
        let c = self.client.clone();
        let bytes = wait(py, self.rt()?, async move { c.get(CoflowId(coflow), &data_id).await })?;
        // The copy into the new `bytes` object (which no other thread can see yet) runs with the
        // GIL released; pyo3 fills the object with zeros first, with the GIL held.
        PyBytes::new_with(py, bytes.len(), |buf| {
            py.detach(|| buf.copy_from_slice(&bytes));
            Ok(())
        })
    }

    /// Starts fetching piece `data_id` of `coflow`; the chunks come one `next` call at a time.
    fn get_stream(&self, py: Python<'_>, coflow: u64, data_id: String) -> PyResult<PyChunks> {
        let c = self.client.clone();
        let chunks = wait(py, self.rt()?, async move { c.get_chunks(CoflowId(coflow), &data_id).await })?;
        Ok(PyChunks {
            stream: Mutex::new(Stream::Open(Box::new(chunks))),
            closed: tokio::sync::watch::Sender::new(false),
            rt: self.rt.clone(),
            pid: self.pid,
        })
    }

    /// Says no more puts will come for `coflow`.
    fn seal(&self, py: Python<'_>, coflow: u64) -> PyResult<()> {
        let c = self.client.clone();
        wait(py, self.rt()?, async move { c.seal(CoflowId(coflow)).await })
    }

    /// Renews the leases of `coflows`; returns the ids not renewed.
    fn renew(&self, py: Python<'_>, coflows: Vec<u64>) -> PyResult<Vec<u64>> {
        let c = self.client.clone();
        let ids: Vec<CoflowId> = coflows.into_iter().map(CoflowId).collect();
        wait(py, self.rt()?, async move { c.renew(&ids).await.map(|n| n.into_iter().map(|c| c.0).collect()) })
    }

    /// Removes `coflow`.
    fn unregister(&self, py: Python<'_>, coflow: u64) -> PyResult<()> {
        let c = self.client.clone();
        wait(py, self.rt()?, async move { c.unregister(CoflowId(coflow)).await })
    }

    /// What the coordinator is doing, as nested dicts and lists.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.client.clone();
        let s = wait(py, self.rt()?, async move { c.status().await })?;
        let out = PyDict::new(py);
        out.set_item("policy", &s.policy)?;
        let coflows = PyList::empty(py);
        for c in &s.coflows {
            let d = PyDict::new(py);
            d.set_item("coflow", c.coflow_id)?;
            d.set_item("name", &c.name)?;
            d.set_item("num_flows", c.num_flows)?;
            d.set_item("puts", c.puts)?;
            d.set_item("bypass", c.bypass)?;
            // The job it is ranked with (its own id unless it joined a parent's; None from a
            // coordinator that does not say); the seconds left on its lease, None without one.
            d.set_item("job", (c.job != 0).then_some(c.job))?;
            d.set_item("lease_left_s", (c.lease_left_ms > 0).then(|| c.lease_left_ms as f64 / 1e3))?;
            // Its deadline in seconds from its registration, and what a policy's admission
            // control made of it ("pending", "admitted", "rejected"); None without one.
            d.set_item("deadline_s", (c.deadline_ms > 0).then(|| c.deadline_ms as f64 / 1e3))?;
            d.set_item("admission", c.admission_name())?;
            let flows = PyList::empty(py);
            for f in &c.flows {
                let fd = PyDict::new(py);
                fd.set_item("flow", f.flow_id)?;
                fd.set_item("data_id", &f.data_id)?;
                fd.set_item("src", f.src_machine_id)?;
                fd.set_item("dst", f.dst_machine_id)?;
                fd.set_item("size", f.size)?;
                fd.set_item("bytes_sent", f.bytes_sent)?;
                fd.set_item("rate_bps", f.rate_bps)?;
                // The relay it goes through, and whether its reader holds it back.
                fd.set_item("via", f.via_machine_id)?;
                fd.set_item("reader_limited", f.reader_limited)?;
                flows.append(fd)?;
            }
            d.set_item("flows", flows)?;
            coflows.append(d)?;
        }
        out.set_item("coflows", coflows)?;
        let agents = PyList::empty(py);
        for a in &s.agents {
            let d = PyDict::new(py);
            d.set_item("machine", a.machine_id)?;
            d.set_item("data_addr", &a.data_addr)?;
            d.set_item("alive", a.alive)?;
            d.set_item("departed", a.departed)?;
            d.set_item("tx_bps", a.tx_bps)?;
            d.set_item("rx_bps", a.rx_bps)?;
            d.set_item("datacenter", (!a.datacenter.is_empty()).then_some(&a.datacenter))?;
            agents.append(d)?;
        }
        out.set_item("agents", agents)?;
        Ok(out)
    }
}

/// Where a stream of chunks is between `next` calls.
#[derive(Debug)]
enum Stream {
    /// The next chunk is pulled from here.
    Open(Box<coflow_client::Chunks>),
    /// A `next` call holds the chunks while it waits.
    Waiting,
    /// Every byte of the piece came.
    Complete,
    /// It ended before the piece did: why.
    Ended(&'static str),
}

/// What `next` raises once the stream was closed.
const STREAM_CLOSED: &str = "the stream is closed";

/// What one wait for the next chunk brought.
enum Pulled {
    /// A chunk, and the chunks to go on from.
    Chunk(Box<coflow_client::Chunks>, Vec<u8>),
    /// The end of a whole piece.
    Complete,
    /// `close` came first.
    Closed,
}

/// The chunks of one piece, pulled one at a time (the transfer waits for the reader).
///
/// A stream yields every byte of its piece, then `None` for ever, or it raises: a `next` that
/// fails, or returns before its answer (a signal's exception, a cancel, the interpreter exiting),
/// or is closed while it waits, drops the stream there (which ends the transfer at once), and
/// every later `next` raises `ValueError`, never `None`: a chunk may have come meanwhile, so the
/// piece can no longer be whole.
#[pyclass(name = "Chunks", module = "coflow._coflow", frozen)]
#[derive(Debug)]
struct PyChunks {
    stream: Mutex<Stream>,
    /// Set by `close`: a `next` that waits returns.
    closed: tokio::sync::watch::Sender<bool>,
    rt: Arc<Runtime>,
    pid: u32,
}

impl PyChunks {
    fn stream(&self) -> std::sync::MutexGuard<'_, Stream> {
        // The lock is never held across a wait or a call into Python: a poisoned one still holds a
        // state that is whole.
        self.stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[pymethods]
impl PyChunks {
    /// The next chunk, or `None` once the piece is complete.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        same_process(self.pid)?;
        let mut chunks = {
            let mut stream = self.stream();
            // Taken while this call waits; any other state is put back as it was.
            match std::mem::replace(&mut *stream, Stream::Waiting) {
                Stream::Open(chunks) => chunks,
                Stream::Waiting => {
                    return Err(PyValueError::new_err("another call is waiting for this stream's next chunk"));
                }
                Stream::Complete => {
                    *stream = Stream::Complete;
                    return Ok(None);
                }
                Stream::Ended(why) => {
                    *stream = Stream::Ended(why);
                    return Err(PyValueError::new_err(why));
                }
            }
        };
        // The chunks go with the call's task: a call that returns before its answer leaves them
        // to be dropped with the task, which ends the transfer.
        let mut closed = self.closed.subscribe();
        let pulled = wait(py, &self.rt, async move {
            let next = tokio::select! {
                next = chunks.next() => next?,
                _ = closed.wait_for(|&c| c) => return Ok(Pulled::Closed),
            };
            Ok(match next {
                Some(chunk) => Pulled::Chunk(chunks, chunk),
                None => Pulled::Complete,
            })
        });
        let mut stream = self.stream();
        match pulled {
            Ok(Pulled::Chunk(chunks, chunk)) if !*self.closed.borrow() => {
                *stream = Stream::Open(chunks);
                drop(stream);
                Ok(Some(PyBytes::new(py, &chunk)))
            }
            Ok(Pulled::Chunk(..) | Pulled::Closed) => {
                *stream = Stream::Ended(STREAM_CLOSED);
                Err(PyValueError::new_err(STREAM_CLOSED))
            }
            Ok(Pulled::Complete) => {
                *stream = Stream::Complete;
                Ok(None)
            }
            Err(e) => {
                *stream = Stream::Ended("the stream ended early: a wait for its next chunk failed or was interrupted");
                Err(e)
            }
        }
    }

    /// Ends the transfer (at once, also for a `next` that waits on another thread, which raises
    /// `ValueError`); later `next` calls raise `ValueError`, unless the piece was complete.
    fn close(&self) {
        self.closed.send_replace(true);
        let open = {
            let mut stream = self.stream();
            if !matches!(*stream, Stream::Open(_)) {
                return;
            }
            std::mem::replace(&mut *stream, Stream::Ended(STREAM_CLOSED))
        };
        // A child forked after the stream was made leaves the parent's connection alone.
        if std::process::id() != self.pid {
            std::mem::forget(open);
        }
    }
}

/// The extension module.
#[pymodule]
fn _coflow(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ServiceError", m.py().get_type::<ServiceError>())?;
    m.add_class::<PyWorkload>()?;
    m.add_class::<PyResults>()?;
    m.add_class::<PyClient>()?;
    m.add_class::<PyChunks>()?;
    m.add_function(wrap_pyfunction!(read_trace, m)?)?;
    m.add_function(wrap_pyfunction!(synthetic, m)?)?;
    m.add_function(wrap_pyfunction!(parse_workload, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(_close_calls, m)?)?;
    m.add_class::<PyCancel>()?;
    m.add_function(wrap_pyfunction!(_cancel_with, m)?)?;
    m.add("POLICIES", coflow_sched::policy::NAMES.to_vec())?;
    m.add("WIDE_AREA_POLICIES", coflow_sched::policy::WAN_NAMES.to_vec())?;
    m.add("JOB_POLICIES", coflow_sched::policy::JOB_NAMES.to_vec())?;
    // The most machines a workload holds, whether read from a trace or generated.
    m.add("MAX_MACHINES", coflow_trace::synth::MAX_MACHINES)?;
    // The one table of error kinds (the protocol's `ErrorKind`), which `coflow.errors` maps.
    m.add("ERROR_KINDS", coflow_client::ErrorKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>())?;
    // A lease's bounds in seconds, the protocol's (`register(lease_s=)` checks them by name).
    m.add("MAX_TIMEOUT_S", MAX_TIMEOUT_S)?;
    m.add("LEASE_S", (coflow_client::MIN_LEASE_MS as f64 / 1e3, coflow_client::MAX_LEASE_MS as f64 / 1e3))?;
    // The protocol's other bounds on what `register` and `put_file` send, which the SDK checks by
    // keyword before a call rather than hear the coordinator name its wire fields.
    m.add("MAX_NUM_FLOWS", coflow_client::MAX_NUM_FLOWS)?;
    m.add("MAX_NAME_BYTES", coflow_client::MAX_NAME_LEN)?;
    m.add("MAX_KIND_BYTES", coflow_client::MAX_KIND_LEN)?;
    m.add("MAX_PARENTS", coflow_client::MAX_PARENTS)?;
    m.add("MAX_DEADLINE_S", coflow_client::MAX_DEADLINE_MS as f64 / 1e3)?;
    m.add("MAX_ALL_GETS_TIMEOUT_S", coflow_client::MAX_READY_TIMEOUT_MS as f64 / 1e3)?;
    m.add("MAX_PIECE_BYTES", coflow_client::MAX_PIECE_SIZE)?;
    // The workspace version, the same that `coflow --version` prints.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Sends what `run` gives, or the message of its panic: a failure inside a run reaches Python
/// with what went wrong rather than as a report that never came. A run that was stopped (`None`)
/// sends nothing: the call that stopped it has returned.
fn send_unless_panic(tx: &std::sync::mpsc::Sender<Result<PyResults, String>>, run: impl FnOnce() -> Option<PyResults>) {
    let sent = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Some(results)) => Ok(results),
        Ok(None) => return,
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".to_string())),
    };
    let _ = tx.send(sent);
}

/// What a run's progress answers: stop once the call that started it has returned.
fn go_on(stop: &AtomicBool) -> ControlFlow<()> {
    if stop.load(Ordering::Relaxed) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
}

/// Tells the runs a call started to stop when the call returns, whichever way it does.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
