//! The keys the `mysql` source will read, checked now so a config written
//! for it stays valid: the five connection fields, the table, the cursor
//! column, the poll interval and the mode. The source itself is not in
//! this build (the engine refuses to start it).

use abrq_core::config::{Dur, Secret, SourceConfig, Text};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseOptions {
    pub host: Option<Text>,
    pub port: Option<u16>,
    pub database: Option<Text>,
    pub username: Option<Text>,
    /// Hidden in `Debug` by [`Secret`].
    pub password: Option<Secret>,
    pub table: Text,
    pub cursor: Option<Text>,
    pub poll_interval: Option<Dur>,
    pub mode: Option<Text>,
}

impl DatabaseOptions {
    pub fn from_config(cfg: &SourceConfig) -> Result<DatabaseOptions, String> {
        cfg.options.parse()
    }
}
