//! The field names a batch would add as columns, checked before any SQL
//! runs: each must be a name the engine takes ([`Dialect::invalid_name`]),
//! and where the engine ignores case in column names (MySQL) no two may
//! differ only in case, nor one from a column the table already has.
//! The server would refuse such names on every attempt, so a batch with
//! one is rejected whole, and the error names every bad record.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::types::Dialect;

/// Records an error spells out; the rest are counted.
const SHOWN: usize = 20;

/// Which spelling of each name (as the server compares names) a plan
/// keeps: the table's column, else the first one declared or seen.
pub struct Spellings {
    dialect: Dialect,
    /// Whether the plan adds columns at all; if not, no new name becomes
    /// a column and only the names' own validity matters.
    adds: bool,
    /// folded name -> (kept spelling, a column the table already has)
    kept: HashMap<String, (String, bool)>,
}

impl Spellings {
    pub fn new<'a>(
        dialect: Dialect,
        adds: bool,
        columns: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let mut kept = HashMap::new();
        for c in columns {
            kept.entry(dialect.fold(c).into_owned())
                .or_insert_with(|| (c.to_string(), true));
        }
        Spellings {
            dialect,
            adds,
            kept,
        }
    }

    /// Why field `name` cannot become a column, if it cannot; otherwise
    /// its spelling is the one kept from now on.
    pub fn check(&mut self, name: &str) -> Option<String> {
        if let Some(why) = self.dialect.invalid_name(name) {
            return Some(format!("field {}: {why}", shown(name)));
        }
        if !self.adds {
            return None;
        }
        let (other, existing) = self
            .kept
            .entry(self.dialect.fold(name).into_owned())
            .or_insert_with(|| (name.to_string(), false));
        if other.as_str() == name {
            return None;
        }
        let with = if *existing {
            format!("column {other:?} of the table")
        } else {
            format!("{other:?}")
        };
        Some(format!(
            "field {} collides with {with} (MySQL column names are case-insensitive)",
            shown(name)
        ))
    }
}

/// A name for a message: a very long one is cut.
fn shown(name: &str) -> String {
    const MAX: usize = 80;
    match name.char_indices().nth(MAX) {
        None => format!("{name:?}"),
        Some((cut, _)) => format!("{:?}...", &name[..cut]),
    }
}

/// A batch's records whose field names cannot be columns, each with why,
/// in batch order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BadNames {
    records: BTreeMap<usize, Vec<String>>,
}

impl BadNames {
    pub fn add(&mut self, item: usize, why: &str) {
        let causes = self.records.entry(item).or_default();
        if !causes.iter().any(|c| c == why) {
            causes.push(why.to_string());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The bad records' indexes within the batch.
    pub fn items(&self) -> impl Iterator<Item = usize> + '_ {
        self.records.keys().copied()
    }
}

impl fmt::Display for BadNames {
    /// `record 3: field "Name" collides with "name" (...); record 7: ...;
    /// and 12 more records`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self.records.iter().take(SHOWN);
        let lines = shown.flat_map(|(item, causes)| causes.iter().map(move |c| (item, c)));
        for (n, (item, cause)) in lines.enumerate() {
            if n > 0 {
                f.write_str("; ")?;
            }
            write!(f, "record {item}: {cause}")?;
        }
        let more = self.records.len().saturating_sub(SHOWN);
        if more > 0 {
            write!(
                f,
                "; and {more} more record{}",
                if more == 1 { "" } else { "s" }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MY: Dialect = Dialect::Mysql;
    const PG: Dialect = Dialect::Postgres;

    #[test]
    fn mysql_names_the_server_refuses() {
        for (name, cause) in [
            ("", "empty"),
            ("a\0b", "NUL"),
            ("trailing ", "whitespace"),
            ("tab\t", "whitespace"),
            ("smile😀", "U+1F600"),
            (&"x".repeat(65), "longer than 64 characters"),
        ] {
            let why = MY.invalid_name(name).unwrap_or_default();
            assert!(why.contains(cause), "{name:?}: {why:?}");
        }
        // accepted by the server (checked against MariaDB)
        for name in [
            " leading",
            "inner space",
            "a.b",
            "ünïcødé",
            "\u{FFFF}",
            &"é".repeat(64),
        ] {
            assert_eq!(MY.invalid_name(name), None, "{name:?}");
        }
        // PostgreSQL takes all of these as quoted names
        for name in ["trailing ", "smile😀", "Name"] {
            assert_eq!(PG.invalid_name(name), None, "{name:?}");
        }
    }

    #[test]
    fn mysql_folds_case_and_postgres_does_not() {
        assert_eq!(MY.fold("Name"), "name");
        assert_eq!(MY.fold("ÄÖ"), "äö");
        // titlecase and the Kelvin sign fold too, as MariaDB's do
        assert_eq!(MY.fold("ǅ"), MY.fold("ǆ"));
        assert_eq!(MY.fold("\u{212A}"), "k");
        assert_eq!(MY.fold("İd"), "id");
        // accents are not case: two columns
        assert_ne!(MY.fold("e"), MY.fold("é"));
        assert_eq!(PG.fold("Name"), "Name");
    }

    #[test]
    fn case_collisions_keep_the_first_spelling_or_the_columns() {
        let mut s = Spellings::new(MY, true, ["id"]);
        assert_eq!(s.check("name"), None);
        assert_eq!(s.check("name"), None);
        let why = s.check("Name").unwrap();
        assert_eq!(
            why,
            r#"field "Name" collides with "name" (MySQL column names are case-insensitive)"#
        );
        let why = s.check("ID").unwrap();
        assert!(why.contains(r#"column "id" of the table"#), "{why}");
        // invalid names are refused whether or not the plan adds columns
        let mut s = Spellings::new(MY, false, ["id"]);
        assert_eq!(s.check("ID"), None);
        assert!(s.check("x ").is_some());
        // PostgreSQL: distinct columns
        let mut s = Spellings::new(PG, true, ["id"]);
        assert_eq!(s.check("ID"), None);
        assert_eq!(s.check("Id"), None);
    }

    #[test]
    fn the_message_names_every_record_up_to_a_cap() {
        let mut bad = BadNames::default();
        bad.add(3, "field \"a \": why");
        bad.add(3, "field \"a \": why");
        bad.add(3, "field \"b\": other");
        bad.add(1, "field \"c\": third");
        assert_eq!(
            bad.to_string(),
            "record 1: field \"c\": third; record 3: field \"a \": why; record 3: field \"b\": other"
        );
        let mut bad = BadNames::default();
        for i in 0..25 {
            bad.add(i, "x");
        }
        let text = bad.to_string();
        assert!(text.contains("record 19: x"), "{text}");
        assert!(!text.contains("record 20"), "{text}");
        assert!(text.ends_with("; and 5 more records"), "{text}");
        assert_eq!(bad.items().count(), 25);
        let long = "y".repeat(500);
        let why = Spellings::new(MY, true, std::iter::empty())
            .check(&long)
            .unwrap();
        assert!(why.len() < 200, "{why}");
    }
}
