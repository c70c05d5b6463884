//! The goodput soak's 3-minute form (issue 41): one torchrun job on 4 nodes and a spare, a
//! fault of another kind every 30 s, with herd's defaults but for the restarts, the spare and
//! the checkpoint interval (a hang is found by the default `restart.stall_timeout`). The run
//! must keep training through all of them, blame no healthy node, and leave nothing behind. The bench's `soak`
//! scenario is the long form, side by side with torchrun's elastic agent and a shell loop.
//! HERD_SOAK_TIMELINE=PATH keeps the run's `herd logs --timeline` page there, to look at.

use std::time::{Duration, Instant, SystemTime};

use crate::support::cluster::Cluster;
use crate::support::herd;
use crate::support::soak::{self, Fault, Injector};

const LENGTH: Duration = Duration::from_secs(180);

#[test]
fn a_job_keeps_training_through_faults_one_after_another() {
    let cluster = Cluster::new(5);
    let dir = soak::save_dir(cluster.tb.dir(), "herd");
    let until = cluster.tb.dir().join("until");
    let job = format!(
        "launcher = \"torchrun\"\nscript = \"{}\"\nargs = [\"--save-dir\", \"{}\", \"--every\", \"10\", \"--until-file\", \"{}\"]\n\
         nproc_per_node = 1\nnnodes = 4",
        soak::SCRIPT,
        dir.display(),
        until.display()
    );
    let config = cluster.write_config(&job, "[restart]\nmax_restarts = 50\n");
    let config = config.display().to_string();
    let mut run = herd::start(cluster.tb.dir(), &["run", "-c", &config], &[]);
    let (start, began) = (Instant::now(), SystemTime::now());
    // torch's imports on 5 namespaces sharing two cores: generous.
    assert!(run.until(Duration::from_secs(240), || soak::progress(&dir).is_some()), "training never started");
    // The faults' time counts from training on, whatever torch's start cost this machine.
    let trained_at = start.elapsed();
    let end = trained_at + LENGTH;
    // A port fault is a kill with the master's port taken; a slow login's recovery meets
    // the next fault 30 s later: a fault during a restart.
    let kinds = [Fault::Port, Fault::Segv, Fault::Stop, Fault::Cut, Fault::Reboot, Fault::SlowLogin];
    let plan =
        soak::schedule(41, trained_at + Duration::from_secs(10), Duration::from_secs(30), end, &kinds, 1);
    let mut injector = Injector::new(&cluster.tb, &dir, (0..5).collect());
    soak::run_schedule(&mut injector, &plan, start, end, || false);
    injector.heal_all();
    // The last fault's recovery: training goes on past where it was when the last came.
    let at_last = soak::progress(&dir).map_or(0, |(s, _)| s);
    let resumed =
        run.until(Duration::from_secs(240), || soak::progress(&dir).is_some_and(|(s, _)| s > at_last + 5));
    let wall = start.elapsed();
    let kept = soak::kept(&dir, Duration::from_secs(5));
    std::fs::write(&until, "").unwrap();
    let out = run.wait(wall + Duration::from_secs(240));
    let events = herd::events(&herd::only_run_dir(&cluster.logs()));
    let injected = &injector.injected;
    let kinds_met: std::collections::BTreeSet<Fault> =
        injected.iter().filter(|i| i.hit).map(|i| i.fault).collect();
    let host = |n: usize| cluster.addr(n).to_string();
    let blamed = soak::quarantined(&events);
    let false_blames = soak::false_blames(&blamed, injected, host, Duration::from_secs(120));
    let leftovers = soak::leftovers(&cluster.tb);
    for i in injected {
        eprintln!("soak: +{:.0} s {} on node {}: {}", i.at.as_secs_f64(), i.fault.name(), i.node, i.what);
    }
    eprintln!(
        "soak: {} faults ({:?}), {kept} steps kept in {:.0} s, quarantined {blamed:?}, attempts {}",
        injected.len(),
        kinds_met,
        wall.as_secs_f64(),
        herd::event_names(&events).iter().filter(|e| *e == "attempt_started").count()
    );
    assert!(resumed, "training did not go on after the last fault\n{out}");
    out.assert_code(0);
    assert!(kinds_met.len() >= 4, "{injected:?}");
    let false_blames: Vec<String> = false_blames.iter().map(|q| soak::describe(q, began)).collect();
    assert!(false_blames.is_empty(), "healthy nodes blamed: {false_blames:?}\n{out}");
    // What each fault cost, split; every restart herd made is in its record.
    let starts = soak::starts(&dir);
    let mut costs = soak::costs(injected, &starts);
    soak::supervised(&mut costs, injected, &events, &starts);
    for c in &costs {
        eprintln!("soak: {c:?}");
    }
    let restarted: Vec<&soak::Cost> = costs.iter().filter(|c| c.to_training.is_some()).collect();
    assert!(
        restarted.len() >= 3,
        "the job started again after only {} of the faults: {costs:?}",
        restarted.len()
    );
    assert!(
        restarted.iter().all(|c| c.supervised.detect.is_some()),
        "a restart herd has no teardown for: {costs:?}"
    );
    // The run's picture: every attempt of it drawn from its record.
    let drawn = herd::run(cluster.tb.dir(), &["logs", "--timeline", "-c", &config], Duration::from_secs(60));
    drawn.assert_code(0);
    let page = std::fs::read_to_string(drawn.stdout.trim()).unwrap();
    let attempts = herd::event_names(&events).iter().filter(|e| *e == "attempt_started").count();
    assert!(page.contains("<svg") && attempts > 1, "{attempts} attempts\n{drawn}");
    if let Some(keep) = std::env::var_os("HERD_SOAK_TIMELINE") {
        std::fs::write(keep, &page).unwrap();
    }
    assert!(leftovers.is_empty(), "left on the nodes: {leftovers:?}");
}

