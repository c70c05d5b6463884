//! Scenario 6: every node prints L lines (`seq 1 L`) as fast as it can; the launcher's stdout
//! goes to a file. Lines per second, launcher CPU, peak RSS, and every line counted.

use std::path::Path;
use std::process::{Command, Stdio};

use super::herd_support::{self, HERD};
use super::job::{clear_logs, hosts, pdsh_args, pdsh_ssh_append, ssh_loop, write_config};
use super::measure::{env_dims, fmt_stat, own_cost, per_second, runs, table, Measured, Tracked};
use super::testbed::Testbed;

const NAMES: [&str; 3] = ["pdsh -R ssh -f 64", "ssh \\| sed loop", "herd run --no-preflight"];

/// A launcher's run: what it cost, and the lines it lost on stdout and (herd) in the node logs.
type Run = (Measured, usize, usize);

pub fn run() {
    let sizes: Vec<(usize, usize)> =
        env_dims::<2>("BENCH_LOGS", "8x1000000,64x20000").into_iter().map(|[n, l]| (n, l)).collect();
    logs_with(runs(3), &sizes);
}

/// Scenario 6 at the given sizes (`(nodes, lines)`); returns how many lines herd lost, on
/// stdout and in the node logs together. Without pdsh installed, it is left out.
pub fn logs_with(reps: usize, sizes: &[(usize, usize)]) -> usize {
    let have_pdsh =
        Command::new("pdsh").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !have_pdsh {
        println!("pdsh is not installed (apt-get install -y pdsh): left out");
    }
    let mut herd_lost = 0;
    let most = sizes.iter().map(|s| s.0).max().unwrap_or(1);
    let tb = Testbed::new(most);
    let dir = tempfile::tempdir().unwrap();
    let sizes_arg = sizes.iter().map(|(n, l)| format!("{n}x{l}")).collect::<Vec<_>>().join(",");
    println!("\n### Log throughput: N nodes each print L lines (`seq 1 L`) as fast as they can; stdout to a file ({reps} runs each, alternating)\n");
    println!("Rerun: `BENCH_RUNS={reps} BENCH_LOGS={sizes_arg} cargo bench --bench herd_bench -- logs`\n");
    table("| N x L | launcher | lines/s median | spread | ratio to pdsh | tree CPU s | launcher CPU s | launcher peak RSS MiB | lines lost (stdout / node logs) |");
    for &(n, lines) in sizes {
        let launchers: &[usize] = if have_pdsh { &[0, 1, 2] } else { &[1, 2] };
        let res = size(&tb, dir.path(), (n, lines), reps, launchers);
        herd_lost += res[2].iter().map(|r| r.1 + r.2).sum::<usize>();
        print_size((n, lines), &res);
    }
    herd_lost
}

/// `reps` runs of each of `launchers` (indices into `NAMES`) at `n` nodes x `lines`.
fn size(
    tb: &Testbed,
    dir: &Path,
    (n, lines): (usize, usize),
    reps: usize,
    launchers: &[usize],
) -> Vec<Vec<Run>> {
    let hosts = hosts(tb, n);
    let script = format!("seq 1 {lines}");
    let job = format!("launcher = \"command\"\nscript = \"seq\"\nargs = [\"1\", \"{lines}\"]");
    let config = write_config(tb, dir, &hosts, &job, "");
    let config = config.display().to_string();
    let sed_loop = ssh_loop(tb, &hosts, |h| format!("'{script}' | sed 's/^/{h} /'"));
    std::env::set_var("PDSH_SSH_ARGS_APPEND", pdsh_ssh_append(tb));
    let mut res: Vec<Vec<Run>> = vec![vec![]; NAMES.len()];
    for _ in 0..reps {
        for &i in launchers {
            let out_path = dir.join("out.txt");
            let out = std::fs::File::create(&out_path).unwrap();
            clear_logs(dir);
            let t = match i {
                0 => Tracked::spawn("pdsh", &pdsh_args(&hosts, &script), out.into()),
                1 => Tracked::spawn("bash", &["-c", &sed_loop], out.into()),
                _ => Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], out.into()),
            };
            let m = t.finish();
            assert!(m.success, "{} failed", NAMES[i]);
            let lost_out = lost_on_stdout(i, &out_path, n, lines);
            let lost_logs = if i == 2 { lost_in_logs(dir, n, lines) } else { 0 };
            res[i].push((m, lost_out, lost_logs));
        }
    }
    res
}

/// Lines of some node short of L on launcher `i`'s stdout (more than L for one node, or extra
/// lines, are not losses; they are checked by the total).
fn lost_on_stdout(i: usize, out: &Path, n: usize, lines: usize) -> usize {
    let key_end: &[u8] = match i {
        0 => b": ",
        1 => b" ",
        _ => b"] ",
    };
    let (total, per) = count_lines(out, key_end);
    let lost = (n * lines).saturating_sub(per.values().map(|&c| c.min(lines)).sum());
    assert!(total >= n * lines - lost, "{}: line count", NAMES[i]);
    lost
}

/// Lines herd's node logs of the run in `dir` lack, or have too many.
fn lost_in_logs(dir: &Path, n: usize, lines: usize) -> usize {
    let run = herd_support::only_run_dir(&dir.join("logs"));
    let in_logs: usize = std::fs::read_dir(run.join("attempt-0"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| file_lines(&e.path()))
        .sum();
    (n * lines).abs_diff(in_logs)
}

/// A row per launcher that ran.
fn print_size((n, lines): (usize, usize), res: &[Vec<Run>]) {
    let measured = |i: usize| res[i].iter().map(|r| &r.0).collect::<Vec<_>>();
    let total = (n * lines) as f64;
    let pdsh_rate = fmt_stat(&per_second(total, &measured(0)), 0).2;
    for (i, name) in NAMES.iter().enumerate() {
        if res[i].is_empty() {
            continue;
        }
        let (m, s, v) = fmt_stat(&per_second(total, &measured(i)), 0);
        let tree = fmt_stat(
            &res[i].iter().filter_map(|r| r.0.tree_cpu.map(|d| d.as_secs_f64())).collect::<Vec<_>>(),
            2,
        )
        .0;
        let (own, rss) = if i == 1 { ("-".to_string(), "-".to_string()) } else { own_cost(&measured(i)) };
        let lost_out: usize = res[i].iter().map(|r| r.1).sum();
        let lost_logs =
            if i == 2 { res[i].iter().map(|r| r.2).sum::<usize>().to_string() } else { "-".into() };
        println!(
            "| {n} x {lines} | {name} | {m} | {s} | {:.2} | {tree} | {own} | {rss} | {lost_out} / {lost_logs} |",
            v / pdsh_rate
        );
    }
}

/// Lines per key (prefix up to the end of `key_end`), and the total.
fn count_lines(path: &Path, key_end: &[u8]) -> (usize, std::collections::BTreeMap<Vec<u8>, usize>) {
    use std::io::BufRead;
    let mut per = std::collections::BTreeMap::new();
    let mut total = 0;
    let f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path).unwrap());
    for line in f.split(b'\n') {
        let line = line.unwrap();
        total += 1;
        let key = line.windows(key_end.len()).position(|w| w == key_end).map_or(&line[..0], |i| &line[..i]);
        *per.entry(key.to_vec()).or_insert(0) += 1;
    }
    (total, per)
}

fn file_lines(path: &Path) -> usize {
    let data = std::fs::read(path).unwrap_or_default();
    data.iter().filter(|&&b| b == b'\n').count()
}
