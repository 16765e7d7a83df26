//! The hub: every live subscription, indexed, updated in memory after each commit.

use std::cmp::Ordering as Cmp;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use keel_schema::{CmpOp, Expr, FieldPath, Object, ResolvedPath, Schema, Value};

use super::delivery::{lock, Shared};
use super::diff::Diff;
use super::{ObjectEvent, QueryUpdate};
use crate::db::Inner;
use crate::error::{Error, Result};
use crate::eval::{compare, Filter, Order, RowKey, SqlValue};
use crate::query::{Query, Source, Spec, StoredObject};
use crate::txn::Change;

pub(crate) type Obj = Arc<StoredObject>;

/// A value as a hash key, normalised so that values SQL's `=` calls equal hash
/// equal (`2 = 2.0`, `true = 1`). `NULL` has no key (it equals nothing).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum HKey {
    Int(i64),
    Float(u64),
    Text(String),
    Blob(Vec<u8>),
}

pub(crate) fn hkey(v: SqlValue<'_>) -> Option<HKey> {
    Some(match v {
        SqlValue::Null => return None,
        SqlValue::Int(i) => HKey::Int(i),
        SqlValue::Float(f) => {
            if f.fract() == 0.0
                && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f)
            {
                HKey::Int(f as i64)
            } else {
                HKey::Float(f.to_bits())
            }
        }
        SqlValue::Text(s) => HKey::Text(s.to_owned()),
        SqlValue::Blob(b) => HKey::Blob(b.to_vec()),
    })
}

pub(crate) fn hkeys(vs: &[Value]) -> Vec<HKey> {
    vs.iter()
        .map(|v| hkey(SqlValue::from_value(v)).unwrap_or(HKey::Int(i64::MIN)))
        .collect()
}

/// One entry of a query's stored prefix.
#[derive(Clone)]
struct Entry {
    key: RowKey,
    obj: Obj,
}

/// How a query subscription is found from a changed object.
#[derive(Debug, Clone)]
enum Placement {
    /// Under these values of the collection's equality index `path`.
    Eq(usize, Vec<HKey>),
    /// Checked against every change of the collection (after the range pre-check).
    Scan,
}

struct QuerySub {
    sink: Arc<Shared<QueryUpdate>>,
    spec: Spec,
    filter: Option<Filter>,
    order: Order,
    placement: Placement,
    /// Range conjuncts on pre-extracted values: (range path index, op, value).
    pre: Vec<(usize, CmpOp, Value)>,
    /// The exact first `rows.len()` matching objects in order.
    rows: Vec<Entry>,
    /// `rows` holds every matching object.
    complete: bool,
    /// Keep at most this many rows (offset + limit + slack); `None` without limit.
    cap: Option<usize>,
}

struct ObjSub {
    sink: Arc<Shared<ObjectEvent>>,
    key: Vec<HKey>,
    last: Option<Obj>,
}

struct EqIndex {
    path: FieldPath,
    resolved: ResolvedPath,
    map: HashMap<HKey, Vec<u64>>,
}

#[derive(Default)]
struct CollSubs {
    objects: HashMap<Vec<HKey>, Vec<u64>>,
    object_subs: HashMap<u64, ObjSub>,
    queries: HashMap<u64, QuerySub>,
    eq: Vec<EqIndex>,
    scan: Vec<u64>,
    ranges: Vec<(FieldPath, ResolvedPath)>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    colls: HashMap<String, CollSubs>,
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

impl Compiled {
    pub(crate) fn new(inner: &Inner, spec: Spec) -> Result<Compiled> {
        let c = inner.coll(&spec.collection, "subscribe")?;
        let schema = Arc::clone(&inner.schema);
        let filter = match &spec.filter {
            Some(e) => Some(Filter::with_schema(Arc::clone(&schema), &c.name, e)?),
            None => None,
        };
        let order = Order::with_schema(Arc::clone(&schema), &c.name, &spec.order)?;
        let cap = spec.limit.map(|l| {
            let l = usize::try_from(l).unwrap_or(usize::MAX);
            let o = usize::try_from(spec.offset).unwrap_or(usize::MAX);
            o.saturating_add(l).saturating_add((l / 4).clamp(4, 256))
        });
        let pk = c.key.iter().map(|k| k.path.path().clone()).collect();
        Ok(Compiled {
            spec,
            filter,
            order,
            cap,
            coll: c.name.clone(),
            table: c.table,
            pk,
        })
    }

