//! Shared helpers for the integration tests (`crate::support` in each module of main.rs).
pub mod browser;
pub mod cluster;
pub mod docker;
pub mod herd;
pub mod slurm;
pub mod soak;
pub mod testbed;
