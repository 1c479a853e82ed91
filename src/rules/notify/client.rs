//! One Alertmanager as the notifier posts to it: `POST <base>/api/v2/alerts` with a JSON array of
//! alerts, any 2xx is success (as Prometheus' `sendOne`).
//!
//! Unlike Prometheus 2.42, which tries once, a post that may succeed later (unreachable, timed
//! out, 429, 5xx) is tried again after 100 ms, 200 ms, 400 ms, ... (at most 5 s apart), at most
//! [`MAX_ATTEMPTS`] times and never past the caller's deadline; other answers (a 4xx: the alerts
//! are invalid) are final.

use std::time::{Duration, Instant};

/// The path alerts are posted to, under an Alertmanager's base URL.
pub const ALERTS_PATH: &str = "/api/v2/alerts";

/// Most tries of one post.
pub const MAX_ATTEMPTS: u32 = 5;

/// The wait before the first retry; it doubles after each.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait between two tries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// An Alertmanager address the notifier cannot post to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("alertmanager URL {url:?}: expected http://host:port[/prefix] (https is not supported)")]
pub struct UrlError {
    /// The address as configured.
    pub url: String,
}

/// A post that did not succeed, after every try it was allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No answer: connection refused or reset, or no answer before the deadline.
    #[error("posting to {url}: {detail} ({attempts} attempts)")]
    Unreachable {
        /// Where the alerts were posted.
        url: String,
        /// The transport's error.
        detail: String,
        /// Tries made.
        attempts: u32,
    },
    /// An answer other than 2xx.
    #[error("posting to {url}: bad response status {status}: {body} ({attempts} attempts)")]
    Status {
        /// Where the alerts were posted.
        url: String,
        /// The HTTP status of the last answer.
        status: u16,
        /// The start of its body.
        body: String,
        /// Tries made.
        attempts: u32,
    },
}

/// An Alertmanager's alerts endpoint.
#[derive(Clone)]
pub struct AlertmanagerClient {
    url: String,
    agent: ureq::Agent,
}

impl std::fmt::Debug for AlertmanagerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertmanagerClient").field("url", &self.url).finish()
    }
}

/// What one try came to.
enum Attempt {
    Done,
    Retry(SendError),
    Final(SendError),
}

