//! The catch-up: what other processes committed, read and delivered (the upper
//! half of the cross-process change feed; the log, the gate and the wake-up are
//! in `feed.rs`, which explains the design).
//!
//! One catch-up runs at a time per database, inside the feed's gate: it reads the
//! log after the last sequence number seen and — in the same read transaction —
//! the current bytes of every changed row and the current value of every changed
//! dictionary key, then hands the rows to the subscription hub (like a local
//! commit: in-memory filter and sort, row-level diffs) and the values to the
//! dictionary's cache and subscribers.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use keel_schema::Value;

use crate::base::change::Change;
use crate::base::error::{Error, Result};
use crate::base::sql_value::SqlValue;
use crate::dictionary::shared::read_row;
use crate::dictionary::value::DictValue;
use crate::engine;
use crate::engine::Inner;
use crate::feed;
use crate::feed::{lock, Feed, LogRead, RemoteRow};
use crate::layout::body;
use crate::layout::table::Coll;

/// Attempts of the `keel-feed` thread per wake-up before it leaves a failing
/// catch-up to the next post, [`Database::catch_up`](crate::db::database::Database::catch_up)
/// or resume (its log position has not moved, so nothing is skipped).
const ATTEMPTS: u32 = 8;

/// Start `feed`'s `keel-feed` thread for the database `db`: every post from a
/// process runs [`catch_up`], again after a failure (a reader pool busy past
/// `reader_wait`, say), with a backoff of 20 ms doubling to 1.3 s. While the
/// store is suspended its reads fail at once instead of waiting for resume
/// (which catches up by itself), so the thread never holds the gate across a
/// suspension.
pub(crate) fn start(feed: &Feed, db: Weak<Inner>) -> Result<()> {
    feed.start(move || {
        let Some(inner) = db.upgrade() else { return };
        let mut delay = Duration::from_millis(20);
        for attempt in 1..=ATTEMPTS {
            let Err(e) = keel_storage::fail_fast_while_suspended(|| catch_up(&inner)) else {
                return;
            };
            if inner.store.is_suspended() || inner.check_open("catch up").is_err() {
                // Resume catches up (and close ends it all).
                tracing::debug!(error = %e, "cross-process catch-up stopped by a suspend");
                return;
            }
            tracing::warn!(error = %e, attempt, "cross-process catch-up failed; trying again");
            if attempt == ATTEMPTS {
                return;
            }
            // In short steps: a close waits for this thread.
            let until = Instant::now() + delay;
            while Instant::now() < until {
                if inner.check_open("catch up").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10).min(delay));
            }
            delay *= 2;
        }
    })
}

/// The primary key of an object's bytes (as `Txn` computes it on insert).
fn key_of(inner: &Inner, c: &Coll, rowid: i64, bytes: &[u8]) -> Option<Vec<Value>> {
    if c.key.is_empty() {
        return Some(vec![Value::Int(rowid)]);
    }
    let t = inner.table(c).ok()?;
    let obj = t.read(bytes).ok()?;
    c.key
        .iter()
        .map(|k| {
            obj.get_ref(&k.path)
                .ok()
                .map(|v| SqlValue::from_ref(v).to_value())
        })
        .collect()
}

/// A key as the hub compares it (a logged `Bool` and a read `Int` are one key).
fn normalized(k: &[Value]) -> Vec<Value> {
    k.iter()
        .map(|v| SqlValue::from_value(v).to_value())
        .collect()
}

/// The bytes of `rowid` in `c` now (`None`: deleted). By rowid, the one column
/// every layout keeps beside the bytes.
fn row_now(conn: &rusqlite::Connection, c: &Coll, rowid: i64) -> Result<Option<Vec<u8>>> {
    let err = |e| Error::sqlite("catch up", &c.name, e);
    let sql = format!(
        "SELECT {} FROM {} WHERE rowid = ?1",
        c.body.select(),
        c.ident
    );
    let mut st = conn.prepare_cached(&sql).map_err(err)?;
    let mut q = st.query([rowid]).map_err(err)?;
    match q.next().map_err(err)? {
        Some(r) => {
            let bytes = body::with_scratch(|s| c.body.read(r, 0, s).map(<[u8]>::to_vec));
            Ok(Some(bytes.map_err(err)?))
        }
        None => Ok(None),
    }
}

type DictValues = Vec<(String, Option<DictValue>)>;

/// What one catch-up read, in one snapshot.
enum Batch {
    Nothing,
    Full {
        end: i64,
        dict: DictValues,
    },
    Changes {
        end: i64,
        commits: u64,
        rows: Vec<RemoteRow>,
        dict: DictValues,
        dict_clear: bool,
    },
}

fn read_dict(conn: &rusqlite::Connection, keys: &[String]) -> Result<DictValues> {
    keys.iter()
        .map(|k| Ok((k.clone(), read_row(conn, k)?)))
        .collect()
}

