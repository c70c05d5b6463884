//! 64 nodes: one namespace whose sshd answers on 64 addresses, so herd opens 64 SSH
//! connections and starts 64 agents, on a 2-core machine. run (with its preflight), doctor
//! and exec --gather each succeed three times in a row, and leave nothing behind.

mod support;

use std::time::Duration;

use support::herd;
use support::testbed::Testbed;

const NODES: usize = 64;
const LIMIT: Duration = Duration::from_secs(240);

#[test]
fn sixty_four_nodes_run_doctor_and_exec_three_times_in_a_row() {
    let tb = Testbed::many(NODES);
    let hosts: Vec<String> =
        tb.nodes().iter().map(|n| format!("[[nodes]]\nhost = \"{}\"\n", n.addr)).collect();
    let config = format!(
        "{ssh}\n{hosts}\n[job]\nlauncher = \"command\"\nscript = \"sh\"\n\
         args = [\"-c\", 'echo \"node $NODE_RANK of $NNODES\"']\ndevice = \"cpu\"\n\
         [logs]\ndir = \"{logs}\"\n",
        ssh = tb.ssh_config_toml(),
        hosts = hosts.concat(),
        logs = tb.dir().join("logs").display(),
    );
    std::fs::write(tb.dir().join("cluster.toml"), config).unwrap();
    let before = tb.processes(0);
    for round in 0..3 {
        let out = herd::run(tb.dir(), &["run"], LIMIT);
        out.assert_code(0);
        for rank in 0..NODES {
            assert!(
                out.stdout.contains(&format!("node {rank} of {NODES}\n")),
                "round {round}: node {rank}\n{out}"
            );
        }
        eprintln!("round {round}: run took {:?}", out.took);

        let out = herd::run(tb.dir(), &["doctor"], LIMIT);
        out.assert_code(0);
        assert!(out.stdout.contains(&format!("{NODES} nodes:")), "round {round}\n{out}");
        eprintln!("round {round}: doctor took {:?}", out.took);

        let out = herd::run(tb.dir(), &["exec", "--gather", "--", "echo same"], LIMIT);
        out.assert_code(0);
        assert!(out.stdout.contains("same"), "round {round}\n{out}");
        eprintln!("round {round}: exec took {:?}", out.took);
    }
    let left = || tb.processes(0).into_iter().filter(|p| !before.contains(p)).collect::<Vec<_>>();
    herd::wait_until(Duration::from_secs(5), || left().is_empty());
    assert_eq!(left(), Vec::new(), "left on the host");
}
