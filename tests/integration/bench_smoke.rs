//! The benchmark harness at a tiny size: log throughput on 2 nodes x 1000 lines, once. It
//! checks that the harness still runs and that herd loses no line; the real measurements are
//! `cargo bench --bench herd_bench` (BENCHMARKS.md), never part of the test run.

#[allow(dead_code, clippy::all)]
#[path = "../../benches/herd_bench.rs"]
mod herd_bench;

#[test]
fn the_log_throughput_bench_runs_at_a_tiny_size_and_herd_loses_no_line() {
    assert_eq!(herd_bench::logs_with(1, &[(2, 1000)]), 0);
}
