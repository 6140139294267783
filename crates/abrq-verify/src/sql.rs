//! The statements each side runs, for one table: every value the
//! comparison needs is computed by the database and comes back as text.
//!
//! A row's hash is the MD5 of its compared columns, each converted to the
//! replica column's type first (so a source `timestamp` and the replica's
//! `timestamptz`, or `json` and `jsonb`, render alike), joined by a unit
//! separator, with a record separator for null. A range's checksum is its
//! row count and the sum of the first 60 bits of its rows' hashes: exact
//! (the sum is a numeric/decimal), independent of row order, and computed
//! without holding the range's text in memory as a `string_agg` would.

/// The database a side runs on, and its quoting: the relational
/// destinations' own.
pub use abrq_sinks::relational::types::Dialect;

/// `schema.name` quoted, or `name` alone (the connection's own schema).
pub fn qualified(d: Dialect, schema: Option<&str>, name: &str) -> String {
    match schema {
        Some(s) => d.qualified(s, name),
        None => d.quote(name),
    }
}

/// How a column's values are written as text and read back from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Form {
    /// PostgreSQL: `::text`, and back by a cast to this type.
    Pg(String),
    /// MySQL: the type a value is converted to before it is text, as
    /// `CAST(... AS <cast>)` takes it (None: as it is).
    My { cast: Option<String>, binary: bool },
    /// MySQL bytes whose replica column is text: abrq wrote them as `\x`
    /// and lowercase hex digits, so the source's side renders them so.
    MyBytesAsText,
}

#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub form: Form,
}

/// A key bound: each key column's value as text.
pub type Key = Vec<String>;

/// Half-open key range `[lo, hi)`; None is unbounded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Range {
    pub lo: Option<Key>,
    pub hi: Option<Key>,
}

/// One side's table, as its statements need it.
#[derive(Debug, Clone)]
pub struct TableSql {
    pub dialect: Dialect,
    /// Quoted, qualified.
    pub table: String,
    pub key: Vec<Column>,
    /// Compared columns (keys included), each in the replica's form.
    pub columns: Vec<Column>,
    /// Rows this side counts (the source's `where`; the replica's live
    /// rows under soft deletes), as SQL.
    pub only: Option<String>,
}

/// A statement and its parameters, all text.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub sql: String,
    pub params: Vec<String>,
}

impl TableSql {
    fn q(&self, ident: &str) -> String {
        self.dialect.quote(ident)
    }

    fn placeholder(&self, params: &mut Vec<String>, value: &str) -> String {
        params.push(value.to_string());
        match self.dialect {
            Dialect::Postgres => format!("${}", params.len()),
            Dialect::Mysql => "?".into(),
        }
    }

    /// A bound value, converted back to the column's type.
    fn bind(&self, params: &mut Vec<String>, c: &Column, value: &str) -> String {
        let p = self.placeholder(params, value);
        match &c.form {
            Form::Pg(ty) => format!("CAST({p}::text AS {ty})"),
            Form::My { binary: true, .. } => format!("UNHEX({p})"),
            Form::My {
                cast: Some(cast), ..
            } => format!("CAST({p} AS {cast})"),
            Form::My { cast: None, .. } => p,
            Form::MyBytesAsText => format!("CONCAT(CHAR(92 USING utf8mb4), 'x', LOWER(HEX({p})))"),
        }
    }

    /// `expr` (a column of this form) as text.
    fn text(&self, c: &Column, expr: &str) -> String {
        match &c.form {
            Form::Pg(ty) => format!("CAST({expr} AS {ty})::text"),
            Form::My { binary: true, .. } => format!("HEX({expr})"),
            Form::My {
                cast: Some(cast), ..
            } => format!("CAST(CAST({expr} AS {cast}) AS CHAR)"),
            Form::My { cast: None, .. } => format!("CAST({expr} AS CHAR)"),
            Form::MyBytesAsText => {
                format!("CONCAT(CHAR(92 USING utf8mb4), 'x', LOWER(HEX({expr})))")
            }
        }
    }

