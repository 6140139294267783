//! The replication session: pgoutput's messages as the shared reader's
//! steps. A Relation message describes a table (its columns' types are
//! named by the catalog, its key by the replica identity or, with
//! `REPLICA IDENTITY FULL`, the primary key); rows become records by it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use abrq_core::{Op, Record, TableRef};
use pg_walstream::{
    ColumnData, LogicalReplicationMessage as M, LogicalReplicationParser, TupleData,
};
use pgwire_replication::{Lsn, ReplicationEvent};
use serde_json::{Map, Value};

use super::super::catalog;
use super::super::config::TableName;
use super::backfill::{self, Backfill};
use super::{values, PgCdc, Replication};
use crate::cdc::deadline::{self, within};
use crate::cdc::{Ctx, Step, Table, TxInfo};
use crate::error::{Context as _, Failure, SourceError};

/// The prefix of the heartbeat messages (`heartbeat_interval`).
pub const HEARTBEAT_PREFIX: &str = "abrq.heartbeat";

/// A streaming replication session and what it has learned.
pub struct Session {
    repl: Replication,
    parser: LogicalReplicationParser,
    relations: HashMap<u32, Relation>,
    /// The backfill reading now, with its window.
    pub(super) backfill: Option<Backfill>,
    /// The second change of an update that moved its row to a new key
    /// (the first is the old key's delete), given at the next step.
    pending: Option<(Arc<Table>, Record)>,
}

/// A published table as the last Relation message described it.
struct Relation {
    table: Arc<Table>,
    columns: Vec<Column>,
}

struct Column {
    name: String,
    oid: u32,
    /// An array's element type (0: not an array).
    elem: u32,
    key: bool,
}

impl Session {
    /// Waits for the server to start streaming; a new session describes
    /// every relation again.
    pub(super) async fn start(mut repl: Replication) -> Result<Session, SourceError> {
        repl.client
            .wait_started()
            .await
            .context("cannot start replication")?;
        tracing::info!("replication started");
        Ok(Session {
            repl,
            parser: LogicalReplicationParser::with_protocol_version(1),
            relations: HashMap::new(),
            backfill: None,
            pending: None,
        })
    }

    /// The slot may be confirmed to `at`.
    pub(super) fn confirm(&self, at: Lsn) {
        self.repl.client.update_applied_lsn(at);
    }
}

/// A commit time in µs since PostgreSQL's epoch (2000-01-01).
fn commit_time(pg_micros: i64) -> SystemTime {
    const PG_EPOCH_SECS: u64 = 946_684_800;
    let since_unix =
        Duration::from_secs(PG_EPOCH_SECS) + Duration::from_micros(pg_micros.max(0) as u64);
    UNIX_EPOCH + since_unix
}

