//! The keys every object and file engine shares (`prefix`, `format`,
//! `date_partitioning`, `manifest`), read by each such engine's config
//! beside its own keys.

use abrq_core::config::{DestinationConfig, Text};
use serde::Deserialize;

use super::naming;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
pub enum ObjectFormat {
    #[serde(rename = "jsonl")]
    Jsonl,
    #[default]
    #[serde(rename = "jsonl.gz")]
    JsonlGz,
    #[serde(rename = "csv")]
    Csv,
    #[serde(rename = "csv.gz")]
    CsvGz,
    #[serde(rename = "parquet")]
    Parquet,
}

impl ObjectFormat {
    /// The file extension, which is also the config spelling.
    pub fn ext(self) -> &'static str {
        match self {
            ObjectFormat::Jsonl => "jsonl",
            ObjectFormat::JsonlGz => "jsonl.gz",
            ObjectFormat::Csv => "csv",
            ObjectFormat::CsvGz => "csv.gz",
            ObjectFormat::Parquet => "parquet",
        }
    }
}

/// The shared object keys, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectOptions {
    #[serde(default)]
    pub prefix: Text,
    #[serde(default)]
    pub format: ObjectFormat,
    /// `dt=YYYY-MM-DD/` from the staging time.
    #[serde(default)]
    pub date_partitioning: bool,
    /// A `{object}.manifest.json` sidecar; unset means none, unless the
    /// engine's config sets its own default (ftp, ftps).
    pub manifest: Option<bool>,
}

/// The object-store part of a destination's config, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSettings {
    /// The stream this destination belongs to (for `check` and logs; the
    /// manifest takes the stream from the batch itself).
    pub stream: String,
    /// The destination's name in config.
    pub destination: String,
    /// Key prefix with leading and trailing slashes trimmed.
    pub prefix: String,
    pub format: ObjectFormat,
    pub date_partitioning: bool,
    pub manifest: bool,
}

impl ObjectOptions {
    /// The prefix becomes part of every key, so it must pass the engine's
    /// own check of keys (`safe`).
    pub fn check_prefix(
        &self,
        cfg: &DestinationConfig,
        safe: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        let prefix = naming::normalize_prefix(self.prefix.as_str());
        if prefix.is_empty() || safe(prefix) {
            return Ok(());
        }
        Err(crate::keys::invalid(
            cfg,
            "prefix",
            format!(
                "{:?} must be plain names separated by '/', without '.' or '..'",
                self.prefix.as_str()
            ),
        ))
    }

    /// The settings for destination `cfg` of `stream`.
    pub fn settings(&self, stream: &str, cfg: &DestinationConfig) -> ObjectSettings {
        ObjectSettings {
            stream: stream.to_string(),
            destination: cfg.name.as_str().to_string(),
            prefix: naming::normalize_prefix(self.prefix.as_str()).to_string(),
            format: self.format,
            date_partitioning: self.date_partitioning,
            manifest: self.manifest.unwrap_or(false),
        }
    }
}
