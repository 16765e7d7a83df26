//! Every live list across a relation of one database, behind one change hook,
//! indexed so that a commit visits only the lists it can change.
//!
//! The model: a list shows some objects of its own collection `R` (those its
//! filter matches) with the objects of the referenced collection `T` their
//! keys name. A commit can change it in two ways only — a change of an `R`
//! whose old or new version the filter matches, or a change of a `T` whose
//! key some matching `R` holds — so the registry keeps two indexes:
//!
//! * **by filter**, per `R` collection, as the subscription hub does for plain
//!   queries: lists whose filter has a top-level `field == v` / `field IN (…)`
//!   conjunct under those values, lists with `<`, `<=`, `>`, `>=` conjuncts on
//!   one field in an interval-stabbing table over it, the rest in a scan list.
//!   A changed `R` is looked up with its old and new values; each list found
//!   is confirmed by evaluating its filter on those bytes (in memory).
//! * **by referenced key**, per `T` collection: key → the lists whose
//!   matching objects hold it (dangling keys included: the object may appear).
//!   Each list hands its keys over after every read.
//!
//! So a write no list shows, before or after, costs a lookup per changed object
//! and visits no list, whatever the number of lists. A commit whose changes
//! were not recorded (an empty slice) visits every list, and so does a change
//! of an `R` whose old version is unknown (another process's commit). A list
//! whose first read is under way is visited by every commit and judges it
//! itself, so nothing between its registration and its first delivery is lost.
//!
//! The registry lives in the database's `Inner` (created with the first list);
//! its hook is registered while it holds a list. Lists are called outside its
//! lock, in registration order.

use std::any::Any;
use std::cmp::Ordering as Cmp;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use keel_schema::{CmpOp, Expr, FieldPath, ResolvedPath, Schema, Value};

use crate::base::change::{Change, ChangeOp};
use crate::base::fx::{FxMap, FxSet};
use crate::base::ref_keys::K;
use crate::base::sql_value::{order_cmp, SqlValue};
use crate::db::database::{ChangeHook, Database};
use crate::engine::Inner;
use crate::query::eval::Filter;
use crate::subscribe::hub::{hkey, HKey};

/// What the registry found a list's part in a commit to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    /// Only objects it names changed: update them in place (or read again, if
    /// the list's order or filter goes through them).
    Referenced,
    /// An object it may show changed, or the changes are unknown: read again.
    Reread,
    /// Its first read was under way: look at the changes itself.
    Judge,
}

/// A live list as the registry calls it.
pub(crate) trait Listed: Send + Sync {
    /// Apply one commit's `changes`, as `verdict` says.
    fn commit(&self, registry: &Registry, changes: &[Change], verdict: Verdict);
}

/// A bound of a range: value and whether it is included.
type Bound = Option<(Value, bool)>;

/// Where a list sits in its collection's filter index.
enum Placement {
    /// Under these values of the equality index on a field.
    Eq(usize, Vec<HKey>),
    /// In the range index on a field.
    Range(usize),
    /// Checked against every change of the collection.
    Scan,
}

struct EqIndex {
    path: FieldPath,
    resolved: ResolvedPath,
    map: HashMap<HKey, Vec<u64>>,
}

struct RangeIndex {
    path: FieldPath,
    resolved: ResolvedPath,
    lists: Vec<(u64, Bound, Bound)>,
    built: Option<Stabbing>,
}

/// Interval stabbing: sorted distinct bound values and the lists covering
/// each elementary segment (even `2i`: strictly between `points[i-1]` and
/// `points[i]`; odd `2i+1`: exactly `points[i]`).
struct Stabbing {
    points: Vec<Value>,
    segs: Vec<Vec<u64>>,
}

/// Past this many (segment, list) pairs the table is not built: every list
/// of the index is a candidate.
const MAX_COVERAGE: usize = 1 << 22;

fn cmp(a: &Value, b: &Value) -> Cmp {
    order_cmp(SqlValue::from_value(a), SqlValue::from_value(b))
}

