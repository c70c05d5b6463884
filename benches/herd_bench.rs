//! herd against its baselines on the namespace testbed (every node a real sshd in its own
//! namespace). Not part of the test run. Needs root and the torch virtualenv.
//!
//!     cargo bench --bench herd_bench -- fanout      # launch fan-out, 8/32/64 nodes, vs pdsh and ssh &
//!     cargo bench --bench herd_bench -- slow-logins # fan-out at 64 nodes whose login shell takes 1 s, vs pdsh; logins per node
//!                                                   # (BENCH_JOB=python: `python3 -c pass` on every node instead of `true`)
//!     cargo bench --bench herd_bench -- teardown    # one rank SIGKILLed -> every process gone
//!     cargo bench --bench herd_bench -- first-rank  # torchrun on 3 nodes: start -> first worker process
//!     cargo bench --bench herd_bench -- partition   # a node's link cut -> attempt failed, others stopped
//!     cargo bench --bench herd_bench -- restart     # a rank SIGKILLed -> next attempt's workers all up
//!     cargo bench --bench herd_bench -- logs        # N nodes x L lines as fast as they go, vs pdsh and ssh | sed
//!     cargo bench --bench herd_bench -- idle        # 64 nodes, a line a second for 60 s: launcher CPU
//!     cargo bench --bench herd_bench -- ranks       # 64 nodes x 8 ranks printing at once, vs pdsh: whole lines, counted
//!     cargo bench --bench herd_bench -- slurm       # 3 nodes through srun vs ssh: fan-out, and torchrun's first rank
//!     cargo bench --bench herd_bench -- node-share  # `true` on 1 node, --no-preflight, vs a bare `ssh node true`
//!     cargo bench --bench herd_bench -- slurm-steps # 8/16/32 slurmds: one step for the fleet vs a step per node
//!     cargo bench --bench herd_bench -- container   # torchrun 3 x 2 with and without podman: first worker, restart
//!     cargo bench --bench herd_bench -- checkpoint  # SIGUSR1 to herd -> every rank checkpointed and gone, herd's exit
//!
//! Sizes (environment): BENCH_RUNS (runs per launcher, default 5; 3 for partition and idle),
//! BENCH_LOGS (`NODESxLINES,...`, default `8x1000000,64x20000`), BENCH_IDLE_NODES (64),
//! BENCH_IDLE_SECS (60), BENCH_RANKS (`NODESxRANKSxLINES,...`, default `64x8x2000,64x8x10000`),
//! BENCH_RANKS_TORCH (the same under torchrun, default `8x8x2000`). A tiny run: `BENCH_RUNS=1 BENCH_LOGS=2x1000 cargo bench --bench herd_bench -- logs`.
//! Launcher CPU is that of the launcher's whole process tree (a cpuacct cgroup, so ssh masters
//! that daemonise are counted), and, for herd and pdsh, of the launcher process alone
//! (/proc/<pid>/stat); peak RSS is the launcher process's VmHWM. BENCH_KEEP_STDERR=1 keeps each
//! launcher's stderr (with RUST_LOG=debug, herd's timed debug log) and prints where;
//! BENCH_TRACE=1 (teardown) prints when each job process was last seen after the kill;
//! BENCH_HERD_WRAP puts a profiler in front of herd (`valgrind --tool=massif ...`, `perf record ...`).
//! BENCH_BASELINE_HERD=PATH (teardown, slow-logins, restart) also runs another herd binary, e.g. one built from an
//! earlier commit, alternating with this one, for a before/after table from one session.
//!
//! Runs of herd and its baselines alternate within one session; each table gives the median
//! and the spread (min-max) and the ratio of medians against the baseline.

#[allow(dead_code)] // what this bench does not use of the tests' support
#[path = "../tests/integration/support/herd.rs"]
mod herd_support;
#[allow(dead_code)] // what this bench does not use of the tests' support
#[path = "../tests/integration/support/slurm.rs"]
mod slurm_support;
#[allow(dead_code)] // what this bench does not use of the tests' support
#[path = "../tests/integration/support/testbed.rs"]
mod testbed;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testbed::Testbed;

use herd_support::HERD;

fn main() {
    let which: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let want = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    if want("fanout") {
        fanout();
    }
    if want("slow-logins") {
        slow_logins();
    }
    if want("teardown") {
        teardown();
    }
    if want("first-rank") {
        first_rank();
    }
    if want("partition") {
        partition();
    }
    if want("restart") {
        restart();
    }
    if want("spare") {
        spare();
    }
    if want("stacks") {
        stacks();
    }
    if want("logs") {
        logs();
    }
    if want("idle") {
        idle();
    }
    if want("ranks") {
        ranks();
    }
    if want("slurm") {
        slurm();
    }
    if want("node-share") {
        node_share();
    }
    if want("slurm-steps") {
        slurm_steps();
    }
    if want("scale") {
        scale();
    }
    if want("deep") {
        deep();
    }
    if want("container") {
        container();
    }
    if want("checkpoint") {
        checkpoint();
    }
}

/// Issue 29: from SIGUSR1 to herd (a time limit's warning) to every rank having exited, and to
/// herd's exit. torchrun 3 nodes x 2, `allreduce.py --checkpoint-on SIGUSR1 --sleep 0.2`: each
/// rank ends after the step it is in, once all agree (one more all-reduce), rank 0 having saved
/// it. No baseline runs side by side: without herd, nothing tells the ranks.
fn checkpoint() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let mut rows: Vec<[f64; 2]> = Vec::new();
    for rep in 0..reps {
        let mark = format!("BENCH_MARK=checkpoint-{rep}-{}", std::process::id());
        let ckpt = dir.path().join(format!("ckpt-{rep}"));
        let args = format!(
            "\"--steps\", \"100000\", \"--sleep\", \"0.2\", \"--save-dir\", \"{}\", \"--checkpoint-on\", \"SIGUSR1\"",
            ckpt.display()
        );
        let config =
            torch_config(&tb, dir.path(), &venv, &args, &mark, "[restart]\ncheckpoint_grace = \"60s\"\n");
        let config = config.display().to_string();
        let mut herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
        let started =
            poll_until(Duration::from_secs(120), Duration::from_millis(50), || ckpt.join("step_2").exists());
        if started.is_none() {
            println!("run {rep}: training did not start");
            let _ = Command::new("kill").args(["-INT", &herd.pid().to_string()]).status();
            herd.finish();
            kill_marked(&mark);
            continue;
        }
        let signalled = Instant::now();
        let _ = Command::new("kill").args(["-USR1", &herd.pid().to_string()]).status();
        let gone = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
            workers(&mark, None).is_empty()
        });
        let exited = poll_until(Duration::from_secs(120), Duration::from_millis(10), || herd.try_done());
        let m = herd.finish();
        kill_marked(&mark);
        match (gone, exited) {
            (Some(g), Some(e)) if !m.success => {
                rows.push([(g - signalled).as_secs_f64(), (e - signalled).as_secs_f64()])
            }
            _ => println!("run {rep}: the ranks or herd did not end (herd ok: {})", m.success),
        }
    }
    println!("\n### A time limit's warning: torchrun 3 nodes x 2, SIGUSR1 to herd ({} runs)\n", rows.len());
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- checkpoint`\n");
    println!("| from SIGUSR1 to herd | median s | spread s |\n|---|---|---|");
    for (i, what) in
        ["every rank exited (checkpoint written)", "herd exited (75), every node stopped"].iter().enumerate()
    {
        let (m, s, _) = fmt_stat(&rows.iter().map(|r| r[i]).collect::<Vec<_>>(), 2);
        println!("| {what} | {m} | {s} |");
    }
}

/// Issue 28: what a container costs per attempt. torchrun 3 nodes x 2 with and without
/// `[container]` (rootful podman, the test image from scripts/container-image.sh, the venv
/// mounted), alternating, `--no-preflight`: from herd's start to the first worker; then a
/// worker SIGKILLed 2 s after all six run, to attempt 1's six workers, minus the backoff.
fn container() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let out =
        Command::new(format!("{}/scripts/container-image.sh", env!("CARGO_MANIFEST_DIR"))).output().unwrap();
    assert!(out.status.success(), "container-image.sh: {}", String::from_utf8_lossy(&out.stderr));
    let image = String::from_utf8(out.stdout).unwrap().trim().to_string();
    // The venv, and the Python it links to unless it is the image's own /usr.
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap();
    let home = cfg.lines().find_map(|l| l.strip_prefix("home = ")).expect("home in pyvenv.cfg");
    let prefix = Path::new(home.trim()).parent().unwrap().to_path_buf();
    let mut mounts = vec![format!("\"{0}:{0}:ro\"", venv.display())];
    if prefix != Path::new("/usr") {
        mounts.push(format!("\"{0}:{0}:ro\"", prefix.display()));
    }
    let variants = [
        ("without a container", String::new()),
        (
            "podman",
            format!(
                "[container]\nruntime = \"podman\"\nimage = \"{image}\"\nmounts = [{}]\n",
                mounts.join(", ")
            ),
        ),
    ];
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let mut rows: Vec<Vec<[f64; 4]>> = vec![Vec::new(); variants.len()];
    for rep in 0..reps {
        let mut order = vec![0, 1];
        if rep % 2 == 1 {
            order.reverse();
        }
        for v in order {
            let mark = format!("BENCH_MARK=container-{v}-{rep}-{}", std::process::id());
            let config = torch_config(
                &tb,
                dir.path(),
                &venv,
                &format!("{TRAIN_ON}, \"--retry-steps\", \"3\""),
                &mark,
                &format!(
                    "[restart]\nmax_restarts = 1\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n\n{}",
                    variants[v].1
                ),
            );
            // A CPU job, as the test cluster's: with GPUs herd would pass `--ulimit memlock=-1`,
            // which replaces podman's default ulimits (docs/guide/containers.md).
            let text = std::fs::read_to_string(&config).unwrap();
            std::fs::write(
                &config,
                text.replacen("nproc_per_node = 2\n", "nproc_per_node = 2\ndevice = \"cpu\"\n", 1),
            )
            .unwrap();
            let config = config.display().to_string();
            let herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
            let first = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
                !workers(&mark, Some("HERD_ATTEMPT=0")).is_empty()
            });
            let all = poll_until(Duration::from_secs(120), Duration::from_millis(50), || {
                workers(&mark, Some("HERD_ATTEMPT=0")).len() >= 6
            });
            let (Some(first), Some(_)) = (first, all) else {
                println!("run {rep}, {}: training did not start", variants[v].0);
                let _ = Command::new("kill").args(["-INT", &herd.pid().to_string()]).status();
                herd.finish();
                kill_marked(&mark);
                continue;
            };
            let first = (first - herd.started).as_secs_f64();
            std::thread::sleep(Duration::from_secs(2));
            let victim = workers(&mark, Some("RANK=3")).into_iter().find(|p| environ_has(*p, "LOCAL_RANK=1"));
            let (killed, killed_wall) = (Instant::now(), std::time::SystemTime::now());
            let _ = Command::new("kill").args(["-9", &victim.unwrap_or(0).to_string()]).status();
            let up = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
                workers(&mark, Some("HERD_ATTEMPT=1")).len() >= 6
            });
            let _ = Command::new("kill").args(["-INT", &herd.pid().to_string()]).status();
            herd.finish();
            kill_marked(&mark);
            let ev = run_events(&dir.path().join("logs"));
            let Some(up) = up else {
                println!("run {rep}, {}: attempt 1 did not come up", variants[v].0);
                continue;
            };
            let delay = backoff_drawn(&ev);
            let restart = (up - killed).as_secs_f64();
            let started = event_time(&ev, "attempt_started", 1);
            let attempt_1 = started.map_or(f64::NAN, |t| restart - since(t, killed_wall));
            rows[v].push([first, restart - delay, attempt_1, delay]);
        }
    }
    let left = Command::new("podman").args(["ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
    println!(
        "\n### A container per attempt: torchrun 3 nodes x 2, podman, --no-preflight ({} runs each)\n",
        rows[0].len()
    );
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- container`\n");
    println!(
        "| per attempt | without a container: median s | spread s | podman: median s | spread s | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, what) in [
        "herd's start to the first worker",
        "a worker's SIGKILL to attempt 1's six workers, minus the backoff",
        "attempt 1 started to its six workers",
        "backoff drawn",
    ]
    .iter()
    .enumerate()
    {
        let stat = |v: usize| fmt_stat(&rows[v].iter().map(|r| r[i]).collect::<Vec<_>>(), 2);
        let ((m0, s0, x0), (m1, s1, x1)) = (stat(0), stat(1));
        println!("| {what} | {m0} | {s0} | {m1} | {s1} | {:.2} |", x1 / x0);
    }
    println!("\nContainers left in podman's store: {:?}", String::from_utf8_lossy(&left.stdout).trim());
}

