{{/* Namespace of the namespaced objects and of the leader-election Lease. */}}
{{- define "nodeshepherd.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* The ServiceAccount every binding names. */}}
{{- define "nodeshepherd.serviceAccountName" -}}
{{- if .Values.companion.enabled -}}{{ .Values.companion.serviceAccountName }}{{- else -}}{{ .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{/* The controllers that run, as a JSON list; fails on an unknown name or,
in companion mode, on a controller kube-controller-manager or
cloud-controller-manager also runs. */}}
{{- define "nodeshepherd.controllers" -}}
{{- $known := include "nodeshepherd.knownControllers" . | fromJsonArray -}}
{{- $companionOK := include "nodeshepherd.companionControllers" . | fromJsonArray -}}
{{- $list := .Values.controllers -}}
{{- if .Values.companion.enabled }}{{ $list = .Values.companion.controllers }}{{ end -}}
{{- if not $list }}{{ fail "values: controllers is empty: name at least one controller" }}{{ end -}}
{{- range $list -}}
{{- if not (has . $known) -}}
{{- fail (printf "values: controllers: unknown controller %q: use one of %s" . (join ", " $known)) -}}
{{- end -}}
{{- if and $.Values.companion.enabled (not (has . $companionOK)) -}}
{{- fail (printf "values: companion.controllers: %q also runs in the cluster's kube-controller-manager or cloud-controller-manager; companion mode allows %s (docs/companion.md)" . (join ", " $companionOK)) -}}
{{- end -}}
{{- end -}}
{{- toJson $list -}}
{{- end -}}

{{/* Labels of every object: deploy/'s two, and Helm's. */}}
{{- define "nodeshepherd.labels" -}}
app.kubernetes.io/name: nodeshepherd
app.kubernetes.io/part-of: nodeshepherd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The subject of every binding: nodeshepherd's ServiceAccount. */}}
{{- define "nodeshepherd.subject" -}}
- kind: ServiceAccount
  name: {{ include "nodeshepherd.serviceAccountName" . }}
  namespace: {{ include "nodeshepherd.namespace" . }}
{{- end -}}

{{/* The NodeShepherdConfiguration file: config (with companion.config over
it in companion mode) and what the chart sets. */}}
{{- define "nodeshepherd.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- if .Values.companion.enabled }}{{ $cfg = mergeOverwrite $cfg (deepCopy (.Values.companion.config | default dict)) }}{{ end -}}
{{- $manager := get $cfg "manager" | default dict -}}
{{- $_ := set $manager "controllers" (include "nodeshepherd.controllers" . | fromJsonArray) -}}
{{- $_ = set $manager "securePort" (int .Values.metrics.securePort) -}}
{{- if .Values.metrics.tls.secretName -}}
{{- $_ = set $manager "tlsCertFile" "/etc/nodeshepherd-tls/tls.crt" -}}
{{- $_ = set $manager "tlsPrivateKeyFile" "/etc/nodeshepherd-tls/tls.key" -}}
{{- end -}}
{{- $_ = set $cfg "manager" $manager -}}
{{- $le := get $cfg "leaderElection" | default dict -}}
{{- $_ = set $le "leaderElectResourceNamespace" (include "nodeshepherd.namespace" .) -}}
{{- $_ = set $cfg "leaderElection" $le -}}
{{- $_ = set $cfg "apiVersion" "nodeshepherd.io/v1alpha1" -}}
{{- $_ = set $cfg "kind" "NodeShepherdConfiguration" -}}
{{- toYaml $cfg -}}
{{- end -}}


{{/* The ServiceMonitor's tlsConfig: Prometheus sends its token only to a
server it verified, unless insecureSkipVerify is asked for. */}}
{{- define "nodeshepherd.serviceMonitorTLS" -}}
{{- $sm := .Values.metrics.serviceMonitor -}}
{{- $tls := $sm.tlsConfig | default dict -}}
{{- if $tls.insecureSkipVerify -}}
insecureSkipVerify: true
{{- else -}}
{{- $ca := $tls.ca | default dict -}}
{{- if and (not $ca) .Values.metrics.tls.secretName -}}
{{- $ca = dict "secret" (dict "name" .Values.metrics.tls.secretName "key" "ca.crt") -}}
{{- end -}}
{{- if not $ca -}}
{{- fail "values: metrics.serviceMonitor: Prometheus would send its token to an unverified server: set metrics.tls.secretName (a Secret with tls.crt, tls.key and ca.crt), or metrics.serviceMonitor.tlsConfig.ca naming the CA of the serving certificate, or, only to try things out, metrics.serviceMonitor.tlsConfig.insecureSkipVerify: true (docs/helm.md)" -}}
{{- end -}}
ca:
  {{- toYaml $ca | nindent 2 }}
serverName: {{ $tls.serverName | default (printf "nodeshepherd-metrics.%s.svc" (include "nodeshepherd.namespace" .)) }}
{{- end -}}
{{- end -}}
