//! How each engine spells identifiers and types. Every identifier abrq puts
//! into SQL goes through [`Dialect::quote`]; values are always bound.

use std::borrow::Cow;

use super::types::{Dialect, SqlType};

/// What MySQL counts as whitespace at the end of a name (ASCII only).
fn mysql_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
}

impl Dialect {
    /// The identifier quoted, with its quote character doubled inside.
    pub fn quote(self, ident: &str) -> String {
        let q = match self {
            Dialect::Postgres => '"',
            Dialect::Mysql => '`',
        };
        let mut out = String::with_capacity(ident.len() + 2);
        out.push(q);
        for c in ident.chars() {
            if c == q {
                out.push(q);
            }
            out.push(c);
        }
        out.push(q);
        out
    }

    /// `schema.table`, both quoted.
    pub fn qualified(self, schema: &str, table: &str) -> String {
        format!("{}.{}", self.quote(schema), self.quote(table))
    }

    /// Why `name` cannot be a column or table name here, if it cannot.
    /// PostgreSQL silently truncates names past 63 bytes, which would make
    /// the column and the field never match again, so refuse them instead.
    /// MySQL refuses a name that ends in whitespace (error 1166), holds a
    /// character outside the Basic Multilingual Plane (1300: identifiers
    /// are utf8mb3) or is longer than 64 characters (1059).
    pub fn invalid_name(self, name: &str) -> Option<String> {
        let (limit, unit, len) = match self {
            Dialect::Postgres => (63, "bytes", name.len()),
            Dialect::Mysql => (64, "characters", name.chars().count()),
        };
        if name.is_empty() {
            return Some("the name is empty".into());
        }
        if name.contains('\0') {
            return Some("the name contains a NUL character".into());
        }
        if len > limit {
            return Some(format!("the name is longer than {limit} {unit}"));
        }
        match self {
            Dialect::Postgres => None,
            Dialect::Mysql => {
                if let Some(c) = name.chars().last().filter(|c| mysql_space(*c)) {
                    return Some(format!(
                        "the name ends with {c:?}, and MySQL names cannot end with whitespace"
                    ));
                }
                name.chars().find(|c| u32::from(*c) > 0xFFFF).map(|c| {
                    format!(
                        "the name contains {c:?} (U+{:04X}), and MySQL names take only \
                         characters up to U+FFFF",
                        u32::from(c)
                    )
                })
            }
        }
    }

