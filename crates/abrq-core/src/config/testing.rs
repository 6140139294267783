//! Config texts and checks shared by the config tests of core and of the
//! engine crates, which read the engines' own keys (enabled by the
//! `testing` feature in their dev-dependencies; never in the product).

/// A small valid config: an NDJSON file source (its table on line 6) and
/// one local destination (line 10) with `format` on line 14, a `password`
/// on line 15 and `[streams.destinations.retry]` on lines 16-18.
pub const GOOD: &str = r#"
data_dir = "/tmp/x"

[[streams]]
name = "orders"
[streams.source]
engine = "file"
path = "orders.ndjson"

[[streams.destinations]]
name = "lake"
engine = "local"
database = "/tmp/out"
format = "csv.gz"
password = "hunter2"
[streams.destinations.retry]
max_attempts = 3
initial_backoff = "10ms"
"#;

/// Every secret a config can have, each value on its own line: the
/// server's admin token (line 4), an HTTP source's ingest token (10), a
/// destination's password (15) and a database source's password (22).
pub const ALL_SECRETS: &str = r#"data_dir = "/tmp/x"
[server]
listen = "127.0.0.1:9"
admin_token = "adm1n-S3CRET"

[[streams]]
name = "a"
[streams.source]
engine = "http"
ingest_token = "1ngest-S3CRET"
[[streams.destinations]]
name = "d"
engine = "postgres"
table = "t"
password = "dest-S3CRET"

[[streams]]
name = "b"
[streams.source]
engine = "postgres"
table = "t"
password = "src-S3CRET"
cursor = "id"
[[streams.destinations]]
name = "d"
engine = "local"
database = "/tmp/out"
"#;

/// `text` with line `line` (1-based) put in place by `new`.
pub fn with_line(text: &str, line: usize, new: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == line { new } else { l })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Breaks the line of secret `key` (value `value`, on `line` of `text`,
/// in `table`) in every way a line can be broken, and asserts that the
/// error `load` gives for each names the line and the key, never the
/// value.
pub fn assert_broken_secret_line_is_named_not_shown(
    text: &str,
    (key, value, line, table): (&str, &str, usize, &str),
    load: impl Fn(&str) -> String,
) {
    let shapes = [
        format!("{key} = \"{value}"),
        format!("{key} = \"{value}\" x"),
        format!("{key} = {value}"),
        format!("{key} = '{value}"),
        format!("{key} = \"{value}\\q\""),
        format!("{key} = \"{value}${{oops\""),
        format!("{key} = [\"{value}\"]"),
        format!("{key} = {{ v = \"{value}\" }}"),
        format!("{key} = \"{value}\"\n{key} = \"{value}\""),
    ];
    for shape in shapes {
        let e = load(&with_line(text, line, &shape));
        assert!(!e.contains(value), "{shape:?} printed its value: {e}");
        assert!(!e.contains("S3CRET"), "{shape:?} printed a secret: {e}");
        let at = if shape.contains('\n') { line + 1 } else { line };
        assert!(e.contains(&format!("line {at},")), "{shape:?}: {e}");
        assert!(e.contains(key), "{shape:?} does not name {key}: {e}");
        assert!(
            e.contains(&format!("{table}.{key}")) || e.contains(&format!("`{key}`")),
            "{shape:?} does not name {table}.{key}: {e}"
        );
    }
}
