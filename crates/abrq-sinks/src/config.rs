//! Every destination's own config, checked without I/O. Each engine reads
//! its keys into a type of its own, in its folder (`local/config.rs`,
//! `cloud/s3/config.rs`, ..., `relational/config.rs`): the five connection
//! fields as that engine understands them, and the keys only it has
//! (`#[serde(deny_unknown_fields)]`, so a key of another engine is an error
//! naming the key, the engine and the line). [`validate`] runs them all,
//! through the registry (`registry.rs`), when the binary loads a config;
//! `build` runs them again for the one destination it builds.

use abrq_core::config::{Config, DestinationConfig, Secret, Text};

use crate::keys::invalid;
use crate::object::ObjectSettings;
use crate::registry::entry;

/// Checks every destination of every stream.
pub fn validate(config: &Config) -> Result<(), String> {
    for s in &config.streams {
        let s = s.get_ref();
        for d in &s.destinations {
            check(s.name.as_str(), d.get_ref())?;
        }
    }
    Ok(())
}

/// Checks one destination of `stream`.
pub fn check(stream: &str, cfg: &DestinationConfig) -> Result<(), String> {
    (entry(cfg.engine).check)(stream, cfg)
}

/// The object settings of an object or file engine's destination.
pub fn object_settings(stream: &str, cfg: &DestinationConfig) -> Result<ObjectSettings, String> {
    let Some(object) = entry(cfg.engine).object else {
        return Err(invalid(cfg, "engine", "writes no objects"));
    };
    Ok(object(cfg)?.settings(stream, cfg))
}

