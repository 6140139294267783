//! The `postgres` and `mysql` engines' config, validated without I/O, and
//! the connect options built from it. Connection fields: `host` the server
//! (127.0.0.1), `port` its port (5432, 3306), `database` the database,
//! `username` and `password` the login. Own keys: `table` (required; with
//! `{table}` in it, one target table per source table),
//! `schema`, `schema_drift`, `truncate`, `mode`, `primary_key`, `tls`,
//! `tls_ca_file`.

use std::path::PathBuf;
use std::time::Duration;

use abrq_core::config::{DestinationConfig, DestinationEngine, Text};
use abrq_endpoint::Endpoint;
use serde::Deserialize;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;

use super::types::Dialect;
use crate::keys::{invalid, Connection};

pub const CONNECTION: Connection = Connection {
    host: Some("server"),
    port: Some("port"),
    database: Some("database"),
    username: Some("user"),
    password: Some("password"),
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnsPolicy {
    #[default]
    Evolve,
    DiscardValues,
    DiscardRows,
    Freeze,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TypesPolicy {
    /// Widen a column for a value it cannot hold, up to text for text.
    #[default]
    Widen,
    /// Widen only within a kind, keeping every stored value exact.
    WidenStrict,
    DiscardValues,
    DiscardRows,
    Freeze,
}

/// What a column dropped in the source does to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DroppedColumnsPolicy {
    /// The column stays, with its values; new rows leave it null.
    #[default]
    Keep,
    /// The column is dropped too (never a key column).
    Drop,
}

/// `[streams.destinations.schema_drift]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaDrift {
    #[serde(default)]
    pub columns: ColumnsPolicy,
    #[serde(default)]
    pub types: TypesPolicy,
    #[serde(default)]
    pub dropped_columns: DroppedColumnsPolicy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncatePolicy {
    #[default]
    Apply,
    Ignore,
}

/// What a delete does to its row (upsert mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletePolicy {
    /// The row is deleted.
    #[default]
    Hard,
    /// The row stays, its `_abrq_deleted_at` set to when the delete was
    /// applied; written again, it is live again.
    Soft,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    #[default]
    Append,
    Upsert,
}

/// The keys only the relational engines have.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RelationalOptions {
    table: Text,
    schema: Option<Text>,
    #[serde(default)]
    schema_drift: SchemaDrift,
    #[serde(default)]
    truncate: TruncatePolicy,
    #[serde(default)]
    mode: WriteMode,
    #[serde(default)]
    deletes: DeletePolicy,
    /// Primary key of a table abrq creates (upsert mode matches on it).
    #[serde(default)]
    primary_key: Vec<Text>,
    #[serde(default)]
    tls: bool,
    tls_ca_file: Option<Text>,
}

/// Everything a postgres or mysql destination needs, checked. `Debug`
/// shows the password as `***` (it is a `Secret`).
#[derive(Debug, Clone)]
pub struct RelationalSettings {
    pub dialect: Dialect,
    /// The stream, for the ledger's `stream` column.
    pub stream: String,
    /// The destination's name in config.
    pub destination: String,
    /// The server (127.0.0.1), its port (5432, 3306), the database, the
    /// login and TLS.
    pub endpoint: Endpoint,
    pub table: String,
    /// PostgreSQL: the schema (default: the connection's current schema).
    /// MySQL: the database the table is in (default: `database`).
    pub schema: Option<String>,
    pub drift: SchemaDrift,
    pub truncate: TruncatePolicy,
    pub mode: WriteMode,
    pub deletes: DeletePolicy,
    /// The primary key abrq gives a table it creates (`primary_key`); an
    /// existing table's own primary key is always what upserts match on.
    pub key: Vec<String>,
    /// How long to wait for a connection before the attempt fails.
    pub connect_timeout: Duration,
}

/// `template` with the source table's name and schema filled in.
fn render(template: &str, table: &str, schema: &str) -> String {
    template
        .replace("{table}", table)
        .replace("{schema}", schema)
}

impl RelationalSettings {
    /// Whether `table` names the target after each source table.
    pub fn per_table(&self) -> bool {
        self.table.contains("{table}") || self.table.contains("{schema}")
    }

    /// The target table for items of `source` (`None`: a source without
    /// tables, such as a file).
    pub fn target(&self, source: Option<&abrq_core::TableRef>) -> Result<String, String> {
        if !self.per_table() {
            return Ok(self.table.clone());
        }
        let Some(t) = source else {
            return Err(format!(
                "table {:?} names the source table, but this batch's records have none \
                 (only database sources say their table)",
                self.table
            ));
        };
        let name = render(
            &self.table,
            &t.name,
            t.schema.as_deref().unwrap_or_default(),
        );
        match self.dialect.invalid_name(&name) {
            None => Ok(name),
            Some(why) => Err(format!("table {name:?} for source table {t}: {why}")),
        }
    }

