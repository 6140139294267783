//! How the state connection is protected. The state holds leases,
//! cursors and every spooled batch, so it gets the listener's rule: off
//! loopback, nothing goes in plaintext without consent. sqlx's default,
//! `sslmode=prefer`, is TLS without certificate checks that falls back to
//! plaintext; a URL off loopback that names no `sslmode` gets
//! `verify-full` instead (the server's certificate and name checked
//! against `sslrootcert`, else the public roots).

use std::net::IpAddr;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// The options to connect with, and a line that says how the connection
/// is protected (`abrq check` prints it).
#[derive(Debug)]
pub struct Transport {
    pub options: PgConnectOptions,
    pub described: String,
}

/// `url`'s options under the rule above; an error says what to change.
/// `allow_plaintext` is `state.allow_plaintext`.
pub fn transport(
    url: &str,
    options: PgConnectOptions,
    allow_plaintext: bool,
) -> Result<Transport, String> {
    if let Some(socket) = options.get_socket() {
        let described = format!("Unix socket {} (no network)", socket.display());
        return Ok(Transport { options, described });
    }
    let host = options.get_host().to_string();
    if host.starts_with('/') {
        let described = format!("Unix socket in {host} (no network)");
        return Ok(Transport { options, described });
    }
    let root = param(url, &["sslrootcert", "ssl-root-cert"]);
    let named =
        param(url, &["sslmode", "ssl-mode"]).is_some() || std::env::var_os("PGSSLMODE").is_some();
    let loopback = is_loopback(&host);
    let options = match (named, loopback) {
        (false, false) => options.ssl_mode(PgSslMode::VerifyFull),
        _ => options,
    };
    let mode = options.get_ssl_mode();
    let plaintext = matches!(
        mode,
        PgSslMode::Disable | PgSslMode::Allow | PgSslMode::Prefer
    );
    if plaintext && !loopback && !allow_plaintext {
        return Err(format!(
            "state.url: sslmode={} may send the state (leases, cursors, every spooled \
             batch) to {host} in plaintext; use sslmode=verify-full with \
             sslrootcert=<the server's CA file>, or set state.allow_plaintext = true to consent",
            mode_name(mode)
        ));
    }
    let roots = root.map_or("the public roots".to_string(), |f| f.to_string());
    let mut described = match mode {
        PgSslMode::Disable => "plaintext".to_string(),
        PgSslMode::Allow | PgSslMode::Prefer => format!(
            "TLS if the server offers it, its certificate not checked, else plaintext \
             (sslmode={})",
            mode_name(mode)
        ),
        PgSslMode::Require => {
            "TLS, the server's certificate not checked (sslmode=require)".to_string()
        }
        PgSslMode::VerifyCa => format!(
            "TLS, the server's certificate checked against {roots}, its name not \
             (sslmode=verify-ca)"
        ),
        PgSslMode::VerifyFull => format!(
            "TLS, the server's certificate and name checked against {roots} \
             (sslmode=verify-full)"
        ),
    };
    if plaintext {
        described.push_str(match loopback {
            true => "; loopback",
            false => "; off loopback, allowed by state.allow_plaintext",
        });
    }
    Ok(Transport { options, described })
}

fn mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

/// A query parameter of the URL, by any of its names.
fn param<'a>(url: &'a str, names: &[&str]) -> Option<&'a str> {
    let (_, query) = url.split_once('?')?;
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        names.contains(&k).then_some(v)
    })
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn check(url: &str, allow: bool) -> Result<Transport, String> {
        transport(url, PgConnectOptions::from_str(url).unwrap(), allow)
    }

    #[test]
    fn off_loopback_a_url_without_sslmode_verifies_the_server() {
        let t = check("postgres://u@db.internal/abrq", false).unwrap();
        assert!(matches!(t.options.get_ssl_mode(), PgSslMode::VerifyFull));
        assert!(t.described.contains("public roots"), "{}", t.described);
        let t = check(
            "postgres://u@10.1.2.3/abrq?sslmode=verify-full&sslrootcert=/etc/ca.pem",
            false,
        )
        .unwrap();
        assert!(t.described.contains("/etc/ca.pem"), "{}", t.described);
    }

    #[test]
    fn off_loopback_plaintext_needs_consent() {
        for mode in ["disable", "allow", "prefer"] {
            let url = format!("postgres://u@db.internal/abrq?sslmode={mode}");
            let e = check(&url, false).unwrap_err();
            assert!(e.contains("state.allow_plaintext"), "{e}");
            assert!(e.contains(&format!("sslmode={mode}")), "{e}");
            let t = check(&url, true).unwrap();
            assert!(t.described.contains("allowed by state.allow_plaintext"));
        }
        let t = check("postgres://u@db.internal/abrq?sslmode=require", false).unwrap();
        assert!(t.described.contains("not checked"), "{}", t.described);
    }

    #[test]
    fn loopback_and_sockets_are_left_as_the_url_says() {
        for url in [
            "postgres://u@127.0.0.1/abrq",
            "postgres://u@localhost:5433/abrq",
            "postgres://u@[::1]/abrq?sslmode=disable",
        ] {
            let t = check(url, false).unwrap();
            assert!(
                t.described.ends_with("; loopback"),
                "{url}: {}",
                t.described
            );
        }
        let t = check("postgres://u@%2Fvar%2Frun%2Fpostgresql/abrq", false).unwrap();
        assert!(t.described.contains("Unix socket"), "{}", t.described);
    }
}
