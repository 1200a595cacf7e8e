package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// JSON strings and nested values end at their own closing quote or
// bracket, whatever escaped quotes and brackets inside strings they hold;
// input that ends inside one is io.ErrUnexpectedEOF.
func TestItemReaderJSONValues(t *testing.T) {
	in := `["a\"b]", {"k": "v\\", "x": ["]", "\"["]}, [1, "}"], "end"]`
	ir, err := newItemReader(strings.NewReader(in), "IDs", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`a"b]`, `JSON {"k":"v\\","x":["]","\"["]}`, `JSON [1,"}"]`, "end"}
	var got []string
	for {
		it, err := ir.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, it.text)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("items of %s:\n got %q\nwant %q", in, got, want)
	}
	for _, cut := range []string{`["abc`, `["a\"`, `[{"k": "v"`, `[["]`} {
		ir, err := newItemReader(strings.NewReader(cut), "IDs", true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ir.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("input %s, cut inside a value: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}
