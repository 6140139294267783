//! A connection pool to one side, its catalog (a table's columns, their
//! types and its primary key) and the statements of `sql.rs` run on it.
//! Both sides' sessions speak UTC, so instants render alike.

use std::time::Duration;

use abrq_endpoint::Endpoint;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Executor, Row};

use crate::sql::{qualified, Dialect, Form, Query};

/// Connections per side: a range's checksum runs on both sides at once,
/// two ranges at a time.
const CONNECTIONS: u32 = 3;

#[derive(Clone)]
pub enum Db {
    Pg(PgPool),
    My(MySqlPool),
}

/// A column as the catalog has it.
#[derive(Debug, Clone)]
pub struct CatalogColumn {
    pub name: String,
    /// PostgreSQL: `format_type`. MySQL: `COLUMN_TYPE`.
    pub type_name: String,
    /// MySQL: `DATA_TYPE` (PostgreSQL: the same as `type_name`).
    pub data_type: String,
    /// Its place in the primary key, from 1.
    pub key: Option<u32>,
}

impl Db {
    pub async fn connect(dialect: Dialect, endpoint: &Endpoint) -> Result<Db, String> {
        let timeout = Duration::from_secs(10);
        match dialect {
            Dialect::Postgres => PgPoolOptions::new()
                .max_connections(CONNECTIONS)
                .acquire_timeout(timeout)
                .after_connect(|c, _| {
                    Box::pin(async move {
                        c.execute("SET TIME ZONE 'UTC'; SET extra_float_digits = 3")
                            .await
                            .map(drop)
                    })
                })
                .connect_with(endpoint.postgres("abrq-verify"))
                .await
                .map(Db::Pg),
            Dialect::Mysql => MySqlPoolOptions::new()
                .max_connections(CONNECTIONS)
                .acquire_timeout(timeout)
                .after_connect(|c, _| {
                    Box::pin(async move {
                        c.execute("SET time_zone = '+00:00', group_concat_max_len = 1048576")
                            .await
                            .map(drop)
                    })
                })
                .connect_with(endpoint.mysql())
                .await
                .map(Db::My),
        }
        .map_err(|e| format!("cannot connect to {}:{}: {e}", endpoint.host, endpoint.port))
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Pg(_) => Dialect::Postgres,
            Db::My(_) => Dialect::Mysql,
        }
    }

    /// Runs `q`; every column of the answer is text (or null).
    pub async fn texts(&self, q: &Query) -> Result<Vec<Vec<Option<String>>>, sqlx::Error> {
        match self {
            Db::Pg(pool) => {
                let mut query = sqlx::query(&q.sql);
                for p in &q.params {
                    query = query.bind(p);
                }
                let rows = query.fetch_all(pool).await?;
                rows.iter()
                    .map(|r| (0..r.len()).map(|i| r.try_get(i)).collect())
                    .collect()
            }
            Db::My(pool) => {
                let mut query = sqlx::query(&q.sql);
                for p in &q.params {
                    query = query.bind(p);
                }
                let rows = query.fetch_all(pool).await?;
                rows.iter()
                    .map(|r| (0..r.len()).map(|i| my_text(r, i)).collect())
                    .collect()
            }
        }
    }

    /// Runs a statement that answers nothing; the rows it touched.
    pub async fn execute(&self, q: &Query) -> Result<u64, sqlx::Error> {
        match self {
            Db::Pg(pool) => {
                let mut query = sqlx::query(&q.sql);
                for p in &q.params {
                    query = query.bind(p);
                }
                Ok(query.execute(pool).await?.rows_affected())
            }
            Db::My(pool) => {
                let mut query = sqlx::query(&q.sql);
                for p in &q.params {
                    query = query.bind(p);
                }
                Ok(query.execute(pool).await?.rows_affected())
            }
        }
    }

    /// The table's columns in order, None when there is no such table.
    /// `schema` None: PostgreSQL's search path.
    pub async fn columns(
        &self,
        schema: Option<&str>,
        table: &str,
    ) -> Result<Option<Vec<CatalogColumn>>, sqlx::Error> {
        let d = self.dialect();
        let name = qualified(d, schema, table);
        let found = match self {
            Db::Pg(pool) => {
                let rows = sqlx::query(
                    "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), \
                            array_position(i.indkey::int2[], a.attnum)::int4 \
                     FROM pg_attribute a \
                     LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary \
                     WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
                     ORDER BY a.attnum",
                )
                .bind(&name)
                .fetch_all(pool)
                .await?;
                rows.iter()
                    .map(|r| {
                        let ty: String = r.try_get(1)?;
                        Ok(CatalogColumn {
                            name: r.try_get(0)?,
                            data_type: ty.clone(),
                            type_name: ty,
                            key: r.try_get::<Option<i32>, _>(2)?.map(|k| k as u32),
                        })
                    })
                    .collect::<Result<Vec<_>, sqlx::Error>>()?
            }
            Db::My(pool) => {
                let rows = sqlx::query(
                    "SELECT CAST(c.COLUMN_NAME AS CHAR), CAST(c.COLUMN_TYPE AS CHAR), \
                            CAST(c.DATA_TYPE AS CHAR), CAST(k.ORDINAL_POSITION AS CHAR) \
                     FROM information_schema.COLUMNS c \
                     LEFT JOIN information_schema.KEY_COLUMN_USAGE k \
                       ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
                      AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY' \
                     WHERE c.TABLE_SCHEMA = COALESCE(?, DATABASE()) AND c.TABLE_NAME = ? \
                     ORDER BY c.ORDINAL_POSITION",
                )
                .bind(schema)
                .bind(table)
                .fetch_all(pool)
                .await?;
                rows.iter()
                    .map(|r| {
                        let key: Option<String> = my_text(r, 3)?;
                        Ok(CatalogColumn {
                            name: my_text(r, 0)?.unwrap_or_default(),
                            type_name: my_text(r, 1)?.unwrap_or_default(),
                            data_type: my_text(r, 2)?.unwrap_or_default(),
                            key: key.and_then(|k| k.parse().ok()),
                        })
                    })
                    .collect::<Result<Vec<_>, sqlx::Error>>()?
            }
        };
        Ok(Some(found).filter(|c| !c.is_empty()))
    }

    /// PostgreSQL: the tables of `schema` (for a captured `schema.*`).
    /// MySQL: the base tables of database `schema`.
    pub async fn tables_of(&self, schema: &str) -> Result<Vec<String>, sqlx::Error> {
        match self {
            Db::Pg(pool) => {
                sqlx::query_scalar(
                    "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
                     ORDER BY 1",
                )
                .bind(schema)
                .fetch_all(pool)
                .await
            }
            Db::My(pool) => {
                let rows = sqlx::query(
                    "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY 1",
                )
                .bind(schema)
                .fetch_all(pool)
                .await?;
                rows.iter()
                    .map(|r| my_text(r, 0).map(Option::unwrap_or_default))
                    .collect()
            }
        }
    }

    /// PostgreSQL: the schema unqualified names resolve to.
    pub async fn current_schema(&self) -> Result<Option<String>, sqlx::Error> {
        match self {
            Db::Pg(pool) => sqlx::query_scalar("SELECT current_schema()::text")
                .fetch_one(pool)
                .await
                .map(Some),
            Db::My(pool) => {
                let row = sqlx::query("SELECT CAST(DATABASE() AS CHAR)")
                    .fetch_one(pool)
                    .await?;
                my_text(&row, 0)
            }
        }
    }
}

