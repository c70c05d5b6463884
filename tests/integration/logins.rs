//! One login per node for a start, as pdsh has: every login runs the user's whole shell init
//! (conda, pyenv, modules from a shared home), so each one more costs that much on every node.
//! Logins are counted by the nodes' own `~/.bashrc`, as sshd starts them.

use crate::support::cluster::{Cluster, LIMIT};
use crate::support::herd;

/// `herd <args>` once; then how many logins, and how many shell inits, each node had.
fn count(c: &Cluster, args: &[&str]) -> Vec<(usize, usize)> {
    let nodes = c.tb.nodes().len();
    let before: Vec<(usize, usize)> = (0..nodes).map(|i| (c.tb.logins(i), c.tb.shell_inits(i))).collect();
    let out = herd::run(c.tb.dir(), args, LIMIT);
    out.assert_code(0);
    (0..nodes).map(|i| (c.tb.logins(i) - before[i].0, c.tb.shell_inits(i) - before[i].1)).collect()
}

#[test]
fn a_start_logs_in_once_per_node_its_preflight_included() {
    let c = Cluster::new(3);
    c.tb.count_logins();
    // A job without `setup`: nothing but the login reads the shell init.
    c.write_config("launcher = \"command\"\nscript = \"true\"", "");
    let path = c.tb.dir().join("cluster.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("setup = ", "# setup = ")).unwrap();
    assert_eq!(count(&c, &["run", "--no-preflight"]), vec![(1, 1); 3], "herd run --no-preflight");
    // The preflight's probe runs in the login of the first attempt's agent.
    assert_eq!(count(&c, &["run"]), vec![(1, 1); 3], "herd run");
    assert_eq!(count(&c, &["doctor"]), vec![(1, 1); 3], "herd doctor");
    // exec runs its command in bash, which reads ~/.bashrc as a login shell's command does.
    assert_eq!(count(&c, &["exec", "--", "true"]), vec![(1, 2); 3], "herd exec");
    assert_eq!(count(&c, &["kill"]), vec![(1, 1); 3], "herd kill");

    // With `setup`, its bash reads the init again (conda's shell functions are defined
    // there), once per start and probe: the login count stays.
    std::fs::write(&path, &text).unwrap();
    assert_eq!(count(&c, &["run", "--no-preflight"]), vec![(1, 2); 3], "herd run --no-preflight, setup");
    assert_eq!(count(&c, &["run"]), vec![(1, 3); 3], "herd run, setup");
}
