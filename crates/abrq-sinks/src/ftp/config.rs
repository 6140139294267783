//! The `ftp` and `ftps` engines' config, validated without I/O. Connection
//! fields: `host` the server, `port` its control port (21), `database` the
//! base directory, `username` and `password` the login (anonymous when
//! unset). Own key: `tls_ca_file` (ftps only); and the object keys, with
//! the manifest on by default (FTP offers no integrity check of its own).
//! The CA file is only named here; it is read when the first connection is
//! made, so a bad path shows up in `check()` and as a transient delivery
//! error, like any other unreachable-server problem.

use std::path::PathBuf;
use std::time::Duration;

use abrq_core::config::{DestinationConfig, DestinationEngine, Secret, Text};
use serde::Deserialize;

use crate::keys::{invalid, text, Connection};
use crate::object::ObjectOptions;

pub const CONNECTION: Connection = Connection {
    host: Some("server"),
    port: Some("control port"),
    database: Some("base directory"),
    username: Some("user"),
    password: Some("password"),
};

/// The keys only ftp and ftps have.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FtpOptions {
    tls_ca_file: Option<Text>,
}

/// How to reach and log in to the server, and where objects go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FtpSettings {
    /// Explicit FTPS (AUTH TLS, then PROT P on every data connection).
    pub secure: bool,
    pub host: String,
    pub port: u16,
    pub username: String,
    /// Hidden in `Debug` by [`Secret`].
    pub password: Secret,
    /// Config `database`: every key is written below it. Trailing slashes
    /// are trimmed; a leading one makes it absolute, otherwise it is
    /// relative to the login directory.
    pub base_dir: String,
    /// PEM file of the roots to trust instead of the system's (ftps only).
    pub ca_file: Option<PathBuf>,
    /// TCP connect, banner, TLS handshake and login, together.
    pub connect_timeout: Duration,
    /// One whole operation (put, get, delete) on a logged-in session, plus
    /// [`FtpSettings::transfer_allowance`] per MB it moves.
    pub op_timeout: Duration,
}

/// An ftp or ftps destination's settings: how to reach the server, and
/// the object keys (the manifest on unless turned off).
pub fn settings(cfg: &DestinationConfig) -> Result<(FtpSettings, ObjectOptions), String> {
    let secure = match cfg.engine {
        DestinationEngine::Ftp => false,
        DestinationEngine::Ftps => true,
        other => return Err(format!("engine {} is not ftp or ftps", other.as_str())),
    };
    let (mut object, own): (ObjectOptions, FtpOptions) = cfg.options.parse_split()?;
    object.manifest.get_or_insert(true);
    let host = CONNECTION.required(cfg, "host", &cfg.host)?.to_string();
    if host.contains('/') {
        return Err(invalid(
            cfg,
            "host",
            format!("{host:?} must be a host name or address, not a URL"),
        ));
    }
    let base_dir = cfg
        .database
        .as_ref()
        .map(|t| t.as_str().trim())
        .unwrap_or_default();
    let trimmed = base_dir.trim_end_matches('/');
    let base_dir = match (trimmed.is_empty(), base_dir.starts_with('/')) {
        (true, true) => "/".to_string(),
        (true, false) => return Err(CONNECTION.required(cfg, "database", &None).unwrap_err()),
        (false, _) => trimmed.to_string(),
    };
    if base_dir.split('/').any(|p| p == "..") {
        return Err(invalid(
            cfg,
            "database",
            format!("{base_dir:?} must not contain '..' components"),
        ));
    }
    let ca_file = text(&own.tls_ca_file).map(PathBuf::from);
    if ca_file.is_some() && !secure {
        return Err(invalid(cfg, "tls_ca_file", "applies to engine ftps only"));
    }
    object.check_prefix(cfg, |p| super::transport::safe_key(p).is_some())?;
    let ftp = FtpSettings {
        secure,
        host,
        port: cfg.port.unwrap_or(FtpSettings::DEFAULT_PORT),
        // RFC 1635: an anonymous login is user "anonymous"
        username: text(&cfg.username).unwrap_or("anonymous").to_string(),
        password: cfg.password.clone().unwrap_or_default(),
        base_dir,
        ca_file,
        connect_timeout: Duration::from_secs(10),
        op_timeout: Duration::from_secs(30),
    };
    Ok((ftp, object))
}

impl FtpSettings {
    /// The engine's default control port, for both ftp and explicit ftps.
    pub const DEFAULT_PORT: u16 = 21;

    /// How to reach the server `cfg` names (see [`settings`]).
    pub fn from_config(cfg: &DestinationConfig) -> Result<Self, String> {
        settings(cfg).map(|(ftp, _)| ftp)
    }

    /// Extra time an operation may take per MB of payload, so a large
    /// object on a slow link is not cut off while still making progress
    /// (a floor of 1 MB/s; the drain loop's attempt timeout still applies).
    pub fn transfer_allowance(&self, bytes: usize) -> Duration {
        self.op_timeout + Duration::from_secs(bytes as u64 / 1_000_000)
    }

    /// `host:port`, for messages.
    pub fn server(&self) -> String {
        let scheme = if self.secure { "ftps" } else { "ftp" };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }

    /// The server path of `key` (already checked by the transport).
    pub fn path_of(&self, key: &str) -> String {
        match self.base_dir.as_str() {
            "/" => format!("/{key}"),
            base => format!("{base}/{key}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::config::Config;

    pub(crate) fn dest(engine: &str, extra: &str) -> DestinationConfig {
        Config::destination("d", &format!("engine = \"{engine}\"\n{extra}")).unwrap()
    }

    #[test]
    fn defaults_and_paths() {
        let s =
            FtpSettings::from_config(&dest("ftp", "host = \"ftp.example\"\ndatabase = \"out/\""))
                .unwrap();
        assert_eq!(
            (s.port, s.secure, s.username.as_str()),
            (21, false, "anonymous")
        );
        assert_eq!(s.path_of("a/b.gz"), "out/a/b.gz");
        assert_eq!(s.server(), "ftp://ftp.example:21");
        let s = FtpSettings::from_config(&dest(
            "ftps",
            "host = \"::1\"\nport = 2990\ndatabase = \"/\"\ntls_ca_file = \"/ca.pem\"",
        ))
        .unwrap();
        assert_eq!(s.path_of("a/b.gz"), "/a/b.gz");
        assert_eq!(s.server(), "ftps://[::1]:2990");
        assert_eq!(s.ca_file, Some(PathBuf::from("/ca.pem")));
    }

    #[test]
    fn the_password_never_shows() {
        let s = FtpSettings::from_config(&dest(
            "ftps",
            "host = \"h\"\ndatabase = \"d\"\nusername = \"u\"\npassword = \"hunter2\"",
        ))
        .unwrap();
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
        assert_eq!(s.password.expose(), "hunter2");
    }

    #[test]
    fn refuses_what_cannot_work() {
        for (engine, extra, want) in [
            ("ftp", "database = \"d\"", "host is required"),
            ("ftp", "host = \"ftp://h\"\ndatabase = \"d\"", "not a URL"),
            ("ftp", "host = \"h\"\ndatabase = \"a/../b\"", "'..'"),
            (
                "ftp",
                "host = \"h\"\ndatabase = \"d\"\ntls_ca_file = \"c\"",
                "ftps only",
            ),
        ] {
            let e = FtpSettings::from_config(&dest(engine, extra)).unwrap_err();
            assert!(e.contains(want), "{extra}: {e}");
        }
    }
}
