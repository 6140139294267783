//! `mode = "cdc"`: logical decoding with pgoutput over the streaming
//! replication protocol (pgwire-replication for the connection and its
//! standby status, pg_walstream's parser for the messages).
//!
//! The stream's cursor is where the slot may be confirmed to: the end of
//! the last source transaction whose changes are all staged, plus how many
//! changes of the next one are staged already when a transaction spans
//! batches (`{"lsn": "0/16B3748", "skip": 1000}`). The slot is confirmed
//! only after the engine reports a cursor staged, so a crash between
//! reading and staging reads the same changes again, and a restart skips
//! exactly the changes already staged.

mod backfill;
mod lag;
pub mod setup;
mod tls;
pub mod values;

use std::collections::HashMap;
use std::time::Duration;

use abrq_core::{Item, Op, Record, TableRef};
use pg_walstream::{
    ColumnData, LogicalReplicationMessage as M, LogicalReplicationParser, TupleData,
};
use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::postgres::PgConnection;
use sqlx::Connection;

use super::catalog::{self, db_error};
use super::config::{derived_name, PostgresSettings, Snapshot, TableName};
use super::cursor::PgCursorSource;
use crate::chunk::{Chunk, Limits};
use crate::file::SourceError;
use crate::progress::Progress;

/// How long a read waits for the first change before it says "nothing
/// for now", and for the next one once a chunk has begun.
const FIRST_WAIT: Duration = Duration::from_millis(200);
const NEXT_WAIT: Duration = Duration::from_millis(5);
/// A read returns at most this long after its first change, so a busy
/// stream still reaches the pump, whose `max_wait` decides when to stage.
const READ_SLICE: Duration = Duration::from_millis(5);

/// The stream's cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    /// End of the last fully staged source transaction.
    #[serde(with = "lsn_text")]
    lsn: Lsn,
    /// Changes of the transaction after it already staged.
    #[serde(default)]
    skip: u64,
    /// While the snapshot copy runs: the copy's own cursor (its last
    /// staged row; empty before the first page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<String>,
    /// The table the copy is in (`schema.name`; absent: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    copying: Option<String>,
    /// A backfill under way: it goes on after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backfill: Option<backfill::Staged>,
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

/// A published table as the last Relation message described it.
#[derive(Debug, Clone)]
struct Relation {
    table: TableRef,
    columns: Vec<Column>,
    /// The schema instruction records of this shape follow.
    declared: Map<String, Value>,
}

#[derive(Debug, Clone)]
struct Column {
    name: String,
    oid: u32,
    key: bool,
}

/// Where the current source transaction stands.
#[derive(Debug, Default)]
struct Txn {
    open: bool,
    /// Changes of it seen so far, staged before or not.
    changes: u64,
    /// Changes at its start a restart already staged.
    skip: u64,
}

pub struct PgCdcSource {
    settings: PostgresSettings,
    slot: String,
    publication: String,
    /// Where the next batch starts (last staged, or read and not yet staged).
    position: Position,
    client: Option<ReplicationClient>,
    /// The session that made the slot, holding its exported snapshot
    /// until the copy is done; streaming starts on it.
    gated: Option<ReplicationClient>,
    /// The captured tables as the catalog names them (read at start).
    tables: Vec<TableName>,
    /// The snapshot copy of one table while it runs, and the tables it
    /// copies after that one.
    snapshot: Option<PgCursorSource>,
    copy_queue: Vec<TableName>,
    snapshot_rows: u64,
    catalog: Option<PgConnection>,
    parser: LogicalReplicationParser,
    relations: HashMap<u32, Relation>,
    txn: Txn,
    /// Relations declared in the chunk being built.
    declared_in_chunk: Vec<u32>,
    /// The relation the chunk's last table scope names.
    scope_in_chunk: Option<u32>,
    /// Backfills asked for and the one running.
    backfill_asked: Vec<Option<String>>,
    backfill: Option<backfill::Backfill>,
    backfill_error: Option<String>,
    /// Commit time (µs since 2000-01-01) of the last transaction read.
    last_commit_micros: Option<i64>,
    /// Nothing was waiting at the last read.
    caught_up: bool,
    /// The position the engine last reported staged.
    confirmed: Option<Lsn>,
    lag_bytes: Option<lag::LagBytes>,
    /// The TLS tunnel the replication session runs through (tls on).
    tunnel: Option<tls::Tunnel>,
    fresh: bool,
}

