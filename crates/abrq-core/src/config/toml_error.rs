//! TOML errors told without the source line toml's own Display quotes:
//! that line may hold a secret (an unterminated `password = "...`).

/// A TOML error as `line L, column C: key: message`. toml's own Display
/// quotes the offending source line, which may hold a secret (an
/// unterminated `password = "...`), so only its message and position are
/// used. The key comes from toml when it knows it, else from the line.
pub(super) fn describe(text: &str, mut e: toml::de::Error) -> String {
    let mut message = e.message().to_string();
    // Without its input, toml's Display is the message and the key path.
    e.set_input(None);
    let shown = e.to_string();
    let toml_key = shown
        .strip_prefix(message.as_str())
        .and_then(|rest| rest.trim().strip_prefix("in `"))
        .and_then(|rest| rest.strip_suffix('`'))
        .map(str::to_string);
    let Some(span) = e.span() else {
        return match toml_key {
            Some(key) => format!("{key}: {message}"),
            None => message,
        };
    };
    let at = floor_char_boundary(text, span.start.min(text.len()));
    let until = floor_char_boundary(text, span.end.clamp(at, text.len()));
    // A multi-line value a typo opened (`tls = '''`) swallows the lines
    // after it, secrets included, and serde quotes the value it rejects.
    if text[at..until].contains('\n') && message.contains(['"', '`']) {
        message = match message.split_once(", expected ") {
            Some((_, expected)) => format!("a multi-line value (not shown), expected {expected}"),
            None => "a multi-line value (not shown) that is not valid here".into(),
        };
    }
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[..at].bytes().filter(|b| *b == b'\n').count() + 1;
    let column = text[line_start..at].chars().count() + 1;
    match toml_key.or_else(|| key_on_line(text, line_start)) {
        Some(key) => format!("line {line}, column {column}: {key}: {message}"),
        None => format!("line {line}, column {column}: {message}"),
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The key the line starting at `line_start` assigns, with the table above
/// it (`streams.destinations.password`), or the table a header line opens.
/// None when the line starts inside a multi-line string: its text before a
/// `=` is part of a value, maybe a secret, not a key.
fn key_on_line(text: &str, line_start: usize) -> Option<String> {
    let mut table: Option<&str> = None;
    let mut open: Option<Quote> = None;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let here = pos;
        pos += line.len();
        let in_value = open.is_some();
        open = multiline_open_after(line, open);
        if in_value {
            if here == line_start {
                return None;
            }
            continue;
        }
        let trimmed = line.trim();
        let header = trimmed
            .strip_prefix('[')
            .map(|h| h.trim_start_matches('['))
            .and_then(|h| h.split(']').next())
            .map(str::trim)
            .filter(|h| is_key(h));
        if here == line_start {
            if let Some(h) = header {
                return Some(h.to_string());
            }
            let (key, _) = trimmed.split_once('=')?;
            let key = key.trim();
            if !is_key(key) {
                return None;
            }
            return Some(match table {
                Some(t) => format!("{t}.{key}"),
                None => key.to_string(),
            });
        }
        if header.is_some() {
            table = header;
        }
    }
    None
}

fn is_key(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' '))
}

/// The quote of an open multi-line string: `"""` or `'''`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    Basic,
    Literal,
}