/// What `cfg`'s connection fields were taken to mean, field by field
/// (`database = bucket "b"`), the password always as `***`. A field the
/// engine does not use is said to be unused when set, and left out when
/// not.
pub fn describe_connection(cfg: &DestinationConfig) -> Vec<String> {
    let meaning = entry(cfg.engine).connection;
    let text = |t: &Option<Text>| t.as_ref().map(|t| format!("{:?}", t.as_str()));
    let fields = [
        ("host", meaning.host, text(&cfg.host)),
        ("port", meaning.port, cfg.port.map(|p| p.to_string())),
        ("database", meaning.database, text(&cfg.database)),
        ("username", meaning.username, text(&cfg.username)),
        (
            "password",
            meaning.password,
            cfg.password.as_ref().map(Secret::to_string),
        ),
    ];
    fields
        .into_iter()
        .filter_map(|(field, meaning, value)| match (meaning, value) {
            (Some(m), Some(v)) => Some(format!("{field} = {m} {v}")),
            (Some(m), None) => Some(format!("{field} = {m} (not set)")),
            (None, Some(_)) => Some(format!(
                "{field} is not used by engine {:?}",
                cfg.engine.as_str()
            )),
            (None, None) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectFormat;

    use abrq_core::config::testing::GOOD;

    /// The error loading `text` gives, from core or from the engines.
    fn error(text: &str) -> String {
        match Config::parse(text, "t.toml") {
            Ok(c) => validate(&c).unwrap_err(),
            Err(e) => e.to_string(),
        }
    }

    fn destination(text: &str) -> DestinationConfig {
        let c = Config::parse(text, "t.toml").unwrap();
        validate(&c).unwrap();
        c.streams[0].get_ref().destinations[0].get_ref().clone()
    }

    #[test]
    fn a_good_config_with_its_object_defaults() {
        let d = destination(GOOD);
        let s = object_settings("orders", &d).unwrap();
        assert_eq!(s.format, ObjectFormat::CsvGz);
        assert!(!s.manifest);
        let ftp = GOOD
            .replace("engine = \"local\"", "engine = \"ftp\"\nhost = \"h\"")
            .replace("password = \"hunter2\"\n", "");
        assert!(
            object_settings("orders", &destination(&ftp))
                .unwrap()
                .manifest
        );
    }

    #[test]
    fn an_engine_without_objects_has_no_object_settings() {
        for lines in [
            "engine = \"kafka\"\nhost = \"k\"\ndatabase = \"t\"",
            "engine = \"postgres\"\ntable = \"t\"",
        ] {
            let cfg = Config::destination("d", lines).unwrap();
            let e = object_settings("orders", &cfg).unwrap_err();
            assert!(
                e.contains("streams.destinations.engine: writes no objects"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_quickstart_config_is_valid() {
        let text = include_str!("../../../examples/quickstart.toml");
        let c = Config::parse(text, "quickstart.toml").unwrap();
        validate(&c).unwrap();
    }

    #[test]
    fn the_postgres_cdc_example_is_valid() {
        let text = include_str!("../../../examples/postgres-cdc.toml")
            .replace("${PGPASSWORD}", "x")
            .replace("${WAREHOUSE_PASSWORD}", "x");
        let c = Config::parse(&text, "postgres-cdc.toml").unwrap();
        validate(&c).unwrap();
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let bad = GOOD.replace("format = \"csv.gz\"", "formatt = \"csv.gz\"");
        let e = error(&bad);
        assert!(e.contains("formatt"), "{e}");
        assert!(e.contains("line 14"), "{e}");
    }

    #[test]
    fn bad_value_names_key_and_line() {
        let bad = GOOD.replace("\"csv.gz\"", "\"xml\"");
        let e = error(&bad);
        assert!(e.contains("line 14") && e.contains("xml"), "{e}");
    }

    #[test]
    fn missing_required_field_names_key_and_line() {
        let bad = GOOD.replace("database = \"/tmp/out\"\n", "");
        let e = error(&bad);
        assert!(e.contains("streams.destinations.database"), "{e}");
        assert!(e.contains("line 10"), "{e}");
    }

    #[test]
    fn a_partition_key_on_s3_names_key_engine_line_and_the_keys_of_s3() {
        let bad = GOOD
            .replace("engine = \"local\"", "engine = \"s3\"")
            .replace("password = \"hunter2\"", "partition_key = \"id\"");
        assert_eq!(
            error(&bad),
            "line 15: streams.destinations.partition_key: not a key of engine \"s3\" \
             (destination \"lake\"); its keys are prefix, format, date_partitioning, \
             manifest, region"
        );
    }

    /// Each engine with what it needs, then a key it does not have: the
    /// error names the key, the engine, the line and the engine's keys.
    #[test]
    fn every_engine_refuses_a_key_it_does_not_have() {
        let object = "prefix, format, date_partitioning, manifest";
        let relational =
            "table, schema, schema_drift, truncate, mode, deletes, primary_key, tls, tls_ca_file";
        let cases = [
            ("local", "database = \"/d\"", "region", object.to_string()),
            (
                "s3",
                "database = \"b\"",
                "table",
                format!("{object}, region"),
            ),
            (
                "azure_blob",
                "database = \"c\"\nusername = \"acct\"",
                "region",
                object.into(),
            ),
            ("gcs", "database = \"b\"", "tls", object.into()),
            (
                "ftp",
                "host = \"h\"\ndatabase = \"d\"",
                "schema",
                format!("{object}, tls_ca_file"),
            ),
            (
                "ftps",
                "host = \"h\"\ndatabase = \"d\"",
                "tls",
                format!("{object}, tls_ca_file"),
            ),
            (
                "kafka",
                "host = \"k\"\ndatabase = \"t\"",
                "table",
                "partition_key, format, transaction_topic, sasl_mechanism, tls, tls_ca_file".into(),
            ),
            ("postgres", "table = \"t\"", "format", relational.into()),
            (
                "mysql",
                "table = \"t\"\ndatabase = \"d\"",
                "partition_key",
                relational.into(),
            ),
        ];
        for (engine, needs, foreign, keys) in cases {
            let lines = format!("engine = \"{engine}\"\n{needs}");
            let cfg = Config::destination("d", &lines).unwrap();
            check("orders", &cfg).unwrap_or_else(|e| panic!("{engine}: {e}"));
            let lines = format!("{lines}\n{foreign} = \"x\"");
            let cfg = Config::destination("d", &lines).unwrap();
            let line = 7 + lines.lines().count() - 1;
            assert_eq!(
                check("orders", &cfg).unwrap_err(),
                format!(
                    "line {line}: streams.destinations.{foreign}: not a key of engine \
                     {engine:?} (destination \"d\"); its keys are {keys}"
                ),
            );
        }
    }

    /// A typo opens a multi-line string on an engine's own key that wants
    /// a boolean, and it runs over the password's line.
    #[test]
    fn a_multiline_value_that_swallowed_a_secret_is_not_quoted() {
        let text = GOOD
            .replace("engine = \"local\"", "engine = \"postgres\"\ntable = \"t\"")
            .replace("format = \"csv.gz\"", "tls = '''")
            .replace("password = \"hunter2\"", "password = \"dest-S3CRET\"'''");
        let e = error(&text);
        assert!(!e.contains("S3CRET"), "{e}");
        assert!(e.contains("line 15,") && e.contains("tls"), "{e}");
        assert!(e.contains("expected a boolean"), "{e}");
    }

    #[test]
    fn connection_fields_say_what_they_mean_and_hide_the_password() {
        let s3 = Config::destination(
            "lake",
            "engine = \"s3\"\nhost = \"http://127.0.0.1:9000\"\nport = 9000\n\
             database = \"b\"\nusername = \"AKID\"\npassword = \"s3-S3CRET\"",
        )
        .unwrap();
        assert_eq!(
            describe_connection(&s3),
            [
                "host = endpoint URL \"http://127.0.0.1:9000\"",
                "port is not used by engine \"s3\"",
                "database = bucket \"b\"",
                "username = access key id \"AKID\"",
                "password = secret access key ***",
            ]
        );
        let kafka = Config::destination("k", "engine = \"kafka\"\nhost = \"b1,b2:9093\"").unwrap();
        assert_eq!(
            describe_connection(&kafka),
            [
                "host = bootstrap servers \"b1,b2:9093\"",
                "port = port of a server given without one (not set)",
                "database = topic (not set)",
                "username = SASL user (not set)",
                "password = SASL password (not set)",
            ]
        );
    }
}
