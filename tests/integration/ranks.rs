//! Every rank's line whole and named: 3 nodes x 2 ranks, each printing 1,000 lines with plain
//! print() at once, under torchrun and DeepSpeed. Each line arrives once, whole, under its
//! rank's prefix, and in that rank's own log file.

use std::collections::BTreeMap;

use crate::support::cluster::Cluster;
use crate::support::herd::{self, only_run_dir};

const LINES: usize = 1000;

/// What a rank's line should be.
fn expected(rank: usize, local: usize, i: usize) -> String {
    format!("rank {rank} local {local} line {i} {}", "x".repeat(i % 64))
}

fn check(c: &Cluster, out: &herd::Finished) {
    let nodes = c.tb.nodes().len();
    let world = nodes * 2;
    let host_w = (0..nodes).map(|i| c.addr(i).len()).max().unwrap();
    let rank_w = (world - 1).to_string().len();
    // Per rank, its lines on stdout, in order.
    let mut got: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for rank in 0..world {
        let prefix = format!("[r{rank:<rank_w$} {:<host_w$}] ", c.addr(rank / 2));
        got.insert(rank, out.node_lines(&prefix));
    }
    let run_dir = only_run_dir(&c.logs());
    for rank in 0..world {
        let want: Vec<String> = (0..LINES).map(|i| expected(rank, rank % 2, i)).collect();
        let stdout: Vec<&str> = got[&rank].iter().copied().filter(|l| l.contains(" line ")).collect();
        assert_eq!(stdout.len(), LINES, "rank {rank}: {} lines on stdout", stdout.len());
        for (i, line) in stdout.iter().enumerate() {
            assert_eq!(*line, want[i], "rank {rank}, line {i}");
        }
        assert!(got[&rank].contains(&format!("rank {rank} done").as_str()), "rank {rank}'s stderr");
        // Its own file: exactly its lines, byte for byte.
        let file = std::fs::read_to_string(run_dir.join(format!("attempt-0/rank{rank}.log"))).unwrap();
        let lines: Vec<&str> = file.lines().filter(|l| l.contains(" line ")).collect();
        assert_eq!(lines, want, "rank {rank}'s log file");
        assert_eq!(file.lines().count(), LINES + 1, "rank {rank}'s log holds only its lines");
    }
    // No line anywhere holds two ranks' text.
    let joined = out.stdout.lines().filter(|l| l.matches("rank ").count() > 1).count();
    assert_eq!(joined, 0, "{joined} lines hold two ranks' text");
}

fn job(launcher: &str) -> String {
    format!(
        "launcher = \"{launcher}\"\nscript = \"tests/fixtures/ranks_print.py\"\nargs = [\"{LINES}\"]\nnproc_per_node = 2"
    )
}

#[test]
fn torchrun_ranks_lines_arrive_whole_once_and_named() {
    let c = Cluster::new(3);
    c.write_config(&job("torchrun"), "");
    for _ in 0..3 {
        let _ = std::fs::remove_dir_all(c.logs());
        let out = c.run();
        out.assert_code(0);
        check(&c, &out);
    }
}

#[test]
fn deepspeed_ranks_lines_arrive_whole_once_and_named() {
    let c = Cluster::new(3);
    c.write_config(&job("deepspeed"), "");
    let out = c.run();
    out.assert_code(0);
    check(&c, &out);
}

/// Progress lines, invalid UTF-8 and a 1 MB line without a newline reach rank 0's file byte
/// for byte; what rank 1 wrote before its SIGKILL, half a line included, is in its file.
#[test]
fn odd_lines_and_a_rank_killed_mid_line_keep_every_byte() {
    let c = Cluster::new(1);
    c.write_config(
        "launcher = \"torchrun\"\nscript = \"tests/fixtures/ranks_hard.py\"\nnproc_per_node = 2",
        "[restart]\nmax_restarts = 0\n",
    );
    let out = c.run();
    out.assert_code(1);
    let run_dir = only_run_dir(&c.logs());
    let rank0 = std::fs::read(run_dir.join("attempt-0/rank0.log")).unwrap();
    let want0 = [b"progress 1\rprogress 2\rprogress 3\r\nbad \xff\xfe utf8\n".as_slice(), &[b'y'; 1_000_000]]
        .concat();
    assert!(rank0 == want0, "rank 0's file: {} bytes, not the {} it wrote", rank0.len(), want0.len());
    let rank1 = std::fs::read_to_string(run_dir.join("attempt-0/rank1.log")).unwrap();
    let want1: String = (0..100).map(|i| format!("before kill {i}\n")).collect::<String>() + "half a line";
    assert_eq!(rank1, want1);
    // On stdout, under its prefix, each piece is a line of its own.
    let host = c.addr(0);
    assert!(out.node_lines(&format!("[r1 {host}] ")).contains(&"half a line"), "{}", out.stderr);
    assert!(out.node_lines(&format!("[r0 {host}] ")).contains(&"progress 2"), "{}", out.stderr);
}

