{{/* The image of both workloads: repository:tag, tag defaulting to appVersion. */}}
{{- define "clusterset-dns.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
