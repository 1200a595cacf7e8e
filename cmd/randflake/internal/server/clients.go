package server

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Who may issue, and who a client is.
//
// With Config.IssueTokens, GET /v1/ids needs "Authorization: Bearer
// TOKEN" with a listed token, or a verified client certificate (mutual
// TLS, set up by the caller's tls.Config); otherwise it is answered 401,
// kind unauthorized, with WWW-Authenticate: Bearer. A token that is sent
// must be valid even with a certificate. Without IssueTokens anyone who
// reaches the service may issue, as before.
//
// A client is named by its token's name, else by its certificate's
// identity (the subject's common name, else its first DNS name), else it
// is unnamed and known by its address (an IPv6 address by its /64, which
// one host usually has whole). Names share one space: a certificate for
// "billing" and the token of client "billing" are the same client.
//
// The per-client metrics (randflake_client_ids_issued_total and
// randflake_client_quota_refusals_total) label named clients by name and
// all others as OtherClients, so that addresses never become labels.
// Certificate identities get labels of their own up to maxCertNames of
// them, the rest count as OtherClients.

// maxCertNames bounds the certificate identities that become labels.
const maxCertNames = 256

// maxLabelLength bounds a certificate identity used as a label.
const maxLabelLength = 128

// clients holds the per-client metrics.
type clients struct {
	issued  *prometheus.CounterVec
	refused *prometheus.CounterVec
	other   *clientStats

	mu        sync.Mutex
	named     map[string]*clientStats // by label
	certNames int                     // labels made for certificate identities
}

// clientStats are one label's counters.
type clientStats struct {
	label   string
	issued  prometheus.Counter
	refused prometheus.Counter
}

func newClients(reg prometheus.Registerer) (*clients, error) {
	c := &clients{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "randflake_client_ids_issued_total",
			Help: "IDs handed out, by client: a token's name or a certificate's identity, \"other\" for unnamed clients.",
		}, []string{"client"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "randflake_client_quota_refusals_total",
			Help: "Requests for IDs refused over the client's share (429, kind quota), by client as randflake_client_ids_issued_total.",
		}, []string{"client"}),
		named: map[string]*clientStats{},
	}
	for _, col := range []prometheus.Collector{c.issued, c.refused} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	c.other = c.stats(OtherClients)
	return c, nil
}

// stats returns label's counters. c.mu is held, or c is being made.
func (c *clients) stats(label string) *clientStats {
	return &clientStats{label: label, issued: c.issued.WithLabelValues(label), refused: c.refused.WithLabelValues(label)}
}

// forName returns the counters of a named client; fromCert says the name
// is a certificate's identity, which gets a label only while there are
// fewer than maxCertNames of those.
func (c *clients) forName(name string, fromCert bool) *clientStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.named[name]; st != nil {
		return st
	}
	if fromCert && (c.certNames >= maxCertNames || len(name) > maxLabelLength || !utf8.ValidString(name)) {
		return c.other
	}
	st := c.stats(name)
	c.named[name] = st
	if fromCert {
		c.certNames++
	}
	return st
}

// caller is the client of one request to issue.
type caller struct {
	name  string // a token's name or a certificate's identity; "" if unnamed
	stats *clientStats
}

// SetIssueTokens replaces the clients that may issue with a token (see
// Config.IssueTokens); requests already past the check are not affected.
// nil lets anyone issue.
func (s *Server) SetIssueTokens(t *IssueTokens) {
	s.tokens.Store(t)
}

// identify finds the client of a request to issue and checks that it may.
// If it may not, it answers 401 and returns false.
func (s *Server) identify(w *recorder, r *http.Request) (caller, bool) {
	certName, hasCert := certIdentity(r)
	tokens := s.tokens.Load()
	if tokens != nil {
		if auth, sent := r.Header["Authorization"]; sent {
			token, ok := bearerToken(auth)
			name := ""
			if ok {
				name, ok = tokens.lookup(token)
			}
			if !ok {
				s.unauthorized(w, r, "the bearer token is not one of the issue tokens")
				return caller{}, false
			}
			w.client = name
			return caller{name: name, stats: s.clients.forName(name, false)}, true
		}
		if !hasCert {
			s.unauthorized(w, r, "no bearer token and no client certificate")
			return caller{}, false
		}
	}
	if certName != "" {
		w.client = certName
		return caller{name: certName, stats: s.clients.forName(certName, true)}, true
	}
	return caller{stats: s.clients.other}, true
}

