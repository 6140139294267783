//! `mode = "cdc"`: the row-based binlog read as a replica (mysql_async's
//! binlog stream). The stream's cursor is the binlog file and position
//! just after the last source transaction whose changes are all staged,
//! plus how many changes of the next one are staged when a transaction
//! spans batches (`{"file": "binlog.000003", "pos": 1808, "skip": 1000}`).
//! A restart asks the server for the binlog from there and skips exactly
//! the changes already staged. Column names and types come from the
//! catalog (the binlog has neither), read again when an `ALTER TABLE` of a
//! captured table goes by.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_core::{Item, Op, Record, TableRef};
use futures::StreamExt;
use mysql_async::binlog::events::{EventData, RowsEventData};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::catalog::{self, Shape};
use super::config::{MysqlSettings, TableName};
use super::{snapshot, values};
use crate::chunk::{Chunk, Limits};
use crate::file::SourceError;
use crate::progress::Progress;

mod backfill;
mod gtid;

use gtid::{Gtid, GtidPos};

const FIRST_WAIT: Duration = Duration::from_millis(200);
const NEXT_WAIT: Duration = Duration::from_millis(5);
/// A read returns at most this long after its first event.
const READ_SLICE: Duration = Duration::from_millis(5);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Position {
    file: String,
    pos: u64,
    #[serde(default)]
    skip: u64,
    /// While the snapshot copy runs: where it stands (the binlog
    /// position is then the snapshot's, where streaming starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<snapshot::CopyPos>,
    /// A backfill under way (`abrq backfill`, or the rest of a copy cut
    /// short).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backfill: Option<backfill::Staged>,
    /// MariaDB: the GTID position at `file`:`pos`, which a restart reads
    /// from (file and offset are then for status and ordering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gtid: Option<String>,
}

/// The copy while it runs: its connection (in the snapshot's transaction
/// on the first run) and the tables left, the current one first.
struct Copy {
    conn: Conn,
    queue: Vec<TableName>,
}

#[derive(Debug, Default)]
struct Txn {
    open: bool,
    changes: u64,
    skip: u64,
    /// MariaDB: the id its GTID event gave the transaction.
    gtid: Option<Gtid>,
}

pub struct MysqlCdcSource {
    settings: MysqlSettings,
    server_id: u32,
    position: Option<Position>,
    binlog: Option<BinlogStream>,
    /// The binlog file the stream is in (rotations move it) and the end
    /// of the last event read in it.
    file: String,
    read_pos: u64,
    /// The name in the rotate the server sends first, until the format
    /// description says whether a checksum ends it.
    first_rotate: Option<Vec<u8>>,
    mariadb: Option<bool>,
    /// MariaDB: the GTID position of the last transaction read.
    gtid: GtidPos,
    catalog: Option<Conn>,
    captured: HashSet<TableName>,
    shapes: HashMap<TableName, Arc<Shape>>,
    txn: Txn,
    declared_in_chunk: Vec<TableName>,
    scope_in_chunk: Option<TableName>,
    /// Unix time of the last event read, and whether nothing waited.
    last_event: Option<u32>,
    caught_up: bool,
    copy: Option<Copy>,
    copied_rows: u64,
    backfill_asked: Vec<Option<String>>,
    backfill_error: Option<String>,
    /// The backfill's page waiting for the stream to reach its position,
    /// and the connection pages are read on.
    page: Option<backfill::Page>,
    backfill_conn: Option<Conn>,
    /// A stream's first start: its starting position is staged before
    /// anything is read, so a crash before the first batch resumes there
    /// instead of at a later end of the binlog.
    announce: bool,
}

/// A database error of the source at `s`, saying what was being done.
pub(super) fn fail(s: &MysqlSettings, what: &str, e: impl std::fmt::Display) -> SourceError {
    SourceError::Database {
        at: s.describe(),
        message: format!("{what}: {e}"),
    }
}

