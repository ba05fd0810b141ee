{{/*
toolgate.flag: the manager argument --NAME=VALUE, on a line of its own at the
indentation of the manager's args, when VALUE is set; an empty or null value
leaves the manager's default. Called with (list NAME VALUE).
*/}}
{{- define "toolgate.flag" -}}
{{- $name := index . 0 -}}
{{- $value := index . 1 -}}
{{- if not (or (kindIs "invalid" $value) (eq (toString $value) "")) }}
        - --{{ $name }}={{ $value }}
{{- end -}}
{{- end -}}

{{/* toolgate.archiveAPI: whether the archive's aggregated API is served. */}}
{{- define "toolgate.archiveAPI" -}}
{{- if and .Values.archive.enabled .Values.archive.api.enabled }}true{{ end -}}
{{- end -}}
