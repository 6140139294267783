//! What a table's streamed copy selects and in which order, and the form
//! each column's text takes in JSON: the one `row_to_json` gives it, so a
//! streamed copy writes what the paged copy wrote. Common built-in types
//! are rendered here from their text; any other type is rendered by the
//! server (`to_json`), which is what `row_to_json` does for it.

use abrq_core::TableRef;
use serde_json::{Map, Value};
use sqlx::postgres::PgConnection;

use super::super::super::config::{quote, TableName};
use super::super::super::cursor::{declared, Position, PHYSICAL};
use crate::cdc::cursor::KeyRange;
use crate::error::{Context as _, Failure, SourceError};

/// How a column's text becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// An integer: its text is the JSON number.
    Number,
    Bool,
    /// A float: its text, or a string for NaN and the infinities.
    Float,
    /// A JSON string of the text (`numeric` too: a number would lose digits).
    Text,
    /// A JSON string in XSD form (`T` between date and time).
    Timestamp {
        zoned: bool,
    },
    /// JSON text already (`json`, `jsonb`, and what the server rendered).
    Json,
}

/// A table's copy: the statement and how to read its rows back.
pub(crate) struct Plan {
    pub table: TableRef,
    /// The schema instruction every page starts with.
    pub schema: Map<String, Value>,
    /// Each column's `"name":`, after `{` or `,`.
    pub names: Vec<Vec<u8>>,
    pub forms: Vec<Form>,
    /// The fields of the key (the cursor first), or of the row's place.
    pub key: Vec<usize>,
    /// The row's place is read as a last field, not part of the record.
    pub physical: bool,
    /// What the copy selects, from where, in which order, and the types
    /// of what it orders by (the key's, or the place's).
    select: String,
    from: String,
    order: Vec<String>,
    types: Vec<String>,
}

/// The built-in type oids (pg_type.dat) rendered here.
fn form_of(oid: i64, typtype: &str, category: &str) -> Option<Form> {
    // user-made types may have a cast to json that row_to_json uses
    const FIRST_USER_OID: i64 = 16384;
    Some(match oid {
        16 => Form::Bool,
        20 | 21 | 23 => Form::Number,
        700 | 701 => Form::Float,
        114 | 3802 => Form::Json,
        1114 => Form::Timestamp { zoned: false },
        1184 => Form::Timestamp { zoned: true },
        // a composite as its text, as the paged copy reads it
        _ if typtype == "c" => Form::Text,
        _ if oid < FIRST_USER_OID && category != "A" && matches!(typtype, "b" | "r" | "m") => {
            Form::Text
        }
        _ => return None,
    })
}

