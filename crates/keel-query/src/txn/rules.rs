//! Reference rules inside the write transaction: `on_delete`
//! (`cascade`, `nullify`, `restrict`) when an object others refer to is deleted,
//! and the `dangling: false` check when an object with references is written.
//!
//! A delete starts from its roots — the one object of `delete_key`, every
//! matching object of `delete_matching` — and runs in three steps inside one
//! SAVEPOINT, so a refused or failing delete leaves nothing of itself behind
//! (the transaction goes on):
//! 1. walk the referrers: a `cascade` referrer joins the set to delete (each
//!    object once, so chains and cycles end), a `restrict` or `nullify`
//!    referrer is noted;
//! 2. a `restrict` referrer that is not itself in the set refuses the whole
//!    delete with [`Error::Restricted`], naming every such referrer;
//! 3. the `nullify` referrers outside the set get the reference cleared, then
//!    every object of the set is deleted (each reaches subscribers as a delete).
//!
//! Restrict is checked once, over the whole set, as SQL checks `NO ACTION` at
//! the end of a statement: a referrer that goes with the set (matched, or
//! reached by cascade through other objects) does not restrict. So the roots of
//! one call are walked together, never one after another: a ring of objects
//! restricting each other's deletion goes as one `delete_matching`, while each
//! of them alone is refused.
//!
//! A to-one reference has an index column (the schema indexes it), so its
//! referrers are one indexed query; a to-many reference (a vector of keys) has
//! no column and its collection is scanned.

use std::collections::HashSet;

use keel_schema::{Expr, OnDelete, Value};

use super::transaction::Txn;
use crate::base::error::{Error, Result};
use crate::layout::links::Incoming;
use crate::layout::table::Coll;

/// The identity of an object in the walk: collection and key.
fn ident(c: &Coll, key: &[Value]) -> String {
    format!("{}\u{0}{key:?}", c.name)
}

/// A referrer noted in step 1.
struct Noted<'c> {
    /// The referred object (collection and key).
    to: (&'c Coll, Vec<Value>),
    /// The referring object.
    from: &'c Coll,
    key: Vec<Value>,
    link: &'c Incoming,
}

impl<'a> Txn<'a> {
    /// [`Txn::delete_key`] for a collection other objects may refer to.
    pub(super) fn delete_by_rules(&mut self, c: &'a Coll, key: Vec<Value>) -> Result<bool> {
        if self.find(c, "delete", &key)?.is_none() {
            return Ok(false);
        }
        self.delete_set(c, vec![key]).map(|n| n > 0)
    }

    /// Delete the objects `roots` of `c` (each of which exists) as one set, all
    /// or nothing: with the reference rules walked over the whole set when
    /// other objects may refer to `c`, plainly otherwise. Returns how many of
    /// `roots` were deleted (each once, however often it is named; the
    /// objects the cascade reaches besides are not counted).
    pub(super) fn delete_set(&mut self, c: &'a Coll, roots: Vec<Vec<Value>>) -> Result<usize> {
        self.conn
            .execute_batch("SAVEPOINT keel_delete_rules")
            .map_err(|e| Error::sqlite("delete", &c.name, e))?;
        let recorded = self.changes.len();
        let vectors = self.vectors.borrow().mark();
        let done = if c.links.incoming.is_empty() {
            self.delete_each(c, &roots)
        } else {
            self.cascade(c, roots)
        };
        let end = if done.is_ok() {
            "RELEASE keel_delete_rules"
        } else {
            self.changes.truncate(recorded);
            self.vectors.borrow_mut().rollback_to(&vectors);
            "ROLLBACK TO keel_delete_rules; RELEASE keel_delete_rules"
        };
        self.conn
            .execute_batch(end)
            .map_err(|e| Error::sqlite("delete", &c.name, e))?;
        done
    }

