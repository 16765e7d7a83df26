//! Migrations across the FFI: [`Migrator`] and [`open_migrating_async`].
//!
//! The Rust [`keel_query::Migrator`] runs ordered, named migrations once, in the
//! open's schema transaction, before the database is handed over. Across the FFI a
//! migration rewrites whole collections object by object: keel reads each old object
//! with the schema stored in the file, hands it to the app's [`ObjectMigration`] as
//! JSON (no generated code for the old schema is needed), and writes the JSON the
//! callback returns as an object of the new schema. A callback that throws, or JSON
//! that does not fit the new schema, fails the open with `MigrationFailed` and leaves
//! the file unchanged.

use std::sync::{Arc, Mutex};

use crate::callbacks::{gated, Foreign, ForeignCall};
use crate::db::{parse_schema, Database};
use crate::error::{CallbackError, KeelError};
use crate::tasks::off_thread;
use crate::types::{progress_fn, OpenOptions, OpenProgressListener};

/// Rewrites one object during a migration. **Called on a keel thread** (the open's).
#[uniffi::export(callback_interface)]
pub trait ObjectMigration: Send + Sync {
    /// `old_json`: an object of `collection` as JSON, read with the schema stored in
    /// the file. Return the new object as JSON for the new schema, or `None` to drop
    /// it. Throwing fails the migration and the open; nothing changes.
    fn migrate(
        &self,
        collection: String,
        old_json: String,
    ) -> Result<Option<String>, CallbackError>;
}

/// What [`Migrator::register_backfill`] does with an object whose reference
/// names a missing object.
#[derive(Debug, Clone, PartialEq, uniffi::Enum)]
pub enum BackfillRule {
    /// Clear the missing keys: a to-one field becomes absent, a to-many vector
    /// loses them.
    Nullify,
    /// Drop the object.
    Delete,
    /// Name `key` instead of each missing key.
    Key {
        /// The replacement key (text or integer).
        key: crate::types::Value,
    },
}

/// Where a migration run is.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct MigrationProgress {
    /// The migration running.
    pub migration: String,
    /// Its position among the migrations this open runs (0-based).
    pub index: u32,
    /// How many migrations this open runs.
    pub total: u32,
    /// Objects moved so far.
    pub objects: u64,
    /// `true` on the last event of this migration.
    pub done: bool,
}

/// Receives migration progress, **on a keel thread**. Exceptions are ignored.
#[uniffi::export(callback_interface)]
pub trait MigrationProgressListener: Send + Sync {
    /// One progress event.
    fn on_progress(&self, progress: MigrationProgress) -> Result<(), CallbackError>;
}

/// Ordered, named migrations for [`open_migrating_async`]. Names must be unique and
/// never change once shipped: the file records which names ran. A `Migrator` is
/// used by one open.
#[derive(uniffi::Object, Default)]
pub struct Migrator {
    inner: Mutex<Option<keel_query::Migrator>>,
}

impl std::fmt::Debug for Migrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migrator").finish_non_exhaustive()
    }
}

fn callback_failed(collection: &str, reason: String) -> keel_query::Error {
    keel_query::Error::Migration {
        message: format!("{collection}: {reason}"),
    }
}

impl Migrator {
    fn with<T>(
        &self,
        f: impl FnOnce(keel_query::Migrator) -> (keel_query::Migrator, T),
    ) -> Result<T, KeelError> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let m = g.take().ok_or_else(|| {
            KeelError::invalid_argument("this Migrator was already used by an open")
        })?;
        let (m, t) = f(m);
        *g = Some(m);
        Ok(t)
    }

    fn take(&self) -> Result<keel_query::Migrator, KeelError> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| KeelError::invalid_argument("this Migrator was already used by an open"))
    }
}

#[uniffi::export]
impl Migrator {
    /// No migrations yet.
    #[uniffi::constructor]
    pub fn new() -> Arc<Migrator> {
        Arc::new(Migrator {
            inner: Mutex::new(Some(keel_query::Migrator::new())),
        })
    }

