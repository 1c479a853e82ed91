//! Bulk backfill from the command line: `saltdb import --url URL FILE...` sends files of JSON
//! lines, Prometheus text or InfluxDB line protocol (`-` reads stdin) to a running server in
//! batches, and `saltdb export --url URL --match SEL` writes series back out as JSON lines.
//!
//! - Each batch is checked locally with the server's own decoders before it is sent, so a bad
//!   line is reported with its file and line number and nothing after it is sent.
//! - A batch is retried on 429, 5xx and connection errors with exponential backoff (honouring
//!   `Retry-After`), up to `--retries` times; any other 4xx stops the import with the server's
//!   message. Batches already acknowledged stay written.
//! - Progress (bytes, samples/s, ETA) is drawn on stderr when it is a terminal; a summary line
//!   is printed at the end.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::ingest::{influx, prom_text, SeriesLimits, Stop};

/// The format of an import file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// From the extension (`.jsonl`/`.json`, `.prom`/`.txt`, `.lp`/`.influx`), else from the
    /// first line.
    #[default]
    Auto,
    /// JSON lines (`/api/v1/import`).
    Json,
    /// Prometheus text exposition (`/api/v1/import/prometheus`).
    Prometheus,
    /// InfluxDB line protocol, nanosecond timestamps (`/write`).
    Influx,
}

impl Format {
    fn path(self) -> &'static str {
        match self {
            Self::Json | Self::Auto => "/api/v1/import",
            Self::Prometheus => "/api/v1/import/prometheus",
            Self::Influx => "/write",
        }
    }

    fn from_extension(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl" | "json" | "ndjson") => Self::Json,
            Some("prom" | "txt" | "om") => Self::Prometheus,
            Some("lp" | "influx" | "line") => Self::Influx,
            _ => Self::Auto,
        }
    }

    /// Guesses from the first non-blank line: JSON starts with `{`; a line whose second word
    /// holds `=` is line protocol; anything else Prometheus text.
    fn sniff(line: &str) -> Self {
        let line = line.trim_start();
        if line.starts_with('{') {
            Self::Json
        } else if !line.starts_with('#') && line.split_whitespace().nth(1).is_some_and(|w| w.contains('=')) {
            Self::Influx
        } else {
            Self::Prometheus
        }
    }
}

/// `saltdb import` options.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The server's base URL (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:9201")]
    pub url: String,
    /// Files to import; `-` reads stdin.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Format of every file.
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    pub format: Format,
    /// Bytes per request (keep it under the server's --max-request-bytes).
    #[arg(long, default_value = "8MiB", value_parser = crate::config::parse_bytes)]
    pub batch_bytes: usize,
    /// Attempts per batch on 429, 5xx and connection errors.
    #[arg(long, default_value_t = 10)]
    pub retries: u32,
    /// A bearer token for the write paths.
    #[arg(long, env = "SALTDB_WRITE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// `saltdb export` options.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The server's base URL (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:9201")]
    pub url: String,
    /// Series selectors (repeatable).
    #[arg(long = "match", required = true)]
    pub matches: Vec<String>,
    /// Start (RFC 3339 or Unix seconds).
    #[arg(long)]
    pub start: Option<String>,
    /// End (RFC 3339 or Unix seconds).
    #[arg(long)]
    pub end: Option<String>,
    /// Output file (default stdout).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// A bearer token for the read paths.
    #[arg(long, env = "SALTDB_READ_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Why a backfill stopped.
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    /// A file could not be read.
    #[error("{0}: {1}")]
    Read(String, std::io::Error),
    /// A line is invalid (found before sending it).
    #[error("{file}: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// The decoder's message, with the line number in the file.
        message: String,
    },
    /// The server refused a batch.
    #[error("{file}: the server answered {status}: {body}")]
    Refused {
        /// The file.
        file: String,
        /// HTTP status.
        status: u16,
        /// The answer.
        body: String,
    },
    /// A batch failed every attempt.
    #[error("{file}: giving up after {attempts} attempts: {last}")]
    GaveUp {
        /// The file.
        file: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// Bad URL or output.
    #[error("{0}")]
    Usage(String),
}

