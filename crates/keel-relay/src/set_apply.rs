//! The set-based way to apply an upload batch: a few statements per batch instead
//! of a few per operation.
//!
//! The model. Applying a batch operation by operation costs about five statements
//! each (a locking read, the write, its ledger row), and PostgreSQL's per-statement
//! cost then bounds one client's upload rate. Here the batch's rows are locked and
//! read with one statement per collection; the rules of [`crate::upload`] (row
//! gone, stale delete, server-wins, counters, scope before) are decided in Rust
//! from that state; and the writes go out in **groups**: consecutive operations of
//! one collection and one kind of write (insert of a new row, update of an existing
//! one, delete), each group one `INSERT … SELECT`, `UPDATE … FROM` or
//! `DELETE … USING` over `jsonb_array_elements` of the group's rows, whose
//! `RETURNING` gives each row its new version and its scope after. Groups run in
//! batch order, so writes across collections keep their order (a foreign key
//! between them holds as it would one by one).
//!
//! Inside a group a row appears once. A later operation on a row already in the
//! open group either ends the group (it is written first, so the next decision sees
//! the row's real version) or, for an update, is **folded** into that row's entry:
//! its fields overwrite, its counter deltas add. Folding is what lets a thousand
//! increments of one counter be one write. It is allowed only where it cannot
//! change an outcome: the operation names no `server_wins` field (that rule needs
//! the version between the two writes), writes no column a scope filters on (every
//! intermediate row then has the final row's scope), and the table has nothing that
//! could judge an intermediate row — no `CHECK`, unique, exclusion or foreign-key
//! constraint beyond its primary key and no trigger but keel's own. Every folded
//! operation acknowledges the row's final version: no download can hold a version
//! between them, since none was ever written.
//!
//! This path only ever answers *applied*. Whenever it meets something that refuses
//! the batch — a row outside the scopes, PostgreSQL rejecting a write — it returns
//! `None`; the caller rolls the transaction back and applies the batch operation by
//! operation, which names the operation that caused it. Refusals are rare and the
//! batch applies nothing either way, so the slow path's cost is paid only then.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};
use tokio_postgres::types::ToSql;
use tokio_postgres::Transaction;

use crate::op::{rejection, Kind, Op};
use crate::protocol::OpResult;
use crate::scope::{sql_filter, BoundScope};
use crate::sync_schema::{quote_ident, quote_literal, ConflictRule, SyncCollection};

/// A row's state as this batch knows it.
#[derive(Debug, Clone, Copy)]
struct Row {
    version: i64,
    created: i64,
}

/// What a group writes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Write {
    /// New rows; the columns every row of the group gives.
    Insert(Vec<String>),
    Update,
    Delete,
}

/// One row of a group: its values and the operations it carries.
#[derive(Debug)]
struct Entry {
    key: String,
    /// Key columns and written columns → values (counters: the deltas to add).
    values: Map<String, Value>,
    /// The operations it carries: (position among the applied ones, seq).
    ops: Vec<(usize, i64)>,
    /// The first operation's `server_wins` fields the server keeps (a folded
    /// operation names none).
    ignored: Vec<String>,
}

#[derive(Debug)]
struct Group<'s> {
    collection: &'s SyncCollection,
    write: Write,
    entries: Vec<Entry>,
    /// Row key → entry position.
    keys: HashMap<String, usize>,
}

