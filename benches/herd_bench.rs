//! herd against its baselines on the namespace testbed (every node a real sshd in its own
//! namespace). Not part of the test run. Needs root and the torch virtualenv. With no name,
//! every scenario runs, in this order; `-- --help` lists them.
//!
//!     cargo bench --bench herd_bench -- fanout      # launch fan-out, 8/32/64 nodes, vs pdsh and ssh &
//!     cargo bench --bench herd_bench -- slow-logins # fan-out at 64 nodes whose login shell takes 1 s, vs pdsh; logins per node
//!                                                   # (BENCH_JOB=python: `python3 -c pass` on every node instead of `true`)
//!     cargo bench --bench herd_bench -- teardown    # one rank SIGKILLed -> every process gone
//!     cargo bench --bench herd_bench -- first-rank  # torchrun on 3 nodes: start -> first worker process
//!     cargo bench --bench herd_bench -- partition   # a node's link cut -> attempt failed, others stopped
//!     cargo bench --bench herd_bench -- restart     # a rank SIGKILLed -> next attempt's workers all up
//!     cargo bench --bench herd_bench -- spare       # a node cut for good, 3 x 2 and a spare -> workers up on the spare; vs none
//!     cargo bench --bench herd_bench -- stacks      # a hang on N nodes x R ranks -> every rank's stack, before the teardown
//!     cargo bench --bench herd_bench -- logs        # N nodes x L lines as fast as they go, vs pdsh and ssh | sed
//!     cargo bench --bench herd_bench -- idle        # 64 nodes, a line a second for 60 s: launcher CPU
//!     cargo bench --bench herd_bench -- ranks       # 64 nodes x 8 ranks printing at once, vs pdsh: whole lines, counted
//!     cargo bench --bench herd_bench -- slurm       # 3 nodes through srun vs ssh: fan-out, and torchrun's first rank
//!     cargo bench --bench herd_bench -- node-share  # `true` on 1 node, --no-preflight, vs a bare `ssh node true`
//!     cargo bench --bench herd_bench -- slurm-steps # 8/16/32 slurmds: one step for the fleet vs a step per node
//!     cargo bench --bench herd_bench -- scale       # `true` on 16 to 252 nodes of one sshd: herd's descriptors, RSS, CPU a node
//!     cargo bench --bench herd_bench -- deep        # `herd doctor --deep` vs `herd doctor`, 3 and 64 nodes
//!     cargo bench --bench herd_bench -- container   # torchrun 3 x 2 without a container, in podman and in docker: first worker, restart
//!     cargo bench --bench herd_bench -- checkpoint  # SIGUSR1 to herd -> every rank checkpointed and gone, herd's exit
//!     cargo bench --bench herd_bench -- restart-scale # a command job on 16/64/252 nodes, one fails -> every node running again
//!     cargo bench --bench herd_bench -- collapse    # 64 nodes x 8 ranks printing a banner alike: console lines, --collapse always/never
//!     cargo bench --bench herd_bench -- soak        # goodput through faults one after another: herd vs torchrun elastic
//!                                                   # vs a shell loop (only when named; sizes in scenarios/soak.rs)
//!
//! Sizes (environment): BENCH_RUNS (runs per launcher, default 5; 3 for partition,
//! spare, stacks, logs, idle, ranks and deep; 15 for node-share; 1 for scale;
//! teardown always runs 5), BENCH_LOGS (`NODESxLINES,...`, default `8x1000000,64x20000`),
//! BENCH_IDLE_NODES (64), BENCH_IDLE_SECS (60), BENCH_RANKS (`NODESxRANKSxLINES,...`, default
//! `64x8x2000,64x8x10000`), BENCH_RANKS_TORCH (the same under torchrun, default `8x8x2000`),
//! BENCH_NODES (64) and BENCH_LOGIN_SECS (1) for slow-logins, BENCH_STACKS (`NODESxRANKS,...`,
//! `8x8,64x8`) and BENCH_STACKS_SPY (`real`, `stub`), BENCH_STEPS_NODES (`8,16,32`),
//! BENCH_SCALE (`16,64,128,252`), BENCH_DEEP (`3,64`). A tiny run: `BENCH_RUNS=1 BENCH_LOGS=2x1000 cargo bench --bench herd_bench -- logs`.
//! Launcher CPU is that of the launcher's whole process tree (a cpuacct cgroup, so ssh masters
//! that daemonise are counted), and, for herd and pdsh, of the launcher process alone
//! (/proc/<pid>/stat); peak RSS is the launcher process's VmHWM. BENCH_KEEP_STDERR=1 keeps each
//! launcher's stderr (with RUST_LOG=debug, herd's timed debug log) and prints where;
//! BENCH_TRACE=1 (teardown) prints when each job process was last seen after the kill;
//! BENCH_HERD_WRAP puts a profiler in front of herd (`valgrind --tool=massif ...`, `perf record ...`).
//! BENCH_BASELINE_HERD=PATH (teardown, slow-logins, restart, node-share, scale) also runs another herd binary, e.g. one built from an
//! earlier commit, alternating with this one, for a before/after table from one session.
//! BENCH_HOLD_SECS (node-share, scale) keeps the testbed up afterwards, for a measurement from outside.
//!
//! Runs of herd and its baselines alternate within one session; each table gives the median
//! and the spread (min-max) and the ratio of medians against the baseline. The measuring
//! every scenario shares is in `measure.rs`, the job and its testbed in `job.rs`, and each
//! scenario in `scenarios/<name>.rs`.

