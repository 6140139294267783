//! Every destination kind read back the way a consumer reads it, straight
//! from the service (never through a test's proxy), for the checks of the
//! end-to-end tests:
//!
//! - objects and files (local, s3, azure_blob, gcs, ftp, ftps) into a
//!   [`DestOutput`], the same shape as a local destination's tree, so
//!   manifests can be checked the same way everywhere;
//! - Kafka messages up to the end of every partition, in offset order;
//! - PostgreSQL and MySQL rows as JSON objects;
//! - a destination's dead letters with their records.
//!
//! [`Found`] is the common form `oracle.rs` reconciles against what was
//! appended: each record with the key under which a second copy is the same
//! delivery seen again.

use std::collections::{BTreeMap, HashMap};
use std::io::{Seek, Write};
use std::time::Duration;

use abrq_sinks::ftp::suppaftp;
use abrq_sinks::kafka::rdkafka;
use abrq_sinks::relational::sqlx::{self, Row};
use abrq_testkit::{Azure, Ftp, Ftps, Gcs, S3};
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::{ObjectStore, ObjectStoreExt};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::{Map, Value};
use suppaftp::tokio::{AsyncRustlsConnector, AsyncRustlsFtpStream};
use suppaftp::tokio_rustls::rustls::{self, ClientConfig as TlsConfig, RootCertStore};
use suppaftp::tokio_rustls::TlsConnector;
use tokio::io::AsyncReadExt;

use super::{is_temp_name, Abrq, DestOutput, Format, LONG};

/// How the cells of a found record relate to the JSON that was appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cells {
    /// The JSON values themselves (JSONL, Kafka, relational rows).
    Json,
    /// Every cell text, by the CSV encoder's rules (see `csv_cells`).
    Text,
    /// Typed columns; a text column holds other values as CSV cells, a
    /// date or timestamp column the same day or instant (parquet's rules).
    Typed,
}

/// One record as a destination holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// Copies with the same key are one delivery seen more than once:
    /// objects `{object key}#{row}` (a redelivered batch overwrites its
    /// own object, so the store never shows two), Kafka the
    /// `abrq_idempotency_key` header. None where a second copy is always a
    /// duplicate (relational rows: the ledger must prevent it).
    pub key: Option<String>,
    pub record: Map<String, Value>,
    pub cells: Cells,
}

// ---- objects and files ----

/// The records of every final-named object, keyed by object and row.
pub fn found_in_objects(out: &DestOutput) -> Vec<Found> {
    let mut found = Vec::new();
    for (key, o) in &out.objects {
        let cells = match o.format {
            Format::Jsonl | Format::JsonlGz => Cells::Json,
            Format::Csv | Format::CsvGz => Cells::Text,
            Format::Parquet => Cells::Typed,
        };
        for (row, record) in o.records.iter().enumerate() {
            found.push(Found {
                key: Some(format!("{key}#{row}")),
                record: record.clone(),
                cells,
            });
        }
    }
    found
}

pub fn s3_store(s3: &S3, bucket: &str) -> object_store::aws::AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(&s3.endpoint)
        .with_allow_http(true)
        .with_region(&s3.region)
        .with_bucket_name(bucket)
        .with_access_key_id(&s3.access_key_id)
        .with_secret_access_key(s3.secret_access_key.expose())
        .build()
        .expect("s3 store")
}

pub fn azure_store(azure: &Azure, container: &str) -> object_store::azure::MicrosoftAzure {
    MicrosoftAzureBuilder::new()
        .with_endpoint(azure.endpoint.clone())
        .with_account(&azure.account)
        .with_access_key(azure.key.expose())
        .with_container_name(container)
        .with_allow_http(true)
        .build()
        .expect("azure store")
}

/// Everything in an S3 bucket.
pub async fn s3(s3: &S3, bucket: &str) -> DestOutput {
    read_store(&s3_store(s3, bucket)).await
}

/// Everything in an Azure Blob container.
pub async fn azure(azure: &Azure, container: &str) -> DestOutput {
    read_store(&azure_store(azure, container)).await
}

/// Every key in `store`.
pub async fn list_store(store: &dyn ObjectStore) -> Vec<String> {
    let mut keys: Vec<String> = store
        .list(None)
        .map_ok(|o| o.location.to_string())
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("list {store}: {e}"));
    keys.sort();
    keys
}

