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

    /// The hosts and ranks per node of the run's first attempt and of each change after it.
    fn worlds(&self) -> impl Iterator<Item = (&Vec<String>, &Vec<u32>)> {
        std::iter::once((&self.hosts, &self.nprocs)).chain(self.renamed.iter().map(|(_, h, n)| (h, n)))
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
    #[error("node rank {wanted} did not run in attempt {attempt} of run {run}; {} did", up_to("node rank", *last as u64))]
    NodeNotInAttempt { run: String, attempt: u32, last: usize, wanted: usize },
    #[error("{wanted} did not run in attempt {attempt} of run {run}; its nodes were {}", hosts.join(", "))]
    HostNotInAttempt { run: String, attempt: u32, wanted: String, hosts: Vec<String> },
    #[error("rank {wanted} did not run in attempt {attempt} of run {run}; {} did", up_to("rank", u64::from(*last)))]
    RankNotInAttempt { run: String, attempt: u32, last: u32, wanted: u32 },
}

/// "rank 0", or "ranks 0-`last`".
fn up_to(what: &str, last: u64) -> String {
    match last {
        0 => format!("{what} 0"),
        _ => format!("{what}s 0-{last}"),
    }
}

/// The run a run's record names as the one before it in its Slurm job's lineage (herd.json's
/// `previous_run`), if any.
pub fn previous_run(run: &RunInfo) -> Option<String> {
    let about = std::fs::read_to_string(run.dir.join("herd.json")).ok()?;
    let about: serde_json::Value = serde_json::from_str(&about).ok()?;
    about["previous_run"].as_str().map(str::to_string)
}

