//! Preflight checks across the cluster (`herd doctor`, and the fast subset `herd run` does
//! before it starts anything). Each node is probed through the same agent that runs jobs, so
//! the probe sees exactly what the job will: the workdir, `setup`, the env. The probe prints
//! `herd-fact name=value` lines; `checks` turns them into verdicts.

pub mod checks;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

use crate::plan::{AttemptValues, LaunchPlan, NodePlan};
use crate::remote::{self, quote, AgentInvocation};
use crate::transport::{AgentProcess, Connection};

pub use checks::{evaluate, Check, ClockSample, Facts, NodeChecks, PortReach, Status};

/// How long one probe may take once the node's login shell has started it (imports of torch
/// included, on a node busy with the other probes); the login itself has `ssh.login_timeout`.
const PROBE_WORK: Duration = Duration::from_secs(60);

/// How long one probe may take in all: a slow login (conda, pyenv, a cold NFS home) is no
/// failed probe.
fn probe_limit(plan: &LaunchPlan) -> Duration {
    plan.login_timeout + PROBE_WORK
}
/// How long the workers may take to connect to the master's listener.
const REACH_TIMEOUT: Duration = Duration::from_secs(5);
/// The run id the doctor's probes carry in their marker, so sweeps of real runs skip them.
pub const DOCTOR_RUN_ID: &str = "doctor";
/// The attempt numbers in the markers of the facts probe and of the port reachability check.
/// They run at the same time on the same nodes: when one's agent ends, it stops every process
/// that has its exact marker, and must not take the other's with it.
const FACTS_ATTEMPT: u32 = 0;
const REACH_ATTEMPT: u32 = 1;

/// The shell that prints a node's facts. `fast` leaves out what costs time (importing torch).
pub fn facts_script(plan: &LaunchPlan, fast: bool) -> String {
    let launcher = &plan.launcher_program;
    let py = format!(
        r#"import platform
print("herd-fact python=" + platform.python_version())
try:
    import importlib.metadata as m
    print("herd-fact torch=" + m.version("torch"))
except Exception:
    print("herd-fact torch=")
if {full}:
    try:
        import torch, torch.distributed as d
        print("herd-fact torch_import=ok")
        print("herd-fact cuda=" + str(torch.version.cuda))
        try:
            print("herd-fact nccl=" + ".".join(map(str, torch.cuda.nccl.version())))
        except Exception:
            print("herd-fact nccl=none")
        print("herd-fact nccl_available=" + str(d.is_nccl_available()))
    except Exception as e:
        print("herd-fact torch_import=" + repr(e)[:300].replace("\n", " "))
"#,
        full = if fast { "False" } else { "True" }
    );
    let mut s = String::new();
    match &plan.container {
        // The launcher, Python and torch are in the image: the node needs the runtime.
        Some(c) => {
            let runtime = c.runtime.as_str();
            s += &format!("echo \"herd-fact runtime=$(command -v {runtime} 2>/dev/null)\"\n");
        }
        None => {
            s += &format!("echo \"herd-fact launcher=$(command -v {} 2>/dev/null)\"\n", quote(launcher));
            if plan.uses_torch {
                s += &format!("{} -c {} 2>&1\n", quote(&plan.python), quote(&py));
            }
        }
    }
    s += "h=$(hostname); echo \"herd-fact hostname=$h\"\n";
    s += "echo \"herd-fact hostname_addr=$(getent hosts \"$h\" 2>/dev/null | awk '{print $1; exit}')\"\n";
    s += &format!(
        "m={}; case $m in *[!0-9.]*) m=$(getent ahostsv4 \"$m\" 2>/dev/null | awk '{{print $1; exit}}');; esac\n",
        quote(&plan.master.addr)
    );
    // On the master itself the route to its own address is via lo: take the interface that
    // holds the address instead.
    s += "d=$(ip -o addr show to \"$m\" 2>/dev/null | awk '{print $2; exit}')\n";
    s += "[ -n \"$d\" ] || d=$(ip route get \"$m\" 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p' | head -n 1)\n";
    s += "echo \"herd-fact route_dev=$d\"\n";
    if let Some(name) = plan.interface.as_deref().filter(|i| *i != "auto") {
        s += &format!(
            "if [ -e /sys/class/net/{0} ]; then echo herd-fact iface_exists=yes; else echo herd-fact iface_exists=no; fi\n",
            quote(name)
        );
    }
    if !fast {
        s += "if command -v nvidia-smi >/dev/null 2>&1; then echo \"herd-fact gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')\"; else echo herd-fact gpus=0; fi\n";
        s += "echo \"herd-fact shm_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2{print $2}')\"\n";
        s += "echo \"herd-fact nofile=$(ulimit -n)\"\n";
        s += "echo \"herd-fact disk_free_kb=$(df -Pk . 2>/dev/null | awk 'NR==2{print $4}')\"\n";
        // The sweep's own rule: processes of this config whose agent is gone. The doctor's
        // probes, and any live run, have theirs.
        s += remote::PROCS_SCRIPT;
        s += &format!(
            "echo \"herd-fact leftovers=$(herd_leftovers {} | wc -l)\"\n",
            quote(&plan.marker_prefix(None))
        );
        if let crate::config::PortSpec::Fixed(p) = plan.master.port {
            s += &format!(
                "echo \"herd-fact port_in_use=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$2 ~ /:{p:04X}$/ && $4 == \"0A\"' | wc -l)\"\n"
            );
        }
    }
    s
}

