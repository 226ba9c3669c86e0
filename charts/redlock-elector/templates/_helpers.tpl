{{/*
Naming and labels.

Every named template of this chart takes ONE context argument, a dict:
  (dict "root" $ "values" <this chart's values>)
- inside this chart:            (dict "root" $ "values" .Values)
- from a parent chart that depends on it under the alias `elector`:
                                (dict "root" $ "values" .Values.elector)
`root` supplies .Release and .Chart; `values` supplies every setting, so the parent renders
exactly what the dependency itself renders.
*/}}

{{- define "redlock-elector.name" -}}
{{- default "redlock-elector" .values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name: <release>-redlock-elector, or the release name if it already contains the chart
name, or fullnameOverride. Truncated to 52 characters so suffixes (-leader, -redis) fit in 63.
*/}}
{{- define "redlock-elector.fullname" -}}
{{- if .values.fullnameOverride -}}
{{- .values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "redlock-elector.name" . -}}
{{- if contains $name .root.Release.Name -}}
{{- .root.Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .root.Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The lease name: config.lease.name, else the full name. */}}
{{- define "redlock-elector.leaseName" -}}
{{- default (include "redlock-elector.fullname" .) .values.config.lease.name -}}
{{- end -}}

{{/*
This chart's version. A constant rather than .Chart.AppVersion because, included from a parent
chart, .root.Chart is the PARENT's chart. tests/packaging checks it equals Chart.yaml.
*/}}
{{- define "redlock-elector.version" -}}
0.1.0
{{- end -}}

