//! Write transactions whose body is foreign code: [`Database::write_txn`] runs a
//! [`WriteBody`] (a Swift closure, a Kotlin lambda, a Python function) *inside*
//! the transaction on keel's writer thread, handing it a [`Txn`] through
//! which it reads what the group wrote so far and writes.
//!
//! It is Rust's `Database::write(|txn| …)` for the bindings, with the same
//! promises: the body runs in its own SAVEPOINT, so a body that throws rolls back
//! what it did and nothing else; concurrent writes still share one commit (group
//! commit); the caller awaits and its thread never blocks.
//!
//! ## Why a pointer
//!
//! keel's [`keel_query::Txn`] borrows the writer connection for the duration of
//! the closure; a UniFFI object must be `'static`. The [`Txn`] therefore
//! holds a pointer to the `Txn` that is valid only while the body runs: it is set
//! before the body is called and cleared (under the same lock every use takes)
//! before the closure returns, and every use checks that it is made on the
//! writer thread that set it. A `Txn` kept past its body, or used from
//! another thread, answers with a typed error instead of touching freed memory.

use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use crate::callbacks::{gated, Foreign, ForeignCall};
use crate::db::{apply_op, keys, Database, Query};
use crate::error::{CallbackError, KeelError};
use crate::packed::PackedObjects;
use crate::types::{StoredObject, Value, WriteOp, WriteResult};

/// The body of a [`Database::write_txn`]: foreign code run inside the write
/// transaction, **on keel's writer thread**, synchronously. It must not wait for
/// other keel writes (they queue behind it) and should be short: every other
/// writer waits while it runs.
///
/// Throwing (any error) rolls back what the body did; `write_txn` then fails with
/// `Cancelled` carrying the error's text. The Swift and Kotlin layers keep the
/// original error and rethrow it from `write`.
#[uniffi::export(callback_interface)]
pub trait WriteBody: Send + Sync {
    /// Run the body against `txn` (valid only until this returns).
    fn run(&self, txn: Arc<Txn>) -> Result<(), CallbackError>;
}

/// Where the live `Txn` is, and on which thread it may be used.
struct Live {
    txn: std::ptr::NonNull<keel_query::Txn<'static>>,
    thread: ThreadId,
}

// SAFETY: `Live` is only dereferenced on `thread` (checked in `Txn::with`),
// the writer thread that owns the `Txn`, while the body it was made for runs; it is
// moved across threads only as part of the `Txn` that carries it.
#[allow(unsafe_code)]
unsafe impl Send for Live {}

/// A write transaction as a [`WriteBody`] sees it: reads see every write of the
/// transaction so far (this body's and those of earlier bodies of the same
/// group commit); writes are verified and applied at once (a failing one throws
/// and changes nothing, and the body may catch it and go on).
///
/// Valid only while its body runs, and only on the thread that runs it; later
/// (or elsewhere) every method throws `InvalidArgument`.
#[derive(uniffi::Object)]
pub struct Txn {
    live: Mutex<Option<Live>>,
    path: std::path::PathBuf,
    schema: Arc<keel_schema::Schema>,
}

impl std::fmt::Debug for Txn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn")
            .field("path", &self.path)
            .field("live", &self.is_live())
            .finish()
    }
}

impl Txn {
    fn is_live(&self) -> bool {
        self.live.lock().map(|l| l.is_some()).unwrap_or(false)
    }

    /// Run `f` on the live `Txn`, or fail with a typed error when the body has
    /// returned or the call comes from another thread.
    pub(crate) fn with<T>(
        &self,
        op: &str,
        f: impl FnOnce(&mut keel_query::Txn<'_>) -> Result<T, KeelError>,
    ) -> Result<T, KeelError> {
        let guard = self
            .live
            .lock()
            .map_err(|_| KeelError::internal(format!("transaction {op}: lock poisoned")))?;
        let Some(live) = guard.as_ref() else {
            return Err(KeelError::invalid_argument(format!(
                "transaction {op}: the transaction ended when its write body returned; \
                 use it only inside the body"
            )));
        };
        if live.thread != std::thread::current().id() {
            return Err(KeelError::invalid_argument(format!(
                "transaction {op}: called from another thread; a write body must use its \
                 transaction on the thread keel calls it on"
            )));
        }
        // SAFETY: the pointer was made from the `&mut Txn` the writer passed to the
        // closure in `Database::write_txn`, which keeps that borrow unused until it
        // clears `live` under this same lock after the body returned. We are on the
        // writer thread (checked above) and hold the lock, so this is the only
        // reference in use. `'static` is a stand-in for the closure's lifetime:
        // nothing borrowed from the `Txn` outlives this call (results are owned).
        #[allow(unsafe_code)]
        let txn = unsafe { &mut *live.txn.as_ptr() };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(txn))).unwrap_or_else(|_| {
            Err(KeelError::internal(format!(
                "transaction {op}: keel panicked inside the call"
            )))
        })
    }

    pub(crate) fn query_on<'t>(
        &self,
        txn: &'t keel_query::Txn<'_>,
        query: &Query,
    ) -> Result<keel_query::Query<'t>, KeelError> {
        if query.db.path() != self.path {
            return Err(KeelError::invalid_argument(format!(
                "transaction query: the query belongs to {}, the transaction to {}",
                query.db.path().display(),
                self.path.display()
            )));
        }
        query.apply_to(txn.query(&query.collection))
    }
}

