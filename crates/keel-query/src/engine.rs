//! The engine state every part of a database shares: [`Inner`] (the store, the
//! schema's collections, the change hooks, the dictionary's cache, the subscription
//! hub, the fetch pool), the write-closure marker, and [`Task`].
//!
//! It sits below the modules that use it: [`Database`](crate::db::database::Database) (`db/database.rs`)
//! is only the public facade over an `Arc<Inner>`, and `txn`, `query`, `subscribe`
//! and `dictionary` reach this module, never `db/database.rs`, for the shared state. It
//! names none of them: the subscription hub, which runs queries through the engine,
//! is held as a [`CommitObserver`]; the dictionary's cache (`dictionary::shared`)
//! sits below the engine and reaches it back through its `DictHost` trait.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::task::{Context, Poll};

use keel_schema::DynamicTable;
use keel_storage::{Store, WriteFuture, WriteTxn};

use crate::base::change::Change;
use crate::base::error::{Error, Result};
use crate::base::pool::Pool;
use crate::base::pool::Rejected;
use crate::dictionary::shared;
use crate::dictionary::shared::{DictHost, Shared as DictShared};
use crate::dictionary::staged::TxnState;
use crate::feed::Feed;
use crate::layout::outbox;
use crate::layout::table::{table_columns, Coll};
use crate::layout::vector_table;
use crate::vector::cache::{VectorCache, Written};
use crate::watch::{Demand, Looked, Reread, Watch};
use keel_schema::Schema;

pub(crate) type HookFn = dyn Fn(&[Change]) + Send + Sync;

/// Where a change hook runs among the others of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Place {
    /// Ahead of every other.
    First,
    /// In registration order.
    Among,
    /// Behind every other.
    Last,
}

/// A registered change hook: its id, the function, whether it follows other
/// connections' commits, and its [`Place`] (the list is kept sorted by it, so
/// every walk over it calls the hooks in their places).
type Hook = (u64, Arc<HookFn>, bool, Place);

/// A value of [`Inner::foreign_seen`] no count of foreign commits reaches: the
/// next check finds "another connection committed" and reads everything again.
const NOT_ACTED: u64 = u64::MAX;

