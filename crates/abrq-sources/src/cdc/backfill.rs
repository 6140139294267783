//! Backfills an operator asked for, as both change protocols take them
//! up: a queue of requests (a table, or None for every table), the last
//! refusal, and what status shows. How a page is read and where it joins
//! the stream is each protocol's own (`postgres/cdc/backfill.rs`: DBLog
//! watermark windows; `mysql/cdc/backfill.rs`: pages placed at their
//! snapshot's binlog position).

use std::collections::VecDeque;

use serde_json::Value;

use super::cursor::Staged;

#[derive(Debug, Default)]
pub struct Backfills {
    asked: VecDeque<Option<String>>,
    error: Option<String>,
}

impl Backfills {
    pub fn ask(&mut self, table: Option<String>) {
        self.asked.push_back(table);
    }

    /// The next request, when none runs.
    pub fn next_asked(&mut self) -> Option<Option<String>> {
        self.asked.pop_front()
    }

    /// A backfill could not start: status says why; streaming goes on.
    pub fn refused(&mut self, why: String) {
        tracing::warn!(error = %why, "backfill refused");
        self.error = Some(why);
    }

    pub fn started(&mut self) {
        self.error = None;
    }

    /// Status `source.position.backfill`.
    pub fn progress(&self, running: Option<&Staged>) -> Value {
        let mut v = match running {
            Some(b) => serde_json::json!({
                "state": "running",
                "table": b.table,
                "rows": b.rows,
                "tables_left": b.rest.len(),
            }),
            None => serde_json::json!({"state": "idle"}),
        };
        v["asked"] = self.asked.len().into();
        if let Some(e) = &self.error {
            v["error"] = e.clone().into();
        }
        v
    }
}
