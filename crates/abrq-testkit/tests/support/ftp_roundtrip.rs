//! What the FTP and FTPS destinations do, run on one logged-in session:
//! upload to a temporary name, rename over an existing final name, list,
//! download. Everything happens in the test's own directory.

use chrono::Utc;
use suppaftp::tokio::{ImplAsyncFtpStream, TokioTlsStream};
use suppaftp::types::FileType;
use tokio::io::AsyncReadExt;

pub async fn round_trip<T: TokioTlsStream + Send>(ftp: &mut ImplAsyncFtpStream<T>, dir: &str) {
    ftp.transfer_type(FileType::Binary)
        .await
        .expect("binary mode");
    let day = format!("{dir}/dt={}", Utc::now().format("%Y-%m-%d"));
    for path in [dir, day.as_str()] {
        ftp.mkdir(path)
            .await
            .unwrap_or_else(|e| panic!("mkdir {path}: {e}"));
    }
    ftp.cwd(&day).await.expect("cwd");

    // an earlier delivery of the same batch already left the final name
    upload(ftp, "part-1.jsonl", b"{\"v\":1}\n").await;
    upload(ftp, ".part-1.jsonl.tmp", b"{\"v\":2}\n").await;
    ftp.rename(".part-1.jsonl.tmp", "part-1.jsonl")
        .await
        .expect("rename over the existing name");

    let mut names = ftp.nlst(None).await.expect("list");
    names.sort();
    assert_eq!(names, ["part-1.jsonl"]);
    assert_eq!(download(ftp, "part-1.jsonl").await, b"{\"v\":2}\n");

    ftp.rm("part-1.jsonl").await.expect("remove file");
    ftp.cwd("/").await.expect("cwd /");
    for path in [day.as_str(), dir] {
        ftp.rmdir(path)
            .await
            .unwrap_or_else(|e| panic!("rmdir {path}: {e}"));
    }
}

async fn upload<T: TokioTlsStream + Send>(
    ftp: &mut ImplAsyncFtpStream<T>,
    name: &str,
    body: &[u8],
) {
    let mut reader = body;
    ftp.put_file(name, &mut reader)
        .await
        .unwrap_or_else(|e| panic!("upload {name}: {e}"));
}

async fn download<T: TokioTlsStream + Send>(
    ftp: &mut ImplAsyncFtpStream<T>,
    name: &str,
) -> Vec<u8> {
    let mut stream = ftp
        .retr_as_stream(name)
        .await
        .unwrap_or_else(|e| panic!("download {name}: {e}"));
    let mut body = Vec::new();
    stream.read_to_end(&mut body).await.expect("read download");
    stream.finish().await.expect("finish download");
    body
}
