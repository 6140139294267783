//! Destinations of one stream that write one format share each batch's
//! encoding. Sharing must never show: a destination that was paused
//! while the others went on catches up, and every destination holds the
//! same objects, byte for byte, with every record and a manifest each.

use crate::common::*;
use serde_json::Value;

const STREAM: &str = "orders";
const BATCHES: u64 = 6;

fn hwm(st: &Value, d: &str) -> u64 {
    u(&dest_of(st, d)["high_water_mark"])
}

#[tokio::test(flavor = "multi_thread")]
async fn destinations_alike_write_the_same_objects_even_one_that_lagged() {
    let mut abrq = Abrq::new();
    let mut stream = Stream::new(STREAM, Source::http());
    for d in ["a", "b", "c"] {
        let out = abrq.p(&format!("out/{d}"));
        stream = stream.destination(Destination::local(d, out).format("jsonl.gz").manifest());
    }
    abrq.write_config(&Config::new(&abrq).stream(stream).to_string());
    abrq.start().await;

    abrq.act(STREAM, "c", "pause").await;
    for seq in 1..=BATCHES {
        let body: String = (0..50)
            .map(|i| {
                format!(
                    "{{\"batch\":{seq},\"i\":{i},\"note\":\"{}\"}}\n",
                    "x".repeat(i)
                )
            })
            .collect();
        let ack = abrq.ingest(STREAM, &body).await;
        assert_eq!(ack["last_seq"], seq, "{ack}");
    }
    abrq.wait_status(STREAM, "a and b delivered every batch", |st| {
        hwm(st, "a") == BATCHES && hwm(st, "b") == BATCHES
    })
    .await;
    assert_eq!(hwm(&abrq.status(STREAM).await, "c"), 0, "c is paused");
    abrq.act(STREAM, "c", "resume").await;
    abrq.wait_status(STREAM, "c caught up", |st| hwm(st, "c") == BATCHES)
        .await;

    let outputs: Vec<DestOutput> = ["a", "b", "c"]
        .iter()
        .map(|d| read_dest(&abrq.path(&format!("out/{d}"))))
        .collect();
    for (d, out) in ["a", "b", "c"].iter().zip(&outputs) {
        assert_eq!(out.objects.len() as u64, BATCHES, "{d}: one object a batch");
        assert_eq!(out.record_count() as u64, BATCHES * 50, "{d}: every record");
        assert_eq!(out.verify_manifests(STREAM).len() as u64, BATCHES, "{d}");
        assert!(out.temp_files.is_empty(), "{d}: {:?}", out.temp_files);
    }
    for (d, out) in ["b", "c"].iter().zip(&outputs[1..]) {
        let names: Vec<&String> = out.objects.keys().collect();
        assert_eq!(names, outputs[0].objects.keys().collect::<Vec<_>>(), "{d}");
        for (name, object) in &out.objects {
            assert!(
                object.raw == outputs[0].objects[name].raw,
                "{d}: {name} differs from a's"
            );
        }
    }
}
