use std::io::Write;

use super::FileFormat;
use abrq_core::Item;
use serde_json::json;

use super::FileSource;
use crate::chunk::{Chunk, Limits};
use crate::source::ReadChunk;

const BIG: Limits = Limits {
    max_records: 1000,
    max_bytes: 1 << 20,
};

/// A chunk's records, parsed (CSV) or kept as read (NDJSON).
fn all(c: &Chunk) -> Vec<Item> {
    let mut items = c.items.clone();
    items.extend(c.kept_items().unwrap());
    items
}

fn values(c: &Chunk, key: &str) -> Vec<serde_json::Value> {
    all(c)
        .iter()
        .map(|i| i.as_record().unwrap().fields[key].clone())
        .collect()
}

#[test]
fn ndjson_chunks_and_resumes_from_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.ndjson");
    let body: String = (0..10).map(|i| format!("{{\"i\":{i}}}\n")).collect();
    std::fs::write(&p, body).unwrap();
    let mut s = FileSource::open(&p, FileFormat::Ndjson, false, None).unwrap();
    let lim = Limits {
        max_records: 4,
        max_bytes: 1 << 20,
    };
    let c1 = s.read_chunk(lim).unwrap();
    assert_eq!(
        values(&c1, "i"),
        vec![json!(0), json!(1), json!(2), json!(3)]
    );
    assert!(!c1.at_end);
    // a restart from the staged cursor continues after record 3
    let mut s2 = FileSource::open(&p, FileFormat::Ndjson, false, c1.cursor.as_deref()).unwrap();
    let c2 = s2.read_chunk(BIG).unwrap();
    assert_eq!(c2.records, 6);
    assert_eq!(values(&c2, "i")[0], json!(4));
    assert!(c2.at_end);
}

#[test]
fn follow_consumes_only_complete_lines() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.ndjson");
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(b"{\"i\":1}\n{\"i\":").unwrap();
    let mut s = FileSource::open(&p, FileFormat::Ndjson, true, None).unwrap();
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(c.records, 1);
    f.write_all(b"2}\n").unwrap();
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(values(&c, "i"), vec![json!(2)]);
    assert_eq!(s.read_chunk(BIG).unwrap().records, 0);
}

#[test]
fn replaced_file_is_read_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.ndjson");
    std::fs::write(&p, "{\"i\":1}\n{\"i\":2}\n").unwrap();
    let mut s = FileSource::open(&p, FileFormat::Ndjson, false, None).unwrap();
    let cur = s.read_chunk(BIG).unwrap().cursor.unwrap();
    std::fs::write(&p, "{\"j\":1}\n{\"j\":2}\n{\"j\":3}\n").unwrap();
    let mut s = FileSource::open(&p, FileFormat::Ndjson, false, Some(&cur)).unwrap();
    assert_eq!(s.read_chunk(BIG).unwrap().records, 3);
}

#[test]
fn bad_line_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.ndjson");
    std::fs::write(&p, "{\"i\":1}\n\n{oops}\n").unwrap();
    let mut s = FileSource::open(&p, FileFormat::Ndjson, false, None).unwrap();
    let e = s.read_chunk(BIG).unwrap_err().to_string();
    assert!(
        e.ends_with(":3: invalid JSON: key must be a string at line 1 column 2"),
        "{e}"
    );
}

#[test]
fn csv_with_header_types_values_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    std::fs::write(&p, "id,name,zip\n1,\"a, b\",007\n2,c,\n3,d,x\n").unwrap();
    let mut s = FileSource::open(&p, FileFormat::Csv, false, None).unwrap();
    let lim = Limits {
        max_records: 2,
        max_bytes: 1 << 20,
    };
    let c = s.read_chunk(lim).unwrap();
    let r = c.items[0].as_record().unwrap();
    assert_eq!(r.fields["id"], json!(1));
    assert_eq!(r.fields["name"], json!("a, b"));
    assert_eq!(r.fields["zip"], json!("007"));
    assert_eq!(c.items[1].as_record().unwrap().fields["zip"], json!(null));
    let mut s = FileSource::open(&p, FileFormat::Csv, false, c.cursor.as_deref()).unwrap();
    let c = s.read_chunk(lim).unwrap();
    assert_eq!(values(&c, "id"), vec![json!(3)]);
}

