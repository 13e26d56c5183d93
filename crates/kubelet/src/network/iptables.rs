//! The kubelet's own iptables rules, with `makeIPTablesUtilChains` (on by
//! default), as upstream's `kubelet_network_linux.go`:
//!
//! * `KUBE-IPTABLES-HINT` in the mangle table (IPv4 and IPv6), which tells
//!   other components which iptables backend the node uses;
//! * IPv4 only: `KUBE-FIREWALL` in the filter table, jumped to first from
//!   `INPUT` and `OUTPUT`, dropping packets for 127.0.0.0/8 that come from
//!   elsewhere and are not part of a connection or DNATed ("block incoming
//!   localnet connections", against localhost services reached through
//!   `route_localnet`);
//! * the `KUBE-KUBELET-CANARY` chain in the mangle, nat and filter tables,
//!   checked every minute: when it is gone (iptables flushed), the rules
//!   above are made again.
//!
//! Like upstream's, this goes through the `iptables`/`ip6tables` commands
//! (their `-w` lock), for each family whose command works here; a host
//! without them gets a log line and no rules.

use std::process::Command;
use std::time::Duration;

/// The mangle chain that tells which iptables backend the node uses.
pub const HINT_CHAIN: &str = "KUBE-IPTABLES-HINT";
/// The filter chain of the localnet rule.
pub const FIREWALL_CHAIN: &str = "KUBE-FIREWALL";
/// The chain whose disappearance means iptables was flushed.
pub const CANARY_CHAIN: &str = "KUBE-KUBELET-CANARY";
/// How often the canary is checked (upstream's monitor interval).
pub const MONITOR_PERIOD: Duration = Duration::from_secs(60);
/// The tables the canary lives in; the first is the one polled.
const CANARY_TABLES: [&str; 3] = ["mangle", "nat", "filter"];

/// Where a rule goes when it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// First in its chain (`-I`).
    Prepend,
    /// Last in its chain (`-A`).
    Append,
}

/// One step of the rules: a chain made if missing, or a rule added if
/// missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `-N CHAIN` in a table.
    Chain {
        /// The table.
        table: &'static str,
        /// The chain.
        chain: &'static str,
    },
    /// A rule (`-C` first, then `-I` or `-A`).
    Rule {
        /// The table.
        table: &'static str,
        /// The chain the rule is in.
        chain: &'static str,
        /// Where it goes.
        position: Position,
        /// The rule's arguments.
        args: Vec<&'static str>,
    },
}

/// The rules of one family, in upstream's order.
pub fn plan(ipv6: bool) -> Vec<Step> {
    let mut steps = vec![Step::Chain {
        table: "mangle",
        chain: HINT_CHAIN,
    }];
    if ipv6 {
        // IPv6 has no route_localnet: nothing to block.
        return steps;
    }
    steps.push(Step::Chain {
        table: "filter",
        chain: FIREWALL_CHAIN,
    });
    for chain in ["OUTPUT", "INPUT"] {
        steps.push(Step::Rule {
            table: "filter",
            chain,
            position: Position::Prepend,
            args: vec!["-j", FIREWALL_CHAIN],
        });
    }
    steps.push(Step::Rule {
        table: "filter",
        chain: FIREWALL_CHAIN,
        position: Position::Append,
        args: vec![
            "-m",
            "comment",
            "--comment",
            "block incoming localnet connections",
            "--dst",
            "127.0.0.0/8",
            "!",
            "--src",
            "127.0.0.0/8",
            "-m",
            "conntrack",
            "!",
            "--ctstate",
            "RELATED,ESTABLISHED,DNAT",
            "-j",
            "DROP",
        ],
    });
    steps
}

/// One family's iptables command.
#[derive(Debug, Clone)]
pub struct Iptables {
    /// The command and any words before its arguments (tests run it
    /// through `ip netns exec`).
    argv: Vec<String>,
    ipv6: bool,
}

impl Iptables {
    /// The families whose command runs here (upstream's best effort:
    /// `iptables`, then `ip6tables`).
    pub fn available() -> Vec<Iptables> {
        [("iptables", false), ("ip6tables", true)]
            .into_iter()
            .map(|(bin, ipv6)| Iptables::with(vec![bin.to_string()], ipv6))
            .filter(|t| t.works())
            .collect()
    }

    /// `argv` (the command, maybe behind a wrapper) for one family.
    pub fn with(argv: Vec<String>, ipv6: bool) -> Iptables {
        Iptables { argv, ipv6 }
    }

