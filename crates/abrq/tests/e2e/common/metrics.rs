//! Prometheus text, parsed for the tests' assertions.

use std::collections::BTreeMap;

/// A parsed `/metrics` page.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub text: String,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad metrics line {line:?}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("bad metric value in {line:?}"));
            let (name, labels) = match series.find('{') {
                None => (series.to_string(), BTreeMap::new()),
                Some(i) => {
                    let body = series[i + 1..]
                        .strip_suffix('}')
                        .unwrap_or_else(|| panic!("bad labels in {line:?}"));
                    (series[..i].to_string(), parse_labels(body))
                }
            };
            samples.push((name, labels, value));
        }
        Metrics {
            text: text.to_string(),
            samples,
        }
    }

    /// The sum over the series of `name` whose labels include `labels`;
    /// 0 when there is none.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// Whether the page names the metric family at all.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|(n, _, _)| n == name)
            || self
                .text
                .lines()
                .any(|l| l.starts_with(&format!("# TYPE {name} ")))
    }
}

/// `k="v",k2="v\"2"` → map, with the exposition format's escapes.
fn parse_labels(body: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let key = key.trim().trim_start_matches(',').trim().to_string();
        if key.is_empty() {
            break;
        }
        assert_eq!(
            chars.next(),
            Some('"'),
            "label {key} without a quoted value"
        );
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(key, value);
    }
    out
}
