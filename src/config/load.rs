//! Loading a config: read the file, parse the TOML, validate each section.

use std::path::Path;

use super::check::*;
use super::error::ConfigError;
use super::raw::*;
use super::types::*;

/// Reads and validates a config file, with the process environment. A missing or unreadable
/// file is a [`ConfigError::Read`] naming the path.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, &LoadOptions::process())
}

/// [`load`], with the environment and file reads of `options`.
pub fn load_with(path: &Path, options: &LoadOptions<'_>) -> Result<Config, ConfigError> {
    let text =
        (options.read_file)(path).map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
    parse_with(path, &text, options)
}

/// Validates config text; `path` is used for `Config::path`, error messages and to resolve a
/// relative hostfile path. Reads the process environment and the hostfile only when
/// `nodes_from` asks for them.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    parse_with(path, text, &LoadOptions::process())
}

/// [`parse`], with the environment and file reads of `options` (pure when they are).
pub fn parse_with(path: &Path, text: &str, options: &LoadOptions<'_>) -> Result<Config, ConfigError> {
    let cx = Cx { path, text, options };
    let raw: RawConfig = toml::from_str(text).map_err(|e| cx.toml_error(&e))?;
    cx.validate(raw)
}

impl Cx<'_> {
    fn validate(&self, raw: RawConfig) -> Result<Config> {
        let ssh = self.ssh(raw.ssh)?;
        let (transport, nodes) = self.transport_and_nodes(raw.transport, raw.nodes, raw.nodes_from)?;
        if nodes.len() > MAX_NODES {
            return Err(ConfigError::whole_file(
                self.path,
                format!("too many nodes: {} listed, herd runs at most {MAX_NODES}", nodes.len()),
            ));
        }
        let Some(job) = raw.job else {
            return Err(ConfigError::whole_file(
                self.path,
                "missing [job] table: add [job] with at least `script = \"train.py\"`",
            ));
        };
        let job = self.job(job, nodes.len(), matches!(transport, TransportSettings::Slurm(_)))?;
        let env = self.env_table(raw.env, "[env]")?;
        let nnodes = job.nnodes.unwrap_or(nodes.len());
        let rendezvous = self.rendezvous(raw.rendezvous, &nodes, nnodes)?;
        let mut logs = self.logs(raw.logs)?;
        // Relative to the config file's directory, not to where herd is started: the runs and
        // the quarantine of a config are found however it is named (`-c ../proj/c.toml`, a
        // symlink to it), as its config key is.
        logs.dir = followed(self.path).parent().unwrap_or(Path::new("")).join(&logs.dir);
        let restart = self.restart(raw.restart, nnodes)?;
        let container = raw.container.map(|c| self.container(c)).transpose()?;
        let notify = raw.notify.map(|n| self.notify(n)).transpose()?;
        Ok(Config {
            path: self.path.to_path_buf(),
            ssh,
            nodes,
            job,
            env,
            rendezvous,
            logs,
            restart,
            container,
            notify,
            transport,
        })
    }
}

/// `path`, its symlinks followed (a link's target is relative to the link's directory); the
/// path as it is where it is no symlink (or none at all: a config given as text).
fn followed(path: &Path) -> std::path::PathBuf {
    let mut path = path.to_path_buf();
    // As the kernel bounds a chain of links.
    for _ in 0..40 {
        match std::fs::read_link(&path) {
            Ok(target) => path = path.parent().unwrap_or(Path::new("")).join(target),
            Err(_) => break,
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn spec_example_error_renders_exactly() {
        let text = "[ssh]\nuser = \"ubuntu\"\n\n[job]\nscript = \"train.py\"\n[[nodes]]\nhost = \"n[3-1]\"\n";
        let err = parse(Path::new("cluster.toml"), text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cluster.toml:7:8: malformed hostlist \"n[3-1]\": range 3-1 is descending\n   |\n 7 | host = \"n[3-1]\"\n   |        ^^^^^^^^"
        );
        assert_eq!(err.path(), Path::new("cluster.toml"));
        let loc = err.location().unwrap();
        assert_eq!(loc.source_line, "host = \"n[3-1]\"");
        assert_eq!(&text[loc.span.clone()], "\"n[3-1]\"");
    }

    #[test]
    fn load_reads_files_and_names_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, format!("[[nodes]]\nhost = \"a\"\n{JOB}")).unwrap();
        let config = load(&path).unwrap();
        assert_eq!(config.path, path);
        assert_eq!(config.nodes, [node("a")]);

        let missing = Path::new("no-such-dir-for-herd-tests/cluster.toml");
        let err = load(missing).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        assert_eq!(err.line_col(), None);
        #[cfg(unix)]
        assert_eq!(
            err.to_string(),
            "no-such-dir-for-herd-tests/cluster.toml: cannot read config file: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn toml_syntax_error() {
        assert_err("[[nodes]]\nhost = \n", 2, 8, "invalid string: expected `\"`, `'`");
        assert_err(
            "[job]\nscript = \"a\"\n[job]\n",
            3,
            1,
            "invalid table header: duplicate key `job` in document root",
        );
    }

    #[test]
    fn crlf_files_work() {
        let text = "[[nodes]]\r\nhost = \"n[3-1]\"\r\n[job]\r\nscript = \"x\"\r\n";
        let err = parse(Path::new("c.toml"), text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "c.toml:2:8: malformed hostlist \"n[3-1]\": range 3-1 is descending\n   |\n 2 | host = \"n[3-1]\"\n   |        ^^^^^^^^"
        );
    }
}