#[allow(dead_code)] // what this bench does not use of the tests' support
#[path = "../tests/integration/support/docker.rs"]
mod docker_support;
#[allow(dead_code)] // what this bench does not use of the tests' support
#[path = "../tests/integration/support/herd.rs"]
mod herd_support;
#[allow(dead_code)] // what this bench does not use of the tests' support
#[path = "../tests/integration/support/slurm.rs"]
mod slurm_support;
#[allow(dead_code)] // what this bench does not use of the tests' support
#[path = "../tests/integration/support/soak.rs"]
mod soak_support;
#[allow(dead_code)] // what this bench does not use of the tests' support
#[path = "../tests/integration/support/testbed.rs"]
mod testbed;

mod job;
mod measure;

/// One module a scenario, each with its `run`; a scenario's name on the command line is in
/// `SCENARIOS`.
mod scenarios {
    use super::{docker_support, herd_support, job, measure, slurm_support, soak_support, testbed};

    pub mod checkpoint;
    pub mod collapse;
    pub mod container;
    pub mod deep;
    pub mod fanout;
    pub mod first_rank;
    pub mod idle;
    pub mod logs;
    pub mod node_share;
    pub mod partition;
    pub mod ranks;
    pub mod restart;
    pub mod restart_scale;
    pub mod scale;
    pub mod slow_logins;
    pub mod slurm;
    pub mod slurm_steps;
    pub mod soak;
    pub mod spare;
    pub mod stacks;
    pub mod teardown;
}

/// The log scenario at a given size, for the smoke test (tests/integration/bench_smoke.rs).
pub use scenarios::logs::logs_with;

