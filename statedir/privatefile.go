package statedir

import "github.com/randflake/randflake/privatefile"

// Files given by path, such as the fleet secret (LoadSecret), token files
// and TLS keys and certificates, are read by package privatefile, whose
// documentation gives the rules: links are followed only inside the
// file's directory (a Kubernetes Secret volume), every element of the
// path must belong to root or the current user and none may be writable
// by others, and key material must not be readable by others.
//
// The state directory's own files follow stricter rules (no links at all;
// see readStateFile).

// ReadPrivateFile reads a small private file holding key material, as
// privatefile.Read does.
//
// Deprecated: use privatefile.Read, which this calls.
func ReadPrivateFile(path string, limit int64) ([]byte, error) {
	return privatefile.Read(path, limit)
}

// ReadPublicFile reads a small file that must be trusted but need not be
// secret, as privatefile.ReadPublic does.
//
// Deprecated: use privatefile.ReadPublic, which this calls.
func ReadPublicFile(path string, limit int64) ([]byte, error) {
	return privatefile.ReadPublic(path, limit)
}
