//! Issues 28 and 42: what a container costs per attempt. torchrun 3 nodes x 2 without a
//! container, in podman's (rootful) and in docker's (one dockerd per node, as
//! tests/integration/engines.rs runs them), with the test image from
//! scripts/container-image.sh and the venv mounted, alternating, `--no-preflight`: from herd's
//! start to the first worker; then a worker SIGKILLed 2 s after all six run, to attempt 1's
//! six workers, minus the backoff.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::docker_support::Daemons;
use super::herd_support::{self, HERD};
use super::job::{
    add_job_line, backoff_drawn, event_time, kill_marked, kill_rank_3, run_events, signal, since,
    torch_config, train_then_retry, training, workers, ONE_RESTART,
};
use super::measure::{column, fmt_stat, poll_until, rounds, runs, table, Tracked};
use super::testbed::Testbed;

/// The rows of the table, a run's numbers in this order.
const ROWS: [&str; 4] = [
    "herd's start to the first worker",
    "a worker's SIGKILL to attempt 1's six workers, minus the backoff",
    "attempt 1 started to its six workers",
    "backoff drawn",
];

pub fn run() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let image = image();
    let variants = [
        ("without a container", String::new()),
        ("podman", table_of("podman", &image, &venv)),
        ("docker", table_of("docker", &image, &venv)),
    ];
    let tb = Testbed::new(3);
    let daemons = Daemons::start(&tb, &image, &[0, 1, 2]);
    let dir = tempfile::tempdir().unwrap();
    let mut rows: Vec<Vec<[f64; 4]>> = vec![Vec::new(); variants.len()];
    for (rep, v) in rounds(reps, variants.len()) {
        let mark = format!("BENCH_MARK=container-{v}-{rep}-{}", std::process::id());
        let extra = format!("{ONE_RESTART}\n{}", variants[v].1);
        let config = torch_config(&tb, dir.path(), &venv, &train_then_retry(), &mark, &extra);
        // A CPU job, as the test cluster's: with GPUs herd would pass `--ulimit memlock=-1`,
        // which replaces podman's default ulimits (docs/guide/containers.md).
        add_job_line(&config, "device = \"cpu\"");
        match attempts(&config, dir.path(), &mark) {
            Ok(row) => rows[v].push(row),
            Err(what) => println!("run {rep}, {}: {what}", variants[v].0),
        }
    }
    let left = Command::new("podman").args(["ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
    let left_docker = daemons.names();
    drop(daemons);
    println!(
        "\n### A container per attempt: torchrun 3 nodes x 2, podman and docker, --no-preflight ({} runs each)\n",
        rows[0].len()
    );
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- container`\n");
    table(
        "| per attempt | without a container: median s | spread s | podman: median s | spread s | ratio | docker: median s | spread s | ratio |",
    );
    for (i, what) in ROWS.iter().enumerate() {
        let (m0, s0, x0) = fmt_stat(&column(&rows[0], i), 2);
        let mut line = format!("| {what} | {m0} | {s0} |");
        for r in &rows[1..] {
            let (m, s, x) = fmt_stat(&column(r, i), 2);
            line.push_str(&format!(" {m} | {s} | {:.2} |", x / x0));
        }
        println!("{line}");
    }
    println!("\nContainers left in podman's store: {:?}", String::from_utf8_lossy(&left.stdout).trim());
    println!("Containers left in the nodes' docker daemons: {left_docker:?}");
}

/// The test image (built if need be), as podman names it; docker's daemons load it.
fn image() -> String {
    let out =
        Command::new(format!("{}/scripts/container-image.sh", env!("CARGO_MANIFEST_DIR"))).output().unwrap();
    assert!(out.status.success(), "container-image.sh: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The `[container]` table: `runtime`, the test image, the venv mounted and the Python it
/// links to unless it is the image's own /usr.
fn table_of(runtime: &str, image: &str, venv: &Path) -> String {
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap();
    let home = cfg.lines().find_map(|l| l.strip_prefix("home = ")).expect("home in pyvenv.cfg");
    let prefix = Path::new(home.trim()).parent().unwrap().to_path_buf();
    let mut mounts = vec![format!("\"{0}:{0}:ro\"", venv.display())];
    if prefix != Path::new("/usr") {
        mounts.push(format!("\"{0}:{0}:ro\"", prefix.display()));
    }
    format!("[container]\nruntime = \"{runtime}\"\nimage = \"{image}\"\nmounts = [{}]\n", mounts.join(", "))
}

/// One run: attempt 0 from herd's start, then a restart; its row of `ROWS`, or what went wrong.
fn attempts(config: &Path, dir: &Path, mark: &str) -> Result<[f64; 4], &'static str> {
    let config = config.display().to_string();
    let herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
    let first = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
        !workers(mark, Some("HERD_ATTEMPT=0")).is_empty()
    });
    let all = training(mark, Some("HERD_ATTEMPT=0"));
    let (Some(first), Some(_)) = (first, all) else {
        signal(herd.pid(), "-INT");
        herd.finish();
        kill_marked(mark);
        return Err("training did not start");
    };
    let first = (first - herd.started).as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let r = kill_rank_3(mark);
    signal(herd.pid(), "-INT");
    herd.finish();
    kill_marked(mark);
    let ev = run_events(&dir.join("logs"));
    let Some(up) = r.up else { return Err("attempt 1 did not come up") };
    let delay = backoff_drawn(&ev);
    let restart = (up - r.killed).as_secs_f64();
    let started = event_time(&ev, "attempt_started", 1);
    let attempt_1 = started.map_or(f64::NAN, |t| restart - since(t, r.killed_wall));
    Ok([first, restart - delay, attempt_1, delay])
}
