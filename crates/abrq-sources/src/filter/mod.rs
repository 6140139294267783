//! Row filters: a small expression language abrq parses itself, so a
//! filter can be rendered into a query with nothing of the text passed
//! through (only quoted column names and escaped literals: `sql.rs`) and
//! evaluated on a record (`eval.rs`).
//!
//! What it takes:
//!
//! ```text
//! expr    := and ("OR" and)*
//! and     := unary ("AND" unary)*
//! unary   := "NOT" unary | "(" expr ")" | test
//! test    := column ("=" | "!=" | "<>" | "<" | "<=" | ">" | ">=") literal
//!          | column "IS" ["NOT"] "NULL"
//!          | column ["NOT"] "IN" "(" literal ("," literal)* ")"
//! column  := name | "quoted name" | `quoted name`
//! literal := 'text' ('' for a quote) | number | TRUE | FALSE
//! ```
//!
//! Keywords are case-insensitive. Functions, casts, arithmetic,
//! subqueries and a second statement are refused, naming where.

mod eval;
mod sql;

pub use sql::Dialect;

use serde_json::Value;

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Or(Vec<Expr>),
    And(Vec<Expr>),
    Not(Box<Expr>),
    Compare(String, Cmp, Value),
    IsNull(String, bool),
    In(String, Vec<Value>, bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    fn sql(self) -> &'static str {
        match self {
            Cmp::Eq => "=",
            Cmp::Ne => "<>",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Text(String),
    Number(serde_json::Number),
    Op(&'static str),
    Open,
    Close,
    Comma,
}

impl Expr {
    /// Parses `text`; the error says what was found where.
    pub fn parse(text: &str) -> Result<Expr, String> {
        let tokens = tokenize(text)?;
        let mut p = Parser { tokens, at: 0 };
        let e = p.or()?;
        match p.tokens.get(p.at) {
            None => Ok(e),
            Some(t) => Err(format!("unexpected {} after a whole expression", show(t))),
        }
    }

    /// The columns it names.
    pub fn columns(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.walk(&mut |c| out.push(c));
        out.sort_unstable();
        out.dedup();
        out
    }

    fn walk<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            Expr::Or(v) | Expr::And(v) => v.iter().for_each(|e| e.walk(f)),
            Expr::Not(e) => e.walk(f),
            Expr::Compare(c, _, _) | Expr::IsNull(c, _) | Expr::In(c, _, _) => f(c),
        }
    }
}

