//! `coflow testbed spark`: a Spark standalone cluster on the testbed. Per mode a fresh testbed
//! (namespaces, shaped links, coordinator, agents), a Spark master in the switch's namespace, one
//! worker per host in the host's namespace, and one application (the driver
//! `io.coflow.spark.TestbedMix`, in the switch's namespace) that runs a trace-driven mix of jobs
//! and a few named jobs, either on Spark's own shuffle (mode `spark`: Netty over kernel TCP between
//! the hosts' executors) or through the coflow plugin and the agents under a coordinator policy.
//! Either way every remote shuffle byte crosses the sending host's uplink and the receiving
//! host's downlink. Results of every job are compared with the same job on Spark's own shuffle.
//!
//! Spark itself (its jars, from Maven Central at the version the plugin's pom pins), the plugin
//! and the driver come from `scripts/spark-dist`, which caches them across runs.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use coflow_core::{Bin, Workload};
use coflow_sim::percentile;
use serde::Serialize;
use serde_json::{Value, json};

use crate::net::{self, Names};
use crate::procs::ServiceConfig;
use crate::state::{CHANGES, StateFile, signal};
use crate::testbed::Testbed;
use crate::topology::Topology;
use crate::{TCP, TestbedError};

/// The mode in which jobs use Spark's own shuffle.
pub const SPARK: &str = "spark";

/// What `scripts/spark-dist` prepared: a SPARK_HOME with Spark's jars, the plugin and the driver.
#[derive(Clone, Debug)]
pub struct SparkDist {
    /// `spark-home` (its `jars/` holds Spark's jars).
    pub home: PathBuf,
    /// The shaded plugin jar.
    pub plugin_jar: PathBuf,
    /// The test jar holding the driver and the jobs.
    pub driver_jar: PathBuf,
}

impl SparkDist {
    /// The distribution in `dir`, checked: every part must be there.
    pub fn at(dir: &Path) -> Result<SparkDist, TestbedError> {
        let d = SparkDist {
            home: dir.join("spark-home"),
            plugin_jar: dir.join("coflow-spark.jar"),
            driver_jar: dir.join("coflow-spark-tests.jar"),
        };
        for p in [&d.home.join("jars"), &d.plugin_jar, &d.driver_jar] {
            if !p.exists() {
                return Err(TestbedError::Setup(format!(
                    "{} is missing: `scripts/spark-dist` prepares Spark, the plugin and the driver there",
                    p.display()
                )));
            }
        }
        Ok(d)
    }

    /// The default place: `$COFLOW_SPARK_DIST`, else `$XDG_CACHE_HOME/coflow/spark-dist`, else
    /// `~/.cache/coflow/spark-dist` (where `scripts/spark-dist` writes).
    pub fn default_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("COFLOW_SPARK_DIST") {
            return PathBuf::from(d);
        }
        let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
        cache.join("coflow").join("spark-dist")
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct SparkOptions {
    /// The hosts and links.
    pub topology: Topology,
    /// Modes: `spark` (Spark's own shuffle) and coordinator policies (or `tcp`), each on a fresh
    /// testbed.
    pub modes: Vec<String>,
    /// The workload, scaled; each coflow becomes one job.
    pub workload: Workload,
    /// What it is, for the report.
    pub source: String,
    /// Arrival times are divided by this.
    pub compression: f64,
    /// Task slots per executor (one executor per host).
    pub executor_cores: u32,
    /// Each executor's heap, as Spark spells it (`768m`).
    pub executor_memory: String,
    /// Records of the named sort job (100 bytes each).
    pub sort_records: u64,
    /// The bound on one mode's application.
    pub timeout: Duration,
    /// The `coflow` binary.
    pub exe: PathBuf,
    /// Spark, the plugin and the driver.
    pub dist: SparkDist,
}

/// One job in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct JobResult {
    /// `coflow-<id>` for the trace's jobs, else the named job's name.
    pub name: String,
    /// The mode.
    pub mode: String,
    /// `trace` or `named`.
    pub kind: String,
    /// The coflow's bin (trace jobs).
    pub bin: Option<String>,
    /// Seconds from the mix's start to its submission.
    pub arrival_s: f64,
    /// Submission to end.
    pub jct_s: f64,
    /// Shuffle bytes its reducers read (local and remote).
    pub shuffle_bytes: u64,
    /// Of which remote (crossed links).
    pub remote_bytes: u64,
    /// The span of its stages that read a shuffle.
    pub comm_stage_s: f64,
    /// The sum of its reduce tasks' fetch wait.
    pub shuffle_read_s: f64,
    /// Tasks that failed (and were retried).
    pub failed_tasks: u64,
    /// Its result equals the same job's on Spark's own shuffle (`None` when `spark` did not run).
    pub identical: Option<bool>,
    /// Why it failed.
    pub error: Option<String>,
    #[serde(skip)]
    digest: Option<String>,
}

