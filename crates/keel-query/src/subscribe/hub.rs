//! The hub: every live subscription, indexed, updated in memory after each commit.
//!
//! Per collection it keeps three indexes of query subscriptions and one of object
//! subscriptions:
//!
//! * **objects** — primary key → object subscriptions;
//! * **equality** — for each field used in a top-level `field == v` / `field IN (…)`
//!   conjunct: value → query subscriptions (primary key preferred);
//! * **ranges** — for each field used in top-level `<`, `<=`, `>`, `>=` conjuncts: an
//!   interval-stabbing table (sorted distinct bounds, each elementary segment listing
//!   the subscriptions covering it), rebuilt lazily after subscriptions change;
//! * **scan** — everything else, checked against every changed object.
//!
//! A changed object is looked up with its old and new values, so a subscription is
//! visited only if the object matched it before or matches it now.

use std::cmp::Ordering as Cmp;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use keel_schema::{CmpOp, Expr, FieldPath, Object, ResolvedPath, Schema, SortKey, Value};

use super::delivery::{lock, Shared};
use super::diff::Diff;
use super::indices::Indices;
use super::update::{ObjectEvent, Objects, QueryUpdate};
use crate::base::change::Change;
use crate::base::error::{Error, Result};
use crate::base::fx::Fx;
use crate::base::fx::{FxMap, FxSet};
use crate::base::sql_value::{order_cmp, SqlValue};
use crate::engine::Inner;
use crate::query::eval;
use crate::query::eval::{Filter, Order, RowKey};
use crate::query::fetch::{Query, Source, Spec, StoredObject};
use crate::watch::Demand;

pub(crate) type Obj = Arc<StoredObject>;

/// A value as a hash key, normalised so that values SQL's `=` calls equal hash
/// equal (`2 = 2.0`, `true = 1`). `NULL` has no key (it equals nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HKey {
    Int(i64),
    Float(u64),
    Text(String),
    Blob(Vec<u8>),
}

/// [`HKey`] borrowed: what a changed row's value is looked up with before
/// anything is copied.
#[derive(Hash, PartialEq, Clone, Copy)]
enum HKeyRef<'a> {
    Int(i64),
    Float(u64),
    Text(&'a str),
    Blob(&'a [u8]),
}

fn hkey_ref(v: SqlValue<'_>) -> Option<HKeyRef<'_>> {
    Some(match v {
        SqlValue::Null => return None,
        SqlValue::Int(i) => HKeyRef::Int(i),
        SqlValue::Float(f) => {
            if f.fract() == 0.0
                && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f)
            {
                HKeyRef::Int(f as i64)
            } else {
                HKeyRef::Float(f.to_bits())
            }
        }
        SqlValue::Text(s) => HKeyRef::Text(s),
        SqlValue::Blob(b) => HKeyRef::Blob(b),
    })
}

impl HKeyRef<'_> {
    fn owned(&self) -> HKey {
        match *self {
            HKeyRef::Int(i) => HKey::Int(i),
            HKeyRef::Float(f) => HKey::Float(f),
            HKeyRef::Text(s) => HKey::Text(s.to_owned()),
            HKeyRef::Blob(b) => HKey::Blob(b.to_vec()),
        }
    }

    /// A hash of the value, equal for a key and its owned form.
    fn prehash(&self) -> u64 {
        std::hash::BuildHasherDefault::<Fx>::default().hash_one(self)
    }
}

impl HKey {
    fn as_ref(&self) -> HKeyRef<'_> {
        match self {
            HKey::Int(i) => HKeyRef::Int(*i),
            HKey::Float(f) => HKeyRef::Float(*f),
            HKey::Text(s) => HKeyRef::Text(s),
            HKey::Blob(b) => HKeyRef::Blob(b),
        }
    }
}

/// A key as the hash tables see it, owned or borrowed: an [`HKey`] map is probed
/// with a borrowed [`HKeyRef`], so a lookup copies no text.
trait AsKeyRef {
    fn key_ref(&self) -> HKeyRef<'_>;
}

impl AsKeyRef for HKey {
    fn key_ref(&self) -> HKeyRef<'_> {
        self.as_ref()
    }
}

impl AsKeyRef for HKeyRef<'_> {
    fn key_ref(&self) -> HKeyRef<'_> {
        *self
    }
}

// Owned and borrowed keys hash and compare through the same `HKeyRef`, as
// `Borrow` requires.
impl std::hash::Hash for HKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_ref().hash(h)
    }
}

impl<'a> std::borrow::Borrow<dyn AsKeyRef + 'a> for HKey {
    fn borrow(&self) -> &(dyn AsKeyRef + 'a) {
        self
    }
}

impl std::hash::Hash for dyn AsKeyRef + '_ {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.key_ref().hash(h)
    }
}

impl PartialEq for dyn AsKeyRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key_ref() == other.key_ref()
    }
}

impl Eq for dyn AsKeyRef + '_ {}

pub(crate) fn hkey(v: SqlValue<'_>) -> Option<HKey> {
    hkey_ref(v).map(|k| k.owned())
}

pub(crate) fn hkeys(vs: &[Value]) -> Vec<HKey> {
    vs.iter()
        .map(|v| hkey(SqlValue::from_value(v)).unwrap_or(HKey::Int(i64::MIN)))
        .collect()
}

/// One entry of a query's stored prefix. Sort keys are shared between the
/// subscriptions that order the same way.
#[derive(Clone)]
struct Entry {
    /// The object's rowid (also in `key`), kept inline so that matching a stored
    /// row against a commit's changes and diffing windows read no shared memory.
    rowid: i64,
    /// `key.head`, inline: placing a row by binary search compares heads, and
    /// reading each probed row's from its shared key was a cache miss per probe
    /// (a third of a one-object commit's matching time).
    head: u64,
    key: Arc<Keyed>,
    obj: Obj,
}

impl Entry {
    fn new(rowid: i64, key: Arc<Keyed>, obj: Obj) -> Entry {
        Entry {
            rowid,
            head: key.head,
            key,
            obj,
        }
    }
}

/// A row's sort key, with its first value beside it when that is an integer or
/// NULL, in an order-keeping form (the head). Each [`Entry`] copies the head, so
/// placing a row by binary search compares integers held in the rows themselves
/// and reads a full key only when two heads are equal.
struct Keyed {
    /// The low bit says the head is usable; the other bits are the first sort
    /// value's order-keeping encoding (NULL below every integer). Dropping the
    /// value's lowest bit makes neighbours (and NULL and `i64::MIN`) equal heads,
    /// which [`cmp_entries`] settles on the full keys.
    head: u64,
    key: RowKey,
}

impl Keyed {
    fn new(key: RowKey) -> Arc<Keyed> {
        let head = match key.values.first() {
            Some(Value::Int(i)) => ((*i as u64) ^ (1 << 63)) | 1,
            Some(Value::Null) => 1,
            _ => 0,
        };
        Arc::new(Keyed { head, key })
    }
}

/// `order` between two stored entries: on their heads when both are usable and
/// differ, else on the full sort keys.
#[inline]
fn cmp_entries(order: &Order, a: &Entry, b: &Entry) -> Cmp {
    cmp_to_entry(order, &a.key, b)
}

/// [`cmp_entries`] for a row given by its sort key.
#[inline]
fn cmp_to_entry(order: &Order, a: &Keyed, b: &Entry) -> Cmp {
    match order.first_descending() {
        Some(desc) if a.head & b.head & 1 == 1 && a.head != b.head => {
            let o = a.head.cmp(&b.head);
            if desc {
                o.reverse()
            } else {
                o
            }
        }
        _ => order.compare(&a.key, &b.key.key),
    }
}

/// A changed row within one commit: rowid, first old bytes, last new bytes.
type Touch<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>);

/// An object subscription's key and its final (rowid, bytes) within one commit.
type FinalState<'a> = (Vec<HKey>, Option<(i64, &'a [u8])>);

/// A bound of a range: value and whether it is included.
type Bound = Option<(Value, bool)>;

/// How a query subscription is found from a changed object.
#[derive(Debug, Clone)]
enum Placement {
    /// Under these values of the collection's equality index; `true` when the
    /// filter is that equality (or `IN` list) alone, over text or integers:
    /// then being found under a value is matching, with no filter to evaluate.
    Eq(usize, Vec<HKey>, bool),
    /// In the collection's range index on one field.
    Range(usize),
    /// Checked against every change of the collection.
    Scan,
}

struct QuerySub {
    /// Every subscription to this query, by id: identical queries (the same
    /// query opened from several views) share one stored result, one update per
    /// commit and one diff; each gets its own delivery.
    sinks: Vec<(u64, Arc<Shared<QueryUpdate>>)>,
    spec: Spec,
    filter: Option<Filter>,
    order: usize,
    placement: Placement,
    /// The exact first `rows.len()` matching objects in order.
    rows: Vec<Entry>,
    /// The window of the last delivery, shared with the deliveries that hold it
    /// (edited in place by the next one when none does).
    shown: Objects,
    /// `rows` holds every matching object.
    complete: bool,
    /// Keep at most this many rows (offset + limit + slack); `None` without limit.
    cap: Option<usize>,
    /// Ordered by full-text relevance: see [`Compiled::ranked`].
    ranked: bool,
}

struct ObjSub {
    sink: Arc<Shared<ObjectEvent>>,
    key: Vec<HKey>,
    /// The checked key, to read the object again ([`Hub::resync`]).
    key_values: Vec<Value>,
    last: Option<Obj>,
}

struct EqIndex {
    path: FieldPath,
    resolved: ResolvedPath,
    /// Subscription ids by value, each with whether the index alone decides
    /// its filter (see [`Placement::Eq`]).
    map: HashMap<HKey, Vec<(u64, bool)>>,
    /// The field is the collection's (single-field) primary key.
    pk: bool,
    /// How many keys of `map` have each [`HKeyRef::prehash`]: a changed row's
    /// value that no subscription asks for is dismissed without copying it.
    pre: FxMap<u64, usize>,
}

impl EqIndex {
    fn insert(&mut self, k: &HKey, id: u64, exact: bool) {
        let ids = self.map.entry(k.clone()).or_default();
        if ids.is_empty() {
            *self.pre.entry(k.as_ref().prehash()).or_default() += 1;
        }
        ids.push((id, exact));
    }

