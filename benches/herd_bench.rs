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

mod job;
mod measure;

/// One module a scenario, each with its `run`.
mod scenarios {
    use super::{herd_support, job, measure, slurm_support, testbed};

    pub mod checkpoint;
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
    pub mod scale;
    pub mod slow_logins;
    pub mod slurm;
    pub mod slurm_steps;
    pub mod spare;
    pub mod stacks;
    pub mod teardown;
}

/// The log scenario at a given size, for the smoke test (tests/integration/bench_smoke.rs).
pub use scenarios::logs::logs_with;

fn main() {
    let which: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let want = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    if want("fanout") {
        scenarios::fanout::run();
    }
    if want("slow-logins") {
        scenarios::slow_logins::run();
    }
    if want("teardown") {
        scenarios::teardown::run();
    }
    if want("first-rank") {
        scenarios::first_rank::run();
    }
    if want("partition") {
        scenarios::partition::run();
    }
    if want("restart") {
        scenarios::restart::run();
    }
    if want("spare") {
        scenarios::spare::run();
    }
    if want("stacks") {
        scenarios::stacks::run();
    }
    if want("logs") {
        scenarios::logs::run();
    }
    if want("idle") {
        scenarios::idle::run();
    }
    if want("ranks") {
        scenarios::ranks::run();
    }
    if want("slurm") {
        scenarios::slurm::run();
    }
    if want("node-share") {
        scenarios::node_share::run();
    }
    if want("slurm-steps") {
        scenarios::slurm_steps::run();
    }
    if want("scale") {
        scenarios::scale::run();
    }
    if want("deep") {
        scenarios::deep::run();
    }
    if want("container") {
        scenarios::container::run();
    }
    if want("checkpoint") {
        scenarios::checkpoint::run();
    }
}
