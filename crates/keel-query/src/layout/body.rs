//! An object's bytes as its table's `body` column stores them: the key string once.
//!
//! A FlatBuffers builder writes back to front, so the first string it creates ends
//! the finished buffer: `[u32 length][the bytes][0][zero padding to 4]`. keel's
//! generated encoders (Rust, Swift, Kotlin) create the primary-key string first, so
//! an object's buffer ends with its key, and the key column `k{i}` holds the same
//! text. The body column stores the buffer without that tail; every read puts it
//! back from the key column. What keel hands out — to a typed decode, to the bytes
//! API, to the FFI, to `keel dump` — is the buffer that was written, byte for byte.
//!
//! Whether a stored body lacks its tail is read from the body itself: the key
//! field's offset points exactly at the end of the stored bytes. A whole buffer
//! cannot look like that (a string there would need at least five bytes more), so
//! bodies written whole — by an older build, or from a buffer whose key string is
//! not last (say, `flatc` code that created another string first) — are read as
//! they are, and both kinds live side by side in one table.
//!
//! A body is stripped only when the strip is exact: the tail is the canonical
//! string of the key the row is stored under, and the key field, the table and
//! its vtable can still be found in what remains, and no other field the schema
//! knows points into the tail (a field sharing the key's string, as
//! `create_shared_string` makes, would otherwise point past the stored bytes and
//! read as absent to a filter evaluated on them: such a buffer is stored whole),
//! so reading puts back precisely the bytes that were verified on the way in. Keys that are numbers, and
//! collections keyed by rowid, store the whole buffer.
//!
//! Stock SQLite tools see the stripped body: `sqlite3 app.db "SELECT body …"`
//! gives a buffer whose key is in the `k{i}` column beside it.

use keel_schema::{DynamicTable, FieldType, Schema, Value};
use rusqlite::types::ValueRef as SqlRef;

/// Where an object's bytes were made, as far as [`BodyColumns::strip`] cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A generated type's encoder (`Record::encode`, keel-schema's wire
    /// builder): it writes every string once, so no field but the key points
    /// into the key string, and the walk over every field that proves it for
    /// other bytes (which, at about a thousand instructions an object, was the
    /// largest part of keel's own work in an insert) is not needed.
    Encoder,
    /// Bytes from anywhere else (the app's own builder, a change patched in):
    /// another field may share the key string, so the fields are walked.
    Foreign,
}

/// How to read a collection's objects out of its table: which columns to select
/// for an object's bytes, and how to make the whole buffer of them (see the module
/// docs). What every read of a `body` goes through, keel's own and `keel dump`'s.
///
/// ```
/// use keel_query::inspect::BodyColumns;
/// let schema = keel_schema::Schema::parse(
///     "namespace n; table T { id: string (primary); } root_type T;", "t.fbs")?;
/// let body = BodyColumns::of(&schema, "n.T");
/// assert_eq!(body.select(), "body, k0");
/// # Ok::<(), keel_schema::ParseError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyColumns {
    tail: Option<TailKey>,
    select: String,
}

impl BodyColumns {
    /// The body columns of `collection` in `schema` (a collection `schema` does not
    /// know reads its bodies as stored).
    pub fn of(schema: &Schema, collection: &str) -> BodyColumns {
        let tail = TailKey::of(schema, collection);
        let select = match &tail {
            Some(t) => format!("body, k{}", t.part),
            None => "body".to_string(),
        };
        BodyColumns { tail, select }
    }

    /// The columns to select for an object's bytes: `body`, then the key column a
    /// body without its key string is restored from, if the collection has one.
    pub fn select(&self) -> &str {
        &self.select
    }

    /// How many columns [`BodyColumns::select`] names.
    pub fn width(&self) -> usize {
        1 + usize::from(self.tail.is_some())
    }

