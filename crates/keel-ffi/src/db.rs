//! [`open_async`], [`open_blocking`], [`Database`] and [`Query`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use keel_schema::{Schema, SortKey, Value as KValue};

use crate::bytes::Bytes;
use crate::callbacks::gated;
use crate::ending::Ending;
use crate::error::KeelError;
use crate::expr::{Expr, Resolver};
use crate::tasks::{off_thread, run_async, Runner};
use crate::types::{
    progress_fn, CheckpointResult, IncludedCount, IncludedObject, IoStats, MemoryReleased,
    OpenOptions, OpenProgressListener, OpenReport, ResumeResult, StoredObject, SuspendResult,
    Value, WriteOp, WriteResult,
};

/// Run a synchronous FFI call: while the database is suspended its reads fail
/// with `Suspended` instead of waiting for a resume that the blocked calling
/// thread (usually the UI thread) would itself have to make.
pub(crate) fn sync_call<T>(f: impl FnOnce() -> Result<T, KeelError>) -> Result<T, KeelError> {
    keel_query::fail_fast_while_suspended(f)
}

pub(crate) fn parse_schema(schema_fbs: &str) -> Result<Schema, KeelError> {
    Schema::parse(schema_fbs, "schema.fbs").map_err(|e| KeelError::InvalidSchema {
        message: format!("schema does not parse: {e}"),
    })
}

fn options(
    options: &OpenOptions,
    progress: Option<Box<dyn OpenProgressListener>>,
) -> Result<keel_storage::StoreOptions, KeelError> {
    let mut o = options.to_store_options()?;
    if let Some(l) = progress {
        o.progress = Some(progress_fn(l));
    }
    Ok(o)
}

/// Open (or create) the database at `path` with the FlatBuffers schema text
/// `schema_fbs` (collections: the `root_type` table and tables marked `(entity)`).
///
/// Returns at once; the whole open — including a slow sync of a WAL left by a
/// previous run and SQLite's recovery — runs on keel's own threads, so the caller's
/// thread (iOS main thread, Android main looper, an asyncio loop) stays free.
/// Resolves when the database is **readable** — while the open barrier may still
/// run: queries and subscriptions work, writes are queued until `durable()`.
/// `progress`, if given, is called **on a keel thread** with each phase and both
/// milestones; the last event (`Durable`, `done`) may come after this returned.
///
/// Errors: `InvalidSchema` (the text does not parse, or is not a compatible
/// evolution of the stored schema), `Corrupt`, `Locked`, `Io`; for an encrypted
/// database (`options.encryption`) also `KeyUnavailable`, `KeyLost`, `WrongKey`
/// and `NotEncrypted`, none of which changes the file.
#[uniffi::export]
pub async fn open_async(
    path: String,
    schema_fbs: String,
    options: OpenOptions,
    progress: Option<Box<dyn OpenProgressListener>>,
) -> Result<Arc<Database>, KeelError> {
    gated(async move {
        // Parsing is quick, but it is work: keep it off the caller's thread too.
        let schema = off_thread("parse", move || parse_schema(&schema_fbs)).await?;
        let opts = self::options(&options, progress)?;
        let db = keel_query::Database::open_async(&path, schema, opts).await?;
        Ok(Database::new(db))
    })
    .await
}

/// [`open_async`], blocking the calling thread through the whole open. For
/// background threads, scripts and tests — never call it on a UI thread.
#[uniffi::export]
pub fn open_blocking(
    path: String,
    schema_fbs: String,
    options: OpenOptions,
    progress: Option<Box<dyn OpenProgressListener>>,
) -> Result<Arc<Database>, KeelError> {
    let schema = parse_schema(&schema_fbs)?;
    let opts = self::options(&options, progress)?;
    let db = keel_query::Database::open(&path, schema, opts)?;
    Ok(Database::new(db))
}

