//! Rows as clients receive them: JSON objects of a collection's synced fields.
//!
//! Rows reach the relay in two forms: logical replication sends PostgreSQL's text
//! form of every column ([`from_text`]), a snapshot reads `to_jsonb(t)`
//! ([`from_jsonb`]). Both become the same JSON, the one uploads use: numbers for
//! integers and floats, strings for text, arrays for arrays, an array of byte values
//! for `bytea`, any JSON for `jsonb`. Columns the schema does not know (kept by the
//! app's backend) are left out, and the version columns become the change's
//! `version`.

use serde_json::{Map, Value};

use crate::sync_schema::{PgType, SyncCollection, CREATED_COLUMN, VERSION_COLUMN};

/// A row of `collection` from replicated text values (`columns` names them).
/// Returns the row, its primary key and its version.
pub fn from_text(
    collection: &SyncCollection,
    columns: &[String],
    values: &[Option<String>],
) -> (Value, Value, i64) {
    let mut row = Map::new();
    let mut version = 0;
    for (name, value) in columns.iter().zip(values) {
        if name == VERSION_COLUMN {
            version = value.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
            continue;
        }
        let Some(column) = collection.column(name) else {
            continue;
        };
        let json = match value {
            None => Value::Null,
            Some(text) => text_value(&column.pg_type, text),
        };
        row.insert(name.clone(), json);
    }
    let key = key_of(collection, &row);
    (Value::Object(row), key, version)
}

/// A row of `collection` from `to_jsonb(t)`. Returns the row and its version.
pub fn from_jsonb(collection: &SyncCollection, value: Value) -> (Value, i64) {
    let Value::Object(all) = value else {
        return (Value::Null, 0);
    };
    let mut row = Map::new();
    let mut version = 0;
    for (name, value) in all {
        if name == VERSION_COLUMN {
            version = value.as_i64().unwrap_or(0);
            continue;
        }
        if name == CREATED_COLUMN {
            continue;
        }
        let Some(column) = collection.column(&name) else {
            continue;
        };
        let value = match (&column.pg_type, value) {
            (PgType::Bytea, Value::String(hex)) => bytes_value(&hex),
            (_, other) => other,
        };
        row.insert(name, value);
    }
    (Value::Object(row), version)
}

/// The primary key fields of a row.
pub fn key_of(collection: &SyncCollection, row: &Map<String, Value>) -> Value {
    Value::Object(
        collection
            .primary_key
            .iter()
            .map(|k| (k.clone(), row.get(k).cloned().unwrap_or(Value::Null)))
            .collect(),
    )
}

/// One value from PostgreSQL's text form.
fn text_value(pg_type: &PgType, text: &str) -> Value {
    match pg_type {
        PgType::Boolean => Value::Bool(text == "t" || text == "true"),
        PgType::SmallInt | PgType::Integer | PgType::BigInt => text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(text.to_owned())),
        PgType::Numeric => text
            .parse::<u64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(text.to_owned())),
        PgType::Real | PgType::Double => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            // NaN and the infinities have no JSON number.
            .unwrap_or_else(|| Value::String(text.to_owned())),
        PgType::Text => Value::String(text.to_owned()),
        PgType::Bytea => bytes_value(text),
        PgType::Jsonb => serde_json::from_str(text).unwrap_or(Value::Null),
        PgType::Array(element) => Value::Array(
            parse_array(text)
                .into_iter()
                .map(|item| match item {
                    None => Value::Null,
                    Some(item) => text_value(element, &item),
                })
                .collect(),
        ),
    }
}

/// `\x0aff` → `[10, 255]`.
fn bytes_value(hex: &str) -> Value {
    let digits = hex.strip_prefix("\\x").unwrap_or(hex).as_bytes();
    Value::Array(
        digits
            .chunks(2)
            .filter_map(|pair| {
                std::str::from_utf8(pair)
                    .ok()
                    .and_then(|p| u8::from_str_radix(p, 16).ok())
            })
            .map(Value::from)
            .collect(),
    )
}

/// The elements of a one-dimensional array literal (`{1,2}`, `{"a b",NULL}`).
pub fn parse_array(text: &str) -> Vec<Option<String>> {
    let inner = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or("");
    let mut items = Vec::new();
    if inner.is_empty() {
        return items;
    }
    let mut chars = inner.chars().peekable();
    loop {
        let mut item = String::new();
        let mut quoted = false;
        if chars.peek() == Some(&'"') {
            quoted = true;
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(escaped) = chars.next() {
                            item.push(escaped);
                        }
                    }
                    '"' => break,
                    c => item.push(c),
                }
            }
        }
        while let Some(&c) = chars.peek() {
            if c == ',' {
                break;
            }
            item.push(c);
            chars.next();
        }
        items.push(if !quoted && item == "NULL" {
            None
        } else {
            Some(item)
        });
        if chars.next().is_none() {
            break;
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_literals_parse() {
        assert_eq!(
            parse_array(r#"{1,2,NULL}"#),
            vec![Some("1".into()), Some("2".into()), None]
        );
        assert_eq!(
            parse_array(r#"{"a b","c\"d",NULL,"NULL",x}"#),
            vec![
                Some("a b".into()),
                Some("c\"d".into()),
                None,
                Some("NULL".into()),
                Some("x".into())
            ]
        );
        assert!(parse_array("{}").is_empty());
    }

    #[test]
    fn bytes_decode() {
        assert_eq!(bytes_value("\\x0aff"), serde_json::json!([10, 255]));
    }
}
