//! The cloud engines against the emulators of `scripts/services.sh`: the
//! shared object suite for each engine, each test in a fresh bucket or
//! container, then what only listing the store can show (one object per
//! replayed batch, no probe left behind). Classification is in
//! `classify.rs`, against a fake server; config validation in
//! `building.rs`.

mod building;
mod classify;
mod fake_http;
#[path = "../../../tests/cloud_support/mod.rs"]
mod support;

use support::config;
#[cfg(feature = "services")]
use support::{azure, gcs, s3};

// The tests below need the emulators: built with the `services` feature,
// as scripts/test.sh does.

/// The shared suite and the listing checks for one engine: `$engine` names
/// the module and the fresh-bucket config function (from `support`),
/// `$transport` the engine's transport from that config.
#[cfg(feature = "services")]
macro_rules! engine_suite {
    ($engine:ident, $transport:path) => {
        mod $engine {
            use crate::object::ObjectFormat;
            use abrq_core::{Destination, Disposition};
            use sha2::{Digest, Sha256};

            use crate::object::conformance::{self, sample_batch, settings};
            use crate::object::{naming, ObjectDestination, ObjectTransport};

            async fn transport() -> impl ObjectTransport + Clone + 'static {
                $transport(&super::$engine("").await).unwrap()
            }

            #[tokio::test]
            async fn conformance_transport_basics() {
                conformance::transport_basics(&transport().await).await;
            }

            #[tokio::test]
            async fn conformance_every_format_round_trips() {
                conformance::every_format_round_trips(&transport().await).await;
            }

            #[tokio::test]
            async fn conformance_manifest_matches_object() {
                conformance::manifest_matches_object(&transport().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn conformance_group_matches_singles() {
                conformance::group_matches_singles(&transport().await).await;
            }

            #[tokio::test]
            async fn conformance_check_succeeds_and_leaves_nothing() {
                let t = $transport(&super::$engine("").await).unwrap();
                conformance::check_succeeds(&t).await;
                assert_eq!(t.list("probe").await, Vec::<String>::new());
            }

            #[tokio::test]
            async fn replay_leaves_one_object_with_the_same_bytes() {
                let t = $transport(&super::$engine("").await).unwrap();
                let key = conformance::replay_overwrites(&t).await;
                let sha = hex::encode(Sha256::digest(t.get(&key).await.unwrap()));
                let dest = ObjectDestination::new(
                    t.clone(),
                    settings("replay", ObjectFormat::JsonlGz, true),
                );
                dest.deliver(&sample_batch(3)).await.unwrap();
                let again = hex::encode(Sha256::digest(t.get(&key).await.unwrap()));
                assert_eq!(again, sha);
                assert_eq!(
                    t.list("replay/").await,
                    [key.clone(), naming::manifest_key(&key)]
                );
            }

            #[tokio::test]
            async fn built_from_config() {
                let extra = "prefix = \"/exports/orders/\"\nformat = \"parquet\"\n\
                             date_partitioning = true\nmanifest = true\n";
                let cfg = super::$engine(extra).await;
                let dest = crate::build("orders", &cfg).unwrap();
                assert_eq!(
                    dest.kind(),
                    stringify!($engine).replace("azure", "azure_blob")
                );
                let batch = sample_batch(9);
                let report = dest.deliver(&batch).await.unwrap();
                let p = &batch.meta.idempotency_key[..16];
                let key = format!("exports/orders/dt=2021-03-04/part-{p}.parquet");
                let t = $transport(&cfg).unwrap();
                let data = t.get(&key).await.unwrap();
                assert_eq!(report.bytes, data.len() as u64);
                conformance::assert_holds(ObjectFormat::Parquet, &data, &batch);
                assert!(dest.check().await.unwrap().detail.contains("\"lake\""));
                assert_eq!(
                    t.list("exports/").await,
                    [key.clone(), naming::manifest_key(&key)]
                );
            }

            #[tokio::test]
            async fn a_missing_bucket_is_transient_and_check_says_so() {
                let mut cfg = super::$engine("").await;
                let name = cfg.database.as_ref().unwrap().as_str().to_string();
                cfg.database = Some(abrq_core::config::Text(format!("{name}-missing")));
                let dest = crate::build("orders", &cfg).unwrap();
                let e = dest.deliver(&sample_batch(1)).await.unwrap_err();
                assert_eq!(e.disposition, Disposition::Retry, "{}", e.describe());
                assert!(dest.check().await.unwrap_err().is_transient());
            }
        }
    };
}

#[cfg(feature = "services")]
engine_suite!(s3, crate::cloud::s3::transport);
#[cfg(feature = "services")]
engine_suite!(azure, crate::cloud::azure::transport);
#[cfg(feature = "services")]
engine_suite!(gcs, crate::cloud::gcs::transport);

/// Azurite checks the account key (moto and the GCS emulator check
/// nothing): a wrong key is the destination's problem, never the batch's.
#[cfg(feature = "services")]
#[tokio::test]
async fn azure_wrong_key_is_transient_and_check_says_so() {
    use abrq_core::Disposition;
    let mut cfg = azure("").await;
    cfg.password = Some(abrq_core::config::Secret::new(
        "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXk=",
    ));
    let dest = crate::build("orders", &cfg).unwrap();
    let batch = crate::object::conformance::sample_batch(1);
    let e = dest.deliver(&batch).await.unwrap_err();
    assert_eq!(e.disposition, Disposition::Retry, "{}", e.describe());
    let e = dest.check().await.unwrap_err();
    assert!(e.is_transient());
    assert!(!e.describe().contains("d3Jvbmcga2V5"), "{}", e.describe());
}
