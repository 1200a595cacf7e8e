package lease

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/randflake/randflake"
)

var (
	recordTestKey  = recordKey([]byte("record-secret-16"))
	recordOtherKey = recordKey([]byte("another-secret16"))
)

// signedBody returns body followed by its tag under key, as formatRecord
// ends a record: a way to write records and markers with any values,
// possible or not.
func signedBody(key []byte, body, sep string) []byte {
	t := tagOf(key, body)
	return []byte(body + sep + hex.EncodeToString(t[:]))
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []blockRecord{
		{first: 0, last: 0, until: randflake.Epoch, at: randflake.Epoch},
		{first: 16, last: 31, until: 1_800_000_000, at: 1_799_999_990},
		{first: randflake.MaxNode - 63, last: randflake.MaxNode, until: randflake.MaxTimestamp, at: randflake.MaxTimestamp},
	} {
		raw := formatRecord(recordTestKey, r)
		got, err := parseRecord(recordTestKey, raw, r.first, r.last)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if got != r {
			t.Fatalf("%q read back as %+v, want %+v", raw, got, r)
		}
		if len(raw) > maxRecordLen {
			t.Fatalf("%q: %d bytes, more than a record may have", raw, len(raw))
		}
	}
}

// Any byte of a record changed, in a value or in the tag, makes it fail
// its check.
func TestRecordEveryByteEdited(t *testing.T) {
	r := blockRecord{first: 16, last: 31, until: 1_800_000_000, at: 1_799_999_990}
	raw := formatRecord(recordTestKey, r)
	for i := range raw {
		edited := bytes.Clone(raw)
		edited[i] = 'x'
		if raw[i] == 'x' {
			edited[i] = 'y'
		}
		if got, err := parseRecord(recordTestKey, edited, r.first, r.last); !errors.Is(err, errBadRecord) {
			t.Errorf("byte %d edited, %q: read as %+v, %v; want it refused", i, edited, got, err)
		}
	}
	// One digit of each value changed, the tag kept, as a hand edit.
	for field := 1; field <= 4; field++ {
		f := strings.Split(string(raw), " ")
		d := []byte(f[field])
		d[len(d)-1] = '0' + (d[len(d)-1]-'0'+1)%10
		f[field] = string(d)
		edited := strings.Join(f, " ")
		if _, err := parseRecord(recordTestKey, []byte(edited), r.first, r.last); !errors.Is(err, errBadRecord) {
			t.Errorf("value %d edited, %q: %v; want it refused", field, edited, err)
		}
	}
}

func TestRecordOtherSecret(t *testing.T) {
	r := blockRecord{first: 16, last: 31, until: 1_800_000_000, at: 1_799_999_990}
	raw := formatRecord(recordOtherKey, r)
	if _, err := parseRecord(recordTestKey, raw, r.first, r.last); !errors.Is(err, errBadRecord) {
		t.Fatalf("a record signed under another secret: %v; want it refused", err)
	}
	m := formatMarker(recordOtherKey, fleetMarker{id: "x", layout: BlockLayout{0, 63, 16}, horizon: 3, unknown: randflake.Epoch})
	got, err := parseMarker(recordTestKey, m)
	if !errors.Is(err, errOtherFleet) || got.fleet != keyID(recordOtherKey) {
		t.Fatalf("a marker signed under another secret: %v (key ID %q); want errOtherFleet with key ID %s", err, got.fleet, keyID(recordOtherKey))
	}
	// Without its key ID (a marker from before key IDs), another
	// secret's marker fails its tag, as an edit does.
	old := regexp.MustCompile(` fleet=[0-9a-f]+`).ReplaceAll(m, nil)
	if _, err := parseMarker(recordTestKey, old); !errors.Is(err, errBadRecord) {
		t.Fatalf("a marker without key ID signed under another secret, %q: %v; want its tag refused", old, err)
	}
	if keyID(recordTestKey) == keyID(recordOtherKey) || len(keyID(recordTestKey)) != 16 {
		t.Errorf("key IDs %q and %q of two secrets: want 16 hex digits each, different", keyID(recordTestKey), keyID(recordOtherKey))
	}
}

