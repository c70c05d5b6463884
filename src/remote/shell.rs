//! The shell: quoting (`quote`, each word once: `command_line`, `ShellLine`, and a node
//! script's call, `script_argv`, `script_call`), the line any login shell runs
//! (`for_login_shell`, at most `MAX_LOGIN_LINE`), the job snippet (`job_snippet`: the workdir,
//! `setup` in bash, the launcher's `exec`), the env block the agent reads (`env_block`), the
//! output multiplexer around a launcher (`under_mux`), and the agent's start as a child
//! subreaper (`subreaper_line`, with the shims of `scripts`). Pure: building strings; the tests
//! run them in real shells.

use std::fmt::Write as _;

use super::scripts::{MUX_SCRIPT, SUBREAPER_PL, SUBREAPER_PY};

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

/// The argv that runs the node script `script` (one of `scripts`, POSIX sh):
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

/// The command for `sh` that runs the node script `script`: its `script_argv`, quoted once.
pub fn script_call<S: AsRef<str>>(script: &str, name: &str, args: impl IntoIterator<Item = S>) -> String {
    command_line(script_argv(script, name, args))
}

/// The longest word of a login shell line, quotes included. BSD csh takes a word of at most
/// BUFSIZ bytes (8 KiB with glibc, 1 KiB on the BSDs): "Word too long."
pub(super) const LOGIN_WORD: usize = 1000;

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

/// `command`, as it reads once `sh -c` has quoted it a second time (a container's shell), with
/// the output multiplexer's text replaced by `name`.
pub fn name_nested_mux(command: &str, name: &str) -> String {
    let nested = quote(MUX_SCRIPT).replace('\'', "'\\''");
    command.replace(&nested, name)
}

/// The interpreter that makes a remote agent a child subreaper, first choice: perl does it in
/// about 5 ms (Debian's perl-base is essential, and most other nodes have it), where Python's
/// ctypes takes 15 to 25 ms on every node of every start.
const SUBREAPER_PERL: &str = "/usr/bin/perl";

/// The second choice: the system Python, which needs no shims, virtualenvs or site packages
/// (`-S -I`).
const SUBREAPER_PYTHON: &str = "/usr/bin/python3";

/// `set -- ARGV`, then exec it as a child subreaper: through `SUBREAPER_PERL` if the node has
/// it, else through `SUBREAPER_PYTHON` (the flag survives exec), else unchanged.
pub(super) fn subreaper_line(argv: &str) -> String {
    subreaper_line_through(argv, SUBREAPER_PERL, SUBREAPER_PYTHON)
}

/// `subreaper_line` through these interpreters.
fn subreaper_line_through(argv: &str, perl: &str, python: &str) -> String {
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

#[cfg(test)]
mod tests {
    use std::process::Command;

    use proptest::prelude::*;

    use super::super::testing::{csh_or_fish_would_misread, login_shells, BSD_CSH};
    use super::*;

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
    }

    #[test]
    fn env_block_counts_physical_lines() {
        let b = env_block([("A", "1"), ("B", "x\ny")]);
        assert_eq!(String::from_utf8(b).unwrap(), "3\nexport A=1\nexport B='x\ny'\n");
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

    /// Runs `subreaper_line_through` `sh -c` with `argv` a shell that orphans a `sleep`:
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
            .args(["-c", &subreaper_line_through(&argv, perl, python)])
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
}