/// Start `command` (a command line, as the job's launcher line would be) on a node under
/// the agent, after `cd workdir` and `setup`, with the node's env. It ends with its stdin.
async fn start_in_job_env(
    conn: &Connection,
    plan: &LaunchPlan,
    node: &NodePlan,
    values: &AttemptValues<'_>,
    command: &str,
) -> Result<AgentProcess, String> {
    let inv = AgentInvocation {
        grace_secs: 1,
        heartbeat_secs: crate::supervisor::policy::heartbeat_interval(plan.restart.heartbeat_timeout)
            .as_secs(),
        marker: node.marker(values),
        // With [container], setup is for inside the image: the probes run on the node itself.
        job: remote::job_snippet(
            &plan.workdir,
            plan.setup.as_deref().filter(|_| plan.container.is_none()),
            command,
        ),
        cleanup: None,
        presweep: None,
    };
    let mut p = conn.spawn_agent(&inv).await.map_err(|e| e.to_string())?;
    p.stdin.write_all(&node.env_block(values)).await.map_err(|e| e.to_string())?;
    Ok(p)
}

/// What a probe printed, and what herd measured of the node on the way.
#[derive(Debug, Clone, Default)]
pub struct Probed {
    pub out: String,
    /// From starting the agent to its first word: the node's login shell (its init: conda,
    /// pyenv, modules) and the agent's start.
    pub login_ms: Option<u64>,
    pub clock: Option<ClockSample>,
}

/// Run `script` (a shell snippet) on a node in the job's environment; collect everything it
/// printed. Once the agent is up, herd also asks it for its clock.
pub async fn run_in_job_env(
    conn: &Connection,
    plan: &LaunchPlan,
    node: &NodePlan,
    values: &AttemptValues<'_>,
    script: &str,
    limit: Duration,
) -> Result<Probed, String> {
    let started = Instant::now();
    let mut p = start_in_job_env(conn, plan, node, values, &format!("sh -c {}", quote(script))).await?;
    let mut out = Vec::new();
    let mut stdin = p.stdin;
    let mut agent = BufReader::new(p.stderr).lines();
    let mut probed = Probed::default();
    let talk = async {
        let mut asked_at = None;
        while let Ok(Some(line)) = agent.next_line().await {
            if probed.login_ms.is_none() {
                probed.login_ms = Some(started.elapsed().as_millis() as u64);
                // NTP-style: the question's time and the answer's bracket the node's reading.
                asked_at = Some(SystemTime::now());
                let _ = async {
                    stdin.write_all(remote::CONTROL_CLOCK).await?;
                    stdin.flush().await
                }
                .await;
            }
            if let (remote::AgentMessage::Clock(remote), Some(t0)) =
                (remote::parse_agent_line(&line), asked_at)
            {
                probed.clock = Some(ClockSample::new(t0, SystemTime::now(), remote));
            }
        }
    };
    let read =
        tokio::time::timeout(limit, async { tokio::join!(p.stdout.read_to_end(&mut out), talk).0 }).await;
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), p.handle.wait()).await;
    match read {
        Ok(Ok(_)) => Ok(Probed { out: String::from_utf8_lossy(&out).into_owned(), ..probed }),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
    }
}

