//! The typed shape of `abrq.toml`. Unknown keys are refused everywhere:
//! here for the keys core knows, and by each engine's own config for the
//! rest of a source's or destination's table (see `options.rs`).

use std::fmt;

use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

use super::options::Options;
use super::values::{Dur, Secret, Size, Text};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_data_dir")]
    pub data_dir: Text,
    #[serde(default)]
    pub state: StateConfig,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub spool: SpoolConfig,
    #[serde(default)]
    pub streams: Vec<Spanned<StreamConfig>>,
}

fn default_data_dir() -> Text {
    Text("./abrq-data".into())
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// `sqlite://PATH` or `postgres://...`; unset means
    /// `{data_dir}/state.db`.
    pub url: Option<Text>,
    /// This process's name among the processes sharing PostgreSQL state;
    /// unset means `{hostname}-{pid}`. Only a label: two processes with
    /// the same name still hold leases apart.
    pub node_id: Option<Text>,
    /// A process that stops renewing loses its leases after this long and
    /// another takes its work over.
    #[serde(default = "default_lease_timeout")]
    pub lease_timeout: Dur,
    /// How often a process renews its leases and looks for work; unset
    /// means a third of `lease_timeout`.
    pub heartbeat: Option<Dur>,
    /// Lets a PostgreSQL state connection off loopback go without TLS
    /// (`sslmode=disable`, `allow` or `prefer`).
    #[serde(default)]
    pub allow_plaintext: bool,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            url: None,
            node_id: None,
            lease_timeout: default_lease_timeout(),
            heartbeat: None,
            allow_plaintext: false,
        }
    }
}

impl StateConfig {
    pub fn heartbeat(&self) -> std::time::Duration {
        match &self.heartbeat {
            Some(d) => d.0,
            None => self.lease_timeout.0 / 3,
        }
    }
}

fn default_lease_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    #[serde(default = "default_listen")]
    pub listen: Text,
    pub admin_token: Option<Secret>,
    /// Ingest requests staged at once; more are answered 503 + Retry-After,
    /// so a burst of large bodies cannot exhaust memory.
    #[serde(default = "default_max_ingest_requests")]
    pub max_ingest_requests: usize,
    /// How long an ingest Idempotency-Key is remembered.
    #[serde(default = "default_idempotency_window")]
    pub idempotency_window: Dur,
    /// A new connection must finish its TLS handshake and send a whole
    /// request head within this long; so must a request once its first
    /// byte arrives on a kept-alive connection.
    #[serde(default = "default_header_timeout")]
    pub header_timeout: Dur,
    /// A kept-alive connection idle this long between requests is closed.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: Dur,
    /// A request body must arrive whole within this long of its head (408).
    #[serde(default = "default_body_timeout")]
    pub body_timeout: Dur,
    /// Connections held at once; more are closed as soon as accepted.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// PEM certificate chain and private key: the listener speaks HTTPS.
    pub tls_cert: Option<Text>,
    pub tls_key: Option<Text>,
    /// Lets a listener off loopback speak plain HTTP.
    #[serde(default)]
    pub allow_plaintext: bool,
    /// When set, only these Host names (a name alone matches any port)
    /// and the loopback names are served, probes included: a page that
    /// rebinds its DNS name to this server reads nothing.
    #[serde(default)]
    pub allowed_hosts: Vec<Text>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            admin_token: None,
            max_ingest_requests: default_max_ingest_requests(),
            idempotency_window: default_idempotency_window(),
            header_timeout: default_header_timeout(),
            idle_timeout: default_idle_timeout(),
            body_timeout: default_body_timeout(),
            max_connections: default_max_connections(),
            tls_cert: None,
            tls_key: None,
            allow_plaintext: false,
            allowed_hosts: Vec::new(),
        }
    }
}

fn default_max_ingest_requests() -> usize {
    4
}

fn default_idempotency_window() -> Dur {
    Dur(std::time::Duration::from_secs(24 * 3600))
}

fn default_header_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}

fn default_idle_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}

fn default_body_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}

