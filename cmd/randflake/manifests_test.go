package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/server"
	"github.com/randflake/randflake/cmd/randflake/internal/tlstest"
	"github.com/randflake/randflake/statedir"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The Kubernetes manifests (deploy/kubernetes) and the image (Dockerfile)
// are checked against the command they run: every document decodes
// strictly into the Kubernetes API type its apiVersion and kind name (a
// cert-manager Certificate into a local type); the kustomizations list
// exactly the manifests beside them; the containers' flags and
// environment variables are those serve reads; every file serve reads is
// in a Secret volume, under a key the Secret has, with a mode the pod's
// user may read and serve accepts; the probes, ports, Services, users and
// grace periods agree with serve and the image; each of these checks
// fires on a StatefulSet changed to break it; and serve, run with each
// workload's arguments, environment and Secret volumes (laid out as the
// kubelet lays them out, with stand-in files), answers every probe with
// 200 on the operations port and serves IDs over TLS.

// Where the manifests and the Dockerfile are, from this module's directory.
const (
	manifestRoot = "../../deploy/kubernetes"
	dockerfile   = "../../Dockerfile"
)

// manifest is one document of a manifest file.
type manifest struct {
	file string // relative to manifestRoot
	doc  int    // 1-based position in the file
	kind string
	name string
	obj  any // *appsv1.StatefulSet, *corev1.Service, ...
}

// dirOf names the directory of m's file, from the repository's root.
func dirOf(m *manifest) string {
	return filepath.Join("deploy/kubernetes", filepath.Dir(m.file))
}

func (m *manifest) String() string {
	return fmt.Sprintf("%s document %d (%s %s)", m.file, m.doc, m.kind, m.name)
}

// newObject returns the Go type a document of apiVersion api and kind kind
// decodes into, or nil for a kind these tests do not know.
func newObject(api, kind string) any {
	switch api + " " + kind {
	case "apps/v1 StatefulSet":
		return new(appsv1.StatefulSet)
	case "apps/v1 Deployment":
		return new(appsv1.Deployment)
	case "v1 Service":
		return new(corev1.Service)
	case "v1 Secret":
		return new(corev1.Secret)
	case "policy/v1 PodDisruptionBudget":
		return new(policyv1.PodDisruptionBudget)
	case "cert-manager.io/v1 Certificate":
		return new(certificate)
	case "v1 ServiceAccount":
		return new(corev1.ServiceAccount)
	case "rbac.authorization.k8s.io/v1 Role":
		return new(rbacv1.Role)
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		return new(rbacv1.RoleBinding)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return new(autoscalingv2.HorizontalPodAutoscaler)
	}
	return nil
}

