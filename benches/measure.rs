//! What every scenario measures with: sizes from the environment, a command timed, a
//! condition polled for, runs side by side, a launcher tracked (wall time, CPU, peak RSS),
//! and the statistics and rows of the tables (median, spread, ratio to a baseline).

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::herd_support::HERD;

// ---------------------------------------------------------------------------------------------
// Sizes from the environment.

/// Runs per launcher: BENCH_RUNS, else the scenario's `default`.
pub fn runs(default: usize) -> usize {
    env_usize("BENCH_RUNS", default).max(1)
}

/// A number from the environment variable `name`, else `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Node counts from the environment variable `name` (`8,16,32`), else from `default`.
pub fn env_sizes(name: &str, default: &str) -> Vec<usize> {
    let text = std::env::var(name).unwrap_or_else(|_| default.into());
    text.split(',')
        .map(|n| n.trim().parse().unwrap_or_else(|_| panic!("{name}: numbers, not {text:?}")))
        .collect()
}

/// Sizes of `N` numbers each (`8x1000,64x20` for N = 2) from the environment variable
/// `name`, else from `default`; an item that is not N numbers is left out.
pub fn env_dims<const N: usize>(name: &str, default: &str) -> Vec<[usize; N]> {
    env_words(name, default)
        .iter()
        .filter_map(|s| s.split('x').map(|x| x.parse().ok()).collect::<Option<Vec<usize>>>()?.try_into().ok())
        .collect()
}

/// The comma-separated words of the environment variable `name`, else of `default`.
pub fn env_words(name: &str, default: &str) -> Vec<String> {
    std::env::var(name).unwrap_or_else(|_| default.into()).split(',').map(String::from).collect()
}

/// Another herd binary to run beside this one (BENCH_BASELINE_HERD), e.g. one built from an
/// earlier commit.
pub fn baseline_herd() -> Option<String> {
    std::env::var("BENCH_BASELINE_HERD").ok()
}

/// How long to keep the testbed up after the runs, for a measurement from outside
/// (BENCH_HOLD_SECS, 0).
pub fn hold_secs() -> u64 {
    env_usize("BENCH_HOLD_SECS", 0) as u64
}

/// Keeps the testbed up for `secs`, having said so.
pub fn hold(secs: u64) {
    println!("holding for {secs} s");
    std::thread::sleep(Duration::from_secs(secs));
}

// ---------------------------------------------------------------------------------------------
// Timing.

/// Start to exit of `cmd`, its output thrown away; it must succeed.
pub fn timed(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().expect("spawn");
    assert!(status.success(), "{cmd:?} failed");
    start.elapsed()
}

/// When `cond` first held, polled `every` so often, or None after `limit`.
pub fn poll_until(limit: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> Option<Instant> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(Instant::now());
        }
        std::thread::sleep(every);
    }
    None
}

/// Every (round, variant) of `reps` rounds of `variants` run side by side: the order rotates
/// from round to round, so that no variant always follows the same one (with two, A and B
/// alternate: A B, B A, A B, ...).
pub fn rounds(reps: usize, variants: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..reps).flat_map(move |rep| (0..variants).map(move |v| (rep, (v + rep) % variants)))
}

// ---------------------------------------------------------------------------------------------
// Statistics and the tables' rows.

/// A launcher's times over its runs: the median and the spread.
pub struct Stats {
    pub median: Duration,
    pub min: Duration,
    pub max: Duration,
}

pub fn stats(mut xs: Vec<Duration>) -> Stats {
    xs.sort();
    Stats { median: xs[xs.len() / 2], min: xs[0], max: xs[xs.len() - 1] }
}

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

/// `| name | median | min-max | ratio of medians to the baseline |` (1.00 without one).
pub fn row(name: &str, s: &Stats, baseline: Option<&Stats>) -> String {
    let ratio = baseline
        .map_or("1.00".to_string(), |b| format!("{:.2}", s.median.as_secs_f64() / b.median.as_secs_f64()));
    format!("| {name} | {} | {}-{} | {ratio} |", secs(s.median), secs(s.min), secs(s.max))
}