/// One mode's figures (over the trace's jobs; the named jobs run alone afterwards).
#[derive(Clone, Debug, Serialize)]
pub struct ModeResult {
    /// The mode.
    pub mode: String,
    /// Trace jobs run.
    pub jobs: usize,
    /// Of which completed.
    pub completed: usize,
    /// Every job (trace and named) identical to Spark's own shuffle.
    pub identical: Option<bool>,
    /// Average job completion time.
    pub avg_jct_s: f64,
    /// Its 95th percentile.
    pub p95_jct_s: f64,
    /// Average shuffle read time (fetch wait).
    pub avg_shuffle_read_s: f64,
    /// Average communication-stage time.
    pub avg_comm_stage_s: f64,
    /// Average completion time of the named jobs.
    pub named_avg_jct_s: f64,
    /// `spark`'s average JCT over this mode's (above 1: this mode is faster).
    pub jct_factor_over_spark: Option<f64>,
    /// The same for the communication stage.
    pub comm_stage_factor_over_spark: Option<f64>,
    /// The same for the shuffle read time.
    pub shuffle_read_factor_over_spark: Option<f64>,
    /// The largest ratio of a trace job's JCT here over on `spark`.
    pub worst_job_slowdown: Option<f64>,
    /// Mean utilization of the links (wire bytes both ways over capacity) during the mix.
    pub link_utilization: f64,
    /// Utilization of the busiest link during the mix.
    pub busiest_link_utilization: f64,
    /// Share of the machine's cores the testbed's processes used during the mix.
    pub testbed_cpu: f64,
    /// Share of the machine's cores busy during the mix (everything on it).
    pub machine_cpu: f64,
    /// The mix's wall time.
    pub mix_s: f64,
    /// The mode's wall time, testbed up to down.
    pub wall_s: f64,
}

/// Figures of one group of trace jobs in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct BinResult {
    /// `comm <25%` .. `comm >=75%` (communication share of the job on `spark`) or a coflow bin.
    pub bin: String,
    /// The mode.
    pub mode: String,
    /// Jobs in it.
    pub jobs: usize,
    /// Average JCT.
    pub avg_jct_s: f64,
    /// Average communication-stage time.
    pub avg_comm_stage_s: f64,
    /// `spark`'s average JCT over this mode's.
    pub jct_factor_over_spark: Option<f64>,
    /// The same for the communication stage.
    pub comm_stage_factor_over_spark: Option<f64>,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct SparkReport {
    /// Hosts (one worker, one executor and one agent each).
    pub hosts: usize,
    /// The links' rate, bits per second (the first host's uplink when they differ).
    pub link_bps: f64,
    /// Task slots per executor.
    pub executor_cores: u32,
    /// Executor heap.
    pub executor_memory: String,
    /// The workload and its scale.
    pub workload: String,
    /// Arrival times divided by this.
    pub arrival_compression: f64,
    /// Trace jobs.
    pub trace_jobs: usize,
    /// Bytes of the trace's shuffles (all flows, local ones too).
    pub trace_bytes: u64,
    /// Per mode.
    pub modes: Vec<ModeResult>,
    /// Per job and mode.
    pub jobs: Vec<JobResult>,
    /// Per bin and mode.
    pub bins: Vec<BinResult>,
    /// Total wall time.
    pub wall_s: f64,
}

/// One coflow as a job: mappers (hosts), reducers, bytes from each mapper to each reducer.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    /// `coflow-<id>`.
    pub name: String,
    /// Seconds after the first coflow's arrival, compressed.
    pub arrival_s: f64,
    /// The mappers' hosts (machine indices), distinct.
    pub mappers: Vec<usize>,
    /// Reducers (one per distinct receiving machine).
    pub reducers: usize,
    /// `bytes[m][r]`.
    pub bytes: Vec<Vec<u64>>,
    /// The coflow's bin.
    pub bin: Bin,
}

/// The trace's coflows as jobs; arrivals divided by `compression`.
pub fn trace_jobs(w: &Workload, compression: f64) -> Result<Vec<TraceJob>, TestbedError> {
    if !(compression >= 1.0 && compression.is_finite()) {
        return Err(TestbedError::Workload(format!(
            "the arrival compression must be at least 1, got {}",
            coflow_core::shown(compression)
        )));
    }
    let first = w.coflows.iter().map(|c| c.arrival).min().unwrap_or(coflow_core::Nanos::ZERO);
    let mut out = Vec::new();
    for c in &w.coflows {
        let mut mappers: Vec<usize> = c.flows.iter().map(|f| f.src.index()).collect();
        mappers.sort_unstable();
        mappers.dedup();
        let mut dsts: Vec<usize> = c.flows.iter().map(|f| f.dst.index()).collect();
        dsts.sort_unstable();
        dsts.dedup();
        if mappers.is_empty() {
            continue;
        }
        let mut bytes = vec![vec![0u64; dsts.len()]; mappers.len()];
        for f in &c.flows {
            let m = mappers.binary_search(&f.src.index()).expect("a mapper");
            let r = dsts.binary_search(&f.dst.index()).expect("a reducer");
            bytes[m][r] += f.size.get();
        }
        out.push(TraceJob {
            name: format!("coflow-{}", c.id),
            arrival_s: (c.arrival - first).as_secs_f64() / compression,
            mappers,
            reducers: dsts.len(),
            bytes,
            bin: c.bin(),
        });
    }
    Ok(out)
}

