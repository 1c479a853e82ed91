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
        let bin = exe.with_file_name("saltdb");
        let mut child = Command::new(&bin)
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
        write!(self.writer, "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n", self.host, body.len())
            .expect("write");
        self.writer.write_all(body).expect("write body");
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).expect("status");
        let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let mut length = 0usize;
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
                }
            }
        }
        let mut sink = vec![0; length];
        self.reader.read_exact(&mut sink).expect("body");
        status
    }
}
