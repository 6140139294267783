//! The cursor as a postgres cdc stream stores it:
//! `{"lsn": "0/16B3748", "skip": 1000}`, and while a copy runs
//! `"snapshot"` (the copy's own cursor in its table, empty before the
//! first page) and `"copying"` (the table), with `"parts"` when the table
//! is copied in parts (each its range, last staged row and whether it is
//! done), and a backfill under way.

use pgwire_replication::Lsn;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cdc::cursor::Part;
use crate::cdc::{CopyAt, Cursor, Staged};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    #[serde(with = "lsn_text")]
    lsn: Lsn,
    #[serde(default)]
    skip: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<String>,
    /// The table the copy is in (absent: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    copying: Option<String>,
    /// The parts of the table the copy is in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backfill: Option<Staged>,
    /// The last backfill request taken up (its audit entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backfills_taken: Option<i64>,
}

impl From<Stored> for Cursor<Lsn> {
    fn from(s: Stored) -> Cursor<Lsn> {
        Cursor {
            at: s.lsn,
            skip: s.skip,
            // an unknown table is no captured one: the copy goes on from the first
            copy: s.snapshot.map(|after| CopyAt {
                table: s.copying.unwrap_or_default(),
                after: (!after.is_empty()).then_some(Value::String(after)),
                parts: s.parts,
            }),
            backfill: s.backfill,
            taken: s.backfills_taken,
        }
    }
}

impl From<Cursor<Lsn>> for Stored {
    fn from(c: Cursor<Lsn>) -> Stored {
        let after = |a: Option<Value>| match a {
            None => String::new(),
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
        };
        let (snapshot, copying, parts) = match c.copy {
            Some(at) => (Some(after(at.after)), Some(at.table), at.parts),
            None => (None, None, Vec::new()),
        };
        Stored {
            lsn: c.at,
            skip: c.skip,
            snapshot,
            copying,
            parts,
            backfill: c.backfill,
            backfills_taken: c.taken,
        }
    }
}

mod lsn_text {
    use pgwire_replication::Lsn;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(lsn: &Lsn, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&lsn.to_pg_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Lsn, D::Error> {
        let text = String::deserialize(d)?;
        Lsn::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_as_written() {
        for text in [
            r#"{"lsn":"0/16B3748","skip":1000}"#,
            r#"{"lsn":"0/16B3748","skip":0,"snapshot":"","copying":"public.a"}"#,
            r#"{"lsn":"0/1","skip":0,"snapshot":"{\"c\":\"9\",\"k\":[]}","copying":"public.a"}"#,
            r#"{"lsn":"0/1","skip":0,"backfill":{"table":"public.b","after":"x","rows":3}}"#,
            r#"{"lsn":"0/1","skip":0,"snapshot":"","copying":"public.a","parts":[{"range":{"column":"id","upto":"5"},"after":"{\"c\":\"3\",\"k\":[]}","done":false},{"range":{"column":"id","above":"5"},"done":true}]}"#,
            r#"{"lsn":"0/1","skip":0,"backfill":{"table":"public.a","rows":0,"range":{"column":"id","above":"5"},"ranges":[{"range":{"column":"id","above":"9"},"after":"x","done":false}]}}"#,
        ] {
            let c = Cursor::<Lsn>::decode::<Stored>(text).unwrap();
            assert_eq!(c.encode::<Stored>(), text);
        }
        let c = Cursor::<Lsn>::decode::<Stored>(r#"{"lsn":"1/0","snapshot":"x"}"#).unwrap();
        assert_eq!(c.copy.unwrap().table, "");
        assert!(Cursor::<Lsn>::decode::<Stored>("{}")
            .unwrap_err()
            .is_definite());
    }
}
