//! Scenario 7: a job on N nodes that prints a line a second for S seconds. Launcher CPU over
//! the whole run, and in the steady state (from 20 s after the start to 5 s before the end).

use std::process::Stdio;
use std::time::Duration;

use super::herd_support::HERD;
use super::job::{clear_logs, hosts, pdsh_args, pdsh_ssh_append, write_config};
use super::measure::{column, env_usize, fmt_stat, runs, table, Tracked};
use super::testbed::Testbed;

const NAMES: [&str; 3] = ["pdsh -R ssh -f 64", "herd run --no-preflight", "herd run"];

pub fn run() {
    let reps = runs(3);
    let n = env_usize("BENCH_IDLE_NODES", 64);
    let secs = env_usize("BENCH_IDLE_SECS", 60);
    let tb = Testbed::new(n);
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts(&tb, n);
    let script = format!("i=0; while [ $i -lt {secs} ]; do echo tick $i; i=$((i+1)); sleep 1; done");
    let job = format!("launcher = \"command\"\nscript = \"bash\"\nargs = [\"-c\", \"{script}\"]");
    let config = write_config(&tb, dir.path(), &hosts, &job, "");
    let config = config.display().to_string();
    std::env::set_var("PDSH_SSH_ARGS_APPEND", pdsh_ssh_append(&tb));
    let window = (Duration::from_secs(20), Duration::from_secs(secs.saturating_sub(5) as u64));
    // Per launcher: (whole-run tree CPU %, whole-run own CPU %, steady tree %, steady own %, RSS MiB).
    let mut res: Vec<Vec<[f64; 5]>> = vec![vec![]; NAMES.len()];
    for _ in 0..reps {
        for (i, got) in res.iter_mut().enumerate() {
            clear_logs(dir.path());
            let t = match i {
                0 => Tracked::spawn("pdsh", &pdsh_args(&hosts, &script), Stdio::null()),
                1 => Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null()),
                _ => Tracked::spawn(HERD, &["run", "-c", &config], Stdio::null()),
            };
            got.push(cpu_shares(t, window));
        }
    }
    println!("\n### Idle cost: {n} nodes, a line a second for {secs} s ({reps} runs each, alternating)\n");
    println!("Rerun: `BENCH_RUNS={reps} BENCH_IDLE_NODES={n} BENCH_IDLE_SECS={secs} cargo bench --bench herd_bench -- idle`\n");
    println!(
        "CPU in % of one core: whole run, and steady state ({}-{} s after the start). Median (spread).\n",
        window.0.as_secs(),
        window.1.as_secs()
    );
    table("| launcher | tree, whole run | launcher alone, whole run | tree, steady | launcher alone, steady | launcher peak RSS MiB |");
    for (i, name) in NAMES.iter().enumerate() {
        let cols: Vec<String> = (0..5)
            .map(|c| {
                let (m, s, _) = fmt_stat(&column(&res[i], c), if c == 4 { 1 } else { 2 });
                format!("{m} ({s})")
            })
            .collect();
        println!("| {name} | {} |", cols.join(" | "));
    }
}

/// A launcher's CPU in % of a core, over the whole run and in `window` (seconds after its
/// start), of its tree and of itself alone, and its peak RSS in MiB.
fn cpu_shares(t: Tracked, window: (Duration, Duration)) -> [f64; 5] {
    std::thread::sleep(window.0.saturating_sub(t.started.elapsed()));
    let a = (t.started.elapsed(), t.cpu_now());
    std::thread::sleep(window.1.saturating_sub(t.started.elapsed()));
    let b = (t.started.elapsed(), t.cpu_now());
    let m = t.finish();
    let pct = |cpu: Duration, wall: Duration| 100.0 * cpu.as_secs_f64() / wall.as_secs_f64();
    let steady = b.0 - a.0;
    [
        m.tree_cpu.map_or(f64::NAN, |c| pct(c, m.wall)),
        pct(m.self_cpu, m.wall),
        match (a.1 .1, b.1 .1) {
            (Some(x), Some(y)) => pct(y - x, steady),
            _ => f64::NAN,
        },
        pct(b.1 .0 - a.1 .0, steady),
        m.self_hwm_kib as f64 / 1024.0,
    ]
}
