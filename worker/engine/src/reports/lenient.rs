//! Typed, borrowing JSON readers that accept any shape, for the large parts of a report.
//!
//! Reading a whole report into [`serde_json::Value`] allocates a string and a map entry for
//! every key of every image and frame: for a CrashProbe Sentry event (125 KB, 327 images) that
//! was ~0.6 ms of the worker's ~2 ms per job. These readers deserialize straight into the few
//! fields a reader needs, borrow strings from the input where they hold no escapes, and skip
//! everything else without building it. They never fail on a field of the wrong type: such a
//! field reads as absent ([`Scalar::Other`]), which is what the `Value`-based readers did.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::fields::parse_addr_str;

/// A JSON scalar as a reader wants it: a string, a non-negative integer, or anything else
/// (absent, null, a negative or fractional number, a boolean, an array, an object).
#[derive(Debug, Default, Clone, PartialEq)]
pub enum Scalar<'a> {
    /// A string, borrowed from the input unless it held escapes.
    Str(Cow<'a, str>),
    /// An integer in `0..=u64::MAX`.
    U64(u64),
    /// A boolean.
    Bool(bool),
    /// Absent, or any other JSON value.
    #[default]
    Other,
}

impl<'a> Scalar<'a> {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The string, if this is one, moved out (no copy when unescaping already made it owned).
    pub fn into_str(self) -> Option<Cow<'a, str>> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one (the same as [`serde_json::Value::as_u64`]).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Scalar::U64(n) => Some(*n),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Scalar::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// An address in bytes: an integer, a `"0x…"` hex string or a decimal string (the same as
    /// [`super::fields::parse_addr`]).
    pub fn addr(&self) -> Option<u64> {
        match self {
            Scalar::U64(n) => Some(*n),
            Scalar::Str(s) => parse_addr_str(s),
            _ => None,
        }
    }

    /// Whether the value was a string, a non-negative integer or a boolean (absent, `null`, other
    /// numbers, arrays and objects are not).
    pub fn is_present(&self) -> bool {
        !matches!(self, Scalar::Other)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for ScalarVisitor<'a> {
            type Value = Scalar<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Scalar::U64(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(u64::try_from(v).map_or(Scalar::Other, Scalar::U64))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Other)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Other)
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Other)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        deserializer.deserialize_any(ScalarVisitor(PhantomData))
    }
}

/// An address in bytes, read as [`Scalar::addr`] reads one (an integer, a `"0x…"` hex or a
/// decimal string), `None` for any other value; 16 bytes where a [`Scalar`] takes 32.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Addr(pub Option<u64>);

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Scalar::deserialize(deserializer).map(|value| Addr(value.addr()))
    }
}

/// A JSON value kept as its raw text, read ([`Raw::scalar`]) only where it is needed: the
/// parser only scans it (a path's `\/` escapes are not undone, nothing is allocated).
#[derive(Debug, Default, Clone, Copy)]
pub struct Raw<'a>(Option<&'a serde_json::value::RawValue>);

impl<'a> Raw<'a> {
    /// The value as a [`Scalar`] (absent reads as [`Scalar::Other`]).
    pub fn scalar(self) -> Scalar<'a> {
        self.0
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&'a serde_json::value::RawValue>::deserialize(deserializer).map(|raw| Raw(Some(raw)))
    }
}

/// A field that should hold an object of type `T`: `Absent` when missing or `null`, `Object`
/// when it is an object (read as `T`), `Array` for an array of `T`s, `Wrong` for any other
/// value.
///
/// `T` is read with its own `Deserialize`: make its fields lenient ([`Scalar`], [`Field`]) so
/// that a field of the wrong type inside cannot fail the whole report.
#[derive(Debug, Default)]
pub enum Field<T> {
    /// Missing or `null`.
    #[default]
    Absent,
    /// An object.
    Object(T),
    /// An array; elements that are not objects read as `None`.
    Array(Vec<Option<T>>),
    /// A string, number or boolean.
    Wrong,
}

impl<T> Field<T> {
    /// The object, if this is one.
    pub fn object(&self) -> Option<&T> {
        match self {
            Field::Object(t) => Some(t),
            _ => None,
        }
    }

    /// The object, if this is one, moved out.
    pub fn into_object(self) -> Option<T> {
        match self {
            Field::Object(t) => Some(t),
            _ => None,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FieldVisitor(PhantomData))
    }
}

struct FieldVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for FieldVisitor<T> {
    type Value = Field<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Field::Object)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(element) = seq.next_element::<Field<T>>()? {
            list.push(match element {
                Field::Object(t) => Some(t),
                _ => None,
            });
        }
        Ok(Field::Array(list))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Field::Absent)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Field::Absent)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Field::Wrong)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Field::Wrong)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Field::Wrong)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Field::Wrong)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Field::Wrong)
    }
}

/// Whether a key is there, whatever its value (`null` included); its value is skipped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Present(pub bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Present(true))
    }
}

