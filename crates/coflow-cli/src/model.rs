//! `--model exact|coflowsim` and `--coflowsim-rules`: which simulation model a run uses.

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use coflow_core::Workload;
use coflow_sched::{Scheduler, policy};
use coflow_sim::coflowsim::{self, Rules};

/// The model options `sim`, `sim sweep` and `bench` share.
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// `exact`: our model (exact arrivals and sizes, decisions when anything changes);
    /// `coflowsim`: the reference simulator's (CoflowSim's) rules, for the policies it has
    /// (varys, fair, pfp, fifo, scf, ncf, tcf, aalo).
    #[arg(long, value_enum, default_value_t = ModelName::Exact)]
    model: ModelName,
    /// Only these of the reference simulator's rules, comma-separated (implies --model
    /// coflowsim): epochs, clock, rounding, ports, timing, keys, fair, pfp, dark, or all.
    #[arg(long, value_name = "RULES")]
    coflowsim_rules: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModelName {
    Exact,
    Coflowsim,
}

/// The model of a run: ours, or the reference simulator's rules that are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Model(Option<Rules>);

impl ModelArgs {
    /// The model asked for.
    pub(crate) fn model(&self) -> Result<Model> {
        let rules = match (&self.coflowsim_rules, self.model) {
            (Some(list), _) => {
                let rules = Rules::parse(list).map_err(|e| anyhow::anyhow!("--coflowsim-rules: {e}"))?;
                if rules.names().is_empty() {
                    bail!("--coflowsim-rules names no rule; known rules: all, {}", Rules::NAMES.join(", "));
                }
                Some(rules)
            }
            (None, ModelName::Coflowsim) => Some(Rules::all()),
            (None, ModelName::Exact) => None,
        };
        Ok(Model(rules))
    }
}

impl Model {
    /// Whether this is our exact model.
    pub(crate) fn is_exact(&self) -> bool {
        self.0.is_none()
    }

    /// Refuses policies the model has no counterpart for, naming the first.
    pub(crate) fn check(&self, policies: &[&str]) -> Result<()> {
        if let Some(rules) = &self.0 {
            for &name in policies {
                if let Err(e) = coflowsim::policy(name, rules) {
                    bail!("--policies: {e}");
                }
            }
        }
        Ok(())
    }

    /// The workload as the model sees it.
    pub(crate) fn workload(&self, w: Workload) -> Workload {
        match &self.0 {
            Some(rules) => coflowsim::workload(&w, rules),
            None => w,
        }
    }

    /// A fresh instance of policy `name` under this model (names were checked).
    pub(crate) fn policy(&self, name: &str) -> Box<dyn Scheduler> {
        match &self.0 {
            Some(rules) => coflowsim::policy(name, rules).expect("names were checked"),
            None => policy::by_name(name).expect("names were validated"),
        }
    }

    /// What the workload line says about the model, if anything.
    pub(crate) fn describe(&self) -> String {
        match &self.0 {
            None => String::new(),
            Some(r) if *r == Rules::all() => " (model: coflowsim, every rule)".to_string(),
            Some(r) => format!(" (model: coflowsim rules {})", r.names().join(",")),
        }
    }
}
