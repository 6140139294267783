//! The topic a record goes to: the configured name, or a template with
//! `{table}` (and `{schema}`) filled from the record's source table, so a
//! database stream of several tables writes one topic per table.

use abrq_core::TableRef;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    template: String,
    per_table: bool,
}

impl Topic {
    /// Checks the name as Kafka would, with each placeholder standing in
    /// for a valid part.
    pub fn parse(template: &str) -> Result<Topic, String> {
        let per_table = template.contains("{table}") || template.contains("{schema}");
        let probe = template.replace("{table}", "t").replace("{schema}", "s");
        if let Some(why) = invalid(&probe) {
            return Err(format!("topic {template:?}: {why}"));
        }
        Ok(Topic {
            template: template.to_string(),
            per_table,
        })
    }

    pub fn per_table(&self) -> bool {
        self.per_table
    }

    pub fn template(&self) -> &str {
        &self.template
    }

    /// The topic for a record of `table`. A character Kafka does not allow
    /// in a topic becomes `_`; a record without a table cannot fill the
    /// template.
    pub fn render(&self, table: Option<&TableRef>) -> Result<String, String> {
        if !self.per_table {
            return Ok(self.template.clone());
        }
        let Some(t) = table else {
            return Err(format!(
                "topic {:?} names the source table, but this batch's records have none \
                 (only database sources say their table)",
                self.template
            ));
        };
        let clean = |s: &str| -> String {
            s.chars()
                .map(
                    |c| match c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                        true => c,
                        false => '_',
                    },
                )
                .collect()
        };
        let topic = self
            .template
            .replace("{table}", &clean(&t.name))
            .replace("{schema}", &clean(t.schema.as_deref().unwrap_or_default()));
        match invalid(&topic) {
            None => Ok(topic),
            Some(why) => Err(format!("topic {topic:?} for table {t}: {why}")),
        }
    }
}

/// Kafka's own topic name rule, so a typo fails at validation, not at send.
fn invalid(t: &str) -> Option<&'static str> {
    if t.is_empty() {
        Some("empty")
    } else if t.len() > 249 {
        Some("longer than 249 characters")
    } else if t == "." || t == ".." {
        Some("'.' and '..' are not topic names")
    } else if !t
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("only ASCII letters, digits, '.', '_' and '-' are allowed")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_the_table_and_schema() {
        let t = Topic::parse("cdc.{schema}.{table}").unwrap();
        assert!(t.per_table());
        let orders = TableRef::new(Some("public"), "order lines");
        assert_eq!(t.render(Some(&orders)).unwrap(), "cdc.public.order_lines");
        assert!(t
            .render(None)
            .unwrap_err()
            .contains("names the source table"));
        let fixed = Topic::parse("events").unwrap();
        assert_eq!(fixed.render(Some(&orders)).unwrap(), "events");
        assert_eq!(fixed.render(None).unwrap(), "events");
        assert!(Topic::parse("a b").unwrap_err().contains("only ASCII"));
        assert!(Topic::parse("{table}!").is_err());
    }
}