impl PgCdc {
    /// The next message of the session as a step; None when none came
    /// within `wait`.
    pub(super) async fn step(
        &mut self,
        session: &mut Session,
        ctx: &mut Ctx<'_, Lsn>,
    ) -> Result<Option<Step<Lsn>>, SourceError> {
        if let Some((table, record)) = session.pending.take() {
            return Ok(Some(Step::Change(table, record)));
        }
        self.heartbeat().await?;
        let event = match tokio::time::timeout(ctx.wait, session.repl.client.recv()).await {
            Err(_) => return Ok(None),
            Ok(Ok(Some(e))) => e,
            Ok(Ok(None)) => {
                return Err(SourceError::new(
                    Failure::Network,
                    "replication: the server ended the stream",
                ))
            }
            Ok(Err(e)) => return Err(SourceError::from_client("replication", e)),
        };
        Ok(Some(match event {
            ReplicationEvent::Begin {
                final_lsn,
                xid,
                commit_time_micros,
            } => Step::Begin(TxInfo {
                id: xid.to_string(),
                position: final_lsn.to_string(),
                time: Some(commit_time(commit_time_micros)),
            }),
            ReplicationEvent::Commit {
                end_lsn,
                commit_time_micros,
                ..
            } => Step::Commit {
                at: Some(end_lsn),
                time: Some(commit_time(commit_time_micros)),
            },
            ReplicationEvent::XLogData { data, .. } => {
                let message = session
                    .parser
                    .parse_wal_message_bytes(data)
                    .map_err(|e| SourceError::caused(Failure::Decode, "cannot decode a change", e))?
                    .message;
                self.apply(session, message).await?
            }
            ReplicationEvent::Message {
                prefix, content, ..
            } if prefix == backfill::PREFIX => {
                match self.watermark(session, &content, ctx).await? {
                    Some(page) => Step::Page(page),
                    None => Step::Nothing,
                }
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => Step::Idle(wal_end),
            // a heartbeat (ours or another reader's), or another
            // application's message: nothing to stage
            ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => Step::Nothing,
        }))
    }

    /// Writes a heartbeat into the source database when one is due: a
    /// non-transactional logical message, WAL in the captured database
    /// that the server streams to the slot, so there is a position to
    /// confirm however long the captured tables stay idle.
    async fn heartbeat(&mut self) -> Result<(), SourceError> {
        let Some(every) = self.settings.heartbeat_interval else {
            return Ok(());
        };
        if self.heartbeat_at.is_some_and(|at| at.elapsed() < every) {
            return Ok(());
        }
        self.heartbeat_at = Some(std::time::Instant::now());
        let conn = self.catalog().await?;
        let sent = within(deadline::PROBE, "writing the heartbeat", async {
            sqlx::query("SELECT pg_logical_emit_message(false, $1, '')")
                .bind(HEARTBEAT_PREFIX)
                .execute(&mut *conn)
                .await
                .context("cannot write the heartbeat (pg_logical_emit_message)")
        })
        .await;
        if sent.is_err() {
            self.catalog = None;
        }
        sent.map(drop)
    }

    /// Each column's `attnum`, when the catalog still has the columns the
    /// Relation message names, in its order: a message read from a
    /// backlog that DDL has since changed gets none, and its columns are
    /// then known by name only.
    async fn column_numbers(
        &mut self,
        relation_id: u32,
        columns: &[Column],
    ) -> Result<Option<Vec<i64>>, SourceError> {
        let conn = self.catalog().await?;
        let now = catalog::column_numbers(conn, relation_id).await?;
        let same =
            now.len() == columns.len() && now.iter().zip(columns).all(|((n, _), c)| *n == c.name);
        Ok(same.then(|| now.into_iter().map(|(_, n)| n).collect()))
    }

    /// What one decoded message means.
    async fn apply(&mut self, session: &mut Session, message: M) -> Result<Step<Lsn>, SourceError> {
        let (table, record) = match message {
            M::Relation {
                relation_id,
                namespace,
                relation_name,
                replica_identity,
                columns,
            } => {
                let name = TableName {
                    schema: Some(namespace.to_string()),
                    name: relation_name.to_string(),
                };
                let oids: Vec<i64> = columns.iter().map(|c| i64::from(c.type_id)).collect();
                let mods: Vec<i32> = columns.iter().map(|c| c.type_modifier).collect();
                let (types, elems) = self.type_names(&oids, &mods).await?;
                // REPLICA IDENTITY FULL flags every column: the key is the
                // table's primary key then
                let key: Vec<String> = match replica_identity {
                    b'f' => {
                        let conn = self.catalog().await?;
                        catalog::primary_key(conn, &name)
                            .await
                            .context("relation")?
                    }
                    _ => columns
                        .iter()
                        .filter(|c| c.is_key())
                        .map(|c| c.name.to_string())
                        .collect(),
                };
                let columns: Vec<Column> = columns
                    .iter()
                    .zip(&elems)
                    .map(|(c, (base, elem))| Column {
                        name: c.name.to_string(),
                        oid: *base,
                        elem: *elem,
                        key: key.iter().any(|k| **k == *c.name),
                    })
                    .collect();
                let numbers = self.column_numbers(relation_id, &columns).await?;
                let declared = columns
                    .iter()
                    .zip(types)
                    .enumerate()
                    .map(|(i, (c, ty))| {
                        let mut d = Map::new();
                        d.insert("type".into(), Value::String(ty));
                        if c.key {
                            d.insert("primary_key".into(), Value::Bool(true));
                        }
                        if let Some(n) = numbers.as_ref().map(|n| n[i]) {
                            d.insert(abrq_core::SOURCE_COLUMN.into(), n.into());
                        }
                        (c.name.clone(), Value::Object(d))
                    })
                    .collect();
                let table = Arc::new(Table {
                    table: TableRef::new(name.schema.as_deref(), &name.name),
                    declared,
                });
                // a changed shape is a new table: declared again before its
                // next change
                session
                    .relations
                    .insert(relation_id, Relation { table, columns });
                return Ok(Step::Nothing);
            }
            M::Insert { relation_id, tuple } => {
                let rel = relation(session, relation_id)?;
                let fields = row(rel, &tuple, None)?;
                (
                    rel.table.clone(),
                    Record {
                        op: Op::Insert,
                        fields,
                    },
                )
            }
            M::Update {
                relation_id,
                old_tuple,
                new_tuple,
                ..
            } => {
                let rel = relation(session, relation_id)?;
                let fields = row(rel, &new_tuple, old_tuple.as_ref())?;
                let table = rel.table.clone();
                // a new key, or a keyless row matched by its whole old
                // image: the old row's delete, then the new row
                let moved = match &old_tuple {
                    Some(old) if moved(rel, old, &new_tuple)? => Some(key_row(rel, old)?),
                    Some(_) | None => None,
                };
                match moved {
                    Some(gone) => {
                        let new = Record {
                            op: Op::Insert,
                            fields,
                        };
                        if let Some(b) = session.backfill.as_mut() {
                            b.touched(&table.table, &new.fields);
                        }
                        session.pending = Some((table.clone(), new));
                        (
                            table,
                            Record {
                                op: Op::Delete,
                                fields: gone,
                            },
                        )
                    }
                    None => (
                        table,
                        Record {
                            op: Op::Update,
                            fields,
                        },
                    ),
                }
            }
            M::Delete {
                relation_id,
                old_tuple,
                ..
            } => {
                let rel = relation(session, relation_id)?;
                let fields = key_row(rel, &old_tuple)?;
                (
                    rel.table.clone(),
                    Record {
                        op: Op::Delete,
                        fields,
                    },
                )
            }
            // one TRUNCATE of several tables: one instruction for each
            M::Truncate { relation_ids, .. } => {
                let mut tables = Vec::with_capacity(relation_ids.len());
                for id in relation_ids {
                    let table = relation(session, id)?.table.clone();
                    if let Some(b) = session.backfill.as_mut() {
                        b.truncated(&table.table);
                    }
                    tables.push(table);
                }
                return Ok(Step::Truncate(tables));
            }
            // transaction bounds come as replication events; an origin
            // or a type description changes no row
            M::Begin { .. } | M::Commit { .. } | M::Origin { .. } | M::Type { .. } => {
                return Ok(Step::Nothing)
            }
            M::Message { .. } => return Ok(Step::Nothing),
            other => {
                return Err(SourceError::new(
                    Failure::Unsupported,
                    format!("pgoutput message not handled: {other:?}"),
                ))
            }
        };
        if let Some(b) = session.backfill.as_mut() {
            b.touched(&table.table, &record.fields);
        }
        Ok(Step::Change(table, record))
    }

    /// `format_type` of each (type oid, typmod): the names a destination
    /// creates columns with; and the type each value is read as (a
    /// domain's base type) with, for an array, its element type.
    async fn type_names(
        &mut self,
        oids: &[i64],
        mods: &[i32],
    ) -> Result<(Vec<String>, Vec<(u32, u32)>), SourceError> {
        let conn = self.catalog().await?;
        // a domain's values are its base type's
        let rows: Result<Vec<(String, i64, i64)>, _> = sqlx::query_as(
            "SELECT format_type(u.t::oid, u.m), COALESCE(b.oid, u.t::oid)::int8, \
             COALESCE(CASE WHEN b.typcategory = 'A' THEN b.typelem END, 0)::int8 \
             FROM unnest($1::int8[], $2::int4[]) WITH ORDINALITY AS u(t, m, o) \
             LEFT JOIN pg_type t ON t.oid = u.t::oid \
             LEFT JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END \
             ORDER BY u.o",
        )
        .bind(oids)
        .bind(mods)
        .fetch_all(&mut *conn)
        .await;
        let rows = rows.context("cannot name the column types")?;
        let oid = |n: i64| u32::try_from(n).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(|(name, base, elem)| (name, (oid(base), oid(elem))))
            .unzip())
    }
}

