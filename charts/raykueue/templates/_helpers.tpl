{{/* Labels on every object: the install's own (as manifests/ sets them) plus Helm's. */}}
{{- define "raykueue.labels" -}}
app.kubernetes.io/name: raykueue
app.kubernetes.io/part-of: raykueue
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The pods' selector; never changes under a running Deployment. */}}
{{- define "raykueue.selector" -}}
app.kubernetes.io/name: raykueue
app.kubernetes.io/component: webhook
{{- end }}

{{/* The Service's in-cluster names, the serving certificate's SANs. */}}
{{- define "raykueue.serviceHost" -}}
raykueue-webhook.{{ .Release.Namespace }}.svc
{{- end }}

{{- define "raykueue.webhookAnnotations" -}}
{{- if .Values.certManager.enabled }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/raykueue-webhook
{{- end }}
{{- end }}

{{/* The image; an empty tag is the chart's appVersion (one version for wheel, image and chart). */}}
{{- define "raykueue.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
