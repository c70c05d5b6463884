//! Shared helpers for the integration tests (`mod support;` in each test file).
pub mod testbed;