/// What the engine asks of the subscription hub (`subscribe::hub::Hub`, created by
/// the first subscription). The hub sits above the engine — it runs [`Query`]s
/// through it and keeps a `Weak<Inner>` — so the engine holds it through this trait
/// instead of naming it.
///
/// [`Query`]: crate::query::fetch::Query
pub(crate) trait CommitObserver: Send + Sync {
    /// Whether write closures must record their changes for it.
    fn interested(&self) -> bool;
    /// After COMMIT, with the changes the write closures recorded;
    /// `one_collection`: they are all in one collection.
    fn on_commit(&self, changes: &[Change], one_collection: bool);
    /// A write committed unrecorded while it was interested: re-read what it shows.
    fn resync(&self);
    /// Rows another process committed, as they are now (the change feed): no
    /// old bytes, and an empty key for a row logged without one.
    fn on_remote(&self, changes: &[Change]);
    /// The database is closing.
    fn close(&self);
    /// The observer as `Any`, for the module that installed it to get its own
    /// type back.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

pub(crate) struct Inner {
    pub(crate) store: Store,
    pub(crate) schema: Arc<Schema>,
    pub(crate) colls: Vec<Coll>,
    pub(crate) by_name: HashMap<String, usize>,
    /// Registered change hooks ([`Hook`]), sorted by their [`Place`].
    hooks: RwLock<Vec<Hook>>,
    /// Registered change hooks (their count: `recording` reads it on every write).
    hook_count: AtomicUsize,
    /// How many of them also follow other connections' commits.
    foreign_hook_count: AtomicUsize,
    pub(crate) next_hook: AtomicU64,
    pub(crate) closed: AtomicBool,
    pub(crate) builds: Mutex<Vec<WriteFuture<Result<()>>>>,
    pub(crate) path: PathBuf,
    /// The key-value dictionary's cache and pending writes.
    pub(crate) dict: Arc<DictShared>,
    /// The subscription hub, created by the first subscription.
    pub(crate) hub: std::sync::OnceLock<Arc<dyn CommitObserver>>,
    /// The threads that run the `_async` fetches (`keel-fetch-N`).
    pub(crate) fetch_pool: Pool,
    /// Collections whose table this open created (see [`Inner::unborn`]).
    pub(crate) created: Vec<String>,
    /// The cross-process change feed (`StoreOptions::share_changes`; see `feed`).
    pub(crate) feed: Option<Arc<Feed>>,
    /// The count of other connections' commits ([`Store::foreign_commits`]) this
    /// handle last acted on (see [`Inner::notice_foreign`]).
    /// Shared with the re-reads it queues, which reset it when a suspend cut them
    /// short ([`Inner::external_changes`]).
    pub(crate) foreign_seen: Arc<AtomicU64>,
    /// The file's schema cookie (`PRAGMA schema_version`) when its layout was last
    /// found to be the one this handle writes (`-1`: not checked yet); see
    /// [`Inner::check_layout`].
    layout_cookie: AtomicI64,
    /// In-memory copies of vector fields' packed columns (`vector/cache.rs`).
    pub(crate) vector_cache: VectorCache,
    /// The live lists across a relation (`relations/registry.rs`), created with
    /// the first: `Any`, since that band sits above this one.
    pub(crate) live_lists: std::sync::OnceLock<Arc<dyn Any + Send + Sync>>,
    /// The watch on the database's files while anything is live (`watch.rs`).
    pub(crate) watch: Watch,
    /// Told after a commit appended sync operations (`layout/outbox.rs`).
    pub(crate) outbox_waker: outbox::Waker,
}

impl Inner {
    /// The shared state of a freshly opened database (`Database::open` builds the
    /// parts): the dictionary's cache and the hub point back to it weakly.
    // One argument per part `Database::open` builds; a builder would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        store: Store,
        schema: Arc<Schema>,
        colls: Vec<Coll>,
        by_name: HashMap<String, usize>,
        builds: Vec<WriteFuture<Result<()>>>,
        readers: usize,
        created: Vec<String>,
        feed: Option<Arc<Feed>>,
        vector_cache_bytes: usize,
    ) -> Arc<Inner> {
        let path = store.path().to_path_buf();
        let foreign_seen = Arc::new(AtomicU64::new(store.foreign_commits(false)));
        let watched = feed.is_none();
        Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            watch: {
                let weak = weak.clone();
                let paused = weak.clone();
                let look = move |again| {
                    weak.upgrade()
                        .map_or(Looked::Nothing, |i| i.look_foreign(again))
                };
                // While suspended, resume catches up (`Database::resume`).
                let paused = move || paused.upgrade().is_none_or(|i| i.store.is_suspended());
                Watch::new(&path, watched, Arc::new(look), Arc::new(paused))
            },
            store,
            schema,
            colls,
            by_name,
            hooks: RwLock::new(Vec::new()),
            hook_count: AtomicUsize::new(0),
            foreign_hook_count: AtomicUsize::new(0),
            next_hook: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            builds: Mutex::new(builds),
            path,
            dict: DictShared::new(weak.clone() as std::sync::Weak<dyn DictHost>),
            hub: std::sync::OnceLock::new(),
            fetch_pool: Pool::new(readers),
            created,
            feed,
            foreign_seen,
            layout_cookie: AtomicI64::new(-1),
            live_lists: std::sync::OnceLock::new(),
            vector_cache: VectorCache::new(vector_cache_bytes),
            outbox_waker: outbox::Waker::default(),
        })
    }

    /// Refuses a write when the tables on `conn` (the writer, inside the write
    /// transaction, so nothing can change them under it) are not laid out as this
    /// handle writes them: another process — a newer build of the app, say —
    /// added, dropped or redefined an index column since this one opened the
    /// file. Writing on would leave that column wrong (a NULL where the newer
    /// build's index expects the field), so the write fails with
    /// [`Error::SchemaChanged`] until the database is opened again. SQLite bumps
    /// the schema cookie on every change of the schema, so while it stays the same
    /// this costs one `PRAGMA schema_version` per write closure; only a changed
    /// cookie (another process's DDL, or this process's own index builds) makes
    /// it compare the columns and the index signatures again.
    pub(crate) fn check_layout(&self, w: &WriteTxn<'_>, op: &'static str) -> Result<()> {
        let err = |e| Error::sqlite("check the file's layout", "sqlite_schema", e);
        let cookie = w.schema_version().map_err(err)?;
        let conn: &rusqlite::Connection = w;
        if cookie == self.layout_cookie.load(Ordering::Acquire) {
            return Ok(());
        }
        let sigs: HashMap<String, Option<String>> = {
            let mut st = conn
                .prepare("SELECT name, sig FROM keel_index")
                .map_err(err)?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(err)?
                .collect::<rusqlite::Result<_>>()
                .map_err(err)?;
            rows
        };
        let changed = |c: &Coll, message: String| Error::SchemaChanged {
            op,
            collection: c.name.clone(),
            path: self.path.clone(),
            message,
        };
        for c in &self.colls {
            let mut has = table_columns(conn, &c.ident).map_err(err)?;
            let mut writes: Vec<String> = std::iter::once("rowid".to_string())
                .chain((0..c.key.len()).map(|i| format!("k{i}")))
                .chain(std::iter::once("body".to_string()))
                .chain(c.indexes.iter().map(|ix| ix.column.clone()))
                .collect();
            has.sort();
            writes.sort();
            if has != writes {
                return Err(changed(
                    c,
                    format!("its table has columns {has:?}, this database writes {writes:?}"),
                ));
            }
            for ix in &c.indexes {
                if let Some(Some(sig)) = sigs.get(&ix.name) {
                    if *sig != ix.sig {
                        return Err(changed(
                            c,
                            format!(
                                "index {} holds {sig}, this database writes {}",
                                ix.name, ix.sig
                            ),
                        ));
                    }
                }
            }
        }
        self.layout_cookie.store(cookie, Ordering::Release);
        Ok(())
    }

    /// The body of [`Database::close`](crate::db::database::Database::close): the dictionary's
    /// last flush is queued before the database is marked closed.
    pub(crate) fn close(self: &Arc<Inner>) -> Task<()> {
        let dict_flush = shared::before_close(&self.dict);
        self.closed.store(true, Ordering::SeqCst);
        self.watch.close();
        let inner = Arc::clone(self);
        Task::spawn(move || {
            if let Some(f) = &inner.feed {
                f.stop();
            }
            let dict = shared::settle_before_close(&inner.dict, dict_flush, &inner.path);
            let r = inner.store.close().map_err(Error::from);
            // Lost dictionary values are the error the caller must see first.
            let r = dict.and(r);
            if let Some(hub) = inner.hub.get() {
                hub.close();
            }
            shared::after_close(&inner.dict);
            inner.fetch_pool.close();
            r
        })
    }

    /// Another process may have committed while this one could not see it (found
    /// by [`Database::resume`](crate::db::database::Database::resume)). The hook point for
    /// cross-process catch-up: for now the dictionary's cache forgets its
    /// committed values, and every live query and object subscription is read
    /// again and delivers what differs (dictionary subscriptions are not told). It runs on the writer thread, from an
    /// empty write's commit callback, so its deliveries stay ordered with those of
    /// commits; the write waits for resume like the dictionary's flush.
    pub(crate) fn external_changes(&self) {
        drop(self.reread_all());
    }

    /// [`Inner::external_changes`], returning the queued re-read (`None`: nothing
    /// to re-read).
    fn reread_all(&self) -> Option<Reread> {
        // The dictionary's cache may hold values the other process replaced.
        self.dict.forget_clean();
        let hub = self.hub.get().cloned();
        let hooks = if self.follows_foreign() {
            self.hooks(true)
        } else {
            Vec::new()
        };
        if hub.is_none() && hooks.is_empty() {
            return None;
        }
        // On the writer thread, in commit order, like a local commit's
        // deliveries; the hooks learn only that something changed. A suspend that
        // begins meanwhile waits for the writer, so the reads must not wait for
        // resume: they fail at once, and the handle forgets that it acted on the
        // foreign commits, so resume (`notice_foreign`) reads everything again.
        let (store, seen) = (self.store.clone(), Arc::clone(&self.foreign_seen));
        Some(self.store.write_waiting(move |w| {
            w.on_commit(Box::new(move || {
                keel_storage::fail_fast_while_suspended(|| {
                    if let Some(hub) = hub {
                        hub.resync();
                    }
                    for h in hooks {
                        h(&[]);
                    }
                });
                if store.is_suspended() {
                    seen.store(NOT_ACTED, Ordering::Release);
                }
            }));
            Ok::<(), keel_storage::Error>(())
        }))
    }

    /// Without the change feed: if another connection (another process, or another
    /// handle on the file) committed since this handle last looked
    /// ([`Store::foreign_commits`]; `probe`: check now, if the writer connection
    /// is free), read every live subscription again and forget the dictionary's
    /// clean cache ([`Inner::external_changes`]). Called at each read through the
    /// database while a subscription is live, after each local commit, at resume
    /// and by `Database::catch_up`, so a live query never
    /// stays silently stale: it follows another process's commits at this
    /// process's next read, commit or resume. With the feed its catch-up does this
    /// row by row.
    pub(crate) fn notice_foreign(&self, probe: bool) {
        if self.foreign_since(probe) {
            self.external_changes();
        }
    }

    /// Whether another connection committed since this handle last acted on it
    /// (then it acts now: the caller re-reads). Never with the feed.
    fn foreign_since(&self, probe: bool) -> bool {
        if self.feed.is_some() {
            return false;
        }
        let n = self.store.foreign_commits(probe);
        self.foreign_seen.load(Ordering::Acquire) != n
            && self.foreign_seen.swap(n, Ordering::AcqRel) != n
    }

    /// The file watch's look (`watch.rs`, on its `keel-watch` thread): the
    /// foreign-commit check, and the re-read when it found one (or when `again`:
    /// the last one never ran).
    fn look_foreign(&self, again: bool) -> Looked {
        if self.check_open("watch the files").is_err() {
            return Looked::Nothing;
        }
        // Checked even when `again`: the check moves the count this re-read covers.
        let found = self.foreign_since(true);
        if !found && !again {
            return Looked::Nothing;
        }
        Looked::Changed(self.reread_all())
    }

    /// [`check_open`](Self::check_open) for a read through the database (not a
    /// `Txn`): inside one of this database's write closures such a read would use a
    /// pooled connection and miss the writes of this closure and of those queued
    /// before it in the same group commit, so it fails loudly instead of showing
    /// an older state.
    pub(crate) fn check_read(&self, op: &'static str) -> Result<()> {
        self.check_open(op)?;
        if in_write_closure(self) {
            return Err(Error::Unsupported {
                op,
                hint: "inside a write closure, read through its Txn (txn.fetch(), txn.get(), txn.query()): it sees this closure's writes and those of the closures committed with it, which a read through the Database cannot",
                path: self.path.clone(),
            });
        }
        // Only while a subscription is live: there is nothing else a read could
        // find stale (the read itself sees every commit), and the check costs a
        // pragma on every read (see the `xproc` bench).
        if self.hub.get().is_some_and(|h| h.interested()) || self.follows_foreign() {
            self.notice_foreign(true);
        }
        Ok(())
    }

    pub(crate) fn check_open(&self, op: &'static str) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            Err(Error::Closed {
                op,
                path: self.path.clone(),
            })
        } else {
            Ok(())
        }
    }

    pub(crate) fn coll(&self, name: &str, op: &'static str) -> Result<&Coll> {
        // Typed reads name the collection in full: a few string compares cost
        // less than hashing the name (the map also knows bare names).
        if let Some(c) = self.colls.iter().find(|c| c.name == name) {
            return Ok(c);
        }
        self.by_name
            .get(name)
            .map(|i| &self.colls[*i])
            .ok_or_else(|| Error::UnknownCollection {
                op,
                collection: name.to_owned(),
            })
    }

    pub(crate) fn table(&self, c: &Coll) -> Result<DynamicTable<'_>> {
        self.schema
            .table_reader(c.table)
            .ok_or_else(|| Error::UnknownCollection {
                op: "read table",
                collection: c.name.clone(),
            })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// True if `c` is a collection this open adds whose table `conn` cannot see
    /// yet: before the store is durable the schema transaction that creates it has
    /// not committed (it must not commit on top of an unsynced WAL). Such a
    /// collection is empty — no write can have committed to it — so reads answer
    /// "nothing" instead of SQLite's "no such table". Costs one lookup, only for a
    /// collection new to the file, only until durable.
    pub(crate) fn unborn(&self, conn: &rusqlite::Connection, c: &Coll) -> Result<bool> {
        if !self.created.contains(&c.name) || self.store.is_durable() {
            return Ok(false);
        }
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [&c.name],
                |r| r.get(0),
            )
            .map_err(|e| Error::sqlite("check collection table", &c.name, e))?;
        Ok(n == 0)
    }

    /// Whether write closures must record their changes (old and new bytes): only
    /// while a change hook is registered or a subscription is live (or being made).
    /// Recording costs a SELECT and two copies per updated object, so it stops with
    /// the last subscription.
    pub(crate) fn recording(&self) -> bool {
        self.hook_count.load(Ordering::Acquire) > 0
            || self.hub.get().is_some_and(|h| h.interested())
    }

    /// The commit sequence of one write closure that ran to its end without
    /// error, inside its savepoint: note other processes' commits, log its
    /// changes for other processes (in the savepoint, so the log rolls back with
    /// the closure), then register what runs after COMMIT, in this order: the
    /// dictionary's changes reach its cache, the changes reach the hooks and the
    /// hub (or, unrecorded, a "read again"), and the feed's gate is left. An
    /// aborted closure is refused with [`Error::Aborted`] and registers nothing.
    pub(crate) fn commit_closure(
        self: &Arc<Self>,
        w: &mut WriteTxn<'_>,
        outcome: WriteOutcome,
    ) -> Result<()> {
        let WriteOutcome {
            mut changes,
            one_collection,
            aborted,
            recorded,
            from_server,
            dictionary,
            vectors,
        } = outcome;
        if aborted {
            return Err(Error::Aborted {
                path: self.path.clone(),
            });
        }
        if !from_server && self.append_outbox(w, &changes)? {
            let me = Arc::clone(self);
            w.on_commit(Box::new(move || me.outbox_waker.wake()));
        }
        if !recorded {
            // Recorded only for the outbox: the hub and hooks were not asking.
            changes.clear();
        }
        // Another process committed before this transaction (the writer checked
        // at BEGIN): read every subscription again after this commit.
        self.notice_foreign(false);
        let logged = match &self.feed {
            Some(feed) => {
                let (keys, clear) = dictionary
                    .as_ref()
                    .map(|d| d.feed_keys())
                    .unwrap_or_default();
                if changes.is_empty() && keys.is_empty() && !clear {
                    None
                } else {
                    let entered = feed.enter();
                    feed.log(w, &changes, &keys, clear)?;
                    Some(entered)
                }
            }
            None => None,
        };
        if !vectors.is_empty() {
            self.commit_vectors(w, vectors)?;
        }
        if let Some(d) = dictionary {
            // Dropped unrun if the commit fails: the dictionary restores itself.
            w.on_commit(Box::new(move || d.commit()));
        }
        if !changes.is_empty() {
            let me = Arc::clone(self);
            w.on_commit(Box::new(move || me.deliver(&changes, one_collection)));
        } else if !recorded {
            let me = Arc::clone(self);
            w.on_commit(Box::new(move || me.unrecorded_commit()));
        }
        if let Some(l) = logged {
            // After this closure's deliveries: post, then leave the gate.
            w.on_commit(Box::new(move || l.committed()));
        }
        Ok(())
    }

    /// The vector tables a closure wrote (`vector/cache.rs`): in its savepoint,
    /// the writer's marker row goes and each table gets its one new
    /// generation; after COMMIT, before any delivery (a hook's query then
    /// reads the patched copy), the copies still at the generation the closure
    /// started from get its rows.
    fn commit_vectors(self: &Arc<Self>, w: &mut WriteTxn<'_>, written: Written) -> Result<()> {
        let err = |c: &str, e| Error::sqlite("commit", c, e);
        vector_table::unmark_writing(w).map_err(|e| err("keel_meta", e))?;
        let mut patches = Vec::new();
        for cw in written.colls {
            let Some(v) = self.coll(&cw.name, "commit")?.vectors.as_ref() else {
                continue;
            };
            let bumped = v.bump(w).map_err(|e| err(&cw.name, e))?;
            if let (Some((from, to)), Some(rows)) = (bumped, cw.rows) {
                patches.push((cw.name, from, to, rows));
            }
        }
        if !patches.is_empty() {
            let me = Arc::clone(self);
            w.on_commit(Box::new(move || {
                for (name, from, to, rows) in patches {
                    if let Some(v) = me
                        .coll(&name, "commit")
                        .ok()
                        .and_then(|c| c.vectors.as_ref())
                    {
                        me.vector_cache.patch(&name, v, from, to, &rows);
                    }
                }
            }));
        }
        Ok(())
    }

    /// Appends the operations of `changes` to synced collections to the outbox, in
    /// the closure's savepoint; returns whether there were any.
    fn append_outbox(&self, w: &WriteTxn<'_>, changes: &[Change]) -> Result<bool> {
        let synced = |name: &str| {
            self.coll(name, "sync")
                .ok()
                .filter(|c| c.synced)
                .map(|c| c.table)
        };
        if !self.colls.iter().any(|c| c.synced)
            || !changes.iter().any(|c| synced(&c.collection).is_some())
        {
            return Ok(false);
        }
        outbox::append(w, &self.schema, changes, synced)
            .map_err(|e| Error::sqlite("append to the sync outbox", outbox::OUTBOX, e))?;
        Ok(true)
    }

    /// After COMMIT: the change hooks first (in registration order), then the
    /// subscription hub.
    pub(crate) fn deliver(&self, changes: &[Change], one_collection: bool) {
        self.run_hooks(changes);
        if let Some(hub) = self.hub.get() {
            hub.on_commit(changes, one_collection);
        }
    }

    /// Register change hooks under one id, each in its [`Place`] (several: all
    /// in one step, so a commit calls either all of them or none); `foreign`:
    /// they also follow other connections' commits ([`Inner::foreign_changes`]).
    /// Returns the id for [`remove_hook`](Self::remove_hook).
    pub(crate) fn add_hooks(&self, placed: Vec<(Place, Arc<HookFn>)>, foreign: bool) -> u64 {
        let id = self.next_hook.fetch_add(1, Ordering::Relaxed);
        let mut hooks = self.hooks.write().unwrap_or_else(|p| p.into_inner());
        for (place, hook) in placed {
            let at = hooks
                .iter()
                .position(|h| h.3 > place)
                .unwrap_or(hooks.len());
            hooks.insert(at, (id, hook, foreign, place));
        }
        self.count_hooks(&hooks);
        id
    }

    /// Register one change hook among the others ([`Inner::add_hooks`]).
    pub(crate) fn add_hook(&self, hook: Arc<HookFn>, foreign: bool) -> u64 {
        self.add_hooks(vec![(Place::Among, hook)], foreign)
    }

    /// Remove the change hook `id` (nothing if it is gone already).
    pub(crate) fn remove_hook(&self, id: u64) {
        let mut hooks = self.hooks.write().unwrap_or_else(|p| p.into_inner());
        hooks.retain(|h| h.0 != id);
        self.count_hooks(&hooks);
    }

    fn count_hooks(&self, hooks: &[Hook]) {
        self.hook_count.store(hooks.len(), Ordering::Release);
        let foreign = hooks.iter().filter(|h| h.2).count();
        self.foreign_hook_count.store(foreign, Ordering::Release);
        self.watch.demand(Demand::Hooks, foreign > 0);
    }

    /// The registered hooks (`foreign_only`: those that follow other
    /// connections' commits), cloned so none is called under the lock.
    fn hooks(&self, foreign_only: bool) -> Vec<Arc<HookFn>> {
        self.hooks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|h| h.2 || !foreign_only)
            .map(|h| Arc::clone(&h.1))
            .collect()
    }

    /// Whether a hook follows other connections' commits: then, as while a
    /// subscription is live, reads look for them ([`Inner::notice_foreign`]).
    pub(crate) fn follows_foreign(&self) -> bool {
        self.foreign_hook_count.load(Ordering::Acquire) > 0
    }

    /// Call every change hook with `changes` (empty: a commit whose changes were
    /// not recorded, see [`Inner::unrecorded_commit`]).
    fn run_hooks(&self, changes: &[Change]) {
        if self.hook_count.load(Ordering::Acquire) > 0 {
            for h in self.hooks(false) {
                h(changes);
            }
        }
    }

    /// Other connections committed `changes` (read back by a catch-up: the
    /// current bytes as `new`, no `old`; empty: changes not known one by one —
    /// read again): call the hooks that follow them. A catch-up calls this on
    /// the `keel-feed` thread after the subscription hub's deliveries.
    pub(crate) fn foreign_changes(&self, changes: &[Change]) {
        if self.follows_foreign() {
            for h in self.hooks(true) {
                h(changes);
            }
        }
    }

    /// A write closure ran without recording and has committed. If a subscription
    /// appeared meanwhile, its first result may have been read before this commit:
    /// the hub re-reads what its subscriptions show (instead of the first
    /// subscription waiting for the writer), and a change hook registered
    /// meanwhile is called with no changes — "something committed that was not
    /// recorded: read again".
    pub(crate) fn unrecorded_commit(&self) {
        self.run_hooks(&[]);
        if let Some(hub) = self.hub.get() {
            if hub.interested() {
                hub.resync();
            }
        }
    }
}

