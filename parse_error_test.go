package randflake

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A rejected ID names its input, quoted and cut to a bounded length, says
// what is wrong with it, and still wraps ErrInvalidID.
func TestParseErrorNamesInput(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `randflake: invalid id "": empty`},
		{"xyz!", `randflake: invalid id "xyz!": byte 0 ("x") is not a base32hex digit (0-9, a-v)`},
		{"12 3", `randflake: invalid id "12 3": byte 2 (" ") is not a base32hex digit (0-9, a-v)`},
		{"g000000000000", `randflake: invalid id "g000000000000": a value over 64 bits (an ID of 13 characters begins with 0-f)`},
		{"00000000000000", `randflake: invalid id "00000000000000": longer than the 13 characters of the longest ID`},
		{"é", `randflake: invalid id "é": byte 0 ("\xc3") is not a base32hex digit (0-9, a-v)`},
	} {
		_, err := ParseID(c.in)
		if !errors.Is(err, ErrInvalidID) || err.Error() != c.want {
			t.Errorf("ParseID(%q): %v\nwant %s", c.in, err, c.want)
		}
		if _, err := DecodeString(c.in); err == nil || err.Error() != c.want {
			t.Errorf("DecodeString(%q): %v\nwant %s", c.in, err, c.want)
		}
		var id ID
		if err := id.UnmarshalText([]byte(c.in)); !errors.Is(err, ErrInvalidID) || err.Error() != c.want {
			t.Errorf("UnmarshalText(%q): %v\nwant %s", c.in, err, c.want)
		}
	}

	// A huge input: the message quotes its first 64 bytes and its size.
	huge := strings.Repeat("v", 1<<20)
	_, err := ParseID(huge)
	if !errors.Is(err, ErrInvalidID) {
		t.Fatalf("ParseID of 1 MiB: %v", err)
	}
	msg := err.Error()
	if want := `"` + strings.Repeat("v", 64) + `"... (1048576 bytes)`; !strings.Contains(msg, want) || len(msg) > 200 {
		t.Errorf("ParseID of 1 MiB: %d bytes of message %q; want %s, under 200 bytes", len(msg), msg, want)
	}
	// Cut before a character, never inside one; every byte quoted at most
	// 4 characters long, so even control bytes stay bounded.
	_, err = ParseID(strings.Repeat("a", 63) + "é" + strings.Repeat("\x00", 1000))
	if msg := err.Error(); !strings.Contains(msg, `"`+strings.Repeat("a", 63)+`"... (1065 bytes)`) {
		t.Errorf("cut inside a character: %q", msg)
	}
	_, err = ParseID(strings.Repeat("\x00", 1000))
	if msg := err.Error(); len(msg) > 64*4+120 {
		t.Errorf("control bytes: %d bytes of message", len(msg))
	}

	// The text and JSON forms and InspectString name it too.
	var e struct{ ID ID }
	if err := json.Unmarshal([]byte(`{"ID":"xyz!"}`), &e); !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), `"xyz!"`) {
		t.Errorf("JSON: %v", err)
	}
	var id ID
	if err := id.Scan("xyz!"); !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), `"xyz!"`) {
		t.Errorf("Scan: %v", err)
	}
	g := newTestGenerator(t, 0, newFakeClock(testStart))
	if _, _, _, err := g.InspectString("xyz!"); !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), `"xyz!"`) {
		t.Errorf("InspectString: %v", err)
	}
}

// The input's bytes are copied: a caller reusing its buffer does not
// change an error already returned.
func TestParseErrorCopiesInput(t *testing.T) {
	buf := []byte("xyz!")
	var id ID
	err := id.UnmarshalText(buf)
	copy(buf, "abcd")
	if !strings.Contains(err.Error(), `"xyz!"`) {
		t.Errorf("the error changed with the caller's buffer: %v", err)
	}
}