impl MysqlCdcSource {
    pub fn new(
        settings: MysqlSettings,
        stream: &str,
        cursor: Option<&str>,
    ) -> Result<Self, SourceError> {
        let position = match cursor {
            None => None,
            Some(c) => Some(serde_json::from_str(c).map_err(|e| SourceError::Database {
                at: settings.describe(),
                message: format!("the stored cursor {c:?} is not this source's: {e}"),
            })?),
        };
        Ok(MysqlCdcSource {
            server_id: settings.server_id_for(stream),
            captured: settings.tables.iter().cloned().collect(),
            settings,
            position,
            binlog: None,
            file: String::new(),
            read_pos: 0,
            first_rotate: None,
            mariadb: None,
            gtid: GtidPos::default(),
            catalog: None,
            shapes: HashMap::new(),
            txn: Txn::default(),
            declared_in_chunk: Vec::new(),
            scope_in_chunk: None,
            last_event: None,
            caught_up: false,
            copy: None,
            copied_rows: 0,
            backfill_asked: Vec::new(),
            backfill_error: None,
            page: None,
            backfill_conn: None,
            announce: false,
        })
    }

    fn fail(&self, what: &str, e: impl std::fmt::Display) -> SourceError {
        fail(&self.settings, what, e)
    }

    async fn catalog(&mut self) -> Result<&mut Conn, SourceError> {
        if self.catalog.is_none() {
            let conn = Conn::new(self.settings.opts())
                .await
                .map_err(|e| self.fail("cannot connect", e))?;
            self.catalog = Some(conn);
        }
        Ok(self.catalog.as_mut().expect("connected above"))
    }

