//! The registry of node scripts: every program herd ships to a node (but `step.sh`, which
//! `transport::step` ships), each a file of this folder brought in with `include_str!` (POSIX
//! sh, Python's standard library, one perl shim), and the name the agent runs under. Each script's header says what it does and what its
//! positional arguments are; `shell` builds the lines that run them. The tests check every
//! script as it ships: shellcheck, Python's compile, perl's.

/// The process functions shared by the agent, the sweeps and the doctor's probe (POSIX sh).
/// See the header of `procs.sh`.
pub const PROCS_SCRIPT: &str = include_str!("procs.sh");

/// The node agent (POSIX sh), after the process functions it uses. See the header of
/// `agent.sh` for its protocol.
pub const AGENT_SCRIPT: &str = concat!(include_str!("procs.sh"), include_str!("agent.sh"));

/// herd's output multiplexer (Python, standard library only). See the header of `mux.py`.
pub const MUX_SCRIPT: &str = include_str!("mux.py");

/// The newest match of a glob in the workdir, for `{latest:GLOB}` (POSIX sh). See the header
/// of `latest.sh`.
pub const LATEST_SCRIPT: &str = include_str!("latest.sh");

/// The doctor's trial in a container: the launcher, its `#!` interpreter, and its Python's
/// torch (POSIX sh). See the header of `container_trial.sh`.
pub const CONTAINER_TRIAL_SCRIPT: &str = include_str!("container_trial.sh");

/// A node's NCCL flight-recorder dumps, framed by size (POSIX sh). See the header of
/// `nccl_dumps.sh`, and `nccl`, which reads them.
pub const NCCL_DUMPS_SCRIPT: &str = include_str!("nccl_dumps.sh");

/// A node's facts for the doctor's probe (POSIX sh), after the process functions it uses. See
/// the header of `facts.sh`.
pub const FACTS_SCRIPT: &str = concat!(include_str!("procs.sh"), include_str!("facts.sh"));

/// The Python and torch facts, which `facts.sh` runs with the job's interpreter. See its
/// header.
pub const FACTS_PY: &str = include_str!("facts.py");

/// The doctor's probe of one node: its facts, and its side of the master port's test (POSIX
/// sh). See the header of `probe.sh`.
pub const PROBE_SCRIPT: &str = include_str!("probe.sh");

/// The master port's test, listener and connection (Python, standard library only), which
/// `probe.sh` runs with the job's interpreter. See the header of `port_test.py`.
pub const PORT_TEST_PY: &str = include_str!("port_test.py");

/// `herd doctor --deep`'s measurement of the network between the nodes, run by the job's own
/// Python and torch (see `doctor::net`).
pub const NETCHECK_PY: &str = include_str!("netcheck.py");

/// The child-subreaper shim in Python: PR_SET_CHILD_SUBREAPER (36), then exec the agent's
/// argv; without ctypes, just the exec. Run with `-S -I -c` by the system Python, or by the perl
/// shim. Like the perl shim, its file holds no comment: it is on every agent's command line.
pub const SUBREAPER_PY: &str = include_str!("subreaper.py");

/// The same in perl, which has no libc call but `syscall`: prctl's number for the machine
/// perl itself was built for (its ELF header's `e_machine`: x86-64, AArch64, RISC-V, PowerPC
/// 64, s390; `use Config` would cost 5 ms), else the Python shim if there is one, else just
/// the exec. perl has no `-I`: sh starts it with `PERL_BADLANG=0` (no locale warning on the
/// agent's message channel), `PERL5OPT` and `PERL_HASH_SEED_DEBUG` empty (no module or taint
/// switch from the user's env, no line on stderr), and each user's own value, if any, in
/// `HERD_<NAME>` (`x` and the value), which this puts back before the exec. `$py` (the
/// Python) and `$shim` (`SUBREAPER_PY`) are set by the line in front of it
/// (`shell::subreaper_line`).
pub const SUBREAPER_PL: &str = include_str!("subreaper.pl");

