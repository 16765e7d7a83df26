//! [`Expr`]: query filters built from exported constructors, checked against the
//! collection's table when the query runs.

use std::sync::Arc;

use keel_schema::{ArithOp, CmpOp, FieldPath, FieldType, ScalarType, Schema, Value as KValue};

use crate::error::KeelError;
use crate::types::Value;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Cmp {
        field: String,
        op: CmpOp,
        value: Value,
    },
    In {
        field: String,
        values: Vec<Value>,
        negated: bool,
    },
    Null {
        field: String,
        negated: bool,
    },
    UnionIs {
        field: String,
        member: String,
    },
    All(Vec<Arc<Expr>>),
    Any(Vec<Arc<Expr>>),
    Not(Arc<Expr>),
    Compare {
        left: Arc<Term>,
        op: CmpOp,
        right: Arc<Term>,
    },
    TermNull {
        term: Arc<Term>,
        negated: bool,
    },
    Unknown {
        expr: Arc<Expr>,
        negated: bool,
    },
    Matches {
        field: Option<String>,
        query: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum TermNode {
    Field(String),
    Const(Value),
    Arith(ArithOp, Arc<Term>, Arc<Term>),
}

/// A value computed from an object, for filters with arithmetic
/// (`mana + hp > 150`, `x % 7 == 0`): a field, a constant, or arithmetic on two
/// terms. Arithmetic follows SQLite: integers stay integers unless they overflow,
/// a float operand makes a float, division or remainder by zero is null, and a null
/// (absent) operand makes the result null. Only numeric fields (integers, floats,
/// bools, enums) and numeric constants may take part.
///
/// ```
/// use keel_ffi::{Term, Value};
/// let e = Term::field("mana".into())
///     .plus(Term::field("hp".into()))
///     .gt(Term::constant(Value::Integer { v: 150 }));
/// assert_eq!(e.describe(), "(mana + hp) > 150");
/// ```
#[derive(Debug, Clone, PartialEq, uniffi::Object)]
pub struct Term {
    node: TermNode,
}

fn arith(a: Arc<Term>, op: ArithOp, b: Arc<Term>) -> Arc<Term> {
    Arc::new(Term {
        node: TermNode::Arith(op, a, b),
    })
}

fn compare(left: Arc<Term>, op: CmpOp, right: Arc<Term>) -> Arc<Expr> {
    Arc::new(Expr {
        node: Node::Compare { left, op, right },
    })
}

#[uniffi::export]
impl Term {
    /// The value of the field at a dotted path.
    #[uniffi::constructor]
    pub fn field(field: String) -> Arc<Term> {
        Arc::new(Term {
            node: TermNode::Field(field),
        })
    }
    /// A constant.
    #[uniffi::constructor]
    pub fn constant(value: Value) -> Arc<Term> {
        Arc::new(Term {
            node: TermNode::Const(value),
        })
    }
    /// `self + other`.
    pub fn plus(self: Arc<Self>, other: Arc<Term>) -> Arc<Term> {
        arith(self, ArithOp::Add, other)
    }
    /// `self - other`.
    pub fn minus(self: Arc<Self>, other: Arc<Term>) -> Arc<Term> {
        arith(self, ArithOp::Sub, other)
    }
    /// `self * other`.
    pub fn times(self: Arc<Self>, other: Arc<Term>) -> Arc<Term> {
        arith(self, ArithOp::Mul, other)
    }
    /// `self / other` (integer division truncates; by zero is null).
    pub fn divided_by(self: Arc<Self>, other: Arc<Term>) -> Arc<Term> {
        arith(self, ArithOp::Div, other)
    }
    /// `self % other` (by zero is null).
    pub fn modulo(self: Arc<Self>, other: Arc<Term>) -> Arc<Term> {
        arith(self, ArithOp::Rem, other)
    }
    /// `self == other`.
    pub fn eq(self: Arc<Self>, other: Arc<Term>) -> Arc<Expr> {
        compare(self, CmpOp::Eq, other)
    }
    /// `self != other`.
    pub fn ne(self: Arc<Self>, other: Arc<Term>) -> Arc<Expr> {
        compare(self, CmpOp::Ne, other)
    }
    /// `self < other`.
    pub fn lt(self: Arc<Self>, other: Arc<Term>) -> Arc<Expr> {
        compare(self, CmpOp::Lt, other)
    }
    /// `self <= other`.
    pub fn le(self: Arc<Self>, other: Arc<Term>) -> Arc<Expr> {
        compare(self, CmpOp::Le, other)
    }
    /// `self > other`.
    pub fn gt(self: Arc<Self>, other: Arc<Term>) -> Arc<Expr> {
        compare(self, CmpOp::Gt, other)
    }
    /// `self >= other`.
    pub fn ge(self: Arc<Self>, other: Arc<Term>) -> Arc<Expr> {
        compare(self, CmpOp::Ge, other)
    }
    /// The term is null (absent field, null operand, division by zero).
    pub fn is_null(self: Arc<Self>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::TermNull {
                term: self,
                negated: false,
            },
        })
    }
    /// The term is not null.
    pub fn is_not_null(self: Arc<Self>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::TermNull {
                term: self,
                negated: true,
            },
        })
    }
    /// The term as text, e.g. `(mana + hp)`.
    pub fn describe(&self) -> String {
        match &self.node {
            TermNode::Field(f) => f.clone(),
            TermNode::Const(v) => KValue::from(v.clone()).to_string(),
            TermNode::Arith(op, a, b) => {
                format!("({} {} {})", a.describe(), op.symbol(), b.describe())
            }
        }
    }
}

