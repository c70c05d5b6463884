//! `herd logs`: find the runs of a config under its logs directory, pick one, and select lines
//! from its node logs. The files are the ones a run wrote (see `output::RunFiles`).

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use regex::bytes::Regex;

use crate::output::node_log_path;

/// A past run, as its events.jsonl describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    pub id: String,
    pub dir: PathBuf,
    pub hosts: Vec<String>,
    /// Ranks per node; empty for runs recorded before herd wrote them.
    pub nprocs: Vec<u32>,
    /// The attempts that have a directory, in order.
    pub attempts: Vec<u32>,
    /// From these attempts on, other nodes (a spare promoted, the world shrunk): the hosts
    /// and ranks per node by node rank, as the run's events say.
    pub renamed: Vec<(u32, Vec<String>, Vec<u32>)>,
}

impl RunInfo {
    /// The hosts and ranks per node of one attempt.
    pub fn nodes_of(&self, attempt: u32) -> (&[String], &[u32]) {
        match self.renamed.iter().rev().find(|(from, _, _)| *from <= attempt) {
            Some((_, hosts, nprocs)) => (hosts, nprocs),
            None => (&self.hosts, &self.nprocs),
        }
    }
}

/// Runs of the config with `config_key` under `logs_dir`, oldest first (run ids sort by
/// their start time). Directories that are not runs, or runs of other configs, are skipped.
pub fn list_runs(logs_dir: &Path, config_key: &str) -> io::Result<Vec<RunInfo>> {
    let mut runs = Vec::new();
    let entries = match std::fs::read_dir(logs_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(runs),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let dir = entry?.path();
        let Some(first) = first_line(&dir.join("events.jsonl")) else { continue };
        let Ok(started) = serde_json::from_str::<serde_json::Value>(&first) else { continue };
        if started["event"] != "run_started" || started["config_key"] != config_key {
            continue;
        }
        let mut attempts: Vec<u32> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("attempt-")?.parse().ok())
            .collect();
        attempts.sort_unstable();
        let mut run = RunInfo {
            id: started["run_id"].as_str().unwrap_or_default().to_string(),
            hosts: strings(&started["hosts"]),
            nprocs: numbers(&started["nprocs"]),
            renamed: Vec::new(),
            dir,
            attempts,
        };
        renames(&mut run)?;
        runs.push(run);
    }
    runs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(runs)
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|h| h.as_str().map(String::from)).collect()
}

fn numbers(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect()
}

/// The run's `spare_promoted` and `world_changed` events, as `RunInfo::renamed`.
fn renames(run: &mut RunInfo) -> io::Result<()> {
    let text = std::fs::read_to_string(run.dir.join("events.jsonl"))?;
    for e in text.lines().filter(|l| l.contains("\"spare_promoted\"") || l.contains("\"world_changed\"")) {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(e) else { continue };
        let Some(attempt) = e["attempt"].as_u64().and_then(|a| u32::try_from(a).ok()) else { continue };
        let (mut hosts, mut nprocs) = {
            let (h, n) = run.nodes_of(attempt);
            (h.to_vec(), n.to_vec())
        };
        match e["event"].as_str() {
            Some("spare_promoted") => {
                let (Some(r), Some(host)) = (e["node_rank"].as_u64(), e["host"].as_str()) else { continue };
                let Some(slot) = hosts.get_mut(r as usize) else { continue };
                *slot = host.to_string();
            }
            Some("world_changed") => (hosts, nprocs) = (strings(&e["hosts"]), numbers(&e["nprocs"])),
            _ => continue,
        }
        run.renamed.retain(|(from, _, _)| *from != attempt);
        run.renamed.push((attempt, hosts, nprocs));
    }
    Ok(())
}

fn first_line(path: &Path) -> Option<String> {
    let mut line = String::new();
    io::BufReader::new(std::fs::File::open(path).ok()?).read_line(&mut line).ok()?;
    Some(line)
}

