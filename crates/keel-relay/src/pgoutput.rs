//! A decoder for PostgreSQL's `pgoutput` logical replication messages (protocol 1).
//!
//! The relay streams its slot (see [`crate::replication`]), one message per row:
//! `B`egin, `R`elation (a table's columns, sent before its first change in a
//! session), `I`nsert, `U`pdate, `D`elete, `T`runcate, `C`ommit, and `O`rigin /
//! t`Y`pe, which the relay does not need. [`Decoder::push`] folds them into whole
//! [`Transaction`]s, each complete with its commit LSN (the replication client
//! reads begins and commits itself and hands them over as [`Decoder::begin`] and
//! [`Decoder::commit`]). Column values arrive in PostgreSQL's text form (`None` for SQL null); an unchanged TOASTed
//! value in an update is filled from the old row, which `REPLICA IDENTITY FULL`
//! always sends.
//!
//! Bad bytes are a [`DecodeError`], never a panic.

use std::collections::HashMap;
use std::sync::Arc;

/// A table as the `Relation` message describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Relation {
    /// The table's schema.
    pub namespace: String,
    /// The table's name.
    pub name: String,
    /// Column names, in order.
    pub columns: Arc<Vec<String>>,
}

/// A row: values in column order, in text form; `None` is SQL null.
pub type Row = Vec<Option<String>>;

/// One row change.
#[derive(Debug, Clone, PartialEq)]
pub enum RowChange {
    /// A new row.
    Insert {
        /// The table.
        relation: u32,
        /// The row.
        new: Row,
    },
    /// A changed row.
    Update {
        /// The table.
        relation: u32,
        /// The row before (present with `REPLICA IDENTITY FULL`).
        old: Option<Row>,
        /// The row after.
        new: Row,
    },
    /// A deleted row.
    Delete {
        /// The table.
        relation: u32,
        /// The row (all columns with `REPLICA IDENTITY FULL`).
        old: Row,
    },
    /// Tables emptied.
    Truncate {
        /// The tables.
        relations: Vec<u32>,
    },
}

/// One committed upstream transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    /// The transaction id.
    pub xid: u32,
    /// The LSN of its commit record.
    pub commit_lsn: u64,
    /// The LSN just after it: where the stream continues.
    pub end_lsn: u64,
    /// Its changes, in order.
    pub changes: Vec<RowChange>,
}

/// A message that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pgoutput: {0}")]
pub struct DecodeError(pub String);

/// Turns the message stream into transactions; keeps the relations it has seen.
#[derive(Debug, Default)]
pub struct Decoder {
    relations: HashMap<u32, Relation>,
    open: Option<Transaction>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| DecodeError(format!("message ends at byte {}", self.bytes.len())))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn cstr(&mut self) -> Result<String, DecodeError> {
        let rest = &self.bytes[self.at..];
        let len = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| DecodeError("unterminated string".into()))?;
        let s = String::from_utf8_lossy(&rest[..len]).into_owned();
        self.at += len + 1;
        Ok(s)
    }
    /// TupleData; `Err` on bad bytes. `'u'` (unchanged TOAST) reads as `Unchanged`.
    fn tuple(&mut self) -> Result<Vec<Value>, DecodeError> {
        let n = self.u16()?;
        (0..n)
            .map(|_| match self.u8()? {
                b'n' => Ok(Value::Null),
                b'u' => Ok(Value::Unchanged),
                b't' => {
                    let len = self.u32()? as usize;
                    Ok(Value::Text(
                        String::from_utf8_lossy(self.take(len)?).into_owned(),
                    ))
                }
                other => Err(DecodeError(format!("unknown column kind {other:#x}"))),
            })
            .collect()
    }
}

enum Value {
    Null,
    Unchanged,
    Text(String),
}

fn plain(values: Vec<Value>) -> Row {
    values
        .into_iter()
        .map(|v| match v {
            Value::Text(s) => Some(s),
            Value::Null | Value::Unchanged => None,
        })
        .collect()
}

impl Decoder {
    /// A decoder that has seen nothing.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// The relation with this id, if its `Relation` message has been seen.
    pub fn relation(&self, id: u32) -> Option<&Relation> {
        self.relations.get(&id)
    }

    /// Opens transaction `xid`: what a `Begin` message says. The replication
    /// client hands begins and commits over already read, as values.
    pub fn begin(&mut self, xid: u32) {
        self.open = Some(Transaction {
            xid,
            commit_lsn: 0,
            end_lsn: 0,
            changes: Vec::new(),
        });
    }

    /// Closes the open transaction: what a `Commit` message says.
    pub fn commit(&mut self, commit_lsn: u64, end_lsn: u64) -> Result<Transaction, DecodeError> {
        let mut tx = self
            .open
            .take()
            .ok_or_else(|| DecodeError("commit without begin".into()))?;
        tx.commit_lsn = commit_lsn;
        tx.end_lsn = end_lsn;
        Ok(tx)
    }