/// A query filter over one object. Fields are named by dotted paths
/// (`priority`, `author.name`, `content.Image.width`); names and value types are
/// checked against the collection's table when the query runs, so a typo or a
/// wrong value type is an `UnknownField` / `TypeMismatch` error, not an empty
/// result. Comparisons with an absent field do not match (SQL's three-valued logic);
/// use `is_null` for absent fields.
///
/// ```
/// use keel_ffi::{Expr, Value};
/// let e = Expr::all_of(vec![
///     Expr::gt("priority".into(), Value::Integer { v: 3 }),
///     Expr::negate(Expr::is_null("title".into())),
/// ]);
/// assert_eq!(e.describe(), "(priority > 3 AND NOT (title IS NULL))");
/// ```
#[derive(Debug, Clone, PartialEq, uniffi::Object)]
pub struct Expr {
    node: Node,
}

fn cmp(field: String, op: CmpOp, value: Value) -> Arc<Expr> {
    Arc::new(Expr {
        node: Node::Cmp { field, op, value },
    })
}

#[uniffi::export]
impl Expr {
    /// `field == value`.
    #[uniffi::constructor]
    pub fn eq(field: String, value: Value) -> Arc<Expr> {
        cmp(field, CmpOp::Eq, value)
    }
    /// `field != value`.
    #[uniffi::constructor]
    pub fn ne(field: String, value: Value) -> Arc<Expr> {
        cmp(field, CmpOp::Ne, value)
    }
    /// `field < value`.
    #[uniffi::constructor]
    pub fn lt(field: String, value: Value) -> Arc<Expr> {
        cmp(field, CmpOp::Lt, value)
    }
    /// `field <= value`.
    #[uniffi::constructor]
    pub fn le(field: String, value: Value) -> Arc<Expr> {
        cmp(field, CmpOp::Le, value)
    }
    /// `field > value`.
    #[uniffi::constructor]
    pub fn gt(field: String, value: Value) -> Arc<Expr> {
        cmp(field, CmpOp::Gt, value)
    }
    /// `field >= value`.
    #[uniffi::constructor]
    pub fn ge(field: String, value: Value) -> Arc<Expr> {
        cmp(field, CmpOp::Ge, value)
    }
    /// `field IN (values…)`.
    #[uniffi::constructor]
    pub fn is_in(field: String, values: Vec<Value>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::In {
                field,
                values,
                negated: false,
            },
        })
    }
    /// `field NOT IN (values…)`.
    #[uniffi::constructor]
    pub fn not_in(field: String, values: Vec<Value>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::In {
                field,
                values,
                negated: true,
            },
        })
    }
    /// The field is absent (or null).
    #[uniffi::constructor]
    pub fn is_null(field: String) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::Null {
                field,
                negated: false,
            },
        })
    }
    /// The field is present (scalars with a default always are).
    #[uniffi::constructor]
    pub fn is_not_null(field: String) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::Null {
                field,
                negated: true,
            },
        })
    }
    /// The union field holds the member called `member` (`content is Image`).
    #[uniffi::constructor]
    pub fn union_is(field: String, member: String) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::UnionIs { field, member },
        })
    }
    /// Full-text search of the `(searchable)` field `field` in keel's query
    /// language (words, `"phrases"`, `prefix*`, `AND`, `OR`, `NOT`, `NEAR(…)`;
    /// see `docs/search.md`). Malformed query text fails the query with an
    /// invalid-argument error when it runs.
    #[uniffi::constructor]
    pub fn matches(field: String, query: String) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::Matches {
                field: Some(field),
                query,
            },
        })
    }
    /// Full-text search over every `(searchable)` field of the collection.
    #[uniffi::constructor]
    pub fn search(query: String) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::Matches { field: None, query },
        })
    }
    /// Every one of `exprs` holds (`true` when empty).
    #[uniffi::constructor]
    pub fn all_of(exprs: Vec<Arc<Expr>>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::All(exprs),
        })
    }
    /// At least one of `exprs` holds (`false` when empty).
    #[uniffi::constructor]
    pub fn any_of(exprs: Vec<Arc<Expr>>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::Any(exprs),
        })
    }
    /// Negation (three-valued: not-unknown is unknown).
    #[uniffi::constructor]
    pub fn negate(expr: Arc<Expr>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::Not(expr),
        })
    }
    /// This filter is unknown — neither it nor its negation matches (SQL's
    /// `(filter) IS NULL`), e.g. a comparison with an absent field.
    pub fn is_unknown(self: Arc<Self>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::Unknown {
                expr: self,
                negated: false,
            },
        })
    }
    /// This filter is true or false, not unknown (`(filter) IS NOT NULL`).
    pub fn is_known(self: Arc<Self>) -> Arc<Expr> {
        Arc::new(Expr {
            node: Node::Unknown {
                expr: self,
                negated: true,
            },
        })
    }
    /// `self AND other`.
    pub fn and_also(self: Arc<Self>, other: Arc<Expr>) -> Arc<Expr> {
        Expr::all_of(vec![self, other])
    }
    /// `self OR other`.
    pub fn or_else(self: Arc<Self>, other: Arc<Expr>) -> Arc<Expr> {
        Expr::any_of(vec![self, other])
    }
    /// The filter as text, e.g. `(priority > 3 AND title IS NULL)`.
    pub fn describe(&self) -> String {
        match &self.node {
            Node::Cmp { field, op, value } => {
                format!("{field} {} {}", op.symbol(), KValue::from(value.clone()))
            }
            Node::In {
                field,
                values,
                negated,
            } => format!(
                "{field} {}IN ({})",
                if *negated { "NOT " } else { "" },
                values
                    .iter()
                    .map(|v| KValue::from(v.clone()).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Node::Null { field, negated } => {
                format!("{field} IS {}NULL", if *negated { "NOT " } else { "" })
            }
            Node::UnionIs { field, member } => format!("{field} is {member}"),
            Node::Matches { field, query } => {
                format!("{} MATCHES {query:?}", field.as_deref().unwrap_or("*"))
            }
            Node::All(v) if v.is_empty() => "true".into(),
            Node::Any(v) if v.is_empty() => "false".into(),
            Node::All(v) => join(v, " AND "),
            Node::Any(v) => join(v, " OR "),
            Node::Not(e) => format!("NOT ({})", e.describe()),
            Node::Compare { left, op, right } => {
                format!("{} {} {}", left.describe(), op.symbol(), right.describe())
            }
            Node::TermNull { term, negated } => format!(
                "{} IS {}NULL",
                term.describe(),
                if *negated { "NOT " } else { "" }
            ),
            Node::Unknown { expr, negated } => format!(
                "({}) IS {}NULL",
                expr.describe(),
                if *negated { "NOT " } else { "" }
            ),
        }
    }
}

fn join(v: &[Arc<Expr>], sep: &str) -> String {
    if v.len() == 1 {
        return v[0].describe();
    }
    format!(
        "({})",
        v.iter().map(|e| e.describe()).collect::<Vec<_>>().join(sep)
    )
}

/// What a dotted path ends on.
enum Leaf<'s> {
    Type(&'s FieldType),
    Union(usize),
}

/// Resolves names of one collection's table.
pub(crate) struct Resolver<'s> {
    pub(crate) schema: &'s Schema,
    pub(crate) table: usize,
    pub(crate) collection: &'s str,
}