    /// What the body column stores for `bytes`, whose key is `key` (one value per
    /// key part): the bytes, less the key string where it can be put back exactly.
    /// `fields` reads the object's table: unless `origin` says no field can
    /// share the key string's bytes, the tail is left on when any field it
    /// knows, other than the key, would point into it (or when there is no
    /// `fields` to ask).
    pub(crate) fn strip<'b>(
        &self,
        bytes: &'b [u8],
        key: &[Value],
        fields: Option<DynamicTable<'_>>,
        origin: Origin,
    ) -> &'b [u8] {
        match (&self.tail, fields) {
            (Some(t), Some(f)) => t.strip(bytes, key, &f, origin),
            _ => bytes,
        }
    }

    /// The whole buffer of the object in row `r`, selected with
    /// [`BodyColumns::select`] from column `at` on: borrowed from SQLite where it
    /// was stored whole, else restored into `scratch`. A body that is not a blob
    /// reads as no bytes (the decode that follows reports it).
    pub fn read<'s>(
        &self,
        r: &'s rusqlite::Row<'_>,
        at: usize,
        scratch: &'s mut Vec<u8>,
    ) -> rusqlite::Result<&'s [u8]> {
        let stored = match r.get_ref(at)? {
            SqlRef::Blob(b) => b,
            _ => return Ok(&[]),
        };
        self.restore(stored, r, at, scratch)
    }

    /// [`BodyColumns::read`] for a row whose body, `stored`, the caller has read
    /// from column `at` already.
    pub(crate) fn restore<'s>(
        &self,
        stored: &'s [u8],
        r: &'s rusqlite::Row<'_>,
        at: usize,
        scratch: &'s mut Vec<u8>,
    ) -> rusqlite::Result<&'s [u8]> {
        match &self.tail {
            // The key column is read only for a body that left its key out.
            Some(t) if t.key_ends(stored) => Ok(t.restore(stored, r.get_ref(at + 1)?, scratch)),
            _ => Ok(stored),
        }
    }

    /// The whole buffer of the object in row `r` of a lookup by `key`, which
    /// selects `rowid, body` ([`BodyColumns::restore_found`]).
    pub(crate) fn read_found<'s>(
        &self,
        r: &'s rusqlite::Row<'_>,
        key: &[Value],
        scratch: &'s mut Vec<u8>,
    ) -> rusqlite::Result<&'s [u8]> {
        Ok(match r.get_ref(1)? {
            SqlRef::Blob(b) => self.restore_found(b, key, scratch),
            _ => &[],
        })
    }

    /// The whole buffer of `stored`, the body of the row a lookup by `key` found
    /// (`WHERE k0 = ?…`): the row's key column holds exactly that key (SQLite's
    /// `=` on text is byte equality, and text never equals a blob or a number), so
    /// the lookup selects `body` alone and the tail comes from `key`.
    fn restore_found<'s>(
        &self,
        stored: &'s [u8],
        key: &[Value],
        scratch: &'s mut Vec<u8>,
    ) -> &'s [u8] {
        match (&self.tail, &self.tail.and_then(|t| key.get(t.part))) {
            (Some(t), Some(Value::Text(k))) if t.key_ends(stored) => {
                t.restore(stored, SqlRef::Text(k.as_bytes()), scratch)
            }
            _ => stored,
        }
    }
}

thread_local! {
    /// The buffer [`with_scratch`] lends on this thread.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with a buffer to restore one body into ([`BodyColumns::read`]): this
/// thread's, kept between calls so a lookup by key allocates nothing for it, or a
/// fresh one while the thread's is lent out.
pub(crate) fn with_scratch<T>(f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    let mut buf = SCRATCH
        .try_with(|cell| {
            cell.try_borrow_mut()
                .ok()
                .map(|mut b| std::mem::take(&mut *b))
        })
        .ok()
        .flatten()
        .unwrap_or_default();
    let out = f(&mut buf);
    // Give it back for the next call, unless an unusually large object grew it.
    if buf.capacity() <= 1 << 16 {
        let _ = SCRATCH.try_with(|cell| {
            if let Ok(mut slot) = cell.try_borrow_mut() {
                *slot = buf;
            }
        });
    }
    out
}

/// Which key part a collection's bodies may leave out (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TailKey {
    /// Index of the key part, so its column is `k{part}`.
    part: usize,
    /// Its vtable slot in the root table (the field id).
    slot: u16,
}

impl TailKey {
    /// The first string field of `collection`'s primary key in `schema`, if any.
    fn of(schema: &Schema, collection: &str) -> Option<TailKey> {
        let c = schema.collection(collection)?;
        let t = schema.table(c.table);
        c.primary_key.iter().enumerate().find_map(|(part, id)| {
            let f = t.field_by_id(*id)?;
            matches!(f.ty, FieldType::String).then_some(TailKey { part, slot: *id })
        })
    }

