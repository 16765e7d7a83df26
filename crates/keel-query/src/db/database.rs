//! [`Database`]: open, write, fetch, snapshot, close.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use keel_schema::{Record, Schema, Value};
use keel_storage::{
    OpenFuture, ResumeReport, Store, StoreOptions, SuspendOptions, SuspendReport, WriteFuture,
};

use crate::base::change::Change;
use crate::base::error::{Error, Result};
use crate::db::catch_up;
use crate::dictionary::shared;
use crate::engine;
use crate::engine::{Inner, Place, Task, WritingGuard};
use crate::feed::Feed;
use crate::feed::FeedStats;
use crate::feed::Seed;
use crate::layout::stored;
use crate::layout::stored::FieldSchema;
use crate::layout::table;
use crate::layout::table::Coll;
use crate::layout::table::FORMAT;
use crate::open::migrate::Migrator;
use crate::open::schema_phase::{record_ready, schema_phase, SchemaOutcome};
use crate::query::fetch::{Fetch, Query, Source, StoredObject};
use crate::query::scan;
use crate::query::sql;
use crate::txn::transaction::Txn;
use crate::vector::cache::VectorCopyStats;

/// A hook registered with [`Database::on_commit_changes`]. Dropping this handle
/// keeps the hook; [`ChangeHook::remove`] removes it.
///
/// ```
/// # use keel_query::{Database, StoreOptions};
/// use keel_example_blog::blog::Post;
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::open_for::<Post>(dir.path().join("h.db"), StoreOptions::default())?;
/// let hook = db.on_commit_changes(|changes| println!("{} changes", changes.len()));
/// db.write(|t| t.insert(&Post::builder().id("x").build())).wait()?;
/// hook.remove(); // later writes record nothing for it
/// # Ok::<(), keel_query::Error>(())
/// ```
#[derive(Debug)]
pub struct ChangeHook {
    db: std::sync::Weak<Inner>,
    id: u64,
}

impl ChangeHook {
    /// Remove the hook: it is not called for commits after this returns (a commit
    /// being delivered right now may still call it once). When no hook and no
    /// subscription is left, writes stop recording their changes. A hook may
    /// remove itself from inside its own call (a one-shot hook).
    pub fn remove(self) {
        let Some(inner) = self.db.upgrade() else {
            return;
        };
        inner.remove_hook(self.id);
    }
}

/// An open keel database: collections of FlatBuffers objects in one SQLite file.
/// Cheap to clone, `Send + Sync`; share it across threads.
///
/// * [`Database::write`] queues a transaction for the writer thread and returns a
///   future that resolves after COMMIT (group commit: concurrent writes share one).
///   [`Database::write_blocking`] waits for it, committing on the calling thread
///   when nothing else is writing.
/// * [`Database::fetch`], [`Database::get`], [`Database::query`] are synchronous and
///   run on the calling thread with a pooled read-only connection; they never wait for
///   the writer.
/// * [`Database::snapshot`] runs several reads against one consistent view.
///
/// ```
/// use keel_query::{Database, StoreOptions};
/// use keel_example_blog::blog::Post;
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Database::open_for::<Post>(dir.path().join("blog.db"), StoreOptions::default())?;
/// db.write(|txn| {
///     txn.insert(&Post::builder().id("p1").title("Hello").priority(3).build())?;
///     Ok(())
/// }).wait()?;
/// let p = db.get::<Post>(&"p1".to_string())?.unwrap();
/// assert_eq!(p.title.as_deref(), Some("Hello"));
/// assert_eq!(db.fetch::<Post>().filter(Post::priority().ge(3)).count()?, 1);
/// db.close().wait()?;
/// # Ok::<(), keel_query::Error>(())
/// ```
#[derive(Clone)]
pub struct Database {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.inner.path)
            .field("collections", &self.inner.colls.len())
            .finish()
    }
}

struct Prepared {
    schema: Arc<Schema>,
    colls: Vec<Coll>,
    outcome: Arc<Mutex<SchemaOutcome>>,
    /// Reader pool size: also the bound of the fetch pool.
    readers: usize,
    /// `StoreOptions::vector_cache_bytes`.
    vector_cache_bytes: usize,
    /// With `StoreOptions::share_changes`: the change feed's signal and the log's
    /// last sequence number, made by the schema phase on the open thread (file
    /// work the caller of `open_async` must not wait for).
    feed_seed: Option<Arc<Mutex<Option<Seed>>>>,
}

impl Prepared {
    /// The typed error of a failed schema phase (the kernel only carries its text).
    fn open_error(&self, e: keel_storage::Error) -> Error {
        self.outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failure
            .take()
            .unwrap_or_else(|| Error::from(e))
    }
}

