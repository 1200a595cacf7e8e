package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Route labels of http_request_duration_seconds: the route a request
// matched, never its raw path.
const (
	RouteIDs     = "/v1/ids"
	RouteInspect = "/v1/ids/{id}"
	RouteHealth  = "/healthz"
	RouteReady   = "/readyz"
	RouteMetrics = "/metrics"
	RouteOpenAPI = "/openapi.yaml"
	RouteOther   = "other"
)

// routeOf returns the route label of path, as route matches it.
func routeOf(path string) string {
	switch path {
	case RouteIDs, RouteHealth, RouteReady, RouteMetrics, RouteOpenAPI:
		return path
	}
	if id, ok := strings.CutPrefix(path, "/v1/ids/"); ok && id != "" && !strings.Contains(id, "/") {
		return RouteInspect
	}
	return RouteOther
}

// kinds are the error kinds, the values of randflake_errors_total's
// "kind" label.
var kinds = []string{KindBadRequest, KindUnauthorized, KindNotFound, KindMethodNotAllowed, KindQuota, KindBusy,
	KindExhausted, KindClock, KindLease, KindUnavailable, KindNotReady, KindInternal}

// opsMetrics are the service's operational metrics beyond the counts of
// IDs and errors.
type opsMetrics struct {
	duration *prometheus.HistogramVec
}

// registerOps registers the Go runtime and process collectors, the
// request-duration histogram and the lease's metrics on s's registry.
func (s *Server) registerOps() error {
	s.ops.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "http_request_duration_seconds",
		Help:    "Time to answer HTTP requests, by route and status code.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
	}, []string{"route", "code"})
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		s.ops.duration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "randflake_lease_seconds_remaining",
			Help: "Seconds until the node-ID lease ends (0 without a lease).",
		}, func() float64 { return float64(s.leaseLeft()) }),
	}
	if f := s.cfg.LeaseNodes; f != nil {
		cs = append(cs, pairFuncs(prometheus.NewGaugeFunc, f,
			prometheus.GaugeOpts{Name: "randflake_lease_first_node", Help: "First node ID of the current lease."},
			prometheus.GaugeOpts{Name: "randflake_lease_last_node", Help: "Last node ID of the current lease."})...)
	}
	if f := s.cfg.LeaseRenewals; f != nil {
		cs = append(cs, pairFuncs(prometheus.NewCounterFunc, f,
			prometheus.CounterOpts{Name: "randflake_lease_renewals_total", Help: "Successful renewals of the node-ID lease."},
			prometheus.CounterOpts{Name: "randflake_lease_renewal_failures_total", Help: "Failed renewals of the node-ID lease."})...)
	}
	// Every kind has its series from the start, so that rates and
	// increases see the first error.
	for _, k := range kinds {
		s.errs.WithLabelValues(k)
	}
	for _, c := range cs {
		if err := s.cfg.Registry.Register(c); err != nil {
			// A registry shared with the caller may have the runtime
			// and process collectors already.
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) && c != s.ops.duration {
				continue
			}
			return err
		}
	}
	return nil
}

// pairFuncs makes the two metrics of the values f returns, with newFunc
// (prometheus.NewGaugeFunc or NewCounterFunc): the first value's with
// opts first, the second's with opts second. Each calls f when scraped.
func pairFuncs[O any, C prometheus.Collector, N int64 | uint64](newFunc func(O, func() float64) C, f func() (N, N), first, second O) []prometheus.Collector {
	return []prometheus.Collector{
		newFunc(first, func() float64 { v, _ := f(); return float64(v) }),
		newFunc(second, func() float64 { _, v := f(); return float64(v) }),
	}
}

// observe records a request's duration under its route and status.
func (s *Server) observe(path string, status int, d time.Duration) {
	if status == 0 {
		status = http.StatusOK
	}
	s.ops.duration.WithLabelValues(routeOf(path), strconv.Itoa(status)).Observe(d.Seconds())
}
