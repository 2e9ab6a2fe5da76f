{{/* Names and labels shared by every object of a release. */}}

{{- define "pytriton.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-pytriton, or the release name alone when it already holds the chart's name. */}}
{{- define "pytriton.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "pytriton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pytriton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pytriton.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "pytriton.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "pytriton.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pytriton.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference; a moving tag ("latest" or none) is refused. */}}
{{- define "pytriton.image" -}}
{{- $image := .Values.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- $tag := toString $image.tag }}
{{- if or (eq $tag "") (eq (lower $tag) "latest") }}
{{- fail (printf "image.tag=%q is not allowed: set a fixed version tag (or image.digest), since a moving tag makes a rollback or a cached node serve another build than the one tested" $tag) }}
{{- end }}
{{- printf "%s:%s" $image.repository $tag }}
{{- end }}
{{- end }}

{{/*
A memory quantity in MiB (rounded down), for the chart's own checks. Accepts the binary
suffixes Ki, Mi, Gi, Ti and plain bytes; other spellings are refused with the value named.
Call with (dict "name" "<value path>" "value" <quantity>).
*/}}
{{- define "pytriton.mebibytes" -}}
{{- $text := toString .value }}
{{- if regexMatch "^[0-9]+Ki$" $text }}{{ div (trimSuffix "Ki" $text | atoi) 1024 }}
{{- else if regexMatch "^[0-9]+Mi$" $text }}{{ trimSuffix "Mi" $text | atoi }}
{{- else if regexMatch "^[0-9]+Gi$" $text }}{{ mul (trimSuffix "Gi" $text | atoi) 1024 }}
{{- else if regexMatch "^[0-9]+Ti$" $text }}{{ mul (trimSuffix "Ti" $text | atoi) 1048576 }}
{{- else if regexMatch "^[0-9]+$" $text }}{{ div (atoi $text) 1048576 }}
{{- else }}
{{- fail (printf "%s=%q: expected a whole number with Ki, Mi, Gi or Ti (or plain bytes), so that the chart can check the memory budget" .name $text) }}
{{- end }}
{{- end }}

{{/* The least grace period that lets the preStop sleep, the drain and pytriton's kill margin run. */}}
{{- define "pytriton.minimumGracePeriod" -}}
{{- add (int .Values.lifecycle.preStopSleepSeconds) (int .Values.triton.exitTimeoutSecs) 15 5 }}
{{- end }}

{{- define "pytriton.terminationGracePeriodSeconds" -}}
{{- $minimum := include "pytriton.minimumGracePeriod" . | int }}
{{- $chosen := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $chosen }}
{{- $minimum }}
{{- else if lt (int $chosen) $minimum }}
{{- fail (printf "terminationGracePeriodSeconds=%v is too short: it must be at least lifecycle.preStopSleepSeconds (%v) + triton.exitTimeoutSecs (%v) + 15 (pytriton's kill margin) + 5 = %d, or Kubernetes kills the server during its drain" $chosen .Values.lifecycle.preStopSleepSeconds .Values.triton.exitTimeoutSecs $minimum) }}
{{- else }}
{{- int $chosen }}
{{- end }}
{{- end }}

{{/* Checks of values that span several objects; rendered (as nothing) by the Deployment. */}}
{{- define "pytriton.checks" -}}
{{- if and .Values.autoscaling.hpa.enabled .Values.autoscaling.keda.enabled }}
{{- fail "autoscaling.hpa.enabled and autoscaling.keda.enabled are both true: choose one, since KEDA creates its own HorizontalPodAutoscaler for the same Deployment" }}
{{- end }}
{{- range $name, $_ := .Values.triton.config }}
{{- if has (upper $name) (list "HTTP_PORT" "GRPC_PORT" "METRICS_PORT" "EXIT_TIMEOUT_SECS") }}
{{- fail (printf "triton.config.%s is set by the chart: use ports.* or triton.exitTimeoutSecs, which the probes, the Service and the grace period follow" $name) }}
{{- end }}
{{- end }}
{{- $limit := dig "limits" "memory" "" .Values.resources }}
{{- if not $limit }}
{{- fail "resources.limits.memory is required: /dev/shm is memory-backed and counts against it" }}
{{- end }}
{{- $shm := include "pytriton.mebibytes" (dict "name" "shm.sizeLimit" "value" .Values.shm.sizeLimit) | int }}
{{- $beyond := include "pytriton.mebibytes" (dict "name" "memoryBeyondShm" "value" .Values.memoryBeyondShm) | int }}
{{- $limitMi := include "pytriton.mebibytes" (dict "name" "resources.limits.memory" "value" $limit) | int }}
{{- if lt $limitMi (add $shm $beyond) }}
{{- fail (printf "resources.limits.memory=%s is too small: it must hold shm.sizeLimit (%s, memory-backed) + memoryBeyondShm (%s) = %dMi" $limit .Values.shm.sizeLimit .Values.memoryBeyondShm (add $shm $beyond)) }}
{{- end }}
{{- if and .Values.accessToken.enabled (not .Values.accessToken.existingSecret) (not .Values.accessToken.value) }}
{{- fail "accessToken.enabled=true needs accessToken.existingSecret (a Secret you manage) or accessToken.value" }}
{{- end }}
{{- end }}
