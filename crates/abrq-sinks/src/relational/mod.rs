//! The `postgres` and `mysql` engines. One batch is one transaction: the
//! ledger row (`abrq_applied_batches`, so a redelivered batch is skipped),
//! the table created or evolved as the schema drift policy allows, truncates
//! in order, rows in multi-row statements, commit.
//!
//! Shared, engine-free: `config` (settings, connect options), `types` and
//! `dialect` (type model, widening, spellings), `names` (which field
//! names can be columns), `plan` and `group` (the drift policy and
//! statements, pure), `errors` (what a failure means),
//! `destination` (the flow), `writer` (one batch's transaction, in the same
//! order for both). Per dialect: `postgres/` and `mysql/` (catalog, ledger,
//! the statements `writer` runs, and their own error codes).

pub mod config;
mod connection;
pub mod destination;
mod dialect;
pub mod errors;
mod follow;
mod group;
pub mod mysql;
mod names;
pub mod plan;
pub mod postgres;
mod rows;
pub mod table;
pub mod types;
mod writer;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;

use crate::keys::BuildError;

pub use config::{
    ColumnsPolicy, DeletePolicy, DroppedColumnsPolicy, RelationalSettings, SchemaDrift,
    TruncatePolicy, TypesPolicy, WriteMode,
};
pub use destination::RelationalDestination;
/// The driver, for callers (the benchmark) that talk to the same servers.
pub use sqlx;

/// The ledger table, beside the target table.
pub const LEDGER: &str = "abrq_applied_batches";

/// Validates without connecting; the pool connects on the first delivery
/// or `check()`.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let settings =
        RelationalSettings::from_config(stream, cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    Ok(from_settings(settings))
}

/// The destination for already validated settings.
pub fn from_settings(settings: RelationalSettings) -> Arc<dyn Destination> {
    match settings.dialect {
        types::Dialect::Postgres => postgres::destination(settings),
        types::Dialect::Mysql => mysql::destination(settings),
    }
}
