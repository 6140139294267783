//! The `postgres` source: a table or view polled by a monotonic column
//! (`mode = "cursor"`).

pub mod config;
pub mod cursor;

pub use config::{Mode, PostgresSettings, TableName};
pub use cursor::PgCursorSource;
