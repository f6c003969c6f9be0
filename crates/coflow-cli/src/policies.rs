//! The policy lists commands take: their help, which names every policy of the registry, and
//! checks beyond the names the library knows.

use anyhow::{Result, bail};
use coflow_testbed::TCP;

/// Refuses `tcp` where no network shapes traffic, saying why and what stands for it.
pub(crate) fn refuse_tcp(policies: &str, whence: &str) -> Result<()> {
    if policies.split(',').any(|p| p.trim() == TCP) {
        match whence {
            "sim" => bail!(
                "`tcp` is not a policy of the simulator: kernel TCP sharing is what `fair` (max-min) models there; \
                 `coflow testbed run --policies tcp` measures the real thing"
            ),
            _ => bail!(
                "`tcp` needs a network that shapes traffic, and `coflow demo` runs on loopback with no shaping; \
                 use `coflow testbed run --policies tcp` (or `fair`, its max-min counterpart, here)"
            ),
        }
    }
    Ok(())
}

/// The help of a `--policies` option: `what`, then every name the registry has.
pub(crate) fn help(what: &str) -> String {
    let names = |list: &[&str]| list.join(", ");
    format!(
        "{what}. Policies: {} (`all`); wide-area only: {}",
        names(coflow_sched::policy::NAMES),
        names(coflow_sched::policy::WAN_NAMES)
    )
}
