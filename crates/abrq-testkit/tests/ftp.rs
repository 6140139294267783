//! Plain FTP through suppaftp, against the FTP service of scripts/services.sh.

#[path = "support/ftp_roundtrip.rs"]
mod ftp_roundtrip;

use std::time::Duration;

use abrq_testkit::{names, Ftp};
use suppaftp::tokio::AsyncFtpStream;
use tokio::time::timeout;

#[tokio::test]
async fn ftp_upload_rename_list_download() {
    let server = Ftp::from_env();
    let mut ftp = timeout(
        Duration::from_secs(10),
        AsyncFtpStream::connect(server.addr()),
    )
    .await
    .unwrap_or_else(|_| panic!("ftp at {} timed out", server.addr()))
    .unwrap_or_else(|e| panic!("ftp at {} is unreachable: {e}", server.addr()));
    ftp.login(server.user.as_str(), server.password.expose())
        .await
        .expect("login");

    ftp_roundtrip::round_trip(&mut ftp, &names::dir("ftp-smoke")).await;

    ftp.quit().await.expect("quit");
}
