//! A full disk: writes fail with 5xx, reads keep working, and nothing acknowledged is lost
//! once space returns. The data directory lives on a small tmpfs mounted for the test (needs
//! root, which CI has). Without it the test prints a `SKIPPED:` line and passes outside CI, and
//! fails under `CI` (see [`crate::skip`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

const TEST: &str = "disk_full::a_full_disk_fails_writes_keeps_reads_and_loses_nothing_acknowledged";
const HOW: &str = "run the tests as root (mount -t tmpfs), as CI does";

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(at).output();
        match out {
            Ok(o) if o.status.success() => Some(Self(at.to_path_buf())),
            Ok(o) => {
                let why = format!("cannot mount a tmpfs: {}", String::from_utf8_lossy(&o.stderr).trim());
                crate::skip::skip(TEST, &why, HOW);
                None
            }
            Err(e) => {
                crate::skip::skip(TEST, &format!("cannot run mount: {e}"), HOW);
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system at `dir` with a ballast file, leaving about `leave` bytes free.
fn fill(dir: &Path, leave: u64) -> PathBuf {
    use std::io::Write;
    let ballast = dir.join("ballast");
    let mut f = std::fs::File::create(&ballast).unwrap();
    let block = vec![0xA5u8; 64 << 10];
    loop {
        let free = free_bytes(dir);
        if free <= leave + block.len() as u64 {
            break;
        }
        if f.write_all(&block).is_err() {
            break;
        }
    }
    let _ = f.sync_all();
    ballast
}

fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df").args(["-B1", "--output=avail"]).arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().nth(1).and_then(|l| l.trim().parse().ok()).unwrap_or(0)
}

#[test]
fn a_full_disk_fails_writes_keeps_reads_and_loses_nothing_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(&tmp.path().join("mnt"), "48m") else { return };
    let data = fs.0.join("data");
    let bin = Binary::spawn(&data, &["--retention", "0", "--fsync", "always"]);
    let base = bin.url("");
    let mut acked = Exported::new();
    let (first, expected) = dataset(50, 20, 1_700_000_000_000, "before_full");
    assert_eq!(import(&base, first).0, 204);
    acked.extend(expected);

    let ballast = fill(&fs.0, 256 << 10);
    // Write until the disk refuses; every 204 is recorded as acknowledged.
    let mut refusals = Vec::new();
    for round in 0..200 {
        let (body, expected) = dataset(40, 50, 1_700_000_000_000 + round * 3_600_000, &format!("fill_{round}"));
        let (status, text) = import(&base, body);
        match status {
            204 => acked.extend(expected),
            s if s >= 500 => {
                refusals.push((s, text));
                if refusals.len() >= 3 {
                    break;
                }
            }
            s => panic!("unexpected {s}: {text}"),
        }
    }
    assert!(!refusals.is_empty(), "the disk never filled up");
    for (status, text) in &refusals {
        assert!(*status == 500 || *status == 503, "{status}: {text}");
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["status"], "error", "{text}");
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
    // Reads keep working while the disk is full.
    assert_eq!(export(&base, r#"{__name__=~"(before_full|fill_[0-9]+)_.*"}"#), acked);
    let q = client()
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", "count(before_full_metric_0)"), ("time", "1700000100")])
        .send()
        .unwrap();
    assert_eq!(q.status().as_u16(), 200);
    let health = client().get(format!("{base}/-/healthy")).send().unwrap();
    assert_eq!(health.status().as_u16(), 200, "the process is alive");
    let ready = client().get(format!("{base}/-/ready")).send().unwrap();
    assert_eq!(ready.status().as_u16(), 503, "not ready for writes");
    assert!(ready.text().unwrap().contains("No space left"), "the reason is shown");

    // Space returns; a restart brings back everything acknowledged and accepts writes again.
    std::fs::remove_file(ballast).unwrap();
    let (retry, _) = dataset(2, 2, 1_700_400_000_000, "retry_after_space");
    let (status, text) = import(&base, retry);
    println!(
        "disk full: {} acknowledged series, refusals {refusals:?}; after space returned: {status} {text}",
        acked.len()
    );
    // Until restarted, writes stay refused with the reason (fjall poisons itself after a
    // failed journal write, so saltdb does not pretend to recover in place).
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("restart"), "{text}");
    bin.kill9();
    let bin = Binary::spawn(&data, &["--retention", "0", "--fsync", "always"]);
    let base = bin.url("");
    assert_eq!(export(&base, r#"{__name__=~"(before_full|fill_[0-9]+)_.*"}"#), acked);
    let (after, expected) = dataset(5, 5, 1_700_500_000_000, "after_full");
    assert_eq!(import(&base, after).0, 204);
    assert_eq!(export(&base, r#"{__name__=~"after_full_.*"}"#), expected);
    bin.terminate();
}
