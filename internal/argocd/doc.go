// Package argocd runs toolgate's Argo CD resource customizations, the Lua health
// checks and actions of config/argocd, the way Argo CD runs them, and builds the
// argocd-cm entries from those scripts.
//
// The .lua files in config/argocd are the source of truth. Load reads them,
// Customizations.ConfigMapData turns them into the resource.customizations.* keys of
// argocd-cm, and the package's tests check that the shipped ConfigMap fragment matches
// and that every script gives the expected answer, both for objects the real
// controller wrote and for hand-written edge cases.
//
// Scripts run as Argo CD runs them: with gopher-lua, only the base, table and package
// libraries open (no string, math or io), the object as the global obj, and a
// one-second limit. The returned table is converted as Argo CD converts it (through
// JSON: a table with keys 1..n is an array, an empty table is an empty array).
package argocd