/// Every scenario: its name on the command line, what it measures (a line of `--help`), and
/// its run. With no name, they all run, in this order.
#[rustfmt::skip] // a table, one scenario a line
const SCENARIOS: &[(&str, &str, fn())] = &[
    ("fanout",      "launch fan-out, 8/32/64 nodes, vs pdsh and ssh &", scenarios::fanout::run),
    ("slow-logins", "fan-out at 64 nodes whose login shell takes 1 s, vs pdsh; logins per node", scenarios::slow_logins::run),
    ("teardown",    "one rank SIGKILLed -> every process gone", scenarios::teardown::run),
    ("first-rank",  "torchrun on 3 nodes: start -> first worker process", scenarios::first_rank::run),
    ("partition",   "a node's link cut -> attempt failed, others stopped", scenarios::partition::run),
    ("restart",     "a rank SIGKILLed -> next attempt's workers all up", scenarios::restart::run),
    ("spare",       "a node cut for good, 3 x 2 and a spare -> workers up on the spare; vs none", scenarios::spare::run),
    ("stacks",      "a hang on N nodes x R ranks -> every rank's stack, before the teardown", scenarios::stacks::run),
    ("logs",        "N nodes x L lines as fast as they go, vs pdsh and ssh | sed", scenarios::logs::run),
    ("idle",        "64 nodes, a line a second for 60 s: launcher CPU", scenarios::idle::run),
    ("ranks",       "64 nodes x 8 ranks printing at once, vs pdsh: whole lines, counted", scenarios::ranks::run),
    ("slurm",       "3 nodes through srun vs ssh: fan-out, and torchrun's first rank", scenarios::slurm::run),
    ("node-share",  "`true` on 1 node, --no-preflight, vs a bare `ssh node true`", scenarios::node_share::run),
    ("slurm-steps", "8/16/32 slurmds: one step for the fleet vs a step per node", scenarios::slurm_steps::run),
    ("scale",       "`true` on 16 to 252 nodes of one sshd: herd's descriptors, RSS, CPU a node", scenarios::scale::run),
    ("deep",        "`herd doctor --deep` vs `herd doctor`, 3 and 64 nodes", scenarios::deep::run),
    ("container",   "torchrun 3 x 2 without a container, in podman and in docker: first worker, restart", scenarios::container::run),
    ("checkpoint",  "SIGUSR1 to herd -> every rank checkpointed and gone, herd's exit", scenarios::checkpoint::run),
    ("restart-scale", "a `command` job on 16/64/252 nodes, one fails: herd's own part of the restart", scenarios::restart_scale::run),
    ("collapse",    "64 nodes x 8 ranks printing a banner alike: console lines with and without --collapse", scenarios::collapse::run),
];

/// Scenarios that run only when named: each takes an hour or more at its default size.
#[rustfmt::skip] // a table, one scenario a line
const ON_REQUEST: &[(&str, &str, fn())] = &[
    ("soak",        "goodput: faults one after another, herd vs torchrun elastic vs a shell loop (20 min each)", scenarios::soak::run),
];

/// Runs the scenarios named in the arguments (words not starting with `-`: cargo adds
/// `--bench`), or every one; `--help` or an unknown name lists them.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{}", usage());
        return;
    }
    let names: Vec<&str> = args.iter().map(String::as_str).filter(|a| !a.starts_with('-')).collect();
    let all = || SCENARIOS.iter().chain(ON_REQUEST);
    let unknown: Vec<&str> = names.iter().copied().filter(|n| !all().any(|s| s.0 == *n)).collect();
    if !unknown.is_empty() {
        eprint!("herd_bench: no scenario named {}\n\n{}", unknown.join(", "), usage());
        std::process::exit(2);
    }
    for (name, _, run) in SCENARIOS {
        if names.is_empty() || names.contains(name) {
            run();
        }
    }
    for (name, _, run) in ON_REQUEST {
        if names.contains(name) {
            run();
        }
    }
}

/// How to pick scenarios, and each one's line.
fn usage() -> String {
    let mut text =
        String::from("usage: cargo bench --bench herd_bench -- [SCENARIO ...]   (none: every one)\n\n");
    for (name, about, _) in SCENARIOS {
        text += &format!("  {name:<13}  {about}\n");
    }
    text += "\nOnly when named:\n";
    for (name, about, _) in ON_REQUEST {
        text += &format!("  {name:<13}  {about}\n");
    }
    text + "\nSizes come from the environment (BENCH_RUNS, ...): see benches/herd_bench.rs and BENCHMARKS.md.\n"
}