/// `herd logs --rank R` prints exactly that rank's lines, under its prefix.
#[test]
fn herd_logs_reads_one_ranks_own_file() {
    let c = Cluster::new(2);
    c.write_config(&job("torchrun").replace(&format!("\"{LINES}\""), "\"5\""), "");
    c.run().assert_code(0);
    let out = herd::run(c.tb.dir(), &["logs", "--rank", "3"], crate::support::cluster::LIMIT);
    out.assert_code(0);
    let host_w = (0..2).map(|i| c.addr(i).len()).max().unwrap();
    let prefix = format!("[r3 {:<host_w$}] ", c.addr(1));
    let want: Vec<String> = (0..5).map(|i| expected(3, 1, i)).chain(["rank 3 done".to_string()]).collect();
    assert_eq!(out.node_lines(&prefix), want, "{out}");
    assert_eq!(out.stdout.lines().count(), 6, "{out}");
}

/// `--ranks 0`: only rank 0's lines, the launchers' and herd's reach stdout, every file keeps
/// all, and a failing rank 3's last lines are shown anyway, with the path of its log.
#[test]
fn a_console_filter_shows_its_ranks_and_a_failing_ranks_last_lines() {
    let c = Cluster::new(3);
    // Rank 3 fails once every rank has printed its lines (see the fixture).
    let done = c.tb.dir().join("done");
    std::fs::create_dir_all(&done).unwrap();
    c.write_config(
        &job("torchrun").replace(&format!("\"{LINES}\""), "\"50\""),
        &format!(
            "[env]\nHERD_T_FAIL_RANK = \"3\"\nHERD_T_DONE_DIR = \"{}\"\n\n[restart]\nmax_restarts = 0\n",
            done.display()
        ),
    );
    let out = herd::run(c.tb.dir(), &["run", "--ranks", "0"], crate::support::cluster::LIMIT);
    out.assert_code(1);
    let ranks_shown = |r: usize| out.stdout.lines().filter(|l| l.starts_with(&format!("[r{r} "))).count();
    assert_eq!(ranks_shown(0), 51, "rank 0: its 50 lines and its stderr line\n{out}");
    for r in [1, 2, 4, 5] {
        assert_eq!(ranks_shown(r), 0, "rank {r} was shown\n{out}");
    }
    assert!((1..=20).contains(&ranks_shown(3)), "rank 3's last lines\n{out}");
    assert!(out.stdout.lines().any(|l| l.starts_with("[r3 ") && l.ends_with("rank 3 dying")), "{out}");
    assert!(out.stderr.contains("rank 3 failed; its last") && out.stderr.contains("rank3.log"), "{out}");
    // The launchers' own lines still show (torchrun's failure summary among them).
    assert!(out.stdout.lines().any(|l| l.starts_with("[1 ")), "{out}");
    let run_dir = only_run_dir(&c.logs());
    for rank in 0..6 {
        let file = std::fs::read_to_string(run_dir.join(format!("attempt-0/rank{rank}.log"))).unwrap();
        assert_eq!(file.lines().filter(|l| l.contains(" line ")).count(), 50, "rank {rank}'s file");
    }
}

/// A multiplexer SIGKILLed under its job leaves neither its socket nor its rank wrapper on the
/// node: its agent removes their directory, and only its own, once the job is gone.
#[test]
fn a_killed_multiplexer_leaves_no_files_behind() {
    let c = Cluster::new(1);
    c.write_config(
        "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", \"echo mux home ${HERD_OUTPUT%/s}; sleep 1; kill -9 $PPID; sleep 1\"]",
        "[restart]\nmax_restarts = 0\n",
    );
    let out = c.run();
    out.assert_code(1);
    let home = out.stdout.lines().find_map(|l| l.split_once("mux home ")).map(|(_, d)| d.to_string());
    let home = home.unwrap_or_else(|| panic!("no `mux home` line\n{out}"));
    // Named by the node's marker (config:run:attempt:node): agents of nodes that share a
    // /tmp, not a PID namespace, have the same pids.
    assert!(home.contains("/herd-out-") && home.ends_with(":0:0"), "{home}\n{out}");
    assert!(!std::path::Path::new(&home).exists(), "{home} is still there\n{out}");
}