impl AlertmanagerClient {
    /// The Alertmanager at `base` (`http://127.0.0.1:9093`, or with a path prefix).
    ///
    /// # Errors
    /// [`UrlError`] when `base` is not an `http://` URL with a host.
    pub fn new(base: &str) -> Result<Self, UrlError> {
        let trimmed = base.trim().trim_end_matches('/');
        let host = trimmed.strip_prefix("http://").map(|rest| rest.split('/').next().unwrap_or(""));
        if host.is_none_or(|h| h.is_empty() || h.contains(char::is_whitespace)) {
            return Err(UrlError { url: base.to_owned() });
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(concat!("saltdb/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Ok(Self { url: format!("{trimmed}{ALERTS_PATH}"), agent })
    }

    /// The URL alerts are posted to (the `alertmanager` label of the metrics).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Posts `body` (a JSON array of alerts) of `tenant` (its `X-Scope-OrgID`, none for
    /// `None`), trying again what may succeed later, until `deadline`. Returns the tries it
    /// took.
    ///
    /// # Errors
    /// [`SendError`] of the last try.
    pub fn post(&self, body: &[u8], tenant: Option<&str>, deadline: Instant) -> Result<u32, SendError> {
        let mut wait = FIRST_BACKOFF;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let last = match self.try_once(body, tenant, deadline, attempts) {
                Attempt::Done => return Ok(attempts),
                Attempt::Final(e) => return Err(e),
                Attempt::Retry(e) => e,
            };
            if attempts >= MAX_ATTEMPTS || Instant::now() + wait >= deadline {
                return Err(last);
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(MAX_BACKOFF);
        }
    }

    fn try_once(&self, body: &[u8], tenant: Option<&str>, deadline: Instant, attempts: u32) -> Attempt {
        let unreachable = |detail: String| SendError::Unreachable { url: self.url.clone(), detail, attempts };
        let Some(remaining) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            return Attempt::Final(unreachable("deadline passed before the request".to_owned()));
        };
        let mut request = self.agent.post(&self.url).header("Content-Type", "application/json");
        if let Some(tenant) = tenant {
            request = request.header("X-Scope-OrgID", tenant);
        }
        let request = request.config().timeout_global(Some(remaining)).build();
        let mut response = match request.send(body) {
            Ok(r) => r,
            Err(e) => return Attempt::Retry(unreachable(e.to_string())),
        };
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Attempt::Done;
        }
        let mut text = response.body_mut().read_to_string().unwrap_or_default();
        let cut = (0..=text.len().min(512)).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.truncate(cut);
        let error = SendError::Status { url: self.url.clone(), status, body: text.trim_end().to_owned(), attempts };
        if status == 429 || status >= 500 {
            Attempt::Retry(error)
        } else {
            Attempt::Final(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::notify::fake_alertmanager::FakeAlertmanager;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn only_http_urls_with_a_host_are_accepted() {
        assert_eq!(
            AlertmanagerClient::new("http://127.0.0.1:9093/").unwrap().url(),
            "http://127.0.0.1:9093/api/v2/alerts"
        );
        assert_eq!(AlertmanagerClient::new("http://am/prefix").unwrap().url(), "http://am/prefix/api/v2/alerts");
        for bad in ["https://am:9093", "am:9093", "http://", "http:///x", ""] {
            assert!(AlertmanagerClient::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_post_sends_json_to_the_alerts_path() {
        let am = FakeAlertmanager::start();
        let client = AlertmanagerClient::new(&am.base()).unwrap();
        assert_eq!(client.post(b"[]", None, soon()), Ok(1));
        let posts = am.posts();
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].path, "/api/v2/alerts");
        assert_eq!(posts[0].content_type, "application/json");
        assert_eq!(posts[0].body, "[]");
    }

    #[test]
    fn a_server_error_is_tried_again_with_backoff() {
        let am = FakeAlertmanager::start();
        am.answer_next(&[503, 500]);
        let client = AlertmanagerClient::new(&am.base()).unwrap();
        let started = Instant::now();
        assert_eq!(client.post(b"[]", None, soon()), Ok(3));
        assert!(started.elapsed() >= FIRST_BACKOFF * 3, "100 ms then 200 ms: {:?}", started.elapsed());
        assert_eq!(am.posts().len(), 3);
    }

    #[test]
    fn a_bad_request_is_final() {
        let am = FakeAlertmanager::start();
        am.answer_next(&[400]);
        let client = AlertmanagerClient::new(&am.base()).unwrap();
        let err = client.post(b"[]", None, soon()).unwrap_err();
        assert!(matches!(err, SendError::Status { status: 400, attempts: 1, .. }), "{err}");
        assert_eq!(am.posts().len(), 1);
    }

    #[test]
    fn an_unreachable_alertmanager_is_given_up_after_the_last_attempt() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let client = AlertmanagerClient::new(&format!("http://127.0.0.1:{port}")).unwrap();
        let err = client.post(b"[]", None, soon()).unwrap_err();
        assert!(matches!(err, SendError::Unreachable { attempts: MAX_ATTEMPTS, .. }), "{err}");
    }

    #[test]
    fn no_try_starts_after_the_deadline() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let client = AlertmanagerClient::new(&format!("http://127.0.0.1:{port}")).unwrap();
        let started = Instant::now();
        let err = client.post(b"[]", None, Instant::now() + Duration::from_millis(250)).unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(400), "{:?}", started.elapsed());
        assert!(matches!(err, SendError::Unreachable { attempts: 2, .. }), "100 ms, then 200 ms would pass it: {err}");
    }
}
