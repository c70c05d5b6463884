//! Every integration test, in one binary (one link instead of one per file, and one copy of
//! the shared support). Each module is one area; the ones that build a testbed of namespaces
//! run one at a time (`.config/nextest.toml`'s `cluster` group, by module name).

mod support;

mod bench_smoke;
mod cli;
mod cluster;
mod collapse;
mod container;
mod doctor;
mod engines;
mod exec;
mod injection;
mod logins;
mod many_nodes;
mod metrics;
mod nothing_left;
mod output;
mod ranks;
mod record;
mod runs;
mod slow_logins;
mod slurm;
mod soak;
mod spares;
mod stragglers;
mod supervisor;
mod testbed_smoke;
mod wheel;
