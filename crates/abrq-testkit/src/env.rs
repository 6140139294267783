//! Reading `ABRQ_TEST_*` variables with loopback defaults.

use std::fmt;
use std::path::PathBuf;

/// The variable's value, or `default` when it is unset or empty.
pub(crate) fn var(name: &str, default: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => default.to_owned(),
    }
}

/// A port from the environment; a malformed value is a setup error, so it panics.
pub(crate) fn port(name: &str, default: u16) -> u16 {
    let raw = var(name, &default.to_string());
    raw.parse()
        .unwrap_or_else(|_| panic!("{name}={raw:?} is not a port number"))
}

/// Where `scripts/services.sh up` unpacked the public data sets the
/// real-data tests load: `ABRQ_TEST_DATASETS`, else `datasets` in the cache.
pub fn datasets_dir() -> PathBuf {
    match std::env::var("ABRQ_TEST_DATASETS") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => cache_dir().join("datasets"),
    }
}

/// Where `scripts/services.sh` keeps its tools, state and certificates.
pub fn cache_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("ABRQ_CACHE_DIR") {
        if !dir.is_empty() {
            return PathBuf::from(dir);
        }
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| ".".to_owned());
    PathBuf::from(home).join(".cache").join("abrq")
}

/// A credential: shown as `***` in `Debug`, so a failing test's output never
/// carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub(crate) fn new(value: String) -> Self {
        Self(value)
    }

    /// The credential itself, for handing to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_is_hidden_in_debug() {
        let secret = Secret::new("hunter2".to_owned());
        assert_eq!(format!("{secret:?}"), "***");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn unset_variable_takes_the_default() {
        assert_eq!(var("ABRQ_TEST_SURELY_UNSET_VARIABLE", "x"), "x");
    }
}
