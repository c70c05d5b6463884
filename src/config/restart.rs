//! `[restart]`: when a failed attempt is restarted, how soon, and how failures are classified.

use std::time::Duration;

use toml::Spanned;

use super::check::*;
use super::error::ConfigError;
use super::raw::*;
use super::suggest;
use super::types::*;

/// The shortest `restart.heartbeat_timeout` herd takes: three heartbeats at the shortest
/// interval (`policy::heartbeat_interval`, at least a second), so that one late heartbeat is
/// no lost node.
pub const MIN_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);

/// How `{latest:GLOB}` in `restart.resume_args` starts. It is found on the master, in the
/// workdir: the newest match of GLOB by modification time (the last checkpoint written,
/// whatever its name's numbering).
pub const LATEST: &str = "{latest:";

/// The GLOB of an argument's `{latest:GLOB}`, if it has a whole one.
pub fn latest_glob(arg: &str) -> Option<&str> {
    let start = arg.find(LATEST)? + LATEST.len();
    let len = arg[start..].find('}')?;
    Some(&arg[start..start + len]).filter(|g| !g.is_empty())
}

impl Cx<'_> {
    /// `[restart]`, for a job of `nnodes` active nodes: a key left out is its default. The keys
    /// are checked in this order, which says which error is shown when several are wrong.
    pub(super) fn restart(&self, raw: Option<RawRestart>, nnodes: usize) -> Result<Restart> {
        let defaults = Restart::default();
        let Some(raw) = raw else {
            return Ok(defaults);
        };
        let duration = |v: &Option<Spanned<DurationText>>, what: &str, default: Duration| match v {
            Some(d) => self.duration(d, what),
            None => Ok(default),
        };
        let max_restarts =
            (raw.max_restarts.as_ref()).map_or(Ok(defaults.max_restarts), |n| self.max_restarts(n))?;
        let on = (raw.on.as_ref()).map_or(Ok(defaults.on), |classes| {
            classes.iter().map(|c| self.failure_class(c, "restart.on")).collect()
        })?;
        let backoff = duration(&raw.backoff, "restart.backoff", defaults.backoff)?;
        let backoff_max = duration(&raw.backoff_max, "restart.backoff_max", defaults.backoff_max)?;
        // Point at whichever was written (backoff_max first); the defaults are consistent.
        self.backoff_within(raw.backoff_max.as_ref().or(raw.backoff.as_ref()), backoff, backoff_max)?;
        let hang_timeout = (raw.hang_timeout.as_ref())
            .map(|d| self.positive_duration(d, "restart.hang_timeout"))
            .transpose()?;
        let stall_timeout =
            (raw.stall_timeout.as_ref()).map_or(Ok(defaults.stall_timeout), |d| self.stall_timeout(d))?;
        let progress_pattern = raw.progress_pattern.map(|p| self.progress_pattern(p)).transpose()?;
        let rules = self.rules(raw.rules.unwrap_or_default())?;
        let min_nodes = (raw.min_nodes.as_ref())
            .map(|n| self.count_up_to(n, "restart.min_nodes", nnodes, "the job's node count"))
            .transpose()?;
        let resume_args = raw.resume_args.map(|a| self.resume_args(a)).transpose()?.unwrap_or_default();
        let grace_period = duration(&raw.grace_period, "restart.grace_period", defaults.grace_period)?;
        let node_wait = duration(&raw.node_wait, "restart.node_wait", defaults.node_wait)?;
        let heartbeat_timeout = (raw.heartbeat_timeout.as_ref())
            .map_or(Ok(defaults.heartbeat_timeout), |d| self.heartbeat_timeout(d))?;
        let on_straggler = raw.on_straggler.map(|v| self.on_straggler(v)).transpose()?.unwrap_or_default();
        let checkpoint_signal =
            raw.checkpoint_signal.map(|v| self.checkpoint_signal(v)).transpose()?.unwrap_or_default();
        let checkpoint_grace =
            duration(&raw.checkpoint_grace, "restart.checkpoint_grace", defaults.checkpoint_grace)?;
        Ok(Restart {
            max_restarts,
            on,
            backoff,
            backoff_max,
            grace_period,
            hang_timeout,
            stall_timeout,
            progress_pattern,
            node_wait,
            heartbeat_timeout,
            rules,
            resume_args,
            min_nodes,
            on_straggler,
            checkpoint_signal,
            checkpoint_grace,
        })
    }

    /// `restart.max_restarts`: any count a `u32` holds.
    fn max_restarts(&self, n: &Spanned<i64>) -> Result<u32> {
        u32::try_from(*n.get_ref()).map_err(|_| {
            self.err(
                n.span(),
                format!("restart.max_restarts must be between 0 and {}, found {}", u32::MAX, n.get_ref()),
            )
        })
    }

    /// `restart.stall_timeout`: a duration, or `"off"` (`None`).
    fn stall_timeout(&self, d: &Spanned<DurationText>) -> Result<Option<Duration>> {
        if d.get_ref().0.trim() == "off" {
            return Ok(None);
        }
        self.positive_duration(d, "restart.stall_timeout").map(Some)
    }

    /// `restart.heartbeat_timeout`: long enough for the agent's heartbeats to come.
    fn heartbeat_timeout(&self, d: &Spanned<DurationText>) -> Result<Duration> {
        self.duration_at_least(
            d,
            "restart.heartbeat_timeout",
            MIN_HEARTBEAT_TIMEOUT,
            "three of the agent's heartbeats, which come at most once a second",
        )
    }

    /// `restart.backoff` no longer than `restart.backoff_max`; `written`: where to point if
    /// it is.
    fn backoff_within(
        &self,
        written: Option<&Spanned<DurationText>>,
        backoff: Duration,
        backoff_max: Duration,
    ) -> Result<()> {
        if backoff <= backoff_max {
            return Ok(());
        }
        let message = format!(
            "restart.backoff ({}) is longer than restart.backoff_max ({})",
            humantime::format_duration(backoff),
            humantime::format_duration(backoff_max)
        );
        Err(match written {
            Some(v) => self.err(v.span(), message),
            None => ConfigError::whole_file(self.path, message),
        })
    }

    /// `restart.checkpoint_signal`: one of `CheckpointSignal::ALL`, with or without `SIG`.
    fn checkpoint_signal(&self, v: Spanned<String>) -> Result<CheckpointSignal> {
        CheckpointSignal::parse(v.get_ref()).ok_or_else(|| {
            let all = CheckpointSignal::ALL.map(|c| c.name);
            self.err(
                v.span(),
                format!(
                    "unknown restart.checkpoint_signal {:?}: expected one of {}",
                    v.get_ref(),
                    all.join(", ")
                ),
            )
            .with_help(suggest::help_for(v.get_ref(), all))
        })
    }

    /// `restart.on_straggler`: one of `OnStraggler::ALL`.
    fn on_straggler(&self, v: Spanned<String>) -> Result<OnStraggler> {
        OnStraggler::parse(v.get_ref()).ok_or_else(|| {
            let all = OnStraggler::ALL.map(OnStraggler::as_str);
            self.err(
                v.span(),
                format!("unknown restart.on_straggler {:?}: expected one of {}", v.get_ref(), all.join(", ")),
            )
            .with_help(suggest::help_for(v.get_ref(), all))
        })
    }

    /// `restart.progress_pattern`: a regex, not empty.
    fn progress_pattern(&self, p: Spanned<String>) -> Result<String> {
        if p.get_ref().is_empty() {
            return Err(self.err(p.span(), "restart.progress_pattern must not be empty"));
        }
        self.regex(&p, "restart.progress_pattern")?;
        Ok(p.into_inner())
    }

    /// `restart.rules`: each a regex, not empty, with a failure class and maybe `blame = "node"`.
    fn rules(&self, raw: Vec<RawRule>) -> Result<Vec<RuleSpec>> {
        let mut rules = Vec::new();
        for (i, rule) in raw.into_iter().enumerate() {
            if rule.pattern.get_ref().is_empty() {
                return Err(
                    self.err(rule.pattern.span(), format!("restart.rules[{i}].pattern must not be empty"))
                );
            }
            self.regex(&rule.pattern, &format!("restart.rules[{i}].pattern"))?;
            let class = self.failure_class(&rule.class, &format!("restart.rules[{i}].class"))?;
            let blame = match &rule.blame {
                None => false,
                Some(b) if b.get_ref() == "node" => true,
                Some(b) => {
                    return Err(self.err(
                        b.span(),
                        format!(
                        "restart.rules[{i}].blame must be \"node\" (the line's node is at fault), found {:?}",
                        b.get_ref()
                    ),
                    ))
                }
            };
            rules.push(RuleSpec { pattern: rule.pattern.into_inner(), class, blame });
        }
        Ok(rules)
    }

    /// `restart.resume_args`: at most one `{latest:GLOB}`, each whole.
    fn resume_args(&self, args: Spanned<Vec<String>>) -> Result<Vec<String>> {
        let globs = args.get_ref().iter().filter(|a| latest_glob(a).is_some()).count();
        let broken = args.get_ref().iter().find(|a| a.contains("{latest:") && latest_glob(a).is_none());
        if let Some(a) = broken {
            return Err(self.err(
                args.span(),
                format!("restart.resume_args: {a:?} has an unclosed or empty {{latest:GLOB}}"),
            ));
        }
        if globs > 1 {
            return Err(
                self.err(args.span(), "restart.resume_args: at most one argument may hold {latest:GLOB}")
            );
        }
        Ok(args.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use std::time::Duration;

    #[test]
    fn invalid_regexes_are_config_errors() {
        let text = format!("[[nodes]]\nhost = \"a\"\n{JOB}[restart]\nprogress_pattern = \"step (\"\n");
        let err = parse(Path::new("c.toml"), &text).unwrap_err().to_string();
        assert!(err.contains("restart.progress_pattern is not a valid regular expression"), "{err}");
        let text =
            format!("[[nodes]]\nhost = \"a\"\n{JOB}[[restart.rules]]\npattern = \"[x\"\nclass = \"comm\"\n");
        let err = parse(Path::new("c.toml"), &text).unwrap_err().to_string();
        assert!(err.contains("restart.rules[0].pattern is not a valid regular expression"), "{err}");
    }

    #[test]
    fn min_nodes_is_at_most_the_jobs_node_count() {
        let base = "[[nodes]]\nhost = \"n[1-4]\"\n[job]\nscript = \"t.py\"\nnnodes = 3\n[restart]\n";
        assert_eq!(parse_ok(&format!("{base}min_nodes = 2\n")).restart.min_nodes, Some(2));
        assert_eq!(parse_ok(base).restart.min_nodes, None);
        assert_err(
            &format!("{base}min_nodes = 4\n"),
            7,
            13,
            "restart.min_nodes must be between 1 and the job's node count (3), found 4",
        );
        assert_err(
            &format!("{base}min_nodes = 0\n"),
            7,
            13,
            "restart.min_nodes must be between 1 and the job's node count (3), found 0",
        );
    }

    #[test]
    fn resume_args_hold_at_most_one_latest_glob() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[restart]\n");
        let ok = parse_ok(&format!("{base}resume_args = [\"--resume\", \"{{latest:ckpt/step_*}}\"]\n"));
        assert_eq!(ok.restart.resume_args, ["--resume", "{latest:ckpt/step_*}"]);
        assert_err(
            &format!("{base}resume_args = [\"{{latest:a}}\", \"{{latest:b}}\"]\n"),
            6,
            15,
            "restart.resume_args: at most one argument may hold {latest:GLOB}",
        );
        assert_err(
            &format!("{base}resume_args = [\"--from={{latest:ckpt\"]\n"),
            6,
            15,
            "restart.resume_args: \"--from={latest:ckpt\" has an unclosed or empty {latest:GLOB}",
        );
    }

    #[test]
    fn checkpoint_signal_is_a_known_name_and_the_grace_a_duration() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[restart]\n");
        let defaults = parse_ok(&base).restart;
        assert_eq!(
            (defaults.checkpoint_signal.name, defaults.checkpoint_grace),
            ("USR1", Duration::from_secs(60))
        );
        let set =
            parse_ok(&format!("{base}checkpoint_signal = \"SIGTERM\"\ncheckpoint_grace = \"2m\"\n")).restart;
        assert_eq!((set.checkpoint_signal.number, set.checkpoint_grace), (15, Duration::from_secs(120)));
        assert_eq!(
            parse_ok(&format!("{base}checkpoint_signal = \"usr2\"\n")).restart.checkpoint_signal.number,
            12
        );
        assert_err(
            &format!("{base}checkpoint_signal = \"USR3\"\n"),
            6,
            21,
            "unknown restart.checkpoint_signal \"USR3\": expected one of USR1, USR2, TERM, INT, HUP, CONT",
        );
    }

    #[test]
    fn on_straggler_is_report_or_replace() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[restart]\n");
        assert_eq!(parse_ok(&base).restart.on_straggler, OnStraggler::Report);
        let replace = parse_ok(&format!("{base}on_straggler = \"replace\"\n"));
        assert_eq!(replace.restart.on_straggler, OnStraggler::Replace);
        assert_err(
            &format!("{base}on_straggler = \"replce\"\n"),
            6,
            16,
            "unknown restart.on_straggler \"replce\": expected one of report, replace",
        );
    }

    #[test]
    fn a_rule_may_blame_its_node() {
        let base = format!(
            "[[nodes]]\nhost = \"a\"\n{JOB}[[restart.rules]]\npattern = \"PCIe\"\nclass = \"crash\"\n"
        );
        let rules = parse_ok(&format!("{base}blame = \"node\"\n")).restart.rules;
        assert_eq!(rules, [RuleSpec { pattern: "PCIe".into(), class: FailureClass::Crash, blame: true }]);
        assert!(!parse_ok(&base).restart.rules[0].blame);
        assert_err(
            &format!("{base}blame = \"rank\"\n"),
            8,
            9,
            "restart.rules[0].blame must be \"node\" (the line's node is at fault), found \"rank\"",
        );
    }
}
