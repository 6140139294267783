//! The `s3` engine's config (AWS S3 and S3-compatible stores). Connection
//! fields: `host` the endpoint URL (empty: AWS), `database` the bucket,
//! `username` the access key id, `password` the secret access key; with no
//! keys at all the ambient AWS credentials (environment, instance profile)
//! are used. Its own key: `region`; and the object keys.

use abrq_core::config::{DestinationConfig, Secret, Text};
use serde::Deserialize;

use crate::keys::{invalid, text, Connection};
use crate::object::ObjectOptions;

pub const CONNECTION: Connection = Connection {
    host: Some("endpoint URL"),
    port: None,
    database: Some("bucket"),
    username: Some("access key id"),
    password: Some("secret access key"),
};

/// The keys only s3 has.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct S3Options {
    region: Option<Text>,
}

/// Hidden in `Debug`: the secret key is a [`Secret`].
#[derive(Debug, Clone)]
pub struct S3Settings {
    pub bucket: String,
    /// Access key id and secret; None: the ambient credentials.
    pub keys: Option<(String, Secret)>,
    pub region: Option<String>,
    /// The endpoint URL, and whether it is plain HTTP.
    pub endpoint: Option<(String, bool)>,
    pub object: ObjectOptions,
}

impl S3Settings {
    pub fn from_config(cfg: &DestinationConfig) -> Result<S3Settings, String> {
        let (object, own): (ObjectOptions, S3Options) = cfg.options.parse_split()?;
        let bucket = CONNECTION
            .required(cfg, "database", &cfg.database)?
            .to_string();
        let secret = cfg.password.clone().filter(|p| !p.is_empty());
        let keys = match (text(&cfg.username), secret) {
            (None, None) => None,
            (Some(id), Some(key)) => Some((id.to_string(), key)),
            _ => {
                return Err(invalid(
                    cfg,
                    "username",
                    "username (access key id) and password (secret access key) are set \
                     together or not at all",
                ))
            }
        };
        Ok(S3Settings {
            bucket,
            keys,
            region: text(&own.region).map(str::to_string),
            endpoint: super::super::endpoint(cfg)?,
            object,
        })
    }
}
