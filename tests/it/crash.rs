//! `kill -9` right after a 204: every acknowledged sample is there after restart.

use crate::common::*;

#[test]
fn acknowledged_imports_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Exported::new();
    for round in 0..3 {
        let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
        let base = bin.url("");
        // Everything acknowledged before must still be there.
        assert_eq!(export(&base, r#"{__name__=~"crash_.*"}"#), expected, "after restart {round}");
        let (body, new) = dataset(200, 20, 1_700_000_000_000 + round * 3_600_000, &format!("crash_{round}"));
        assert_eq!(import(&base, body), (204, String::new()));
        expected.extend(new);
        bin.kill9();
    }
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    assert_eq!(export(&bin.url(""), r#"{__name__=~"crash_.*"}"#), expected);
    bin.terminate();
}
