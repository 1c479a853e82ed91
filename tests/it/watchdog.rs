//! A hung test fails the run with its name instead of holding CI until its deadline.
//!
//! Every harness entry point (servers in-process and as the binary, the HTTP client, the peers)
//! calls [`watch`], which notes the calling test (libtest names each test's thread after the
//! test) and when it was first seen. The note is dropped when the test's thread ends. One
//! watchdog thread looks at the notes every few seconds; a test seen for longer than
//! [`TEST_LIMIT`] is named on stderr, with every test still running, and the whole binary is
//! aborted: a hang then costs [`TEST_LIMIT`], not the CI budget, and the log says where it was.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// Far beyond what any test takes on two cores with the others running beside it (an
/// integration test stays under a minute there, a PromQL conformance run on ClickHouse under
/// ten), and early enough to leave CI time to report; `SALTDB_TEST_LIMIT_S` overrides it.
const TEST_LIMIT: Duration = Duration::from_secs(30 * 60);

/// Tests being watched, by name, with when each was first seen.
static RUNNING: Mutex<BTreeMap<String, Instant>> = Mutex::new(BTreeMap::new());

/// Removes its test from [`RUNNING`] when the test's thread ends.
struct Watched(String);

impl Drop for Watched {
    fn drop(&mut self) {
        RUNNING.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.0);
    }
}

thread_local! {
    static THIS_TEST: RefCell<Option<Watched>> = const { RefCell::new(None) };
}

/// Watches the calling test from now on; threads that are not a test's (tokio workers, a
/// test's own helpers) are left alone, and a test already watched keeps its first time.
pub fn watch() {
    static WATCHDOG: Once = Once::new();
    WATCHDOG.call_once(|| {
        let limit = std::env::var("SALTDB_TEST_LIMIT_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(TEST_LIMIT, Duration::from_secs);
        std::thread::Builder::new()
            .name("test-watchdog".into())
            .spawn(move || patrol(limit))
            .expect("spawn the test watchdog");
    });
    let current = std::thread::current();
    let Some(name) = current.name().filter(|n| n.contains("::")) else { return };
    // `try_with`: a call from a thread-local destructor at thread exit is not watched.
    let _ = THIS_TEST.try_with(|t| {
        let mut t = t.borrow_mut();
        if t.is_none() {
            RUNNING.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), Instant::now());
            *t = Some(Watched(name.to_string()));
        }
    });
}

fn patrol(limit: Duration) {
    loop {
        std::thread::sleep(Duration::from_secs(5));
        let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some((late, _)) = running.iter().find(|(_, since)| since.elapsed() > limit) else { continue };
        let mut report =
            format!("\nwatchdog: test {late} has run for more than {} s; aborting the run\n", limit.as_secs());
        report.push_str("watchdog: tests still running:\n");
        for (name, since) in &running {
            report.push_str(&format!("watchdog:   {name} ({} s)\n", since.elapsed().as_secs()));
        }
        report.push_str(&format!("watchdog: threads of this process: {}\n", thread_names().join(", ")));
        // Straight to the file descriptors: `eprint!` in a thread spawned by a test goes to
        // that test's captured output, which the abort throws away.
        let _ = std::io::stderr().write_all(report.as_bytes());
        let _ = std::io::stdout().write_all(report.as_bytes());
        let _ = std::io::stdout().flush();
        std::process::abort();
    }
}

/// The (kernel-truncated) names of this process' threads, to name a hung test that never
/// reached the harness.
fn thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut names: Vec<String> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.contains("::"))
        .collect();
    names.sort();
    names
}
