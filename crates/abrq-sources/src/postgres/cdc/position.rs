//! The cursor as a postgres cdc stream stores it:
//! `{"lsn": "0/16B3748", "skip": 1000}`, and while a copy runs
//! `"snapshot"` (the copy's own cursor in its table, empty before the
//! first page) and `"copying"` (the table), and a backfill under way.

use pgwire_replication::Lsn;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cdc::{CopyAt, Cursor, Staged};
use crate::error::{Failure, SourceError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Stored {
    #[serde(with = "lsn_text")]
    lsn: Lsn,
    #[serde(default)]
    skip: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<String>,
    /// The table the copy is in (absent: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    copying: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backfill: Option<Staged>,
}

pub fn decode(text: &str) -> Result<Cursor<Lsn>, SourceError> {
    let s: Stored = serde_json::from_str(text).map_err(|e| {
        SourceError::caused(
            Failure::Invalid,
            format!("the stored cursor {text:?} is not this source's"),
            e,
        )
    })?;
    Ok(Cursor {
        at: s.lsn,
        skip: s.skip,
        // an unknown table is no captured one: the copy goes on from the first
        copy: s.snapshot.map(|after| CopyAt {
            table: s.copying.unwrap_or_default(),
            after: (!after.is_empty()).then_some(Value::String(after)),
        }),
        backfill: s.backfill,
    })
}

pub fn encode(c: &Cursor<Lsn>) -> String {
    let after = |a: &Option<Value>| match a {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    let stored = Stored {
        lsn: c.at,
        skip: c.skip,
        snapshot: c.copy.as_ref().map(|at| after(&at.after)),
        copying: c.copy.as_ref().map(|at| at.table.clone()),
        backfill: c.backfill.clone(),
    };
    serde_json::to_string(&stored).expect("a cursor serializes")
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
        ] {
            assert_eq!(encode(&decode(text).unwrap()), text);
        }
        let c = decode(r#"{"lsn":"1/0","snapshot":"x"}"#).unwrap();
        assert_eq!(c.copy.unwrap().table, "");
        assert!(decode("{}").unwrap_err().is_definite());
    }
}
