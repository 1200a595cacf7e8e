package server

import (
	"slices"
	"strings"
	"testing"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-abcdefghijkl=="
)

// A tokens file: comments, blank lines, spaces and tabs; the names in
// order, each token found by its own digest, and nothing else found.
func TestParseIssueTokens(t *testing.T) {
	tokens, err := ParseIssueTokens([]byte("# clients that may issue\n\nalice " + aliceToken + "\n  # indented comment\n\tbob\t\t" + bobToken + "  \r\nsvc.billing@eu-1 " + strings.Repeat("x", 16)))
	if err != nil {
		t.Fatal(err)
	}
	if got := tokens.Names(); !slices.Equal(got, []string{"alice", "bob", "svc.billing@eu-1"}) || tokens.Len() != 3 {
		t.Fatalf("names %q", got)
	}
	for token, want := range map[string]string{aliceToken: "alice", bobToken: "bob", strings.Repeat("x", 16): "svc.billing@eu-1"} {
		if name, ok := tokens.lookup(token); !ok || name != want {
			t.Errorf("lookup(%q) = %q, %v; want %q", token, name, ok, want)
		}
	}
	for _, bad := range []string{"", aliceToken + "x", aliceToken[:len(aliceToken)-1], "alice", "Bearer " + aliceToken, strings.ToUpper(aliceToken)} {
		if name, ok := tokens.lookup(bad); ok {
			t.Errorf("lookup(%q) found %q", bad, name)
		}
	}
}

// Every malformed file is refused with its line and the rule, and no
// message quotes a token.
func TestParseIssueTokensRefuses(t *testing.T) {
	const secretish = "s3cr3t-t0ken-value-xyz"
	for _, c := range []struct{ file, want string }{
		{"", "no client is listed"},
		{"# only a comment\n\n", "no client is listed"},
		{"alice", "line 1: want NAME TOKEN (two fields), found 1"},
		{"alice " + secretish + " # comment", "line 1: want NAME TOKEN (two fields), found 4"},
		{"\nalice short-token", "line 2 (client alice): the token is shorter than 16 characters"},
		{"alice " + secretish + "\"'", "characters a bearer token cannot carry"},
		{"alice " + secretish + "=x", "characters a bearer token cannot carry"},
		{"alice " + "================", "characters a bearer token cannot carry"},
		{"other " + secretish, `the name "other" is reserved`},
		{"-alice " + secretish, "names are letters, digits"},
		{"al/ice " + secretish, "names are letters, digits"},
		{strings.Repeat("a", 65) + " " + secretish, "longer than 64"},
		{"alice " + secretish + "\nbob " + aliceToken + "\nalice " + bobToken, "line 3: client alice is listed twice (also on line 1)"},
		{"alice " + secretish + "\n# x\nbob " + secretish, "line 3 (client bob): the token is the same as line 1's"},
	} {
		_, err := ParseIssueTokens([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want an error with %q", c.file, err, c.want)
			continue
		}
		for _, tok := range []string{secretish, aliceToken, bobToken, "short-token"} {
			if strings.Contains(err.Error(), tok) {
				t.Errorf("%q: the error %q quotes a token", c.file, err)
			}
		}
	}
}

func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		values []string
		token  string
		ok     bool
	}{
		{[]string{"Bearer abc"}, "abc", true},
		{[]string{"bearer   abc"}, "abc", true},
		{[]string{"BEARER abc"}, "abc", true},
		{[]string{"Bearer"}, "", false},
		{[]string{"Bearer "}, "", false},
		{[]string{"Basic abc"}, "", false},
		{[]string{"abc"}, "", false},
		{[]string{"Bearer abc", "Bearer abc"}, "", false},
		{nil, "", false},
	} {
		token, ok := bearerToken(c.values)
		if token != c.token || ok != c.ok {
			t.Errorf("%q: %q %v, want %q %v", c.values, token, ok, c.token, c.ok)
		}
	}
}
