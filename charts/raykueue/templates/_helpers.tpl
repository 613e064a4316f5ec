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

{{/* The webhooks' scope: never kube-system or raykueue's own namespace, only KubeRay pods. */}}
{{- define "raykueue.webhookScope" -}}
matchPolicy: Equivalent
objectSelector:
  matchExpressions:
    - key: ray.io/node-type
      operator: In
      values: [head, worker]
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [kube-system, {{ .Release.Namespace }}]
{{- end }}

{{/* The Ray-object webhooks' scope: opted-in objects, and updates only when they bring a queue label. */}}
{{- define "raykueue.rayObjectScope" -}}
matchPolicy: Equivalent
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [kube-system, {{ .Release.Namespace }}]
matchConditions:
  - name: opt-in-possible
    expression: >-
      (has(object.metadata.annotations) &&
      'kueue.x-k8s.io/standalone' in object.metadata.annotations) ||
      (has(object.metadata.ownerReferences) &&
      object.metadata.ownerReferences.exists(r, r.apiVersion.startsWith('ray.io/')))
  - name: create-or-queue-label
    expression: >-
      request.operation == 'CREATE' ||
      (has(object.metadata.labels) && 'kueue.x-k8s.io/queue-name' in object.metadata.labels)
{{- end }}

{{- define "raykueue.webhookAnnotations" -}}
{{- if .Values.certManager.enabled }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/raykueue-webhook
{{- end }}
{{- end }}
