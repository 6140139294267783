//! The typed shape of `abrq.toml`. Unknown keys are refused everywhere.

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::values::{Dur, Secret, Size, Text};

#[derive(Debug, Clone, Deserialize, Serialize)]
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

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// `sqlite://PATH`; unset means `{data_dir}/state.db`.
    pub url: Option<Text>,
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

#[derive(Debug, Clone, Deserialize, Serialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    Ndjson,
    Csv,
}

/// What R, pandas, PostgreSQL and MySQL exports write for a missing value:
/// an empty cell, R's `NA`, `N/A`, `NULL` and `null`, PostgreSQL's and
/// MySQL's `\N`, `NaN` and spreadsheets' `#N/A`.
pub const DEFAULT_NULL_VALUES: &[&str] = &["", "NA", "N/A", "NULL", "null", "\\N", "NaN", "#N/A"];

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub engine: SourceEngine,
    // connection fields
    pub host: Option<Text>,
    pub port: Option<u16>,
    pub database: Option<Text>,
    pub username: Option<Text>,
    pub password: Option<Secret>,
    // file
    pub path: Option<Text>,
    /// Defaults from the file extension (`.csv` is CSV, else NDJSON).
    pub format: Option<FileFormat>,
    #[serde(default)]
    pub follow: bool,
    /// CSV: unquoted cells that mean "no value"; unset means
    /// [`DEFAULT_NULL_VALUES`].
    pub null_values: Option<Vec<String>>,
    // generate
    pub records: Option<u64>,
    // http
    pub ingest_token: Option<Secret>,
    pub max_body: Option<Size>,
    // databases
    pub table: Option<Text>,
    pub cursor: Option<Text>,
    pub poll_interval: Option<Dur>,
    pub mode: Option<Text>,
}

impl SourceConfig {
    /// A file source's format: `format`, else from the extension (`.csv`
    /// is CSV, anything else NDJSON).
    pub fn file_format(&self) -> FileFormat {
        let path = self.path.as_ref().map(|p| p.as_str()).unwrap_or_default();
        let csv = std::path::Path::new(path)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        self.format.unwrap_or(if csv {
            FileFormat::Csv
        } else {
            FileFormat::Ndjson
        })
    }

    /// The CSV null markers in force: the configured ones or the default.
    pub fn null_values(&self) -> Vec<String> {
        match &self.null_values {
            Some(v) => v.clone(),
            None => DEFAULT_NULL_VALUES.iter().map(|s| s.to_string()).collect(),
        }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
pub enum ObjectFormat {
    #[serde(rename = "jsonl")]
    Jsonl,
    #[default]
    #[serde(rename = "jsonl.gz")]
    JsonlGz,
    #[serde(rename = "csv")]
    Csv,
    #[serde(rename = "csv.gz")]
    CsvGz,
    #[serde(rename = "parquet")]
    Parquet,
}

impl ObjectFormat {
    /// The file extension, which is also the config spelling.
    pub fn ext(self) -> &'static str {
        match self {
            ObjectFormat::Jsonl => "jsonl",
            ObjectFormat::JsonlGz => "jsonl.gz",
            ObjectFormat::Csv => "csv",
            ObjectFormat::CsvGz => "csv.gz",
            ObjectFormat::Parquet => "parquet",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnsPolicy {
    #[default]
    Evolve,
    DiscardValues,
    DiscardRows,
    Freeze,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaDrift {
    #[serde(default)]
    pub columns: ColumnsPolicy,
    #[serde(default)]
    pub types: TypesPolicy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncatePolicy {
    #[default]
    Apply,
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    #[default]
    Append,
    Upsert,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationConfig {
    pub name: Text,
    pub engine: DestinationEngine,
    #[serde(default = "yes")]
    pub enabled: bool,
    // connection fields, repurposed per engine (see the docs' table)
    pub host: Option<Text>,
    pub port: Option<u16>,
    pub database: Option<Text>,
    pub username: Option<Text>,
    pub password: Option<Secret>,
    // object and file destinations
    #[serde(default)]
    pub prefix: Text,
    #[serde(default)]
    pub format: ObjectFormat,
    #[serde(default)]
    pub date_partitioning: bool,
    /// Defaults to true for ftp and ftps, false elsewhere.
    pub manifest: Option<bool>,
    pub region: Option<Text>,
    // relational
    pub table: Option<Text>,
    pub schema: Option<Text>,
    #[serde(default)]
    pub schema_drift: SchemaDrift,
    #[serde(default)]
    pub truncate: TruncatePolicy,
    #[serde(default)]
    pub mode: WriteMode,
    /// Primary key of a table abrq creates (upsert mode matches on it).
    #[serde(default)]
    pub primary_key: Vec<Text>,
    // kafka
    pub partition_key: Option<Text>,
    /// `PLAIN` (default when `username` is set), `SCRAM-SHA-256` or
    /// `SCRAM-SHA-512`.
    pub sasl_mechanism: Option<Text>,
    // transport security
    #[serde(default)]
    pub tls: bool,
    pub tls_ca_file: Option<Text>,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub breaker: BreakerToml,
}

fn yes() -> bool {
    true
}

impl DestinationConfig {
    pub fn manifest_enabled(&self) -> bool {
        self.manifest.unwrap_or(matches!(
            self.engine,
            DestinationEngine::Ftp | DestinationEngine::Ftps
        ))
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
