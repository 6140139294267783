//! The `azure_blob` engine's config. Connection fields: `host` the blob
//! endpoint URL (empty: the account's own,
//! `https://{account}.blob.core.windows.net`; for Azurite
//! `http://127.0.0.1:10000/{account}`), `database` the container,
//! `username` the storage account name, `password` the account key; with
//! no key the ambient Azure credentials (environment, managed identity)
//! are used. Its own keys: the object keys.

use abrq_core::config::{DestinationConfig, Secret};

use crate::keys::Connection;
use crate::object::ObjectOptions;

pub const CONNECTION: Connection = Connection {
    host: Some("blob endpoint URL"),
    port: None,
    database: Some("container"),
    username: Some("storage account name"),
    password: Some("account key"),
};

/// Hidden in `Debug`: the key is a [`Secret`].
#[derive(Debug, Clone)]
pub struct AzureSettings {
    pub container: String,
    pub account: String,
    /// None: the ambient credentials.
    pub key: Option<Secret>,
    /// The endpoint URL, and whether it is plain HTTP.
    pub endpoint: Option<(String, bool)>,
    pub object: ObjectOptions,
}

impl AzureSettings {
    pub fn from_config(cfg: &DestinationConfig) -> Result<AzureSettings, String> {
        let object: ObjectOptions = cfg.options.parse()?;
        Ok(AzureSettings {
            container: CONNECTION
                .required(cfg, "database", &cfg.database)?
                .to_string(),
            account: CONNECTION
                .required(cfg, "username", &cfg.username)?
                .to_string(),
            key: cfg.password.clone().filter(|p| !p.is_empty()),
            endpoint: super::super::endpoint(cfg)?,
            object,
        })
    }
}