/// Check schema text without opening anything: `InvalidSchema` with line and
/// column if it does not parse; otherwise the names of its collections.
#[uniffi::export]
pub fn check_schema(schema_fbs: String) -> Result<Vec<String>, KeelError> {
    let s = parse_schema(&schema_fbs)?;
    Ok(s.collections.iter().map(|c| c.name.clone()).collect())
}

/// Build FlatBuffers bytes for `collection` from JSON (flatc's JSON conventions),
/// using only the schema text. Handy in tests and tools; apps use their own
/// `flatc`-generated builders.
#[uniffi::export]
pub fn encode_json(
    schema_fbs: String,
    collection: String,
    json: String,
) -> Result<Vec<u8>, KeelError> {
    let s = parse_schema(&schema_fbs)?;
    encode_with(&s, &collection, &json)
}

fn encode_with(s: &Schema, collection: &str, json: &str) -> Result<Vec<u8>, KeelError> {
    let r = Resolver::new(s, collection, "encode_json")?;
    let reader = s
        .table_reader(r.table)
        .ok_or_else(|| KeelError::internal("collection table missing"))?;
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| KeelError::invalid_argument(format!("encode_json: bad JSON: {e}")))?;
    reader
        .encode_json(&v)
        .map_err(|e| KeelError::InvalidObject {
            message: format!("encode_json for {collection}: {e}"),
        })
}

fn decode_with(s: &Schema, collection: &str, bytes: &[u8]) -> Result<String, KeelError> {
    let r = Resolver::new(s, collection, "decode_json")?;
    let reader = s
        .table_reader(r.table)
        .ok_or_else(|| KeelError::internal("collection table missing"))?;
    let invalid = |e: keel_schema::DecodeError| KeelError::InvalidObject {
        message: format!("decode_json for {collection}: the bytes are not a valid object: {e}"),
    };
    let obj = reader.read(bytes).map_err(invalid)?;
    Ok(obj.to_json().map_err(invalid)?.to_string())
}

pub(crate) fn keys(key: Vec<Value>) -> Vec<KValue> {
    key.into_iter().map(KValue::from).collect()
}

/// Run one [`WriteOp`] in `txn`: what a batch of [`Database::write`] does per
/// operation, and what a write body's `Txn::write` does.
pub(crate) fn apply_op(
    txn: &mut keel_query::Txn<'_>,
    op: WriteOp,
) -> Result<WriteResult, keel_query::Error> {
    Ok(match op {
        WriteOp::Insert { collection, bytes } => WriteResult::Written {
            rowid: txn.insert_bytes(&collection, bytes)?,
        },
        WriteOp::Update { collection, bytes } => WriteResult::Written {
            rowid: txn.update_bytes(&collection, bytes)?,
        },
        WriteOp::Upsert { collection, bytes } => WriteResult::Written {
            rowid: txn.upsert_bytes(&collection, bytes)?,
        },
        WriteOp::Change {
            collection,
            key,
            values,
        } => {
            let values: Vec<(String, keel_schema::Value)> = values
                .into_iter()
                .map(|fv| (fv.field, fv.value.into()))
                .collect();
            WriteResult::Written {
                rowid: txn.change_values(&collection, &keys(key), &values)?,
            }
        }
        WriteOp::ChangeFrom {
            collection,
            key,
            bytes,
            fields,
        } => {
            let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
            WriteResult::Written {
                rowid: txn.change_bytes(&collection, &keys(key), &bytes, &fields)?,
            }
        }
        WriteOp::Delete { collection, key } => WriteResult::Deleted {
            existed: txn.delete_key(&collection, &keys(key))?,
        },
    })
}

/// An open keel database. Thread-safe: share one instance across the app.
///
/// * `write` is async: the batch runs on keel's writer thread in one transaction
///   (group commit with concurrent writes) and the call completes after COMMIT.
/// * `get`, `query(...).all()`, `count()` are synchronous reads on the calling
///   thread with a pooled read-only connection (they never wait for the writer);
///   the `_async` variants run the same read on a keel thread.
/// * `close` finishes queued writes, checkpoints and releases the file.
#[derive(uniffi::Object)]
pub struct Database {
    pub(crate) db: keel_query::Database,
    /// Fired once `close` is done: ends the subscriptions' `ended()`.
    pub(crate) closing: Arc<Ending>,
    /// Live subscriptions the engine's hub does not count (`live::Counted`).
    pub(crate) others: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.db.fmt(f)
    }
}