/// The driver's plan: the trace jobs with their mappers' host addresses.
fn plan(jobs: &[TraceJob], names: &Names, executors: usize, sort_records: u64) -> Value {
    let trace: Vec<Value> = jobs
        .iter()
        .map(|j| {
            json!({
                "name": j.name,
                "arrival_s": j.arrival_s,
                "mappers": j.mappers.iter().map(|&m| names.host_ip(m).to_string()).collect::<Vec<_>>(),
                "reducers": j.reducers,
                "bytes": j.bytes,
            })
        })
        .collect();
    json!({"executors": executors, "sort_records": sort_records, "trace": trace})
}

/// `--add-opens` that Spark needs on Java 17 (what its launcher adds).
const OPENS: [&str; 15] = [
    "java.lang",
    "java.lang.invoke",
    "java.lang.reflect",
    "java.io",
    "java.net",
    "java.nio",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "jdk.internal.ref",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
    "jdk.internal.misc",
];

/// The Spark processes of one testbed: stopped (TERM, then KILL) when dropped, and any executor
/// left behind (its command line names the testbed) killed after them.
struct SparkProcs {
    prefix: String,
    children: Vec<Child>,
}

impl SparkProcs {
    fn spawn(
        &mut self,
        state: &StateFile,
        ns: &str,
        java_args: &[String],
        env: &[(&str, String)],
        log: &Path,
    ) -> Result<u32, TestbedError> {
        let out = std::fs::File::options().create(true).append(true).open(log).map_err(|e| TestbedError::io(log, e))?;
        let err = out.try_clone().map_err(|e| TestbedError::io(log, e))?;
        let torn = CHANGES.lock().unwrap_or_else(|e| e.into_inner());
        if *torn {
            return Err(TestbedError::Interrupted);
        }
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, "java"]).args(java_args).stdin(Stdio::null()).stdout(out).stderr(err);
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c
            .spawn()
            .map_err(|e| TestbedError::Command { cmd: format!("ip netns exec {ns} java"), reason: e.to_string() })?;
        let pid = child.id();
        state.add_pid(pid)?;
        drop(torn);
        self.children.push(child);
        Ok(pid)
    }

    /// The processes whose command line names this testbed (the executors, which the workers
    /// start).
    fn leftovers(&self) -> Vec<u32> {
        let mark = format!("-Dcoflow.testbed={}", self.prefix);
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != std::process::id())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).split('\0').any(|a| a == mark))
            })
            .collect()
    }
}

impl Drop for SparkProcs {
    fn drop(&mut self) {
        for c in self.children.iter().rev() {
            signal(c.id(), "TERM");
        }
        let until = Instant::now() + Duration::from_secs(5);
        for c in &mut self.children {
            while Instant::now() < until && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in self.leftovers() {
            signal(pid, "KILL");
        }
    }
}

fn java_args(dist: &SparkDist, prefix: &str, heap: &str, class: &str, extra_cp: &[&Path]) -> Vec<String> {
    let mut a = vec![format!("-Xmx{heap}"), "-XX:+IgnoreUnrecognizedVMOptions".into()];
    a.extend(OPENS.iter().map(|p| format!("--add-opens=java.base/{p}=ALL-UNNAMED")));
    a.push("-Djdk.reflect.useDirectMethodHandle=false".into());
    a.push(format!("-Dcoflow.testbed={prefix}"));
    let mut cp: Vec<String> = extra_cp.iter().map(|p| p.display().to_string()).collect();
    cp.push(format!("{}/jars/*", dist.home.display()));
    a.push("-cp".into());
    a.push(cp.join(":"));
    a.push(class.into());
    a
}

/// Waits until `log` holds `needle`.
fn wait_log(log: &Path, needle: &str, timeout: Duration, what: &str) -> Result<(), TestbedError> {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if crate::state::interrupted() {
            return Err(TestbedError::Interrupted);
        }
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains(needle)) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(TestbedError::Setup(format!("{what} did not start within {timeout:?}; see {}", log.display())))
}

/// Jiffies (1/100 s) the machine's cores spent busy and in all, from `/proc/stat`.
fn machine_jiffies() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().next() else { return (0, 0) };
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Jiffies used so far by the processes whose command line names the testbed's prefix.
fn testbed_jiffies(prefix: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut sum = 0;
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if !String::from_utf8_lossy(&cmd).contains(prefix) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        let f: Vec<&str> = rest.split_whitespace().collect();
        sum += f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    }
    sum
}

/// One sample of the links and the cores.
struct Sample {
    at: SystemTime,
    links: Vec<(u64, u64)>,
    machine: (u64, u64),
    testbed: u64,
}

/// What one mode measured.
struct ModeRun {
    jobs: Vec<JobResult>,
    mix_s: f64,
    link_utilization: f64,
    busiest_link_utilization: f64,
    testbed_cpu: f64,
    machine_cpu: f64,
}