impl RangeIndex {
    fn stab(&mut self, v: &Value) -> Vec<u64> {
        if SqlValue::from_value(v) == SqlValue::Null {
            return Vec::new(); // NULL satisfies no comparison
        }
        if self.built.is_none() {
            self.built = Some(self.build());
        }
        let Some(s) = &self.built else {
            return Vec::new();
        };
        if s.segs.is_empty() {
            return self.lists.iter().map(|l| l.0).collect();
        }
        match s.points.binary_search_by(|p| cmp(p, v)) {
            Ok(i) => s.segs[2 * i + 1].clone(),
            Err(i) => s.segs[2 * i].clone(),
        }
    }

    fn build(&self) -> Stabbing {
        let mut points: Vec<Value> = self
            .lists
            .iter()
            .flat_map(|(_, lo, hi)| [lo, hi])
            .filter_map(|b| b.as_ref().map(|(v, _)| v.clone()))
            .collect();
        points.sort_by(cmp);
        points.dedup_by(|a, b| cmp(a, b) == Cmp::Equal);
        let pos = |v: &Value| points.binary_search_by(|p| cmp(p, v)).unwrap_or(0);
        let last = 2 * points.len();
        let spans: Vec<(u64, usize, usize)> = self
            .lists
            .iter()
            .map(|(id, lo, hi)| {
                let start = match lo {
                    None => 0,
                    Some((v, true)) => 2 * pos(v) + 1,
                    Some((v, false)) => 2 * pos(v) + 2,
                };
                let end = match hi {
                    None => last,
                    Some((v, true)) => 2 * pos(v) + 1,
                    Some((v, false)) => 2 * pos(v),
                };
                (*id, start, end)
            })
            .collect();
        let coverage: usize = spans
            .iter()
            .map(|(_, s, e)| (e + 1).saturating_sub(*s))
            .sum();
        if coverage > MAX_COVERAGE {
            return Stabbing {
                points,
                segs: Vec::new(),
            };
        }
        let mut segs = vec![Vec::new(); last + 1];
        for (id, start, end) in spans {
            for seg in segs.iter_mut().take(end + 1).skip(start) {
                seg.push(id);
            }
        }
        Stabbing { points, segs }
    }
}

/// The lists over one `R` collection, by filter.
struct CollIndex {
    /// The collection's table, for reading changed objects' fields.
    table: usize,
    eq: Vec<EqIndex>,
    ranges: Vec<RangeIndex>,
    scan: Vec<u64>,
    /// Every list over the collection.
    all: Vec<u64>,
}

/// One registered list.
struct Entry {
    list: Arc<dyn Listed>,
    coll: String,
    target: String,
    filter: Option<Filter>,
    placement: Placement,
    /// The referenced keys it is found under.
    keys: FxSet<K>,
}

#[derive(Default)]
struct Lists {
    next: u64,
    entries: FxMap<u64, Entry>,
    colls: HashMap<String, CollIndex>,
    /// Per referenced collection: key → the lists found under it.
    keys: HashMap<String, FxMap<K, Vec<u64>>>,
    /// The lists whose first read is under way.
    pending: FxSet<u64>,
    /// The hook and its generation: a removed hook still running once must
    /// not dispatch beside its successor.
    hook: Option<ChangeHook>,
    generation: u64,
}

/// The live lists of one database (see the module docs).
pub(crate) struct Registry {
    inner: Weak<Inner>,
    schema: Arc<Schema>,
    lists: Mutex<Lists>,
}

fn conjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::And(a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        e => out.push(e),
    }
}

/// The equality a filter's conjuncts pin a field to, if any: the field and
/// its values.
fn equality<'e>(list: &[&'e Expr]) -> Option<(&'e FieldPath, Vec<HKey>)> {
    list.iter().find_map(|e| match e {
        Expr::Cmp {
            path,
            op: CmpOp::Eq,
            value,
        } => hkey(SqlValue::from_value(value)).map(|k| (path, vec![k])),
        Expr::In { path, values } => {
            let mut ks: Vec<HKey> = Vec::new();
            for k in values.iter().filter_map(|v| hkey(SqlValue::from_value(v))) {
                if !ks.contains(&k) {
                    ks.push(k);
                }
            }
            Some((path, ks))
        }
        _ => None,
    })
}

