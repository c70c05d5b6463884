//! Issue 28: what a container costs per attempt. torchrun 3 nodes x 2 with and without
//! `[container]` (rootful podman, the test image from scripts/container-image.sh, the venv
//! mounted), alternating, `--no-preflight`: from herd's start to the first worker; then a
//! worker SIGKILLed 2 s after all six run, to attempt 1's six workers, minus the backoff.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{
    backoff_drawn, environ_has, event_time, kill_marked, run_events, since, torch_config, workers, TRAIN_ON,
};
use super::measure::{fmt_stat, poll_until, runs, Tracked};
use super::testbed::Testbed;

pub fn run() {
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
