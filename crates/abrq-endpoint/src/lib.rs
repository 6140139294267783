//! A database server and the login to it ([`Endpoint`]), as the postgres
//! and mysql sources and destinations read it from their connection fields
//! and `tls`/`tls_ca_file`, and the one place each driver's connect
//! options are made: sqlx's PostgreSQL options (feature `postgres`, which
//! also reads the state store's `postgres://` URL), sqlx's MySQL options
//! (`mysql`) and mysql_async's (`mysql-async`). Without features the crate
//! is plain data, and no driver enters a crate that does not ask for it.

use std::fmt;
use std::path::PathBuf;

use abrq_core::config::Secret;

#[cfg(any(feature = "mysql", feature = "mysql-async"))]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;

#[cfg(feature = "postgres")]
pub use postgres::postgres_url;

/// Where a database server is and how to log in to it, defaults applied by
/// the config that read it. `Debug` shows the password as `***`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// None: the driver's default (PostgreSQL: `PGDATABASE`, else the
    /// user's name; MySQL: no default database).
    pub database: Option<String>,
    /// None: the driver's default (PostgreSQL: `PGUSER`, else the login
    /// name of the process; MySQL: root).
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// `tls = true`.
    pub tls: bool,
    /// `tls_ca_file`: the private CA the server's certificate must chain
    /// to; giving one turns TLS on.
    pub tls_ca_file: Option<PathBuf>,
}

impl Endpoint {
    /// TLS is on when asked for or when a private CA is given; then the
    /// server's certificate and name are verified, never merely accepted.
    pub fn tls_on(&self) -> bool {
        self.tls || self.tls_ca_file.is_some()
    }
}

/// `host:port/database`, for messages: never the password.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}/{}",
            self.host,
            self.port,
            self.database.as_deref().unwrap_or("")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn endpoint(port: u16) -> Endpoint {
        Endpoint {
            host: "db.internal".into(),
            port,
            database: Some("app".into()),
            username: Some("abrq".into()),
            password: Some(Secret::new("hunter2")),
            tls: false,
            tls_ca_file: None,
        }
    }

    #[test]
    fn shown_without_the_password() {
        let e = endpoint(5432);
        assert_eq!(e.to_string(), "db.internal:5432/app");
        assert!(!format!("{e:?}").contains("hunter2"));
        let e = Endpoint {
            database: None,
            ..endpoint(3306)
        };
        assert_eq!(e.to_string(), "db.internal:3306/");
    }

    #[test]
    fn a_ca_file_turns_tls_on() {
        let plain = endpoint(5432);
        assert!(!plain.tls_on());
        assert!(Endpoint {
            tls: true,
            ..plain.clone()
        }
        .tls_on());
        assert!(Endpoint {
            tls_ca_file: Some("/ca.pem".into()),
            ..plain
        }
        .tls_on());
    }
}
