{{/* The base name of every object. */}}
{{- define "kseal.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kseal-controller" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selectors: the name only (unique per install, since it is the object name), the same as
deploy/kustomize, so that a kustomize install can be taken over by the chart and back
(selectors are immutable). */}}
{{- define "kseal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kseal.fullname" . }}
{{- end -}}

{{- define "kseal.labels" -}}
{{ include "kseal.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kseal
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kseal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kseal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Whether the controller watches every namespace (and gets a ClusterRole). */}}
{{- define "kseal.clusterWide" -}}
{{- if and .Values.watch.allNamespaces (empty .Values.watch.additionalNamespaces) -}}true{{- end -}}
{{- end -}}

{{/* The verbs of the unsealing RBAC: see deploy/kustomize/base/clusterrole-unsealer.yaml. */}}
{{- define "kseal.unsealerRules" -}}
- apiGroups: [bitnami.com]
  resources: [sealedsecrets]
  verbs: [list, watch]
- apiGroups: [bitnami.com]
  resources: [sealedsecrets/status]
  verbs: [get, patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/* A map as the controller's `k1=v1,k2=v2` flag format, keys sorted. */}}
{{- define "kseal.keyValueList" -}}
{{- $items := list -}}
{{- range $k, $v := . -}}
{{- if contains "," (toString $v) -}}
{{- fail (printf "keys.privateKey*: the value of %s may not contain a comma" $k) -}}
{{- end -}}
{{- $items = append $items (printf "%s=%v" $k $v) -}}
{{- end -}}
{{- join "," $items -}}
{{- end -}}

{{/* Refuses values that cannot work together; included by the Deployment. */}}
{{- define "kseal.validate" -}}
{{- with .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" (toString .)) -}}
{{- fail (printf "image.digest %q: expected sha256: and 64 lowercase hex digits" .) -}}
{{- end -}}
{{- end -}}
{{- with .Values.keySource.url -}}
{{- if not (or (hasPrefix "secretsmanager://" .) (hasPrefix "dir://" .)) -}}
{{- fail (printf "keySource.url %q: expected secretsmanager://<ring>[?region=...] or dir:///<path>" .) -}}
{{- end -}}
{{- $generate := $.Values.keys.generateIfMissing -}}
{{- range $.Values.extraArgs -}}
{{- if and (hasPrefix "--generate-key-if-missing" (toString .)) (ne (toString .) "--generate-key-if-missing=false") -}}
{{- $generate = true -}}
{{- end -}}
{{- end -}}
{{- range $.Values.extraEnv -}}
{{- if and (eq (toString .name) "KSEAL_GENERATE_KEY_IF_MISSING") (ne (toString .value) "false") -}}
{{- $generate = true -}}
{{- end -}}
{{- end -}}
{{- if $generate -}}
{{- fail "keySource.url is set, so the keys come from the key ring: in-cluster key generation (keys.generateIfMissing, or --generate-key-if-missing / KSEAL_GENERATE_KEY_IF_MISSING in extraArgs / extraEnv) must stay off" -}}
{{- end -}}
{{- $anchor := $.Values.keySource.ringAnchor -}}
{{- range $i, $arg := $.Values.extraArgs -}}
{{- if hasPrefix "--ring-anchor=" (toString $arg) -}}
{{- $anchor = trimPrefix "--ring-anchor=" (toString $arg) -}}
{{- else if and (eq (toString $arg) "--ring-anchor") (lt (add1 $i) (len $.Values.extraArgs)) -}}
{{- $anchor = toString (index $.Values.extraArgs (add1 $i)) -}}
{{- end -}}
{{- end -}}
{{- range $.Values.extraEnv -}}
{{- if eq (toString .name) "KSEAL_RING_ANCHOR" -}}
{{- $anchor = toString .value -}}
{{- end -}}
{{- end -}}
{{- if and (hasPrefix "secretsmanager://" .) (not $anchor) -}}
{{- fail "keySource.ringAnchor is required with a secretsmanager:// key source: without it each controller start would trust whatever history the store holds (trust on first use), including one rooted at a key an attacker holds. Set it to the ring's anchor kid: `kseal keys trust --ring <ring>` prints it" -}}
{{- end -}}
{{- if and $anchor (not (regexMatch "^[0-9a-f]{64}$" (toString $anchor))) -}}
{{- fail (printf "keySource.ringAnchor %q: expected a kid, 64 lowercase hex characters (`kseal keys trust --ring <ring>` prints it)" (toString $anchor)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