/// A list field written either as `{"values": [...]}` or as a bare array (Sentry's
/// `exception` and `threads`).
#[derive(Debug, Default)]
pub enum Listed<T> {
    /// Missing or `null`.
    #[default]
    Absent,
    /// The elements (an object without `values` is an empty list); elements that are not
    /// objects read as `None`.
    List(Vec<Option<T>>),
    /// An object whose `values` is not an array.
    ValuesWrong,
    /// Neither an object nor an array.
    Wrong,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Listed<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ListedVisitor(PhantomData))
    }
}

struct ListedVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ListedVisitor<T> {
    type Value = Listed<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        match FieldVisitor::<T>(PhantomData).visit_seq(seq)? {
            Field::Array(list) => Ok(Listed::List(list)),
            _ => Ok(Listed::Wrong),
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut listed = Listed::List(Vec::new());
        while let Some(key) = map.next_key::<Scalar>()? {
            if key.as_str() == Some("values") {
                listed = match map.next_value::<Field<T>>()? {
                    Field::Absent => Listed::List(Vec::new()),
                    Field::Array(list) => Listed::List(list),
                    Field::Object(_) | Field::Wrong => Listed::ValuesWrong,
                };
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(listed)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Listed::Absent)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Listed::Absent)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Listed::Wrong)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Listed::Wrong)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Listed::Wrong)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Listed::Wrong)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Listed::Wrong)
    }
}

/// The top level of a JSON report: every key with the raw text of its value, nothing parsed.
///
/// Scanning is cheap (no allocation per value); a reader then parses only the fields it uses,
/// from their raw text. A document whose top level is not an object keeps its JSON type.
pub enum TopLevel<'a> {
    /// An object: `(key, raw value)` in document order.
    Object(Vec<(Scalar<'a>, &'a serde_json::value::RawValue)>),
    /// Anything else: its JSON type (`"an array"`, …).
    NotObject(&'static str),
}

impl<'a> TopLevel<'a> {
    /// The raw text of `key`'s value (the last one, as `serde_json::Value` keeps duplicates).
    pub fn raw(&self, key: &str) -> Option<&'a str> {
        match self {
            TopLevel::Object(entries) => entries
                .iter()
                .rev()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v.get()),
            TopLevel::NotObject(_) => None,
        }
    }

    /// Whether the object has `key`.
    pub fn has(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    /// The keys, in document order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        let entries = match self {
            TopLevel::Object(entries) => entries.as_slice(),
            TopLevel::NotObject(_) => &[],
        };
        entries.iter().filter_map(|(k, _)| k.as_str())
    }
}

impl<'de> Deserialize<'de> for TopLevel<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = TopLevel<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Scalar>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(TopLevel::Object(entries))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TopLevel::NotObject("an array"))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(TopLevel::NotObject("null"))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(TopLevel::NotObject("a boolean"))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(TopLevel::NotObject("a number"))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(TopLevel::NotObject("a number"))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(TopLevel::NotObject("a number"))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(TopLevel::NotObject("a string"))
            }
        }
        deserializer.deserialize_any(TopVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug, Default)]
    struct Image<'a> {
        #[serde(default, borrow)]
        image_addr: Scalar<'a>,
        #[serde(default, borrow)]
        name: Scalar<'a>,
    }

    #[test]
    fn scalars_read_like_values() {
        let s: Vec<Scalar> =
            serde_json::from_str(r#"["0x10", 16, -1, 1.5, true, null, [1], {"a": 1}, "a\"b"]"#)
                .unwrap();
        assert_eq!(s[0].addr(), Some(16));
        assert_eq!(s[1].addr(), Some(16));
        assert_eq!(s[1].as_u64(), Some(16));
        assert_eq!(s[2], Scalar::Other);
        assert_eq!(s[3], Scalar::Other);
        assert_eq!(s[4].as_bool(), Some(true));
        assert!(!s[5].is_present() && !s[6].is_present() && !s[7].is_present());
        assert_eq!(s[8].as_str(), Some("a\"b"));
    }

    #[test]
    fn fields_of_any_shape_never_fail() {
        let f: Vec<Field<Image>> = serde_json::from_str(
            r#"[{"image_addr": "0x1000", "name": "/a/App", "other": {"x": [1, 2]}},
                {"image_addr": [], "name": 7}, null, "x", 3,
                [{"image_addr": 1}, 2]]"#,
        )
        .unwrap();
        let first = f[0].object().unwrap();
        assert_eq!(first.image_addr.addr(), Some(0x1000));
        assert_eq!(first.name.as_str(), Some("/a/App"));
        let second = f[1].object().unwrap();
        assert_eq!(
            (second.image_addr.addr(), second.name.as_str()),
            (None, None)
        );
        assert!(matches!(f[2], Field::Absent));
        assert!(matches!(f[3], Field::Wrong));
        assert!(matches!(f[4], Field::Wrong));
        match &f[5] {
            Field::Array(list) => {
                assert_eq!(list.len(), 2);
                assert_eq!(list[0].as_ref().unwrap().image_addr.addr(), Some(1));
                assert!(list[1].is_none());
            }
            other => panic!("{other:?}"),
        }
    }
}