/// Probe every node at once.
pub async fn probe_all(
    plan: &LaunchPlan,
    conns: &[Option<Arc<Connection>>],
    connect_ms: &[u64],
    connect_errors: &[Option<String>],
    fast: bool,
) -> Vec<Facts> {
    let script = facts_script(plan, fast);
    let mut set = JoinSet::new();
    for node in &plan.nodes {
        let Some(conn) = conns[node.rank].clone() else { continue };
        let (plan, node, script) = (plan.clone(), node.clone(), script.clone());
        set.spawn(async move {
            let values = AttemptValues {
                run_id: DOCTOR_RUN_ID,
                attempt: FACTS_ATTEMPT,
                master_port: 0,
                interfaces: &[],
            };
            let out = run_in_job_env(&conn, &plan, &node, &values, &script, probe_limit(&plan)).await;
            (node.rank, out)
        });
    }
    let mut facts: Vec<Facts> = plan
        .nodes
        .iter()
        .map(|n| Facts {
            unreachable: connect_errors[n.rank].clone(),
            connect_ms: connect_ms[n.rank],
            ..Facts::default()
        })
        .collect();
    while let Some(joined) = set.join_next().await {
        let (rank, out) = joined.expect("probe task panicked");
        match out {
            Ok(probed) => {
                let (values, other_lines) = checks::parse_facts(&probed.out);
                facts[rank] = Facts {
                    values,
                    other_lines,
                    clock: probed.clock,
                    login_ms: probed.login_ms,
                    ..facts[rank].clone()
                };
            }
            Err(e) => facts[rank].unreachable = Some(format!("probe failed: {e}")),
        }
    }
    facts
}

