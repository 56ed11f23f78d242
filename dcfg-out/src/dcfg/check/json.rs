//! Streaming JSON for the checker: a document is read with serde's visitors as it comes,
//! never held as a whole `Value`. Tables (spec 1.2.2) are read by their headers, each row's
//! cells handed to a [`Rows`] as they are read; integers are numbers or C-style strings
//! (spec 1.2.1), read into a [`Cell`] that keeps an error for the row to judge in its order.

use super::{shape, CheckError};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::cell::RefCell;
use std::fmt;

thread_local! {
    /// The check error a visitor stopped its deserializer with: serde's error type cannot
    /// carry it, so it waits here for [`read`] (one document is read on one thread).
    static FAILED: RefCell<Option<CheckError>> = const { RefCell::new(None) };
}

/// Stops deserializing with `e`, which [`read`] returns in place of the serde error made here.
pub fn fail<E: de::Error>(e: CheckError) -> E {
    FAILED.with(|f| *f.borrow_mut() = Some(e));
    E::custom("the check failed")
}

/// Reads the JSON document `r` with `seed`: its value, the check error it stopped with, or
/// the document's JSON error (trailing characters included).
pub fn read<'de, R: std::io::Read, S: DeserializeSeed<'de>>(r: R, seed: S) -> Result<S::Value, CheckError> {
    FAILED.with(|f| f.borrow_mut().take());
    let mut de = serde_json::Deserializer::from_reader(r);
    let v = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match (v, FAILED.with(|f| f.borrow_mut().take())) {
        (_, Some(e)) => Err(e),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(CheckError::Json(e)),
    }
}

/// A cell as read: absent from its row (None), or its value or what is wrong with it.
pub type Cell<T> = Option<Result<T, CheckError>>;

/// A row's integer cell of column `column` of table `what`: its value, or what is wrong.
pub fn col<T>(cell: Cell<T>, what: &str, column: &str) -> Result<T, CheckError> {
    have(cell, what, column)?
}

/// A row's cell of column `column` of table `what`, or the error that the row lacks it.
pub fn have<T>(cell: Option<T>, what: &str, column: &str) -> Result<T, CheckError> {
    cell.ok_or_else(|| CheckError::MissingColumn { what: what.to_string(), column: column.to_string() })
}

/// An integer from the text of a JSON string: C-style hex ("0x400000") or decimal.
pub fn int_text(s: &str) -> Result<u64, CheckError> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| CheckError::NotInteger(format!("{s:?}")))
}

/// Reads an integer; what is wrong with it is the value, not a stop, so that a row's cells
/// are judged in the order its checks ask (and a cell the checks skip is never judged).
pub struct Int;

impl<'de> DeserializeSeed<'de> for Int {
    type Value = Result<u64, CheckError>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Int {
    type Value = Result<u64, CheckError>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Ok(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(u64::try_from(v).map_err(|_| CheckError::NotUnsigned(v.to_string())))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Err(CheckError::NotUnsigned(number(v))))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(int_text(s))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Err(CheckError::NotInteger(v.to_string())))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(CheckError::NotInteger("null".into())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        let mut text = Preview::default();
        text.visit_seq(a)?;
        Ok(Err(CheckError::NotInteger(text.finish())))
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        let mut text = Preview::default();
        text.visit_map(a)?;
        Ok(Err(CheckError::NotInteger(text.finish())))
    }
}

/// A float as JSON writes it.
fn number(v: f64) -> String {
    serde_json::Number::from_f64(v).map_or_else(|| "null".into(), |n| n.to_string())
}

/// A value's compact JSON text for a message, its first [`Preview::MAX`] bytes: a hostile
/// document's array where an integer belongs is named without being held.
#[derive(Default)]
struct Preview {
    text: String,
    cut: bool,
}

impl Preview {
    const MAX: usize = 200;

    fn push(&mut self, s: &str) {
        let room = Self::MAX.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
        } else if !self.cut {
            let mut end = room;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&s[..end]);
            self.text.push('…');
            self.cut = true;
        }
    }

    fn finish(self) -> String {
        self.text
    }

    fn visit_seq<'de, A: SeqAccess<'de>>(&mut self, mut a: A) -> Result<(), A::Error> {
        self.push("[");
        let mut first = true;
        while a.next_element_seed(PreviewValue(self, if first { "" } else { "," }))?.is_some() {
            first = false;
        }
        self.push("]");
        Ok(())
    }

    fn visit_map<'de, A: MapAccess<'de>>(&mut self, mut a: A) -> Result<(), A::Error> {
        self.push("{");
        let mut first = true;
        while a.next_key_seed(PreviewValue(self, if first { "" } else { "," }))?.is_some() {
            a.next_value_seed(PreviewValue(self, ":"))?;
            first = false;
        }
        self.push("}");
        Ok(())
    }
}