    /// `IPv4` or `IPv6`, as upstream logs the protocol.
    pub fn protocol(&self) -> &'static str {
        if self.ipv6 {
            "IPv6"
        } else {
            "IPv4"
        }
    }

    /// Upstream's `Present`: the nat table's `POSTROUTING` can be listed
    /// (a family without it, or a command that cannot run, is skipped).
    fn works(&self) -> bool {
        matches!(self.chain_exists("nat", "POSTROUTING"), Ok(true))
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.argv[0]);
        c.args(&self.argv[1..]);
        // Wait for the xtables lock rather than fail, as upstream does.
        c.args(["-w", "5"]);
        c.args(args);
        c
    }

    /// Runs `args`: `Ok(true)` on success, `Ok(false)` when iptables
    /// answered no (exit 1: no such chain or rule), `Err` otherwise.
    fn run(&self, args: &[&str]) -> Result<bool, String> {
        let out = self
            .command(args)
            .output()
            .map_err(|e| format!("running {}: {e}", self.argv.join(" ")))?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(format!(
                "{} {}: {}",
                self.argv.join(" "),
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }

    /// Does `chain` exist in `table`?
    pub fn chain_exists(&self, table: &str, chain: &str) -> Result<bool, String> {
        self.run(&["-t", table, "-S", chain])
    }

    fn ensure_chain(&self, table: &str, chain: &str) -> Result<(), String> {
        if self.chain_exists(table, chain)? {
            return Ok(());
        }
        match self.run(&["-t", table, "-N", chain])? {
            true => Ok(()),
            // Made meanwhile by someone else.
            false if self.chain_exists(table, chain)? => Ok(()),
            false => Err(format!("cannot create chain {chain} in table {table}")),
        }
    }

    fn ensure_rule(
        &self,
        table: &str,
        chain: &str,
        position: Position,
        rule: &[&str],
    ) -> Result<(), String> {
        let with = |op: &'static str| -> Vec<&str> {
            let mut a = vec!["-t", table, op, chain];
            a.extend_from_slice(rule);
            a
        };
        if self.run(&with("-C"))? {
            return Ok(());
        }
        let op = match position {
            Position::Prepend => "-I",
            Position::Append => "-A",
        };
        if self.run(&with(op))? {
            Ok(())
        } else {
            Err(format!("cannot add a rule to {chain} in table {table}"))
        }
    }

    /// Makes this family's rules ([`plan`]) where they are missing.
    pub fn sync(&self) -> Result<(), String> {
        for step in plan(self.ipv6) {
            match step {
                Step::Chain { table, chain } => self.ensure_chain(table, chain)?,
                Step::Rule {
                    table,
                    chain,
                    position,
                    args,
                } => self.ensure_rule(table, chain, position, &args)?,
            }
        }
        Ok(())
    }

    /// Makes the canary chain in every table it lives in.
    pub fn ensure_canary(&self) -> Result<(), String> {
        for table in CANARY_TABLES {
            self.ensure_chain(table, CANARY_CHAIN)?;
        }
        Ok(())
    }

    /// Is the canary gone from the table polled (iptables flushed)?
    pub fn canary_gone(&self) -> bool {
        matches!(self.chain_exists(CANARY_TABLES[0], CANARY_CHAIN), Ok(false))
    }
}

/// Makes the rules of every family, then keeps them: each minute, a family
/// whose canary is gone gets its rules and canary again. Runs forever.
pub async fn run(families: Vec<Iptables>) {
    if families.is_empty() {
        tracing::info!("No iptables support on this system; not creating the {HINT_CHAIN} chain");
        return;
    }
    let mut kept = Vec::new();
    for ipt in families {
        let Some((ipt, ok)) = blocking(ipt, |t| t.sync()).await else {
            continue;
        };
        match ok {
            Ok(()) => {
                tracing::info!(protocol = ipt.protocol(), "Initialized iptables rules.");
                kept.push(ipt);
            }
            Err(e) => tracing::warn!(
                protocol = ipt.protocol(),
                error = %e,
                "Failed to initialize iptables rules; some functionality may be missing."
            ),
        }
    }
    // The canaries at once, then checked every period (upstream's
    // `Monitor`: a canary that cannot be made is tried again).
    let mut first = true;
    while !kept.is_empty() {
        if !std::mem::take(&mut first) {
            tokio::time::sleep(MONITOR_PERIOD).await;
        }
        for ipt in std::mem::take(&mut kept) {
            if let Some((ipt, ())) = blocking(ipt, keep).await {
                kept.push(ipt);
            }
        }
    }
}

/// How long a flush gets to take the other tables' canaries too, and how
/// often they are looked at meanwhile (upstream's `iptablesFlushTimeout`
/// and `iptablesFlushPollTime`).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
const FLUSH_POLL: Duration = Duration::from_millis(100);

/// One check of the canary: when it is gone from the table polled, the
/// others' going too is waited for (a flush in progress), then the rules
/// are made again; then the canary (again).
fn keep(t: &Iptables) {
    if t.canary_gone() {
        let deadline = std::time::Instant::now() + FLUSH_TIMEOUT;
        while CANARY_TABLES[1..]
            .iter()
            .any(|table| !matches!(t.chain_exists(table, CANARY_CHAIN), Ok(false)))
        {
            if std::time::Instant::now() >= deadline {
                tracing::info!("Inconsistent iptables state detected");
                break;
            }
            std::thread::sleep(FLUSH_POLL);
        }
        tracing::info!(protocol = t.protocol(), "Reloading after iptables flush");
        if let Err(e) = t.sync() {
            tracing::warn!(protocol = t.protocol(), error = %e, "Failed to restore the iptables rules");
        }
    }
    if let Err(e) = t.ensure_canary() {
        tracing::warn!(protocol = t.protocol(), error = %e, "Could not set up iptables canary");
    }
}

/// `f(ipt)` on the blocking pool (it runs commands); `ipt` comes back
/// with the answer (`None` only if `f` panicked).
async fn blocking<T: Send + 'static>(
    ipt: Iptables,
    f: impl FnOnce(&Iptables) -> T + Send + 'static,
) -> Option<(Iptables, T)> {
    tokio::task::spawn_blocking(move || {
        let r = f(&ipt);
        (ipt, r)
    })
    .await
    .ok()
}

#[cfg(test)]
#[path = "iptables_tests.rs"]
mod tests;
