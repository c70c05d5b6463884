//! The nodes a config's runs keep out, and why: one JSON file per config next to its logs
//! (`<logs.dir>/.quarantine-<config key>.json`, hidden beside the run directories), written by `herd run` when it blames a node,
//! read by every later run of the config, cleared by `herd nodes --release` (or by the run
//! that blamed a node, when the fault turns out to follow its rank). The config file
//! itself is never rewritten.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One quarantined node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub host: String,
    pub reason: String,
    /// The run that blamed it, and the first attempt of that run without it.
    pub run_id: String,
    pub attempt: u32,
    /// When, RFC 3339 UTC.
    pub at: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    pub nodes: Vec<Entry>,
}

#[derive(Debug, thiserror::Error)]
#[error("{}: {what}", path.display())]
pub struct QuarantineError {
    pub path: PathBuf,
    pub what: String,
}

/// The quarantine file of a config.
pub fn path(logs_dir: &Path, config_key: &str) -> PathBuf {
    logs_dir.join(format!(".quarantine-{config_key}.json"))
}

impl Quarantine {
    /// The file at `path`; none there (nor its directory) is an empty quarantine.
    pub fn load(path: &Path) -> Result<Quarantine, QuarantineError> {
        let error = |what: String| QuarantineError { path: path.to_path_buf(), what };
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                error(format!("not a herd quarantine file ({e}); remove it to release every node"))
            }),
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                Ok(Quarantine::default())
            }
            Err(e) => Err(error(format!("cannot read: {e}"))),
        }
    }

    /// Written whole to a temporary file and renamed over the old one: a reader never sees
    /// half of it.
    pub fn save(&self, path: &Path) -> Result<(), QuarantineError> {
        let error =
            |e: io::Error| QuarantineError { path: path.to_path_buf(), what: format!("cannot write: {e}") };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(error)?;
        }
        let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let mut text = serde_json::to_string_pretty(self).expect("serialises");
        text.push('\n');
        std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path)).map_err(error)
    }

    /// host -> reason.
    pub fn reasons(&self) -> BTreeMap<String, String> {
        self.nodes.iter().map(|e| (e.host.clone(), e.reason.clone())).collect()
    }

    /// Adds `entry`, replacing an older entry of its host.
    pub fn add(&mut self, entry: Entry) {
        self.nodes.retain(|e| e.host != entry.host);
        self.nodes.push(entry);
    }

    /// Removes `host`; whether it was there.
    pub fn release(&mut self, host: &str) -> bool {
        let before = self.nodes.len();
        self.nodes.retain(|e| e.host != host);
        self.nodes.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(host: &str, reason: &str) -> Entry {
        Entry { host: host.into(), reason: reason.into(), run_id: "r".into(), attempt: 1, at: "t".into() }
    }

    #[test]
    fn kept_across_loads_and_released_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "00ff");
        assert_eq!(Quarantine::load(&p).unwrap(), Quarantine::default(), "no file: nobody is out");
        let mut q = Quarantine::default();
        q.add(entry("n2", "node-lost"));
        q.add(entry("n3", "SIGSEGV"));
        q.add(entry("n2", "root cause twice"));
        q.save(&p).unwrap();
        let back = Quarantine::load(&p).unwrap();
        assert_eq!(
            back.reasons().into_iter().collect::<Vec<_>>(),
            [("n2".to_string(), "root cause twice".to_string()), ("n3".to_string(), "SIGSEGV".to_string())]
        );
        let mut back = back;
        assert!(back.release("n3"));
        assert!(!back.release("n3"));
        assert_eq!(back.nodes.len(), 1);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_damaged_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "k");
        std::fs::write(&p, "{ half").unwrap();
        let err = Quarantine::load(&p).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}: not a herd quarantine file (", p.display())), "{err}");
        assert!(err.ends_with("remove it to release every node"), "{err}");
    }
}
