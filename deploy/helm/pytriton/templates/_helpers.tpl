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
A Kubernetes quantity in bytes (a float), for the chart's own checks. Follows Kubernetes'
quantity grammar (k8s.io/apimachinery resource.Quantity): a number (1, 1.5, .5, 1.) with at
most one suffix: binary Ki Mi Gi Ti Pi Ei, decimal n u m k M G T P E, or an exponent e<int> /
E<int> (1e3). Negative quantities and other spellings ("1.5GB", "1 Gi") are refused with the
value named. Call with (dict "name" "<value path>" "value" <quantity>).
*/}}
{{- define "pytriton.quantity" -}}
{{- $text := toString .value }}
{{- $grammar := "^\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$" }}
{{- if not (regexMatch $grammar $text) }}
{{- fail (printf "%s=%q is not a Kubernetes quantity: expected a number with an optional suffix (Ki, Mi, Gi, Ti, Pi, Ei; n, u, m, k, M, G, T, P, E; or an exponent such as e3), e.g. 512Mi, 1.5Gi, 16G" .name $text) }}
{{- end }}
{{- $number := regexReplaceAll $grammar $text "${1}" }}
{{- $suffix := regexReplaceAll $grammar $text "${3}" }}
{{- $factors := dict "" 1.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 "n" 1e-9 "u" 1e-6 "m" 1e-3 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 }}
{{- if hasKey $factors $suffix }}
{{- mulf (float64 $number) (get $factors $suffix) }}
{{- else }}
{{- /* An exponent: Go's float parser reads "1.5e3" as it stands. */}}
{{- float64 (printf "%s%s" $number $suffix) }}
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
{{- $shm := include "pytriton.quantity" (dict "name" "shm.sizeLimit" "value" .Values.shm.sizeLimit) | float64 }}
{{- $beyond := include "pytriton.quantity" (dict "name" "memoryBeyondShm" "value" .Values.memoryBeyondShm) | float64 }}
{{- $limitBytes := include "pytriton.quantity" (dict "name" "resources.limits.memory" "value" $limit) | float64 }}
{{- if lt $limitBytes (addf $shm $beyond) }}
{{- fail (printf "resources.limits.memory=%v is too small: it must hold shm.sizeLimit (%v, memory-backed) + memoryBeyondShm (%v) = %.0fMi" $limit .Values.shm.sizeLimit .Values.memoryBeyondShm (ceil (divf (addf $shm $beyond) 1048576))) }}
{{- end }}
{{- range $name, $value := .Values.triton.config }}
{{- if and (eq (upper $name) "ALLOW_HTTP") (has (lower (toString $value)) (list "false" "0" "no" "off")) }}
{{- fail (printf "triton.config.%s=%v switches HTTP off, but the startup, readiness and liveness probes (and helm test) ask Triton's HTTP health endpoints: keep HTTP on (inference may still go through gRPC only, by what your clients use)" $name $value) }}
{{- end }}
{{- end }}
{{- $policy := .Values.networkPolicy }}
{{- if and $policy.enabled (not $policy.metricsNamespaces) (not $policy.metricsNamespaceSelector) }}
{{- if or .Values.serviceMonitor.enabled $autoscaling.hpa.enabled $autoscaling.keda.enabled }}
{{- fail (printf "networkPolicy.metricsNamespaces is empty (and no metricsNamespaceSelector), so the NetworkPolicy lets nothing reach the metrics port, but %s needs Prometheus to scrape it: name Prometheus' namespace in networkPolicy.metricsNamespaces" (ternary "serviceMonitor.enabled=true" "the autoscaler" .Values.serviceMonitor.enabled)) }}
{{- end }}
{{- end }}
{{- if and .Values.helmTest.enabled .Values.helmTest.input (not .Values.helmTest.model) }}
{{- fail "helmTest.input is set but helmTest.model is empty: name the model the request is for" }}
{{- end }}
{{- if and .Values.accessToken.enabled (not .Values.accessToken.existingSecret) (not .Values.accessToken.value) }}
{{- fail "accessToken.enabled=true needs accessToken.existingSecret (a Secret you manage) or accessToken.value" }}
{{- end }}
{{- end }}

{{/*
The Deployment's strategy: the one in values, else with GPUs no surge (a surge pod would wait
for a GPU a full pool does not have, and the rollout would stall), else Kubernetes' default.
*/}}
{{- define "pytriton.strategy" -}}
{{- if .Values.strategy }}
{{- toYaml .Values.strategy }}
{{- else if .Values.gpu.enabled }}
type: RollingUpdate
rollingUpdate:
  maxSurge: 0
  maxUnavailable: 1
{{- end }}
{{- end }}
