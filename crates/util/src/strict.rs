//! Decoding YAML or JSON into a `serde_json::Value` while noticing duplicate
//! keys, which a plain `Value` drops silently ("last wins"). kube-scheduler's
//! strict decoder refuses a configuration with a duplicate field; the API
//! server's YAML path refuses a manifest with one. rkube's callers decide:
//! an error for configurations, a warning for cluster files.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A decoded document and the paths (`spec.containers[0].name`) of keys that
/// appeared more than once in one mapping; the value holds the last one.
#[derive(Debug, Clone, PartialEq)]
pub struct StrictValue {
    /// The document, as `serde_json::Value` would decode it.
    pub value: Value,
    /// Paths of duplicate keys, in the order met.
    pub duplicates: Vec<String>,
}

impl<'de> serde::Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let duplicates = RefCell::new(Vec::new());
        let value = Collect {
            duplicates: &duplicates,
            path: String::new(),
        }
        .deserialize(d)?;
        Ok(StrictValue {
            value,
            duplicates: duplicates.into_inner(),
        })
    }
}

/// Most duplicate paths remembered per document (a hostile file could hold
/// millions; the first ones are enough to act on).
const MAX_REPORTED: usize = 20;

struct Collect<'a> {
    duplicates: &'a RefCell<Vec<String>>,
    path: String,
}

impl Collect<'_> {
    fn child(&self, step: &str) -> String {
        if self.path.is_empty() {
            step.to_string()
        } else if step.starts_with('[') {
            format!("{}{step}", self.path)
        } else {
            format!("{}.{step}", self.path)
        }
    }
}

impl<'de> DeserializeSeed<'de> for Collect<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Collect<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML or JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    // Integers past 64 bits: exactly what a plain `serde_json::Value` makes of them.
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        serde::Deserialize::deserialize(de::value::I128Deserializer::<E>::new(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        serde::Deserialize::deserialize(de::value::U128Deserializer::<E>::new(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let seed = Collect {
                duplicates: self.duplicates,
                path: self.child(&format!("[{}]", out.len())),
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = self.child(&key);
            let v = map.next_value_seed(Collect {
                duplicates: self.duplicates,
                path: path.clone(),
            })?;
            if out.insert(key, v).is_some() {
                let mut d = self.duplicates.borrow_mut();
                if d.len() < MAX_REPORTED {
                    d.push(path);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// Decodes one YAML document (or JSON, which is YAML) strictly.
pub fn from_yaml_str(text: &str) -> Result<StrictValue, serde_yaml_ng::Error> {
    serde_yaml_ng::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_duplicates_at_any_depth_in_yaml() {
        let v = from_yaml_str("a: 1\nb:\n  c: [ {d: 1, d: 2} ]\na: 3\n").unwrap();
        assert_eq!(v.duplicates, ["b.c[0].d", "a"]);
        assert_eq!(v.value["a"], 3);
        assert_eq!(v.value["b"]["c"][0]["d"], 2);
    }

    #[test]
    fn finds_duplicates_in_json_streams() {
        let mut it = serde_json::Deserializer::from_str(r#"{"x":1,"x":2} {"y":1}"#)
            .into_iter::<StrictValue>();
        assert_eq!(it.next().unwrap().unwrap().duplicates, ["x"]);
        assert!(it.next().unwrap().unwrap().duplicates.is_empty());
    }

    #[test]
    fn same_value_as_plain_decoding() {
        let text = "k: v\nn: 1.5\nt: true\nz: ~\nl: [1, -2, x]\nbig: 99999999999999999999\nneg: -99999999999999999999\n";
        let plain = serde_yaml_ng::from_str::<Value>(text).map_err(|e| e.to_string());
        let strict = from_yaml_str(text).map_err(|e| e.to_string());
        assert_eq!(strict.clone().map(|s| s.value), plain);
        if let Ok(s) = strict {
            assert!(s.duplicates.is_empty());
        }
    }
}
