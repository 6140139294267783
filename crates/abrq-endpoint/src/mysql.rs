//! MySQL connect options from an [`Endpoint`]: sqlx's (the mysql
//! destination) and mysql_async's (the mysql source).

use crate::Endpoint;

#[cfg(feature = "mysql")]
impl Endpoint {
    /// sqlx's options for this MySQL server: TLS verify-identity or off
    /// ([`Endpoint::tls_on`]). Session settings (character set, time zone)
    /// are the caller's.
    pub fn mysql(&self) -> sqlx::mysql::MySqlConnectOptions {
        use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
        let mut o = MySqlConnectOptions::new()
            .host(&self.host)
            .port(self.port)
            .ssl_mode(if self.tls_on() {
                MySqlSslMode::VerifyIdentity
            } else {
                MySqlSslMode::Disabled
            });
        if let Some(ca) = &self.tls_ca_file {
            o = o.ssl_ca(ca);
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

#[cfg(feature = "mysql-async")]
impl Endpoint {
    /// mysql_async's options for this MySQL server; the user is root when
    /// none is given. With TLS on, the server is verified against the CA
    /// file (or the built-in roots); mysql_async is built without TLS here,
    /// so such a connection fails, saying so, rather than going in clear.
    pub fn mysql_async(&self) -> mysql_async::Opts {
        let mut b = mysql_async::OptsBuilder::default()
            .ip_or_hostname(self.host.clone())
            .tcp_port(self.port)
            .db_name(self.database.clone())
            .user(Some(self.username.as_deref().unwrap_or("root")));
        if let Some(p) = &self.password {
            b = b.pass(Some(p.expose().to_string()));
        }
        if self.tls_on() {
            let roots = self.tls_ca_file.iter().cloned().map(Into::into).collect();
            b = b.ssl_opts(mysql_async::SslOpts::default().with_root_certs(roots));
        }
        b.into()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(any(feature = "mysql", feature = "mysql-async"))]
    use crate::tests::endpoint;
    #[cfg(any(feature = "mysql", feature = "mysql-async"))]
    use crate::Endpoint;

    #[cfg(feature = "mysql")]
    #[test]
    fn sqlx_options_take_every_field() {
        use sqlx::mysql::MySqlSslMode;
        let o = endpoint(3307).mysql();
        assert_eq!((o.get_host(), o.get_port()), ("db.internal", 3307));
        assert_eq!(o.get_username(), "abrq");
        assert_eq!(o.get_database(), Some("app"));
        assert!(matches!(o.get_ssl_mode(), MySqlSslMode::Disabled));
        let ca = Endpoint {
            tls_ca_file: Some("/ca.pem".into()),
            ..endpoint(3306)
        };
        assert!(matches!(
            ca.mysql().get_ssl_mode(),
            MySqlSslMode::VerifyIdentity
        ));
    }

    #[cfg(feature = "mysql-async")]
    #[test]
    fn mysql_async_options_take_every_field_and_root_by_default() {
        let o = endpoint(3307).mysql_async();
        assert_eq!((o.ip_or_hostname(), o.tcp_port()), ("db.internal", 3307));
        assert_eq!(o.user(), Some("abrq"));
        assert_eq!(o.pass(), Some("hunter2"));
        assert_eq!(o.db_name(), Some("app"));
        assert!(o.ssl_opts().is_none());
        let anonymous = Endpoint {
            username: None,
            password: None,
            database: None,
            ..endpoint(3306)
        }
        .mysql_async();
        assert_eq!(anonymous.user(), Some("root"));
        assert_eq!((anonymous.pass(), anonymous.db_name()), (None, None));
        let ca = Endpoint {
            tls_ca_file: Some("/ca.pem".into()),
            ..endpoint(3306)
        }
        .mysql_async();
        assert_eq!(ca.ssl_opts().unwrap().root_certs().len(), 1);
    }
}