/// Which multi-line string is still open after `line`, given the one open
/// before it. One-line strings and comments are skipped so that quotes in
/// them do not count.
fn multiline_open_after(line: &str, mut open: Option<Quote>) -> Option<Quote> {
    let b = line.as_bytes();
    let mut i = 0;
    // the quote byte of a one-line string open at i
    let mut single: Option<u8> = None;
    while i < b.len() {
        if let Some(q) = open {
            let quote = if q == Quote::Basic { b'"' } else { b'\'' };
            if q == Quote::Basic && b[i] == b'\\' {
                i += 2;
            } else if b[i..].starts_with(&[quote; 3]) {
                open = None;
                i += 3;
                // up to two more quotes belong to the string
                while i < b.len() && b[i] == quote {
                    i += 1;
                }
            } else {
                i += 1;
            }
            continue;
        }
        if let Some(q) = single {
            if q == b'"' && b[i] == b'\\' {
                i += 2;
                continue;
            }
            if b[i] == q {
                single = None;
            }
            i += 1;
            continue;
        }
        match b[i] {
            b'#' => break,
            b'"' if b[i..].starts_with(b"\"\"\"") => {
                open = Some(Quote::Basic);
                i += 3;
            }
            b'\'' if b[i..].starts_with(b"'''") => {
                open = Some(Quote::Literal);
                i += 3;
            }
            q @ (b'"' | b'\'') => {
                single = Some(q);
                i += 1;
            }
            _ => i += 1,
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    use crate::config::testing::{assert_broken_secret_line_is_named_not_shown, ALL_SECRETS};

    /// (key, its value, its 1-based line, the table above it). The
    /// secrets among an engine's own keys (an HTTP source's ingest token, a
    /// database source's password) are read, and tested the same way, by
    /// the engine's config: `abrq-sources/src/config.rs`.
    const SECRETS: [(&str, &str, usize, &str); 2] = [
        ("admin_token", "adm1n-S3CRET", 4, "server"),
        ("password", "dest-S3CRET", 15, "streams.destinations"),
    ];

    fn with_line(line: usize, new: &str) -> String {
        crate::config::testing::with_line(ALL_SECRETS, line, new)
    }

    #[test]
    fn the_full_config_parses() {
        let c = Config::parse(ALL_SECRETS, "t.toml").unwrap();
        assert!(!format!("{c:?}").contains("S3CRET"));
    }

    #[test]
    fn a_broken_secret_line_names_line_and_key_but_not_the_value() {
        for secret in SECRETS {
            assert_broken_secret_line_is_named_not_shown(ALL_SECRETS, secret, |text| {
                Config::parse(text, "t.toml").unwrap_err().to_string()
            });
        }
    }

    #[test]
    fn a_mistyped_secret_is_not_shown() {
        let text = with_line(15, "password = 987654");
        let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(!e.contains("987654"), "{e}");
        assert!(e.contains("line 15") && e.contains("password"), "{e}");
        assert!(e.contains("must be a string"), "{e}");
    }

    #[test]
    fn an_unclosed_multiline_secret_names_its_line() {
        // the error is at the end of the file, on the secret's last line
        let text = format!("{ALL_SECRETS}password = \"\"\"\ntail-S3CRET");
        let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(!e.contains("S3CRET"), "{e}");
        assert!(e.contains("line 29,"), "{e}");
    }

    #[test]
    fn text_inside_a_multiline_secret_is_never_taken_for_a_key() {
        let text = with_line(15, "password = \"\"\"first\nsecond=half\\q\"\"\"");
        let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("line 16,"), "{e}");
        assert!(!e.contains("second") && !e.contains("half"), "{e}");
    }

    #[test]
    fn a_multiline_value_that_swallowed_a_secret_is_not_quoted() {
        // a typo opens a multi-line string that runs over the password's
        // line, on a key that wants an enum, then one that wants a boolean
        // (an engine's own key, `tls`, the same: `abrq-sinks/src/config.rs`)
        let closed = "password = \"dest-S3CRET\"'''";
        for (line, opened, expected) in [
            (13, "engine = '''", "expected one of"),
            (14, "enabled = '''", "expected a boolean"),
        ] {
            let text = with_line(line, opened).replace("password = \"dest-S3CRET\"", closed);
            let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(!e.contains("S3CRET"), "{e}");
            assert!(e.contains(&format!("line {line},")), "{e}");
            assert!(e.contains(opened.split(' ').next().unwrap()), "{e}");
            assert!(e.contains(expected), "{e}");
        }
    }

    #[test]
    fn a_multiline_name_that_swallowed_a_secret_is_not_quoted() {
        let text = ALL_SECRETS.replace(
            "name = \"d\"\nengine = \"postgres\"\ntable = \"t\"\npassword = \"dest-S3CRET\"",
            "engine = \"postgres\"\ntable = \"t\"\nname = '''d\npassword = \"dest-S3CRET\"'''",
        );
        assert_ne!(text, ALL_SECRETS);
        let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(!e.contains("S3CRET"), "{e}");
        assert!(
            e.contains("line 11") && e.contains("destinations.name"),
            "{e}"
        );
    }

    #[test]
    fn a_syntax_error_elsewhere_names_the_key_and_table() {
        let text = with_line(25, "database = \"/tmp/out\" junk");
        let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("line 25, column "), "{e}");
        assert!(e.contains("streams.destinations.database"), "{e}");
    }

    #[test]
    fn interpolated_values_are_not_shown() {
        std::env::set_var("ABRQ_TEST_BAD_DURATION", "5 hunter2s");
        std::env::set_var("ABRQ_TEST_BAD_SIZE", "4 hunter2B");
        for line in [
            "[streams.batch]\nmax_wait = \"${ABRQ_TEST_BAD_DURATION}\"",
            "[streams.batch]\nmax_bytes = \"${ABRQ_TEST_BAD_SIZE}\"",
        ] {
            let text = with_line(16, line);
            let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains("line 17,") && e.contains("ABRQ_TEST_BAD"), "{e}");
        }
        // a value as written is still shown when nothing was interpolated
        let text = with_line(16, "[streams.batch]\nmax_wait = \"5 parsecs\"");
        let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("5 parsecs") && e.contains("max_wait"), "{e}");
    }
}
