//! Scenario 8 (issue 13): N nodes x R ranks, every rank printing L lines with plain print()
//! at once. Lines/s, herd's peak RSS, and a checker's count of malformed, lost, duplicated and
//! misnamed lines, on stdout and (herd) in the per-rank files.

use std::path::{Path, PathBuf};

use super::herd_support::{self, HERD};
use super::job::{clear_logs, hosts, pdsh_args, pdsh_ssh_append, write_config};
use super::measure::{env_dims, fmt_stat, own_cost, per_second, runs, table, Measured, Tracked};
use super::testbed::Testbed;

/// herd twice: as a user gets it (past 8 ranks, the same line from many ranks shown once:
/// here every line differs, so this is what holding each line for its twins costs), and
/// with every line shown as it comes.
const NAMES: [&str; 3] =
    ["pdsh -R ssh -f 64", "herd run --no-preflight", "herd run --no-preflight --collapse never"];

/// A launcher's run: what it cost, and the checks of its stdout and (herd) its rank files.
type Run = (Measured, RankCheck, RankCheck);

pub fn run() {
    let reps = runs(3);
    let plain = env_dims::<3>("BENCH_RANKS", "64x8x2000,64x8x10000");
    let torch = env_dims::<3>("BENCH_RANKS_TORCH", "8x8x2000");
    let most = plain.iter().chain(&torch).map(|s| s[0]).max().unwrap_or(1);
    let tb = Testbed::new(most);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("ranks.sh");
    std::fs::write(&script, RANKS_SH).unwrap();
    let venv = (!torch.is_empty()).then(herd_support::torch_venv);
    std::env::set_var("PDSH_SSH_ARGS_APPEND", pdsh_ssh_append(&tb));
    println!("\n### Every rank printing at once: N nodes x R ranks, each rank L lines of plain print() under python3 -u; stdout to a file ({reps} runs each, alternating)\n");
    let list = |sizes: &[[usize; 3]]| {
        sizes.iter().map(|[n, r, l]| format!("{n}x{r}x{l}")).collect::<Vec<_>>().join(",")
    };
    println!(
        "Rerun: `BENCH_RUNS={reps} BENCH_RANKS={} BENCH_RANKS_TORCH={} cargo bench --bench herd_bench -- ranks`\n",
        list(&plain),
        list(&torch)
    );
    table("| N x R x L | ranks start by | launcher | lines/s median | spread | ratio to pdsh | launcher CPU s | launcher peak RSS MiB | malformed / lost / duplicated / misnamed on stdout (all runs) | same in the rank files |");
    let sizes = plain.iter().map(|&s| (s, false)).chain(torch.iter().map(|&s| (s, true)));
    for (rep_size, size) in sizes.enumerate() {
        let size = Size::new(&tb, dir.path(), &script, size, venv.as_deref(), 29700 + rep_size as u16);
        let res = size.measure(reps);
        size.print(&res);
    }
}

/// One size: N nodes x R ranks x L lines, the ranks started by a shell loop or by torchrun;
/// what pdsh runs on every node, and herd's config.
struct Size<'a> {
    dir: &'a Path,
    n: usize,
    per: usize,
    lines: usize,
    with_torch: bool,
    hosts: Vec<String>,
    remote: String,
    config: String,
}

