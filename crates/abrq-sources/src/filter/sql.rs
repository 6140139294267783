//! A filter as SQL for the server to evaluate: columns quoted as the
//! dialect quotes names, texts as literals no setting of the session can
//! reinterpret (PostgreSQL: `U&'...'` with every character but letters
//! and digits escaped; MySQL: the text's UTF-8 bytes in hex, converted),
//! numbers and booleans as parsed. Nothing of the filter's own text
//! reaches the query.

use serde_json::Value;

use super::Expr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Mysql,
}

impl Expr {
    /// The filter as a boolean SQL expression, parenthesised.
    pub fn to_sql(&self, d: Dialect) -> String {
        self.to_sql_on(d, "")
    }

    /// The same, each column after `prefix` (a table alias and a dot).
    pub fn to_sql_on(&self, d: Dialect, prefix: &str) -> String {
        let col = |c: &str| format!("{prefix}{}", column(c, d));
        match self {
            Expr::Or(v) => join(v, " OR ", d, prefix),
            Expr::And(v) => join(v, " AND ", d, prefix),
            Expr::Not(e) => format!("(NOT {})", e.to_sql_on(d, prefix)),
            Expr::Compare(c, op, v) => format!("({} {} {})", col(c), op.sql(), literal(v, d)),
            Expr::IsNull(c, null) => {
                let is = if *null { "IS NULL" } else { "IS NOT NULL" };
                format!("({} {is})", col(c))
            }
            Expr::In(c, values, not) => {
                let list: Vec<String> = values.iter().map(|v| literal(v, d)).collect();
                let not = if *not { "NOT " } else { "" };
                format!("({} {not}IN ({}))", col(c), list.join(", "))
            }
        }
    }
}

fn join(v: &[Expr], sep: &str, d: Dialect, prefix: &str) -> String {
    let parts: Vec<String> = v.iter().map(|e| e.to_sql_on(d, prefix)).collect();
    format!("({})", parts.join(sep))
}

fn column(name: &str, d: Dialect) -> String {
    match d {
        Dialect::Postgres => format!("\"{}\"", name.replace('"', "\"\"")),
        Dialect::Mysql => format!("`{}`", name.replace('`', "``")),
    }
}

fn literal(v: &Value, d: Dialect) -> String {
    match v {
        Value::String(s) => match d {
            Dialect::Postgres => {
                let mut out = String::from("U&'");
                for c in s.chars() {
                    match c {
                        c if c.is_ascii_alphanumeric() || c == ' ' => out.push(c),
                        c if (c as u32) <= 0xFFFF => out.push_str(&format!("\\{:04X}", c as u32)),
                        c => out.push_str(&format!("\\+{:06X}", c as u32)),
                    }
                }
                out.push('\'');
                out
            }
            Dialect::Mysql => {
                let hex: String = s.bytes().map(|b| format!("{b:02X}")).collect();
                format!("CONVERT(X'{hex}' USING utf8mb4)")
            }
        },
        Value::Bool(b) => match (b, d) {
            (true, Dialect::Postgres) => "TRUE".into(),
            (false, Dialect::Postgres) => "FALSE".into(),
            (true, Dialect::Mysql) => "1".into(),
            (false, Dialect::Mysql) => "0".into(),
        },
        // only numbers are left (NULL never parses as a comparison's value)
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_names_quoted_and_texts_escaped() {
        let e = Expr::parse(
            "\"we\"\"ird\" = 'a''b\\c' OR n IN (1, 2.5) AND ok = TRUE AND x IS NOT NULL",
        )
        .unwrap();
        assert_eq!(
            e.to_sql(Dialect::Postgres),
            "((\"we\"\"ird\" = U&'a\\0027b\\005Cc') OR ((\"n\" IN (1, 2.5)) AND (\"ok\" = TRUE) AND (\"x\" IS NOT NULL)))"
        );
        assert_eq!(
            e.to_sql(Dialect::Mysql),
            "((`we\"ird` = CONVERT(X'6127625C63' USING utf8mb4)) OR ((`n` IN (1, 2.5)) AND (`ok` = 1) AND (`x` IS NOT NULL)))"
        );
    }
}