{{- define "redlock-elector.chartLabel" -}}
{{- printf "redlock-elector-%s" (include "redlock-elector.version" .) | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select this release's pods (stable: used in workload selectors). */}}
{{- define "redlock-elector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "redlock-elector.name" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "redlock-elector.labels" -}}
{{ include "redlock-elector.selectorLabels" . }}
app.kubernetes.io/version: {{ include "redlock-elector.version" . | quote }}
app.kubernetes.io/part-of: redlock-elector
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ include "redlock-elector.chartLabel" . }}
{{- with .values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Labels the pod template must carry: the lease label (pods of one lease are recognised by it;
the leader Service and the sidecar's demote-before-promote select on it).
The sidecar itself adds/changes redlock-elector/role at run time.
*/}}
{{- define "redlock-elector.podLabels" -}}
redlock-elector/lease: {{ include "redlock-elector.leaseName" . | quote }}
{{- end -}}

{{- define "redlock-elector.serviceAccountName" -}}
{{- if .values.serviceAccount.create -}}
{{- default (include "redlock-elector.fullname" .) .values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "redlock-elector.configMapName" -}}
{{- printf "%s-config" (include "redlock-elector.fullname" .) -}}
{{- end -}}

{{- define "redlock-elector.leaderServiceName" -}}
{{- default (printf "%s-leader" (include "redlock-elector.fullname" .)) .values.leaderService.name -}}
{{- end -}}

{{- define "redlock-elector.redisName" -}}
{{- printf "%s-redis" (include "redlock-elector.fullname" .) -}}
{{- end -}}

{{- define "redlock-elector.image" -}}
{{- $img := .values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default (include "redlock-elector.version" .) $img.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Redis endpoints: config.redis.endpoints, else the demo instances when redis.enabled.
Output: a YAML list.
*/}}
{{- define "redlock-elector.redisEndpoints" -}}
{{- $eps := .values.config.redis.endpoints -}}
{{- if and (not $eps) .values.redis.enabled -}}
{{- $name := include "redlock-elector.redisName" . -}}
{{- $list := list -}}
{{- range $i, $_ := until (int .values.redis.instances) -}}
{{- $list = append $list (printf "redis://%s-%d.%s:6379" $name $i $name) -}}
{{- end -}}
{{- toYaml $list -}}
{{- else if $eps }}
{{- toYaml $eps }}
{{- else -}}
{{- fail "redlock-elector: set config.redis.endpoints (your Redis masters) or redis.enabled=true (demo instances)" -}}
{{- end -}}
{{- end -}}

{{/* Mount path of the password file when redisAuth.mountAsFile. */}}
{{- define "redlock-elector.passwordDir" -}}
/var/run/secrets/redlock-elector/redis
{{- end -}}

{{/* Mount paths of the TLS Secrets (redisTls.caSecret, redisTls.clientCertSecret). */}}
{{- define "redlock-elector.tlsCaDir" -}}
/var/run/secrets/redlock-elector/redis-tls-ca
{{- end -}}
{{- define "redlock-elector.tlsClientDir" -}}
/var/run/secrets/redlock-elector/redis-tls-client
{{- end -}}

{{/*
The app container's settings (use a), as YAML: `app` as the user set it, or, when
app.image.repository is empty, the demo app (busybox polling the sidecar) with the demo's own
command, resources and hardened security context. Nothing of the demo reaches a user's image.
Argument: the context dict.
*/}}
{{- define "redlock-elector.app" -}}
{{- $app := deepCopy .values.app -}}
{{- if $app.image.repository -}}
{{- if not $app.image.tag -}}
{{- fail "redlock-elector: app.image.tag is required when app.image.repository is set" -}}
{{- end -}}
{{- else -}}
{{- if or $app.command $app.args $app.image.tag -}}
{{- fail "redlock-elector: app.command, app.args or app.image.tag is set but app.image.repository is empty (the demo app); set app.image.repository to your image" -}}
{{- end -}}
{{- $demo := dict
  "image" (dict "repository" "busybox" "tag" "1.36" "pullPolicy" $app.image.pullPolicy)
  "command" (list "sh" "-c" (include "redlock-elector.demoScript" .))
  "ports" (list (dict "name" "http" "containerPort" 8080))
  "volumeMounts" (list (dict "name" "demo-www" "mountPath" "/www"))
  "resources" (dict "requests" (dict "cpu" "5m" "memory" "8Mi") "limits" (dict "memory" "32Mi"))
  "securityContext" (dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532
                          "readOnlyRootFilesystem" true "allowPrivilegeEscalation" false
                          "capabilities" (dict "drop" (list "ALL"))
                          "seccompProfile" (dict "type" "RuntimeDefault")) -}}
{{- $app = mergeOverwrite $app $demo -}}
{{- end -}}
{{- toYaml $app -}}
{{- end -}}

{{- define "redlock-elector.demoScript" -}}
# Serves the pod's latest /leader answer on the port named http (the leader Service's target),
# and logs each change. Exits at once on SIGTERM: a shell as the container's PID 1 ignores the
# signal without a trap, which would hold the pod, and the sidecar's handover after the app, for
# the whole grace period.
trap 'exit 0' TERM
busybox httpd -p 8080 -h /www
v=0
while true; do
  if wget -qO /www/.leader "http://127.0.0.1:{{ .values.sidecar.apiPort }}/leader?wait=30s&version=$v"; then
    mv /www/.leader /www/index.html && cat /www/index.html && echo
    v=$(sed -n 's/.*"version":\([0-9]*\).*/\1/p' /www/index.html)
  fi
  sleep 1
done &
wait
{{- end -}}

{{/*
Fails the render when the leader Service targets a named port that the app container does not
declare: its EndpointSlice would stay empty (a Service routing to nothing). Only where the chart
renders the workload (use a) and so knows the pod; a numeric targetPort is not checked.
Arguments: the context dict plus "app" (the app container's settings).
*/}}
{{- define "redlock-elector.leaderServiceCheck" -}}
{{- if and .values.workload.enabled .values.leaderService.enabled -}}
{{- $names := list -}}
{{- range .app.ports | default list -}}
{{- $names = append $names (.name | default "") -}}
{{- end -}}
{{- range .values.leaderService.ports -}}
{{- if and (kindIs "string" .targetPort) (not (has .targetPort $names)) -}}
{{- fail (printf "redlock-elector: leaderService.ports targets the port named %q, but app.ports declares no port of that name, so the leader Service would route to nothing. Declare your app's port, e.g. app.ports: [{name: %s, containerPort: 8080}], or set leaderService.ports[].targetPort to a declared name or a number, or leaderService.enabled=false" .targetPort .targetPort) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Scheduling presets (use a): pod anti-affinity on the hostname and spread over zones, unless the
user set workload.affinity / workload.topologySpreadConstraints. Argument: the context dict;
"selector" in it holds the pod selector labels (a map).
*/}}
{{- define "redlock-elector.affinity" -}}
{{- $w := .values.workload -}}
{{- if $w.affinity -}}
{{- toYaml $w.affinity -}}
{{- else if ne $w.spreadPreset "none" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" .selector) -}}
podAntiAffinity:
{{- if eq $w.spreadPreset "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    {{- toYaml (list $term) | nindent 4 }}
{{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        {{- toYaml $term | nindent 8 }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "redlock-elector.topologySpread" -}}
{{- $w := .values.workload -}}
{{- if $w.topologySpreadConstraints -}}
{{- toYaml $w.topologySpreadConstraints -}}
{{- else if ne $w.spreadPreset "none" -}}
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- toYaml .selector | nindent 6 }}
{{- end -}}
{{- end -}}

{{/*
A humantime duration (the schema's units: ns, us, µs, ms, s, m, h, d; parts may be summed, as in
"1m 30s") in milliseconds, as a float.
*/}}
{{- define "redlock-elector.durationMs" -}}
{{- $unit := dict "ns" 0.000001 "us" 0.001 "µs" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 "d" 86400000.0 -}}
{{- $ms := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h|d)" . -1 -}}
{{- $n := regexFind "^[0-9.]+" . -}}
{{- $ms = addf $ms (mulf (float64 $n) (get $unit (trimPrefix $n .))) -}}
{{- end -}}
{{- $ms -}}
{{- end -}}

{{/*
How long a fresh sidecar watches a node's clock before the node counts, in whole seconds rounded
up: ttl + margin, margin = ttl × driftFactor + 2 ms (as the binary computes it).
*/}}
{{- define "redlock-elector.clockWatchSeconds" -}}
{{- $ttlMs := include "redlock-elector.durationMs" .values.config.lease.ttl | float64 -}}
{{- $watchMs := addf $ttlMs (mulf $ttlMs (.values.config.lease.driftFactor | float64)) 2.0 -}}
{{- divf $watchMs 1000.0 | ceil | int -}}
{{- end -}}

{{/*
minReadySeconds of the workload: workload.minReadySeconds, a number (0 = not set; 2 by default,
what the sidecar's startup probe and a graceful handover need: a fresh sidecar takes a graceful
handover at once on the release proof, so the ttl does not enter). values.schema.json refuses
anything else; this guard gives the same answer, with the figure to set, where the schema is
skipped (helm --skip-schema-validation).
*/}}
{{- define "redlock-elector.minReadySeconds" -}}
{{- $w := .values.workload.minReadySeconds -}}
{{- if and (not (kindIs "invalid" $w)) (not (has (kindOf $w) (list "int" "int64" "float64"))) -}}
{{- fail (printf "redlock-elector: workload.minReadySeconds is %q; set a number of seconds (`auto` is gone): 2 is the default; for the one upgrade from a build without the release proof, the clock watch + 2 s, %d at this lease's ttl and driftFactor (docs/operating/upgrade-mixed-fleet.md)" (toString $w) (add 2 (include "redlock-elector.clockWatchSeconds" .))) -}}
{{- end -}}
{{- $w | int -}}
{{- end -}}
