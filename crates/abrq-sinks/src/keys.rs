//! What every engine's config shares: the meaning it gives the five
//! connection fields ([`Connection`]), reading one of them, and the wording
//! of a broken rule. It names no engine, so every engine may use it while
//! only the registry (`registry.rs`) names the engines.

use std::fmt;

use abrq_core::config::{DestinationConfig, Text};

/// Why a destination could not be built from its config.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("destination {destination:?}: {message}")]
    Invalid {
        destination: String,
        message: String,
    },
}

impl BuildError {
    pub(crate) fn invalid(cfg: &DestinationConfig, message: impl Into<String>) -> Self {
        BuildError::Invalid {
            destination: cfg.name.as_str().to_string(),
            message: message.into(),
        }
    }
}

/// What an engine takes each of the five connection fields to mean, as
/// README's table says; `None` where it does not use the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    pub host: Option<&'static str>,
    pub port: Option<&'static str>,
    pub database: Option<&'static str>,
    pub username: Option<&'static str>,
    pub password: Option<&'static str>,
}

impl Connection {
    /// What the field `key` means to the engine.
    fn meaning(&self, key: &str) -> Option<&'static str> {
        match key {
            "host" => self.host,
            "port" => self.port,
            "database" => self.database,
            "username" => self.username,
            "password" => self.password,
            _ => None,
        }
    }

    /// A connection field the engine cannot do without; the error says
    /// what the field means to the engine.
    pub(crate) fn required<'a>(
        &self,
        cfg: &DestinationConfig,
        key: &str,
        v: &'a Option<Text>,
    ) -> Result<&'a str, String> {
        text(v).ok_or_else(|| {
            let what = self
                .meaning(key)
                .map(|m| format!(": {key} (the {m}) is empty or unset"))
                .unwrap_or_default();
            format!(
                "line {}: streams.destinations.{key} is required for engine {:?} (destination {:?}){what}",
                cfg.line,
                cfg.engine.as_str(),
                cfg.name.as_str()
            )
        })
    }
}

/// A rule of `cfg`'s engine broken, named like every config error.
pub(crate) fn invalid(cfg: &DestinationConfig, key: &str, message: impl fmt::Display) -> String {
    format!(
        "line {}: streams.destinations.{key}: {message} (engine {:?}, destination {:?})",
        cfg.line,
        cfg.engine.as_str(),
        cfg.name.as_str()
    )
}

/// A connection field, trimmed; None when unset or empty.
pub(crate) fn text(v: &Option<Text>) -> Option<&str> {
    v.as_ref()
        .map(|t| t.as_str().trim())
        .filter(|s| !s.is_empty())
}
