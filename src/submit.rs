//! `herd submit`: the sbatch script that runs `herd run --slurm` inside its allocation, from
//! what the command line asks for (pure: the script's text; `app` checks the config and
//! hands the script to sbatch).

use std::fmt::Write as _;
use std::path::Path;

use crate::remote::shell::ShellLine;

/// What the allocation asks for, and what runs in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission<'a> {
    /// `sbatch --job-name`.
    pub name: String,
    pub nodes: usize,
    pub partition: Option<&'a str>,
    pub time: Option<&'a str>,
    pub account: Option<&'a str>,
    /// The herd that runs in the allocation: this one, on a file system every node shares.
    pub herd: &'a Path,
    /// The config, absolute.
    pub config: &'a Path,
    /// Where `herd run` starts (`--chdir`): the directory `herd submit` ran in.
    pub workdir: &'a Path,
    /// Slurm's own output of the batch step (herd's stdout and stderr): `slurm-<job id>.out`
    /// in the config's logs directory.
    pub logs_dir: &'a Path,
    /// More `#SBATCH` options (`--sbatch-arg`), after herd's own.
    pub sbatch_args: &'a [String],
    /// Extra arguments for the training script.
    pub extra_args: &'a [String],
    /// Seconds before the time limit at which Slurm sends herd SIGUSR1 (`--signal=B:USR1@S`):
    /// the ranks are told to checkpoint. `None`: no warning.
    pub warning: Option<u64>,
    /// `--requeue`: the job may be requeued, and herd requeues it when it stops for the time
    /// limit or a preemption; Slurm's output of each run is appended to the same file.
    pub requeue: bool,
}

/// The job name for config `config`: `herd-` and its file stem.
pub fn job_name(config: &Path) -> String {
    let stem = config.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let stem: String =
        stem.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    format!("herd-{stem}")
}

/// The script. `--no-kill`: a node that fails does not end the allocation, so that herd can
/// go on on a spare (`[job] nnodes`) or without it (`restart.min_nodes`). Paths are in double
/// quotes (sbatch reads them as one word; [`bad_path`] refuses what it would not); the
/// caller's other values are checked by [`bad_value`].
pub fn script(s: &Submission<'_>) -> String {
    let mut t = String::from("#!/bin/sh\n");
    let path = |p: &Path| p.display().to_string();
    let mut directive = |line: String| {
        let _ = writeln!(t, "#SBATCH {line}");
    };
    directive(format!("--job-name={}", s.name));
    directive(format!("--nodes={}", s.nodes));
    directive("--no-kill".into());
    directive(format!("--chdir=\"{}\"", path(s.workdir)));
    directive(format!("--output=\"{}/slurm-%j.out\"", path(s.logs_dir)));
    for (option, value) in [("partition", s.partition), ("time", s.time), ("account", s.account)] {
        if let Some(v) = value {
            directive(format!("--{option}={v}"));
        }
    }
    if let Some(secs) = s.warning {
        directive(format!("--signal=B:USR1@{secs}"));
    }
    if s.requeue {
        directive("--requeue".into());
        directive("--open-mode=append".into());
    }
    for arg in s.sbatch_args {
        directive(arg.clone());
    }
    let _ = writeln!(
        t,
        "# Written by `herd submit`: herd runs the config on this allocation's nodes, through srun."
    );
    let (herd, config) = (path(s.herd), path(s.config));
    let mut line = ShellLine::new();
    line.args(["exec", herd.as_str(), "run", "--slurm", "--no-progress"]);
    if s.requeue {
        line.arg("--requeue");
    }
    line.args(["-c", config.as_str()]);
    if !s.extra_args.is_empty() {
        line.arg("--").args(s.extra_args);
    }
    let line = line.line();
    t + &line + "\n"
}

/// A Slurm time limit (`--time`) in seconds: `MINUTES`, `MINUTES:SECONDS`, `HOURS:MINUTES:SECONDS`,
/// `DAYS-HOURS`, `DAYS-HOURS:MINUTES`, `DAYS-HOURS:MINUTES:SECONDS`. `None` for what is not
/// one of them (`UNLIMITED` included: no limit to warn before).
pub fn time_limit_secs(time: &str) -> Option<u64> {
    let num = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u64>().ok()).flatten()
    };
    let (days, rest) = match time.split_once('-') {
        Some((d, rest)) => (Some(num(d)?), rest),
        None => (None, time),
    };
    let parts: Vec<u64> = rest.split(':').map(num).collect::<Option<_>>()?;
    let secs = match (days, parts.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(d), [h]) => d * 86400 + h * 3600,
        (Some(d), [h, m]) => d * 86400 + h * 3600 + m * 60,
        (Some(d), [h, m, s]) => d * 86400 + h * 3600 + m * 60 + s,
        _ => return None,
    };
    Some(secs)
}

