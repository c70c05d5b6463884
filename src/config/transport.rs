//! `[transport]` (and `--slurm`): how herd reaches the nodes. SSH by default; `kind = "slurm"`
//! runs each node's agent as a job step of the Slurm allocation herd is in, on its nodes.

use std::ops::Range;

use toml::Spanned;

use super::check::*;
use super::raw::*;
use super::suggest;
use super::types::*;
use super::ConfigError;

/// `srun` options that would change what herd's steps are: one task on one named node of this
/// allocation, its stdio piped to herd unchanged (no `--label`), named so that herd can find
/// it again, overlapping herd's other steps on the node (`--exclusive` would queue a probe
/// behind the agent's step for ever).
#[rustfmt::skip]
const REFUSED_SRUN_OPTIONS: [&str; 29] = [
    "-N", "--nodes", "-n", "--ntasks", "-w", "--nodelist", "--jobid", "-J", "--job-name", "-i", "--input",
    "-o", "--output", "-e", "--error", "--pty", "-l", "--label", "--exclusive", "--multi-prog",
    "--het-group", "-x", "--exclude", "-F", "--nodefile", "--ntasks-per-node", "--overcommit", "-O", "--array",
];

/// The option of `refused` that `arg` is, if any: `-N2` is `-N`, `--nodes=2` is `--nodes`,
/// and so is `--nod` (srun and sbatch take an unambiguous prefix of a long option).
pub fn refused_option(arg: &str, refused: &[&'static str]) -> Option<&'static str> {
    if let Some(long) = arg.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or_default();
        if name.len() < 2 {
            return None;
        }
        let is = |o: &&str, m: &dyn Fn(&str) -> bool| o.strip_prefix("--").is_some_and(m);
        let exact = refused.iter().find(|o| is(o, &|o| o == name));
        return exact.or_else(|| refused.iter().find(|o| is(o, &|o| o.starts_with(name)))).copied();
    }
    let short = arg.strip_prefix('-')?.chars().next()?;
    refused.iter().find(|o| o.len() == 2 && o.ends_with(short)).copied()
}

impl Cx<'_> {
    /// The transport, and the nodes it reaches: with Slurm, those of the allocation.
    pub(super) fn transport_and_nodes(
        &self,
        raw: Option<RawTransport>,
        nodes: Option<Spanned<Vec<RawNode>>>,
        nodes_from: Option<Spanned<String>>,
    ) -> Result<(TransportSettings, Vec<Node>)> {
        let (kind, srun_args, steps) = raw.map(|t| (t.kind, t.srun_args, t.steps)).unwrap_or_default();
        let slurm = self.options.slurm || self.is_slurm(kind.as_ref())?;
        if !slurm {
            let slurms_own = [
                ("transport.steps", steps.map(|s| s.span())),
                ("transport.srun_args", srun_args.map(|a| a.span())),
            ];
            if let Some((key, span)) = slurms_own.into_iter().find_map(|(key, span)| Some((key, span?))) {
                return Err(self.err(
                    span,
                    format!("{key} is for kind = \"slurm\": remove it, or set kind = \"slurm\""),
                ));
            }
            return Ok((TransportSettings::Ssh, self.node_source(nodes, nodes_from)?));
        }
        // Where an error about the allocation points: `kind`, or nowhere for `--slurm`.
        let (what, span) = match (&kind, self.options.slurm) {
            (Some(kind), false) => ("transport.kind = \"slurm\"", Some(kind.span())),
            _ => ("--slurm", None),
        };
        let nodes = self.allocation_nodes(nodes, nodes_from, what, span.clone())?;
        let job_id = self.slurm_job_id(what, span)?;
        let srun_args = srun_args.map(|args| self.srun_args(args)).transpose()?.unwrap_or_default();
        let per_node_steps = steps.map(|steps| self.per_node_steps(&steps)).transpose()?.unwrap_or(false);
        Ok((TransportSettings::Slurm(SlurmSettings { job_id, srun_args, per_node_steps }), nodes))
    }

    /// With Slurm, the nodes of the allocation herd is in (`what`, `span`: what asked for
    /// it, and where). The file's own nodes are refused unless `--slurm` overrides them.
    fn allocation_nodes(
        &self,
        nodes: Option<Spanned<Vec<RawNode>>>,
        nodes_from: Option<Spanned<String>>,
        what: &str,
        span: Option<Range<usize>>,
    ) -> Result<Vec<Node>> {
        if !self.options.slurm {
            if let Some(nodes) = nodes {
                return Err(self.err(
                    nodes.span(),
                    "transport.kind = \"slurm\" runs on the nodes of the allocation herd is in, not on \
                     [[nodes]]: remove [[nodes]] (to ssh to the allocation's nodes instead, keep kind = \
                     \"ssh\" and write nodes_from = \"slurm\")",
                ));
            }
            if let Some(from) = nodes_from.filter(|from| from.get_ref() != "slurm") {
                return Err(self.err(
                    from.span(),
                    "transport.kind = \"slurm\" runs on the nodes of the allocation herd is in: \
                     remove nodes_from",
                ));
            }
        }
        self.slurm_nodes(what, span)
    }

    /// `transport.steps`: `"fleet"`, one step for all the nodes (the default), or `"per-node"`.
    fn per_node_steps(&self, steps: &Spanned<String>) -> Result<bool> {
        match steps.get_ref().as_str() {
            "fleet" => Ok(false),
            "per-node" => Ok(true),
            other => Err(self.err(
                steps.span(),
                format!("unknown transport.steps {other:?}: expected \"fleet\" (one step for all the nodes) or \"per-node\""),
            )),
        }
    }

    fn is_slurm(&self, kind: Option<&Spanned<String>>) -> Result<bool> {
        let Some(kind) = kind else { return Ok(false) };
        match kind.get_ref().as_str() {
            "ssh" => Ok(false),
            "slurm" => Ok(true),
            other => Err(self
                .err(kind.span(), format!("unknown transport.kind {other:?}: expected \"ssh\" or \"slurm\""))
                .with_help(suggest::help_for(other, ["ssh", "slurm"]))),
        }
    }

    fn slurm_job_id(&self, what: &str, span: Option<Range<usize>>) -> Result<String> {
        let found = SLURM_JOB_ID_VARS
            .iter()
            .find_map(|&var| Some((var, (self.options.env)(var).filter(|v| !v.is_empty())?)));
        let message = match found {
            Some((_, id)) if id.bytes().all(|b| b.is_ascii_digit()) => return Ok(id),
            Some((var, id)) => format!("{what}: {var} {id:?} is not a job id"),
            None => format!(
                "{what}: {OUTSIDE_ALLOCATION} ({} are unset); run herd under salloc or in an \
                 sbatch script",
                SLURM_JOB_ID_VARS.join(" and ")
            ),
        };
        Err(match span {
            Some(span) => self.err(span, message),
            None => ConfigError::whole_file(self.path, message),
        })
    }

    fn srun_args(&self, args: Spanned<Vec<String>>) -> Result<Vec<String>> {
        let span = args.span();
        let args = args.into_inner();
        for arg in &args {
            if let Some(option) = refused_option(arg, &REFUSED_SRUN_OPTIONS) {
                return Err(self.err(
                    span,
                    format!(
                        "transport.srun_args: herd sets {option} itself (one task on each node, its \
                         output to herd, beside herd's other steps): remove {arg:?}"
                    ),
                ));
            }
            if arg.trim().is_empty() {
                return Err(self.err(span, "transport.srun_args: an empty argument"));
            }
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    const ALLOCATION: [(&str, &str); 2] = [("SLURM_JOB_NODELIST", "n[1-3]"), ("SLURM_JOB_ID", "42")];

    fn slurm_of(config: &Config) -> &SlurmSettings {
        match &config.transport {
            TransportSettings::Slurm(s) => s,
            TransportSettings::Ssh => panic!("not slurm: {config:?}"),
        }
    }

    #[test]
    fn kind_slurm_takes_the_allocations_nodes_and_job() {
        let text = format!(
            "{JOB}[transport]\nkind = \"slurm\"\nsrun_args = [\"--gpus-per-node=8\", \"--no-kill\", \"-u\", \"-é\"]\n"
        );
        let config = parse_from(&text, &ALLOCATION, &[], false).unwrap();
        assert_eq!(hosts_and_nprocs(&config), [("n1", None), ("n2", None), ("n3", None)]);
        let s = slurm_of(&config);
        assert_eq!(
            (s.job_id.as_str(), s.srun_args[0].as_str(), s.srun_args.len()),
            ("42", "--gpus-per-node=8", 4)
        );
        assert!(!s.per_node_steps, "one step for the fleet by default");
        let per_node = format!("{JOB}[transport]\nkind = \"slurm\"\nsteps = \"per-node\"\n");
        assert!(slurm_of(&parse_from(&per_node, &ALLOCATION, &[], false).unwrap()).per_node_steps);
        // nodes_from = "slurm" says the same thing twice: allowed.
        let text = format!("nodes_from = \"slurm\"\n{JOB}[transport]\nkind = \"slurm\"\n");
        assert_eq!(parse_from(&text, &ALLOCATION, &[], false).unwrap().nodes.len(), 3);
    }

    #[test]
    fn the_slurm_flag_is_kind_slurm_whatever_the_file_says() {
        for nodes in ["[[nodes]]\nhost = \"a\"\n", "nodes_from = \"hostfile:none\"\n"] {
            let config = parse_from(&format!("{nodes}{JOB}"), &ALLOCATION, &[], true).unwrap();
            assert_eq!(hosts_and_nprocs(&config), [("n1", None), ("n2", None), ("n3", None)]);
            assert_eq!(slurm_of(&config).job_id, "42");
        }
        // nodes_from = "slurm" without the flag still ssh-es to the allocation's nodes.
        let config = parse_from(&format!("nodes_from = \"slurm\"\n{JOB}"), &ALLOCATION, &[], false).unwrap();
        assert_eq!(config.transport, TransportSettings::Ssh);
    }

    #[test]
    fn slurm_transport_errors() {
        let kind = format!("{JOB}[transport]\nkind = \"slurm\"\n");
        let at_kind = JOB.lines().count() + 2;
        let err = parse_from(&kind, &[("SLURM_JOB_NODELIST", "n1")], &[], false).unwrap_err();
        assert_eq!(err.line_col(), Some((at_kind, 8)));
        assert_eq!(
            err.message(),
            "transport.kind = \"slurm\": not inside a Slurm allocation (SLURM_JOB_ID and SLURM_JOBID are unset); run herd under salloc or in an sbatch script"
        );
        let err = parse_from(&kind, &[], &[], false).unwrap_err();
        assert!(err
            .message()
            .starts_with("transport.kind = \"slurm\": not inside a Slurm allocation (SLURM_JOB_NODELIST"));
        let err =
            parse_from(&format!("[[nodes]]\nhost = \"a\"\n{kind}"), &ALLOCATION, &[], false).unwrap_err();
        assert!(err.message().contains("not on [[nodes]]: remove [[nodes]]"), "{err}");
        let err =
            parse_from(&format!("nodes_from = \"hostfile:h\"\n{kind}"), &ALLOCATION, &[], false).unwrap_err();
        assert_eq!(err.line_col(), Some((1, 14)));
        let err =
            parse_from(&format!("{JOB}[transport]\nkind = \"srun\"\n"), &ALLOCATION, &[], false).unwrap_err();
        assert_eq!(err.message(), "unknown transport.kind \"srun\": expected \"ssh\" or \"slurm\"");
        let err = parse_from(&format!("{JOB}[transport]\nkind = \"slrum\"\n"), &ALLOCATION, &[], false)
            .unwrap_err();
        assert_eq!(err.help(), Some("did you mean \"slurm\"?"));
        for bad in ["-N2", "--nodes=2", "-w", "--job-name=x", "--pty", "--nodel=n1", "-l", "--exclusive"] {
            let text = format!("{kind}srun_args = [\"--gres=gpu:8\", \"{bad}\"]\n");
            let err = parse_from(&text, &ALLOCATION, &[], false).unwrap_err();
            assert!(err.message().starts_with("transport.srun_args: herd sets "), "{bad}: {err}");
        }
        let err = parse_from(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}[transport]\nsrun_args = [\"-x\"]\n"),
            &[],
            &[],
            false,
        )
        .unwrap_err();
        assert!(err.message().starts_with("transport.srun_args is for kind = \"slurm\""), "{err}");
        let err = parse_from(&format!("{kind}steps = \"each\"\n"), &ALLOCATION, &[], false).unwrap_err();
        assert_eq!(err.line_col(), Some((at_kind + 1, 9)));
        assert!(err.message().starts_with("unknown transport.steps \"each\": expected \"fleet\""), "{err}");
        let err = parse_from(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}[transport]\nsteps = \"fleet\"\n"),
            &[],
            &[],
            false,
        )
        .unwrap_err();
        assert!(err.message().starts_with("transport.steps is for kind = \"slurm\""), "{err}");
        let err = parse_from(&kind, &[("SLURM_JOB_NODELIST", "n1"), ("SLURM_JOBID", "4;2")], &[], false)
            .unwrap_err();
        assert!(err.message().ends_with("SLURM_JOBID \"4;2\" is not a job id"), "{err}");
    }
}
