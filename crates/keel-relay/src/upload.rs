//! The up path: applying one upload batch to PostgreSQL, all or nothing, exactly once.
//!
//! An operation (JSON) is one of
//!
//! ```json
//! {"seq": 7, "op": "insert", "collection": "blog.Post", "key": {"id": "p1"},
//!  "fields": {"title": "Hi", "likes": 0}, "base_version": 0}
//! {"seq": 8, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
//!  "fields": {"title": "Hello"}, "deltas": {"likes": 3}, "base_version": 41}
//! {"seq": 9, "op": "delete", "collection": "blog.Post", "key": {"id": "p1"}, "base_version": 42}
//! ```
//!
//! [`apply_batch`] first checks every operation against the schema without touching
//! the database (names, types, ranges, counters sent as deltas); any problem refuses
//! the batch with a typed reason per operation. Then, in one transaction, it locks the
//! client's ledger row (so two relays never interleave one client's batches), answers
//! operations already in the ledger from it (a replay applies nothing twice), and
//! applies the rest:
//!
//! * **insert** — a new row; on a row that exists, a write of the given fields
//!   (counter values then add, as two devices' offline increments should);
//! * **patch** — only the given fields (counters add their deltas); a
//!   `server_wins` field only when the row's version still equals the base version;
//!   a row that is gone is skipped (`row_gone`), never resurrected;
//! * **delete** — removes the row it saw: a row inserted again after the client's
//!   base version is another incarnation and survives (`stale_delete`).
//!
//! Every row touched must be inside the client's scopes before and after the write;
//! otherwise, or when PostgreSQL refuses a write (a constraint, a validation trigger),
//! the transaction rolls back and the batch is refused naming the operation. After
//! the commit the answer carries `pg_current_wal_flush_lsn()`, at or after the commit.
//!
//! When PostgreSQL rolls the batch back for a deadlock (another writer locked the
//! same rows in the other order) or a serialization failure, it asks for the
//! transaction to be run again: the relay does so itself, a few times after short
//! waits of different lengths, before it answers `unavailable`. Running it again
//! is safe, since nothing of the rolled-back attempt remains.
//!
//! The batch is applied set-wise first (`crate::set_apply`: a few statements per
//! batch); when that meets anything that refuses the batch, the transaction rolls
//! back and a fresh one applies it one operation at a time (below), which names the
//! operation. Either way the results go into the ledger with one INSERT, and the
//! ledger rows below the client's `unacked_from` (the lowest sequence it has had
//! no answer for) are deleted in the same transaction.
//!
//! Values reach PostgreSQL as `jsonb` parameters, turned into typed rows by
//! `jsonb_populate_record`, so the relay never builds SQL from values.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Transaction};

use crate::error::Error;
use crate::op::{rejection, Kind, Op};
use crate::protocol::{OpRefusal, OpResult, RefusalReason};
use crate::scope::{sql_filter, BoundScope};
use crate::set_apply;
use crate::sync_schema::{
    quote_ident, ConflictRule, SyncCollection, SyncColumn, SyncSchema, ValueKind,
};

/// What an upload came to.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchOutcome {
    /// Applied (or replayed) and committed.
    Acked {
        /// An LSN at or after the commit.
        lsn: String,
        /// One result per operation.
        results: Vec<OpResult>,
    },
    /// Refused whole: nothing applied.
    Refused(Vec<OpRefusal>),
}

/// Who is uploading.
#[derive(Debug, Clone)]
pub struct Uploader<'a> {
    /// The client install's id.
    pub client_id: &'a str,
    /// The token's subject.
    pub subject: &'a str,
    /// The client's scopes.
    pub scopes: &'a [BoundScope],
    /// The client's lowest sequence number it has not had an answer for: every
    /// ledger row below it may go (`None`: keep them).
    pub unacked_from: Option<i64>,
}

type Refusal = (RefusalReason, String);

/// How many times a batch runs when PostgreSQL keeps rolling it back for a
/// deadlock or a serialization failure.
const ATTEMPTS: u32 = 5;

