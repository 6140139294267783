//! `mode = "cdc"`: the row-based binlog read as a replica (mysql_async's
//! binlog stream), by the shared change reader (`crate::cdc`). The
//! stream's cursor is the binlog file and position just after the last
//! source transaction whose changes are all staged, plus how many changes
//! of the next one are staged when a transaction spans batches
//! (`{"file": "binlog.000003", "pos": 1808, "skip": 1000}`). A restart
//! asks the server for the binlog from there and skips exactly the
//! changes already staged. Column names and types come from the catalog
//! (the binlog has neither), read again when an `ALTER TABLE` of a
//! captured table goes by.
//!
//! - `mod.rs`: opening (the position, a consistent snapshot), `check`,
//!   status;
//! - `binlog.rs`: the binlog session, its events as steps;
//! - `backfill.rs`: pages placed at their own snapshot's position;
//! - `position.rs`: the cursor as stored, binlog order;
//! - `gtid.rs`: MariaDB GTID positions.

mod backfill;
mod backlog;
mod binlog;
mod compressed;
mod copy_out;
mod gtid;
mod names;
mod position;
mod renames;
mod xa;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn};
use serde_json::{Map, Value};

use super::catalog::{self, Shape};
use super::config::{MysqlSettings, TableName};
use super::snapshot;
use crate::cdc::deadline::{self, within};
use crate::cdc::{
    ChangeReader, CopyAt, CopyPage, Ctx, Cursor, Opening, Protocol, Step, Table, View,
};
use crate::chunk::{Chunk, Limits};
use crate::error::{Context as _, Failure, SourceError};
use crate::source::SourceSpec;
use binlog::Session;
use copy_out::{CopyOut, From};
use gtid::GtidPos;
pub use position::BinlogAt;

/// The `mysql` cdc source: the shared reader over the binlog.
pub type MysqlCdcSource = ChangeReader<MysqlCdc>;

/// A replica of the server: its settings, id and catalog connection.
pub struct MysqlCdc {
    settings: MysqlSettings,
    server_id: u32,
    /// The `tables` entries as configured (`db.*` among them).
    entries: Vec<TableName>,
    captured: HashSet<TableName>,
    /// Made when first needed, dropped after a failure.
    catalog: Option<Conn>,
    mariadb: Option<bool>,
    /// Each captured table's columns, as the binlog's rows have them now.
    shapes: HashMap<TableName, Shaped>,
}

/// A table's columns and the shape its changes are declared with.
#[derive(Clone)]
struct Shaped {
    shape: Arc<Shape>,
    table: Arc<Table>,
}

impl Shaped {
    fn of(name: &TableName, shape: Shape) -> Shaped {
        let table = Arc::new(Table {
            table: abrq_core::TableRef::new(Some(&name.database), &name.name),
            declared: shape.declared.clone(),
        });
        Shaped {
            shape: Arc::new(shape),
            table,
        }
    }
}

/// The copy while it runs: its connection, in the snapshot's transaction.
pub struct MyCopy {
    /// The snapshot's session, between tables.
    spare: Option<Conn>,
    /// The table being copied and its copy (which holds the session).
    reading: Option<(String, CopyOut)>,
}

impl MysqlCdcSource {
    /// The stream's replica of the server (its id derived from the
    /// stream's name unless set), from the stored cursor.
    pub fn open(settings: MysqlSettings, spec: &SourceSpec<'_>) -> Result<Self, SourceError> {
        let tx_metadata = settings.transaction_metadata;
        let tx_markers = settings.transaction_markers;
        let replica = MysqlCdc {
            server_id: settings.server_id_for(spec.stream),
            captured: settings.tables.iter().cloned().collect(),
            entries: settings.tables.clone(),
            catalog: None,
            mariadb: None,
            shapes: HashMap::new(),
            settings,
        };
        ChangeReader::new(replica, BinlogAt::default(), spec.cursor)
            .map(|r| r.with_tx_metadata(tx_metadata).with_tx_markers(tx_markers))
    }

