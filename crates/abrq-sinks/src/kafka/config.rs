//! The kafka part of a destination's config, validated without I/O, and the
//! librdkafka properties built from it.

use std::time::Duration;

use abrq_core::config::{DestinationConfig, Secret};
use rdkafka::ClientConfig;

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
    pub topic: String,
    /// The field whose value becomes the message key.
    pub partition_key: Option<String>,
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// How long librdkafka may keep retrying one record before the attempt
    /// fails: bounds a delivery attempt during an outage.
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
        let text = |t: &Option<abrq_core::config::Text>| {
            t.as_ref()
                .map(|t| t.as_str().trim().to_string())
                .filter(|s| !s.is_empty())
        };
        let hosts = text(&cfg.host).ok_or("host (the bootstrap servers) is required")?;
        let brokers = bootstrap(&hosts, cfg.port)?;
        let topic = text(&cfg.database).ok_or("database (the topic) is required")?;
        if let Some(why) = invalid_topic(&topic) {
            return Err(format!("topic {topic:?}: {why}"));
        }
        // librdkafka is built without OpenSSL here (see the workspace
        // Cargo.toml); refuse rather than silently send in plaintext.
        if cfg.tls || cfg.tls_ca_file.is_some() {
            return Err("tls is not available for kafka in this build \
                        (librdkafka was built without OpenSSL)"
                .into());
        }
        let username = text(&cfg.username);
        let password = cfg.password.clone().filter(|p| !p.is_empty());
        if password.is_some() && username.is_none() {
            return Err("password is set but username is empty (SASL needs both)".into());
        }
        Ok(KafkaSettings {
            stream: stream.to_string(),
            destination: cfg.name.as_str().to_string(),
            brokers,
            topic,
            partition_key: text(&cfg.partition_key),
            username,
            password,
            message_timeout: Duration::from_secs(30),
            linger: Duration::from_millis(5),
            overrides: Vec::new(),
        })
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
            );
        if let Some(user) = &self.username {
            // PLAIN is the SASL mechanism librdkafka has without OpenSSL.
            c.set("security.protocol", "sasl_plaintext")
                .set("sasl.mechanisms", "PLAIN")
                .set("sasl.username", user)
                .set(
                    "sasl.password",
                    self.password.as_ref().map_or("", Secret::expose),
                );
        }
        for (k, v) in &self.overrides {
            c.set(k, v);
        }
        c
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

/// Kafka's own topic name rule, so a typo fails at validation, not at send.
fn invalid_topic(t: &str) -> Option<&'static str> {
    if t.len() > 249 {
        Some("longer than 249 characters")
    } else if t == "." || t == ".." {
        Some("'.' and '..' are not topic names")
    } else if !t
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("only ASCII letters, digits, '.', '_' and '-' are allowed")
    } else {
        None
    }
}