fn default_max_connections() -> usize {
    1024
}

fn default_listen() -> Text {
    Text("127.0.0.1:8480".into())
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpoolConfig {
    /// Staging pauses (backpressure) while the spool holds this much.
    #[serde(default = "default_spool_max")]
    pub max_bytes: Size,
    /// How often the spool GC runs.
    #[serde(default = "default_gc_interval")]
    pub gc_interval: Dur,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        SpoolConfig {
            max_bytes: default_spool_max(),
            gc_interval: default_gc_interval(),
        }
    }
}

fn default_spool_max() -> Size {
    Size(10 << 30)
}

fn default_gc_interval() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    pub name: Text,
    pub source: Spanned<SourceConfig>,
    #[serde(default)]
    pub batch: BatchConfig,
    #[serde(default)]
    pub destinations: Vec<Spanned<DestinationConfig>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceEngine {
    File,
    /// Synthetic records, for the quickstart and benchmarks.
    Generate,
    Http,
    Postgres,
    Mysql,
}

impl SourceEngine {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceEngine::File => "file",
            SourceEngine::Generate => "generate",
            SourceEngine::Http => "http",
            SourceEngine::Postgres => "postgres",
            SourceEngine::Mysql => "mysql",
        }
    }

    /// Whether abrq reads the source itself (a source task stages what it
    /// reads), or its records are sent to the server (HTTP ingest: every
    /// process stages what it is sent, and no process holds the source).
    pub fn pulled(self) -> bool {
        match self {
            SourceEngine::File
            | SourceEngine::Generate
            | SourceEngine::Postgres
            | SourceEngine::Mysql => true,
            SourceEngine::Http => false,
        }
    }
}

/// `[streams.source]`: the engine, and its own keys (read by the source's
/// config in `abrq-sources`).
#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub engine: SourceEngine,
    pub options: Options,
    /// The table's line in the file (1-based).
    pub line: usize,
}

impl<'de> Deserialize<'de> for SourceConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Table;
        impl<'de> Visitor<'de> for Table {
            type Value = SourceConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a source table")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SourceConfig, A::Error> {
                let mut engine = None;
                let mut options = Options::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "engine" => engine = Some(map.next_value()?),
                        _ => options.insert(key, map.next_value()?),
                    }
                }
                Ok(SourceConfig {
                    engine: engine.ok_or_else(|| A::Error::missing_field("engine"))?,
                    options,
                    line: 0,
                })
            }
        }
        d.deserialize_map(Table)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    #[serde(default = "default_max_records")]
    pub max_records: u64,
    #[serde(default = "default_max_batch_bytes")]
    pub max_bytes: Size,
    #[serde(default = "default_max_wait")]
    pub max_wait: Dur,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_records: default_max_records(),
            max_bytes: default_max_batch_bytes(),
            max_wait: default_max_wait(),
        }
    }
}

fn default_max_records() -> u64 {
    1000
}

fn default_max_batch_bytes() -> Size {
    Size(4 << 20)
}

fn default_max_wait() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DestinationEngine {
    Local,
    S3,
    AzureBlob,
    Gcs,
    Ftp,
    Ftps,
    Kafka,
    Postgres,
    Mysql,
}

impl DestinationEngine {
    pub fn as_str(self) -> &'static str {
        match self {
            DestinationEngine::Local => "local",
            DestinationEngine::S3 => "s3",
            DestinationEngine::AzureBlob => "azure_blob",
            DestinationEngine::Gcs => "gcs",
            DestinationEngine::Ftp => "ftp",
            DestinationEngine::Ftps => "ftps",
            DestinationEngine::Kafka => "kafka",
            DestinationEngine::Postgres => "postgres",
            DestinationEngine::Mysql => "mysql",
        }
    }
}

