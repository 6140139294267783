//! The `kafka` engine's config, validated without I/O, and the librdkafka
//! properties built from it. Connection fields: `host` the bootstrap
//! servers (`host[:port]`, comma-separated), `port` the port of an entry
//! without one (9092), `database` the topic, `username` and `password` the
//! SASL login (SASL is off without a user). Own keys: `partition_key`,
//! `sasl_mechanism`, `tls`, `tls_ca_file`.

use std::path::PathBuf;
use std::time::Duration;

use abrq_core::config::{DestinationConfig, Secret, SourceOrigin, Text};
use rdkafka::ClientConfig;
use serde::Deserialize;

use super::topic::Topic;
use crate::keys::{invalid, text, Connection};

pub const CONNECTION: Connection = Connection {
    host: Some("bootstrap servers"),
    port: Some("port of a server given without one"),
    database: Some("topic"),
    username: Some("SASL user"),
    password: Some("SASL password"),
};

/// The keys only kafka has.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KafkaOptions {
    /// The field whose value becomes the message key.
    partition_key: Option<Text>,
    /// The shape of each message (`json`, `debezium`, `cloudevents`).
    #[serde(default)]
    format: MessageFormat,
    /// Where a source's transaction markers go (default: beside the
    /// table's changes).
    transaction_topic: Option<Text>,
    /// `PLAIN` (default when `username` is set), `SCRAM-SHA-256` or
    /// `SCRAM-SHA-512`.
    sasl_mechanism: Option<Text>,
    #[serde(default)]
    tls: bool,
    tls_ca_file: Option<Text>,
}

/// The shape of each message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageFormat {
    /// The record's fields as a JSON object, with abrq's headers.
    #[default]
    Json,
    /// Debezium's change envelope, a tombstone after each delete.
    Debezium,
    /// A CloudEvent in binary mode: `ce_*` headers, the record as value.
    Cloudevents,
}

/// Everything a kafka destination needs, checked. `Debug` shows the SASL
/// password as `***` (it is a [`Secret`]).
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    /// The stream, for the `abrq_stream` header.
    pub stream: String,
    /// The destination's name in config.
    pub destination: String,
    /// Bootstrap servers, `host:port[,host:port]`.
    pub brokers: String,
    /// The topic, or a template naming the source table (`{table}`).
    pub topic: Topic,
    /// The field whose value becomes the message key.
    pub partition_key: Option<String>,
    pub format: MessageFormat,
    /// The topic of transaction markers (None: each table's topic).
    pub transaction_topic: Option<String>,
    /// The stream's source (Debezium's `source` block names it).
    pub source: SourceOrigin,
    /// SASL is on when a username is set.
    pub username: Option<String>,
    pub password: Option<Secret>,
    pub sasl_mechanism: SaslMechanism,
    /// TLS to the brokers: `tls = true`, or implied by `tls_ca_file`.
    pub tls: bool,
    /// A private CA to trust; otherwise the system's roots.
    pub ca_file: Option<PathBuf>,
    /// How long librdkafka may keep retrying one record before the attempt
    /// fails: nine tenths of the destination's `retry.attempt_timeout`, so
    /// an attempt's records fail inside the attempt (and the producer is
    /// rebuilt clean) rather than being cut off with records still queued.
    pub message_timeout: Duration,
    /// librdkafka's own batching delay (its default, stated so the bench's
    /// raw producer can use the same).
    pub linger: Duration,
    /// Extra librdkafka properties, set last. Not reachable from config:
    /// tests and the bench use it (e.g. a small `message.max.bytes`).
    pub overrides: Vec<(String, String)>,
}

