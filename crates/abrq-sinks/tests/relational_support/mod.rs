//! What the relational tests share: a fresh schema (PostgreSQL) or database
//! (MySQL) per test on the servers `abrq-testkit` points at, destinations
//! built from config text as an operator writes it, batches, and a few
//! queries to look at the result.
#![allow(dead_code)] // each test file uses a different part

use std::sync::Arc;

use abrq_core::config::Config;
use abrq_core::{idempotency_key, Batch, BatchMeta, Destination, Item, Op, Record};
use std::str::FromStr;

use abrq_sinks::relational::sqlx::{
    self, mysql::MySqlPool, postgres::PgConnectOptions, postgres::PgPool, Row as _,
};
use chrono::Utc;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Postgres,
    Mysql,
}

/// One test's private corner of a server, dropped at the end (best effort).
pub struct Db {
    pub engine: Engine,
    /// The schema (PostgreSQL) or database (MySQL) made for this test.
    pub name: String,
    pub pool: Pool,
    url: Url,
}

pub enum Pool {
    Pg(PgPool),
    My(MySqlPool),
}

/// The parts of a server URL that become connection fields.
#[derive(Debug, Clone)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
}

/// `scheme://user[:password]@host[:port]/database[?...]`
fn parse(url: &str, default_port: u16) -> Url {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split('?').next().unwrap_or_default();
    let (auth, rest) = rest.rsplit_once('@').unwrap_or(("", rest));
    let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
    let (hostport, database) = rest.split_once('/').unwrap_or((rest, ""));
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().expect("port in test url")),
        None => (hostport, default_port),
    };
    Url {
        host: host.into(),
        port,
        user: user.into(),
        password: password.into(),
        database: database.into(),
    }
}

