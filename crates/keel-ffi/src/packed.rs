//! A query's objects in one buffer: [`Query::all_packed`].
//!
//! [`Query::all`] returns one UniFFI record per object. UniFFI's generated Swift
//! lifts each into a `Data` (a copy out of the RustBuffer, read through
//! unspecialised generic `Data.copyBytes` calls on Linux), which the typed layer
//! then copies again into the `[UInt8]` its decoder reads. [`PackedObjects`]
//! carries the whole result as two byte buffers; the Swift typed fetch
//! (`bindings/swift/KeelPacked.swift`) decodes straight from them. When this was
//! chosen (10,000 blog posts, the `swift` benchmark), the typed fetch took 1.33-1.43x
//! the bytes fetch this way against 1.67x through `all()`; BENCHMARKS.md `swift`
//! has today's figure. For raw bytes it is no faster than `all()`, and a packed
//! write measured no faster in Swift or Kotlin, so there is neither.

use crate::bytes::Bytes;
use crate::callbacks::gated;
use crate::db::Query;
use crate::error::KeelError;

/// Bytes per [`PackedObjects::index`] entry: rowid (`i64`) and end offset (`u32`).
pub const PACKED_OBJECT_ENTRY: usize = 12;

/// Objects in one buffer, what [`Query::all_packed`] returns.
///
/// Object `i`'s bytes are `bytes[start_i..end_i]`, where `end_i` is read from
/// `index` and `start_i` is the previous entry's end (0 for the first). Each of the
/// `count` index entries is [`PACKED_OBJECT_ENTRY`] bytes, little-endian: the
/// object's rowid (`i64`), then its end offset in `bytes` (`u32`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct PackedObjects {
    /// Number of objects.
    pub count: u32,
    /// `count` entries of (rowid `i64` LE, end offset `u32` LE).
    pub index: Bytes,
    /// Every object's FlatBuffers bytes, back to back, in result order.
    pub bytes: Bytes,
}

impl PackedObjects {
    /// Packs `objects` (rowid, bytes) in order. Fails only if the bytes exceed the
    /// 4 GiB a `u32` offset can address.
    pub(crate) fn pack(objects: Vec<keel_query::StoredObject>) -> Result<PackedObjects, KeelError> {
        let total: usize = objects.iter().map(|o| o.bytes.len()).sum();
        let too_big = || {
            KeelError::InvalidArgument {
            message: format!(
                "all_packed: {total} bytes of results exceed the 4 GiB a packed batch holds; use limit/offset"
            ),
        }
        };
        let count = u32::try_from(objects.len()).map_err(|_| too_big())?;
        u32::try_from(total).map_err(|_| too_big())?;
        let mut index = Vec::with_capacity(objects.len() * PACKED_OBJECT_ENTRY);
        let mut bytes = Vec::with_capacity(total);
        for o in objects {
            bytes.extend_from_slice(&o.bytes);
            index.extend_from_slice(&o.rowid.to_le_bytes());
            // Cannot truncate: the total was checked above.
            index.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        }
        Ok(PackedObjects {
            count,
            index: Bytes(index),
            bytes: Bytes(bytes),
        })
    }
}

#[uniffi::export]
impl Query {
    /// [`Query::all`] as one buffer (see [`PackedObjects`]): the same objects in
    /// the same order (synchronous, on the calling thread; `Suspended` while the
    /// database is suspended, like every synchronous read).
    pub fn all_packed(&self) -> Result<PackedObjects, KeelError> {
        crate::db::sync_call(|| PackedObjects::pack(self.build_checked()?.all()?))
    }

    /// [`Query::all_packed`] on a keel thread.
    pub async fn all_packed_async(&self) -> Result<PackedObjects, KeelError> {
        gated(async move {
            let q = self.build_checked()?;
            PackedObjects::pack(q.all_async().await?)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_objects_layout() {
        let p = PackedObjects::pack(vec![
            keel_query::StoredObject {
                rowid: 7,
                bytes: b"ab".to_vec(),
            },
            keel_query::StoredObject {
                rowid: -1,
                bytes: b"cde".to_vec(),
            },
        ])
        .unwrap();
        assert_eq!(p.count, 2);
        assert_eq!(&p.bytes[..], b"abcde");
        assert_eq!(&p.index[0..8], &7i64.to_le_bytes());
        assert_eq!(&p.index[8..12], &2u32.to_le_bytes());
        assert_eq!(&p.index[12..20], &(-1i64).to_le_bytes());
        assert_eq!(&p.index[20..24], &5u32.to_le_bytes());
    }
}