fn prepare(
    schema: Schema,
    mut opts: StoreOptions,
    migrator: Option<Migrator>,
) -> Result<(Prepared, StoreOptions)> {
    let schema = Arc::new(schema);
    let colls = (0..schema.collections.len())
        .map(|i| Coll::build(&schema, i, &schema))
        .collect::<Result<Vec<_>>>()?;
    // The object store checks whose file it opens (identity.rs in keel-storage).
    opts.keel_identity = true;
    let user_init = opts.connection_init.take();
    let field_schema: FieldSchema = Arc::new(std::sync::RwLock::new(Arc::clone(&schema)));
    let fs2 = Arc::clone(&field_schema);
    opts.connection_init = Some(Arc::new(move |c: &rusqlite::Connection| {
        sql::register(c, Arc::clone(&fs2))?;
        scan::register(c)?;
        if let Some(u) = &user_init {
            u(c)?;
        }
        Ok(())
    }));
    let outcome = Arc::new(Mutex::new(SchemaOutcome::default()));
    let user_hook = opts.schema_hook.take();
    let feed_seed = opts
        .share_changes
        .then(|| Arc::new(Mutex::new(None::<Seed>)));
    let seed2 = feed_seed.clone();
    let (o2, s3, c2) = (Arc::clone(&outcome), Arc::clone(&schema), colls.clone());
    let mut migrator = migrator;
    opts.schema_hook = Some(Box::new(move |ctx| {
        let path = ctx.path().to_path_buf();
        let progress = |f: f32| ctx.progress(f);
        match schema_phase(
            ctx,
            &path,
            &s3,
            &c2,
            &field_schema,
            migrator.as_mut(),
            &progress,
        ) {
            Ok(out) => {
                if let Some((from, n)) = out.upgraded {
                    ctx.note(format!(
                        "storage format {from} → {}: index columns of {n} objects filled",
                        FORMAT
                    ));
                }
                *o2.lock().unwrap_or_else(|p| p.into_inner()) = out
            }
            Err(e) => {
                let s = stored::to_storage(&e, &path);
                o2.lock().unwrap_or_else(|p| p.into_inner()).failure = Some(e);
                return Err(s);
            }
        }
        if let Some(seed) = &seed2 {
            let s = Seed::prepare(ctx, &path).map_err(|e| stored::to_storage(&e, &path))?;
            *seed.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
        }
        if let Some(h) = user_hook {
            h(ctx)?;
        }
        Ok(())
    }));
    Ok((
        Prepared {
            schema,
            colls,
            outcome,
            readers: opts.reader_pool_size,
            vector_cache_bytes: opts.vector_cache_bytes,
            feed_seed,
        },
        opts,
    ))
}

fn finish(store: Store, p: Prepared) -> Result<Database> {
    let (pending, ready, staged, created, colls) = {
        let mut o = p.outcome.lock().unwrap_or_else(|e| e.into_inner());
        (
            std::mem::take(&mut o.pending),
            std::mem::take(&mut o.ready),
            std::mem::take(&mut o.staged),
            std::mem::take(&mut o.created),
            o.colls.take(),
        )
    };
    let colls = colls.unwrap_or(p.colls);
    let mut by_name = HashMap::new();
    // Indexes the schema transaction completes, and it has not committed yet.
    let mut on_durable = Vec::new();
    // Durable means the schema transaction has committed (`keel-storage`
    // `durable.rs` commits it before it opens the gate).
    let durable = store.is_durable();
    for (i, c) in colls.iter().enumerate() {
        by_name.insert(c.name.clone(), i);
        let bare = p.schema.table(c.table).name.clone();
        by_name.entry(bare).or_insert(i);
        for ix in &c.indexes {
            if ready.contains(&ix.name) || (durable && staged.contains(&ix.name)) {
                ix.mark_ready_at_open();
            } else if staged.contains(&ix.name) {
                on_durable.push(ix.clone());
            }
        }
    }
    let mut builds = Vec::new();
    if !on_durable.is_empty() {
        // A write runs only after the barrier, when the schema transaction has
        // committed: from then on readers see the columns complete. A snapshot
        // that began earlier keeps scanning (`IndexSql::mark_built`'s epoch). If
        // the barrier fails, the write is refused and queries keep scanning.
        builds.push(store.write(move |_t| {
            for ix in &on_durable {
                ix.mark_built();
            }
            Ok::<(), Error>(())
        }));
    }
    for (ci, k) in pending {
        let c = colls[ci].clone();
        let name = c.indexes[k].name.clone();
        tracing::info!(index = %name, "building index column in the background");
        builds.push(store.write(move |t| {
            let ix = &c.indexes[k];
            match table::build_index(t, &c, k, &mut |_| {}) {
                Ok(()) => {
                    record_ready(t, &c.name, ix)
                        .map_err(|e| Error::sqlite("record index state", "keel_index", e))?;
                    // Queries read the column once it is committed complete.
                    let done = ix.clone();
                    t.on_commit(Box::new(move || done.mark_built()));
                }
                Err(e) => {
                    tracing::error!(index = %name, error = %e, "background index build failed");
                    t.execute(
                        "UPDATE keel_index SET state = ?2 WHERE name = ?1",
                        rusqlite::params![name, format!("failed: {e}")],
                    )
                    .map_err(|e| Error::sqlite("record index state", "keel_index", e))?;
                }
            }
            Ok::<(), Error>(())
        }));
    }
    // The feed starts after the log's end as the schema phase saw it: what was
    // committed by then, the first reads see anyway (later commits are replayed,
    // which is harmless).
    let feed = match &p.feed_seed {
        Some(seed) => {
            let seed = seed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(|| Error::Closed {
                    op: "start the change feed (the schema phase did not run)",
                    path: store.path().to_path_buf(),
                })?;
            Some(Arc::new(Feed::new(seed)))
        }
        None => None,
    };
    let inner = Inner::new(
        store,
        p.schema,
        colls,
        by_name,
        builds,
        p.readers,
        created,
        feed.clone(),
        p.vector_cache_bytes,
    );
    if let Some(f) = feed {
        catch_up::start(&f, Arc::downgrade(&inner))?;
    }
    Ok(Database { inner })
}

