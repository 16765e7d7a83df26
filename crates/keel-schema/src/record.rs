//! [`Record`]: what generated types implement so the object layer can store them.
//!
//! A record is an immutable, cheaply clonable Rust value that maps one-to-one to a
//! FlatBuffers table of a collection. The object layer never looks inside a record:
//! it asks for its bytes ([`Record::encode`]), its primary key
//! ([`Record::primary_key`]), and the schema text it was generated from
//! ([`Record::SCHEMA_FBS`]), which it parses into the runtime [`Schema`](crate::model::Schema)
//! that drives SQL, indexes and in-memory query evaluation.

use std::borrow::Cow;

use crate::value::Value;

/// Why FlatBuffers bytes could not be decoded.
///
/// Decoding is fully bounds-checked: malformed input yields one of these, never a
/// panic or undefined behaviour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// An offset or length points outside the buffer.
    #[error("{what} at byte {offset} is out of bounds (buffer is {len} bytes)")]
    OutOfBounds {
        /// What was being read (`"vtable"`, `"string"`, …).
        what: &'static str,
        /// Byte offset of the read.
        offset: usize,
        /// Buffer length.
        len: usize,
    },
    /// The bytes are structurally invalid.
    #[error("invalid {what} at byte {offset}: {reason}")]
    Invalid {
        /// What was being read.
        what: &'static str,
        /// Byte offset of the problem.
        offset: usize,
        /// What was wrong.
        reason: Cow<'static, str>,
    },
    /// Tables nest deeper than the decoder allows (64 levels).
    #[error("tables nest deeper than {0} levels")]
    TooDeep(usize),
    /// Decoding the buffer would exceed the decode budget: more than
    /// [`MAX_TABLES`](crate::wire::MAX_TABLES) table visits (`limit` is that
    /// count), or a decoded size over [`MAX_EXPANSION`](crate::wire::MAX_EXPANSION)
    /// times the buffer's length (`limit` is that factor). Offsets that share one
    /// string or subtree many times make such buffers (an amplification bomb).
    #[error("the buffer exceeds the decode budget ({what}, limit {limit})")]
    OverBudget {
        /// `"table visits"` or `"decoded size"`.
        what: &'static str,
        /// The limit that was exceeded.
        limit: usize,
    },
    /// A value does not fit the type generated code expects.
    #[error("field {field}: {reason}")]
    Field {
        /// Field name.
        field: &'static str,
        /// What was wrong (e.g. unknown enum value).
        reason: Cow<'static, str>,
    },
}

/// A type stored in a keel collection; implemented by generated code.
///
/// ```
/// // Types like `Post` come from `keel_schema::compile("schema/blog.fbs")` in build.rs.
/// use keel_example_blog::blog::Post;
/// use keel_schema::{Record, Value};
///
/// let post = Post::builder().id("p1").title("Hello").priority(3).build();
/// let bytes = post.encode();
/// assert_eq!(Post::decode(&bytes)?, post);
/// assert_eq!(post.primary_key(), vec![Value::from("p1")]);
/// # Ok::<(), keel_schema::DecodeError>(())
/// ```
pub trait Record: Send + Sync + Clone + 'static {
    /// The primary key type: one field's Rust type, or a tuple for composite keys.
    type Key: Clone + Send + Sync + 'static;

    /// Collection name (the table's fully qualified name, e.g. `blog.Post`).
    const COLLECTION: &'static str;

    /// Canonical text of the whole schema this type was generated from (includes
    /// inlined). The object layer parses it with [`Schema::parse`](crate::model::Schema::parse).
    const SCHEMA_FBS: &'static str;

    /// Fingerprint of the schema at generation time (see
    /// [`Schema::fingerprint`](crate::model::Schema::fingerprint)).
    const SCHEMA_FINGERPRINT: u64;

    /// Encodes the object as a finished FlatBuffers buffer (root = this table).
    /// Generated encoders write every string and vector once — no two fields
    /// share bytes — and keel's store relies on it: a typed write stores the
    /// body without its key string without walking the other fields to prove
    /// none points into it.
    fn encode(&self) -> Vec<u8>;

    /// Decodes and verifies a FlatBuffers buffer whose root is this table.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError>;

    /// Decodes bytes that were verified when they were stored (what keel's reads
    /// use): the bounds-checked read of every field, without the `flatbuffers`
    /// verifier's separate pass over the buffer. Bytes damaged since — a row
    /// changed by another tool — still give an error (out-of-bounds offsets, bad
    /// UTF-8, nesting over 64 levels, a union type without its value), never a
    /// panic; only what a bounds-checked read does not need (alignment) goes
    /// unchecked. The default implementation is [`Record::decode`].
    ///
    /// ```
    /// use keel_example_blog::blog::Post;
    /// use keel_schema::Record;
    /// let bytes = Post::builder().id("p").build().encode();
    /// assert_eq!(Post::decode_stored(&bytes)?.id, "p");
    /// assert!(Post::decode_stored(&[0xde, 0xad, 0xbe, 0xef, 1, 0]).is_err());
    /// # Ok::<(), keel_schema::DecodeError>(())
    /// ```
    fn decode_stored(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::decode(bytes)
    }

    /// The primary key of this object.
    fn key(&self) -> Self::Key;

    /// A key as values, in primary-key field order.
    fn key_values(key: &Self::Key) -> Vec<Value>;

    /// The primary key of this object as values, in primary-key field order.
    fn primary_key(&self) -> Vec<Value> {
        Self::key_values(&self.key())
    }
}