async fn read_store(store: &dyn ObjectStore) -> DestOutput {
    let keys = list_store(store).await;
    let bodies: Vec<(String, Option<Vec<u8>>)> = futures::stream::iter(keys)
        .map(|key| async move {
            if is_temp_name(&key) {
                return (key, None);
            }
            let path = object_store::path::Path::from(key.as_str());
            let body = store
                .get(&path)
                .await
                .unwrap_or_else(|e| panic!("get {key}: {e}"))
                .bytes()
                .await
                .unwrap_or_else(|e| panic!("read {key}: {e}"));
            (key, Some(body.to_vec()))
        })
        .buffer_unordered(8)
        .collect()
        .await;
    collect(bodies)
}

fn collect(bodies: Vec<(String, Option<Vec<u8>>)>) -> DestOutput {
    let mut out = DestOutput::default();
    for (key, body) in bodies {
        match body {
            Some(raw) => out.add(key, raw),
            None => out.temp_files.push(key),
        }
    }
    out.temp_files.sort();
    out.other.sort();
    out
}

/// Everything in a GCS bucket, through the JSON API (what the emulator
/// and the destination speak).
pub async fn gcs(gcs: &Gcs, bucket: &str) -> DestOutput {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client");
    let base = gcs.endpoint.trim_end_matches('/');
    let mut keys = Vec::new();
    let mut page: Option<String> = None;
    loop {
        let mut req = http.get(format!("{base}/storage/v1/b/{bucket}/o"));
        if let Some(p) = &page {
            req = req.query(&[("pageToken", p)]);
        }
        let listing: Value = req
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("list gcs bucket {bucket}: {e}"))
            .json()
            .await
            .expect("a JSON listing");
        for item in listing["items"].as_array().into_iter().flatten() {
            keys.push(item["name"].as_str().expect("an object name").to_string());
        }
        match listing["nextPageToken"].as_str() {
            Some(p) if !p.is_empty() => page = Some(p.to_string()),
            _ => break,
        }
    }
    let http = &http;
    let bodies = futures::stream::iter(keys)
        .map(|key| async move {
            if is_temp_name(&key) {
                return (key, None);
            }
            let mut url = reqwest::Url::parse(&format!("{base}/storage/v1/b/{bucket}/o"))
                .expect("gcs endpoint url");
            // one segment: a '/' in the name is escaped, as the API wants
            url.path_segments_mut().expect("a base url").push(&key);
            url.set_query(Some("alt=media"));
            let body = http
                .get(url)
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .unwrap_or_else(|e| panic!("get gcs object {key}: {e}"))
                .bytes()
                .await
                .unwrap_or_else(|e| panic!("read gcs object {key}: {e}"));
            (key, Some(body.to_vec()))
        })
        .buffer_unordered(8)
        .collect()
        .await;
    collect(bodies)
}

type FtpSession = AsyncRustlsFtpStream;

async fn ftp_login(addr: &str, user: &str, password: &str, tls: Option<&Ftps>) -> FtpSession {
    let plain = tokio::time::timeout(Duration::from_secs(10), FtpSession::connect(addr))
        .await
        .unwrap_or_else(|_| panic!("ftp at {addr} timed out"))
        .unwrap_or_else(|e| panic!("ftp at {addr} is unreachable: {e}"));
    let mut session = match tls {
        None => plain,
        Some(ftps) => plain
            .into_secure(ftps_connector(ftps), ftps.tls_domain())
            .await
            .unwrap_or_else(|e| panic!("ftps handshake with {addr}: {e}")),
    };
    session.login(user, password).await.expect("ftp login");
    session
        .transfer_type(suppaftp::types::FileType::Binary)
        .await
        .expect("binary mode");
    session
}

fn ftps_connector(ftps: &Ftps) -> AsyncRustlsConnector {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let pem = std::fs::read(&ftps.ca_file)
        .unwrap_or_else(|e| panic!("read {}: {e}", ftps.ca_file.display()));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("a pem certificate")).expect("a root");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = TlsConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    AsyncRustlsConnector::from(TlsConnector::from(std::sync::Arc::new(config)))
}

/// Every file below `dir` on the plain FTP server.
pub async fn ftp(ftp: &Ftp, dir: &str) -> DestOutput {
    let mut s = ftp_login(&ftp.addr(), &ftp.user, ftp.password.expose(), None).await;
    read_ftp_tree(&mut s, dir).await
}

/// Every file below `dir` on the FTPS server.
pub async fn ftps(ftps: &Ftps, dir: &str) -> DestOutput {
    let f = &ftps.ftp;
    let mut s = ftp_login(&ftps.addr(), &f.user, f.password.expose(), Some(ftps)).await;
    read_ftp_tree(&mut s, dir).await
}

