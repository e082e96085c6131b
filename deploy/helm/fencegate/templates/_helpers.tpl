{{/*
fencegate.fullname: the release's base name: the release name when it
already contains the chart's name (helm install fencegate ...: "fencegate"),
else "<release>-fencegate". The worker-facing Service carries it.
*/}}
{{- define "fencegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fencegate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "fencegate.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* fencegate.replicasService: the headless Service the replicas reach each other through. */}}
{{- define "fencegate.replicasService" -}}
{{- printf "%s-replicas" (include "fencegate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
fencegate.labels: on every object. app.kubernetes.io/part-of is always
"fencegate" (no override): the FencegateReplicaDown alert selects the
scraped pods by it and by app.kubernetes.io/component, whatever the
release is called.
*/}}
{{- define "fencegate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fencegate
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* fencegate.selectorLabels: name, instance and component (call with dict "root" $ "component" "gateway"). */}}
{{- define "fencegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fencegate.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "fencegate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}
{{- end -}}

{{/* fencegate.gatewayPort: the gateway's one port, HTTPS with tls.enabled. */}}
{{- define "fencegate.gatewayPort" -}}
{{- if .Values.tls.enabled -}}{{ .Values.service.httpsPort }}{{- else -}}{{ .Values.service.httpPort }}{{- end -}}
{{- end -}}

{{- define "fencegate.gatewayScheme" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* fencegate.podSecurityContext: non-root; fsGroup reads the 0440 secret files. */}}
{{- define "fencegate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "fencegate.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

{{/* fencegate.configEnv: the ConfigMap every long-running container reads. */}}
{{- define "fencegate.configEnv" -}}
- configMapRef: {name: {{ include "fencegate.fullname" . }}}
{{- end -}}

{{/*
fencegate.migrateInit: `fencegate migrate` before the component starts.
Every gateway and materializer pod runs it; concurrent runs serialise:
internal/migrate applies each migration in its own transaction that first
takes the line's transaction-scoped advisory lock
(pg_advisory_xact_lock(LockID)) and then skips a version already recorded,
so a second pod waits for the first and finds nothing left to do
(TestConcurrentApplyOnAnEmptyDatabase: four concurrent runs on an empty
database apply each migration once between them; the record table is
created under the same lock). An upgrade's new pods migrate before they serve; old pods keep
serving on the schema they know (migrations only add). The owner role's
URL reaches the init container only, never the long-running container.
*/}}
{{- define "fencegate.migrateInit" -}}
- name: migrate
  image: {{ include "fencegate.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["migrate"]
  env:
    - name: FENCEGATE_DATABASE_URL
      valueFrom: {secretKeyRef: {name: {{ .Values.secretName }}, key: migrate-database-url}}
  resources:
    {{- toYaml .Values.migrations.resources | nindent 4 }}
  securityContext:
    {{- include "fencegate.containerSecurityContext" . | nindent 4 }}
{{- end -}}

{{/* fencegate.extraEnv: a map of FENCEGATE_* settings as env entries, sorted. */}}
{{- define "fencegate.extraEnv" -}}
{{- range $k, $v := . }}
- name: {{ $k }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end -}}

{{/* fencegate.metricsAnnotations: annotation-based scraping (call with dict "port" N "scheme" S). */}}
{{- define "fencegate.metricsAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
prometheus.io/scheme: {{ .scheme }}
{{- end -}}

{{/* fencegate.serviceMonitor: true when the ServiceMonitors are rendered. */}}
{{- define "fencegate.serviceMonitor" -}}
{{- $c := toString .Values.serviceMonitor.create -}}
{{- if eq $c "true" -}}true
{{- else if and (eq $c "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor") -}}true
{{- else if and (ne $c "auto") (ne $c "false") -}}{{ fail (printf "serviceMonitor.create is %q: auto, true or false" $c) }}
{{- end -}}
{{- end -}}

{{/* fencegate.backendEgress: Postgres, Kafka and DNS, the egress both components need (migrations included). */}}
{{- define "fencegate.backendEgress" -}}
{{- $np := .Values.networkPolicy -}}
{{- range $name := list "postgres" "kafka" -}}
{{- $b := index $np $name }}
- to:
    {{- range $b.cidrs }}
    - ipBlock: {cidr: {{ . }}}
    {{- end }}
    {{- with $b.peers }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    {{- range $b.ports }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
{{- end }}
- to:
    {{- toYaml $np.dns.peers | nindent 4 }}
  ports:
    {{- range $np.dns.ports }}
    - {protocol: UDP, port: {{ . }}}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
{{- end -}}