    pub fn server_id(&self) -> u32 {
        self.protocol().server_id
    }
}

/// What to say when the binlog the stream's cursor needs is gone.
fn purged(at: &BinlogAt) -> String {
    let where_ = match &at.gtid {
        Some(g) => format!(
            "GTID position {g} (binlog file {:?}, position {})",
            at.file, at.pos
        ),
        None => format!(
            "binlog file {:?} (the stream's cursor is at position {})",
            at.file, at.pos
        ),
    };
    format!(
        "binlog position lost: {where_} is no longer on the server (purged, e.g. by \
         binlog_expire_logs_seconds or PURGE BINARY LOGS), so changes after the cursor cannot be \
         read; nothing was skipped silently. Recovery: re-snapshot the tables into a new stream \
         (a new name starts at the current binlog)"
    )
}

fn not_ready(missing: &[String]) -> SourceError {
    SourceError::new(
        Failure::NotConfigured,
        format!("not ready for binlog replication: {}", missing.join("; ")),
    )
}

impl MysqlCdc {
    async fn connect(&self) -> Result<Conn, SourceError> {
        let opts = self.settings.opts();
        within(deadline::CONNECT, "connecting", async {
            Conn::new(opts).await.context("cannot connect")
        })
        .await
    }

    async fn catalog(&mut self) -> Result<&mut Conn, SourceError> {
        let conn = match self.catalog.take() {
            Some(c) => c,
            None => self.connect().await?,
        };
        Ok(self.catalog.insert(conn))
    }