// certificate is a cert-manager Certificate (cert-manager.io/v1), a kind
// k8s.io/api does not have: exactly the fields the manifests use, so that
// the strict decoding refuses any other until it is added here with its
// checks.
type certificate struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	ObjectMeta metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		SecretName  string `json:"secretName"`
		Duration    string `json:"duration,omitempty"`
		RenewBefore string `json:"renewBefore,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			Encoding       string `json:"encoding,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		Usages    []string `json:"usages,omitempty"`
		DNSNames  []string `json:"dnsNames,omitempty"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// docSeparator is a YAML document separator line.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// manifestFiles returns the manifest files under manifestRoot (every
// .yaml or .yml file but kustomization.yaml), relative to it, sorted.
func manifestFiles(t *testing.T) (manifests, kustomizations []string) {
	t.Helper()
	err := filepath.WalkDir(manifestRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(manifestRoot, path)
		switch {
		case d.Name() == "kustomization.yaml" || d.Name() == "kustomization.yml":
			kustomizations = append(kustomizations, rel)
		case strings.HasSuffix(d.Name(), ".yaml") || strings.HasSuffix(d.Name(), ".yml"):
			manifests = append(manifests, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", manifestRoot, err)
	}
	if len(manifests) == 0 {
		t.Fatalf("no manifests in %s", manifestRoot)
	}
	return manifests, kustomizations
}

// loadManifests decodes every document of every manifest file, failing t
// (with the file, the document and the field) for a document that does
// not decode strictly into its kind's type.
func loadManifests(t *testing.T) []*manifest {
	t.Helper()
	files, _ := manifestFiles(t)
	var all []*manifest
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(manifestRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range docSeparator.Split(string(data), -1) {
			m, err := decodeManifest(file, i+1, []byte(text))
			if err != nil {
				t.Errorf("%v", err)
				continue
			}
			if m != nil {
				all = append(all, m)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return all
}

// decodeManifest decodes document doc of file, or returns nil for a
// document of comments only.
func decodeManifest(file string, doc int, text []byte) (*manifest, error) {
	where := fmt.Sprintf("%s document %d", file, doc)
	js, err := yaml.YAMLToJSONStrict(text)
	if err != nil {
		return nil, fmt.Errorf("%s: not YAML: %v", where, err)
	}
	if string(js) == "null" {
		return nil, nil
	}
	var top map[string]any
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, fmt.Errorf("%s: not a mapping: %v", where, err)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil || tm.APIVersion == "" || tm.Kind == "" {
		return nil, fmt.Errorf("%s: no apiVersion and kind", where)
	}
	obj := newObject(tm.APIVersion, tm.Kind)
	if obj == nil {
		return nil, fmt.Errorf("%s: apiVersion %q kind %q is not a kind these checks know (add it to newObject, with its checks)", where, tm.APIVersion, tm.Kind)
	}
	if err := decodeStrict(js, obj); err != nil {
		return nil, fmt.Errorf("%s (%s): %v", where, tm.Kind, err)
	}
	m := &manifest{file: file, doc: doc, kind: tm.Kind, obj: obj}
	if om, ok := reflect.ValueOf(obj).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta); ok {
		m.name = om.Name
	}
	if m.name == "" {
		return nil, fmt.Errorf("%s (%s): metadata.name is empty", where, tm.Kind)
	}
	return m, nil
}

// decodeStrict decodes the JSON js into obj, refusing fields obj does not
// have. encoding/json matches field names without regard to case, so the
// decoded object is encoded again and every field of js must come back
// under its own spelling with its own value: "RunAsUser" for "runAsUser"
// is refused too.
func decodeStrict(js []byte, obj any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return err
	}
	again, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var in, out any
	if err := json.Unmarshal(js, &in); err != nil {
		return err
	}
	if err := json.Unmarshal(again, &out); err != nil {
		return err
	}
	return subset(in, out, "")
}

// subset returns an error naming the first field of in (a decoded JSON
// value) that out lacks or holds another value for.
func subset(in, out any, path string) error {
	switch v := in.(type) {
	case map[string]any:
		o, ok := out.(map[string]any)
		if !ok {
			return fmt.Errorf("field %s: not an object in the API type", strings.TrimPrefix(path, "."))
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ov, ok := o[k]
			if !ok {
				if isEmpty(v[k]) {
					continue // dropped by omitempty
				}
				return fmt.Errorf("unknown field %q (at %s)", k, strings.TrimPrefix(path+"."+k, "."))
			}
			if err := subset(v[k], ov, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		o, ok := out.([]any)
		if !ok || len(o) != len(v) {
			return fmt.Errorf("field %s: the list does not survive decoding", strings.TrimPrefix(path, "."))
		}
		for i := range v {
			if err := subset(v[i], o[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	default:
		if !reflect.DeepEqual(in, out) {
			return fmt.Errorf("field %s: %v decodes as %v", strings.TrimPrefix(path, "."), in, out)
		}
	}
	return nil
}

// isEmpty reports whether a decoded JSON value is one that omitempty
// leaves out: null, false, 0, "", {} or [].
func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// TestManifestsDecodeStrictly also checks the strict decoder itself: an
// unknown field, a field of the wrong case, an unknown kind and a
// duplicated key are refused, with the place named.
func TestManifestsDecodeStrictly(t *testing.T) {
	all := loadManifests(t)
	kinds := map[string]int{}
	for _, m := range all {
		kinds[m.kind]++
	}
	for _, kind := range []string{"StatefulSet", "Deployment", "Service", "PodDisruptionBudget", "Secret", "Certificate"} {
		if kinds[kind] == 0 {
			t.Errorf("no %s among the manifests in %s", kind, manifestRoot)
		}
	}
	bad := []struct{ yaml, want string }{
		{"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selectr: {a: b}}\n", `unknown field "selectr"`},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {Selector: {a: b}}\n", `unknown field "Selector" (at spec.Selector)`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", `kind "ConfigMap" is not a kind`},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nmetadata: {name: y}\n", `already set in map`},
		{"apiVersion: v1\nkind: Service\nmetadata: {namespace: x}\n", `metadata.name is empty`},
		{"apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: x}\nspec: {secretName: x, commonName: x}\n", `unknown field "commonName"`},
		{"apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: x}\nspec: {secretName: x, privateKey: {algorithm: RSA, sise: 2048}}\n", `unknown field "sise"`},
		{"apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: x}\nspec: {SecretName: x}\n", `unknown field "SecretName" (at spec.SecretName)`},
		{"apiVersion: cert-manager.io/v1alpha2\nkind: Certificate\nmetadata: {name: x}\n", `kind "Certificate" is not a kind`},
	}
	for _, c := range bad {
		_, err := decodeManifest("test.yaml", 1, []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "test.yaml document 1") {
			t.Errorf("decoding %q: error %v, want one naming test.yaml document 1 and %q", c.yaml, err, c.want)
		}
	}
}

// kustomization is the part of a kustomization.yaml these manifests use;
// anything else in one is refused, so that a new field gets a check here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// Every directory of manifests has a kustomization.yaml that lists exactly
// the manifests beside it, except the examples (*.example.yaml), which it
// must not apply.
func TestKustomizations(t *testing.T) {
	files, kusts := manifestFiles(t)
	listed := map[string]string{} // manifest file -> the kustomization listing it
	for _, k := range kusts {
		data, err := os.ReadFile(filepath.Join(manifestRoot, k))
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			t.Errorf("%s: not YAML: %v", k, err)
			continue
		}
		var kz kustomization
		if err := decodeStrict(js, &kz); err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		if kz.APIVersion != "kustomize.config.k8s.io/v1beta1" || kz.Kind != "Kustomization" {
			t.Errorf("%s: apiVersion %q kind %q, want kustomize.config.k8s.io/v1beta1 Kustomization", k, kz.APIVersion, kz.Kind)
		}
		dir := filepath.Dir(k)
		for _, r := range kz.Resources {
			if r != filepath.Base(r) {
				t.Errorf("%s: resource %q is not a file beside it (kustomize refuses files outside its directory)", k, r)
				continue
			}
			rel := filepath.Join(dir, r)
			if _, err := os.Stat(filepath.Join(manifestRoot, rel)); err != nil {
				t.Errorf("%s: resource %q: %v", k, r, err)
			}
			if strings.HasSuffix(r, ".example.yaml") {
				t.Errorf("%s: lists the example %q, which must never be applied", k, r)
			}
			if prev, dup := listed[rel]; dup {
				t.Errorf("%s: lists %q, which %s lists too", k, r, prev)
			}
			listed[rel] = k
		}
	}
	for _, f := range files {
		if _, ok := listed[f]; !ok && !strings.HasSuffix(f, ".example.yaml") {
			t.Errorf("%s is in no kustomization.yaml (add it to %s)", f, filepath.Join(filepath.Dir(f), "kustomization.yaml"))
		}
	}
}

// serveFlags returns serve's flag set, made as the command makes it.
func serveFlags() *flag.FlagSet {
	fs := newFlags("serve")
	(&serveCmd{}).flags(fs)
	return fs
}

// envName is the environment variable that sets the flag name:
// RANDFLAKE_ and the name in upper case with '_' for '-'.
func envName(name string) string {
	return "RANDFLAKE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// serveEnv is the set of environment variables serve reads: one per flag,
// and those that are no flag's: the ordinal of a StatefulSet pod, the
// secret (as 32 hex digits), the state directory, the kernel override,
// and the pod's name and UID (the holder on Kubernetes Lease objects).
func serveEnv() map[string]bool {
	names := map[string]bool{
		"RANDFLAKE_ORDINAL": true, "RANDFLAKE_SECRET_FILE": true, "RANDFLAKE_SECRET": true,
		"RANDFLAKE_STATE_DIR": true, "RANDFLAKE_INSPECT_TOKEN_FILE": true, "RANDFLAKE_KERNEL": true,
		"POD_NAME": true, "POD_UID": true,
	}
	serveFlags().VisitAll(func(f *flag.Flag) { names[envName(f.Name)] = true })
	return names
}

// containerArgs is a container's serve command line, checked against
// serve's real flag set.
type containerArgs struct {
	flags   *flag.FlagSet // with the values the arguments set
	set     map[string]bool
	missing []string // flags serve does not have
	errs    []string // other problems
}

// parseContainerArgs parses args (after "serve") as serve does, but goes
// on past a flag serve does not have, so that all of them are reported;
// such a flag is taken to have a value unless the next argument is a
// flag.
func parseContainerArgs(args []string) *containerArgs {
	c := &containerArgs{flags: serveFlags(), set: map[string]bool{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			c.errs = append(c.errs, fmt.Sprintf("argument %q is not a flag (serve takes no arguments)", a))
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := c.flags.Lookup(name)
		if f == nil {
			c.missing = append(c.missing, "--"+name)
			if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
			continue
		}
		if !hasValue {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				value = "true"
			} else if i+1 < len(args) {
				i++
				value = args[i]
			} else {
				c.errs = append(c.errs, fmt.Sprintf("flag --%s has no value", name))
				continue
			}
		}
		if c.set[name] {
			c.errs = append(c.errs, fmt.Sprintf("flag --%s is given twice", name))
		}
		c.set[name] = true
		if err := c.flags.Set(name, value); err != nil {
			c.errs = append(c.errs, fmt.Sprintf("flag --%s %q: %v", name, value, err))
		}
	}
	return c
}

// value returns the flag's value, or "" for a flag serve does not have.
func (c *containerArgs) value(name string) string {
	if f := c.flags.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// imageConfig is what the Dockerfile says the image runs as and exposes.
type imageConfig struct {
	uid, gid int64
	ports    []int32
}

func readImageConfig(t *testing.T) imageConfig {
	t.Helper()
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var ic imageConfig
	users := 0
	for n, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "USER":
			users++
			u, g, ok := strings.Cut(fields[1], ":")
			uid, err1 := strconv.ParseInt(u, 10, 64)
			gid, err2 := strconv.ParseInt(g, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				t.Fatalf("%s:%d: USER %s: want numeric UID:GID", dockerfile, n+1, fields[1])
			}
			ic.uid, ic.gid = uid, gid
		case "EXPOSE":
			for _, p := range fields[1:] {
				port, err := strconv.ParseInt(strings.TrimSuffix(p, "/tcp"), 10, 32)
				if err != nil {
					t.Fatalf("%s:%d: EXPOSE %s: want a TCP port number", dockerfile, n+1, p)
				}
				ic.ports = append(ic.ports, int32(port))
			}
		}
	}
	if users != 1 || ic.uid == 0 {
		t.Fatalf("%s: want exactly one USER line, not root; found %d, uid %d", dockerfile, users, ic.uid)
	}
	return ic
}

// workload is a StatefulSet's or Deployment's pod template, with what the
// checks need of it.
type workload struct {
	*manifest
	replicas int32
	selector *metav1.LabelSelector
	pod      corev1.PodTemplateSpec
	sts      *appsv1.StatefulSet // nil for a Deployment
}

func workloads(all []*manifest) []*workload {
	var ws []*workload
	for _, m := range all {
		switch o := m.obj.(type) {
		case *appsv1.StatefulSet:
			ws = append(ws, &workload{manifest: m, replicas: deref(o.Spec.Replicas, 1), selector: o.Spec.Selector, pod: o.Spec.Template, sts: o})
		case *appsv1.Deployment:
			ws = append(ws, &workload{manifest: m, replicas: deref(o.Spec.Replicas, 1), selector: o.Spec.Selector, pod: o.Spec.Template})
		}
	}
	return ws
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// serveContainer returns the workload's container that runs serve.
func (w *workload) serveContainer(t reporter) *corev1.Container {
	t.Helper()
	var found *corev1.Container
	for i := range w.pod.Spec.Containers {
		c := &w.pod.Spec.Containers[i]
		if len(c.Command) > 0 {
			t.Errorf("%v: container %s: command %q replaces the image's entrypoint /randflake; set args only", w, c.Name, c.Command)
		}
		if len(c.Args) > 0 && c.Args[0] == "serve" {
			if found != nil {
				t.Errorf("%v: more than one container runs serve", w)
			}
			found = c
		}
	}
	if found == nil {
		t.Fatalf("%v: no container has args starting with serve", w)
	}
	return found
}

// probes returns the container's probes by name.
func probes(c *corev1.Container) map[string]*corev1.Probe {
	return map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe}
}

// portNumber resolves a port given by number or name among the
// container's ports; 0 if it is neither.
func portNumber(c *corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && p.StrVal == cp.Name) || (p.Type == intstr.Int && p.IntVal == cp.ContainerPort) {
			return cp.ContainerPort
		}
	}
	return 0
}

// probeNames are the probes a serve container has, in a fixed order.
var probeNames = []string{"startupProbe", "livenessProbe", "readinessProbe"}

// opsPaths are the paths serve's operations listener (--ops-listen)
// serves; it answers 404 to every other.
var opsPaths = []string{"/healthz", "/readyz", "/metrics"}

// listenPort returns the port of the address the flag (--listen or
// --ops-listen) gives in args, which must be :PORT, or fails t.
func listenPort(t reporter, where string, args *containerArgs, flag string) int32 {
	t.Helper()
	host, port, err := net.SplitHostPort(args.value(flag))
	n, _ := strconv.ParseInt(port, 10, 32)
	if !args.set[flag] || err != nil || host != "" || n <= 0 {
		t.Errorf("%s: args: want --%s :PORT (all addresses: the kubelet's probes, Prometheus and the Services reach it from outside the pod), have %q", where, flag, args.value(flag))
		return 0
	}
	return int32(n)
}

// envValue returns the literal value of the container's variable name,
// or "".
func envValue(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// fileFlags are serve's flags that name a file it reads, true for a
// private file (key material, read with statedir.ReadPrivateFile), false
// for a certificate (statedir.ReadPublicFile).
var fileFlags = map[string]bool{
	"secret-file":            true,
	"tls-cert-file":          false,
	"tls-key-file":           true,
	"tls-client-ca-file":     false,
	"issue-tokens-file":      true,
	"inspect-token-file":     true,
	"etcd-cacert":            false,
	"etcd-cert":              false,
	"etcd-key":               true,
	"etcd-password-file":     true,
	"postgres-password-file": true,
}

// checkFileFlags fails t unless fileFlags names serve's file flags: every
// one is a flag of serve, and every flag of serve named *-file is one.
func checkFileFlags(t *testing.T) {
	t.Helper()
	fs := serveFlags()
	for name := range fileFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("fileFlags: serve has no flag --%s", name)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := fileFlags[f.Name]; !ok && strings.HasSuffix(f.Name, "-file") {
			t.Errorf("fileFlags: serve's --%s names a file: add it, private or not, so that the manifests' use of it is checked", f.Name)
		}
	})
}

// fileSetting is a file a container's serve reads: its flag, where the
// path came from (the argument or the variable) and the path.
type fileSetting struct {
	flag    string
	from    string // "--FLAG" or "env NAME"
	path    string
	private bool
	err     string // what is wrong with the setting itself
}

// containerFiles returns the files the container's serve reads, by flag
// (sorted), each from its argument or else its variable.
func containerFiles(c *corev1.Container, args *containerArgs) []fileSetting {
	var files []fileSetting
	for _, name := range slices.Sorted(maps.Keys(fileFlags)) {
		f := fileSetting{flag: name, private: fileFlags[name]}
		env := envName(name)
		var byEnv *corev1.EnvVar
		for i := range c.Env {
			if c.Env[i].Name == env {
				byEnv = &c.Env[i]
			}
		}
		switch {
		case args.set[name]:
			f.from, f.path = "--"+name, args.value(name)
			if byEnv != nil {
				f.err = fmt.Sprintf("--%s and env %s both set: the argument wins, so the variable is dead; give one", name, env)
			}
		case byEnv != nil:
			f.from, f.path = "env "+env, byEnv.Value
			if byEnv.ValueFrom != nil {
				f.err = fmt.Sprintf("env %s must be a literal path (value), not valueFrom", env)
			}
		default:
			continue
		}
		if f.err == "" && (!filepath.IsAbs(f.path) || filepath.Clean(f.path) != f.path) {
			f.err = fmt.Sprintf("%s %q is not a clean absolute path", f.from, f.path)
		}
		files = append(files, f)
	}
	return files
}

// mountedFile is where a file's path leads in the pod: the container's
// volume mount holding it, the Secret volume, the Secret's key and the
// mode the kubelet writes it with (before fsGroup adds group read).
type mountedFile struct {
	mount  *corev1.VolumeMount
	volume *corev1.Volume
	key    string
	mode   int32
}

// mountedAt finds the Secret volume holding path. serve follows the
// kubelet's links (key -> ..data/key -> ..TIMESTAMP/key) only within the
// directory of the path it is given, so that directory must be the
// volume's mount path itself.
func mountedAt(spec *corev1.PodSpec, c *corev1.Container, path string) (*mountedFile, error) {
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		if path == vm.MountPath {
			return nil, fmt.Errorf("is volumeMounts %s itself (subPath %q): a subPath mount is never updated, so rotated tokens and certificates never arrive; mount the volume's directory", vm.Name, vm.SubPath)
		}
		if strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") && (mount == nil || len(vm.MountPath) > len(mount.MountPath)) {
			mount = vm
		}
	}
	if mount == nil {
		return nil, errors.New("is in no volume the container mounts (the image has no such file)")
	}
	if filepath.Dir(path) != filepath.Clean(mount.MountPath) {
		return nil, fmt.Errorf("is not directly in volumeMounts %s's mountPath %s: serve follows the kubelet's links only within the file's own directory", mount.Name, mount.MountPath)
	}
	if mount.SubPath != "" || mount.SubPathExpr != "" {
		return nil, fmt.Errorf("volumeMounts %s has a subPath: such a mount is never updated", mount.Name)
	}
	if !mount.ReadOnly {
		return nil, fmt.Errorf("volumeMounts %s is not readOnly: true", mount.Name)
	}
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == mount.Name {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil {
		return nil, fmt.Errorf("volumeMounts %s names no volume of spec.volumes", mount.Name)
	}
	sv := vol.Secret
	if sv == nil {
		return nil, fmt.Errorf("volume %s is not a Secret volume (secret: {secretName: ...})", vol.Name)
	}
	if deref(sv.Optional, false) {
		return nil, fmt.Errorf("volume %s is optional: without its Secret the pod would start and serve fail", vol.Name)
	}
	mf := &mountedFile{mount: mount, volume: vol, key: filepath.Base(path), mode: deref(sv.DefaultMode, corev1.SecretVolumeSourceDefaultMode)}
	if len(sv.Items) > 0 {
		found := false
		for _, it := range sv.Items {
			if it.Path == mf.key {
				mf.key, mf.mode, found = it.Key, deref(it.Mode, mf.mode), true
			}
		}
		if !found {
			return nil, fmt.Errorf("volume %s's items put no key at %s", vol.Name, filepath.Base(path))
		}
	}
	return mf, nil
}

// checkFileMode returns what keeps serve, run as the container's user,
// from reading the file as the kubelet writes it: root's, mode mf.mode;
// with the pod's fsGroup, of that group and group-readable (the kubelet
// adds 0440). serve takes key material readable by its group only if root
// owns it and the group is one of the process's (statedir.ReadPrivateFile),
// and no file that group or others may write. The manifests' own rule on
// top: a private file's mode is 0400 or 0440, and 0440 goes with fsGroup,
// the image's group.
func checkFileMode(spec *corev1.PodSpec, c *corev1.Container, image imageConfig, f fileSetting, mf *mountedFile) []string {
	var problems []string
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := effectiveSecurity(spec.SecurityContext, c.SecurityContext)
	mode, group := mf.mode, int64(0)
	if psc.FSGroup != nil {
		mode, group = mode|0o440, *psc.FSGroup
	}
	groups := append([]int64{sc.runAsGroup}, psc.SupplementalGroups...)
	if psc.FSGroup != nil {
		groups = append(groups, *psc.FSGroup)
	}
	ours := slices.Contains(groups, group)
	name := "spec.volumes " + mf.volume.Name + " defaultMode"
	if mode&0o022 != 0 {
		problems = append(problems, fmt.Sprintf("%s %#o: writable by group or others, which serve refuses", name, mf.mode))
	}
	readable := sc.runAsUser == 0 || mode&0o004 != 0 || mode&0o040 != 0 && ours
	if !readable {
		problems = append(problems, fmt.Sprintf("user %d (groups %v) cannot read root's file, mode %#o, group %d: set the pod's securityContext.fsGroup to %d", sc.runAsUser, groups, mode, group, image.gid))
	}
	if !f.private {
		return problems
	}
	if mf.mode != 0o400 && mf.mode != 0o440 {
		problems = append(problems, fmt.Sprintf("%s %#o: key material is 0440 (with fsGroup) or 0400, never readable by others", name, mf.mode))
	} else if mf.mode == 0o440 && deref(psc.FSGroup, -1) != image.gid {
		is := "unset"
		if psc.FSGroup != nil {
			is = fmt.Sprint(*psc.FSGroup)
		}
		problems = append(problems, fmt.Sprintf("%s 0440 needs spec.securityContext.fsGroup %d, the image's group (%s), to give the files to; it is %s", name, image.gid, dockerfile, is))
	}
	if mode&0o007 != 0 || mode&0o070 != 0 && !ours {
		problems = append(problems, fmt.Sprintf("mode %#o, group %d: serve refuses key material that others, or a group the process is not in, may read", mode, group))
	}
	return problems
}

// describedSecrets returns the keys of every Secret the manifests
// describe: the example Secrets' (a kubernetes.io/tls Secret always has
// tls.crt and tls.key), and those cert-manager writes for a Certificate.
func describedSecrets(all []*manifest) map[string]map[string]bool {
	keys := map[string]map[string]bool{}
	add := func(name string, ks ...string) {
		if keys[name] == nil {
			keys[name] = map[string]bool{}
		}
		for _, k := range ks {
			keys[name][k] = true
		}
	}
	for _, m := range all {
		switch o := m.obj.(type) {
		case *corev1.Secret:
			add(o.Name)
			for k := range o.StringData {
				add(o.Name, k)
			}
			for k := range o.Data {
				add(o.Name, k)
			}
			if o.Type == corev1.SecretTypeTLS {
				add(o.Name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
			}
		case *certificate:
			add(o.Spec.SecretName, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, "ca.crt")
		}
	}
	return keys
}

// The workloads' containers against serve and the image: flags, the
// environment, files and volumes, ports, probes, grace period, users and
// security.
func TestManifestWorkloads(t *testing.T) {
	wc := newWorkloadChecks(t)
	checkFileFlags(t)
	ws := workloads(wc.all)
	if len(ws) == 0 {
		t.Fatalf("no StatefulSet or Deployment in %s", manifestRoot)
	}
	for _, w := range ws {
		t.Run(strings.ReplaceAll(w.file, "/", "_"), func(t *testing.T) { wc.check(t, w) })
	}
}

// reporter is what the workload checks report to: the test's *testing.T,
// or a recorder in the test of the checks themselves.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// workloadChecks is what the checks of a workload compare it with: every
// manifest, the image, the variables serve reads and the Secrets' keys.
type workloadChecks struct {
	all       []*manifest
	image     imageConfig
	readable  map[string]bool
	described map[string]map[string]bool
}

func newWorkloadChecks(t *testing.T) *workloadChecks {
	t.Helper()
	all := loadManifests(t)
	return &workloadChecks{all: all, image: readImageConfig(t), readable: serveEnv(), described: describedSecrets(all)}
}

// check reports what is wrong with the workload w to t.
func (wc *workloadChecks) check(t reporter, w *workload) {
	t.Helper()
	spec := &w.pod.Spec
	c := w.serveContainer(t)
	where := fmt.Sprintf("%v: container %s", w, c.Name)
	args := parseContainerArgs(c.Args[1:])
	if len(args.missing) > 0 {
		t.Errorf("%s: args: serve has no flags %s (not in randflake serve --help)", where, strings.Join(args.missing, ", "))
	}
	for _, e := range args.errs {
		t.Errorf("%s: args: %s", where, e)
	}

	// Selector and labels.
	sel, err := metav1.LabelSelectorAsSelector(w.selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.pod.Labels)) {
		t.Errorf("%v: spec.selector %v does not select the pod template's labels %v (%v)", w, w.selector, w.pod.Labels, err)
	}

	// Ports: --listen (HTTPS with the TLS flags) and --ops-listen
	// (plain HTTP: probes and metrics), the container's ports
	// named for them, the image's EXPOSE.
	tlsOn := args.set["tls-cert-file"] || envValue(c, envName("tls-cert-file")) != ""
	lp := listenPort(t, where, args, "listen")
	op := listenPort(t, where, args, "ops-listen")
	if lp != 0 && lp == op {
		t.Errorf("%s: args: --listen and --ops-listen are both port %d", where, lp)
	}
	mainName := "http"
	if tlsOn {
		mainName = "https"
	}
	want := []corev1.ContainerPort{{Name: mainName, ContainerPort: lp}, {Name: "ops", ContainerPort: op}}
	if len(c.Ports) != len(want) {
		t.Errorf("%s: ports %v: want two, %s (the --listen port %d) and ops (the --ops-listen port %d)", where, c.Ports, mainName, lp, op)
	}
	for i := 0; i < len(want) && i < len(c.Ports); i++ {
		got := c.Ports[i]
		if got.Name != want[i].Name || got.ContainerPort != want[i].ContainerPort || (got.Protocol != "" && got.Protocol != corev1.ProtocolTCP) {
			t.Errorf("%s: ports[%d] is %s %d/%s, want %s %d/TCP", where, i, got.Name, got.ContainerPort, got.Protocol, want[i].Name, want[i].ContainerPort)
		}
	}
	if !slices.Contains(wc.image.ports, lp) {
		t.Errorf("%s: --listen port %d is not a port %s exposes (%v)", where, lp, dockerfile, wc.image.ports)
	}

	// Probes: plain-HTTP GETs on the operations port, of paths it
	// serves (the kubelet sends no token or client certificate);
	// readiness is not liveness.
	for _, name := range probeNames {
		p := probes(c)[name]
		if p == nil {
			t.Errorf("%s: no %s", where, name)
			continue
		}
		if p.HTTPGet == nil {
			t.Errorf("%s: %s is not an httpGet", where, name)
			continue
		}
		if got := portNumber(c, p.HTTPGet.Port); got == 0 || got != op {
			t.Errorf("%s: %s.httpGet.port %s is port %d, not the --ops-listen port %d", where, name, p.HTTPGet.Port.String(), got, op)
		}
		if p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP {
			t.Errorf("%s: %s.httpGet.scheme %s: the operations port is plain HTTP", where, name, p.HTTPGet.Scheme)
		}
		if !slices.Contains(opsPaths, p.HTTPGet.Path) {
			t.Errorf("%s: %s.httpGet.path %q is not a path the operations listener serves (%s)", where, name, p.HTTPGet.Path, strings.Join(opsPaths, ", "))
		}
	}
	if c.ReadinessProbe != nil && c.LivenessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet != nil {
		if c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: readinessProbe.httpGet.path %q: want /readyz (503 without a valid lease)", where, c.ReadinessProbe.HTTPGet.Path)
		}
		if c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("%s: livenessProbe.httpGet.path %q: want /healthz (/readyz would restart pods that merely wait for a lease)", where, c.LivenessProbe.HTTPGet.Path)
		}
	}

	// The environment: only names serve reads; RANDFLAKE_SECRET
	// only from a Secret, and one an example describes.
	for _, e := range c.Env {
		if !wc.readable[e.Name] {
			t.Errorf("%s: env %s is not a variable serve reads (flags: RANDFLAKE_<FLAG>; also RANDFLAKE_ORDINAL, RANDFLAKE_SECRET, RANDFLAKE_SECRET_FILE)", where, e.Name)
		}
		if e.Name == "RANDFLAKE_SECRET" && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("%s: env RANDFLAKE_SECRET must come from valueFrom.secretKeyRef, never a value in the manifest", where)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			if keys, ok := wc.described[ref.Name]; !ok {
				t.Errorf("%s: env %s: secretKeyRef to Secret %q, which no manifest (secret.example.yaml) describes", where, e.Name, ref.Name)
			} else if !keys[ref.Key] {
				t.Errorf("%s: env %s: secretKeyRef key %q is not a key of the Secret %q", where, e.Name, ref.Key, ref.Name)
			}
		}
	}

	// Files: the fleet secret from a Secret volume, and every
	// file serve reads in a Secret volume the pod's user may
	// read and serve accepts.
	files := containerFiles(c, args)
	for _, f := range files {
		if f.err != "" {
			t.Errorf("%s: %s", where, f.err)
		}
	}
	if !slices.ContainsFunc(files, func(f fileSetting) bool { return f.flag == "secret-file" }) {
		t.Errorf("%s: no env RANDFLAKE_SECRET_FILE (or --secret-file): the fleet secret must come from a Secret volume", where)
	} else if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "RANDFLAKE_SECRET" }) {
		t.Errorf("%s: both RANDFLAKE_SECRET_FILE and RANDFLAKE_SECRET: the file wins, so the variable is dead; give one", where)
	}
	for _, f := range files {
		if f.err != "" {
			continue
		}
		mf, err := mountedAt(spec, c, f.path)
		if err != nil {
			t.Errorf("%s: %s %s: %v", where, f.from, f.path, err)
			continue
		}
		if keys, ok := wc.described[mf.volume.Secret.SecretName]; !ok {
			t.Errorf("%v: spec.volumes %s: Secret %q is described by no manifest (an example Secret or a Certificate's secretName)", w, mf.volume.Name, mf.volume.Secret.SecretName)
		} else if !keys[mf.key] {
			t.Errorf("%s: %s %s: key %q is not a key of the Secret %q (it has %s)", where, f.from, f.path, mf.key, mf.volume.Secret.SecretName, strings.Join(slices.Sorted(maps.Keys(keys)), ", "))
		}
		for _, problem := range checkFileMode(spec, c, wc.image, f, mf) {
			t.Errorf("%s: %s %s: %s", where, f.from, f.path, problem)
		}
	}
	if len(c.EnvFrom) > 0 {
		t.Errorf("%s: envFrom brings in names nobody checks; list env one by one", where)
	}
	if deref(spec.EnableServiceLinks, true) {
		t.Errorf("%v: spec.enableServiceLinks must be false: Service variables such as RANDFLAKE_PORT share the prefix of serve's settings", w)
	}
	if args.value("node-source") == "kubernetes" {
		checkLeaseAccess(t, w, wc.all)
	} else if deref(spec.AutomountServiceAccountToken, true) {
		t.Errorf("%v: spec.automountServiceAccountToken must be false: serve uses no Kubernetes API", w)
	}

	// Node IDs.
	switch source := args.value("node-source"); {
	case w.sts != nil:
		if args.set["node-source"] && source != "statefulset" {
			t.Errorf("%s: a StatefulSet with --node-source %q, want statefulset", where, source)
		}
		checkOrdinal(t, where, c)
		perPod := int64(1024)
		if v := args.value("nodes-per-pod"); v != "" {
			perPod, _ = strconv.ParseInt(v, 10, 64)
		}
		if perPod < 1 || int64(w.replicas)*perPod > randflake.MaxNode+1 {
			t.Errorf("%v: spec.replicas %d x --nodes-per-pod %d exceeds the %d node IDs", w, w.replicas, perPod, randflake.MaxNode+1)
		}
		if w.sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			t.Errorf("%v: spec.podManagementPolicy %q, want Parallel (the pods' node IDs never overlap)", w, w.sts.Spec.PodManagementPolicy)
		}
		checkGoverningService(t, w, wc.all)
	default:
		if source == "statefulset" || args.set["nodes"] {
			t.Errorf("%s: a Deployment's pods have no ordinals and share their template: node IDs must come from etcd, PostgreSQL or Kubernetes Lease objects", where)
		}
	}

	// Shutdown: the grace period covers the preStop sleep and
	// --shutdown-timeout, with margin for releasing the node IDs.
	grace, err := time.ParseDuration(args.value("shutdown-timeout"))
	if err != nil {
		t.Fatalf("%s: --shutdown-timeout: %v", where, err)
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if c.Lifecycle.PreStop.Sleep == nil {
			t.Errorf("%s: lifecycle.preStop must be a sleep (the image has no shell)", where)
		} else {
			preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	period := time.Duration(deref(spec.TerminationGracePeriodSeconds, 30)) * time.Second
	if period <= preStop+grace {
		t.Errorf("%v: spec.terminationGracePeriodSeconds %v does not exceed preStop %v + --shutdown-timeout %v", w, period, preStop, grace)
	}

	// Users and security.
	if psc := spec.SecurityContext; psc != nil && (psc.RunAsUser != nil && *psc.RunAsUser != wc.image.uid || psc.RunAsGroup != nil && *psc.RunAsGroup != wc.image.gid) {
		t.Errorf("%v: spec.securityContext runs as %d:%d, the image's USER is %d:%d (%s)", w, deref(psc.RunAsUser, -1), deref(psc.RunAsGroup, -1), wc.image.uid, wc.image.gid, dockerfile)
	}
	sc := effectiveSecurity(spec.SecurityContext, c.SecurityContext)
	if sc.runAsUser != wc.image.uid || sc.runAsGroup != wc.image.gid {
		t.Errorf("%s: runs as %d:%d, the image's USER is %d:%d (%s)", where, sc.runAsUser, sc.runAsGroup, wc.image.uid, wc.image.gid, dockerfile)
	}
	if !sc.runAsNonRoot {
		t.Errorf("%s: securityContext.runAsNonRoot must be true", where)
	}
	if !sc.seccompDefault {
		t.Errorf("%s: securityContext.seccompProfile.type must be RuntimeDefault", where)
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	if !deref(csc.ReadOnlyRootFilesystem, false) {
		t.Errorf("%s: securityContext.readOnlyRootFilesystem must be true", where)
	}
	if deref(csc.AllowPrivilegeEscalation, true) {
		t.Errorf("%s: securityContext.allowPrivilegeEscalation must be false", where)
	}
	if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
		t.Errorf("%s: securityContext.capabilities must drop ALL and add none", where)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("%s: resources.requests.%s is not set", where, r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("%s: resources.limits.%s is not set", where, r)
		}
	}
}

// recorder collects what the workload checks report, for the test of the
// checks themselves; Fatalf ends a check as it ends a test.
type recorder struct{ msgs []string }

// fatalStop is what recorder.Fatalf panics with.
type fatalStop struct{}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(fatalStop{})
}

// run runs fn, which may end with Fatalf.
func (r *recorder) run(fn func()) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(fatalStop); !ok {
				panic(v)
			}
		}
	}()
	fn()
}

// The workload checks refuse what would keep the pod from starting,
// being probed or being safe, each naming the file, the document and the
// field: the StatefulSet, changed one way at a time, draws the error
// given, and unchanged none.
func TestManifestChecksRefuse(t *testing.T) {
	wc := newWorkloadChecks(t)
	var base *workload
	for _, w := range workloads(wc.all) {
		if w.sts != nil {
			base = w
		}
	}
	if base == nil {
		t.Fatalf("no StatefulSet in %s", manifestRoot)
	}
	serve := func(p *corev1.PodSpec) *corev1.Container {
		for i := range p.Containers {
			if len(p.Containers[i].Args) > 0 && p.Containers[i].Args[0] == "serve" {
				return &p.Containers[i]
			}
		}
		t.Fatalf("%v: no serve container", base)
		return nil
	}
	volume := func(p *corev1.PodSpec, name string) *corev1.Volume {
		for i := range p.Volumes {
			if p.Volumes[i].Name == name {
				return &p.Volumes[i]
			}
		}
		t.Fatalf("%v: no volume %s", base, name)
		return nil
	}
	mount := func(p *corev1.PodSpec, name string) *corev1.VolumeMount {
		c := serve(p)
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == name {
				return &c.VolumeMounts[i]
			}
		}
		t.Fatalf("%v: no volumeMount %s", base, name)
		return nil
	}
	// setEnv sets the variable name, or removes it for nil.
	setEnv := func(p *corev1.PodSpec, name string, e *corev1.EnvVar) {
		c := serve(p)
		c.Env = slices.DeleteFunc(c.Env, func(v corev1.EnvVar) bool { return v.Name == name })
		if e != nil {
			e.Name = name
			c.Env = append(c.Env, *e)
		}
	}
	// setArg sets the value of --flag, or removes it for "".
	setArg := func(p *corev1.PodSpec, flag, value string) {
		c := serve(p)
		i := slices.Index(c.Args, "--"+flag)
		switch {
		case i < 0 && value != "":
			c.Args = append(c.Args, "--"+flag, value)
		case i >= 0 && value == "":
			c.Args = slices.Delete(c.Args, i, i+2)
		case i >= 0:
			c.Args[i+1] = value
		}
	}
	fromSecret := &corev1.EnvVar{ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "randflake"}, Key: "secret"}}}
	mode := func(m int32) *int32 { return &m }
	cases := []struct {
		name   string
		change func(p *corev1.PodSpec)
		want   string
	}{
		{"the secret readable by all", func(p *corev1.PodSpec) { volume(p, "secret").Secret.DefaultMode = mode(0o444) }, "spec.volumes secret defaultMode 0444: key material is 0440 (with fsGroup) or 0400"},
		{"the key writable by the group", func(p *corev1.PodSpec) { volume(p, "tls").Secret.DefaultMode = mode(0o660) }, "spec.volumes tls defaultMode 0660: writable by group or others"},
		{"no fsGroup", func(p *corev1.PodSpec) { p.SecurityContext.FSGroup = nil }, "cannot read root's file, mode 0440, group 0: set the pod's securityContext.fsGroup to 65532"},
		{"no fsGroup, mode 0400", func(p *corev1.PodSpec) {
			p.SecurityContext.FSGroup = nil
			volume(p, "secret").Secret.DefaultMode = mode(0o400)
		}, "cannot read root's file, mode 0400"},
		{"another fsGroup", func(p *corev1.PodSpec) { p.SecurityContext.FSGroup = ptr(int64(1000)) }, "defaultMode 0440 needs spec.securityContext.fsGroup 65532"},
		{"the secret below the mount path", func(p *corev1.PodSpec) {
			setEnv(p, "RANDFLAKE_SECRET_FILE", &corev1.EnvVar{Value: "/etc/randflake/secret/..data/secret"})
		}, "is not directly in volumeMounts secret's mountPath /etc/randflake/secret"},
		{"the secret from the environment only", func(p *corev1.PodSpec) {
			setEnv(p, "RANDFLAKE_SECRET_FILE", nil)
			setEnv(p, "RANDFLAKE_SECRET", fromSecret)
		}, "no env RANDFLAKE_SECRET_FILE (or --secret-file): the fleet secret must come from a Secret volume"},
		{"the secret twice", func(p *corev1.PodSpec) { setEnv(p, "RANDFLAKE_SECRET", fromSecret) }, "both RANDFLAKE_SECRET_FILE and RANDFLAKE_SECRET"},
		{"a key of no Secret", func(p *corev1.PodSpec) {
			setEnv(p, "RANDFLAKE_SECRET_FILE", &corev1.EnvVar{Value: "/etc/randflake/secret/fleet"})
		}, `key "fleet" is not a key of the Secret "randflake"`},
		{"a Secret nobody describes", func(p *corev1.PodSpec) { volume(p, "tls").Secret.SecretName = "randflake-other" }, `spec.volumes tls: Secret "randflake-other" is described by no manifest`},
		{"a key outside every volume", func(p *corev1.PodSpec) { setArg(p, "tls-key-file", "/etc/randflake/tls.key") }, "--tls-key-file /etc/randflake/tls.key: is in no volume the container mounts"},
		{"a relative path", func(p *corev1.PodSpec) { setArg(p, "tls-cert-file", "tls/tls.crt") }, `--tls-cert-file "tls/tls.crt" is not a clean absolute path`},
		{"a certificate by argument and variable", func(p *corev1.PodSpec) {
			setEnv(p, "RANDFLAKE_TLS_CERT_FILE", &corev1.EnvVar{Value: "/etc/randflake/tls/tls.crt"})
		}, "--tls-cert-file and env RANDFLAKE_TLS_CERT_FILE both set"},
		{"a tokens file from valueFrom", func(p *corev1.PodSpec) {
			setArg(p, "issue-tokens-file", "")
			setEnv(p, "RANDFLAKE_ISSUE_TOKENS_FILE", fromSecret)
		}, "env RANDFLAKE_ISSUE_TOKENS_FILE must be a literal path"},
		{"a writable mount", func(p *corev1.PodSpec) { mount(p, "tls").ReadOnly = false }, "volumeMounts tls is not readOnly: true"},
		{"a subPath mount", func(p *corev1.PodSpec) {
			c := serve(p)
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tls", MountPath: "/etc/randflake/tls/tls.key", SubPath: "tls.key", ReadOnly: true})
		}, "--tls-key-file /etc/randflake/tls/tls.key: is volumeMounts tls itself (subPath \"tls.key\"): a subPath mount is never updated"},
		{"a ConfigMap for the certificate", func(p *corev1.PodSpec) {
			v := volume(p, "tls")
			v.Secret, v.ConfigMap = nil, &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "randflake-tls"}}
		}, "volume tls is not a Secret volume"},
		{"an optional Secret", func(p *corev1.PodSpec) { volume(p, "clients").Secret.Optional = ptr(true) }, "volume clients is optional"},
		{"items that move the key", func(p *corev1.PodSpec) {
			volume(p, "secret").Secret.Items = []corev1.KeyToPath{{Key: "secret", Path: "fleet"}}
		}, "volume secret's items put no key at secret"},
		{"the readiness probe on the HTTPS port", func(p *corev1.PodSpec) {
			serve(p).ReadinessProbe.HTTPGet.Port = intstr.FromString("https")
		}, "readinessProbe.httpGet.port https is port 8080, not the --ops-listen port 9090"},
		{"the liveness probe on a path ops does not serve", func(p *corev1.PodSpec) {
			serve(p).LivenessProbe.HTTPGet.Path = "/v1/ids"
		}, `livenessProbe.httpGet.path "/v1/ids" is not a path the operations listener serves`},
		{"the startup probe over HTTPS", func(p *corev1.PodSpec) {
			serve(p).StartupProbe.HTTPGet.Scheme = corev1.URISchemeHTTPS
		}, "startupProbe.httpGet.scheme HTTPS: the operations port is plain HTTP"},
		{"no operations listener", func(p *corev1.PodSpec) { setArg(p, "ops-listen", "") }, "args: want --ops-listen :PORT"},
		{"the operations listener on loopback", func(p *corev1.PodSpec) { setArg(p, "ops-listen", "127.0.0.1:9090") }, `want --ops-listen :PORT (all addresses: the kubelet's probes, Prometheus and the Services reach it from outside the pod), have "127.0.0.1:9090"`},
		{"the operations port under another name", func(p *corev1.PodSpec) { serve(p).Ports[1].Name = "metrics" }, "ports[1] is metrics 9090/TCP, want ops 9090/TCP"},
		{"no operations port", func(p *corev1.PodSpec) { serve(p).Ports = serve(p).Ports[:1] }, "want two, https (the --listen port 8080) and ops (the --ops-listen port 9090)"},
		{"both listeners on one port", func(p *corev1.PodSpec) { setArg(p, "ops-listen", ":8080") }, "--listen and --ops-listen are both port 8080"},
	}
	run := func(change func(p *corev1.PodSpec)) []string {
		w := *base
		pod := base.pod.DeepCopy()
		change(&pod.Spec)
		w.pod = *pod
		r := &recorder{}
		r.run(func() { wc.check(r, &w) })
		return r.msgs
	}
	if msgs := run(func(*corev1.PodSpec) {}); len(msgs) > 0 {
		t.Fatalf("the unchanged StatefulSet draws errors:\n%s", strings.Join(msgs, "\n"))
	}
	for _, c := range cases {
		msgs := run(c.change)
		if !slices.ContainsFunc(msgs, func(m string) bool {
			return strings.Contains(m, c.want) && strings.HasPrefix(m, base.file+" document 1 (StatefulSet randflake)")
		}) {
			t.Errorf("%s: no error naming %s document 1 and saying %q; got:\n%s", c.name, base.file, c.want, strings.Join(msgs, "\n"))
		}
	}
}

