//! Shared by the `ftp_*` integration tests: settings for the test servers
//! in a fresh base directory, a raw session for looking at what landed,
//! batches that say which batch they are, and a complete-content check.

#![allow(dead_code)] // each test file uses its own part of this

pub mod fake;

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use abrq_core::config::Secret;
use abrq_core::{idempotency_key, Batch, BatchMeta, Item, Op, Record};
use abrq_sinks::ftp::session::{self, Session, TlsCache};
use abrq_sinks::ftp::FtpSettings;
use abrq_sinks::object::{naming, ObjectFormat, ObjectSettings};
use abrq_testkit::{names, Ftp, Ftps};
use chrono::{TimeZone, Utc};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

/// The plain FTP server, a fresh absolute base directory.
pub fn ftp(test: &str) -> FtpSettings {
    let s = Ftp::from_env();
    settings(false, &s, s.port, None, test)
}

/// The FTPS server, trusting its self-signed certificate.
pub fn ftps(test: &str) -> FtpSettings {
    let s = Ftps::from_env();
    settings(true, &s.ftp, s.port, Some(s.ca_file.clone()), test)
}

fn settings(
    secure: bool,
    s: &Ftp,
    port: u16,
    ca_file: Option<std::path::PathBuf>,
    test: &str,
) -> FtpSettings {
    FtpSettings {
        secure,
        host: s.host.clone(),
        port,
        username: s.user.clone(),
        password: Secret::new(s.password.expose()),
        base_dir: format!("/{}", names::dir(test)),
        ca_file,
        connect_timeout: Duration::from_secs(10),
        op_timeout: Duration::from_secs(30),
    }
}

/// Object settings as the engine defaults them: jsonl.gz with manifests.
pub fn object_settings(prefix: &str) -> ObjectSettings {
    ObjectSettings {
        stream: "orders".into(),
        destination: "lake".into(),
        prefix: naming::normalize_prefix(prefix).into(),
        format: ObjectFormat::JsonlGz,
        date_partitioning: true,
        manifest: true,
    }
}

/// A logged-in session of the same client, for looking around.
pub async fn raw(settings: &FtpSettings) -> Session {
    session::open(settings, &TlsCache::default())
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", settings.server()))
}

/// Batch `seq` with `rows` records, each carrying its batch's seq.
pub fn batch(seq: u64, rows: u64) -> Batch {
    let items: Vec<Item> = (0..rows)
        .map(|i| {
            let v =
                json!({"seq": seq, "i": i, "text": format!("row {i} of batch {seq} ").repeat(4)});
            let serde_json::Value::Object(fields) = v else {
                unreachable!()
            };
            Item::Record(Record {
                op: Op::Insert,
                fields,
            })
        })
        .collect();
    Batch {
        meta: BatchMeta {
            stream: "orders".into(),
            seq,
            idempotency_key: idempotency_key(uuid::Uuid::from_u128(0xf7), seq, uuid::Uuid::nil()),
            staged_at: Utc.with_ymd_and_hms(2026, 7, 30, 12, 0, 0).unwrap(),
            records: rows,
            bytes: 0,
        },
        items,
        lines: None,
    }
}

/// Object name (not path) of batch `seq`'s jsonl.gz object.
pub fn object_name(seq: u64) -> String {
    let key = idempotency_key(uuid::Uuid::from_u128(0xf7), seq, uuid::Uuid::nil());
    format!("part-{}.jsonl.gz", &key[..16])
}

/// Checks that a jsonl.gz object is whole: the gzip stream ends properly,
/// every line is JSON, there are `rows` of them, all from batch `seq`.
pub fn assert_complete(name: &str, data: &[u8], seq: u64, rows: u64) {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut text)
        .unwrap_or_else(|e| panic!("{name}: {} bytes do not decompress: {e}", data.len()));
    let lines: Vec<&[u8]> = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len() as u64, rows, "{name}: row count");
    for line in lines {
        let v: serde_json::Value = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("{name}: a line is not JSON: {e}"));
        assert_eq!(v["seq"], seq, "{name}: a row of another batch");
    }
}

/// Checks a manifest against the object it describes.
pub fn assert_manifest(name: &str, manifest: &[u8], object: &[u8]) {
    let m: serde_json::Value = serde_json::from_slice(manifest)
        .unwrap_or_else(|e| panic!("{name}: manifest is not whole JSON: {e}"));
    assert_eq!(m["bytes"], object.len() as u64, "{name}");
    assert_eq!(m["sha256"], hex::encode(Sha256::digest(object)), "{name}");
}

/// Downloads a whole file on a raw session.
pub async fn download(s: &mut Session, path: &str) -> Result<Vec<u8>, suppaftp::FtpError> {
    let mut stream = s.retr_as_stream(path).await?;
    let mut body = Vec::new();
    stream
        .read_to_end(&mut body)
        .await
        .map_err(suppaftp::FtpError::ConnectionError)?;
    stream.finish().await?;
    Ok(body)
}

/// Every file below `dir`, as path → size, recursing with MLSD.
pub async fn walk(s: &mut Session, dir: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_string()];
    while let Some(d) = todo.pop() {
        let lines = s
            .mlsd(Some(&d))
            .await
            .unwrap_or_else(|e| panic!("MLSD {d}: {e}"));
        for line in lines {
            let f = suppaftp::list::ListParser::parse_mlsd(&line)
                .unwrap_or_else(|e| panic!("MLSD line {line:?}: {e:?}"));
            let path = format!("{d}/{}", f.name());
            if f.is_directory() {
                todo.push(path);
            } else {
                out.insert(path, f.size());
            }
        }
    }
    out
}
