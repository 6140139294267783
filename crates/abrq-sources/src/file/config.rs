//! The `file` source's keys: `path`, `format`, `follow`, `null_values`.
//! Checked without touching the file: it may appear later (`follow`).

use abrq_core::config::{SourceConfig, Text};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    Ndjson,
    Csv,
}

/// What R, pandas, PostgreSQL and MySQL exports write for a missing value:
/// an empty cell, R's `NA`, `N/A`, `NULL` and `null`, PostgreSQL's and
/// MySQL's `\N`, `NaN` and spreadsheets' `#N/A`.
pub const DEFAULT_NULL_VALUES: &[&str] = &["", "NA", "N/A", "NULL", "null", "\\N", "NaN", "#N/A"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileOptions {
    pub path: Text,
    /// Defaults from the file extension (`.csv` is CSV, else NDJSON).
    format: Option<FileFormat>,
    /// Keep tailing the file.
    #[serde(default)]
    pub follow: bool,
    /// CSV: unquoted cells that mean "no value"; unset means
    /// [`DEFAULT_NULL_VALUES`].
    null_values: Option<Vec<String>>,
}

impl FileOptions {
    /// The options of a `file` source, checked.
    pub fn from_config(cfg: &SourceConfig) -> Result<FileOptions, String> {
        let o: FileOptions = cfg.options.parse()?;
        let at = cfg.line;
        if o.path.as_str().is_empty() {
            return Err(format!(
                "line {at}: streams.source.path is required for engine \"file\""
            ));
        }
        if o.null_values.is_some() && o.format() != FileFormat::Csv {
            return Err(format!(
                "line {at}: streams.source.null_values applies to CSV files only \
                 (engine \"file\" with a .csv path or format = \"csv\")"
            ));
        }
        Ok(o)
    }

    /// `format`, else from the extension (`.csv` is CSV, anything else
    /// NDJSON).
    pub fn format(&self) -> FileFormat {
        let csv = std::path::Path::new(self.path.as_str())
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        self.format.unwrap_or(if csv {
            FileFormat::Csv
        } else {
            FileFormat::Ndjson
        })
    }

    /// The CSV null markers in force: the configured ones or the default.
    pub fn null_values(&self) -> Vec<String> {
        match &self.null_values {
            Some(v) => v.clone(),
            None => DEFAULT_NULL_VALUES.iter().map(|s| s.to_string()).collect(),
        }
    }
}
