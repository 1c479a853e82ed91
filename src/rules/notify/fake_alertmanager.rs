//! A stand-in Alertmanager for the notifier's unit tests: an HTTP/1.1 listener on loopback that
//! records every request, answers the statuses it is told to (200 otherwise), and can hold its
//! answers back to keep the sender busy.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Post {
    pub path: String,
    pub content_type: String,
    /// The `X-Scope-OrgID` header, empty when absent.
    pub tenant: String,
    pub body: String,
}

#[derive(Default)]
struct Inner {
    posts: Vec<Post>,
    statuses: VecDeque<u16>,
    held: bool,
}

#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
    stopped: AtomicBool,
}

pub struct FakeAlertmanager {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
}

impl FakeAlertmanager {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let serving = Arc::clone(&accepting);
                std::thread::spawn(move || serve(stream, &serving));
            }
        });
        Self { addr, shared }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next answers, in order; 200 after them.
    pub fn answer_next(&self, statuses: &[u16]) {
        self.shared.inner.lock().unwrap().statuses.extend(statuses);
    }

    /// Holds every answer back until [`Self::release`].
    pub fn hold(&self) {
        self.shared.inner.lock().unwrap().held = true;
    }

    pub fn release(&self) {
        self.shared.inner.lock().unwrap().held = false;
        self.shared.changed.notify_all();
    }

    pub fn posts(&self) -> Vec<Post> {
        self.shared.inner.lock().unwrap().posts.clone()
    }

    /// The requests once there are `n` (or whatever came within 10 s).
    pub fn wait_for_posts(&self, n: usize) -> Vec<Post> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut inner = self.shared.inner.lock().unwrap();
        while inner.posts.len() < n {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
            inner = self.shared.changed.wait_timeout(inner, left).unwrap().0;
        }
        inner.posts.clone()
    }
}

impl Drop for FakeAlertmanager {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.release();
        let _ = TcpStream::connect(self.addr);
    }
}

/// Answers the requests of one connection until the client closes it.
fn serve(stream: TcpStream, shared: &Shared) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(post) = read_request(&mut reader) {
        let status = {
            let mut inner = shared.inner.lock().unwrap();
            inner.posts.push(post);
            shared.changed.notify_all();
            while inner.held && !shared.stopped.load(Ordering::SeqCst) {
                inner = shared.changed.wait(inner).unwrap();
            }
            inner.statuses.pop_front().unwrap_or(200)
        };
        let answer = format!("HTTP/1.1 {status} Fake\r\nContent-Length: 0\r\n\r\n");
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Post> {
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|&n| n > 0)?;
    let path = line.split_whitespace().nth(1)?.to_owned();
    let (mut length, mut content_type, mut tenant) = (0, String::new(), String::new());
    loop {
        line.clear();
        reader.read_line(&mut line).ok().filter(|&n| n > 0)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "content-type" => content_type = value.trim().to_owned(),
            "x-scope-orgid" => tenant = value.trim().to_owned(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Post { path, content_type, tenant, body: String::from_utf8(body).ok()? })
}
