//! What the tests of `remote/` share: a marker of the test's own, a look through /proc, the
//! agent started on this machine, and the login shells a line must survive.

use std::process::{Command, Stdio};

use super::agent::AgentInvocation;
use super::protocol::{parse_agent_line, AgentMessage};
use super::shell::LOGIN_WORD;

/// A marker value of this test's own: the tests run at once, and an agent stops every
/// process that holds its exact marker.
pub(super) fn test_mark() -> String {
    format!("t{}", std::process::id())
}

pub(super) fn rand_suffix() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
}

pub(super) fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !cond() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    cond()
}

pub(super) fn processes_with_env(entry: &str) -> Vec<u32> {
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

/// The agent on this machine with all three pipes.
pub(super) fn spawn_agent(inv: &AgentInvocation) -> std::process::Child {
    let argv = inv.local_argv();
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the agent's messages up to `herd-agent pgid P`; returns P.
pub(super) fn started(stderr: &mut impl std::io::BufRead) -> u32 {
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

/// The shells sshd may run a command with. tcsh and BSD csh are required (scripts/test.sh
/// installs them; BSD csh by its own path, whatever /bin/csh is); the others where this
/// machine has them.
pub(super) fn login_shells() -> Vec<&'static str> {
    let has = |sh: &str| Command::new(sh).args(["-c", "exit 0"]).status().is_ok_and(|s| s.success());
    assert!(has("tcsh"), "tcsh is missing (apt-get install tcsh; scripts/test.sh does)");
    assert!(has(BSD_CSH), "{BSD_CSH} is missing (apt-get install csh; scripts/test.sh does)");
    ["sh", "bash", "zsh", "tcsh", BSD_CSH, "csh", "fish"].into_iter().filter(|sh| has(sh)).collect()
}

/// Debian's BSD csh (package `csh`), which takes no word longer than BUFSIZ.
pub(super) const BSD_CSH: &str = "/bin/bsd-csh";

/// What csh, tcsh or fish would read differently from sh in a command line: a newline, a
/// `!`, a quote other than around a word, a backslash before a quote or before another
/// backslash, a byte outside printable ASCII, a word longer than BSD csh takes.
pub(super) fn csh_or_fish_would_misread(line: &str) -> Option<String> {
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
