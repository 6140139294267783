//! The connection part of an ftp/ftps destination's config, validated
//! without I/O. The CA file is only named here; it is read when the first
//! connection is made, so a bad path shows up in `check()` and as a
//! transient delivery error, like any other unreachable-server problem.

use std::path::PathBuf;
use std::time::Duration;

use abrq_core::config::{DestinationConfig, DestinationEngine, Secret};

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

impl FtpSettings {
    /// The engine's default control port, for both ftp and explicit ftps.
    pub const DEFAULT_PORT: u16 = 21;

    pub fn from_config(cfg: &DestinationConfig) -> Result<Self, String> {
        let secure = match cfg.engine {
            DestinationEngine::Ftp => false,
            DestinationEngine::Ftps => true,
            other => return Err(format!("engine {} is not ftp or ftps", other.as_str())),
        };
        let text =
            |t: &Option<abrq_core::config::Text>| t.as_ref().map(|t| t.as_str().trim().to_string());
        let host = text(&cfg.host)
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("host is required for engine {}", cfg.engine.as_str()))?;
        if host.contains('/') {
            return Err(format!(
                "host {host:?} must be a host name or address, not a URL"
            ));
        }
        let base_dir = text(&cfg.database).unwrap_or_default();
        let trimmed = base_dir.trim_end_matches('/');
        let base_dir = match (trimmed.is_empty(), base_dir.starts_with('/')) {
            (true, true) => "/".to_string(),
            (true, false) => {
                return Err("database (the base directory) is required for engine ftp/ftps".into())
            }
            (false, _) => trimmed.to_string(),
        };
        if base_dir.split('/').any(|p| p == "..") {
            return Err(format!(
                "database {base_dir:?} must not contain '..' components"
            ));
        }
        let ca_file = text(&cfg.tls_ca_file)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        if ca_file.is_some() && !secure {
            return Err("tls_ca_file applies to engine ftps only".into());
        }
        Ok(FtpSettings {
            secure,
            host,
            port: cfg.port.unwrap_or(Self::DEFAULT_PORT),
            // RFC 1635: an anonymous login is user "anonymous"
            username: text(&cfg.username)
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| "anonymous".into()),
            password: cfg.password.clone().unwrap_or_default(),
            base_dir,
            ca_file,
            connect_timeout: Duration::from_secs(10),
            op_timeout: Duration::from_secs(30),
        })
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
