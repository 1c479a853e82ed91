//! Replays every saved fuzz input under `tests/fuzz_regressions/<target>/` through the same entry
//! calls as the fuzz targets (`fuzz/src/lib.rs`, included below), on the stable toolchain. Each
//! file is a crash the fuzzer once found (or a hand-made tricky input); the test passes when every
//! call returns, Ok or Err, without panicking.

#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no regression inputs for {target}");
    for file in files {
        let data = std::fs::read(&file).unwrap();
        let started = Instant::now();
        let result = std::panic::catch_unwind(|| harness::run(target, &data));
        match result {
            Ok(known) => assert!(known, "unknown target {target}"),
            Err(_) => panic!("{target}: {} panicked", file.display()),
        }
        // Debug builds are slow, but no saved input may come close to a multi-second hang.
        let took = started.elapsed();
        assert!(took < Duration::from_secs(20), "{target}: {} took {took:?}", file.display());
    }
}

#[test]
fn every_target_has_a_folder_and_no_folder_is_unknown() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    for entry in std::fs::read_dir(&root).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(harness::TARGETS.contains(&name.as_str()), "folder {name} matches no fuzz target");
    }
    for target in harness::TARGETS {
        assert!(root.join(target).is_dir(), "missing folder for {target}");
    }
}

#[test]
fn remote_write_v1() {
    replay("remote_write_v1");
}

#[test]
fn remote_write_v2() {
    replay("remote_write_v2");
}

#[test]
fn import_lines() {
    replay("import_lines");
}

#[test]
fn promql() {
    replay("promql");
}

#[test]
fn promql_times() {
    replay("promql_times");
}

#[test]
fn chunk_decode() {
    replay("chunk_decode");
}

#[test]
fn histogram_chunk() {
    replay("histogram_chunk");
}

#[test]
fn chunk_roundtrip() {
    replay("chunk_roundtrip");
}

#[test]
fn influx_lines() {
    replay("influx_lines");
}

#[test]
fn opentsdb_put() {
    replay("opentsdb_put");
}

#[test]
fn prometheus_text() {
    replay("prometheus_text");
}

#[test]
fn otlp_metrics() {
    replay("otlp_metrics");
}

#[test]
fn clickhouse_rowbinary() {
    replay("clickhouse_rowbinary");
}