    /// Where the source stands and how far behind the server it is.
    pub fn progress(&self) -> Progress {
        let lag_seconds = match (self.caught_up, self.last_event) {
            (true, _) => Some(0.0),
            (false, Some(at)) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                Some(now.saturating_sub(u64::from(at)) as f64)
            }
            (false, None) => None,
        };
        Progress {
            position: serde_json::json!({
                "binlog": self.position.as_ref().map(|p| serde_json::json!({"file": p.file, "pos": p.pos, "gtid": p.gtid})),
                "snapshot": match self.position.as_ref().and_then(|p| p.snapshot.as_ref()) {
                    Some(c) => serde_json::json!({"state": "copying", "table": c.table, "rows": self.copied_rows}),
                    None => serde_json::json!({"state": "done", "rows": self.copied_rows}),
                },
                "backfill": self.backfill_progress(),
                "server_id": self.server_id,
                "tables": self.settings.tables.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }),
            lag_seconds,
            lag_bytes: None,
        }
    }

    /// For `abrq check`: every missing prerequisite, or where it reads.
    pub async fn check(&mut self) -> Result<String, SourceError> {
        let conn = self.catalog().await?;
        let mut missing = catalog::missing(conn)
            .await
            .map_err(|e| fail_text("check", e))?;
        for t in self.settings.tables.clone() {
            let conn = self.catalog().await?;
            if catalog::shape(conn, &t)
                .await
                .map_err(|e| fail_text("check", e))?
                .is_none()
            {
                missing.push(format!("table {t} does not exist"));
            }
        }
        if let Some(p) = self.position.clone() {
            // by GTID another server of the topology may serve it
            if p.gtid.is_none() && !self.binlog_exists(&p.file).await? {
                missing.push(purged(&p));
            }
        }
        if !missing.is_empty() {
            return Err(self.fail("not ready for binlog replication", missing.join("; ")));
        }
        Ok(match &self.position {
            None => format!(
                "binlog ready; reading starts at the current end of the binlog as replica {}",
                self.server_id
            ),
            Some(p) => match &p.gtid {
                Some(g) => format!(
                    "resumes at GTID position {g} ({}:{}) as replica {}",
                    p.file, p.pos, self.server_id
                ),
                None => format!(
                    "resumes at {}:{} as replica {}",
                    p.file, p.pos, self.server_id
                ),
            },
        })
    }

    async fn is_mariadb(&mut self) -> Result<bool, SourceError> {
        if let Some(m) = self.mariadb {
            return Ok(m);
        }
        let conn = self.catalog().await?;
        let m = gtid::is_mariadb(conn)
            .await
            .map_err(|e| fail_text("setup", e))?;
        self.mariadb = Some(m);
        Ok(m)
    }

    /// MariaDB's GTID position at `file`:`pos`; none before any GTID.
    async fn gtid_at(&mut self, file: &str, pos: u64) -> Result<Option<String>, SourceError> {
        let conn = self.catalog().await?;
        let g = gtid::at(conn, file, pos)
            .await
            .map_err(|e| fail_text("setup", e))?;
        Ok((!g.is_empty()).then(|| g.to_string()))
    }

    async fn binlog_exists(&mut self, file: &str) -> Result<bool, SourceError> {
        let conn = self.catalog().await?;
        let logs: Vec<mysql_async::Row> = conn
            .query("SHOW BINARY LOGS")
            .await
            .map_err(|e| fail_text("cannot list the binlog files", e))?;
        Ok(logs
            .iter()
            .any(|r| r.get::<String, _>(0).is_some_and(|f| f == file)))
    }

    async fn start(&mut self) -> Result<(), SourceError> {
        let conn = self.catalog().await?;
        let missing = catalog::missing(conn)
            .await
            .map_err(|e| fail_text("setup", e))?;
        if !missing.is_empty() {
            return Err(self.fail("not ready for binlog replication", missing.join("; ")));
        }
        let mariadb = self.is_mariadb().await?;
        let position = match self.position.clone() {
            Some(mut p) => {
                let by_gtid = mariadb && p.gtid.as_deref().is_some_and(|g| !g.is_empty());
                if !by_gtid {
                    if !self.binlog_exists(&p.file).await? {
                        return Err(self.fail("binlog position lost", purged(&p)));
                    }
                    if mariadb {
                        p.gtid = self.gtid_at(&p.file, p.pos).await?;
                    }
                }
                if let Some(c) = p.snapshot.take() {
                    // a copy cut short: streaming starts at the snapshot's
                    // position and the rest is read as a backfill, each
                    // page placed where the stream reaches its own snapshot
                    let at = self
                        .settings
                        .tables
                        .iter()
                        .position(|t| t.to_string() == c.table)
                        .unwrap_or(0);
                    tracing::info!(table = %c.table, "snapshot copy cut short: the rest is read as a backfill");
                    p.backfill = backfill::Staged::of(&self.settings.tables[at..], c.after);
                }
                p
            }
            None if self.settings.snapshot => {
                let mut conn = Conn::new(self.settings.opts())
                    .await
                    .map_err(|e| self.fail("cannot connect", e))?;
                let (file, pos) = snapshot::open(&mut conn)
                    .await
                    .map_err(|e| self.fail("snapshot", e))?;
                tracing::info!(%file, pos, "consistent snapshot opened; copying the tables");
                let first = self.settings.tables[0].to_string();
                self.position = Some(Position {
                    file,
                    pos,
                    skip: 0,
                    snapshot: Some(snapshot::CopyPos {
                        table: first,
                        after: None,
                    }),
                    backfill: None,
                    gtid: None,
                });
                self.copy = Some(Copy {
                    conn,
                    queue: self.settings.tables.clone(),
                });
                return Ok(());
            }
            None => {
                let conn = self.catalog().await?;
                let row: Option<mysql_async::Row> = conn
                    .query_first("SHOW MASTER STATUS")
                    .await
                    .map_err(|e| fail_text("cannot read the binlog position", e))?;
                let (Some(file), Some(pos)) = (
                    row.as_ref().and_then(|r| r.get::<String, _>(0)),
                    row.as_ref().and_then(|r| r.get::<u64, _>(1)),
                ) else {
                    return Err(self.fail("setup", "SHOW MASTER STATUS shows no binlog"));
                };
                let gtid = match mariadb {
                    true => self.gtid_at(&file, pos).await?,
                    false => None,
                };
                self.announce = true;
                Position {
                    file,
                    pos,
                    skip: 0,
                    snapshot: None,
                    backfill: None,
                    gtid,
                }
            }
        };
        let mut conn = Conn::new(self.settings.opts())
            .await
            .map_err(|e| self.fail("cannot connect", e))?;
        let from = match position.gtid.as_deref() {
            Some(g) => GtidPos::parse(g).map_err(|e| self.fail("the stored cursor", e))?,
            None => GtidPos::default(),
        };
        if mariadb {
            let by_gtid = (!from.is_empty()).then_some(&from);
            gtid::prepare(&mut conn, by_gtid)
                .await
                .map_err(|e| self.fail("setup", e))?;
        }
        let request = BinlogStreamRequest::new(self.server_id)
            .with_filename(position.file.as_bytes())
            .with_pos(position.pos);
        let binlog = conn
            .get_binlog_stream(request)
            .await
            .map_err(|e| self.fail("cannot start reading the binlog", e))?;
        tracing::info!(file = %position.file, pos = position.pos, gtid = ?position.gtid, skip = position.skip, server_id = self.server_id, "binlog replication started");
        // by GTID the server says where it starts (its first rotate)
        self.file = match from.is_empty() {
            true => position.file.clone(),
            false => String::new(),
        };
        self.read_pos = position.pos;
        self.first_rotate = None;
        self.gtid = from;
        self.txn = Txn {
            skip: position.skip,
            ..Txn::default()
        };
        self.position = Some(position);
        self.binlog = Some(binlog);
        Ok(())
    }

    /// Reads the changes that arrive until `limits` is reached or the
    /// binlog is quiet.
    pub async fn read_chunk(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        if self.binlog.is_none() && self.copy.is_none() {
            self.start().await?;
        }
        let result = match self.copy.is_some() {
            true => self.read_copy(limits).await,
            false => self.read(limits).await,
        };
        if result.is_err() {
            // the session is made again from the staged position
            self.binlog = None;
            self.catalog = None;
            self.copy = None;
            self.page = None;
            self.backfill_conn = None;
        }
        result
    }

    /// One page of the copy; after the last table's last page, streaming
    /// starts (on the next read) from the snapshot's position.
    async fn read_copy(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let mut copy = self.copy.take().expect("copying");
        let table = copy.queue[0].clone();
        let shape = self.shape(&table, 0).await?;
        let after = self
            .position
            .as_ref()
            .and_then(|p| p.snapshot.as_ref())
            .and_then(|c| c.after.clone());
        let page = snapshot::page(
            &mut copy.conn,
            &table,
            &shape,
            after.as_deref(),
            limits.max_records.max(1),
        )
        .await;
        let (rows, more) = page.map_err(|e| self.fail("snapshot", e))?;
        let mut chunk = Chunk::default();
        let last = rows.last().map(|r| snapshot::key_of(&shape, r));
        if !rows.is_empty() {
            chunk.items.push(Item::Table(TableRef::new(
                Some(&table.database),
                &table.name,
            )));
            chunk.items.push(Item::Schema {
                columns: shape.declared.clone(),
            });
        }
        for fields in rows {
            chunk.records += 1;
            chunk.bytes += serde_json::to_vec(&fields).map_or(0, |v| v.len() as u64);
            chunk.items.push(Item::Record(Record::insert(fields)));
        }
        self.copied_rows += chunk.records;
        let next = match more {
            true => Some(snapshot::CopyPos {
                table: table.to_string(),
                after: last.or(after),
            }),
            false => {
                copy.queue.remove(0);
                tracing::info!(%table, rows = self.copied_rows, "snapshot copy of a table done");
                copy.queue.first().map(|t| snapshot::CopyPos {
                    table: t.to_string(),
                    after: None,
                })
            }
        };
        let done = next.is_none();
        if let Some(p) = self.position.as_mut() {
            p.snapshot = next;
        }
        chunk.cursor = self.cursor_text(0);
        if !done {
            self.copy = Some(copy);
        }
        self.caught_up = false;
        Ok(chunk)
    }

    fn cursor_text(&self, skip: u64) -> Option<String> {
        self.position.as_ref().map(|p| {
            serde_json::to_string(&Position { skip, ..p.clone() }).expect("a position serializes")
        })
    }

    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let mut chunk = Chunk::default();
        if std::mem::take(&mut self.announce) {
            chunk.cursor = self.cursor_text(0);
            chunk.at_end = true;
            return Ok(chunk);
        }
        self.declared_in_chunk.clear();
        self.scope_in_chunk = None;
        let mut wait = FIRST_WAIT;
        let mut first: Option<Instant> = None;
        self.take_page().await?;
        loop {
            // between events: a backfill page the stream has reached joins here
            if self.place_page(&mut chunk) {
                wait = NEXT_WAIT;
                if chunk.is_full(limits) {
                    break;
                }
            }
            if first.is_some_and(|t| t.elapsed() >= READ_SLICE) {
                break;
            }
            let binlog = self.binlog.as_mut().expect("started above");
            let event = match tokio::time::timeout(wait, binlog.next()).await {
                Err(_) => {
                    chunk.at_end = true;
                    break;
                }
                Ok(None) => return Err(self.fail("binlog", "the server ended the stream")),
                Ok(Some(Err(e))) if gtid_purged(&e) => {
                    let p = self.position.clone().expect("started");
                    return Err(self.fail("binlog position lost", purged(&p)));
                }
                Ok(Some(Err(e))) => return Err(self.fail("binlog", e)),
                Ok(Some(Ok(e))) => e,
            };
            wait = NEXT_WAIT;
            first.get_or_insert_with(Instant::now);
            let header = event.header();
            let log_pos = u64::from(header.log_pos());
            // events from a file's header come first with their own, smaller positions
            self.read_pos = self.read_pos.max(log_pos);
            if header.timestamp() > 0 {
                self.last_event = Some(header.timestamp());
            }
            if header.event_type_raw() == gtid::EVENT {
                // MariaDB opens each event group with its GTID
                let g = Gtid::parse(event.data(), header.server_id());
                self.txn.gtid = g;
                if g.is_some_and(|g| !g.standalone) {
                    self.txn.open = true;
                    self.txn.changes = 0;
                }
                continue;
            }
            let data = event
                .read_data()
                .map_err(|e| self.fail("cannot decode a binlog event", e))?;
            match data {
                Some(EventData::RotateEvent(r)) if log_pos == 0 && self.file.is_empty() => {
                    self.first_rotate = Some(r.name_raw().to_vec());
                    self.read_pos = r.position();
                }
                Some(EventData::FormatDescriptionEvent(fde)) => {
                    if let Some(mut name) = self.first_rotate.take() {
                        let crc = fde.footer().get_checksum_alg().ok().flatten()
                            == Some(
                                mysql_async::binlog::BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32,
                            );
                        if crc {
                            name.truncate(name.len().saturating_sub(4));
                        }
                        self.file = String::from_utf8_lossy(&name).into_owned();
                    }
                }
                // the rotate the server sends first is a fake one, read
                // before the format description says how events end (its
                // name carries the checksum); the file asked for is known
                Some(EventData::RotateEvent(r)) if log_pos > 0 => {
                    self.file = r.name().into_owned();
                    self.read_pos = r.position();
                }
                Some(EventData::QueryEvent(q)) => {
                    let sql = q.query().trim().to_string();
                    let schema = q.schema().to_string();
                    if sql.eq_ignore_ascii_case("BEGIN") {
                        self.txn.open = true;
                        self.txn.changes = 0;
                        continue;
                    }
                    if self.txn.open && sql.eq_ignore_ascii_case("COMMIT") {
                        // the end of a transaction on a non-transactional engine
                        self.commit(log_pos, &mut chunk);
                        if chunk.is_full(limits) {
                            break;
                        }
                        continue;
                    }
                    if sql.starts_with('#') || self.txn.open {
                        continue;
                    }
                    // a statement of its own (DDL): a transaction boundary
                    self.statement(&sql, &schema, &mut chunk).await?;
                    self.commit(log_pos, &mut chunk);
                    if chunk.is_full(limits) {
                        break;
                    }
                }
                Some(EventData::XidEvent(_)) => {
                    self.commit(log_pos, &mut chunk);
                    if chunk.is_full(limits) {
                        break;
                    }
                }
                Some(EventData::RowsEvent(rows)) => {
                    let binlog = self.binlog.as_ref().expect("started above");
                    let Some(tme) = binlog.get_tme(rows.table_id()) else {
                        return Err(self.fail(
                            "cannot decode a change",
                            "a row event without its table map",
                        ));
                    };
                    let table = TableName {
                        database: tme.database_name().into_owned(),
                        name: tme.table_name().into_owned(),
                    };
                    if !self.captured.contains(&table) {
                        continue;
                    }
                    let op =
                        match &rows {
                            RowsEventData::WriteRowsEventV1(_)
                            | RowsEventData::WriteRowsEvent(_) => Op::Insert,
                            RowsEventData::UpdateRowsEventV1(_)
                            | RowsEventData::UpdateRowsEvent(_)
                            | RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
                            RowsEventData::DeleteRowsEventV1(_)
                            | RowsEventData::DeleteRowsEvent(_) => Op::Delete,
                        };
                    let columns = tme.columns_count() as usize;
                    let mut pairs: Vec<(Option<BinlogRow>, Option<BinlogRow>)> = Vec::new();
                    for row in rows.rows(tme) {
                        pairs
                            .push(row.map_err(|e| fail(&self.settings, "cannot decode a row", e))?);
                    }
                    let shape = self.shape(&table, columns).await?;
                    for (before, after) in pairs {
                        let row = match op {
                            Op::Delete => before,
                            Op::Insert | Op::Update => after,
                        };
                        let Some(row) = row else { continue };
                        let fields = fields(&shape, &row, op == Op::Delete);
                        self.push(
                            &table,
                            &shape,
                            Item::Record(Record { op, fields }),
                            &mut chunk,
                        );
                    }
                    if chunk.is_full(limits) && self.txn.open {
                        // a transaction spanning batches: the cursor stays at
                        // its start and counts what is staged
                        chunk.cursor = self.cursor_text(self.txn.changes);
                        break;
                    }
                }
                _ => {}
            }
        }
        self.caught_up = chunk.at_end && chunk.is_empty() && !self.txn.open;
        if self.txn.open && self.txn.changes > 0 && !chunk.is_empty() {
            chunk.cursor = self.cursor_text(self.txn.changes);
        }
        Ok(chunk)
    }

    /// The end of a source transaction at `log_pos` of the current file.
    fn commit(&mut self, log_pos: u64, chunk: &mut Chunk) {
        if let Some(g) = self.txn.gtid {
            self.gtid.advance(&g);
        }
        self.txn = Txn::default();
        if log_pos > 0 {
            let backfill = self.position.take().and_then(|p| p.backfill);
            self.position = Some(Position {
                file: self.file.clone(),
                pos: log_pos,
                skip: 0,
                snapshot: None,
                backfill,
                gtid: (!self.gtid.is_empty()).then(|| self.gtid.to_string()),
            });
            chunk.cursor = self.cursor_text(0);
        }
    }

    /// Adds one change of `table`, after its scope and its columns when
    /// the chunk has not said them yet; changes staged before a restart
    /// are skipped.
    fn push(&mut self, table: &TableName, shape: &Shape, item: Item, chunk: &mut Chunk) {
        self.txn.changes += 1;
        if self.txn.changes <= self.txn.skip {
            return;
        }
        if self.scope_in_chunk.as_ref() != Some(table) {
            chunk.items.push(Item::Table(TableRef::new(
                Some(&table.database),
                &table.name,
            )));
            self.scope_in_chunk = Some(table.clone());
        }
        if !self.declared_in_chunk.contains(table) {
            chunk.items.push(Item::Schema {
                columns: shape.declared.clone(),
            });
            self.declared_in_chunk.push(table.clone());
        }
        if let Item::Record(r) = &item {
            chunk.records += 1;
            chunk.bytes += serde_json::to_vec(&r.fields).map_or(0, |v| v.len() as u64);
        }
        chunk.items.push(item);
    }

    /// A statement outside a transaction: `TRUNCATE` of a captured table
    /// becomes a truncate instruction, `ALTER TABLE` one a schema
    /// instruction with the columns read again.
    async fn statement(
        &mut self,
        sql: &str,
        schema: &str,
        chunk: &mut Chunk,
    ) -> Result<(), SourceError> {
        let Some((verb, table)) = ddl_target(sql, schema) else {
            return Ok(());
        };
        if !self.captured.contains(&table) {
            return Ok(());
        }
        match verb {
            Ddl::Truncate => {
                let shape = self.shape(&table, 0).await?;
                self.push(&table, &shape, Item::Truncate, chunk);
            }
            Ddl::Alter => {
                self.shapes.remove(&table);
                self.declared_in_chunk.retain(|t| *t != table);
                let shape = self.shape(&table, 0).await?;
                tracing::info!(%table, columns = shape.columns.len(), "source table's columns changed");
                // the new columns are declared before the next change
                self.txn.changes += 1;
                if self.txn.changes > self.txn.skip {
                    if self.scope_in_chunk.as_ref() != Some(&table) {
                        chunk.items.push(Item::Table(TableRef::new(
                            Some(&table.database),
                            &table.name,
                        )));
                        self.scope_in_chunk = Some(table.clone());
                    }
                    chunk.items.push(Item::Schema {
                        columns: shape.declared.clone(),
                    });
                    self.declared_in_chunk.push(table.clone());
                }
            }
        }
        Ok(())
    }

    /// The table's columns, from the cache unless the binlog's column
    /// count says they changed.
    async fn shape(
        &mut self,
        table: &TableName,
        columns: usize,
    ) -> Result<Arc<Shape>, SourceError> {
        if let Some(s) = self.shapes.get(table) {
            if columns == 0 || s.columns.len() == columns {
                return Ok(s.clone());
            }
        }
        let conn = self.catalog().await?;
        let shape = catalog::shape(conn, table)
            .await
            .map_err(|e| fail_text("catalog", e))?
            .ok_or_else(|| fail_text("catalog", format!("table {table} does not exist")))?;
        let shape = Arc::new(shape);
        self.shapes.insert(table.clone(), shape.clone());
        Ok(shape)
    }

    pub fn server_id(&self) -> u32 {
        self.server_id
    }
}

