//! `[logs]`: where the run's files go, and which ranks reach the terminal.

use std::path::PathBuf;

use super::check::*;
use super::ranks::RankList;
use super::raw::*;
use super::types::*;

impl Cx<'_> {
    pub(super) fn logs(&self, raw: Option<RawLogs>) -> Result<Logs> {
        let Some(raw) = raw else { return Ok(Logs::default()) };
        let dir = match raw.dir {
            None => Logs::default().dir,
            Some(dir) => PathBuf::from(self.non_empty(dir, "logs.dir")?),
        };
        let console = match raw.console {
            None => None,
            Some(c) => {
                RankList::parse(c.get_ref()).map_err(|e| self.err(c.span(), format!("logs.console: {e}")))?
            }
        };
        Ok(Logs { dir, console })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn logs_console_takes_all_or_a_rank_list_and_names_a_bad_one() {
        let nodes = "[[nodes]]\nhost = \"n1\"\n";
        let c = parse_ok(&format!("{nodes}{JOB}[logs]\nconsole = \"0,8-15\"\n"));
        assert!(c.logs.console.as_ref().is_some_and(|l| l.contains(9) && !l.contains(1)));
        assert_eq!(parse_ok(&format!("{nodes}{JOB}[logs]\nconsole = \"all\"\n")).logs.console, None);
        assert_err(
            &format!("{nodes}{JOB}[logs]\nconsole = \"0-x\"\n"),
            6,
            11,
            "logs.console: \"0-x\" is not a rank or a range of ranks (\"all\", \"0\", \"0,8-15\")",
        );
    }

    #[test]
    fn a_relative_logs_dir_is_the_config_files_not_the_working_directorys() {
        let nodes = "[[nodes]]\nhost = \"n1\"\n";
        let dir =
            |path: &str, logs: &str| parse(Path::new(path), &format!("{nodes}{JOB}{logs}")).unwrap().logs.dir;
        // `herd nodes -c ../proj/c.toml` must read the quarantine that `herd run -c c.toml` in
        // proj wrote.
        assert_eq!(dir("../proj/c.toml", ""), Path::new("../proj/herd-logs"));
        assert_eq!(dir("/p/c.toml", "[logs]\ndir = \"out/logs\"\n"), Path::new("/p/out/logs"));
        assert_eq!(dir("/p/c.toml", "[logs]\ndir = \"/scratch/logs\"\n"), Path::new("/scratch/logs"));
        assert_eq!(dir("c.toml", ""), Path::new("herd-logs"));
        // Through a symlink: the directory of the file it names, whose config key it shares.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("proj")).unwrap();
        std::fs::write(tmp.path().join("proj/c.toml"), format!("{nodes}{JOB}")).unwrap();
        std::os::unix::fs::symlink("proj/c.toml", tmp.path().join("link.toml")).unwrap();
        let linked = load(&tmp.path().join("link.toml")).unwrap().logs.dir;
        assert_eq!(linked, tmp.path().join("proj/herd-logs"));
    }
}
