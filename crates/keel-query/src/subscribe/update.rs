//! The deliveries of subscriptions: what a query or object subscription hands its
//! callback or stream. A leaf of `subscribe`: the hub builds these, `mod.rs`
//! re-exports them.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::diff::Diff;
use crate::query::fetch::StoredObject;

/// The objects of one query delivery, in query order: a slice of shared
/// [`StoredObject`]s (it derefs to `[Arc<StoredObject>]`).
///
/// Cloning shares the list: one reference count, not one per object. The hub keeps
/// the list it delivered last and, on the next commit, edits it in place when no
/// delivery still holds it (a callback that copies what it needs and returns), so a
/// commit that moves one object costs the few slots it changes, not a new list.
/// Holding an update makes the next delivery copy the list instead.
///
/// ```
/// use keel_query::Objects;
/// let none = Objects::default();
/// assert!(none.is_empty());
/// assert_eq!(none.iter().count(), 0);
/// ```
#[derive(Clone, Default, PartialEq)]
pub struct Objects(Arc<Vec<Arc<StoredObject>>>);

impl Objects {
    /// The list to edit in place, if no delivery shares it.
    pub(crate) fn unshared(&mut self) -> Option<&mut Vec<Arc<StoredObject>>> {
        Arc::get_mut(&mut self.0)
    }
}

impl Deref for Objects {
    type Target = [Arc<StoredObject>];
    fn deref(&self) -> &[Arc<StoredObject>] {
        &self.0
    }
}

impl From<Vec<Arc<StoredObject>>> for Objects {
    fn from(v: Vec<Arc<StoredObject>>) -> Objects {
        Objects(Arc::new(v))
    }
}

impl PartialEq<Vec<Arc<StoredObject>>> for Objects {
    fn eq(&self, other: &Vec<Arc<StoredObject>>) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<Objects> for Vec<Arc<StoredObject>> {
    fn eq(&self, other: &Objects) -> bool {
        *self == *other.0
    }
}

impl<'a> IntoIterator for &'a Objects {
    type Item = &'a Arc<StoredObject>;
    type IntoIter = std::slice::Iter<'a, Arc<StoredObject>>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Debug for Objects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

/// One delivery of a dynamic query subscription: the whole current result and its
/// [`Diff`] against the previous delivery (the first delivery's diff inserts
/// everything).
///
/// ```
/// use keel_query::{Diff, Objects, QueryUpdate};
/// let u = QueryUpdate { objects: Objects::default(), diff: Diff::initial(0) };
/// assert!(u.diff.is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct QueryUpdate {
    /// The result, in query order (after `offset`/`limit`). The list and its
    /// objects are shared between subscriptions and with the hub (see [`Objects`]).
    pub objects: Objects,
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

/// One delivery of a typed query subscription ([`Fetch::subscribe`](crate::query::fetch::Fetch::subscribe)).
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

/// One delivery of a typed object subscription ([`Database::subscribe`](crate::db::database::Database::subscribe)).
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