func ptr[T any](v T) *T { return &v }

// checkOrdinal checks that a StatefulSet's container takes its ordinal
// from the pod-index label.
func checkOrdinal(t reporter, where string, c *corev1.Container) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == "RANDFLAKE_ORDINAL" {
			want := "metadata.labels['" + appsv1.PodIndexLabel + "']"
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != want {
				t.Errorf("%s: env RANDFLAKE_ORDINAL must come from valueFrom.fieldRef.fieldPath %s", where, want)
			}
			return
		}
	}
	t.Errorf("%s: no env RANDFLAKE_ORDINAL (from the pod label %s)", where, appsv1.PodIndexLabel)
}

// checkGoverningService checks the StatefulSet's serviceName: a headless
// Service in the same directory that selects its pods.
func checkGoverningService(t reporter, w *workload, all []*manifest) {
	t.Helper()
	for _, m := range all {
		if s, ok := m.obj.(*corev1.Service); ok && s.Name == w.sts.Spec.ServiceName && filepath.Dir(m.file) == filepath.Dir(w.file) {
			if s.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("%v: the governing Service %v is not headless (clusterIP: None)", w, m)
			}
			return
		}
	}
	t.Errorf("%v: spec.serviceName %q names no Service in %s", w, w.sts.Spec.ServiceName, dirOf(w.manifest))
}

