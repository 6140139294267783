//! What a verification found, as the API answers it and the CLI prints it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Running,
    /// Every table compared (some may have failed: see each table).
    Done,
    /// It could not start (a connection, a refused setting).
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// In the source, not in the replica.
    Missing,
    /// In the replica, not in the source.
    Extra,
    /// In both, with different values.
    Changed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// The key, column by column, as the source database renders it.
    pub key: Map<String, Value>,
    pub kind: Kind,
}

/// What `--repair` did for one table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    /// Keys read again from the source by a backfill (missing, changed).
    pub backfilled: u64,
    /// The backfill's filter, as `abrq backfill --where` takes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Extra rows deleted from the replica.
    pub deleted: u64,
    /// Keys still different once the backfill was delivered (rechecked
    /// for up to a minute).
    pub still_different: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableReport {
    /// The source table, `schema.name`.
    pub table: String,
    /// The replica table, `schema.name`.
    pub replica: String,
    pub source_rows: u64,
    pub replica_rows: u64,
    /// Compared columns (the key's first).
    pub columns: Vec<String>,
    /// Columns not compared, and why (masked; not in the replica).
    pub skipped_columns: Vec<String>,
    /// Key ranges whose checksums were computed on both sides.
    pub ranges: u64,
    /// Keys that differed at first and matched once the destination had
    /// delivered what was staged: changes that were in flight.
    pub in_flight: u64,
    pub differences: Vec<Difference>,
    /// More differences than are listed (the list stops at 1,000).
    pub more: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub stream: String,
    pub destination: String,
    pub state: State,
    pub repair: bool,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub seconds: f64,
    pub tables: Vec<TableReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Report {
    pub fn started(stream: &str, destination: &str, repair: bool) -> Report {
        Report {
            stream: stream.into(),
            destination: destination.into(),
            state: State::Running,
            repair,
            started_at: chrono::Utc::now(),
            finished_at: None,
            seconds: 0.0,
            tables: Vec::new(),
            error: None,
        }
    }

    /// True when every table was compared and none differs (after a
    /// repair: none still differs).
    pub fn equal(&self) -> bool {
        self.state == State::Done
            && self.tables.iter().all(|t| {
                t.error.is_none()
                    && match &t.repair {
                        Some(r) => r.error.is_none() && r.still_different == 0,
                        None => t.differences.is_empty(),
                    }
            })
    }

    pub fn finish(&mut self, error: Option<String>) {
        let now = chrono::Utc::now();
        self.state = match error {
            Some(_) => State::Failed,
            None => State::Done,
        };
        self.error = error;
        self.finished_at = Some(now);
        self.seconds = (now - self.started_at).num_milliseconds() as f64 / 1000.0;
    }
}
