//! `state.url`, parsed in one place: the binary opens what this says and
//! config validation refuses what it cannot say.

use std::path::PathBuf;

/// Where the state store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateLocation {
    /// A SQLite file (made, with its directories, if missing).
    Sqlite(PathBuf),
}

impl StateLocation {
    /// `sqlite://./abrq-data/state.db` (relative), `sqlite:///var/abrq/state.db`
    /// (absolute) or `sqlite:state.db`.
    pub fn parse(url: &str) -> Result<StateLocation, String> {
        let bad = |why: &str| format!("invalid state url {url:?}: {why}");
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| bad("expected sqlite://<path> (the only state store in this build)"))?;
        if rest.contains('?') {
            return Err(bad("query parameters are not supported"));
        }
        if rest.is_empty() || rest == ":memory:" {
            return Err(bad("a file path is required (the state must be durable)"));
        }
        Ok(StateLocation::Sqlite(PathBuf::from(rest)))
    }
}

impl super::Config {
    /// The state store this config names: `state.url`, else
    /// `{data_dir}/state.db`.
    pub fn state_location(&self) -> Result<StateLocation, String> {
        match &self.state.url {
            None => Ok(StateLocation::Sqlite(
                PathBuf::from(self.data_dir.as_str()).join("state.db"),
            )),
            Some(url) => StateLocation::parse(url.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(url: &str) -> PathBuf {
        match StateLocation::parse(url).unwrap() {
            StateLocation::Sqlite(p) => p,
        }
    }

    #[test]
    fn urls() {
        assert_eq!(path("sqlite://./d/s.db"), PathBuf::from("./d/s.db"));
        assert_eq!(path("sqlite:///var/s.db"), PathBuf::from("/var/s.db"));
        assert_eq!(path("sqlite:s.db"), PathBuf::from("s.db"));
        for bad in [
            "postgres://x/y",
            "sqlite://",
            "sqlite::memory:",
            "sqlite://a.db?mode=ro",
        ] {
            let err = StateLocation::parse(bad).unwrap_err();
            assert!(err.contains("invalid state url"), "{bad}: {err}");
        }
    }
}