// A validly signed record with impossible values is refused.
func TestRecordImpossibleValues(t *testing.T) {
	for _, c := range []struct {
		name string
		r    blockRecord
	}{
		{"another block", blockRecord{first: 32, last: 47, until: 1_800_000_000, at: 1_800_000_000}},
		{"a wider block", blockRecord{first: 16, last: 47, until: 1_800_000_000, at: 1_800_000_000}},
		{"used until before the epoch", blockRecord{first: 16, last: 31, until: randflake.Epoch - 1, at: 1_800_000_000}},
		{"used until after the lifetime", blockRecord{first: 16, last: 31, until: randflake.MaxTimestamp + 1, at: 1_800_000_000}},
		{"written before the epoch", blockRecord{first: 16, last: 31, until: 1_800_000_000, at: 0}},
		{"written after the lifetime", blockRecord{first: 16, last: 31, until: 1_800_000_000, at: 1 << 40}},
		{"negative", blockRecord{first: 16, last: 31, until: -1, at: -1}},
	} {
		raw := formatRecord(recordTestKey, c.r)
		if got, err := parseRecord(recordTestKey, raw, 16, 31); !errors.Is(err, errBadRecord) {
			t.Errorf("%s, %q: read as %+v, %v; want it refused", c.name, raw, got, err)
		}
	}
}

// Malformed records, signed or not, are refused without a panic.
func TestRecordMalformed(t *testing.T) {
	k := recordTestKey
	for _, raw := range [][]byte{
		nil,
		{},
		[]byte("rfb1"),
		[]byte("rfb1 "),
		[]byte("rfb1 x"),
		[]byte("rfb2 16 31 1800000000 1800000000 00"),
		append([]byte("rfb1 "), bytes.Repeat([]byte("1"), 600)...),
		signedBody(k, "rfb1", " "), // a tag and nothing else
		signedBody(k, "rfb1 ", " "),
		signedBody(k, "rfb1 16 31 1800000000", " "),
		signedBody(k, "rfb1 16 31 1800000000 1800000000 7", " "),
		signedBody(k, "rfb1 16 31 soon 1800000000", " "),
		signedBody(k, "rfb1 16 31 99999999999999999999 1800000000", " "),
		signedBody(k, "rfb1 16 31 1800000000 1800000000", "  "),
	} {
		if got, err := parseRecord(k, raw, 16, 31); !errors.Is(err, errBadRecord) {
			t.Errorf("%q: read as %+v, %v; want it refused", raw, got, err)
		}
	}
}

func TestMarkerRoundTrip(t *testing.T) {
	var d [tagBytes]byte
	copy(d[:], "0123456789abcdef")
	for _, m := range []fleetMarker{
		{id: "", layout: BlockLayout{0, randflake.MaxNode, 1}, horizon: 0, unknown: randflake.Epoch},
		{id: "cluster 7/timeline=2&x", layout: BlockLayout{64, 127, 16}, horizon: 31, unknown: 1_800_000_000, digest: d},
		{id: "mem-1", layout: BlockLayout{0, 63, 64}, horizon: randflake.MaxTimestamp - randflake.Epoch, unknown: randflake.MaxTimestamp},
	} {
		raw := formatMarker(recordTestKey, m)
		got, err := parseMarker(recordTestKey, raw)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if got != m {
			t.Fatalf("%q read back as %+v, want %+v", raw, got, m)
		}
	}
}

func TestMarkerEveryByteEdited(t *testing.T) {
	m := fleetMarker{id: "mem-1", layout: BlockLayout{0, 63, 16}, horizon: 3, unknown: 1_800_000_000}
	raw := formatMarker(recordTestKey, m)
	for i := range raw {
		edited := bytes.Clone(raw)
		edited[i] = 'x'
		if raw[i] == 'x' {
			edited[i] = 'y'
		}
		if got, err := parseMarker(recordTestKey, edited); !errors.Is(err, errBadRecord) {
			t.Errorf("byte %d edited, %q: read as %+v, %v; want it refused", i, edited, got, err)
		}
	}
}