    fn remove(&mut self, k: &HKey, id: u64) {
        if let Some(v) = self.map.get_mut(k) {
            v.retain(|x| x.0 != id);
            if v.is_empty() {
                self.map.remove(k);
                let h = k.as_ref().prehash();
                if let Some(n) = self.pre.get_mut(&h) {
                    *n -= 1;
                    if *n == 0 {
                        self.pre.remove(&h);
                    }
                }
            }
        }
    }

    /// Whether some subscription may be under the single-value `key` (no false
    /// negatives: [`EqIndex::get`] decides).
    fn may_hold(&self, key: &[Value]) -> bool {
        match key {
            [v] => hkey_ref(SqlValue::from_value(v))
                .is_some_and(|k| self.pre.contains_key(&k.prehash())),
            _ => false,
        }
    }

    fn get(&self, v: SqlValue<'_>) -> Option<&Vec<(u64, bool)>> {
        let k = hkey_ref(v)?;
        if !self.pre.contains_key(&k.prehash()) {
            return None;
        }
        self.map.get(&k as &dyn AsKeyRef)
    }
}

/// Interval stabbing over one field.
struct RangeIndex {
    path: FieldPath,
    resolved: ResolvedPath,
    /// (id, lo, hi, the filter is exactly this range)
    subs: Vec<(u64, Bound, Bound, bool)>,
    built: Option<Stabbing>,
}

struct Stabbing {
    /// Sorted distinct bound values.
    points: Vec<Value>,
    /// `2 * points.len() + 1` segments: even `2i` = strictly between `points[i-1]`
    /// and `points[i]`, odd `2i+1` = exactly `points[i]`. Each lists subscription
    /// ids in ascending order.
    segs: Vec<Vec<(u64, bool)>>,
    /// Too many (segment, subscription) pairs: every subscription is a candidate.
    all: Option<Vec<(u64, bool)>>,
    /// `points` as integers, when every bound is one (ranges over an integer
    /// field): an integer value is placed with a comparison per step and an array
    /// a quarter the size.
    ints: Option<Vec<i64>>,
}

const MAX_COVERAGE: usize = 8 << 20;

impl RangeIndex {
    fn build(&mut self) -> &Stabbing {
        if self.built.is_none() {
            let mut points: Vec<Value> = self
                .subs
                .iter()
                .flat_map(|(_, lo, hi, _)| [lo, hi])
                .filter_map(|b| b.as_ref().map(|(v, _)| v.clone()))
                .collect();
            let cmp =
                |a: &Value, b: &Value| order_cmp(SqlValue::from_value(a), SqlValue::from_value(b));
            points.sort_by(cmp);
            points.dedup_by(|a, b| cmp(a, b) == Cmp::Equal);
            let pos = |v: &Value| points.binary_search_by(|p| cmp(p, v)).unwrap_or(0);
            let last = 2 * points.len();
            let spans: Vec<(u64, bool, usize, usize)> = self
                .subs
                .iter()
                .map(|(id, lo, hi, exact)| {
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
                    (*id, *exact, start, end)
                })
                .collect();
            let coverage: usize = spans
                .iter()
                .map(|(_, _, s, e)| (e + 1).saturating_sub(*s))
                .sum();
            let mut segs = vec![Vec::new(); last + 1];
            let all = if coverage > MAX_COVERAGE {
                Some(self.subs.iter().map(|s| (s.0, false)).collect())
            } else {
                for (id, exact, start, end) in spans {
                    for seg in segs.iter_mut().take(end + 1).skip(start) {
                        seg.push((id, exact));
                    }
                }
                None
            };
            let ints = points
                .iter()
                .map(|p| match p {
                    Value::Int(i) => Some(*i),
                    _ => None,
                })
                .collect();
            self.built = Some(Stabbing {
                points,
                segs,
                all,
                ints,
            });
        }
        self.built.as_ref().expect("just built")
    }
}

impl Stabbing {
    fn lookup(&self, v: &Value) -> &[(u64, bool)] {
        if let Some(all) = &self.all {
            return all;
        }
        let x = SqlValue::from_value(v);
        if x == SqlValue::Null {
            return &[]; // NULL satisfies no comparison
        }
        let at = match (&self.ints, x) {
            (Some(ints), SqlValue::Int(i)) => ints.binary_search(&i),
            _ => self
                .points
                .binary_search_by(|p| order_cmp(SqlValue::from_value(p), x)),
        };
        match at {
            Ok(i) => &self.segs[2 * i + 1],
            Err(i) => &self.segs[2 * i],
        }
    }
}

trait OptionExt<T> {
    fn none_or(self, f: impl FnOnce(T) -> bool) -> bool;
}

impl<T> OptionExt<T> for Option<T> {
    fn none_or(self, f: impl FnOnce(T) -> bool) -> bool {
        match self {
            None => true,
            Some(t) => f(t),
        }
    }
}

#[derive(Default)]
struct CollSubs {
    objects: HashMap<Vec<HKey>, Vec<u64>>,
    object_subs: FxMap<u64, ObjSub>,
    queries: FxMap<u64, QuerySub>,
    /// A subscription id → the key in `queries` of the query it shares.
    alias: FxMap<u64, u64>,
    /// The keys in `queries` by [`spec_hash`]: a query opened again finds its live
    /// twin among these few instead of being compared with every open query.
    by_spec: FxMap<u64, Vec<u64>>,
    eq: Vec<EqIndex>,
    ranges: Vec<RangeIndex>,
    scan: Vec<u64>,
    /// Queries ordered by relevance ([`Compiled::ranked`]): each commit to the
    /// collection re-runs them, whatever it changed.
    ranked: Vec<u64>,
    /// Distinct orders of the subscriptions (sort keys are computed once per order).
    orders: Vec<(Vec<SortKey>, Order)>,
    /// The version of each row some subscription holds or held, by rowid:
    /// overlapping windows that read the same row share one object instead of
    /// a copy each ([`CollSubs::share`]).
    versions: FxMap<i64, std::sync::Weak<StoredObject>>,
    /// `versions` is swept of dropped versions when it grows past this.
    sweep_at: usize,
}

/// A hash of a query's spec, equal for equal specs: its `Debug` text, fed to the
/// hasher as it is written (a filter's values may be floats, which have no `Hash`;
/// two equal specs print alike, and the rare equal ones that do not, `0.0` and
/// `-0.0`, only miss sharing).
fn spec_hash(spec: &Spec) -> u64 {
    use std::hash::Hasher;
    struct Feed(Fx);
    impl std::fmt::Write for Feed {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.write(s.as_bytes());
            Ok(())
        }
    }
    let mut f = Feed(Fx::default());
    // Writing to `Feed` cannot fail.
    let _ = std::fmt::write(&mut f, format_args!("{spec:?}"));
    f.0.finish()
}

impl CollSubs {
    /// Let `rows`, just read for a subscription, share the objects other
    /// subscriptions already hold where the bytes are the same (1,000
    /// overlapping windows of 1,000 rows hold 1,000 distinct rows between them
    /// instead of a million copies), and remember the others'.
    fn share(&mut self, rows: &mut [Entry]) {
        for e in rows {
            match self
                .versions
                .get(&e.rowid)
                .and_then(std::sync::Weak::upgrade)
            {
                Some(held) if held.bytes == e.obj.bytes => e.obj = held,
                _ => {
                    self.versions.insert(e.rowid, Arc::downgrade(&e.obj));
                }
            }
        }
        self.sweep();
    }

