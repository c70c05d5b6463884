//! Scenario 11: the slurm transport against SSH on the same 3 nodes, each with an sshd and a
//! slurmd, inside one allocation: the fan-out of a `true` job (start to all exited), with
//! plain `srun` as Slurm's own floor, then torchrun 3 x 2 from start to the first worker.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{clear_logs, first_launcher_and_worker, hosts, kill_marked, torch_config, write_config};
use super::measure::{fmt_stat, rounds, row, runs, stats, table, timed, Stats};
use super::slurm_support;
use super::testbed::Testbed;

/// The allocation's environment (SLURM_JOB_ID and the others), as srun inside it sees it.
type Alloc = [(String, String)];

pub fn run() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let mut tb = Testbed::new(3);
    let cluster = slurm_support::Slurm::start(&mut tb);
    let alloc = cluster.allocate(3);
    let job_id = alloc[1].1.clone();
    let dir = tempfile::tempdir().unwrap();
    fan_out(reps, &tb, dir.path(), &alloc);
    first_worker(reps, &tb, dir.path(), &venv, &alloc);
    cluster.release(&job_id);
}

/// `true` on the 3 nodes, herd over ssh and over srun with and without its preflight, and a
/// bare srun: start to all exited.
fn fan_out(reps: usize, tb: &Testbed, dir: &Path, alloc: &Alloc) {
    let job_id = alloc[1].1.as_str();
    let config = write_config(tb, dir, &hosts(tb, 3), "launcher = \"command\"\nscript = \"true\"", "");
    let config = config.display().to_string();
    let names = [
        "herd run --no-preflight (ssh)",
        "herd run --no-preflight --slurm",
        "herd run (ssh)",
        "herd run --slurm",
        "srun -N 3 --ntasks-per-node=1 true",
    ];
    let mut fan: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for (_, v) in rounds(reps, names.len()) {
        clear_logs(dir);
        let mut c = if v == 4 {
            let mut c = Command::new("srun");
            c.args(["--jobid", job_id, "-N", "3", "--ntasks-per-node=1", "--overlap", "true"]);
            c
        } else {
            let mut c = Command::new(HERD);
            c.args(["run", "-c", &config]);
            if v < 2 {
                c.arg("--no-preflight");
            }
            if v % 2 == 1 {
                c.arg("--slurm");
            }
            c
        };
        c.envs(alloc.iter().map(|(k, v)| (k, v)));
        fan[v].push(timed(&mut c));
    }
    println!("\n### The slurm transport against SSH, 3 nodes: fan-out of `true`, start to all exited ({reps} runs each, alternating, order rotated)\n");
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- slurm`\n");
    table("| command | median s | spread s | ratio to the same over ssh |");
    let s: Vec<Stats> = fan.iter().map(|xs| stats(xs.clone())).collect();
    for (i, name) in names.iter().enumerate() {
        let base = match i {
            1 | 3 => Some(&s[i - 1]),
            4 => Some(&s[0]),
            _ => None,
        };
        println!("{}", row(name, &s[i], base));
    }
}

/// torchrun 3 x 2 through herd over ssh and over srun: start to the first worker process.
fn first_worker(reps: usize, tb: &Testbed, dir: &Path, venv: &Path, alloc: &Alloc) {
    let names = ["herd run (ssh)", "herd run --slurm"];
    let mut first: [Vec<(f64, f64)>; 2] = Default::default();
    let limit = Duration::from_secs(120);
    for (rep, v) in rounds(reps, 2) {
        let mark = format!("BENCH_MARK=slurm-first-{v}-{rep}-{}", std::process::id());
        let config = torch_config(tb, dir, venv, "\"--steps\", \"3\"", &mark, "");
        let mut c = Command::new(HERD);
        c.args(["run", "-c"]).arg(&config).envs(alloc.iter().map(|(k, v)| (k, v)));
        if v == 1 {
            c.arg("--slurm");
        }
        let start = Instant::now();
        let mut child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        first[v].extend(first_launcher_and_worker(&mark, start, limit));
        assert!(child.wait().unwrap().success(), "{} failed", names[v]);
        kill_marked(&mark);
    }
    println!("\n### The slurm transport against SSH, 3 nodes: torchrun 3 x 2, start to the first worker process ({reps} runs each, alternating)\n");
    table("| launcher | to first worker, median s | spread s | ratio to ssh | to first torchrun, median s | spread s |");
    let mut base = f64::NAN;
    for (i, name) in names.iter().enumerate() {
        let worker: Vec<f64> = first[i].iter().map(|t| t.1).collect();
        let launcher: Vec<f64> = first[i].iter().map(|t| t.0).collect();
        let (wm, ws, wv) = fmt_stat(&worker, 2);
        let (lm, ls, _) = fmt_stat(&launcher, 2);
        if i == 0 {
            base = wv;
        }
        println!("| {name} | {wm} | {ws} | {:.2} | {lm} | {ls} |", wv / base);
    }
}
