//! Backfills an operator asked for, as both change protocols take them
//! up: a queue of requests (a table, or None for every table), the last
//! refusal, and what status shows. How a page is read and where it joins
//! the stream is each protocol's own (`postgres/cdc/backfill.rs`: DBLog
//! watermark windows; `mysql/cdc/backfill.rs`: pages placed at their
//! snapshot's binlog position).

use std::collections::VecDeque;

use serde_json::Value;

use super::cursor::Staged;
use crate::source::BackfillAsk;

#[derive(Debug, Default)]
pub struct Backfills {
    /// In the order asked (by audit entry).
    asked: VecDeque<BackfillAsk>,
    error: Option<String>,
}

impl Backfills {
    /// Queues a request unless it was taken up already (`taken`: the
    /// cursor's last) or waits already: the engine may hand the same one
    /// over at a start and again as it follows the audit log.
    pub fn ask(&mut self, ask: BackfillAsk, taken: Option<i64>) {
        if taken.is_some_and(|t| ask.id <= t) || self.asked.iter().any(|a| a.id == ask.id) {
            return;
        }
        let at = self.asked.partition_point(|a| a.id < ask.id);
        self.asked.insert(at, ask);
    }

    /// The next request, when none runs: the cursor's `taken` moves to
    /// it, so once that cursor is staged no start takes it up again.
    pub fn next_asked(&mut self, taken: &mut Option<i64>) -> Option<BackfillAsk> {
        let ask = self.asked.pop_front()?;
        *taken = Some(ask.id);
        Some(ask)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(id: i64) -> BackfillAsk {
        BackfillAsk {
            id,
            table: Some(format!("t{id}")),
            filter: None,
        }
    }

    #[test]
    fn a_request_is_taken_up_once_in_the_order_asked() {
        let mut b = Backfills::default();
        let mut taken = Some(2);
        for id in [4, 2, 3, 4, 1] {
            b.ask(ask(id), taken);
        }
        assert_eq!(b.next_asked(&mut taken), Some(ask(3)));
        assert_eq!(taken, Some(3));
        b.ask(ask(3), taken);
        assert_eq!(b.next_asked(&mut taken), Some(ask(4)));
        assert_eq!((b.next_asked(&mut taken), taken), (None, Some(4)));
    }
}