    /// Append migration `name`: every object of each of `collections` (names in the
    /// old and new schema) is passed through `transform` and the collection is
    /// rebuilt for the new schema (new primary key, new field types).
    pub fn register(
        &self,
        name: String,
        collections: Vec<String>,
        transform: Box<dyn ObjectMigration>,
    ) -> Result<(), KeelError> {
        let transform = Arc::new(Foreign::new(transform));
        self.with(move |m| {
            let m = m.register(name, move |mig| {
                for coll in &collections {
                    let t = Arc::clone(&transform);
                    let c2 = coll.clone();
                    mig.rewrite_collection(coll, move |old, new| {
                        let json = old
                            .to_json()
                            .map_err(|e| callback_failed(&c2, e.to_string()))?;
                        let text = json.to_string();
                        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            t.migrate(c2.clone(), text)
                        }))
                        .map_err(|_| callback_failed(&c2, "the callback panicked".into()))?
                        .map_err(|e| callback_failed(&c2, e.to_string()))?;
                        let Some(out) = out else {
                            return Ok(None);
                        };
                        let json: serde_json::Value = serde_json::from_str(&out).map_err(|e| {
                            callback_failed(&c2, format!("it returned text that is not JSON: {e}"))
                        })?;
                        new.encode_json(&json).map(Some).map_err(|e| {
                            callback_failed(
                                &c2,
                                format!("its JSON does not fit the new schema: {e}"),
                            )
                        })
                    })?;
                }
                Ok(())
            });
            (m, ())
        })
    }

    /// Append migration `name`: backfill the reference field `field` of
    /// `collection` by `rule` — the objects naming a missing object are
    /// rewritten or dropped, the others kept byte for byte. Register it with the
    /// schema change that declares the reference `dangling: false` over
    /// existing data, which is otherwise refused (`DanglingReference`). See
    /// keel-query's `Migration::backfill_references`.
    pub fn register_backfill(
        &self,
        name: String,
        collection: String,
        field: String,
        rule: BackfillRule,
    ) -> Result<(), KeelError> {
        let rule = match rule {
            BackfillRule::Nullify => keel_query::Backfill::Nullify,
            BackfillRule::Delete => keel_query::Backfill::Delete,
            BackfillRule::Key { key } => keel_query::Backfill::Key(key.into()),
        };
        self.with(move |m| {
            let m = m.register(name, move |mig| {
                mig.backfill_references(&collection, &field, rule.clone())
                    .map(|_| ())
            });
            (m, ())
        })
    }

    /// Receive progress events while migrations run.
    pub fn on_progress(
        &self,
        listener: Box<dyn MigrationProgressListener>,
    ) -> Result<(), KeelError> {
        let l = Arc::new(Foreign::new(listener));
        self.with(move |m| {
            let m = m.on_progress(move |p| {
                let Some(_call) = ForeignCall::enter() else {
                    return;
                };
                let _ = l.on_progress(MigrationProgress {
                    migration: p.migration,
                    index: u32::try_from(p.index).unwrap_or(u32::MAX),
                    total: u32::try_from(p.total).unwrap_or(u32::MAX),
                    objects: p.objects,
                    done: p.done,
                });
            });
            (m, ())
        })
    }

    /// The registered names, in order.
    pub fn names(&self) -> Vec<String> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|m| m.names().into_iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

/// [`open_async`](crate::open_async), first running the migrations of `migrator`
/// that have not run on this file (see [`Migrator`]). Resolves once the migrated
/// database is durable (the migration commits with the schema step, after the open
/// barrier), not merely readable. Errors as `open_async`, plus `MigrationFailed`.
#[uniffi::export]
pub async fn open_migrating_async(
    path: String,
    schema_fbs: String,
    migrator: Arc<Migrator>,
    options: OpenOptions,
    progress: Option<Box<dyn OpenProgressListener>>,
) -> Result<Arc<Database>, KeelError> {
    gated(async move {
        let m = migrator.take()?;
        let schema = off_thread("parse", move || parse_schema(&schema_fbs)).await?;
        let mut opts = options.to_store_options()?;
        if let Some(l) = progress {
            opts.progress = Some(progress_fn(l));
        }
        let db = keel_query::Database::open_async_migrating(&path, schema, m, opts).await?;
        Ok(Database::new(db))
    })
    .await
}

/// [`open_migrating_async`], blocking the calling thread (scripts, tests).
#[uniffi::export]
pub fn open_migrating_blocking(
    path: String,
    schema_fbs: String,
    migrator: Arc<Migrator>,
    options: OpenOptions,
    progress: Option<Box<dyn OpenProgressListener>>,
) -> Result<Arc<Database>, KeelError> {
    let m = migrator.take()?;
    let schema = parse_schema(&schema_fbs)?;
    let mut opts = options.to_store_options()?;
    if let Some(l) = progress {
        opts.progress = Some(progress_fn(l));
    }
    let db = keel_query::Database::open_migrating(&path, schema, m, opts)?;
    Ok(Database::new(db))
}
