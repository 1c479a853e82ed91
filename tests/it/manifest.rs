//! Bucket settings are fixed at creation: reopening with others fails clearly.

use crate::common::*;

#[test]
fn mismatched_manifest_settings_fail_naming_both_values() {
    let dir = tempfile::tempdir().unwrap();
    Binary::spawn(dir.path(), &["--buckets", "16", "--bucket-scheme", "hash"]).terminate();

    let err = Binary::try_spawn(dir.path(), &["--buckets", "32"]).err().expect("must refuse other bucket count");
    assert!(err.contains("buckets = 16") && err.contains("32"), "{err}");
    assert!(!err.contains("status Some(0)") && !err.contains("exit status: 0"), "must exit non-zero: {err}");

    let err = Binary::try_spawn(dir.path(), &["--bucket-scheme", "modulo"]).err().expect("must refuse other scheme");
    assert!(err.contains("hash") && err.contains("modulo"), "{err}");

    let err = Binary::try_spawn(dir.path(), &["--window", "2h"]).err().expect("must refuse other window");
    assert!(err.contains("1d") && err.contains("2h"), "{err}");

    // The original settings still open.
    Binary::spawn(dir.path(), &["--buckets", "16"]).terminate();
}

#[test]
fn modulo_scheme_and_other_bucket_counts_work() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(dir.path(), &["--buckets", "3", "--bucket-scheme", "modulo", "--retention", "0"]);
    let (body, expected) = dataset(50, 5, 1_700_000_000_000, "mod");
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    assert_eq!(export(&bin.url(""), r#"{__name__=~"mod_.*"}"#), expected);
    bin.terminate();
}

#[test]
fn help_documents_every_flag() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_saltdb")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--data-dir",
        "--buckets",
        "--bucket-scheme",
        "--window",
        "--retention",
        "--fsync",
        "--max-request-bytes",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}
