//! The text tables `coflow sim` prints: Varys's figures on the big switch, Siphon's on a wide
//! area, from the one [`Summary`] type.

use std::fmt::Write as _;

use coflow_sim::{LowerBounds, Summary, WideArea};

/// The table of a run's summaries, each with its wall time in seconds: Siphon's figures
/// against `mrtf` if they ran on a wide area, else Varys's against `baseline`, with the lower
/// bounds.
///
/// # Panics
/// On the big switch without `bounds`.
pub(crate) fn table(
    summaries: &[Summary],
    wall: &[f64],
    baseline: Option<&str>,
    bounds: Option<&LowerBounds>,
) -> String {
    if summaries.iter().any(|s| s.wide_area.is_some()) {
        return wide_area_table(summaries, wall);
    }
    let bounds = bounds.expect("big-switch runs have lower bounds");
    let mut t = String::new();
    let vs = format!("vs {}", baseline.unwrap_or("-"));
    let _ = writeln!(
        t,
        "{:<16} {:>11} {:>10} {:>10} {:>10} {:>10} {:>12} {:>9} {:>9} {:>8}",
        "policy", "completed", "avg CCT s", "p50 s", "p95 s", "p99 s", "makespan s", vs, "vs bound", "wall s"
    );
    for (s, w) in summaries.iter().zip(wall) {
        // A run in which no coflow finished has no completion time to show.
        let done = s.completed > 0;
        // Over the coflows it finished, against figures over all of them: marked.
        let mark = if s.completed < s.coflows { "*" } else { "" };
        let factor = s.factor_vs_baseline.map_or("-".to_string(), |f| format!("{f:.2}x{mark}"));
        let vs_bound =
            if done && s.bound_ratio.is_finite() { format!("{:.2}x{mark}", s.bound_ratio) } else { "-".to_string() };
        let _ = writeln!(
            t,
            "{:<16} {:>11} {:>10} {:>10} {:>10} {:>10} {:>12} {:>9} {:>9} {:>8.2}",
            s.policy,
            format!("{}/{}", s.completed, s.coflows),
            secs(s.avg_cct_s),
            secs(s.p50_cct_s),
            secs(s.p95_cct_s),
            secs(s.p99_cct_s),
            secs(s.makespan_s),
            factor,
            vs_bound,
            w
        );
    }
    if summaries.iter().any(|s| s.completed < s.coflows) {
        let _ = writeln!(
            t,
            "completed: coflows that finished, whose figures these are (one rejected by admission control, or \
             unfinished when its replay ended, is left out: {})",
            coflow_sim::replay_end()
        );
        let _ = writeln!(
            t,
            "*: the policy's figure is over the coflows it finished, the baseline's and the bounds' over all of them: \
             not a speed-up (and below 1x against the bound without contradiction)"
        );
    }
    t.push_str(&bounds_text(bounds));
    t.push_str(&jobs_text(summaries));
    t.push_str(&bin_table(summaries, baseline));
    t.push_str(&deadlines_text(summaries));
    t
}

/// Deadlines met, admitted and rejected per policy, when any coflow has a deadline: each share
/// is of the coflows with a deadline (met: of them all, rejected ones included).
fn deadlines_text(summaries: &[Summary]) -> String {
    let mut t = String::new();
    if !summaries.iter().any(|s| s.deadline_met_fraction.is_some()) {
        return t;
    }
    let pct = |f: Option<f64>| f.map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
    let _ = writeln!(
        t,
        "\n{:<16} {:>13} {:>10} {:>20} {:>9} {:>22}",
        "deadlines", "met", "admitted", "met among admitted", "rejected", "non-deadline avg CCT s"
    );
    for s in summaries {
        let _ = writeln!(
            t,
            "{:<16} {:>13} {:>10} {:>20} {:>9} {:>22}",
            s.policy,
            pct(s.deadline_met_fraction),
            pct(s.admitted_fraction),
            pct(s.met_among_admitted_fraction),
            s.rejected,
            s.non_deadline_avg_cct_s.map_or("-".to_string(), |a| format!("{a:.3}"))
        );
    }
    t
}

/// The lower bounds, one line each, and which one the `vs bound` column is against.
fn bounds_text(b: &LowerBounds) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "lower bounds on the average CCT (vs bound: over the best, {:.3} s):", b.best_avg_cct_s);
    // With dependencies only Γ holds; the per-port figure is then the isolation bound's.
    let (port, per_port) = if b.lp_status.starts_with(coflow_sim::DEPENDENCIES_SKIP) {
        ("per-port (not with dependencies)".to_string(), "-".to_string())
    } else {
        let on = b.per_port_resource.as_deref().unwrap_or("no port");
        (format!("per-port (SRPT on {on})"), format!("{:.3}", b.per_port_avg_cct_s))
    };
    let lp = b.lp_avg_cct_s.map_or("-".to_string(), |v| format!("{v:.3}"));
    let _ = writeln!(t, "  {:<38} {:>10.3} s", "isolation (each coflow's Γ alone)", b.isolation_avg_cct_s);
    let _ = writeln!(t, "  {port:<38} {per_port:>10} s");
    let _ = writeln!(t, "  {:<38} {lp:>10} s  ({})", "LP relaxation of the ordering problem", b.lp_status);
    t
}

/// With multi-stage jobs (some job holds more than one coflow), one line per policy: jobs
/// completed and the average and p95 job completion time.
fn jobs_text(summaries: &[Summary]) -> String {
    let mut t = String::new();
    if !summaries.iter().any(|s| s.jobs < s.coflows) {
        return t;
    }
    let _ = writeln!(t, "\n{:<16} {:>11} {:>12} {:>12}", "jobs", "completed", "avg JCT s", "p95 JCT s");
    for s in summaries {
        let _ = writeln!(
            t,
            "{:<16} {:>11} {:>12} {:>12}",
            s.policy,
            format!("{}/{}", s.jobs_completed, s.jobs),
            secs(s.job_avg_jct_s),
            secs(s.job_p95_jct_s)
        );
    }
    t
}

