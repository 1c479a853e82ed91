//! The `saltdb` binary.

use saltdb::config::{CheckCommand, Cli, Command};
use saltdb::server::Server;

/// mimalloc instead of glibc malloc: ingest allocates a few small strings per series per request
/// on many threads at once, where glibc's arenas spent a quarter of the server's CPU (profile of
/// `saltdb-rw-bench`, see bench/README.md).
/// Off with `--no-default-features`, for heap profilers that see only the system allocator
/// (heaptrack).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (index in mimalloc 3's `mi_option_t`).
#[cfg(feature = "mimalloc")]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Makes mimalloc return freed memory to the system at once instead of after its default delay
/// (10 ms), unless `MIMALLOC_PURGE_DELAY` is set. Measured at 1 M active series
/// (`saltdb-bench cardinality`): peak RSS 995-1,008 MiB with the delay, 927 MiB without, the
/// server's CPU per query unchanged. The option's index is checked against its documented
/// default first, so a different mimalloc leaves the default alone.
#[cfg(feature = "mimalloc")]
fn purge_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: reading and setting a process-wide option; mimalloc allows both at any time.
    unsafe {
        if libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) == 10 {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        }
    }
}

/// mimalloc's `mi_option_allow_thp` and the option before it,
/// `mi_option_page_cross_thread_max_reclaim` (indexes in mimalloc 3's `mi_option_t`; defaults 1
/// and 16).
#[cfg(feature = "mimalloc")]
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;
#[cfg(feature = "mimalloc")]
const MI_OPTION_PAGE_CROSS_THREAD_MAX_RECLAIM: libmimalloc_sys::mi_option_t = 42;

/// Turns transparent huge pages off for this process, unless `MIMALLOC_ALLOW_THP` is set.
/// mimalloc asks for huge pages (`MADV_HUGEPAGE`) on its arenas, and with freed memory purged at
/// once (above) every request that grows a buffer into purged memory faulted a whole 2 MiB page
/// back in and zeroed it: 16% of the server's CPU under remote-write (`perf`, kernel
/// `clear_page_erms` under `do_huge_pmd_anonymous_page`), and 2 MiB of RSS for every page
/// touched. Off: `saltdb-rw-bench` 7-27% faster, peak RSS 150 instead of 218 MiB
/// (bench/README.md). The indexes are checked against the defaults of the option and its
/// neighbour first, so a different mimalloc leaves them alone.
#[cfg(feature = "mimalloc")]
fn no_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: reading and setting process-wide options; mimalloc allows both at any time, and
    // `prctl(PR_SET_THP_DISABLE)` only changes this process' paging policy.
    unsafe {
        if libmimalloc_sys::mi_option_get(MI_OPTION_PAGE_CROSS_THREAD_MAX_RECLAIM) == 16
            && libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) == 1
        {
            libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0);
        }
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

fn main() -> std::process::ExitCode {
    #[cfg(feature = "mimalloc")]
    purge_freed_memory_at_once();
    #[cfg(feature = "mimalloc")]
    no_transparent_huge_pages();
    let cli = Cli::parse_with_flags();
    saltdb::logs::init(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("saltdb-http").build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("saltdb: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(*args)),
        Command::Inspect { url, tenants } => {
            match if tenants { saltdb::inspect::inspect_tenants(&url) } else { saltdb::inspect::inspect(&url) } {
                Ok(table) => {
                    print!("{table}");
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("saltdb: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::DiskUsage { data_dir } => match saltdb::storage::disk_usage(&data_dir) {
            Ok(usage) => {
                print!("{usage}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("saltdb disk-usage: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Test(saltdb::config::TestCommand::Rules { files }) => test_rules(&files),
        Command::Import(args) => match saltdb::backfill::import(&args) {
            Ok(_) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("saltdb import: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Export(args) => match saltdb::backfill::export(&args) {
            Ok(_) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("saltdb export: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Rules(saltdb::config::RulesCommand::Replay(args)) => match saltdb::rules::replay::client::run(&args) {
            Ok(done) => {
                println!(
                    "replayed {} groups: {} evaluations, {} samples written",
                    done.groups, done.evaluations, done.samples
                );
                if done.failures == 0 {
                    std::process::ExitCode::SUCCESS
                } else {
                    eprintln!("saltdb rules replay: {} rule evaluations failed (see above)", done.failures);
                    std::process::ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("saltdb rules replay: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::ClickHouse(saltdb::config::ClickHouseCommand::Replicate { clickhouse_url, clickhouse_database }) => {
            let shards = clickhouse_url
                .iter()
                .map(|shard| shard.split('|').map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()).collect())
                .collect();
            let mut config = saltdb::clickhouse::ClickHouseConfig::replicated(shards);
            config.database = clickhouse_database;
            match saltdb::clickhouse::replicate(&config) {
                Ok(done) => {
                    println!(
                        "{} tables copied into replicated ones ({} rows); {} shards were replicated already",
                        done.tables, done.rows, done.already
                    );
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("saltdb clickhouse replicate: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::Check(CheckCommand::Rules(args)) => {
            std::process::ExitCode::from(saltdb::rules::file::check::run(&args))
        }
    }
}

/// `saltdb test rules`: prints as `promtool test rules` prints.
fn test_rules(files: &[std::path::PathBuf]) -> std::process::ExitCode {
    let mut failed = false;
    for f in files {
        println!("Unit Testing:  {}", f.display());
        let failures = saltdb::rules::unit::run_file(f);
        if failures.is_empty() {
            println!("  SUCCESS");
        } else {
            failed = true;
            eprintln!("  FAILED:");
            for e in failures {
                eprintln!("{e}");
                println!();
            }
        }
        println!();
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

async fn serve(args: saltdb::config::ServeArgs) -> std::process::ExitCode {
    let config = match args.server_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("saltdb: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let server = match Server::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("saltdb: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Install the signal handlers before announcing the address, so a SIGTERM sent right after
    // the announcement still shuts down cleanly.
    let signal = shutdown_signal();
    // SIGHUP reloads the rule files (its default action would end the process).
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    tracing::info!(addr = %server.addr(), data_dir = %args.data_dir.display(), "saltdb listening");
    // Tests and scripts read the bound address from this line (port 0 picks a free port).
    println!("saltdb listening on {}", server.addr());
    tokio::pin!(signal);
    loop {
        tokio::select! {
            _ = &mut signal => break,
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                match server.reload_rules().await {
                    Ok(()) => tracing::info!("SIGHUP: rule files reloaded"),
                    Err(e) => tracing::error!(error = %e, "SIGHUP: reloading the rule files failed; the running rules stay"),
                }
            }
        }
    }
    tracing::info!("shutting down");
    match server.shutdown().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("saltdb: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Registers SIGINT/SIGTERM handlers now; the returned future completes on either signal.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