/// Why the set path gives the batch back to the one-by-one path.
enum Stop {
    /// Something refuses the batch: the one-by-one path names it.
    Refuse,
    /// PostgreSQL failed.
    Database(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for Stop {
    fn from(e: tokio_postgres::Error) -> Stop {
        if rejection(&e).is_some() {
            Stop::Refuse
        } else {
            Stop::Database(e)
        }
    }
}

/// Applies `ops` (every one not yet in the ledger, in batch order) and returns
/// their results in the same order, or `None` when the batch must go one by one
/// (after rolling back: this may have written part of it).
pub(crate) async fn apply(
    tx: &Transaction<'_>,
    scopes: &[BoundScope],
    ops: &[&Op<'_>],
) -> Result<Option<Vec<OpResult>>, tokio_postgres::Error> {
    let mut run = Run {
        tx,
        scopes,
        rows: HashMap::new(),
        plain: HashMap::new(),
        results: vec![None; ops.len()],
    };
    match run.all(ops).await {
        Ok(()) => Ok(run.results.into_iter().collect()),
        Err(Stop::Refuse) => Ok(None),
        Err(Stop::Database(e)) => Err(e),
    }
}

fn row_key(op: &Op<'_>) -> (String, String) {
    (
        op.collection.name.clone(),
        Value::Object(op.key.clone()).to_string(),
    )
}

/// `t.k = r.k AND …` over the key columns.
fn key_match(collection: &SyncCollection, left: &str, right: &str) -> String {
    collection
        .primary_key
        .iter()
        .map(|k| format!("{left}.{0} = {right}.{0}", quote_ident(k)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The rows of `$1` (a JSON array), numbered from 1 as `e.i`, typed as `r`.
fn source(table: &str) -> String {
    format!(
        "jsonb_array_elements($1) WITH ORDINALITY AS e(v, i), \
         jsonb_populate_record(NULL::{table}, e.v) AS r"
    )
}

struct Run<'a, 't> {
    tx: &'a Transaction<'t>,
    scopes: &'a [BoundScope],
    /// (collection, key) → the row (`None`: no row), once read.
    rows: HashMap<(String, String), Option<Row>>,
    /// table → whether it has nothing that judges intermediate rows.
    plain: HashMap<String, bool>,
    results: Vec<Option<OpResult>>,
}

impl Run<'_, '_> {
    async fn all(&mut self, ops: &[&Op<'_>]) -> Result<(), Stop> {
        self.lock(ops).await?;
        let mut group: Option<Group<'_>> = None;
        for (i, op) in ops.iter().enumerate() {
            let (coll, key) = row_key(op);
            // A row already in the open group: fold into it, or write the group first.
            if let Some(g) = &mut group {
                if g.collection.name == coll {
                    if let Some(&entry) = g.keys.get(&key) {
                        if g.write == Write::Update
                            && op.kind != Kind::Delete
                            && self.foldable(g.collection, op).await?
                            && fold(&mut g.entries[entry], op)
                        {
                            g.entries[entry].ops.push((i, op.seq));
                            continue;
                        }
                        let done = group.take().expect("a group is open");
                        self.flush(done).await?;
                    }
                }
            }
            let Some((write, ignored)) = self.decide(i, op) else {
                continue;
            };
            let entry = Entry {
                key: key.clone(),
                values: values(op, &write, &ignored),
                ops: vec![(i, op.seq)],
                ignored,
            };
            let fits = group
                .as_ref()
                .is_some_and(|g| g.collection.name == coll && g.write == write);
            if !fits {
                if let Some(done) = group.take() {
                    self.flush(done).await?;
                }
                group = Some(Group {
                    collection: op.collection,
                    write,
                    entries: Vec::new(),
                    keys: HashMap::new(),
                });
            }
            let g = group.as_mut().expect("a group is open");
            g.keys.insert(key, g.entries.len());
            g.entries.push(entry);
        }
        if let Some(done) = group {
            self.flush(done).await?;
        }
        Ok(())
    }

    /// Locks and reads every row the operations name: one statement per collection,
    /// rows locked in key order (so two batches lock shared rows in the same order).
    async fn lock(&mut self, ops: &[&Op<'_>]) -> Result<(), Stop> {
        let mut by_collection: Vec<(&SyncCollection, Vec<String>)> = Vec::new();
        let mut seen = HashSet::new();
        for op in ops {
            let id = row_key(op);
            if !seen.insert(id.clone()) {
                continue;
            }
            self.rows.insert(id.clone(), None);
            match by_collection
                .iter_mut()
                .find(|(c, _)| c.name == op.collection.name)
            {
                Some((_, keys)) => keys.push(id.1),
                None => by_collection.push((op.collection, vec![id.1])),
            }
        }
        for (collection, keys) in by_collection {
            let table = quote_ident(&collection.table);
            let (scope_sql, scope_params) = sql_filter(self.scopes, collection, 2);
            let order = collection
                .primary_key
                .iter()
                .map(|k| format!("t.{}", quote_ident(k)))
                .collect::<Vec<_>>()
                .join(", ");
            let array = Value::Array(
                keys.iter()
                    .map(|k| serde_json::from_str(k).unwrap_or(Value::Null))
                    .collect(),
            );
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&array];
            for p in &scope_params {
                params.push(p);
            }
            let found = self
                .tx
                .query(
                    &format!(
                        "SELECT e.i, t.keel_version, t.keel_created, {scope_sql} \
                         FROM {}, {table} t WHERE {} ORDER BY {order} FOR UPDATE OF t",
                        source(&table),
                        key_match(collection, "t", "r"),
                    ),
                    &params,
                )
                .await?;
            for row in found {
                let i: i64 = row.get(0);
                if !row.get::<_, bool>(3) {
                    // A row outside the scopes: refused.
                    return Err(Stop::Refuse);
                }
                let key = keys[(i - 1) as usize].clone();
                self.rows.insert(
                    (collection.name.clone(), key),
                    Some(Row {
                        version: row.get(1),
                        created: row.get(2),
                    }),
                );
            }
        }
        Ok(())
    }

    /// Decides an operation on a row whose state is known: records its result
    /// when it writes nothing, or returns the kind of write it joins (and the
    /// `server_wins` fields the server keeps).
    fn decide(&mut self, i: usize, op: &Op<'_>) -> Option<(Write, Vec<String>)> {
        let row = self.rows.get(&row_key(op)).copied().flatten();
        let skipped = |reason| Err(OpResult::skipped(op.seq, reason));
        let decided = match (op.kind, row) {
            (Kind::Delete, None) => skipped("row_gone"),
            (Kind::Delete, Some(r)) if r.created > op.base_version => skipped("stale_delete"),
            (Kind::Delete, Some(_)) => Ok((Write::Delete, Vec::new())),
            (Kind::Patch, None) => skipped("row_gone"),
            (Kind::Insert, None) => {
                let columns = insert_row(op).keys().cloned().collect();
                Ok((Write::Insert(columns), Vec::new()))
            }
            (Kind::Insert | Kind::Patch, Some(r)) => {
                let ignored = ignored_fields(op, r.version);
                let writes = op
                    .fields
                    .keys()
                    .chain(op.deltas.keys())
                    .any(|f| !ignored.contains(f));
                if writes {
                    Ok((Write::Update, ignored))
                } else {
                    // Nothing left to set: the row and its version stay.
                    Err(OpResult::applied(op.seq, Some(r.version), ignored))
                }
            }
        };
        match decided {
            Ok(write) => Some(write),
            Err(result) => {
                self.results[i] = Some(result);
                None
            }
        }
    }

    /// Whether `op` may fold into the open entry of its row (see the module docs).
    async fn foldable(&mut self, collection: &SyncCollection, op: &Op<'_>) -> Result<bool, Stop> {
        let scoped: HashSet<&str> = self
            .scopes
            .iter()
            .filter(|s| s.collection == collection.name)
            .flat_map(|s| s.terms.iter().map(|(c, _)| c.as_str()))
            .collect();
        let judged = op.fields.keys().any(|name| {
            scoped.contains(name.as_str())
                || collection
                    .column(name)
                    .is_some_and(|c| c.rule == ConflictRule::ServerWins)
        });
        if judged {
            return Ok(false);
        }
        self.plain(collection).await
    }

    /// Whether the table has nothing that could judge an intermediate row.
    async fn plain(&mut self, collection: &SyncCollection) -> Result<bool, Stop> {
        if let Some(&plain) = self.plain.get(&collection.table) {
            return Ok(plain);
        }
        let table = quote_ident(&collection.table);
        let judges: bool = self
            .tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = $1::text::regclass \
                   AND NOT g.tgisinternal AND g.tgname <> 'keel_row_version') \
                 OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = $1::text::regclass \
                   AND k.contype IN ('c', 'f', 'u', 'x')) \
                 OR EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = $1::text::regclass \
                   AND x.indisunique AND NOT x.indisprimary)",
                &[&table],
            )
            .await?
            .get(0);
        self.plain.insert(collection.table.clone(), !judges);
        Ok(!judges)
    }

    /// Writes one group and records its operations' results and rows' new state.
    async fn flush(&mut self, group: Group<'_>) -> Result<(), Stop> {
        let collection = group.collection;
        let table = quote_ident(&collection.table);
        let (scope_sql, scope_params) = sql_filter(self.scopes, collection, 2);
        let array = Value::Array(
            group
                .entries
                .iter()
                .map(|e| Value::Object(e.values.clone()))
                .collect(),
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&array];
        for p in &scope_params {
            params.push(p);
        }
        let sql = match &group.write {
            Write::Insert(columns) => {
                let columns: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
                let keys: Vec<String> = collection
                    .primary_key
                    .iter()
                    .map(|k| format!("t.{}", quote_ident(k)))
                    .collect();
                format!(
                    "WITH src AS (SELECT e.i AS keel_src_i, r.* FROM {src}), \
                     ins AS (INSERT INTO {table} AS t ({cols}) SELECT {cols} FROM src ORDER BY keel_src_i \
                       RETURNING {keys}, t.keel_version, {scope_sql} AS keel_in_scope) \
                     SELECT src.keel_src_i, ins.keel_version, ins.keel_in_scope \
                     FROM ins JOIN src ON {matching}",
                    src = source(&table),
                    cols = columns.join(", "),
                    keys = keys.join(", "),
                    matching = key_match(collection, "ins", "src"),
                )
            }
            Write::Update => {
                let mut names: Vec<&String> = Vec::new();
                for entry in &group.entries {
                    for name in entry.values.keys() {
                        if !collection.primary_key.contains(name) && !names.contains(&name) {
                            names.push(name);
                        }
                    }
                }
                let assignments: Vec<String> = names
                    .iter()
                    .map(|name| {
                        let q = quote_ident(name);
                        let value = match collection.column(name).map(|c| c.rule) {
                            Some(ConflictRule::Counter) => format!("t.{q} + r.{q}"),
                            _ => format!("r.{q}"),
                        };
                        format!(
                            "{q} = CASE WHEN e.v ? {} THEN {value} ELSE t.{q} END",
                            quote_literal(name)
                        )
                    })
                    .collect();
                format!(
                    "UPDATE {table} AS t SET {} FROM {} WHERE {} \
                     RETURNING e.i, t.keel_version, {scope_sql}",
                    assignments.join(", "),
                    source(&table),
                    key_match(collection, "t", "r"),
                )
            }
            Write::Delete => {
                params.truncate(1);
                format!(
                    "DELETE FROM {table} AS t USING {} WHERE {} RETURNING e.i, 0::bigint, true",
                    source(&table),
                    key_match(collection, "t", "r"),
                )
            }
        };
        let written = self.tx.query(&sql, &params).await?;
        if written.len() != group.entries.len() {
            // A row changed under the lock's view (it cannot, locked): one by one.
            return Err(Stop::Refuse);
        }
        for row in written {
            let i: i64 = row.get(0);
            if !row.get::<_, bool>(2) {
                return Err(Stop::Refuse);
            }
            let entry = &group.entries[(i - 1) as usize];
            let id = (collection.name.clone(), entry.key.clone());
            let version: i64 = row.get(1);
            match &group.write {
                Write::Delete => {
                    self.rows.insert(id, None);
                    for &(op, seq) in &entry.ops {
                        self.results[op] = Some(OpResult::applied(seq, None, Vec::new()));
                    }
                }
                write => {
                    let created = match (write, self.rows.get(&id).copied().flatten()) {
                        (Write::Update, Some(r)) => r.created,
                        _ => version,
                    };
                    self.rows.insert(id, Some(Row { version, created }));
                    for (n, &(op, seq)) in entry.ops.iter().enumerate() {
                        let ignored = if n == 0 {
                            entry.ignored.clone()
                        } else {
                            Vec::new()
                        };
                        self.results[op] = Some(OpResult::applied(seq, Some(version), ignored));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The values an operation's entry starts with.
fn values(op: &Op<'_>, write: &Write, ignored: &[String]) -> Map<String, Value> {
    match write {
        Write::Insert(_) => insert_row(op),
        Write::Delete => op.key.clone(),
        Write::Update => {
            let mut values = op.key.clone();
            for (name, value) in op.fields.iter().chain(op.deltas.iter()) {
                if !ignored.contains(name) {
                    values.insert(name.clone(), value.clone());
                }
            }
            values
        }
    }
}

/// The row an insert of a new row writes: the key, the given fields, and the
/// default of each column it leaves out that has one.
pub(crate) fn insert_row(op: &Op<'_>) -> Map<String, Value> {
    let mut row = op.key.clone();
    for column in &op.collection.columns {
        if let Some(v) = op.fields.get(&column.name) {
            row.insert(column.name.clone(), v.clone());
        } else if let Some(default) = &column.default {
            row.entry(column.name.clone()).or_insert(default.clone());
        }
    }
    row
}

/// The `server_wins` fields of `op` the server keeps its value for, on a row at
/// `version`.
pub(crate) fn ignored_fields(op: &Op<'_>, version: i64) -> Vec<String> {
    op.fields
        .keys()
        .filter(|name| {
            op.collection
                .column(name)
                .is_some_and(|c| c.rule == ConflictRule::ServerWins)
                && version != op.base_version
        })
        .cloned()
        .collect()
}

/// Folds `op` into `entry`: fields overwrite, counter deltas (and an insert's
/// counter values) add. `false` when a sum would leave the integers.
fn fold(entry: &mut Entry, op: &Op<'_>) -> bool {
    let mut values = entry.values.clone();
    for (name, value) in op.fields.iter().chain(op.deltas.iter()) {
        let counter = op
            .collection
            .column(name)
            .is_some_and(|c| c.rule == ConflictRule::Counter);
        if counter {
            if let Some(old) = values.get(name) {
                let Some(sum) = old
                    .as_i64()
                    .zip(value.as_i64())
                    .and_then(|(a, b)| a.checked_add(b))
                else {
                    return false;
                };
                values.insert(name.clone(), Value::from(sum));
                continue;
            }
        }
        values.insert(name.clone(), value.clone());
    }
    entry.values = values;
    true
}
