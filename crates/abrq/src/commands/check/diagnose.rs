//! From a failed probe's whole error chain to one line an operator acts
//! on: the root cause, where it happened, and a hint naming what to fix.
//! Client libraries word the same fault many ways; the patterns below are
//! matched case-insensitively on the whole text, first match wins.

pub struct Diagnosis {
    /// "Connection refused — cannot connect to 127.0.0.1:5999/test".
    pub cause: String,
    pub hint: Option<&'static str>,
}

/// (any of these words, the hint). The root cause is the part of the
/// error that holds the first word found.
const PATTERNS: &[(&[&str], &str)] = &[
    (
        &["connection refused"],
        "nothing listens there: is the server running, and are `host` and `port` right?",
    ),
    (
        &[
            "failed to lookup address",
            "name or service not known",
            "no such host",
            "dns error",
            "nodename nor servname",
        ],
        "the host name does not resolve: check `host`",
    ),
    (
        &[
            "password authentication failed",
            "access denied",
            "authentication failed",
            "sasl authentication",
            "login incorrect",
            "530 ",
            "invalidauthenticationinfo",
            "signaturedoesnotmatch",
            "invalidaccesskeyid",
        ],
        "the server refused these credentials: check `username` and `password` (and the user's grants)",
    ),
    (
        &["certificate", "tls handshake", "ssl routines", "handshake failure"],
        "TLS failed: check `tls_ca_file` (the CA that signed the server's certificate) and that the server speaks TLS on that port",
    ),
    (
        &["permission denied"],
        "this user may not do that: check its grants on the server, or the owner and mode of the path in `database`",
    ),
    (
        &["database \"", "unknown database"],
        "create the database, or fix `database`",
    ),
    (
        &[
            "nosuchbucket",
            "bucket does not exist",
            "containernotfound",
            "container does not exist",
            "bucket not found",
        ],
        "create the bucket or container, or fix `database`",
    ),
    (
        &["unknowntopicorpartition", "unknown topic"],
        "create the topic (or let the brokers create topics), or fix `database`",
    ),
    (
        &["not a directory", "file exists"],
        "`database` must name a directory, and a file is in the way",
    ),
    (
        &["timed out", "no answer within", "deadline has elapsed"],
        "the server did not answer in time: check `host`, `port` and the network (a firewall that drops packets looks like this)",
    ),
];

pub fn diagnose(error: &str) -> Diagnosis {
    let lower = error.to_lowercase();
    let found = PATTERNS.iter().find_map(|(words, hint)| {
        words
            .iter()
            .find_map(|w| lower.find(w))
            .map(|at| (at, *hint))
    });
    let Some((at, hint)) = found else {
        return Diagnosis {
            cause: error.to_string(),
            hint: None,
        };
    };
    let root = segment_at(error, at);
    let context = context_of(error);
    let cause = match context {
        Some(c) if !root.contains(c) && !c.contains(root) => format!("{root} — {c}"),
        _ => root.to_string(),
    };
    Diagnosis {
        cause,
        hint: Some(hint),
    }
}

/// The ": "-separated part of `error` around byte `at`, without the
/// parenthesised detail that follows it ("(os error 111)").
fn segment_at(error: &str, at: usize) -> &str {
    let start = error[..at].rfind(": ").map_or(0, |i| i + 2);
    let rest = &error[start..];
    let end = rest.find(": ").unwrap_or(rest.len());
    let part = &rest[..end];
    let part = part.find(" (").map_or(part, |i| &part[..i]);
    part.trim()
}

/// What was being done: the chain's first part, unless it says nothing
/// ("Generic S3 error"), then the next, cut before its timings.
fn context_of(error: &str) -> Option<&str> {
    let mut parts = error.split(": ");
    let first = parts.next()?;
    let chosen = if first.starts_with("Generic ") {
        parts.next()?
    } else {
        first
    };
    // "... in 291ms, after 2 retries": the timings are not the context
    let timing = chosen
        .match_indices(" in ")
        .find(|(i, _)| chosen[i + 4..].starts_with(|c: char| c.is_ascii_digit()))
        .map(|(i, _)| i);
    let cut = timing
        .into_iter()
        .chain(chosen.find(", "))
        .min()
        .unwrap_or(chosen.len());
    Some(chosen[..cut].trim()).filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_says_so_with_where() {
        let d = diagnose(
            "cannot connect to 127.0.0.1:5999/test: error communicating with database: \
             Connection refused (os error 111)",
        );
        assert_eq!(
            d.cause,
            "Connection refused — cannot connect to 127.0.0.1:5999/test"
        );
        assert!(d.hint.unwrap().contains("`host` and `port`"));
    }

    #[test]
    fn kafka_and_s3_wordings() {
        let d = diagnose(
            "kafka topic orders: cannot fetch metadata: Meta data fetch error: \
             BrokerTransportFailure (Local: Broker transport failure) (client error: \
             127.0.0.1:9999/bootstrap: Connect to ipv4#127.0.0.1:9999 failed: Connection \
             refused (after 0ms in state CONNECT))",
        );
        assert_eq!(d.cause, "Connection refused — kafka topic orders");
        let d = diagnose(
            "Generic S3 error: Error performing PUT http://127.0.0.1:4999/b/.abrq-probe in \
             291ms, after 2 retries - HTTP error: error sending request: client error \
             (Connect): tcp connect error: Connection refused (os error 111)",
        );
        assert_eq!(
            d.cause,
            "Connection refused — Error performing PUT http://127.0.0.1:4999/b/.abrq-probe"
        );
    }

    #[test]
    fn missing_database_and_bad_credentials() {
        let d = diagnose(
            "cannot connect to 127.0.0.1:5432/no_such_db: error returned from database: \
             database \"no_such_db\" does not exist",
        );
        assert_eq!(
            d.cause,
            "database \"no_such_db\" does not exist — cannot connect to 127.0.0.1:5432/no_such_db"
        );
        assert_eq!(d.hint, Some("create the database, or fix `database`"));
        let d = diagnose(
            "cannot connect to 127.0.0.1:3306/test: error returned from database: 1698 \
             (28000): Access denied for user 'nobody'@'127.0.0.1'",
        );
        assert!(d.cause.starts_with("Access denied for user"), "{}", d.cause);
        assert!(d.hint.unwrap().contains("`username` and `password`"));
    }

    #[test]
    fn words_like_in_stay_in_the_context() {
        let d = diagnose(
            "cannot log in as u on ftp://127.0.0.1:2999: Connection error: Connection refused \
             (os error 111)",
        );
        assert_eq!(
            d.cause,
            "Connection refused — cannot log in as u on ftp://127.0.0.1:2999"
        );
    }

    #[test]
    fn an_unknown_fault_is_shown_whole() {
        let d = diagnose("something new: went wrong");
        assert_eq!(d.cause, "something new: went wrong");
        assert!(d.hint.is_none());
    }
}
