//! The goodput soak's 3-minute form (issue 41): one torchrun job on 4 nodes and a spare, a
//! fault of another kind every 35 s, with herd's defaults but for the restarts, the spare and
//! the checkpoint interval (a hang is found by the default `restart.stall_timeout`). The run
//! must keep training through all of them, blame no healthy node, and leave nothing behind. The bench's `soak`
//! scenario is the long form, side by side with torchrun's elastic agent and a shell loop.

use std::time::{Duration, Instant};

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
    let start = Instant::now();
    // torch's imports on 5 namespaces sharing two cores: generous.
    assert!(run.until(Duration::from_secs(240), || soak::progress(&dir).is_some()), "training never started");
    let kinds = [Fault::Kill, Fault::Segv, Fault::Stop, Fault::Cut, Fault::Reboot];
    let plan = soak::schedule(
        41,
        start.elapsed() + Duration::from_secs(10),
        Duration::from_secs(35),
        LENGTH,
        &kinds,
        1,
    );
    let mut injector = Injector::new(&cluster.tb, (0..5).collect());
    soak::run_schedule(&mut injector, &plan, start, LENGTH, || false);
    injector.heal_all();
    // The last fault's recovery: training goes on past where it was when the last came.
    let at_last = soak::progress(&dir).map_or(0, |(s, _)| s);
    let resumed =
        run.until(Duration::from_secs(180), || soak::progress(&dir).is_some_and(|(s, _)| s > at_last + 5));
    let wall = start.elapsed();
    let kept = soak::kept(&dir, Duration::from_secs(5));
    std::fs::write(&until, "").unwrap();
    let out = run.wait(wall + Duration::from_secs(240));
    let events = herd::events(&herd::only_run_dir(&cluster.logs()));
    let injected = &injector.injected;
    let kinds_met: std::collections::BTreeSet<Fault> = injected.iter().map(|i| i.fault).collect();
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
    assert!(false_blames.is_empty(), "healthy nodes blamed: {false_blames:?}\n{out}");
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
    fn a_blame_is_false_unless_a_fault_of_that_node_came_just_before() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = Duration::from_secs;
        let injected =
            |fault, node, at| Injected { at: s(at), wall: t0 + s(at), fault, node, what: String::new() };
        let faults = [injected(Fault::Kill, 1, 10), injected(Fault::Cut, 2, 50)];
        let host = |n: usize| format!("h{n}");
        let blamed =
            [("h1".to_string(), t0 + s(20)), ("h2".to_string(), t0 + s(60)), ("h2".to_string(), t0 + s(400))];
        assert_eq!(false_blames(&blamed, &faults, host, s(120)), ["h1", "h2"]);
    }
}
