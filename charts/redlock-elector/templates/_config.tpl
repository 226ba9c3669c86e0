{{/*
The sidecar's config file (docs/reference/configuration.md), from .values.config. Empty strings mean "the
binary's default" and are left out, so the file holds only what was chosen.
Argument: (dict "root" $ "values" <values>).
*/}}
{{- define "redlock-elector.configFile" -}}
{{- $c := .values.config -}}
{{- $ctx := . -}}
{{- with $c.identity }}
identity: {{ . | quote }}
{{- end }}
lease:
  name: {{ include "redlock-elector.leaseName" . | quote }}
  ttl: {{ $c.lease.ttl | quote }}
  {{- with $c.lease.renewEvery }}
  renewEvery: {{ . | quote }}
  {{- end }}
  retryEvery: {{ $c.lease.retryEvery | quote }}
  driftFactor: {{ $c.lease.driftFactor }}
  keyPrefix: {{ $c.lease.keyPrefix | quote }}
  {{- with $c.lease.prefer }}
  prefer: {{ . | quote }}
  {{- end }}
  priority: {{ int $c.lease.priority }}
  preferSettle: {{ $c.lease.preferSettle | quote }}
  followApp: {{ $c.lease.followApp }}
{{- $a := $c.app }}
{{- if or $a.containers $a.unhealthyGrace $a.cooldown }}
app:
  {{- with $a.containers }}
  containers:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.unhealthyGrace }}
  unhealthyGrace: {{ . | quote }}
  {{- end }}
  {{- with $a.cooldown }}
  cooldown: {{ . | quote }}
  {{- end }}
{{- end }}
redis:
  endpoints:
    {{- include "redlock-elector.redisEndpoints" . | nindent 4 }}
  timeout: {{ $c.redis.timeout | quote }}
  connectTimeout: {{ $c.redis.connectTimeout | quote }}
  {{- with $c.redis.username }}
  username: {{ . | quote }}
  {{- end }}
  {{- if and .values.redisAuth.existingSecret .values.redisAuth.mountAsFile }}
  passwordFile: {{ printf "%s/%s" (include "redlock-elector.passwordDir" .) .values.redisAuth.key | quote }}
  {{- end }}
  {{- $t := .values.redisTls }}
  {{- $caFile := $c.redis.tls.caFile }}
  {{- if $t.caSecret }}
  {{- $caFile = printf "%s/%s" (include "redlock-elector.tlsCaDir" .) $t.caKey }}
  {{- end }}
  {{- $certFile := $c.redis.tls.certFile }}
  {{- $keyFile := $c.redis.tls.keyFile }}
  {{- if $t.clientCertSecret }}
  {{- $certFile = printf "%s/%s" (include "redlock-elector.tlsClientDir" .) $t.certKey }}
  {{- $keyFile = printf "%s/%s" (include "redlock-elector.tlsClientDir" .) $t.keyKey }}
  {{- end }}
  {{- if or $caFile $certFile $keyFile $c.redis.tls.serverName $c.redis.tls.insecureSkipVerify }}
  tls:
    {{- with $caFile }}
    caFile: {{ . | quote }}
    {{- end }}
    {{- with $certFile }}
    certFile: {{ . | quote }}
    {{- end }}
    {{- with $keyFile }}
    keyFile: {{ . | quote }}
    {{- end }}
    {{- with $c.redis.tls.serverName }}
    serverName: {{ . | quote }}
    {{- end }}
    insecureSkipVerify: {{ $c.redis.tls.insecureSkipVerify }}
  {{- end }}
api:
  listen: {{ printf "127.0.0.1:%d" (int .values.sidecar.apiPort) | quote }}
ops:
  listen: {{ include "redlock-elector.opsListen" . | quote }}
kubernetes:
  enabled: {{ $c.kubernetes.enabled }}
  label:
    key: {{ $c.kubernetes.label.key | quote }}
    leader: {{ $c.kubernetes.label.leader | quote }}
    follower: {{ $c.kubernetes.label.follower | quote }}
  events: {{ $c.kubernetes.events }}
  fencingTokenAnnotation: {{ $c.kubernetes.fencingTokenAnnotation }}
  {{- if eq (include "redlock-elector.sidecarEndpoints" .) "true" }}
  endpointSlice:
    name: {{ include "redlock-elector.leaderServiceName" . | quote }}
    ports:
      {{- range (include "redlock-elector.slicePorts" . | fromYamlArray) }}
      - {{ printf "%s%d/%s" (ternary "" (printf "%s:" .name) (eq .name "")) (int .port) .protocol | quote }}
      {{- end }}
  {{- end }}
log:
  format: {{ $c.log.format }}
  level: {{ $c.log.level }}
{{- end -}}

{{/* The ConfigMap holding config.yaml. Argument: the context dict. */}}
{{- define "redlock-elector.configMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "redlock-elector.configMapName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "redlock-elector.labels" . | nindent 4 }}
data:
  config.yaml: |
    {{- include "redlock-elector.configFile" . | trim | nindent 4 }}
{{- end -}}

{{/*
The ops listener's address (ops.listen): sidecar.opsBindAddress and sidecar.opsPort. An IPv6
address is bracketed ("::" and "[::]" both give "[::]:4041").
*/}}
{{- define "redlock-elector.opsListen" -}}
{{- $host := .values.sidecar.opsBindAddress | trim -}}
{{- if and (contains ":" $host) (not (hasPrefix "[" $host)) -}}
{{- $host = printf "[%s]" $host -}}
{{- end -}}
{{- printf "%s:%d" $host (int .values.sidecar.opsPort) -}}
{{- end -}}
