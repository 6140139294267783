//! One stream fanned out to every object and file destination at once (s3,
//! azure_blob, gcs, ftp, ftps and local) against the real emulators and
//! servers: each must receive all 100,000 records, with no dead letter,
//! and read back (in its own format) exactly as the local copy.

use crate::common::*;

const RECORDS: u64 = 100_000;
const STREAM: &str = "orders";

fn unique(prefix: &str) -> String {
    use rand::Rng;
    let n: u64 = rand::rng().random();
    format!("{prefix}-{:010x}", n & 0xff_ffff_ffff)
}

#[tokio::test(flavor = "multi_thread")]
async fn all_object_destinations_receive_every_record() {
    let s3 = abrq_testkit::S3::from_env();
    let azure = abrq_testkit::Azure::from_env();
    let gcs = abrq_testkit::Gcs::from_env();
    let ftps = abrq_testkit::Ftps::from_env();
    let ftp = ftps.ftp.clone();
    let (bucket, container, gbucket) = (unique("fan"), unique("fan"), unique("fan"));
    s3.create_bucket(&bucket).await.expect("s3 bucket");
    azure
        .create_container(&container)
        .await
        .expect("azure container");
    gcs.create_bucket(&gbucket).await.expect("gcs bucket");
    let ftp_dir = unique("fan");

    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[spool]
gc_interval = "200ms"
[[streams]]
name = "{STREAM}"
[streams.source]
engine = "generate"
records = {RECORDS}

[[streams.destinations]]
name = "s3"
engine = "s3"
host = "{s3_host}"
region = "{s3_region}"
database = "{bucket}"
username = "{s3_user}"
password = "{s3_pass}"
prefix = "exports"
date_partitioning = true

[[streams.destinations]]
name = "azure"
engine = "azure_blob"
host = "{az_host}"
database = "{container}"
username = "{az_user}"
password = "{az_key}"
prefix = "exports"

[[streams.destinations]]
name = "gcs"
engine = "gcs"
host = "{gcs_host}"
database = "{gbucket}"
prefix = "exports"
format = "parquet"

[[streams.destinations]]
name = "ftp"
engine = "ftp"
host = "{ftp_host}"
port = {ftp_port}
database = "/{ftp_dir}"
username = "{ftp_user}"
password = "{ftp_pass}"

[[streams.destinations]]
name = "ftps"
engine = "ftps"
host = "{ftp_host}"
port = {ftps_port}
database = "/{ftp_dir}"
username = "{ftp_user}"
password = "{ftp_pass}"
tls_ca_file = "{ca}"
format = "csv.gz"

[[streams.destinations]]
name = "local"
engine = "local"
database = "{local}"
format = "jsonl"
manifest = true
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        s3_host = s3.endpoint,
        s3_region = s3.region,
        s3_user = s3.access_key_id,
        s3_pass = s3.secret_access_key.expose(),
        az_host = azure.endpoint,
        az_user = azure.account,
        az_key = azure.key.expose(),
        gcs_host = gcs.endpoint,
        ftp_host = ftp.host,
        ftp_port = ftp.port,
        ftps_port = ftps.port,
        ftp_user = ftp.user,
        ftp_pass = ftp.password.expose(),
        ca = ftps.ca_file.display(),
        local = abrq.p("out/local"),
    ));
    abrq.start().await;
    let dests = ["s3", "azure", "gcs", "ftp", "ftps", "local"];
    let st = abrq
        .wait_status(STREAM, "every destination past the last batch", |st| {
            let last = u(&st["spool"]["last_seq"]);
            st["source"]["done"].as_bool() == Some(true)
                && dests
                    .iter()
                    .all(|d| u(&dest_of(st, d)["high_water_mark"]) == last)
        })
        .await;
    let m = abrq.metrics().await;
    for d in dests {
        let ds = dest_of(&st, d);
        assert_eq!(u(&ds["pending_dead_letters"]), 0, "{d}: {ds}");
        let delivered = m.get(
            "abrq_stream_fanout_delivered_records_total",
            &[("stream", STREAM), ("destination", d)],
        );
        assert_eq!(delivered as u64, RECORDS, "{d} delivered records");
    }
    // Every copy is read back record by record: the local one holds each
    // order once, and every other one holds exactly what it holds.
    let local = read_dest(&abrq.path("out/local"));
    local.verify_manifests(STREAM);
    let truth = by_id(&local, "order_id");
    assert!(truth.keys().copied().eq(1..=RECORDS), "local: a gap");
    let ids: Vec<u64> = (1..=RECORDS).collect();
    let expected = |id: u64| truth.get(&id).map(|r| (*r).clone());
    let appended = oracle::Appended {
        id_field: "order_id",
        ids: &ids,
        record: &expected,
    };
    let copies = [
        ("s3", sinks::s3(&s3, &bucket).await),
        ("azure", sinks::azure(&azure, &container).await),
        ("gcs", sinks::gcs(&gcs, &gbucket).await),
        ("ftp", sinks::ftp(&ftp, &ftp_dir).await),
        ("ftps", sinks::ftps(&ftps, &ftp_dir).await),
    ];
    for (d, out) in &copies {
        if !out.manifests.is_empty() {
            out.verify_manifests(STREAM);
        }
        let found = sinks::found_in_objects(out);
        let t = oracle::reconcile(&appended, &found, &sinks::DeadLetters::default())
            .unwrap_or_else(|v| panic!("{d}:\n{v}"));
        assert_eq!(t.delivered as u64, RECORDS, "{d}");
    }
    abrq.kill();
    let _ = s3.delete_bucket(&bucket).await;
    let _ = azure.delete_container(&container).await;
    sinks::ftp_remove_tree(&ftp, None, &ftp_dir).await;
    sinks::ftp_remove_tree(&ftp, Some(&ftps), &ftp_dir).await;
}
