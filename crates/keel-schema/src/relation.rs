//! Typed relation handles: a `(references: …)` field seen as a link from one
//! record type to another.
//!
//! Generated code gives every reference field `author` of `Post` a
//! `Post::author_ref()` returning a [`Relation<Post, Author>`] (besides the plain
//! field handle `Post::author()`). The query layer uses it to prefetch the
//! referenced objects (`including`) and to filter through the reference:
//! `Post::author_ref().then(Author::name()).eq("Ada")` is a [`Through`] filter.
//! A reference declared with `inverse: "posts"` gives its target an
//! [`Inverse`] handle, `Author::posts_ref()`, for navigating back.

use std::fmt;
use std::marker::PhantomData;

use crate::dynamic::ValueRef;
use crate::expr::{CmpOp, Expr};
use crate::field::{Field, QueryValue};
use crate::path::FieldPath;
use crate::value::Value;

/// The reference field at `path` of record type `R`, pointing at record type
/// `T` (the collection `target`).
///
/// ```
/// use keel_schema::{FieldPath, PathStep, Relation};
/// struct Post;
/// struct Author;
/// static AUTHOR: &[PathStep] = &[PathStep::field(1, "author")];
/// let r: Relation<Post, Author> =
///     Relation::new(FieldPath::from_static(AUTHOR), "blog.Author", false);
/// assert_eq!((r.target(), r.to_many()), ("blog.Author", false));
/// ```
pub struct Relation<R, T> {
    path: FieldPath,
    target: &'static str,
    to_many: bool,
    key: Option<fn(&R) -> ValueRef<'_>>,
    _marker: PhantomData<fn() -> (R, T)>,
}

impl<R, T> Clone for Relation<R, T> {
    fn clone(&self) -> Self {
        Relation {
            path: self.path.clone(),
            target: self.target,
            to_many: self.to_many,
            key: self.key,
            _marker: PhantomData,
        }
    }
}

impl<R, T> fmt::Debug for Relation<R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Relation({} -> {})", self.path, self.target)
    }
}

impl<R, T> Relation<R, T> {
    /// A relation through the field at `path` to collection `target` (fully
    /// qualified); `to_many` for a vector of keys. Generated code calls this.
    pub const fn new(path: FieldPath, target: &'static str, to_many: bool) -> Self {
        Relation {
            path,
            target,
            to_many,
            key: None,
            _marker: PhantomData,
        }
    }

    /// The same relation, with `key` reading a to-one reference's key from an
    /// already decoded `R` (the field's value: [`ValueRef::Null`] when absent).
    /// Generated code sets it for text keys: a prefetch then takes each key
    /// from the `R` it decodes anyway instead of reading the object's bytes a
    /// second time. `key` must return what the field at [`path`](Self::path)
    /// holds; a relation without it reads the bytes.
    pub const fn with_key(mut self, key: fn(&R) -> ValueRef<'_>) -> Self {
        self.key = Some(key);
        self
    }

    /// The key reader [`with_key`](Self::with_key) set, if any.
    pub fn key_reader(&self) -> Option<fn(&R) -> ValueRef<'_>> {
        self.key
    }

    /// The reference field's path in `R`.
    pub fn path(&self) -> &FieldPath {
        &self.path
    }

    /// The referenced collection (fully qualified).
    pub fn target(&self) -> &'static str {
        self.target
    }

    /// Whether the field holds a vector of keys.
    pub fn to_many(&self) -> bool {
        self.to_many
    }

    /// A condition on the referenced object's field `inner`: completed by a
    /// comparison (`.eq("Ada")`) into a [`Through`] filter.
    pub fn then<U>(&self, inner: Field<T, U>) -> ThroughField<R, T, U> {
        ThroughField {
            rel: self.clone(),
            inner,
        }
    }

    /// The referring objects whose referenced object matches `filter` (an
    /// [`Expr`] over `T`'s fields): the untyped form of [`Relation::then`].
    pub fn matching(&self, filter: Expr) -> Through {
        Through {
            path: self.path.clone(),
            target: self.target.to_owned(),
            filter,
        }
    }
}

/// A [`Relation`] followed by a field of the referenced type (see
/// [`Relation::then`]).
pub struct ThroughField<R, T, U> {
    rel: Relation<R, T>,
    inner: Field<T, U>,
}

impl<R, T, U> ThroughField<R, T, U> {
    fn cmp(&self, op: CmpOp, value: Value) -> Through {
        self.rel
            .matching(Expr::cmp(self.inner.path().clone(), op, value))
    }

    /// The referenced object's field equals `value`.
    pub fn eq(&self, value: impl QueryValue<U>) -> Through {
        self.cmp(CmpOp::Eq, value.into_value())
    }

    /// The referenced object's field differs from `value` (absent does not match).
    pub fn ne(&self, value: impl QueryValue<U>) -> Through {
        self.cmp(CmpOp::Ne, value.into_value())
    }

    /// The referenced object's field is less than `value`.
    pub fn lt(&self, value: impl QueryValue<U>) -> Through {
        self.cmp(CmpOp::Lt, value.into_value())
    }

    /// The referenced object's field is at most `value`.
    pub fn le(&self, value: impl QueryValue<U>) -> Through {
        self.cmp(CmpOp::Le, value.into_value())
    }

    /// The referenced object's field is greater than `value`.
    pub fn gt(&self, value: impl QueryValue<U>) -> Through {
        self.cmp(CmpOp::Gt, value.into_value())
    }

    /// The referenced object's field is at least `value`.
    pub fn ge(&self, value: impl QueryValue<U>) -> Through {
        self.cmp(CmpOp::Ge, value.into_value())
    }
}

/// A filter through a reference: the referring objects whose reference field
/// (`path`) holds the key of an object of `target` matching `filter` (for a
/// to-many field: any of its keys). The query layer runs it as a subquery on
/// the target's table.
#[derive(Debug, Clone, PartialEq)]
pub struct Through {
    /// The reference field in the referring collection.
    pub path: FieldPath,
    /// The referenced collection (fully qualified).
    pub target: String,
    /// The condition on the referenced objects.
    pub filter: Expr,
}

/// The way back along a reference declared `inverse: "posts"`: from a record
/// of type `T` (the referenced one, `Author`) to the records of type `R`
/// (`Post`) whose reference names it. Generated: `Author::posts_ref()`.
///
/// ```
/// use keel_schema::Inverse;
/// struct Author;
/// struct Post;
/// let back: Inverse<Author, Post> = Inverse::new("posts", "blog.Post");
/// assert_eq!((back.name(), back.from()), ("posts", "blog.Post"));
/// ```
pub struct Inverse<T, R> {
    name: &'static str,
    from: &'static str,
    _marker: PhantomData<fn() -> (T, R)>,
}

impl<T, R> Clone for Inverse<T, R> {
    fn clone(&self) -> Self {
        Inverse {
            name: self.name,
            from: self.from,
            _marker: PhantomData,
        }
    }
}

impl<T, R> fmt::Debug for Inverse<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Inverse({} <- {})", self.name, self.from)
    }
}

impl<T, R> Inverse<T, R> {
    /// The inverse named `name` of a reference of collection `from` (fully
    /// qualified). Generated code calls this.
    pub const fn new(name: &'static str, from: &'static str) -> Self {
        Inverse {
            name,
            from,
            _marker: PhantomData,
        }
    }

    /// The inverse's name (`posts`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The referring collection (fully qualified).
    pub fn from(&self) -> &'static str {
        self.from
    }
}