/// `run` and the runs before it in its lineage, oldest first: each one's `previous_run`, as
/// long as it is among `runs` (and never twice).
pub fn lineage<'a>(runs: &'a [RunInfo], run: &'a RunInfo) -> Vec<&'a RunInfo> {
    let mut chain = vec![run];
    while let Some(prev) = previous_run(chain[chain.len() - 1]) {
        match runs.iter().find(|r| r.id == prev) {
            Some(r) if !chain.iter().any(|c| c.id == r.id) => chain.push(r),
            _ => break,
        }
    }
    chain.reverse();
    chain
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

/// A node asked for by node rank (one any attempt had), or by host (any host the run had,
/// spares it promoted included), as a `Selection` of it.
pub fn pick_node(run: &RunInfo, wanted: &str, sel: &mut Selection) -> Result<(), LookupError> {
    if let Ok(node_rank) = wanted.parse::<usize>() {
        let most = run.worlds().map(|(hosts, _)| hosts.len()).max().unwrap_or(0);
        if node_rank < most {
            sel.node = Some(node_rank);
            return Ok(());
        }
        let last = most.saturating_sub(1);
        return Err(LookupError::NoSuchNodeRank { run: run.id.clone(), last, wanted: node_rank });
    }
    let mut every: Vec<String> = Vec::new();
    for host in run.worlds().flat_map(|(hosts, _)| hosts) {
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

/// A global rank asked for, as a `Selection` of it: one that some attempt ran, counted over
/// that attempt's own ranks per node (a promoted spare may run more or fewer of them).
pub fn pick_rank(run: &RunInfo, rank: u32, sel: &mut Selection) -> Result<(), LookupError> {
    if run.nprocs.is_empty() {
        return Err(LookupError::NoRanks { run: run.id.clone() });
    }
    let most = run.worlds().map(|(_, nprocs)| nprocs.iter().sum::<u32>()).max().unwrap_or(0);
    if rank >= most {
        return Err(LookupError::NoSuchRank {
            run: run.id.clone(),
            last: most.saturating_sub(1),
            wanted: rank,
        });
    }
    sel.rank = Some(rank);
    Ok(())
}

/// The node that ran global rank `rank`, given the ranks per node.
fn node_of_rank(nprocs: &[u32], rank: u32) -> Option<usize> {
    let mut first = 0;
    for (node, &n) in nprocs.iter().enumerate() {
        if rank < first + n {
            return Some(node);
        }
        first += n;
    }
    None
}

/// Per attempt to print, the node ranks whose lines to print: the node, host or rank selected
/// as that attempt had it. Without `--attempt`, an attempt that did not have it is left out;
/// an attempt asked for that did not have it is an error saying what it had.
pub fn per_attempt(run: &RunInfo, sel: &Selection) -> Result<Vec<(u32, Vec<usize>)>, LookupError> {
    let asked = !sel.attempts.is_empty();
    let attempts = if asked { &sel.attempts } else { &run.attempts };
    let mut out = Vec::new();
    for &attempt in attempts {
        let (hosts, nprocs) = run.nodes_of(attempt);
        let node = if let Some(node) = sel.node {
            Some(node).filter(|&n| n < hosts.len())
        } else if let Some(host) = &sel.host {
            hosts.iter().position(|h| h == host)
        } else if let Some(rank) = sel.rank {
            node_of_rank(nprocs, rank)
        } else {
            out.push((attempt, (0..hosts.len()).collect()));
            continue;
        };
        match node {
            Some(node) => out.push((attempt, vec![node])),
            None if asked => return Err(not_in(run, sel, attempt)),
            None => {}
        }
    }
    Ok(out)
}

/// Why attempt `attempt` has nothing of what `sel` selects.
fn not_in(run: &RunInfo, sel: &Selection, attempt: u32) -> LookupError {
    let (hosts, nprocs) = run.nodes_of(attempt);
    let id = run.id.clone();
    match (sel.node, &sel.host, sel.rank) {
        (Some(wanted), _, _) => {
            LookupError::NodeNotInAttempt { run: id, attempt, last: hosts.len().saturating_sub(1), wanted }
        }
        (_, Some(wanted), _) => {
            LookupError::HostNotInAttempt { run: id, attempt, wanted: wanted.clone(), hosts: hosts.to_vec() }
        }
        (_, _, Some(wanted)) => {
            let last = nprocs.iter().sum::<u32>().saturating_sub(1);
            LookupError::RankNotInAttempt { run: id, attempt, last, wanted }
        }
        (None, None, None) => unreachable!("every attempt has every one of its nodes"),
    }
}

/// Which lines to print.
#[derive(Debug, Default)]
pub struct Selection {
    /// A node rank: the node that held it in each attempt. None (and no `host` or `rank`):
    /// every node.
    pub node: Option<usize>,
    /// A host: whichever node rank it held in each attempt.
    pub host: Option<String>,
    /// A global rank: its own log (`rank<R>.log`) where the attempt has one, else its node's.
    pub rank: Option<u32>,
    /// Attempts; empty: every attempt.
    pub attempts: Vec<u32>,
    pub grep: Option<Regex>,
}

/// Print the selected lines, node by node within each attempt, each prefixed with its node.
/// `attempts`: the attempts and their node ranks to print, from `per_attempt`. With more
/// than one attempt, each starts with a `==> attempt k <==` line.
/// The node prefixes follow each attempt's nodes (see `RunInfo::nodes_of`).
pub fn print(
    run: &RunInfo,
    sel: &Selection,
    attempts: &[(u32, Vec<usize>)],
    color: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    let headed = if sel.attempts.is_empty() { run.attempts.len() > 1 } else { sel.attempts.len() > 1 };
    for (attempt, nodes) in attempts {
        let attempt = *attempt;
        if headed {
            writeln!(out, "==> attempt {attempt} <==")?;
        }
        let (hosts, nprocs) = run.nodes_of(attempt);
        let prefixes = crate::output::prefix::prefixes(hosts, color);
        let mut rank_prefixes = crate::output::prefix::RankPrefixes::new(hosts.to_vec(), color);
        rank_prefixes.set_ranks(nprocs);
        for &node in nodes.iter().filter(|&&n| n < hosts.len()) {
            let first: u32 = nprocs.iter().take(node).sum();
            let node_ranks = first..first + nprocs.get(node).copied().unwrap_or(0);
            // `--rank R`: that rank's own log where it has one. Otherwise the node's log, its
            // lines told apart by the ranks' logs.
            let (path, ranks) = match sel.rank {
                Some(rank) if rank_log(&run.dir, attempt, rank).is_file() => {
                    (rank_log(&run.dir, attempt, rank), vec![rank])
                }
                _ => (node_log_path(&run.dir, attempt, node, &hosts[node]), node_ranks.collect()),
            };
            let Some(file) = open_log(&path)? else { continue };
            let mut own = Vec::new();
            for rank in ranks {
                if let Some(f) = open_log(&rank_log(&run.dir, attempt, rank))? {
                    own.push((rank, io::BufReader::new(f)));
                }
            }
            for line in Attributed::new(io::BufReader::new(file), own) {
                let (rank, line) = line?;
                let text = line.strip_suffix(b"\r").unwrap_or(&line);
                if sel.grep.as_ref().is_none_or(|re| re.is_match(text)) {
                    out.write_all(match rank {
                        Some(rank) => rank_prefixes.get(rank, node),
                        None => &prefixes[node],
                    })?;
                    out.write_all(&line)?;
                    out.write_all(b"\n")?;
                }
            }
        }
    }
    Ok(())
}

use crate::output::files::rank_log_path as rank_log;

/// A log, or `None` where there is none (a node that never started in that attempt, a rank
/// that printed nothing).
fn open_log(path: &Path) -> io::Result<Option<std::fs::File>> {
    match std::fs::File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

/// A node log's lines, each with the rank that printed it (`None`: the launcher's own), as
/// the live run prefixed them. The node log holds every line of the node in the order they
/// came; each rank's log holds that rank's lines in the same order, so it is a subsequence
/// of the node's: a line is the rank's whose next unclaimed line it is. Where two ranks' next
/// lines are the same, the one whose following line also comes next is taken (else the
/// lower rank): the text is the same either way. Lines are streamed, a few held per rank.
pub struct Attributed<R> {
    node: std::io::Split<R>,
    /// Each rank's log, with its next two lines once read.
    ranks: Vec<(u32, std::io::Split<R>, std::collections::VecDeque<Vec<u8>>)>,
    /// The node log's next line, read ahead to settle a tie.
    ahead: Option<Vec<u8>>,
}

impl<R: io::BufRead> Attributed<R> {
    pub fn new(node: R, ranks: Vec<(u32, R)>) -> Attributed<R> {
        let ranks = ranks.into_iter().map(|(r, f)| (r, f.split(b'\n'), Default::default())).collect();
        Attributed { node: node.split(b'\n'), ranks, ahead: None }
    }

    fn fill(&mut self, want: usize) -> io::Result<()> {
        for (_, lines, next) in &mut self.ranks {
            while next.len() < want {
                match lines.next() {
                    Some(line) => next.push_back(line?),
                    None => break,
                }
            }
        }
        Ok(())
    }

    fn next_line(&mut self) -> io::Result<Option<(Option<u32>, Vec<u8>)>> {
        let Some(line) = self.ahead.take().map(Ok).or_else(|| self.node.next()).transpose()? else {
            return Ok(None);
        };
        self.fill(1)?;
        let heads: Vec<usize> =
            (0..self.ranks.len()).filter(|&i| self.ranks[i].2.front() == Some(&line)).collect();
        let pick = match heads[..] {
            [] => None,
            [one] => Some(one),
            [first, ..] => {
                self.fill(2)?;
                self.ahead = self.node.next().transpose()?;
                let follows = |i: &&usize| {
                    self.ranks[**i].2.get(1).is_some() && self.ranks[**i].2.get(1) == self.ahead.as_ref()
                };
                Some(*heads.iter().find(follows).unwrap_or(&first))
            }
        };
        Ok(Some(match pick {
            Some(i) => {
                self.ranks[i].2.pop_front();
                (Some(self.ranks[i].0), line)
            }
            None => (None, line),
        }))
    }
}

impl<R: io::BufRead> Iterator for Attributed<R> {
    type Item = io::Result<(Option<u32>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_line().transpose()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_node_logs_lines_are_told_apart_by_its_ranks_logs() {
        let attribute = |node: &str, ranks: &[(u32, &str)]| -> Vec<(Option<u32>, String)> {
            let ranks = ranks.iter().map(|(r, t)| (*r, t.as_bytes())).collect();
            super::Attributed::new(node.as_bytes(), ranks)
                .map(|l| l.map(|(r, t)| (r, String::from_utf8(t).unwrap())))
                .collect::<std::io::Result<_>>()
                .unwrap()
        };
        let l = |r: Option<u32>, t: &str| (r, t.to_string());
        // The launcher's own lines, and two ranks' lines interleaved.
        assert_eq!(
            attribute("start\nr0 a\nr1 a\nr0 b\nend\n", &[(0, "r0 a\nr0 b\n"), (1, "r1 a\n")]),
            [l(None, "start"), l(Some(0), "r0 a"), l(Some(1), "r1 a"), l(Some(0), "r0 b"), l(None, "end")]
        );
        // Two ranks print the same line; the one whose next line follows is the one.
        assert_eq!(
            attribute("same\nonly 1\nsame\n", &[(0, "same\n"), (1, "same\nonly 1\n")]),
            [l(Some(1), "same"), l(Some(1), "only 1"), l(Some(0), "same")]
        );
        // A launcher line alike a rank's that comes before the rank's own.
        assert_eq!(attribute("x\nx\n", &[(3, "x\n")]), [l(Some(3), "x"), l(None, "x")]);
        // No rank logs (a command job): every line the node's.
        assert_eq!(attribute("a\nb", &[]), [l(None, "a"), l(None, "b")]);
    }

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
            pick_node(r, wanted, &mut sel).map(|()| (sel.node, sel.host))
        };
        assert_eq!(pick(&r, "1"), Ok((Some(1), None)));
        assert_eq!(pick(&r, "c"), Ok((None, Some("c".into()))));
        assert!(pick(&r, "3").unwrap_err().to_string().contains("nodes 0-2"));
        assert!(pick(&r, "d").unwrap_err().to_string().contains("its nodes are a, b, c"));
        // A spare the run promoted is one of its nodes.
        let promoted = RunInfo {
            renamed: vec![(1, vec!["a".into(), "d".into(), "c".into()], vec![2, 1, 4])],
            ..r.clone()
        };
        assert_eq!(pick(&promoted, "d"), Ok((None, Some("d".into()))));
        assert_eq!(promoted.nodes_of(0).0, ["a", "b", "c"]);
        assert_eq!(promoted.nodes_of(3).0, ["a", "d", "c"]);
        assert_eq!(
            (0..7).map(|g| node_of_rank(&r.nprocs, g).unwrap()).collect::<Vec<_>>(),
            [0, 0, 1, 2, 2, 2, 2]
        );
        let rank =
            |r: &RunInfo, g: u32| pick_rank(r, g, &mut Selection::default()).map_err(|e| e.to_string());
        assert_eq!(rank(&r, 6), Ok(()));
        assert!(rank(&r, 7).unwrap_err().contains("ranks 0-6"));
        let old = RunInfo { nprocs: vec![], ..r };
        assert!(rank(&old, 0).unwrap_err().contains("use --node"));
    }

    /// Attempt 0 on a, b, c with one rank each; attempt 1 with spare d (3 ranks) for b;
    /// attempt 2 shrunk to a, d.
    /// A lineage follows each run's record back, stops at a run that is not among the runs
    /// (or at a loop), and reads oldest first.
    #[test]
    fn a_lineage_follows_previous_run_back_and_reads_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let at = |id: &str, previous: Option<&str>| {
            let d = dir.path().join(id);
            std::fs::create_dir_all(&d).unwrap();
            let about = serde_json::json!({ "previous_run": previous });
            std::fs::write(d.join("herd.json"), about.to_string()).unwrap();
            RunInfo { dir: d, ..run(id) }
        };
        let runs = [
            at("r1", Some("r0-gone")),
            at("r2", Some("r1")),
            at("r3", None),
            at("r4", Some("r2")),
            at("r5", Some("r5")),
        ];
        let ids = |chain: Vec<&RunInfo>| chain.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(lineage(&runs, &runs[3])), ["r1", "r2", "r4"]);
        assert_eq!(ids(lineage(&runs, &runs[2])), ["r3"]);
        assert_eq!(ids(lineage(&runs, &runs[4])), ["r5"]);
        assert_eq!(previous_run(&runs[1]).as_deref(), Some("r1"));
    }

    fn changing() -> RunInfo {
        RunInfo {
            id: "x".into(),
            dir: PathBuf::new(),
            hosts: vec!["a".into(), "b".into(), "c".into()],
            nprocs: vec![1, 1, 1],
            attempts: vec![0, 1, 2],
            renamed: vec![
                (1, vec!["a".into(), "d".into(), "c".into()], vec![1, 3, 1]),
                (2, vec!["a".into(), "d".into()], vec![1, 3]),
            ],
        }
    }

    fn resolve(
        run: &RunInfo,
        pick: impl Fn(&mut Selection),
        attempts: &[u32],
    ) -> Result<Vec<(u32, Vec<usize>)>, String> {
        let mut sel = Selection { attempts: attempts.to_vec(), ..Selection::default() };
        pick(&mut sel);
        per_attempt(run, &sel).map_err(|e| e.to_string())
    }

    #[test]
    fn a_rank_is_found_in_each_attempts_own_world() {
        let r = changing();
        // Rank 2: node 2 in attempt 0, the spare's second rank in attempts 1 and 2.
        let two = |sel: &mut Selection| pick_rank(&r, 2, sel).unwrap();
        assert_eq!(resolve(&r, two, &[]), Ok(vec![(0, vec![2]), (1, vec![1]), (2, vec![1])]));
        assert_eq!(resolve(&r, two, &[1]), Ok(vec![(1, vec![1])]));
        // Rank 4 only ran once the spare came.
        let four = |sel: &mut Selection| pick_rank(&r, 4, sel).unwrap();
        assert_eq!(resolve(&r, four, &[]), Ok(vec![(1, vec![2])]));
        assert_eq!(
            resolve(&r, four, &[0]),
            Err("rank 4 did not run in attempt 0 of run x; ranks 0-2 did".into())
        );
        assert!(pick_rank(&r, 5, &mut Selection::default()).unwrap_err().to_string().contains("ranks 0-4"));
    }

    #[test]
    fn a_node_missing_from_an_attempt_asked_for_is_an_error() {
        let r = changing();
        let two = |sel: &mut Selection| pick_node(&r, "2", sel).unwrap();
        assert_eq!(resolve(&r, two, &[]), Ok(vec![(0, vec![2]), (1, vec![2])]));
        assert_eq!(
            resolve(&r, two, &[2]),
            Err("node rank 2 did not run in attempt 2 of run x; node ranks 0-1 did".into())
        );
        let b = |sel: &mut Selection| pick_node(&r, "b", sel).unwrap();
        assert_eq!(resolve(&r, b, &[]), Ok(vec![(0, vec![1])]));
        assert_eq!(
            resolve(&r, b, &[1]),
            Err("b did not run in attempt 1 of run x; its nodes were a, d, c".into())
        );
        let d = |sel: &mut Selection| pick_node(&r, "d", sel).unwrap();
        assert_eq!(resolve(&r, d, &[]), Ok(vec![(1, vec![1]), (2, vec![1])]));
        // Nothing picked: every node of each attempt.
        assert_eq!(
            resolve(&r, |_| (), &[]),
            Ok(vec![(0, vec![0, 1, 2]), (1, vec![0, 1, 2]), (2, vec![0, 1])])
        );
    }
}
