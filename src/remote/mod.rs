//! What runs on a node: the agent script, the job snippet it starts, the env block it reads
//! from stdin, and the messages it writes back. Pure: building strings and parsing lines.

use std::fmt::Write as _;
use std::sync::Arc;

pub mod frames;
pub mod protocol;
pub mod scripts;

use scripts::{AGENT_NAME, AGENT_SCRIPT, MUX_SCRIPT, PROCS_SCRIPT, SUBREAPER_PL, SUBREAPER_PY};

/// The argv that runs the node script `script` (one of this folder's, POSIX sh):
/// `sh -c SCRIPT NAME ARGS...`, its inputs positional arguments, never written into its
/// text. `name` is its `$0`, which names it in `ps` and in its errors.
pub fn script_argv<S: AsRef<str>>(
    script: &str,
    name: &str,
    args: impl IntoIterator<Item = S>,
) -> Vec<String> {
    let mut argv = vec!["sh".to_string(), "-c".to_string(), script.to_string(), name.to_string()];
    argv.extend(args.into_iter().map(|a| a.as_ref().to_string()));
    argv
}

/// `argv` as one command line for `sh`, each word quoted once.
pub fn command_line<S: AsRef<str>>(argv: impl IntoIterator<Item = S>) -> String {
    argv.into_iter().map(|w| quote(w.as_ref())).collect::<Vec<_>>().join(" ")
}

/// A command line for `sh` built word by word: every `arg` is quoted once, every `raw` is shell
/// text that the shell expands (`"$PWD"`, `--master-port "$MASTER_PORT"`). The one place outside
/// this module where shell words are built, so that quoting lives here.
#[derive(Debug, Default, Clone)]
pub struct ShellLine(Vec<String>);

impl ShellLine {
    pub fn new() -> ShellLine {
        ShellLine::default()
    }

    /// One word, quoted.
    pub fn arg(&mut self, word: impl AsRef<str>) -> &mut ShellLine {
        self.0.push(quote(word.as_ref()));
        self
    }

    /// Words, each quoted.
    pub fn args<S: AsRef<str>>(&mut self, words: impl IntoIterator<Item = S>) -> &mut ShellLine {
        self.0.extend(words.into_iter().map(|w| quote(w.as_ref())));
        self
    }

    /// Shell text as it is: the caller's expansion, never a user's value.
    pub fn raw(&mut self, text: impl Into<String>) -> &mut ShellLine {
        self.0.push(text.into());
        self
    }

    /// How many words so far.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends `other`'s words.
    pub fn extend(&mut self, other: ShellLine) -> &mut ShellLine {
        self.0.extend(other.0);
        self
    }

    /// The words joined by spaces.
    pub fn line(&self) -> String {
        self.0.join(" ")
    }
}

/// `command`, as it reads once `sh -c` has quoted it a second time (a container's shell), with
/// the output multiplexer's text replaced by `name`.
pub fn name_nested_mux(command: &str, name: &str) -> String {
    let nested = quote(MUX_SCRIPT).replace('\'', "'\\''");
    command.replace(&nested, name)
}

/// The command for `sh` that runs the node script `script`: its `script_argv`, quoted once.
pub fn script_call<S: AsRef<str>>(script: &str, name: &str, args: impl IntoIterator<Item = S>) -> String {
    command_line(script_argv(script, name, args))
}

/// `command` (a launcher line, as it would follow `exec`) run under the output multiplexer,
/// by `python`, as a line that follows `exec`: each rank's stdout and stderr reach herd as
/// streams of their own. The line itself runs in `sh` under the multiplexer, so that it sees
/// `HERD_RANK_WRAPPER`. `required`: without that interpreter the job fails (a torch launcher
/// needs it anyway, and its ranks the wrapper); otherwise the command runs without.
pub fn under_mux(python: &str, command: &str, required: bool) -> String {
    let py = quote(python);
    let mux = format!("{py} -IS -c {} sh -c {}", quote(MUX_SCRIPT), quote(&format!("exec {command}")));
    if required {
        return mux;
    }
    let choose = format!("if command -v {py} >/dev/null 2>&1; then exec {mux}; fi\nexec {command}");
    format!("sh -c {}", quote(&choose))
}

/// The interpreter that makes a remote agent a child subreaper, first choice: perl does it in
/// about 5 ms (Debian's perl-base is essential, and most other nodes have it), where Python's
/// ctypes takes 15 to 25 ms on every node of every start.
const SUBREAPER_PERL: &str = "/usr/bin/perl";

/// The second choice: the system Python, which needs no shims, virtualenvs or site packages
/// (`-S -I`).
const SUBREAPER_PYTHON: &str = "/usr/bin/python3";

