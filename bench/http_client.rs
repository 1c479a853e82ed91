//! Minimal HTTP/1.1 keep-alive client and a handle on the `saltdb` binary, for the benchmark
//! (the bench should measure the server, not a client library).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Headers of a Prometheus remote-write 1.0 request (what Prometheus 2.x sends).
pub const REMOTE_WRITE_HEADERS: [(&str, &str); 3] = [
    ("Content-Encoding", "snappy"),
    ("Content-Type", "application/x-protobuf"),
    ("X-Prometheus-Remote-Write-Version", "0.1.0"),
];

/// How long [`Server::try_spawn_bin`] waits for the server to announce its address.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// A running `saltdb serve` child process, killed on drop (also when the bench panics).
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// The `saltdb` binary that sits next to this benchmark binary.
    pub fn default_bin() -> std::path::PathBuf {
        std::env::current_exe().expect("current exe").with_file_name("saltdb")
    }

    /// Starts the `saltdb` binary that sits next to this benchmark binary.
    pub fn spawn(data_dir: &Path, extra: &[&str]) -> Self {
        Self::spawn_bin(&Self::default_bin(), data_dir, extra)
    }

    /// Starts the `saltdb` binary at `bin` (as [`Server::spawn`]).
    pub fn spawn_bin(bin: &Path, data_dir: &Path, extra: &[&str]) -> Self {
        Self::try_spawn_bin(bin, data_dir, extra)
            .unwrap_or_else(|e| panic!("{e} (build it with cargo build --release)"))
    }

    /// Starts `bin serve --listen 127.0.0.1:0 --data-dir DATA_DIR EXTRA...` and waits (bounded)
    /// for the line announcing the address it bound.
    ///
    /// # Errors
    /// The binary cannot be started, exits or stays silent before announcing its address.
    pub fn try_spawn_bin(bin: &Path, data_dir: &Path, extra: &[&str]) -> Result<Self, String> {
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        // Read the announcement on a thread so a server that hangs cannot hang the bench.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        // From here on the child is killed on drop if anything fails.
        let mut server = Self { child, addr: SocketAddr::from(([127, 0, 0, 1], 0)) };
        let line = rx
            .recv_timeout(STARTUP_TIMEOUT)
            .map_err(|_| format!("{} did not announce its address within {STARTUP_TIMEOUT:?}", bin.display()))?;
        server.addr = line
            .trim()
            .strip_prefix("saltdb listening on ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("{} did not start (first line of output: {:?})", bin.display(), line.trim()))?;
        Ok(server)
    }

    /// Process id, for /proc.
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// SIGTERM and wait.
    pub fn stop(self) {
        let _ = self.stop_within(Duration::from_secs(24 * 3600));
    }

    /// SIGTERM, then waits up to `timeout` for the server to exit (it closes its storage on the
    /// way out); past that it is killed.
    ///
    /// # Errors
    /// The server did not exit in time (it was then killed), or waiting failed.
    pub fn stop_within(mut self, timeout: Duration) -> Result<ExitStatus, String> {
        let _ = Command::new("kill").args(["-TERM", &self.pid()]).status();
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                Ok(None) => return Err(format!("saltdb did not exit within {timeout:?} of SIGTERM; killed")),
                Err(e) => return Err(format!("waiting for saltdb: {e}")),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A no-op once the child has been waited for.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
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
        Self::try_connect(addr, None).expect("connect")
    }

    /// Connects; with a timeout, every read and write on the connection (and the connect) is
    /// bounded by it.
    ///
    /// # Errors
    /// The connection cannot be made.
    pub fn try_connect(addr: SocketAddr, timeout: Option<Duration>) -> std::io::Result<Self> {
        let writer = match timeout {
            Some(t) => TcpStream::connect_timeout(&addr, t)?,
            None => TcpStream::connect(addr)?,
        };
        writer.set_nodelay(true)?;
        writer.set_read_timeout(timeout)?;
        writer.set_write_timeout(timeout)?;
        let reader = BufReader::new(writer.try_clone()?);
        Ok(Self { reader, writer, host: addr.to_string() })
    }

    /// POSTs a body and returns the status code (the response body is read and dropped).
    pub fn post(&mut self, path: &str, body: &[u8]) -> u16 {
        self.request("POST", path, &[], body).0
    }
}

