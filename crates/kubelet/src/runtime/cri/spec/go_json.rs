//! Go's `encoding/json` output for the few API objects upstream's kubelet
//! writes into container annotations (`io.kubernetes.container.preStopHandler`,
//! `io.kubernetes.container.ports`): fields in the Go structs' order,
//! `omitempty` as declared, strings escaped as Go escapes them.

use k8s_openapi::api::core::v1::{ContainerPort, LifecycleHandler};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Go's string encoding (HTML-safe, as `json.Marshal`).
pub fn string(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// An object written field by field, in order.
struct Obj(String);

impl Obj {
    fn new() -> Obj {
        Obj(String::from("{"))
    }
    fn key(&mut self, k: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        string(k, &mut self.0);
        self.0.push(':');
    }
    fn str(&mut self, k: &str, v: &str) {
        self.key(k);
        string(v, &mut self.0);
    }
    fn str_nonempty(&mut self, k: &str, v: Option<&String>) {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            self.str(k, v);
        }
    }
    fn raw(&mut self, k: &str, v: &str) {
        self.key(k);
        self.0.push_str(v);
    }
    fn done(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

fn int_or_string(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => {
            let mut o = String::new();
            string(s, &mut o);
            o
        }
    }
}

fn strings(v: &[String]) -> String {
    let mut o = String::from("[");
    for (i, s) in v.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        string(s, &mut o);
    }
    o.push(']');
    o
}

/// `json.Marshal` of a `v1.LifecycleHandler`.
pub fn lifecycle_handler(h: &LifecycleHandler) -> String {
    let mut o = Obj::new();
    if let Some(e) = &h.exec {
        let mut x = Obj::new();
        if let Some(c) = e.command.as_ref().filter(|c| !c.is_empty()) {
            x.raw("command", &strings(c));
        }
        o.raw("exec", &x.done());
    }
    if let Some(g) = &h.http_get {
        let mut x = Obj::new();
        x.str_nonempty("path", g.path.as_ref());
        x.raw("port", &int_or_string(&g.port));
        x.str_nonempty("host", g.host.as_ref());
        x.str_nonempty("scheme", g.scheme.as_ref());
        if let Some(hs) = g.http_headers.as_ref().filter(|h| !h.is_empty()) {
            let items: Vec<String> = hs
                .iter()
                .map(|h| {
                    let mut y = Obj::new();
                    y.str("name", &h.name);
                    y.str("value", &h.value);
                    y.done()
                })
                .collect();
            x.raw("httpHeaders", &format!("[{}]", items.join(",")));
        }
        o.raw("httpGet", &x.done());
    }
    if let Some(t) = &h.tcp_socket {
        let mut x = Obj::new();
        x.raw("port", &int_or_string(&t.port));
        x.str_nonempty("host", t.host.as_ref());
        o.raw("tcpSocket", &x.done());
    }
    if let Some(s) = &h.sleep {
        let mut x = Obj::new();
        x.raw("seconds", &s.seconds.to_string());
        o.raw("sleep", &x.done());
    }
    o.done()
}

/// `json.Marshal` of a `[]v1.ContainerPort`.
pub fn container_ports(ports: &[ContainerPort]) -> String {
    let items: Vec<String> = ports
        .iter()
        .map(|p| {
            let mut x = Obj::new();
            x.str_nonempty("name", p.name.as_ref());
            if let Some(h) = p.host_port.filter(|h| *h != 0) {
                x.raw("hostPort", &h.to_string());
            }
            x.raw("containerPort", &p.container_port.to_string());
            x.str_nonempty("protocol", p.protocol.as_ref());
            x.str_nonempty("hostIP", p.host_ip.as_ref());
            x.done()
        })
        .collect();
    format!("[{}]", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_go_writes_them() {
        let h: LifecycleHandler = serde_json::from_value(serde_json::json!({
            "sleep": {"seconds": 5},
            "httpGet": {"scheme": "HTTP", "port": "web", "path": "/stop?a=1&b=<2>",
                        "httpHeaders": [{"value": "v", "name": "X"}]},
            "exec": {"command": ["sh", "-c", "echo \"bye\""]},
        }))
        .unwrap();
        assert_eq!(
            lifecycle_handler(&h),
            r#"{"exec":{"command":["sh","-c","echo \"bye\""]},"httpGet":{"path":"/stop?a=1\u0026b=\u003c2\u003e","port":"web","scheme":"HTTP","httpHeaders":[{"name":"X","value":"v"}]},"sleep":{"seconds":5}}"#
        );
        let t: LifecycleHandler =
            serde_json::from_value(serde_json::json!({"tcpSocket": {"port": 80}})).unwrap();
        assert_eq!(lifecycle_handler(&t), r#"{"tcpSocket":{"port":80}}"#);
        let ports: Vec<ContainerPort> = serde_json::from_value(serde_json::json!([
            {"containerPort": 80, "protocol": "TCP", "name": "http"},
            {"protocol": "UDP", "hostIP": "127.0.0.1", "hostPort": 5353, "containerPort": 53},
        ]))
        .unwrap();
        assert_eq!(
            container_ports(&ports),
            r#"[{"name":"http","containerPort":80,"protocol":"TCP"},{"hostPort":5353,"containerPort":53,"protocol":"UDP","hostIP":"127.0.0.1"}]"#
        );
    }
}