impl Plan {
    /// Reads `table`'s columns on `conn` (under the copy's snapshot) for
    /// the copy of its rows in `key` order; a table without a key is read
    /// in its rows' places.
    pub async fn read(
        conn: &mut PgConnection,
        table: &TableName,
        key: &[String],
    ) -> Result<Plan, SourceError> {
        let cols: Vec<(String, String, i64, String, String, i64)> = sqlx::query_as(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.atttypid::int8, \
             t.typtype::text, t.typcategory::text, a.attnum::int8 \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = CAST($1::text AS regclass) AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum",
        )
        .bind(table.quoted())
        .fetch_all(&mut *conn)
        .await
        .context("snapshot: cannot read the table's columns")?;
        if cols.is_empty() {
            return Err(SourceError::new(
                Failure::Invalid,
                format!("snapshot: {table} has no columns"),
            ));
        }
        let mut select = Vec::new();
        let mut forms = Vec::new();
        for (name, _, oid, typtype, category, _) in &cols {
            let col = format!("r.{}", quote(name));
            let (expr, form) = match form_of(*oid, typtype, category) {
                Some(form) => (col, form),
                // numeric[] as text[], as the paged copy reads it
                None if *oid == 1231 => (format!("to_json({col}::text[])"), Form::Json),
                None => (format!("to_json({col})"), Form::Json),
            };
            select.push(expr);
            forms.push(form);
        }
        let place = |name: &str| cols.iter().position(|c| c.0 == name);
        let physical = key.is_empty();
        let (order, key_fields, types): (Vec<String>, Vec<usize>, Vec<String>) = match physical {
            true => {
                select.push(format!("r.{PHYSICAL}"));
                let at = select.len() - 1;
                (vec![format!("r.{PHYSICAL}")], vec![at], vec!["tid".into()])
            }
            false => {
                let mut order = Vec::new();
                let mut fields = Vec::new();
                let mut types = Vec::new();
                for k in key {
                    let i = place(k).ok_or_else(|| {
                        SourceError::new(
                            Failure::Invalid,
                            format!("snapshot: key column {k:?} is not a column of {table}"),
                        )
                    })?;
                    order.push(format!("r.{}", quote(k)));
                    fields.push(i);
                    types.push(cols[i].1.clone());
                }
                (order, fields, types)
            }
        };
        let names = cols
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut name = vec![if i == 0 { b'{' } else { b',' }];
                name.extend_from_slice(Value::String(c.0.clone()).to_string().as_bytes());
                name.push(b':');
                name
            })
            .collect();
        let columns = cols.iter().map(|c| (c.0.as_str(), c.1.as_str(), c.5));
        Ok(Plan {
            table: TableRef::new(table.schema.as_deref(), &table.name),
            schema: declared(columns, key),
            names,
            forms,
            key: key_fields,
            physical,
            select: select.join(", "),
            from: table.quoted(),
            order,
            types,
        })
    }

    /// The copy of the rows after `after` (None: from the first), of
    /// `range` of the first key column (None: all of them).
    pub fn sql(&self, after: Option<&Position>, range: Option<&KeyRange>) -> String {
        let mut bounds = Vec::new();
        if let Some(p) = after {
            let texts = std::iter::once(&p.cursor).chain(&p.key);
            let values: Vec<String> = texts
                .zip(&self.types)
                .map(|(text, ty)| cast(text, ty))
                .collect();
            bounds.push(format!(
                "({}) > ({})",
                self.order.join(", "),
                values.join(", ")
            ));
        }
        // a range is of the key's first column (a table without a key is
        // never split: a range there would fail on the server, never be
        // dropped)
        if let Some(r) = range {
            let (column, ty) = (&self.order[0], &self.types[0]);
            if let Some(above) = &r.above {
                bounds.push(format!("{column} > {}", cast(above, ty)));
            }
            if let Some(upto) = &r.upto {
                bounds.push(format!("{column} <= {}", cast(upto, ty)));
            }
        }
        let filter = match bounds.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", bounds.join(" AND ")),
        };
        // without a key the order is the heap's own: sorting by place
        // would cost a sort of the whole table, and a copy of a table
        // without a key is not resumed by its place
        let order_by = match self.physical {
            true => String::new(),
            false => format!(" ORDER BY {}", self.order.join(", ")),
        };
        format!(
            "COPY (SELECT {} FROM {} AS r{filter}{order_by}) TO STDOUT",
            self.select, self.from
        )
    }

    /// The position of a row whose key fields read `texts`.
    pub fn position(&self, mut texts: Vec<String>) -> Position {
        let cursor = texts.remove(0);
        Position { cursor, key: texts }
    }

    #[cfg(test)]
    pub fn for_test(names: &[String], forms: Vec<Form>) -> Plan {
        Plan {
            table: TableRef::new(None, "t"),
            schema: Map::new(),
            names: names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{}\"{n}\":", if i == 0 { '{' } else { ',' }).into_bytes())
                .collect(),
            forms,
            key: vec![0],
            physical: false,
            select: String::new(),
            from: String::new(),
            order: vec!["r.\"id\"".into()],
            types: vec!["bigint".into()],
        }
    }
}

/// `text` as a value of type `ty`.
fn cast(text: &str, ty: &str) -> String {
    format!("CAST({} AS {ty})", literal(text))
}

/// `text` as an SQL string literal, whatever `standard_conforming_strings`
/// says.
fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_read_within_its_range_after_its_last_row() {
        let plan = Plan::for_test(&["id".to_string()], vec![Form::Number]);
        let range = |above: Option<&str>, upto: Option<&str>| KeyRange {
            column: "id".into(),
            above: above.map(str::to_string),
            upto: upto.map(str::to_string),
        };
        let sql = plan.sql(None, None);
        assert_eq!(sql, "COPY (SELECT  FROM  AS r ORDER BY r.\"id\") TO STDOUT");
        let sql = plan.sql(None, Some(&range(Some("10"), Some("20"))));
        assert!(
            sql.contains(
                " WHERE r.\"id\" > CAST(E'10' AS bigint) AND r.\"id\" <= CAST(E'20' AS bigint) ORDER"
            ),
            "{sql}"
        );
        let after = Position {
            cursor: "15".into(),
            key: vec![],
        };
        let sql = plan.sql(Some(&after), Some(&range(None, Some("20"))));
        assert!(
            sql.contains(
                " WHERE (r.\"id\") > (CAST(E'15' AS bigint)) AND r.\"id\" <= CAST(E'20' AS bigint) ORDER"
            ),
            "{sql}"
        );
    }

    #[test]
    fn literals_hold_quotes_and_backslashes() {
        assert_eq!(literal(r"o'k\n"), r"E'o''k\\n'");
    }

    #[test]
    fn types_rendered_here_or_by_the_server() {
        assert_eq!(form_of(20, "b", "N"), Some(Form::Number));
        assert_eq!(form_of(1700, "b", "N"), Some(Form::Text));
        assert_eq!(
            form_of(1184, "b", "D"),
            Some(Form::Timestamp { zoned: true })
        );
        assert_eq!(form_of(17, "b", "U"), Some(Form::Text));
        // an array, a domain, an enum, an extension's type: the server's to_json
        assert_eq!(form_of(1007, "b", "A"), None);
        assert_eq!(form_of(20000, "d", "N"), None);
        assert_eq!(form_of(20001, "e", "E"), None);
        assert_eq!(form_of(20002, "b", "U"), None);
    }
}
