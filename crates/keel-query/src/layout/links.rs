//! The references of one collection, as the write path needs them:
//! the reference fields pointing **at** it (`incoming`: delete rules) and its
//! own reference fields (`outgoing`: the `dangling: false` check on writes).
//!
//! A leaf: it only reads the schema model. `txn/transaction.rs` enforces the rules with it,
//! `relations/prefetch.rs` (prefetch, filters through references, the way back along an
//! incoming reference's `inverse` name) reads it too.

use keel_schema::{FieldPath, OnDelete, PathStep, Schema};

/// A reference field of another collection (or of this one) pointing at this
/// collection.
#[derive(Debug, Clone)]
pub(crate) struct Incoming {
    /// The referring collection (fully qualified).
    pub(crate) from: String,
    /// The reference field's name and id.
    pub(crate) field: String,
    pub(crate) field_id: u16,
    /// Its path in the referring collection.
    pub(crate) path: FieldPath,
    /// A vector of keys.
    pub(crate) to_many: bool,
    /// The delete rule.
    pub(crate) rule: OnDelete,
    /// `inverse: "posts"`: the name this collection navigates back by.
    pub(crate) inverse: Option<String>,
}

/// A reference field of this collection.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// The field's name.
    pub(crate) field: String,
    /// Its path in this collection.
    pub(crate) path: FieldPath,
    /// The referenced collection (fully qualified).
    pub(crate) target: String,
    /// A vector of keys.
    pub(crate) to_many: bool,
    /// `dangling: true`: a key naming no object is accepted.
    pub(crate) dangling: bool,
}

/// The references of one collection (see the module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct Links {
    pub(crate) incoming: Vec<Incoming>,
    pub(crate) outgoing: Vec<Outgoing>,
}

fn path_of(id: u16, name: &str) -> FieldPath {
    FieldPath::new(vec![PathStep::Field {
        id,
        name: name.to_owned().into(),
    }])
}

impl Links {
    /// The links of collection `name` in `schema`.
    pub(crate) fn of(schema: &Schema, name: &str) -> Links {
        let mut links = Links::default();
        for (c, f) in schema.references() {
            let Some(r) = &f.references else { continue };
            if r.target == name {
                links.incoming.push(Incoming {
                    from: c.name.clone(),
                    field: f.name.clone(),
                    field_id: f.id,
                    path: path_of(f.id, &f.name),
                    to_many: r.to_many,
                    rule: r.on_delete,
                    inverse: r.inverse.clone(),
                });
            }
            if c.name == name {
                links.outgoing.push(Outgoing {
                    field: f.name.clone(),
                    path: path_of(f.id, &f.name),
                    target: r.target.clone(),
                    to_many: r.to_many,
                    dangling: r.dangling,
                });
            }
        }
        links
    }

    /// Whether a write must check that its references exist.
    pub(crate) fn strict(&self) -> bool {
        self.outgoing.iter().any(|o| !o.dangling)
    }
}
