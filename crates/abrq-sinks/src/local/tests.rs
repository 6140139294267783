//! The local engine against real files in temp dirs: the shared object
//! suite, then what only a filesystem can show (no temp files left, one
//! file per replayed batch, a file where a directory should be).

use std::path::Path;

use abrq_core::config::Config;
use abrq_core::Destination;
use sha2::{Digest, Sha256};

use super::LocalTransport;
use crate::object::conformance::{self, sample_batch, settings};
use crate::object::{naming, ObjectDestination, ObjectFormat, ObjectTransport};

fn transport() -> (tempfile::TempDir, LocalTransport) {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTransport::new(dir.path().join("out"));
    (dir, t)
}

/// Every file under `root`, as sorted `/`-separated relative paths.
fn files(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out.sort();
    out
}

#[tokio::test]
async fn conformance_transport_basics() {
    let (_d, t) = transport();
    conformance::transport_basics(&t).await;
}

#[tokio::test]
async fn conformance_every_format_round_trips() {
    let (_d, t) = transport();
    conformance::every_format_round_trips(&t).await;
}

#[tokio::test]
async fn conformance_manifest_matches_object() {
    let (_d, t) = transport();
    conformance::manifest_matches_object(&t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_group_matches_singles() {
    let (_d, t) = transport();
    conformance::group_matches_singles(&t).await;
}

#[tokio::test]
async fn conformance_check_succeeds() {
    let (_d, t) = transport();
    conformance::check_succeeds(&t).await;
    assert_eq!(
        files(t.root()),
        Vec::<String>::new(),
        "the probe is deleted"
    );
}

#[tokio::test]
async fn replay_leaves_one_file_with_the_same_bytes() {
    let (_d, t) = transport();
    let key = conformance::replay_overwrites(&t).await;
    let path = t.path_of(&key).unwrap();
    let sha = hex::encode(Sha256::digest(std::fs::read(&path).unwrap()));
    let dest = ObjectDestination::new(t.clone(), settings("replay", ObjectFormat::JsonlGz, true));
    dest.deliver(&sample_batch(3)).await.unwrap();
    assert_eq!(
        hex::encode(Sha256::digest(std::fs::read(&path).unwrap())),
        sha
    );
    let p = &sample_batch(3).meta.idempotency_key[..16];
    assert_eq!(
        files(t.root()),
        [
            format!("replay/dt=2021-03-04/part-{p}.jsonl.gz"),
            format!("replay/dt=2021-03-04/part-{p}.jsonl.gz.manifest.json"),
        ]
    );
}

#[tokio::test]
async fn no_temp_files_are_left_behind() {
    let (_d, t) = transport();
    conformance::every_format_round_trips(&t).await;
    conformance::manifest_matches_object(&t).await;
    conformance::replay_overwrites(&t).await;
    conformance::check_succeeds(&t).await;
    let all = files(t.root());
    // round trips, objects with manifests, the replayed pair
    let n = conformance::FORMATS.len();
    assert_eq!(all.len(), n + 2 * n + 2, "{all:#?}");
    for f in &all {
        let name = f.rsplit('/').next().unwrap();
        assert!(name.starts_with("part-"), "stray file {f}");
        assert!(!name.contains(".tmp-"), "temp file left: {f}");
    }
}

#[tokio::test]
async fn a_plain_file_where_a_directory_goes_is_transient() {
    let (d, t) = transport();
    std::fs::create_dir_all(t.root()).unwrap();
    std::fs::write(t.root().join("blocked"), b"not a directory").unwrap();
    let dest = ObjectDestination::new(t.clone(), settings("blocked/sub", ObjectFormat::Csv, true));
    let e = dest.deliver(&sample_batch(1)).await.unwrap_err();
    assert!(e.is_transient(), "{}", e.describe());
    assert!(e.describe().contains("blocked"), "{}", e.describe());
    let io = std::error::Error::source(&e)
        .and_then(|s| s.source())
        .and_then(|s| s.downcast_ref::<std::io::Error>());
    assert!(io.is_some(), "the io::Error stays in the chain");
    assert!(dest.check().await.unwrap_err().is_transient());

    // the base directory itself is a plain file
    let file_root = d.path().join("plain-file");
    std::fs::write(&file_root, b"x").unwrap();
    let dest = ObjectDestination::new(
        LocalTransport::new(&file_root),
        settings("", ObjectFormat::Jsonl, false),
    );
    assert!(dest
        .deliver(&sample_batch(1))
        .await
        .unwrap_err()
        .is_transient());
    assert_eq!(std::fs::read(&file_root).unwrap(), b"x");
}

#[tokio::test]
async fn keys_cannot_leave_the_base_directory() {
    let (d, t) = transport();
    for key in [
        "../escape",
        "a/../../escape",
        "/abs",
        "a//b",
        "",
        "./a",
        "a/.",
    ] {
        let e = t.put(key, "x".into()).await.unwrap_err();
        assert!(e.is_transient(), "{key}");
    }
    assert!(!d.path().join("escape").exists());
}

fn config(extra: &str, root: &Path) -> abrq_core::config::DestinationConfig {
    let root = root.display().to_string();
    let lines = format!("engine = \"local\"\ndatabase = {root:?}\n{extra}");
    Config::destination("lake", &lines).unwrap()
}

#[tokio::test]
async fn built_from_config() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(
        "prefix = \"/exports/orders/\"\nformat = \"csv.gz\"\ndate_partitioning = true\nmanifest = true",
        d.path(),
    );
    let dest = crate::build("orders", &cfg).unwrap();
    assert_eq!(dest.kind(), "local");
    let batch = sample_batch(9);
    let report = dest.deliver(&batch).await.unwrap();
    assert_eq!((report.ignored_truncates, report.ignored_schemas), (2, 2));
    let p = &batch.meta.idempotency_key[..16];
    let key = format!("exports/orders/dt=2021-03-04/part-{p}.csv.gz");
    assert_eq!(files(d.path()), [key.clone(), naming::manifest_key(&key)]);
    let data = std::fs::read(d.path().join(&key)).unwrap();
    assert_eq!(report.bytes, data.len() as u64);
    conformance::assert_holds(ObjectFormat::CsvGz, &data, &batch);
    assert!(dest.check().await.unwrap().detail.contains("\"lake\""));
}

#[test]
fn build_refuses_a_prefix_that_leaves_the_base_directory() {
    let d = tempfile::tempdir().unwrap();
    let e = crate::build("orders", &config("prefix = \"a/../..\"", d.path()))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("prefix"), "{e}");
    assert!(crate::build("orders", &config("prefix = \"/a/b/\"", d.path())).is_ok());
}

