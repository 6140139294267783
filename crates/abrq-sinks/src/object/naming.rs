//! Object keys. A key is a pure function of the batch (never of the clock),
//! so a replayed batch overwrites its first attempt instead of duplicating.

use crate::object::ObjectFormat;
use abrq_core::{BatchMeta, DeliveryError};

use crate::failure::Failure;

/// Hex digits of the idempotency key used in the object name. 8 (as in the
/// user document's example) collide within days at one batch a second,
/// which would overwrite a different batch; 16 make that a non-event.
pub const KEY_HEX_DIGITS: usize = 16;

const MANIFEST_SUFFIX: &str = ".manifest.json";

/// A prefix without leading or trailing slashes, so keys never start with
/// `/` and never contain `//` at the join.
pub fn normalize_prefix(prefix: &str) -> &str {
    prefix.trim_matches('/')
}

/// `{prefix}/[dt=YYYY-MM-DD/]part-{16 hex}.{ext}`. The date is the batch's
/// staging day in UTC, so a retry lands in the same partition as the first
/// attempt even after midnight.
pub fn object_key(
    prefix: &str,
    date_partitioning: bool,
    format: ObjectFormat,
    meta: &BatchMeta,
) -> Result<String, DeliveryError> {
    let part = key_part(&meta.idempotency_key)?;
    let prefix = normalize_prefix(prefix);
    let mut key = String::with_capacity(prefix.len() + 48);
    if !prefix.is_empty() {
        key.push_str(prefix);
        key.push('/');
    }
    if date_partitioning {
        key.push_str(&meta.staged_at.format("dt=%Y-%m-%d/").to_string());
    }
    key.push_str("part-");
    key.push_str(part);
    key.push('.');
    key.push_str(format.ext());
    Ok(key)
}

/// The manifest sits beside its object: `{object key}.manifest.json`.
pub fn manifest_key(object_key: &str) -> String {
    format!("{object_key}{MANIFEST_SUFFIX}")
}

/// `{prefix}/.abrq-probe-{token}`: a dot name that no consumer globbing for
/// `part-*` picks up.
pub fn probe_key(prefix: &str, token: &str) -> String {
    let prefix = normalize_prefix(prefix);
    if prefix.is_empty() {
        format!(".abrq-probe-{token}")
    } else {
        format!("{prefix}/.abrq-probe-{token}")
    }
}

/// The first 16 hex digits of the idempotency key. Anything else would put
/// arbitrary text (even `../`) into a path, so it is refused.
fn key_part(key: &str) -> Result<&str, DeliveryError> {
    match key.get(..KEY_HEX_DIGITS) {
        Some(p) if p.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(p),
        _ => Err(Failure::Encoding { record: None }.error(format!(
            "idempotency key {key:?} does not start with {KEY_HEX_DIGITS} hex digits"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::{idempotency_key, ReasonClass};
    use chrono::{TimeZone, Utc};
    use std::collections::HashSet;
    use uuid::Uuid;

    fn meta(seq: u64) -> BatchMeta {
        BatchMeta {
            stream: "orders".into(),
            seq,
            idempotency_key: idempotency_key(Uuid::from_u128(7), seq, uuid::Uuid::nil()),
            // an earlier day than any "now" the test runs at, and late in the
            // UTC day so a local-time slip would show as the next day
            staged_at: Utc.with_ymd_and_hms(2021, 3, 4, 23, 59, 59).unwrap(),
            records: 1,
            bytes: 10,
        }
    }

    #[test]
    fn key_with_prefix_and_partition() {
        let m = meta(1);
        let k = object_key("/exports/orders/", true, ObjectFormat::JsonlGz, &m).unwrap();
        let p = &m.idempotency_key[..16];
        assert_eq!(k, format!("exports/orders/dt=2021-03-04/part-{p}.jsonl.gz"));
        assert_eq!(manifest_key(&k), format!("{k}.manifest.json"));
    }

    #[test]
    fn key_without_prefix_has_no_leading_slash() {
        let m = meta(1);
        let p = &m.idempotency_key[..16];
        for prefix in ["", "/", "//"] {
            let k = object_key(prefix, false, ObjectFormat::Csv, &m).unwrap();
            assert_eq!(k, format!("part-{p}.csv"));
        }
        let k = object_key("", true, ObjectFormat::Parquet, &m).unwrap();
        assert_eq!(k, format!("dt=2021-03-04/part-{p}.parquet"));
        assert_eq!(probe_key("", "ab"), ".abrq-probe-ab");
        assert_eq!(probe_key("/x/y/", "ab"), "x/y/.abrq-probe-ab");
    }

    #[test]
    fn name_is_16_hex_and_deterministic() {
        let k = object_key("p", false, ObjectFormat::Jsonl, &meta(9)).unwrap();
        let part = k
            .strip_prefix("p/part-")
            .unwrap()
            .strip_suffix(".jsonl")
            .unwrap();
        assert_eq!(part.len(), 16);
        assert!(part.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            k,
            object_key("p", false, ObjectFormat::Jsonl, &meta(9)).unwrap()
        );
    }

    #[test]
    fn distinct_batches_get_distinct_names() {
        let names: HashSet<String> = (0..100_000)
            .map(|seq| object_key("p", true, ObjectFormat::JsonlGz, &meta(seq)).unwrap())
            .collect();
        assert_eq!(names.len(), 100_000);
    }

    #[test]
    fn malformed_idempotency_key_is_refused() {
        for bad in ["", "0123456789abcde", "../../../../etc/passwd-x"] {
            let mut m = meta(1);
            m.idempotency_key = bad.into();
            let e = object_key("p", false, ObjectFormat::Jsonl, &m).unwrap_err();
            assert_eq!(
                e.disposition,
                abrq_core::Disposition::DeadLetter(ReasonClass::Encoding)
            );
        }
    }
}
