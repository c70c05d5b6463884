//! Scenario `soak` (issue 41): goodput through a stream of failures. One training job
//! (`examples/train_resumable.py`) on N nodes and a spare, a seeded fault every F seconds for
//! L seconds, run by herd, by torchrun's elastic agent and by a shell loop, one after another
//! on the same testbed, the same schedule and the same script. ETTR is the training kept at
//! the end over the wall time × the fault-free step rate, measured first in the same session
//! with plain torchrun on the same hosts.
//!
//! The peers' launchers' output is appended to `$TMPDIR/herd-soak-logs/node<i>.log`.
//!
//! The nodes' sshd is as it comes (no `ClientAlive`): a node cut off for good keeps its
//! sessions until TCP gives up, minutes after the soak, and what they ran unless something on
//! the node ends it (herd's agents do, by their fence: docs/guide/supervision.md). What a
//! launcher left is counted once it is gone and the links are healed, and what has not gone
//! within [`LEFT_WITHIN`].
//!
//! Sizes (environment): BENCH_SOAK_NODES (8), BENCH_SOAK_SECS (1200), BENCH_SOAK_EVERY (120),
//! BENCH_SOAK_SEEDS (`41`, comma-separated), BENCH_SOAK_LAUNCHERS (`herd,elastic,loop`),
//! BENCH_SOAK_KINDS (`kill,segv,hang,cut-link,lose-node,reboot,port,slow-login`),
//! BENCH_SOAK_JITTER (seconds, the checkpoint interval: each fault moved later by a seeded
//! share of it, so that the work a fault loses is a draw and not the same luck at every fault
//! of a launcher; 0 gives the schedules of before 2026-12-07's last runs).
//!
//! The peers' configuration, as their docs give it at its best:
//! - torchrun elastic: `--nnodes N:N+1` on every node (the spare too) through ssh, c10d
//!   rendezvous on a TCPStore outside the fault domain (a service host; the default hosts it
//!   in node 0's agent, which a fault on node 0 would end), `--max-restarts 100`,
//!   `--rdzv-conf last_call_timeout=5` (the default 30 s waits for a 17th node that may never
//!   come), and the same checkpoint interval;
//! - the shell loop: `ssh nodeN torchrun --node-rank N ...` for the N first nodes, started
//!   again by hand (the loop) once every ssh has returned.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::soak_support::{self as soak, Fault, Injector};
use super::testbed::Testbed;
use super::{job, measure};

/// Checkpoints every this many seconds (rank 0).
const CHECKPOINT_EVERY: u64 = 30;