/// What one write closure left for the commit ([`Inner::commit_closure`]):
/// `Txn::finish` hands it over.
pub(crate) struct WriteOutcome {
    /// The changes it recorded, in order (none when it did not record).
    pub(crate) changes: Vec<Change>,
    /// Whether every change is to one collection (the hub's fast path).
    pub(crate) one_collection: bool,
    /// It called `Txn::abort`: it rolls back, and its write fails.
    pub(crate) aborted: bool,
    /// It recorded its changes (a hook or a subscription was live, or the
    /// feed needs them), so an empty `changes` means it changed nothing.
    pub(crate) recorded: bool,
    /// The sync client's apply of downloaded rows: nothing goes to the outbox.
    pub(crate) from_server: bool,
    /// Its dictionary changes, staged until the commit.
    pub(crate) dictionary: Option<TxnState>,
    /// The rows it wrote to vector tables (`vector/cache.rs`).
    pub(crate) vectors: Written,
}

impl DictHost for Inner {
    fn store(&self) -> &Store {
        &self.store
    }
    fn check_open(&self, op: &'static str) -> Result<()> {
        Inner::check_open(self, op)
    }
    fn feed(&self) -> Option<&Arc<Feed>> {
        self.feed.as_ref()
    }
    fn spawn_read(&self, job: Box<dyn FnOnce() + Send>) -> bool {
        self.fetch_pool.submit(job).is_ok()
    }
}

