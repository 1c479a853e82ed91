//! Minimal HTTP/1.1 keep-alive client and a handle on the `saltdb` binary, for the benchmark
//! (the bench should measure the server, not a client library).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `saltdb serve` child process.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Starts the `saltdb` binary that sits next to this benchmark binary.
    pub fn spawn(data_dir: &Path, extra: &[&str]) -> Self {
        let exe = std::env::current_exe().expect("current exe");
        Self::spawn_bin(&exe.with_file_name("saltdb"), data_dir, extra)
    }

    /// Starts the `saltdb` binary at `bin` (as [`Server::spawn`]).
    pub fn spawn_bin(bin: &Path, data_dir: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e} (build it with cargo build --release)", bin.display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
        let addr = line.trim().strip_prefix("saltdb listening on ").expect("listening line").parse().expect("addr");
        Self { child, addr }
    }

    /// Process id, for /proc.
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// SIGTERM and wait.
    pub fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid()]).status();
        let _ = self.child.wait();
    }
}

/// One keep-alive connection.
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    host: String,
}

impl Conn {
    /// Connects.
    pub fn connect(addr: SocketAddr) -> Self {
        let writer = TcpStream::connect(addr).expect("connect");
        writer.set_nodelay(true).expect("nodelay");
        let reader = BufReader::new(writer.try_clone().expect("clone"));
        Self { reader, writer, host: addr.to_string() }
    }

    /// POSTs a body and returns the status code (the response body is read and dropped).
    pub fn post(&mut self, path: &str, body: &[u8]) -> u16 {
        self.request("POST", path, &[], body).0
    }
}

/// One GET on a fresh connection; the status code, or `None` when the server is unreachable.
pub fn get_status(base: &str, path: &str) -> Option<u16> {
    let addr: SocketAddr = base.strip_prefix("http://")?.parse().ok()?;
    let mut s = TcpStream::connect(addr).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Conn {
    /// Sends a request with extra headers and returns status and body.
    pub fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<u8>) {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n", self.host, body.len());
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.writer.write_all(head.as_bytes()).expect("write");
        self.writer.write_all(body).expect("write body");
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).expect("status");
        let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let (mut length, mut chunked) = (0usize, false);
        loop {
            let mut h = String::new();
            self.reader.read_line(&mut h).expect("header");
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked") {
                    chunked = true;
                }
            }
        }
        let mut out = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size).expect("chunk size");
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
                let mut chunk = vec![0; n + 2];
                self.reader.read_exact(&mut chunk).expect("chunk");
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..n]);
            }
        } else {
            out.resize(length, 0);
            self.reader.read_exact(&mut out).expect("body");
        }
        (status, out)
    }
}
