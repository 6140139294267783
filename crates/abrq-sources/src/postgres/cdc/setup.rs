//! What logical decoding needs before the first change is read: the
//! server's `wal_level`, the table, a publication holding it and the
//! replication slot. abrq creates the publication and the slot; a slot
//! that is gone after the stream has read from it is a hard error, never
//! a silent new start (the changes in between would be lost).

use sqlx::postgres::PgConnection;

use super::super::config::{quote, TableName};
use crate::error::{Failure, SourceError};

/// The table as the catalog names it (schema always set).
pub async fn resolve_table(
    conn: &mut PgConnection,
    table: &TableName,
) -> Result<TableName, SourceError> {
    let row: Option<(String, String)> = sqlx::query_as(
        "SELECT n.nspname::text, c.relname::text FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.oid = to_regclass($1)",
    )
    .bind(table.quoted())
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| SourceError::from_client(format!("cannot look up table {table}"), e))?;
    match row {
        Some((schema, name)) => Ok(TableName {
            schema: Some(schema),
            name,
        }),
        None => Err(SourceError::new(
            Failure::NotConfigured,
            format!("table {table} does not exist"),
        )),
    }
}

/// The configured tables as the catalog names them, in config order; a
/// `schema.*` entry becomes that schema's tables in name order.
pub async fn resolve_all(
    conn: &mut PgConnection,
    entries: &[TableName],
) -> Result<Vec<TableName>, SourceError> {
    let mut out: Vec<TableName> = Vec::new();
    for entry in entries {
        let found = match (&entry.schema, entry.name.as_str()) {
            (Some(schema), "*") => {
                let names: Vec<String> = sqlx::query_scalar(
                    "SELECT c.relname::text FROM pg_class c \
                     JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
                     ORDER BY c.relname",
                )
                .bind(schema)
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| {
                    SourceError::from_client(
                        format!("cannot list the tables of schema {schema}"),
                        e,
                    )
                })?;
                if names.is_empty() {
                    return Err(SourceError::new(
                        Failure::NotConfigured,
                        format!("schema {schema} has no tables (tables = [\"{schema}.*\"])"),
                    ));
                }
                names
                    .into_iter()
                    .map(|name| TableName {
                        schema: Some(schema.clone()),
                        name,
                    })
                    .collect()
            }
            _ => vec![resolve_table(conn, entry).await?],
        };
        for t in found {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// Every prerequisite that is missing, each with how to fix it; empty
/// when logical decoding of `tables` can start.
pub async fn missing(
    conn: &mut PgConnection,
    tables: &[TableName],
) -> Result<Vec<String>, SourceError> {
    let mut out = Vec::new();
    let level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| SourceError::from_client("cannot read wal_level", e))?;
    if level != "logical" {
        out.push(format!(
            "wal_level is {level:?}: set wal_level = logical in postgresql.conf and restart the server"
        ));
    }
    let (replication, superuser): (bool, bool) = sqlx::query_as(
        "SELECT rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| SourceError::from_client("cannot read the role", e))?;
    if !replication && !superuser {
        out.push(
            "the user has no REPLICATION privilege: ALTER ROLE <user> WITH REPLICATION".to_string(),
        );
    }
    let mut resolved = Vec::new();
    for entry in tables {
        match resolve_all(conn, std::slice::from_ref(entry)).await {
            Err(e) if e.failure() == Failure::NotConfigured => out.push(e.to_string()),
            Err(e) => return Err(e),
            Ok(found) => resolved.extend(found),
        }
    }
    for t in resolved {
        let (identity, has_key): (String, bool) = sqlx::query_as(
            "SELECT c.relreplident::text, EXISTS (SELECT 1 FROM pg_index i \
             WHERE i.indrelid = c.oid AND i.indisprimary) \
             FROM pg_class c WHERE c.oid = to_regclass($1)",
        )
        .bind(t.quoted())
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| {
            SourceError::from_client(format!("cannot read the replica identity of {t}"), e)
        })?;
        if identity == "n" || (identity == "d" && !has_key) {
            out.push(format!(
                "table {t} has no primary key and REPLICA IDENTITY {}: updates and deletes \
                 cannot be replicated; add a primary key or ALTER TABLE {} REPLICA IDENTITY FULL",
                if identity == "n" {
                    "NOTHING"
                } else {
                    "DEFAULT"
                },
                t.quoted()
            ));
        }
    }
    Ok(out)
}

/// Creates the publication for `tables` if it is missing, and adds the
/// tables an existing one lacks; the tables added (all of them when it
/// was made). A partitioned table is published as its root
/// (`publish_via_partition_root`): its changes, in any partition, present
/// or added later, carry the root's name and columns.
pub async fn ensure_publication(
    conn: &mut PgConnection,
    publication: &str,
    tables: &[TableName],
) -> Result<Vec<TableName>, SourceError> {
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_publication WHERE pubname = $1")
        .bind(publication)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| SourceError::from_client("cannot read publications", e))?;
    let list = |ts: &[TableName]| -> String {
        ts.iter().map(|t| t.quoted()).collect::<Vec<_>>().join(", ")
    };
    let (sql, added) = match exists {
        None => (
            format!(
                "CREATE PUBLICATION {} FOR TABLE {} WITH (publish_via_partition_root = true)",
                quote(publication),
                list(tables)
            ),
            tables.to_vec(),
        ),
        Some(_) => {
            via_root(conn, publication).await?;
            let lacking = lacking(conn, publication, tables).await?;
            if lacking.is_empty() {
                return Ok(lacking);
            }
            let sql = format!(
                "ALTER PUBLICATION {} ADD TABLE {}",
                quote(publication),
                list(&lacking)
            );
            (sql, lacking)
        }
    };
    sqlx::query(&sql).execute(&mut *conn).await.map_err(|e| {
        SourceError::from_client(
            format!("cannot create publication {publication:?} (the user must own the tables)"),
            e,
        )
    })?;
    tracing::info!(%publication, tables = tables.len(), "publication ready");
    Ok(added)
}