    /// Remember the versions a commit made (`arcs`, by touch) for [`share`].
    ///
    /// [`share`]: CollSubs::share
    fn remember(&mut self, touches: &[Touch<'_>], arcs: &[Option<Obj>]) {
        for ((rowid, _, _), a) in touches.iter().zip(arcs) {
            if let Some(a) = a {
                self.versions.insert(*rowid, Arc::downgrade(a));
            }
        }
        self.sweep();
    }

    /// Forget versions no subscription holds any more, once their number has
    /// doubled since the last sweep (a sweep costs one pass).
    fn sweep(&mut self) {
        if self.versions.len() > self.sweep_at {
            self.versions.retain(|_, w| w.strong_count() > 0);
            self.sweep_at = (self.versions.len() * 2).max(1024);
        }
    }

    fn query_count(&self) -> usize {
        self.queries.values().map(|q| q.sinks.len()).sum()
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    colls: HashMap<String, CollSubs>,
    /// Buffers every commit reuses (see [`Scratch`]).
    scratch: Scratch,
}

/// Buffers that applying a commit to query subscriptions needs only while it
/// runs, kept between commits: a delivery then allocates only what it hands out
/// (its window and its diff), not its working copies too.
#[derive(Default)]
struct Scratch {
    /// The window before the commit as (rowid, object address, index).
    before: Vec<(i64, usize, usize)>,
    /// The window after the commit, the same way.
    after: Vec<(i64, usize, usize)>,
    /// The stored entries the commit replaced or removed (emptied after each use:
    /// it holds no object between commits).
    gone: Vec<Entry>,
    /// The lists matching a commit to its subscriptions builds.
    matching: Matching,
    /// The list of a commit's deliveries, given back empty after they were made
    /// (see [`Hub::deliver_all`]): at about ten deliveries of a few words each it
    /// is a large allocation, whose freeing made the allocator tidy its free lists
    /// at every commit.
    deliveries: Vec<Delivery>,
}

/// The lists [`Hub::queries`] builds while matching a commit to subscriptions,
/// kept between commits, empty: a commit that moves one object reaches about ten
/// subscriptions, and allocating (and growing) these per commit was a fifth of
/// its allocations.
#[derive(Default)]
struct Matching {
    /// Each reached subscription's touches.
    per_sub: FxMap<u64, Mine>,
    /// One touch's candidate subscriptions, with how each was found.
    cands: Vec<(u64, u8)>,
    /// The reached subscriptions, in id order.
    ids: Vec<u64>,
    /// The touches some subscription may add.
    wanted: Vec<bool>,
    /// The version each touch made, shared by every subscription.
    arcs: Vec<Option<Obj>>,
    /// Each reached subscription's new entries.
    updates: Vec<Edit>,
    /// Per range index, the changed object's old and new value.
    rv: Vec<[Value; 2]>,
    /// Per order, each touch's new sort key (if some subscription may add it) and
    /// its rank among them; empty until a subscription ordering that way needs
    /// them.
    keys: Vec<Vec<Option<Arc<Keyed>>>>,
    ranks: Vec<Vec<u32>>,
    /// The touches with a key, by key (to rank them).
    by_key: Vec<usize>,
    /// Emptied lists of new entries, for the next commit's `updates`: a commit
    /// that moves one object adds it to about five windows.
    spare_adds: Vec<Vec<Entry>>,
}

/// At most this many emptied lists of new entries are kept between commits.
const SPARE_ADDS: usize = 64;

/// Empty `v` (dropping what it holds), letting it go if a large commit grew it.
fn empty<T>(v: &mut Vec<T>) {
    v.clear();
    if v.capacity() > Scratch::KEEP {
        *v = Vec::new();
    }
}

impl Matching {
    /// Empty the lists matching built, all but the edits (which run after it),
    /// letting go of those a large commit grew.
    fn clear_matched(&mut self) {
        if self.per_sub.capacity() > Scratch::KEEP {
            self.per_sub = FxMap::default();
        }
        self.per_sub.clear();
        empty(&mut self.cands);
        empty(&mut self.ids);
        empty(&mut self.wanted);
        empty(&mut self.arcs);
        empty(&mut self.rv);
        empty(&mut self.by_key);
        for v in self.keys.iter_mut() {
            empty(v);
        }
        for v in self.ranks.iter_mut() {
            empty(v);
        }
    }
}

impl Scratch {
    /// Buffers that grew past this many entries (a commit that rewrote a large
    /// result) are let go after use instead of kept.
    const KEEP: usize = 4096;

    /// Empty the buffers, and let go of those a large commit grew.
    fn reset(&mut self) {
        empty(&mut self.gone);
        empty(&mut self.before);
        empty(&mut self.after);
    }
}

/// A delivery computed under the hub lock and made after releasing it.
enum Delivery {
    Query(Arc<Shared<QueryUpdate>>, QueryUpdate),
    Object(Arc<Shared<ObjectEvent>>, ObjectEvent),
}

/// The subscription hub of one database (see the module docs).
pub(crate) struct Hub {
    db: Weak<Inner>,
    schema: Arc<Schema>,
    state: Mutex<State>,
    seq: AtomicU64,
    /// Registered subscriptions (kept equal to the state's count).
    registered: AtomicUsize,
    /// Subscriptions being made (between "writes must record" and registration).
    adding: AtomicUsize,
}

/// Counts a subscription being made for as long as it lives.
struct Adding<'a>(&'a AtomicUsize);

impl<'a> Adding<'a> {
    fn new(n: &'a AtomicUsize) -> Adding<'a> {
        n.fetch_add(1, Ordering::AcqRel);
        Adding(n)
    }
}

impl Drop for Adding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A query compiled for the hub.
pub(crate) struct Compiled {
    spec: Spec,
    filter: Option<Filter>,
    order: Order,
    cap: Option<usize>,
    pub(crate) coll: String,
    table: usize,
    pk: Vec<FieldPath>,
    /// The filter pins the (single-field) primary key by equality to this value:
    /// the first read is a key lookup plus in-memory evaluation.
    pk_eq: Option<Value>,
    /// The order has a relevance key. bm25 scores depend on the whole index's
    /// statistics (document count, average length, each term's frequency), so a
    /// commit that touches any object of the collection can reorder every member:
    /// such a subscription re-runs its query (one FTS5 query) on each commit to
    /// the collection and diffs the result, instead of merging the changed rows.
    ranked: bool,
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

/// Read the stored prefix of a query (`cap` rows, or all) on `conn`.
fn read_prefix(
    inner: &Inner,
    conn: &rusqlite::Connection,
    spec: &Spec,
    order: &Order,
    cap: Option<usize>,
) -> Result<(Vec<Entry>, bool)> {
    let mut spec = spec.clone();
    spec.offset = 0;
    spec.limit = cap.map(|c| c as u64);
    let q = Query {
        src: Source::Conn(inner, conn, None),
        spec,
    };
    let rows = q.all()?;
    let complete = cap.none_or(|c| rows.len() < c);
    let rows = rows
        .into_iter()
        .map(|o| {
            Entry::new(
                o.rowid,
                Keyed::new(order.key(&o.bytes, o.rowid)),
                Arc::new(o),
            )
        })
        .collect();
    Ok((rows, complete))
}

/// The first read of a query whose filter pins the primary key: a key lookup and
/// the filter evaluated in memory (it agrees with SQL), instead of a SQL filter on
/// the `keel_field` expression.
fn read_by_key(
    inner: &Inner,
    conn: &rusqlite::Connection,
    q: &Compiled,
    v: &Value,
) -> Result<(Vec<Entry>, bool)> {
    let c = inner.coll(&q.coll, "subscribe")?;
    let Ok(key) = c.check_key("subscribe", std::slice::from_ref(v)) else {
        return read_prefix(inner, conn, &q.spec, &q.order, q.cap);
    };
    let o = inner.get_in(conn, c, "subscribe", &key, true)?;
    let rows = o
        .filter(|o| q.filter.as_ref().none_or(|f| f.matches(&o.bytes)))
        .map(|o| {
            Entry::new(
                o.rowid,
                Keyed::new(q.order.key(&o.bytes, o.rowid)),
                Arc::new(o),
            )
        })
        .into_iter()
        .collect();
    Ok((rows, true))
}

impl Compiled {
    pub(crate) fn new(inner: &Inner, spec: Spec) -> Result<Compiled> {
        let c = inner.coll(&spec.collection, "subscribe")?;
        let schema = Arc::clone(&inner.schema);
        let filter = match &spec.filter {
            Some(e) => Some(Filter::with_schema(Arc::clone(&schema), &c.name, e)?),
            None => None,
        };
        // Relevance keys rank in SQL only (see `ranked`); the in-memory order keeps
        // the others, which a ranked subscription never merges by.
        let ranked = spec.order.iter().any(SortKey::is_relevance);
        let in_memory: Vec<SortKey> = spec
            .order
            .iter()
            .filter(|k| !k.is_relevance())
            .cloned()
            .collect();
        let order = Order::with_schema(Arc::clone(&schema), &c.name, &in_memory)?;
        let cap = spec.limit.map(|l| {
            let l = usize::try_from(l).unwrap_or(usize::MAX);
            let o = usize::try_from(spec.offset).unwrap_or(usize::MAX);
            o.saturating_add(l).saturating_add((l / 4).clamp(4, 256))
        });
        let pk: Vec<FieldPath> = c.key.iter().map(|k| k.path.path().clone()).collect();
        let mut pk_eq = None;
        if let (Some(f), [pk]) = (&spec.filter, &pk[..]) {
            let mut list = Vec::new();
            conjuncts(f, &mut list);
            pk_eq = list.iter().find_map(|e| match e {
                Expr::Cmp {
                    path,
                    op: CmpOp::Eq,
                    value,
                } if path == pk && SqlValue::from_value(value) != SqlValue::Null => {
                    Some(value.clone())
                }
                _ => None,
            });
        }
        Ok(Compiled {
            ranked,
            pk_eq,
            spec,
            filter,
            order,
            cap,
            coll: c.name.clone(),
            table: c.table,
            pk,
        })
    }
}

fn window<'r>(spec: &Spec, rows: &'r [Entry]) -> &'r [Entry] {
    let start = usize::try_from(spec.offset)
        .unwrap_or(usize::MAX)
        .min(rows.len());
    let end = match spec.limit {
        Some(l) => start
            .saturating_add(usize::try_from(l).unwrap_or(usize::MAX))
            .min(rows.len()),
        None => rows.len(),
    };
    &rows[start..end]
}

fn objects(rows: &[Entry]) -> Vec<Obj> {
    rows.iter().map(|e| Arc::clone(&e.obj)).collect()
}

fn needed(spec: &Spec) -> usize {
    match spec.limit {
        Some(l) => usize::try_from(spec.offset.saturating_add(l)).unwrap_or(usize::MAX),
        None => usize::MAX,
    }
}

impl Hub {
    pub(crate) fn new(db: Weak<Inner>, schema: Arc<Schema>) -> Hub {
        Hub {
            db,
            schema,
            state: Mutex::new(State::default()),
            seq: AtomicU64::new(0),
            registered: AtomicUsize::new(0),
            adding: AtomicUsize::new(0),
        }
    }

    /// True while a subscription is live or being made: only then must writes
    /// record their changes (see `Inner::recording`).
    pub(crate) fn interested(&self) -> bool {
        self.registered.load(Ordering::Acquire) > 0 || self.adding.load(Ordering::Acquire) > 0
    }

    /// Bring `registered` up to date after the state changed.
    fn recount(&self, st: &State) {
        let n = st
            .colls
            .values()
            .map(|c| c.object_subs.len() + c.query_count())
            .sum();
        self.registered.store(n, Ordering::Release);
        if let Some(db) = self.db.upgrade() {
            db.watch.demand(Demand::Subscriptions, n > 0);
        }
    }

    /// A write closure committed without recording its changes while a subscription
    /// was being made or live: read every subscription's result again and deliver
    /// what differs. Runs on the writer thread after that commit, like
    /// [`Hub::on_commit`].
    pub(crate) fn resync(&self) {
        let Some(inner) = self.db.upgrade() else {
            return;
        };
        let mut out = Vec::new();
        {
            let mut st = lock(&self.state);
            self.seq.fetch_add(1, Ordering::AcqRel);
            for (name, cs) in st.colls.iter_mut() {
                let mut updates = Vec::with_capacity(cs.queries.len());
                for (id, q) in &cs.queries {
                    let order = &cs.orders[q.order].1;
                    match inner
                        .store
                        .read(|conn| read_prefix(&inner, conn, &q.spec, order, q.cap))
                    {
                        Ok((rows, complete)) => updates.push((*id, rows, complete)),
                        Err(e) => tracing::error!(error = %e, "subscription re-read failed"),
                    }
                }
                self.finish_queries(cs, updates, &mut out);
                let Ok(c) = inner.coll(name, "subscribe") else {
                    continue;
                };
                let ids: Vec<u64> = cs.object_subs.keys().copied().collect();
                for id in ids {
                    let Some(sub) = cs.object_subs.get_mut(&id) else {
                        continue;
                    };
                    let cur = match inner
                        .store
                        .read(|conn| inner.get_in(conn, c, "subscribe", &sub.key_values, true))
                    {
                        Ok(cur) => cur,
                        Err(e) => {
                            tracing::error!(error = %e, "subscription re-read failed");
                            continue;
                        }
                    };
                    match cur {
                        Some(o) => {
                            if sub.last.as_ref().is_some_and(|l| l.bytes == o.bytes) {
                                continue;
                            }
                            let o = Arc::new(o);
                            sub.last = Some(Arc::clone(&o));
                            out.push(Delivery::Object(
                                Arc::clone(&sub.sink),
                                ObjectEvent::Updated(o),
                            ));
                        }
                        None => {
                            out.push(Delivery::Object(
                                Arc::clone(&sub.sink),
                                ObjectEvent::Deleted,
                            ));
                            let key = sub.key.clone();
                            cs.object_subs.remove(&id);
                            if let Some(v) = cs.objects.get_mut(&key) {
                                v.retain(|x| *x != id);
                                if v.is_empty() {
                                    cs.objects.remove(&key);
                                }
                            }
                        }
                    }
                }
            }
            self.recount(&st);
        }
        self.deliver_all(out);
    }