/// The future returned by [`Database::durable`]: resolves when the database is
/// durable (the open barrier is done: writes commit). Runtime-agnostic; block with
/// [`DurableFuture::wait`].
#[must_use = "a future does nothing unless awaited or waited on"]
#[derive(Debug)]
pub struct DurableFuture {
    fut: keel_storage::DurableFuture,
}

impl DurableFuture {
    /// Block the calling thread until durable.
    pub fn wait(self) -> Result<()> {
        self.fut.wait().map_err(Error::from)
    }
}

impl Future for DurableFuture {
    type Output = Result<()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        Pin::new(&mut self.fut).poll(cx).map_err(Error::from)
    }
}

/// The future returned by [`Database::open_async`]: resolves when the database is
/// *readable* (see [`Database::durable`]). Dropping it cancels the open.
#[must_use = "dropping the future cancels the open"]
pub struct OpenDbFuture {
    fut: Option<OpenFuture>,
    prepared: Option<Result<Prepared>>,
}

impl Future for OpenDbFuture {
    type Output = Result<Database>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Database>> {
        let this = &mut *self;
        if let Some(Err(e)) = &this.prepared {
            let e = e.clone();
            this.prepared = None;
            return Poll::Ready(Err(e));
        }
        let Some(fut) = this.fut.as_mut() else {
            return Poll::Ready(Err(Error::Closed {
                op: "open (polled after completion)",
                path: PathBuf::new(),
            }));
        };
        match Pin::new(fut).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(match &this.prepared {
                Some(Ok(p)) => p.open_error(e),
                _ => Error::from(e),
            })),
            Poll::Ready(Ok(store)) => match (this.fut.take(), this.prepared.take()).1 {
                Some(Ok(p)) => Poll::Ready(finish(store, p)),
                _ => Poll::Ready(Err(Error::Closed {
                    op: "open (polled after completion)",
                    path: store.path().to_path_buf(),
                })),
            },
        }
    }
}

impl OpenDbFuture {
    /// Block until the open finishes.
    pub fn wait(self) -> Result<Database> {
        futures::executor::block_on(self)
    }
}