fn mode_run(
    opts: &SparkOptions,
    mode: &str,
    jobs: &[TraceJob],
    progress: &mut dyn FnMut(&str),
) -> Result<ModeRun, TestbedError> {
    let policy = if mode == SPARK { TCP.to_string() } else { mode.to_string() };
    let svc = ServiceConfig { policy, agent_timeout_ms: 3000, multipath: false };
    let tb = Testbed::up(&opts.topology, &opts.exe, &svc)?;
    let names = tb.names.clone();
    let run_dir = tb.run_dir().to_path_buf();
    let hosts = opts.topology.hosts.len();
    progress(&format!("{mode}: testbed {} up ({hosts} hosts), starting Spark", names.prefix));
    let mut procs = SparkProcs { prefix: names.prefix.clone(), children: Vec::new() };
    let base_env = |ip: String, i: Option<usize>| {
        let mut env = vec![
            ("SPARK_HOME", opts.dist.home.display().to_string()),
            ("SPARK_SCALA_VERSION", "2.13".to_string()),
            ("SPARK_LOCAL_IP", ip),
            ("SPARK_NO_DAEMONIZE", "1".to_string()),
        ];
        if let Some(i) = i {
            env.push(("SPARK_LOCAL_DIRS", run_dir.join(format!("spark-local{i}")).display().to_string()));
            env.push(("COFLOW_DATA_DIR", run_dir.join(format!("agent{i}")).display().to_string()));
        }
        env
    };
    let master_ip = names.coordinator_ip().to_string();
    let master_log = run_dir.join("spark-master.log");
    let mut args = java_args(&opts.dist, &names.prefix, "256m", "org.apache.spark.deploy.master.Master", &[]);
    args.extend([
        "--host".into(),
        master_ip.clone(),
        "--port".into(),
        "7077".into(),
        "--webui-port".into(),
        "8080".into(),
    ]);
    procs.spawn(&tb.state, &names.switch_ns(), &args, &base_env(master_ip.clone(), None), &master_log)?;
    wait_log(&master_log, "I have been elected leader", Duration::from_secs(90), "the Spark master")?;
    let master = format!("spark://{master_ip}:7077");
    let mem_mb = spark_size_mb(&opts.executor_memory)?;
    for i in 0..hosts {
        let ip = names.host_ip(i).to_string();
        let mut args = java_args(&opts.dist, &names.prefix, "256m", "org.apache.spark.deploy.worker.Worker", &[]);
        args.extend([
            "--host".into(),
            ip.clone(),
            "--cores".into(),
            opts.executor_cores.to_string(),
            "--memory".into(),
            format!("{}m", mem_mb + 256),
            "--work-dir".into(),
            run_dir.join(format!("spark-work{i}")).display().to_string(),
            master.clone(),
        ]);
        let log = run_dir.join(format!("spark-worker{i}.log"));
        procs.spawn(&tb.state, &names.host_ns(i), &args, &base_env(ip, Some(i)), &log)?;
    }
    for i in 0..hosts {
        let log = run_dir.join(format!("spark-worker{i}.log"));
        wait_log(&log, "Successfully registered with master", Duration::from_secs(90), &format!("Spark worker {i}"))?;
    }
    let plan_path = run_dir.join("spark-plan.json");
    let text = serde_json::to_string(&plan(jobs, &names, hosts, opts.sort_records)).expect("serializable");
    std::fs::write(&plan_path, text).map_err(|e| TestbedError::io(&plan_path, e))?;
    let out_path = run_dir.join("spark-out.json");
    let work = run_dir.join("spark-jobs");
    let mut conf: Vec<(String, String)> = vec![
        ("spark.driver.host".into(), master_ip.clone()),
        ("spark.driver.bindAddress".into(), master_ip.clone()),
        ("spark.ui.enabled".into(), "false".into()),
        ("spark.executor.cores".into(), opts.executor_cores.to_string()),
        ("spark.executor.memory".into(), opts.executor_memory.clone()),
        (
            "spark.executor.extraClassPath".into(),
            format!("{}:{}", opts.dist.plugin_jar.display(), opts.dist.driver_jar.display()),
        ),
        ("spark.executor.extraJavaOptions".into(), format!("-Dcoflow.testbed={}", names.prefix)),
        ("spark.serializer".into(), "org.apache.spark.serializer.KryoSerializer".into()),
        ("spark.scheduler.mode".into(), "FAIR".into()),
        ("spark.locality.wait".into(), "1s".into()),
        ("spark.shuffle.sort.bypassMergeThreshold".into(), "4".into()),
        ("spark.sql.adaptive.enabled".into(), "true".into()),
        ("spark.sql.shuffle.partitions".into(), "16".into()),
        ("spark.network.timeout".into(), "120s".into()),
        ("spark.executor.heartbeatInterval".into(), "10s".into()),
    ];
    if mode != SPARK {
        conf.extend([
            ("spark.shuffle.manager".into(), "io.coflow.spark.CoflowShuffleManager".into()),
            ("spark.shuffle.sort.io.plugin.class".into(), "io.coflow.spark.CoflowShuffleDataIO".into()),
            ("spark.coflow.coordinator".into(), format!("{master_ip}:7070")),
            ("spark.coflow.agent".into(), "127.0.0.1:7071".into()),
            ("spark.coflow.dataDir".into(), "${env:COFLOW_DATA_DIR}".into()),
            ("spark.coflow.tokenFile".into(), run_dir.join("token").display().to_string()),
        ]);
    }
    let mut args = java_args(
        &opts.dist,
        &names.prefix,
        "1g",
        "io.coflow.spark.TestbedMix",
        &[&opts.dist.plugin_jar, &opts.dist.driver_jar],
    );
    args.extend([
        "--master".into(),
        master,
        "--plan".into(),
        plan_path.display().to_string(),
        "--out".into(),
        out_path.display().to_string(),
        "--work".into(),
        work.display().to_string(),
    ]);
    for (k, v) in conf {
        args.push("--conf".into());
        args.push(format!("{k}={v}"));
    }
    progress(&format!("{mode}: {hosts} workers up, running {} trace jobs and the named jobs", jobs.len()));
    let driver_log = run_dir.join("spark-driver.log");
    procs.spawn(&tb.state, &names.switch_ns(), &args, &base_env(master_ip, None), &driver_log)?;
    let driver = procs.children.len() - 1;
    let until = Instant::now() + opts.timeout;
    let mut samples = Vec::new();
    let status = loop {
        if crate::state::interrupted() {
            return Err(TestbedError::Interrupted);
        }
        if let Some(s) = procs.children[driver].try_wait().map_err(|e| TestbedError::io(&driver_log, e))? {
            break s;
        }
        if Instant::now() > until {
            return Err(TestbedError::Setup(format!(
                "{mode}: the Spark application did not end within {:?}; see {}",
                opts.timeout,
                driver_log.display()
            )));
        }
        if let Ok(links) = net::link_bytes(&names, hosts) {
            samples.push(Sample {
                at: SystemTime::now(),
                links,
                machine: machine_jiffies(),
                testbed: testbed_jiffies(&names.prefix),
            });
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if !status.success() {
        return Err(TestbedError::Setup(format!(
            "{mode}: the Spark driver failed ({status}); see {}",
            driver_log.display()
        )));
    }
    let text = std::fs::read_to_string(&out_path).map_err(|e| TestbedError::io(&out_path, e))?;
    let out: Value = serde_json::from_str(&text)
        .map_err(|e| TestbedError::Setup(format!("{}: not the driver's JSON: {e}", out_path.display())))?;
    drop(procs);
    drop(tb);
    let mix_s = out["mix_s"].as_f64().unwrap_or(0.0);
    let start = UNIX_EPOCH + Duration::from_millis(out["mix_start_ms"].as_u64().unwrap_or(0));
    let bins: HashMap<&str, Bin> = jobs.iter().map(|j| (j.name.as_str(), j.bin)).collect();
    let mut results = Vec::new();
    for j in out["jobs"].as_array().into_iter().flatten() {
        let name = j["name"].as_str().unwrap_or("?").to_string();
        results.push(JobResult {
            bin: bins.get(name.as_str()).map(|b| b.name().to_string()),
            name,
            mode: mode.to_string(),
            kind: j["kind"].as_str().unwrap_or("?").to_string(),
            arrival_s: j["arrival_s"].as_f64().unwrap_or(0.0),
            jct_s: j["jct_s"].as_f64().unwrap_or(0.0),
            shuffle_bytes: j["shuffle_bytes"].as_u64().unwrap_or(0),
            remote_bytes: j["remote_bytes"].as_u64().unwrap_or(0),
            comm_stage_s: j["comm_stage_s"].as_f64().unwrap_or(0.0),
            shuffle_read_s: j["shuffle_read_s"].as_f64().unwrap_or(0.0),
            failed_tasks: j["failed_tasks"].as_u64().unwrap_or(0),
            identical: None,
            error: j["error"].as_str().map(str::to_string),
            digest: j["digest"].as_str().map(str::to_string),
        });
    }
    let window: Vec<&Sample> =
        samples.iter().filter(|s| s.at >= start && s.at <= start + Duration::from_secs_f64(mix_s)).collect();
    let (mut util, mut busiest, mut testbed_cpu, mut machine_cpu) = (0.0, 0.0, 0.0, 0.0);
    if let (Some(a), Some(b)) = (window.first(), window.last()) {
        let secs = b.at.duration_since(a.at).unwrap_or_default().as_secs_f64();
        if secs > 0.0 {
            let cap: Vec<f64> =
                opts.topology.hosts.iter().map(|h| h.uplink.bytes_per_sec() + h.downlink.bytes_per_sec()).collect();
            let used: Vec<f64> = a.links.iter().zip(&b.links).map(|(p, q)| (q.0 - p.0 + q.1 - p.1) as f64).collect();
            util = used.iter().sum::<f64>() / (secs * cap.iter().sum::<f64>());
            busiest = used.iter().zip(&cap).map(|(u, c)| u / (secs * c)).fold(0.0, f64::max);
            let total = (b.machine.1 - a.machine.1) as f64;
            if total > 0.0 {
                machine_cpu = (b.machine.0 - a.machine.0) as f64 / total;
                testbed_cpu = (b.testbed.saturating_sub(a.testbed)) as f64 / total;
            }
        }
    }
    Ok(ModeRun {
        jobs: results,
        mix_s,
        link_utilization: util,
        busiest_link_utilization: busiest,
        testbed_cpu,
        machine_cpu,
    })
}

/// Megabytes of a size as Spark spells it (`768m`, `1g`, `512k`, bytes without a suffix).
pub fn spark_size_mb(s: &str) -> Result<u64, TestbedError> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = match t.trim_end_matches('b').char_indices().last() {
        Some((i, 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'm')) => (&t[..i], 1 << 20),
        Some((i, 'g')) => (&t[..i], 1 << 30),
        Some((i, 't')) => (&t[..i], 1 << 40),
        _ => (t.as_str(), 1),
    };
    let n: u64 =
        num.parse().map_err(|_| TestbedError::Setup(format!("executor memory {s:?}: not a size such as 768m")))?;
    let mb = n.saturating_mul(mult) >> 20;
    if mb < 256 {
        return Err(TestbedError::Setup(format!("executor memory {s:?}: at least 256m")));
    }
    Ok(mb)
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { s / n as f64 }
}

/// The communication-share bin (Varys Table 3) of a job whose communication stage took `comm`
/// of its `jct`.
pub fn comm_bin(comm: f64, jct: f64) -> &'static str {
    let share = if jct > 0.0 { comm / jct } else { 0.0 };
    match share {
        s if s < 0.25 => "comm <25%",
        s if s < 0.50 => "comm 25-49%",
        s if s < 0.75 => "comm 50-74%",
        _ => "comm >=75%",
    }
}

