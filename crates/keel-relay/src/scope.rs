//! Scopes: which rows of a collection a client may see and write.
//!
//! A scope is a collection and a filter, a conjunction of equalities between a field
//! and a token claim or a literal: `owner == token.sub && status == 1`. An empty
//! filter is the whole collection. A client's rows of a collection are the union of
//! the collection's scopes. A scope whose claim the token lacks is dropped for that
//! client (it sees nothing through it), never widened.
//!
//! Filters compare text: a field's PostgreSQL text form against the claim's (a
//! string as is, a number in decimal), so only `text` and integer fields may appear
//! in a filter; that keeps the relay's in-memory check of a replicated row and
//! PostgreSQL's check of a stored row the same comparison.
//!
//! [`Scope::parse`] checks a filter against the schema once; [`Scope::bind`]
//! resolves its claims for one session into a [`BoundScope`], which renders SQL
//! ([`sql_filter`]) and checks replicated rows ([`BoundScope::matches`]).

use crate::auth::Claims;
use crate::error::Error;
use crate::sync_schema::{quote_ident, PgType, SyncCollection, SyncSchema};

/// One side of an equality.
#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `token.<claim>`
    Claim(String),
    /// A string or integer literal (as text).
    Literal(String),
}

/// A configured scope, checked against the schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    /// The collection's fully qualified name.
    pub collection: String,
    terms: Vec<(String, Operand)>,
}

/// A scope with its claims resolved for one session.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundScope {
    /// The collection's fully qualified name.
    pub collection: String,
    /// `(column, text value)` equalities, all of which must hold.
    pub terms: Vec<(String, String)>,
}

impl Scope {
    /// Parses `filter` for `collection`.
    pub fn parse(schema: &SyncSchema, collection: &str, filter: &str) -> Result<Scope, Error> {
        let problem = |message: String| Error::Scope {
            collection: collection.to_owned(),
            message,
        };
        let target = schema
            .collection(collection)
            .ok_or_else(|| problem("no synced collection has this name".to_owned()))?;
        let mut terms = Vec::new();
        if !filter.trim().is_empty() {
            for term in filter.split("&&") {
                let (field, value) = term.split_once("==").ok_or_else(|| {
                    problem(format!(
                        "expected `field == value`, found {:?}",
                        term.trim()
                    ))
                })?;
                let field = field.trim();
                let value = value.trim();
                let column = target
                    .column(field)
                    .ok_or_else(|| problem(format!("no field {field:?}")))?;
                if !matches!(
                    column.pg_type,
                    PgType::Text | PgType::SmallInt | PgType::Integer | PgType::BigInt
                ) {
                    return Err(problem(format!(
                        "field {field:?} is {}; filters compare text and integer fields only",
                        column.pg_type.sql()
                    )));
                }
                let operand = if let Some(claim) = value.strip_prefix("token.") {
                    if claim.is_empty() || !claim.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        return Err(problem(format!("bad claim name in {value:?}")));
                    }
                    Operand::Claim(claim.to_owned())
                } else if let Some(text) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"'))
                {
                    Operand::Literal(text.to_owned())
                } else if value.parse::<i64>().is_ok() {
                    Operand::Literal(value.to_owned())
                } else {
                    return Err(problem(format!(
                        "expected token.<claim>, a \"string\" or an integer, found {value:?}"
                    )));
                };
                terms.push((field.to_owned(), operand));
            }
        }
        Ok(Scope {
            collection: target.name.clone(),
            terms,
        })
    }

    /// Resolves the claims; `None` when the token lacks one (the scope then grants nothing).
    pub fn bind(&self, claims: &Claims) -> Option<BoundScope> {
        let terms = self
            .terms
            .iter()
            .map(|(column, operand)| {
                let value = match operand {
                    Operand::Literal(v) => v.clone(),
                    Operand::Claim(name) => match claims.get(name)? {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
                        _ => return None,
                    },
                };
                Some((column.clone(), value))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(BoundScope {
            collection: self.collection.clone(),
            terms,
        })
    }
}

impl BoundScope {
    /// Whether a row (column → text value, as logical replication sends it) is in scope.
    pub fn matches(&self, value_of: impl Fn(&str) -> Option<String>) -> bool {
        self.terms
            .iter()
            .all(|(column, value)| value_of(column).as_deref() == Some(value.as_str()))
    }
}

/// The SQL condition (over table alias `t`) for rows of `collection` in any of the
/// scopes, with its parameters numbered from `$first`; `false` when none applies.
pub fn sql_filter(
    scopes: &[BoundScope],
    collection: &SyncCollection,
    first: usize,
) -> (String, Vec<String>) {
    let mut params = Vec::new();
    let mut alternatives = Vec::new();
    for scope in scopes.iter().filter(|s| s.collection == collection.name) {
        if scope.terms.is_empty() {
            return ("true".to_owned(), Vec::new());
        }
        let terms: Vec<String> = scope
            .terms
            .iter()
            .map(|(column, value)| {
                params.push(value.clone());
                format!(
                    "t.{}::text = ${}",
                    quote_ident(column),
                    first + params.len() - 1
                )
            })
            .collect();
        alternatives.push(format!("({})", terms.join(" AND ")));
    }
    if alternatives.is_empty() {
        ("false".to_owned(), params)
    } else {
        (format!("({})", alternatives.join(" OR ")), params)
    }
}
