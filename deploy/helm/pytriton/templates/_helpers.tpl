{{/* Names and labels shared by every object of a release. */}}

{{/* The chart's name, or nameOverride. */}}
{{- define "pytriton.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
fullnameOverride, else <release>-<name>, or the release name alone when it already holds the
name (so `helm install pytriton ...` does not give pytriton-pytriton).
*/}}
{{- define "pytriton.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "pytriton.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels that select the server's pods (Deployment, Service, PDB, NetworkPolicy, monitors). */}}
{{- define "pytriton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pytriton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Label keys the chart sets itself; commonLabels may not change them. */}}
{{- define "pytriton.ownLabelKeys" -}}
{{- toJson (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "app.kubernetes.io/component" "helm.sh/chart") }}
{{- end }}

{{/*
The labels of every object: the chart's own and commonLabels (built as one map, so no key is
written twice). Call with the root context, or with (dict "root" $ "extra" <map>) to add
labels of one object (an extra label never replaces one of the chart's).
*/}}
{{- define "pytriton.labels" -}}
{{- $root := . }}
{{- $extra := dict }}
{{- if hasKey . "root" }}
{{- $root = .root }}
{{- $extra = .extra }}
{{- end }}
{{- $own := include "pytriton.selectorLabels" $root | fromYaml }}
{{- $_ := set $own "helm.sh/chart" (printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-") }}
{{- $_ := set $own "app.kubernetes.io/version" (toString $root.Chart.AppVersion) }}
{{- $_ := set $own "app.kubernetes.io/managed-by" $root.Release.Service }}
{{- toYaml (merge $own (deepCopy (default dict $root.Values.commonLabels)) (deepCopy (default dict $extra))) }}
{{- end }}

{{/*
The labels of the `helm test` pod. They must not match the server's selector: the Service
would send it traffic, the PodDisruptionBudget would count it as one of the server's pods
(a finished test pod is an unavailable one, so a drain could be refused), and a PodMonitor
would scrape it. So its app.kubernetes.io/name is <name>-test; the NetworkPolicy lets it in by
instance and component.
*/}}
{{- define "pytriton.testLabels" -}}
{{- $labels := include "pytriton.labels" . | fromYaml }}
{{- $_ := set $labels "app.kubernetes.io/name" (printf "%s-test" (include "pytriton.name" . | trunc 58 | trimSuffix "-")) }}
{{- $_ := set $labels "app.kubernetes.io/component" "helm-test" }}
{{- toYaml $labels }}
{{- end }}

{{/*
The labels of the server's pods: the selector's, podLabels, and commonLabels where podLabels
leave a key free (the pod's own value is the more specific one).
*/}}
{{- define "pytriton.podLabels" -}}
{{- $labels := include "pytriton.selectorLabels" . | fromYaml }}
{{- toYaml (merge $labels (deepCopy (default dict .Values.podLabels)) (deepCopy (default dict .Values.commonLabels))) }}
{{- end }}

{{- define "pytriton.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pytriton.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference: [registry/]repository then @digest or :tag. A moving tag ("latest" or none)
is refused, and so is a registry given twice (image.registry and a host in image.repository):
the first part of a repository is a registry host when it holds "." or ":" or is "localhost",
as Docker reads it.
*/}}
{{- define "pytriton.image" -}}
{{- $image := .Values.image }}
{{- $repository := $image.repository }}
{{- with $image.registry }}
{{- $parts := splitList "/" $repository }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- fail (printf "image.registry=%q is set, but image.repository=%q already starts with the registry host %q: name the host in one of the two (e.g. image.repository=%q)" . $repository $first (join "/" (rest $parts))) }}
{{- end }}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}
{{- end }}
{{- if $image.digest }}
{{- printf "%s@%s" $repository $image.digest }}
{{- else }}
{{- $tag := toString $image.tag }}
{{- if or (eq $tag "") (eq (lower $tag) "latest") }}
{{- fail (printf "image.tag=%q is not allowed: set a fixed version tag (or image.digest), since a moving tag makes a rollback or a cached node serve another build than the one tested" $tag) }}
{{- end }}
{{- printf "%s:%s" $repository $tag }}
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

{{/* triton.drainServingSeconds rounded up to whole seconds (0 when unset), for the grace period. */}}
{{- define "pytriton.drainServingSeconds" -}}
{{- $chosen := .Values.triton.drainServingSeconds }}
{{- if kindIs "invalid" $chosen }}
{{- 0 }}
{{- else }}
{{- int (ceil (float64 $chosen)) }}
{{- end }}
{{- end }}

{{/*
The least grace period that lets the preStop sleep, the serving part of the drain, the drain of
the requests in flight and pytriton's kill margin run, one after the other.
*/}}
{{- define "pytriton.minimumGracePeriod" -}}
{{- add (int .Values.lifecycle.preStopSleepSeconds) (include "pytriton.drainServingSeconds" . | int) (int .Values.triton.exitTimeoutSecs) 15 5 }}
{{- end }}

{{- define "pytriton.terminationGracePeriodSeconds" -}}
{{- $minimum := include "pytriton.minimumGracePeriod" . | int }}
{{- $chosen := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $chosen }}
{{- $minimum }}
{{- else if lt (int $chosen) $minimum }}
{{- fail (printf "terminationGracePeriodSeconds=%v is too short: it must be at least lifecycle.preStopSleepSeconds (%v) + triton.drainServingSeconds (%v, rounded up) + triton.exitTimeoutSecs (%v) + 15 (pytriton's kill margin) + 5 = %d, or Kubernetes kills the server during its drain" $chosen .Values.lifecycle.preStopSleepSeconds (include "pytriton.drainServingSeconds" .) .Values.triton.exitTimeoutSecs $minimum) }}
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

{{/* The target of the chosen signal, as a quoted Kubernetes quantity above 0. */}}
{{- define "pytriton.autoscaling.target" -}}
{{- $settings := include "pytriton.autoscaling.signal" . | fromYaml }}
{{- $target := toString $settings.target }}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?m?$" $target) }}
{{- fail (printf "autoscaling.%s.target=%q: expected a positive number such as \"4\" or \"0.5\"" .Values.autoscaling.signal $target) }}
{{- end }}
{{- if eq (float64 (trimSuffix "m" $target)) 0.0 }}
{{- fail (printf "autoscaling.%s.target=%q: expected a number above 0 such as \"4\" or \"0.5\", since the autoscaler divides the signal by it" .Values.autoscaling.signal $target) }}
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
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled are both true: choose one, since both would scrape every pod and each series would be counted twice (the autoscaling signal sums them)" }}
{{- end }}
{{- if or $autoscaling.hpa.enabled $autoscaling.keda.enabled }}
{{- $autoscaler := ternary "hpa" "keda" (and $autoscaling.hpa.enabled true) }}
{{- if not (or .Values.serviceMonitor.enabled .Values.podMonitor.enabled $autoscaling.externalScrape) }}
{{- fail (printf "autoscaling.%s.enabled=true, but nothing scrapes the pods' metrics, so the autoscaler would never get a value: set serviceMonitor.enabled=true or podMonitor.enabled=true (Prometheus operator), or autoscaling.externalScrape=true if another scrape configuration already collects the metrics port with namespace and pod labels" $autoscaler) }}
{{- end }}
{{- /* A monitor Prometheus does not select scrapes nothing: the usual install selects by its release label. */}}
{{- range $kind := list "serviceMonitor" "podMonitor" }}
{{- $monitor := get $.Values $kind }}
{{- if and $monitor.enabled (not $monitor.labels) (not $monitor.labelsNotNeeded) }}
{{- fail (printf "autoscaling.%s.enabled=true with %s.labels empty: the Prometheus operator's Prometheus picks up only the monitors its %sSelector matches (kube-prometheus-stack: release=<its Helm release>), so the autoscaler would silently get no value. Set %s.labels (e.g. {release: kube-prometheus-stack}; `kubectl get prometheus -A -o jsonpath='{..%sSelector}'` shows what yours selects), or %s.labelsNotNeeded=true if your Prometheus selects monitors without labels" $autoscaler $kind $kind $kind $kind $kind) }}
{{- end }}
{{- end }}
{{- if gt (int $autoscaling.minReplicas) (int $autoscaling.maxReplicas) }}
{{- fail (printf "autoscaling.minReplicas=%v is greater than autoscaling.maxReplicas=%v: expected minReplicas <= maxReplicas" $autoscaling.minReplicas $autoscaling.maxReplicas) }}
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
{{- if has (upper $name) (list "HTTP_PORT" "GRPC_PORT" "METRICS_PORT" "OPENAI_PORT" "EXIT_TIMEOUT_SECS" "DRAIN_SERVING_S") }}
{{- fail (printf "triton.config.%s is set by the chart: use ports.*, triton.exitTimeoutSecs or triton.drainServingSeconds, which the probes, the Service and the grace period follow" $name) }}
{{- end }}
{{- end }}
{{- /* Each endpoint needs a port of its own: the second listener would fail to bind. */}}
{{- $ports := .Values.ports }}
{{- range $pair := list (list "http" "grpc") (list "http" "metrics") (list "grpc" "metrics") }}
{{- $a := index $pair 0 }}
{{- $b := index $pair 1 }}
{{- if eq (int (get $ports $a)) (int (get $ports $b)) }}
{{- fail (printf "ports.%s=%v is the same as ports.%s: expected a port of its own for each of http, grpc and metrics (Triton cannot listen twice on one port)" $b (get $ports $b) $a) }}
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
{{- include "pytriton.checks.cluster" . }}
{{- end }}

{{/* Checks of the values that fit the pods and their exposure into a cluster. */}}
{{- define "pytriton.checks.cluster" -}}
{{- $budget := toString .Values.podDisruptionBudget.maxUnavailable }}
{{- if and .Values.podDisruptionBudget.enabled (not (regexMatch "^([0-9]+|([0-9]|[1-9][0-9]|100)%)$" $budget)) }}
{{- fail (printf "podDisruptionBudget.maxUnavailable=%q: expected a number of pods (0 or more) or a percentage such as \"25%%\"" $budget) }}
{{- end }}
{{- $own := include "pytriton.ownLabelKeys" . | fromJsonArray }}
{{- range $key, $_ := .Values.commonLabels }}
{{- if has $key $own }}
{{- fail (printf "commonLabels.%s is set by the chart itself (it selects the pods or names the release): use nameOverride for the name, or another label key" $key) }}
{{- end }}
{{- end }}
{{- range $key, $_ := .Values.podLabels }}
{{- if has $key (list "app.kubernetes.io/name" "app.kubernetes.io/instance") }}
{{- fail (printf "podLabels.%s is one of the Deployment's selector labels, which the chart sets: use nameOverride, or another label key" $key) }}
{{- end }}
{{- end }}
{{- if and (not .Values.serviceAccount.create) .Values.serviceAccount.annotations }}
{{- fail (printf "serviceAccount.annotations is set, but serviceAccount.create=false: the chart renders no ServiceAccount to carry them; annotate your own ServiceAccount (%q) instead" (default "default" .Values.serviceAccount.name)) }}
{{- end }}
{{- if and .Values.service.loadBalancerSourceRanges (ne .Values.service.type "LoadBalancer") }}
{{- fail (printf "service.loadBalancerSourceRanges is set, but service.type=%q: only a LoadBalancer Service uses it; set service.type=LoadBalancer or drop the ranges" .Values.service.type) }}
{{- end }}
{{- /* The chart's own volumes and mounts; a second one of a name or path is refused by the API server, less clearly. */}}
{{- $volumes := list "dshm" "tmp" "home" }}
{{- range .Values.extraVolumes }}
{{- if has .name $volumes }}
{{- fail (printf "extraVolumes: a volume named %q already exists (the chart's dshm, tmp and home, or an earlier entry): choose another name" .name) }}
{{- end }}
{{- $volumes = append $volumes .name }}
{{- end }}
{{- range .Values.extraVolumeMounts }}
{{- if has .mountPath (list "/dev/shm" "/tmp" "/home/pytriton") }}
{{- fail (printf "extraVolumeMounts: mountPath %q is one of the chart's own mounts (/dev/shm, /tmp, /home/pytriton): choose another path" .mountPath) }}
{{- end }}
{{- if not (has .name $volumes) }}
{{- fail (printf "extraVolumeMounts: the mount at %q names the volume %q, which the pod does not have: expected one of %s (add it to extraVolumes)" .mountPath .name (join ", " $volumes)) }}
{{- end }}
{{- end }}
{{- $containers := list "pytriton" }}
{{- range concat .Values.initContainers .Values.extraContainers }}
{{- if has .name $containers }}
{{- fail (printf "initContainers/extraContainers: a container named %q already exists (\"pytriton\" is the server's): choose another name" .name) }}
{{- end }}
{{- $containers = append $containers .name }}
{{- end }}
{{- $claims := list }}
{{- range .Values.resourceClaims }}
{{- $claims = append $claims .name }}
{{- end }}
{{- range (default list .Values.resources.claims) }}
{{- if not (has .name $claims) }}
{{- fail (printf "resources.claims names %q, which is not in resourceClaims (%s): add a resourceClaims entry of that name (e.g. {name: %s, resourceClaimTemplateName: ...})" .name (ternary "empty" (join ", " $claims) (empty $claims)) .name) }}
{{- end }}
{{- end }}
{{- range $kind := list "httpRoute" "grpcRoute" }}
{{- $route := get $.Values $kind }}
{{- if and $route.enabled (not $route.parentRefs) }}
{{- fail (printf "%s.enabled=true with %s.parentRefs empty: a route attaches to nothing without a Gateway, so no traffic would reach it; name your Gateway, e.g. [{name: public, namespace: gateways}]" $kind $kind) }}
{{- end }}
{{- end }}
{{- if and (eq .Values.lifecycle.preStopAction "sleep") (semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "lifecycle.preStopAction=\"sleep\" needs Kubernetes 1.30 or newer (the kubelet's sleep action is alpha and off by default in %s), and this cluster is %s: use lifecycle.preStopAction=exec (a `sleep` from the image)" (printf "%s.%s" .Capabilities.KubeVersion.Major (trimSuffix "+" .Capabilities.KubeVersion.Minor)) .Capabilities.KubeVersion.Version) }}
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
