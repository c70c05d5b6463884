//! Scenario 6: every node prints L lines (`seq 1 L`) as fast as it can; the launcher's stdout
//! goes to a file. Lines per second, launcher CPU, peak RSS, and every line counted.

use std::path::Path;
use std::process::{Command, Stdio};

use super::herd_support::{self, HERD};
use super::job::{ssh_args, write_config};
use super::measure::{fmt_stat, runs, Measured, Tracked};
use super::testbed::Testbed;

pub fn run() {
    let sizes: Vec<(usize, usize)> = std::env::var("BENCH_LOGS")
        .unwrap_or_else(|_| "8x1000000,64x20000".into())
        .split(',')
        .filter_map(|s| {
            let (n, l) = s.split_once('x')?;
            Some((n.parse().ok()?, l.parse().ok()?))
        })
        .collect();
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
    println!("| N x L | launcher | lines/s median | spread | ratio to pdsh | tree CPU s | launcher CPU s | launcher peak RSS MiB | lines lost (stdout / node logs) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &(n, lines) in sizes {
        let hosts: Vec<String> = tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect();
        let script = format!("seq 1 {lines}");
        let job = format!("launcher = \"command\"\nscript = \"seq\"\nargs = [\"1\", \"{lines}\"]");
        let config = write_config(&tb, dir.path(), &hosts, &job, "");
        let config = config.display().to_string();
        let ssh_append = ssh_args(&tb)[..ssh_args(&tb).len() - 2].join(" ");
        let sed_loop = hosts
            .iter()
            .map(|h| format!("ssh {} {h} '{script}' | sed 's/^/{h} /' &", ssh_args(&tb).join(" ")))
            .collect::<Vec<_>>()
            .join("\n")
            + "\nwait";
        let names = ["pdsh -R ssh -f 64", "ssh \\| sed loop", "herd run --no-preflight"];
        let mut res: Vec<Vec<(Measured, usize, usize)>> = vec![vec![]; names.len()];
        for _ in 0..reps {
            for (i, name) in names.iter().enumerate() {
                if i == 0 && !have_pdsh {
                    continue;
                }
                let out_path = dir.path().join("out.txt");
                let out = std::fs::File::create(&out_path).unwrap();
                let _ = std::fs::remove_dir_all(dir.path().join("logs"));
                std::env::set_var("PDSH_SSH_ARGS_APPEND", &ssh_append);
                let t = match i {
                    0 => Tracked::spawn(
                        "pdsh",
                        &["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(","), &script],
                        out.into(),
                    ),
                    1 => Tracked::spawn("bash", &["-c", &sed_loop], out.into()),
                    _ => Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], out.into()),
                };
                let m = t.finish();
                assert!(m.success, "{name} failed");
                let key_end: &[u8] = match i {
                    0 => b": ",
                    1 => b" ",
                    _ => b"] ",
                };
                let (total, per) = count_lines(&out_path, key_end);
                // Lines of some node short of L (more than L for one node, or extra lines, are
                // not losses; they are checked by the total).
                let lost_out = (n * lines).saturating_sub(per.values().map(|&c| c.min(lines)).sum());
                assert!(total >= n * lines - lost_out, "{name}: line count");
                let lost_logs = if i == 2 {
                    let run = herd_support::only_run_dir(&dir.path().join("logs"));
                    let in_logs: usize = std::fs::read_dir(run.join("attempt-0"))
                        .unwrap()
                        .flatten()
                        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                        .map(|e| file_lines(&e.path()))
                        .sum();
                    (n * lines).abs_diff(in_logs)
                } else {
                    0
                };
                if i == 2 {
                    herd_lost += lost_out + lost_logs;
                }
                res[i].push((m, lost_out, lost_logs));
            }
        }
        let rate = |ms: &[(Measured, usize, usize)]| -> Vec<f64> {
            ms.iter().map(|(m, _, _)| (n * lines) as f64 / m.wall.as_secs_f64()).collect()
        };
        let pdsh_rate = fmt_stat(&rate(&res[0]), 0).2;
        for (i, name) in names.iter().enumerate() {
            if res[i].is_empty() {
                continue;
            }
            let (m, s, v) = fmt_stat(&rate(&res[i]), 0);
            let tree = fmt_stat(
                &res[i].iter().filter_map(|r| r.0.tree_cpu.map(|d| d.as_secs_f64())).collect::<Vec<_>>(),
                2,
            )
            .0;
            let (own, rss) = if i == 1 {
                ("-".to_string(), "-".to_string())
            } else {
                (
                    fmt_stat(&res[i].iter().map(|r| r.0.self_cpu.as_secs_f64()).collect::<Vec<_>>(), 2).0,
                    fmt_stat(&res[i].iter().map(|r| r.0.self_hwm_kib as f64 / 1024.0).collect::<Vec<_>>(), 1)
                        .0,
                )
            };
            let lost_out: usize = res[i].iter().map(|r| r.1).sum();
            let lost_logs =
                if i == 2 { res[i].iter().map(|r| r.2).sum::<usize>().to_string() } else { "-".into() };
            println!(
                "| {n} x {lines} | {name} | {m} | {s} | {:.2} | {tree} | {own} | {rss} | {lost_out} / {lost_logs} |",
                v / pdsh_rate
            );
        }
    }
    herd_lost
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