/// Applies one batch; database failures other than a refused write are errors (the
/// caller answers `unavailable`; nothing was committed). A batch that PostgreSQL
/// rolls back to be run again (see the module docs) is run again first.
pub async fn apply_batch(
    client: &mut Client,
    schema: &SyncSchema,
    who: &Uploader<'_>,
    raw: &[Value],
) -> Result<BatchOutcome, Error> {
    let mut attempt = 1;
    loop {
        match apply_once(client, schema, who, raw).await {
            Err(e) if attempt < ATTEMPTS && to_run_again(&e) => {
                tracing::debug!(error = %e, attempt, "batch rolled back by PostgreSQL; running it again");
                tokio::time::sleep(pause_before(attempt)).await;
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Whether PostgreSQL rolled the transaction back for the caller to run again.
fn to_run_again(e: &Error) -> bool {
    let Error::Database(e) = e else {
        return false;
    };
    e.code().is_some_and(|code| {
        *code == SqlState::T_R_DEADLOCK_DETECTED || *code == SqlState::T_R_SERIALIZATION_FAILURE
    })
}

/// The wait before running a batch again: longer each time, and spread (by the
/// clock's nanoseconds), so the two sides of a deadlock do not meet again.
fn pause_before(attempt: u32) -> Duration {
    let spread = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() % 10_000_000);
    Duration::from_millis(5 * u64::from(attempt)) + Duration::from_nanos(u64::from(spread))
}

/// [`apply_batch`]'s one run: parse, then apply in one transaction.
async fn apply_once(
    client: &mut Client,
    schema: &SyncSchema,
    who: &Uploader<'_>,
    raw: &[Value],
) -> Result<BatchOutcome, Error> {
    let mut refusals = Vec::new();
    let mut ops = Vec::new();
    let mut last_seq = 0;
    for (index, value) in raw.iter().enumerate() {
        let seq = value.get("seq").and_then(Value::as_i64);
        match parse_op(schema, index, value) {
            Ok(op) if op.seq <= last_seq => refusals.push(OpRefusal {
                index,
                seq,
                reason: RefusalReason::MalformedOp,
                message: "sequence numbers must increase within a batch".into(),
            }),
            Ok(op) => {
                last_seq = op.seq;
                ops.push(op);
            }
            Err((reason, message)) => refusals.push(OpRefusal {
                index,
                seq,
                reason,
                message,
            }),
        }
    }
    if !refusals.is_empty() {
        return Ok(BatchOutcome::Refused(refusals));
    }

    // First set-wise; when that meets a refusal, again one operation at a time in
    // a fresh transaction, which names the operation that caused it.
    for set_wise in [true, false] {
        let tx = client.transaction().await?;
        let (mut results, applied_through) = match begin(&tx, who, &ops).await? {
            Ok(ready) => ready,
            Err(refused) => return Ok(refused),
        };
        let pending: Vec<&Op<'_>> = ops
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|(op, _)| op)
            .collect();
        let applied = if set_wise {
            match set_apply::apply(&tx, who.scopes, &pending).await? {
                Some(applied) => applied,
                // Dropping the transaction rolls back what it wrote.
                None => continue,
            }
        } else {
            match one_by_one(&tx, who.scopes, &pending).await? {
                Ok(applied) => applied,
                Err(refusals) => return Ok(BatchOutcome::Refused(refusals)),
            }
        };
        let mut highest = applied_through;
        let (mut seqs, mut stored) = (Vec::new(), Vec::new());
        for result in &applied {
            highest = highest.max(result.seq);
            seqs.push(result.seq);
            stored.push(serde_json::to_value(result).unwrap_or(Value::Null));
        }
        let mut applied = applied.into_iter();
        for slot in results.iter_mut().filter(|r| r.is_none()) {
            *slot = applied.next();
        }
        if !seqs.is_empty() {
            tx.execute(
                "INSERT INTO keel_relay.op_ledger (client_id, seq, result) \
                 SELECT $1, u.seq, u.result FROM unnest($2::bigint[], $3::jsonb[]) AS u(seq, result)",
                &[&who.client_id, &seqs, &stored],
            )
            .await?;
        }
        prune(&tx, who, &ops).await?;
        tx.execute(
            "UPDATE keel_relay.clients SET last_seq = $2, updated_at = now() WHERE client_id = $1",
            &[&who.client_id, &highest],
        )
        .await?;
        tx.commit().await?;
        // The commit record is flushed when COMMIT returns, so the flush position is at
        // or after it; the down stream's checkpoints pass this position.
        let lsn: String = client
            .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
            .await?
            .get(0);
        return Ok(BatchOutcome::Acked {
            lsn,
            results: results.into_iter().flatten().collect(),
        });
    }
    unreachable!("the one-by-one pass always answers")
}

/// What [`begin`] found: each operation's ledger result (`Some` for a replay) and
/// the highest sequence applied before this batch.
type Ready = (Vec<Option<OpResult>>, i64);

/// Registers the client (first upload), locks its ledger row, checks that the
/// client id is this user's, and answers replayed operations from the ledger; a
/// sequence at or below the highest applied one that is not there is refused.
async fn begin(
    tx: &Transaction<'_>,
    who: &Uploader<'_>,
    ops: &[Op<'_>],
) -> Result<Result<Ready, BatchOutcome>, Error> {
    tx.execute(
        "INSERT INTO keel_relay.clients (client_id, subject) VALUES ($1, $2) \
         ON CONFLICT (client_id) DO NOTHING",
        &[&who.client_id, &who.subject],
    )
    .await?;
    let row = tx
        .query_one(
            "SELECT subject, last_seq FROM keel_relay.clients WHERE client_id = $1 FOR UPDATE",
            &[&who.client_id],
        )
        .await?;
    let owner: String = row.get(0);
    let applied_through: i64 = row.get(1);
    if owner != who.subject {
        return Ok(Err(BatchOutcome::Refused(
            ops.iter()
                .map(|op| OpRefusal {
                    index: op.index,
                    seq: Some(op.seq),
                    reason: RefusalReason::ClientIdTaken,
                    message: "this client id belongs to another user".into(),
                })
                .collect(),
        )));
    }
    let seqs: Vec<i64> = ops.iter().map(|op| op.seq).collect();
    let ledger = tx
        .query(
            "SELECT seq, result FROM keel_relay.op_ledger WHERE client_id = $1 AND seq = ANY($2)",
            &[&who.client_id, &seqs],
        )
        .await?;
    let mut results: Vec<Option<OpResult>> = vec![None; ops.len()];
    for row in &ledger {
        let seq: i64 = row.get(0);
        let stored: Value = row.get(1);
        if let (Some(i), Ok(mut result)) = (
            ops.iter().position(|op| op.seq == seq),
            serde_json::from_value::<OpResult>(stored),
        ) {
            result.replayed = true;
            results[i] = Some(result);
        }
    }
    let mut refusals = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if results[i].is_none() && op.seq <= applied_through {
            refusals.push(OpRefusal {
                index: op.index,
                seq: Some(op.seq),
                reason: RefusalReason::SequenceRegressed,
                message: format!(
                    "sequence {} is not above the last applied one ({applied_through}) and is not in the ledger",
                    op.seq
                ),
            });
        }
    }
    if !refusals.is_empty() {
        return Ok(Err(BatchOutcome::Refused(refusals)));
    }
    Ok(Ok((results, applied_through)))
}

/// Drops the ledger rows the client has had its answer for: those below its
/// `unacked_from` (never one of this batch's own, whatever the client claims).
async fn prune(tx: &Transaction<'_>, who: &Uploader<'_>, ops: &[Op<'_>]) -> Result<(), Error> {
    let Some(mut below) = who.unacked_from else {
        return Ok(());
    };
    if let Some(first) = ops.iter().map(|op| op.seq).min() {
        below = below.min(first);
    }
    tx.execute(
        "DELETE FROM keel_relay.op_ledger WHERE client_id = $1 AND seq < $2",
        &[&who.client_id, &below],
    )
    .await?;
    Ok(())
}

/// Applies `ops` one at a time, in order: their results, or every refusal found
/// (a database rejection stops at the operation it names).
async fn one_by_one(
    tx: &Transaction<'_>,
    scopes: &[BoundScope],
    ops: &[&Op<'_>],
) -> Result<Result<Vec<OpResult>, Vec<OpRefusal>>, Error> {
    let mut refusals = Vec::new();
    let mut results = Vec::new();
    for op in ops {
        match apply_op(tx, scopes, op).await {
            Ok(Ok(result)) => results.push(result),
            Ok(Err((reason, message))) => refusals.push(OpRefusal {
                index: op.index,
                seq: Some(op.seq),
                reason,
                message,
            }),
            Err(e) => match rejection(&e) {
                // The transaction is aborted: report this operation and stop.
                Some(message) => {
                    refusals.push(OpRefusal {
                        index: op.index,
                        seq: Some(op.seq),
                        reason: RefusalReason::RejectedByDatabase,
                        message,
                    });
                    break;
                }
                None => return Err(Error::Database(e)),
            },
        }
    }
    Ok(if refusals.is_empty() {
        Ok(results)
    } else {
        Err(refusals)
    })
}

fn parse_op<'s>(schema: &'s SyncSchema, index: usize, value: &Value) -> Result<Op<'s>, Refusal> {
    let malformed = |m: &str| (RefusalReason::MalformedOp, m.to_owned());
    let object = value
        .as_object()
        .ok_or_else(|| malformed("an operation is a JSON object"))?;
    for name in object.keys() {
        if !matches!(
            name.as_str(),
            "seq" | "op" | "collection" | "key" | "fields" | "deltas" | "base_version"
        ) {
            return Err(malformed(&format!("unknown member {name:?}")));
        }
    }
    let seq = object
        .get("seq")
        .and_then(Value::as_i64)
        .filter(|s| *s > 0)
        .ok_or_else(|| malformed("seq must be a positive integer"))?;
    let kind = match object.get("op").and_then(Value::as_str) {
        Some("insert") => Kind::Insert,
        Some("patch") => Kind::Patch,
        Some("delete") => Kind::Delete,
        _ => return Err(malformed("op must be insert, patch or delete")),
    };
    let name = object
        .get("collection")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("collection must be a string"))?;
    let collection = schema.collection(name).ok_or_else(|| {
        (
            RefusalReason::UnknownCollection,
            format!("no synced collection {name:?}"),
        )
    })?;
    let base_version = match object.get("base_version") {
        None => 0,
        Some(v) => v
            .as_i64()
            .filter(|v| *v >= 0)
            .ok_or_else(|| malformed("base_version must be a non-negative integer"))?,
    };
    let member = |name: &str| -> Result<Map<String, Value>, Refusal> {
        match object.get(name) {
            None => Ok(Map::new()),
            Some(Value::Object(m)) => Ok(m.clone()),
            Some(_) => Err(malformed(&format!("{name} must be an object"))),
        }
    };
    let raw_key = member("key")?;
    let raw_fields = member("fields")?;
    let raw_deltas = member("deltas")?;

    let mut key = Map::new();
    for column in &collection.primary_key {
        let value = raw_key.get(column).ok_or_else(|| {
            malformed(&format!(
                "key must give every primary key field; {column:?} is missing"
            ))
        })?;
        let column_def = collection.column(column).expect("key columns exist");
        if value.is_null() {
            return Err((
                RefusalReason::InvalidValue,
                format!("{column}: a key is never null"),
            ));
        }
        key.insert(column.clone(), check_value(column_def, value)?);
    }
    if let Some(extra) = raw_key.keys().find(|k| !collection.primary_key.contains(k)) {
        return Err(malformed(&format!("{extra:?} is not a primary key field")));
    }

    let mut fields = Map::new();
    for (name, value) in &raw_fields {
        let column = column_of(collection, name)?;
        if collection.primary_key.contains(name) {
            if key.get(name) == Some(&check_value(column, value)?) {
                continue;
            }
            return Err(malformed(&format!(
                "{name:?} is a key field: it is given in key and never changes"
            )));
        }
        if kind == Kind::Patch && column.rule == ConflictRule::Counter {
            return Err((
                RefusalReason::CounterNeedsDelta,
                format!("{name:?} is a counter: patch it with deltas, not a value"),
            ));
        }
        fields.insert(name.clone(), check_value(column, value)?);
    }
    let mut deltas = Map::new();
    for (name, value) in &raw_deltas {
        let column = column_of(collection, name)?;
        if column.rule != ConflictRule::Counter {
            return Err(malformed(&format!(
                "{name:?} is not a counter: deltas are for counters"
            )));
        }
        if kind != Kind::Patch {
            return Err(malformed("deltas belong to patches"));
        }
        if value.is_null() {
            return Err((
                RefusalReason::InvalidValue,
                format!("{name}: a delta is a number"),
            ));
        }
        deltas.insert(name.clone(), check_value(column, value)?);
    }
    if kind == Kind::Delete && !fields.is_empty() {
        return Err(malformed("a delete carries no fields"));
    }
    Ok(Op {
        index,
        seq,
        kind,
        collection,
        key,
        fields,
        deltas,
        base_version,
    })
}

/// The column of field `name`, or an `unknown_field` refusal.
fn column_of<'c>(collection: &'c SyncCollection, name: &str) -> Result<&'c SyncColumn, Refusal> {
    collection.column(name).ok_or_else(|| {
        (
            RefusalReason::UnknownField,
            format!("{} has no field {name:?}", collection.name),
        )
    })
}