/// Runs every mode; `progress` hears one line per step.
pub fn run(opts: &SparkOptions, progress: &mut dyn FnMut(&str)) -> Result<SparkReport, TestbedError> {
    let started = Instant::now();
    for m in &opts.modes {
        if m != SPARK && m != TCP {
            coflow_sched::policy::by_name(m).map_err(|e| TestbedError::Setup(format!("mode {m:?}: {e}")))?;
        }
    }
    let jobs = trace_jobs(&opts.workload, opts.compression)?;
    let mut all: Vec<JobResult> = Vec::new();
    let mut modes = Vec::new();
    for mode in &opts.modes {
        let t = Instant::now();
        let r = mode_run(opts, mode, &jobs, progress)?;
        let trace: Vec<&JobResult> = r.jobs.iter().filter(|j| j.kind == "trace").collect();
        let done: Vec<&&JobResult> = trace.iter().filter(|j| j.error.is_none()).collect();
        let mut jcts: Vec<f64> = done.iter().map(|j| j.jct_s).collect();
        jcts.sort_by(f64::total_cmp);
        modes.push(ModeResult {
            mode: mode.clone(),
            jobs: trace.len(),
            completed: done.len(),
            identical: None,
            avg_jct_s: mean(jcts.iter().copied()),
            p95_jct_s: percentile(&jcts, 95.0),
            avg_shuffle_read_s: mean(done.iter().map(|j| j.shuffle_read_s)),
            avg_comm_stage_s: mean(done.iter().map(|j| j.comm_stage_s)),
            named_avg_jct_s: mean(r.jobs.iter().filter(|j| j.kind == "named").map(|j| j.jct_s)),
            jct_factor_over_spark: None,
            comm_stage_factor_over_spark: None,
            shuffle_read_factor_over_spark: None,
            worst_job_slowdown: None,
            link_utilization: r.link_utilization,
            busiest_link_utilization: r.busiest_link_utilization,
            testbed_cpu: r.testbed_cpu,
            machine_cpu: r.machine_cpu,
            mix_s: r.mix_s,
            wall_s: t.elapsed().as_secs_f64(),
        });
        progress(&format!(
            "{mode}: {}/{} trace jobs, average JCT {:.2}s, mix {:.1}s",
            done.len(),
            trace.len(),
            modes.last().expect("pushed").avg_jct_s,
            r.mix_s
        ));
        all.extend(r.jobs);
    }
    compare(&mut modes, &mut all);
    let bins = bins(&modes, &all);
    Ok(SparkReport {
        hosts: opts.topology.hosts.len(),
        link_bps: opts.topology.uniform_rate().unwrap_or(opts.topology.hosts[0].uplink).bits_per_sec(),
        executor_cores: opts.executor_cores,
        executor_memory: opts.executor_memory.clone(),
        workload: opts.source.clone(),
        arrival_compression: opts.compression,
        trace_jobs: jobs.len(),
        trace_bytes: jobs.iter().flat_map(|j| j.bytes.iter().flatten()).sum(),
        modes,
        jobs: all,
        bins,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// Results against `spark`'s (identical, factors, worst slowdown), when `spark` ran.
fn compare(modes: &mut [ModeResult], jobs: &mut [JobResult]) {
    let base: HashMap<String, JobResult> =
        jobs.iter().filter(|j| j.mode == SPARK).map(|j| (j.name.clone(), j.clone())).collect();
    if base.is_empty() {
        return;
    }
    for j in jobs.iter_mut() {
        j.identical =
            Some(j.error.is_none() && j.digest.is_some() && base.get(&j.name).is_some_and(|b| b.digest == j.digest));
    }
    let Some(s) = modes.iter().find(|m| m.mode == SPARK).cloned() else { return };
    let ratio = |a: f64, b: f64| if b > 0.0 { Some(a / b) } else { None };
    for m in modes.iter_mut() {
        let mine: Vec<&JobResult> = jobs.iter().filter(|j| j.mode == m.mode).collect();
        m.identical = Some(!mine.is_empty() && mine.iter().all(|j| j.identical == Some(true)));
        m.jct_factor_over_spark = ratio(s.avg_jct_s, m.avg_jct_s);
        m.comm_stage_factor_over_spark = ratio(s.avg_comm_stage_s, m.avg_comm_stage_s);
        m.shuffle_read_factor_over_spark = ratio(s.avg_shuffle_read_s, m.avg_shuffle_read_s);
        m.worst_job_slowdown = mine
            .iter()
            .filter(|j| j.kind == "trace" && j.error.is_none())
            .filter_map(|j| ratio(j.jct_s, base.get(&j.name)?.jct_s))
            .reduce(f64::max);
    }
}

/// Per bin and mode: the trace jobs by communication share on `spark` and by coflow bin.
fn bins(modes: &[ModeResult], jobs: &[JobResult]) -> Vec<BinResult> {
    let share: HashMap<&str, &'static str> = jobs
        .iter()
        .filter(|j| j.mode == SPARK && j.kind == "trace")
        .map(|j| (j.name.as_str(), comm_bin(j.comm_stage_s, j.jct_s)))
        .collect();
    let mut groups: BTreeMap<(usize, String), Vec<&JobResult>> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.kind == "trace" && j.error.is_none()) {
        if let Some(b) = share.get(j.name.as_str()) {
            groups.entry((0, b.to_string())).or_default().push(j);
        }
        if let Some(b) = &j.bin {
            groups.entry((1, b.clone())).or_default().push(j);
        }
    }
    let mut out = Vec::new();
    for ((_, bin), js) in &groups {
        let avg = |mode: &str, f: fn(&JobResult) -> f64| {
            let v: Vec<f64> = js.iter().filter(|j| j.mode == mode).map(|j| f(j)).collect();
            (v.len(), mean(v.into_iter()))
        };
        for m in modes {
            let (n, jct) = avg(&m.mode, |j| j.jct_s);
            if n == 0 {
                continue;
            }
            let (_, comm) = avg(&m.mode, |j| j.comm_stage_s);
            let (sn, sjct) = avg(SPARK, |j| j.jct_s);
            let (_, scomm) = avg(SPARK, |j| j.comm_stage_s);
            let f = |a: f64, b: f64| (sn > 0 && b > 0.0).then(|| a / b);
            out.push(BinResult {
                bin: bin.clone(),
                mode: m.mode.clone(),
                jobs: n,
                avg_jct_s: jct,
                avg_comm_stage_s: comm,
                jct_factor_over_spark: f(sjct, jct),
                comm_stage_factor_over_spark: f(scomm, comm),
            });
        }
    }
    out
}

fn factor(f: Option<f64>) -> String {
    f.map_or("-".into(), |f| format!("{f:.2}x"))
}

impl SparkReport {
    /// The report as tables.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<7} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>6}\n",
            "mode",
            "completed",
            "identical",
            "avg JCT",
            "p95 JCT",
            "shuf read",
            "comm stage",
            "JCT x",
            "comm x",
            "worst",
            "links",
            "busiest",
            "cpu tb",
            "cpu"
        );
        for m in &self.modes {
            s.push_str(&format!(
                "{:<7} {:>9} {:>9} {:>7.2}s {:>7.2}s {:>9.2}s {:>9.2}s {:>8} {:>8} {:>8} {:>5.0}% {:>6.0}% {:>5.0}% {:>5.0}%\n",
                m.mode,
                format!("{}/{}", m.completed, m.jobs),
                m.identical.map_or("-", |i| if i { "yes" } else { "NO" }),
                m.avg_jct_s,
                m.p95_jct_s,
                m.avg_shuffle_read_s,
                m.avg_comm_stage_s,
                factor(m.jct_factor_over_spark),
                factor(m.comm_stage_factor_over_spark),
                factor(m.worst_job_slowdown),
                m.link_utilization * 100.0,
                m.busiest_link_utilization * 100.0,
                m.testbed_cpu * 100.0,
                m.machine_cpu * 100.0
            ));
        }
        s.push_str("\nby bin (trace jobs): average JCT and communication stage, factor over spark\n");
        s.push_str(&format!(
            "  {:<12} {:<7} {:>5} {:>9} {:>10} {:>7} {:>7}\n",
            "bin", "mode", "jobs", "avg JCT", "comm stage", "JCT x", "comm x"
        ));
        for b in &self.bins {
            s.push_str(&format!(
                "  {:<12} {:<7} {:>5} {:>8.2}s {:>9.2}s {:>7} {:>7}\n",
                b.bin,
                b.mode,
                b.jobs,
                b.avg_jct_s,
                b.avg_comm_stage_s,
                factor(b.jct_factor_over_spark),
                factor(b.comm_stage_factor_over_spark)
            ));
        }
        s.push_str("\nnamed jobs: JCT per mode\n");
        for j in self.jobs.iter().filter(|j| j.kind == "named") {
            s.push_str(&format!(
                "  {:<22} {:<7} {:>7.2}s  shuffle {:>11} B  identical {}{}\n",
                j.name,
                j.mode,
                j.jct_s,
                j.shuffle_bytes,
                j.identical.map_or("-", |i| if i { "yes" } else { "NO" }),
                j.error.as_ref().map_or(String::new(), |e| format!("  error: {e}"))
            ));
        }
        for j in self.jobs.iter().filter(|j| j.kind == "trace" && (j.error.is_some() || j.identical == Some(false))) {
            s.push_str(&format!(
                "  {} on {}: {}\n",
                j.name,
                j.mode,
                j.error.as_deref().unwrap_or("result differs from spark's")
            ));
        }
        s.push_str(&format!("wall time {:.1}s\n", self.wall_s));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coflow_core::{Bytes, Coflow, CoflowId, Flow, MachineId, Nanos};

    fn flow(s: u32, d: u32, n: u64) -> Flow {
        Flow { src: MachineId(s), dst: MachineId(d), size: Bytes(n) }
    }

    #[test]
    fn a_coflow_becomes_a_job_with_its_mappers_reducers_and_bytes() {
        let c = Coflow::new(
            CoflowId(7),
            Nanos::from_secs_f64(4.0),
            vec![flow(2, 0, 10), flow(2, 3, 5), flow(1, 3, 7), flow(2, 0, 1)],
        );
        let first = Coflow::new(CoflowId(1), Nanos::from_secs_f64(1.0), vec![flow(0, 1, 3)]);
        let w = Workload { machines: 4, coflows: vec![first, c] };
        let jobs = trace_jobs(&w, 2.0).unwrap();
        assert_eq!(jobs.len(), 2);
        let j = &jobs[1];
        assert_eq!(j.name, "coflow-7");
        assert!((j.arrival_s - 1.5).abs() < 1e-9, "(4 - 1) / 2");
        assert_eq!(j.mappers, vec![1, 2]);
        assert_eq!(j.reducers, 2);
        assert_eq!(j.bytes, vec![vec![0, 7], vec![11, 5]]);
        assert!(trace_jobs(&w, 0.5).is_err());
        let err = trace_jobs(&w, 1e-300).unwrap_err().to_string();
        assert!(err.ends_with("at least 1, got 1e-300"), "{err}");
    }

    #[test]
    fn sizes_read_as_spark_spells_them() {
        assert_eq!(spark_size_mb("768m").unwrap(), 768);
        assert_eq!(spark_size_mb("1g").unwrap(), 1024);
        assert_eq!(spark_size_mb("2GB").unwrap(), 2048);
        assert!(spark_size_mb("100m").is_err());
        assert!(spark_size_mb("lots").is_err());
    }

    #[test]
    fn jobs_are_binned_by_communication_share() {
        assert_eq!(comm_bin(1.0, 10.0), "comm <25%");
        assert_eq!(comm_bin(3.0, 10.0), "comm 25-49%");
        assert_eq!(comm_bin(5.0, 10.0), "comm 50-74%");
        assert_eq!(comm_bin(9.0, 10.0), "comm >=75%");
    }

    fn job(name: &str, mode: &str, jct: f64, digest: &str) -> JobResult {
        JobResult {
            name: name.into(),
            mode: mode.into(),
            kind: "trace".into(),
            bin: Some("SN".into()),
            arrival_s: 0.0,
            jct_s: jct,
            shuffle_bytes: 1,
            remote_bytes: 1,
            comm_stage_s: jct / 2.0,
            shuffle_read_s: 0.1,
            failed_tasks: 0,
            identical: None,
            error: None,
            digest: Some(digest.into()),
        }
    }

    #[test]
    fn results_and_factors_are_against_spark() {
        let mut jobs = vec![
            job("a", SPARK, 4.0, "x"),
            job("b", SPARK, 2.0, "y"),
            job("a", "varys", 2.0, "x"),
            job("b", "varys", 3.0, "z"),
        ];
        let m = |mode: &str, avg: f64| ModeResult {
            mode: mode.into(),
            jobs: 2,
            completed: 2,
            identical: None,
            avg_jct_s: avg,
            p95_jct_s: avg,
            avg_shuffle_read_s: 0.1,
            avg_comm_stage_s: avg / 2.0,
            named_avg_jct_s: 0.0,
            jct_factor_over_spark: None,
            comm_stage_factor_over_spark: None,
            shuffle_read_factor_over_spark: None,
            worst_job_slowdown: None,
            link_utilization: 0.0,
            busiest_link_utilization: 0.0,
            testbed_cpu: 0.0,
            machine_cpu: 0.0,
            mix_s: 0.0,
            wall_s: 0.0,
        };
        let mut modes = vec![m(SPARK, 3.0), m("varys", 2.5)];
        compare(&mut modes, &mut jobs);
        assert_eq!(jobs[2].identical, Some(true));
        assert_eq!(jobs[3].identical, Some(false), "a different digest is not identical");
        assert_eq!(modes[1].identical, Some(false));
        assert!((modes[1].jct_factor_over_spark.unwrap() - 1.2).abs() < 1e-9);
        assert!((modes[1].worst_job_slowdown.unwrap() - 1.5).abs() < 1e-9, "b took 3 s against 2 s");
        let b = bins(&modes, &jobs);
        assert!(b.iter().any(|b| b.bin == "comm 50-74%" && b.mode == "varys" && b.jobs == 2));
    }
}
