//! Live k-NN: [`Nearest::subscribe`] keeps the `k` nearest objects of a nearest
//! query current as writes commit, at a cost that follows the changed rows.
//!
//! The subscription keeps the best `k + spares` candidates by
//! `(distance, rowid)` with their bytes — always the exact best `L` of the
//! matching objects for some `L` (a member that leaves shrinks `L`; nothing
//! outside can be better than the worst kept one). Per commit, each changed row
//! of the collection costs one filter evaluation and one distance: it leaves the
//! candidates, and comes back if it still matches and beats the worst candidate
//! (or the candidates hold every matching object). Only when fewer than `k`
//! candidates remain while other objects may exist does it scan again (the
//! exact scan of `vector/column.rs`, `k + spares` deep). Each delivery carries a
//! row-level diff by rowid against the previous one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::base::change::Change;
use crate::base::error::{Error, Result};
use crate::engine::Inner;
use crate::query::eval::Filter;
use crate::query::fetch::Spec;
use crate::query::fetch::{Query, Source, StoredObject};
use crate::query::nearest::{Nearest, Neighbor};
use crate::vector::column;
use crate::vector::column::{Scored, VectorField};

/// How many candidates past `k` a live k-NN keeps, so that members leaving do
/// not force a scan each time.
const SPARES: usize = 8;

/// One delivery of a live k-NN ([`Nearest::subscribe`]): the `k` nearest now,
/// best first, and what changed since the previous delivery, by rowid.
#[derive(Debug, Clone, PartialEq)]
pub struct NearestUpdate {
    /// The `k` nearest objects (fewer if fewer match), best first.
    pub neighbors: Vec<Neighbor<StoredObject>>,
    /// Rowids that entered the result.
    pub inserted: Vec<i64>,
    /// Rowids that left it.
    pub removed: Vec<i64>,
    /// Rowids that stayed but whose object or distance changed.
    pub updated: Vec<i64>,
}

/// What a live k-NN has cost so far ([`NearestSubscription::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NearestStats {
    /// Distances computed for changed rows.
    pub distances: u64,
    /// Full scans (the first one included).
    pub scans: u64,
    /// Updates delivered.
    pub deliveries: u64,
}

struct Live {
    collection: String,
    k: usize,
    field: VectorField,
    query: Vec<f32>,
    query_norm: f32,
    filter: Option<Filter>,
    /// The best candidates, ascending, with their bytes.
    cands: Vec<(Scored, Vec<u8>)>,
    /// The candidates hold every matching object.
    complete: bool,
    /// What was last delivered: rowid and bytes, best first.
    shown: Vec<(Scored, Vec<u8>)>,
    stats: NearestStats,
    sink: Box<dyn FnMut(NearestUpdate) + Send>,
    /// The query to scan with (`k + SPARES` deep).
    spec: Spec,
    path: keel_schema::FieldPath,
}

/// A live k-NN ([`Nearest::subscribe`]). Dropping it (or
/// [`NearestSubscription::cancel`]) ends it.
pub struct NearestSubscription {
    db: Weak<Inner>,
    id: u64,
    live: Arc<Mutex<Live>>,
}

impl std::fmt::Debug for NearestSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NearestSubscription")
            .field("id", &self.id)
            .finish()
    }
}

impl NearestSubscription {
    /// What it has cost so far.
    pub fn stats(&self) -> NearestStats {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).stats
    }

    /// End it: no delivery starts after this returns.
    pub fn cancel(self) {}
}

impl Drop for NearestSubscription {
    fn drop(&mut self) {
        if let Some(inner) = self.db.upgrade() {
            inner.remove_hook(self.id);
        }
    }
}

impl Live {
    /// Scan again, `k + SPARES` deep.
    fn rescan(&mut self, inner: &Arc<Inner>) -> Result<()> {
        let n = Nearest {
            q: Query {
                src: Source::Db(Arc::clone(inner)),
                spec: self.spec.clone(),
            },
            path: self.path.clone(),
            query: self.query.clone(),
            k: self.k + SPARES,
        };
        let mut cands = Vec::new();
        n.each("live nearest", &mut |s, bytes| {
            cands.push((s, bytes.to_vec()));
            Ok(())
        })?;
        self.complete = cands.len() < self.k + SPARES;
        self.cands = cands;
        self.stats.scans += 1;
        Ok(())
    }

