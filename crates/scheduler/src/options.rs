//! Command-line flags of `rkube scheduler`, spelled as kube-scheduler's
//! (`--flag=value`, `--flag value`, `-v=N`, `--v N`). kube-scheduler flags
//! rkube does not implement are accepted with a warning so an existing
//! manifest's command line keeps working.

use std::path::PathBuf;

/// Parsed flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--config` (a KubeSchedulerConfiguration file).
    pub config: Option<PathBuf>,
    /// `--leader-elect` (only `false` is supported so far).
    pub leader_elect: bool,
    /// `-v`/`--v` log verbosity.
    pub verbosity: u32,
    /// `--bind-address` of the health endpoints.
    pub bind_address: String,
    /// `--secure-port` of the health endpoints (0 disables serving).
    pub secure_port: u16,
    /// Warnings about ignored flags.
    pub warnings: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            kubeconfig: None,
            config: None,
            leader_elect: true,
            verbosity: 0,
            bind_address: "0.0.0.0".into(),
            secure_port: 10259,
            warnings: Vec::new(),
        }
    }
}

/// Usage text.
pub const USAGE: &str = "\
Usage: rkube scheduler [flags]

Runs rkube as the cluster's scheduler: watches the API server, schedules
pending pods of its profiles' schedulerNames and binds them.

Flags (spelled as kube-scheduler's; other kube-scheduler flags are accepted
and ignored with a warning):
      --kubeconfig PATH       kubeconfig of the scheduler's identity
      --config FILE           KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1);
                              its clientConnection.kubeconfig wins over --kubeconfig
      --leader-elect=false    leader election (not implemented yet: must be false)
  -v, --v N                   log verbosity (2: each placement, 4: debug, 6: trace)
      --bind-address IP       address of /healthz and /readyz (default 0.0.0.0)
      --secure-port PORT      port of /healthz and /readyz, plain HTTP for now (default 10259, 0 disables)
  -h, --help                  this text
";

/// Why the flags were rejected (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// `--help` was given.
    Help,
    /// A bad flag value.
    Invalid(String),
}

fn parse_bool(name: &str, v: &str) -> Result<bool, ParseError> {
    match v {
        "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
        "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
        _ => Err(ParseError::Invalid(format!(
            "invalid argument {v:?} for \"--{name}\" flag: strconv.ParseBool: parsing {v:?}: invalid syntax"
        ))),
    }
}

/// Parses the arguments after `rkube scheduler`.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Options, ParseError> {
    let mut o = Options::default();
    let mut it = args.into_iter().peekable();
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(ParseError::Invalid(format!(
                "unexpected argument {arg:?}: kube-scheduler takes flags only"
            )));
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.to_string(), None),
        };
        let mut value = || -> Result<String, ParseError> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            it.next()
                .ok_or_else(|| ParseError::Invalid(format!("flag needs an argument: --{name}")))
        };
        match name.as_str() {
            "h" | "help" => return Err(ParseError::Help),
            "kubeconfig" => o.kubeconfig = Some(PathBuf::from(value()?)),
            "config" => o.config = Some(PathBuf::from(value()?)),
            "v" => {
                let v = value()?;
                o.verbosity = v.parse().map_err(|_| {
                    ParseError::Invalid(format!("invalid argument {v:?} for \"-v\" flag"))
                })?;
            }
            "bind-address" => o.bind_address = value()?,
            "secure-port" => {
                let v = value()?;
                o.secure_port = v.parse().map_err(|_| {
                    ParseError::Invalid(format!(
                        "invalid argument {v:?} for \"--secure-port\" flag"
                    ))
                })?;
            }
            "leader-elect" => {
                o.leader_elect = match &inline {
                    Some(v) => parse_bool(&name, v)?,
                    None => true,
                }
            }
            _ => {
                // An unknown flag: its value is the next argument unless that
                // is a flag too (kube-scheduler takes no positional arguments).
                let shown = match &inline {
                    Some(v) => format!("--{name}={v}"),
                    None => match it.peek() {
                        Some(next) if !next.starts_with('-') => {
                            let v = it.next().unwrap_or_default();
                            format!("--{name} {v}")
                        }
                        _ => format!("--{name}"),
                    },
                };
                o.warnings.push(format!(
                    "flag {shown} is not implemented by rkube scheduler and is ignored"
                ));
            }
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Options, ParseError> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn known_flags_both_spellings() {
        let o = p(&[
            "--kubeconfig=/k",
            "--config",
            "/c.yaml",
            "--leader-elect=false",
            "-v=4",
            "--bind-address",
            "127.0.0.1",
            "--secure-port=0",
        ])
        .unwrap();
        assert_eq!(o.kubeconfig, Some(PathBuf::from("/k")));
        assert_eq!(o.config, Some(PathBuf::from("/c.yaml")));
        assert!(!o.leader_elect);
        assert_eq!(o.verbosity, 4);
        assert_eq!(o.bind_address, "127.0.0.1");
        assert_eq!(o.secure_port, 0);
        assert!(o.warnings.is_empty());
        assert_eq!(p(&["--v", "2"]).unwrap().verbosity, 2);
        assert!(p(&["--leader-elect"]).unwrap().leader_elect);
    }

    #[test]
    fn unknown_flags_warn_and_errors() {
        let o = p(&[
            "--authentication-kubeconfig",
            "/a",
            "--profiling=false",
            "--kube-api-qps=100",
            "--leader-elect=false",
        ])
        .unwrap();
        assert_eq!(o.warnings.len(), 3);
        assert!(o.warnings[0].contains("--authentication-kubeconfig /a"));
        assert!(!o.leader_elect);
        assert_eq!(p(&["--help"]), Err(ParseError::Help));
        assert!(matches!(
            p(&["--leader-elect=maybe"]),
            Err(ParseError::Invalid(_))
        ));
        assert!(matches!(
            p(&["--secure-port=x"]),
            Err(ParseError::Invalid(_))
        ));
        assert!(matches!(p(&["stray"]), Err(ParseError::Invalid(_))));
    }
}