pub fn run() {
    let n = measure::env_usize("BENCH_SOAK_NODES", 8);
    let length = Duration::from_secs(measure::env_usize("BENCH_SOAK_SECS", 1200) as u64);
    let every = Duration::from_secs(measure::env_usize("BENCH_SOAK_EVERY", 120) as u64);
    let seeds: Vec<u64> = env_list("BENCH_SOAK_SEEDS", "41").iter().filter_map(|s| s.parse().ok()).collect();
    let launchers = env_list("BENCH_SOAK_LAUNCHERS", "herd,elastic,loop");
    let jitter =
        Duration::from_secs(measure::env_usize("BENCH_SOAK_JITTER", CHECKPOINT_EVERY as usize) as u64);
    let kinds: Vec<Fault> =
        env_list("BENCH_SOAK_KINDS", "kill,segv,hang,cut-link,lose-node,reboot,port,slow-login")
            .iter()
            .map(|k| Fault::named(k).unwrap_or_else(|| panic!("BENCH_SOAK_KINDS: no fault {k}")))
            .collect();
    let venv = herd_support::torch_venv();
    let mut tb = Testbed::new(n + 1);
    tb.name_every_node();
    let store = tb.service_host("store");
    let root = tempfile::tempdir().unwrap();
    let rate = fault_free_rate(&tb, &venv, root.path(), n);
    println!(
        "\n### soak: {n} nodes and a spare, a fault every {} s{} for {} s\n",
        every.as_secs(),
        match jitter.as_secs() {
            0 => String::new(),
            j => format!(" (each moved later by a seeded draw below {j} s)"),
        },
        length.as_secs()
    );
    println!("fault-free rate (plain torchrun, {n} nodes, same session): {rate:.2} steps/s\n");
    println!("| seed | launcher | ETTR | steps kept | faults | false blames | leftovers |");
    println!("|---|---|---|---|---|---|---|");
    let mut measured = Vec::new();
    for &seed in &seeds {
        let plan = soak::schedule(seed, Duration::from_secs(60), every, length, &kinds, 1);
        let plan = soak::jittered(plan, seed, jitter);
        let planned: Vec<String> =
            plan.iter().map(|p| format!("{}@{:.0}", p.fault.name(), p.at.as_secs_f64())).collect();
        eprintln!("soak: seed {seed}'s faults (kind@s): {}", planned.join(" "));
        for launcher in &launchers {
            let m = match launcher.as_str() {
                "herd" => with_herd(&tb, &venv, root.path(), n, &plan, length, rate, seed),
                "elastic" => with_elastic(&tb, &venv, &store.addr, root.path(), n, &plan, length, rate),
                "loop" => with_loop(&tb, &venv, root.path(), n, &plan, length, rate),
                other => panic!("BENCH_SOAK_LAUNCHERS: no launcher {other}"),
            };
            let faults: Vec<String> =
                m.injected.iter().map(|i| format!("{}@{}", i.fault.name(), i.node)).collect();
            println!(
                "| {seed} | {} | {:.3} | {} in {:.0} s | {} ({}) | {} | {} |",
                m.launcher,
                m.ettr,
                m.kept,
                m.wall.as_secs_f64(),
                m.injected.len(),
                faults.join(" "),
                m.false_blames.len(),
                m.leftovers.len()
            );
            clean(&tb);
            measured.push((seed, m));
        }
    }
    print_costs(&measured, rate);
    for (seed, m) in &measured {
        for blame in &m.false_blames {
            println!("seed {seed}, {}: false blame: {blame}", m.launcher);
        }
        for (node, pid, command) in &m.leftovers {
            println!("seed {seed}, {}: left on node {node}: pid {pid} {command}", m.launcher);
        }
    }
}

/// Each launcher's faults, what they cost until the job trained again, split; medians over
/// the faults the job started again after (the others met the next fault in their recovery).
fn print_costs(measured: &[(u64, Measure)], rate: f64) {
    println!("\nWhat a fault cost until the job trained again, medians in seconds (n: faults the job started again after):\n");
    println!("| seed | launcher | n of faults | to training | detection | teardown | backoff | herd's start | spawn | torch import | rendezvous | work lost |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let secs = |xs: Vec<Duration>| {
        if xs.is_empty() {
            return "-".to_string();
        }
        format!("{:.1}", measure::median(xs.iter().map(Duration::as_secs_f64)))
    };
    for (seed, m) in measured {
        let c: Vec<&soak::Cost> = m.costs.iter().filter(|c| c.to_training.is_some()).collect();
        let part =
            |f: &dyn Fn(&soak::Cost) -> Option<Duration>| secs(c.iter().filter_map(|c| f(c)).collect());
        let lost = |c: &&soak::Cost| c.redone.map(|r| Duration::from_secs_f64(r as f64 / rate));
        println!(
            "| {seed} | {} | {} of {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.launcher,
            c.len(),
            m.costs.len(),
            part(&|c| c.to_training),
            part(&|c| c.supervised.detect),
            part(&|c| c.supervised.teardown),
            part(&|c| c.supervised.backoff),
            part(&|c| c.supervised.own_start),
            part(&|c| c.supervised.spawn),
            part(&|c| c.import),
            part(&|c| c.rendezvous),
            secs(c.iter().filter_map(lost).collect()),
        );
    }
    for (seed, m) in measured {
        println!("\n{} (seed {seed}), fault by fault:", m.launcher);
        for (c, i) in m.costs.iter().zip(&m.injected) {
            let d = |x: Option<Duration>| x.map_or("-".into(), |d| format!("{:.1}", d.as_secs_f64()));
            println!(
                "  +{:>4.0} s {:<10} node {}: to training {}, detection {}, redone {} steps ({})",
                c.at.as_secs_f64(),
                c.fault.name(),
                i.node,
                d(c.to_training),
                d(c.supervised.detect),
                c.redone.map_or("-".into(), |r| r.to_string()),
                i.what
            );
        }
    }
}

