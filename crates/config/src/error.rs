//! Field errors in upstream's `field.ErrorList` style:
//! `profiles[0].percentageOfNodesToScore: Invalid value: 150: not in valid range [0-100]`.

use std::fmt;

/// Bounds an error message: a hostile input (a 10 MB label value, quantity or
/// plugin name) must not turn into a 10 MB line on stderr. Keeps the head and
/// the tail (where serde puts "expected ...").
pub fn clip_message(s: String) -> String {
    const MAX: usize = 1024;
    if s.len() <= MAX {
        return s;
    }
    let mut head = 600;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - 300;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{} ...[{} bytes elided]... {}",
        &s[..head],
        tail - head,
        &s[tail..]
    )
}

/// One field error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Field path.
    pub field: String,
    /// Detail, already including the error type (`Invalid value: ...`).
    pub detail: String,
}

/// A non-empty list of field errors.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    /// A single error with a free-form detail.
    pub fn single(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldErrors(vec![FieldError {
            field: clip_message(field.into()),
            detail: clip_message(detail.into()),
        }])
    }

    /// Adds `field: Invalid value: <value>: <msg>`.
    pub fn invalid(&mut self, field: impl Into<String>, value: impl fmt::Display, msg: &str) {
        self.0.push(FieldError {
            field: field.into(),
            detail: format!("Invalid value: {value}: {msg}"),
        });
    }

    /// Adds `field: Required value[: msg]`.
    pub fn required(&mut self, field: impl Into<String>, msg: &str) {
        let detail = if msg.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {msg}")
        };
        self.0.push(FieldError {
            field: field.into(),
            detail,
        });
    }

    /// Adds `field: Duplicate value: <value>`.
    pub fn duplicate(&mut self, field: impl Into<String>, value: impl fmt::Display) {
        self.0.push(FieldError {
            field: field.into(),
            detail: format!("Duplicate value: {value}"),
        });
    }

    /// Adds `field: Unsupported value: "v": supported values: "a", "b"`.
    pub fn not_supported(&mut self, field: impl Into<String>, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        self.0.push(FieldError {
            field: field.into(),
            detail: format!(
                "Unsupported value: {value:?}: supported values: {}",
                list.join(", ")
            ),
        });
    }

    /// Adds `field: Forbidden: msg`.
    pub fn forbidden(&mut self, field: impl Into<String>, msg: &str) {
        self.0.push(FieldError {
            field: field.into(),
            detail: format!("Forbidden: {msg}"),
        });
    }

    /// Appends another list.
    pub fn extend(&mut self, other: FieldErrors) {
        self.0.extend(other.0);
    }

    /// True when there is no error.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok(())` when empty.
    pub fn into_result(self) -> Result<(), FieldErrors> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|e| format!("{}: {}", e.field, e.detail))
            .collect();
        if parts.len() == 1 {
            write!(f, "{}", parts[0])
        } else {
            write!(f, "[{}]", parts.join(", "))
        }
    }
}

impl std::error::Error for FieldErrors {}
