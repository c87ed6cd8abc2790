{{/* The release's base name: "<release>-tracedb", or the release alone when it holds "tracedb". */}}
{{- define "tracedb.fullname" -}}
{{- if contains "tracedb" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tracedb" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries; "component" names the part. */}}
{{- define "tracedb.labels" -}}
app.kubernetes.io/name: tracedb
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "tracedb.selector" -}}
app.kubernetes.io/name: tracedb
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tracedb.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* The headless Service of replica group N: its pods' DNS names resolve through it. */}}
{{- define "tracedb.group" -}}
{{ include "tracedb.fullname" .root }}-g{{ .group }}
{{- end -}}

{{/* The DNS name (and gRPC port) every node of group N answers to. */}}
{{- define "tracedb.groupHost" -}}
{{ include "tracedb.group" . }}.{{ .root.Release.Namespace }}.svc.cluster.local
{{- end -}}

{{/* --max-memory: 80% of the container's memory limit. */}}
{{- define "tracedb.maxMemory" -}}
{{ div (mul (int .) 4) 5 }}MiB
{{- end -}}

{{/* The pod security context of tracedb's pods: the image's non-root user. */}}
{{- define "tracedb.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "tracedb.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Whether to make a ServiceMonitor. */}}
{{- define "tracedb.serviceMonitor" -}}
{{- $want := toString .Values.serviceMonitor.enabled -}}
{{- if or (eq $want "true") (and (eq $want "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) -}}
true
{{- end -}}
{{- end -}}
