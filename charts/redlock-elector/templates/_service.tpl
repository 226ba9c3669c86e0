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
  selector:
    {{- include "redlock-elector.podLabels" . | nindent 4 }}
    {{ $label.key }}: {{ $label.leader | quote }}
  ports:
    {{- toYaml .values.leaderService.ports | nindent 4 }}
{{- end -}}