impl PgCdcSource {
    pub fn new(
        settings: PostgresSettings,
        stream: &str,
        cursor: Option<&str>,
    ) -> Result<Self, SourceError> {
        let at = settings.describe();
        let (position, fresh) = match cursor {
            None => (
                Position {
                    lsn: Lsn::from_u64(0),
                    skip: 0,
                    snapshot: None,
                    copying: None,
                    backfill: None,
                },
                true,
            ),
            Some(c) => (
                serde_json::from_str(c).map_err(|e| SourceError::Database {
                    at: at.clone(),
                    message: format!("the stored cursor {c:?} is not this source's: {e}"),
                })?,
                false,
            ),
        };
        Ok(PgCdcSource {
            slot: settings
                .slot
                .clone()
                .unwrap_or_else(|| derived_name(stream)),
            publication: settings
                .publication
                .clone()
                .unwrap_or_else(|| derived_name(stream)),
            settings,
            txn: Txn {
                skip: position.skip,
                ..Txn::default()
            },
            position,
            client: None,
            gated: None,
            tables: Vec::new(),
            snapshot: None,
            copy_queue: Vec::new(),
            snapshot_rows: 0,
            catalog: None,
            parser: LogicalReplicationParser::with_protocol_version(1),
            relations: HashMap::new(),
            declared_in_chunk: Vec::new(),
            scope_in_chunk: None,
            backfill_asked: Vec::new(),
            backfill: None,
            backfill_error: None,
            last_commit_micros: None,
            caught_up: false,
            confirmed: None,
            lag_bytes: None,
            tunnel: None,
            fresh,
        })
    }

    fn fail(&self, what: &str, e: impl std::fmt::Display) -> SourceError {
        db_error(&self.settings.describe(), what, e)
    }

    pub fn slot_name(&self) -> &str {
        &self.slot
    }