impl<'a> Size<'a> {
    fn new(
        tb: &Testbed,
        dir: &'a Path,
        script: &Path,
        ([n, per, lines], with_torch): ([usize; 3], bool),
        venv: Option<&Path>,
        port: u16,
    ) -> Size<'a> {
        let fixture = format!("{}/tests/fixtures/ranks_print.py", env!("CARGO_MANIFEST_DIR"));
        let hosts = hosts(tb, n);
        let hosts_file = dir.join("hosts");
        std::fs::write(&hosts_file, hosts.join("\n") + "\n").unwrap();
        let remote = format!(
            "sh {} {per} {lines} {} {} {} {port} {fixture}",
            script.display(),
            hosts_file.display(),
            if with_torch { "torch" } else { "-" },
            venv.map_or("-".into(), |v| v.display().to_string()),
        );
        let job = if with_torch {
            format!(
                "launcher = \"torchrun\"\nscript = \"{fixture}\"\nargs = [\"{lines}\"]\nnproc_per_node = {per}\nsetup = \"source {}/bin/activate\"",
                venv.unwrap().display()
            )
        } else {
            format!(
                "launcher = \"command\"\nscript = \"sh\"\nargs = [\"{}\", \"{per}\", \"{lines}\", \"{}\", \"-\", \"-\", \"0\", \"{fixture}\"]",
                script.display(),
                hosts_file.display()
            )
        };
        let extra = if with_torch { "[rendezvous]\ninterface = \"eth0\"\n" } else { "" };
        let config = write_config(tb, dir, &hosts, &job, extra).display().to_string();
        Size { dir, n, per, lines, with_torch, hosts, remote, config }
    }

    /// `reps` rounds of pdsh, then herd.
    fn measure(&self, reps: usize) -> Vec<Vec<Run>> {
        let mut res: Vec<Vec<Run>> = vec![vec![]; NAMES.len()];
        for _ in 0..reps {
            for (i, name) in NAMES.iter().enumerate() {
                let out_path = self.dir.join("out.txt");
                let out = std::fs::File::create(&out_path).unwrap();
                clear_logs(self.dir);
                let t = match i {
                    0 => Tracked::spawn("pdsh", &pdsh_args(&self.hosts, &self.remote), out.into()),
                    1 => Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &self.config], out.into()),
                    _ => {
                        let args = ["run", "--no-preflight", "--collapse", "never", "-c", &self.config];
                        Tracked::spawn(HERD, &args, out.into())
                    }
                };
                let m = t.finish();
                assert!(m.success, "{name} failed");
                let stdout = self.check_stdout(i, &out_path);
                let files = if i > 0 { self.check_files() } else { RankCheck::default() };
                res[i].push((m, stdout, files));
            }
        }
        res
    }

    /// Launcher `i`'s stdout, checked.
    fn check_stdout(&self, i: usize, out: &Path) -> RankCheck {
        let data = std::fs::read(out).unwrap();
        let (ranks, lines, with_torch) = (self.n * self.per, self.lines, self.with_torch);
        if i == 0 {
            // pdsh's stderr (the `done` lines, torchrun's own) is not in the file.
            check_ranks(&data, ranks, lines, pdsh_split, |_, _| false)
        } else {
            check_ranks(&data, ranks, lines, herd_split, |named, p| {
                // The fixture's last line; the launcher's own lines (torchrun's warnings).
                (named.is_some() && done_line(p)) || (named.is_none() && with_torch)
            })
        }
    }

    /// herd's rank files of the run, checked together.
    fn check_files(&self) -> RankCheck {
        let (ranks, lines) = (self.n * self.per, self.lines);
        let attempt: PathBuf = herd_support::only_run_dir(&self.dir.join("logs")).join("attempt-0");
        let mut all = RankCheck::default();
        for r in 0..ranks {
            let text = std::fs::read(attempt.join(format!("rank{r}.log"))).unwrap_or_default();
            let mut c = check_ranks(&text, ranks, lines, |l| Some((Some(r), l)), |_, p| done_line(p));
            // Each file holds one rank: what it lacks is the rank's own lines.
            c.lost = c.lost.saturating_sub((ranks - 1) * lines);
            all.add(c);
        }
        all
    }

    /// A row per launcher.
    fn print(&self, res: &[Vec<Run>]) {
        let (n, per, lines) = (self.n, self.per, self.lines);
        let total = (n * per * lines) as f64;
        let measured = |i: usize| res[i].iter().map(|r| &r.0).collect::<Vec<_>>();
        let pdsh_rate = fmt_stat(&per_second(total, &measured(0)), 0).2;
        let sum = |cs: &mut dyn Iterator<Item = RankCheck>| {
            let mut t = RankCheck::default();
            cs.for_each(|c| t.add(c));
            format!("{} / {} / {} / {}", t.malformed, t.lost, t.duplicated, t.misnamed)
        };
        for (i, name) in NAMES.iter().enumerate() {
            let (m, s, v) = fmt_stat(&per_second(total, &measured(i)), 0);
            let (own, rss) = own_cost(&measured(i));
            let files = if i > 0 { sum(&mut res[i].iter().map(|r| r.2)) } else { "-".into() };
            println!(
                "| {n} x {per} x {lines} | {} | {name} | {m} | {s} | {:.2} | {own} | {rss} | {} | {files} |",
                if self.with_torch { "torchrun" } else { "a shell loop" },
                v / pdsh_rate,
                sum(&mut res[i].iter().map(|r| r.1)),
            );
        }
    }
}

/// What each node runs (`ranks.sh`, beside this file): R ranks printing L lines each.
const RANKS_SH: &str = include_str!("ranks.sh");