    /// The stored prefix as read from disk on `conn`.
    fn read(&self, inner: &Inner, conn: &rusqlite::Connection) -> Result<(Vec<Entry>, bool)> {
        let mut spec = self.spec.clone();
        spec.offset = 0;
        spec.limit = self.cap.map(|c| c as u64);
        let q = Query {
            src: Source::Conn(inner, conn),
            spec,
        };
        let rows = q.all()?;
        let complete = match self.cap {
            Some(c) => rows.len() < c,
            None => true,
        };
        let rows = rows
            .into_iter()
            .map(|o| Entry {
                key: self.order.key(&o.bytes, o.rowid),
                obj: Arc::new(o),
            })
            .collect();
        Ok((rows, complete))
    }
}

fn window(spec: &Spec, rows: &[Entry]) -> Vec<Obj> {
    let start = usize::try_from(spec.offset)
        .unwrap_or(usize::MAX)
        .min(rows.len());
    let end = match spec.limit {
        Some(l) => start
            .saturating_add(usize::try_from(l).unwrap_or(usize::MAX))
            .min(rows.len()),
        None => rows.len(),
    };
    rows[start..end]
        .iter()
        .map(|e| Arc::clone(&e.obj))
        .collect()
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

    /// Register a query subscription: read its first result consistently with the
    /// commits the hub has seen, then index it. Returns its id and first window.
    pub(crate) fn add_query(
        &self,
        q: Compiled,
        sink: Arc<Shared<QueryUpdate>>,
    ) -> Result<(u64, Vec<Obj>)> {
        let inner = self.db.upgrade().ok_or_else(|| self.closed())?;
        inner.check_open("subscribe")?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let s0 = self.seq();
            let mut st;
            let (rows, complete) = if attempt > 3 {
                // Busy writer: read while holding the lock (no commit can be missed).
                st = lock(&self.state);
                inner.store.read(|c| q.read(&inner, c))?
            } else {
                let r = inner.store.read(|c| q.read(&inner, c))?;
                st = lock(&self.state);
                if self.seq() != s0 {
                    continue;
                }
                r
            };
            let first = window(&q.spec, &rows);
            let id = st.next_id;
            st.next_id += 1;
            let cs = st.colls.entry(q.coll.clone()).or_default();
            let placement = place(cs, &q, &self.schema);
            let pre = match placement {
                Placement::Scan => range_pre(cs, &q, &self.schema),
                Placement::Eq(..) => Vec::new(),
            };
            match &placement {
                Placement::Eq(p, keys) => {
                    for k in keys {
                        cs.eq[*p].map.entry(k.clone()).or_default().push(id);
                    }
                }
                Placement::Scan => cs.scan.push(id),
            }
            cs.queries.insert(
                id,
                QuerySub {
                    sink,
                    spec: q.spec,
                    filter: q.filter,
                    order: q.order,
                    placement,
                    pre,
                    rows,
                    complete,
                    cap: q.cap,
                },
            );
            return Ok((id, first));
        }
    }