    /// Where the source stands and how far behind the server it is.
    pub fn progress(&self) -> Progress {
        // µs between the Unix epoch and PostgreSQL's (2000-01-01)
        const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
        let lag_seconds = match (self.caught_up, self.last_commit_micros) {
            (true, _) => Some(0.0),
            (false, Some(at)) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as i64);
                Some(((now - PG_EPOCH_MICROS - at).max(0)) as f64 / 1e6)
            }
            (false, None) => None,
        };
        Progress {
            position: serde_json::json!({
                "slot": self.slot,
                "publication": self.publication,
                "tables": self.settings.tables.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "read_lsn": self.position.lsn.to_pg_string(),
                "snapshot": match &self.position.snapshot {
                    Some(_) => serde_json::json!({
                        "state": "copying",
                        "rows": self.snapshot_rows,
                        "table": self.position.copying,
                        "tables_left": self.copy_queue.len(),
                    }),
                    None => serde_json::json!({"state": "done", "rows": self.snapshot_rows}),
                },
                "confirmed_lsn": self.confirmed.map(|l| l.to_pg_string()),
                "backfill": self.backfill_progress(),
            }),
            lag_seconds,
            lag_bytes: self.lag_bytes.as_ref().and_then(lag::LagBytes::get),
        }
    }

    async fn catalog(&mut self) -> Result<&mut PgConnection, SourceError> {
        if self.catalog.is_none() {
            let conn = PgConnection::connect_with(&self.settings.connect_options())
                .await
                .map_err(|e| self.fail("cannot connect", e))?;
            self.catalog = Some(conn);
        }
        Ok(self.catalog.as_mut().expect("connected above"))
    }

    /// For `abrq check`: every missing prerequisite, or how it will read.
    pub async fn check(&mut self) -> Result<String, SourceError> {
        let tables = self.settings.tables.clone();
        let conn = self.catalog().await?;
        let missing = setup::missing(conn, &tables)
            .await
            .map_err(|e| self.fail("check", e))?;
        if !missing.is_empty() {
            return Err(self.fail("not ready for logical decoding", missing.join("; ")));
        }
        let slot = self.slot.clone();
        let conn = self.catalog().await?;
        let state = setup::slot(conn, &slot)
            .await
            .map_err(|e| self.fail("check", e))?;
        Ok(match state {
            setup::Slot::Missing => format!(
                "logical decoding ready; slot {slot:?} and publication {:?} are created at the first run",
                self.publication
            ),
            setup::Slot::Lost => {
                return Err(self.fail("check", lost_slot(&slot)));
            }
            setup::Slot::Ready { confirmed } => format!(
                "slot {slot:?} confirmed to {}; publication {:?}",
                confirmed.unwrap_or_else(|| "-".into()),
                self.publication
            ),
        })
    }

    /// Makes the publication and slot (on the first run), then either
    /// copies the table's rows (the snapshot) or starts streaming after the
    /// staged position.
    async fn start(&mut self) -> Result<(), SourceError> {
        let settings = self.settings.clone();
        let (slot, publication) = (self.slot.clone(), self.publication.clone());
        let at = settings.describe();
        let fail = |e: String| db_error(&at, "setup", e);
        let fresh = self.fresh;
        let conn = self.catalog().await?;
        let missing = setup::missing(conn, &settings.tables).await.map_err(fail)?;
        if !missing.is_empty() {
            return Err(db_error(
                &at,
                "not ready for logical decoding",
                missing.join("; "),
            ));
        }
        let tables = setup::resolve_all(conn, &settings.tables)
            .await
            .map_err(fail)?;
        setup::ensure_publication(conn, &publication, &tables)
            .await
            .map_err(fail)?;
        self.tables = tables.clone();
        if self.lag_bytes.is_none() {
            self.lag_bytes = Some(lag::LagBytes::start(
                settings.connect_options(),
                slot.clone(),
            ));
        }
        let conn = self.catalog().await?;
        let copy = settings.snapshot == Snapshot::Initial;
        match setup::slot(conn, &slot).await.map_err(fail)? {
            setup::Slot::Missing if fresh && copy => {
                // the slot and a snapshot of the table at its start, made
                // in one command: the copy and the stream meet exactly
                let config = self.replication_config().await?;
                let mut gated = ReplicationClient::connect_gated(config)
                    .await
                    .map_err(|e| self.fail("cannot open a replication session", e))?;
                let rows = gated
                    .simple_query(&format!(
                        "CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput (SNAPSHOT 'export')"
                    ))
                    .await
                    .map_err(|e| self.fail("cannot create the replication slot", e))?;
                let field = |i: usize| {
                    rows.first()
                        .and_then(|r| r.get(i).cloned().flatten())
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                };
                let (Some(point), Some(snapshot)) = (field(1), field(2)) else {
                    return Err(self.fail("cannot create the replication slot", "no snapshot"));
                };
                let lsn = Lsn::parse(&point).map_err(|e| self.fail("slot", e))?;
                tracing::info!(%slot, %point, %snapshot, "replication slot created with a snapshot");
                let mut conn = PgConnection::connect_with(&settings.connect_options())
                    .await
                    .map_err(|e| self.fail("cannot connect", e))?;
                // the copy's transaction reads what the slot's start saw
                let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_string();
                let set = format!("SET TRANSACTION SNAPSHOT '{snapshot}'");
                for sql in [begin, set] {
                    let done = sqlx::query(&sql).execute(&mut conn).await;
                    done.map_err(|e| self.fail("cannot open the snapshot", e))?;
                }
                self.position = Position {
                    lsn,
                    skip: 0,
                    snapshot: None,
                    copying: None,
                    backfill: None,
                };
                self.gated = Some(gated);
                self.copy_from(0, None, Some(conn)).await?;
                return Ok(());
            }
            setup::Slot::Missing if fresh => {
                setup::create_slot(conn, &slot).await.map_err(fail)?;
            }
            setup::Slot::Missing | setup::Slot::Lost => {
                return Err(db_error(&at, "replication slot lost", lost_slot(&slot)));
            }
            setup::Slot::Ready { .. } => {
                // a copy that stopped (or never staged its first page) goes
                // on after its last staged row as a backfill: watermark
                // windows merged with the stream, which starts now at the
                // slot's start (its snapshot is gone with the session)
                let resume = match (&self.position.snapshot, fresh && copy) {
                    (Some(c), _) => Some(Some(c.clone()).filter(|c| !c.is_empty())),
                    (None, true) => Some(None),
                    (None, false) => None,
                };
                if let Some(after) = resume {
                    // the table the copy was in; gone or renamed: the first
                    let at = match &self.position.copying {
                        None => 0,
                        Some(name) => tables
                            .iter()
                            .position(|t| t.to_string() == *name)
                            .unwrap_or(0),
                    };
                    tracing::info!(table = ?self.position.copying, "snapshot copy cut short: the rest is read as a backfill");
                    self.position.backfill = backfill::Staged::resume(&tables[at..], after);
                    self.position.snapshot = None;
                    self.position.copying = None;
                }
            }
        }
        self.stream().await
    }

    /// Starts the copy at `self.tables[at]` (after its row `after`), with
    /// the tables after it queued.
    async fn copy_from(
        &mut self,
        at: usize,
        after: Option<&str>,
        conn: Option<PgConnection>,
    ) -> Result<(), SourceError> {
        let mut queue = self.tables.clone();
        let rest = queue.split_off(at.min(queue.len()));
        let mut rest = rest.into_iter();
        let Some(first) = rest.next() else {
            return self.stream().await;
        };
        self.copy_queue = rest.collect();
        self.position.snapshot = Some(after.unwrap_or_default().to_string());
        self.position.copying = Some(first.to_string());
        self.snapshot = Some(self.copier(&first, after, conn).await?);
        Ok(())
    }

    /// The reader of a table's rows for the snapshot: keyset pages by the
    /// primary key, on `conn` when the copy reads an exported snapshot.
    async fn copier(
        &mut self,
        table: &TableName,
        after: Option<&str>,
        conn: Option<PgConnection>,
    ) -> Result<PgCursorSource, SourceError> {
        let catalog = self.catalog().await?;
        let key = catalog::primary_key(catalog, table)
            .await
            .map_err(|e| self.fail("snapshot", e))?;
        let Some(first) = key.first() else {
            return Err(self.fail(
                "snapshot",
                format!("{table} has no primary key to copy it by; set snapshot = \"never\""),
            ));
        };
        let mut settings = self.settings.clone();
        settings.mode = super::config::Mode::Cursor;
        settings.table = table.clone();
        settings.tables = vec![table.clone()];
        settings.cursor = first.clone();
        settings.primary_key = key.clone();
        tracing::info!(%table, key = ?key, resume = after.is_some(), "snapshot copy starts");
        match conn {
            Some(conn) => PgCursorSource::with_connection(settings, after, conn),
            None => PgCursorSource::new(settings, after),
        }
    }

    /// How the replication client connects: to the server, or with TLS
    /// on, to the loopback end of a new TLS tunnel to it.
    async fn replication_config(&mut self) -> Result<ReplicationConfig, SourceError> {
        let s = &self.settings;
        let (host, port) = match s.tls || s.tls_ca_file.is_some() {
            false => (s.host.clone(), s.port),
            true => {
                let config = tls::client_config(s.tls_ca_file.as_deref())
                    .map_err(|e| self.fail("TLS", e))?;
                let tunnel = tls::open(&s.host, s.port, config)
                    .await
                    .map_err(|e| self.fail("TLS", e))?;
                let local = tunnel.local;
                self.tunnel = Some(tunnel);
                (local.ip().to_string(), local.port())
            }
        };
        let s = &self.settings;
        Ok(ReplicationConfig::new(
            host,
            s.username.clone().unwrap_or_else(|| "postgres".into()),
            s.password
                .as_ref()
                .map(|p| p.expose().to_string())
                .unwrap_or_default(),
            s.database.clone().unwrap_or_else(|| "postgres".into()),
            self.slot.clone(),
            self.publication.clone(),
        )
        .with_port(port)
        .with_application_name(format!("abrq {}", self.slot))
        .with_start_lsn(self.position.lsn)
        .with_ack_lsn(self.position.lsn)
        // confirmations reach the server within this, so the slot
        // releases WAL soon after a batch is staged
        .with_status_interval(Duration::from_millis(500)))
    }

    /// Starts streaming after the staged position: on the session that
    /// made the slot when there is one (it held the snapshot until now).
    async fn stream(&mut self) -> Result<(), SourceError> {
        let mut client = match self.gated.take() {
            Some(mut gated) => {
                gated
                    .start()
                    .await
                    .map_err(|e| self.fail("cannot start replication", e))?;
                gated
            }
            None => {
                let config = self.replication_config().await?;
                ReplicationClient::connect(config)
                    .await
                    .map_err(|e| self.fail("cannot start replication", e))?
            }
        };
        client
            .wait_started()
            .await
            .map_err(|e| self.fail("cannot start replication", e))?;
        tracing::info!(slot = %self.slot, lsn = %self.position.lsn, skip = self.position.skip, "replication started");
        // a new session describes every relation again
        self.parser = LogicalReplicationParser::with_protocol_version(1);
        self.relations.clear();
        self.txn = Txn {
            skip: self.position.skip,
            ..Txn::default()
        };
        self.client = Some(client);
        Ok(())
    }

    /// One page of the snapshot copy; after a table's last page the next
    /// table (on the same snapshot), after the last table the stream.
    async fn read_snapshot(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let copier = self.snapshot.as_mut().expect("copying");
        let mut chunk = copier.read_chunk(limits).await?;
        self.snapshot_rows += chunk.records;
        if let Some(c) = chunk.cursor.take() {
            self.position.snapshot = Some(c);
        }
        if chunk.at_end {
            let done = self.snapshot.take().expect("copying");
            tracing::info!(table = ?self.position.copying, rows = self.snapshot_rows, "snapshot copy of a table done");
            chunk.at_end = false;
            if self.copy_queue.is_empty() {
                self.position.snapshot = None;
                self.position.copying = None;
                chunk.cursor = Some(self.cursor_text());
                self.stream().await?;
            } else {
                let next = self.copy_queue.remove(0);
                self.position.snapshot = Some(String::new());
                self.position.copying = Some(next.to_string());
                chunk.cursor = Some(self.cursor_text());
                let conn = done.into_connection();
                self.snapshot = Some(self.copier(&next, None, conn).await?);
            }
        } else {
            chunk.cursor = Some(self.cursor_text());
        }
        self.caught_up = false;
        Ok(chunk)
    }

    /// A keepalive says the server has decoded and sent everything up to
    /// `wal_end`. When everything read so far is staged, nothing this
    /// stream captures lies before it: the slot may be confirmed there, so
    /// a publication whose tables are quiet holds no WAL while the rest of
    /// the server writes. A transaction still open at `wal_end` commits
    /// after it and is sent again after a restart.
    fn idle_confirm(&mut self, wal_end: Lsn, chunk: &Chunk) {
        let all_staged = !self.txn.open
            && chunk.is_empty()
            && self.position.skip == 0
            && self.position.snapshot.is_none()
            && self.confirmed == Some(self.position.lsn);
        if !all_staged || wal_end <= self.position.lsn {
            return;
        }
        if let Some(client) = &self.client {
            client.update_applied_lsn(wal_end);
            self.confirmed = Some(wal_end);
            self.position.lsn = wal_end;
        }
    }

    /// The engine staged everything up to `cursor`: the slot may be
    /// confirmed to its transaction boundary.
    pub fn staged(&mut self, cursor: &str) {
        if let (Some(client), Ok(p)) = (&self.client, serde_json::from_str::<Position>(cursor)) {
            client.update_applied_lsn(p.lsn);
            self.confirmed = Some(p.lsn);
        }
    }

    /// Reads the changes that arrive until `limits` is reached or the
    /// stream is quiet.
    pub async fn read_chunk(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        if self.client.is_none() && self.snapshot.is_none() {
            self.start().await?;
        }
        let result = match self.snapshot.is_some() {
            true => self.read_snapshot(limits).await,
            false => self.read(limits).await,
        };
        if result.is_err() {
            // the session is made again from the staged position
            if let Some(mut c) = self.client.take() {
                c.abort();
            }
            if let Some(mut g) = self.gated.take() {
                g.abort();
            }
            // a copy goes on at the current state from its last row
            self.snapshot = None;
            self.copy_queue.clear();
            self.catalog = None;
        }
        result
    }

    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let mut chunk = Chunk::default();
        self.declared_in_chunk.clear();
        self.scope_in_chunk = None;
        let mut wait = FIRST_WAIT;
        let mut first: Option<std::time::Instant> = None;
        self.start_backfill().await;
        loop {
            if first.is_some_and(|t| t.elapsed() >= READ_SLICE) {
                break;
            }
            if !self.txn.open {
                self.open_window().await?;
            }
            let client = self.client.as_mut().expect("started above");
            let event = match tokio::time::timeout(wait, client.recv()).await {
                Err(_) => {
                    chunk.at_end = true;
                    break;
                }
                Ok(Ok(Some(e))) => e,
                Ok(Ok(None)) => return Err(self.fail("replication", "the server ended the stream")),
                Ok(Err(e)) => return Err(self.fail("replication", e)),
            };
            wait = NEXT_WAIT;
            first.get_or_insert_with(std::time::Instant::now);
            match event {
                ReplicationEvent::Begin { .. } => {
                    self.txn.open = true;
                    self.txn.changes = 0;
                }
                ReplicationEvent::Commit {
                    end_lsn,
                    commit_time_micros,
                    ..
                } => {
                    self.txn = Txn::default();
                    self.position = Position {
                        lsn: end_lsn,
                        skip: 0,
                        snapshot: None,
                        copying: None,
                        backfill: self.position.backfill.take(),
                    };
                    self.last_commit_micros = Some(commit_time_micros);
                    chunk.cursor = Some(self.cursor_text());
                    if chunk.is_full(limits) {
                        break;
                    }
                }
                ReplicationEvent::XLogData { data, .. } => {
                    let message = self
                        .parser
                        .parse_wal_message_bytes(data)
                        .map_err(|e| self.fail("cannot decode a change", e))?
                        .message;
                    self.apply(message, &mut chunk).await?;
                    if chunk.is_full(limits) && self.txn.open {
                        // a transaction spanning batches: the slot stays at
                        // its start, the cursor counts what is staged
                        let mid = Position {
                            skip: self.txn.changes,
                            ..self.position.clone()
                        };
                        chunk.cursor = Some(serde_json::to_string(&mid).expect("serializes"));
                        break;
                    }
                }
                ReplicationEvent::Message {
                    prefix, content, ..
                } if prefix == backfill::PREFIX => {
                    self.watermark(&content, &mut chunk).await?;
                }
                ReplicationEvent::KeepAlive { wal_end, .. } => {
                    self.idle_confirm(wal_end, &chunk);
                }
                ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => {}
            }
        }
        self.caught_up = chunk.at_end && chunk.is_empty() && !self.txn.open;
        if self.txn.open && self.txn.changes > 0 && !chunk.is_empty() {
            let mid = Position {
                skip: self.txn.changes,
                ..self.position.clone()
            };
            chunk.cursor = Some(serde_json::to_string(&mid).expect("serializes"));
        }
        Ok(chunk)
    }

    fn cursor_text(&self) -> String {
        serde_json::to_string(&self.position).expect("a position serializes")
    }

    /// Adds what one decoded message means to the chunk.
    async fn apply(&mut self, message: M, chunk: &mut Chunk) -> Result<(), SourceError> {
        let items: Vec<(u32, Item)> = match message {
            M::Relation {
                relation_id,
                namespace,
                relation_name,
                replica_identity,
                columns,
            } => {
                let table = TableName {
                    schema: Some(namespace.to_string()),
                    name: relation_name.to_string(),
                };
                let oids: Vec<i64> = columns.iter().map(|c| i64::from(c.type_id)).collect();
                let mods: Vec<i32> = columns.iter().map(|c| c.type_modifier).collect();
                let types = self.type_names(&oids, &mods).await?;
                // REPLICA IDENTITY FULL flags every column: the key is the
                // table's primary key then
                let key: Vec<String> = match replica_identity {
                    b'f' => self.primary_key(&table).await?,
                    _ => columns
                        .iter()
                        .filter(|c| c.is_key())
                        .map(|c| c.name.to_string())
                        .collect(),
                };
                let columns: Vec<Column> = columns
                    .iter()
                    .map(|c| Column {
                        name: c.name.to_string(),
                        oid: c.type_id,
                        key: key.iter().any(|k| **k == *c.name),
                    })
                    .collect();
                let declared = columns
                    .iter()
                    .zip(types)
                    .map(|(c, ty)| {
                        let ty = match c.key {
                            true => serde_json::json!({ "type": ty, "primary_key": true }),
                            false => Value::String(ty),
                        };
                        (c.name.clone(), ty)
                    })
                    .collect();
                let table = TableRef::new(table.schema.as_deref(), &table.name);
                self.relations.insert(
                    relation_id,
                    Relation {
                        table,
                        columns,
                        declared,
                    },
                );
                // a changed shape is declared again before its next change
                self.declared_in_chunk.retain(|r| *r != relation_id);
                return Ok(());
            }
            M::Insert { relation_id, tuple } => {
                let rel = self.relation(relation_id)?;
                let fields = row(rel, &tuple, None);
                vec![(
                    relation_id,
                    Item::Record(Record {
                        op: Op::Insert,
                        fields,
                    }),
                )]
            }
            M::Update {
                relation_id,
                old_tuple,
                new_tuple,
                ..
            } => {
                let rel = self.relation(relation_id)?;
                let fields = row(rel, &new_tuple, old_tuple.as_ref());
                vec![(
                    relation_id,
                    Item::Record(Record {
                        op: Op::Update,
                        fields,
                    }),
                )]
            }
            M::Delete {
                relation_id,
                old_tuple,
                ..
            } => {
                let rel = self.relation(relation_id)?;
                let fields = key_row(rel, &old_tuple);
                vec![(
                    relation_id,
                    Item::Record(Record {
                        op: Op::Delete,
                        fields,
                    }),
                )]
            }
            // one TRUNCATE of several tables: one instruction for each
            M::Truncate { relation_ids, .. } => relation_ids
                .iter()
                .map(|id| (*id, Item::Truncate))
                .collect(),
            _ => return Ok(()),
        };
        self.txn.changes += 1;
        if self.txn.changes <= self.txn.skip {
            return Ok(()); // staged before the restart
        }
        for (relation_id, item) in items {
            if let (Some(rel), Some(b)) = (self.relations.get(&relation_id), self.backfill.as_mut())
            {
                match &item {
                    Item::Record(r) => b.touched(&rel.table, &r.fields),
                    Item::Truncate => b.truncated(&rel.table),
                    Item::Table(_) | Item::Schema { .. } => {}
                }
            }
            if self.scope_in_chunk != Some(relation_id) {
                if let Some(rel) = self.relations.get(&relation_id) {
                    chunk.items.push(Item::Table(rel.table.clone()));
                    self.scope_in_chunk = Some(relation_id);
                }
            }
            if !self.declared_in_chunk.contains(&relation_id) {
                if let Some(rel) = self.relations.get(&relation_id) {
                    chunk.items.push(Item::Schema {
                        columns: rel.declared.clone(),
                    });
                    self.declared_in_chunk.push(relation_id);
                }
            }
            if let Item::Record(r) = &item {
                chunk.records += 1;
                chunk.bytes += approx_size(&r.fields);
            }
            chunk.items.push(item);
        }
        Ok(())
    }

    /// `format_type` of each (type oid, typmod): the names a destination
    /// creates columns with.
    async fn type_names(&mut self, oids: &[i64], mods: &[i32]) -> Result<Vec<String>, SourceError> {
        let conn = self.catalog().await?;
        let names: Result<Vec<String>, _> = sqlx::query_scalar(
            "SELECT format_type(u.t::oid, u.m) FROM unnest($1::int8[], $2::int4[]) \
             WITH ORDINALITY AS u(t, m, o) ORDER BY u.o",
        )
        .bind(oids)
        .bind(mods)
        .fetch_all(&mut *conn)
        .await;
        names.map_err(|e| self.fail("cannot name the column types", e))
    }

    async fn primary_key(&mut self, table: &TableName) -> Result<Vec<String>, SourceError> {
        let conn = self.catalog().await?;
        let key = catalog::primary_key(conn, table).await;
        key.map_err(|e| self.fail("relation", e))
    }

    fn relation(&self, id: u32) -> Result<&Relation, SourceError> {
        self.relations.get(&id).ok_or_else(|| {
            self.fail(
                "cannot decode a change",
                format!("relation {id} was not described in this session"),
            )
        })
    }
}

