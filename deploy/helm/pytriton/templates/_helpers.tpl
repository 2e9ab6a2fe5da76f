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

{{/* The chosen autoscaling signal's settings: (dict "target" ... "metricName" ...). */}}
{{- define "pytriton.autoscaling.signal" -}}
{{- $signal := .Values.autoscaling.signal }}
{{- if not (has $signal (list "requests" "queueRatio")) }}
{{- fail (printf "autoscaling.signal=%q: choose \"requests\" (requests in the server per pod) or \"queueRatio\" (queue-to-compute ratio)" (toString $signal)) }}
{{- end }}
{{- toYaml (get .Values.autoscaling $signal) }}
{{- end }}

{{/* The target of the chosen signal, as a quoted Kubernetes quantity. */}}
{{- define "pytriton.autoscaling.target" -}}
{{- $settings := include "pytriton.autoscaling.signal" . | fromYaml }}
{{- $target := toString $settings.target }}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?m?$" $target) }}
{{- fail (printf "autoscaling.%s.target=%q: expected a positive number such as \"4\" or \"0.5\"" .Values.autoscaling.signal $target) }}
{{- end }}
{{- $target | quote }}
{{- end }}

{{/*
The release's own pods in a PromQL selector. A Deployment's pods are named
<fullname>-<pod-template hash>-<5 characters>, each part without "-", so the pattern matches
exactly those: another release whose name starts with this one's has more "-" parts after it.
Kubernetes shortens names beyond 58 characters before the 5, hence the length check.
*/}}
{{- define "pytriton.keda.podSelector" -}}
{{- $fullname := include "pytriton.fullname" . }}
{{- if gt (len $fullname) 46 }}
{{- fail (printf "autoscaling.keda selects this release's pods by name, and Kubernetes shortens the names of pods whose Deployment name (%q, %d characters) is longer than 46: choose a shorter release name" $fullname (len $fullname)) }}
{{- end }}
{{- printf "namespace=%q,pod=~%q" .Release.Namespace (printf "%s-[a-z0-9]+-[a-z0-9]{5}" $fullname) }}
{{- end }}

{{/* The HPA's behavior block, from autoscaling.behavior (also used by KEDA's HPA). */}}
{{- define "pytriton.autoscaling.behavior" -}}
{{- range $direction := list "scaleUp" "scaleDown" }}
{{- $chosen := get $.Values.autoscaling.behavior $direction }}
{{ $direction }}:
  stabilizationWindowSeconds: {{ int $chosen.stabilizationWindowSeconds }}
  selectPolicy: Max
  policies:
    - type: Pods
      value: {{ int $chosen.pods }}
      periodSeconds: {{ int $chosen.periodSeconds }}
    - type: Percent
      value: {{ int $chosen.percent }}
      periodSeconds: {{ int $chosen.periodSeconds }}
{{- end }}
{{- end }}

{{/* Checks of values that span several objects; rendered (as nothing) by the Deployment. */}}
{{- define "pytriton.checks" -}}
{{- $autoscaling := .Values.autoscaling }}
{{- if and $autoscaling.hpa.enabled $autoscaling.keda.enabled }}
{{- fail "autoscaling.hpa.enabled and autoscaling.keda.enabled are both true: choose one, since KEDA creates its own HorizontalPodAutoscaler for the same Deployment" }}
{{- end }}
{{- range $old, $new := dict "targetRatio" "autoscaling.queueRatio.target (with autoscaling.signal=queueRatio)" "scaleDownStabilizationSeconds" "autoscaling.behavior.scaleDown.stabilizationWindowSeconds" }}
{{- if hasKey $autoscaling $old }}
{{- fail (printf "autoscaling.%s was replaced by %s" $old $new) }}
{{- end }}
{{- end }}
{{- if hasKey $autoscaling.hpa "metricName" }}
{{- fail "autoscaling.hpa.metricName was replaced by autoscaling.requests.metricName and autoscaling.queueRatio.metricName" }}
{{- end }}
{{- if or $autoscaling.hpa.enabled $autoscaling.keda.enabled }}
{{- if not (or .Values.serviceMonitor.enabled $autoscaling.externalScrape) }}
{{- fail (printf "autoscaling.%s.enabled=true, but nothing scrapes the pods' metrics, so the autoscaler would never get a value: set serviceMonitor.enabled=true (Prometheus operator), or autoscaling.externalScrape=true if another scrape configuration already collects the metrics port with namespace and pod labels" (ternary "hpa" "keda" (and $autoscaling.hpa.enabled true))) }}
{{- end }}
{{- $_ := include "pytriton.autoscaling.target" . }}
{{- range $direction := list "scaleUp" "scaleDown" }}
{{- $chosen := get $autoscaling.behavior $direction }}
{{- range $field := list "pods" "percent" "periodSeconds" }}
{{- if lt (int (get $chosen $field)) 1 }}
{{- fail (printf "autoscaling.behavior.%s.%s=%v: must be at least 1" $direction $field (get $chosen $field)) }}
{{- end }}
{{- end }}
{{- end }}
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
