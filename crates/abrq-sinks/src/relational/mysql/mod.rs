//! The `mysql` engine (MySQL and MariaDB): a small pool per destination
//! with strict SQL mode (so a bad value fails instead of being silently
//! truncated) and UTC sessions, the catalog read, the ledger, and (in
//! `write.rs`) the batch transaction.

pub mod errors;
mod write;

use std::sync::Arc;

use abrq_core::{BatchMeta, Destination};
use async_trait::async_trait;
use sqlx::mysql::MySqlPool;
use sqlx::{Executor, MySql, Row as _};
use tokio::sync::OnceCell;

use super::config::RelationalSettings;
use super::connection::{direct_attempt, why_unreachable, Connection};
use super::destination::{Applied, Backend, Part, RelationalDestination, Run, RunError};
use super::errors::{DbError, Kind};
use super::plan::Plan;
use super::table::{source_of, Column, TableInfo};
use super::types::{Dialect, SqlType};
use super::{writer, LEDGER};
use errors::{db_error, number, DUPLICATE_COLUMN};

pub type MysqlDestination = RelationalDestination<MysqlBackend>;

pub struct MysqlBackend {
    conn: Connection<MySql>,
    /// `@@max_allowed_packet`, read once: statements stay well under it.
    packet: OnceCell<usize>,
}

/// Builds the destination without I/O; the pool is made on first use.
pub fn destination(settings: RelationalSettings) -> Arc<dyn Destination> {
    let conn = Connection::new(Arc::new(settings));
    let settings = conn.settings.clone();
    let backend = MysqlBackend {
        conn,
        packet: OnceCell::new(),
    };
    Arc::new(RelationalDestination::new(backend, settings))
}

const D: Dialect = Dialect::Mysql;

impl MysqlBackend {
    fn pool(&self) -> &MySqlPool {
        self.conn.pool(|options| {
            options
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute(
                            "SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',STRICT_ALL_TABLES')",
                        )
                        .await?;
                        Ok(())
                    })
                })
                .connect_lazy_with(self.conn.settings.mysql_options())
        })
    }

    /// The database the table lives in.
    fn schema(&self) -> &str {
        let s = &self.conn.settings;
        s.schema
            .as_deref()
            .or(s.endpoint.database.as_deref())
            .unwrap_or_default()
    }

    fn qualified(&self, table: &str) -> String {
        D.qualified(self.schema(), table)
    }

    async fn packet(&self) -> Result<usize, DbError> {
        self.packet
            .get_or_try_init(|| async {
                let n: i64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)")
                    .fetch_one(self.pool())
                    .await
                    .map_err(|e| db_error("read max_allowed_packet", e))?;
                Ok(usize::try_from(n).unwrap_or(1 << 20))
            })
            .await
            .copied()
    }

    /// Creates the configured database when it does not exist yet, as the
    /// tables in it are created: asked first, so a user without the global
    /// CREATE right still writes into one that exists.
    async fn create_schema(&self, schema: &str) -> Result<(), DbError> {
        let quoted = D.quote(schema);
        let found: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
        )
        .bind(schema)
        .fetch_one(self.pool())
        .await
        .map_err(|e| db_error(format!("look up the database {quoted}"), e))?;
        if found > 0 {
            return Ok(());
        }
        // utf8mb4, as the connections speak: a server default of latin1
        // would refuse most of the world's text
        sqlx::query(&format!(
            "CREATE DATABASE IF NOT EXISTS {quoted} CHARACTER SET utf8mb4"
        ))
        .execute(self.pool())
        .await
        .map_err(|e| {
            db_error(
                format!("create the database {quoted} (it does not exist)"),
                e,
            )
        })?;
        tracing::info!(schema, "created the destination database");
        Ok(())
    }

    async fn ledger(&self) -> Result<String, DbError> {
        let name = D.qualified(self.schema(), LEDGER);
        let create = || async {
            // varchar, not text: key columns need a bounded length
            let sql = format!(
                "CREATE TABLE IF NOT EXISTS {name} (\
                 stream varchar(64) NOT NULL, idempotency_key varchar(64) NOT NULL, \
                 applied_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
                 destination_table varchar(200) NOT NULL, \
                 PRIMARY KEY (stream, idempotency_key, destination_table))"
            );
            let schema = self.schema();
            if !schema.is_empty() {
                self.create_schema(schema).await?;
            }
            sqlx::query(&sql)
                .execute(self.pool())
                .await
                .map(drop)
                .map_err(|e| db_error(format!("create the ledger {name}"), e))
        };
        self.conn.ledger(create).await?;
        Ok(name)
    }
}

