//! Scenario 13: one Slurm step for the fleet against a step per node (`[transport] steps`),
//! at 8, 16 and 32 slurmds (BENCH_STEPS_NODES), a `true` job with and without the preflight:
//! start to exit; the most `srun` processes of herd's at once and their and herd's RSS
//! together at most (sampled every 20 ms); and slurmctld's RPCs during the run (`sdiag`,
//! reset before each run): step creations and all.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::measure::{env_sizes, median, rounds, row, runs, stats, table, Stats};
use super::slurm_support::{self, Slurm};
use super::testbed::Testbed;

/// The variants side by side: `[transport] steps`, and whether the preflight runs.
const VARIANTS: [(&str, bool); 4] =
    [("per-node", false), ("fleet", false), ("per-node", true), ("fleet", true)];

pub fn run() {
    let reps = runs(5);
    let sizes = env_sizes("BENCH_STEPS_NODES", "8,16,32");
    println!("\n### One Slurm step for the fleet against a step per node: a `true` job, start to exit ({reps} runs each, alternating)\n");
    println!(
        "Rerun: `BENCH_RUNS={reps} BENCH_STEPS_NODES={} cargo bench --bench herd_bench -- slurm-steps`\n",
        sizes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
    );
    table("| nodes | steps | preflight | median s | spread s | ratio to per-node | sruns at most | herd + srun RSS at most, MiB | step creations | slurmctld RPCs |");
    for n in sizes {
        let mut tb = Testbed::new(n);
        let cluster = slurm_support::Slurm::start(&mut tb);
        let alloc = cluster.allocate(n);
        let job_id = alloc[1].1.clone();
        let dir = tempfile::tempdir().unwrap();
        let configs = configs(dir.path());
        let mut got: Vec<Vec<StepRun>> = vec![Vec::new(); VARIANTS.len()];
        for (_, v) in rounds(reps, VARIANTS.len()) {
            let mut c = Command::new(HERD);
            c.args(["run", "-c"]).arg(&configs[v]).envs(alloc.iter().map(|(k, v)| (k, v)));
            if !VARIANTS[v].1 {
                c.arg("--no-preflight");
            }
            got[v].push(step_run(&cluster, c, v));
        }
        print(n, &got);
        cluster.release(&job_id);
    }
}

/// A cluster TOML a variant, each with its logs in a directory of its own under `dir`.
fn configs(dir: &Path) -> Vec<PathBuf> {
    VARIANTS
        .iter()
        .enumerate()
        .map(|(i, (steps, _))| {
            let d = dir.join(i.to_string());
            std::fs::create_dir_all(&d).unwrap();
            let text = format!(
                "[job]\nlauncher = \"command\"\nscript = \"true\"\n\n[logs]\ndir = \"{}\"\n\n[transport]\nkind = \"slurm\"\nsteps = \"{steps}\"\n",
                d.join("logs").display()
            );
            std::fs::write(d.join("cluster.toml"), text).unwrap();
            d.join("cluster.toml")
        })
        .collect()
}

/// One run of herd (`c`, variant `v`), sampled every 20 ms until it exits.
fn step_run(cluster: &Slurm, mut c: Command, v: usize) -> StepRun {
    let _ = cluster.command("sdiag").arg("-r").output();
    let start = Instant::now();
    let mut child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let (mut sruns, mut rss) = (0, 0);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let (k, r) = sruns_and_rss(child.id());
        sruns = sruns.max(k);
        rss = rss.max(r);
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    assert!(status.success(), "{:?} failed", VARIANTS[v]);
    let (creates, rpcs) = sdiag_counts(cluster);
    (took, sruns, rss, creates, rpcs)
}

/// A row a variant at `n` nodes.
fn print(n: usize, got: &[Vec<StepRun>]) {
    let s: Vec<Stats> = got.iter().map(|xs| stats(xs.iter().map(|x| x.0).collect())).collect();
    for (v, (steps, preflight)) in VARIANTS.iter().enumerate() {
        let base = if v % 2 == 1 { Some(&s[v - 1]) } else { None };
        let r = row("", &s[v], base);
        let r = r.trim_start_matches("|  | ").trim_end_matches(" |");
        let runs = &got[v];
        println!(
            "| {n} | {steps} | {} | {r} | {} | {:.0} | {} | {} |",
            if *preflight { "on" } else { "off" },
            median(runs.iter().map(|x| x.1)),
            median(runs.iter().map(|x| x.2)) as f64 / 1024.0,
            median(runs.iter().map(|x| x.3)),
            median(runs.iter().map(|x| x.4)),
        );
    }
}

/// One run of `slurm_steps`: its time, the most sruns at once, the most RSS (KiB), the step
/// creations and all slurmctld RPCs.
type StepRun = (Duration, usize, u64, u64, u64);

/// Of herd (`pid`) and its `srun` children: how many sruns, and their RSS and herd's in KiB.
fn sruns_and_rss(pid: u32) -> (usize, u64) {
    let rss = |p: u32| herd_support::status_kib(p, "VmRSS:").unwrap_or(0);
    let mut sruns = 0;
    let mut total = rss(pid);
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(cmd) = std::fs::read(format!("/proc/{p}/cmdline")) else { continue };
        if cmd.starts_with(b"srun\0") && String::from_utf8_lossy(&cmd).contains("\0herd-") {
            sruns += 1;
            total += rss(p);
        }
    }
    (sruns, total)
}

/// From `sdiag`: the step creations (REQUEST_JOB_STEP_CREATE) and all RPCs since its reset.
fn sdiag_counts(cluster: &Slurm) -> (u64, u64) {
    let out = cluster.command("sdiag").output().expect("sdiag");
    let text = String::from_utf8_lossy(&out.stdout);
    let by_type = text.split("by message type").nth(1).unwrap_or_default();
    let by_type = by_type.split("by user").next().unwrap_or_default();
    let count = |l: &str| {
        l.split("count:").nth(1).and_then(|c| c.split_whitespace().next()).and_then(|c| c.parse::<u64>().ok())
    };
    let creates = by_type.lines().filter(|l| l.contains("REQUEST_JOB_STEP_CREATE")).filter_map(count).sum();
    let all = by_type.lines().filter_map(count).sum();
    (creates, all)
}
