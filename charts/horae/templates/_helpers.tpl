{{/* Names and shared pieces of the Horae chart. */}}

{{- define "horae.fullname" -}}
{{- printf "%s" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "horae.labels" -}}
app.kubernetes.io/name: horae
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "horae.selector" -}}
app.kubernetes.io/name: horae
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "horae.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* Pod and container security: non-root, read-only root filesystem, no escalation. */}}
{{- define "horae.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "horae.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

{{/* Environment every component shares: where the store and broker are, who it is. Called
     with (list $ "component"): each component reaches PostgreSQL as its own role; with
     (list $ "component" "no-broker"), for one that never talks to RabbitMQ (the aggregated
     API), without the broker's URL. */}}
{{- define "horae.env" -}}
{{- $root := index . 0 -}}
{{- $role := index $root.Values.database.roles (index . 1) -}}
- name: HORAE_DATABASE_URL
  valueFrom: {secretKeyRef: {name: {{ $role.existingSecret }}, key: {{ $root.Values.database.urlKey }}}}
{{- if ne (len .) 3 }}
- name: HORAE_BROKER_URL
  valueFrom: {secretKeyRef: {name: {{ $root.Values.broker.existingSecret }}, key: {{ $root.Values.broker.urlKey }}}}
- name: HORAE_BROKER_PREFIX
  value: {{ $root.Values.broker.prefix | quote }}
{{- end }}
- name: HORAE_DATABASE_POOL_SIZE
  value: {{ $root.Values.database.poolSize | quote }}
- name: HORAE_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: HORAE_IDENTITY
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: HORAE_METRICS_PORT
  value: {{ $root.Values.metrics.port | quote }}
- name: HORAE_LOG_LEVEL
  value: INFO
{{- include "horae.storeGroupEnv" (list $root (index . 1)) }}
{{- end -}}

{{/* Store groups beyond `main` (store.groups): HORAE_STORE_GROUP_<NAME>_URL, the variable
     horae.store.groups.group_env names. Called with (list $ who): "migrations" gets each
     group's owner URL (existingSecret); a component gets its own (roles.<component>) when
     given, and otherwise nothing: it then connects to the address the catalog keeps with
     its own credentials (those of its HORAE_DATABASE_URL). Names are checked here, by the
     catalog's rule, so a typo fails at install rather than leaving a group unreached. */}}
{{- define "horae.storeGroupEnv" -}}
{{- $root := index . 0 -}}
{{- $who := index . 1 -}}
{{- $seen := dict -}}
{{- range $i, $group := $root.Values.store.groups }}
{{- $name := toString $group.name -}}
{{- if not (regexMatch "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$" $name) }}
{{- fail (printf "store.groups[%d].name %q: a store group's name is 1 to 32 lowercase letters, digits and '-', starting with a letter and not ending with '-' (the name given to `horae store add-group`)" $i $name) }}
{{- end }}
{{- if eq $name "main" }}
{{- fail (printf "store.groups[%d].name \"main\": main is the first group, the database of database.existingSecret and database.roles; list only the groups added with `horae store add-group`" $i) }}
{{- end }}
{{- if hasKey $seen $name }}
{{- fail (printf "store.groups[%d].name %q: listed twice" $i $name) }}
{{- end }}
{{- $_ := set $seen $name true }}
{{- $key := $group.key | default "uri" }}
{{- $secret := "" }}
{{- if eq $who "migrations" }}
{{- $secret = $group.existingSecret }}
{{- else if hasKey ($group.roles | default (dict)) $who }}
{{- $role := index $group.roles $who }}
{{- $secret = $role.existingSecret }}
{{- $key = $role.key | default $key }}
{{- end }}
{{- if $secret }}
- name: HORAE_STORE_GROUP_{{ $name | upper | replace "-" "_" }}_URL
  valueFrom: {secretKeyRef: {name: {{ $secret }}, key: {{ $key }}}}
{{- end }}
{{- end }}
{{- end -}}

{{/* Where and how a pod is scheduled; every pod template of the chart includes it. Called
     with (dict "root" $ "component" NAME): a topologySpreadConstraints entry without a
     labelSelector spreads the pods of that component (its selector labels). */}}
{{- define "horae.scheduling" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- with $root.Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.topologySpreadConstraints }}
{{- $constraints := list }}
{{- range . }}
{{- $constraint := . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $own := include "horae.podSelector" (dict "root" $root "component" $component) | fromYaml }}
{{- $constraint = merge (dict "labelSelector" (dict "matchLabels" $own)) $constraint }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
topologySpreadConstraints: {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The selector labels of a component's pods: the chart's, or a worker pool's
     (horae.dev/workerpool, as the operator labels a WorkerPool's pods). */}}
{{- define "horae.podSelector" -}}
{{- if eq .component "worker" -}}
horae.dev/workerpool: {{ .root.Values.workerPool.name }}
{{- else -}}
{{ include "horae.selector" . }}
{{- end -}}
{{- end -}}

{{/* A pod template's metadata: its selector labels and podAnnotations. Called with
     (dict "root" $ "component" NAME). */}}
{{- define "horae.podMetadata" -}}
labels: {{- include "horae.podSelector" . | nindent 2 }}
{{- with .root.Values.podAnnotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A ServiceAccount's annotations: serviceAccounts.annotations, then the component's own
     (serviceAccounts.<component>.annotations) over them. Called with (list $ NAME). */}}
{{- define "horae.serviceAccountAnnotations" -}}
{{- $root := index . 0 -}}
{{- $accounts := $root.Values.serviceAccounts -}}
{{- $own := (get ($accounts | default dict) (index . 1)) | default dict -}}
{{- $annotations := merge (dict) ($own.annotations | default dict) ($accounts.annotations | default dict) -}}
{{- with $annotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