// security is a container's effective security settings: its own, else
// the pod's.
type security struct {
	runAsUser, runAsGroup        int64
	runAsNonRoot, seccompDefault bool
}

func effectiveSecurity(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) security {
	var s security
	s.runAsUser, s.runAsGroup = -1, -1
	if pod != nil {
		s.runAsUser = deref(pod.RunAsUser, -1)
		s.runAsGroup = deref(pod.RunAsGroup, -1)
		s.runAsNonRoot = deref(pod.RunAsNonRoot, false)
		s.seccompDefault = pod.SeccompProfile != nil && pod.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	}
	if c != nil {
		s.runAsUser = deref(c.RunAsUser, s.runAsUser)
		s.runAsGroup = deref(c.RunAsGroup, s.runAsGroup)
		s.runAsNonRoot = deref(c.RunAsNonRoot, s.runAsNonRoot)
		if c.SeccompProfile != nil {
			s.seccompDefault = c.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
		}
	}
	return s
}

// Services and PodDisruptionBudgets select the pods of a workload beside
// them; Services reach its ports under their names, clients the HTTPS
// port through a ClusterIP Service and Prometheus the operations port
// through another; the example Secrets hold nothing randflake would take.
func TestManifestServicesAndBudgets(t *testing.T) {
	all := loadManifests(t)
	ws := workloads(all)
	type reach struct{ clients, ops bool }
	reached := map[*workload]*reach{}
	for _, w := range ws {
		reached[w] = &reach{}
	}
	selects := func(m *manifest, sel labels.Selector) *workload {
		for _, w := range ws {
			if filepath.Dir(w.file) == filepath.Dir(m.file) && !sel.Empty() && sel.Matches(labels.Set(w.pod.Labels)) {
				return w
			}
		}
		return nil
	}
	for _, m := range all {
		switch o := m.obj.(type) {
		case *corev1.Service:
			w := selects(m, labels.SelectorFromSet(o.Spec.Selector))
			if w == nil {
				t.Errorf("%v: spec.selector %v selects no workload's pods in %s", m, o.Spec.Selector, dirOf(m))
				continue
			}
			c := w.serveContainer(t)
			if len(o.Spec.Ports) == 0 {
				t.Errorf("%v: no ports", m)
			}
			for i, p := range o.Spec.Ports {
				target := p.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(p.Port)
				}
				n := portNumber(c, target)
				if n == 0 {
					t.Errorf("%v: spec.ports[%d].targetPort %s is no port of %v's container %s", m, i, target.String(), w, c.Name)
					continue
				}
				for _, cp := range c.Ports {
					if cp.ContainerPort == n && cp.Name != p.Name {
						t.Errorf("%v: spec.ports[%d] is named %q but reaches the container's port %q (%d)", m, i, p.Name, cp.Name, n)
					}
				}
				args := parseContainerArgs(c.Args[1:])
				switch fmt.Sprint(n) {
				case strings.TrimPrefix(args.value("listen"), ":"):
					if o.Spec.ClusterIP != corev1.ClusterIPNone {
						reached[w].clients = true
					}
				case strings.TrimPrefix(args.value("ops-listen"), ":"):
					reached[w].ops = true
				}
			}
		case *policyv1.PodDisruptionBudget:
			sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
			if err != nil {
				t.Errorf("%v: spec.selector: %v", m, err)
			} else if selects(m, sel) == nil {
				t.Errorf("%v: spec.selector %v selects no workload's pods in %s", m, sel, dirOf(m))
			}
			if (o.Spec.MinAvailable == nil) == (o.Spec.MaxUnavailable == nil) {
				t.Errorf("%v: set one of spec.minAvailable and spec.maxUnavailable", m)
			}
		case *corev1.Secret:
			if !strings.HasSuffix(m.file, ".example.yaml") {
				t.Errorf("%v: a Secret belongs in an example (NAME.example.yaml) only: real secrets are made with randflake keygen", m)
			}
			if len(o.Data) > 0 {
				t.Errorf("%v: data holds values; the example has placeholders in stringData only", m)
			}
			for k, v := range o.StringData {
				if _, err := statedir.ParseSecret([]byte(v)); err == nil {
					t.Errorf("%v: stringData.%s is a usable secret; it must be a placeholder randflake refuses", m, k)
				}
				if _, err := server.ParseIssueTokens([]byte(v)); err == nil {
					t.Errorf("%v: stringData.%s is a usable issue tokens file; it must be a placeholder randflake refuses", m, k)
				}
				if b, _ := pem.Decode([]byte(v)); b != nil {
					t.Errorf("%v: stringData.%s holds a PEM %s; it must be a placeholder", m, k, b.Type)
				}
			}
			if o.Type == corev1.SecretTypeTLS {
				for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
					if _, ok := o.StringData[k]; !ok {
						t.Errorf("%v: a kubernetes.io/tls Secret needs stringData.%s", m, k)
					}
				}
			}
		}
	}
	for _, w := range ws {
		if !reached[w].clients {
			t.Errorf("%v: no ClusterIP Service in %s reaches its --listen port (the clients' HTTPS)", w, dirOf(w.manifest))
		}
		if !reached[w].ops {
			t.Errorf("%v: no Service in %s reaches its --ops-listen port (Prometheus scrapes /metrics there)", w, dirOf(w.manifest))
		}
	}
}

