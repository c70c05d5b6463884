//! Shared helpers for the integration tests (`mod support;` in each test file).
pub mod cluster;
pub mod herd;
pub mod slurm;
pub mod testbed;