thread_local! {
    /// The databases (their `Inner` addresses) whose write closure is running on
    /// this thread: a writer thread runs one closure at a time, but closures of one
    /// database may write to another.
    static WRITING: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) fn in_write_closure(inner: &Inner) -> bool {
    let me = inner as *const Inner as usize;
    WRITING.with(|w| w.borrow().contains(&me))
}

/// Marks `inner`'s write closure as running on this thread until dropped.
pub(crate) struct WritingGuard(usize);

impl WritingGuard {
    pub(crate) fn enter(inner: &Inner) -> WritingGuard {
        let me = inner as *const Inner as usize;
        WRITING.with(|w| w.borrow_mut().push(me));
        WritingGuard(me)
    }
}

impl Drop for WritingGuard {
    fn drop(&mut self) {
        WRITING.with(|w| {
            let mut w = w.borrow_mut();
            if let Some(i) = w.iter().rposition(|x| *x == self.0) {
                w.remove(i);
            }
        });
    }
}

/// A future that resolves when a job running on a keel-owned thread finishes
/// (async fetches, [`Database::close`](crate::db::database::Database::close)). Runtime-agnostic; block with
/// [`Task::wait`]. Async fetches run on the database's small fetch pool
/// (threads `keel-fetch-N`, at most the reader pool size, joined by
/// [`Database::close`](crate::db::database::Database::close)), not on a thread of their own.
///
/// ```
/// # use keel_query::{Database, StoreOptions};
/// # use keel_schema::Schema;
/// # let dir = tempfile::tempdir().unwrap();
/// # let schema = Schema::parse("table T { id: int (primary); } root_type T;", "t.fbs")?;
/// let db = Database::open(dir.path().join("t.db"), schema, StoreOptions::default())?;
/// let n = futures::executor::block_on(async { db.query("T").count() })?;
/// db.close().wait()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "the job runs anyway; the task tells you its result"]
pub struct Task<T> {
    rx: futures::channel::oneshot::Receiver<Result<T>>,
}