/// A temp file name as an earlier process would have made it.
fn stale_temp(final_name: &str) -> String {
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let ms = hour_ago
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!(".{final_name}.tmp-{ms:x}-0000beef")
}

#[tokio::test]
async fn leftovers_of_an_earlier_process_are_swept_where_it_writes() {
    let (dir, t) = transport();
    let day = dir.path().join("out/p/dt=2026-07-30");
    let other_day = dir.path().join("out/p/dt=2026-07-29");
    let stale = stale_temp("part-1.jsonl.gz");
    for d in [&day, &other_day] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join(&stale), "half").unwrap();
    }
    // the format of earlier versions, random only
    std::fs::write(day.join(".part-2.csv.tmp-0123456789abcdef"), "half").unwrap();
    // a write in flight (made after this process started) and real data
    let in_flight = crate::object::temp::temp_name("part-3.jsonl");
    std::fs::write(day.join(&in_flight), "being written").unwrap();
    std::fs::write(day.join("part-4.jsonl"), "{}\n").unwrap();

    t.put("p/dt=2026-07-30/part-5.jsonl", "{}\n".into())
        .await
        .unwrap();
    let left = files(&dir.path().join("out"));
    assert_eq!(
        left,
        [
            format!("p/dt=2026-07-29/{stale}"),
            format!("p/dt=2026-07-30/{in_flight}"),
            "p/dt=2026-07-30/part-4.jsonl".to_string(),
            "p/dt=2026-07-30/part-5.jsonl".to_string(),
        ],
        "only the directory written to is swept, and only of leftovers"
    );
}