/// One value of a [`Preview`], after the separator given.
struct PreviewValue<'a>(&'a mut Preview, &'static str);

impl<'de> DeserializeSeed<'de> for PreviewValue<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.0.push(self.1);
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PreviewValue<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.0.push(&v.to_string());
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.0.push(&v.to_string());
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.0.push(&number(v));
        Ok(())
    }
    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        self.0.push(&serde_json::Value::from(s).to_string());
        Ok(())
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.push(if v { "true" } else { "false" });
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push("null");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<(), A::Error> {
        self.0.visit_seq(a)
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<(), A::Error> {
        self.0.visit_map(a)
    }
}

/// What a JSON value is read into, by its kind; a kind it does not take is
/// [`other`](Take::other), once the value is read through (so that what is not JSON in it is
/// named first, as reading the whole document first would).
pub trait Take: Sized {
    type Value;
    /// A value of a kind not taken: a default, or the error.
    fn other<E: de::Error>(self) -> Result<Self::Value, E>;
    fn seq<'de, A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_element::<IgnoredAny>()?.is_some() {}
        self.other()
    }
    fn map<'de, A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        self.other()
    }
    fn str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        self.other()
    }
}

/// Reads a value with a [`Take`].
pub struct Json<T>(pub T);

impl<'de, T: Take> DeserializeSeed<'de> for Json<T> {
    type Value = T::Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<T::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Take> Visitor<'de> for Json<T> {
    type Value = T::Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<T::Value, E> {
        self.0.other()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<T::Value, E> {
        self.0.other()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<T::Value, E> {
        self.0.other()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<T::Value, E> {
        self.0.other()
    }
    fn visit_unit<E: de::Error>(self) -> Result<T::Value, E> {
        self.0.other()
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<T::Value, E> {
        self.0.str(s)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<T::Value, A::Error> {
        self.0.seq(a)
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<T::Value, A::Error> {
        self.0.map(a)
    }
}

/// A string, or `default` for a value of another kind (the checks read some strings so).
pub struct StrOr(pub &'static str);

impl Take for StrOr {
    type Value = String;
    fn other<E: de::Error>(self) -> Result<String, E> {
        Ok(self.0.to_string())
    }
    fn str<E: de::Error>(self, s: &str) -> Result<String, E> {
        Ok(s.to_string())
    }
}

/// An array of integers: `None` for a value of another kind when `strict` names none,
/// else the error that it is not an array; a bad element stops the reading.
pub struct Ints(pub Option<&'static str>);

impl Take for Ints {
    type Value = Option<Vec<u64>>;
    fn other<E: de::Error>(self) -> Result<Self::Value, E> {
        match self.0 {
            Some(what) => Err(fail(shape(what, "is not an array"))),
            None => Ok(None),
        }
    }
    fn seq<'de, A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::new();
        while let Some(n) = a.next_element_seed(Int)? {
            v.push(n.map_err(fail)?);
        }
        Ok(Some(v))
    }
}

/// An object's keys as positions among the names a reader knows (`None` for the others),
/// without holding them.
struct Key(pub &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Option<usize>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E>(self, s: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == s))
    }
}

/// The reader of an object's values, by key.
pub trait Fields {
    /// The keys read; the others' values are skipped.
    const KEYS: &'static [&'static str];
    /// Reads the value of key `k` (an index into KEYS) from `a`.
    fn field<'de, A: MapAccess<'de>>(&mut self, k: usize, a: &mut A) -> Result<(), A::Error>;
}

/// Reads an object with the [`Fields`] `T`, into `T`. A value of another kind leaves `T` as
/// it is: the checks look into an object with `get`, which finds nothing in anything else.
pub struct Object<T>(pub T);

impl<T: Fields> Take for Object<T> {
    type Value = T;
    fn other<E: de::Error>(self) -> Result<T, E> {
        Ok(self.0)
    }
    fn map<'de, A: MapAccess<'de>>(mut self, mut a: A) -> Result<T, A::Error> {
        while let Some(k) = a.next_key_seed(Key(T::KEYS))? {
            match k {
                Some(k) => self.0.field(k, &mut a)?,
                None => {
                    a.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(self.0)
    }
}

/// The reader of a table's rows: the columns it reads, a cell at a time, then each row whole.
pub trait Rows {
    /// The names of the columns read; the others are skipped.
    const COLUMNS: &'static [&'static str];
    /// Sees where the header puts each column of [`COLUMNS`](Rows::COLUMNS) (a name given
    /// twice counts at its last place, as a map of the header would have it); may refuse.
    fn header(&mut self, _at: &[Option<usize>]) -> Result<(), CheckError> {
        Ok(())
    }
    /// Reads the row's next element, the cell of column `c`; false if the row has ended.
    fn cell<'de, A: SeqAccess<'de>>(&mut self, c: usize, row: &mut A) -> Result<bool, A::Error>;
    /// The row has been read.
    fn end_row(&mut self) -> Result<(), CheckError>;
}

/// Reads the next element of `row` with `seed` into `slot`; false if the row has ended.
pub fn put<'de, A: SeqAccess<'de>, S: DeserializeSeed<'de>>(row: &mut A, seed: S, slot: &mut Option<S::Value>) -> Result<bool, A::Error> {
    Ok(row.next_element_seed(seed)?.map(|v| *slot = Some(v)).is_some())
}

/// An object's next value, read as the table `what` into a new `R`.
pub fn table_value<'de, A: MapAccess<'de>, R: Rows + Default>(a: &mut A, what: &str) -> Result<R, A::Error> {
    let mut rows = R::default();
    a.next_value_seed(Json(Table { what, rows: &mut rows }))?;
    Ok(rows)
}

/// A row's next cell, read as the table `what` into a new `R`; None if the row has ended.
pub fn table_cell<'de, A: SeqAccess<'de>, R: Rows + Default>(row: &mut A, what: &str) -> Result<Option<R>, A::Error> {
    let mut rows = R::default();
    Ok(row.next_element_seed(Json(Table { what, rows: &mut rows }))?.map(|()| rows))
}

/// A table named `what` (in messages), its rows read by `rows`.
pub struct Table<'a, R> {
    pub what: &'a str,
    pub rows: &'a mut R,
}

impl<R: Rows> Take for Table<'_, R> {
    type Value = ();
    fn other<E: de::Error>(self) -> Result<(), E> {
        Err(fail(shape(self.what, "is not a table")))
    }
    fn seq<'de, A: SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        let mut at = vec![None; R::COLUMNS.len()];
        let Some(len) = a.next_element_seed(Json(Header { what: self.what, names: R::COLUMNS, at: &mut at }))? else {
            return Err(fail(shape(self.what, "has no header")));
        };
        self.rows.header(&at).map_err(fail)?;
        // Per header place, the column read there.
        let mut read: Vec<(usize, usize)> = at.iter().enumerate().filter_map(|(c, i)| i.map(|i| (i, c))).collect();
        read.sort_unstable();
        while a.next_element_seed(Json(Row { what: self.what, len, read: &read, rows: &mut *self.rows }))?.is_some() {}
        Ok(())
    }
}

/// A table's header: its length; `at` gets the place of each name in `names`.
struct Header<'a> {
    what: &'a str,
    names: &'static [&'static str],
    at: &'a mut [Option<usize>],
}