    /// Make deliveries computed under the hub's lock, without it (callbacks may
    /// subscribe or unsubscribe), then give the emptied list back for the next
    /// commit, unless another thread holds the lock (it is then let go: the
    /// writer never waits for it) or a large commit grew it.
    fn deliver_all(&self, mut out: Vec<Delivery>) {
        for d in out.drain(..) {
            match d {
                Delivery::Query(s, u) => s.deliver(u, false),
                Delivery::Object(s, e) => {
                    let last = matches!(e, ObjectEvent::Deleted);
                    s.deliver(e, last)
                }
            }
        }
        empty(&mut out);
        if out.capacity() > 0 {
            if let Ok(mut st) = self.state.try_lock() {
                st.scratch.deliveries = out;
            }
        }
    }

    /// Number of commits (write closures with changes) the hub has processed.
    pub(crate) fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    fn closed(&self) -> Error {
        Error::Closed {
            op: "subscribe",
            path: std::path::PathBuf::new(),
        }
    }

    /// Run `read` and lock the state so that the read is consistent with the commits
    /// the hub has seen: a subscription's first result.
    ///
    /// Consistency: the read happens outside the lock; if a commit was processed
    /// meanwhile (the sequence number moved) it is retried, and after three tries
    /// it reads while holding the lock. A commit whose hook has not run yet may or
    /// may not be in the read: applying it again is harmless, because the hub
    /// applies changes by rowid (set or remove), which is idempotent.
    fn read_then_lock<T>(
        &self,
        inner: &Inner,
        read: impl Fn(&rusqlite::Connection) -> Result<T>,
    ) -> Result<(MutexGuard<'_, State>, T)> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            if attempt > 3 {
                let st = lock(&self.state);
                let r = inner.store.read(&read)?;
                return Ok((st, r));
            }
            let s0 = self.seq();
            let r = inner.store.read(&read)?;
            let st = lock(&self.state);
            if self.seq() == s0 {
                return Ok((st, r));
            }
        }
    }

    /// Register a query subscription: read its first result consistently with the
    /// commits the hub has seen ([`Hub::read_then_lock`]), then index it. Returns
    /// its id and first window.
    pub(crate) fn add_query(
        &self,
        q: Compiled,
        sink: Arc<Shared<QueryUpdate>>,
    ) -> Result<(u64, Objects)> {
        let inner = self.db.upgrade().ok_or_else(|| self.closed())?;
        inner.check_open("subscribe")?;
        let spec_key = spec_hash(&q.spec);
        {
            // The same query is already live: share its result. Its stored rows
            // are current for every commit the hub has seen, which is what a
            // consistent first read gives; later commits reach both alike.
            let mut st = lock(&self.state);
            let id = st.next_id;
            if let Some(cs) = st.colls.get_mut(&q.coll) {
                let key = cs.by_spec.get(&spec_key).and_then(|keys| {
                    keys.iter()
                        .copied()
                        .find(|k| cs.queries.get(k).is_some_and(|x| x.spec == q.spec))
                });
                if let Some((key, twin)) = key.and_then(|k| Some((k, cs.queries.get_mut(&k)?))) {
                    twin.sinks.push((id, sink));
                    let first = twin.shown.clone();
                    cs.alias.insert(id, key);
                    st.next_id += 1;
                    self.recount(&st);
                    return Ok((id, first));
                }
            }
        }
        // Writes record their changes from now on (before the first read).
        let _adding = Adding::new(&self.adding);
        let read = |conn: &rusqlite::Connection| match &q.pk_eq {
            Some(v) => read_by_key(&inner, conn, &q, v),
            None => read_prefix(&inner, conn, &q.spec, &q.order, q.cap),
        };
        let (mut st, (mut rows, complete)) = self.read_then_lock(&inner, read)?;
        let id = st.next_id;
        st.next_id += 1;
        let cs = st.colls.entry(q.coll.clone()).or_default();
        cs.share(&mut rows);
        let first = Objects::from(objects(window(&q.spec, &rows)));
        let order = match cs.orders.iter().position(|(k, _)| *k == q.spec.order) {
            Some(i) => i,
            None => {
                cs.orders.push((q.spec.order.clone(), q.order.clone()));
                cs.orders.len() - 1
            }
        };
        let placement = place(cs, &q, &self.schema, id);
        match &placement {
            Placement::Eq(p, keys, exact) => {
                for k in keys {
                    cs.eq[*p].insert(k, id, *exact);
                }
            }
            Placement::Range(_) => {}
            Placement::Scan => cs.scan.push(id),
        }
        if q.ranked {
            cs.ranked.push(id);
        }
        cs.by_spec.entry(spec_key).or_default().push(id);
        cs.queries.insert(
            id,
            QuerySub {
                sinks: vec![(id, sink)],
                spec: q.spec,
                filter: q.filter,
                order,
                placement,
                rows,
                shown: first.clone(),
                complete,
                cap: q.cap,
                ranked: q.ranked,
            },
        );
        self.recount(&st);
        Ok((id, first))
    }

    /// Register an object subscription; returns its id, the collection's full name
    /// and the object as stored now (not registered if it does not exist).
    pub(crate) fn add_object(
        &self,
        collection: &str,
        key: &[Value],
        sink: Arc<Shared<ObjectEvent>>,
    ) -> Result<(u64, String, Option<Obj>)> {
        let inner = self.db.upgrade().ok_or_else(|| self.closed())?;
        inner.check_open("subscribe")?;
        let c = inner.coll(collection, "subscribe")?;
        let key = c.check_key("subscribe", key)?;
        let hk = hkeys(&key);
        let _adding = Adding::new(&self.adding);
        let read = |conn: &rusqlite::Connection| inner.get_in(conn, c, "subscribe", &key, true);
        let (mut st, cur) = self.read_then_lock(&inner, read)?;
        let cur = cur.map(Arc::new);
        let id = st.next_id;
        st.next_id += 1;
        if cur.is_some() {
            let cs = st.colls.entry(c.name.clone()).or_default();
            cs.objects.entry(hk.clone()).or_default().push(id);
            cs.object_subs.insert(
                id,
                ObjSub {
                    sink,
                    key: hk,
                    key_values: key.clone(),
                    last: cur.clone(),
                },
            );
            self.recount(&st);
        }
        Ok((id, c.name.clone(), cur))
    }

    /// Unregister (idempotent).
    pub(crate) fn remove(&self, collection: &str, id: u64) {
        let mut st = lock(&self.state);
        let Some(cs) = st.colls.get_mut(collection) else {
            return;
        };
        if let Some(o) = cs.object_subs.remove(&id) {
            if let Some(v) = cs.objects.get_mut(&o.key) {
                v.retain(|x| *x != id);
                if v.is_empty() {
                    cs.objects.remove(&o.key);
                }
            }
        }
        let key = cs.alias.remove(&id).unwrap_or(id);
        let last = cs.queries.get_mut(&key).is_some_and(|q| {
            q.sinks.retain(|(i, _)| *i != id);
            q.sinks.is_empty()
        });
        let id = key;
        if let Some(q) = last.then(|| cs.queries.remove(&id)).flatten() {
            let spec_key = spec_hash(&q.spec);
            if let Some(keys) = cs.by_spec.get_mut(&spec_key) {
                keys.retain(|k| *k != id);
                if keys.is_empty() {
                    cs.by_spec.remove(&spec_key);
                }
            }
            match q.placement {
                Placement::Eq(p, keys, _) => {
                    for k in keys {
                        cs.eq[p].remove(&k, id);
                    }
                }
                Placement::Range(r) => {
                    cs.ranges[r].subs.retain(|s| s.0 != id);
                    cs.ranges[r].built = None;
                }
                Placement::Scan => cs.scan.retain(|x| *x != id),
            }
            if q.ranked {
                cs.ranked.retain(|x| *x != id);
            }
        }
        self.recount(&st);
    }

    /// Live subscriptions (object, query).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let st = lock(&self.state);
        st.colls.values().fold((0, 0), |(o, q), c| {
            (o + c.object_subs.len(), q + c.query_count())
        })
    }

    /// End every subscription (the database closed): each is unregistered and
    /// cancelled — its callback is dropped, so a stream's slot ends and the stream
    /// finishes after its pending value. Cancelling waits for a callback running on
    /// another thread, so once this returns no callback runs again.
    pub(crate) fn close(&self) {
        let colls = {
            let mut st = lock(&self.state);
            let colls = std::mem::take(&mut st.colls);
            self.recount(&st);
            colls
        };
        for cs in colls.into_values() {
            for s in cs.queries.into_values() {
                for (_, sink) in s.sinks {
                    sink.cancel();
                }
            }
            for s in cs.object_subs.into_values() {
                s.sink.cancel();
            }
        }
    }

    /// The commit hook: runs on the writer thread after COMMIT, once per committed
    /// write closure with changes. Computes every delivery under the lock, then
    /// makes them without it (callbacks may subscribe or unsubscribe).
    pub(crate) fn on_commit(&self, changes: &[Change], one_collection: bool) {
        let mut out;
        {
            let mut st = lock(&self.state);
            out = std::mem::take(&mut st.scratch.deliveries);
            self.seq.fetch_add(1, Ordering::AcqRel);
            let by_coll = by_collection(changes, one_collection);
            let mut ended = 0;
            let State { colls, scratch, .. } = &mut *st;
            for (name, chs) in by_coll {
                if let Some(cs) = colls.get_mut(name) {
                    ended += self.objects(cs, &chs, &mut out);
                    self.queries(cs, &chs, None, scratch, &mut out);
                }
            }
            // Only a delete ends subscriptions (object ones): recounting walks
            // every subscription, which a commit should not pay for.
            if ended > 0 {
                self.recount(&st);
            }
        }
        self.deliver_all(out);
    }

    /// Rows another process committed, as they are now (the change feed's
    /// catch-up, `crate::feed`): applied like a local commit, so the diffs come out
    /// the same way. The old bytes are unknown, so a query subscription whose
    /// stored rows hold a changed rowid is always visited (it may have to drop
    /// it), and a deleted row's object subscription is found by rowid.
    pub(crate) fn on_remote(&self, changes: &[Change]) {
        let mut out;
        {
            let mut st = lock(&self.state);
            out = std::mem::take(&mut st.scratch.deliveries);
            self.seq.fetch_add(1, Ordering::AcqRel);
            let by_coll = by_collection(changes, false);
            let mut ended = 0;
            let State { colls, scratch, .. } = &mut *st;
            for (name, rs) in by_coll {
                let Some(cs) = colls.get_mut(name) else {
                    continue;
                };
                let wanted: FxSet<i64> = rs.iter().map(|r| r.rowid).collect();
                let mut held: FxMap<i64, Vec<u64>> = FxMap::default();
                for (id, q) in &cs.queries {
                    for e in &q.rows {
                        if wanted.contains(&e.rowid) {
                            held.entry(e.rowid).or_default().push(*id);
                        }
                    }
                }
                // A change logged without its key: the object subscription
                // following its rowid names it (copied, the rare case).
                let keyed: Vec<std::borrow::Cow<'_, Change>> = rs
                    .iter()
                    .map(|c| {
                        if !c.key.is_empty() {
                            return std::borrow::Cow::Borrowed(*c);
                        }
                        std::borrow::Cow::Owned(Change {
                            key: cs
                                .object_subs
                                .values()
                                .find(|s| s.last.as_ref().is_some_and(|l| l.rowid == c.rowid))
                                .map(|s| s.key_values.clone())
                                .unwrap_or_default(),
                            ..(*c).clone()
                        })
                    })
                    .collect();
                let chs: Vec<&Change> = keyed.iter().map(|c| c.as_ref()).collect();
                ended += self.objects(cs, &chs, &mut out);
                self.queries(cs, &chs, Some(&held), scratch, &mut out);
            }
            if ended > 0 {
                self.recount(&st);
            }
        }
        self.deliver_all(out);
    }

    /// Object subscriptions' deliveries for a commit; returns how many ended (their
    /// object was deleted).
    fn objects(&self, cs: &mut CollSubs, chs: &[&Change], out: &mut Vec<Delivery>) -> usize {
        if cs.objects.is_empty() {
            return 0;
        }
        let mut ended = 0;
        // Final state per key within this commit.
        let mut last: Vec<FinalState<'_>> = Vec::new();
        let mut at: HashMap<Vec<HKey>, usize> = HashMap::new();
        for c in chs {
            let k = hkeys(&c.key);
            if !cs.objects.contains_key(&k) {
                continue;
            }
            let v = c.new.as_deref().map(|b| (c.rowid, b));
            match at.get(&k) {
                Some(&i) => last[i].1 = v,
                None => {
                    at.insert(k.clone(), last.len());
                    last.push((k, v));
                }
            }
        }
        for (k, new) in last {
            let ids = cs.objects.get(&k).cloned().unwrap_or_default();
            let obj = new.map(|(rowid, b)| {
                Arc::new(StoredObject {
                    rowid,
                    bytes: b.to_vec(),
                })
            });
            for id in ids {
                let Some(sub) = cs.object_subs.get_mut(&id) else {
                    continue;
                };
                match &obj {
                    Some(o) => {
                        if sub.last.as_ref().is_some_and(|l| l.bytes == o.bytes) {
                            continue;
                        }
                        sub.last = Some(Arc::clone(o));
                        out.push(Delivery::Object(
                            Arc::clone(&sub.sink),
                            ObjectEvent::Updated(Arc::clone(o)),
                        ));
                    }
                    None => {
                        out.push(Delivery::Object(
                            Arc::clone(&sub.sink),
                            ObjectEvent::Deleted,
                        ));
                        cs.object_subs.remove(&id);
                        ended += 1;
                    }
                }
            }
            if obj.is_none() {
                cs.objects.remove(&k);
            }
        }
        ended
    }

    /// `held`: for changes from another process (no old bytes), the query
    /// subscriptions whose stored rows hold each changed rowid.
    fn queries(
        &self,
        cs: &mut CollSubs,
        chs: &[&Change],
        held: Option<&FxMap<i64, Vec<u64>>>,
        scratch: &mut Scratch,
        out: &mut Vec<Delivery>,
    ) {
        if cs.queries.is_empty() {
            return;
        }
        let Some(table) = self
            .schema
            .collection(&chs[0].collection)
            .and_then(|c| self.schema.table_reader(c.table))
        else {
            return;
        };
        let (touches, tkeys, rowids) = collapse(chs);
        for r in &mut cs.ranges {
            r.build();
        }
        // Each affected subscription's entries to merge in, and the versions
        // this commit made (one per touch, shared by every subscription), in
        // lists kept between commits (given back, empty, below).
        let mut m = std::mem::take(&mut scratch.matching);
        {
            let cs = &*cs;
            let Matching {
                per_sub,
                cands,
                ids,
                wanted,
                arcs,
                updates,
                rv,
                keys,
                ranks,
                by_key,
                spare_adds,
            } = &mut m;
            // (id, OLD | NEW: the object's old/new value is in the subscription's
            // exact range; EVAL: evaluate the filter).
            const OLD: u8 = 1;
            const NEW: u8 = 2;
            const EVAL: u8 = 4;
            // The subscription holds the row: it matched before (old bytes unknown).
            const HELD: u8 = 8;
            rv.resize(cs.ranges.len(), [Value::Null, Value::Null]);
            // Opening a body (it is verified) is most of a touch's cost. A local
            // commit's bodies were verified when written, and when every index is
            // on the primary key (which the change carries) no field is read:
            // then only the candidates' filters open them.
            let read_fields =
                held.is_some() || !cs.ranges.is_empty() || cs.eq.iter().any(|ix| !ix.pk);
            // When every subscription is found through its primary key, most of a
            // large commit's rows concern none of them. One tight pass over the
            // keys sets those aside: each key lives in its own allocation, and
            // with little work per row the processor fetches several at once.
            let by_key_only = !read_fields && cs.scan.is_empty();
            let maybe: Vec<bool> = if by_key_only {
                // In two steps, each a short loop, so that many rows' memory is
                // fetched at once: where each key's text is, then the text itself.
                let refs: Vec<Option<HKeyRef<'_>>> = tkeys
                    .iter()
                    .map(|(_, k1)| match k1 {
                        [v] => hkey_ref(SqlValue::from_value(v)),
                        _ => None,
                    })
                    .collect();
                refs.iter()
                    .zip(&tkeys)
                    .map(|(r, (k0, k1))| {
                        let h = r.as_ref().map(HKeyRef::prehash);
                        cs.eq.iter().any(|ix| {
                            h.is_some_and(|h| ix.pre.contains_key(&h))
                                || (!std::ptr::eq(*k0, *k1) && ix.may_hold(k0))
                        })
                    })
                    .collect()
            } else {
                Vec::new()
            };
            for (ti, (rowid, old, new)) in touches.iter().enumerate() {
                if by_key_only && !maybe[ti] {
                    continue;
                }
                let (oo, no) = if read_fields {
                    (old.map(|b| table.open(b)), new.map(|b| table.open(b)))
                } else {
                    (None, None)
                };
                let unreadable = matches!(oo, Some(Err(_))) || matches!(no, Some(Err(_)));
                let oo = oo.and_then(|r| r.ok());
                let no = no.and_then(|r| r.ok());
                cands.clear();
                if unreadable {
                    // Rare (a damaged body): every subscription is a candidate.
                    cands.extend(cs.queries.keys().map(|&i| (i, EVAL)));
                } else {
                    for ix in &cs.eq {
                        if ix.pk {
                            // The change carries the key: no field read.
                            let (k0, k1) = tkeys[ti];
                            if let ([k0], [k1]) = (k0, k1) {
                                // An update keeps its key: one probe, not two,
                                // and what it finds matched before and after.
                                let same = old.is_some()
                                    && new.is_some()
                                    && (std::ptr::eq(k0, k1) || k0 == k1);
                                let probes = [
                                    (old.is_some() && !same, k0, OLD),
                                    (new.is_some(), k1, if same { OLD | NEW } else { NEW }),
                                ];
                                for (here, k, side) in probes {
                                    if let Some(ids) =
                                        here.then(|| ix.get(SqlValue::from_value(k))).flatten()
                                    {
                                        cands.extend(ids.iter().map(|&(i, exact)| {
                                            (i, if exact { side } else { EVAL })
                                        }));
                                    }
                                }
                                continue;
                            }
                        }
                        for (o, side) in [(&oo, OLD), (&no, NEW)] {
                            let Some(o) = o else { continue };
                            let v = o
                                .get_ref(&ix.resolved)
                                .map_or(SqlValue::Null, SqlValue::from_ref);
                            if let Some(ids) = ix.get(v) {
                                cands.extend(
                                    ids.iter()
                                        .map(|&(i, exact)| (i, if exact { side } else { EVAL })),
                                );
                            }
                        }
                    }
                    for (ri, ix) in cs.ranges.iter().enumerate() {
                        let get = |o: &Option<Object<'_, '_>>| {
                            o.as_ref().map_or(Value::Null, |o| {
                                o.get_ref(&ix.resolved)
                                    .map_or(Value::Null, |v| SqlValue::from_ref(v).to_value())
                            })
                        };
                        rv[ri] = [get(&oo), get(&no)];
                        if let Some(b) = &ix.built {
                            for (side, flag) in [(0, OLD), (1, NEW)] {
                                cands.extend(
                                    b.lookup(&rv[ri][side])
                                        .iter()
                                        .map(|&(i, exact)| (i, if exact { flag } else { EVAL })),
                                );
                            }
                        }
                    }
                    cands.extend(cs.scan.iter().map(|&i| (i, EVAL)));
                }
                if let Some(ids) = held.and_then(|h| h.get(rowid)) {
                    cands.extend(ids.iter().map(|&i| (i, HELD | EVAL)));
                }
                // A few runs, each in id order (one per index): the stable
                // sort merges runs in linear time where quicksort would not.
                cands.sort_by_key(|c| c.0);
                let mut k = 0;
                while k < cands.len() {
                    let id = cands[k].0;
                    let mut flags = 0;
                    while k < cands.len() && cands[k].0 == id {
                        flags |= cands[k].1;
                        k += 1;
                    }
                    let (om, nm) = if flags & EVAL == 0 {
                        (flags & OLD != 0, flags & NEW != 0)
                    } else {
                        let Some(q) = cs.queries.get(&id) else {
                            continue;
                        };
                        let m = |o: &Option<Object<'_, '_>>, b: &Option<&[u8]>| match (&q.filter, b)
                        {
                            (_, None) => false,
                            (None, Some(_)) => true,
                            (Some(f), Some(b)) => match o {
                                Some(o) => f.eval(o) == Some(true),
                                None => f.matches(b),
                            },
                        };
                        (m(&oo, old) || flags & HELD != 0, m(&no, new))
                    };
                    if om || nm {
                        per_sub.entry(id).or_default().push((ti, nm));
                    }
                }
            }
            for &id in &cs.ranked {
                per_sub.entry(id).or_default();
            }
            if per_sub.is_empty() {
                m.clear_matched();
                scratch.matching = m;
                return;
            }
            arcs.resize(touches.len(), None);
            // Per order used: every changed object's sort key and its rank among
            // them, computed once and shared by the subscriptions ordering that way.
            keys.resize_with(cs.orders.len(), Vec::new);
            ranks.resize_with(cs.orders.len(), Vec::new);
            ids.extend(per_sub.keys().copied());
            ids.sort_unstable(); // deliver in subscription order
                                 // The touches some subscription may add: only they need a sort key.
            wanted.resize(touches.len(), false);
            for mine in per_sub.values() {
                for &(ti, nm) in mine.as_slice() {
                    wanted[ti] |= nm;
                }
            }
            updates.reserve(ids.len());
            for id in ids.iter() {
                let Some(mine) = per_sub.get_mut(id) else {
                    continue;
                };
                let Some(q) = cs.queries.get(id) else {
                    continue;
                };
                if q.ranked {
                    // Re-run from disk in `apply_edit`: nothing to merge.
                    updates.push((*id, Vec::new()));
                    continue;
                }
                let order = &cs.orders[q.order].1;
                if keys[q.order].is_empty() {
                    let kc = &mut keys[q.order];
                    kc.extend(touches.iter().zip(wanted.iter()).map(
                        |((rowid, _, new), w)| match (new, w) {
                            (Some(b), true) => Some(Keyed::new(order.key(b, *rowid))),
                            _ => None,
                        },
                    ));
                    by_key.clear();
                    by_key.extend((0..touches.len()).filter(|i| kc[*i].is_some()));
                    by_key.sort_by(|a, b| match (&kc[*a], &kc[*b]) {
                        (Some(x), Some(y)) => order.compare(&x.key, &y.key),
                        _ => Cmp::Equal,
                    });
                    let rk = &mut ranks[q.order];
                    rk.resize(touches.len(), u32::MAX);
                    for (r, &i) in by_key.iter().enumerate() {
                        rk[i] = r as u32;
                    }
                }
                let (kcache, rank) = (&keys[q.order], &ranks[q.order]);
                let boundary = if q.complete { None } else { q.rows.last() };
                // In rank order, so that `add` comes out sorted. Touch order is
                // often key order or a rotation of it (a transaction that walks
                // the rows by key): the stable sort finds those runs and merges
                // them in linear time.
                let mine = mine.as_mut_slice();
                if mine.len() > 1 {
                    mine.sort_by_key(|(ti, _)| rank[*ti]);
                }
                // Allocated at the first entry: about half the subscriptions a
                // one-object commit reaches only lose a row.
                let mut add: Vec<Entry> = Vec::new();
                for (ti, nm) in mine.iter() {
                    if !nm {
                        continue;
                    }
                    let (rowid, _, new) = touches[*ti];
                    let (Some(new), Some(key)) = (new, &kcache[*ti]) else {
                        continue;
                    };
                    if boundary.is_some_and(|b| cmp_to_entry(order, key, b) == Cmp::Greater) {
                        continue;
                    }
                    let obj = arcs[*ti]
                        .get_or_insert_with(|| {
                            Arc::new(StoredObject {
                                rowid,
                                bytes: new.to_vec(),
                            })
                        })
                        .clone();
                    if add.is_empty() {
                        if let Some(spare) = spare_adds.pop() {
                            add = spare;
                        }
                        add.reserve_exact(mine.len());
                    }
                    add.push(Entry::new(rowid, Arc::clone(key), obj));
                }
                updates.push((*id, add));
            }
        }
        cs.remember(&touches, &m.arcs);
        // What matching built is done with (the edits hold their own references):
        // let it go before the edits run, which is when a large commit peaks.
        m.clear_matched();
        let inner = self.db.upgrade();
        let CollSubs {
            queries, orders, ..
        } = cs;
        let touched = Touched::of(&rowids, &touches);
        out.reserve(m.updates.len());
        for (id, mut add) in m.updates.drain(..) {
            if let Some(q) = queries.get_mut(&id) {
                let order = &orders[q.order].1;
                apply_edit(q, order, &mut add, &touched, inner.as_deref(), scratch, out);
                scratch.reset();
            }
            add.clear();
            if (1..=Scratch::KEEP).contains(&add.capacity()) && m.spare_adds.len() < SPARE_ADDS {
                m.spare_adds.push(add);
            }
        }
        empty(&mut m.updates);
        scratch.matching = m;
    }

    fn finish_queries(
        &self,
        cs: &mut CollSubs,
        updates: Vec<(u64, Vec<Entry>, bool)>,
        out: &mut Vec<Delivery>,
    ) {
        for (id, mut rows, complete) in updates {
            cs.share(&mut rows);
            let Some(q) = cs.queries.get_mut(&id) else {
                continue;
            };
            let old = std::mem::replace(&mut q.rows, rows);
            q.complete = complete;
            let (ow, nw) = (window(&q.spec, &old), window(&q.spec, &q.rows));
            let diff = Diff::by(
                ow,
                nw,
                |e| e.rowid,
                |a, b| Arc::ptr_eq(&a.obj, &b.obj) || a.obj.bytes == b.obj.bytes,
            );
            deliver_changed(&q.sinks, &mut q.shown, nw, diff, out);
        }
    }
}

