//! The sync markings of a schema: which collections sync with a server table, and
//! how concurrent writes to each field resolve.
//!
//! Two custom attributes (declared in the file with `attribute "sync";`) mark them:
//!
//! * `(sync)` on a collection's table: the collection syncs with a server table
//!   named after it in snake case (`BlogPost` → `blog_post`), or `(sync: "posts")`
//!   to name the table;
//! * `(sync: counter)` on an integer or float field: uploads send deltas, which add
//!   up on the server; `(sync: server_wins)`: a client's patch of the field applies
//!   only when nobody changed the row since the version the client saw;
//!   `(sync: merge)` is the default (field-wise last writer in server order).
//!
//! This is the one reading of them: the resolver stores them in the model
//! (`Table::sync`, `Field::sync`) and refuses a marking that cannot work, so keel's client (the outbox in
//! keel-query) and the relay (its PostgreSQL mapping) see the same thing.

use crate::parser::ast::{Attribute, Literal};

/// How concurrent writes to a synced field resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SyncRule {
    /// Field-wise last writer in server order (the default).
    #[default]
    Merge,
    /// Uploads carry deltas that add up.
    Counter,
    /// A client's patch applies only when the row is unchanged since its base version.
    ServerWins,
}

impl SyncRule {
    /// Parses an attribute value (`merge`, `counter`, `server_wins`; none is `merge`).
    pub fn parse(rule: &str) -> Option<SyncRule> {
        Some(match rule {
            "" | "merge" => SyncRule::Merge,
            "counter" => SyncRule::Counter,
            "server_wins" => SyncRule::ServerWins,
            _ => return None,
        })
    }
}

/// A `(sync)` marking on a collection's table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SyncTable {
    /// The server table's name: the marking's value, or the table name in snake case.
    pub table: String,
}

/// The `(sync)` marking of a table called `name`, if it has one.
pub(crate) fn table_mark(attrs: &[Attribute], name: &str) -> Option<SyncTable> {
    let a = attrs.iter().find(|a| a.name == "sync")?;
    let table = match &a.value {
        Some(Literal::Str(s)) | Some(Literal::Ident(s)) => s.clone(),
        _ => snake_case(name),
    };
    Some(SyncTable { table })
}

/// The `(sync: rule)` of a field; `Err` names what was found instead of a rule.
pub(crate) fn field_rule(attrs: &[Attribute]) -> Result<SyncRule, String> {
    let Some(a) = attrs.iter().find(|a| a.name == "sync") else {
        return Ok(SyncRule::Merge);
    };
    let rule = match &a.value {
        Some(Literal::Str(s)) | Some(Literal::Ident(s)) => s.clone(),
        Some(Literal::Int(s)) | Some(Literal::Float(s)) => s.clone(),
        None => String::new(),
    };
    SyncRule::parse(&rule).ok_or_else(|| {
        format!("expected a sync rule (merge, counter, server_wins), found {rule:?}")
    })
}

/// `BlogPost` → `blog_post`.
pub fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