/// What to say when the slot is gone.
fn lost_slot(slot: &str) -> String {
    format!(
        "replication slot {slot:?} no longer exists or was invalidated (max_slot_wal_keep_size), \
         so changes after the stream's cursor cannot be read; nothing was skipped silently. \
         Recovery: re-snapshot the table into a new stream (a new name starts with a new slot)"
    )
}

/// A record's fields from a tuple; an unchanged TOAST value comes from
/// the old tuple when the table sends one (REPLICA IDENTITY FULL), and is
/// left out otherwise, never written as null.
fn row(rel: &Relation, tuple: &TupleData, old: Option<&TupleData>) -> Map<String, Value> {
    let mut out = Map::with_capacity(rel.columns.len());
    for (i, col) in rel.columns.iter().enumerate() {
        let Some(cell) = tuple.columns.get(i) else {
            continue;
        };
        let cell = match (cell.is_unchanged(), old.and_then(|o| o.columns.get(i))) {
            (true, Some(o)) if !o.is_unchanged() => o,
            (true, _) => continue,
            (false, _) => cell,
        };
        out.insert(col.name.clone(), value(col, cell));
    }
    out
}

/// A delete's fields: the key columns of the old tuple (all of them with
/// REPLICA IDENTITY FULL).
fn key_row(rel: &Relation, tuple: &TupleData) -> Map<String, Value> {
    let mut out = Map::new();
    for (i, col) in rel.columns.iter().enumerate() {
        if let Some(cell) = tuple.columns.get(i) {
            if (col.key || !cell.is_null()) && !cell.is_unchanged() {
                out.insert(col.name.clone(), value(col, cell));
            }
        }
    }
    out
}

fn value(col: &Column, cell: &ColumnData) -> Value {
    match cell.as_str() {
        Some(text) if !cell.is_null() => values::to_json(col.oid, &text),
        _ => Value::Null,
    }
}

fn approx_size(fields: &Map<String, Value>) -> u64 {
    fields
        .iter()
        .map(|(k, v)| {
            k.len() as u64
                + 4
                + match v {
                    Value::String(s) => s.len() as u64 + 2,
                    other => other.to_string().len() as u64,
                }
        })
        .sum::<u64>()
        + 2
}