impl Database {
    /// Open (or create) a database with `schema`, blocking through the open pipeline.
    /// The schema phase creates missing collection tables and indexes; indexes new to
    /// an existing database build in the background afterwards.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_schema::Schema;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let schema = Schema::parse("table Note { id: long (primary); body: string; } root_type Note;", "n.fbs")?;
    /// let db = Database::open(dir.path().join("notes.db"), schema, StoreOptions::default())?;
    /// assert_eq!(db.query("Note").count()?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(path: impl AsRef<Path>, schema: Schema, options: StoreOptions) -> Result<Database> {
        let (p, opts) = prepare(schema, options, None)?;
        let store = Store::open(path, opts).map_err(|e| p.open_error(e))?;
        finish(store, p)
    }

    /// [`Database::open`], running the [`Migrator`]'s migrations
    /// that have not run on this file yet, in the schema phase's transaction, before
    /// the database is handed over (see [`crate::open::migrate`]). A failing migration
    /// fails the open with [`Error::MigrationFailed`] and leaves the file unchanged.
    ///
    /// Unlike a plain open it returns only once the database is
    /// [durable](Database::durable): the migrated layout commits with the schema
    /// transaction after the open barrier, and until then readers would still see the
    /// old tables under the new schema.
    pub fn open_migrating(
        path: impl AsRef<Path>,
        schema: Schema,
        migrator: Migrator,
        options: StoreOptions,
    ) -> Result<Database> {
        let (p, opts) = prepare(schema, options, Some(migrator))?;
        let store = Store::open(path, opts).map_err(|e| p.open_error(e))?;
        let db = finish(store, p)?;
        db.durable().wait()?;
        Ok(db)
    }

    /// [`Database::open_async`] with migrations (see [`Database::open_migrating`]):
    /// resolves once the migrated database is durable. Dropping it cancels the open.
    pub fn open_async_migrating(
        path: impl AsRef<Path>,
        schema: Schema,
        migrator: Migrator,
        options: StoreOptions,
    ) -> impl Future<Output = Result<Database>> + Send + 'static {
        let open = match prepare(schema, options, Some(migrator)) {
            Ok((p, opts)) => OpenDbFuture {
                fut: Some(Store::open_async(path, opts)),
                prepared: Some(Ok(p)),
            },
            Err(e) => OpenDbFuture {
                fut: None,
                prepared: Some(Err(e)),
            },
        };
        async move {
            let db = open.await?;
            db.durable().await?;
            Ok(db)
        }
    }

    /// Start opening on a keel-owned thread and return at once (see
    /// `keel_storage::Store::open_async` for progress and cancellation).
    ///
    /// The future resolves when the database is **readable**: `fetch`, `get`,
    /// snapshots and subscriptions work at once, even while the open barrier (the
    /// sync of a WAL a previous run left — seconds under `F_FULLFSYNC`) still runs
    /// on a keel thread. Writes are accepted at once too; they commit after the
    /// barrier, and their futures resolve after their commit. Await
    /// [`Database::durable`] to know when writes commit. A collection new to the
    /// file reads as empty until then (its table is created in the schema
    /// transaction, which commits after the barrier).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_schema::Schema;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let schema = Schema::parse("table T { id: int (primary); } root_type T;", "t.fbs")?;
    /// let db = futures::executor::block_on(Database::open_async(dir.path().join("a.db"), schema, StoreOptions::default()))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_async(
        path: impl AsRef<Path>,
        schema: Schema,
        options: StoreOptions,
    ) -> OpenDbFuture {
        match prepare(schema, options, None) {
            Ok((p, opts)) => OpenDbFuture {
                fut: Some(Store::open_async(path, opts)),
                prepared: Some(Ok(p)),
            },
            Err(e) => OpenDbFuture {
                fut: None,
                prepared: Some(Err(e)),
            },
        }
    }

    /// [`Database::open`] with the schema a generated type was built from.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::open_for::<Post>(dir.path().join("b.db"), StoreOptions::default())?;
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn open_for<R: Record>(path: impl AsRef<Path>, options: StoreOptions) -> Result<Database> {
        Database::open(
            path.as_ref(),
            parse_record_schema::<R>(path.as_ref())?,
            options,
        )
    }

    /// [`Database::open_async`] with the schema a generated type was built from.
    pub fn open_async_for<R: Record>(
        path: impl AsRef<Path>,
        options: StoreOptions,
    ) -> OpenDbFuture {
        match parse_record_schema::<R>(path.as_ref()) {
            Ok(s) => Database::open_async(path, s, options),
            Err(e) => OpenDbFuture {
                fut: None,
                prepared: Some(Err(e)),
            },
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The facade over `inner` (what a query made through the database holds).
    pub(crate) fn from_inner(inner: Arc<Inner>) -> Database {
        Database { inner }
    }

    pub(crate) fn weak(&self) -> std::sync::Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// The runtime schema.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.inner.schema
    }

    /// Give memory back, as an app does on a memory warning (iOS kills an app
    /// that holds memory when a warning arrives): drops the in-memory copies of
    /// vector fields and closes the idle reader connections with their page and
    /// statement caches. Nothing is lost and nothing waits: each is rebuilt
    /// lazily, by the next nearest query or read that needs it. Safe on any
    /// thread, at any time.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::open_for::<Post>(dir.path().join("m.db"), StoreOptions::default())?;
    /// db.fetch::<Post>().count()?;
    /// let released = db.release_memory();
    /// assert!(released.reader_connections >= 1);
    /// assert_eq!(db.fetch::<Post>().count()?, 0); // a reader opens again
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn release_memory(&self) -> MemoryReleased {
        MemoryReleased {
            vector_copy_bytes: self.inner.vector_cache.release() as u64,
            reader_connections: self.inner.store.release_memory() as u64,
        }
    }

    /// What the in-memory copies of vector fields did so far: how often one
    /// was read from its side table whole, and how often one was patched with
    /// the rows of this handle's own commit instead (`docs/vector.md`).
    pub fn vector_copy_stats(&self) -> VectorCopyStats {
        self.inner.vector_cache.stats()
    }

    /// The storage kernel (checkpoints, I/O stats, the open report).
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Deliver what other processes committed since this handle last looked: live
    /// queries, object subscriptions and dictionary subscriptions get their
    /// updates (row-level diffs), and the dictionary's cache drops the values
    /// others changed. Returns once delivered.
    ///
    /// Row by row with [`StoreOptions::share_changes`]. Without it, if another
    /// process committed since this handle last looked (`PRAGMA data_version`,
    /// see [`Store::foreign_commits`]), every live query and object subscription
    /// is read again and delivers what differs (on the writer thread, after this
    /// returns); reads, commits and `resume` check the same by themselves. With
    /// sharing it
    /// runs by itself whenever another process commits (on Linux and Android
    /// through inotify, on Apple platforms through Darwin notifications — a
    /// sleeping thread, no polling); call it yourself where no wake-up exists
    /// or after the process was suspended. See `docs/app-groups.md`. Inside a
    /// write closure or a subscription callback it does nothing (it would wait
    /// for itself; the feed thread delivers right after).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("shared.db");
    /// let opts = || StoreOptions::default().share_changes(true);
    /// let app = Database::open_for::<Post>(&path, opts())?;
    /// let widget = Database::open_for::<Post>(&path, opts())?; // as another process would
    /// widget.write(|t| t.insert(&Post::builder().id("w1").build())).wait()?;
    /// app.catch_up()?; // usually not needed: the feed thread does it
    /// assert_eq!(app.fetch::<Post>().count()?, 1);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn catch_up(&self) -> Result<()> {
        catch_up::catch_up(&self.inner)
    }

    /// What the cross-process change feed has done so far (`None` without
    /// [`StoreOptions::share_changes`]).
    pub fn feed_stats(&self) -> Option<FeedStats> {
        self.inner.feed.as_ref().map(|f| f.stats())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Queue a transaction. `f` runs on keel's writer thread inside its own
    /// SAVEPOINT; the returned future resolves after COMMIT with `f`'s result. If `f`
    /// returns `Err` or calls [`Txn::abort`], only its own changes roll back.
    /// Awaiting it never blocks an executor thread for the commit's disk sync; a
    /// thread that would block on it anyway should call [`Database::write_blocking`],
    /// which skips the handoff to the writer thread when nothing else is writing.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("w.db"), StoreOptions::default())?;
    /// let fut = db.write(|txn| {
    ///     txn.insert(&Post::builder().id("a").build())?;
    ///     let dup = txn.insert(&Post::builder().id("a").build());
    ///     assert!(dup.unwrap_err().is_already_exists()); // and the txn goes on
    ///     txn.upsert(&Post::builder().id("b").build())
    /// });
    /// futures::executor::block_on(fut)?;
    /// assert_eq!(db.fetch::<Post>().count()?, 2);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn write<F, T>(&self, f: F) -> WriteFuture<Result<T>>
    where
        F: FnOnce(&mut Txn<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.inner.store.write(self.write_job(f))
    }

    /// Run a transaction and wait for its commit: what `write(f).wait()` does,
    /// minus two thread handoffs when nothing else is writing. If no write is
    /// queued, no other blocking write is in progress and the writer connection is
    /// free, `f` and the COMMIT run on the calling thread, with every promise of [`Database::write`] (`f`'s own
    /// SAVEPOINT, subscriptions and `on_commit_changes` hooks delivered before this
    /// returns, writes before durable waiting for the open barrier); otherwise it
    /// queues and joins the next group commit. For threads that may block (not an
    /// async executor: the commit's disk sync happens here). Calling it inside a
    /// write closure of the same database is an error, not a deadlock.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("wb.db"), StoreOptions::default())?;
    /// db.write_blocking(|txn| txn.insert(&Post::builder().id("a").build()))?;
    /// assert_eq!(db.fetch::<Post>().count()?, 1);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn write_blocking<F, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Txn<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.inner.store.write_blocking(self.write_job(f))
    }

    /// The storage-level closure of a write: `f` on a [`Txn`], then the commit
    /// callbacks (dictionary, change delivery).
    fn write_job<F, T>(
        &self,
        f: F,
    ) -> impl FnOnce(&mut keel_storage::WriteTxn<'_>) -> Result<T> + Send + 'static
    where
        F: FnOnce(&mut Txn<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        // Writes issued after `close()` fail; writes queued before it still commit.
        let rejected = self.inner.closed.load(Ordering::SeqCst);
        move |w| {
            if rejected {
                return Err(Error::Closed {
                    op: "write",
                    path: inner.path.clone(),
                });
            }
            // Sharing needs every change (rowid and collection) for the change log.
            let record = inner.recording() || inner.feed.is_some();
            let (res, outcome) = {
                let mut txn = Txn::new(w, &inner, record);
                let r = {
                    let _writing = WritingGuard::enter(&inner);
                    f(&mut txn)
                };
                (r, txn.finish())
            };
            if outcome.aborted {
                return Err(Error::Aborted {
                    path: inner.path.clone(),
                });
            }
            let v = res?;
            inner.commit_closure(w, outcome)?;
            Ok(v)
        }
    }

    /// Call `hook` on the committing thread (the writer thread, or the caller of an
    /// inline [`Database::write_blocking`]) after every commit with the changes of each
    /// committed write closure (before its future resolves). Rolled-back closures
    /// report nothing. The subscription hub plugs in here.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, ChangeOp};
    /// use keel_example_blog::blog::Post;
    /// use std::sync::{Arc, Mutex};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("h.db"), StoreOptions::default())?;
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let s2 = seen.clone();
    /// db.on_commit_changes(move |changes| s2.lock().unwrap().extend(changes.iter().map(|c| c.op)));
    /// db.write(|t| t.insert(&Post::builder().id("x").build())).wait()?;
    /// assert_eq!(*seen.lock().unwrap(), vec![ChangeOp::Insert]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    ///
    /// The hook stays until [`ChangeHook::remove`]; while any hook is registered
    /// every write records its changes (a SELECT and two copies per updated object).
    /// A write closure that started before the hook was registered recorded
    /// nothing: its commit calls the hook with an **empty** slice, meaning
    /// "something committed whose changes are unknown — read again" (a hook that
    /// shows data read before it was registered must, or it could miss that
    /// commit). A recorded commit never calls a hook with an empty slice.
    pub fn on_commit_changes(
        &self,
        hook: impl Fn(&[Change]) + Send + Sync + 'static,
    ) -> ChangeHook {
        ChangeHook {
            db: Arc::downgrade(&self.inner),
            id: self.inner.add_hook(Arc::new(hook), false),
        }
    }

    /// [`on_commit_changes`](Self::on_commit_changes), and also every commit
    /// another connection makes to the file (another process, or another
    /// handle in this one): what a hook needs to keep something it shows in
    /// step with the file, as keel's live queries are.
    ///
    /// This handle's commits reach `hook` as they reach `on_commit_changes`
    /// hooks: on the committing thread, before the write's future resolves,
    /// with old and new bytes. Other connections' commits reach it
    /// * with [`StoreOptions::share_changes`](crate::StoreOptions): on the
    ///   `keel-feed` thread once a catch-up has read them, after the live
    ///   queries' deliveries — each changed row as a [`Change`] whose `new` is
    ///   the row's current bytes (`None`: deleted) and whose `old` is `None`
    ///   (the log keeps no old versions), `op` `Update` or `Delete`; or as an
    ///   empty slice when the log cannot say which rows changed (a keel that
    ///   logged no keys, a pruned log);
    /// * without it: as an empty slice, on the writer thread, once this handle
    ///   notices that the file changed — at its next read through the
    ///   database, commit, resume or [`catch_up`](Self::catch_up), the moments
    ///   live queries follow other processes; and, while this hook or a live
    ///   query is registered, when the file watch (`keel-watch`) sees another
    ///   connection write the file. A commit is noticed once: when the watch
    ///   noticed it first, the hook runs with the re-read the watch queues to
    ///   the writer thread, which may come after a read or commit made
    ///   meanwhile.
    ///
    /// An empty slice always means "something committed whose changes are
    /// unknown: read again".
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("f.db");
    /// let a = Database::open_for::<Post>(&path, StoreOptions::default())?;
    /// let b = Database::open_for::<Post>(&path, StoreOptions::default())?;
    /// let calls = Arc::new(AtomicUsize::new(0));
    /// let c2 = calls.clone();
    /// let _hook = a.on_file_changes(move |_| { c2.fetch_add(1, Ordering::SeqCst); });
    /// b.write(|t| t.insert(&Post::builder().id("x").build())).wait()?; // another handle
    /// // a notices it at its next read, and calls the hook on its writer thread
    /// // (a's commit waits for that thread, so the hook has run once it returns).
    /// let noticed = std::time::Instant::now() + std::time::Duration::from_secs(10);
    /// while calls.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < noticed {
    ///     a.fetch::<Post>().count()?;
    ///     a.write(|_| Ok(())).wait()?;
    /// }
    /// assert!(calls.load(Ordering::SeqCst) >= 1);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn on_file_changes(&self, hook: impl Fn(&[Change]) + Send + Sync + 'static) -> ChangeHook {
        ChangeHook {
            db: Arc::downgrade(&self.inner),
            id: self.inner.add_hook(Arc::new(hook), true),
        }
    }

    /// Two [`on_file_changes`](Self::on_file_changes) hooks around every other
    /// change hook of each commit, whenever either was registered: `before`
    /// runs ahead of them, `after` once they — keel's live lists across a
    /// relation and live k-NN lists among them — have made their deliveries;
    /// same commits, threads and changes. They are registered in one step, so
    /// a commit calls both or neither. For a consumer that gathers those
    /// deliveries and hands them on together (keel-ffi's batched delivery: one
    /// foreign call per commit instead of one per list): a delivery made
    /// between the two on the same thread belongs to the commit `after` ends;
    /// any other (a list's first, made on the subscribing thread) does not.
    /// [`ChangeHook::remove`] removes both. Several such pairs keep their
    /// registration order on both sides.
    pub fn around_file_changes(
        &self,
        before: impl Fn(&[Change]) + Send + Sync + 'static,
        after: impl Fn(&[Change]) + Send + Sync + 'static,
    ) -> ChangeHook {
        ChangeHook {
            db: Arc::downgrade(&self.inner),
            id: self.inner.add_hooks(
                vec![
                    (Place::First, Arc::new(before)),
                    (Place::Last, Arc::new(after)),
                ],
                true,
            ),
        }
    }

    /// A dynamic query over `collection` (full or bare name), returning bytes.
    pub fn query(&self, collection: &str) -> Query<'static> {
        Query::new(Source::Db(Arc::clone(&self.inner)), collection)
    }

    /// A typed query over `R`'s collection.
    pub fn fetch<R: Record>(&self) -> Fetch<'static, R> {
        Fetch::new(Source::Db(Arc::clone(&self.inner)))
    }

    /// The object with primary key `key` (values in key-field order), verified.
    /// Wrong key types are an [`Error::TypeMismatch`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, Error};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("g.db"), StoreOptions::default())?;
    /// assert!(db.get_bytes("blog.Post", &["nope".into()])?.is_none());
    /// assert!(matches!(db.get_bytes("blog.Post", &[1.into()]), Err(Error::TypeMismatch { .. })));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn get_bytes(&self, collection: &str, key: &[Value]) -> Result<Option<StoredObject>> {
        let inner = &*self.inner;
        inner.check_read("get")?;
        let c = inner.coll(collection, "get")?;
        // One statement: autocommit gives it a consistent view without a
        // BEGIN and COMMIT around it.
        inner
            .store
            .read_autocommit(|conn| inner.get_in(conn, c, "get", key, true))
    }

    /// The `R` with primary key `key`.
    pub fn get<R: Record>(&self, key: &R::Key) -> Result<Option<R>> {
        let inner = &*self.inner;
        inner.check_read("get")?;
        let c = inner.coll(R::COLLECTION, "get")?;
        let key = R::key_values(key);
        inner
            .store
            .read_autocommit(|conn| inner.get_typed::<R>(conn, c, "get", &key))
    }

    /// [`Database::get`] on a keel thread (the fetch pool).
    pub fn get_async<R: Record>(&self, key: R::Key) -> Task<Option<R>> {
        let db = self.clone();
        Task::on_pool(&self.inner, "get", move || db.get::<R>(&key))
    }

    /// Run `f` with a [`Snapshot`]: every read inside sees the same committed state,
    /// whatever commits meanwhile. Runs on the calling thread with one pooled read
    /// connection held for the whole closure (keep it short: the WAL cannot be
    /// checkpointed past an open snapshot). The state is fixed by the first read
    /// inside `f`.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default())?;
    /// let (n, all) = db.snapshot(|s| Ok((s.fetch::<Post>().count()?, s.fetch::<Post>().all()?)))?;
    /// assert_eq!(n as usize, all.len());
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn snapshot<T>(&self, f: impl FnOnce(&Snapshot<'_>) -> Result<T>) -> Result<T> {
        let inner = &*self.inner;
        inner.check_read("snapshot")?;
        // Taken before the view: an index column completed after it may be
        // missing from the view, so its queries read the bytes instead.
        let as_of = table::ready_epoch();
        inner.store.read(|conn| f(&Snapshot { inner, conn, as_of }))
    }

    /// Wait until indexes new to this database (built in the background after open)
    /// are built. Queries are correct without waiting; they get faster after.
    pub fn wait_for_indexes(&self) -> Result<()> {
        let builds =
            std::mem::take(&mut *self.inner.builds.lock().unwrap_or_else(|p| p.into_inner()));
        for b in builds {
            b.wait()?;
        }
        Ok(())
    }

    /// Each secondary index and its state (`ready`, `building`, `failed: …`).
    pub fn index_states(&self) -> Result<Vec<(String, String)>> {
        self.inner.check_open("index states")?;
        self.inner.store.read(|c| {
            let mut st = c
                .prepare("SELECT name, state FROM keel_index ORDER BY name")
                .map_err(|e| Error::sqlite("index states", "keel_index", e))?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(|e| Error::sqlite("index states", "keel_index", e))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(|e| Error::sqlite("index states", "keel_index", e))
        })
    }

    /// Finish queued writes, checkpoint and close every connection (on a keel
    /// thread), and join the fetch pool's threads. Later calls on any clone return
    /// [`Error::Closed`].
    ///
    /// Live subscriptions end with the close: once the returned task has
    /// finished, every query and object subscription stream
    /// ([`QueryStream`](crate::subscribe::QueryStream),
    /// [`ObjectStream`](crate::subscribe::ObjectStream) and their typed variants)
    /// and every dictionary [`DictStream`](crate::DictStream) yields what it still
    /// holds and then ends (`poll_next` returns `None`), callbacks never run again
    /// ([`Subscription::is_active`](crate::Subscription::is_active) is false), and
    /// a dictionary subscription made afterwards starts ended. Writes queued before
    /// the close are committed and delivered first.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, Error};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("c.db"), StoreOptions::default())?;
    /// let queued = db.write(|t| t.insert(&Post::builder().id("a").build()));
    /// futures::executor::block_on(db.close())?;
    /// queued.wait()?; // committed before the close finished
    /// assert!(matches!(db.fetch::<Post>().count(), Err(Error::Closed { .. })));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn close(&self) -> Task<()> {
        Inner::close(&self.inner)
    }

    /// A future that resolves when the database is **durable**: the open barrier
    /// is done, so writes commit and checkpoints run. At once after the blocking
    /// [`Database::open`] and for a file whose WAL was empty at open. If the
    /// barrier failed (e.g. `EIO` from the sync) it resolves with that error; the
    /// database stays readable and every write fails with the same error.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = futures::executor::block_on(Database::open_async_for::<Post>(dir.path().join("d.db"), StoreOptions::default()))?;
    /// let posts = db.fetch::<Post>().all()?; // readable: list at once
    /// futures::executor::block_on(db.durable())?; // writes commit from here on
    /// assert!(db.is_durable());
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn durable(&self) -> DurableFuture {
        DurableFuture {
            fut: self.inner.store.durable(),
        }
    }

    /// True once the database is durable (see [`Database::durable`]).
    pub fn is_durable(&self) -> bool {
        self.inner.store.is_durable()
    }

    /// True after [`Database::close`].
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }

    /// Let go of every file lock on the database, its `-wal` and `-shm` — call it
    /// when the app goes to the background with its database in a shared (App
    /// Group) container, or iOS kills it (`0xdead10cc`). Same as
    /// [`Database::suspend_with`] with [`SuspendOptions::default`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default())?;
    /// db.suspend()?;  // applicationDidEnterBackground
    /// db.resume()?;   // applicationWillEnterForeground
    /// assert_eq!(db.fetch::<Post>().count()?, 0);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn suspend(&self) -> Result<SuspendReport> {
        self.suspend_with(SuspendOptions::default())
    }

    /// Suspend: the guarantees of [`Store::suspend`], on the object layer.
    ///
    /// * **Held afterwards:** no SQLite connection, so no lock of any kind. The
    ///   `Database` (every clone), its subscriptions and its dictionary stay valid;
    ///   subscriptions deliver again after [`Database::resume`].
    /// * **Before letting go:** dictionary values still only in memory are
    ///   flushed (waiting at most [`SuspendOptions::timeout`]; a flush that did not
    ///   finish stays queued and commits after resume) — an app suspended in the
    ///   background may be killed without another chance.
    /// * **Work in flight:** the running write group and reads may finish for
    ///   [`SuspendOptions::interrupt_after`], then fail with the retryable
    ///   `Error::Storage(keel_storage::Error::Suspended { .. })` (nothing of an
    ///   interrupted write commits; [`Error::is_retryable`] is true).
    /// * **New work:** reads block their calling thread and writes wait in the
    ///   queue until resume, or fail at once with `Suspended` under
    ///   [`SuspendOptions::fail_fast`]. The dictionary's own background flush
    ///   always waits.
    /// * **Which thread:** blocks the caller for the bounds above (plus the TRUNCATE
    ///   checkpoint with [`SuspendOptions::checkpoint_first`]); call it from a
    ///   background task, or through the FFI's async `suspend`. Inside a write
    ///   closure it is [`Error::Unsupported`]; inside a read or snapshot it cannot
    ///   close that read's connection and ends with `SuspendTimeout`.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, Error, SuspendOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::open_for::<Post>(dir.path().join("b.db"), StoreOptions::default())?;
    /// // Going to the background: empty the WAL, then let go; fail fast meanwhile.
    /// let r = db.suspend_with(SuspendOptions::default().checkpoint_first(true).fail_fast(true))?;
    /// assert_eq!(r.checkpoint.map(|c| c.wal_bytes_after), Some(0));
    /// let e = db.fetch::<Post>().count().unwrap_err();
    /// assert!(e.is_retryable());
    /// db.resume()?;
    /// assert_eq!(db.fetch::<Post>().count()?, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn suspend_with(&self, opts: SuspendOptions) -> Result<SuspendReport> {
        self.inner.check_open("suspend")?;
        if engine::in_write_closure(&self.inner) {
            return Err(Error::Unsupported {
                op: "suspend",
                hint: "suspend waits for the running write to finish: call it outside the write closure",
                path: self.inner.path.clone(),
            });
        }
        let deadline = std::time::Instant::now() + opts.timeout;
        if let Some(flush) = shared::before_close(&self.inner.dict) {
            match wait_until(flush, deadline) {
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "suspend: the dictionary flush failed; its values stay pending")
                }
                None => tracing::warn!(
                    "suspend: the dictionary flush did not finish in time; it commits after resume"
                ),
                Some(Ok(())) => {}
            }
        }
        Ok(self.inner.store.suspend(opts)?)
    }

    /// End a suspend: waiting reads and queued writes go on; connections reopen
    /// lazily on the threads that use them, so this returns at once.
    ///
    /// With [`StoreOptions::share_changes`], subscriptions always catch up on a
    /// keel thread ([`Database::catch_up`]): the change log says which rows and
    /// dictionary keys other processes changed, including commits whose catch-up a
    /// suspend interrupted before the files were stamped. Without sharing, if
    /// another process changed the file meanwhile
    /// ([`ResumeReport::external_changes`]), every live
    /// query and object subscription is read again on the writer thread (ordered
    /// with commits) and delivers what differs. Either way nothing stale is shown
    /// silently after a resume.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("r.db"), StoreOptions::default())?;
    /// db.suspend()?;
    /// assert!(db.is_suspended());
    /// let r = db.resume()?;
    /// assert!(r.was_suspended && !r.external_changes);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn resume(&self) -> Result<ResumeReport> {
        self.inner.check_open("resume")?;
        let r = self.inner.store.resume()?;
        shared::after_resume(&self.inner.dict);
        if self.inner.feed.is_some() {
            // With the change feed: always, whether or not the files changed since
            // the suspend — a catch-up the suspend interrupted (or any that failed)
            // left its commits unread, and the file stamp was taken after them. The
            // log says which rows changed (nothing to do costs one read), and
            // dictionary subscriptions hear of it too. It runs on a keel thread so
            // resume returns at once; if it cannot run, everything is read again.
            let weak = Arc::downgrade(&self.inner);
            let job = Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    if let Err(e) = catch_up::catch_up(&inner) {
                        tracing::warn!(error = %e, "catch-up after resume failed; reading every subscription again");
                        inner.external_changes();
                    }
                }
            });
            if self.inner.fetch_pool.submit(job).is_err() {
                self.inner.external_changes();
            }
        } else if r.external_changes {
            let n = self.inner.store.foreign_commits(false);
            self.inner.foreign_seen.store(n, Ordering::Release);
            self.inner.external_changes();
        } else {
            // A commit of another process that the file stamp taken at suspend
            // already included, found by the writer before it let go.
            self.inner.notice_foreign(false);
        }
        Ok(r)
    }

    /// True between [`Database::suspend`] and [`Database::resume`].
    pub fn is_suspended(&self) -> bool {
        self.inner.store.is_suspended()
    }
}

