//! One console line for what every rank says alike: 64 nodes × 8 ranks, each rank started
//! through herd's rank wrapper as torchrun's are, all printing the same 4-line banner at once
//! (released together, as after a rendezvous) and then a line of their own. The console
//! shows each banner line a few times, naming every rank once; each rank's own line shows
//! after its banner, under its own prefix; each rank's file keeps all of its lines.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::herd::{self, only_run_dir};
use crate::support::testbed::Testbed;

const NODES: usize = 64;
const PER_NODE: usize = 8;
const LIMIT: Duration = Duration::from_secs(300);
const BANNER: [&str; 4] = [
    "*****************************************",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
    "W1206 12:00:00.000000 torch/distributed/run.py:792] please further tune the variable",
    "*****************************************",
];

/// `0-3,8` → [0, 1, 2, 3, 8].
fn expand(list: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in list.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        out.extend(lo.parse::<usize>().unwrap()..=hi.parse::<usize>().unwrap());
    }
    out
}

#[test]
fn sixty_four_nodes_of_eight_ranks_print_one_banner_not_two_thousand_lines() {
    let tb = Testbed::many(NODES);
    let go = tb.dir().join("go");
    let ready = tb.dir().join("ready");
    std::fs::create_dir_all(&ready).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&go).status().unwrap().success());
    // Each rank opens the FIFO `go` (read-write: that never blocks), says it is ready, waits
    // for its line of the release, then prints the banner and its own line.
    let banner: String = BANNER.iter().map(|l| format!("echo \"{l}\"; ")).collect();
    let rank = format!(
        "exec 3<>{go}; touch {ready}/$RANK; read -r x <&3; exec 3<&-; {banner}echo \"rank $RANK done\"",
        ready = ready.display(),
        go = go.display()
    );
    let node = format!(
        "i=0; while [ $i -lt {PER_NODE} ]; do \
         RANK=$((NODE_RANK * {PER_NODE} + i)) LOCAL_RANK=$i \"$HERD_RANK_WRAPPER\" 0 sh -c \"$0\" & \
         i=$((i + 1)); done; wait"
    );
    let hosts: Vec<String> =
        tb.nodes().iter().map(|n| format!("[[nodes]]\nhost = \"{}\"\n", n.addr)).collect();
    let config = format!(
        "{ssh}\n{hosts}\n[job]\nlauncher = \"command\"\nscript = \"sh\"\n\
         args = [\"-c\", '{node}', '{rank}']\ndevice = \"cpu\"\n[logs]\ndir = \"{logs}\"\n",
        ssh = tb.ssh_config_toml(),
        hosts = hosts.concat(),
        logs = tb.dir().join("logs").display(),
    );
    std::fs::write(tb.dir().join("cluster.toml"), config).unwrap();

    let mut run = herd::start(tb.dir(), &["run", "--no-preflight", "--collapse", "auto"], &[]);
    let world = NODES * PER_NODE;
    let all_ready = run.until(LIMIT, || std::fs::read_dir(&ready).map_or(0, |d| d.count()) == world);
    assert!(all_ready, "not every rank started");
    // The release: a line for each rank, all at once (`read` takes one line, a byte at a time).
    let mut release = std::fs::OpenOptions::new().write(true).open(&go).unwrap();
    std::io::Write::write_all(&mut release, "go\n".repeat(world).as_bytes()).unwrap();
    drop(release);
    let out = run.wait(LIMIT);
    out.assert_code(0);

    // Each banner line: a few console lines, which together name every rank once.
    let lines: Vec<&str> = out.stdout.lines().collect();
    let mut banner_lines = 0;
    let mut named: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    // Where each rank's banner lines were last seen on stdout, to check its own line follows.
    let mut last_banner: BTreeMap<usize, usize> = BTreeMap::new();
    for (at, line) in lines.iter().enumerate() {
        let Some((prefix, text)) = line.split_once("] ") else { continue };
        if !BANNER.contains(&text) {
            continue;
        }
        banner_lines += 1;
        let ranks = match prefix.strip_prefix("[r") {
            // One rank's, `[r12  10.x.y.z`, or many ranks', `[r0-511`.
            Some(p) if p.contains(' ') => vec![p.split(' ').next().unwrap().parse().unwrap()],
            Some(p) => expand(p),
            None => panic!("a banner line without ranks: {line}"),
        };
        for &r in &ranks {
            last_banner.insert(r, at);
        }
        named.entry(text).or_default().extend(ranks);
    }
    eprintln!("{banner_lines} banner lines on the console for {} printed", world * BANNER.len());
    assert!(banner_lines <= 32, "{banner_lines} banner lines:\n{}", out.stdout);
    // The first and last banner lines are the same text: each rank is named twice for it.
    for (text, mut ranks) in named {
        ranks.sort_unstable();
        let times = BANNER.iter().filter(|l| **l == text).count();
        let want: Vec<usize> = (0..world).flat_map(|r| std::iter::repeat_n(r, times)).collect();
        assert_eq!(ranks, want, "{text:?}: every rank named, once per time it printed it");
    }
    for r in 0..world {
        let done = format!("rank {r} done");
        let at: Vec<usize> =
            lines.iter().enumerate().filter(|(_, l)| l.ends_with(&done)).map(|(i, _)| i).collect();
        assert_eq!(at.len(), 1, "rank {r}'s own line once");
        assert!(lines[at[0]].starts_with(&format!("[r{r} ")), "under its own prefix: {}", lines[at[0]]);
        assert!(at[0] > last_banner[&r], "rank {r}'s own line after its banner");
    }

    // Its files keep every line.
    let run_dir = only_run_dir(&tb.dir().join("logs"));
    for r in [0, 7, 300, world - 1] {
        let file = std::fs::read_to_string(run_dir.join(format!("attempt-0/rank{r}.log"))).unwrap();
        let want: Vec<String> =
            BANNER.iter().map(|l| l.to_string()).chain([format!("rank {r} done")]).collect();
        assert_eq!(file.lines().collect::<Vec<_>>(), want, "rank {r}'s file");
    }
}
