//! `coflow status`: what the coordinator shows of the cluster, in human units (rates in bits per
//! second, sizes in binary units), as JSON (`--json [FILE]`, raw numbers: bytes and bytes per second),
//! or refreshed every few seconds (`--watch`).

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use coflow_client::{Client, ClientConfig, ClientError, TlsFiles};
use coflow_core::{Bytes, Rate};
use coflow_proto::pb;

use super::{TlsArgs, TokenArgs, runtime};

/// Options of `coflow status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The coordinator's URL (default http://127.0.0.1:7070, https:// with TLS).
    #[arg(long, env = "COFLOW_COORDINATOR")]
    coordinator: Option<String>,
    /// Write JSON (bytes and bytes per second as numbers) instead of a table: to this file
    /// (rewritten whole at each refresh), or to standard output without one or with `-`.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-", env = "COFLOW_JSON")]
    json: Option<std::path::PathBuf>,
    /// Print again every SECONDS seconds until interrupted (default 2); a coordinator out of reach
    /// is said so once and asked again at each refresh.
    #[arg(
        long,
        value_name = "SECONDS",
        num_args = 0..=1,
        default_missing_value = "2",
        env = "COFLOW_WATCH",
        value_parser = crate::units::seconds
    )]
    watch: Option<f64>,
    /// How long an ask may wait for the coordinator's answer before it fails `timed-out` (a
    /// coordinator that accepts and never answers, stopped or wedged), 0.1 to 3600 seconds.
    #[arg(long, value_name = "SECONDS", default_value = "10", env = "COFLOW_TIMEOUT", value_parser = crate::units::seconds)]
    timeout: f64,
    #[command(flatten)]
    token: TokenArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

pub(crate) fn run(a: StatusArgs) -> Result<()> {
    if let Some(s) = a.watch
        && !(0.1..=3600.0).contains(&s)
    {
        anyhow::bail!("--watch must be 0.1 to 3600 seconds, not {s}");
    }
    if !(0.1..=3600.0).contains(&a.timeout) {
        anyhow::bail!("--timeout must be 0.1 to 3600 seconds, not {}", coflow_core::shown(a.timeout));
    }
    // The files it reads, which its output must not write over.
    let inputs = [
        ("--token-file", a.token.file()),
        ("--tls-ca", a.tls.tls_ca.as_deref()),
        ("--tls-cert", a.tls.tls_cert.as_deref()),
        ("--tls-key", a.tls.tls_key.as_deref()),
    ];
    crate::output::prepare(&[("--json", a.json.as_deref())], &inputs)?;
    let files = TlsFiles::from_parts("--tls-", a.tls.tls_ca, a.tls.tls_cert, a.tls.tls_key)?;
    let scheme = if files.is_some() { "https" } else { "http" };
    let url = a.coordinator.unwrap_or_else(|| format!("{scheme}://127.0.0.1:7070"));
    let mut cfg = match files {
        Some(f) => {
            a.token.warn_unread();
            ClientConfig::tls(url.clone(), url.clone(), f)
        }
        None => ClientConfig::new(url.clone(), url.clone(), a.token.token()?),
    };
    cfg.timeout = Duration::from_secs_f64(a.timeout);
    let clear = a.watch.is_some() && a.json.is_none() && std::io::IsTerminal::is_terminal(&std::io::stdout());
    runtime()?.block_on(async move {
        let c = Client::connect(cfg).await.with_context(|| format!("connecting to the coordinator at {url}"))?;
        // Watching, Ctrl-C ends the watch at once, also while a call waits for its answer; a
        // single call keeps the default (the process ends).
        let interrupted = async {
            if a.watch.is_some() {
                let _ = tokio::signal::ctrl_c().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let mut interrupted = std::pin::pin!(interrupted);
        // Watching, the error of the last failed ask, said once for as long as it lasts.
        let mut failing: Option<String> = None;
        loop {
            let asked = tokio::select! {
                st = c.status() => st,
                () = &mut interrupted => return Ok(()),
            };
            match (asked, a.watch) {
                (Ok(st), _) => {
                    failing = None;
                    if !show(&st, a.json.as_deref(), clear, a.watch.is_some())? {
                        // The reader went away (`| head`): nothing more to show it.
                        return Ok(());
                    }
                }
                // A coordinator restarting or out of reach for a while does not end a watch: it
                // is asked again at the next refresh. Anything else (a refused identity, say)
                // will not heal by asking again.
                (Err(e @ (ClientError::CoordinatorUnreachable(_) | ClientError::TimedOut(_))), Some(every)) => {
                    let said = e.to_string();
                    if failing.as_deref() != Some(said.as_str()) {
                        tracing::warn!("asking the coordinator: {said}; asking again every {every} s");
                        failing = Some(said);
                    }
                }
                (Err(e), _) => return Err(e).context("asking the coordinator"),
            }
            let Some(every) = a.watch else { return Ok(()) };
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs_f64(every)) => {}
                () = &mut interrupted => return Ok(()),
            }
        }
    })
}

