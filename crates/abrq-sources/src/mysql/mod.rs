//! The `mysql` source (MySQL and MariaDB): `mode = "cursor"` polls a
//! table (`cursor.rs`); `mode = "cdc"` reads the
//! row-based binlog as a replica (`cdc.rs`), with the catalog's columns
//! and keys (`catalog.rs`) and the binlog's values as JSON (`values.rs`).

pub mod catalog;
pub mod cdc;
mod charset;
pub mod config;
pub mod cursor;
pub(crate) mod errors;
mod row_line;
pub mod snapshot;
pub mod values;

pub use cdc::MysqlCdcSource;
pub use config::{Mode, MysqlSettings};
pub use cursor::MysqlCursorSource;
