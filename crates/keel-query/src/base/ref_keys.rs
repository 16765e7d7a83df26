//! Keys of referenced objects as map keys, for the reads through references
//! (`relations/prefetch.rs`), live lists across them (`relations/live.rs`) and backfills
//! (`open/migrate.rs`): [`K`], an owned key that can be hashed; [`ByKey`], objects by
//! key looked up from borrowed bytes without allocating (FxHash maps, `base/fx.rs`);
//! [`column_key`], a key read from a key column.

use keel_schema::dynamic::ValueRef;
use keel_schema::Value;

use crate::base::fx::FxMap;

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

/// Objects by key, looked up without allocating (text keys by `&str`).
pub(crate) struct ByKey<T> {
    text: FxMap<String, T>,
    int: FxMap<i64, T>,
    other: FxMap<K, T>,
}

impl<T> Default for ByKey<T> {
    fn default() -> Self {
        ByKey {
            text: FxMap::default(),
            int: FxMap::default(),
            other: FxMap::default(),
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