    /// The captured tables as the catalog has them now: a `db.*` entry
    /// becomes that database's base tables in name order (as `schema.*`
    /// does on PostgreSQL).
    async fn resolve_tables(&mut self) -> Result<(), SourceError> {
        let mut out: Vec<TableName> = Vec::new();
        for entry in self.entries.clone() {
            let found = match entry.name.as_str() {
                "*" => {
                    let conn = self.catalog().await?;
                    let names: Vec<String> = conn
                        .exec(
                            "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
                             WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' \
                             ORDER BY TABLE_NAME",
                            (entry.database.as_str(),),
                        )
                        .await
                        .map_err(|e| {
                            SourceError::from_client(
                                format!("cannot list the tables of database {}", entry.database),
                                e,
                            )
                        })?;
                    if names.is_empty() {
                        return Err(SourceError::new(
                            Failure::NotConfigured,
                            format!(
                                "database {db} has no tables (tables = [\"{db}.*\"])",
                                db = entry.database
                            ),
                        ));
                    }
                    names
                        .into_iter()
                        .map(|name| TableName {
                            database: entry.database.clone(),
                            name,
                        })
                        .collect()
                }
                _ => vec![entry],
            };
            for t in found {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        self.captured = out.iter().cloned().collect();
        self.settings.tables = out;
        Ok(())
    }

    fn table_names(&self) -> Vec<String> {
        self.settings
            .tables
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    async fn is_mariadb(&mut self) -> Result<bool, SourceError> {
        if let Some(m) = self.mariadb {
            return Ok(m);
        }
        let m = gtid::is_mariadb(self.catalog().await?)
            .await
            .context("setup")?;
        self.mariadb = Some(m);
        Ok(m)
    }

    /// MariaDB's GTID position at `file`:`pos`; none before any GTID.
    async fn gtid_at(&mut self, file: &str, pos: u64) -> Result<Option<String>, SourceError> {
        let conn = self.catalog().await?;
        let g = gtid::at(conn, file, pos).await.context("setup")?;
        Ok((!g.is_empty()).then(|| g.to_string()))
    }

    async fn binlog_exists(&mut self, file: &str) -> Result<bool, SourceError> {
        let conn = self.catalog().await?;
        let logs: Vec<mysql_async::Row> = conn
            .query("SHOW BINARY LOGS")
            .await
            .context("cannot list the binlog files")?;
        Ok(logs
            .iter()
            .any(|r| r.get::<String, _>(0).is_some_and(|f| f == file)))
    }

    /// Where a stored position is read from: by GTID on MariaDB when it
    /// has one (another server of the topology may serve it), else by file
    /// and offset, which must still be on the server.
    async fn resume(&mut self, mut at: BinlogAt) -> Result<(Session, BinlogAt), SourceError> {
        let mariadb = self.is_mariadb().await?;
        let by_gtid = mariadb && at.gtid.as_deref().is_some_and(|g| !g.is_empty());
        if !by_gtid {
            if !self.binlog_exists(&at.file).await? {
                return Err(SourceError::new(Failure::PositionLost, purged(&at)));
            }
            if mariadb {
                at.gtid = self.gtid_at(&at.file, at.pos).await?;
            }
        }
        let session = self.stream_from(&at, mariadb).await?;
        Ok((session, at))
    }

    /// A binlog session from `at`.
    async fn stream_from(&mut self, at: &BinlogAt, mariadb: bool) -> Result<Session, SourceError> {
        let mut conn = self.connect().await?;
        let from = match at.gtid.as_deref() {
            Some(g) => GtidPos::parse(g).map_err(|e| {
                SourceError::new(Failure::Invalid, format!("the stored cursor: {e}"))
            })?,
            None => GtidPos::default(),
        };
        if mariadb {
            let by_gtid = (!from.is_empty()).then_some(&from);
            gtid::prepare(&mut conn, by_gtid).await.context("setup")?;
        }
        // the server sends a heartbeat when the binlog is quiet, so a
        // silent session is a dead one
        let period = deadline::HEARTBEAT.as_nanos() as u64;
        conn.query_drop(format!("SET @master_heartbeat_period = {period}"))
            .await
            .context("cannot ask for heartbeats")?;
        let request = BinlogStreamRequest::new(self.server_id)
            .with_filename(at.file.as_bytes())
            .with_pos(at.pos);
        let stream = conn
            .get_binlog_stream(request)
            .await
            .context("cannot start reading the binlog")?;
        tracing::info!(file = %at.file, pos = at.pos, gtid = ?at.gtid, server_id = self.server_id, "binlog replication started");
        Ok(Session::new(stream, at, from))
    }

    /// The table's columns, from the cache unless the binlog's column
    /// count says they changed (`columns` 0: any count).
    async fn shape(&mut self, table: &TableName, columns: usize) -> Result<Shaped, SourceError> {
        if let Some(s) = self.shapes.get(table) {
            if columns == 0 || s.shape.columns.len() == columns {
                return Ok(s.clone());
            }
        }
        let conn = self.catalog().await?;
        let shape = catalog::shape(conn, table)
            .await
            .context("catalog")?
            .ok_or_else(|| {
                SourceError::new(
                    Failure::NotConfigured,
                    format!("catalog: table {table} does not exist"),
                )
            })?;
        let shaped = Shaped::of(table, shape);
        self.shapes.insert(table.clone(), shaped.clone());
        Ok(shaped)
    }
}

/// A page of `table`'s rows after its scope and columns.
fn rows_chunk(shaped: &Shaped, rows: Vec<Map<String, Value>>) -> Chunk {
    let mut out = crate::cdc::builder::Builder::default();
    for fields in rows {
        out.record(&shaped.table, abrq_core::Record::insert(fields));
    }
    out.chunk
}

impl Protocol for MysqlCdc {
    type At = BinlogAt;
    type Stored = position::Stored;
    type Session = Session;
    type Copy = MyCopy;

    async fn open(
        &mut self,
        cursor: Option<&Cursor<BinlogAt>>,
    ) -> Result<Opening<MysqlCdc>, SourceError> {
        let missing = catalog::missing(self.catalog().await?)
            .await
            .context("setup")?;
        if !missing.is_empty() {
            return Err(not_ready(&missing));
        }
        self.resolve_tables().await?;
        // each table's columns as it opens: a change read before a
        // rename or drop the catalog shows already is still decoded
        for t in self.settings.tables.clone() {
            self.shape(&t, 0).await?;
        }
        let mariadb = self.is_mariadb().await?;
        if let Some(c) = cursor {
            let captured = self.captured.clone();
            let conn = self.catalog().await?;
            if !catalog::row_metadata_full(conn).await.context("setup")? {
                backlog::check(conn, &captured, &c.at).await?;
            }
            let (session, at) = self.resume(c.at.clone()).await?;
            return Ok(Opening::Stream {
                session,
                at,
                tables: self.table_names(),
                announce: false,
                recopy: false,
                backfill: Vec::new(),
            });
        }
        if self.settings.snapshot {
            let mut conn = self.connect().await?;
            let (file, pos) = snapshot::open(&mut conn).await.context("snapshot")?;
            tracing::info!(%file, pos, "consistent snapshot opened; copying the tables");
            return Ok(Opening::Copy {
                copy: MyCopy {
                    spare: Some(conn),
                    reading: None,
                },
                at: BinlogAt {
                    file,
                    pos,
                    gtid: None,
                },
                tables: self.table_names(),
            });
        }
        let conn = self.catalog().await?;
        let row: Option<mysql_async::Row> = conn
            .query_first("SHOW MASTER STATUS")
            .await
            .context("cannot read the binlog position")?;
        let (Some(file), Some(pos)) = (
            row.as_ref().and_then(|r| r.get::<String, _>(0)),
            row.as_ref().and_then(|r| r.get::<u64, _>(1)),
        ) else {
            return Err(SourceError::new(
                Failure::NotConfigured,
                "setup: SHOW MASTER STATUS shows no binlog",
            ));
        };
        let gtid = match mariadb {
            true => self.gtid_at(&file, pos).await?,
            false => None,
        };
        let at = BinlogAt { file, pos, gtid };
        let session = self.stream_from(&at, mariadb).await?;
        Ok(Opening::Stream {
            session,
            at,
            tables: self.table_names(),
            announce: true,
            recopy: false,
            backfill: Vec::new(),
        })
    }

    async fn copy_page(
        &mut self,
        copy: &mut MyCopy,
        at: &mut CopyAt,
        limits: Limits,
    ) -> Result<CopyPage, SourceError> {
        let Some(table) = self
            .settings
            .tables
            .iter()
            .find(|t| t.to_string() == at.table)
            .cloned()
        else {
            return Err(SourceError::new(
                Failure::Invalid,
                format!("snapshot: {} is not a captured table", at.table),
            ));
        };
        let mut out = match copy.reading.take() {
            Some((name, out)) if name == at.table => out,
            other => {
                let conn = match other {
                    Some((_, done)) => Some(done.into_connection().await?),
                    None => copy.spare.take(),
                };
                // a copy that failed lost its snapshot with its session
                let conn = conn.ok_or_else(|| {
                    SourceError::new(
                        Failure::Server,
                        "snapshot: the copy's session was lost; the copy starts again",
                    )
                })?;
                let shaped = self.shape(&table, 0).await?;
                // a table without a key is read by row count: one snapshot
                // holds its rows and their order for the whole copy
                let from = match shaped.shape.columns.iter().any(|c| c.key) {
                    true => From::Key(match &at.after {
                        Some(Value::Array(key)) => Some(key.clone()),
                        _ => None,
                    }),
                    false => From::Count(
                        at.after
                            .as_ref()
                            .and_then(|a| a[0]["rows"].as_u64())
                            .unwrap_or(0),
                    ),
                };
                tracing::info!(%table, resume = at.after.is_some(), "snapshot copy starts");
                copy_out::start(conn, table, shaped, from, limits)
            }
        };
        let Some(page) = out.next().await? else {
            copy.spare = Some(out.into_connection().await?);
            return Ok(CopyPage {
                chunk: Chunk::default(),
                done: true,
            });
        };
        match page.last {
            true => copy.spare = Some(out.into_connection().await?),
            false => copy.reading = Some((at.table.clone(), out)),
        }
        if !page.after.is_null() {
            at.after = Some(page.after);
        }
        Ok(CopyPage {
            chunk: page.chunk,
            done: page.last,
        })
    }

    async fn stream_after_copy(
        &mut self,
        _copy: MyCopy,
        cursor: &Cursor<BinlogAt>,
    ) -> Result<(Session, BinlogAt), SourceError> {
        self.resume(cursor.at.clone()).await
    }

    async fn prepare(
        &mut self,
        session: &mut Session,
        mut ctx: Ctx<'_, BinlogAt>,
    ) -> Result<(), SourceError> {
        self.take_page(session, &mut ctx).await
    }

    async fn next(
        &mut self,
        session: &mut Session,
        mut ctx: Ctx<'_, BinlogAt>,
    ) -> Result<Option<Step<BinlogAt>>, SourceError> {
        if let Some(step) = session.pending() {
            return Ok(Some(step));
        }
        // between events: a backfill page the stream has reached joins here
        if !ctx.in_txn {
            if let Some(page) = self.place_page(session, &mut ctx) {
                return Ok(Some(Step::Page(page)));
            }
        }
        self.step(session, &ctx).await
    }

    /// The binlog needs no confirmation: the cursor alone says where to
    /// resume.
    fn confirm(&mut self, _session: &mut Session, _at: &BinlogAt) {}

    fn keepalive(&self) -> Option<std::time::Duration> {
        Some(deadline::HEARTBEAT)
    }

    /// Every missing prerequisite, or where it reads.
    async fn check(&mut self, cursor: Option<&Cursor<BinlogAt>>) -> Result<String, SourceError> {
        let mut missing = catalog::missing(self.catalog().await?)
            .await
            .context("check")?;
        match self.resolve_tables().await {
            Err(e) if e.failure() == Failure::NotConfigured => missing.push(e.to_string()),
            other => other?,
        }
        for t in self.settings.tables.clone() {
            let conn = self.catalog().await?;
            if catalog::shape(conn, &t).await.context("check")?.is_none() {
                missing.push(format!("table {t} does not exist"));
            }
        }
        if let Some(c) = cursor {
            // by GTID another server of the topology may serve it
            if c.at.gtid.is_none() && !self.binlog_exists(&c.at.file).await? {
                missing.push(purged(&c.at));
            }
        }
        if !missing.is_empty() {
            return Err(not_ready(&missing));
        }
        let conn = self.catalog().await?;
        let ddl = match catalog::row_metadata_full(conn).await.context("check")? {
            true => "changes carry their column names (binlog_row_metadata = FULL): a backlog across DDL decodes by name",
            false => "binlog_row_metadata is not FULL: a change read from a backlog whose columns no longer match the table is refused by name; set binlog_row_metadata = FULL to decode it by name",
        };
        let at = match cursor {
            None => format!(
                "binlog ready; reading starts at the current end of the binlog as replica {}",
                self.server_id
            ),
            Some(c) => match &c.at.gtid {
                Some(g) => format!(
                    "resumes at GTID position {g} ({}:{}) as replica {}",
                    c.at.file, c.at.pos, self.server_id
                ),
                None => format!(
                    "resumes at {}:{} as replica {}",
                    c.at.file, c.at.pos, self.server_id
                ),
            },
        };
        Ok(format!("{at}; {ddl}"))
    }

    fn position(&self, view: View<'_, BinlogAt>) -> Value {
        let at = &view.cursor.at;
        serde_json::json!({
            "binlog": view.started.then(|| serde_json::json!({"file": at.file, "pos": at.pos, "gtid": at.gtid})),
            "snapshot": view.snapshot,
            "backfill": view.backfill,
            "server_id": self.server_id,
            "tables": self.table_names(),
        })
    }

    fn lag_bytes(&self) -> Option<i64> {
        None
    }

    fn reset(&mut self) {
        self.catalog = None;
    }

    fn describe(&self) -> String {
        self.settings.describe()
    }
}
