//! Temporary files that an earlier process left on the server (killed
//! mid-upload, or cut off before it could remove them) are removed from a
//! directory the first time a new transport writes into it; a temp file
//! of a write still in flight and every other file stay.

mod ftp_support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use abrq_sinks::ftp::FtpTransport;
use abrq_sinks::object::temp::temp_name;
use abrq_sinks::object::ObjectTransport;
use tokio::io::AsyncWriteExt;

async fn upload(s: &mut abrq_sinks::ftp::session::Session, path: &str, body: &[u8]) {
    let mut up = s.put_with_stream(path).await.unwrap();
    up.write_all(body).await.unwrap();
    up.finish().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_are_swept_from_the_directory_written_to() {
    for settings in [
        ftp_support::ftp("ftp-leftovers"),
        ftp_support::ftps("ftps-leftovers"),
    ] {
        let dir = format!("{}/p", settings.base_dir);
        let mut s = ftp_support::raw(&settings).await;
        let _ = s.mkdir(&settings.base_dir).await;
        s.mkdir(&dir).await.unwrap();
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let ms = hour_ago.duration_since(UNIX_EPOCH).unwrap().as_millis();
        let stale = format!(".part-1.jsonl.gz.tmp-{ms:x}-0000beef");
        let in_flight = temp_name("part-2.jsonl.gz");
        for name in [
            stale.as_str(),
            ".part-3.csv.tmp-0123456789abcdef",
            &in_flight,
            "part-4.jsonl",
        ] {
            upload(&mut s, &format!("{dir}/{name}"), b"x").await;
        }

        let t = FtpTransport::new(settings.clone());
        t.put("p/part-5.jsonl", "{}\n".into()).await.unwrap();
        let files = ftp_support::walk(&mut s, &settings.base_dir).await;
        let names: Vec<&str> = files
            .keys()
            .map(|p| p.rsplit('/').next().unwrap())
            .collect();
        let mut want = vec![in_flight.as_str(), "part-4.jsonl", "part-5.jsonl"];
        want.sort_unstable();
        assert_eq!(names, want, "{}", settings.server());
    }
}