/// The schedule's and the blame's arithmetic, without a testbed.
mod pure {
    use std::collections::BTreeSet;
    use std::time::{Duration, SystemTime};

    use crate::support::soak::*;

    #[test]
    fn every_kind_has_a_name_the_bench_takes() {
        for fault in Fault::ALL {
            assert_eq!(Fault::named(fault.name()), Some(fault));
        }
        assert_eq!(Fault::named("meteor"), None);
    }

    #[test]
    fn a_seed_gives_one_schedule_that_meets_every_kind_before_any_again() {
        let kinds = [Fault::Kill, Fault::Stop, Fault::Cut, Fault::Reboot, Fault::Lose];
        let s = Duration::from_secs;
        let a = schedule(7, s(30), s(35), s(180), &kinds, 1);
        assert_eq!(a, schedule(7, s(30), s(35), s(180), &kinds, 1));
        assert_ne!(a, schedule(8, s(30), s(35), s(180), &kinds, 1));
        assert_eq!(a.iter().map(|p| p.at).collect::<Vec<_>>(), [s(30), s(65), s(100), s(135), s(170)]);
        let first: BTreeSet<Fault> = a.iter().map(|p| p.fault).collect();
        assert_eq!(first.len(), 5, "{a:?}");
        // Lose takes a spare for good: never more often than there are spares.
        let long = schedule(7, s(30), s(10), s(3600), &kinds, 1);
        assert_eq!(long.iter().filter(|p| p.fault == Fault::Lose).count(), 1);
        assert!(long.len() > 300);
        assert!(schedule(7, s(30), s(10), s(3600), &kinds, 0).iter().all(|p| p.fault != Fault::Lose));
    }

    #[test]
    fn jitter_moves_each_fault_later_by_less_than_its_spread_and_keeps_the_kinds() {
        let kinds = [Fault::Kill, Fault::Stop, Fault::Cut, Fault::Reboot];
        let s = Duration::from_secs;
        let plan = schedule(43, s(60), s(120), s(1200), &kinds, 1);
        let moved = jittered(plan.clone(), 43, s(30));
        assert_eq!(moved, jittered(plan.clone(), 43, s(30)), "the same from the same seed");
        assert_ne!(moved, jittered(plan.clone(), 44, s(30)));
        assert_eq!(jittered(plan.clone(), 43, s(0)), plan, "no spread, no move");
        for (p, m) in plan.iter().zip(&moved) {
            assert_eq!((p.fault, p.draw), (m.fault, m.draw));
            assert!(m.at >= p.at && m.at < p.at + s(30), "{p:?} -> {m:?}");
        }
        let shifts: BTreeSet<u128> =
            plan.iter().zip(&moved).map(|(p, m)| (m.at - p.at).as_secs() as u128 / 10).collect();
        assert!(shifts.len() > 1, "the shifts spread over the 30 s: {shifts:?}");
    }