/// Shows one answer: as JSON to the file `json` names (rewritten whole) or to standard output,
/// else as the table (the screen cleared first if `clear`, a blank line after it if `watching`).
/// False if standard output's reader went away.
fn show(st: &pb::StatusResponse, json_to: Option<&std::path::Path>, clear: bool, watching: bool) -> Result<bool> {
    let text = match json_to {
        Some(path) if !crate::output::is_stdout(path) => {
            crate::output::write(path, format!("{}\n", serde_json::to_string(&json(st))?))?;
            return Ok(true);
        }
        Some(_) => format!("{}\n", serde_json::to_string(&json(st))?),
        // Home the cursor and clear the screen, so the table redraws in place.
        None => {
            format!("{}{}{}", if clear { "\x1b[H\x1b[2J" } else { "" }, render(st), if watching { "\n" } else { "" })
        }
    };
    crate::output::shown(text.as_bytes()).context("writing standard output")
}

/// The most bits per second shown in units (1,000 Tbit/s); above, and below 1 bit/s, a rate is
/// shown in scientific notation, so that no value, however tiny or huge, takes more than a few
/// characters.
const MAX_UNIT_BITS: f64 = 1e15;

/// A rate in bytes per second as the table shows it, in bits per second: `0` for nothing (or a
/// value that is not a number), `not paced` for an infinite rate (what an agent is told of a
/// flow served outside the policy; the table takes whatever the answer holds, without a panic),
/// from 1 bit/s to 1,000 Tbit/s in the largest unit it reaches (`100 Mbit/s`), and
/// beyond in scientific notation (`8.00e-300 bit/s`, `8.00e288 Tbit/s`).
fn rate(bps: f64) -> String {
    if bps.is_nan() || bps <= 0.0 {
        return "0".into();
    }
    if bps.is_infinite() {
        return "not paced".into();
    }
    // Divided before multiplied, so that the largest finite rates stay finite.
    let tbits = bps * (8.0 / 1e12);
    let bits = bps * 8.0;
    if tbits >= MAX_UNIT_BITS / 1e12 {
        format!("{tbits:.2e} Tbit/s")
    } else if bits < 1.0 {
        format!("{bits:.2e} bit/s")
    } else if bits < 1e3 {
        // `Rate` prints every digit below 1 Kbit/s.
        if (bits - bits.round()).abs() < 1e-9 { format!("{} bit/s", bits.round()) } else { format!("{bits:.3} bit/s") }
    } else {
        Rate::from_bytes_per_sec(bps).to_string()
    }
}