fn show(t: &Token) -> String {
    match t {
        Token::Word(w) => format!("{w:?}"),
        Token::Quoted(q) => format!("column \"{q}\""),
        Token::Text(_) => "a text".into(),
        Token::Number(n) => format!("the number {n}"),
        Token::Op(o) => format!("{o:?}"),
        Token::Open => "\"(\"".into(),
        Token::Close => "\")\"".into(),
        Token::Comma => "\",\"".into(),
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => (out.push(Token::Open), i += 1).1,
            ')' => (out.push(Token::Close), i += 1).1,
            ',' => (out.push(Token::Comma), i += 1).1,
            '\'' | '"' | '`' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(format!("{c} opened at character {} is not closed", start + 1)),
                        Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                            s.push(c);
                            i += 2;
                        }
                        Some(&q) if q == c => {
                            i += 1;
                            break;
                        }
                        Some(&other) => {
                            s.push(other);
                            i += 1;
                        }
                    }
                }
                out.push(match c {
                    '\'' => Token::Text(s),
                    _ => Token::Quoted(s),
                });
            }
            '<' | '>' | '=' | '!' => {
                let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
                let op = ["<=", ">=", "<>", "!="]
                    .into_iter()
                    .find(|o| two == *o)
                    .or_else(|| ["<", ">", "="].into_iter().find(|o| two.starts_with(*o)));
                let Some(op) = op else {
                    return Err(format!("unexpected \"{c}\" at character {}", i + 1));
                };
                i += op.len();
                out.push(Token::Op(op));
            }
            c if c.is_ascii_digit() || c == '-' || c == '.' => {
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '.' | '-' | '+'))
                {
                    if matches!(chars[i], '-' | '+') && i > start && !matches!(chars[i - 1], 'e' | 'E') {
                        break;
                    }
                    i += 1;
                }
                let raw: String = chars[start..i].iter().collect();
                let n = raw
                    .parse::<serde_json::Number>()
                    .map_err(|_| format!("{raw:?} at character {} is not a number", start + 1))?;
                out.push(Token::Number(n));
            }
            c if c.is_alphabetic() || c == '_' => {
                while i < chars.len() && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '$')) {
                    i += 1;
                }
                out.push(Token::Word(chars[start..i].iter().collect()));
            }
            other => {
                return Err(format!(
                    "{other:?} at character {} is not part of a filter (columns, literals, comparisons, \
                     IN, IS NULL, AND, OR, NOT, parentheses)",
                    i + 1
                ))
            }
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn keyword(&mut self, k: &str) -> bool {
        match self.peek() {
            Some(Token::Word(w)) if w.eq_ignore_ascii_case(k) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn next(&mut self, want: &str) -> Result<Token, String> {
        let t = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or_else(|| format!("the filter ends where {want} was expected"))?;
        self.at += 1;
        Ok(t)
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut v = vec![self.and()?];
        while self.keyword("OR") {
            v.push(self.and()?);
        }
        Ok(if v.len() == 1 {
            v.remove(0)
        } else {
            Expr::Or(v)
        })
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut v = vec![self.unary()?];
        while self.keyword("AND") {
            v.push(self.unary()?);
        }
        Ok(if v.len() == 1 {
            v.remove(0)
        } else {
            Expr::And(v)
        })
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.keyword("NOT") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.peek() == Some(&Token::Open) {
            self.at += 1;
            let e = self.or()?;
            return match self.next("\")\"")? {
                Token::Close => Ok(e),
                t => Err(format!("expected \")\", found {}", show(&t))),
            };
        }
        self.test()
    }

    fn test(&mut self) -> Result<Expr, String> {
        let column = match self.next("a column")? {
            Token::Quoted(q) => q,
            Token::Word(w) if !is_keyword(&w) => w,
            t => return Err(format!("expected a column, found {}", show(&t))),
        };
        if self.peek() == Some(&Token::Open) {
            return Err(format!(
                "{column:?}(...): functions are not taken in a filter"
            ));
        }
        if self.keyword("IS") {
            let not = self.keyword("NOT");
            if !self.keyword("NULL") {
                return Err(format!("{column} IS: expected NULL or NOT NULL"));
            }
            return Ok(Expr::IsNull(column, !not));
        }
        let not = self.keyword("NOT");
        if self.keyword("IN") {
            match self.next("\"(\"")? {
                Token::Open => {}
                t => return Err(format!("{column} IN: expected \"(\", found {}", show(&t))),
            }
            let mut values = vec![self.literal()?];
            loop {
                match self.next("\",\" or \")\"")? {
                    Token::Comma => values.push(self.literal()?),
                    Token::Close => break,
                    t => return Err(format!("{column} IN (...): unexpected {}", show(&t))),
                }
            }
            return Ok(Expr::In(column, values, not));
        }
        if not {
            return Err(format!("{column} NOT: expected IN"));
        }
        let cmp = match self.next("a comparison")? {
            Token::Op("=") => Cmp::Eq,
            Token::Op("!=") | Token::Op("<>") => Cmp::Ne,
            Token::Op("<") => Cmp::Lt,
            Token::Op("<=") => Cmp::Le,
            Token::Op(">") => Cmp::Gt,
            Token::Op(">=") => Cmp::Ge,
            t => {
                return Err(format!(
                    "after column {column:?}: expected a comparison, IS or IN, found {}",
                    show(&t)
                ))
            }
        };
        let value = self.literal()?;
        if value.is_null() {
            return Err(format!(
                "{column} {} NULL is never true: write IS NULL",
                cmp.sql()
            ));
        }
        Ok(Expr::Compare(column, cmp, value))
    }

    fn literal(&mut self) -> Result<Value, String> {
        match self.next("a value")? {
            Token::Text(s) => Ok(Value::String(s)),
            Token::Number(n) => Ok(Value::Number(n)),
            Token::Word(w) if w.eq_ignore_ascii_case("TRUE") => Ok(Value::Bool(true)),
            Token::Word(w) if w.eq_ignore_ascii_case("FALSE") => Ok(Value::Bool(false)),
            Token::Word(w) if w.eq_ignore_ascii_case("NULL") => Ok(Value::Null),
            t => Err(format!(
                "expected a value ('text', a number, TRUE or FALSE), found {}",
                show(&t)
            )),
        }
    }
}

fn is_keyword(w: &str) -> bool {
    ["AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"]
        .iter()
        .any(|k| w.eq_ignore_ascii_case(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_the_grammar() {
        let e = Expr::parse("created_at > '2026-01-01' AND (\"Region\" IN ('eu', 'us') OR v IS NULL) AND NOT n <= -1.5e2").unwrap();
        assert_eq!(
            e,
            Expr::And(vec![
                Expr::Compare("created_at".into(), Cmp::Gt, json!("2026-01-01")),
                Expr::Or(vec![
                    Expr::In("Region".into(), vec![json!("eu"), json!("us")], false),
                    Expr::IsNull("v".into(), true),
                ]),
                Expr::Not(Box::new(Expr::Compare("n".into(), Cmp::Le, json!(-150.0)))),
            ])
        );
        assert_eq!(e.columns(), ["Region", "created_at", "n", "v"]);
        assert_eq!(
            Expr::parse("name = 'it''s'").unwrap(),
            Expr::Compare("name".into(), Cmp::Eq, json!("it's"))
        );
    }

    #[test]
    fn refuses_what_is_not_a_filter_naming_it() {
        for (text, says) in [
            ("id = 1; DROP TABLE t", "';' at character 7"),
            ("lower(name) = 'x'", "functions are not taken"),
            ("id = 1 -- x", "\"-\""),
            ("id + 1 = 2", "'+'"),
            ("id = (SELECT 1)", "expected a value"),
            ("id = NULL", "write IS NULL"),
            ("name = 'open", "is not closed"),
            ("id = 1 id = 2", "after a whole expression"),
        ] {
            let e = Expr::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
