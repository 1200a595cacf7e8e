package lease

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/randflake/randflake"
)

// Records and the marker are what BlockSource keeps in a BlockStore. Both
// are short lines of text, so an operator can read them, and both end in a
// tag, an HMAC-SHA-256 under a key derived from the fleet secret, so an
// edit made without the secret is seen:
//
//	rfb1 FIRST LAST UNTIL AT TAG
//
// is the record of block FIRST..LAST: no ID on its node IDs carries a
// second after UNTIL, written when the writer's clock read AT.
//
//	rfm1 fleet=K id=ID first=F last=L size=S horizon=H detect=E unknown=U digest=D tag=TAG
//
// is the fleet marker: the ID of the key it is signed under (K, see
// keyID), the store's identity when it was written (ID), the
// fleet's layout (blocks of S node IDs from F to L), the longest promise a
// holder makes (H seconds), the longest a holder issues after its last
// check of its records (E seconds, rule 14), the second U up to which every block's history
// counts as unknown (the store lost history, or went back, before it), and
// D, the exclusive or of the tags of every record in the store. A record
// deleted, edited or replaced by an older one (even with a valid tag)
// changes the tags the reader finds, so D no longer matches. A marker
// written before K or E were added has no fleet or detect field; it is
// read as before, E as 0.

const (
	recordPrefix = "rfb1 "
	markerPrefix = "rfm1 "
	tagBytes     = 16
	maxRecordLen = 512
)

// recordKey derives the key of record tags from the fleet secret.
func recordKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("randflake lease records v1"))
	return m.Sum(nil)
}

// tagOf returns the tag of a record's or marker's text before its tag.
func tagOf(key []byte, body string) [tagBytes]byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	var t [tagBytes]byte
	copy(t[:], m.Sum(nil))
	return t
}

// keyID names the key of a fleet's records and markers without revealing
// it: 8 bytes of its HMAC of a fixed text, in hex. The marker carries it
// beside its tag, so that a marker signed under another fleet's secret is
// told apart from an edited one of this fleet (whose key ID is this
// fleet's, or gone with the edit).
func keyID(key []byte) string {
	t := tagOf(key, "randflake fleet key id")
	return hex.EncodeToString(t[:8])
}

// errOtherFleet is parseMarker's error for a marker whose key ID is not
// this fleet's.
var errOtherFleet = errors.New("is signed under another fleet's secret")

// digestOf returns the contribution of raw record bytes to the marker's
// digest: the HMAC of the bytes as stored, whatever they hold, so that the
// digest follows exactly what the store keeps.
func digestOf(key []byte, raw []byte) [tagBytes]byte {
	return tagOf(key, "digest "+string(raw))
}

func xorInto(d *[tagBytes]byte, t [tagBytes]byte) {
	for i := range d {
		d[i] ^= t[i]
	}
}

// blockRecord is a block's record.
type blockRecord struct {
	first, last int64
	until       int64 // no ID on the block carries a later second
	at          int64 // the writer's clock when written
}

func formatRecord(key []byte, r blockRecord) []byte {
	body := fmt.Sprintf("%s%d %d %d %d", recordPrefix, r.first, r.last, r.until, r.at)
	t := tagOf(key, body)
	return []byte(body + " " + hex.EncodeToString(t[:]))
}

var errBadRecord = errors.New("fails its check")

// cutTagged splits raw, a record or the marker (what names it in errors),
// at the last sep into its body, which begins with prefix, and its tag.
// Text over maxRecordLen, without the prefix, or whose body would end
// inside the prefix (nothing but the prefix before the tag, or no tag:
// the fields are cut from the body after the prefix) fails.
func cutTagged(raw []byte, prefix, sep, what string) (body, tag string, err error) {
	s := string(raw)
	if len(s) > maxRecordLen || !strings.HasPrefix(s, prefix) {
		return "", "", fmt.Errorf("%w: not %s", errBadRecord, what)
	}
	i := strings.LastIndex(s, sep)
	if i < len(prefix) {
		return "", "", fmt.Errorf("%w: malformed (no tag after the values)", errBadRecord)
	}
	return s[:i], s[i+len(sep):], nil
}

// checkTag checks that tag is the hex of body's tag under key, in
// constant time.
func checkTag(key []byte, body, tag string) error {
	want := tagOf(key, body)
	got, err := hex.DecodeString(tag)
	if err != nil || subtle.ConstantTimeCompare(got, want[:]) != 1 {
		return fmt.Errorf("%w: its tag does not match (edited, or written under another secret)", errBadRecord)
	}
	return nil
}

