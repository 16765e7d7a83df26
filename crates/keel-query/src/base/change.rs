//! [`Change`]: what a write closure changed, as change hooks and subscriptions
//! see it. Plain data with no dependency inside the crate, so the engine state
//! (which delivers changes) and `txn` (which records them) both sit above it.

use keel_schema::Value;

/// The kind of a [`Change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeOp {
    /// A new object.
    Insert,
    /// An existing object got new bytes (same primary key and rowid).
    Update,
    /// An object was removed.
    Delete,
}

/// One committed change to one object, as handed to
/// [`Database::on_commit_changes`](crate::db::database::Database::on_commit_changes).
///
/// ```
/// use keel_query::{Change, ChangeOp};
/// let c = Change { collection: "blog.Post".into(), op: ChangeOp::Delete, key: vec!["p1".into()],
///                  rowid: 7, old: Some(vec![]), new: None };
/// assert!(c.new.is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Collection (full name).
    pub collection: String,
    /// What happened.
    pub op: ChangeOp,
    /// Primary-key values (`[rowid]` for collections without a primary key).
    pub key: Vec<Value>,
    /// The row's rowid.
    pub rowid: i64,
    /// Bytes before (updates, deletes).
    pub old: Option<Vec<u8>>,
    /// Bytes after (inserts, updates).
    pub new: Option<Vec<u8>>,
}
