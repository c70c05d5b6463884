//! `[job]`: what runs on every node, and how it is launched.

use super::check::*;
use super::raw::*;
use super::suggest;
use super::types::*;
use toml::Spanned;

impl Cx<'_> {
    /// `[job]`, for a config of `nodes` nodes.
    /// `slurm`: the nodes are those of a Slurm allocation, which sets how many there are.
    pub(super) fn job(&self, raw: RawJob, nodes: usize, slurm: bool) -> Result<Job> {
        let launcher = self.launcher(raw.launcher.as_ref())?;
        if raw.script.get_ref().trim().is_empty() {
            return Err(self.err(raw.script.span(), "job.script must not be empty"));
        }
        let forward_env = self.forward_env(raw.forward_env.unwrap_or_default())?;
        let most_is = if slurm { "the nodes of the Slurm allocation" } else { "the number of nodes" };
        let nnodes = raw
            .nnodes
            .as_ref()
            .map(|n| {
                self.count_up_to(n, "job.nnodes", nodes, most_is).map_err(|e| match slurm {
                    true => e.with_help(Some(format!(
                        "run in an allocation of at least {} nodes: salloc --nodes={0}, or #SBATCH --nodes={0}",
                        n.get_ref()
                    ))),
                    false => e,
                })
            })
            .transpose()?;
        Ok(Job {
            nnodes,
            launcher,
            script: raw.script.into_inner(),
            args: raw.args.unwrap_or_default(),
            module: raw.module.unwrap_or(false),
            workdir: raw.workdir.map(|w| self.non_empty(w, "job.workdir")).transpose()?,
            nproc_per_node: match &raw.nproc_per_node {
                Some(n) => self.count(n, "job.nproc_per_node")?,
                None => 1,
            },
            setup: raw.setup,
            launcher_args: raw.launcher_args.unwrap_or_default(),
            forward_env,
            python: raw.python.map(|p| self.non_empty(p, "job.python")).transpose()?,
            device: self.device(raw.device.as_ref())?,
        })
    }

    fn launcher(&self, raw: Option<&Spanned<String>>) -> Result<LauncherKind> {
        Ok(match raw {
            None => LauncherKind::Torchrun,
            Some(l) => LauncherKind::parse(l.get_ref()).ok_or_else(|| {
                self.err(
                    l.span(),
                    format!(
                        "unknown launcher {:?}: expected one of {}",
                        l.get_ref(),
                        LauncherKind::ALL.map(LauncherKind::as_str).join(", ")
                    ),
                )
                .with_help(suggest::help_for(l.get_ref(), LauncherKind::ALL.map(LauncherKind::as_str)))
            })?,
        })
    }

    /// `job.forward_env`: names, or `NAME_*` prefix globs.
    fn forward_env(&self, raw: Vec<Spanned<String>>) -> Result<Vec<String>> {
        let mut forward_env = Vec::new();
        for pattern in raw {
            if !is_env_pattern(pattern.get_ref()) {
                return Err(self.err(
                    pattern.span(),
                    format!(
                        "invalid job.forward_env entry {:?}: expected a variable name or a \
                         NAME_* prefix glob (letters, digits and _, not starting with a digit, \
                         optionally ending in *)",
                        pattern.get_ref()
                    ),
                ));
            }
            forward_env.push(pattern.into_inner());
        }
        Ok(forward_env)
    }

    fn device(&self, raw: Option<&Spanned<String>>) -> Result<Device> {
        Ok(match raw {
            None => Device::Cuda,
            Some(d) => match d.get_ref().as_str() {
                "cuda" => Device::Cuda,
                "cpu" => Device::Cpu,
                other => {
                    return Err(self
                        .err(d.span(), format!("unknown job.device {other:?}: expected \"cuda\" or \"cpu\""))
                        .with_help(suggest::help_for(other, ["cuda", "cpu"])))
                }
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn job_missing_or_script_empty() {
        assert_file_err(
            "[[nodes]]\nhost = \"a\"\n",
            "missing [job] table: add [job] with at least `script = \"train.py\"`",
        );
        assert_err("[[nodes]]\nhost = \"a\"\n[job]\nscript = \"\"\n", 4, 10, "job.script must not be empty");
    }

    #[test]
    fn nnodes_counts_the_active_nodes_and_leaves_the_rest_spares() {
        let base = "[[nodes]]\nhost = \"n[1-4]\"\n[job]\nscript = \"t.py\"\n";
        assert_eq!(parse_ok(base).job.nnodes, None);
        assert_eq!(parse_ok(&format!("{base}nnodes = 3\n")).job.nnodes, Some(3));
        assert_eq!(parse_ok(&format!("{base}nnodes = 4\n")).job.nnodes, Some(4));
        for bad in ["0", "5", "-1"] {
            assert_err(
                &format!("{base}nnodes = {bad}\n"),
                5,
                10,
                &format!("job.nnodes must be between 1 and the number of nodes (4), found {bad}"),
            );
        }
    }

    #[test]
    fn forward_env_patterns() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        let ok = parse_ok(&format!("{base}forward_env = [\"A\", \"_x1\", \"HF_*\", \"P*\"]\n"));
        assert_eq!(ok.job.forward_env, ["A", "_x1", "HF_*", "P*"]);
        for bad in ["*", "HF-*", "*_TOKEN", "A**", "1A", ""] {
            assert_err(
                &format!("{base}forward_env = [\"OK\", \"{bad}\"]\n"),
                5,
                22,
                &format!("invalid job.forward_env entry {bad:?}: expected a variable name or a NAME_* prefix glob (letters, digits and _, not starting with a digit, optionally ending in *)"),
            );
        }
    }
}
