//! The deliveries of subscriptions: what a query or object subscription hands its
//! callback or stream. A leaf of `subscribe`: the hub builds these, `mod.rs`
//! re-exports them.

use std::sync::Arc;

use super::diff::Diff;
use crate::query::StoredObject;

/// One delivery of a dynamic query subscription: the whole current result and its
/// [`Diff`] against the previous delivery (the first delivery's diff inserts
/// everything).
///
/// ```
/// use keel_query::{Diff, QueryUpdate};
/// let u = QueryUpdate { objects: vec![], diff: Diff::initial(0) };
/// assert!(u.diff.is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct QueryUpdate {
    /// The result, in query order (after `offset`/`limit`). Objects are shared
    /// between subscriptions, hence the `Arc`.
    pub objects: Vec<Arc<StoredObject>>,
    /// Changes against the previous delivery.
    pub diff: Diff,
}

/// One delivery of a dynamic object subscription.
///
/// ```
/// use keel_query::ObjectEvent;
/// assert!(matches!(ObjectEvent::Deleted, ObjectEvent::Deleted));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectEvent {
    /// The object's new version.
    Updated(Arc<StoredObject>),
    /// The object was deleted; the subscription has ended.
    Deleted,
}

/// One delivery of a typed query subscription ([`Fetch::subscribe`](crate::Fetch::subscribe)).
///
/// ```
/// use keel_query::{Diff, Update};
/// let u: Update<u8> = Update { objects: vec![], diff: Diff::default() };
/// assert!(u.objects.is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct Update<R> {
    /// The result, decoded. Objects unchanged since the previous delivery are the
    /// same `Arc`s (only inserted and updated ones are decoded).
    pub objects: Vec<Arc<R>>,
    /// Changes against the previous delivery.
    pub diff: Diff,
}

/// One delivery of a typed object subscription ([`Database::subscribe`](crate::Database::subscribe)).
///
/// ```
/// use keel_query::ObjectUpdate;
/// let u: ObjectUpdate<u8> = ObjectUpdate::Updated(1);
/// assert!(matches!(u, ObjectUpdate::Updated(1)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectUpdate<R> {
    /// The object's new version.
    Updated(R),
    /// The object was deleted; the subscription has ended.
    Deleted,
}
