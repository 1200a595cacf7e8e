package leasetest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// The suite reads the records a store returns, to compare the promises
// they hold with the seconds of the IDs issued, and writes records and
// markers of its own (signed under the suite's secret, as a writer with
// a bug would) to check that impossible values are never trusted. The
// formats are documented in package lease (leaserecord.go): a record
// is "rfb1 FIRST LAST UNTIL AT TAG", a marker "rfm1 k=v ... tag=TAG", TAG
// the first 16 bytes of an HMAC-SHA-256, in hex, under a key derived from
// the fleet secret.

// signer signs and reads records under a fleet secret.
type signer struct{ key []byte }

func newSigner(secret []byte) signer {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("randflake lease records v1"))
	return signer{key: m.Sum(nil)}
}

func (s signer) tag(body string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// record returns a validly signed record with the given values, possible
// or not.
func (s signer) record(first, last, until, at int64) []byte {
	body := fmt.Sprintf("rfb1 %d %d %d %d", first, last, until, at)
	return []byte(body + " " + s.tag(body))
}

// marker returns a validly signed marker with the given fields (a
// "first=... last=..." list, possible or not).
func (s signer) marker(fields string) []byte {
	body := "rfm1 " + fields
	return []byte(body + " tag=" + s.tag(body))
}

// recordFields is what a record says.
type recordFields struct {
	first, last, until, at int64
}

// parse reads a record and checks its tag.
func (s signer) parse(raw []byte) (recordFields, error) {
	text := string(raw)
	cut := strings.LastIndexByte(text, ' ')
	if !strings.HasPrefix(text, "rfb1 ") || cut < len("rfb1") {
		return recordFields{}, fmt.Errorf("not a block record: %q", raw)
	}
	if s.tag(text[:cut]) != text[cut+1:] {
		return recordFields{}, fmt.Errorf("record %q: its tag does not match", raw)
	}
	f := strings.Fields(text[len("rfb1 "):cut])
	if len(f) != 4 {
		return recordFields{}, fmt.Errorf("record %q: %d values, want 4", raw, len(f))
	}
	var v [4]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return recordFields{}, fmt.Errorf("record %q: %v", raw, err)
		}
		v[i] = n
	}
	return recordFields{first: v[0], last: v[1], until: v[2], at: v[3]}, nil
}

// editDigit returns raw with one digit of its UNTIL changed so that it
// says an earlier second (the lowest digit from the hundreds up that is
// not 0, lowered by one: 100 seconds or more earlier), its tag left as it was: the hand edit an
// operator might make to free a block sooner.
func editDigit(raw []byte) ([]byte, error) {
	f := strings.Split(string(raw), " ")
	if len(f) != 6 || f[0] != "rfb1" {
		return nil, fmt.Errorf("not a block record: %q", raw)
	}
	until := []byte(f[3])
	for i := len(until) - 3; i >= 0; i-- {
		if until[i] > '0' && until[i] <= '9' {
			until[i]--
			f[3] = string(until)
			return []byte(strings.Join(f, " ")), nil
		}
	}
	return nil, fmt.Errorf("record %q: no digit to lower", raw)
}
