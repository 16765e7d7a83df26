//! [`FieldPath`]: how queries name a field inside an object.
//!
//! A path starts at a collection's table and is a sequence of [`PathStep`]s:
//!
//! * [`PathStep::Field`] selects the field with the given id (its vtable slot index)
//!   of the current table, or the n-th field of the current struct. Scalars, enums
//!   and strings end a path; sub-tables and structs may be followed by more steps.
//! * [`PathStep::UnionMember`] selects a union field *if* it holds the given member
//!   type; the following steps read fields of that member table. When the union holds
//!   another member (or nothing), every read through the path is `Null`.
//!
//! Paths carry field names only for display (`author.name`,
//! `content.Image.width`); equality and hashing use ids *and* names, so paths built
//! from the same schema compare equal. Paths built by generated code are `'static`
//! and allocation-free.

use std::borrow::Cow;
use std::fmt;

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathStep {
    /// The field with this id (vtable slot index; for structs: field position).
    Field {
        /// Vtable slot index of the field (its `id` attribute, or declaration order).
        id: u16,
        /// Field name, for display.
        name: Cow<'static, str>,
    },
    /// The union field with this id (the slot of the value, not of the `_type` tag),
    /// if it currently holds member `member` (the FlatBuffers union tag, 1-based).
    UnionMember {
        /// Vtable slot index of the union's value field (its `_type` tag is `id - 1`).
        id: u16,
        /// Union field name, for display.
        name: Cow<'static, str>,
        /// Union type tag of the member (1 for the first member; 0 is `NONE`).
        member: u8,
        /// Member table name, for display.
        member_name: Cow<'static, str>,
    },
}

impl PathStep {
    /// A field step (usable in `const` context).
    pub const fn field(id: u16, name: &'static str) -> Self {
        PathStep::Field {
            id,
            name: Cow::Borrowed(name),
        }
    }

    /// A union-member step (usable in `const` context).
    pub const fn union_member(
        id: u16,
        name: &'static str,
        member: u8,
        member_name: &'static str,
    ) -> Self {
        PathStep::UnionMember {
            id,
            name: Cow::Borrowed(name),
            member,
            member_name: Cow::Borrowed(member_name),
        }
    }

    /// The vtable slot (or struct position) this step reads.
    pub fn id(&self) -> u16 {
        match self {
            PathStep::Field { id, .. } | PathStep::UnionMember { id, .. } => *id,
        }
    }
}

/// A path from a collection's table to a field, e.g. `author.name`.
///
/// ```
/// use keel_schema::{FieldPath, PathStep};
/// static STEPS: &[PathStep] = &[PathStep::field(2, "author"), PathStep::field(0, "name")];
/// let path = FieldPath::from_static(STEPS);
/// assert_eq!(path.to_string(), "author.name");
/// assert_eq!(path.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldPath {
    steps: Cow<'static, [PathStep]>,
}

impl FieldPath {
    /// A path over static steps; no allocation (used by generated code).
    pub const fn from_static(steps: &'static [PathStep]) -> Self {
        FieldPath {
            steps: Cow::Borrowed(steps),
        }
    }

    /// A path over owned steps.
    pub fn new(steps: Vec<PathStep>) -> Self {
        FieldPath {
            steps: Cow::Owned(steps),
        }
    }

    /// A single-field path.
    pub fn field(id: u16, name: impl Into<Cow<'static, str>>) -> Self {
        FieldPath::new(vec![PathStep::Field {
            id,
            name: name.into(),
        }])
    }

    /// The steps, outermost first.
    pub fn steps(&self) -> &[PathStep] {
        &self.steps
    }

    /// Number of steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// `true` when the path has no steps (the object itself).
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// This path followed by `other` (e.g. `author` + `name` = `author.name`).
    pub fn join(&self, other: &FieldPath) -> FieldPath {
        let mut steps = self.steps.to_vec();
        steps.extend(other.steps.iter().cloned());
        FieldPath::new(steps)
    }

    /// This path with one more step.
    pub fn push(&self, step: PathStep) -> FieldPath {
        let mut steps = self.steps.to_vec();
        steps.push(step);
        FieldPath::new(steps)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.steps.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            match step {
                PathStep::Field { name, .. } => f.write_str(name)?,
                PathStep::UnionMember {
                    name, member_name, ..
                } => write!(f, "{name}.{member_name}")?,
            }
        }
        Ok(())
    }
}
