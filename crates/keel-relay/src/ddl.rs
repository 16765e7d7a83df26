//! The PostgreSQL side of the schema: the DDL for synced tables, and a check of an
//! existing database against it.
//!
//! [`ddl`] prints what `keel-relay schema <file.fbs>` prints: the `keel_relay` schema
//! with the row-version sequence and trigger function, then per synced collection a
//! `CREATE TABLE IF NOT EXISTS` with one typed column per field, the two version
//! columns, the primary key, `REPLICA IDENTITY FULL` (so logical replication carries
//! the old row of an update or delete, which scope filtering needs) and the trigger.
//!
//! [`check`] reads the catalog of a live database and lists every [`Difference`]:
//! a missing table or column, a column of another type or nullability, another
//! primary key, a missing version column or trigger, a replica identity that is not
//! full, or an extra `NOT NULL` column without a default (which client inserts could
//! never fill). Extra nullable columns are fine: the app's backend may keep columns
//! the clients do not see.

use std::fmt;

use tokio_postgres::Client;

use crate::error::Error;
use crate::sync_schema::{
    quote_ident, quote_literal, SyncCollection, SyncSchema, CREATED_COLUMN, VERSION_COLUMN,
};

/// The name of the trigger that stamps row versions.
pub const TRIGGER_NAME: &str = "keel_row_version";

/// The statements that create the relay's row-version machinery (idempotent).
pub const VERSION_MACHINERY: &str = r#"CREATE SCHEMA IF NOT EXISTS keel_relay;
CREATE SEQUENCE IF NOT EXISTS keel_relay.row_version;
CREATE OR REPLACE FUNCTION keel_relay.stamp_row_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.keel_version := nextval('keel_relay.row_version');
  IF TG_OP = 'INSERT' THEN
    NEW.keel_created := NEW.keel_version;
  ELSE
    NEW.keel_created := OLD.keel_created;
  END IF;
  RETURN NEW;
END
$$;
"#;

/// The DDL for every synced collection, as one script (idempotent: `IF NOT EXISTS`,
/// `OR REPLACE`).
pub fn ddl(schema: &SyncSchema) -> String {
    let mut out = String::from(VERSION_MACHINERY);
    for collection in &schema.collections {
        out.push('\n');
        out.push_str(&table_ddl(collection));
    }
    out
}

/// The DDL of one synced collection.
pub fn table_ddl(collection: &SyncCollection) -> String {
    let table = quote_ident(&collection.table);
    let mut lines: Vec<String> = collection
        .columns
        .iter()
        .map(|c| {
            let mut line = format!("  {} {}", quote_ident(&c.name), c.pg_type.sql());
            if c.not_null {
                line.push_str(" NOT NULL");
            }
            if let Some(default) = &c.default {
                line.push_str(&format!(" DEFAULT {}", sql_literal(default)));
            }
            line
        })
        .collect();
    lines.push(format!("  {VERSION_COLUMN} bigint NOT NULL"));
    lines.push(format!("  {CREATED_COLUMN} bigint NOT NULL"));
    let key: Vec<String> = collection
        .primary_key
        .iter()
        .map(|k| quote_ident(k))
        .collect();
    lines.push(format!("  PRIMARY KEY ({})", key.join(", ")));
    format!(
        "-- collection {name}\nCREATE TABLE IF NOT EXISTS {table} (\n{columns}\n);\n\
         ALTER TABLE {table} REPLICA IDENTITY FULL;\n\
         CREATE OR REPLACE TRIGGER {TRIGGER_NAME} BEFORE INSERT OR UPDATE ON {table}\n  \
         FOR EACH ROW EXECUTE FUNCTION keel_relay.stamp_row_version();\n",
        name = collection.name,
        columns = lines.join(",\n"),
    )
}

fn sql_literal(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => quote_literal(s),
        other => other.to_string(),
    }
}

