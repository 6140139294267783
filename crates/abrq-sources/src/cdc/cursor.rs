//! The stream's cursor, as both change protocols keep it: the position in
//! the server's log after the last source transaction whose changes are
//! all staged, how many changes of the next one are staged already when a
//! transaction spans batches, and where a copy or a backfill stands. Each
//! protocol stores it in its own form (`{"lsn": .., "skip": ..}`,
//! `{"file": .., "pos": .., "gtid": ..}`).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Failure, SourceError};
use crate::filter::{Cmp, Expr};
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
/// staged row (none before the first page); a table copied in parts on
/// several connections at once keeps where each part stands instead.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyAt {
    pub table: String,
    pub after: Option<Value>,
    /// The table's parts, once one of their pages is read (empty: the
    /// table is copied whole, in key order).
    pub parts: Vec<Part>,
}

impl CopyAt {
    /// The copy of `table` from its start.
    pub fn start(table: String) -> CopyAt {
        CopyAt {
            table,
            after: None,
            parts: Vec::new(),
        }
    }
}

/// Rows whose `column` (the first key column) is above `above` and at
/// most `upto`, as the server compares the column's type (None: no bound
/// on that side). The bounds are the column's text forms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyRange {
    pub column: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upto: Option<String>,
}

/// One part of a table's copy: its range, the key of its last staged row
/// (none before its first page) and whether it is done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub range: KeyRange,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
    #[serde(default)]
    pub done: bool,
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
    /// Only the rows of this range of the table (what a copy in parts
    /// cut short left of a part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<KeyRange>,
    /// The table's parts left after this one (none done), before the
    /// tables after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<Part>,
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
            range: None,
            ranges: Vec::new(),
        })
    }

    /// What the backfill reads of its table: the rows its `--where` keeps,
    /// within its range. An unreadable `--where` is named.
    pub fn filter(&self) -> Result<Option<Expr>, SourceError> {
        let asked = match self.filter.as_deref().map(Expr::parse).transpose() {
            Ok(f) => f,
            Err(e) => {
                let why = format!("backfill --where: {e}");
                return Err(SourceError::new(Failure::Invalid, why));
            }
        };
        let mut all: Vec<Expr> = asked.into_iter().collect();
        if let Some(r) = &self.range {
            let bound = |cmp, text: &String| {
                Expr::Compare(r.column.clone(), cmp, Value::String(text.clone()))
            };
            all.extend(r.above.iter().map(|a| bound(Cmp::Gt, a)));
            all.extend(r.upto.iter().map(|u| bound(Cmp::Le, u)));
        }
        Ok(match all.len() {
            0 => None,
            1 => all.pop(),
            _ => Some(Expr::And(all)),
        })
    }

    /// The current range or table is done: on to the table's next range,
    /// or the next table. False when it was the last.
    pub fn next_table(&mut self) -> bool {
        if !self.ranges.is_empty() {
            let next = self.ranges.remove(0);
            self.range = Some(next.range);
            self.after = next.after;
            return true;
        }
        if self.rest.is_empty() {
            return false;
        }
        self.table = self.rest.remove(0);
        self.after = None;
        self.range = None;
        true
    }

    /// A copy cut short at `copy` goes on as a backfill of its table and
    /// the tables after it (the first, when its table is no longer
    /// captured); of a table copied in parts, the parts not done, each
    /// after its last staged row, so no row is read twice.
    pub fn resume_copy(tables: &[String], copy: CopyAt) -> Option<Staged> {
        let Some(at) = tables.iter().position(|t| *t == copy.table) else {
            return Staged::of(tables, None);
        };
        if copy.parts.is_empty() {
            return Staged::of(&tables[at..], copy.after);
        }
        let mut left = copy.parts.into_iter().filter(|p| !p.done);
        let Some(first) = left.next() else {
            // every part done: the table is
            return Staged::of(&tables[at + 1..], None);
        };
        let mut staged = Staged::of(&tables[at..], first.after)?;
        staged.range = Some(first.range);
        staged.ranges = left.collect();
        Some(staged)
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
            after: Some(Value::from(7)),
            ..CopyAt::start("b".into())
        };
        let s = Staged::resume_copy(&tables, copy).unwrap();
        assert_eq!((s.table.as_str(), s.rest.len()), ("b", 1));
        let gone = CopyAt::start("x".into());
        assert_eq!(Staged::resume_copy(&tables, gone).unwrap().table, "a");
        let mut s = Staged::of(&tables[1..], None).unwrap();
        assert!(s.next_table() && s.table == "c" && !s.next_table());
    }

    fn range(above: Option<&str>, upto: Option<&str>) -> KeyRange {
        KeyRange {
            column: "id".into(),
            above: above.map(str::to_string),
            upto: upto.map(str::to_string),
        }
    }

    #[test]
    fn a_copy_in_parts_cut_short_goes_on_with_the_parts_not_done() {
        let tables = vec!["a".to_string(), "b".into()];
        let part = |above, upto, after: Option<i64>, done| Part {
            range: range(above, upto),
            after: after.map(Value::from),
            done,
        };
        let copy = CopyAt {
            parts: vec![
                part(None, Some("10"), Some(4), false),
                part(Some("10"), Some("20"), None, true),
                part(Some("20"), None, None, false),
            ],
            ..CopyAt::start("a".into())
        };
        let mut s = Staged::resume_copy(&tables, copy.clone()).unwrap();
        assert_eq!(
            (s.table.as_str(), s.after.clone()),
            ("a", Some(Value::from(4)))
        );
        assert_eq!(s.range, Some(range(None, Some("10"))));
        assert!(s.next_table());
        assert_eq!((s.table.as_str(), s.after.clone()), ("a", None));
        assert_eq!(s.range, Some(range(Some("20"), None)));
        assert!(s.next_table());
        assert_eq!((s.table.as_str(), s.range.clone()), ("b", None));
        assert!(!s.next_table());

        // stored and read back as it was
        let text = serde_json::to_string(&Staged::resume_copy(&tables, copy.clone())).unwrap();
        let back: Option<Staged> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, Staged::resume_copy(&tables, copy.clone()));

        // every part done: the table is
        let done = CopyAt {
            parts: copy
                .parts
                .iter()
                .cloned()
                .map(|p| Part { done: true, ..p })
                .collect(),
            ..copy
        };
        let s = Staged::resume_copy(&tables, done).unwrap();
        assert_eq!((s.table.as_str(), s.range), ("b", None));
    }

    #[test]
    fn a_range_is_read_within_the_filter_asked_for() {
        let mut s = Staged::of(&["a".to_string()], None).unwrap();
        assert_eq!(s.filter().unwrap(), None);
        s.range = Some(range(Some("10"), Some("20")));
        let sql = s
            .filter()
            .unwrap()
            .unwrap()
            .to_sql(crate::filter::Dialect::Postgres);
        assert_eq!(sql, "((\"id\" > U&'10') AND (\"id\" <= U&'20'))");
        s.filter = Some("region = 'eu'".into());
        s.range = Some(range(None, Some("20")));
        let sql = s
            .filter()
            .unwrap()
            .unwrap()
            .to_sql(crate::filter::Dialect::Postgres);
        assert_eq!(sql, "((\"region\" = U&'eu') AND (\"id\" <= U&'20'))");
        s.filter = Some("region = ".into());
        assert!(s.filter().unwrap_err().to_string().contains("--where"));
    }
}
