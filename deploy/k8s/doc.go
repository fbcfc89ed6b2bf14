// Package k8s holds the Kubernetes manifests of the sharded nightly (an
// Indexed Job of GPU shards, a merge Job, the results volume) and, in its
// test, their validation: every manifest decoded strictly into the API's own
// types, the kustomization rendered as kubectl would, and the facts the
// nightly relies on checked. It has no code; see kustomization.yaml.
package k8s