// Validly signed markers with impossible or malformed values are refused
// without a panic.
func TestMarkerImpossibleValues(t *testing.T) {
	k := recordTestKey
	ok := "first=0 last=63 size=16 horizon=3 unknown=1800000000 digest=" + strings.Repeat("00", tagBytes)
	for _, body := range []string{
		"rfm1",
		"rfm1 ",
		"rfm1 id=x",
		"rfm1 id=x " + strings.Replace(ok, "size=16", "size=0", 1),
		"rfm1 id=x " + strings.Replace(ok, "size=16", "size=7", 1),
		"rfm1 id=x " + strings.Replace(ok, "last=63", "last=131072", 1),
		"rfm1 id=x " + strings.Replace(ok, "first=0", "first=-16", 1),
		"rfm1 id=x " + strings.Replace(ok, "horizon=3", "horizon=-1", 1),
		"rfm1 id=x " + strings.Replace(ok, "horizon=3", "horizon=9223372036854775807", 1),
		"rfm1 id=x " + strings.Replace(ok, "unknown=1800000000", fmt.Sprintf("unknown=%d", int64(randflake.MaxTimestamp+1)), 1),
		"rfm1 id=x " + strings.Replace(ok, "unknown=1800000000", "unknown=0", 1),
		"rfm1 id=x " + strings.Replace(ok, "digest=00", "digest=0", 1),
		"rfm1 id=x " + strings.Replace(ok, "digest=00", "digest=zz", 1),
		"rfm1 id=%zz " + ok,
		"rfm1 id=x novalue " + ok,
		"rfm1 id=x " + strings.Replace(ok, "unknown=1800000000 ", "", 1),
	} {
		raw := signedBody(k, body, " tag=")
		if got, err := parseMarker(k, raw); !errors.Is(err, errBadRecord) {
			t.Errorf("%q: read as %+v, %v; want it refused", raw, got, err)
		}
	}
	for _, raw := range [][]byte{nil, []byte("rfm1 tag=00"), append([]byte("rfm1 id="), bytes.Repeat([]byte("a"), 600)...)} {
		if got, err := parseMarker(k, raw); !errors.Is(err, errBadRecord) {
			t.Errorf("%q: read as %+v, %v; want it refused", raw, got, err)
		}
	}
}

// The digest follows the bytes: a record replaced by another (an older
// one of the same block, with its valid tag) changes it.
func TestDigestFollowsRecords(t *testing.T) {
	old := formatRecord(recordTestKey, blockRecord{first: 0, last: 15, until: 1_800_000_000, at: 1_799_999_990})
	cur := formatRecord(recordTestKey, blockRecord{first: 0, last: 15, until: 1_800_000_100, at: 1_800_000_090})
	other := formatRecord(recordTestKey, blockRecord{first: 16, last: 31, until: 1_800_000_000, at: 1_799_999_990})
	var a, b [tagBytes]byte
	xorInto(&a, digestOf(recordTestKey, cur))
	xorInto(&a, digestOf(recordTestKey, other))
	xorInto(&b, digestOf(recordTestKey, old))
	xorInto(&b, digestOf(recordTestKey, other))
	if a == b {
		t.Fatal("the digest did not change when a record was rolled back")
	}
	var c [tagBytes]byte
	xorInto(&c, digestOf(recordTestKey, other))
	xorInto(&c, digestOf(recordTestKey, cur))
	if a != c {
		t.Fatal("the digest depends on the order of the records")
	}
	if digestOf(recordTestKey, cur) == digestOf(recordOtherKey, cur) {
		t.Fatal("the digest does not depend on the secret")
	}
}

// FuzzParseRecord: parseRecord and parseMarker never panic on any input,
// as stored or signed under the key (so that the checks after the tag's
// are reached); what they accept holds only possible values, and reads
// back the same once written again.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte("rfb1 16 31 1800000000 1799999990"), true)
	f.Add([]byte("rfb1"), true)
	f.Add([]byte("rfb1 16 31 1800000000 1799999990 00"), false)
	f.Add([]byte("rfm1 id=mem-1 first=0 last=63 size=16 horizon=3 unknown=1800000000 digest=00000000000000000000000000000000"), true)
	f.Add([]byte("rfm1"), true)
	f.Fuzz(func(t *testing.T, data []byte, sign bool) {
		k := recordTestKey
		rec, mark := data, data
		if sign {
			rec, mark = signedBody(k, string(data), " "), signedBody(k, string(data), " tag=")
		}
		if r, err := parseRecord(k, rec, 16, 31); err == nil {
			if r.first != 16 || r.last != 31 || !inLifetime(r.until) || !inLifetime(r.at) {
				t.Fatalf("%q accepted with impossible values %+v", rec, r)
			}
			if again, err := parseRecord(k, formatRecord(k, r), 16, 31); err != nil || again != r {
				t.Fatalf("%q: %+v written again reads as %+v, %v", rec, r, again, err)
			}
		}
		if m, err := parseMarker(k, mark); err == nil {
			if m.layout.Check() != nil || !inLifetime(m.unknown) || m.horizon < 0 {
				t.Fatalf("%q accepted with impossible values %+v", mark, m)
			}
			if again, err := parseMarker(k, formatMarker(k, m)); err != nil || again != m {
				t.Fatalf("%q: %+v written again reads as %+v, %v", mark, m, again, err)
			}
		}
	})
}
