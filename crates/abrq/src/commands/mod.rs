//! One module per command.

mod check;
mod hangup;
mod remote;
mod run;

use std::path::Path;
use std::sync::Arc;

use abrq_core::config::{Config, ConfigError, StateLocation};
use abrq_state::{SqliteStore, StateStore};
use anyhow::Context;

use crate::cli::Command;

pub async fn dispatch(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Run {
            config,
            until_drained,
            no_progress,
        } => run::run(&config, until_drained, no_progress).await,
        Command::Check {
            config,
            verbose,
            timeout,
        } => check::check(&config, verbose, timeout).await,
        Command::Status { remote, json } => remote::status(&remote, json).await,
        Command::Top { remote, interval } => remote::top(&remote, interval).await,
        Command::DeadLetters(c) => remote::dead_letters(c).await,
        Command::Breaker(c) => remote::breaker(c).await,
        Command::Destination(c) => remote::destination(c).await,
        Command::Source(c) => remote::source(c).await,
        Command::Backfill {
            stream,
            table,
            filter,
            remote,
        } => remote::backfill(&remote, &stream, table.as_deref(), filter.as_deref()).await,
        Command::Verify {
            target,
            table,
            repair,
            json,
            remote,
        } => remote::verify(&remote, &target, table.as_deref(), repair, json).await,
    }
}

/// Loads the config and checks every engine's own keys, without I/O: an
/// error names the key and its line, wherever it was found.
pub fn load_config(path: &Path) -> Result<Config, ConfigError> {
    let config = Config::load(path)?;
    let engines = abrq_sources::validate(&config).and_then(|()| abrq_sinks::validate(&config));
    engines.map_err(|message| ConfigError::Invalid {
        origin: path.display().to_string(),
        message,
    })?;
    Ok(config)
}

/// The state store the config names (SQLite under data_dir by default)
/// and, when it is PostgreSQL, the leases through which processes share
/// it.
pub struct OpenedStore {
    pub store: Arc<dyn StateStore>,
    pub leases: Option<Arc<dyn abrq_state::LeaseStore>>,
}

pub async fn open_store(config: &Config) -> anyhow::Result<OpenedStore> {
    let location = config
        .state_location()
        .map_err(|e| anyhow::anyhow!("state.url: {e}"))?;
    match location {
        StateLocation::Sqlite(path) => {
            let store = SqliteStore::open(&path)
                .with_context(|| format!("opening state store {}", path.display()))?;
            Ok(OpenedStore {
                store: Arc::new(store),
                leases: None,
            })
        }
        // The store's errors name the URL with its password hidden.
        StateLocation::Postgres(url) => {
            let store = Arc::new(
                abrq_state::PostgresStore::connect_with(&url, config.state.allow_plaintext)
                    .await
                    .context("opening state store")?,
            );
            Ok(OpenedStore {
                store: store.clone(),
                leases: Some(store),
            })
        }
    }
}

/// This machine's name, for node ids and messages.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The sinks crate's factory, as the engine wants it.
pub fn destination_factory(
    stream: &str,
    cfg: &abrq_core::config::DestinationConfig,
) -> Result<Arc<dyn abrq_core::Destination>, String> {
    abrq_sinks::build(stream, cfg).map_err(|e| e.to_string())
}