/// What an import sent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// Samples acknowledged.
    pub samples: usize,
    /// Requests acknowledged.
    pub batches: usize,
    /// Retried attempts.
    pub retries: usize,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .new_agent()
}

fn base(url: &str) -> Result<String, BackfillError> {
    let url = url.trim_end_matches('/');
    if url.starts_with("http://") {
        Ok(url.to_owned())
    } else {
        Err(BackfillError::Usage(format!("--url {url:?}: only http:// URLs are supported")))
    }
}

/// Runs `saltdb import`.
///
/// # Errors
/// [`BackfillError`]; batches sent before it stay written.
pub fn import(args: &ImportArgs) -> Result<Imported, BackfillError> {
    let base = base(&args.url)?;
    let agent = agent();
    let total: u64 = args.files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bytes}/{total_bytes} {binary_bytes_per_sec} {msg} [{elapsed_precise}] ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut done = Imported::default();
    for file in &args.files {
        let name = file.display().to_string();
        let reader: Box<dyn Read> = if name == "-" {
            Box::new(std::io::stdin())
        } else {
            Box::new(std::fs::File::open(file).map_err(|e| BackfillError::Read(name.clone(), e))?)
        };
        let mut format = if args.format == Format::Auto { Format::from_extension(file) } else { args.format };
        let mut lines = BufReader::with_capacity(1 << 20, reader);
        let mut batch = Vec::with_capacity(args.batch_bytes + (1 << 16));
        let (mut line_no, mut first_line) = (0usize, 0usize);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = lines.read_until(b'\n', &mut line).map_err(|e| BackfillError::Read(name.clone(), e))?;
            if n > 0 {
                line_no += 1;
                if format == Format::Auto && !line.iter().all(u8::is_ascii_whitespace) {
                    format = Format::sniff(&String::from_utf8_lossy(&line));
                }
                if batch.is_empty() {
                    first_line = line_no;
                }
                batch.extend_from_slice(&line);
                if !batch.ends_with(b"\n") {
                    batch.push(b'\n');
                }
                bar.inc(n as u64);
            }
            if (n == 0 && !batch.is_empty()) || batch.len() >= args.batch_bytes {
                let samples = count(&batch, format)
                    .map_err(|m| BackfillError::Invalid { file: name.clone(), message: renumber(&m, first_line) })?;
                let retries = send(&agent, &base, format, &batch, args, &name)?;
                done.samples += samples;
                done.batches += 1;
                done.retries += retries;
                let secs = started.elapsed().as_secs_f64().max(1e-9);
                bar.set_message(format!("{} samples ({:.0}/s)", done.samples, done.samples as f64 / secs));
                batch.clear();
            }
            if n == 0 {
                break;
            }
        }
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "imported {} samples in {} requests from {} file(s) in {secs:.1}s ({:.0} samples/s, {} retries)",
        done.samples,
        done.batches,
        args.files.len(),
        done.samples as f64 / secs.max(1e-9),
        done.retries
    );
    Ok(done)
}

/// Samples in a batch, decoded with the server's decoders (so a bad line is found here).
fn count(batch: &[u8], format: Format) -> Result<usize, String> {
    let limits = SeriesLimits { max_series: usize::MAX, ..SeriesLimits::default() };
    let mut free = |_| Ok::<(), ()>(());
    let unwrap = |s: Stop<()>| match s {
        Stop::Invalid(r) => r.to_string(),
        Stop::Refused(()) => "refused".to_owned(),
    };
    match format {
        Format::Json | Format::Auto => {
            crate::http::import::decode_lines(batch, limits).map(|b| b.sample_count()).map_err(|e| e.to_string())
        }
        Format::Prometheus => {
            let opts = prom_text::Options { openmetrics: false, default_ms: crate::storage::now_ms(), limits };
            prom_text::decode(batch, &opts, &mut free).map(|b| b.sample_count()).map_err(unwrap)
        }
        Format::Influx => {
            let opts = influx::Options {
                precision: influx::Precision::Nanoseconds,
                db: None,
                now_ms: crate::storage::now_ms(),
                limits,
            };
            influx::decode(batch, &opts, &mut free).map(|d| d.batch.sample_count()).map_err(unwrap)
        }
    }
}

