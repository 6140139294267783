//! Tables of a running server's status, as `GET /v1/streams` answers it:
//! the same columns as the console's (state with the breaker's time to
//! trial, backlog in batches, records and bytes, lag, throughput when a
//! previous answer is known, dead letters, skips, last error).

use std::collections::HashMap;
use std::time::Instant;

use chrono::{DateTime, Utc};
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use indicatif::HumanBytes;
use serde_json::Value;

/// Records delivered per destination at one moment, so the next answer
/// gives a rate (`abrq top`).
#[derive(Default)]
pub struct Rates {
    last: HashMap<(String, String), (Instant, u64)>,
}

impl Rates {
    /// Records per second since the last call for this destination.
    fn update(&mut self, stream: &str, dest: &str, delivered: u64, now: Instant) -> Option<f64> {
        let key = (stream.to_string(), dest.to_string());
        let before = self.last.insert(key, (now, delivered))?;
        let secs = now.duration_since(before.0).as_secs_f64();
        (secs > 0.0).then(|| delivered.saturating_sub(before.1) as f64 / secs)
    }
}

pub(super) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_header(header.iter().copied());
    t
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// One row per stream's source: its state, where it reads (a database
/// source's slot and LSN, or last row) and how far behind it is.
pub fn source_table(body: &Value) -> String {
    let shared = is_shared(body);
    let mut header = vec!["stream", "source", "state"];
    if shared {
        header.push("holder");
    }
    header.extend(["spool", "position", "lag", "error"]);
    let mut t = table(&header);
    for s in body["streams"].as_array().into_iter().flatten() {
        let src = &s["source"];
        let p = &src["position"];
        let position = if let Some(slot) = p["slot"].as_str() {
            format!(
                "slot {slot}, read {}, confirmed {}, snapshot {} ({} rows)",
                p["read_lsn"].as_str().unwrap_or("-"),
                p["confirmed_lsn"].as_str().unwrap_or("-"),
                p["snapshot"]["state"].as_str().unwrap_or("-"),
                p["snapshot"]["rows"]
            )
        } else if let Some(table) = p["table"].as_str() {
            format!("{table} after {}", p["last"])
        } else {
            String::new()
        };
        let mut lag = Vec::new();
        if let Some(secs) = src["lag_seconds"].as_f64() {
            lag.push(format!("{secs:.1}s"));
        }
        if let Some(bytes) = src["lag_bytes"].as_i64() {
            lag.push(format!("{bytes} B of WAL"));
        }
        let spool = &s["spool"];
        let mut row = vec![text(&s["name"]), text(&src["engine"]), text(&src["state"])];
        if shared {
            row.push(holder(&src["holder"], Utc::now()));
        }
        row.extend([
            format!(
                "{} batches, {}",
                num(&spool["batches"]),
                HumanBytes(num(&spool["bytes"]))
            ),
            position,
            lag.join(", "),
            match src["recovery"].as_str() {
                // stopped: the operator's next step beside the cause
                Some(r) => format!("{}; recovery: {r}", text(&src["error"])),
                None => text(&src["error"]),
            },
        ]);
        t.add_row(row);
    }
    t.to_string()
}

/// Shared state: status names a holder for every source and drain.
fn is_shared(body: &Value) -> bool {
    body["streams"].as_array().into_iter().flatten().any(|s| {
        s["source"]["holder"].is_object()
            || s["destinations"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|d| d["holder"].is_object())
    })
}

/// "node-2 (epoch 3, 4s)"; "free" while nobody holds it.
fn holder(h: &Value, now: DateTime<Utc>) -> String {
    let Some(node) = h["node_id"].as_str() else {
        return "free".into();
    };
    let left = h["expires_at"]
        .as_str()
        .and_then(|u| u.parse::<DateTime<Utc>>().ok())
        .map_or(0, |u| (u - now).num_seconds().max(0));
    let here = if h["here"] == true { ", here" } else { "" };
    format!("{node} (epoch {}, {left}s{here})", h["epoch"])
}

/// One row per process sharing the state (`/v1/cluster`).
pub fn nodes_table(cluster: &Value) -> String {
    let mut t = table(&[
        "node",
        "host",
        "pid",
        "live",
        "leases",
        "heartbeat",
        "started",
    ]);
    let leases = cluster["leases"].as_array().cloned().unwrap_or_default();
    let now = Utc::now();
    for n in cluster["nodes"].as_array().into_iter().flatten() {
        let held = leases
            .iter()
            .filter(|l| l["live"] == true && l["instance"] == n["instance"])
            .count();
        let ago = |k: &str| {
            n[k].as_str()
                .and_then(|u| u.parse::<DateTime<Utc>>().ok())
                .map_or("-".into(), |t| {
                    format!("{}s ago", (now - t).num_seconds().max(0))
                })
        };
        t.add_row([
            text(&n["node_id"]),
            text(&n["host"]),
            num(&n["pid"]).to_string(),
            if n["live"] == true { "yes" } else { "no" }.to_string(),
            held.to_string(),
            ago("heartbeat_at"),
            ago("started_at"),
        ]);
    }
    t.to_string()
}