    /// Delete each of `keys` of `c`, a collection nothing refers to.
    fn delete_each(&mut self, c: &Coll, keys: &[Vec<Value>]) -> Result<usize> {
        let mut n = 0;
        for k in keys {
            if self.delete_plain(c, k)? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The three steps over the set grown from `roots`; returns how many
    /// distinct roots it deleted.
    fn cascade(&mut self, root: &'a Coll, roots: Vec<Vec<Value>>) -> Result<usize> {
        // 1. The set to delete, and the referrers the other rules apply to.
        let mut doomed: Vec<(&'a Coll, Vec<Value>)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut noted: Vec<Noted<'a>> = Vec::new();
        for key in roots {
            if seen.insert(ident(root, &key)) {
                doomed.push((root, key));
            }
        }
        let matched = doomed.len();
        let mut next = 0;
        while next < doomed.len() {
            let (c, k) = doomed[next].clone();
            next += 1;
            let Some(target_key) = k.first() else {
                continue;
            };
            for link in &c.links.incoming {
                let from = self.coll(&link.from, "delete")?;
                for rk in self.referrers(from, link, target_key)? {
                    match link.rule {
                        OnDelete::Cascade => {
                            if seen.insert(ident(from, &rk)) {
                                doomed.push((from, rk));
                            }
                        }
                        OnDelete::Restrict | OnDelete::Nullify => noted.push(Noted {
                            to: (c, k.clone()),
                            from,
                            key: rk,
                            link,
                        }),
                    }
                }
            }
        }
        // 2. Restrict: every referrer that stays refuses the delete.
        let blocked: Vec<&Noted<'a>> = noted
            .iter()
            .filter(|n| n.link.rule == OnDelete::Restrict && !seen.contains(&ident(n.from, &n.key)))
            .collect();
        if let Some(first) = blocked.first() {
            return Err(Error::Restricted {
                collection: first.to.0.name.clone(),
                key: first.to.1.clone(),
                referrers: blocked
                    .iter()
                    .map(|n| (n.from.name.clone(), n.link.field.clone(), n.key.clone()))
                    .collect(),
            });
        }
        // 3. Nullify the referrers that stay, then delete the set.
        for n in &noted {
            if n.link.rule == OnDelete::Nullify && !seen.contains(&ident(n.from, &n.key)) {
                self.clear_reference(n.from, &n.key, n.link, &n.to.1[0])?;
            }
        }
        for (c, k) in doomed {
            self.delete_plain(c, &k)?;
        }
        Ok(matched)
    }

    /// The keys of the objects of `from` whose reference `link` holds `target`.
    fn referrers(
        &self,
        from: &'a Coll,
        link: &Incoming,
        target: &Value,
    ) -> Result<Vec<Vec<Value>>> {
        let found = if link.to_many {
            // No index column for a vector: scan and read each vector.
            let t = self.inner.table(from)?;
            let mut out = Vec::new();
            for o in self.query(&from.name).all()? {
                let obj = t.open(&o.bytes).map_err(|source| Error::InvalidObject {
                    op: "delete",
                    collection: from.name.clone(),
                    source,
                })?;
                let has = obj
                    .elements(link.field_id)
                    .map_err(|source| Error::InvalidObject {
                        op: "delete",
                        collection: from.name.clone(),
                        source,
                    })?
                    .iter()
                    .any(|e| e == target);
                if has {
                    out.push(o);
                }
            }
            out
        } else {
            self.query(&from.name)
                .filter(Expr::eq(link.path.clone(), target.clone()))
                .all()?
        };
        found
            .into_iter()
            .map(|o| {
                if from.key.is_empty() {
                    Ok(vec![Value::Int(o.rowid)])
                } else {
                    self.key_of(from, "delete", &o.bytes)
                }
            })
            .collect()
    }

    /// Clear reference `link` (to `target`) of the object `key` of `from`: a
    /// to-one field becomes absent, a to-many vector loses the key.
    fn clear_reference(
        &mut self,
        from: &'a Coll,
        key: &[Value],
        link: &Incoming,
        target: &Value,
    ) -> Result<()> {
        let changed = if link.to_many {
            let Some(old) = self.find(from, "delete", key)? else {
                return Ok(());
            };
            self.inner
                .table(from)?
                .without_element(&old.bytes, link.field_id, target)
                .map_err(|e| Error::TypeMismatch {
                    op: "delete",
                    collection: from.name.clone(),
                    message: e.to_string(),
                })?
        } else {
            self.inner
                .table(from)?
                .encode_values(&[])
                .map_err(|e| Error::TypeMismatch {
                    op: "delete",
                    collection: from.name.clone(),
                    message: e.to_string(),
                })?
        };
        self.change_raw(from, "delete", key, &changed, &[link.field_id])
            .map(|_| ())
    }

    /// Refuse `bytes` for collection `c` if a `dangling: false` reference of it
    /// names an object that does not exist (in this transaction's view).
    pub(super) fn check_references(&self, c: &Coll, op: &'static str, bytes: &[u8]) -> Result<()> {
        if !c.links.strict() {
            return Ok(());
        }
        let t = self.inner.table(c)?;
        let obj = t.open(bytes).map_err(|source| Error::InvalidObject {
            op,
            collection: c.name.clone(),
            source,
        })?;
        for o in c.links.outgoing.iter().filter(|o| !o.dangling) {
            let keys = if o.to_many {
                let id = o.path.steps().first().map_or(0, |s| s.id());
                obj.elements(id).map_err(|source| Error::InvalidObject {
                    op,
                    collection: c.name.clone(),
                    source,
                })?
            } else {
                vec![obj.get(&o.path)]
            };
            let target = self.coll(&o.target, op)?;
            for k in keys.into_iter().filter(|k| !k.is_null()) {
                let key = target.check_key(op, std::slice::from_ref(&k))?;
                if !self.exists(target, op, &key)? {
                    return Err(Error::DanglingReference {
                        op,
                        collection: c.name.clone(),
                        field: o.field.clone(),
                        target: o.target.clone(),
                        key: vec![k],
                    });
                }
            }
        }
        Ok(())
    }
}
