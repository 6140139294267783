//! The `postgres` engine: a small pool per destination, the catalog read,
//! the ledger, and (in `write.rs`) one transaction per batch in which DDL,
//! truncates and rows all commit or roll back together.

mod copy;
pub mod errors;
mod write;

use std::sync::Arc;

use abrq_core::{BatchMeta, Destination};
use async_trait::async_trait;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row as _};
use tokio::sync::OnceCell;

use super::config::RelationalSettings;
use super::connection::{direct_attempt, why_unreachable, Connection};
use super::destination::{Applied, Backend, Part, RelationalDestination, Run, RunError};
use super::errors::{DbError, Kind};
use super::plan::Plan;
use super::table::{source_of, Column, TableInfo};
use super::types::{Dialect, SqlType};
use super::{writer, LEDGER};
use errors::db_error;

pub type PostgresDestination = RelationalDestination<PgBackend>;

pub struct PgBackend {
    conn: Connection<Postgres>,
    /// The schema: configured, or the connection's current one.
    schema: OnceCell<String>,
}

/// Builds the destination without I/O (and without needing a runtime):
/// the pool is made on first use and connects then.
pub fn destination(settings: RelationalSettings) -> Arc<dyn Destination> {
    let conn = Connection::new(Arc::new(settings));
    let settings = conn.settings.clone();
    let backend = PgBackend {
        conn,
        schema: OnceCell::new(),
    };
    Arc::new(RelationalDestination::new(backend, settings))
}

const D: Dialect = Dialect::Postgres;

impl PgBackend {
    fn pool(&self) -> &PgPool {
        self.conn
            .pool(|options| options.connect_lazy_with(self.conn.settings.pg_options()))
    }

    async fn schema(&self) -> Result<&str, DbError> {
        let s = self
            .schema
            .get_or_try_init(|| async {
                if let Some(s) = &self.conn.settings.schema {
                    return Ok(s.clone());
                }
                let row: Option<String> = sqlx::query_scalar("SELECT current_schema()")
                    .fetch_one(self.pool())
                    .await
                    .map_err(|e| db_error("read the current schema", e))?;
                row.ok_or_else(|| DbError {
                    op: "find a schema: search_path names none; set `schema`".into(),
                    kind: Kind::Misconfigured,
                    detail: None,
                    source: sqlx::Error::Configuration("no current schema".into()),
                })
            })
            .await?;
        Ok(s.as_str())
    }

    async fn qualified(&self, table: &str) -> Result<String, DbError> {
        Ok(D.qualified(self.schema().await?, table))
    }

    async fn ledger(&self) -> Result<String, DbError> {
        let name = D.qualified(self.schema().await?, LEDGER);
        let create = || async {
            let sql = format!(
                "CREATE TABLE IF NOT EXISTS {name} (\
                 stream text NOT NULL, idempotency_key text NOT NULL, \
                 applied_at timestamptz NOT NULL DEFAULT now(), \
                 destination_table text NOT NULL, \
                 PRIMARY KEY (stream, idempotency_key, destination_table))"
            );
            let fail = |e| db_error(format!("create the ledger {name}"), e);
            let mut tx = self.pool().begin().await.map_err(fail)?;
            if let Some(schema) = &self.conn.settings.schema {
                create_schema(&mut tx, schema).await?;
            }
            for sql in [creation_lock(&name), sql] {
                sqlx::query(&sql).execute(&mut *tx).await.map_err(fail)?;
            }
            tx.commit().await.map_err(fail)
        };
        self.conn.ledger(create).await?;
        Ok(name)
    }
}

/// Creates the configured schema when it does not exist yet, as the
/// tables in it are created: asked first, so a user without CREATE on the
/// database still writes into a schema that exists.
async fn create_schema(conn: &mut sqlx::PgConnection, schema: &str) -> Result<(), DbError> {
    let quoted = D.quote(schema);
    let exists = |e| db_error(format!("look up the schema {quoted}"), e);
    let find = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)";
    let found: bool = sqlx::query_scalar(find)
        .bind(schema)
        .fetch_one(&mut *conn)
        .await
        .map_err(exists)?;
    if found {
        return Ok(());
    }
    let op = || format!("create the schema {quoted} (it does not exist)");
    for sql in [
        creation_lock(&quoted),
        format!("CREATE SCHEMA IF NOT EXISTS {quoted}"),
    ] {
        sqlx::query(&sql)
            .execute(&mut *conn)
            .await
            .map_err(|e| db_error(op(), e))?;
    }
    tracing::info!(schema, "created the destination schema");
    Ok(())
}

/// The statement that takes turns with every other session creating
/// `table` (quoted, qualified), until the transaction ends. Two sessions
/// running `CREATE TABLE IF NOT EXISTS` at once both find no table, and the
/// second fails on a unique index of the catalog
/// (`pg_type_typname_nsp_index`); in turns, the second finds the table the
/// first committed. The key is a number, so it is written in the text.
pub(crate) fn creation_lock(table: &str) -> String {
    format!("SELECT pg_advisory_xact_lock({})", lock_key(table))
}