/// A destination's state, with the open breaker's time to its trial.
fn state(d: &Value, now: DateTime<Utc>) -> String {
    let state = text(&d["state"]).replace('_', " ");
    let until = d["breaker"]["until"].as_str();
    match until.and_then(|u| u.parse::<DateTime<Utc>>().ok()) {
        Some(until) if d["breaker"]["state"] == "open" => {
            let secs = (until - now).num_seconds().max(0);
            format!("{state}, trial in {secs}s")
        }
        _ => state,
    }
}

/// One row per destination. With `rates`, a throughput column from the
/// previous call's counts.
pub fn status_table(body: &Value, mut rates: Option<&mut Rates>) -> String {
    let shared = is_shared(body);
    let mut header = vec!["stream", "destination", "kind", "state"];
    if shared {
        header.push("holder");
    }
    header.extend(["hwm", "backlog", "lag"]);
    if rates.is_some() {
        header.push("records/s");
    }
    header.extend(["delivered", "dead letters", "skipped", "last error"]);
    let mut t = table(&header);
    let (now, instant) = (Utc::now(), Instant::now());
    for s in body["streams"].as_array().into_iter().flatten() {
        let stream = text(&s["name"]);
        for d in s["destinations"].as_array().into_iter().flatten() {
            let name = text(&d["name"]);
            let mut row = vec![
                stream.clone(),
                name.clone(),
                text(&d["kind"]),
                state(d, now),
            ];
            if shared {
                row.push(holder(&d["holder"], now));
            }
            row.extend([
                num(&d["high_water_mark"]).to_string(),
                format!(
                    "{} batches, {} records, {}",
                    num(&d["backlog"]),
                    num(&d["backlog_records"]),
                    HumanBytes(num(&d["backlog_bytes"]))
                ),
                format!("{:.1}s", d["lag_seconds"].as_f64().unwrap_or(0.0)),
            ]);
            if let Some(r) = rates.as_deref_mut() {
                let delivered = num(&d["delivered_records"]);
                row.push(
                    r.update(&stream, &name, delivered, instant)
                        .map_or_else(|| "-".to_string(), |x| format!("{x:.0}")),
                );
            }
            let error = match &d["task_failure"] {
                Value::Object(f) => format!(
                    "{} failing: {}",
                    f["task"].as_str().unwrap_or_default(),
                    f["error"].as_str().unwrap_or_default()
                ),
                _ => text(&d["last_error"]),
            };
            row.extend([
                format!(
                    "{} records, {}",
                    num(&d["delivered_records"]),
                    HumanBytes(num(&d["delivered_bytes"]))
                ),
                num(&d["pending_dead_letters"]).to_string(),
                num(&d["skipped_batches"]).to_string(),
                error,
            ]);
            t.add_row(row);
        }
    }
    t.to_string()
}

pub fn dead_letter_table(body: &Value) -> String {
    let mut t = table(&[
        "id", "seq", "records", "size", "reason", "state", "attempts", "error",
    ]);
    for d in body["dead_letters"].as_array().into_iter().flatten() {
        t.add_row([
            d["id"].to_string(),
            d["seq"].to_string(),
            d["records"].to_string(),
            HumanBytes(num(&d["bytes"])).to_string(),
            text(&d["reason_class"]),
            text(&d["state"]),
            d["attempts"].to_string(),
            text(&d["error"]),
        ]);
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(delivered: u64) -> Value {
        json!({"streams": [{
            "name": "orders",
            "source": {"engine": "http", "state": "running"},
            "spool": {"batches": 2, "bytes": 2048},
            "destinations": [{
                "name": "lake", "kind": "local", "state": "breaker_open",
                "high_water_mark": 7, "backlog": 2, "backlog_records": 20,
                "backlog_bytes": 2048, "lag_seconds": 3.5,
                "breaker": {"state": "open", "until": (Utc::now() + chrono::Duration::seconds(42)).to_rfc3339()},
                "delivered_records": delivered, "delivered_bytes": 100,
                "pending_dead_letters": 1, "skipped_batches": 0,
                "last_error": "disk full", "task_failure": null
            }]
        }]})
    }

    #[test]
    fn a_destination_row_says_what_the_console_says() {
        let out = status_table(&body(10), None);
        for want in [
            "breaker open, trial in 4",
            "2 batches, 20 records, 2.00 KiB",
            "3.5s",
            "disk full",
        ] {
            assert!(out.contains(want), "no {want:?} in\n{out}");
        }
        assert!(!out.contains("records/s"));
    }

    #[test]
    fn rates_come_from_the_previous_answer() {
        let mut rates = Rates::default();
        let t0 = Instant::now();
        assert_eq!(rates.update("s", "d", 100, t0), None);
        let r = rates.update("s", "d", 300, t0 + std::time::Duration::from_secs(2));
        assert_eq!(r, Some(100.0));
        let first = status_table(&body(10), Some(&mut Rates::default()));
        assert!(first.contains("records/s"), "{first}");
    }
}