/// Quote one word for a POSIX shell. Every byte arrives unchanged.
pub fn quote(word: &str) -> String {
    if !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b)) {
        return word.to_string();
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for c in word.chars() {
        if c == '\'' {
            out.push_str(r#"'\''"#);
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// The longest word of a login shell line, quotes included. BSD csh takes a word of at most
/// BUFSIZ bytes (8 KiB with glibc, 1 KiB on the BSDs): "Word too long."
const LOGIN_WORD: usize = 1000;

/// The longest line a login shell is given: sshd runs it as one argument (`$SHELL -c LINE`),
/// and Linux takes at most 128 KiB in one (MAX_ARG_STRLEN, its NUL included).
pub const MAX_LOGIN_LINE: usize = 128 * 1024 - 1;

/// The script of the line for the login shell (see `for_login_shell`): its arguments, joined,
/// are the body of a double-quoted string whose value is printf's format.
const LOGIN_SCRIPT: &str = concat!(
    "herd_f=; for herd_w do herd_f=$herd_f$herd_w; done; ",
    r#"set -- "$(printf "\047")" "$(printf "\134\134")"; eval "herd_f=\"$herd_f\""; eval "$(printf "$herd_f")""#
);

/// `command`, a line for `sh`, as a line that any login shell runs with `-c` (as sshd runs a
/// remote command, whatever the user's shell): `exec sh -c '…' sh '…' '…'`, whose script joins
/// its arguments into a printf format that rebuilds `command` for `eval`. csh and tcsh take no
/// newline inside quotes and expand `!` even in single quotes; fish reads `\\` and `\'` in
/// them; `$` in double quotes means something else to each; BSD csh takes no word longer than
/// `LOGIN_WORD`: the line holds none of these, nor any byte outside printable ASCII, and each
/// word is short and single-quoted. The format is the body of a double-quoted string for sh:
/// `'` and `\`, the most frequent (nested quoting), are `$1` and `$2`, whose values printf
/// writes as they are; the others are escapes (`\n`, `\$`, `\041`). A word never ends in a
/// backslash. The positional parameters are cleared before `command` runs.
pub fn for_login_shell(command: &str) -> String {
    let mut line = String::with_capacity(command.len() * 5 / 4 + 256);
    let _ = write!(line, "exec sh -c '{LOGIN_SCRIPT}' sh '");
    let mut word = 0;
    let mut unit = String::with_capacity(4);
    for b in "set --\n".bytes().chain(command.bytes()) {
        unit.clear();
        login_format_unit(b, &mut unit);
        if word + unit.len() + 2 > LOGIN_WORD {
            line.push_str("' '");
            word = 0;
        }
        line.push_str(&unit);
        word += unit.len();
    }
    line.push('\'');
    line
}

/// One byte of `command` in the format of `for_login_shell`.
fn login_format_unit(b: u8, unit: &mut String) {
    match b {
        b'\'' => unit.push_str("$1"),
        b'\\' => unit.push_str("$2"),
        b'\n' => unit.push_str("\\n"),
        b'%' => unit.push_str("%%"),
        // Special to sh in double quotes; printf writes the character itself.
        b'$' | b'`' | b'"' => {
            unit.push('\\');
            unit.push(b as char);
        }
        b'!' => unit.push_str("\\041"),
        b' '..=b'~' => unit.push(b as char),
        _ => {
            let _ = write!(unit, "\\{b:03o}");
        }
    }
}

/// What the agent needs to start one node's job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInvocation {
    /// Seconds between SIGTERM and SIGKILL when the group is torn down.
    pub grace_secs: u64,
    /// Seconds between heartbeat lines.
    pub heartbeat_secs: u64,
    /// `NAME=VALUE` held in the environment of every job process (the env block sets it).
    pub marker: String,
    /// The job as a shell snippet (see [`job_snippet`]). Shared: every copy of a node's
    /// invocation (the agent started ahead, the attempt's) holds the same one, some KiB.
    pub job: Arc<str>,
    /// A shell command the agent runs once the job is gone, whichever way it went (e.g. remove
    /// the job's container). No env; its output is discarded.
    pub cleanup: Option<String>,
    /// A shell command the agent runs before it starts the job (sweep this config's leftovers),
    /// with no env and stdin from /dev/null. Each line it prints is reported as `herd-agent
    /// swept LINE`.
    pub presweep: Option<String>,
    /// After the presweep, report the node's ports in use, and only then read the env block
    /// (on the master, when herd chooses its port).
    pub report_ports: bool,
    /// The preflight's probe as a job snippet, run in the same login before the job (see
    /// docs/design/agent.md, "One login per node"): its own env block first, its output as
    /// `Fact` messages, then `Probed`; the job's env block then ends it and starts the job.
    pub probe: Option<Arc<str>>,
}

impl AgentInvocation {
    /// argv for running the agent on this machine:
    /// `sh -c AGENT herd-agent GRACE HEARTBEAT MARKER JOB CLEANUP PRESWEEP PORTS PROBE`.
    pub fn local_argv(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            AGENT_SCRIPT.into(),
            AGENT_NAME.into(),
            self.grace_secs.to_string(),
            self.heartbeat_secs.to_string(),
            self.marker.clone(),
            self.job.to_string(),
            self.cleanup.clone().unwrap_or_default(),
            self.presweep.clone().unwrap_or_default(),
            if self.report_ports { "ports" } else { "" }.into(),
            self.probe.as_deref().unwrap_or_default().to_string(),
        ]
    }

    /// The command for `sh` that ssh runs (through `for_login_shell`) and srun: the agent's
    /// argv, started through /usr/bin/perl or python3 where the node has one, which makes it a
    /// child subreaper (the flag survives exec) and then execs it unchanged.
    pub fn remote_command(&self) -> String {
        subreaper_line(&command_line(self.local_argv()), SUBREAPER_PERL, SUBREAPER_PYTHON)
    }
}

/// The texts of many nodes' invocations, each held once: a probe's is the same on every
/// worker, and a `command` job's on every node, some KiB each. For while the invocations are
/// made: it keeps every text it has seen.
#[derive(Default)]
pub struct SharedTexts(std::sync::Mutex<std::collections::HashSet<Arc<str>>>);

impl SharedTexts {
    /// `inv`, its job and probe replaced by the copies already held of the same texts.
    pub fn invocation(&self, mut inv: AgentInvocation) -> AgentInvocation {
        inv.job = self.text(inv.job);
        inv.probe = inv.probe.map(|p| self.text(p));
        inv
    }

    fn text(&self, text: Arc<str>) -> Arc<str> {
        let mut held = self.0.lock().expect("not poisoned");
        match held.get(&text) {
            Some(same) => same.clone(),
            None => {
                held.insert(text.clone());
                text
            }
        }
    }
}

/// `set -- ARGV`, then exec it as a child subreaper: through `perl` if the node has it, else
/// through `python` (the flag survives exec), else unchanged.
fn subreaper_line(argv: &str, perl: &str, python: &str) -> String {
    let shim = quote(SUBREAPER_PY);
    let perl_shim = format!(
        "my ($py, $shim) = ({}, {});\n{SUBREAPER_PL}",
        perl_string(python),
        perl_string(SUBREAPER_PY)
    );
    format!(
        "set -- {argv}; [ -x {perl} ] && HERD_PERL_BADLANG=${{PERL_BADLANG+x$PERL_BADLANG}} \
         HERD_PERL5OPT=${{PERL5OPT+x$PERL5OPT}} HERD_PERL_HASH_SEED_DEBUG=${{PERL_HASH_SEED_DEBUG+x$PERL_HASH_SEED_DEBUG}} \
         PERL_BADLANG=0 PERL5OPT= PERL_HASH_SEED_DEBUG= exec {perl} -e {} \"$@\"; \
         [ -x {python} ] && exec {python} -S -I -c {shim} \"$@\"; exec \"$@\"",
        quote(&perl_shim)
    )
}

/// `text` as a perl single-quoted string.
fn perl_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The job snippet, for `sh`: enter the workdir, run `setup` (in bash, see [`in_bash`]), then
/// `exec` the launcher so that the launcher is the leader of the group the agent tears down.
pub fn job_snippet(workdir: &str, setup: Option<&str>, command: &str) -> String {
    let mut s = String::new();
    let wd = quote(workdir);
    // The workdir is an argument of printf, never part of its format or of a double-quoted
    // string: a quoted word inside double quotes is expanded again.
    let _ = writeln!(
        s,
        "cd -- {wd} || {{ printf 'herd: cannot enter workdir \"%s\" on %s\\n' {wd} \"$(hostname)\" >&2; exit 2; }}"
    );
    // Where PyTorch's NCCL flight recorder dumps (see `plan`): relative to the workdir, made
    // absolute here (the script may change directory), and its folder made.
    s += "case ${TORCH_NCCL_DEBUG_INFO_TEMP_FILE:-/} in /*) ;; *) export TORCH_NCCL_DEBUG_INFO_TEMP_FILE=\"$PWD/$TORCH_NCCL_DEBUG_INFO_TEMP_FILE\" ;; esac\n";
    s += "[ -z \"${TORCH_NCCL_DEBUG_INFO_TEMP_FILE:-}\" ] || mkdir -p -- \"${TORCH_NCCL_DEBUG_INFO_TEMP_FILE%/*}\" 2>/dev/null\n";
    match setup {
        None => s += &setup_and_exec(None, command),
        Some(_) => s += &in_bash(&setup_and_exec(setup, command)),
    }
    // Every node's invocation holds one for the attempt: not the capacity of its growth too.
    s.shrink_to_fit();
    s
}

/// `snippet` run by bash where the node has it (else by sh): what `setup` and `herd exec`
/// commands are written for. Under sshd, bash reads ~/.bashrc, which gives `setup` the shell
/// functions of conda, pyenv or modules that it defines; the agent, and a job without setup,
/// run in sh, which reads nothing: the login's shell init is not paid twice.
pub fn in_bash(snippet: &str) -> String {
    format!(
        "herd_sh=sh; command -v bash >/dev/null 2>&1 && herd_sh=bash; exec \"$herd_sh\" -c {}",
        quote(snippet)
    )
}

/// The part of the job snippet after `cd`: `setup`, then `exec` the launcher. On its own, the
/// snippet that runs inside a container.
pub fn setup_and_exec(setup: Option<&str>, command: &str) -> String {
    let mut s = String::new();
    if let Some(setup) = setup {
        // Braces on their own lines so that a setup ending in a comment still parses.
        let _ = writeln!(s, "{{\n{setup}\n}} || {{ herd_rc=$?; echo \"herd: setup failed with exit $herd_rc\" >&2; exit $herd_rc; }}");
    }
    let _ = write!(s, "exec {command}");
    s
}

/// The env block the agent reads from stdin: a line count, then `export NAME='value'` lines.
/// Names must already be valid shell identifiers (the config checks them).
pub fn env_block<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u8> {
    let mut body = String::new();
    for (name, value) in vars {
        debug_assert!(crate::config::is_env_name(name), "invalid env name {name:?}");
        let _ = writeln!(body, "export {name}={}", quote(value));
    }
    let lines = body.bytes().filter(|&b| b == b'\n').count();
    format!("{lines}\n{body}").into_bytes()
}

/// Which of a config's processes a sweep stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepScope<'a> {
    /// Those whose agent is gone: a live run, of this herd or another, is never touched.
    Leftovers,
    /// All of them, live agent or not.
    All,
    /// All of them but those whose marker entry starts with this (live agent or not): as a
    /// restart starts, what is left of the run's earlier attempts, whose agents herd has given
    /// up on, and never a node's new job, started beside it on a shared host.
    AllBut(&'a str),
}

/// The shell call (for a shell where `procs.sh` is defined) that stops a config's processes
/// whose marker entry starts with `prefix`, in `scope` (SIGTERM, up to `grace_secs`, SIGKILL),
/// and prints their pids.
pub fn sweep_call(prefix: &str, scope: SweepScope<'_>, grace_secs: u64) -> String {
    let plain = |p: &str| p.bytes().all(|b| b.is_ascii_alphanumeric() || b"_=:-".contains(&b));
    debug_assert!(plain(prefix), "{prefix}");
    let scope = match scope {
        SweepScope::Leftovers => "leftovers".to_string(),
        SweepScope::All => "all".to_string(),
        SweepScope::AllBut(skip) => {
            debug_assert!(plain(skip) && skip.starts_with(prefix), "{skip}");
            quote(&format!("except={skip}"))
        }
    };
    format!("herd_sweep {} {scope} {grace_secs}", quote(prefix))
}

/// A command for a node's login shell that runs `body` in `sh`, with `procs.sh` defined: the
/// login shell may be bash, dash or zsh, which splits words differently.
pub fn with_procs(body: &str) -> String {
    format!("sh -c {}", quote(&format!("{PROCS_SCRIPT}{body}\n")))
}

/// What `herd stacks` runs on the node `host`: every rank of a live run of the config with
/// `config_key` (its agent alive) that runs there as `host` (`HERD_NODE`), dumped at once as
/// the agent does on a hang. Two nodes of the config may be one machine (localhost and
/// 127.0.0.1): each reports its own ranks only, never the other's too.
pub fn stacks_command(config_key: &str, host: &str) -> String {
    let marker = crate::marker::Marker::config(config_key).entry();
    let body = format!(
        "# shellcheck disable=SC2046\nherd_stacks $(herd_on_node {} $(herd_live_job {}))",
        quote(host),
        quote(&marker)
    );
    with_procs(&body)
}

#[cfg(test)]
mod tests {
    use super::protocol::{parse_agent_line, parse_pids, AgentMessage, Control};
    use super::*;

    /// Equal texts are held once, whichever invocation brought them; different ones apart.
    #[test]
    fn shared_texts_hold_each_text_once() {
        let inv = |job: &str, probe: &str| AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 1,
            marker: "M=1".into(),
            job: job.into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: Some(probe.into()),
        };
        let shared = SharedTexts::default();
        let a = shared.invocation(inv("exec true", "probe worker"));
        let b = shared.invocation(inv("exec true", "probe worker"));
        let c = shared.invocation(inv("exec false", "probe master"));
        assert!(Arc::ptr_eq(&a.job, &b.job));
        assert!(Arc::ptr_eq(a.probe.as_ref().unwrap(), b.probe.as_ref().unwrap()));
        assert!(!Arc::ptr_eq(&a.job, &c.job) && &*c.job == "exec false");
        assert_eq!(c.probe.as_deref(), Some("probe master"));
    }

    use proptest::prelude::*;
    use std::process::{Command, Stdio};

    fn sh_echo(words: &[String]) -> Vec<u8> {
        let script =
            format!("printf '%s\\0' {}", words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "));
        Command::new("sh").arg("-c").arg(script).output().unwrap().stdout
    }

    #[test]
    fn quote_keeps_plain_words_readable() {
        assert_eq!(quote("train.py"), "train.py");
        assert_eq!(quote("--nproc-per-node=8"), "--nproc-per-node=8");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r#"'it'\''s'"#);
    }

    #[test]
    fn nasty_values_survive_the_shell() {
        let words: Vec<String> =
            ["a b", "'", "\"", "$HOME", "`id`", "\\", ";|&*", "x\ny", "\t", "$(id)", "-n", "é✓"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let out = sh_echo(&words);
        let got: Vec<&[u8]> = out.split(|&b| b == 0).filter(|s| !s.is_empty()).collect();
        assert_eq!(got.len(), words.len());
        for (g, w) in got.iter().zip(&words) {
            assert_eq!(*g, w.as_bytes());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_string_round_trips_through_sh(s in "[^\u{0}]{0,40}") {
            let out = sh_echo(std::slice::from_ref(&s));
            prop_assert_eq!(out, [s.as_bytes(), b"\0"].concat());
        }

        #[test]
        fn any_env_value_round_trips_through_the_agent(v in "[^\u{0}]{0,40}") {
            let inv = AgentInvocation { grace_secs: 1, heartbeat_secs: 60, marker: format!("HERD_T_MARK={}", test_mark()), job: "printf '%s' \"$HERD_T\"".into(), cleanup: None, presweep: None, report_ports: false, probe: None };
            let out = run_agent(&inv, &env_block([("HERD_T", v.as_str())]));
            prop_assert_eq!(String::from_utf8_lossy(&out.stdout), v);
        }
    }

    /// The agent as a node's login shell starts it for sshd: `sh -c` of its remote command
    /// line, with all three pipes.
    fn spawn_remote(inv: &AgentInvocation) -> std::process::Child {
        spawn_under("sh", inv)
    }

    /// The agent as sshd starts it where the login shell is `shell`.
    fn spawn_under(shell: &str, inv: &AgentInvocation) -> std::process::Child {
        Command::new(shell)
            .arg("-c")
            .arg(for_login_shell(&inv.remote_command()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The agent on this machine with all three pipes.
    fn spawn_agent(inv: &AgentInvocation) -> std::process::Child {
        let argv = inv.local_argv();
        Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Run the agent here, feeding `input` and holding its stdin open until the job is done
    /// (closing it early is the signal to tear the job down).
    fn run_agent(inv: &AgentInvocation, input: &[u8]) -> std::process::Output {
        use std::io::{Read, Write};
        let mut child = spawn_agent(inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).unwrap();
        let mut stdout = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
        drop(stdin);
        let mut out = child.wait_with_output().unwrap();
        out.stdout = stdout;
        out
    }

    /// Reads the agent's messages up to `herd-agent pgid P`; returns P.
    fn started(stderr: &mut impl std::io::BufRead) -> u32 {
        let mut said = Vec::new();
        loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "no pgid line in {said:?}");
            match parse_agent_line(line.trim_end()) {
                AgentMessage::Started { pgid } => return pgid,
                other => said.push(other),
            }
        }
    }

    /// Live (not zombie) processes of a process group, from /proc.
    fn live_members(pgid: u32) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    return false;
                };
                let Some((_, rest)) = stat.rsplit_once(')') else {
                    return false;
                };
                let fields: Vec<&str> = rest.split_whitespace().collect();
                fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
            })
            .collect()
    }

    #[test]
    fn closing_stdin_tears_the_whole_group_down() {
        use std::io::{BufReader, Write};
        // The job ignores SIGTERM and leaves a grandchild: only SIGKILL of the group ends both.
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: "trap '' TERM; sleep 60 & sleep 60; echo not reached".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let mut child = spawn_agent(&inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([])).unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let pgid = started(&mut stderr);
        let group_alive = || !live_members(pgid).is_empty();
        // The agent names the group as it forks its leader, which then calls setsid.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !group_alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(group_alive());
        let started = std::time::Instant::now();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(out.stdout.is_empty());
        assert_eq!(live_members(pgid), Vec::<u32>::new(), "process group {pgid} outlived the agent");
    }

    /// Live processes whose argv is exactly `argv`.
    fn processes_with_argv(argv: &[&str]) -> Vec<u32> {
        let want: Vec<u8> = argv.iter().flat_map(|w| [w.as_bytes(), b"\0"].concat()).collect();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
            .collect()
    }

    #[test]
    fn nothing_of_the_heartbeat_outlives_the_agent() {
        // A heartbeat interval no other test uses, so that its sleep can be told apart.
        let beat = 4000 + std::process::id() % 1000;
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: beat.into(),
            marker: format!("HERD_T_MARK=beat-{beat}"),
            job: "sleep 0.3".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let out = run_agent(&inv, &env_block([]));
        assert!(out.status.success());
        let sleep = ["sleep".to_string(), beat.to_string()];
        let left = processes_with_argv(&[&sleep[0], &sleep[1]]);
        assert_eq!(left, Vec::<u32>::new(), "the heartbeat's sleep outlived the agent");
    }

    fn processes_with_env(entry: &str) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|&b| b == 0).any(|e| e == entry.as_bytes()))
                    .unwrap_or(false)
            })
            .collect()
    }

    #[test]
    fn processes_that_leave_the_group_are_found_by_marker_and_stopped() {
        use std::io::{BufReader, Write};
        let marker = format!("HERD_T_MARK=escape-{}", std::process::id());
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: marker.clone(),
            job: "setsid sleep 61 </dev/null >/dev/null 2>&1 & sleep 61".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let mut child = spawn_agent(&inv);
        let mut stdin = child.stdin.take().unwrap();
        let (name, value) = marker.split_once('=').unwrap();
        stdin.write_all(&env_block([(name, value)])).unwrap();
        started(&mut BufReader::new(child.stderr.take().unwrap()));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // The job's bash, its sleep, and the sleep that left for a session of its own.
        while processes_with_env(&marker).len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(processes_with_env(&marker).len(), 3);
        drop(stdin);
        child.wait().unwrap();
        assert_eq!(processes_with_env(&marker), Vec::<u32>::new(), "a process outlived the agent");
    }

    /// A sleep duration no other test uses, so that its process can be found by its argv.
    fn unique_secs(base: u32) -> String {
        (base + std::process::id() % 1000).to_string()
    }

    fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !cond() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        cond()
    }

    #[test]
    fn a_job_process_that_cleared_its_environment_is_stopped_too() {
        use std::io::Write;
        let secs = unique_secs(5000);
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: format!("setsid env -i sleep {secs} </dev/null >/dev/null 2>&1 & sleep 61").into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let mut child = spawn_agent(&inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([("HERD_T_MARK", test_mark().as_str())])).unwrap();
        assert!(wait_for(|| !processes_with_argv(&["sleep", &secs]).is_empty()), "the job did not start");
        drop(stdin);
        child.wait().unwrap();
        assert_eq!(processes_with_argv(&["sleep", &secs]), Vec::<u32>::new(), "env -i let it escape");
    }

    #[test]
    fn what_the_job_orphans_is_stopped_once_its_leader_has_exited() {
        // Through sh -c, as sshd runs it: the agent starts as a child subreaper, so the
        // sleep, orphaned when its shell exits, stays the agent's descendant.
        let secs = unique_secs(6000);
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: format!("setsid env -i sleep {secs} </dev/null >/dev/null 2>&1 & sleep 0.5; exit 0").into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        use std::io::{Read, Write};
        let mut child = spawn_remote(&inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([])).unwrap();
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        drop(stdin);
        child.wait().unwrap();
        assert!(stderr.contains("herd-agent exit 0"), "{stderr}");
        assert_eq!(
            processes_with_argv(&["sleep", &secs]),
            Vec::<u32>::new(),
            "the orphan outlived the agent"
        );
    }

    #[test]
    fn a_process_that_survives_sigkill_is_reported_not_passed_over() {
        use std::io::{BufRead, BufReader, Read, Write};
        // A frozen process (cgroup v1 freezer) is stuck in the kernel, as one on a hung NFS
        // mount or GPU driver is: SIGKILL waits until it is thawed.
        let freezer = std::path::Path::new("/sys/fs/cgroup/freezer");
        assert!(freezer.is_dir(), "this test needs the cgroup v1 freezer (and root)");
        let group = freezer.join(format!("herd-test-{}", std::process::id()));
        std::fs::create_dir_all(&group).unwrap();
        let secs = unique_secs(7000);
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: format!("sleep {secs} & wait").into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let mut child = spawn_agent(&inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([("HERD_T_MARK", test_mark().as_str())])).unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        assert!(wait_for(|| !processes_with_argv(&["sleep", &secs]).is_empty()), "the job did not start");
        let stuck = processes_with_argv(&["sleep", &secs])[0];
        std::fs::write(group.join("cgroup.procs"), stuck.to_string()).unwrap();
        std::fs::write(group.join("freezer.state"), "FROZEN").unwrap();
        drop(stdin);
        let mut said = String::new();
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap() > 0 {
            said.push_str(&line);
            line.clear();
        }
        std::fs::write(group.join("freezer.state"), "THAWED").unwrap();
        child.wait().unwrap();
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        assert!(wait_for(|| processes_with_argv(&["sleep", &secs]).is_empty()), "killed once thawed");
        let _ = std::fs::remove_dir(&group);
        let messages: Vec<AgentMessage> = said.lines().map(parse_agent_line).collect();
        assert!(messages.contains(&AgentMessage::Unstopped(vec![stuck])), "{said}");
    }

    #[test]
    fn term_fast_ends_a_launcher_as_soon_as_its_workers_are_gone() {
        use std::io::{BufRead, BufReader, Write};
        // A launcher like torchrun: on SIGTERM it stops its worker, then takes 8 s to exit, in
        // its own process as torch's interpreter shutdown does (bash's read -t on a FIFO: a
        // `sleep` would be another process of the job). The worker has a LOCAL_RANK and leaves
        // the group, as torchrun's do.
        let job = "f=$(mktemp -u); mkfifo \"$f\"; exec 7<>\"$f\"; rm \"$f\"; \
                   trap 'kill $w; read -t 8 -u 7; exit 1' TERM; LOCAL_RANK=0 setsid sleep 62 & w=$!; wait; wait";
        // Each run with a marker of its own: nothing of the first may reach the second.
        let run = |control: &[u8], mark: String| {
            let inv = AgentInvocation {
                grace_secs: 30,
                heartbeat_secs: 60,
                marker: format!("HERD_T_MARK={mark}"),
                job: in_bash(job).into(),
                cleanup: None,
                presweep: None,
                report_ports: false,
                probe: None,
            };
            let mut child = spawn_agent(&inv);
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(&env_block([("HERD_T_MARK", mark.as_str())])).unwrap();
            let mut stderr = BufReader::new(child.stderr.take().unwrap());
            started(&mut stderr);
            // The worker starts after the trap is set (`mktemp` and `mkfifo`, before it, carry
            // the marker too).
            let worker = || {
                let workers = processes_with_env("LOCAL_RANK=0");
                processes_with_env(&format!("HERD_T_MARK={mark}")).iter().any(|p| workers.contains(p))
            };
            assert!(wait_for(worker));
            let started = std::time::Instant::now();
            stdin.write_all(control).unwrap();
            stdin.flush().unwrap();
            let mut rest = String::new();
            while stderr.read_line(&mut rest).unwrap() > 0 {}
            child.wait().unwrap();
            (started.elapsed(), rest)
        };
        let (took, said) = run(&Control::TermFast.encode(), format!("{}-fast", test_mark()));
        assert!(took < std::time::Duration::from_secs(4), "term-fast took {took:?}: {said}");
        assert!(said.contains("herd-agent exit 137"), "the launcher was SIGKILLed: {said}");
        assert_eq!(processes_with_env(&format!("HERD_T_MARK={}-fast", test_mark())), Vec::<u32>::new());
        // Plain `term` leaves the launcher its time (here: its 8 s).
        let (took, said) = run(&Control::Term.encode(), format!("{}-slow", test_mark()));
        assert!(took >= std::time::Duration::from_secs(7), "term took only {took:?}: {said}");
        assert!(said.contains("herd-agent exit 1"), "{said}");
    }

    /// A `sleep` whose environment holds `HERD_MARKER=marker`.
    fn marked_sleep(marker: &str) -> std::process::Child {
        Command::new("sleep").arg("63").env("HERD_MARKER", marker).stdin(Stdio::null()).spawn().unwrap()
    }

    /// Run a sweep, as a node's login shell would; the pids it says it stopped.
    fn sweep(prefix: &str, scope: SweepScope) -> Vec<u32> {
        let out =
            Command::new("sh").arg("-c").arg(with_procs(&sweep_call(prefix, scope, 1))).output().unwrap();
        assert!(out.status.success());
        parse_pids(&String::from_utf8_lossy(&out.stdout))
    }

    #[test]
    fn sweep_stops_only_processes_whose_marker_matches() {
        let tag = format!("{}-{}", std::process::id(), rand_suffix());
        let mut mine = marked_sleep(&format!("k{tag}:run1:0:0"));
        let mut other_run = marked_sleep(&format!("k{tag}:run2:0:0"));
        assert_eq!(sweep(&format!("HERD_MARKER=k{tag}:run1:"), SweepScope::All), vec![mine.id()]);
        assert!(mine.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(other_run.try_wait().unwrap().is_none(), "another run's process was touched");
        other_run.kill().unwrap();
        let _ = other_run.wait();
    }

    #[test]
    fn a_restarts_sweep_stops_the_earlier_attempts_and_spares_its_own() {
        let tag = format!("{}-{}", std::process::id(), rand_suffix());
        let mut first = marked_sleep(&format!("k{tag}:run1:0:0"));
        let mut second = marked_sleep(&format!("k{tag}:run1:1:1"));
        // Attempt 2 already started on another node of the same host.
        let mut current = marked_sleep(&format!("k{tag}:run1:2:0"));
        let mut other_run = marked_sleep(&format!("k{tag}:run2:0:0"));
        let prefix = format!("HERD_MARKER=k{tag}:run1:");
        let mut swept = sweep(&prefix, SweepScope::AllBut(&format!("{prefix}2:")));
        swept.sort();
        assert_eq!(swept, vec![first.id(), second.id()]);
        for gone in [&mut first, &mut second] {
            assert!(gone.wait().unwrap().code().is_none(), "killed by a signal");
        }
        for spared in [&mut current, &mut other_run] {
            assert!(
                spared.try_wait().unwrap().is_none(),
                "a process of this attempt or another run was touched"
            );
            spared.kill().unwrap();
            let _ = spared.wait();
        }
    }

    #[test]
    fn a_leftover_sweep_spares_every_process_whose_agent_is_alive() {
        use std::io::{BufReader, Write};
        let tag = format!("{}-{}", std::process::id(), rand_suffix());
        // A live run of the same config: its agent is alive, so its job is not a leftover.
        let live = format!("HERD_MARKER=k{tag}:run2:0:0");
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: live.clone(),
            job: "exec sleep 63".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let mut agent = spawn_agent(&inv);
        let mut stdin = agent.stdin.take().unwrap();
        let (name, value) = live.split_once('=').unwrap();
        stdin.write_all(&env_block([(name, value)])).unwrap();
        started(&mut BufReader::new(agent.stderr.take().unwrap()));
        // The job's steady state: its `sleep`, the only process with the marker once the
        // subshells that set it up have exec'd (one of them, seen mid-way, is gone a moment
        // later). A bound for a loaded machine, not a measure of speed.
        let is_sleep = |pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        };
        let settled = || {
            let found = processes_with_env(&live);
            (found.len() == 1 && found.iter().all(is_sleep)).then_some(found)
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while settled().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let job = settled()
            .unwrap_or_else(|| panic!("the live job did not settle: {:?}", processes_with_env(&live)));
        // A leftover of an earlier run (no agent), and a process of another config.
        let mut old = marked_sleep(&format!("k{tag}:run1:0:1"));
        let mut other_config = marked_sleep(&format!("j{tag}:run1:0:0"));

        assert_eq!(sweep(&format!("HERD_MARKER=k{tag}:"), SweepScope::Leftovers), vec![old.id()]);
        assert!(old.wait().unwrap().code().is_none(), "killed by a signal");
        assert_eq!(processes_with_env(&live), job, "the live run's job was touched");
        assert!(other_config.try_wait().unwrap().is_none(), "another config's process was touched");

        // Once its agent is gone, what it left is a leftover (here: nothing, it stopped it).
        drop(stdin);
        agent.wait().unwrap();
        assert_eq!(sweep(&format!("HERD_MARKER=k{tag}:"), SweepScope::Leftovers), Vec::<u32>::new());
        other_config.kill().unwrap();
        let _ = other_config.wait();
    }

    #[test]
    fn the_agent_reports_its_presweep_and_starts_the_job_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let order = dir.path().join("order");
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: format!("echo job >> {}", quote(order.to_str().unwrap())).into(),
            cleanup: None,
            presweep: Some(format!(
                "echo sweep >> {}; echo 12 34; echo \"container herd-k-old-0-$HERD_T_MARK\"; echo noise >&2",
                quote(order.to_str().unwrap())
            )),
            report_ports: false,
            probe: None,
        };
        let out = run_agent(&inv, &env_block([("HERD_T_MARK", test_mark().as_str())]));
        assert!(out.status.success());
        assert_eq!(std::fs::read_to_string(&order).unwrap(), "sweep\njob\n");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let messages: Vec<AgentMessage> = stderr.lines().map(parse_agent_line).collect();
        assert_eq!(messages[0], AgentMessage::Up, "{stderr}");
        assert_eq!(messages[1], AgentMessage::Swept("12 34".into()), "{stderr}");
        // It runs without the job's env, and its own stderr is dropped.
        assert_eq!(messages[2], AgentMessage::Swept("container herd-k-old-0-".into()), "{stderr}");
        assert!(matches!(messages[3], AgentMessage::Started { .. }), "{stderr}");
        assert!(!messages.iter().any(|m| matches!(m, AgentMessage::Other(_))), "{stderr}");
    }

    /// Where no process holds the config's marker (a start's usual case), a leftover sweep looks
    /// through /proc once (one grep) and starts nothing else: no look for live agents. With
    /// some, it reads their markers in one grep, not one (and a `tr`) per process.
    #[test]
    fn a_sweep_looks_through_proc_a_fixed_number_of_times() {
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls");
        for tool in ["grep", "tr", "sort"] {
            let path = dir.path().join(tool);
            let body = format!(
                "#!/bin/sh\necho {tool} >> {}\nexec /usr/bin/{tool} \"$@\"\n",
                quote(calls.to_str().unwrap())
            );
            std::fs::write(&path, body).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap());
        let tools = |body: &str| {
            let _ = std::fs::remove_file(&calls);
            let out = Command::new("sh").arg("-c").arg(with_procs(body)).env("PATH", &path).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            (String::from_utf8(out.stdout).unwrap(), std::fs::read_to_string(&calls).unwrap_or_default())
        };
        let none = format!("HERD_T_NONE={}x:", test_mark());
        assert_eq!(tools(&sweep_call(&none, SweepScope::Leftovers, 1)), (String::new(), "grep\n".into()));

        // Three leftovers (no agent holds their marker): the same few looks as for one.
        let mark = format!("few{}", test_mark());
        let mut kids: Vec<_> = (0..3).map(|i| marked_sleep(&format!("{mark}:r:0:{i}"))).collect();
        let prefix = format!("HERD_MARKER={mark}:");
        assert!(wait_for(|| processes_with_env(&format!("HERD_MARKER={mark}:r:0:2")).len() == 1));
        let (found, looks) = tools(&format!("herd_pick {} leftovers", quote(&prefix)));
        let mut found: Vec<u32> = parse_pids(&found);
        found.sort();
        let mut want: Vec<u32> = kids.iter().map(|k| k.id()).collect();
        want.sort();
        assert_eq!(found, want);
        for k in &mut kids {
            let _ = k.kill();
            let _ = k.wait();
        }
        // A pipeline's tools start in any order.
        let mut looks: Vec<&str> = looks.lines().collect();
        looks.sort();
        assert_eq!(
            looks,
            ["grep", "grep", "grep", "sort", "tr", "tr"],
            "one look each: marked, live agents, markers"
        );
    }

    /// A marker value of this test's own: the tests run at once, and an agent stops every
    /// process that holds its exact marker.
    fn test_mark() -> String {
        format!("t{}", std::process::id())
    }

    fn rand_suffix() -> u32 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
    }

    #[test]
    fn env_block_counts_physical_lines() {
        let b = env_block([("A", "1"), ("B", "x\ny")]);
        assert_eq!(String::from_utf8(b).unwrap(), "3\nexport A=1\nexport B='x\ny'\n");
    }

    #[test]
    fn remote_command_is_one_shell_line_running_the_agent() {
        let inv = AgentInvocation {
            grace_secs: 7,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: "exec echo 'hi there'".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let mut child = spawn_remote(&inv);
        use std::io::{Read, Write};
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([])).unwrap();
        let mut stdout = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert_eq!(stdout, b"hi there\n");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("herd-agent exit 0"), "{stderr}");
    }

    /// Runs `subreaper_line` through `sh -c` with `argv` a shell that orphans a `sleep`:
    /// (that shell's pid, the orphan's parent pid once its own parent exited, stderr, what
    /// the shell saw of PERL_BADLANG and HERD_PERL_BADLANG).
    fn run_under_subreaper(perl: &str, python: &str, env: &[(&str, &str)]) -> (u32, u32, String, String) {
        let script = "sh -c 'sleep 5 & echo $!' >\"$0\"; sleep 0.2; \
                      read -r orphan <\"$0\"; read -r _ _ _ ppid _ </proc/$orphan/stat; kill $orphan; \
                      echo $$ $ppid \"[${PERL_BADLANG-unset}]\" \"[${HERD_PERL_BADLANG-unset}]\"";
        let file = std::env::temp_dir().join(format!(
            "herd-t-reaper-{}-{}",
            std::process::id(),
            perl.len() + python.len()
        ));
        let argv = command_line(["sh".to_string(), "-c".into(), script.into(), file.display().to_string()]);
        let out = Command::new("sh")
            .args(["-c", &subreaper_line(&argv, perl, python)])
            .env_remove("PERL_BADLANG")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&file);
        let stdout = String::from_utf8(out.stdout).unwrap();
        let words: Vec<&str> = stdout.split_whitespace().collect();
        assert_eq!(words.len(), 4, "{stdout:?} {}", String::from_utf8_lossy(&out.stderr));
        let badlang = format!("{} {}", words[2], words[3]);
        (
            words[0].parse().unwrap(),
            words[1].parse().unwrap(),
            String::from_utf8(out.stderr).unwrap(),
            badlang,
        )
    }

    #[test]
    fn the_agent_is_a_subreaper_through_perl_else_python_else_not_at_all() {
        // perl on its own (no Python to fall back on), with a locale the node lacks: no
        // warning reaches the message channel.
        let (pid, ppid, stderr, badlang) =
            run_under_subreaper(SUBREAPER_PERL, "/nonexistent/python3", &[("LC_ALL", "xx_YY.UTF-8")]);
        assert_eq!((ppid, stderr.as_str(), badlang.as_str()), (pid, "", "[unset] [unset]"), "through perl");
        // The user's own PERL_BADLANG reaches the agent unchanged, and herd's word is gone.
        let (_, _, _, badlang) =
            run_under_subreaper(SUBREAPER_PERL, SUBREAPER_PYTHON, &[("PERL_BADLANG", "7")]);
        assert_eq!(badlang, "[7] [unset]");
        let (_, _, _, badlang) =
            run_under_subreaper(SUBREAPER_PERL, SUBREAPER_PYTHON, &[("PERL_BADLANG", "")]);
        assert_eq!(badlang, "[] [unset]", "an empty value");
        // The user's perl switches (a module the node lacks, taint mode) neither stop the
        // agent nor write on its message channel.
        for opt in ["-MNo::Such::Module", "-T", "-t"] {
            let (pid, ppid, stderr, _) = run_under_subreaper(
                SUBREAPER_PERL,
                "/nonexistent/python3",
                &[("PERL5OPT", opt), ("PERL_HASH_SEED_DEBUG", "1"), ("PERL_UNICODE", "SDA")],
            );
            assert_eq!((ppid, stderr.as_str()), (pid, ""), "PERL5OPT={opt}");
        }
        // No perl: the system Python.
        let (pid, ppid, stderr, _) = run_under_subreaper("/nonexistent/perl", SUBREAPER_PYTHON, &[]);
        assert_eq!((ppid, stderr.as_str()), (pid, ""), "through python");
        // Neither: the agent runs all the same, as no subreaper.
        let (pid, ppid, stderr, _) = run_under_subreaper("/nonexistent/perl", "/nonexistent/python3", &[]);
        assert_ne!(ppid, pid, "without an interpreter nothing makes it a subreaper");
        assert_eq!(stderr, "");
    }

    /// The shells sshd may run a command with. tcsh and BSD csh are required (scripts/test.sh
    /// installs them; BSD csh by its own path, whatever /bin/csh is); the others where this
    /// machine has them.
    fn login_shells() -> Vec<&'static str> {
        let has = |sh: &str| Command::new(sh).args(["-c", "exit 0"]).status().is_ok_and(|s| s.success());
        assert!(has("tcsh"), "tcsh is missing (apt-get install tcsh; scripts/test.sh does)");
        assert!(has(BSD_CSH), "{BSD_CSH} is missing (apt-get install csh; scripts/test.sh does)");
        ["sh", "bash", "zsh", "tcsh", BSD_CSH, "csh", "fish"].into_iter().filter(|sh| has(sh)).collect()
    }

    /// Debian's BSD csh (package `csh`), which takes no word longer than BUFSIZ.
    const BSD_CSH: &str = "/bin/bsd-csh";

    /// What csh, tcsh or fish would read differently from sh in a command line: a newline, a
    /// `!`, a quote other than around a word, a backslash before a quote or before another
    /// backslash, a byte outside printable ASCII, a word longer than BSD csh takes.
    fn csh_or_fish_would_misread(line: &str) -> Option<String> {
        let bad = line.bytes().position(|b| !(b' '..=b'~').contains(&b) || b == b'!');
        // Between the quoted words: the command, then single spaces.
        let between = line.split('\'').step_by(2).skip(1).find(|s| !matches!(*s, " " | " sh " | ""));
        let longest = line.split('\'').skip(1).step_by(2).map(|w| w.len() + 2).max().unwrap_or(0);
        match () {
            _ if bad.is_some() => Some(format!("byte {:?} at {bad:?}", line.as_bytes()[bad.unwrap()])),
            _ if !line.starts_with("exec sh -c '") => Some("another start".into()),
            _ if between.is_some() || !line.ends_with('\'') => Some(format!("{between:?} between words")),
            _ if line.contains("\\\\") || line.contains("\\'") => Some("a fish escape".into()),
            _ if longest > LOGIN_WORD => Some(format!("a word of {longest} bytes")),
            _ => None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_command_survives_a_login_shell_line(s in "[^\u{0}]{0,40}") {
            let line = for_login_shell(&format!("printf '%s' {}", quote(&s)));
            prop_assert_eq!(csh_or_fish_would_misread(&line), None, "{}", line);
            for shell in ["sh", BSD_CSH].into_iter().filter(|sh| *sh == "sh" || std::path::Path::new(sh).exists()) {
                let out = Command::new(shell).arg("-c").arg(&line).output().unwrap();
                prop_assert_eq!(out.stdout, s.as_bytes(), "{}", shell);
            }
        }
    }

    /// `MAX_LOGIN_LINE` is what Linux takes in one argument, as sshd passes the line.
    #[test]
    fn the_longest_login_line_is_the_longest_argument_linux_takes() {
        let line = |n: usize| format!("exit 0 {}", "x".repeat(n - 7));
        let out = Command::new("sh").arg("-c").arg(line(MAX_LOGIN_LINE)).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let e = Command::new("sh").arg("-c").arg(line(MAX_LOGIN_LINE + 1)).output().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::E2BIG), "{e}");
    }

    /// A command of tens of KiB (a long setup), every byte in it, reaches sh unchanged from
    /// every login shell: BSD csh, which takes no word of more than BUFSIZ bytes, included.
    #[test]
    fn a_long_command_survives_every_login_shell() {
        let mut s = String::new();
        while s.len() < 40 * 1024 {
            s.extend((1..=0x7f_u8).map(char::from));
            s.push_str("'\\'\\\\ \"$x\" é 𝄞 !! %s \\\n");
        }
        let command = format!("printf '%s' {}", quote(&s));
        let line = for_login_shell(&command);
        assert_eq!(csh_or_fish_would_misread(&line), None);
        assert!(line.len() <= MAX_LOGIN_LINE, "{} bytes", line.len());
        for shell in login_shells() {
            let out = Command::new(shell).arg("-c").arg(&line).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.stdout == s.as_bytes(),
                "{shell}: {} bytes out of {}: {stderr}",
                out.stdout.len(),
                s.len()
            );
        }
    }

    /// sshd runs a command as `$SHELL -c LINE`: herd's lines run the same in every shell, the
    /// agent's, its job's and a sweep's, though they hold newlines, quotes and `!`.
    #[test]
    fn the_agent_and_a_sweep_start_under_any_login_shell() {
        let job = job_snippet("/", Some("echo 'setup!'\n# a comment"), "printf '%s\\n' \"it's $HERD_T\"");
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            presweep: Some(with_procs(&sweep_call("herd-none", SweepScope::Leftovers, 1))),
            job: job.into(),
            cleanup: Some("echo 'done!'".into()),
            report_ports: false,
            probe: None,
        };
        let line = for_login_shell(&inv.remote_command());
        assert_eq!(csh_or_fish_would_misread(&line), None, "{line}");
        for shell in login_shells() {
            use std::io::{Read, Write};
            let mut child = spawn_under(shell, &inv);
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(&env_block([("HERD_T", "a $b `c` \\ 'd' \"e\"!")])).unwrap();
            let mut stdout = Vec::new();
            child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
            drop(stdin);
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let expected = "setup!\nit's a $b `c` \\ 'd' \"e\"!\n";
            assert_eq!(String::from_utf8_lossy(&stdout), expected, "{shell}: {stderr}");
            assert!(stderr.contains("herd-agent exit 0"), "{shell}: {stderr}");
        }
    }

    /// The agent's line with a torch job's multiplexer and setup stays one argument for
    /// `$SHELL -c`: Linux takes at most 128 KiB in one.
    #[test]
    fn a_torch_agents_login_line_fits_one_argument() {
        let command = under_mux("/opt/venv/bin/python", "torchrun --nnodes=2 train.py --lr 0.1", true);
        let job = job_snippet("/work dir", Some("source /opt/venv/bin/activate\nmodule load cuda"), &command);
        let inv = AgentInvocation {
            grace_secs: 30,
            heartbeat_secs: 5,
            marker: "HERD_MARKER=abc:r1:0:0".into(),
            job: job.into(),
            cleanup: Some("docker rm -f herd-abc".into()),
            presweep: Some(with_procs(&sweep_call("abc", SweepScope::Leftovers, 10))),
            report_ports: true,
            probe: None,
        };
        let line = for_login_shell(&inv.remote_command());
        assert_eq!(csh_or_fish_would_misread(&line), None);
        assert!(
            line.len() < 96 * 1024,
            "{} bytes (the command itself: {})",
            line.len(),
            inv.remote_command().len()
        );
    }

    #[test]
    fn job_snippet_reports_missing_workdir_and_failed_setup() {
        let run = |snippet: String| Command::new("sh").arg("-c").arg(snippet).output().unwrap();
        let out = run(job_snippet("/nonexistent dir", None, "true"));
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("herd: cannot enter workdir \"/nonexistent dir\"")
        );

        let out = run(job_snippet("/", Some("false # trailing comment"), "true"));
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("herd: setup failed with exit 1"));

        let out = run(job_snippet("/", Some("X=1"), "echo \"$X\" \"$PWD\""));
        assert_eq!(out.stdout, b"1 /\n");
        // Setup is bash's (arrays, [[ ]]); a job without it needs no bash at all.
        let out = run(job_snippet("/", Some("a=(x y); [[ ${a[1]} == y ]]"), "echo \"$BASH_VERSION\""));
        assert!(out.status.success() && out.stdout.len() > 1, "{out:?}");
        let out = run(job_snippet("/", None, "echo \"${BASH_VERSION:-none}\""));
        assert_eq!(out.stdout, b"none\n");
    }

    #[test]
    fn cleanup_runs_after_the_job_without_its_env_and_is_quiet() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("cleanup");
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: format!("test ! -e {0} && echo job-ran && exit 3", quote(&record.display().to_string()))
                .into(),
            cleanup: Some(format!(
                "echo \"cleaned ${{HERD_T_MARK:-without-marker}}\" > {}; echo noise; echo noise >&2; exit 9",
                quote(&record.display().to_string())
            )),
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let out = run_agent(&inv, &env_block([("HERD_T_MARK", test_mark().as_str())]));
        assert_eq!(out.stdout, b"job-ran\n");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.ends_with("herd-agent exit 3\n") && !stderr.contains("noise"), "{stderr}");
        assert_eq!(std::fs::read_to_string(&record).unwrap(), "cleaned without-marker\n");
        // The optional arguments are always there, empty when not wanted.
        let presweep = AgentInvocation { cleanup: None, presweep: Some("true".into()), ..inv.clone() };
        assert_eq!(presweep.local_argv()[8..], ["", "true", "", ""].map(String::from));
    }

    #[test]
    fn the_master_reports_its_ports_before_it_reads_the_env() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: "echo \"port $MASTER_PORT\"".into(),
            cleanup: None,
            presweep: None,
            report_ports: true,
            probe: None,
        };
        let mut agent = spawn_agent(&inv);
        let mut stderr = std::io::BufReader::new(agent.stderr.take().unwrap());
        let mut line = String::new();
        let mut said = Vec::new();
        let ports = loop {
            line.clear();
            assert!(std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0, "{said:?}");
            match parse_agent_line(line.trim_end()) {
                AgentMessage::Ports(ports) => break ports.expect("readable tables"),
                other => said.push(other),
            }
        };
        // First word at once; nothing started before the env came.
        assert_eq!(said, [AgentMessage::Up]);
        assert!(ports.contains(&port), "{port} not in {ports:?}");
        let mut stdin = agent.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, &env_block([("MASTER_PORT", "29555")])).unwrap();
        drop(stdin);
        let out = agent.wait_with_output().unwrap();
        assert_eq!(out.stdout, b"port 29555\n");
    }

    #[test]
    fn an_attempt_stopped_before_its_env_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        // A heartbeat interval no other test uses, so that its sleep can be told apart.
        let beat = unique_secs(6000);
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: beat.parse().unwrap(),
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: format!("touch {}", quote(ran.to_str().unwrap())).into(),
            cleanup: None,
            presweep: None,
            report_ports: true,
            probe: None,
        };
        for control in [Control::Term, Control::Kill] {
            let out = run_agent(&inv, &control.encode());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.starts_with("herd-agent up\n") && stderr.ends_with("herd-agent exit 143\n"),
                "{stderr}"
            );
            assert_eq!(out.status.code(), Some(143));
            assert!(!ran.exists());
        }
        // herd gone before it sent the env: the agent ends quietly, its heartbeat with it.
        let mut agent = spawn_agent(&inv);
        drop(agent.stdin.take());
        let out = agent.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(70));
        assert_eq!(processes_with_argv(&["sleep", &beat]), Vec::<u32>::new(), "the heartbeat outlived it");
    }

    /// With a probe phase, one login runs the preflight's probe, then the job: the probe with
    /// its own env, its lines as `fact` messages (stdout stays the job's), `probed` with its
    /// status; the job's env block ends what is left of the probe before the job starts.
    #[test]
    fn a_probe_phase_runs_the_probe_then_the_job_in_one_login() {
        use std::io::{BufRead, BufReader, Write};
        let dir = tempfile::tempdir().unwrap();
        let lingering = dir.path().join("lingering");
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: "echo \"job $HERD_T\"".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            // A last line without its newline, then a process that outlives the probe's
            // shell (the master's listener does): the env of the job ends it.
            probe: Some(
                format!(
                    "echo \"fact $HERD_T $HERD_T_MARK\"; echo oops >&2; printf '%s\\n' 'a\\cb'; \
                 head -c 5000 /dev/zero | tr '\\0' x; echo; \
                 (sleep 60 & echo $! > {}; wait) & printf partial; exit 3",
                    quote(lingering.to_str().unwrap())
                )
                .into(),
            ),
        };
        let mut agent = spawn_agent(&inv);
        let mut stdin = agent.stdin.take().unwrap();
        // The probe's processes carry the agent's marker, whatever its env says (a sweep on the
        // same host must see them as a live agent's).
        stdin.write_all(&env_block([("HERD_T", "probe-env"), ("HERD_T_MARK", "doctor")])).unwrap();
        stdin.flush().unwrap();
        let mut stderr = BufReader::new(agent.stderr.take().unwrap());
        let mut said = Vec::new();
        loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "{said:?}");
            match parse_agent_line(line.trim_end()) {
                AgentMessage::Probed(status) => {
                    assert_eq!(status, 3, "{said:?}");
                    break;
                }
                AgentMessage::Alive => {}
                other => said.push(other),
            }
        }
        assert_eq!(said[0], AgentMessage::Up);
        assert!(matches!(said[1], AgentMessage::Clock(_)), "{said:?}");
        let mut facts: Vec<_> = said[2..].iter().map(|m| format!("{m:?}")).collect();
        facts.sort();
        let marked = format!("Fact(\"fact probe-env {}\")", test_mark());
        // Backslashes as printed (dash's echo would have read `\c`); a line past 4000 bytes cut
        // there, one write beside the heartbeat's.
        let long = format!("Fact({:?})", "x".repeat(4000));
        let mut expected =
            [marked.as_str(), "Fact(\"a\\\\cb\")", "Fact(\"oops\")", "Fact(\"partial\")", &long];
        expected.sort();
        assert_eq!(facts, expected);
        let pid: i32 = std::fs::read_to_string(&lingering).unwrap().trim().parse().unwrap();
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "the probe's process is running");
        stdin.write_all(&env_block([("HERD_T", "job-env")])).unwrap();
        drop(stdin);
        let out = agent.wait_with_output().unwrap();
        assert_eq!(out.stdout, b"job job-env\n");
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the probe's process outlived the phase"
        );
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        assert!(rest.ends_with("herd-agent exit 0\n"), "{rest}");
    }

    /// A probe phase stopped (a failed preflight, Ctrl-C) or left (herd gone) ends its probe
    /// and starts no job.
    #[test]
    fn a_probe_phase_stopped_ends_its_probe_and_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        let pidfile = dir.path().join("probe");
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            marker: format!("HERD_T_MARK={}", test_mark()),
            job: format!("touch {}", quote(ran.to_str().unwrap())).into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: Some(format!("echo $$ > {}; exec sleep 60", quote(pidfile.to_str().unwrap())).into()),
        };
        let env = env_block([("HERD_T", "1")]);
        for end in [Some(Control::Term), None] {
            let started = std::time::Instant::now();
            let mut child = spawn_agent(&inv);
            let mut stdin = child.stdin.take().unwrap();
            std::io::Write::write_all(&mut stdin, &env).unwrap();
            // The stop (or EOF) comes once the probe is running.
            while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().is_empty() {
                assert!(started.elapsed() < std::time::Duration::from_secs(30), "the probe never started");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if let Some(c) = &end {
                std::io::Write::write_all(&mut stdin, &c.encode()).unwrap();
            }
            drop(stdin);
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(if end.is_some() { 143 } else { 70 }), "{stderr}");
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "the probe was waited for");
            let pid = std::fs::read_to_string(&pidfile).unwrap();
            assert!(
                !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists(),
                "the probe outlived the agent"
            );
            assert!(!ran.exists());
            std::fs::remove_file(&pidfile).unwrap();
        }
    }

    /// Two nodes of one config that are this one machine (localhost and 127.0.0.1): each
    /// node's `herd stacks` command reports the ranks it runs, not the other node's too.
    #[test]
    fn stacks_are_taken_of_the_nodes_own_ranks_only() {
        let key = format!("stacks{}x{}", test_mark(), rand_suffix());
        let spawn = |argv: &[&str], env: &[(&str, &str)]| {
            Command::new(argv[0])
                .args(&argv[1..])
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut children = Vec::new();
        for (node, host) in [(0, "localhost"), (1, "127.0.0.1")] {
            let marker = format!("{key}:r:0:{node}");
            // The node's live agent holds its marker in its argv; its rank, in its environment.
            let agent = format!("HERD_MARKER={marker}");
            children.push(spawn(&["python3", "-c", "import time; time.sleep(30)", &agent], &[]));
            let rank = node.to_string();
            let env = [("HERD_MARKER", marker.as_str()), ("RANK", rank.as_str()), ("HERD_NODE", host)];
            children.push(spawn(&["sleep", "30"], &env));
        }
        // Both ranks are in /proc before their stacks are asked for (a loaded CI host).
        let seen =
            wait_for(|| (0..2).all(|n| processes_with_env(&format!("HERD_MARKER={key}:r:0:{n}")).len() == 1));
        let ranks = |host: &str| -> (Vec<String>, String) {
            let out = Command::new("sh").arg("-c").arg(stacks_command(&key, host)).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let heads = text.lines().filter_map(|l| l.strip_prefix("herd-agent stack "));
            let ranks = heads.map(|l| l.split(' ').next().unwrap().to_string()).collect();
            (ranks, format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
        };
        let (on_0, on_1) = (ranks("localhost"), ranks("127.0.0.1"));
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(seen, "the test's own ranks never showed in /proc");
        assert_eq!(on_0.0, ["0"], "node localhost printed:\n{}", on_0.1);
        assert_eq!(on_1.0, ["1"], "node 127.0.0.1 printed:\n{}", on_1.1);
    }
}
