//! A verification's result as `abrq verify` prints it: a table per table
//! compared, then the differing keys.

use serde_json::Value;

use super::status::table;

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The key of a difference as `col=value, ...`.
fn key(v: &Value) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

pub fn verify_tables(body: &Value) -> String {
    let mut out = String::new();
    let mut summary = table(&[
        "table",
        "replica",
        "source rows",
        "replica rows",
        "ranges",
        "in flight",
        "differences",
        "repair",
        "error",
    ]);
    let mut diffs = table(&["table", "key", "difference"]);
    let mut any = false;
    for t in body["tables"].as_array().into_iter().flatten() {
        let listed = t["differences"].as_array().map_or(0, Vec::len) as u64;
        let total = listed + t["more"].as_u64().unwrap_or(0);
        let repair = match &t["repair"] {
            Value::Null => String::new(),
            r => format!(
                "{} backfilled, {} deleted, {} still different{}",
                r["backfilled"],
                r["deleted"],
                r["still_different"],
                r["error"]
                    .as_str()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        };
        summary.add_row([
            text(&t["table"]),
            text(&t["replica"]),
            text(&t["source_rows"]),
            text(&t["replica_rows"]),
            text(&t["ranges"]),
            text(&t["in_flight"]),
            total.to_string(),
            repair,
            text(&t["error"]),
        ]);
        for d in t["differences"].as_array().into_iter().flatten() {
            any = true;
            diffs.add_row([text(&t["table"]), key(&d["key"]), text(&d["kind"])]);
        }
    }
    out.push_str(&summary.to_string());
    if any {
        out.push('\n');
        out.push_str(&diffs.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_are_listed_by_key() {
        let body = json!({"tables": [{
            "table": "public.t", "replica": "public.t", "source_rows": 10, "replica_rows": 9,
            "ranges": 1, "in_flight": 2, "more": 0,
            "differences": [{"key": {"id": "7"}, "kind": "missing"}]
        }]});
        let out = verify_tables(&body);
        assert!(out.contains("public.t"), "{out}");
        assert!(out.contains("id=7"), "{out}");
        assert!(out.contains("missing"), "{out}");
    }
}
