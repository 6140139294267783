//! The `postgres` source: a table or view polled by a monotonic column
//! (`mode = "cursor"`), or a table's changes read by logical decoding
//! (`mode = "cdc"`).

pub mod catalog;
pub mod cdc;
pub mod config;
pub mod cursor;
mod errors;

pub use cdc::PgCdcSource;
pub use config::{Mode, PostgresSettings, Snapshot, TableName};
pub use cursor::PgCursorSource;
