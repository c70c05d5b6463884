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
use super::job::write_config;
use super::measure::{env_sizes, env_usize, poll_until, runs};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(1);
    let sizes = env_sizes("BENCH_SCALE", "16,64,128,252");
    let most = *sizes.iter().max().expect("a size");
    let tb = Testbed::many(most);
    let dir = tempfile::tempdir().unwrap();
    let baseline = std::env::var("BENCH_BASELINE_HERD").ok();
    let hard = Command::new("sh").args(["-c", "ulimit -Hn"]).output().expect("sh");
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_string();
    let mut herds: Vec<(&str, String, String)> = vec![("herd", HERD.to_string(), "--nofile=1024:".into())];
    if let Some(base) = &baseline {
        herds.push(("baseline", base.clone(), format!("--nofile={hard}:")));
    }
    println!("\n### What a start costs the launch host: `herd run` of `true` on N nodes, one sshd ({reps} runs each, medians)\n");
    println!("| nodes | herd | took s | descriptors at most | VmHWM MiB | herd CPU s | ssh clients' CPU s | masters | masters' RSS MiB |");
    println!("|---|---|---|---|---|---|---|---|---|");
    // Per herd: (nodes, [descriptors, VmHWM KiB, herd CPU ms, masters' RSS KiB]) medians.
    let mut points: Vec<Vec<(f64, [f64; 4])>> = vec![Vec::new(); herds.len()];
    for &n in &sizes {
        let hosts: Vec<String> = tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect();
        let config = write_config(&tb, dir.path(), &hosts, "launcher = \"command\"\nscript = \"true\"", "");
        let mut got: Vec<Vec<ScaleRun>> = vec![Vec::new(); herds.len()];
        for rep in 0..reps {
            for h in (0..herds.len()).map(|h| (h + rep) % herds.len()) {
                let _ = std::fs::remove_dir_all(dir.path().join("logs"));
                let (_, bin, limit) = &herds[h];
                let mut c = Command::new("prlimit");
                c.arg(limit).arg("--").arg(bin).args(["run", "-c"]).arg(&config);
                got[h].push(scale_run(&mut c));
            }
        }
        for (h, (name, _, _)) in herds.iter().enumerate() {
            let med = |f: &dyn Fn(&ScaleRun) -> f64| {
                let mut xs: Vec<f64> = got[h].iter().map(f).collect();
                xs.sort_by(f64::total_cmp);
                xs[xs.len() / 2]
            };
            let ok = got[h].iter().filter(|r| r.ok).count();
            let failed =
                if ok == got[h].len() { String::new() } else { format!(" ({} failed)", got[h].len() - ok) };
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
            points[h].push((
                n as f64,
                [
                    med(&|r| r.fds as f64),
                    med(&|r| r.hwm_kib as f64),
                    med(&|r| r.cpu_ms as f64),
                    med(&|r| r.masters_kib as f64),
                ],
            ));
        }
    }
    let hold = env_usize("BENCH_HOLD_SECS", 0);
    if hold > 0 {
        let hosts: Vec<String> = tb.nodes()[..most].iter().map(|h| h.addr.clone()).collect();
        let config = write_config(&tb, dir.path(), &hosts, "launcher = \"command\"\nscript = \"true\"", "");
        println!("\nconfig for {most} nodes: {}\nholding for {hold} s", config.display());
        std::thread::sleep(Duration::from_secs(hold as u64));
    }
    if sizes.len() < 2 {
        return;
    }
    println!("\n### Per node (least squares over the sizes) and projected\n");
    println!("| herd | quantity | per node | fixed | at 1,000 nodes | at 4,000 nodes |");
    println!("|---|---|---|---|---|---|");
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
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // After the command's `)`: state is field 3, utime 14 .. cstime 17.
            let fields: Vec<&str> =
                stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("").split_whitespace().collect();
            let f = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            run.cpu_ms = run.cpu_ms.max((f(14) + f(15)) * tick_ms);
            run.child_cpu_ms = run.child_cpu_ms.max((f(16) + f(17)) * tick_ms);
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