/// Wait for `fut` until `deadline`, parking the thread (no busy loop).
fn wait_until<T>(mut fut: WriteFuture<T>, deadline: std::time::Instant) -> Option<T> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = Pin::new(&mut fut).poll(&mut cx) {
            return Some(v);
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::park_timeout(deadline - now);
    }
}

fn parse_record_schema<R: Record>(path: &Path) -> Result<Schema> {
    Schema::parse(R::SCHEMA_FBS, R::COLLECTION).map_err(|e| Error::Schema {
        path: path.to_path_buf(),
        message: format!(
            "the schema generated for {} does not parse: {e}",
            R::COLLECTION
        ),
    })
}

/// A consistent read-only view of the database, given to [`Database::snapshot`]'s
/// closure: every read through it sees the same committed state.
pub struct Snapshot<'a> {
    inner: &'a Inner,
    conn: &'a rusqlite::Connection,
    /// The index build epoch before the read transaction began.
    as_of: u64,
}

impl Snapshot<'_> {
    /// A dynamic query in this snapshot.
    pub fn query(&self, collection: &str) -> Query<'_> {
        Query::new(
            Source::Conn(self.inner, self.conn, Some(self.as_of)),
            collection,
        )
    }
    /// A typed query in this snapshot.
    pub fn fetch<R: Record>(&self) -> Fetch<'_, R> {
        Fetch::new(Source::Conn(self.inner, self.conn, Some(self.as_of)))
    }
    /// Get by primary key in this snapshot.
    pub fn get<R: Record>(&self, key: &R::Key) -> Result<Option<R>> {
        let c = self.inner.coll(R::COLLECTION, "get")?;
        self.inner
            .get_typed::<R>(self.conn, c, "get", &R::key_values(key))
    }
    /// Get bytes by primary key in this snapshot.
    pub fn get_bytes(&self, collection: &str, key: &[Value]) -> Result<Option<StoredObject>> {
        let c = self.inner.coll(collection, "get")?;
        self.inner.get_in(self.conn, c, "get", key, true)
    }
}

/// What [`Database::release_memory`] gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct MemoryReleased {
    /// Bytes of vector-field copies dropped (read again by the next nearest query).
    pub vector_copy_bytes: u64,
    /// Idle reader connections closed (opened again by the next reads).
    pub reader_connections: u64,
}