/// The interval a filter's `<`, `<=`, `>`, `>=` conjuncts keep the first
/// field compared so to, if any.
fn range<'e>(list: &[&'e Expr]) -> Option<(&'e FieldPath, Bound, Bound)> {
    let path = list.iter().find_map(|e| match e {
        Expr::Cmp {
            path,
            op: CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge,
            ..
        } => Some(path),
        _ => None,
    })?;
    let (mut lo, mut hi): (Bound, Bound) = (None, None);
    for e in list {
        let Expr::Cmp { path: p, op, value } = e else {
            continue;
        };
        if p != path || matches!(op, CmpOp::Ne) {
            continue;
        }
        if SqlValue::from_value(value) == SqlValue::Null {
            return None; // never matches: leave it to the scan
        }
        let v = value.clone();
        if matches!(op, CmpOp::Gt | CmpOp::Ge | CmpOp::Eq) {
            let incl = !matches!(op, CmpOp::Gt);
            lo = Some(match lo {
                Some((b, bi)) => match cmp(&v, &b) {
                    Cmp::Greater => (v.clone(), incl),
                    Cmp::Equal => (b, bi && incl),
                    Cmp::Less => (b, bi),
                },
                None => (v.clone(), incl),
            });
        }
        if matches!(op, CmpOp::Lt | CmpOp::Le | CmpOp::Eq) {
            let incl = !matches!(op, CmpOp::Lt);
            hi = Some(match hi {
                Some((b, bi)) => match cmp(&v, &b) {
                    Cmp::Less => (v, incl),
                    Cmp::Equal => (b, bi && incl),
                    Cmp::Greater => (b, bi),
                },
                None => (v, incl),
            });
        }
    }
    Some((path, lo, hi))
}

impl CollIndex {
    /// Put list `id` with `filter` in the index.
    fn place(&mut self, schema: &Schema, id: u64, filter: Option<&Expr>) -> Placement {
        self.all.push(id);
        let Some(f) = filter else {
            self.scan.push(id);
            return Placement::Scan;
        };
        let Some(t) = schema.table_reader(self.table) else {
            self.scan.push(id);
            return Placement::Scan;
        };
        let mut list = Vec::new();
        conjuncts(f, &mut list);
        if let Some((path, keys)) = equality(&list) {
            let at = match self.eq.iter().position(|x| x.path == *path) {
                Some(i) => Some(i),
                None => t.resolve(path).ok().map(|resolved| {
                    self.eq.push(EqIndex {
                        path: path.clone(),
                        resolved,
                        map: HashMap::new(),
                    });
                    self.eq.len() - 1
                }),
            };
            if let Some(i) = at {
                for k in &keys {
                    self.eq[i].map.entry(k.clone()).or_default().push(id);
                }
                return Placement::Eq(i, keys);
            }
        }
        if let Some((path, lo, hi)) = range(&list) {
            let at = match self.ranges.iter().position(|r| r.path == *path) {
                Some(i) => Some(i),
                None => t.resolve(path).ok().map(|resolved| {
                    self.ranges.push(RangeIndex {
                        path: path.clone(),
                        resolved,
                        lists: Vec::new(),
                        built: None,
                    });
                    self.ranges.len() - 1
                }),
            };
            if let Some(i) = at {
                self.ranges[i].lists.push((id, lo, hi));
                self.ranges[i].built = None;
                return Placement::Range(i);
            }
        }
        self.scan.push(id);
        Placement::Scan
    }

    fn unplace(&mut self, id: u64, placement: &Placement) {
        self.all.retain(|x| *x != id);
        match placement {
            Placement::Eq(i, keys) => {
                for k in keys {
                    if let Some(v) = self.eq[*i].map.get_mut(k) {
                        v.retain(|x| *x != id);
                        if v.is_empty() {
                            self.eq[*i].map.remove(k);
                        }
                    }
                }
            }
            Placement::Range(i) => {
                self.ranges[*i].lists.retain(|l| l.0 != id);
                self.ranges[*i].built = None;
            }
            Placement::Scan => self.scan.retain(|x| *x != id),
        }
    }

