//! Splits a stream of records into spool batches by the stream's limits,
//! encoding each record as it arrives so only the payloads are held.

use abrq_core::config::BatchConfig;
use abrq_core::Record;
use abrq_state::{payload, NewBatch};

pub struct Batcher<'a> {
    limits: &'a BatchConfig,
    current: NewBatch,
    done: Vec<NewBatch>,
}

impl<'a> Batcher<'a> {
    pub fn new(limits: &'a BatchConfig) -> Batcher<'a> {
        Batcher {
            limits,
            current: empty(),
            done: Vec::new(),
        }
    }

    /// Adds a record of `size` source bytes, closing the current batch
    /// first when the record would take it past a limit.
    pub fn push(&mut self, record: &Record, size: u64) -> Result<(), serde_json::Error> {
        let c = &self.current;
        let full = c.records >= self.limits.max_records || c.bytes + size > self.limits.max_bytes.0;
        if full && c.records > 0 {
            let closed = std::mem::replace(&mut self.current, empty());
            self.done.push(closed);
        }
        payload::encode_record(&mut self.current.payload, record.op, &record.fields)?;
        self.current.records += 1;
        self.current.bytes += size;
        Ok(())
    }

    pub fn records(&self) -> u64 {
        self.done.iter().map(|b| b.records).sum::<u64>() + self.current.records
    }

    pub fn finish(mut self) -> Vec<NewBatch> {
        if self.current.records > 0 {
            self.done.push(self.current);
        }
        self.done
    }
}

fn empty() -> NewBatch {
    NewBatch {
        payload: Vec::new(),
        records: 0,
        bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::config::Size;
    use abrq_core::Item;
    use serde_json::json;

    fn rec(i: u64) -> Record {
        let serde_json::Value::Object(m) = json!({"i": i}) else {
            unreachable!()
        };
        Record::insert(m)
    }

    #[test]
    fn splits_by_records_and_bytes_in_order() {
        let limits = BatchConfig {
            max_records: 3,
            max_bytes: Size(25),
            ..BatchConfig::default()
        };
        let mut b = Batcher::new(&limits);
        for i in 0..7 {
            b.push(&rec(i), 7).unwrap();
        }
        assert_eq!(b.records(), 7);
        let batches = b.finish();
        let sizes: Vec<u64> = batches.iter().map(|b| b.records).collect();
        assert_eq!(sizes, [3, 3, 1]);
        let mut seen = Vec::new();
        for batch in &batches {
            for item in payload::decode(1, &batch.payload).unwrap() {
                let Item::Record(r) = item else { panic!() };
                seen.push(r.fields["i"].as_u64().unwrap());
            }
        }
        assert_eq!(seen, (0..7).collect::<Vec<_>>());

        // A record larger than max_bytes still gets a batch of its own.
        let mut b = Batcher::new(&limits);
        b.push(&rec(1), 100).unwrap();
        b.push(&rec(2), 1).unwrap();
        assert_eq!(b.finish().len(), 2);
    }
}
