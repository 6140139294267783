//! Explicit FTPS (TLS on control and data, passive) through suppaftp and
//! rustls, against the FTPS service of scripts/services.sh, trusting the
//! certificate it made as the only root.

#[path = "support/ftp_roundtrip.rs"]
mod ftp_roundtrip;

use std::sync::Arc;
use std::time::Duration;

use abrq_testkit::{names, Ftps};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use suppaftp::tokio::{AsyncRustlsConnector, AsyncRustlsFtpStream};
use suppaftp::tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use suppaftp::tokio_rustls::TlsConnector;
use tokio::time::timeout;

fn connector(server: &Ftps) -> AsyncRustlsConnector {
    let pem = std::fs::read(&server.ca_file).unwrap_or_else(|e| {
        panic!(
            "read {} (made by scripts/services.sh up): {e}",
            server.ca_file.display()
        )
    });
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(cert.expect("a pem certificate"))
            .expect("a usable root");
    }
    // name the provider: more than one may be compiled in, so none is the default
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    AsyncRustlsConnector::from(TlsConnector::from(Arc::new(config)))
}

#[tokio::test]
async fn ftps_upload_rename_list_download() {
    let server = Ftps::from_env();
    let plain = timeout(
        Duration::from_secs(10),
        AsyncRustlsFtpStream::connect(server.addr()),
    )
    .await
    .unwrap_or_else(|_| panic!("ftps at {} timed out", server.addr()))
    .unwrap_or_else(|e| panic!("ftps at {} is unreachable: {e}", server.addr()));
    let mut ftp = plain
        .into_secure(connector(&server), server.tls_domain())
        .await
        .expect("tls handshake");
    ftp.login(server.ftp.user.as_str(), server.ftp.password.expose())
        .await
        .expect("login");

    ftp_roundtrip::round_trip(&mut ftp, &names::dir("ftps-smoke")).await;

    ftp.quit().await.expect("quit");
}
