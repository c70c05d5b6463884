//! `herd run --metrics`: a real Prometheus scrapes a run that fails once and restarts, and
//! `promtool check metrics` lints what it scraped; an address that cannot be listened on is
//! a warning, and the run goes on. Both nodes use the local transport: the metrics are the
//! launch host's.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::herd;

const LIMIT: Duration = Duration::from_secs(120);

/// Two local nodes printing a step every 0.2 s for `secs`; in the first attempt (0), node 1
/// fails after 2 s (exit 3, a `user` failure, restarted here), so that attempt 1 is a restart.
fn write_config(path: &Path, secs: u32) {
    let steps = secs * 5;
    let script = format!(
        "if [ \"$HERD_ATTEMPT\" = 0 ] && [ \"$NODE_RANK\" = 1 ]; then sleep 2; exit 3; fi; \
         i=0; while [ $i -lt {steps} ]; do i=$((i+1)); echo \"step $i\"; sleep 0.2; done"
    );
    let text = format!(
        "[[nodes]]\nhost = \"localhost\"\n[[nodes]]\nhost = \"127.0.0.1\"\n\
         [job]\nlauncher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", '{script}']\n\
         [restart]\nmax_restarts = 2\non = [\"user\"]\nbackoff = \"1s\"\nbackoff_max = \"1s\"\n"
    );
    std::fs::write(path, text).unwrap();
}

/// A port free on loopback now (the kernel's pick, released for the caller to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The body of `GET path` from `port` on loopback, if it answered 200.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// A Prometheus scraping `target` every second, its data under `dir`, its API on `port`;
/// killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, target: u16) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: herd\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian: apt-get install prometheus; scripts/test.sh installs it)");
        Prometheus { child, port }
    }

    /// The value of the instant query `query` (one series, no spaces in it), if it has one.
    fn value(&self, query: &str) -> Option<f64> {
        let body = get(self.port, &format!("/api/v1/query?query={query}"))?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_the_attempts_the_restart_and_the_training() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("m.toml");
    write_config(&config, 20);
    let port = free_port();
    let prometheus = Prometheus::start(tmp.path(), port);
    let addr = format!("127.0.0.1:{port}");
    let mut run = herd::start(
        tmp.path(),
        &["run", "--no-preflight", "--metrics", &addr, "-c", config.to_str().unwrap()],
        &[],
    );

    // Prometheus has scraped the second attempt, its restart, and training in it.
    let mut last = None;
    let scraped = run.until(LIMIT, || {
        let now = (
            prometheus.value("herd_attempts_total"),
            prometheus.value("sum(herd_restarts_total)"),
            prometheus.value("herd_training_seconds_total"),
            prometheus.value("herd_nodes{state=\"active\"}"),
        );
        last = Some(now);
        matches!(now, (Some(a), Some(r), Some(t), Some(n)) if a == 2.0 && r == 1.0 && t > 1.0 && n == 2.0)
    });
    let log = std::fs::read_to_string(tmp.path().join("prometheus.log")).unwrap_or_default();
    assert!(scraped, "(attempts, restarts, training s, active nodes) last queried: {last:?}\n{log}");
    assert_eq!(prometheus.value("up{job=\"herd\"}"), Some(1.0));
    let progress = prometheus.value("herd_last_progress_timestamp_seconds").unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now - progress).abs() < 30.0, "the last step's time: {progress}, now {now}");
    assert!(prometheus.value("process_resident_memory_bytes").unwrap() > 1e6);

    // What it scraped passes Prometheus' own lint.
    let page = get(port, "/metrics").expect("herd still serves /metrics");
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    promtool.stdin.take().unwrap().write_all(page.as_bytes()).unwrap();
    let lint = promtool.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&lint.stdout), String::from_utf8_lossy(&lint.stderr));
    assert!(lint.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{page}");

    let out = run.wait(LIMIT);
    out.assert_code(0);
    assert!(out.stderr.contains(&format!("herd: metrics at http://{addr}/metrics")), "{out}");
}

#[test]
fn a_taken_port_is_a_warning_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("m.toml");
    write_config(&config, 1);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let config = config.to_str().unwrap();
    let out = herd::run(tmp.path(), &["run", "--no-preflight", "--metrics", &addr, "-c", config], LIMIT);
    out.assert_code(0);
    let warning = format!("herd: warning: --metrics {addr}: cannot listen (Address already in use");
    assert!(out.stderr.contains(&warning), "{out}");
    assert!(out.stderr.contains("the run goes on without metrics"), "{out}");

    // Not an address at all: a usage error before anything starts.
    let runs = || std::fs::read_dir(tmp.path().join("herd-logs")).unwrap().count();
    let before = runs();
    let out = herd::run(tmp.path(), &["run", "--no-preflight", "--metrics", "nowhere", "-c", config], LIMIT);
    out.assert_code(2);
    assert!(out.stderr.contains("--metrics: not an address"), "{out}");
    assert_eq!(runs(), before, "no run started: {out}");
}