/// A run, node or rank asked of `herd logs` that is not there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("no runs of this config yet")]
    NoRuns,
    #[error("no run {wanted}: no runs of this config yet")]
    NoRunYet { wanted: String },
    #[error("no run {wanted} of this config; the latest runs are: {}", latest.join(", "))]
    NoSuchRun { wanted: String, latest: Vec<String> },
    #[error("{wanted} matches {} runs ({}); give more of the run id", matching.len(), matching.join(", "))]
    Ambiguous { wanted: String, matching: Vec<String> },
    #[error("run {run} has nodes 0-{last}, not {wanted}")]
    NoSuchNodeRank { run: String, last: usize, wanted: usize },
    #[error("run {run} has no node {wanted}; its nodes are {}", hosts.join(", "))]
    NoSuchHost { run: String, wanted: String, hosts: Vec<String> },
    #[error("run {run} does not record its ranks per node; use --node")]
    NoRanks { run: String },
    #[error("run {run} has ranks 0-{last}, not {wanted}")]
    NoSuchRank { run: String, last: u32, wanted: u32 },
}

/// The run asked for (a run id or a unique prefix of one), or the latest.
pub fn pick_run<'a>(runs: &'a [RunInfo], wanted: Option<&str>) -> Result<&'a RunInfo, LookupError> {
    let Some(wanted) = wanted else {
        return runs.last().ok_or(LookupError::NoRuns);
    };
    let matching: Vec<&RunInfo> = runs.iter().filter(|r| r.id.starts_with(wanted)).collect();
    let wanted = wanted.to_string();
    match matching.as_slice() {
        [one] => Ok(one),
        [] if runs.is_empty() => Err(LookupError::NoRunYet { wanted }),
        [] => Err(LookupError::NoSuchRun {
            wanted,
            latest: runs.iter().rev().take(5).map(|r| r.id.clone()).collect(),
        }),
        many => Err(LookupError::Ambiguous { wanted, matching: many.iter().map(|r| r.id.clone()).collect() }),
    }
}

/// A node by its node rank or its host name.
/// A node asked for by node rank, or by host (any host the run had, spares it promoted
/// included), as a `Selection` of it.
pub fn pick_node(run: &RunInfo, wanted: &str, sel: &mut Selection) -> Result<(), LookupError> {
    if let Ok(node_rank) = wanted.parse::<usize>() {
        if node_rank < run.hosts.len() {
            sel.nodes.push(node_rank);
            return Ok(());
        }
        let last = run.hosts.len().saturating_sub(1);
        return Err(LookupError::NoSuchNodeRank { run: run.id.clone(), last, wanted: node_rank });
    }
    let mut every: Vec<String> = run.hosts.clone();
    for host in run.renamed.iter().flat_map(|(_, hosts, _)| hosts) {
        if !every.contains(host) {
            every.push(host.clone());
        }
    }
    if !every.iter().any(|h| h == wanted) {
        return Err(LookupError::NoSuchHost {
            run: run.id.clone(),
            wanted: wanted.to_string(),
            hosts: every,
        });
    }
    sel.host = Some(wanted.to_string());
    Ok(())
}

/// The node that ran global rank `rank`.
pub fn node_of_rank(run: &RunInfo, rank: u32) -> Result<usize, LookupError> {
    if run.nprocs.is_empty() {
        return Err(LookupError::NoRanks { run: run.id.clone() });
    }
    let mut first = 0;
    for (node, &n) in run.nprocs.iter().enumerate() {
        if rank < first + n {
            return Ok(node);
        }
        first += n;
    }
    Err(LookupError::NoSuchRank { run: run.id.clone(), last: first.saturating_sub(1), wanted: rank })
}

/// Which lines to print.
#[derive(Debug, Default)]
pub struct Selection {
    /// Node ranks; empty (and no `host`): every node.
    pub nodes: Vec<usize>,
    /// A host: whichever node rank it held in each attempt.
    pub host: Option<String>,
    /// A global rank: its own log (`rank<R>.log`) where the attempt has one, else its node's.
    pub rank: Option<u32>,
    /// Attempts; empty: every attempt.
    pub attempts: Vec<u32>,
    pub grep: Option<Regex>,
}

