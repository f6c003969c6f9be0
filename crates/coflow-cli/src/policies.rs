//! The policy lists commands take: their help, which names every policy of the registry, and
//! checks beyond the names the library knows.

use anyhow::{Result, bail};
use coflow_sched::policy;

/// A comma-separated list of names (`--policies`, `--coflowsim-rules`) as given, for clap to
/// check: an empty item beside names (`varys,,fair`, a comma at an end) is refused rather than
/// dropped, as it is more likely a name lost in an edit than meant. A list of no name at all
/// (empty, `,,`) is left to the command, which says what it takes that to mean.
pub(crate) fn list(s: &str) -> Result<String, String> {
    let mut items = s.split(',').map(str::trim);
    if items.clone().any(str::is_empty) && items.any(|item| !item.is_empty()) {
        return Err(format!("an empty item in {s:?}: each comma goes between two names"));
    }
    Ok(s.to_string())
}

/// Refuses an unscheduled mode (`tcp`) where no network shapes traffic, saying why and what the
/// registry says stands for it.
pub(crate) fn refuse_tcp(policies: &str, whence: &str) -> Result<()> {
    if let Some(u) = policies.split(',').find_map(|p| policy::unscheduled(p.trim())) {
        let (name, by) = (u.name, u.simulated_by);
        match whence {
            "sim" => bail!(
                "`{name}` is not a policy of the simulator ({}): `{by}` is what models it there; \
                 `coflow testbed run --policies {name}` measures the real thing",
                u.summary
            ),
            _ => bail!(
                "`{name}` needs a network that shapes traffic, and `coflow demo` runs on loopback with no shaping; \
                 use `coflow testbed run --policies {name}` (or `{by}`, its simulated counterpart, here)"
            ),
        }
    }
    Ok(())
}

/// The help of the testbed's `--policies`: the unscheduled modes with what they do, then every
/// policy of the registry.
pub(crate) fn live_help() -> String {
    let modes: Vec<String> = policy::UNSCHEDULED.iter().map(|u| format!("`{}` ({})", u.name, u.summary)).collect();
    help(&format!("Policies, comma-separated: {} or any policy of `coflow sim`", modes.join(", ")))
}

/// The help of a `--policies` option: `what`, then every name the registry has.
pub(crate) fn help(what: &str) -> String {
    let names = |list: &[&str]| list.join(", ");
    format!(
        "{what}. Policies: {} (`all`); by name only: {}; by name only, for the wide area: {}",
        names(coflow_sched::policy::NAMES),
        names(coflow_sched::policy::JOB_NAMES),
        names(coflow_sched::policy::WAN_NAMES)
    )
}
