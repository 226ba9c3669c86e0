//! The YAML config file: camelCase keys in the shape of [`Settings`], unknown keys an error.
//! A scalar is kept as written ([`Text`]) and parsed by validation, which names the field.

use std::path::Path;

use serde::{Deserialize, Deserializer};

use super::{Env, Error, Settings};

/// A setting's value as given, before validation: a flag or env value, or a YAML scalar
/// (string, number or boolean) as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text(pub String);

impl Text {
    /// The value, or `None` when empty: an empty value anywhere means "the default".
    pub fn given(v: &Option<Text>) -> Option<&str> {
        v.as_ref().map(|t| t.0.as_str()).filter(|s| !s.is_empty())
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text(s)
    }
}

/// A YAML scalar as written; every kind becomes text.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Text(match Scalar::deserialize(d)? {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Str(s) => s,
        }))
    }
}

/// Read and parse the config file at `path` (the path as given, for messages).
pub fn read(path: &str, env: &dyn Env) -> Result<Settings, Error> {
    let text = env
        .read(Path::new(path))
        .map_err(|source| Error::Unreadable {
            path: path.to_string(),
            source,
        })?;
    parse(path, &text)
}

/// Parse a config file's text; an empty file sets nothing.
pub fn parse(path: &str, text: &str) -> Result<Settings, Error> {
    if text.trim().is_empty() {
        return Ok(Settings::default());
    }
    serde_saphyr::from_str(text).map_err(|e| Error::Syntax {
        path: path.to_string(),
        // The parser's message spans lines (a caret under the spot); the error is one line.
        message: e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    })
}
