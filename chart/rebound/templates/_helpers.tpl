{{/* The prefix of every object name: the release name, with "-rebound" unless it already says rebound. */}}
{{- define "rebound.fullname" -}}
{{- if contains "rebound" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-rebound" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The operator's root namespace: controller.rootNamespace, else the release namespace. */}}
{{- define "rebound.rootNamespace" -}}
{{- default .Release.Namespace .Values.controller.rootNamespace -}}
{{- end -}}

{{- define "rebound.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The agent image (`docker build --target agent`): glibc, with NVML. */}}
{{- define "rebound.agentImage" -}}
{{- $repo := default (printf "%s-agent" .Values.image.repository) .Values.agent.image.repository -}}
{{- printf "%s:%s" $repo (default (default .Chart.AppVersion .Values.image.tag) .Values.agent.image.tag) -}}
{{- end -}}

{{- define "rebound.labels" -}}
app.kubernetes.io/name: rebound
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rebound.selectorLabels" -}}
app.kubernetes.io/name: rebound
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Whether the admission policy is installed: admissionPolicy.enabled, and the API server serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36 and later; an older server would refuse the whole release). `helm template` knows no server: pass `--api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy` to render it. */}}
{{- define "rebound.admissionPolicy" -}}
{{- if and .Values.admissionPolicy.enabled (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") -}}
true
{{- end -}}
{{- end -}}