impl Take for Header<'_> {
    type Value = usize;
    fn other<E: de::Error>(self) -> Result<usize, E> {
        Err(fail(shape(self.what, "has a header that is not a row of strings")))
    }
    fn seq<'de, A: SeqAccess<'de>>(self, mut a: A) -> Result<usize, A::Error> {
        let mut len = 0;
        while let Some(name) = a.next_element_seed(Json(HeaderName { what: self.what, names: self.names }))? {
            if let Some(c) = name {
                self.at[c] = Some(len);
            }
            len += 1;
        }
        Ok(len)
    }
}

/// One name of a header: its position among the names read.
struct HeaderName<'a> {
    what: &'a str,
    names: &'static [&'static str],
}

impl Take for HeaderName<'_> {
    type Value = Option<usize>;
    fn other<E: de::Error>(self) -> Result<Option<usize>, E> {
        Err(fail(shape(self.what, "has a header that is not a row of strings")))
    }
    fn str<E: de::Error>(self, s: &str) -> Result<Option<usize>, E> {
        Ok(self.names.iter().position(|n| *n == s))
    }
}

/// One row of a table: `read` lists (header place, column) of the columns read, in place order.
struct Row<'a, R> {
    what: &'a str,
    len: usize,
    read: &'a [(usize, usize)],
    rows: &'a mut R,
}

impl<R: Rows> Take for Row<'_, R> {
    type Value = ();
    fn other<E: de::Error>(self) -> Result<(), E> {
        Err(fail(shape(self.what, "has a row that is not an array")))
    }
    fn seq<'de, A: SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        let mut place = 0;
        let mut next = self.read.iter().peekable();
        loop {
            let more = match next.peek() {
                Some(&&(at, c)) if at == place => {
                    next.next();
                    self.rows.cell(c, &mut a)?
                }
                _ if place < self.len => a.next_element::<IgnoredAny>()?.is_some(),
                _ => {
                    if a.next_element::<IgnoredAny>()?.is_some() {
                        return Err(fail(shape(self.what, "has a row longer than its header")));
                    }
                    false
                }
            };
            if !more {
                break;
            }
            place += 1;
        }
        self.rows.end_row().map_err(fail)
    }
}
