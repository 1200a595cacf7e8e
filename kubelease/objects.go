package kubelease

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The JSON of the objects the store reads and writes: the fields of a
// coordination.k8s.io/v1 Lease, its list and the API's Status, as small
// structs of this package's own (see the package documentation, "Weight",
// for why not the k8s.io/api types). Fields of the metadata the store does
// not set (owner references, finalizers) are kept as they were read.

// leaseObject is a coordination.k8s.io/v1 Lease.
type leaseObject struct {
	APIVersion string     `json:"apiVersion,omitempty"`
	Kind       string     `json:"kind,omitempty"`
	Metadata   objectMeta `json:"metadata"`
	Spec       leaseSpec  `json:"spec"`
}

// objectMeta is the part of ObjectMeta the store uses or keeps.
type objectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace,omitempty"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	OwnerReferences json.RawMessage   `json:"ownerReferences,omitempty"`
	Finalizers      json.RawMessage   `json:"finalizers,omitempty"`
}

// leaseSpec is a LeaseSpec; times are MicroTime, RFC 3339 with
// microseconds.
type leaseSpec struct {
	HolderIdentity       *string `json:"holderIdentity,omitempty"`
	LeaseDurationSeconds *int32  `json:"leaseDurationSeconds,omitempty"`
	AcquireTime          *string `json:"acquireTime,omitempty"`
	RenewTime            *string `json:"renewTime,omitempty"`
	LeaseTransitions     *int32  `json:"leaseTransitions,omitempty"`
	Strategy             *string `json:"strategy,omitempty"`
	PreferredHolder      *string `json:"preferredHolder,omitempty"`
}

// leaseList is a LeaseList.
type leaseList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []leaseObject `json:"items"`
}

// microTime formats t as the API's MicroTime.
func microTime(t time.Time) *string {
	s := t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	return &s
}

func strp(s string) *string { return &s }
func i32p(n int32) *int32   { return &n }

// holder returns the lease's holder identity, "" if none.
func (l *leaseObject) holder() string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// expiry returns when the lease's claim lapses: its renewal (or
// acquisition) time plus its duration, by the holder's clock. ok is false
// when the lease names a holder but not both times: such a claim is taken
// to hold.
func (l *leaseObject) expiry() (t time.Time, ok bool) {
	at := l.Spec.RenewTime
	if at == nil {
		at = l.Spec.AcquireTime
	}
	if at == nil || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, *at)
	if err != nil {
		return time.Time{}, false
	}
	return t.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second), true
}

// status is the API's Status object, as an error answer carries it.
type status struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Details *struct {
		Name  string `json:"name"`
		Group string `json:"group"`
		Kind  string `json:"kind"`
	} `json:"details"`
	Code int `json:"code"`
}

// ErrForbidden is wrapped by the error of a request the API server's
// authorization refused (RBAC): the error names the verb and the resource.
var ErrForbidden = errors.New("kubelease: forbidden by the API server's authorization (RBAC)")

// ErrUnauthorized is wrapped by the error of a request whose credentials
// the API server did not accept (HTTP 401).
var ErrUnauthorized = errors.New("kubelease: the API server did not accept the credentials")

// APIError is an answer of the API server that is not a success.
type APIError struct {
	// Method and Path are the request's.
	Method, Path string
	// Code is the HTTP status, Reason the Status reason ("Conflict",
	// "NotFound", "Forbidden", "AlreadyExists") and Message its message.
	Code    int
	Reason  string
	Message string
}

func newAPIError(method, path string, code int, body []byte) *APIError {
	e := &APIError{Method: method, Path: path, Code: code}
	var st status
	if json.Unmarshal(body, &st) == nil {
		e.Reason, e.Message = st.Reason, st.Message
	}
	if e.Reason == "" {
		e.Reason = http.StatusText(code)
	}
	return e
}

// verb returns the Kubernetes verb of the request, as RBAC names it.
func (e *APIError) verb() string {
	switch e.Method {
	case http.MethodGet:
		if strings.HasSuffix(e.Path, "/leases") {
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodDelete:
		return "delete"
	case http.MethodPatch:
		return "patch"
	}
	return strings.ToLower(e.Method)
}

// Error describes the answer. A refusal by RBAC names the verb, the
// resource and the namespace, and the Role that grants them.
func (e *APIError) Error() string {
	switch e.Code {
	case http.StatusForbidden:
		ns := namespaceOf(e.Path)
		return fmt.Sprintf("kubelease: the API server refused to %s leases.coordination.k8s.io in namespace %q (HTTP 403 Forbidden; grant the verbs get, list, create, update and delete on leases in that namespace with a Role and RoleBinding): %s",
			e.verb(), ns, e.Message)
	case http.StatusUnauthorized:
		return fmt.Sprintf("kubelease: %s %s: HTTP 401 Unauthorized: the API server did not accept the token or certificate", e.Method, e.Path)
	}
	msg := e.Message
	if msg == "" {
		msg = e.Reason
	}
	return fmt.Sprintf("kubelease: %s %s: HTTP %d %s: %s", e.Method, e.Path, e.Code, e.Reason, msg)
}

// Unwrap makes a 403 match ErrForbidden and a 401 ErrUnauthorized.
func (e *APIError) Unwrap() error {
	switch e.Code {
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusUnauthorized:
		return ErrUnauthorized
	}
	return nil
}

// namespaceOf returns the namespace a request path names.
func namespaceOf(path string) string {
	_, rest, ok := strings.Cut(path, "/namespaces/")
	if !ok {
		return ""
	}
	ns, _, _ := strings.Cut(rest, "/")
	return ns
}

// isCode reports whether err is an API answer with HTTP status code.
func isCode(err error, code int) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}