/// The touches of one commit that concern one query subscription, as (touch,
/// matches now): most subscriptions a commit reaches get one, kept inline.
#[derive(Default)]
enum Mine {
    #[default]
    None,
    One([(usize, bool); 1]),
    Many(Vec<(usize, bool)>),
}

impl Mine {
    fn push(&mut self, t: (usize, bool)) {
        match self {
            Mine::None => *self = Mine::One([t]),
            Mine::One([first]) => *self = Mine::Many(vec![*first, t]),
            Mine::Many(v) => v.push(t),
        }
    }

    fn as_slice(&self) -> &[(usize, bool)] {
        match self {
            Mine::None => &[],
            Mine::One(one) => one,
            Mine::Many(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [(usize, bool)] {
        match self {
            Mine::None => &mut [],
            Mine::One(one) => one,
            Mine::Many(v) => v,
        }
    }
}

/// A commit's changes by collection, in order. `one_collection` (known from the
/// transaction): skip comparing every change's collection name, a read of
/// memory of its own per change.
fn by_collection(changes: &[Change], one_collection: bool) -> Vec<(&str, Vec<&Change>)> {
    if let (true, Some(first)) = (one_collection, changes.first()) {
        return vec![(&first.collection, changes.iter().collect())];
    }
    let mut by_coll: Vec<(&str, Vec<&Change>)> = Vec::new();
    for c in changes {
        match by_coll.iter_mut().find(|(n, _)| *n == c.collection) {
            Some((_, v)) => v.push(c),
            None => by_coll.push((&c.collection, vec![c])),
        }
    }
    by_coll
}

/// A subscription id and the new entries a commit merges into its rows.
type Edit = (u64, Vec<Entry>);

/// Apply one commit to a query subscription's stored rows and compute its
/// delivery: the stored rows changed in this commit (`at`) leave, the sorted `add`
/// entries merge in, the prefix is cut to its cap (or refilled from disk when it ran
/// short), and the window is diffed.
///
/// Entries are moved, not cloned, and the diff runs on (rowid, object address)
/// pairs: an unchanged row costs no reference-count traffic, so the work follows the
/// changes and the delivered window.
fn apply_edit(
    q: &mut QuerySub,
    order: &Order,
    add: &mut Vec<Entry>,
    touched: &Touched<'_>,
    inner: Option<&Inner>,
    scratch: &mut Scratch,
    out: &mut Vec<Delivery>,
) {
    if !q.ranked {
        if let Some(diff) = single_edit(q, order, add, touched, scratch) {
            deliver_changed(&q.sinks, &mut q.shown, window(&q.spec, &q.rows), diff, out);
            return;
        }
    }
    snapshot(&q.spec, &q.rows, &mut scratch.before);
    if q.ranked {
        // Relevance order: the query runs again (see `Compiled::ranked`); the rows it
        // replaces are the old versions the diff compares with.
        let Some(inner) = inner else {
            return;
        };
        match inner
            .store
            .read(|conn| read_prefix(inner, conn, &q.spec, order, q.cap))
        {
            Ok((rows, complete)) => {
                let gone = std::mem::replace(&mut q.rows, rows);
                q.complete = complete;
                scratch.gone.extend(gone);
                deliver_diff(q, scratch, out);
            }
            Err(e) => tracing::error!(error = %e, "ranked subscription re-read failed"),
        }
        return;
    }
    let mut rows = std::mem::take(&mut q.rows);
    // The stored rows this commit replaced or removed: kept until the diff is made
    // (an object whose address changed is compared by bytes with its old version).
    touched.take_from(&mut rows, &mut scratch.gone);
    merge_sorted(&mut rows, add, order);
    let mut complete = q.complete;
    if let Some(cap) = q.cap {
        if rows.len() > cap {
            scratch.gone.extend(rows.drain(cap..));
            complete = false;
        }
    }
    if !complete && rows.len() < needed(&q.spec) {
        // The window ran short: refill the prefix from disk.
        if let Some(inner) = inner {
            match inner
                .store
                .read(|conn| read_prefix(inner, conn, &q.spec, order, q.cap))
            {
                Ok((r, c)) => {
                    scratch.gone.append(&mut rows);
                    rows = r;
                    complete = c;
                }
                Err(e) => tracing::error!(error = %e, "subscription refill failed"),
            }
        }
    }
    q.rows = rows;
    q.complete = complete;
    deliver_diff(q, scratch, out);
}

/// [`apply_edit`] when a commit changes one object of a query without offset
/// (a single-object commit, or a larger one of which one object concerns this
/// query), so that the diff follows from two places: where the object's stored
/// row was and where its new version goes. No snapshot of the window and no
/// comparison of its rows, which is most of a delivery's work otherwise. Takes
/// the entry out of `add` when it succeeds; returns `None`, having changed
/// nothing (`add` included), when the edit needs the general path: several of
/// its rows changed, the object moved within the window, the prefix outgrew its
/// cap, or it must be refilled.
fn single_edit(
    q: &mut QuerySub,
    order: &Order,
    add: &mut Vec<Entry>,
    touched: &Touched<'_>,
    scratch: &mut Scratch,
) -> Option<Diff> {
    if q.spec.offset != 0 || add.len() > 1 {
        return None;
    }
    let limit = q
        .spec
        .limit
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let n = q.rows.len();
    // The stored row the commit changed, if any; a second one: not this path.
    let from = match *touched {
        Touched::One(rowid) => q.rows.iter().position(|e| e.rowid == rowid),
        _ => {
            let mut hit = q
                .rows
                .iter()
                .enumerate()
                .filter(|(_, e)| touched.has(e.rowid));
            let first = hit.next().map(|(i, _)| i);
            if hit.next().is_some() {
                return None;
            }
            first
        }
    };
    if let (Some(i), Some(a)) = (from, add.first()) {
        if q.rows[i].rowid != a.rowid {
            return None; // one row left, another came
        }
    }
    // Where the new version goes among the rows without the old one (after the
    // stored rows it does not sort before, as `merge_sorted` puts it).
    let to = add.first().map(|a| {
        let p = q
            .rows
            .partition_point(|e| cmp_entries(order, a, e) != Cmp::Less);
        match from {
            Some(i) if i < p => p - 1,
            _ => p,
        }
    });
    let len = n - usize::from(from.is_some()) + usize::from(to.is_some());
    if q.cap.is_some_and(|c| len > c) || (!q.complete && len < needed(&q.spec)) {
        return None;
    }
    // Each list gets one index at most, held inline (no allocation).
    let mut d = Diff::default();
    match (from, to) {
        (Some(i), None) if i < limit => {
            d.removed = Indices::one(i);
            if n > limit {
                // The first row past the window slides in at its end.
                d.inserted = Indices::one(limit - 1);
            }
        }
        (None, Some(j)) if j < limit => {
            if n >= limit {
                // The window's last row is pushed out.
                d.removed = Indices::one(limit - 1);
            }
            d.inserted = Indices::one(j);
        }
        (Some(i), Some(j)) if i == j => {
            let (old, new) = (&q.rows[i].obj, &add[0].obj);
            if i < limit && !Arc::ptr_eq(old, new) && old.bytes != new.bytes {
                d.updated = Indices::one(i);
            }
        }
        (Some(i), Some(j)) if i < limit || j < limit => return None,
        _ => {} // outside the window
    }
    if let Some(i) = from {
        scratch.gone.push(q.rows.remove(i));
    }
    if let (Some(j), Some(a)) = (to, add.pop()) {
        q.rows.insert(j, a);
    }
    Some(d)
}

/// A commit's changes collapsed to one touch per rowid (first old bytes, last new
/// bytes), each touch's primary key before and after (a rowid freed by a delete
/// can come back under another key within one commit), and the set of rowids.
#[allow(clippy::type_complexity)]
fn collapse<'c>(chs: &[&'c Change]) -> (Vec<Touch<'c>>, Vec<(&'c [Value], &'c [Value])>, RowidSet) {
    // Sized for the commit at once: a transaction that rewrote every row would
    // otherwise grow (and rehash) them a dozen times.
    let mut touches: Vec<Touch<'c>> = Vec::with_capacity(chs.len());
    let mut tkeys: Vec<(&[Value], &[Value])> = Vec::with_capacity(chs.len());
    let push = |c: &&'c Change, t: &mut Vec<Touch<'c>>, k: &mut Vec<(&'c [Value], &'c [Value])>| {
        t.push((c.rowid, c.old.as_deref(), c.new.as_deref()));
        k.push((&c.key, &c.key));
    };
    // One pass over the changes (each read once: a large commit's are far apart
    // in memory), then the rowids alone. SQLite hands rowids out densely, so a
    // commit's usually span little more than their number: then a bitset holds
    // them, with no hashing, as long as no rowid comes twice (then the map below
    // merges its changes).
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for c in chs {
        lo = lo.min(c.rowid);
        hi = hi.max(c.rowid);
        push(c, &mut touches, &mut tkeys);
    }
    let span = hi.checked_sub(lo).and_then(|s| u64::try_from(s).ok());
    if let Some(span) = span.filter(|s| s / 64 <= chs.len() as u64) {
        let mut words = vec![0u64; usize::try_from(span / 64 + 1).unwrap_or(0)];
        let mut repeated = false;
        for t in &touches {
            let off = t.0.abs_diff(lo);
            let (w, bit) = ((off / 64) as usize, 1u64 << (off % 64));
            repeated |= words[w] & bit != 0;
            words[w] |= bit;
        }
        if !repeated {
            return (touches, tkeys, RowidSet::Bits { base: lo, words });
        }
    }
    touches.clear();
    tkeys.clear();
    let mut at: FxMap<i64, usize> = FxMap::default();
    at.reserve(chs.len());
    for c in chs {
        match at.get(&c.rowid) {
            Some(&i) => {
                touches[i].2 = c.new.as_deref();
                tkeys[i].1 = &c.key;
            }
            None => {
                at.insert(c.rowid, touches.len());
                push(c, &mut touches, &mut tkeys);
            }
        }
    }
    (touches, tkeys, RowidSet::Map(at))
}

/// The rowids a commit touched (see [`collapse`]).
enum RowidSet {
    /// Bit `r - base` of the words is set for each touched rowid `r`.
    Bits { base: i64, words: Vec<u64> },
    /// Touched rowid → its touch.
    Map(FxMap<i64, usize>),
}

/// The rowids a commit touched, as [`apply_edit`] asks about each stored row:
/// one compared directly (a single-object commit), a few compared one by one (no
/// hashing per row), or the commit's set.
enum Touched<'a> {
    One(i64),
    /// Up to [`Touched::FEW`] rowids, in the first `.1` places.
    Few([i64; Touched::FEW], usize),
    Many(&'a RowidSet),
}

impl<'a> Touched<'a> {
    /// Up to this many touched rowids are compared one by one.
    const FEW: usize = 8;

