//! SIGKILL durability: a child process (this test binary, re-executed with
//! an environment variable) stages batches with cursors in a loop and
//! reports each acknowledged seq; the parent kills it at an arbitrary moment,
//! reopens the file and checks that every acknowledged batch is there, seqs
//! are gapless, no batch is torn, and the cursor is the last batch's.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use abrq_core::{Item, Record};
use abrq_state::{NewBatch, SpoolRead, SpoolWrite, SqliteStore, StageOutcome};
use serde_json::{json, Map, Value};

const CHILD_DB: &str = "ABRQ_STATE_CRASH_CHILD_DB";
const RECORDS: u64 = 50;
const STREAM: &str = "crash";

fn record(seq: u64, i: u64) -> Item {
    let Value::Object(fields) = json!({"seq": seq, "i": i, "pad": "x".repeat(150)}) else {
        unreachable!("a json object literal")
    };
    Item::Record(Record::insert(fields))
}

fn cursor_for(seq: u64) -> String {
    format!("cursor-{seq}")
}

/// The child's body; a no-op unless started by the parent below.
#[tokio::test]
async fn crash_child() {
    let Ok(path) = std::env::var(CHILD_DB) else {
        return;
    };
    let store = SqliteStore::open(Path::new(&path)).expect("open");
    let mut seq = store
        .register_stream(STREAM)
        .await
        .expect("register")
        .last_seq;
    let mut out = std::io::stdout().lock();
    loop {
        seq += 1;
        let items: Vec<Item> = (0..RECORDS).map(|i| record(seq, i)).collect();
        let batch = NewBatch::from_items(&items, 0).expect("encodable items");
        let outcome = store
            .stage(STREAM, vec![batch], Some(cursor_for(seq)), None)
            .await
            .expect("stage");
        assert_eq!(outcome, StageOutcome::Staged(vec![seq]));
        writeln!(out, "staged {seq}").expect("report");
        out.flush().expect("flush");
    }
}

#[test]
fn sigkill_never_loses_or_tears_a_staged_batch() {
    if std::env::var_os(CHILD_DB).is_some() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.db");
    let exe = std::env::current_exe().expect("test binary");
    let mut acknowledged = 0;
    for round in 0..6u64 {
        let mut child = Command::new(&exe)
            .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_DB, &path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start child");
        let stdout = child.stdout.take().expect("child stdout");
        let want = 10 + round * 7;
        let mut seen = 0;
        // Kept open until the child is dead: closing the pipe earlier would
        // make the child's next report fail and stop it before the kill.
        let mut lines = BufReader::new(stdout).lines();
        for seq in lines.by_ref().filter_map(staged) {
            acknowledged = seq;
            seen += 1;
            if seen == want {
                break;
            }
        }
        assert_eq!(seen, want, "the child stopped early (round {round})");
        // Let it get into its next transaction, then pull the plug.
        std::thread::sleep(Duration::from_millis(round % 3));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        // Reports written while we slept were acknowledged too.
        if let Some(seq) = lines.filter_map(staged).last() {
            acknowledged = seq;
        }
        verify(&path, acknowledged);
    }
}

fn staged(line: std::io::Result<String>) -> Option<u64> {
    let line = line.expect("read child output");
    Some(line.strip_prefix("staged ")?.parse().expect("a seq"))
}

fn verify(path: &Path, acknowledged: u64) {
    let conn = rusqlite::Connection::open(path).expect("open raw");
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok");
    drop(conn);

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = SqliteStore::open(path).expect("reopen");
        let stats = store.spool_stats(STREAM).await.expect("stats");
        let last = stats.last_seq;
        assert!(
            last >= acknowledged,
            "acknowledged seq {acknowledged} lost (last {last})"
        );
        // One in-flight commit may have landed without its acknowledgement.
        assert!(last <= acknowledged + 1, "last {last} after {acknowledged}");
        assert_eq!((stats.batches, stats.first_seq), (last, Some(1)));
        assert_eq!(stats.records, last * RECORDS);
        assert_eq!(
            store.cursor(STREAM).await.expect("cursor"),
            Some(cursor_for(last))
        );
        for seq in 1..=last {
            let batch = store
                .next_batch(STREAM, seq - 1)
                .await
                .expect("read")
                .expect("batch");
            assert_eq!(batch.meta.seq, seq, "gap before {seq}");
            assert_eq!(batch.items.len() as u64, RECORDS, "torn batch {seq}");
            for (i, item) in batch.items.iter().enumerate() {
                let fields: &Map<String, Value> = &item.as_record().expect("record").fields;
                assert_eq!(fields["seq"], json!(seq));
                assert_eq!(fields["i"], json!(i));
            }
        }
        assert!(store
            .next_batch(STREAM, last)
            .await
            .expect("read")
            .is_none());
    });
}
