//! Every source's own keys, checked without I/O: one options type per
//! engine, beside the engine (`file/config.rs`, `generate.rs`, `http.rs`,
//! `postgres/config.rs`, `mysql/config.rs`). [`validate`] runs them all when the binary loads a
//! config, so a key of the wrong engine fails at startup naming the key,
//! the engine and the line.

use abrq_core::config::{Config, SourceConfig, Text};

use crate::registry::check;

/// A text key's value; None when unset or empty.
pub(crate) fn text(t: &Option<Text>) -> Option<String> {
    t.as_ref()
        .map(|t| t.as_str().to_string())
        .filter(|s| !s.is_empty())
}

/// An error about `key` of the source `cfg`: its line (the table's when
/// the key is unset), the key and the engine.
pub(crate) fn key_error(cfg: &SourceConfig, key: &str, why: String) -> String {
    let line = cfg.options.line_of(key).unwrap_or(cfg.line);
    format!(
        "line {line}: streams.source.{key}: {why} (engine \"{}\")",
        cfg.engine.as_str()
    )
}

/// Checks every stream's source.
pub fn validate(config: &Config) -> Result<(), String> {
    for s in &config.streams {
        check(s.get_ref().source.get_ref())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{FileFormat, FileOptions};
    use crate::generate::GenerateOptions;
    use crate::http::HttpOptions;
    use crate::postgres::PostgresSettings;
    use abrq_core::config::SourceConfig;

    use abrq_core::config::testing::{
        assert_broken_secret_line_is_named_not_shown, ALL_SECRETS, GOOD,
    };

    fn source(text: &str) -> SourceConfig {
        let c = Config::parse(text, "t.toml").unwrap();
        c.streams[0].get_ref().source.get_ref().clone()
    }

    fn error(text: &str) -> String {
        match Config::parse(text, "t.toml") {
            Ok(c) => validate(&c).unwrap_err(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn null_values_default_and_apply_to_csv_only() {
        let csv = GOOD.replace("orders.ndjson", "orders.csv");
        let src = FileOptions::from_config(&source(&csv)).unwrap();
        assert_eq!(src.format(), FileFormat::Csv);
        assert!(src.null_values().iter().any(|v| v == "NA"));
        assert!(src.null_values().iter().any(|v| v == "\\N"));
        let set = csv.replace(
            "path = \"orders.csv\"",
            "path = \"orders.csv\"\nnull_values = [\"-\"]",
        );
        let src = FileOptions::from_config(&source(&set)).unwrap();
        assert_eq!(src.null_values(), vec!["-".to_string()]);
        let ndjson = GOOD.replace(
            "path = \"orders.ndjson\"",
            "path = \"orders.ndjson\"\nnull_values = [\"NA\"]",
        );
        let e = error(&ndjson);
        assert!(
            e.contains("line 6") && e.contains("null_values applies to CSV"),
            "{e}"
        );
        let bad = set.replace("[\"-\"]", "\"NA\"");
        let e = error(&bad);
        assert!(e.contains("null_values") && e.contains("line 9"), "{e}");
    }

    #[test]
    fn a_key_of_another_engine_names_key_engine_and_line() {
        let bad = GOOD.replace("engine = \"file\"", "engine = \"generate\"\nrecords = 5");
        let e = error(&bad);
        assert_eq!(
            e,
            "line 9: streams.source.path: not a key of engine \"generate\" \
             (stream \"orders\"); its keys are records"
        );
        let bad = GOOD.replace(
            "path = \"orders.ndjson\"",
            "path = \"o\"\nmax_body = \"1MiB\"",
        );
        let e = error(&bad);
        assert_eq!(
            e,
            "line 9: streams.source.max_body: not a key of engine \"file\" \
             (stream \"orders\"); its keys are path, format, follow, null_values"
        );
        let bad = GOOD.replace("engine = \"file\"", "engine = \"http\"");
        assert!(error(&bad).contains("its keys are ingest_token, max_body"));
    }

    #[test]
    fn the_postgres_cdc_example_is_valid() {
        let text = include_str!("../../../examples/postgres-cdc.toml")
            .replace("${PGPASSWORD}", "x")
            .replace("${WAREHOUSE_PASSWORD}", "x");
        let c = Config::parse(&text, "postgres-cdc.toml").unwrap();
        validate(&c).unwrap();
        let s = PostgresSettings::from_config(&source(&text)).unwrap();
        assert_eq!(s.mode, crate::postgres::Mode::Cdc);
        assert_eq!(s.snapshot, crate::postgres::Snapshot::Initial);
        assert_eq!(s.tables.len(), 2);
        assert_eq!(s.table.to_string(), "public.orders");
        let both = text.replace("tables = [", "table = \"t\"\ntables = [");
        let e = PostgresSettings::from_config(&source(&both)).unwrap_err();
        assert!(
            e.contains("streams.source.tables: set table or tables, not both"),
            "{e}"
        );
        let star = text.replace("\"public.*\"", "\"*\"");
        let star = star.replace("[\"public.orders\", \"public.customers\"]", "[\"*\"]");
        let e = PostgresSettings::from_config(&source(&star)).unwrap_err();
        assert!(e.contains("needs its schema"), "{e}");
        let polled = text.replace("mode = \"cdc\"", "mode = \"cursor\"\ncursor = \"id\"");
        let e = PostgresSettings::from_config(&source(&polled)).unwrap_err();
        assert!(e.contains("applies to mode = \"cdc\" only"), "{e}");
    }

    #[test]
    fn required_keys_name_engine_and_line() {
        let bad = GOOD.replace("path = \"orders.ndjson\"", "follow = true");
        let e = error(&bad);
        assert_eq!(
            e,
            "line 6: streams.source.path is required for engine \"file\" (stream \"orders\")"
        );
        let bad = GOOD.replace(
            "engine = \"file\"\npath = \"orders.ndjson\"",
            "engine = \"generate\"",
        );
        assert!(error(&bad).contains("streams.source.records is required for engine \"generate\""));
        let bad = GOOD.replace(
            "engine = \"file\"\npath = \"orders.ndjson\"",
            "engine = \"postgres\"",
        );
        let e = error(&bad);
        assert!(
            e.contains("streams.source.table: table is required for mode = \"cursor\"")
                && e.contains("engine \"postgres\""),
            "{e}"
        );
    }

    #[test]
    fn every_engine_reads_its_own_keys() {
        let http = GOOD.replace(
            "engine = \"file\"\npath = \"orders.ndjson\"",
            "engine = \"http\"\ningest_token = \"t0ken\"\nmax_body = \"1MiB\"",
        );
        let o = HttpOptions::from_config(&source(&http)).unwrap();
        assert_eq!(
            (o.token(), o.max_body.map(|s| s.0)),
            (Some("t0ken"), Some(1 << 20))
        );
        assert!(!format!("{o:?}").contains("t0ken"));
        let generate = GOOD.replace(
            "engine = \"file\"\npath = \"orders.ndjson\"",
            "engine = \"generate\"\nrecords = 7",
        );
        assert_eq!(
            GenerateOptions::from_config(&source(&generate))
                .unwrap()
                .records,
            7
        );
        let followed = GOOD.replace(
            "\"orders.ndjson\"",
            "\"o.ndjson\"\nfollow = true\nformat = \"csv\"",
        );
        let o = FileOptions::from_config(&source(&followed)).unwrap();
        assert!(o.follow && o.format() == FileFormat::Csv);
    }

    /// The secrets among the sources' own keys, broken in every way a
    /// line can be: the error names the line and the key, never the value
    /// (core's test of its own secret keys, on these).
    #[test]
    fn a_broken_secret_line_names_line_and_key_but_not_the_value() {
        let c = Config::parse(ALL_SECRETS, "t.toml").unwrap();
        validate(&c).unwrap();
        assert!(!format!("{c:?}").contains("S3CRET"));
        for secret in [
            ("ingest_token", "1ngest-S3CRET", 10, "streams.source"),
            ("password", "src-S3CRET", 22, "streams.source"),
        ] {
            assert_broken_secret_line_is_named_not_shown(ALL_SECRETS, secret, error);
        }
    }
}