impl Database {
    pub(crate) fn new(db: keel_query::Database) -> Arc<Database> {
        Arc::new(Database {
            db,
            closing: Ending::new(),
            others: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The engine-level database (for Rust code embedding the FFI crate).
    pub fn inner(&self) -> &keel_query::Database {
        &self.db
    }
}

#[uniffi::export]
impl Database {
    /// Run a batch of writes in one transaction on keel's writer thread and resolve
    /// after COMMIT with one result per operation. The batch is atomic: if any
    /// operation fails (bad bytes, unknown collection, duplicate key, missing
    /// object), none of it is kept and the error is thrown.
    pub async fn write(&self, ops: Vec<WriteOp>) -> Result<Vec<WriteResult>, KeelError> {
        gated(async move {
            let fut = self.db.write(move |txn| {
                let mut out = Vec::with_capacity(ops.len());
                for op in ops {
                    out.push(apply_op(txn, op)?);
                }
                Ok(out)
            });
            Ok(fut.await?)
        })
        .await
    }

    /// The object of `collection` with primary key `key` (values in key-field
    /// order; `[rowid]` for collections without a key), or null. A key of the wrong
    /// type or length is `TypeMismatch`.
    pub fn get(&self, collection: String, key: Vec<Value>) -> Result<Option<Bytes>, KeelError> {
        sync_call(|| {
            Ok(self
                .db
                .get_bytes(&collection, &keys(key))?
                .map(|o| Bytes(o.bytes)))
        })
    }

    /// [`Database::get`] on a keel thread.
    pub async fn get_async(
        &self,
        collection: String,
        key: Vec<Value>,
    ) -> Result<Option<Bytes>, KeelError> {
        run_async(&self.db, Runner::Pool, "get", move |db| {
            Ok(db
                .get_bytes(&collection, &keys(key))?
                .map(|o| Bytes(o.bytes)))
        })
        .await
    }

    /// A query over `collection`: chain `filter`, `order_by`, `limit`, `offset`,
    /// then run it with `all`, `first` or `count` (or their `_async` variants).
    pub fn query(&self, collection: String) -> Arc<Query> {
        Arc::new(Query {
            db: self.db.clone(),
            closing: Arc::clone(&self.closing),
            others: Arc::clone(&self.others),
            related_order: None,
            collection,
            filter: Vec::new(),
            order: Vec::new(),
            limit: None,
            offset: 0,
            related: None,
        })
    }

    /// Number of objects in `collection`.
    pub fn count(&self, collection: String) -> Result<u64, KeelError> {
        self.query(collection).count()
    }

    /// [`Database::count`] on a keel thread.
    pub async fn count_async(&self, collection: String) -> Result<u64, KeelError> {
        gated(async move { self.query(collection).count_async().await }).await
    }

    /// FlatBuffers bytes for `collection` from JSON, with this database's schema.
    pub fn encode_json(&self, collection: String, json: String) -> Result<Vec<u8>, KeelError> {
        encode_with(self.db.schema(), &collection, &json)
    }

    /// The object in `bytes` as JSON (verified against the schema first).
    pub fn decode_json(&self, collection: String, bytes: Vec<u8>) -> Result<String, KeelError> {
        decode_with(self.db.schema(), &collection, &bytes)
    }

    /// Names of the collections.
    pub fn collections(&self) -> Vec<String> {
        self.db
            .schema()
            .collections
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    /// Run a PASSIVE checkpoint now (on a keel thread): copy what can be copied
    /// from the WAL without waiting for anyone.
    pub async fn checkpoint(&self) -> Result<CheckpointResult, KeelError> {
        run_async(&self.db, Runner::Pool, "checkpoint", |db| {
            Ok(db
                .store()
                .checkpoint(keel_storage::CheckpointMode::Passive)?
                .into())
        })
        .await
    }

    /// The app is going to the background: TRUNCATE checkpoint (bounded wait) so
    /// the WAL is empty and the next launch has nothing to sync or recover. Call it
    /// from `applicationDidEnterBackground` / `onStop`.
    ///
    /// With `and_suspend: true` it then suspends (see `suspend`): one call for an
    /// app whose database sits in a shared App Group container, which iOS would
    /// otherwise kill for holding a file lock while suspended (`0xdead10cc`).
    /// Call `resume` when the app comes back. Runs on a keel thread.
    #[uniffi::method(default(and_suspend = false))]
    pub async fn on_background(&self, and_suspend: bool) -> Result<CheckpointResult, KeelError> {
        run_async(&self.db, Runner::Pool, "background", move |db| {
            if !and_suspend {
                return Ok(db.store().on_background()?.into());
            }
            let t = std::time::Instant::now();
            let r =
                db.suspend_with(keel_query::SuspendOptions::default().checkpoint_first(true))?;
            Ok(match r.checkpoint {
                Some(c) => c.into(),
                // The checkpoint could not run (it is logged); the locks are gone anyway.
                None => CheckpointResult {
                    busy: true,
                    wal_frames: -1,
                    checkpointed_frames: -1,
                    duration_ms: t.elapsed().as_secs_f64() * 1e3,
                    wal_bytes_after: std::fs::metadata(format!("{}-wal", db.path().display()))
                        .map(|m| m.len())
                        .unwrap_or(0),
                },
            })
        })
        .await
    }

    /// Let go of every file lock on the database, its `-wal` and its `-shm`
    /// (runs on a keel thread; the calling thread never waits). Afterwards:
    ///
    /// * the database object, its subscriptions and its dictionary stay valid;
    /// * the write or read that was running is interrupted after a short grace
    ///   (50 ms) and fails with `Suspended` (nothing of it committed);
    /// * async writes and reads issued while suspended wait for `resume` — or,
    ///   with `fail_fast`, fail with `Suspended` at once; synchronous reads
    ///   (`get`, `count`, `query(...).all()`, subscribing to a query or an object)
    ///   always fail with `Suspended` rather than block the calling thread; a
    ///   dictionary `subscribe` returns at once and delivers the stored value
    ///   after `resume`;
    /// * dictionary values not yet written are flushed first.
    ///
    /// Swift: `try await db.suspend()`; Kotlin: `db.suspend(failFast = false)`.
    #[uniffi::method(default(fail_fast = false))]
    pub async fn suspend(&self, fail_fast: bool) -> Result<SuspendResult, KeelError> {
        run_async(&self.db, Runner::Pool, "suspend", move |db| {
            Ok(db
                .suspend_with(keel_query::SuspendOptions::default().fail_fast(fail_fast))?
                .into())
        })
        .await
    }

    /// End a `suspend`: waiting calls go on, connections reopen as they are
    /// needed. If another process wrote meanwhile (`external_changes`), live
    /// queries and object subscriptions deliver what changed; dictionary
    /// subscriptions made while suspended get their first value. Runs on a keel
    /// thread of its own: the shared threads of the async calls may all be
    /// taken by reads waiting for this very resume.
    pub async fn resume(&self) -> Result<ResumeResult, KeelError> {
        run_async(&self.db, Runner::OwnThread, "resume", |db| {
            Ok(db.resume()?.into())
        })
        .await
    }

    /// Give memory back (a memory warning: `UIApplication`'s, Android's
    /// `onTrimMemory`): drops the in-memory vector copies and closes idle reader
    /// connections; each is rebuilt lazily, and nothing waits.
    pub fn release_memory(&self) -> MemoryReleased {
        self.db.release_memory().into()
    }

    /// How many subscriptions keel holds for this database right now — object,
    /// query, `including` and nearest ones — keel's own count, to check that
    /// none outlives its stream. None once the database closed.
    pub fn live_subscriptions(&self) -> u64 {
        let (objects, queries) = self.db.subscription_counts();
        let others = if self.closing.has_fired() {
            0
        } else {
            self.others.load(Ordering::SeqCst)
        };
        (objects + queries + others) as u64
    }

    /// True between `suspend` and `resume`.
    pub fn is_suspended(&self) -> bool {
        self.db.is_suspended()
    }

    /// Deliver what other processes committed since this database last looked
    /// (on a keel thread): live queries, object and dictionary subscriptions get
    /// their updates. Needs `OpenOptions.share_changes`; keel runs it by itself
    /// whenever another process commits (Linux, Android, Apple platforms), so call
    /// it only where that wake-up is missing. See `docs/app-groups.md`.
    pub async fn catch_up(&self) -> Result<(), KeelError> {
        run_async(&self.db, Runner::Pool, "catch_up", |db| Ok(db.catch_up()?)).await
    }

    /// Physical I/O since open, per file kind.
    pub fn io_stats(&self) -> IoStats {
        self.db.store().io_stats().into()
    }

    /// Where the open time went (print `text` for a tree).
    pub fn open_report(&self) -> OpenReport {
        (&self.db.store().open_report()).into()
    }

    /// The database file.
    pub fn path(&self) -> String {
        self.db.path().display().to_string()
    }

    /// Finish queued writes, checkpoint and close (on a keel thread). Later calls
    /// on this database throw `Closed`. Every subscription has made its last
    /// delivery when this returns, and their `ended()` then throws `Closed`.
    pub async fn close(&self) -> Result<(), KeelError> {
        gated(async move {
            let r = self.db.close().await;
            self.closing.fire();
            Ok(r?)
        })
        .await
    }

    /// True after `close`.
    pub fn is_closed(&self) -> bool {
        self.db.is_closed()
    }

    /// Resolves when the database is **durable**: the open barrier (the sync of a
    /// WAL a previous run left) is done, so writes commit and checkpoints run.
    /// `open_async` resolves earlier, at *readable*: list your data at once, and
    /// `await db.durable()` only where you need to know a write can commit (writes
    /// issued before are queued, never refused). Resolves at once after
    /// `open_blocking` and when the WAL was empty. Throws the barrier's typed error
    /// (`Io`) if the sync failed: the database stays readable, writes fail.
    /// Swift: `try await db.durable()`; Kotlin: `db.durable()` (suspend).
    pub async fn durable(&self) -> Result<(), KeelError> {
        gated(async move { Ok(self.db.durable().await?) }).await
    }

    /// True once the database is durable (see `durable`).
    pub fn is_durable(&self) -> bool {
        self.db.is_durable()
    }
}

/// A query over one collection, built step by step. Each step returns a new
/// query (queries are immutable and can be shared across threads).
#[derive(Debug, Clone, uniffi::Object)]
pub struct Query {
    pub(crate) db: keel_query::Database,
    /// The database's close signal, handed to subscriptions.
    pub(crate) closing: Arc<Ending>,
    /// The database's count of the subscriptions its hub does not count.
    pub(crate) others: Arc<AtomicUsize>,
    pub(crate) collection: String,
    filter: Vec<Arc<Expr>>,
    order: Vec<Order>,
    limit: Option<u64>,
    offset: u64,
    /// `where_related`: the reference field and the condition on the objects
    /// it names.
    pub(crate) related: Option<(String, Arc<Expr>)>,
    /// `order_by_related`: a field of the objects `all_including` reads with
    /// each object, and whether descending.
    pub(crate) related_order: Option<(String, bool)>,
}

/// One sort key of a [`Query`]: a field, a direction, and optionally a list of
/// values to order by (with where unlisted values go).
#[derive(Debug, Clone)]
struct Order {
    field: String,
    descending: bool,
    list: Option<(Vec<Value>, bool)>,
}

impl Query {
    fn with(&self, f: impl FnOnce(&mut Query)) -> Arc<Query> {
        let mut q = self.clone();
        f(&mut q);
        Arc::new(q)
    }

    /// This query without its `limit` and `offset`.
    pub(crate) fn without_window(&self) -> Query {
        let mut q = self.clone();
        q.limit = None;
        q.offset = 0;
        q
    }

    /// The query's window: `(offset, limit)`.
    pub(crate) fn window(&self) -> (u64, Option<u64>) {
        (self.offset, self.limit)
    }

    /// The engine query, with every name and value type checked.
    pub(crate) fn build_checked(&self) -> Result<keel_query::Query<'static>, KeelError> {
        self.apply_to(self.db.query(&self.collection))
    }

    /// This query's filters, order, limit and offset applied to `q` (a query over
    /// the same collection: the database's, or a write transaction's), with every
    /// name and value type checked.
    pub(crate) fn apply_to<'q>(
        &self,
        mut q: keel_query::Query<'q>,
    ) -> Result<keel_query::Query<'q>, KeelError> {
        let schema = Arc::clone(self.db.schema());
        let r = Resolver::new(&schema, &self.collection, "query")?;
        for f in &self.filter {
            q = q.filter(r.expr(f)?);
        }
        for o in &self.order {
            if o.field.is_empty() {
                // `order_by_relevance`.
                let key = SortKey::relevance();
                q = q.order_by(if o.descending { key.reversed() } else { key });
                continue;
            }
            let p = r.path(&o.field)?;
            let key = match &o.list {
                None => SortKey::asc(p),
                Some((values, unlisted_last)) => {
                    let values = values
                        .iter()
                        .map(|v| r.value(&o.field, v))
                        .collect::<Result<Vec<_>, _>>()?;
                    let unlisted = if *unlisted_last {
                        keel_schema::Unlisted::Last
                    } else {
                        keel_schema::Unlisted::First
                    };
                    SortKey::by_list(p, values, unlisted)
                }
            };
            q = q.order_by(if o.descending { key.reversed() } else { key });
        }
        if let Some(n) = self.limit {
            q = q.limit(n);
        }
        if self.offset > 0 {
            q = q.offset(self.offset);
        }
        Ok(q)
    }
}

#[uniffi::export]
impl Query {
    /// Keep objects matching `expr` (AND-ed with earlier filters).
    pub fn filter(&self, expr: Arc<Expr>) -> Arc<Query> {
        self.with(|q| q.filter.push(expr))
    }