// The optional cert-manager Certificate makes the TLS Secret the
// workloads mount for --tls-cert-file, for the names clients use: every
// ClusterIP Service's, short and NAME.NAMESPACE.svc, and the StatefulSet
// pods' (*.GOVERNING-SERVICE); for serving; renewed before it ends; from
// a named issuer.
func TestManifestCertificate(t *testing.T) {
	all := loadManifests(t)
	var certs []*manifest
	for _, m := range all {
		if _, ok := m.obj.(*certificate); ok {
			certs = append(certs, m)
		}
	}
	if len(certs) == 0 {
		t.Fatalf("no cert-manager Certificate in %s", manifestRoot)
	}
	for _, m := range certs {
		crt := m.obj.(*certificate)
		spec := crt.Spec
		if dirOf(m) == "deploy/kubernetes" || dirOf(m) == "deploy/kubernetes/etcd" {
			t.Errorf("%v: the Certificate needs cert-manager, an add-on: keep it out of the workloads' directories (and their kustomizations)", m)
		}
		for _, w := range workloads(all) {
			c := w.serveContainer(t)
			for _, f := range containerFiles(c, parseContainerArgs(c.Args[1:])) {
				if f.flag != "tls-cert-file" {
					continue
				}
				if mf, err := mountedAt(&w.pod.Spec, c, f.path); err == nil && mf.volume.Secret.SecretName != spec.SecretName {
					t.Errorf("%v: spec.secretName %q, but %v reads its certificate from the Secret %q", m, spec.SecretName, w, mf.volume.Secret.SecretName)
				}
			}
		}
		names := map[string]bool{}
		for _, n := range spec.DNSNames {
			names[n] = true
		}
		hasSvc := func(prefix string) bool {
			for n := range names {
				if strings.HasPrefix(n, prefix+".") && strings.Count(n, ".") >= strings.Count(prefix, ".")+2 && strings.Contains(n+".", ".svc.") {
					return true
				}
			}
			return false
		}
		for _, o := range all {
			svc, ok := o.obj.(*corev1.Service)
			if !ok {
				continue
			}
			if svc.Spec.ClusterIP != corev1.ClusterIPNone {
				if !names[svc.Name] || !hasSvc(svc.Name) {
					t.Errorf("%v: spec.dnsNames %v: want %s and %s.NAMESPACE.svc, the names clients use for %v", m, spec.DNSNames, svc.Name, svc.Name, o)
				}
				continue
			}
			for _, w := range workloads(all) {
				if w.sts != nil && w.sts.Spec.ServiceName == svc.Name && filepath.Dir(w.file) == filepath.Dir(o.file) {
					if wild := "*." + svc.Name; !names[wild] || !hasSvc(wild) {
						t.Errorf("%v: spec.dnsNames %v: want %s and %s.NAMESPACE.svc, the names of %v's pods", m, spec.DNSNames, wild, wild, w)
					}
				}
			}
		}
		if !slices.Contains(spec.Usages, "server auth") {
			t.Errorf("%v: spec.usages %v: want \"server auth\"", m, spec.Usages)
		}
		if spec.IssuerRef.Name == "" || (spec.IssuerRef.Kind != "Issuer" && spec.IssuerRef.Kind != "ClusterIssuer") || (spec.IssuerRef.Group != "" && spec.IssuerRef.Group != "cert-manager.io") {
			t.Errorf("%v: spec.issuerRef %+v: want a name and kind Issuer or ClusterIssuer of cert-manager.io", m, spec.IssuerRef)
		}
		duration, err1 := time.ParseDuration(spec.Duration)
		renew, err2 := time.ParseDuration(spec.RenewBefore)
		if err1 != nil || err2 != nil || duration < time.Hour || renew <= 0 || renew >= duration {
			t.Errorf("%v: spec.duration %q and spec.renewBefore %q: want durations, at least 1h and renewal before the end", m, spec.Duration, spec.RenewBefore)
		}
		if pk := spec.PrivateKey; pk != nil {
			if !slices.Contains([]string{"", "RSA", "ECDSA", "Ed25519"}, pk.Algorithm) || !slices.Contains([]string{"", "PKCS1", "PKCS8"}, pk.Encoding) || !slices.Contains([]string{"", "Always", "Never"}, pk.RotationPolicy) {
				t.Errorf("%v: spec.privateKey %+v: algorithm RSA, ECDSA or Ed25519, encoding PKCS1 or PKCS8, rotationPolicy Always or Never", m, *pk)
			}
		}
	}
}

