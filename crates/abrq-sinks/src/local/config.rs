//! The `local` engine's config: `database` is the base directory; its own
//! keys are the object keys (`prefix`, `format`, `date_partitioning`,
//! `manifest`). Nothing on disk is touched: the directory is made on the
//! first write, and `check()` proves it writable.

use std::path::PathBuf;

use abrq_core::config::DestinationConfig;

use super::transport::relative_path;
use crate::keys::Connection;
use crate::object::ObjectOptions;

pub const CONNECTION: Connection = Connection {
    host: None,
    port: None,
    database: Some("base directory"),
    username: None,
    password: None,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSettings {
    pub root: PathBuf,
    pub object: ObjectOptions,
}

impl LocalSettings {
    pub fn from_config(cfg: &DestinationConfig) -> Result<LocalSettings, String> {
        let object: ObjectOptions = cfg.options.parse()?;
        let root = CONNECTION.required(cfg, "database", &cfg.database)?;
        object.check_prefix(cfg, |p| relative_path(p).is_some())?;
        Ok(LocalSettings {
            root: PathBuf::from(root),
            object,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectFormat;
    use abrq_core::config::Config;

    fn settings(lines: &str) -> Result<LocalSettings, String> {
        let cfg = Config::destination("lake", &format!("engine = \"local\"\n{lines}")).unwrap();
        LocalSettings::from_config(&cfg)
    }

    #[test]
    fn object_keys_with_their_defaults() {
        let s = settings("database = \"/tmp/out\"\nformat = \"csv.gz\"").unwrap();
        assert_eq!(s.root, PathBuf::from("/tmp/out"));
        assert_eq!(s.object.format, ObjectFormat::CsvGz);
        assert_eq!(s.object.manifest, None);
        let s = settings("database = \"/tmp/out\"").unwrap();
        assert_eq!(s.object.format, ObjectFormat::JsonlGz);
    }

    #[test]
    fn a_key_of_another_engine_is_named_with_the_engine_and_line() {
        let e = settings("database = \"/tmp/out\"\npartition_key = \"id\"").unwrap_err();
        assert_eq!(
            e,
            "line 9: streams.destinations.partition_key: not a key of engine \"local\" \
             (destination \"lake\"); its keys are prefix, format, date_partitioning, manifest"
        );
        let e = settings("database = \"/tmp/out\"\nformat = \"xml\"").unwrap_err();
        assert!(
            e.starts_with("line 9, column 10: streams.destinations.format: "),
            "{e}"
        );
        assert!(e.contains("xml"), "{e}");
        let e = settings("format = \"csv\"").unwrap_err();
        assert!(e.contains("streams.destinations.database"), "{e}");
    }
}