// parseRecord reads a record of block first..last and checks its tag and
// its values.
func parseRecord(key []byte, raw []byte, first, last int64) (blockRecord, error) {
	body, tag, err := cutTagged(raw, recordPrefix, " ", "a block record")
	if err != nil {
		return blockRecord{}, err
	}
	if err := checkTag(key, body, tag); err != nil {
		return blockRecord{}, err
	}
	f := strings.Fields(body[len(recordPrefix):])
	if len(f) != 4 {
		return blockRecord{}, fmt.Errorf("%w: malformed", errBadRecord)
	}
	var v [4]int64
	for j := range v {
		if v[j], err = strconv.ParseInt(f[j], 10, 64); err != nil {
			return blockRecord{}, fmt.Errorf("%w: malformed", errBadRecord)
		}
	}
	r := blockRecord{first: v[0], last: v[1], until: v[2], at: v[3]}
	if r.first != first || r.last != last {
		return blockRecord{}, fmt.Errorf("%w: it is the record of node IDs %d-%d", errBadRecord, r.first, r.last)
	}
	if !inLifetime(r.until) || !inLifetime(r.at) {
		return blockRecord{}, fmt.Errorf("%w: a second outside the lifetime of Randflake IDs", errBadRecord)
	}
	return r, nil
}

func inLifetime(sec int64) bool { return sec >= randflake.Epoch && sec <= randflake.MaxTimestamp }

// fleetMarker is the marker.
type fleetMarker struct {
	fleet   string // another fleet's key ID, in parseMarker's errOtherFleet
	id      string
	layout  BlockLayout
	horizon int64 // seconds
	detect  int64 // seconds a holder issues after its last check (rule 14)
	unknown int64 // history unknown up to this second
	digest  [tagBytes]byte
}

func formatMarker(key []byte, m fleetMarker) []byte {
	body := fmt.Sprintf("%sfleet=%s id=%s first=%d last=%d size=%d horizon=%d detect=%d unknown=%d digest=%s",
		markerPrefix, keyID(key), url.QueryEscape(m.id), m.layout.FirstNode, m.layout.LastNode, m.layout.Size,
		m.horizon, m.detect, m.unknown, hex.EncodeToString(m.digest[:]))
	t := tagOf(key, body)
	return []byte(body + " tag=" + hex.EncodeToString(t[:]))
}

// parseMarker reads the marker and checks its tag and values. A marker
// whose key ID is another fleet's fails with errOtherFleet before its tag
// is checked, and the marker returned holds that key ID.
func parseMarker(key []byte, raw []byte) (fleetMarker, error) {
	body, tag, err := cutTagged(raw, markerPrefix, " tag=", "a fleet marker")
	if err != nil {
		return fleetMarker{}, err
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(body[len(markerPrefix):]) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return fleetMarker{}, fmt.Errorf("%w: malformed", errBadRecord)
		}
		fields[k] = v
	}
	var m fleetMarker
	if kid, ok := fields["fleet"]; ok && kid != keyID(key) {
		if len(kid) != 16 || strings.Trim(kid, "0123456789abcdef") != "" {
			return fleetMarker{}, fmt.Errorf("%w: malformed fleet key ID", errBadRecord)
		}
		return fleetMarker{fleet: kid}, fmt.Errorf("%w (key ID %s)", errOtherFleet, kid)
	}
	if err := checkTag(key, body, tag); err != nil {
		return fleetMarker{}, err
	}
	if m.id, err = url.QueryUnescape(fields["id"]); err != nil {
		return fleetMarker{}, fmt.Errorf("%w: malformed", errBadRecord)
	}
	nums := []struct {
		name string
		v    *int64
	}{{"first", &m.layout.FirstNode}, {"last", &m.layout.LastNode}, {"size", &m.layout.Size}, {"horizon", &m.horizon}, {"unknown", &m.unknown}}
	for _, n := range nums {
		if *n.v, err = strconv.ParseInt(fields[n.name], 10, 64); err != nil {
			return fleetMarker{}, fmt.Errorf("%w: malformed %s", errBadRecord, n.name)
		}
	}
	if v, ok := fields["detect"]; ok {
		if m.detect, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fleetMarker{}, fmt.Errorf("%w: malformed detect", errBadRecord)
		}
	}
	d, err := hex.DecodeString(fields["digest"])
	if err != nil || len(d) != tagBytes {
		return fleetMarker{}, fmt.Errorf("%w: malformed digest", errBadRecord)
	}
	copy(m.digest[:], d)
	if m.layout.Check() != nil || !inLifetime(m.unknown) || m.horizon < 0 || m.horizon > randflake.MaxTimestamp-randflake.Epoch ||
		m.detect < 0 || m.detect > randflake.MaxTimestamp-randflake.Epoch {
		return fleetMarker{}, fmt.Errorf("%w: impossible values", errBadRecord)
	}
	return m, nil
}