    /// The name as the server compares column names: PostgreSQL compares
    /// quoted names exactly, MySQL ignores case (per character, as its
    /// `tolower` does: `Name` and `name` are one column).
    pub fn fold(self, name: &str) -> Cow<'_, str> {
        match self {
            Dialect::Postgres => Cow::Borrowed(name),
            Dialect::Mysql
                if name
                    .bytes()
                    .all(|b| b.is_ascii() && !b.is_ascii_uppercase()) =>
            {
                Cow::Borrowed(name)
            }
            // the first char of a lowercase mapping is the simple mapping
            // (only U+0130 maps to two)
            Dialect::Mysql => Cow::Owned(
                name.chars()
                    .map(|c| c.to_lowercase().next().unwrap_or(c))
                    .collect(),
            ),
        }
    }

    /// The type as written in `CREATE TABLE` and `ALTER TABLE`.
    pub fn type_name(self, ty: &SqlType) -> String {
        use SqlType::*;
        let pg = self == Dialect::Postgres;
        match ty {
            Bool => "boolean".into(),
            Int(b) if *b <= 8 && !pg => "tinyint".into(),
            Int(b) if *b <= 16 => "smallint".into(),
            Int(b) if *b <= 24 && !pg => "mediumint".into(),
            Int(b) if *b <= 32 => if pg { "integer" } else { "int" }.into(),
            Int(_) => "bigint".into(),
            Float(b) if *b <= 32 => if pg { "real" } else { "float" }.into(),
            Float(_) => if pg { "double precision" } else { "double" }.into(),
            Numeric(None) => if pg { "numeric" } else { "decimal(65,30)" }.into(),
            Numeric(Some((p, s))) => format!("{}({p},{s})", if pg { "numeric" } else { "decimal" }),
            Text(None) => if pg { "text" } else { "longtext" }.into(),
            Text(Some(n)) => format!("varchar({n})"),
            Date => "date".into(),
            Timestamp => if pg { "timestamptz" } else { "datetime(6)" }.into(),
            Json => if pg { "jsonb" } else { "json" }.into(),
            Other { name, .. } => name.clone(),
        }
    }

    /// A type name from a catalog or a source's declaration, in either
    /// engine's spelling; `None` when abrq does not model it.
    pub fn parse_type(self, raw: &str) -> Option<SqlType> {
        let t = raw.trim().to_ascii_lowercase();
        let unsigned = t.ends_with(" unsigned") || t.contains(" unsigned ");
        let t = t.replace(" unsigned", "").replace(" zerofill", "");
        let (base, args) = match t.split_once('(') {
            Some((b, rest)) => (b.trim().to_string(), rest.trim_end_matches(')').to_string()),
            None => (t.clone(), String::new()),
        };
        let nums: Vec<u32> = args
            .split(',')
            .filter_map(|a| a.trim().parse().ok())
            .collect();
        let int = |bits: u8| -> SqlType {
            match (unsigned, bits) {
                (false, b) => SqlType::Int(b),
                (true, 64) => self.unbounded_numeric(),
                (true, b) => SqlType::Int(if b < 32 { b * 2 } else { 64 }),
            }
        };
        Some(match base.as_str() {
            "bool" | "boolean" => SqlType::Bool,
            "tinyint" if nums == [1] && !unsigned => SqlType::Bool,
            "tinyint" => int(8),
            "smallint" | "int2" | "smallserial" => int(16),
            "mediumint" => int(24),
            "int" | "integer" | "int4" | "serial" => int(32),
            "bigint" | "int8" | "bigserial" => int(64),
            "real" | "float4" | "float" => SqlType::Float(32),
            "double" | "double precision" | "float8" => SqlType::Float(64),
            "numeric" | "decimal" => match nums.as_slice() {
                [] => self.unbounded_numeric(),
                [p] => SqlType::Numeric(Some((*p, 0))),
                [p, s, ..] => SqlType::Numeric(Some((*p, *s))),
            },
            "text" | "tinytext" | "mediumtext" | "longtext" | "string" => SqlType::Text(None),
            "varchar" | "character varying" => match nums.as_slice() {
                [n, ..] => SqlType::Text(Some(*n)),
                [] => SqlType::Text(None),
            },
            "date" => SqlType::Date,
            "timestamptz" | "timestamp with time zone" | "datetime" => SqlType::Timestamp,
            // PostgreSQL's zone-less timestamp would drop an offset silently
            "timestamp" if self == Dialect::Mysql => SqlType::Timestamp,
            "json" | "jsonb" => SqlType::Json,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG: Dialect = Dialect::Postgres;
    const MY: Dialect = Dialect::Mysql;

    #[test]
    fn quoting_doubles_the_quote() {
        assert_eq!(PG.quote(r#"we"ird"#), r#""we""ird""#);
        assert_eq!(MY.quote("we`ird"), "`we``ird`");
        assert_eq!(PG.qualified("s", "t"), r#""s"."t""#);
    }

    #[test]
    fn names_too_long_are_refused() {
        assert!(PG.invalid_name(&"x".repeat(63)).is_none());
        assert!(PG.invalid_name(&"x".repeat(64)).is_some());
        assert!(MY.invalid_name(&"é".repeat(64)).is_none());
        assert!(MY.invalid_name("").is_some());
    }

    #[test]
    fn parses_both_spellings() {
        assert_eq!(
            PG.parse_type("character varying(10)"),
            Some(SqlType::Text(Some(10)))
        );
        assert_eq!(
            PG.parse_type("timestamp with time zone"),
            Some(SqlType::Timestamp)
        );
        assert_eq!(PG.parse_type("timestamp without time zone"), None);
        assert_eq!(MY.parse_type("tinyint(1)"), Some(SqlType::Bool));
        assert_eq!(MY.parse_type("int(11) unsigned"), Some(SqlType::Int(64)));
        assert_eq!(
            MY.parse_type("bigint(20) unsigned"),
            Some(SqlType::Numeric(Some((65, 30))))
        );
        assert_eq!(
            MY.parse_type("decimal(10,2)"),
            Some(SqlType::Numeric(Some((10, 2))))
        );
        assert_eq!(PG.parse_type("numeric"), Some(SqlType::Numeric(None)));
        assert_eq!(PG.parse_type("uuid"), None);
    }

    #[test]
    fn type_names_round_trip() {
        for d in [PG, MY] {
            for t in [
                SqlType::Bool,
                SqlType::Int(16),
                SqlType::Int(32),
                SqlType::Int(64),
                SqlType::Float(64),
                SqlType::Numeric(Some((12, 3))),
                SqlType::Text(None),
                SqlType::Text(Some(40)),
                SqlType::Date,
                SqlType::Timestamp,
                SqlType::Json,
            ] {
                assert_eq!(d.parse_type(&d.type_name(&t)), Some(t.clone()), "{d:?}");
            }
        }
    }
}