/// Checks a value against its column and returns the JSON `jsonb_populate_record`
/// reads correctly (enum names become numbers, byte arrays `\x` hex).
fn check_value(column: &SyncColumn, value: &Value) -> Result<Value, Refusal> {
    if value.is_null() {
        return if column.not_null {
            Err((
                RefusalReason::InvalidValue,
                format!(
                    "{}: null is not allowed (the field is not optional)",
                    column.name
                ),
            ))
        } else {
            Ok(Value::Null)
        };
    }
    check_kind(&column.kind, value)
        .map_err(|m| (RefusalReason::InvalidValue, format!("{}: {m}", column.name)))
}

fn check_kind(kind: &ValueKind, value: &Value) -> Result<Value, String> {
    let integer = |value: &Value, min: i128, max: i128| -> Result<Value, String> {
        let n = value
            .as_i64()
            .map(i128::from)
            .or_else(|| value.as_u64().map(i128::from))
            .ok_or_else(|| format!("expected an integer, found {value}"))?;
        if n < min || n > max {
            return Err(format!("{n} is out of range {min}..={max}"));
        }
        Ok(value.clone())
    };
    match kind {
        ValueKind::Bool => value
            .is_boolean()
            .then(|| value.clone())
            .ok_or_else(|| format!("expected true or false, found {value}")),
        ValueKind::Int { min, max } => integer(value, *min, *max),
        ValueKind::Float => value
            .is_number()
            .then(|| value.clone())
            .ok_or_else(|| format!("expected a number, found {value}")),
        ValueKind::Text => value
            .is_string()
            .then(|| value.clone())
            .ok_or_else(|| format!("expected a string, found {value}")),
        ValueKind::Enum { values, min, max } => match value {
            Value::String(name) => values
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| Value::from(*v))
                .ok_or_else(|| format!("{name:?} is not a value of the enum")),
            other => integer(other, *min, *max),
        },
        ValueKind::Bytes => {
            let items = value
                .as_array()
                .ok_or_else(|| format!("expected an array of bytes, found {value}"))?;
            let mut hex = String::from("\\x");
            for item in items {
                let b = item
                    .as_u64()
                    .filter(|b| *b <= 255)
                    .ok_or_else(|| format!("expected a byte (0-255), found {item}"))?;
                hex.push_str(&format!("{b:02x}"));
            }
            Ok(Value::String(hex))
        }
        ValueKind::Json => Ok(value.clone()),
        ValueKind::Array(element) => {
            let items = value
                .as_array()
                .ok_or_else(|| format!("expected an array, found {value}"))?;
            items
                .iter()
                .map(|item| {
                    if item.is_null() {
                        Err("arrays hold no nulls".to_owned())
                    } else {
                        check_kind(element, item)
                    }
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
    }
}

/// The state of the row an operation names, read under a row lock.
struct Existing {
    version: i64,
    created: i64,
    in_scope: bool,
}

async fn apply_op(
    tx: &Transaction<'_>,
    scopes: &[BoundScope],
    op: &Op<'_>,
) -> Result<Result<OpResult, Refusal>, tokio_postgres::Error> {
    let collection = op.collection;
    let table = quote_ident(&collection.table);
    let (scope_sql, scope_params) = sql_filter(scopes, collection, 2);
    let key_match = collection
        .primary_key
        .iter()
        .map(|k| format!("t.{0} = r.{0}", quote_ident(k)))
        .collect::<Vec<_>>()
        .join(" AND ");
    let key_row = Value::Object(op.key.clone());
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&key_row];
    for p in &scope_params {
        params.push(p);
    }
    let existing = tx
        .query_opt(
            &format!(
                "SELECT t.keel_version, t.keel_created, {scope_sql} \
                 FROM {table} t, jsonb_populate_record(NULL::{table}, $1) r \
                 WHERE {key_match} FOR UPDATE OF t"
            ),
            &params,
        )
        .await?
        .map(|row| Existing {
            version: row.get(0),
            created: row.get(1),
            in_scope: row.get(2),
        });
    let out_of_scope = || {
        Ok(Err((
            RefusalReason::OutOfScope,
            format!(
                "the row is outside this client's scopes of {}",
                collection.name
            ),
        )))
    };
    let skipped = |reason: &str| Ok(Ok(OpResult::skipped(op.seq, reason)));
    if existing.as_ref().is_some_and(|e| !e.in_scope) {
        return out_of_scope();
    }
    match (op.kind, existing) {
        (Kind::Delete, None) => skipped("row_gone"),
        (Kind::Delete, Some(e)) if e.created > op.base_version => skipped("stale_delete"),
        (Kind::Delete, Some(_)) => {
            tx.execute(
                &format!(
                    "DELETE FROM {table} t USING jsonb_populate_record(NULL::{table}, $1) r \
                     WHERE {key_match}"
                ),
                &[&key_row],
            )
            .await?;
            Ok(Ok(OpResult::applied(op.seq, None, Vec::new())))
        }
        (Kind::Patch, None) => skipped("row_gone"),
        (Kind::Insert, None) => {
            let row = set_apply::insert_row(op);
            let columns: Vec<String> = row.keys().map(|c| quote_ident(c)).collect();
            let selected: Vec<String> = columns.iter().map(|c| format!("r.{c}")).collect();
            let row = Value::Object(row);
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&row];
            for p in &scope_params {
                params.push(p);
            }
            let written = tx
                .query_one(
                    &format!(
                        "INSERT INTO {table} AS t ({}) SELECT {} FROM jsonb_populate_record(NULL::{table}, $1) r \
                         RETURNING t.keel_version, {scope_sql}",
                        columns.join(", "),
                        selected.join(", ")
                    ),
                    &params,
                )
                .await?;
            if !written.get::<_, bool>(1) {
                return out_of_scope();
            }
            Ok(Ok(OpResult::applied(
                op.seq,
                Some(written.get(0)),
                Vec::new(),
            )))
        }
        (Kind::Insert | Kind::Patch, Some(e)) => {
            // On an existing row an insert writes its fields like a patch, its
            // counter values adding like deltas.
            let mut assignments = Vec::new();
            let mut ignored = Vec::new();
            let mut row = op.key.clone();
            for (name, value) in op.fields.iter().chain(op.deltas.iter()) {
                let column = collection.column(name).expect("checked in parse_op");
                let quoted = quote_ident(name);
                match column.rule {
                    ConflictRule::Counter => {
                        assignments.push(format!("{quoted} = t.{quoted} + r.{quoted}"))
                    }
                    ConflictRule::ServerWins if e.version != op.base_version => {
                        ignored.push(name.clone());
                        continue;
                    }
                    _ => assignments.push(format!("{quoted} = r.{quoted}")),
                }
                row.insert(name.clone(), value.clone());
            }
            // Nothing left to set (every field server-owned): the row stays as it is,
            // and its version does not advance.
            if assignments.is_empty() {
                return Ok(Ok(OpResult::applied(op.seq, Some(e.version), ignored)));
            }
            let row = Value::Object(row);
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&row];
            for p in &scope_params {
                params.push(p);
            }
            let written = tx
                .query_one(
                    &format!(
                        "UPDATE {table} AS t SET {} FROM jsonb_populate_record(NULL::{table}, $1) r \
                         WHERE {key_match} RETURNING t.keel_version, {scope_sql}",
                        assignments.join(", ")
                    ),
                    &params,
                )
                .await?;
            if !written.get::<_, bool>(1) {
                return out_of_scope();
            }
            Ok(Ok(OpResult::applied(op.seq, Some(written.get(0)), ignored)))
        }
    }
}