    /// The distance of the object `bytes` if it is a candidate (matches the
    /// filter, has the vector).
    fn score(&mut self, rowid: i64, bytes: &[u8]) -> Option<Scored> {
        if let Some(f) = &self.filter {
            if !f.matches(bytes) {
                return None;
            }
        }
        let p = column::packed(&self.field, bytes)?;
        if p.len() != self.query.len() * 4 {
            return None;
        }
        let mut v = Vec::with_capacity(self.query.len());
        keel_schema::vector::unpack_into(p, &mut v)?;
        self.stats.distances += 1;
        Some(Scored {
            distance: self
                .field
                .spec
                .metric
                .distance(&self.query, self.query_norm, &v),
            rowid,
        })
    }

    /// Apply one commit's changes; deliver if the top `k` changed.
    fn apply(&mut self, inner: &Arc<Inner>, changes: &[Change]) {
        if changes.is_empty() {
            // A commit that was not recorded (it started before the hook was
            // registered): its changes are unknown, so scan again.
            if let Err(e) = self.rescan(inner) {
                tracing::warn!(error = %e, "live nearest: scan failed; keeping the last result");
                return;
            }
            self.deliver(false);
            return;
        }
        let mut touched = false;
        for ch in changes {
            if ch.collection != self.collection {
                continue;
            }
            touched = true;
            if let Some(i) = self.cands.iter().position(|(s, _)| s.rowid == ch.rowid) {
                self.cands.remove(i);
            }
            let Some(bytes) = &ch.new else { continue };
            let Some(s) = self.score(ch.rowid, bytes) else {
                continue;
            };
            let beats = self.complete || self.cands.last().is_some_and(|(w, _)| s < *w);
            if beats {
                let at = self.cands.partition_point(|(c, _)| *c < s);
                self.cands.insert(at, (s, bytes.clone()));
                if self.cands.len() > self.k + SPARES {
                    self.cands.pop();
                    self.complete = false;
                }
            }
        }
        if !touched {
            return;
        }
        if self.cands.len() < self.k && !self.complete {
            if let Err(e) = self.rescan(inner) {
                tracing::warn!(error = %e, "live nearest: scan failed; keeping the last result");
                return;
            }
        }
        self.deliver(false);
    }

    /// Hand the current top `k` to the sink with the diff against the last one
    /// (`first`: always, even when empty).
    fn deliver(&mut self, first: bool) {
        let now: Vec<(Scored, Vec<u8>)> = self.cands.iter().take(self.k).cloned().collect();
        let before: HashMap<i64, &(Scored, Vec<u8>)> =
            self.shown.iter().map(|e| (e.0.rowid, e)).collect();
        let after: HashMap<i64, &(Scored, Vec<u8>)> = now.iter().map(|e| (e.0.rowid, e)).collect();
        let inserted: Vec<i64> = now
            .iter()
            .map(|e| e.0.rowid)
            .filter(|r| !before.contains_key(r))
            .collect();
        let removed: Vec<i64> = self
            .shown
            .iter()
            .map(|e| e.0.rowid)
            .filter(|r| !after.contains_key(r))
            .collect();
        let updated: Vec<i64> = now
            .iter()
            .filter(|e| before.get(&e.0.rowid).is_some_and(|b| **b != **e))
            .map(|e| e.0.rowid)
            .collect();
        let order_same = self
            .shown
            .iter()
            .map(|e| e.0.rowid)
            .eq(now.iter().map(|e| e.0.rowid));
        if !first && inserted.is_empty() && removed.is_empty() && updated.is_empty() && order_same {
            return;
        }
        let neighbors = now
            .iter()
            .map(|(s, b)| Neighbor {
                object: StoredObject {
                    rowid: s.rowid,
                    bytes: b.clone(),
                },
                distance: s.distance,
                rowid: s.rowid,
            })
            .collect();
        self.shown = now;
        self.stats.deliveries += 1;
        (self.sink)(NearestUpdate {
            neighbors,
            inserted,
            removed,
            updated,
        });
    }
}

