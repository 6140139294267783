//! The columns an `ALTER TABLE` renames: `RENAME COLUMN a TO b` and
//! `CHANGE [COLUMN] [IF EXISTS] a b <definition>`. A binlog names no
//! column ids, so the statement itself is the only place a rename can be
//! told from a drop and an add; the next declaration of the table says
//! `renamed_from` for each, and a relational destination renames its
//! column instead of adding one.

use super::backlog::{clauses, words};

/// A column name as a statement writes it, quotes taken off.
fn unquote(word: &str) -> String {
    match word.strip_prefix('`').and_then(|w| w.strip_suffix('`')) {
        Some(inner) => inner.replace("``", "`"),
        None => word.to_string(),
    }
}

/// The (old, new) column names an `ALTER TABLE` statement renames.
pub fn renamed(sql: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for clause in clauses(sql) {
        let w: Vec<String> = words(&clause).iter().map(|w| unquote(w)).collect();
        let lower: Vec<String> = w.iter().map(|s| s.to_ascii_lowercase()).collect();
        // the first clause starts with ALTER [ONLINE] [IGNORE] TABLE name
        let start = match lower.iter().position(|s| s == "table") {
            Some(t) if lower.first().map(String::as_str) == Some("alter") => t + 2,
            _ => 0,
        };
        let (w, lower) = (&w[start.min(w.len())..], &lower[start.min(lower.len())..]);
        let at = |i: usize| lower.get(i).map(String::as_str);
        match (at(0), at(1)) {
            (Some("rename"), Some("column")) if at(3) == Some("to") && w.len() >= 5 => {
                out.push((w[2].clone(), w[4].clone()));
            }
            (Some("change"), _) => {
                let mut i = 1;
                if at(i) == Some("column") {
                    i += 1;
                }
                if at(i) == Some("if") && at(i + 1) == Some("exists") {
                    i += 2;
                }
                if let (Some(old), Some(new)) = (w.get(i), w.get(i + 1)) {
                    if old != new {
                        out.push((old.clone(), new.clone()));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::renamed;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn renames_are_read_from_rename_and_change_clauses() {
        assert_eq!(
            renamed("ALTER TABLE t RENAME COLUMN a TO b"),
            pairs(&[("a", "b")])
        );
        assert_eq!(
            renamed(
                "alter table `shop`.`t` change column `a b` `c``d` varchar(10) NOT NULL, ADD x int"
            ),
            pairs(&[("a b", "c`d")])
        );
        assert_eq!(
            renamed("ALTER ONLINE TABLE t ADD y enum('p,q'), CHANGE IF EXISTS old new decimal(10,2), RENAME COLUMN p TO q"),
            pairs(&[("old", "new"), ("p", "q")])
        );
        // a CHANGE that keeps the name, and clauses that rename nothing
        assert!(renamed("ALTER TABLE t CHANGE a a bigint").is_empty());
        assert!(renamed("ALTER TABLE t RENAME TO u, RENAME INDEX i TO j").is_empty());
        assert!(renamed("ALTER TABLE t DROP COLUMN c, ADD COLUMN d int").is_empty());
    }
}
