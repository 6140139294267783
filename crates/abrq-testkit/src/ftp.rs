//! FTP and explicit FTPS: pyftpdlib, from `scripts/services.sh`.

use std::path::PathBuf;

use crate::env::{cache_dir, port, var, Secret};

/// Where the plain FTP server is and how to log in.
#[derive(Clone, Debug)]
pub struct Ftp {
    /// `ABRQ_TEST_FTP_HOST`
    pub host: String,
    /// `ABRQ_TEST_FTP_PORT`
    pub port: u16,
    /// `ABRQ_TEST_FTP_USER`
    pub user: String,
    /// `ABRQ_TEST_FTP_PASSWORD`
    pub password: Secret,
}

impl Ftp {
    pub fn from_env() -> Self {
        Self {
            host: var("ABRQ_TEST_FTP_HOST", "127.0.0.1"),
            port: port("ABRQ_TEST_FTP_PORT", 2121),
            user: var("ABRQ_TEST_FTP_USER", "abrq"),
            password: Secret::new(var("ABRQ_TEST_FTP_PASSWORD", "abrq-test")),
        }
    }

    /// `host:port`, for connecting.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Where the explicit FTPS server is: the FTP server's host and login, its
/// own port, and the certificate to trust as a root.
#[derive(Clone, Debug)]
pub struct Ftps {
    pub ftp: Ftp,
    /// `ABRQ_TEST_FTPS_PORT`
    pub port: u16,
    /// `ABRQ_TEST_FTPS_CA_FILE`: PEM; defaults to the certificate
    /// `scripts/services.sh` made under the cache directory.
    pub ca_file: PathBuf,
}

impl Ftps {
    pub fn from_env() -> Self {
        let default_ca = cache_dir().join("certs").join("ftps.crt");
        Self {
            ftp: Ftp::from_env(),
            port: port("ABRQ_TEST_FTPS_PORT", 2990),
            ca_file: PathBuf::from(var("ABRQ_TEST_FTPS_CA_FILE", &default_ca.to_string_lossy())),
        }
    }

    /// `host:port`, for connecting.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ftp.host, self.port)
    }

    /// The name the server's certificate must match.
    pub fn tls_domain(&self) -> &str {
        &self.ftp.host
    }
}