/// What a checker finds in one launcher's output: the lines each rank printed, whole and in
/// the right place, counted against what they should be.
#[derive(Default, Clone, Copy)]
struct RankCheck {
    /// Lines that are not exactly one of the fixture's lines, with the right prefix.
    malformed: usize,
    /// (rank, line) pairs never seen whole.
    lost: usize,
    /// Whole lines seen more than once.
    duplicated: usize,
    /// Lines under a prefix naming another rank than the line's own.
    misnamed: usize,
}

impl RankCheck {
    fn add(&mut self, other: RankCheck) {
        self.malformed += other.malformed;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.misnamed += other.misnamed;
    }
}

/// The payload of a fixture line, `rank R local L line I x{I % 64}`, as (R, I), or None.
fn fixture_line(payload: &[u8]) -> Option<(usize, usize)> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut w = text.splitn(7, ' ');
    let (a, r, b, _l, c, i) = (w.next()?, w.next()?, w.next()?, w.next()?, w.next()?, w.next()?);
    let xs = w.next().unwrap_or("");
    let (r, i): (usize, usize) = (r.parse().ok()?, i.parse().ok()?);
    let ok =
        a == "rank" && b == "local" && c == "line" && xs.len() == i % 64 && xs.bytes().all(|x| x == b'x');
    // `line 0 ` ends in a space: splitn leaves "" for the x's, which is right.
    ok.then_some((r, i))
}

/// Checks an output: each line is `prefix payload`; `prefix_rank` says which rank a prefix
/// names (None: a launcher or node line, or a launcher that names no rank). Lines that are
/// not the fixture's data lines but are known (the fixture's `rank R done`, torchrun's own
/// lines under a launcher prefix) are passed by `other`.
fn check_ranks(
    data: &[u8],
    ranks: usize,
    lines: usize,
    split: impl Fn(&[u8]) -> Option<(Option<usize>, &[u8])>,
    other: impl Fn(Option<usize>, &[u8]) -> bool,
) -> RankCheck {
    let mut seen = vec![0u8; ranks * lines];
    let mut c = RankCheck::default();
    for line in data.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let Some((named, payload)) = split(line) else {
            c.malformed += 1;
            show_malformed(c.malformed, line);
            continue;
        };
        match fixture_line(payload) {
            Some((r, i)) if r < ranks && i < lines => {
                if named.is_some_and(|n| n != r) {
                    c.misnamed += 1;
                }
                let s = &mut seen[r * lines + i];
                if *s > 0 {
                    c.duplicated += 1;
                }
                *s = s.saturating_add(1);
            }
            _ if other(named, payload) => {}
            _ => {
                c.malformed += 1;
                show_malformed(c.malformed, line);
            }
        }
    }
    c.lost = seen.iter().filter(|&&s| s == 0).count();
    c
}

/// The first few malformed lines of a check, on stderr, to see what broke them.
fn show_malformed(count: usize, line: &[u8]) {
    if count <= 5 {
        eprintln!("malformed: {:?}", String::from_utf8_lossy(&line[..line.len().min(200)]));
    }
}

/// `rank R done`, the fixture's last line (on stderr).
fn done_line(payload: &[u8]) -> bool {
    payload
        .strip_prefix(b"rank ")
        .and_then(|p| p.strip_suffix(b" done"))
        .is_some_and(|r| r.iter().all(u8::is_ascii_digit))
}

/// herd's prefix: `[r13 host] ` for rank 13, `[2 host] ` for node 2's launcher.
fn herd_split(line: &[u8]) -> Option<(Option<usize>, &[u8])> {
    let end = line.windows(2).position(|w| w == b"] ")?;
    let head = std::str::from_utf8(line.strip_prefix(b"[")?.get(..end - 1)?).ok()?;
    let (who, _host) = head.split_once(' ')?;
    let named = match who.strip_prefix('r') {
        Some(r) => Some(r.parse().ok()?),
        // A node's launcher, or several nodes' saying the same (`0-7` under --collapse).
        None => {
            let node = |n: &str| n.parse::<usize>().ok();
            who.split(',').flat_map(|p| p.split('-')).try_for_each(|n| node(n).map(|_| ()))?;
            None
        }
    };
    Some((named, &line[end + 2..]))
}

/// pdsh's prefix: `host: `.
fn pdsh_split(line: &[u8]) -> Option<(Option<usize>, &[u8])> {
    let end = line.windows(2).position(|w| w == b": ")?;
    Some((None, &line[end + 2..]))
}
