//! PostgreSQL and MariaDB: the machine's own servers, checked (not started)
//! by `scripts/services.sh`.

use std::fmt;

use anyhow::Context;
use reqwest::Url;

use crate::env::var;

/// Where PostgreSQL is: a URL of a database the user may create databases from.
#[derive(Clone)]
pub struct Postgres {
    /// `ABRQ_TEST_POSTGRES_URL`
    pub url: String,
}

impl Postgres {
    pub fn from_env() -> Self {
        Self {
            url: var(
                "ABRQ_TEST_POSTGRES_URL",
                "postgres://postgres@127.0.0.1:5432/test",
            ),
        }
    }

    /// The same server and user, connected to database `name`.
    pub fn url_for(&self, name: &str) -> anyhow::Result<String> {
        with_database(&self.url, name)
    }
}

/// Where MariaDB (or MySQL) is: a URL of a user that may create databases.
#[derive(Clone)]
pub struct Mysql {
    /// `ABRQ_TEST_MYSQL_URL`
    pub url: String,
}

impl Mysql {
    pub fn from_env() -> Self {
        Self {
            url: var("ABRQ_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
        }
    }

    /// The same server and user, connected to database `name`.
    pub fn url_for(&self, name: &str) -> anyhow::Result<String> {
        with_database(&self.url, name)
    }
}

impl fmt::Debug for Postgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Postgres")
            .field("url", &redacted(&self.url))
            .finish()
    }
}

impl fmt::Debug for Mysql {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mysql")
            .field("url", &redacted(&self.url))
            .finish()
    }
}

/// The URL with its password shown as `***`.
fn redacted(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.into()
        }
        Ok(_) => url.to_owned(),
        Err(_) => "***".to_owned(),
    }
}

fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let mut url = Url::parse(url).with_context(|| format!("bad database url {url}"))?;
    url.set_path(name);
    Ok(url.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_hidden_in_debug() {
        let my = Mysql {
            url: "mysql://root:hunter2@127.0.0.1:3306/test".to_owned(),
        };
        let shown = format!("{my:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("root:***@"), "{shown}");
    }

    #[test]
    fn url_for_swaps_only_the_database() {
        let pg = Postgres {
            url: "postgres://u:p@127.0.0.1:5432/test?sslmode=disable".to_owned(),
        };
        assert_eq!(
            pg.url_for("abrq_x").unwrap(),
            "postgres://u:p@127.0.0.1:5432/abrq_x?sslmode=disable"
        );
    }
}
