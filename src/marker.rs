//! The mark every process of a herd job carries in its environment, and the one place its
//! format is written: `HERD_MARKER=<config-key>:<run-id>:<attempt>:<node-rank>`. A sweep
//! matches a prefix of it (a config's runs, one run, one attempt), so each part ends with `:`
//! but the last. `herd exec` marks its commands the same way under another variable, so that
//! no run's sweep ever stops them.

/// The variable of a run's processes.
pub const RUN_VAR: &str = "HERD_MARKER";
/// The variable of `herd exec`'s processes.
pub const EXEC_VAR: &str = "HERD_EXEC";

/// A marker, or the prefix of one: the parts from the config key down to where it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker<'a> {
    pub var: &'static str,
    pub config_key: &'a str,
    pub run_id: Option<&'a str>,
    pub attempt: Option<u32>,
    pub node_rank: Option<usize>,
}

impl<'a> Marker<'a> {
    /// Every process of the config's runs.
    pub fn config(config_key: &'a str) -> Marker<'a> {
        Marker { var: RUN_VAR, config_key, run_id: None, attempt: None, node_rank: None }
    }

    /// Every process of one `herd exec`, node by node (`node`).
    pub fn exec(config_key: &'a str, exec_id: &'a str) -> Marker<'a> {
        Marker { var: EXEC_VAR, run_id: Some(exec_id), attempt: Some(0), ..Marker::config(config_key) }
    }

    pub fn run(self, run_id: &'a str) -> Marker<'a> {
        Marker { run_id: Some(run_id), ..self }
    }

    pub fn attempt(self, attempt: u32) -> Marker<'a> {
        Marker { attempt: Some(attempt), ..self }
    }

    pub fn node(self, node_rank: usize) -> Marker<'a> {
        Marker { node_rank: Some(node_rank), ..self }
    }

    /// The variable's value: whole, or a prefix ending in `:`.
    pub fn value(&self) -> String {
        let mut s = format!("{}:", self.config_key);
        if let Some(run) = self.run_id {
            s += &format!("{run}:");
            if let Some(attempt) = self.attempt {
                s += &format!("{attempt}:");
                if let Some(node) = self.node_rank {
                    s += &node.to_string();
                }
            }
        }
        s
    }

    /// `VAR=value`, as it appears in `/proc/PID/environ` and as sweeps match it.
    pub fn entry(&self) -> String {
        format!("{}={}", self.var, self.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_narrows_the_prefix_and_the_whole_marker_names_one_node() {
        let config = Marker::config("k1");
        assert_eq!(config.entry(), "HERD_MARKER=k1:");
        assert_eq!(config.run("r1").entry(), "HERD_MARKER=k1:r1:");
        assert_eq!(config.run("r1").attempt(2).entry(), "HERD_MARKER=k1:r1:2:");
        let whole = config.run("r1").attempt(2).node(7);
        assert_eq!(whole.value(), "k1:r1:2:7");
        for prefix in [config, config.run("r1"), config.run("r1").attempt(2)] {
            assert!(whole.entry().starts_with(&prefix.entry()));
        }
        // Run r1's prefix does not match run r10.
        assert!(!config.run("r10").attempt(0).node(0).entry().starts_with(&config.run("r1").entry()));
        // A node rank alone, without its run and attempt, adds nothing.
        assert_eq!(config.node(3).value(), "k1:");
    }

    #[test]
    fn an_exec_is_marked_apart_from_every_run() {
        let m = Marker::exec("k1", "x9").node(2);
        assert_eq!(m.entry(), "HERD_EXEC=k1:x9:0:2");
        assert!(!m.entry().starts_with(&Marker::config("k1").entry()));
    }
}