    fn of(set: &'a RowidSet, touches: &[Touch<'_>]) -> Self {
        if touches.len() > Self::FEW {
            return Touched::Many(set);
        }
        let mut few = [0; Self::FEW];
        for (slot, t) in few.iter_mut().zip(touches) {
            *slot = t.0;
        }
        if touches.len() == 1 {
            return Touched::One(few[0]);
        }
        Touched::Few(few, touches.len())
    }

    /// Move the entries of `rows` this commit touched to `gone`, keeping the
    /// order of the others.
    fn take_from(&self, rows: &mut Vec<Entry>, gone: &mut Vec<Entry>) {
        match *self {
            // A single-object commit: find its row, if held, and close the gap.
            Touched::One(r) => {
                if let Some(i) = rows.iter().position(|e| e.rowid == r) {
                    gone.push(rows.remove(i));
                }
            }
            _ => gone.extend(rows.extract_if(.., |e| self.has(e.rowid))),
        }
    }

    #[inline]
    fn has(&self, rowid: i64) -> bool {
        match self {
            Touched::One(r) => *r == rowid,
            Touched::Few(few, n) => few[..*n].contains(&rowid),
            Touched::Many(RowidSet::Map(m)) => m.contains_key(&rowid),
            Touched::Many(RowidSet::Bits { base, words }) => {
                rowid >= *base && {
                    let off = rowid.abs_diff(*base);
                    usize::try_from(off / 64)
                        .ok()
                        .and_then(|w| words.get(w))
                        .is_some_and(|w| w & (1 << (off % 64)) != 0)
                }
            }
        }
    }
}