// bearerToken returns the token of an Authorization header's values, by
// one rule for every endpoint (issuing and inspection) and protocol: one
// value; whitespace (spaces, tabs) around it ignored, as HTTP/1.1's
// parser drops it and HTTP/2 hands it over (RFC 9110 excludes it from
// the value); the scheme "Bearer" in any case; one space or more; the
// token, a b64token (RFC 6750: no space inside it). Anything else is no
// token.
func bearerToken(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	v := strings.Trim(values[0], " \t")
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, isBearerToken([]byte(token))
}

// certIdentity returns the identity of the request's verified client
// certificate, if it has one: the subject's common name, else its first
// DNS name ("" if it has neither).
func certIdentity(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", false
	}
	return CertificateIdentity(r.TLS.VerifiedChains[0][0]), true
}

// CertificateIdentity is the identity of a client certificate: its
// subject's common name, else its first DNS name, else "".
func CertificateIdentity(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return c.Subject.CommonName
	}
	if len(c.DNSNames) > 0 {
		return c.DNSNames[0]
	}
	return ""
}

// unauthorized answers 401 to a request to issue and logs why (at most
// one line a second for each reason), never with the token.
func (s *Server) unauthorized(w *recorder, r *http.Request, why string) {
	if n, ok := s.limited.allow(KindUnauthorized+": "+why, time.Now()); ok {
		attrs := []any{"reason", why, "remote", r.RemoteAddr}
		if n > 0 {
			attrs = append(attrs, "left_out", n)
		}
		s.log.Log(context.Background(), slog.LevelWarn, "issuing refused", attrs...)
	}
	w.Header().Set("WWW-Authenticate", wwwAuthenticate)
	s.fail(w, http.StatusUnauthorized, KindUnauthorized, "a valid bearer token or client certificate is required")
}

// wwwAuthenticate is the challenge of 401 answers.
const wwwAuthenticate = `Bearer realm="randflake"`

// admit charges count IDs to c's share, if shares are set (ClientRate). It
// returns the bucket charged (nil without shares), or answers 400 for a
// count above the burst, or 429 when the share has not count IDs left now,
// and returns false.
func (s *Server) admit(w *recorder, r *http.Request, c caller, count int) (*bucket, bool) {
	if s.limit == nil {
		return nil, true
	}
	if int64(count) > s.cfg.ClientBurst {
		s.fail(w, http.StatusBadRequest, KindBadRequest, "count must be at most "+strconv.FormatInt(s.cfg.ClientBurst, 10)+", a client's burst")
		return nil, false
	}
	b, wait := s.limit.take(shareKey(r, c), count)
	if b != nil {
		return b, true
	}
	c.stats.refused.Inc()
	if n, ok := s.limited.allow(KindQuota, time.Now()); ok {
		attrs := []any{"client", c.stats.label, "count", count, "remote", r.RemoteAddr}
		if n > 0 {
			attrs = append(attrs, "left_out", n)
		}
		s.log.Info("request over the client's share refused", attrs...)
	}
	w.Header().Set("Retry-After", strconv.FormatInt(retryAfter(wait), 10))
	s.fail(w, http.StatusTooManyRequests, KindQuota, "over this client's share of IDs; retry after the seconds of Retry-After")
	return nil, false
}

// refund gives back the IDs admit charged when none were issued.
func (s *Server) refund(b *bucket, count int) {
	if b != nil {
		s.limit.refund(b, count)
	}
}

// addressKey is the share key of an unnamed client's address ("IP:port"):
// the IP, or for IPv6 its /64.
func addressKey(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	a := ap.Addr().Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.Prefix(64)
	if err != nil {
		return a.String()
	}
	return p.String()
}