/// The per-bin table: each bin's average CCT and factor over the baseline, then the average flow
/// completion time and the share of coflows the policy made slower than the baseline.
fn bin_table(summaries: &[Summary], baseline: Option<&str>) -> String {
    let mut t = String::new();
    let Some(first) = summaries.first() else { return t };
    let vs = format!("vs {}", baseline.unwrap_or("-"));
    let _ = write!(t, "\n{:<16}", "by bin");
    for b in &first.bins {
        let _ = write!(t, " {:>19}", format!("{} ({})", b.bin, crate::output::count(b.coflows, "coflow", "coflows")));
    }
    let _ = write!(t, "\n{:<16}", "policy");
    for _ in &first.bins {
        let _ = write!(t, " {:>10} {:>8}", "avg CCT s", vs);
    }
    let _ = writeln!(t, " {:>10} {:>8}", "avg FCT s", "slower");
    let factor = |f: Option<f64>| f.map_or("-".to_string(), factor_text);
    for s in summaries {
        let _ = write!(t, "{:<16}", s.policy);
        for b in &s.bins {
            let avg = if b.completed > 0 { format!("{:.3}", b.avg_cct_s) } else { "-".to_string() };
            let _ = write!(t, " {:>10} {:>8}", avg, factor(b.factor_vs_baseline));
        }
        let slower = s.slower_than_baseline_fraction.map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
        let _ = writeln!(t, " {:>10} {:>8}", secs(s.avg_fct_s), slower);
    }
    if let Some(b) = baseline {
        let _ =
            writeln!(t, "slower: share of the coflows finished under both whose CCT exceeds {b}'s by more than 1 µs");
    }
    t
}

/// A factor with two decimals, or two significant digits below 0.1 so that a large slowdown does
/// not print as `0.00x`.
fn factor_text(f: f64) -> String {
    factor_with(f, 2)
}

/// A factor with `decimals` decimals, or at least two significant digits.
fn factor_with(f: f64, decimals: usize) -> String {
    let decimals =
        if f > 0.0 && f < 0.1 { ((1 - f.log10().floor() as i32).min(6) as usize).max(decimals) } else { decimals };
    format!("{f:.decimals$}x")
}

/// Seconds with three decimals, `-` for a figure of nothing (NaN: no coflow finished).
fn secs(x: f64) -> String {
    if x.is_finite() { format!("{x:.3}") } else { "-".to_string() }
}

/// The wide-area figures of a summary of a wide-area run.
fn wide(s: &Summary) -> &WideArea {
    s.wide_area.as_ref().expect("every run of a wide-area plan is on the wide area")
}

/// Siphon's figures (§5.3) of wide-area runs, against `mrtf`: overall, then per size bin, then
/// per job with multi-stage jobs.
fn wide_area_table(summaries: &[Summary], wall: &[f64]) -> String {
    let mut t = String::new();
    let factor = |f: Option<f64>| f.map_or("-".to_string(), |f| factor_with(f, 3));
    let _ = writeln!(
        t,
        "{:<16} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>14} {:>8}",
        "policy", "completed", "avg CCT s", "p90 s", "max s", "vs mrtf", "p90 vs", "makespan s", "relayed GB", "wall s"
    );
    for (s, w) in summaries.iter().zip(wall) {
        let _ = writeln!(
            t,
            "{:<16} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>14.3} {:>8.2}",
            s.policy,
            format!("{}/{}", s.completed, s.coflows),
            secs(s.avg_cct_s),
            secs(wide(s).p90_cct_s),
            secs(wide(s).max_cct_s),
            factor(s.factor_vs_baseline.filter(|&f| f > 0.0)),
            factor(wide(s).p90_factor_vs_baseline),
            secs(s.makespan_s),
            wide(s).relayed_bytes / 1e9,
            w
        );
    }
    if let Some(first) = summaries.first() {
        let _ = write!(t, "\n{:<16}", "by total size");
        for b in &wide(first).bins {
            let _ = write!(t, " {:>21}", format!("{} ({})", b.bin, b.coflows));
        }
        let _ = write!(t, "\n{:<16}", "policy");
        for _ in &wide(first).bins {
            let _ = write!(t, " {:>10} {:>10}", "avg CCT s", "vs mrtf");
        }
        t.push('\n');
        for s in summaries {
            let _ = write!(t, "{:<16}", s.policy);
            for b in &wide(s).bins {
                let _ = write!(t, " {:>10} {:>10}", secs(b.avg_cct_s), factor(b.factor_vs_baseline));
            }
            t.push('\n');
        }
    }
    if summaries.iter().any(|s| s.jobs < s.coflows) {
        let _ = writeln!(t, "\n{:<16} {:>12} {:>12}", "jobs", "avg JCT s", "p95 JCT s");
        for s in summaries {
            let _ = writeln!(t, "{:<16} {:>12} {:>12}", s.policy, secs(s.job_avg_jct_s), secs(s.job_p95_jct_s));
        }
    }
    t.push_str(&deadlines_text(summaries));
    t
}

#[cfg(test)]
mod tests {
    use super::factor_text;

    #[test]
    fn small_factors_keep_two_significant_digits() {
        assert_eq!(factor_text(1.523), "1.52x");
        assert_eq!(factor_text(0.13), "0.13x");
        assert_eq!(factor_text(0.0514), "0.051x");
        assert_eq!(factor_text(0.00142), "0.0014x");
        assert_eq!(factor_text(0.0), "0.00x");
    }
}
