//! herd's per-user state on the launching machine, outside any working directory: one lock
//! per config (one run of a config at a time, from whichever directory it is started), and
//! the folder of SSH control sockets, cleaned of those a killed herd left.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `$XDG_STATE_HOME/herd`, else `~/.local/state/herd`; `None` without either variable.
pub fn dir(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let non_empty = |name: &str| env(name).filter(|v| !v.is_empty());
    match non_empty("XDG_STATE_HOME") {
        Some(state) => Some(PathBuf::from(state).join("herd")),
        None => non_empty("HOME").map(|home| PathBuf::from(home).join(".local/state/herd")),
    }
}

/// The state directory of this process's user.
pub fn process_dir() -> Option<PathBuf> {
    dir(|name| std::env::var(name).ok())
}

/// The lock file of a config: the same for every run of it by this user, whatever the
/// working directory or `logs.dir`.
pub fn lock_path(state: &Path, config_key: &str) -> PathBuf {
    state.join("locks").join(format!("{config_key}.lock"))
}

/// Where herd's SSH master connections keep their control sockets, one folder each.
pub fn ssh_dir(state: &Path) -> PathBuf {
    state.join("ssh")
}

/// The prefix of the folder each SSH master connection makes (the openssh crate's).
const CONTROL_PREFIX: &str = ".ssh-connection";

/// A folder younger than this may be one a herd is setting up right now, socket not yet made.
const SETTING_UP: Duration = Duration::from_secs(120);

/// Remove the control folders of `dir` that no live SSH master answers in: a herd killed
/// with SIGKILL leaves its folders behind. A folder whose socket accepts a connection is in
/// use and stays, and so does a young one without a socket. Returns how many were removed.
pub fn clean_stale_control_dirs(dir: &Path) -> io::Result<usize> {
    let mut removed = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_control = entry.file_name().to_string_lossy().starts_with(CONTROL_PREFIX);
        if !is_control || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let socket = path.join("master");
        let stale = if socket.exists() {
            std::os::unix::net::UnixStream::connect(&socket).is_err()
        } else {
            let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
            age.is_some_and(|a| a > SETTING_UP)
        };
        if stale && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_dir_follows_xdg_then_home() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(dir(env(&[("XDG_STATE_HOME", "/s"), ("HOME", "/h")])), Some(PathBuf::from("/s/herd")));
        assert_eq!(
            dir(env(&[("XDG_STATE_HOME", ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.local/state/herd"))
        );
        assert_eq!(dir(env(&[])), None);
        assert_eq!(lock_path(Path::new("/s/herd"), "abc"), PathBuf::from("/s/herd/locks/abc.lock"));
    }

    #[test]
    fn only_control_dirs_no_master_answers_in_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let live = tmp.path().join(".ssh-connectionLIVE");
        let dead = tmp.path().join(".ssh-connectionDEAD");
        let young = tmp.path().join(".ssh-connectionNEW");
        let other = tmp.path().join("not-a-control-dir");
        for d in [&live, &dead, &young, &other] {
            std::fs::create_dir(d).unwrap();
        }
        let _listener = std::os::unix::net::UnixListener::bind(live.join("master")).unwrap();
        // A socket nobody listens on any more: bound, then the listener dropped.
        drop(std::os::unix::net::UnixListener::bind(dead.join("master")).unwrap());
        std::fs::write(other.join("master"), "").unwrap();

        assert_eq!(clean_stale_control_dirs(tmp.path()).unwrap(), 1);
        assert!(live.exists() && young.exists() && other.exists());
        assert!(!dead.exists());
        assert_eq!(clean_stale_control_dirs(&tmp.path().join("missing")).unwrap(), 0);
    }
}
