//! A test's `abrq.toml`, built from typed parts instead of pasted text:
//! each key is a method, so a misspelt key does not compile, and values
//! are quoted by the `toml` crate. Keys come out in the order they were
//! set; tables as `[state]`, `[server]`, `[spool]`, then each stream with
//! its source, batch and destinations.
//!
//! ```text
//! let text = Config::new(&abrq)
//!     .gc_interval("100ms")
//!     .stream(
//!         Stream::new("orders", Source::http())
//!             .max_records(500)
//!             .destination(Destination::local("lake", abrq.p("out/lake")).format("jsonl"))
//!             .destination(
//!                 Destination::local("bad", abrq.p("out/bad"))
//!                     .max_attempts(3)
//!                     .backoff("10ms", "20ms")
//!                     .failure_threshold(1000),
//!             ),
//!     )
//!     .to_string();
//! abrq.write_config(&text);
//! ```

use std::fmt;
use std::path::Path;

use toml::Value;

use super::Abrq;

/// One table's keys, in the order set; setting a key again replaces it.
#[derive(Default, Clone)]
struct Keys(Vec<(&'static str, Value)>);

impl Keys {
    fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }

    /// `[header]` and the keys, or nothing for an empty table.
    fn write(&self, f: &mut fmt::Formatter<'_>, header: &str) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        writeln!(f, "{header}")?;
        self.write_keys(f)
    }

    fn write_keys(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, v) in &self.0 {
            writeln!(f, "{k} = {v}")?;
        }
        Ok(())
    }
}

fn path(p: impl AsRef<Path>) -> String {
    p.as_ref().display().to_string()
}

/// The connection fields of `url` for a database `engine`: host, port
/// (the engine's own by default), database and username; no password.
fn connection(keys: &mut Keys, engine: &str, url: &str) {
    let default_port = match engine {
        "postgres" => 5432,
        "mysql" => 3306,
        other => panic!("{other} takes no database url"),
    };
    let u = reqwest::Url::parse(url).unwrap_or_else(|e| panic!("bad url {url}: {e}"));
    keys.set("host", u.host_str().unwrap_or("127.0.0.1"));
    keys.set("port", i64::from(u.port().unwrap_or(default_port)));
    keys.set("database", u.path().trim_start_matches('/'));
    keys.set("username", u.username());
}

/// The whole file.
pub struct Config {
    top: Keys,
    state: Keys,
    server: Keys,
    spool: Keys,
    streams: Vec<Stream>,
}

impl Config {
    /// `data_dir` and `[server] listen` of `abrq`.
    pub fn new(abrq: &Abrq) -> Config {
        let mut c = Config {
            top: Keys::default(),
            state: Keys::default(),
            server: Keys::default(),
            spool: Keys::default(),
            streams: Vec::new(),
        };
        c.top.set("data_dir", abrq.p("data"));
        c.server.set("listen", abrq.listen());
        c
    }

    pub fn stream(mut self, stream: Stream) -> Self {
        self.streams.push(stream);
        self
    }

    // ---- [state] ----

    pub fn state_url(mut self, url: &str) -> Self {
        self.state.set("url", url);
        self
    }

    pub fn state_allow_plaintext(mut self) -> Self {
        self.state.set("allow_plaintext", true);
        self
    }

    pub fn node_id(mut self, id: &str) -> Self {
        self.state.set("node_id", id);
        self
    }

    pub fn lease_timeout(mut self, d: &str) -> Self {
        self.state.set("lease_timeout", d);
        self
    }

    pub fn heartbeat(mut self, d: &str) -> Self {
        self.state.set("heartbeat", d);
        self
    }

    // ---- [server] ----

    pub fn listen(mut self, addr: &str) -> Self {
        self.server.set("listen", addr);
        self
    }

    pub fn admin_token(mut self, token: &str) -> Self {
        self.server.set("admin_token", token);
        self
    }

    pub fn tls_cert(mut self, file: impl AsRef<Path>) -> Self {
        self.server.set("tls_cert", path(file));
        self
    }

    pub fn tls_key(mut self, file: impl AsRef<Path>) -> Self {
        self.server.set("tls_key", path(file));
        self
    }

    pub fn allowed_hosts(mut self, hosts: &[&str]) -> Self {
        let hosts: Vec<Value> = hosts.iter().map(|h| Value::from(*h)).collect();
        self.server.set("allowed_hosts", hosts);
        self
    }

    pub fn allow_plaintext(mut self) -> Self {
        self.server.set("allow_plaintext", true);
        self
    }

    pub fn max_ingest_requests(mut self, n: i64) -> Self {
        self.server.set("max_ingest_requests", n);
        self
    }

    pub fn idempotency_window(mut self, d: &str) -> Self {
        self.server.set("idempotency_window", d);
        self
    }

    // ---- [spool] ----

