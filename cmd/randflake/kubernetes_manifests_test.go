package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/kubelease/kubetest"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// The checks of the manifests of --node-source kubernetes
// (deploy/kubernetes/deployment): the pods' service account, its Role and
// RoleBinding, the pod's name and UID, the HorizontalPodAutoscaler.

// leaseVerbs are exactly the verbs on leases the Role grants.
var leaseVerbs = []string{"get", "list", "create", "update", "delete"}

// checkLeaseAccess checks that the workload w, which claims node IDs as
// Lease objects, mounts the token of a ServiceAccount of its directory
// bound to a Role of its directory that grants exactly leaseVerbs on
// coordination.k8s.io leases, and gives serve the pod's name and UID.
func checkLeaseAccess(t reporter, w *workload, all []*manifest) {
	t.Helper()
	spec := &w.pod.Spec
	if !deref(spec.AutomountServiceAccountToken, false) {
		t.Errorf("%v: spec.automountServiceAccountToken must be true: --node-source kubernetes reaches the API server with the service account's token", w)
	}
	dir := filepath.Dir(w.file)
	same := func(m *manifest) bool { return filepath.Dir(m.file) == dir }
	sa := spec.ServiceAccountName
	if sa == "" {
		t.Errorf("%v: spec.serviceAccountName is not set: the default service account has no right on leases", w)
		return
	}
	if !slices.ContainsFunc(all, func(m *manifest) bool { _, ok := m.obj.(*corev1.ServiceAccount); return ok && same(m) && m.name == sa }) {
		t.Errorf("%v: spec.serviceAccountName %q: no ServiceAccount of that name in %s", w, sa, dir)
	}
	roles := map[string]*rbacv1.Role{}
	for _, m := range all {
		if r, ok := m.obj.(*rbacv1.Role); ok && same(m) {
			roles[r.Name] = r
		}
	}
	bound := false
	for _, m := range all {
		rb, ok := m.obj.(*rbacv1.RoleBinding)
		if !ok || !same(m) || !slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == sa }) {
			continue
		}
		bound = true
		r := roles[rb.RoleRef.Name]
		if rb.RoleRef.Kind != "Role" || rb.RoleRef.APIGroup != rbacv1.GroupName || r == nil {
			t.Errorf("%v: roleRef %s %q is not a Role in %s (a ClusterRole would grant more than the namespace)", m, rb.RoleRef.Kind, rb.RoleRef.Name, dir)
			continue
		}
		if err := checkLeaseRules(r.Rules); err != "" {
			t.Errorf("%s: Role %s: %s", dir, r.Name, err)
		}
	}
	if !bound {
		t.Errorf("%v: no RoleBinding in %s binds the ServiceAccount %q", w, dir, sa)
	}
	c := w.serveContainer(t)
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_UID": "metadata.uid"} {
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%v: container %s: env %s must come from fieldRef %s (the holder's identity on its Lease objects)", w, c.Name, name, path)
		}
	}
}

// checkLeaseRules returns what is wrong with the rules of the Role, "" if
// nothing: one rule, on leases of coordination.k8s.io, no resource names,
// exactly leaseVerbs.
func checkLeaseRules(rules []rbacv1.PolicyRule) string {
	if len(rules) != 1 {
		return fmt.Sprintf("%d rules, want one, on leases", len(rules))
	}
	r := rules[0]
	switch {
	case !slices.Equal(r.APIGroups, []string{"coordination.k8s.io"}) || !slices.Equal(r.Resources, []string{"leases"}):
		return fmt.Sprintf("rules[0] is on %v of %v, want leases of coordination.k8s.io", r.Resources, r.APIGroups)
	case len(r.ResourceNames) > 0:
		return "rules[0] has resourceNames: list cannot be limited to names, and the blocks' names are many"
	case !slices.Equal(slices.Sorted(slices.Values(r.Verbs)), slices.Sorted(slices.Values(leaseVerbs))):
		return fmt.Sprintf("rules[0] grants the verbs %v, want exactly %v", r.Verbs, leaseVerbs)
	}
	return ""
}