/// Issue 27: the time of `herd doctor --deep` against `herd doctor` alone (start to exit,
/// alternating), on N nodes (BENCH_DEEP, 3,64) of one namespace each with the torch venv and
/// `device = "cpu"` (gloo). What `--deep` adds is a second login, a torch import on every
/// node, the rendezvous, and the measuring budget (`doctor::net::BUDGET_SECS`).
fn deep() {
    let reps = runs(3);
    let sizes = env_sizes("BENCH_DEEP", "3,64");
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(*sizes.iter().max().expect("a size"));
    let dir = tempfile::tempdir().unwrap();
    println!("\n### `herd doctor --deep`: start to exit ({reps} runs each, alternating)\n");
    println!("| nodes | command | median s | spread s | ratio to doctor |");
    println!("|---|---|---|---|---|");
    for &n in &sizes {
        let hosts: Vec<String> = tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect();
        let job = format!(
            "workdir = \"/\"\ndevice = \"cpu\"\nsetup = \"source {}/bin/activate\"\nlauncher = \"torchrun\"\nscript = \"x.py\"",
            venv.display()
        );
        let config = write_config(&tb, dir.path(), &hosts, &job, "[rendezvous]\ninterface = \"eth0\"\n");
        let mut times: [Vec<Duration>; 2] = Default::default();
        for rep in 0..reps {
            for v in (0..2).map(|v| (v + rep) % 2) {
                let mut c = Command::new(HERD);
                c.args(["doctor", "-c"]).arg(&config);
                if v == 1 {
                    c.arg("--deep");
                }
                let start = Instant::now();
                let out = c.output().expect("spawn herd");
                times[v].push(start.elapsed());
                if !out.status.success() {
                    // Timed all the same; what it said is the finding.
                    let text = String::from_utf8_lossy(&out.stdout);
                    let tail: Vec<&str> = text.lines().rev().take(12).collect();
                    let took = start.elapsed().as_secs_f64();
                    println!("\n{c:?} exited {:?} after {took:.1} s:", out.status.code());
                    for line in tail.iter().rev() {
                        println!("    {line}");
                    }
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    println!("    stderr: {}", stderr.lines().take(8).collect::<Vec<_>>().join("\n    "));
                }
            }
        }
        let base = stats(times[0].clone());
        println!("{}", row(&format!("{n} | herd doctor"), &base, Some(&base)));
        println!("{}", row(&format!("{n} | herd doctor --deep"), &stats(times[1].clone()), Some(&base)));
    }
}