/// One GET on a fresh connection; the status code, or `None` when the server is unreachable or
/// does not answer within 5 s.
pub fn get_status(base: &str, path: &str) -> Option<u16> {
    let addr: SocketAddr = base.strip_prefix("http://")?.parse().ok()?;
    let timeout = Duration::from_secs(5);
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Conn {
    /// Sends a request with extra headers and returns status and body.
    ///
    /// # Panics
    /// On any I/O error (see [`Conn::try_request`]).
    pub fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<u8>) {
        self.try_request(method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// Sends a request with extra headers and returns status and body.
    ///
    /// # Errors
    /// I/O errors, timeouts (with [`Conn::try_connect`]'s timeout) and a connection closed before
    /// the response. The connection is unusable afterwards.
    pub fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n", self.host, body.len());
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.writer.write_all(head.as_bytes())?;
        self.writer.write_all(body)?;
        let mut status_line = String::new();
        if self.reader.read_line(&mut status_line)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed before a response"));
        }
        let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let (mut length, mut chunked) = (0usize, false);
        loop {
            let mut h = String::new();
            self.reader.read_line(&mut h)?;
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
                self.reader.read_line(&mut size)?;
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
                let mut chunk = vec![0; n + 2];
                self.reader.read_exact(&mut chunk)?;
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..n]);
            }
        } else {
            out.resize(length, 0);
            self.reader.read_exact(&mut out)?;
        }
        Ok((status, out))
    }
}

/// One request without a body on a fresh connection to `addr`, bounded by `timeout`: the body
/// of a 200, or an error naming the request and what went wrong.
pub fn request_ok(addr: SocketAddr, timeout: Duration, method: &str, path: &str) -> Result<Vec<u8>, String> {
    let mut conn = Conn::try_connect(addr, Some(timeout)).map_err(|e| format!("connect: {e}"))?;
    match conn.try_request(method, path, &[], b"") {
        Ok((200, body)) => Ok(body),
        Ok((status, body)) => Err(format!("{method} {path}: HTTP {status}: {}", excerpt(&body))),
        Err(e) => Err(format!("{method} {path}: {e}")),
    }
}

/// The first 300 characters of a response body, on one line.
pub fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(300).collect::<String>().replace('\n', " ")
}

/// Waits (at most `limit`) until the saltdb at `base` has sealed every window that closed more
/// than `grace_ms` (its `--ooo-grace`) ago, polling `/api/v1/status/windows`; prints how many
/// are sealed and how long it waited, or how many are still pending. Returns whether all were
/// sealed in time.
pub fn wait_until_sealed(name: &str, base: &str, grace_ms: i64, limit: Duration) -> bool {
    let Ok(addr) = base.trim_start_matches("http://").parse() else { return false };
    let started = Instant::now();
    loop {
        let answer = Conn::try_connect(addr, Some(Duration::from_secs(60)))
            .and_then(|mut c| c.try_request("GET", "/api/v1/status/windows", &[], b""));
        let (status, body) = answer.unwrap_or((0, Vec::new()));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let now = chrono::Utc::now().timestamp_millis();
        let windows = v["data"].as_array().cloned().unwrap_or_default();
        let pending = windows
            .iter()
            .filter(|w| w["end"].as_i64().is_some_and(|end| end + grace_ms < now) && w["state"] != "sealed")
            .count();
        if status == 200 && pending == 0 {
            let sealed = windows.iter().filter(|w| w["state"] == "sealed").count();
            println!(
                "{name}: {sealed} of {} windows sealed (waited {:.1}s)",
                windows.len(),
                started.elapsed().as_secs_f64()
            );
            return true;
        }
        if started.elapsed() > limit {
            println!("{name}: {pending} windows still unsealed after {limit:?}; measuring anyway");
            return false;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