    #[test]
    fn each_fault_costs_until_the_first_start_after_it_and_a_fault_in_a_recovery_shares_it() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = Duration::from_secs;
        let fault = |fault, at, step| Injected {
            at: s(at),
            wall: t0 + s(at),
            fault,
            node: 0,
            what: String::new(),
            step: Some(step),
            hit: true,
        };
        let start = |began: u64, resumed| Start {
            began: t0 + s(began),
            imported: t0 + s(began + 3),
            up: t0 + s(began + 5),
            resumed,
        };
        // The first start is the job's own; the kill at 100 s restarts it at 110 s from the
        // checkpoint at step 60; the cut at 200 s is met by the reboot at 205 s before any start.
        let faults =
            [fault(Fault::Kill, 100, 80), fault(Fault::Cut, 200, 150), fault(Fault::Reboot, 205, 150)];
        let starts = [start(0, 0), start(110, 60), start(230, 140)];
        let c = costs(&faults, &starts);
        assert_eq!(c[0].to_process, Some(s(10)));
        assert_eq!(c[0].to_training, Some(s(15)));
        assert_eq!((c[0].import, c[0].rendezvous, c[0].redone), (Some(s(3)), Some(s(2)), Some(20)));
        assert_eq!(c[1].to_training, None, "the reboot came before the cut's recovery");
        assert_eq!((c[2].to_training, c[2].redone), (Some(s(30)), Some(10)));
        // herd's record splits the part before the process: the teardown that followed the
        // kill, its failure, the backoff it drew and the next attempt's start.
        let ts = |at: f64| humantime::format_rfc3339_millis(t0 + Duration::from_secs_f64(at)).to_string();
        let events: Vec<serde_json::Value> = [
            serde_json::json!({"event": "teardown_started", "ts": ts(102.0)}),
            serde_json::json!({"event": "attempt_failed", "ts": ts(104.0)}),
            serde_json::json!({"event": "restart_scheduled", "ts": ts(104.0), "delay_ms": 500}),
            serde_json::json!({"event": "attempt_started", "ts": ts(105.5)}),
        ]
        .into();
        let mut c = c;
        supervised(&mut c, &faults, &events, &starts);
        let h = &c[0].supervised;
        assert_eq!((h.detect, h.teardown), (Some(s(2)), Some(s(2))));
        assert_eq!((h.backoff, h.own_start), (Some(Duration::from_millis(500)), Some(s(1))));
        assert_eq!(h.spawn, Some(Duration::from_millis(4500)));
        assert_eq!(c[1].supervised, Supervised::default());
        // A fault that found nothing to hit (between attempts, no launcher up yet) takes no
        // start from the fault before, whose recovery it came in.
        let missed = Injected { hit: false, ..fault(Fault::Segv, 215, 150) };
        let c = costs(&[fault(Fault::Cut, 200, 150), missed], &starts);
        assert_eq!((c[0].to_training, c[1].to_training), (Some(s(35)), None));
    }

    #[test]
    fn a_blame_is_false_unless_a_fault_of_that_node_came_just_before() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = Duration::from_secs;
        let injected = |fault, node, at| Injected {
            at: s(at),
            wall: t0 + s(at),
            fault,
            node,
            what: String::new(),
            step: None,
            hit: true,
        };
        let faults = [injected(Fault::Kill, 1, 10), injected(Fault::Cut, 2, 50)];
        let host = |n: usize| format!("h{n}");
        let q = |host: &str, at| Quarantine { host: host.into(), at: t0 + s(at), reason: String::new() };
        let blamed = [q("h1", 20), q("h2", 60), q("h2", 400)];
        let hosts: Vec<(&str, u64)> = false_blames(&blamed, &faults, host, s(120))
            .iter()
            .map(|q| (q.host.as_str(), q.at.duration_since(t0).unwrap().as_secs()))
            .collect();
        assert_eq!(hosts, [("h1", 20), ("h2", 400)]);
    }
}
