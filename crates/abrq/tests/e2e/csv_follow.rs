//! A followed CSV file whose quoted field spans lines, through the real
//! binary: while the writer is inside the quotes nothing of that record is
//! staged, a restart then resumes before it, and once the quote closes the
//! record is delivered whole, once, with the records after it.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Map, Value};

const STREAM: &str = "notes";

fn append(path: &Path, bytes: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the input file");
    f.write_all(bytes.as_bytes()).expect("append");
    f.sync_all().expect("fsync the input file");
}

/// The local destination's records in id order; each id at most once.
fn delivered(abrq: &Abrq) -> Vec<Map<String, Value>> {
    let out = read_dest(&abrq.path("out/local"));
    by_id(&out, "id").into_values().cloned().collect()
}

fn rec(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

async fn wait_delivered(abrq: &Abrq, n: usize) {
    abrq.wait_for(
        &format!("{n} records at the local destination"),
        async || delivered(abrq).len() >= n,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn csv_quoted_newline_is_staged_only_once_the_quote_closes() {
    let mut abrq = Abrq::new();
    let input = abrq.path("in/notes.csv");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    append(&input, "id,note\n0,first\n");
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[[streams]]
name = "{STREAM}"
[streams.source]
engine = "file"
path = "{input}"
follow = true
[streams.batch]
max_records = 100
max_wait = "50ms"

[[streams.destinations]]
name = "local"
engine = "local"
database = "{local}"
format = "jsonl"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        input = input.display(),
        local = abrq.p("out/local"),
    ));
    abrq.start().await;
    wait_delivered(&abrq, 1).await;

    // The writer is inside a quoted field: a newline, but no record end.
    append(&input, "1,\"multi\n");
    // Well past max_wait and the follow poll: a cut-off record would be
    // staged by now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let st = abrq.status(STREAM).await;
    assert_eq!(
        u(&st["spool"]["last_seq"]),
        1,
        "staged a cut-off record: {st}"
    );
    assert!(st["source"]["error"].is_null(), "{st}");
    assert_eq!(
        delivered(&abrq),
        vec![rec(json!({"id": 0, "note": "first"}))]
    );

    // A restart resumes from the staged cursor, which is before the open
    // record, not in it.
    abrq.kill();
    abrq.start().await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let st = abrq.status(STREAM).await;
    assert_eq!(u(&st["spool"]["last_seq"]), 1, "{st}");
    assert!(st["source"]["error"].is_null(), "{st}");

    append(&input, "line\"\n2,\"after, a \"\"quote\"\"\"\n");
    wait_delivered(&abrq, 3).await;
    abrq.kill();
    abrq.start().await;
    append(&input, "3,last\n");
    wait_delivered(&abrq, 4).await;
    let st = abrq.status(STREAM).await;
    assert!(st["source"]["error"].is_null(), "{st}");

    let want: Vec<_> = [
        json!({"id": 0, "note": "first"}),
        json!({"id": 1, "note": "multi\nline"}),
        json!({"id": 2, "note": "after, a \"quote\""}),
        json!({"id": 3, "note": "last"}),
    ]
    .into_iter()
    .map(rec)
    .collect();
    assert_eq!(delivered(&abrq), want);
}