/// An existing publication made without `publish_via_partition_root`
/// gets it (before, a partitioned table's changes carried its partitions'
/// names).
async fn via_root(conn: &mut PgConnection, publication: &str) -> Result<(), SourceError> {
    let via: bool = sqlx::query_scalar("SELECT pubviaroot FROM pg_publication WHERE pubname = $1")
        .bind(publication)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| SourceError::from_client("cannot read publications", e))?;
    if via {
        return Ok(());
    }
    let sql = format!(
        "ALTER PUBLICATION {} SET (publish_via_partition_root = true)",
        quote(publication)
    );
    sqlx::query(&sql).execute(&mut *conn).await.map_err(|e| {
        SourceError::from_client(
            format!("cannot publish {publication:?} via partition roots"),
            e,
        )
    })?;
    tracing::info!(%publication, "publication now publishes partitioned tables as their roots");
    Ok(())
}

/// The tables of `tables` the publication does not hold: created since
/// it was made (a `schema.*` entry), or dropped and created again (the
/// publication held the dropped one).
pub async fn lacking(
    conn: &mut PgConnection,
    publication: &str,
    tables: &[TableName],
) -> Result<Vec<TableName>, SourceError> {
    let has: Vec<(String, String)> = sqlx::query_as(
        "SELECT schemaname::text, tablename::text FROM pg_publication_tables \
         WHERE pubname = $1",
    )
    .bind(publication)
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| SourceError::from_client(format!("cannot read publication {publication:?}"), e))?;
    Ok(tables
        .iter()
        .filter(|t| {
            let schema = t.schema.as_deref().unwrap_or("public");
            !has.iter().any(|(s, n)| s == schema && *n == t.name)
        })
        .cloned()
        .collect())
}

/// What the server holds for the slot.
pub enum Slot {
    Missing,
    /// Usable; its confirmed position.
    Ready {
        confirmed: Option<String>,
    },
    /// Invalidated: the WAL it needed was removed.
    Lost,
}

pub async fn slot(conn: &mut PgConnection, name: &str) -> Result<Slot, SourceError> {
    let row: Option<(Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT confirmed_flush_lsn::text, wal_status FROM pg_replication_slots \
         WHERE slot_name = $1 AND database = current_database()",
    )
    .bind(name)
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| SourceError::from_client("cannot read replication slots", e))?;
    Ok(match row {
        None => Slot::Missing,
        Some((_, Some(status))) if status == "lost" => Slot::Lost,
        Some((confirmed, _)) => Slot::Ready { confirmed },
    })
}

/// Creates a logical slot with pgoutput; returns its consistent point.
pub async fn create_slot(conn: &mut PgConnection, name: &str) -> Result<String, SourceError> {
    let lsn: String = sqlx::query_scalar(
        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
    )
    .bind(name)
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| SourceError::from_client(format!("cannot create replication slot {name:?}"), e))?;
    tracing::info!(slot = %name, %lsn, "replication slot created");
    Ok(lsn)
}

/// Bytes of WAL the slot holds back (`abrq_source_lag_bytes`).
pub async fn retained_bytes(
    conn: &mut PgConnection,
    name: &str,
) -> Result<Option<i64>, SourceError> {
    sqlx::query_scalar(
        "SELECT (pg_current_wal_lsn() - restart_lsn)::int8 FROM pg_replication_slots \
         WHERE slot_name = $1",
    )
    .bind(name)
    .fetch_optional(&mut *conn)
    .await
    .map(Option::flatten)
    .map_err(|e| SourceError::from_client(format!("cannot read slot {name:?}"), e))
}

/// Ends the walsender that holds `name` (a former holder of the stream,
/// frozen or cut off: its lease is gone, and only the lease holder opens
/// the source), and waits until the server lets go of the slot. Without
/// this the slot stays taken until `wal_sender_timeout`, or forever when
/// that is 0.
pub async fn take_slot(conn: &mut PgConnection, name: &str) -> Result<(), SourceError> {
    let Some(pid) = holder(conn, name).await? else {
        return Ok(());
    };
    tracing::warn!(slot = %name, pid, "the slot is held by another session: ending it");
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(&mut *conn)
        .await
        .map_err(|e| {
            SourceError::from_client(
                format!("cannot end the session (pid {pid}) that holds replication slot {name:?}"),
                e,
            )
        })?;
    for _ in 0..50 {
        if holder(conn, name).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(SourceError::new(
        Failure::Server,
        format!("replication slot {name:?} is still held by pid {pid} after it was ended"),
    ))
}

/// The server process that streams slot `name` now, if one does.
async fn holder(conn: &mut PgConnection, name: &str) -> Result<Option<i32>, SourceError> {
    let pid: Option<Option<i32>> =
        sqlx::query_scalar("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1")
            .bind(name)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| SourceError::from_client("cannot read replication slots", e))?;
    Ok(pid.flatten())
}

/// Whether the server still streams `name` to a session: a replication
/// connection that stalls with its TCP connection open shows here as a
/// slot no session holds.
pub async fn slot_active(conn: &mut PgConnection, name: &str) -> Result<bool, SourceError> {
    let active: Option<bool> =
        sqlx::query_scalar("SELECT active FROM pg_replication_slots WHERE slot_name = $1")
            .bind(name)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| SourceError::from_client("cannot read replication slots", e))?;
    Ok(active.unwrap_or(false))
}