fn fail_text(what: &str, e: impl std::fmt::Display) -> SourceError {
    SourceError::Database {
        at: "mysql".into(),
        message: format!("{what}: {e}"),
    }
}

/// What to say when the binlog the stream's cursor needs is gone.
fn purged(p: &Position) -> String {
    let at = match &p.gtid {
        Some(g) => format!(
            "GTID position {g} (binlog file {:?}, position {})",
            p.file, p.pos
        ),
        None => format!(
            "binlog file {:?} (the stream's cursor is at position {})",
            p.file, p.pos
        ),
    };
    format!(
        "{at} is no longer on the server (purged, e.g. by binlog_expire_logs_seconds or PURGE \
         BINARY LOGS), so changes after the cursor cannot be read; nothing was skipped silently. \
         Recovery: re-snapshot the tables into a new stream (a new name starts at the current \
         binlog)"
    )
}

/// MariaDB's answer to a GTID position its binlogs no longer hold
/// (ER_MASTER_FATAL_ERROR_READING_BINLOG with this text).
fn gtid_purged(e: &mysql_async::Error) -> bool {
    let text = e.to_string();
    text.contains("1236") && text.contains("GTID")
}

/// A row's fields by the catalog's column names; a delete keeps only the
/// key columns when the table has a key.
fn fields(shape: &Shape, row: &BinlogRow, delete: bool) -> Map<String, Value> {
    let has_key = shape.columns.iter().any(|c| c.key);
    let mut out = Map::with_capacity(shape.columns.len());
    for (i, col) in shape.columns.iter().enumerate() {
        if delete && has_key && !col.key {
            continue;
        }
        if let Some(v) = row.as_ref(i) {
            out.insert(col.name.clone(), values::to_json(col, v));
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ddl {
    Truncate,
    Alter,
}

/// Which captured-table DDL a statement is, and its table: `TRUNCATE
/// [TABLE] t` and `ALTER [ONLINE|IGNORE] TABLE t ...`; no parser beyond that.
fn ddl_target(sql: &str, schema: &str) -> Option<(Ddl, TableName)> {
    let mut words = sql.split_whitespace();
    let first = words.next()?.to_ascii_lowercase();
    let (verb, mut next) = match first.as_str() {
        "truncate" => (Ddl::Truncate, words.next()?),
        "alter" => (Ddl::Alter, words.next()?),
        _ => return None,
    };
    while matches!(
        next.to_ascii_lowercase().as_str(),
        "table" | "online" | "ignore"
    ) {
        next = words.next()?;
    }
    if verb == Ddl::Alter && sql.to_ascii_lowercase().split_whitespace().nth(1) == Some("database")
    {
        return None;
    }
    let name = next.trim_end_matches(';');
    let unquote = |s: &str| s.trim_matches('`').replace("``", "`");
    let (db, table) = match name.split_once("`.`").or_else(|| name.split_once('.')) {
        Some((db, t)) => (unquote(db), unquote(t)),
        None => (schema.to_string(), unquote(name)),
    };
    Some((
        verb,
        TableName {
            database: db,
            name: table,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_names_its_table() {
        let t = |db: &str, n: &str| TableName {
            database: db.into(),
            name: n.into(),
        };
        assert_eq!(
            ddl_target("TRUNCATE t", "test"),
            Some((Ddl::Truncate, t("test", "t")))
        );
        assert_eq!(
            ddl_target("truncate table `shop`.`orders`", "test"),
            Some((Ddl::Truncate, t("shop", "orders")))
        );
        assert_eq!(
            ddl_target("ALTER TABLE shop.orders ADD COLUMN x int", "test"),
            Some((Ddl::Alter, t("shop", "orders")))
        );
        assert_eq!(ddl_target("CREATE TABLE t (id int)", "test"), None);
        assert_eq!(
            ddl_target("ALTER DATABASE d CHARACTER SET utf8", "test"),
            None
        );
    }
}
