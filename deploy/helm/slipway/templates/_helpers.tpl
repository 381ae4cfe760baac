{{- define "slipway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slipway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "slipway.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "slipway.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "slipway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slipway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "slipway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "slipway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Secret the pods read: the operator's own (existingSecret), else the one this chart makes from .Values.secrets. */}}
{{- define "slipway.secretName" -}}
{{- .Values.existingSecret | default (include "slipway.fullname" .) }}
{{- end }}

{{/* The URL users and agents reach the server at: accessUrl, else the ingress host, else the in-cluster Service. */}}
{{- define "slipway.accessUrl" -}}
{{- if .Values.accessUrl }}
{{- .Values.accessUrl }}
{{- else if and .Values.ingress.enabled .Values.ingress.host }}
{{- printf "%s://%s" (ternary "https" "http" .Values.ingress.tls.enabled) .Values.ingress.host }}
{{- else }}
{{- printf "http://%s.%s.svc:%d" (include "slipway.fullname" .) .Release.Namespace (int .Values.service.port) }}
{{- end }}
{{- end }}

{{- define "slipway.wildcardAccessUrl" -}}
{{- if .Values.wildcardAccessUrl }}
{{- .Values.wildcardAccessUrl }}
{{- else if .Values.ingress.enabled }}
{{- .Values.ingress.wildcardHost }}
{{- end }}
{{- end }}
