//! The pod calls: demote other leaders of the lease before promoting the own pod, and patch the
//! own pod conditional on the version last seen.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use tokio::sync::watch;

use super::Role;
use crate::k8s::Settings;
use crate::k8s::call::{CallError, call};
use crate::metrics::Metrics;

/// Immediate retries after a 409 (someone else changed the pod: re-read and re-apply).
const CONFLICT_RETRIES: usize = 3;

/// The label state as applied to the API server.
pub(super) struct Pods {
    /// Fixed settings.
    settings: Settings,
    /// Request counters.
    metrics: Metrics,
    /// Pods of the own namespace.
    api: Api<Pod>,
    /// `resourceVersion` of the own pod as last read or written; `None` = read it first.
    resource_version: Option<String>,
    /// UID of the own pod, for Events (their `involvedObject`).
    uid: watch::Sender<Option<String>>,
    /// Term whose stale leaders were already demoted, so a retried promotion does not list again.
    demoted_for: Option<u64>,
}

impl Pods {
    /// Pods reached through `api`; the own pod's UID goes to `uid` once read.
    pub(super) fn new(
        settings: Settings,
        metrics: Metrics,
        api: Api<Pod>,
        uid: watch::Sender<Option<String>>,
    ) -> Self {
        Pods {
            settings,
            metrics,
            api,
            resource_version: None,
            uid,
            demoted_for: None,
        }
    }

    /// Make the API server show `role` (and, with several leases, `led` in the led-leases
    /// annotation): demote other leaders first if leading one lease, then patch self.
    pub(super) async fn apply(&mut self, role: Role, led: Option<&str>) -> Result<(), CallError> {
        if let Role::Leader { token } = role
            && self.settings.single_lease
            && self.demoted_for != Some(token)
        {
            self.demote_others().await?;
            self.demoted_for = Some(token);
        }
        let mut conflicts = 0;
        loop {
            match self.patch_self(role, led).await {
                Err(CallError::Conflict(_)) if conflicts < CONFLICT_RETRIES => {
                    conflicts += 1;
                    self.resource_version = None;
                }
                other => return other,
            }
        }
    }

    /// Patch the own pod to `role` and `led`, reading its version first if unknown.
    async fn patch_self(&mut self, role: Role, led: Option<&str>) -> Result<(), CallError> {
        if self.resource_version.is_none() {
            let pod = call(&self.metrics, "get", self.api.get(&self.settings.pod)).await?;
            self.remember(&pod);
        }
        let body = self.settings.own_patch(
            role,
            led,
            self.resource_version.as_deref(),
            &k8s_openapi::jiff::Timestamp::now().to_string(),
        );
        let pod = self.patch(&self.settings.pod, &body).await?;
        self.remember(&pod);
        Ok(())
    }

    /// One counted merge patch of the pod `name`.
    async fn patch(&self, name: &str, body: &serde_json::Value) -> Result<Pod, CallError> {
        let patch = Patch::Merge(body);
        let params = PatchParams::default();
        call(
            &self.metrics,
            "patch",
            self.api.patch(name, &params, &patch),
        )
        .await
    }

    /// Keep the version (the next patch's precondition) and the UID (for Events) of `pod`.
    fn remember(&mut self, pod: &Pod) {
        self.resource_version = pod.metadata.resource_version.clone();
        if pod.metadata.uid.is_some() && *self.uid.borrow() != pod.metadata.uid {
            self.uid.send_replace(pod.metadata.uid.clone());
        }
    }

    /// Demote every other pod of the lease that still carries the leader value.
    async fn demote_others(&mut self) -> Result<(), CallError> {
        let lp = ListParams::default().labels(&self.settings.leader_selector());
        let list = call(&self.metrics, "list", self.api.list(&lp)).await?;
        for pod in list.items {
            let Some(name) = pod.metadata.name.as_deref() else {
                continue;
            };
            if name == self.settings.pod {
                continue;
            }
            let body = self
                .settings
                .demote_patch(pod.metadata.resource_version.as_deref());
            match self.patch(name, &body).await {
                Ok(_) => tracing::info!(pod = name, "demoted a stale leader label"),
                // Deleted meanwhile: nothing left to demote.
                Err(CallError::NotFound(_)) => {}
                // Conflict (changed since listed) or failure: list again on the next attempt.
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
