//! MariaDB global transaction ids. A MariaDB stream's cursor carries the
//! GTID position after its last staged transaction (one `domain-server-seq`
//! per replication domain, as `@@gtid_binlog_pos` writes it), and a
//! restart asks the server for the binlog from that position, not from a
//! file and offset: it holds on any server of the replication topology,
//! so after a failover the stream goes on at the new primary. A MySQL
//! server (no MariaDB GTIDs) is read by file and position.

use std::collections::BTreeMap;
use std::fmt;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::error::{Failure, SourceError};

/// MariaDB's GTID event, which opens every event group of its binlog.
pub const EVENT: u8 = 162;
/// The group is one statement outside a transaction (DDL).
const FL_STANDALONE: u8 = 1;
/// The group is an XA transaction up to its `XA PREPARE`.
const FL_PREPARED_XA: u8 = 64;

/// A GTID position: the last transaction of each domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidPos(BTreeMap<u32, (u32, u64)>);

/// One transaction's id, from its GTID event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
    /// A statement of its own: no transaction follows.
    pub standalone: bool,
    /// An XA transaction's group, ended by its prepare.
    pub xa: bool,
}

impl Gtid {
    /// The GTID event's body: sequence number, domain, flags.
    pub fn parse(body: &[u8], server: u32) -> Option<Gtid> {
        let seq = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
        let domain = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
        let flags = *body.get(12)?;
        Some(Gtid {
            domain,
            server,
            seq,
            standalone: flags & FL_STANDALONE != 0,
            xa: flags & FL_PREPARED_XA != 0,
        })
    }
}

impl GtidPos {
    pub fn parse(text: &str) -> Result<GtidPos, String> {
        let mut map = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("{part:?} is not a GTID (domain-server-sequence)");
            let mut it = part.split('-');
            let (Some(d), Some(s), Some(n), None) = (it.next(), it.next(), it.next(), it.next())
            else {
                return Err(bad());
            };
            let d = d.parse().map_err(|_| bad())?;
            let s = s.parse().map_err(|_| bad())?;
            let n = n.parse().map_err(|_| bad())?;
            map.insert(d, (s, n));
        }
        Ok(GtidPos(map))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The position after `g` committed.
    pub fn advance(&mut self, g: &Gtid) {
        self.0.insert(g.domain, (g.server, g.seq));
    }
}

impl fmt::Display for GtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(d, (s, n))| format!("{d}-{s}-{n}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Whether the server is MariaDB (which has GTID positions a replica can
/// connect with).
pub async fn is_mariadb(conn: &mut Conn) -> Result<bool, SourceError> {
    let v: Option<String> = conn
        .query_first("SELECT @@version")
        .await
        .map_err(|e| SourceError::from_client("cannot read the server's version", e))?;
    Ok(v.is_some_and(|v| v.contains("MariaDB")))
}

/// MariaDB: the GTID position at binlog `file`:`pos` (empty before the
/// server's first transaction).
pub async fn at(conn: &mut Conn, file: &str, pos: u64) -> Result<GtidPos, SourceError> {
    let v: Option<Option<String>> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file, pos))
        .await
        .map_err(|e| {
            SourceError::from_client(format!("cannot read the GTID position of {file}:{pos}"), e)
        })?;
    GtidPos::parse(&v.flatten().unwrap_or_default())
        .map_err(|e| SourceError::new(Failure::Decode, format!("BINLOG_GTID_POS: {e}")))
}

/// Prepares a replica connection to MariaDB: GTID events instead of the
/// `BEGIN` an old replica gets, and, with `from`, the binlog from that
/// GTID position (the server then ignores the file and offset asked for).
pub async fn prepare(conn: &mut Conn, from: Option<&GtidPos>) -> Result<(), SourceError> {
    let err = |e| SourceError::from_client("cannot prepare GTID replication", e);
    // MARIA_SLAVE_CAPABILITY_GTID
    conn.query_drop("SET @mariadb_slave_capability = 4")
        .await
        .map_err(err)?;
    if let Some(pos) = from {
        conn.exec_drop("SET @slave_connect_state = ?", (pos.to_string(),))
            .await
            .map_err(err)?;
        conn.query_drop("SET @slave_gtid_strict_mode = 0")
            .await
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_reads_and_writes_like_the_server() {
        let p = GtidPos::parse("0-1-100,2-7-5").unwrap();
        assert_eq!(p.to_string(), "0-1-100,2-7-5");
        assert!(GtidPos::parse("").unwrap().is_empty());
        assert!(GtidPos::parse("0-1").is_err());
        let mut p = p;
        p.advance(&Gtid {
            domain: 0,
            server: 3,
            seq: 101,
            standalone: false,
            xa: false,
        });
        p.advance(&Gtid {
            domain: 1,
            server: 3,
            seq: 1,
            standalone: true,
            xa: false,
        });
        assert_eq!(p.to_string(), "0-3-101,1-3-1,2-7-5");
    }

    #[test]
    fn a_gtid_event_says_its_id_and_whether_it_stands_alone() {
        let mut body = 42u64.to_le_bytes().to_vec();
        body.extend(9u32.to_le_bytes());
        body.push(FL_STANDALONE);
        let g = Gtid::parse(&body, 5).unwrap();
        assert_eq!((g.domain, g.server, g.seq, g.standalone), (9, 5, 42, true));
        assert_eq!(Gtid::parse(&body[..10], 5), None);
    }
}
