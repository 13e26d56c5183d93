//! Go's `encoding/json` output from serde: `json.Marshal` writes what
//! serde_json writes for the same shape (maps with sorted string keys,
//! strings, integers), except that it also escapes the HTML-sensitive
//! characters and the two line separators JavaScript does not allow in
//! strings. Used where rkube writes files upstream's kubelet reads and
//! checksums (its checkpoints).

use serde::Serialize;

/// Go's escaping on top of serde_json's output: `<`, `>`, `&`, U+2028 and
/// U+2029 as `\u003c`, …. They can appear only inside strings, so
/// replacing them everywhere is exact.
pub fn escape(json: String) -> String {
    if !json.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for ch in json.chars() {
        match ch {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Go's `json.Marshal` of `v` (a shape of maps with string keys, strings,
/// integers and byte strings: serializing it cannot fail).
pub fn marshal<T: Serialize>(v: &T) -> String {
    escape(serde_json::to_string(v).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_as_go() {
        let v = serde_json::json!({"b": "<a&b>\u{2028}", "a": 1});
        assert_eq!(
            super::marshal(&v),
            r#"{"a":1,"b":"\u003ca\u0026b\u003e\u2028"}"#
        );
        assert_eq!(super::escape("plain".into()), "plain");
    }
}