#[async_trait]
impl Backend for MysqlBackend {
    fn kind(&self) -> &'static str {
        "mysql"
    }

    async fn load_table(&self, table: &str) -> Result<Option<TableInfo>, DbError> {
        let op = || format!("read the columns of {}", self.qualified(table));
        // explicit casts: MySQL 8 returns some of these as binary strings
        let rows = sqlx::query(
            "SELECT CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), \
                    CAST(IS_NULLABLE AS CHAR), CAST(COLUMN_KEY AS CHAR), \
                    CAST(COLUMN_COMMENT AS CHAR) \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
        )
        .bind(self.schema())
        .bind(table)
        .fetch_all(self.pool())
        .await
        .map_err(|e| db_error(op(), e))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut info = TableInfo::default();
        for r in rows {
            let get = |e| db_error(op(), e);
            let name: String = r.try_get(0).map_err(get)?;
            let full: String = r.try_get(1).map_err(get)?;
            let nullable: String = r.try_get(2).map_err(get)?;
            let key: String = r.try_get(3).map_err(get)?;
            let comment: Option<String> = r.try_get(4).map_err(get)?;
            let ty = D.parse_type(&full).unwrap_or(SqlType::Other {
                cast: full.clone(),
                name: full,
            });
            if key == "PRI" {
                info.key.push(name.clone());
            }
            info.columns.push(Column {
                source: source_of(comment.as_deref()),
                ..Column::new(name, ty, nullable == "YES")
            });
        }
        if info.key.len() > 1 {
            info.key = self.key_order(table).await?;
        }
        let comment: Option<String> = sqlx::query_scalar(
            "SELECT CAST(TABLE_COMMENT AS CHAR) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
        )
        .bind(self.schema())
        .bind(table)
        .fetch_optional(self.pool())
        .await
        .map_err(|e| db_error(op(), e))?;
        info.created = comment.as_deref() == Some(crate::relational::table::CREATED);
        Ok(Some(info))
    }

    async fn apply(
        &self,
        meta: &BatchMeta,
        parts: &[Part<'_>],
        run: Run,
    ) -> Result<Applied, RunError> {
        let ledger = self.ledger().await?;
        let packet = self.packet().await?;
        let ledger_key = self.qualified(&self.conn.settings.table);
        let names: Vec<String> = parts.iter().map(|p| self.qualified(&p.table)).collect();
        let ctxs: Vec<(write::Ctx, &Plan)> = parts
            .iter()
            .zip(&names)
            .map(|(part, table)| {
                let ctx = write::Ctx {
                    pool: self.pool(),
                    ledger: &ledger,
                    table,
                    ledger_key: &ledger_key,
                    packet,
                };
                (ctx, &part.plan)
            })
            .collect();
        match writer::apply(&ctxs, meta, run).await {
            // The plan checked its new names against a fresh read of the
            // table, so a duplicate column is most likely another writer
            // that added the same column meanwhile: the retry sees it.
            Err(mut e)
                if parts.iter().any(|p| !p.plan.add.is_empty())
                    && number(&e.error.source) == Some(DUPLICATE_COLUMN)
                    && !self.refuses_any(parts).await =>
            {
                e.error.kind = Kind::ObjectExists;
                Err(e)
            }
            r => r,
        }
    }

    async fn connect(&self) -> Result<String, DbError> {
        // the server's own answer first: the pool would retry a refused
        // connection until its timeout and then say only that
        let at = &self.conn.settings.endpoint;
        direct_attempt(self.pool())
            .await
            .map_err(|e| db_error(format!("connect to {at}"), e))?;
        let version = sqlx::query_scalar::<_, String>("SELECT CAST(VERSION() AS CHAR)")
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
            "MySQL {version} at {}",
            self.conn.settings.endpoint
        ))
    }

    async fn table_name(&self, table: &str) -> Result<String, DbError> {
        Ok(self.qualified(table))
    }
}

impl MysqlBackend {
    /// Whether a table a part adds columns to, read again, still lacks
    /// one of them spelled exactly so (the server refused the name itself);
    /// a failed read cannot tell, and counts as no.
    async fn refuses_any(&self, parts: &[Part<'_>]) -> bool {
        for part in parts.iter().filter(|p| !p.plan.add.is_empty()) {
            if let Ok(Some(t)) = self.load_table(&part.table).await {
                if part.plan.add.iter().any(|n| t.column(n).is_none()) {
                    return true;
                }
            }
        }
        false
    }

    /// A composite primary key in key order (COLUMNS lists table order).
    async fn key_order(&self, table: &str) -> Result<Vec<String>, DbError> {
        sqlx::query_scalar(
            "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
             ORDER BY ORDINAL_POSITION",
        )
        .bind(self.schema())
        .bind(table)
        .fetch_all(self.pool())
        .await
        .map_err(|e| {
            db_error(
                format!("read the primary key of {}", self.qualified(table)),
                e,
            )
        })
    }
}
