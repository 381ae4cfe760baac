{{- define "slipway-provisioner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slipway-provisioner.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "slipway-provisioner.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "slipway-provisioner.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "slipway-provisioner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slipway-provisioner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "slipway-provisioner.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "slipway-provisioner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The daemon's pod spec, shared by the Deployment and the KEDA ScaledJob's Jobs; `once` adds --once. */}}
{{- define "slipway-provisioner.podSpec" -}}
{{- $root := .root -}}
{{- $once := .once -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
serviceAccountName: {{ $root.Values.serviceAccount.name | default (ternary (include "slipway-provisioner.fullname" $root) "default" $root.Values.serviceAccount.create) }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ $root.Values.terminationGracePeriodSeconds }}
{{- if $once }}
restartPolicy: Never
{{- end }}
containers:
  - name: provisionerd
    image: "{{ $root.Values.image.repository }}:{{ $root.Values.image.tag | default $root.Chart.AppVersion }}"
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    args:
      - provisionerd
      - start
      {{- if $once }}
      - --once
      {{- end }}
      {{- /* A provisioner key fixes the daemon's tags (the daemon refuses --tag with --key). */}}
      {{- if eq $root.Values.auth "psk" }}
      {{- range $key, $value := $root.Values.tags }}
      - --tag
      - {{ printf "%s=%s" $key (toString $value) | quote }}
      {{- end }}
      {{- end }}
      {{- with $root.Values.idleExit }}
      {{- if not $once }}
      - --idle-exit
      - {{ . | quote }}
      {{- end }}
      {{- end }}
      {{- range $root.Values.extraArgs }}
      - {{ . | quote }}
      {{- end }}
    env:
      - name: SLIPWAY_URL
        value: {{ $root.Values.url | quote }}
      # Each pod is listed under its own name.
      - name: SLIPWAY_PROVISIONER_DAEMON_NAME
        valueFrom:
          fieldRef:
            fieldPath: metadata.name
      - name: SLIPWAY_PROVISIONER_CACHE_DIR
        value: {{ printf "%s/slipway/provisioner" $root.Values.cacheDir | quote }}
      - name: XDG_CACHE_HOME
        value: {{ $root.Values.cacheDir | quote }}
      {{- with $root.Values.initCacheSize }}
      - name: SLIPWAY_PROVISIONER_INIT_CACHE_SIZE
        value: {{ . | quote }}
      {{- end }}
      - name: {{ ternary "SLIPWAY_PROVISIONER_DAEMON_PSK" "SLIPWAY_PROVISIONER_DAEMON_KEY" (eq $root.Values.auth "psk") }}
        valueFrom:
          secretKeyRef:
            name: {{ $root.Values.existingSecret }}
            key: {{ ternary $root.Values.secretKeys.psk $root.Values.secretKeys.key (eq $root.Values.auth "psk") }}
      {{- with $root.Values.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    resources:
      {{- toYaml $root.Values.resources | nindent 6 }}
    securityContext:
      {{- toYaml $root.Values.securityContext | nindent 6 }}
    volumeMounts:
      - name: cache
        mountPath: {{ $root.Values.cacheDir }}
      - name: tmp
        mountPath: /tmp
      {{- with $root.Values.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
volumes:
  - name: cache
    emptyDir:
      {{- with $root.Values.cacheSizeLimit }}
      sizeLimit: {{ . }}
      {{- end }}
  - name: tmp
    emptyDir:
      {{- with $root.Values.tmpSizeLimit }}
      sizeLimit: {{ . }}
      {{- end }}
  {{- with $root.Values.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The queue-depth series of this pool's tag set: protocol/tags.py queue_name (keys sorted, keys and values
percent-encoded as Python's quote does (a space is %20), with scope=organization and owner="" as the server
normalises them). */}}
{{- define "slipway-provisioner.queue" -}}
{{- $tags := merge (dict "scope" "organization" "owner" "") (omit .Values.tags "scope" "owner") -}}
{{- $parts := list -}}
{{- range $key := keys $tags | sortAlpha -}}
{{- $parts = append $parts (printf "%s=%s" (urlquery $key | replace "+" "%20") (urlquery (toString (index $tags $key)) | replace "+" "%20")) -}}
{{- end -}}
slipway:jobs:{{ join "&" $parts }}
{{- end }}
