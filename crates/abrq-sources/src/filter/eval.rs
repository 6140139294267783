//! A filter evaluated on a record's fields, with SQL's three values: a
//! comparison with a missing or null field is unknown, NOT of unknown is
//! unknown, and a record is kept only when the filter is true. Numbers
//! compare as numbers (a decimal staged as a string of digits too), texts
//! by their characters (dates and times in abrq's ISO forms order as
//! text), booleans as booleans; values of different kinds are unknown.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::{Cmp, Expr};

impl Expr {
    /// Whether the record passes.
    pub fn keeps(&self, fields: &Map<String, Value>) -> bool {
        self.truth(fields) == Some(true)
    }

    fn truth(&self, f: &Map<String, Value>) -> Option<bool> {
        match self {
            Expr::Or(v) => {
                let mut unknown = false;
                for e in v {
                    match e.truth(f) {
                        Some(true) => return Some(true),
                        None => unknown = true,
                        Some(false) => {}
                    }
                }
                (!unknown).then_some(false)
            }
            Expr::And(v) => {
                let mut unknown = false;
                for e in v {
                    match e.truth(f) {
                        Some(false) => return Some(false),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                (!unknown).then_some(true)
            }
            Expr::Not(e) => e.truth(f).map(|t| !t),
            Expr::IsNull(c, null) => Some(f.get(c).is_none_or(Value::is_null) == *null),
            Expr::Compare(c, op, v) => {
                let o = order(f.get(c)?, v)?;
                Some(match op {
                    Cmp::Eq => o == Ordering::Equal,
                    Cmp::Ne => o != Ordering::Equal,
                    Cmp::Lt => o == Ordering::Less,
                    Cmp::Le => o != Ordering::Greater,
                    Cmp::Gt => o == Ordering::Greater,
                    Cmp::Ge => o != Ordering::Less,
                })
            }
            Expr::In(c, values, not) => {
                let have = f.get(c)?;
                let mut unknown = false;
                for v in values {
                    match order(have, v) {
                        Some(Ordering::Equal) => return Some(!not),
                        None => unknown = true,
                        Some(_) => {}
                    }
                }
                (!unknown).then_some(*not)
            }
        }
    }
}

/// How a field's value orders against a literal; None when unknown.
fn order(have: &Value, want: &Value) -> Option<Ordering> {
    match (have, want) {
        (Value::Null, _) => None,
        (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(a), Value::Number(b)) => a.parse::<f64>().ok()?.partial_cmp(&b.as_f64()?),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        // a MySQL boolean may be staged as 0/1
        (Value::Number(a), Value::Bool(b)) => {
            Some(a.as_f64()?.partial_cmp(&f64::from(u8::from(*b)))?)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keeps(filter: &str, record: Value) -> bool {
        let Value::Object(m) = record else {
            unreachable!()
        };
        Expr::parse(filter).unwrap().keeps(&m)
    }

    #[test]
    fn follows_sql_three_valued_logic() {
        assert!(keeps("v > 3", json!({"v": 4})));
        assert!(!keeps("v > 3", json!({"v": 3})));
        assert!(keeps("total >= 10.5", json!({"total": "10.50"})));
        assert!(keeps(
            "at > '2026-01-01'",
            json!({"at": "2026-01-01T00:00:01Z"})
        ));
        assert!(!keeps("v > 3", json!({"v": null})));
        assert!(!keeps("NOT v > 3", json!({"v": null})));
        assert!(keeps("v > 3 OR w = 'x'", json!({"v": null, "w": "x"})));
        assert!(!keeps("v > 3 OR w = 'x'", json!({"v": null, "w": "y"})));
        assert!(!keeps("v > 3 AND w = 'x'", json!({"w": "x"})));
        assert!(keeps("r IN ('eu', 'us')", json!({"r": "us"})));
        assert!(keeps("r NOT IN ('eu', 'us')", json!({"r": "ap"})));
        assert!(!keeps("r NOT IN ('eu', 'us')", json!({"r": null})));
        assert!(keeps("r IS NULL", json!({})));
        assert!(keeps("ok = TRUE", json!({"ok": true})));
        assert!(keeps("ok = TRUE", json!({"ok": 1})));
        assert!(!keeps("v = 'x'", json!({"v": 1})), "kinds differ: unknown");
    }
}
