//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "abrq",
    version,
    about = "Durable fan-out delivery: stage once, deliver everywhere, lose nothing"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Logs on stderr as text, or as one JSON object per line.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        env = "ABRQ_LOG_FORMAT"
    )]
    pub log_format: crate::logging::LogFormat,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run every stream of the config, with the admin API and /metrics.
    Run {
        #[arg(long, short)]
        config: PathBuf,
        /// Exit 0 once every source is exhausted and every enabled
        /// destination has passed the last batch.
        #[arg(long)]
        until_drained: bool,
        /// No progress bar even on a terminal.
        #[arg(long)]
        no_progress: bool,
    },
    /// Validate the config and test every source's and destination's
    /// connection, all at once: a checklist with a hint per failure.
    Check {
        #[arg(long, short)]
        config: PathBuf,
        /// Also the whole error chain and what each connection field was
        /// taken to mean.
        #[arg(long, short)]
        verbose: bool,
        /// How long each probe may take.
        #[arg(long, default_value = "4s", value_parser = parse_duration)]
        timeout: std::time::Duration,
    },
    /// Show streams and destinations of a running server.
    Status {
        #[command(flatten)]
        remote: Remote,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// A live view of a running server: the status tables with each
    /// destination's throughput, redrawn every --interval until Ctrl-C.
    Top {
        #[command(flatten)]
        remote: Remote,
        #[arg(long, default_value = "2s", value_parser = parse_duration)]
        interval: std::time::Duration,
    },
    /// Dead letters of one destination.
    #[command(subcommand)]
    DeadLetters(DeadLetterCmd),
    /// Circuit breaker actions.
    #[command(subcommand)]
    Breaker(BreakerCmd),
    /// Enable, disable, pause or resume a destination.
    #[command(subcommand)]
    Destination(DestinationCmd),
    /// Operator actions on a stream's source.
    #[command(subcommand)]
    Source(SourceCmd),
    /// Read a postgres cdc source's tables again while it streams.
    Backfill {
        #[arg(long, short)]
        stream: String,
        /// One captured table (schema.name); all of them when absent.
        #[arg(long)]
        table: Option<String>,
        /// Only the rows this filter keeps, e.g. "created_at > '2026-01-01'"
        /// (columns, literals, comparisons, IN, IS NULL, AND, OR, NOT).
        #[arg(long = "where")]
        filter: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Compare a postgres or mysql replica with its source while the
    /// stream runs: row counts, checksums over key ranges, the keys that
    /// differ. Exits 1 when the replica differs.
    Verify {
        #[command(flatten)]
        target: Target,
        /// One captured table (schema.name); all of them when absent.
        #[arg(long)]
        table: Option<String>,
        /// Delete the replica's extra rows and backfill the missing and
        /// changed keys from the source, then check them again.
        #[arg(long)]
        repair: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
pub enum SourceCmd {
    /// Start a source that stopped on a definite failure (status
    /// `stopped`) again, once its cause is fixed.
    Restart {
        #[arg(long, short)]
        stream: String,
        #[command(flatten)]
        remote: Remote,
    },
}

/// Where the running server is.
#[derive(Args, Clone)]
pub struct Remote {
    /// Server base URL; defaults to the config's server.listen (https when
    /// it sets server.tls_cert).
    #[arg(long, env = "ABRQ_SERVER")]
    pub server: Option<String>,
    /// Read server.listen and server.admin_token from this config.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Admin bearer token.
    #[arg(long, env = "ABRQ_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM certificate(s) to trust for an https server, e.g. the private
    /// CA that signed server.tls_cert; the built-in public roots otherwise.
    #[arg(long, env = "ABRQ_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

#[derive(Args, Clone)]
pub struct Target {
    #[arg(long, short)]
    pub stream: String,
    #[arg(long, short)]
    pub destination: String,
}

#[derive(Subcommand)]
pub enum DeadLetterCmd {
    List {
        #[command(flatten)]
        target: Target,
        /// pending, replayed, discarded or all
        #[arg(long, default_value = "pending")]
        state: String,
        #[command(flatten)]
        remote: Remote,
    },
    Show {
        id: i64,
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        remote: Remote,
    },
    /// Re-drive to the one destination that dead-lettered it.
    Replay {
        /// One dead letter; omit with --all.
        id: Option<i64>,
        #[arg(long, conflicts_with = "id")]
        all: bool,
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        remote: Remote,
    },
    /// Drop permanently: data loss, recorded in the audit log.
    Discard {
        id: Option<i64>,
        #[arg(long, conflicts_with = "id")]
        all: bool,
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
pub enum BreakerCmd {
    /// Close the circuit at once.
    Reset {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
pub enum DestinationCmd {
    Enable(SwitchArgs),
    /// Leaves the spool GC minimum: batches may be skipped.
    Disable(SwitchArgs),
    /// Stops draining but keeps every batch for it.
    Pause(SwitchArgs),
    Resume(SwitchArgs),
}

#[derive(Args)]
pub struct SwitchArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub remote: Remote,
}

/// "4s", "500ms", "1m": the config's duration syntax.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    serde_json::from_value::<abrq_core::config::Dur>(s.into())
        .map(|d| d.0)
        .map_err(|e| e.to_string())
}
