//! JSON as rt-app reads it, but strict: objects keep their keys in file order (events run in
//! that order), and a key given twice in one object is an error (json-c would silently keep
//! the last value at the first place).

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};

/// The key serde_json's `arbitrary_precision` feature hands a number under.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// A JSON value with its objects' keys in file order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// What kind of value it is, for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

/// Compact JSON text, objects in their order (what a reader of the same grammar reads back).
impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |f: &mut fmt::Formatter<'_>, s: &str| {
            f.write_str(&serde_json::to_string(s).map_err(|_| fmt::Error)?)
        };
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Number(n) => write!(f, "{n}"),
            Json::String(s) => text(f, s),
            Json::Array(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Json::Object(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    text(f, k)?;
                    write!(f, ":{v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// A parse error with where it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) message: String,
}

/// Parses `text` (one JSON value, nothing after it).
pub(crate) fn parse(text: &str) -> Result<Json, ParseError> {
    serde_json::from_str(text).map_err(|e| {
        // serde_json's message ends with " at line L column C"; the position is kept apart.
        let msg = e.to_string();
        let message = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        ParseError { line: e.line(), column: e.column(), message }
    })
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries: Vec<(String, Json)> = Vec::new();
        // The keys so far, for the duplicate check (a scan of `entries` made a file of one
        // huge object take quadratic time before its refusal).
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            // With serde_json's `arbitrary_precision` (which another crate of a build may
            // turn on), a number arrives as a one-entry map holding its text.
            if entries.is_empty() && key == NUMBER_TOKEN {
                let text: String = map.next_value()?;
                return text
                    .parse()
                    .map(Json::Number)
                    .map_err(|_| A::Error::custom(format!("not a number: {text}")));
            }
            if !seen.insert(key.clone()) {
                return Err(A::Error::custom(format!("the key {key:?} is given twice in one object")));
            }
            let value = map.next_value()?;
            entries.push((key, value));
        }
        Ok(Json::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_reads_back_the_same() {
        let src = r#"{"b": [1, -2.5, "q\"x"], "a": {"z": null, "y": true}}"#;
        let v = parse(src).unwrap();
        assert_eq!(v.to_string(), r#"{"b":[1,-2.5,"q\"x"],"a":{"z":null,"y":true}}"#);
        assert_eq!(parse(&v.to_string()).unwrap(), v);
    }

    #[test]
    fn keys_keep_their_file_order() {
        let Json::Object(e) = parse(r#"{"run1": 1, "sleep0": 2, "run0": 3}"#).unwrap() else { panic!() };
        let keys: Vec<&str> = e.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["run1", "sleep0", "run0"]);
    }

    #[test]
    fn errors_say_where() {
        let e = parse("{\n  \"a\": 1,\n  \"a\": 2\n}").unwrap_err();
        assert_eq!((e.line, e.message.contains("given twice")), (3, true), "{e:?}");
        let e = parse("{\n \"a\": [1, 2,\n}").unwrap_err();
        assert_eq!(e.line, 3, "{e:?}");
        assert!(parse("{} {}").is_err(), "trailing content");
    }
}