    /// Add a sort key (earlier keys take precedence; ties end on rowid). Absent
    /// values sort first ascending, last descending.
    pub fn order_by(&self, field: String, descending: bool) -> Arc<Query> {
        self.with(|q| {
            q.order.push(Order {
                field,
                descending,
                list: None,
            })
        })
    }

    /// Add a sort key by the position of `field`'s value in `values` (Dflat's
    /// `orderBy(.index(of: […]))`): objects whose value is `values[0]` first, then
    /// `values[1]`, …; values not in the list (and absent ones) come after them
    /// when `unlisted_last`, else before. `descending` reverses the listed part.
    pub fn order_by_list(
        &self,
        field: String,
        values: Vec<Value>,
        unlisted_last: bool,
        descending: bool,
    ) -> Arc<Query> {
        self.with(|q| {
            q.order.push(Order {
                field,
                descending,
                list: Some((values, unlisted_last)),
            })
        })
    }

    /// Add full-text relevance order (bm25 with the fields' `(searchable: w)`
    /// weights): best match first, or worst first when `descending`. The query
    /// needs a `matches`/`search` filter to rank by.
    pub fn order_by_relevance(&self, descending: bool) -> Arc<Query> {
        self.with(|q| {
            q.order.push(Order {
                field: String::new(),
                descending,
                list: None,
            })
        })
    }

