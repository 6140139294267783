//! The `mysql` source (MySQL and MariaDB): `mode = "cdc"` reads the
//! row-based binlog as a replica (`cdc.rs`), with the catalog's columns
//! and keys (`catalog.rs`) and the binlog's values as JSON (`values.rs`).

pub mod catalog;
pub mod cdc;
pub mod config;
pub mod snapshot;
pub mod values;

pub use cdc::MysqlCdcSource;
pub use config::MysqlSettings;