/// Names of the top-level fields whose values differ between two encodings of the
/// same collection's object (flatc JSON of each, read with the database's schema):
/// what a typed `change` sends as `ChangeFrom`'s field list. A union's `x_type`
/// key names the union `x`.
fn changed_fields(
    schema: &keel_schema::Schema,
    collection: &str,
    before: &[u8],
    after: &[u8],
) -> Result<Vec<String>, KeelError> {
    let r = crate::expr::Resolver::new(schema, collection, "change")?;
    let reader = schema
        .table_reader(r.table)
        .ok_or_else(|| KeelError::internal("collection table missing"))?;
    let json = |what: &str, b: &[u8]| {
        let invalid = |e: keel_schema::DecodeError| KeelError::InvalidObject {
            message: format!("change of {collection}: the {what} object is not valid: {e}"),
        };
        match reader
            .read(b)
            .map_err(invalid)?
            .to_json()
            .map_err(invalid)?
        {
            serde_json::Value::Object(m) => Ok(m),
            _ => Err(KeelError::internal("an object's JSON is not a map")),
        }
    };
    let (b, a) = (json("old", before)?, json("new", after)?);
    let table = reader.table();
    let mut out: Vec<String> = Vec::new();
    for k in b.keys().chain(a.keys()) {
        if b.get(k) == a.get(k) {
            continue;
        }
        let name = match k.strip_suffix("_type") {
            Some(base) if table.field(k).is_none() && table.field(base).is_some() => base,
            _ => k.as_str(),
        };
        if table.field(name).is_some() && !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

#[uniffi::export]
impl Txn {
    /// The object of `collection` with primary key `key` as this transaction sees
    /// it (earlier writes of the transaction included), or null.
    pub fn get(&self, collection: String, key: Vec<Value>) -> Result<Option<Vec<u8>>, KeelError> {
        self.with("get", |t| {
            Ok(t.get_bytes(&collection, &keys(key))?.map(|o| o.bytes))
        })
    }

    /// Run one write now, inside the transaction: insert, update, upsert, change,
    /// change-from or delete, exactly as in a `Database::write` batch. A failing
    /// operation throws and changes nothing; the body may catch it and go on.
    pub fn write(&self, op: WriteOp) -> Result<WriteResult, KeelError> {
        self.with("write", |t| Ok(apply_op(t, op)?))
    }

    /// Run `ops` now, in order, inside the transaction, exactly as consecutive
    /// `write` calls would, in one call across the FFI instead of one per
    /// operation (what the typed layers' `insertAll` / `upsertAll` use; a foreign
    /// call costs far more than a small write). The first failing operation
    /// throws, changing nothing itself; the operations before it stay written,
    /// as they would after that many `write` calls (the body may catch the error
    /// and go on, or throw to roll the body back). Results come back in order.
    pub fn write_all(&self, ops: Vec<WriteOp>) -> Result<Vec<WriteResult>, KeelError> {
        self.with("write", |t| {
            ops.into_iter().map(|op| Ok(apply_op(t, op)?)).collect()
        })
    }

    /// Field-wise change by example: `before` and `after` are two encodings of the
    /// object of `collection` with `key` (typically the stored object as the app's
    /// types decoded and re-encoded it, and the same after the app's edit). The
    /// fields whose values differ between them are set from `after` on top of the
    /// object stored *now* (a `ChangeFrom`); every other field, including fields,
    /// union members and enum values the app's schema does not know, keeps its
    /// stored bytes. Returns the object's rowid; nothing is written (and the rowid
    /// of the stored object is returned) when no field differs. `NotFound` if no
    /// object has `key`.
    pub fn change_diff(
        &self,
        collection: String,
        key: Vec<Value>,
        before: Vec<u8>,
        after: Vec<u8>,
    ) -> Result<i64, KeelError> {
        let fields = changed_fields(&self.schema, &collection, &before, &after)?;
        self.with("change", |t| {
            let key = keys(key);
            if fields.is_empty() {
                return match t.get_bytes(&collection, &key)? {
                    Some(o) => Ok(o.rowid),
                    None => Err(keel_query::Error::NotFound {
                        op: "change",
                        collection: collection.clone(),
                        key,
                    }
                    .into()),
                };
            }
            let names: Vec<&str> = fields.iter().map(String::as_str).collect();
            Ok(t.change_bytes(&collection, &key, &after, &names)?)
        })
    }

    /// Every object `query` matches, as this transaction sees them. `query` must
    /// come from the same database (`db.query(...)`, with any filters).
    pub fn all(&self, query: Arc<Query>) -> Result<Vec<StoredObject>, KeelError> {
        self.with("all", |t| {
            Ok(self
                .query_on(t, &query)?
                .all()?
                .into_iter()
                .map(Into::into)
                .collect())
        })
    }

    /// [`Txn::all`] as one buffer (see [`PackedObjects`]).
    pub fn all_packed(&self, query: Arc<Query>) -> Result<PackedObjects, KeelError> {
        let objects = self.with("all", |t| Ok(self.query_on(t, &query)?.all()?))?;
        PackedObjects::pack(objects)
    }

    /// The first object `query` matches, as this transaction sees it.
    pub fn first(&self, query: Arc<Query>) -> Result<Option<StoredObject>, KeelError> {
        self.with("first", |t| {
            Ok(self.query_on(t, &query)?.first()?.map(Into::into))
        })
    }

    /// How many objects `query` matches, as this transaction sees them.
    pub fn count(&self, query: Arc<Query>) -> Result<u64, KeelError> {
        self.with("count", |t| Ok(self.query_on(t, &query)?.count()?))
    }

    /// True while the body this transaction was handed to runs.
    pub fn is_active(&self) -> bool {
        self.is_live()
    }
}

#[uniffi::export]
impl Database {
    /// Run `body` inside a write transaction on keel's writer thread, and resolve
    /// after COMMIT. The body gets a [`Txn`]: its reads see the
    /// transaction's earlier writes, so read-modify-write (a counter, "insert if
    /// absent") is race-free. The body runs in its own SAVEPOINT: if it throws,
    /// what it wrote is rolled back and `write_txn` fails with `Cancelled` (the
    /// Swift and Kotlin layers rethrow the body's own error); other writes of the
    /// same group commit are unaffected. Concurrent `write`/`write_txn` calls share
    /// one commit and one sync.
    pub async fn write_txn(&self, body: Box<dyn WriteBody>) -> Result<(), KeelError> {
        gated(self.write_txn_ungated(body)).await
    }
}

impl Database {
    /// [`Database::write_txn`] without the exit gate. The body is a foreign call:
    /// once [`stop_callbacks`](crate::callbacks::stop_callbacks) ran it is not called (the write fails with
    /// `Cancelled`) and the foreign object is leaked, not freed, on keel's thread.
    async fn write_txn_ungated(&self, body: Box<dyn WriteBody>) -> Result<(), KeelError> {
        let body = Foreign::new(body);
        let thrown: Arc<Mutex<Option<KeelError>>> = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&thrown);
        let path = self.db.path().to_path_buf();
        let schema = Arc::clone(self.db.schema());
        let fut = self.db.write(move |txn| {
            let handle = Arc::new(Txn {
                live: Mutex::new(Some(Live {
                    txn: std::ptr::NonNull::from(&mut *txn).cast(),
                    thread: std::thread::current().id(),
                })),
                path,
                schema,
            });
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(
                    || match ForeignCall::enter() {
                        Some(_call) => body.run(Arc::clone(&handle)),
                        None => Err(CallbackError::Failed {
                            reason: "keel's callbacks are stopped (the process is exiting)".into(),
                        }),
                    },
                ));
            // From here on the handle refuses every use: the `Txn` is ours again.
            match handle.live.lock() {
                Ok(mut l) => *l = None,
                Err(p) => *p.into_inner() = None,
            }
            let failed = match r {
                Ok(Ok(())) => None,
                Ok(Err(CallbackError::Failed { reason })) => Some(KeelError::Cancelled {
                    message: format!("the write body threw: {reason}"),
                }),
                Err(_) => Some(KeelError::internal("the write body panicked")),
            };
            if let Some(e) = failed {
                // Roll back this body only (its SAVEPOINT); the future then resolves
                // with `Aborted`, which the error the body threw replaces below.
                txn.abort();
                if let Ok(mut s) = slot.lock() {
                    *s = Some(e);
                }
            }
            Ok(())
        });
        let r = fut.await;
        if let Some(e) = thrown.lock().ok().and_then(|mut s| s.take()) {
            return Err(e);
        }
        Ok(r?)
    }
}