    /// What the body column stores for `bytes`, whose key is `key` (one value per
    /// key part): `bytes` less its tail when the strip is exact, else `bytes`.
    fn strip<'b>(
        &self,
        bytes: &'b [u8],
        key: &[Value],
        fields: &DynamicTable<'_>,
        origin: Origin,
    ) -> &'b [u8] {
        let Some(Value::Text(k)) = key.get(self.part) else {
            return bytes;
        };
        let n = tail_len(k.len());
        let Some(cut) = bytes.len().checked_sub(n) else {
            return bytes;
        };
        let (prefix, tail) = bytes.split_at(cut);
        if tail_matches(tail, k.as_bytes())
            && self.key_ends(prefix)
            && (origin == Origin::Encoder || fields.within(prefix, self.slot))
        {
            prefix
        } else {
            bytes
        }
    }

    /// The whole buffer of a body that left its key out ([`TailKey::key_ends`]),
    /// whose row holds `key` in this key's column: `stored` and the key's string, in
    /// `scratch`. A key column that is not text (a stock tool changed it) leaves the
    /// body as stored, and the decode that follows reports it.
    fn restore<'s>(&self, stored: &'s [u8], key: SqlRef<'_>, scratch: &'s mut Vec<u8>) -> &'s [u8] {
        let SqlRef::Text(k) = key else {
            return stored;
        };
        scratch.clear();
        scratch.reserve(stored.len() + tail_len(k.len()));
        scratch.extend_from_slice(stored);
        push_tail(scratch, k);
        scratch
    }

    /// The key field's offset points exactly at the end of `bytes`. Every read of a
    /// row asks this, so it follows only what it needs — root offset, the table's
    /// vtable, the key's entry in it — each read bounds-checked, rather than
    /// walking every field as [`DynamicTable::within`] does (`strip` checks that
    /// too). A body damaged since it was written may pass and be given its tail;
    /// the bounds-checked reads that follow report the damage.
    fn key_ends(&self, bytes: &[u8]) -> bool {
        let u32_at = |at: usize| -> Option<usize> {
            let b = bytes.get(at..at.checked_add(4)?)?;
            Some(u32::from_le_bytes(b.try_into().ok()?) as usize)
        };
        let u16_at = |at: usize| -> Option<usize> {
            let b = bytes.get(at..at.checked_add(2)?)?;
            Some(usize::from(u16::from_le_bytes(b.try_into().ok()?)))
        };
        let found = (|| {
            let table = u32_at(0)?;
            let soffset = u32_at(table)? as u32 as i32;
            let vtable = usize::try_from(table as i64 - i64::from(soffset)).ok()?;
            let entry = 4 + 2 * usize::from(self.slot);
            if entry + 2 > u16_at(vtable)? {
                return None;
            }
            let field = match u16_at(vtable + entry)? {
                0 => return None,
                off => table.checked_add(off)?,
            };
            field.checked_add(u32_at(field)?)
        })();
        found == Some(bytes.len())
    }
}

/// Bytes of the canonical string `[u32 len][bytes][0][pad]` for a `len`-byte key.
fn tail_len(len: usize) -> usize {
    (len + 5).next_multiple_of(4)
}

