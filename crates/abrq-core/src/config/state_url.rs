//! `state.url`, parsed in one place: the binary opens what this says and
//! config validation refuses what it cannot say.

use std::fmt;
use std::path::PathBuf;

/// Where the state store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum StateLocation {
    /// A SQLite file (made, with its directories, if missing).
    Sqlite(PathBuf),
    /// A PostgreSQL database, as the whole `postgres://` or `postgresql://`
    /// URL (query parameters such as `sslmode` included). It may hold a
    /// password: show it with `Display` or `Debug`, which hide that.
    Postgres(String),
}

impl StateLocation {
    /// `sqlite://./abrq-data/state.db` (relative), `sqlite:///var/abrq/state.db`
    /// (absolute), `sqlite:state.db`, or
    /// `postgres://user:password@host:5432/database?sslmode=require`
    /// (`postgresql://` too).
    pub fn parse(url: &str) -> Result<StateLocation, String> {
        let bad = |why: &str| format!("invalid state url {:?}: {why}", redact_url(url));
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            // The driver reads the rest (hosts, sockets, TLS parameters) when
            // it connects; here only what no URL may hold is refused.
            if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad("a URL cannot hold spaces or control characters"));
            }
            return Ok(StateLocation::Postgres(url.to_owned()));
        }
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| bad("expected sqlite://<path> or postgres://<host>/<database>"))?;
        if rest.contains('?') {
            return Err(bad("query parameters are not supported"));
        }
        if rest.is_empty() || rest == ":memory:" {
            return Err(bad("a file path is required (the state must be durable)"));
        }
        Ok(StateLocation::Sqlite(PathBuf::from(rest)))
    }
}

/// The file's path, or the URL with its password shown as `***`: safe for
/// logs and error messages.
impl fmt::Display for StateLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateLocation::Sqlite(path) => write!(f, "{}", path.display()),
            StateLocation::Postgres(url) => f.write_str(&redact_url(url)),
        }
    }
}

/// By hand, so a config dump or a failed assertion never shows a password.
impl fmt::Debug for StateLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateLocation::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            StateLocation::Postgres(url) => {
                f.debug_tuple("Postgres").field(&redact_url(url)).finish()
            }
        }
    }
}

/// Hides the password of `scheme://user:password@host/...` and any
/// `password=` query parameter. Works on text, not a parsed URL, so a
/// malformed one is hidden too; when in doubt it hides more: everything
/// from the first `:` after the scheme to the last `@`.
fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => match (rest.find(':'), rest.rfind('@')) {
            (Some(colon), Some(at)) if colon < at => {
                format!("{scheme}://{}:***{}", &rest[..colon], &rest[at..])
            }
            _ => head.to_owned(),
        },
        None => head.to_owned(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
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
            other => panic!("not sqlite: {other:?}"),
        }
    }

    #[test]
    fn urls() {
        assert_eq!(path("sqlite://./d/s.db"), PathBuf::from("./d/s.db"));
        assert_eq!(path("sqlite:///var/s.db"), PathBuf::from("/var/s.db"));
        assert_eq!(path("sqlite:s.db"), PathBuf::from("s.db"));
        for bad in [
            "mysql://x/y",
            "postgres:/x/y",
            "sqlite://",
            "sqlite::memory:",
            "sqlite://a.db?mode=ro",
        ] {
            let err = StateLocation::parse(bad).unwrap_err();
            assert!(err.contains("invalid state url"), "{bad}: {err}");
        }
    }

    #[test]
    fn postgres_urls_are_kept_whole() {
        for url in [
            "postgres://abrq@db.internal:5432/abrq",
            "postgresql://abrq@db.internal/abrq?sslmode=verify-full&application_name=x",
            "postgres:///abrq?host=/var/run/postgresql",
        ] {
            assert_eq!(
                StateLocation::parse(url).unwrap(),
                StateLocation::Postgres(url.to_owned())
            );
        }
        let err = StateLocation::parse("postgres://u:hunter2@h/d b").unwrap_err();
        assert!(err.contains("invalid state url"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn postgres_passwords_never_show() {
        let loc =
            StateLocation::parse("postgres://abrq:hunter2@db:5432/abrq?sslmode=require").unwrap();
        for shown in [loc.to_string(), format!("{loc:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(
                shown.contains("abrq:***@db:5432/abrq?sslmode=require"),
                "{shown}"
            );
        }
        let cases = [
            (
                "postgres://h/d?password=hunter2&x=1",
                "postgres://h/d?password=***&x=1",
            ),
            // Unencoded characters in a password are hidden all the same.
            ("postgres://u:hun@ter/2@h/d", "postgres://u:***@h/d"),
            ("postgres://u@h:5432/d", "postgres://u@h:5432/d"),
            ("postgres://h:5432/d", "postgres://h:5432/d"),
        ];
        for (url, want) in cases {
            assert_eq!(StateLocation::Postgres(url.into()).to_string(), want);
        }
        let sqlite = StateLocation::Sqlite(PathBuf::from("/var/s.db"));
        assert_eq!(sqlite.to_string(), "/var/s.db");
    }
}
