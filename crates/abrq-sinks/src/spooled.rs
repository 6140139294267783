//! A spooled batch that a destination took as its lines
//! (`Batch::lines`) but must decode after all (a line of the first format,
//! a schema or marker it writes from items).

use abrq_core::Batch;
use abrq_core::DeliveryError;

use crate::failure::Failure;

/// The batch of `bytes`' items; a line that cannot be decoded is an
/// `encoding` failure worded as the spool words it.
pub fn decoded(batch: &Batch, bytes: &[u8]) -> Result<Batch, DeliveryError> {
    let items = abrq_core::lines::decode(bytes).map_err(|e| {
        let said = abrq_core::lines::undecodable(batch.meta.seq, &e);
        Failure::Encoding { record: None }.error(said)
    })?;
    Ok(Batch::new(batch.meta.clone(), items))
}