/// The soak's measure of one launcher's run.
#[derive(Debug, Clone)]
pub struct Measure {
    pub launcher: String,
    pub wall: Duration,
    pub kept: u64,
    /// `kept` over `wall` × the fault-free step rate.
    pub ettr: f64,
    pub injected: Vec<soak::Injected>,
    pub leftovers: Vec<(usize, u32, String)>,
    /// The healthy nodes it blamed (herd's quarantines; the peers blame none by name): each
    /// host, when into the soak, and herd's reason.
    pub false_blames: Vec<String>,
    /// What each fault cost, split (herd's part from its events, for herd only).
    pub costs: Vec<soak::Cost>,
}

impl Measure {
    pub fn new(
        launcher: &str,
        wall: Duration,
        kept: u64,
        rate: f64,
        injected: Vec<soak::Injected>,
        leftovers: Vec<(usize, u32, String)>,
    ) -> Measure {
        let ettr = kept as f64 / (wall.as_secs_f64() * rate).max(f64::MIN_POSITIVE);
        Measure {
            launcher: launcher.into(),
            wall,
            kept,
            ettr,
            injected,
            leftovers,
            false_blames: Vec::new(),
            costs: Vec::new(),
        }
    }
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
}

fn args(save: &Path, until: &Path) -> Vec<String> {
    let (save, until) = (save.display().to_string(), until.display().to_string());
    ["--save-dir", &save, "--every", &CHECKPOINT_EVERY.to_string(), "--until-file", &until]
        .map(String::from)
        .to_vec()
}

/// Steps a second of plain torchrun on the first `n` nodes, no fault: from its first
/// progress, over 60 s.
fn fault_free_rate(tb: &Testbed, venv: &Path, root: &Path, n: usize) -> f64 {
    let save = soak::save_dir(root, "rate");
    let until = save.join("until");
    let mut children = shell_loop_round(tb, venv, &save, &until, n, 29400);
    let up = poll(Duration::from_secs(600), || soak::progress(&save).is_some());
    assert!(up, "the fault-free run never trained");
    let (s0, t0) = (soak::progress(&save).unwrap().0, Instant::now());
    std::thread::sleep(Duration::from_secs(60));
    let s1 = soak::progress(&save).unwrap().0;
    let rate = (s1 - s0) as f64 / t0.elapsed().as_secs_f64();
    std::fs::write(&until, "").unwrap();
    for c in &mut children {
        let _ = c.wait();
    }
    clean(tb);
    rate
}

/// The soak's common part: `schedule` against a launcher started at `start`, then the
/// training kept, the job told to end, and what is left once the launcher is gone.
struct Soaked {
    began: std::time::SystemTime,
    wall: Duration,
    kept: u64,
    injected: Vec<soak::Injected>,
}

fn run_soak(tb: &Testbed, nodes: usize, save: &Path, plan: &[soak::Planned], length: Duration) -> Soaked {
    let (start, began) = (Instant::now(), std::time::SystemTime::now());
    let mut injector = Injector::new(tb, save, (0..=nodes).collect());
    soak::run_schedule(&mut injector, plan, start, length, || false);
    let wall = start.elapsed();
    let kept = soak::kept(save, Duration::from_secs(5));
    injector.heal_all();
    Soaked { began, wall, kept, injected: std::mem::take(&mut injector.injected) }
}

