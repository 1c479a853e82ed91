//! How a test that needs something outside the repository (a peer binary, the shared PromQL
//! scripts, root for a tmpfs mount) gives up: outside CI it passes after saying loudly that it
//! was skipped, under CI (`CI` set) it fails, because `.ci/run` provides everything.
//!
//! The line is written straight to the process's stderr, not through `eprintln!`: libtest
//! captures `print!`/`eprint!` output of passing tests, so a skip announced that way would be
//! invisible in a plain `cargo test`. Written directly, it shows between the test result lines
//! (and with `--nocapture` too), always in the form
//! `SKIPPED: <test>: <why>; <how to enable>`.

#![allow(dead_code)]

use std::io::Write;

/// True when the tests run under CI, where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Announces that `test` is skipped because of `why` (and `how` to enable it); panics instead
/// under CI. The caller returns early after it.
///
/// # Panics
/// When `CI` is set.
pub fn skip(test: &str, why: &str, how: &str) {
    let line = format!("SKIPPED: {test}: {why}; {how}");
    assert!(!in_ci(), "{line} (CI is set, so a skip is a failure: .ci/run must provide it)");
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n{line}");
    let _ = err.flush();
}
