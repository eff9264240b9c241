{{/* Names, labels and shared pieces of the templates. */}}

{{- define "gpuslice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of object names; components append -node or -webhook (63 characters in all). */}}
{{- define "gpuslice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuslice.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "gpuslice.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Labels of every object but the selector ones (name, instance), which the components add. */}}
{{- define "gpuslice.commonLabels" -}}
app.kubernetes.io/part-of: {{ include "gpuslice.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels of the objects that belong to no component. */}}
{{- define "gpuslice.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "gpuslice.commonLabels" . }}
{{- end -}}

{{/* Labels of the node daemon's and the webhook's objects. */}}
{{- define "gpuslice.nodeLabels" -}}
{{ include "gpuslice.nodeSelectorLabels" . }}
app.kubernetes.io/component: node
{{ include "gpuslice.commonLabels" . }}
{{- end -}}

{{- define "gpuslice.webhookLabels" -}}
{{ include "gpuslice.webhookSelectorLabels" . }}
app.kubernetes.io/component: webhook
{{ include "gpuslice.commonLabels" . }}
{{- end -}}

{{- define "gpuslice.nodeName" -}}
{{ include "gpuslice.fullname" . }}-node
{{- end -}}

{{- define "gpuslice.webhookName" -}}
{{ include "gpuslice.fullname" . }}-webhook
{{- end -}}

{{/* Selector labels: fixed for the life of a release (a DaemonSet's selector cannot change). */}}
{{- define "gpuslice.nodeSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuslice.name" . }}-node
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpuslice.webhookSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuslice.name" . }}-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* DNS names of the webhook's Service, which its certificate must carry. */}}
{{- define "gpuslice.webhookDnsNames" -}}
{{- $svc := include "gpuslice.webhookName" . -}}
{{- $ns := include "gpuslice.namespace" . -}}
- {{ $svc }}
- {{ $svc }}.{{ $ns }}
- {{ $svc }}.{{ $ns }}.svc
- {{ $svc }}.{{ $ns }}.svc.cluster.local
{{- end -}}

{{/*
The operator's priority policy (values `priority`, docs/priority.md): one policy, rendered into the
webhook, the daemon (device plugin mode) and the DRA driver alike. `dra.priorityHighNamespaces` is
the older name of priority.highNamespaces: it is taken when priority.highNamespaces is empty, and
naming other namespaces in both is refused rather than one silently winning.
*/}}
{{- define "gpuslice.priorityHighNamespaces" -}}
{{- $namespaces := .Values.priority.highNamespaces | default list -}}
{{- $older := .Values.dra.priorityHighNamespaces | default list -}}
{{- if and $namespaces $older (ne ($namespaces | uniq | sortAlpha | join ",") ($older | uniq | sortAlpha | join ",")) -}}
{{- fail (printf "dra.priorityHighNamespaces (%s) is the older name of priority.highNamespaces (%s): set priority.highNamespaces only" ($older | join ",") ($namespaces | join ",")) -}}
{{- end -}}
{{- default $older $namespaces | uniq | join "," -}}
{{- end -}}

{{/* priority.classes as the flag takes it: CLASS=LEVEL,... (sorted by class). */}}
{{- define "gpuslice.priorityClasses" -}}
{{- $pairs := list -}}
{{- range $class, $level := .Values.priority.classes -}}
{{- $pairs = append $pairs (printf "%s=%s" $class $level) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/*
"true" when the daemon reads pods from the API server: device plugin mode with priority.classes
(it learns each listed pod's spec.priorityClassName). Its token is mounted then, with `get pods`.
*/}}
{{- define "gpuslice.nodeReadsPods" -}}
{{- if and .Values.node.enabled (not .Values.dra.enabled) .Values.priority.classes -}}true{{- end -}}
{{- end -}}