#[test]
fn csv_field_count_mismatch_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    std::fs::write(&p, "a,b\n1,2\n3\n").unwrap();
    let mut s = FileSource::open(&p, FileFormat::Csv, false, None).unwrap();
    let e = s.read_chunk(BIG).unwrap_err().to_string();
    assert!(e.contains(":3:"), "{e}");
}

fn append(p: &std::path::Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .unwrap();
    f.write_all(bytes).unwrap();
}

fn records(c: &Chunk) -> Vec<serde_json::Value> {
    all(c)
        .iter()
        .map(|i| serde_json::Value::Object(i.as_record().unwrap().fields.clone()))
        .collect()
}

#[test]
fn csv_follow_leaves_an_open_quoted_field_until_it_closes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    append(&p, b"id,note\n1,\"multi\n");
    let mut s = FileSource::open(&p, FileFormat::Csv, true, None).unwrap();
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(c.records, 0, "{:?}", c.items);
    assert!(c.at_end);
    // the cursor sits just after the header, before the open record
    assert_eq!(s.cursor().offset, 8);
    let cut = c.cursor.unwrap();
    append(&p, b"line\"\n2,plain\n");
    let want = vec![
        json!({"id": 1, "note": "multi\nline"}),
        json!({"id": 2, "note": "plain"}),
    ];
    assert_eq!(records(&s.read_chunk(BIG).unwrap()), want);
    assert_eq!(s.read_chunk(BIG).unwrap().records, 0);
    // a restart from the cursor staged while the field was open reads the
    // same records, once
    let mut s = FileSource::open(&p, FileFormat::Csv, true, Some(&cut)).unwrap();
    assert_eq!(records(&s.read_chunk(BIG).unwrap()), want);
}

#[test]
fn csv_follow_consumes_only_terminated_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    // header cut off, then a record cut off after its last field, then one
    // cut between CR and LF
    append(&p, b"id,no");
    let mut s = FileSource::open(&p, FileFormat::Csv, true, None).unwrap();
    assert_eq!(s.read_chunk(BIG).unwrap().records, 0);
    assert_eq!(s.cursor().offset, 0);
    append(&p, b"te\r\n1,ab");
    assert_eq!(s.read_chunk(BIG).unwrap().records, 0);
    append(&p, b"c\r");
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(records(&c), vec![json!({"id": 1, "note": "abc"})]);
    append(&p, b"\n2,\"x\"\"y\"\r\n");
    let mut s = FileSource::open(&p, FileFormat::Csv, true, c.cursor.as_deref()).unwrap();
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(records(&c), vec![json!({"id": 2, "note": "x\"y"})]);
    append(&p, b"3,z\n");
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(values(&c, "id"), vec![json!(3)]);
}

#[test]
fn csv_bom_is_stripped_only_at_the_start_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    append(&p, "\u{feff}id,v\n1,a\n\u{feff}2,b\n".as_bytes());
    let one = Limits {
        max_records: 1,
        max_bytes: 1 << 20,
    };
    for follow in [false, true] {
        let mut s = FileSource::open(&p, FileFormat::Csv, follow, None).unwrap();
        let mut got = Vec::new();
        loop {
            let c = s.read_chunk(one).unwrap();
            got.extend(records(&c));
            if c.at_end {
                break;
            }
        }
        assert_eq!(
            got,
            vec![
                json!({"id": 1, "v": "a"}),
                json!({"id": "\u{feff}2", "v": "b"})
            ],
            "follow {follow}"
        );
    }
}

#[test]
fn csv_without_follow_takes_a_last_record_without_newline() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    append(&p, b"id,v\n1,a\n2,b");
    let mut s = FileSource::open(&p, FileFormat::Csv, false, None).unwrap();
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(values(&c, "v"), vec![json!("a"), json!("b")]);
    assert!(c.at_end);
}

#[test]
fn csv_invalid_utf8_names_the_field_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    append(&p, b"id,v\n1,a\n2,\xff\n");
    let mut s = FileSource::open(&p, FileFormat::Csv, false, None).unwrap();
    let e = s.read_chunk(BIG).unwrap_err().to_string();
    assert!(e.contains(":3:") && e.contains("\"v\""), "{e}");
}

#[test]
fn ndjson_follow_restart_resumes_before_a_cut_off_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.ndjson");
    append(&p, b"{\"i\":1}\n{\"s\":\"multi");
    let mut s = FileSource::open(&p, FileFormat::Ndjson, true, None).unwrap();
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(values(&c, "i"), vec![json!(1)]);
    append(&p, b"\\nline\"}\n");
    let mut s = FileSource::open(&p, FileFormat::Ndjson, true, c.cursor.as_deref()).unwrap();
    let c = s.read_chunk(BIG).unwrap();
    assert_eq!(values(&c, "s"), vec![json!("multi\nline")]);
}

fn read_all(p: &std::path::Path, markers: Option<&[&str]>) -> Vec<serde_json::Value> {
    let mut s = FileSource::open(p, FileFormat::Csv, false, None).unwrap();
    if let Some(m) = markers {
        s = s.with_null_values(m.iter().map(|v| v.to_string()).collect());
    }
    records(&s.read_chunk(BIG).unwrap())
}

#[test]
fn csv_null_markers_are_null_only_unquoted() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    // R quotes text and leaves NA bare; PostgreSQL and MySQL write \N
    append(
        &p,
        b"a,b,c,d\nNA,\"NA\",,\"\"\n\\N,NULL,null,N/A\nNaN,#N/A,\"\\N\",x\n",
    );
    assert_eq!(
        read_all(&p, None),
        vec![
            json!({"a": null, "b": "NA", "c": null, "d": ""}),
            json!({"a": null, "b": null, "c": null, "d": null}),
            json!({"a": null, "b": null, "c": "\\N", "d": "x"}),
        ]
    );
    // the user's own list replaces the default: an empty cell is text
    assert_eq!(
        read_all(&p, Some(&["-", "NA"]))[0],
        json!({"a": null, "b": "NA", "c": "", "d": ""})
    );
    assert_eq!(read_all(&p, Some(&[]))[1]["b"], json!("NULL"));
}

#[test]
fn csv_quoting_is_read_across_line_ends_and_doubled_quotes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    // CRLF, a blank line, a quoted field with a newline and a doubled
    // quote before the marker, and a last record without a newline
    append(
        &p,
        b"\xef\xbb\xbfa,b,c\r\n\"x\"\"\ny\",NA,\"NA\"\r\n\r\n\"NA\",NA,1\r\nNA,\"\",NA",
    );
    assert_eq!(
        read_all(&p, None),
        vec![
            json!({"a": "x\"\ny", "b": null, "c": "NA"}),
            json!({"a": "NA", "b": null, "c": 1}),
            json!({"a": null, "b": "", "c": null}),
        ]
    );
}

#[test]
fn csv_headers_as_users_have_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    // a BOM, R's unnamed row-name column, spaces, dots, padding
    append(
        &p,
        "\u{feff}\"\",bill length (mm), body.mass ,Year\n\"1\",39.1,3750,1970-01-01\n".as_bytes(),
    );
    assert_eq!(
        read_all(&p, None),
        vec![json!({
            "column_1": 1,
            "bill length (mm)": 39.1,
            "body.mass": 3750,
            "Year": "1970-01-01",
        })]
    );
}

#[test]
fn csv_repeated_header_names_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.csv");
    append(&p, b"id,name,Name,name \n1,a,b,c\n");
    let mut s = FileSource::open(&p, FileFormat::Csv, false, None).unwrap();
    let e = s.read_chunk(BIG).unwrap_err().to_string();
    assert!(
        e.contains(":1: header: column 4 is named \"name\" like column 2"),
        "{e}"
    );
}
