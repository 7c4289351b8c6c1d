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

{{/* The name of the ring at a --key-source URL, as the controller names it (its
config::ring_name): the Secrets Manager prefix (secretsmanager:// or asm:// and ?region=...
removed, trailing slashes too; a bare prefix is itself), kseal/fleet for a directory (dir:). */}}
{{- define "kseal.ringName" -}}
{{- $url := trim (toString .) -}}
{{- if hasPrefix "dir:" $url -}}
kseal/fleet
{{- else -}}
{{- regexReplaceAll "/+$" (regexReplaceAll "\\?.*$" (regexReplaceAll "^(secretsmanager|asm)://" $url "") "") "" -}}
{{- end -}}
{{- end -}}

{{/* The --key-source rings as JSON (fromJsonArray): keySource.url first (it seals by default),
then each keySource.moreRings item with a url, as {name, url, ringAnchor, namespaces,
namespaceSelector, at} ("at": where the values give it, for messages). */}}
{{- define "kseal.rings" -}}
{{- $rings := list -}}
{{- $ks := .Values.keySource -}}
{{- with $ks.url -}}
{{- $rings = append $rings (dict "name" (include "kseal.ringName" .) "url" (trim .) "ringAnchor" ($ks.ringAnchor | default "") "namespaces" ($ks.namespaces | default list) "namespaceSelector" (trim ($ks.namespaceSelector | default "")) "at" "keySource") -}}
{{- end -}}
{{- range $i, $r := $ks.moreRings -}}
{{- with $r.url -}}
{{- $rings = append $rings (dict "name" (include "kseal.ringName" .) "url" (trim .) "ringAnchor" ($r.ringAnchor | default "") "namespaces" ($r.namespaces | default list) "namespaceSelector" (trim ($r.namespaceSelector | default "")) "at" (printf "keySource.moreRings[%d]" $i)) -}}
{{- end -}}
{{- end -}}
{{- toJson $rings -}}
{{- end -}}