/// The longest warning `sbatch --signal` takes, in seconds.
pub const MAX_WARNING_SECS: u64 = 65535;

/// sbatch options that would change what the script sets and herd relies on: the node count
/// the config was checked for (`--ntasks` caps it too), `--no-kill` (a failed node does not
/// end the allocation), the directory herd starts in, where Slurm's output goes (herd names
/// the file, appended to across requeues), one herd per config (`--array` would start
/// several, `--wrap` none), and the time limit, its warning and the requeue, which herd
/// submit's own options give (it checks the warning against the time limit).
#[rustfmt::skip]
const REFUSED_SBATCH_OPTIONS: [&str; 21] = [
    "-N", "--nodes", "-n", "--ntasks", "-k", "--no-kill", "-D", "--chdir", "-o", "--output", "-e", "--error",
    "-a", "--array", "--wrap", "-t", "--time", "--signal", "--requeue", "--no-requeue", "--open-mode",
];

/// Why `arg` cannot be a `--sbatch-arg`, if it cannot: it is not an option (a bare word such
/// as `hetjob` splits the job), or it is one herd sets itself, abbreviated or not.
pub fn refused_sbatch_arg(arg: &str) -> Option<String> {
    if !arg.starts_with('-') {
        return Some("it is not an sbatch option (one word starting with -)".into());
    }
    let option = crate::config::refused_option(arg, &REFUSED_SBATCH_OPTIONS)?;
    let instead = match option {
        "-N" | "--nodes" | "-n" | "--ntasks" => ": give the node count with -N",
        "-t" | "--time" => ": give the time limit with -t (herd checks --warn-before against it)",
        "--signal" => ": give the time limit's warning with --warn-before",
        "--requeue" | "--no-requeue" => ": the job is requeueable unless --no-requeue is given",
        _ => "",
    };
    Some(format!(
        "herd submit sets {option} itself, and a later #SBATCH line would undo it (herd relies on \
         the node count it checked the config for, --no-kill, the directory, its output file, \
         one herd per job, and the time limit, warning and requeue it checked){instead}"
    ))
}

/// Why `value` cannot be an `#SBATCH` word, if it cannot: sbatch splits its lines on
/// whitespace, reads quotes and backslashes, and ends a line at `#`.
pub fn bad_value(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        Some("it is empty")
    } else if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("it holds whitespace or a control character")
    } else if value.contains(['"', '\'', '\\', '#']) {
        Some("it holds a quote, a backslash or a #, which sbatch reads as its own")
    } else {
        None
    }
}

/// Why `path` cannot be a double-quoted `#SBATCH` path, if it cannot: spaces are fine there,
/// but not a quote, a backslash, a line break, or `%` (Slurm's file name patterns).
pub fn bad_path(path: &Path) -> Option<&'static str> {
    let p = path.to_str()?;
    if p.chars().any(|c| c.is_control()) || p.contains(['"', '\\', '%']) {
        Some("it holds a quote, a backslash, a % or a control character, which sbatch would read as its own")
    } else {
        None
    }
}