    /// Register an object subscription; returns its id and the object as stored now.
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
        let mut attempt = 0;
        loop {
            attempt += 1;
            let s0 = self.seq();
            let mut st;
            let cur = if attempt > 3 {
                st = lock(&self.state);
                inner
                    .store
                    .read(|conn| inner.get_in(conn, c, "subscribe", &key, true))?
            } else {
                let r = inner
                    .store
                    .read(|conn| inner.get_in(conn, c, "subscribe", &key, true))?;
                st = lock(&self.state);
                if self.seq() != s0 {
                    continue;
                }
                r
            };
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
                        last: cur.clone(),
                    },
                );
            }
            return Ok((id, c.name.clone(), cur));
        }
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
        if let Some(q) = cs.queries.remove(&id) {
            match q.placement {
                Placement::Eq(p, keys) => {
                    for k in keys {
                        if let Some(v) = cs.eq[p].map.get_mut(&k) {
                            v.retain(|x| *x != id);
                            if v.is_empty() {
                                cs.eq[p].map.remove(&k);
                            }
                        }
                    }
                }
                Placement::Scan => cs.scan.retain(|x| *x != id),
            }
        }
    }

    /// Live subscriptions (object, query).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let st = lock(&self.state);
        st.colls.values().fold((0, 0), |(o, q), c| {
            (o + c.object_subs.len(), q + c.queries.len())
        })
    }

    /// The commit hook: runs on the writer thread after COMMIT.
    pub(crate) fn on_commit(&self, changes: &[Change]) {
        let mut out = Vec::new();
        {
            let mut st = lock(&self.state);
            self.seq.fetch_add(1, Ordering::AcqRel);
            let mut by_coll: Vec<(&str, Vec<&Change>)> = Vec::new();
            for c in changes {
                match by_coll.iter_mut().find(|(n, _)| *n == c.collection) {
                    Some((_, v)) => v.push(c),
                    None => by_coll.push((&c.collection, vec![c])),
                }
            }
            for (name, chs) in by_coll {
                if let Some(cs) = st.colls.get_mut(name) {
                    self.objects(cs, &chs, &mut out);
                    self.queries(cs, &chs, &mut out);
                }
            }
        }
        for d in out {
            match d {
                Delivery::Query(s, u) => s.deliver(u, false),
                Delivery::Object(s, e) => {
                    let last = matches!(e, ObjectEvent::Deleted);
                    s.deliver(e, last)
                }
            }
        }
    }

    fn objects(&self, cs: &mut CollSubs, chs: &[&Change], out: &mut Vec<Delivery>) {
        if cs.objects.is_empty() {
            return;
        }
        // Final state per key within this commit.
        let mut last: Vec<(Vec<HKey>, Option<(i64, &[u8])>)> = Vec::new();
        for c in chs {
            let k = hkeys(&c.key);
            if !cs.objects.contains_key(&k) {
                continue;
            }
            let v = c.new.as_deref().map(|b| (c.rowid, b));
            match last.iter_mut().find(|(x, _)| *x == k) {
                Some(e) => e.1 = v,
                None => last.push((k, v)),
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
                    }
                }
            }
            if obj.is_none() {
                cs.objects.remove(&k);
            }
        }
    }

    fn queries(&self, cs: &mut CollSubs, chs: &[&Change], out: &mut Vec<Delivery>) {
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
        // Collapse to (first old, last new) per rowid.
        let mut at: HashMap<i64, usize> = HashMap::new();
        let mut touches: Vec<(i64, Option<&[u8]>, Option<&[u8]>)> = Vec::new();
        for c in chs {
            match at.get(&c.rowid) {
                Some(&i) => touches[i].2 = c.new.as_deref(),
                None => {
                    at.insert(c.rowid, touches.len());
                    touches.push((c.rowid, c.old.as_deref(), c.new.as_deref()));
                }
            }
        }
        let mut per_sub: HashMap<u64, Vec<(usize, bool)>> = HashMap::new();
        let mut cands: Vec<u64> = Vec::new();
        let all: Vec<u64> = cs.queries.keys().copied().collect();
        for (ti, (_, old, new)) in touches.iter().enumerate() {
            let oo = old.map(|b| table.open(b));
            let no = new.map(|b| table.open(b));
            let unreadable = matches!(oo, Some(Err(_))) || matches!(no, Some(Err(_)));
            let oo = oo.and_then(|r| r.ok());
            let no = no.and_then(|r| r.ok());
            cands.clear();
            if unreadable {
                cands.extend_from_slice(&all);
            } else {
                for ix in &cs.eq {
                    for o in [&oo, &no].into_iter().flatten() {
                        let v = o
                            .get_ref(&ix.resolved)
                            .map_or(SqlValue::Null, SqlValue::from_ref);
                        if let Some(ids) = hkey(v).and_then(|k| ix.map.get(&k)) {
                            cands.extend_from_slice(ids);
                        }
                    }
                }
                let ext = |o: &Option<Object<'_, '_>>| -> Option<Vec<Value>> {
                    o.as_ref().map(|o| {
                        cs.ranges
                            .iter()
                            .map(|(_, r)| {
                                o.get_ref(r)
                                    .map_or(Value::Null, |v| SqlValue::from_ref(v).to_value())
                            })
                            .collect()
                    })
                };
                let (ov, nv) = (ext(&oo), ext(&no));
                let pass = |vals: &Option<Vec<Value>>, pre: &[(usize, CmpOp, Value)]| {
                    vals.as_ref().is_some_and(|vals| {
                        pre.iter().all(|(i, op, v)| {
                            compare(
                                SqlValue::from_value(&vals[*i]),
                                *op,
                                SqlValue::from_value(v),
                            ) == Some(true)
                        })
                    })
                };
                for id in &cs.scan {
                    if let Some(q) = cs.queries.get(id) {
                        if pass(&ov, &q.pre) || pass(&nv, &q.pre) {
                            cands.push(*id);
                        }
                    }
                }
            }
            cands.sort_unstable();
            cands.dedup();
            for id in &cands {
                let Some(q) = cs.queries.get(id) else {
                    continue;
                };
                let m = |o: &Option<Object<'_, '_>>, b: &Option<&[u8]>| match (&q.filter, b) {
                    (_, None) => false,
                    (None, Some(_)) => true,
                    (Some(f), Some(b)) => match o {
                        Some(o) => f.eval(o) == Some(true),
                        None => f.matches(b),
                    },
                };
                let (om, nm) = (m(&oo, old), m(&no, new));
                if om || nm {
                    per_sub.entry(*id).or_default().push((ti, nm));
                }
            }
        }
        if per_sub.is_empty() {
            return;
        }
        let mut arcs: Vec<Option<Obj>> = vec![None; touches.len()];
        let inner = self.db.upgrade();
        for (id, mine) in per_sub {
            let Some(q) = cs.queries.get_mut(&id) else {
                continue;
            };
            let old_win = window(&q.spec, &q.rows);
            let touched: HashSet<i64> = mine.iter().map(|(ti, _)| touches[*ti].0).collect();
            let boundary = if q.complete {
                None
            } else {
                q.rows.last().map(|e| e.key.clone())
            };
            let mut add: Vec<Entry> = Vec::new();
            for (ti, nm) in &mine {
                if !nm {
                    continue;
                }
                let (rowid, _, new) = touches[*ti];
                let Some(new) = new else { continue };
                let obj = arcs[*ti]
                    .get_or_insert_with(|| {
                        Arc::new(StoredObject {
                            rowid,
                            bytes: new.to_vec(),
                        })
                    })
                    .clone();
                let key = q.order.key(&obj.bytes, rowid);
                if boundary
                    .as_ref()
                    .is_some_and(|b| q.order.compare(&key, b) == Cmp::Greater)
                {
                    continue;
                }
                add.push(Entry { key, obj });
            }
            add.sort_by(|a, b| q.order.compare(&a.key, &b.key));
            let old_rows = std::mem::take(&mut q.rows);
            let mut rows = Vec::with_capacity(old_rows.len() + add.len());
            let mut add = add.into_iter().peekable();
            for e in old_rows {
                if touched.contains(&e.key.rowid) {
                    continue;
                }
                while let Some(a) = add.peek() {
                    if q.order.compare(&a.key, &e.key) == Cmp::Less {
                        rows.extend(add.next());
                    } else {
                        break;
                    }
                }
                rows.push(e);
            }
            rows.extend(add);
            if let Some(cap) = q.cap {
                if rows.len() > cap {
                    rows.truncate(cap);
                    q.complete = false;
                }
            }
            q.rows = rows;
            if !q.complete && q.rows.len() < needed(&q.spec) {
                // The window ran short: refill the prefix from disk.
                if let Some(inner) = &inner {
                    let c = Compiled {
                        spec: q.spec.clone(),
                        filter: None,
                        order: q.order.clone(),
                        cap: q.cap,
                        coll: String::new(),
                        table: 0,
                        pk: Vec::new(),
                    };
                    match inner.store.read(|conn| c.read(inner, conn)) {
                        Ok((rows, complete)) => {
                            q.rows = rows;
                            q.complete = complete;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "subscription refill failed")
                        }
                    }
                }
            }
            let new_win = window(&q.spec, &q.rows);
            let diff = Diff::between(&old_win, &new_win);
            if !diff.is_empty() {
                out.push(Delivery::Query(
                    Arc::clone(&q.sink),
                    QueryUpdate {
                        objects: new_win,
                        diff,
                    },
                ));
            }
        }
    }
}

