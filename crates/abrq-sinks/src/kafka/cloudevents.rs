//! `format = "cloudevents"`: each record as a CloudEvent in Kafka's binary
//! mode. The value is the record as the default format writes it; the
//! event's attributes are `ce_*` headers, and `content-type` says the
//! value is JSON.

/// The attributes of the event of one record, as header name and value.
/// `id` is the record's idempotency key (the same on every retry, so a
/// consumer deduplicates on `ce_id`); `time` is its commit time when the
/// source gave one, else when abrq staged it (RFC 3339). `kind` follows
/// `abrq.record.` for a record (its operation) and `abrq.` for a
/// transaction marker (`transaction.begin`, `transaction.commit`).
pub fn headers(
    id: String,
    stream: &str,
    table: Option<&str>,
    kind: &str,
    time: String,
) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("ce_specversion", "1.0".to_string()),
        ("ce_id", id),
        ("ce_source", format!("/abrq/{stream}")),
        ("ce_type", format!("abrq.{kind}")),
        ("ce_time", time),
        ("content-type", "application/json".to_string()),
    ];
    if let Some(t) = table {
        out.push(("ce_subject", t.to_string()));
    }
    out
}
