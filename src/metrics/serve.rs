//! `/metrics` over HTTP while the run lives: one thread that answers each scrape with the
//! page `Metrics::render` writes, and herd's own process as `/proc/self` tells it then.
//! One connection at a time, each with a time limit: a scraper that stalls delays the next
//! scrape, never the run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Metrics, Process};

/// How long a scraper has to send its whole request, and to take the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The wait after a failed accept.
const ACCEPT_RETRY: Duration = Duration::from_millis(200);

/// The largest request read: a scrape's is a few hundred bytes.
const MAX_REQUEST: usize = 8 << 10;

/// The address `--metrics` names: `HOST:PORT`, `:PORT` (every interface, as exporters
/// listen) or `PORT`.
pub fn parse_addr(addr: &str) -> Result<SocketAddr, String> {
    let full = match addr {
        a if a.starts_with(':') => format!("0.0.0.0{a}"),
        a if !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()) => format!("0.0.0.0:{a}"),
        a => a.to_string(),
    };
    let resolved = full.to_socket_addrs().map_err(|e| format!("not an address ({e})"))?.next();
    resolved.ok_or_else(|| "not an address".to_string())
}

/// Listens on `addr` and answers scrapes from a thread of its own, for as long as herd
/// runs. The error says why it cannot listen (the caller warns; the run goes on).
pub fn start(addr: SocketAddr, metrics: Arc<Mutex<Metrics>>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    std::thread::Builder::new().name("herd-metrics".into()).spawn(move || loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = answer(stream, &metrics);
            }
            // Out of descriptors, say: the connection stays queued and accept fails at once
            // until one is free, so wait rather than spin.
            Err(_) => std::thread::sleep(ACCEPT_RETRY),
        }
    })?;
    Ok(local)
}

fn answer(mut stream: TcpStream, metrics: &Mutex<Metrics>) -> std::io::Result<()> {
    // One deadline for the whole request: a client that trickles a byte at a time does not
    // hold the thread longer than it.
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    let ended = |r: &[u8]| r.windows(4).any(|w| w == b"\r\n\r\n") || r.windows(2).any(|w| w == b"\n\n");
    while !ended(&request) && request.len() < MAX_REQUEST {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf)? {
            0 => break,
            n => request.extend_from_slice(&buf[..n]),
        }
    }
    let line = request.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let process = process();
            let page = metrics.lock().unwrap_or_else(|e| e.into_inner()).render(SystemTime::now(), &process);
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", page)
        }
        ("GET" | "HEAD", "/") => {
            ("200 OK", "text/plain; charset=utf-8", "herd: the run's metrics are at /metrics\n".into())
        }
        ("GET" | "HEAD", _) => {
            ("404 Not Found", "text/plain; charset=utf-8", "not found: try /metrics\n".into())
        }
        _ => ("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET\n".into()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if method != "HEAD" {
        stream.write_all(body.as_bytes())?;
    }
    stream.flush()
}

/// herd's own process, from /proc/self (Linux); what cannot be read is left at 0 or `None`.
pub fn process() -> Process {
    let page = page_size();
    let mut p = Process::default();
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
        let mut fields = statm.split_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
        p.virtual_bytes = fields.next().unwrap_or(0) * page;
        p.resident_bytes = fields.next().unwrap_or(0) * page;
    }
    p.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    p.max_fds = crate::limits::soft().filter(|&soft| soft != libc::RLIM_INFINITY);
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // The fields after the command's closing parenthesis: utime and stime are the 12th
        // and 13th of them, starttime the 20th (proc(5), counted from state).
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<u64> = after.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
        let ticks = clock_ticks();
        if fields.len() > 19 && ticks > 0.0 {
            p.cpu_seconds = (fields[11] + fields[12]) as f64 / ticks;
            p.start_time = boot_time().map(|boot| boot + Duration::from_secs_f64(fields[19] as f64 / ticks));
        }
    }
    p
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as f64
    } else {
        100.0
    }
}

/// When the machine booted (`btime` of /proc/stat).
fn boot_time() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs = stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_may_leave_out_its_host() {
        assert_eq!(parse_addr("127.0.0.1:9400").unwrap(), "127.0.0.1:9400".parse().unwrap());
        assert_eq!(parse_addr(":9400").unwrap(), "0.0.0.0:9400".parse().unwrap());
        assert_eq!(parse_addr("9400").unwrap(), "0.0.0.0:9400".parse().unwrap());
        assert_eq!(parse_addr("[::1]:9400").unwrap(), "[::1]:9400".parse().unwrap());
        assert!(parse_addr("nowhere").is_err());
        assert!(parse_addr("").is_err());
        assert!(parse_addr("127.0.0.1:99999").is_err());
    }

    #[test]
    fn a_scrape_gets_the_page_and_anything_else_a_404() {
        let metrics = Arc::new(Mutex::new(Metrics::new()));
        let addr = start("127.0.0.1:0".parse().unwrap(), metrics).unwrap();
        let get = |path: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let page = get("/metrics");
        assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
        assert!(page.contains("Content-Type: text/plain; version=0.0.4"), "{page}");
        assert!(page.contains("\nherd_attempts_total 0\n"), "{page}");
        let resident = page.lines().find_map(|l| l.strip_prefix("process_resident_memory_bytes ")).unwrap();
        assert!(resident.parse::<f64>().unwrap() > 1e6, "herd's own RSS: {resident}");
        assert!(get("/other").starts_with("HTTP/1.1 404 "));
    }

    #[test]
    fn a_client_that_never_ends_its_request_holds_the_thread_at_most_the_timeout() {
        let addr = start("127.0.0.1:0".parse().unwrap(), Arc::new(Mutex::new(Metrics::new()))).unwrap();
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        let asked = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\n\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        assert!(asked.elapsed() < CLIENT_TIMEOUT * 3, "answered after the slow one gave up");
        drop(slow);
    }

    #[test]
    fn a_taken_port_is_an_error_to_warn_of() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let err = start(taken.local_addr().unwrap(), Arc::new(Mutex::new(Metrics::new()))).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    }
}