impl KafkaSettings {
    pub fn from_config(stream: &str, cfg: &DestinationConfig) -> Result<Self, String> {
        let own: KafkaOptions = cfg.options.parse()?;
        let hosts = CONNECTION.required(cfg, "host", &cfg.host)?;
        let brokers = bootstrap(hosts, cfg.port).map_err(|e| invalid(cfg, "host", e))?;
        let topic = CONNECTION.required(cfg, "database", &cfg.database)?;
        let topic = Topic::parse(topic).map_err(|why| invalid(cfg, "database", why))?;
        let username = text(&cfg.username).map(str::to_string);
        let password = cfg.password.clone().filter(|p| !p.is_empty());
        if password.is_some() && username.is_none() {
            return Err(invalid(
                cfg,
                "password",
                "password is set but username is empty (SASL needs both)",
            ));
        }
        let sasl_mechanism = match text(&own.sasl_mechanism) {
            None => SaslMechanism::Plain,
            Some(_) if username.is_none() => {
                return Err(invalid(
                    cfg,
                    "sasl_mechanism",
                    "sasl_mechanism is set but username is empty (SASL is off)",
                ))
            }
            Some(m) => SaslMechanism::parse(m).map_err(|e| invalid(cfg, "sasl_mechanism", e))?,
        };
        let ca_file = text(&own.tls_ca_file).map(PathBuf::from);
        Ok(KafkaSettings {
            stream: stream.to_string(),
            destination: cfg.name.as_str().to_string(),
            brokers,
            topic,
            partition_key: text(&own.partition_key).map(str::to_string),
            format: own.format,
            transaction_topic: text(&own.transaction_topic).map(str::to_string),
            source: cfg.source.clone(),
            username,
            password,
            sasl_mechanism,
            tls: own.tls || ca_file.is_some(),
            ca_file,
            message_timeout: (cfg.retry.attempt_timeout.0 * 9 / 10).max(Duration::from_secs(1)),
            linger: Duration::from_millis(5),
            overrides: Vec::new(),
        })
    }

    /// The CA file, if one is named, is a file: a look at the file system,
    /// so it is made when the destination is built, not when the config
    /// is checked.
    pub fn check_ca_file(&self) -> Result<(), String> {
        match &self.ca_file {
            Some(path) if !path.is_file() => Err(format!(
                "tls_ca_file {} is not a readable file",
                path.display()
            )),
            _ => Ok(()),
        }
    }

    /// The producer properties: acks from every in-sync replica, idempotence
    /// (no duplicates or reordering from librdkafka's own retries), and
    /// murmur2 key placement so Java clients and abrq agree.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers)
            .set("client.id", format!("abrq-{}", self.destination))
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("partitioner", "murmur2_random")
            .set("linger.ms", self.linger.as_millis().to_string())
            .set(
                "message.timeout.ms",
                self.message_timeout.as_millis().to_string(),
            )
            // A handshake that never finishes (TLS to a plaintext port, a
            // silent proxy) is reported as such, in state, well inside a
            // `check`; librdkafka's default is 30 s.
            .set("socket.connection.setup.timeout.ms", "8000");
        let protocol = match (self.tls, self.username.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        c.set("security.protocol", protocol);
        if let Some(user) = &self.username {
            c.set("sasl.mechanisms", self.sasl_mechanism.name())
                .set("sasl.username", user)
                .set(
                    "sasl.password",
                    self.password.as_ref().map_or("", Secret::expose),
                );
        }
        if self.tls {
            // The broker's name is checked against its certificate (the
            // librdkafka default, stated). Without a CA file, librdkafka
            // looks for the system's roots in the usual places: the
            // OpenSSL built into abrq knows none of its own.
            let ca = self.ca_file.as_ref().map(|p| p.display().to_string());
            c.set("ssl.endpoint.identification.algorithm", "https")
                .set("ssl.ca.location", ca.as_deref().unwrap_or("probe"));
        }
        for (k, v) in &self.overrides {
            c.set(k, v);
        }
        c
    }
}

/// How a SASL client proves who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// The password itself, sent to the broker: use with `tls`.
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "PLAIN" => Ok(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            _ => Err(format!(
                "sasl_mechanism {s:?}: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
            )),
        }
    }

    /// The name Kafka and librdkafka use.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// `host[:port]` entries, comma-separated; an entry without a port gets
/// `port` (or Kafka's 9092).
fn bootstrap(hosts: &str, port: Option<u16>) -> Result<String, String> {
    let mut out = Vec::new();
    for h in hosts.split(',').map(str::trim) {
        if h.is_empty() {
            return Err(format!("host {hosts:?} has an empty entry"));
        }
        let has_port = h
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok());
        out.push(if has_port {
            h.to_string()
        } else {
            format!("{h}:{}", port.unwrap_or(9092))
        });
    }
    Ok(out.join(","))
}