/// Name the agent runs under (`$0`), which also marks it in `ps`.
pub const AGENT_NAME: &str = "herd-agent";

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    /// The agent as it ships (procs.sh, then agent.sh) passes shellcheck as POSIX sh. SC2317
    /// ("unreachable") is left out: procs.sh's functions are called from the sweeps' bodies,
    /// which the agent evals. Needs shellcheck (scripts/test.sh installs it).
    #[test]
    fn the_shipped_agent_passes_shellcheck() {
        shellcheck("agent.sh", AGENT_SCRIPT);
    }

    /// `script`, written to a file `name`, passes shellcheck as POSIX sh (SC2317 left out,
    /// see above).
    fn shellcheck(name: &str, script: &str) {
        let out = check(&["shellcheck", "-s", "sh", "-e", "SC2317"], name, script)
            .unwrap_or_else(|e| panic!("shellcheck: {e} (apt-get install shellcheck; scripts/test.sh does)"));
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stdout));
    }

    /// `checker` (a command and its options) run on `script`, written to a file `name`.
    fn check(checker: &[&str], name: &str, script: &str) -> std::io::Result<std::process::Output> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(name);
        std::fs::write(&path, script)?;
        Command::new(checker[0]).args(&checker[1..]).arg(&path).output()
    }

    /// The agent tells herd's output multiplexer by words of mux.py's first line, in its
    /// command line (`relays` in agent.sh): never by words an edit of mux.py would drop.
    #[test]
    fn the_agent_knows_the_multiplexer_by_its_first_line() {
        let grep = AGENT_SCRIPT.lines().find(|l| l.contains("grep -laF")).expect("relays' grep");
        let words = grep.split('\'').nth(1).expect("a quoted text");
        assert!(
            MUX_SCRIPT.lines().next().unwrap().contains(words),
            "{words:?} is not in mux.py's first line"
        );
    }

    /// Every other node script in sh, as it ships, passes shellcheck too (`facts.sh` without
    /// the process functions it is shipped after, which the agent's check covers).
    #[test]
    fn the_shipped_node_scripts_pass_shellcheck() {
        let scripts = [
            ("latest.sh", LATEST_SCRIPT),
            ("container_trial.sh", CONTAINER_TRIAL_SCRIPT),
            ("nccl_dumps.sh", NCCL_DUMPS_SCRIPT),
            ("probe.sh", PROBE_SCRIPT),
            ("facts.sh", include_str!("facts.sh")),
        ];
        for (name, script) in scripts {
            shellcheck(name, script);
        }
    }

    /// Every node script in Python, as it ships, compiles (`python3 -m py_compile`).
    #[test]
    fn the_shipped_python_scripts_compile() {
        let scripts = [
            ("mux.py", MUX_SCRIPT),
            ("port_test.py", PORT_TEST_PY),
            ("facts.py", FACTS_PY),
            ("netcheck.py", NETCHECK_PY),
            ("subreaper.py", SUBREAPER_PY),
        ];
        for (name, script) in scripts {
            let out = check(&["python3", "-m", "py_compile"], name, script).unwrap();
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }

    /// The perl shim, as it ships, compiles (`perl -c`). Skipped where this machine has no
    /// perl (a node without one runs the Python shim).
    #[test]
    fn the_shipped_perl_shim_compiles() {
        let out = match check(&["perl", "-c"], "subreaper.pl", SUBREAPER_PL) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("skipped: no perl on this machine to check subreaper.pl with");
                return;
            }
            out => out.unwrap(),
        };
        assert!(out.status.success(), "subreaper.pl: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The multiplexer ends as soon as its launcher does, with its status, even while what the
    /// launcher left holds its output open: each run's time beyond a bare start of the same
    /// interpreter. It used to notice the exit at its loop's next turn (up to 200 ms, a median
    /// of 100 ms over runs).
    #[test]
    fn the_multiplexer_ends_as_soon_as_its_launcher_does() {
        let py = "/usr/bin/python3";
        let time = |args: &[&str]| {
            let start = std::time::Instant::now();
            let status =
                Command::new(py).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
            (start.elapsed(), status.code())
        };
        let mut extra: Vec<std::time::Duration> = (0..7)
            .map(|_| {
                let (bare, _) = time(&["-IS", "-c", "import os, select, _signal, _socket"]);
                let (mux, code) = time(&["-IS", "-c", MUX_SCRIPT, "sh", "-c", "sleep 2 & exit 3"]);
                assert_eq!(code, Some(3), "the launcher's status");
                mux.saturating_sub(bare)
            })
            .collect();
        extra.sort();
        assert!(extra[3] < std::time::Duration::from_millis(60), "beyond a bare start: {extra:?}");
    }
}
