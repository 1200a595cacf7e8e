// Command modproxy writes a module proxy directory (for GOPROXY=file://DIR)
// that serves every module of the repository's go.work at one version, as
// the real proxy will serve them once that version is tagged.
//
//	go run . -repo ../.. -version v0.2.0 -out DIR
//
// Each module's zip is made from the files git would commit from the working
// tree (tracked and untracked files, less what .gitignore excludes), or, with
// -rev, from that git revision. Nested modules are left out of the modules
// that contain them, and a module without a LICENSE gets the repository's,
// as the proxy does for a tagged subdirectory. The layout is the proxy
// protocol's: <escaped module path>/@v/list, and <version>.info, .mod and
// .zip. For each module modproxy prints the go.sum lines of that version.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

func main() {
	repo := flag.String("repo", ".", "the repository's root directory (holding go.work)")
	version := flag.String("version", "", "the version to serve every module at, e.g. v0.2.0")
	out := flag.String("out", "", "the proxy directory to write")
	rev := flag.String("rev", "", "make the zips from this git revision instead of the working tree")
	flag.Parse()
	if flag.NArg() != 0 || *version == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: modproxy -repo DIR -version vX.Y.Z -out DIR [-rev REV]")
		os.Exit(2)
	}
	if err := run(*repo, *version, *out, *rev); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// mod is one module of the workspace.
type mod struct {
	dir   string // slash-separated, relative to the repository root; "" for the root
	path  string
	gomod []byte
}

func run(repo, version, out, rev string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version (vX.Y.Z)", version)
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	mods, wf, err := workspaceModules(repo)
	if err != nil {
		return err
	}
	if err := checkRequirements(mods, wf, version); err != nil {
		return err
	}
	var files []modzip.File
	if rev == "" {
		files, err = treeFiles(repo)
		if err != nil {
			return err
		}
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for _, m := range mods {
		mv := module.Version{Path: m.path, Version: version}
		if err := module.Check(mv.Path, mv.Version); err != nil {
			return err
		}
		escPath, err := module.EscapePath(mv.Path)
		if err != nil {
			return err
		}
		escVersion, err := module.EscapeVersion(mv.Version)
		if err != nil {
			return err
		}
		vdir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		base := filepath.Join(vdir, escVersion)
		var zipped bytes.Buffer
		if rev != "" {
			gomod, err := gitShow(repo, rev, path.Join(m.dir, "go.mod"))
			if err != nil {
				return err
			}
			m.gomod = gomod
			if err := modzip.CreateFromVCS(&zipped, mv, repo, rev, m.dir); err != nil {
				return err
			}
		} else if err := modzip.Create(&zipped, mv, moduleFiles(files, m.dir)); err != nil {
			return err
		}
		if err := os.WriteFile(base+".zip", zipped.Bytes(), 0o644); err != nil {
			return err
		}
		if _, err := modzip.CheckZip(mv, base+".zip"); err != nil {
			return fmt.Errorf("%s: the zip written does not check: %w", mv, err)
		}
		if err := os.WriteFile(base+".mod", m.gomod, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(base+".info", info, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(vdir, "list"), []byte(version+"\n"), 0o644); err != nil {
			return err
		}
		zipHash, err := dirhash.HashZip(base+".zip", dirhash.Hash1)
		if err != nil {
			return err
		}
		modHash, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(m.gomod)), nil
		})
		if err != nil {
			return err
		}
		fmt.Printf("%s %s %s\n", mv.Path, mv.Version, zipHash)
		fmt.Printf("%s %s/go.mod %s\n", mv.Path, mv.Version, modHash)
	}
	return nil
}