// The Roles the manifests grant are checked against the rules, and the
// rules' checks fire on Roles changed to break them.
func TestManifestLeaseRole(t *testing.T) {
	good := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: leaseVerbs}}
	if err := checkLeaseRules(good); err != "" {
		t.Fatalf("the rules of the manifests refused: %s", err)
	}
	for name, rules := range map[string][]rbacv1.PolicyRule{
		"no update":      {{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "delete"}}},
		"every verb":     {{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}},
		"other group":    {{APIGroups: []string{""}, Resources: []string{"leases"}, Verbs: leaseVerbs}},
		"resource names": {{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: leaseVerbs, ResourceNames: []string{"randflake"}}},
		"two rules":      append(slices.Clone(good), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}),
	} {
		if checkLeaseRules(rules) == "" {
			t.Errorf("%s: rules %v accepted", name, rules)
		}
	}
	found := 0
	for _, m := range loadManifests(t) {
		if r, ok := m.obj.(*rbacv1.Role); ok {
			found++
			if err := checkLeaseRules(r.Rules); err != "" {
				t.Errorf("%v: %s", m, err)
			}
		}
	}
	if found == 0 {
		t.Errorf("no Role in %s: the Kubernetes-lease variant needs one", manifestRoot)
	}
}

// Every HorizontalPodAutoscaler scales a Deployment of its directory whose
// pods claim node IDs (never a StatefulSet's ordinals), between bounds
// that fit the node IDs.
func TestManifestAutoscalers(t *testing.T) {
	all := loadManifests(t)
	ws := workloads(all)
	found := 0
	for _, m := range all {
		h, ok := m.obj.(*autoscalingv2.HorizontalPodAutoscaler)
		if !ok {
			continue
		}
		found++
		ref := h.Spec.ScaleTargetRef
		i := slices.IndexFunc(ws, func(w *workload) bool {
			return w.sts == nil && w.name == ref.Name && filepath.Dir(w.file) == filepath.Dir(m.file)
		})
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || i < 0 {
			t.Errorf("%v: scaleTargetRef %s %s %q is not a Deployment in %s", m, ref.APIVersion, ref.Kind, ref.Name, dirOf(m))
			continue
		}
		w := ws[i]
		args := parseContainerArgs(w.serveContainer(t).Args[1:])
		if src := args.value("node-source"); src != "kubernetes" && src != "etcd" && src != "postgres" {
			t.Errorf("%v: scales %v, whose pods do not claim node IDs (--node-source %q)", m, w, src)
		}
		minR := deref(h.Spec.MinReplicas, 1)
		claim := int64(16)
		if v := args.value("claim"); v != "" {
			fmt.Sscan(v, &claim)
		}
		if minR < 1 || h.Spec.MaxReplicas < minR || int64(h.Spec.MaxReplicas)*claim > randflake.MaxNode+1 {
			t.Errorf("%v: replicas %d to %d: want 1 <= min <= max, and max x %d node IDs within %d", m, minR, h.Spec.MaxReplicas, claim, randflake.MaxNode+1)
		}
	}
	if found == 0 {
		t.Errorf("no HorizontalPodAutoscaler in %s: the Kubernetes-lease variant has one", manifestRoot)
	}
}

// kubeconfigForManifest starts a test cluster (kube-apiserver and etcd)
// for t, with a namespace whose lease verbs are granted to the test's
// user, and returns a kubeconfig of that user and namespace written into
// dir. Without the binaries it skips t, or fails it under CI.
func kubeconfigForManifest(t *testing.T, dir string) string {
	t.Helper()
	c := kubetest.New(t)
	ns := c.Namespace(t, "manifest")
	p, err := c.Kubeconfig(dir, kubetest.User, "", ns)
	if err != nil {
		t.Fatal(err)
	}
	// serve may run as the pod's user, not the test's.
	for _, f := range []string{p, filepath.Join(dir, "kube-ca.crt")} {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}