    fn key_list(&self, prefix: &str) -> String {
        let cols: Vec<String> = self
            .key
            .iter()
            .map(|c| format!("{prefix}{}", self.q(&c.name)))
            .collect();
        cols.join(", ")
    }

    fn key_texts(&self) -> String {
        let cols: Vec<String> = self
            .key
            .iter()
            .map(|c| self.text(c, &self.q(&c.name)))
            .collect();
        cols.join(", ")
    }

    /// The row's hash as 32 hex digits.
    fn row_hash(&self) -> String {
        let (sep, null) = match self.dialect {
            Dialect::Postgres => ("E'\\x1f'", "E'\\x1e'"),
            Dialect::Mysql => ("CHAR(31 USING utf8mb4)", "CHAR(30 USING utf8mb4)"),
        };
        let parts: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("COALESCE({}, {null})", self.text(c, &self.q(&c.name))))
            .collect();
        match self.dialect {
            Dialect::Postgres => format!("md5(concat_ws({sep}, {}))", parts.join(", ")),
            Dialect::Mysql => format!("MD5(CONCAT_WS({sep}, {}))", parts.join(", ")),
        }
    }

    /// `(k1, k2) <op> (v1, v2)`.
    fn compare(&self, params: &mut Vec<String>, op: &str, key: &Key) -> String {
        let bound: Vec<String> = self
            .key
            .iter()
            .zip(key)
            .map(|(c, v)| self.bind(params, c, v))
            .collect();
        format!("({}) {op} ({})", self.key_list(""), bound.join(", "))
    }

    fn filter(&self, params: &mut Vec<String>, range: &Range) -> String {
        let mut parts = Vec::new();
        if let Some(lo) = &range.lo {
            parts.push(self.compare(params, ">=", lo));
        }
        if let Some(hi) = &range.hi {
            parts.push(self.compare(params, "<", hi));
        }
        if let Some(only) = &self.only {
            parts.push(format!("({only})"));
        }
        match parts.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", parts.join(" AND ")),
        }
    }

    /// Row count and hash sum of a range: two texts.
    pub fn checksum(&self, range: &Range) -> Query {
        let mut params = Vec::new();
        let filter = self.filter(&mut params, range);
        let hash = self.row_hash();
        let sql = match self.dialect {
            Dialect::Postgres => format!(
                "SELECT count(*)::text, coalesce(sum(('x' || substr(h, 1, 15))::bit(60)::bigint), 0)::text \
                 FROM (SELECT {hash} AS h FROM {}{filter}) s",
                self.table
            ),
            Dialect::Mysql => format!(
                "SELECT CAST(COUNT(*) AS CHAR), \
                 CAST(COALESCE(SUM(CAST(CONV(SUBSTRING(h, 1, 15), 16, 10) AS UNSIGNED)), 0) AS CHAR) \
                 FROM (SELECT {hash} AS h FROM {}{filter}) s",
                self.table
            ),
        };
        Query { sql, params }
    }

    /// Every `step`th key of a range, in key order: the bounds that cut it
    /// into parts of `step` rows.
    pub fn split_points(&self, range: &Range, step: u64) -> Query {
        let mut params = Vec::new();
        let filter = self.filter(&mut params, range);
        let keys = self.key_list("");
        let inner: Vec<String> = self
            .key
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} AS _k{i}", self.q(&c.name)))
            .collect();
        let outer: Vec<String> = self
            .key
            .iter()
            .enumerate()
            .map(|(i, c)| self.text(c, &format!("s._k{i}")))
            .collect();
        let sql = format!(
            "SELECT {} FROM (SELECT {}, row_number() OVER (ORDER BY {keys}) AS _rn FROM {}{filter}) s \
             WHERE MOD(s._rn, {step}) = 0 ORDER BY s._rn",
            outer.join(", "),
            inner.join(", "),
            self.table
        );
        Query { sql, params }
    }

    /// Each row of a range: its key texts, then its hash.
    pub fn rows(&self, range: &Range) -> Query {
        let mut params = Vec::new();
        let filter = self.filter(&mut params, range);
        let sql = format!(
            "SELECT {}, {} FROM {}{filter}",
            self.key_texts(),
            self.row_hash(),
            self.table
        );
        Query { sql, params }
    }

    /// `((b1, b2), (b1, b2), ...)`: each key bound, cast to its column.
    fn key_tuples(&self, params: &mut Vec<String>, keys: &[Key]) -> String {
        let tuples: Vec<String> = keys
            .iter()
            .map(|k| {
                let bound: Vec<String> = self
                    .key
                    .iter()
                    .zip(k)
                    .map(|(c, v)| self.bind(params, c, v))
                    .collect();
                format!("({})", bound.join(", "))
            })
            .collect();
        format!("({})", tuples.join(", "))
    }

    /// The rows with these keys: key texts, then hash.
    pub fn rows_by_key(&self, keys: &[Key]) -> Query {
        let mut params = Vec::new();
        let tuples = self.key_tuples(&mut params, keys);
        let mut sql = format!(
            "SELECT {}, {} FROM {} WHERE ({}) IN {tuples}",
            self.key_texts(),
            self.row_hash(),
            self.table,
            self.key_list(""),
        );
        if let Some(only) = &self.only {
            sql.push_str(&format!(" AND ({only})"));
        }
        Query { sql, params }
    }

    /// Deletes the rows with these keys.
    pub fn delete_by_key(&self, keys: &[Key]) -> Query {
        let mut params = Vec::new();
        let tuples = self.key_tuples(&mut params, keys);
        let sql = format!(
            "DELETE FROM {} WHERE ({}) IN {tuples}",
            self.table,
            self.key_list("")
        );
        Query { sql, params }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg() -> TableSql {
        let id = Column {
            name: "id".into(),
            form: Form::Pg("bigint".into()),
        };
        TableSql {
            dialect: Dialect::Postgres,
            table: "\"public\".\"t\"".into(),
            key: vec![id.clone()],
            columns: vec![
                id,
                Column {
                    name: "at".into(),
                    form: Form::Pg("timestamp with time zone".into()),
                },
            ],
            only: Some("\"_abrq_deleted_at\" IS NULL".into()),
        }
    }

    #[test]
    fn ranges_bind_their_bounds_cast_to_the_key_type() {
        let r = Range {
            lo: Some(vec!["10".into()]),
            hi: Some(vec!["20".into()]),
        };
        let q = pg().checksum(&r);
        assert_eq!(q.params, ["10", "20"]);
        assert!(
            q.sql.contains("(\"id\") >= (CAST($1::text AS bigint))"),
            "{}",
            q.sql
        );
        assert!(
            q.sql.contains("(\"id\") < (CAST($2::text AS bigint))"),
            "{}",
            q.sql
        );
        assert!(
            q.sql.contains("AND (\"_abrq_deleted_at\" IS NULL)"),
            "{}",
            q.sql
        );
        assert!(q
            .sql
            .contains("CAST(\"at\" AS timestamp with time zone)::text"));
    }

    #[test]
    fn mysql_binary_keys_travel_as_hex() {
        let k = Column {
            name: "k".into(),
            form: Form::My {
                cast: None,
                binary: true,
            },
        };
        let t = TableSql {
            dialect: Dialect::Mysql,
            table: "`d`.`t`".into(),
            key: vec![k.clone()],
            columns: vec![k],
            only: None,
        };
        let q = t.rows_by_key(&[vec!["00FF".into()], vec!["01".into()]]);
        assert_eq!(q.params, ["00FF", "01"]);
        assert!(q.sql.starts_with("SELECT HEX(`k`), MD5("), "{}", q.sql);
        assert!(
            q.sql.ends_with("WHERE (`k`) IN ((UNHEX(?)), (UNHEX(?)))"),
            "{}",
            q.sql
        );
        let s = t.split_points(&Range::default(), 100);
        assert!(s.sql.contains("MOD(s._rn, 100) = 0"), "{}", s.sql);
        assert!(
            s.sql
                .starts_with("SELECT HEX(s._k0) FROM (SELECT `k` AS _k0"),
            "{}",
            s.sql
        );
    }
}
