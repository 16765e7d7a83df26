//! Rows as clients receive them: JSON objects of a collection's synced fields.
//!
//! Rows reach clients from two sources: logical replication sends PostgreSQL's
//! text form of every column, which the relay converts ([`from_text`]); a
//! snapshot has PostgreSQL render each row as JSON ([`snapshot_json`]), which the
//! relay passes on unread. Both give the same JSON, the one uploads use: numbers for
//! integers and floats, strings for text, arrays for arrays, an array of byte values
//! for `bytea`, any JSON for `jsonb`. Columns the schema does not know (kept by the
//! app's backend) are left out, and the version columns become the change's
//! `version`.

use serde_json::{Map, Value};

use crate::sync_schema::{quote_ident, quote_literal, PgType, SyncCollection, VERSION_COLUMN};

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

/// The SQL expression that renders a row `t` of `collection` as the JSON text
/// clients receive: `json_build_object` over the schema's columns (numbers,
/// strings, arrays and `jsonb` as `to_json` gives them; `bytea` as an array of
/// byte values), and `keel_version`. Columns
/// the schema does not know are left out. The relay sends the text as it is.
pub fn snapshot_json(collection: &SyncCollection) -> String {
    let pairs: Vec<String> = collection
        .columns
        .iter()
        .map(|c| {
            let column = format!("t.{}", quote_ident(&c.name));
            let value = match c.pg_type {
                PgType::Bytea => format!(
                    "CASE WHEN {column} IS NULL THEN NULL ELSE (SELECT coalesce(jsonb_agg(get_byte({column}, i) ORDER BY i), '[]') \
                     FROM generate_series(0, length({column}) - 1) AS i) END"
                ),
                _ => column,
            };
            format!("{}, {value}", quote_literal(&c.name))
        })
        .chain(std::iter::once(format!(
            "{}, t.{}",
            quote_literal(VERSION_COLUMN),
            quote_ident(VERSION_COLUMN)
        )))
        .collect();
    // `json_build_object` writes the pairs as given; `jsonb`'s would sort and
    // check its keys first, a third of the query's time. A function call takes
    // at most 100 arguments: a wider collection joins `jsonb` objects of 50
    // pairs each (`json` has no `||`).
    if pairs.len() <= 50 {
        return format!("json_build_object({})::text", pairs.join(", "));
    }
    let objects: Vec<String> = pairs
        .chunks(50)
        .map(|chunk| format!("jsonb_build_object({})", chunk.join(", ")))
        .collect();
    format!("({})::text", objects.join(" || "))
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
