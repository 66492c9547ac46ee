use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use sluice::config::Config;
use sluice::pipeline::{self, RunOptions};

/// Reads a MySQL/MariaDB binlog as a replica and writes Parquet into a lake, exactly once.
#[derive(Parser)]
#[command(name = "sluice", version)]
struct Cli {
    /// `json`: one JSON object per log line (for log shippers); error lines
    /// carry `kind` (transient or definite).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Stream the binlog into the lake.
    Run {
        #[arg(long)]
        config: PathBuf,
        /// Stop once everything up to the binlog head at start is committed.
        #[arg(long)]
        until_caught_up: bool,
    },
    /// Preflight checklist of the source; non-zero exit if a check fails.
    Check {
        #[arg(long)]
        config: PathBuf,
        /// Only parse and validate the configuration file; connect to nothing.
        #[arg(long)]
        config_only: bool,
    },
    /// Last manifest, cursor, committed rows per table, lag.
    Status {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Ask the sidecar to (re)snapshot captured tables: writes a request
    /// into the lake that the running sidecar adopts (a stopped one at its
    /// next start).
    Snapshot {
        #[arg(long)]
        config: PathBuf,
        /// DB.TABLE, one or more.
        #[arg(required = true, value_name = "DB.TABLE")]
        tables: Vec<String>,
        /// Restart the tables' rows: a `truncate` marker precedes the new
        /// snapshot, so replay by `_seq` starts from it.
        #[arg(long)]
        replace: bool,
    },
    /// Erase rows of DB.TABLE from the lake's past: every row of the keys
    /// (and every `_before` image holding one) leaves the changelog and the
    /// current table, beside a running sidecar. Rows of the keys that arrive
    /// later are kept.
    Forget {
        #[arg(long)]
        config: PathBuf,
        /// DB.TABLE
        #[arg(value_name = "DB.TABLE")]
        table: String,
        /// A key as a JSON object of the key's columns, e.g. '{"id": 42}'.
        #[arg(long = "key", value_name = "JSON")]
        keys: Vec<String>,
        /// A file of keys, one JSON object per line.
        #[arg(long, value_name = "FILE")]
        keys_file: Option<PathBuf>,
        /// For a table without a key: rows whose columns hold these values,
        /// e.g. '{"email": "a@example.com"}'.
        #[arg(long = "where", value_name = "JSON")]
        wheres: Vec<String>,
        /// Of a routed table ([[routes]]): only the rows that came from this
        /// shard (its `_source_db` and `_source_table` join every key).
        #[arg(long, value_name = "DB.TABLE")]
        shard: Option<String>,
    },
    /// The `[catalog]` that names every table.
    Catalog {
        #[command(subcommand)]
        command: CatalogCommand,
    },
    /// The schema history of captured tables.
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
}

#[derive(Subcommand)]
enum CatalogCommand {
    /// Register or repair every changelog and current table in `[catalog]`
    /// (their Iceberg metadata brought up to the Delta logs first):
    /// idempotent, also into a catalog the lake never had.
    Sync {
        #[arg(long)]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// The columns of DB.TABLE, now or at a point in the stream.
    Show {
        #[arg(long)]
        config: PathBuf,
        /// DB.TABLE
        table: String,
        /// FILE:POS, a GTID, or an RFC 3339 time.
        #[arg(long)]
        at: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Every version of DB.TABLE with its position, time and statement.
    History {
        #[arg(long)]
        config: PathBuf,
        /// DB.TABLE
        table: String,
        #[arg(long)]
        json: bool,
    },
    /// Re-read DB.TABLE's shape from the server and record it at the position
    /// where sluice stopped (the way out of a DDL it cannot read).
    Resync {
        #[arg(long)]
        config: PathBuf,
        /// DB.TABLE
        table: String,
        /// The shape to record, as a CREATE TABLE statement, instead of the
        /// table's on the server (for a table the server no longer has).
        #[arg(long, value_name = "CREATE TABLE …")]
        shape: Option<String>,
    },
}

/// Past `shutdown_timeout`, how long a stalled final checkpoint may still
/// take before the process exits anyway.
const SHUTDOWN_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// `run --until-caught-up`: everything is committed, but some table's Delta
/// log or current table is still behind its manifests.
const BEHIND_EXIT_CODE: u8 = 3;

fn main() -> ExitCode {
    tune_malloc();
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let format = cli.log_format;
    match format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init(),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            return fail(
                format,
                "definite",
                &format!("cannot start the async runtime: {e}"),
            )
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => fail(format, e.kind().as_str(), &e.to_string()),
    }
}

/// The one line a failed command ends with: plain text, or a JSON log line
/// with the error's kind.
fn fail(format: LogFormat, kind: &str, message: &str) -> ExitCode {
    let message = message.replace('\n', " ");
    match format {
        LogFormat::Text => eprintln!("sluice: error: {message}"),
        LogFormat::Json => tracing::error!(kind, error = %message, "sluice stopped"),
    }
    ExitCode::FAILURE
}

async fn dispatch(command: Command) -> sluice::Result<ExitCode> {
    match command {
        Command::Run {
            config,
            until_caught_up,
        } => {
            let config = Config::load(&config)?;
            follow_with_iceberg(&config)?;
            let metrics = sluice::http::Metrics::new(config.flush.max_buffer_bytes);
            sluice::http::start(&config, metrics.clone()).await?;
            let (tx, rx) = tokio::sync::watch::channel(false);
            let grace = config.shutdown_timeout + SHUTDOWN_MARGIN;
            tokio::spawn(async move {
                wait_for_signal().await;
                let _ = tx.send(true);
                // The run bounds its own work after the final checkpoint by
                // shutdown_timeout; a store that stalls the final checkpoint
                // itself must not keep the process past it either. What it
                // held is uncommitted and read again at the next start.
                tokio::time::sleep(grace).await;
                tracing::warn!(
                    waited = ?grace,
                    "shutdown_timeout ran out while sluice waited for the object store: exiting; what was not done is left for the next start (a checkpoint not committed is read again from the binlog, Delta commits and folds are made then)"
                );
                std::process::exit(0);
            });
            let opts = RunOptions {
                until_caught_up,
                metrics: Some(metrics),
            };
            let summary = pipeline::run(&config, opts, rx).await?;
            tracing::info!(
                rows = summary.rows,
                manifests = summary.manifests,
                zero_dates_as_null = summary.zero_dates,
                "done"
            );
            if until_caught_up && !summary.behind.is_empty() {
                // Everything is committed, but readers of these tables see
                // stale data: a scheduled catch-up must not call that done.
                eprintln!(
                    "sluice: caught up, but the Delta log or current table of {} is behind its manifests (see `sluice status` and the errors above); the next run tries again",
                    summary.behind.join(", ")
                );
                return Ok(ExitCode::from(BEHIND_EXIT_CODE));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            config: path,
            config_only,
        } => {
            let config = Config::load(&path)?;
            if config_only {
                println!("{}: the configuration is valid", path.display());
                return Ok(ExitCode::SUCCESS);
            }
            let (report, ok) = sluice::status::check(&config).await?;
            print!("{report}");
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Schema { command } => {
            use sluice::schema_commands as commands;
            let out = match command {
                SchemaCommand::Show {
                    config,
                    table,
                    at,
                    json,
                } => commands::show(&Config::load(&config)?, &table, at.as_deref(), json).await?,
                SchemaCommand::History {
                    config,
                    table,
                    json,
                } => commands::history(&Config::load(&config)?, &table, json).await?,
                SchemaCommand::Resync {
                    config,
                    table,
                    shape,
                } => commands::resync(&Config::load(&config)?, &table, shape.as_deref()).await?,
            };
            println!("{}", out.trim_end());
            Ok(ExitCode::SUCCESS)
        }
        Command::Snapshot {
            config,
            tables,
            replace,
        } => {
            let config = Config::load(&config)?;
            println!(
                "{}",
                sluice::snapshot::request::request(&config, &tables, replace).await?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Forget {
            config,
            table,
            keys,
            keys_file,
            wheres,
            shard,
        } => {
            let config = Config::load(&config)?;
            follow_with_iceberg(&config)?;
            let request = sluice::forget::Request {
                table,
                keys,
                keys_file,
                wheres,
                shard,
            };
            let outcome = sluice::forget::forget(&config, &request).await?;
            for w in &outcome.warnings {
                eprintln!("sluice: {w}");
            }
            println!("{}", outcome.summary);
            Ok(ExitCode::SUCCESS)
        }
        Command::Catalog {
            command: CatalogCommand::Sync { config },
        } => {
            let config = Config::load(&config)?;
            follow_with_iceberg(&config)?;
            let lake = sluice::commit::Lake::open(&config.sink)?;
            let report = sluice::table::sync_catalog(lake.store.as_ref(), lake.in_flight).await?;
            println!(
                "catalog {}: {} registered, {} moved, {} dropped, {} unchanged",
                config.catalog.name,
                report.registered,
                report.moved,
                report.dropped,
                report.unchanged
            );
            for (name, why) in &report.failed {
                eprintln!("sluice: {name}: {why}");
            }
            Ok(if report.failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Status { config, json } => {
            let config = Config::load(&config)?;
            println!("{}", sluice::status::status(&config, json).await?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// With `[iceberg] enabled`, every Delta commit of this process is
/// followed by its Iceberg snapshot, and with a `[catalog]` by the move of
/// the table's catalog entry.
fn follow_with_iceberg(config: &Config) -> sluice::Result<()> {
    if config.iceberg.enabled {
        sluice::table::iceberg::enable(&config.sink.location.uri());
    }
    sluice::table::catalog::enable(&config.catalog)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// sluice's memory is a few large buffers that live for one flush: Arrow
/// builders growing to tens of MiB, the batch being encoded, the Parquet
/// pages and output. With glibc's defaults the mmap threshold rises to
/// 32 MiB after the first large free, so most of those buffers come from
/// the heap arenas instead, where they fragment, and every thread that
/// encodes gets an arena of its own with its own high-water mark: peak RSS
/// was up to 2.5 × the configured buffer memory. A fixed 8 MiB threshold
/// sends the large buffers to mmap (returned to the system when freed)
/// while page-sized ones are still reused from the heap, and two arenas
/// (the decoder's and one shared by the encoders) bound the rest. A lower
/// threshold saves little more memory and costs a second of page faults on
/// the benchmark. A fixed threshold also fixes the trim threshold at
/// glibc's 128 KiB: an arena gave back the top of its heap whenever that
/// much was free, and faulted the same pages in again for the next Parquet
/// page or row group (a fifth of a fold's CPU was the kernel's); a 16 MiB
/// trim threshold keeps them, at most 16 MiB an arena. Figures in
/// BENCHMARKS.md ("Memory"). A user who tunes malloc through the
/// environment keeps their settings.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_malloc() {
    let tuned_by_user = [
        "GLIBC_TUNABLES",
        "MALLOC_MMAP_THRESHOLD_",
        "MALLOC_TRIM_THRESHOLD_",
        "MALLOC_ARENA_MAX",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    if tuned_by_user {
        return;
    }
    // SAFETY: mallopt only changes allocator parameters; it is called
    // before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 8 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() {}
