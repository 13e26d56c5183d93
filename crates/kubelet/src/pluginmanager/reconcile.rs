//! What the plugin manager does next (upstream's reconciler): deregister
//! the plugins whose socket is gone or was made anew, then register the
//! sockets not registered (a socket made anew: once deregistered).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::desired::SocketId;
use super::Registered;

/// One pass's work.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Registered plugins to deregister.
    pub deregister: Vec<PathBuf>,
    /// Sockets to register, with their identity.
    pub register: Vec<(PathBuf, SocketId)>,
}

/// The plan from the sockets `there` and the plugins `registered`.
pub fn plan(
    there: &BTreeMap<PathBuf, SocketId>,
    registered: &BTreeMap<PathBuf, Registered>,
) -> Plan {
    let mut p = Plan::default();
    for (path, r) in registered {
        if there.get(path) != Some(&r.id) {
            p.deregister.push(path.clone());
        }
    }
    for (path, id) in there {
        match registered.get(path) {
            Some(r) if r.id == *id => {}
            _ => p.register.push((path.clone(), *id)),
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (SocketId, SocketId) {
        let dir = std::env::temp_dir().join(format!("rk-plugplan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let a = std::os::unix::net::UnixListener::bind(dir.join("a")).unwrap();
        let first = super::super::desired::sockets(&dir)[&dir.join("a")];
        drop(a);
        std::fs::remove_file(dir.join("a")).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(dir.join("a")).unwrap();
        let second = super::super::desired::sockets(&dir)[&dir.join("a")];
        let _ = std::fs::remove_dir_all(&dir);
        (first, second)
    }

    fn reg(id: SocketId) -> Registered {
        Registered {
            id,
            kind: "DevicePlugin".into(),
            name: "example.com/r".into(),
            endpoint: "/x".into(),
        }
    }

    #[test]
    fn new_gone_and_remade_sockets() {
        let (old, new) = ids();
        let p = |s: &str| PathBuf::from(s);
        let there = BTreeMap::from([
            (p("/d/kept"), old),
            (p("/d/new"), old),
            (p("/d/remade"), new),
        ]);
        let registered = BTreeMap::from([
            (p("/d/kept"), reg(old)),
            (p("/d/gone"), reg(old)),
            (p("/d/remade"), reg(old)),
        ]);
        let plan = plan(&there, &registered);
        assert_eq!(plan.deregister, [p("/d/gone"), p("/d/remade")]);
        assert_eq!(plan.register, [(p("/d/new"), old), (p("/d/remade"), new)]);
    }
}