#[allow(clippy::too_many_arguments)]
fn with_herd(
    tb: &Testbed,
    venv: &Path,
    root: &Path,
    n: usize,
    plan: &[soak::Planned],
    length: Duration,
    rate: f64,
    seed: u64,
) -> Measure {
    let save = soak::save_dir(root, "herd");
    let until = save.join("until");
    // A folder of its own each seed: its runs, their events, and the config's quarantine.
    // Kept from one seed to the next, a node a seed lost for good stayed quarantined in the
    // next, and that seed counted the earlier seed's quarantine as a blame of its own.
    let dir = root.join("herd");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    let args: Vec<String> = args(&save, &until).iter().map(|a| format!("\"{a}\"")).collect();
    let job = format!(
        "launcher = \"torchrun\"\nscript = \"{}\"\nargs = [{}]\nnproc_per_node = 1\nnnodes = {n}\n\
         workdir = \"{}\"\nsetup = \"source {}/bin/activate\"",
        soak::SCRIPT,
        args.join(", "),
        env!("CARGO_MANIFEST_DIR"),
        venv.display()
    );
    // herd's defaults but for the restarts (and the spare: the config's last host).
    let extra = "[rendezvous]\ninterface = \"eth0\"\n\n[restart]\nmax_restarts = 100\n";
    let config = job::write_config(tb, &dir, &hosts, &job, extra);
    let mut herd = Command::new(HERD)
        .args(["run", "-c", &config.display().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(dir.join("herd.stderr")).unwrap()))
        .spawn()
        .unwrap();
    let s = run_soak(tb, n, &save, plan, length);
    std::fs::write(&until, "").unwrap();
    let ended = poll(Duration::from_secs(300), || herd.try_wait().ok().flatten().is_some());
    if !ended {
        let _ = Command::new("kill").args(["-INT", &herd.id().to_string()]).status();
        let _ = herd.wait();
    }
    let events = job::run_events(&dir.join("logs"));
    let blamed = soak::quarantined(&events);
    let host = |i: usize| tb.nodes()[i].addr.clone();
    let false_blames: Vec<String> = soak::false_blames(&blamed, &s.injected, host, Duration::from_secs(180))
        .into_iter()
        .map(|q| soak::describe(q, s.began))
        .collect();
    // The run's record, kept whatever it shows: the bench's folder goes when it ends, and a
    // run that stopped training for minutes is as much to explain as a false blame.
    let keep = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/soak-evidence");
    let _ = std::fs::create_dir_all(&keep);
    let to = keep.join(format!(
        "{}-seed{seed}-herd",
        s.began.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
    ));
    let copied = Command::new("cp").arg("-a").arg(&dir).arg(&to).status().is_ok_and(|s| s.success());
    eprintln!(
        "soak: herd's config, logs and events {}",
        if copied { format!("kept in {}", to.display()) } else { "not kept".into() }
    );
    let leftovers = left(tb);
    let starts = soak::starts(&save);
    let mut costs = soak::costs(&s.injected, &starts);
    soak::supervised(&mut costs, &s.injected, &events, &starts);
    Measure { false_blames, costs, ..Measure::new("herd", s.wall, s.kept, rate, s.injected, leftovers) }
}

