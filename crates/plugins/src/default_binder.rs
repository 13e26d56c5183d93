//! DefaultBinder: binds through the host's API ([`Binder::bind`](rkube_framework::Binder::bind): the
//! API server's `pods/binding` subresource, or the simulator's snapshot).

use rkube_framework::{BindPlugin, ClusterApi, CycleState, Plugin, Status};
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
    fn bind(&self, _: &mut CycleState, pod: &Pod, node: &str, api: &mut dyn ClusterApi) -> Status {
        match api.bind(pod, node) {
            Ok(()) => Status::success(),
            Err(e) => Status::error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rkube_framework::{Binder, ClaimApi, HostClock, Listers, VolumeApi};
    use rkube_model::volumes::{Pv, Pvc};

    use super::*;

    /// Records bindings; fails for node "bad".
    #[derive(Default)]
    struct Recorder(Vec<(String, String)>);

    impl Binder for Recorder {
        fn bind(&mut self, pod: &Pod, node: &str) -> Result<(), String> {
            if node == "bad" {
                return Err("nodes \"bad\" not found".into());
            }
            self.0.push((pod.key(), node.to_string()));
            Ok(())
        }

        fn event(&mut self, _: &str, _: &str, _: &str) {}
    }

    impl VolumeApi for Recorder {
        fn bind_pv(&mut self, _: &Pv, _: &Pvc) -> Result<Pv, String> {
            unreachable!()
        }

        fn select_node(&mut self, _: &Pvc, _: &str) -> Result<Pvc, String> {
            unreachable!()
        }

        fn pvc(&self, _: &str, _: &str) -> Option<Pvc> {
            None
        }

        fn pv(&self, _: &str) -> Option<Pv> {
            None
        }
    }

    impl ClaimApi for Recorder {
        fn update_claim_status(
            &mut self,
            _: &rkube_model::dra::ResourceClaim,
        ) -> Result<rkube_model::dra::ResourceClaim, String> {
            unreachable!()
        }

        fn resource_claim(&self, _: &str, _: &str) -> Option<rkube_model::dra::ResourceClaim> {
            None
        }

        fn create_claim(
            &mut self,
            _: &rkube_model::dra::ResourceClaim,
        ) -> Result<rkube_model::dra::ResourceClaim, String> {
            Err("no DRA here".into())
        }

        fn delete_claim(&mut self, _: &str, _: &str) -> Result<(), String> {
            Err("no DRA here".into())
        }

        fn set_extended_resource_claim_status(
            &mut self,
            _: &Pod,
            _: &str,
            _: &[rkube_model::dra::RequestMapping],
        ) -> Result<(), String> {
            Err("no DRA here".into())
        }
    }

    impl Listers for Recorder {
        fn node(&self, _: &str) -> Option<std::sync::Arc<rkube_model::Node>> {
            None
        }

        fn pod_exists(&self, _: &Pod) -> bool {
            true
        }
    }

    impl HostClock for Recorder {
        fn sleep(&mut self, _: Duration) {}

        fn elapsed(&self) -> Duration {
            Duration::ZERO
        }
    }

    #[test]
    fn binds_through_the_host() {
        let pod = Pod {
            namespace: "ns".into(),
            name: "p".into(),
            ..Default::default()
        };
        let mut host = Recorder::default();
        let s = DefaultBinder.bind(&mut CycleState::new(), &pod, "n1", &mut host);
        assert!(s.is_success());
        assert_eq!(host.0, [("ns/p".to_string(), "n1".to_string())]);
        let s = DefaultBinder.bind(&mut CycleState::new(), &pod, "bad", &mut host);
        assert_eq!(s.code, rkube_framework::Code::Error);
        assert_eq!(s.message(), "nodes \"bad\" not found");
    }
}
