//! `--model exact|coflowsim` and `--coflowsim-rules`: which simulation model a run uses.

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use coflow_sim::coflowsim::Rules;
pub(crate) use coflow_sim::experiment::Model;

/// The model options `sim`, `sim sweep` and `bench` share.
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// `exact` (the default): our model (exact arrivals and sizes, decisions when anything
    /// changes); `coflowsim`: the reference simulator's (CoflowSim's) rules, for the policies it
    /// has (varys, fair, pfp, fifo, scf, ncf, tcf, aalo).
    #[arg(long, value_enum)]
    model: Option<ModelName>,
    /// Only these of the reference simulator's rules, comma-separated (implies --model
    /// coflowsim); the help names them from `Rules::NAMES`.
    #[arg(long, value_name = "RULES", value_parser = crate::policies::list, help = rules_help())]
    coflowsim_rules: Option<String>,
}

/// The help of `--coflowsim-rules`, with every rule's name.
fn rules_help() -> String {
    format!(
        "Only these of the reference simulator's rules, comma-separated (implies --model coflowsim): {}, or all",
        Rules::NAMES.join(", ")
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModelName {
    Exact,
    Coflowsim,
}

impl ModelArgs {
    /// The model asked for.
    pub(crate) fn model(&self) -> Result<Model> {
        let rules = match (&self.coflowsim_rules, self.model.unwrap_or(ModelName::Exact)) {
            (Some(_), ModelName::Exact) if self.model.is_some() => {
                bail!("--coflowsim-rules are the reference simulator's: they go with --model coflowsim, not exact")
            }
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