/// One way a database differs from the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    /// The collection's table does not exist.
    MissingTable {
        /// The table.
        table: String,
    },
    /// A field has no column.
    MissingColumn {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// Its type in the schema.
        expected: String,
    },
    /// A column has another type than the schema maps its field to.
    WrongType {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The schema's type.
        expected: String,
        /// The database's type.
        found: String,
    },
    /// A column is `NOT NULL` where the schema allows null, or the other way round.
    WrongNullability {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// Whether the schema wants `NOT NULL`.
        expected_not_null: bool,
    },
    /// A `NOT NULL` column without a default that no field maps to: client inserts
    /// would all fail.
    UnfillableColumn {
        /// The table.
        table: String,
        /// The column.
        column: String,
    },
    /// The primary key is on other columns.
    WrongPrimaryKey {
        /// The table.
        table: String,
        /// The schema's key columns.
        expected: Vec<String>,
        /// The database's key columns.
        found: Vec<String>,
    },
    /// The version-stamping trigger is missing.
    MissingTrigger {
        /// The table.
        table: String,
    },
    /// The replica identity is not `FULL`.
    ReplicaIdentity {
        /// The table.
        table: String,
        /// What it is (`default`, `nothing`, `index`).
        found: String,
    },
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::MissingTable { table } => write!(f, "table {table}: missing"),
            Difference::MissingColumn {
                table,
                column,
                expected,
            } => write!(f, "table {table}: column {column} ({expected}) is missing"),
            Difference::WrongType {
                table,
                column,
                expected,
                found,
            } => write!(
                f,
                "table {table}: column {column} is {found}, the schema maps it to {expected}"
            ),
            Difference::WrongNullability {
                table,
                column,
                expected_not_null,
            } => {
                if *expected_not_null {
                    write!(f, "table {table}: column {column} allows null, the schema wants NOT NULL")
                } else {
                    write!(f, "table {table}: column {column} is NOT NULL, the schema allows null (an absent field)")
                }
            }
            Difference::UnfillableColumn { table, column } => write!(
                f,
                "table {table}: column {column} is NOT NULL without a default and no field maps to it: every client insert would fail"
            ),
            Difference::WrongPrimaryKey {
                table,
                expected,
                found,
            } => write!(
                f,
                "table {table}: primary key is ({}), the schema's is ({})",
                found.join(", "),
                expected.join(", ")
            ),
            Difference::MissingTrigger { table } => write!(
                f,
                "table {table}: trigger {TRIGGER_NAME} is missing (row versions would not advance)"
            ),
            Difference::ReplicaIdentity { table, found } => write!(
                f,
                "table {table}: replica identity is {found}, needs FULL (scope filtering reads the old row of updates and deletes)"
            ),
        }
    }
}

/// Compares the live database (its `current_schema()`) with the schema.
pub async fn check(client: &Client, schema: &SyncSchema) -> Result<Vec<Difference>, Error> {
    let mut differences = Vec::new();
    for collection in &schema.collections {
        check_table(client, collection, &mut differences).await?;
    }
    Ok(differences)
}

async fn check_table(
    client: &Client,
    collection: &SyncCollection,
    out: &mut Vec<Difference>,
) -> Result<(), Error> {
    let table = collection.table.clone();
    let Some(row) = client
        .query_opt(
            "SELECT c.oid, c.relreplident::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relname = $1 AND c.relkind IN ('r', 'p')",
            &[&table],
        )
        .await?
    else {
        out.push(Difference::MissingTable { table });
        return Ok(());
    };
    let oid: tokio_postgres::types::Oid = row.get(0);
    let identity: String = row.get(1);
    let columns = client
        .query(
            "SELECT attname::text, format_type(atttypid, atttypmod), attnotnull, atthasdef \
             FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped \
             ORDER BY attnum",
            &[&oid],
        )
        .await?;
    let found: Vec<(String, String, bool, bool)> = columns
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let expected_columns = collection.columns.iter().map(|c| {
        (
            c.name.clone(),
            c.pg_type.sql(),
            c.not_null || collection.primary_key.contains(&c.name),
        )
    });
    let version_columns = [VERSION_COLUMN, CREATED_COLUMN]
        .into_iter()
        .map(|c| (c.to_owned(), "bigint".to_owned(), true));
    for (name, ty, not_null) in expected_columns.chain(version_columns) {
        match found.iter().find(|f| f.0 == name) {
            None => out.push(Difference::MissingColumn {
                table: table.clone(),
                column: name,
                expected: ty,
            }),
            Some((_, found_ty, found_not_null, _)) => {
                if *found_ty != ty {
                    out.push(Difference::WrongType {
                        table: table.clone(),
                        column: name.clone(),
                        expected: ty,
                        found: found_ty.clone(),
                    });
                }
                if *found_not_null != not_null {
                    out.push(Difference::WrongNullability {
                        table: table.clone(),
                        column: name,
                        expected_not_null: not_null,
                    });
                }
            }
        }
    }
    for (name, _, not_null, has_default) in &found {
        let known =
            collection.column(name).is_some() || name == VERSION_COLUMN || name == CREATED_COLUMN;
        if !known && *not_null && !*has_default {
            out.push(Difference::UnfillableColumn {
                table: table.clone(),
                column: name.clone(),
            });
        }
    }
    let key_rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
             WHERE i.indrelid = $1 AND i.indisprimary \
             ORDER BY array_position(i.indkey::int2[], a.attnum)",
            &[&oid],
        )
        .await?;
    let key: Vec<String> = key_rows.iter().map(|r| r.get(0)).collect();
    if key != collection.primary_key {
        out.push(Difference::WrongPrimaryKey {
            table: table.clone(),
            expected: collection.primary_key.clone(),
            found: key,
        });
    }
    let trigger = client
        .query_opt(
            "SELECT 1 FROM pg_trigger WHERE tgrelid = $1 AND tgname = $2 AND NOT tgisinternal",
            &[&oid, &TRIGGER_NAME],
        )
        .await?;
    if trigger.is_none() {
        out.push(Difference::MissingTrigger {
            table: table.clone(),
        });
    }
    if identity != "f" {
        let found = match identity.as_str() {
            "d" => "default (primary key only)",
            "n" => "nothing",
            "i" => "an index",
            other => other,
        };
        out.push(Difference::ReplicaIdentity {
            table,
            found: found.to_owned(),
        });
    }
    Ok(())
}