    pub fn gc_interval(mut self, d: &str) -> Self {
        self.spool.set("gc_interval", d);
        self
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.top.write_keys(f)?;
        self.state.write(f, "[state]")?;
        self.server.write(f, "[server]")?;
        self.spool.write(f, "[spool]")?;
        for s in &self.streams {
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

/// One `[[streams]]` table, its source, batch and destinations.
pub struct Stream {
    name: String,
    source: Source,
    batch: Keys,
    destinations: Vec<Destination>,
}

impl Stream {
    pub fn new(name: &str, source: Source) -> Stream {
        Stream {
            name: name.to_string(),
            source,
            batch: Keys::default(),
            destinations: Vec::new(),
        }
    }

    pub fn destination(mut self, d: Destination) -> Self {
        self.destinations.push(d);
        self
    }

    pub fn destinations(mut self, ds: impl IntoIterator<Item = Destination>) -> Self {
        self.destinations.extend(ds);
        self
    }

    // ---- [streams.batch] ----

    pub fn max_records(mut self, n: i64) -> Self {
        self.batch.set("max_records", n);
        self
    }

    pub fn max_bytes(mut self, size: &str) -> Self {
        self.batch.set("max_bytes", size);
        self
    }

    pub fn max_wait(mut self, d: &str) -> Self {
        self.batch.set("max_wait", d);
        self
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "\n[[streams]]")?;
        writeln!(f, "name = {}", Value::from(self.name.as_str()))?;
        writeln!(f, "[streams.source]")?;
        writeln!(f, "engine = {}", Value::from(self.source.engine))?;
        self.source.keys.write_keys(f)?;
        self.batch.write(f, "[streams.batch]")?;
        for d in &self.destinations {
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// `[streams.source]`.
pub struct Source {
    engine: &'static str,
    keys: Keys,
}

impl Source {
    fn engine(engine: &'static str) -> Source {
        Source {
            engine,
            keys: Keys::default(),
        }
    }

    fn set(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.keys.set(key, value);
        self
    }

    pub fn http() -> Source {
        Source::engine("http")
    }

    pub fn generate(records: i64) -> Source {
        Source::engine("generate").set("records", records)
    }

    pub fn file(file: impl AsRef<Path>) -> Source {
        Source::engine("file").set("path", path(file))
    }

    /// A `postgres` source in `mode` (`cdc`, `cursor`).
    pub fn postgres(mode: &str) -> Source {
        Source::engine("postgres").set("mode", mode)
    }

    /// A `mysql` source in `mode` (`cdc`, `cursor`).
    pub fn mysql(mode: &str) -> Source {
        Source::engine("mysql").set("mode", mode)
    }

    /// The server and database of `url` (no password).
    pub fn connection(mut self, url: &str) -> Self {
        connection(&mut self.keys, self.engine, url);
        self
    }

    pub fn follow(self) -> Self {
        self.set("follow", true)
    }

    pub fn ingest_token(self, token: &str) -> Self {
        self.set("ingest_token", token)
    }

    /// A size: `"1KiB"`, or a number of bytes.
    pub fn max_body(self, size: impl Into<Value>) -> Self {
        self.set("max_body", size)
    }

    pub fn database(self, name: &str) -> Self {
        self.set("database", name)
    }

    pub fn table(self, table: &str) -> Self {
        self.set("table", table)
    }

    /// `tables = [...]`: several tables, or `schema.*`.
    pub fn tables(self, tables: &[&str]) -> Self {
        let list = tables.iter().map(|t| Value::from(*t)).collect();
        self.set("tables", Value::Array(list))
    }

    pub fn slot(self, slot: &str) -> Self {
        self.set("slot", slot)
    }

    pub fn publication(self, publication: &str) -> Self {
        self.set("publication", publication)
    }

    pub fn snapshot(self, when: &str) -> Self {
        self.set("snapshot", when)
    }

    /// The snapshot copy reads a large table on this many connections.
    pub fn snapshot_connections(self, n: i64) -> Self {
        self.set("snapshot_connections", n)
    }

    pub fn cursor(self, column: &str) -> Self {
        self.set("cursor", column)
    }

    pub fn poll_interval(self, d: &str) -> Self {
        self.set("poll_interval", d)
    }

    pub fn tls(self, on: bool) -> Self {
        self.set("tls", on)
    }

    pub fn tls_ca_file(self, file: impl AsRef<Path>) -> Self {
        self.set("tls_ca_file", path(file))
    }

    /// Each change carries `_abrq_tx`.
    pub fn transaction_metadata(self) -> Self {
        self.set("transaction_metadata", true)
    }

    /// Transactions begin and commit with markers.
    pub fn transaction_markers(self) -> Self {
        self.set("transaction_markers", true)
    }

    /// A heartbeat message into the source database this often.
    pub fn heartbeat_interval(self, d: &str) -> Self {
        self.set("heartbeat_interval", d)
    }

    /// `per_table`: each table's `columns`, `exclude_columns`, `mask`, as
    /// a TOML table.
    pub fn per_table(self, tables: Value) -> Self {
        self.set("per_table", tables)
    }

    pub fn mask_salt(self, salt: &str) -> Self {
        self.set("mask_salt", salt)
    }
}

/// One `[[streams.destinations]]` table, with its retry, breaker and
/// schema-drift tables.
#[derive(Clone)]
pub struct Destination {
    name: String,
    engine: &'static str,
    keys: Keys,
    retry: Keys,
    breaker: Keys,
    schema_drift: Keys,
}

impl Destination {
    fn engine(name: &str, engine: &'static str) -> Destination {
        Destination {
            name: name.to_string(),
            engine,
            keys: Keys::default(),
            retry: Keys::default(),
            breaker: Keys::default(),
            schema_drift: Keys::default(),
        }
    }

    fn set(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.keys.set(key, value);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Files under the directory `root`.
    pub fn local(name: &str, root: impl AsRef<Path>) -> Destination {
        Destination::engine(name, "local").set("database", path(root))
    }

    pub fn postgres(name: &str) -> Destination {
        Destination::engine(name, "postgres")
    }

    pub fn mysql(name: &str) -> Destination {
        Destination::engine(name, "mysql")
    }

    pub fn s3(name: &str) -> Destination {
        Destination::engine(name, "s3")
    }

    pub fn azure_blob(name: &str) -> Destination {
        Destination::engine(name, "azure_blob")
    }

    pub fn gcs(name: &str) -> Destination {
        Destination::engine(name, "gcs")
    }

    pub fn ftp(name: &str) -> Destination {
        Destination::engine(name, "ftp")
    }

    pub fn ftps(name: &str) -> Destination {
        Destination::engine(name, "ftps")
    }

    pub fn kafka(name: &str) -> Destination {
        Destination::engine(name, "kafka")
    }

    // ---- the connection fields ----

    /// The server and database of `url` (no password).
    pub fn connection(mut self, url: &str) -> Self {
        connection(&mut self.keys, self.engine, url);
        self
    }

    pub fn host(self, host: &str) -> Self {
        self.set("host", host)
    }

    pub fn port(self, port: u16) -> Self {
        self.set("port", i64::from(port))
    }

    /// What `database` names by engine: a directory, bucket, container,
    /// topic or database.
    pub fn database(self, database: impl AsRef<Path>) -> Self {
        self.set("database", path(database))
    }

    pub fn username(self, username: &str) -> Self {
        self.set("username", username)
    }

    pub fn password(self, password: &str) -> Self {
        self.set("password", password)
    }

    // ---- the engine's own keys ----

    pub fn format(self, format: &str) -> Self {
        self.set("format", format)
    }

    pub fn prefix(self, prefix: &str) -> Self {
        self.set("prefix", prefix)
    }

    pub fn date_partitioning(self) -> Self {
        self.set("date_partitioning", true)
    }

    pub fn manifest(self) -> Self {
        self.set("manifest", true)
    }

    pub fn region(self, region: &str) -> Self {
        self.set("region", region)
    }

    pub fn schema(self, schema: &str) -> Self {
        self.set("schema", schema)
    }

    pub fn table(self, table: &str) -> Self {
        self.set("table", table)
    }

    /// Kafka: where transaction markers go.
    pub fn transaction_topic(self, topic: &str) -> Self {
        self.set("transaction_topic", topic)
    }

    /// `deletes = "soft"` or `"hard"`.
    pub fn deletes(self, deletes: &str) -> Self {
        self.set("deletes", deletes)
    }

    pub fn mode(self, mode: &str) -> Self {
        self.set("mode", mode)
    }

    pub fn partition_key(self, field: &str) -> Self {
        self.set("partition_key", field)
    }

    pub fn tls_ca_file(self, file: impl AsRef<Path>) -> Self {
        self.set("tls_ca_file", path(file))
    }

    // ---- [streams.destinations.retry] ----

    pub fn max_attempts(mut self, n: i64) -> Self {
        self.retry.set("max_attempts", n);
        self
    }

    pub fn backoff(mut self, initial: &str, max: &str) -> Self {
        self.retry.set("initial_backoff", initial);
        self.retry.set("max_backoff", max);
        self
    }

    pub fn attempt_timeout(mut self, d: &str) -> Self {
        self.retry.set("attempt_timeout", d);
        self
    }

    // ---- [streams.destinations.breaker] ----

    pub fn failure_threshold(mut self, n: i64) -> Self {
        self.breaker.set("failure_threshold", n);
        self
    }

    pub fn cooldown(mut self, d: &str) -> Self {
        self.breaker.set("cooldown", d);
        self
    }

    // ---- [streams.destinations.schema_drift] ----

    pub fn drift_types(mut self, policy: &str) -> Self {
        self.schema_drift.set("types", policy);
        self
    }

    pub fn dropped_columns(mut self, policy: &str) -> Self {
        self.schema_drift.set("dropped_columns", policy);
        self
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "\n[[streams.destinations]]")?;
        writeln!(f, "name = {}", Value::from(self.name.as_str()))?;
        writeln!(f, "engine = {}", Value::from(self.engine))?;
        self.keys.write_keys(f)?;
        self.retry.write(f, "[streams.destinations.retry]")?;
        self.breaker.write(f, "[streams.destinations.breaker]")?;
        self.schema_drift
            .write(f, "[streams.destinations.schema_drift]")
    }
}