    pub fn from_config(stream: &str, cfg: &DestinationConfig) -> Result<Self, String> {
        let dialect = match cfg.engine {
            DestinationEngine::Postgres => Dialect::Postgres,
            DestinationEngine::Mysql => Dialect::Mysql,
            other => return Err(format!("engine {} is not relational", other.as_str())),
        };
        let own: RelationalOptions = cfg.options.parse()?;
        let text = |t: &Option<Text>| {
            t.as_ref()
                .map(|t| t.as_str().to_string())
                .filter(|s| !s.is_empty())
        };
        let table = own.table.as_str().to_string();
        if table.is_empty() {
            return Err(invalid(cfg, "table", "table is required"));
        }
        if let Some(why) = dialect.invalid_name(&render(&table, "t", "s")) {
            return Err(invalid(cfg, "table", format!("table: {why}")));
        }
        let schema = text(&own.schema);
        if let Some(why) = schema.as_deref().and_then(|s| dialect.invalid_name(s)) {
            return Err(invalid(cfg, "schema", format!("schema: {why}")));
        }
        let database = text(&cfg.database);
        if dialect == Dialect::Mysql && database.is_none() && schema.is_none() {
            return Err(invalid(
                cfg,
                "database",
                "database is required for engine mysql (or schema)",
            ));
        }
        if own.deletes == DeletePolicy::Soft && own.mode != WriteMode::Upsert {
            return Err(invalid(
                cfg,
                "deletes",
                "deletes = \"soft\" applies to mode = \"upsert\" (an appended table keeps every record already)",
            ));
        }
        Ok(RelationalSettings {
            dialect,
            stream: stream.to_string(),
            destination: cfg.name.as_str().to_string(),
            endpoint: Endpoint {
                host: text(&cfg.host).unwrap_or_else(|| "127.0.0.1".into()),
                port: cfg.port.unwrap_or(match dialect {
                    Dialect::Postgres => 5432,
                    Dialect::Mysql => 3306,
                }),
                database,
                username: text(&cfg.username),
                password: cfg.password.clone().filter(|p| !p.is_empty()),
                tls: own.tls,
                tls_ca_file: own.tls_ca_file.as_ref().map(|p| PathBuf::from(p.as_str())),
            },
            table,
            schema,
            drift: own.schema_drift,
            truncate: own.truncate,
            mode: own.mode,
            deletes: own.deletes,
            key: own.primary_key.iter().map(|k| k.0.clone()).collect(),
            connect_timeout: Duration::from_secs(10),
        })
    }

    /// The server's options, the connection named `abrq` on the server.
    pub fn pg_options(&self) -> PgConnectOptions {
        self.endpoint.postgres("abrq")
    }

    /// The server's options, with the session settings rows are written
    /// under.
    /// No default database: every statement names its database, so one
    /// that does not exist yet is created on the same connections.
    pub fn mysql_options(&self) -> MySqlConnectOptions {
        let mut endpoint = self.endpoint.clone();
        endpoint.database = None;
        endpoint
            .mysql()
            .charset("utf8mb4")
            // instants are stored as UTC datetimes
            .timezone(Some("+00:00".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::config::Config;
    use sqlx::mysql::MySqlSslMode;
    use sqlx::postgres::PgSslMode;

    fn dest(engine: &str, extra: &str) -> DestinationConfig {
        Config::destination("db", &format!("engine = \"{engine}\"\n{extra}")).unwrap()
    }

    #[test]
    fn defaults_and_secret_hidden() {
        let s = RelationalSettings::from_config(
            "orders",
            &dest(
                "postgres",
                "table = \"t\"\npassword = \"hunter2\"\nusername = \"u\"",
            ),
        )
        .unwrap();
        assert_eq!(
            (s.endpoint.host.as_str(), s.endpoint.port),
            ("127.0.0.1", 5432)
        );
        assert!(!format!("{s:?}").contains("hunter2"));
        assert!(format!("{s:?}").contains("***"));
        assert!(!s.endpoint.to_string().contains("hunter2"));
        assert!(matches!(s.pg_options().get_ssl_mode(), PgSslMode::Disable));
        let m = RelationalSettings::from_config(
            "orders",
            &dest("mysql", "table = \"t\"\ndatabase = \"d\"\ntls = true"),
        )
        .unwrap();
        assert_eq!(m.endpoint.port, 3306);
        assert!(matches!(
            m.mysql_options().get_ssl_mode(),
            MySqlSslMode::VerifyIdentity
        ));
    }

    #[test]
    fn a_ca_file_turns_verified_tls_on() {
        let s = RelationalSettings::from_config(
            "orders",
            &dest("postgres", "table = \"t\"\ntls_ca_file = \"/ca.pem\""),
        )
        .unwrap();
        assert!(matches!(
            s.pg_options().get_ssl_mode(),
            PgSslMode::VerifyFull
        ));
    }

    #[test]
    fn refuses_bad_names_and_missing_database() {
        let e = RelationalSettings::from_config(
            "orders",
            &dest("postgres", &format!("table = \"{}\"", "x".repeat(70))),
        )
        .unwrap_err();
        assert!(e.contains("table"), "{e}");
        let e =
            RelationalSettings::from_config("orders", &dest("mysql", "table = \"t\"")).unwrap_err();
        assert!(e.contains("database"), "{e}");
    }
}