fn relation(session: &Session, id: u32) -> Result<&Relation, SourceError> {
    session.relations.get(&id).ok_or_else(|| {
        SourceError::new(
            Failure::Decode,
            format!("cannot decode a change: relation {id} was not described in this session"),
        )
    })
}

/// A record's fields from a tuple; an unchanged TOAST value comes from
/// the old tuple when the table sends one (REPLICA IDENTITY FULL), and is
/// left out otherwise, never written as null.
fn row(
    rel: &Relation,
    tuple: &TupleData,
    old: Option<&TupleData>,
) -> Result<Map<String, Value>, SourceError> {
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
        out.insert(col.name.clone(), value(rel, col, cell)?);
    }
    Ok(out)
}

/// Whether an update's old image names another row than its new one:
/// a key column changed, or (a table without a key, `REPLICA IDENTITY
/// FULL`) the old image is the only way to find the row.
fn moved(rel: &Relation, old: &TupleData, new: &TupleData) -> Result<bool, SourceError> {
    if !rel.columns.iter().any(|c| c.key) {
        return Ok(true);
    }
    for (i, col) in rel.columns.iter().enumerate() {
        let (Some(a), Some(b)) = (old.columns.get(i), new.columns.get(i)) else {
            continue;
        };
        if col.key
            && !a.is_unchanged()
            && !b.is_unchanged()
            && value(rel, col, a)? != value(rel, col, b)?
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A delete's fields: the key columns of the old tuple (all of them with
/// REPLICA IDENTITY FULL; on a table without a key every column, nulls
/// too, since the whole row is what finds it).
fn key_row(rel: &Relation, tuple: &TupleData) -> Result<Map<String, Value>, SourceError> {
    let keyless = !rel.columns.iter().any(|c| c.key);
    let mut out = Map::new();
    for (i, col) in rel.columns.iter().enumerate() {
        if let Some(cell) = tuple.columns.get(i) {
            if (keyless || col.key || !cell.is_null()) && !cell.is_unchanged() {
                out.insert(col.name.clone(), value(rel, col, cell)?);
            }
        }
    }
    Ok(out)
}

/// A value as JSON. The session asks for text in UTF-8: a value that is
/// not stops the source naming the column, never a NULL in its place.
fn value(rel: &Relation, col: &Column, cell: &ColumnData) -> Result<Value, SourceError> {
    if cell.is_null() {
        return Ok(Value::Null);
    }
    let Some(text) = cell.as_str() else {
        return Err(SourceError::new(
            Failure::Decode,
            format!(
                "pgoutput: the value of {}.{} is not UTF-8 text",
                rel.table.table, col.name
            ),
        ));
    };
    Ok(match col.elem {
        0 => values::to_json(col.oid, &text),
        elem => values::array_to_json(elem, &text),
    })
}
