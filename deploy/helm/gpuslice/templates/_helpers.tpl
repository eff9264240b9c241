{{/* Names and labels shared by the templates. */}}
{{- define "gpuslice.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gpuslice.labels" -}}
app.kubernetes.io/part-of: gpuslice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "gpuslice.nodeName" -}}
{{ .Release.Name }}-node
{{- end -}}

{{- define "gpuslice.webhookName" -}}
{{ .Release.Name }}-webhook
{{- end -}}
