//! The cursor as a mysql cdc stream stores it:
//! `{"file": "binlog.000003", "pos": 1808, "skip": 1000}`, with MariaDB's
//! GTID position at that point (`"gtid"`), and while a copy runs where it
//! stands (`"snapshot": {"table", "after"}`), and a backfill under way.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cdc::{CopyAt, Cursor, Staged};

/// A position in the binlog: file and offset, and on MariaDB the GTID
/// position there, which a restart reads from (file and offset are then
/// for status and ordering).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BinlogAt {
    pub file: String,
    pub pos: u64,
    pub gtid: Option<String>,
}

impl PartialOrd for BinlogAt {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(file_order(&self.file, &other.file).then(self.pos.cmp(&other.pos)))
    }
}

/// Binlog files are `base.NNNNNN`: ordered by their number.
pub fn file_order(a: &str, b: &str) -> Ordering {
    let num = |f: &str| f.rsplit_once('.').and_then(|(_, n)| n.parse::<u64>().ok());
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    file: String,
    pos: u64,
    #[serde(default)]
    skip: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<CopyPos>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backfill: Option<Staged>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gtid: Option<String>,
    /// The last backfill request taken up (its audit entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backfills_taken: Option<i64>,
}

/// Where the copy stands: the table (`database.name`) and the key of its
/// last staged row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CopyPos {
    table: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<Vec<Value>>,
}

impl From<Stored> for Cursor<BinlogAt> {
    fn from(s: Stored) -> Cursor<BinlogAt> {
        Cursor {
            at: BinlogAt {
                file: s.file,
                pos: s.pos,
                gtid: s.gtid,
            },
            skip: s.skip,
            copy: s.snapshot.map(|c| CopyAt {
                after: c.after.map(Value::Array),
                ..CopyAt::start(c.table)
            }),
            backfill: s.backfill,
            taken: s.backfills_taken,
        }
    }
}

impl From<Cursor<BinlogAt>> for Stored {
    fn from(c: Cursor<BinlogAt>) -> Stored {
        Stored {
            file: c.at.file,
            pos: c.at.pos,
            skip: c.skip,
            snapshot: c.copy.map(|at| CopyPos {
                table: at.table,
                after: match at.after {
                    Some(Value::Array(key)) => Some(key),
                    Some(other) => Some(vec![other]),
                    None => None,
                },
            }),
            backfill: c.backfill,
            gtid: c.at.gtid,
            backfills_taken: c.taken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_as_written() {
        for text in [
            r#"{"file":"b.000003","pos":1808,"skip":1000}"#,
            r#"{"file":"b.000003","pos":4,"skip":0,"snapshot":{"table":"d.t","after":[5,"x"]}}"#,
            r#"{"file":"b.000003","pos":4,"skip":0,"backfill":{"table":"d.t","after":[1],"rows":1},"gtid":"0-1-9"}"#,
        ] {
            let c = Cursor::<BinlogAt>::decode::<Stored>(text).unwrap();
            assert_eq!(c.encode::<Stored>(), text);
        }
    }

    #[test]
    fn binlog_files_order_by_number() {
        assert_eq!(file_order("b.000009", "b.000010"), Ordering::Less);
        assert_eq!(file_order("b.999999", "b.1000000"), Ordering::Less);
        assert_eq!(file_order("b.000010", "b.000010"), Ordering::Equal);
        let at = |f: &str, p| BinlogAt {
            file: f.into(),
            pos: p,
            gtid: None,
        };
        assert!(at("b.000010", 4) > at("b.000009", 900));
    }
}