    /// Decodes one message; returns the transaction it completes, if it is a commit.
    pub fn push(&mut self, message: &[u8]) -> Result<Option<Transaction>, DecodeError> {
        let mut r = Reader {
            bytes: message,
            at: 0,
        };
        match r.u8()? {
            b'B' => {
                let _final_lsn = r.u64()?;
                let _timestamp = r.u64()?;
                self.begin(r.u32()?);
                Ok(None)
            }
            b'C' => {
                let _flags = r.u8()?;
                let commit_lsn = r.u64()?;
                let end_lsn = r.u64()?;
                self.commit(commit_lsn, end_lsn).map(Some)
            }
            b'R' => {
                let id = r.u32()?;
                let namespace = r.cstr()?;
                let name = r.cstr()?;
                let _identity = r.u8()?;
                let n = r.u16()?;
                let mut columns = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let _flags = r.u8()?;
                    columns.push(r.cstr()?);
                    let _type = r.u32()?;
                    let _modifier = r.u32()?;
                }
                self.relations.insert(
                    id,
                    Relation {
                        namespace,
                        name,
                        columns: Arc::new(columns),
                    },
                );
                Ok(None)
            }
            b'I' => {
                let relation = r.u32()?;
                expect(r.u8()?, b'N')?;
                let new = plain(r.tuple()?);
                self.add(RowChange::Insert { relation, new })
            }
            b'U' => {
                let relation = r.u32()?;
                let mut kind = r.u8()?;
                let mut old = None;
                if kind == b'K' || kind == b'O' {
                    old = Some(r.tuple()?);
                    kind = r.u8()?;
                }
                expect(kind, b'N')?;
                let new = r.tuple()?;
                let old_plain = old.map(plain);
                let new = new
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::Text(s) => Some(s),
                        Value::Null => None,
                        Value::Unchanged => {
                            old_plain.as_ref().and_then(|o| o.get(i).cloned()).flatten()
                        }
                    })
                    .collect();
                self.add(RowChange::Update {
                    relation,
                    old: old_plain,
                    new,
                })
            }
            b'D' => {
                let relation = r.u32()?;
                let kind = r.u8()?;
                if kind != b'K' && kind != b'O' {
                    return Err(DecodeError(format!(
                        "delete without an old row ({kind:#x})"
                    )));
                }
                let old = plain(r.tuple()?);
                self.add(RowChange::Delete { relation, old })
            }
            b'T' => {
                let n = r.u32()?;
                let _options = r.u8()?;
                let relations = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
                self.add(RowChange::Truncate { relations })
            }
            // Origin, type and logical messages carry nothing the relay forwards.
            b'O' | b'Y' | b'M' => Ok(None),
            other => Err(DecodeError(format!("unknown message {other:#x}"))),
        }
    }

    fn add(&mut self, change: RowChange) -> Result<Option<Transaction>, DecodeError> {
        let tx = self
            .open
            .as_mut()
            .ok_or_else(|| DecodeError("a change outside a transaction".into()))?;
        tx.changes.push(change);
        Ok(None)
    }
}

fn expect(found: u8, wanted: u8) -> Result<(), DecodeError> {
    if found == wanted {
        Ok(())
    } else {
        Err(DecodeError(format!(
            "expected {:?}, found {:#x}",
            wanted as char, found
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation_message() -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(16384u32.to_be_bytes());
        m.extend(b"public\0posts\0");
        m.push(b'f');
        m.extend(2u16.to_be_bytes());
        for name in ["id", "title"] {
            m.push(1);
            m.extend(name.as_bytes());
            m.push(0);
            m.extend(25u32.to_be_bytes());
            m.extend((-1i32).to_be_bytes());
        }
        m
    }

    fn tuple(values: &[Option<&str>]) -> Vec<u8> {
        let mut m = (values.len() as u16).to_be_bytes().to_vec();
        for v in values {
            match v {
                None => m.push(b'n'),
                Some(s) => {
                    m.push(b't');
                    m.extend((s.len() as u32).to_be_bytes());
                    m.extend(s.as_bytes());
                }
            }
        }
        m
    }

    #[test]
    fn messages_fold_into_a_transaction() {
        let mut d = Decoder::new();
        let mut begin = vec![b'B'];
        begin.extend(100u64.to_be_bytes());
        begin.extend(0u64.to_be_bytes());
        begin.extend(7u32.to_be_bytes());
        assert_eq!(d.push(&begin).unwrap(), None);
        assert_eq!(d.push(&relation_message()).unwrap(), None);
        let mut insert = vec![b'I'];
        insert.extend(16384u32.to_be_bytes());
        insert.push(b'N');
        insert.extend(tuple(&[Some("p1"), None]));
        d.push(&insert).unwrap();
        let mut update = vec![b'U'];
        update.extend(16384u32.to_be_bytes());
        update.push(b'O');
        update.extend(tuple(&[Some("p1"), Some("old")]));
        update.push(b'N');
        // The title is an unchanged TOAST value: filled from the old row.
        update.extend([0, 2, b't', 0, 0, 0, 2, b'p', b'1', b'u']);
        d.push(&update).unwrap();
        let mut commit = vec![b'C', 0];
        commit.extend(100u64.to_be_bytes());
        commit.extend(120u64.to_be_bytes());
        commit.extend(0u64.to_be_bytes());
        let tx = d.push(&commit).unwrap().expect("a commit completes it");
        assert_eq!((tx.xid, tx.commit_lsn, tx.end_lsn), (7, 100, 120));
        assert_eq!(
            tx.changes,
            vec![
                RowChange::Insert {
                    relation: 16384,
                    new: vec![Some("p1".into()), None]
                },
                RowChange::Update {
                    relation: 16384,
                    old: Some(vec![Some("p1".into()), Some("old".into())]),
                    new: vec![Some("p1".into()), Some("old".into())]
                },
            ]
        );
        assert_eq!(*d.relation(16384).unwrap().columns, ["id", "title"]);
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        // Every prefix of valid messages, and a pseudo-random byte soup.
        let mut d = Decoder::new();
        let relation = relation_message();
        for end in 0..relation.len() {
            assert!(d.push(&relation[..end]).is_err(), "prefix of {end} bytes");
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let len = (state % 40) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect();
            let _ = d.push(&bytes);
        }
        assert!(
            d.push(b"I\0\0\0\x01N").is_err(),
            "a change outside a transaction"
        );
    }
}
