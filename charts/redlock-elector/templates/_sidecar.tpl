{{/*
The sidecar, as pieces of a pod spec. Public API for parent charts (see docs/operating/install.md in the project repository):

  redlock-elector.sidecar.container   the container, one list item ("- name: ...")
  redlock-elector.initContainers      the container if sidecar.native (else empty)
  redlock-elector.containers          the container if not sidecar.native (else empty)
  redlock-elector.sidecar.env         its env list (downward API, password secretKeyRef)
  redlock-elector.sidecar.volumes     the pod volumes it needs (list items)
  redlock-elector.podLabels           labels the pod template must carry (lease label)
  redlock-elector.podAnnotations      the config checksum (pods roll when the config changes) and the handover marker
  redlock-elector.serviceAccountName  the ServiceAccount the pod must run as

Each takes (dict "root" $ "values" <values>).
*/}}

{{- define "redlock-elector.sidecar.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if eq (include "redlock-elector.sidecarEndpoints" .) "true" }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- with .values.redisAuth }}
{{- if and .existingSecret (not .mountAsFile) }}
- name: REDLOCK_ELECTOR_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .key }}
{{- end }}
{{- end }}
{{- with .values.sidecar.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "redlock-elector.sidecar.volumes" -}}
- name: redlock-elector-config
  configMap:
    name: {{ include "redlock-elector.configMapName" . }}
{{- with .values.redisAuth }}
{{- if and .existingSecret .mountAsFile }}
- name: redlock-elector-redis-auth
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .key }}
        path: {{ .key }}
{{- end }}
{{- end }}
{{- /* Secret files are root-owned; the sidecar runs as a non-root uid and the chart sets no
       fsGroup, so they are world-readable inside the pod (the CA is public; the client key is
       read by this container only). */ -}}
{{- with .values.redisTls }}
{{- if .caSecret }}
- name: redlock-elector-redis-tls-ca
  secret:
    secretName: {{ .caSecret }}
    defaultMode: 0444
    items:
      - key: {{ .caKey }}
        path: {{ .caKey }}
{{- end }}
{{- if .clientCertSecret }}
- name: redlock-elector-redis-tls-client
  secret:
    secretName: {{ .clientCertSecret }}
    defaultMode: 0444
    items:
      - key: {{ .certKey }}
        path: {{ .certKey }}
      - key: {{ .keyKey }}
        path: {{ .keyKey }}
{{- end }}
{{- end }}
{{- with .values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "redlock-elector.sidecar.probe" -}}
{{- $p := index . 0 -}}
{{- $path := index . 1 -}}
{{- $port := index . 2 -}}
httpGet:
  path: {{ $path }}
  port: {{ $port }}
periodSeconds: {{ $p.periodSeconds }}
timeoutSeconds: {{ $p.timeoutSeconds }}
failureThreshold: {{ $p.failureThreshold }}
{{- end -}}

{{- define "redlock-elector.sidecar.container" -}}
{{- $s := .values.sidecar -}}
{{- /* Before 1.29 the API server drops restartPolicy from init containers (unknown field) or
       ignores it (feature gate off): the sidecar would then block the pod forever. Chart.yaml's
       kubeVersion (>= 1.27, for the non-native form) lets 1.27 and 1.28 through to here. `helm
       template` without --kube-version assumes its own client's version, which is newer. */ -}}
{{- if and $s.native (semverCompare "<1.29.0-0" .root.Capabilities.KubeVersion.Version) -}}
{{- fail (printf "redlock-elector: sidecar.native=true needs Kubernetes >= 1.29 (native sidecars), this cluster is %s: set sidecar.native=false" .root.Capabilities.KubeVersion.Version) -}}
{{- end -}}
- name: {{ $s.name }}
  image: {{ include "redlock-elector.image" . | quote }}
  imagePullPolicy: {{ .values.image.pullPolicy }}
  {{- if $s.native }}
  # Native sidecar: starts before the app containers and stops after them.
  restartPolicy: Always
  {{- end }}
  args:
    - --config
    - /etc/redlock-elector/config.yaml
    {{- with $s.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  env:
    {{- include "redlock-elector.sidecar.env" . | nindent 4 }}
  ports:
    - name: {{ $s.opsPortName }}
      containerPort: {{ $s.opsPort }}
      protocol: TCP
  startupProbe:
    {{- include "redlock-elector.sidecar.probe" (list $s.startupProbe "/readyz" $s.opsPortName) | nindent 4 }}
  livenessProbe:
    {{- include "redlock-elector.sidecar.probe" (list $s.livenessProbe "/healthz" $s.opsPortName) | nindent 4 }}
  readinessProbe:
    {{- include "redlock-elector.sidecar.probe" (list $s.readinessProbe $s.readinessPath $s.opsPortName) | nindent 4 }}
  resources:
    {{- toYaml $s.resources | nindent 4 }}
  securityContext:
    {{- toYaml $s.securityContext | nindent 4 }}
  volumeMounts:
    - name: redlock-elector-config
      mountPath: /etc/redlock-elector
      readOnly: true
    {{- if and .values.redisAuth.existingSecret .values.redisAuth.mountAsFile }}
    - name: redlock-elector-redis-auth
      mountPath: {{ include "redlock-elector.passwordDir" . }}
      readOnly: true
    {{- end }}
    {{- if .values.redisTls.caSecret }}
    - name: redlock-elector-redis-tls-ca
      mountPath: {{ include "redlock-elector.tlsCaDir" . }}
      readOnly: true
    {{- end }}
    {{- if .values.redisTls.clientCertSecret }}
    - name: redlock-elector-redis-tls-client
      mountPath: {{ include "redlock-elector.tlsClientDir" . }}
      readOnly: true
    {{- end }}
    {{- with .values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{- define "redlock-elector.initContainers" -}}
{{- if .values.sidecar.native -}}
{{ include "redlock-elector.sidecar.container" . }}
{{- end -}}
{{- end -}}

{{- define "redlock-elector.containers" -}}
{{- if not .values.sidecar.native -}}
{{ include "redlock-elector.sidecar.container" . }}
{{- end -}}
{{- end -}}

{{- define "redlock-elector.podAnnotations" -}}
checksum/redlock-elector-config: {{ include "redlock-elector.configFile" . | trim | sha256sum }}
{{/* The sidecar's handover protocol: a pod without it runs a build before the release proof
(docs/operating/upgrade-mixed-fleet.md shows how to list them). */ -}}
redlock-elector/handover: release-proof
{{- end -}}
