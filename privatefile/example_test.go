//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package privatefile_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/randflake/randflake/privatefile"
)

// A tokens file of this user's, mode 0600, is read; made readable by
// others, it is refused with the fix.
func ExampleRead() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte("alice 0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		panic(err)
	}

	b, err := privatefile.Read(path, 64<<10)
	if err != nil {
		panic(err)
	}
	fmt.Printf("read %d bytes\n", len(b))
	clear(b) // key material: not kept longer than needed

	os.Chmod(path, 0o644)
	if _, err := privatefile.Read(path, 64<<10); err != nil {
		fmt.Println("refused: mode 0644")
	}
	if _, err := privatefile.ReadPublic(path, 64<<10); err == nil {
		fmt.Println("a certificate may have mode 0644")
	}
	// Output:
	// read 39 bytes
	// refused: mode 0644
	// a certificate may have mode 0644
}
