//! Schema evolution: is `new` a safe successor of `old`?
//!
//! keel never rewrites stored objects, so a new schema must read every object the
//! old one wrote, and old binaries (an app not yet updated, another platform's
//! build) must read objects the new one writes. FlatBuffers guarantees both as long
//! as every field keeps its vtable slot and type. The rules:
//!
//! Allowed ([`Note`]s):
//! * appending fields (new ids after the old ones);
//! * deprecating a field (`(deprecated)`), or renaming one (ids matter, names don't —
//!   but queries by name change);
//! * adding or removing `(indexed)`/`(unique)` indexes;
//! * adding, changing or removing a `(references: …)` (noted; existing keys are
//!   not checked, and a to-one reference's index is built in the background);
//! * appending enum values or union members; adding new types and collections;
//! * changing a default (reported: old objects that omitted the field read the new
//!   default; keel rebuilds an index on the field in the background, since its stored
//!   values change).
//!
//! Refused ([`Incompatibility`]s): removing a field (deprecate it instead), changing a
//! field's type or id (reordering fields without explicit ids does this), turning
//! a field optional or back, changing an enum's values or underlying type, changing
//! a union's members' order, changing a struct, removing a table or collection,
//! changing a collection's primary key or the default of one of its fields.
//!
//! ```
//! use keel_schema::{compat, Schema};
//! let v1 = Schema::parse("table P { id: string (primary); } root_type P;", "v1.fbs").unwrap();
//! let v2 = Schema::parse("table P { id: string (primary); n: int (indexed); } root_type P;", "v2.fbs").unwrap();
//! let notes = compat::check(&v1, &v2).unwrap();
//! assert!(notes[0].to_string().contains("P.n"));
//! let errs = compat::check(&v2, &v1).unwrap_err();
//! assert_eq!(errs[0].to_string(), "P.n: field was removed; keep it and mark it (deprecated) instead");
//! ```

use std::fmt;

use crate::model::*;
use crate::path::PathStep;

/// An allowed change worth telling the user about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// What changed (`blog.Post.priority`, `blog.Color`, …).
    pub subject: String,
    /// What happened.
    pub message: String,
}

/// A change that would break reading old or new data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatibility {
    /// What changed (`blog.Post.priority`, …).
    pub subject: String,
    /// Why it is refused and what to do instead.
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.subject, self.message)
    }
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.subject, self.message)
    }
}

struct Ctx<'a> {
    old: &'a Schema,
    new: &'a Schema,
    notes: Vec<Note>,
    errs: Vec<Incompatibility>,
}

impl Ctx<'_> {
    fn note(&mut self, subject: String, message: String) {
        self.notes.push(Note { subject, message });
    }
    fn err(&mut self, subject: String, message: String) {
        self.errs.push(Incompatibility { subject, message });
    }

    /// Same type in both schemas (by structure and full names).
    fn same_type(&self, a: &FieldType, b: &FieldType) -> bool {
        match (a, b) {
            (FieldType::Scalar(x), FieldType::Scalar(y)) => x == y,
            (FieldType::String, FieldType::String) => true,
            (FieldType::Enum(x), FieldType::Enum(y)) => {
                self.old.enums[*x].full_name() == self.new.enums[*y].full_name()
            }
            (FieldType::Struct(x), FieldType::Struct(y)) => {
                self.old.structs[*x].full_name() == self.new.structs[*y].full_name()
            }
            (FieldType::Table(x), FieldType::Table(y)) => {
                self.old.tables[*x].full_name() == self.new.tables[*y].full_name()
            }
            (FieldType::Union(x), FieldType::Union(y)) => {
                self.old.unions[*x].full_name() == self.new.unions[*y].full_name()
            }
            (FieldType::Vector(x), FieldType::Vector(y)) => self.same_type(x, y),
            _ => false,
        }
    }
}

