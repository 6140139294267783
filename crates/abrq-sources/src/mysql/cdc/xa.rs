//! XA transactions. The binlog holds an XA transaction's rows in a group
//! that ends at its `XA PREPARE`; whether it committed is said later, by an
//! `XA COMMIT` or `XA ROLLBACK` statement of its own, with other
//! transactions in between. Its changes are held from the group's start;
//! at the prepare the binlog is read ahead, and the events read kept, until
//! the statement that ends it. A commit hands its changes out at the
//! prepare's position, then the events read ahead; a rollback hands out
//! nothing. Placing them at the prepare keeps each row's order: a prepared
//! transaction holds its row locks until it ends, so nothing between its
//! prepare and its commit changed its rows. The cursor stays before the
//! prepare until it ends, so a restart reads it again.

use std::collections::VecDeque;

use mysql_async::binlog::events::Event;

use super::BinlogAt;
use crate::cdc::Step;
use crate::error::{Failure, SourceError};

/// The binlog read ahead of one prepared transaction is held in memory up
/// to this size; beyond it the source fails (and retries) by name.
pub const AHEAD_LIMIT: usize = 256 << 20;

/// An XA transaction being read.
#[derive(Default)]
pub struct Xa {
    /// Its changes, held until it ends.
    pub steps: Vec<Step<BinlogAt>>,
    /// After its prepare: the id as `XA COMMIT` writes it, and the commit
    /// at the prepare's position.
    pub prepared: Option<(String, Step<BinlogAt>)>,
    /// Events read after the prepare, handed on once it ends.
    pub ahead: VecDeque<Event>,
    ahead_bytes: usize,
}

/// How a prepared XA transaction ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Commit,
    Rollback,
}

impl Xa {
    /// Keeps an event read ahead; fails once too much is held.
    pub fn keep(&mut self, event: Event, at: &str) -> Result<(), SourceError> {
        self.ahead_bytes += event.data().len();
        self.ahead.push_back(event);
        if self.ahead_bytes > AHEAD_LIMIT {
            let xid = self.prepared.as_ref().map_or("?", |(x, _)| x.as_str());
            return Err(SourceError::new(
                Failure::Server,
                format!(
                    "the XA transaction {xid} prepared before {at} has no XA COMMIT or XA \
                     ROLLBACK in the {} MiB of binlog after it; the stream waits at its \
                     prepare until it ends (XA RECOVER lists it)",
                    AHEAD_LIMIT >> 20
                ),
            ));
        }
        Ok(())
    }
}

/// The id an XA_PREPARE event carries, written as `XA COMMIT` and `XA
/// ROLLBACK` statements write it in the binlog: `X'gtrid',X'bqual',format`.
pub fn prepared_id(body: &[u8]) -> Option<String> {
    // one_phase (1), formatID (4), gtrid_length (4), bqual_length (4), data
    let format = i32::from_le_bytes(body.get(1..5)?.try_into().ok()?);
    let gtrid = u32::from_le_bytes(body.get(5..9)?.try_into().ok()?) as usize;
    let bqual = u32::from_le_bytes(body.get(9..13)?.try_into().ok()?) as usize;
    let data = body.get(13..13 + gtrid + bqual)?;
    Some(format!(
        "X'{}',X'{}',{format}",
        hex(&data[..gtrid]),
        hex(&data[gtrid..])
    ))
}

/// Whether `sql` ends the XA transaction `xid`, and how.
pub fn ends(sql: &str, xid: &str) -> Option<End> {
    let sql = sql.trim();
    let (end, rest) = if let Some(rest) = strip_prefix_ci(sql, "XA COMMIT ") {
        (End::Commit, rest)
    } else {
        (End::Rollback, strip_prefix_ci(sql, "XA ROLLBACK ")?)
    };
    rest.trim().eq_ignore_ascii_case(xid).then_some(end)
}

/// Whether `sql` starts an XA transaction (MySQL writes it as a statement;
/// MariaDB flags the group's GTID event).
pub fn starts(sql: &str) -> bool {
    strip_prefix_ci(sql.trim(), "XA START ").is_some()
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare_body(gtrid: &[u8], bqual: &[u8], format: i32) -> Vec<u8> {
        let mut b = vec![0u8];
        b.extend(format.to_le_bytes());
        b.extend((gtrid.len() as u32).to_le_bytes());
        b.extend((bqual.len() as u32).to_le_bytes());
        b.extend(gtrid);
        b.extend(bqual);
        b
    }

    #[test]
    fn the_prepared_id_reads_as_the_binlog_writes_its_end() {
        let id = prepared_id(&prepare_body(b"p1", b"", 1)).unwrap();
        assert_eq!(id, "X'7031',X'',1");
        assert_eq!(ends("XA COMMIT X'7031',X'',1", &id), Some(End::Commit));
        assert_eq!(ends("xa rollback X'7031',X'',1", &id), Some(End::Rollback));
        assert_eq!(ends("XA COMMIT X'7032',X'',1", &id), None);
        assert_eq!(ends("COMMIT", &id), None);
        let id = prepared_id(&prepare_body(b"g", b"\xff", 7)).unwrap();
        assert_eq!(ends("XA COMMIT X'67',X'ff',7", &id), Some(End::Commit));
    }

    #[test]
    fn a_short_prepare_event_has_no_id() {
        let mut b = prepare_body(b"abc", b"d", 1);
        b.truncate(b.len() - 1);
        assert_eq!(prepared_id(&b), None);
    }

    #[test]
    fn an_xa_start_statement_is_recognised() {
        assert!(starts("XA START X'7031',X'',1"));
        assert!(!starts("XA END X'7031',X'',1"));
        assert!(!starts("BEGIN"));
    }
}