fn read_batch(
    inner: &Inner,
    conn: &rusqlite::Connection,
    origin: i64,
    last: i64,
    subscribed: &[String],
) -> Result<Batch> {
    let (end, commits, changed, mut keys, dict_clear) = match feed::read_log(conn, origin, last)? {
        LogRead::Nothing => return Ok(Batch::Nothing),
        LogRead::Full { end } => {
            return Ok(Batch::Full {
                end,
                dict: read_dict(conn, subscribed)?,
            })
        }
        LogRead::Changes {
            end,
            commits,
            rows,
            keys,
            dict_clear,
        } => (end, commits, rows, keys, dict_clear),
    };
    // Each changed row once, in the order of its first change, with every key
    // logged at it (SQLite reuses the rowid of a deleted last row).
    let mut at: HashMap<(String, i64), usize> = HashMap::new();
    let mut touched: Vec<(String, i64, Vec<Vec<Value>>, bool)> = Vec::new();
    for (coll, rowid, key) in changed {
        let i = *at.entry((coll.clone(), rowid)).or_insert_with(|| {
            touched.push((coll, rowid, Vec::new(), false));
            touched.len() - 1
        });
        match key {
            Some(k) => {
                if !touched[i].2.contains(&k) {
                    touched[i].2.push(k);
                }
            }
            None => touched[i].3 = true, // an entry without keys
        }
    }
    // The deletes of objects whose rowid now holds another key (or nothing) come
    // first: an object deleted at one rowid and inserted again at another ends
    // up present, whatever the order of the rowids.
    let mut gone = Vec::new();
    let mut rows = Vec::new();
    for (coll, rowid, logged, unkeyed) in touched {
        let Ok(c) = inner.coll(&coll, "catch up") else {
            continue; // a collection this handle's schema does not have
        };
        if inner.unborn(conn, c)? {
            continue;
        }
        let bytes = row_now(conn, c, rowid)?;
        let key = bytes.as_deref().and_then(|b| key_of(inner, c, rowid, b));
        let now = key.as_deref().map(normalized);
        for k in logged {
            if now.as_ref() != Some(&normalized(&k)) {
                gone.push(RemoteRow {
                    collection: c.name.clone(),
                    rowid,
                    key: Some(k),
                    bytes: None,
                });
            }
        }
        // A delete whose key no entry logged is found by rowid, as before.
        if bytes.is_some() || unkeyed {
            rows.push(RemoteRow {
                collection: c.name.clone(),
                rowid,
                key,
                bytes,
            });
        }
    }
    gone.append(&mut rows);
    let rows = gone;
    if dict_clear {
        // Keys set after the clear are in `keys`; every other subscribed key is gone.
        keys.extend(subscribed.iter().cloned());
    }
    keys.sort();
    keys.dedup();
    Ok(Batch::Changes {
        end,
        commits,
        rows,
        dict: read_dict(conn, &keys)?,
        dict_clear,
    })
}

/// Read what other processes committed since this handle last looked, and deliver
/// it to the subscriptions and the dictionary (see `feed.rs`). Does nothing
/// without sharing, after the close, and where it would wait for itself: inside
/// a write closure, or in a subscription callback of a local commit or of a
/// catch-up (the `keel-feed` thread delivers those commits right after). Runs on the `keel-feed` thread after a
/// wake-up, and on the caller's thread from
/// [`Database::catch_up`](crate::db::database::Database::catch_up).
pub(crate) fn catch_up(inner: &Arc<Inner>) -> Result<()> {
    let Some(feed) = inner.feed.as_ref() else {
        // Without the feed: another process's commits are found by the writer
        // connection's data_version, and every subscription is read again.
        if inner.check_open("catch up").is_ok() && !engine::in_write_closure(inner) {
            inner.notice_foreign(true);
        }
        return Ok(());
    };
    if inner.check_open("catch up").is_err() || feed.inside() || engine::in_write_closure(inner) {
        return Ok(());
    }
    let mut last = lock(&feed.last);
    // Woken by this process's own commits only: nothing to deliver, and no need
    // to hold local commits off (they were delivered by the writer).
    let seen = *last;
    if let Some(end) = inner.store.read(|c| feed::own_only(c, feed.origin, seen))? {
        *last = end;
        return Ok(());
    }
    // The read connection first, holding nothing; then the gate, without waiting
    // (see "No lock is held across a wait for a reader" in `feed.rs`). The
    // snapshot starts at the first statement, after the gate was entered.
    let subscribed = inner.dict.subs.keys();
    let (_feeding, batch) = loop {
        let got = inner.store.read(|c| match feed.try_feeding() {
            Some(g) => read_batch(inner, c, feed.origin, *last, &subscribed).map(|b| Some((g, b))),
            None => Ok(None),
        })?;
        match got {
            Some(x) => break x,
            None => feed.wait_idle(),
        }
    };
    feed.catch_ups.fetch_add(1, Ordering::Relaxed);
    match batch {
        Batch::Nothing => {}
        Batch::Full { end, dict } => {
            if let Some(hub) = inner.hub.get() {
                hub.resync();
            }
            inner.foreign_changes(&[]);
            inner.dict.apply_remote(dict, true);
            *last = end;
            feed.full_refetches.fetch_add(1, Ordering::Relaxed);
        }
        Batch::Changes {
            end,
            commits,
            rows,
            dict,
            dict_clear,
        } => {
            let (nrows, nkeys) = (rows.len() as u64, dict.len() as u64);
            if !rows.is_empty() {
                // Made once for the hub and the hooks. A row logged without its
                // key (by a keel that logged none) has an empty one.
                let changes: Vec<Change> = rows
                    .iter()
                    .map(|r| r.change(r.key.clone().unwrap_or_default()))
                    .collect();
                if let Some(hub) = inner.hub.get() {
                    hub.on_remote(&changes);
                }
                // The hooks cannot match a change without its key: they read again.
                let keyed = changes.iter().all(|c| !c.key.is_empty());
                inner.foreign_changes(if keyed { &changes } else { &[] });
            }
            if !dict.is_empty() || dict_clear {
                inner.dict.apply_remote(dict, dict_clear);
            }
            *last = end;
            // Counted once delivered: a test that saw the count sees the deliveries.
            feed.remote_rows.fetch_add(nrows, Ordering::Relaxed);
            feed.remote_keys.fetch_add(nkeys, Ordering::Relaxed);
            feed.remote_commits.fetch_add(commits, Ordering::Relaxed);
        }
    }
    Ok(())
}
