//! JSON as rt-app reads it: objects keep their keys in file order (events run in that
//! order); comments (`/* … */`, `// …`), a comma before a closing bracket and strings in
//! single quotes (`'abc'`, with JSON's escapes) are taken, as json-c (rt-app's reader) takes
//! them and rt-app's own examples use comments and commas. Stricter than
//! json-c in one way: a key given twice in one object is an error (json-c would silently keep
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

/// Parses `text` (one JSON value, nothing after it; comments and trailing commas allowed).
pub(crate) fn parse(text: &str) -> Result<Json, ParseError> {
    let text = plain(text)?;
    serde_json::from_str(&text).map_err(|e| {
        // serde_json's message ends with " at line L column C"; the position is kept apart.
        let msg = e.to_string();
        let message = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        // (serde_json's column is 0 before a line's first character; ours count from 1.)
        ParseError { line: e.line(), column: e.column().max(1), message }
    })
}

/// `text` as plain JSON: its comments, and each comma that only a closing bracket follows,
/// turned into spaces (so every line and column stays where it was), and its single-quoted
/// strings into double-quoted ones (a `"` in one is escaped: the only change of length). A
/// string that reads as serde_json's private number key is refused: that key must come from
/// the reader alone.
fn plain(text: &str) -> Result<std::borrow::Cow<'_, str>, ParseError> {
    let b = text.as_bytes();
    let at = |i: usize, message: &str| {
        let before = &b[..i];
        let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
        let column = before.iter().rev().take_while(|&&c| c != b'\n').count() + 1;
        ParseError { line, column, message: message.to_string() }
    };
    let mut out: Option<Vec<u8>> = None;
    let blank = |out: &mut Option<Vec<u8>>, from: usize, to: usize| {
        let o = out.get_or_insert_with(|| b.to_vec());
        for c in &mut o[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    // Past the comment starting at `i` (which holds '/'), or `None` if none starts there.
    let comment_end = |i: usize| -> Result<Option<usize>, ParseError> {
        match b.get(i + 1) {
            Some(b'/') => Ok(Some(b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n))),
            Some(b'*') => match text[i + 2..].find("*/") {
                Some(n) => Ok(Some(i + 2 + n + 2)),
                None => Err(at(i, "a comment that never ends")),
            },
            _ => Ok(None),
        }
    };
    // Each single-quoted string, where it stands, as a double-quoted one.
    let mut requoted: Vec<(usize, usize, String)> = Vec::new();
    // The last byte of JSON before `i` (not a blank or a comment's).
    let mut prev = b' ';
    let mut i = 0;
    while i < b.len() {
        let (c, before) = (b[i], prev);
        if !c.is_ascii_whitespace() && c != b'/' {
            prev = c;
        }
        match c {
            b'"' | b'\'' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != c {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                // (An unclosed string runs to the end, which the reader then refuses.)
                let (closed, end) = (i < b.len(), (i + 1).min(b.len()));
                if c == b'\'' && !closed {
                    return Err(at(start, "a string that never ends"));
                }
                let raw = match c {
                    b'"' => &text[start..end],
                    _ => {
                        requoted.push((start, end, requote(&text[start..end])));
                        requoted.last().map_or("", |r| r.2.as_str())
                    }
                };
                let reserved = closed
                    && if raw.contains('\\') {
                        serde_json::from_str::<String>(raw).is_ok_and(|s| s == NUMBER_TOKEN)
                    } else {
                        raw.as_bytes()[1..raw.len() - 1] == *NUMBER_TOKEN.as_bytes()
                    };
                if reserved {
                    return Err(at(start, "a string reserved by the JSON reader"));
                }
                i = end;
            }
            b'/' => match comment_end(i)? {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            },
            // (A comma right after an opening bracket or another comma is an error left to
            // the reader, as json-c refuses it.)
            b',' if !matches!(before, b'{' | b'[' | b',') => {
                // What follows, past blanks and comments: a closing bracket makes it trailing.
                let mut j = i + 1;
                loop {
                    match b.get(j) {
                        Some(c) if c.is_ascii_whitespace() => j += 1,
                        Some(b'/') => match comment_end(j)? {
                            Some(end) => j = end,
                            None => break,
                        },
                        _ => break,
                    }
                }
                if matches!(b.get(j), Some(b'}' | b']')) {
                    blank(&mut out, i, i + 1);
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    let plain = match out {
        // (Only ASCII bytes of comments and commas were changed: still UTF-8.)
        Some(o) => std::borrow::Cow::Owned(String::from_utf8(o).map_err(|_| at(0, "not UTF-8 text"))?),
        None => std::borrow::Cow::Borrowed(text),
    };
    if requoted.is_empty() {
        return Ok(plain);
    }
    // (Blanking kept every position: the strings stand where the scan found them.)
    let mut spliced = String::with_capacity(plain.len() + 2 * requoted.len());
    let mut copied = 0;
    for (start, end, s) in &requoted {
        spliced.push_str(&plain[copied..*start]);
        spliced.push_str(s);
        copied = *end;
    }
    spliced.push_str(&plain[copied..]);
    Ok(std::borrow::Cow::Owned(spliced))
}

/// A closed single-quoted string (quotes included) as a double-quoted one: the same
/// characters and escapes, a bare `"` escaped.
fn requote(raw: &str) -> String {
    let inner = &raw[1..raw.len() - 1];
    let mut s = String::with_capacity(raw.len() + 2);
    s.push('"');
    let mut escaped = false;
    for ch in inner.chars() {
        if ch == '"' && !escaped {
            s.push('\\');
        }
        escaped = ch == '\\' && !escaped;
        s.push(ch);
    }
    s.push('"');
    s
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
            // With serde_json's `arbitrary_precision` (which this crate turns on, so that every
            // build reads a number alike), a number arrives as a one-entry map holding its text.
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

    /// json-c's leniencies rt-app's own examples use: comments and trailing commas, which keep
    /// every later line and column in place.
    #[test]
    fn comments_and_trailing_commas_are_taken() {
        let src =
            "{\n /* a, \"comment\" */ \"a\": [1, 2, /* x */ ], // end\n \"b\": {\"c\": \"/*no*/\",},\n}";
        assert_eq!(parse(src).unwrap().to_string(), r#"{"a":[1,2],"b":{"c":"/*no*/"}}"#);
        let e = parse("{\n  /* open").unwrap_err();
        assert_eq!((e.line, e.column, e.message.as_str()), (2, 3, "a comment that never ends"));
        let e = parse("{\"a\": 1,\n \"a\": 2,}").unwrap_err();
        assert_eq!(e.line, 2, "{e:?}");
        assert!(parse("[1,,]").is_err(), "one trailing comma, not two");
        assert!(parse("{,}").is_err() && parse("[ /* */ ,]").is_err(), "a comma after a value only");
        // A file cut inside a string, after a character of several bytes: refused, no panic.
        for cut in ["{\"a\": \"é", "\"é", "\"\\", "[\"x\\\""] {
            assert!(parse(cut).is_err(), "{cut:?}");
        }
    }

    /// json-c takes strings in single quotes, keys and values alike, with JSON's escapes; a
    /// `"` inside one is a character, and `'` inside a double-quoted one too.
    #[test]
    fn single_quoted_strings_are_taken() {
        let src = "{'a': 'x\"y', \"b\": ['it', 's', '\\n', \"'\"], 'c': '// not a comment' /* 'no' */}";
        assert_eq!(
            parse(src).unwrap().to_string(),
            r#"{"a":"x\"y","b":["it","s","\n","'"],"c":"// not a comment"}"#
        );
        let e = parse("{\n 'a': 'open}").unwrap_err();
        assert_eq!((e.line, e.column, e.message.as_str()), (2, 7, "a string that never ends"));
        assert!(parse("['\\'']").is_err(), "no \\' escape, as in json-c");
        let e = parse("{'$serde_json::private::Number': 1}").unwrap_err();
        assert_eq!(e.message, "a string reserved by the JSON reader");
    }

    /// The key serde_json hands a number under (with `arbitrary_precision`) is the reader's
    /// alone: a file that spells it, plainly or escaped, is refused rather than read as a number.
    #[test]
    fn the_readers_number_key_is_refused_in_a_file() {
        for src in [
            r#"{"run": {"$serde_json::private::Number": "500"}}"#,
            r#"{"run": {"\u0024serde_json::private::Number": "500"}}"#,
        ] {
            let e = parse(src).unwrap_err();
            assert_eq!(
                (e.line, e.column, e.message.as_str()),
                (1, 10, "a string reserved by the JSON reader"),
                "{src}"
            );
        }
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