/// The middle value (the upper one of an even count), as every table's median.
pub fn median<T: Copy + PartialOrd>(xs: impl IntoIterator<Item = T>) -> T {
    let mut xs: Vec<T> = xs.into_iter().collect();
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

fn stats_f(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

/// (median, `min-max`, the median as a number) to `digits` decimals; `-` without values.
pub fn fmt_stat(xs: &[f64], digits: usize) -> (String, String, f64) {
    if xs.is_empty() {
        return ("-".into(), "-".into(), f64::NAN);
    }
    let (m, lo, hi) = stats_f(xs.to_vec());
    (format!("{m:.digits$}"), format!("{lo:.digits$}-{hi:.digits$}"), m)
}

/// Lines per second of each run, `total` lines a run.
pub fn per_second(total: f64, runs: &[&Measured]) -> Vec<f64> {
    runs.iter().map(|m| total / m.wall.as_secs_f64()).collect()
}

/// The launcher's own CPU seconds and peak RSS MiB over `runs`: their medians, as the tables
/// show them.
pub fn own_cost(runs: &[&Measured]) -> (String, String) {
    let cpu: Vec<f64> = runs.iter().map(|m| m.self_cpu.as_secs_f64()).collect();
    let rss: Vec<f64> = runs.iter().map(|m| m.self_hwm_kib as f64 / 1024.0).collect();
    (fmt_stat(&cpu, 2).0, fmt_stat(&rss, 1).0)
}

/// Field `i` of every run's row of numbers.
pub fn column<const N: usize>(rows: &[[f64; N]], i: usize) -> Vec<f64> {
    rows.iter().map(|r| r[i]).collect()
}

/// A table's header row, then the row that makes it a table (`|---|` a column).
pub fn table(header: &str) {
    let columns = header.matches(" |").count();
    println!("{header}\n|{}", "---|".repeat(columns));
}

// ---------------------------------------------------------------------------------------------
// A launcher tracked.

/// Which process tree a launcher is, and what it cost: CPU of the whole tree (a cpuacct
/// cgroup: ssh masters that fork into the background stay in it), and CPU and peak RSS of the
/// launcher process itself, sampled from /proc until it is a zombie.
pub struct Tracked {
    child: std::process::Child,
    cgroup: Option<PathBuf>,
    pub started: Instant,
    sampler: Option<std::thread::JoinHandle<()>>,
    last: std::sync::Arc<std::sync::Mutex<SelfSample>>,
    err_path: PathBuf,
}

#[derive(Clone, Copy, Default)]
struct SelfSample {
    cpu: Duration,
    hwm_kib: u64,
}

/// A process's CPU times from `/proc/PID/stat` (PID may be `self`), in clock ticks: utime,
/// stime, cutime and cstime (fields 14 to 17, after the command's `)`).
pub fn cpu_ticks(pid: &str) -> Option<[u64; 4]> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let f = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Some([f(14), f(15), f(16), f(17)])
}

#[derive(Clone, Copy)]
pub struct Measured {
    pub wall: Duration,
    pub tree_cpu: Option<Duration>,
    pub self_cpu: Duration,
    pub self_hwm_kib: u64,
    pub success: bool,
}

static CGROUPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn self_sample(pid: u32) -> Option<(SelfSample, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let zombie = f[0] == "Z";
    let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0);
    // USER_HZ is 100 on every Linux this runs on.
    Some((SelfSample { cpu: Duration::from_millis(ticks * 10), hwm_kib: hwm }, zombie))
}