/// Print the selected lines, node by node within each attempt, each prefixed with its node.
/// With more than one attempt, each starts with a `==> attempt k <==` line.
/// The node prefixes follow each attempt's nodes (see `RunInfo::nodes_of`).
pub fn print(run: &RunInfo, sel: &Selection, color: bool, out: &mut dyn Write) -> io::Result<()> {
    let attempts: Vec<u32> =
        if sel.attempts.is_empty() { run.attempts.clone() } else { sel.attempts.clone() };
    for &attempt in &attempts {
        if attempts.len() > 1 {
            writeln!(out, "==> attempt {attempt} <==")?;
        }
        let (hosts, nprocs) = run.nodes_of(attempt);
        let prefixes = crate::output::prefix::prefixes(hosts, color);
        let mut nodes = sel.nodes.clone();
        if let Some(host) = &sel.host {
            nodes.extend(hosts.iter().position(|h| h == host));
        }
        if sel.nodes.is_empty() && sel.host.is_none() {
            nodes = (0..hosts.len()).collect();
        }
        for &node in nodes.iter().filter(|&&n| n < hosts.len()) {
            let mut prefix = &prefixes[node];
            let mut path = node_log_path(&run.dir, attempt, node, &hosts[node]);
            let rank_prefix;
            if let Some(rank) = sel.rank {
                let own = crate::output::files::rank_log_path(&run.dir, attempt, rank);
                if own.is_file() {
                    let mut p = crate::output::prefix::RankPrefixes::new(hosts.to_vec(), color);
                    p.set_ranks(nprocs);
                    rank_prefix = p.get(rank, node).to_vec();
                    (path, prefix) = (own, &rank_prefix);
                }
            }
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                // A node that never started in that attempt has no log.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            };
            for line in io::BufReader::new(file).split(b'\n') {
                let line = line?;
                let text = line.strip_suffix(b"\r").unwrap_or(&line);
                if sel.grep.as_ref().is_none_or(|re| re.is_match(text)) {
                    out.write_all(prefix)?;
                    out.write_all(&line)?;
                    out.write_all(b"\n")?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> RunInfo {
        RunInfo {
            id: id.into(),
            dir: PathBuf::new(),
            hosts: vec!["a".into(), "b".into(), "c".into()],
            nprocs: vec![2, 1, 4],
            attempts: vec![0],
            renamed: Vec::new(),
        }
    }

    #[test]
    fn runs_by_id_prefix_or_the_latest() {
        let runs = [run("20261130-100000-aaaa"), run("20261130-110000-bbbb"), run("20261130-110500-cccc")];
        assert_eq!(pick_run(&runs, None).unwrap().id, "20261130-110500-cccc");
        assert_eq!(pick_run(&runs, Some("20261130-10")).unwrap().id, "20261130-100000-aaaa");
        let err = pick_run(&runs, Some("20261130-11")).unwrap_err().to_string();
        assert!(err.contains("matches 2 runs"), "{err}");
        let err = pick_run(&runs, Some("2025")).unwrap_err().to_string();
        assert!(err.contains("the latest runs are: 20261130-110500-cccc, "), "{err}");
        assert_eq!(pick_run(&[], None).unwrap_err().to_string(), "no runs of this config yet");
    }

    #[test]
    fn nodes_by_rank_or_host_and_global_ranks_to_nodes() {
        let r = run("x");
        let pick = |r: &RunInfo, wanted: &str| {
            let mut sel = Selection::default();
            pick_node(r, wanted, &mut sel).map(|()| (sel.nodes, sel.host))
        };
        assert_eq!(pick(&r, "1"), Ok((vec![1], None)));
        assert_eq!(pick(&r, "c"), Ok((vec![], Some("c".into()))));
        assert!(pick(&r, "3").unwrap_err().to_string().contains("nodes 0-2"));
        assert!(pick(&r, "d").unwrap_err().to_string().contains("its nodes are a, b, c"));
        // A spare the run promoted is one of its nodes.
        let promoted = RunInfo {
            renamed: vec![(1, vec!["a".into(), "d".into(), "c".into()], vec![2, 1, 4])],
            ..r.clone()
        };
        assert_eq!(pick(&promoted, "d"), Ok((vec![], Some("d".into()))));
        assert_eq!(promoted.nodes_of(0).0, ["a", "b", "c"]);
        assert_eq!(promoted.nodes_of(3).0, ["a", "d", "c"]);
        assert_eq!((0..7).map(|g| node_of_rank(&r, g).unwrap()).collect::<Vec<_>>(), [0, 0, 1, 2, 2, 2, 2]);
        assert!(node_of_rank(&r, 7).unwrap_err().to_string().contains("ranks 0-6"));
        let old = RunInfo { nprocs: vec![], ..r };
        assert!(node_of_rank(&old, 0).unwrap_err().to_string().contains("use --node"));
    }
}
