package main

import (
	"crypto/sha256"
	"fmt"
	"log/slog"

	"github.com/randflake/randflake/cmd/randflake/internal/server"
	"github.com/randflake/randflake/privatefile"
)

// serve's --issue-tokens-file: the clients that may issue, one "NAME
// TOKEN" a line (server.IssueTokens has the format). It is a private file,
// read with the checks of the secret file, at start and again on SIGHUP
// and whenever its content changes (reload.go). A reload that fails keeps
// the clients of the last good content, logs why and counts in
// randflake_reload_failures_total; no message holds a token.

// maxTokensFile bounds the issue tokens file.
const maxTokensFile = 1 << 20

// issueTokensFile is the issue tokens file of a running serve.
type issueTokensFile struct {
	path string
	set  func(*server.IssueTokens) // makes new tokens current

	reloadState // loaded: the digest of the content of the current tokens
}

// loadIssueTokens reads the file at start.
func loadIssueTokens(path string, log *slog.Logger) (*issueTokensFile, *server.IssueTokens, error) {
	f := &issueTokensFile{path: path, reloadState: reloadState{
		log: log, file: reloadTokens,
		notReloaded: "issue tokens not reloaded; the current clients stay", unchanged: "issue tokens unchanged",
	}}
	tokens, digest, err := f.read()
	if err != nil {
		return nil, nil, err
	}
	f.took(digest)
	log.Info("issue tokens loaded: issuing needs a listed token or a client certificate", "clients", tokens.Len())
	return f, tokens, nil
}

// read reads and parses the file; the digest covers what was read.
func (f *issueTokensFile) read() (*server.IssueTokens, [sha256.Size]byte, error) {
	data, err := privatefile.Read(f.path, maxTokensFile)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("--issue-tokens-file: %w", err)
	}
	defer clear(data)
	digest := sha256.Sum256(data)
	tokens, err := server.ParseIssueTokens(data)
	if err != nil {
		return nil, digest, fmt.Errorf("--issue-tokens-file %s: %w", f.path, err)
	}
	return tokens, digest, nil
}

// reload reads the file again; as tlsFiles.reload, with the clients'
// number in the log instead of the certificate.
func (f *issueTokensFile) reload(trigger string, force bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tokens, digest, err := f.read()
	if f.settle(digest, err, trigger, force) {
		return
	}
	f.set(tokens)
	f.took(digest)
	f.log.Info("issue tokens reloaded", "clients", tokens.Len(), "trigger", trigger)
}
