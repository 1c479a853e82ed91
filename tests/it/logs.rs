//! The server's log as an operator gets it: the real binary with stderr redirected to a file
//! and no `RUST_LOG`/`NO_COLOR` in its environment. Plain text without ANSI colours, none of the
//! storage library's per-keyspace INFO lines (unless `RUST_LOG` asks for them), and with
//! `--log-format json` one JSON object per line.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;

/// Starts the binary with a clean environment for logging: no `NO_COLOR`, `RUST_LOG` only when
/// given, stderr appended to `log`.
fn spawn(data: &Path, extra: &[&str], rust_log: Option<&str>, log: &Path) -> Binary {
    let stderr = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_saltdb"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--retention", "0", "--data-dir"])
        .arg(data)
        .args(extra)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr));
    if let Some(spec) = rust_log {
        cmd.env("RUST_LOG", spec);
    }
    let mut child = cmd.spawn().expect("spawn saltdb");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("saltdb listening on ")
        .unwrap_or_else(|| panic!("saltdb did not start: {}", std::fs::read_to_string(log).unwrap_or_default()));
    Binary { addr: addr.parse().unwrap(), child }
}

/// Two runs on one data directory (the second recovers keyspaces, which is where the storage
/// library logs one line per keyspace), with data written in between.
fn two_runs(extra: &[&str], rust_log: Option<&str>) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let (data, log) = (tmp.path().join("data"), tmp.path().join("saltdb.log"));
    let bin = spawn(&data, extra, rust_log, &log);
    let (body, _) = dataset(3, 4, recent_ms(), "logs");
    assert_eq!(import(&bin.url(""), body).0, 204);
    bin.terminate();
    let bin = spawn(&data, extra, rust_log, &log);
    assert_eq!(client().get(bin.url("/-/ready")).send().unwrap().status().as_u16(), 200);
    bin.terminate();
    std::fs::read_to_string(&log).unwrap()
}

fn is_storage_library(line: &str) -> bool {
    line.contains("fjall") || line.contains("lsm_tree")
}

#[test]
fn a_redirected_log_is_plain_text_without_the_storage_librarys_chatter() {
    let log = two_runs(&[], None);
    assert!(!log.contains("\x1b["), "ANSI escape codes in a log written to a file:\n{log}");
    assert_eq!(log.matches("INFO saltdb: saltdb listening").count(), 2, "{log}");
    let chatter: Vec<&str> = log.lines().filter(|l| is_storage_library(l)).collect();
    assert!(chatter.is_empty(), "storage library lines at the default level:\n{}", chatter.join("\n"));
}

#[test]
fn json_log_is_one_object_per_line_and_rust_log_still_decides_the_level() {
    // RUST_LOG=info lets the storage library's INFO lines through: they must be there (so the
    // default's silence above is the filter's doing), and be JSON like every other line.
    let log = two_runs(&["--log-format", "json"], Some("info"));
    let mut listening = 0;
    let mut storage = 0;
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line:?}"));
        assert!(v.is_object(), "{line}");
        assert!(v["level"].is_string() && v["timestamp"].is_string() && v["fields"].is_object(), "{line}");
        listening += usize::from(v["fields"]["message"] == "saltdb listening");
        storage += usize::from(v["level"] == "INFO" && is_storage_library(v["target"].as_str().unwrap_or("")));
    }
    assert_eq!(listening, 2, "{log}");
    assert!(storage > 0, "RUST_LOG=info should show the storage library's INFO lines:\n{log}");
}

#[test]
fn rust_log_target_directives_reach_debug_and_hide_info() {
    // `warn` by default, debug for the storage module: the head flush at shutdown logs at
    // debug, the listening line at info.
    let log = two_runs(&[], Some("warn,saltdb::storage=debug"));
    assert!(log.contains("DEBUG saltdb::storage::write::flush: flushed head shards"), "{log}");
    assert!(!log.contains("saltdb listening"), "an INFO line past RUST_LOG=warn:\n{log}");
    assert!(!log.contains("ignoring RUST_LOG"), "{log}");
    // An invalid RUST_LOG is reported and replaced by the default.
    let log = two_runs(&[], Some("saltdb=loud"));
    assert!(log.contains("ignoring RUST_LOG=\"saltdb=loud\""), "{log}");
    assert_eq!(log.matches("saltdb listening").count(), 2, "{log}");
}
