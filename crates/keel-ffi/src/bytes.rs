//! [`Bytes`]: an object's bytes on their way out to foreign code, copied once.
//!
//! UniFFI hands a `Vec<u8>` to Kotlin as a `ByteArray` and to Swift as `Data`,
//! but writes it into the call's buffer one element at a time, as it writes any
//! sequence: a capacity check and a push per byte. A fetch of 10,000 blog posts,
//! or one commit's batch of live-list deliveries, spends a measurable share of
//! its time there. [`Bytes`] is the same value on the wire (an `i32` length,
//! then the bytes) and the same type to the foreign side, so the generated
//! Kotlin and Swift do not change; only the Rust side writes and reads it with
//! one copy.
//!
//! Results that carry objects ([`StoredObject`](crate::StoredObject),
//! [`PackedObjects`](crate::PackedObjects), [`Neighbor`](crate::Neighbor),
//! [`DeliveryBatch`](crate::DeliveryBatch), `get`) use it. To Rust code it is a
//! byte slice ([`std::ops::Deref`]) that converts to and from `Vec<u8>`.

use std::ops::Deref;

use uniffi::deps::bytes::{Buf, BufMut};
use uniffi::{FfiConverter, MetadataBuffer, TypeId};

/// Bytes passed to foreign code as `ByteArray` (Kotlin) or `Data` (Swift) with
/// one copy: see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Bytes(pub Vec<u8>);

impl Bytes {
    /// The bytes, as the `Vec` they are kept in.
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes(v)
    }
}

impl From<Bytes> for Vec<u8> {
    fn from(b: Bytes) -> Vec<u8> {
        b.0
    }
}

impl PartialEq<Vec<u8>> for Bytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        &self.0 == other
    }
}

impl PartialEq<[u8]> for Bytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.0 == other
    }
}

// SAFETY: the layout written and read is UniFFI's own for a `Vec<u8>` (an `i32`
// count, then one byte per element), which is what `TYPE_ID_META` (a sequence of
// `u8`, the `bytes` type) makes the generated Kotlin and Swift read and write; a
// length that is negative or runs past the buffer is an error, never a read out
// of bounds (`try_read` checks it against what remains).
#[allow(unsafe_code)]
unsafe impl<UT> FfiConverter<UT> for Bytes {
    uniffi::ffi_converter_rust_buffer_lift_and_lower!(UT);

    fn write(obj: Bytes, buf: &mut Vec<u8>) {
        // UniFFI limits a sequence to i32::MAX elements; a result that large
        // cannot be built into one call's buffer in any case.
        let len = i32::try_from(obj.0.len()).expect("bytes longer than i32::MAX");
        buf.reserve(4 + obj.0.len());
        buf.put_i32(len);
        buf.extend_from_slice(&obj.0);
    }

    fn try_read(buf: &mut &[u8]) -> uniffi::Result<Bytes> {
        if buf.remaining() < 4 {
            uniffi::deps::anyhow::bail!("bytes: no length in the buffer");
        }
        let len = usize::try_from(buf.get_i32())?;
        if buf.remaining() < len {
            uniffi::deps::anyhow::bail!(
                "bytes: a length of {len} with {} bytes left",
                buf.remaining()
            );
        }
        let v = buf[..len].to_vec();
        buf.advance(len);
        Ok(Bytes(v))
    }

    const TYPE_ID_META: MetadataBuffer = <Vec<u8> as TypeId<UT>>::TYPE_ID_META;
}

uniffi::derive_ffi_traits!(blanket Bytes);

#[cfg(test)]
mod tests {
    use super::*;
    use uniffi::{Lift, Lower};

    /// The same bytes on the wire as UniFFI's own `Vec<u8>`, both ways.
    #[test]
    fn bytes_cross_as_a_vec_of_u8_does() {
        let v: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut ours = Vec::new();
        <Bytes as Lower<crate::UniFfiTag>>::write(Bytes(v.clone()), &mut ours);
        let mut theirs = Vec::new();
        <Vec<u8> as Lower<crate::UniFfiTag>>::write(v.clone(), &mut theirs);
        assert_eq!(ours, theirs);
        let mut rest = theirs.as_slice();
        assert_eq!(
            <Bytes as Lift<crate::UniFfiTag>>::try_read(&mut rest).unwrap(),
            v
        );
        assert!(rest.is_empty());
    }

    /// A length past the end, or negative, is an error, not a read past the buffer.
    #[test]
    fn a_length_past_the_buffer_is_refused() {
        let mut buf = Vec::new();
        buf.put_i32(10);
        buf.extend_from_slice(&[1, 2, 3]);
        assert!(<Bytes as Lift<crate::UniFfiTag>>::try_read(&mut buf.as_slice()).is_err());
        let mut neg = Vec::new();
        neg.put_i32(-1);
        assert!(<Bytes as Lift<crate::UniFfiTag>>::try_read(&mut neg.as_slice()).is_err());
        assert!(<Bytes as Lift<crate::UniFfiTag>>::try_read(&mut &[0u8, 0][..]).is_err());
    }
}