impl Db {
    pub async fn new(engine: Engine, prefix: &str) -> Db {
        let name = abrq_testkit::names::database(prefix);
        match engine {
            Engine::Postgres => {
                let url = abrq_testkit::Postgres::from_env().url;
                // UTC sessions, so instants read back the same everywhere
                let opts = PgConnectOptions::from_str(&url)
                    .unwrap()
                    .options([("TimeZone", "UTC")]);
                let pool = PgPool::connect_with(opts)
                    .await
                    .expect("postgres (see scripts/services.sh)");
                sqlx::query(&format!("CREATE SCHEMA {name}"))
                    .execute(&pool)
                    .await
                    .unwrap();
                Db {
                    engine,
                    name,
                    pool: Pool::Pg(pool),
                    url: parse(&url, 5432),
                }
            }
            Engine::Mysql => {
                let url = abrq_testkit::Mysql::from_env().url;
                let admin = MySqlPool::connect(&url)
                    .await
                    .expect("mysql (see scripts/services.sh)");
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&admin)
                    .await
                    .unwrap();
                admin.close().await;
                let mut u = parse(&url, 3306);
                u.database = name.clone();
                let own = format!(
                    "mysql://{}:{}@{}:{}/{name}",
                    u.user, u.password, u.host, u.port
                );
                let pool = MySqlPool::connect(&own).await.unwrap();
                Db {
                    engine,
                    name,
                    pool: Pool::My(pool),
                    url: u,
                }
            }
        }
    }

    pub fn engine_name(&self) -> &'static str {
        match self.engine {
            Engine::Postgres => "postgres",
            Engine::Mysql => "mysql",
        }
    }

    /// Config text for a destination on this test's schema, table `table`,
    /// reached at `host:port` (normally the server itself), plus `extra`.
    pub fn config(&self, table: &str, port: Option<u16>, extra: &str) -> String {
        let u = &self.url;
        let (database, schema) = match self.engine {
            Engine::Postgres => (u.database.clone(), format!("schema = \"{}\"\n", self.name)),
            Engine::Mysql => (self.name.clone(), String::new()),
        };
        let password = if u.password.is_empty() {
            String::new()
        } else {
            format!("password = \"{}\"\n", u.password)
        };
        format!(
            "[[streams]]\nname = \"orders\"\n[streams.source]\nengine = \"http\"\n\
             [[streams.destinations]]\nname = \"db\"\nengine = \"{}\"\nhost = \"{}\"\nport = {}\n\
             database = \"{database}\"\nusername = \"{}\"\n{password}{schema}table = \"{table}\"\n{extra}\n",
            self.engine_name(),
            u.host,
            port.unwrap_or(u.port),
            u.user,
        )
    }

    pub fn destination(&self, table: &str, extra: &str) -> Arc<dyn Destination> {
        self.destination_via(table, None, extra)
    }

    pub fn destination_via(
        &self,
        table: &str,
        port: Option<u16>,
        extra: &str,
    ) -> Arc<dyn Destination> {
        build(&self.config(table, port, extra))
    }

    /// Config text for a destination like [`Db::config`]'s, writing into
    /// `schema` (a database, for MySQL) instead of this test's own.
    pub fn config_in(&self, schema: &str, table: &str) -> String {
        let text = self.config(table, None, "");
        match self.engine {
            Engine::Postgres => text.replace(
                &format!("schema = \"{}\"\n", self.name),
                &format!("schema = \"{schema}\"\n"),
            ),
            Engine::Mysql => text.replace("table = ", &format!("schema = \"{schema}\"\ntable = ")),
        }
    }

    /// `schema.table`, quoted for this engine.
    pub fn table(&self, table: &str) -> String {
        match self.engine {
            Engine::Postgres => format!("\"{}\".\"{table}\"", self.name),
            Engine::Mysql => format!("`{}`.`{table}`", self.name),
        }
    }

    /// Runs an operator's statement; `{t}` stands for `table(t)`.
    pub async fn exec(&self, sql: &str) {
        match &self.pool {
            Pool::Pg(p) => sqlx::query(sql).execute(p).await.map(drop),
            Pool::My(p) => sqlx::query(sql).execute(p).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Every row of a query, each column cast to text by the query itself
    /// (`CAST(x AS CHAR)` / `x::text`), NULL as `None`.
    pub async fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        match &self.pool {
            Pool::Pg(p) => {
                let rows = sqlx::query(sql)
                    .fetch_all(p)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.iter()
                    .map(|r| {
                        (0..r.len())
                            .map(|i| r.get::<Option<String>, _>(i))
                            .collect()
                    })
                    .collect()
            }
            Pool::My(p) => {
                let rows = sqlx::query(sql)
                    .fetch_all(p)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.iter()
                    .map(|r| {
                        (0..r.len())
                            .map(|i| r.get::<Option<String>, _>(i))
                            .collect()
                    })
                    .collect()
            }
        }
    }

    /// The text cast this engine spells.
    pub fn text(&self, expr: &str) -> String {
        match self.engine {
            Engine::Postgres => format!("({expr})::text"),
            Engine::Mysql => format!("CAST({expr} AS CHAR)"),
        }
    }

    pub async fn count(&self, table: &str) -> i64 {
        let sql = format!(
            "SELECT {} FROM {}",
            self.text("count(*)"),
            self.table(table)
        );
        self.rows(&sql).await[0][0]
            .as_deref()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Column `col` of every row, ordered by `id`, as text.
    pub async fn column(&self, table: &str, col: &str) -> Vec<Option<String>> {
        let q = |c: &str| match self.engine {
            Engine::Postgres => format!("\"{c}\""),
            Engine::Mysql => format!("`{c}`"),
        };
        // `+ 0`: PostgreSQL would sort by an output column named id (text)
        let sql = format!(
            "SELECT {} FROM {} ORDER BY {} + 0",
            self.text(&q(col)),
            self.table(table),
            q("id")
        );
        self.rows(&sql)
            .await
            .into_iter()
            .map(|mut r| r.remove(0))
            .collect()
    }

    pub async fn drop(self) {
        let sql = match self.engine {
            Engine::Postgres => format!("DROP SCHEMA {} CASCADE", self.name),
            Engine::Mysql => format!("DROP DATABASE {}", self.name),
        };
        self.exec(&sql).await;
    }
}

/// The destination a config text of one stream and one destination names.
pub fn build(text: &str) -> Arc<dyn Destination> {
    let c = Config::parse(text, "test.toml").unwrap();
    let d = c.streams[0].get_ref().destinations[0].get_ref().clone();
    abrq_sinks::build("orders", &d).unwrap()
}

pub fn record(op: Op, v: Value) -> Item {
    match v {
        Value::Object(fields) => Item::Record(Record { op, fields }),
        _ => panic!("records are objects"),
    }
}

pub fn insert(v: Value) -> Item {
    record(Op::Insert, v)
}

/// A batch of stream "orders" with its real idempotency key.
pub fn batch(seq: u64, items: Vec<Item>) -> Batch {
    let records = items.iter().filter(|i| i.as_record().is_some()).count() as u64;
    Batch {
        meta: BatchMeta {
            stream: "orders".into(),
            seq,
            idempotency_key: idempotency_key(uuid::Uuid::from_u128(0xabc), seq, uuid::Uuid::nil()),
            staged_at: Utc::now(),
            records,
            bytes: 0,
        },
        items,
        lines: None,
    }
}

/// Runs the same test body against both engines.
#[macro_export]
macro_rules! both_engines {
    ($name:ident) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(Engine::Postgres).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                super::$name(Engine::Mysql).await;
            }
        }
    };
}
