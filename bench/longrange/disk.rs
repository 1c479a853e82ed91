//! Bytes on disk of a running server's data directory, as `du` counts them (allocated blocks of
//! the whole tree), over time and by subdirectory.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// One `du` of a data directory, `secs` after ingest stopped.
#[derive(Clone, Copy, Debug)]
pub(super) struct DiskPoint {
    pub(super) secs: u64,
    pub(super) bytes: u64,
}

pub(super) fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Measures `dir` right away, then every `every` until `watch` has passed since `since` (the
/// end of ingest), printing each figure as it comes.
pub(super) fn watch(name: &str, dir: &Path, samples: u64, since: Instant, watch: Duration) -> Vec<DiskPoint> {
    let every = Duration::from_secs(10);
    let mut out = Vec::new();
    let mut next = Duration::ZERO;
    loop {
        let elapsed = since.elapsed();
        if elapsed < next {
            std::thread::sleep(next - elapsed);
        }
        let bytes = crate::dir_allocated_bytes(dir);
        let secs = since.elapsed().as_secs();
        println!("  {name} +{secs:>4}s: {:>9.1} MB, {:.3} B/sample", mb(bytes), bytes as f64 / samples.max(1) as f64);
        out.push(DiskPoint { secs, bytes });
        if next >= watch {
            return out;
        }
        next = (next + every).min(watch);
    }
}

/// Allocated bytes of every file under `dir`, by path relative to it.
fn files(dir: &Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => {
                    let rel = e.path().strip_prefix(dir).map(|p| p.display().to_string()).unwrap_or_default();
                    out.push((rel, m.blocks() * 512));
                }
                Err(_) => {}
            }
        }
    }
    out
}

/// Prints where the bytes of `dir` are: each top-level entry, the biggest second-level
/// directories and the biggest files.
pub(super) fn breakdown(name: &str, dir: &Path) {
    let files = files(dir);
    let mut by_prefix: [HashMap<String, (u64, usize)>; 2] = Default::default();
    for (path, bytes) in &files {
        let parts: Vec<&str> = path.split('/').collect();
        for (depth, map) in by_prefix.iter_mut().enumerate() {
            // Only directories: a file at this depth is listed with the biggest files.
            if parts.len() > depth + 1 {
                let e = map.entry(parts.get(..=depth).unwrap_or_default().join("/")).or_default();
                e.0 += bytes;
                e.1 += 1;
            }
        }
    }
    let total: u64 = files.iter().map(|f| f.1).sum();
    println!("  {name}: where the {:.1} MB of files are (allocated bytes):", mb(total));
    let [top, second] = by_prefix;
    let show = |label: &str, map: HashMap<String, (u64, usize)>, n: usize| {
        let mut v: Vec<_> = map.into_iter().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1 .0));
        for (path, (bytes, count)) in v.into_iter().take(n) {
            println!("    {label} {path:<48} {:>9.1} MB in {count} files", mb(bytes));
        }
    };
    show("dir ", top, 12);
    show("dir ", second, 10);
    let mut biggest = files;
    biggest.sort_by_key(|f| std::cmp::Reverse(f.1));
    for (path, bytes) in biggest.into_iter().take(6) {
        println!("    file {path:<48} {:>9.1} MB", mb(bytes));
    }
}

/// Prints saltdb's own account of its bytes: fjall's disk space per table
/// (`/api/v1/status/storage`) and per window state (`/api/v1/status/windows`).
pub(super) fn saltdb_tables(addr: std::net::SocketAddr) {
    let get = |path: &str| -> serde_json::Value {
        crate::http_client::Conn::try_connect(addr, Some(Duration::from_secs(60)))
            .and_then(|mut c| c.try_request("GET", path, &[], b""))
            .ok()
            .and_then(|(_, body)| serde_json::from_slice(&body).ok())
            .unwrap_or_default()
    };
    let storage = get("/api/v1/status/storage");
    let mut tables: Vec<(String, u64)> = storage["data"]["tableBytes"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
        .unwrap_or_default();
    tables.sort_by_key(|t| std::cmp::Reverse(t.1));
    let shown: Vec<String> = tables.iter().map(|(name, b)| format!("{name} {:.1} MB", mb(*b))).collect();
    println!(
        "    saltdb's tables (diskBytes {:.1} MB): {}",
        mb(storage["data"]["diskBytes"].as_u64().unwrap_or(0)),
        shown.join(", ")
    );
    let windows = get("/api/v1/status/windows");
    let mut states: std::collections::BTreeMap<String, (usize, u64)> = Default::default();
    for w in windows["data"].as_array().map_or(&[][..], Vec::as_slice) {
        let e = states.entry(w["state"].as_str().unwrap_or("?").to_owned()).or_default();
        e.0 += 1;
        e.1 += w["bytes"].as_u64().unwrap_or(0);
    }
    let shown: Vec<String> = states.iter().map(|(s, (n, b))| format!("{n} {s} ({:.1} MB)", mb(*b))).collect();
    println!("    saltdb's windows: {}", shown.join(", "));
}