/// A decoder's "line N: ..." with N counted from the batch's first line in the file.
fn renumber(message: &str, first_line: usize) -> String {
    message
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(':'))
        .and_then(|(n, rest)| Some(format!("line {}:{rest}", n.parse::<usize>().ok()? + first_line - 1)))
        .unwrap_or_else(|| message.to_owned())
}

/// Posts one batch, retrying what may succeed later; the number of retries.
fn send(
    agent: &ureq::Agent,
    base: &str,
    format: Format,
    body: &[u8],
    args: &ImportArgs,
    file: &str,
) -> Result<usize, BackfillError> {
    let url = format!("{base}{}", format.path());
    let mut wait = Duration::from_millis(250);
    let mut last = String::new();
    for attempt in 0..args.retries.max(1) {
        if attempt > 0 {
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_secs(30));
        }
        let mut req = agent.post(&url);
        if let Some(t) = &args.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        match req.send(body) {
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                if (200..300).contains(&status) {
                    return Ok(attempt as usize);
                }
                if let Some(s) = resp
                    .headers()
                    .get("Retry-After")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                {
                    wait = Duration::from_secs(s.min(60));
                }
                let text = resp.body_mut().read_to_string().unwrap_or_default();
                if status != 429 && status < 500 {
                    return Err(BackfillError::Refused { file: file.to_owned(), status, body: text });
                }
                last = format!("{status} {text}");
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(BackfillError::GaveUp { file: file.to_owned(), attempts: args.retries.max(1), last })
}

/// Runs `saltdb export`; the bytes written.
///
/// # Errors
/// [`BackfillError`].
pub fn export(args: &ExportArgs) -> Result<u64, BackfillError> {
    let base = base(&args.url)?;
    let mut query: Vec<(&str, &str)> = args.matches.iter().map(|m| ("match[]", m.as_str())).collect();
    if let Some(s) = &args.start {
        query.push(("start", s));
    }
    if let Some(e) = &args.end {
        query.push(("end", e));
    }
    let mut req = agent().get(&format!("{base}/api/v1/export")).query_pairs(query);
    if let Some(t) = &args.token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req.call().map_err(|e| BackfillError::Usage(format!("{base}: {e}")))?;
    let status = resp.status().as_u16();
    if status != 200 {
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        return Err(BackfillError::Refused { file: "export".into(), status, body });
    }
    let mut out: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(std::fs::File::create(p).map_err(|e| BackfillError::Read(p.display().to_string(), e))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut reader = resp.body_mut().with_config().limit(u64::MAX).reader();
    let n = std::io::copy(&mut reader, &mut out).map_err(|e| BackfillError::Read("export".into(), e))?;
    out.flush().map_err(|e| BackfillError::Read("export".into(), e))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_from_extensions_and_first_lines() {
        assert_eq!(Format::from_extension(Path::new("a.jsonl")), Format::Json);
        assert_eq!(Format::from_extension(Path::new("a.prom")), Format::Prometheus);
        assert_eq!(Format::from_extension(Path::new("a.lp")), Format::Influx);
        assert_eq!(Format::from_extension(Path::new("-")), Format::Auto);
        assert_eq!(Format::sniff(r#"{"metric":{}}"#), Format::Json);
        assert_eq!(Format::sniff("cpu,host=a usage=1 1"), Format::Influx);
        assert_eq!(Format::sniff("# HELP x y"), Format::Prometheus);
        assert_eq!(Format::sniff("up{job=\"a\"} 1"), Format::Prometheus);
        assert_eq!(Format::sniff("up 1 1700000000000"), Format::Prometheus);
    }

    #[test]
    fn line_numbers_count_from_the_file() {
        assert_eq!(renumber("line 2: bad", 100), "line 101: bad");
        assert_eq!(renumber("no line", 100), "no line");
        assert_eq!(count(b"up 1\nup{a=\"b\"} 2 5\n", Format::Prometheus), Ok(2));
        assert_eq!(count(b"m a=1,b=2 1\n", Format::Influx), Ok(2));
        assert!(count(b"m a=oops\n", Format::Influx).unwrap_err().starts_with("line 1"));
    }
}
