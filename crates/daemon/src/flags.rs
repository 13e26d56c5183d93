//! The command-line flags of both daemons, lexed as upstream's (pflag):
//! `--name value`, `--name=value`, a single dash accepted, booleans true
//! when given without `=value`, nothing but flags. Each daemon matches the
//! names it knows; this module only splits the arguments and reports bad
//! input in pflag's words (exit code 2).

use std::iter::Peekable;

/// Why the flags were rejected (exit code 2), or `--help`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// `--help` was given.
    Help,
    /// A bad flag or flag value.
    Invalid(String),
}

/// One flag as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// Its name, without dashes.
    pub name: String,
    /// The value after `=`, if any.
    pub inline: Option<String>,
}

/// The flags of a command line, one at a time.
pub struct Flags<I: Iterator<Item = String>> {
    args: Peekable<I>,
    who: &'static str,
}

impl<I: Iterator<Item = String>> Flags<I> {
    /// The flags in `args`; `who` names the daemon in errors ("the
    /// kubelet").
    pub fn new(args: impl IntoIterator<IntoIter = I>, who: &'static str) -> Flags<I> {
        Flags {
            args: args.into_iter().peekable(),
            who,
        }
    }

    /// The next flag; an argument that is not a flag is an error.
    pub fn next_flag(&mut self) -> Option<Result<Flag, ParseError>> {
        let arg = self.args.next()?;
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Some(Err(ParseError::Invalid(format!(
                "unexpected argument {arg:?}: {} takes flags only",
                self.who
            ))));
        };
        Some(Ok(match flag.split_once('=') {
            Some((n, v)) => Flag {
                name: n.to_string(),
                inline: Some(v.to_string()),
            },
            None => Flag {
                name: flag.to_string(),
                inline: None,
            },
        }))
    }

    /// The value of `flag`: after its `=`, else the next argument.
    pub fn value(&mut self, flag: &Flag) -> Result<String, ParseError> {
        if let Some(v) = &flag.inline {
            return Ok(v.clone());
        }
        self.args
            .next()
            .ok_or_else(|| ParseError::Invalid(format!("flag needs an argument: --{}", flag.name)))
    }

    /// A flag the daemon does not know, as given: with its `=value`, or
    /// with the next argument taken as its value unless that is a flag.
    pub fn take_unknown(&mut self, flag: &Flag) -> String {
        match &flag.inline {
            Some(v) => format!("--{}={v}", flag.name),
            None => match self.args.next_if(|next| !next.starts_with('-')) {
                Some(v) => format!("--{} {v}", flag.name),
                None => format!("--{}", flag.name),
            },
        }
    }
}

impl Flag {
    /// A boolean flag: its `=value`, or true when given alone.
    pub fn boolean(&self) -> Result<bool, ParseError> {
        match &self.inline {
            Some(v) => parse_bool(&self.name, v),
            None => Ok(true),
        }
    }

    /// pflag's error for a value of this flag that is not valid, with why.
    pub fn invalid(&self, v: &str, why: &str) -> ParseError {
        invalid(&self.name, v, why)
    }
}

/// A daemon's parsed flags, or its exit code: `--help` prints `usage`
/// (exit 0); bad flags print the error, then `after_error` (exit 2).
pub fn parsed<T>(r: Result<T, ParseError>, usage: &str, after_error: &str) -> Result<T, i32> {
    match r {
        Ok(t) => Ok(t),
        Err(ParseError::Help) => {
            print!("{usage}");
            Err(0)
        }
        Err(ParseError::Invalid(m)) => {
            eprintln!("error: {m}\n{after_error}");
            Err(2)
        }
    }
}

/// pflag's error for value `v` of flag `name`.
pub fn invalid(name: &str, v: &str, why: &str) -> ParseError {
    ParseError::Invalid(format!(
        "invalid argument {v:?} for \"--{name}\" flag: {why}"
    ))
}

/// A boolean as Go's `strconv.ParseBool` reads it.
pub fn parse_bool(name: &str, v: &str) -> Result<bool, ParseError> {
    match v {
        "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
        "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
        _ => Err(ParseError::Invalid(format!(
            "invalid argument {v:?} for \"--{name}\" flag: strconv.ParseBool: parsing {v:?}: invalid syntax"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(args: &[&str]) -> Vec<Result<Flag, ParseError>> {
        let mut f = Flags::new(args.iter().map(|s| s.to_string()), "the test");
        let mut out = Vec::new();
        while let Some(x) = f.next_flag() {
            let x = x.and_then(|flag| {
                if flag.name == "value" {
                    let v = f.value(&flag)?;
                    return Ok(Flag {
                        name: flag.name,
                        inline: Some(v),
                    });
                }
                Ok(flag)
            });
            out.push(x);
        }
        out
    }

    #[test]
    fn flags_are_split_as_pflag_splits_them() {
        let got = lex(&["--a=1", "-b", "--value", "x y", "--value=z"]);
        let flag = |n: &str, v: Option<&str>| {
            Ok(Flag {
                name: n.into(),
                inline: v.map(String::from),
            })
        };
        assert_eq!(
            got,
            vec![
                flag("a", Some("1")),
                flag("b", None),
                flag("value", Some("x y")),
                flag("value", Some("z"))
            ]
        );
        assert_eq!(
            lex(&["stray"]),
            vec![Err(ParseError::Invalid(
                "unexpected argument \"stray\": the test takes flags only".into()
            ))]
        );
        assert_eq!(
            lex(&["--value"]),
            vec![Err(ParseError::Invalid(
                "flag needs an argument: --value".into()
            ))]
        );
    }

    #[test]
    fn unknown_flags_take_a_value_unless_a_flag_follows() {
        let mut f = Flags::new(["--x", "1", "--y", "--z=2"].map(String::from), "the test");
        let mut shown = Vec::new();
        while let Some(flag) = f.next_flag() {
            let flag = flag.unwrap();
            shown.push(f.take_unknown(&flag));
        }
        assert_eq!(shown, ["--x 1", "--y", "--z=2"]);
    }

    #[test]
    fn booleans_as_go_reads_them() {
        let f = |inline: Option<&str>| Flag {
            name: "leader-elect".into(),
            inline: inline.map(String::from),
        };
        assert_eq!(f(None).boolean(), Ok(true));
        assert_eq!(f(Some("False")).boolean(), Ok(false));
        assert_eq!(f(Some("1")).boolean(), Ok(true));
        assert!(matches!(
            f(Some("yes")).boolean(),
            Err(ParseError::Invalid(m)) if m.contains("strconv.ParseBool")
        ));
    }
}