/// Move `add` (sorted by `order`) into `rows` (sorted by `order`); an added
/// entry goes after the stored entries it does not sort before. A few added
/// entries are placed by binary search — a handful of key comparisons instead
/// of one per stored row, each of which reads a sort key from memory the
/// commit has not touched — and many by one merging pass.
fn merge_sorted(rows: &mut Vec<Entry>, add: &mut Vec<Entry>, order: &Order) {
    if add.is_empty() {
        return;
    }
    if add.len().saturating_mul(8) <= rows.len() {
        let mut from = 0;
        for a in add.drain(..) {
            let at =
                from + rows[from..].partition_point(|e| cmp_entries(order, &a, e) != Cmp::Less);
            rows.insert(at, a);
            from = at + 1;
        }
        return;
    }
    let old = std::mem::take(rows);
    rows.reserve(old.len() + add.len());
    let mut add = add.drain(..).peekable();
    for e in old {
        while let Some(a) = add.peek() {
            if cmp_entries(order, a, &e) == Cmp::Less {
                rows.extend(add.next());
            } else {
                break;
            }
        }
        rows.push(e);
    }
    rows.extend(add);
}

/// The window of `rows` as (rowid, object address, index in the window), into
/// `into`: what the diff compares.
fn snapshot(spec: &Spec, rows: &[Entry], into: &mut Vec<(i64, usize, usize)>) {
    into.clear();
    into.extend(
        window(spec, rows)
            .iter()
            .enumerate()
            .map(|(i, e)| (e.rowid, Arc::as_ptr(&e.obj) as usize, i)),
    );
}