    /// The lists whose filter index holds the object `bytes` (candidates:
    /// each is confirmed by its filter after). An object that does not open
    /// makes every list a candidate.
    fn candidates(&mut self, schema: &Schema, bytes: &[u8], out: &mut Vec<u64>) {
        let Some(t) = schema.table_reader(self.table) else {
            out.extend_from_slice(&self.all);
            return;
        };
        let Ok(obj) = t.open(bytes) else {
            out.extend_from_slice(&self.all);
            return;
        };
        for e in &self.eq {
            if e.map.is_empty() {
                continue;
            }
            let v = obj.get_resolved(&e.resolved);
            if let Some(ids) = hkey(SqlValue::from_value(&v)).and_then(|k| e.map.get(&k)) {
                out.extend_from_slice(ids);
            }
        }
        for r in &mut self.ranges {
            if r.lists.is_empty() {
                continue;
            }
            let v = obj.get_resolved(&r.resolved);
            out.extend(r.stab(&v));
        }
        out.extend_from_slice(&self.scan);
    }
}

/// Whether `filter` holds for `bytes` (SQL's: only true); no filter holds for all.
fn holds(filter: Option<&Filter>, bytes: &[u8]) -> bool {
    filter.is_none_or(|f| f.eval_bytes(bytes) == Some(true))
}

impl Registry {
    /// The registry of `inner`'s database, made with its first list.
    pub(crate) fn of(inner: &Arc<Inner>) -> Arc<Registry> {
        let any: Arc<dyn Any + Send + Sync> = Arc::clone(inner.live_lists.get_or_init(|| {
            Arc::new(Registry {
                inner: Arc::downgrade(inner),
                schema: Arc::clone(&inner.schema),
                lists: Mutex::new(Lists::default()),
            })
        }));
        any.downcast::<Registry>()
            .unwrap_or_else(|_| unreachable!("the live-list slot holds a Registry"))
    }

