//! Scenario 20 (issue 42): N nodes × R ranks, each rank started through herd's rank wrapper
//! (as torchrun's are) printing a 4-line banner that every rank prints alike, then L lines
//! of its own. The console's lines and bytes, and herd's CPU and peak RSS, with the same
//! line from many ranks shown once (`--collapse always`) and without (`never`), alternating.
//! The ranks start as the testbed starts them: over a few seconds, not in one instant.

use super::herd_support::HERD;
use super::job::{clear_logs, hosts, write_config};
use super::measure::{env_dims, fmt_stat, own_cost, runs, table, Measured, Tracked};
use super::testbed::Testbed;

const MODES: [&str; 2] = ["never", "always"];

/// One run: what it cost, and its console's lines, bytes and banner lines.
type Run = (Measured, usize, usize, usize);

const BANNER: [&str; 4] = [
    "*****************************************",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
    "W1206 12:00:00.000000 torch/distributed/run.py:792] please further tune the variable",
    "*****************************************",
];

pub fn run() {
    let reps = runs(3);
    let sizes = env_dims::<3>("BENCH_COLLAPSE", "64x8x10");
    let most = sizes.iter().map(|s| s[0]).max().unwrap_or(1);
    let tb = Testbed::new(most);
    let dir = tempfile::tempdir().unwrap();
    println!("\n### The same line from many ranks: N nodes x R ranks, a 4-line banner alike, then L lines each of their own ({reps} runs each, alternating)\n");
    println!(
        "Rerun: `BENCH_RUNS={reps} BENCH_COLLAPSE=64x8x10 cargo bench --bench herd_bench -- collapse`\n"
    );
    table("| N x R x L | --collapse | lines printed | console lines median | console KiB median | banner lines on the console | herd CPU s | herd peak RSS MiB | wall s |");
    for [n, per, lines] in sizes {
        let banner: String = BANNER.iter().map(|l| format!("echo \"{l}\"; ")).collect();
        let rank = format!(
            "{banner}i=0; while [ $i -lt {lines} ]; do i=$((i + 1)); echo \"rank $RANK line $i\"; done"
        );
        let node = format!(
            "i=0; while [ $i -lt {per} ]; do \
             RANK=$((NODE_RANK * {per} + i)) LOCAL_RANK=$i \"$HERD_RANK_WRAPPER\" 0 sh -c \"$0\" & \
             i=$((i + 1)); done; wait"
        );
        let job = format!("launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", '{node}', '{rank}']");
        let config = write_config(&tb, dir.path(), &hosts(&tb, n), &job, "").display().to_string();
        let mut res: Vec<Vec<Run>> = vec![vec![]; MODES.len()];
        for _ in 0..reps {
            for (i, mode) in MODES.iter().enumerate() {
                clear_logs(dir.path());
                let out_path = dir.path().join("out.txt");
                let out = std::fs::File::create(&out_path).unwrap();
                let args = ["run", "--no-preflight", "--collapse", mode, "-c", &config];
                let m = Tracked::spawn(HERD, &args, out.into()).finish();
                assert!(m.success, "herd --collapse {mode} failed");
                let text = std::fs::read_to_string(&out_path).unwrap();
                let banner = text.lines().filter(|l| BANNER.iter().any(|b| l.ends_with(b))).count();
                let own = text.lines().filter(|l| l.contains(" line ")).count();
                assert_eq!(own, n * per * lines, "--collapse {mode}: every rank's own lines");
                res[i].push((m, text.lines().count(), text.len(), banner));
            }
        }
        let printed = n * per * (lines + BANNER.len());
        for (i, mode) in MODES.iter().enumerate() {
            let median = |f: &dyn Fn(&Run) -> f64, digits| {
                fmt_stat(&res[i].iter().map(f).collect::<Vec<_>>(), digits).0
            };
            let measured: Vec<&Measured> = res[i].iter().map(|r| &r.0).collect();
            let (cpu, rss) = own_cost(&measured);
            println!(
                "| {n} x {per} x {lines} | {mode} | {printed} | {} | {} | {} | {cpu} | {rss} | {} |",
                median(&|r| r.1 as f64, 0),
                median(&|r| r.2 as f64 / 1024.0, 0),
                median(&|r| r.3 as f64, 0),
                median(&|r| r.0.wall.as_secs_f64(), 2),
            );
        }
    }
}
