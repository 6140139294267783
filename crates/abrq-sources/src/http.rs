//! The `http` source's keys: `ingest_token` (a bearer token ingest
//! requests must carry) and `max_body`. The records arrive through the
//! binary's server (`POST /v1/streams/{stream}/records`), parsed by
//! `ingest.rs`.

use abrq_core::config::{Secret, Size, SourceConfig};
use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpOptions {
    /// Hidden in `Debug` by [`Secret`].
    pub ingest_token: Option<Secret>,
    /// The largest request body taken; unset means the server's default.
    pub max_body: Option<Size>,
}

impl HttpOptions {
    pub fn from_config(cfg: &SourceConfig) -> Result<HttpOptions, String> {
        cfg.options.parse()
    }

    /// The token, when one is set and not empty.
    pub fn token(&self) -> Option<&str> {
        self.ingest_token
            .as_ref()
            .map(Secret::expose)
            .filter(|t| !t.is_empty())
    }
}
