{{/*
The leader Service: routes only to the pod the sidecar labelled leader, of this lease.
Argument: the context dict.
*/}}
{{- define "redlock-elector.leaderService" -}}
{{- $label := .values.config.kubernetes.label -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "redlock-elector.leaderServiceName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "redlock-elector.labels" . | nindent 4 }}
  {{- with .values.leaderService.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ .values.leaderService.type }}
  {{- if eq (include "redlock-elector.sidecarEndpoints" .) "true" }}
  # No selector: the sidecar of the leader writes the EndpointSlice below itself.
  {{- else }}
  selector:
    {{- include "redlock-elector.podLabels" . | nindent 4 }}
    {{ $label.key }}: {{ $label.leader | quote }}
  {{- end }}
  ports:
    {{- toYaml .values.leaderService.ports | nindent 4 }}
{{- if eq (include "redlock-elector.sidecarEndpoints" .) "true" }}
---
{{ include "redlock-elector.leaderEndpointSlice" . }}
{{- end }}
{{- end -}}

{{/*
"true" when the leader's sidecar writes the leader Service's endpoints (leaderService.endpoints:
sidecar), else "false". Argument: the context dict.
*/}}
{{- define "redlock-elector.sidecarEndpoints" -}}
{{- $e := .values.leaderService.endpoints | default "label" -}}
{{- if not (has $e (list "label" "sidecar")) -}}
{{- fail (printf "redlock-elector: leaderService.endpoints is %q; use label (the Service selects the leader label) or sidecar (the sidecar writes the EndpointSlice)" $e) -}}
{{- end -}}
{{- and .values.leaderService.enabled (eq $e "sidecar") -}}
{{- end -}}

{{/*
The leader Service's ports as its EndpointSlice lists them (a YAML list of name, port, protocol):
an EndpointSlice holds the pod's port numbers, so a named targetPort is looked up in app.ports.
Argument: the context dict.
*/}}
{{- define "redlock-elector.slicePorts" -}}
{{- $app := include "redlock-elector.app" . | fromYaml -}}
{{- $out := list -}}
{{- range .values.leaderService.ports -}}
{{- $target := .targetPort | default .port -}}
{{- if kindIs "string" $target -}}
{{- $found := 0 -}}
{{- if $.values.workload.enabled -}}
{{- range $app.ports | default list -}}
{{- if eq (.name | default "") $target -}}{{- $found = .containerPort -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "redlock-elector: leaderService.endpoints=sidecar lists the pod's port numbers in the EndpointSlice, but the targetPort %q is a name the chart cannot resolve (declare it in app.ports, or set leaderService.ports[].targetPort to a number)" $target) -}}
{{- end -}}
{{- $target = $found -}}
{{- end -}}
{{- $out = append $out (dict "name" (.name | default "") "port" (int $target) "protocol" (.protocol | default "TCP")) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
The leader Service's EndpointSlice, with leaderService.endpoints: sidecar. The chart creates it
without endpoints (and Helm leaves the ones the sidecar writes alone on upgrade); the
managed-by label keeps the EndpointSlice controller away from it. Argument: the context dict.
*/}}
{{- define "redlock-elector.leaderEndpointSlice" -}}
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {{ include "redlock-elector.leaderServiceName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "redlock-elector.labels" . | nindent 4 }}
    kubernetes.io/service-name: {{ include "redlock-elector.leaderServiceName" . }}
    endpointslice.kubernetes.io/managed-by: redlock-elector
addressType: IPv4
ports:
  {{- include "redlock-elector.slicePorts" . | nindent 2 }}
{{- end -}}