#[allow(clippy::too_many_arguments)]
fn with_elastic(
    tb: &Testbed,
    venv: &Path,
    store: &str,
    root: &Path,
    n: usize,
    plan: &[soak::Planned],
    length: Duration,
    rate: f64,
) -> Measure {
    let save = soak::save_dir(root, "elastic");
    let until = save.join("until");
    let port = 29450;
    let store_ns = format!("herdt-{}-250", tb.k());
    let mut server = Command::new("ip")
        .args(["netns", "exec", &store_ns, &format!("{}/bin/python3", venv.display()), "-c"])
        .arg(format!(
            "import time\nfrom torch.distributed import TCPStore\n\
             s = TCPStore('0.0.0.0', {port}, is_master=True, wait_for_workers=False)\ntime.sleep(1e9)"
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let args = args(&save, &until).join(" ");
    let children: Vec<Child> = (0..=n)
        .map(|i| {
            remote(
                tb,
                i,
                venv,
                &format!(
                    "torchrun --nnodes {n}:{} --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint {store}:{port} \
                     --rdzv-id soak --rdzv-conf last_call_timeout=5 --max-restarts 100 {} {args}",
                    n + 1,
                    soak::SCRIPT
                ),
            )
        })
        .collect();
    let s = run_soak(tb, n, &save, plan, length);
    std::fs::write(&until, "").unwrap();
    let mut children = children;
    let ended =
        poll(Duration::from_secs(120), || children.iter_mut().all(|c| c.try_wait().ok().flatten().is_some()));
    for c in &mut children {
        if !ended {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
    let leftovers = left(tb);
    let _ = server.kill();
    let _ = server.wait();
    let costs = soak::costs(&s.injected, &soak::starts(&save));
    Measure { costs, ..Measure::new("torchrun elastic", s.wall, s.kept, rate, s.injected, leftovers) }
}

fn with_loop(
    tb: &Testbed,
    venv: &Path,
    root: &Path,
    n: usize,
    plan: &[soak::Planned],
    length: Duration,
    rate: f64,
) -> Measure {
    let save = soak::save_dir(root, "loop");
    let until = save.join("until");
    let stop = AtomicBool::new(false);
    let s = std::thread::scope(|scope| {
        let looping = scope.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                for mut c in shell_loop_round(tb, venv, &save, &until, n, 29500) {
                    let _ = c.wait();
                }
            }
        });
        let s = run_soak(tb, n, &save, plan, length);
        stop.store(true, Ordering::SeqCst);
        std::fs::write(&until, "").unwrap();
        if !poll(Duration::from_secs(120), || looping.is_finished()) {
            // A round hung (a node gone, a rank stopped): what a user does is kill what is
            // left on the nodes by hand. This testbed's nodes only: another suite on this host
            // runs torchrun too.
            clean(tb);
        }
        s
    });
    let leftovers = left(tb);
    let costs = soak::costs(&s.injected, &soak::starts(&save));
    Measure { costs, ..Measure::new("shell loop", s.wall, s.kept, rate, s.injected, leftovers) }
}

/// One round of the shell loop: `ssh nodeI torchrun --node-rank I ...` on the first `n` nodes.
fn shell_loop_round(tb: &Testbed, venv: &Path, save: &Path, until: &Path, n: usize, port: u16) -> Vec<Child> {
    let master = tb.nodes()[0].addr.clone();
    let args = args(save, until).join(" ");
    (0..n)
        .map(|i| {
            remote(
                tb,
                i,
                venv,
                &format!(
                    "torchrun --nnodes {n} --nproc-per-node 1 --node-rank {i} --master-addr {master} \
                     --master-port {port} {} {args}",
                    soak::SCRIPT
                ),
            )
        })
        .collect()
}

/// `command` on node `i` through ssh, in the repository, with the venv active.
fn remote(tb: &Testbed, i: usize, venv: &Path, command: &str) -> Child {
    let line = format!(
        "cd {} && . {}/bin/activate && export GLOO_SOCKET_IFNAME=eth0 && exec {command}",
        env!("CARGO_MANIFEST_DIR"),
        venv.display()
    );
    // What the peers' launchers say, kept to read after the bench: appended a node a file.
    let dir = std::env::temp_dir().join("herd-soak-logs");
    std::fs::create_dir_all(&dir).unwrap();
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("node{i}.log"))).unwrap();
    let err = log.try_clone().unwrap();
    tb.ssh_command(i).arg(line).stdout(log).stderr(err).spawn().unwrap()
}

/// How long what a launcher left may take to go once it has ended and the links are healed:
/// the sshd's minute of silence for a node cut off in the soak's last minute, and the
/// grace and kill of an agent that then stops its job.
const LEFT_WITHIN: Duration = Duration::from_secs(90);

/// What a launcher left on the nodes that is still there after [`LEFT_WITHIN`].
fn left(tb: &Testbed) -> Vec<(usize, u32, String)> {
    poll(LEFT_WITHIN, || soak::leftovers(tb).is_empty());
    soak::leftovers(tb)
}

/// Whatever a launcher left: killed, so the next starts clean (it was counted first).
fn clean(tb: &Testbed) {
    for (_, pid, _) in soak::leftovers(tb) {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        let _ = Command::new("kill").args(["-CONT", &pid.to_string()]).status();
    }
}

/// `cond` polled every 200 ms until it holds or `limit` passes: whether it held.
fn poll(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    measure::poll_until(limit, Duration::from_millis(200), cond).is_some()
}
