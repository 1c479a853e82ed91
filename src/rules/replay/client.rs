//! `saltdb rules replay --from T --to T FILE...`: asks a running server to replay rule files
//! over past data (see the parent module) and reports as it goes.
//!
//! Every file is read and validated first, with the server's own parser: a bad file is
//! reported in Prometheus' words and nothing is replayed. Then each file is sent in turn to
//! `POST /api/v1/rules/replay`, whose answer streams the replay's progress; a group's summary
//! is printed on stdout when it ends, its progress drawn on stderr meanwhile. Outputs already
//! written stay written if the replay is interrupted; replaying the same span again writes the
//! same samples at the same timestamps.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::time::Duration;

use super::{Line, Tally};

/// `saltdb rules replay` options.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The server's base URL (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:9201")]
    pub url: String,
    /// First evaluation time (RFC 3339 or Unix seconds): the groups' first slots at or after it.
    #[arg(long)]
    pub from: String,
    /// Last evaluation time (RFC 3339 or Unix seconds), not in the future.
    #[arg(long)]
    pub to: String,
    /// Rule files (Prometheus' format). Give each as the server's `--rule-file` names it: a
    /// group's evaluation times depend on its file's name and the group's.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// A bearer token for the write paths.
    #[arg(long, env = "SALTDB_WRITE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A file could not be read.
    #[error("{0}: {1}")]
    Read(String, std::io::Error),
    /// A file is not a valid rule file.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
    /// Bad URL or times.
    #[error("{0}")]
    Usage(String),
    /// The server refused a file.
    #[error("{file}: the server answered {status}: {body}")]
    Refused {
        /// The file.
        file: String,
        /// HTTP status.
        status: u16,
        /// The answer.
        body: String,
    },
    /// The connection failed or the answer ended early.
    #[error("{file}: {why}; outputs written so far stay written")]
    Interrupted {
        /// The file.
        file: String,
        /// What happened.
        why: String,
    },
}

/// What a replay did, over every file.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    /// Groups replayed.
    pub groups: usize,
    /// Group evaluations.
    pub evaluations: u64,
    /// Samples written.
    pub samples: u64,
    /// Rule evaluations that failed.
    pub failures: u64,
}

/// Runs `saltdb rules replay`: summaries on stdout, progress on stderr.
///
/// # Errors
/// [`ReplayError`]; files replayed before it stay written.
pub fn run(args: &ReplayArgs) -> Result<Replayed, ReplayError> {
    let base = args.url.trim_end_matches('/');
    if !base.starts_with("http://") {
        return Err(ReplayError::Usage(format!("--url {base:?}: only http:// URLs are supported")));
    }
    let from = time("--from", &args.from)?;
    let to = time("--to", &args.to)?;
    if to < from {
        return Err(ReplayError::Usage(format!("--to {:?} is before --from {:?}", args.to, args.from)));
    }
    let mut files = Vec::with_capacity(args.files.len());
    let mut invalid = Vec::new();
    for path in &args.files {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| ReplayError::Read(name.clone(), e))?;
        match crate::rules::parse_file(&name, &bytes) {
            Ok(_) => files.push((name, bytes)),
            Err(errors) => invalid.extend(errors),
        }
    }
    if !invalid.is_empty() {
        return Err(ReplayError::Invalid(invalid));
    }
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(10)))
        .build()
        .new_agent();
    let mut total = Replayed::default();
    let stdout = std::io::stdout();
    for (name, bytes) in files {
        let mut req = agent.post(&format!("{base}/api/v1/rules/replay")).query_pairs([
            ("start", seconds(from).as_str()),
            ("end", seconds(to).as_str()),
            ("file", name.as_str()),
        ]);
        if let Some(t) = &args.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let interrupted = |why: String| ReplayError::Interrupted { file: name.clone(), why };
        let mut resp = req.content_type("application/yaml").send(&bytes[..]).map_err(|e| interrupted(e.to_string()))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let body = resp.body_mut().read_to_string().unwrap_or_default();
            return Err(ReplayError::Refused { file: name, status, body: body.trim_end().to_owned() });
        }
        let reader = BufReader::new(resp.body_mut().with_config().limit(u64::MAX).reader());
        let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} {pos}/{len} evaluations [{elapsed_precise}] ETA {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let mut done = false;
        for line in reader.lines() {
            let line = line.map_err(|e| interrupted(e.to_string()))?;
            let parsed: Line =
                serde_json::from_str(&line).map_err(|e| interrupted(format!("unreadable answer {line:?}: {e}")))?;
            match parsed {
                Line::Progress(t) => {
                    bar.set_message(format!("{} {}", t.file, t.group));
                    bar.set_length(t.total);
                    bar.set_position(t.evaluations);
                }
                Line::Group(t) => {
                    bar.set_position(t.evaluations);
                    bar.suspend(|| print_group(&mut stdout.lock(), &t));
                }
                Line::Done { groups, evaluations, samples, failures } => {
                    total.groups += groups;
                    total.evaluations += evaluations;
                    total.samples += samples;
                    total.failures += failures;
                    done = true;
                }
            }
        }
        bar.finish_and_clear();
        if !done {
            return Err(interrupted("the server's answer ended before the replay did".to_owned()));
        }
    }
    Ok(total)
}

/// A time flag in milliseconds.
fn time(flag: &str, value: &str) -> Result<i64, ReplayError> {
    crate::timestamp::parse_ms(value).map_err(|why| ReplayError::Usage(format!("{flag}: {why}")))
}

/// Milliseconds as the Unix seconds the API takes.
fn seconds(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let abs = ms.unsigned_abs();
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
}

/// A finished group's summary line and its kept errors.
fn print_group(out: &mut impl Write, t: &Tally) {
    let _ = writeln!(
        out,
        "{} {}: {} evaluations, {} samples written, {} failed rule evaluations",
        t.file, t.group, t.evaluations, t.samples, t.failures
    );
    for e in &t.errors {
        let at = chrono::DateTime::from_timestamp_millis((e.time * 1000.0).round() as i64)
            .map_or_else(|| e.time.to_string(), |d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        let _ = writeln!(out, "  {} at {at}: {}", e.rule, e.error);
    }
    if t.failures > t.errors.len() as u64 {
        let _ = writeln!(out, "  ... and {} more", t.failures - t.errors.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_keep_the_milliseconds_of_any_sign() {
        assert_eq!(seconds(1_700_000_000_123), "1700000000.123");
        assert_eq!(seconds(-1), "-0.001");
        assert_eq!(seconds(-1500), "-1.500");
        assert_eq!(crate::timestamp::parse_ms(&seconds(-1)).unwrap(), -1);
        assert_eq!(crate::timestamp::parse_ms(&seconds(5)).unwrap(), 5);
    }
}