// opsServingRE matches serve's log line naming the address of its
// operations listener, in text or JSON.
var opsServingRE = regexp.MustCompile(`msg="serving operations" addr=(\S+)|"msg":"serving operations","addr":"([^"]+)"`)

// standIns are what TestManifestServeAnswersProbes puts in the files a
// workload's serve reads: a test CA, a server certificate it signed (for
// 127.0.0.1), a client certificate, a client's issue token.
type standIns struct {
	ca             *tlstest.CA
	server, client tlstest.Pair
	token          string // of the client "manifest-test"
}

// content is the stand-in for the file of a file flag, if there is one.
func (s *standIns) content(flag string) (string, bool) {
	switch flag {
	case "secret-file":
		return testSecretHex + "\n", true // as randflake keygen writes it
	case "tls-cert-file":
		return string(s.server.CertPEM), true
	case "tls-key-file":
		return string(s.server.KeyPEM), true
	case "tls-client-ca-file":
		return string(s.ca.PEM), true
	case "issue-tokens-file":
		return "manifest-test " + s.token + "\n", true
	case "inspect-token-file":
		return "manifest-inspection-token-0123456789\n", true
	}
	return "", false
}

// podVolume is a Secret volume of the pod as the test lays it out.
type podVolume struct {
	mf   *mountedFile
	keys map[string]string // the Secret's keys -> content
}

