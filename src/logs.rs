//! The server's log: one line per event on stderr, as text or JSON.
//!
//! - Colours only when stderr is a terminal (and `NO_COLOR` is unset): a log redirected to a
//!   file or a pipe is plain text.
//! - `--log-format json`: one JSON object per line (`timestamp`, `level`, `target`, `fields`),
//!   for log shippers.
//! - The filter is `RUST_LOG` when set; otherwise `info`, with the storage library (fjall and
//!   lsm-tree, which log one INFO line per keyspace they open or recover) at `warn`.
//! - `RUST_LOG` takes levels and `target=level` pairs (`debug`, `info,saltdb::storage=debug`):
//!   `tracing_subscriber`'s `Targets`, not its `EnvFilter`. `EnvFilter` needs the `env-filter`
//!   feature, which turns on `regex-automata`'s full-DFA builder for the whole process; the
//!   `regex` crate then builds a full DFA for every small regex it compiles, which made each
//!   PromQL regex matcher cost ~0.1-0.3 ms to compile (a third of a `label values` request with a
//!   regex `match[]` at 1 M series, in a profile).

use std::io::IsTerminal;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The filter used when `RUST_LOG` is not set.
pub const DEFAULT_FILTER: &str = "info,fjall=warn,lsm_tree=warn";

/// How each log line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable text (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The filter: `RUST_LOG` when set and valid, else [`DEFAULT_FILTER`]. An invalid `RUST_LOG`
/// is reported on stderr and replaced by the default rather than silencing the log.
fn filter() -> Targets {
    let default = || DEFAULT_FILTER.parse::<Targets>().unwrap_or_default();
    match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.trim().parse::<Targets>().unwrap_or_else(|e| {
            eprintln!("saltdb: ignoring RUST_LOG={spec:?}: {e}");
            default()
        }),
        _ => default(),
    }
}

/// Whether text lines get ANSI colours: only on a terminal, and never with `NO_COLOR` set.
fn colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The most verbose level `targets` lets through for any target.
fn most_verbose(targets: &Targets) -> LevelFilter {
    targets.iter().map(|(_, level)| level).chain(targets.default_level()).max().unwrap_or(LevelFilter::OFF)
}

/// Installs the process-wide subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    let targets = filter();
    // The builder's level is the most verbose one `Targets` lets through for some target: below
    // it `Targets` decides. It also becomes the `log` crate's maximum level (the bridge for
    // fjall and lsm-tree), so their debug and trace records stop at the macro instead of
    // being built, bridged and then refused: with the level at TRACE that was about 5% of
    // fjall's flush and compaction threads during new-series ingest, in a profile.
    let builder = tracing_subscriber::fmt().with_max_level(most_verbose(&targets)).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(colours()).finish().with(targets).init(),
        LogFormat::Json => builder.json().with_ansi(false).finish().with(targets).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_is_the_most_verbose_any_target_allows() {
        let level = |spec: &str| most_verbose(&spec.parse::<Targets>().unwrap_or_default());
        assert_eq!(level(DEFAULT_FILTER), LevelFilter::INFO);
        assert_eq!(level("warn,saltdb::storage=debug"), LevelFilter::DEBUG);
        assert_eq!(level("fjall=trace"), LevelFilter::TRACE);
        assert_eq!(level("error"), LevelFilter::ERROR);
        assert_eq!(level("off"), LevelFilter::OFF);
    }
}
