//! sqlx's PostgreSQL connect options: from an [`Endpoint`] (the postgres
//! destination and source), or from a `postgres://` URL (the state store).

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::Endpoint;

impl Endpoint {
    /// sqlx's options for this PostgreSQL server. TLS is verify-full or off
    /// ([`Endpoint::tls_on`]); `.pgpass` is not read (the password is the
    /// config's); `application_name` names the connection in the server's
    /// `pg_stat_activity`. What the endpoint leaves unset (user, database,
    /// password) is libpq's environment default (`PGUSER`, ...).
    pub fn postgres(&self, application_name: &str) -> PgConnectOptions {
        let mut o = PgConnectOptions::new_without_pgpass()
            .host(&self.host)
            .port(self.port)
            .application_name(application_name)
            .ssl_mode(if self.tls_on() {
                PgSslMode::VerifyFull
            } else {
                PgSslMode::Disable
            });
        if let Some(ca) = &self.tls_ca_file {
            o = o.ssl_root_cert(ca);
        }
        if let Some(u) = &self.username {
            o = o.username(u);
        }
        if let Some(p) = &self.password {
            o = o.password(p.expose());
        }
        if let Some(d) = &self.database {
            o = o.database(d);
        }
        o
    }
}

/// sqlx's options for the server a `postgres://` (or `postgresql://`) URL
/// names, every parameter as the driver reads it (hosts, sockets,
/// `sslmode`, ...); `application_name` when the URL gives none.
pub fn postgres_url(url: &str, application_name: &str) -> Result<PgConnectOptions, sqlx::Error> {
    let options = PgConnectOptions::from_str(url)?;
    Ok(match options.get_application_name() {
        Some(_) => options,
        None => options.application_name(application_name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::endpoint;

    #[test]
    fn every_field_reaches_the_options() {
        let o = endpoint(6543).postgres("abrq source");
        assert_eq!(o.get_host(), "db.internal");
        assert_eq!(o.get_port(), 6543);
        assert_eq!(o.get_username(), "abrq");
        assert_eq!(o.get_database(), Some("app"));
        assert_eq!(o.get_application_name(), Some("abrq source"));
        assert!(matches!(o.get_ssl_mode(), PgSslMode::Disable));
        // the password reaches the options (sqlx's Debug shows it)
        assert!(format!("{o:?}").contains("hunter2"));
    }

    #[test]
    fn tls_is_verified_when_on() {
        let tls = Endpoint {
            tls: true,
            ..endpoint(5432)
        };
        assert!(matches!(
            tls.postgres("abrq").get_ssl_mode(),
            PgSslMode::VerifyFull
        ));
        let ca = Endpoint {
            tls_ca_file: Some("/ca.pem".into()),
            ..endpoint(5432)
        };
        let o = ca.postgres("abrq");
        assert!(matches!(o.get_ssl_mode(), PgSslMode::VerifyFull));
        assert!(format!("{o:?}").contains("/ca.pem"));
    }

    #[test]
    fn a_url_keeps_its_own_application_name() {
        let o = postgres_url("postgres://u@h:5433/d?sslmode=require", "abrq state").unwrap();
        assert_eq!(o.get_application_name(), Some("abrq state"));
        assert!(matches!(o.get_ssl_mode(), PgSslMode::Require));
        assert_eq!((o.get_host(), o.get_port()), ("h", 5433));
        let o = postgres_url("postgres://u@h/d?application_name=mine", "abrq state").unwrap();
        assert_eq!(o.get_application_name(), Some("mine"));
        assert!(postgres_url("postgres://u@h:port/d", "abrq state").is_err());
    }
}
