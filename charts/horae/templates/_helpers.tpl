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
     with (list $ "component"): each component reaches PostgreSQL as its own role. */}}
{{- define "horae.env" -}}
{{- $root := index . 0 -}}
{{- $role := index $root.Values.database.roles (index . 1) -}}
- name: HORAE_DATABASE_URL
  valueFrom: {secretKeyRef: {name: {{ $role.existingSecret }}, key: {{ $root.Values.database.urlKey }}}}
- name: HORAE_BROKER_URL
  valueFrom: {secretKeyRef: {name: {{ $root.Values.broker.existingSecret }}, key: {{ $root.Values.broker.urlKey }}}}
- name: HORAE_BROKER_PREFIX
  value: {{ $root.Values.broker.prefix | quote }}
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
{{- end -}}

{{- define "horae.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