// files returns the volume's files by name: each key of the Secret, or
// with items, the keys they list under their paths.
func (v *podVolume) files() map[string]string {
	items := v.mf.volume.Secret.Items
	if len(items) == 0 {
		return v.keys
	}
	files := map[string]string{}
	for _, it := range items {
		files[it.Path] = v.keys[it.Key]
	}
	return files
}

// Each workload's serve container, run for real: the binary with the
// container's arguments and environment, its Secret volumes laid out as
// the kubelet lays them out (a ..TIMESTAMP directory, the ..data link,
// a link per key; the volume's mode; root's and the fsGroup's) with
// stand-ins for their files (a test secret, a certificate of a test CA,
// a client token), the mount paths moved to those directories, --listen
// and --ops-listen on loopback ports, etcd one in-process. As root the
// test runs serve as the pod's user, groups and fsGroup, as the kubelet
// would; otherwise as itself, with the files its own. Once ready, every
// probe answers 200 on the operations port in plain HTTP, which serves
// the metrics and no IDs; the main port answers over TLS (HTTP/2, the
// test CA's certificate) with IDs for the client's token and 401
// without it; and serve stops on SIGTERM within the grace period less
// the preStop sleep, having logged neither the secret nor the token.
func TestManifestServeAnswersProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve")
	}
	t.Parallel()
	all := loadManifests(t)
	described := describedSecrets(all)
	ca := tlstest.NewCA(t, "randflake manifest test CA")
	si := &standIns{ca: ca, server: ca.Server(t, "randflake"), client: ca.Client(t, "manifest-test"), token: "manifest-test-token-0123456789abcdef"}
	asPod := os.Geteuid() == 0
	if !asPod {
		t.Logf("not root: serve runs as this user (uid %d), not the pod's, and the volumes' files are this user's with the group and others' bits cleared (only root's files may be group-readable)", os.Geteuid())
	}
	for _, w := range workloads(all) {
		t.Run(strings.ReplaceAll(w.file, "/", "_"), func(t *testing.T) {
			t.Parallel() // each its own serve, state, volumes and etcd
			c := w.serveContainer(t)
			spec := &w.pod.Spec
			where := fmt.Sprintf("%v: container %s", w, c.Name)
			parsed := parseContainerArgs(c.Args[1:])
			if len(parsed.missing) > 0 {
				t.Fatalf("%s: not run: serve has no flags %s", where, strings.Join(parsed.missing, ", "))
			}
			opsPort := listenPort(t, where, parsed, "ops-listen")
			for _, name := range probeNames {
				pr := probes(c)[name]
				if pr == nil || pr.HTTPGet == nil {
					t.Fatalf("%s: not run: %s is not an httpGet", where, name)
				}
				if portNumber(c, pr.HTTPGet.Port) != opsPort || opsPort == 0 {
					t.Fatalf("%s: not run: %s.httpGet.port %s is not the --ops-listen port", where, name, pr.HTTPGet.Port.String())
				}
			}

			base, err := os.MkdirTemp("", "randflake-manifest")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			if err := os.Chmod(base, 0o755); err != nil { // the pod's user passes through
				t.Fatal(err)
			}
			psc := spec.SecurityContext
			if psc == nil {
				psc = &corev1.PodSecurityContext{}
			}
			sc := effectiveSecurity(spec.SecurityContext, c.SecurityContext)
			bin, fsGroup := binary, -1
			var cred *syscall.Credential
			state := filepath.Join(base, "state")
			if err := os.Mkdir(state, 0o700); err != nil {
				t.Fatal(err)
			}
			if asPod {
				// The pod's process: its user, its group, and as
				// supplementary groups the fsGroup and any others.
				if sc.runAsUser < 0 || sc.runAsGroup < 0 {
					t.Fatalf("%s: not run: no runAsUser and runAsGroup", where)
				}
				cred = &syscall.Credential{Uid: uint32(sc.runAsUser), Gid: uint32(sc.runAsGroup), Groups: []uint32{uint32(sc.runAsGroup)}}
				for _, g := range append(slices.Clone(psc.SupplementalGroups), deref(psc.FSGroup, sc.runAsGroup)) {
					if !slices.Contains(cred.Groups, uint32(g)) {
						cred.Groups = append(cred.Groups, uint32(g))
					}
				}
				if psc.FSGroup != nil {
					fsGroup = int(*psc.FSGroup)
				}
				// The binary where that user may run it.
				bin = filepath.Join(base, "randflake")
				data, err := os.ReadFile(binary)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(bin, data, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(state, int(sc.runAsUser), int(sc.runAsGroup)); err != nil {
					t.Fatal(err)
				}
			}

			// The Secret volumes serve reads from, with stand-ins.
			vols := map[string]*podVolume{} // by mount path
			for _, f := range containerFiles(c, parsed) {
				if f.err != "" {
					t.Fatalf("%s: not run: %s", where, f.err)
				}
				mf, err := mountedAt(spec, c, f.path)
				if err != nil {
					t.Fatalf("%s: not run: %s %s: %v", where, f.from, f.path, err)
				}
				content, ok := si.content(f.flag)
				if !ok {
					t.Fatalf("%s: not run: no stand-in in this test for the file of --%s", where, f.flag)
				}
				v := vols[mf.mount.MountPath]
				if v == nil {
					v = &podVolume{mf: mf, keys: map[string]string{}}
					vols[mf.mount.MountPath] = v
					// The Secret's other keys, which serve does not read.
					for key := range described[mf.volume.Secret.SecretName] {
						v.keys[key] = "not read by serve\n"
						if key == "ca.crt" {
							v.keys[key] = string(ca.PEM)
						}
					}
				}
				if mf.mode != v.mf.mode {
					t.Fatalf("%s: not run: files of volume %s with different modes (items' modes): no stand-in for that", where, mf.volume.Name)
				}
				v.keys[mf.key] = content
			}
			moved := map[string]string{} // mount path -> the test's directory
			for mountPath, v := range vols {
				dir := filepath.Join(base, "volume-"+v.mf.volume.Name)
				mode := os.FileMode(v.mf.mode)
				if !asPod {
					mode &= 0o700
				}
				newKubeletVolume(t, dir, mode, fsGroup, v.files())
				moved[mountPath] = dir
			}
			rewrite := func(v string) string {
				for mp, dir := range moved {
					if rest, ok := strings.CutPrefix(v, strings.TrimSuffix(mp, "/")+"/"); ok {
						return filepath.Join(dir, rest)
					}
				}
				return v
			}

			args := slices.Clone(c.Args)
			for i := 1; i < len(args); i++ {
				if !strings.HasPrefix(args[i], "-") || i+1 >= len(args) {
					args[i] = rewrite(args[i])
					continue
				}
				switch strings.TrimLeft(args[i], "-") {
				case "listen", "ops-listen":
					args[i+1] = "127.0.0.1:0"
					i++
				case "etcd":
					args[i+1] = startEtcd(t)
					i++
				}
			}
			if parsed.value("node-source") == "kubernetes" {
				// The API server of a test cluster, through a kubeconfig
				// in place of the pod's service account.
				args = append(args, "--kubeconfig", kubeconfigForManifest(t, base))
			}
			env := []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + state, "HOME=" + state}
			for _, e := range c.Env {
				v := rewrite(e.Value)
				if f := e.ValueFrom; f != nil {
					switch {
					case f.SecretKeyRef != nil && e.Name == "RANDFLAKE_SECRET":
						v = testSecretHex
					case f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.labels['"+appsv1.PodIndexLabel+"']":
						v = "0"
					case f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.name":
						v = "randflake-manifest-test"
					case f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.uid":
						v = "00000000-0000-0000-0000-000000000001"
					default:
						t.Fatalf("%s: not run: env %s: no stand-in for this valueFrom in the test", where, e.Name)
					}
				}
				env = append(env, e.Name+"="+v)
			}

			p := spawnAs(t, bin, cred, env, args...)
			// The pod must be serving within what its startupProbe allows
			// (an etcd fleet's first claim waits out unknown history
			// once: about 31 s with the defaults).
			startup := 30 * time.Second
			if sp := c.StartupProbe; sp != nil {
				startup = time.Duration(sp.InitialDelaySeconds+sp.PeriodSeconds*sp.FailureThreshold) * time.Second
			}
			if asPod {
				checkCredentials(t, where, p, cred)
			}
			m := waitRunning(t, where, p, addrRE, startup)
			mainAddr := m[1] + m[2]
			m = waitRunning(t, where, p, opsServingRE, 10*time.Second)
			ops := "http://" + m[1] + m[2]

			ready := c.ReadinessProbe.HTTPGet.Path
			limit := within(startupTimeout)
			deadline := time.Now().Add(limit)
			for status, _ := get(ops + ready); status != http.StatusOK; status, _ = get(ops + ready) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: readinessProbe %s on the ops port still answers %d after %v (%s); logs:\n%s", where, ready, status, limit, slowness(), p.logs.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			for _, name := range probeNames {
				path := probes(c)[name].HTTPGet.Path
				if status, body := get(ops + path); status != http.StatusOK {
					t.Errorf("%s: %s.httpGet.path %s answers %d %q on the ops port, want 200", where, name, path, status, body)
				}
			}
			if status, body := getWith(http.DefaultClient, ops+"/metrics", 1<<20); status != http.StatusOK || !strings.Contains(body, "\nrandflake_ids_issued_total ") {
				t.Errorf("%s: GET /metrics on the ops port (Prometheus) answers %d %.200q, want 200 and randflake_ids_issued_total", where, status, body)
			}
			if status, body := getWith(uncheckedClient(), ops+"/v1/ids?count=1", 4096); status != http.StatusNotFound {
				t.Errorf("%s: GET /v1/ids on the ops port answers %d %q, want 404: it serves no IDs", where, status, body)
			}
			checkMainPort(t, where, parsed, c, si, mainAddr)

			var preStop int64
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
				preStop = c.Lifecycle.PreStop.Sleep.Seconds
			}
			left := time.Duration(deref(spec.TerminationGracePeriodSeconds, 30)-preStop) * time.Second
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := exitWithin(t, p, left); code != 0 {
				t.Errorf("%s: serve exited %d after SIGTERM, want 0; logs:\n%s", where, code, p.logs.String())
			}
			for what, s := range map[string]string{"the secret": testSecretHex, "the issue token": si.token} {
				if strings.Contains(p.logs.String(), s) {
					t.Errorf("%s: %s is in the log", where, what)
				}
			}
		})
	}
}

