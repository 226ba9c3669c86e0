{{/*
RBAC for the sidecar: exactly what the binary uses, in its own namespace only
(docs/operating/kubernetes.md#rbac says why, verb by verb).
- pods get: read its own pod (its standing as a candidate, its app containers' health);
- pods watch: follow its own pod between reads (without it, a read every 2 s);
- pods list: find other pods of the lease still labelled leader;
- pods patch: label its own pod, demote a stale leader;
- events create (core/v1): one leadership Event per change (never aggregated, so no patch);
with leaderService.endpoints: sidecar, also
- endpointslices get, watch, update (discovery.k8s.io), on the leader Service's slice only
  (resourceNames; a watch names it with a metadata.name field selector): read it, follow it so
  that a new term writes without reading first, write the leader's address fenced by its
  resourceVersion;
- endpointslices create, only with leaderService.recreateSlice: re-create the slice if someone
  deleted it. create cannot be limited to one name, and an EndpointSlice labelled with any
  Service's name adds endpoints to that Service, so it is off by default (the chart creates
  the slice; a deleted one comes back with the next helm upgrade).
tests/packaging/expected-rbac.yaml holds the same rules; the packaging tests compare them.
Argument: the context dict.
*/}}
{{- define "redlock-elector.roleRules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "watch", "list", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if eq (include "redlock-elector.sidecarEndpoints" .) "true" }}
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  resourceNames: [{{ include "redlock-elector.leaderServiceName" . | quote }}]
  verbs: ["get", "watch", "update"]
{{- if .values.leaderService.recreateSlice }}
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["create"]
{{- end }}
{{- end }}
{{- end -}}

{{- define "redlock-elector.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "redlock-elector.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "redlock-elector.labels" . | nindent 4 }}
  {{- with .values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{- define "redlock-elector.role" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "redlock-elector.fullname" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "redlock-elector.labels" . | nindent 4 }}
rules:
  {{- include "redlock-elector.roleRules" . | nindent 2 }}
{{- end -}}

{{- define "redlock-elector.roleBinding" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "redlock-elector.fullname" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "redlock-elector.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "redlock-elector.fullname" . }}
subjects:
  - kind: ServiceAccount
    name: {{ include "redlock-elector.serviceAccountName" . }}
    namespace: {{ .root.Release.Namespace }}
{{- end -}}

{{/*
All RBAC objects (ServiceAccount if serviceAccount.create, Role + RoleBinding if rbac.create)
as one multi-document string.
*/}}
{{- define "redlock-elector.rbac" -}}
{{- if .values.serviceAccount.create }}
---
{{ include "redlock-elector.serviceAccount" . }}
{{- end }}
{{- if .values.rbac.create }}
---
{{ include "redlock-elector.role" . }}
---
{{ include "redlock-elector.roleBinding" . }}
{{- end }}
{{- end -}}