fn push_tail(out: &mut Vec<u8>, k: &[u8]) {
    let len = u32::try_from(k.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(k);
    let pad = tail_len(k.len()) - 4 - k.len();
    out.extend_from_slice(&[0u8; 4][..pad]);
}

fn tail_matches(tail: &[u8], k: &[u8]) -> bool {
    let Ok(len) = u32::try_from(k.len()) else {
        return false;
    };
    tail.len() == tail_len(k.len())
        && tail[..4] == len.to_le_bytes()
        && &tail[4..4 + k.len()] == k
        && tail[4 + k.len()..].iter().all(|b| *b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_schema::wire::{encode, Builder, Offset};

    fn schema() -> Schema {
        Schema::parse(
            "namespace n; table T { id: string (primary); title: string; n: int; }
             root_type T;",
            "t.fbs",
        )
        .unwrap()
    }

    /// What a read of a row holding `stored` and `key` gives.
    fn read(tk: &TailKey, stored: &[u8], key: SqlRef<'_>) -> Vec<u8> {
        let mut scratch = Vec::new();
        if tk.key_ends(stored) {
            tk.restore(stored, key, &mut scratch).to_vec()
        } else {
            stored.to_vec()
        }
    }

    fn obj(key_first: bool, id: &str, title: &str) -> Vec<u8> {
        encode(None, |b: &mut Builder| {
            let (i, t): (Offset, Offset) = if key_first {
                let i = b.create_string(id);
                (i, b.create_string(title))
            } else {
                let t = b.create_string(title);
                (b.create_string(id), t)
            };
            b.start_table();
            b.add_offset(0, i);
            b.add_offset(1, t);
            b.add_scalar::<i32>(2, 7, 0);
            b.end_table()
        })
    }

    #[test]
    fn a_key_written_first_is_stored_once_and_put_back_exactly() {
        let s = schema();
        let tk = TailKey::of(&s, "n.T").unwrap();
        let f = s.reader("n.T").unwrap();
        for id in ["", "a", "ab", "abc", "abcd", "doc-00012344", "ключ"] {
            let bytes = obj(true, id, "title");
            let key = [Value::Text(id.into())];
            let stored = tk.strip(&bytes, &key, &f, Origin::Foreign);
            assert_eq!(stored.len(), bytes.len() - tail_len(id.len()), "{id:?}");
            assert_eq!(
                read(&tk, stored, SqlRef::Text(id.as_bytes())),
                bytes,
                "{id:?}"
            );
        }
    }

    #[test]
    fn other_buffers_are_stored_whole_and_read_as_they_are() {
        let s = schema();
        let tk = TailKey::of(&s, "n.T").unwrap();
        let f = s.reader("n.T").unwrap();
        let late = obj(false, "k", "title");
        let key = [Value::Text("k".into())];
        assert_eq!(tk.strip(&late, &key, &f, Origin::Foreign), &late[..]);
        assert_eq!(read(&tk, &late, SqlRef::Text(b"k")), late);
        // The tail is another key's: not stripped.
        let first = obj(true, "k", "title");
        assert_eq!(
            tk.strip(&first, &[Value::Text("j".into())], &f, Origin::Foreign),
            &first[..]
        );
        // A key column a stock tool made a number: the body as stored.
        let stored = tk.strip(&first, &key, &f, Origin::Foreign);
        assert_eq!(read(&tk, stored, SqlRef::Integer(1)), stored);
    }

    #[test]
    fn a_key_string_another_field_shares_is_stored_whole() {
        let s = schema();
        let tk = TailKey::of(&s, "n.T").unwrap();
        let f = s.reader("n.T").unwrap();
        let shared = encode(None, |b: &mut Builder| {
            let k = b.create_string("k");
            b.start_table();
            b.add_offset(0, k);
            b.add_offset(1, k);
            b.end_table()
        });
        assert_eq!(
            tk.strip(&shared, &[Value::Text("k".into())], &f, Origin::Foreign),
            &shared[..]
        );
    }

    proptest::proptest! {
        /// Whatever the key and the other fields, reading back what `strip` stores
        /// gives the buffer byte for byte; it is shorter exactly when the key string
        /// was created first.
        #[test]
        fn what_is_stored_reads_back_exactly(
            id in "\\PC{0,40}",
            title in proptest::option::of("\\PC{0,20}"),
            n in proptest::prelude::any::<i32>(),
            key_first in proptest::prelude::any::<bool>(),
        ) {
            let s = schema();
        let tk = TailKey::of(&s, "n.T").unwrap();
        let f = s.reader("n.T").unwrap();
            let bytes = encode(None, |b: &mut Builder| {
                let t = if key_first { None } else { title.as_deref().map(|t| b.create_string(t)) };
                let i = b.create_string(&id);
                let t = t.or_else(|| title.as_deref().map(|t| b.create_string(t)));
                b.start_table();
                b.add_offset(0, i);
                if let Some(t) = t {
                    b.add_offset(1, t);
                }
                b.add_scalar::<i32>(2, n, 0);
                b.end_table()
            });
            let stored = tk.strip(&bytes, &[Value::Text(id.clone())], &f, Origin::Foreign);
            let key_last = key_first || title.is_none();
            let expect = if key_last { bytes.len() - tail_len(id.len()) } else { bytes.len() };
            proptest::prop_assert_eq!(stored.len(), expect);
            proptest::prop_assert_eq!(read(&tk, stored, SqlRef::Text(id.as_bytes())), bytes);
        }

        /// A stored body damaged afterwards (a stock tool's write) never panics the
        /// read; whatever comes back is for the decoders to judge.
        #[test]
        fn a_damaged_body_never_panics(
            cut in 0usize..64,
            flips in proptest::collection::vec((0usize..64, proptest::prelude::any::<u8>()), 0..4),
            key in "\\PC{0,8}",
        ) {
            let s = schema();
        let tk = TailKey::of(&s, "n.T").unwrap();
        let f = s.reader("n.T").unwrap();
            let bytes = obj(true, "some-key", "title");
            let mut stored = tk.strip(&bytes, &[Value::Text("some-key".into())], &f, Origin::Foreign).to_vec();
            for (at, v) in flips {
                if let Some(b) = stored.get_mut(at) {
                    *b = v;
                }
            }
            stored.truncate(stored.len().saturating_sub(cut));
            let _ = read(&tk, &stored, SqlRef::Text(key.as_bytes()));
        }
    }

    #[test]
    fn number_keys_and_rowid_keys_store_the_whole_buffer() {
        let s = Schema::parse(
            "namespace n; table A { id: long (primary); s: string; } table B { s: string; }
             root_type A;",
            "a.fbs",
        )
        .unwrap();
        assert_eq!(TailKey::of(&s, "n.A"), None);
        assert_eq!(TailKey::of(&s, "n.B"), None);
    }
}