impl<T: Send + 'static> Task<T> {
    pub(crate) fn spawn(f: impl FnOnce() -> Result<T> + Send + 'static) -> Task<T> {
        let (tx, rx) = futures::channel::oneshot::channel();
        let slot = Arc::new(Mutex::new(Some(tx)));
        let s2 = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("keel-task".into())
            .spawn(move || {
                let r = f();
                if let Some(tx) = s2.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = tx.send(r);
                }
            });
        if let Err(e) = spawned {
            if let Some(tx) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                let _ = tx.send(Err(Error::Storage(keel_storage::Error::Io {
                    op: "spawn keel task thread",
                    path: PathBuf::new(),
                    source: Arc::new(e),
                })));
            }
        }
        Task { rx }
    }

    /// Run `f` on `inner`'s fetch pool. After the close it is not run: the task
    /// resolves with [`Error::Closed`].
    pub(crate) fn on_pool(
        inner: &Inner,
        op: &'static str,
        f: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Task<T> {
        // Checked here, on the caller's thread: on the pool it would pass.
        if let Err(e) = inner.check_read(op) {
            return Task::ready(Err(e));
        }
        let (tx, rx) = futures::channel::oneshot::channel();
        let job = Box::new(move || {
            let _ = tx.send(f());
        });
        match inner.fetch_pool.submit(job) {
            Ok(()) => Task { rx },
            Err(Rejected::Closed) => Task::ready(Err(Error::Closed {
                op,
                path: inner.path.clone(),
            })),
            Err(Rejected::Spawn(e)) => Task::ready(Err(Error::Storage(keel_storage::Error::Io {
                op: "start a keel-fetch thread",
                path: inner.path.clone(),
                source: Arc::new(e),
            }))),
        }
    }

    /// A task that has already finished with `r`.
    pub(crate) fn ready(r: Result<T>) -> Task<T> {
        let (tx, rx) = futures::channel::oneshot::channel();
        let _ = tx.send(r);
        Task { rx }
    }

    /// Block the calling thread until the job finishes.
    pub fn wait(self) -> Result<T> {
        futures::executor::block_on(self)
    }
}

impl<T> Future for Task<T> {
    type Output = Result<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(Error::Closed {
                    op: "async task (its thread ended without a result)",
                    path: PathBuf::new(),
                })
            })
        })
    }
}
