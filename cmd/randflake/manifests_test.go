package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
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
	"github.com/randflake/randflake/statedir"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The Kubernetes manifests (deploy/kubernetes) and the image (Dockerfile)
// are checked against the command they run: every document decodes
// strictly into the Kubernetes API type its apiVersion and kind name; the
// kustomizations list exactly the manifests beside them; the containers'
// flags and environment variables are those serve reads; the probes, ports,
// users and grace periods agree with serve and the image; and serve, run
// with each workload's arguments and environment, answers every probe
// path with 200.

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
	}
	return nil
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
	for _, kind := range []string{"StatefulSet", "Deployment", "Service", "PodDisruptionBudget", "Secret"} {
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
// secret (as 32 hex digits), the state directory, the kernel override.
func serveEnv() map[string]bool {
	names := map[string]bool{
		"RANDFLAKE_ORDINAL": true, "RANDFLAKE_SECRET_FILE": true, "RANDFLAKE_SECRET": true,
		"RANDFLAKE_STATE_DIR": true, "RANDFLAKE_INSPECT_TOKEN_FILE": true, "RANDFLAKE_KERNEL": true,
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
func (w *workload) serveContainer(t *testing.T) *corev1.Container {
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

// The workloads' containers against serve and the image: flags, the
// environment, ports, probes, grace period, users and security.
func TestManifestWorkloads(t *testing.T) {
	all := loadManifests(t)
	image := readImageConfig(t)
	readable := serveEnv()
	secrets := map[string]*corev1.Secret{}
	for _, m := range all {
		if s, ok := m.obj.(*corev1.Secret); ok {
			secrets[s.Name] = s
		}
	}
	ws := workloads(all)
	if len(ws) == 0 {
		t.Fatalf("no StatefulSet or Deployment in %s", manifestRoot)
	}
	for _, w := range ws {
		t.Run(strings.ReplaceAll(w.file, "/", "_"), func(t *testing.T) {
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

			// Ports: --listen, the container port, the image's EXPOSE.
			_, listenPort, err := net.SplitHostPort(args.value("listen"))
			lp, _ := strconv.ParseInt(listenPort, 10, 32)
			if !args.set["listen"] || err != nil || lp == 0 {
				t.Errorf("%s: args: want --listen :PORT (all addresses: a pod's probes and Services reach it from outside), have %q", where, args.value("listen"))
			}
			if len(c.Ports) != 1 || c.Ports[0].ContainerPort != int32(lp) || (c.Ports[0].Protocol != "" && c.Ports[0].Protocol != corev1.ProtocolTCP) {
				t.Errorf("%s: ports %v: want exactly one, TCP, the --listen port %d", where, c.Ports, lp)
			}
			if !slices.Contains(image.ports, int32(lp)) {
				t.Errorf("%s: --listen port %d is not a port %s exposes (%v)", where, lp, dockerfile, image.ports)
			}

			// Probes: HTTP GETs on the serve port; readiness is not liveness.
			for name, p := range probes(c) {
				if p == nil {
					t.Errorf("%s: no %s", where, name)
					continue
				}
				if p.HTTPGet == nil {
					t.Errorf("%s: %s is not an httpGet", where, name)
					continue
				}
				if got := portNumber(c, p.HTTPGet.Port); got == 0 || got != int32(lp) {
					t.Errorf("%s: %s.httpGet.port %s is port %d, not the --listen port %d", where, name, p.HTTPGet.Port.String(), got, lp)
				}
				if !strings.HasPrefix(p.HTTPGet.Path, "/") {
					t.Errorf("%s: %s.httpGet.path %q", where, name, p.HTTPGet.Path)
				}
			}
			if c.ReadinessProbe != nil && c.LivenessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet != nil {
				if c.ReadinessProbe.HTTPGet.Path != "/readyz" {
					t.Errorf("%s: readinessProbe.httpGet.path %q: want /readyz (503 without a valid lease)", where, c.ReadinessProbe.HTTPGet.Path)
				}
				if c.LivenessProbe.HTTPGet.Path == "/readyz" {
					t.Errorf("%s: livenessProbe on /readyz would restart pods that merely wait for a lease; use /healthz", where)
				}
			}

			// The environment: only names serve reads; the secret only from a
			// Secret, and one the example describes.
			for _, e := range c.Env {
				if !readable[e.Name] {
					t.Errorf("%s: env %s is not a variable serve reads (flags: RANDFLAKE_<FLAG>; also RANDFLAKE_ORDINAL, RANDFLAKE_SECRET, RANDFLAKE_SECRET_FILE)", where, e.Name)
				}
				if e.Name == "RANDFLAKE_SECRET" && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s: env RANDFLAKE_SECRET must come from valueFrom.secretKeyRef, never a value in the manifest", where)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref := e.ValueFrom.SecretKeyRef
					s, ok := secrets[ref.Name]
					if !ok {
						t.Errorf("%s: env %s: secretKeyRef to Secret %q, which no manifest (secret.example.yaml) describes", where, e.Name, ref.Name)
					} else if _, ok := s.StringData[ref.Key]; !ok {
						t.Errorf("%s: env %s: secretKeyRef key %q is not a key of the example Secret %q", where, e.Name, ref.Key, ref.Name)
					}
				}
			}
			if len(c.EnvFrom) > 0 {
				t.Errorf("%s: envFrom brings in names nobody checks; list env one by one", where)
			}
			if deref(spec.EnableServiceLinks, true) {
				t.Errorf("%v: spec.enableServiceLinks must be false: Service variables such as RANDFLAKE_PORT share the prefix of serve's settings", w)
			}
			if deref(spec.AutomountServiceAccountToken, true) {
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
				checkGoverningService(t, w, all)
			default:
				if source == "statefulset" || args.set["nodes"] {
					t.Errorf("%s: a Deployment's pods have no ordinals and share their template: node IDs must come from etcd", where)
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
			if psc := spec.SecurityContext; psc != nil && (psc.RunAsUser != nil && *psc.RunAsUser != image.uid || psc.RunAsGroup != nil && *psc.RunAsGroup != image.gid) {
				t.Errorf("%v: spec.securityContext runs as %d:%d, the image's USER is %d:%d (%s)", w, deref(psc.RunAsUser, -1), deref(psc.RunAsGroup, -1), image.uid, image.gid, dockerfile)
			}
			sc := effectiveSecurity(spec.SecurityContext, c.SecurityContext)
			if sc.runAsUser != image.uid || sc.runAsGroup != image.gid {
				t.Errorf("%s: runs as %d:%d, the image's USER is %d:%d (%s)", where, sc.runAsUser, sc.runAsGroup, image.uid, image.gid, dockerfile)
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
		})
	}
}

// checkOrdinal checks that a StatefulSet's container takes its ordinal
// from the pod-index label.
func checkOrdinal(t *testing.T, where string, c *corev1.Container) {
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
func checkGoverningService(t *testing.T, w *workload, all []*manifest) {
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
// them, and Services reach the serve port; the example Secret holds no
// secret randflake would take.
func TestManifestServicesAndBudgets(t *testing.T) {
	all := loadManifests(t)
	ws := workloads(all)
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
				if portNumber(c, target) == 0 {
					t.Errorf("%v: spec.ports[%d].targetPort %s is no port of %v's container %s", m, i, target.String(), w, c.Name)
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
			}
		}
	}
}

// Each workload's serve container, run for real: the binary with the
// container's arguments (listening on a loopback port instead) and
// environment (the Secret's value a test secret, the pod-index label 0,
// etcd one in-process), answers every probe path with 200 once ready, and
// stops on SIGTERM within the grace period less the preStop sleep.
func TestManifestServeAnswersProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve")
	}
	all := loadManifests(t)
	for _, w := range workloads(all) {
		t.Run(strings.ReplaceAll(w.file, "/", "_"), func(t *testing.T) {
			c := w.serveContainer(t)
			where := fmt.Sprintf("%v: container %s", w, c.Name)
			if args := parseContainerArgs(c.Args[1:]); len(args.missing) > 0 {
				t.Fatalf("%s: not run: serve has no flags %s", where, strings.Join(args.missing, ", "))
			}
			for name, pr := range probes(c) {
				if pr == nil || pr.HTTPGet == nil {
					t.Fatalf("%s: not run: %s is not an httpGet", where, name)
				}
			}
			args := slices.Clone(c.Args)
			listenAt := -1
			for i := 1; i < len(args); i++ {
				if !strings.HasPrefix(args[i], "-") {
					continue // a value
				}
				switch strings.TrimLeft(args[i], "-") {
				case "listen":
					listenAt = i + 1
				case "etcd":
					if i+1 < len(args) {
						args[i+1] = startEtcd(t)
					}
				}
			}
			if listenAt < 0 || listenAt >= len(args) {
				t.Fatalf("%s: no --listen ADDR in args", where)
			}
			args[listenAt] = "127.0.0.1:0"

			env := []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + t.TempDir()}
			for _, e := range c.Env {
				v := e.Value
				if f := e.ValueFrom; f != nil {
					switch {
					case f.SecretKeyRef != nil:
						v = testSecretHex
					case f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.labels['"+appsv1.PodIndexLabel+"']":
						v = "0"
					default:
						t.Fatalf("%s: env %s: no stand-in for this valueFrom in the test", where, e.Name)
					}
				}
				env = append(env, e.Name+"="+v)
			}
			p := spawn(t, env, args...)
			// The pod must be serving within what its startupProbe allows
			// (an etcd fleet's first claim waits out unknown history
			// once: about 31 s with the defaults).
			startup := 30 * time.Second
			if sp := c.StartupProbe; sp != nil {
				startup = time.Duration(sp.InitialDelaySeconds+sp.PeriodSeconds*sp.FailureThreshold) * time.Second
			}
			m := waitLog(t, p, addrRE, startup)
			p.url = "http://" + m[1] + m[2]

			ready := c.ReadinessProbe.HTTPGet.Path
			deadline := time.Now().Add(30 * time.Second)
			for status, _ := get(p.url + ready); status != http.StatusOK; status, _ = get(p.url + ready) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: readinessProbe %s still answers %d after 30 s; logs:\n%s", where, ready, status, p.logs.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			for name, pr := range probes(c) {
				if status, body := get(p.url + pr.HTTPGet.Path); status != http.StatusOK {
					t.Errorf("%s: %s.httpGet.path %s answers %d %q, want 200", where, name, pr.HTTPGet.Path, status, body)
				}
			}
			if status, body := get(p.url + "/v1/ids?count=3"); status != http.StatusOK {
				t.Errorf("%s: GET /v1/ids?count=3 answers %d %q", where, status, body)
			}

			var preStop int64
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
				preStop = c.Lifecycle.PreStop.Sleep.Seconds
			}
			left := time.Duration(deref(w.pod.Spec.TerminationGracePeriodSeconds, 30)-preStop) * time.Second
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := exitWithin(t, p, left); code != 0 {
				t.Errorf("%s: serve exited %d after SIGTERM, want 0; logs:\n%s", where, code, p.logs.String())
			}
			if strings.Contains(p.logs.String(), testSecretHex) {
				t.Errorf("%s: the secret is in the log", where)
			}
		})
	}
}

// get returns the status and body of GET url, or 0 and the error.
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err.Error()
	}
	return resp.StatusCode, string(body)
}