    /// At most `n` objects.
    pub fn limit(&self, n: u64) -> Arc<Query> {
        self.with(|q| q.limit = Some(n))
    }

    /// Skip the first `n` objects.
    pub fn offset(&self, n: u64) -> Arc<Query> {
        self.with(|q| q.offset = n)
    }

    /// The filter as text (for logs).
    pub fn describe(&self) -> String {
        let mut s = self.collection.clone();
        for f in &self.filter {
            s.push_str(&format!(" WHERE {}", f.describe()));
        }
        for o in &self.order {
            s.push_str(&format!(" ORDER BY {}", o.field));
            if let Some((values, last)) = &o.list {
                s.push_str(&format!(
                    " IN ORDER ({}) UNLISTED {}",
                    values
                        .iter()
                        .map(|v| keel_schema::Value::from(v.clone()).to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    if *last { "LAST" } else { "FIRST" }
                ));
            }
            s.push_str(if o.descending { " DESC" } else { " ASC" });
        }
        if let Some((field, descending)) = &self.related_order {
            let dir = if *descending { "DESC" } else { "ASC" };
            s.push_str(&format!(" ORDER BY RELATED {field} {dir}"));
        }
        if let Some(n) = self.limit {
            s.push_str(&format!(" LIMIT {n}"));
        }
        if self.offset > 0 {
            s.push_str(&format!(" OFFSET {}", self.offset));
        }
        s
    }

    /// Every matching object, in order (synchronous, on the calling thread).
    pub fn all(&self) -> Result<Vec<StoredObject>, KeelError> {
        sync_call(|| {
            Ok(self
                .build_checked()?
                .all()?
                .into_iter()
                .map(Into::into)
                .collect())
        })
    }

    /// The first matching object.
    pub fn first(&self) -> Result<Option<StoredObject>, KeelError> {
        sync_call(|| Ok(self.build_checked()?.first()?.map(Into::into)))
    }

    /// The number of matching objects (after `limit`/`offset`).
    pub fn count(&self) -> Result<u64, KeelError> {
        sync_call(|| Ok(self.build_checked()?.count()?))
    }

    /// Every matching object with the objects its reference field `field` (a
    /// `(references: …)` field) names, in two reads however many objects match:
    /// the objects, then every referenced object at once (no N+1). `field` may
    /// be an inverse name instead: each object with the objects referring to it.
    /// With `where_related`, only the objects whose related ones match; with
    /// `order_by_related`, in the order of a field of the related ones. Any
    /// other name is `UnknownField`.
    pub fn all_including(&self, field: String) -> Result<Vec<IncludedObject>, KeelError> {
        sync_call(|| self.including_rows(&field))
    }

    /// Every matching object with the number of objects its reference field
    /// `field` names that exist — the count over the relation (a to-many
    /// vector's keys naming an object, repeats counted; 0 or 1 to-one) — in
    /// two reads, the second of the referenced collection's key column only.
    /// A field that is not a reference is `UnknownField`.
    pub fn count_including(&self, field: String) -> Result<Vec<IncludedCount>, KeelError> {
        sync_call(|| {
            if self.related_order.is_some() {
                // The order needs the related objects themselves.
                return Ok(self
                    .including_rows(&field)?
                    .into_iter()
                    .map(|i| IncludedCount {
                        count: i.related.len() as u64,
                        object: i.object,
                    })
                    .collect());
            }
            Ok(self
                .build_checked()?
                .count_including(&field)?
                .into_iter()
                .map(|(o, count)| IncludedCount {
                    object: o.into(),
                    count,
                })
                .collect())
        })
    }

    /// [`Query::all`] on a keel thread.
    pub async fn all_async(&self) -> Result<Vec<StoredObject>, KeelError> {
        gated(async move {
            let q = self.build_checked()?;
            Ok(q.all_async().await?.into_iter().map(Into::into).collect())
        })
        .await
    }

    /// [`Query::count`] on a keel thread.
    pub async fn count_async(&self) -> Result<u64, KeelError> {
        gated(async move {
            let q = self.build_checked()?;
            Ok(q.count_async().await?)
        })
        .await
    }
}
