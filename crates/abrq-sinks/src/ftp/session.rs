//! Opening one logged-in session: TCP, banner, explicit TLS for ftps
//! (AUTH TLS, PBSZ 0, PROT P, so every data connection is TLS too), login,
//! binary mode. Passive mode throughout.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use suppaftp::tokio::{AsyncRustlsConnector, AsyncRustlsFtpStream};
use suppaftp::tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use suppaftp::tokio_rustls::TlsConnector;
use suppaftp::types::FileType;
use suppaftp::FtpError;
use tokio::net::TcpStream;

use super::config::FtpSettings;
use super::errors::Cause;

/// One control connection. The rustls stream type serves plain ftp too:
/// until `into_secure` it is a bare TCP stream, control and data alike.
pub type Session = AsyncRustlsFtpStream;

/// Builds TLS client configs, keeping the first one that loads: its
/// resumption cache lets data connections resume the control connection's
/// TLS session, which servers such as vsftpd (`require_ssl_reuse`) demand.
#[derive(Default)]
pub struct TlsCache(Mutex<Option<Arc<ClientConfig>>>);

impl TlsCache {
    fn get(&self, ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, Cause> {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        // Not kept on failure: the operator may fix the file while we retry.
        let config = Arc::new(client_config(ca_file)?);
        *slot = Some(config.clone());
        Ok(config)
    }
}

/// Trusts only the PEM file's certificates when one is named (a private or
/// self-signed CA), Mozilla's public roots otherwise.
fn client_config(ca_file: Option<&Path>) -> Result<ClientConfig, Cause> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|source| Cause::CaFile {
                path: path.to_path_buf(),
                source,
            })?;
            for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
                // a certificate rustls cannot use is skipped, like browsers do
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(Cause::NoCertificate(path.to_path_buf()));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    // Name the provider: another crate in the build may enable aws-lc-rs
    // too, and then rustls has no process-wide default.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Cause::Ftp(FtpError::SecureError(e.to_string())))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// Connects and logs in; the caller bounds it with the connect timeout.
pub async fn open(settings: &FtpSettings, tls: &TlsCache) -> Result<Session, Cause> {
    // Read the CA first: a bad file should not cost a connection each try.
    let tls_config = match settings.secure {
        true => Some(tls.get(settings.ca_file.as_deref())?),
        false => None,
    };
    let tcp = TcpStream::connect((settings.host.as_str(), settings.port))
        .await
        .map_err(FtpError::ConnectionError)?;
    // Commands are small request/reply pairs: Nagle would add latency to each.
    let _ = tcp.set_nodelay(true);
    let mut ftp = Session::connect_with_stream(tcp)
        .await?
        .passive_stream_builder(|addr| {
            Box::pin(async move {
                let s = TcpStream::connect(addr)
                    .await
                    .map_err(FtpError::ConnectionError)?;
                let _ = s.set_nodelay(true);
                Ok(s)
            })
        });
    if let Some(config) = tls_config {
        let connector = AsyncRustlsConnector::from(TlsConnector::from(config));
        ftp = ftp.into_secure(connector, &settings.host).await?;
    }
    // Connect data channels to the control connection's peer, not to the
    // address in the PASV reply: servers behind NAT announce a private one.
    ftp.set_passive_nat_workaround(true);
    ftp.login(settings.username.as_str(), settings.password.expose())
        .await?;
    // The default, ASCII, would rewrite line endings inside gzip and csv.
    ftp.transfer_type(FileType::Binary).await?;
    Ok(ftp)
}
