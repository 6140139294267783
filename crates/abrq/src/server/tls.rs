//! HTTPS on the listener: the certificate chain and key from PEM files
//! (`server.tls_cert`, `server.tls_key`), read again on SIGHUP without a
//! restart. A new pair that does not load keeps the old one in service.
//! Each pair gets a TLS configuration of its own, session cache included,
//! so no client resumes a session the old certificate authenticated.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use abrq_core::config::ServerConfig;
use anyhow::Context;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// The listener's certificate, reloadable.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    /// Swapped whole: a handshake sees the old pair or the new one.
    current: RwLock<TlsAcceptor>,
}

/// One certificate chain and key for every handshake.
struct Pair(Arc<CertifiedKey>);

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pair")
    }
}

impl ResolvesServerCert for Pair {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl Tls {
    /// The server's TLS, if `tls_cert` and `tls_key` are set; one without
    /// the other is an error naming both.
    pub fn from_config(server: &ServerConfig) -> anyhow::Result<Option<Arc<Tls>>> {
        match (&server.tls_cert, &server.tls_key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => {
                Tls::load(Path::new(cert.as_str()), Path::new(key.as_str())).map(Some)
            }
            _ => {
                anyhow::bail!("server.tls_cert and server.tls_key go together: set both or neither")
            }
        }
    }

    fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<Tls>> {
        // ring, named explicitly: other crates of the build enable a second
        // provider, so there is no process default to fall back on.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let first = acceptor(cert, key, &provider)?;
        Ok(Arc::new(Tls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: RwLock::new(first),
        }))
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the files again; on any error the served pair stays.
    pub fn reload(&self) -> anyhow::Result<()> {
        let next = acceptor(&self.cert, &self.key, &self.provider)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }

    /// Reloads and logs the outcome (SIGHUP): a pair that cannot be read
    /// leaves the previous one in service.
    pub fn reload_logged(&self) {
        match self.reload() {
            Ok(()) => {
                tracing::info!(cert = %self.cert.display(), "SIGHUP: tls certificate reloaded")
            }
            Err(e) => tracing::error!(
                cert = %self.cert.display(),
                error = format!("{e:#}"),
                "SIGHUP: tls certificate reload failed; still serving the previous one"
            ),
        }
    }
}

fn acceptor(
    cert: &Path,
    key: &Path,
    provider: &Arc<CryptoProvider>,
) -> anyhow::Result<TlsAcceptor> {
    let pair = read_pair(cert, key, provider)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("tls protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Pair(Arc::new(pair))));
    // The listener speaks HTTP/1.1 only (see listener.rs).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("server.tls_cert {}", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("server.tls_cert {}: no certificate in it", cert.display());
    }
    let der = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("server.tls_key {}", key.display()))?;
    CertifiedKey::from_der(chain, der, provider).with_context(|| {
        format!(
            "server.tls_key {} does not serve server.tls_cert {}",
            key.display(),
            cert.display()
        )
    })
}