/// `text` safe to print on a terminal: control characters (an escape sequence in a coflow's
/// name, say) and the invisible characters that reorder or hide text (bidirectional overrides
/// and isolates, zero-width characters) are shown escaped, as Rust writes them, instead of
/// acting on the terminal or on what the operator reads.
fn printable(text: &str) -> String {
    if !text.chars().any(hidden) {
        return text.to_string();
    }
    text.chars().map(|c| if hidden(c) { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Whether `c` acts rather than shows: a control character, a line or paragraph separator, or
/// a character that changes the order of the text around it or shows as nothing (format
/// characters, tags, blank fillers).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{34f}'
                | '\u{61c}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{3164}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// The table: agents, then coflows with their flows.
pub(crate) fn render(st: &pb::StatusResponse) -> String {
    let mut s = format!("policy {}\n\nagents: {}\n", printable(&st.policy), st.agents.len());
    for a in &st.agents {
        // A port measured to carry less than its agent registered (on a big switch) says so.
        let measured = if a.uplink_bps < a.port_rate_bps || a.downlink_bps < a.port_rate_bps {
            format!("  port {} measured up {} down {}", rate(a.port_rate_bps), rate(a.uplink_bps), rate(a.downlink_bps))
        } else {
            String::new()
        };
        let dc = if a.datacenter.is_empty() { String::new() } else { format!("  dc {}", printable(&a.datacenter)) };
        s.push_str(&format!(
            "  machine {:>3}  {:<21} {:<5}  tx {:>14}  rx {:>14}{measured}{dc}\n",
            a.machine_id,
            printable(&a.data_addr),
            match (a.alive, a.departed) {
                (true, _) => "alive",
                (false, true) => "left",
                (false, false) => "dead",
            },
            rate(a.tx_bps),
            rate(a.rx_bps)
        ));
    }
    if !st.links.is_empty() {
        s.push_str(&format!(
            "\nwide-area links: {} (bytes relayed {}, flows rerouted {})\n",
            st.links.len(),
            Bytes(st.bytes_relayed),
            st.flows_rerouted
        ));
        for l in &st.links {
            s.push_str(&format!(
                "  {:<32} {:>14}  {:>2} samples{}\n",
                printable(&l.name),
                rate(l.estimate_bps),
                l.samples,
                if l.down { "  down" } else { "" }
            ));
        }
    }
    s.push_str(&format!("\ncoflows: {}\n", st.coflows.len()));
    for c in &st.coflows {
        let (size, sent): (u64, u64) = c.flows.iter().fold((0, 0), |(a, b), f| (a + f.size, b + f.bytes_sent));
        let now = c.flows.iter().fold(0.0, |sum, f| sum + f.rate_bps);
        let lease =
            if c.lease_left_ms > 0 { format!("  lease {:.1} s", c.lease_left_ms as f64 / 1e3) } else { String::new() };
        // A coflow of its own job (or from a coordinator that does not say) names none.
        let job = if c.job != 0 && c.job != c.coflow_id { format!("  job {}", c.job) } else { String::new() };
        let deadline = match (c.deadline_ms, c.admission_name()) {
            (0, _) => String::new(),
            (d, None) => format!("  deadline {:.1} s", d as f64 / 1e3),
            (d, Some(a)) => format!("  deadline {:.1} s {a}", d as f64 / 1e3),
        };
        s.push_str(&format!(
            "  coflow {:>6} {:<20} puts {}/{}{}  flows {}  {} of {}  at {}{}{}{}\n",
            c.coflow_id,
            printable(&c.name),
            c.puts,
            c.num_flows,
            if c.bypass { " bypass" } else { "" },
            c.flows.len(),
            Bytes(sent),
            Bytes(size),
            rate(now),
            deadline,
            lease,
            job
        ));
        for f in &c.flows {
            let via = f.via_machine_id.map_or(String::new(), |r| format!("  via {r}"));
            let held = if f.reader_limited { "  reader-limited" } else { "" };
            s.push_str(&format!(
                "    flow {:>8} {:<24} {:>3} -> {:<3} {:>11} of {:<11} {:>14}{via}{held}\n",
                f.flow_id,
                printable(&f.data_id),
                f.src_machine_id,
                f.dst_machine_id,
                Bytes(f.bytes_sent).to_string(),
                Bytes(f.size).to_string(),
                rate(f.rate_bps)
            ));
        }
    }
    s
}

/// The same as JSON, numbers raw (bytes, bytes per second).
pub(crate) fn json(st: &pb::StatusResponse) -> serde_json::Value {
    serde_json::json!({
        "policy": st.policy,
        "agents": st.agents.iter().map(|a| serde_json::json!({
            "machine": a.machine_id,
            "data_addr": a.data_addr,
            "alive": a.alive,
            "departed": a.departed,
            "tx_bytes_per_second": a.tx_bps,
            "rx_bytes_per_second": a.rx_bps,
            "port_rate_bytes_per_second": a.port_rate_bps,
            "uplink_bytes_per_second": a.uplink_bps,
            "downlink_bytes_per_second": a.downlink_bps,
            "datacenter": (!a.datacenter.is_empty()).then_some(&a.datacenter),
        })).collect::<Vec<_>>(),
        "links": st.links.iter().map(|l| serde_json::json!({
            "name": l.name,
            "estimate_bytes_per_second": l.estimate_bps,
            "samples": l.samples,
            "down": l.down,
        })).collect::<Vec<_>>(),
        "bytes_relayed": st.bytes_relayed,
        "flows_rerouted": st.flows_rerouted,
        "decisions": st.decisions,
        "coflows": st.coflows.iter().map(|c| serde_json::json!({
            "id": c.coflow_id,
            "name": c.name,
            "num_flows": c.num_flows,
            "puts": c.puts,
            "bypass": c.bypass,
            "lease_left_ms": (c.lease_left_ms > 0).then_some(c.lease_left_ms),
            "deadline_ms": (c.deadline_ms > 0).then_some(c.deadline_ms),
            "admission": c.admission_name(),
            // Zero: a coordinator that does not say.
            "job": (c.job != 0).then_some(c.job),
            "flows": c.flows.iter().map(|f| serde_json::json!({
                "id": f.flow_id,
                "data_id": f.data_id,
                "src": f.src_machine_id,
                "dst": f.dst_machine_id,
                "size_bytes": f.size,
                "sent_bytes": f.bytes_sent,
                "rate_bytes_per_second": f.rate_bps,
                "via": f.via_machine_id,
                "reader_limited": f.reader_limited,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> pb::StatusResponse {
        pb::StatusResponse {
            policy: "varys".into(),
            agents: vec![pb::AgentStatus {
                machine_id: 1,
                data_addr: "10.0.0.1:7072".into(),
                alive: true,
                departed: false,
                tx_bps: 12_500_000.0,
                rx_bps: 0.0,
                port_rate_bps: 125_000_000.0,
                uplink_bps: 125_000_000.0,
                downlink_bps: 125_000_000.0,
                datacenter: String::new(),
            }],
            coflows: vec![pb::CoflowStatus {
                coflow_id: 7,
                name: "stage-3".into(),
                num_flows: 2,
                puts: 2,
                bypass: false,
                lease_left_ms: 0,
                job: 7,
                deadline_ms: 0,
                admission: 0,
                flows: vec![pb::FlowStatus {
                    flow_id: 9,
                    data_id: "m0-r1".into(),
                    src_machine_id: 1,
                    dst_machine_id: 2,
                    size: 3 << 20,
                    bytes_sent: 1 << 20,
                    rate_bps: 125_000_000.0,
                    via_machine_id: None,
                    reader_limited: false,
                }],
            }],
            ..Default::default()
        }
    }

    /// A name carrying a terminal escape sequence prints escaped, never raw; so does an agent's
    /// address, a string on the wire like the names (a coordinator's, or whoever sits between it
    /// and the table without TLS).
    #[test]
    fn names_cannot_drive_the_terminal() {
        let mut st = example();
        st.coflows[0].name = "evil\u{1b}[2J\u{7}".into();
        st.coflows[0].flows[0].data_id = "x\ry".into();
        st.agents[0].data_addr = "10.0.0.1:7072\u{1b}]0;owned\u{7}".into();
        let t = render(&st);
        assert!(!t.contains('\u{1b}') && !t.contains('\u{7}') && !t.contains('\r'), "{t:?}");
        assert!(t.contains("evil\\u{1b}[2J\\u{7}"), "{t}");
        assert!(t.contains("x\\ry"), "{t}");
        assert!(t.contains("10.0.0.1:7072\\u{1b}]0;owned\\u{7}"), "{t}");
    }

    /// A name that would reorder or hide what the operator reads (a right-to-left override, a
    /// zero-width space, an isolate) prints those characters escaped; other scripts print as
    /// they are.
    #[test]
    fn names_cannot_reorder_what_the_operator_reads() {
        let mut st = example();
        st.coflows[0].name = "job\u{202e}txt.exe\u{200b}\u{2066}\u{e0041}\u{2028}é日本".into();
        let t = render(&st);
        for c in ['\u{202e}', '\u{200b}', '\u{2066}', '\u{e0041}', '\u{2028}'] {
            assert!(!t.contains(c), "{c:?} printed raw: {t:?}");
        }
        assert!(t.contains("job\\u{202e}txt.exe\\u{200b}\\u{2066}\\u{e0041}\\u{2028}é日本"), "{t}");
    }

    #[test]
    fn the_table_is_in_human_units() {
        let t = render(&example());
        // 12,500,000 B/s is 100 Mbit/s; 125,000,000 B/s is 1 Gbit/s; 1 of 3 MiB sent.
        assert!(t.contains("alive  tx     100 Mbit/s"), "{t}");
        // An agent not alive left at a clean stop, or was lost.
        let mut gone = example();
        gone.agents[0].alive = false;
        assert!(render(&gone).contains("dead   tx"), "{}", render(&gone));
        gone.agents[0].departed = true;
        assert!(render(&gone).contains("left   tx"), "{}", render(&gone));
        assert_eq!(json(&gone)["agents"][0]["departed"], true);
        assert!(t.contains("1.00 MiB of 3.00 MiB"), "{t}");
        assert!(t.contains("at 1 Gbit/s\n"), "no lease, none shown: {t}");
        assert!(t.contains("rx              0"), "{t}");
        let mut leased = example();
        leased.coflows[0].lease_left_ms = 41_300;
        let t = render(&leased);
        assert!(t.contains("at 1 Gbit/s  lease 41.3 s\n"), "{t}");
        assert_eq!(json(&leased)["coflows"][0]["lease_left_ms"], 41_300);
        assert!(json(&example())["coflows"][0]["lease_left_ms"].is_null());
        // A coflow that joined another's job names it; one of its own job names none.
        let mut child = example();
        child.coflows[0].job = 5;
        assert!(render(&child).contains("at 1 Gbit/s  job 5\n"), "{}", render(&child));
        assert_eq!(json(&child)["coflows"][0]["job"], 5);
        // On a wide area: an agent's datacenter, a part's relay, and a flow its reader holds back.
        let mut wide = example();
        wide.agents[0].datacenter = "eu\u{1b}[2J".into();
        wide.coflows[0].flows[0].via_machine_id = Some(3);
        wide.coflows[0].flows[0].reader_limited = true;
        let t = render(&wide);
        assert!(t.contains("rx              0  dc eu\\u{1b}[2J\n"), "{t}");
        assert!(t.contains("1 Gbit/s  via 3  reader-limited\n"), "{t}");
        let j = json(&wide);
        assert_eq!(
            (&j["agents"][0]["datacenter"], &j["coflows"][0]["flows"][0]["via"]),
            (&"eu\u{1b}[2J".into(), &3.into())
        );
        assert_eq!(j["coflows"][0]["flows"][0]["reader_limited"], true);
        assert!(json(&example())["agents"][0]["datacenter"].is_null());
        assert!(json(&example())["coflows"][0]["flows"][0]["via"].is_null());
        // A deadline shows with what admission control made of it, when a policy has one.
        let mut due = example();
        due.coflows[0].deadline_ms = 2_500;
        assert!(render(&due).contains("at 1 Gbit/s  deadline 2.5 s\n"), "{}", render(&due));
        assert!(json(&due)["coflows"][0]["admission"].is_null());
        due.coflows[0].admission = pb::Admission::Rejected as i32;
        assert!(render(&due).contains("at 1 Gbit/s  deadline 2.5 s rejected\n"), "{}", render(&due));
        assert_eq!(json(&due)["coflows"][0]["deadline_ms"], 2_500);
        assert_eq!(json(&due)["coflows"][0]["admission"], "rejected");
        assert!(json(&example())["coflows"][0]["deadline_ms"].is_null());
        // A coordinator that does not say (zero) names no job, in the table or in JSON.
        child.coflows[0].job = 0;
        assert!(render(&child).contains("at 1 Gbit/s\n"), "{}", render(&child));
        assert!(json(&child)["coflows"][0]["job"].is_null());
    }

    /// A port measured to carry less than its agent registered is shown as measured; a healthy
    /// one is not.
    #[test]
    fn a_port_measured_below_its_rate_is_shown() {
        let mut st = example();
        assert!(!render(&st).contains("measured"), "{}", render(&st));
        st.agents[0].uplink_bps = 62_500_000.0;
        let t = render(&st);
        assert!(t.contains("port 1 Gbit/s measured up 500 Mbit/s down 1 Gbit/s"), "{t}");
        assert_eq!(json(&st)["agents"][0]["uplink_bytes_per_second"], 62_500_000.0);
    }

    /// On a wide area the table lists each link as measured, and the bytes relayed.
    #[test]
    fn a_wide_areas_links_are_listed_as_measured() {
        let mut st = example();
        assert!(!render(&st).contains("wide-area links"), "no links on a big switch");
        st.links = vec![
            pb::LinkStatus { name: "a->b".into(), estimate_bps: 1_250_000.0, samples: 9, down: false },
            pb::LinkStatus { name: "b->a".into(), estimate_bps: 1_000.0, samples: 3, down: true },
        ];
        st.bytes_relayed = 3 << 20;
        let t = render(&st);
        assert!(t.contains("wide-area links: 2 (bytes relayed 3.00 MiB, flows rerouted 0)"), "{t}");
        assert!(t.contains("a->b") && t.contains("10 Mbit/s") && t.contains(" 9 samples\n"), "{t}");
        assert!(t.contains(" 3 samples  down"), "{t}");
        assert_eq!(json(&st)["links"][1]["down"], true);
    }

    /// A tiny or huge rate (a link prior of 1e-300 Gbit/s, an estimate gone astray) is shown in
    /// a few characters, in scientific notation, never as hundreds of digits; one in range in its
    /// unit.
    #[test]
    fn rates_stay_short_however_tiny_or_huge() {
        let cases = [
            (1e-300 * 125_000_000.0, "1.00e-291 bit/s"),
            (1e-300, "8.00e-300 bit/s"),
            (f64::MIN_POSITIVE, "1.78e-307 bit/s"),
            (0.1, "8.00e-1 bit/s"),
            (12.5, "100 bit/s"),
            (12.34, "98.720 bit/s"),
            (125.0, "1 Kbit/s"),
            (125_000_000.0, "1 Gbit/s"),
            (1e14, "800 Tbit/s"),
            (1.25e14, "1.00e3 Tbit/s"),
            (1e300, "8.00e288 Tbit/s"),
            (f64::MAX, "1.44e297 Tbit/s"),
            (f64::INFINITY, "not paced"),
            (0.0, "0"),
            (-1.0, "0"),
            (f64::NAN, "0"),
        ];
        for (bps, shown) in cases {
            assert_eq!(rate(bps), shown, "{bps:e} B/s");
        }
        let mut st = example();
        st.links = vec![pb::LinkStatus { name: "a->b".into(), estimate_bps: 1e-300, samples: 0, down: false }];
        st.coflows[0].flows[0].rate_bps = f64::INFINITY;
        let t = render(&st);
        assert!(t.lines().all(|l| l.len() < 120), "{t}");
        assert!(t.contains("8.00e-300 bit/s") && t.contains("not paced"), "{t}");
    }

    #[test]
    fn the_json_keeps_raw_numbers() {
        let j = json(&example());
        assert_eq!(j["coflows"][0]["flows"][0]["size_bytes"], 3u64 << 20);
        assert_eq!(j["coflows"][0]["flows"][0]["rate_bytes_per_second"], 125_000_000.0);
        assert_eq!(j["agents"][0]["tx_bytes_per_second"], 12_500_000.0);
        assert_eq!(j["policy"], "varys");
    }
}