impl<'s> Resolver<'s> {
    /// A resolver for `collection`, or `UnknownCollection`.
    pub(crate) fn new(
        schema: &'s Schema,
        collection: &'s str,
        op: &str,
    ) -> Result<Resolver<'s>, KeelError> {
        let c = schema
            .collection(collection)
            .ok_or_else(|| KeelError::UnknownCollection {
                message: format!("{op}: no collection named {collection:?} in the schema"),
            })?;
        Ok(Resolver {
            schema,
            table: c.table,
            collection,
        })
    }

    fn unknown(&self, message: String) -> KeelError {
        KeelError::UnknownField {
            message: format!("query in {}: {message}", self.collection),
        }
    }

    fn mismatch(&self, field: &str, message: String) -> KeelError {
        KeelError::TypeMismatch {
            message: format!("query in {}: field {field:?} {message}", self.collection),
        }
    }

    pub(crate) fn path(&self, field: &str) -> Result<FieldPath, KeelError> {
        let reader = self
            .schema
            .table_reader(self.table)
            .ok_or_else(|| self.unknown("the collection's table is missing".into()))?;
        reader.path(field).map_err(|e| self.unknown(e.0))
    }

    fn leaf(&self, field: &str) -> Result<Leaf<'s>, KeelError> {
        let s = self.schema;
        let mut table = Some(self.table);
        let mut strct: Option<usize> = None;
        let mut leaf: Option<Leaf<'s>> = None;
        let mut parts = field.split('.').peekable();
        while let Some(part) = parts.next() {
            let ty: &'s FieldType = if let Some(t) = table.take() {
                let f = s.tables[t]
                    .field(part)
                    .ok_or_else(|| self.unknown(format!("no field {part:?} in {field:?}")))?;
                &f.ty
            } else if let Some(si) = strct.take() {
                let f = s.structs[si]
                    .fields
                    .iter()
                    .find(|f| f.name == part)
                    .ok_or_else(|| self.unknown(format!("no field {part:?} in {field:?}")))?;
                &f.ty
            } else {
                return Err(self.unknown(format!(
                    "{field:?}: cannot read {part:?} inside a scalar, string or vector"
                )));
            };
            leaf = None;
            match ty {
                FieldType::Table(i) => table = Some(*i),
                FieldType::Struct(i) => strct = Some(*i),
                FieldType::Union(u) => match parts.next() {
                    Some(m) => {
                        let member = s.unions[*u]
                            .members
                            .iter()
                            .find(|x| x.name == m)
                            .ok_or_else(|| {
                                self.unknown(format!("union {part:?} has no member {m:?}"))
                            })?;
                        table = Some(member.table);
                    }
                    None => leaf = Some(Leaf::Union(*u)),
                },
                other => leaf = Some(Leaf::Type(other)),
            }
        }
        leaf.ok_or_else(|| {
            self.unknown(format!(
                "{field:?} is a table or struct; name one of its fields"
            ))
        })
    }

    /// Check (and convert: enum names → numbers, ints → floats) a filter constant.
    pub(crate) fn value(&self, field: &str, v: &Value) -> Result<KValue, KeelError> {
        let ty = match self.leaf(field)? {
            Leaf::Type(t) => t,
            Leaf::Union(_) => {
                return Err(self.mismatch(
                    field,
                    "is a union: compare with union_is(field, member)".into(),
                ))
            }
        };
        let bad = |want: &str| {
            self.mismatch(
                field,
                format!(
                    "expects {want}, got {}",
                    match v {
                        Value::Null => "null (use is_null)".to_string(),
                        other => format!("{} ({})", KValue::from(other.clone()).kind(), {
                            KValue::from(other.clone())
                        }),
                    }
                ),
            )
        };
        Ok(match (ty, v) {
            (FieldType::Scalar(ScalarType::Bool), Value::Bool { v }) => KValue::Bool(*v),
            (FieldType::Scalar(ScalarType::Bool), _) => return Err(bad("a bool")),
            (FieldType::Scalar(t), Value::Integer { v }) if t.is_integer() => KValue::Int(*v),
            (FieldType::Scalar(t), Value::Integer { v }) if t.is_float() => {
                KValue::Float(*v as f64)
            }
            (FieldType::Scalar(t), Value::Real { v }) if t.is_float() => KValue::Float(*v),
            (FieldType::Scalar(t), _) if t.is_float() => return Err(bad("a number")),
            (FieldType::Scalar(_), _) => return Err(bad("an integer")),
            (FieldType::Enum(_), Value::Integer { v }) => KValue::Int(*v),
            (FieldType::Enum(e), Value::Text { v }) => {
                let def = &self.schema.enums[*e];
                KValue::Int(def.value(v).ok_or_else(|| {
                    self.mismatch(
                        field,
                        format!("has no enum value {v:?} in {}", def.full_name()),
                    )
                })?)
            }
            (FieldType::Enum(_), _) => return Err(bad("an enum value (integer or name)")),
            (FieldType::String, Value::Text { v }) => KValue::Text(v.clone()),
            (FieldType::String, _) => return Err(bad("text")),
            (FieldType::Vector(inner), Value::Blob { v })
                if matches!(
                    **inner,
                    FieldType::Scalar(ScalarType::U8) | FieldType::Scalar(ScalarType::I8)
                ) =>
            {
                KValue::Blob(v.clone())
            }
            (FieldType::Vector(_), Value::Blob { .. }) => {
                return Err(self.mismatch(field, "is a vector; only byte vectors compare".into()))
            }
            (FieldType::Vector(_), _) => return Err(bad("bytes")),
            _ => {
                return Err(self.mismatch(
                    field,
                    "is a table, struct or union and cannot be compared".into(),
                ))
            }
        })
    }

    /// The engine's expression for `e`.
    pub(crate) fn expr(&self, e: &Expr) -> Result<keel_schema::Expr, KeelError> {
        use keel_schema::Expr as K;
        Ok(match &e.node {
            Node::Cmp { field, op, value } => K::Cmp {
                path: self.path(field)?,
                op: *op,
                value: self.value(field, value)?,
            },
            Node::In {
                field,
                values,
                negated,
            } => {
                let path = self.path(field)?;
                let values = values
                    .iter()
                    .map(|v| self.value(field, v))
                    .collect::<Result<Vec<_>, _>>()?;
                if *negated {
                    K::NotIn { path, values }
                } else {
                    K::In { path, values }
                }
            }
            Node::Null { field, negated } => {
                let path = self.path(field)?;
                if *negated {
                    K::IsNotNull(path)
                } else {
                    K::IsNull(path)
                }
            }
            Node::UnionIs { field, member } => {
                let u = match self.leaf(field)? {
                    Leaf::Union(u) => u,
                    Leaf::Type(_) => {
                        return Err(self.mismatch(field, "is not a union".into()));
                    }
                };
                let m = self.schema.unions[u]
                    .members
                    .iter()
                    .find(|m| &m.name == member)
                    .ok_or_else(|| {
                        self.unknown(format!("union {field:?} has no member {member:?}"))
                    })?;
                K::UnionIs {
                    path: self.path(field)?,
                    member: m.tag,
                    member_name: m.name.clone(),
                }
            }
            Node::All(v) => {
                let mut it = v.iter();
                match it.next() {
                    None => K::True,
                    Some(first) => {
                        let mut acc = self.expr(first)?;
                        for x in it {
                            acc = acc.and(self.expr(x)?);
                        }
                        acc
                    }
                }
            }
            Node::Any(v) => {
                let mut it = v.iter();
                match it.next() {
                    None => K::False,
                    Some(first) => {
                        let mut acc = self.expr(first)?;
                        for x in it {
                            acc = acc.or(self.expr(x)?);
                        }
                        acc
                    }
                }
            }
            Node::Not(x) => K::Not(Box::new(self.expr(x)?)),
            // The engine checks the field is searchable and parses the query.
            Node::Matches { field, query } => K::Matches {
                path: field.as_ref().map(|f| self.path(f)).transpose()?,
                query: query.clone(),
            },
            Node::Compare { left, op, right } => K::Compare {
                left: self.term(left)?,
                op: *op,
                right: self.term(right)?,
            },
            Node::TermNull { term, negated } => {
                let t = self.term(term)?;
                if *negated {
                    K::TermIsNotNull(t)
                } else {
                    K::TermIsNull(t)
                }
            }
            Node::Unknown { expr, negated } => {
                let e = Box::new(self.expr(expr)?);
                if *negated {
                    K::IsKnown(e)
                } else {
                    K::IsUnknown(e)
                }
            }
        })
    }

    /// The engine's term for `t` (numeric checks happen when the query compiles).
    fn term(&self, t: &Term) -> Result<keel_schema::Term, KeelError> {
        use keel_schema::Term as K;
        Ok(match &t.node {
            TermNode::Field(f) => K::Field(self.path(f)?),
            TermNode::Const(v) => K::Const(KValue::from(v.clone())),
            TermNode::Arith(op, a, b) => {
                K::Arith(*op, Box::new(self.term(a)?), Box::new(self.term(b)?))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FBS: &str = r#"namespace t;
        enum Color: byte { Red, Green }
        table Img { w: int; }
        table Txt { s: string; }
        union Content { Img, Txt }
        table Post { id: string (primary); n: int; x: double; ok: bool; c: Color;
                     data: [ubyte]; content: Content; }
        root_type Post;"#;

    #[test]
    fn resolves_and_checks_types() {
        let s = Schema::parse(FBS, "t.fbs").unwrap();
        let r = Resolver::new(&s, "t.Post", "query").unwrap();
        let ok = Expr::all_of(vec![
            Expr::gt("n".into(), Value::Integer { v: 1 }),
            Expr::le("x".into(), Value::Integer { v: 2 }),
            Expr::eq("c".into(), Value::Text { v: "Green".into() }),
            Expr::union_is("content".into(), "Img".into()),
            Expr::gt("content.Img.w".into(), Value::Integer { v: 0 }),
            Expr::is_in("id".into(), vec![Value::Text { v: "a".into() }]),
        ]);
        let e = r.expr(&ok).unwrap();
        assert!(e.to_string().contains("c == 1"), "{e}");
        let bad = Expr::gt("n".into(), Value::Text { v: "x".into() });
        assert!(matches!(r.expr(&bad), Err(KeelError::TypeMismatch { .. })));
        let bad = Expr::eq("nope".into(), Value::Integer { v: 1 });
        assert!(matches!(r.expr(&bad), Err(KeelError::UnknownField { .. })));
        let bad = Expr::eq("ok".into(), Value::Null);
        assert!(matches!(r.expr(&bad), Err(KeelError::TypeMismatch { .. })));
        assert!(matches!(
            Resolver::new(&s, "Nope", "query"),
            Err(KeelError::UnknownCollection { .. })
        ));
    }
}