/// Checks whether `new` can replace `old`: `Ok(notes)` when compatible (notes list
/// the allowed changes), `Err(problems)` otherwise, each naming the field or type.
pub fn check(old: &Schema, new: &Schema) -> Result<Vec<Note>, Vec<Incompatibility>> {
    let mut cx = Ctx {
        old,
        new,
        notes: Vec::new(),
        errs: Vec::new(),
    };
    for e in &old.enums {
        let name = e.full_name();
        let Some(ne) = new.enums.iter().find(|n| n.full_name() == name) else {
            cx.err(name, "enum was removed".into());
            continue;
        };
        if ne.underlying != e.underlying {
            cx.err(
                name.clone(),
                format!(
                    "underlying type changed from {} to {}",
                    e.underlying.fbs_name(),
                    ne.underlying.fbs_name()
                ),
            );
        }
        for v in &e.values {
            match ne.values.iter().find(|n| n.name == v.name) {
                None => cx.err(
                    format!("{name}.{}", v.name),
                    "enum value was removed; stored objects may hold it".into(),
                ),
                Some(n) if n.value != v.value => cx.err(
                    format!("{name}.{}", v.name),
                    format!("enum value changed from {} to {}", v.value, n.value),
                ),
                _ => {}
            }
        }
        for v in ne.values.iter().filter(|n| e.value(&n.name).is_none()) {
            if e.name_of(v.value).is_some() {
                cx.err(
                    format!("{name}.{}", v.name),
                    format!(
                        "value {} already meant {:?}",
                        v.value,
                        e.name_of(v.value).unwrap_or("")
                    ),
                );
            } else {
                cx.note(format!("{name}.{}", v.name), "enum value added".into());
            }
        }
    }
    for u in &old.unions {
        let name = u.full_name();
        let Some(nu) = new.unions.iter().find(|n| n.full_name() == name) else {
            cx.err(name, "union was removed".into());
            continue;
        };
        for m in &u.members {
            let old_t = old.tables[m.table].full_name();
            match nu.members.iter().find(|n| n.tag == m.tag) {
                Some(n) if new.tables[n.table].full_name() == old_t => {}
                Some(n) => cx.err(
                    format!("{name}.{}", m.name),
                    format!(
                        "union member {} changed to {} (tag {}); members may only be appended",
                        old_t,
                        new.tables[n.table].full_name(),
                        m.tag
                    ),
                ),
                None => cx.err(
                    format!("{name}.{}", m.name),
                    "union member was removed; members may only be appended".into(),
                ),
            }
        }
        for m in nu.members.iter().skip(u.members.len()) {
            cx.note(format!("{name}.{}", m.name), "union member added".into());
        }
    }
    for s in &old.structs {
        let name = s.full_name();
        let Some(ns) = new.structs.iter().find(|n| n.full_name() == name) else {
            cx.err(name, "struct was removed".into());
            continue;
        };
        let same = ns.size == s.size
            && ns.fields.len() == s.fields.len()
            && s.fields.iter().zip(&ns.fields).all(|(a, b)| {
                a.offset == b.offset && a.size == b.size && cx.same_type(&a.ty, &b.ty)
            });
        if !same {
            cx.err(name, "struct layout changed; structs can never change (add a new struct and field instead)".into());
        }
    }
    for t in &old.tables {
        let tname = t.full_name();
        let Some(nt) = new.tables.iter().find(|n| n.full_name() == tname) else {
            cx.err(tname, "table was removed".into());
            continue;
        };
        for f in &t.fields {
            let subject = format!("{tname}.{}", f.name);
            let by_id = nt.field_by_id(f.id);
            let by_name = nt.field(&f.name);
            match (by_id, by_name) {
                (_, Some(n)) if n.id != f.id => {
                    cx.err(
                        subject,
                        format!(
                            "id changed from {} to {} (fields were reordered or ids reused); ids must never change",
                            f.id, n.id
                        ),
                    );
                    continue;
                }
                (None, None) => {
                    cx.err(
                        subject,
                        "field was removed; keep it and mark it (deprecated) instead".into(),
                    );
                    continue;
                }
                _ => {}
            }
            let Some(n) = by_id else { continue };
            if n.name != f.name {
                cx.note(
                    subject.clone(),
                    format!(
                        "renamed to {:?} (same id {}); queries by name change",
                        n.name, n.id
                    ),
                );
            }
            if !cx.same_type(&f.ty, &n.ty) {
                cx.err(
                    subject,
                    format!(
                        "type changed from {} to {}; a field's type can never change (deprecate it and add a new field)",
                        old.type_name(&f.ty),
                        new.type_name(&n.ty)
                    ),
                );
                continue;
            }
            if f.optional != n.optional {
                cx.err(
                    subject.clone(),
                    if n.optional {
                        "became optional (= null); absent values would read as null instead of the default".into()
                    } else {
                        "is no longer optional; absent values would read as the default instead of null".into()
                    },
                );
            } else if f.default != n.default
                && !(f.default.as_f64().is_some_and(f64::is_nan)
                    && n.default.as_f64().is_some_and(f64::is_nan))
            {
                cx.note(subject.clone(), format!("default changed from {} to {}; objects that omitted the field now read the new default", f.default, n.default));
            }
            if !f.deprecated && n.deprecated {
                cx.note(subject.clone(), "deprecated".into());
            }
            if f.deprecated && !n.deprecated {
                cx.note(subject.clone(), "no longer deprecated".into());
            }
            // References change no bytes: the rules apply to writes from now on;
            // existing keys are not checked (`keel check` lists dangling ones).
            match (&f.references, &n.references) {
                (None, Some(r)) => cx.note(
                    subject.clone(),
                    format!(
                        "now references {} (on_delete {}); existing keys are not checked: `keel check` lists dangling ones",
                        r.target,
                        r.on_delete.as_str()
                    ),
                ),
                (Some(_), None) => cx.note(subject.clone(), "no longer a reference".into()),
                (Some(a), Some(b)) if a != b => cx.note(
                    subject.clone(),
                    format!(
                        "reference changed: {} (on_delete {}, dangling {})",
                        b.target,
                        b.on_delete.as_str(),
                        b.dangling
                    ),
                ),
                _ => {}
            }
        }
        let max_old = t.slot_count();
        for n in nt.fields.iter().filter(|n| {
            t.field_by_id(n.id).is_none()
                && n.union_type_id()
                    .is_none_or(|ty| t.field_by_id(ty + 1).is_none())
        }) {
            if n.id >= max_old {
                cx.note(
                    format!("{tname}.{}", n.name),
                    format!("field added (id {})", n.id),
                );
            } else {
                cx.err(
                    format!("{tname}.{}", n.name),
                    format!(
                        "new field reuses id {} of an old slot; append new fields after id {}",
                        n.id,
                        max_old.saturating_sub(1)
                    ),
                );
            }
        }
    }
    for c in &old.collections {
        let Some(nc) = new.collections.iter().find(|n| n.name == c.name) else {
            cx.err(
                c.name.clone(),
                "collection was removed (the table is no longer the root_type or marked (entity))"
                    .into(),
            );
            continue;
        };
        let names = |s: &Schema, col: &Collection| -> Vec<String> {
            col.primary_key
                .iter()
                .filter_map(|id| s.tables[col.table].field_by_id(*id).map(|f| f.name.clone()))
                .collect()
        };
        if c.primary_key != nc.primary_key {
            cx.err(
                c.name.clone(),
                format!(
                    "primary key changed from ({}) to ({}); the primary key can never change",
                    names(old, c).join(", "),
                    names(new, nc).join(", ")
                ),
            );
        } else {
            // A key field's default is part of every stored key that omitted it:
            // keel keeps the key in its own column (and looks objects up by it), so
            // a new default would make the field and its stored key disagree.
            for id in &c.primary_key {
                let (Some(f), Some(n)) = (
                    old.tables[c.table].field_by_id(*id),
                    new.tables[nc.table].field_by_id(*id),
                ) else {
                    continue;
                };
                let both_nan = f.default.as_f64().is_some_and(f64::is_nan)
                    && n.default.as_f64().is_some_and(f64::is_nan);
                if f.default != n.default && !both_nan {
                    cx.err(
                        format!("{}.{}", c.name, n.name),
                        format!(
                            "default of primary-key field changed from {} to {}; objects that omitted it would read a key other than the one stored",
                            f.default, n.default
                        ),
                    );
                }
            }
        }
        // Indexes are matched by path ids (names may change, ids may not).
        let ids = |ix: &IndexDef| -> Vec<(u16, u8)> {
            ix.path
                .iter()
                .map(|s| match s {
                    PathStep::Field { id, .. } => (*id, 0),
                    PathStep::UnionMember { id, member, .. } => (*id, *member),
                })
                .collect()
        };
        for i in &nc.indexes {
            match c.indexes.iter().find(|o| ids(o) == ids(i)) {
                None => cx.note(
                    format!("{}.{}", c.name, i.name),
                    format!(
                        "{} added (built in the background)",
                        if i.unique { "unique index" } else { "index" }
                    ),
                ),
                Some(o) if o.unique != i.unique => cx.note(
                    format!("{}.{}", c.name, i.name),
                    if i.unique {
                        "index became unique (fails to build if existing objects have duplicates)"
                            .into()
                    } else {
                        "index is no longer unique".into()
                    },
                ),
                _ => {}
            }
        }
        for o in c
            .indexes
            .iter()
            .filter(|o| !nc.indexes.iter().any(|i| ids(i) == ids(o)))
        {
            cx.note(format!("{}.{}", c.name, o.name), "index removed".into());
        }
    }
    for c in new
        .collections
        .iter()
        .filter(|n| !old.collections.iter().any(|o| o.name == n.name))
    {
        cx.note(c.name.clone(), "collection added".into());
    }
    if cx.errs.is_empty() {
        Ok(cx.notes)
    } else {
        Err(cx.errs)
    }
}