/// Diff a query subscription's window against `scratch.before` (the window's
/// (rowid, object address, index) before the commit) and queue the update when
/// something changed. `scratch.gone` holds the entries the commit replaced or
/// removed: an object whose address changed is compared by bytes with its old
/// version there.
fn deliver_diff(q: &mut QuerySub, scratch: &mut Scratch, out: &mut Vec<Delivery>) {
    snapshot(&q.spec, &q.rows, &mut scratch.after);
    let nw = window(&q.spec, &q.rows);
    let gone = &scratch.gone;
    // Old versions by rowid, for objects whose address changed (few, except when a
    // transaction rewrote most of the window).
    // The first entry of a rowid is its old version: a re-added row that the cap
    // or a refill pushed out comes later.
    let by_rowid: Option<FxMap<i64, usize>> = (gone.len() > 16).then(|| {
        let mut m = FxMap::default();
        m.reserve(gone.len());
        for (i, e) in gone.iter().enumerate() {
            m.entry(e.rowid).or_insert(i);
        }
        m
    });
    // The rows the commit left alone are the same objects at the same places from
    // either end: a tight scan sets them aside, and the diff proper runs on what
    // lies between (the address comparison inline, the bytes out of line).
    let diff = Diff::by_trimmed(
        &scratch.before,
        &scratch.after,
        |a, b| a.0 == b.0 && a.1 == b.1,
        |x| x.0,
        |a, b| a.1 == b.1 || same_bytes(gone, by_rowid.as_ref(), a.0, &nw[b.2].obj.bytes),
    );
    deliver_changed(&q.sinks, &mut q.shown, nw, diff, out);
}

/// Whether the old version of `rowid` in `gone` (found through `by_rowid` when
/// given) has the bytes `new`: an object a commit rewrote with the same bytes is
/// not "updated".
#[inline(never)]
fn same_bytes(
    gone: &[Entry],
    by_rowid: Option<&FxMap<i64, usize>>,
    rowid: i64,
    new: &[u8],
) -> bool {
    let i = match by_rowid {
        Some(m) => m.get(&rowid).copied(),
        None => gone.iter().position(|e| e.rowid == rowid),
    };
    i.is_some_and(|i| gone[i].obj.bytes == new)
}

/// Queue the window `nw` with its `diff` for every sink, unless nothing changed.
/// `shown`, the window of the last delivery, becomes `nw`'s objects.
fn deliver_changed(
    sinks: &[(u64, Arc<Shared<QueryUpdate>>)],
    shown: &mut Objects,
    nw: &[Entry],
    diff: Diff,
    out: &mut Vec<Delivery>,
) {
    if !diff.is_empty() {
        show(shown, nw, &diff);
        deliveries(
            sinks,
            QueryUpdate {
                objects: shown.clone(),
                diff,
            },
            out,
        );
    }
}

/// Make `shown` (the last delivered window) hold `nw`'s objects. When no delivery
/// holds it any more, `diff` edits it in place: a commit that moves one object
/// shifts a few slots instead of taking a new reference to every object in the
/// window (and dropping the old ones), which was most of a small delivery's cost.
/// A shared list, or a diff that does not fit it, gives a new list.
///
/// Why the edit is right: every change to a window reaches its subscribers as a
/// diff through here, so before this commit `shown` held the window's objects,
/// and the diff (against that window) turns it into `nw`. The slots the diff does
/// not name keep their objects; one the commit rewrote with the same bytes keeps
/// the older copy, which no reader can tell apart (debug builds check rowid and
/// bytes of every slot).
fn show(shown: &mut Objects, nw: &[Entry], diff: &Diff) {
    if let Some(v) = shown.unshared() {
        let edited = diff.apply_in_place(v, |j| Arc::clone(&nw[j].obj)) && v.len() == nw.len();
        debug_assert!(
            !edited
                || v.iter()
                    .zip(nw)
                    .all(|(o, e)| o.rowid == e.rowid && o.bytes == e.obj.bytes),
            "the window edited in place differs from the stored rows"
        );
        if !edited {
            v.clear();
            v.extend(nw.iter().map(|e| Arc::clone(&e.obj)));
        }
        return;
    }
    *shown = Objects::from(objects(nw));
}

/// One delivery of `u` per subscription sharing the query.
fn deliveries(sinks: &[(u64, Arc<Shared<QueryUpdate>>)], u: QueryUpdate, out: &mut Vec<Delivery>) {
    if let [rest @ .., (_, last)] = sinks {
        for (_, s) in rest {
            out.push(Delivery::Query(Arc::clone(s), u.clone()));
        }
        out.push(Delivery::Query(Arc::clone(last), u));
    }
}

/// Where a query subscription goes: an equality conjunct (primary key preferred),
/// else range conjuncts on one field, else the scan list.
fn place(cs: &mut CollSubs, q: &Compiled, schema: &Schema, id: u64) -> Placement {
    let Some(f) = &q.spec.filter else {
        return Placement::Scan;
    };
    let Some(t) = schema.table_reader(q.table) else {
        return Placement::Scan;
    };
    let mut list = Vec::new();
    conjuncts(f, &mut list);
    // Equality.
    let mut best: Option<(&FieldPath, Vec<HKey>)> = None;
    for e in &list {
        let (path, keys) = match e {
            Expr::Cmp {
                path,
                op: CmpOp::Eq,
                value,
            } => match hkey(SqlValue::from_value(value)) {
                Some(k) => (path, vec![k]),
                None => continue,
            },
            Expr::In { path, values } => {
                let mut ks: Vec<HKey> = Vec::new();
                for k in values.iter().filter_map(|v| hkey(SqlValue::from_value(v))) {
                    if !ks.contains(&k) {
                        ks.push(k);
                    }
                }
                (path, ks)
            }
            _ => continue,
        };
        let is_pk = q.pk.len() == 1 && q.pk[0] == *path;
        if best.is_none() || is_pk {
            best = Some((path, keys));
            if is_pk {
                break;
            }
        }
    }
    // The filter is this one equality (or IN list) over text or integers, for
    // which equal index keys are SQL's `=`: the index decides it alone.
    let exact = match list.as_slice() {
        [Expr::Cmp {
            op: CmpOp::Eq,
            value,
            ..
        }] => matches!(value, Value::Text(_) | Value::Int(_)),
        [Expr::In { values, .. }] => values
            .iter()
            .all(|v| matches!(v, Value::Text(_) | Value::Int(_))),
        _ => false,
    };
    if let Some((path, keys)) = best {
        if let Some(i) = cs.eq.iter().position(|x| x.path == *path) {
            return Placement::Eq(i, keys, exact);
        }
        if let Ok(resolved) = eval::resolve(t, &q.coll, "subscribe", path) {
            cs.eq.push(EqIndex {
                path: path.clone(),
                resolved,
                map: HashMap::new(),
                pk: q.pk.len() == 1 && q.pk[0] == *path,
                pre: FxMap::default(),
            });
            return Placement::Eq(cs.eq.len() - 1, keys, exact);
        }
    }
    // Ranges on the first field compared with <, <=, >, >=.
    let Some(path) = list.iter().find_map(|e| match e {
        Expr::Cmp {
            path,
            op: CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge,
            ..
        } => Some(path),
        _ => None,
    }) else {
        return Placement::Scan;
    };
    let (mut lo, mut hi): (Bound, Bound) = (None, None);
    let mut exact = true;
    let cmp = |a: &Value, b: &Value| order_cmp(SqlValue::from_value(a), SqlValue::from_value(b));
    for e in &list {
        match e {
            Expr::Cmp { path: p, op, value } if p == path && !matches!(op, CmpOp::Ne) => {
                if SqlValue::from_value(value) == SqlValue::Null {
                    return Placement::Scan; // never matches; keep it simple
                }
                let v = value.clone();
                if matches!(op, CmpOp::Gt | CmpOp::Ge | CmpOp::Eq) {
                    let incl = !matches!(op, CmpOp::Gt);
                    lo = match lo {
                        Some((b, bi)) => match cmp(&v, &b) {
                            Cmp::Greater => Some((v.clone(), incl)),
                            Cmp::Equal => Some((b, bi && incl)),
                            Cmp::Less => Some((b, bi)),
                        },
                        None => Some((v.clone(), incl)),
                    };
                }
                if matches!(op, CmpOp::Lt | CmpOp::Le | CmpOp::Eq) {
                    let incl = !matches!(op, CmpOp::Lt);
                    hi = match hi {
                        Some((b, bi)) => match cmp(&v, &b) {
                            Cmp::Less => Some((v, incl)),
                            Cmp::Equal => Some((b, bi && incl)),
                            Cmp::Greater => Some((b, bi)),
                        },
                        None => Some((v, incl)),
                    };
                }
            }
            _ => exact = false,
        }
    }
    let ri = match cs.ranges.iter().position(|r| r.path == *path) {
        Some(i) => i,
        None => match eval::resolve(t, &q.coll, "subscribe", path) {
            Ok(resolved) => {
                cs.ranges.push(RangeIndex {
                    path: path.clone(),
                    resolved,
                    subs: Vec::new(),
                    built: None,
                });
                cs.ranges.len() - 1
            }
            Err(_) => return Placement::Scan,
        },
    };
    let r = &mut cs.ranges[ri];
    r.subs.push((id, lo, hi, exact));
    r.built = None;
    Placement::Range(ri)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_schema::SortKey;

    /// Comparing on heads agrees with the full sort keys, both directions, for
    /// the values where an encoding could go wrong: NULL, the ends of i64,
    /// neighbours that share a head, and values that have no head.
    #[test]
    fn heads_order_entries_as_their_keys_do() {
        let schema = Schema::parse("table T { a: long = null; } root_type T;", "t.fbs").unwrap();
        let t = schema.reader("T").unwrap();
        let values = [
            Value::Null,
            Value::Int(i64::MIN),
            Value::Int(i64::MIN + 1),
            Value::Int(-3),
            Value::Int(-1),
            Value::Int(0),
            Value::Int(1),
            Value::Int(2),
            Value::Int(3),
            Value::Int(i64::MAX - 1),
            Value::Int(i64::MAX),
            Value::Float(2.5),
            Value::Text("a".into()),
        ];
        for desc in [false, true] {
            let path = t.path("a").unwrap();
            let key = if desc {
                SortKey::desc(path)
            } else {
                SortKey::asc(path)
            };
            let order = Order::new(&schema, "T", &[key]).unwrap();
            let entries: Vec<Entry> = values
                .iter()
                .enumerate()
                .flat_map(|(i, v)| {
                    [1, 2].map(|r| {
                        let rowid = (i as i64) * 2 + r;
                        let key = Keyed::new(RowKey {
                            values: vec![v.clone()],
                            rowid,
                        });
                        let obj = Arc::new(StoredObject {
                            rowid,
                            bytes: Vec::new(),
                        });
                        Entry::new(rowid, key, obj)
                    })
                })
                .collect();
            for a in &entries {
                for b in &entries {
                    assert_eq!(
                        cmp_entries(&order, a, b),
                        order.compare(&a.key.key, &b.key.key),
                        "desc {desc}: {:?} vs {:?}",
                        a.key.key,
                        b.key.key
                    );
                }
            }
        }
    }
}