// workspaceModules reads go.work's use directives and each module's go.mod.
func workspaceModules(repo string) ([]mod, *modfile.WorkFile, error) {
	data, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		return nil, nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, nil, err
	}
	var mods []mod
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		if path.IsAbs(dir) || dir == ".." || strings.HasPrefix(dir, "../") {
			return nil, nil, fmt.Errorf("go.work uses %s, outside the repository", u.Path)
		}
		if dir == "." {
			dir = ""
		}
		gomod, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(dir), "go.mod"))
		if err != nil {
			return nil, nil, err
		}
		p := modfile.ModulePath(gomod)
		if p == "" {
			return nil, nil, fmt.Errorf("%s: no module path", path.Join(dir, "go.mod"))
		}
		mods = append(mods, mod{dir: dir, path: p, gomod: gomod})
	}
	if len(mods) == 0 {
		return nil, nil, errors.New("go.work uses no module")
	}
	return mods, wf, nil
}

// checkRequirements checks that no module has a replace directive, that
// every module requires its siblings at the version being released, and that
// go.work replaces a sibling only at that version (by its working tree).
func checkRequirements(mods []mod, wf *modfile.WorkFile, version string) error {
	sibling := map[string]bool{}
	for _, m := range mods {
		sibling[m.path] = true
	}
	var problems []string
	for _, r := range wf.Replace {
		if sibling[r.Old.Path] && r.Old.Version != version {
			problems = append(problems, fmt.Sprintf("go.work:%d: replaces %s at %q, not at the version being released, %s",
				r.Syntax.Start.Line, r.Old.Path, r.Old.Version, version))
		}
	}
	for _, m := range mods {
		name := path.Join(m.dir, "go.mod")
		f, err := modfile.Parse(name, m.gomod, nil)
		if err != nil {
			return err
		}
		for _, r := range f.Replace {
			problems = append(problems, fmt.Sprintf("%s:%d: replace directive (%s => %s): a published module must not have one; go.work ties the modules together",
				name, r.Syntax.Start.Line, r.Old.Path, r.New.Path))
		}
		for _, r := range f.Require {
			if sibling[r.Mod.Path] && r.Mod.Version != version {
				problems = append(problems, fmt.Sprintf("%s:%d: requires %s %s, not the version being released, %s",
					name, r.Syntax.Start.Line, r.Mod.Path, r.Mod.Version, version))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// treeFiles lists the regular files of the working tree that a commit of
// it would hold: tracked files still present and untracked files that are
// not ignored.
func treeFiles(repo string) ([]modzip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	listed, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %v: %s", err, stderr.Bytes())
	}
	seen := map[string]bool{}
	var files []modzip.File
	for _, name := range strings.Split(string(listed), "\x00") {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		full := filepath.Join(repo, filepath.FromSlash(name))
		fi, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted from the tree, not yet from the index
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, treeFile{name: name, full: full, info: fi})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path() < files[j].Path() })
	return files, nil
}

// moduleFiles returns the files under dir, named relative to it, with the
// repository's LICENSE added to a nested module that has none. Files of
// modules nested further are left in: modzip.Create drops them.
func moduleFiles(files []modzip.File, dir string) []modzip.File {
	if dir == "" {
		return files
	}
	var in []modzip.File
	var license modzip.File
	haveLicense := false
	for _, f := range files {
		name := f.Path()
		if name == "LICENSE" {
			license = f
		}
		if rel, ok := strings.CutPrefix(name, dir+"/"); ok {
			tf := f.(treeFile)
			tf.name = rel
			in = append(in, tf)
			haveLicense = haveLicense || rel == "LICENSE"
		}
	}
	if !haveLicense && license != nil {
		in = append(in, license)
	}
	return in
}

// gitShow returns a file's content at a revision.
func gitShow(repo, rev, name string) ([]byte, error) {
	cmd := exec.Command("git", "show", rev+":"+name)
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git show %s:%s: %v: %s", rev, name, err, stderr.Bytes())
	}
	return data, nil
}

type treeFile struct {
	name string // slash-separated, relative to the module's root
	full string
	info fs.FileInfo
}

func (f treeFile) Path() string                 { return f.name }
func (f treeFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f treeFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }
