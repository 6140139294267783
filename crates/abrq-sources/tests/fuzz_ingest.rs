//! Property test of HTTP ingest body parsing through its public API: any
//! bytes, and bytes near NDJSON and JSON arrays, parse or fail cleanly,
//! never panic, and the streaming and collecting entry points agree.
//! Small by default; `PROPTEST_CASES` goes further.

use proptest::prelude::*;

fn config() -> ProptestConfig {
    let mut c = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 1024;
    }
    c
}

fn near_json() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop::sample::select(vec![
        &b"{"[..],
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\"",
        b"\"a\"",
        b"\"_abrq_op\"",
        b"\"delete\"",
        b"\"upsert\"",
        b"1",
        b"-1e999",
        b"null",
        b"true",
        b"\n",
        b"\r\n",
        b" ",
        b"\\",
        b"\\ud800",
        "é".as_bytes(),
        b"\xe2\x98",
        b"\xff",
        b"\xef\xbb\xbf",
    ]);
    prop::collection::vec(piece, 0..200).prop_map(|ps| ps.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_body_parses_or_fails_without_panic(
        body in prop_oneof![prop::collection::vec(any::<u8>(), 0..2048), near_json()],
    ) {
        // the server streams through for_each_record; parse_body collects
        let whole = abrq_sources::parse_body(&body);
        let mut seen = 0u64;
        let streamed = abrq_sources::for_each_record(&body, |_, _| {
            seen += 1;
            Ok(())
        });
        match (whole, streamed) {
            (Ok(items), Ok(n)) => {
                prop_assert_eq!(items.len() as u64, n);
                prop_assert_eq!(seen, n);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "parse_body {:?} but for_each_record {:?}", a, b),
        }
    }
}