/// Submit `script` (`sbatch --parsable`, the script on stdin): the job id, or sbatch's words.
pub fn sbatch(script: &str) -> Result<String, String> {
    use std::io::Write;
    let mut child = std::process::Command::new("sbatch")
        .arg("--parsable")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start sbatch: {e}"))?;
    let written = child.stdin.take().expect("piped").write_all(script.as_bytes());
    let out = child.wait_with_output().map_err(|e| format!("sbatch: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // A site's wrapper may print more: the id is the last line.
    let id = stdout.lines().rev().find(|l| !l.trim().is_empty()).and_then(parse_job_id);
    match (written, out.status.success(), id) {
        (Ok(()), true, Some(id)) => Ok(id.to_string()),
        (_, true, None) => Err(format!(
            "sbatch succeeded but printed no job id ({:?}): the job may be queued all the same: \
             check `squeue --me` before submitting again",
            stdout.trim()
        )),
        _ => Err(format!("sbatch refused the job: {}", String::from_utf8_lossy(&out.stderr).trim())),
    }
}

/// The job id in `sbatch --parsable` output: `ID` or `ID;CLUSTER`.
pub fn parse_job_id(out: &str) -> Option<&str> {
    let id = out.trim().split(';').next()?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_allocates_and_runs_herd_with_the_config() {
        let args = ["--lr".to_string(), "3e-4 x".to_string()];
        let s = Submission {
            name: job_name(Path::new("/p/my cluster.toml")),
            nodes: 8,
            partition: Some("gpu"),
            time: None,
            account: Some("ml"),
            herd: Path::new("/opt/herd/bin/herd"),
            config: Path::new("/p/my cluster.toml"),
            workdir: Path::new("/p"),
            logs_dir: Path::new("/p/herd-logs"),
            sbatch_args: &["--exclusive".to_string()],
            extra_args: &args,
            warning: None,
            requeue: false,
        };
        assert_eq!(
            script(&s),
            "#!/bin/sh\n\
             #SBATCH --job-name=herd-my_cluster\n\
             #SBATCH --nodes=8\n\
             #SBATCH --no-kill\n\
             #SBATCH --chdir=\"/p\"\n\
             #SBATCH --output=\"/p/herd-logs/slurm-%j.out\"\n\
             #SBATCH --partition=gpu\n\
             #SBATCH --account=ml\n\
             #SBATCH --exclusive\n\
             # Written by `herd submit`: herd runs the config on this allocation's nodes, through srun.\n\
             exec /opt/herd/bin/herd run --slurm --no-progress -c '/p/my cluster.toml' -- --lr '3e-4 x'\n"
        );
    }

    #[test]
    fn a_warning_and_requeue_ask_slurm_for_them_and_herd_run_requeues() {
        let s = Submission {
            name: "herd-c".into(),
            nodes: 2,
            partition: None,
            time: Some("1"),
            account: None,
            herd: Path::new("/h"),
            config: Path::new("/p/c.toml"),
            workdir: Path::new("/p"),
            logs_dir: Path::new("/p/l"),
            sbatch_args: &[],
            extra_args: &[],
            warning: Some(30),
            requeue: true,
        };
        let text = script(&s);
        for line in [
            "#SBATCH --time=1\n",
            "#SBATCH --signal=B:USR1@30\n",
            "#SBATCH --requeue\n",
            "#SBATCH --open-mode=append\n",
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
        assert!(text.ends_with("exec /h run --slurm --no-progress --requeue -c /p/c.toml\n"), "{text}");
    }

    #[test]
    fn slurm_time_limits_in_every_form_and_none_else() {
        for (t, secs) in [
            ("1", 60),
            ("90", 5400),
            ("1:30", 90),
            ("2:00:00", 7200),
            ("1-0", 86400),
            ("1-2", 93600),
            ("1-2:30", 95400),
            ("0-0:0:45", 45),
        ] {
            assert_eq!(time_limit_secs(t), Some(secs), "{t}");
        }
        for bad in ["", "UNLIMITED", "infinite", "1:2:3:4", "a", "1-", "-1", "1-2-3", "1:x"] {
            assert_eq!(time_limit_secs(bad), None, "{bad}");
        }
    }

    #[test]
    fn sbatch_args_that_change_what_herd_sets_are_refused_abbreviated_or_not() {
        for bad in [
            "--nodes=1",
            "-N1",
            "-N",
            "--nod=1",
            "--ntasks=1",
            "-n1",
            "--no-kill=off",
            "-k",
            "--chdir=/x",
            "-D/x",
            "--output=o",
            "--out=o",
            "-eerr",
            "--error=e",
            "--array=0-3",
            "-a1",
            "--wrap=x",
            "-t10",
            "--time=1:00:00",
            "--ti=5",
            "--signal=B:USR1@60",
            "--requeue",
            "--no-requeue",
            "--open-mode=truncate",
        ] {
            let why = refused_sbatch_arg(bad).unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(why.starts_with("herd submit sets -"), "{bad}: {why}");
        }
        assert!(refused_sbatch_arg("--nodes=2").unwrap().ends_with("give the node count with -N"));
        assert!(refused_sbatch_arg("hetjob").unwrap().contains("not an sbatch option"));
        assert!(refused_sbatch_arg("--time=5").unwrap().ends_with("herd checks --warn-before against it)"));
        assert!(refused_sbatch_arg("--signal=USR1@9").unwrap().ends_with("with --warn-before"));
        for good in [
            "--exclusive",
            "--gres=gpu:8",
            "--nodelist=n[1-2]",
            "--ntasks-per-node=1",
            "-Jname",
            "--qos=hi",
            "--mem=0",
            "-C",
            "--constraint=a100",
            "--reservation=r",
            "--time-min=30",
            "--tmp=10G",
        ] {
            assert_eq!(refused_sbatch_arg(good), None, "{good}");
        }
    }

    #[test]
    fn values_and_job_ids() {
        assert_eq!(bad_value("gpu"), None);
        assert!(bad_value("gpu\n#SBATCH --x").is_some());
        assert!(bad_value("a b").is_some());
        assert!(bad_value("").is_some());
        assert!(bad_value("ml#x").is_some() && bad_value("a'b").is_some() && bad_value("a\\b").is_some());
        assert_eq!(bad_path(Path::new("/home/me/my project")), None);
        assert!(bad_path(Path::new("/p/50%")).is_some() && bad_path(Path::new("/p/\"x")).is_some());
        assert_eq!(parse_job_id("4242\n"), Some("4242"));
        assert_eq!(parse_job_id("4242;cluster\n"), Some("4242"));
        assert_eq!(parse_job_id("sbatch: error: x"), None);
    }
}
