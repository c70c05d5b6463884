//! What runs on a node, and the wire to it; one concern a file, each using only those above it:
//! - `protocol`: the agent protocol, control lines down and messages up (a rank's stack, a
//!   `Sample`); `frames`: the job's output, as the output multiplexer frames it. The lowest
//!   layer, pure.
//! - `scripts`: the registry of node scripts, each a file of this folder (`*.sh`, `*.py`, the
//!   subreaper shims), brought in with `include_str!` and checked as it ships.
//! - `shell`: quoting, and every line a node's shell runs: the login line, the job snippet, the
//!   env block, the output multiplexer around a launcher, the agent's start as a subreaper.
//! - `procs`: the sweeps of a config's processes and `herd stacks`' command, calls of `procs.sh`.
//! - `agent`: `AgentInvocation`, what starts one node's agent; its tests run the agent here.

pub mod agent;
pub mod frames;
pub mod procs;
pub mod protocol;
pub mod scripts;
pub mod shell;
#[cfg(test)]
mod testing;