/// A fixed advisory lock key for a name: 64-bit FNV-1a, the same in every
/// process and version.
fn lock_key(name: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

#[async_trait]
impl Backend for PgBackend {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn load_table(&self, table: &str) -> Result<Option<TableInfo>, DbError> {
        let schema = self.schema().await?;
        let op = || format!("read the columns of {}", D.qualified(schema, table));
        // indkey is an int2vector, indexed from 0: +1 keeps 0 for "no key"
        let rows = sqlx::query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), \
                    format_type(a.atttypid, NULL), a.attnotnull, \
                    coalesce(array_position(i.indkey::int2[], a.attnum) + 1, 0)::int4, \
                    (SELECT conname::text FROM pg_constraint \
                     WHERE conrelid = c.oid AND contype = 'p'), \
                    obj_description(c.oid, 'pg_class') IS NOT DISTINCT FROM $3, \
                    col_description(c.oid, a.attnum) \
             FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') \
             ORDER BY a.attnum",
        )
        .bind(schema)
        .bind(table)
        .bind(crate::relational::table::CREATED)
        .fetch_all(self.pool())
        .await
        .map_err(|e| db_error(op(), e))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut info = TableInfo::default();
        let mut key: Vec<(i32, String)> = Vec::new();
        for r in rows {
            let get = |e| db_error(op(), e);
            let name: String = r.try_get(0).map_err(get)?;
            let full: String = r.try_get(1).map_err(get)?;
            let base: String = r.try_get(2).map_err(get)?;
            let not_null: bool = r.try_get(3).map_err(get)?;
            let key_pos: i32 = r.try_get(4).map_err(get)?;
            info.key_name = r.try_get(5).map_err(get)?;
            info.created = r.try_get(6).map_err(get)?;
            let comment: Option<String> = r.try_get(7).map_err(get)?;
            if key_pos > 0 {
                key.push((key_pos, name.clone()));
            }
            // the cast has no length, so the column itself checks it;
            // `bit` and `character` without one are one long, which
            // would cut the value
            let cast = match base.as_str() {
                "bit" => "bit varying".to_string(),
                "bit[]" => "bit varying[]".to_string(),
                "character" => "bpchar".to_string(),
                "character[]" => "bpchar[]".to_string(),
                _ => base,
            };
            let ty = D
                .parse_type(&full)
                .unwrap_or(SqlType::Other { name: full, cast });
            info.columns.push(Column {
                source: source_of(comment.as_deref()),
                ..Column::new(name, ty, !not_null)
            });
        }
        key.sort();
        info.key = key.into_iter().map(|(_, n)| n).collect();
        Ok(Some(info))
    }

    async fn apply(
        &self,
        meta: &BatchMeta,
        parts: &[Part<'_>],
        run: Run,
    ) -> Result<Applied, RunError> {
        let ledger = self.ledger().await?;
        let ledger_key = self.qualified(&self.conn.settings.table).await?;
        let mut names = Vec::with_capacity(parts.len());
        for part in parts {
            names.push(self.qualified(&part.table).await?);
        }
        let ctxs: Vec<(write::Ctx, &Plan)> = parts
            .iter()
            .zip(&names)
            .map(|(part, table)| {
                let ctx = write::Ctx {
                    pool: self.pool(),
                    ledger: &ledger,
                    table,
                    ledger_key: &ledger_key,
                };
                (ctx, &part.plan)
            })
            .collect();
        writer::apply(&ctxs, meta, run).await
    }

    fn groups_batches(&self) -> bool {
        true
    }

    async fn apply_group(
        &self,
        batches: &[(&BatchMeta, &[Part<'_>])],
    ) -> Result<Vec<Applied>, RunError> {
        let ledger = self.ledger().await?;
        let ledger_key = self.qualified(&self.conn.settings.table).await?;
        let mut names: Vec<Vec<String>> = Vec::with_capacity(batches.len());
        for (_, parts) in batches {
            let mut n = Vec::with_capacity(parts.len());
            for part in *parts {
                n.push(self.qualified(&part.table).await?);
            }
            names.push(n);
        }
        let work: Vec<(&BatchMeta, Vec<(write::Ctx, &Plan)>)> = batches
            .iter()
            .zip(&names)
            .map(|((meta, parts), tables)| {
                let ctxs = parts
                    .iter()
                    .zip(tables)
                    .map(|(part, table)| {
                        let ctx = write::Ctx {
                            pool: self.pool(),
                            ledger: &ledger,
                            table,
                            ledger_key: &ledger_key,
                        };
                        (ctx, &part.plan)
                    })
                    .collect();
                (*meta, ctxs)
            })
            .collect();
        writer::apply_group(&work).await
    }

    async fn connect(&self) -> Result<String, DbError> {
        // the server's own answer first: the pool would retry a refused
        // connection until its timeout and then say only that
        let at = &self.conn.settings.endpoint;
        direct_attempt(self.pool())
            .await
            .map_err(|e| db_error(format!("connect to {at}"), e))?;
        let version = sqlx::query_scalar::<_, String>("SHOW server_version")
            .fetch_one(self.pool())
            .await;
        let version = match version {
            Ok(v) => v,
            Err(e) => {
                let e = why_unreachable(self.pool(), e).await;
                return Err(db_error(format!("connect to {at}"), e));
            }
        };
        self.ledger().await?;
        Ok(format!(
            "PostgreSQL {version} at {}",
            self.conn.settings.endpoint
        ))
    }

    async fn table_name(&self, table: &str) -> Result<String, DbError> {
        self.qualified(table).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_are_fixed_per_name() {
        // FNV-1a's published value for "a": the key must never change,
        // or two versions running at once would not take turns
        assert_eq!(lock_key("a") as u64, 0xaf63_dc4c_8601_ec8c);
        assert_ne!(lock_key(r#""s"."t""#), lock_key(r#""s"."u""#));
    }
}