/// A destination's table: what every engine has (the five connection
/// fields among it, repurposed per engine as README's table says), and the
/// engine's own keys (read by the engine's config in `abrq-sinks`).
#[derive(Debug, Clone)]
pub struct DestinationConfig {
    pub name: Text,
    pub engine: DestinationEngine,
    pub enabled: bool,
    pub host: Option<Text>,
    pub port: Option<u16>,
    pub database: Option<Text>,
    pub username: Option<Text>,
    pub password: Option<Secret>,
    pub retry: RetryConfig,
    pub breaker: BreakerToml,
    pub options: Options,
    /// The table's line in the file (1-based).
    pub line: usize,
    /// The stream's source, for a destination that names it in what it
    /// writes (Kafka's Debezium envelope); set once the file is parsed.
    pub source: SourceOrigin,
}

/// What a destination may know of its stream's source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceOrigin {
    pub engine: Option<SourceEngine>,
    /// The source's `database` key, when it has one.
    pub database: Option<String>,
}

impl<'de> Deserialize<'de> for DestinationConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Table;
        impl<'de> Visitor<'de> for Table {
            type Value = DestinationConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a destination table")
            }

            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<DestinationConfig, A::Error> {
                let (mut name, mut engine) = (None, None);
                let mut enabled = true;
                let (mut host, mut port, mut database) = (None, None, None);
                let (mut username, mut password) = (None, None);
                let (mut retry, mut breaker) = (RetryConfig::default(), BreakerToml::default());
                let mut options = Options::default();
                // each known key typed here, so toml's own error names its
                // line; the others kept for the engine
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "name" => name = Some(map.next_value()?),
                        "engine" => engine = Some(map.next_value()?),
                        "enabled" => enabled = map.next_value()?,
                        "host" => host = Some(map.next_value()?),
                        "port" => port = Some(map.next_value()?),
                        "database" => database = Some(map.next_value()?),
                        "username" => username = Some(map.next_value()?),
                        "password" => password = Some(map.next_value()?),
                        "retry" => retry = map.next_value()?,
                        "breaker" => breaker = map.next_value()?,
                        _ => options.insert(key, map.next_value()?),
                    }
                }
                Ok(DestinationConfig {
                    name: name.ok_or_else(|| A::Error::missing_field("name"))?,
                    engine: engine.ok_or_else(|| A::Error::missing_field("engine"))?,
                    enabled,
                    host,
                    port,
                    database,
                    username,
                    password,
                    retry,
                    breaker,
                    options,
                    line: 0,
                    source: SourceOrigin::default(),
                })
            }
        }
        d.deserialize_map(Table)
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "default_initial_backoff")]
    pub initial_backoff: Dur,
    #[serde(default = "default_max_backoff")]
    pub max_backoff: Dur,
    #[serde(default = "default_attempt_timeout")]
    pub attempt_timeout: Dur,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: default_max_attempts(),
            initial_backoff: default_initial_backoff(),
            max_backoff: default_max_backoff(),
            attempt_timeout: default_attempt_timeout(),
        }
    }
}

impl From<RetryConfig> for crate::RetryPolicy {
    fn from(c: RetryConfig) -> Self {
        crate::RetryPolicy {
            max_attempts: c.max_attempts.max(1),
            initial_backoff: c.initial_backoff.0,
            max_backoff: c.max_backoff.0,
            attempt_timeout: c.attempt_timeout.0,
        }
    }
}

fn default_max_attempts() -> u32 {
    10
}
fn default_initial_backoff() -> Dur {
    Dur(std::time::Duration::from_millis(500))
}
fn default_max_backoff() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}
fn default_attempt_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerToml {
    #[serde(default = "default_threshold")]
    pub failure_threshold: u32,
    #[serde(default = "default_cooldown")]
    pub cooldown: Dur,
}

impl Default for BreakerToml {
    fn default() -> Self {
        BreakerToml {
            failure_threshold: default_threshold(),
            cooldown: default_cooldown(),
        }
    }
}

impl From<BreakerToml> for crate::BreakerConfig {
    fn from(c: BreakerToml) -> Self {
        crate::BreakerConfig {
            failure_threshold: c.failure_threshold.max(1),
            cooldown: c.cooldown.0,
        }
    }
}

fn default_threshold() -> u32 {
    5
}
fn default_cooldown() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}
