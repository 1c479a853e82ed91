//! `saltdb import` and `saltdb export` against a real server: files of JSON lines, Prometheus
//! text and line protocol (and stdin) in small batches, read back exactly; a bad line is named
//! with its file and line number; a server answering 503 is retried until it accepts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};

use crate::common::*;

fn saltdb() -> Command {
    Command::new(env!("CARGO_BIN_EXE_saltdb"))
}

#[test]
fn import_files_and_stdin_then_export_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(saltdb::storage::StorageConfig::new(dir.path().join("data")));
    let base = server.url("");
    let t = recent_ms();
    let json = dir.path().join("a.jsonl");
    let mut body = String::new();
    for i in 0..300 {
        body.push_str(&format!(
            "{{\"metric\":{{\"__name__\":\"bf_json\",\"i\":\"{i}\"}},\"values\":[1,2],\"timestamps\":[{t},{}]}}\n",
            t + 15_000
        ));
    }
    std::fs::write(&json, body).unwrap();
    let prom = dir.path().join("b.prom");
    std::fs::write(&prom, format!("# TYPE bf_text gauge\nbf_text{{k=\"v\"}} 7 {t}\n")).unwrap();
    let lp = dir.path().join("c.lp");
    std::fs::write(&lp, format!("bf_lp,host=a x=1,y=2i {}000000\n", t)).unwrap();
    let out =
        saltdb().args(["import", "--url", &base, "--batch-bytes", "4KiB"]).args([&json, &prom, &lp]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("imported 603 samples"), "{stderr}");
    // stdin, format sniffed from the first line.
    let mut child =
        saltdb().args(["import", "--url", &base, "-"]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(format!("bf_stdin 3 {t}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let all = export(&base, r#"{__name__=~"bf_.+"}"#);
    assert_eq!(all.len(), 300 + 1 + 2 + 1);
    assert_eq!(all.values().map(Vec::len).sum::<usize>(), 600 + 4);
    // saltdb export writes the same lines the HTTP export gives.
    let file = dir.path().join("out.jsonl");
    let out = saltdb()
        .args(["export", "--url", &base, "--match", r#"{__name__=~"bf_.+"}"#, "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(parse_lines(&std::fs::read_to_string(&file).unwrap()), all);

    // A bad line: named with its file and line, nothing of its batch sent.
    let bad = dir.path().join("bad.prom");
    std::fs::write(&bad, format!("bf_bad 1 {t}\nbf_bad{{x=1}} 2 {t}\n")).unwrap();
    let out = saltdb().args(["import", "--url", &base]).arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("bad.prom: line 2") && stderr.contains("not quoted"), "{stderr}");
    assert!(export(&base, "bf_bad").is_empty());
    server.stop();
}

/// A stand-in server that answers 503 (`Retry-After: 0`) twice, then 204, recording bodies.
#[test]
fn a_busy_server_is_retried_until_it_accepts() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        for attempt in 0..3 {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                line.clear();
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            bodies.push(String::from_utf8(body).unwrap());
            let answer = if attempt < 2 {
                "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy"
            } else {
                "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
            };
            (&stream).write_all(answer.as_bytes()).unwrap();
        }
        bodies
    });
    let out = saltdb()
        .args(["import", "--url", &format!("http://{addr}"), "--format", "prometheus", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(b"m 1 1700000000000\n")?;
            c.wait_with_output()
        })
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("1 samples in 1 requests") && stderr.contains("2 retries"), "{stderr}");
    let bodies = serving.join().unwrap();
    assert_eq!(bodies, vec!["m 1 1700000000000\n"; 3]);
}