/// A change to an existing object: which fields it sets, and to what.
///
/// Made by the generated `obj.change()…build()` builder (or [`Changes::new`]). It
/// carries the key the object had when the change was built, the object with the
/// setters applied, and the ids of the fields the setters touched. At commit the
/// object layer reads the row's *current* version inside the transaction and applies
/// only those fields: fields the request did not set keep whatever is stored then,
/// so a request built from a stale object cannot revert a value committed in
/// between (no lost update). Setting a primary-key field moves the object to the new
/// key (a delete and an insert in the same transaction).
///
/// ```
/// use keel_example_blog::blog::Post;
/// use keel_schema::ChangeRequest;
///
/// let post = Post::builder().id("p1").title("Hi").priority(3).build();
/// let ChangeRequest::Change(ch) = post.change().title("Hello").build() else { unreachable!() };
/// assert_eq!(ch.key(), &[keel_schema::Value::from("p1")]);
/// assert_eq!(ch.object().title.as_deref(), Some("Hello"));
/// assert_eq!(ch.fields().len(), 1); // `title` only: `priority` is not part of the change
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Changes<R: Record> {
    key: Vec<Value>,
    object: R,
    fields: Vec<u16>,
}

impl<R: Record> Changes<R> {
    /// A change of the object stored under `key`: the fields with ids `fields`
    /// (vtable slots, see [`model::Field::id`](crate::model::Field::id)) take their
    /// values from `object`; every other field keeps its stored value.
    pub fn new(key: Vec<Value>, object: R, fields: Vec<u16>) -> Self {
        Changes {
            key,
            object,
            fields,
        }
    }

    /// The primary key of the object to change (as it was when the request was built).
    pub fn key(&self) -> &[Value] {
        &self.key
    }

    /// The object the setters were applied to. Only the fields in
    /// [`fields`](Self::fields) are written; the others are whatever the object
    /// the request was built from held.
    pub fn object(&self) -> &R {
        &self.object
    }

    /// Ids (vtable slots) of the fields this request sets, in the order first set.
    pub fn fields(&self) -> &[u16] {
        &self.fields
    }
}

/// A write to a collection, in Dflat's change-request style.
///
/// Objects are immutable. To modify one, build a [`Changes`] with the generated
/// `obj.change()…build()` builder: it records which fields it sets, and only those
/// are written, on top of the version stored at commit time.
///
/// ```
/// use keel_example_blog::blog::Post;
/// use keel_schema::ChangeRequest;
///
/// let post = Post::builder().id("p1").title("Hi").build();
/// let create = post.create(); // submit with `txn.submit(create)` in keel-query
/// let change = post.change().title("Hello").build();
/// let delete = ChangeRequest::<Post>::delete(&"p1".to_string());
/// assert!(matches!(create, ChangeRequest::Create(_)));
/// assert!(matches!(&change, ChangeRequest::Change(c) if c.object().title.as_deref() == Some("Hello")));
/// assert_eq!(delete.key_values(), vec![keel_schema::Value::from("p1")]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ChangeRequest<R: Record> {
    /// Insert; fails if an object with the same key exists.
    Create(R),
    /// Set some fields of an existing object (matched by key); fails if none exists.
    Change(Changes<R>),
    /// Insert or replace.
    Upsert(R),
    /// Delete the object with these primary-key values (in key-field order).
    Delete(Vec<Value>),
}

impl<R: Record> ChangeRequest<R> {
    /// A delete request for a typed key.
    pub fn delete(key: &R::Key) -> Self {
        ChangeRequest::Delete(R::key_values(key))
    }

    /// The object carried, if any (not for `Delete`; for `Change`, the object the
    /// setters were applied to).
    pub fn object(&self) -> Option<&R> {
        match self {
            ChangeRequest::Create(r) | ChangeRequest::Upsert(r) => Some(r),
            ChangeRequest::Change(c) => Some(&c.object),
            ChangeRequest::Delete(_) => None,
        }
    }

    /// The primary-key values this request affects (for `Change`, the key the
    /// object had when the request was built).
    pub fn key_values(&self) -> Vec<Value> {
        match self {
            ChangeRequest::Create(r) | ChangeRequest::Upsert(r) => r.primary_key(),
            ChangeRequest::Change(c) => c.key.clone(),
            ChangeRequest::Delete(k) => k.clone(),
        }
    }
}