{{/* Whether a ring is bound by a namespace selector (the controller then lists and watches
Namespaces cluster-wide). */}}
{{- define "kseal.ringNamespaceSelector" -}}
{{- range include "kseal.rings" . | fromJsonArray -}}
{{- if .namespaceSelector -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* Refuses values that cannot work together; included by the Deployment. */}}
{{- define "kseal.validate" -}}
{{- include "kseal.bitnamiValues" . -}}
{{- with .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" (toString .)) -}}
{{- fail (printf "image.digest %q: expected sha256: and 64 lowercase hex digits" .) -}}
{{- end -}}
{{- end -}}
{{- $ks := .Values.keySource -}}
{{- if and $ks.moreRings (not $ks.url) -}}
{{- fail "keySource.moreRings lists further rings, and keySource.url is empty: keySource.url is the first ring (it seals by default); set it, or move one of keySource.moreRings there" -}}
{{- end -}}
{{- if and (not $ks.url) (or $ks.namespaces $ks.namespaceSelector) -}}
{{- fail "keySource.namespaces and keySource.namespaceSelector bind the ring of keySource.url to namespaces, and keySource.url is empty: set keySource.url, or drop the binding" -}}
{{- end -}}
{{- range $i, $r := $ks.moreRings -}}
{{- if not $r.url -}}
{{- if or $r.namespaces $r.namespaceSelector -}}
{{- fail (printf "keySource.moreRings[%d]: namespaces and namespaceSelector bind a ring to namespaces, and this ring's url is empty: set keySource.moreRings[%d].url, or drop the item" $i $i) -}}
{{- end -}}
{{- fail (printf "keySource.moreRings[%d].url is empty: each further ring needs its url (secretsmanager://<ring>[?region=...] or dir:///<path>)" $i) -}}
{{- end -}}
{{- end -}}
{{- with $ks.url -}}
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
{{- end -}}
{{- /* Anchors given as flags in extraArgs / extraEnv ([RING=]KID; a bare KID pins the first ring). */ -}}
{{- $flagAnchors := list -}}
{{- range $i, $arg := $.Values.extraArgs -}}
{{- if hasPrefix "--ring-anchor=" (toString $arg) -}}
{{- $flagAnchors = append $flagAnchors (trimPrefix "--ring-anchor=" (toString $arg)) -}}
{{- else if and (eq (toString $arg) "--ring-anchor") (lt (add1 $i) (len $.Values.extraArgs)) -}}
{{- $flagAnchors = append $flagAnchors (toString (index $.Values.extraArgs (add1 $i))) -}}
{{- end -}}
{{- end -}}
{{- range $.Values.extraEnv -}}
{{- if eq (toString .name) "KSEAL_RING_ANCHOR" -}}
{{- $flagAnchors = append $flagAnchors (toString .value) -}}
{{- end -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $n, $ring := include "kseal.rings" . | fromJsonArray -}}
{{- $url := $ring.url -}}
{{- if not (or (hasPrefix "secretsmanager://" $url) (hasPrefix "asm://" $url) (hasPrefix "dir:" $url) (not (contains "://" $url))) -}}
{{- fail (printf "%s.url %q: expected secretsmanager://<ring>[?region=...] or dir:///<path>" $ring.at $url) -}}
{{- end -}}
{{- $sm := not (hasPrefix "dir:" $url) -}}
{{- if and $sm (not (regexMatch "^[A-Za-z0-9_+=.@-]+(/[A-Za-z0-9_+=.@-]+)*$" $ring.name)) -}}
{{- fail (printf "%s.url %q: the ring prefix %q is not a Secrets Manager name (letters, digits and /_+=.@-, no empty path segment)" $ring.at $url $ring.name) -}}
{{- end -}}
{{- with get $seen $ring.name -}}
{{- fail (printf "%s.url %q is ring %s, as %s.url is: a ring's name is its Secrets Manager prefix and every dir: ring is kseal/fleet, so each ring is given once (at most one directory ring per controller)" $ring.at $url $ring.name .) -}}
{{- end -}}
{{- $_ := set $seen $ring.name $ring.at -}}
{{- $anchor := $ring.ringAnchor -}}
{{- range $flagAnchors -}}
{{- if contains "=" . -}}
{{- if eq (regexReplaceAll "=[^=]*$" . "") $ring.name -}}
{{- $anchor = regexReplaceAll "^.*=" . "" -}}
{{- end -}}
{{- else if eq $n 0 -}}
{{- $anchor = . -}}
{{- end -}}
{{- end -}}
{{- if and $sm (not $anchor) -}}
{{- fail (printf "%s.ringAnchor is required for ring %s (a secretsmanager:// key source): without it each controller start would trust whatever history the store holds (trust on first use), including one rooted at a key an attacker holds. Set it to the ring's anchor kid: `kseal keys trust --ring %s` prints it" $ring.at $ring.name $ring.name) -}}
{{- end -}}
{{- if and $anchor (not (regexMatch "^[0-9a-f]{64}$" (toString $anchor))) -}}
{{- fail (printf "%s.ringAnchor %q (ring %s): expected a kid, 64 lowercase hex characters (`kseal keys trust --ring %s` prints it)" $ring.at (toString $anchor) $ring.name $ring.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Bitnami sealed-secrets chart value names (chart 2.18.x) that kseal's chart does not take:
refused, all at once, each with kseal's name for it (docs/bitnami.md). values.schema.json
declares them so that this message, not a bare "additional property", is what one reads. */}}
{{- define "kseal.bitnamiValues" -}}
{{- $bitnami := dict -}}
{{- $_ := set $bitnami "kubeVersion" "no such value (kseal's chart declares kubeVersion in Chart.yaml)" -}}
{{- $_ := set $bitnami "nameOverride" "fullnameOverride" -}}
{{- $_ := set $bitnami "namespace" "helm --namespace" -}}
{{- $_ := set $bitnami "extraDeploy" "no such value (apply other objects beside the chart)" -}}
{{- $_ := set $bitnami "commonAnnotations" "podAnnotations (pods only)" -}}
{{- $_ := set $bitnami "commonLabels" "podLabels (pods only)" -}}
{{- $_ := set $bitnami "revisionHistoryLimit" "no such value (5)" -}}
{{- $_ := set $bitnami "createController" "no such value" -}}
{{- $_ := set $bitnami "secretName" "keys.prefix" -}}
{{- $_ := set $bitnami "updateStatus" "no such value (the status is always written; extraArgs: [--update-status=false])" -}}
{{- $_ := set $bitnami "skipRecreate" "extraArgs: [--skip-recreate]" -}}
{{- $_ := set $bitnami "keyrenewperiod" "keys.renewPeriod" -}}
{{- $_ := set $bitnami "keyttl" "extraArgs: [--key-ttl=...]" -}}
{{- $_ := set $bitnami "keycutofftime" "keys.cutoffTime" -}}
{{- $_ := set $bitnami "rateLimit" "extraArgs: [--rate-limit=...]" -}}
{{- $_ := set $bitnami "rateLimitBurst" "extraArgs: [--rate-limit-burst=...]" -}}
{{- $_ := set $bitnami "additionalNamespaces" "watch.additionalNamespaces" -}}
{{- $_ := set $bitnami "privateKeyAnnotations" "keys.privateKeyAnnotations" -}}
{{- $_ := set $bitnami "privateKeyLabels" "keys.privateKeyLabels" -}}
{{- $_ := set $bitnami "logInfoStdout" "no such value (kseal logs to stderr)" -}}
{{- $_ := set $bitnami "maxRetries" "no such value (kseal never gives up on a SealedSecret)" -}}
{{- $_ := set $bitnami "watchForSecrets" "no such value (kseal always watches the key Secrets)" -}}
{{- $_ := set $bitnami "kubeClientQPS" "no such value (no client-side rate limit)" -}}
{{- $_ := set $bitnami "kubeClientBurst" "no such value (no client-side rate limit)" -}}
{{- $_ := set $bitnami "command" "no such value (the image's entrypoint runs kseal-controller)" -}}
{{- $_ := set $bitnami "args" "extraArgs" -}}
{{- $_ := set $bitnami "livenessProbe" "no such value (the chart sets its probes)" -}}
{{- $_ := set $bitnami "readinessProbe" "no such value (the chart sets its probes)" -}}
{{- $_ := set $bitnami "startupProbe" "no such value (the chart sets its probes)" -}}
{{- $_ := set $bitnami "customLivenessProbe" "no such value (the chart sets its probes)" -}}
{{- $_ := set $bitnami "customReadinessProbe" "no such value (the chart sets its probes)" -}}
{{- $_ := set $bitnami "customStartupProbe" "no such value (the chart sets its probes)" -}}
{{- $_ := set $bitnami "containerSecurityContext" "securityContext" -}}
{{- $_ := set $bitnami "runtimeClassName" "no such value" -}}
{{- $_ := set $bitnami "additionalVolumes" "no such value" -}}
{{- $_ := set $bitnami "additionalVolumeMounts" "no such value" -}}
{{- $_ := set $bitnami "hostNetwork" "no such value" -}}
{{- $_ := set $bitnami "containerPorts" "no such value (8080 and 8081; service.port and metrics.port for the Services)" -}}
{{- $_ := set $bitnami "hostPorts" "no such value" -}}
{{- $_ := set $bitnami "dnsPolicy" "no such value" -}}
{{- $_ := set $bitnami "ingress" "no such value" -}}
{{- $_ := set $bitnami "networkPolicy" "no such value" -}}
{{- $_ := set $bitnami "pdb" "podDisruptionBudget" -}}
{{- $found := list -}}
{{- range $name := keys $bitnami | sortAlpha -}}
{{- if hasKey $.Values $name -}}
{{- $found = append $found (printf "%s: %s" $name (get $bitnami $name)) -}}
{{- end -}}
{{- end -}}
{{- with .Values.image -}}
{{- if hasKey . "registry" -}}{{- $found = append $found "image.registry: put the registry in image.repository (ghcr.io/kseal-dev/kseal-controller)" -}}{{- end -}}
{{- if hasKey . "pullSecrets" -}}{{- $found = append $found "image.pullSecrets: imagePullSecrets (a list of {name: ...})" -}}{{- end -}}
{{- end -}}
{{- with .Values.rbac -}}
{{- range $name := list "clusterRole" "clusterRoleName" "namespacedRoles" "namespacedRolesName" "labels" "pspEnabled" -}}
{{- if hasKey $.Values.rbac $name -}}{{- $found = append $found (printf "rbac.%s: no such value (rbac.create; the roles are least-privilege and named after the release)" $name) -}}{{- end -}}
{{- end -}}
{{- if hasKey . "serviceProxier" -}}{{- $found = append $found "rbac.serviceProxier: certProxy" -}}{{- end -}}
{{- end -}}
{{- with .Values.metrics -}}
{{- if hasKey . "dashboards" -}}{{- $found = append $found "metrics.dashboards: metrics.grafanaDashboard" -}}{{- end -}}
{{- if hasKey . "service" -}}{{- $found = append $found "metrics.service: metrics.port" -}}{{- end -}}
{{- end -}}
{{- if hasKey (.Values.podSecurityContext | default dict) "enabled" -}}
{{- $found = append $found "podSecurityContext.enabled: no such value (podSecurityContext is the pod's securityContext as it is)" -}}
{{- end -}}
{{- range $name := list "loadBalancerClass" "nodePort" "annotations" -}}
{{- if hasKey $.Values.service $name -}}{{- $found = append $found (printf "service.%s: no such value (service.type, service.port)" $name) -}}{{- end -}}
{{- end -}}
{{- if hasKey .Values.serviceAccount "labels" -}}{{- $found = append $found "serviceAccount.labels: no such value (serviceAccount.annotations)" -}}{{- end -}}
{{- range $name := list "namespace" "annotations" "scrapeTimeout" "honorLabels" "metricRelabelings" "relabelings" -}}
{{- if hasKey $.Values.metrics.serviceMonitor $name -}}{{- $found = append $found (printf "metrics.serviceMonitor.%s: no such value (enabled, interval, labels)" $name) -}}{{- end -}}
{{- end -}}
{{- if eq (toString .Values.logLevel) "" -}}{{- $found = append $found "logLevel \"\": a level or a RUST_LOG filter (info, the default)" -}}{{- end -}}
{{- if eq (toString .Values.logFormat) "" -}}{{- $found = append $found "logFormat \"\": text (the default) or json" -}}{{- end -}}
{{- with $found -}}
{{- fail (printf "values of Bitnami's sealed-secrets chart, which kseal's chart names differently (docs/bitnami.md): %s" (join "; " .)) -}}
{{- end -}}
{{- end -}}