/// Scenario 13: one Slurm step for the fleet against a step per node (`[transport] steps`),
/// at 8, 16 and 32 slurmds (BENCH_STEPS_NODES), a `true` job with and without the preflight:
/// start to exit; the most `srun` processes of herd's at once and their and herd's RSS
/// together at most (sampled every 20 ms); and slurmctld's RPCs during the run (`sdiag`,
/// reset before each run): step creations and all.
fn slurm_steps() {
    let reps = runs(5);
    let sizes = env_sizes("BENCH_STEPS_NODES", "8,16,32");
    println!("\n### One Slurm step for the fleet against a step per node: a `true` job, start to exit ({reps} runs each, alternating)\n");
    println!(
        "Rerun: `BENCH_RUNS={reps} BENCH_STEPS_NODES={} cargo bench --bench herd_bench -- slurm-steps`\n",
        sizes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
    );
    println!("| nodes | steps | preflight | median s | spread s | ratio to per-node | sruns at most | herd + srun RSS at most, MiB | step creations | slurmctld RPCs |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes {
        let mut tb = Testbed::new(n);
        let cluster = slurm_support::Slurm::start(&mut tb);
        let alloc = cluster.allocate(n);
        let job_id = alloc[1].1.clone();
        let dir = tempfile::tempdir().unwrap();
        let variants = [("per-node", false), ("fleet", false), ("per-node", true), ("fleet", true)];
        let configs: Vec<PathBuf> = variants
            .iter()
            .enumerate()
            .map(|(i, (steps, _))| {
                let d = dir.path().join(i.to_string());
                std::fs::create_dir_all(&d).unwrap();
                let text = format!(
                    "[job]\nlauncher = \"command\"\nscript = \"true\"\n\n[logs]\ndir = \"{}\"\n\n[transport]\nkind = \"slurm\"\nsteps = \"{steps}\"\n",
                    d.join("logs").display()
                );
                std::fs::write(d.join("cluster.toml"), text).unwrap();
                d.join("cluster.toml")
            })
            .collect();
        let mut got: Vec<Vec<StepRun>> = vec![Vec::new(); variants.len()];
        for rep in 0..reps {
            for v in (0..variants.len()).map(|v| (v + rep) % variants.len()) {
                let _ = cluster.command("sdiag").arg("-r").output();
                let mut c = Command::new(HERD);
                c.args(["run", "-c"]).arg(&configs[v]).envs(alloc.iter().map(|(k, v)| (k, v)));
                if !variants[v].1 {
                    c.arg("--no-preflight");
                }
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
                assert!(status.success(), "{:?} failed", variants[v]);
                let (creates, rpcs) = sdiag_counts(&cluster);
                got[v].push((took, sruns, rss, creates, rpcs));
            }
        }
        let s: Vec<Stats> = got.iter().map(|xs| stats(xs.iter().map(|x| x.0).collect())).collect();
        for (v, (steps, preflight)) in variants.iter().enumerate() {
            let base = if v % 2 == 1 { Some(&s[v - 1]) } else { None };
            let r = row("", &s[v], base);
            let r = r.trim_start_matches("|  | ").trim_end_matches(" |");
            let median = |f: &dyn Fn(&StepRun) -> u64| {
                let mut xs: Vec<u64> = got[v].iter().map(f).collect();
                xs.sort();
                xs[xs.len() / 2]
            };
            println!(
                "| {n} | {steps} | {} | {r} | {} | {:.0} | {} | {} |",
                if *preflight { "on" } else { "off" },
                median(&|x| x.1 as u64),
                median(&|x| x.2) as f64 / 1024.0,
                median(&|x| x.3),
                median(&|x| x.4),
            );
        }
        cluster.release(&job_id);
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
fn sdiag_counts(cluster: &slurm_support::Slurm) -> (u64, u64) {
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

/// Scenario 14: what a start costs the launch host over SSH, by node count (BENCH_SCALE,
/// 16,64,128,252): `herd run` of a `true` job with its preflight (herd's defaults) on N nodes
/// that are one sshd answering on N addresses, under `ulimit -n 1024`. Sampled from /proc
/// every 20 ms: herd's descriptors at most, its peak RSS (VmHWM), its own CPU and that of the
/// ssh clients it waited for (the masters' handshakes); every 500 ms the SSH masters (their
/// number and total RSS at most). Then a least-squares line per quantity, its slope the cost
/// of a node, projected to 1,000 and 4,000 nodes. BENCH_BASELINE_HERD runs beside it, with
/// its soft limit raised to the hard one (the herd of before issue 26 does not raise it
/// itself, and fails at 254 nodes under 1024). BENCH_HOLD_SECS keeps the largest testbed up
/// afterwards, for a profiler from outside (heaptrack), and prints its config.
fn scale() {
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

/// Scenario 12: the nodes' share of a start. One node; a `true` job with `--no-preflight`
/// (herd's login, agent and job on the node), against a bare `ssh node true` (the login alone),
/// alternating, with another herd binary (BENCH_BASELINE_HERD) beside this one. Start to exit,
/// so herd's own start and its ssh's are in it as they are in ssh's. BENCH_HOLD_SECS keeps the
/// testbed up afterwards for a measurement from outside, and prints its commands.
fn node_share() {
    let reps = runs(15);
    let tb = Testbed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let host = tb.nodes()[0].addr.clone();
    let config = write_config(&tb, dir.path(), &[host], "launcher = \"command\"\nscript = \"true\"", "");
    let herd = |bin: &str| {
        let mut c = Command::new(bin);
        c.args(["run", "--no-preflight", "-c"]).arg(&config);
        c
    };
    let mut names = vec!["ssh node true".to_string(), "herd run --no-preflight".to_string()];
    let baseline = std::env::var("BENCH_BASELINE_HERD").ok();
    if baseline.is_some() {
        names.push("baseline herd run --no-preflight".into());
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for rep in 0..reps + 1 {
        for v in (0..names.len()).map(|v| (v + rep) % names.len()) {
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            let took = match v {
                // The same key exchange as herd's master connection: the client's default.
                0 => timed(tb.ssh_command_kex(0, None).arg("true")),
                1 => timed(&mut herd(HERD)),
                _ => timed(&mut herd(baseline.as_deref().unwrap())),
            };
            // The first round warms the caches up and is not counted.
            if rep > 0 {
                times[v].push(took);
            }
        }
    }
    println!("\n### The nodes' share: `true` on 1 node, start to exit ({reps} runs each, alternating)\n");
    println!("| command | median s | spread s | ratio to ssh |");
    println!("|---|---|---|---|");
    let ssh = stats(times[0].clone());
    for (name, xs) in names.iter().zip(&times) {
        println!("{}", row(name, &stats(xs.clone()), Some(&ssh)));
    }
    let hold = env_usize("BENCH_HOLD_SECS", 0);
    if hold > 0 {
        println!("\nssh: {:?}\nherd: {:?}\nholding for {hold} s", tb.ssh_command(0).arg("true"), herd(HERD));
        std::thread::sleep(Duration::from_secs(hold as u64));
    }
}

/// Scenario 11: the slurm transport against SSH on the same 3 nodes, each with an sshd and a
/// slurmd, inside one allocation: the fan-out of a `true` job (start to all exited), with
/// plain `srun` as Slurm's own floor, then torchrun 3 x 2 from start to the first worker.
fn slurm() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let mut tb = Testbed::new(3);
    let cluster = slurm_support::Slurm::start(&mut tb);
    let alloc = cluster.allocate(3);
    let job_id = alloc[1].1.clone();
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    let config = write_config(&tb, dir.path(), &hosts, "launcher = \"command\"\nscript = \"true\"", "");
    let config = config.display().to_string();
    let names = [
        "herd run --no-preflight (ssh)",
        "herd run --no-preflight --slurm",
        "herd run (ssh)",
        "herd run --slurm",
        "srun -N 3 --ntasks-per-node=1 true",
    ];
    let mut fan: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for rep in 0..reps {
        for v in (0..names.len()).map(|v| (v + rep) % names.len()) {
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            let mut c = if v == 4 {
                let mut c = Command::new("srun");
                c.args(["--jobid", &job_id, "-N", "3", "--ntasks-per-node=1", "--overlap", "true"]);
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
    }
    println!("\n### The slurm transport against SSH, 3 nodes: fan-out of `true`, start to all exited ({reps} runs each, alternating, order rotated)\n");
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- slurm`\n");
    println!("| command | median s | spread s | ratio to the same over ssh |");
    println!("|---|---|---|---|");
    let s: Vec<Stats> = fan.iter().map(|xs| stats(xs.clone())).collect();
    for (i, name) in names.iter().enumerate() {
        let base = match i {
            1 | 3 => Some(&s[i - 1]),
            4 => Some(&s[0]),
            _ => None,
        };
        println!("{}", row(name, &s[i], base));
    }

    // torchrun 3 x 2: start to the first worker process.
    let names = ["herd run (ssh)", "herd run --slurm"];
    let mut first: [Vec<(f64, f64)>; 2] = Default::default();
    let limit = Duration::from_secs(120);
    for rep in 0..reps {
        for v in (0..2).map(|v| (v + rep) % 2) {
            let mark = format!("BENCH_MARK=slurm-first-{v}-{rep}-{}", std::process::id());
            let config = torch_config(&tb, dir.path(), &venv, "\"--steps\", \"3\"", &mark, "");
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
    }
    println!("\n### The slurm transport against SSH, 3 nodes: torchrun 3 x 2, start to the first worker process ({reps} runs each, alternating)\n");
    println!("| launcher | to first worker, median s | spread s | ratio to ssh | to first torchrun, median s | spread s |");
    println!("|---|---|---|---|---|---|");
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
    cluster.release(&job_id);
}

struct Stats {
    median: Duration,
    min: Duration,
    max: Duration,
}

fn stats(mut xs: Vec<Duration>) -> Stats {
    xs.sort();
    Stats { median: xs[xs.len() / 2], min: xs[0], max: xs[xs.len() - 1] }
}

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

fn row(name: &str, s: &Stats, baseline: Option<&Stats>) -> String {
    let ratio = baseline
        .map_or("1.00".to_string(), |b| format!("{:.2}", s.median.as_secs_f64() / b.median.as_secs_f64()));
    format!("| {name} | {} | {}-{} | {ratio} |", secs(s.median), secs(s.min), secs(s.max))
}

/// ssh as the baselines use it: the same defaults herd's own ssh gets, plus the testbed key.
fn ssh_args(tb: &Testbed) -> Vec<String> {
    vec![
        "-F".into(),
        "/dev/null".into(),
        "-i".into(),
        tb.identity_file().display().to_string(),
        "-o".into(),
        format!("UserKnownHostsFile={}", tb.known_hosts_file().display()),
        "-o".into(),
        "StrictHostKeyChecking=yes".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "IdentitiesOnly=yes".into(),
        "-l".into(),
        "root".into(),
    ]
}

fn timed(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().expect("spawn");
    assert!(status.success(), "{cmd:?} failed");
    start.elapsed()
}

fn write_config(tb: &Testbed, dir: &Path, hosts: &[String], job: &str, extra: &str) -> PathBuf {
    let text = format!(
        "{}\n[[nodes]]\nhost = \"{}\"\n\n[job]\n{job}\n\n[logs]\ndir = \"{}\"\n\n{extra}\n",
        tb.ssh_config_toml(),
        hosts.join(","),
        dir.join("logs").display()
    );
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Scenario 1: a trivial `true` job on N nodes, start to all exited.
fn fanout() {
    let reps = runs(5);
    let tb = Testbed::new(64);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "\n### Launch fan-out: `true` on N nodes, start to all exited ({reps} runs each, alternating)\n"
    );
    println!("| N | command | median s | spread s | ratio to pdsh |");
    println!("|---|---|---|---|---|");
    for n in [8usize, 32, 64] {
        let hosts: Vec<String> = tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect();
        let config = write_config(&tb, dir.path(), &hosts, "launcher = \"command\"\nscript = \"true\"", "");
        let mut results: Vec<(&str, Vec<Duration>)> = vec![
            ("pdsh -R ssh -f 64", vec![]),
            ("ssh & loop", vec![]),
            ("herd run --no-preflight", vec![]),
            ("herd run", vec![]),
        ];
        for _ in 0..reps {
            let ssh_append = ssh_args(&tb)[..ssh_args(&tb).len() - 2].join(" ");
            results[0].1.push(timed(
                Command::new("pdsh")
                    .args(["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(","), "true"])
                    .env("PDSH_SSH_ARGS_APPEND", &ssh_append),
            ));
            let loop_script = hosts
                .iter()
                .map(|h| format!("ssh {} {h} true &", ssh_args(&tb).join(" ")))
                .collect::<Vec<_>>()
                .join("\n")
                + "\nwait";
            results[1].1.push(timed(Command::new("bash").arg("-c").arg(&loop_script)));
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            results[2].1.push(timed(Command::new(HERD).args(["run", "--no-preflight", "-c"]).arg(&config)));
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            results[3].1.push(timed(Command::new(HERD).args(["run", "-c"]).arg(&config)));
        }
        let pdsh = stats(results[0].1.clone());
        for (name, xs) in &results {
            let s = stats(xs.clone());
            println!("{}", row(&format!("{n} | {name}"), &s, Some(&pdsh)));
        }
    }
}

/// Scenario 1b: the fan-out of scenario 1 at 64 nodes whose login shell takes
/// BENCH_LOGIN_SECS (1 s) to start, as with `conda init` in a shared home: every login costs
/// that much. Then, counted by each node's `~/.bashrc`, the logins and shell inits per node of
/// each herd command.
fn slow_logins() {
    let reps = runs(5);
    let n = env_usize("BENCH_NODES", 64);
    let login: f64 = std::env::var("BENCH_LOGIN_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    let tb = Testbed::new(n);
    for i in 0..n {
        tb.slow_login(i, login);
    }
    tb.count_logins();
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    // BENCH_JOB=python: both start `python3 -c pass` on every node, as every training launch
    // starts an interpreter; otherwise `true`.
    let python = std::env::var("BENCH_JOB").is_ok_and(|j| j == "python");
    let (job, remote): (&str, &[&str]) = match python {
        true => (
            "launcher = \"command\"\nscript = \"python3\"\nargs = [\"-c\", \"pass\"]\ndevice = \"cpu\"",
            &["python3", "-c", "pass"],
        ),
        // device = "cpu": the testbed has no GPUs, which `herd doctor` would fail on every node.
        false => ("launcher = \"command\"\nscript = \"true\"\ndevice = \"cpu\"", &["true"]),
    };
    let config = write_config(&tb, dir.path(), &hosts, job, "");
    let shown = remote.join(" ");
    println!(
        "\n### Launch fan-out, {n} nodes, {login} s login shell: `{shown}` on every node, start to all exited ({reps} runs each, alternating)\n"
    );
    println!("| N | command | median s | spread s | ratio to pdsh |");
    println!("|---|---|---|---|---|");
    let ssh_append = ssh_args(&tb)[..ssh_args(&tb).len() - 2].join(" ");
    let mut results: Vec<(&str, Vec<Duration>)> =
        vec![("pdsh -R ssh -f 64", vec![]), ("herd run --no-preflight", vec![]), ("herd run", vec![])];
    // Another herd binary (BENCH_BASELINE_HERD), run beside this one in every round.
    let baseline = std::env::var("BENCH_BASELINE_HERD").ok();
    if baseline.is_some() {
        results.push(("baseline herd run --no-preflight", vec![]));
        results.push(("baseline herd run", vec![]));
    }
    for _ in 0..reps {
        if let Some(base) = &baseline {
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            results[3].1.push(timed(Command::new(base).args(["run", "--no-preflight", "-c"]).arg(&config)));
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            results[4].1.push(timed(Command::new(base).args(["run", "-c"]).arg(&config)));
        }
        results[0].1.push(timed(
            Command::new("pdsh")
                .args(["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(",")])
                .args(remote)
                .env("PDSH_SSH_ARGS_APPEND", &ssh_append),
        ));
        let _ = std::fs::remove_dir_all(dir.path().join("logs"));
        results[1].1.push(timed(Command::new(HERD).args(["run", "--no-preflight", "-c"]).arg(&config)));
        let _ = std::fs::remove_dir_all(dir.path().join("logs"));
        results[2].1.push(timed(Command::new(HERD).args(["run", "-c"]).arg(&config)));
    }
    let pdsh = stats(results[0].1.clone());
    for (name, xs) in &results {
        println!("{}", row(&format!("{n} | {name}"), &stats(xs.clone()), Some(&pdsh)));
    }

    println!("\n### Logins and shell inits per node ({n} nodes; min-max over the nodes)\n");
    println!("| command | logins per node | shell inits per node |");
    println!("|---|---|---|");
    let counts =
        |tb: &Testbed| -> Vec<(usize, usize)> { (0..n).map(|i| (tb.logins(i), tb.shell_inits(i))).collect() };
    let mut commands: Vec<(String, Command)> = Vec::new();
    for args in [&["run", "--no-preflight"][..], &["run"], &["doctor"], &["exec", "--", "true"], &["kill"]] {
        let mut c = Command::new(HERD);
        c.arg(args[0]).arg("-c").arg(&config).args(&args[1..]);
        commands.push((format!("herd {}", args.join(" ")), c));
    }
    let mut pdsh = Command::new("pdsh");
    pdsh.args(["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(","), "true"])
        .env("PDSH_SSH_ARGS_APPEND", &ssh_append);
    commands.push(("pdsh true".into(), pdsh));
    for (name, mut cmd) in commands {
        let before = counts(&tb);
        let _ = std::fs::remove_dir_all(dir.path().join("logs"));
        let out = cmd.stdin(Stdio::null()).output().expect("spawn");
        let status = out.status;
        if !status.success() {
            let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            eprintln!("{name}: {status}\n{}", tail(&said, 30));
        }
        let after = counts(&tb);
        let delta: Vec<(usize, usize)> =
            before.iter().zip(&after).map(|(b, a)| (a.0 - b.0, a.1 - b.1)).collect();
        let range = |f: fn(&(usize, usize)) -> usize| {
            let (lo, hi) = (delta.iter().map(f).min().unwrap(), delta.iter().map(f).max().unwrap());
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        };
        let note = if status.success() { String::new() } else { format!(" ({status})") };
        println!("| {name}{note} | {} | {} |", range(|d| d.0), range(|d| d.1));
    }
}

fn environ_has(pid: u32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).any(|e| e == entry.as_bytes()))
        .unwrap_or(false)
}

/// Wait until training runs (every rank has a live process with `mark`), SIGKILL global rank
/// 3, and time until no process with `mark` is left anywhere (capped).
fn kill_rank_and_time(mark: &str, cap: Duration) -> Option<Duration> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let victim = loop {
        let pids = herd_support::processes_with_env_prefix(mark);
        if let Some(p) = pids.iter().find(|p| environ_has(**p, "RANK=3") && environ_has(**p, "LOCAL_RANK=1"))
        {
            if pids
                .iter()
                .filter(|p| environ_has(**p, "LOCAL_RANK=0") || environ_has(**p, "LOCAL_RANK=1"))
                .count()
                >= 6
            {
                break *p;
            }
        }
        assert!(Instant::now() < deadline, "training did not start");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-9", &victim.to_string()]).status();
    // BENCH_TRACE=1: when each job process was last seen, to show what the time is spent on.
    let trace = std::env::var_os("BENCH_TRACE").is_some();
    let mut seen: std::collections::BTreeMap<u32, (String, Duration)> = Default::default();
    while killed.elapsed() < cap {
        let pids = herd_support::processes_with_env_prefix(mark);
        for p in pids.iter().filter(|_| trace) {
            let cmd =
                std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default().replace('\0', " ");
            seen.insert(*p, (cmd.chars().take(90).collect(), killed.elapsed()));
        }
        if pids.is_empty() {
            let mut v: Vec<_> = seen.into_iter().collect();
            v.sort_by_key(|(_, (_, t))| *t);
            for (p, (c, t)) in v {
                eprintln!("last seen {:>6.3} s after the kill: pid {p} {c}", t.as_secs_f64());
            }
            return Some(killed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Scenario 3: one worker SIGKILLed, to every job process on every node gone.
fn teardown() {
    const REPS: usize = 5;
    const CAP: Duration = Duration::from_secs(30);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    let root = env!("CARGO_MANIFEST_DIR");
    let mut herd_t = Vec::new();
    let mut baseline_t = Vec::new();
    let baseline = std::env::var_os("BENCH_BASELINE_HERD").map(PathBuf::from);
    let mut shell_t = Vec::new();
    let mut shell_hung = 0;
    for rep in 0..REPS {
        // herd, max_restarts = 0, so the gang stays down. Its processes are found by a mark of
        // this bench's own, not by HERD_MARKER: other herd runs (tests) may share the machine.
        // The baseline binary, when given, runs first on odd runs and second on even ones.
        let mut binaries: Vec<(&Path, &mut Vec<Duration>, &str)> =
            vec![(Path::new(HERD), &mut herd_t, "herd")];
        if let Some(b) = &baseline {
            binaries.insert(rep % 2, (b.as_path(), &mut baseline_t, "base"));
        }
        for (binary, times, name) in binaries {
            let mark = format!("BENCH_MARK=teardown-{name}-{rep}-{}", std::process::id());
            let config =
                torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, "[restart]\nmax_restarts = 0\n");
            let mut herd = Command::new(binary)
                .args(["run", "--no-preflight", "-c"])
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            if let Some(t) = kill_rank_and_time(&mark, CAP) {
                times.push(t);
            }
            let _ = herd.wait();
        }

        // The shell loop everyone writes: ssh nodeN torchrun ... &, with a marker to find it.
        let mark = format!("BENCH_MARK=teardown-loop-{rep}-{}", std::process::id());
        let port = 29400 + rep as u16;
        let mut children = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            let remote = format!(
                "cd {root} && source {}/bin/activate && export {mark} GLOO_SOCKET_IFNAME=eth0 && \
                 torchrun --nnodes 3 --nproc-per-node 2 --node-rank {i} --master-addr {} --master-port {port} \
                 examples/allreduce.py --steps 100000 --sleep 0.05",
                venv.display(),
                hosts[0]
            );
            children.push(
                Command::new("ssh")
                    .args(ssh_args(&tb))
                    .arg(h)
                    .arg(format!("bash -c '{remote}'"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
        }
        match kill_rank_and_time(&mark, CAP) {
            Some(t) => shell_t.push(t),
            None => shell_hung += 1,
        }
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in herd_support::processes_with_env_prefix(&mark) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
    println!("\n### Teardown: torchrun 3 nodes x 2, rank 3 SIGKILLed, to every job process gone ({REPS} runs each)\n");
    println!("Rerun: `cargo bench --bench herd_bench -- teardown`\n");
    println!("| launcher | median s | spread s | ratio to shell loop |");
    println!("|---|---|---|---|");
    let shell = (!shell_t.is_empty()).then(|| stats(shell_t.clone()));
    if let Some(s) = &shell {
        println!("{}", row("ssh + torchrun shell loop", s, None));
    }
    if shell_hung > 0 {
        println!(
            "| ssh + torchrun shell loop | still running after {} s in {shell_hung} of {REPS} runs | | |",
            CAP.as_secs()
        );
    }
    if !herd_t.is_empty() {
        let herd_row = row("herd run --no-preflight", &stats(herd_t.clone()), shell.as_ref());
        // Without a finished baseline run there is no ratio.
        let herd_row = if shell.is_some() { herd_row } else { herd_row.replace("| 1.00 |", "| - |") };
        println!("{herd_row}");
    }
    if let (Some(b), false) = (&baseline, baseline_t.is_empty()) {
        let base = stats(baseline_t.clone());
        let base_row = row(&format!("baseline {}", b.display()), &base, shell.as_ref());
        println!("{}", if shell.is_some() { base_row } else { base_row.replace("| 1.00 |", "| - |") });
        let this = stats(herd_t.clone()).median.as_secs_f64();
        println!(
            "\nthis herd against the baseline: {:.2}x (median {this:.3} s against {:.3} s)",
            this / base.median.as_secs_f64(),
            base.median.as_secs_f64()
        );
    }
    if herd_t.len() < REPS {
        println!(
            "| herd run | still running after {} s in {} of {REPS} runs | | |",
            CAP.as_secs(),
            REPS - herd_t.len()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios 2, 4, 5, 6 and 7, and what they share.

/// Node counts from the environment variable `name` (`8,16,32`), else from `default`.
fn env_sizes(name: &str, default: &str) -> Vec<usize> {
    let text = std::env::var(name).unwrap_or_else(|_| default.into());
    text.split(',')
        .map(|n| n.trim().parse().unwrap_or_else(|_| panic!("{name}: numbers, not {text:?}")))
        .collect()
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn runs(default: usize) -> usize {
    env_usize("BENCH_RUNS", default).max(1)
}

/// Which process tree a launcher is, and what it cost: CPU of the whole tree (a cpuacct
/// cgroup: ssh masters that fork into the background stay in it), and CPU and peak RSS of the
/// launcher process itself, sampled from /proc until it is a zombie.
struct Tracked {
    child: std::process::Child,
    cgroup: Option<PathBuf>,
    started: Instant,
    sampler: Option<std::thread::JoinHandle<()>>,
    last: std::sync::Arc<std::sync::Mutex<SelfSample>>,
    err_path: PathBuf,
}

#[derive(Clone, Copy, Default)]
struct SelfSample {
    cpu: Duration,
    hwm_kib: u64,
}

#[derive(Clone, Copy)]
struct Measured {
    wall: Duration,
    tree_cpu: Option<Duration>,
    self_cpu: Duration,
    self_hwm_kib: u64,
    success: bool,
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
    fn spawn(program: &str, args: &[&str], stdout: Stdio) -> Tracked {
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

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn tree_cpu(&self) -> Option<Duration> {
        let cg = self.cgroup.as_ref()?;
        let ns: u64 = std::fs::read_to_string(cg.join("cpuacct.usage")).ok()?.trim().parse().ok()?;
        Some(Duration::from_nanos(ns))
    }

    /// (launcher process CPU, tree CPU) so far.
    fn cpu_now(&self) -> (Duration, Option<Duration>) {
        (self.last.lock().unwrap().cpu, self.tree_cpu())
    }

    fn try_done(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    fn kill(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
    }

    fn finish(mut self) -> Measured {
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

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn stats_f(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

fn fmt_stat(xs: &[f64], digits: usize) -> (String, String, f64) {
    if xs.is_empty() {
        return ("-".into(), "-".into(), f64::NAN);
    }
    let (m, lo, hi) = stats_f(xs.to_vec());
    (format!("{m:.digits$}"), format!("{lo:.digits$}-{hi:.digits$}"), m)
}

/// Live processes whose environment holds exactly `entry` and, if given, also `and`.
fn marked(entry: &str, and: Option<&str>) -> Vec<u32> {
    herd_support::processes_with_env_prefix(entry)
        .into_iter()
        .filter(|p| environ_has(*p, entry) && and.is_none_or(|a| environ_has(*p, a)))
        .collect()
}

/// A torch worker (torchrun sets LOCAL_RANK for its workers only) with `mark`.
fn workers(mark: &str, extra: Option<&str>) -> Vec<u32> {
    herd_support::processes_with_env_prefix("LOCAL_RANK=")
        .into_iter()
        .filter(|p| environ_has(*p, mark) && extra.is_none_or(|e| environ_has(*p, e)))
        .collect()
}

fn kill_marked(mark: &str) {
    for pid in marked(mark, None) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
}

fn net_ns_inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// `examples/allreduce.py`'s args (a TOML array's items) for training that runs until stopped.
const TRAIN_ON: &str = "\"--steps\", \"100000\", \"--sleep\", \"0.05\"";

/// The torch job on 3 nodes x 2 ranks, from the repo root, with `mark` in every process; and
/// no logs in `dir` from an earlier run, so that the next run's are the only ones.
fn torch_config(tb: &Testbed, dir: &Path, venv: &Path, args: &str, mark: &str, extra: &str) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir.join("logs"));
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    let job = format!(
        "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nargs = [{args}]\n\
         nproc_per_node = 2\nworkdir = \"{}\"\nsetup = \"source {}/bin/activate\"",
        env!("CARGO_MANIFEST_DIR"),
        venv.display()
    );
    let (key, value) = mark.split_once('=').unwrap();
    write_config(
        tb,
        dir,
        &hosts,
        &job,
        &format!("[rendezvous]\ninterface = \"eth0\"\n\n[env]\n{key} = \"{value}\"\n\n{extra}"),
    )
}

/// The shell loop: `ssh nodeN torchrun --node-rank N ...` for every node, in parallel.
fn torch_shell_loop(
    tb: &Testbed,
    venv: &Path,
    args: &str,
    mark: &str,
    port: u16,
) -> Vec<std::process::Child> {
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let remote = format!(
                "cd {root} && source {venv}/bin/activate && export {mark} GLOO_SOCKET_IFNAME=eth0 && \
                 torchrun --nnodes {n} --nproc-per-node 2 --node-rank {i} --master-addr {master} --master-port {port} \
                 examples/allreduce.py {args}",
                root = env!("CARGO_MANIFEST_DIR"),
                venv = venv.display(),
                n = hosts.len(),
                master = hosts[0]
            );
            Command::new("ssh")
                .args(ssh_args(tb))
                .arg(h)
                .arg(format!("bash -c '{remote}'"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect()
}

fn poll_until(limit: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> Option<Instant> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(Instant::now());
        }
        std::thread::sleep(every);
    }
    None
}

fn run_events(logs: &Path) -> Vec<serde_json::Value> {
    std::fs::read_dir(logs)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|run| std::fs::read_to_string(run.path().join("events.jsonl")).ok())
        .flat_map(|t| {
            t.lines().filter_map(|l| serde_json::from_str(l).ok()).collect::<Vec<serde_json::Value>>()
        })
        .collect()
}

fn event_time(ev: &[serde_json::Value], name: &str, nth: usize) -> Option<std::time::SystemTime> {
    let e = ev.iter().filter(|e| e["event"] == name).nth(nth)?;
    humantime::parse_rfc3339(e["ts"].as_str()?).ok()
}

fn since(t: std::time::SystemTime, from: std::time::SystemTime) -> f64 {
    t.duration_since(from).map_or(0.0, |d| d.as_secs_f64())
}

/// Scenario 2: a real torchrun job on 3 nodes, from the launcher's start to the first worker
/// process (a process of the job with LOCAL_RANK set) existing on any node.
fn first_rank() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let args = "\"--steps\", \"3\"";
    // Per launcher: (start to the first torchrun, start to the first worker) of every run.
    let mut times: [Vec<(f64, f64)>; 3] = Default::default();
    let limit = Duration::from_secs(120);
    let mut timelines = [Vec::new(), Vec::new()];
    for rep in 0..reps {
        // The order rotates from run to run, so that no launcher always follows the same one.
        for variant in (0..3).map(|v| (v + rep) % 3) {
            if variant == 0 {
                // The shell loop.
                let mark = format!("BENCH_MARK=first-loop-{rep}-{}", std::process::id());
                let start = Instant::now();
                let children = torch_shell_loop(&tb, &venv, "--steps 3", &mark, 29500 + rep as u16);
                times[0].extend(first_launcher_and_worker(&mark, start, limit));
                for mut c in children {
                    let _ = c.wait();
                }
                kill_marked(&mark);
                continue;
            }
            // herd, without and with its preflight.
            let preflight = variant == 2;
            let mark = format!("BENCH_MARK=first-herd-{preflight}-{rep}-{}", std::process::id());
            let config = torch_config(&tb, dir.path(), &venv, args, &mark, "");
            let config = config.display().to_string();
            let mut a = vec!["run", "-c", &config];
            if !preflight {
                a.insert(1, "--no-preflight");
            }
            let spawned = std::time::SystemTime::now();
            let herd = Tracked::spawn(HERD, &a, Stdio::null());
            let first = first_launcher_and_worker(&mark, herd.started, limit);
            times[variant].extend(first);
            let m = herd.finish();
            if rep + 1 == reps {
                let timeline = &mut timelines[usize::from(preflight)];
                *timeline = timeline_rows(&run_events(&dir.path().join("logs")), spawned);
                timeline.retain(|r| {
                    !r.contains("node_exited")
                        && !r.contains("attempt_succeeded")
                        && !r.contains("run_finished")
                });
                if let Some((l, w)) = first {
                    timeline.push(format!("| +{l:.2} s | first torchrun process exists |"));
                    timeline.push(format!("| +{w:.2} s | first worker process exists |"));
                }
            }
            assert!(m.success, "herd run failed");
            kill_marked(&mark);
        }
    }
    println!("\n### Time to first rank running: torchrun, 3 nodes x 2, start to the first worker process ({reps} runs each, alternating, order rotated)\n");
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- first-rank`\n");
    println!("Each run is split where the first `torchrun` process exists on any node: before it is the");
    println!("launcher's part (SSH, the agent, `cd`, `setup`), after it is torch's own start-up.\n");
    println!("| launcher | to first worker, median s | spread s | overhead above the loop s | to first torchrun, median s | spread s | overhead above the loop s | torchrun to first worker, median s |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut base = (f64::NAN, f64::NAN);
    let names = ["ssh + torchrun shell loop", "herd run --no-preflight", "herd run"];
    for (i, name) in names.iter().enumerate() {
        let worker: Vec<f64> = times[i].iter().map(|t| t.1).collect();
        let launcher: Vec<f64> = times[i].iter().map(|t| t.0).collect();
        let torch: Vec<f64> = times[i].iter().map(|t| t.1 - t.0).collect();
        let (wm, ws, wv) = fmt_stat(&worker, 2);
        let (lm, ls, lv) = fmt_stat(&launcher, 2);
        let (tm, _, _) = fmt_stat(&torch, 2);
        if i == 0 {
            base = (wv, lv);
        }
        println!("| {name} | {wm} | {ws} | {:.2} | {lm} | {ls} | {:.2} | {tm} |", wv - base.0, lv - base.1);
    }
    let missing = 3 * reps - times.iter().map(Vec::len).sum::<usize>();
    if missing > 0 {
        println!("\n{missing} run(s) never showed a worker within {} s.", limit.as_secs());
    }
    for (name, timeline) in names[1..].iter().zip(&timelines) {
        println!(
            "\nThe last `{name}`'s events, from its start:\n\n| time | event |\n|---|---|\n{}",
            timeline.join("\n")
        );
    }
}

/// Poll every 10 ms from `start`: when the first process with `mark` that is torchrun itself
/// (an argv word whose file name is `torchrun`), and the first worker, exist on any node.
fn first_launcher_and_worker(mark: &str, start: Instant, limit: Duration) -> Option<(f64, f64)> {
    let is_torchrun = |pid: u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| c.split(|&b| b == 0).any(|w| w.rsplit(|&b| b == b'/').next() == Some(&b"torchrun"[..])))
            .unwrap_or(false)
    };
    let mut launcher = None;
    let worker = poll_until(limit, Duration::from_millis(10), || {
        if launcher.is_none() && marked(mark, None).into_iter().any(is_torchrun) {
            launcher = Some(Instant::now());
        }
        !workers(mark, None).is_empty()
    })?;
    // A worker implies its torchrun: if the poll never saw the torchrun alone, it appeared
    // within the same 10 ms.
    let launcher = launcher.unwrap_or(worker);
    Some(((launcher - start).as_secs_f64(), (worker - start).as_secs_f64()))
}

/// Scenario 4: training runs on 3 nodes, node 3's link is cut; time to herd's teardown and
/// failed attempt (from events.jsonl), and to no job process left on the two reachable nodes.
fn partition() {
    let reps = runs(3);
    const CAP: Duration = Duration::from_secs(45);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let cut_ns = net_ns_inode(&format!("/run/netns/{}", tb.nodes()[2].netns)).unwrap();
    let on_reachable = |mark: &str| {
        marked(mark, None)
            .into_iter()
            .filter(|p| net_ns_inode(&format!("/proc/{p}/ns/net")).is_some_and(|i| i != cut_ns))
            .count()
    };
    let training = |mark: &str| {
        poll_until(Duration::from_secs(120), Duration::from_millis(100), || workers(mark, None).len() >= 6)
            .expect("training did not start");
        std::thread::sleep(Duration::from_secs(3));
    };
    let (mut detect, mut failed, mut gone, mut loop_gone) = (vec![], vec![], vec![], vec![]);
    let mut loop_hung = 0;
    let mut timeline = Vec::new();
    for rep in 0..reps {
        let mark = format!("BENCH_MARK=part-herd-{rep}-{}", std::process::id());
        let config = torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, "[restart]\nmax_restarts = 0\n");
        let config = config.display().to_string();
        let mut herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
        training(&mark);
        let cut_wall = std::time::SystemTime::now();
        let cut = Instant::now();
        tb.link_down(2);
        if let Some(t) = poll_until(CAP, Duration::from_millis(20), || on_reachable(&mark) == 0) {
            gone.push((t - cut).as_secs_f64());
        }
        poll_until(CAP, Duration::from_millis(100), || {
            run_events(&dir.path().join("logs")).iter().any(|e| e["event"] == "attempt_failed")
        });
        let ev = run_events(&dir.path().join("logs"));
        if let Some(t) = event_time(&ev, "teardown_started", 0) {
            detect.push(since(t, cut_wall));
        }
        if let Some(t) = event_time(&ev, "attempt_failed", 0) {
            failed.push(since(t, cut_wall));
        }
        if rep + 1 == reps {
            timeline = timeline_rows(&ev, cut_wall);
        }
        if poll_until(Duration::from_secs(20), Duration::from_millis(100), || herd.try_done()).is_none() {
            herd.kill();
        }
        herd.finish();
        tb.link_up(2);
        kill_marked(&mark);

        let mark = format!("BENCH_MARK=part-loop-{rep}-{}", std::process::id());
        let mut children =
            torch_shell_loop(&tb, &venv, "--steps 100000 --sleep 0.05", &mark, 29600 + rep as u16);
        training(&mark);
        let cut = Instant::now();
        tb.link_down(2);
        match poll_until(CAP, Duration::from_millis(20), || on_reachable(&mark) == 0) {
            Some(t) => loop_gone.push((t - cut).as_secs_f64()),
            None => loop_hung += 1,
        }
        tb.link_up(2);
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        kill_marked(&mark);
    }
    println!("\n### Partition detection: torchrun 3 nodes x 2, node 2's link cut during training (node ranks from 0, as in herd's events) ({reps} runs each, alternating)\n");
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- partition`\n");
    println!("| launcher | from the cut to | median s | spread s |");
    println!("|---|---|---|---|");
    for (what, xs) in [
        ("teardown started (events.jsonl)", &detect),
        ("attempt declared failed (events.jsonl)", &failed),
        ("no job process left on nodes 0 and 1", &gone),
    ] {
        let (m, s, _) = fmt_stat(xs, 2);
        println!("| herd run --no-preflight | {what} | {m} | {s} |");
    }
    if !loop_gone.is_empty() {
        let (m, s, _) = fmt_stat(&loop_gone, 2);
        println!("| ssh + torchrun shell loop | no job process left on nodes 0 and 1 | {m} | {s} |");
    }
    if loop_hung > 0 {
        println!(
            "| ssh + torchrun shell loop | no job process left on nodes 0 and 1 | still running after {} s in {loop_hung} of {reps} runs | |",
            CAP.as_secs()
        );
    }
    println!(
        "\nherd's events in the last run, from the cut:\n\n| time | event |\n|---|---|\n{}",
        timeline.join("\n")
    );
}

/// Scenario 5: a worker SIGKILLed during training, max_restarts = 1, backoff 1 s; from the
/// kill to all six workers of attempt 1 existing, minus the backoff herd drew.
fn restart() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let baseline = std::env::var("BENCH_BASELINE_HERD").ok();
    let mut binaries: Vec<(&str, String)> = vec![("herd", HERD.to_string())];
    binaries.extend(baseline.map(|b| ("baseline herd", b)));
    let mut rows: Vec<Vec<[f64; 5]>> = vec![Vec::new(); binaries.len()];
    let mut timeline = Vec::new();
    // The baseline binary, when given, alternates with this one, first on odd runs.
    let order = |rep: usize| -> Vec<usize> {
        let mut v: Vec<usize> = (0..binaries.len()).collect();
        if rep % 2 == 1 {
            v.reverse();
        }
        v
    };
    for (rep, b) in (0..reps).flat_map(|rep| order(rep).into_iter().map(move |b| (rep, b))) {
        let (name, binary) = (&binaries[b].0, binaries[b].1.as_str());
        let mark = format!("BENCH_MARK=restart-{b}-{rep}-{}", std::process::id());
        let config = torch_config(
            &tb,
            dir.path(),
            &venv,
            &format!("{TRAIN_ON}, \"--retry-steps\", \"3\""),
            &mark,
            "[restart]\nmax_restarts = 1\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n",
        );
        let config = config.display().to_string();
        let herd = Tracked::spawn(binary, &["run", "--no-preflight", "-c", &config], Stdio::null());
        poll_until(Duration::from_secs(120), Duration::from_millis(100), || {
            workers(&mark, Some("HERD_ATTEMPT=0")).len() >= 6
        })
        .expect("training did not start");
        std::thread::sleep(Duration::from_secs(2));
        let victim =
            workers(&mark, Some("RANK=3")).into_iter().find(|p| environ_has(*p, "LOCAL_RANK=1")).unwrap();
        let killed_wall = std::time::SystemTime::now();
        let killed = Instant::now();
        let _ = Command::new("kill").args(["-9", &victim.to_string()]).status();
        let up = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
            workers(&mark, Some("HERD_ATTEMPT=1")).len() >= 6
        });
        let m = herd.finish();
        kill_marked(&mark);
        let ev = run_events(&dir.path().join("logs"));
        let (Some(up), Some(started)) = (up, event_time(&ev, "attempt_started", 1)) else {
            println!("run {rep}, {name}: attempt 1 did not come up (herd ok: {})", m.success);
            continue;
        };
        let delay = backoff_drawn(&ev);
        let total = (up - killed).as_secs_f64();
        let teardown = event_time(&ev, "attempt_failed", 0).map_or(f64::NAN, |t| since(t, killed_wall));
        let to_start = since(started, killed_wall);
        rows[b].push([total, delay, total - delay, teardown, total - to_start]);
        if rep + 1 == reps && b == 0 {
            timeline = timeline_rows(&ev, killed_wall);
            timeline.push(format!("| +{total:.2} s | attempt 1's six workers exist |"));
        }
    }
    println!("\n### Restart latency: torchrun 3 nodes x 2, rank 3 SIGKILLed, backoff 1 s (+-20 %), to attempt 1's six workers running ({} runs)\n", rows[0].len());
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- restart`\n");
    let names: Vec<&str> = binaries.iter().map(|b| b.0).collect();
    println!(
        "| from the kill | {} |",
        names.iter().map(|n| format!("{n}: median s | spread s")).collect::<Vec<_>>().join(" | ")
    );
    println!("|---|{}", "---|---|".repeat(names.len()));
    for (i, what) in [
        "to attempt 1's workers all running",
        "backoff drawn",
        "to workers running, minus the backoff",
        "to attempt 0 declared failed",
        "attempt 1 started to its workers running (torchrun start-up)",
    ]
    .iter()
    .enumerate()
    {
        let cells: Vec<String> = rows
            .iter()
            .map(|rs| {
                let (m, s, _) = fmt_stat(&rs.iter().map(|r| r[i]).collect::<Vec<_>>(), 2);
                format!("{m} | {s}")
            })
            .collect();
        println!("| {what} | {} |", cells.join(" | "));
    }
    println!(
        "\nThe last run's events, from the kill:\n\n| time | event |\n|---|---|\n{}",
        timeline.join("\n")
    );
}

/// Scenario 9: a node's link cut for good during training, torchrun 3 nodes x 2 plus one
/// spare (`nnodes = 3`), heartbeat_timeout 6 s, backoff 1 s, with the preflight (which checks
/// the spare). From the cut to the first and to all six workers of attempt 1 running, the
/// spare's among them; side by side, what happens without a spare (the same three nodes,
/// `--exclude` the spare): herd waits `restart.node_wait` (here 30 s) and gives up.
fn spare() {
    let reps = runs(3);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(4);
    let dir = tempfile::tempdir().unwrap();
    let spare_host = tb.nodes()[3].addr.clone();
    // One restart: the one measured. Stopping the job afterwards ends the run.
    let restart =
        "[restart]\nmax_restarts = 1\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n\
                   heartbeat_timeout = \"6s\"\nnode_wait = \"30s\"\n";
    // herd started, and training under way; `None` (herd stopped) when it did not start.
    let train = |args: &[&str], mark: &str| {
        let mut herd = Tracked::spawn(HERD, args, Stdio::null());
        let up = poll_until(Duration::from_secs(120), Duration::from_millis(100), || {
            workers(mark, None).len() >= 6
        });
        std::thread::sleep(Duration::from_secs(2));
        if up.is_none() {
            herd.kill();
            herd.finish();
            kill_marked(mark);
            return None;
        }
        Some(herd)
    };
    // A link brought back up: wait until the node answers again before the next run.
    let heal = || {
        tb.link_up(2);
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            tb.ssh(2, "true").status.success()
        });
    };
    // [to first worker, to all six, backoff, attempt_started -> six workers, cut -> failed]
    let mut with_spare: Vec<[f64; 5]> = Vec::new();
    let mut without: Vec<f64> = Vec::new();
    let mut timeline = Vec::new();
    for rep in 0..reps {
        let mark = format!("BENCH_MARK=spare-{rep}-{}", std::process::id());
        let config = torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, restart);
        let text = std::fs::read_to_string(&config)
            .unwrap()
            .replace("nproc_per_node = 2", "nproc_per_node = 2\nnnodes = 3");
        std::fs::write(&config, text).unwrap();
        let config = config.display().to_string();
        let Some(herd) = train(&["run", "-c", &config], &mark) else {
            println!("run {rep}: training did not start");
            continue;
        };
        let cut_wall = std::time::SystemTime::now();
        let cut = Instant::now();
        tb.link_down(2);
        let first = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
            !workers(&mark, Some("HERD_ATTEMPT=1")).is_empty()
        });
        let all = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
            workers(&mark, Some("HERD_ATTEMPT=1")).len() >= 6
        });
        kill_marked(&mark);
        let m = herd.finish();
        heal();
        let ev = run_events(&dir.path().join("logs"));
        let promoted = ev.iter().any(|e| e["event"] == "spare_promoted" && e["host"] == spare_host.as_str());
        let (Some(first), Some(all), Some(started), true) =
            (first, all, event_time(&ev, "attempt_started", 1), promoted)
        else {
            println!("run {rep}: attempt 1 did not come up on the spare (herd ok: {})", m.success);
            continue;
        };
        let delay = backoff_drawn(&ev);
        let all_s = (all - cut).as_secs_f64();
        let failed = event_time(&ev, "attempt_failed", 0).map_or(f64::NAN, |t| since(t, cut_wall));
        with_spare.push([
            (first - cut).as_secs_f64(),
            all_s,
            delay,
            all_s - since(started, cut_wall),
            failed,
        ]);
        println!("run {rep}: cut to all six on the spare {all_s:.2} s");
        if rep + 1 == reps {
            timeline = timeline_rows(&ev, cut_wall);
            timeline.push(format!("| +{all_s:.2} s | attempt 1's six workers exist |"));
        }

        let mark = format!("BENCH_MARK=nospare-{rep}-{}", std::process::id());
        let config = torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, restart).display().to_string();
        let Some(mut herd) = train(&["run", "-c", &config, "--exclude", &spare_host], &mark) else {
            println!("run {rep}, without a spare: training did not start");
            continue;
        };
        let cut = Instant::now();
        tb.link_down(2);
        let ended = poll_until(Duration::from_secs(180), Duration::from_millis(50), || herd.try_done());
        herd.finish();
        heal();
        kill_marked(&mark);
        if let Some(t) = ended {
            without.push((t - cut).as_secs_f64());
        }
    }
    println!("\n### A node lost for good: torchrun 3 nodes x 2, heartbeat_timeout 6 s, backoff 1 s (+-20 %), with the preflight ({} runs)\n", with_spare.len());
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- spare`\n");
    println!("| from the cut | median s | spread s |");
    println!("|---|---|---|");
    for (i, what) in [
        "with a spare: to attempt 1's first worker running",
        "with a spare: to all six workers running, on the spare and the two others",
        "with a spare: backoff drawn",
        "with a spare: attempt 1 started to its six workers (torchrun start-up)",
        "with a spare: to attempt 0 declared failed",
    ]
    .iter()
    .enumerate()
    {
        let (m, s, _) = fmt_stat(&with_spare.iter().map(|r| r[i]).collect::<Vec<_>>(), 2);
        println!("| {what} | {m} | {s} |");
    }
    let (m, s, _) = fmt_stat(&without, 2);
    println!("| without a spare (today): to herd giving up, restart.node_wait = 30 s | {m} | {s} |");
    let goal: Vec<f64> = with_spare.iter().map(|r| (6.0 + r[2] + 3.0 + r[3]) - r[1]).collect();
    let (m, s, _) = fmt_stat(&goal, 2);
    println!("| goal margin: heartbeat 6 s + backoff + 3 s + torchrun start-up, minus the time to all six (> 0 meets it) | {m} | {s} |");
    println!(
        "\nThe last run with a spare, from the cut:\n\n| time | event |\n|---|---|\n{}",
        timeline.join("\n")
    );
}

/// Scenario 10: every rank's stack when a job hangs. N nodes x R ranks, each rank a Python
/// process asleep (a `command` job whose ranks carry RANK and LOCAL_RANK, as torchrun's
/// workers do), no line ever matching `progress_pattern`: the hang is found after
/// `hang_timeout`, and herd collects every rank's py-spy dump before the teardown. Measured:
/// from the end of the hang timeout to the teardown (the probe, processes and stacks), and
/// how many ranks got a stack. All N nodes share this machine's 2 cores: on a cluster each
/// node's 8 dumps run on its own cores. `BENCH_STACKS_SPY=real,stub` also runs each size with
/// a stub `py-spy` first on the ranks' PATH, which prints a canned dump at once: herd's own
/// part (the probe's fan-out, the agents' messages, the files and the summary) without
/// py-spy's CPU, which a cluster spreads over its nodes.
fn stacks() {
    let reps = runs(3);
    let sizes: Vec<(usize, usize)> = std::env::var("BENCH_STACKS")
        .unwrap_or_else(|_| "8x8,64x8".into())
        .split(',')
        .filter_map(|s| s.split_once('x').and_then(|(n, r)| Some((n.parse().ok()?, r.parse().ok()?))))
        .collect();
    let spies: Vec<String> = std::env::var("BENCH_STACKS_SPY")
        .unwrap_or_else(|_| "real".into())
        .split(',')
        .map(String::from)
        .collect();
    let venv = herd_support::torch_venv();
    let most = sizes.iter().map(|s| s.0).max().unwrap_or(1);
    let tb = Testbed::new(most);
    let dir = tempfile::tempdir().unwrap();
    let stub = dir.path().join("stub-bin");
    std::fs::create_dir_all(&stub).unwrap();
    let spy = stub.join("py-spy");
    // Called as `py-spy dump --full-filenames --pid PID`.
    let canned = "printf 'Process %s: python3\\nPython v3.11.2\\n\\nThread %s (idle): \"MainThread\"\\n    <module> (/bench/rank.py:2)\\n' \"$4\" \"$4\"";
    std::fs::write(&spy, format!("#!/bin/sh\n{canned}\n")).unwrap();
    std::fs::set_permissions(&spy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    const HANG: u64 = 30;
    println!("\n### Every rank's stack on a hang: N nodes x R sleeping Python ranks, hang_timeout {HANG} s ({reps} runs each)\n");
    let size_list = sizes.iter().map(|(n, r)| format!("{n}x{r}")).collect::<Vec<_>>().join(",");
    println!("Rerun: `BENCH_RUNS={reps} BENCH_STACKS={size_list} BENCH_STACKS_SPY={} cargo bench --bench herd_bench -- stacks`\n", spies.join(","));
    println!("| N x R | py-spy | probe and stacks, from the hang timeout to the teardown: median s | spread s | ranks with a stack (all runs) | groups |");
    println!("|---|---|---|---|---|---|");
    for ((n, per), spy) in sizes.iter().flat_map(|size| spies.iter().map(move |spy| (*size, spy))) {
        let hosts: Vec<String> = tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect();
        let ranks = format!(
            "i=0; while [ $i -lt {per} ]; do RANK=$((NODE_RANK * {per} + i)) LOCAL_RANK=$i python3 -c 'import time\nwhile True: time.sleep(60)' & i=$((i + 1)); done; wait"
        );
        let job = format!(
            // nproc_per_node: the plan's ranks are the ones the command starts.
            "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", {}]\nnproc_per_node = {per}\nsetup = \"export PATH={}{}/bin:$PATH\"",
            toml_str(&ranks),
            if spy == "stub" { format!("{}:", stub.display()) } else { String::new() },
            venv.display()
        );
        let extra = format!("[restart]\nmax_restarts = 0\nhang_timeout = \"{HANG}s\"\nprogress_pattern = \"^never$\"\ngrace_period = \"2s\"\n");
        let (mut took, mut got, mut groups) = (Vec::new(), 0usize, String::new());
        for _ in 0..reps {
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            let config = write_config(&tb, dir.path(), &hosts, &job, &extra).display().to_string();
            let herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
            let _ = herd.finish();
            let ev = run_events(&dir.path().join("logs"));
            let (Some(started), Some(teardown)) =
                (event_time(&ev, "attempt_started", 0), event_time(&ev, "teardown_started", 0))
            else {
                println!("a run did not hang as planned");
                continue;
            };
            took.push(since(teardown, started) - HANG as f64);
            if let Some(s) = ev.iter().find(|e| e["event"] == "stacks_summarized") {
                got += s["groups"]
                    .as_array()
                    .map_or(0, |g| g.iter().map(|g| g["ranks"].as_array().map_or(0, Vec::len)).sum());
                groups = s["groups"].as_array().map_or(0, Vec::len).to_string();
            }
        }
        let (m, sp, _) = fmt_stat(&took, 2);
        println!("| {n} x {per} | {spy} | {m} | {sp} | {got} of {} | {groups} |", n * per * reps);
    }
}

/// The backoff herd drew for the first restart, in seconds (0 without one).
fn backoff_drawn(ev: &[serde_json::Value]) -> f64 {
    let scheduled = ev.iter().find(|e| e["event"] == "restart_scheduled");
    scheduled.and_then(|e| e["delay_ms"].as_u64()).unwrap_or(0) as f64 / 1000.0
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

/// events.jsonl after `from`, as table rows `| +t s | event detail |`.
fn timeline_rows(ev: &[serde_json::Value], from: std::time::SystemTime) -> Vec<String> {
    ev.iter()
        .filter_map(|e| {
            let t = humantime::parse_rfc3339(e["ts"].as_str()?).ok()?;
            let dt = t.duration_since(from).ok()?.as_secs_f64();
            let mut detail = e["event"].as_str()?.to_string();
            for key in [
                "node_rank",
                "host",
                "millis",
                "attempt",
                "exit_code",
                "signal",
                "lost",
                "reason",
                "class",
                "delay_ms",
            ] {
                if let Some(v) = e.get(key) {
                    detail.push_str(&format!(" {key}={v}"));
                }
            }
            Some(format!("| +{dt:.2} s | {} |", detail.replace('|', "\\|")))
        })
        .collect()
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

/// Scenario 6: every node prints L lines (`seq 1 L`) as fast as it can; the launcher's stdout
/// goes to a file. Lines per second, launcher CPU, peak RSS, and every line counted.
fn logs() {
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

/// What each node runs for scenario 8: RANKS ranks, each `python3 -u` printing L lines with
/// plain print() (tests/fixtures/ranks_print.py: text and newline are two writes). Under
/// herd (NODE_RANK and HERD_RANK_WRAPPER set) each rank starts through the rank wrapper, as
/// torchrun's workers do; under pdsh the node finds its rank from its place in the host list.
/// With `torch` as $4, torchrun starts them (pdsh only: herd starts torchrun itself).
const RANKS_SH: &str = r#"per=$1 n=$2 hosts=$3
node=${NODE_RANK-}
if [ -z "$node" ]; then
  me=${SSH_CONNECTION#* * }; me=${me% *}
  node=$(($(grep -nx "$me" "$hosts" | cut -d: -f1) - 1))
fi
if [ "${4-}" = torch ]; then
  PATH=$5/bin:$PATH exec torchrun --nnodes "$(wc -l < "$hosts")" --nproc-per-node "$per" --node-rank "$node" \
    --master-addr "$(head -n 1 "$hosts")" --master-port "$6" "$7" "$n"
fi
l=0
while [ "$l" -lt "$per" ]; do
  if [ -n "${HERD_RANK_WRAPPER-}" ]; then
    RANK=$((node * per + l)) LOCAL_RANK=$l "$HERD_RANK_WRAPPER" 0 python3 -u "$7" "$n" &
  else
    RANK=$((node * per + l)) LOCAL_RANK=$l python3 -u "$7" "$n" &
  fi
  l=$((l + 1))
done
wait
"#;

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
        None => {
            who.parse::<usize>().ok()?;
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

/// Scenario 8 (issue 13): N nodes x R ranks, every rank printing L lines with plain print()
/// at once. Lines/s, herd's peak RSS, and a checker's count of malformed, lost, duplicated and
/// misnamed lines, on stdout and (herd) in the per-rank files.
fn ranks() {
    let reps = runs(3);
    let parse = |var: &str, default: &str| -> Vec<(usize, usize, usize)> {
        std::env::var(var)
            .unwrap_or_else(|_| default.into())
            .split(',')
            .filter(|s| !s.is_empty())
            .filter_map(|s| {
                let v: Vec<usize> = s.split('x').filter_map(|x| x.parse().ok()).collect();
                (v.len() == 3).then(|| (v[0], v[1], v[2]))
            })
            .collect()
    };
    let plain = parse("BENCH_RANKS", "64x8x2000,64x8x10000");
    let torch = parse("BENCH_RANKS_TORCH", "8x8x2000");
    let most = plain.iter().chain(&torch).map(|s| s.0).max().unwrap_or(1);
    let tb = Testbed::new(most);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("ranks.sh");
    std::fs::write(&script, RANKS_SH).unwrap();
    let fixture = format!("{}/tests/fixtures/ranks_print.py", env!("CARGO_MANIFEST_DIR"));
    let venv = (!torch.is_empty()).then(herd_support::torch_venv);
    let ssh_append = ssh_args(&tb)[..ssh_args(&tb).len() - 2].join(" ");
    std::env::set_var("PDSH_SSH_ARGS_APPEND", &ssh_append);
    println!("\n### Every rank printing at once: N nodes x R ranks, each rank L lines of plain print() under python3 -u; stdout to a file ({reps} runs each, alternating)\n");
    println!(
        "Rerun: `BENCH_RUNS={reps} BENCH_RANKS={} BENCH_RANKS_TORCH={} cargo bench --bench herd_bench -- ranks`\n",
        plain.iter().map(|(n, r, l)| format!("{n}x{r}x{l}")).collect::<Vec<_>>().join(","),
        torch.iter().map(|(n, r, l)| format!("{n}x{r}x{l}")).collect::<Vec<_>>().join(",")
    );
    println!("| N x R x L | ranks start by | launcher | lines/s median | spread | ratio to pdsh | launcher CPU s | launcher peak RSS MiB | malformed / lost / duplicated / misnamed on stdout (all runs) | same in the rank files |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let sizes = plain.iter().map(|&s| (s, false)).chain(torch.iter().map(|&s| (s, true)));
    for (rep_size, ((n, per, lines), with_torch)) in sizes.enumerate() {
        let hosts: Vec<String> = tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect();
        let hosts_file = dir.path().join("hosts");
        std::fs::write(&hosts_file, hosts.join("\n") + "\n").unwrap();
        let port = 29700 + rep_size as u16;
        let remote = format!(
            "sh {} {per} {lines} {} {} {} {port} {fixture}",
            script.display(),
            hosts_file.display(),
            if with_torch { "torch" } else { "-" },
            venv.as_ref().map_or("-".into(), |v| v.display().to_string()),
        );
        let job = if with_torch {
            format!(
                "launcher = \"torchrun\"\nscript = \"{fixture}\"\nargs = [\"{lines}\"]\nnproc_per_node = {per}\nsetup = \"source {}/bin/activate\"",
                venv.as_ref().unwrap().display()
            )
        } else {
            format!(
                "launcher = \"command\"\nscript = \"sh\"\nargs = [\"{}\", \"{per}\", \"{lines}\", \"{}\", \"-\", \"-\", \"0\", \"{fixture}\"]",
                script.display(),
                hosts_file.display()
            )
        };
        let extra = if with_torch { "[rendezvous]\ninterface = \"eth0\"\n" } else { "" };
        let config = write_config(&tb, dir.path(), &hosts, &job, extra).display().to_string();
        let names = ["pdsh -R ssh -f 64", "herd run --no-preflight"];
        let mut res: Vec<Vec<(Measured, RankCheck, RankCheck)>> = vec![vec![]; names.len()];
        for _ in 0..reps {
            for (i, name) in names.iter().enumerate() {
                let out_path = dir.path().join("out.txt");
                let out = std::fs::File::create(&out_path).unwrap();
                let _ = std::fs::remove_dir_all(dir.path().join("logs"));
                let t = if i == 0 {
                    Tracked::spawn(
                        "pdsh",
                        &["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(","), &remote],
                        out.into(),
                    )
                } else {
                    Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], out.into())
                };
                let m = t.finish();
                assert!(m.success, "{name} failed");
                let data = std::fs::read(&out_path).unwrap();
                let ranks = n * per;
                let stdout = if i == 0 {
                    // pdsh's stderr (the `done` lines, torchrun's own) is not in the file.
                    check_ranks(&data, ranks, lines, pdsh_split, |_, _| false)
                } else {
                    check_ranks(&data, ranks, lines, herd_split, |named, p| {
                        // The fixture's last line; the launcher's own lines (torchrun's warnings).
                        (named.is_some() && done_line(p)) || (named.is_none() && with_torch)
                    })
                };
                let files = if i == 1 {
                    let attempt = herd_support::only_run_dir(&dir.path().join("logs")).join("attempt-0");
                    let mut all = RankCheck::default();
                    for r in 0..ranks {
                        let text = std::fs::read(attempt.join(format!("rank{r}.log"))).unwrap_or_default();
                        let mut c =
                            check_ranks(&text, ranks, lines, |l| Some((Some(r), l)), |_, p| done_line(p));
                        // Each file holds one rank: what it lacks is the rank's own lines.
                        c.lost = c.lost.saturating_sub((ranks - 1) * lines);
                        all.add(c);
                    }
                    all
                } else {
                    RankCheck::default()
                };
                res[i].push((m, stdout, files));
            }
        }
        let total = (n * per * lines) as f64;
        let rate = |ms: &[(Measured, RankCheck, RankCheck)]| -> Vec<f64> {
            ms.iter().map(|r| total / r.0.wall.as_secs_f64()).collect()
        };
        let pdsh_rate = fmt_stat(&rate(&res[0]), 0).2;
        let sum = |cs: &mut dyn Iterator<Item = RankCheck>| {
            let mut t = RankCheck::default();
            cs.for_each(|c| t.add(c));
            format!("{} / {} / {} / {}", t.malformed, t.lost, t.duplicated, t.misnamed)
        };
        for (i, name) in names.iter().enumerate() {
            let (m, s, v) = fmt_stat(&rate(&res[i]), 0);
            let own = fmt_stat(&res[i].iter().map(|r| r.0.self_cpu.as_secs_f64()).collect::<Vec<_>>(), 2).0;
            let rss =
                fmt_stat(&res[i].iter().map(|r| r.0.self_hwm_kib as f64 / 1024.0).collect::<Vec<_>>(), 1).0;
            let files = if i == 1 { sum(&mut res[i].iter().map(|r| r.2)) } else { "-".into() };
            println!(
                "| {n} x {per} x {lines} | {} | {name} | {m} | {s} | {:.2} | {own} | {rss} | {} | {files} |",
                if with_torch { "torchrun" } else { "a shell loop" },
                v / pdsh_rate,
                sum(&mut res[i].iter().map(|r| r.1)),
            );
        }
    }
}

/// Scenario 7: a job on N nodes that prints a line a second for S seconds. Launcher CPU over
/// the whole run, and in the steady state (from 20 s after the start to 5 s before the end).
fn idle() {
    let reps = runs(3);
    let n = env_usize("BENCH_IDLE_NODES", 64);
    let secs = env_usize("BENCH_IDLE_SECS", 60);
    let tb = Testbed::new(n);
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    let script = format!("i=0; while [ $i -lt {secs} ]; do echo tick $i; i=$((i+1)); sleep 1; done");
    let job = format!("launcher = \"command\"\nscript = \"bash\"\nargs = [\"-c\", \"{script}\"]");
    let config = write_config(&tb, dir.path(), &hosts, &job, "");
    let config = config.display().to_string();
    let ssh_append = ssh_args(&tb)[..ssh_args(&tb).len() - 2].join(" ");
    std::env::set_var("PDSH_SSH_ARGS_APPEND", &ssh_append);
    let window = (Duration::from_secs(20), Duration::from_secs(secs.saturating_sub(5) as u64));
    let names = ["pdsh -R ssh -f 64", "herd run --no-preflight", "herd run"];
    // Per launcher: (whole-run tree CPU %, whole-run own CPU %, steady tree %, steady own %, RSS MiB).
    let mut res: Vec<Vec<[f64; 5]>> = vec![vec![]; names.len()];
    for _ in 0..reps {
        for (i, _) in names.iter().enumerate() {
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            let t = match i {
                0 => Tracked::spawn(
                    "pdsh",
                    &["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(","), &script],
                    Stdio::null(),
                ),
                1 => Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null()),
                _ => Tracked::spawn(HERD, &["run", "-c", &config], Stdio::null()),
            };
            std::thread::sleep(window.0.saturating_sub(t.started.elapsed()));
            let a = (t.started.elapsed(), t.cpu_now());
            std::thread::sleep(window.1.saturating_sub(t.started.elapsed()));
            let b = (t.started.elapsed(), t.cpu_now());
            let m = t.finish();
            let pct = |cpu: Duration, wall: Duration| 100.0 * cpu.as_secs_f64() / wall.as_secs_f64();
            let steady = b.0 - a.0;
            res[i].push([
                m.tree_cpu.map_or(f64::NAN, |c| pct(c, m.wall)),
                pct(m.self_cpu, m.wall),
                match (a.1 .1, b.1 .1) {
                    (Some(x), Some(y)) => pct(y - x, steady),
                    _ => f64::NAN,
                },
                pct(b.1 .0 - a.1 .0, steady),
                m.self_hwm_kib as f64 / 1024.0,
            ]);
        }
    }
    println!("\n### Idle cost: {n} nodes, a line a second for {secs} s ({reps} runs each, alternating)\n");
    println!("Rerun: `BENCH_RUNS={reps} BENCH_IDLE_NODES={n} BENCH_IDLE_SECS={secs} cargo bench --bench herd_bench -- idle`\n");
    println!(
        "CPU in % of one core: whole run, and steady state ({}-{} s after the start). Median (spread).\n",
        window.0.as_secs(),
        window.1.as_secs()
    );
    println!("| launcher | tree, whole run | launcher alone, whole run | tree, steady | launcher alone, steady | launcher peak RSS MiB |");
    println!("|---|---|---|---|---|---|");
    for (i, name) in names.iter().enumerate() {
        let cols: Vec<String> = (0..5)
            .map(|c| {
                let (m, s, _) =
                    fmt_stat(&res[i].iter().map(|r| r[c]).collect::<Vec<_>>(), if c == 4 { 1 } else { 2 });
                format!("{m} ({s})")
            })
            .collect();
        println!("| {name} | {} |", cols.join(" | "));
    }
}
