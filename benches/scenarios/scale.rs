//! Scenario 14: what a start costs the launch host over SSH, by node count (BENCH_SCALE,
//! 16,64,128,252): `herd run` of a `true` job with its preflight (herd's defaults) on N nodes
//! that are one sshd answering on N addresses, under `ulimit -n 1024`. Sampled from /proc
//! every 20 ms: herd's descriptors at most, its peak RSS (VmHWM), its own CPU and that of the
//! ssh clients it waited for (the masters' handshakes); every 500 ms the SSH masters (their
//! number and total RSS at most). Then a least-squares line per quantity, its slope the cost
//! of a node, projected to 1,000 and 4,000 nodes. BENCH_BASELINE_HERD runs beside it, with
//! its soft limit raised to the hard one (the herd of before issue 26 does not raise it
//! itself, and fails at 254 nodes under 1024). BENCH_HOLD_SECS keeps the largest testbed up
//! afterwards, for a profiler from outside (heaptrack), and prints its config.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{clear_logs, hosts, write_config};
use super::measure::{
    self, baseline_herd, env_sizes, hold, hold_secs, median, poll_until, rounds, runs, table,
};
use super::testbed::Testbed;

/// A herd measured: its name in the tables, its binary, and prlimit's `--nofile` for it.
type Herd = (&'static str, String, String);

/// Per node count: (nodes, [descriptors, VmHWM KiB, herd CPU ms, masters' RSS KiB]) medians.
type Points = Vec<(f64, [f64; 4])>;

const TRUE: &str = "launcher = \"command\"\nscript = \"true\"";

pub fn run() {
    let reps = runs(1);
    let sizes = env_sizes("BENCH_SCALE", "16,64,128,252");
    let most = *sizes.iter().max().expect("a size");
    let tb = Testbed::many(most);
    let dir = tempfile::tempdir().unwrap();
    let herds = herds();
    println!("\n### What a start costs the launch host: `herd run` of `true` on N nodes, one sshd ({reps} runs each, medians)\n");
    table("| nodes | herd | took s | descriptors at most | VmHWM MiB | herd CPU s | ssh clients' CPU s | masters | masters' RSS MiB |");
    let mut points: Vec<Points> = vec![Vec::new(); herds.len()];
    for &n in &sizes {
        let config = write_config(&tb, dir.path(), &hosts(&tb, n), TRUE, "");
        let mut got: Vec<Vec<ScaleRun>> = vec![Vec::new(); herds.len()];
        for (_, h) in rounds(reps, herds.len()) {
            clear_logs(dir.path());
            let (_, bin, limit) = &herds[h];
            let mut c = Command::new("prlimit");
            c.arg(limit).arg("--").arg(bin).args(["run", "-c"]).arg(&config);
            got[h].push(scale_run(&mut c));
        }
        for (h, herd) in herds.iter().enumerate() {
            points[h].push(print_size(n, herd.0, &got[h]));
        }
    }
    if hold_secs() > 0 {
        let config = write_config(&tb, dir.path(), &hosts(&tb, most), TRUE, "");
        println!("\nconfig for {most} nodes: {}", config.display());
        hold(hold_secs());
    }
    if sizes.len() < 2 {
        return;
    }
    print_per_node(&herds, &points);
}

/// This herd, under a soft limit of 1024 descriptors; and the baseline's, its soft limit
/// raised to the hard one.
fn herds() -> Vec<Herd> {
    let hard = Command::new("sh").args(["-c", "ulimit -Hn"]).output().expect("sh");
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_string();
    let mut herds: Vec<Herd> = vec![("herd", HERD.to_string(), "--nofile=1024:".into())];
    if let Some(base) = baseline_herd() {
        herds.push(("baseline", base, format!("--nofile={hard}:")));
    }
    herds
}

/// A herd's row at `n` nodes; its point for the least squares.
fn print_size(n: usize, name: &str, got: &[ScaleRun]) -> (f64, [f64; 4]) {
    let med = |f: &dyn Fn(&ScaleRun) -> f64| median(got.iter().map(f));
    let ok = got.iter().filter(|r| r.ok).count();
    let failed = if ok == got.len() { String::new() } else { format!(" ({} failed)", got.len() - ok) };
    println!(
        "| {n} | {name}{failed} | {:.1} | {:.0} | {:.1} | {:.2} | {:.2} | {:.0} | {:.0} |",
        med(&|r| r.took.as_secs_f64()),
        med(&|r| r.fds as f64),
        med(&|r| r.hwm_kib as f64) / 1024.0,
        med(&|r| r.cpu_ms as f64) / 1000.0,
        med(&|r| r.child_cpu_ms as f64) / 1000.0,
        med(&|r| r.masters as f64),
        med(&|r| r.masters_kib as f64) / 1024.0,
    );
    let quantities = [
        med(&|r| r.fds as f64),
        med(&|r| r.hwm_kib as f64),
        med(&|r| r.cpu_ms as f64),
        med(&|r| r.masters_kib as f64),
    ];
    (n as f64, quantities)
}

/// Each quantity's cost a node and fixed part, and where they lead at 1,000 and 4,000 nodes.
fn print_per_node(herds: &[Herd], points: &[Points]) {
    println!("\n### Per node (least squares over the sizes) and projected\n");
    table("| herd | quantity | per node | fixed | at 1,000 nodes | at 4,000 nodes |");
    let quantities = [("descriptors", ""), ("VmHWM", " KiB"), ("herd CPU", " ms"), ("masters' RSS", " KiB")];
    for (h, (name, _, _)) in herds.iter().enumerate() {
        for (q, (what, unit)) in quantities.iter().enumerate() {
            let xy: Vec<(f64, f64)> = points[h].iter().map(|(n, v)| (*n, v[q])).collect();
            let (slope, fixed) = least_squares(&xy);
            let at = |n: f64| fixed + slope * n;
            println!(
                "| {name} | {what} | {slope:.1}{unit} | {fixed:.0}{unit} | {:.0}{unit} | {:.0}{unit} |",
                at(1000.0),
                at(4000.0)
            );
        }
    }
}

/// One run of `scale`: its outcome and what herd held at most (see `scale`).
#[derive(Clone, Copy, Debug, Default)]
struct ScaleRun {
    ok: bool,
    took: Duration,
    fds: usize,
    hwm_kib: u64,
    cpu_ms: u64,
    child_cpu_ms: u64,
    masters: usize,
    masters_kib: u64,
}

/// Runs `cmd` (which execs herd: its pid is herd's) and samples it until it exits.
fn scale_run(cmd: &mut Command) -> ScaleRun {
    let tick_ms = 1000 / clock_ticks();
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn herd");
    let pid = child.id();
    let mut run = ScaleRun::default();
    for tick in 0u64.. {
        if let Some(status) = child.try_wait().unwrap() {
            run.ok = status.success();
            break;
        }
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            run.fds = run.fds.max(dir.count());
        }
        if let Some(kib) = herd_support::status_kib(pid, "VmHWM:") {
            run.hwm_kib = run.hwm_kib.max(kib);
        }
        if let Some([utime, stime, cutime, cstime]) = measure::cpu_ticks(&pid.to_string()) {
            run.cpu_ms = run.cpu_ms.max((utime + stime) * tick_ms);
            run.child_cpu_ms = run.child_cpu_ms.max((cutime + cstime) * tick_ms);
        }
        if tick % 25 == 0 {
            let (n, kib) = herd_support::ssh_masters();
            run.masters = run.masters.max(n);
            run.masters_kib = run.masters_kib.max(kib);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    run.took = start.elapsed();
    // Masters outlive a herd only until their idle time: wait for this run's to end, so that
    // the next run counts its own.
    let _ = poll_until(Duration::from_secs(30), Duration::from_millis(200), || {
        herd_support::ssh_masters().0 == 0
    });
    run
}

/// Clock ticks per second, as /proc/PID/stat counts CPU time.
fn clock_ticks() -> u64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().expect("getconf");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(100)
}

/// The least-squares line through `xy`: (slope, intercept).
fn least_squares(xy: &[(f64, f64)]) -> (f64, f64) {
    let n = xy.len() as f64;
    let (sx, sy) = xy.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = xy.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = xy.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, my - slope * mx)
}
