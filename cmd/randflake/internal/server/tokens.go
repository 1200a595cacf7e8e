package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
)

// IssueTokens are the clients that may issue IDs with a bearer token: the
// parsed content of randflake serve's --issue-tokens-file. Its methods are
// safe for concurrent use; a value never changes (Server.SetIssueTokens
// replaces it).
//
// The format is one client a line, "NAME TOKEN", separated by spaces or
// tabs. Lines whose first non-blank character is '#' are comments, and
// blank lines are skipped. A NAME is 1 to 64 letters, digits, '.', '_',
// '-' and '@', starting with a letter or digit, and is not "other" (the
// label of unnamed clients in the metrics). A TOKEN is at least
// MinTokenLength characters of those a bearer token may carry (letters,
// digits, '-', '.', '_', '~', '+', '/', then '=' only at the end). No
// name and no token may be listed twice. Errors name the line and never
// quote a token.
type IssueTokens struct {
	clients []issuer
}

// issuer is one client of IssueTokens: its name and the SHA-256 of its
// token, so that every comparison has the same length.
type issuer struct {
	name   string
	digest [sha256.Size]byte
}

// MinTokenLength is the shortest token IssueTokens accepts.
const MinTokenLength = 16

// maxNameLength bounds a client's name, which becomes a metric label.
const maxNameLength = 64

// OtherClients is the "client" label of the per-client metrics for every
// client that has no name: one that neither sent a listed token nor
// presented a verified certificate (and named certificates past
// maxCertNames).
const OtherClients = "other"

// ParseIssueTokens parses an issue tokens file (see IssueTokens). A file
// that lists no client is an error: it would lock every client out.
func ParseIssueTokens(data []byte) (*IssueTokens, error) {
	t := &IssueTokens{}
	names := map[string]int{}
	tokens := map[[sha256.Size]byte]int{}
	for i, line := 0, []byte(nil); len(data) > 0; {
		i++
		line, data, _ = bytes.Cut(data, []byte("\n"))
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		fields := bytes.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want NAME TOKEN (two fields), found %d fields (comments take a line of their own)", i, len(fields))
		}
		name, token := string(fields[0]), fields[1]
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("line %d: %w", i, err)
		}
		if err := checkToken(token); err != nil {
			return nil, fmt.Errorf("line %d (client %s): %w", i, name, err)
		}
		if j, dup := names[name]; dup {
			return nil, fmt.Errorf("line %d: client %s is listed twice (also on line %d)", i, name, j)
		}
		digest := sha256.Sum256(token)
		if j, dup := tokens[digest]; dup {
			return nil, fmt.Errorf("line %d (client %s): the token is the same as line %d's; every client needs a token of its own", i, name, j)
		}
		names[name], tokens[digest] = i, i
		t.clients = append(t.clients, issuer{name: name, digest: digest})
	}
	if len(t.clients) == 0 {
		return nil, errors.New("no client is listed (one NAME TOKEN a line); such a file would refuse every client")
	}
	return t, nil
}

// checkName checks a client's name.
func checkName(name string) error {
	if name == OtherClients {
		return fmt.Errorf("the name %q is reserved for unnamed clients", OtherClients)
	}
	if len(name) > maxNameLength {
		return fmt.Errorf("the name is longer than %d characters", maxNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-' && c != '@') {
			return fmt.Errorf("the name %s: names are letters, digits, '.', '_', '-' and '@', starting with a letter or digit", strconv.QuoteToASCII(name))
		}
	}
	return nil
}

// checkToken checks a token without saying what it is.
func checkToken(token []byte) error {
	if len(token) < MinTokenLength {
		return fmt.Errorf("the token is shorter than %d characters", MinTokenLength)
	}
	if !isBearerToken(token) {
		return errors.New("the token has characters a bearer token cannot carry: use letters, digits, '-', '.', '_', '~', '+' and '/', then '=' only at the end")
	}
	return nil
}

// isBearerToken reports whether b is a b64token (RFC 6750, section 2.1).
func isBearerToken(b []byte) bool {
	end := len(b)
	for end > 0 && b[end-1] == '=' {
		end--
	}
	if end == 0 {
		return false
	}
	for _, c := range b[:end] {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
		if !ok {
			return false
		}
	}
	return true
}

// Len returns the number of clients.
func (t *IssueTokens) Len() int { return len(t.clients) }

// Names returns the clients' names, in the file's order.
func (t *IssueTokens) Names() []string {
	names := make([]string, len(t.clients))
	for i, c := range t.clients {
		names[i] = c.name
	}
	return names
}

// lookup returns the name of the client whose token is token. It compares
// the token's digest with every client's, in constant time, and looks at
// all of them whatever it finds, so that the time taken says nothing about
// the token or about which client it belongs to.
func (t *IssueTokens) lookup(token string) (name string, ok bool) {
	digest := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.clients {
		eq := subtle.ConstantTimeCompare(digest[:], t.clients[i].digest[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return "", false
	}
	return t.clients[found].name, true
}
