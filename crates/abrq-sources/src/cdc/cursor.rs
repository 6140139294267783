//! The stream's cursor, as both change protocols keep it: the position in
//! the server's log after the last source transaction whose changes are
//! all staged, how many changes of the next one are staged already when a
//! transaction spans batches, and where a copy or a backfill stands. Each
//! protocol stores it in its own form (`{"lsn": .., "skip": ..}`,
//! `{"file": .., "pos": .., "gtid": ..}`).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::SourceError;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct Cursor<A> {
    /// End of the last fully staged source transaction.
    pub at: A,
    /// Changes of the transaction after it already staged.
    pub skip: u64,
    /// While the snapshot copy runs: where it is.
    pub copy: Option<CopyAt>,
    /// A backfill under way: it goes on after a restart.
    pub backfill: Option<Staged>,
    /// The audit entry of the last backfill request taken up (begun or
    /// refused); None in a cursor stored before requests were counted.
    pub taken: Option<i64>,
}

impl<A: Clone> Cursor<A> {
    /// The cursor as stored, in the protocol's form `S`.
    pub fn encode<S: Serialize + From<Cursor<A>>>(&self) -> String {
        serde_json::to_string(&S::from(self.clone())).expect("a cursor serializes")
    }

    /// A stored cursor, as [`Cursor::encode`] wrote it.
    pub fn decode<S: DeserializeOwned + Into<Cursor<A>>>(
        text: &str,
    ) -> Result<Cursor<A>, SourceError> {
        Ok(crate::source::parse_cursor::<S>(text)?.into())
    }
}

impl<A> Cursor<A> {
    pub fn new(at: A) -> Cursor<A> {
        Cursor {
            at,
            skip: 0,
            copy: None,
            backfill: None,
            taken: None,
        }
    }
}

/// Where the copy stands: the table being copied and the key of its last
/// staged row (none before the first page).
#[derive(Debug, Clone, PartialEq)]
pub struct CopyAt {
    pub table: String,
    pub after: Option<Value>,
}

/// A backfill as the cursor keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Staged {
    /// The table being read and the key of its last staged row (none
    /// before the first page).
    pub table: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
    /// The tables after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rest: Vec<String>,
    #[serde(default)]
    pub rows: u64,
    /// Only the rows this filter keeps (`abrq backfill --where`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

impl Staged {
    /// A backfill of `tables`, the first one after its row `after`. None
    /// when there is no table.
    pub fn of(tables: &[String], after: Option<Value>) -> Option<Staged> {
        let (first, rest) = tables.split_first()?;
        Some(Staged {
            table: first.clone(),
            after,
            rest: rest.to_vec(),
            rows: 0,
            filter: None,
        })
    }

    /// The current table is done: on to the next one. False when it was
    /// the last.
    pub fn next_table(&mut self) -> bool {
        if self.rest.is_empty() {
            return false;
        }
        self.table = self.rest.remove(0);
        self.after = None;
        true
    }

    /// A copy cut short at `copy` goes on as a backfill of its table and
    /// the tables after it (the first, when its table is no longer
    /// captured).
    pub fn resume_copy(tables: &[String], copy: CopyAt) -> Option<Staged> {
        let at = tables.iter().position(|t| *t == copy.table).unwrap_or(0);
        Staged::of(&tables[at..], copy.after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backfill_reads_as_both_protocols_wrote_it() {
        let pg: Staged =
            serde_json::from_str(r#"{"table":"public.a","after":"{\"c\":\"5\"}","rows":5}"#)
                .unwrap();
        assert_eq!(pg.after, Some(Value::String("{\"c\":\"5\"}".into())));
        let my: Staged =
            serde_json::from_str(r#"{"table":"d.a","after":[5],"rest":["d.b"]}"#).unwrap();
        assert_eq!(my.after, Some(serde_json::json!([5])));
        assert_eq!(
            serde_json::to_string(&my).unwrap(),
            r#"{"table":"d.a","after":[5],"rest":["d.b"],"rows":0}"#
        );
    }

    #[test]
    fn a_copy_cut_short_goes_on_from_its_table() {
        let tables = vec!["a".to_string(), "b".into(), "c".into()];
        let copy = CopyAt {
            table: "b".into(),
            after: Some(Value::from(7)),
        };
        let s = Staged::resume_copy(&tables, copy).unwrap();
        assert_eq!((s.table.as_str(), s.rest.len()), ("b", 1));
        let gone = CopyAt {
            table: "x".into(),
            after: None,
        };
        assert_eq!(Staged::resume_copy(&tables, gone).unwrap().table, "a");
        let mut s = Staged::of(&tables[1..], None).unwrap();
        assert!(s.next_table() && s.table == "c" && !s.next_table());
    }
}
