//! Plugin status codes and statuses, as upstream's `fwk.Status`.

use std::borrow::Cow;
use std::fmt;

use smallvec::SmallVec;

/// A status's reasons: almost always one, kept inline so a rejected node
/// costs no allocation.
pub type Reasons = SmallVec<[Cow<'static, str>; 1]>;

/// Result code of a plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// Passed.
    Success,
    /// Internal error.
    Error,
    /// Rejected, may be resolved by preemption.
    Unschedulable,
    /// Rejected, preemption cannot help.
    UnschedulableAndUnresolvable,
    /// Permit: wait.
    Wait,
    /// The plugin has nothing to do for this pod.
    Skip,
    /// Waiting on something external.
    Pending,
}

impl Code {
    /// Upstream's string for the code.
    pub fn as_str(&self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
            Code::Pending => "Pending",
        }
    }
}

/// A plugin's verdict with reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Code.
    pub code: Code,
    /// Human-readable reasons (each becomes one FailedScheduling entry).
    /// Mostly a plugin's fixed strings, borrowed: a filter pass makes one
    /// status per rejected node.
    pub reasons: Reasons,
    /// The plugin that produced it (set by the framework).
    pub plugin: &'static str,
}

impl Status {
    /// Success.
    pub fn success() -> Self {
        Status {
            code: Code::Success,
            reasons: Reasons::new(),
            plugin: "",
        }
    }

    /// A status with one reason.
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Self {
        Status {
            code,
            reasons: smallvec::smallvec![reason.into()],
            plugin: "",
        }
    }

    /// A status with several reasons.
    pub fn with_reasons(code: Code, reasons: Vec<String>) -> Self {
        Status {
            code,
            reasons: reasons.into_iter().map(Cow::Owned).collect(),
            plugin: "",
        }
    }

    /// The reasons as owned strings.
    pub fn reason_strings(&self) -> Vec<String> {
        self.reasons.iter().map(|r| r.to_string()).collect()
    }

    /// Skip.
    pub fn skip() -> Self {
        Status {
            code: Code::Skip,
            reasons: Reasons::new(),
            plugin: "",
        }
    }

    /// An internal error.
    pub fn error(msg: impl Into<Cow<'static, str>>) -> Self {
        Status::new(Code::Error, msg)
    }

    /// Success or Skip.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Unschedulable or UnschedulableAndUnresolvable.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }

    /// Reasons joined with ", " (upstream's `Message()`).
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    /// Sets the plugin name.
    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message())
    }
}
