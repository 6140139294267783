//! TLS for the replication connection. pgwire-replication's own TLS turns
//! on rustls' default provider (aws-lc), which this build keeps out; so
//! the replication client talks plain protocol to a loopback end that
//! abrq opens for that one session, and the tunnel behind it speaks TLS
//! to the server with ring and the same trust as every other connection
//! (the `tls_ca_file` PEM, Mozilla's roots otherwise), verifying the
//! server's name. The handshake happens before the client connects, so a
//! certificate the server cannot prove is an error that says so.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

/// PostgreSQL's SSLRequest: length 8, code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// The loopback end of one TLS session to the server; closes with it.
pub struct Tunnel {
    pub local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Trusts the PEM file's certificates when one is named, Mozilla's public
/// roots otherwise.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| format!("cannot read tls_ca_file {}: {e}", path.display()))?;
            for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(format!(
                    "tls_ca_file {} holds no certificate",
                    path.display()
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Connects to the server, asks for TLS and completes the handshake, then
/// waits on a loopback port for the replication client's one connection.
pub async fn open(host: &str, port: u16, config: Arc<ClientConfig>) -> Result<Tunnel, String> {
    let mut server = TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    server
        .write_all(&SSL_REQUEST)
        .await
        .map_err(|e| format!("cannot ask {host}:{port} for TLS: {e}"))?;
    let mut answer = [0u8; 1];
    server
        .read_exact(&mut answer)
        .await
        .map_err(|e| format!("cannot ask {host}:{port} for TLS: {e}"))?;
    if answer[0] != b'S' {
        return Err(format!(
            "{host}:{port} does not take TLS (ssl = off on the server)"
        ));
    }
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host:?} is not a name TLS can verify: {e}"))?;
    let mut tls = TlsConnector::from(config)
        .connect(name, server)
        .await
        .map_err(|e| format!("TLS to {host}:{port}: {e}"))?;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot open the loopback end of the TLS tunnel: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot open the loopback end of the TLS tunnel: {e}"))?;
    let task = tokio::spawn(async move {
        // one session: the first connection, then no one else
        let Ok((mut client, _)) = listener.accept().await else {
            return;
        };
        drop(listener);
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut tls).await {
            tracing::debug!(error = %e, "replication TLS tunnel closed");
        }
    });
    Ok(Tunnel { local, task })
}