// checkMainPort checks the --listen port of a running serve at addr: with
// the TLS flags, HTTPS only, with the stand-in certificate, HTTP/2 by
// ALPN; IDs for the stand-in client (its token, its certificate under
// mutual TLS); 401 without a token when the issue tokens file is set and
// no client certificate is asked for; no /metrics (the ops port has it).
func checkMainPort(t *testing.T, where string, args *containerArgs, c *corev1.Container, si *standIns, addr string) {
	t.Helper()
	files := map[string]bool{}
	for _, f := range containerFiles(c, args) {
		files[f.flag] = true
	}
	// checked's answers are checked against the OpenAPI contract,
	// unchecked's (for what it does not describe) not.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	url := "http://" + addr
	if files["tls-cert-file"] {
		cfg := &tls.Config{RootCAs: si.ca.Pool()}
		if files["tls-client-ca-file"] {
			cfg.Certificates = []tls.Certificate{si.client.TLS(t)}
		}
		tr.TLSClientConfig, tr.ForceAttemptHTTP2 = cfg, true
		url = "https://" + addr
		if status, _ := getWith(uncheckedClient(), "http://"+addr+"/healthz", 4096); status == http.StatusOK {
			t.Errorf("%s: the --listen port answers plain HTTP with 200; want TLS only", where)
		}
	}
	checked := &http.Client{Transport: contractTransport{base: tr}, Timeout: 20 * time.Second}
	unchecked := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	ask := func(client *http.Client, path string, token bool) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest("GET", url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token && files["issue-tokens-file"] {
			req.Header.Set("Authorization", "Bearer "+si.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: GET %s on the --listen port: %v", where, path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if err != nil {
			t.Fatalf("%s: GET %s on the --listen port: %v", where, path, err)
		}
		return resp, body
	}
	resp, body := ask(checked, "/v1/ids?count=3", true)
	var ids struct{ IDs []json.RawMessage }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &ids) != nil || len(ids.IDs) != 3 || string(ids.IDs[0]) == string(ids.IDs[1]) || string(ids.IDs[1]) == string(ids.IDs[2]) || string(ids.IDs[0]) == string(ids.IDs[2]) {
		t.Errorf("%s: GET /v1/ids?count=3 on the --listen port answers %d %q, want 200 and 3 distinct IDs", where, resp.StatusCode, body)
	}
	if files["tls-cert-file"] {
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].SerialNumber.Cmp(si.server.Cert.SerialNumber) != 0 {
			t.Errorf("%s: the --listen port did not serve the stand-in certificate of --tls-cert-file", where)
		}
		if resp.ProtoMajor != 2 {
			t.Errorf("%s: the --listen port answered over %s, want HTTP/2 (ALPN)", where, resp.Proto)
		}
	}
	if files["issue-tokens-file"] && !files["tls-client-ca-file"] {
		if resp, body := ask(checked, "/v1/ids?count=3", false); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: GET /v1/ids without a token answers %d %q, want 401 (--issue-tokens-file)", where, resp.StatusCode, body)
		}
	}
	if args.set["ops-listen"] {
		if resp, body := ask(unchecked, "/metrics", true); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: GET /metrics on the --listen port answers %d %.100q, want 404: with --ops-listen it is served there only", where, resp.StatusCode, body)
		}
	}
}

// waitRunning waits up to timeout for a line of p's log that matches re
// and returns its submatches; it fails at once if p exits first.
func waitRunning(t *testing.T, where string, p *serveProcess, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	timeout = within(timeout)
	deadline := time.Now().Add(timeout)
	for {
		if m := re.FindStringSubmatch(p.logs.String()); m != nil {
			return m
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%s: serve exited (%v) before logging %q; logs:\n%s", where, err, re, p.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no log line matching %q within %v (%s); logs:\n%s", where, re, timeout, slowness(), p.logs.String())
		}
	}
}

// checkCredentials checks that the process p runs as cred says: its
// user, its group and its supplementary groups, fsGroup among them
// (/proc/PID/status).
func checkCredentials(t *testing.T, where string, p *serveProcess, cred *syscall.Credential) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("%s: the process's credentials: %v", where, err)
	}
	fields := map[string][]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Fields(v)
		}
	}
	want := func(name string, ids ...uint32) {
		var ws []string
		for _, id := range ids {
			ws = append(ws, strconv.FormatUint(uint64(id), 10))
		}
		got := fields[name]
		if name != "Groups" {
			got = got[:min(1, len(got))] // the real ID
		} else {
			slices.Sort(got)
			slices.Sort(ws)
		}
		if !slices.Equal(got, ws) {
			t.Fatalf("%s: serve runs with %s %v, want %v (the pod's)", where, name, fields[name], ws)
		}
	}
	want("Uid", cred.Uid)
	want("Gid", cred.Gid)
	want("Groups", cred.Groups...)
}

// spawnAs starts bin with args and env added to the environment, as the
// user cred gives (nil: this process's), collecting its standard error,
// and returns at once.
func spawnAs(t *testing.T, bin string, cred *syscall.Credential, env []string, args ...string) *serveProcess {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return startProcess(t, cmd)
}

// get returns the status and the first 4 KiB of the body of GET url
// (the answer checked against the OpenAPI contract), or 0 and the error.
func get(url string) (int, string) {
	return getWith(http.DefaultClient, url, 4096)
}

// getWith returns the status and the first limit bytes of the body of
// GET url by client, or 0 and the error.
func getWith(client *http.Client, url string, limit int64) (int, string) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err.Error()
	}
	return resp.StatusCode, string(body)
}

// uncheckedClient asks without the OpenAPI contract's check, for answers
// the contract does not describe: the operations listener's 404 to a
// path it does not serve, net/http's 400 to plain HTTP on a TLS port.
func uncheckedClient() *http.Client {
	return &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
}