/// A MySQL answer column as text: MySQL's information_schema and some
/// functions answer in a binary character set, which sqlx will not decode
/// as a string.
fn my_text(row: &sqlx::mysql::MySqlRow, i: usize) -> Result<Option<String>, sqlx::Error> {
    match row.try_get::<Option<String>, _>(i) {
        Ok(v) => Ok(v),
        Err(_) => {
            let bytes: Option<Vec<u8>> = row.try_get(i)?;
            Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
        }
    }
}

/// How the source's `column` is rendered against the replica's `replica`:
/// in the replica column's form, but bytes the replica keeps as text the
/// way abrq wrote them there.
pub fn source_form(d: Dialect, column: &CatalogColumn, replica: &CatalogColumn) -> Form {
    match (form_of(d, column), form_of(d, replica)) {
        (Form::My { binary: true, .. }, Form::My { binary: false, .. }) => Form::MyBytesAsText,
        (_, form) => form,
    }
}

/// How a replica column of this catalog type is rendered on both sides.
pub fn form_of(d: Dialect, column: &CatalogColumn) -> Form {
    match d {
        Dialect::Postgres => Form::Pg(column.type_name.clone()),
        Dialect::Mysql => {
            let t = column.data_type.to_ascii_lowercase();
            let full = column.type_name.to_ascii_lowercase();
            let cast = match t.as_str() {
                "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" => {
                    Some("DECIMAL(65,0)".to_string())
                }
                "decimal" | "numeric" => Some(full.replace("unsigned", "").trim().to_string()),
                "float" | "double" | "real" => Some("DOUBLE".into()),
                "datetime" | "timestamp" => Some("DATETIME(6)".into()),
                "date" => Some("DATE".into()),
                _ => None,
            };
            let binary = matches!(
                t.as_str(),
                "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob"
            );
            Form::My { cast, binary }
        }
    }
}
