//! The `gcs` engine's config, over GCS's JSON API. Connection fields:
//! `host` the endpoint URL (empty: Google's), `database` the bucket,
//! `password` a service-account key JSON (empty: anonymous, for
//! emulators). Its own keys: the object keys.

use abrq_core::config::{DestinationConfig, Secret};
use gcloud_storage::client::google_cloud_auth::credentials::CredentialsFile;

use crate::keys::{invalid, Connection};
use crate::object::ObjectOptions;

pub const CONNECTION: Connection = Connection {
    host: Some("endpoint URL"),
    port: None,
    database: Some("bucket"),
    username: None,
    password: Some("service-account key JSON"),
};

const GOOGLE_ENDPOINT: &str = "https://storage.googleapis.com";

/// Hidden in `Debug`: the key is a [`Secret`].
#[derive(Debug, Clone)]
pub struct GcsSettings {
    pub bucket: String,
    /// The JSON API's base URL, without `/storage/v1`.
    pub endpoint: String,
    /// Service-account key JSON (parsed, not used, here); None: anonymous.
    pub key: Option<Secret>,
    pub object: ObjectOptions,
}

impl GcsSettings {
    pub fn from_config(cfg: &DestinationConfig) -> Result<GcsSettings, String> {
        let object: ObjectOptions = cfg.options.parse()?;
        let bucket = CONNECTION
            .required(cfg, "database", &cfg.database)?
            .to_string();
        let endpoint = super::super::endpoint(cfg)?.map_or(GOOGLE_ENDPOINT.into(), |(url, _)| url);
        let key = cfg.password.clone().filter(|p| !p.is_empty());
        if let Some(json) = &key {
            // Only the position: serde's message could quote part of the key.
            if let Err(e) = serde_json::from_str::<CredentialsFile>(json.expose()) {
                return Err(invalid(
                    cfg,
                    "password",
                    format!(
                        "password must be a service-account key JSON or empty (line {}, column {})",
                        e.line(),
                        e.column()
                    ),
                ));
            }
        }
        Ok(GcsSettings {
            bucket,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            key,
            object,
        })
    }
}