/// Start a listener on the master at `port` and connect to it from every other node.
pub async fn port_reach(plan: &LaunchPlan, conns: &[Option<Arc<Connection>>], port: u16) -> PortReach {
    if plan.nnodes() < 2 {
        return PortReach::Skipped("one node".into());
    }
    if conns.iter().any(Option::is_none) {
        return PortReach::Skipped("a node is unreachable".into());
    }
    let master = &plan.nodes[plan.master.node_rank];
    let master_conn = conns[master.rank].clone().expect("checked");
    let listen = format!(
        "import socket, time\ns = socket.socket(socket.AF_INET6 if ':' in {addr} else socket.AF_INET)\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('', {port}))\ns.listen(64)\n\
         print('herd-listening', flush=True)\ns.settimeout(1)\nend = time.time() + {secs}\n\
         while time.time() < end:\n    try:\n        c, _ = s.accept(); c.settimeout(3); c.recv(1); c.close()\n    except OSError:\n        pass\n",
        addr = py_str(&plan.master.addr),
        // Until herd ends it (with its agent's stdin), once every worker has answered; this
        // bound only covers a herd that is gone.
        secs = probe_limit(plan).as_secs() * 2,
    );
    let listen_cmd = format!("{} -c {}", quote(&plan.python), quote(&listen));
    // The listener runs under the agent like everything else; it ends with its stdin.
    let values =
        AttemptValues { run_id: DOCTOR_RUN_ID, attempt: REACH_ATTEMPT, master_port: port, interfaces: &[] };
    let mut listener = match start_in_job_env(&master_conn, plan, master, &values, &listen_cmd).await {
        Ok(p) => p,
        Err(e) => return PortReach::NoListener(e),
    };
    let mut lines = BufReader::new(&mut listener.stdout).lines();
    let mut said = Vec::new();
    let ready = tokio::time::timeout(probe_limit(plan), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line == "herd-listening" {
                return true;
            }
            said.push(line);
        }
        false
    })
    .await
    .unwrap_or(false);
    if !ready {
        drop(listener.stdin);
        let why =
            said.iter().rev().find(|l| !l.trim().is_empty()).cloned().unwrap_or_else(|| "no listener".into());
        return PortReach::NoListener(why);
    }

    let connect = format!(
        "import socket\ntry:\n    socket.create_connection(({}, {port}), timeout={}).close()\n    print('herd-reached')\n\
         except OSError as e:\n    print('herd-unreached ' + str(e))\n",
        py_str(&plan.master.addr),
        REACH_TIMEOUT.as_secs()
    );
    let connect_cmd = format!("{} -c {}", quote(&plan.python), quote(&connect));
    let mut set = JoinSet::new();
    for node in plan.nodes.iter().filter(|n| n.rank != master.rank) {
        let (conn, plan, node, cmd) =
            (conns[node.rank].clone().expect("checked"), plan.clone(), node.clone(), connect_cmd.clone());
        set.spawn(async move {
            let values = AttemptValues {
                run_id: DOCTOR_RUN_ID,
                attempt: REACH_ATTEMPT,
                master_port: port,
                interfaces: &[],
            };
            let out =
                run_in_job_env(&conn, &plan, &node, &values, &cmd, probe_limit(&plan)).await.map(|p| p.out);
            let result = match out {
                Ok(text) if text.lines().any(|l| l == "herd-reached") => Ok(()),
                Ok(text) => Err(text
                    .lines()
                    .find_map(|l| l.strip_prefix("herd-unreached "))
                    .unwrap_or_else(|| text.lines().last().unwrap_or("no answer"))
                    .to_string()),
                Err(e) => Err(e),
            };
            (node.rank, result)
        });
    }
    let mut results = BTreeMap::new();
    while let Some(joined) = set.join_next().await {
        let (rank, r) = joined.expect("reach task panicked");
        results.insert(rank, r);
    }
    drop(listener.stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), listener.handle.wait()).await;
    PortReach::Tested { port, results }
}

fn py_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

/// Everything `herd doctor` (or `herd run`'s preflight) found.
pub struct Report {
    pub nodes: Vec<NodeChecks>,
    /// Per node: the interface that routes to the master (for `interface = "auto"`).
    pub route_devs: Vec<Option<String>>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.nodes.iter().all(|n| n.checks.iter().all(|c| c.status != Status::Fail))
    }
}

/// Run the checks over open connections (`None` where connecting failed, with the error).
pub async fn diagnose(
    plan: &LaunchPlan,
    conns: &[Option<Arc<Connection>>],
    connect_ms: &[u64],
    connect_errors: &[Option<String>],
    port: Option<u16>,
    fast: bool,
) -> Report {
    let started = Instant::now();
    // Independent, so at once: each is a Python start-up or two on every node.
    let (facts, reach) = tokio::join!(probe_all(plan, conns, connect_ms, connect_errors, fast), async {
        match port {
            Some(p) => port_reach(plan, conns, p).await,
            None => PortReach::Skipped("no free port to test".into()),
        }
    });
    tracing::debug!("preflight took {:?}", started.elapsed());
    let nodes = evaluate(plan, &facts, &reach, fast);
    let route_devs = facts.iter().map(|f| f.get("route_dev").map(str::to_string)).collect();
    Report { nodes, route_devs }
}
