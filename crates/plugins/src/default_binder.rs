//! DefaultBinder: binds through the host's [`Binder`] (the simulator's
//! snapshot, or the API server's `pods/binding` subresource).

use rkube_framework::{BindPlugin, Binder, CycleState, Plugin, Status};
use rkube_model::Pod;

/// Upstream name.
pub const NAME: &str = "DefaultBinder";

/// The plugin.
pub struct DefaultBinder;

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

impl BindPlugin for DefaultBinder {
    fn bind(&self, _: &mut CycleState, pod: &Pod, node: &str, binder: &mut dyn Binder) -> Status {
        binder.bind(pod, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Recorder(Vec<(String, String)>);

    impl Binder for Recorder {
        fn bind(&mut self, pod: &Pod, node: &str) -> Status {
            self.0.push((pod.key(), node.to_string()));
            Status::success()
        }
    }

    #[test]
    fn binds_through_the_host() {
        let pod = Pod {
            namespace: "ns".into(),
            name: "p".into(),
            ..Default::default()
        };
        let mut host = Recorder(Vec::new());
        let s = DefaultBinder.bind(&mut CycleState::new(), &pod, "n1", &mut host);
        assert!(s.is_success());
        assert_eq!(host.0, [("ns/p".to_string(), "n1".to_string())]);
    }
}