/// Choose the equality index for a query: a conjunct `path = v` or `path IN (…)`,
/// preferring the primary key.
fn place(cs: &mut CollSubs, q: &Compiled, schema: &Schema) -> Placement {
    let Some(f) = &q.spec.filter else {
        return Placement::Scan;
    };
    let mut cs_list = Vec::new();
    conjuncts(f, &mut cs_list);
    let mut best: Option<(&FieldPath, Vec<HKey>)> = None;
    for e in cs_list {
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
                let mut ks: Vec<HKey> = values
                    .iter()
                    .filter_map(|v| hkey(SqlValue::from_value(v)))
                    .collect();
                ks.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
                ks.dedup();
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
    let Some((path, keys)) = best else {
        return Placement::Scan;
    };
    if let Some(i) = cs.eq.iter().position(|x| x.path == *path) {
        return Placement::Eq(i, keys);
    }
    let Some(t) = schema.table_reader(q.table) else {
        return Placement::Scan;
    };
    match crate::eval::resolve(t, &q.coll, "subscribe", path) {
        Ok(resolved) => {
            cs.eq.push(EqIndex {
                path: path.clone(),
                resolved,
                map: HashMap::new(),
            });
            Placement::Eq(cs.eq.len() - 1, keys)
        }
        Err(_) => Placement::Scan,
    }
}

/// The range conjuncts (`<`, `<=`, `>`, `>=`, `!=` on a field) of a scanned query,
/// checked on values extracted once per changed object before the full filter.
fn range_pre(cs: &mut CollSubs, q: &Compiled, schema: &Schema) -> Vec<(usize, CmpOp, Value)> {
    let Some(f) = &q.spec.filter else {
        return Vec::new();
    };
    let Some(t) = schema.table_reader(q.table) else {
        return Vec::new();
    };
    let mut list = Vec::new();
    conjuncts(f, &mut list);
    let mut pre = Vec::new();
    for e in list {
        let Expr::Cmp { path, op, value } = e else {
            continue;
        };
        let i = match cs.ranges.iter().position(|(p, _)| p == path) {
            Some(i) => i,
            None => match crate::eval::resolve(t, &q.coll, "subscribe", path) {
                Ok(r) => {
                    cs.ranges.push((path.clone(), r));
                    cs.ranges.len() - 1
                }
                Err(_) => continue,
            },
        };
        pre.push((i, *op, value.clone()));
    }
    pre
}
