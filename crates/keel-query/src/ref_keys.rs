//! Keys of referenced objects as map keys, for the reads through references
//! (`relation.rs`), live lists across them (`live_relation.rs`) and backfills
//! (`migrate.rs`): [`K`], an owned key that can be hashed; [`ByKey`], objects by
//! key looked up from borrowed bytes without allocating; [`column_key`], a key
//! read from a key column.

use std::collections::HashMap;

use keel_schema::dynamic::ValueRef;
use keel_schema::Value;

/// A key as a hash-map key (a [`Value`] is not `Hash`: it holds floats).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum K {
    Int(i64),
    Text(String),
    Other(String),
}

impl K {
    pub(crate) fn of(v: &Value) -> K {
        match v {
            Value::Int(i) => K::Int(*i),
            Value::Text(s) => K::Text(s.clone()),
            other => K::Other(format!("{other:?}")),
        }
    }
}

/// The hasher of [`ByKey`]'s maps: every referring row of a read costs one
/// lookup, so the hash is the multiply-rotate of rustc's `FxHasher` (a few
/// instructions per 8 bytes of a short key) instead of std's SipHash, started
/// from a per-process random seed so a file's keys cannot be chosen to collide
/// ahead of time. It is not built to resist an attacker who can observe timings:
/// the worst a collision can do is slow one read, never change its answer.
#[derive(Clone, Copy)]
struct KeyHash(u64);

/// The seed every [`KeyHash`] starts from, drawn once per process.
fn key_hash_seed() -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x6b65_656cu32))
}

impl std::hash::BuildHasher for KeyHash {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.0)
    }
}

impl Default for KeyHash {
    fn default() -> Self {
        KeyHash(key_hash_seed())
    }
}

/// See [`KeyHash`].
struct KeyHasher(u64);

impl KeyHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(Self::K);
    }
}

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
        // The zero padding above must not make "ab" and "ab\0" collide.
        self.add(bytes.len() as u64);
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_i64(&mut self, i: i64) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        // The multiply leaves the low bits weakest; hashbrown takes its
        // bucket from the low bits and its tag from the top seven.
        self.0.rotate_left(20)
    }
}

/// Objects by key, looked up without allocating (text keys by `&str`).
pub(crate) struct ByKey<T> {
    text: HashMap<String, T, KeyHash>,
    int: HashMap<i64, T, KeyHash>,
    other: HashMap<K, T, KeyHash>,
}

impl<T> Default for ByKey<T> {
    fn default() -> Self {
        ByKey {
            text: HashMap::default(),
            int: HashMap::default(),
            other: HashMap::default(),
        }
    }
}

impl<T> ByKey<T> {
    pub(crate) fn get(&self, k: &Value) -> Option<&T> {
        match k {
            Value::Text(s) => self.text.get(s.as_str()),
            Value::Int(i) => self.int.get(i),
            other => self.other.get(&K::of(other)),
        }
    }

    /// [`get`](Self::get) of a value borrowed from an object's bytes.
    pub(crate) fn get_ref(&self, k: &ValueRef<'_>) -> Option<&T> {
        match k {
            ValueRef::Text(s) => self.text.get(*s),
            ValueRef::Int(i) => self.int.get(i),
            other => self.other.get(&K::of(&other.to_value())),
        }
    }

    pub(crate) fn insert(&mut self, k: Value, t: T) {
        match k {
            Value::Text(s) => {
                self.text.insert(s, t);
            }
            Value::Int(i) => {
                self.int.insert(i, t);
            }
            other => {
                self.other.insert(K::of(&other), t);
            }
        }
    }
}

/// A key read from a key column (`k0`): reference keys are text or integers.
pub(crate) fn column_key(v: rusqlite::types::ValueRef<'_>) -> Option<Value> {
    match v {
        rusqlite::types::ValueRef::Text(t) => {
            Some(Value::Text(String::from_utf8_lossy(t).into_owned()))
        }
        rusqlite::types::ValueRef::Integer(i) => Some(Value::Int(i)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn padding_and_length_do_not_collide() {
        let h = KeyHash::default();
        let words = ["", "a", "ab", "ab\0", "ab\0\0\0\0\0\0", "ab\0\0\0\0\0\0\0"];
        let hashes: std::collections::HashSet<u64> = words.iter().map(|w| h.hash_one(w)).collect();
        assert_eq!(hashes.len(), words.len());
    }

    #[test]
    fn by_key_finds_owned_and_borrowed_keys_of_every_kind() {
        let mut m = ByKey::default();
        m.insert(Value::from("author-007"), 1);
        m.insert(Value::Int(7), 2);
        m.insert(Value::Float(0.5), 3);
        assert_eq!(m.get(&Value::from("author-007")), Some(&1));
        assert_eq!(m.get_ref(&ValueRef::Text("author-007")), Some(&1));
        assert_eq!(m.get_ref(&ValueRef::Int(7)), Some(&2));
        assert_eq!(m.get(&Value::Float(0.5)), Some(&3));
        assert_eq!(m.get_ref(&ValueRef::Text("author-008")), None);
        assert_eq!(m.get(&Value::Text("7".into())), None);
    }
}