/// (path, is a directory) of the entries of `dir`; empty when it does not
/// exist (nothing was ever delivered there).
async fn ftp_entries(s: &mut FtpSession, dir: &str) -> Vec<(String, bool)> {
    let Ok(lines) = s.mlsd(Some(dir)).await else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    for line in lines {
        let f = suppaftp::list::ListParser::parse_mlsd(&line)
            .unwrap_or_else(|e| panic!("MLSD line {line:?}: {e}"));
        if f.name() == "." || f.name() == ".." {
            continue;
        }
        entries.push((format!("{dir}/{}", f.name()), f.is_directory()));
    }
    entries.sort();
    entries
}

async fn read_ftp_tree(s: &mut FtpSession, root: &str) -> DestOutput {
    let root = format!("/{}", root.trim_matches('/'));
    let mut bodies = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for (path, is_dir) in ftp_entries(s, &dir).await {
            if is_dir {
                dirs.push(path);
                continue;
            }
            let rel = path[root.len() + 1..].to_string();
            if is_temp_name(&rel) {
                bodies.push((rel, None));
                continue;
            }
            let mut stream = s
                .retr_as_stream(&path)
                .await
                .unwrap_or_else(|e| panic!("RETR {path}: {e}"));
            let mut body = Vec::new();
            stream
                .read_to_end(&mut body)
                .await
                .unwrap_or_else(|e| panic!("download {path}: {e}"));
            stream
                .finish()
                .await
                .unwrap_or_else(|e| panic!("finish download of {path}: {e}"));
            bodies.push((rel, Some(body)));
        }
    }
    let _ = s.quit().await;
    collect(bodies)
}

/// Removes `dir` and everything below it from an FTP or FTPS server
/// (cleanup: a missing directory is fine).
pub async fn ftp_remove_tree(ftp: &Ftp, ftps: Option<&Ftps>, dir: &str) {
    let addr = ftps.map_or_else(|| ftp.addr(), |f| f.addr());
    let mut s = ftp_login(&addr, &ftp.user, ftp.password.expose(), ftps).await;
    let root = format!("/{}", dir.trim_matches('/'));
    let mut order = vec![root.clone()];
    let mut i = 0;
    while i < order.len() {
        let d = order[i].clone();
        for (path, is_dir) in ftp_entries(&mut s, &d).await {
            if is_dir {
                order.push(path);
            } else {
                let _ = s.rm(&path).await;
            }
        }
        i += 1;
    }
    for d in order.iter().rev() {
        let _ = s.rmdir(d).await;
    }
    let _ = s.quit().await;
}

/// A parquet object's rows: int64, float64 and boolean columns as JSON
/// numbers and booleans, utf8 as strings, date32 as `YYYY-MM-DD` and
/// timestamps as RFC 3339 in UTC (compare those with [`same_instant`]),
/// nulls left out.
pub fn parquet_rows(rel: &str, raw: &[u8]) -> Vec<Map<String, Value>> {
    use arrow_array::{
        Array, BooleanArray, Date32Array, Float64Array, Int64Array, StringArray,
        TimestampMicrosecondArray,
    };
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let mut file = tempfile::tempfile().expect("a temp file");
    file.write_all(raw).expect("write the temp file");
    file.rewind().expect("rewind the temp file");
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap_or_else(|e| panic!("{rel}: not a complete parquet file: {e}"))
        .build()
        .unwrap_or_else(|e| panic!("{rel}: parquet reader: {e}"));
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.unwrap_or_else(|e| panic!("{rel}: bad parquet row group: {e}"));
        let schema = batch.schema();
        let start = rows.len();
        rows.resize(start + batch.num_rows(), Map::new());
        for (field, col) in schema.fields().iter().zip(batch.columns()) {
            let any = col.as_any();
            for (i, row) in rows[start..].iter_mut().enumerate() {
                if col.is_null(i) {
                    continue;
                }
                let v = if let Some(a) = any.downcast_ref::<Int64Array>() {
                    Value::from(a.value(i))
                } else if let Some(a) = any.downcast_ref::<Float64Array>() {
                    Value::from(a.value(i))
                } else if let Some(a) = any.downcast_ref::<BooleanArray>() {
                    Value::from(a.value(i))
                } else if let Some(a) = any.downcast_ref::<StringArray>() {
                    Value::from(a.value(i))
                } else if let Some(a) = any.downcast_ref::<Date32Array>() {
                    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("a date");
                    let day = epoch + chrono::TimeDelta::days(a.value(i).into());
                    Value::from(day.format("%Y-%m-%d").to_string())
                } else if let Some(a) = any.downcast_ref::<TimestampMicrosecondArray>() {
                    let at = chrono::DateTime::from_timestamp_micros(a.value(i))
                        .unwrap_or_else(|| panic!("{rel}: timestamp out of range"));
                    Value::from(at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
                } else {
                    panic!("{rel}: column {} of unexpected type", field.name())
                };
                row.insert(field.name().clone(), v);
            }
        }
    }
    rows
}