impl Nearest<'static> {
    /// Keep this query's result live: `f` gets the `k` nearest now, then a
    /// [`NearestUpdate`] (with a row-level diff) after every commit that changes
    /// them — an insert that beats the `k`-th distance, an update that moves a
    /// vector in or out or within, a delete of a member. Called on the writing
    /// thread after the commit, before the write's future resolves; another
    /// connection's commits reach it as [`Database::on_file_changes`](crate::db::database::Database::on_file_changes)
    /// describes (with `share_changes`, on the `keel-feed` thread). Per commit the
    /// work is one filter evaluation and one distance per changed row of the
    /// collection; a full scan runs only when a member leaves and no spare
    /// candidate remains (see [`NearestSubscription::stats`]).
    ///
    /// A query made on a database (not a snapshot or transaction) only.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_schema::Schema;
    /// use std::sync::{Arc, Mutex};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let schema = Schema::parse(
    ///     r#"table P { id: int (primary); e: [float] (vector: 2, metric: "l2"); } root_type P;"#, "p.fbs")?;
    /// let db = Database::open(dir.path().join("n.db"), schema.clone(), StoreOptions::default())?;
    /// let r = schema.reader("P")?;
    /// let last = Arc::new(Mutex::new(None));
    /// let l2 = last.clone();
    /// let sub = db.query("P").nearest(r.path("e")?, &[0.0, 0.0], 1)
    ///     .subscribe(move |u| *l2.lock().unwrap() = Some(u))?;
    /// let obj = r.encode_json(&serde_json::json!({"id": 1, "e": [1.0, 0.0]}))?;
    /// db.write(move |t| t.insert_bytes("P", obj).map(|_| ())).wait()?;
    /// assert_eq!(last.lock().unwrap().as_ref().unwrap().inserted, vec![1]);
    /// # drop(sub);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn subscribe(
        self,
        f: impl FnMut(NearestUpdate) + Send + 'static,
    ) -> Result<NearestSubscription> {
        let Source::Db(inner) = &self.q.src else {
            return Err(Error::TypeMismatch {
                op: "subscribe nearest",
                collection: self.q.spec.collection.clone(),
                message: "subscribe to a nearest query made on the database, not in a snapshot or transaction".into(),
            });
        };
        let inner = Arc::clone(inner);
        // Checks the query (field, vector, no order/limit) as a run would.
        let _ = self.scored("subscribe nearest")?;
        let c = inner.coll(&self.q.spec.collection, "subscribe nearest")?;
        let field = column::field_of(c, "subscribe nearest", &self.path)?.clone();
        let filter = match &self.q.spec.filter {
            Some(e) => Some(Filter::with_schema(Arc::clone(&inner.schema), &c.name, e)?),
            None => None,
        };
        let live = Arc::new(Mutex::new(Live {
            collection: c.name.clone(),
            k: self.k,
            field,
            query_norm: keel_schema::vector::norm(&self.query),
            query: self.query.clone(),
            filter,
            cands: Vec::new(),
            complete: false,
            shown: Vec::new(),
            stats: NearestStats::default(),
            sink: Box::new(f),
            spec: self.q.spec.clone(),
            path: self.path.clone(),
        }));
        // The hook first, then the scan under the lock: a commit between the
        // two is seen by both, and applying it twice changes nothing.
        let weak = Arc::downgrade(&inner);
        let l2 = Arc::clone(&live);
        // Other connections' commits too: a catch-up's rows carry the current
        // bytes, which is all `apply` reads.
        let id = inner.add_hook(
            Arc::new(move |changes: &[Change]| {
                if let Some(inner) = weak.upgrade() {
                    l2.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .apply(&inner, changes);
                }
            }),
            true,
        );
        let sub = NearestSubscription {
            db: Arc::downgrade(&inner),
            id,
            live,
        };
        {
            let mut l = sub.live.lock().unwrap_or_else(|p| p.into_inner());
            l.rescan(&inner)?;
            l.deliver(true);
        }
        Ok(sub)
    }
}