    fn lock(&self) -> MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register `list` over collection `coll` (filter `filter`, compiled as
    /// `compiled`), naming objects of `target`, as pending: every commit
    /// visits it until [`settled`](Self::settled). Returns its id.
    pub(crate) fn add(
        self: &Arc<Self>,
        make: impl FnOnce(u64) -> Arc<dyn Listed>,
        coll: &str,
        table: usize,
        target: &str,
        filter: Option<&Expr>,
        compiled: Option<Filter>,
    ) -> u64 {
        let mut l = self.lock();
        let id = l.next;
        l.next += 1;
        let list = make(id);
        let placement = l
            .colls
            .entry(coll.to_owned())
            .or_insert_with(|| CollIndex {
                table,
                eq: Vec::new(),
                ranges: Vec::new(),
                scan: Vec::new(),
                all: Vec::new(),
            })
            .place(&self.schema, id, filter);
        l.entries.insert(
            id,
            Entry {
                list,
                coll: coll.to_owned(),
                target: target.to_owned(),
                filter: compiled,
                placement,
                keys: FxSet::default(),
            },
        );
        l.pending.insert(id);
        if l.hook.is_none() {
            if let Some(inner) = self.inner.upgrade() {
                l.generation += 1;
                let generation = l.generation;
                let me = Arc::clone(self);
                l.hook = Some(
                    Database::from_inner(inner)
                        .on_file_changes(move |changes| me.dispatch(generation, changes)),
                );
            }
        }
        id
    }

    /// List `id`'s first read is done: from now on it is found by `keys`.
    pub(crate) fn settled(&self, id: u64, keys: &std::collections::HashSet<K>) {
        let mut l = self.lock();
        let l = &mut *l;
        let Some(e) = l.entries.get_mut(&id) else {
            return;
        };
        l.pending.remove(&id);
        let by = l.keys.entry(e.target.clone()).or_default();
        for k in keys {
            if e.keys.insert(k.clone()) {
                by.entry(k.clone()).or_default().push(id);
            }
        }
    }

    /// List `id` read itself again and now holds `keys`.
    pub(crate) fn rekey(&self, id: u64, keys: &std::collections::HashSet<K>) {
        let mut l = self.lock();
        let l = &mut *l;
        let Some(e) = l.entries.get_mut(&id) else {
            return;
        };
        let by = l.keys.entry(e.target.clone()).or_default();
        e.keys.retain(|k| {
            if keys.contains(k) {
                return true;
            }
            if let Some(v) = by.get_mut(k) {
                v.retain(|x| *x != id);
                if v.is_empty() {
                    by.remove(k);
                }
            }
            false
        });
        for k in keys {
            if e.keys.insert(k.clone()) {
                by.entry(k.clone()).or_default().push(id);
            }
        }
    }

    /// Take list `id` out; the last list out removes the hook.
    pub(crate) fn remove(&self, id: u64) {
        let hook = {
            let mut l = self.lock();
            let l = &mut *l;
            let Some(e) = l.entries.remove(&id) else {
                return;
            };
            l.pending.remove(&id);
            if let Some(ci) = l.colls.get_mut(&e.coll) {
                ci.unplace(id, &e.placement);
                if ci.all.is_empty() {
                    l.colls.remove(&e.coll);
                }
            }
            if let Some(by) = l.keys.get_mut(&e.target) {
                for k in &e.keys {
                    if let Some(v) = by.get_mut(k) {
                        v.retain(|x| *x != id);
                        if v.is_empty() {
                            by.remove(k);
                        }
                    }
                }
            }
            if l.entries.is_empty() {
                l.hook.take()
            } else {
                None
            }
        };
        // Outside the lock: nothing here waits, but a hook is the engine's.
        if let Some(h) = hook {
            h.remove();
        }
    }

    /// The hook: find the lists `changes` can change, then call each.
    fn dispatch(&self, generation: u64, changes: &[Change]) {
        let visits: Vec<(u64, Arc<dyn Listed>, Verdict)> = {
            let mut l = self.lock();
            if l.generation != generation {
                return;
            }
            let l = &mut *l;
            let mut found: FxMap<u64, Verdict> = FxMap::default();
            let mark = |found: &mut FxMap<u64, Verdict>, id: u64, v: Verdict| {
                let e = found.entry(id).or_insert(v);
                *e = (*e).max(v);
            };
            if changes.is_empty() {
                for id in l.entries.keys() {
                    mark(&mut found, *id, Verdict::Reread);
                }
            }
            let mut candidates = Vec::new();
            for c in changes {
                if let Some(ci) = l.colls.get_mut(&c.collection) {
                    if c.op != ChangeOp::Insert && c.old.is_none() {
                        // Another process's change: its old version is unknown.
                        for id in &ci.all {
                            mark(&mut found, *id, Verdict::Reread);
                        }
                    } else {
                        for b in [&c.old, &c.new].into_iter().flatten() {
                            candidates.clear();
                            ci.candidates(&self.schema, b, &mut candidates);
                            for id in &candidates {
                                let shows = l
                                    .entries
                                    .get(id)
                                    .is_some_and(|e| holds(e.filter.as_ref(), b));
                                if shows {
                                    mark(&mut found, *id, Verdict::Reread);
                                }
                            }
                        }
                    }
                }
                if let (Some(by), Some(k)) = (l.keys.get(&c.collection), c.key.first()) {
                    if let Some(ids) = by.get(&K::of(k)) {
                        for id in ids {
                            mark(&mut found, *id, Verdict::Referenced);
                        }
                    }
                }
            }
            for id in &l.pending {
                found.insert(*id, Verdict::Judge);
            }
            let mut v: Vec<(u64, Arc<dyn Listed>, Verdict)> = found
                .into_iter()
                .filter_map(|(id, v)| l.entries.get(&id).map(|e| (id, Arc::clone(&e.list), v)))
                .collect();
            v.sort_unstable_by_key(|x| x.0);
            v
        };
        for (_, list, verdict) in visits {
            list.commit(self, changes, verdict);
        }
    }
}