impl Tracked {
    /// `program args...` started in a cgroup of its own (if cgroups can be made), its stdout
    /// to `stdout` and its stderr to a file.
    pub fn spawn<S: AsRef<OsStr>>(program: &str, args: &[S], stdout: Stdio) -> Tracked {
        let n = CGROUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cg = PathBuf::from(format!("/sys/fs/cgroup/cpuacct/herd-bench-{}-{n}", std::process::id()));
        let cgroup = std::fs::create_dir(&cg).is_ok().then_some(cg);
        let mut cmd = Command::new("sh");
        let join =
            cgroup.as_ref().map(|c| format!("echo $$ > {}/cgroup.procs; ", c.display())).unwrap_or_default();
        cmd.arg("-c").arg(format!("{join}exec \"$@\"")).arg("sh");
        // A profiler in front of herd, e.g. BENCH_HERD_WRAP="perf record -g -o /tmp/herd.perf".
        if let (true, Ok(wrap)) = (program == HERD, std::env::var("BENCH_HERD_WRAP")) {
            cmd.args(wrap.split_whitespace());
        }
        cmd.arg(program).args(args);
        let err_path = std::env::temp_dir().join(format!("herd-bench-{}-{n}.stderr", std::process::id()));
        let err = std::fs::File::create(&err_path).expect("stderr file");
        cmd.stdin(Stdio::null()).stdout(stdout).stderr(err).env("NO_COLOR", "1");
        let started = Instant::now();
        let child = cmd.spawn().expect("spawn launcher");
        let pid = child.id();
        let last = std::sync::Arc::new(std::sync::Mutex::new(SelfSample::default()));
        let shared = last.clone();
        let sampler = std::thread::spawn(move || loop {
            match self_sample(pid) {
                Some((s, zombie)) => {
                    let mut l = shared.lock().unwrap();
                    l.cpu = s.cpu;
                    l.hwm_kib = l.hwm_kib.max(s.hwm_kib);
                    if zombie {
                        return;
                    }
                }
                None => return,
            }
            std::thread::sleep(Duration::from_millis(50));
        });
        Tracked { child, cgroup, started, sampler: Some(sampler), last, err_path }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn tree_cpu(&self) -> Option<Duration> {
        let cg = self.cgroup.as_ref()?;
        let ns: u64 = std::fs::read_to_string(cg.join("cpuacct.usage")).ok()?.trim().parse().ok()?;
        Some(Duration::from_nanos(ns))
    }

    /// (launcher process CPU, tree CPU) so far.
    pub fn cpu_now(&self) -> (Duration, Option<Duration>) {
        (self.last.lock().unwrap().cpu, self.tree_cpu())
    }

    pub fn try_done(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub fn kill(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
    }

    pub fn finish(mut self) -> Measured {
        if let Some(s) = self.sampler.take() {
            let _ = s.join();
        }
        let status = self.child.wait().expect("wait launcher");
        let wall = self.started.elapsed();
        // Background ssh masters close just after their launcher; wait for the tree.
        let t = Instant::now();
        if let Some(cg) = &self.cgroup {
            while t.elapsed() < Duration::from_secs(5)
                && std::fs::read_to_string(cg.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let tree_cpu = self.tree_cpu();
        if let Some(cg) = &self.cgroup {
            if std::fs::remove_dir(cg).is_err() {
                // Something of it is still running: move it out, then remove the group.
                if let Ok(procs) = std::fs::read_to_string(cg.join("cgroup.procs")) {
                    for p in procs.lines() {
                        let _ = std::fs::write("/sys/fs/cgroup/cpuacct/cgroup.procs", p);
                    }
                }
                let _ = std::fs::remove_dir(cg);
            }
        }
        let last = *self.last.lock().unwrap();
        if !status.success() {
            let err = std::fs::read_to_string(&self.err_path).unwrap_or_default();
            eprintln!("launcher exited {status}; its stderr ends:\n{}", tail(&err, 20));
        }
        if std::env::var_os("BENCH_KEEP_STDERR").is_some() {
            eprintln!("launcher stderr kept in {}", self.err_path.display());
        } else {
            let _ = std::fs::remove_file(&self.err_path);
        }
        Measured { wall, tree_cpu, self_cpu: last.cpu, self_hwm_kib: last.hwm_kib, success: status.success() }
    }
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