/// Whether two strings name the same day or the same instant (an instant
/// without a zone is UTC), as parquet stores them.
pub fn same_instant(a: &str, b: &str) -> bool {
    fn parse(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
            return Some(d.and_hms_opt(0, 0, 0)?.and_utc());
        }
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
            return Some(t.to_utc());
        }
        ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())
            .map(|t| t.and_utc())
    }
    matches!((parse(a), parse(b)), (Some(x), Some(y)) if x == y)
}

// ---- kafka ----

/// One message as a consumer reads it.
#[derive(Debug, Clone)]
pub struct KafkaMessage {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    /// The `abrq_idempotency_key` header: `{batch key}:{index}`.
    pub idempotency_key: Option<String>,
    /// Every header, by name.
    pub headers: BTreeMap<String, String>,
    /// Empty for a tombstone (no value at all).
    pub value: Map<String, Value>,
    pub tombstone: bool,
}

/// A fresh topic of `partitions` partitions on `brokers`.
pub async fn create_topic(brokers: &str, prefix: &str, partitions: i32) -> String {
    let topic = abrq_testkit::names::topic(prefix);
    create_named_topic(brokers, &topic, partitions).await;
    topic
}

/// Creates the topic `topic` of `partitions` partitions on `brokers`.
pub async fn create_named_topic(brokers: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("kafka admin client");
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for r in admin
        .create_topics(&[new], &options)
        .await
        .expect("create topic")
    {
        r.unwrap_or_else(|(name, code)| panic!("create topic {name}: {code}"));
    }
}

/// Every message of `topic`, in offset order per partition: read from
/// the start of every partition up to its high watermark, then on until
/// none has come for a while. tansu's ListOffsets can answer short of the
/// last batch's end, so the watermark is only a floor.
pub async fn kafka(brokers: &str, topic: &str) -> Vec<KafkaMessage> {
    let (brokers, topic) = (brokers.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || read_topic(&brokers, &topic))
        .await
        .expect("kafka reader")
}

/// How long the topic must stay silent once every watermark is reached.
const KAFKA_IDLE: Duration = Duration::from_secs(3);

