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