fn read_topic(brokers: &str, topic: &str) -> Vec<KafkaMessage> {
    let timeout = Duration::from_secs(20);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", abrq_testkit::names::topic("e2e-reader"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("kafka consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .unwrap_or_else(|e| panic!("metadata of {topic}: {e}"));
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .unwrap_or_else(|| panic!("no topic {topic}"))
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    // partition -> offset it must get past
    let mut floors: HashMap<i32, i64> = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for p in partitions {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, timeout)
            .unwrap_or_else(|e| panic!("watermarks of {topic}/{p}: {e}"));
        if high > 0 {
            floors.insert(p, high);
        }
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign partitions");
    let mut out = Vec::new();
    // A big topic takes long to read; only a reader that stops getting
    // messages short of the watermarks fails.
    let mut last = std::time::Instant::now();
    loop {
        if floors.is_empty() && last.elapsed() >= KAFKA_IDLE {
            break;
        }
        assert!(
            last.elapsed() < LONG,
            "{topic}: nothing more for {LONG:?} short of the watermarks: {floors:?}"
        );
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.unwrap_or_else(|e| panic!("consume {topic}: {e}"));
        last = std::time::Instant::now();
        let (p, offset) = (m.partition(), m.offset());
        if floors.get(&p).is_some_and(|&f| offset + 1 >= f) {
            floors.remove(&p);
        }
        let headers: BTreeMap<String, String> = m
            .headers()
            .map(|h| {
                h.iter()
                    .filter_map(|h| Some((h.key.to_string(), h.value?)))
                    .map(|(k, v)| (k, String::from_utf8_lossy(v).into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let tombstone = m.payload().is_none();
        let value = match m.payload().map(serde_json::from_slice) {
            None => Map::new(),
            Some(Ok(Value::Object(v))) => v,
            other => panic!("{topic}/{p}@{offset}: value is not a JSON object: {other:?}"),
        };
        out.push(KafkaMessage {
            partition: p,
            offset,
            key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
            idempotency_key: headers.get("abrq_idempotency_key").cloned(),
            headers,
            value,
            tombstone,
        });
    }
    out.sort_by_key(|m| (m.partition, m.offset));
    out
}

pub fn found_in_kafka(messages: &[KafkaMessage]) -> Vec<Found> {
    messages
        .iter()
        .map(|m| Found {
            key: m.idempotency_key.clone(),
            record: m.value.clone(),
            cells: Cells::Json,
        })
        .collect()
}

// ---- relational ----

/// Every row of `schema.table` as a JSON object (no rows when the table
/// was never created).
pub async fn postgres(url: &str, schema: &str, table: &str) -> Vec<Map<String, Value>> {
    let pool = sqlx::PgPool::connect(url).await.expect("postgres");
    let qualified = format!("\"{schema}\".\"{table}\"");
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(&qualified)
        .fetch_one(&pool)
        .await
        .expect("to_regclass");
    let mut rows = Vec::new();
    if exists.is_some() {
        let texts: Vec<String> =
            sqlx::query_scalar(&format!("SELECT to_jsonb(t)::text FROM {qualified} t"))
                .fetch_all(&pool)
                .await
                .unwrap_or_else(|e| panic!("read {qualified}: {e}"));
        rows = texts.iter().map(|t| json_object(t)).collect();
    }
    pool.close().await;
    rows
}

/// Every row of `database.table` as a JSON object (no rows when the table
/// was never created).
pub async fn mysql(url: &str, database: &str, table: &str) -> Vec<Map<String, Value>> {
    let pool = sqlx::MySqlPool::connect(url).await.expect("mysql");
    let columns: Vec<String> = sqlx::query(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(database)
    .bind(table)
    .fetch_all(&pool)
    .await
    .expect("columns")
    .iter()
    .map(|r| r.get::<String, _>(0))
    .collect();
    let mut rows = Vec::new();
    if !columns.is_empty() {
        let pairs: Vec<String> = columns
            .iter()
            .map(|c| {
                let lit = c.replace('\\', "\\\\").replace('\'', "''");
                let id = c.replace('`', "``");
                format!("'{lit}', `{id}`")
            })
            .collect();
        let sql = format!(
            "SELECT CAST(JSON_OBJECT({}) AS CHAR) FROM `{database}`.`{table}`",
            pairs.join(", ")
        );
        let texts: Vec<String> = sqlx::query_scalar(&sql)
            .fetch_all(&pool)
            .await
            .unwrap_or_else(|e| panic!("read {database}.{table}: {e}"));
        rows = texts.iter().map(|t| json_object(t)).collect();
    }
    pool.close().await;
    rows
}

fn json_object(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(m)) => m,
        other => panic!("row is not a JSON object: {other:?}"),
    }
}

/// Rows carry no delivery key: a second copy is a duplicate.
pub fn found_in_rows(rows: Vec<Map<String, Value>>) -> Vec<Found> {
    rows.into_iter()
        .map(|record| Found {
            key: None,
            record,
            cells: Cells::Json,
        })
        .collect()
}

// ---- dead letters ----

/// A destination's dead letters in every state, with their records.
#[derive(Debug, Default)]
pub struct DeadLetters {
    /// The rows of `GET .../dead-letters?state=all`.
    pub rows: Vec<Value>,
    pub records: Vec<Map<String, Value>>,
    /// Ids whose copy the server cannot decode (`encoding`): their records
    /// cannot be accounted for.
    pub unreadable: Vec<i64>,
}

pub async fn dead_letters(abrq: &Abrq, stream: &str, destination: &str) -> DeadLetters {
    let mut out = DeadLetters {
        rows: abrq.dead_letters(stream, destination).await,
        ..DeadLetters::default()
    };
    for row in &out.rows {
        let id = row["id"].as_i64().expect("a dead letter id");
        let path = format!("/v1/streams/{stream}/destinations/{destination}/dead-letters/{id}");
        let (code, body) = abrq.call(reqwest::Method::GET, &path, None, &[]).await;
        match code {
            200 => {}
            422 => {
                out.unreadable.push(id);
                continue;
            }
            _ => panic!("GET {path}: {code} {body}"),
        }
        for item in body["items"].as_array().expect("items") {
            if item["kind"] == "record" {
                let fields = item["fields"].as_object().expect("record fields");
                out.records.push(fields.clone());
            }
        }
    }
    out
}
